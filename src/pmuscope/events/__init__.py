"""Event strings → EventSpec (a complete perf_event_attr + name), the way perf parses them.

The names below are imported on first use (PEP 562): ``stat`` of one event
needs the parser, not the vendor JSON tables or the CPU-identity reader.
"""

from pmuscope._lazy import lazy_exports

_LAZY = {
    "EventSpec": ".spec",
    "parse_events": ".parser",
    "MODIFIER_CHARS": ".parser",
    "apply_callchain": ".defaults",
    "apply_counting_defaults": ".defaults",
    "stat_defaults": ".defaults",
    "record_defaults": ".defaults",
    "open_fallbacks": ".defaults",
}
_SUBMODULES = {name: f".{name}" for name in ("pmu", "generic", "tracepoints", "vendor", "cpuid")}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "EventSpec",
    "parse_events",
    "apply_counting_defaults",
    "stat_defaults",
    "record_defaults",
    "apply_callchain",
    "open_fallbacks",
    "MODIFIER_CHARS",
    "pmu",
    "generic",
    "tracepoints",
    "vendor",
    "cpuid",
]
