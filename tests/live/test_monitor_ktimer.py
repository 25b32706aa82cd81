"""The monitor's kernel timer on the running kernel: software events on every
CPU at 1 ms; counts checked by invariants (the CPU clock, the other mode, a
child's own rusage), not by timings."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pmuscope.cli.main import main
from pmuscope.counting.context import online_cpus
from pmuscope.counting.monitor import Monitor
from tests.conftest import requires_hardware_pmu

NCPU = len(online_cpus())
EVENTS = "cpu-clock,task-clock,context-switches,page-faults"
MS = 1_000_000


def _collect(mon):
    parts = list(mon.batches())
    mon.close()
    if not parts and mon.timer == "kernel":
        # seen on a 6.18 KVM guest with idle CPUs: the hrtimer keeps expiring, no sample is written
        # (a bare `perf record -a -e cpu-clock` misses the same stretches); see counting/ktimer.py
        pytest.skip(f"this kernel's cpu-clock timer wrote no interval every CPU has a sample for ({mon.stats})")
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_rows_of_every_interval_and_cpu():
    t0 = time.monotonic()
    mon = Monitor(EVENTS, interval_ms=1, count=400, timer="kernel")
    out = _collect(mon)
    wall = (time.monotonic() - t0) * 1e9
    st = mon.stats
    assert mon.timer == "kernel" and mon.loop == "kernel"
    # every deadline is a row per CPU or a skipped one; the rows' times are the nominal ends of the intervals
    # (a CPU's timer can skip samples on some kernels: those intervals are skipped ones, not missing rows)
    assert st.intervals + st.skipped == 400 and st.intervals >= 1
    assert len(out["timestamp"]) == st.intervals * NCPU
    assert out["cpu"].reshape(-1, NCPU).tolist() == [online_cpus()] * st.intervals
    k = np.cumsum(1 + out["skipped"][::NCPU])
    assert out["timestamp"][::NCPU].tolist() == (mon.start_ns + k * MS).tolist()
    assert (out["timestamp"].reshape(-1, NCPU) == out["timestamp"][::NCPU, None]).all()
    assert out["interval_ms"][::NCPU].tolist() == pytest.approx((1 + out["skipped"][::NCPU]).tolist())
    assert k[-1] <= 400
    # each CPU's counts cover its own timer's span: cpu-clock (a per-CPU clock, busy or idle) ticks through
    # the leader's enabled time, less while a throttle stopped the group; a software group is never multiplexed
    ena = out["time_enabled"]
    assert (out["time_running"] == ena).all()
    assert (out["cpu-clock"] <= ena * 1.01 + 30_000).all()
    if not st.throttled:
        assert np.allclose(out["cpu-clock"], ena, rtol=0.01, atol=30_000)
        assert np.allclose(out["task-clock"], ena, rtol=0.01, atol=30_000)
    # the spans add up to the rows' intervals, per CPU (the last row past the end or a restarted timer aside)
    for c in range(NCPU):
        assert k[-1] * MS - 3 * MS <= ena[c::NCPU].sum() <= wall


def test_counts_agree_with_the_user_loop_and_a_childs_rusage():
    """Both modes monitor the same window while a child makes known context
    switches and page faults: each mode counts at least the child's own (its
    rusage), and the two totals agree."""
    child = (
        "import os, resource, sys, time\n"
        "time.sleep(0.4)\n"
        "r, w = os.pipe(); r2, w2 = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    for _ in range(1500): os.read(r, 1); os.write(w2, b'x')\n"
        "    os._exit(0)\n"
        "for _ in range(1500): os.write(w, b'x'); os.read(r2, 1)\n"
        "os.waitpid(pid, 0)\n"
        "b = bytearray(64 << 20)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "time.sleep(0.4)\n"
        "ru = resource.getrusage(resource.RUSAGE_SELF); rc = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(ru.ru_nvcsw + ru.ru_nivcsw + rc.ru_nvcsw + rc.ru_nivcsw, ru.ru_minflt + rc.ru_minflt)\n"
    )
    mons = {t: Monitor(EVENTS, interval_ms=1, duration=2.5, timer=t, context=False) for t in ("kernel", "user")}
    for m in mons.values():
        m.open()
    results = {}

    def run(t):
        results[t] = _collect(mons[t])

    threads = [threading.Thread(target=run, args=(t,)) for t in mons]
    for th in threads:
        th.start()
    proc = subprocess.run([sys.executable, "-S", "-c", child], capture_output=True, text=True, timeout=60)
    for th in threads:
        th.join()
    switches, faults = map(int, proc.stdout.split())
    assert mons["kernel"].timer == "kernel" and mons["user"].timer == "user"
    tot = {t: {e: np.nansum(results[t][e]) for e in ("context-switches", "page-faults")} for t in results}
    for t in tot:
        # the child's switches (1500 pipe round trips) and faults (64 MiB touched) happened inside both windows
        assert tot[t]["context-switches"] >= switches > 0, t
        assert tot[t]["page-faults"] >= faults > 0, t
    # the same events over the same 2.5 s (the windows start a few ms apart): within 10 % (+ slack)
    for e in ("context-switches", "page-faults"):
        assert tot["kernel"][e] == pytest.approx(tot["user"][e], rel=0.10, abs=2000), e


def test_cpu_clock_never_exceeds_the_cpu():
    # per CPU and per row, no more than the span. (Not task-clock: on 6.18, after the group is throttled and
    # unthrottled, a task-clock member's count jumped by ~0.4 s over a 60-90 ms row: its stop/start use the
    # context's time, which a throttle does not update.)
    mon = Monitor("cpu-clock,context-switches", interval_ms=0.5, count=1000, timer="kernel", context=False)
    out = _collect(mon)
    assert (out["cpu-clock"] <= out["time_enabled"] * 1.01 + 20_000).all()
    assert (np.diff(out["timestamp"][::NCPU]) > 0).all()
    assert mon.stats.intervals + mon.stats.skipped == 1000


def test_auto_chooses_the_kernel_timer_for_short_cpu_wide_software_runs(monkeypatch):
    from pmuscope.counting import ktimer

    mon = Monitor("task-clock", interval_ms=1, count=5, context=False)
    mon.open()
    assert mon.timer == "user" and "--timer kernel" in mon.timer_reason  # not chosen by auto (ktimer.AUTO_KERNEL)
    mon.close()
    monkeypatch.setattr(ktimer, "AUTO_KERNEL", True)
    mon = Monitor("task-clock", interval_ms=1, count=5, context=False)
    out = _collect(mon)
    assert mon.timer == "kernel" and len(out["timestamp"]) == mon.stats.intervals * NCPU
    mon = Monitor("task-clock", interval_ms=10, count=2, context=False)
    mon.open()
    assert mon.timer == "user" and "5 ms" in mon.timer_reason
    mon.close()
    mon = Monitor("task-clock", interval_ms=1, count=2, context=False, loop="python")
    mon.open()
    assert mon.timer == "user"
    mon.close()


def test_stop_ends_a_kernel_timer_run():
    mon = Monitor("task-clock", interval_ms=1, timer="kernel", context=False)
    threading.Timer(0.4, mon.stop).start()
    out = _collect(mon)
    # the run ended at the stop (rows every CPU has a sample for: fewer when a CPU's samples went missing)
    assert 1 <= mon.stats.intervals and out["timestamp"][-1] - mon.start_ns < 2_000 * MS
    assert len(out["timestamp"]) == mon.stats.intervals * NCPU


def test_context_columns_in_kernel_timer_rows():
    mon = Monitor("task-clock", interval_ms=1, count=300, timer="kernel")
    out = _collect(mon)
    for col in ("freq_mhz", "util", "governor"):
        assert len(out[col]) == mon.stats.intervals * NCPU
    util = out["util"]
    assert np.isnan(util).all() or ((util[~np.isnan(util)] >= 0) & (util[~np.isnan(util)] <= 1)).all()


def test_cli_kernel_timer(tmp_path, capsys):
    path = tmp_path / "k.csv"
    rc = main(["monitor", "-e", "task-clock,context-switches", "-a", "-I", "1", "--duration", "0.3", "--timer", "kernel",
               "-o", str(path)])
    assert rc == 0
    err = capsys.readouterr().err
    # the summary accounts for every 1 ms deadline of the 0.3 s: a row per CPU, or a skipped interval (this
    # kernel's cpu-clock timer can write no sample for a stretch: said, never silently dropped)
    m = re.search(r"(\d+) rows, (\d+) intervals of 1 ms, .*?(\d+) skipped, kernel timer", err)
    assert m, err
    n_rows, intervals, skipped = map(int, m.groups())
    assert abs(intervals + skipped - 300) <= 2, err
    with open(path) as f:
        rows = list(csv.reader(f))
    data = rows[1:]
    assert len(data) == n_rows == intervals * NCPU
    if data:
        assert rows[0][:5] == ["timestamp", "interval_ms", "cpu", "task-clock", "context-switches"]
    rc = main(["monitor", "-e", "task-clock", "-p", "1", "-I", "1", "--duration", "0.1", "--timer", "kernel",
               "-o", str(tmp_path / "p.csv")])
    assert rc != 0 and "-p" in capsys.readouterr().err


def test_hardware_members_in_a_pinned_timer_group():
    requires_hardware_pmu()
    mon = Monitor("cycles,instructions,context-switches", interval_ms=1, count=200, timer="kernel", context=False)
    out = _collect(mon)
    assert mon.timer == "kernel" and mon._slots[0].fd.attr.pinned == 1
    assert np.nansum(out["cycles"]) > 0 and np.nansum(out["instructions"]) > 0
    assert mon.stats.intervals + mon.stats.skipped == 200
