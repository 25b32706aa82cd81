"""Monitor pieces without a kernel: the deadline scheduler on a fake clock,
event grouping, and the chunk → rows arithmetic on synthetic group reads."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from pmuscope.counting import monitor as mm
from pmuscope.errors import PmuscopeError, ProcessGoneError
from pmuscope.events.spec import EventSpec
from pmuscope.kernel import abi

MS = 1_000_000


class FakeClock:
    """A monotonic clock that jumps to the deadline asked for, plus a scripted
    wake-up latency per sleep (ns)."""

    def __init__(self, latencies=None, start=5_000_000_000):
        self.t = start
        self.latencies = list(latencies or [])
        self.sleeps = []

    def __call__(self) -> int:
        return self.t

    def sleep_until(self, deadline: int) -> None:
        self.sleeps.append(deadline)
        lat = self.latencies.pop(0) if self.latencies else 0
        self.t = max(self.t, deadline) + lat


def test_scheduler_keeps_the_grid_despite_constant_latency():
    clock = FakeClock(latencies=[30_000] * 1000)
    s = mm.IntervalScheduler(MS, clock=clock, sleep_until=clock.sleep_until)
    t0 = s.start()
    ticks = [s.wait() for _ in range(1000)]
    # deadlines stay on start + k*interval: 30 µs of lateness never accumulates
    assert [t.deadline - t0 for t in ticks] == [k * MS for k in range(1, 1001)]
    assert {t.now - t.deadline for t in ticks} == {30_000}
    assert not any(t.late for t in ticks)  # 30 µs < 10% of 1 ms
    assert s.late == 0 and s.skipped == 0


def test_scheduler_flags_late_and_skips_missed_deadlines():
    # the 3rd wake-up is 3.5 intervals late
    clock = FakeClock(latencies=[0, 0, 3_500_000, 0, 0])
    s = mm.IntervalScheduler(MS, clock=clock, sleep_until=clock.sleep_until)
    t0 = s.start()
    ticks = [s.wait() for _ in range(5)]
    assert [t.late for t in ticks] == [False, False, True, False, False]
    assert [t.skipped for t in ticks] == [0, 0, 3, 0, 0]
    # after the stall the schedule resumes on the original grid
    assert [t.deadline - t0 for t in ticks] == [1 * MS, 2 * MS, 3 * MS, 7 * MS, 8 * MS]
    assert (s.late, s.skipped, s.ticks) == (1, 3, 5)


def test_scheduler_tolerance_boundary():
    clock = FakeClock(latencies=[100_000, 100_001])
    s = mm.IntervalScheduler(MS, clock=clock, sleep_until=clock.sleep_until)
    s.start()
    assert s.wait().late is False  # exactly the 10% tolerance
    assert s.wait().late is True


def test_scheduler_does_not_sleep_when_behind():
    clock = FakeClock()
    s = mm.IntervalScheduler(MS, clock=clock, sleep_until=clock.sleep_until)
    s.start()
    clock.t += 10 * MS + 1  # the caller was busy for 10 intervals
    tick = s.wait()
    assert clock.sleeps == []
    assert tick.skipped == 9 and tick.late


def test_scheduler_rejects_bad_interval():
    with pytest.raises(PmuscopeError, match="positive"):
        mm.IntervalScheduler(0)


def _spec(name, type_, config, group=None):
    return EventSpec(name=name, attr=abi.perf_event_attr(type=type_, config=config), group=group)


def test_plan_groups(data_dir):
    sysfs = str(data_dir / "dvfs/sys")
    specs = [_spec("cycles", 0, 0), _spec("task-clock", 1, 1), _spec("power/energy-pkg/", 23, 2),
             _spec("cpu/event=0x76/", 4, 0x76), _spec("power/energy-ram/", 23, 3)]
    assert mm.plan_groups(specs, True, sysfs) == [[0, 1, 3], [2, 4]]
    assert mm.plan_groups(specs, False, sysfs) == [[0], [1], [2], [3], [4]]
    braced = [_spec("a", 0, 0, group=0), _spec("b", 0, 1, group=0), _spec("c", 1, 1)]
    assert mm.plan_groups(braced, True, sysfs) == [[0, 1], [2]]


def test_resolve_events_uses_perf_grammar(data_dir):
    specs = mm.resolve_events("cycles:u,{task-clock,cs}", sysfs=str(data_dir / "dvfs/sys"))
    assert [(s.name, s.group, s.attr.type, s.attr.config) for s in specs] == [
        ("cycles:u", None, 0, 0), ("task-clock", 0, 1, 1), ("cs", 0, 1, 3)]
    assert specs[0].attr.exclude_kernel == 1
    with pytest.raises(PmuscopeError, match="no-such-event"):
        mm.resolve_events("no-such-event")


def test_resolve_events_rejects_duplicates_and_empty():
    with pytest.raises(PmuscopeError, match="twice"):
        mm.resolve_events("task-clock,task-clock")
    with pytest.raises(PmuscopeError, match="no events"):
        mm.resolve_events([])


@pytest.fixture
def fixture_monitor(data_dir):
    d = data_dir / "dvfs"
    mon = mm.Monitor("task-clock,context-switches", cpus=[0, 1], interval_ms=1, sysfs=str(d / "sys"), procfs=str(d / "proc0"))
    yield mon
    mon.close()


def test_monitor_validation(data_dir):
    d = data_dir / "dvfs"
    kw = dict(sysfs=str(d / "sys"), procfs=str(d / "proc0"))
    with pytest.raises(PmuscopeError, match="too short"):
        mm.Monitor("task-clock", interval_ms=0.01, **kw)
    with pytest.raises(PmuscopeError, match="not online"):
        mm.Monitor("task-clock", cpus="0,9", **kw)
    with pytest.raises(PmuscopeError, match="not both"):
        mm.Monitor("task-clock", cpus=[0], pid=1, **kw)
    with pytest.raises(ProcessGoneError):
        mm.Monitor("task-clock", pid=99999999, **kw)
    with pytest.raises(PmuscopeError, match="duration"):
        mm.Monitor("task-clock", duration=-1, **kw)


def test_monitor_schema_has_power_and_context(fixture_monitor):
    cols = [c for c, _ in fixture_monitor.schema()]
    assert cols[:5] == ["timestamp", "interval_ms", "cpu", "task-clock", "context-switches"]
    # the fixture's RAPL PMU adds its energy events as columns
    assert "power/energy-pkg/" in cols and "power/energy-ram/" in cols
    for c in ("time_enabled", "time_running", "late", "skipped", "freq_mhz", "util", "governor", "temp_x86_pkg_temp_c", "energy_package_0_j"):
        assert c in cols
    assert fixture_monitor.context_every == 10  # 1 ms intervals, context every 10 ms


def _group_read(values, ena, run):
    return [len(values), ena, run, *values]


def test_build_batch_deltas_scaling_and_context(fixture_monitor):
    mon = fixture_monitor
    names = mon.event_names
    core = [names.index("task-clock"), names.index("context-switches")]
    power = [i for i, n in enumerate(names) if n.startswith("power/")]
    # cpu0: core group + power group; cpu1: core group only (power cpumask is 0)
    mon._slots = [
        mm._Slot(None, 0, core, 0, 5),
        mm._Slot(None, 0, power, 5, 3 + len(power)),
        mm._Slot(None, 1, core, 5 + 3 + len(power), 5),
    ]
    mon._rec_words = 5 + 3 + len(power) + 5
    mon._context_sampler()
    unit = 2 ** 32  # one Joule in RAPL counts (scale 2^-32)

    def record(k):
        # interval k: cpu0 core runs fully; cpu0 power runs; cpu1 core is
        # multiplexed in interval 2 (half the time) and never runs in interval 3
        cpu1_run = {1: MS, 2: MS + MS // 2, 3: MS + MS // 2}[k]
        return (
            _group_read([k * 900_000, k * 3], k * MS, k * MS)
            + _group_read([k * unit] * len(power), k * MS, k * MS)
            + _group_read([{1: 1000, 2: 1500, 3: 1500}[k], 0], k * MS, cpu1_run)
        )

    buf = bytearray()
    for k in (1, 2, 3):
        buf += struct.pack(f"={mon._rec_words}Q", *record(k))
    t0 = 1_000_000_000
    chunk = mm._Chunk(buf)
    chunk.n = 3
    chunk.ts = np.array([t0 + MS, t0 + 2 * MS + 50_000, t0 + 3 * MS], dtype=np.int64)
    chunk.late = np.array([False, False, False])
    chunk.skipped = np.zeros(3, dtype=np.int32)
    ctx_at_2 = (np.array([1000.0, 2000.0]), np.array([0.25, 0.75]), {c: 1.5 for c in mon._ctx.machine_columns})
    chunk.ctx = [(1, *ctx_at_2)]
    last_ctx = (np.array([500.0, 600.0]), np.array([0.1, 0.2]), {c: 0.5 for c in mon._ctx.machine_columns})
    prev = np.zeros(mon._rec_words, dtype=np.uint64)
    out, prev_raw, prev_ts, new_ctx = mon._build_batch(chunk, prev, t0, last_ctx)

    assert out["cpu"].tolist() == [0, 1] * 3
    assert out["timestamp"].tolist() == [t0 + MS] * 2 + [t0 + 2 * MS + 50_000] * 2 + [t0 + 3 * MS] * 2
    assert out["interval_ms"].tolist() == pytest.approx([1.0, 1.0, 1.05, 1.05, 0.95, 0.95])
    assert out["task-clock"][0::2].tolist() == [900_000] * 3
    assert out["context-switches"][0::2].tolist() == [3, 3, 3]
    # cpu1: exact, then scaled ×2 (ran 0.5 ms of 1 ms enabled), then not counted
    tc1 = out["task-clock"][1::2]
    assert tc1[:2].tolist() == [1000, 1000] and math.isnan(tc1[2])
    assert out["time_enabled"].tolist() == [MS] * 6
    assert out["time_running"].tolist() == [MS, MS, MS, MS // 2, MS, 0]
    # energy: scaled to Joules on cpu0, absent (NaN) on cpu1
    pkg = out["power/energy-pkg/"]
    assert pkg[0::2].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert np.isnan(pkg[1::2]).all()
    # context: the previous sample until the one taken at interval index 1
    assert out["freq_mhz"].tolist() == [500.0, 600.0, 1000.0, 2000.0, 1000.0, 2000.0]
    assert out["util"].tolist() == [0.1, 0.2, 0.25, 0.75, 0.25, 0.75]
    assert out["governor"].tolist() == ["powersave", "powersave"] * 3
    assert out["temp_x86_pkg_temp_c"].tolist() == [0.5, 0.5, 1.5, 1.5, 1.5, 1.5]
    assert prev_ts == t0 + 3 * MS
    assert prev_raw.tolist() == list(record(3))
    assert new_ctx[1].tolist() == [0.25, 0.75]
    assert all(len(v) == 6 for v in out.values())
    assert set(out) == {c for c, _ in mon.schema()}


def test_build_batch_idle_thread_is_zero_not_nan(fixture_monitor):
    mon = mm.Monitor("task-clock", cpus=[0], interval_ms=10, context=False, power=False,
                     sysfs=fixture_monitor.sysfs, procfs=fixture_monitor.procfs)
    mon._slots = [mm._Slot(None, 0, [0], 0, 4)]
    mon._rec_words = 4
    prev = np.array([1, 5, 5, 100], dtype=np.uint64)
    # time_enabled did not move: the (per-thread) event's task never ran
    chunk = mm._Chunk(bytearray(struct.pack("=4Q", 1, 5, 5, 100)))
    chunk.n, chunk.ts = 1, np.array([10 * MS], dtype=np.int64)
    chunk.late, chunk.skipped = np.array([False]), np.zeros(1, dtype=np.int32)
    out, *_ = mon._build_batch(chunk, prev, 0, None)
    assert out["task-clock"].tolist() == [0.0]


def test_build_batch_counter_wrap(fixture_monitor):
    mon = mm.Monitor("task-clock", cpus=[0], interval_ms=10, context=False, power=False,
                     sysfs=fixture_monitor.sysfs, procfs=fixture_monitor.procfs)
    mon._slots = [mm._Slot(None, 0, [0], 0, 4)]
    mon._rec_words = 4
    prev = np.array([1, 0, 0, 2**64 - 10], dtype=np.uint64)
    chunk = mm._Chunk(bytearray(struct.pack("=4Q", 1, 10 * MS, 10 * MS, 5)))
    chunk.n, chunk.ts = 1, np.array([10 * MS], dtype=np.int64)
    chunk.late, chunk.skipped = np.array([False]), np.zeros(1, dtype=np.int32)
    out, *_ = mon._build_batch(chunk, prev, 0, None)
    assert out["task-clock"].tolist() == [15]  # u64 wrap-around


def test_unopenable_rapl_events_are_left_out(fixture_monitor, monkeypatch):
    import errno

    from pmuscope.kernel import syscall as sc

    def fake_open(attr, pid, cpu, group_fd, flags):
        raise OSError(errno.EACCES, "fake")

    monkeypatch.setattr(sc, "_open_hook", fake_open)
    auto = [s.name for s in fixture_monitor.specs if s.extra.get("auto")]
    assert auto  # the fixture machine has a RAPL PMU
    fixture_monitor._drop_unopenable_auto_events()
    assert [s.name for s in fixture_monitor.specs] == ["task-clock", "context-switches"]
    assert len(fixture_monitor.warnings) == len(auto)
    assert "power/energy-pkg/ left out: no permission" in fixture_monitor.warnings[1]


def test_open_falls_back_without_exclude_guest(monkeypatch):
    import errno
    import os

    from pmuscope.errors import InvalidAttrError
    from pmuscope.kernel import syscall as sc

    seen = []

    def fake_open(attr, pid, cpu, group_fd, flags):
        seen.append(attr.exclude_guest)
        if attr.exclude_guest:
            raise OSError(errno.EINVAL, "fake")
        return os.open(os.devnull, os.O_RDONLY)

    monkeypatch.setattr(sc, "_open_hook", fake_open)
    attr = abi.perf_event_attr(type=11, config=0, exclude_guest=1)
    fd = mm._open_with_fallback(attr, -1, 0, None, "msr/tsc/")
    assert seen == [1, 0] and attr.exclude_guest == 0
    fd.close()
    # an EINVAL that is not about exclude_guest still raises, after one retry
    def always_einval(attr, pid, cpu, group_fd, flags):
        seen.append(attr.exclude_guest)
        raise OSError(errno.EINVAL, "fake")

    monkeypatch.setattr(sc, "_open_hook", always_einval)
    seen.clear()
    with pytest.raises(InvalidAttrError):
        mm._open_with_fallback(abi.perf_event_attr(type=11, config=0, exclude_guest=1), -1, 0, None, "x")
    assert seen == [1, 0]


# --------------------------------------------------------------------------- the sampling loop: Python and C


def _run_loop(step, clock_readings, *, n=8, last=-1, ctx_every=0, ctx_mod=1, alive_every=0, stopped=False, interval=MS,
              start=5_000_000_000, tolerance=100_000):
    """Drive a loop step function over one chunk the way Monitor._sampler_loop
    does, reading two pipes whose contents are known: the fills, the steps'
    (i, k, flags) and the chunk."""
    import os

    pipes = [os.pipe(), os.pipe()]
    sizes = [40, 24]  # a 2-event and a 0-event group: 3 + n u64 words each
    rec = sum(sizes)
    plan = [(pipes[0][0], 0, sizes[0]), (pipes[1][0], sizes[0], sizes[1])]
    for g, (r, w) in enumerate(pipes):
        data = b"".join(struct.pack("<Q", 1000 * g + j) for j in range(n * sizes[g] // 8))
        os.write(w, data)
    stop = bytearray([1 if stopped else 0])  # stop() was called: end after the first interval
    ctx_state = np.array([0, ctx_mod], dtype=np.int64)
    params = mm._LoopParams(start, interval, tolerance, last, ctx_every, ctx_state, alive_every, stop, None, None)
    chunk = mm._make_chunk(plan, rec, n, views=True)
    steps = []
    i, k = 0, 1
    try:
        while i < n:
            i, k, flags = step(chunk, plan, rec, i, n, k, params, clock_readings)
            steps.append((i, k, flags))
            if flags & mm._ENDED:
                break
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
    chunk.ctx_crossings = int(ctx_state[0])
    return steps, chunk


def _python_step(chunk, plan, rec, i, n, k, params, readings):
    it = readings.setdefault("it", iter(readings["values"]))
    params.clock = lambda: next(it)
    params.sleep_until = lambda deadline: readings.setdefault("sleeps", []).append(deadline)
    return mm._loop_python(chunk, i, n, k, params)


def _native_step(chunk, plan, rec, i, n, k, params, readings):
    native = mm._native_loop()
    buf = readings.setdefault("buf", np.array([0] + list(readings["values"]), dtype=np.int64))
    p = params
    flat = np.array(plan, dtype=np.int64).tobytes()
    return native(flat, chunk.buf, rec, chunk.ts, chunk.deadline_idx, chunk.late, chunk.skipped, i, n, k, p.start,
                  p.interval, p.tolerance, p.last, p.ctx_every, p.ctx_state, p.alive_every, p.stop, buf)


T0 = 5_000_000_000
#: clock readings: interval 1 early (sleeps: a second reading), 2 on time +30 µs,
#: 3 late by 0.15 ms (flagged), 4 late by 3.5 intervals (3 deadlines skipped),
#: then early twice (each sleeps), exactly on the tolerance (not late), on time ...
READINGS = [T0 + 500_000, T0 + MS, T0 + 2 * MS + 30_000, T0 + 3 * MS + 150_000, T0 + 7 * MS + 500_000,
            T0 + 7 * MS + 600_000, T0 + 8 * MS, T0 + 8 * MS + 100, T0 + 9 * MS, T0 + 10 * MS + 100_000]
READINGS += [T0 + (11 + j) * MS + 10 for j in range(40)]

needs_native = pytest.mark.skipif(mm._native_loop() is None, reason="pmuscope._native is not built (no C compiler)")


def test_python_loop_on_a_fake_clock_and_pipes():
    steps, chunk = _run_loop(_python_step, {"values": READINGS})
    assert steps == [(8, 12, 0)]  # one step fills the chunk
    assert chunk.deadline_idx.tolist() == [1, 2, 3, 4, 8, 9, 10, 11]
    assert chunk.skipped.tolist() == [0, 0, 0, 3, 0, 0, 0, 0]
    assert chunk.late.tolist() == [False, False, True, True, False, False, False, False]
    assert chunk.ts.tolist()[:7] == [T0 + MS, T0 + 2 * MS + 30_000, T0 + 3 * MS + 150_000, T0 + 7 * MS + 500_000,
                                      T0 + 8 * MS, T0 + 9 * MS, T0 + 10 * MS + 100_000]
    # every interval's record holds the next read of each pipe, at its group's offset
    words = np.frombuffer(chunk.buf, dtype=np.uint64).reshape(8, 8)
    assert words[:, 0].tolist() == [5 * j for j in range(8)]
    assert words[:, 5].tolist() == [1000 + 3 * j for j in range(8)]


@needs_native
@pytest.mark.parametrize("kw", [
    {},
    {"last": 6},  # the 3.5-interval stall reaches past the end: skipped only up to deadline 6
    {"ctx_every": 2},
    {"ctx_every": 3, "alive_every": 4},
    {"ctx_every": 1, "ctx_mod": 3},  # a context sample at every third crossing only
    {"stopped": True},
    {"tolerance": 30_000, "ctx_every": 1},
])
def test_native_loop_fills_the_chunk_as_the_python_loop(kw):
    py_steps, py_chunk = _run_loop(_python_step, {"values": READINGS}, **kw)
    if kw.get("ctx_every") or kw.get("stopped") or kw.get("last"):
        assert py_steps[0][2] != 0  # the step returned early, with a flag
    c_steps, c_chunk = _run_loop(_native_step, {"values": READINGS}, **kw)
    assert c_steps == py_steps
    assert c_chunk.ctx_crossings == py_chunk.ctx_crossings
    n = py_steps[-1][0]
    assert bytes(c_chunk.buf) == bytes(py_chunk.buf)
    for name in ("ts", "deadline_idx", "late", "skipped"):
        assert getattr(c_chunk, name)[:n].tolist() == getattr(py_chunk, name)[:n].tolist(), name


def test_python_loop_returns_at_every_ctx_mod_th_crossing():
    steps, chunk = _run_loop(_python_step, {"values": READINGS}, ctx_every=1, ctx_mod=3)
    # every interval crosses a multiple of 1; the 4th (a stall over deadlines 5-7) once
    assert [s[0] for s in steps] == [3, 6, 8]
    assert [s[2] for s in steps] == [mm._CTX_DUE, mm._CTX_DUE, 0]
    assert chunk.ctx_crossings == 8


@needs_native
def test_native_loop_stops_where_the_python_loop_does_at_the_last_deadline():
    steps, chunk = _run_loop(_native_step, {"values": READINGS}, last=6)
    assert steps[-1][2] & mm._ENDED
    assert chunk.deadline_idx[: steps[-1][0]].tolist() == [1, 2, 3, 4]
    assert chunk.skipped[: steps[-1][0]].tolist() == [0, 0, 0, 2]


@needs_native
def test_native_loop_rejects_inconsistent_buffers_and_reports_read_errors():
    native = mm._native_loop()
    chunk = mm._make_chunk([(0, 0, 8)], 8, 2, views=False)
    bad = np.array([(0, 4, 8)], dtype=np.int64).tobytes()  # reads past the record
    state = np.array([0, 1], dtype=np.int64)
    with pytest.raises(ValueError):
        native(bad, chunk.buf, 8, chunk.ts, chunk.deadline_idx, chunk.late, chunk.skipped, 0, 2, 1, T0, MS, 0, -1, 0,
               state, 0, bytearray(1), np.array([0, T0 + MS], dtype=np.int64))
    closed = np.array([(987654, 0, 8)], dtype=np.int64).tobytes()  # not an open fd
    with pytest.raises(OSError):
        native(closed, chunk.buf, 8, chunk.ts, chunk.deadline_idx, chunk.late, chunk.skipped, 0, 2, 1, T0, MS, 0, -1,
               0, state, 0, bytearray(1), np.array([0, T0 + MS], dtype=np.int64))


def test_loop_selection(monkeypatch, data_dir):
    d = data_dir / "dvfs"
    kw = dict(cpus=[0], interval_ms=1, sysfs=str(d / "sys"), procfs=str(d / "proc0"))
    assert mm.Monitor("task-clock", loop="python", **kw).loop == "python"
    with pytest.raises(PmuscopeError, match="loop="):
        mm.Monitor("task-clock", loop="fast", **kw)
    monkeypatch.setattr(mm, "_native_loop", lambda: None)
    assert mm.Monitor("task-clock", **kw).loop == "python"
    with pytest.raises(PmuscopeError, match="not built"):
        mm.Monitor("task-clock", loop="native", **kw)
