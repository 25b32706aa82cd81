"""The live side of the NUMA view: per-CPU switch-sampling groups (see
:mod:`pmuscope.numa.attribution` for why and how) and uncore memory-controller
/ socket-link counters.

:class:`SwitchCollector` opens, on every CPU, the group
``{context-switches (period 1, SAMPLE_READ|TID|TIME, context_switch=1),
clk, ir, rma..., lma...}``; the hardware members that do not exist here are
left out and named in :attr:`SwitchCollector.unavailable`. With no hardware
PMU at all the group is the software leader alone, which still gives every
thread's on-CPU time per CPU and node.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any, Callable

import numpy as np

from ..errors import NoHardwarePMUError, PmuscopeError
from ..kernel import PerfEventFd, abi
from ..kernel.ring import RingBuffer
from ..system import _fs
from ..system.kick import kick_cpus
from .attribution import Attribution, SwitchAttributor
from .platforms import METRICS, EventRef, Platform

_F = abi.PerfFormat
READ_FORMAT = int(_F.GROUP | _F.ID | _F.TOTAL_TIME_ENABLED | _F.TOTAL_TIME_RUNNING)
SAMPLE_TYPE = int(abi.PERF_SAMPLE_IDENTIFIER | abi.PERF_SAMPLE_TID | abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_CPU
                  | abi.PERF_SAMPLE_READ | abi.PERF_SAMPLE_PERIOD)
CLOCK = time.CLOCK_MONOTONIC
#: the one reason every PMU column shares on a machine without a hardware PMU
NO_PMU_REASON = ("no hardware PMU on this machine (a VM without a virtual PMU?); "
                 "CPU% comes from software events: `pmuscope doctor` explains")


def leader_attr() -> abi.perf_event_attr:
    """The group leader: one sample per context switch (switch-out side)."""
    return abi.perf_event_attr(
        type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.CONTEXT_SWITCHES, sample_period=1,
        sample_type=SAMPLE_TYPE, read_format=READ_FORMAT, disabled=1, context_switch=1, sample_id_all=1,
        use_clockid=1, clockid=CLOCK, watermark=1, wakeup_watermark=65536,
    )


def member_attr(ref: EventRef) -> abi.perf_event_attr:
    return abi.perf_event_attr(sample_type=SAMPLE_TYPE, read_format=READ_FORMAT, sample_id_all=1, use_clockid=1,
                               clockid=CLOCK, **ref.attr_fields())


def _read_group(fd: PerfEventFd, nr: int) -> tuple[list[int], int, int]:
    """A group read: (values leader first, time_enabled, time_running)."""
    data = fd.read(8 * (3 + 2 * nr))
    got, te, tr = struct.unpack_from("<QQQ", data)
    vals = [struct.unpack_from("<Q", data, 24 + 16 * i)[0] for i in range(got)]
    return vals, te, tr


class SwitchCollector:
    """Per-CPU switch-sampling groups over ``cpus``; :meth:`collect` returns
    the :class:`~pmuscope.numa.attribution.Attribution` of the interval since
    the previous call."""

    def __init__(self, platform: Platform, cpus: list[int], *, pages: int = 256, hardware: bool = True) -> None:
        self.platform = platform
        self.cpus = list(cpus)
        self.pages = pages
        self.hardware = hardware
        #: metric → why it cannot be counted here
        self.unavailable: dict[str, str] = {}
        #: the member events opened (in group order) and the metric each feeds
        self.members: list[tuple[str, EventRef]] = []
        self._groups: dict[int, tuple[PerfEventFd, list[PerfEventFd], RingBuffer]] = {}
        self._chunks: dict[int, list[bytes]] = {}
        self._left: dict[int, list[tuple]] = {}
        #: per CPU, the (pid, tid) known to be running at the last group read:
        #: with no switch since, it is still running at the next read
        self._running_at_read: dict[int, tuple[int, int] | None] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._attrs = None
        self.attributor: SwitchAttributor | None = None
        #: per CPU, the share of the last interval the group was on the PMU
        #: (time_running/time_enabled deltas); < 1 when counters are multiplexed
        #: or held by another perf user, 0 when the group never got them
        self.multiplexed: dict[int, float] = {}
        self._times: dict[int, tuple[int, int]] = {}
        self.lost = 0

    @property
    def columns(self) -> tuple[str, ...]:
        return ("time_ns",) + tuple(f"{m}:{i}" for i, (m, _) in enumerate(self.members))

    # -- setup
    def _probe_members(self, cpu: int) -> None:
        """Which platform events open here, trying each in a real group on ``cpu``."""
        if not self.hardware:
            for m in METRICS:
                self.unavailable.setdefault(m, "hardware events disabled (--no-pmu)")
            return
        leader = PerfEventFd(leader_attr(), pid=-1, cpu=cpu, event="context-switches")
        opened: list[PerfEventFd] = []
        try:
            for metric in METRICS:
                refs = self.platform.events.get(metric)
                if not refs:
                    self.unavailable.setdefault(metric, self.platform.missing.get(metric, f"no {metric} event for this CPU"))
                    continue
                trial = []
                try:
                    for ref in refs:
                        trial.append(PerfEventFd(member_attr(ref), pid=-1, cpu=cpu, group=leader, event=ref.name))
                except PmuscopeError as err:
                    for fd in trial:
                        fd.close()
                    if isinstance(err, NoHardwarePMUError):
                        # one cause for every PMU column: one reason, shown once
                        self.unavailable[metric] = NO_PMU_REASON
                        continue
                    names = "+".join(r.name for r in refs)
                    self.unavailable[metric] = f"{names} does not open here: {str(err).splitlines()[0]}"
                    continue
                opened.extend(trial)
                self.members.extend((metric, ref) for ref in refs)
        finally:
            for fd in opened:
                fd.close()
            leader.close()

    def open(self) -> "SwitchCollector":
        from ..records import AttrTable

        if not self.cpus:
            raise PmuscopeError("no CPUs to observe")
        self._probe_members(self.cpus[0])
        lead = leader_attr()
        mattrs = [member_attr(ref) for _, ref in self.members]
        try:
            for cpu in self.cpus:
                self._open_cpu(cpu, lead, mattrs)
        except PmuscopeError:
            self.close()
            raise
        ids = [[g[0].id() for g in self._groups.values()]]
        for i in range(len(mattrs)):
            ids.append([g[1][i].id() for g in self._groups.values()])
        self._attrs = AttrTable([(lead, ids[0])] + [(a, ids[i + 1]) for i, a in enumerate(mattrs)])
        return self

    def _open_cpu(self, cpu: int, lead, mattrs) -> None:
        leader = PerfEventFd(lead, pid=-1, cpu=cpu, event="context-switches")
        members = []
        try:
            for (_, ref), a in zip(self.members, mattrs):
                members.append(PerfEventFd(a, pid=-1, cpu=cpu, group=leader, event=ref.name))
            ring = RingBuffer(leader, pages=self.pages)
        except PmuscopeError:
            for fd in members:
                fd.close()
            leader.close()
            raise
        self._groups[cpu] = (leader, members, ring)
        self._chunks[cpu] = []
        self._left[cpu] = []

    def start(self) -> "SwitchCollector":
        self.attributor = SwitchAttributor(self.columns)
        for cpu, (leader, _, _) in self._groups.items():
            t0 = time.clock_gettime_ns(CLOCK)
            leader.enable(group=True)
            self.attributor.start(cpu, 0, [t0] + [0] * len(self.members))
        self._thread = threading.Thread(target=self._loop, name="pmuscope-numa", daemon=True)
        self._thread.start()
        self._kick()
        return self

    def _kick(self) -> None:
        """One context switch on every CPU right after the start, so a CPU hog's
        CPU is attributed from the first interval (:mod:`pmuscope.system.kick`)."""
        kick_cpus(list(self._groups))

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self._drain()

    def _drain(self) -> None:
        with self._lock:
            for cpu, (_, _, ring) in self._groups.items():
                chunk = ring.read_records()
                if chunk:
                    self._chunks[cpu].append(chunk)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for leader, members, ring in self._groups.values():
            ring.close()
            for fd in members:
                fd.close()
            leader.close()
        self._groups.clear()

    def __enter__(self) -> "SwitchCollector":
        return self.open().start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hot plug
    def sync_cpus(self, cpus: list[int]) -> None:
        """Open groups on hot-added CPUs and close those of removed ones."""
        # the drain thread iterates the groups and reads their rings: not while they change
        with self._lock:
            self._sync_cpus(cpus)

    def _sync_cpus(self, cpus: list[int]) -> None:
        want = set(cpus)
        for cpu in sorted(set(self._groups) - want):
            leader, members, ring = self._groups.pop(cpu)
            ring.close()
            for fd in members:
                fd.close()
            leader.close()
            if self.attributor is not None:
                self.attributor.forget_cpu(cpu)
        lead = leader_attr()
        mattrs = [member_attr(ref) for _, ref in self.members]
        for cpu in sorted(want - set(self._groups)):
            try:
                self._open_cpu(cpu, lead, mattrs)
            except PmuscopeError:
                continue  # went offline again
            leader = self._groups[cpu][0]
            ids = [leader.id()] + [m.id() for m in self._groups[cpu][1]]
            for entry, i in zip(self._attrs.entries, ids):
                entry.ids.append(i)
                self._attrs.by_id[i] = entry.index
            t0 = time.clock_gettime_ns(CLOCK)
            leader.enable(group=True)
            if self.attributor is not None:
                self.attributor.start(cpu, 0, [t0] + [0] * len(self.members))
        self.cpus = sorted(self._groups)

    # -- collection
    def _decode(self, cpu: int) -> tuple[list[tuple], list[tuple[int, int, int]], list[tuple[int, int, int]]]:
        """(samples, switch-ins, switches as (time, incoming pid, incoming tid))
        of the chunks drained from ``cpu``'s ring."""
        from ..records import decode
        from ..records.types import SwitchCpuWide

        width = 1 + len(self.members)
        samples: list[tuple] = list(self._left[cpu])
        ins: list[tuple[int, int, int]] = []
        switches: list[tuple[int, int, int]] = []
        chunks, self._chunks[cpu] = self._chunks[cpu], []
        for chunk in chunks:
            for item in decode(chunk, self._attrs):
                if isinstance(item, SwitchCpuWide) and item.sample_id is not None:
                    sid = item.sample_id
                    if item.out:  # the task coming in runs from here on
                        switches.append((sid.time, item.next_prev_pid, item.next_prev_tid))
                    else:
                        ins.append((sid.time, sid.pid, sid.tid))
                        switches.append((sid.time, sid.pid, sid.tid))
                elif hasattr(item, "read_value") and item.read_value is not None:
                    vals = np.asarray(item.read_value, dtype=np.float64).reshape(len(item), width)
                    samples.append((vals[:, 0].astype(np.int64), np.asarray(item.pid), np.asarray(item.tid),
                                    np.asarray(item.time, dtype=np.float64), vals[:, 1:]))
        self._left[cpu] = []
        if switches and self.attributor is not None:
            sw = np.array(switches, dtype=np.int64)
            self.attributor.add_switches(cpu, sw[:, 0], sw[:, 1], sw[:, 2])
        return samples, ins, switches

    def collect(self, after_read: Callable[[], Any] | None = None) -> Attribution:
        """Read every group, attribute everything up to the read, return the
        interval's per-(pid, tid, cpu) sums.

        ``after_read`` is called right after the group reads, before the
        side-band is decoded: what it reads (procfs) then covers the same
        window as the attribution. Decoding a loaded second of switches takes
        tens to hundreds of ms, and a read made after it would cover that much
        more time than the side-band does."""
        assert self.attributor is not None, "start() first"
        reads: dict[int, tuple[list[int], int, int, int]] = {}
        for cpu, (leader, members, _) in self._groups.items():
            vals, te, tr = _read_group(leader, 1 + len(members))
            reads[cpu] = (vals, te, tr, time.clock_gettime_ns(CLOCK))
        if after_read is not None:
            after_read()
        self._drain()
        with self._lock:
            for cpu, (vals, te, tr, t_read) in reads.items():
                samples, ins, switches = self._decode(cpu)
                n_read = vals[0]
                running = None
                last_t = -1
                before_parts, after_parts = [], []
                for n, pid, tid, t, v in samples:
                    b = n <= n_read
                    if b.any():
                        before_parts.append((n[b], pid[b], tid[b], np.column_stack([t[b], v[b]])))
                        last_t = max(last_t, int(t[b][-1]))
                    if (~b).any():
                        a = ~b
                        after_parts.append((n[a], pid[a], tid[a], t[a], v[a]))
                        if running is None and int(n[a][0]) == n_read + 1:
                            running = (int(pid[a][0]), int(tid[a][0]))
                for n, pid, tid, v in before_parts:
                    self.attributor.feed(cpu, n, pid, tid, v)
                if running is None:
                    cand = [(t, p, tid) for t, p, tid in ins if last_t <= t <= t_read]
                    if cand:
                        running = (cand[-1][1], cand[-1][2])
                if running is None and last_t < 0:
                    # no switch-out on this CPU in the whole interval: a task that kept
                    # the CPU throughout (a CPU hog) is the one the last switch brought
                    # in, or, with no switch at all, the one running at the last read
                    prior = [(t, p, tid) for t, p, tid in switches if t <= t_read]
                    running = (prior[-1][1], prior[-1][2]) if prior else self._running_at_read.get(cpu)
                self._running_at_read[cpu] = running
                self.attributor.boundary(cpu, n_read, [t_read] + vals[1:], running)
                self._left[cpu] = after_parts
                lte, ltr = self._times.get(cpu, (0, 0))
                self._times[cpu] = (te, tr)
                dte, dtr = te - lte, tr - ltr
                self.multiplexed[cpu] = 1.0 if dte <= 0 else dtr / dte
        self.lost = sum(g[2].lost for g in self._groups.values())
        att = self.attributor.take()
        if self.members and att.pid.size:
            # like numatop: counts of a group that was on the PMU part of the time are
            # scaled by enabled/running (per CPU; the time column is not a counter)
            for cpu, frac in self.multiplexed.items():
                if 0 < frac < 1:
                    att.values[att.cpu == cpu, 1:] /= frac
        return att

    @property
    def never_scheduled(self) -> bool:
        """True when hardware members exist and no CPU's group got the PMU in
        the last interval (another perf user holds every counter)."""
        return bool(self.members) and bool(self.multiplexed) and all(f == 0 for f in self.multiplexed.values())


