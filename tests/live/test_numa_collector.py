"""The per-CPU switch-sampling groups on this machine: the leader count and the
samples agree, every CPU's interval is accounted for, and CPUs can be added and
removed between refreshes (what a hot-plugged CPU goes through)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.numa.collector import SwitchCollector
from pmuscope.numa.platforms import platform_for
from pmuscope.system import read_cpu_identity


def _collector(cpus, hardware=False):
    c = SwitchCollector(platform_for(read_cpu_identity()), cpus, hardware=hardware)
    try:
        c.open()
    except PmuscopeError as err:
        pytest.skip(f"CPU-wide perf events do not open here: {err}")
    return c.start()


def test_every_cpu_interval_is_accounted_for():
    cpus = sorted(os.sched_getaffinity(0))
    c = _collector(cpus)
    # a task that switches out ~50 times (2 ms of work, 8 ms asleep): whatever else
    # runs (idle on a quiet machine, busy processes on a loaded one), its time is charged
    work = subprocess.Popen([sys.executable, "-c",
                             "import time\nfor _ in range(50):\n t=time.process_time()\n"
                             " while time.process_time()-t<0.002: pass\n time.sleep(0.008)"])
    try:
        first = c.collect()
        work.wait(30)
        time.sleep(0.05)
        att = c.collect()
    finally:
        c.close()
        if work.poll() is None:
            work.kill()
    assert set(att.intervals_ns) == set(cpus)
    for cpu, interval in att.intervals_ns.items():
        assert 0.3e9 < interval < 30e9
        # since start, each CPU's time went to a thread or "unattributed", or is still carried
        # (its tail waits for the next switch-out): never more than the time that passed
        charged = first.values[first.cpu == cpu, 0].sum() + att.values[att.cpu == cpu, 0].sum()
        assert charged <= first.intervals_ns[cpu] + interval + 1, (cpu, charged, first.intervals_ns, att.intervals_ns,
                                                                 first.gaps, first.rebuilt, att.gaps, att.rebuilt)
        assert charged >= 0
    assert att.samples > 0 and att.values[:, 0].sum() > 0
    # the switching task was charged its CPU time (~100 ms of work), less its carried tail
    mine = first.values[first.pid == work.pid, 0].sum() + att.values[att.pid == work.pid, 0].sum()
    assert 50e6 <= mine <= 2e9, mine


def test_cpus_added_and_removed_between_refreshes():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    c = _collector(cpus[:1])
    try:
        c.collect()
        c.sync_cpus(cpus)  # a CPU came online
        assert c.cpus == cpus
        time.sleep(0.3)
        att = c.collect()
        assert set(np.unique(att.cpu).tolist()) <= set(cpus) and cpus[1] in att.intervals_ns
        c.sync_cpus(cpus[1:])  # cpu went away
        time.sleep(0.2)
        att = c.collect()
        assert set(att.intervals_ns) == set(cpus[1:])
    finally:
        c.close()


def test_move_pages_query_finds_our_own_pages():
    import ctypes

    from pmuscope.numa.latency import PAGE, move_pages_query
    from pmuscope.numa.model import read_nodes

    buf = bytearray(4 * PAGE)
    for i in range(0, len(buf), PAGE):
        buf[i] = 1  # resident
    base = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    status = move_pages_query(0, np.array([base + PAGE, 0], dtype=np.uint64))
    nodes = [n.id for n in read_nodes("/")]
    assert status[0] in nodes
    assert status[1] == -14  # address 0: -EFAULT


def test_latency_view_names_why_it_is_empty_or_fills_areas():
    from pmuscope.numa.latency import measure_latency
    from pmuscope.numa.platforms import platform_for

    res = measure_latency(os.getpid(), platform_for(read_cpu_identity()), sorted(os.sched_getaffinity(0)), duration=0.2)
    if res["reason"] is None:
        assert res["samples"] > 0 and abs(sum(a["access_pct"] or 0 for a in res["areas"]) - 100) < 1e-6
    else:
        assert res["samples"] == 0 and res["reason"]  # e.g. "IBS op: no ibs_op PMU here"
