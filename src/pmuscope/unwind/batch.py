"""Many samples at a time: the columns the profile model keeps for dwarf
samples (registers by perf register number, stack copies as rows) in, flat
user call chains out."""

from __future__ import annotations

import os

import numpy as np

from .cfi import CFA_REG, EXPR, VAL_EXPR
from .unwinder import R_BADCFI, R_LOOP, R_MAX, R_NOCFI, R_NOMAP, R_READ, TRUNCATED, Unwinder

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
                 dyn: np.ndarray, *, native: bool | None = None) -> tuple[list[list[int]], list[str | None]]:
    """The user chain of each sample (empty without registers) and why it
    stopped early (None when it did not); ``spaces[i]`` is sample i's
    :class:`~pmuscope.symbols.AddressSpace` (or None).

    ``native`` (default: :data:`NATIVE_UNWIND` and the extension is built)
    runs the steps in ``pmuscope._native.dwarf_unwind`` with rows compiled
    here; otherwise every sample goes through the pure-Python reference,
    :meth:`Unwinder.unwind`. Both give the same chains."""
    if native is None:
        native = NATIVE_UNWIND and native_unwind_available()
    if native:
        return _unwind_native(unwinder, spaces, regs, masks, stacks, dyn)
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
            pairs = conv[m] = _pairs(dop, m)
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


def _pairs(dop: tuple, mask: int) -> list[tuple[int, int]]:
    """(DWARF register, perf register) of the registers a mask samples."""
    return [(dop[b], b) for b in range(min(len(dop), 64)) if mask >> b & 1 and dop[b] >= 0]


# --- the native path ---------------------------------------------------------------------

NATIVE_UNWIND = os.environ.get("PMUSCOPE_NATIVE_UNWIND", "1") != "0"
try:
    from .. import _native  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the Python reference serves
    _native = None

ROWW = 54
MAXRULES = 16
T_CFI, T_FP, T_NOMAP, T_PY = 0, 1, 2, 3
_STATUS = {0: None, 1: R_READ, 2: R_NOCFI, 3: R_NOMAP, 4: R_BADCFI, 5: R_LOOP, 6: R_MAX}
NEED_ROW, NEED_PY = 10, 11


def native_unwind_available() -> bool:
    return _native is not None and hasattr(_native, "dwarf_unwind")


_ZEROS = [0] * ROWW


def encode_row(row, arch) -> list[int]:
    """A :class:`~pmuscope.unwind.cfi.Row` as the native loop's int64 row
    (a list of ROWW ints); rows with DWARF expressions (and None: no CFI)
    get their type only."""
    out = list(_ZEROS)
    if row is None:
        out[0] = T_FP
        return out
    kind, reg, off = row.cfa
    rules = [(r, k, v) for r, k, v in row.rules if r < arch.nregs]
    if kind != CFA_REG or len(rules) > MAXRULES or any(k in (EXPR, VAL_EXPR) for _, k, _ in rules) \
            or not -(1 << 63) <= off < (1 << 63) or any(not -(1 << 63) <= v < (1 << 63) for _, k, v in rules):
        out[0] = T_PY
        return out
    out[:6] = (T_CFI, reg, off, row.ra, int(row.signal), len(rules))
    for j, (r, k, v) in enumerate(rules):
        out[6 + 3 * j:9 + 3 * j] = (r, k, v)
    return out


class _RowCache:
    """Compiled rows by key (space id << 48 | lookup address), sorted for the
    native loop's binary search; kept on the unwinder across batches."""

    def __init__(self) -> None:
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted
        self.idx = np.zeros(0, dtype=np.int64)  # row of each key
        self.store = np.zeros((64, ROWW), dtype=np.int64)  # rows, appended (capacity doubles)
        self.nrows = 0
        self.sids: dict[tuple[int, int], int] = {}
        self.spaces: list = [None]  # sid -> space (sid 0: no space)
        self.encoded: dict[int, list[int]] = {}  # id(Row) -> its encoding (rows live in their CfiTable)

    def sid(self, space) -> int:
        if space is None:
            return 0
        key = (id(space), getattr(space, "generation", 0))
        s = self.sids.get(key)
        if s is None:
            if len(self.spaces) >= 0xFFFF:
                self.__init__()
            s = self.sids[key] = len(self.spaces)
            self.spaces.append(space)
        return s

    def add(self, unwinder: Unwinder, keys: np.ndarray) -> None:
        from bisect import bisect_right

        arch = unwinder.arch
        enc = self.encoded
        nomap = list(_ZEROS)
        nomap[0] = T_NOMAP
        fp = encode_row(None, arch)
        out: list[list[int]] = []
        last_space = None
        starts: list = []
        mods: list = []
        for k in keys.tolist():
            space = self.spaces[k >> 48]
            if space is not last_space:
                starts, mods = unwinder.modules(space) if space is not None else ([], [])
                last_space = space
            look = k & ((1 << 48) - 1)
            i = bisect_right(starts, look) - 1
            mod = mods[i] if i >= 0 else None
            if mod is None or look >= mod.end:
                out.append(nomap)
            elif mod.cfi is None:
                out.append(fp)
            else:
                row = mod.cfi.row(look - mod.bias)
                if row is None:
                    out.append(fp)
                else:
                    e = enc.get(id(row))
                    if e is None:
                        e = enc[id(row)] = encode_row(row, arch)
                    out.append(e)
        new = np.array(out, dtype=np.int64).reshape(len(keys), ROWW)
        n0, n1 = self.nrows, self.nrows + len(keys)
        if n1 > len(self.store):
            grown = np.zeros((max(n1, 2 * len(self.store)), ROWW), dtype=np.int64)
            grown[:n0] = self.store[:n0]
            self.store = grown
        self.store[n0:n1] = new
        self.nrows = n1
        # keys are new and unique: merge them into the sorted list
        keys = keys.astype(np.uint64)
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(self.keys, keys[order])
        self.keys = np.insert(self.keys, at, keys[order])
        self.idx = np.insert(self.idx, at, np.arange(n0, n1, dtype=np.int64)[order])


