"""DWARF call-frame information: ``.eh_frame`` (indexed by ``.eh_frame_hdr``
when present) and ``.debug_frame``, parsed lazily into one *rule row* per
code address.

A row says how to find the caller's registers from the callee's: the CFA
(canonical frame address) as ``register + offset`` or a DWARF expression,
and a rule per register (DWARF 5 section 6.4.1). Rows are computed on demand
for the one address asked about (the CIE's initial instructions, then the
FDE's up to that address) and cached per address by :class:`CfiTable`.

Layouts: DWARF 5 section 6.4 (CIE/FDE, DW_CFA_*), the LSB's ``.eh_frame``
chapter (augmentation strings ``zR``/``zPLR``/``S``, DW_EH_PE_* pointer
encodings, the ``.eh_frame_hdr`` search table).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import FormatError

# rule kinds
SAME, UNDEF, OFFSET, VAL_OFFSET, REGISTER, EXPR, VAL_EXPR = range(7)
# CFA kinds
CFA_REG, CFA_EXPR = 0, 1

#: instruction bound for one CFA program (CIE + FDE); the format has no
#: jumps, so only a corrupt length can make it long
MAX_CFA_OPS = 100_000

_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_S16, _S32, _S64 = struct.Struct("<h"), struct.Struct("<i"), struct.Struct("<q")
_M64 = (1 << 64) - 1


class CfiError(Exception):
    """Malformed CFI (an FDE, CIE or instruction that runs outside its section)."""


class Row(NamedTuple):
    """The unwind rule row of one code address.

    ``cfa`` is ``(CFA_REG, reg, offset)`` or ``(CFA_EXPR, expr bytes, 0)``;
    ``rules`` holds ``(reg, kind, value)`` for every register whose rule is
    not "same value" (``value``: an offset, a register or expression bytes);
    ``ra`` is the return-address column; ``signal`` is True for a signal
    frame's FDE (augmentation ``S``): its caller's pc is the interrupted
    instruction itself, not a return address.
    """

    cfa: tuple
    rules: tuple
    ra: int
    signal: bool


def uleb(d: bytes, p: int) -> tuple[int, int]:
    r = s = 0
    while True:
        b = d[p]
        p += 1
        r |= (b & 0x7F) << s
        s += 7
        if b < 0x80:
            return r, p


def sleb(d: bytes, p: int) -> tuple[int, int]:
    r = s = 0
    while True:
        b = d[p]
        p += 1
        r |= (b & 0x7F) << s
        s += 7
        if b < 0x80:
            if b & 0x40:
                r -= 1 << s
            return r, p


def read_encoded(d: bytes, p: int, enc: int, *, pc_base: int, data_base: int = 0,
                 read_mem=None) -> tuple[int, int]:
    """A DW_EH_PE_* encoded pointer at ``d[p]``; ``pc_base`` is the address of
    ``d[0]`` (for pcrel). Indirect pointers need ``read_mem(addr)``."""
    start = p
    fmt = enc & 0x0F
    if enc == 0xFF:
        return 0, p
    if fmt == 0x00:
        v = _U64.unpack_from(d, p)[0]; p += 8
    elif fmt == 0x01:
        v, p = uleb(d, p)
    elif fmt == 0x02:
        v = _U16.unpack_from(d, p)[0]; p += 2
    elif fmt == 0x03:
        v = _U32.unpack_from(d, p)[0]; p += 4
    elif fmt == 0x04:
        v = _U64.unpack_from(d, p)[0]; p += 8
    elif fmt == 0x09:
        v, p = sleb(d, p)
    elif fmt == 0x0A:
        v = _S16.unpack_from(d, p)[0]; p += 2
    elif fmt == 0x0B:
        v = _S32.unpack_from(d, p)[0]; p += 4
    elif fmt == 0x0C:
        v = _S64.unpack_from(d, p)[0]; p += 8
    else:
        raise CfiError(f"unknown pointer encoding {enc:#x}")
    app = enc & 0x70
    if app == 0x10:
        v += pc_base + start
    elif app == 0x30:
        v += data_base
    elif app not in (0x00,):
        if app not in (0x20, 0x40, 0x50):  # textrel/funcrel/aligned: not used for FDE addresses
            raise CfiError(f"unknown pointer application {enc:#x}")
    v &= _M64
    if enc & 0x80:
        if read_mem is None:
            raise CfiError("indirect pointer without memory")
        v = read_mem(v)
    return v, p


@dataclass
class Cie:
    code_align: int
    data_align: int
    ra: int
    fde_enc: int
    signal: bool
    has_z: bool
    insns: bytes
    addr_size: int = 8


class FrameSection:
    """One ``.eh_frame`` or ``.debug_frame`` section: its bytes, its address
    (``.eh_frame`` pointers are pc-relative to it) and an index of its FDEs
    (sorted ``pc_begin``, ``pc_end``, entry offset)."""

    def __init__(self, data: bytes, addr: int, *, is_eh: bool, hdr: tuple[bytes, int] | None = None) -> None:
        self.data = data
        self.addr = addr
        self.is_eh = is_eh
        self._cies: dict[int, Cie] = {}
        self._lists: tuple[list, list, list] | None = None
        self.begin = self.end = self.fde = np.zeros(0, dtype=np.uint64)
        idx = self._index_from_hdr(*hdr) if hdr is not None else None
        if idx is None:
            idx = self._index_all()
        self.begin, self.end, self.fde = idx

    # -- index ------------------------------------------------------------------
    def _index_from_hdr(self, hdr: bytes, hdr_addr: int):
        """The ``.eh_frame_hdr`` binary-search table (initial location, FDE
        address pairs; nearly always ``DW_EH_PE_datarel|sdata4``). FDE ends
        are not in the table: set to the next entry's start and checked
        against the FDE itself on lookup."""
        if len(hdr) < 4 or hdr[0] != 1:
            return None
        eh_ptr_enc, count_enc, table_enc = hdr[1], hdr[2], hdr[3]
        try:
            _, p = read_encoded(hdr, 4, eh_ptr_enc, pc_base=hdr_addr, data_base=hdr_addr)
            count, p = read_encoded(hdr, p, count_enc, pc_base=hdr_addr, data_base=hdr_addr)
        except (CfiError, struct.error, IndexError):
            return None
        if table_enc != 0x3B or count == 0 or p + 8 * count > len(hdr):
            return None
        t = np.frombuffer(hdr, dtype="<i4", count=2 * count, offset=p).astype(np.int64).reshape(-1, 2)
        begin = (t[:, 0] + hdr_addr).astype(np.uint64)
        fde_off = t[:, 1] + hdr_addr - self.addr
        if (fde_off < 0).any() or (fde_off >= len(self.data)).any():
            return None
        order = np.argsort(begin, kind="stable")
        begin, fde_off = begin[order], fde_off[order].astype(np.uint64)
        end = np.append(begin[1:], np.uint64(_M64))
        return begin, end, fde_off

    def _index_all(self):
        begins, ends, offs = [], [], []
        d = self.data
        p = 0
        n = len(d)
        while p + 4 <= n:
            try:
                length, body, cie_ptr_at, nxt = self._entry_head(p)
            except CfiError:
                break
            if length == 0:
                if self.is_eh:
                    break  # the terminator
                p = nxt
                continue
            cid = self._cie_id(cie_ptr_at, length, body)
            if not self._is_cie(cid):
                try:
                    cie = self._cie_for(cie_ptr_at, cid)
                    b, q = read_encoded(d, body, cie.fde_enc, pc_base=self.addr)
                    r, _ = read_encoded(d, q, cie.fde_enc & 0x0F, pc_base=self.addr)
                except (CfiError, struct.error, IndexError, ValueError):
                    p = nxt
                    continue
                if r:
                    begins.append(b)
                    ends.append((b + r) & _M64)
                    offs.append(p)
            p = nxt
        begin = np.array(begins, dtype=np.uint64)
        order = np.argsort(begin, kind="stable")
        return begin[order], np.array(ends, dtype=np.uint64)[order], np.array(offs, dtype=np.uint64)[order]

    def _entry_head(self, p: int):
        d = self.data
        if p + 4 > len(d):
            raise CfiError("entry header outside the section")
        length = _U32.unpack_from(d, p)[0]
        q = p + 4
        if length == 0xFFFFFFFF:
            if q + 8 > len(d):
                raise CfiError("entry header outside the section")
            length = _U64.unpack_from(d, q)[0]
            q += 8
        nxt = q + length
        if nxt > len(d):
            raise CfiError(f"entry at {p:#x} runs past the section end")
        wide = q - p == 12
        body = q + (8 if wide else 4)
        return length, body, q, nxt

    def _cie_id(self, at: int, length: int, body: int) -> int:
        """The CIE id / CIE pointer field from ``at`` to ``body`` (8 bytes in
        the 64-bit DWARF format, 4 otherwise)."""
        d = self.data
        if length == 0:
            return 0
        if body - at == 8:
            return _U64.unpack_from(d, at)[0]
        return _U32.unpack_from(d, at)[0]

    def _is_cie(self, cid: int) -> bool:
        return cid == 0 if self.is_eh else cid in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)

    def _cie_for(self, cie_ptr_at: int, cid: int) -> Cie:
        off = cie_ptr_at - cid if self.is_eh else cid
        c = self._cies.get(off)
        if c is None:
            c = self._cies[off] = self._parse_cie(off)
        return c

    def _parse_cie(self, off: int) -> Cie:
        d = self.data
        if off < 0 or off >= len(d):
            raise CfiError(f"CIE pointer {off:#x} outside the section")
        length, body, at, nxt = self._entry_head(off)
        if not self._is_cie(self._cie_id(at, length, body)):
            raise CfiError(f"entry at {off:#x} is not a CIE")
        p = body
        version = d[p]; p += 1
        e = d.index(b"\0", p, nxt)
        aug = d[p:e].decode("latin-1")
        p = e + 1
        if "eh" in aug:
            p += 8
        addr_size = 8
        if version >= 4:
            addr_size = d[p]; p += 2  # address_size, segment_selector_size
        code_align, p = uleb(d, p)
        data_align, p = sleb(d, p)
        if version == 1:
            ra = d[p]; p += 1
        else:
            ra, p = uleb(d, p)
        fde_enc = 0x00 if addr_size == 8 else 0x03
        signal = False
        has_z = aug.startswith("z")
        if has_z:
            alen, p = uleb(d, p)
            end_aug = p + alen
            for ch in aug[1:]:
                if ch == "R":
                    fde_enc = d[p]; p += 1
                elif ch == "L":
                    p += 1
                elif ch == "P":
                    penc = d[p]; p += 1
                    _, p = read_encoded(d, p, penc & 0x7F, pc_base=self.addr)
                elif ch == "S":
                    signal = True
                elif ch == "B":
                    pass
                else:
                    break
            p = end_aug
        else:
            signal = "S" in aug
        if p > nxt:
            raise CfiError(f"CIE at {off:#x} overruns its length")
        return Cie(code_align, data_align, ra, fde_enc, signal, has_z, d[p:nxt], addr_size)

    # -- lookup -----------------------------------------------------------------
    def find(self, vaddr: int) -> tuple[Cie, int, bytes] | None:
        """``(cie, pc_begin, fde instructions)`` of the FDE covering ``vaddr``."""
        got = self.find_fde(vaddr)
        return None if got is None else got[:3]

    def find_fde(self, vaddr: int) -> tuple[Cie, int, bytes, int, int] | None:
        """``(cie, pc_begin, fde instructions, pc_end, entry offset)`` of the FDE covering ``vaddr``."""
        if self._lists is None:
            self._lists = (self.begin.tolist(), self.end.tolist(), self.fde.tolist())
        begin, end, fde = self._lists
        i = bisect_right(begin, vaddr) - 1
        if i < 0 or vaddr >= end[i]:
            return None
        d = self.data
        off = fde[i]
        length, body, at, nxt = self._entry_head(off)
        cid = self._cie_id(at, length, body)
        if self._is_cie(cid):
            return None
        cie = self._cie_for(at, cid)
        b, q = read_encoded(d, body, cie.fde_enc, pc_base=self.addr)
        r, q = read_encoded(d, q, cie.fde_enc & 0x0F, pc_base=self.addr)
        if not (b <= vaddr < b + r):
            return None
        if cie.has_z:
            alen, q = uleb(d, q)
            q += alen
        if q > nxt:
            raise CfiError(f"FDE at {off:#x} overruns its length")
        return cie, b, d[q:nxt], b + r, off


def _row(cfa: list, rules: dict, cie: Cie) -> Row:
    # (rules apply independently of their order: each reads the callee's registers)
    return Row(tuple(cfa), tuple([(r, kv[0], kv[1]) for r, kv in rules.items()]), cie.ra, cie.signal)


def execute(cie: Cie, pc_begin: int, fde_insns: bytes, target: int | None, table: list | None = None) -> Row:
    """Run the CIE's initial instructions, then the FDE's until the location
    passes ``target``; the row in effect at ``target``. With ``target`` None
    the whole program runs and ``table`` receives ``(start address, row)``
    of every row (the last one at a repeated address wins)."""
    if target is None:
        target = 1 << 65
    dirty, last = True, None  # (table mode: a row object is shared until an instruction changes the state)
    cfa: list = [CFA_REG, 0, 0]
    rules: dict[int, tuple[int, object]] = {}
    init_rules: dict[int, tuple[int, object]] = {}
    stack: list = []
    loc = pc_begin
    ops = 0
    for insns, is_cie in ((cie.insns, True), (fde_insns, False)):
        d = insns
        p = 0
        n = len(d)
        if not is_cie:
            init_rules = dict(rules)
        while p < n:
            ops += 1
            if ops > MAX_CFA_OPS:
                raise CfiError("CFA program too long")
            op = d[p]
            p += 1
            hi, lo = op & 0xC0, op & 0x3F
            if hi == 0x40:  # advance_loc
                if table is not None:
                    if dirty:
                        last, dirty = _row(cfa, rules, cie), False
                    table.append((loc, last))
                loc += lo * cie.code_align
                if loc > target:
                    break
                continue
            if hi == 0x80:  # offset
                dirty = True
                v, p = uleb(d, p)
                rules[lo] = (OFFSET, v * cie.data_align)
                continue
            if hi == 0xC0:  # restore
                dirty = True
                if lo in init_rules:
                    rules[lo] = init_rules[lo]
                else:
                    rules.pop(lo, None)
                continue
            if op == 0x00:  # nop
                continue
            if op == 0x01:  # set_loc
                if table is not None:
                    if dirty:
                        last, dirty = _row(cfa, rules, cie), False
                    table.append((loc, last))
                loc, p = read_encoded(d, p, cie.fde_enc, pc_base=0)
                if loc > target:
                    break
                continue
            if op in (0x02, 0x03, 0x04):  # advance_loc1/2/4
                if op == 0x02:
                    delta = d[p]; p += 1
                elif op == 0x03:
                    delta = _U16.unpack_from(d, p)[0]; p += 2
                else:
                    delta = _U32.unpack_from(d, p)[0]; p += 4
                if table is not None:
                    if dirty:
                        last, dirty = _row(cfa, rules, cie), False
                    table.append((loc, last))
                loc += delta * cie.code_align
                if loc > target:
                    break
                continue
            dirty = True
            if op == 0x05:  # offset_extended
                r, p = uleb(d, p); v, p = uleb(d, p)
                rules[r] = (OFFSET, v * cie.data_align)
            elif op == 0x06:  # restore_extended
                r, p = uleb(d, p)
                if r in init_rules:
                    rules[r] = init_rules[r]
                else:
                    rules.pop(r, None)
            elif op == 0x07:  # undefined
                r, p = uleb(d, p)
                rules[r] = (UNDEF, 0)
            elif op == 0x08:  # same_value
                r, p = uleb(d, p)
                rules.pop(r, None)
            elif op == 0x09:  # register
                r, p = uleb(d, p); r2, p = uleb(d, p)
                rules[r] = (REGISTER, r2)
            elif op == 0x0A:  # remember_state
                stack.append((dict(rules), list(cfa)))
                if len(stack) > 1000:
                    raise CfiError("remember_state nested too deep")
            elif op == 0x0B:  # restore_state
                if not stack:
                    raise CfiError("restore_state without remember_state")
                # the CFA rule is restored too, as libgcc and libdw do (compilers
                # bracket epilogues with remember/restore_state)
                rules, cfa = stack.pop()
            elif op == 0x0C:  # def_cfa
                r, p = uleb(d, p); v, p = uleb(d, p)
                cfa = [CFA_REG, r, v]
            elif op == 0x0D:  # def_cfa_register
                r, p = uleb(d, p)
                cfa = [CFA_REG, r, cfa[2] if cfa[0] == CFA_REG else 0]
            elif op == 0x0E:  # def_cfa_offset
                v, p = uleb(d, p)
                cfa = [CFA_REG, cfa[1], v] if cfa[0] == CFA_REG else cfa
            elif op == 0x0F:  # def_cfa_expression
                ln, p = uleb(d, p)
                cfa = [CFA_EXPR, bytes(d[p:p + ln]), 0]
                p += ln
            elif op in (0x10, 0x16):  # expression, val_expression
                r, p = uleb(d, p); ln, p = uleb(d, p)
                rules[r] = (EXPR if op == 0x10 else VAL_EXPR, bytes(d[p:p + ln]))
                p += ln
            elif op == 0x11:  # offset_extended_sf
                r, p = uleb(d, p); v, p = sleb(d, p)
                rules[r] = (OFFSET, v * cie.data_align)
            elif op == 0x12:  # def_cfa_sf
                r, p = uleb(d, p); v, p = sleb(d, p)
                cfa = [CFA_REG, r, v * cie.data_align]
            elif op == 0x13:  # def_cfa_offset_sf
                v, p = sleb(d, p)
                if cfa[0] == CFA_REG:
                    cfa = [CFA_REG, cfa[1], v * cie.data_align]
            elif op == 0x14:  # val_offset
                r, p = uleb(d, p); v, p = uleb(d, p)
                rules[r] = (VAL_OFFSET, v * cie.data_align)
            elif op == 0x15:  # val_offset_sf
                r, p = uleb(d, p); v, p = sleb(d, p)
                rules[r] = (VAL_OFFSET, v * cie.data_align)
            elif op == 0x2E:  # GNU_args_size
                _, p = uleb(d, p)
            elif op == 0x2F:  # GNU_negative_offset_extended
                r, p = uleb(d, p); v, p = uleb(d, p)
                rules[r] = (OFFSET, -v * cie.data_align)
            elif op == 0x2D:  # GNU_window_save / AArch64 negate_ra_state: no register effect here
                pass
            else:
                raise CfiError(f"unknown DW_CFA opcode {op:#x}")
            if p > n:
                raise CfiError("CFA instruction runs past its FDE")
        else:
            continue
        break
    row = _row(cfa, rules, cie)
    if table is not None:
        table.append((loc, row))
    return row


class CfiTable:
    """CFI of one ELF file: ``.eh_frame`` (with ``.eh_frame_hdr``) and, for
    addresses it does not cover, ``.debug_frame`` of the file or of its
    separate debug file. :meth:`row` gives the rule row of a link-time
    address (cached), or None when no FDE covers it."""

    def __init__(self, sections: list[FrameSection]) -> None:
        self.sections = sections
        self._rows: dict[int, Row | None] = {}
        # per FDE (section, entry offset): (row start addresses, rows); an
        # FDE's program runs once however many of its addresses are asked about
        self._fdes: dict[tuple[int, int], tuple[list[int], list[Row]]] = {}

    @classmethod
    def from_elf(cls, elf, debug_elf=None) -> "CfiTable":
        secs: list[FrameSection] = []
        for e in (elf, debug_elf):
            if e is None:
                continue
            eh = e.section(".eh_frame")
            if eh is not None and eh.sh_type != 8 and eh.sh_size:
                try:
                    data = e.section_data(eh)
                    hdr_s = e.section(".eh_frame_hdr")
                    hdr = None
                    if hdr_s is not None and hdr_s.sh_type != 8 and hdr_s.sh_size:
                        hdr = (e.section_data(hdr_s), hdr_s.sh_addr)
                    secs.append(FrameSection(data, eh.sh_addr, is_eh=True, hdr=hdr))
                except (FormatError, CfiError, OSError, ValueError, IndexError, struct.error):
                    pass
            df = e.section(".debug_frame")
            if df is not None and df.sh_type != 8 and df.sh_size and not df.sh_flags & 0x800:
                try:
                    secs.append(FrameSection(e.section_data(df), 0, is_eh=False))
                except (FormatError, CfiError, OSError):
                    pass
        return cls(secs)

    def row(self, vaddr: int) -> Row | None:
        try:
            return self._rows[vaddr]
        except KeyError:
            pass
        r = None
        for si, s in enumerate(self.sections):
            try:
                f = s.find_fde(vaddr)
            except (CfiError, struct.error, IndexError, ValueError):
                f = None
            if f is None:
                continue
            key = (si, f[4])
            got = self._fdes.get(key)
            if got is None:
                table: list = []
                try:
                    execute(f[0], f[1], f[2], None, table)
                    got = ([a for a, _ in table], [b for _, b in table])
                except (CfiError, struct.error, IndexError, ValueError):
                    got = ([], [])
                self._fdes[key] = got
            locs, rows = got
            i = bisect_right(locs, vaddr) - 1
            r = rows[i] if i >= 0 else None
            break
        if len(self._rows) > 1_000_000:
            self._rows.clear()
        self._rows[vaddr] = r
        return r