# -- uncore bandwidth --------------------------------------------------------------


class UncoreCounters:
    """Memory-controller (``uncore_imc_N``) and socket-link (``uncore_upi_N`` /
    ``uncore_qpi_N``) counting events, opened on the CPU each uncore PMU's
    ``cpumask`` names, like numatop's ``pf_uncoreimc_setup``. :meth:`read`
    returns MB per node since the previous read, scaled by enabled/running."""

    def __init__(self, platform: Platform, node_of_cpu: dict[int, int], root: str = "/") -> None:
        self.platform = platform
        self.node_of_cpu = node_of_cpu
        self.root = root
        self.unavailable: dict[str, str] = {}
        self._fds: dict[str, list[tuple[int, PerfEventFd, float]]] = {}
        self._last: dict[int, tuple[int, int, int]] = {}

    def open(self) -> "UncoreCounters":
        base = "sys/bus/event_source/devices"
        pmus = _fs.listdir(self.root, base)
        for metric, keys in (("imc_mb", ("imc",)), ("upi_mb", ("upi", "qpi"))):
            if metric in self.platform.missing:
                self.unavailable[metric] = self.platform.missing[metric]
                continue
            specs = [self.platform.uncore[k] for k in keys if k in self.platform.uncore]
            opened: list[tuple[int, PerfEventFd, float]] = []
            tried = []
            for spec in specs:
                for name in (p for p in pmus if p.startswith(spec["pmu_prefix"])):
                    tried.append(name)
                    ptype = _fs.read_int(self.root, f"{base}/{name}/type")
                    cpus = _fs.parse_cpulist(_fs.read_text(self.root, f"{base}/{name}/cpumask")) or [0]
                    if ptype is None:
                        continue
                    for cpu in cpus:
                        try:
                            fd = PerfEventFd(abi.perf_event_attr(type=ptype, config=int(spec["config"], 0),
                                                                 read_format=int(_F.TOTAL_TIME_ENABLED | _F.TOTAL_TIME_RUNNING)),
                                             pid=-1, cpu=cpu, event=f"{name}/config={spec['config']}/")
                        except PmuscopeError as err:
                            self.unavailable[metric] = f"{name} does not open: {str(err).splitlines()[0]}"
                            continue
                        opened.append((cpu, fd, float(spec.get("bytes_per_count", 64))))
                if opened:
                    break
            if opened:
                self._fds[metric] = opened
            elif metric not in self.unavailable:
                prefixes = "/".join(s["pmu_prefix"] + "N" for s in specs) or "uncore"
                self.unavailable[metric] = f"no {prefixes} PMU here (bare-metal server uncore only)"
        return self

    def read(self) -> dict[str, dict[int, float]]:
        out: dict[str, dict[int, float]] = {}
        for metric, fds in self._fds.items():
            per_node: dict[int, float] = {}
            for cpu, fd, bpc in fds:
                value, te, tr = struct.unpack("<QQQ", fd.read(24))
                lv, lte, ltr = self._last.get(fd.fd, (0, 0, 0))
                self._last[fd.fd] = (value, te, tr)
                dv, dte, dtr = value - lv, te - lte, tr - ltr
                scaled = dv * dte / dtr if dtr > 0 else 0.0
                node = self.node_of_cpu.get(cpu, 0)
                per_node[node] = per_node.get(node, 0.0) + scaled * bpc / 2**20
            out[metric] = per_node
        return out

    def close(self) -> None:
        for fds in self._fds.values():
            for _, fd, _ in fds:
                fd.close()
        self._fds.clear()


def describe(platform: Platform) -> dict[str, Any]:
    return platform.to_dict()
