"""``pmuscope list [GLOB] [--json] [--probe]``: the events this machine
offers, grouped like ``perf list``; with ``--probe`` each one is opened and
closed to show whether it works here, and why not."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..errors import EventNotSupportedError, InvalidAttrError, PermissionDeniedError, PmuscopeError
from ..events import parse_events
from ..events.defaults import open_fallbacks
from ..events.catalog import GROUPS, EventInfo, has_core_pmu, list_events
from ..kernel import PerfEventFd

#: leaves no file open and no thread running: the CLI may end the process without interpreter teardown
FAST_EXIT = True
HELP = "list the events this machine offers (perf list), optionally probing each"
DESCRIPTION = (
    "List hardware, software, cache, PMU, vendor-table and tracepoint events, grouped like perf list. "
    "GLOB filters by name (shell glob, or a plain substring) or picks a group: hw, sw, cache, pmu, vendor, "
    "tracepoint, breakpoint, tool. --probe opens and closes each event to show whether it works here."
)

#: opening a tracepoint is cheap but closing one costs ~40 ms (the kernel waits for an RCU grace
#: period when it unregisters the probe, under a global mutex), so only this many are probed
TRACEPOINT_PROBE_LIMIT = 25


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("glob", nargs="?", metavar="GLOB", help="filter: glob, substring or group word")
    parser.add_argument("--json", action="store_true", help="one JSON object per event")
    parser.add_argument("--probe", action="store_true", help="open and close each event to see whether it works here")
    parser.add_argument("--all", action="store_true",
                        help="also list the hardware and cache events that cannot open here (hidden by default, as "
                             "perf list hides them)")
    parser.add_argument(
        "--probe-tracepoints",
        type=int,
        default=TRACEPOINT_PROBE_LIMIT,
        metavar="N",
        help=f"probe at most N tracepoints (default {TRACEPOINT_PROBE_LIMIT}; each costs ~40 ms to close)",
    )
    parser.add_argument("--sysfs", default="/sys", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--events-dir", metavar="DIR", help="perf pmu-events JSON tree or model directory (default: $PMUSCOPE_EVENTS_DIR)")


def probe_event(event: str, sysfs_root: str = "/sys") -> tuple[bool, str]:
    """Open and close ``event`` (counting, this thread). Returns (works, note):
    the note is the reason when it does not, or a restriction when it only
    works for user space."""
    try:
        specs = parse_events(event, sysfs_root=sysfs_root)
    except PmuscopeError as err:
        return False, _one_line(err)
    for spec in specs:
        attr = spec.attr.copy()
        attr.disabled = 1
        attr.sample_period = 0
        attr.sample_type = 0
        attr.freq = 0
        pid, cpu = 0, -1
        if spec.cpus:  # uncore/package PMUs count per CPU, not per task
            pid, cpu = -1, spec.cpus[0]
        result = _open_with_fallbacks(attr, pid, cpu, spec.name)
        if result is not None:
            return result
    return True, ""


def _open_with_fallbacks(attr, pid: int, cpu: int, name: str) -> tuple[bool, str] | None:
    """None when ``attr`` opens as is; else (works, note) after perf's fallbacks."""
    try:
        PerfEventFd(attr, pid=pid, cpu=cpu, event=name).close()
        return None
    except PmuscopeError as err:
        first = err
        errno_name = _errno_name(err)
    for note, retry in open_fallbacks(attr, errno_name):
        try:
            PerfEventFd(retry, pid=pid, cpu=cpu, event=name).close()
            return True, note
        except PmuscopeError:
            continue
    return False, _one_line(first)


