"""monitor's output survives ``kill -9``: CSV and JSON lines are flushed every
batch (0.25 s of intervals), Parquet is a whole file after every row group,
closed at least every ``--flush-interval`` seconds. The bound is what the
README promises: a killed run loses at most the last batch (CSV/JSONL) or the
last --flush-interval plus one batch (Parquet)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLUSH = 1.0  # --flush-interval for the Parquet run
SLACK = 1.0  # scheduling on a loaded 2-CPU machine


def _timestamps(path: Path, fmt: str) -> list[int]:
    if fmt == "csv":
        return [int(r["timestamp"]) for r in csv.DictReader(open(path))]
    if fmt == "jsonl":
        return [json.loads(line)["timestamp"] for line in open(path)]
    import pyarrow.parquet as pq

    return pq.read_table(path).column("timestamp").to_pylist()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_kill_9_keeps_all_but_the_last_moments(tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow.parquet")
    path = tmp_path / f"m.{fmt}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pmuscope", "monitor", "-e", "task-clock", "-a", "-I", "10", "-q",
         "--flush-interval", str(FLUSH), "-o", str(path)],
        stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not (path.exists() and path.stat().st_size > 200):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "monitor wrote nothing"
            time.sleep(0.05)
        time.sleep(3.0)
        killed_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ts = _timestamps(path, fmt)  # the file reads whole (Parquet: has a footer)
    assert len(ts) >= 100
    lost_s = (killed_at - max(ts)) / 1e9
    bound = (0.25 if fmt != "parquet" else FLUSH + 0.25) + SLACK
    assert 0 <= lost_s < bound, (lost_s, bound)
    if fmt == "csv":
        assert path.read_bytes().endswith(b"\n")  # whole rows only
