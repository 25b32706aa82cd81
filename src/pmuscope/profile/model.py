"""The Profile model: every sample of a recording as numpy columns, with its
comm, its symbolized leaf frame and its call stack as frame ids.

:func:`build_profile` reads a :class:`~pmuscope.records.RecordSource` (a
perf.data file or a live session) once, in chunks. Side-band records
(COMM/MMAP/MMAP2/FORK/KSYMBOL) are applied in stream order to the session
state: per-thread comm and per-process address spaces
(:class:`~pmuscope.symbols.Maps`). Samples are buffered and symbolized in
bulk; the buffer is resolved just before a record that changes the state, and
only its samples older than that record (by ``PERF_SAMPLE_TIME``) see the old
state, so a sample written before an MMAP it follows in time (another CPU's
ring drained earlier in the same round) still sees the new mapping, as perf's
time-ordered processing gives it.

Symbolization is done once per distinct (address space generation, address):
resolved addresses become *frames* (rows of the frame table: ip, dso, symbol,
offset), and every later occurrence is a ``searchsorted`` hit in a per-process
cache. Aggregation then works on integer ids with numpy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..errors import FormatError
from ..kernel import abi
from ..records import AttrTable, DecodeStats, RecordSource, SampleBatch
from ..symbols import KERNEL_DSO, Symbolizer, UNKNOWN

R = abi.PerfRecord
S = abi.PerfSample

_CTX_MAX = np.uint64(abi.PERF_CONTEXT_MAX)
_KERNEL_CTX = (abi.PERF_CONTEXT_KERNEL, abi.PERF_CONTEXT_GUEST_KERNEL, abi.PERF_CONTEXT_HV)
_MISC_COMM_EXEC = abi.PERF_RECORD_MISC_COMM_EXEC
_CPUMODE_MASK = abi.PERF_RECORD_MISC_CPUMODE_MASK
#: cpumodes whose ip is a kernel address (KERNEL=1, HYPERVISOR=3, GUEST_KERNEL=4)
_KERNEL_MODES = np.array([False, True, False, True, True, False, False, False])
_KERNEL_KEY = -(1 << 40)
#: side-band records that change the session state
_STATE_RECORDS = (R.MMAP, R.MMAP2, R.COMM, R.FORK, R.KSYMBOL)  # cache key of kernel addresses (no process)

#: perf's one-letter privilege level of a frame, by PERF_RECORD_MISC_CPUMODE
LEVEL_CHAR = {0: "?", 1: "k", 2: ".", 3: "H", 4: "g", 5: "u"}


def _grow(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def _take_flat(flat: np.ndarray, off: np.ndarray, sel) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``sel`` (bool mask or index array) of a flat + offsets field."""
    counts = np.diff(off)[sel]
    starts = off[:-1][sel]
    noff = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=noff[1:])
    idx = np.repeat(starts - noff[:-1], counts) + np.arange(int(noff[-1]), dtype=np.int64)
    return flat[idx], noff


def _concat_flat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    offs = [np.zeros(1, dtype=np.int64)]
    total = 0
    for flat, off in parts:
        offs.append(off[1:] + total)
        total += int(off[-1])
    return np.concatenate([f for f, _ in parts]), np.concatenate(offs)


@dataclass
class _Pending:
    """Sample columns waiting for symbolization (only what the profile keeps);
    ``flat`` holds variable-length fields (callchain, raw) as (flat, offsets)."""

    cols: dict[str, np.ndarray]
    flat: dict[str, tuple[np.ndarray, np.ndarray]]

    def __len__(self) -> int:
        return len(self.cols["ip"])

    def take(self, sel) -> "_Pending":
        return _Pending({k: v[sel] for k, v in self.cols.items()},
                        {k: _take_flat(f, o, sel) for k, (f, o) in self.flat.items()})

    @staticmethod
    def concat(parts: list["_Pending"]) -> "_Pending":
        if len(parts) == 1:
            return parts[0]
        cols = {k: np.concatenate([p.cols[k] for p in parts]) for k in parts[0].cols}
        flat = {k: _concat_flat([p.flat[k] for p in parts]) for k in parts[0].flat}
        return _Pending(cols, flat)


