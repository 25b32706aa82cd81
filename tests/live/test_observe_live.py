"""Microscopy on the running kernel: mmap-page reads against read(), the
observer on a busy process, regions on known nested workloads, the CLI."""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pmuscope.events.spec import EventSpec
from pmuscope.kernel import abi, perf_event_attr
from pmuscope.observe import MmapCounter, Observer, read_page
from pmuscope.observe import mmap_page
from pmuscope.observe.regions import RegionRecorder

from ..conftest import hardware_pmu_reason

TASK_CLOCK = EventSpec("task-clock", perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.TASK_CLOCK))
CS = EventSpec("context-switches", perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.CONTEXT_SWITCHES))


def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def spin_cpu(seconds):
    """Spin until this thread has used ``seconds`` of CPU (robust on a loaded machine)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def schedstat_ns(pid):
    """Time the task spent on a CPU, from /proc/PID/schedstat (ns)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def test_software_counter_falls_back_to_read():
    with MmapCounter(TASK_CLOCK.attr, event="task-clock") as c:
        page = c.page()
        assert page.index == 0  # software events have no hardware counter index
        assert c.path == "read"
        a = c.read()
        t0 = time.thread_time_ns()
        spin_cpu(0.02)
        used = time.thread_time_ns() - t0
        b = c.read()
        # task-clock of this thread agrees with the thread's CPU time (clock ticks: 1 ms + 10%)
        assert abs((b[0] - a[0]) - used) <= 1_000_000 + 0.1 * used, (b[0] - a[0], used)
        assert b[1] >= a[1] and b[2] >= a[2]


def test_hardware_counter_via_mmap_page_agrees_with_read():
    reason = hardware_pmu_reason()
    if reason:
        pytest.skip(f"needs a hardware PMU: {reason}")
    attr = perf_event_attr(type=abi.PERF_TYPE_HARDWARE, config=abi.PerfHwId.INSTRUCTIONS, exclude_kernel=1, exclude_hv=1)
    with MmapCounter(attr, event="instructions:u") as c:
        page = c.page()
        if not (page.cap_user_rdpmc and page.index and mmap_page.native_rdpmc_available()):
            pytest.skip("the kernel does not allow rdpmc here (cap_user_rdpmc=0 or no native helper)")
        # auto picks the faster of rdpmc and read() (a hypervisor may trap RDPMC)
        assert c.path in ("rdpmc", "read") and set(c.calibration) == {"rdpmc", "read"}
        assert c.path == min(c.calibration, key=c.calibration.get)
        from pmuscope import _native

        # interleave the three paths: each later read must be >= the earlier one
        seq = []
        for _ in range(50):
            seq.append(("rdpmc", _native.mmap_read(c._addr)[0]))
            seq.append(("mmap", read_page(c._map, _native.rdpmc, _native.rdtsc)[0]))
            seq.append(("read", c.read_syscall()[0]))
        values = [v for _, v in seq]
        assert all(b >= a for a, b in zip(values, values[1:])), seq[:12]
        # the work between two reads is small: no path is off by more than the work done
        assert values[-1] - values[0] < 50_000_000


def test_observer_reads_a_busy_process_at_the_asked_rate():
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", "5"])
    try:
        time.sleep(0.3)
        before = schedstat_ns(proc.pid)
        res = Observer([TASK_CLOCK, CS], pid=proc.pid, rate_hz=1000, duration=0.5, loop="python").run()
        ran = schedstat_ns(proc.pid) - before
    finally:
        proc.kill()
        proc.wait()
    s = res.summary()
    # slots missed on a loaded machine are skipped and counted late: the run keeps its length
    assert s["samples"] + s["late"] == 501 and s["samples"] >= 250
    assert 500 <= s["rate_hz"] <= 1010
    assert s["path"] == "read"
    assert 0.0 <= s["trustable_fraction"] <= 1.0 and s["untrustable"] == res.dte.taken - res.dte.kept
    cols = res.deltas()
    # the window's task-clock is the target's CPU time inside the window: no more than
    # the scheduler's own account around it, and most of it (setup is a few ms)
    window = int(cols["task-clock"].sum())
    assert window <= ran * 1.01 + 1_000_000, (window, ran)
    assert window >= 0.7 * ran - 5_000_000, (window, ran)
    assert np.all(np.diff(res.stamps[:, 0]) > 0) and np.all(res.stamps[:, 1] >= res.stamps[:, 0])