def _unwind_native(unwinder: Unwinder, spaces: list, regs: np.ndarray, masks: np.ndarray, stacks: np.ndarray,
                   dyn: np.ndarray) -> tuple[list[list[int]], list[str | None]]:
    arch = unwinder.arch
    nreg = arch.nregs
    n = len(masks)
    stats = unwinder.stats
    cache = getattr(unwinder, "_native_rows", None)
    if cache is None:
        cache = unwinder._native_rows = _RowCache()
    # DWARF register file and validity bits of every sample
    dregs = np.zeros((n, nreg), dtype=np.uint64)
    valid = np.zeros(n, dtype=np.uint64)
    for m in np.unique(masks).tolist():
        if not m:
            continue
        sel = masks == np.uint64(m)
        bits = 0
        for d, b in _pairs(arch.dwarf_of_perf, m):
            if b < regs.shape[1]:
                dregs[sel, d] = regs[sel, b]
                bits |= 1 << d
        valid[sel] = np.uint64(bits)
    has = masks != 0
    pc_ok = has & ((valid >> np.uint64(arch.pc)) & np.uint64(1)).astype(bool)
    sp_ok = pc_ok & ((valid >> np.uint64(arch.sp)) & np.uint64(1)).astype(bool)
    width = max(unwinder.max_stack, 1)
    out = np.zeros((n, width), dtype=np.uint64)
    out[:, 0] = dregs[:, arch.pc]
    nout = np.where(pc_ok, 1, 0).astype(np.int64)
    act = np.ones(n, dtype=np.uint8)
    status = np.full(n, -1, dtype=np.int64)
    status[~has] = -3  # no registers: no user chain
    status[has & ~pc_ok] = 4  # no pc: nothing to unwind
    status[pc_ok & ~sp_ok] = -2  # no SP: the pc alone, stopped at the stack read
    need = np.zeros(n, dtype=np.uint64)
    sids = np.array([cache.sid(s) for s in spaces], dtype=np.int64) if n else np.zeros(0, np.int64)
    sp0 = np.ascontiguousarray(dregs[:, arch.sp])
    size = np.minimum(dyn.astype(np.int64), stacks.shape[1] if stacks.ndim == 2 else 0)
    stacks = np.ascontiguousarray(stacks)
    todo = np.flatnonzero(status == -1).astype(np.int64)
    py_rows: list[int] = []
    rounds = 0
    while len(todo):
        rounds += 1
        _native.dwarf_unwind(cache.keys, cache.idx, cache.store, todo, sids, dregs, valid, act, stacks, sp0, size, out, nout,
                             status, need, nreg, arch.pc, arch.sp, arch.fp, arch.lr, unwinder.max_stack,
                             stacks.shape[1], width, arch.pc_mask)
        st = status[todo]
        py_rows.extend(todo[st == NEED_PY].tolist())
        again = todo[st == NEED_ROW]
        if not len(again) or rounds > 10_000:
            break
        cache.add(unwinder, np.unique(need[again]))
        todo = again
    chains: list[list[int]] = []
    reasons: list[str | None] = []
    py = set(py_rows)
    sl = status.tolist()
    for i in range(n):
        s = sl[i]
        if s == -3:
            chains.append([])
            reasons.append(None)
            continue
        if i in py:  # a row the native loop does not handle: the reference goes on from here
            r = [int(x) if valid[i] >> np.uint64(d) & np.uint64(1) else None for d, x in enumerate(dregs[i].tolist())]
            k = int(nout[i])
            sz = int(size[i])
            chain, why = unwinder.resume(spaces[i], r, stacks[i, :sz].tobytes(), sz, out[i, :k].tolist(),
                                         bool(act[i]), int(sp0[i]))
        else:
            chain = out[i, :int(nout[i])].tolist()
            if s == -2:
                why = R_READ
            else:
                why = _STATUS.get(s, R_BADCFI)
                if why == R_READ and len(chain) < unwinder.max_stack:
                    chain.append(TRUNCATED)
        stats.samples += 1
        stats.frames += len(chain)
        if why is not None:
            stats.stop(why)
        chains.append(chain)
        reasons.append(why)
    return chains, reasons
