"""ExportProfile: the neutral, columnar input of every profile exporter
(pprof, speedscope, folded, push).

It is what the formats have in common and nothing more:

- ``frames``: the distinct frames (:class:`Frame`: name, file, line, address,
  mapping, kernel flag); a frame id is an index into this list;
- per sample *row* (a row may stand for many samples: its ``values`` say how
  much): its stack as frame ids (int32 or int64) **leaf first** (callee → caller, the kernel's
  and pprof's order) in ``stack[stack_offsets[i]:stack_offsets[i + 1]]``, or, when the
  ``stack_index`` column is set, in ``stack[stack_offsets[j]:stack_offsets[j + 1]]`` with
  ``j = stack_index[i]`` (``stack``/``stack_offsets`` then hold each distinct stack once: a
  profile of many rows sharing few stacks does not repeat them; :meth:`ExportProfile.row_stacks`
  gives the row-by-row arrays either way),
  its ``values`` (``int64[rows, len(sample_types)]``, one column per
  :attr:`ExportProfile.sample_types` entry), and optionally ``pid``, ``tid``,
  ``cpu``, ``time`` (ns) and ``comm`` (index into ``comms``) columns (-1: not
  known);
- ``mappings`` (:class:`Mapping`, with build ids; ``Frame.mapping`` is a
  1-based index into it, 0 = none), ``period_type``/``period``,
  ``time_nanos``/``duration_nanos``, ``comments``.

Build one with :func:`from_folded`, :func:`from_stacks` or
:func:`from_profile` (a :class:`pmuscope.profile.Profile`, read through its
documented columns).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping as TMapping, Sequence

import numpy as np

from .._np import ragged_index, uniq_first, uniq_inv
from ..errors import FormatError

#: event names whose samples weigh time (their period is in nanoseconds)
CLOCK_EVENTS = ("cpu-clock", "task-clock")


#: rows turned into folded lines at a time by :meth:`ExportProfile.folded`
FOLD_BATCH = 1 << 13


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: ``name`` (demangled), ``system_name`` (mangled, if different),
    ``file`` (source file or DSO path), ``line``, ``address`` (relative to
    its mapping's file: the value a symbolizer needs), ``mapping`` (1-based
    index into ``ExportProfile.mappings``, 0 = none), ``kernel``.
    (Slots: ~90 bytes a frame instead of ~350 with a ``__dict__``; a large
    recording's export holds tens of thousands.)"""

    name: str
    file: str = ""
    line: int = 0
    address: int = 0
    mapping: int = 0
    kernel: bool = False
    system_name: str = ""


@dataclass(frozen=True)
class Mapping:
    """A binary the samples ran in: ``memory_start``/``memory_limit`` of the
    addresses its frames carry, ``file_offset`` of ``memory_start`` in the
    file, ``filename``, ``build_id`` (hex, "" when unknown)."""

    filename: str
    memory_start: int = 0
    memory_limit: int = 0
    file_offset: int = 0
    build_id: str = ""
    has_functions: bool = True