@pytest.mark.skipif(not mmap_page.native_available(), reason="the native helper is not built (no C compiler at install)")
def test_both_loops_give_the_same_columns_and_semantics():
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", "8"])
    results = {}
    try:
        time.sleep(0.3)
        for loop in ("python", "native", "auto"):
            results[loop] = Observer([TASK_CLOCK, CS], pid=proc.pid, rate_hz=2000, duration=0.5, loop=loop).run()
    finally:
        proc.kill()
        proc.wait()
    assert results["python"].path == "read" and results["native"].path == "native"
    assert results["python"].loop_reason == "asked for (loop=python)"
    assert results["native"].loop_reason == "asked for (loop=native)"
    auto = results["auto"]
    # auto measured both loops and says which ran and why
    assert auto.path in ("read", "native") and ("fits" in auto.loop_reason) == (auto.path == "read")
    assert "per sample" in auto.loop_reason and "native loop" in auto.loop_reason
    ref = results["python"].deltas()
    for loop, res in results.items():
        # every slot of the 0.5 s grid at 2 kHz is either a sample or counted late (skipped)
        assert res.samples + res.late == 1001, loop
        assert res.summary()["path"] == res.path and res.summary()["loop_reason"] == res.loop_reason
        cols = res.deltas()
        assert list(cols) == list(ref) and all(cols[k].dtype == ref[k].dtype for k in ref), loop
        st = res.stamps
        assert np.all(st[:, 1] >= st[:, 0]), loop
        # never caught up with back-to-back reads (a preemption between the last look at the
        # clock and the read can still shorten a rare period)
        assert np.count_nonzero(np.diff(st[:, 0]) < 250_000) <= 5, loop
        for name in ("task-clock", "time_enabled", "time_running"):
            d = cols[name]
            assert np.all(d >= 0) and d.sum() > 0, (loop, name)
        # cumulative values: the deltas add up to last - first
        assert cols["task-clock"].sum() == int(res.values[-1, 0]) - int(res.values[0, 0])
        # one thread: its task-clock grows by at most the wall time from the first read's start
        # stamp to the second's end stamp
        span = st[1:, 1] - st[:-1, 0]
        assert np.all(cols["task-clock"] <= span * 1.01 + 10_000), loop


def test_observer_target_that_does_not_exist():
    from pmuscope.errors import ProcessGoneError

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(ProcessGoneError):
        Observer([TASK_CLOCK], pid=proc.pid, rate_hz=100, duration=0.1).run()


def test_regions_nest_and_accumulate_per_thread():
    rec = RegionRecorder(events=[])
    rec._open_counters = lambda: [MmapCounter(TASK_CLOCK.attr, event="task-clock")]  # no parser needed
    rec.events = ["task-clock"]
    outer, inner = rec.region("outer"), rec.region("inner")

    @rec.region("decorated")
    def work():
        spin_cpu(0.005)

    with outer:
        for _ in range(3):
            with inner:
                spin_cpu(0.01)
        work()

    def other_thread():
        with rec.region("inner"):
            spin_cpu(0.01)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    per = {(s.name, s.tid): s for s in rec.stats(per_thread=True)}
    me = threading.get_native_id()
    assert per[("outer", me)].calls == 1 and per[("inner", me)].calls == 3 and per[("decorated", me)].calls == 1
    assert per[("inner", t.native_id)].calls == 1
    o, i, d = per[("outer", me)], per[("inner", me)], per[("decorated", me)]
    assert o.counts["task-clock"] >= i.counts["task-clock"] + d.counts["task-clock"]
    assert i.counts["task-clock"] >= 25_000_000  # 3 x 10 ms on CPU, minus scheduling noise
    merged = {s.name: s for s in rec.stats()}
    assert merged["inner"].calls == 4
    assert "outer" in rec.table() and "task-clock" in rec.table()
    with pytest.raises(Exception, match="nest"):
        rec.start("a")
        rec.start("b")
        rec.stop("a")
    rec.close()


