"""GearDVFS ``perf_lib`` compatibility: the ``PyPerf`` API, done right.

GearDVFS (MobiCom'23) reads per-CPU hardware counters through a small C
library, ``sys_perf.so``, with this Python API::

    get_supported_names()   -> ["PERF_COUNT_HW_CPU_CYCLES", ...]            # 7 names
    get_supported_abbrevs() -> ["cycles", "instructions", "cache-ref", ...]
    get_supported_events()  -> [[name, abbrev, PERF_COUNT_HW_* value], ...]
    sys_perf(cpus, events, micro_seconds) -> result[i][j]  # events[j] on cpus[i]

where ``events`` are indices into that 7-entry list. This module offers the
same functions and return shapes, but:

- the per-CPU groups are opened **once** per (cpus, events) and reused
  (RESET + ENABLE, sleep, DISABLE, READ per call), not reopened every sample;
- counts are **scaled** by time_enabled/time_running when the PMU multiplexes
  (a group too large for the PMU is reopened as separate, multiplexed events);
- failures raise :class:`~pmuscope.errors.PmuscopeError` subclasses (an
  unsupported ``stalled-cycles-*`` raises EventNotSupportedError naming it)
  instead of ``exit(EXIT_FAILURE)``;
- no Python C API is called from a released-GIL context.

Usage, unchanged from GearDVFS clients::

    from pmuscope.compat import geardvfs as Perf
    pmus = Perf.sys_perf([0, 1], [0, 1], 10_000)   # 10 ms window
"""

from __future__ import annotations

import os
import struct
import threading
import time
from typing import Sequence

from .. import errors
from ..kernel import abi
from ..kernel import syscall as _syscall
from ..kernel.syscall import PerfEventFd

#: the kernel calls, module-level so tests can script them
_read = os.read
_ioctl = _syscall.ioctl

__all__ = [
    "EVENT_LIST",
    "get_supported_names",
    "get_supported_abbrevs",
    "get_supported_events",
    "sys_perf",
    "sample_dict",
    "SysPerf",
    "close_all",
]

#: (name, abbrev, PERF_COUNT_HW_* value), in perf_lib's order: indices are its event ids
EVENT_LIST: tuple[tuple[str, str, int], ...] = (
    ("PERF_COUNT_HW_CPU_CYCLES", "cycles", abi.PerfHwId.CPU_CYCLES),
    ("PERF_COUNT_HW_INSTRUCTIONS", "instructions", abi.PerfHwId.INSTRUCTIONS),
    ("PERF_COUNT_HW_CACHE_REFERENCES", "cache-ref", abi.PerfHwId.CACHE_REFERENCES),
    ("PERF_COUNT_HW_CACHE_MISSES", "cache-miss", abi.PerfHwId.CACHE_MISSES),
    ("PERF_COUNT_HW_STALLED_CYCLES_FRONTEND", "stalled-cycles-front", abi.PerfHwId.STALLED_CYCLES_FRONTEND),
    ("PERF_COUNT_HW_STALLED_CYCLES_BACKEND", "stalled-cycles-back", abi.PerfHwId.STALLED_CYCLES_BACKEND),
    ("PERF_COUNT_HW_BRANCH_MISSES", "branch-miss", abi.PerfHwId.BRANCH_MISSES),
)


def get_supported_names() -> list[str]:
    """``["PERF_COUNT_HW_CPU_CYCLES", ...]`` (7 entries, perf_lib's order)."""
    return [name for name, _, _ in EVENT_LIST]


def get_supported_abbrevs() -> list[str]:
    """``["cycles", "instructions", "cache-ref", "cache-miss",
    "stalled-cycles-front", "stalled-cycles-back", "branch-miss"]``."""
    return [abbrev for _, abbrev, _ in EVENT_LIST]


def get_supported_events() -> list[list]:
    """``[[name, abbrev, PERF_COUNT_HW_* value], ...]``."""
    return [[name, abbrev, int(val)] for name, abbrev, val in EVENT_LIST]


_READ_FORMAT = abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING


def _check_args(cpus: Sequence[int], events: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if isinstance(cpus, (str, bytes)) or isinstance(events, (str, bytes)):
        raise errors.PmuscopeError("sys_perf takes lists of ints: cpus like [0, 1], events like [0, 1] (indices into get_supported_names())")
    cpus_t = tuple(int(c) for c in cpus)
    events_t = tuple(int(e) for e in events)
    if not cpus_t or not events_t:
        raise errors.PmuscopeError("sys_perf needs at least one CPU and one event")
    for e in events_t:
        if not 0 <= e < len(EVENT_LIST):
            raise errors.PmuscopeError(
                f"event index {e} is out of range: perf_lib events are 0..{len(EVENT_LIST) - 1} ({', '.join(get_supported_abbrevs())})"
            )
    ncpu = os.cpu_count() or 1
    for c in cpus_t:
        if not 0 <= c < ncpu:
            raise errors.PmuscopeError(f"CPU {c} does not exist here (CPUs 0..{ncpu - 1})")
    if len(set(events_t)) != len(events_t):
        raise errors.PmuscopeError(f"event indices repeat in {list(events_t)}")
    return cpus_t, events_t


class SysPerf:
    """Persistent per-CPU counters for one (cpus, events) pair.

    One perf group per CPU (``pid=-1, cpu=c``, ``exclude_hv=1``, kernel
    counted unless ``exclude_kernel``), read with
    ``GROUP|TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING``. If the group cannot be
    scheduled as a whole (more events than counters) it is reopened as
    independent events, which the kernel multiplexes and this class scales.
    """

    def __init__(self, cpus: Sequence[int], events: Sequence[int], *, exclude_kernel: bool = False) -> None:
        self.cpus, self.events = _check_args(cpus, events)
        self.exclude_kernel = exclude_kernel
        self.grouped = True
        self._fds: list[list[PerfEventFd]] = []
        self._lock = threading.Lock()
        self._open(grouped=True)

    def _attr(self, event: int, leader: bool) -> abi.perf_event_attr:
        return abi.perf_event_attr(
            type=abi.PERF_TYPE_HARDWARE,
            config=int(EVENT_LIST[event][2]),
            disabled=1 if leader else 0,
            exclude_kernel=1 if self.exclude_kernel else 0,
            exclude_hv=1,
            read_format=_READ_FORMAT,
        )

    def _open(self, grouped: bool) -> None:
        self.close()
        self.grouped = grouped
        try:
            for cpu in self.cpus:
                row: list[PerfEventFd] = []
                for j, ev in enumerate(self.events):
                    leader = None if (not grouped or j == 0) else row[0]
                    row.append(
                        PerfEventFd(self._attr(ev, leader is None), pid=-1, cpu=cpu, group=leader, event=EVENT_LIST[ev][1])
                    )
                self._fds.append(row)
        except BaseException:
            self.close()
            raise
        self._layouts = {n: struct.Struct(f"={3 + n}Q") for n in {1, len(self.events)}}

    def close(self) -> None:
        for row in self._fds:
            for fd in row:
                fd.close()
        self._fds = []

    def __enter__(self) -> "SysPerf":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _leaders(self) -> list[PerfEventFd]:
        return [fd for row in self._fds for fd in (row[:1] if self.grouped else row)]

    def _read_row(self, row: list[PerfEventFd]) -> list[tuple[int, int, int]]:
        """[(value, enabled, running)] per event of one CPU."""
        if self.grouped:
            lay = self._layouts[len(self.events)]
            nr, ena, run, *vals = lay.unpack(_read(row[0].fd, lay.size))
            return [(v, ena, run) for v in vals]
        lay = self._layouts[1]
        out = []
        for fd in row:
            _, ena, run, val = lay.unpack(_read(fd.fd, lay.size))
            out.append((val, ena, run))
        return out

    def sample(self, micro_seconds: int) -> list[list[int]]:
        """RESET+ENABLE every CPU, sleep ``micro_seconds``, DISABLE, READ;
        ``result[i][j]`` is events[j] on cpus[i], scaled when multiplexed."""
        if micro_seconds < 0:
            raise errors.PmuscopeError(f"micro_seconds must be >= 0, not {micro_seconds}")
        with self._lock:
            if not self._fds:
                self._open(self.grouped)
            result = self._window(micro_seconds)
            if result is None and self.grouped:
                self._open(grouped=False)  # the group never got the PMU: multiplex instead
                result = self._window(micro_seconds)
            if result is None:
                raise errors.EventNotSupportedError(
                    f"the counters for {[EVENT_LIST[e][1] for e in self.events]} never ran on CPUs {list(self.cpus)} "
                    f"during {micro_seconds} µs (PMU busy or the window too short to be scheduled); retry with a longer window"
                )
            return result

    def _window(self, micro_seconds: int) -> list[list[int]] | None:
        leaders = [fd.fd for fd in self._leaders()]
        flag = abi.PERF_IOC_FLAG_GROUP if self.grouped else 0
        for fd in leaders:
            _ioctl(fd, abi.PERF_EVENT_IOC_RESET, flag)
        for fd in leaders:
            _ioctl(fd, abi.PERF_EVENT_IOC_ENABLE, flag)
        time.sleep(micro_seconds / 1e6)
        for fd in leaders:
            _ioctl(fd, abi.PERF_EVENT_IOC_DISABLE, flag)
        result: list[list[int]] = []
        for row in self._fds:
            counts = []
            for val, ena, run in self._read_row(row):
                if run == 0:
                    if ena == 0 and micro_seconds == 0:
                        counts.append(0)
                        continue
                    return None
                counts.append(int(round(val * ena / run)) if run != ena else int(val))
            result.append(counts)
        return result


_cache: dict[tuple, SysPerf] = {}
_cache_lock = threading.Lock()


def sys_perf(cpus: Sequence[int], events: Sequence[int], micro_seconds: int) -> list[list[int]]:
    """perf_lib's ``sys_perf``: count ``events`` (indices into
    :func:`get_supported_names`) on each of ``cpus`` for ``micro_seconds``
    and return ``result[i][j]`` = count of events[j] on cpus[i].

    Counters are opened on the first call for a given (cpus, events) and
    reused; :func:`close_all` releases them. Raises PmuscopeError (for
    example EventNotSupportedError for ``stalled-cycles-*`` on CPUs without
    those generic events, PermissionDeniedError when CPU-wide counting is not
    allowed) instead of exiting the process.
    """
    key = (*_check_args(cpus, events), False)
    with _cache_lock:
        sp = _cache.get(key)
        if sp is None:
            sp = SysPerf(key[0], key[1])
            _cache[key] = sp
    return sp.sample(int(micro_seconds))


def close_all() -> None:
    """Close every counter :func:`sys_perf` keeps open."""
    with _cache_lock:
        for sp in _cache.values():
            sp.close()
        _cache.clear()


def sample_dict(
    cpus: Sequence[int],
    events: Sequence[int],
    micro_seconds: int,
    *,
    key: str = "CPU{cpu}_{abbrev}",
    context: bool = False,
    sysfs: str = "/sys",
    procfs: str = "/proc",
) -> dict:
    """One sample as the flat dict GearDVFS's trainer stores: ``CPU0_cycles``
    ..., plus ``Time_Stamp`` (seconds since the epoch, at the window's end).

    With ``context=True`` the dict also holds what GearDVFS's monitor reads
    around the window: ``CPU{k}_FREQ`` (MHz, cpufreq), ``CPU{k}_UTIL`` (busy
    % over the window, /proc/stat), ``CPU{k}_GOV`` and the thermal, hwmon and
    powercap readings (``temp_*_c``, ``hwmon_*``, ``energy_*_j`` over the
    window) as :mod:`pmuscope.counting.context` names them. Sources the
    machine lacks are NaN or absent.
    """
    cpus_t, events_t = _check_args(cpus, events)
    ctx = None
    if context:
        from ..counting.context import ContextSampler

        ctx = ContextSampler(cpus_t, sysfs, procfs)
        ctx.sample()  # start the /proc/stat and energy deltas
    try:
        counts = sys_perf(cpus_t, events_t, micro_seconds)
        out: dict = {"Time_Stamp": time.time()}
        for i, cpu in enumerate(cpus_t):
            for j, ev in enumerate(events_t):
                out[key.format(cpu=cpu, abbrev=EVENT_LIST[ev][1])] = counts[i][j]
        if ctx is not None:
            freq, util, machine = ctx.sample()
            for i, cpu in enumerate(cpus_t):
                out[f"CPU{cpu}_FREQ"] = float(freq[i])
                out[f"CPU{cpu}_UTIL"] = float(util[i]) * 100.0
                out[f"CPU{cpu}_GOV"] = ctx.governors[i]
            out.update(machine)
        return out
    finally:
        if ctx is not None:
            ctx.close()
