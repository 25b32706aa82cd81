"""``pmuscope monitor`` at 1 ms on every CPU: its CPU cost and how many
intervals start on time, with the floors measured in the same run.

Reported:

- the monitor's CPU time (user+sys of the whole process during the run, and of
  the sampling thread alone) as % of one CPU; target <= 3 %;
- the fraction of intervals on time (read within 10 % of the interval after
  its deadline); target >= 99 %;
- the floors: a bare ``clock_nanosleep(TIMER_ABSTIME)`` loop at the same
  interval (the cost of waking 1000 times a second at all), and the kernel's
  cost of the group reads themselves (``os.read`` of every group, timed in a
  tight loop) — what any implementation, Python or C, pays.

    python benchmarks/bench_monitor.py [--duration 10] [--interval 1] [-e EVENTS] [--format csv|parquet|jsonl|none]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

from pmuscope.counting.monitor import Monitor, make_sleep_until, monotonic_ns, set_timer_slack
from pmuscope.counting.writers import open_writer


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def bare_sleep_loop(interval_ns: int, seconds: float) -> tuple[float, float]:
    """(% of one CPU, fraction on time) of a loop that only sleeps to deadlines."""
    set_timer_slack(1000)
    sleep_until = make_sleep_until()
    n = int(seconds * 1e9 / interval_ns)
    late = 0
    c0 = time.thread_time()
    t0 = monotonic_ns()
    k = 1
    for _ in range(n):
        deadline = t0 + k * interval_ns
        sleep_until(deadline)
        lateness = monotonic_ns() - deadline
        late += lateness > interval_ns // 10
        k += 1 + (lateness // interval_ns if lateness >= interval_ns else 0)
    wall = (monotonic_ns() - t0) / 1e9
    return 100 * (time.thread_time() - c0) / wall, 1 - late / n


def read_floor(mon: Monitor, interval_ms: float, n: int = 2000) -> float:
    """% of one CPU spent in the kernel reading every group once per interval."""
    mon.open()
    for s in mon._slots:
        s.fd.enable(group=True)
    plan = [(s.fd.fd, s.nwords * 8) for s in mon._slots]
    read = os.read
    t = time.perf_counter()
    for _ in range(n):
        for fd, size in plan:
            read(fd, size)
    per_interval = (time.perf_counter() - t) / n
    mon.close()
    return 100 * per_interval / (interval_ms / 1e3)


def _cycles_open() -> bool:
    from pmuscope.errors import PmuscopeError
    from pmuscope.kernel import PerfEventFd, perf_event_attr

    try:
        PerfEventFd(perf_event_attr(type=0, config=0), pid=0, cpu=-1).close()
        return True
    except PmuscopeError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0, help="ms")
    ap.add_argument("-e", "--events", help="default: cycles,instructions (task-clock,context-switches without a PMU)")
    ap.add_argument("--format", default="csv", choices=("csv", "parquet", "jsonl", "none"))
    ap.add_argument("--no-context", action="store_true")
    args = ap.parse_args()

    events = args.events
    if events is None:
        events = "cycles,instructions" if _cycles_open() else "task-clock,context-switches"
    interval_ns = int(args.interval * 1e6)
    ncpu = len(Monitor(events, interval_ms=args.interval).entities)
    print(f"pmuscope bench_monitor: -e {events} on {ncpu} CPUs, -I {args.interval:g} ms, {args.duration:g} s, "
          f"output {args.format}, context {'off' if args.no_context else 'on'}; load avg {os.getloadavg()[0]:.2f}")

    floor_cpu, floor_on_time = bare_sleep_loop(interval_ns, min(3.0, args.duration))
    reads = read_floor(Monitor(events, interval_ms=args.interval, context=False), args.interval)
    print(f"floor: bare deadline-sleep loop {floor_cpu:.2f}% CPU, {100 * floor_on_time:.2f}% on time; "
          f"kernel group reads alone {reads:.2f}% CPU")

    mon = Monitor(events, interval_ms=args.interval, duration=args.duration, context=not args.no_context)
    mon.open()
    with tempfile.TemporaryDirectory() as tmp:
        writer = None
        if args.format != "none":
            writer = open_writer(os.path.join(tmp, f"out.{args.format}"), mon.schema(), args.format, mon.metadata())
        c0, t0 = cpu_s(), time.monotonic()
        for batch in mon.batches():
            if writer is not None:
                writer.write(batch)
        if writer is not None:
            writer.close()
        cpu, wall = cpu_s() - c0, time.monotonic() - t0
        mon.close()
    st = mon.stats
    proc_pct = 100 * cpu / wall
    thread_pct = 100 * st.sampler_cpu_s / st.elapsed_s
    on_time = 100 * st.on_time_fraction
    print(f"monitor: {st.intervals} intervals, {st.rows} rows in {wall:.2f} s; late {st.late}, skipped deadlines {st.skipped}")
    print(f"  CPU: whole process {proc_pct:.2f}% of one CPU (sampling thread {thread_pct:.2f}%); "
          f"{proc_pct / floor_cpu:.1f}x the bare sleep loop; target <= 3%: {'MET' if proc_pct <= 3 else 'NOT MET'}")
    print(f"  on time: {on_time:.2f}% of intervals (bare loop {100 * floor_on_time:.2f}%); target >= 99%: "
          f"{'MET' if on_time >= 99 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
