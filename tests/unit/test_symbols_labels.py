"""Zero-size symbols and labels, named as perf names them.

perf takes, besides STT_FUNC/STT_GNU_IFUNC symbols, ``STT_NOTYPE`` labels that
are not hidden or internal and sit in an allocated section whose name
contains "text" (``elf_sym__is_label``, ``elf_sec__filter`` in
``tools/perf/util/symbol-elf.c``), and gives every zero-size symbol an end at
the next symbol's start (``symbols__fixup_end``). So an address in ld.so's
``_dl_start_user`` (a label of size 0 right after the ``_start`` label) is
``_dl_start_user+0x...``, not ``[unknown]`` or ``_start+0x...``.

The tables are checked against a separate implementation of perf's rule on
pyelftools' reading of real ELF files (a program with assembly labels
compiled here, ld.so's and libc's separate debug files when installed), and
on hand-made symbol tables for each condition of the rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from pmuscope.symbols import ElfFile, SymbolTable, load_elf_dso
from pmuscope.symbols.elf import RawSymbols

ZS_C = r"""
#include <stdlib.h>
void zs_label(long n);
void zs_func(long n);
void zs_local(long n);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl zs_label\n"          /* STT_NOTYPE, size 0 */
        "zs_label:\n"
        "1: dec %rdi\n"
        "   jnz 1b\n"
        "   ret\n"
        ".p2align 4\n"
        ".globl zs_func\n"
        ".type zs_func,@function\n"  /* STT_FUNC without .size */
        "zs_func:\n"
        "1: dec %rdi\n"
        "   jnz 1b\n"
        "   ret\n"
        ".p2align 4\n"
        ".globl zs_local\n"
        ".hidden zs_local\n"          /* STV_HIDDEN in the object, STB_LOCAL once linked */
        "zs_local:\n"
        "1: dec %rdi\n"
        "   jnz 1b\n"
        "   ret\n"
        ".section .rodata\n"
        "zs_rodata_label: .quad 0\n"  /* a label outside text: never a symbol */
        ".text\n");
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 300000000L;
    zs_label(n); zs_func(n); zs_local(n);
    return 0;
}
"""


@pytest.fixture(scope="session")
def zs_binary(tmp_path_factory):
    """The program above, linked, and its object file (labels keep their
    visibility there)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("zero_size")
    src = d / "zs.c"
    src.write_text(ZS_C)
    exe, obj = d / "zs", d / "zs.o"
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(exe), str(src)], check=True,
                   capture_output=True, timeout=120)
    subprocess.run(["gcc", "-O1", "-c", "-o", str(obj), str(src)], check=True, capture_output=True, timeout=120)
    return {"exe": str(exe), "obj": str(obj), "src": str(src)}