@dataclass
class ExportProfile:
    """See the module docstring. ``validate()`` checks the columns agree."""

    sample_types: list[tuple[str, str]]
    frames: list[Frame]
    stack: np.ndarray
    stack_offsets: np.ndarray
    values: np.ndarray
    pid: np.ndarray | None = None
    tid: np.ndarray | None = None
    cpu: np.ndarray | None = None
    time: np.ndarray | None = None
    comm: np.ndarray | None = None
    comms: list[str] = field(default_factory=list)
    mappings: list[Mapping] = field(default_factory=list)
    period_type: tuple[str, str] | None = None
    period: int = 0
    time_nanos: int = 0
    duration_nanos: int = 0
    comments: list[str] = field(default_factory=list)
    default_sample_type: str = ""
    name: str = "pmuscope"
    #: each row's stack number (see the module docstring), or None: a stack per row
    stack_index: np.ndarray | None = None

    def __len__(self) -> int:
        if self.stack_index is not None:
            return len(self.stack_index)
        return len(self.stack_offsets) - 1

    def stack_of(self, row: int) -> np.ndarray:
        """Frame ids of row ``row``, leaf first."""
        j = row if self.stack_index is None else int(self.stack_index[row])
        return self.stack[self.stack_offsets[j]:self.stack_offsets[j + 1]]

    def row_bounds(self, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, ends)`` (int64) of the stacks of ``rows`` (an index array; default
        every row) in :attr:`stack`."""
        off = np.asarray(self.stack_offsets, dtype=np.int64)
        j = np.asarray(self.stack_index, dtype=np.int64) if self.stack_index is not None else None
        if rows is not None:
            j = np.asarray(rows, dtype=np.int64) if j is None else j[rows]
        if j is None:
            return off[:-1], off[1:]
        return off[j], off[j + 1]

    def batch_stacks(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        """``(frame ids, offsets from 0)`` of the stacks of rows ``r0`` to ``r1`` (excluded)
        one after the other: a slice of :attr:`stack` without ``stack_index``, else gathered."""
        if self.stack_index is None:
            s0 = int(self.stack_offsets[r0])
            return (self.stack[s0:int(self.stack_offsets[r1])],
                    np.asarray(self.stack_offsets[r0:r1 + 1], dtype=np.int64) - s0)
        starts, ends = self.row_bounds(np.arange(r0, r1, dtype=np.int64))
        idx, off = ragged_index(starts, ends - starts)
        return self.stack[idx], off

    def row_stacks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(stack, stack_offsets)`` with one stack per row (those of the profile itself
        when it has no ``stack_index``)."""
        if self.stack_index is None:
            return self.stack, np.asarray(self.stack_offsets, dtype=np.int64)
        return self.batch_stacks(0, len(self))

    def totals(self) -> dict[str, int]:
        """Sum of each sample type's column: ``{"samples": 120, "cycles": ...}``."""
        return {t: int(self.values[:, i].sum()) for i, (t, _u) in enumerate(self.sample_types)}

    def validate(self) -> "ExportProfile":
        n = len(self)
        if self.values.shape != (n, len(self.sample_types)):
            raise FormatError(f"values has shape {self.values.shape}, expected ({n}, {len(self.sample_types)})")
        if len(self.stack) and (self.stack.min() < 0 or self.stack.max() >= len(self.frames)):
            raise FormatError("a stack refers to a frame id outside frames")
        if self.stack_index is not None and n and (
                int(self.stack_index.min()) < 0 or int(self.stack_index.max()) >= len(self.stack_offsets) - 1):
            raise FormatError("stack_index refers to a stack outside stack_offsets")
        for col in ("pid", "tid", "cpu", "time", "comm"):
            a = getattr(self, col)
            if a is not None and len(a) != n:
                raise FormatError(f"column {col} has {len(a)} rows, expected {n}")
        if any(f.mapping < 0 or f.mapping > len(self.mappings) for f in self.frames):
            raise FormatError("a frame refers to a mapping outside mappings")
        return self

    def folded(self, sample_type: int | str = 0, *, comm: bool = False) -> Counter:
        """Folded stacks (root first, ``;``-joined) weighted by one sample type's
        column; with ``comm`` the process name is the root frame."""
        from ..profile.folded import frame_name

        k = self.sample_type_index(sample_type)
        names = [frame_name(f.name + ("_[k]" if f.kernel and not f.name.endswith("_[k]") else "")) for f in self.frames]
        out: Counter = Counter()
        vals_all = self.values[:, k]
        use_comm = comm and self.comm is not None
        # a batch of rows at a time: Python ints of every frame id at once weighed ~40 bytes each
        for r0 in range(0, len(self), FOLD_BATCH):
            r1 = min(r0 + FOLD_BATCH, len(self))
            st, off = self.batch_stacks(r0, r1)
            st, off = st.tolist(), off.tolist()
            vals = vals_all[r0:r1].tolist()
            comm_col = self.comm[r0:r1].tolist() if use_comm else None
            for i, v in enumerate(vals):
                if not v:
                    continue
                parts = [names[j] for j in reversed(st[off[i]:off[i + 1]])]
                if comm_col is not None:
                    c = comm_col[i]
                    parts.insert(0, frame_name(self.comms[c]) if c >= 0 else "[unknown]")
                out[";".join(parts)] += int(v)
        return out

    def sample_type_index(self, sample_type: int | str) -> int:
        if isinstance(sample_type, int):
            if not 0 <= sample_type < len(self.sample_types):
                raise FormatError(f"no sample type #{sample_type} (have {len(self.sample_types)})")
            return sample_type
        for i, (t, _u) in enumerate(self.sample_types):
            if t == sample_type:
                return i
        raise FormatError(f"no sample type {sample_type!r}; have {', '.join(t for t, _ in self.sample_types)}")


