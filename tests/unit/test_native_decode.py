"""The C record walker and sample decoder (pmuscope.records.native) give the
numpy reference's arrays on every perf.data file in tests/data, the same
command output, and the same outcome (output or error) on damaged files;
on anything unusual they decline (None) and the numpy path decides."""

from __future__ import annotations

import contextlib
import io
import pathlib
import struct

import numpy as np
import pytest

from pmuscope.cli.main import main as cli_main
from pmuscope.errors import FormatError, PmuscopeError
from pmuscope.kernel import abi
from pmuscope.perfdata import PerfDataFile, synth
from pmuscope.records import AttrTable, DecodeStats, SampleBatch, decode, native
from pmuscope.records.decode import _walk, walk
from pmuscope.records.sample import decode_samples
from tests.conftest import DATA, perfdata_corpus
from tests.fieldfuzz import mutants

pytestmark = pytest.mark.skipif(not native.available(), reason="the native helper is not built here")

S = abi.PerfSample


CORPUS = perfdata_corpus()


def _id(path: str) -> str:
    return str(pathlib.Path(path).relative_to(DATA))


@contextlib.contextmanager
def _path(on: bool):
    old = native.NATIVE_DECODE
    native.NATIVE_DECODE = on
    try:
        yield
    finally:
        native.NATIVE_DECODE = old


def _same_batch(a: SampleBatch, b: SampleBatch) -> None:
    for name in SampleBatch._fields:
        if name == "attrs":
            continue
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name


def _items(path: str, on: bool):
    with _path(on), PerfDataFile(path) as pf:
        table = AttrTable([(a.attr, a.ids) for a in pf.attrs])
        stats = DecodeStats()
        out = []
        try:
            for base, buf in pf.raw_chunks(max_bytes=1 << 16):
                out += list(decode(buf, table, base_offset=base, stats=stats))
        except PmuscopeError as err:
            out.append(("error", str(err)))
        return out, stats


def test_the_corpus_is_there():
    assert len(CORPUS) >= 15


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_decoded_items_are_the_numpy_ones(path):
    got, gstats = _items(path, True)
    ref, rstats = _items(path, False)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert type(a) is type(b)
        if isinstance(a, SampleBatch):
            _same_batch(a, b)
        else:
            assert a == b
    assert gstats == rstats


def _chunks_until_error(pf):
    """The reader's chunks up to a damage it reports (a file of the corpus has one)."""
    try:
        yield from pf.raw_chunks(max_bytes=1 << 16)
    except PmuscopeError:
        return


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_walk_and_samples_are_the_numpy_ones(path):
    """Chunk by chunk: the record walk, and the columns of the samples (the
    C decoder's, where it takes the layout)."""
    taken = 0
    with PerfDataFile(path) as pf:
        table = AttrTable([(a.attr, a.ids) for a in pf.attrs])
        for base, buf in _chunks_until_error(pf):
            c = native.walk(buf)
            r = _walk(buf, base)
            assert c is not None
            assert c[0].dtype == r[0].dtype == np.int64 and np.array_equal(c[0], r[0]) and np.array_equal(c[1], r[1])
            assert c[2] == r[2]
            if not len(r[0]):
                continue
            with _path(True):
                got = decode_samples(buf, c[0], c[1], table, base, DecodeStats())
            with _path(False):
                ref = decode_samples(buf, r[0], r[1], table, base, DecodeStats())
            _same_batch(got, ref)
            taken += native.fixed_layout(table.entries[0].sample_type) is not None
    if "perf-g-small" in path or "sleep.data" in path:
        assert taken  # these go through the C decoder


