"""The NUMA model numatop shows: nodes (CPUs, distances, memory, memory-only
nodes), per-process and per-thread scheduler and memory-placement facts read
from procfs, and how nodes/CPUs come and go between refreshes.

Every reader takes ``root`` ("/" here; a captured tree in tests) and reads
``<root>/sys/devices/system/node/...`` and ``<root>/proc/...``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..system import _fs
from ..system.topology import read_node_meminfo, read_numa_nodes  # noqa: F401  (read_node_meminfo re-exported)

#: meminfo keys numatop's node windows show (WIN11/WIN12), in kB
MEMINFO_KEYS = ("MemTotal", "MemFree", "MemUsed", "Active", "Inactive", "Dirty", "Writeback", "Mapped", "FilePages",
                "AnonPages", "Shmem", "HugePages_Total", "HugePages_Free")


@dataclass(frozen=True)
class Node:
    """One NUMA node as numatop's node windows show it."""

    id: int
    cpus: tuple[int, ...]
    distances: dict[int, int]
    meminfo: dict[str, int]

    @property
    def memory_only(self) -> bool:
        """Memory and no CPUs: a CXL Type 3 expander, PMEM or HBM node."""
        return not self.cpus and bool(self.meminfo.get("MemTotal"))

    @property
    def mem_total_kb(self) -> int | None:
        return self.meminfo.get("MemTotal")

    @property
    def mem_free_kb(self) -> int | None:
        return self.meminfo.get("MemFree")

    @property
    def mem_used_kb(self) -> int | None:
        if "MemUsed" in self.meminfo:
            return self.meminfo["MemUsed"]
        if self.mem_total_kb is None or self.mem_free_kb is None:
            return None
        return self.mem_total_kb - self.mem_free_kb

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.id,
            "cpus": _fs.format_cpulist(self.cpus),
            "memory_only": self.memory_only,
            "distances": {str(k): v for k, v in sorted(self.distances.items())},
            "meminfo_kb": dict(self.meminfo),
        }


def read_nodes(root: str = "/") -> list[Node]:
    """Every online node with its full ``meminfo``."""
    return [Node(n.id, n.cpus, dict(n.distances), read_node_meminfo(root, n.id)) for n in read_numa_nodes(root)]


@dataclass
class TopologyChange:
    """What changed between two refreshes (numatop's hotadd/hotremove)."""

    nodes_added: list[int] = field(default_factory=list)
    nodes_removed: list[int] = field(default_factory=list)
    cpus_added: list[int] = field(default_factory=list)
    cpus_removed: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.nodes_added or self.nodes_removed or self.cpus_added or self.cpus_removed)

    def to_dict(self) -> dict[str, list[int]]:
        return dict(self.__dict__)


class NodeSet:
    """The machine's nodes, re-read on :meth:`refresh`; reports hot-added and
    hot-removed nodes and CPUs so a collector can open/close per-CPU events."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self.nodes: list[Node] = read_nodes(root)

    def refresh(self) -> TopologyChange:
        old_nodes = {n.id for n in self.nodes}
        old_cpus = set(self.cpus)
        self.nodes = read_nodes(self.root)
        new_nodes = {n.id for n in self.nodes}
        new_cpus = set(self.cpus)
        return TopologyChange(sorted(new_nodes - old_nodes), sorted(old_nodes - new_nodes),
                              sorted(new_cpus - old_cpus), sorted(old_cpus - new_cpus))

    @property
    def cpus(self) -> list[int]:
        return sorted(c for n in self.nodes for c in n.cpus)

    def node_of_cpu(self) -> dict[int, int]:
        return {c: n.id for n in self.nodes for c in n.cpus}

    def node(self, nid: int) -> Node:
        for n in self.nodes:
            if n.id == nid:
                return n
        raise KeyError(f"node {nid} is not online (online: {[n.id for n in self.nodes]})")


# -- /proc/PID/numa_maps ----------------------------------------------------------


def parse_numa_maps(text: str, base_page_kb: int = 4) -> dict[int, int]:
    """Bytes of a process's memory on each node from ``/proc/PID/numa_maps``.

    Each line is one VMA: ``<addr> <policy> [file=...] [anon=N] [dirty=N]
    ... N0=<pages> N1=<pages> ... kernelpagesize_kB=<k>`` (Documentation/
    filesystems/proc.rst, ``mm/mempolicy.c:show_numa_map``). ``N<node>=`` counts
    pages of that VMA's page size, so huge-page VMAs (``kernelpagesize_kB=2048``)
    are weighted by it; a line without the field uses ``base_page_kb``."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        page_kb = base_page_kb
        per_node: list[tuple[int, int]] = []
        for f in fields[2:]:
            key, sep, value = f.partition("=")
            if not sep:
                continue
            if key == "kernelpagesize_kB":
                try:
                    page_kb = int(value)
                except ValueError:
                    pass
            elif key.startswith("N") and key[1:].isdigit():
                try:
                    per_node.append((int(key[1:]), int(value)))
                except ValueError:
                    pass
        for node, pages in per_node:
            out[node] = out.get(node, 0) + pages * page_kb * 1024
    return out


def parse_numa_maps_by_area(text: str, base_page_kb: int = 4) -> dict[int, dict[int, int]]:
    """Per-VMA placement: start address → bytes per node. numa_maps lines
    begin with the VMA's start address, the same as the first column of
    ``/proc/PID/maps``, so the two files join on it (numatop's area → node
    breakdown, WIN8, without a ``move_pages`` query per page)."""
    out: dict[int, dict[int, int]] = {}
    for line in text.splitlines():
        head = line.split(" ", 1)[0]
        try:
            start = int(head, 16)
        except ValueError:
            continue
        out[start] = parse_numa_maps(line, base_page_kb)
    return out


