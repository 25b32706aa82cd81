"""pmuscope observe: SHIM-style high-rate counter reads of a CPU, process or thread."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "read a target's counters at a high fixed rate; keep trustable samples (SHIM)"
DESCRIPTION = (
    "A sampler thread pinned to its own CPU reads the target's counters at a fixed rate, each read "
    "bracketed by two timestamps; a sample is trustable when the periods between start stamps and "
    "between end stamps agree within --tolerance (SHIM's double-time check)."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-e", "--events", default="task-clock,context-switches", help="event list (default: %(default)s)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("-C", "--cpu", type=int, help="observe this CPU (CPU-wide counters)")
    target.add_argument("-p", "--pid", type=int, help="observe every thread of this process")
    target.add_argument("-t", "--tid", type=int, help="observe one thread")
    p.add_argument("--rate", type=float, default=1000.0, help="samples per second (default: %(default)s)")
    p.add_argument("--duration", type=float, default=1.0, help="seconds (default: %(default)s)")
    p.add_argument("--tolerance", type=float, default=1.0, help="DTE tolerance in percent (default: ±%(default)s%%)")
    p.add_argument("--loop", choices=("auto", "python", "native"), default="auto", help="sampling loop (default: auto: measured at start; the Python loop when the period is"
                        " comfortably above its cost, else the native one)")
    p.add_argument("--observer-cpu", type=int, help="CPU to pin the sampler to (default: another CPU)")
    p.add_argument("--switches", action="store_true",
                   help="with -C: track context switches and attribute each sample to the thread that ran")
    p.add_argument("--timeline", metavar="FILE", help="with --switches: write which tid ran on the CPU, when (.csv, .npz)")
    p.add_argument("-o", "--output", help="write the series (.parquet, .csv, .npz)")
    p.add_argument("--json", action="store_true", help="print the run's summary as one JSON object")
    p.add_argument("--tags", action="store_true", help="read the target's tags (pmuscope.tags) with every sample: tag:<name> columns")
    p.add_argument("--explain", action="store_true", help="list each event's fd, rdpmc index and read path (with -e and a target), and why")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD: run CMD alone, then observed, and report the slowdown")


def run(args: argparse.Namespace) -> int:
    from ..errors import PmuscopeError
    from ..observe import write_series
    from ..observe.observer import Observer, run_with_baseline

    if args.explain:
        from ..observe.explain_events import print_explain

        return print_explain(args, sys.stdout)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not args.tolerance >= 0 or args.tolerance >= 100:
        raise PmuscopeError(f"--tolerance {args.tolerance:g}: a percentage, 0 or more and below 100")
    if not args.rate > 0:
        raise PmuscopeError(f"--rate {args.rate:g}: must be a positive number of samples per second")
    if not args.duration > 0 or args.duration == float("inf"):
        raise PmuscopeError(f"--duration {args.duration:g}: must be a positive number of seconds")
    if args.timeline and not args.switches:
        raise PmuscopeError("--timeline needs --switches (it writes the context switches tracked with -C)")
    if args.switches and args.cpu is None:
        raise PmuscopeError("--switches attributes a CPU's samples to threads: it needs -C CPU")
    tol = args.tolerance / 100.0
    # the output files are created before the run: a bad path fails now, not after it
    from ..observe.observer import series_format
    from ..outfile import open_output

    series = timeline = None
    try:
        if args.output:
            series_format(args.output)
            series = open_output(args.output, "wb")
        if args.timeline:
            timeline = open_output(args.timeline, "wb")
        if cmd:
            if any(x is not None for x in (args.cpu, args.pid, args.tid)):
                raise PmuscopeError("observe: give a target (-C/-p/-t) or a command, not both")
            result = run_with_baseline(cmd, args.events, rate_hz=args.rate, tolerance=tol, loop=args.loop,
                                       observer_cpu=args.observer_cpu, tags=args.tags)
        else:
            if args.cpu is None and args.pid is None and args.tid is None:
                raise PmuscopeError("observe: give a target: -C CPU, -p PID, -t TID, or -- CMD")
            result = Observer(
                args.events, cpu=args.cpu, pid=args.pid, tid=args.tid, rate_hz=args.rate, duration=args.duration,
                loop=args.loop, tolerance=tol, observer_cpu=args.observer_cpu,
                track_switches=args.switches, tags=args.tags,
            ).run()
        if series is not None:
            write_series(result, args.output, out=series)
        if timeline is not None and result.switches is not None:
            result.switches.write_timeline(args.timeline, out=timeline)
    finally:
        for f in (series, timeline):
            if f is not None and not f.closed:
                f.abort()
    s = result.summary()
    if args.json:
        if result.switches is not None:
            from ..observe.switches import who_ran

            s = {**s, "who_ran": who_ran(result.switches)}
        print(json.dumps(s))
        return 0
    out = sys.stdout
    print(f"observed {s['target']} for {result.wall_ns / 1e9:.3f} s with {', '.join(result.events)}", file=out)
    print(f"  samples        {s['samples']:>10,}   achieved {s['rate_hz']:,.1f} Hz of {s['rate_hz_requested']:,.0f} Hz asked ({s['late']} late)", file=out)
    print(f"  trustable      {result.dte.kept:>10,}   {100 * result.dte.trustable_fraction:.2f}% of {result.dte.taken:,} periods"
          f" (±{args.tolerance:g}%; {s['untrustable']:,} untrustable)", file=out)
    print(f"  observer cost  {s['observer_cpu_pct']:>9.2f}%   of one CPU (its own task-clock), path: {s['path']}"
          f"{', SCHED_FIFO' if s['realtime'] else ''}", file=out)
    print(f"  loop           {'native' if s['path'] == 'native' else 'python':>10}   {s['loop_reason']}", file=out)
    if result.slowdown is not None:
        print(f"  target         {100 * (result.slowdown - 1):+9.2f}%   wall time vs a run without the observer"
              f" ({result.extra['baseline_s']:.3f} s → {result.extra['observed_s']:.3f} s)", file=out)
    if result.switches is not None:
        tl = result.switches.timeline()
        print(f"  switches       {s['switch_records']:>10,}   records, {len(set(tl['tid'].tolist())):,} threads ran on the CPU"
              f" ({s['switch_lost']} lost)", file=out)
        from ..observe.switches import format_who_ran, who_ran

        rows = who_ran(result.switches)
        print("  who ran where (time on the CPU while observed, most first):", file=out)
        print(format_who_ran(rows[:10], len(rows)), file=out)
    if result.tags is not None:
        from ..observe.tagging import format_tags

        print(format_tags(s), file=out)
    if args.output:
        print(f"  series         {args.output}", file=out)
    return 0
