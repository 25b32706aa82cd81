"""``pmuscope report``: perf report's overhead table from a perf.data file."""

from __future__ import annotations

import argparse
import os
import sys

from .. import _lazy, errors

#: numpy is imported by run() only when the numpy path is taken (see _lite_report)
USES_NUMPY = False
#: leaves no file open and no thread running: the CLI may end the process without interpreter teardown
FAST_EXIT = True
HELP = ("overhead table and call graphs of a perf.data file like perf report (--sort, -g, filters, --json, "
        "--folded, --flamegraph)")
DESCRIPTION = (
    "Read a perf.data file (ours or Linux perf's; file or pipe mode) and print the overhead table: "
    "samples grouped by --sort keys, weighted by sample period like perf. With call chains the "
    "Children column is shown by default, as perf does (--no-children to hide it), and each row's "
    "call graph is drawn under it as perf report --stdio draws it (-g to choose graph, fractal, flat "
    "or folded, its threshold and order; -g none or --no-call-graph to hide it). --json prints "
    "one object {samples, lost, event, rows:[{overhead, samples, <sort keys>}]} (self overhead, "
    "highest first; with --children rows also carry 'children' and are ordered by it; with call chains "
    "each row also has 'callchain': nested {sym, dso, samples, period, percent, children})."
)
CALL_GRAPH_HELP = (
    "call graph under each row, perf's -g: TYPE,MIN[,LIMIT],ORDER,KEY,VALUE in any order, e.g. 'fractal,1', "
    "'caller', 'flat,0.5,callee'. TYPE graph (shares of the total), fractal (shares of the parent), flat, "
    "folded or none; MIN: hide branches below MIN%% (0.5); LIMIT: entries per level; ORDER caller (outermost "
    "first; the default with --children) or callee (the default without); KEY function; VALUE percent, period "
    "or count. -g alone is perf's 'graph,0.5,caller,function,percent'. Drawn by default when the file has call "
    "chains")


def add_filter_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", metavar="PID[,PID]", help="only samples of these processes")
    p.add_argument("--tid", metavar="TID[,TID]", help="only samples of these threads")
    p.add_argument("--comm", metavar="COMM[,COMM]", help="only samples of these command names")
    p.add_argument("--cpu", metavar="LIST", help="only samples taken on these CPUs (0-3,6)")
    p.add_argument("--time", metavar="START,END", help="only samples in this time window (seconds, like perf; "
                                                       "either side may be empty)")


