"""Who runs where, without a kernel module (SHIM's ``ppid_map``, replaced).

SHIM patched the scheduler to write the running pid of every CPU into a
shared page. The same facts reach user space unpatched through
``PERF_RECORD_SWITCH_CPU_WIDE`` (Linux 4.3+): a CPU-wide ``dummy`` event
with ``context_switch=1`` emits a record at every context switch on its CPU.

Record semantics (``include/uapi/linux/perf_event.h``, kernel/events/core.c
``perf_event_switch``): a switch-*out* record is written in the context of
the task leaving the CPU, with ``next_prev_pid/tid`` naming the task coming
in; a switch-*in* record is written in the context of the task arriving,
with ``next_prev_*`` naming the one that left. With ``sample_id_all`` and
``PERF_SAMPLE_TID|TIME|CPU`` each record also carries the current task, the
time and the CPU. Timestamps use ``CLOCK_MONOTONIC`` (``use_clockid``) so
they compare directly with ``time.clock_gettime_ns(time.CLOCK_MONOTONIC)``
taken anywhere in user space — and with the observer's stamps.

The tracker drains the per-CPU rings into a timeline: on every CPU, a sorted
array of segment starts and the (pid, tid) running from there on.
:meth:`SwitchTracker.running_on` answers for one time, :meth:`attribute`
for an array of times (vectorized with ``searchsorted``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..errors import PmuscopeError
from ..kernel import PerfEventFd, abi
from ..kernel.ring import RingBuffer
from ..system.kick import kick_cpus

TIMELINE_DTYPE = np.dtype([("cpu", "<i4"), ("start", "<i8"), ("end", "<i8"), ("pid", "<i4"), ("tid", "<i4")])


def switch_attr(clockid: int = time.CLOCK_MONOTONIC) -> abi.perf_event_attr:
    """The attr perf uses for ``--switch-events`` side-band, CPU-wide."""
    return abi.perf_event_attr(
        type=abi.PERF_TYPE_SOFTWARE,
        config=abi.PerfSwId.DUMMY,
        sample_type=abi.PERF_SAMPLE_TID | abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_CPU,
        disabled=1,
        context_switch=1,
        sample_id_all=1,
        use_clockid=1,
        clockid=clockid,
        watermark=1,
        wakeup_watermark=16384,
    )


@dataclass
class _CpuLog:
    times: list[int]
    pids: list[int]
    tids: list[int]
    first_out: tuple[int, int, int] | None = None  # (time, pid, tid) of the task running before the first switch


class SwitchTracker:
    """Track the running thread of each CPU from context-switch records.

    ``cpus`` defaults to every online CPU. Use as a context manager, or call
    :meth:`start`, :meth:`drain` (as often as convenient; a background thread
    does it when ``background=True``) and :meth:`stop`.
    """

    def __init__(self, cpus: list[int] | None = None, *, pages: int = 64, background: bool = True,
                 clockid: int = time.CLOCK_MONOTONIC) -> None:
        self.cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
        self.clockid = clockid
        self.pages = pages
        self.background = background
        self._fds: dict[int, PerfEventFd] = {}
        self._rings: dict[int, RingBuffer] = {}
        self._logs = {c: _CpuLog([], [], []) for c in self.cpus}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._attrs = None
        self.started_at: int | None = None
        self.stopped_at: int | None = None
        self.records = 0

    # -- lifetime
    def start(self) -> "SwitchTracker":
        from ..records import AttrTable

        attr = switch_attr(self.clockid)
        self._attrs = AttrTable([(attr, [])])
        try:
            for cpu in self.cpus:
                fd = PerfEventFd(attr, pid=-1, cpu=cpu, event="dummy:switch")
                self._fds[cpu] = fd
                self._rings[cpu] = RingBuffer(fd, pages=self.pages)
        except PmuscopeError:
            self.close()
            raise
        self.started_at = time.clock_gettime_ns(self.clockid)
        for fd in self._fds.values():
            fd.enable()
        # a task that keeps its CPU writes no switch record: make one switch per
        # CPU now, so every tracked CPU's owner is known from the start
        kick_cpus(self.cpus)
        if self.background:
            self._thread = threading.Thread(target=self._loop, name="pmuscope-switches", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.01):
            self.drain()

    def stop(self) -> None:
        if self.started_at is None or self.stopped_at is not None:
            return
        for fd in self._fds.values():
            fd.disable()
        self.stopped_at = time.clock_gettime_ns(self.clockid)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.drain()
        self.close()

    def close(self) -> None:
        for ring in self._rings.values():
            ring.close()
        for fd in self._fds.values():
            fd.close()
        self._rings.clear()
        self._fds.clear()

    def __enter__(self) -> "SwitchTracker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- draining
    @property
    def lost(self) -> int:
        return sum(r.lost for r in self._rings.values())

    def drain(self) -> int:
        """Move pending records from the rings into the timeline; returns how many."""
        from ..records import decode
        from ..records.types import SwitchCpuWide

        n = 0
        with self._lock:
            for cpu, ring in self._rings.items():
                chunk = ring.read_records()
                if not chunk:
                    continue
                log = self._logs[cpu]
                for item in decode(chunk, self._attrs):
                    if not isinstance(item, SwitchCpuWide) or item.sample_id is None:
                        continue
                    sid = item.sample_id
                    n += 1
                    if item.out:
                        if not log.times and log.first_out is None:
                            log.first_out = (sid.time, sid.pid, sid.tid)
                        continue
                    log.times.append(sid.time)
                    log.pids.append(sid.pid)
                    log.tids.append(sid.tid)
        self.records += n
        return n

    # -- queries
    def _arrays(self, cpu: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        log = self._logs.get(cpu)
        if log is None:
            raise PmuscopeError(f"CPU {cpu} is not tracked (tracked: {self.cpus})")
        times, pids, tids = list(log.times), list(log.pids), list(log.tids)
        if log.first_out is not None and self.started_at is not None:
            # the task switched out first had been running since tracking began
            times.insert(0, self.started_at)
            pids.insert(0, log.first_out[1])
            tids.insert(0, log.first_out[2])
        t = np.asarray(times, dtype=np.int64)
        order = np.argsort(t, kind="stable")  # rings are per CPU and in order; be safe
        # sample_id pid/tid are u32 in the record: the kernel writes -1 (0xffffffff) for a task that is
        # exiting (perf_event_pid/tid of a dead task); keep it as -1, "no task known"
        return (t[order], np.asarray(pids, dtype=np.int64).astype(np.int32)[order],
                np.asarray(tids, dtype=np.int64).astype(np.int32)[order])

    def running_on(self, cpu: int, t: int) -> tuple[int, int] | None:
        """(pid, tid) running on ``cpu`` at ``t`` (CLOCK_MONOTONIC ns), or None if unknown."""
        tids = self.attribute(cpu, np.array([t], dtype=np.int64))
        if tids[0, 1] < 0:
            return None
        return int(tids[0, 0]), int(tids[0, 1])

    def attribute(self, cpu: int, times: np.ndarray) -> np.ndarray:
        """(pid, tid) per time as an (n, 2) int32 array; -1 where unknown
        (before the first switch seen, or after tracking stopped)."""
        starts, pids, tids = self._arrays(cpu)
        times = np.asarray(times, dtype=np.int64)
        out = np.full((times.size, 2), -1, dtype=np.int32)
        if starts.size == 0:
            return out
        idx = np.searchsorted(starts, times, side="right") - 1
        ok = idx >= 0
        if self.stopped_at is not None:
            ok &= times <= self.stopped_at
        out[ok, 0] = pids[idx[ok]]
        out[ok, 1] = tids[idx[ok]]
        return out

    def timeline(self) -> np.ndarray:
        """Every segment as a structured array (cpu, start, end, pid, tid), by CPU then time."""
        parts = []
        end_all = self.stopped_at if self.stopped_at is not None else time.clock_gettime_ns(self.clockid)
        for cpu in self.cpus:
            starts, pids, tids = self._arrays(cpu)
            seg = np.zeros(starts.size, dtype=TIMELINE_DTYPE)
            seg["cpu"] = cpu
            seg["start"] = starts
            seg["end"][:-1] = starts[1:]
            if starts.size:
                seg["end"][-1] = end_all
            seg["pid"] = pids
            seg["tid"] = tids
            parts.append(seg)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=TIMELINE_DTYPE)

    def write_timeline(self, path: str, *, out=None) -> str:
        """CSV (``cpu,start,end,pid,tid``) or npz by extension."""
        from ..outfile import open_output

        tl = self.timeline()
        out = out if out is not None else open_output(path, "wb")
        with out:
            if path.endswith(".npz"):
                out.guard(np.savez, out.file, timeline=tl)
            else:
                out.guard(np.savetxt, out.file, np.column_stack([tl[k] for k in TIMELINE_DTYPE.names]), fmt="%d",
                          delimiter=",", header=",".join(TIMELINE_DTYPE.names), comments="")
        return path


def who_ran(tracker: "SwitchTracker", top: int | None = None) -> list[dict]:
    """Which threads ran on the tracked CPUs while tracking, most time first:
    ``{cpu, pid, tid, comm, runs, time_ns, pct}`` per (CPU, thread), time
    clipped to the tracked span (``pct`` of it). ``comm`` is read from /proc
    while the thread lives (``swapper`` for pid 0, else ``?``)."""
    tl = tracker.timeline()
    t0 = tracker.started_at or 0
    t1 = tracker.stopped_at if tracker.stopped_at is not None else time.clock_gettime_ns(tracker.clockid)
    span = max(t1 - t0, 1)
    rows: dict[tuple[int, int, int], list[int]] = {}
    for cpu, start, end, pid, tid in zip(tl["cpu"].tolist(), tl["start"].tolist(), tl["end"].tolist(),
                                         tl["pid"].tolist(), tl["tid"].tolist()):
        dt = min(end, t1) - max(start, t0)
        if dt <= 0:
            continue
        r = rows.setdefault((cpu, pid, tid), [0, 0])
        r[0] += 1
        r[1] += dt
    out = []
    for (cpu, pid, tid), (runs, ns) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        if pid == 0 and tid == 0:
            comm = "swapper"
        else:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                comm = "?"
        out.append({"cpu": cpu, "pid": pid, "tid": tid, "comm": comm, "runs": runs, "time_ns": ns,
                    "pct": round(100.0 * ns / span, 3)})
    return out[:top] if top else out


def format_who_ran(rows: list[dict], total: int) -> str:
    """``who_ran`` as a text table (``total``: the number of threads in all)."""
    lines = [f"  {'CPU':>3}  {'PID':>8}  {'TID':>8}  {'COMM':<16}  {'RUNS':>6}  {'TIME(ms)':>9}  {'%':>6}"]
    for r in rows:
        lines.append(f"  {r['cpu']:>3}  {r['pid']:>8}  {r['tid']:>8}  {r['comm'][:16]:<16}  {r['runs']:>6}  "
                     f"{r['time_ns'] / 1e6:>9.2f}  {r['pct']:>6.2f}")
    if total > len(rows):
        lines.append(f"  ... {total - len(rows)} more threads (--json lists them all)")
    return "\n".join(lines)
