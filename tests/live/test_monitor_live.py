"""pmuscope monitor on the running kernel: software events always, hardware
events where a PMU exists."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from pmuscope.cli.main import main
from pmuscope.counting.context import online_cpus
from pmuscope.counting import monitor as monitor_mod
from pmuscope.counting.monitor import Monitor, monitor
from tests.conftest import requires_hardware_pmu

NCPU = len(online_cpus())
SW = "task-clock,context-switches"

#: the sampling loops: C (the default where built) and the Python reference
LOOPS = [
    "python",
    pytest.param("native", marks=pytest.mark.skipif(monitor_mod._native_loop() is None,
                                                    reason="pmuscope._native is not built (no C compiler)")),
]


def _collect(mon):
    parts = list(mon.batches())
    mon.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


@pytest.mark.parametrize("loop", LOOPS)
def test_rows_per_interval_and_cpu(loop):
    mon = monitor(SW, interval_ms=10, count=20, loop=loop)
    assert mon.loop == loop
    out = _collect(mon)
    st = mon.stats
    # 20 deadlines: one row per CPU for each, less any skipped by a late wake-up
    assert st.intervals + st.skipped == 20
    assert len(out["timestamp"]) == st.intervals * NCPU
    assert out["cpu"][:NCPU].tolist() == online_cpus()
    # a CPU cannot run more task-clock than the counter was enabled: each row's task-clock is at most its
    # time_enabled (1% for the kernel's accounting at the edges). The row's interval is measured by the clock
    # read just before the counters, so a reader held up between the two (a loaded machine) shifts
    # counts between rows; the enabled time moves with them
    assert (out["task-clock"] <= out["time_enabled"] * 1.01 + 20_000).all()
    # and the counters were enabled all along: per CPU, enabled time adds up to the rows' intervals
    assert (out["time_enabled"] > 0).all()
    for c in range(NCPU):
        assert out["time_enabled"][c::NCPU].sum() == pytest.approx(out["interval_ms"][c::NCPU].sum() * 1e6,
                                                                   rel=0.05, abs=5_000_000)


@pytest.mark.parametrize("loop", LOOPS)
def test_deadlines_do_not_drift(loop):
    mon = Monitor(SW, interval_ms=5, count=200, context=False, loop=loop)
    out = _collect(mon)
    ts = out["timestamp"][::NCPU]
    elapsed = ts - mon.start_ns
    # each reading is at or after its deadline; skipped deadlines move it by whole intervals
    skipped = np.cumsum(out["skipped"][::NCPU])
    k = np.arange(1, len(ts) + 1) * 5_000_000
    lateness = elapsed - (k + skipped * 5_000_000)
    assert len(ts) + skipped[-1] == 200
    assert (lateness >= 0).all()
    # lateness never accumulates: the last reading is as close to its deadline as a typical one
    assert lateness[-1] < 5_000_000
    assert out["interval_ms"][::NCPU].sum() == pytest.approx((ts[-1] - mon.start_ns) / 1e6)


def test_context_columns_present():
    mon = monitor(SW, interval_ms=20, count=3)
    out = _collect(mon)
    for col in ("freq_mhz", "util", "governor"):
        assert len(out[col]) == mon.stats.intervals * NCPU
    util = out["util"]
    assert np.isnan(util).all() or ((util[~np.isnan(util)] >= 0) & (util[~np.isnan(util)] <= 1)).all()


def test_rows_as_dicts():
    mon = monitor("task-clock", interval_ms=10, count=2, context=False)
    rows = list(mon)
    assert len(rows) == mon.stats.intervals * NCPU and mon.stats.intervals >= 1
    assert set(rows[0]) >= {"timestamp", "interval_ms", "cpu", "task-clock", "time_enabled", "time_running", "late"}
    assert isinstance(rows[0]["cpu"], int)


def test_to_dataframe():
    pytest.importorskip("pandas")
    mon = monitor(SW, interval_ms=10, count=5)
    df = mon.to_dataframe()
    assert len(df) == mon.stats.intervals * NCPU and mon.stats.intervals + mon.stats.skipped == 5
    assert list(df.columns[:5]) == ["timestamp", "interval_ms", "cpu", "task-clock", "context-switches"]
    assert df["timestamp"].is_monotonic_increasing


def test_per_thread_rows():
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", "5"])
    try:
        time.sleep(0.3)
        mon = Monitor("task-clock", pid=proc.pid, interval_ms=20, count=5)
        out = _collect(mon)
        tids = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        assert sorted(set(out["tid"].tolist())) == tids
        busy = out["task-clock"][out["tid"] == proc.pid]
        elapsed = out["interval_ms"][out["tid"] == proc.pid].sum() * 1e6
        # the busy loop runs whenever it gets a CPU: well over a fifth of the
        # time even on a loaded 2-CPU machine, and never more than all of it
        assert 0.2 * elapsed < busy.sum() <= 1.01 * elapsed
        assert "cpu" not in out and "freq_mhz" not in out
    finally:
        proc.kill()
        proc.wait()


def test_per_thread_counts_threads_started_later():
    code = (
        "import threading, time\n"
        "time.sleep(0.4)\n"
        "def spin():\n"
        "    end = time.monotonic() + 0.6\n"
        "    while time.monotonic() < end: pass\n"
        "t = threading.Thread(target=spin); t.start(); t.join()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.15)
        mon = Monitor("task-clock", pid=proc.pid, interval_ms=100, duration=1.2)
        tids_at_start = set(mon.entities)
        out = _collect(mon)
    finally:
        proc.kill()
        proc.wait()
    assert set(out["tid"].tolist()) <= tids_at_start
    # the spinning thread did not exist at the start; its CPU time (0.6 s of
    # spinning, less on a loaded machine) lands in its creator's row
    assert np.nansum(out["task-clock"]) > 0.15e9


@pytest.mark.parametrize("loop", LOOPS)
def test_per_thread_stops_when_process_exits(loop):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
    mon = Monitor("task-clock", pid=proc.pid, interval_ms=2, duration=30, loop=loop)
    t = time.monotonic()
    _collect(mon)
    proc.wait()
    assert time.monotonic() - t < 10


def test_hardware_events():
    requires_hardware_pmu()
    mon = monitor("cycles,instructions", interval_ms=10, count=10, context=False)
    out = _collect(mon)
    assert np.nansum(out["cycles"]) > 0 and np.nansum(out["instructions"]) > 0


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_cli_writes_file(tmp_path, fmt, capsys):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"out.{fmt}"
    rc = main(["monitor", "-e", SW, "-a", "-I", "20", "--duration", "0.2", "-o", str(path)])
    assert rc == 0
    if fmt == "csv":
        rows = list(csv.DictReader(open(path)))
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in open(path)]
    else:
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        assert t.schema.metadata[b"pmuscope.clock"] == b"CLOCK_MONOTONIC"
        rows = t.to_pylist()
    intervals = len(rows) // NCPU
    assert len(rows) == intervals * NCPU and 5 <= intervals <= 10  # 10 deadlines, a few may be skipped
    assert list(rows[0])[:5] == ["timestamp", "interval_ms", "cpu", "task-clock", "context-switches"]
    assert f"{intervals} intervals" in capsys.readouterr().err


def test_cli_bad_event_is_one_line(tmp_path, capsys):
    rc = main(["monitor", "-e", "no-such-event-xyz", "-I", "10", "--duration", "0.1", "-o", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert rc != 0
    assert "no-such-event-xyz" in err and "Traceback" not in err


def test_cli_offline_cpu(tmp_path, capsys):
    rc = main(["monitor", "-e", "task-clock", "-C", "4096", "-I", "10", "--duration", "0.1", "-o", str(tmp_path / "x.csv")])
    assert rc != 0
    assert "4096" in capsys.readouterr().err


@pytest.mark.parametrize("loop", LOOPS)
def test_stop_from_another_thread(loop):
    import threading

    mon = Monitor("task-clock", interval_ms=10, context=False, loop=loop)
    threading.Timer(0.3, mon.stop).start()
    out = _collect(mon)
    # stopped after ~30 intervals, and the last partial chunk was delivered
    assert 10 <= mon.stats.intervals <= 60
    assert len(out["timestamp"]) == mon.stats.intervals * NCPU


def test_cli_sigint_ends_cleanly(tmp_path):
    import signal

    path = tmp_path / "x.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pmuscope", "monitor", "-e", "task-clock", "-a", "-I", "10", "-o", str(path)],
        stderr=subprocess.PIPE, text=True,
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    rows = list(csv.DictReader(open(path)))
    assert len(rows) >= 10 * NCPU and len(rows) % NCPU == 0
    assert f"{len(rows)} rows" in err


def test_record_batches():
    mon = monitor(SW, interval_ms=10, count=5)
    recs = list(mon.records())
    mon.close()
    rec = np.concatenate(recs)
    assert rec.dtype.names[:5] == ("timestamp", "interval_ms", "cpu", "task-clock", "context-switches")
    assert rec.dtype["cpu"] == np.int32 and rec.dtype["late"] == np.bool_
    assert len(rec) == mon.stats.intervals * NCPU
    assert (np.diff(rec["timestamp"]) >= 0).all()
