"""Reading a recording in chunks (``iter_profile_chunks``, what ``script``
streams) gives the samples and the text of reading it whole, on every
perf.data file in tests/data; ``script -G`` reads no call chains and prints
what the whole profile's formatting prints without them."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from pmuscope import _policy
from pmuscope.cli.main import main as cli_main
from pmuscope.errors import PmuscopeError
from pmuscope.profile import model
from pmuscope.profile.model import iter_profile_chunks, join_chunks, load_profile
from pmuscope.profile.script import ScriptFormatter, iter_script_bytes, parse_fields

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

from tests.conftest import DATA, perfdata_corpus


CORPUS = perfdata_corpus()
COLUMNS = ("pid", "tid", "cpu", "time", "period", "event", "comm", "ip", "cpumode", "leaf", "stack",
           "stack_offsets", "frame_ip", "frame_addr", "frame_dso", "frame_sym", "frame_off", "frame_kernel")


def _id(path: str) -> str:
    return str(pathlib.Path(path).relative_to(DATA))


def test_the_corpus_is_there():
    # the files the equality tests below run on (a missing corpus must fail, not pass empty)
    assert len(CORPUS) >= 15
    assert any("perf-g-small" in p for p in CORPUS) and any("fibo.compressed2.pipe" in p for p in CORPUS)


def _errors(text):
    """stderr without warning lines (Python prints a warning once per process)."""
    if isinstance(text, bytes):
        return [ln for ln in text.splitlines() if b"warning:" not in ln]
    return [ln for ln in text.splitlines() if "warning:" not in ln]


def _whole(path, **kw):
    try:
        return load_profile(path, kernel_symbols=False, **kw), None
    except PmuscopeError as err:
        return None, str(err)


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "numpy"])
@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("size", [1, 7, 4096])
def test_chunks_joined_are_the_whole_profile(path, size, native, monkeypatch):
    monkeypatch.setenv("PMUSCOPE_NATIVE_RESOLVE", native)  # the C walk and frame cache, or numpy's
    whole, err = _whole(path, keep_raw=True)
    if err is not None:
        with pytest.raises(PmuscopeError) as exc:
            list(iter_profile_chunks(path, kernel_symbols=False, keep_raw=True, chunk_samples=size))
        assert str(exc.value) == err
        return
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, keep_raw=True, chunk_samples=size))
    assert sum(len(c) for c in chunks) == len(whole)
    joined = join_chunks(chunks)
    for name in COLUMNS:
        a, b = getattr(joined, name), getattr(whole, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert joined.comms == whole.comms
    if whole.raw is not None:
        assert np.array_equal(joined.raw, whole.raw) and np.array_equal(joined.raw_offsets, whole.raw_offsets)
    # chunks one after another are in time order, as the whole profile is
    if whole.has_time:
        t = np.concatenate([c.time for c in chunks])
        assert np.array_equal(t, whole.time)


VARIANTS = [[], ["-G"], ["-F", "comm,tid,ip,sym"], ["-G", "-F", "comm,pid,tid,cpu,time,event,ip,sym,symoff,dso,period"],
            ["-F", "comm,tid,time,event,trace"], ["--comm", "perf"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", VARIANTS, ids=lambda a: " ".join(a) or "default")
@pytest.mark.parametrize("native", ["1", "0"], ids=["C text", "Python text"])
def test_streamed_script_is_the_whole_profile_text(path, args, native, capsysbinary, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)  # read as the commands read
    monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", native)  # the formatter, in both commands and the reference
    fields = parse_fields(args[args.index("-F") + 1]) if "-F" in args else None
    whole, err = _whole(path, keep_raw=fields is None or "trace" in fields)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 5)  # many chunks, rounds cut anywhere
    rc = cli_main(["script", "-i", path, "--no-kernel-symbols", *args])
    out, cerr = capsysbinary.readouterr()
    monkeypatch.setenv("PMUSCOPE_SCRIPT_STREAM", "0")  # the command's reference path: the whole profile
    rc_ref = cli_main(["script", "-i", path, "--no-kernel-symbols", *args])
    out_ref, cerr_ref = capsysbinary.readouterr()
    assert (rc, out, _errors(cerr)) == (rc_ref, out_ref, _errors(cerr_ref))
    if err is not None:
        assert rc != 0 and err.encode() in cerr
        return
    missing = [f for f, have in (("cpu", whole.has_cpu), ("time", whole.has_time)) if fields and f in fields and not have]
    if missing and len(whole):  # perf refuses a field the samples do not have
        assert rc == 1 and f"PERF_SAMPLE_{missing[0].upper()}".encode() in cerr and not out
        return
    assert rc == 0
    if "--comm" in args:
        whole = whole.filter(comms=[args[args.index("--comm") + 1]])
    ref = b"".join(iter_script_bytes(whole, fields, callchain="-G" not in args))
    assert out == ref
    if len(whole):
        assert out


@pytest.mark.parametrize("path", [p for p in CORPUS if "perf-g-small" in p or "callgraph" in p], ids=_id)
def test_no_callchain_reads_leaves_only(path):
    full = load_profile(path, kernel_symbols=False)
    bare = load_profile(path, kernel_symbols=False, callchain=False)
    assert full.has_callchain and not bare.has_callchain and len(bare.stack) == 0
    assert len(bare.frame_ip) < len(full.frame_ip)  # the chains' frames were never resolved
    for name in ("pid", "tid", "time", "period", "comm", "ip"):
        assert np.array_equal(getattr(bare, name), getattr(full, name))
    assert np.array_equal(bare.frame_ip[bare.leaf], full.frame_ip[full.leaf])
    assert bare.frame_names(bare.leaf) == full.frame_names(full.leaf)
    a = b"".join(iter_script_bytes(bare, None, callchain=False))
    b = b"".join(iter_script_bytes(full, None, callchain=False))
    assert a == b


def test_formatter_builds_each_frame_text_once():
    path = next(p for p in CORPUS if "fibo.compressed2.pipe" in p)  # a recording of many rounds
    fmt = ScriptFormatter()
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3))
    assert len(chunks) > 3
    text = b"".join(b"".join(fmt.format(c)) for c in chunks)
    assert len(fmt._texts) == len(chunks[-1].frame_ip)
    assert text == b"".join(iter_script_bytes(load_profile(path, kernel_symbols=False)))


REPORT_VARIANTS = [["--stdio"], ["--stdio", "--no-children"], ["--json"], ["--json", "--children"],
                   ["--stdio", "--sort", "pid,cpu,sym"], ["--stdio", "--sort", "tid,dso", "-n"],
                   ["--stdio", "-g", "caller"], ["--stdio", "--max-stack", "2"], ["--stdio", "-g", "fractal,0.5"],
                   ["--stdio", "--comm", "perf"], ["--stdio", "--percent-limit", "5"], ["--stdio", "--cpu", "0"],
                   ["--json", "--time", ",99999999"], ["--stdio", "-G", "-n"],
                   ["--stdio", "--no-children", "-g", "none"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", REPORT_VARIANTS, ids=" ".join)
def test_collapsed_report_is_the_whole_profile_report(path, args, capsys, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)  # read as the commands read
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)  # chunks of 8 samples
    from pmuscope.profile import collapse

    seen = []
    real = collapse.Collapser.profile

    def spy(self, **kw):
        prof = real(self, **kw)
        seen.append(prof)
        return prof
    monkeypatch.setattr(collapse.Collapser, "profile", spy)
    rc = cli_main(["report", "-i", path, "--no-kernel-symbols", *args])
    out, err = capsys.readouterr()
    monkeypatch.setenv("PMUSCOPE_REPORT_STREAM", "0")  # the reference: every sample held
    rc_ref = cli_main(["report", "-i", path, "--no-kernel-symbols", *args])
    out_ref, err_ref = capsys.readouterr()
    assert (rc, out, _errors(err)) == (rc_ref, out_ref, _errors(err_ref))
    if rc == 0:
        assert out and len(seen) == 1  # the collapsed path ran
        monkeypatch.setattr(_policy, "STRICT_READS", False)  # the command set it back
        whole = load_profile(path, kernel_symbols=False)
        if not {"--comm", "--cpu", "--time"} & set(args) and len(whole):  # unfiltered: every sample counted once
            assert seen[0].nr_samples == len(whole) and len(seen[0]) <= len(whole)
            assert int(seen[0].period.sum()) == int(whole.period.sum())


def test_collapse_merges_rows_and_chains():
    from pmuscope.profile.collapse import collapse_chunks

    path = next(p for p in CORPUS if "perf-g-small" in p)
    whole = load_profile(path, kernel_symbols=False)
    col = collapse_chunks(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3))
    assert len(col) < len(whole) and col.nr_samples == len(whole)
    # each row is a group of identical samples: same chain, same leaf, periods summed
    key = lambda p, i: (int(p.event[i]), int(p.comm[i]), int(p.pid[i]), int(p.tid[i]), int(p.cpu[i]),
                        int(p.leaf[i]), p.stack[p.stack_offsets[i]:p.stack_offsets[i + 1]].tobytes())
    want: dict = {}
    for i in range(len(whole)):
        k = key(whole, i)
        per, n = want.get(k, (0, 0))
        want[k] = (per + int(whole.period[i]), n + 1)
    got = {key(col, i): (int(col.period[i]), int(col.count[i])) for i in range(len(col))}
    assert got == want
    # rows in the order of their first sample
    firsts = {}
    for i in range(len(whole)):
        firsts.setdefault(key(whole, i), i)
    assert [firsts[key(col, i)] for i in range(len(col))] == sorted(firsts.values())


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", [["-f", "pprof"], ["-f", "speedscope"], ["-f", "folded"],
                                  ["-f", "folded", "--event", "samples"], ["-f", "pprof", "--comm", "perf"]],
                         ids=" ".join)
def test_collapsed_export_is_the_whole_profile_export(path, args, capsysbinary, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)  # chunks of 8 samples
    from pmuscope.profile import collapse

    made = []
    real = collapse.Collapser.profile
    monkeypatch.setattr(collapse.Collapser, "profile", lambda self, **kw: made.append(1) or real(self, **kw))
    rc = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", *args])
    out, err = capsysbinary.readouterr()
    monkeypatch.setenv("PMUSCOPE_EXPORT_STREAM", "0")  # the reference: every sample held
    rc_ref = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", *args])
    out_ref, err_ref = capsysbinary.readouterr()
    assert (rc, out, _errors(err)) == (rc_ref, out_ref, _errors(err_ref))
    if rc == 0:
        assert made == [1]  # the collapsed path ran


def test_collapsed_export_of_a_damaged_time_is_the_whole_profile_export(tmp_path, capsysbinary, monkeypatch):
    """Damaged sample times: 2^64 - 1, which the export's time column holds as -1
    (the collapsed path's newest time compared it unsigned and wrote a duration of
    2^64 into pprof's int64 field), and times older than the first sample's (its
    oldest time was the first row's, the duration too short)."""
    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.writer import PerfDataWriter

    monkeypatch.setattr(_policy, "STRICT_READS", False)
    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.PERIOD
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    path = str(tmp_path / "t.data")
    recs = [synth.comm(7, 7, "prog", sample_id=synth.sample_id(st, pid=7, tid=7, time=1))]
    # one ip: the samples collapse into one row (its time: the first sample's)
    recs += [synth.sample(st, ip=0x1000, pid=7, tid=7, time=t, period=1000)
             for t in (100, 300, (1 << 64) - 1, 50, 1 << 63, 500)]
    with PerfDataWriter(path, [(attr, [], "cpu-clock")], host=False) as w:
        w.write(b"".join(recs))
    outs = []
    for stream in ("1", "0"):
        monkeypatch.setenv("PMUSCOPE_EXPORT_STREAM", stream)
        rc = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", "-f", "pprof"])
        outs.append((rc, capsysbinary.readouterr().out))
    assert outs[0] == outs[1] and outs[0][0] == 0


@pytest.mark.parametrize("native", ["1", "0"], ids=["native-collapse", "numpy-collapse"])
def test_final_profile_is_the_profile_and_releases_the_collapser(native, monkeypatch):
    """``profile(final=True)`` (export: the rows read once, the tables freed): the
    same columns as ``profile()``; the first event's periods and the newest time
    stay, adding or asking again is an error."""
    from pmuscope.profile.collapse import Collapser

    monkeypatch.setenv("PMUSCOPE_NATIVE_RESOLVE", native)
    path = next(p for p in CORPUS if "perf-g-small" in p)
    cols = [Collapser(), Collapser(), Collapser()]
    for c in iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3):
        for col in cols:
            col.add(c)
    want, got = cols[0].profile(), cols[1].profile(final=True)
    # stacks=False: the rows' stacks are left as the interned chains and their ids
    bare = cols[2].profile(final=True, stacks=False)
    assert len(bare.stack) == 0 and len(bare.stack_offsets) == len(want) + 1
    assert np.array_equal(cols[2].row_chains, cols[0].row_chains)
    cfr, coff = cols[2].chain_stacks
    assert [cfr[coff[j]:coff[j + 1]].tolist() for j in cols[2].row_chains.tolist()] == \
        [want.stack[want.stack_offsets[i]:want.stack_offsets[i + 1]].tolist() for i in range(len(want))]
    with pytest.raises(ValueError, match="final=True"):
        cols[0].profile(stacks=False)
    assert len(got) == len(want) > 0
    for name in (*COLUMNS, "count"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert cols[1].time_max == cols[0].time_max
    # the rows' chain ids (export groups stacks by them): equal exactly when the stacks are
    ids = cols[1].row_chains
    assert ids is not None and np.array_equal(ids, cols[0].row_chains) and len(ids) == len(got)
    rows = [got.stack[got.stack_offsets[i]:got.stack_offsets[i + 1]].tobytes() for i in range(len(got))]
    first: dict = {}
    assert all(first.setdefault(c, r) == r for c, r in zip(ids.tolist(), rows))
    assert len(set(first.values())) == len(first) > 1
    assert all(np.array_equal(a, b) for a, b in zip(cols[1].period_histogram(), cols[0].period_histogram()))
    assert (cols[1]._ncol, cols[1]._chains, cols[1]._parts) == (None, [], [])
    with pytest.raises(ValueError, match="released"):
        cols[1].profile()
    with pytest.raises(ValueError, match="released"):
        cols[1].add(want)
    assert len(cols[0].profile()) == len(want)  # not final: asked again, the same rows


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("aggregate", [True, False], ids=["aggregate", "no-aggregate"])
def test_streamed_pprof_is_the_whole_message_gzipped(path, aggregate, tmp_path, monkeypatch):
    """pprof.dump / write (the samples encoded and compressed a batch at a time)
    against the row loop's whole message compressed at once by gzip: the same
    bytes, with batches of 1 and 3 rows and the default."""
    import gzip

    from pmuscope.export import files, pprof

    monkeypatch.setattr(_policy, "STRICT_READS", False)
    try:
        ep, _event = files.load(path, kernel_symbols=False, aggregate=aggregate)
    except PmuscopeError:
        pytest.skip("not exportable (the CLI tests check its error)")
    monkeypatch.setenv("PMUSCOPE_EXPORT_VECTOR", "0")
    want = gzip.compress(pprof.encode(ep), compresslevel=6, mtime=0)
    monkeypatch.delenv("PMUSCOPE_EXPORT_VECTOR")
    for batch in (1, 3, pprof.SAMPLE_BATCH):
        monkeypatch.setattr(pprof, "SAMPLE_BATCH", batch)
        pieces = list(pprof.iter_encode(ep))  # sample types, a piece per batch, the rest
        assert len(pieces) == len(ep.sample_types) + -(-len(ep) // batch) + 1
        assert b"".join(pieces) == gzip.decompress(want)
        assert pprof.dumps(ep) == want
        out = tmp_path / f"{batch}.pb.gz"
        assert pprof.write(ep, str(out)) == str(out) and out.read_bytes() == want


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_streamed_speedscope_and_folded_are_the_reference(path, tmp_path, monkeypatch):
    """speedscope's JSON written in pieces (rows grouped with numpy, stacks as text a
    batch at a time) against json.dumps of to_speedscope's document
    (``PMUSCOPE_EXPORT_VECTOR=0``), and folded stacks made a batch of rows at a
    time against one batch: the same text, with batches of 1 and 3 rows and the default."""
    from pmuscope.export import files, model as em, speedscope

    monkeypatch.setattr(_policy, "STRICT_READS", False)
    try:
        ep, _event = files.load(path, kernel_symbols=False)
    except PmuscopeError:
        pytest.skip("not exportable (the CLI tests check its error)")
    kinds = [None, *range(len(ep.sample_types))]
    monkeypatch.setenv("PMUSCOPE_EXPORT_VECTOR", "0")
    want = {k: speedscope.dumps(ep, sample_types=None if k is None else [k]) for k in kinds}
    monkeypatch.delenv("PMUSCOPE_EXPORT_VECTOR")
    monkeypatch.setattr(em, "FOLD_BATCH", max(len(ep), 1))
    folded = [ep.folded(k, comm=c) for k in range(len(ep.sample_types)) for c in (False, True)]
    for batch in (1, 3, speedscope.ROW_BATCH):
        monkeypatch.setattr(speedscope, "ROW_BATCH", batch)
        monkeypatch.setattr(em, "FOLD_BATCH", batch)
        for k in kinds:
            assert speedscope.dumps(ep, sample_types=None if k is None else [k]) == want[k]
        out = tmp_path / f"{batch}.json"
        assert speedscope.write(ep, str(out)) == str(out) and out.read_text() == want[None]
        got = [ep.folded(k, comm=c) for k in range(len(ep.sample_types)) for c in (False, True)]
        assert [list(f.items()) for f in got] == [list(f.items()) for f in folded]


def test_weighted_median_is_numpy_median():
    from pmuscope.profile.collapse import _histogram, weighted_median

    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 4, 9, 10, 1001):
        for hi in (3, 1000, 1 << 40):
            v = rng.integers(0, hi, n).astype(np.uint64)
            u, c = _histogram(v, None)
            assert weighted_median(u, c) == float(np.median(v))


def _rounds_file(tmp_path, late: bool):
    """Samples in rounds: 100, 300 | (flushed) | 200 when ``late`` (older than one
    already flushed: perf warns and delivers it after), else 400."""
    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.writer import PerfDataWriter

    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.PERIOD
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    path = tmp_path / ("late.data" if late else "ordered.data")
    recs = [synth.comm(7, 7, "prog", sample_id=synth.sample_id(st, pid=7, tid=7, time=1)),
            synth.sample(st, ip=0x1000, pid=7, tid=7, time=100), synth.sample(st, ip=0x1010, pid=7, tid=7, time=300),
            synth.finished_round(), synth.finished_round(),
            synth.sample(st, ip=0x1020, pid=7, tid=7, time=200 if late else 400),
            synth.finished_round(), synth.finished_round()]
    with PerfDataWriter(str(path), [(attr, [], "cpu-clock")], host=False) as w:
        w.write(b"".join(recs))
    return str(path)


@pytest.mark.parametrize("late", [False, True])
def test_script_streams_in_order_and_warns_of_a_late_sample(tmp_path, capsysbinary, monkeypatch, late):
    path = _rounds_file(tmp_path, late)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)
    chunks = list(iter_profile_chunks(path, kernel_symbols=False))
    assert [c.time.tolist() for c in chunks if len(c)] == ([[100, 300], [200]] if late else [[100, 300], [400]])
    assert cli_main(["script", "-i", path, "--no-kernel-symbols", "-F", "ip"]) == 0
    out, err = capsysbinary.readouterr()
    ips = [int(ln, 16) for ln in out.decode().split()]
    if late:
        # printed as it came (perf too delivers it after the flushed round), with a warning
        assert ips == [0x1000, 0x1010, 0x1020] and b"older than some already printed" in err
        whole = load_profile(path, kernel_symbols=False)
        assert whole.time.tolist() == [100, 200, 300]  # the whole profile sorts it in
    else:
        assert ips == [0x1000, 0x1010, 0x1020] and b"warning" not in err


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_released_chunks_hold_the_same_records(path, monkeypatch):
    # pages handed over are dropped once the next chunk is asked for: the chunks'
    # bytes (read before moving on) and the records are those of a plain read
    from pmuscope.perfdata import PerfDataFile

    monkeypatch.setattr(_policy, "STRICT_READS", False)

    def read(release):
        with PerfDataFile(path) as pf:
            try:
                return [(off, bytes(c)) for off, c in pf.raw_chunks(max_bytes=4096, release=release)], None
            except PmuscopeError as err:
                return None, str(err)

    assert read(True) == read(False)


def _script(path, args, capsysbinary, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = cli_main(["script", "-i", path, "--no-kernel-symbols", *args])
    out, err = capsysbinary.readouterr()
    for k in env:
        monkeypatch.delenv(k)
    return rc, out, _errors(err)


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", [[], ["-G"], ["-F", "comm,tid,time,ip,sym,dso"]],
                         ids=lambda a: " ".join(a) or "default")
@pytest.mark.parametrize("rounds", ["1", "7", "100000"])
def test_rounds_resolved_together_print_the_same_text(path, args, rounds, capsysbinary, monkeypatch):
    # script resolves several FINISHED_ROUNDs in one step: the text is that of the
    # rounds one by one and of the whole profile (the reference path)
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 5)
    together = _script(path, args, capsysbinary, monkeypatch, {"PMUSCOPE_SCRIPT_ROUND_SAMPLES": rounds})
    one_by_one = _script(path, args, capsysbinary, monkeypatch, {"PMUSCOPE_SCRIPT_ROUND_SAMPLES": "0"})
    ref = _script(path, args, capsysbinary, monkeypatch, {"PMUSCOPE_SCRIPT_STREAM": "0"})
    assert together == one_by_one == ref


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "numpy"])
@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("rounds", [1, 7, 4096])
def test_rounds_together_give_the_same_samples_and_frames(path, rounds, native, monkeypatch):
    monkeypatch.setenv("PMUSCOPE_NATIVE_RESOLVE", native)
    # the same samples in the same order with the same frames and comms; only the
    # ids (the order new frames and comms are met) may differ
    whole, err = _whole(path)
    if err is not None:
        with pytest.raises(PmuscopeError) as exc:
            list(iter_profile_chunks(path, kernel_symbols=False, round_samples=rounds))
        assert str(exc.value) == err
        return
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3, round_samples=rounds))
    joined = join_chunks(chunks)
    for name in ("pid", "tid", "cpu", "time", "period", "event", "ip", "cpumode", "stack_offsets"):
        assert np.array_equal(getattr(joined, name), getattr(whole, name)), name
    assert [joined.comms[i] for i in joined.comm.tolist()] == [whole.comms[i] for i in whole.comm.tolist()]
    assert joined.frame_names(joined.leaf) == whole.frame_names(whole.leaf)
    assert joined.frame_names(joined.stack) == whole.frame_names(whole.stack)
    for col in ("frame_ip", "frame_addr", "frame_dso", "frame_off", "frame_kernel"):
        assert np.array_equal(getattr(joined, col)[joined.stack], getattr(whole, col)[whole.stack]), col
    if whole.has_time:
        assert np.array_equal(np.concatenate([c.time for c in chunks]), whole.time)