class _CallGraphOption(argparse.Action):
    """Keeps -g, --no-call-graph and --percent-limit in command-line order:
    perf applies them in turn (--percent-limit also sets the call-graph
    threshold, and the later of it and -g's threshold wins)."""

    def __call__(self, parser, namespace, values, option_string=None):
        steps = list(getattr(namespace, "call_graph_steps", None) or [])
        if self.dest == "percent_limit":
            if not 0 <= values <= 100:
                parser.error(f"argument {option_string}: {values:g} is not a percentage (0..100)")
            setattr(namespace, "percent_limit", values)
            steps.append(("percent", values))
        elif option_string == "--no-call-graph":
            steps.append(("g", "none"))
        else:
            steps.append(("g", values))
        setattr(namespace, "call_graph_steps", steps)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input", default="perf.data", metavar="FILE", help="perf.data file ('-' for stdin)")
    p.add_argument("--itrace", metavar="OPTS", default=None,
                   help="Arm SPE: events to synthesize, perf's letters (f m t b a M, i1i; default: all but i)")
    p.add_argument("-s", "--sort", metavar="KEYS", help="sort keys: comm,pid,tid,dso,sym,cpu in any order "
                                                        "(default comm,dso,sym)")
    p.add_argument("--stdio", action="store_true", help="text output (the default when standard output is not a terminal; on a "
                   "terminal the interactive browser opens otherwise)")
    ch = p.add_mutually_exclusive_group()
    ch.add_argument("--children", dest="children", action="store_true", default=None,
                    help="add the Children column: each sample also counts for its callers")
    ch.add_argument("--no-children", dest="children", action="store_false",
                    help="self overhead only")
    p.add_argument("-g", "--call-graph", dest="call_graph_steps", nargs="?", default=None, action=_CallGraphOption,
                   metavar="TYPE,MIN,ORDER", help=CALL_GRAPH_HELP)
    p.add_argument("--no-call-graph", dest="call_graph_steps", nargs=0, action=_CallGraphOption,
                   help="no call graphs (same as -g none)")
    p.add_argument("-G", "--inverted", action="store_true", help="caller-first call graphs (same as -g caller)")
    p.add_argument("--max-stack", type=int, metavar="N", help="use only N frames of each call chain, counted in the "
                   "call graph's order (perf's --max-stack; for the Children column too)")
    p.add_argument("-n", "--show-nr-samples", action="store_true", help="add a Samples column")
    p.add_argument("--percent-limit", type=float, default=0.0, metavar="PCT", action=_CallGraphOption,
                   help="hide rows below PCT percent, and call-graph branches below it (as perf: the later of this "
                        "and -g's threshold counts)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--folded", metavar="FILE", help="also write folded stacks to FILE ('-' for stdout, no table)")
    p.add_argument("--flamegraph", metavar="FILE.html", help="also write an HTML flame graph to FILE.html")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (summary, flame graph, "
                   "top table, per-thread and per-CPU timelines, lost-sample markers)")
    p.add_argument("--no-kernel-symbols", action="store_true", help="do not name kernel addresses from /proc/kallsyms")
    add_filter_options(p)
    p.add_argument("--comms", metavar="COMM[,COMM]", help="only rows of these command names (perf's --comms, like "
                   "--pid/--tid/--dsos/--symbols: percentages stay shares of every sample; one name is shown above "
                   "the table instead of its column)")
    p.add_argument("--dsos", metavar="DSO[,DSO]", help="only rows of these shared objects (name or path)")
    p.add_argument("-S", "--symbols", metavar="SYM[,SYM]", help="only rows of these symbols")
    p.add_argument("--percentage", choices=("absolute", "relative"), default="absolute",
                   help="with --pid/--tid/--comms/--dsos/--symbols: percentages and totals of every sample "
                        "(absolute, perf's default) or of the rows' samples only (relative)")
    gg = p.add_mutually_exclusive_group()
    gg.add_argument("--group", dest="group", action="store_true", default=None,
                    help="the events of a group in one table, a percentage each (the default when the file "
                         "has event groups, as perf)")
    gg.add_argument("--no-group", dest="group", action="store_false", help="a table per event")
    p.add_argument("-q", "--quiet", action="store_true", help="the rows alone: no header and column lines")
    p.add_argument("--stats", action="store_true", help="only the number of records of each type, and of "
                   "samples of each event (perf report --stats)")
    hg = p.add_mutually_exclusive_group()
    hg.add_argument("--header", action="store_true", help="print the recording's header first (host, kernel, "
                    "command line, events, features)")
    hg.add_argument("--header-only", action="store_true", help="print the recording's header only")


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        out = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        out = [-1]
    if any(not 0 <= x < 1 << 22 for x in out):
        raise errors.PmuscopeError(f"--{what} {text!r}: expected {what}s (numbers 0..4194303) separated by commas")
    return out


def _time_range(text: str | None):
    if not text:
        return None
    parts = text.split(",")
    if len(parts) != 2:
        raise errors.PmuscopeError(f"--time {text!r}: expected START,END in seconds (e.g. 1959.9,1960.5 or ,1960)")
    out = []
    for x in parts:
        x = x.strip()
        try:
            out.append(None if not x else int(round(float(x) * 1e9)))
        except ValueError:
            raise errors.PmuscopeError(f"--time {text!r}: {x!r} is not a number of seconds") from None
    return tuple(out)


