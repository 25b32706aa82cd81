"""Sorted symbol tables with vectorized lookup.

A :class:`SymbolTable` holds, sorted by start address, the ``start`` and
``end`` (exclusive) of every symbol and a way to get its name. Lookup of many
addresses at once is one ``np.searchsorted``. An address that lies past the end
of the symbol before it resolves to no symbol (``-1``), as perf prints
``[unknown]`` there.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .elf import (SHN_ABS, SHN_LORESERVE, SHN_UNDEF, STB_GLOBAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC,
                  STT_NOTYPE, STT_OBJECT, STV_HIDDEN, STV_INTERNAL, RawSymbols)

_U64_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)


class SymbolTable:
    """Symbols of one DSO (or the kernel, or a JIT map), sorted by address.

    ``starts``/``ends`` are uint64 arrays; ``name(i)`` returns the raw
    (mangled) name of symbol ``i``. Build one with :meth:`from_elf`,
    :meth:`from_arrays` or :meth:`from_names`.
    """

    __slots__ = ("starts", "ends", "_name_of", "_names")

    def __init__(self, starts: np.ndarray, ends: np.ndarray, name_of: Callable[[int], str]):
        self.starts = starts
        self.ends = ends
        self._name_of = name_of
        self._names: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        """Raw name of symbol ``i`` (cached)."""
        n = self._names.get(i)
        if n is None:
            n = self._names[i] = self._name_of(int(i))
        return n

    def names(self) -> list[str]:
        return [self.name(i) for i in range(len(self))]

    def lookup(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized lookup: for each address the symbol index (-1 when the
        address is in no symbol) and the offset from the symbol start (or the
        address itself when unknown)."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        idx = np.searchsorted(self.starts, addrs, side="right").astype(np.int64) - 1
        hit = idx >= 0
        safe = np.where(hit, idx, 0)
        if len(self.starts):
            hit &= addrs < self.ends[safe]
        else:
            hit[:] = False
        idx = np.where(hit, idx, -1)
        off = np.where(hit, addrs - (self.starts[safe] if len(self.starts) else addrs), addrs)
        return idx, off.astype(np.uint64)

    def find(self, addr: int) -> tuple[str, int] | None:
        """``(raw name, offset)`` of the symbol containing ``addr``, or None."""
        idx, off = self.lookup(np.array([addr], dtype=np.uint64))
        if idx[0] < 0:
            return None
        return self.name(int(idx[0])), int(off[0])

    # -- builders -----------------------------------------------------------
    @classmethod
    def from_arrays(cls, starts, sizes, names: Sequence[str], *, fixup_end: bool = True,
                    limit: int | None = None) -> "SymbolTable":
        """Build from unsorted starts, sizes (0 = unknown) and names. Symbols of
        size 0 end where the next one starts (perf's ``symbols__fixup_end``);
        the last one ends at ``limit`` or one page further."""
        starts = np.asarray(starts, dtype=np.uint64)
        sizes = np.asarray(sizes, dtype=np.uint64)
        names = list(names)
        order = np.argsort(starts, kind="stable")
        starts = starts[order]
        sizes = sizes[order]
        # keep the last definition at each address (JIT maps overwrite)
        if len(starts) > 1:
            keep = np.ones(len(starts), dtype=bool)
            keep[:-1] = starts[1:] != starts[:-1]
            starts, sizes, order = starts[keep], sizes[keep], order[keep]
        ends = _ends(starts, sizes, fixup_end, limit)
        sel = [names[i] for i in order]
        return cls(starts, ends, sel.__getitem__)

    @classmethod
    def from_elf(cls, raw: RawSymbols, *, include_objects: bool = False) -> "SymbolTable":
        """Build from an ELF symbol table the way perf does: defined function
        symbols (STT_FUNC, STT_GNU_IFUNC; objects too with ``include_objects``)
        and the labels perf takes (``elf_sym__is_label``: STT_NOTYPE, not
        hidden or internal, in an allocated section whose name contains "text",
        such as ld.so's ``_dl_start_user`` or an assembly entry point; or
        "data", with ``include_objects``), one symbol per address chosen by perf's ``choose_best_symbol``
        rules (sized over zero-sized, non-weak over weak, global over local,
        fewer leading underscores, longer name), zero sizes fixed up to the
        next symbol (``symbols__fixup_end``)."""
        value, ends, offs, _ = elf_columns(raw, include_objects)
        return cls.from_strtab(value, ends, offs, raw.strtab)

    @classmethod
    def from_strtab(cls, starts: np.ndarray, ends: np.ndarray, offs: np.ndarray, blob: bytes) -> "SymbolTable":
        """The table of sorted ``starts``/``ends`` whose names are the
        NUL-terminated strings at ``offs`` in ``blob`` (an ELF string table)."""
        def name_of(i: int) -> str:
            o = int(offs[i])
            e = blob.find(b"\0", o)
            return blob[o:e if e >= 0 else len(blob)].decode("utf-8", "replace")

        return cls(starts, ends, name_of)


def elf_columns(raw: RawSymbols, include_objects: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The symbols :meth:`SymbolTable.from_elf` keeps, sorted by address, as
    columns: starts, ends, and where each name lies in ``raw.strtab`` (offset,
    and length up to its NUL)."""
    stt = raw.st_info & 0xF
    bind = raw.st_info >> 4
    want = (stt == STT_FUNC) | (stt == STT_GNU_IFUNC)
    if include_objects:
        want |= stt == STT_OBJECT
    want &= raw.st_shndx != SHN_UNDEF
    want &= (raw.st_shndx < SHN_LORESERVE) | (raw.st_shndx == SHN_ABS)  # SHN_ABS allowed
    if raw.label_sections is not None and raw.st_other is not None and len(raw.label_sections):
        vis = raw.st_other & 0x3
        shndx = raw.st_shndx.astype(np.int64)
        in_range = shndx < len(raw.label_sections)
        label = (stt == STT_NOTYPE) & (raw.st_name != 0) & (shndx != SHN_UNDEF) & in_range & (vis != STV_HIDDEN) & (vis != STV_INTERNAL)
        kind = raw.label_sections[np.where(in_range, shndx, 0)]
        # code labels; data labels go with data objects (``include_objects``)
        label &= (kind == 1) | ((kind == 2) & include_objects)
        want |= label
    want &= raw.st_value != 0
    strtab = np.frombuffer(raw.strtab, dtype=np.uint8) if raw.strtab else np.zeros(1, np.uint8)
    name_off = raw.st_name
    valid_name = name_off < len(strtab)
    want &= valid_name
    sel = np.flatnonzero(want)
    # ARM mapping symbols ($a, $t, $d, $x) are not functions (perf skips "$" names)
    if len(sel):
        sel = sel[strtab[name_off[sel]] != ord("$")]
    value = raw.st_value[sel]
    size = raw.st_size[sel]
    b = bind[sel]
    off = name_off[sel]
    nul = np.flatnonzero(strtab == 0)
    if len(nul) == 0 or nul[-1] != len(strtab) - 1:
        nul = np.append(nul, len(strtab))
    name_len = nul[np.searchsorted(nul, off)] - off
    under = np.zeros(len(off), dtype=np.int64)
    for k in range(3):
        pos = np.minimum(off + k, len(strtab) - 1)
        still = (under == k) & (strtab[pos] == ord("_")) & (name_len > k)
        under += still
    # sort by address, then best-first by perf's preferences; keep the first per address
    keys = (-name_len, under, -(b == STB_GLOBAL).astype(np.int8),
            (b == STB_WEAK).astype(np.int8), -(size > 0).astype(np.int8), value)
    order = np.lexsort(keys)
    value, size, off = value[order], size[order], off[order]
    name_len = name_len[order]
    if len(value) > 1:
        keep = np.ones(len(value), dtype=bool)
        keep[1:] = value[1:] != value[:-1]
        value, size, off, name_len = value[keep], size[keep], off[keep], name_len[keep]
    ends = _ends(value, size, True, None)
    return value, ends, off, name_len


def _ends(starts: np.ndarray, sizes: np.ndarray, fixup_end: bool, limit: int | None) -> np.ndarray:
    ends = starts + sizes
    if fixup_end and len(starts):
        nxt = np.empty_like(starts)
        nxt[:-1] = starts[1:]
        # perf: the last zero-sized symbol ends at roundup(start, 4096) + 4096
        nxt[-1] = np.uint64(limit) if limit is not None else \
            ((starts[-1] + np.uint64(4095)) & ~np.uint64(4095)) + np.uint64(4096)
        zero = sizes == 0
        ends = np.where(zero, nxt, ends)
    return ends.astype(np.uint64)
