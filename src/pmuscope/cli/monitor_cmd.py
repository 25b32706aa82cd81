"""``pmuscope monitor``: counter time series as a data set (Parquet, CSV, JSON lines)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from ..errors import PmuscopeError

HELP = "write counter time series (one row per interval and CPU/thread) with DVFS context"
DESCRIPTION = (
    "Count EVENTS every -I MS and write one row per (interval, CPU) — or per (interval, thread) "
    "with -p — with the kernel's monotonic timestamp, the interval's length, each event's delta, "
    "time_enabled/time_running, a late flag, and per-CPU frequency, utilization, governor, "
    "temperatures and energy where the machine has them."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-e", "--event", dest="events", action="append", metavar="EVENTS",
                        help="event list, as for perf stat (repeatable): -e cycles,instructions (default: perf "
                             "stat's default events; the hardware ones only where they open)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("-a", "--all-cpus", action="store_true", help="every online CPU (the default)")
    target.add_argument("-C", "--cpu", metavar="LIST", help="these CPUs: 0-3,8")
    target.add_argument("-p", "--pid", type=int, metavar="PID", help="the threads of this process, one row per thread")
    parser.add_argument("-I", "--interval", type=float, required=True, metavar="MS", help="interval in milliseconds (>= 0.1)")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: Ctrl-C or process exit)")
    parser.add_argument("--interval-count", type=int, metavar="N", help="stop after N intervals (perf stat's "
                                                                           "--interval-count)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="output file ('-' for standard output)")
    parser.add_argument("--format", choices=("parquet", "csv", "jsonl"), help="default: from FILE's extension, else csv")
    parser.add_argument("--no-group", action="store_true", help="read each event alone instead of one group per PMU")
    parser.add_argument("--no-context", action="store_true", help="no frequency/utilization/thermal/power columns")
    parser.add_argument("--no-power", action="store_true", help="do not add the power PMU's energy-* (RAPL) events")
    parser.add_argument("--context-interval", type=float, metavar="MS",
                        help="read context every MS (default: the interval, at least 10 ms)")
    parser.add_argument("--util-interval", type=float, metavar="MS",
                        help="read /proc/stat utilization every MS (default: the interval, at least 100 ms)")
    parser.add_argument("--no-inherit", action="store_true", help="with -p: do not count threads started later")
    parser.add_argument("--no-realtime", action="store_true",
                        help="do not ask for SCHED_FIFO for the sampling thread (asked below 10 ms when allowed)")
    parser.add_argument("--timer", choices=("auto", "kernel", "user"), default="auto",
                        help="who keeps the intervals: 'kernel' - each CPU's cpu-clock timer writes its counts into a "
                             "ring buffer drained every 0.25 s (no wake-up per interval; CPU-wide runs); 'user' - a "
                             "thread wakes at every deadline and reads every CPU; 'auto' (default): user for now (the kernel "
                             "timer's samples can go missing for stretches on some kernels; see docs/ARCHITECTURE.md)")
    parser.add_argument("--row-group", type=int, default=65536, metavar="N", help="Parquet rows per row group")
    parser.add_argument("--flush-interval", type=float, default=5.0, metavar="S",
                        help="Parquet: close a row group at least every S seconds, so a killed run keeps all but "
                             "the last S seconds (default 5; CSV and JSON lines are flushed every 0.25 s batch)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")


class _Progress:
    """One status line on stderr, rewritten in place, when stderr is a terminal."""

    def __init__(self, enabled: bool, output: str) -> None:
        self.enabled = enabled
        self.output = output
        self.last = 0.0

    def update(self, stats, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.2:
            return
        self.last = now
        pct = 100.0 * stats.on_time_fraction
        sys.stderr.write(
            f"\r\x1b[K[monitor] {stats.elapsed_s:8.1f} s  {stats.intervals} intervals  "
            f"{stats.rows} rows  late {stats.late} ({pct:.2f}% on time)  -> {self.output}"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def default_monitor_events(system_wide: bool) -> list:
    """perf stat's default events (cpu-clock system-wide, task-clock per
    process, the software events, the hardware ones) less the ones that do
    not open here: a data set has no column for ``<not supported>``."""
    from ..errors import PmuscopeError as _Err
    from ..kernel import PerfEventFd
    from .stat_cmd import default_events

    out = []
    for spec in default_events(system_wide):
        probe = spec.attr.copy()
        probe.exclude_kernel = 1
        try:
            PerfEventFd(probe, pid=0, cpu=-1).close()
        except _Err:
            continue
        out.append(spec)
    return out


def run(args: argparse.Namespace) -> int:
    from ..counting.monitor import Monitor
    from ..counting.writers import format_for_path, open_writer

    if args.interval is None or not args.interval >= 0.1 or args.interval > 86_400_000:
        raise PmuscopeError(f"-I {args.interval}: the interval must be at least 0.1 ms (and at most a day)")
    if args.duration is not None and not 0 < args.duration < float("inf"):
        raise PmuscopeError(f"--duration {args.duration}: must be a positive number of seconds")
    if not args.row_group >= 1:
        raise PmuscopeError(f"--row-group {args.row_group}: must be 1 or more rows")
    if not 0 < args.flush_interval <= 86_400:
        raise PmuscopeError(f"--flush-interval {args.flush_interval}: must be more than 0 and at most 86400 seconds")
    for opt in ("context_interval", "util_interval"):
        v = getattr(args, opt)
        if v is not None and not 0 < v <= 86_400_000:
            raise PmuscopeError(f"--{opt.replace('_', '-')} {v}: must be a positive number of milliseconds")
    if args.pid is not None and args.pid <= 0:
        raise PmuscopeError(f"-p {args.pid}: expected a process id (a positive number)")
    if args.interval_count is not None and args.interval_count < 1:
        raise PmuscopeError(f"--interval-count {args.interval_count}: must be at least 1")
    fmt = args.format or format_for_path(args.output)
    events = args.events or default_monitor_events(system_wide=args.pid is None)
    mon = Monitor(
        events,
        count=args.interval_count,
        cpus=args.cpu,
        pid=args.pid,
        interval_ms=args.interval,
        duration=args.duration,
        group=not args.no_group,
        context=not args.no_context,
        context_ms=args.context_interval,
        util_ms=args.util_interval,
        inherit=not args.no_inherit,
        realtime=False if args.no_realtime else None,
        power=not args.no_power,
        timer=args.timer,
    )
    progress = _Progress(not args.quiet and sys.stderr.isatty() and args.output != "-", args.output)
    # Ctrl-C / SIGTERM end the run cleanly: the sampler finishes its interval,
    # the partial chunk is written and the file closed; a second Ctrl-C aborts
    stopped: list[int] = []

    def _stop(signum, frame):
        if stopped:
            raise KeyboardInterrupt
        stopped.append(signum)
        mon.stop()

    old_int = signal.signal(signal.SIGINT, _stop)
    old_term = signal.signal(signal.SIGTERM, _stop)
    interrupted = False
    try:
        mon.open()
        for warning in mon.warnings:
            print(f"pmuscope monitor: {warning}", file=sys.stderr)
        kwargs = {"row_group_rows": args.row_group, "flush_seconds": args.flush_interval} if fmt == "parquet" else {}
        writer = open_writer(args.output, mon.schema(), fmt, mon.metadata(), **kwargs)
        try:
            try:
                for batch in mon.batches():
                    writer.write(batch)
                    progress.update(mon.stats)
            except KeyboardInterrupt:
                interrupted = True  # keep what was written
        except BaseException:
            writer.abort()  # a full disk: the file keeps its whole batches
            raise
        writer.close()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        mon.close()
        progress.update(mon.stats, force=True)
        progress.close()
    st = mon.stats
    if st.lost or st.throttled or st.restarts:
        # never silent: their intervals are the skipped ones (the next row holds their counts)
        print(f"pmuscope monitor: the kernel timer lost {st.lost} samples (ring full), was throttled "
              f"{st.throttled} times (perf_event_max_sample_rate per tick; an idle CPU does not tick) and "
              f"restarted {st.restarts} times; those intervals are counted as skipped", file=sys.stderr)
    if not args.quiet and args.output != "-":
        print(
            f"pmuscope monitor: {st.rows} rows, {st.intervals} intervals of {args.interval:g} ms, "
            f"{st.late} late ({100 * st.on_time_fraction:.2f}% on time), {st.skipped} skipped, "
            f"{mon.timer} timer -> {args.output}",
            file=sys.stderr,
        )
    return 130 if interrupted else 0
