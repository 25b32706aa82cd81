"""Many samples at a time: the columns the profile model keeps for dwarf
samples (registers by perf register number, stack copies as rows) in, flat
user call chains out."""

from __future__ import annotations

import numpy as np

from .unwinder import Unwinder

#: perf register numbers kept per sample (x86-64 uses 0..23, AArch64 0..32)
NREGS = 33


def regs_matrix(flat: np.ndarray, offsets: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """``(n, NREGS)`` register values by perf register number from the
    REGS_USER columns (``flat`` in each sample's ``sample_regs_user`` bit
    order); ``masks`` per sample (0: no registers)."""
    n = len(masks)
    out = np.zeros((n, NREGS), dtype=np.uint64)
    counts = np.diff(offsets)
    for m in np.unique(masks).tolist():
        if not m:
            continue
        bits = [b for b in range(64) if m >> b & 1]
        sel = np.flatnonzero((masks == np.uint64(m)) & (counts == len(bits)))
        if not len(sel):
            continue
        keep = [j for j, b in enumerate(bits) if b < NREGS]
        vals = flat[offsets[:-1][sel][:, None] + np.array(keep, dtype=np.int64)[None, :]]
        out[np.ix_(sel, np.array([bits[j] for j in keep], dtype=np.int64))] = vals
    return out


def stack_matrix(flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``(n, width)`` stack copies (zero padded) from the STACK_USER columns."""
    sizes = np.diff(offsets)
    n = len(sizes)
    w = int(sizes.max()) if n else 0
    out = np.zeros((n, w), dtype=np.uint8)
    if not w:
        return out
    nz = sizes > 0
    if (sizes[nz] == w).all():
        out[nz] = flat[:int(offsets[-1])].reshape(-1, w)
        return out
    for i in np.flatnonzero(nz).tolist():
        out[i, :sizes[i]] = flat[offsets[i]:offsets[i + 1]]
    return out


def unwind_batch(unwinder: Unwinder, spaces: list, regs: np.ndarray, masks: np.ndarray, stacks: np.ndarray,
                 dyn: np.ndarray) -> tuple[list[list[int]], list[str | None]]:
    """The user chain of each sample (empty without registers) and why it
    stopped early (None when it did not); ``spaces[i]`` is sample i's
    :class:`~pmuscope.symbols.AddressSpace` (or None)."""
    arch = unwinder.arch
    dop = arch.dwarf_of_perf
    nreg = arch.nregs
    stats = unwinder.stats
    chains: list[list[int]] = []
    reasons: list[str | None] = []
    conv: dict[int, list[tuple[int, int]]] = {}
    rl = regs.tolist()
    ml = masks.tolist()
    dl = dyn.tolist()
    for i in range(len(ml)):
        m = ml[i]
        if not m:
            chains.append([])
            reasons.append(None)
            continue
        pairs = conv.get(m)
        if pairs is None:
            pairs = conv[m] = [(dop[b], b) for b in range(min(len(dop), 64)) if m >> b & 1 and dop[b] >= 0]
        row = rl[i]
        r: list = [None] * nreg
        for d, b in pairs:
            r[d] = row[b]
        size = dl[i]
        stack = stacks[i, :size].tobytes() if size else b""
        chain, why = unwinder.unwind(spaces[i], r, stack, size)
        stats.samples += 1
        stats.frames += len(chain)
        if why is not None:
            stats.stop(why)
        chains.append(chain)
        reasons.append(why)
    return chains, reasons
