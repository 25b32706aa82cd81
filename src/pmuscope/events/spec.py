"""EventSpec: what an event string resolves to — a complete perf_event_attr
plus the facts needed to open, name, scale and group it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..kernel.abi import perf_event_attr


@dataclass
class EventSpec:
    """One event of a parsed event list.

    ``attr`` is complete except for the session defaults a counting or
    sampling session adds (read_format, disabled, inherit, ...).
    """

    #: the name perf would print (``cycles``, ``cpu-clock:u``, ``msr/tsc/``, or the ``name=`` term)
    name: str
    attr: perf_event_attr
    #: PMU name: "cpu", "software", "tracepoint", "breakpoint", "msr", ... (None for generic hardware/cache)
    pmu: str | None = None
    #: index of the group in the list this event belongs to (None: not in a {group})
    group: int | None = None
    #: True for the first event of a {group}
    leader: bool = False
    #: multiply raw counts by this to get ``unit`` (sysfs events/<name>.scale)
    scale: float = 1.0
    unit: str = ""
    #: the modifier letters as written (``u``, ``ppp``, ``kS`` ...)
    modifiers: str = ""
    #: from the ``call-graph=`` term (fp, dwarf[,size], lbr, no)
    call_graph: str | None = None
    #: the ``max-stack=`` term
    max_stack: int | None = None
    #: the substring of the event list this came from and its column
    text: str = ""
    pos: int = 0
    #: the user asked for a sampling period/frequency via a term (period=, freq=)
    period_set: bool = False
    freq_set: bool = False
    #: CPUs the event's PMU is restricted to (uncore cpumask), or None
    cpus: list[int] | None = None
    extra: dict = field(default_factory=dict)

    def copy(self) -> "EventSpec":
        import copy as _copy

        new = _copy.copy(self)
        new.attr = self.attr.copy()
        new.extra = dict(self.extra)
        return new