@dataclass
class Profile:
    """Samples of a recording, columnar.

    Per sample (arrays of equal length): ``pid``, ``tid``, ``cpu`` (-1 when not
    recorded), ``time`` (ns; 0 when not recorded), ``period`` (the sample's
    weight: PERF_SAMPLE_PERIOD, else the attr's ``sample_period``), ``event``
    (index into ``event_names``), ``comm`` (index into ``comms``), ``ip``,
    ``cpumode`` (PERF_RECORD_MISC_CPUMODE), ``leaf`` (frame id of ``ip``).

    Call stacks: ``stack`` holds frame ids, leaf first (callee to caller, the
    kernel's order without its PERF_CONTEXT_* markers); sample i's stack is
    ``stack[stack_offsets[i]:stack_offsets[i+1]]``. Empty when no call chains
    were recorded (``has_callchain`` False).

    Frames (arrays indexed by frame id): ``frame_ip`` (the address),
    ``frame_addr`` (map-relative address like perf's ``map_ip``: file offset in
    the DSO for user code, the ip itself for kernel code or no mapping),
    ``frame_dso`` (DSO id, -1 unknown), ``frame_sym`` (symbol id, -1 unknown),
    ``frame_off`` (offset from the symbol start), ``frame_kernel``.
    Names: :meth:`dso_name`, :meth:`sym_name` through ``symbolizer``.

    Totals: ``lost`` (PERF_RECORD_LOST.lost + PERF_RECORD_LOST_SAMPLES.lost),
    ``stats`` (the :class:`~pmuscope.records.DecodeStats` of the stream).
    """

    pid: np.ndarray
    tid: np.ndarray
    cpu: np.ndarray
    time: np.ndarray
    period: np.ndarray
    event: np.ndarray
    comm: np.ndarray
    ip: np.ndarray
    cpumode: np.ndarray
    leaf: np.ndarray
    stack: np.ndarray
    stack_offsets: np.ndarray
    frame_ip: np.ndarray
    frame_addr: np.ndarray
    frame_dso: np.ndarray
    frame_sym: np.ndarray
    frame_off: np.ndarray
    frame_kernel: np.ndarray
    comms: list[str]
    event_names: list[str]
    symbolizer: Symbolizer
    has_callchain: bool = False
    has_cpu: bool = False
    has_time: bool = False
    lost: int = 0
    stats: DecodeStats = field(default_factory=DecodeStats)
    raw: np.ndarray | None = None
    raw_offsets: np.ndarray | None = None
    source: str = ""

    def __len__(self) -> int:
        return len(self.pid)

    # --- names -------------------------------------------------------------------
    def dso_name(self, dso_id: int) -> str:
        """Full DSO name (path) of a DSO id; ``[unknown]`` for -1."""
        return self.symbolizer.dso_name(int(dso_id))

    def dso_short_name(self, dso_id: int) -> str:
        """perf report's DSO column: the base name of a path, ``[kernel.kallsyms]`` as is."""
        name = self.dso_name(dso_id)
        return name if name.startswith("[") else os.path.basename(name) or name

    def sym_name(self, sym_id: int) -> str:
        return self.symbolizer.sym_name(int(sym_id))

    def dso_names(self, dso_ids: Iterable[int], short: bool = False) -> list[str]:
        f = self.dso_short_name if short else self.dso_name
        cache: dict[int, str] = {}
        return [cache[d] if d in cache else cache.setdefault(d, f(d)) for d in map(int, dso_ids)]

    def frame_names(self, frames: np.ndarray) -> list[str]:
        """Symbol of each frame id (``[unknown]`` when unresolved)."""
        u, inv = np.unique(frames, return_inverse=True)
        names = [self.sym_name(s) for s in self.frame_sym[u]]
        return [names[i] for i in inv.reshape(-1)]

    @property
    def total_period(self) -> int:
        return int(self.period.sum(dtype=np.uint64)) if len(self.period) else 0

    def select(self, mask: np.ndarray) -> "Profile":
        """A profile of the samples where ``mask`` is true, or of the sample
        indexes ``mask`` in that order (the frame table is shared)."""
        mask = np.asarray(mask)
        kw: dict[str, Any] = {}
        for name in ("pid", "tid", "cpu", "time", "period", "event", "comm", "ip", "cpumode", "leaf"):
            kw[name] = getattr(self, name)[mask]
        kw["stack"], kw["stack_offsets"] = _take_flat(self.stack, self.stack_offsets, mask)
        raw, raw_off = self.raw, self.raw_offsets
        if raw is not None:
            raw, raw_off = _take_flat(raw, raw_off, mask)
        for name in ("frame_ip", "frame_addr", "frame_dso", "frame_sym", "frame_off", "frame_kernel", "comms",
                     "event_names", "symbolizer", "has_callchain", "has_cpu", "has_time", "lost", "stats", "source"):
            kw[name] = getattr(self, name)
        return Profile(raw=raw, raw_offsets=raw_off, **kw)

    def filter(self, *, pids=None, tids=None, comms=None, cpus=None, time_range=None, events=None) -> "Profile":
        """Samples of these pids/tids/comm names/CPUs/event indexes, and with
        ``time_range[0] <= time <= time_range[1]`` (ns; None for an open end)."""
        mask = np.ones(len(self), dtype=bool)
        if pids is not None:
            mask &= np.isin(self.pid, np.asarray(list(pids), dtype=np.int64))
        if tids is not None:
            mask &= np.isin(self.tid, np.asarray(list(tids), dtype=np.int64))
        if cpus is not None:
            mask &= np.isin(self.cpu, np.asarray(list(cpus), dtype=np.int64))
        if events is not None:
            mask &= np.isin(self.event, np.asarray(list(events), dtype=np.int64))
        if comms is not None:
            want = set(comms)
            ids = [i for i, c in enumerate(self.comms) if c in want]
            mask &= np.isin(self.comm, np.asarray(ids, dtype=np.int64))
        if time_range is not None:
            lo, hi = time_range
            if lo is not None:
                mask &= self.time >= np.uint64(lo)
            if hi is not None:
                mask &= self.time <= np.uint64(hi)
        return self if mask.all() else self.select(mask)

    def stacks(self, *, max_frames: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(frames, offsets)`` of each sample's stack; samples without a
        call chain get their leaf frame alone."""
        if self.has_callchain:
            return self.stack, self.stack_offsets
        return self.leaf.astype(np.int64), np.arange(len(self) + 1, dtype=np.int64)


class ProfileBuilder:
    """Incremental construction of a :class:`Profile` from decoded items
    (side-band records and :class:`~pmuscope.records.SampleBatch`) in stream
    order. Feed with :meth:`feed`, finish with :meth:`finish`."""

    def __init__(self, attrs: AttrTable, *, event_names: list[str] | None = None,
                 symbolizer: Symbolizer | None = None, keep_raw: bool = False) -> None:
        self.attrs = attrs
        self.symbolizer = symbolizer if symbolizer is not None else Symbolizer()
        self.maps = self.symbolizer.maps
        self.event_names = list(event_names or [e.name or f"event{e.index}" for e in attrs])
        self.keep_raw = keep_raw
        self._default_period = np.array(
            [0 if e.attr.freq else max(int(e.attr.sample_period), 1) for e in attrs], dtype=np.uint64)
        self.has_callchain = any(e.sample_type & S.CALLCHAIN for e in attrs)
        self.has_cpu = any(e.sample_type & S.CPU for e in attrs)
        self.has_time = any(e.sample_type & S.TIME for e in attrs)
        self._pending: list[_Pending] = []
        self._pending_n = 0
        self._queue: list[tuple[int, int, Any]] = []  # time-stamped side-band records not applied yet
        self._seq = 0
        self._max_time = 0
        self._next_flush = 0
        # session state
        self.comms: list[str] = []
        self._comm_ids: dict[str, int] = {}
        self._comm_of: dict[int, int] = {}  # tid -> comm id
        # perf names the idle task (pid/tid 0) "swapper" (machine__init)
        self._comm_of[0] = self.comm_id("swapper")
        self._epoch: dict[int, int] = {}  # pid -> address-space generation
        self._kepoch = 0
        # frame cache: key -> (epoch, sorted ips, frame ids)
        self._cache: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self._nframes = 0
        self._frames: dict[str, list[np.ndarray]] = {k: [] for k in ("ip", "addr", "dso", "sym", "off", "kernel")}
        # output parts
        self._out: dict[str, list[np.ndarray]] = {k: [] for k in (
            "pid", "tid", "cpu", "time", "period", "event", "comm", "ip", "cpumode", "leaf", "stack", "stack_len",
            "raw", "raw_len")}

    # --- session state -----------------------------------------------------------
    def comm_id(self, name: str) -> int:
        i = self._comm_ids.get(name)
        if i is None:
            i = self._comm_ids[name] = len(self.comms)
            self.comms.append(name)
        return i

    def _record_time(self, rec) -> int | None:
        sid = rec.sample_id
        return None if sid is None else sid.time

    def feed(self, item) -> None:
        """Apply one decoded item (stream order)."""
        if isinstance(item, SampleBatch):
            self._add_batch(item)
            return
        rtype = getattr(item, "type", None)
        if rtype == R.FINISHED_ROUND:
            # perf's rule (process_finished_round): everything up to the
            # newest time seen before the previous round mark is complete
            self._process_upto(self._next_flush)
            self._next_flush = self._max_time
            return
        if rtype not in _STATE_RECORDS:
            return
        t = self._record_time(item)
        if self.has_time and t is not None:
            self._seq += 1
            self._queue.append((t, self._seq, item))
            if t > self._max_time:
                self._max_time = t
        else:  # no timestamp: perf delivers such records at once
            self._process_upto(None)
            self._apply(item)

    def _apply(self, item) -> None:
        rtype = item.type
        if rtype in (R.MMAP, R.MMAP2):
            pid = item.pid
            kernel = pid in (-1, 0xFFFFFFFF) or (item.misc & _CPUMODE_MASK) == 1
            if kernel:
                self.maps.apply(item)
            elif not (rtype == R.MMAP2 and not item.prot & 4) and not \
                    (rtype == R.MMAP and item.misc & abi.PERF_RECORD_MISC_MMAP_DATA):
                self.maps.apply(item)
                self._epoch[pid] = self._epoch.get(pid, 0) + 1
        elif rtype == R.COMM:
            # an exec does not empty the address space here: perf keeps the old
            # maps until the new image's MMAPs overlap them (a sample taken in
            # execve() still unwinds through the old libc)
            self._comm_of[item.tid] = self.comm_id(item.comm)
        elif rtype == R.FORK:
            parent = self._comm_of.get(item.ptid)
            if parent is None:
                parent = self._comm_of.get(item.ppid)
            if parent is not None:
                self._comm_of[item.tid] = parent
            if item.pid != item.ppid:
                self.maps.apply(item)
                self._epoch[item.pid] = self._epoch.get(item.pid, 0) + 1
        elif rtype == R.KSYMBOL:
            self.maps.apply(item)
            self._kepoch += 1

    def _process_upto(self, limit: int | None) -> None:
        """Resolve buffered samples and apply queued side-band records with
        time <= ``limit`` (None: everything), merged in time order."""
        if self._queue:
            if limit is None:
                ready, self._queue = self._queue, []
            else:
                ready = [q for q in self._queue if q[0] <= limit]
                if len(ready) < len(self._queue):
                    self._queue = [q for q in self._queue if q[0] > limit]
                else:
                    self._queue = []
            ready.sort(key=lambda q: (q[0], q[1]))
        else:
            ready = []
        pend = None
        if self._pending_n:
            pend = _Pending.concat(self._pending)
            self._pending, self._pending_n = [], 0
            if limit is not None and self.has_time:
                done = pend.cols["time"] <= np.uint64(max(limit, 0))
                if not done.all():
                    keep = pend.take(~done)
                    self._pending, self._pending_n = [keep], len(keep)
                    pend = pend.take(done) if done.any() else None
        if pend is not None and self.has_time and len(pend) > 1:
            times = pend.cols["time"]
            if (times[1:] < times[:-1]).any():
                pend = pend.take(np.argsort(times, kind="stable"))
        if not ready:
            if pend is not None:
                self._resolve(pend)
            return
        if pend is None:
            for _, _, rec in ready:
                self._apply(rec)
            return
        times = pend.cols["time"]
        cuts = np.searchsorted(times, np.array([q[0] for q in ready], dtype=np.uint64), side="left")
        pos = 0
        n = len(pend)
        for cut, (_, _, rec) in zip(cuts.tolist(), ready):
            if cut > pos:
                self._resolve(pend.take(slice(pos, cut)) if (pos, cut) != (0, n) else pend)
                pos = cut
            self._apply(rec)
        if pos < n:
            self._resolve(pend.take(slice(pos, n)) if pos else pend)

    def _add_batch(self, b: SampleBatch) -> None:
        n = len(b)
        if n == 0:
            return
        def col(arr, dtype, fill=0):
            if arr is None:
                return np.full(n, fill, dtype=dtype)
            return arr.astype(dtype, copy=False)

        attr = b.attr_index.astype(np.int16, copy=False)
        if b.period is not None:
            period = b.period.astype(np.uint64, copy=False)
            if len(self.attrs) > 1:  # attrs without PERIOD hold 0 here
                missing = np.array([not (e.sample_type & S.PERIOD) for e in self.attrs])
                if missing.any():
                    period = np.where(missing[attr], self._default_period[attr], period)
        else:
            period = self._default_period[attr]
        period = np.where(period == 0, np.uint64(1), period)
        cols = {
            "pid": col(b.pid, np.int64, -1), "tid": col(b.tid, np.int64, -1), "cpu": col(b.cpu, np.int32, -1),
            "time": col(b.time, np.uint64), "period": period, "event": attr,
            "ip": col(b.ip, np.uint64), "cpumode": (b.misc & _CPUMODE_MASK).astype(np.uint8),
        }
        flat = {}
        if self.has_callchain:
            if b.callchain is not None:
                flat["cc"] = (b.callchain.astype(np.uint64, copy=False), b.callchain_offsets.astype(np.int64, copy=False))
            else:
                flat["cc"] = (np.zeros(0, np.uint64), np.zeros(n + 1, np.int64))
        if self.keep_raw:
            if b.raw is not None:
                flat["raw"] = (b.raw.copy(), b.raw_offsets.astype(np.int64, copy=False))
            else:
                flat["raw"] = (np.zeros(0, np.uint8), np.zeros(n + 1, np.int64))
        p = _Pending(cols, flat)
        if b.time is not None:
            t = int(b.time.max())
            if t > self._max_time:
                self._max_time = t
        self._pending.append(p)
        self._pending_n += n

    def flush(self) -> None:
        """Apply every queued record and resolve every buffered sample."""
        self._process_upto(None)

    # --- symbolization -----------------------------------------------------------
    def _frames_for(self, pids: np.ndarray, ips: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        """Frame id of each (pid, ip, kernel?) triple, resolving only addresses
        not seen before in the same address-space generation."""
        n = len(ips)
        out = np.empty(n, dtype=np.int64)
        if n == 0:
            return out
        keys = np.where(kernel, np.int64(_KERNEL_KEY), pids)
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        cuts = np.flatnonzero(sk[1:] != sk[:-1]) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [n]))
        miss_rows: list[np.ndarray] = []
        miss_ips: list[np.ndarray] = []
        miss_keys: list[int] = []
        groups = []
        for s, e in zip(starts.tolist(), ends.tolist()):
            rows = order[s:e]
            key = int(sk[s])
            epoch = self._kepoch if key == _KERNEL_KEY else self._epoch.get(key, 0)
            u, inv = np.unique(ips[rows], return_inverse=True)
            inv = inv.reshape(-1)
            ent = self._cache.get(key)
            if ent is None or ent[0] != epoch:
                ent = (epoch, np.zeros(0, np.uint64), np.zeros(0, np.int64))
                self._cache[key] = ent
            _, cips, cfid = ent
            if len(cips):
                pos = np.searchsorted(cips, u)
                posc = np.minimum(pos, len(cips) - 1)
                hit = cips[posc] == u
            else:
                posc = np.zeros(len(u), np.int64)
                hit = np.zeros(len(u), bool)
            ufid = np.where(hit, cfid[posc] if len(cfid) else 0, -1)
            groups.append((rows, key, epoch, u, inv, ufid, hit))
            if not hit.all():
                miss_keys.append(key)
                miss_ips.append(u[~hit])
        if miss_ips:
            self._resolve_new(miss_keys, miss_ips)
        for rows, key, epoch, u, inv, ufid, hit in groups:
            if not hit.all():
                _, cips, cfid = self._cache[key]
                pos = np.searchsorted(cips, u[~hit])
                ufid[~hit] = cfid[pos]
            out[rows] = ufid[inv]
        return out

    def _resolve_new(self, keys: list[int], ipss: list[np.ndarray]) -> None:
        counts = [len(x) for x in ipss]
        ips = np.concatenate(ipss)
        kpid = np.repeat(np.asarray(keys, dtype=np.int64), counts)
        kernel = kpid == _KERNEL_KEY
        pids = np.where(kernel, -1, kpid)
        res = self.symbolizer.resolve_many(pids, ips, kernel)
        addr = ips.copy()
        # map-relative addresses of user frames (perf's map__map_ip: ip - start + pgoff)
        pos = 0
        for key, cnt in zip(keys, counts):
            if key != _KERNEL_KEY:
                space = self.maps.spaces.get(key)
                if space is not None and len(space):
                    seg = ips[pos:pos + cnt]
                    idx = space.find_many(seg)
                    ok = idx >= 0
                    if ok.any():
                        starts = np.fromiter((m.start for m in space), np.uint64, len(space))
                        pgoffs = np.fromiter((m.pgoff for m in space), np.uint64, len(space))
                        ii = idx[ok]
                        sub = addr[pos:pos + cnt]
                        sub[ok] = seg[ok] - starts[ii] + pgoffs[ii]
            pos += cnt
        fids = np.arange(self._nframes, self._nframes + len(ips), dtype=np.int64)
        self._nframes += len(ips)
        f = self._frames
        f["ip"].append(ips)
        f["addr"].append(addr)
        f["dso"].append(res.dso_id.astype(np.int32))
        f["sym"].append(res.sym_id.astype(np.int64))
        f["off"].append(res.offset.astype(np.uint64))
        f["kernel"].append(kernel)
        pos = 0
        for key, cnt in zip(keys, counts):
            epoch, cips, cfid = self._cache[key]
            nips = np.concatenate((cips, ips[pos:pos + cnt]))
            nfid = np.concatenate((cfid, fids[pos:pos + cnt]))
            o = np.argsort(nips, kind="stable")
            self._cache[key] = (epoch, nips[o], nfid[o])
            pos += cnt

    def _resolve(self, p: _Pending) -> None:
        n = len(p)
        if n == 0:
            return
        c = p.cols
        out = self._out
        # comm of each sample from its thread
        tids = c["tid"]
        ut, tinv = np.unique(tids, return_inverse=True)
        cid = np.empty(len(ut), dtype=np.int32)
        for i, t in enumerate(ut.tolist()):
            v = self._comm_of.get(t)
            if v is None:
                v = self._comm_of[t] = self.comm_id(f":{t}")
            cid[i] = v
        out["comm"].append(cid[tinv.reshape(-1)])
        kernel_ip = _KERNEL_MODES[c["cpumode"] & 7]
        leaf_n = n
        if "cc" in p.flat:
            cc, off = p.flat["cc"]
            counts = np.diff(off)
            m = len(cc)
            sample_of = np.repeat(np.arange(n, dtype=np.int64), counts)
            marker = cc >= _CTX_MAX
            is_start = np.zeros(m, dtype=bool)
            nz = counts > 0
            is_start[off[:-1][nz]] = True
            posn = np.arange(m, dtype=np.int64)
            last = np.maximum.accumulate(np.where(marker | is_start, posn, 0)) if m else posn
            mk = np.isin(cc, np.array(_KERNEL_CTX, dtype=np.uint64))
            ctx_kernel = np.where(marker[last], mk[last], kernel_ip[sample_of[last]]) if m else np.zeros(0, bool)
            keep = ~marker
            cc_ips = cc[keep]
            cc_k = ctx_kernel[keep]
            cc_s = sample_of[keep]
            kept = np.bincount(cc_s, minlength=n) if len(cc_s) else np.zeros(n, np.int64)
            all_ips = np.concatenate((c["ip"], cc_ips))
            all_k = np.concatenate((kernel_ip, cc_k))
            all_pid = np.concatenate((c["pid"], c["pid"][cc_s]))
        else:
            all_ips, all_k, all_pid = c["ip"], kernel_ip, c["pid"]
        fids = self._frames_for(all_pid, all_ips, all_k)
        out["leaf"].append(fids[:leaf_n])
        if "cc" in p.flat:
            out["stack"].append(fids[leaf_n:])
            out["stack_len"].append(kept)
        for k in ("pid", "tid", "cpu", "time", "period", "event", "ip", "cpumode"):
            out[k].append(c[k])
        if self.keep_raw:
            raw, roff = p.flat["raw"]
            out["raw"].append(raw)
            out["raw_len"].append(np.diff(roff))

    def finish(self, *, stats: DecodeStats | None = None, source: str = "") -> Profile:
        """Resolve what is left and return the :class:`Profile`."""
        self.flush()
        o, f = self._out, self._frames
        stack_len = _grow(o["stack_len"], np.int64)
        n = sum(len(x) for x in o["pid"])
        offsets = np.zeros(n + 1, dtype=np.int64)
        if len(stack_len):
            np.cumsum(stack_len, out=offsets[1:])
        raw = raw_off = None
        if self.keep_raw:
            raw = _grow(o["raw"], np.uint8)
            rl = _grow(o["raw_len"], np.int64)
            raw_off = np.zeros(n + 1, dtype=np.int64)
            if len(rl):
                np.cumsum(rl, out=raw_off[1:])
        stats = stats or DecodeStats()
        prof = Profile(
            pid=_grow(o["pid"], np.int64), tid=_grow(o["tid"], np.int64), cpu=_grow(o["cpu"], np.int32),
            time=_grow(o["time"], np.uint64), period=_grow(o["period"], np.uint64),
            event=_grow(o["event"], np.int16), comm=_grow(o["comm"], np.int32), ip=_grow(o["ip"], np.uint64),
            cpumode=_grow(o["cpumode"], np.uint8), leaf=_grow(o["leaf"], np.int64),
            stack=_grow(o["stack"], np.int64), stack_offsets=offsets,
            frame_ip=_grow(f["ip"], np.uint64), frame_addr=_grow(f["addr"], np.uint64),
            frame_dso=_grow(f["dso"], np.int32), frame_sym=_grow(f["sym"], np.int64),
            frame_off=_grow(f["off"], np.uint64), frame_kernel=_grow(f["kernel"], bool),
            comms=list(self.comms), event_names=self.event_names, symbolizer=self.symbolizer,
            has_callchain=self.has_callchain, has_cpu=self.has_cpu, has_time=self.has_time,
            lost=int(stats.lost + stats.lost_samples), stats=stats, raw=raw, raw_offsets=raw_off, source=source)
        if self.has_time and len(prof.time) > 1 and (prof.time[1:] < prof.time[:-1]).any():
            # perf processes samples in time order (ordered events): so do reports and script
            prof = prof.select(np.argsort(prof.time, kind="stable"))
        return prof


def build_profile(source: RecordSource, *, event_names: list[str] | None = None,
                  symbolizer: Symbolizer | None = None, keep_raw: bool = False, name: str = "") -> Profile:
    """Build a :class:`Profile` from a :class:`~pmuscope.records.RecordSource`
    (one pass, chunk by chunk)."""
    b = ProfileBuilder(source.attrs, event_names=event_names, symbolizer=symbolizer, keep_raw=keep_raw)
    feed = b.feed
    for item in source:
        feed(item)
    return b.finish(stats=source.stats, source=name)


def _same_kernel(pf) -> bool:
    """True when the file was recorded on the running kernel (so /proc/kallsyms applies)."""
    from ..perfdata import Feature

    rel = pf.features.get(Feature.OSRELEASE)
    host = pf.features.get(Feature.HOSTNAME)
    u = os.uname()
    if rel is not None and str(rel) != u.release:
        return False
    if host is not None and str(host) != u.nodename:
        return False
    return True


def load_profile(path_or_file: Any, *, symbolizer: Symbolizer | None = None, keep_raw: bool = False,
                 kernel_symbols: bool | None = None) -> Profile:
    """Read a perf.data file (path, ``"-"``, file object, bytes or an open
    :class:`~pmuscope.perfdata.PerfDataFile`) into a :class:`Profile`.

    Kernel addresses are named from this machine's ``/proc/kallsyms`` only when
    the file was recorded on the running kernel (same hostname and release in
    its header), unless ``kernel_symbols`` says otherwise.
    """
    from ..perfdata import PerfDataFile

    own = not isinstance(path_or_file, PerfDataFile)
    pf = PerfDataFile(path_or_file) if own else path_or_file
    try:
        if symbolizer is None:
            ks = kernel_symbols if kernel_symbols is not None else _same_kernel(pf)
            symbolizer = Symbolizer(kernel=None if ks else False)
        src = pf.records()
        return build_profile(src, event_names=pf.event_names, symbolizer=symbolizer, keep_raw=keep_raw,
                             name=pf.source)
    finally:
        if own:
            pf.close()
