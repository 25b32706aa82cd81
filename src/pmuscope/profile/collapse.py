"""A recording's samples collapsed as they are read: one row per distinct
sample (event, comm, pid, tid, cpu, cpumode, leaf frame, call chain) with the
sum of its periods and the number of samples it stands for
(``Profile.count``).

``report`` aggregates nothing else, so it reads a file of any size this way
in the memory of its distinct samples (and distinct call chains) instead of
every sample's frames. The chunks of
:func:`~pmuscope.profile.model.iter_profile_chunks` are collapsed one at a
time and the rows merged whenever they have doubled; call chains are interned
(one copy of each distinct chain). Rows come in the order of their first
sample, so a report's representatives (the first sample of each key, whose
comm a ``pid`` row shows) are the whole profile's.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .._np import uniq_inv
from .model import Profile, _native_resolve, _take_flat

#: the columns a row may be told apart by (``Collapser(keep=...)`` picks)
KEYS = ("event", "comm", "pid", "tid", "cpu", "cpumode", "leaf", "chain")


def keys_for_sort(sort: Iterable[str]) -> tuple[str, ...]:
    """The columns a report sorted by ``sort`` tells samples apart by: the
    event, comm, leaf frame and call chain, and pid, tid and cpu when sorted on."""
    sort = set(sort)
    if "pid" in sort:
        sort.add("tid")  # perf's "pid" rows are threads
    return ("event", "comm", *(k for k in ("pid", "tid", "cpu") if k in sort), "leaf", "chain")


def _reduce(cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Rows with equal keys merged: periods and counts summed, the earliest
    ``first`` (and its ``time``) kept."""
    n = len(cols["first"])
    if n <= 1:
        return cols
    order = np.lexsort(tuple(cols[k] for k in reversed(keys)))
    flag = np.zeros(n, dtype=bool)
    flag[0] = True
    for k in keys:
        v = cols[k][order]
        flag[1:] |= v[1:] != v[:-1]
    if flag.all():
        return cols
    starts = np.flatnonzero(flag)
    out = {k: cols[k][order[starts]] for k in keys}
    out["period"] = np.add.reduceat(cols["period"][order], starts)
    out["count"] = np.add.reduceat(cols["count"][order], starts)
    # the earliest sample of each run: its position among the run's rows
    fo = cols["first"][order]
    first = np.minimum.reduceat(fo, starts)
    run = np.cumsum(flag) - 1
    at = np.flatnonzero(fo == first[run])
    pick = np.empty(len(starts), dtype=np.int64)
    pick[run[at][::-1]] = at[::-1]  # the first such position of each run
    out["first"] = first
    out["time"] = cols["time"][order][pick]
    out["tid0"] = cols["tid0"][order][pick]
    return out


