"""ELF reader and symbol tables, checked against binutils (readelf, nm) and
pyelftools on tiny binaries compiled by the test, and on libpython."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from collections import defaultdict

import numpy as np
import pytest

from pmuscope.errors import FormatError
from pmuscope.symbols import ElfFile, SymbolTable, load_elf_dso
from pmuscope.symbols.dso import DsoCache
from tests.conftest import DATA


def _builder():
    name = "pmuscope_symbols_build_binaries"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DATA / "symbols" / "build_binaries.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


@pytest.fixture(scope="session")
def bins(tmp_path_factory):
    b = _builder()
    try:
        return b.cached(tmp_path_factory)
    except b.Unavailable as err:
        pytest.skip(f"cannot build test binaries: {err}")


def _run(*cmd) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout


def nm_text_symbols(path) -> dict[int, set[str]]:
    """Defined function symbols per address, as nm lists them (text types,
    restricted to what readelf calls FUNC/IFUNC: nm's W also covers weak data)."""
    funcs = set(readelf_func_sizes(path))
    out = defaultdict(set)
    for line in _run("nm", "--defined-only", str(path)).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWwi" and parts[2].split("@")[0] in funcs:
            out[int(parts[0], 16)].add(parts[2].split("@")[0])
    return out


def readelf_func_sizes(path, table=".symtab") -> dict[str, int]:
    sizes = {}
    for line in _run("readelf", "-sW", str(path)).splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] in ("FUNC", "IFUNC") and parts[6] != "UND" and parts[0].endswith(":"):
            sizes[parts[7].split("@")[0]] = int(parts[2], 0)
    return sizes


def libpython_path() -> str | None:
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    name = sysconfig.get_config_var("INSTSONAME") or ""
    p = os.path.join(libdir, name)
    return p if name and os.path.isfile(p) and ElfFile.is_elf(p) else None


# -- headers ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["demo_pie", "demo_nopie", "libsymdemo.so", "demo_cxx",
                                  "demo_stripped"])
def test_headers_match_pyelftools(bins, name):
    elftools = pytest.importorskip("elftools.elf.elffile")
    ours = ElfFile.open(bins[name])
    with open(bins[name], "rb") as f:
        ref = elftools.ELFFile(f)
        assert ours.e_type == {"ET_EXEC": 2, "ET_DYN": 3}[ref["e_type"]]
        assert len(ours.sections) == ref.num_sections()
        for s, r in zip(ours.sections, ref.iter_sections()):
            assert (s.name, s.sh_offset, s.sh_size, s.sh_addr, s.sh_link) == \
                (r.name, r["sh_offset"], r["sh_size"], r["sh_addr"], r["sh_link"])
        segs = list(ref.iter_segments())
        assert [(p.p_offset, p.p_vaddr, p.p_filesz, p.p_memsz, p.p_flags) for p in ours.segments] == \
            [(p["p_offset"], p["p_vaddr"], p["p_filesz"], p["p_memsz"], p["p_flags"]) for p in segs]


def test_pie_and_nopie_types(bins):
    assert ElfFile.open(bins["demo_pie"]).e_type == 3  # ET_DYN
    assert ElfFile.open(bins["demo_nopie"]).e_type == 2  # ET_EXEC


@pytest.mark.parametrize("name", ["demo_pie", "demo_nopie", "libsymdemo.so", "demo_stripped"])
def test_build_id_matches_readelf(bins, name):
    assert ElfFile.open(bins[name]).build_id == _builder().build_id(bins[name])


def test_debuglink_and_crc(bins):
    import zlib
    link = ElfFile.open(bins["demo_stripped"]).debuglink
    assert link is not None
    assert link[0] == "demo.debug"
    assert link[1] == zlib.crc32(bins["demo.debug"].read_bytes())
    assert ElfFile.open(bins["demo_pie"]).debuglink is None


# -- symbols -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["demo_pie", "demo_nopie", "libsymdemo.so", "demo_cxx"])
def test_symtab_agrees_with_nm(bins, name):
    table = SymbolTable.from_elf(ElfFile.open(bins[name]).symbols(".symtab"))
    nm = nm_text_symbols(bins[name])
    assert len(nm) > 3
    starts = set(int(s) for s in table.starts)
    for addr, names in nm.items():
        if addr == 0:
            continue
        assert addr in starts, f"{names} at {addr:#x} missing"
        idx, off = table.lookup(np.array([addr], dtype=np.uint64))
        assert table.name(int(idx[0])) in names and off[0] == 0
    # nothing beyond what nm calls text
    assert starts <= set(nm)


