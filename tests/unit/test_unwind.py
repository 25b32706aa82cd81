"""DWARF CFI parsing and unwinding: hand-assembled .eh_frame bytes, the
rule rows of real binaries against ``readelf --debug-dump=frames-interp``,
and bad input (truncated stack copies, pcs without CFI, looping or
out-of-bounds CFI) that must stop a chain, never raise or hang."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time

import pytest

#: the readelf golden tests name x86-64 registers
X86 = pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "amd64"),
                         reason="readelf comparison written for x86-64 register names")

from pmuscope.unwind.cfi import (CFA_EXPR, CFA_REG, OFFSET, REGISTER, UNDEF, CfiTable, FrameSection, execute, read_encoded)
from pmuscope.unwind.unwinder import (R_BADCFI, R_LOOP, R_NOCFI, R_READ, TRUNCATED, X86_64, Module, Unwinder, eval_expr,
                                      regs_from_perf)

SEC = 0x2000  # address of the synthetic .eh_frame


def uleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def sleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        done = (v == 0 and not b & 0x40) or (v == -1 and b & 0x40)
        out.append(b | (0 if done else 0x80))
        if done:
            return bytes(out)


def cie(insns: bytes, aug: bytes = b"zR", signal: bool = False) -> bytes:
    aug = aug + (b"S" if signal else b"")
    body = b"\0\0\0\0" + b"\x01" + aug + b"\0" + uleb(1) + sleb(-8) + b"\x10"
    body += uleb(1) + b"\x1b"  # augmentation data: FDE pointers pcrel|sdata4
    body += insns
    body += b"\0" * (-(len(body) + 4) % 8)
    return struct.pack("<I", len(body)) + body


def fde(sec: bytearray, cie_off: int, begin: int, size: int, insns: bytes) -> None:
    """Append an FDE for [begin, begin+size) to ``sec``."""
    at = len(sec)
    ptr = at + 4 - cie_off
    pc_field = at + 8
    body = struct.pack("<I", ptr) + struct.pack("<i", begin - (SEC + pc_field)) + struct.pack("<i", size)
    body += uleb(0) + insns
    body += b"\0" * (-(len(body) + 4) % 8)
    sec += struct.pack("<I", len(body)) + body


# CIE: CFA = rsp + 8, ra at CFA - 8
CIE_INSNS = b"\x0c\x07\x08" + b"\x90\x01"


def synthetic() -> tuple[bytes, dict[str, int]]:
    sec = bytearray(cie(CIE_INSNS))
    # f at 0x1000: push rbp (CFA rsp+16, rbp at CFA-16); remember; CFA rsp+8; restore
    fde(sec, 0, 0x1000, 0x20, b"\x41" + b"\x0e\x10" + b"\x86\x02" + b"\x44" + b"\x0a" + b"\x0e\x08" + b"\x41"
        + b"\x0b")
    # main at 0x1100: outermost (return address undefined)
    fde(sec, 0, 0x1100, 0x20, b"\x07\x10")
    # loop at 0x1300: CFA = rsp + 0 and ra = ra: no progress
    fde(sec, 0, 0x1300, 0x10, b"\x0c\x07\x00" + b"\x09\x10\x10")
    # spin at 0x1400: a CFA expression that jumps to itself
    fde(sec, 0, 0x1400, 0x10, b"\x0f" + uleb(3) + b"\x2f" + struct.pack("<h", -3))
    # far at 0x1500: CFA far above the stack copy
    fde(sec, 0, 0x1500, 0x10, b"\x0c\x07" + uleb(0x100000))
    sec += b"\0\0\0\0"
    return bytes(sec), {"f": 0x1000, "main": 0x1100, "loop": 0x1300, "spin": 0x1400, "far": 0x1500}


def table() -> CfiTable:
    data, _ = synthetic()
    return CfiTable([FrameSection(data, SEC, is_eh=True)])


def test_rows_of_synthetic_eh_frame():
    t = table()
    r = t.row(0x1000)
    assert r.cfa == (CFA_REG, 7, 8) and (16, OFFSET, -8) in r.rules and r.ra == 16
    r = t.row(0x1001)
    assert r.cfa == (CFA_REG, 7, 16) and (6, OFFSET, -16) in r.rules
    assert t.row(0x1004).cfa == (CFA_REG, 7, 16)
    assert t.row(0x1005).cfa == (CFA_REG, 7, 8)  # after remember_state + def_cfa_offset 8
    r = t.row(0x1006)  # restore_state brings back the CFA and rbp rules
    assert r.cfa == (CFA_REG, 7, 16) and (6, OFFSET, -16) in r.rules
    assert (16, UNDEF, 0) in t.row(0x1100).rules
    assert t.row(0x1200) is None  # no FDE
    assert t.row(0x101F) is not None and t.row(0x1020) is None
    assert t.row(0x1400).cfa[0] == CFA_EXPR


def test_index_without_hdr_matches_hdr():
    data, names = synthetic()
    fs = FrameSection(data, SEC, is_eh=True)
    assert [int(b) for b in fs.begin] == sorted(names.values())


def test_pointer_encodings():
    assert read_encoded(struct.pack("<i", -4), 0, 0x1B, pc_base=0x100) == (0xFC, 4)
    assert read_encoded(struct.pack("<H", 7), 0, 0x02, pc_base=0) == (7, 2)
    assert read_encoded(uleb(300), 0, 0x01, pc_base=0) == (300, 2)
    assert read_encoded(sleb(-2), 0, 0x09, pc_base=0) == ((1 << 64) - 2, 1)
    assert read_encoded(struct.pack("<i", 8), 0, 0x3B, pc_base=0, data_base=0x1000) == (0x1008, 4)
    got = read_encoded(struct.pack("<Q", 0x500), 0, 0x80, pc_base=0, read_mem=lambda a: a + 1)
    assert got == (0x501, 8)


def test_plt_cfa_expression():
    # binutils' .plt CFA: rsp + 8 + ((rip & 15) >= 11) << 3
    expr = bytes([0x77, 8, 0x80, 0, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    regs = [0] * 17
    regs[7] = 0x7000
    regs[16] = 0x1000 + 5
    assert eval_expr(expr, regs, None, None) == 0x7008
    regs[16] = 0x1000 + 12
    assert eval_expr(expr, regs, None, None) == 0x7010


def test_regs_from_perf_order():
    # perf order AX BX CX DX SI DI BP SP IP ...; DWARF rax rdx rcx rbx ...
    mask = 0xFF0FFF
    vals = list(range(100, 120))
    r = regs_from_perf(X86_64, mask, vals)
    assert r[0] == 100 and r[3] == 101 and r[2] == 102 and r[1] == 103
    assert r[6] == 106 and r[7] == 107 and r[16] == 108 and r[8] == 112 and r[15] == 119


def make_unwinder(jit: bool = False) -> Unwinder:
    u = Unwinder(None, "x86_64")
    t = None if jit else table()
    mods = ([0x1000], [Module(0x1000, 0x2000, t, 0, jit)])
    u.modules = lambda space: mods
    return u


def regs(pc: int, sp: int, bp: int = 0) -> list:
    r: list = [0] * 17
    r[16], r[7], r[6] = pc, sp, bp
    return r


def stack_of(*words: int) -> bytes:
    return b"".join(struct.pack("<Q", w) for w in words)


def test_unwind_two_frames():
    u = make_unwinder()
    st = stack_of(0x55, 0x1105, 0, 0)
    chain, why = u.unwind(object(), regs(0x1010, 0x7000), st)
    assert chain == [0x1010, 0x1104]  # the caller's return address minus one, as perf prints it
    assert why is None


def test_truncated_stack_copy_stops():
    u = make_unwinder()
    st = stack_of(0x55, 0x1105, 0, 0)
    chain, why = u.unwind(object(), regs(0x1010, 0x7000), st, dyn_size=8)
    assert chain == [0x1010, TRUNCATED] and why == R_READ  # perf marks it with a frame at 0 - 1


def test_pc_without_cfi_stops():
    u = make_unwinder()
    chain, why = u.unwind(object(), regs(0x1200, 0x7000, bp=0), stack_of(0, 0))
    assert chain == [0x1200] and why == R_NOCFI


def test_no_progress_stops():
    u = make_unwinder()
    chain, why = u.unwind(object(), regs(0x1300, 0x7000), stack_of(0, 0))
    assert chain == [0x1300] and why == R_LOOP


def test_looping_expression_is_bounded():
    u = make_unwinder()
    t0 = time.monotonic()
    chain, why = u.unwind(object(), regs(0x1400, 0x7000), stack_of(0, 0))
    assert chain == [0x1400] and why == R_BADCFI
    assert time.monotonic() - t0 < 1


def test_read_outside_copy_stops():
    u = make_unwinder()
    chain, why = u.unwind(object(), regs(0x1500, 0x7000), stack_of(0, 0))
    assert chain == [0x1500, TRUNCATED] and why == R_READ


def test_frame_pointer_rule_for_jit_code():
    u = make_unwinder(jit=True)
    # rbp -> [saved rbp 0x7020][ra 0x1800]; there a return address of 0 ends the walk
    st = stack_of(0, 0, 0x7020, 0x1800, 0, 0, 0, 0)
    chain, why = u.unwind(object(), regs(0x1010, 0x7000, bp=0x7010), st)
    assert chain == [0x1010, 0x17FF] and why is None
    # a frame pointer of 0: nothing to step with
    chain, why = u.unwind(object(), regs(0x1010, 0x7000, bp=0), st)
    assert chain == [0x1010] and why == R_NOCFI


def test_garbage_never_raises():
    import random

    rnd = random.Random(5)
    data, _ = synthetic()
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        t = CfiTable([FrameSection(bytes(b), SEC, is_eh=True)])
        u = Unwinder(None, "x86_64")
        mods = ([0x1000], [Module(0x1000, 0x2000, t, 0, False)])
        u.modules = lambda space, mods=mods: mods
        st = bytes(rnd.randrange(256) for _ in range(64))
        chain, _ = u.unwind(object(), regs(0x1000 + rnd.randrange(0x600), 0x7000), st)
        assert 1 <= len(chain) <= u.max_stack


def test_batch_marks_truncated_and_counts():
    import numpy as np

    from pmuscope.unwind.batch import NREGS, unwind_batch

    u = make_unwinder()
    n = 3
    R = np.zeros((n, NREGS), dtype=np.uint64)
    R[:, 8] = 0x1010  # IP
    R[:, 7] = 0x7000  # SP
    S = np.zeros((n, 32), dtype=np.uint8)
    S[:, :16] = np.frombuffer(stack_of(0x55, 0x1105), dtype=np.uint8)
    masks = np.array([0xFF0FFF, 0xFF0FFF, 0], dtype=np.uint64)
    dyn = np.array([32, 8, 0], dtype=np.uint64)
    chains, why = unwind_batch(u, [object()] * n, R, masks, S, dyn)
    assert chains == [[0x1010, 0x1104], [0x1010, TRUNCATED], []]
    assert why == [None, R_READ, None]
    assert u.stats.samples == 2 and u.stats.truncated == 1
    assert "1 stopped early" in u.stats.summary()


# --- real binaries against readelf ---------------------------------------------------------

_DW = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7, "ra": 16,
       **{f"r{i}": i for i in range(8, 16)}}


def _readelf_rows(path: str, limit: int):
    out = subprocess.run(["readelf", "--debug-dump=frames-interp", path], capture_output=True, text=True,
                         timeout=120).stdout
    rows = []
    cols: list[str] = []
    in_fde = False
    for line in out.splitlines():
        if " FDE " in line or " CIE " in line:
            cols = []
            in_fde = " FDE " in line
            continue
        if line.strip().startswith("LOC") and in_fde:
            cols = line.split()[2:]
            continue
        m = re.match(r"^([0-9a-f]{16}) (\S+)\s+(.*)$", line)
        if m and cols:
            vals = re.findall(r"r\d+ \(\w+\)|\S+", m.group(3))
            rows.append((int(m.group(1), 16), m.group(2), dict(zip(cols, vals))))
            if len(rows) >= limit:
                break
    return rows


def _check_against_readelf(path: str, limit: int = 3000) -> int:
    from pmuscope.symbols import ElfFile

    t = CfiTable.from_elf(ElfFile.open(path))
    checked = 0
    for loc, cfa, regs_ in _readelf_rows(path, limit):
        r = t.row(loc)
        assert r is not None, hex(loc)
        m = re.match(r"^(r\w+)\+(\d+)$", cfa)
        if m:
            assert r.cfa == (CFA_REG, _DW[m.group(1)], int(m.group(2))), (hex(loc), cfa, r.cfa)
        else:
            assert r.cfa[0] == CFA_EXPR, (hex(loc), cfa)
        rules = {reg: (k, v) for reg, k, v in r.rules}
        for name, v in regs_.items():
            if name not in _DW:
                continue
            got = rules.get(_DW[name])
            if v.startswith("c"):
                assert got == (OFFSET, int(v[1:])), (hex(loc), name, v, got)
            elif v.startswith("r") and "(" in v:
                assert got is not None and got[0] == REGISTER and got[1] == int(v[1:v.index(" ")]), (hex(loc), name, v)
            elif v == "u":
                assert got is None or got[0] == UNDEF, (hex(loc), name, got)
        checked += 1
    return checked


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not shutil.which("gcc") or not shutil.which("readelf"):
        pytest.skip("needs gcc and readelf")
    d = tmp_path_factory.mktemp("cfi")
    src = d / "p.c"
    src.write_text("""
