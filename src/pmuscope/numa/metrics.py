"""numatop's metrics as pure functions of recorded counts.

Every function takes plain numbers (counts over one interval) and returns a
float, or ``None`` when the inputs do not define the metric (a missing event,
or a zero denominator) — never a made-up zero. The definitions are numatop's
(``common/win.c:win_countvalue_fill``):

=========  ==========================================  =====================
metric     definition                                  numatop column
=========  ==========================================  =====================
RMA        remote memory accesses in the interval      ``RMA(K)`` = rma/1000
LMA        local memory accesses in the interval       ``LMA(K)`` = lma/1000
RMA/LMA    rma / lma                                   ``RMA/LMA``
CPI        clk / ir (clk: reference or core cycles)    ``CPI``
RPI        rma per 1000 instructions = rma*1000/ir     ``RPI(K)`` (WIN2)
LPI        lma per 1000 instructions = lma*1000/ir     ``LPI(K)`` (WIN2)
CPU%       busy time / wall time                       ``CPU%``
=========  ==========================================  =====================

numatop's CPU% is ``clk / (interval * clk_per_second * ncpus)`` — unhalted
reference cycles over wall-clock cycles; :func:`cpu_pct_from_clk` is that.
pmuscope reports CPU% from scheduler time instead (:func:`cpu_pct_from_ns`,
exact and PMU-free), in percent of *one* CPU for processes and threads and in
percent of the node's CPUs for nodes.
"""

from __future__ import annotations

from typing import Mapping


def ratio(num: float | None, den: float | None) -> float | None:
    """num/den, or None when either is missing or den is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def rma_lma(rma: float | None, lma: float | None) -> float | None:
    """RMA/LMA (numatop's ``RMA/LMA`` column)."""
    return ratio(rma, lma)


def cpi(clk: float | None, ir: float | None) -> float | None:
    """Cycles per instruction (numatop: clk/ir)."""
    return ratio(clk, ir)


def per_kilo_instructions(count: float | None, ir: float | None) -> float | None:
    """count per 1000 instructions: numatop's RPI(K)/LPI(K) = count*1000/ir."""
    if count is None:
        return None
    return ratio(count * 1000.0, ir)


def rpi(rma: float | None, ir: float | None) -> float | None:
    """Remote accesses per 1000 instructions."""
    return per_kilo_instructions(rma, ir)


def lpi(lma: float | None, ir: float | None) -> float | None:
    """Local accesses per 1000 instructions."""
    return per_kilo_instructions(lma, ir)


def cpu_pct_from_ns(busy_ns: float | None, interval_ns: float | None, ncpus: int = 1) -> float | None:
    """CPU% = busy / (interval × ncpus) × 100. With ``ncpus=1`` (processes,
    threads) 100 means one CPU fully used; a node passes its CPU count."""
    if busy_ns is None or not interval_ns or ncpus <= 0:
        return None
    return 100.0 * busy_ns / (interval_ns * ncpus)


def cpu_pct_from_clk(clk: float | None, interval_s: float, clk_per_second: float, ncpus: int) -> float | None:
    """numatop's CPU%: unhalted reference cycles over wall-clock cycles of
    ``ncpus`` CPUs (``clk/(interval*g_clkofsec*ncpus)``), in percent."""
    if clk is None or interval_s <= 0 or clk_per_second <= 0 or ncpus <= 0:
        return None
    return 100.0 * clk / (interval_s * clk_per_second * ncpus)


def cpu_pct_from_jiffies(busy: float, total: float) -> float | None:
    """CPU% of a set of CPUs from ``/proc/stat`` deltas (busy/total × 100)."""
    return None if total <= 0 else 100.0 * busy / total


def per_second(count: float | None, interval_s: float) -> float | None:
    return None if count is None or interval_s <= 0 else count / interval_s


#: bytes per unit of the uncore events numatop reads (``common/os/pfwrapper.c``):
#: IMC CAS count → one 64-byte line; QPI/UPI flits → 8 bytes
IMC_BYTES_PER_COUNT = 64
UPI_BYTES_PER_COUNT = 8


def imc_mb(cas_counts: float | list[float] | None) -> float | None:
    """Memory-controller traffic in MB (2^20 bytes): Σ CAS × 64 / 2^20."""
    if cas_counts is None:
        return None
    total = sum(cas_counts) if isinstance(cas_counts, (list, tuple)) else cas_counts
    return total * IMC_BYTES_PER_COUNT / 2**20


def upi_mb(flits: float | list[float] | None) -> float | None:
    """QPI/UPI link traffic in MB: Σ value × 8 / 2^20."""
    if flits is None:
        return None
    total = sum(flits) if isinstance(flits, (list, tuple)) else flits
    return total * UPI_BYTES_PER_COUNT / 2**20


def scaled(value: float, enabled: float, running: float) -> float | None:
    """A multiplexed count scaled to the whole time (value × enabled/running);
    None when the counter never ran."""
    if running <= 0:
        return None if enabled > 0 else float(value)
    return value * enabled / running


def derived(counts: Mapping[str, float | None]) -> dict[str, float | None]:
    """Every derived metric of one row from its counts (keys ``rma``, ``lma``,
    ``clk``, ``ir``; missing keys are missing events)."""
    rma, lma, clk, ir = (counts.get(k) for k in ("rma", "lma", "clk", "ir"))
    return {
        "rma_lma": rma_lma(rma, lma),
        "cpi": cpi(clk, ir),
        "rpi": rpi(rma, ir),
        "lpi": lpi(lma, ir),
    }
