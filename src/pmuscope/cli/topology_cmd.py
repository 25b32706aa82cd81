"""`pmuscope topology`: CPUs, cores, sockets, NUMA nodes, caches and CPU identity."""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter

from ..errors import PmuscopeError
from ..system import read_topology
from ..system._fs import format_cpulist
from ..system.topology import Topology

HELP = "show CPUs, cores, sockets, NUMA nodes, caches and CPU identity (lscpu + numactl -H)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--root", default="/", help="read sysfs/procfs under this directory (a captured tree)")
    parser.add_argument("--cpuid", action="store_true",
                        help="dump the CPUID leaves as the cpuid tool does (x86: vendor, family/model/stepping, "
                             "caches/TLBs, feature flags, hypervisor leaves, raw leaves)")
    parser.add_argument("--cpu", type=int, default=None, help="with --cpuid: read this CPU (/dev/cpu/N/cpuid)")


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0 or n >= div * 10:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def render(topo: Topology) -> str:
    """The human-readable report (lscpu's header, cache table, numactl -H)."""
    ident = topo.identity
    lines: list[str] = []
    add = lambda k, v: lines.append(f"{k + ':':<22}{v}")  # noqa: E731
    add("Architecture", ident.arch)
    add("CPU", ident.description)
    if ident.midr is not None:
        m = ident.midr
        add("MIDR_EL1", f"{m.value:#010x} (implementer {m.implementer:#04x} {m.implementer_name}, part {m.part:#05x}, "
            f"variant {m.variant}, revision {m.revision})")
    else:
        add("Vendor", ident.vendor)
        if ident.family is not None:
            sig = f", CPUID.1:EAX {ident.signature:#x}" if ident.signature is not None else ""
            add("Family/model/step", f"{ident.family} / {ident.model} ({ident.model:#x}) / {ident.stepping}{sig}")
    if ident.perf_cpuid:
        add("perf CPUID", ident.perf_cpuid)
    if ident.arch.startswith(("x86", "i")):
        add("Hypervisor bit", "set (running in a VM)" if ident.hypervisor else "clear")
    cl = topo.cpu_lists
    add("CPU(s)", f"{len(cl.online)} online ({format_cpulist(cl.online) or '-'}); possible {format_cpulist(cl.possible) or '-'}, "
        f"present {format_cpulist(cl.present) or '-'}" + (f", offline {format_cpulist(cl.offline)}" if cl.offline else ""))
    add("Socket(s)", str(len(topo.sockets)))
    per_socket = {s.cores for s in topo.sockets}
    add("Core(s) per socket", "/".join(str(c) for c in sorted(per_socket)) or "?")
    add("Thread(s) per core", str(topo.threads_per_core))
    types = topo.core_types
    if len(types) > 1:
        add("Core types (PMUs)", "; ".join(f"{name} {format_cpulist(cpus)}" for name, cpus in types.items()))
    elif types:
        add("Core PMU", next(iter(types)))
    mem_only = topo.memory_only_nodes
    add("NUMA node(s)", f"{len(topo.nodes)}" + (f" ({len(mem_only)} memory-only: {','.join(str(n.id) for n in mem_only)})" if mem_only else ""))
    if topo.caches:
        lines.append("Caches:")
        groups = Counter((c.name, c.size, c.ways_of_associativity, c.coherency_line_size, len(c.shared_cpus)) for c in topo.caches)
        for (name, size, ways, line, width), count in groups.items():
            total = (size or 0) * count
            tpc = topo.threads_per_core
            share = "per CPU" if width == 1 else "per core" if width == tpc else f"shared by {width} CPUs"
            lines.append(f"  {name:<4} {_size(size):>9}  {ways or '?':>3}-way  {line or '?'} B lines  × {count:<4}"
                         f" ({share}; {_size(total)} total)")
    lines.append("Sockets:")
    for s in topo.sockets:
        lines.append(f"  socket {s.id}: cpus {format_cpulist(s.cpus)}; {s.cores} cores, {s.dies} die(s); nodes "
                     f"{','.join(str(n) for n in s.nodes) or '-'}")
    lines.append(f"available: {len(topo.nodes)} nodes ({format_cpulist(n.id for n in topo.nodes)})")
    for n in topo.nodes:
        cpus = format_cpulist(n.cpus) if n.cpus else "(none: memory-only node)"
        lines.append(f"node {n.id} cpus: {cpus}")
        if n.mem_total_kb is not None:
            lines.append(f"node {n.id} size: {n.mem_total_kb // 1024} MB")
            lines.append(f"node {n.id} free: {(n.mem_free_kb or 0) // 1024} MB")
    ids = [n.id for n in topo.nodes]
    if any(n.distances for n in topo.nodes):
        lines.append("node distances:")
        lines.append("node " + "".join(f"{i:>4}" for i in ids))
        for n in topo.nodes:
            lines.append(f"{n.id:>3}: " + "".join(f"{n.distances.get(i, '-'):>4}" for i in ids))
    return "\n".join(lines)


def run_cpuid(args: argparse.Namespace) -> int:
    from ..system import cpuid_dump

    leaves = cpuid_dump.dump(cpuid_dump.reader(args.cpu))
    if args.json:
        print(json.dumps({"decoded": cpuid_dump.decode(leaves),
                          "leaves": [vars(lf) for lf in leaves]}, indent=2))
    else:
        print(cpuid_dump.render(leaves))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.cpu is not None and not args.cpuid:
        raise PmuscopeError("--cpu: only with --cpuid (the CPU whose CPUID leaves are read)")
    if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
        raise PmuscopeError(f"--cpu {args.cpu}: not a CPU this process may run on "
                            f"({format_cpulist(os.sched_getaffinity(0))})")
    if args.cpuid:
        return run_cpuid(args)
    topo = read_topology(args.root)
    if args.json:
        print(json.dumps(topo.to_dict(), indent=2))
    else:
        print(render(topo))
    return 0