@pytest.mark.parametrize("late", [False, True])
def test_rounds_together_keep_a_late_sample_after_its_round(tmp_path, monkeypatch, late):
    # a sample older than a round put off makes that round resolve first: the
    # chunks are those of the rounds one by one
    path = _rounds_file(tmp_path, late)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, round_samples=1000))
    assert [c.time.tolist() for c in chunks if len(c)] == ([[100, 300], [200]] if late else [[100, 300, 400]])


def test_rounds_together_name_a_fork_of_an_unnamed_thread_as_one_by_one(tmp_path):
    # thread 5 has no COMM: its sample names it ":5" once its round is resolved, and a
    # FORK from it in a later round names the child after it; resolved in one step
    # the FORK would come first and the child be ":6"
    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.writer import PerfDataWriter

    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.PERIOD
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    path = str(tmp_path / "fork.data")
    sid = synth.sample_id(st, pid=5, tid=5, time=20)
    recs = [synth.sample(st, ip=0x1000, pid=5, tid=5, time=10), synth.finished_round(),
            synth.sample(st, ip=0x1000, pid=5, tid=5, time=15), synth.finished_round(),
            synth.fork(6, 5, 6, 5, 20, sample_id=sid), synth.sample(st, ip=0x1010, pid=6, tid=6, time=30),
            synth.finished_round(), synth.finished_round()]
    with PerfDataWriter(path, [(attr, [], "cpu-clock")], host=False) as w:
        w.write(b"".join(recs))

    def comms(rounds):
        chunks = list(iter_profile_chunks(path, kernel_symbols=False, round_samples=rounds))
        p = join_chunks(chunks)
        return [p.comms[i] for i in p.comm.tolist()]

    assert comms(0) == [":5", ":5", ":5"]
    assert comms(1000) == comms(0)


