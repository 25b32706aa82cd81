"""``pmuscope profile``: record a command, print the top of the report, write
a flame graph — the one-shot path."""

from __future__ import annotations

import argparse
import os
import sys

from .. import errors
from ._recording import exit_status, run_recorder

HELP = "record a command with call chains, print its top functions, write an HTML flame graph"
DESCRIPTION = (
    "One shot: sample CMD (or -p PID / -a) with call chains at 4000 Hz, then print the "
    "top of the overhead table and write PREFIX.data (perf.data), PREFIX.folded (folded stacks) and "
    "PREFIX.html (interactive flame graph, no network needed). Call chains come from DWARF unwinding "
    "of user stack copies when the program (or its libpython) is built without frame pointers, "
    "from frame pointers otherwise (--call-graph to choose)."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-e", "--event", action="append", default=[], metavar="EVENTS", help="event list (perf -e syntax)")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("-F", "--freq", type=int, metavar="HZ", help="samples per second (default 4000)")
    rate.add_argument("-c", "--count", type=int, metavar="PERIOD", help="sample every PERIOD events")
    p.add_argument("--no-call-graph", action="store_true", help="no call chains (leaf functions only)")
    p.add_argument("--call-graph", default="auto", metavar="MODE",
                   help="fp, dwarf[,SIZE] or auto (default: dwarf when the program or its libpython keeps no "
                        "frame pointers, else fp)")
    p.add_argument("--no-python-frames", action="store_true",
                   help="do not name Python functions: by default CPython processes the command starts get "
                   "per-function trampolines named in /tmp/perf-PID.map (py::QUALNAME:FILE; 3.12+: -X perf)")
    p.add_argument("-p", "--pid", metavar="PID[,PID]", help="attach to processes instead of running CMD")
    p.add_argument("-a", "--all-cpus", action="store_true", help="record every CPU")
    p.add_argument("-C", "--cpu", metavar="LIST", help="record these CPUs")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after SECONDS")
    p.add_argument("-o", "--output", default="pmuscope-profile", metavar="PREFIX",
                   help="output prefix: PREFIX.data, PREFIX.folded, PREFIX.html (default pmuscope-profile)")
    p.add_argument("-s", "--sort", default="comm,dso,sym", metavar="KEYS", help="report sort keys")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows of the report to print (default 20)")
    p.add_argument("-m", "--mmap-pages", type=int, metavar="PAGES", help="ring buffer data pages (power of two)")
    p.add_argument("workload", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS]")


def run(args: argparse.Namespace) -> int:
    from ..profile import build_report, folded_stacks, format_report, load_profile, parse_sort, write_flamegraph
    from ..profile.folded import format_folded, python_summary
    from ..sampling import Recorder
    from .report_cmd import _ints

    command = list(args.workload or [])
    if command and command[0] == "--":
        command = command[1:]
    pids = _ints(args.pid, "pid")
    if not command and not pids and not (args.all_cpus or args.cpu):
        raise errors.PmuscopeError("nothing to profile: give -- CMD, -p PID or -a")
    if command and pids:
        raise errors.PmuscopeError("give a command or -p PID, not both")
    if args.top < 0:
        raise errors.PmuscopeError(f"--top {args.top}: must be 0 or more rows")
    sort = parse_sort(args.sort)
    prefix = args.output
    data_path, folded_path, html_path = prefix + ".data", prefix + ".folded", prefix + ".html"
    d = os.path.dirname(os.path.abspath(data_path))
    if not os.path.isdir(d):
        import errno as _errno

        from ..outfile import output_error

        raise output_error(FileNotFoundError(_errno.ENOENT, os.strerror(_errno.ENOENT)), data_path)
    callgraph: bool | str = False
    why = None
    if not args.no_call_graph:
        from ..unwind.framepointers import choose_call_graph

        callgraph, why = choose_call_graph(args.call_graph, command, pids, args.all_cpus or bool(args.cpu))
    rec = Recorder(",".join(args.event) or None, freq=args.freq, period=args.count,  # None: 4000 Hz, lowered to the kernel limit
                   callgraph=callgraph, pid=pids, cpus=args.cpu, system_wide=args.all_cpus,
                   cmd=command or None, output=data_path, mmap_pages=args.mmap_pages,
                   python_frames=not args.no_python_frames)
    if why:  # said once the options are known to be good (with the recorder's other notes)
        rec.notes.insert(0, why)
    result, interrupted = run_recorder(rec, args.duration, "pmuscope profile")
    print(result.summary("pmuscope profile"), file=sys.stderr)
    prof = load_profile(data_path)
    rep = build_report(prof, sort, percent_limit=0.0)
    rep.rows, rep.display = rep.rows[:args.top], rep.display[:args.top]
    sys.stdout.write(format_report(rep))
    folded = folded_stacks(prof)
    sys.stdout.write(python_summary(folded, args.top))
    from ..outfile import write_output

    write_output(folded_path, format_folded(folded))
    name = " ".join(command) if command else (f"pid {args.pid}" if pids else "system-wide")
    write_flamegraph(prof, html_path, folded=folded, title=f"pmuscope profile: {name}")
    print(f"pmuscope profile: perf.data  {data_path}  (pmuscope report -i {data_path}; perf report -i {data_path})")
    print(f"pmuscope profile: flame graph {html_path}")
    print(f"pmuscope profile: folded     {folded_path}")
    return exit_status(result, interrupted)
