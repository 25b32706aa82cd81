"""``pmuscope script``: one line per sample like perf script, call chains below."""

from __future__ import annotations

import argparse
import os
import sys

from .. import errors

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


#: samples ``script`` lets wait before resolving the rounds that hold them in one step
ROUND_SAMPLES = 16384


def _round_samples() -> int:
    v = os.environ.get("PMUSCOPE_SCRIPT_ROUND_SAMPLES")
    if v is None:
        return ROUND_SAMPLES
    try:
        return max(int(v), 0)
    except ValueError:
        return ROUND_SAMPLES


def run(args: argparse.Namespace) -> int:
    import itertools

    from ..profile.model import iter_profile_chunks, join_chunks
    from ..profile.script import ScriptFormatter, parse_fields
    from .report_cmd import apply_filters, unwind_note

    fields = parse_fields(args.fields)
    from .report_cmd import _time_range

    _time_range(args.time)  # bad options fail before the file is read
    show_chain = not args.hide_call_graph
    # samples are read, formatted and written a chunk at a time: memory holds one
    # chunk's samples and the frame tables, whatever the file's size; -G reads no call chains
    # PMUSCOPE_SCRIPT_STREAM=0: the reference path, the whole profile first (same text)
    reference = os.environ.get("PMUSCOPE_SCRIPT_STREAM", "1") == "0"
    # the text does not depend on the ids of frames and comms: rounds are resolved
    # ROUND_SAMPLES at a time (PMUSCOPE_SCRIPT_ROUND_SAMPLES=0: one by one, as reports)
    rounds = 0 if reference else _round_samples()
    chunks = iter_profile_chunks(args.input, keep_raw=fields is None or "trace" in fields,
                                 kernel_symbols=False if args.no_kernel_symbols else None, itrace=args.itrace,
                                 callchain=show_chain, round_samples=rounds)
    first = next(chunks)
    for field, have in (("cpu", first.has_cpu), ("time", first.has_time)):
        if fields is not None and field in fields and not have and len(first):
            # perf refuses the field too ("Cannot print 'cpu' field")
            ev = first.event_names[int(first.event[0])] if len(first.event_names) else "the"
            raise errors.PmuscopeError(f"-F {field}: the samples of '{ev}' were recorded without "
                                       f"PERF_SAMPLE_{field.upper()}; leave {field} out of -F")
    joined = fields is None and bool(first.tp_formats) or reference
    if joined:  # perf's default fields for tracepoints depend on every sample's event: read them all first
        first = join_chunks([first, *chunks])
        unwind_note(first, "script")
    fmt = ScriptFormatter(fields, callchain=show_chain)
    sys.stdout.flush()
    write = sys.stdout.buffer.write
    last, newest, disordered = first, -1, False
    for prof in itertools.chain((first,), () if joined else chunks):
        last = prof
        if prof.has_time and len(prof.time):
            disordered |= int(prof.time[0]) < newest
            newest = max(newest, int(prof.time[-1]))
        fmt.write(apply_filters(prof, args), write)
    sys.stdout.buffer.flush()
    if not joined:
        unwind_note(last, "script")
    if disordered:
        print("pmuscope script: warning: samples older than some already printed came in a later round; "
              "printed in the order they came", file=sys.stderr)
    return 0
