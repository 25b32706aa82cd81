"""The catalogue of events this machine names, grouped like ``perf list``:
hardware, software, tool, hardware cache, PMU (sysfs and vendor tables),
tracepoints, breakpoints and raw syntax. No syscalls here: probing whether
each one opens is the caller's job (``pmuscope list --probe``)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from . import generic, tracepoints
from .pmu import core_pmus, pmus
from .vendor import VendorEvents, resolve_vendor_tables

#: group key -> heading, in perf list order
GROUPS = {
    "hardware": "Hardware events",
    "software": "Software events",
    "tool": "Tool events",
    "cache": "Hardware cache events",
    "pmu": "Kernel PMU events",
    "vendor": "Vendor (pmu-events JSON) events",
    "tracepoint": "Tracepoint events",
    "breakpoint": "Hardware breakpoints",
    "raw": "Raw event syntax",
}
#: words ``pmuscope list WORD`` accepts to pick a group (perf list's names too)
GROUP_WORDS = {
    "hw": "hardware", "hardware": "hardware", "sw": "software", "software": "software", "tool": "tool",
    "cache": "cache", "hwcache": "cache", "pmu": "pmu", "vendor": "vendor", "json": "vendor",
    "tracepoint": "tracepoint", "tracepoints": "tracepoint", "breakpoint": "breakpoint", "raw": "raw",
}  # fmt: skip


@dataclass
class EventInfo:
    group: str
    name: str
    description: str
    #: other spellings (``cycles`` for ``cpu-cycles``)
    aliases: list[str] = field(default_factory=list)
    #: the string to hand to parse_events to get this event (None for syntax-only rows)
    event: str | None = None
    pmu: str | None = None
    topic: str = ""


def _hardware() -> list[EventInfo]:
    out: dict[tuple[int, int], EventInfo] = {}
    for table, group in ((generic.HARDWARE, "hardware"), (generic.SOFTWARE, "software"), (generic.TOOL, "tool")):
        for name, (type_, config, desc) in table.items():
            key = (group, type_, config, name if group == "tool" else "")
            if key in out:
                out[key].aliases.append(name)
            else:
                out[key] = EventInfo(group, name, desc, event=name)
    return list(out.values())


def list_events(
    *,
    sysfs_root: str = "/sys",
    tracefs_root: str | None = None,
    vendor_tables: VendorEvents | str | None = None,
    glob: str | None = None,
) -> list[EventInfo]:
    """Every event name this machine offers, in perf list's groups.

    ``glob`` filters: a group word (``hw``, ``sw``, ``cache``, ``pmu``,
    ``tracepoint``, ...), a shell glob matched against the name and its
    aliases (case-insensitive), or a plain word matched as a substring.
    """
    out = _hardware()
    out += [EventInfo("cache", name, desc, event=name) for name, _config, desc in generic.cache_event_names()]
    table = resolve_vendor_tables(vendor_tables, sysfs_root=sysfs_root)
    for pmu in pmus(sysfs_root).values():
        if not pmu.aliases and pmu.formats and pmu.name not in ("kprobe", "uprobe"):
            # a PMU with terms but no named events (arm_spe_0, intel_pt ...): perf lists it as pmu//
            terms = ", ".join(sorted(pmu.formats))
            out.append(EventInfo("pmu", f"{pmu.name}//", f"PMU with terms: {terms}", event=f"{pmu.name}//", pmu=pmu.name))
        for alias in pmu.aliases.values():
            desc = alias.desc or f"{alias.terms}" + (f" (x{alias.scale:g} {alias.unit})" if alias.unit else "")
            out.append(EventInfo("pmu", f"{pmu.name}/{alias.name}/", desc, event=f"{pmu.name}/{alias.name}/", pmu=pmu.name))
    if table is not None:
        cores = core_pmus(sysfs_root)
        for key, alias in sorted(table.events.items()):
            unit_pmu = table.pmu_of.get(key)
            pmu_name = unit_pmu or (cores[0].name if cores else None)
            out.append(EventInfo("vendor", alias.name, alias.desc, event=alias.name, pmu=pmu_name, topic=alias.topic))
    tracefs = tracefs_root or tracepoints.find_tracefs(sysfs_root)
    if tracefs:
        out += [EventInfo("tracepoint", tp, "tracepoint", event=tp, pmu="tracepoint") for tp in tracepoints.all_tracepoints(tracefs)]
    out.append(EventInfo("breakpoint", "mem:<addr>[/len][:access]", "hardware breakpoint (access: r, w, x; len 1/2/4/8)"))
    out.append(EventInfo("raw", "rNNN", "raw hardware event descriptor (config in hex) on the core PMU"))
    out.append(EventInfo("raw", "<pmu>/<term>=<value>[,<term>...]/[modifiers]", "PMU event by sysfs format terms"))
    return filter_events(out, glob)


def filter_events(events: list[EventInfo], glob: str | None) -> list[EventInfo]:
    if not glob:
        return events
    group = GROUP_WORDS.get(glob.lower())
    if group:
        # perf list sw also shows the tool events
        wanted = {group, "tool"} if group == "software" else {group}
        return [e for e in events if e.group in wanted]
    pattern = glob.lower() if any(c in glob for c in "*?[") else f"*{glob.lower()}*"
    return [e for e in events if any(fnmatch.fnmatchcase(n.lower(), pattern) for n in _match_names(e))]


def _match_names(e: EventInfo) -> list[str]:
    names = [e.name, *e.aliases]
    if e.group == "pmu" and e.name.count("/") == 2:  # pmu/alias/: the PMU and the alias match alone too
        pmu_name, alias, _ = e.name.split("/")
        names += [pmu_name, alias]
    return names


def has_core_pmu(sysfs_root: str = "/sys") -> bool:
    """True when sysfs shows a core (CPU) PMU: hardware and cache events can open."""
    return bool(core_pmus(sysfs_root)) or os.path.isdir(os.path.join(sysfs_root, "bus/event_source/devices/cpu"))