def subset_filters(args, *, threads: bool = True) -> dict:
    """The --cpu, --time, --comm (and, with ``threads``, --pid/--tid) filters as
    :meth:`Profile.filter` takes them: a subset of the recording (report's
    --pid/--tid filter its rows instead, see :func:`entry_filter`)."""
    cpus = None
    if getattr(args, "cpu", None):
        from ..system import parse_cpulist

        try:
            cpus = parse_cpulist(args.cpu)
        except ValueError as err:
            raise errors.PmuscopeError(f"--cpu {args.cpu!r}: {err}") from None
    comms = [c for c in args.comm.split(",") if c] if getattr(args, "comm", None) else None
    return {"pids": _ints(args.pid, "pid") if threads else None, "tids": _ints(args.tid, "tid") if threads else None,
            "comms": comms, "cpus": cpus, "time_range": _time_range(args.time)}


def apply_filters(p, args, *, threads: bool = True):
    """``p`` with :func:`subset_filters` applied."""
    return p.filter(**subset_filters(args, threads=threads))


def _names(text: str | None) -> list[str] | None:
    return [x for x in (text or "").split(",") if x] or None


def entry_filters(args) -> dict | None:
    """perf report's entry filters (--pid, --tid, --comms, --dsos, --symbols):
    rows of other samples are left out, the totals and percentages stay those
    of every sample (perf's absolute percentages); None when none is given."""
    f = {"pids": _ints(getattr(args, "pid", None), "pid"), "tids": _ints(getattr(args, "tid", None), "tid"),
         "comms": _names(getattr(args, "comms", None)), "dsos": _names(getattr(args, "dsos", None)),
         "syms": _names(getattr(args, "symbols", None))}
    return f if any(v is not None for v in f.values()) else None


def count_by_event(p, whole: dict[int, list[int]]) -> None:
    """Add the samples and period (exact) of each event of ``p`` (one sample a row) to ``whole``."""
    import numpy as np

    from .._np import uniq  # not np.unique: its first plain call imports numpy.ma (~7 ms)

    for e in uniq(p.event).tolist():
        sel = p.event == e
        w = whole.setdefault(e, [0, 0])
        w[0] += int(sel.sum())
        w[1] += int(p.period[sel].sum(dtype=np.uint64))


def _select(p, args, entries: dict | None, whole: dict[int, list[int]]):
    """The samples report's table is built from: the recording's subset
    (--cpu/--time/--comm), then perf's entry filters, counting in ``whole``
    every sample they see first."""
    p = apply_filters(p, args, threads=False)
    if entries is None:
        return p
    count_by_event(p, whole)
    return entry_filter(p, entries)


def entry_filter(p, f: dict):
    """The samples whose thread, comm, leaf DSO (short or long name) and leaf
    symbol pass the entry filters ``f`` (perf's al->filtered)."""
    import numpy as np

    from .._np import isin, uniq

    mask = np.ones(len(p), dtype=bool)
    if f["pids"] is not None:
        mask &= isin(p.pid, np.asarray(f["pids"], dtype=np.int64))
    if f["tids"] is not None:
        mask &= isin(p.tid, np.asarray(f["tids"], dtype=np.int64))
    if f["comms"] is not None:
        want = set(f["comms"])
        mask &= isin(p.comm, np.asarray([i for i, c in enumerate(p.comms) if c in want], dtype=np.int64))
    if f["dsos"] is not None and len(p):
        want = set(f["dsos"])
        d = p.frame_dso[p.leaf].astype(np.int64)
        ok = [x for x in uniq(d).tolist() if x >= 0 and (p.dso_short_name(x) in want or p.dso_name(x) in want)]
        mask &= isin(d, np.asarray(ok, dtype=np.int64))
    if f["syms"] is not None and len(p):
        want = set(f["syms"])
        sy = p.frame_sym[p.leaf].astype(np.int64)
        ok = [x for x in uniq(sy).tolist() if x >= 0 and p.sym_name(x) in want]
        mask &= isin(sy, np.asarray(ok, dtype=np.int64))
    return p if mask.all() else p.select(mask)


