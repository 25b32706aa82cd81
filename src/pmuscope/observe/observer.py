"""The observer: a sampler thread that reads a target's counters at a fixed
rate, SHIM-style, into preallocated numpy arrays.

Each sample is bracketed by two ``CLOCK_MONOTONIC_RAW`` stamps (start ``Cs``
before the first read, end ``Ce`` after the last), so :func:`dte_filter` can
judge every period. The sampler thread pins itself to a CPU other than the
observed one (SHIM's observer core) and measures its own cost with a
task-clock counter on itself.

Two loops with the same schedule and columns: a Python loop (``os.readv``
into preallocated buffers, the reference) and, where the native helper is
built, a C loop (``pmuscope._native.sample_loop``). Both read on a grid of
deadlines ``start + k * period``; a slot missed by more than half a period
(the observer was preempted) is skipped and counted as late, never caught up
with back-to-back reads (a burst of reads a few hundred ns apart has a DTE
budget no read meets). ``loop="auto"`` times a few hundred back-to-back
samples of each loop at start and picks with :func:`choose_loop`;
``PMUSCOPE_OBSERVE_LOOP=python|native`` forces one for ``auto``.
"""

from __future__ import annotations

import math
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import PmuscopeError
from ..kernel import PerfEventFd, abi
from ..system._fs import format_cpulist
from .dte import DEFAULT_TOLERANCE, DteResult, dte_filter
from .mmap_page import native_available

try:
    from .. import _native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _native = None

_RAW = time.CLOCK_MONOTONIC_RAW
_GROUP_FORMAT = abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING
#: ``auto`` picks the Python loop only when one of its samples takes at most this share of the
#: period and its bracket jitter at most this share of the DTE budget (tolerance * period)
PY_COST_SHARE = 0.1
PY_JITTER_SHARE = 0.5
#: back-to-back samples of each loop timed at start by ``auto``
CALIBRATION_SAMPLES = 256
#: waits longer than this sleep until this long before the deadline, then spin; timer slack
#: is lowered to 1 us in the sampler thread (a 2-vCPU KVM guest wakes 15 us late at the
#: median, 16 us at p90, 50 us at p99)
NATIVE_SPIN_NS = 30_000
PYTHON_SPIN_NS = 30_000
#: the native loop returns to Python about this often (to honour ``stop``)
NATIVE_SLICE_NS = 20_000_000


@dataclass(frozen=True)
class LoopCost:
    """A loop's measured cost, from back-to-back samples: the median time from
    one sample's start to the next, and the 90th percentile of the change of the
    read bracket (end - start stamp) between consecutive samples, which is what
    the DTE check compares with ``tolerance * period``."""

    per_sample_ns: float
    jitter_ns: float

    @classmethod
    def from_stamps(cls, stamps: np.ndarray) -> "LoopCost":
        st = np.asarray(stamps, dtype=np.int64)
        if st.shape[0] < 3:
            raise ValueError("LoopCost needs at least 3 samples")
        bracket = st[:, 1] - st[:, 0]
        return cls(float(np.median(np.diff(st[:, 0]))), float(np.percentile(np.abs(np.diff(bracket)), 90)))


def _ns(v: float) -> str:
    return f"{v / 1000:,.1f} us" if v >= 10_000 else f"{v:,.0f} ns"


def choose_loop(period_ns: float, tolerance: float, python: LoopCost | None, native: LoopCost | None) -> tuple[str, str]:
    """``("python" | "native", why)`` for the measured costs of each loop (None:
    not available). The Python loop is chosen when its cost per sample is at most
    :data:`PY_COST_SHARE` of the period and its bracket jitter at most
    :data:`PY_JITTER_SHARE` of the DTE budget (``tolerance * period``): the
    period is comfortably above what it costs. Otherwise the native loop."""
    if native is None:
        return "python", "the native loop is not built here"
    if python is None:
        return "native", "the Python loop was not measured"
    budget = tolerance * period_ns
    limit = PY_COST_SHARE * period_ns
    jlimit = PY_JITTER_SHARE * budget
    nat = f"native loop {_ns(native.per_sample_ns)} per sample, {_ns(native.jitter_ns)} jitter"
    if python.per_sample_ns <= limit and python.jitter_ns <= jlimit:
        return "python", (f"the Python loop fits: {_ns(python.per_sample_ns)} per sample (at most "
                          f"{100 * PY_COST_SHARE:g}% of the {_ns(period_ns)} period) and {_ns(python.jitter_ns)} bracket "
                          f"jitter (at most {100 * PY_JITTER_SHARE:g}% of the {_ns(budget)} DTE budget); {nat}")
    why = []
    if python.per_sample_ns > limit:
        why.append(f"{_ns(python.per_sample_ns)} per sample is above {100 * PY_COST_SHARE:g}% of the "
                   f"{_ns(period_ns)} period")
    if python.jitter_ns > jlimit:
        why.append(f"{_ns(python.jitter_ns)} bracket jitter is above {100 * PY_JITTER_SHARE:g}% of the "
                   f"{_ns(budget)} DTE budget")
    return "native", f"the Python loop's {' and '.join(why)}; {nat}"


