"""Cost of one counter read through pmuscope against a raw ``os.read`` of the
same fd, measured in the same run (this machine is shared: compare ratios).

Measured, per call (best of several rounds, interleaved):

- raw:     ``os.read(fd, size)`` of the leader fd (the reference);
- read():  ``Counter.read()`` — the public API (one read per group + a lazily
           decoded ``Counts``), on each read path: ``native`` (one C call,
           ``pmuscope._native.CountsReader``) and ``python`` (the pure-Python
           reader, used where the native helper is not built);
- +value:  ``Counter.read()`` and then ``counts[event].scaled`` (decode one value);
- readv:   the monitor's reader: ``os.readv`` into a preallocated buffer.

for one counter and for a 4-event group, with software events (everywhere)
and hardware events (when a PMU exists). Targets: read() <= 1.3x raw;
read()+value well under 2x raw for one software counter.

    python benchmarks/bench_read.py [--quick] [--path native|python]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pmuscope import count
from pmuscope.counting import counter as counter_mod
from pmuscope.errors import PmuscopeError


def per_call_ns(fn, n: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t) / n


def open_counter(events: str, native: bool):
    saved = counter_mod.NATIVE_READ
    counter_mod.NATIVE_READ = native
    try:
        return count(events).start()
    finally:
        counter_mod.NATIVE_READ = saved


def bench_path(events: str, first: str, n: int, rounds: int, path: str) -> dict[str, float] | None:
    """Best per-call times of one read path, with the raw reads of the same fd
    interleaved. One session at a time: two 4-event hardware groups open at once
    would need 8 counters and multiplex, and an unscheduled group reads in a
    fraction of the time, which would make every ratio meaningless."""
    try:
        c = open_counter(events, path == "native")
    except PmuscopeError as err:
        print(f"  {events}: skipped ({str(err).splitlines()[0]})")
        return None
    try:
        if c.read_path != path:
            print(f"  {events}: the {path} read path is not available here ({c.read_path} used)")
            return None
        assert len(c._read_plan) == 1, "one read unit expected"
        fd, size, _ = c._read_plan[0]
        read = os.read
        readv = os.readv
        buf = bytearray(size)
        target = [memoryview(buf)]
        api = c.read

        def raw():
            read(fd, size)

        def lean():
            readv(fd, target)

        def api_val():
            api()[first].scaled

        fns = {"raw": raw, "readv": lean, "read()": api, "+value": api_val}
        before = c.read()
        best = {k: float("inf") for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                best[k] = min(best[k], per_call_ns(fn, n))
        delta = c.read() - before
        ev = delta[first]
        if ev.time_enabled and ev.time_running < 0.95 * ev.time_enabled:
            print(f"  {events} ({path}): counted only {100 * ev.ratio:.0f}% of the time (counters taken "
                  "by another session?): an unscheduled group reads faster, so this row is left out")
            return None
        return best
    finally:
        c.stop()
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--path", choices=("native", "python"), help="measure one read path (default: both)")
    args = ap.parse_args()
    # many short rounds: on a loaded machine a short round is more likely to run undisturbed
    n, rounds = (2000, 3) if args.quick else (5000, 25)
    paths = [args.path] if args.path else ["native", "python"]
    if "native" in paths and not counter_mod.native_read_available():
        print("native read path: not built (no C compiler at install time); measuring the python path")
        paths = ["python"]
    cases = [
        ("1 counter, software", "task-clock", "task-clock"),
        ("4-event group, software", "{task-clock,context-switches,page-faults,cpu-migrations}", "task-clock"),
        ("1 counter, hardware", "cycles", "cycles"),
        ("4-event group, hardware", "{cycles,instructions,branches,branch-misses}", "cycles"),
    ]
    print(f"pmuscope bench_read: {n} calls x {rounds} rounds, best round; python {sys.version.split()[0]}")
    print(f"{'case':26} {'path':7} {'raw os.read':>11} {'read()':>9} {'ratio':>6} {'read()+value':>12} {'ratio':>6} "
          f"{'over raw':>9} {'readv':>8} {'ratio':>6}")
    worst = {p: 0.0 for p in paths}
    sw_value = {}
    for label, events, first in cases:
        for path in paths:
            res = bench_path(events, first, n, rounds, path)
            if res is None:
                continue
            raw = res["raw"]
            r_api = res["read()"] / raw
            r_val = res["+value"] / raw
            worst[path] = max(worst[path], r_api)
            if label == "1 counter, software":
                sw_value[path] = r_val
            print(
                f"{label:26} {path:7} {raw:9.0f}ns {res['read()']:7.0f}ns {r_api:5.2f}x "
                f"{res['+value']:10.0f}ns {r_val:5.2f}x {res['+value'] - raw:7.0f}ns "
                f"{res['readv']:6.0f}ns {res['readv'] / raw:5.2f}x"
            )
    for path in paths:
            if f"read() {path}" not in res:
                continue
            r_api = res[f"read() {path}"] / raw
            r_val = res[f"+value {path}"] / raw
            worst[path] = max(worst[path], r_api)
            if label == "1 counter, software":
                sw_value[path] = r_val
            print(
                f"{label:26} {path:7} {raw:9.0f}ns {res[f'read() {path}']:7.0f}ns {r_api:5.2f}x "
                f"{res[f'+value {path}']:10.0f}ns {r_val:5.2f}x {res[f'+value {path}'] - raw:7.0f}ns "
                f"{res['readv']:6.0f}ns {res['readv'] / raw:5.2f}x"
            )
    for path in paths:
        met = "MET" if worst[path] <= 1.3 else "NOT MET"
        extra = f"; read()+value, 1 software counter: {sw_value[path]:.2f}x raw" if path in sw_value else ""
        print(f"{path}: worst read()/raw ratio {worst[path]:.2f}x (target <= 1.30x): {met}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
