"""SHIM's double-time error correction (DTE): which samples to trust.

Every sample ``i`` is bracketed by a start stamp ``Cs[i]`` (before the
counters are read) and an end stamp ``Ce[i]`` (after). The period of sample
``i`` is measured twice: ``Cs[i] - Cs[i-1]`` and ``Ce[i] - Ce[i-1]``. When the
time spent reading the counters varied between the two samples, the two
periods disagree and rate metrics (IPC, misses per cycle) computed over that
period are skewed, so the sample is dropped. SHIM (ISCA 2015, §4.1,
``shim_trustable_sample``) keeps a sample when ``CPC = 100 * dCe / dCs`` lies in
``[99, 101]``: a ±1 % tolerance, the default here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_TOLERANCE = 0.01


@dataclass
class DteResult:
    """Per-period verdicts for ``n`` stamps (``n - 1`` periods)."""

    #: bool per period (period i is between stamp i and i+1)
    trustable: np.ndarray
    #: ratio of the end-stamp period to the start-stamp period, per period
    cpc: np.ndarray

    @property
    def taken(self) -> int:
        return int(self.trustable.size)

    @property
    def kept(self) -> int:
        return int(np.count_nonzero(self.trustable))

    @property
    def untrustable(self) -> int:
        return self.taken - self.kept

    @property
    def trustable_fraction(self) -> float:
        return self.kept / self.taken if self.taken else 0.0


def dte_filter(start: np.ndarray, end: np.ndarray, tolerance: float = DEFAULT_TOLERANCE) -> DteResult:
    """Judge each period between consecutive samples.

    ``start`` and ``end`` are the bracketing stamps (any monotonic unit: TSC
    ticks or nanoseconds). A period whose start-stamp interval is zero or
    negative (clock went backwards, duplicate stamp) is untrustable.
    """
    s = np.asarray(start, dtype=np.int64)
    e = np.asarray(end, dtype=np.int64)
    if s.shape != e.shape or s.ndim != 1:
        raise ValueError("start and end stamps must be 1-D arrays of the same length")
    if np.any(e < s):
        bad = int(np.argmax(e < s))
        raise ValueError(f"end stamp before start stamp at sample {bad}")
    ds = np.diff(s).astype(np.float64)
    de = np.diff(e).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        cpc = np.where(ds > 0, de / ds, np.nan)
    # |dCe - dCs| <= tol * dCs, with a relative epsilon so that exactly ±tol
    # (SHIM's inclusive [99, 101]) is kept despite binary floating point
    ok = (ds > 0) & (np.abs(de - ds) <= tolerance * ds * (1 + 1e-9))
    return DteResult(trustable=ok, cpc=cpc)
