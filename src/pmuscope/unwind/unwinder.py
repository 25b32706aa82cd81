"""Unwinding of ``PERF_SAMPLE_REGS_USER`` + ``PERF_SAMPLE_STACK_USER``
samples with DWARF CFI: the pure-Python reference.

Per sample: the user registers (perf's ``sample_regs_user`` order) become a
DWARF register file; each step finds the rule row of the pc (looked up at
``pc - 1`` for every frame but the first and those after a signal frame, as
libdw and libunwind do), computes the CFA and the caller's registers, reading
memory only from the sample's stack copy (``dyn_size`` bytes from its SP).
Code with no CFI (JIT code named by ``/tmp/perf-PID.map``, stripped
binaries) is stepped with the frame-pointer rule, as elfutils' x86-64 and
AArch64 backends do.

Returned addresses are what ``perf script`` prints for a dwarf call chain:
the first pc as is, each caller's return address minus one (libdw's
``dwfl_frame_pc(..., &isactivation)`` adjustment), a signal frame's caller
unadjusted.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from ..errors import FormatError
from ..symbols import ElfFile, debug_file_candidates
from .cfi import (CFA_EXPR, EXPR, OFFSET, REGISTER, UNDEF, VAL_EXPR, VAL_OFFSET, CfiError, CfiTable, sleb,
                  uleb)

_U64 = struct.Struct("<Q")
_M64 = (1 << 64) - 1
#: perf's default --max-stack (sysctl kernel.perf_event_max_stack)
MAX_STACK = 127
#: operation bound for one DWARF expression
MAX_EXPR_OPS = 1000

#: the last frame of a chain cut by the end of the stack copy (perf's ``0 - 1``)
TRUNCATED = _M64

# why a chain stopped early (UnwindStats.reasons keys)
R_READ = "stack read outside the copy"
R_NOCFI = "no CFI for pc"
R_NOMAP = "pc outside every mapping"
R_BADCFI = "bad CFI or expression"
R_LOOP = "no progress"
R_MAX = "max-stack reached"


@dataclass(frozen=True)
class Arch:
    """A register set: ``dwarf_of_perf[i]`` is the DWARF number of perf
    register i (-1: not used); ``pc``/``sp``/``fp`` are DWARF numbers
    (``pc`` may be a pseudo register past the DWARF ones, as on AArch64)."""

    name: str
    nregs: int
    dwarf_of_perf: tuple
    pc: int
    sp: int
    fp: int
    lr: int  # AArch64's link register, -1 on x86-64
    #: bits of a return address that are address: AArch64 pointer
    #: authentication signs the bits above the 48-bit user VA range
    pc_mask: int = (1 << 64) - 1


# x86-64 perf_regs.h: AX BX CX DX SI DI BP SP IP FLAGS CS SS DS ES FS GS R8..R15
# DWARF (SysV psABI figure 3.36): rax rdx rcx rbx rsi rdi rbp rsp r8..r15 RA(rip)=16
X86_64 = Arch("x86_64", 17, (0, 3, 2, 1, 4, 5, 6, 7, 16, -1, -1, -1, -1, -1, -1, -1,
                              8, 9, 10, 11, 12, 13, 14, 15), pc=16, sp=7, fp=6, lr=-1)
# arm64 perf_regs.h: X0..X30 SP PC; DWARF: x0..x30 = 0..30, sp = 31 (pc: pseudo 32)
AARCH64 = Arch("aarch64", 33, tuple(range(33)), pc=32, sp=31, fp=29, lr=30, pc_mask=(1 << 48) - 1)
ARCHES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


@dataclass
class UnwindStats:
    """What unwinding did: samples with a stack copy, how many stopped early
    and why."""

    samples: int = 0
    frames: int = 0
    truncated: int = 0
    reasons: dict = field(default_factory=dict)

    def stop(self, reason: str) -> None:
        self.truncated += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def summary(self) -> str:
        """One line, e.g. ``dwarf unwinding: 9812 samples, 120 stopped early (stack read outside the copy: 118, ...)``."""
        why = ", ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items(), key=lambda kv: -kv[1]))
        return (f"dwarf unwinding: {self.samples} samples, {self.frames} user frames, "
                f"{self.truncated} stopped early" + (f" ({why})" if why else ""))


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def regs_from_perf(arch: Arch, mask: int, values) -> list:
    """The DWARF register file of one sample: ``values`` are the sampled
    registers in ``mask`` bit order (perf's layout); unknown ones are None."""
    regs: list = [None] * arch.nregs
    m = mask
    i = 0
    bit = 0
    dop = arch.dwarf_of_perf
    n = len(values)
    while m and i < n:
        if m & 1:
            if bit < len(dop) and dop[bit] >= 0:
                regs[dop[bit]] = int(values[i])
            i += 1
        m >>= 1
        bit += 1
    return regs


class _Reader:
    """Reads 8-byte words of the stack copy (``limit``: the end of its
    ``dyn_size`` valid bytes); anything else stops the chain."""

    __slots__ = ("stack", "sp0", "limit")

    def __init__(self, stack: bytes, sp0: int, limit: int) -> None:
        self.stack, self.sp0, self.limit = stack, sp0, limit

    def __call__(self, addr: int) -> int:
        off = addr - self.sp0
        if off < 0 or addr + 8 > self.limit:
            raise _Stop(R_READ)
        return _U64.unpack_from(self.stack, off)[0]


class Module:
    """One executable mapping: its CFI and ``bias`` (link-time address =
    ``pc - bias``); ``cfi`` None for code without CFI (JIT, anonymous)."""

    __slots__ = ("start", "end", "cfi", "bias", "jit")

    def __init__(self, start: int, end: int, cfi: CfiTable | None, bias: int, jit: bool) -> None:
        self.start, self.end, self.cfi, self.bias, self.jit = start, end, cfi, bias, jit


class Unwinder:
    """DWARF unwinder over a :class:`~pmuscope.symbols.Symbolizer`'s address
    spaces and parsed binaries (CFI tables are kept per binary)."""

    def __init__(self, symbolizer, arch: str | Arch = "x86_64", *, max_stack: int = MAX_STACK) -> None:
        self.symbolizer = symbolizer
        self.arch = ARCHES[arch] if isinstance(arch, str) else arch
        self.max_stack = max_stack
        self.stats = UnwindStats()
        self._cfi_of: dict = {}  # id key of a binary -> CfiTable | None
        self._mods_of: dict = {}  # (id(space), generation) -> (starts, modules)

    # -- address spaces -------------------------------------------------------------
    def _cfi_for(self, m) -> tuple[CfiTable | None, int]:
        """CFI and bias of a file mapping ``m``."""
        sym = self.symbolizer
        if m.filename == "[vdso]":
            if not getattr(sym, "vdso", False):
                return None, 0
            got = self._cfi_of.get(("[vdso]",))
            if got is None:
                got = self._cfi_of[("[vdso]",)] = _vdso_cfi(sym)
            cfi, off0 = got
            if cfi is None:
                return None, 0
            # the vdso image is mapped from its start: vaddr = pc - start + (vaddr of file offset 0)
            return cfi, (m.start - off0) & _M64
        fname = m.filename
        if fname.endswith(" (deleted)"):
            fname = fname[:-10]
        path = sym.sysroot + fname if sym.sysroot else fname
        dso = sym.cache.get(path, m.build_id)
        if dso is None or dso.elf is None:
            return None, 0
        key = (dso.path, id(dso))
        cfi = self._cfi_of.get(key, False)
        if cfi is False:
            # .debug_frame may only be in the separate debug file: the one the
            # symbols came from, else the build-id one
            dbg_path = dso.symtab_path if dso.symtab_path and dso.symtab_path != dso.path else None
            if dbg_path is None and dso.build_id:
                dbg_path = next((c for _, c in debug_file_candidates(dso.path, dso.build_id, None,
                                                                     sym.cache.debug_root) if os.path.isfile(c)), None)
            dbg = None
            if dbg_path is not None:
                try:
                    dbg = ElfFile.open(dbg_path)
                except (OSError, FormatError):  # an unreadable debug file: .eh_frame alone
                    dbg = None
            cfi = self._cfi_of[key] = CfiTable.from_elf(dso.elf, dbg)
        if not cfi.sections:
            return None, 0
        # one bias for the mapping: its first byte's file offset -> vaddr
        v0 = int(dso.map_to_vaddr(np.array([m.start], np.uint64), m.start, m.pgoff)[0])
        return cfi, (m.start - v0) & _M64

    def modules(self, space) -> tuple[list, list]:
        """``(starts, modules)`` of an address space's executable mappings (cached per generation)."""
        key = (id(space), space.generation)
        got = self._mods_of.get(key)
        if got is not None and got[0] is space:  # (the space is kept: its id cannot name another one)
            return got[1]
        starts, mods = [], []
        for m in space:
            if not m.prot & 4:  # PROT_EXEC
                continue
            if m.is_anon:
                mod = Module(m.start, m.end, None, 0, True)
            elif m.is_special and m.filename != "[vdso]":
                mod = Module(m.start, m.end, None, 0, False)
            else:
                cfi, bias = self._cfi_for(m)
                mod = Module(m.start, m.end, cfi, bias, False)
            starts.append(m.start)
            mods.append(mod)
        if len(self._mods_of) > 4096:
            self._mods_of.clear()
        self._mods_of[key] = (space, (starts, mods))
        return starts, mods

    # -- one sample -------------------------------------------------------------------
    def unwind(self, space, regs: list, stack: bytes, dyn_size: int | None = None) -> tuple[list[int], str | None]:
        """The user call chain of one sample (leaf first, as perf prints it)
        and why it stopped early (None: it reached the outermost frame)."""
        pc = regs[self.arch.pc]
        if pc is None:
            return [], R_BADCFI
        if regs[self.arch.sp] is None:
            return [pc], R_READ
        return self.resume(space, regs, stack, dyn_size, [pc], True, regs[self.arch.sp])

    def resume(self, space, regs: list, stack: bytes, dyn_size: int | None, out: list[int], activation: bool,
               sp0: int) -> tuple[list[int], str | None]:
        """Go on unwinding from ``regs`` (the registers of the frame whose pc
        is the last of ``out``); ``sp0`` is the sample's SP, where the stack
        copy starts. (The native unwinder hands samples over to here at rows
        it does not handle.)"""
        arch = self.arch
        pcn, spn = arch.pc, arch.sp
        pc = regs[pcn]
        size = len(stack) if dyn_size is None else min(int(dyn_size), len(stack))
        starts, mods = self.modules(space) if space is not None else ([], [])
        max_stack = self.max_stack
        # perf's access_mem() (unwind-libunwind-local.c) refuses a word that
        # ends exactly at the end of the copy (``addr + 8 >= end``): so do we,
        # so that chains stop where perf's stop
        limit = sp0 + size - 1

        read = _Reader(stack, sp0, limit)

        reason = None
        try:
            while True:
                if len(out) >= max_stack:
                    reason = R_MAX
                    break
                look = pc if activation else pc - 1
                i = bisect_right(starts, look) - 1
                mod = mods[i] if i >= 0 else None
                if mod is None or look >= mod.end:
                    reason = R_NOMAP
                    break
                row = mod.cfi.row(look - mod.bias) if mod.cfi is not None else None
                if row is None:
                    new = self._fp_step(regs, read)
                    if new is None:
                        reason = R_NOCFI
                        break
                    signal = False
                else:
                    new = self._apply(row, regs, read)
                    signal = row.signal
                npc = new[pcn]
                if npc is not None and arch.pc_mask != _M64:
                    npc = new[pcn] = npc & arch.pc_mask
                if npc is None or npc == 0:
                    break  # the outermost frame (return address undefined)
                nsp = new[spn]
                if nsp is None or (npc == pc and nsp == regs[spn]):
                    reason = R_LOOP
                    break
                regs = new
                pc = npc
                out.append(pc if signal else pc - 1)
                activation = signal
        except _Stop as s:
            reason = s.reason
        except (CfiError, IndexError, struct.error, ValueError, TypeError):
            reason = R_BADCFI
        if reason == R_READ and len(out) < max_stack:
            # perf (libunwind) ends such a chain with a frame at 0 - 1, printed
            # as "ffffffffffffffff [unknown]": the mark of a truncated stack copy
            out.append(TRUNCATED)
        return out, reason

    def _fp_step(self, regs: list, read) -> list | None:
        arch = self.arch
        fp = regs[arch.fp]
        if not fp:
            return None
        new = list(regs)
        if arch.lr < 0:  # x86-64: CFA = rbp + 16, ra = [CFA - 8], rbp = [CFA - 16]
            new[arch.pc] = read(fp + 8)
            new[arch.fp] = read(fp)
            new[arch.sp] = (fp + 16) & _M64
        else:  # AArch64 frame record: [x29] = caller x29, [x29 + 8] = x30
            lr = read(fp + 8)
            new[arch.fp] = read(fp)
            new[arch.lr] = lr
            new[arch.pc] = lr
            new[arch.sp] = (fp + 16) & _M64
        return new

    def _apply(self, row, regs: list, read) -> list:
        arch = self.arch
        kind, reg, off = row.cfa
        if kind == CFA_EXPR:
            cfa = eval_expr(reg, regs, read, None)
        else:
            base = regs[reg] if reg < len(regs) else None
            if base is None:
                raise _Stop(R_BADCFI)
            cfa = (base + off) & _M64
        new = list(regs)
        ra = row.ra
        for r, k, v in row.rules:
            if r >= arch.nregs:
                continue
            if k == OFFSET:
                addr = (cfa + v) & _M64
                off = addr - read.sp0
                if 0 <= off and addr + 8 <= read.limit:
                    new[r] = _U64.unpack_from(read.stack, off)[0]
                elif r == ra:
                    raise _Stop(R_READ)
                else:
                    # a register saved outside the copy is only unknown to the
                    # caller (libdw leaves it undefined and goes on)
                    new[r] = None
            elif k == VAL_OFFSET:
                new[r] = (cfa + v) & _M64
            elif k == UNDEF:
                new[r] = None
            elif k == REGISTER:
                new[r] = regs[v] if v < len(regs) else None
            elif k == EXPR:
                new[r] = read(eval_expr(v, regs, read, cfa))
            elif k == VAL_EXPR:
                new[r] = eval_expr(v, regs, read, cfa)
        new[arch.sp] = cfa if not any(r == arch.sp for r, _, _ in row.rules) else new[arch.sp]
        if ra != arch.pc:
            new[arch.pc] = new[ra] if ra < arch.nregs else None
        return new


def _vdso_cfi(sym) -> tuple[CfiTable | None, int]:
    """CFI of the running kernel's vdso (one image per kernel, as perf
    assumes): the image the symbolizer read from this process's memory
    (``Symbolizer.vdso_dso``); and the link-time address of its first byte."""
    try:
        dso = sym.vdso_dso()
        if dso is None or dso.elf is None:
            return None, 0
        cfi = CfiTable.from_elf(dso.elf)  # reads the sections now
        return cfi, int(dso.elf.offset_to_vaddr(np.array([0], np.uint64))[0])
    except Exception:  # no vdso to read: its frames are stepped without CFI
        return None, 0


def eval_expr(expr: bytes, regs: list, read, push: int | None) -> int:
    """A DWARF location expression (DWARF 5 section 2.5) on a 64-bit stack;
    ``push`` is the initial stack entry (the CFA for register rules).
    Bounded to :data:`MAX_EXPR_OPS` operations."""
    st: list[int] = [] if push is None else [push]
    p = 0
    n = len(expr)
    ops = 0
    d = expr
    while p < n:
        ops += 1
        if ops > MAX_EXPR_OPS:
            raise _Stop(R_BADCFI)
        op = d[p]
        p += 1
        if 0x30 <= op <= 0x4F:  # lit0..31
            st.append(op - 0x30)
        elif 0x70 <= op <= 0x8F:  # breg0..31
            v, p = sleb(d, p)
            r = regs[op - 0x70] if op - 0x70 < len(regs) else None
            if r is None:
                raise _Stop(R_BADCFI)
            st.append((r + v) & _M64)
        elif 0x50 <= op <= 0x6F:  # reg0..31 (a value, as in val_expression)
            r = regs[op - 0x50] if op - 0x50 < len(regs) else None
            if r is None:
                raise _Stop(R_BADCFI)
            st.append(r)
        elif op == 0x92:  # bregx
            rn, p = uleb(d, p)
            v, p = sleb(d, p)
            r = regs[rn] if rn < len(regs) else None
            if r is None:
                raise _Stop(R_BADCFI)
            st.append((r + v) & _M64)
        elif op == 0x06:  # deref
            st.append(read(st.pop()))
        elif op == 0x94:  # deref_size
            sz = d[p]; p += 1
            v = read(st.pop())
            st.append(v & ((1 << (8 * sz)) - 1) if sz < 8 else v)
        elif op == 0x08:
            st.append(d[p]); p += 1
        elif op == 0x09:
            st.append(struct.unpack_from("<b", d, p)[0] & _M64); p += 1
        elif op == 0x0A:
            st.append(struct.unpack_from("<H", d, p)[0]); p += 2
        elif op == 0x0B:
            st.append(struct.unpack_from("<h", d, p)[0] & _M64); p += 2
        elif op == 0x0C:
            st.append(struct.unpack_from("<I", d, p)[0]); p += 4
        elif op == 0x0D:
            st.append(struct.unpack_from("<i", d, p)[0] & _M64); p += 4
        elif op == 0x0E:
            st.append(struct.unpack_from("<Q", d, p)[0]); p += 8
        elif op == 0x0F:
            st.append(struct.unpack_from("<q", d, p)[0] & _M64); p += 8
        elif op == 0x10:
            v, p = uleb(d, p); st.append(v & _M64)
        elif op == 0x11:
            v, p = sleb(d, p); st.append(v & _M64)
        elif op == 0x12:
            st.append(st[-1])
        elif op == 0x13:
            st.pop()
        elif op == 0x14:
            st.append(st[-2])
        elif op == 0x15:
            i = d[p]; p += 1
            st.append(st[-1 - i])
        elif op == 0x16:
            st[-1], st[-2] = st[-2], st[-1]
        elif op == 0x17:
            st[-1], st[-2], st[-3] = st[-2], st[-3], st[-1]
        elif op == 0x23:  # plus_uconst
            v, p = uleb(d, p)
            st.append((st.pop() + v) & _M64)
        elif 0x19 <= op <= 0x2E and op not in (0x23, 0x28):
            if op in (0x19, 0x1F, 0x20):  # unary: abs, neg, not
                a = st.pop()
                sa = a - (1 << 64) if a >> 63 else a
                st.append((abs(sa) if op == 0x19 else -sa if op == 0x1F else ~a) & _M64)
                continue
            b = st.pop()
            a = st.pop()
            sa = a - (1 << 64) if a >> 63 else a
            sb = b - (1 << 64) if b >> 63 else b
            if op == 0x1A:
                v = a & b
            elif op == 0x1B:
                if sb == 0:
                    raise _Stop(R_BADCFI)
                v = int(sa / sb)
            elif op == 0x1C:
                v = a - b
            elif op == 0x1D:
                if b == 0:
                    raise _Stop(R_BADCFI)
                v = a % b
            elif op == 0x1E:
                v = a * b
            elif op == 0x21:
                v = a | b
            elif op == 0x22:
                v = a + b
            elif op == 0x24:
                v = a << b if b < 64 else 0
            elif op == 0x25:
                v = a >> b if b < 64 else 0
            elif op == 0x26:
                v = sa >> min(b, 63)
            elif op == 0x27:
                v = a ^ b
            elif op == 0x29:
                v = int(sa == sb)
            elif op == 0x2A:
                v = int(sa >= sb)
            elif op == 0x2B:
                v = int(sa > sb)
            elif op == 0x2C:
                v = int(sa <= sb)
            elif op == 0x2D:
                v = int(sa < sb)
            elif op == 0x2E:
                v = int(sa != sb)
            else:
                raise _Stop(R_BADCFI)
            st.append(v & _M64)
        elif op == 0x2F:  # skip
            v = struct.unpack_from("<h", d, p)[0]
            p += 2 + v
        elif op == 0x28:  # bra
            v = struct.unpack_from("<h", d, p)[0]
            p += 2
            if st.pop():
                p += v
        elif op == 0x96:  # nop
            pass
        else:
            raise _Stop(R_BADCFI)
        if p < 0:
            raise _Stop(R_BADCFI)
    if not st:
        raise _Stop(R_BADCFI)
    return st[-1]
