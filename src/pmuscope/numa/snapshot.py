"""Node and process tables of one interval: what ``pmuscope numatop`` shows.

:func:`build_snapshot` is pure: two procfs states, the nodes, and (when the
kernel allowed it) the interval's :class:`~pmuscope.numa.attribution.Attribution`
go in, a :class:`Snapshot` comes out — fixtures drive it with recorded data.
:class:`NumaSampler` does the live reading and :func:`snapshot` is the
one-call Python API.

Sources per column (and what happens without them):

* process/thread ``cpu_pct`` (percent of one CPU): ``/proc/PID/task/*/schedstat``
  run-time deltas — exact, no PMU needed;
* node ``cpu_pct`` (percent of the node's CPUs): ``/proc/stat`` per-CPU deltas;
* ``migrations`` (``se.nr_migrations`` of ``/proc/PID/task/*/sched``),
  ``minflt``/``majflt`` (``/proc/PID/stat``), per-node memory
  (``/proc/PID/numa_maps``), node memory (``nodeN/meminfo``): no PMU needed;
* per-node CPU% of a process: the context-switch side-band (software events,
  needs CPU-wide perf: root or ``perf_event_paranoid`` <= 0);
* ``rma``, ``lma``, ``rma_lma``, ``cpi``, ``rpi``, ``lpi``: the platform's
  hardware events, attributed at context switches;
* ``imc_mb_s``/``upi_mb_s``: uncore PMUs.

A column that cannot be measured here is ``None`` in every row and its reason
is listed once in :attr:`Snapshot.unavailable`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..errors import PmuscopeError
from ..system import _fs, read_cpu_identity
from . import metrics
from .attribution import Attribution
from .model import (
    Node,
    NodeSet,
    TaskStat,
    list_pids,
    list_tids,
    read_cpu_jiffies,
    read_numa_maps,
    read_task,
)
from .platforms import Platform, platform_for

PMU_COLUMNS = ("rma", "lma", "rma_lma", "cpi", "rpi", "lpi")
NODE_COLUMNS = ("node", "cpus", "cpu_pct", "mem_total_kb", "mem_free_kb", "mem_used_kb", "rma", "lma", "rma_lma",
                "cpi", "rpi", "lpi", "imc_mb_s", "upi_mb_s")
PROCESS_COLUMNS = ("pid", "comm", "nthreads", "cpu_pct", "rma", "lma", "rma_lma", "cpi", "rpi", "lpi", "migrations",
                   "minflt", "majflt", "mem_kb")
THREAD_COLUMNS = ("pid", "tid", "comm", "cpu_pct", "rma", "lma", "rma_lma", "cpi", "rpi", "lpi", "migrations")


@dataclass
class ProcState:
    """procfs at one moment: processes (and optionally threads) and per-CPU jiffies."""

    time_ns: int
    processes: dict[int, TaskStat]
    threads: dict[tuple[int, int], TaskStat]
    jiffies: dict[int, tuple[int, int]]


def read_proc_state(root: str = "/", *, threads: bool = False, pids: Iterable[int] | None = None,
                    time_ns: int | None = None) -> ProcState:
    """Read every process (or ``pids``) and, with ``threads``, every thread."""
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) if time_ns is None else time_ns
    if time_ns is None and root != "/":
        stamp = _fs.read_int(root, "proc/uptime_ns")  # fixtures record the moment they stand for
        now = stamp if stamp is not None else now
    procs: dict[int, TaskStat] = {}
    thr: dict[tuple[int, int], TaskStat] = {}
    for pid in (list_pids(root) if pids is None else pids):
        t = read_task(root, pid)
        if t is None:
            continue
        procs[pid] = t
        if threads:
            for tid in list_tids(root, pid):
                tt = read_task(root, pid, tid)
                if tt is not None:
                    thr[(pid, tid)] = tt
    return ProcState(now, procs, thr, read_cpu_jiffies(root))


@dataclass
class Snapshot:
    """One interval of the NUMA view. Rows are plain dicts (JSON-ready)."""

    interval_s: float
    nodes: list[dict[str, Any]]
    processes: list[dict[str, Any]]
    threads: list[dict[str, Any]] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    platform: str = "generic"
    attribution: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "platform": self.platform,
            "nodes": self.nodes,
            "processes": self.processes,
            "threads": self.threads,
            "unavailable": dict(self.unavailable),
            "attribution": self.attribution,
            "topology_changes": self.changes,
        }

    def process(self, pid: int) -> dict[str, Any]:
        for row in self.processes:
            if row["pid"] == pid:
                return row
        raise KeyError(f"pid {pid} is not in this snapshot")

    def thread(self, pid: int, tid: int) -> dict[str, Any]:
        """The row of thread ``tid`` of ``pid`` (its ``by_node`` is numatop's
        WIN5, the per-node breakdown of one thread); only when threads were read."""
        for row in self.threads:
            if row["pid"] == pid and row["tid"] == tid:
                return row
        raise KeyError(f"thread {tid} of pid {pid} is not in this snapshot (threads are read with threads=True)")

    def node(self, nid: int) -> dict[str, Any]:
        for row in self.nodes:
            if row["node"] == nid:
                return row
        raise KeyError(f"node {nid} is not in this snapshot")


def _counts(platform_columns: tuple[str, ...], row: np.ndarray | None, have: set[str],
            signs: dict[str, int]) -> dict[str, float | None]:
    """Metric sums (clk, ir, rma, lma) from one attribution row; events with a
    ``sign`` are subtracted (generic LMA = node-loads − node-load-misses)."""
    out: dict[str, float | None] = {m: (0.0 if m in have else None) for m in ("clk", "ir", "rma", "lma")}
    if row is None:
        return out
    for i, col in enumerate(platform_columns):
        if i == 0:
            continue
        metric, _, _ = col.partition(":")
        if metric in have and out.get(metric) is not None:
            out[metric] += float(row[i]) * signs.get(col, 1)  # type: ignore[operator]
    return out


def _metric_cells(counts: dict[str, float | None], unavailable: dict[str, str]) -> dict[str, float | None]:
    d = metrics.derived(counts)
    cells = {"rma": counts.get("rma"), "lma": counts.get("lma"), "clk": counts.get("clk"), "ir": counts.get("ir")}
    cells.update(d)
    for k in list(cells):
        if k in unavailable:
            cells[k] = None
    return cells


def group_reasons(unavailable: dict[str, str]) -> list[tuple[str, list[str]]]:
    """One line per distinct reason: derived columns ("needs clk and ir: R")
    join the columns whose reason is R."""
    groups: dict[str, list[str]] = {}
    for col, why in unavailable.items():
        root = why.split(": ", 1)[1] if why.startswith("needs ") and ": " in why else why
        groups.setdefault(root, []).append(col)
    return list(groups.items())


def derived_unavailable(base: dict[str, str]) -> dict[str, str]:
    """Reasons for the derived columns from those of their events."""
    out = dict(base)
    for col, needs in (("rma_lma", ("rma", "lma")), ("cpi", ("clk", "ir")), ("rpi", ("rma", "ir")), ("lpi", ("lma", "ir"))):
        missing = [n for n in needs if n in base]
        if missing:
            reasons = list(dict.fromkeys(base[n] for n in missing))
            out[col] = f"needs {' and '.join(missing)}: " + "; ".join(reasons)
    return out


def build_snapshot(
    nodes: list[Node],
    before: ProcState,
    after: ProcState,
    *,
    attribution: Attribution | None = None,
    member_signs: dict[str, int] | None = None,
    unavailable: dict[str, str] | None = None,
    memory: dict[int, dict[int, int] | None] | None = None,
    uncore: dict[str, dict[int, float]] | None = None,
    platform: str = "generic",
) -> Snapshot:
    """The node, process and thread tables of the interval ``before`` → ``after``.

    ``attribution`` holds the interval's per-(pid, tid, cpu) switch-attributed
    sums (columns ``time_ns`` then ``<metric>:<i>``); None when the side-band
    could not be opened (then per-node CPU% of processes is unavailable and so
    is every PMU column, with the reasons in ``unavailable``). ``memory`` maps
    pid → bytes per node (from numa_maps).

    Process rows and thread rows both carry ``by_node``: one cell per node
    (``node``, ``cpu_pct``, ``rma``, ``lma``, ``clk``, ``ir``, ``rma_lma``,
    ``cpi``, ``rpi``, ``lpi``) from the counts charged while the process or
    thread ran on that node's CPUs (numatop's WIN3 and WIN5)."""
    signs = dict(member_signs or {})
    unavailable = dict(unavailable or {})
    if attribution is None:
        unavailable.setdefault("cpu_pct_by_node", "context-switch side-band not available")
        for m in ("clk", "ir", "rma", "lma"):
            unavailable.setdefault(m, "no per-CPU counting groups (see cpu_pct_by_node)")
    unavailable = derived_unavailable(unavailable)
    have = {m for m in ("clk", "ir", "rma", "lma") if m not in unavailable}
    interval_ns = after.time_ns - before.time_ns
    if interval_ns <= 0:
        raise PmuscopeError(f"the second procfs state is not later than the first ({interval_ns} ns apart)")
    interval_s = interval_ns / 1e9
    node_of_cpu = {c: n.id for n in nodes for c in n.cpus}

    # -- attribution sums
    cols = attribution.columns if attribution is not None else ("time_ns",)
    by_node: dict[int, np.ndarray] = {}
    by_pid: dict[int, np.ndarray] = {}
    by_pid_node: dict[tuple[int, ...], np.ndarray] = {}  # (pid, node)
    by_tid: dict[tuple[int, ...], np.ndarray] = {}  # (pid, tid)
    by_tid_node: dict[tuple[int, ...], np.ndarray] = {}  # (pid, tid, node)
    att_interval_ns = float(interval_ns)
    if attribution is not None and attribution.pid.size:
        if attribution.intervals_ns:
            # the side-band's own interval (read to read), not the procfs one
            att_interval_ns = float(np.mean(list(attribution.intervals_ns.values()))) or att_interval_ns
        nodes_arr = np.array([node_of_cpu.get(int(c), -1) for c in attribution.cpu], dtype=np.int64)
        by_node = attribution.by(nodes_arr)
        by_pid = attribution.by(attribution.pid)
        # tuple keys, grouped column by column: exact for any pid, tid and node (-1 included)
        by_pid_node = attribution.by_rows(attribution.pid, nodes_arr)
        by_tid = attribution.by_rows(attribution.pid, attribution.tid)
        by_tid_node = attribution.by_rows(attribution.pid, attribution.tid, nodes_arr)

    # -- nodes
    node_rows = []
    for n in nodes:
        busy = total = 0
        for c in n.cpus:
            b0, t0 = before.jiffies.get(c, (0, 0))
            b1, t1 = after.jiffies.get(c, (0, 0))
            if c in before.jiffies and c in after.jiffies:
                busy += b1 - b0
                total += t1 - t0
        counts = _counts(cols, by_node.get(n.id), have, signs)
        row: dict[str, Any] = {
            "node": n.id,
            "cpus": list(n.cpus),
            "memory_only": n.memory_only,
            "cpu_pct": metrics.cpu_pct_from_jiffies(busy, total) if n.cpus else None,
            "mem_total_kb": n.mem_total_kb,
            "mem_free_kb": n.mem_free_kb,
            "mem_used_kb": n.mem_used_kb,
            "active_kb": n.meminfo.get("Active"),
            "inactive_kb": n.meminfo.get("Inactive"),
            "dirty_kb": n.meminfo.get("Dirty"),
            "writeback_kb": n.meminfo.get("Writeback"),
            "mapped_kb": n.meminfo.get("Mapped"),
            "distances": {str(k): v for k, v in sorted(n.distances.items())},
        }
        row.update(_metric_cells(counts, unavailable))
        for col in ("imc_mb_s", "upi_mb_s"):
            src = col.replace("_s", "")
            val = (uncore or {}).get(src, {}).get(n.id) if src not in unavailable else None
            row[col] = metrics.per_second(val, interval_s)
            if val is None and src not in unavailable and uncore is not None and src in uncore:
                # the machine has such PMUs, but none counts for this node (a CXL/HBM node)
                unavailable[f"{col}[node {n.id}]"] = "no uncore PMU of this kind serves this node"
        node_rows.append(row)
    for col in ("imc_mb_s", "upi_mb_s"):
        src = col.replace("_s", "")
        if src in unavailable:
            unavailable[col] = unavailable.pop(src)
        elif uncore is None or src not in uncore:
            unavailable.setdefault(col, "uncore counters were not opened")

    def node_cells(sums: list[np.ndarray | None]) -> list[dict[str, Any]]:
        """numatop's per-node breakdown (WIN3 for a process, WIN5 for a thread):
        one cell per node from the attribution sums of the row on that node."""
        cells = []
        for n, v in zip(nodes, sums):
            cell: dict[str, Any] = {
                "node": n.id,
                "cpu_pct": (metrics.cpu_pct_from_ns(float(v[0]) if v is not None else 0.0, att_interval_ns)
                            if "cpu_pct_by_node" not in unavailable and n.cpus else None)}
            cell.update(_metric_cells(_counts(cols, v, have, signs), unavailable))
            cells.append(cell)
        return cells

    # -- processes
    proc_rows = []
    for pid, t1 in after.processes.items():
        t0 = before.processes.get(pid)
        if t0 is None or pid == 0:
            continue
        run = max(t1.runtime_ns - t0.runtime_ns, 0)
        counts = _counts(cols, by_pid.get(pid), have, signs)
        row = {
            "pid": pid,
            "comm": t1.comm,
            "nthreads": t1.nthreads,
            "cpu_pct": metrics.cpu_pct_from_ns(run, interval_ns),
            "migrations": None if t1.migrations is None or t0.migrations is None else max(t1.migrations - t0.migrations, 0),
            "minflt": t1.minflt - t0.minflt,
            "majflt": t1.majflt - t0.majflt,
        }
        row.update(_metric_cells(counts, unavailable))
        row["by_node"] = node_cells([by_pid_node.get((pid, n.id)) for n in nodes])
        mem = (memory or {}).get(pid)
        row["mem_kb"] = None if mem is None else sum(mem.values()) // 1024
        row["mem_kb_by_node"] = None if mem is None else {str(n.id): mem.get(n.id, 0) // 1024 for n in nodes}
        proc_rows.append(row)

    # -- threads
    thread_rows = []
    for (pid, tid), t1 in after.threads.items():
        t0 = before.threads.get((pid, tid))
        if t0 is None:
            continue
        counts = _counts(cols, by_tid.get((pid, tid)), have, signs)
        row = {"pid": pid, "tid": tid, "comm": t1.comm,
               "cpu_pct": metrics.cpu_pct_from_ns(max(t1.runtime_ns - t0.runtime_ns, 0), interval_ns),
               "migrations": None if t1.migrations is None or t0.migrations is None else max(t1.migrations - t0.migrations, 0)}
        row.update(_metric_cells(counts, unavailable))
        row["by_node"] = node_cells([by_tid_node.get((pid, tid, n.id)) for n in nodes])
        thread_rows.append(row)

    att: dict[str, Any] = {"method": "switch-sampling" if attribution is not None else None}
    if attribution is not None:
        att.update(samples=attribution.samples, gaps=attribution.gaps, rebuilt=attribution.rebuilt)
        if attribution.gaps:
            total = float(attribution.values[:, 0].sum()) if attribution.pid.size else 0.0
            lost = float(attribution.values[attribution.pid == -1, 0].sum()) if attribution.pid.size else 0.0
            # time whose thread is unknown (samples missing from the ring): counted in node totals only
            att["unattributed_pct"] = 100.0 * lost / total if total else None
    return Snapshot(interval_s, node_rows, proc_rows, thread_rows, unavailable, platform, att)


def attach_memory(rows: list[dict[str, Any]], nodes: list[Node], root: str = "/") -> list[dict[str, Any]]:
    """Fill ``mem_kb``/``mem_kb_by_node`` of process rows from numa_maps (for
    the rows actually shown: reading every process's numa_maps is costly)."""
    for row in rows:
        mem = read_numa_maps(root, row["pid"])
        row["mem_kb"] = None if mem is None else sum(mem.values()) // 1024
        row["mem_kb_by_node"] = None if mem is None else {str(n.id): mem.get(n.id, 0) // 1024 for n in nodes}
    return rows


# -- selection -----------------------------------------------------------------------


def select_rows(rows: list[dict[str, Any]], *, sort: str = "cpu_pct", top: int | None = None, node: int | None = None,
                nodes: list[Node] | None = None, descending: bool = True) -> list[dict[str, Any]]:
    """Filter to processes on ``node`` (that ran on its CPUs in the interval,
    or — for a memory-only node, or without the side-band — hold memory
    there), sort by any column (missing values last), keep ``top``."""
    if rows and sort not in rows[0]:
        raise PmuscopeError(f"cannot sort by {sort!r}: columns are {', '.join(k for k in rows[0] if not isinstance(rows[0][k], (list, dict)))}")
    if node is not None:
        memory_only = any(n.id == node and not n.cpus for n in (nodes or []))

        def on_node(r: dict[str, Any]) -> bool:
            cell = next((c for c in r.get("by_node", []) if c["node"] == node), None)
            if not memory_only and cell is not None and cell.get("cpu_pct") is not None:
                return cell["cpu_pct"] > 0
            mem = r.get("mem_kb_by_node")
            return bool(mem and mem.get(str(node), 0) > 0)

        rows = [r for r in rows if on_node(r)]
    present = [r for r in rows if r.get(sort) is not None]
    absent = [r for r in rows if r.get(sort) is None]
    present.sort(key=lambda r: (r[sort], -r.get("pid", 0)) if not isinstance(r[sort], str) else (r[sort], 0), reverse=descending)
    out = present + absent
    return out[:top] if top is not None else out


# -- live sampler --------------------------------------------------------------------


class NumaSampler:
    """The live NUMA view: call :meth:`refresh` once per interval.

    ``pmu=False`` leaves hardware events out (software side-band only);
    ``switches=False`` skips the per-CPU groups entirely (procfs only)."""

    def __init__(self, root: str = "/", *, pmu: bool = True, switches: bool = True, threads: bool = False,
                 memory: bool = True) -> None:
        self.root = root
        self.nodeset = NodeSet(root)
        self.identity = read_cpu_identity(root)
        self.platform: Platform = platform_for(self.identity)
        self.threads = threads
        self.memory = memory
        self.unavailable: dict[str, str] = {}
        self.collector = None
        self.uncore = None
        self._signs: dict[str, int] = {}
        if switches:
            from .collector import SwitchCollector

            try:
                self.collector = SwitchCollector(self.platform, self.nodeset.cpus, hardware=pmu).open()
                self.unavailable.update(self.collector.unavailable)
                self._signs = {f"{m}:{i}": ref.sign for i, (m, ref) in enumerate(self.collector.members)}
                self.collector.start()
            except PmuscopeError as err:
                self.collector = None
                reason = str(err).splitlines()[0]
                self.unavailable["cpu_pct_by_node"] = f"CPU-wide context-switch events do not open: {reason}"
                for m in ("clk", "ir", "rma", "lma"):
                    self.unavailable[m] = f"CPU-wide counting groups do not open: {reason}"
        else:
            self.unavailable["cpu_pct_by_node"] = "context-switch side-band disabled"
            for m in ("clk", "ir", "rma", "lma"):
                self.unavailable[m] = "per-CPU counting groups disabled"
        if pmu and switches:
            from .collector import UncoreCounters

            self.uncore = UncoreCounters(self.platform, self.nodeset.node_of_cpu(), root).open()
            self.unavailable.update({k: v for k, v in self.uncore.unavailable.items()})
            self.uncore.read()
        else:
            self.unavailable["imc_mb"] = self.unavailable["upi_mb"] = "hardware events disabled"
        first: list[ProcState] = []
        if self.collector is not None:
            time.sleep(0.005)
            # the first interval starts at the group reads, procfs read with them (not after the decode)
            self.collector.collect(after_read=lambda: first.append(read_proc_state(root, threads=threads)))
            if self._degrade_if_unscheduled():
                first.clear()  # reopened: its interval starts now
        self._state = first[0] if first else read_proc_state(root, threads=threads)

    def _degrade_if_unscheduled(self) -> bool:
        """When the hardware counters are all taken (the group never ran), the
        software side-band would stop with them: reopen it without hardware
        members and name the reason for the PMU columns."""
        from .collector import SwitchCollector

        if self.collector is None or not self.collector.never_scheduled:
            return False
        names = ", ".join(ref.name for _, ref in self.collector.members)
        reason = (f"no hardware counter was free for the group ({names}): it was never scheduled "
                  f"(time_running 0; another perf user or the NMI watchdog holds them)")
        self.collector.close()
        for m in ("clk", "ir", "rma", "lma"):
            self.unavailable[m] = reason
        self._signs = {}
        try:
            self.collector = SwitchCollector(self.platform, self.nodeset.cpus, hardware=False).open().start()
            self.collector.collect()
        except PmuscopeError as err:
            self.collector = None
            self.unavailable["cpu_pct_by_node"] = f"CPU-wide context-switch events do not open: {str(err).splitlines()[0]}"
        return True

    def refresh(self, *, memory_pids: Iterable[int] | None = None) -> Snapshot:
        """The interval since the previous refresh (or since construction)."""
        change = self.nodeset.refresh()
        if change and self.collector is not None:
            self.collector.sync_cpus(self.nodeset.cpus)
        got: list[ProcState] = []

        def read_state() -> None:
            got.append(read_proc_state(self.root, threads=self.threads))

        # procfs is read right after the counter groups, before the side-band is
        # decoded, so process CPU% (schedstat) and its per-node split cover one window
        attribution = self.collector.collect(after_read=read_state) if self.collector is not None else None
        if self._degrade_if_unscheduled():
            attribution = None  # this interval's side-band stopped with the counters
        uncore = self.uncore.read() if self.uncore is not None else None
        state = got[0] if got else read_proc_state(self.root, threads=self.threads)
        memory = None
        if self.memory:
            pids = list(state.processes) if memory_pids is None else list(memory_pids)
            memory = {pid: read_numa_maps(self.root, pid) for pid in pids}
        snap = build_snapshot(self.nodeset.nodes, self._state, state, attribution=attribution,
                              member_signs=self._signs, unavailable=self.unavailable, memory=memory,
                              uncore=uncore, platform=self.platform.name)
        if self.collector is not None:
            snap.attribution["lost_records"] = self.collector.lost
            mux = list(self.collector.multiplexed.values())
            snap.attribution["min_running_fraction"] = min(mux) if mux else None
        snap.changes = change.to_dict() if change else {}
        self._state = state
        return snap

    def close(self) -> None:
        if self.collector is not None:
            self.collector.close()
            self.collector = None
        if self.uncore is not None:
            self.uncore.close()
            self.uncore = None

    def __enter__(self) -> "NumaSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def snapshot(interval: float = 1.0, *, root: str = "/", pmu: bool = True, switches: bool = True,
             threads: bool = False, memory: bool = True) -> Snapshot:
    """Observe for ``interval`` seconds and return the node/process tables."""
    with NumaSampler(root, pmu=pmu, switches=switches, threads=threads, memory=memory) as s:
        time.sleep(interval)
        return s.refresh()
