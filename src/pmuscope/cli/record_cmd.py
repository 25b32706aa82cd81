"""``pmuscope record``: sample a command, processes, threads or CPUs into a
perf.data file that Linux ``perf report``/``perf script`` read."""

from __future__ import annotations

import argparse
import sys
import time

from .. import errors
from ._recording import exit_status, run_recorder

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
                   "copies that report/script unwind with DWARF CFI, for code without frame pointers)")
    p.add_argument("-p", "--pid", metavar="PID[,PID]", help="attach to processes (all their threads)")
    p.add_argument("-t", "--tid", metavar="TID[,TID]", help="attach to threads (no inheritance, like perf)")
    p.add_argument("-a", "--all-cpus", action="store_true", help="system-wide: every CPU")
    p.add_argument("-C", "--cpu", metavar="LIST", help="system-wide on these CPUs (0-3,6)")
    p.add_argument("-o", "--output", default="perf.data", metavar="FILE", help="output file (default perf.data)")
    p.add_argument("-m", "--mmap-pages", type=int, metavar="PAGES", help="data pages per ring buffer (power of two; default 128)")
    p.add_argument("-i", "--no-inherit", action="store_true", help="do not follow child tasks")
    p.add_argument("-B", "--no-buildid", action="store_true", help="do not write the build-id table")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after SECONDS (else at command exit or Ctrl-C)")
    p.add_argument("-k", "--clockid", metavar="CLOCK", help="sample time stamps from this clock (perf record -k): "
                   "monotonic (1), monotonic_raw, realtime, boottime, tai or a number; with monotonic, Python <= 3.11 "
                   "also writes a jitdump for perf inject --jit")
    p.add_argument("--no-python-frames", action="store_true",
                   help="do not name Python functions: by default CPython processes the command starts get "
                   "per-function trampolines named in /tmp/perf-PID.map (py::QUALNAME:FILE; 3.12+: -X perf)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    push = p.add_argument_group("pushing to a continuous-profiling back end")
    push.add_argument("--push", metavar="URL", help="after recording, send the profile (pprof) to a Pyroscope-"
                      "compatible server (URL/ingest); a failed push is a warning, not an error")
    push.add_argument("--app", default="pmuscope", metavar="NAME", help="--push: application name (default pmuscope)")
    push.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                      help="--push: extra label (repeatable); service_name, host and event are set by default")
    push.add_argument("--push-timeout", type=float, default=30.0, metavar="SECONDS",
                      help="--push: give up (drop with a warning) after this long (default 30)")
    p.add_argument("workload", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS]")


#: perf's clock names (tools/perf/builtin-record.c clockids[])
_CLOCKS = {"monotonic": 1, "mono": 1, "monotonic_raw": 4, "raw": 4, "realtime": 0, "real": 0,
           "boottime": 7, "boot": 7, "tai": 11}


def _clockid(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.lower()
    if t.startswith("clock_"):
        t = t[6:]
    if t in _CLOCKS:
        return _CLOCKS[t]
    try:
        return int(t)
    except ValueError:
        raise errors.PmuscopeError(f"-k {text!r}: unknown clock; use monotonic, monotonic_raw, realtime, boottime, "
                                   "tai or a clock number") from None


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
    if not 0 < args.push_timeout <= 86_400:
        raise errors.PmuscopeError(f"--push-timeout {args.push_timeout}: must be a positive number of seconds")
    if args.mmap_pages is not None and not 1 <= args.mmap_pages <= 1 << 20:
        raise errors.PmuscopeError(f"-m {args.mmap_pages}: expected a power of two of data pages (1..1048576)")
    user_labels = _push_labels(args) if args.push else {}
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
        python_frames=not args.no_python_frames,
        clockid=_clockid(args.clockid),
        argv=["pmuscope", "record", *sys.argv[2:]] if len(sys.argv) > 1 and sys.argv[1] == "record" else None,
    )
    started = time.time()
    result, interrupted = run_recorder(rec, args.duration, "pmuscope record")
    if not args.quiet:
        print(result.summary(), file=sys.stderr)
        if result.lost or result.lost_samples:
            print(f"pmuscope record: warning: {result.lost + result.lost_samples} samples were lost "
                  f"(ring buffers full); try -m {rec.mmap_pages * 4} or a lower -F", file=sys.stderr)
    if args.push:
        # the file is complete: pushing cannot disturb the recording, and its
        # outcome never changes the exit status
        _push(args, result, user_labels, started, time.time())
    return exit_status(result, interrupted)


def _push_labels(args: argparse.Namespace) -> dict[str, str]:
    """Check --push/--app/--label before recording; the user's labels."""
    import urllib.parse

    from ..export.push import app_name

    from ..export.push import check_push_url

    check_push_url(args.push)
    if args.output == "-":
        raise errors.PmuscopeError("--push needs a perf.data file to read back: use -o FILE, not -o -")
    if not 0 < args.push_timeout <= 86_400:
        raise errors.PmuscopeError(f"--push-timeout {args.push_timeout}: must be a positive number of seconds")
    labels = {}
    for item in args.label:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise errors.PmuscopeError(f"--label {item!r}: expected KEY=VALUE")
        labels[k] = v
    app_name(args.app, labels)  # label names and values Pyroscope accepts
    return labels


def _push(args: argparse.Namespace, result, user_labels: dict[str, str], start: float, end: float) -> bool:
    """Send the recorded file's pprof with retries; a one-line warning (with
    the drop count) when it could not be delivered. True when delivered."""
    import logging
    import os
    import re

    from ..export.files import load, push_once

    from ..export.push import redact_url

    prog = "pmuscope record"
    shown = redact_url(args.push)
    if not result.samples:
        print(f"{prog}: warning: nothing pushed to {shown}: no samples were recorded", file=sys.stderr)
        return False
    quiet_log = logging.NullHandler()  # the warning below is the one line; no second one from the pusher's log
    log = logging.getLogger("pmuscope.export.push")
    log.addHandler(quiet_log)
    try:
        ep, event_label = load(args.output)
        # label values cannot hold , { } = (Pyroscope's name{k=v,...} syntax): cycles,instructions -> cycles+instructions
        event_label = re.sub(r"[{}=]", "_", event_label.replace(",", "+"))
        labels = {"service_name": args.app, "host": os.uname().nodename, "event": event_label, **user_labels}
        stats = push_once(ep, args.push, args.app, labels, start=start, end=end, timeout=args.push_timeout)
    except errors.PmuscopeError as err:
        print(f"{prog}: warning: the profile was not pushed to {shown}: {err}", file=sys.stderr)
        return False
    except KeyboardInterrupt:
        print(f"{prog}: warning: push to {shown} interrupted; {args.output} is complete", file=sys.stderr)
        return False
    finally:
        log.removeHandler(quiet_log)
    if stats.sent != 1:
        print(f"{prog}: warning: the profile was not delivered to {stats.url} ({stats.last_error}; "
              f"{stats.retries} retries); {stats.dropped} dropped, {args.output} is complete", file=sys.stderr)
        return False
    if not args.quiet:
        print(f"{prog}: pushed {args.output} to {stats.url} as {args.app} ({stats.retries} retries)", file=sys.stderr)
    return True