#include <stdlib.h>
__attribute__((noinline)) long leaf(long x) { long s = 0; for (long i = 0; i < x; i++) s += i * x; return s; }
__attribute__((noinline)) long rec(long d, long x) { if (!d) return leaf(x); return rec(d - 1, x + 1) + 1; }
int main(int argc, char **argv) { return (int)rec(argc + 3, atol(argv[0])); }
""")
    exe = d / "p"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(exe), str(src)], check=True)
    return exe


@X86
def test_rows_of_gcc_binary_match_readelf(built):
    assert _check_against_readelf(str(built)) > 5


@X86
def test_rows_of_libc_match_readelf():
    import os

    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(libc) or not shutil.which("readelf"):
        pytest.skip("needs x86-64 libc and readelf")
    assert _check_against_readelf(libc, 4000) > 1000


def test_execute_is_bounded_on_long_programs():
    from pmuscope.unwind.cfi import Cie

    c = Cie(1, -8, 16, 0x1B, False, True, b"\x0c\x07\x08")
    r = execute(c, 0x1000, b"\x0a" * 500 + b"\x0b" * 500, 0x1000)
    assert r.cfa == (CFA_REG, 7, 8)


# --- the native loop against the Python reference -------------------------------------------


def _random_batch(seed: int, n: int = 400):
    import random

    import numpy as np

    from pmuscope.unwind.batch import NREGS

    rnd = random.Random(seed)
    R = np.zeros((n, NREGS), dtype=np.uint64)
    W = 256
    S = np.zeros((n, W), dtype=np.uint8)
    dyn = np.zeros(n, dtype=np.uint64)
    masks = np.full(n, 0xFF0FFF, dtype=np.uint64)
    for i in range(n):
        sp = 0x7000 + 8 * rnd.randrange(4)
        R[i, 7] = sp
        R[i, 8] = rnd.choice([0x1010, 0x1001, 0x1000, 0x1005, 0x1006, 0x1104, 0x1200, 0x1300, 0x1400, 0x1500,
                              0x900, 0x1018])
        R[i, 6] = rnd.choice([0, sp + 16, sp + 32, 0x55])
        words = [rnd.choice([0x1011, 0x1106, 0x1019, sp + 48, 0, 0x1201, rnd.randrange(1 << 64)])
                 for _ in range(W // 8)]
        S[i] = np.frombuffer(struct.pack(f"<{W // 8}Q", *words), dtype=np.uint8)
        dyn[i] = rnd.choice([W, W // 2, 24, 8, 0])
    masks[n - 1] = 0
    return R, masks, S, dyn


def test_native_loop_matches_python_reference():
    from pmuscope.unwind import batch

    if not batch.native_unwind_available():
        pytest.skip("the native extension is not built")
    for seed in range(5):
        R, masks, S, dyn = _random_batch(seed)
        u1, u2 = make_unwinder(), make_unwinder()
        spaces = [object()] * len(masks)
        py = batch.unwind_batch(u1, spaces, R, masks, S, dyn, native=False)
        nat = batch.unwind_batch(u2, spaces, R, masks, S, dyn, native=True)
        assert nat == py
        assert u1.stats == u2.stats
    # the rows were compiled once and kept on the unwinder
    assert len(u2._native_rows.keys) > 0


def test_native_loop_hands_expression_rows_to_python():
    from pmuscope.unwind import batch

    if not batch.native_unwind_available():
        pytest.skip("the native extension is not built")
    import numpy as np

    R, masks, S, dyn = _random_batch(9, 50)
    R[:, 8] = 0x1400  # the looping CFA expression: Python's bounded evaluator stops it
    u = make_unwinder()
    chains, why = batch.unwind_batch(u, [object()] * 50, R, masks, S, dyn, native=True)
    assert all(w == R_BADCFI for w, m in zip(why, masks) if m)
    assert np.all([c == [0x1400] for c, m in zip(chains, masks) if m])


def test_frame_pointer_share_of_gcc_builds(tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("needs gcc")
    from pmuscope.unwind.framepointers import frame_pointer_share

    src = tmp_path / "f.c"
    src.write_text("".join(f"__attribute__((noinline)) long f{i}(long x) {{ long s = 0; for (long j = 0; j < x; j++) "
                           f"s += j * {i} + f{i - 1 if i else 0}(x - 1); return s; }}\n" for i in range(20))
                   + "int main(int c, char **v) { return (int)f19(c); }\n")
    for flag, want in (("-fno-omit-frame-pointer", True), ("-fomit-frame-pointer", False)):
        exe = tmp_path / flag
        subprocess.run(["gcc", "-O2", flag, "-o", str(exe), str(src)], check=True)
        share, n = frame_pointer_share(str(exe))
        assert n >= 15 and (share >= 0.5) == want, (flag, share, n)


def test_profile_call_graph_choice(monkeypatch):
    from pmuscope.unwind import framepointers as profile_cmd

    assert profile_cmd.choose_call_graph("fp", ["x"], None, False) == ("fp", None)
    assert profile_cmd.choose_call_graph("dwarf,4096", ["x"], None, False) == ("dwarf,4096", None)
    mode, why = profile_cmd.choose_call_graph("auto", [], None, True)
    assert mode == "fp" and "system-wide" in why
    fpmod = profile_cmd
    monkeypatch.setattr(fpmod, "frame_pointer_share", lambda p: (0.02, 400))
    mode, why = profile_cmd.choose_call_graph("auto", ["sh"], None, False)
    assert mode == "dwarf" and "keeps no frame pointers" in why
    monkeypatch.setattr(fpmod, "frame_pointer_share", lambda p: (0.97, 400))
    assert profile_cmd.choose_call_graph("auto", ["sh"], None, False) == ("fp", None)


@X86
def test_debug_frame_from_separate_debug_file(tmp_path):
    """A stripped binary whose CFI for most functions is only in
    .debug_frame of its separate debug file (found by build id)."""
    for tool in ("gcc", "objcopy", "strip", "readelf"):
        if not shutil.which(tool):
            pytest.skip(f"needs {tool}")
    from pmuscope.symbols import DsoCache, ElfFile, Mapping, Symbolizer

    src = tmp_path / "p.c"
    src.write_text("""
