"""``pmuscope attr EVENTS [--json]``: the perf_event_attr(s) an event string
resolves to, every field by its kernel name, with perf stat's counting
defaults applied (the user-facing form of the perf oracle test)."""

from __future__ import annotations

import argparse
import json
import os

from ..errors import PmuscopeError
from ..events import parse_events, stat_defaults
from ..events.attr_text import format_attr
from ..kernel.abi import ATTR_FIELD_NAMES

#: leaves no file open and no thread running: the CLI may end the process without interpreter teardown
FAST_EXIT = True
HELP = "print the perf_event_attr an event string resolves to (perf stat defaults applied)"
DESCRIPTION = (
    "Resolve EVENTS (perf -e syntax) and print each perf_event_attr field by its kernel name. "
    "Counting defaults are applied the way perf stat applies them (read_format, disabled, inherit, "
    "enable_on_exec, exclude_guest); --raw shows the parsed attr without them. The text is perf -vv's "
    "layout (non-zero fields, flag names, bp_addr/bp_len for breakpoints), followed by why the event "
    "cannot open here when it cannot; --all lists every field by its own name."
)

_HEX = {"config", "config1", "config2", "config3", "sample_type", "read_format", "branch_sample_type", "sig_data",
        "sample_regs_user", "sample_regs_intr"}  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("events", metavar="EVENTS", help="event list, e.g. 'cycles:u,{cpu-clock,task-clock}'")
    parser.add_argument("--json", action="store_true", help="a JSON array, one object of integer fields per event")
    parser.add_argument("--raw", action="store_true", help="the attr as parsed, without perf stat's counting defaults")
    parser.add_argument("--nonzero", action="store_true", help="with --all: only fields that are not zero")
    parser.add_argument("--all", dest="all_fields", action="store_true",
                        help="text output: every field by its own name (default: perf -vv's layout, non-zero fields)")
    parser.add_argument("--no-probe", action="store_true", help="do not try to open the event on this machine")
    parser.add_argument("--no-enable-on-exec", action="store_true", help="as for an existing pid/CPU target (no workload launched)")
    parser.add_argument("--sysfs", default="/sys", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--events-dir", metavar="DIR", help="perf pmu-events JSON tree (default: $PMUSCOPE_EVENTS_DIR)")


def attrs_for(text: str, *, raw: bool = False, enable_on_exec: bool = True, sysfs_root: str = "/sys", vendor_tables=None):
    """``[(EventSpec, perf_event_attr)]`` as ``pmuscope attr`` shows them."""
    specs = parse_events(text, sysfs_root=sysfs_root, vendor_tables=vendor_tables)
    return [(s, s.attr.copy() if raw else stat_defaults(s, enable_on_exec=enable_on_exec)) for s in specs]


def _open_problem(spec, attr, existing_target: bool) -> str | None:
    """None when the event opens on this machine (as perf stat would open it:
    the calling thread, any CPU; a CPU-bound PMU on its first CPU), else why not."""
    from ..kernel.syscall import PerfEventFd

    pid, cpu = (-1, spec.cpus[0]) if spec.cpus else (0, -1)
    try:
        PerfEventFd(attr.copy(), pid, cpu, event=spec.name).close()
    except PmuscopeError as err:
        return str(err).splitlines()[0]
    except OSError as err:
        return f"{spec.name}: {os.strerror(err.errno or 0)}"
    return None


def run(args: argparse.Namespace) -> int:
    if args.events_dir and not os.path.isdir(args.events_dir):
        raise PmuscopeError(f"--events-dir {args.events_dir}: no such directory")
    pairs = attrs_for(
        args.events,
        raw=args.raw,
        enable_on_exec=not args.no_enable_on_exec,
        sysfs_root=args.sysfs,
        vendor_tables=args.events_dir or None,
    )
    if args.json:
        rows = [json.dumps({k: int(getattr(attr, k)) for k in ATTR_FIELD_NAMES}) for _, attr in pairs]
        print("[\n " + ",\n ".join(rows) + "\n]")
        return 0
    for n, (spec, attr) in enumerate(pairs):
        if n:
            print()
        where = [f"pmu {spec.pmu}"] if spec.pmu else []
        if spec.group is not None:
            where.append(f"group {spec.group} {'leader' if spec.leader else 'member'}")
        if spec.unit:
            where.append(f"scale {spec.scale:g} {spec.unit}")
        if spec.cpus:
            where.append(f"cpus {','.join(map(str, spec.cpus))}")
        print(f"# {spec.name}" + (f"  ({'; '.join(where)})" if where else ""))
        if not args.all_fields:
            print(format_attr(attr), end="")
            if not args.no_probe and args.sysfs == "/sys":
                reason = _open_problem(spec, attr, args.no_enable_on_exec)
                if reason:
                    print(f"# cannot open here: {reason}")
            continue
        for key in ATTR_FIELD_NAMES:
            value = int(getattr(attr, key))
            if args.nonzero and not value:
                continue
            shown = f"{value:#x}" if key in _HEX else str(value)
            print(f"  {key:<26} {shown}")
    return 0
