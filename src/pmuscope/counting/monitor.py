"""Counter time series for data sets: one row per (interval, CPU) or
(interval, thread), with the per-CPU context a DVFS model needs.

The sampling loop runs in its own thread and is built for 1 ms intervals on
every CPU:

- **Deadlines, not sleeps.** Interval *k* ends at ``start + k * interval`` on
  CLOCK_MONOTONIC; the loop sleeps to that absolute deadline
  (``clock_nanosleep(TIMER_ABSTIME)``), so lateness never accumulates into
  drift. A wake-up later than ``late_tolerance`` is flagged ``late``; one
  that missed whole deadlines skips them (counted in ``skipped``) and the row
  covers the longer interval — its ``interval_ms`` says so.
- **One read per group, straight into a chunk buffer.** Each (CPU|thread,
  group) is read with ``read`` of ``PERF_FORMAT_GROUP |
  TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING`` into a preallocated buffer;
  deltas, scaling and context columns are computed with numpy once per
  chunk, off the sampling thread.
- **The loop in C where built.** ``_native.monitor_loop`` sleeps and reads
  interval after interval without the GIL and returns to Python only for a
  context sample, the end of a chunk or of the run, or a look at the
  monitored process; the Python loop (:func:`_loop_python`) is the
  reference, chosen with ``loop="python"`` or ``PMUSCOPE_NATIVE_MONITOR=0``,
  and fills the same chunks (tested on a fake clock). What remains per
  interval is the kernel's: a timer wake-up and a read per group (reading
  another CPU's counters is an IPI to it).
- **Context at its own period.** cpufreq, thermal, hwmon and powercap are
  read every ``context_ms`` (default: the interval, at least 10 ms;
  ``scaling_cur_freq`` is refreshed by the governor every few ms) and
  /proc/stat utilization every ``util_ms`` (default: at least 100 ms: it
  moves in scheduler ticks, and the kernel formats every IRQ's count on each
  read, tens of µs). Rows in between carry the latest values.
- **Real-time priority when allowed.** With intervals under 10 ms the
  sampling thread asks for SCHED_FIFO priority 1 (``realtime=None``, the
  default; ``True`` requires it, ``False`` never): on a loaded machine a
  normal thread waits behind others and its intervals go late.

Columns: ``timestamp`` (ns, CLOCK_MONOTONIC, at the end of the interval),
``interval_ms``, ``cpu`` or ``tid``, one column per event (delta scaled by
``time_enabled/time_running`` of its group and by the event's sysfs
``.scale``; NaN when the group was enabled but never got on the PMU, or
the event does not exist on that CPU; 0 for a thread that did not run), ``time_enabled``/``time_running`` (ns deltas; with several groups
the largest enabled and the smallest running time), ``late``, ``skipped``,
then context: ``freq_mhz``, ``util``, ``governor`` and machine columns
(``temp_*_c``, ``hwmon_*``, ``energy_*_j``).
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import InvalidAttrError, PmuscopeError, ProcessGoneError, require
from ..events import parse_events
from ..events.spec import EventSpec
from ..kernel import abi
from ..kernel.syscall import PerfEventFd
from .context import ContextSampler, online_cpus, parse_cpu_list, power_pmu_events
from ..system.realtime import request_fifo, set_timer_slack  # noqa: F401 - set_timer_slack: also imported from here

__all__ = ["Monitor", "monitor", "IntervalScheduler", "Tick", "MonitorStats", "resolve_events"]

_READ_FORMAT = abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING

# --------------------------------------------------------------------------- clock and sleep

_libc = ctypes.CDLL(None, use_errno=True)
CLOCK_MONOTONIC = time.CLOCK_MONOTONIC
TIMER_ABSTIME = 1


class _timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


try:
    _clock_nanosleep = _libc.clock_nanosleep
    _clock_nanosleep.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_timespec), ctypes.c_void_p]
    _clock_nanosleep.restype = ctypes.c_int
except AttributeError:  # pragma: no cover - every Linux libc has it
    _clock_nanosleep = None


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in ns (the clock perf uses with ``-k monotonic``)."""
    return time.clock_gettime_ns(CLOCK_MONOTONIC)


def make_sleep_until() -> Callable[[int], None]:
    """A function sleeping until an absolute CLOCK_MONOTONIC time in ns, with
    ``clock_nanosleep(TIMER_ABSTIME)`` (no drift from relative sleeps)."""
    if _clock_nanosleep is None:  # pragma: no cover

        def sleep_until_rel(deadline_ns: int) -> None:
            delay = deadline_ns - monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)

        return sleep_until_rel
    ts = _timespec()
    ref = ctypes.byref(ts)

    def sleep_until(deadline_ns: int) -> None:
        ts.tv_sec, ts.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        while _clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ref, None) != 0:  # EINTR: sleep again
            pass

    return sleep_until



@dataclass
class Tick:
    """One deadline reached: ``deadline`` and ``now`` in ns, ``late`` when
    ``now - deadline`` exceeded the tolerance, ``skipped`` deadlines passed
    without a reading (the row then spans 1 + skipped intervals)."""

    index: int
    deadline: int
    now: int
    late: bool
    skipped: int


