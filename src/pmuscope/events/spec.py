"""EventSpec: what an event string resolves to — a complete perf_event_attr
plus the facts needed to open, name, scale and group it."""

from __future__ import annotations

from ..kernel.abi import perf_event_attr

#: EventSpec's fields, in order (``__init__``'s parameters, equality, repr)
_FIELDS = ("name", "attr", "pmu", "group", "leader", "scale", "unit", "modifiers", "call_graph", "max_stack",
           "text", "pos", "period_set", "freq_set", "cpus", "extra")


class EventSpec:
    """One event of a parsed event list.

    ``attr`` is complete except for the session defaults a counting or
    sampling session adds (read_format, disabled, inherit, ...).

    Compared by value and printed like a dataclass; a plain class because
    every command that takes ``-e`` builds it at start-up, where creating a
    dataclass costs ~0.3 ms and importing :mod:`dataclasses` ~4 ms.
    """

    #: the name perf would print (``cycles``, ``cpu-clock:u``, ``msr/tsc/``, or the ``name=`` term)
    name: str
    attr: perf_event_attr
    #: PMU name: "cpu", "software", "tracepoint", "breakpoint", "msr", ... (None for generic hardware/cache)
    pmu: str | None
    #: index of the group in the list this event belongs to (None: not in a {group})
    group: int | None
    #: True for the first event of a {group}
    leader: bool
    #: multiply raw counts by this to get ``unit`` (sysfs events/<name>.scale)
    scale: float
    unit: str
    #: the modifier letters as written (``u``, ``ppp``, ``kS`` ...)
    modifiers: str
    #: from the ``call-graph=`` term (fp, dwarf[,size], lbr, no)
    call_graph: str | None
    #: the ``max-stack=`` term
    max_stack: int | None
    #: the substring of the event list this came from and its column
    text: str
    pos: int
    #: the user asked for a sampling period/frequency via a term (period=, freq=)
    period_set: bool
    freq_set: bool
    #: CPUs the event's PMU is restricted to (uncore cpumask), or None
    cpus: list[int] | None
    extra: dict

    def __init__(self, name: str, attr: perf_event_attr, pmu: str | None = None, group: int | None = None,
                 leader: bool = False, scale: float = 1.0, unit: str = "", modifiers: str = "",
                 call_graph: str | None = None, max_stack: int | None = None, text: str = "", pos: int = 0,
                 period_set: bool = False, freq_set: bool = False, cpus: list[int] | None = None,
                 extra: dict | None = None) -> None:
        self.name = name
        self.attr = attr
        self.pmu = pmu
        self.group = group
        self.leader = leader
        self.scale = scale
        self.unit = unit
        self.modifiers = modifiers
        self.call_graph = call_graph
        self.max_stack = max_stack
        self.text = text
        self.pos = pos
        self.period_set = period_set
        self.freq_set = freq_set
        self.cpus = cpus
        self.extra = {} if extra is None else extra

    def __repr__(self) -> str:
        return "EventSpec(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS) + ")"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, f) for f in _FIELDS) == tuple(getattr(other, f) for f in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  (mutable, compared by value)

    def copy(self) -> "EventSpec":
        new = object.__new__(self.__class__)  # copy.copy(self), without importing copy
        new.__dict__.update(self.__dict__)
        new.attr = self.attr.copy()
        new.extra = dict(self.extra)
        return new
