"""The observer's two loops without perf events: the loop choice on injected
measured costs, the schedule (a grid of deadlines, missed slots skipped, never
caught up) of the Python loop on a fake clock, and the native loop reading
/dev/zero in place of counter fds."""

import os
import time

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.events.spec import EventSpec
from pmuscope.kernel import abi, perf_event_attr
from pmuscope.observe import observer as obs_mod
from pmuscope.observe.mmap_page import native_available
from pmuscope.observe.observer import PY_COST_SHARE, PY_JITTER_SHARE, LoopCost, Observer, choose_loop

TASK_CLOCK = EventSpec("task-clock", perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.TASK_CLOCK))
native = pytest.mark.skipif(not native_available(), reason="the native helper is not built (no C compiler at install)")

PY = LoopCost(per_sample_ns=1_300, jitter_ns=20)
NAT = LoopCost(per_sample_ns=500, jitter_ns=10)


# -- choose_loop on injected costs


def test_python_loop_when_the_period_is_comfortably_above_its_cost():
    loop, why = choose_loop(1_000_000, 0.01, PY, NAT)  # 1 kHz: 1.3 us of 1 ms, 20 ns of a 10 us budget
    assert loop == "python"
    assert "fits" in why and "1,300 ns per sample" in why and "native loop 500 ns" in why


def test_native_loop_when_the_python_loop_costs_too_much_of_the_period():
    # 100 kHz: 1.3 us is 13% of the 10 us period (the limit is 10%); the jitter fits the 100 ns budget
    loop, why = choose_loop(10_000, 0.01, LoopCost(1_300, 20), NAT)
    assert loop == "native"
    assert "1,300 ns per sample is above 10% of the 10.0 us period" in why and "jitter" not in why.split(";")[0]


def test_native_loop_when_the_python_brackets_jitter_beyond_the_dte_budget():
    # 20 kHz: 1.3 us fits 10% of 50 us, but 300 ns of jitter is above half of the 500 ns budget
    loop, why = choose_loop(50_000, 0.01, LoopCost(1_300, 300), NAT)
    assert loop == "native"
    assert "300 ns bracket jitter is above 50% of the 500 ns DTE budget" in why and "per sample is above" not in why


def test_both_reasons_when_both_limits_are_exceeded():
    loop, why = choose_loop(5_000, 0.01, LoopCost(2_000, 400), NAT)
    assert loop == "native" and "per sample is above" in why and "bracket jitter is above" in why


def test_limits_are_inclusive():
    period = 100_000
    at_limit = LoopCost(PY_COST_SHARE * period, PY_JITTER_SHARE * 0.01 * period)
    assert choose_loop(period, 0.01, at_limit, NAT)[0] == "python"
    above = LoopCost(PY_COST_SHARE * period + 1, PY_JITTER_SHARE * 0.01 * period)
    assert choose_loop(period, 0.01, above, NAT)[0] == "native"
    above = LoopCost(PY_COST_SHARE * period, PY_JITTER_SHARE * 0.01 * period + 1)
    assert choose_loop(period, 0.01, above, NAT)[0] == "native"


def test_the_tolerance_sets_the_jitter_budget():
    cost = LoopCost(1_000, 400)
    assert choose_loop(100_000, 0.01, cost, NAT)[0] == "python"  # budget 1 us, half of it 500 ns >= 400
    assert choose_loop(50_000, 0.01, cost, NAT)[0] == "native"   # budget 500 ns, half of it 250 ns < 400
    assert choose_loop(50_000, 0.02, cost, NAT)[0] == "python"   # budget 1 us, half 500 ns >= 400
    assert choose_loop(50_000, 0.0, LoopCost(1_000, 0), NAT)[0] == "python"
    assert choose_loop(50_000, 0.0, LoopCost(1_000, 1), NAT)[0] == "native"


def test_without_the_native_loop_python_runs_and_says_why():
    assert choose_loop(5_000, 0.01, LoopCost(5_000, 5_000), None) == ("python", "the native loop is not built here")
    assert choose_loop(5_000, 0.01, None, NAT)[0] == "native"


def test_loop_cost_from_stamps():
    start = np.arange(11, dtype=np.int64) * 1_000
    bracket = np.array([100, 100, 130, 100, 100, 100, 100, 100, 100, 100, 100])
    cost = LoopCost.from_stamps(np.column_stack([start, start + bracket]))
    assert cost.per_sample_ns == 1_000
    # |diff(bracket)|: two of 30 among ten
    assert cost.jitter_ns == pytest.approx(np.percentile([0, 30, 30, 0, 0, 0, 0, 0, 0, 0], 90))
    with pytest.raises(ValueError):
        LoopCost.from_stamps(np.zeros((2, 2)))


