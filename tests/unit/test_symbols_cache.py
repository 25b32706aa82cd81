"""Parsed ELF symbol tables kept across runs (pmuscope.symbols._symcache):
a kept table is the parsed one (starts, ends and name of every symbol), is
used only while the files it came from are unchanged, and a damaged or
unwritable cache only costs the parse."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import pmuscope.symbols.table as table_mod
from pmuscope.symbols import _symcache
from pmuscope.symbols.dso import load_elf_dso, load_elf_image
from pmuscope.symbols.elf import ElfFile
from tests.conftest import ROOT
from tests.unit.test_symbols_elf import _tiny_elf, bins  # noqa: F401  (fixture)
from tests.unit.test_symbols_labels import zs_binary  # noqa: F401  (fixture)

PY = sys.executable


def _same(a, b) -> None:
    assert a.starts.dtype == b.starts.dtype == np.uint64 and a.ends.dtype == b.ends.dtype == np.uint64
    assert np.array_equal(a.starts, b.starts) and np.array_equal(a.ends, b.ends)
    assert len(a) == len(b)
    assert [a.name(i) for i in range(len(a))] == [b.name(i) for i in range(len(b))]


def _same_dso(a, b) -> None:
    _same(a.table, b.table)
    assert (a.path, a.build_id, a.symtab_path, a.symtab_section, a.how) == \
        (b.path, b.build_id, b.symtab_path, b.symtab_section, b.how)


def _entries(d) -> list[str]:
    return sorted(p for p in os.listdir(d) if p.startswith("elf-")) if os.path.isdir(d) else []


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(d))
    return d


def _roundtrip(monkeypatch, cache, path, **kw):
    """Parsed (nothing kept), then parsed and kept, then taken from the cache: all the same."""
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    ref = load_elf_dso(path, **kw)
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    cold = load_elf_dso(path, **kw)
    _same_dso(cold, ref)
    if not len(ref.table):
        return ref
    assert _entries(cache), "nothing kept"
    with monkeypatch.context() as m:
        m.setattr(table_mod, "elf_columns", lambda *a, **k: pytest.fail("parsed, not taken from the cache"))
        warm = load_elf_dso(path, **kw)
    _same_dso(warm, ref)
    return ref


# -- a kept table is the parsed table -------------------------------------------------------

@pytest.mark.parametrize("name,debug", [
    ("demo_pie", None), ("demo_nopie", None), ("demo_lib", None), ("libsymdemo.so", None), ("demo_cxx", None),
    ("demo_stripped", None), ("demo.debug", None), ("demo_bid_stripped", "debug_root"),
    ("demo_bid_stripped", None)])
@pytest.mark.parametrize("include_objects", [False, True])
def test_kept_tables_of_built_binaries_are_the_parsed_ones(bins, cache, monkeypatch, name, debug,
                                                            include_objects):
    root = str(bins[debug]) if debug else "/nonexistent"
    ref = _roundtrip(monkeypatch, cache, str(bins[name]), debug_root=root,
                     include_objects=include_objects)
    assert len(ref.table)


@pytest.mark.parametrize("order,elf64", [("<", True), (">", True), ("<", False), (">", False)])
def test_kept_tables_of_other_byte_orders_and_classes(tmp_path, cache, monkeypatch, order, elf64):
    path = tmp_path / "tiny.elf"
    path.write_bytes(_tiny_elf(order, elf64))
    ref = _roundtrip(monkeypatch, cache, str(path), debug_root="/nonexistent")
    assert ref.table.names() == ["alpha", "beta"]


def _system_libs() -> list[str]:
    out = []
    for pattern in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                    "/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                    "/lib64/libc.so.6"):
        for p in glob.glob(pattern):
            if os.path.realpath(p) not in out:
                out.append(os.path.realpath(p))
    import sysconfig

    lib = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
    if os.path.isfile(lib) and ElfFile.is_elf(lib):
        out.append(os.path.realpath(lib))
    return [p for p in out if ElfFile.is_elf(p)]


@pytest.mark.parametrize("path", _system_libs() or [None])
@pytest.mark.parametrize("debug_root", ["/usr/lib/debug", "/nonexistent"])
def test_kept_tables_of_system_libraries_with_and_without_debug_files(cache, monkeypatch, path,
                                                                      debug_root):
    if path is None:
        pytest.skip("no libc or shared libpython here")
    ref = _roundtrip(monkeypatch, cache, path, debug_root=debug_root)
    assert len(ref.table)


@pytest.mark.parametrize("which", ["exe", "obj"])
@pytest.mark.parametrize("include_objects", [False, True])
def test_kept_tables_of_labels_and_zero_size_functions(zs_binary, cache, monkeypatch, which, include_objects):
    ref = _roundtrip(monkeypatch, cache, zs_binary[which], debug_root="/nonexistent",
                     include_objects=include_objects)
    assert "zs_func" in ref.table.names()


def test_kept_tables_of_system_binaries(tmp_path, monkeypatch):
    from tests.unit.test_report_lite import _system_elf_files

    files = _system_elf_files(40)
    if not files:
        pytest.skip("no ELF files found here")
    for i, path in enumerate(files):
        _roundtrip(monkeypatch, tmp_path / "cache", path)


def test_a_table_kept_with_objects_is_not_taken_without(bins, cache, monkeypatch):
    path = str(bins["demo_pie"])
    with_obj = load_elf_dso(path, debug_root="/nonexistent", include_objects=True)
    without = load_elf_dso(path, debug_root="/nonexistent")
    assert len(with_obj.table) > len(without.table)
    assert len(_entries(cache)) == 2  # one entry each: a run that needs both does not thrash
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    _same(load_elf_dso(path, debug_root="/nonexistent").table, without.table)
    _same(load_elf_dso(path, debug_root="/nonexistent", include_objects=True).table, with_obj.table)


# -- invalidation ------------------------------------------------------------------------------

def _parsed_count(monkeypatch) -> list[int]:
    n = [0]
    real = table_mod.elf_columns

    def counting(*a, **k):
        n[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(table_mod, "elf_columns", counting)
    return n


def test_a_changed_file_is_parsed_again_and_replaces_its_entry(bins, tmp_path, cache, monkeypatch):
    path = tmp_path / "bin" / "prog"
    path.parent.mkdir()
    shutil.copy(bins["demo_pie"], path)
    parsed = _parsed_count(monkeypatch)
    a = load_elf_dso(str(path), debug_root="/nonexistent")
    load_elf_dso(str(path), debug_root="/nonexistent")
    assert parsed[0] == 1
    (entry,) = _entries(cache)
    # another mtime
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    load_elf_dso(str(path), debug_root="/nonexistent")
    assert parsed[0] == 2 and _entries(cache) == [entry]  # replaced, not added
    # another binary of another size and the same mtime
    shutil.copy(bins["demo_nopie"], path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    b = load_elf_dso(str(path), debug_root="/nonexistent")
    assert parsed[0] == 3 and _entries(cache) == [entry]
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    _same_dso(b, load_elf_dso(str(path), debug_root="/nonexistent"))
    assert not np.array_equal(a.table.starts, b.table.starts)
    # the same size, the same mtime, another inode (a package manager's rename)
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    load_elf_dso(str(path), debug_root="/nonexistent")
    n = parsed[0]
    tmp = path.with_name("prog.new")
    shutil.copy2(path, tmp)
    os.replace(tmp, path)
    load_elf_dso(str(path), debug_root="/nonexistent")
    assert parsed[0] == n + 1


def test_a_debug_file_that_appears_is_used(bins, tmp_path, cache, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    shutil.copy(bins["demo_stripped"], d / "demo_stripped")
    bare = load_elf_dso(str(d / "demo_stripped"), debug_root="/nonexistent")
    assert bare.how in ("dynsym", "none")
    shutil.copy(bins["demo.debug"], d / "demo.debug")  # .gnu_debuglink names it
    found = load_elf_dso(str(d / "demo_stripped"), debug_root="/nonexistent")
    assert found.how == "debuglink" and "local_helper" in found.table.names()
    again = load_elf_dso(str(d / "demo_stripped"), debug_root="/nonexistent")
    _same_dso(again, found)
    # the debug file rebuilt: parsed again
    parsed = _parsed_count(monkeypatch)
    st = (d / "demo.debug").stat()
    os.utime(d / "demo.debug", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _same_dso(load_elf_dso(str(d / "demo_stripped"), debug_root="/nonexistent"), found)
    assert parsed[0] == 1
    # and gone again: back to what the binary has
    (d / "demo.debug").unlink()
    _same_dso(load_elf_dso(str(d / "demo_stripped"), debug_root="/nonexistent"), bare)


def test_a_build_id_debug_file_that_appears_is_used(bins, tmp_path, cache, monkeypatch):
    root = tmp_path / "debugroot"
    root.mkdir()
    path = str(bins["demo_bid_stripped"])
    bare = load_elf_dso(path, debug_root=str(root))
    assert "local_helper" not in bare.table.names()
    shutil.copytree(bins["debug_root"] / ".build-id", root / ".build-id")
    found = load_elf_dso(path, debug_root=str(root))
    assert found.how == "build-id" and "local_helper" in found.table.names()
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    _same_dso(found, load_elf_dso(path, debug_root=str(root)))
    _same_dso(bare, load_elf_dso(path, debug_root="/nonexistent"))


def test_code_identity_is_part_of_the_key(bins, cache, monkeypatch):
    path = str(bins["demo_pie"])
    load_elf_dso(path, debug_root="/nonexistent")
    parsed = _parsed_count(monkeypatch)
    mine = _symcache._code_identity()
    monkeypatch.setattr(_symcache, "_CODE", [("another parser",)])
    load_elf_dso(path, debug_root="/nonexistent")
    monkeypatch.setattr(_symcache, "FORMAT", _symcache.FORMAT + 1)
    load_elf_dso(path, debug_root="/nonexistent")
    assert parsed[0] == 2
    # each version keeps its own entry: switching back parses nothing
    monkeypatch.setattr(_symcache, "FORMAT", _symcache.FORMAT - 1)
    monkeypatch.setattr(_symcache, "_CODE", [mine])
    load_elf_dso(path, debug_root="/nonexistent")
    assert parsed[0] == 2 and len(_entries(cache)) == 3


# -- damaged, foreign and unwritable -------------------------------------------------------------

def test_damaged_or_foreign_entries_are_parsed_again_and_replaced(bins, cache, monkeypatch):
    path, other = str(bins["demo_pie"]), str(bins["libsymdemo.so"])
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    ref = load_elf_dso(path, debug_root="/nonexistent")
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    load_elf_dso(other, debug_root="/nonexistent")
    (foreign,) = _entries(cache)
    foreign = (cache / foreign).read_bytes()
    load_elf_dso(path, debug_root="/nonexistent")
    (name,) = set(_entries(cache)) - {e for e in _entries(cache) if (cache / e).read_bytes() == foreign}
    good = (cache / name).read_bytes()
    flipped = bytearray(good)
    flipped[-5] ^= 0x40  # a name's byte
    counts = bytearray(good)
    counts[8] ^= 1  # the symbol count
    offs = bytearray(good)
    offs[len(good) - len(good) // 3] ^= 0xFF
    for bad in (b"", good[:20], good[:-1], good + b"\0", b"XXXXXXXX" + good[8:], bytes(flipped), bytes(counts),
                bytes(offs), foreign, os.urandom(len(good))):
        (cache / name).write_bytes(bad)
        _same_dso(load_elf_dso(path, debug_root="/nonexistent"), ref)
        assert (cache / name).read_bytes() == good  # replaced by a good entry
    (cache / name).unlink()
    (cache / name).mkdir()  # not even a file
    _same_dso(load_elf_dso(path, debug_root="/nonexistent"), ref)


def test_an_unwritable_cache_costs_only_the_parse(bins, tmp_path, monkeypatch):
    path = str(bins["demo_pie"])
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    ref = load_elf_dso(path, debug_root="/nonexistent")
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be")
    for d in (blocker / "cache", blocker):
        monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(d))
        _same_dso(load_elf_dso(path, debug_root="/nonexistent"), ref)
        _same_dso(load_elf_dso(path, debug_root="/nonexistent"), ref)
    assert blocker.read_text().startswith("a file")


def test_entries_are_private_and_bounded(bins, cache, monkeypatch):
    names = ["demo_pie", "demo_nopie", "demo_lib", "libsymdemo.so", "demo_cxx"]
    for i, n in enumerate(names):
        load_elf_dso(str(bins[n]), debug_root="/nonexistent")
        for e in _entries(cache):  # distinct write times, the earliest first
            p = cache / e
            if p.stat().st_mtime_ns > time.time_ns() - 10**9 * 50:
                os.utime(p, ns=(0, 10**18 + i * 10**9))
    assert len(_entries(cache)) == 5
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    assert {oct(os.stat(cache / e).st_mode & 0o777) for e in _entries(cache)} == {"0o600"}
    first = _symcache.elf_key(str(bins["demo_pie"]), str(bins["demo_pie"]), "", "", False)[0]
    assert any(e.startswith(first) for e in _entries(cache))
    monkeypatch.setattr(_symcache, "MAX_FILES", 3)
    load_elf_dso(str(bins["demo_stripped"]), debug_root="/nonexistent")
    kept = _entries(cache)
    assert len(kept) == 3 and not any(e.startswith(first) for e in kept)  # the oldest went
    monkeypatch.setattr(_symcache, "MAX_BYTES", 1)
    load_elf_dso(str(bins["demo_pie"]), debug_root="/nonexistent")
    assert len(_entries(cache)) == 1  # only the newest is left
    # what a writer that died left half-written goes once it is old; a fresh one may be a live writer's
    old = cache / f"elf-0000000000000000-0-{os.geteuid()}.bin.4242.tmp"
    young = cache / f"elf-0000000000000001-0-{os.geteuid()}.bin.4243.tmp"
    old.write_bytes(b"half")
    young.write_bytes(b"half")
    os.utime(old, ns=(0, time.time_ns() - 3600 * 10**9))
    load_elf_dso(str(bins["demo_nopie"]), debug_root="/nonexistent")
    assert not old.exists() and young.exists()


_WRITER = r"""
import os, sys
import numpy as np
from pmuscope.symbols.dso import load_elf_dso
paths = sys.argv[1:]
os.environ["PMUSCOPE_CACHE_DIR"] = ""
ref = {p: load_elf_dso(p, debug_root="/nonexistent") for p in paths}
os.environ["PMUSCOPE_CACHE_DIR"] = os.environ["CACHE"]
for round in range(40):
    for p in paths:
        if round % 3 == 0 and os.path.isdir(os.environ["CACHE"]):
            for e in os.listdir(os.environ["CACHE"]):
                try:
                    os.unlink(os.path.join(os.environ["CACHE"], e))
                except OSError:
                    pass
        d = load_elf_dso(p, debug_root="/nonexistent")
        r = ref[p].table
        assert np.array_equal(d.table.starts, r.starts) and np.array_equal(d.table.ends, r.ends), p
        assert d.table.names() == r.names(), p
