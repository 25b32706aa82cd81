"""Sort-based set helpers for integer arrays.

NumPy >= 2.3 answers ``np.unique`` (and ``union1d``/``isin`` through it) with a
hash table, which is several times slower than a sort on the large integer
arrays of a recording. These give the same results as ``np.unique``
(sorted unique values, inverse indexes) through one sort.
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


def uniq_inv(a) -> tuple[np.ndarray, np.ndarray]:
    """``(unique values, index of each element in them)`` — ``np.unique(a,
    return_inverse=True)``; the inverse (int64) has the shape of ``a``."""
    a = np.asarray(a)
    u = uniq(a)
    return u, np.searchsorted(u, a).astype(np.int64, copy=False)


def uniq_first(a) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(unique values, index of the first occurrence of each, inverse)``."""
    a = np.asarray(a).reshape(-1)
    order = np.argsort(a, kind="stable")
    s = a[order]
    flag = np.empty(len(s), dtype=bool)
    if len(s):
        flag[0] = True
        np.not_equal(s[1:], s[:-1], out=flag[1:])
    ids = np.cumsum(flag) - 1
    inv = np.empty(len(a), dtype=np.int64)
    inv[order] = ids
    return s[flag], order[flag], inv
