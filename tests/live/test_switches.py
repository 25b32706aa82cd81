"""Who-runs-where from PERF_RECORD_SWITCH_CPU_WIDE: two threads pinned to one
CPU alternate; the tracker must name the thread that ran at each moment each
thread saw itself running."""

import os
import threading
import time

import numpy as np
import pytest

from pmuscope.errors import PermissionDeniedError
from pmuscope.observe.switches import SwitchTracker

MONO = time.CLOCK_MONOTONIC


def test_two_threads_alternating_on_one_cpu():
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1]
    try:
        tracker = SwitchTracker([cpu]).start()
    except PermissionDeniedError as err:
        pytest.skip(f"CPU-wide context-switch records need privileges: {err}")
    seen: dict[int, list[int]] = {}
    turn = [threading.Event(), threading.Event()]
    rounds = 20

    def worker(me):
        os.sched_setaffinity(0, {cpu})
        tid = threading.get_native_id()
        stamps = seen.setdefault(tid, [])
        for _ in range(rounds):
            turn[me].wait()
            turn[me].clear()
            end = time.perf_counter() + 0.002  # run ~2 ms, noting the time as we go
            while time.perf_counter() < end:
                stamps.append(time.clock_gettime_ns(MONO))
            turn[1 - me].set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    turn[0].set()
    for t in threads:
        t.join()
    tracker.stop()
    assert tracker.records > 2 * rounds
    assert tracker.lost == 0
    tids = list(seen)
    assert len(tids) == 2
    for tid in tids:
        stamps = np.array(seen[tid][::25], dtype=np.int64)
        got = tracker.attribute(cpu, stamps)
        # every moment a thread saw itself running, the map names that thread
        assert np.all(got[:, 1] == tid), (tid, np.unique(got[:, 1], return_counts=True))
        assert np.all(got[:, 0] == os.getpid())
        pid_tid = tracker.running_on(cpu, int(stamps[len(stamps) // 2]))
        assert pid_tid == (os.getpid(), tid)
    tl = tracker.timeline()
    mine = tl[np.isin(tl["tid"], tids)]
    # the two threads alternate: at least one segment per round each
    assert np.count_nonzero(mine["tid"] == tids[0]) >= rounds
    assert np.count_nonzero(mine["tid"] == tids[1]) >= rounds
    assert np.all(tl["end"] >= tl["start"])


def test_unknown_before_tracking_and_untracked_cpu():
    cpu = sorted(os.sched_getaffinity(0))[0]
    try:
        tr = SwitchTracker([cpu], background=False).start()
    except PermissionDeniedError as err:
        pytest.skip(f"CPU-wide context-switch records need privileges: {err}")
    time.sleep(0.02)
    tr.stop()
    assert tr.running_on(cpu, 0) is None  # long before tracking started
    with pytest.raises(Exception, match="not tracked"):
        tr.running_on(cpu + 1000, time.clock_gettime_ns(MONO))


def test_observer_attributes_cpu_samples_to_threads(tmp_path):
    import subprocess
    import sys

    from pmuscope.events.spec import EventSpec
    from pmuscope.kernel import abi, perf_event_attr
    from pmuscope.observe import Observer

    cpu = sorted(os.sched_getaffinity(0))[-1]
    busy = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-m", "pmuscope.workloads", "busy", "3"])
    try:
        time.sleep(0.3)
        spec = EventSpec("cpu-clock", perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.CPU_CLOCK))
        try:
            res = Observer([spec], cpu=cpu, rate_hz=500, duration=0.5, track_switches=True, loop="python").run()
        except PermissionDeniedError as err:
            pytest.skip(f"CPU-wide events need privileges: {err}")
    finally:
        busy.kill()
        busy.wait()
    cols = res.deltas()
    assert {"pid", "tid", "switches"} <= set(cols)
    # the pinned busy process is among the threads the CPU ran (others share it on a
    # loaded machine), and every attribution agrees with the tracker's own answer
    assert busy.pid in set(cols["pid"].tolist())
    tracker = res.switches
    for i in range(0, len(cols["tid"]), 50):
        who = tracker.running_on(cpu, int(res.stamps[i + 1, 0]))
        assert who is not None and who[1] == cols["tid"][i]
    assert np.all(cols["switches"] >= 0)
    s = res.summary()
    assert s["switch_records"] > 0 and s["switch_lost"] == 0


def _ran_ns(pid: int) -> int:
    """The CPU time ``pid`` has run, in ns (the scheduler's sum_exec_runtime)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def test_a_cpu_hog_that_never_switches_is_named_from_the_start():
    """Alone on its CPU, a busy loop may not be preempted for seconds: without a
    switch record its CPU's owner would stay unknown. The tracker makes one
    switch per CPU when it starts, so the hog is named at once."""
    import subprocess
    import sys

    cpu = sorted(os.sched_getaffinity(0))[-1]
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        try:
            ran0 = _ran_ns(hog.pid)
            tr = SwitchTracker([cpu]).start()
        except PermissionDeniedError as err:
            pytest.skip(f"CPU-wide context-switch records need privileges: {err}")
        time.sleep(0.3)
        now = time.clock_gettime_ns(MONO)
        tr.stop()
        ran = _ran_ns(hog.pid) - ran0
        who = tr.running_on(cpu, now - 50_000_000)
    finally:
        hog.kill()
        hog.wait()
    assert who is not None
    tl = tr.timeline()
    span = tr.stopped_at - tr.started_at
    hog_time = int((tl["end"] - tl["start"])[tl["pid"] == hog.pid].sum())
    # the hog is charged the CPU time the scheduler says it ran while tracked, from
    # the first moment on (alone on a quiet CPU that is nearly all of the span; on a
    # loaded one it shares the CPU, and the timeline must say so too)
    assert hog_time >= 0.8 * ran - 20_000_000, (hog_time, ran, span)
    assert hog_time <= span
