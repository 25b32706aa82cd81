"""Metric names for events: node_exporter's perf collector names where they
exist (``node_perf_cpucycles_total`` → ``pmuscope_perf_cpucycles_total``, so a
dashboard carries over by swapping the prefix), base units for time and energy.

node_exporter ``collector/perf_linux.go`` names generic hardware, software and
cache events (cache results: ACCESS is ``_hits``, MISS ``_misses``, as in
hodgesds/perf-utils); tracepoints are ``<subsystem>_<event>``. Anything else is
the sanitized event name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..events.spec import EventSpec
from ..kernel import abi
from .exposition import sanitize_name

PREFIX = "pmuscope_perf_"

_HW = {
    0: "cpucycles",
    1: "instructions",
    2: "cache_refs",
    3: "cache_misses",
    4: "branch_instructions",
    5: "branch_misses",
    6: "bus_cycles",
    7: "stalled_cycles_frontend",
    8: "stalled_cycles_backend",
    9: "ref_cpucycles",
}

#: software events; the two clocks count nanoseconds and are exposed in seconds
_SW = {
    0: ("cpu_clock_seconds", "seconds"),
    1: ("task_clock_seconds", "seconds"),
    2: ("page_faults", ""),
    3: ("context_switches", ""),
    4: ("cpu_migrations", ""),
    5: ("minor_faults", ""),
    6: ("major_faults", ""),
    7: ("alignment_faults", ""),
    8: ("emulation_faults", ""),
    11: ("cgroup_switches", ""),
}

_CACHE_ID = {0: "l1d", 1: "l1_instr", 2: "ll", 3: "tlb_data", 4: "tlb_instr", 5: "bpu", 6: "node"}
_CACHE_OP = {0: "read", 1: "write", 2: "prefetch"}
_CACHE_RESULT = {0: "hits", 1: "misses"}

#: sysfs ``.unit`` strings → (OpenMetrics base unit, factor from the scaled value)
_UNITS = {"joules": ("joules", 1.0), "mib": ("bytes", 1048576.0), "bytes": ("bytes", 1.0), "watts": ("", 1.0)}


@dataclass(frozen=True)
class EventMetric:
    """How one event is exposed: family name (without ``_total``), base unit,
    and ``factor`` turning the raw count into that unit."""

    name: str
    unit: str
    factor: float
    help: str


def event_metric(spec: EventSpec) -> EventMetric:
    """The metric for ``spec`` (a counting event)."""
    a = spec.attr
    unit, factor = "", 1.0
    if a.type == abi.PERF_TYPE_HARDWARE and a.config in _HW:
        stem = _HW[a.config]
    elif a.type == abi.PERF_TYPE_SOFTWARE and a.config in _SW:
        stem, unit = _SW[a.config]
        factor = 1e-9 if unit == "seconds" else 1.0
    elif a.type == abi.PERF_TYPE_HW_CACHE:
        cid, op, res = a.config & 0xFF, (a.config >> 8) & 0xFF, (a.config >> 16) & 0xFF
        if cid in _CACHE_ID and op in _CACHE_OP and res in _CACHE_RESULT:
            stem = f"cache_{_CACHE_ID[cid]}_{_CACHE_OP[op]}_{_CACHE_RESULT[res]}"
        else:
            stem = sanitize_name(spec.name.split(":")[0]).lower()
    elif a.type == abi.PERF_TYPE_TRACEPOINT and "tracepoint" in spec.extra:
        sys_, ev = spec.extra["tracepoint"]
        stem = sanitize_name(f"{sys_}_{ev}").lower()
    else:
        base = spec.name[: -len(spec.modifiers) - 1] if spec.modifiers and spec.name.endswith(":" + spec.modifiers) else spec.name
        stem = sanitize_name(base).lower()
        if spec.unit:
            u, f = _UNITS.get(spec.unit.lower(), ("", 1.0))
            if u:
                unit, factor = u, spec.scale * f
                stem = f"{stem}_{u}"
    help_ = f"perf event {spec.name} (perf_event_attr type {a.type} config {a.config:#x})"
    if unit:
        help_ += f", in {unit}"
    else:
        help_ += ", raw count"
    return EventMetric(PREFIX + stem, unit, factor, help_)
