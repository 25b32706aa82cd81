"""Results of a counting read: raw values, enabled/running times, perf's scaling,
per-CPU / per-thread cells and their aggregation.

Scaling is perf's (``perf_counts_values__scale``): per (cpu, thread) cell,
``scaled = value * time_enabled / time_running`` when ``0 < running < enabled``,
``value`` when running == enabled, and 0 with the cell marked *not counted* when
``running == 0``. Aggregates sum the scaled cells (and the raw values and times);
an aggregate is *not counted* only when every cell is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
import struct
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from .. import errors

VAL, ENA, RUN = 0, 1, 2

#: up to this many read units, aggregates are computed in plain Python
_PY_CELLS = 16
_STRUCTS: dict[int, struct.Struct] = {}


def _unpack(buf: bytes) -> tuple:
    st = _STRUCTS.get(len(buf))
    if st is None:
        st = _STRUCTS[len(buf)] = struct.Struct(f"={len(buf) // 8}Q")
    return st.unpack(buf)

_MODIFIER_SUFFIX = re.compile(r":[ukhIGHpPSDWe]+$")


def base_name(name: str) -> str:
    """The event name without a perf modifier suffix (``cycles:u`` → ``cycles``)."""
    return _MODIFIER_SUFFIX.sub("", name)


@dataclass(frozen=True)
class Layout:
    """What a Counts needs from its session (fixed once the fds are open)."""

    names: tuple[str, ...]
    units: tuple[str, ...]
    scales: tuple[float, ...]
    supported: tuple[bool, ...]
    errors: tuple[str | None, ...]
    cpus: tuple[int, ...]
    threads: tuple[int, ...]
    #: per read unit: (grouped, member event indices, cpu_idx, thread_idx)
    units_plan: tuple[tuple[bool, tuple[int, ...], int, int], ...]
    system_wide: bool = False

    @classmethod
    def from_counter(cls, counter) -> "Layout":
        plan = tuple(
            (counter._grouped[gi], tuple(counter._members[gi]), ci, ti) for gi, ci, ti in counter._unit_index
        )
        return cls(
            names=tuple(ev.name for ev in counter.evsels),
            units=tuple(ev.unit for ev in counter.evsels),
            scales=tuple(ev.scale for ev in counter.evsels),
            supported=tuple(ev.supported for ev in counter.evsels),
            errors=tuple(ev.error for ev in counter.evsels),
            cpus=tuple(counter.cpus),
            threads=tuple(counter.threads),
            units_plan=plan,
            system_wide=counter.system_wide,
        )


def decode(layout: Layout, raws: Sequence[bytes | tuple]) -> np.ndarray:
    """read() buffers (or their unpacked tuples) → ``uint64[event, cpu, thread, (value, ena, run)]``."""
    data = np.zeros((len(layout.names), len(layout.cpus), len(layout.threads), 3), dtype=np.uint64)
    for (grouped, members, ci, ti), raw in zip(layout.units_plan, raws):
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(raw, dtype=np.uint64)
        if grouped:
            ena, run = raw[1], raw[2]
            for k in range(min(int(raw[0]), len(members))):
                data[members[k], ci, ti] = (raw[3 + 2 * k], ena, run)
        else:
            data[members[0], ci, ti] = raw[:3]
    return data


def scale_cells(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """perf's scaling of every cell: (scaled float64 values, counted bool)."""
    val = data[..., VAL].astype(np.float64)
    ena = data[..., ENA].astype(np.float64)
    run = data[..., RUN].astype(np.float64)
    counted = run > 0
    scaled = np.where(counted & (run < ena), val * ena / np.where(counted, run, 1.0), val)
    scaled = np.where(counted, scaled, 0.0)
    return scaled, counted


class EventCount(NamedTuple):
    """One event's count (one cell or an aggregate of cells).

    ``value`` is the raw count, ``scaled`` perf's multiplexing-scaled count,
    ``ratio`` = time_running / time_enabled (1.0 = never multiplexed; perf
    prints ``(ratio*100 %)`` when it is below 1). ``display`` is ``scaled``
    in ``unit`` (e.g. task-clock in msec). ``counted`` False is perf's
    ``<not counted>``, ``supported`` False its ``<not supported>``.
    """

    name: str
    value: int
    time_enabled: int
    time_running: int
    scaled: float
    counted: bool
    supported: bool = True
    unit: str = ""
    scale: float = 1.0
    error: str | None = None

    @property
    def ratio(self) -> float:
        return self.time_running / self.time_enabled if self.time_enabled else (1.0 if self.counted else 0.0)

    @property
    def multiplexed(self) -> bool:
        return self.counted and self.time_running < self.time_enabled

    @property
    def display(self) -> float:
        return self.scaled * self.scale

    @property
    def status(self) -> str:
        """``""``, ``"<not counted>"`` or ``"<not supported>"``."""
        if not self.supported:
            return "<not supported>"
        if not self.counted:
            return "<not counted>"
        return ""


