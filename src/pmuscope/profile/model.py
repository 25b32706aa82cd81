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
from typing import Any, Iterable, Iterator

import numpy as np

from .._np import isin, ragged_index, uniq, uniq_first, uniq_inv  # noqa: F401  (re-exported for the profile modules)
from ..kernel import abi
from ..records import AttrTable, DecodeStats, RecordSource, SampleBatch
from ..symbols import Symbolizer

R = abi.PerfRecord
S = abi.PerfSample

_CTX_MAX = np.uint64(abi.PERF_CONTEXT_MAX)
_M64 = (1 << 64) - 1
#: stands for a dwarf chain's "truncated" frame (0 - 1) in the call-chain
#: column, where values >= PERF_CONTEXT_MAX are context markers
_TRUNC_HOLD = np.uint64(abi.PERF_CONTEXT_MAX - 1)
_KERNEL_CTX = (abi.PERF_CONTEXT_KERNEL, abi.PERF_CONTEXT_GUEST_KERNEL, abi.PERF_CONTEXT_HV)
_KERNEL_CTX_U64 = tuple(np.uint64(v) for v in _KERNEL_CTX)
_MISC_COMM_EXEC = abi.PERF_RECORD_MISC_COMM_EXEC
_CPUMODE_MASK = abi.PERF_RECORD_MISC_CPUMODE_MASK
#: cpumodes whose ip is a kernel address (KERNEL=1, HYPERVISOR=3, GUEST_KERNEL=4)
_KERNEL_MODES = np.array([False, True, False, True, True, False, False, False])
_KERNEL_KEY = -(1 << 40)
#: side-band records that change the session state
_STATE_RECORDS = (R.MMAP, R.MMAP2, R.COMM, R.FORK, R.KSYMBOL)  # cache key of kernel addresses (no process)

#: perf's one-letter privilege level of a frame, by PERF_RECORD_MISC_CPUMODE
LEVEL_CHAR = {0: "?", 1: "k", 2: ".", 3: "H", 4: "g", 5: "u"}


def _native_resolve():
    """The C helpers of the profile builder and the collapser (:mod:`pmuscope._native`),
    or None: not built, or ``PMUSCOPE_NATIVE_RESOLVE=0`` (the numpy path: the
    reference, tested against it)."""
    global _NATIVE
    if os.environ.get("PMUSCOPE_NATIVE_RESOLVE", "1") == "0":
        return None
    if _NATIVE is None:
        try:
            from .. import _native  # type: ignore[attr-defined]
        except ImportError:
            _native = None
        _NATIVE = _native if hasattr(_native, "resolve_round") else False
    return _NATIVE or None


_NATIVE: Any = None  # the module once imported (False: not there)
#: tids ProfileBuilder._comm_arr holds (pid_max's default, 2^22, is above: those go by dict)
_COMM_ARR_MAX = 1 << 21


def _grow(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=dtype)
    if len(parts) == 1:
        return parts[0].astype(dtype, copy=False)
    return np.concatenate(parts).astype(dtype, copy=False)