COMMANDS = [["script"], ["script", "-G"], ["report", "--stdio"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_commands_print_the_same_bytes(path, cmd, capsysbinary):
    outs = []
    for on in (True, False):
        with _path(on):
            rc = cli_main([*cmd, "-i", path, "--no-kernel-symbols"])
        out, err = capsysbinary.readouterr()
        outs.append((rc, out, [ln for ln in err.splitlines() if b"warning" not in ln.lower()]))
    assert outs[0] == outs[1]


SMALL = DATA / "perfdata" / "perf-g-small.data"


def _outcome(path: str) -> tuple[str, object]:
    from pmuscope.profile.model import load_profile
    from pmuscope.profile.script import iter_script_bytes

    try:
        p = load_profile(path, kernel_symbols=False)
        return "ok", b"".join(iter_script_bytes(p))
    except PmuscopeError as err:
        return type(err).__name__, str(err)


def test_damaged_records_give_the_numpy_outcome(tmp_path):
    """Every field of the data section's records (headers, sample words) at
    its edge values: the same script text, or the same error, both ways."""
    import warnings

    data = SMALL.read_bytes()
    path = str(tmp_path / "m.data")
    n = errors = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for what, value, buf in mutants(data, per_type=1):
            if not what.startswith("data "):
                continue
            with open(path, "wb") as f:
                f.write(buf)
            with _path(True):
                got = _outcome(path)
            with _path(False):
                ref = _outcome(path)
            assert got == ref, (what, hex(value))
            n += 1
            errors += got[0] != "ok"
    assert n > 200 and errors > 20


def _chunk(recs: list[bytes]) -> bytes:
    return b"".join(recs)


ST = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD | S.CALLCHAIN


def _table(st=ST, ids=()):
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    return AttrTable([(attr, list(ids))])


def test_walker_declines_what_is_unusual():
    good = _chunk([synth.sample(ST, ip=1, pid=2, tid=3, time=4, cpu=1, period=1, callchain=[5, 6]) for _ in range(3)])
    assert native.walk(good) is not None
    assert native._native.walk_records(good[:-3]) is None  # truncated
    bad = bytearray(good)
    struct.pack_into("<H", bad, 6, 4)  # header.size below the header
    assert native._native.walk_records(bytes(bad)) is None
    struct.pack_into("<H", bad, 6, 0xFFF8)  # runs past the chunk
    assert native._native.walk_records(bytes(bad)) is None
    aux = struct.pack("<IHHQQQII", int(abi.PerfRecord.AUXTRACE), 0, 48, 8, 0, 0, 0, 0) + b"\0" * 8 + b"x" * 8
    assert native._native.walk_records(aux, True) is None  # its payload follows inline
    assert native._native.walk_records(aux[:48]) is not None  # in a chunk of records only, it is one
    many = _chunk([synth.sample(ST, ip=i, pid=2, tid=3, time=4, cpu=1, period=1) for i in range(5000)])
    offs, sizes, side = native.walk(many)  # past the C side's first few thousand offsets
    assert len(offs) == 5000 and not side and offs[-1] == len(many) - sizes[-1]
    # the chunk's own errors still come from the numpy path, offset named
    for buf in (good[:-3], bytes(bad)):
        with pytest.raises(FormatError) as exc:
            walk(buf, 1000)
        assert "byte offset 1" in str(exc.value)


def test_boundary_finder_declines_what_does_not_chain():
    good = _chunk([synth.sample(ST, ip=1, pid=2, tid=3, time=4, cpu=1, period=1, callchain=[5] * k) for k in range(20)])
    size0 = struct.unpack_from("<H", good, 6)[0]
    assert native.next_boundary(good, 0, 1) == size0
    assert native.next_boundary(good, 0, size0) == size0
    assert native.next_boundary(good, 0, len(good)) == len(good)
    odd = bytearray(good)
    struct.pack_into("<H", odd, 6, size0 + 4)  # not a multiple of 8
    assert native.next_boundary(bytes(odd), 0, 100) is None
    assert native.next_boundary(good[:size0 + 8], 0, size0 + 1) is None  # the next record is cut off


def test_sample_decoder_declines_fields_past_the_record():
    table = _table()
    recs = [synth.sample(ST, ip=i, pid=2, tid=3, time=4, cpu=1, period=1, callchain=[5, 6, 7]) for i in range(4)]
    buf = bytearray(_chunk(recs))
    sizes = np.array([len(r) for r in recs], dtype=np.int64)
    offs = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    assert native.sample_columns(bytes(buf), offs, sizes, int(ST)) is not None
    # the second sample's call chain claims more entries than its record holds
    nr_at = int(offs[1]) + 8 + 8 * 5
    struct.pack_into("<Q", buf, nr_at, 50)
    assert native.sample_columns(bytes(buf), offs, sizes, int(ST)) is None
    with pytest.raises(FormatError) as exc:
        decode_samples(bytes(buf), offs, sizes, table, 0, DecodeStats())
    assert f"byte offset {int(offs[1])}" in str(exc.value) and "CALLCHAIN" in str(exc.value)
    # layouts with variable-size fields other than the call chain are not taken
    assert native.fixed_layout(int(ST | S.RAW)) is None and native.fixed_layout(int(ST | S.READ)) is None
    assert native.fixed_layout(int(ST)) == (b"utucuC", (("ip", np.uint64), ("pid", np.int32), ("tid", np.int32),
                                                         ("time", np.uint64), ("cpu", np.int32), ("period", np.uint64)))


def _fixed_sample(st: int, f: dict, callchain: list[int]) -> bytes:
    """A SAMPLE record with every fixed field of ``st``, in kernel order."""
    words = []
    for bit, name in ((S.IDENTIFIER, "id"), (S.IP, "ip"), (S.TID, "tid"), (S.TIME, "time"), (S.ADDR, "addr"),
                      (S.ID, "id"), (S.STREAM_ID, "stream_id"), (S.CPU, "cpu"), (S.PERIOD, "period"),
                      (S.CALLCHAIN, None), (S.WEIGHT, "weight"), (S.DATA_SRC, "data_src"),
                      (S.TRANSACTION, "transaction"), (S.PHYS_ADDR, "phys_addr"), (S.CGROUP, "cgroup"),
                      (S.DATA_PAGE_SIZE, "data_page_size"), (S.CODE_PAGE_SIZE, "code_page_size")):
        if not st & bit:
            continue
        if name is None:
            words += [len(callchain), *callchain]
        elif name == "tid":
            words.append((f["pid"] & 0xFFFFFFFF) | (f["tid"] & 0xFFFFFFFF) << 32)
        elif name == "cpu":
            words.append(f["cpu"] | 0xABCD << 32)  # the reserved half is not the cpu
        else:
            words.append(f[name])
    body = struct.pack(f"<{len(words)}Q", *words)
    return struct.pack("<IHH", int(abi.PerfRecord.SAMPLE), 1, 8 + len(body)) + body


def test_sample_columns_with_identifier_and_every_fixed_field():
    st = int(S.IDENTIFIER | S.IP | S.TID | S.TIME | S.ADDR | S.ID | S.STREAM_ID | S.CPU | S.PERIOD | S.CALLCHAIN
             | S.WEIGHT | S.DATA_SRC | S.TRANSACTION | S.PHYS_ADDR | S.CGROUP | S.DATA_PAGE_SIZE | S.CODE_PAGE_SIZE)
    a1 = abi.perf_event_attr(type=1, config=0, sample_type=st, sample_period=1, sample_id_all=1)
    a2 = abi.perf_event_attr(type=1, config=1, sample_type=st, sample_period=1, sample_id_all=1)
    table = AttrTable([(a1, [11]), (a2, [12])])
    rng = np.random.default_rng(7)
    recs = []
    for i in range(60):
        f = {k: int(rng.integers(0, 1 << 63)) for k in ("ip", "time", "addr", "stream_id", "period", "weight",
                                                        "data_src", "transaction", "phys_addr", "cgroup",
                                                        "data_page_size", "code_page_size")}
        f.update(id=11 + i % 3, pid=-1 if i % 5 == 0 else i, tid=i * 7, cpu=i % 4)
        recs.append(_fixed_sample(st, f, [int(x) for x in rng.integers(0, 1 << 63, size=i % 6)]))
    buf = _chunk(recs)
    assert native.fixed_layout(st) is not None
    items = {}
    for on in (True, False):
        with _path(on):
            stats = DecodeStats()
            items[on] = (list(decode(buf, table, stats=stats)), stats.unknown_id)
    assert items[True][1] == items[False][1] == 20  # id 13 is no attr's
    (got,), (ref,) = items[True][0], items[False][0]
    _same_batch(got, ref)
    assert (got.pid == -1).any() and set(got.cpu.tolist()) <= {0, 1, 2, 3}
    assert set(got.attr_index.tolist()) == {0, 1}


@pytest.mark.parametrize("path", [str(SMALL), str(DATA / "memory" / "cpu-clock-mem-bits.data")], ids=_id)
def test_a_slice_is_the_batch_of_its_records(path):
    """``SampleBatch._slice`` (cut at every FINISHED_ROUND) gives what decoding
    only the records of the slice gives: every column, offsets rebased."""
    with PerfDataFile(path) as pf:
        table = AttrTable([(a.attr, a.ids) for a in pf.attrs])
        base = pf.header.data.offset
        buf = pathlib.Path(path).read_bytes()[base:base + pf.header.data.size]
        offs, sizes, _ = _walk(buf, base)
        whole = decode_samples(buf, offs, sizes, table, base, DecodeStats())
        n = len(whole)
        assert n > 10
        for a, b in ((0, n), (0, 1), (3, n // 2), (n // 2, n), (5, 5), (n - 1, n)):
            part = decode_samples(buf, offs[a:b], sizes[a:b], table, base, DecodeStats()) if b > a else None
            got = whole._slice(a, b)
            assert len(got) == b - a
            if part is not None:
                _same_batch(got, part)
            assert got.__dict__.keys() == whole.__dict__.keys()


def _round_items(path: str, on: bool, callchains: bool):
    from pmuscope.profile._fastload import RoundSource

    with _path(on), PerfDataFile(path) as pf:
        table = AttrTable([(a.attr, a.ids) for a in pf.attrs])
        src = RoundSource(_chunks_until_error(pf), table, callchains=callchains)
        try:
            return list(src), src.stats
        except PmuscopeError as err:
            return [("error", str(err))], src.stats


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_round_source_without_call_chains(path):
    """``RoundSource(callchains=False)`` (for readers that use none): the
    items of ``callchains=True`` without call chains, C and numpy alike."""
    ref, rstats = _round_items(path, False, True)
    for on in (True, False):
        got, gstats = _round_items(path, on, False)
        assert len(got) == len(ref) and gstats == rstats
        for a, b in zip(got, ref):
            assert type(a) is type(b)
            if isinstance(a, SampleBatch):
                assert a.callchain is None and a.callchain_offsets is None
                b.callchain = b.callchain_offsets = None
                _same_batch(a, b)
            else:
                assert a == b


def test_skipped_call_chains_are_still_checked():
    table = _table()
    recs = [synth.sample(ST, ip=i, pid=2, tid=3, time=4, cpu=1, period=1, callchain=[5, 6, 7]) for i in range(4)]
    buf = bytearray(_chunk(recs))
    sizes = np.array([len(r) for r in recs], dtype=np.int64)
    offs = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    got = native.sample_columns(bytes(buf), offs, sizes, int(ST), callchains=False)
    assert got is not None and got[2] is None and got[1]["ip"].tolist() == [0, 1, 2, 3]
    struct.pack_into("<Q", buf, int(offs[2]) + 8 + 8 * 5, 50)  # a chain longer than its record
    assert native.sample_columns(bytes(buf), offs, sizes, int(ST), callchains=False) is None
    for on in (True, False):
        with _path(on), pytest.raises(FormatError, match=f"byte offset {int(offs[2])}.*CALLCHAIN"):
            decode_samples(bytes(buf), offs, sizes, table, 0, DecodeStats(), callchains=False)


def _runs(data: bytes, max_run: int) -> list:
    """The reader's run-mode walk of a whole file's bytes, as (type, offset, length) items,
    and the error it ends with (records before a damaged one still come)."""
    pf = PerfDataFile.__new__(PerfDataFile)
    pos, end = 16, len(data)
    if struct.unpack_from("<Q", data, 8)[0] != 16:  # file mode: the data section
        pos, size = struct.unpack_from("<2Q", data, 40)
        end = min(len(data), pos + size)
    out = []
    try:
        for t, misc, view, off, payload in pf._walk(memoryview(data), pos, end, "<bytes>", max_run):
            out.append((t, misc, off, len(view), None if payload is None else len(payload)))
    except FormatError as err:
        out.append(("error", str(err)))
    return out


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_reader_runs_are_the_python_loops(path):
    """PerfDataFile._walk in run mode: the C loop (``_native.run_walk``) cuts the
    same runs as the Python loop, at every run size, in the data of every file
    (pipe mode: all records after the header)."""
    from pmuscope.perfdata import reader

    with _path(True):
        assert reader._run_walker() is not None
    with _path(False):
        assert reader._run_walker() is None
    data = pathlib.Path(path).read_bytes()
    for max_run in (8, 24, 4096, 1 << 20):
        with _path(True):
            got = _runs(data, max_run)
        with _path(False):
            ref = _runs(data, max_run)
        assert got == ref, max_run


def test_reader_runs_on_damaged_records(tmp_path):
    data = SMALL.read_bytes()
    n = 0
    for what, value, buf in mutants(data, per_type=1):
        if not what.startswith("data "):
            continue
        for max_run in (64, 1 << 20):
            with _path(True):
                got = _runs(buf, max_run)
            with _path(False):
                ref = _runs(buf, max_run)
            assert got == ref, (what, hex(value), max_run)
        n += 1
    assert n > 200
