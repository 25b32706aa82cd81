"""Counter collection for the exporter: counting sessions read on each scrape
and turned into metric families.

Counters are exposed **raw** (monotonic; what the kernel counted while the
event was on the PMU) next to ``pmuscope_perf_time_enabled_seconds_total`` and
``pmuscope_perf_time_running_seconds_total`` per event and CPU, so PromQL can
correct multiplexing the way perf does::

    rate(pmuscope_perf_cpucycles_total[1m])
      * on(cpu) rate(pmuscope_perf_time_enabled_seconds_total{event="cycles"}[1m])
      / on(cpu) rate(pmuscope_perf_time_running_seconds_total{event="cycles"}[1m])

(node_exporter's perf collector exports neither time, so its counts cannot be
corrected). Derived gauges (IPC, CPU utilization) are computed over the last
``window`` seconds between two reads, whichever scraper triggered them.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .. import __version__, errors
from ..counting.results import ENA, RUN, VAL, scale_cells
from ..kernel import abi
from .exposition import COUNTER, GAUGE, INFO, MetricFamily, sort_families
from .names import event_metric

#: node_exporter's default perf profilers, as perf event names; events the
#: machine lacks are dropped (``tolerate_unsupported``)
DEFAULT_SOFTWARE = "cpu-clock,context-switches,cpu-migrations,page-faults,minor-faults,major-faults"
DEFAULT_HARDWARE = "{cycles,instructions},branches,branch-misses,cache-references,cache-misses"

PER_MODES = ("cpu", "node", "global")


def default_events(has_hardware_pmu: bool) -> str:
    return DEFAULT_SOFTWARE + ("," + DEFAULT_HARDWARE if has_hardware_pmu else "")


def has_hardware_pmu(sysfs: str = "/sys") -> bool:
    """True when a core PMU is registered (``/sys/bus/event_source/devices/cpu*``
    with a ``cpus`` or ``type`` file), i.e. generic hardware events can count."""
    base = os.path.join(sysfs, "bus/event_source/devices")
    try:
        names = os.listdir(base)
    except OSError:
        return False
    return any(n == "cpu" or n.startswith("cpu_") or n.startswith("armv8") for n in names)


def read_proc_stat(procfs: str = "/proc") -> dict[int, tuple[int, int]]:
    """``{cpu: (busy_jiffies, total_jiffies)}``, ``-1`` for the all-CPU line.

    busy = total - idle - iowait; guest time is already inside user (proc(5))."""
    out: dict[int, tuple[int, int]] = {}
    try:
        with open(os.path.join(procfs, "stat")) as f:
            for line in f:
                if not line.startswith("cpu"):
                    break
                parts = line.split()
                key = -1 if parts[0] == "cpu" else int(parts[0][3:])
                vals = [int(v) for v in parts[1:9]]
                total = sum(vals)
                out[key] = (total - vals[3] - vals[4], total)
    except (OSError, ValueError):
        pass
    return out


@dataclass
class Source:
    """One counting session and the labels its series carry (e.g. a cgroup)."""

    counter: object
    labels: dict[str, str] = field(default_factory=dict)
    #: set when the session counts tasks of one cgroup: utilization comes from task-clock
    cgroup: str | None = None


@dataclass
class Health:
    """The exporter's own counters."""

    scrapes: int = 0
    read_errors: int = 0
    last_error: str = ""
    last_scrape_seconds: float = 0.0
    #: callables returning records lost so far by sampling sessions in this process
    lost_record_sources: list[Callable[[], int]] = field(default_factory=list)


