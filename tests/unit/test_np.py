"""pmuscope._np's sort-based set helpers give what np.unique gives."""

from __future__ import annotations

import numpy as np
import pytest

from pmuscope import _np
from tests.conftest import run_python
from pmuscope._np import uniq, uniq_first, uniq_inv


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32, np.int16, np.uint8])
def test_same_as_np_unique(dtype):
    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 7, 1000, 50_000):
        for k in (1, 3, 300, 1 << 40):
            hi = min(k, np.iinfo(dtype).max)
            a = rng.integers(0, hi, n, endpoint=True).astype(dtype)
            u, first, inv = np.unique(a, return_index=True, return_inverse=True)
            assert np.array_equal(uniq(a), u) and uniq(a).dtype == a.dtype
            got_u, got_inv = uniq_inv(a)
            assert np.array_equal(got_u, u) and np.array_equal(got_inv, inv.reshape(-1))
            assert got_inv.dtype == np.int64 and got_inv.shape == a.shape
            fu, ffirst, finv = uniq_first(a)
            assert np.array_equal(fu, u) and np.array_equal(ffirst, first) and np.array_equal(finv, inv.reshape(-1))
            assert ffirst.dtype == np.int64 and finv.dtype == np.int64


def test_inverse_keeps_the_shape():
    a = np.array([[5, 1], [5, 9]], dtype=np.int64)
    u, inv = uniq_inv(a)
    assert u.tolist() == [1, 5, 9] and inv.tolist() == [[1, 0], [1, 2]]
    assert uniq_inv(np.zeros((0, 3), dtype=np.int64))[1].shape == (0, 3)


@pytest.mark.parametrize("pair", [(np.int64, np.int64), (np.int32, np.int64), (np.uint64, np.uint64),
                                  (np.int16, np.int64), (np.uint8, np.int64), (np.uint64, np.int64)])
def test_isin_is_np_isin(pair):
    from pmuscope._np import isin

    rng = np.random.default_rng(5)
    da, db = pair
    for n, m, hi in ((0, 3, 9), (5, 0, 9), (1, 1, 2), (1000, 7, 20), (50_000, 300, 1 << 20), (300, 3000, 500)):
        hi = min(hi, np.iinfo(da).max, np.iinfo(db).max)
        a = rng.integers(0, hi, n, endpoint=True).astype(da)
        b = rng.integers(0, hi, m, endpoint=True).astype(db)
        got = isin(a, b)
        assert got.dtype == bool and got.shape == a.shape
        assert np.array_equal(got, np.isin(a, b)), (pair, n, m)
    two = np.array([[3, 4], [5, 6]], dtype=np.int64)
    assert isin(two, [4, 6]).tolist() == [[False, True], [False, True]]
    assert isin(np.array([-1, 0, 2**40], dtype=np.int64), [-1, 2**40]).tolist() == [True, False, True]


def test_isin_does_not_import_numpy_ma():
    code = ("import sys, numpy as np\nfrom pmuscope._np import isin\n"
            "r = isin(np.arange(10), np.array([3, 3, 7]))\n"
            "print(r.sum(), 'numpy.ma' in sys.modules)\n")
    assert run_python(code) == ["2", "False"]


@pytest.mark.parametrize("seed", range(5))
def test_ragged_index_gathers_the_rows(seed):
    rng = np.random.default_rng(seed)
    flat = rng.integers(0, 1000, 200)
    lens = rng.integers(0, 6, 30)
    starts = rng.integers(0, 200 - 6, 30)
    idx, off = _np.ragged_index(starts, lens)
    assert idx.dtype == off.dtype == np.int64
    assert off.tolist() == [0, *np.cumsum(lens).tolist()]
    got = flat[idx]
    assert [got[off[i]:off[i + 1]].tolist() for i in range(30)] == \
        [flat[s:s + n].tolist() for s, n in zip(starts.tolist(), lens.tolist())]
    idx0, off0 = _np.ragged_index(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(idx0) == 0 and off0.tolist() == [0]
