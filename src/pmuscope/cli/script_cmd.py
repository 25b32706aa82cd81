"""``pmuscope script``: one line per sample like perf script, call chains below."""

from __future__ import annotations

import argparse
import sys

USES_NUMPY = True
#: leaves no file open and no thread running: the CLI may end the process without interpreter teardown
FAST_EXIT = True
HELP = "samples of a perf.data file as text like perf script (-F fields, -G)"
DESCRIPTION = (
    "Print every sample of a perf.data file like perf script: comm, tid, [cpu], time, period, "
    "event, ip sym+off (dso); call chains one frame a line below each sample when recorded."
)


def configure(p: argparse.ArgumentParser) -> None:
    from .report_cmd import add_filter_options

    p.add_argument("-i", "--input", default="perf.data", metavar="FILE", help="perf.data file ('-' for stdin)")
    p.add_argument("--itrace", metavar="OPTS", default=None,
                   help="Arm SPE: events to synthesize, perf's letters (f m t b a M, i1i; default: all but i)")
    p.add_argument("-F", "--fields", metavar="FIELDS",
                   help="comma list of comm,tid,pid,cpu,time,event,ip,sym,dso,period,symoff,trace")
    p.add_argument("-G", "--hide-call-graph", action="store_true", help="do not print call chains")
    p.add_argument("--no-kernel-symbols", action="store_true", help="do not name kernel addresses from /proc/kallsyms")
    add_filter_options(p)


def run(args: argparse.Namespace) -> int:
    from ..profile import iter_script_bytes, load_profile, parse_fields
    from .report_cmd import apply_filters, unwind_note

    fields = parse_fields(args.fields)
    from .report_cmd import _time_range

    _time_range(args.time)  # bad options fail before the file is read
    prof = load_profile(args.input, keep_raw=fields is None or "trace" in fields,
                        kernel_symbols=False if args.no_kernel_symbols else None, itrace=args.itrace)
    unwind_note(prof, "script")
    prof = apply_filters(prof, args)
    sys.stdout.flush()
    write = sys.stdout.buffer.write
    for chunk in iter_script_bytes(prof, fields, callchain=not args.hide_call_graph):
        write(chunk)
    sys.stdout.buffer.flush()
    return 0
