"""The fast paths of pmuscope.profile._fastload give what the general code gives."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pmuscope.kernel import abi
from pmuscope.perfdata import PerfDataFile, PerfDataWriter, synth
from pmuscope.profile import load_profile
from pmuscope.profile._fastload import _parse_core, load_kernel_symbols, plain_data_chunks
from pmuscope.records import AttrTable, RecordSource
from pmuscope.symbols import KERNEL_DSO, KernelSymbols

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

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


# --- the core kernel table kept per boot ------------------------------------------------

BOOT = "0f8e2b7c-1d2a-4c3b-9e4f-5a6b7c8d9e0f"


def _procfs(tmp_path, kallsyms=KALLSYMS, boot=BOOT):
    root = tmp_path / "proc"
    (root / "sys" / "kernel" / "random").mkdir(parents=True, exist_ok=True)
    (root / "kallsyms").write_text(kallsyms)
    (root / "modules").write_text(MODULES)
    if boot:
        (root / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    return str(root)


def test_core_kernel_table_is_kept_for_the_boot(tmp_path, monkeypatch):
    import pmuscope.profile._fastload as fl

    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _procfs(tmp_path)
    first = load_kernel_symbols(root)
    kept = list((tmp_path / "cache").iterdir())
    assert [p.name for p in kept] == [f"kallsyms{fl._FORMAT}-{BOOT}-{os.geteuid()}.bin"]
    assert oct(kept[0].stat().st_mode & 0o777) == "0o600"
    # the next run maps the kept table instead of parsing kallsyms (the ends too: working
    # them out again touched every page of the starts)
    monkeypatch.setattr(fl, "_parse_core", lambda data: pytest.fail("kallsyms parsed again"))
    monkeypatch.setattr(fl, "_ends", lambda *a: pytest.fail("symbol ends worked out again"))
    again = load_kernel_symbols(root)
    assert isinstance(again, fl._CoreKernelSymbols) and not again.addresses_hidden
    _same(again.tables[KERNEL_DSO], first.tables[KERNEL_DSO])
    assert (again.kernel_start, again.kernel_end) == (first.kernel_start, first.kernel_end)
    assert list(again.tables) == [KERNEL_DSO]  # modules are read only when an address needs them


def test_kept_table_closes_its_file_with_it(tmp_path, monkeypatch):
    """The mapped table reads names through a descriptor it holds; the descriptor
    is closed when the table goes (a library loading many profiles does not pile
    up open files), and without a ResourceWarning."""
    import gc
    import warnings

    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _procfs(tmp_path)
    load_kernel_symbols(root)  # writes the kept table
    kept = str(next((tmp_path / "cache").iterdir()))

    def open_on_kept() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}") == kept
            except OSError:
                pass
        return n

    before = open_on_kept()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        again = load_kernel_symbols(root)
        assert again.tables[KERNEL_DSO].name(0) == "_stext"
        assert open_on_kept() > before  # the name reader's (and the map's own)
        del again
        gc.collect()
        assert open_on_kept() == before
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]


def test_kept_table_reads_modules_when_an_address_is_outside_the_core(tmp_path, monkeypatch):
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _procfs(tmp_path)
    ref = load_kernel_symbols(root)
    ks = load_kernel_symbols(root)
    core = ks.tables[KERNEL_DSO]
    assert [d for d, _ in ks.dso_of(np.array([0xFFFFFFFF81000104], dtype=np.uint64))] == [KERNEL_DSO]
    assert list(ks.tables) == [KERNEL_DSO]
    split = ks.dso_of(np.array([0xFFFFFFFF81000104, 0xFFFFFFFFC0001104], dtype=np.uint64))
    assert [(d, i.tolist()) for d, i in split] == [(KERNEL_DSO, [0]), ("[mymod]", [1])]
    assert sorted(ks.tables) == sorted(ref.tables) and ks.tables[KERNEL_DSO] is core
    _same(ks.tables["[mymod]"], ref.tables["[mymod]"])
    assert [m.name for m in ks.modules] == ["mymod"]


def test_kept_table_is_not_used_when_kallsyms_changed(tmp_path, monkeypatch):
    import pmuscope.profile._fastload as fl

    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _procfs(tmp_path)
    load_kernel_symbols(root)
    # another KASLR base (same boot id: a stale or foreign table) is parsed, not taken
    moved = KALLSYMS.replace("ffffffff81", "ffffffff83")
    (tmp_path / "proc" / "kallsyms").write_text(moved)
    ks = load_kernel_symbols(root)
    assert not isinstance(ks, fl._CoreKernelSymbols)
    assert int(ks.tables[KERNEL_DSO].starts[0]) == 0xFFFFFFFF83000000
    # hidden addresses (kptr_restrict for this reader) never come from the kept table
    (tmp_path / "proc" / "kallsyms").write_text("0000000000000000 T a\n0000000000000000 T b\n")
    assert load_kernel_symbols(root).addresses_hidden


def test_kept_tables_of_earlier_boots_are_removed_and_no_boot_id_keeps_nothing(tmp_path, monkeypatch):
    import pmuscope.profile._fastload as fl

    cache = tmp_path / "cache"
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    uid = os.geteuid()
    load_kernel_symbols(_procfs(tmp_path, boot="00000000-0000-0000-0000-000000000001"))
    (cache / f"kallsyms2-00000000-0000-0000-0000-000000000001-{uid}.bin").write_bytes(b"an older format")
    (cache / f"kallsyms{fl._FORMAT}-{BOOT}-{uid}.bin.4242.tmp").write_bytes(b"half")  # its writer died
    other = cache / f"kallsyms{fl._FORMAT + 1}-{BOOT}-{uid}.bin"  # another version's table of this boot
    other.write_bytes(b"kept")
    load_kernel_symbols(_procfs(tmp_path, boot=BOOT))
    assert sorted(p.name for p in cache.iterdir()) == sorted([f"kallsyms{fl._FORMAT}-{BOOT}-{uid}.bin", other.name])
    empty = tmp_path / "empty"
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(empty))
    ks = load_kernel_symbols(_procfs(tmp_path / "x", boot=None))
    assert len(ks.tables[KERNEL_DSO]) and not empty.exists()
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")  # empty: keep nothing
    assert len(load_kernel_symbols(_procfs(tmp_path / "y")).tables[KERNEL_DSO])


def test_a_damaged_kept_table_is_ignored(tmp_path, monkeypatch):
    import pmuscope.profile._fastload as fl

    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _procfs(tmp_path)
    ref = load_kernel_symbols(root)
    (kept,) = (tmp_path / "cache").iterdir()
    data = kept.read_bytes()
    for bad in (data[:40], data[:-3], b"XXXXXXXX" + data[8:], b""):
        kept.write_bytes(bad)
        ks = load_kernel_symbols(root)
        assert not isinstance(ks, fl._CoreKernelSymbols)
        _same(ks.tables[KERNEL_DSO], ref.tables[KERNEL_DSO])


def test_hex_addresses_parsed_like_the_line_parser():
    from pmuscope.profile._fastload import _hex_fields

    lines = [f"{a:016x} T s{i}" for i, a in enumerate([0, 1, 0xFFFFFFFF81000000, 0xDEADBEEFCAFEF00D, 2**64 - 1])]
    lines.append("FFFFFFFF8100ABCD T upper")
    data = ("\n".join(lines) + "\n").encode()
    starts = np.array([0] + [i + 1 for i, c in enumerate(data[:-1]) if c == 10], dtype=np.int64)
    assert _hex_fields(data, starts).tolist() == [int(ln[:16], 16) for ln in lines]
    assert _hex_fields(b"ffffffff8100zzzz T x\n", np.array([0])) is None
    assert _hex_fields(b"ffffffff 1000000 T x\n", np.array([0])) is None


def test_chunk_cuts_follow_the_headers_past_look_alike_words(tmp_path, monkeypatch, decode_path):
    """The cut finders (C, numpy) give the cuts of a header-by-header walk,
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

    calls, native_calls = [], []
    real = fl._next_boundary
    monkeypatch.setattr(fl, "_next_boundary", lambda *a: calls.append(real(*a)) or calls[-1])
    real_native = fl._native_decode.next_boundary
    monkeypatch.setattr(fl._native_decode, "next_boundary", lambda *a: native_calls.append(real_native(*a)) or native_calls[-1])
    for chunk in (4096, 8192, 65536):
        monkeypatch.setattr(fl, "CHUNK_BYTES", chunk)
        assert [(o, len(c)) for o, c in fl._chunks(str(path), off, size)] == by_walk(good, chunk)
    if decode_path == "native":  # the C walker found every cut, the numpy code was not needed
        assert native_calls and None not in native_calls and not calls
    else:
        assert calls and None not in calls  # every cut was found without the per-record walk
    for trial in range(60):
        data = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            data[off + int(rng.integers(0, size))] = int(rng.integers(0, 256))
        path.write_bytes(data)
        monkeypatch.setattr(fl, "CHUNK_BYTES", 4096)
        assert [(o, len(c)) for o, c in fl._chunks(str(path), off, size)] == by_walk(bytes(data), 4096), trial