class CounterExporter:
    """Read counting sessions and produce metric families.

    ``sources`` are :class:`Source` objects around started counters (anything
    with ``evsels``, ``layout``, ``read()`` and ``fd_count`` like
    :class:`pmuscope.counting.Counter`). ``per`` is ``cpu`` (a ``cpu`` label,
    like node_exporter), ``node`` (summed per NUMA node) or ``global``.
    Use :func:`open_exporter` to build one from event strings.
    """

    def __init__(
        self,
        sources: Sequence[Source],
        per: str = "cpu",
        node_of: dict[int, int] | None = None,
        window: float = 1.0,
        procfs: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per not in PER_MODES:
            raise errors.PmuscopeError(f"bad aggregation {per!r}: expected one of {', '.join(PER_MODES)}")
        self.sources = list(sources)
        self.per = per
        self.node_of = node_of or {}
        self.window = window
        self.procfs = procfs
        self.clock = clock
        self.health = Health()
        self._lock = threading.Lock()
        self._last: list = [None] * len(self.sources)
        self._base: list = [None] * len(self.sources)
        self._base_stat: tuple[float, dict] | None = None
        self._gauges: list[MetricFamily] = []
        self._metrics = [
            [event_metric(ev.spec) for ev in src.counter.evsels] for src in self.sources
        ]
        for src, metrics in zip(self.sources, self._metrics):
            seen: dict[tuple[str, str], str] = {}
            for ev, em in zip(src.counter.evsels, metrics):
                key = (em.name, ev.spec.modifiers)
                if key in seen:
                    raise errors.PmuscopeError(
                        f"events {seen[key]!r} and {ev.name!r} would both be exposed as {em.name}_total with the same "
                        "labels: list each event once")
                seen[key] = ev.name

    # -- keys -------------------------------------------------------------
    def _key_labels(self, cpu: int) -> dict[str, str]:
        if self.per == "cpu":
            return {"cpu": str(cpu)}
        if self.per == "node":
            return {"node": str(self.node_of.get(cpu, 0))}
        return {}

    def _group(self, cpus: Sequence[int]) -> list[tuple[dict[str, str], list[int]]]:
        """``[(labels, [cpu indices])]`` in label order."""
        order: dict[tuple, tuple[dict[str, str], list[int]]] = {}
        for idx, cpu in enumerate(cpus):
            labels = self._key_labels(cpu)
            order.setdefault(tuple(labels.items()), (labels, []))[1].append(idx)
        return list(order.values())

    # -- reading ----------------------------------------------------------
    def _read_all(self) -> list:
        out = []
        for i, src in enumerate(self.sources):
            try:
                counts = src.counter.read()
                counts.data  # decode now: a short read raises here, not while rendering
                self._last[i] = counts
            except (OSError, errors.PmuscopeError) as err:
                self.health.read_errors += 1
                self.health.last_error = str(err)
            out.append(self._last[i])
        return out

    def collect(self) -> list[MetricFamily]:
        """Read every session now and return all families (sorted by name)."""
        with self._lock:
            t0 = time.perf_counter()
            counts = self._read_all()
            fams = self._counter_families(counts)
            self._update_gauges(counts)
            fams.extend(self._gauges)
            self.health.scrapes += 1
            fams.extend(self._health_families(time.perf_counter() - t0))
            return sort_families(fams)

    def _counter_families(self, counts: list) -> list[MetricFamily]:
        by_name: dict[str, MetricFamily] = {}
        enabled = MetricFamily("pmuscope_perf_time_enabled_seconds", COUNTER,
                               "time the event was enabled (perf_event read_format TOTAL_TIME_ENABLED)", "seconds")
        running = MetricFamily("pmuscope_perf_time_running_seconds", COUNTER,
                               "time the event was on the PMU (TOTAL_TIME_RUNNING); enabled/running scales a multiplexed count",
                               "seconds")
        supported = MetricFamily("pmuscope_perf_event_supported", GAUGE,
                                 "1 when the event could be opened on this machine, 0 when it is not supported")
        for src, metrics, c in zip(self.sources, self._metrics, counts):
            if c is None:
                continue
            layout = c.layout
            data = c.data.sum(axis=2, dtype=np.uint64)  # [event, cpu, 3], threads folded
            groups = self._group(layout.cpus)
            for e, (name, em) in enumerate(zip(layout.names, metrics)):
                ev_labels = {"event": name, **src.labels}
                supported.add(ev_labels, 1 if layout.supported[e] else 0)
                if not layout.supported[e]:
                    continue
                fam = by_name.get(em.name)
                if fam is None:
                    fam = by_name[em.name] = MetricFamily(em.name, COUNTER, em.help, em.unit)
                spec = src.counter.evsels[e].spec
                extra = {"modifiers": spec.modifiers} if spec.modifiers else {}
                for key_labels, idxs in groups:
                    cells = data[e, idxs]
                    labels = {**key_labels, **src.labels, **extra}
                    val = int(cells[:, VAL].sum())
                    fam.add(labels, round(val * em.factor, 9) if em.factor != 1.0 else val)
                    tl = {**key_labels, **ev_labels}
                    enabled.add(tl, int(cells[:, ENA].sum()) / 1e9)
                    running.add(tl, int(cells[:, RUN].sum()) / 1e9)
        return list(by_name.values()) + [enabled, running, supported]

    # -- derived gauges ---------------------------------------------------
    def _update_gauges(self, counts: list) -> None:
        now = self.clock()
        stat = read_proc_stat(self.procfs)
        if self._base_stat is None:
            self._base_stat = (now, stat)
            self._base = list(counts)
            return
        if now - self._base_stat[0] < self.window:
            return
        ipc = MetricFamily("pmuscope_instructions_per_cycle", GAUGE,
                           "instructions / cycles (both multiplex-scaled) over the last window")
        util = MetricFamily("pmuscope_cpu_utilization_ratio", GAUGE,
                            "busy share of the CPU over the last window (/proc/stat; per cgroup: task-clock / wall time)",
                            "ratio")
        mux = MetricFamily("pmuscope_perf_running_ratio", GAUGE,
                           "time_running / time_enabled over the last window (1 = never multiplexed)", "ratio")
        for src, cur, base in zip(self.sources, counts, self._base):
            if cur is None or base is None or cur is base:
                continue
            delta = cur - base
            data = delta.data
            scaled, _counted = scale_cells(data)
            scaled = scaled.sum(axis=2)
            data = data.sum(axis=2, dtype=np.uint64)
            specs = [ev.spec for ev in src.counter.evsels]
            cyc = next((i for i, s in enumerate(specs) if s.attr.type == abi.PERF_TYPE_HARDWARE and s.attr.config == 0
                        and delta.layout.supported[i]), None)
            ins = next((i for i, s in enumerate(specs) if s.attr.type == abi.PERF_TYPE_HARDWARE and s.attr.config == 1
                        and delta.layout.supported[i]), None)
            tclk = next((i for i, s in enumerate(specs) if s.attr.type == abi.PERF_TYPE_SOFTWARE and s.attr.config == 1
                         and delta.layout.supported[i]), None)
            wall = delta.elapsed_ns
            for key_labels, idxs in self._group(delta.layout.cpus):
                labels = {**key_labels, **src.labels}
                if cyc is not None and ins is not None:
                    c = float(scaled[cyc, idxs].sum())
                    if c > 0:
                        ipc.add(labels, float(scaled[ins, idxs].sum()) / c)
                if src.cgroup is not None and tclk is not None and wall > 0:
                    util.add(labels, float(scaled[tclk, idxs].sum()) / (wall * len(idxs)))
                for e, name in enumerate(delta.layout.names):
                    ena = int(data[e, idxs, ENA].sum())
                    if ena and delta.layout.supported[e]:
                        mux.add({**labels, "event": name}, int(data[e, idxs, RUN].sum()) / ena)
        if not any(src.cgroup for src in self.sources):
            old = self._base_stat[1]
            counted = {c for src in self.sources for c in src.counter.layout.cpus}
            cpus = sorted(k for k in stat if k >= 0 and k in counted)
            groups: dict[tuple, tuple[dict, list[int]]] = {}
            for cpu in cpus:
                labels = self._key_labels(cpu)
                groups.setdefault(tuple(labels.items()), (labels, []))[1].append(cpu)
            for labels, members in groups.values():
                busy = sum(stat[c][0] - old.get(c, (0, 0))[0] for c in members)
                total = sum(stat[c][1] - old.get(c, (0, 0))[1] for c in members)
                if total > 0:
                    util.add(labels, max(0.0, min(1.0, busy / total)))
        self._gauges = [f for f in (ipc, util, mux) if f.samples]
        self._base_stat = (now, stat)
        self._base = list(counts)

    # -- health -----------------------------------------------------------
    def _health_families(self, seconds: float) -> list[MetricFamily]:
        h = self.health
        h.last_scrape_seconds = seconds
        fds = MetricFamily("pmuscope_open_fds", GAUGE, "file descriptors held: perf_event fds of the sessions, and the whole process")
        fds.add({"kind": "perf_event"}, sum(int(getattr(s.counter, "fd_count", 0)) for s in self.sources))
        try:
            fds.add({"kind": "process"}, len(os.listdir("/proc/self/fd")))
        except OSError:
            pass
        lost = 0
        for fn in h.lost_record_sources:
            try:
                lost += int(fn())
            except Exception:  # a sampling session that went away
                pass
        fams = [
            MetricFamily("pmuscope_scrapes", COUNTER, "scrapes served (HTTP and textfile)", samples=[({}, h.scrapes)]),
            MetricFamily("pmuscope_read_errors", COUNTER, "counter reads that failed (the last good values are served)",
                         samples=[({}, h.read_errors)]),
            MetricFamily("pmuscope_lost_records", COUNTER,
                         "ring-buffer records lost by sampling sessions of this process (PERF_RECORD_LOST); 0 when only counting",
                         samples=[({}, lost)]),
            MetricFamily("pmuscope_scrape_duration_seconds", GAUGE, "time to read the counters and build this scrape",
                         "seconds", samples=[({}, round(seconds, 6))]),
            MetricFamily("pmuscope_build", INFO, "pmuscope version", samples=[({"version": __version__}, 1)]),
            fds,
        ]
        return fams

    def close(self) -> None:
        for src in self.sources:
            close = getattr(src.counter, "close", None)
            if close is not None:
                close()


def open_exporter(
    events: str | None = None,
    cpus: str | Sequence[int] | None = None,
    per: str = "cpu",
    cgroups: Sequence[str] = (),
    window: float = 1.0,
    root: str = "/",
) -> CounterExporter:
    """Open system-wide counting sessions (one per cgroup when ``cgroups``)
    and return a started :class:`CounterExporter`.

    ``events`` defaults to node_exporter's software profilers, plus its
    hardware ones when the machine has a core PMU. Events the machine cannot
    count are reported by ``pmuscope_perf_event_supported 0``; when none can
    be counted this raises."""
    from ..counting import count
    from ..system import read_topology

    if events is None:
        events = default_events(has_hardware_pmu(os.path.join(root, "sys")))
    cpu_arg = cpus if cpus is not None else "all"
    node_of: dict[int, int] = {}
    try:
        topo = read_topology(root)
        node_of = {c.cpu: (c.node if c.node is not None else 0) for c in topo.cpus}
    except errors.PmuscopeError:
        pass
    sources: list[Source] = []
    try:
        if cgroups:
            for cg in cgroups:
                ctr = count(events, cpus=cpu_arg, cgroup=cg, tolerate_unsupported=True)
                ctr.start()
                sources.append(Source(ctr, {"cgroup": cg}, cgroup=cg))
        else:
            ctr = count(events, cpus=cpu_arg, system_wide=True, tolerate_unsupported=True)
            ctr.start()
            sources.append(Source(ctr))
    except BaseException:
        for s in sources:
            s.counter.close()
        raise
    for s in sources:
        if not any(s.counter.layout.supported):
            for t in sources:
                t.counter.close()
            raise errors.EventNotSupportedError(
                f"none of the events {events!r} can be counted here; see `pmuscope list` and `pmuscope doctor`")
    try:
        return CounterExporter(sources, per=per, node_of=node_of, window=window, procfs=os.path.join(root, "proc"))
    except BaseException:
        for s in sources:
            s.counter.close()
        raise