@pytest.mark.parametrize("name", ["demo_pie", "libsymdemo.so"])
def test_symbol_sizes_match_readelf(bins, name):
    table = SymbolTable.from_elf(ElfFile.open(bins[name]).symbols(".symtab"))
    sizes = readelf_func_sizes(bins[name])
    checked = 0
    for i in range(len(table)):
        n = table.name(i)
        if sizes.get(n):
            assert int(table.ends[i] - table.starts[i]) == sizes[n], n
            checked += 1
    assert checked >= 2


def test_lookup_inside_beyond_and_between(bins):
    table = SymbolTable.from_elf(ElfFile.open(bins["demo_pie"]).symbols(".symtab"))
    nm = {n: a for a, ns in nm_text_symbols(bins["demo_pie"]).items() for n in ns}
    size = readelf_func_sizes(bins["demo_pie"])["beta"]
    addrs = np.array([nm["beta"], nm["beta"] + 5, nm["beta"] + size - 1, 0x10], dtype=np.uint64)
    idx, off = table.lookup(addrs)
    assert [table.name(int(i)) for i in idx[:3]] == ["beta"] * 3
    assert list(off[:3]) == [0, 5, size - 1]
    assert idx[3] == -1 and off[3] == 0x10  # before any symbol: unknown, raw address kept
    # one past the last sized symbol's end is not that symbol
    last = int(np.argmax(table.starts))
    end = int(table.ends[last])
    i2, _ = table.lookup(np.array([end], dtype=np.uint64))
    assert i2[0] == -1


def test_alias_choice_prefers_global_over_weak_and_fewer_underscores():
    # three names at one address (as glibc has getpid/__getpid/__GI___getpid)
    from pmuscope.symbols.elf import RawSymbols
    strtab = b"\0__GI___getpid\0getpid\0__getpid\0local_thing\0"
    off = {n: strtab.index(n.encode() + b"\0") for n in
           ("__GI___getpid", "getpid", "__getpid", "local_thing")}
    info = lambda bind, typ=2: (bind << 4) | typ  # noqa: E731
    raw = RawSymbols(
        st_name=np.array([off["__GI___getpid"], off["getpid"], off["__getpid"], off["local_thing"]]),
        st_value=np.array([0x1000, 0x1000, 0x1000, 0x2000], dtype=np.uint64),
        st_size=np.array([16, 16, 16, 0], dtype=np.uint64),
        st_info=np.array([info(0), info(2), info(1), info(0)], dtype=np.uint8),
        st_shndx=np.array([12, 12, 12, 12], dtype=np.uint16), strtab=strtab, section=".symtab")
    t = SymbolTable.from_elf(raw)
    assert len(t) == 2
    assert t.name(0) == "__getpid"  # global beats weak and local
    # a zero-sized last symbol ends at the second page boundary above it (perf's fixup)
    assert t.find(0x2000 + 100) == ("local_thing", 100)
    assert t.find(0x1000 + 16) is None  # gap after a sized symbol


def test_symtab_matches_pyelftools_on_libpython():
    elftools = pytest.importorskip("elftools.elf.elffile")
    path = libpython_path()
    if path is None:
        pytest.skip("this Python has no shared libpython")
    ours = ElfFile.open(path)
    which = ".symtab" if ours.has_symtab() else ".dynsym"
    raw = ours.symbols(which)
    with open(path, "rb") as f:
        ref = elftools.ELFFile(f).get_section_by_name(which)
        ref_syms = list(ref.iter_symbols())
    assert len(raw) == len(ref_syms) > 1000
    step = max(1, len(ref_syms) // 2000)
    for i in range(0, len(ref_syms), step):
        r = ref_syms[i]
        assert (int(raw.st_value[i]), int(raw.st_size[i]), raw.name(i)) == \
            (r["st_value"], r["st_size"], r.name)


@pytest.mark.parametrize("name", ["demo_pie", "demo_nopie", "demo_cxx", "demo_stripped"])
def test_plt_entries_match_objdump(bins, name):
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    out = _run("objdump", "-d", str(bins[name]))
    labels = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].endswith("@plt>:"):
            labels[int(parts[0], 16)] = parts[1][1:-2]
    assert len(labels) >= 3
    dso = load_elf_dso(str(bins[name]), debug_root="/nonexistent")
    for addr, label in labels.items():
        assert dso.table.find(addr) == (label, 0)
        assert dso.table.find(addr + 6) == (label, 6)


