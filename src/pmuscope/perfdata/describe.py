"""The header summary ``perf report --header-only`` prints, from a
:class:`~pmuscope.perfdata.PerfDataFile` (formats of ``tools/perf/util/header.c``
``print_*``), as a list of lines for a CLI to print."""

from __future__ import annotations

from .features import Feature, GroupDesc, NrCpus, PmuCaps, SampleTime
from .reader import PerfDataFile

#: features perf 6.1 knows (HEADER_LAST_FEATURE = 32), for "missing features"
_KNOWN = range(1, 32)


def header_lines(p: PerfDataFile) -> list[str]:
    """perf-style ``# key : value`` lines for the header and the features
    that have a one-line form; others say ``NAME info available``."""
    f = p.features
    out = []
    if not p.pipe:
        h = p.header
        out += [f"# data offset    : {h.data.offset}", f"# data size      : {h.data.size}",
                f"# feat offset    : {h.data.offset + h.data.size}"]
    for bit, label in ((Feature.HOSTNAME, "hostname"), (Feature.OSRELEASE, "os release"),
                       (Feature.VERSION, "perf version"), (Feature.ARCH, "arch")):
        if isinstance(f.get(bit), str):
            out.append(f"# {label} : {f[bit]}")
    nr = f.get(Feature.NRCPUS)
    if isinstance(nr, NrCpus):
        out += [f"# nrcpus online : {nr.nr_cpus_online}", f"# nrcpus avail : {nr.nr_cpus_available}"]
    for bit, label in ((Feature.CPUDESC, "cpudesc"), (Feature.CPUID, "cpuid")):
        if isinstance(f.get(bit), str):
            out.append(f"# {label} : {f[bit]}")
    if isinstance(f.get(Feature.TOTAL_MEM), int):
        out.append(f"# total memory : {f[Feature.TOTAL_MEM]} kB")
    if isinstance(f.get(Feature.CMDLINE), list):
        out.append("# cmdline : " + "".join(a + " " for a in f[Feature.CMDLINE]))
    for bit in (Feature.CPU_TOPOLOGY, Feature.NUMA_TOPOLOGY):
        if bit in f:
            out.append(f"# {bit.name} info available, use -I to display")
    pmus = f.get(Feature.PMU_MAPPINGS)
    if isinstance(pmus, dict):
        out.append("# pmu mappings: " + ", ".join(f"{name} = {t}" for t, name in pmus.items()))
    groups = f.get(Feature.GROUP_DESC)
    if isinstance(groups, list):
        names = p.event_names
        for g in groups:
            if isinstance(g, GroupDesc) and g.nr_members > 1:
                prefix = "" if g.name == "{anon_group}" else g.name
                out.append(f"# group: {prefix}{{{','.join(names[g.leader_idx : g.leader_idx + g.nr_members])}}}")
    if Feature.CACHE in f:
        out.append("# CACHE info available, use -I to display")
    st = f.get(Feature.SAMPLE_TIME)
    if isinstance(st, SampleTime):
        out += [f"# time of first sample : {_usec(st.first)}", f"# time of last sample : {_usec(st.last)}",
                f"# sample duration : {(st.last - st.first) / 1e6:10.3f} ms"]
    if Feature.HYBRID_TOPOLOGY in f:
        out.append("# HYBRID_TOPOLOGY info available, use -I to display")
    caps = f.get(Feature.CPU_PMU_CAPS)
    if isinstance(caps, dict):
        out.append("# cpu pmu capabilities: " + ", ".join(f"{k}={v}" for k, v in caps.items()))
    for pc in f.get(Feature.PMU_CAPS) or []:
        if isinstance(pc, PmuCaps):
            out.append(f"# {pc.pmu_name} pmu capabilities: " + ", ".join(f"{k}={v}" for k, v in pc.caps.items()))
    if not p.pipe:
        missing = [Feature(b).name for b in _KNOWN if b not in f]
        out.append("# missing features: " + "".join(n + " " for n in missing))
    return out


def _usec(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000 // 1000:06d}"
