"""Event strings → EventSpec (a complete perf_event_attr + name), the way perf parses them."""

from .spec import EventSpec
from .parser import parse_events, MODIFIER_CHARS
from .defaults import apply_callchain, apply_counting_defaults, stat_defaults, record_defaults, open_fallbacks
from . import pmu, generic, tracepoints, vendor, cpuid

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