print("ok")
"""


def test_concurrent_writers(bins, tmp_path):
    cache = tmp_path / "cache"
    paths = [str(bins[n]) for n in ("demo_pie", "demo_cxx", "libsymdemo.so")] + _system_libs()[:2]
    env = dict(os.environ, CACHE=str(cache), PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    procs = [subprocess.Popen([PY, "-c", _WRITER, *paths], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert not [e for e in os.listdir(cache) if e.endswith(".tmp")]


# -- the vdso --------------------------------------------------------------------------------------

def _vdso_image() -> bytes | None:
    import ctypes

    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith("[vdso]"):
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                return ctypes.string_at(lo, hi - lo)
    return None


def test_vdso_from_memory_is_the_vdso_from_a_file(tmp_path, cache, monkeypatch):
    image = _vdso_image()
    if image is None:
        pytest.skip("no [vdso] mapping in this process")
    f = tmp_path / "vdso.so"
    f.write_bytes(image)
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    ref = load_elf_dso(str(f), debug_root="/nonexistent")
    assert len(ref.table)
    plain = load_elf_image(image, "[vdso]")
    _same(plain.table, ref.table)
    assert (plain.how, plain.symtab_section, plain.build_id) == (ref.how, ref.symtab_section, ref.build_id)
    assert np.array_equal(plain.file_offset_to_vaddr(np.array([0, 0x100], np.uint64)),
                          ref.file_offset_to_vaddr(np.array([0, 0x100], np.uint64)))
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    load_elf_image(image, "[vdso]")
    kept = [e for e in os.listdir(cache) if e.startswith("vdso-")]
    from pmuscope.system.cache import boot_id

    if boot_id() is None:
        assert not kept
        return
    assert kept == [f"vdso-{boot_id()}-{os.geteuid()}.bin"]
    with monkeypatch.context() as m:
        m.setattr(table_mod, "elf_columns", lambda *a, **k: pytest.fail("parsed, not taken from the cache"))
        _same(load_elf_image(image, "[vdso]").table, ref.table)
    # another image (another kernel under the same boot id cannot be, but a damaged one can): parsed
    other = bytearray(image)
    other[-1] ^= 1
    parsed = _parsed_count(monkeypatch)
    load_elf_image(bytes(other), "[vdso]")
    assert parsed[0] == 1
    # an earlier boot's entry goes
    (cache / f"vdso-00000000-0000-0000-0000-000000000000-{os.geteuid()}.bin").write_bytes(b"old")
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    load_elf_image(image, "[vdso]")
    assert [e for e in os.listdir(cache) if e.startswith("vdso-")] == kept


def test_symbolizer_resolves_the_vdso_without_a_temporary_file(cache, monkeypatch):
    from pmuscope.symbols import Symbolizer

    if _vdso_image() is None:
        pytest.skip("no [vdso] mapping in this process")
    monkeypatch.setattr("tempfile.NamedTemporaryFile", lambda *a, **k: pytest.fail("temporary file"))
    d = Symbolizer(kernel=False).vdso_dso()
    assert d is not None and d.path == "[vdso]" and any(n.startswith("__vdso_") for n in d.table.names())


def test_the_test_session_keeps_nothing_in_the_users_cache():
    from pmuscope.system.cache import cache_dir

    home = os.path.join(os.path.expanduser("~"), ".cache")
    d = cache_dir()
    assert d is None or not os.path.realpath(d).startswith(os.path.realpath(home) + os.sep)


def test_vdso_image_found_without_the_maps_is_the_mapping(tmp_path):
    from pmuscope.symbols.symbolizer import vdso_image

    image = _vdso_image()
    if image is None:
        pytest.skip("no [vdso] mapping in this process")
    assert vdso_image() == image  # the whole [vdso] mapping, byte for byte
    assert vdso_image(str(tmp_path)) is None  # no auxv there: the caller reads the maps
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "auxv").write_bytes(bytes(16))
    assert vdso_image(str(tmp_path)) is None