# -- perf's rule, written out separately on pyelftools' reading ---------------------------------
def perf_rule_symbols(path: str) -> list[tuple[int, int, str]]:
    """``(start, end, name)`` of the function symbols perf 6.x keeps for the
    ELF file ``path`` (its .symtab, else .dynsym), sorted by start: functions
    and text labels, one per address by ``choose_best_symbol``, zero sizes
    ended at the next start (the last one at the next page + 4096)."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        tab = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        sections = list(elf.iter_sections())
        syms = []
        for s in tab.iter_symbols():
            typ, bind = s["st_info"]["type"], s["st_info"]["bind"]
            shndx, vis = s["st_shndx"], s["st_other"]["visibility"]
            if not s.name or shndx == "SHN_UNDEF" or s["st_value"] == 0:
                continue
            is_func = typ in ("STT_FUNC", "STT_LOOS")  # STT_GNU_IFUNC == STT_LOOS
            is_label = (typ == "STT_NOTYPE" and shndx != "SHN_ABS" and isinstance(shndx, int)
                        and vis not in ("STV_HIDDEN", "STV_INTERNAL"))
            if not (is_func or is_label):
                continue
            if isinstance(shndx, int):
                sec = sections[shndx]
                if not sec["sh_flags"] & 0x2:  # SHF_ALLOC
                    continue
                if is_label and "text" not in sec.name:
                    continue
            syms.append((s["st_value"], s["st_size"], bind, s.name))

    def under(n):
        return len(n) - len(n.lstrip("_"))

    best: dict[int, tuple] = {}
    for start, size, bind, name in syms:
        # choose_best_symbol: sized, non-weak, global, fewer leading underscores, longer name
        key = (size == 0, bind == "STB_WEAK", bind != "STB_GLOBAL", under(name), -len(name))
        if start not in best or key < best[start][0]:
            best[start] = (key, size, name)
    starts = sorted(best)
    out = []
    for i, start in enumerate(starts):
        _, size, name = best[start]
        if size:
            end = start + size
        elif i + 1 < len(starts):
            end = starts[i + 1]
        else:
            end = ((start + 4095) & ~4095) + 4096
        out.append((start, end, name))
    return out


def _probe_addresses(table):
    addrs = set()
    for start, end, _ in table:
        addrs.update((start, start + 1, (start + end) // 2, end - 1, end))
    return sorted(addrs)


def _compare(path: str, table: SymbolTable, limit: int | None = None):
    ref = perf_rule_symbols(path)
    assert ref, path
    probes = _probe_addresses(ref)
    if limit and len(probes) > limit:
        probes = probes[:: len(probes) // limit]
    # a sorted sweep instead of perf_rule_lookup per address (libc has thousands of symbols)
    starts = np.array([r[0] for r in ref], dtype=np.uint64)
    ends = np.array([r[1] for r in ref], dtype=np.uint64)
    a = np.array(probes, dtype=np.uint64)
    i = np.searchsorted(starts, a, side="right") - 1
    ok = (i >= 0) & (a < ends[np.maximum(i, 0)])
    idx, off = table.lookup(a)
    bad = []
    for k, addr in enumerate(probes):
        want = (ref[i[k]][2], addr - ref[i[k]][0]) if ok[k] else None
        got = (table.name(int(idx[k])), int(off[k])) if idx[k] >= 0 else None
        if want != got:
            bad.append((hex(addr), want, got))
    assert not bad, bad[:10]
    return len(probes)


def test_labels_and_zero_size_functions_named_like_perf(zs_binary):
    t = load_elf_dso(zs_binary["exe"]).table
    syms = {n: int(a) for n, a in ((t.name(i), t.starts[i]) for i in range(len(t)))}
    assert {"zs_label", "zs_func", "zs_local", "main"} <= set(syms)
    assert "zs_rodata_label" not in syms
    for name in ("zs_label", "zs_func", "zs_local"):
        for k in (0, 3, 5):  # each is 6 bytes: dec, jnz, ret
            assert t.find(syms[name] + k) == (name, k)
    # zero sizes end at the next symbol: zs_label ends where zs_func starts
    i = int(np.searchsorted(t.starts, syms["zs_label"]))
    assert int(t.ends[i]) == syms["zs_func"]
    # the .symtab alone (the DSO's table also has the synthesized name@plt entries)
    _compare(zs_binary["exe"], SymbolTable.from_elf(ElfFile.open(zs_binary["exe"]).symbols(".symtab")))


def test_hidden_label_is_not_a_symbol(zs_binary):
    """In the object file zs_local is still STV_HIDDEN: perf skips it, so its
    code belongs to the zero-size zs_func before it (fixed up to main)."""
    elf = ElfFile.open(zs_binary["obj"])
    t = SymbolTable.from_elf(elf.symbols(".symtab"))
    names = t.names()
    # (zs_label is at .text+0 here, and address 0 is never a symbol, as in perf)
    assert "zs_func" in names and "zs_local" not in names
    zs_func = int(t.starts[names.index("zs_func")])
    assert t.find(zs_func + 0x14)[0] == "zs_func"  # zs_local's code
    _compare(zs_binary["obj"], t)


def _debug_file(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    dso = load_elf_dso(path)
    return dso.symtab_path if dso.symtab_path and dso.symtab_path != path else None


@pytest.mark.parametrize("lib", ["ld-linux-x86-64.so.2", "libc.so.6"])
def test_real_debug_symbols_follow_perf_rule(lib):
    """ld.so's and libc's separate debug files (libc6-dbg): every symbol's
    start, start+1, middle, last byte and end resolve as perf's rule says;
    ld.so's _dl_start_user (a size-0 label) names its own code."""
    path = os.path.realpath(f"/lib/x86_64-linux-gnu/{lib}")
    dbg = _debug_file(path)
    if dbg is None:
        pytest.skip(f"no separate debug file with a .symtab for {path} (libc6-dbg)")
    t = load_elf_dso(path).table
    n = _compare(dbg, SymbolTable.from_elf(ElfFile.open(dbg).symbols(".symtab")), limit=20000)
    assert n > 100
    if lib.startswith("ld-"):
        names = t.names()
        start_user = int(t.starts[names.index("_dl_start_user")])
        assert t.find(start_user) == ("_dl_start_user", 0)
        assert t.find(start_user + 0x10) == ("_dl_start_user", 0x10)
        assert t.find(int(t.starts[names.index("_start")]) + 4) == ("_start", 4)