def _errno_name(err: PmuscopeError) -> str:
    import errno as _errno

    code = getattr(err, "errno", None)
    if isinstance(code, int) and code in _errno.errorcode:
        return _errno.errorcode[code]
    if isinstance(err, PermissionDeniedError):
        return "EACCES"
    if isinstance(err, InvalidAttrError):
        return "EINVAL"
    if isinstance(err, EventNotSupportedError):
        return "EOPNOTSUPP"
    return ""


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def run(args: argparse.Namespace) -> int:
    if args.probe_tracepoints < 0:
        raise PmuscopeError(f"--probe-tracepoints {args.probe_tracepoints}: must be 0 or more")
    events_dir = args.events_dir or None
    if events_dir and not os.path.isdir(events_dir):
        raise PmuscopeError(f"--events-dir {events_dir}: no such directory (point it at perf's pmu-events/arch tree)")
    events = list_events(sysfs_root=args.sysfs, vendor_tables=events_dir, glob=args.glob)
    results: dict[int, tuple[bool | None, str]] = {}
    notes: list[str] = []
    if not has_core_pmu(args.sysfs):
        notes.append(
            "no hardware PMU: this machine exposes no core PMU in /sys/bus/event_source/devices "
            "(a VM without a virtual PMU?), so hardware and cache events will not open; "
            "software events and tracepoints work"
        )
    if not args.probe and not args.all and args.sysfs == "/sys":
        events = _hide_unopenable(events, args.sysfs, notes)
    if args.probe:
        started = time.perf_counter()
        tracepoints = [i for i, e in enumerate(events) if e.group == "tracepoint"]
        limit = args.probe_tracepoints
        for i, info in enumerate(events):
            if info.event is None:
                continue
            if info.group == "tracepoint" and i not in tracepoints[:limit]:
                results[i] = (None, "not probed")
                continue
            results[i] = probe_event(info.event, args.sysfs)
        if len(tracepoints) > limit:
            notes.append(
                f"probed {min(limit, len(tracepoints))} of {len(tracepoints)} tracepoints "
                "(closing each costs ~40 ms in the kernel); narrow with a glob or raise --probe-tracepoints"
            )
        notes.append(f"probed {sum(1 for r in results.values() if r[0] is not None)} events in {time.perf_counter() - started:.2f} s")
    if args.json:
        _print_json(events, results, args.probe)
    else:
        _print_text(events, results, args.probe)
    for note in notes:
        print(f"note: {note}", file=sys.stderr if args.json else sys.stdout)
    return 0


#: the groups perf list shows only where they open (is_event_supported)
_HIDDEN_GROUPS = ("hardware", "cache")


def _generic(note: str, e: EventInfo) -> str:
    """``note`` without the event's own name, so events failing for one cause
    share one reason (``'cycles' needs a hardware PMU`` -> ``needs a hardware PMU``)."""
    names = [n for n in (e.event, e.name, *e.aliases) if n]
    for name in names:
        if note.startswith(f"'{name}' "):
            return note[len(name) + 3:]
    for name in names:
        note = note.replace(f"'{name}'", "the event")
    return note


def _hide_unopenable(events: list[EventInfo], sysfs: str, notes: list[str]) -> list[EventInfo]:
    """``events`` less the hardware and cache events that do not open here
    (each is opened and closed once: ~10 us), with one note saying how many
    were left out and why."""
    keep, why = [], {}
    for e in events:
        if e.group in _HIDDEN_GROUPS and e.event is not None:
            works, note = probe_event(e.event, sysfs)
            if not works:
                note = _generic(note, e)
                why[note] = why.get(note, 0) + 1
                continue
        keep.append(e)
    if why:
        common = max(why, key=why.get)
        more = f" (and {len(why) - 1} other reasons)" if len(why) > 1 else ""
        notes.append(f"{sum(why.values())} hardware/cache events cannot open here and are not listed: {common}{more}; "
                     "--all lists them, --probe gives the reason of each")
    return keep


def _print_json(events: list[EventInfo], results: dict, probe: bool) -> None:
    out = sys.stdout
    out.write("[\n")
    for i, e in enumerate(events):
        obj: dict = {"group": e.group, "name": e.name, "description": e.description}
        if e.aliases:
            obj["aliases"] = e.aliases
        if e.pmu:
            obj["pmu"] = e.pmu
        if probe and e.event is not None:
            works, note = results.get(i, (None, ""))
            obj["works"] = works
            if note:
                obj["reason" if works is False else "note"] = note
        out.write(" " + json.dumps(obj) + (",\n" if i + 1 < len(events) else "\n"))
    out.write("]\n")


def _print_text(events: list[EventInfo], results: dict, probe: bool) -> None:
    current = None
    width = min(56, max((len(_label(e)) for e in events), default=20) + 2)
    reasons: dict[str, int] = {}  # each distinct reason (or note) once, numbered, after the list
    for i, e in enumerate(events):
        if e.group != current:
            if current is not None:
                print()
            print(f"{GROUPS.get(e.group, e.group)}:")
            current = e.group
        label = _label(e)
        line = f"  {label:<{width}} {e.description}"
        if probe and e.event is not None:
            works, note = results.get(i, (None, ""))
            status = {True: "[works]", False: "[unavailable]", None: "[not probed]"}[works]
            if note and works is not None:
                n = reasons.setdefault(_generic(note, e), len(reasons) + 1)
                status = f"{status[:-1]} {n}]"
            line = f"  {label:<{width}} {status:<17} {e.description}"
        print(line)
    if reasons:
        print()
        print("Reasons (the number after [unavailable] or [works]):")
        for note, n in reasons.items():
            print(f"  {n:>3}: {note}")


def _label(e: EventInfo) -> str:
    return " OR ".join([e.name, *e.aliases])