__attribute__((noinline)) double leaf(double x) { double s = 0; for (int i = 0; i < 2000; i++) s += x * i / (i + 1.0); return s; }
__attribute__((noinline)) double rec(int d, double x) { if (d == 0) return leaf(x) + leaf(x + 1); return rec(d - 1, x + 1) * 0.5 + 1; }
int main(int argc, char **argv) { return (int)rec(argc + 3, argc); }
""")
    exe = tmp_path / "p"
    subprocess.run(["gcc", "-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
                    "-fomit-frame-pointer", "-Wl,--build-id", "-o", str(exe), str(src)], check=True)
    dbg = tmp_path / "p.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(exe), str(dbg)], check=True)
    subprocess.run(["strip", "--strip-all", str(exe)], check=True)
    assert ElfFile.open(str(exe)).section(".debug_frame") is None
    assert _check_against_readelf(str(dbg)) >= 2  # .debug_frame parsing
    bid = ElfFile.open(str(exe)).build_id
    root = tmp_path / "debug"
    (root / ".build-id" / bid[:2]).mkdir(parents=True)
    (dbg).rename(root / ".build-id" / bid[:2] / (bid[2:] + ".debug"))
    sym = Symbolizer(kernel=False, cache=DsoCache(debug_root=str(root), buildid_dir=None), vdso=False)
    u = Unwinder(sym, "x86_64")
    start = 0x555555554000
    cfi, bias = u._cfi_for(Mapping(start, 0x5000, 0, str(exe), build_id=bid))
    assert cfi is not None and bias == start
    rows = [r for r in _readelf_rows(str(root / ".build-id" / bid[:2] / (bid[2:] + ".debug")), 100)]
    assert rows
    for loc, cfa, _ in rows:
        m = re.match(r"^rsp\+(\d+)$", cfa)
        if m:
            assert cfi.row(loc).cfa == (CFA_REG, 7, int(m.group(1)))


def test_aarch64_register_set():
    """AArch64: CFA on sp (31), return address in x30, the pc a pseudo
    register; a leaf that keeps x30 in its register; the x29 frame record."""
    from pmuscope.unwind.unwinder import AARCH64

    body = b"\0\0\0\0" + b"\x01" + b"zR\0" + uleb(4) + sleb(-8) + b"\x1e" + uleb(1) + b"\x1b"
    body += b"\x0c\x1f\x00"  # def_cfa sp + 0
    body += b"\0" * (-(len(body) + 4) % 8)
    sec = bytearray(struct.pack("<I", len(body)) + body)
    # f at 0x1000: stp x29, x30, [sp, #-16]! ; mov x29, sp
    fde(sec, 0, 0x1000, 0x40, b"\x41" + b"\x0e\x10" + b"\x9d\x02" + b"\x9e\x01")
    # leaf at 0x1100: nothing saved, x30 still holds the return address
    fde(sec, 0, 0x1100, 0x20, b"")
    # main at 0x1200: outermost
    fde(sec, 0, 0x1200, 0x40, b"\x07\x1e")
    sec += b"\0\0\0\0"
    t = CfiTable([FrameSection(bytes(sec), SEC, is_eh=True)])
    u = Unwinder(None, AARCH64)
    mods = ([0x1000], [Module(0x1000, 0x2000, t, 0, False)])
    u.modules = lambda space: mods
    r: list = [0] * 33
    r[32], r[31], r[30], r[29] = 0x1108, 0x7000, 0x1010, 0x55  # in leaf, called from f
    st = stack_of(0x66, 0x1210, 0, 0)  # f's frame record: x29, x30 (return into main)
    chain, why = u.unwind(object(), r, st)
    assert chain == [0x1108, 0x100F, 0x120F] and why is None
    # the frame-pointer rule (code without CFI): [x29] = caller x29, [x29 + 8] = x30
    uj = Unwinder(None, AARCH64)
    modsj = ([0x1000], [Module(0x1000, 0x2000, None, 0, True)])
    uj.modules = lambda space: modsj
    r = [0] * 33
    r[32], r[31], r[29] = 0x1500, 0x7000, 0x7010
    chain, why = uj.unwind(object(), r, stack_of(0, 0, 0x7020, 0x1800, 0, 0, 0, 0))
    assert chain == [0x1500, 0x17FF] and why is None
    from pmuscope.unwind import batch

    if batch.native_unwind_available():
        import numpy as np

        R = np.zeros((2, batch.NREGS), dtype=np.uint64)
        R[0, [32, 31, 30, 29]] = [0x1108, 0x7000, 0x1010, 0x55]
        R[1, [32, 31, 30, 29]] = [0x1010, 0x7000, 0x1010, 0x55]
        S = np.zeros((2, 64), dtype=np.uint8)
        S[:, :16] = np.frombuffer(stack_of(0x66, 0x1210), dtype=np.uint8)
        masks = np.full(2, (1 << 33) - 1, dtype=np.uint64)
        dyn = np.array([64, 12], dtype=np.uint64)
        got = [batch.unwind_batch(uu, [object()] * 2, R, masks, S, dyn, native=nat)
               for uu, nat in ((u, True), (Unwinder(None, AARCH64), False))
               if not setattr(uu, "modules", lambda space: mods)]
        assert got[0] == got[1]
        assert got[0][0][0] == [0x1108, 0x100F, 0x120F]


@X86
def test_plt_rows_of_a_real_binary(built):
    """The .plt's FDE: PLT0 by offsets, the entries by binutils' CFA
    expression (rsp + 8, or + 16 once the entry has pushed its index)."""
    from pmuscope.symbols import ElfFile

    elf = ElfFile.open(str(built))
    plt = elf.section(".plt")
    if plt is None or plt.sh_size < 32:
        pytest.skip("no lazy-binding .plt in this build")
    t = CfiTable.from_elf(elf)
    u = Unwinder(None, "x86_64")
    sp = 0x7000
    st = stack_of(0x1111, 0x2222, 0x3333, 0x4444)
    mods = ([0], [Module(0, 1 << 40, t, 0, False)])
    u.modules = lambda space: mods
    for entry in range(plt.sh_addr + 16, plt.sh_addr + plt.sh_size, 16):
        row = t.row(entry)
        assert row is not None and row.cfa[0] == CFA_EXPR
        for off, ra in ((0, 0x1111), (6, 0x1111), (11, 0x2222), (15, 0x2222)):
            chain, _ = u.unwind(object(), regs(entry + off, sp), st)
            assert chain[:2] == [entry + off, ra - 1], (hex(entry), off)


def test_native_loop_refuses_inconsistent_buffers():
    from pmuscope.unwind import batch

    if not batch.native_unwind_available():
        pytest.skip("the native extension is not built")
    import numpy as np

    n = 1

    def call(todo, regs_w=17, stack=8):
        batch._native.dwarf_unwind(
            np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros((1, batch.ROWW), np.int64),
            np.array(todo, np.int64), np.zeros(n, np.int64), np.zeros((n, regs_w), np.uint64), np.zeros(n, np.uint64),
            np.zeros(n, np.uint8), np.zeros((n, stack), np.uint8), np.zeros(n, np.uint64), np.zeros(n, np.int64),
            np.zeros((n, 127), np.uint64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.uint64),
            17, 16, 7, 6, -1, 127, stack, 127)

    call([0])  # consistent: runs (and stops: no row for the pc)
    for bad in (dict(todo=[5]), dict(todo=[0], regs_w=3), dict(todo=[-1])):
        with pytest.raises(ValueError):
            call(**bad)


def test_aarch64_signed_return_addresses():
    """Pointer authentication signs the bits above the 48-bit VA range of
    return addresses saved on the stack: they are stripped."""
    from pmuscope.unwind import batch
    from pmuscope.unwind.unwinder import AARCH64

    body = b"\0\0\0\0" + b"\x01" + b"zR\0" + uleb(4) + sleb(-8) + b"\x1e" + uleb(1) + b"\x1b" + b"\x0c\x1f\x00"
    body += b"\0" * (-(len(body) + 4) % 8)
    sec = bytearray(struct.pack("<I", len(body)) + body)
    fde(sec, 0, 0x1000, 0x40, b"\x41" + b"\x0e\x10" + b"\x9d\x02" + b"\x9e\x01")
    fde(sec, 0, 0x1200, 0x40, b"\x07\x1e")
    sec += b"\0\0\0\0"
    t = CfiTable([FrameSection(bytes(sec), SEC, is_eh=True)])
    mods = ([0x1000], [Module(0x1000, 0x2000, t, 0, False)])
    import numpy as np

    R = np.zeros((1, batch.NREGS), dtype=np.uint64)
    R[0, [32, 31, 29]] = [0x1008, 0x7000, 0x55]
    S = np.frombuffer(stack_of(0x66, 0x002A000000001210, 0, 0), dtype=np.uint8).reshape(1, -1).copy()
    masks = np.full(1, (1 << 33) - 1, dtype=np.uint64)
    dyn = np.array([32], dtype=np.uint64)
    for native in (False, True) if batch.native_unwind_available() else (False,):
        u = Unwinder(None, AARCH64)
        u.modules = lambda space: mods
        chains, why = batch.unwind_batch(u, [object()], R, masks, S, dyn, native=native)
        assert chains == [[0x1008, 0x120F]] and why == [None], native


def test_vdso_cfi_is_the_symbolizers_image_of_it(tmp_path):
    """The unwinder takes the vdso's CFI from the image the symbolizer read
    (no temporary file, no maps): the same tables as the mapping copied to
    a file and opened, and the same link-time address of its first byte."""
    import ctypes

    import numpy as np

    from pmuscope.symbols import AddressSpace, ElfFile, Symbolizer
    from pmuscope.unwind.unwinder import _vdso_cfi

    m = next((x for x in AddressSpace.from_proc_maps("self") if x.filename == "[vdso]"), None)
    if m is None:
        pytest.skip("this process has no [vdso] mapping")
    path = tmp_path / "vdso.so"
    path.write_bytes(ctypes.string_at(m.start, m.len))
    elf = ElfFile.open(str(path))
    ref = CfiTable.from_elf(elf)
    cfi, off0 = _vdso_cfi(Symbolizer(kernel=False))
    assert off0 == int(elf.offset_to_vaddr(np.array([0], np.uint64))[0])
    assert len(cfi.sections) == len(ref.sections) > 0
    for a, b in zip(cfi.sections, ref.sections):
        assert (a.data, a.addr, a.is_eh) == (b.data, b.addr, b.is_eh)
        assert list(a.begin) == list(b.begin) and list(a.end) == list(b.end)
