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