def _specs(events) -> list:
    """Event strings or EventSpecs → EventSpecs."""
    if isinstance(events, str):
        from ..events import parse_events

        return parse_events(events)
    out = []
    for ev in events:
        if isinstance(ev, str):
            from ..events import parse_events

            out.extend(parse_events(ev))
        else:
            out.append(ev)
    return out


#: the highest --rate (samples per second): a group read costs about a microsecond
MAX_RATE_HZ = 1_000_000.0
#: the most memory the sample buffers of one run may take
MAX_BUFFER_BYTES = 2 << 30


def _threads_of(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        from ..errors import ProcessGoneError

        raise ProcessGoneError(f"pid {pid} does not exist (it exited?)", pid=pid) from None


@dataclass
class ObserveResult:
    """What one observation produced: stamps, counter values, verdicts, costs."""

    events: list[str]
    #: (n, 2) int64: start and end stamps of each sample, CLOCK_MONOTONIC_RAW ns
    stamps: np.ndarray
    #: (n, nevents) uint64: cumulative counter values at each sample (summed over targets)
    values: np.ndarray
    time_enabled: np.ndarray
    time_running: np.ndarray
    dte: DteResult
    rate_hz_requested: float
    observer_task_clock_ns: int
    wall_ns: int
    path: str
    late: int = 0
    target: str = ""
    slowdown: float | None = None
    extra: dict = field(default_factory=dict)
    #: the SwitchTracker of a CPU target observed with ``track_switches``
    switches: object | None = None
    #: ``tag:<name>`` -> per-sample tag values read inside each sample's bracket (``tags=``)
    tags: dict | None = None
    #: why this loop ran (``path``): asked for, forced by a feature, or :func:`choose_loop`'s measurement
    loop_reason: str = ""
    #: whether the observer thread ran SCHED_FIFO
    realtime: bool = False

    @property
    def samples(self) -> int:
        return int(self.stamps.shape[0])

    @property
    def rate_hz(self) -> float:
        if self.samples < 2:
            return 0.0
        span = int(self.stamps[-1, 0] - self.stamps[0, 0])
        return (self.samples - 1) * 1e9 / span if span > 0 else 0.0

    @property
    def observer_cpu_pct(self) -> float:
        return 100.0 * self.observer_task_clock_ns / self.wall_ns if self.wall_ns else 0.0

    def deltas(self) -> dict[str, np.ndarray]:
        """Per-period columns: start/end stamps, period, each event's delta, trustable."""
        cols: dict[str, np.ndarray] = {
            "start_ns": self.stamps[1:, 0],
            "end_ns": self.stamps[1:, 1],
            "period_ns": np.diff(self.stamps[:, 0]),
        }
        d = np.diff(self.values.astype(np.int64), axis=0)
        for i, name in enumerate(self.events):
            cols[name] = d[:, i]
        cols["time_enabled"] = np.diff(self.time_enabled.astype(np.int64))
        cols["time_running"] = np.diff(self.time_running.astype(np.int64))
        cols["trustable"] = self.dte.trustable
        if self.tags is not None:
            from .tagging import tag_columns

            cols.update(tag_columns(self))
        if self.switches is not None:
            cpu = self.switches.cpus[0]
            who = self.switches.attribute(cpu, self.stamps[1:, 0])
            cols["pid"] = who[:, 0]
            cols["tid"] = who[:, 1]  # the thread running when the period ended
            starts = self.switches.timeline()["start"]
            # context switches inside each period: the period's counts span several threads
            cols["switches"] = (np.searchsorted(starts, self.stamps[1:, 0], side="right")
                                - np.searchsorted(starts, self.stamps[:-1, 0], side="right"))
        return cols

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "samples": self.samples,
            "rate_hz": round(self.rate_hz, 1),
            "rate_hz_requested": self.rate_hz_requested,
            "trustable_fraction": round(self.dte.trustable_fraction, 4),
            "untrustable": self.dte.untrustable,
            "observer_cpu_pct": round(self.observer_cpu_pct, 2),
            "path": self.path,
            "loop_reason": self.loop_reason,
            "realtime": self.realtime,
            "late": self.late,
            "events": self.events,
            "target": self.target,
        }
        if self.slowdown is not None:
            out["slowdown"] = round(self.slowdown, 4)
        if self.tags is not None:
            from .tagging import tag_summary

            out.update(tag_summary(self))
        if self.switches is not None:
            out["switch_records"] = self.switches.records
            out["switch_lost"] = self.switches.lost
        return out