class Collapser:
    """Collapse chunk profiles (one recording, in order) into one profile.
    ``keep``: the columns rows are told apart by (all of :data:`KEYS` by
    default); the others read 0 in the collapsed profile."""

    def __init__(self, keep: Iterable[str] = KEYS) -> None:
        self.keys = tuple(k for k in KEYS if k in set(keep))
        self._chain_ids: dict[bytes, int] = {}
        self._chains: list[np.ndarray] = []
        self._parts: list[dict[str, np.ndarray]] = []
        self._rows = 0
        self._merged_rows = 0
        self._seen = 0
        self.last: Profile | None = None
        #: newest sample time seen (a row keeps its first sample's time), compared as the
        #: signed 64-bit numbers the export's time column holds (a damaged time of 2^64 - 1
        #: is -1 there, as it is to every other reader of that column)
        self.time_max: int | None = None
        #: the oldest sample time (compared as time_max)
        self.time_min: int | None = None
        self._p0: list[tuple[np.ndarray, np.ndarray]] = []  # (period, samples) of event 0, by chunk
        # rows and chains in one C hash table each (collapse_add), kept across chunks;
        # PMUSCOPE_NATIVE_RESOLVE=0: the numpy path (sort, reduce, merge when doubled)
        self._nat = _native_resolve()
        self._nkeys = tuple(k for k in self.keys if k != "chain")
        # a row's thread is its first sample's: kept apart only when tid is not a key
        self._keep_tid = "tid" not in self._nkeys
        self._ncol = (self._nat.collapse_new(len(self._nkeys), self._keep_tid)
                      if self._nat is not None else None)
        self._final = False
        #: after :meth:`profile`: each row's interned call chain id when the rows' stacks are
        #: those chains (equal ids, equal stacks and the other way round), else None
        self.row_chains: np.ndarray | None = None
        #: after :meth:`profile` with ``stacks=False``: the interned chains ``(frames, offsets)``
        self.chain_stacks: tuple[np.ndarray, np.ndarray] | None = None

    def _chain_of(self, c: Profile) -> np.ndarray:
        n = len(c)
        if not c.has_callchain or not len(c.stack):
            return np.zeros(n, dtype=np.int64)
        from .callchain import _distinct_chains

        cls, rep = _distinct_chains(c.stack, c.stack_offsets, np.zeros(n, dtype=np.int64))
        off = c.stack_offsets
        ids = self._chain_ids
        gid = np.empty(len(rep), dtype=np.int64)
        for j, r in enumerate(rep.tolist()):
            fr = c.stack[off[r]:off[r + 1]]
            key = fr.tobytes()
            g = ids.get(key)
            if g is None:
                g = ids[key] = len(self._chains)
                self._chains.append(fr.copy())
            gid[j] = g
        return gid[cls]

    def add(self, c: Profile) -> None:
        """Collapse one chunk into the rows."""
        if self._final:
            raise ValueError("the collapser was released by profile(final=True)")
        # what profile() needs of the chunk (its frame table, names, totals), not its
        # samples: the next chunk is then built without this one alive
        self.last = c.select(np.zeros(0, dtype=np.int64))
        n = len(c)
        if n == 0:
            return
        t = np.asarray(c.time).astype(np.int64, copy=False)
        tmax, tmin = int(t.max()), int(t.min())
        self.time_max = tmax if self.time_max is None else max(self.time_max, tmax)
        self.time_min = tmin if self.time_min is None else min(self.time_min, tmin)
        self._p0.append(_histogram(c.period[c.event == 0], None if c.count is None else c.count[c.event == 0]))
        if len(self._p0) >= 32:
            self._p0 = [_merge_histograms(self._p0)]
        if self._ncol is not None:
            self._add_native(c)
            return
        cols = {k: self._chain_of(c) if k == "chain" else getattr(c, k).astype(np.int64) for k in self.keys}
        cols.update({"period": c.period.astype(np.uint64), "time": c.time, "tid0": c.tid,
                     "count": np.ones(n, dtype=np.int64) if c.count is None else c.count.astype(np.int64),
                     "first": self._seen + np.arange(n, dtype=np.int64)})
        self._seen += n
        part = _reduce(cols, self.keys)
        self._parts.append(part)
        self._rows += len(part["first"])
        if self._rows >= 2 * self._merged_rows + 65536:
            self._merge()

    def _add_native(self, c: Profile) -> None:
        n = len(c)
        keys = np.empty((n, len(self._nkeys)), dtype=np.int64)
        for j, k in enumerate(self._nkeys):
            keys[:, j] = getattr(c, k)
        # a chunk without call-chain entries: chain 0 for every sample, as _chain_of gives
        chains = "chain" in self.keys and c.has_callchain and len(c.stack)
        self._nat.collapse_add(self._ncol, keys, np.ascontiguousarray(c.stack, dtype=np.int32) if chains else None,
                               np.ascontiguousarray(c.stack_offsets, dtype=np.int64),
                               np.ascontiguousarray(c.period, dtype=np.uint64),
                               None if c.count is None else np.ascontiguousarray(c.count, dtype=np.int64),
                               np.ascontiguousarray(c.time, dtype=np.uint64),
                               np.ascontiguousarray(c.tid, dtype=np.int64) if self._keep_tid else None)

    def _native_rows(self, final: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """The C rows (in first-sample order) as columns, and the chains (frames,
        offsets); ``final``: the C state hands its memory over (no copy) and is freed."""
        keys, period, count, time, cfr, coff, tid0 = self._nat.collapse_result(self._ncol, final)
        if final:
            self._ncol = None
        cols = {k: np.frombuffer(keys[j], dtype=np.int64) for j, k in enumerate(self._nkeys)}
        if "chain" in self.keys:
            cols["chain"] = np.frombuffer(keys[-1], dtype=np.int64)
        cols.update(period=np.frombuffer(period, dtype=np.uint64), count=np.frombuffer(count, dtype=np.int64),
                    time=np.frombuffer(time, dtype=np.uint64),
                    tid0=cols["tid"] if tid0 is None else np.frombuffer(tid0, dtype=np.int64))
        return cols, np.frombuffer(cfr, dtype=np.int32), np.frombuffer(coff, dtype=np.int64)

    def _merge(self) -> None:
        if len(self._parts) > 1:
            cols = {k: np.concatenate([p[k] for p in self._parts]) for k in self._parts[0]}
            self._parts = [_reduce(cols, self.keys)]
        self._rows = self._merged_rows = len(self._parts[0]["first"]) if self._parts else 0

    def profile(self, *, final: bool = False, stacks: bool = True) -> Profile:
        """The collapsed profile of every chunk added (rows by first sample).
        ``final``: no chunk is added nor profile asked for after this one, so the
        collapsing state (the rows' hash table, the interned chains) is freed as
        soon as the rows are read out, before the profile's columns are built;
        :meth:`period_histogram`, :attr:`time_max` and :attr:`time_min` stay.
        ``stacks=False`` (with ``final``, for a reader of :attr:`row_chains`): the
        rows' stacks are not copied out of the interned chains; the profile's
        ``stack`` is then empty, and row ``i``'s stack is chain ``row_chains[i]`` of
        :attr:`chain_stacks` ``(frames, offsets)``."""
        last = self.last
        if last is None:
            raise ValueError("no chunk was added")
        if self._final:
            raise ValueError("the collapser was released by profile(final=True)")
        if not stacks and not final:
            raise ValueError("profile(stacks=False) needs final=True")
        self._final = final
        native = self._ncol is not None
        if native:
            cols, flat, coff = self._native_rows(final)
            nrows = len(cols["period"])
            if not nrows:
                return last.select(np.zeros(0, dtype=np.int64))
            have_chains = len(coff) > 1
        else:
            self._merge()
            cols = self._parts[0] if self._parts else None
            if cols is None:
                return last.select(np.zeros(0, dtype=np.int64))
            order = np.argsort(cols["first"], kind="stable")
            cols = {k: v[order] for k, v in cols.items()}
            if final:
                self._parts = []
            nrows = len(order)
            have_chains = bool(self._chains)
        if "tid" not in cols:
            cols["tid"] = cols["tid0"]  # a row's thread: its first sample's, as its time (perf's he->thread)
        for k in KEYS:
            if k not in cols:
                cols[k] = np.zeros(nrows, dtype=np.int64)
        if last.has_callchain and have_chains:
            if not native:
                lens = np.fromiter((len(x) for x in self._chains), dtype=np.int64, count=len(self._chains))
                coff = np.zeros(len(lens) + 1, dtype=np.int64)
                np.cumsum(lens, out=coff[1:])
                flat = np.concatenate(self._chains).astype(np.int32, copy=False)
            if final:
                self._chains, self._chain_ids = [], {}
            self.row_chains = cols["chain"]
            if stacks:
                stack, st_off = _take_flat(flat, coff, cols["chain"])
            else:
                self.chain_stacks = (flat, coff)
                stack, st_off = np.zeros(0, dtype=np.int32), np.zeros(nrows + 1, dtype=np.int64)
        else:
            stack, st_off = np.zeros(0, dtype=np.int32), np.zeros(nrows + 1, dtype=np.int64)
            self.row_chains = None
        leaf = cols["leaf"].astype(np.int32)
        return Profile(
            pid=cols["pid"], tid=cols["tid"], cpu=cols["cpu"].astype(np.int32), time=cols["time"],
            period=cols["period"], event=cols["event"].astype(np.int16), comm=cols["comm"].astype(np.int32),
            ip=last.frame_ip[leaf], cpumode=cols["cpumode"].astype(np.uint8), leaf=leaf, stack=stack,
            stack_offsets=st_off, frame_ip=last.frame_ip, frame_addr=last.frame_addr, frame_dso=last.frame_dso,
            frame_sym=last.frame_sym, frame_off=last.frame_off, frame_kernel=last.frame_kernel, comms=last.comms,
            event_names=last.event_names, symbolizer=last.symbolizer, has_callchain=last.has_callchain,
            has_cpu=last.has_cpu, has_time=last.has_time, lost=last.lost, stats=last.stats, source=last.source,
            tp_formats=last.tp_formats, unwind_stats=last.unwind_stats, count=cols["count"],
            thread_comm=last.thread_comm)


    def period_histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """``(period, samples)`` of the first event's samples: each distinct
        period (sorted) and how many samples had it."""
        return _merge_histograms(self._p0)


def _histogram(v: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if not len(v):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    u, inv = uniq_inv(v)
    cnt = np.bincount(inv.reshape(-1), weights=w, minlength=len(u))
    return u, cnt.astype(np.int64)


def _merge_histograms(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return parts[0]
    return _histogram(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def weighted_median(values: np.ndarray, counts: np.ndarray) -> float:
    """``np.median`` of ``values[i]`` repeated ``counts[i]`` times (``values`` sorted)."""
    n = int(counts.sum())
    ends = np.cumsum(counts)
    mid = [n // 2] if n % 2 else [n // 2 - 1, n // 2]
    picks = values[np.searchsorted(ends, np.asarray(mid, dtype=np.int64), side="right")]
    return float(np.median(picks))


def collapse_chunks(chunks: Iterable[Profile], keep: Iterable[str] = KEYS) -> Profile:
    """One collapsed :class:`~pmuscope.profile.model.Profile` of the chunks of
    one recording (``count`` per row); reports built from it are those of the
    chunks joined (for a report's sort keys: :func:`keys_for_sort`)."""
    c = Collapser(keep)
    for chunk in chunks:
        c.add(chunk)
    return c.profile()
