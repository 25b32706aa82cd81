"""The header summary ``perf report --header-only`` prints, from a
:class:`~pmuscope.perfdata.PerfDataFile` (formats of ``tools/perf/util/header.c``
``print_*``), as a list of lines for a CLI to print."""

from __future__ import annotations

from .features import Compressed, Feature, GroupDesc, NrCpus, PmuCaps, SampleTime
from .reader import PerfDataFile

#: features perf 6.1 knows (HEADER_LAST_FEATURE = 32), for "missing features"
_KNOWN = range(1, 32)


def header_lines(p: PerfDataFile, *, frame: bool = False) -> list[str]:
    """perf-style ``# key : value`` lines for the header and the features
    that have a one-line form; others say ``NAME info available``. With
    ``frame``, the whole of ``perf report --header-only``: between ``# ========``
    lines, with the file's time and the header version first."""
    f = p.features
    out = []
    if frame:
        out.append("# ========")
        mtime = _mtime(p)
        if mtime is not None:
            import time

            out.append(f"# captured on    : {time.ctime(mtime)}")
        out.append("# header version : 1")
        if p.pipe:  # perf prints the pipe header first; the features come later, as records
            out += ["# data offset    : 0", "# data size      : 0", "# feat offset    : 0", "# ========", "#"]
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
    descs = f.get(Feature.EVENT_DESC)
    if isinstance(descs, list):
        from ..events.attr_text import attr_lines

        for d in descs:  # print_event_desc: "name = N, " then ", id = { ... }" and the attr's fields
            ids = f", id = {{ {', '.join(str(i) for i in d.ids)} }}" if d.ids else ""
            out.append(f"# event : name = {d.name}, {ids}" + "".join(f", {k} = {v}" for k, v in attr_lines(d.attr)))
    for bit in (Feature.CPU_TOPOLOGY, Feature.NUMA_TOPOLOGY):
        if bit in f:
            out.append(f"# {bit.name} info available, use -I to display")
    if Feature.BRANCH_STACK in f:
        out.append("# contains samples with branch stack")
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
    if Feature.AUXTRACE in f:
        out.append("# contains AUX area data (e.g. instruction trace)")
    if Feature.STAT in f:
        out.append("# contains stat data")
    if Feature.CACHE in f:
        out.append("# CACHE info available, use -I to display")
    st = f.get(Feature.SAMPLE_TIME)
    if isinstance(st, SampleTime):
        out += [f"# time of first sample : {_usec(st.first)}", f"# time of last sample : {_usec(st.last)}",
                f"# sample duration : {(st.last - st.first) / 1e6:10.3f} ms"]
    if Feature.MEM_TOPOLOGY in f:
        out.append("# MEM_TOPOLOGY info available, use -I to display")
    if isinstance(f.get(Feature.CLOCKID), int):
        out.append(f"# clockid frequency: {f[Feature.CLOCKID] // 1_000_000} MHz")
    comp = f.get(Feature.COMPRESSED)
    if isinstance(comp, Compressed):
        kind = "Zstd" if comp.type == 1 else "Unknown"
        out.append(f"# compressed : {kind}, level = {comp.level}, ratio = {comp.ratio}")
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
    if frame and not p.pipe:
        out += ["# ========", "#"]
    return out


def _mtime(p: PerfDataFile) -> float | None:
    """The recording's modification time (perf's ``captured on``), None for a pipe."""
    import os
    import stat as _stat

    f = getattr(p, "_file", None)
    try:
        if f is not None:
            return os.fstat(f.fileno()).st_mtime
        if p.source == "<stdin>":  # perf: fstat of its input, a pipe too
            import sys

            return os.fstat(sys.stdin.fileno()).st_mtime
        st = os.stat(p.source)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return st.st_mtime if _stat.S_ISREG(st.st_mode) else None


def _usec(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000 // 1000:06d}"


#: perf_event__names (tools/perf/util/event.c): what perf report --stats calls each record type
_RECORD_NAMES = {
    1: "MMAP", 2: "LOST", 3: "COMM", 4: "EXIT", 5: "THROTTLE", 6: "UNTHROTTLE", 7: "FORK", 8: "READ", 9: "SAMPLE",
    10: "MMAP2", 11: "AUX", 12: "ITRACE_START", 13: "LOST_SAMPLES", 14: "SWITCH", 15: "SWITCH_CPU_WIDE",
    16: "NAMESPACES", 17: "KSYMBOL", 18: "BPF_EVENT", 19: "CGROUP", 20: "TEXT_POKE", 21: "AUX_OUTPUT_HW_ID",
    64: "ATTR", 65: "EVENT_TYPE", 66: "TRACING_DATA", 67: "BUILD_ID", 68: "FINISHED_ROUND", 69: "ID_INDEX",
    70: "AUXTRACE_INFO", 71: "AUXTRACE", 72: "AUXTRACE_ERROR", 73: "THREAD_MAP", 74: "CPU_MAP",
    75: "STAT_CONFIG", 76: "STAT", 77: "STAT_ROUND", 78: "EVENT_UPDATE", 79: "TIME_CONV", 80: "FEATURE",
    81: "COMPRESSED", 82: "FINISHED_INIT", 83: "COMPRESSED2",
}


def stats_lines(p: PerfDataFile) -> list[str]:
    """``perf report --stats``: the records of each type (and their share), then
    each event's SAMPLE and LOST_SAMPLES records (perf_session__fprintf_nr_events,
    evlist__fprintf_nr_events; types without records left out, as perf's default)."""
    counts, by_attr = p.record_counts(per_attr=(9, 13))  # SAMPLE, LOST_SAMPLES
    samples, lost = by_attr[9], by_attr[13]
    total = sum(counts.values())
    note = (" (excludes AUX area (e.g. instruction trace) decoded / synthesized events)"
            if Feature.AUXTRACE in p.features else "")
    out = ["", f"Aggregated stats:{note}", f"{'TOTAL':>16} events: {total:10d}"]
    for t in sorted(counts):
        name = _RECORD_NAMES.get(t)
        if name is not None:
            out.append(f"{name:>16} events: {counts[t]:10d}  ({100.0 * counts[t] / total:4.1f}%)")
    for name, n, nl in zip(p.event_names, samples, lost):
        if n or nl:
            out.append(f"{name} stats:")
            if n:
                out.append(f"{'SAMPLE':>16} events: {n:10d}")
            if nl:
                out.append(f"{'LOST_SAMPLES':>16} events: {nl:10d}")
    return out
