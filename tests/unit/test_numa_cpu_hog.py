"""A thread that keeps its CPU for a whole interval (no context switch at all)
is charged that interval at the read, not left for the next switch-out: a
CPU hog must not show 0 % in a one-shot snapshot."""

import threading

import numpy as np

from pmuscope.numa import collector as collector_mod
from pmuscope.numa.attribution import SwitchAttributor


def _collector(monkeypatch, reads, decoded):
    c = collector_mod.SwitchCollector.__new__(collector_mod.SwitchCollector)
    c.members = []
    c.cpus = [0]
    c._groups = {0: (object(), [], type("Ring", (), {"lost": 0})())}
    c._chunks, c._left, c._times, c.multiplexed = {0: []}, {0: []}, {}, {}
    c._running_at_read = {}
    c._lock = threading.Lock()
    c.attributor = SwitchAttributor(c.columns)
    c.attributor.start(0, 0, [0])
    it = iter(reads)
    monkeypatch.setattr(collector_mod, "_read_group", lambda leader, nr: next(it))
    monkeypatch.setattr(collector_mod.time, "clock_gettime_ns", lambda clk: it_t.pop(0))
    monkeypatch.setattr(c, "_drain", lambda: None)
    dec = iter(decoded)
    monkeypatch.setattr(c, "_decode", lambda cpu: next(dec))
    return c


it_t: list[int] = []


def _time(att, pid, tid):
    m = (att.pid == pid) & (att.tid == tid)
    return float(att.values[m, 0].sum())


def test_cpu_hog_is_charged_at_the_read(monkeypatch):
    it_t[:] = [1_000, 2_000, 3_000]
    # interval 1: the hog (pid 7) is switched in at t=400 and never switches out;
    # intervals 2 and 3: no switch at all on the CPU
    c = _collector(monkeypatch, reads=[([5], 0, 0), ([5], 0, 0), ([5], 0, 0)],
                   decoded=[([], [(400, 7, 7)], [(400, 7, 7)]), ([], [], []), ([], [], [])])
    c.attributor._cpus[0].n = 5  # the leader count the samples before tracking reached
    first = c.collect()
    assert _time(first, 7, 7) == 1_000  # from the interval start (nothing earlier is known) to the read
    second = c.collect()
    assert _time(second, 7, 7) == 1_000  # the whole second interval: still running, no switch
    third = c.collect()
    assert _time(third, 7, 7) == 1_000
    assert np.all(third.pid == 7)