# -- separate debug files -----------------------------------------------------------
def test_debuglink_debug_file_found(bins):
    dso = load_elf_dso(str(bins["demo_stripped"]), debug_root="/nonexistent")
    assert dso.how == "debuglink" and dso.symtab_path == str(bins["demo.debug"])
    names = {dso.table.name(i) for i in range(len(dso.table))}
    assert {"alpha", "beta", "local_helper", "main"} <= names
    # the symbols are those of the unstripped binary
    ref = load_elf_dso(str(bins["demo_pie"])).table
    assert np.array_equal(dso.table.starts, ref.starts)


def test_build_id_debug_file_found(bins):
    dso = load_elf_dso(str(bins["demo_bid_stripped"]), debug_root=str(bins["debug_root"]))
    assert dso.how == "build-id"
    assert "local_helper" in {dso.table.name(i) for i in range(len(dso.table))}
    # without the debug root only .dynsym (no local functions) is left
    bare = load_elf_dso(str(bins["demo_bid_stripped"]), debug_root="/nonexistent")
    assert bare.how in ("dynsym", "none")
    assert "local_helper" not in {bare.table.name(i) for i in range(len(bare.table))}


def test_debug_file_with_other_build_id_is_ignored(bins, tmp_path):
    # a debuglink that names a debug file of a different build must not be used
    fake_dir = tmp_path / "bin"
    fake_dir.mkdir()
    shutil.copy(bins["demo_stripped"], fake_dir / "demo_stripped")
    shutil.copy(bins["debug_root"].rglob("*.debug").__next__(), fake_dir / "demo.debug")
    dso = load_elf_dso(str(fake_dir / "demo_stripped"), debug_root="/nonexistent")
    assert dso.how != "debuglink"


def test_dso_cache_parses_once(bins):
    cache = DsoCache(debug_root="/nonexistent")
    a = cache.get(str(bins["demo_pie"]))
    b = cache.get(str(bins["demo_pie"]))
    assert a is b and cache.parsed == 1
    assert cache.get("/nonexistent/binary") is None


# -- bad input -------------------------------------------------------------------------
def test_not_elf_and_truncated(bins, tmp_path):
    bad = tmp_path / "notelf"
    bad.write_bytes(b"#!/bin/sh\necho hi\n" * 10)
    with pytest.raises(FormatError, match="not an ELF file"):
        ElfFile.open(bad)
    data = bins["demo_pie"].read_bytes()
    cut = tmp_path / "cut"
    cut.write_bytes(data[:2000])  # headers point past the end
    with pytest.raises(FormatError) as err:
        ElfFile.open(cut).symbols(".symtab")
    assert str(cut) in str(err.value) and "offset" in str(err.value)
    with pytest.raises(FormatError, match="cannot read"):
        ElfFile.open(tmp_path / "missing")


def test_corrupted_headers_never_crash(bins, tmp_path):
    data = bytearray(bins["demo_pie"].read_bytes())
    rng = np.random.default_rng(4)
    target = tmp_path / "mut"
    for _ in range(150):
        mut = bytearray(data)
        for pos in rng.integers(0, 64 * 40, size=4):  # ELF, program and early section headers
            mut[int(pos) % len(mut)] = int(rng.integers(0, 256))
        target.write_bytes(bytes(mut))
        try:
            e = ElfFile.open(target)
            e.build_id
            e.debuglink
            for which in (".symtab", ".dynsym"):
                raw = e.symbols(which)
                if raw is not None:
                    SymbolTable.from_elf(raw)
        except FormatError:
            pass


