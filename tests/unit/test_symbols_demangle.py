"""Demangling checked against binutils' c++filt (C++ and Rust v0) and known
Rust legacy strings."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess

import pytest

from pmuscope.symbols import ElfFile, cxa_demangle_available, demangle, demangle_rust
from tests.unit.test_symbols_elf import bins  # noqa: F401  (fixture)

demangle_mod = importlib.import_module("pmuscope.symbols.demangle")

# real Rust v0 symbols (from rustc output) and rustc-demangle's grammar cases
RUST_V0 = [
    "_RNvCsbkii2mvYdKU_7___rustc14___rust_realloc",
    "_RNvCsaljjC7ZTCQu_3log6logger",
    "_RNvCs69hjMPjVIJK_4test13test_function",
    "_RNCNvCs1234_5crate3foo0B3_",
    "_RNvC6_123foo3bar",
    "_RNCNCNgCs6DXkGYLi8lr_2cc5spawn00B5_",
    "_RINbNbCskIICzLVDPPb_5alloc5alloc8box_freeDINbNiB4_5boxed5FnBoxuEp6OutputuEL_ECs1iopQbuBiw2_3std",
    "_RNqCs4fqI2P2rA04_11utf8_identsu30____7hkackfecea1cbdathfdh9hlq6y",
    "_RINvNtCs1234_4core3mem4swapReEB4_",
    "_RINvCs1234_1a1fAhj4_EB2_",
    "_RINvCs1234_1a1fTlmEEB2_",
    "_RNvNvMCs1234_7mycrateINtB4_3FooKpE3bar4main",
]

RUST_LEGACY = {
    "_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE":
        "std::rt::lang_start::{{closure}}",
    "_ZN69_$LT$std..os..fd..owned..OwnedFd$u20$as$u20$core..ops..drop..Drop$GT$4drop17h797f0218dc1a33abE":
        "<std::os::fd::owned::OwnedFd as core::ops::drop::Drop>::drop",
    "_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure$u7d$$u7d$$GT$17h4e6e4d4d1f5b1e83E":
        "core::ptr::drop_in_place<std::rt::lang_start<()>::{{closure}}>",
}


def cxxfilt(names: list[str], *opts: str) -> list[str]:
    path = shutil.which("c++filt")
    if path is None:
        pytest.skip("c++filt (binutils) is not installed")
    out = subprocess.run([path, *opts], input="\n".join(names) + "\n", capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return out.splitlines()


# __cxa_demangle (and perf) print the standard substitutions Ss/Si/So/Sd
# abbreviated (Itanium C++ ABI 5.1.5); c++filt spells them out (DMGL_VERBOSE)
_STD_ABBREV = [
    ("std::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"),
    ("std::basic_istream<char, std::char_traits<char> >", "std::istream"),
    ("std::basic_ostream<char, std::char_traits<char> >", "std::ostream"),
    ("std::basic_iostream<char, std::char_traits<char> >", "std::iostream"),
]


def abbreviate(s: str) -> str:
    for full, short in _STD_ABBREV:
        s = s.replace(full, short)
    return re.sub(r" +>", ">", s)


def mangled_names(path, limit=3000) -> list[str]:
    elf = ElfFile.open(path)
    raw = elf.symbols(".symtab") or elf.symbols(".dynsym")
    names = sorted({raw.name(i) for i in range(len(raw))})
    return [n for n in names if n.startswith("_Z")][:limit]


def test_cxx_matches_cxxfilt_on_compiled_program(bins):
    if not cxa_demangle_available():
        pytest.skip("libstdc++ (__cxa_demangle) is not loadable here")
    names = mangled_names(bins["demo_cxx"])
    assert any("Widget" in n for n in names) and len(names) > 20
    got = [demangle(n, params=True) for n in names]
    assert got == cxxfilt(names)
    assert "outer::inner::free_function(std::__cxx11::basic_string<char, std::char_traits<char>, " \
           "std::allocator<char> > const&, int)" in got
    # perf's default (no -v): libiberty's DMGL_NO_OPTS, which is c++filt -p
    short = [demangle(n) for n in names]
    assert short == cxxfilt(names, "-p")
    assert "outer::inner::free_function" in short


def test_cxx_matches_cxxfilt_on_libstdcxx():
    if not cxa_demangle_available():
        pytest.skip("libstdc++ (__cxa_demangle) is not loadable here")
    import ctypes.util
    lib = None
    for cand in ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib64/libstdc++.so.6",
                 "/usr/lib/aarch64-linux-gnu/libstdc++.so.6"):
        if ElfFile.is_elf(cand):
            lib = cand
            break
    if lib is None:
        pytest.skip(f"no libstdc++.so.6 file found ({ctypes.util.find_library('stdc++')})")
    names = [n.split("@")[0] for n in mangled_names(lib, limit=2000)]
    assert len(names) > 500
    got = [demangle(n, params=True) for n in names]
    assert [abbreviate(g) for g in got] == [abbreviate(r) for r in cxxfilt(names)]
    assert "std::istream::gcount() const" in got
    short = [demangle(n) for n in names]
    assert [abbreviate(g) for g in short] == [abbreviate(r) for r in cxxfilt(names, "-p")]
    assert "std::istream::gcount" in short


def test_rust_legacy_known_strings_and_cxxfilt():
    for mangled, want in RUST_LEGACY.items():
        assert demangle(mangled) == want
        assert demangle_rust(mangled, keep_hash=True).startswith(want + "::h")
    # c++filt keeps the hash; perf (and we) drop it
    ref = cxxfilt(list(RUST_LEGACY))
    assert [re.sub(r"::h[0-9a-f]{16}$", "", r) for r in ref] == list(RUST_LEGACY.values())


def test_rust_v0_matches_cxxfilt():
    got = [demangle(n) for n in RUST_V0]
    assert got == cxxfilt(RUST_V0)
    assert got[3] == "crate[3c1c0]::foo::{closure#0}"
    assert got[7] == "utf8_idents[317d481089b8c8fe]::საჭმელად_გემრიელი_სადილი"


@pytest.mark.parametrize("name", ["main", "", "_start", "_Zgarbage", "_RNvC", "_ZN3foo",
                                  "_ZN3foo3barE", "py::f:/x.py", "_R4junk"])
def test_non_mangled_and_invalid_names_unchanged(name):
    got = demangle(name)
    if name == "_ZN3foo3barE":
        assert got == "foo::bar"  # valid C++ nested name, not a Rust hash
    else:
        assert got == name


def test_rust_works_without_libstdcxx(monkeypatch):
    monkeypatch.setattr(demangle_mod, "_cxa", False)
    demangle.cache_clear()
    try:
        assert demangle(RUST_V0[1]) == "log[787ad92bf7d8f288]::logger"
        assert demangle(next(iter(RUST_LEGACY))) == "std::rt::lang_start::{{closure}}"
        assert demangle("_Z3foov") == "_Z3foov"  # C++ needs __cxa_demangle
    finally:
        demangle.cache_clear()


@pytest.mark.parametrize("full, short", [
    ("long work<long>(long)", "work<long>"),
    ("foo::S::bar(int) const", "foo::S::bar"),
    ("unsigned long argpartition_unrolled<zmm_vector<unsigned long>, zmm_vector<unsigned long>, 4, unsigned long>"
     "(unsigned long*, unsigned long*, unsigned long, unsigned long, unsigned long, unsigned long*, unsigned long*)"
     " [clone .part.0] [clone .constprop.0]",
     "argpartition_unrolled<zmm_vector<unsigned long>, zmm_vector<unsigned long>, 4, unsigned long>"),
    ("bool operator< <int>(foo<int> const&, foo<int> const&)", "operator< <int>"),
    ("foo::operator()(int) &&", "foo::operator()"),
    ("foo::operator unsigned long() const", "foo::operator unsigned long"),
    ("operator delete(void*)", "operator delete"),
    ("(anonymous namespace)::run(int)", "(anonymous namespace)::run"),
    ("void std::sort<int*, {lambda(int, int)#1}>(int*, int*)", "std::sort<int*, {lambda(int, int)#1}>"),
    ("non-virtual thunk to foo::bar() const", "non-virtual thunk to foo::bar() const"),
    ("vtable for foo", "vtable for foo"),
])
def test_without_params_as_libiberty(full, short):
    from pmuscope.symbols.demangle import without_params

    assert without_params(full) == short