def from_stacks(
    stacks: Iterable[tuple[Sequence[str], int | Sequence[int]]],
    sample_types: Sequence[tuple[str, str]] = (("samples", "count"),),
    **kwargs,
) -> ExportProfile:
    """``(frame names root first, value or values)`` pairs → ExportProfile
    (frames deduplicated by name, rows in the given order)."""
    frame_ids: dict[str, int] = {}
    flat: list[int] = []
    offsets = [0]
    vals: list[Sequence[int]] = []
    k = len(sample_types)
    for names, value in stacks:
        for n in reversed(list(names)):
            flat.append(frame_ids.setdefault(n, len(frame_ids)))
        offsets.append(len(flat))
        v = [int(value)] if isinstance(value, (int, np.integer)) else [int(x) for x in value]
        if len(v) != k:
            raise FormatError(f"stack {';'.join(names)!r} has {len(v)} values for {k} sample types")
        vals.append(v)
    frames = [Frame(n.removesuffix("_[k]"), kernel=n.endswith("_[k]")) for n in frame_ids]
    return ExportProfile(
        sample_types=[tuple(t) for t in sample_types],
        frames=frames,
        stack=np.asarray(flat, dtype=np.int64),
        stack_offsets=np.asarray(offsets, dtype=np.int64),
        values=np.asarray(vals, dtype=np.int64).reshape(len(vals), k),
        **kwargs,
    ).validate()


def from_folded(
    folded: str | TMapping[str, int],
    sample_type: tuple[str, str] = ("samples", "count"),
    **kwargs,
) -> ExportProfile:
    """Folded stacks (text in flamegraph.pl's format, or a ``{stack: count}``
    mapping) → ExportProfile with one sample type."""
    from ..profile.folded import parse_folded

    if isinstance(folded, str):
        folded = parse_folded(folded)
    return from_stacks(((stack.split(";"), count) for stack, count in folded.items()), [sample_type], **kwargs)


def _sample_types_for(event_names: Sequence[str]) -> list[tuple[str, str]]:
    types = [("samples", "count")]
    used = {"samples"}
    for name in event_names:
        base = name.split(":")[0]
        if base in CLOCK_EVENTS:
            t = ("cpu", "nanoseconds") if "cpu" not in used else (base, "nanoseconds")
        else:
            t = (name, "count")
        used.add(t[0])
        types.append(t)
    return types


def from_profile(p, *, build_ids: TMapping[str, str] | None = None, aggregate: bool = True,
                 comments: Sequence[str] = (), collapsed=None) -> ExportProfile:
    """A :class:`pmuscope.profile.Profile` → ExportProfile.

    Sample types: ``samples/count`` first (pprof's convention), then one per
    event: ``<event>/count`` weighted by the sample period, or for a clock
    event (cpu-clock, task-clock) ``cpu/nanoseconds``. ``period_type`` and
    ``period`` come from the first event (the median period of its samples).
    Frames carry mapping-relative addresses (``frame_addr``), one
    :class:`Mapping` per DSO with its ``build_ids[path]`` when given. With
    ``aggregate``, samples of the same stack, pid, tid, cpu and comm become one
    row (values summed); ``time`` is then the first sample's.

    ``collapsed``: the :class:`~pmuscope.profile.collapse.Collapser` that made
    ``p`` (rows standing for ``p.count`` samples each), for what needs every
    sample: the first event's median period and the newest time.
    """
    out, stack_ids = export_rows(p, build_ids=build_ids, comments=comments, collapsed=collapsed)
    return aggregate_rows(out, stack_ids=stack_ids) if aggregate else out.validate()