def test_elf32_object_symbols_match_pyelftools(tmp_path):
    elftools = pytest.importorskip("elftools.elf.elffile")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    src = tmp_path / "t.c"
    src.write_text("static int helper(int x) { return x * 2; }\n"
                   "int visible(int x) { return helper(x) + 1; }\nint data_obj = 3;\n")
    obj = tmp_path / "t32.o"
    res = subprocess.run(["gcc", "-m32", "-O1", "-c", "-o", str(obj), str(src)],
                         capture_output=True, timeout=60)
    if res.returncode != 0:
        pytest.skip(f"gcc -m32 cannot compile here: {res.stderr[-200:]!r}")
    ours = ElfFile.open(obj)
    assert not ours.elf64 and ours.little_endian
    raw = ours.symbols(".symtab")
    with open(obj, "rb") as f:
        ref = list(elftools.ELFFile(f).get_section_by_name(".symtab").iter_symbols())
    assert [(int(raw.st_value[i]), int(raw.st_size[i]), int(raw.st_info[i]) >> 4, raw.name(i))
            for i in range(len(raw))] == \
        [(s["st_value"], s["st_size"],
          {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2}[s["st_info"]["bind"]], s.name)
         for s in ref]
    assert "visible" in {raw.name(i) for i in range(len(raw))}


def _tiny_elf(order: str, elf64: bool) -> bytes:
    """A minimal ELF with .symtab/.strtab/.shstrtab in the given byte order."""
    import struct
    strtab = b"\0alpha\0beta\0"
    shstr = b"\0.symtab\0.strtab\0.shstrtab\0"
    if elf64:
        sym = lambda n, v, z, info: struct.pack(order + "IBBHQQ", n, info, 0, 1, v, z)  # noqa: E731
        ehsize, shentsize = 64, 64
    else:
        sym = lambda n, v, z, info: struct.pack(order + "IIIBBH", n, v, z, info, 0, 1)  # noqa: E731
        ehsize, shentsize = 52, 40
    symtab = sym(0, 0, 0, 0) + sym(1, 0x1000, 0x20, 0x12) + sym(7, 0x1020, 0x10, 0x12)
    body = ehsize
    off_str, off_sym = body, body + len(strtab)
    off_shstr = off_sym + len(symtab)
    shoff = (off_shstr + len(shstr) + 7) & ~7
    ident = b"\x7fELF" + bytes([2 if elf64 else 1, 1 if order == "<" else 2, 1]) + bytes(9)
    if elf64:
        hdr = ident + struct.pack(order + "HHIQQQIHHHHHH", 2, 62, 1, 0x1000, 0, shoff, 0, ehsize,
                                  0, 0, shentsize, 4, 3)
        sh = lambda *a: struct.pack(order + "IIQQQQIIQQ", *a)  # noqa: E731
    else:
        hdr = ident + struct.pack(order + "HHIIIIIHHHHHH", 2, 3, 1, 0x1000, 0, shoff, 0, ehsize,
                                  0, 0, shentsize, 4, 3)
        sh = lambda *a: struct.pack(order + "IIIIIIIIII", *a)  # noqa: E731
    entsize = 24 if elf64 else 16
    shdrs = (sh(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
             + sh(1, 2, 0, 0, off_sym, len(symtab), 2, 1, 8, entsize)
             + sh(9, 3, 0, 0, off_str, len(strtab), 0, 0, 1, 0)
             + sh(17, 3, 0, 0, off_shstr, len(shstr), 0, 0, 1, 0))
    blob = hdr + strtab + symtab + shstr
    return blob + bytes(shoff - len(blob)) + shdrs


@pytest.mark.parametrize("order,elf64", [("<", True), (">", True), ("<", False), (">", False)])
def test_byte_orders_and_classes(tmp_path, order, elf64):
    path = tmp_path / "tiny.elf"
    path.write_bytes(_tiny_elf(order, elf64))
    e = ElfFile.open(path)
    assert e.little_endian == (order == "<") and e.elf64 == elf64
    assert [s.name for s in e.sections] == ["", ".symtab", ".strtab", ".shstrtab"]
    t = SymbolTable.from_elf(e.symbols(".symtab"))
    assert t.find(0x1005) == ("alpha", 5) and t.find(0x102F) == ("beta", 0xF)
    assert t.find(0x1030) is None
    elftools = pytest.importorskip("elftools.elf.elffile")
    with open(path, "rb") as f:
        ref = [(s.name, s["st_value"], s["st_size"])
               for s in elftools.ELFFile(f).get_section_by_name(".symtab").iter_symbols()]
    raw = e.symbols(".symtab")
    assert [(raw.name(i), int(raw.st_value[i]), int(raw.st_size[i])) for i in range(len(raw))] == ref
