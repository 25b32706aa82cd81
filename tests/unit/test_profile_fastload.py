"""The fast paths of pmuscope.profile._fastload give what the general code gives."""

from __future__ import annotations

import numpy as np

from pmuscope.kernel import abi
from pmuscope.perfdata import PerfDataFile, PerfDataWriter, synth
from pmuscope.profile import load_profile
from pmuscope.profile._fastload import _parse_core, load_kernel_symbols, plain_data_chunks
from pmuscope.records import AttrTable, RecordSource
from pmuscope.symbols import KERNEL_DSO, KernelSymbols

KALLSYMS = (
    "ffffffff81000000 T _stext\n"
    "ffffffff81000100 t helper\n"
    "ffffffff81000100 T alias_at_same_address\n"
    "ffffffff81000200 r some_rodata\n"
    "ffffffff81000300 D a_data_symbol\n"
    "ffffffff81000400 W weak_fn\n"
    "ffffffffc0001000 t mod_fn\t[mymod]\n"
    "ffffffffc0001100 T mod_other\t[mymod]\n"
)
MODULES = "mymod 16384 0 - Live 0xffffffffc0001000\n"


def _same(a, b):
    assert np.array_equal(a.starts, b.starts) and np.array_equal(a.ends, b.ends)
    assert [a.name(i) for i in range(len(a))] == [b.name(i) for i in range(len(b))]


def test_bulk_kallsyms_equals_the_line_parser(tmp_path):
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    (tmp_path / "modules").write_text(MODULES)
    fast = load_kernel_symbols(str(tmp_path))
    ref = KernelSymbols.parse(KALLSYMS, MODULES)
    assert sorted(fast.tables) == sorted(ref.tables) == [KERNEL_DSO, "[mymod]"]
    for dso in ref.tables:
        _same(fast.tables[dso], ref.tables[dso])
    assert (fast.kernel_start, fast.kernel_end) == (ref.kernel_start, ref.kernel_end)
    assert [m.name for m in fast.modules] == ["mymod"]
    # the rodata symbol is filtered like perf's symbol_type__filter
    assert "some_rodata" not in fast.tables[KERNEL_DSO].names()


def test_unusual_kallsyms_falls_back(tmp_path):
    assert _parse_core(b"81000000 T short_address\n") is None  # 32-bit layout: the line parser handles it
    hidden = "0000000000000000 T a\n0000000000000000 T b\n"
    (tmp_path / "kallsyms").write_text(hidden)
    ks = load_kernel_symbols(str(tmp_path))
    assert ks.addresses_hidden


def _write(tmp_path, nsamples):
    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.PERIOD
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    path = tmp_path / "x.data"
    w = PerfDataWriter(str(path), [(attr, [], "cpu-clock")], host=False)
    recs = [synth.comm(7, 7, "prog", sample_id=synth.sample_id(st, pid=7, tid=7, time=1))]
    recs += [synth.sample(st, ip=0x1000 + i % 64, pid=7, tid=7, time=10 + i) for i in range(nsamples)]
    w.write(b"".join(recs))
    w.close()
    return path


def test_plain_chunks_cut_at_record_boundaries(tmp_path, monkeypatch):
    import pmuscope.profile._fastload as fl

    path = _write(tmp_path, 5000)
    monkeypatch.setattr(fl, "CHUNK_BYTES", 4096)  # many chunks
    with PerfDataFile(str(path)) as pf:
        chunks = list(plain_data_chunks(pf, str(path)))
        assert len(chunks) > 10
        assert chunks[0][0] == pf.header.data.offset
        assert sum(len(c) for _, c in chunks) == pf.header.data.size
        src = RecordSource(chunks, AttrTable([(a.attr, a.ids) for a in pf.attrs]))
        assert sum(len(b) for b in src.batches()) == 5000
        ref = pf.records()
        assert sum(len(b) for b in ref.batches()) == 5000
        del chunks, src
    p = load_profile(str(path), kernel_symbols=False)
    assert len(p) == 5000 and p.comms[p.comm[0]] == "prog"
    assert (np.diff(p.time.astype(np.int64)) > 0).all()


def test_chunk_cuts_follow_the_headers_past_look_alike_words(tmp_path, monkeypatch):
    """The vectorized cut finder gives the cuts of a header-by-header walk,
    on payload words that look like headers and on corrupt data."""
    import pmuscope.profile._fastload as fl

    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.CALLCHAIN
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    rng = np.random.default_rng(3)
    recs = []
    for i in range(3000):
        # call-chain words whose header.size field is a multiple of 8: look-alike headers,
        # sometimes several leading into each other
        look = [(int(rng.integers(1, 40)) * 8) << 48 for _ in range(int(rng.integers(0, 4)))]
        recs.append(synth.sample(st, ip=0x1000 + i, pid=7, tid=7, time=10 + i, callchain=look))
    path = tmp_path / "look.data"
    w = PerfDataWriter(str(path), [(attr, [], "cpu-clock")], host=False)
    w.write(b"".join(recs))
    w.close()
    with PerfDataFile(str(path)) as pf:
        off, size = pf.header.data.offset, pf.header.data.size
    good = path.read_bytes()

    def by_walk(data, chunk):
        out, pos = [], 0
        while pos < size:
            cut, p = min(pos + chunk, size), pos
            while p < cut:
                sz = int.from_bytes(data[off + p + 6:off + p + 8], "little")
                if sz < 8:
                    break
                p += sz
            if p <= pos or p > size or p < cut and p != size:
                p = size
            out.append((off + pos, p - pos))
            pos = p
        return out

    calls = []
    real = fl._next_boundary
    monkeypatch.setattr(fl, "_next_boundary", lambda *a: calls.append(real(*a)) or calls[-1])
    for chunk in (4096, 8192, 65536):
        monkeypatch.setattr(fl, "CHUNK_BYTES", chunk)
        assert [(o, len(c)) for o, c in fl._chunks(str(path), off, size)] == by_walk(good, chunk)
    assert calls and None not in calls  # every cut was found without the per-record walk
    for trial in range(60):
        data = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            data[off + int(rng.integers(0, size))] = int(rng.integers(0, 256))
        path.write_bytes(data)
        monkeypatch.setattr(fl, "CHUNK_BYTES", 4096)
        assert [(o, len(c)) for o, c in fl._chunks(str(path), off, size)] == by_walk(bytes(data), 4096), trial
