"""Microscopy benchmarks (ratios measured in one run; this machine is shared).

1. Cost of one counter read: raw ``os.read`` of the fd (the reference),
   ``MmapCounter.read()`` on each available path (``rdpmc`` in C, ``mmap``
   seqlock in Python with native rdpmc, ``read``), printed as ns and as a
   ratio to raw ``os.read``.
2. Observer: the highest rate (of a ladder) each loop sustains with
   >= 95 % trustable samples and >= 95 % of the asked rate achieved.
3. The target's slowdown (a fixed CPU-bound workload, wall time) under the
   observer at 1 kHz, 10 kHz and the native loop's maximum, against runs
   without the observer, interleaved.

    python benchmarks/bench_observe.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from pmuscope.errors import PmuscopeError
from pmuscope.events.spec import EventSpec
from pmuscope.kernel import perf_event_attr
from pmuscope.observe import MmapCounter, Observer
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


def sustained(loop: str, ladder, duration: float) -> float:
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", str(len(ladder) * duration * 2 + 5)])
    best = 0.0
    try:
        time.sleep(0.2)
        for rate in ladder:
            r = Observer([TC, CS], tid=proc.pid, rate_hz=rate, duration=duration, loop=loop).run()
            ok = r.dte.trustable_fraction >= 0.95 and r.rate_hz >= 0.95 * rate
            print(f"  {loop:>6} {rate:>8,.0f} Hz: achieved {r.rate_hz:>9,.0f} Hz, trustable {100 * r.dte.trustable_fraction:6.2f}%,"
                  f" observer {r.observer_cpu_pct:5.1f}% CPU {'ok' if ok else ''}")
            if ok:
                best = max(best, rate)
    finally:
        proc.kill()
        proc.wait()
    return best


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
    args = ap.parse_args()
    dur = 0.3 if args.quick else 1.0
    read_costs()
    print("== highest sustained rate with >= 95% trustable samples")
    ladder = [1000, 2000, 5000, 10000, 20000, 50000, 100000]
    best_py = sustained("python", ladder, dur)
    best_native = sustained("native", ladder, dur) if native_available() else 0.0
    print(f"  python loop: {best_py:,.0f} Hz   native loop: {best_native:,.0f} Hz")
    print("== target slowdown (wall time with observer / without; median of interleaved pairs)")
    reps = 2 if args.quick else 5
    for rate in sorted({1000.0, 10000.0, max(best_native, best_py, 1000.0)}):
        ratio, trust = slowdown(rate, "auto", reps)
        print(f"  {rate:>8,.0f} Hz: slowdown {ratio:.3f}x  (trustable {100 * trust:.1f}%)")


if __name__ == "__main__":
    main()