class Observer:
    """Read ``events`` of one target at ``rate_hz`` for ``duration`` seconds.

    Exactly one target: ``cpu`` (CPU-wide), ``pid`` (every thread of a
    process at start) or ``tid`` (one thread). ``loop`` is ``"auto"``
    (measured at start, :func:`choose_loop`), ``"python"`` or ``"native"``.
    ``realtime``: SCHED_FIFO for the observer thread (None: when permitted and
    the target can run on another CPU).
    """

    def __init__(
        self,
        events,
        *,
        cpu: int | None = None,
        pid: int | None = None,
        tid: int | None = None,
        rate_hz: float = 1000.0,
        duration: float = 1.0,
        observer_cpu: int | None = None,
        loop: str = "auto",
        tolerance: float = DEFAULT_TOLERANCE,
        stop: threading.Event | None = None,
        track_switches: bool = False,
        enable_on_exec: bool = False,
        on_open=None,
        tags=None,
        realtime: bool | None = None,
    ) -> None:
        if sum(x is not None for x in (cpu, pid, tid)) != 1:
            raise PmuscopeError("observe needs exactly one target: a CPU (-C), a pid (-p) or a tid (-t)")
        if not (rate_hz > 0 and duration > 0) or math.isinf(duration):
            raise PmuscopeError("observe: --rate and --duration must be positive")
        if rate_hz > MAX_RATE_HZ:
            raise PmuscopeError(f"--rate {rate_hz:g} is above {MAX_RATE_HZ:,.0f} samples/s "
                                "(a read takes about a microsecond)")
        if not tolerance >= 0 or tolerance >= 1:
            raise PmuscopeError(f"--tolerance {100 * tolerance:g}% must be 0 or more and below 100%")
        if observer_cpu is not None:
            allowed = sorted(os.sched_getaffinity(0))
            if observer_cpu not in allowed:
                raise PmuscopeError(f"--observer-cpu {observer_cpu} is not a CPU this process may run on "
                                    f"({format_cpulist(allowed)})")
        if loop not in ("auto", "python", "native"):
            raise PmuscopeError(f"observe: unknown loop {loop!r} (auto, python, native)")
        env_loop = os.environ.get("PMUSCOPE_OBSERVE_LOOP", "auto") or "auto"
        if env_loop not in ("auto", "python", "native"):
            raise PmuscopeError(f"PMUSCOPE_OBSERVE_LOOP={env_loop!r}: use auto, python or native")
        if loop == "native" and not native_available():
            raise PmuscopeError("observe: the native loop needs the C helper, which is not built here (no compiler at install?)")
        self.specs = _specs(events)
        if not self.specs:
            raise PmuscopeError("observe: no events given")
        self.cpu, self.pid, self.tid = cpu, pid, tid
        self.rate_hz = float(rate_hz)
        self.duration = float(duration)
        self.loop = loop
        self.tolerance = tolerance
        self.observer_cpu = observer_cpu
        #: set it to end the run early (the Python loop checks every 64 samples, the
        #: native one every NATIVE_SLICE_NS)
        self.stop = stop
        if track_switches and cpu is None:
            raise PmuscopeError("observe: switch tracking attributes a CPU's samples to threads; it needs -C CPU")
        self.track_switches = track_switches
        #: counters of a pid start disabled and are enabled by the kernel at its
        #: exec (a workload forked corked, as perf stat does)
        self.enable_on_exec = enable_on_exec
        #: called after the events are open (e.g. to let the corked workload exec)
        self.on_open = on_open
        #: SCHED_FIFO priority 1 for the sampler thread: True (required), False, or None: when
        #: permitted and the target can run on a CPU other than the observer's (a loop that
        #: shares its CPU with other work misses the slots it is preempted for)
        self.realtime = realtime
        self.realtime_used = False
        n = int(round(self.rate_hz * self.duration)) + 1
        need = n * (3 + len(self.specs)) * 8 * max(1, 1 if pid is None else len(_threads_of(pid))) + n * 16
        if need > MAX_BUFFER_BYTES:
            raise PmuscopeError(f"{n:,} samples (--rate {self.rate_hz:g} for {self.duration:g} s) need "
                                f"{need / 2**30:.1f} GiB; the limit is {MAX_BUFFER_BYTES / 2**30:.0f} GiB: lower --rate "
                                "or --duration")
        #: a TagReader (``tags=True``: the target process's channel; a str: a channel file)
        self.tags = None
        if tags:
            from .tagging import open_reader

            self.tags = open_reader(tags, cpu=cpu, pid=pid, tid=tid)
        self.names = [s.name for s in self.specs]
        self._groups: list[list[PerfEventFd]] = []
        #: what ``auto`` measured at the start of the last run (:meth:`calibrate`), else empty
        self.costs: dict[str, LoopCost] = {}

    # -- setup
    def _open(self) -> None:
        if self.cpu is not None:
            targets = [(-1, self.cpu)]
        elif self.tid is not None:
            targets = [(self.tid, -1)]
        else:
            targets = [(t, -1) for t in _threads_of(self.pid)]
        try:
            for pid, cpu in targets:
                group: list[PerfEventFd] = []
                for i, spec in enumerate(self.specs):
                    attr = spec.attr.copy()
                    attr.read_format = _GROUP_FORMAT
                    attr.disabled = 1 if i == 0 else 0
                    attr.enable_on_exec = 1 if i == 0 and self.enable_on_exec else 0
                    attr.inherit = 0
                    try:
                        group.append(PerfEventFd(attr, pid=pid, cpu=cpu, group=group[0] if group else None, event=spec.name))
                    except PmuscopeError:
                        for fd in group:
                            fd.close()
                        raise
                self._groups.append(group)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        for group in self._groups:
            for fd in reversed(group):
                fd.close()
        self._groups = []

    def _pick_observer_cpu(self) -> int | None:
        if self.observer_cpu is not None:
            return self.observer_cpu
        allowed = sorted(os.sched_getaffinity(0))
        others = [c for c in allowed if c != self.cpu]
        return (others or allowed)[-1] if allowed else None

    # -- run
    def run(self) -> ObserveResult:
        self._open()
        tracker = None
        try:
            if self.on_open is not None:
                self.on_open()
            if self.track_switches:
                from .switches import SwitchTracker

                tracker = SwitchTracker([self.cpu], clockid=_RAW).start()
            result = self._run()
            if tracker is not None:
                tracker.stop()
                result.switches = tracker
            return result
        finally:
            if tracker is not None:
                tracker.stop()
            self.close()

    def _run(self) -> ObserveResult:
        nev = len(self.specs)
        ngroups = len(self._groups)
        words = 3 + nev
        size = words * 8
        n = max(2, int(round(self.rate_hz * self.duration)) + 1)
        period_ns = int(round(1e9 / self.rate_hz))
        raw = np.zeros((n, ngroups, words), dtype=np.uint64)
        stamps = np.zeros((n, 2), dtype=np.int64)
        state: dict[str, object] = {}
        tagsnap = None if self.tags is None else np.zeros((n, self.tags.words.shape[0]), dtype=np.uint64)

        def sampler() -> None:
            try:
                from ..system.realtime import set_timer_slack

                cpu = self._pick_observer_cpu()
                if cpu is not None:
                    os.sched_setaffinity(0, {cpu})
                set_timer_slack(1000)  # this thread only: sleeps end within ~1 us of their deadline
                self._set_realtime(cpu)
                own = PerfEventFd(abi.perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.TASK_CLOCK), pid=0, event="task-clock")
                for group in self._groups:
                    group[0].enable(group=True)
                loop, reason = self._decide_loop(size, period_ns)
                t0 = time.clock_gettime_ns(_RAW)
                if loop == "native":
                    taken, late = self._native_loop(raw, stamps, n, size, period_ns)
                    state["path"] = "native"
                else:
                    taken, late = self._python_loop(raw, stamps, n, size, period_ns, tagsnap=tagsnap)
                    state["path"] = "read"
                wall = time.clock_gettime_ns(_RAW) - t0
                for group in self._groups:
                    group[0].disable(group=True)
                state.update(taken=taken, late=late, wall=wall, own=struct.unpack("=Q", own.read(8))[0], reason=reason)
                own.close()
            except BaseException as err:  # re-raised in the caller's thread
                state["error"] = err

        thread = threading.Thread(target=sampler, name="pmuscope-observer", daemon=True)
        thread.start()
        thread.join()
        if "error" in state:
            raise state["error"]  # type: ignore[misc]
        taken = int(state["taken"])  # type: ignore[arg-type]
        raw = raw[:taken]
        stamps = stamps[:taken]
        values = raw[:, :, 3:].sum(axis=1, dtype=np.uint64)
        ena = raw[:, :, 1].sum(axis=1, dtype=np.uint64)
        run = raw[:, :, 2].sum(axis=1, dtype=np.uint64)
        tagcols = None if self.tags is None else self.tags.columns(tagsnap[:taken])
        target = f"cpu {self.cpu}" if self.cpu is not None else (f"tid {self.tid}" if self.tid is not None else f"pid {self.pid}")
        return ObserveResult(
            events=self.names,
            stamps=stamps,
            values=values,
            time_enabled=ena,
            time_running=run,
            dte=dte_filter(stamps[:, 0], stamps[:, 1], self.tolerance),
            rate_hz_requested=self.rate_hz,
            observer_task_clock_ns=int(state["own"]),  # type: ignore[arg-type]
            wall_ns=int(state["wall"]),  # type: ignore[arg-type]
            path=str(state["path"]),
            late=int(state["late"]),  # type: ignore[arg-type]
            target=target,
            tags=tagcols,
            loop_reason=str(state["reason"]),
            realtime=self.realtime_used,
        )

    def _target_has_other_cpus(self, cpu: int | None) -> bool:
        """Whether the target can run on a CPU other than the observer's ``cpu``."""
        if cpu is None:
            return False
        if self.cpu is not None:
            return self.cpu != cpu
        try:
            return bool(os.sched_getaffinity(self.tid if self.tid is not None else self.pid) - {cpu})
        except OSError:
            return False

    def _set_realtime(self, cpu: int | None) -> None:
        if self.realtime is False or (self.realtime is None and not self._target_has_other_cpus(cpu)):
            return
        from ..system.realtime import request_fifo

        self.realtime_used = request_fifo(bool(self.realtime), "the observer thread")

    def calibrate(self, size: int, samples: int = CALIBRATION_SAMPLES) -> dict[str, LoopCost]:
        """Time ``samples`` back-to-back samples of each available loop on the
        open (and enabled) counters: ``{"python": LoopCost, "native": LoopCost}``."""
        words = size // 8
        raw = np.zeros((samples, len(self._groups), words), dtype=np.uint64)
        st = np.zeros((samples, 2), dtype=np.int64)
        costs: dict[str, LoopCost] = {}
        taken, _ = self._python_loop(raw, st, samples, size, 0)
        if taken >= 3:
            costs["python"] = LoopCost.from_stamps(st[:taken])
        if native_available():
            taken, _ = self._native_loop(raw, st, samples, size, 0)
            if taken >= 3:
                costs["native"] = LoopCost.from_stamps(st[:taken])
        return costs

    def _decide_loop(self, size: int, period_ns: int) -> tuple[str, str]:
        """The loop to run and why: asked for, forced by tags, or measured."""
        if self.tags is not None:
            return "python", "tags are read inside each sample's bracket by the Python loop"
        most = getattr(_native, "SAMPLE_LOOP_MAX_FDS", 1) if native_available() else 0
        too_many = native_available() and len(self._groups) > most
        if self.loop != "auto":
            if self.loop == "native" and too_many:
                raise PmuscopeError(f"observe: the native loop reads at most {most} threads; this target has "
                                    f"{len(self._groups)} (use --loop python or auto)")
            return self.loop, f"asked for (loop={self.loop})"
        if too_many:
            return "python", f"{len(self._groups)} threads: the native loop reads at most {most}"
        forced = os.environ.get("PMUSCOPE_OBSERVE_LOOP", "auto") or "auto"
        if forced == "python" or (forced == "native" and native_available()):
            return forced, f"PMUSCOPE_OBSERVE_LOOP={forced}"
        if not native_available():
            return "python", "the native loop is not built here"
        costs = self.calibrate(size)
        self.costs = costs
        return choose_loop(period_ns, self.tolerance, costs.get("python"), costs.get("native"))

    def _python_loop(self, raw: np.ndarray, stamps: np.ndarray, n: int, size: int, period_ns: int,
                     tagsnap: np.ndarray | None = None) -> tuple[int, int]:
        """Take up to ``n`` samples on the grid ``start + k * period_ns`` (``k < n``;
        ``period_ns`` 0: back to back) until :attr:`stop`; returns (taken, late): a
        slot missed by more than half a period is skipped and counted late."""
        ngroups = raw.shape[1]
        mv = memoryview(raw.reshape(-1).view(np.uint8))
        bufs = [bytearray(size) for _ in self._groups]
        reads = [(g[0].fd, [buf]) for g, buf in zip(self._groups, bufs)]
        clock = time.clock_gettime_ns
        mono = time.CLOCK_MONOTONIC
        readv = os.readv
        sleep = time.sleep
        row = ngroups * size
        half = period_ns // 2
        spin = PYTHON_SPIN_NS
        late = taken = slot = 0
        stop = self.stop
        tagwords = self.tags.words if tagsnap is not None else None
        tagrow = np.empty_like(tagwords) if tagwords is not None else None  # reused: no page fault in the bracket
        start = clock(mono)
        while taken < n and slot < n:
            if not taken & 63 and taken and stop is not None and stop.is_set():
                break
            if period_ns:
                deadline = start + slot * period_ns
                now = clock(mono)
                if now > deadline + half:  # preempted: skip to the next slot, do not catch up
                    nxt = min(-(-(now - start) // period_ns), n)
                    late += nxt - slot
                    slot = nxt
                    continue
                if now < deadline:
                    wait = deadline - now
                    if wait > spin + 10_000:  # sleep, then spin the last PYTHON_SPIN_NS
                        sleep((wait - spin) / 1e9)
                    while now < deadline:
                        now = clock(mono)
                    if now > deadline + half:  # preempted while waiting: look again (skip)
                        continue
            s = clock(_RAW)
            for fd, vec in reads:
                if readv(fd, vec) != size:
                    return taken, late
            if tagrow is not None:  # inside the bracket: the DTE check covers the tag read
                tagrow[:] = tagwords
            e = clock(_RAW)
            stamps[taken, 0] = s
            stamps[taken, 1] = e
            if tagrow is not None:
                tagsnap[taken] = tagrow
            off = taken * row
            for buf in bufs:
                mv[off:off + size] = buf
                off += size
            taken += 1
            slot += 1
        return taken, late

    def _native_loop(self, raw: np.ndarray, stamps: np.ndarray, n: int, size: int, period_ns: int) -> tuple[int, int]:
        """The C loop, on the same grid as :meth:`_python_loop`, in slices of
        about :data:`NATIVE_SLICE_NS` so that :attr:`stop` is honoured (the grid
        carries on across slices)."""
        fds = [g[0].fd for g in self._groups]
        step = 256  # grown or shrunk after each slice to take about NATIVE_SLICE_NS
        taken = late = slot = start = 0
        while taken < n and slot < n:
            k = min(step, n - taken)
            t = time.monotonic_ns()
            got, lt, slot, start = _native.sample_loop(fds, size, k, period_ns, stamps[taken:taken + k],
                                                       raw[taken:taken + k], start, slot, n, NATIVE_SPIN_NS)
            spent = max(time.monotonic_ns() - t, 1)
            step = int(min(max(64, k * NATIVE_SLICE_NS / spent), 1 << 22))
            taken += int(got)
            late += int(lt)
            if int(got) < k and slot < n:  # a read failed (the target exited)
                break
            if self.stop is not None and self.stop.is_set():
                break
        return taken, late


def observe(events, **kwargs) -> ObserveResult:
    """Run an :class:`Observer` and return its result."""
    return Observer(events, **kwargs).run()


def series_format(path: str, fmt: str | None = None) -> str:
    """The series format for ``path`` (by extension, else CSV); refuses others."""
    fmt = fmt or os.path.splitext(path)[1].lstrip(".").lower() or "csv"
    if fmt not in ("npz", "csv", "parquet"):
        raise PmuscopeError(f"unknown output format {fmt!r}: use .parquet, .csv or .npz")
    return fmt


def write_series(result: ObserveResult, path: str, fmt: str | None = None, *, out=None) -> str:
    """Write the per-period series as Parquet, CSV or npz (by extension or
    ``fmt``), through :mod:`pmuscope.outfile` (``out``: a file already opened
    with :func:`~pmuscope.outfile.open_output`, completed here)."""
    from ..outfile import open_output

    fmt = series_format(path, fmt)
    if fmt == "parquet":
        from ..errors import require

        pa = require("pyarrow", "parquet", "Parquet output")
    cols = result.deltas()
    out = out if out is not None else open_output(path, "wb")
    with out:
        if fmt == "npz":
            out.guard(np.savez, out.file, **cols)
        elif fmt == "csv":
            names = list(cols)
            floats = [cols[k].dtype.kind == "f" for k in names]  # tag:<name> columns may be float
            data = (np.column_stack([cols[k].astype(np.float64 if f else np.int64) for k, f in zip(names, floats)])
                    if len(cols["start_ns"]) else np.zeros((0, len(names))))
            out.guard(np.savetxt, out.file, data, fmt=["%.17g" if f else "%d" for f in floats], delimiter=",",
                      header=",".join(names), comments="")
        else:
            import pyarrow.parquet as pq

            table = pa.table({k: v for k, v in cols.items()})
            table = table.replace_schema_metadata({"pmuscope": str(result.summary())})
            out.guard(pq.write_table, table, out.file)
    return path


def run_with_baseline(cmd: Sequence[str], events, *, rate_hz: float, **kwargs) -> ObserveResult:
    """Run ``cmd`` once alone and once observed (all its threads at start);
    the result's ``slowdown`` is observed wall time / baseline wall time."""
    import subprocess

    from ..counting.workload import Workload

    tags = kwargs.pop("tags", None)
    env = None
    if tags:
        from .tagging import command_channel

        channel, env = command_channel()
        tags = channel
    t = time.perf_counter()
    try:
        subprocess.run(list(cmd), check=False, env=env)
    except OSError as err:
        raise PmuscopeError(f"cannot run {cmd[0]!r}: {err.strerror}") from None
    base = time.perf_counter() - t
    if tags:
        from .tagging import reset_channel

        reset_channel(tags)  # the baseline run's tags are not the observed run's
    done = threading.Event()
    ended: list[float] = []
    started: list[float] = []
    # forked corked and attached before its exec, the counters enabled by the
    # kernel at exec (perf stat's enable_on_exec): a command that exits at once
    # is still observed
    work = Workload(list(cmd), env=env)

    def waiter() -> None:
        work.wait()
        ended.append(time.perf_counter())
        done.set()

    def release() -> None:
        t_start = time.perf_counter()
        work.start()  # raises when the command cannot be executed
        started.append(t_start)
        threading.Thread(target=waiter, daemon=True).start()

    kwargs.pop("duration", None)
    # the run ends when the command exits (``stop``: checked by either loop, the
    # native one between its slices)
    try:
        result = Observer(events, pid=work.pid, rate_hz=rate_hz, duration=max(base * 4, 1.0) + 10, stop=done,
                          enable_on_exec=True, on_open=release, tags=tags, **kwargs).run()
    except BaseException:
        work.cancel()
        if started:  # the observation failed: do not leave the command running
            import signal

            if not done.is_set():
                work.send_signal(signal.SIGTERM)
            done.wait()
        raise
    finally:
        if tags:
            try:
                os.unlink(tags)
            except OSError:
                pass
    done.wait()
    observed = ended[0] - started[0]
    result.slowdown = observed / base if base > 0 else None
    result.extra.update(baseline_s=base, observed_s=observed)
    return result
