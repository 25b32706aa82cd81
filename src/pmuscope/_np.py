"""Sort-based set helpers for integer arrays.

NumPy >= 2.3 answers ``np.unique`` (and ``union1d``/``isin`` through it) with a
hash table, which is several times slower than a sort on the large integer
arrays of a recording. These give the same results as ``np.unique``
(sorted unique values, inverse indexes, first occurrences) through one sort.

The inverse comes from an unstable ``argsort`` (NumPy's vectorized sort of
64-bit keys: ~10 ns a key) scattered back, not from ``searchsorted`` of every
element in the unique values (a binary search with unpredictable branches:
~50-100 ns a key, 3-6x slower on a recording's frame keys). Equal keys are
interchangeable for the inverse; first occurrences are the minimum position
of each run of equal keys.
"""

from __future__ import annotations

import numpy as np


def uniq(a) -> np.ndarray:
    """Sorted unique values of ``a`` (``np.unique(a)`` for a 1-d array)."""
    a = np.asarray(a).reshape(-1)
    if len(a) == 0:
        return a.copy()
    s = np.sort(a)
    flag = np.empty(len(s), dtype=bool)
    flag[0] = True
    np.not_equal(s[1:], s[:-1], out=flag[1:])
    return s[flag]


def ragged_index(starts, lens) -> tuple[np.ndarray, np.ndarray]:
    """``(idx, offsets)`` that gather ``lens[i]`` items from ``starts[i]`` for every i,
    back to back: ``flat[idx]`` holds the rows one after another, row i at
    ``offsets[i]:offsets[i + 1]`` (int64 both)."""
    lens = np.asarray(lens, dtype=np.int64)
    off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    idx = np.repeat(np.asarray(starts, dtype=np.int64) - off[:-1], lens) + np.arange(int(off[-1]), dtype=np.int64)
    return idx, off


def _sorted_runs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(order, sorted values, run-start flags, inverse)`` of a non-empty 1-d array."""
    order = np.argsort(a)
    s = a[order]
    flag = np.empty(len(s), dtype=bool)
    flag[0] = True
    np.not_equal(s[1:], s[:-1], out=flag[1:])
    inv = np.empty(len(a), dtype=np.int64)
    inv[order] = np.cumsum(flag, dtype=np.int64) - 1
    return order, s, flag, inv


def uniq_inv(a) -> tuple[np.ndarray, np.ndarray]:
    """``(unique values, index of each element in them)`` — ``np.unique(a,
    return_inverse=True)``; the inverse (int64) has the shape of ``a``."""
    a = np.asarray(a)
    flat = a.reshape(-1)
    if len(flat) == 0:
        return flat.copy(), np.zeros(a.shape, dtype=np.int64)
    _, s, flag, inv = _sorted_runs(flat)
    return s[flag], inv.reshape(a.shape)


def uniq_first(a) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(unique values, index of the first occurrence of each, inverse)``."""
    a = np.asarray(a).reshape(-1)
    if len(a) == 0:
        return a.copy(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order, s, flag, inv = _sorted_runs(a)
    first = np.minimum.reduceat(order, np.flatnonzero(flag))
    return s[flag], first.astype(np.int64, copy=False), inv


def isin(a, b) -> np.ndarray:
    """``np.isin(a, b)`` for integer arrays, through one sort of ``b`` and a
    binary search of each element of ``a``. why: ``np.isin`` goes through
    ``np.unique``, whose first plain call imports ``numpy.ma`` (~7 ms) -- more
    than a whole small report's work; mixed signedness that numpy would compare
    as floats (uint64 against int64) is left to ``np.isin``."""
    a = np.asarray(a)
    b = np.asarray(b).reshape(-1)
    if a.dtype.kind not in "iu" or (len(b) and b.dtype.kind not in "iu") or \
            (len(b) and np.result_type(a.dtype, b.dtype).kind not in "iu"):
        return np.isin(a, b)
    if len(b) == 0 or a.size == 0:
        return np.zeros(a.shape, dtype=bool)
    s = np.sort(b)
    flat = a.reshape(-1)
    pos = np.searchsorted(s, flat)
    pos[pos == len(s)] = 0
    return (s[pos] == flat).reshape(a.shape)