def test_read_chunks_reuse_only_buffers_nothing_holds(tmp_path, monkeypatch, decode_path):
    """Chunks kept by their reader keep their bytes (a buffer is read into
    again only once no view of it is left); chunks dropped as they come are
    read into a few buffers over and over."""
    import pmuscope.profile._fastload as fl

    path = _write(tmp_path, 5000)
    monkeypatch.setattr(fl, "CHUNK_BYTES", 4096)
    raw = path.read_bytes()
    with PerfDataFile(str(path)) as pf:
        off, size = pf.header.data.offset, pf.header.data.size
    kept = list(fl._chunks(str(path), off, size))
    assert len(kept) > 10 and sum(len(c) for _, c in kept) == size
    for o, c in kept:
        assert bytes(c) == raw[o:o + len(c)]
    held = {}
    for o, c in fl._chunks(str(path), off, size):
        assert bytes(c) == raw[o:o + len(c)]
        held[id(c.obj)] = c.obj
        arr = np.frombuffer(c, dtype=np.uint8)  # an array over the chunk, dropped with it
        assert arr[0] == raw[o]
    if decode_path == "native":
        assert len(held) <= fl._POOL


def test_kept_table_is_loaded_only_when_a_kernel_address_needs_it(tmp_path, monkeypatch):
    """With this boot's table kept, a profile maps it when a kernel address asks
    (no thread started early, nothing read for a user-only file); without it,
    kallsyms is read in a thread from the start."""
    import threading

    import pmuscope.profile._fastload as fl

    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _procfs(tmp_path)
    assert not fl.kernel_table_kept(root)
    load_kernel_symbols(root)
    assert fl.kernel_table_kept(root)
    assert not fl.kernel_table_kept(_procfs(tmp_path / "other", boot="1" + BOOT[1:]))

    # the running system's table, for profiles of files recorded here
    monkeypatch.setattr(fl, "kernel_table_kept", lambda procfs_root="/proc": kept)
    calls, threads = [], []
    real_load, real_start = fl.load_kernel_symbols, threading.Thread.start
    monkeypatch.setattr(fl, "load_kernel_symbols", lambda *a: calls.append(1) or real_load(root))
    monkeypatch.setattr(threading.Thread, "start", lambda self: threads.append(self.name) or real_start(self))
    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    for kernel in (False, True):
        path = str(tmp_path / f"k{kernel}.data")
        recs = [synth.comm(7, 7, "prog", sample_id=synth.sample_id(st, pid=7, tid=7, time=1)),
                synth.sample(st, ip=0x401000, pid=7, tid=7, time=5),
                synth.sample(st, ip=0xFFFFFFFF81000110 if kernel else 0x401010, pid=7, tid=7, time=6,
                             misc=abi.PERF_RECORD_MISC_KERNEL if kernel else abi.PERF_RECORD_MISC_USER)]
        with PerfDataWriter(path, [(attr, [], "cpu-clock")], host=True) as w:
            w.write(b"".join(recs))
        for kept in (True, False):
            del calls[:], threads[:]
            p = load_profile(path, kernel_symbols=True)
            if kept:
                assert threads == [] and calls == ([1] if kernel else [])
            else:
                assert threads == ["pmuscope-kallsyms"] and calls == [1]
            if kernel:
                assert p.sym_name(int(p.frame_sym[p.leaf[1]])) == "alias_at_same_address"  # the last at its address
