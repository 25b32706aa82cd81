"""The kernel layer owns its fds: 10,000 opens and closes leave the fd count unchanged."""

from __future__ import annotations

import fcntl
import gc
import os

import pytest

from pmuscope.errors import EventNotSupportedError
from pmuscope.kernel import PerfEventFd, abi, perf_event_attr


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def task_clock() -> perf_event_attr:
    return perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.TASK_CLOCK, exclude_kernel=1, disabled=1)


def test_ten_thousand_events_leave_no_fd_behind():
    gc.collect()
    start = fd_count()
    opened = 0

    # 4,000 closed explicitly, in batches that are really open at the same time
    for _ in range(4):
        batch = [PerfEventFd(task_clock(), event="task-clock") for _ in range(1000)]
        assert fd_count() == start + 1000
        assert all(fcntl.fcntl(ev.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC for ev in batch[:50])
        for ev in batch:
            ev.close()
            ev.close()  # idempotent
            assert ev.closed and ev.fd == -1
        opened += len(batch)
        assert fd_count() == start

    # 4,000 through the context manager
    for _ in range(4000):
        with PerfEventFd(task_clock(), event="task-clock") as ev:
            assert ev.fd >= 0
        assert ev.closed
        opened += 1
    assert fd_count() == start

    # 1,000 dropped without close (reference counting)
    held = [PerfEventFd(task_clock()) for _ in range(1000)]
    assert fd_count() == start + 1000
    del held
    opened += 1000
    assert fd_count() == start

    # 1,000 kept alive by reference cycles: only the cyclic garbage collector frees them
    gc.disable()
    try:
        for _ in range(1000):
            cycle: list = [PerfEventFd(task_clock())]
            cycle.append(cycle)
            del cycle
        opened += 1000
        assert fd_count() == start + 1000
        gc.collect()
    finally:
        gc.enable()
    assert fd_count() == start
    assert opened == 10_000


def test_failed_opens_leak_nothing():
    start = fd_count()
    for _ in range(500):
        with pytest.raises(EventNotSupportedError):
            PerfEventFd(perf_event_attr(type=9999, config=0), event="bogus")
    gc.collect()
    assert fd_count() == start


def test_group_members_and_reads_close_cleanly():
    start = fd_count()
    fmt = abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_ID
    for _ in range(200):
        with PerfEventFd(perf_event_attr(type=1, config=1, exclude_kernel=1, read_format=fmt)) as leader:
            with PerfEventFd(perf_event_attr(type=1, config=2, exclude_kernel=1, read_format=fmt), group=leader) as member:
                assert member.id() != leader.id()
                data = leader.read(8 * (1 + 2 * 2))
                assert int.from_bytes(data[:8], "little") == 2  # nr of group members
    assert fd_count() == start
