"""pmuscope monitor without -e counts perf stat's default events (those that
open here), and --interval-count stops after N intervals."""

from __future__ import annotations

import csv
import io
import subprocess
import sys

from tests.conftest import hardware_pmu_reason


def test_monitor_default_events_and_interval_count():
    r = subprocess.run([sys.executable, "-m", "pmuscope", "monitor", "-I", "50", "--interval-count", "4", "-o", "-",
                        "--no-context", "-C", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    # one CPU, four interval deadlines: a row that was late past a whole deadline spans it (the deadline
    # is counted, not given a row of its own), so a loaded machine may print fewer rows covering the same time
    spans = [float(row["interval_ms"]) for row in rows]
    assert 1 <= len(rows) <= 4 and sum(spans) >= 4 * 50 * 0.98, spans
    assert len(rows) == 4 or max(spans) > 1.5 * 50, spans
    cols = set(rows[0])
    assert {"cpu-clock", "context-switches", "cpu-migrations", "page-faults"} <= cols
    assert ("cycles" in cols) == (hardware_pmu_reason() is None)
    assert all(int(row["cpu-clock"]) > 0 for row in rows)


def test_monitor_pid_defaults_use_task_clock():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        r = subprocess.run([sys.executable, "-m", "pmuscope", "monitor", "-I", "50", "--interval-count", "2", "-o", "-",
                            "--no-context", "-p", str(proc.pid)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        header = r.stdout.splitlines()[0].split(",")
        assert "task-clock" in header and "cpu-clock" not in header
    finally:
        proc.kill()
        proc.wait()
