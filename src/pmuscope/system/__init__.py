"""The machine: CPUs, cores, sockets, NUMA nodes, caches, CPU identity, and
what perf_event_open is allowed to do here (:mod:`pmuscope.doctor`).

Every reader takes ``root`` ("/" by default) and reads ``<root>/sys/...`` and
``<root>/proc/...``, so a captured tree can stand in for a machine.
"""

from pmuscope._lazy import lazy_exports

#: imported on first use (PEP 562): a cpulist parser must not cost the
#: topology and CPU-identity readers
_LAZY = {
    **{name: "._fs" for name in ("cpu_list_arg", "format_cpulist", "online_cpus", "parse_cpulist", "parse_cpumask")},
    **{name: ".identity" for name in ("CpuIdentity", "Midr", "perf_cpuid_matches", "read_cpu_identity", "read_midr")},
    **{name: ".topology" for name in ("Cache", "Core", "CpuList", "CpuTopology", "NumaNode", "Socket", "Topology",
                                      "read_caches", "read_cpu_lists", "read_cpu_topology", "read_numa_nodes",
                                      "read_online_cpus", "read_topology")},
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "Cache",
    "Core",
    "CpuIdentity",
    "CpuList",
    "CpuTopology",
    "Midr",
    "NumaNode",
    "Socket",
    "Topology",
    "cpu_list_arg",
    "format_cpulist",
    "online_cpus",
    "parse_cpulist",
    "parse_cpumask",
    "perf_cpuid_matches",
    "read_caches",
    "read_cpu_identity",
    "read_cpu_lists",
    "read_cpu_topology",
    "read_midr",
    "read_numa_nodes",
    "read_online_cpus",
    "read_topology",
]