def read_numa_maps(root: str, pid: int) -> dict[int, int] | None:
    """Per-node bytes of ``pid`` (None when unreadable: gone, or no permission)."""
    text = _fs.read_text(root, f"proc/{pid}/numa_maps")
    if text is None:
        return None
    return parse_numa_maps(text, os.sysconf("SC_PAGE_SIZE") // 1024 if root == "/" else 4)


# -- /proc/PID scheduler facts -----------------------------------------------------


@dataclass(frozen=True)
class TaskStat:
    """Scheduler facts of one task (thread) or process at one moment."""

    pid: int
    tid: int
    comm: str
    runtime_ns: int  # schedstat field 1: time on CPU
    minflt: int
    majflt: int
    migrations: int | None  # se.nr_migrations from /proc/.../sched
    processor: int | None  # last CPU it ran on (stat field 39)
    nthreads: int = 1


def parse_stat(text: str) -> dict[str, Any]:
    """The fields of ``/proc/PID/stat`` numatop-like tools use. ``comm`` may
    contain spaces and parentheses: it spans to the *last* ``)``."""
    lpar, rpar = text.index("("), text.rindex(")")
    comm = text[lpar + 1 : rpar]
    rest = text[rpar + 2 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3]
    return {
        "pid": int(text[:lpar]),
        "comm": comm,
        "state": rest[0],
        "minflt": int(rest[10 - 3]),
        "majflt": int(rest[12 - 3]),
        "utime": int(rest[14 - 3]),
        "stime": int(rest[15 - 3]),
        "num_threads": int(rest[20 - 3]),
        "processor": int(rest[39 - 3]) if len(rest) > 39 - 3 else None,
    }


def _sched_migrations(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        if line.startswith("se.nr_migrations"):
            try:
                return int(line.split(":")[1])
            except (IndexError, ValueError):
                return None
    return None


def read_task(root: str, pid: int, tid: int | None = None) -> TaskStat | None:
    """One thread (``tid``) of ``pid``, or the whole process (``tid=None``:
    runtime and migrations summed over its threads, faults from the process
    ``stat`` which already sums them). None when the task is gone."""
    base = f"proc/{pid}" if tid is None else f"proc/{pid}/task/{tid}"
    stat_text = _fs.read_text(root, f"{base}/stat")
    if stat_text is None:
        return None
    try:
        st = parse_stat(stat_text)
    except (ValueError, IndexError):
        return None
    if tid is None:
        tids = [int(t) for t in _fs.listdir(root, f"proc/{pid}/task") if t.isdigit()] or [pid]
    else:
        tids = [tid]
    runtime = 0
    migrations: int | None = 0
    for t in tids:
        sched = _fs.read_text(root, f"proc/{pid}/task/{t}/schedstat")
        if sched is None and t == pid and tid is None:
            sched = _fs.read_text(root, f"proc/{pid}/schedstat")
        if sched:
            try:
                runtime += int(sched.split()[0])
            except (ValueError, IndexError):
                pass
        mig = _sched_migrations(_fs.read_text(root, f"proc/{pid}/task/{t}/sched"))
        migrations = None if migrations is None or mig is None else migrations + mig
    return TaskStat(pid, pid if tid is None else tid, st["comm"], runtime, st["minflt"], st["majflt"],
                    migrations, st["processor"], len(tids))


def list_pids(root: str = "/") -> list[int]:
    return [int(d) for d in _fs.listdir(root, "proc") if d.isdigit()]


def list_tids(root: str, pid: int) -> list[int]:
    return sorted(int(t) for t in _fs.listdir(root, f"proc/{pid}/task") if t.isdigit())


def read_cpu_jiffies(root: str = "/") -> dict[int, tuple[int, int]]:
    """``/proc/stat`` per CPU: (busy, total) jiffies. Busy is everything but
    idle and iowait (guest time is already inside user/nice)."""
    out: dict[int, tuple[int, int]] = {}
    for line in (_fs.read_text(root, "proc/stat") or "").splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        parts = line.split()
        try:
            cpu = int(parts[0][3:])
            vals = [int(v) for v in parts[1:9]]
        except ValueError:
            continue
        vals += [0] * (8 - len(vals))
        user, nice, system, idle, iowait, irq, softirq, steal = vals
        busy = user + nice + system + irq + softirq + steal
        out[cpu] = (busy, busy + idle + iowait)
    return out


@dataclass(frozen=True)
class MemArea:
    """One line of ``/proc/PID/maps`` (numatop's memory-area window)."""

    start: int
    end: int
    perms: str
    offset: int
    path: str

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def desc(self) -> str:
        return self.path or "[anon]"


def parse_maps(text: str) -> list[MemArea]:
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        lo, hi = parts[0].split("-")
        out.append(MemArea(int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), parts[5].strip() if len(parts) > 5 else ""))
    return out


def read_maps(root: str, pid: int) -> list[MemArea] | None:
    text = _fs.read_text(root, f"proc/{pid}/maps")
    return None if text is None else parse_maps(text)


def node_cpus(nodes: Iterable[Node]) -> dict[int, tuple[int, ...]]:
    return {n.id: n.cpus for n in nodes}
