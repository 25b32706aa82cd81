"""Microscopy without a kernel: the mmap-page seqlock protocol on a fixture page,
time extrapolation, sign extension, and the DTE filter on streams with known
bad periods."""

import ctypes

import numpy as np
import pytest

from pmuscope.kernel import abi
from pmuscope.observe import dte_filter, read_page
from pmuscope.observe.mmap_page import extrapolate_time, sign_extend


def make_page(**fields):
    page = abi.perf_event_mmap_page()
    for k, v in fields.items():
        setattr(page, k, v)
    return page


def page_buffer(page):
    return (ctypes.c_char * ctypes.sizeof(page)).from_buffer(page)


def test_index_zero_means_fallback_to_read():
    page = make_page(lock=2, index=0, cap_user_rdpmc=1, offset=5)
    assert read_page(page_buffer(page), rdpmc=lambda i: 0) is None


def test_no_rdpmc_capability_means_fallback():
    page = make_page(lock=2, index=3, cap_user_rdpmc=0, offset=5)
    assert read_page(page_buffer(page), rdpmc=lambda i: 7) is None
    # and no native rdpmc at all
    page.cap_user_rdpmc = 1
    assert read_page(page_buffer(page), rdpmc=None) is None


def test_counter_is_offset_plus_sign_extended_pmc():
    page = make_page(lock=4, index=3, cap_user_rdpmc=1, pmc_width=48, offset=-(1 << 40), time_enabled=100, time_running=100)
    seen = []

    def rdpmc(idx):
        seen.append(idx)
        return (1 << 40) + 1234  # raw 48-bit counter value

    count, ena, run = read_page(page_buffer(page), rdpmc=rdpmc)
    assert seen == [2]  # rdpmc(index - 1)
    assert count == 1234 and ena == 100 and run == 100


def test_negative_pmc_values_are_sign_extended_to_pmc_width():
    assert sign_extend(0xFFFFFFFFFFFF, 48) == -1
    assert sign_extend(0x7FFFFFFFFFFF, 48) == (1 << 47) - 1
    assert sign_extend(0x1_0000_0000_0005, 48) == 5  # bits above the width are dropped
    page = make_page(lock=0, index=1, cap_user_rdpmc=1, pmc_width=48, offset=1000)
    assert read_page(page_buffer(page), rdpmc=lambda i: 0xFFFFFFFFFF00)[0] == 1000 - 256


def test_seqlock_retries_while_the_kernel_updates_the_page():
    """The kernel bumps `lock` around each update; a read that overlaps one must
    be retried and must return the values of one consistent update."""
    page = make_page(lock=10, index=2, cap_user_rdpmc=1, pmc_width=48, offset=100, time_enabled=1, time_running=1)
    buf = page_buffer(page)
    pmc = {"value": 5}

    def kernel_update(attempt):
        # during the first two attempts the kernel rewrites the page
        if attempt < 2:
            page.lock += 2
            page.offset += 1000
            page.time_enabled += 10
            page.time_running += 10
            pmc["value"] = 0

    attempts = []
    count, ena, run = read_page(buf, rdpmc=lambda i: pmc["value"], _between=lambda a: (attempts.append(a), kernel_update(a)))
    assert attempts == [0, 1, 2]
    assert count == 2100 and ena == 21 and run == 21


def test_time_extrapolation_matches_kernel_formula():
    # kernel formula: time_offset + (cyc >> shift) * mult + (((cyc & mask) * mult) >> shift)
    cyc, off, mult, shift = 123456789012, 5000, 0x7FFFFFFF, 31
    expect = off + (cyc >> shift) * mult + (((cyc & ((1 << shift) - 1)) * mult) >> shift)
    assert extrapolate_time(cyc, off, mult, shift) == expect
    # cap_user_time_short: cyc is first folded into time_cycles + ((cyc - time_cycles) & time_mask)
    folded = 1000 + ((cyc - 1000) & 0xFFFF)
    assert extrapolate_time(cyc, off, mult, shift, 1000, 0xFFFF, short=True) == extrapolate_time(folded, off, mult, shift)


def test_multiplexed_counter_times_are_extrapolated():
    page = make_page(lock=0, index=1, cap_user_rdpmc=1, cap_user_time=1, pmc_width=48, offset=0,
                     time_enabled=1000, time_running=500, time_offset=7, time_mult=1 << 10, time_shift=10)
    count, ena, run = read_page(page_buffer(page), rdpmc=lambda i: 42, rdtsc=lambda: 300)
    # mult/2^shift = 1: 300 cycles -> 300 ns, + time_offset 7
    assert (count, ena, run) == (42, 1307, 807)


def test_dte_keeps_steady_periods_and_drops_skewed_ones():
    n = 1000
    start = np.arange(n, dtype=np.int64) * 100_000  # 10 kHz
    read_cost = np.full(n, 2_000, dtype=np.int64)
    bad = [100, 500, 501]
    read_cost[bad] = 20_000  # a slow read skews the periods ending at and after it
    end = start + read_cost
    res = dte_filter(start, end, tolerance=0.01)
    assert res.taken == n - 1
    untrusted = set(np.flatnonzero(~res.trustable).tolist())
    # period i spans stamps i..i+1: a slow read at sample k skews periods k-1 and k;
    # two equally slow reads in a row (500, 501) leave the period between them intact
    assert untrusted == {99, 100, 499, 501}
    assert res.untrustable == 4 and res.kept == n - 1 - 4
    assert res.trustable_fraction == pytest.approx((n - 5) / (n - 1))


def test_dte_tolerance_bounds_are_inclusive_like_shim():
    # CPC = 100 * dCe/dCs in [99, 101] is kept
    start = np.array([0, 1000, 2000, 3000])
    end = np.array([10, 1020, 2010, 3021])  # dCe: 1010 (1.0%), 990 (-1.0%), 1011 (1.1%)
    res = dte_filter(start, end, tolerance=0.01)
    assert res.trustable.tolist() == [True, True, False]


def test_dte_rejects_inconsistent_input():
    with pytest.raises(ValueError, match="end stamp before start"):
        dte_filter(np.array([0, 10]), np.array([5, 9]))
    with pytest.raises(ValueError):
        dte_filter(np.array([0, 10, 20]), np.array([5, 15]))
    res = dte_filter(np.array([0, 0, 10]), np.array([1, 1, 11]))
    assert res.trustable.tolist() == [False, True]  # a zero-length period is not trustable
