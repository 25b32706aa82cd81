"""CPU → core/die/socket/node keys for perf stat's aggregation modes.

The facts come from :func:`pmuscope.system.read_topology` (``cpuN/topology`` and
the node directories; ``root`` may point at a fixture tree). Keys are perf's
aggregation ids: ``S0-D0-C1`` (core), ``S0-D0`` (die), ``S0`` (socket), ``N0`` (node).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _known(value: int | None) -> int:
    return value if value is not None and value >= 0 else 0


@dataclass
class CpuTopology:
    socket: dict[int, int] = field(default_factory=dict)
    die: dict[int, int] = field(default_factory=dict)
    core: dict[int, int] = field(default_factory=dict)
    node: dict[int, int] = field(default_factory=dict)

    @classmethod
    def read(cls, root: str = "/") -> "CpuTopology":
        from ..system import read_topology

        topo = cls()
        for c in read_topology(root).cpus:
            # ids the kernel reports as unknown (-1 / missing) aggregate as 0, as perf does
            topo.socket[c.cpu] = _known(c.physical_package_id)
            topo.die[c.cpu] = _known(c.die_id)
            topo.core[c.cpu] = c.core_id if (c.core_id is not None and c.core_id >= 0) else c.cpu
            topo.node[c.cpu] = c.node if c.node is not None else 0
        return topo

    def key(self, cpu: int, mode: str) -> str:
        s, d = self.socket.get(cpu, 0), self.die.get(cpu, 0)
        if mode == "core":
            return f"S{s}-D{d}-C{self.core.get(cpu, cpu)}"
        if mode == "die":
            return f"S{s}-D{d}"
        if mode == "socket":
            return f"S{s}"
        if mode == "node":
            return f"N{self.node.get(cpu, 0)}"
        raise ValueError(mode)
