"""Address spaces from MMAP2/FORK/COMM records, the Symbolizer, kallsyms and
JIT perf maps (fixtures and binaries compiled by the test; no kernel events)."""

from __future__ import annotations

import numpy as np
import pytest

from pmuscope.errors import FormatError, ProcessGoneError
from pmuscope.symbols import (AddressSpace, DsoCache, ElfFile, KernelSymbols, Mapping, Maps,
                              PerfMap, Symbolizer, parse_modules, parse_perf_map, shared_cache)
from pmuscope.symbols.elf import PT_LOAD
from tests.conftest import DATA
from tests.unit.test_symbols_elf import bins, nm_text_symbols  # noqa: F401  (fixture)

FIX = DATA / "symbols"
PAGE = 4096


def nm_addr(path, name) -> int:
    for addr, names in nm_text_symbols(path).items():
        if name in names:
            return addr
    raise KeyError(name)


def load_like_ld_so(maps: Maps, pid: int, path, base: int) -> None:
    """Feed MMAP2 records the way the dynamic loader maps each PT_LOAD."""
    elf = ElfFile.open(path)
    for seg in elf.segments:
        if seg.p_type != PT_LOAD:
            continue
        start = base + (seg.p_vaddr & ~(PAGE - 1))
        end = base + ((seg.p_vaddr + seg.p_memsz + PAGE - 1) & ~(PAGE - 1))
        maps.mmap2(pid, start, end - start, seg.p_offset & ~(PAGE - 1), str(path),
                   prot=seg.p_flags, ino=1)


def sym(s: Symbolizer, pid: int, ip: int):
    return s.resolve(pid, ip)


# -- PIE, non-PIE, shared library through simulated MMAP2 --------------------------------
def test_pie_executable_mapped_at_random_base(bins):
    maps = Maps()
    base = 0x55D0_1234_5000
    load_like_ld_so(maps, 100, bins["demo_pie"], base)
    s = Symbolizer(maps, kernel=False, debug_root="/nonexistent")
    alpha = nm_addr(bins["demo_pie"], "alpha")
    assert sym(s, 100, base + alpha + 3) == (str(bins["demo_pie"]), "alpha", 3)
    helper = nm_addr(bins["demo_pie"], "local_helper")
    assert sym(s, 100, base + helper)[1:] == ("local_helper", 0)


def test_non_pie_executable_uses_link_addresses(bins):
    maps = Maps()
    load_like_ld_so(maps, 7, bins["demo_nopie"], 0)
    s = Symbolizer(maps, kernel=False)
    beta = nm_addr(bins["demo_nopie"], "beta")
    assert beta >= 0x400000  # linked at a fixed address
    assert sym(s, 7, beta + 1)[1:] == ("beta", 1)


def test_shared_library_and_executable_in_one_process(bins):
    maps = Maps()
    load_like_ld_so(maps, 5, bins["demo_lib"], 0x5600_0000_0000)
    load_like_ld_so(maps, 5, bins["libsymdemo.so"], 0x7F00_0010_0000)
    s = Symbolizer(maps, kernel=False)
    lib = nm_addr(bins["libsymdemo.so"], "lib_compute")
    priv = nm_addr(bins["libsymdemo.so"], "lib_private")
    main = nm_addr(bins["demo_lib"], "main")
    r = s.resolve_many(5, np.array([0x7F00_0010_0000 + lib + 2, 0x7F00_0010_0000 + priv,
                                    0x5600_0000_0000 + main, 0x1234], dtype=np.uint64))
    assert r.sym_names() == ["lib_compute", "lib_private", "main", "[unknown]"]
    assert r.dso_names()[:3] == [str(bins["libsymdemo.so"]), str(bins["libsymdemo.so"]),
                                 str(bins["demo_lib"])]
    assert list(r.offset[:3]) == [2, 0, 0]
    assert r.dso_id[3] == -1 and r.offset[3] == 0x1234


def test_unknown_symbol_keeps_dso_relative_address(bins):
    maps = Maps()
    base = 0x5555_0000_0000
    load_like_ld_so(maps, 1, bins["demo_pie"], base)
    s = Symbolizer(maps, kernel=False)
    # the ELF header page is mapped but holds no function
    dso, name, off = sym(s, 1, base + 0x10)
    assert (dso, name, off) == (str(bins["demo_pie"]), "[unknown]", 0x10)


