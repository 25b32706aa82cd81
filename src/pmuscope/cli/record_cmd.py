"""``pmuscope record``: sample a command, processes, threads or CPUs into a
perf.data file that Linux ``perf report``/``perf script`` read."""

from __future__ import annotations

import argparse
import signal
import sys

from .. import errors

HELP = "sample into perf.data like perf record (-e, -F/-c, -g, -p/-t/-a/-C, -- CMD)"
DESCRIPTION = (
    "Record samples of a command (-- CMD), of running processes (-p) or threads (-t), or of the whole "
    "machine (-a, -C) into a perf.data file. Defaults like perf record: cycles (cpu-clock without a "
    "hardware PMU) at 4000 Hz into ./perf.data. Ctrl-C stops and still writes a valid file."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-e", "--event", action="append", default=[], metavar="EVENTS", help="event list (perf -e syntax); repeatable")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("-F", "--freq", metavar="HZ", help="sample at HZ samples per second (default 4000; 'max': "
                      "kernel.perf_event_max_sample_rate)")
    rate.add_argument("-c", "--count", type=int, metavar="PERIOD", help="sample every PERIOD events")
    p.add_argument("-g", dest="callgraph", action="store_true", help="record frame-pointer call chains")
    p.add_argument("--call-graph", metavar="MODE", help="call-chain mode: fp (like -g) or dwarf[,SIZE] (user stack "
                   "copies for perf report to unwind)")
    p.add_argument("-p", "--pid", metavar="PID[,PID]", help="attach to processes (all their threads)")
    p.add_argument("-t", "--tid", metavar="TID[,TID]", help="attach to threads (no inheritance, like perf)")
    p.add_argument("-a", "--all-cpus", action="store_true", help="system-wide: every CPU")
    p.add_argument("-C", "--cpu", metavar="LIST", help="system-wide on these CPUs (0-3,6)")
    p.add_argument("-o", "--output", default="perf.data", metavar="FILE", help="output file (default perf.data)")
    p.add_argument("-m", "--mmap-pages", type=int, metavar="PAGES", help="data pages per ring buffer (power of two; default 128)")
    p.add_argument("-i", "--no-inherit", action="store_true", help="do not follow child tasks")
    p.add_argument("-B", "--no-buildid", action="store_true", help="do not write the build-id table")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after SECONDS (else at command exit or Ctrl-C)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    p.add_argument("workload", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS]")


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise errors.PmuscopeError(f"bad {what} list {text!r}: expected numbers separated by commas") from None


def run(args: argparse.Namespace) -> int:
    from ..sampling import Recorder

    command = list(args.workload or [])
    if command and command[0] == "--":
        command = command[1:]
    if sum(map(bool, (command, args.pid, args.tid))) > 1:
        raise errors.PmuscopeError("give a command, -p PID or -t TID, not several")
    freq = None
    if args.freq is not None:
        if args.freq == "max":
            from ..sampling.session import max_sample_rate

            freq = max_sample_rate() or 4000
        else:
            try:
                freq = int(args.freq)
            except ValueError:
                freq = 0
            if freq <= 0:
                raise errors.PmuscopeError(f"-F {args.freq}: the frequency must be a positive number of Hz or 'max'")
    if args.count is not None and args.count <= 0:
        raise errors.PmuscopeError(f"-c {args.count}: the period must be positive")
    events = ",".join(args.event) or None
    rec = Recorder(
        events,
        freq=freq,
        period=args.count,
        callgraph=args.call_graph or args.callgraph,
        pid=_ints(args.pid, "PID"),
        tid=_ints(args.tid, "TID"),
        cpus=args.cpu,
        system_wide=args.all_cpus,
        cmd=command or None,
        output=args.output,
        mmap_pages=args.mmap_pages,
        inherit=False if args.no_inherit else None,
        build_ids=not args.no_buildid,
        argv=["pmuscope", "record", *sys.argv[2:]] if len(sys.argv) > 1 and sys.argv[1] == "record" else None,
    )
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        rec.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rec.start()
        for note in rec.notes:
            print(f"pmuscope record: note: {note}", file=sys.stderr)
        result = rec.run(args.duration)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if not args.quiet:
        print(result.summary(), file=sys.stderr)
        if result.lost or result.lost_samples:
            print(f"pmuscope record: warning: {result.lost + result.lost_samples} samples were lost "
                  f"(ring buffers full); try -m {rec.mmap_pages * 4} or a lower -F", file=sys.stderr)
    if result.exit_status is not None and not interrupted:
        return result.exit_status
    return 0