#: aggregation modes of ``perf stat``: key per CPU for system-wide modes
AGGR_MODES = ("global", "cpu", "core", "die", "socket", "node", "thread")


class Counts:
    """The counters at one moment: ``counts["cycles"]`` is the aggregate
    :class:`EventCount`; ``per_cpu()``, ``per_thread()`` and ``aggregate()``
    break it down; ``metrics()`` derives perf's shadow metrics; ``counts - earlier``
    is the delta between two reads (interval mode)."""

    __slots__ = ("layout", "_raws", "_data", "timestamp_ns", "start_ns", "_agg")

    def __init__(self, layout: Layout, raws: Sequence[bytes | tuple] | None, timestamp_ns: int, start_ns: int = 0,
                 data: np.ndarray | None = None) -> None:
        # the read path builds one of these per read(): four stores, the rest is lazy
        self.layout = layout
        self._raws = raws
        self.timestamp_ns = timestamp_ns
        self.start_ns = start_ns
        if data is not None:
            self._data = data

    # -- raw data -----------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        """``uint64[event, cpu, thread, (value, time_enabled, time_running)]``."""
        try:
            return self._data
        except AttributeError:
            self._data = decode(self.layout, self._raws or ())
            return self._data

    @property
    def names(self) -> list[str]:
        return list(self.layout.names)

    @property
    def elapsed_ns(self) -> int:
        """Wall time since the counters were started (or, for a delta, the interval)."""
        return self.timestamp_ns - self.start_ns

    def __sub__(self, other: "Counts") -> "Counts":
        if other.layout is not self.layout and other.layout.names != self.layout.names:
            raise errors.PmuscopeError("cannot subtract counts of different sessions")
        a, b = self.data, other.data
        # counters only grow; a reset in between would make a negative delta
        delta = np.where(a >= b, a - b, a)
        return Counts(self.layout, None, self.timestamp_ns, other.timestamp_ns, data=delta)

    # -- cells ----------------------------------------------------------------
    def _make(self, i: int, cells: np.ndarray, scaled: np.ndarray, counted: np.ndarray) -> EventCount:
        L = self.layout
        return EventCount(
            name=L.names[i],
            value=int(cells[..., VAL].sum()),
            time_enabled=int(cells[..., ENA].sum()),
            time_running=int(cells[..., RUN].sum()),
            scaled=float(scaled.sum()),
            counted=bool(L.supported[i] and counted.any()),
            supported=L.supported[i],
            unit=L.units[i],
            scale=L.scales[i],
            error=L.errors[i],
        )

    def _aggregate_all(self) -> list[EventCount]:
        try:
            return self._agg
        except AttributeError:
            pass
        if not hasattr(self, "_data") and self._raws is not None and len(self._raws) <= _PY_CELLS:
            self._agg = self._aggregate_small()
        else:
            data = self.data
            scaled, counted = scale_cells(data)
            self._agg = [self._make(i, data[i], scaled[i], counted[i]) for i in range(len(self.layout.names))]
        return self._agg

    def _aggregate_small(self) -> list[EventCount]:
        """The same sums and scaling as the numpy path, in plain Python: for a
        few read units this is far cheaper than building arrays."""
        L = self.layout
        n = len(L.names)
        val = [0] * n
        ena = [0] * n
        run = [0] * n
        scaled = [0.0] * n
        counted = [False] * n
        for (grouped, members, _ci, _ti), raw in zip(L.units_plan, self._raws):
            if not isinstance(raw, tuple):
                raw = _unpack(raw)
            if grouped:
                e, r = raw[1], raw[2]
                cells = [(members[k], raw[3 + 2 * k]) for k in range(min(raw[0], len(members)))]
            else:
                e, r = raw[1], raw[2]
                cells = [(members[0], raw[0])]
            for i, v in cells:
                val[i] += v
                ena[i] += e
                run[i] += r
                if r:
                    counted[i] = True
                    scaled[i] += v * e / r if r < e else float(v)
        return [
            EventCount(name, val[i], ena[i], run[i], scaled[i], bool(L.supported[i] and counted[i]),
                       L.supported[i], L.units[i], L.scales[i], L.errors[i])
            for i, name in enumerate(L.names)
        ]

    def __getitem__(self, name: str) -> EventCount:
        agg = self._aggregate_all()
        for ev in agg:
            if ev.name == name:
                return ev
        for ev in agg:  # "cycles" finds "cycles:u"
            if base_name(ev.name) == name:
                return ev
        raise KeyError(f"no event {name!r} in these counts (have {', '.join(e.name for e in agg)})")

    def __contains__(self, name: str) -> bool:
        try:
            self[name]
            return True
        except KeyError:
            return False

    def __iter__(self) -> Iterator[EventCount]:
        return iter(self._aggregate_all())

    def __len__(self) -> int:
        return len(self.layout.names)

    def value(self, name: str) -> float:
        """Shortcut: the scaled aggregate count of ``name``."""
        return self[name].scaled

    def groups_by(self, keys: Sequence, axis: str) -> list[tuple[object, int, list[EventCount]]]:
        """Aggregate cells whose CPU (axis="cpu") or thread (axis="thread")
        maps to the same key. Returns ``[(key, n_cells, [EventCount per event])]``."""
        data = self.data
        scaled, counted = scale_cells(data)
        order: dict[object, list[int]] = {}
        for idx, key in enumerate(keys):
            order.setdefault(key, []).append(idx)
        out = []
        for key, idxs in order.items():
            if axis == "cpu":
                d, s, c = data[:, idxs], scaled[:, idxs], counted[:, idxs]
            else:
                d, s, c = data[:, :, idxs], scaled[:, :, idxs], counted[:, :, idxs]
            out.append((key, len(idxs), [self._make(i, d[i], s[i], c[i]) for i in range(len(self.layout.names))]))
        return out

    def per_cpu(self) -> dict[int, dict[str, EventCount]]:
        """``{cpu: {event: EventCount}}`` (cpu -1 when counting per thread on any CPU)."""
        return {k: {e.name: e for e in evs} for k, _, evs in self.groups_by(self.layout.cpus, "cpu")}

    def per_thread(self) -> dict[int, dict[str, EventCount]]:
        """``{tid: {event: EventCount}}``; with inherit, a tid's counts include
        the threads and children it started after the counters were opened."""
        return {k: {e.name: e for e in evs} for k, _, evs in self.groups_by(self.layout.threads, "thread")}

    def aggregate(self, mode: str = "global", topology=None) -> list[tuple[object, int, list[EventCount]]]:
        """perf stat's aggregation modes: ``global``, ``cpu`` (-A), ``core``,
        ``die``, ``socket``, ``node`` (need ``topology``:
        :class:`~pmuscope.counting.topology.CpuTopology`) and ``thread``."""
        if mode == "global":
            return [(None, len(self.layout.cpus), list(self))]
        if mode == "thread":
            return self.groups_by(self.layout.threads, "thread")
        if mode == "cpu":
            return self.groups_by(self.layout.cpus, "cpu")
        if mode in ("core", "die", "socket", "node"):
            if topology is None:
                from .topology import CpuTopology

                topology = CpuTopology.read()
            keys = [topology.key(cpu, mode) for cpu in self.layout.cpus]
            return self.groups_by(keys, "cpu")
        raise errors.PmuscopeError(f"unknown aggregation mode {mode!r}; one of {', '.join(AGGR_MODES)}")

    # -- derived --------------------------------------------------------------
    def metrics(self, elapsed_ns: int | None = None):
        """perf's shadow metrics over the aggregate counts: ``{event: [MetricValue]}``
        (see :data:`pmuscope.counting.metrics.METRICS`)."""
        from .metrics import evaluate

        return evaluate({ev.name: ev for ev in self}, self.elapsed_ns if elapsed_ns is None else elapsed_ns)

    def to_dict(self) -> dict[str, dict]:
        return {
            ev.name: dict(value=ev.value, scaled=ev.scaled, time_enabled=ev.time_enabled, time_running=ev.time_running,
                          ratio=ev.ratio, counted=ev.counted, supported=ev.supported, unit=ev.unit)
            for ev in self
        }

    def to_dataframe(self, by: str = "cell"):
        """A pandas DataFrame: one row per (event, cpu, thread) cell (``by="cell"``)
        or per event (``by="event"``). Needs ``pip install 'pmuscope[pandas]'``."""
        pd = errors.require("pandas", "pandas", "Counts.to_dataframe()")
        if by == "event":
            rows = [dict(event=ev.name, value=ev.value, scaled=ev.scaled, unit=ev.unit, time_enabled=ev.time_enabled,
                         time_running=ev.time_running, ratio=ev.ratio, counted=ev.counted, supported=ev.supported)
                    for ev in self]
            return pd.DataFrame(rows)
        data = self.data
        scaled, counted = scale_cells(data)
        n_ev, n_cpu, n_thr, _ = data.shape
        L = self.layout
        return pd.DataFrame({
            "event": np.repeat(np.array(L.names, dtype=object), n_cpu * n_thr),
            "cpu": np.tile(np.repeat(np.array(L.cpus), n_thr), n_ev),
            "thread": np.tile(np.array(L.threads), n_ev * n_cpu),
            "value": data[..., VAL].reshape(-1),
            "time_enabled": data[..., ENA].reshape(-1),
            "time_running": data[..., RUN].reshape(-1),
            "scaled": scaled.reshape(-1),
            "counted": counted.reshape(-1),
        })

    def __repr__(self) -> str:
        parts = ", ".join(f"{ev.name}={ev.status or round(ev.scaled)}" for ev in self)
        return f"Counts({parts})"
