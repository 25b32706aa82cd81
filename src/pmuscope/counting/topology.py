"""CPU → core/die/socket/node keys for perf stat's aggregation modes.

Read from ``/sys/devices/system/cpu/cpuN/topology/{physical_package_id,die_id,core_id}``
and ``/sys/devices/system/node/nodeN/cpulist``; ``sysfs`` may point at a fixture tree.
Keys are perf's aggregation ids: ``S0-D0-C1`` (core), ``S0-D0`` (die), ``S0``
(socket), ``N0`` (node).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _read_int(path: str, default: int = 0) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return default


@dataclass
class CpuTopology:
    socket: dict[int, int] = field(default_factory=dict)
    die: dict[int, int] = field(default_factory=dict)
    core: dict[int, int] = field(default_factory=dict)
    node: dict[int, int] = field(default_factory=dict)

    @classmethod
    def read(cls, sysfs: str = "/sys") -> "CpuTopology":
        from .counter import parse_cpu_list

        topo = cls()
        base = os.path.join(sysfs, "devices/system/cpu")
        try:
            names = os.listdir(base)
        except OSError:
            names = []
        for name in names:
            if not (name.startswith("cpu") and name[3:].isdigit()):
                continue
            cpu = int(name[3:])
            t = os.path.join(base, name, "topology")
            topo.socket[cpu] = _read_int(os.path.join(t, "physical_package_id"))
            topo.die[cpu] = _read_int(os.path.join(t, "die_id"))
            topo.core[cpu] = _read_int(os.path.join(t, "core_id"), cpu)
        nbase = os.path.join(sysfs, "devices/system/node")
        try:
            for name in os.listdir(nbase):
                if name.startswith("node") and name[4:].isdigit():
                    try:
                        with open(os.path.join(nbase, name, "cpulist")) as f:
                            for cpu in parse_cpu_list(f.read()):
                                topo.node[cpu] = int(name[4:])
                    except OSError:
                        pass
        except OSError:
            pass
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
