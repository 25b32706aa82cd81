"""Helpers shared by the perf.data tests: parse ``perf report --stats`` output
into record counts, and convert a file perf 6.1 cannot open (attr.size 136,
COMPRESSED2, pipe mode with zstd) into a plain file-mode perf.data with
:class:`pmuscope.perfdata.PerfDataWriter` so the real perf can count it."""

from __future__ import annotations

import re
import subprocess

from pmuscope.kernel import abi
from pmuscope.perfdata import Feature, PerfDataFile
from pmuscope.perfdata.writer import PerfDataWriter

#: perf's own names in ``--stats`` for record types whose enum name differs
PERF_STATS_NAMES = {64: "ATTR", 65: "EVENT_TYPE", 66: "TRACING_DATA", 67: "BUILD_ID", 80: "FEATURE"}
#: records that only make sense in pipe mode; dropped when converting to file mode
PIPE_ONLY = {abi.PERF_RECORD_HEADER_ATTR, abi.PERF_RECORD_HEADER_FEATURE, abi.PERF_RECORD_HEADER_TRACING_DATA}
#: compressed containers: their records are written expanded when converting
CONTAINERS = {abi.PERF_RECORD_COMPRESSED, abi.PERF_RECORD_COMPRESSED2}


def stats_name(type_: int) -> str:
    if type_ in PERF_STATS_NAMES:
        return PERF_STATS_NAMES[type_]
    try:
        return abi.PerfRecord(type_).name
    except ValueError:
        return str(type_)


def our_stats(p: PerfDataFile) -> dict[str, int]:
    return {stats_name(t): n for t, n in p.counts().items()}


def perf_stats(perf_bin: str, path: str) -> tuple[dict[str, int], dict[str, int]]:
    """(aggregated counts by record name, SAMPLE counts by event name) from ``perf report --stats``."""
    out = subprocess.run([perf_bin, "report", "--stats", "-i", path], capture_output=True, text=True, timeout=120)
    if "Aggregated stats" not in out.stdout:
        raise AssertionError(f"perf report --stats failed on {path}: {out.stdout[-500:]} {out.stderr[-500:]}")
    totals: dict[str, int] = {}
    per_event: dict[str, int] = {}
    event = None
    for line in out.stdout.splitlines():
        if line.startswith("Aggregated stats"):
            event = None
            continue
        m = re.match(r"^(\S.*) stats:$", line)
        if m:
            event = m.group(1)
            continue
        m = re.match(r"^\s+(\w+) events:\s+(\d+)", line)
        if not m:
            continue
        name, n = m.group(1), int(m.group(2))
        if event is None:
            if name != "TOTAL":
                totals[name] = n
        elif name == "SAMPLE":
            per_event[event] = n
    return totals, per_event


def convert(src: PerfDataFile, dest: str) -> dict[str, int]:
    """Rewrite ``src`` as an uncompressed file-mode perf.data (attrs at 128
    bytes); returns the record counts written, by perf's --stats names
    (what ``perf report --stats`` must then print for the new file)."""
    counts: dict[str, int] = {}
    with PerfDataWriter(dest, host=False) as w:
        for a in src.attrs:
            w.add_attr(a.attr, a.ids, a.name)
        for bit in (Feature.HOSTNAME, Feature.OSRELEASE, Feature.ARCH, Feature.NRCPUS, Feature.CMDLINE):
            if bit in src.features:
                w.features[bit] = src.features[bit]
        for type_, misc, mv, off in src.raw_records():
            if type_ in PIPE_ONLY:
                continue
            w.write(mv)
            counts[stats_name(type_)] = counts.get(stats_name(type_), 0) + 1
    return counts