def elide(rep, f: dict | None) -> None:
    """perf's one-name filters (``--comms bash``): the column goes, a ``# comm: bash``
    line above the totals says it (util/sort.c get_elide), in column order."""
    if f is None:
        return
    one = {"comm": ("comm", f["comms"]), "dso": ("dso", f["dsos"]), "sym": ("symbol", f["syms"])}
    gone = [k for k in rep.sort if k in one and one[k][1] is not None and len(one[k][1]) == 1]
    if gone and len(gone) < len(rep.sort):
        rep.notes = rep.notes + [f"# {one[k][0]}: {one[k][1][0]}" for k in gone]
        rep.sort = tuple(k for k in rep.sort if k not in gone)


def call_graph_params(args: argparse.Namespace):
    """The call-graph settings of the command line, and whether -g asked for
    a call graph explicitly (perf then refuses a file without call chains)."""
    import dataclasses

    from ..profile.callchain import CallGraphParams, parse_call_graph

    params = CallGraphParams()
    explicit = False
    for kind, value in getattr(args, "call_graph_steps", None) or []:
        if kind == "percent":
            params = dataclasses.replace(params, min_percent=value)
        else:
            params = parse_call_graph(value, params)
            explicit = params.enabled
    if getattr(args, "inverted", False):
        params = dataclasses.replace(params, order="caller")
    if args.max_stack is not None and args.max_stack < 0:
        raise errors.PmuscopeError(f"--max-stack {args.max_stack}: expected a number of frames >= 0")
    return params, explicit


def unwind_note(st, command: str) -> None:
    """One stderr line when dwarf user stacks stopped early (a stack copy too
    short, a pc without CFI ...): how many and why, from a profile's
    ``unwind_stats`` (None: nothing was unwound). Those chains end where the
    unwinding stopped (a short stack copy with perf's ``ffffffffffffffff
    [unknown]`` frame)."""
    if st is not None and st.truncated:
        print(f"pmuscope {command}: {st.summary()}", file=sys.stderr)


def _interactive(args: argparse.Namespace) -> bool:
    """The browser (pmuscope.tui.report_app) when standard output is a
    terminal, no other output was asked for and textual is installed;
    otherwise the text, unchanged."""
    if args.stdio or args.json or args.folded or args.flamegraph or args.html or args.show_nr_samples:
        return False
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        return False
    import importlib.util

    return importlib.util.find_spec("textual") is not None


def _collapsible(args: argparse.Namespace) -> bool:
    """Whether every output asked for is the table (text or JSON), which a
    collapsed profile gives (PMUSCOPE_REPORT_STREAM=0: the reference path,
    every sample held)."""
    if args.html or args.folded or args.flamegraph or _interactive(args):
        return False
    return os.environ.get("PMUSCOPE_REPORT_STREAM", "1") != "0"


def _lite_report(args: argparse.Namespace, sort: tuple[str, ...], *, strict: bool = False) -> str | None:
    """The output of the numpy-free path (:mod:`pmuscope.profile.lite`) for a
    small file and the table's options, or None: that path declined (the
    numpy path, the reference, runs then; ``PMUSCOPE_REPORT_LITE=0`` always).
    ``strict`` (tests): an error other than the path's own ``Decline`` is raised."""
    from ..profile import lite_candidate

    if not lite_candidate(args.input):
        return None  # a large file, a pipe, standard input: the numpy path (lite not imported)
    from ..profile import lite

    if not lite.enabled():
        return None
    if args.itrace or args.html or args.folded or args.flamegraph or args.children or args.inverted or \
            args.max_stack is not None or args.input == "-":
        return None
    if args.pid or args.tid or args.comms or args.dsos or args.symbols or args.header or args.header_only or \
            args.group or args.quiet:
        return None  # perf's entry filters, the header, groups: the numpy path
    if any(kind != "percent" for kind, _ in getattr(args, "call_graph_steps", None) or []):
        return None
    if _interactive(args):
        return None
    return run_lite(args, lambda **filters: lite.report(
        args.input, sort=sort, as_json=args.json, show_samples=args.show_nr_samples,
        percent_limit=args.percent_limit, **filters), strict=strict)


