"""Microscopy benchmarks (ratios measured in one run; this machine is shared).

1. Cost of one counter read: raw ``os.read`` of the fd (the reference),
   ``MmapCounter.read()`` on each available path (``rdpmc`` in C, ``mmap``
   seqlock in Python with native rdpmc, ``read``), printed as ns and as a
   ratio to raw ``os.read``.
2. Observer loops at 10-200 kHz on a busy thread on another CPU, interleaved:
   trustable fraction, achieved rate, late slots and observer CPU per sample
   of the Python loop, the native loop, ``auto`` (and which loop it chose),
   and the floor: the native loop doing nothing but back-to-back bracketed
   reads, its brackets judged at each rate's DTE budget (what the machine's
   read jitter allows). Prints whether the native loop and ``auto`` keep
   >= 90 % trustable at 50 kHz where the floor allows it, and the highest rate
   each loop sustains with >= 95 % trustable and >= 95 % achieved.
3. The target's slowdown (a fixed CPU-bound workload, wall time) under the
   observer at 1 kHz, 10 kHz and the native loop's maximum, against runs
   without the observer, interleaved.

    python benchmarks/bench_observe.py [--quick] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

from pmuscope.errors import PmuscopeError
from pmuscope.events.spec import EventSpec
from pmuscope.kernel import perf_event_attr
from pmuscope.observe import MmapCounter, Observer, dte_filter
from pmuscope.observe.mmap_page import native_available

WORK = [sys.executable, "-m", "pmuscope.workloads", "iterations", "60000"]


def per_call_ns(fn, n=20000, rounds=5) -> float:
    best = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best.append((time.perf_counter_ns() - t) / n)
    return statistics.median(best)


def read_costs() -> None:
    print("== cost of one counter read (median ns; ratio to raw os.read of the same fd)")
    candidates = [("instructions:u", perf_event_attr(type=0, config=1, exclude_kernel=1, exclude_hv=1)),
                  ("task-clock", perf_event_attr(type=1, config=1))]
    for name, attr in candidates:
        try:
            c = MmapCounter(attr, event=name)
        except PmuscopeError as err:
            print(f"  {name}: not available here ({str(err).splitlines()[0]})")
            continue
        fd = c.fd.fd
        raw = per_call_ns(lambda: os.read(fd, 24))
        print(f"  {name}: raw os.read {raw:7.0f} ns  (1.00x)")
        for path in ("rdpmc", "mmap", "read"):
            if path in ("rdpmc", "mmap") and c._choose(path) != path:
                print(f"  {name}: {path:>5} path   n/a (index={c.page().index}, cap_user_rdpmc={c.page().cap_user_rdpmc}, native={native_available()})")
                continue
            c.path = path
            ns = per_call_ns(c.read)
            print(f"  {name}: {path:>5} path {ns:7.0f} ns  ({ns / raw:.2f}x)")
        c.close()


TC = EventSpec("task-clock", perf_event_attr(type=1, config=1))
CS = EventSpec("context-switches", perf_event_attr(type=1, config=3))


class FloorObserver(Observer):
    """The floor: the native loop with nothing but the bracketed reads, back to
    back (no schedule, no sleep), on the same counters and observer CPU, for the
    same wall time as the loops it is compared with (:func:`floor_run`)."""

    def _decide_loop(self, size, period_ns):
        return "native", "floor: back-to-back reads"

    def _native_loop(self, raw, stamps, n, size, period_ns):
        return super()._native_loop(raw, stamps, n, size, 0)


def floor_run(tid: int, duration: float, observer_cpu: int):
    stop = threading.Event()
    timer = threading.Timer(duration, stop.set)
    timer.start()
    try:
        # the buffers hold a million reads; the run ends after `duration` (checked every slice)
        return FloorObserver([TC, CS], tid=tid, rate_hz=1e6, duration=1.0, observer_cpu=observer_cpu, stop=stop).run()
    finally:
        timer.cancel()


def floor_fraction(stamps, rate: float, tolerance: float = 0.01) -> float:
    """The DTE verdict the floor's reads get at ``rate``: of the back-to-back
    reads, the first at or after each point of the rate's grid, judged as the
    loops' samples are (a read's jitter shows as often per second as in a loop
    at that rate, not diluted by the reads in between)."""
    cs = stamps[:, 0]
    grid = np.arange(cs[0], cs[-1], 1e9 / rate)
    idx = np.unique(np.searchsorted(cs, grid))
    idx = idx[idx < len(cs)]
    return dte_filter(stamps[idx, 0], stamps[idx, 1], tolerance).trustable_fraction


def pinned(cpu: int):
    return lambda: os.sched_setaffinity(0, {cpu})


def loop_table(target: str, rates, duration: float, rounds: int) -> dict:
    """Trustable fraction, achieved rate and CPU per sample of each loop at each
    rate, interleaved (the order rotates per round); median over rounds. The
    target runs on the first allowed CPU, the observer on the last."""
    cpus = sorted(os.sched_getaffinity(0))
    kinds = ["floor", "python", "native", "auto"] if native_available() else ["python", "auto"]
    rows: dict = {}
    realtime: list = []
    seconds = str(len(rates) * len(kinds) * rounds * (2 * duration + 1.0) + 30)
    cmd = ([sys.executable, "-m", "pmuscope.workloads", "busy", seconds] if target == "busy"
           else ["sleep", seconds])
    proc = subprocess.Popen(cmd, preexec_fn=pinned(cpus[0]))
    try:
        time.sleep(0.2)
        for rnd in range(rounds):
            for rate in rates:
                order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
                for kind in order:
                    if kind == "floor":
                        r = floor_run(proc.pid, duration, cpus[-1])
                        trust, achieved = floor_fraction(r.stamps, rate), float("nan")
                    else:
                        r = Observer([TC, CS], tid=proc.pid, rate_hz=rate, duration=duration, loop=kind,
                                     observer_cpu=cpus[-1]).run()
                        trust, achieved = r.dte.trustable_fraction, r.rate_hz
                    cpu = r.observer_task_clock_ns / max(r.samples, 1)
                    rows.setdefault((rate, kind), []).append((trust, achieved, cpu, r.path, r.late))
                    realtime.append(r.realtime)
                    # a SCHED_FIFO thread may run 0.95 s of each second (sched_rt_runtime_us): let
                    # the budget refill, or the run that crosses it loses 50 ms of slots
                    time.sleep(duration)
    finally:
        proc.kill()
        proc.wait()
    print(f"  observer thread SCHED_FIFO in {sum(realtime)} of {len(realtime)} runs; target on CPU {cpus[0]},"
          f" observer on CPU {cpus[-1]}")
    print(f"  {'rate':>8} {'loop':>6} {'trustable':>9} {'achieved':>10} {'late':>6} {'CPU/sample':>10}  runs (trustable %)")
    out = {}
    for rate in rates:
        for kind in kinds:
            got = rows[(rate, kind)]
            trust = statistics.median(g[0] for g in got)
            ach = statistics.median(g[1] for g in got)
            cpu = statistics.median(g[2] for g in got)
            late = statistics.median(g[4] for g in got)
            label = kind if kind != "auto" else f"auto={'native' if got[-1][3] == 'native' else 'python'}"
            runs = " ".join(f"{100 * g[0]:.1f}" for g in got)
            ach_s = "-" if ach != ach else f"{ach:,.0f}"
            print(f"  {rate:>8,.0f} {label:>6} {100 * trust:8.2f}% {ach_s:>10} {late:>6.0f} {cpu:>8,.0f}ns  {runs}")
            out[(rate, kind)] = (trust, ach)
    return out


def verdict(target: str, table, rate: float = 50000.0) -> None:
    if (rate, "floor") not in table:
        print("  no native helper: no floor, no native loop")
        return
    floor, native, auto = (table[(rate, k)][0] for k in ("floor", "native", "auto"))
    goal = min(0.90, floor - 0.02)
    ok = native >= goal and auto >= goal
    print(f"  {target}, {rate:,.0f} Hz: floor {100 * floor:.1f}%, native loop {100 * native:.1f}%, auto {100 * auto:.1f}%;"
          f" target >= 90% where the floor allows (here >= {100 * goal:.1f}%): {'met' if ok else 'NOT met'}")


def best_rate(table, kind: str) -> float:
    ok = [rate for (rate, k), (trust, ach) in table.items() if k == kind and trust >= 0.95 and ach >= 0.95 * rate]
    return max(ok, default=0.0)


def slowdown(rate: float, loop: str, reps: int) -> tuple[float, float]:
    from pmuscope.observe.observer import run_with_baseline

    ratios, trust = [], []
    for _ in range(reps):
        r = run_with_baseline(WORK, [TC, CS], rate_hz=rate)
        ratios.append(r.slowdown)
        trust.append(r.dte.trustable_fraction)
    return statistics.median(ratios), statistics.median(trust)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--targets", default="sleeping,busy", help="which loop tables (sleeping,busy)")
    ap.add_argument("--no-slowdown", action="store_true", help="skip the target-slowdown part")
    args = ap.parse_args()
    dur = 0.2 if args.quick else 0.5
    read_costs()
    rates = [10000, 20000, 50000, 100000, 200000]
    rounds = 1 if args.quick else args.rounds
    tables = {}
    for target, what in (("sleeping", "a sleeping thread: its counters are read without interrupting it"),
                         ("busy", "a busy thread on another CPU: each read interrupts it (an IPI)")):
        if target not in args.targets.split(","):
            continue
        print(f"== loops against the floor, task-clock + context-switches of {what}; floor: back-to-back"
              " native reads, the first at or after each period of the rate, judged by DTE (±1%)")
        tables[target] = loop_table(target, rates, dur, rounds)
    print("== verdict")
    for target, table in tables.items():
        verdict(target, table)
    for target, table in tables.items():
        best_py, best_native = best_rate(table, "python"), best_rate(table, "native")
        print(f"  {target}: highest rate with >= 95% trustable and achieved: python loop {best_py:,.0f} Hz,"
              f" native loop {best_native:,.0f} Hz")
    if args.no_slowdown:
        return
    print("== target slowdown (wall time with observer / without; median of interleaved pairs)")
    reps = 2 if args.quick else 5
    for rate in sorted({1000.0, 10000.0, max(best_native, best_py, 1000.0)}):
        ratio, trust = slowdown(rate, "auto", reps)
        print(f"  {rate:>8,.0f} Hz: slowdown {ratio:.3f}x  (trustable {100 * trust:.1f}%)")


if __name__ == "__main__":
    main()