def test_stripped_binary_resolves_through_debuglink(bins):
    maps = Maps()
    load_like_ld_so(maps, 9, bins["demo_stripped"], 0x5000_0000)
    s = Symbolizer(maps, kernel=False, debug_root="/nonexistent")
    helper = nm_addr(bins["demo_pie"], "local_helper")
    assert sym(s, 9, 0x5000_0000 + helper + 1)[1:] == ("local_helper", 1)


def test_mmap2_build_id_and_sysroot(bins, tmp_path):
    # perf --symfs: the recorded path is looked up under a sysroot
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/demo").write_bytes(bins["demo_nopie"].read_bytes())
    maps = Maps()
    elf = ElfFile.open(bins["demo_nopie"])
    for seg in elf.load_segments:
        start = seg.p_vaddr & ~(PAGE - 1)
        maps.mmap2(3, start, ((seg.p_vaddr + seg.p_memsz + PAGE - 1) & ~(PAGE - 1)) - start,
                   seg.p_offset & ~(PAGE - 1), "/usr/bin/demo", build_id=bytes.fromhex(elf.build_id))
    s = Symbolizer(maps, kernel=False, sysroot=str(root))
    beta = nm_addr(bins["demo_nopie"], "beta")
    assert sym(s, 3, beta) == ("/usr/bin/demo", "beta", 0)
    assert maps.space(3)[0].build_id == elf.build_id


# -- fork / exec / overlaps -----------------------------------------------------------------
def test_fork_copies_and_exec_resets(bins):
    maps = Maps()
    load_like_ld_so(maps, 100, bins["demo_pie"], 0x5555_0000_0000)
    ip = 0x5555_0000_0000 + nm_addr(bins["demo_pie"], "alpha")
    maps.fork(200, 100)  # new process
    maps.fork(100, 100)  # new thread of 100: nothing changes
    s = Symbolizer(maps, kernel=False)
    assert sym(s, 200, ip)[1] == "alpha"
    maps.comm(200, exec=True)
    assert sym(s, 200, ip)[1:] == ("[unknown]", ip)
    assert sym(s, 100, ip)[1] == "alpha"  # the parent keeps its image
    maps.comm(100, exec=False)
    assert sym(s, 100, ip)[1] == "alpha"


def test_new_mapping_trims_overlapped_ones():
    sp = AddressSpace()
    sp.insert(Mapping(0x1000, 0x5000, 0x0, "/a"))
    sp.insert(Mapping(0x3000, 0x1000, 0x0, "/b"))
    got = [(m.start, m.len, m.pgoff, m.filename) for m in sp]
    assert got == [(0x1000, 0x2000, 0, "/a"), (0x3000, 0x1000, 0, "/b"), (0x4000, 0x2000, 0x3000, "/a")]
    assert sp.find(0x4500).filename == "/a" and sp.find(0x6000) is None
    sp.remove(0x3000, 0x1000)
    assert sp.find(0x3500) is None and len(sp) == 2
    assert list(sp.find_many(np.array([0x0, 0x1000, 0x2FFF, 0x5FFF], dtype=np.uint64))) == [-1, 0, 0, 1]


def test_proc_maps_fixture():
    text = (FIX / "proc_maps_cat").read_text()
    sp = AddressSpace.parse_proc_maps(text)
    assert len(sp) == len(text.splitlines())
    first = text.splitlines()[1].split()
    m = sp.find(int(first[0].split("-")[0], 16))
    assert m.filename == first[5] and m.pgoff == int(first[2], 16) and m.prot & 4
    vdso = [m for m in sp if m.filename == "[vdso]"]
    assert vdso and vdso[0].is_special and not vdso[0].is_anon
    with pytest.raises(FormatError, match="line 1"):
        AddressSpace.parse_proc_maps("garbage\n")
    with pytest.raises(ProcessGoneError):
        AddressSpace.from_proc_maps(123, procfs_root=str(FIX / "no-such-proc"))


def test_special_and_anon_mappings_without_perf_map(tmp_path):
    maps = Maps()
    maps.mmap2(11, 0x7FFF_0000_0000, 0x2000, 0, "[vdso]")
    maps.mmap2(11, 0x7E00_0000_0000, 0x10000, 0, "//anon")
    s = Symbolizer(maps, kernel=False, tmp_dir=str(tmp_path), vdso=False)
    assert sym(s, 11, 0x7FFF_0000_0010) == ("[vdso]", "[unknown]", 0x10)
    assert sym(s, 11, 0x7E00_0000_0100)[:2] == ("//anon", "[unknown]")