def run_lite(args: argparse.Namespace, call, *, strict: bool = False):
    """``call(**subset filters)`` of the numpy-free path (report's or script's),
    or None when that path declines: its own ``Decline``, a filter the numpy
    path reports (it does, where it always has), or anything unusual such as
    a damaged file (the numpy path reads it). ``strict`` (tests): an error
    other than ``Decline`` is raised."""
    from ..profile import lite

    try:
        filters = subset_filters(args)
    except errors.PmuscopeError:
        return None
    try:
        return call(**filters)
    except lite.Decline:
        return None
    except Exception:  # noqa: BLE001
        if strict:
            raise
        return None


def run(args: argparse.Namespace) -> int:
    from ..profile.report_format import parse_sort

    sort = parse_sort(args.sort)
    _time_range(args.time)  # bad options fail before the file is read
    entries = entry_filters(args)
    text = None if args.header_only or args.stats else _lite_report(args, sort)
    if text is not None:
        sys.stdout.write(text)
        return 0
    pf = open_input(args.input)
    try:
        if args.stats:
            from ..perfdata import stats_lines

            sys.stdout.write("".join(ln + "\n" for ln in stats_lines(pf)))
            return 0
        if args.header_only:
            write_header(pf, only=True)
            return 0
        return _run(args, sort, entries, pf)
    finally:
        pf.close()


def open_input(path: str):
    """The :class:`PerfDataFile` of -i PATH (standard input for ``-``)."""
    from ..perfdata import PerfDataFile

    if path == "-":
        return PerfDataFile(sys.stdin.buffer, name="<stdin>")
    return PerfDataFile(path)


def header_text(pf, *, only: bool = False) -> str:
    """perf's ``--header`` text of ``pf``; ``only`` (``--header-only``): a pipe is
    read to its end first, its features coming as records."""
    from ..perfdata import header_lines

    if only and pf.pipe:
        for _ in pf.records():
            pass
    return "".join(ln + "\n" for ln in header_lines(pf, frame=True))


def write_header(pf, *, only: bool = False) -> None:
    sys.stdout.write(header_text(pf, only=only))