def _int_column(a) -> np.ndarray:
    """``a`` as a signed integer array without copying it when it is one already
    (a uint64 column is viewed as int64: the values :func:`np.asarray` would give)."""
    a = np.asarray(a)
    if a.dtype == np.uint64:
        return a.view(np.int64)
    if a.dtype.kind != "i":
        return a.astype(np.int64)
    return a


def export_rows(p, *, build_ids: TMapping[str, str] | None = None, comments: Sequence[str] = (),
                collapsed=None) -> tuple[ExportProfile, np.ndarray | None]:
    """:func:`from_profile` before its rows are merged: ``(ExportProfile,
    stack ids)``, the stack ids being what :func:`aggregate_rows` may group the
    stacks by (a collapsed profile's chain ids) or None. For a caller that lets
    the profile go before merging (the merge's temporaries then reuse its memory).

    When ``collapsed`` made ``p`` with ``profile(final=True, stacks=False)``, the
    rows' stacks are its interned chains: the ExportProfile holds each chain once
    and a ``stack_index`` (the chain ids) per row."""
    n = len(p)
    cnt = p.count if collapsed is not None else None
    event_names = list(p.event_names)
    sample_types = _sample_types_for(event_names)
    chained = collapsed is not None and p.has_callchain and getattr(collapsed, "chain_stacks", None) is not None
    frames_ids, offsets = collapsed.chain_stacks if chained else p.stacks()
    nframes = len(p.frame_ip)
    # -- mappings: one per DSO used by a frame; pprof shows mapping[0] as "the main binary",
    # so the executable (not a .so, not [kernel...]) with the most leaf samples goes first
    # (a set, not np.unique: that imports numpy.ma, ~10 ms, on its first plain call)
    dso_ids = sorted({d for d in np.asarray(p.frame_dso).tolist() if d >= 0}) if nframes else []
    leaf_dso = np.asarray(p.frame_dso)[np.asarray(p.leaf)] if n and nframes else np.zeros(0, np.int64)
    if len(leaf_dso) and int(leaf_dso.min()) >= -1:
        # DSO ids are small (-1: none): one counting pass, no sort of every row
        per = np.bincount(leaf_dso + 1, weights=cnt).tolist()
        hits = {d - 1: int(c) for d, c in enumerate(per) if c}
    elif cnt is None:
        hits = {int(d): int(c) for d, c in zip(*np.unique(leaf_dso, return_counts=True))}
    else:
        ud, dinv = np.unique(leaf_dso, return_inverse=True)
        hits = {int(d): int(c) for d, c in zip(ud, np.bincount(dinv.reshape(-1), weights=cnt, minlength=len(ud)))}
    del leaf_dso

    def _rank(d: int) -> tuple:
        name = p.dso_name(d)
        library = name.startswith("[") or ".so" in os.path.basename(name)
        return (library, -hits.get(d, 0), d)

    dso_ids.sort(key=_rank)
    mapping_of: dict[int, int] = {}
    mappings: list[Mapping] = []
    build_ids = build_ids or {}
    for d in dso_ids:
        sel = p.frame_dso == d
        addrs = p.frame_addr[sel].astype(np.uint64)
        path = p.dso_name(d)
        limit = min(int(addrs.max()) + 1, (1 << 64) - 1) if len(addrs) else 0
        # user frames carry file offsets (start 0); kernel-style names carry real addresses
        start = int(addrs.min()) if path.startswith("[") and len(addrs) else 0
        mappings.append(Mapping(path, start, limit, 0, build_ids.get(path, ""), True))
        mapping_of[d] = len(mappings)
    from ..profile.export import frame_labels  # perf's frame naming: symbol, else [dso], else [unknown]

    names = frame_labels(p, annotate_kernel=False) if nframes else []
    dso_file = {d: p.dso_name(d) for d in dso_ids}
    frames = [Frame(name, dso_file.get(d, "") if d >= 0 else "", 0, int(a), mapping_of.get(d, 0), bool(k), "")
              for name, d, a, k in zip(names, p.frame_dso.tolist(), p.frame_addr.tolist(), p.frame_kernel.tolist())]
    values = np.zeros((n, len(sample_types)), dtype=np.int64)
    values[:, 0] = 1 if cnt is None else cnt
    if n:
        ev = np.asarray(p.event)  # its own small integer type: compared, not copied
        period = _int_column(p.period)
        for e in range(len(event_names)):
            m = ev == e
            values[m, 1 + e] = period[m]
    period_type = sample_types[1] if len(sample_types) > 1 else None
    period_value = 0
    if n and event_names and collapsed is not None:
        from ..profile.collapse import weighted_median

        pv, pc = collapsed.period_histogram()
        period_value = int(weighted_median(pv, pc)) if len(pv) else 0
    elif n and event_names:
        first = np.asarray(p.period)[np.asarray(p.event) == 0]
        period_value = int(np.median(first)) if len(first) else 0
    # label columns in the profile's own integer types (cpu and comm are int32 there): the
    # writers widen what they use a batch at a time; time's uint64 read as int64 in place
    cpu = _int_column(p.cpu) if getattr(p, "has_cpu", True) else None
    time = _int_column(p.time) if getattr(p, "has_time", True) else None
    # frame ids as the profile holds them (int32): shared, not copied (a 64-bit copy of a large
    # recording's stacks was the biggest transient of an export)
    stack = np.asarray(frames_ids)
    if stack.dtype not in (np.int32, np.int64):
        stack = stack.astype(np.int64)
    stack_offsets = np.asarray(offsets, dtype=np.int64)
    pid = _int_column(p.pid)
    tid = _int_column(p.tid)
    comm = _int_column(p.comm)
    t0 = int(time.min()) if time is not None and n else 0
    t1 = int(time.max()) if time is not None and n else 0
    if time is not None and n and collapsed is not None:
        # a row's time is its first sample's: the oldest and newest of every sample
        t0, t1 = collapsed.time_min, collapsed.time_max
    out = ExportProfile(
        sample_types=sample_types, frames=frames, stack=stack, stack_offsets=stack_offsets, values=values,
        pid=pid, tid=tid, cpu=cpu, time=time, comm=comm, comms=list(p.comms), mappings=mappings,
        period_type=period_type, period=period_value, time_nanos=0, duration_nanos=max(t1 - t0, 0),
        comments=list(comments), default_sample_type=sample_types[1][0] if len(sample_types) > 1 else "",
        name=getattr(p, "source", "") or "pmuscope",
        stack_index=np.asarray(collapsed.row_chains, dtype=np.int64) if chained else None,
    )
    # collapsed rows whose stacks are interned chains: the chain ids group the stacks already
    chains = collapsed.row_chains if collapsed is not None and p.has_callchain else None
    return out, (chains if chains is not None and len(chains) == n else None)


