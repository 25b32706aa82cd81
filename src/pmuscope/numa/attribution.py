"""Charging CPU-wide counts to threads, exactly at context switches.

How numatop does it
-------------------
numatop opens one *sampling* group per CPU (``pid=-1``): RMA, LMA, CLK, IR
each with its own sample period and ``PERF_SAMPLE_TID|READ``. Every overflow
record carries a group read; the delta between two consecutive records of a
CPU is charged to the tid of the *later* record (``cpu_profiling_smpl`` in
``common/os/os_perf.c``). Any context switch between the two records makes
part of that delta land on the wrong thread, and the error grows with the
sample period.

How pmuscope does it
--------------------
The per-CPU group is led by the software event ``context-switches`` with
``sample_period=1`` and ``PERF_SAMPLE_READ|TID|TIME``, the hardware events
(CLK, IR, RMA, LMA) as members. The kernel raises that event in
``perf_event_task_sched_out()`` *before* it switches perf contexts, in the
context of the task leaving the CPU (``include/linux/perf_event.h``,
``__perf_sw_event_sched(PERF_COUNT_SW_CONTEXT_SWITCHES, 1, 0)``). So each
sample is a group read taken at a switch-out, tagged with the thread that
ran since the previous switch: the delta between consecutive samples of a
CPU is exactly what that thread ran — no proportional splitting, no
dependence on a sample period. The sample time gives the same thread's
on-CPU time per CPU (and so per node) with no hardware PMU at all.

The leader also sets ``PERF_SAMPLE_PERIOD``: with it the kernel takes its
direct path (``perf_swevent_event()``: ``data->period = nr`` then
``perf_swevent_overflow(event, 1, ...)``) and writes a sample for every
switch; without it the ``period_left`` bookkeeping skipped up to half of the
switches on this project's test VM (the leader count advanced by 2).

The interval boundary: the collector ``read()``s each group (a group read of
the leader) at the end of an interval. The leader's own value is the number
of switches so far, so samples with a leader count <= the read's come before
the read and the rest after — an exact order without comparing clocks. The
tail (read − last sample) belongs to the thread running at the read: the
outgoing tid of the next sample (leader count = read + 1) when it is already
in the ring, else the thread named by the last ``PERF_RECORD_SWITCH_CPU_WIDE``
switch-in, else it is *carried* and charged to the next sample's thread,
which is again exact (no switch happened in between).

A gap in the leader count means switch-out samples are missing, so the
delta spans several threads. On this project's test VM (Linux 6.1, KVM) the
leader count advances now and then with no sample and no
``PERF_RECORD_LOST``: every record written in the context of some tasks (a
tokio worker, a vsock agent, rcu_preempt) is missing — their switch-out
sample and switch records — while the other tasks' switch records still name
them (measured: 0.2–30% of switches, more under load; cause not
established). Such a gap is rebuilt from the ``PERF_RECORD_SWITCH_CPU_WIDE``
records inside it (:meth:`SwitchAttributor.add_switches`): the on-CPU time of
each segment exactly, the counter deltas of the gap in proportion to time —
the only place pmuscope splits, and only where samples are missing. A gap no
switch record covers (ring overflow) is charged to the pseudo-thread
``(-1, -1)`` ("unattributed"), never spread over guesses; the snapshot
reports both (``attribution.gaps``/``rebuilt``/``unattributed_pct``). Negative deltas
(a counter that was reset) are dropped, as numatop does.

:class:`SwitchAttributor` is the pure part (no kernel), driven by arrays; the
live collector (:mod:`pmuscope.numa.collector`) feeds it from the rings, and
unit tests feed it synthetic streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

UNATTRIBUTED = (-1, -1)


@dataclass
class _CpuState:
    n: int
    last: np.ndarray
    pending: np.ndarray
    boundary_time: int = 0
    last_owner: tuple[int, int] | None = None  # the thread of the last sample fed


@dataclass
class Attribution:
    """Per (pid, tid, cpu) sums of every column over one interval.

    ``columns`` names the value columns (the first is ``time_ns``: on-CPU
    time). ``gaps`` counts lost-sample gaps (charged to pid/tid -1)."""

    columns: tuple[str, ...]
    pid: np.ndarray
    tid: np.ndarray
    cpu: np.ndarray
    values: np.ndarray  # (rows, len(columns)) float64
    gaps: int = 0
    samples: int = 0
    #: per CPU, the time between its previous boundary (or start) and this one
    intervals_ns: dict[int, float] = field(default_factory=dict)
    #: gaps rebuilt from switch records (the rest went to pid/tid -1)
    rebuilt: int = 0

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.columns.index(name)]

    def by(self, keys: np.ndarray) -> dict[int, np.ndarray]:
        """Sum rows grouped by an integer key array (e.g. pid, or node of cpu)."""
        out: dict[int, np.ndarray] = {}
        if keys.size == 0:
            return out
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.zeros((uniq.size, self.values.shape[1]))
        np.add.at(sums, inv, self.values)
        return {int(k): sums[i] for i, k in enumerate(uniq)}

    def by_rows(self, *keys: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
        """Sum rows grouped by several integer key columns at once, e.g.
        ``(pid, node)`` or ``(pid, tid, node)``; the dict keys are tuples.

        The columns are grouped side by side (``np.unique`` over rows), not
        packed into one integer: pids go up to ``pid_max`` (4194304 on 64-bit),
        node ids up to 1023 and the unattributed pseudo-thread and a CPU outside
        every node are -1, so any packing needs ranges it cannot check. Any
        integer dtype works (an int32 pid column would overflow a product)."""
        out: dict[tuple[int, ...], np.ndarray] = {}
        if not keys or keys[0].size == 0:
            return out
        cols = np.column_stack([np.asarray(k, dtype=np.int64) for k in keys])
        uniq, inv = np.unique(cols, axis=0, return_inverse=True)
        sums = np.zeros((uniq.shape[0], self.values.shape[1]))
        np.add.at(sums, inv.reshape(-1), self.values)
        return {tuple(int(x) for x in k): sums[i] for i, k in enumerate(uniq.tolist())}


@dataclass
class SwitchAttributor:
    """Turns per-CPU switch-out samples (leader count, pid, tid, values) into
    per-thread, per-CPU deltas. ``columns`` names the value columns; the
    first one must be the time in ns."""

    columns: tuple[str, ...]
    _cpus: dict[int, _CpuState] = field(default_factory=dict)
    _acc: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)
    gaps: int = 0
    samples: int = 0
    #: gaps whose time was rebuilt from the switch records
    rebuilt: int = 0
    _intervals: dict[int, float] = field(default_factory=dict)
    _timeline: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return len(self.columns)

    def start(self, cpu: int, n: int, values) -> None:
        """The baseline of ``cpu``: leader count and values when counting began."""
        v = np.asarray(values, dtype=np.float64)
        self._cpus[cpu] = _CpuState(int(n), v.copy(), np.zeros(self.width), int(v[0]))

    def _charge(self, pid: int, tid: int, cpu: int, delta: np.ndarray) -> None:
        key = (int(pid), int(tid), int(cpu))
        acc = self._acc.get(key)
        if acc is None:
            self._acc[key] = delta.astype(np.float64).copy()
        else:
            acc += delta

    def add_switches(self, cpu: int, times, pids, tids) -> None:
        """``PERF_RECORD_SWITCH_CPU_WIDE`` facts of ``cpu``: from ``times[i]`` on,
        ``(pids[i], tids[i])`` runs (a switch-out record names the next task,
        a switch-in record is written by the task coming in). Used to rebuild
        the gaps the switch-out samples leave."""
        times = np.asarray(times, dtype=np.int64)
        if times.size == 0:
            return
        old = self._timeline.get(cpu)
        t = np.concatenate([old[0], times]) if old else times
        p = np.concatenate([old[1], np.asarray(pids, dtype=np.int64)]) if old else np.asarray(pids, dtype=np.int64)
        d = np.concatenate([old[2], np.asarray(tids, dtype=np.int64)]) if old else np.asarray(tids, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        self._timeline[cpu] = (t[order], p[order], d[order])

    def _prune(self, cpu: int, before: float) -> None:
        tl = self._timeline.get(cpu)
        if tl is not None:
            keep = max(int(np.searchsorted(tl[0], before, side="right")) - 1, 0)  # the owner at `before` stays
            self._timeline[cpu] = (tl[0][keep:], tl[1][keep:], tl[2][keep:])

    def _rebuild(self, cpu: int, t0: float, t1: float, delta: np.ndarray,
                 prev_owner: tuple[int, int] | None = None) -> bool:
        """Charge a gap [t0, t1] by the switch records inside it: the time of
        each segment exactly, the counters in proportion to time (the one
        place where pmuscope splits, and only when samples are missing).
        False when the records say nothing about the gap."""
        tl = self._timeline.get(cpu)
        if tl is None or t1 <= t0:
            return False
        times, pids, tids = tl
        lo = int(np.searchsorted(times, t0, side="right"))
        hi = int(np.searchsorted(times, t1, side="left"))
        if hi <= lo:
            return False
        owner0 = lo - 1
        starts = np.concatenate([[t0], times[lo:hi].astype(np.float64)])
        ends = np.concatenate([times[lo:hi].astype(np.float64), [t1]])
        owners = list(range(lo, hi))
        owners.insert(0, owner0)
        span = t1 - t0
        for a, b, o in zip(starts, ends, owners):
            dur = b - a
            if dur <= 0:
                continue
            part = delta * (dur / span)
            part[0] = dur
            if o < 0:
                self._charge(*(prev_owner or UNATTRIBUTED), cpu, part)
            else:
                self._charge(int(pids[o]), int(tids[o]), cpu, part)
        self.rebuilt += 1
        return True

    def feed(self, cpu: int, n, pid, tid, values) -> None:
        """Switch-out samples of one CPU, in ring order: leader counts ``n``
        (k,), outgoing ``pid``/``tid`` (k,), group values (k, width)."""
        st = self._cpus[cpu]
        n = np.asarray(n, dtype=np.int64)
        if n.size == 0:
            return
        pid = np.asarray(pid, dtype=np.int64)
        tid = np.asarray(tid, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64).reshape(n.size, self.width)
        keep = n > st.n  # already consumed (re-fed after a boundary): skip
        n, pid, tid, values = n[keep], pid[keep], tid[keep], values[keep]
        if n.size == 0:
            return
        prev_v = np.vstack([st.last[None, :], values[:-1]])
        prev_n = np.concatenate([[st.n], n[:-1]])
        delta = np.clip(values - prev_v, 0, None)
        gap = n != prev_n + 1
        delta[0] += st.pending
        st.pending = np.zeros(self.width)
        self.samples += int(n.size)
        self.gaps += int(gap.sum())
        if gap.any():
            starts = np.concatenate([[st.last[0]], values[:-1, 0]])
            for i in np.flatnonzero(gap).tolist():
                prev = st.last_owner if i == 0 else (int(pid[i - 1]), int(tid[i - 1]))
                if self._rebuild(cpu, float(starts[i]), float(values[i, 0]), delta[i], prev):
                    delta[i] = 0.0  # charged segment by segment
        last_owner = (int(pid[-1]), int(tid[-1]))
        pid = np.where(gap, -1, pid)
        tid = np.where(gap, -1, tid)
        # one int64 key per (pid, tid); sums per key with bincount (column by column)
        keys = (pid << 32) | (tid & 0xFFFFFFFF)
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.empty((uniq.size, self.width))
        for c in range(self.width):
            sums[:, c] = np.bincount(inv, weights=delta[:, c], minlength=uniq.size)
        for key, row in zip(uniq.tolist(), sums):
            t = key & 0xFFFFFFFF
            self._charge(key >> 32, t - (1 << 32) if t >= 1 << 31 else t, cpu, row)
        st.n = int(n[-1])
        st.last = values[-1].copy()
        st.last_owner = last_owner

    def boundary(self, cpu: int, n: int, values, running: tuple[int, int] | None) -> None:
        """A group read of ``cpu`` at the end of an interval (after every
        sample with a leader count <= ``n`` was fed). The tail goes to
        ``running``, or is carried to the next sample when it is unknown."""
        st = self._cpus[cpu]
        v = np.asarray(values, dtype=np.float64)
        self._intervals[cpu] = float(v[0] - st.boundary_time)
        st.boundary_time = int(v[0])
        tail = np.clip(v - st.last, 0, None) + st.pending
        if int(n) != st.n:
            # samples between the last one fed and the read are missing
            self.gaps += 1
            if not self._rebuild(cpu, float(st.last[0]), float(v[0]), tail, st.last_owner):
                self._charge(*UNATTRIBUTED, cpu, tail)
            st.pending = np.zeros(self.width)
        elif running is None:
            st.pending = tail
        else:
            self._charge(running[0], running[1], cpu, tail)
            st.pending = np.zeros(self.width)
        st.n = int(n)
        st.last = v.copy()
        self._prune(cpu, float(v[0]))

    def forget_cpu(self, cpu: int) -> None:
        """A hot-removed CPU: drop its state (what it accumulated stays)."""
        self._cpus.pop(cpu, None)
        self._timeline.pop(cpu, None)

    def take(self) -> Attribution:
        """Everything charged since the last take, as arrays; resets the sums."""
        keys = sorted(self._acc)
        if keys:
            arr = np.array(keys, dtype=np.int64)
            vals = np.vstack([self._acc[k] for k in keys])
        else:
            arr = np.zeros((0, 3), dtype=np.int64)
            vals = np.zeros((0, self.width))
        out = Attribution(self.columns, arr[:, 0], arr[:, 1], arr[:, 2], vals, self.gaps, self.samples,
                          dict(self._intervals), self.rebuilt)
        self._acc = {}
        self._intervals = {}
        self.gaps = 0
        self.samples = 0
        return out