class IntervalScheduler:
    """Deadline-based interval timer: deadline *k* is ``start + k*interval``.

    ``clock`` and ``sleep_until`` are injectable (a fake clock in tests).
    """

    def __init__(
        self,
        interval_ns: int,
        *,
        tolerance_ns: int | None = None,
        clock: Callable[[], int] = monotonic_ns,
        sleep_until: Callable[[int], None] | None = None,
    ) -> None:
        if interval_ns <= 0:
            raise PmuscopeError(f"the interval must be positive, not {interval_ns} ns")
        self.interval_ns = int(interval_ns)
        self.tolerance_ns = int(tolerance_ns if tolerance_ns is not None else max(self.interval_ns // 10, 20_000))
        self.clock = clock
        self.sleep_until = sleep_until or make_sleep_until()
        self.start_ns = 0
        self.k = 1
        self.late = 0
        self.skipped = 0
        self.ticks = 0

    def start(self, start_ns: int | None = None) -> int:
        self.start_ns = self.clock() if start_ns is None else start_ns
        self.k = 1
        return self.start_ns

    def wait(self) -> Tick:
        """Sleep to the next deadline and say how well it was met."""
        deadline = self.start_ns + self.k * self.interval_ns
        now = self.clock()
        if now < deadline:
            self.sleep_until(deadline)
            now = self.clock()
        lateness = now - deadline
        skipped = lateness // self.interval_ns if lateness >= self.interval_ns else 0
        late = lateness > self.tolerance_ns
        index = self.k
        self.k += 1 + skipped
        self.ticks += 1
        self.late += late
        self.skipped += skipped
        return Tick(index, deadline, now, late, skipped)


# --------------------------------------------------------------------------- events

def resolve_events(events: str | Sequence[str | EventSpec], sysfs: str = "/sys") -> list[EventSpec]:
    """Event strings (``"cycles,instructions"``, ``["{cycles,instructions}", ...]``)
    or EventSpecs → EventSpecs, with perf's event grammar
    (:func:`pmuscope.events.parse_events`)."""
    if isinstance(events, str):
        events = [events]
    specs: list[EventSpec] = []
    texts: list[str] = []
    for ev in events:
        if isinstance(ev, EventSpec):
            specs.append(ev)
        else:
            texts.append(ev)
    if texts:
        specs.extend(parse_events(",".join(texts), sysfs_root=sysfs))
    if not specs:
        raise PmuscopeError("no events given: pass -e EVENT[,EVENT...] (e.g. -e cycles,instructions)")
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise PmuscopeError(f"event {sorted(dup)[0]!r} is given twice; each event becomes one column")
    return specs


_CORE_TYPES = (abi.PERF_TYPE_HARDWARE, abi.PERF_TYPE_SOFTWARE, abi.PERF_TYPE_HW_CACHE, abi.PERF_TYPE_RAW)


def _core_pmu_type(sysfs: str = "/sys") -> int | None:
    try:
        with open(os.path.join(sysfs, "bus/event_source/devices/cpu/type")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def plan_groups(specs: Sequence[EventSpec], group: bool, sysfs: str = "/sys") -> list[list[int]]:
    """Indices of ``specs`` per perf group. Braced groups from the event
    string are kept; with ``group=True`` the remaining events that may share a
    group (generic hardware/cache/raw/software and the core PMU) share one,
    and every other PMU (power, msr, uncore...) gets a group of its own kind;
    with ``group=False`` each remaining event is read alone."""
    core = _core_pmu_type(sysfs)
    groups: list[list[int]] = []
    braced: dict[int, list[int]] = {}
    by_kind: dict[Any, list[int]] = {}
    for i, s in enumerate(specs):
        if s.group is not None:
            if s.group not in braced:
                braced[s.group] = []
                groups.append(braced[s.group])
            braced[s.group].append(i)
        elif group:
            kind = "core" if s.attr.type in _CORE_TYPES or s.attr.type == core else s.attr.type
            if kind not in by_kind:
                by_kind[kind] = []
                groups.append(by_kind[kind])
            by_kind[kind].append(i)
        else:
            groups.append([i])
    return groups


# --------------------------------------------------------------------------- the monitor


def _open_with_fallback(attr: abi.perf_event_attr, pid: int, cpu: int, group: PerfEventFd | None, name: str) -> PerfEventFd:
    """Open, retrying without ``exclude_guest`` when the kernel rejects it:
    PMUs that cannot tell guest from host (msr, some uncore) refuse the bit
    perf sets by default, and perf drops it the same way
    (tools/perf/util/evsel.c, evsel__detect_missing_features / fallback)."""
    try:
        return PerfEventFd(attr, pid=pid, cpu=cpu, group=group, event=name)
    except InvalidAttrError:
        if not attr.exclude_guest:
            raise
        attr.exclude_guest = 0
        return PerfEventFd(attr, pid=pid, cpu=cpu, group=group, event=name)


def _process_alive(stat_path: str) -> bool:
    """False once /proc/PID is gone or the process is a zombie (state Z/X:
    it exited and waits to be reaped; its threads count nothing more)."""
    try:
        with open(stat_path, "rb") as f:
            text = f.read()
    except OSError:
        return False
    state = text[text.rfind(b")") + 2 : text.rfind(b")") + 3]
    return state not in (b"Z", b"X")



@dataclass
class MonitorStats:
    """How well the run kept its deadlines, and what it cost."""

    intervals: int = 0
    late: int = 0
    skipped: int = 0
    rows: int = 0
    #: CPU time (user+sys) of the sampling thread, seconds
    sampler_cpu_s: float = 0.0
    elapsed_s: float = 0.0
    #: kernel timer only: samples the kernel dropped because a CPU's ring was
    #: full (PERF_RECORD_LOST), and times a CPU's timer was throttled
    #: (PERF_RECORD_THROTTLE): their intervals are skipped ones
    lost: int = 0
    throttled: int = 0
    #: kernel timer only: times the drain restarted a CPU's timer
    #: (PERF_EVENT_IOC_PERIOD) that was throttled or gave no sample for 10 intervals
    restarts: int = 0

    @property
    def on_time_fraction(self) -> float:
        return 1.0 - self.late / self.intervals if self.intervals else 1.0


@dataclass
class _Slot:
    """One (entity, group) read: fd, offset and size in the record (u64 words)."""

    fd: PerfEventFd
    entity: int
    columns: list[int]
    offset: int
    nwords: int
    members: list[PerfEventFd] = field(default_factory=list)


@dataclass
class _Chunk:
    """A chunk of intervals as the sampling thread fills it: the raw group
    reads (``buf``, one record of ``rec`` bytes per interval) and per
    interval its time, deadline number, late flag and skipped deadlines."""

    buf: bytearray
    views: list = field(default_factory=list)
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    deadline_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    skipped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    n: int = 0
    ctx: list = field(default_factory=list)  # (interval index, freq, util, machine)
    #: kernel timer: the late flag per (interval, entity) (n × E); None: ``late`` for all
    late_e: np.ndarray | None = None


#: ``PMUSCOPE_NATIVE_MONITOR=0`` selects the Python sampling loop (the
#: reference) even where ``pmuscope._native.monitor_loop`` is built
NATIVE_MONITOR = os.environ.get("PMUSCOPE_NATIVE_MONITOR", "1") != "0"

#: flags of one loop step: a context sample is due for the last row; the run
#: ended (last deadline passed or stop asked); time to see if the process lives
_CTX_DUE, _ENDED, _ALIVE_DUE = 1, 2, 4


def _native_loop():
    """``pmuscope._native.monitor_loop`` when built, else None."""
    try:
        from .. import _native
    except ImportError:
        return None
    return getattr(_native, "monitor_loop", None)


@dataclass
class _LoopParams:
    """What one step of the sampling loop needs besides the chunk."""

    start: int
    interval: int
    tolerance: int
    last: int  # the last deadline number, or -1: no end
    ctx_every: int  # 0: no context
    ctx_state: np.ndarray  # int64 [crossings of a ctx_every multiple so far, every how many is a sample]
    alive_every: int  # 0: no process to watch
    stop: bytearray  # stop[0] != 0: end after the current interval
    clock: Callable[[], int]
    sleep_until: Callable[[int], None]


def _make_chunk(plan: Sequence[tuple[int, int, int]], rec: int, n: int, views: bool = True) -> _Chunk:
    """A chunk of ``n`` intervals of ``rec`` bytes for the groups of ``plan``
    ((fd, byte offset, size) each); ``views``: the Python loop's iovecs."""
    chunk = _Chunk(bytearray(n * rec))
    if views:
        mv = memoryview(chunk.buf)
        # one [memoryview] per (interval, group), built once per buffer: readv
        # fills the chunk in place, no bytes object per read
        chunk.views = [[(fd, [mv[i * rec + off : i * rec + off + size]]) for fd, off, size in plan] for i in range(n)]
    chunk.ts = np.zeros(n, dtype=np.int64)
    chunk.deadline_idx = np.zeros(n, dtype=np.int64)
    chunk.late = np.zeros(n, dtype=bool)
    chunk.skipped = np.zeros(n, dtype=np.int32)
    return chunk


def _loop_python(chunk: _Chunk, i: int, n: int, k: int, p: _LoopParams) -> tuple[int, int, int]:
    """The sampling loop's reference implementation: from slot ``i`` of
    ``chunk`` (``n`` slots) and deadline number ``k``, sleep to each deadline,
    read every group into the chunk, and return ``(i, k, flags)`` once the
    chunk is full or a flag is up (``_native.monitor_loop`` does the same in C,
    without the GIL)."""
    start, interval, tolerance, last = p.start, p.interval, p.tolerance, p.last
    ctx_every, ctx_state, alive_every, stop = p.ctx_every, p.ctx_state, p.alive_every, p.stop
    clock, sleep_until = p.clock, p.sleep_until
    readv = os.readv
    views = chunk.views
    ts, idx, late, skipped = chunk.ts, chunk.deadline_idx, chunk.late, chunk.skipped
    flags = 0
    while i < n:
        deadline = start + k * interval
        now = clock()
        if now < deadline:
            sleep_until(deadline)
            now = clock()
        for fd, target in views[i]:
            readv(fd, target)
        lateness = now - deadline
        skip = lateness // interval if lateness >= interval else 0
        if last > 0 and k + skip > last:
            skip = last - k  # deadlines past the run's end are not skipped, they do not exist
        ts[i] = now
        idx[i] = k
        late[i] = lateness > tolerance
        skipped[i] = skip
        i += 1
        if ctx_every and k // ctx_every != (k - 1 - skip) // ctx_every:
            ctx_state[0] += 1
            if ctx_state[0] % ctx_state[1] == 0:
                flags |= _CTX_DUE
        k += 1 + skip
        if (last > 0 and k > last) or stop[0]:
            flags |= _ENDED
        if alive_every and k % alive_every == 0:
            flags |= _ALIVE_DUE
        if flags:
            break
    return i, k, flags


class Monitor:
    """Counter time series; iterate for row dicts, :meth:`batches` for
    columnar numpy batches, :meth:`records` for numpy structured arrays,
    :meth:`to_dataframe` for pandas.

    ``cpus`` (list or ``"0-3"``) or ``pid`` select what is counted (default:
    all online CPUs). With ``pid`` there is one row per thread present at the
    start; threads started later are counted (``inherit``) into the row of
    the thread that created them. ``interval_ms`` may be fractional
    (≥ 0.1). The run ends after ``duration`` seconds or ``count`` interval
    deadlines (a row that spans skipped deadlines counts them all), at
    :meth:`stop`, or when the monitored process exits. ``loop``: the
    sampling loop, ``"native"`` (C, the default where built) or
    ``"python"`` (the reference); :attr:`loop` says which one runs.

    ``timer``: who keeps the intervals. ``"user"``: the sampling loop above
    (a wake-up per interval, a read per group). ``"kernel"``: each CPU's
    cpu-clock hrtimer writes its group's counts into a ring buffer drained
    every chunk (:mod:`.ktimer`; CPU-wide runs only). ``"auto"`` (None, the
    default): the user loop (``ktimer.AUTO_KERNEL`` off: the kernel timer's
    samples can go missing on some kernels); with it on, the kernel timer for
    CPU-wide runs of software events at intervals up to 5 ms when no
    ``loop`` is asked for;
    :attr:`timer` says which one runs (final once open) and
    :attr:`timer_reason` why.
    """

    def __init__(
        self,
        events: str | Sequence[str | EventSpec],
        *,
        cpus: Sequence[int] | str | None = None,
        pid: int | None = None,
        interval_ms: float = 1000.0,
        duration: float | None = None,
        count: int | None = None,
        group: bool = True,
        inherit: bool = True,
        context: bool = True,
        context_ms: float | None = None,
        util_ms: float | None = None,
        realtime: bool | None = None,
        power: bool = True,
        late_tolerance_ms: float | None = None,
        chunk_intervals: int | None = None,
        sysfs: str = "/sys",
        procfs: str = "/proc",
        loop: str | None = None,
        timer: str | None = None,
    ) -> None:
        if interval_ms < 0.1:
            raise PmuscopeError(f"interval {interval_ms} ms is too short: the minimum is 0.1 ms (-I 1 is 1 ms)")
        if duration is not None and duration <= 0:
            raise PmuscopeError(f"--duration must be positive, not {duration}")
        if cpus is not None and pid is not None:
            raise PmuscopeError("give either CPUs (-a/-C) or a process (-p), not both")
        self.sysfs, self.procfs = sysfs, procfs
        self.interval_ns = int(round(interval_ms * 1e6))
        self.interval_ms = interval_ms
        self.pid = pid
        if pid is not None:
            self.per_thread = True
            self.entities = self._threads_of(pid)
        else:
            self.per_thread = False
            if isinstance(cpus, str):
                cpus = parse_cpu_list(cpus)
            online = online_cpus(sysfs)
            self.entities = list(cpus) if cpus is not None else online
            bad = [c for c in self.entities if c not in online]
            if bad:
                raise PmuscopeError(f"CPU {bad[0]} is not online here; online CPUs: {','.join(map(str, online))}")
            if not self.entities:
                raise PmuscopeError("no CPUs to monitor")
        self.specs = resolve_events(events, sysfs)
        if power and not self.per_thread:
            have = {s.name for s in self.specs}
            for pe in power_pmu_events(sysfs):
                if pe.column not in have and f"power/{pe.name}/" not in have:
                    attr = abi.perf_event_attr(type=pe.pmu_type, config=pe.config)
                    self.specs.append(
                        EventSpec(name=pe.column, attr=attr, pmu="power", scale=pe.scale, unit=pe.unit, cpus=pe.cpus, extra={"auto": True})
                    )
        #: why automatically added events (RAPL) were left out, if they were
        self.warnings: list[str] = []
        self.group = group
        self.inherit = inherit
        self.duration = duration
        if count is None and duration is not None:
            count = max(1, int(round(duration * 1e9 / self.interval_ns)))
        self.count = count
        self.context = context and not self.per_thread
        ctx_ms = context_ms if context_ms is not None else max(interval_ms, 10.0)
        self.context_every = max(1, int(round(ctx_ms / interval_ms)))
        u_ms = util_ms if util_ms is not None else max(interval_ms, 100.0)
        #: /proc/stat is read at every util_every-th context sample
        self.util_every = max(1, int(round(u_ms / (self.context_every * interval_ms))))
        self.realtime = realtime
        #: whether the sampling thread ran SCHED_FIFO
        self.realtime_used = False
        tol = late_tolerance_ms * 1e6 if late_tolerance_ms is not None else None
        self.tolerance_ns = int(tol) if tol is not None else None
        if chunk_intervals is None:
            chunk_intervals = int(min(4096, max(1, round(250.0 / interval_ms))))
        self.chunk_intervals = chunk_intervals
        if loop not in (None, "native", "python"):
            raise PmuscopeError(f"loop={loop!r}: choose 'native', 'python' or None (native when built)")
        native = _native_loop() if loop != "python" and (loop == "native" or NATIVE_MONITOR) else None
        if loop == "native" and native is None:
            raise PmuscopeError("loop='native' needs pmuscope._native.monitor_loop, which is not built here")
        self._native_loop = native
        #: the sampling loop in use: "native" (C, no GIL) or "python"; "kernel"
        #: when the kernel timer keeps the intervals
        self.loop = "native" if native is not None else "python"
        if timer not in (None, "auto", "kernel", "user"):
            raise PmuscopeError(f"timer={timer!r}: choose 'auto', 'kernel' or 'user'")
        self._timer_requested = timer or "auto"
        self._loop_requested = loop
        #: "kernel" or "user" (decided at open), and why
        self.timer = "user" if timer == "user" else self._timer_requested
        self.timer_reason = ""
        self._rings: list = []
        self._timer_ids: list[list[int]] = []
        self._wake = None  # (read fd, write fd): stop() wakes the kernel-timer thread's poll
        self.stats = MonitorStats()
        self._stop_flag = bytearray(1)  # the native loop's view of stop()
        self._slots: list[_Slot] = []
        self._opened = False
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=256)
        self._free: queue.Queue = queue.Queue()  # chunk buffers handed back by the consumer
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._ctx: ContextSampler | None = None
        self._rec_words = 0
        self.start_ns = 0
        self.wall_start = 0.0
        self.anchor = (monotonic_ns(), time.time())

    # -- setup
    def _threads_of(self, pid: int) -> list[int]:
        try:
            tids = sorted(int(t) for t in os.listdir(os.path.join(self.procfs, str(pid), "task")))
        except FileNotFoundError:
            raise ProcessGoneError(f"no process {pid} (it exited, or the pid is wrong)", pid=pid) from None
        except OSError as err:
            raise PmuscopeError(f"cannot list the threads of {pid}: {err.strerror}") from err
        return tids

    @property
    def event_names(self) -> list[str]:
        return [s.name for s in self.specs]

    @property
    def entity_column(self) -> str:
        return "tid" if self.per_thread else "cpu"

    def schema(self) -> list[tuple[str, str]]:
        """(column, kind) in output order; kinds as in :mod:`.writers`."""
        cols: list[tuple[str, str]] = [("timestamp", "i64"), ("interval_ms", "f64"), (self.entity_column, "i32")]
        cols += [(name, "f64") for name in self.event_names]
        cols += [("time_enabled", "i64"), ("time_running", "i64"), ("late", "bool"), ("skipped", "i32")]
        if self.context:
            cols += [("freq_mhz", "f64"), ("util", "f64"), ("governor", "str")]
            cols += [(c, "f64") for c in self._context_sampler().machine_columns]
        return cols

    def metadata(self) -> dict[str, str]:
        """Run facts for file metadata (Parquet key-value metadata)."""
        return {
            "pmuscope.interval_ms": repr(self.interval_ms),
            "pmuscope.events": ",".join(self.event_names),
            "pmuscope.units": ",".join(f"{s.name}={s.unit}" for s in self.specs if s.unit),
            "pmuscope.clock": "CLOCK_MONOTONIC",
            # one (CLOCK_MONOTONIC, wall clock) pair read together: maps timestamps to dates
            "pmuscope.anchor_monotonic_ns": str(self.anchor[0]),
            "pmuscope.anchor_unix_s": repr(self.anchor[1]),
            "pmuscope.kernel": os.uname().release,
            "pmuscope.timer": self.timer,
            "pmuscope.target": f"pid {self.pid}" if self.per_thread else f"cpus {','.join(map(str, self.entities))}",
        }

    def _context_sampler(self) -> ContextSampler:
        if self._ctx is None:
            self._ctx = ContextSampler(self.entities, self.sysfs, self.procfs)
        return self._ctx

    def _drop_unopenable_auto_events(self) -> None:
        """RAPL events are added unasked; one that cannot be opened here (no
        permission: they are CPU-wide, paranoid <= 0 or CAP_PERFMON) is left
        out with a warning instead of failing the run."""
        keep = []
        for spec in self.specs:
            if spec.extra.get("auto"):
                cpu = spec.cpus[0] if spec.cpus else self.entities[0]
                try:
                    PerfEventFd(spec.attr.copy(), pid=-1, cpu=cpu, event=spec.name).close()
                except PmuscopeError as err:
                    self.warnings.append(f"{spec.name} left out: {str(err).splitlines()[0]}")
                    continue
            keep.append(spec)
        self.specs = keep

    def open(self) -> "Monitor":
        """Open every counter (disabled); the run enables them. The column
        list (:meth:`schema`) is final once the monitor is open."""
        if self._opened:
            return self
        self._drop_unopenable_auto_events()
        from . import ktimer

        self.timer, self.timer_reason = ktimer.choose_timer(
            self._timer_requested, per_thread=self.per_thread, specs=self.specs, interval_ns=self.interval_ns,
            loop=self._loop_requested, core_type=_core_pmu_type(self.sysfs), rate_limit=ktimer.max_sample_rate(self.procfs),
            grouped=self.group)
        if self.timer == "kernel":
            try:
                self._open_kernel_timer()
                return self
            except PmuscopeError as err:
                if self._timer_requested == "kernel":
                    raise
                # auto: the user loop counts the same events
                self.timer, self.timer_reason = "user", f"the kernel timer did not open: {str(err).splitlines()[0]}"
                self.loop = "native" if self._native_loop is not None else "python"
        groups = plan_groups(self.specs, self.group, self.sysfs)
        offset = 0
        try:
            for e, ent in enumerate(self.entities):
                for cols in groups:
                    cols_here = [j for j in cols if self.per_thread or self.specs[j].cpus is None or ent in self.specs[j].cpus]
                    if not cols_here:
                        continue
                    fds: list[PerfEventFd] = []
                    for j in cols_here:
                        spec = self.specs[j]
                        attr = spec.attr.copy()
                        attr.read_format = _READ_FORMAT
                        attr.disabled = 1 if not fds else 0
                        # with -p, threads started later count into the thread that created
                        # them (perf stat -p does the same); CPU-wide events cannot inherit
                        attr.inherit = 1 if self.per_thread and self.inherit else 0
                        attr.sample_period = 0
                        attr.freq = 0
                        pid, cpu = (ent, -1) if self.per_thread else (-1, ent)
                        fds.append(_open_with_fallback(attr, pid, cpu, fds[0] if fds else None, spec.name))
                    nwords = 3 + len(fds)
                    self._slots.append(_Slot(fds[0], e, cols_here, offset, nwords, fds))
                    offset += nwords
        except BaseException:
            self.close()
            raise
        self._rec_words = offset
        if self.context:
            self._context_sampler()
        self._opened = True
        return self

    def _drain_ns(self) -> int:
        """Kernel timer: how often the rings are drained (a chunk's span)."""
        return max(self.interval_ns, self.chunk_intervals * self.interval_ns)

    def _open_kernel_timer(self) -> None:
        """One group per CPU: a cpu-clock sampling leader and every event as
        a member, with a ring buffer on the leader (:mod:`.ktimer`)."""
        from . import ktimer
        from ..kernel.ring import PAGE_SIZE, RingBuffer

        n = len(self.specs)
        pages = ktimer.ring_pages(self.interval_ns, n, self._drain_ns(), PAGE_SIZE)
        # pinned: never rotated (hardware members), and never scheduled out
        # and back in when a task with pinned events of its own is switched
        # in (perf_event_context_sched_in flips the CPU's flexible groups),
        # which delays the timer's expiries off its grid
        pinned = True
        offset = 0
        try:
            for e, cpu in enumerate(self.entities):
                attr = ktimer.leader_attr(self.interval_ns, pinned=pinned, wakeup_bytes=pages * PAGE_SIZE // 2)
                leader = PerfEventFd(attr, pid=-1, cpu=cpu, event="cpu-clock (monitor timer)")
                fds = [leader]
                self._slots.append(_Slot(leader, e, list(range(n)), offset, 3 + n, fds))
                for spec in self.specs:
                    fds.append(_open_with_fallback(ktimer.member_attr(spec.attr), -1, cpu, leader, spec.name))
                self._rings.append(RingBuffer(leader, pages=pages, track_lost=False))
                self._timer_ids.append([fd.id() for fd in fds])
                offset += 3 + n
        except BaseException:
            self.close()
            raise
        self._rec_words = offset
        self.loop = "kernel"
        if self.context:
            self._context_sampler()
        self._wake = os.pipe()
        self._opened = True

    def close(self) -> None:
        """Stop the sampler and close every fd and context file."""
        self.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for ring in self._rings:
            ring.close()
        self._rings = []
        self._timer_ids = []
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        for slot in self._slots:
            for fd in slot.members:
                fd.close()
        self._slots = []
        self._opened = False
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None

    def stop(self) -> None:
        """Ask the sampling thread to end after the current interval."""
        self._stop_flag[0] = 1
        self._stop.set()
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"x")
            except OSError:  # pragma: no cover - closed meanwhile, or the pipe is full (already woken)
                pass

    def __enter__(self) -> "Monitor":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sampling thread
    def _new_chunk(self) -> _Chunk:
        plan = [(s.fd.fd, s.offset * 8, s.nwords * 8) for s in self._slots]
        return _make_chunk(plan, self._rec_words * 8, self.chunk_intervals, views=self._native_loop is None)

    def _read_baseline(self) -> np.ndarray:
        buf = bytearray(self._rec_words * 8)
        mv = memoryview(buf)
        for slot in self._slots:
            os.readv(slot.fd.fd, [mv[slot.offset * 8 : (slot.offset + slot.nwords) * 8]])
        return np.frombuffer(buf, dtype=np.uint64).copy()

    def _sample_context(self, util: bool = True) -> tuple:
        freq, u, machine = self._ctx.sample(util=util)  # type: ignore[union-attr]
        return freq.copy(), u, machine

    def _set_realtime(self) -> None:
        want = self.realtime if self.realtime is not None else self.interval_ns < 10_000_000
        if not want:
            return
        self.realtime_used = request_fifo(bool(self.realtime), "the sampling thread")

    def _sampler(self) -> None:
        try:
            # Ctrl-C and SIGTERM go to the main thread, whose handlers stop
            # the run: not to this one, sleeping in C without the GIL
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        except (AttributeError, OSError, ValueError):  # pragma: no cover
            pass
        try:
            if self.timer == "kernel":
                self._sampler_loop_kernel()
            else:
                self._sampler_loop()
        except BaseException as err:  # surfaced in the consumer
            self._error = err
        finally:
            self._queue.put(None)

    def _sampler_loop(self) -> None:
        # The hot loop is a step function (_loop_python, or the C loop that
        # releases the GIL) that sleeps and reads until the chunk is full or
        # Python has something to do: a context sample, the end, a look at
        # the monitored process.
        set_timer_slack(1000)
        self._set_realtime()
        cpu0 = time.thread_time()
        interval = self.interval_ns
        tolerance = self.tolerance_ns if self.tolerance_ns is not None else max(interval // 10, 20_000)
        # time.monotonic_ns is CLOCK_MONOTONIC on Linux; since 3.11 time.sleep
        # is clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) on a deadline it
        # computes itself (CPython Modules/timemodule.c pysleep), a C call
        # cheaper than ctypes; 3.10's sleep is select() with a relative timeout
        clock = time.monotonic_ns if sys.platform.startswith("linux") else monotonic_ns
        if sys.version_info >= (3, 11):
            sleep = time.sleep

            def sleep_until(deadline: int) -> None:
                now = clock()
                if now < deadline:
                    sleep((deadline - now) * 1e-9)
        else:
            sleep_until = make_sleep_until()
        stop = self._stop
        # the run covers deadlines 1..last: a skipped deadline does not extend it
        last = self.count if self.count is not None else -1
        ctx_every = self.context_every if self.context else 0
        util_every = self.util_every
        # [context crossings so far, every how many is sampled]: with nothing
        # to read between /proc/stat samples (no cpufreq, sensors or energy:
        # a VM) only those are sampled; the rows between them get the same
        # values either way (NaN frequency, the last utilization)
        ctx_state = np.array([0, util_every if self.context and self._ctx.util_only else 1], dtype=np.int64)
        pid_stat = os.path.join(self.procfs, str(self.pid), "stat") if self.per_thread else None
        alive_every = max(1, int(100_000_000 // interval)) if pid_stat is not None else 0  # ~100 ms
        chunk_n = self.chunk_intervals
        spare = self._new_chunk()  # allocated before the clock starts
        rec = self._rec_words * 8
        native = self._native_loop
        plan = np.array([(s.fd.fd, s.offset * 8, s.nwords * 8) for s in self._slots], dtype=np.int64).tobytes()
        if self.context:
            self._ctx.sample()  # type: ignore[union-attr]  # prime /proc/stat and energy deltas
            last_ctx = self._sample_context()
        else:
            last_ctx = None
        self.wall_start = time.time()
        start = self.start_ns = monotonic_ns()
        params = _LoopParams(start, interval, tolerance, last, ctx_every, ctx_state, alive_every, self._stop_flag, clock,
                             sleep_until)
        self._queue.put((self._read_baseline(), start, last_ctx))
        k = 1
        while not stop.is_set():
            if spare is not None:
                chunk, spare = spare, None
            else:
                chunk = self._free.get_nowait() if not self._free.empty() else self._new_chunk()
            ctx = []
            i = 0
            while i < chunk_n:
                if native is not None:
                    i, k, flags = native(plan, chunk.buf, rec, chunk.ts, chunk.deadline_idx, chunk.late, chunk.skipped,
                                         i, chunk_n, k, start, interval, tolerance, last, ctx_every, ctx_state,
                                         alive_every, self._stop_flag)
                else:
                    i, k, flags = _loop_python(chunk, i, chunk_n, k, params)
                if flags & _CTX_DUE:
                    ctx.append((i - 1, *self._sample_context(int(ctx_state[0]) % util_every == 0)))
                if flags & _ENDED or stop.is_set():
                    stop.set()
                    break
                if flags & _ALIVE_DUE and not _process_alive(pid_stat):
                    stop.set()
                    break
            chunk.n = i
            chunk.ctx = ctx
            self._queue.put(chunk)
        self.stats.sampler_cpu_s = time.thread_time() - cpu0

    def _sampler_loop_kernel(self) -> None:
        # No per-interval work here: each CPU's cpu-clock hrtimer writes its
        # group's counts into its ring; this thread wakes every chunk (or
        # context sample, or when a ring is half full, or at stop) to drain
        # the rings and hand whole intervals to the consumer.
        import select

        from . import ktimer

        cpu0 = time.thread_time()
        P = self.interval_ns
        tolerance = self.tolerance_ns if self.tolerance_ns is not None else max(P // 10, 20_000)
        last = self.count if self.count is not None else -1
        n = len(self.specs)
        E = len(self.entities)
        asm = ktimer.TimerAssembler(E, n, P, tolerance, last)
        clock = time.monotonic_ns
        drain_ns = self._drain_ns()
        ctx_ns = 0
        util_every = self.util_every
        if self.context:
            util_only = self._ctx.util_only  # type: ignore[union-attr]
            ctx_ns = self.context_every * P * (util_every if util_only else 1)
            self._ctx.sample()  # type: ignore[union-attr]  # prime /proc/stat and energy deltas
            last_ctx = self._sample_context()
        else:
            util_only = True
            last_ctx = None
        poller = select.poll()
        ring_of = {}
        for e, ring in enumerate(self._rings):
            poller.register(ring.fileno(), select.POLLIN)
            ring_of[ring.fileno()] = e
        wake_r = self._wake[0]  # type: ignore[index]
        poller.register(wake_r, select.POLLIN)
        self.wall_start = time.time()
        t0 = self.start_ns = monotonic_ns()
        for slot in self._slots:
            slot.fd.enable(group=True)
        self._queue.put((np.zeros(self._rec_words, dtype=np.uint64), t0, last_ctx))
        end_ns = t0 + last * P if last > 0 else None
        next_drain = t0 + drain_ns
        next_ctx = t0 + ctx_ns if ctx_ns else None
        ctx_count = 0
        pending_ctx: list = []  # (interval number, freq, util, machine)
        stop = self._stop
        ids = self._timer_ids
        stats = self.stats
        throttled = [0] * E  # per CPU: THROTTLE records less UNTHROTTLE ones not yet acted on
        while True:
            now = clock()
            wake = next_drain if next_ctx is None else min(next_drain, next_ctx)
            if end_ns is not None and now >= end_ns:
                wake = min(wake, now + max(P, 2_000_000))  # the end is due: drain often until every CPU passed it
            elif end_ns is not None:
                wake = min(wake, end_ns + P // 4)
            ring_woke = False
            if not stop.is_set() and wake > now:
                for fd, _ev in poller.poll(max(1, -(-(wake - now) // 1_000_000))):
                    if fd == wake_r:
                        os.read(wake_r, 64)  # stop() (or a stale wake-up from an earlier run)
                    else:
                        ring_woke = True  # a ring is half full: drain before it overflows
            now = clock()
            if next_ctx is not None and now >= next_ctx:
                ctx_count += 1
                pending_ctx.append(((now - t0) // P, *self._sample_context(util_only or ctx_count % util_every == 0)))
                next_ctx += ctx_ns * max(1, (now - next_ctx) // ctx_ns + 1)
            # a CPU whose samples stopped (see ktimer) must not hold the end: a
            # while after the last deadline the run ends with the rows every CPU has
            ended = stop.is_set() or (end_ns is not None and now >= end_ns + max(50 * P, 100_000_000))
            if not (ended or ring_woke or now >= next_drain or (end_ns is not None and now >= end_ns)):
                continue  # a context sample only: the rows wait for the next drain
            for e, ring in enumerate(self._rings):
                while True:
                    chunk = ring.read_records()
                    if not chunk:
                        break
                    d = ktimer.decode_records(chunk, n, ids[e])
                    stats.lost += d.lost
                    stats.throttled += d.throttles
                    throttled[e] += d.throttles - d.unthrottles
                    if d.unthrottles:
                        asm.reanchor(e)  # the tick restarted the timer on a new phase
                    asm.add(e, d.time, d.enabled, d.running, d.values)
                last_t = asm.last_time[e]
                stalled = last_t is not None and clock() - last_t > max(10 * P, 5_000_000)
                if throttled[e] > 0 or stalled:
                    # Only this CPU's tick unthrottles it, and an idle CPU does
                    # not tick (NO_HZ); a timer can also stop without a THROTTLE
                    # record. Setting the period unthrottles and restarts it now
                    # (__perf_event_period), on a new phase
                    try:
                        self._slots[e].fd.set_period(P)
                    except OSError:  # pragma: no cover
                        pass
                    throttled[e] = 0
                    stats.restarts += 1
                    asm.reanchor(e)
                    # it may stop again: look sooner from now on (a gap lasts until the next drain)
                    drain_ns = min(drain_ns, max(P, 50_000_000))
                    next_drain = min(next_drain, now + drain_ns)
            if now >= next_drain:
                next_drain += drain_ns * max(1, (now - next_drain) // drain_ns + 1)
            rows = asm.finish() if ended else asm.take()
            if rows is not None:
                m = len(rows.k)
                rec = np.empty((m, E, 3 + n), dtype=np.uint64)
                rec[:, :, 0] = n
                rec[:, :, 1] = rows.enabled.view(np.uint64)
                rec[:, :, 2] = rows.running.view(np.uint64)
                rec[:, :, 3:] = rows.values
                out = _Chunk(bytearray(rec.tobytes()))
                out.n = m
                out.ts = t0 + rows.k * P
                out.deadline_idx = rows.k
                out.late_e = rows.late
                out.late = rows.late.any(axis=1)
                out.skipped = rows.skipped
                ctx = []
                keep = []
                for item in pending_ctx:
                    if item[0] <= rows.k[-1]:
                        ctx.append((int(np.searchsorted(rows.k, item[0])), *item[1:]))
                    else:
                        keep.append(item)
                pending_ctx = keep
                out.ctx = ctx
                self._queue.put(out)
            if ended or asm.done:
                if end_ns is not None and now >= end_ns and asm.prev_k < last:
                    stats.skipped += last - asm.prev_k  # deadlines no row reached
                stop.set()
                break
        for slot in self._slots:
            try:
                slot.fd.disable(group=True)
            except OSError:
                pass
        self.stats.sampler_cpu_s = time.thread_time() - cpu0

    # -- the consumer
    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        """Run the monitor and yield one columnar batch (``{column: array}``)
        per chunk of intervals, as they complete."""
        self.open()
        for slot in self._slots:
            slot.fd.reset(group=True)
        prev_switch = sys.getswitchinterval()
        if self.interval_ns < 20_000_000:
            # the sampler must get the GIL back within its tolerance while the
            # consumer formats rows; 5 ms (the default) would make 1 ms late
            sys.setswitchinterval(min(prev_switch, 0.0002))
        try:
            if self.timer != "kernel":  # the kernel timer's thread enables its groups when it starts the clock
                for slot in self._slots:
                    slot.fd.enable(group=True)
            self._stop.clear()
            self._stop_flag[0] = 0
            self._thread = threading.Thread(target=self._sampler, name="pmuscope-monitor", daemon=True)
            self._thread.start()
            # the sampling thread starts the schedule once it is ready, and
            # hands over the baseline read first
            first = self._queue.get()
            if first is None:
                if self._error is not None:
                    raise self._error
                return
            prev_raw, prev_ts, last_ctx = first
            while True:
                chunk = self._queue.get()
                if chunk is None:
                    break
                if chunk.n == 0:
                    continue
                batch, prev_raw, prev_ts, last_ctx = self._build_batch(chunk, prev_raw, prev_ts, last_ctx)
                self.stats.intervals += chunk.n
                self.stats.late += int(chunk.late[: chunk.n].sum())
                self.stats.skipped += int(chunk.skipped[: chunk.n].sum())
                self.stats.rows += len(batch["timestamp"])
                if self._free.qsize() < 4:
                    self._free.put(chunk)  # its data were copied out
                self.stats.elapsed_s = (prev_ts - self.start_ns) / 1e9
                yield batch
            if self._error is not None:
                raise self._error
        finally:
            self.stop()
            if self._thread is not None:
                # drain so a blocked put() can finish
                while self._thread.is_alive():
                    try:
                        self._queue.get(timeout=0.05)
                    except queue.Empty:
                        pass
                self._thread.join()
            sys.setswitchinterval(prev_switch)
            for slot in self._slots:
                try:
                    slot.fd.disable(group=True)
                except OSError:
                    pass

    def _build_batch(self, chunk: _Chunk, prev_raw: np.ndarray, prev_ts: int, last_ctx):
        n, E = chunk.n, len(self.entities)
        raw = np.frombuffer(chunk.buf, dtype=np.uint64, count=n * self._rec_words).reshape(n, self._rec_words)
        full = np.vstack([prev_raw[None, :], raw]).view(np.int64)
        delta = np.diff(full, axis=0)  # u64 wrap-around is two's complement in int64
        ts = chunk.ts[:n]
        dts = np.diff(np.concatenate([[prev_ts], ts]))
        rows = n * E
        out: dict[str, np.ndarray] = {
            "timestamp": np.repeat(ts, E),
            "interval_ms": np.repeat(dts / 1e6, E),
            self.entity_column: np.tile(np.asarray(self.entities, dtype=np.int32), n),
        }
        events = [np.full((n, E), np.nan) for _ in self.specs]
        enabled = np.zeros((n, E), dtype=np.int64)
        running = np.full((n, E), np.iinfo(np.int64).max, dtype=np.int64)
        for slot in self._slots:
            o, e = slot.offset, slot.entity
            d_ena = delta[:, o + 1]
            d_run = delta[:, o + 2]
            np.maximum(enabled[:, e], d_ena, out=enabled[:, e])
            np.minimum(running[:, e], d_run, out=running[:, e])
            # enabled but never on the PMU: not counted (NaN). Not even enabled
            # (a per-thread event of a thread that did not run): a true 0.
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(d_run > 0, d_ena / np.where(d_run > 0, d_run, 1), np.where(d_ena == 0, 1.0, np.nan))
            for k, j in enumerate(slot.columns):
                events[j][:, e] = delta[:, o + 3 + k] * ratio * self.specs[j].scale
        running[running == np.iinfo(np.int64).max] = 0
        for j, spec in enumerate(self.specs):
            out[spec.name] = events[j].reshape(rows)
        out["time_enabled"] = enabled.reshape(rows)
        out["time_running"] = running.reshape(rows)
        out["late"] = np.repeat(chunk.late[:n], E) if chunk.late_e is None else chunk.late_e[:n].reshape(rows)
        out["skipped"] = np.repeat(chunk.skipped[:n], E)
        if self.context:
            ctx = self._ctx
            mcols = ctx.machine_columns  # type: ignore[union-attr]
            freq = np.empty((n, E))
            util = np.empty((n, E))
            mach = np.empty((n, len(mcols)))
            samples = [(-1, *last_ctx)] + chunk.ctx
            starts = [s[0] for s in samples]
            for si, (idx, f, u, m) in enumerate(samples):
                lo = max(idx, 0)
                hi = starts[si + 1] if si + 1 < len(samples) else n
                freq[lo:hi] = f
                util[lo:hi] = u
                mach[lo:hi] = [m.get(c, np.nan) for c in mcols] if mcols else 0
            last_ctx = samples[-1][1:]
            out["freq_mhz"] = freq.reshape(rows)
            out["util"] = util.reshape(rows)
            out["governor"] = np.tile(np.asarray(ctx.governors, dtype=object), n)  # type: ignore[union-attr]
            for c_i, c in enumerate(mcols):
                out[c] = np.repeat(mach[:, c_i], E)
        return out, full[-1].view(np.uint64).copy(), int(ts[-1]), last_ctx

    def records(self) -> Iterator[np.ndarray]:
        """Run the monitor and yield one numpy structured array (a record
        batch: ``batch["cycles"]``, ``batch[0]``) per chunk of intervals."""
        dtypes = {"i64": np.int64, "i32": np.int32, "f64": np.float64, "bool": np.bool_, "str": object}
        dtype = None
        for batch in self.batches():
            if dtype is None:
                dtype = np.dtype([(name, dtypes[kind]) for name, kind in self.schema()])
            rec = np.empty(len(batch["timestamp"]), dtype=dtype)
            for name in dtype.names:
                rec[name] = batch[name]
            yield rec

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield one dict per row (column name → Python value)."""
        for batch in self.batches():
            names = list(batch)
            cols = [batch[c].tolist() for c in names]
            for values in zip(*cols):
                yield dict(zip(names, values))

    def run(self, sink: Callable[[dict[str, np.ndarray]], None]) -> MonitorStats:
        """Run to the end, handing each batch to ``sink`` (e.g. ``writer.write``)."""
        try:
            for batch in self.batches():
                sink(batch)
        finally:
            self.close()
        return self.stats

    def to_dataframe(self):
        """Run to the end and return a pandas DataFrame (needs the ``pandas`` extra)."""
        pd = require("pandas", "pandas", "DataFrames")
        parts = []
        try:
            for batch in self.batches():
                parts.append(batch)
        finally:
            self.close()
        names = [c for c, _ in self.schema()] if parts else []
        data = {c: np.concatenate([p[c] for p in parts]) for c in names} if parts else {}
        df = pd.DataFrame(data)
        if "governor" in df:
            df["governor"] = df["governor"].astype("category")
        return df


def monitor(
    events: str | Sequence[str | EventSpec],
    *,
    cpus: Sequence[int] | str | None = None,
    pid: int | None = None,
    interval_ms: float = 1000.0,
    duration: float | None = None,
    count: int | None = None,
    **kwargs: Any,
) -> Monitor:
    """Counter time series, one row per (interval, CPU) or (interval, thread).

    Returns a :class:`Monitor`: iterate it for row dicts, call
    ``.batches()`` for dicts of numpy columns, ``.records()`` for numpy
    structured arrays, or ``.to_dataframe()``::

        for row in pmuscope.monitor("cycles,instructions", interval_ms=10, count=100):
            print(row["cpu"], row["instructions"] / row["cycles"])
    """
    return Monitor(events, cpus=cpus, pid=pid, interval_ms=interval_ms, duration=duration, count=count, **kwargs)