def vectorized() -> bool:
    """The vectorized row grouping and pprof sample encoding (default), or with
    ``PMUSCOPE_EXPORT_VECTOR=0`` the reference loops they must equal byte for byte."""
    return os.environ.get("PMUSCOPE_EXPORT_VECTOR", "1") != "0"


def _stack_ids_dict(stack: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A stack id per row (identical frame sequences share it): the reference, a dict of row bytes."""
    n = len(offsets) - 1
    stack_key: dict[bytes, int] = {}
    st = stack.astype(np.int64)
    off = offsets.tolist()
    return np.fromiter((stack_key.setdefault(st[off[i]:off[i + 1]].tobytes(), len(stack_key)) for i in range(n)),
                       dtype=np.int64, count=n)


#: rows hashed / checked per batch in :func:`_stack_ids` (bounds its temporaries)
STACK_BATCH = 1 << 13


def _stack_ids(stack: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Group ids of the rows' frame sequences (equal sequences, equal ids; the ids
    themselves are arbitrary). Vectorized: rows are grouped by (length, polynomial
    hash), then every row is compared element by element with its group's first
    row; a hash collision (never seen) falls back to :func:`_stack_ids_dict`.
    Batches of rows keep the temporaries small."""
    n = len(offsets) - 1
    off = np.asarray(offsets, dtype=np.int64)
    lens = np.diff(off)
    if int(off[-1]) == int(off[0]):
        return np.zeros(n, dtype=np.int64)
    h = np.empty(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        pw = np.full(int(lens.max()), 0x9E3779B97F4A7C15, dtype=np.uint64)
        pw[0] = 1
        pw = np.cumprod(pw, dtype=np.uint64)
        for r0 in range(0, n, STACK_BATCH):
            r1 = min(r0 + STACK_BATCH, n)
            a, b = int(off[r0]), int(off[r1])
            seg = np.asarray(stack[a:b], dtype=np.int64).view(np.uint64)
            rel = off[r0:r1 + 1] - a
            pos = np.arange(b - a, dtype=np.int64) - np.repeat(rel[:-1], lens[r0:r1])  # index inside the row
            cs = np.zeros(b - a + 1, dtype=np.uint64)
            np.cumsum((seg + np.uint64(0x632BE59BD9B4E019)) * pw[pos], out=cs[1:])
            h[r0:r1] = cs[rel[1:]] - cs[rel[:-1]]
        h ^= lens.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
    _u, first, grp = np.unique(h, return_index=True, return_inverse=True)
    grp = grp.reshape(-1)
    rep = first[grp]  # each row's group representative
    if not np.array_equal(lens[rep], lens):
        return _stack_ids_dict(stack, offsets)
    for r0 in range(0, n, STACK_BATCH):
        r1 = min(r0 + STACK_BATCH, n)
        ln = lens[r0:r1]
        step = np.arange(int(off[r1] - off[r0]), dtype=np.int64) - np.repeat(off[r0:r1] - off[r0], ln)
        if not np.array_equal(stack[np.repeat(off[rep[r0:r1]], ln) + step], stack[int(off[r0]):int(off[r1])]):
            return _stack_ids_dict(stack, offsets)
    return grp.astype(np.int64, copy=False)


def _codes(c: np.ndarray) -> tuple[np.ndarray, int]:
    """``np.unique(c, return_inverse=True)``'s inverse (each value's rank among the
    distinct values) and the number of distinct values; by a table of the values'
    range when it is small (labels, chain ids: no sort, fewer temporaries)."""
    n = len(c)
    lo, hi = int(c.min()), int(c.max())
    if hi - lo < 2 * n + 65536:
        d = c - lo
        rank = np.zeros(hi - lo + 1, dtype=np.int64)
        rank[d] = 1
        np.cumsum(rank, out=rank)
        return rank[d] - 1, int(rank[-1])
    u, inv = uniq_inv(c)
    return inv, len(u)


def _group_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inv)`` of the distinct rows of the int64 columns ``cols``:
    ``first`` the index of each group's first row (groups in any order),
    ``inv`` each row's group."""
    # one int64 key per row, column by column (each column's codes dropped once folded in)
    key = np.zeros(len(cols[0]), dtype=np.int64)
    radix = 1
    for c in cols:
        inv, k = _codes(c)
        radix *= max(k, 1)
        if radix >= (1 << 62):
            break
        key *= k
        key += inv
    else:
        _u, first, inv = uniq_first(key)
        return first, inv
    del key
    _u, first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def aggregate_rows(ep: ExportProfile, *, stack_ids: np.ndarray | None = None) -> ExportProfile:
    """Merge rows with the same stack and labels (pid, tid, cpu, comm), summing
    their values; the merged row keeps the earliest time. ``stack_ids``: a
    group id per row that is equal exactly when the rows' stacks are (a
    collapser's chain ids), instead of hashing the stacks (not with
    ``PMUSCOPE_EXPORT_VECTOR=0``: the reference always compares them)."""
    n = len(ep)
    if n == 0:
        return ep.validate()
    # a stack id per row: identical frame sequences share it
    vector = vectorized()
    indexed = ep.stack_index is not None
    if vector and stack_ids is not None:
        sid = np.asarray(stack_ids, dtype=np.int64)
    elif vector and indexed:
        # distinct stacks may still be equal sequences (made by hand): their ids, then each row's
        sid = _stack_ids(ep.stack, ep.stack_offsets)[np.asarray(ep.stack_index, dtype=np.int64)]
    else:
        rs, roff = ep.row_stacks()  # the reference compares every row's own frames
        sid = _stack_ids(rs, roff) if vector else _stack_ids_dict(rs, roff)
        del rs, roff
    cols = [sid]
    for name in ("pid", "tid", "cpu", "comm"):
        a = getattr(ep, name)
        cols.append(np.asarray(a, dtype=np.int64) if a is not None else np.zeros(n, dtype=np.int64))
    if vector:
        first, inv = _group_rows(cols)
    else:  # the reference
        _u, first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
    order = np.argsort(first, kind="stable")  # keep first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    new = rank[inv]
    m = len(first)
    if vector and m == n and (indexed or int(ep.stack_offsets[0]) == 0):  # nothing to merge: the rows as they are
        return ExportProfile(
            sample_types=ep.sample_types, frames=ep.frames, stack=ep.stack,
            stack_offsets=np.asarray(ep.stack_offsets, dtype=np.int64),
            values=np.asarray(ep.values, dtype=np.int64), pid=ep.pid, tid=ep.tid, cpu=ep.cpu, comm=ep.comm, comms=ep.comms,
            time=None if ep.time is None else np.asarray(ep.time, dtype=np.int64), mappings=ep.mappings,
            period_type=ep.period_type, period=ep.period, time_nanos=ep.time_nanos,
            duration_nanos=ep.duration_nanos, comments=ep.comments, default_sample_type=ep.default_sample_type,
            name=ep.name, stack_index=ep.stack_index,
        ).validate()
    values = np.zeros((m, ep.values.shape[1]), dtype=np.int64)
    np.add.at(values, new, ep.values)
    rows = first[order]
    if indexed:  # the merged rows point at the same distinct stacks
        stack, new_off = ep.stack, np.asarray(ep.stack_offsets, dtype=np.int64)
        stack_index = np.asarray(ep.stack_index, dtype=np.int64)[rows]
    else:
        idx, new_off = ragged_index(ep.stack_offsets[:-1][rows], np.diff(ep.stack_offsets)[rows])
        stack, stack_index = ep.stack[idx], None
    time = None
    if ep.time is not None:
        time = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(time, new, np.asarray(ep.time, dtype=np.int64))

    def take(a):
        return None if a is None else np.asarray(a)[rows]

    return ExportProfile(
        sample_types=ep.sample_types, frames=ep.frames, stack=stack, stack_offsets=new_off, values=values,
        pid=take(ep.pid), tid=take(ep.tid), cpu=take(ep.cpu), time=time, comm=take(ep.comm), comms=ep.comms,
        mappings=ep.mappings, period_type=ep.period_type, period=ep.period, time_nanos=ep.time_nanos,
        duration_nanos=ep.duration_nanos, comments=ep.comments, default_sample_type=ep.default_sample_type,
        name=ep.name, stack_index=stack_index,
    ).validate()
