"""Lost samples are counted once, as perf reports them ("Total Lost Samples"),
on a real lossy recording (a one-page ring, system-wide, 8 KiB stack copies)."""

import json
import re
import subprocess
import sys

import pytest


def test_lost_samples_equal_perf_report(perf_bin, tmp_path):
    out = tmp_path / "lossy.data"
    # one data page per CPU and 8 KiB user-stack copies per sample: most samples cannot fit at all
    rec = subprocess.run([perf_bin, "record", "-q", "-m", "1", "-e", "cpu-clock", "-c", "100000", "--call-graph", "dwarf,8192",
                          "-a", "-o", str(out), "--", sys.executable, "-m", "pmuscope.workloads", "busy", "0.3"],
                         capture_output=True, text=True, timeout=120)
    if rec.returncode != 0:
        pytest.skip(f"perf record -a failed here: {rec.stderr.strip()[:200]}")
    rep = subprocess.run([perf_bin, "report", "-i", str(out), "--stdio"], capture_output=True, text=True, timeout=120)
    m = re.search(r"# Total Lost Samples: (\d+)", rep.stdout)
    assert m, rep.stdout[:500]
    perf_lost = int(m.group(1))
    if perf_lost == 0:
        pytest.skip("this run happened to lose nothing (the ring kept up)")
    ours = subprocess.run([sys.executable, "-m", "pmuscope", "report", "-i", str(out), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    assert json.loads(ours.stdout)["lost"] == perf_lost
