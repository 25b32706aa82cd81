"""`pmuscope numatop`: numatop's NUMA-locality view — a live terminal UI, or
tables for scripts (``--once --json``/``--csv``, ``-I`` streaming)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from typing import Any

from ..errors import PmuscopeError

HELP = "NUMA locality per node, process and thread (numatop): live UI, --once --json/--csv, -I stream"
DESCRIPTION = (
    "numatop's view: per node and per process CPU%, RMA/LMA, RMA/LMA ratio, CPI, RPI/LPI and per-node memory. "
    "Counts are charged to threads exactly at context switches. Columns this machine cannot measure are null/n/a "
    "with the reason listed under 'unavailable'."
)

CSV_COLUMNS = ("interval", "table", "node", "pid", "comm", "cpus", "cpu_pct", "rma", "lma", "rma_lma", "cpi", "rpi",
               "lpi", "migrations", "minflt", "majflt", "mem_kb", "mem_total_kb", "mem_free_kb", "imc_mb_s", "upi_mb_s")
#: with --threads: one more column, appended so the others keep their positions
CSV_THREAD_COLUMNS = CSV_COLUMNS + ("tid",)


def csv_columns(threads: bool, windows: bool = False) -> tuple[str, ...]:
    """The CSV header: ``tid`` (and ``table=thread`` rows) only with --threads,
    and the per-process window columns only with -p, so the output without
    them stays what scripts already read."""
    cols = CSV_THREAD_COLUMNS if threads else CSV_COLUMNS
    if windows:
        from ..numa.process_windows import CSV_WINDOW_COLUMNS

        cols = cols + tuple(c for c in CSV_WINDOW_COLUMNS if c not in cols)
    return cols


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-d", "--delay", type=float, default=None, metavar="SECONDS",
                        help="refresh interval (default 5, numatop's; 1 with --once)")
    parser.add_argument("-t", "--time", type=float, default=None, metavar="SECONDS", help="run for this long, then exit")
    parser.add_argument("--once", action="store_true", help="print one interval and exit")
    parser.add_argument("-I", "--stream", action="store_true", help="print every interval (JSON lines or CSV rows)")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="JSON (one object per interval)")
    fmt.add_argument("--csv", action="store_true",
                     help="CSV: one row per node and process, 'table' says which; "
                          "with --threads also 'thread' rows and a last 'tid' column")
    parser.add_argument("--node", type=int, default=None, metavar="N", help="only processes that ran on (or hold memory on) node N")
    parser.add_argument("--sort", default="cpu_pct", metavar="COLUMN", help="sort processes by this column (default cpu_pct)")
    parser.add_argument("--ascending", action="store_true", help="sort ascending")
    parser.add_argument("--top", type=int, default=None, metavar="N", help="keep the first N processes")
    parser.add_argument("--all", action="store_true", help="include processes that did not run in the interval")
    parser.add_argument("--threads", action="store_true",
                        help="also report every thread of the shown processes (numatop's thread view): JSON 'threads', "
                             "each with its per-node 'by_node'; CSV rows with table=thread")
    parser.add_argument("-p", "--pid", type=int, default=None, metavar="PID",
                        help="only this process, with its memory_areas, node_latency and call_chains (numatop's "
                             "WIN6/7/9) in --json/--csv")
    parser.add_argument("--no-pmu", action="store_true", help="no hardware events (software side-band and procfs only)")
    parser.add_argument("--no-switches", action="store_true", help="no perf events at all (procfs only)")


def _select(snap, args: argparse.Namespace, nodes) -> dict[str, Any]:
    from ..numa.snapshot import attach_memory, select_rows

    d = snap.to_dict()
    rows = d["processes"] if args.all else [r for r in d["processes"] if (r["cpu_pct"] or 0) > 0 or args.node is not None]
    if args.node is not None or args.sort.startswith("mem"):
        attach_memory(rows, nodes)  # the filter/sort needs everyone's placement
    if getattr(args, "pid", None) is not None:
        rows = [r for r in d["processes"] if r["pid"] == args.pid]
    d["processes"] = select_rows(rows, sort=args.sort, top=args.top, node=args.node, nodes=nodes,
                                 descending=not args.ascending)
    if args.node is None and not args.sort.startswith("mem"):
        attach_memory(d["processes"], nodes)
    if args.threads:
        tids = {r["pid"] for r in d["processes"]}
        d["threads"] = select_rows([t for t in d["threads"] if t["pid"] in tids], sort="cpu_pct")
    else:
        d.pop("threads", None)
    if args.node is not None:
        d["filter"] = {"node": args.node}
    return d


def _csv_rows(d: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """Node rows, process rows, then (when ``d`` has them) thread rows in the
    order of the JSON ``threads`` list; cells a row kind lacks stay empty."""
    columns = csv_columns("threads" in d)
    out = []
    for n in d["nodes"]:
        row = {k: n.get(k) for k in columns if k in n}
        row.update(interval=index, table="node", cpus=" ".join(map(str, n["cpus"])))
        out.append(row)
    for p in d["processes"]:
        row = {k: p.get(k) for k in columns if k in p}
        row.update(interval=index, table="process")
        out.append(row)
    for t in d.get("threads", ()):
        row = {k: t.get(k) for k in columns if k in t}
        row.update(interval=index, table="thread")
        out.append(row)
    return out


def _fmt(v: Any, spec: str = ".2f") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def render_text(d: dict[str, Any]) -> str:
    """numatop's home window as plain text (RMA/LMA in thousands, like numatop)."""
    lines = [f"interval {d['interval_s']:.2f}s  platform {d['platform']}"]
    from ..numa.snapshot import group_reasons

    for why, cols in group_reasons(d["unavailable"]):
        lines.append(f"  n/a {', '.join(cols)}: {why}")
    lines.append(f"{'NODE':>4} {'CPU%':>7} {'MEM.ALL(G)':>10} {'MEM.FREE(G)':>11} {'RMA(K)':>10} {'LMA(K)':>10} {'RMA/LMA':>8} {'CPI':>6}")
    k = lambda v: None if v is None else v / 1000  # noqa: E731
    g = lambda v: None if v is None else v / 2**20  # noqa: E731
    for n in d["nodes"]:
        lines.append(f"{n['node']:>4} {_fmt(n['cpu_pct'], '.1f'):>7} {_fmt(g(n['mem_total_kb'])):>10} {_fmt(g(n['mem_free_kb'])):>11} "
                     f"{_fmt(k(n['rma']), '.1f'):>10} {_fmt(k(n['lma']), '.1f'):>10} {_fmt(n['rma_lma']):>8} {_fmt(n['cpi']):>6}")
    lines.append("")
    lines.append(f"{'PID':>8} {'PROC':<16} {'RMA(K)':>10} {'LMA(K)':>10} {'RMA/LMA':>8} {'CPI':>6} {'*CPU%':>7} {'MEM(M)':>8}")
    for p in d["processes"]:
        mem = None if p.get("mem_kb") is None else p["mem_kb"] / 1024
        lines.append(f"{p['pid']:>8} {p['comm'][:16]:<16} {_fmt(k(p['rma']), '.1f'):>10} {_fmt(k(p['lma']), '.1f'):>10} "
                     f"{_fmt(p['rma_lma']):>8} {_fmt(p['cpi']):>6} {_fmt(p['cpu_pct'], '.1f'):>7} {_fmt(mem, '.1f'):>8}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.pid is not None and args.pid <= 0:
        raise PmuscopeError(f"-p {args.pid}: expected a process id (a positive number)")
    try:
        return _run(args)
    except KeyError as err:
        raise PmuscopeError(f"--node: {err.args[0]}") from None


def _run(args: argparse.Namespace) -> int:
    from ..numa.snapshot import NumaSampler

    if args.delay is not None and not 0 < args.delay <= 86_400:
        raise PmuscopeError(f"-d needs a positive number of seconds, not {args.delay}")
    if args.time is not None and not 0 < args.time <= 10 * 365 * 86_400:
        raise PmuscopeError(f"-t needs a positive number of seconds, not {args.time}")
    if args.top is not None and args.top < 0:
        raise PmuscopeError(f"--top {args.top}: must be 0 or more processes")
    if args.node is not None and args.node < 0:
        raise PmuscopeError(f"--node {args.node}: expected a NUMA node number (0 or more)")
    scripted = args.once or args.stream or args.json or args.csv
    if not scripted:
        from ..tui.numatop_app import run_app

        return run_app(delay=args.delay or 5.0, run_time=args.time, pmu=not args.no_pmu, switches=not args.no_switches,
                       node=args.node, sort=args.sort, top=args.top)
    delay = args.delay if args.delay is not None else (1.0 if args.once or args.stream else 5.0)
    with NumaSampler(pmu=not args.no_pmu, switches=not args.no_switches, threads=args.threads,
                     memory=False) as sampler:
        if args.node is not None:
            sampler.nodeset.node(args.node)  # KeyError names the online nodes
        deadline = None if args.time is None else time.monotonic() + args.time
        header = False
        index = 0
        try:
            while True:
                time.sleep(delay)
                snap = sampler.refresh()
                d = _select(snap, args, sampler.nodeset.nodes)
                if args.pid is not None:
                    from ..numa.process_windows import process_windows

                    d.update(process_windows(args.pid, sampler.platform, sampler.nodeset.cpus, duration=delay))
                if args.csv:
                    buf = io.StringIO()
                    writer = csv.DictWriter(buf, csv_columns(args.threads, args.pid is not None))
                    if not header:
                        writer.writeheader()
                        header = True
                    writer.writerows(_csv_rows(d, index))
                    if args.pid is not None:
                        from ..numa.process_windows import csv_rows

                        writer.writerows(csv_rows(d, index))
                    if index == 0:
                        for col, why in d["unavailable"].items():
                            buf.write(f"# unavailable {col}: {why}\n")
                    sys.stdout.write(buf.getvalue())
                elif args.json:
                    sys.stdout.write(json.dumps(d, indent=None if args.stream else 2) + "\n")
                else:
                    sys.stdout.write(render_text(d) + "\n\n")
                sys.stdout.flush()
                index += 1
                if args.once or not args.stream and deadline is None:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except KeyboardInterrupt:
            pass
    return 0
