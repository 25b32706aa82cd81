"""pmuscope stat's header names the target as perf stat does: 'system wide'
for -a, 'CPU(s) LIST' for -C, even when a command bounds the run."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _header(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    for line in (r.stderr + r.stdout).splitlines():
        if "Performance counter stats for" in line:
            return line.strip()
    pytest.fail(f"no header in {cmd}: {r.stderr[-500:]}")


@pytest.mark.parametrize("target", [["-a"], ["-C", "0"], ["-a", "-C", "0"]], ids=["a", "C", "a-C"])
def test_stat_header_like_perf(perf_bin, target):
    args = ["-e", "cpu-clock", *target, "sleep", "0.1"]
    ours = _header([sys.executable, "-m", "pmuscope", "stat", *args])
    theirs = _header([perf_bin, "stat", *args])
    assert ours == theirs