# -- Symbolizer: dedup, caching, id tables -----------------------------------------------
def test_resolve_many_equals_one_by_one_and_parses_once(bins):
    maps = Maps()
    for pid, base in ((1, 0x5555_0000_0000), (2, 0x5600_0000_0000)):
        load_like_ld_so(maps, pid, bins["demo_pie"], base)
    s = Symbolizer(maps, kernel=False, cache=DsoCache())
    rng = np.random.default_rng(1)
    text = [seg for seg in ElfFile.open(bins["demo_pie"]).load_segments if seg.p_flags & 1][0]
    vaddrs = rng.integers(text.p_vaddr, text.p_vaddr + text.p_filesz, size=3000)
    pids = rng.integers(1, 3, size=3000)
    ips = np.where(pids == 1, 0x5555_0000_0000, 0x5600_0000_0000) + vaddrs
    r = s.resolve_many(pids, ips.astype(np.uint64))
    assert s.cache.parsed == 1  # one binary, two processes
    ref = [sym(s, int(p), int(i)) for p, i in zip(pids[:300], ips[:300])]
    got = list(zip(r.dso_names()[:300], r.sym_names()[:300], (int(o) for o in r.offset[:300])))
    assert got == ref
    # same vaddr in both processes -> same symbol id
    assert len(set(r.sym_id[vaddrs == vaddrs[0]])) == 1
    assert s.sym_dso(int(r.sym_id[r.sym_id >= 0][0])) == s.dso_id(str(bins["demo_pie"]))
    # a second symbolizer of the run reuses the shared cache
    a = Symbolizer(maps, kernel=False)
    b = Symbolizer(maps, kernel=False)
    assert a.cache is b.cache is shared_cache()
    a.resolve(1, int(ips[0]))
    before = a.cache.parsed
    b.resolve(2, int(ips[0]))
    assert b.cache.parsed == before


def test_resolve_many_rejects_mismatched_lengths():
    s = Symbolizer(Maps(), kernel=False)
    with pytest.raises(ValueError):
        s.resolve_many(np.array([1, 2, 3]), np.array([1, 2], dtype=np.uint64))
    r = s.resolve_many(np.array([], dtype=np.int64), np.array([], dtype=np.uint64))
    assert len(r) == 0


# -- kallsyms / modules ------------------------------------------------------------------------
def kallsyms_fixture() -> KernelSymbols:
    text = (FIX / "kallsyms").read_bytes() + (FIX / "kallsyms_modules").read_bytes()
    return KernelSymbols.parse(text, (FIX / "modules").read_text())


