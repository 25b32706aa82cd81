"""numatop's NUMA-locality model: nodes, per-process/per-thread CPU%, RMA,
LMA, RMA/LMA, CPI, RPI/LPI, per-node memory placement, node memory and
bandwidth — with counts charged to threads exactly at context switches
(:mod:`pmuscope.numa.attribution` says how this differs from numatop) and
platform event tables kept as data (:mod:`pmuscope.numa.platforms`).

Python API::

    from pmuscope.numa import snapshot
    snap = snapshot(1.0)            # observe one second
    snap.nodes, snap.processes      # lists of dicts (the JSON rows)
    snap.unavailable                # column -> why it cannot be measured here
"""

from .attribution import Attribution, SwitchAttributor
from .metrics import cpi, lpi, rma_lma, rpi
from .model import Node, NodeSet, TopologyChange, parse_numa_maps, read_nodes
from .platforms import Platform, generic_platform, platform_for, select_platform
from .snapshot import NumaSampler, ProcState, Snapshot, attach_memory, build_snapshot, read_proc_state, select_rows, snapshot

__all__ = [
    "Attribution",
    "Node",
    "NodeSet",
    "NumaSampler",
    "Platform",
    "ProcState",
    "Snapshot",
    "SwitchAttributor",
    "TopologyChange",
    "attach_memory",
    "build_snapshot",
    "cpi",
    "generic_platform",
    "lpi",
    "parse_numa_maps",
    "platform_for",
    "read_nodes",
    "read_proc_state",
    "rma_lma",
    "rpi",
    "select_platform",
    "select_rows",
    "snapshot",
]