def test_junk_addresses_resolve_in_no_process(tmp_path):
    # an address no user mapping can hold (>= 2^56) is unknown in every process, even
    # one with a perf-PID.map: the frame does not depend on which process showed it first
    from pmuscope.symbols.symbolizer import Symbolizer

    (tmp_path / "perf-8.map").write_text("1000 100 jitted\n")

    def first_by(order):
        b = model.ProfileBuilder([], symbolizer=Symbolizer(tmp_dir=str(tmp_path), kernel=False))
        pids = np.array(order, dtype=np.int64)
        ips = np.full(len(order), 0xDFDFDFDF00000000, dtype=np.uint64)
        fid = b._frames_for(pids, ips, np.zeros(len(order), dtype=bool))
        f = b._frame_columns()
        return {int(f["dso"][i]) for i in fid.tolist()}, b

    (d8, b8), (d9, b9) = first_by([8, 9]), first_by([9, 8])
    assert d8 == d9 == {-1}
    # the process itself still names its unmapped (not junk) addresses from its perf map
    fid = b8._frames_for(np.array([8], np.int64), np.array([0x1010], np.uint64), np.array([False]))
    assert b8._frame_columns()["dso"][fid[0]] >= 0


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", [["-f", "pprof"], ["-f", "pprof", "--no-aggregate"], ["-f", "speedscope"],
                                  ["-f", "speedscope", "--event", "samples"]], ids=" ".join)
def test_vectorized_pprof_is_the_row_loop_pprof(path, args, capsysbinary, monkeypatch):
    """The numpy pprof writer (grouping, samples, locations, strings) against the
    row-by-row reference, ``PMUSCOPE_EXPORT_VECTOR=0``: the same bytes."""
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    rc = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", *args])
    out, err = capsysbinary.readouterr()
    monkeypatch.setenv("PMUSCOPE_EXPORT_VECTOR", "0")
    rc_ref = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", *args])
    out_ref, err_ref = capsysbinary.readouterr()
    assert (rc, out, _errors(err)) == (rc_ref, out_ref, _errors(err_ref))