def test_observe_cli_json(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", "5"])
    out = tmp_path / "series.csv"
    try:
        time.sleep(0.2)
        cp = subprocess.run(
            [sys.executable, "-m", "pmuscope", "observe", "-e", "task-clock", "-p", str(proc.pid), "--rate", "500",
             "--duration", "0.4", "--json", "-o", str(out)],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        proc.kill()
        proc.wait()
    assert cp.returncode == 0, cp.stderr
    s = json.loads(cp.stdout)
    for key in ("samples", "rate_hz", "trustable_fraction", "untrustable", "observer_cpu_pct", "path", "loop_reason"):
        assert key in s
    assert s["samples"] + s["late"] == 201 and s["path"] in ("read", "native")
    assert "per sample" in s["loop_reason"]  # auto measured the loops
    lines = out.read_text().splitlines()
    assert lines[0].startswith("start_ns,end_ns,period_ns,task-clock") and len(lines) == s["samples"]


def fifo_permitted() -> bool:
    """Whether a thread of this process may take SCHED_FIFO (tried in a thread that then exits)."""
    ok = []

    def probe():
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return bool(ok)


def test_observe_cli_names_the_loop_and_why():
    cp = subprocess.run(
        [sys.executable, "-m", "pmuscope", "observe", "-e", "task-clock", "-t", str(threading.get_native_id()),
         "--rate", "1000", "--duration", "0.1", "--loop", "python"],
        capture_output=True, text=True, timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    line = [ln for ln in cp.stdout.splitlines() if ln.strip().startswith("loop ")]
    assert line and line[0].split()[1:] == ["python", "asked", "for", "(loop=python)"], cp.stdout
    cost = [ln for ln in cp.stdout.splitlines() if ln.strip().startswith("observer cost")]
    # the test's thread may run on another CPU: the observer takes SCHED_FIFO where permitted
    rt = len(os.sched_getaffinity(0)) > 1 and fifo_permitted()
    assert cost and (cost[0].endswith("path: read, SCHED_FIFO") if rt else "path: read" in cost[0]), cp.stdout


@pytest.mark.parametrize("ext", ["csv", "npz", "parquet"])
def test_series_written_in_every_format(tmp_path, ext):
    from pmuscope.observe import write_series

    if ext == "parquet":
        pytest.importorskip("pyarrow")
    res = Observer([TASK_CLOCK, CS], tid=threading.get_native_id(), rate_hz=200, duration=0.1, loop="python").run()
    path = write_series(res, str(tmp_path / f"series.{ext}"))
    cols = res.deltas()
    if ext == "npz":
        data = np.load(path)
        assert set(cols) == set(data.files)
        assert np.array_equal(data["task-clock"], cols["task-clock"])
    elif ext == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        assert table.column_names == list(cols)
        assert table.column("period_ns").to_pylist() == cols["period_ns"].tolist()
        assert b"pmuscope" in table.schema.metadata
    else:
        rows = open(path).read().splitlines()
        assert len(rows) == len(cols["start_ns"]) + 1


def test_default_region_recorder_with_parsed_events():
    """The public path: pmuscope.region() with the default events, as a user calls it."""
    import pmuscope
    from pmuscope.observe import regions

    regions.default.reset()
    with pmuscope.region("outer"):
        for _ in range(2):
            with pmuscope.region("inner"):
                spin_cpu(0.005)
    stats = {s.name: s for s in regions.stats()}
    assert stats["outer"].calls == 1 and stats["inner"].calls == 2
    # task-clock always opens; the hardware events open where a PMU exists, else are named
    assert "task-clock" in regions.default.events
    assert stats["inner"].counts["task-clock"] >= 8_000_000
    if hardware_pmu_reason() is None:
        assert "instructions:u" in regions.default.events
        assert stats["outer"].counts["instructions:u"] >= stats["inner"].counts["instructions:u"] > 0
    else:
        assert "instructions:u" in regions.default.unavailable
    pd = pytest.importorskip("pandas")
    df = regions.to_dataframe()
    assert isinstance(df, pd.DataFrame) and set(df["region"]) == {"outer", "inner"}
    assert "task-clock" in regions.table()
