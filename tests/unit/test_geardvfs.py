"""GearDVFS perf_lib compatibility against a scripted kernel."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from pmuscope import errors
from pmuscope.compat import geardvfs as gd
from pmuscope.kernel import abi
from pmuscope.kernel import syscall as sc


def test_supported_lists_match_perf_lib():
    assert gd.get_supported_names() == [
        "PERF_COUNT_HW_CPU_CYCLES", "PERF_COUNT_HW_INSTRUCTIONS", "PERF_COUNT_HW_CACHE_REFERENCES",
        "PERF_COUNT_HW_CACHE_MISSES", "PERF_COUNT_HW_STALLED_CYCLES_FRONTEND",
        "PERF_COUNT_HW_STALLED_CYCLES_BACKEND", "PERF_COUNT_HW_BRANCH_MISSES",
    ]
    assert gd.get_supported_abbrevs() == [
        "cycles", "instructions", "cache-ref", "cache-miss", "stalled-cycles-front", "stalled-cycles-back", "branch-miss",
    ]
    # [name, abbrev, PERF_COUNT_HW_* value] — the values are perf_event.h's, not the indices
    assert gd.get_supported_events()[4] == ["PERF_COUNT_HW_STALLED_CYCLES_FRONTEND", "stalled-cycles-front", 7]
    assert [e[2] for e in gd.get_supported_events()] == [0, 1, 2, 3, 7, 8, 5]


class FakeKernel:
    """perf_event_open returns /dev/null fds; reads return scripted group reads."""

    def __init__(self, monkeypatch, counts, running=None, unsupported=()):
        self.counts = counts  # (cpu, hw config) -> count per window
        self.running = running or {}  # cpu -> (enabled, running) of the window
        self.unsupported = set(unsupported)
        self.opens = []
        self.ioctls = []
        self.fd_info = {}
        monkeypatch.setattr(sc, "_open_hook", self.open)
        monkeypatch.setattr(gd, "_read", self.read)
        monkeypatch.setattr(gd, "_ioctl", self.ioctl)

    def open(self, attr, pid, cpu, group_fd, flags):
        if attr.config in self.unsupported:
            raise OSError(errno.ENOENT, "fake")
        fd = os.open(os.devnull, os.O_RDONLY)
        self.opens.append((attr.copy(), pid, cpu, group_fd))
        leader = group_fd if group_fd >= 0 else fd
        self.fd_info[fd] = (cpu, attr.config, leader)
        return fd

    def ioctl(self, fd, request, arg):
        self.ioctls.append((fd, request, arg))
        return 0

    def read(self, fd, size):
        cpu, config, leader = self.fd_info[fd]
        ena, run = self.running.get(cpu, (1000, 1000))
        if leader == fd and size > 32:  # a group read
            members = [c for f, (cp, c, ld) in sorted(self.fd_info.items()) if ld == fd]
            return struct.pack(f"={3 + len(members)}Q", len(members), ena, run, *(self.counts[(cpu, c)] for c in members))
        return struct.pack("=4Q", 1, ena, run, self.counts[(cpu, config)])


@pytest.fixture(autouse=True)
def _fresh_cache():
    gd.close_all()
    yield
    gd.close_all()


def test_sys_perf_shape_and_persistent_fds(monkeypatch):
    k = FakeKernel(monkeypatch, {(0, 0): 100, (0, 1): 250, (1, 0): 7, (1, 1): 9})
    assert gd.sys_perf([0, 1], [0, 1], 0) == [[100, 250], [7, 9]]
    assert len(k.opens) == 4
    assert gd.sys_perf([0, 1], [0, 1], 0) == [[100, 250], [7, 9]]
    assert len(k.opens) == 4  # opened once, reused
    attr, pid, cpu, group_fd = k.opens[0]
    assert (pid, cpu, group_fd, attr.type, attr.disabled, attr.exclude_hv, attr.exclude_kernel) == (-1, 0, -1, 0, 1, 1, 0)
    assert attr.read_format == abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING
    assert k.opens[1][3] != -1  # instructions joins cpu0's group
    # per call: RESET, ENABLE, DISABLE on each CPU's leader, with the group flag
    reqs = [(r, a) for _, r, a in k.ioctls[:6]]
    assert reqs == [(abi.PERF_EVENT_IOC_RESET, 1)] * 2 + [(abi.PERF_EVENT_IOC_ENABLE, 1)] * 2 + [(abi.PERF_EVENT_IOC_DISABLE, 1)] * 2


def test_sys_perf_scales_multiplexed_counts(monkeypatch):
    FakeKernel(monkeypatch, {(0, 0): 100, (0, 3): 10}, running={0: (1000, 250)})
    assert gd.sys_perf([0], [0, 3], 0) == [[400, 40]]


def test_sys_perf_falls_back_to_multiplexing_when_group_never_runs(monkeypatch):
    k = FakeKernel(monkeypatch, {(0, 0): 100, (0, 1): 300}, running={0: (1000, 0)})
    real_read = k.read

    def read(fd, size):
        # the group never runs; separately opened events each ran half the time
        if size > 32:
            return real_read(fd, size)
        cpu, config, _ = k.fd_info[fd]
        return struct.pack("=4Q", 1, 1000, 500, k.counts[(cpu, config)])

    monkeypatch.setattr(gd, "_read", read)
    assert gd.sys_perf([0], [0, 1], 0) == [[200, 600]]
    assert len(k.opens) == 4  # 2 grouped, then 2 alone
    assert all(g == -1 for *_, g in k.opens[2:])


def test_unsupported_event_raises_not_exits(monkeypatch):
    FakeKernel(monkeypatch, {}, unsupported={abi.PerfHwId.STALLED_CYCLES_BACKEND})
    with pytest.raises(errors.EventNotSupportedError, match="stalled-cycles-back"):
        gd.sys_perf([0], [0, 4, 5], 10)


@pytest.mark.parametrize(
    "cpus, events, match",
    [([0], [7], "out of range"), ([0], [-1], "out of range"), ([], [0], "at least one"),
     ([10_000], [0], "does not exist"), ([0], [1, 1], "repeat"), ("0", [0], "lists of ints")],
)
def test_bad_arguments(cpus, events, match):
    with pytest.raises(errors.PmuscopeError, match=match):
        gd.sys_perf(cpus, events, 10)


def test_sample_dict_keys(monkeypatch):
    FakeKernel(monkeypatch, {(0, 0): 5, (0, 1): 8})
    d = gd.sample_dict([0], [0, 1], 0)
    assert d["CPU0_cycles"] == 5 and d["CPU0_instructions"] == 8
    assert isinstance(d["Time_Stamp"], float)


def test_negative_window(monkeypatch):
    FakeKernel(monkeypatch, {(0, 0): 1})
    with pytest.raises(errors.PmuscopeError, match=">= 0"):
        gd.sys_perf([0], [0], -5)


def test_sample_dict_with_context(monkeypatch, data_dir):
    monkeypatch.setattr(gd.os, "cpu_count", lambda: 4)  # the fixture machine's CPUs
    FakeKernel(monkeypatch, {(0, 0): 5, (2, 0): 6})
    d = gd.sample_dict([0, 2], [0], 0, context=True, sysfs=str(data_dir / "dvfs/sys"), procfs=str(data_dir / "dvfs/proc0"))
    assert d["CPU0_cycles"] == 5 and d["CPU2_cycles"] == 6
    assert d["CPU0_FREQ"] == pytest.approx(2893.421) and d["CPU2_FREQ"] == pytest.approx(3400.012)
    assert d["CPU0_GOV"] == "powersave" and d["CPU2_GOV"] == "performance"
    # the same /proc/stat before and after: no tick elapsed, utilization unknown
    assert d["CPU0_UTIL"] != d["CPU0_UTIL"]
    assert d["temp_x86_pkg_temp_c"] == pytest.approx(46.0)
    assert d["hwmon_ina3221_power1_w"] == pytest.approx(5.376)
    assert d["energy_package_0_j"] == 0.0  # unchanged counter over the window


def test_importable_as_pyperf_with_lowercase_keys(monkeypatch):
    import PyPerf as Perf

    assert Perf.sys_perf is gd.sys_perf and Perf.get_supported_abbrevs() == gd.get_supported_abbrevs()
    FakeKernel(monkeypatch, {(0, 0): 5, (0, 1): 8})
    d = Perf.sample_dict([0], [0, 1], 0)
    assert d["cpu0_cycles"] == 5 and d["cpu0_instructions"] == 8 and "CPU0_cycles" not in d