def _take_flat(flat: np.ndarray, off: np.ndarray, sel) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``sel`` (bool mask or index array) of a flat + offsets field."""
    nat = _native_resolve()
    if nat is not None and flat.ndim == 1 and flat.flags.c_contiguous and off.dtype == np.int64 and \
            off.flags.c_contiguous:
        sel = np.asarray(sel)
        mask = sel.dtype == bool
        if sel.ndim == 1 and (mask or sel.dtype == np.int64):
            got = nat.take_flat(flat, off, np.ascontiguousarray(sel), mask, flat.itemsize)
            if got is not None:
                return np.frombuffer(got[0], dtype=flat.dtype), np.frombuffer(got[1], dtype=np.int64)
    return _take_flat_np(flat, off, sel)


def _take_flat_np(flat: np.ndarray, off: np.ndarray, sel) -> tuple[np.ndarray, np.ndarray]:
    idx, noff = ragged_index(off[:-1][sel], np.diff(off)[sel])
    return flat[idx], noff


def _concat_flat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    offs = [np.zeros(1, dtype=np.int64)]
    total = 0
    for flat, off in parts:
        offs.append(off[1:] + total)
        total += int(off[-1])
    return np.concatenate([f for f, _ in parts]), np.concatenate(offs)


class _Pending:
    """Sample columns waiting for symbolization (only what the profile keeps);
    ``flat`` holds variable-length fields (callchain, raw) as (flat, offsets)."""

    __slots__ = ("cols", "flat")

    def __init__(self, cols: dict[str, np.ndarray], flat: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.cols = cols
        self.flat = flat

    def __len__(self) -> int:
        return len(self.cols["ip"])

    def take(self, sel) -> "_Pending":
        return _Pending({k: v[sel] for k, v in self.cols.items()},
                        {k: _take_flat(f, o, sel) for k, (f, o) in self.flat.items()})

    def keep(self, sel) -> "_Pending":
        """:meth:`take` in place, a field at a time: each old field is let go
        once its rows are copied (a column held twice, not every sample)."""
        for k in list(self.cols):
            self.cols[k] = self.cols.pop(k)[sel]
        for k in list(self.flat):
            f, o = self.flat.pop(k)
            self.flat[k] = _take_flat(f, o, sel)
            del f, o
        return self

    def split(self, first, second) -> tuple["_Pending", "_Pending"]:
        """``(self.take(first), self.take(second))`` a field at a time, each
        field of ``self`` let go once both copies of it are made (``self`` is
        left empty)."""
        a: dict[str, np.ndarray] = {}
        b: dict[str, np.ndarray] = {}
        for k in list(self.cols):
            v = self.cols.pop(k)
            a[k], b[k] = v[first], v[second]
            del v
        fa: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        fb: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for k in list(self.flat):
            f, o = self.flat.pop(k)
            fa[k], fb[k] = _take_flat(f, o, first), _take_flat(f, o, second)
            del f, o
        return _Pending(a, fa), _Pending(b, fb)

    @staticmethod
    def concat(parts: list["_Pending"]) -> "_Pending":
        """The parts joined, a field at a time: each part's field is let go
        once joined (the parts are left empty)."""
        if len(parts) == 1:
            return parts[0]
        cols = {k: np.concatenate([p.cols.pop(k) for p in parts]) for k in list(parts[0].cols) if k != "ustack"}
        if "ustack" in parts[0].cols:  # stack copies as rows: pad to the widest
            w = max(p.cols["ustack"].shape[1] for p in parts)
            cols["ustack"] = np.concatenate([np.pad(p.cols["ustack"], ((0, 0), (0, w - p.cols["ustack"].shape[1])))
                                             for p in parts])
            for p in parts:
                del p.cols["ustack"]
        flat = {k: _concat_flat([p.flat.pop(k) for p in parts]) for k in list(parts[0].flat)}
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
    ``stack[stack_offsets[i]:stack_offsets[i+1]]`` (int32 frame ids). Empty when no call chains
    were recorded (``has_callchain`` False).

    Frames (arrays indexed by frame id): ``frame_ip`` (the address),
    ``frame_addr`` (map-relative address like perf's ``map_ip``: file offset in
    the DSO for user code, the ip itself for kernel code or no mapping),
    ``frame_dso`` (DSO id, -1 unknown), ``frame_sym`` (symbol id, -1 unknown),
    ``frame_off`` (offset from the symbol start), ``frame_kernel``.
    Names: :meth:`dso_name`, :meth:`sym_name` through ``symbolizer``.

    Totals: ``lost`` — the samples lost: the sum of PERF_RECORD_LOST_SAMPLES.lost
    when the file has any (what ``perf report`` prints as "Total Lost Samples"),
    else the sum of PERF_RECORD_LOST.lost. Not both: perf 6.x writes one
    LOST_SAMPLES record per event at the end from the PERF_FORMAT_LOST count of
    the very drops the kernel already reported as PERF_RECORD_LOST, so adding
    them counts each lost sample twice. ``stats`` (the
    :class:`~pmuscope.records.DecodeStats` of the stream) keeps both sums apart.
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
    #: event index -> tracefs format of its tracepoint (to decode ``raw``)
    tp_formats: dict = field(default_factory=dict)
    #: dwarf samples (REGS_USER + STACK_USER): per sample, True when its
    #: unwound user chain stopped early (None: no sample was unwound)
    truncated: np.ndarray | None = None
    #: :class:`~pmuscope.unwind.UnwindStats` of the dwarf unwinding (None: none done)
    unwind_stats: Any = None
    #: samples each row stands for (a collapsed profile, :func:`~pmuscope.profile.collapse.collapse_chunks`:
    #: one row per distinct sample, its ``period`` the sum); None: one sample a row
    count: np.ndarray | None = None
    #: tid -> comm id of each thread at the end of what was read (perf's
    #: ``thread__comm_str``: the Pid:Command column and the Command column's width)
    thread_comm: dict | None = None

    def __len__(self) -> int:
        return len(self.pid)

    @property
    def nr_samples(self) -> int:
        """Samples the profile holds (its rows, or the sum of ``count``)."""
        return len(self.pid) if self.count is None else int(self.count.sum())

    # --- names -------------------------------------------------------------------
    def dso_name(self, dso_id: int) -> str:
        """Full DSO name (path) of a DSO id; ``[unknown]`` for -1."""
        return self.symbolizer.dso_name(int(dso_id))

    def dso_short_name(self, dso_id: int) -> str:
        """perf report's DSO column: the base name of a path, ``[kernel.kallsyms]`` as is,
        ``[JIT] tid PID`` for a JIT map /tmp/perf-PID.map (perf's name for it)."""
        short = self.symbolizer.module_short.get(int(dso_id))
        if short is not None:  # a kernel module known by its path
            return short
        from .report_format import short_dso_name

        return short_dso_name(self.dso_name(dso_id))

    def sym_name(self, sym_id: int) -> str:
        return self.symbolizer.sym_name(int(sym_id))

    def dso_names(self, dso_ids: Iterable[int], short: bool = False) -> list[str]:
        f = self.dso_short_name if short else self.dso_name
        cache: dict[int, str] = {}
        return [cache[d] if d in cache else cache.setdefault(d, f(d)) for d in map(int, dso_ids)]

    def frame_names(self, frames: np.ndarray) -> list[str]:
        """Symbol of each frame id (``[unknown]`` when unresolved)."""
        u, inv = uniq_inv(frames)
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
        kw["truncated"] = self.truncated[mask] if self.truncated is not None else None
        kw["count"] = self.count[mask] if self.count is not None else None
        for name in ("frame_ip", "frame_addr", "frame_dso", "frame_sym", "frame_off", "frame_kernel", "comms",
                     "event_names", "symbolizer", "has_callchain", "has_cpu", "has_time", "lost", "stats", "source",
                     "tp_formats", "unwind_stats", "thread_comm"):
            kw[name] = getattr(self, name)
        return Profile(raw=raw, raw_offsets=raw_off, **kw)

    def filter(self, *, pids=None, tids=None, comms=None, cpus=None, time_range=None, events=None) -> "Profile":
        """Samples of these pids/tids/comm names/CPUs/event indexes, and with
        ``time_range[0] <= time <= time_range[1]`` (ns; None for an open end)."""
        mask = np.ones(len(self), dtype=bool)
        if pids is not None:
            mask &= isin(self.pid, np.asarray(list(pids), dtype=np.int64))
        if tids is not None:
            mask &= isin(self.tid, np.asarray(list(tids), dtype=np.int64))
        if cpus is not None:
            mask &= isin(self.cpu, np.asarray(list(cpus), dtype=np.int64))
        if events is not None:
            mask &= isin(self.event, np.asarray(list(events), dtype=np.int64))
        if comms is not None:
            want = set(comms)
            ids = [i for i, c in enumerate(self.comms) if c in want]
            mask &= isin(self.comm, np.asarray(ids, dtype=np.int64))
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

    def chains(self, *, order: str = "callee", max_stack: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(frames, offsets)`` of each sample's call chain in perf's display
        ``order``: ``callee`` is leaf first (the kernel's order), ``caller``
        is the outermost caller first.

        ``max_stack`` keeps the first N frames *of that order*, as perf's
        ``--max-stack`` does (thread__resolve_callchain_sample walks the chain
        in display order and stops after N entries): callee order keeps the
        innermost frames, caller order the outermost ones.
        """
        frames, off = self.stacks()
        lens = np.diff(off)
        if order == "caller" and len(frames):
            # entry g of sample s moves to off[s] + off[s+1] - 1 - g
            s = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
            frames = frames[off[:-1][s] + off[1:][s] - 1 - np.arange(len(frames), dtype=np.int64)]
        if max_stack is not None and len(lens) and int(lens.max()) > max_stack:
            idx, noff = ragged_index(off[:-1], np.minimum(lens, max(int(max_stack), 0)))
            return frames[idx], noff
        return frames, off


class ProfileBuilder:
    """Incremental construction of a :class:`Profile` from decoded items
    (side-band records and :class:`~pmuscope.records.SampleBatch`) in stream
    order. Feed with :meth:`feed`, finish with :meth:`finish`.

    Samples wait in a buffer until perf's FINISHED_ROUND rule says every
    record up to their time has been seen; then the round's side-band records
    are applied in time order. A sample's comm is the one its thread had at
    the sample's time (vectorized over a timeline of COMM/FORK changes); its
    addresses are resolved against its process's maps as of its time: only
    the samples of a process whose maps change mid-round are resolved before
    the change, everything else in one bulk call per round.
    """

    def __init__(self, attrs: AttrTable, *, event_names: list[str] | None = None,
                 symbolizer: Symbolizer | None = None, keep_raw: bool = False, unwind: bool | None = None,
                 arch: str | None = None, callchain: bool = True, round_samples: int = 0) -> None:
        self.attrs = attrs
        #: resolve FINISHED_ROUNDs together until this many samples and call-chain
        #: entries wait (0: each round on its own); see :meth:`_process_rounds`
        self.round_samples = max(int(round_samples), 0)
        self._limits: list[int] = []  # flush limits of the rounds put off (round_samples)
        self._nbuf = 0  # samples and call-chain entries in _batches
        self.symbolizer = symbolizer if symbolizer is not None else Symbolizer()
        self.maps = self.symbolizer.maps
        self.event_names = list(event_names or [e.name or f"event{e.index}" for e in attrs])
        self.keep_raw = keep_raw
        self._default_period = np.array(
            [0 if e.attr.freq else max(int(e.attr.sample_period), 1) for e in attrs], dtype=np.uint64)
        self._no_period = np.array([not (e.sample_type & S.PERIOD) for e in attrs])
        # callchain=False: call chains are neither resolved nor unwound (script -G
        # shows none); the profile then has leaf frames only, as without -g
        self.has_callchain = callchain and any(e.sample_type & S.CALLCHAIN for e in attrs)
        self.has_cpu = any(e.sample_type & S.CPU for e in attrs)
        self.has_time = any(e.sample_type & S.TIME for e in attrs)
        # dwarf call graphs: the user part of each chain is unwound from the
        # sample's registers and stack copy (perf's thread__resolve_callchain_unwind);
        # PMUSCOPE_UNWIND=0 keeps the chains as the kernel wrote them
        dwarf = S.REGS_USER | S.STACK_USER
        self._umask = np.array([int(e.attr.sample_regs_user) if (e.sample_type & dwarf) == dwarf else 0
                                for e in attrs], dtype=np.uint64)
        if unwind is None:
            unwind = os.environ.get("PMUSCOPE_UNWIND", "1") != "0"
        self.unwinder = None
        self._trunc_fid: int | None = None
        if unwind and self.has_callchain and self._umask.any():
            import platform

            from ..unwind import Unwinder
            from ..unwind.unwinder import ARCHES

            a = arch or platform.machine()
            if a in ARCHES:
                self.unwinder = Unwinder(self.symbolizer, a)
        # the C walk and frame cache (resolve_round) instead of the numpy one;
        # dwarf unwinding (rewritten chains, truncated frames) stays on numpy
        self._nat = _native_resolve() if self.unwinder is None else None
        self._ncache = self._nat.resolve_cache_new() if self._nat is not None else None
        self._pids_stale = False  # space ids started over during a native round
        self._batches: list[SampleBatch] = []
        self._held: _Pending | None = None  # samples newer than the last flush limit
        self._queue: list[tuple[int, int, Any]] = []  # time-stamped side-band records not applied yet
        self._seq = 0
        self._max_time = 0
        self._next_flush = 0
        # session state
        self.comms: list[str] = []
        self._comm_ids: dict[str, int] = {}
        self._comm_of: dict[int, int] = {}  # tid -> comm id
        #: _comm_of as an array by tid (-1: none) for tids below _COMM_ARR_MAX: a
        #: round's comms in one lookup when every thread has one (see _set_comm)
        self._comm_arr = np.full(1024, -1, dtype=np.int32)
        # perf names the idle task (pid/tid 0) "swapper" (machine__init)
        self._set_comm(0, self.comm_id("swapper"))
        self._epoch: dict[int, int] = {}  # pid -> address-space generation
        self._kepoch = 0
        # frame caches: sorted keys -> frame ids. User addresses are keyed
        # (space id << 48) | ip, a space id naming one (pid, generation); kernel
        # addresses by ip within one kernel generation.
        self._sids: dict[tuple[int, int], int] = {}
        self._sid_of_fp: dict[tuple, int] = {}
        self._sid_rep: dict[int, int] = {}  # space id -> a pid that has it
        self._wcache = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        self._ucache = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        self._kcache = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        self._kcache_epoch = 0
        self._nframes = 0
        self._frames: dict[str, list[np.ndarray]] = {k: [] for k in ("ip", "addr", "dso", "sym", "off", "kernel")}
        # output parts
        self._out: dict[str, list[np.ndarray]] = self._new_out()
        self._out_n = 0  # samples resolved into _out
        #: streaming (pop_chunk): newest time of the samples handed out so far, and how
        #: many later chunks held older samples (then out of order across chunks)
        self.emitted_max_time = -1
        self.out_of_order_chunks = 0

    @staticmethod
    def _new_out() -> dict[str, list[np.ndarray]]:
        return {k: [] for k in ("pid", "tid", "cpu", "time", "period", "event", "comm", "ip", "cpumode", "leaf",
                                "stack", "stack_len", "raw", "raw_len", "truncated")}

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
            if len(item):
                if item.time is not None:
                    if self._limits and int(item.time.min()) <= self._limits[-1]:
                        self._process_rounds()  # older than a round put off: that round first
                    t = int(item.time.max())
                    if t > self._max_time:
                        self._max_time = t
                self._batches.append(item)
                # what waits: a sample and the entries of its call chain
                cc = item.callchain if self.has_callchain else None
                self._nbuf += len(item) + (len(cc) if cc is not None else 0)
            return
        rtype = getattr(item, "type", None)
        if rtype == R.FINISHED_ROUND:
            # perf's rule (process_finished_round): everything up to the
            # newest time seen before the previous round mark is complete
            if self.round_samples:
                self._limits.append(self._next_flush)
                if self._nbuf + self._held_size >= self.round_samples:
                    self._process_rounds()
            else:
                self._process_upto(self._next_flush)
            self._next_flush = self._max_time
            return
        if rtype not in _STATE_RECORDS:
            return
        t = self._record_time(item)
        if self.has_time and t is not None:
            if self._limits and t <= self._limits[-1]:
                self._process_rounds()
            self._seq += 1
            self._queue.append((t, self._seq, item))
            if t > self._max_time:
                self._max_time = t
        else:  # no timestamp: perf delivers such records at once
            self._process_rounds()
            self._process_upto(None)
            self._apply(item)

    @property
    def _held_size(self) -> int:
        h = self._held
        if h is None:
            return 0
        return len(h) + (len(h.flat["cc"][0]) if "cc" in h.flat else 0)

    def _process_rounds(self) -> None:
        """Resolve the rounds put off (``round_samples``) in one step.

        What one step gives is what the rounds one by one give, up to the ids
        of new frames, symbols and comms (assigned in another order): no item
        that came after a put-off round's mark is older than its limit (such
        an item makes :meth:`feed` resolve the put-off rounds first), so each
        round's samples and records are those of its time range, in the same
        order. Samples of a thread without a COMM name it ``:TID`` once
        resolved; a FORK from such a thread would then name the child after
        it when the sample's round came before the FORK's. When a FORK's
        parent thread has no name yet, the rounds are resolved one by one."""
        limits, self._limits = self._limits, []
        if not limits:
            return
        if len(limits) > 1 and self._queue:
            top = limits[-1]
            ready = sorted(q for q in self._queue if q[0] <= top)
            if any(q[2].type == R.FORK for q in ready):
                known = set(self._comm_of)
                for _, _, rec in ready:
                    if rec.type == R.COMM:
                        known.add(rec.tid)
                    elif rec.type == R.FORK:
                        if rec.ptid not in known:
                            for lim in limits:
                                self._process_upto(lim)
                            return
                        known.add(rec.tid)
        self._process_upto(limits[-1])

    def _apply(self, item) -> tuple[int | None, tuple[int, int] | None]:
        """Apply a side-band record; returns (maps key it changed: a pid,
        _KERNEL_KEY or None; (tid, new comm id) or None)."""
        rtype = item.type
        if rtype in (R.MMAP, R.MMAP2):
            pid = item.pid
            kernel = pid in (-1, 0xFFFFFFFF) or (item.misc & _CPUMODE_MASK) == 1
            if kernel:
                self.maps.apply(item)
                return None, None
            if not (rtype == R.MMAP2 and not item.prot & 4) and not \
                    (rtype == R.MMAP and item.misc & abi.PERF_RECORD_MISC_MMAP_DATA):
                self.maps.apply(item)
                self._epoch[pid] = self._epoch.get(pid, 0) + 1
                if self._ncache is not None:
                    self._nat.resolve_cache_forget_pid(self._ncache, pid)
                return pid, None
            return None, None
        if rtype == R.COMM:
            # an exec does not empty the address space here: perf keeps the old
            # maps until the new image's MMAPs overlap them (a sample taken in
            # execve() still unwinds through the old libc)
            c = self.comm_id(item.comm)
            self._set_comm(item.tid, c)
            return None, (item.tid, c)
        if rtype == R.FORK:
            change = None
            parent = self._comm_of.get(item.ptid)
            if parent is None:
                parent = self._comm_of.get(item.ppid)
            if parent is not None:
                self._set_comm(item.tid, parent)
                change = (item.tid, parent)
            if item.pid != item.ppid:
                self.maps.apply(item)
                self._epoch[item.pid] = self._epoch.get(item.pid, 0) + 1
                if self._ncache is not None:
                    self._nat.resolve_cache_forget_pid(self._ncache, item.pid)
                return item.pid, change
            return None, change
        if rtype == R.KSYMBOL:
            self.maps.apply(item)
            self._kepoch += 1
            return _KERNEL_KEY, None
        return None, None

    def _pending_from_batches(self) -> _Pending | None:
        bs, self._batches = self._batches, []
        self._nbuf = 0
        if not bs:
            return None
        n = sum(len(b) for b in bs)

        def col(name, dtype, fill=0):
            arrs = [getattr(b, name) for b in bs]
            if all(a is None for a in arrs):
                return np.full(n, fill, dtype=dtype)
            return np.concatenate([a.astype(dtype, copy=False) if a is not None else np.full(len(b), fill, dtype)
                                   for a, b in zip(arrs, bs)])

        attr = np.concatenate([b.attr_index for b in bs]).astype(np.int16, copy=False)
        if any(b.period is not None for b in bs):
            period = col("period", np.uint64)
            if self._no_period.any():  # attrs without PERIOD hold 0 here
                period = np.where(self._no_period[attr], self._default_period[attr], period)
        else:
            period = self._default_period[attr]
        period = np.where(period == 0, np.uint64(1), period)
        cols = {
            "pid": col("pid", np.int64, -1), "tid": col("tid", np.int64, -1), "cpu": col("cpu", np.int32, -1),
            "time": col("time", np.uint64), "period": period, "event": attr, "ip": col("ip", np.uint64),
            "cpumode": (np.concatenate([b.misc for b in bs]) & _CPUMODE_MASK).astype(np.uint8),
        }
        flat = {}
        if self.has_callchain:
            flat["cc"] = _concat_flat([(b.callchain.astype(np.uint64, copy=False), b.callchain_offsets)
                                       if b.callchain is not None else
                                       (np.zeros(0, np.uint64), np.zeros(len(b) + 1, np.int64)) for b in bs])
        if self.keep_raw:
            flat["raw"] = _concat_flat([(b.raw.copy(), b.raw_offsets) if b.raw is not None else
                                        (np.zeros(0, np.uint8), np.zeros(len(b) + 1, np.int64)) for b in bs])
        if self.unwinder is not None:
            self._dwarf_cols(bs, cols)
        return _Pending(cols, flat)

    def _dwarf_cols(self, bs: list[SampleBatch], cols: dict[str, np.ndarray]) -> None:
        """Registers (by perf register number), stack copies (rows) and
        their mask and dyn_size: what the unwinder needs of each sample."""
        from ..unwind.batch import NREGS, regs_matrix, stack_matrix

        masks, regs, stacks, dyn = [], [], [], []
        for b in bs:
            n = len(b)
            m = self._umask[b.attr_index]
            if b.regs_user is None or b.stack_user is None or b.regs_user_abi is None:
                masks.append(np.zeros(n, np.uint64))
                regs.append(np.zeros((n, NREGS), np.uint64))
                stacks.append(np.zeros((n, 0), np.uint8))
                dyn.append(np.zeros(n, np.uint64))
                continue
            d = b.stack_user_dyn_size.astype(np.uint64, copy=False) if b.stack_user_dyn_size is not None \
                else np.zeros(n, np.uint64)
            # perf unwinds only samples with registers and a non-empty stack copy
            # (thread__resolve_callchain_unwind)
            m = np.where((b.regs_user_abi != 0) & (d > 0), m, np.uint64(0))
            masks.append(m)
            regs.append(regs_matrix(b.regs_user.astype(np.uint64, copy=False), b.regs_user_offsets, m))
            stacks.append(stack_matrix(b.stack_user, b.stack_user_offsets))
            dyn.append(d)
        w = max(s.shape[1] for s in stacks)
        stacks = [s if s.shape[1] == w else np.pad(s, ((0, 0), (0, w - s.shape[1]))) for s in stacks]
        cols["umask"] = np.concatenate(masks)
        cols["uregs"] = np.concatenate(regs)
        cols["ustack"] = np.concatenate(stacks)
        cols["udyn"] = np.minimum(np.concatenate(dyn), np.uint64(w))

    def _truncated_frame(self) -> int:
        """The frame perf prints where a dwarf chain ran out of stack copy:
        ``ffffffffffffffff [unknown] ([unknown])``."""
        if self._trunc_fid is None:
            self._trunc_fid = int(self._new_frames(np.array([-1], np.int64), np.array([_M64], np.uint64),
                                                   np.array([False]))[0])
        return self._trunc_fid

    def _unwind(self, p: _Pending) -> np.ndarray | None:
        """Replace the user part of each dwarf sample's call chain with the
        frames unwound from its registers and stack copy, joined as perf
        joins them: the kernel part, then PERF_CONTEXT_USER and the user
        frames leaf first. Returns the per-sample truncated flags."""
        from ..unwind.batch import unwind_batch

        c = p.cols
        masks = c["umask"]
        rows = np.flatnonzero(masks)
        if not len(rows):
            return np.zeros(len(masks), dtype=bool)
        pids = c["pid"][rows].tolist()
        spaces_of: dict[int, Any] = {}
        for pid in set(pids):
            spaces_of[pid] = self.symbolizer._space(pid)
        chains, reasons = unwind_batch(self.unwinder, [spaces_of[q] for q in pids], c["uregs"][rows],
                                       masks[rows], c["ustack"][rows], c["udyn"][rows])
        trunc = np.zeros(len(masks), dtype=bool)
        trunc[rows] = [r is not None for r in reasons]
        cc, off = p.flat["cc"]
        n = len(masks)
        clen = np.zeros(n, dtype=np.int64)
        clen[rows] = [len(c) for c in chains]
        if not clen.any():
            return trunc
        import itertools

        flat = np.fromiter(itertools.chain.from_iterable(chains), dtype=np.uint64, count=int(clen.sum()))
        flat[flat == np.uint64(_M64)] = _TRUNC_HOLD  # values >= PERF_CONTEXT_MAX would read as markers
        # the kernel part of each chain: up to its first PERF_CONTEXT_USER (all of it when none)
        orig = np.diff(off)
        pos = np.flatnonzero(cc == np.uint64(abi.PERF_CONTEXT_USER))
        klen = orig.copy()
        if len(pos):
            s_of = np.searchsorted(off, pos, side="right") - 1
            u, fi = np.unique(s_of, return_index=True)
            klen[u] = pos[fi] - off[u]
        ch = clen > 0
        # each sample's new chain: kernel part, PERF_CONTEXT_USER, unwound frames
        # (samples without unwound frames keep theirs), gathered from one array
        both = np.concatenate((cc, np.array([abi.PERF_CONTEXT_USER], dtype=np.uint64), flat))
        coff = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(clen, out=coff[1:])
        starts = np.stack((off[:-1], np.full(n, len(cc)), len(cc) + 1 + coff[:-1]), axis=1).ravel()
        counts = np.stack((np.where(ch, klen, orig), ch.astype(np.int64), clen), axis=1).ravel()
        idx, off3 = ragged_index(starts, counts)
        # three pieces a sample: every third offset is where a sample's new chain starts
        p.flat["cc"] = (both[idx], np.ascontiguousarray(off3[::3]))
        return trunc

    def _process_upto(self, limit: int | None) -> None:
        """Resolve buffered samples and apply queued side-band records with
        time <= ``limit`` (None: everything), in time order."""
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
        parts = [p for p in (self._held, self._pending_from_batches()) if p is not None]
        self._held = None
        pend = _Pending.concat(parts) if parts else None
        del parts  # the parts joined: not held alongside the samples split below
        if pend is not None and limit is not None and self.has_time:
            done = pend.cols["time"] <= np.uint64(max(limit, 0))
            if not done.all():
                if done.any():
                    # the samples resolved now, in time order (below), in one take
                    idx = np.flatnonzero(done)
                    t = pend.cols["time"][idx]
                    if len(t) > 1 and (t[1:] < t[:-1]).any():
                        idx = idx[np.argsort(t, kind="stable")]
                    del t
                    self._held, pend = pend.split(~done, idx)
                else:
                    self._held, pend = pend, None
        if pend is None:
            for _, _, rec in ready:
                self._apply(rec)
            return
        if self.has_time and len(pend) > 1:
            times = pend.cols["time"]
            if (times[1:] < times[:-1]).any():
                pend = pend.keep(np.argsort(times, kind="stable"))
        if not ready:
            pend.cols["comm"] = self._comms_now(pend.cols["tid"])
            self._resolve(pend)
            return
        base = dict(self._comm_of)
        changes: list[tuple[int, int, int]] = []  # (tid, time, comm id)
        times = pend.cols["time"]
        pids = pend.cols["pid"]
        order = np.argsort(pids, kind="stable")  # by pid, time order kept within a pid
        spid = pids[order]
        upid, first, _ = uniq_first(spid)
        bounds = {int(p): [int(s), int(e)] for p, s, e in
                  zip(upid.tolist(), first.tolist(), np.append(first[1:], len(spid)).tolist())}
        stimes = times[order]
        early: list[np.ndarray] = []
        for t, _, rec in ready:
            key = None
            rtype = rec.type
            if rtype in (R.MMAP, R.MMAP2):
                key = rec.pid
            elif rtype == R.FORK and rec.pid != rec.ppid:
                key = rec.pid
            elif rtype == R.KSYMBOL:
                key = _KERNEL_KEY
            if key is not None:
                # samples older than this change must see the maps before it
                if key == _KERNEL_KEY:
                    sel = [np.arange(lo, lo + int(np.searchsorted(stimes[lo:hi], np.uint64(t))), dtype=np.int64)
                           for lo, hi in bounds.values()]
                    for b, s in zip(bounds.values(), sel):
                        b[0] += len(s)
                    idx = order[np.concatenate(sel)] if sel else np.zeros(0, np.int64)
                else:
                    b = bounds.get(key)
                    if b is None:
                        idx = np.zeros(0, np.int64)
                    else:
                        k = b[0] + int(np.searchsorted(stimes[b[0]:b[1]], np.uint64(t)))
                        idx = order[b[0]:k]
                        if rtype in (R.MMAP, R.MMAP2) and len(idx) and \
                                not self._touches(pend, idx, rec.addr, rec.addr + rec.len):
                            # a new mapping only changes addresses inside it: these
                            # samples resolve the same before and after it
                            idx = np.zeros(0, np.int64)
                        else:
                            b[0] = k
                if len(idx):
                    idx = np.sort(idx)
                    sub = pend.take(idx)
                    sub.cols["comm"] = self._comm_timeline(sub.cols["tid"], sub.cols["time"], base, changes)
                    self._resolve(sub)
                    early.append(idx)
            _, ch = self._apply(rec)
            if ch is not None:
                changes.append((ch[0], t, ch[1]))
        if early:
            left = np.ones(len(pend), dtype=bool)
            for idx in early:
                left[idx] = False
            if not left.any():
                return
            pend = pend.keep(left)
        pend.cols["comm"] = self._comm_timeline(pend.cols["tid"], pend.cols["time"], base, changes)
        self._resolve(pend)

    @staticmethod
    def _touches(pend: _Pending, idx: np.ndarray, lo: int, hi: int) -> bool:
        """Whether any address of samples ``idx`` (ip or call chain) is in [lo, hi)."""
        lo_, hi_ = np.uint64(lo), np.uint64(min(hi, (1 << 64) - 1))
        ip = pend.cols["ip"][idx]
        if ((ip >= lo_) & (ip < hi_)).any():
            return True
        if "cc" in pend.flat:
            cc, off = pend.flat["cc"]
            sub, _ = _take_flat(cc, off, idx)
            if ((sub >= lo_) & (sub < hi_)).any():
                return True
        return False

    def _set_comm(self, tid: int, cid: int) -> None:
        """Every change of ``_comm_of`` goes through here (and into ``_comm_arr``)."""
        self._comm_of[tid] = cid
        a = self._comm_arr
        if 0 <= tid < _COMM_ARR_MAX:
            if tid >= len(a):
                a = np.concatenate((a, np.full(min(max(tid + 1, 2 * len(a)), _COMM_ARR_MAX) - len(a), -1,
                                               dtype=np.int32)))
                self._comm_arr = a
            a[tid] = cid

    def _comms_now(self, tids: np.ndarray) -> np.ndarray:
        a = self._comm_arr
        if len(tids) and int(tids.min()) >= 0 and int(tids.max()) < len(a):
            cid = a[tids]
            if int(cid.min()) >= 0:  # every thread has a comm already
                return cid
        return self._comms_from(tids, self._comm_of)

    def _comms_from(self, tids: np.ndarray, state: dict[int, int]) -> np.ndarray:
        ut, tinv = uniq_inv(tids)
        cid = np.empty(len(ut), dtype=np.int32)
        for i, t in enumerate(ut.tolist()):
            v = state.get(t)
            if v is None:  # perf names a thread it has no COMM for ":TID"
                v = self.comm_id(f":{t}")
                if state is not self._comm_of:
                    state[t] = v
                if t not in self._comm_of:
                    self._set_comm(t, v)
            cid[i] = v
        return cid[tinv.reshape(-1)]

    def _comm_timeline(self, tids: np.ndarray, times: np.ndarray, base: dict[int, int],
                       changes: list[tuple[int, int, int]]) -> np.ndarray:
        """Comm of each sample: the last change of its thread at or before its
        time, else the thread's comm before the round (``base``)."""
        out = self._comms_from(tids, base)
        if not changes or not len(tids):
            return out
        # times are u64 in the file (a damaged one may be >= 2^63): never through int64
        ctid = np.fromiter((c[0] for c in changes), dtype=np.int64, count=len(changes))
        ctime = np.fromiter((c[1] for c in changes), dtype=np.uint64, count=len(changes))
        ccomm = np.fromiter((c[2] for c in changes), dtype=np.int64, count=len(changes))
        hit = isin(tids, ctid)
        if not hit.any():
            return out
        st, stime = tids[hit], times[hit]
        tmin = min(int(stime.min()), int(ctime.min()))
        span = max(int(stime.max()), int(ctime.max())) - tmin + 2
        allt, rank = uniq_inv(np.concatenate((ctid, st)))
        rank = rank.reshape(-1)
        if len(allt) * span >= (1 << 62):  # keys would overflow: walk the changes in order
            res = out[hit]
            for j, (ti, tt, cc) in enumerate(changes):
                res[(st == ti) & (stime >= np.uint64(tt))] = cc
            out[hit] = res
            return out
        base = np.uint64(tmin)
        ckey = rank[:len(ctid)] * span + ((ctime - base).astype(np.int64) + 1)
        skey = rank[len(ctid):] * span + ((stime.astype(np.uint64) - base).astype(np.int64) + 1)
        o = np.argsort(ckey, kind="stable")
        ckey_s, crank_s, ccomm_s = ckey[o], rank[:len(ctid)][o], ccomm[o]
        j = np.searchsorted(ckey_s, skey, side="right") - 1
        ok = (j >= 0) & (crank_s[np.maximum(j, 0)] == rank[len(ctid):])
        res = out[hit]
        res[ok] = ccomm_s[j[ok]]
        out[hit] = res
        return out

    def flush(self) -> None:
        """Apply every queued record and resolve every buffered sample."""
        self._process_rounds()
        self._process_upto(None)

    # --- symbolization -----------------------------------------------------------
    def _sid(self, pid: int) -> int:
        """Space id of ``pid``'s current maps. Processes whose mappings are
        identical (forked workers of one program) share a space id, so an
        address is symbolized once for all of them; JIT maps (``perf-PID.map``,
        anonymous executable memory) keep a process to itself."""
        epoch = self._epoch.get(pid, 0)
        key = (pid, epoch)
        s = self._sids.get(key)
        if s is not None:
            return s
        space = self.maps.spaces.get(pid)
        # anonymous memory and unmapped addresses only resolve per process
        # through a JIT map (perf-PID.map); without one the result is the same
        own = space is None or not len(space) or self.symbolizer.perf_map(pid) is not None
        fp = ("pid", pid, epoch) if own else tuple((m.start, m.len, m.pgoff, m.filename, m.build_id) for m in space)
        s = self._sid_of_fp.get(fp)
        if s is None:
            if len(self._sid_of_fp) >= 0xFFFF:  # space ids exhausted: start the user cache over
                self._sid_of_fp.clear()
                self._sids.clear()
                self._ucache = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
                if self._ncache is not None:
                    self._nat.resolve_cache_clear(self._ncache, 0)
                    self._pids_stale = True  # the C pid -> space id table, after this round
            s = self._sid_of_fp[fp] = len(self._sid_of_fp) + 1
            self._sid_rep[s] = pid
        self._sids[key] = s
        return s

    def _frames_for(self, pids: np.ndarray, ips: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        """Frame id of each (pid, ip, kernel?) triple; only addresses not seen
        before in the same address-space generation are symbolized."""
        n = len(ips)
        out = np.empty(n, dtype=np.int64)
        if n == 0:
            return out
        if self._kcache_epoch != self._kepoch:
            self._kcache = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
            self._kcache_epoch = self._kepoch
        user = ~kernel
        # no user mapping lies at or above 2**56 on any 64-bit architecture:
        # such "addresses" (garbage a frame-pointer walk picked up) are
        # unknown in every process and cached by value alone
        junk = user & (ips >= np.uint64(1 << 56))
        odd = user & ~junk & (ips >= np.uint64(1 << 48))  # rare: resolved every time
        cached_user = user & ~junk & ~odd
        keys = np.zeros(n, dtype=np.uint64)
        rep_pid = pids
        if cached_user.any():
            rep_pid = pids.copy()
            up = pids[cached_user]
            u, inv = uniq_inv(up)
            inv = inv.reshape(-1)
            sid_list = [self._sid(int(p)) for p in u.tolist()]
            sids = np.array(sid_list, dtype=np.uint64)
            reps = np.array([self._sid_rep.get(x, int(p)) for x, p in zip(sid_list, u.tolist())], dtype=np.int64)
            keys[cached_user] = (sids[inv] << np.uint64(48)) | ips[cached_user]
            # processes with identical maps resolve through one of them
            rep_pid[cached_user] = reps[inv]
        for sel, which in ((cached_user, "u"), (kernel, "k"), (junk, "w")):
            if not sel.any():
                continue
            rows = np.flatnonzero(sel)
            k = keys[rows] if which == "u" else ips[rows]
            uk, kinv = uniq_inv(k)
            kinv = kinv.reshape(-1)
            ckeys, cfids = {"u": self._ucache, "k": self._kcache, "w": self._wcache}[which]
            if len(ckeys):
                pos = np.minimum(np.searchsorted(ckeys, uk), len(ckeys) - 1)
                hit = ckeys[pos] == uk
                ufid = np.where(hit, cfids[pos], -1)
            else:
                hit = np.zeros(len(uk), dtype=bool)
                ufid = np.full(len(uk), -1, dtype=np.int64)
            if not hit.all():
                miss = np.flatnonzero(~hit)
                # one representative row per missing key gives its pid and ip
                rep = np.empty(len(uk), dtype=np.int64)
                rep[kinv] = rows
                r = rep[miss]
                # junk is resolved in no process: which process showed it first
                # (a perf-PID.map names unmapped addresses) would pick its frame
                new = self._new_frames(np.full(len(r), -1, np.int64) if which == "w" else rep_pid[r], ips[r],
                                       kernel[r])
                ufid[miss] = new
                # both sorted: insert instead of sorting the whole cache again
                at = np.searchsorted(ckeys, uk[miss])
                merged = (np.insert(ckeys, at, uk[miss]), np.insert(cfids, at, new))
                if which == "u":
                    self._ucache = merged
                elif which == "k":
                    self._kcache = merged
                else:
                    self._wcache = merged
            out[rows] = ufid[kinv]
        if odd.any():
            rows = np.flatnonzero(odd)
            out[rows] = self._new_frames(pids[rows], ips[rows], kernel[rows])
        return out

    def _new_frames(self, pids: np.ndarray, ips: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        """Symbolize addresses and append them to the frame table."""
        res = self.symbolizer.resolve_many(np.where(kernel, -1, pids), ips, kernel)
        addr = ips.copy()
        # map-relative addresses of user frames (perf's map__map_ip: ip - start + pgoff)
        user = np.flatnonzero(~kernel)
        if len(user):
            up = pids[user]
            o = np.argsort(up, kind="stable")
            sp = up[o]
            cuts = np.flatnonzero(sp[1:] != sp[:-1]) + 1
            for grp in np.split(o, cuts):
                pid = int(up[grp[0]])
                space = self.maps.spaces.get(pid)
                if space is None or not len(space):
                    continue
                rows = user[grp]
                seg = ips[rows]
                idx = space.find_many(seg)
                ok = idx >= 0
                if ok.any():
                    starts = np.fromiter((m.start for m in space), np.uint64, len(space))
                    pgoffs = np.fromiter((m.pgoff for m in space), np.uint64, len(space))
                    ident = np.fromiter((m.identity for m in space), bool, len(space))
                    ii = idx[ok]
                    ok[ok] = ~ident[ii]  # anonymous memory: the address itself, as perf
                    ii = idx[ok]
                    addr[rows[ok]] = seg[ok] - starts[ii] + pgoffs[ii]
        kmod = np.flatnonzero(kernel & (res.sym_id < 0) & (res.offset != ips))
        if len(kmod):  # a kernel module without symbols: the offset in the module, as perf shows it
            addr[kmod] = res.offset[kmod]
        fids = np.arange(self._nframes, self._nframes + len(ips), dtype=np.int64)
        self._nframes += len(ips)
        f = self._frames
        f["ip"].append(ips.copy())
        f["addr"].append(addr)
        f["dso"].append(res.dso_id.astype(np.int32))
        f["sym"].append(res.sym_id.astype(np.int64))
        f["off"].append(res.offset.astype(np.uint64))
        f["kernel"].append(kernel.copy())
        return fids

    def _resolve_native(self, c: dict[str, np.ndarray], cc_flat) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_resolve`'s walk of the call chains and :meth:`_frames_for` in
        one C pass (``resolve_round``) over a cache kept in C: ``(frame ids: the
        leaves, then the kept call-chain entries; entries kept per sample)``.
        New space ids and new frames are made here, by the C code's calls, in
        the numpy path's order (so the ids are the same)."""
        nat, cache = self._nat, self._ncache
        if self._kcache_epoch != self._kepoch:
            nat.resolve_cache_clear(cache, 1)
            self._kcache_epoch = self._kepoch
        n = len(c["ip"])
        if cc_flat is None:
            cc, off = np.zeros(0, np.uint64), np.zeros(n + 1, np.int64)
        else:
            cc = np.ascontiguousarray(cc_flat[0], dtype=np.uint64)
            off = np.ascontiguousarray(cc_flat[1], dtype=np.int64)
        fids = np.empty(n + len(cc), dtype=np.int32)
        kept = np.empty(n, dtype=np.int64)
        try:
            total = nat.resolve_round(cache, np.ascontiguousarray(c["ip"], dtype=np.uint64),
                                      np.ascontiguousarray(c["cpumode"], dtype=np.uint8),
                                      np.ascontiguousarray(c["pid"], dtype=np.int64), cc, off, fids, kept,
                                      self._native_sids, self._native_frames)
        finally:
            if self._pids_stale:
                nat.resolve_cache_clear(cache, 3)
                self._pids_stale = False
        return fids[:total], kept

    def _native_sids(self, pids: list[int]) -> list[tuple[int, int]]:
        """Space id and the pid resolving for it, of each pid (ascending, as
        :meth:`_frames_for` asks)."""
        sids = [self._sid(p) for p in pids]
        return [(s, self._sid_rep.get(s, p)) for s, p in zip(sids, pids)]

    def _native_frames(self, kind: int, pids: bytes, ips: bytes) -> np.ndarray:
        """New frames for ``resolve_round``: kind 1 kernel addresses, else user ones."""
        ipa = np.frombuffer(ips, dtype=np.uint64)
        return self._new_frames(np.frombuffer(pids, dtype=np.int64), ipa, np.full(len(ipa), kind == 1))

    def _resolve(self, p: _Pending) -> None:
        n = len(p)
        if n == 0:
            return
        c = p.cols
        out = self._out
        out["comm"].append(c["comm"] if "comm" in c else self._comms_now(c["tid"]))
        kernel_ip = _KERNEL_MODES[c["cpumode"] & 7]
        leaf_n = n
        if self.unwinder is not None and "umask" in c and "cc" in p.flat:
            out["truncated"].append(self._unwind(p))
        elif self.unwinder is not None:
            out["truncated"].append(np.zeros(n, dtype=bool))
        if self._ncache is not None:
            fids, kept = self._resolve_native(c, p.flat.get("cc"))
        elif "cc" in p.flat:
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
            # which markers say "kernel" (three values: compared directly, np.isin's set-up costs more)
            mk = cc == _KERNEL_CTX_U64[0]
            for v in _KERNEL_CTX_U64[1:]:
                mk |= cc == v
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
        if self._ncache is None:
            fids = self._frames_for(all_pid, all_ips, all_k)
            if self.unwinder is not None:
                cut = all_ips == _TRUNC_HOLD
                if cut.any():
                    fids[cut] = self._truncated_frame()
            fids = fids.astype(np.int32)  # frame ids: 4 bytes per call-chain entry
        out["leaf"].append(fids[:leaf_n])
        if "cc" in p.flat:
            out["stack"].append(fids[leaf_n:])
            out["stack_len"].append(kept)
        for k in ("pid", "tid", "cpu", "time", "period", "event", "ip", "cpumode"):
            out[k].append(c[k])
        self._out_n += n
        if self.keep_raw:
            raw, roff = p.flat["raw"]
            out["raw"].append(raw)
            out["raw_len"].append(np.diff(roff))

    def finish(self, *, stats: DecodeStats | None = None, source: str = "") -> Profile:
        """Resolve what is left and return the :class:`Profile` (of the samples
        not handed out by :meth:`pop_chunk` before)."""
        self.flush()
        return self.pop_chunk(stats=stats, source=source)

    @property
    def resolved(self) -> int:
        """Samples resolved and not handed out yet."""
        return self._out_n

    def _frame_columns(self) -> dict[str, np.ndarray]:
        """The frame table so far as arrays (kept joined: a profile handed out
        later shares them and adds only the new frames)."""
        f = self._frames
        out = {}
        for k, dt in (("ip", np.uint64), ("addr", np.uint64), ("dso", np.int32), ("sym", np.int64),
                      ("off", np.uint64), ("kernel", bool)):
            a = _grow(f[k], dt)
            f[k] = [a] if len(a) else []
            out[k] = a
        return out

    def pop_chunk(self, *, stats: DecodeStats | None = None, source: str = "") -> Profile:
        """A :class:`Profile` of the samples resolved since the last call, in
        time order, sharing the frame table with every other chunk; the
        builder goes on with the next samples. Chunks taken one after another
        hold every sample once, in the order of :meth:`finish`'s single profile
        as long as no chunk holds a sample older than one of an earlier chunk
        (``out_of_order_chunks`` counts those that do)."""
        o = self._out
        self._out = self._new_out()
        n = self._out_n
        self._out_n = 0

        def col(name: str, dtype) -> np.ndarray:
            # each column's parts are let go once joined: one column held twice at a time, not the chunk
            return _grow(o.pop(name), dtype)

        stack_len = col("stack_len", np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        if len(stack_len):
            np.cumsum(stack_len, out=offsets[1:])
        del stack_len
        raw = raw_off = None
        if self.keep_raw:
            raw = col("raw", np.uint8)
            rl = col("raw_len", np.int64)
            raw_off = np.zeros(n + 1, dtype=np.int64)
            if len(rl):
                np.cumsum(rl, out=raw_off[1:])
            del rl
        stats = stats or DecodeStats()
        f = self._frame_columns()
        prof = Profile(
            pid=col("pid", np.int64), tid=col("tid", np.int64), cpu=col("cpu", np.int32),
            time=col("time", np.uint64), period=col("period", np.uint64),
            event=col("event", np.int16), comm=col("comm", np.int32), ip=col("ip", np.uint64),
            cpumode=col("cpumode", np.uint8), leaf=col("leaf", np.int32),
            stack=col("stack", np.int32), stack_offsets=offsets,
            frame_ip=f["ip"], frame_addr=f["addr"], frame_dso=f["dso"], frame_sym=f["sym"], frame_off=f["off"],
            frame_kernel=f["kernel"],
            comms=list(self.comms), event_names=self.event_names, symbolizer=self.symbolizer,
            has_callchain=self.has_callchain, has_cpu=self.has_cpu, has_time=self.has_time,
            lost=int(stats.lost_samples or stats.lost), stats=stats, raw=raw, raw_offsets=raw_off, source=source,
            truncated=col("truncated", bool) if self.unwinder is not None else None,
            unwind_stats=self.unwinder.stats if self.unwinder is not None else None, thread_comm=self._comm_of)
        del o, col
        if self.has_time and len(prof.time) > 1 and (prof.time[1:] < prof.time[:-1]).any():
            # perf processes samples in time order (ordered events): so do reports and script
            prof = prof.select(np.argsort(prof.time, kind="stable"))
        if self.has_time and len(prof.time):
            if int(prof.time[0]) < self.emitted_max_time:
                self.out_of_order_chunks += 1
            self.emitted_max_time = max(self.emitted_max_time, int(prof.time[-1]))
        return prof


def build_profile(source: RecordSource, *, event_names: list[str] | None = None,
                  symbolizer: Symbolizer | None = None, keep_raw: bool = False, name: str = "",
                  unwind: bool | None = None, arch: str | None = None, callchain: bool = True) -> Profile:
    """Build a :class:`Profile` from a :class:`~pmuscope.records.RecordSource`
    (one pass, chunk by chunk). ``callchain=False`` leaves call chains out
    (neither resolved nor unwound)."""
    b = ProfileBuilder(source.attrs, event_names=event_names, symbolizer=symbolizer, keep_raw=keep_raw,
                       unwind=unwind, arch=arch, callchain=callchain)
    feed = b.feed
    for item in source:
        feed(item)
    return b.finish(stats=source.stats, source=name)


#: samples per profile :func:`iter_profile_chunks` hands out (at least; a round is not cut)
CHUNK_SAMPLES = 8192
#: chunk_samples of the readers that collapse each chunk as it comes (report,
#: export): a chunk's columns, its pending samples and the builder's parts are
#: what a run holds beyond the distinct samples, and the per-chunk steps cost
#: nothing measurable at this size (each round is resolved on its own anyway)
COLLAPSE_CHUNK_SAMPLES = 2 * CHUNK_SAMPLES


def iter_builder_chunks(source: RecordSource, builder: ProfileBuilder, *, name: str = "",
                        chunk_samples: int = CHUNK_SAMPLES) -> Iterator[Profile]:
    """Profiles of ``chunk_samples`` or more resolved samples each (the last
    one may be smaller or empty) while ``builder`` reads ``source``."""
    feed = builder.feed
    for item in source:
        feed(item)
        if builder._out_n >= chunk_samples:
            yield builder.pop_chunk(stats=source.stats, source=name)
    builder.flush()
    yield builder.pop_chunk(stats=source.stats, source=name)


def join_chunks(chunks: Iterable[Profile]) -> Profile:
    """One :class:`Profile` of the chunks of :func:`iter_profile_chunks` (what
    :func:`load_profile` gives for the same file)."""
    parts = list(chunks)
    last = parts[-1]
    if len(parts) == 1:
        return last
    kw: dict[str, Any] = {}
    for name in ("pid", "tid", "cpu", "time", "period", "event", "comm", "ip", "cpumode", "leaf"):
        kw[name] = np.concatenate([getattr(c, name) for c in parts])
    kw["stack"], kw["stack_offsets"] = _concat_flat([(c.stack, c.stack_offsets) for c in parts])
    kw["stack"] = kw["stack"].astype(np.int32, copy=False)
    if last.raw is not None:
        kw["raw"], kw["raw_offsets"] = _concat_flat([(c.raw, c.raw_offsets) for c in parts])
    if last.truncated is not None:
        kw["truncated"] = np.concatenate([c.truncated for c in parts])
    for name in ("frame_ip", "frame_addr", "frame_dso", "frame_sym", "frame_off", "frame_kernel", "comms",
                 "event_names", "symbolizer", "has_callchain", "has_cpu", "has_time", "lost", "stats", "source",
                 "tp_formats", "unwind_stats", "thread_comm"):
        kw[name] = getattr(last, name)
    prof = Profile(**kw)
    if prof.has_time and len(prof.time) > 1 and (prof.time[1:] < prof.time[:-1]).any():
        prof = prof.select(np.argsort(prof.time, kind="stable"))
    return prof


def _same_kernel(pf) -> bool:
    """True when the file was recorded on the running kernel (so /proc/kallsyms applies)."""
    from ..perfdata import Feature

    rel = pf.parsed_feature(Feature.OSRELEASE)
    host = pf.parsed_feature(Feature.HOSTNAME)
    u = os.uname()
    if rel is not None and str(rel) != u.release:
        return False
    if host is not None and str(host) != u.nodename:
        return False
    return True


def _tracepoint_formats(pf) -> dict:
    """Formats of the file's tracepoints: from its TRACING_DATA feature, else
    (a file recorded here) from this machine's tracefs."""
    tps = [(i, int(a.attr.config)) for i, a in enumerate(pf.attrs) if a.attr.type == abi.PERF_TYPE_TRACEPOINT]
    if not tps:
        return {}
    from ..perfdata import Feature
    from ..sampling.tpformat import format_for_id, parse_tracing_data

    by_id: dict = {}
    blob = pf.parsed_feature(Feature.TRACING_DATA)
    if blob:
        try:
            by_id = parse_tracing_data(blob)
        except Exception:  # an unreadable TRACING_DATA: fall back to tracefs
            by_id = {}
    out = {}
    for i, tp_id in tps:
        fmt = by_id.get(tp_id)
        if fmt is None and _same_kernel(pf):
            try:
                fmt = format_for_id(tp_id)
            except Exception:
                fmt = None
        if fmt is not None:
            out[i] = fmt
    return out


def _background(fn):
    """Run ``fn()`` in a thread (reading /proc/kallsyms is mostly kernel time,
    done while the data section is decoded); returns a function that waits
    for its result (or raises its exception)."""
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # handed to the caller that waits
            box["error"] = err

    th = threading.Thread(target=work, name="pmuscope-kallsyms", daemon=True)
    th.start()

    def result():
        th.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result


def _plain_path(pf) -> str | None:
    """The path of the regular file an open :class:`~pmuscope.perfdata.PerfDataFile`
    reads (so its data section is cut straight from the file, as for a path),
    or None (a stream, bytes, the directory format, or the name no longer
    naming that file)."""
    f = getattr(pf, "_file", None)
    name = getattr(f, "name", None)
    if not isinstance(name, str) or getattr(pf, "_dir_files", None):
        return None
    try:
        a, b = os.fstat(f.fileno()), os.stat(name)
    except (OSError, ValueError):
        return None
    return name if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) else None


class _Opened:
    """A perf.data input opened for reading samples: the file (SPE data
    synthesized into samples), its decoded stream and a symbolizer."""

    def __init__(self, path_or_file: Any, *, symbolizer: Symbolizer | None, kernel_symbols: bool | None,
                 itrace: str | None, callchain: bool = True) -> None:
        from ..perfdata import Feature, PerfDataFile
        from ._fastload import kernel_table_kept, load_kernel_symbols, profile_source

        own = not isinstance(path_or_file, PerfDataFile)
        pf = PerfDataFile(path_or_file) if own else path_or_file
        try:
            from ..spe import might_hold_spe

            spe = None
            if might_hold_spe(pf):
                from ..spe.synth import open_synthesized  # Arm SPE AUX data -> sample events (``itrace``: perf's --itrace)

                spe = open_synthesized(pf, itrace)
            if spe is not None:
                if own:
                    pf.close()
                pf, own, path_or_file = spe, True, spe
            self.pf, self.own = pf, own
            if symbolizer is None:
                here = _same_kernel(pf)
                ks = kernel_symbols if kernel_symbols is not None else here
                # the running kernel's vdso image names [vdso] addresses of its own recordings only
                # the kernel's table is loaded when a kernel address needs it: kept for this
                # boot, it is mapped then; else kallsyms is read in a thread from now on
                # (mostly kernel time, overlapping the decoding)
                kernel = False if not ks else load_kernel_symbols if kernel_table_kept() else \
                    _background(load_kernel_symbols)
                symbolizer = Symbolizer(kernel=kernel, vdso=here)
            self.symbolizer = symbolizer
            path = os.fspath(path_or_file) if isinstance(path_or_file, (str, os.PathLike)) else None
            if path is None and spe is None and not own:  # the caller's PerfDataFile (export's)
                path = _plain_path(pf)
            self.source = profile_source(pf, path, callchains=callchain)
            a = pf.parsed_feature(Feature.ARCH)
            self.arch = str(a) if a else None
        except BaseException:
            if own:
                pf.close()
            raise

    def close(self) -> None:
        if self.own:
            self.pf.close()


def load_profile(path_or_file: Any, *, symbolizer: Symbolizer | None = None, keep_raw: bool = False,
                 kernel_symbols: bool | None = None, unwind: bool | None = None,
                 itrace: str | None = None, callchain: bool = True) -> Profile:
    """Read a perf.data file (path, ``"-"``, file object, bytes or an open
    :class:`~pmuscope.perfdata.PerfDataFile`) into a :class:`Profile`.

    Kernel addresses are named from this machine's ``/proc/kallsyms`` only when
    the file was recorded on the running kernel (same hostname and release in
    its header), unless ``kernel_symbols`` says otherwise.

    Samples recorded with ``--call-graph dwarf`` (user registers and stack
    copies) get their user call chains unwound from the binaries' DWARF CFI
    (:mod:`pmuscope.unwind`), after the kernel part of the chain as perf
    joins them; ``unwind=False`` (or ``PMUSCOPE_UNWIND=0``) keeps the
    kernel's chains alone. ``Profile.unwind_stats`` says how many stopped early.
    ``callchain=False`` reads no call chains at all (leaf frames only).
    """
    op = _Opened(path_or_file, symbolizer=symbolizer, kernel_symbols=kernel_symbols, itrace=itrace,
                 callchain=callchain)
    try:
        prof = build_profile(op.source, event_names=op.pf.event_names, symbolizer=op.symbolizer, keep_raw=keep_raw,
                             name=op.pf.source, unwind=unwind, arch=op.arch, callchain=callchain)
        if keep_raw:
            prof.tp_formats = _tracepoint_formats(op.pf)
        return prof
    finally:
        op.close()


def iter_profile_chunks(path_or_file: Any, *, symbolizer: Symbolizer | None = None, keep_raw: bool = False,
                        kernel_symbols: bool | None = None, unwind: bool | None = None, itrace: str | None = None,
                        callchain: bool = True, chunk_samples: int | None = None,
                        round_samples: int = 0) -> Iterator[Profile]:
    """:func:`load_profile` in pieces: profiles of at least ``chunk_samples``
    samples each (the last may be smaller), in time order, sharing one frame
    table, so a reader of any size holds one chunk's samples at a time. Their
    samples, joined, are :func:`load_profile`'s (see
    :meth:`ProfileBuilder.pop_chunk` for the one exception: a sample older than
    one of an earlier chunk). Each chunk's ``unwind_stats`` and ``stats`` are
    the running totals; the last chunk's are the file's.

    ``round_samples``: resolve rounds together until that many samples wait
    (:meth:`ProfileBuilder._process_rounds`): the same samples, frames and
    comms, fewer steps, but frame, symbol and comm ids assigned in another
    order, so for readers that print by content (``script``), not reports
    that break ties by id."""
    op = _Opened(path_or_file, symbolizer=symbolizer, kernel_symbols=kernel_symbols, itrace=itrace,
                 callchain=callchain)
    try:
        b = ProfileBuilder(op.source.attrs, event_names=op.pf.event_names, symbolizer=op.symbolizer,
                           keep_raw=keep_raw, unwind=unwind, arch=op.arch, callchain=callchain,
                           round_samples=round_samples)
        tp = _tracepoint_formats(op.pf) if keep_raw else {}
        for prof in iter_builder_chunks(op.source, b, name=op.pf.source,
                                        chunk_samples=chunk_samples or CHUNK_SAMPLES):
            prof.tp_formats = tp
            yield prof
            del prof  # the next chunk is built without this one alive here
    finally:
        op.close()
