"""Cost of one counter read through pmuscope against a raw ``os.read`` of the
same fd, measured in the same run (this machine is shared: compare ratios).

Measured, per call (best of several rounds, interleaved):

- raw:     ``os.read(fd, size)`` of the leader fd (the reference);
- read():  ``Counter.read()`` — the public API (one read per group + a lazily
           decoded ``Counts``);
- raw+val: ``Counter.read()`` and then ``counts[event].scaled`` (decode one value);
- readv:   the monitor's reader: ``os.readv`` into a preallocated buffer.

for one counter and for a 4-event group, with software events (everywhere)
and hardware events (when a PMU exists). Target: read() <= 1.3x raw.

    python benchmarks/bench_read.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pmuscope import count
from pmuscope.errors import PmuscopeError


def per_call_ns(fn, n: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t) / n


def bench(events: str, first: str, n: int, rounds: int) -> dict[str, float] | None:
    try:
        c = count(events)
        c.start()
    except PmuscopeError as err:
        print(f"  {events}: skipped ({str(err).splitlines()[0]})")
        return None
    try:
        fd, size, _ = c._read_plan[0]
        assert len(c._read_plan) == 1, "one read unit expected"
        read = os.read
        readv = os.readv
        buf = bytearray(size)
        target = [memoryview(buf)]
        api = c.read

        def raw():
            read(fd, size)

        def api_val():
            api()[first].scaled

        def lean():
            readv(fd, target)

        fns = {"raw": raw, "read()": api, "read()+value": api_val, "readv": lean}
        best = {k: float("inf") for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                best[k] = min(best[k], per_call_ns(fn, n))
        return best
    finally:
        c.stop()
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (2000, 3) if args.quick else (20000, 7)
    cases = [
        ("1 counter, software", "task-clock", "task-clock"),
        ("4-event group, software", "{task-clock,context-switches,page-faults,cpu-migrations}", "task-clock"),
        ("1 counter, hardware", "cycles", "cycles"),
        ("4-event group, hardware", "{cycles,instructions,branches,branch-misses}", "cycles"),
    ]
    print(f"pmuscope bench_read: {n} calls x {rounds} rounds, best round; python {sys.version.split()[0]}")
    print(f"{'case':28} {'raw os.read':>12} {'read()':>10} {'ratio':>7} {'read()+value':>13} {'ratio':>7} {'readv':>9} {'ratio':>7}")
    worst = 0.0
    for label, events, first in cases:
        res = bench(events, first, n, rounds)
        if res is None:
            continue
        raw = res["raw"]
        r_api = res["read()"] / raw
        worst = max(worst, r_api)
        print(
            f"{label:28} {raw:10.0f}ns {res['read()']:8.0f}ns {r_api:6.2f}x "
            f"{res['read()+value']:11.0f}ns {res['read()+value'] / raw:6.2f}x {res['readv']:7.0f}ns {res['readv'] / raw:6.2f}x"
        )
    print(f"worst read()/raw ratio: {worst:.2f}x (target <= 1.30x): {'MET' if worst <= 1.3 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