# -- each condition of the rule on hand-made tables -----------------------------------------------
def _raw(rows, label_sections):
    """rows: (name, value, size, type, bind, visibility, shndx)."""
    blob = b"\0"
    offs = []
    for r in rows:
        offs.append(len(blob))
        blob += r[0].encode() + b"\0"
    return RawSymbols(
        st_name=np.array(offs, dtype=np.int64),
        st_value=np.array([r[1] for r in rows], dtype=np.uint64),
        st_size=np.array([r[2] for r in rows], dtype=np.uint64),
        st_info=np.array([(r[4] << 4) | r[3] for r in rows], dtype=np.uint8),
        st_shndx=np.array([r[6] for r in rows], dtype=np.uint16),
        strtab=blob, section=".symtab",
        st_other=np.array([r[5] for r in rows], dtype=np.uint8),
        label_sections=np.array(label_sections, dtype=np.uint8))


def test_label_conditions():
    NOTYPE, FUNC, GLOBAL, LOCAL = 0, 2, 1, 0
    # sections: 0 null, 1 .text (1), 2 .rodata (0), 3 .data (2), 4 .init_text-like non-alloc (0)
    secs = [0, 1, 0, 2, 0]
    rows = [("f", 0x1000, 0x10, FUNC, GLOBAL, 0, 1),
            ("lab", 0x1010, 0, NOTYPE, GLOBAL, 0, 1),          # taken
            ("hid", 0x1020, 0, NOTYPE, GLOBAL, 2, 1),          # STV_HIDDEN: no
            ("int", 0x1030, 0, NOTYPE, GLOBAL, 1, 1),          # STV_INTERNAL: no
            ("abs", 0x1040, 0, NOTYPE, GLOBAL, 0, 0xFFF1),     # SHN_ABS: no
            ("ro", 0x2000, 0, NOTYPE, LOCAL, 0, 2),            # not text: no
            ("nonalloc", 0x2100, 0, NOTYPE, LOCAL, 0, 4),      # not allocated: no
            ("dat", 0x3000, 0, NOTYPE, LOCAL, 0, 3),           # data: only with objects
            ("g", 0x4000, 0x10, FUNC, GLOBAL, 0, 1)]
    t = SymbolTable.from_elf(_raw(rows, secs))
    assert t.names() == ["f", "lab", "g"]
    assert t.find(0x1010) == ("lab", 0)
    assert t.find(0x1035) == ("lab", 0x25)  # a zero-size symbol ends at the next start
    assert t.find(0x3fff) == ("lab", 0x2fef)
    t2 = SymbolTable.from_elf(_raw(rows, secs), include_objects=True)
    assert t2.names() == ["f", "lab", "dat", "g"]
    assert t2.find(0x2500) == ("lab", 0x14f0) and t2.find(0x3004) == ("dat", 4)
    # a sized function wins over a label at the same address
    both = [("label_alias", 0x1000, 0, NOTYPE, GLOBAL, 0, 1), ("fn", 0x1000, 0x20, FUNC, LOCAL, 0, 1)]
    assert SymbolTable.from_elf(_raw(both, secs)).find(0x1004) == ("fn", 4)
    # without section information (a table not read from a file) no label is taken
    raw = _raw(rows, secs)
    raw.label_sections = None
    assert SymbolTable.from_elf(raw).names() == ["f", "g"]
