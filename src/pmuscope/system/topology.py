"""CPUs, cores, sockets, NUMA nodes and caches, read from sysfs under a root.

Every reader takes ``root`` ("/" for this machine; a captured tree in tests)
and reads ``<root>/sys/devices/system/{cpu,node}`` (see the kernel's
Documentation/ABI/stable/sysfs-devices-system-cpu and
Documentation/admin-guide/cputopology.rst).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _fs
from .identity import CpuIdentity, read_cpu_identity

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"


@dataclass(frozen=True)
class CpuList:
    """The CPU sets the kernel exports: online, possible, present, offline."""

    online: tuple[int, ...]
    possible: tuple[int, ...]
    present: tuple[int, ...]
    offline: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {k: list(getattr(self, k)) for k in ("online", "possible", "present", "offline")}


def read_cpu_lists(root: str = "/") -> CpuList:
    """``online``/``possible``/``present``/``offline`` under ``<root>/sys/devices/system/cpu``.
    Without those files (an old tree), the cpuN directories are taken as online."""
    get = lambda name: tuple(_fs.parse_cpulist(_fs.read_text(root, f"{CPU_DIR}/{name}")))  # noqa: E731
    online = get("online")
    if not online:
        online = tuple(_fs.numbered(_fs.listdir(root, CPU_DIR), "cpu"))
    return CpuList(online=online, possible=get("possible") or online, present=get("present") or online, offline=get("offline"))


def read_online_cpus(root: str = "/") -> list[int]:
    """The online CPU numbers."""
    return list(read_cpu_lists(root).online)


@dataclass(frozen=True)
class CpuTopology:
    """One logical CPU's place (``cpuN/topology/*``). Ids the kernel reports as
    unknown (``-1``, or ``65535`` for x86's cluster_id) are kept as read."""

    cpu: int
    online: bool
    core_id: int | None
    physical_package_id: int | None
    die_id: int | None
    cluster_id: int | None
    thread_siblings: tuple[int, ...]
    core_siblings: tuple[int, ...]
    node: int | None
    #: the core PMU counting on this CPU: ``cpu`` on most machines,
    #: ``cpu_core``/``cpu_atom`` on hybrid Intel, ``armv8_pmuv3_N`` or
    #: ``armv8_cortex_a76`` on Arm (one per core type on big.LITTLE)
    pmu: str | None = None
    #: relative compute capacity (Arm ``cpu_capacity``, 1024 = the biggest core)
    cpu_capacity: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["thread_siblings"] = list(self.thread_siblings)
        d["core_siblings"] = list(self.core_siblings)
        return d


def _siblings(root: str, cpu: int, name: str) -> tuple[int, ...]:
    text = _fs.read_text(root, f"{CPU_DIR}/cpu{cpu}/topology/{name}_list")
    if text is not None:
        return tuple(_fs.parse_cpulist(text))
    return tuple(_fs.parse_cpumask(_fs.read_text(root, f"{CPU_DIR}/cpu{cpu}/topology/{name}")))


#: core PMU names (x86/powerpc "cpu", hybrid Intel, s390) and Arm/RISC-V prefixes
CORE_PMU_NAMES = ("cpu", "cpu_core", "cpu_atom", "cpum_cf")
CORE_PMU_PREFIXES = ("armv8", "armv9", "armv7", "arm_cortex", "riscv_pmu")


def read_core_pmu_cpus(root: str = "/") -> dict[str, tuple[int, ...] | None]:
    """Core PMU name → the CPUs it covers (its sysfs ``cpus`` file; None when
    it has none, i.e. it covers every CPU)."""
    base = "sys/bus/event_source/devices"
    out: dict[str, tuple[int, ...] | None] = {}
    for name in _fs.listdir(root, base):
        if name in CORE_PMU_NAMES or name.startswith(CORE_PMU_PREFIXES):
            text = _fs.read_text(root, f"{base}/{name}/cpus")
            out[name] = None if text is None else tuple(_fs.parse_cpulist(text))
    return out


def read_cpu_topology(
    root: str = "/", cpu: int = 0, online: bool = True, node: int | None = None, pmu: str | None = None
) -> CpuTopology:
    """``cpuN/topology`` of one CPU."""
    base = f"{CPU_DIR}/cpu{cpu}/topology"
    return CpuTopology(
        cpu=cpu,
        online=online,
        core_id=_fs.read_int(root, f"{base}/core_id"),
        physical_package_id=_fs.read_int(root, f"{base}/physical_package_id"),
        die_id=_fs.read_int(root, f"{base}/die_id"),
        cluster_id=_fs.read_int(root, f"{base}/cluster_id"),
        thread_siblings=_siblings(root, cpu, "thread_siblings") or (cpu,),
        core_siblings=_siblings(root, cpu, "core_siblings"),
        node=node,
        pmu=pmu,
        cpu_capacity=_fs.read_int(root, f"{CPU_DIR}/cpu{cpu}/cpu_capacity"),
    )


@dataclass(frozen=True)
class Cache:
    """One cache instance (``cpuN/cache/indexM``), shared by ``shared_cpus``."""

    level: int
    type: str  # Data, Instruction, Unified
    size: int | None  # bytes
    coherency_line_size: int | None
    ways_of_associativity: int | None
    number_of_sets: int | None
    shared_cpus: tuple[int, ...]
    id: int | None = None

    @property
    def name(self) -> str:
        """``L1d``, ``L1i``, ``L2``, ``L3`` (lscpu's names)."""
        suffix = {"Data": "d", "Instruction": "i"}.get(self.type, "")
        return f"L{self.level}{suffix}"

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["shared_cpus"] = list(self.shared_cpus)
        d["name"] = self.name
        return d


def read_caches(root: str = "/", cpus: list[int] | None = None) -> list[Cache]:
    """Every distinct cache instance of the given (default: online) CPUs,
    ordered by level, type, then first CPU."""
    if cpus is None:
        cpus = read_online_cpus(root)
    seen: dict[tuple, Cache] = {}
    for cpu in cpus:
        base = f"{CPU_DIR}/cpu{cpu}/cache"
        for idx in _fs.numbered(_fs.listdir(root, base), "index"):
            d = f"{base}/index{idx}"
            level = _fs.read_int(root, f"{d}/level")
            ctype = _fs.read_text(root, f"{d}/type") or "Unknown"
            if level is None:
                continue
            shared_text = _fs.read_text(root, f"{d}/shared_cpu_list")
            shared = tuple(_fs.parse_cpulist(shared_text)) if shared_text is not None else tuple(
                _fs.parse_cpumask(_fs.read_text(root, f"{d}/shared_cpu_map"))
            )
            shared = shared or (cpu,)
            key = (level, ctype, shared)
            if key in seen:
                continue
            seen[key] = Cache(
                level=level,
                type=ctype,
                size=_fs.parse_size(_fs.read_text(root, f"{d}/size")),
                coherency_line_size=_fs.read_int(root, f"{d}/coherency_line_size"),
                ways_of_associativity=_fs.read_int(root, f"{d}/ways_of_associativity"),
                number_of_sets=_fs.read_int(root, f"{d}/number_of_sets"),
                shared_cpus=shared,
                id=_fs.read_int(root, f"{d}/id"),
            )
    order = {"Data": 0, "Instruction": 1, "Unified": 2}
    return sorted(seen.values(), key=lambda c: (c.level, order.get(c.type, 3), c.shared_cpus[0]))


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs (empty for a memory-only node, e.g. CXL or
    PMEM), memory from ``nodeN/meminfo`` and the SLIT ``distance`` row."""

    id: int
    cpus: tuple[int, ...]
    mem_total_kb: int | None
    mem_free_kb: int | None
    distances: dict[int, int]

    @property
    def memory_only(self) -> bool:
        """A node with memory but no CPUs (CXL Type 3 expander, PMEM, HBM)."""
        return not self.cpus and bool(self.mem_total_kb)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cpus": list(self.cpus),
            "cpulist": _fs.format_cpulist(self.cpus),
            "mem_total_kb": self.mem_total_kb,
            "mem_free_kb": self.mem_free_kb,
            "memory_only": self.memory_only,
            "distances": {str(k): v for k, v in self.distances.items()},
        }


def read_node_meminfo(root: str, node: int) -> dict[str, int]:
    """``nodeN/meminfo`` (``Node 0 MemTotal:  4155608 kB``) as key → value (kB;
    HugePages_* are page counts, as the kernel prints them)."""
    out: dict[str, int] = {}
    for line in (_fs.read_text(root, f"{NODE_DIR}/node{node}/meminfo") or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "Node" and parts[2].endswith(":"):
            try:
                out[parts[2][:-1]] = int(parts[3])
            except ValueError:
                pass
    return out


def read_numa_nodes(root: str = "/") -> list[NumaNode]:
    """Every online NUMA node (``<root>/sys/devices/system/node``). A kernel
    without NUMA support has no such directory: one node 0 holding every
    online CPU is returned, as numactl does."""
    ids = _fs.parse_cpulist(_fs.read_text(root, f"{NODE_DIR}/online")) or _fs.numbered(_fs.listdir(root, NODE_DIR), "node")
    if not ids:
        return [NumaNode(0, tuple(read_online_cpus(root)), None, None, {0: 10})]
    nodes = []
    for n in ids:
        cpus = _fs.read_text(root, f"{NODE_DIR}/node{n}/cpulist")
        if cpus is None:
            cpus_t = tuple(_fs.parse_cpumask(_fs.read_text(root, f"{NODE_DIR}/node{n}/cpumap")))
        else:
            cpus_t = tuple(_fs.parse_cpulist(cpus))
        dist_row = (_fs.read_text(root, f"{NODE_DIR}/node{n}/distance") or "").split()
        distances = {ids[i]: int(v) for i, v in enumerate(dist_row) if i < len(ids) and v.isdigit()}
        mem = read_node_meminfo(root, n)
        nodes.append(NumaNode(n, cpus_t, mem.get("MemTotal"), mem.get("MemFree"), distances))
    return nodes


@dataclass(frozen=True)
class Core:
    """A physical core: (package, die, core_id) and its hardware threads."""

    package: int | None
    die: int | None
    core_id: int | None
    cpus: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "die": self.die, "core_id": self.core_id, "cpus": list(self.cpus)}


@dataclass(frozen=True)
class Socket:
    """A physical package."""

    id: int | None
    cpus: tuple[int, ...]
    cores: int
    dies: int
    nodes: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cpus": list(self.cpus), "cores": self.cores, "dies": self.dies, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class Topology:
    """The whole machine: CPU sets, per-CPU placement, cores, sockets, NUMA
    nodes, caches and CPU identity. Build it with :func:`read_topology`."""

    cpu_lists: CpuList
    cpus: tuple[CpuTopology, ...]
    cores: tuple[Core, ...]
    sockets: tuple[Socket, ...]
    nodes: tuple[NumaNode, ...]
    caches: tuple[Cache, ...]
    identity: CpuIdentity
    root: str = field(default="/", compare=False)

    @property
    def online(self) -> tuple[int, ...]:
        return self.cpu_lists.online

    @property
    def threads_per_core(self) -> int:
        return max((len(c.cpus) for c in self.cores), default=1)

    @property
    def core_types(self) -> dict[str, tuple[int, ...]]:
        """Core PMU → its CPUs; more than one entry on hybrid/big.LITTLE machines."""
        out: dict[str, list[int]] = {}
        for c in self.cpus:
            if c.pmu is not None:
                out.setdefault(c.pmu, []).append(c.cpu)
        return {k: tuple(v) for k, v in out.items()}

    @property
    def memory_only_nodes(self) -> tuple[NumaNode, ...]:
        return tuple(n for n in self.nodes if n.memory_only)

    def cpu(self, n: int) -> CpuTopology:
        for c in self.cpus:
            if c.cpu == n:
                return c
        raise KeyError(f"cpu{n} is not online here (online: {_fs.format_cpulist(self.online)})")

    def node_of(self, cpu: int) -> int | None:
        return self.cpu(cpu).node

    def socket_of(self, cpu: int) -> int | None:
        return self.cpu(cpu).physical_package_id

    def core_of(self, cpu: int) -> Core:
        for core in self.cores:
            if cpu in core.cpus:
                return core
        raise KeyError(f"cpu{cpu} is not online here")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpus": self.cpu_lists.to_dict(),
            "cpu_count": len(self.online),
            "core_count": len(self.cores),
            "socket_count": len(self.sockets),
            "node_count": len(self.nodes),
            "threads_per_core": self.threads_per_core,
            "core_types": {k: list(v) for k, v in self.core_types.items()},
            "identity": self.identity.to_dict(),
            "sockets": [s.to_dict() for s in self.sockets],
            "nodes": [n.to_dict() for n in self.nodes],
            "caches": [c.to_dict() for c in self.caches],
            "cores": [c.to_dict() for c in self.cores],
            "topology": [c.to_dict() for c in self.cpus],
        }


def read_topology(root: str = "/") -> Topology:
    """Read everything under ``root`` into a :class:`Topology`.

    Raises :class:`~pmuscope.errors.PmuscopeError` when ``root`` holds no CPU
    information at all (not a sysfs tree)."""
    lists = read_cpu_lists(root)
    if not lists.online:
        from ..errors import PmuscopeError

        raise PmuscopeError(
            f"no CPUs found under {_fs.path(root, CPU_DIR)}: is {root!r} the root of a sysfs/procfs tree "
            f"(with sys/devices/system/cpu/online or cpuN directories)?",
            root=root,
        )
    nodes = read_numa_nodes(root)
    node_of = {cpu: n.id for n in nodes for cpu in n.cpus}
    pmu_of: dict[int, str] = {}
    for name, covered in sorted(read_core_pmu_cpus(root).items()):
        for c in covered if covered is not None else lists.online:
            pmu_of.setdefault(c, name)
    cpus = tuple(read_cpu_topology(root, c, True, node_of.get(c), pmu_of.get(c)) for c in lists.online)
    by_core: dict[tuple, list[int]] = {}
    for c in cpus:
        key = (c.physical_package_id, c.die_id, c.core_id) if c.core_id is not None else (None, None, c.cpu)
        by_core.setdefault(key, []).append(c.cpu)
    cores = tuple(
        Core(pkg, die, core if pkg is not None or die is not None else None, tuple(sorted(members)))
        for (pkg, die, core), members in sorted(by_core.items(), key=lambda kv: min(kv[1]))
    )
    by_pkg: dict[int | None, list[CpuTopology]] = {}
    for c in cpus:
        by_pkg.setdefault(c.physical_package_id, []).append(c)
    sockets = tuple(
        Socket(
            id=pkg,
            cpus=tuple(c.cpu for c in members),
            cores=sum(1 for core in cores if core.package == pkg),
            dies=len({c.die_id for c in members}),
            nodes=tuple(sorted({c.node for c in members if c.node is not None})),
        )
        for pkg, members in sorted(by_pkg.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    )
    return Topology(
        cpu_lists=lists,
        cpus=cpus,
        cores=cores,
        sockets=sockets,
        nodes=tuple(nodes),
        caches=tuple(read_caches(root, list(lists.online))),
        identity=read_cpu_identity(root),
        root=root,
    )