def test_kallsyms_fixture_lookup():
    ks = kallsyms_fixture()
    assert not ks.addresses_hidden
    lines = [ln.split() for ln in (FIX / "kallsyms").read_text().splitlines()[:120]]
    t = ks.tables["[kernel.kallsyms]"]
    # a symbol spans up to the next distinct address
    checked = 0
    for (a, typ, name), (b, _, _) in zip(lines, lines[1:]):
        a, b = int(a, 16), int(b, 16)
        if b > a + 1 and typ in "tT":
            got = t.find(a + (b - a) // 2)
            aliases = {ln[2] for ln in lines if int(ln[0], 16) == a}
            assert got[0] in aliases and got[1] == (b - a) // 2
            checked += 1
    assert checked > 20
    assert ks.kernel_start == int(lines[0][0], 16)


def test_kallsyms_modules_and_symbolizer_dsos():
    ks = kallsyms_fixture()
    assert [m.name for m in ks.modules] == ["nf_tables", "crc32c_intel"]
    s = Symbolizer(Maps(), kernel=ks)
    r = s.resolve_many(-1, np.array([0xFFFFFFFFC0400018, 0xFFFFFFFFC0401004, 0xFFFFFFFFC0500010,
                                     0xFFFFFFFFC0500000 + 24576 + 8], dtype=np.uint64))
    assert r.dso_names()[:3] == ["[nf_tables]", "[nf_tables]", "[crc32c_intel]"]
    assert r.sym_names()[:3] == ["nft_do_chain", "nft_immediate_eval", "crc32c_pcl_intel_update"]
    assert list(r.offset[:3]) == [8, 4, 0x10]
    assert r.sym_id[3] == -1  # past the module's end
    # the kernel mask overrides the top-bit rule
    lines = (FIX / "kallsyms").read_text().splitlines()
    a = int(lines[5].split()[0], 16)
    r2 = s.resolve_many(1, np.array([a], dtype=np.uint64), kernel=np.array([True]))
    assert r2.dso_names() == ["[kernel.kallsyms]"]


def test_kallsyms_hidden_by_kptr_restrict(tmp_path):
    text = b"".join(b"0000000000000000 T sym%d\n" % i for i in range(50))
    ks = KernelSymbols.parse(text)
    assert ks.addresses_hidden and not ks.tables
    (tmp_path / "sys/kernel").mkdir(parents=True)
    (tmp_path / "sys/kernel/kptr_restrict").write_text("1\n")
    (tmp_path / "sys/kernel/perf_event_paranoid").write_text("2\n")
    (tmp_path / "kallsyms").write_bytes(text)
    loaded = KernelSymbols.load(str(tmp_path))
    assert loaded.addresses_hidden
    assert "kptr_restrict=1" in loaded.hidden_reason and "perf_event_paranoid=2" in loaded.hidden_reason
    assert KernelSymbols.load(str(tmp_path / "none")).hidden_reason.endswith("is not readable")
    s = Symbolizer(Maps(), kernel=ks)
    assert s.resolve(-1, 0xFFFFFFFF81000000) == ("[kernel.kallsyms]", "[unknown]", 0xFFFFFFFF81000000)


def test_kallsyms_and_modules_bad_input():
    with pytest.raises(FormatError, match="kallsyms line 2"):
        KernelSymbols.parse(b"ffffffff81000000 T ok\nnot-a-line\n")
    with pytest.raises(FormatError, match="modules line 1"):
        parse_modules("ext4 12\n")


# -- JIT perf maps --------------------------------------------------------------------------------
def test_parse_perf_map_formats():
    data = (b"7f0000001000 40 py::foo:/app/x.py\n"
            b"0x7f0000002000 0x10 LazyCompile:~bar /app/y.js:3\n"
            b"junk\n")
    starts, sizes, names, bad = parse_perf_map(data)
    assert starts == [0x7F0000001000, 0x7F0000002000] and sizes == [0x40, 0x10]
    assert names == ["py::foo:/app/x.py", "LazyCompile:~bar /app/y.js:3"] and bad == 1


def test_perf_map_jit_symbols_and_reload(tmp_path):
    pid = 4242
    path = tmp_path / f"perf-{pid}.map"
    path.write_text("7e0000001000 100 py::first:/a.py\n")
    maps = Maps()
    maps.mmap2(pid, 0x7E00_0000_0000, 0x100000, 0, "//anon")
    s = Symbolizer(maps, kernel=False, tmp_dir=str(tmp_path))
    assert s.resolve(pid, 0x7E00_0000_1010) == (str(path), "py::first:/a.py", 0x10)
    assert s.resolve(pid, 0x7E00_0000_2000)[1] == "[unknown]"
    with open(path, "a") as f:
        f.write("7e0000002000 80 py::second:/b.py\n")
        f.write("7e00000030")  # a line still being written is not read
    assert s.resolve(pid, 0x7E00_0000_2004) == (str(path), "py::second:/b.py", 4)
    assert s.resolve(pid, 0x7E00_0000_1010)[1] == "py::first:/a.py"  # earlier ids stay valid
    pm = s.perf_map(pid)
    assert pm.reloads == 2
    # an ip outside every mapping still finds JIT code
    path2 = tmp_path / "perf-77.map"
    path2.write_text("1000 10 jitted\n")
    s2 = Symbolizer(Maps(), kernel=False, tmp_dir=str(tmp_path))
    assert s2.resolve(77, 0x1008) == (str(path2), "jitted", 8)


def test_perf_map_last_definition_wins(tmp_path):
    p = tmp_path / "perf-1.map"
    p.write_text("1000 10 old\n1000 10 new\n")
    assert PerfMap(str(p)).table().find(0x1001) == ("new", 1)


# -- decoded side-band records ----------------------------------------------------------------------
def test_apply_decoded_sideband_records(bins):
    types = pytest.importorskip("pmuscope.records.types")
    from pmuscope.kernel import abi

    elf = ElfFile.open(bins["demo_pie"])
    base = 0x5555_0000_0000
    maps = Maps()
    recs = [types.Comm(0, abi.PERF_RECORD_MISC_COMM_EXEC, None, 50, 50, "demo")]
    for seg in elf.load_segments:
        start = base + (seg.p_vaddr & ~(PAGE - 1))
        end = base + ((seg.p_vaddr + seg.p_memsz + PAGE - 1) & ~(PAGE - 1))
        recs.append(types.Mmap2(0, abi.PERF_RECORD_MISC_MMAP_BUILD_ID, None, 50, 50, start,
                                end - start, seg.p_offset & ~(PAGE - 1), None, None, None, None,
                                bytes.fromhex(elf.build_id), seg.p_flags, 2, str(bins["demo_pie"])))
    recs.append(types.Mmap(0, abi.PERF_RECORD_MISC_KERNEL, None, -1, 0, 0xFFFFFFFF81000000,
                           0x1000000, 0xFFFFFFFF81000000, "[kernel.kallsyms]_text"))
    recs.append(types.Fork(0, 0, None, 51, 50, 51, 50, 0))
    recs.append(types.Ksymbol(0, 0, None, 0xFFFFFFFFC0001000, 0x80, 1, 0, "bpf_prog_abc_handler"))
    for r in recs:
        assert maps.apply(r)
    assert not maps.apply(types.Comm(0, 0, None, 51, 51, "renamed"))
    assert len(maps.kernel_maps) == 1 and 50 in maps and 51 in maps
    s = Symbolizer(maps, kernel=KernelSymbols())
    ip = base + nm_addr(bins["demo_pie"], "beta") + 4
    r = s.resolve_many(np.array([50, 51, 51]), np.array([ip, ip, 0xFFFFFFFFC0001010], dtype=np.uint64))
    assert r.sym_names() == ["beta", "beta", "bpf_prog_abc_handler"]
    assert r.dso_names()[2] == "bpf_prog_abc_handler" and int(r.offset[2]) == 0x10
    assert maps.space(50)[0].build_id == elf.build_id
    maps.apply(types.Ksymbol(0, 0, None, 0xFFFFFFFFC0001000, 0x80, 1,
                             abi.PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER, "bpf_prog_abc_handler"))
    assert s.resolve(51, 0xFFFFFFFFC0001010)[1] == "[unknown]"
    maps.apply(types.Comm(0, abi.PERF_RECORD_MISC_COMM_EXEC, None, 51, 51, "sh"))
    assert s.resolve(51, ip)[1] == "[unknown]"


def test_rebuilt_or_deleted_binary_found_by_build_id(bins, tmp_path):
    # the recording saw demo_nopie (its build-id in MMAP2); on disk the path now
    # holds another binary, or nothing: the debug file with that build-id is used
    elf = ElfFile.open(bins["demo_nopie"])
    beta = nm_addr(bins["demo_nopie"], "beta")
    replaced = tmp_path / "demo"
    replaced.write_bytes(bins["demo_pie"].read_bytes())
    for path in (str(replaced), str(tmp_path / "gone"), str(tmp_path / "gone") + " (deleted)"):
        maps = Maps()
        for seg in elf.load_segments:
            start = seg.p_vaddr & ~(PAGE - 1)
            maps.mmap2(1, start, ((seg.p_vaddr + seg.p_memsz + PAGE - 1) & ~(PAGE - 1)) - start,
                       seg.p_offset & ~(PAGE - 1), path, build_id=bytes.fromhex(elf.build_id))
        s = Symbolizer(maps, kernel=False, debug_root=str(bins["debug_root"]))
        assert sym(s, 1, beta + 2)[1:] == ("beta", 2), path
    # without a matching file the rebuilt binary is still used (perf warns and does the same)
    s = Symbolizer(maps, kernel=False, debug_root="/nonexistent")
    assert s.cache.get(str(replaced), elf.build_id).build_id != elf.build_id


def test_callchain_context_markers_are_not_addresses():
    ks = kallsyms_fixture()
    s = Symbolizer(Maps(), kernel=ks)
    markers = np.array([2**64 - 128, 2**64 - 512, 2**64 - 4095], dtype=np.uint64)  # KERNEL, USER, MAX
    lines = (FIX / "kallsyms").read_text().splitlines()
    real = np.uint64(int(lines[5].split()[0], 16))
    r = s.resolve_many(1, np.concatenate([markers, [real]]))
    assert list(r.dso_id[:3]) == [-1] * 3 and list(r.sym_id[:3]) == [-1] * 3
    assert r.dso_names()[3] == "[kernel.kallsyms]" and r.sym_id[3] >= 0
