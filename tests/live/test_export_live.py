"""pmuscope export of recordings made here — by Linux perf and by pmuscope
record — agrees with `perf report` on the same file: sample count, event count
(cpu/nanoseconds for cpu-clock) and build ids (`perf buildid-list`)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pmuscope.cli.main import main as cli_main

from ..unit.pprof_schema import decode

WORKLOAD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.4"]


def _perf_report(perf_bin: str, path: str) -> tuple[int, int]:
    out = subprocess.run([perf_bin, "report", "-i", path, "--stdio", "--no-children"], capture_output=True, text=True,
                         timeout=60).stdout
    samples = re.search(r"^# Samples: (\d+)\s+of event 'cpu-clock'", out, re.M)
    count = re.search(r"^# Event count \(approx\.\): (\d+)", out, re.M)
    assert samples and count, out[:2000]
    return int(samples.group(1)), int(count.group(1))


def _buildids(perf_bin: str, path: str) -> dict[str, str]:
    out = subprocess.run([perf_bin, "buildid-list", "-i", path], capture_output=True, text=True, timeout=60).stdout
    return {name: bid for bid, name in (line.split(None, 1) for line in out.splitlines() if " " in line)}


def _check(perf_bin: str, path: str, tmp_path) -> None:
    samples, count = _perf_report(perf_bin, path)
    out = tmp_path / "out.pb.gz"
    assert cli_main(["export", "-i", path, "-o", str(out)]) == 0
    prof = decode(out.read_bytes())
    st = prof.string_table
    assert [(st[t.type], st[t.unit]) for t in prof.sample_type] == [("samples", "count"), ("cpu", "nanoseconds")]
    assert sum(s.value[0] for s in prof.sample) == samples > 0
    assert sum(s.value[1] for s in prof.sample) == count
    ids = _buildids(perf_bin, path)
    mapped = {st[m.filename]: st[m.build_id] for m in prof.mapping if m.build_id}
    assert mapped, "no mapping carries a build id"
    for name, bid in mapped.items():
        assert ids.get(name) == bid, (name, bid, ids.get(name))


def test_export_perf_record_file(perf_bin, tmp_path):
    path = str(tmp_path / "perf.data")
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", path, "--", *WORKLOAD],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[:200]}")
    _check(perf_bin, path, tmp_path)


def test_export_pmuscope_record_file(perf_bin, tmp_path):
    path = str(tmp_path / "pmu.data")
    r = subprocess.run([sys.executable, "-m", "pmuscope", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g",
                        "-o", path, "--", *WORKLOAD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    _check(perf_bin, path, tmp_path)


def test_go_tool_pprof_reads_export(perf_bin, tmp_path):
    """The real pprof (Go's ``go tool pprof``) reads what we write: totals per
    sample type, the build ids of the mappings and the comment."""
    import os
    import shutil

    go = shutil.which("go")
    if go is None:
        pytest.skip("go tool pprof is not installed (apt-get install golang-go)")
    path = str(tmp_path / "perf.data")
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", path, "--", *WORKLOAD],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[:200]}")
    samples, count = _perf_report(perf_bin, path)
    out = tmp_path / "out.pb.gz"
    assert cli_main(["export", "-i", path, "-o", str(out)]) == 0
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"), PPROF_TMPDIR=str(tmp_path))

    def pprof(*args: str) -> str:
        res = subprocess.run([go, "tool", "pprof", *args, str(out)], capture_output=True, text=True, timeout=120,
                             env=env)
        assert res.returncode == 0, res.stderr
        return res.stdout

    top = pprof("-top", "-sample_index=samples")
    assert re.search(rf"of {samples} total", top), top[:800]
    top_ns = pprof("-top", "-sample_index=cpu", "-unit=ns")
    assert re.search(rf"of {count}ns total", top_ns), top_ns[:800]
    raw = pprof("-raw")
    assert "PeriodType: cpu nanoseconds" in raw and "samples/count cpu/nanoseconds" in raw
    ids = _buildids(perf_bin, path)
    mapping_lines = raw.split("\nMappings\n", 1)[1].splitlines()
    seen = {}
    for line in mapping_lines:
        parts = line.split()
        if len(parts) >= 4 and parts[0].rstrip(":").isdigit() and re.fullmatch(r"[0-9a-f]{40}", parts[3]):
            seen[parts[2]] = parts[3]
    assert seen and all(ids.get(name) == bid for name, bid in seen.items()), (seen, ids)