# -- Observer._decide_loop: what forces a loop, and the measured choice


def observer(**kw):
    return Observer([TASK_CLOCK], tid=os.getpid(), rate_hz=kw.pop("rate_hz", 50_000), duration=0.1, **kw)


def test_measured_choice_uses_the_calibration(monkeypatch):
    monkeypatch.delenv("PMUSCOPE_OBSERVE_LOOP", raising=False)
    monkeypatch.setattr(obs_mod, "native_available", lambda: True)
    o = observer()
    monkeypatch.setattr(o, "calibrate", lambda size: {"python": LoopCost(3_000, 20), "native": NAT})
    loop, why = o._decide_loop(32, 20_000)  # 3 us > 10% of 20 us
    assert loop == "native" and "3,000 ns per sample is above" in why
    assert o.costs == {"python": LoopCost(3_000, 20), "native": NAT}
    monkeypatch.setattr(o, "calibrate", lambda size: {"python": LoopCost(1_000, 20), "native": NAT})
    assert o._decide_loop(32, 20_000)[0] == "python"


def test_asked_loop_tags_and_environment_override_the_measurement(monkeypatch):
    monkeypatch.setattr(obs_mod, "native_available", lambda: True)

    def no_calibration(size):
        raise AssertionError("a forced loop is not measured")

    o = observer(loop="python")
    monkeypatch.setattr(o, "calibrate", no_calibration)
    assert o._decide_loop(32, 10_000) == ("python", "asked for (loop=python)")
    o = observer(loop="native")
    monkeypatch.setattr(o, "calibrate", no_calibration)
    assert o._decide_loop(32, 10_000_000) == ("native", "asked for (loop=native)")
    o = observer(loop="native")
    o.tags = object()  # tags are read inside the bracket by the Python loop, whatever was asked
    monkeypatch.setattr(o, "calibrate", no_calibration)
    loop, why = o._decide_loop(32, 10_000)
    assert loop == "python" and "tags" in why
    for forced in ("python", "native"):
        monkeypatch.setenv("PMUSCOPE_OBSERVE_LOOP", forced)
        o = observer()
        monkeypatch.setattr(o, "calibrate", no_calibration)
        assert o._decide_loop(32, 10_000) == (forced, f"PMUSCOPE_OBSERVE_LOOP={forced}")
    monkeypatch.setenv("PMUSCOPE_OBSERVE_LOOP", "native")
    monkeypatch.setattr(obs_mod, "native_available", lambda: False)
    o = observer()
    assert o._decide_loop(32, 10_000) == ("python", "the native loop is not built here")


def test_unknown_loop_is_refused(monkeypatch):
    with pytest.raises(PmuscopeError, match="unknown loop 'fast'"):
        observer(loop="fast")
    monkeypatch.setenv("PMUSCOPE_OBSERVE_LOOP", "fast")
    with pytest.raises(PmuscopeError, match="PMUSCOPE_OBSERVE_LOOP='fast': use auto, python or native"):
        observer()


# -- the schedule


class _Fd:
    def __init__(self, fd):
        self.fd = fd


class FakeClock:
    """CLOCK_MONOTONIC and CLOCK_MONOTONIC_RAW in one: each call advances
    ``step`` ns; ``stall`` maps a call number to extra ns (a preemption)."""

    def __init__(self, step=100, stall=None):
        self.now = 10_000_000
        self.calls = 0
        self.step = step
        self.stall = stall or {}

    def __call__(self, clk):
        self.calls += 1
        self.now += self.step + self.stall.pop(self.calls, 0)
        return self.now


def fake_loop_observer(monkeypatch, clock, ngroups=2, size=32):
    o = observer()
    fds = [os.open("/dev/zero", os.O_RDONLY) for _ in range(ngroups)]
    o._groups = [[_Fd(fd)] for fd in fds]
    monkeypatch.setattr(time, "clock_gettime_ns", clock)
    monkeypatch.setattr(time, "sleep", lambda s: setattr(clock, "now", clock.now + int(s * 1e9)))
    return o, fds


