"""Results of a counting read: raw values, enabled/running times, perf's scaling,
per-CPU / per-thread cells and their aggregation.

Scaling is perf's (``perf_counts_values__scale``): per (cpu, thread) cell,
``scaled = value * time_enabled / time_running`` when ``0 < running < enabled``,
``value`` when running == enabled, and 0 with the cell marked *not counted* when
``running == 0``. Aggregates sum the scaled cells (and the raw values and times);
an aggregate is *not counted* only when every cell is.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple, Sequence

from .. import errors
from .._lazy import numpy as _numpy

if TYPE_CHECKING:
    import numpy as np

# numpy is imported on first use: a command's few read units are scaled and
# summed in plain Python (see Counts._small), so `stat` of a command never loads it

VAL, ENA, RUN = 0, 1, 2

#: up to this many read units, aggregates are computed in plain Python
_PY_CELLS = 16
_STRUCTS: dict[int, struct.Struct] = {}


def _struct_for(size: int) -> struct.Struct:
    st = _STRUCTS[size] = struct.Struct(f"={size // 8}Q")
    return st


def _unpack(buf: bytes) -> tuple:
    return (_STRUCTS.get(len(buf)) or _struct_for(len(buf))).unpack(buf)


def _cell_struct(k: int) -> struct.Struct:
    """The words of one cell in a read buffer, skipping the rest: ``(value,
    time_enabled, time_running)`` of a lone event (``k`` -1, ``{value; ena; run;
    id}``), ``(nr, time_enabled, time_running, value)`` of member ``k`` of a group
    read (``{nr; ena; run; {value; id} cntr[nr]}``)."""
    return struct.Struct("=3Q" if k < 0 else f"=3Q{16 * k}xQ")


_BUFFERS = (bytes, bytearray, memoryview)


def _cell(raw: bytes | tuple, k: int) -> tuple[int, int, int] | None:
    """``(value, time_enabled, time_running)`` of member ``k`` (-1: a lone event)
    of a read buffer or its unpacked words; None when a group read returned
    fewer than ``k + 1`` members."""
    if isinstance(raw, _BUFFERS):
        raw = _unpack(raw)
    if k < 0:
        return raw[0], raw[1], raw[2]
    if k < raw[0]:
        return raw[3 + 2 * k], raw[1], raw[2]
    return None


def _one_cell(meta: tuple, v: int, e: int, r: int) -> "EventCount":
    """The EventCount of an event with one cell (``Counts._event_sum`` over that
    cell: sums from 0 and 0.0 change nothing); ``meta`` is its
    ``Layout.event_meta`` entry."""
    name, sup, unit, scale, error = meta
    scaled = (v * e / r if r < e else float(v)) if r else 0.0
    return _tuple_new(EventCount, (name, v, e, r, scaled, r != 0 if sup else False, sup, unit, scale, error))


#: ``EventCount`` built from a ready tuple: the NamedTuple's own ``__new__`` is a
#: Python function with defaults (~3x the cost for ten fields)
_tuple_new = tuple.__new__

_MODIFIER_CHARS = frozenset("ukhIGHpPSDWe")


def base_name(name: str) -> str:
    """The event name without a perf modifier suffix (``cycles:u`` → ``cycles``)."""
    head, colon, mods = name.rpartition(":")
    if colon and mods and _MODIFIER_CHARS.issuperset(mods):
        return head
    return name


#: Layout's fields, in order: compared, hashed and shown by repr
_LAYOUT_FIELDS = ("names", "units", "scales", "supported", "errors", "cpus", "threads", "units_plan", "system_wide")


class Layout:
    """What a Counts needs from its session (fixed once the fds are open).

    Immutable, compared and hashed by its fields like a frozen dataclass (a
    plain class: creating a dataclass costs ~0.3 ms of every start-up).
    ``units_plan`` has per read unit ``(grouped, member event indices,
    cpu_idx, thread_idx)``."""

    # slots: attribute reads on the read-then-look-up path cost a third
    __slots__ = _LAYOUT_FIELDS + ("index", "event_cells", "event_meta")

    names: tuple[str, ...]
    units: tuple[str, ...]
    scales: tuple[float, ...]
    supported: tuple[bool, ...]
    errors: tuple[str | None, ...]
    cpus: tuple[int, ...]
    threads: tuple[int, ...]
    units_plan: tuple[tuple[bool, tuple[int, ...], int, int], ...]
    system_wide: bool
    #: derived in __init__ (once per session), for the read-then-look-up path:
    #: event name → position (exact names win, then the first event whose name
    #: without a modifier matches: ``"cycles"`` finds ``"cycles:u"``) ...
    index: dict[str, int]
    #: ... per event its cells in read-unit order: ``(unit, k, take)`` with ``k`` the
    #: member position in a group read (-1 for an event read alone) and ``take`` the
    #: ``unpack_from`` of just the words it needs: ``(value, ena, run)`` alone,
    #: ``(nr, ena, run, value)`` in a group ...
    event_cells: tuple[tuple[tuple[int, int, Callable], ...], ...]
    #: ... and per event the EventCount fields fixed for the session
    #: ``(name, supported, unit, scale, error)``
    event_meta: tuple[tuple[str, bool, str, float, str | None], ...]

    def __init__(self, names: tuple[str, ...], units: tuple[str, ...], scales: tuple[float, ...],
                 supported: tuple[bool, ...], errors: tuple[str | None, ...], cpus: tuple[int, ...],
                 threads: tuple[int, ...], units_plan: tuple[tuple[bool, tuple[int, ...], int, int], ...],
                 system_wide: bool = False) -> None:
        setattr_ = object.__setattr__  # frozen: fields are set once, here
        for k, v in zip(_LAYOUT_FIELDS, (names, units, scales, supported, errors, cpus, threads, units_plan,
                                         system_wide)):
            setattr_(self, k, v)
        self._derive()

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def _fields(self) -> tuple:
        return tuple(getattr(self, f) for f in _LAYOUT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self):  # copy and pickle through __init__ (which derives the rest)
        return (self.__class__, self._fields())

    def __repr__(self) -> str:
        return "Layout(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _LAYOUT_FIELDS) + ")"

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

    def _derive(self) -> None:
        idx: dict[str, int] = {}
        for i, name in enumerate(self.names):
            idx.setdefault(name, i)
        for i, name in enumerate(self.names):
            idx.setdefault(base_name(name), i)
        cells: list[list[tuple[int, int, Callable]]] = [[] for _ in self.names]
        for u, (grouped, members, _ci, _ti) in enumerate(self.units_plan):
            if grouped:
                for k, i in enumerate(members):
                    cells[i].append((u, k, _cell_struct(k).unpack_from))
            else:
                cells[members[0]].append((u, -1, _cell_struct(-1).unpack_from))
        meta = tuple(zip(self.names, self.supported, self.units, self.scales, self.errors))
        object.__setattr__(self, "index", idx)
        object.__setattr__(self, "event_cells", tuple(tuple(c) for c in cells))
        object.__setattr__(self, "event_meta", meta)


def decode(layout: Layout, raws: Sequence[bytes | tuple]) -> np.ndarray:
    """read() buffers (or their unpacked tuples) → ``uint64[event, cpu, thread, (value, ena, run)]``."""
    np = _numpy()
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
    np = _numpy()
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
        # the read path builds one of these per read(): plain stores, the rest is lazy.
        # Every slot is set (None = not computed yet): reading an unset slot raises
        # AttributeError, and catching it cost more than the whole read.
        # (pmuscope._native.CountsReader fills the same slots without calling this.)
        self.layout = layout
        self._raws = raws
        self.timestamp_ns = timestamp_ns
        self.start_ns = start_ns
        self._data = data
        self._agg = None

    # -- raw data -----------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        """``uint64[event, cpu, thread, (value, time_enabled, time_running)]``."""
        data = self._data
        if data is None:
            data = self._data = decode(self.layout, self._raws or ())
        return data

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
        np = _numpy()
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

    def _small(self) -> bool:
        """True when the aggregates are cheaper in plain Python than in numpy:
        a few read units not decoded into arrays yet."""
        raws = self._raws
        return self._data is None and raws is not None and len(raws) <= _PY_CELLS

    def _aggregate_all(self) -> list[EventCount]:
        agg = self._agg
        if agg is None:
            if self._small():
                agg = self._aggregate_small()
            else:
                data = self.data
                scaled, counted = scale_cells(data)
                agg = [self._make(i, data[i], scaled[i], counted[i]) for i in range(len(self.layout.names))]
            self._agg = agg
        return agg

    def _aggregate_small(self) -> list[EventCount]:
        """The same sums and scaling as the numpy path, in plain Python: for a
        few read units this is far cheaper than building arrays."""
        L = self.layout
        raws = [_unpack(raw) if isinstance(raw, _BUFFERS) else raw for raw in self._raws]  # each unit once
        out = []
        for i, cells in enumerate(L.event_cells):
            if len(cells) == 1:  # one cell (one thread or CPU): no sums
                u, k, _take = cells[0]
                words = raws[u]
                if k < 0:
                    out.append(_one_cell(L.event_meta[i], words[0], words[1], words[2]))
                    continue
                if k < words[0]:  # a group read returns nr members
                    out.append(_one_cell(L.event_meta[i], words[3 + 2 * k], words[1], words[2]))
                    continue
            out.append(self._event_sum(i, raws))
        return out

    def _event_sum(self, i: int, raws: Sequence[bytes | tuple]) -> EventCount:
        """Event ``i`` summed over its cells in read-unit order, each scaled as
        perf does. ``raws`` are read buffers or their unpacked words."""
        val = ena = run = 0
        scaled = 0.0
        counted = False
        for u, k, _take in self.layout.event_cells[i]:
            cell = _cell(raws[u], k)
            if cell is None:
                continue
            v, e, r = cell
            val += v
            ena += e
            run += r
            if r:
                counted = True
                scaled += v * e / r if r < e else float(v)
        name, sup, unit, scale, error = self.layout.event_meta[i]
        return _tuple_new(EventCount, (name, val, ena, run, scaled, counted if sup else False, sup, unit, scale, error))

    def __getitem__(self, name: str) -> EventCount:
        L = self.layout
        i = L.index.get(name)
        if i is None:
            raise KeyError(f"no event {name!r} in these counts (have {', '.join(L.names)})")
        agg = self._agg
        if agg is not None:
            return agg[i]
        raws = self._raws
        if self._data is not None or raws is None or len(raws) > _PY_CELLS:
            return self._aggregate_all()[i]
        # right after a read: this event alone, not all of them
        cells = L.event_cells[i]
        if len(cells) == 1 and type(raws[cells[0][0]]) is bytes:
            # the common case, one cell (one thread or CPU) in a read buffer: unpack only its words
            u, k, take = cells[0]
            try:
                words = take(raws[u])
            except struct.error:  # a buffer shorter than the plan's: _event_sum copes
                return self._event_sum(i, raws)
            if k < 0:
                v, e, r = words
            elif k < words[0]:  # a group read returns nr members
                _, e, r, v = words
            else:
                return self._event_sum(i, raws)
            # _one_cell(), inlined: a call is a tenth of this lookup
            name, sup, unit, scale, error = L.event_meta[i]
            scaled = (v * e / r if r < e else float(v)) if r else 0.0
            return _tuple_new(EventCount, (name, v, e, r, scaled, r != 0 if sup else False, sup, unit, scale, error))
        return self._event_sum(i, raws)

    def __contains__(self, name: str) -> bool:
        return name in self.layout.index

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
        np = _numpy()
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
