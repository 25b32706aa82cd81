"""Regions: likwid's ``LIKWID_MARKER_START/STOP`` and PAPI's high-level
``PAPI_hl_region_begin/end``, in Python.

::

    import pmuscope

    with pmuscope.region("parse"):
        parse(data)

    @pmuscope.region("solve")
    def solve(): ...

    print(pmuscope.regions.table())
    df = pmuscope.regions.to_dataframe()

Counts are per thread (each thread opens its own counters on first use,
``pid=0`` = the calling thread), nested regions each accumulate their own
inclusive counts, and a region entered many times accumulates calls, wall
time and event deltas. Reads use the cheapest path available
(:class:`~pmuscope.observe.mmap_page.MmapCounter`: rdpmc through the mmap
page where the PMU allows it, ``read()`` otherwise).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..errors import PmuscopeError
from .mmap_page import MmapCounter

#: events tried for regions by default; those that do not open here are left out
DEFAULT_EVENTS = ("task-clock", "instructions:u", "cycles:u")


@dataclass
class RegionStats:
    """Accumulated figures of one region name in one thread."""

    name: str
    tid: int
    calls: int = 0
    wall_ns: int = 0
    counts: dict[str, int] = field(default_factory=dict)


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.counters: list[MmapCounter] | None = None
        self.stack: list[tuple[str, int, list[int]]] = []


class RegionRecorder:
    """Holds the per-thread counters and the accumulated region statistics.

    ``events`` is an event string or a list of them; events that cannot be
    opened here are skipped and listed in :attr:`unavailable` with the reason.
    """

    def __init__(self, events: str | Iterable[str] = DEFAULT_EVENTS, *, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.events_requested = [events] if isinstance(events, str) else list(events)
        self.events: list[str] | None = None
        self.unavailable: dict[str, str] = {}
        self._clock = clock
        self._local = _ThreadState()
        self._lock = threading.Lock()
        self._stats: dict[tuple[str, int], RegionStats] = {}
        self._all_counters: list[MmapCounter] = []

    # -- counters
    def _open_counters(self) -> list[MmapCounter]:
        from ..events import parse_events

        counters: list[MmapCounter] = []
        names: list[str] = []
        for text in self.events_requested:
            try:
                specs = parse_events(text)
            except PmuscopeError as err:
                self.unavailable[text] = str(err).splitlines()[0]
                continue
            for spec in specs:
                if self.events is not None and spec.name not in self.events:
                    continue
                try:
                    counters.append(MmapCounter(spec.attr, event=spec.name))
                    names.append(spec.name)
                except PmuscopeError as err:
                    self.unavailable[spec.name] = str(err).splitlines()[0]
        with self._lock:
            if self.events is None:
                self.events = names
            self._all_counters.extend(counters)
        return counters

    def _read(self, counters: list[MmapCounter]) -> list[int]:
        return [c.read()[0] for c in counters]

    # -- regions
    def start(self, name: str) -> None:
        local = self._local
        if local.counters is None:
            local.counters = self._open_counters()
        local.stack.append((name, self._clock(), self._read(local.counters)))

    def stop(self, name: str | None = None) -> None:
        local = self._local
        counters = local.counters or []
        values = self._read(counters)
        end = self._clock()
        if not local.stack:
            raise PmuscopeError(f"region stop {name!r} without a matching start")
        top, started, before = local.stack.pop()
        if name is not None and name != top:
            local.stack.append((top, started, before))
            raise PmuscopeError(f"region stop {name!r} while {top!r} is the innermost open region (regions must nest)")
        tid = threading.get_native_id()
        with self._lock:
            st = self._stats.get((top, tid))
            if st is None:
                st = self._stats[(top, tid)] = RegionStats(top, tid)
            st.calls += 1
            st.wall_ns += end - started
            for c, v0, v1 in zip(counters, before, values):
                st.counts[c.event or "?"] = st.counts.get(c.event or "?", 0) + (v1 - v0)

    def region(self, name: str) -> "_Region":
        return _Region(self, name)

    # -- results
    def stats(self, *, per_thread: bool = False) -> list[RegionStats]:
        """Region statistics, per (name, thread) or merged over threads."""
        with self._lock:
            items = [RegionStats(s.name, s.tid, s.calls, s.wall_ns, dict(s.counts)) for s in self._stats.values()]
        if per_thread:
            return items
        merged: dict[str, RegionStats] = {}
        for s in items:
            m = merged.setdefault(s.name, RegionStats(s.name, -1))
            m.calls += s.calls
            m.wall_ns += s.wall_ns
            for k, v in s.counts.items():
                m.counts[k] = m.counts.get(k, 0) + v
        return list(merged.values())

    def rows(self, *, per_thread: bool = False) -> list[dict[str, object]]:
        rows = []
        for s in self.stats(per_thread=per_thread):
            row: dict[str, object] = {"region": s.name}
            if per_thread:
                row["tid"] = s.tid
            row.update(calls=s.calls, wall_ns=s.wall_ns)
            row.update(s.counts)
            rows.append(row)
        return rows

    def table(self, *, per_thread: bool = False) -> str:
        """A plain-text summary table (one row per region)."""
        rows = self.rows(per_thread=per_thread)
        if not rows:
            return "no regions recorded"
        cols = list(dict.fromkeys(k for r in rows for k in r))
        cells = [[str(c) for c in cols]] + [[_fmt(r.get(c, "")) for c in cols] for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
        lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))) for row in cells]
        if self.unavailable:
            lines.append("not counted: " + "; ".join(f"{k}: {v}" for k, v in self.unavailable.items()))
        return "\n".join(lines)

    def to_dataframe(self, *, per_thread: bool = False):
        from ..errors import require

        pd = require("pandas", "pandas", "region data frames")
        return pd.DataFrame(self.rows(per_thread=per_thread))

    def reset(self) -> None:
        with self._lock:
            self._stats.clear()

    def close(self) -> None:
        with self._lock:
            for c in self._all_counters:
                c.close()
            self._all_counters.clear()
        self._local = _ThreadState()


def _fmt(value: object) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


class _Region:
    """Context manager and decorator for one region name."""

    __slots__ = ("rec", "name")

    def __init__(self, rec: RegionRecorder, name: str) -> None:
        self.rec = rec
        self.name = name

    def __enter__(self) -> "_Region":
        self.rec.start(self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.rec.stop(self.name)

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return wrapper


#: the process-wide default recorder behind :func:`region`
default = RegionRecorder()


def region(name: str) -> _Region:
    """``with region("name"):`` or ``@region("name")`` on the default recorder."""
    return default.region(name)


def table(per_thread: bool = False) -> str:
    return default.table(per_thread=per_thread)


def to_dataframe(per_thread: bool = False):
    return default.to_dataframe(per_thread=per_thread)


def stats(per_thread: bool = False) -> list[RegionStats]:
    return default.stats(per_thread=per_thread)
