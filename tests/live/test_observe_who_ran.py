"""`observe -C CPU --switches` says who ran on the CPU while it was observed:
threads, runs and time, as a table (text) and a list (--json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PM = [sys.executable, "-m", "pmuscope"]


def _runtime_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def test_who_ran_names_a_pinned_busy_process():
    cpu = sorted(os.sched_getaffinity(0))[-1]
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        ran0 = _runtime_ns(hog.pid)
        r = subprocess.run(PM + ["observe", "-C", str(cpu), "--switches", "--duration", "0.6", "--rate", "500", "--json"],
                           capture_output=True, text=True, timeout=60)
        ran = _runtime_ns(hog.pid) - ran0
        text = subprocess.run(PM + ["observe", "-C", str(cpu), "--switches", "--duration", "0.3", "--rate", "500"],
                              capture_output=True, text=True, timeout=60)
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["who_ran"]
    assert rows and all(row["cpu"] == cpu for row in rows)
    mine = [row for row in rows if row["pid"] == hog.pid]
    # it ran in the window (its share depends on what else the machine runs), and no longer than the
    # kernel's own accounting of its CPU time over the whole command
    assert mine and mine[0]["pct"] > 0 and mine[0]["runs"] >= 1, rows[:5]
    assert sum(row["time_ns"] for row in mine) <= ran * 1.02 + 2_000_000, (mine, ran)
    assert sum(row["pct"] for row in rows) <= 100.5
    assert [row["time_ns"] for row in rows] == sorted((row["time_ns"] for row in rows), reverse=True)
    assert text.returncode == 0, text.stderr
    assert "who ran where" in text.stdout and f"{hog.pid:>8}" in text.stdout
