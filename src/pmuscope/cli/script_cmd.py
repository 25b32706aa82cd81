"""``pmuscope script``: one line per sample like perf script, call chains below."""

from __future__ import annotations

import argparse
import os
import sys

from .. import _lazy, errors

#: numpy is imported by run() only when the numpy path is taken (see _lite_script)
USES_NUMPY = False
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
                   help="comma list of comm,tid,pid,cpu,time,event,ip,sym,dso,period,symoff,trace; or changes to "
                        "the default fields: +name adds, -name removes (-F +cpu,-dso)")
    p.add_argument("-G", "--hide-call-graph", action="store_true", help="do not print call chains")
    p.add_argument("--max-stack", type=int, metavar="N", help="print at most N frames of each call chain "
                   "(innermost first, as perf)")
    p.add_argument("--ns", action="store_true", help="times with nanoseconds")
    tg = p.add_mutually_exclusive_group()
    tg.add_argument("--reltime", action="store_true", help="times since the first sample")
    tg.add_argument("--deltatime", action="store_true", help="times since the sample before")
    hg = p.add_mutually_exclusive_group()
    hg.add_argument("--header", action="store_true", help="print the recording's header first (perf's "
                    "--header: host, kernel, command line, events, features)")
    hg.add_argument("--header-only", action="store_true", help="print the recording's header only")
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


#: the numpy path's own switches: setting one asks for that path (its formatters, its streaming)
_NUMPY_PATH_KNOBS = ("PMUSCOPE_NATIVE_SCRIPT", "PMUSCOPE_SCRIPT_STREAM", "PMUSCOPE_SCRIPT_ROUND_SAMPLES")


def _lite_script(args: argparse.Namespace, fields, *, strict: bool = False) -> bytes | None:
    """The text of the numpy-free path (:func:`pmuscope.profile.lite.script`)
    for a small file without call chains, or None: that path declined (the
    numpy path, the reference, runs then; always with ``PMUSCOPE_SCRIPT_LITE=0``
    or one of the numpy path's own switches set). ``strict`` (tests): an error
    other than the path's own ``Decline`` is raised."""
    from ..profile import lite_candidate

    if not lite_candidate(args.input):
        return None  # a large file, a pipe, standard input: the numpy path (lite not imported)
    from ..profile import lite

    if not lite.script_enabled() or any(k in os.environ for k in _NUMPY_PATH_KNOBS):
        return None
    if args.itrace or args.input == "-" or args.max_stack is not None or args.ns or args.reltime or \
            args.deltatime or args.header or args.header_only:
        return None
    from .report_cmd import run_lite

    return run_lite(args, lambda **filters: lite.script(args.input, fields, **filters), strict=strict)


def run(args: argparse.Namespace) -> int:
    from ..profile.script_fields import parse_fields
    from .report_cmd import _time_range, header_text, open_input

    fields = parse_fields(args.fields)
    _time_range(args.time)  # bad options fail before the file is read
    if args.max_stack is not None and args.max_stack < 0:
        raise errors.PmuscopeError(f"--max-stack {args.max_stack}: expected a number of frames >= 0")
    text = _lite_script(args, fields)
    if text is not None:
        sys.stdout.flush()
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
        return 0
    if not (args.header or args.header_only):
        return _run(args, fields, args.input)
    pf = open_input(args.input)
    try:
        sys.stdout.write(header_text(pf, only=args.header_only))
        return 0 if args.header_only else _run(args, fields, pf)
    finally:
        pf.close()


def _run(args: argparse.Namespace, fields, source) -> int:
    _lazy.numpy(one_blas_thread=True)  # as the CLI imported it when every script took this path

    from ..profile.model import iter_profile_chunks, join_chunks
    from ..profile.script import FieldChanges, ScriptFormatter
    from .report_cmd import apply_filters, unwind_note

    changes = isinstance(fields, FieldChanges)
    named = None if changes or fields is None else set(fields)  # fields the user named outright
    show_chain = not args.hide_call_graph
    # samples are read, formatted and written a chunk at a time: memory holds one
    # chunk's samples and the frame tables, whatever the file's size; -G reads no call chains
    # PMUSCOPE_SCRIPT_STREAM=0: the reference path, the whole profile first (same text)
    reference = os.environ.get("PMUSCOPE_SCRIPT_STREAM", "1") == "0"
    # the text does not depend on the ids of frames and comms: rounds are resolved
    # ROUND_SAMPLES at a time (PMUSCOPE_SCRIPT_ROUND_SAMPLES=0: one by one, as reports)
    rounds = 0 if reference else _round_samples()
    chunks = iter_profile_chunks(source, keep_raw=named is None or "trace" in named,
                                 kernel_symbols=False if args.no_kernel_symbols else None, itrace=args.itrace,
                                 callchain=show_chain, round_samples=rounds)
    first = next(chunks)
    asked = named if named is not None else {f for op, f in fields if op == "+"} if changes else set()
    for field, have in (("cpu", first.has_cpu), ("time", first.has_time)):
        if field in asked and not have and len(first):
            # perf refuses the field too ("Cannot print 'cpu' field")
            ev = first.event_names[int(first.event[0])] if len(first.event_names) else "the"
            raise errors.PmuscopeError(f"-F {field}: the samples of '{ev}' were recorded without "
                                       f"PERF_SAMPLE_{field.upper()}; leave {field} out of -F")
    joined = named is None and bool(first.tp_formats) or reference
    if joined:  # perf's default fields for tracepoints depend on every sample's event: read them all first
        first = join_chunks([first, *chunks])
        unwind_note(first.unwind_stats, "script")
    fmt = ScriptFormatter(fields, callchain=show_chain, ns=args.ns)
    sys.stdout.flush()
    write = sys.stdout.buffer.write
    stats, newest, disordered = first.unwind_stats, -1, False
    base = None  # --reltime: the first sample's time; --deltatime: the time of the sample before
    pieces = _handed_on([first], () if joined else chunks)
    del first  # each chunk is let go before the next one is built
    for prof in pieces:
        stats = prof.unwind_stats
        if prof.has_time and len(prof.time):
            disordered |= int(prof.time[0]) < newest
            newest = max(newest, int(prof.time[-1]))
        prof = apply_filters(prof, args)
        if args.max_stack is not None and prof.has_callchain:
            prof.stack, prof.stack_offsets = prof.chains(order="callee", max_stack=args.max_stack)
        if (args.reltime or args.deltatime) and prof.has_time and len(prof.time):
            prof.time, base = _shifted_times(prof.time, base, args.deltatime)
        fmt.write(prof, write)
        del prof
    sys.stdout.buffer.flush()
    if not joined:
        unwind_note(stats, "script")
    if disordered:
        print("pmuscope script: warning: samples older than some already printed came in a later round; "
              "printed in the order they came", file=sys.stderr)
    return 0


def _handed_on(box: list, rest):
    """The item in ``box``, then those of ``rest``, holding none once handed on
    (``itertools.chain((first,), rest)`` keeps ``first`` to the end)."""
    yield box.pop()
    yield from rest


def _shifted_times(t, base, delta: bool):
    """``--reltime``: times since the first sample; ``--deltatime``: since the
    sample before (the first: 0). Returns the new times and what the next
    chunk is measured from."""
    import numpy as np

    t = t.astype(np.uint64, copy=False)
    if not delta:
        base = int(t[0]) if base is None else base
        return t - np.minimum(t, np.uint64(base)), base
    prev = np.empty_like(t)
    prev[0] = t[0] if base is None else min(int(t[0]), base)
    prev[1:] = np.minimum(t[:-1], t[1:])
    return t - prev, int(t[-1])