def _run(args: argparse.Namespace, sort: tuple[str, ...], entries: dict | None, pf) -> int:
    from ..perfdata import Feature

    _lazy.numpy(one_blas_thread=True)  # as the CLI imports it for the commands that always need it

    from ..profile.model import load_profile
    from ..profile.report import report_json, reports_by_event
    from ..profile.report_format import iter_format_report

    call_graph, explicit = call_graph_params(args)
    ks = False if args.no_kernel_symbols else None
    whole: dict[int, list[int]] = {}  # event -> [samples, period] of every sample (entry filters)
    if _collapsible(args):
        # the table and call graphs only need each distinct sample once: read the
        # file in chunks and keep those (memory: the distinct samples, not the file)
        from ..profile.collapse import Collapser, keys_for_sort
        from ..profile import model

        col = Collapser(keys_for_sort(sort))
        prof = None
        for chunk in model.iter_profile_chunks(pf, kernel_symbols=ks, itrace=args.itrace,
                                               chunk_samples=model.COLLAPSE_CHUNK_SAMPLES):
            if explicit and not chunk.has_callchain:
                prof = chunk
                break  # refused below, before anything else is read
            col.add(_select(chunk, args, entries, whole))
            del chunk  # not alive while the next one is built
        if prof is None:
            # filtered chunk by chunk; final: the collapsing tables go before the report is built
            prof = col.profile(final=True)
        del col
    else:
        prof = load_profile(pf, kernel_symbols=ks, itrace=args.itrace)
    if explicit and not prof.has_callchain:
        raise errors.PmuscopeError(f"-g: {args.input} has no call chains; record with -g (or leave -g out)")
    unwind_note(prof.unwind_stats, "report")
    if prof.count is None:
        prof = _select(prof, args, entries, whole)
    if args.html:
        from ..profile.html_report import write_report_html
        from ..progress import activity

        with activity("building the HTML report"):
            written = write_report_html(prof, args.html)
        print(f"pmuscope report: HTML report written to {written}", file=sys.stderr)
    folded = None
    if args.folded or args.flamegraph:
        from ..profile.export import folded_stacks, write_flamegraph
        from ..profile.folded import format_folded

        folded = folded_stacks(prof)
    if args.folded:
        text = format_folded(folded)
        if args.folded == "-":
            sys.stdout.write(text)
            return 0
        from ..outfile import write_output

        write_output(args.folded, text)
        print(f"pmuscope report: folded stacks written to {args.folded}", file=sys.stderr)
    if args.flamegraph:
        write_flamegraph(prof, args.flamegraph, folded=folded, title=f"pmuscope: {prof.source}")
        print(f"pmuscope report: flame graph written to {args.flamegraph}", file=sys.stderr)
    kw = {"percent_limit": args.percent_limit, "call_graph": call_graph if call_graph.enabled else None,
          "max_stack": args.max_stack,
          "whole": {e: tuple(v) for e, v in whole.items()} if entries and args.percentage == "absolute" else None}
    if args.json:
        children = bool(args.children)
        reps = reports_by_event(prof, sort, children=children, **kw)
        sys.stdout.write(report_json(reps) + "\n")
        return 0
    children = prof.has_callchain if args.children is None else args.children
    if _interactive(args):
        from ..tui.report_app import run_browser

        return run_browser(prof, sort=sort, children=children, call_graph=kw["call_graph"],
                           percent_limit=args.percent_limit, source=args.input)
    from ..profile.group import groups_of

    groups = groups_of(pf.parsed_feature(Feature.GROUP_DESC), len(prof.event_names))
    if groups and args.group is not False:
        reps = _group_reports(prof, sort, groups, kw, children=children)
    else:  # a group leader's table still says "of events" (evsel->core.nr_members > 1)
        reps = reports_by_event(prof, sort, children=children, members={g.members[0]: len(g.members) for g in groups},
                                **kw)
    # written as it is formatted (a deep call graph's text runs to megabytes): the header,
    # then the tables one blank line apart; perf ends each table with 2 blank lines
    write = sys.stdout.write
    write(header_text(pf) if args.header else "")
    for i, rep in enumerate(reps):
        elide(rep, entries)
        if i:
            write("\n")
        for piece in iter_format_report(rep, show_samples=args.show_nr_samples, lost=i == 0, quiet=args.quiet):
            write(piece)
    if args.quiet:
        write("\n")
    return 0


def _group_reports(prof, sort, groups, kw, *, children: bool = False) -> list:
    """perf's group view: one table per group leader with its members'
    percentages side by side (Children and Self with ``children``), the
    leader's call graphs; an event in no group has its own table (in the
    file's event order)."""
    from .._np import uniq
    from ..profile.group import merge_group
    from ..profile.report import build_report

    present = set(uniq(prof.event).tolist()) if len(prof) else set()
    lead_of = {g.members[0]: g for g in groups}
    member = {e for g in groups for e in g.members}
    whole = kw.get("whole") or {}

    def table(e: int, *, leader: bool = True):
        opts = dict(kw, whole=whole.get(e))
        if not leader:  # a member's rows only give their percentages: the call graphs are the leader's
            opts.update(call_graph=None, percent_limit=0.0)
        return build_report(prof.filter(events=[e]), sort, event=prof.event_names[e], children=children,
                            tie_info=children, **opts)

    out = []
    for e in range(len(prof.event_names)):
        g = lead_of.get(e)
        if g is not None:
            out.append(merge_group([table(m, leader=k == 0) for k, m in enumerate(g.members)], g, prof.event_names,
                                   percent_limit=kw["percent_limit"], children=children))
        elif e not in member and e in present:
            out.append(table(e))
    return out