def test_python_loop_skips_missed_slots_instead_of_catching_up(monkeypatch):
    clock = FakeClock(step=100, stall={200: 5_500_000})  # one 5.5 ms stall mid-run
    o, fds = fake_loop_observer(monkeypatch, clock)
    try:
        n, size, period = 40, 32, 1_000_000
        raw = np.ones((n, 2, size // 8), dtype=np.uint64)
        stamps = np.zeros((n, 2), dtype=np.int64)
        taken, late = o._python_loop(raw, stamps, n, size, period)
    finally:
        for fd in fds:
            os.close(fd)
    assert taken + late == n and late in (5, 6)  # the slots the stall covered, no more
    ds = np.diff(stamps[:taken, 0])
    assert np.all(ds >= period // 2)  # no burst of back-to-back reads after the stall
    assert np.all(raw[:taken] == 0) and np.all(raw[taken:] == 1)  # both groups' reads copied in, nothing beyond
    assert np.all(stamps[:taken, 1] > stamps[:taken, 0])


def test_python_loop_back_to_back_at_period_zero(monkeypatch):
    clock = FakeClock(step=100)
    o, fds = fake_loop_observer(monkeypatch, clock, ngroups=1)
    try:
        raw = np.ones((10, 1, 4), dtype=np.uint64)
        stamps = np.zeros((10, 2), dtype=np.int64)
        assert o._python_loop(raw, stamps, 10, 32, 0) == (10, 0)
    finally:
        os.close(fds[0])
    assert np.all(np.diff(stamps[:, 0]) > 0) and np.all(raw == 0)


@native
def test_native_loop_counts_slots_already_missed_as_late():
    from pmuscope import _native

    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        n, size, period = 20, 16, 200_000
        stamps = np.zeros((n, 2), dtype=np.int64)
        data = np.ones((n, 2, size // 8), dtype=np.uint64)
        # a grid that started 10.3 periods ago: slots 0..10 are missed, slot 11 is the next one
        start = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - int(10.3 * period)
        taken, late, slot, got_start = _native.sample_loop([fd, fd], size, n, period, stamps, data, start, 0, n)
    finally:
        os.close(fd)
    assert got_start == start and slot == n and taken + late == n
    assert 11 <= late <= n and np.all(data[:taken] == 0) and np.all(data[taken:] == 1)
    assert np.all(np.diff(stamps[:taken, 0]) >= period // 2)


@native
def test_native_loop_continues_the_grid_across_calls():
    from pmuscope import _native

    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        period, n = 300_000, 12
        stamps = np.zeros((n, 2), dtype=np.int64)
        data = np.zeros((n, 24), dtype=np.uint8)
        t1, l1, slot, start = _native.sample_loop(fd, 24, 5, period, stamps[:5], data[:5], 0, 0, n)
        assert t1 <= 5 and t1 + l1 == slot
        t2, l2, slot2, start2 = _native.sample_loop(fd, 24, n - t1, period, stamps[t1:], data[t1:], start, slot, n)
    finally:
        os.close(fd)
    assert start2 == start and slot2 == n and t1 + t2 + l1 + l2 == n
    # every stamp is at or after its slot on the grid (CLOCK_MONOTONIC_RAW runs at most a little apart
    # from CLOCK_MONOTONIC over 4 ms); the grid carried on from the first call
    taken = t1 + t2
    assert np.all(np.diff(stamps[:taken, 0]) >= period // 2)
    assert stamps[taken - 1, 0] - stamps[0, 0] <= (n - 1) * period + period // 2 + 5_000_000


@native
def test_native_loop_refuses_small_buffers_and_bad_fds():
    from pmuscope import _native

    with pytest.raises(ValueError, match="too small"):
        _native.sample_loop(0, 32, 10, 1000, np.zeros((5, 2), np.int64), np.zeros(320, np.uint8))
    with pytest.raises(ValueError, match="too small"):
        _native.sample_loop([0, 0], 32, 10, 1000, np.zeros((10, 2), np.int64), np.zeros(320, np.uint8))
    with pytest.raises(TypeError):
        _native.sample_loop("x", 32, 1, 1000, np.zeros((1, 2), np.int64), np.zeros(32, np.uint8))
    r, w = os.pipe()
    os.close(w)
    try:  # EOF: the read returns 0 bytes, no sample
        with pytest.raises(OSError):
            _native.sample_loop(r, 32, 1, 0, np.zeros((1, 2), np.int64), np.zeros(32, np.uint8))
    finally:
        os.close(r)


# -- SCHED_FIFO for the observer thread


def test_realtime_only_when_the_target_can_run_elsewhere(monkeypatch):
    o = Observer([TASK_CLOCK], cpu=1, rate_hz=1000, duration=0.1)
    assert o._target_has_other_cpus(0) and not o._target_has_other_cpus(1) and not o._target_has_other_cpus(None)
    affinity = {4242: {0, 1}, 4343: {1}}

    def getaffinity(pid):
        if pid not in affinity:
            raise ProcessLookupError(pid)
        return affinity[pid]

    monkeypatch.setattr(os, "sched_getaffinity", getaffinity)
    assert Observer([TASK_CLOCK], tid=4242, rate_hz=1000, duration=0.1)._target_has_other_cpus(1)
    assert not Observer([TASK_CLOCK], tid=4343, rate_hz=1000, duration=0.1)._target_has_other_cpus(1)
    gone = Observer([TASK_CLOCK], tid=4242, rate_hz=1000, duration=0.1)
    gone.tid = 99999  # exited since: no realtime rather than an error
    assert not gone._target_has_other_cpus(1)


def test_realtime_asked_refused_and_required(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda pid, policy, param: calls.append((pid, policy)))
    o = Observer([TASK_CLOCK], cpu=1, rate_hz=1000, duration=0.1)  # realtime=None: when it helps
    o._set_realtime(0)
    assert calls == [(0, os.SCHED_FIFO)] and o.realtime_used
    o = Observer([TASK_CLOCK], cpu=1, rate_hz=1000, duration=0.1)
    o._set_realtime(1)  # the observer would share the target's only CPU: no SCHED_FIFO spinning over it
    assert len(calls) == 1 and not o.realtime_used
    o = Observer([TASK_CLOCK], cpu=1, rate_hz=1000, duration=0.1, realtime=False)
    o._set_realtime(0)
    assert len(calls) == 1 and not o.realtime_used

    def refuse(pid, policy, param):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    o = Observer([TASK_CLOCK], cpu=1, rate_hz=1000, duration=0.1)
    o._set_realtime(0)  # not permitted: the run goes on without it
    assert not o.realtime_used
    o = Observer([TASK_CLOCK], cpu=1, rate_hz=1000, duration=0.1, realtime=True)
    with pytest.raises(PmuscopeError, match="cannot give the observer thread SCHED_FIFO priority"):
        o._set_realtime(0)


@native
def test_both_loops_store_the_same_rows(tmp_path, monkeypatch):
    """Each sample's reads, group by group, land in the same place of the output
    in both loops: a file read sequentially stands in for the counters."""
    n, size, ngroups = 100, 40, 3
    path = tmp_path / "counters"
    path.write_bytes(np.arange(n * size * 2 // 8, dtype=np.uint64).tobytes())
    rows = {}
    for loop in ("python", "native"):
        o = observer()
        fds = [os.open(path, os.O_RDONLY) for _ in range(ngroups)]
        for g, fd in enumerate(fds):
            os.lseek(fd, g * 8 * 7, os.SEEK_SET)  # each group starts at its own word
        o._groups = [[_Fd(fd)] for fd in fds]
        raw = np.zeros((n, ngroups, size // 8), dtype=np.uint64)
        stamps = np.zeros((n, 2), dtype=np.int64)
        try:
            taken, late = getattr(o, f"_{loop}_loop")(raw, stamps, n, size, 0)
        finally:
            for fd in fds:
                os.close(fd)
        assert (taken, late) == (n, 0)
        assert np.all(np.diff(stamps[:, 0]) > 0) and np.all(stamps[:, 1] >= stamps[:, 0])
        rows[loop] = raw
    assert np.array_equal(rows["python"], rows["native"])
    # sample i of group g holds words g*7 + i*5 ... g*7 + i*5 + 4
    assert rows["native"][7, 2].tolist() == list(range(2 * 7 + 7 * 5, 2 * 7 + 7 * 5 + 5))


@native
def test_more_threads_than_the_native_loop_reads(monkeypatch):
    from pmuscope import _native

    monkeypatch.delenv("PMUSCOPE_OBSERVE_LOOP", raising=False)
    most = _native.SAMPLE_LOOP_MAX_FDS
    o = observer()
    o._groups = [[_Fd(-1)]] * (most + 1)
    monkeypatch.setattr(o, "calibrate", lambda size: {"python": LoopCost(50_000, 20), "native": NAT})
    assert o._decide_loop(32, 20_000) == ("python", f"{most + 1} threads: the native loop reads at most {most}")
    o = observer(loop="native")
    o._groups = [[_Fd(-1)]] * (most + 1)
    with pytest.raises(PmuscopeError, match=f"the native loop reads at most {most} threads; this target has {most + 1}"):
        o._decide_loop(32, 20_000)
    with pytest.raises(ValueError, match="1 to"):
        _native.sample_loop([0] * (most + 1), 8, 1, 0, np.zeros((1, 2), np.int64), np.zeros(8 * (most + 1), np.uint8))
