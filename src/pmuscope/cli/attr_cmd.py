"""``pmuscope attr EVENTS [--json]``: the perf_event_attr(s) an event string
resolves to, every field by its kernel name, with perf stat's counting
defaults applied (the user-facing form of the perf oracle test)."""

from __future__ import annotations

import argparse
import json
import os

from ..errors import PmuscopeError
from ..events import parse_events, stat_defaults
from ..kernel.abi import ATTR_FIELD_NAMES

HELP = "print the perf_event_attr an event string resolves to (perf stat defaults applied)"
DESCRIPTION = (
    "Resolve EVENTS (perf -e syntax) and print each perf_event_attr field by its kernel name. "
    "Counting defaults are applied the way perf stat applies them (read_format, disabled, inherit, "
    "enable_on_exec, exclude_guest); --raw shows the parsed attr without them."
)

_HEX = {"config", "config1", "config2", "config3", "sample_type", "read_format", "branch_sample_type", "sig_data",
        "sample_regs_user", "sample_regs_intr"}  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("events", metavar="EVENTS", help="event list, e.g. 'cycles:u,{cpu-clock,task-clock}'")
    parser.add_argument("--json", action="store_true", help="a JSON array, one object of integer fields per event")
    parser.add_argument("--raw", action="store_true", help="the attr as parsed, without perf stat's counting defaults")
    parser.add_argument("--nonzero", action="store_true", help="text output: only fields that are not zero")
    parser.add_argument("--no-enable-on-exec", action="store_true", help="as for an existing pid/CPU target (no workload launched)")
    parser.add_argument("--sysfs", default="/sys", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--events-dir", metavar="DIR", help="perf pmu-events JSON tree (default: $PMUSCOPE_EVENTS_DIR)")


def attrs_for(text: str, *, raw: bool = False, enable_on_exec: bool = True, sysfs_root: str = "/sys", vendor_tables=None):
    """``[(EventSpec, perf_event_attr)]`` as ``pmuscope attr`` shows them."""
    specs = parse_events(text, sysfs_root=sysfs_root, vendor_tables=vendor_tables)
    return [(s, s.attr.copy() if raw else stat_defaults(s, enable_on_exec=enable_on_exec)) for s in specs]


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
        for key in ATTR_FIELD_NAMES:
            value = int(getattr(attr, key))
            if args.nonzero and not value:
                continue
            shown = f"{value:#x}" if key in _HEX else str(value)
            print(f"  {key:<26} {shown}")
    return 0
