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
