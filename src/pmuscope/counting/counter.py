"""Counting sessions: open one fd per (event, cpu, thread), enable, read, scale.

The object model follows libperf: every evsel has an fd grid ``[cpu_idx][thread_idx]``;
a ``{group}`` is opened with the leader's fd at the same cell as ``group_fd`` and read
with one ``read()`` of ``PERF_FORMAT_GROUP|ID|TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING``
per cell; an event outside a group is read alone (``ENA|RUN|ID``). Each read layout has
a precompiled :class:`struct.Struct`, and :meth:`Counter.read` does nothing per read but
``os.read`` per read unit: decoding happens lazily in
:class:`~pmuscope.counting.results.Counts`.

Two read paths give the same Counts: where the optional native helper is built, one C
call (``pmuscope._native.CountsReader``) reads every unit and fills a new Counts, because
in Python the call, list, clock and ``Counts.__init__`` around a 0.25 us software-counter
read doubled its cost (``benchmarks/bench_read.py``); the pure-Python reader is the
reference and the fallback. :data:`NATIVE_READ` (or ``PMUSCOPE_NATIVE_READ=0`` in the
environment) chooses, when a counter is opened.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Iterable, Sequence

from .. import errors
from ..events.defaults import apply_counting_defaults
from ..events.spec import EventSpec
from ..kernel import abi
from ..kernel import syscall as _sys
from .results import Counts, Layout
from ..system import cpu_list_arg as parse_cpu_list  # noqa: F401  (one cpulist parser, re-exported)
from ..system import online_cpus  # noqa: F401

try:  # optional native helper (setup.py builds it when a C compiler exists)
    from .. import _native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised where no compiler exists
    _native = None

_now = time.monotonic_ns

#: whether counters opened from now on read through the native helper (when it is
#: built); the tests flip it to run the same checks over both paths
NATIVE_READ = os.environ.get("PMUSCOPE_NATIVE_READ", "1") != "0"


def native_read_available() -> bool:
    """True when the native helper is built with the counter reader (an older build lacks it)."""
    return _native is not None and hasattr(_native, "CountsReader")


#: the Counts slots the native reader fills (layout, read buffers, timestamp, start),
#: and those it sets to None (nothing decoded yet): the same state Counts.__init__ makes
_NATIVE_FILL = ("layout", "_raws", "timestamp_ns", "start_ns")
_NATIVE_CLEAR = ("_data", "_agg")

#: seams for tests (a FakeKernel replaces these; the open seam is
#: ``pmuscope.kernel.syscall._open_hook``)
_read = os.read
_close = os.close
_ioctl = _sys.ioctl

GROUP_READ_FORMAT = (
    abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_ID | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING
)
SINGLE_READ_FORMAT = abi.PERF_FORMAT_ID | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING

#: ``{ u64 value; u64 time_enabled; u64 time_running; u64 id; }``
SINGLE_STRUCT = struct.Struct("=QQQQ")
_GROUP_STRUCTS: dict[int, struct.Struct] = {}


def group_struct(nr: int) -> struct.Struct:
    """``{ u64 nr; u64 time_enabled; u64 time_running; { u64 value; u64 id; } cntr[nr]; }``"""
    st = _GROUP_STRUCTS.get(nr)
    if st is None:
        st = _GROUP_STRUCTS[nr] = struct.Struct("=" + "Q" * (3 + 2 * nr))
    return st


# --- targets -----------------------------------------------------------------



def process_threads(pid: int, procfs: str = "/proc") -> list[int]:
    """The tids of ``pid`` (``/proc/PID/task``), sorted."""
    try:
        return sorted(int(t) for t in os.listdir(os.path.join(procfs, str(pid), "task")))
    except FileNotFoundError:
        raise errors.ProcessGoneError(f"no process {pid} (/proc/{pid}/task does not exist)", pid=pid) from None


def cgroup_dir(name: str, mounts: str = "/proc/mounts") -> str:
    """Path of cgroup ``name`` in the perf_event hierarchy: cgroup v1's
    ``perf_event`` controller if mounted, else the cgroup2 mount."""
    if os.path.isabs(name) and os.path.isdir(name):
        return name
    v1 = v2 = None
    try:
        with open(mounts) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 4:
                    continue
                if parts[2] == "cgroup" and "perf_event" in parts[3].split(","):
                    v1 = parts[1]
                elif parts[2] == "cgroup2" and v2 is None:
                    v2 = parts[1]
    except OSError:
        pass
    root = v1 or v2
    if root is None:
        raise errors.PmuscopeError("no perf_event cgroup hierarchy is mounted (neither cgroup v1 perf_event nor cgroup2)")
    path = os.path.join(root, name.lstrip("/"))
    if not os.path.isdir(path):
        raise errors.PmuscopeError(f"cgroup {name!r} not found: {path} is not a directory", cgroup=name)
    return path


# --- evsels ------------------------------------------------------------------

_CLOCK = {abi.PERF_COUNT_SW_CPU_CLOCK, abi.PERF_COUNT_SW_TASK_CLOCK}


class Evsel:
    """One event of a session: its spec, display scale/unit and fd grid."""

    __slots__ = ("index", "spec", "name", "scale", "unit", "group", "leader", "supported", "error", "fds", "tool")

    def __init__(self, index: int, spec: EventSpec, group: int, leader: bool) -> None:
        self.index = index
        self.spec = spec
        self.name = spec.name
        self.scale = spec.scale
        self.unit = spec.unit
        # perf prints the clock events in msec (evsel__init: evsel__is_clock)
        if not self.unit and self.scale == 1.0 and spec.attr.type == abi.PERF_TYPE_SOFTWARE and spec.attr.config in _CLOCK:
            self.scale, self.unit = 1e-6, "msec"
        #: perf's tool events (duration_time, user_time, system_time): measured here, not opened
        self.tool: str | None = spec.extra.get("tool")
        if self.tool:
            self.scale, self.unit = 1.0, "ns"
        self.group = group
        self.leader = leader
        self.supported = True
        self.error: str | None = None
        self.fds: list[list[int]] = []

    def __repr__(self) -> str:
        return f"Evsel({self.name!r}, group={self.group}, leader={self.leader}, supported={self.supported})"


def _parse(events: str | EventSpec | Iterable[str | EventSpec]) -> list[EventSpec]:
    if isinstance(events, EventSpec):
        return [events]
    if isinstance(events, str):
        from .. import events as _events

        parse = getattr(_events, "parse_events", None)
        if parse is None:
            raise errors.PmuscopeError("event parsing is not available in this build; pass EventSpec objects")
        return list(parse(events))
    out: list[EventSpec] = []
    for ev in events:
        out.extend(_parse(ev))
    return out


def _closed_reader():
    raise errors.PmuscopeError("the counter is closed (or was never opened): call start() first")


class Counter:
    """A counting session over events × CPUs × threads.

    Use :func:`count` to make one. ``start()`` opens (if needed) and enables,
    ``stop()`` disables, ``reset()`` zeroes, ``read()`` returns
    :class:`~pmuscope.counting.results.Counts`; ``close()`` releases the fds.
    As a context manager it starts on entry and stops and closes on exit
    (``counter.last`` then holds the final read).
    """

    def __init__(
        self,
        events,
        pid: int | Sequence[int] | None = None,
        tid: int | Sequence[int] | None = None,
        cpus: str | int | Sequence[int] | None = None,
        inherit: bool = True,
        cgroup: str | None = None,
        *,
        command: Sequence[str] | None = None,
        workload: "Workload | None" = None,
        system_wide: bool = False,
        tolerate_unsupported: bool = False,
        enable_on_exec: bool = True,
        procfs: str = "/proc",
        sysfs: str = "/sys",
    ) -> None:
        from .workload import Workload

        specs = _parse(events)
        if not specs:
            raise errors.PmuscopeError("no events to count")
        if command is not None:
            if workload is not None:
                raise errors.PmuscopeError("give either command= or workload=, not both")
            workload = Workload(list(command))
        self.workload = workload
        self.inherit = inherit
        self.tolerate_unsupported = tolerate_unsupported
        self.enable_on_exec = enable_on_exec
        self.procfs, self.sysfs = procfs, sysfs
        self.cgroup = cgroup
        self._cgroup_fd = -1

        # targets: cpus × threads (libperf's cpu map and thread map)
        if isinstance(cpus, str):
            cpu_list = online_cpus(sysfs) if cpus in ("all", "") else parse_cpu_list(cpus)
        elif isinstance(cpus, int):
            cpu_list = [cpus]
        elif cpus is not None:
            cpu_list = sorted(set(int(c) for c in cpus))
        else:
            cpu_list = None
        n_targets = sum(x is not None for x in (pid, tid, workload, cgroup))
        wide = cgroup is not None or system_wide or cpu_list is not None
        if n_targets - (workload is not None and wide) > 1:
            raise errors.PmuscopeError("give only one of pid=, tid=, command=/workload=, cgroup=")
        if workload is not None and not wide:
            threads = [workload.pid]
        elif pid is not None:
            pids = [pid] if isinstance(pid, int) else list(pid)
            threads = []
            for p in pids:
                threads.extend(process_threads(int(p), procfs))
        elif tid is not None:
            threads = [tid] if isinstance(tid, int) else [int(t) for t in tid]
        elif wide:
            # system-wide (a workload given too only bounds the measurement, as in `perf stat -a CMD`)
            threads = [-1]
            if cpu_list is None:
                cpu_list = online_cpus(sysfs)
        else:
            threads = [0]  # the calling thread (and, with inherit, what it starts)
        self.system_wide = threads == [-1]
        #: counters attached to the workload's pid enable themselves at its exec
        self._exec_enables = workload is not None and not self.system_wide and enable_on_exec
        self.cpus: list[int] = cpu_list if cpu_list is not None else [-1]
        self.threads: list[int] = threads

        # evsels and groups
        self.evsels: list[Evsel] = []
        self.groups: list[list[Evsel]] = []
        by_group: dict[int, list[Evsel]] = {}
        for i, spec in enumerate(specs):
            if spec.extra.get("tool"):
                ev = Evsel(i, spec, len(self.groups), True)  # never part of a kernel group
                self.groups.append([ev])
            elif spec.group is not None and spec.group in by_group:
                ev = Evsel(i, spec, by_group[spec.group][0].group, False)
                by_group[spec.group].append(ev)
            else:
                ev = Evsel(i, spec, len(self.groups), True)
                members = [ev]
                self.groups.append(members)
                if spec.group is not None:
                    by_group[spec.group] = members
            self.evsels.append(ev)
        self._is_group = [len(g) > 1 or (g[0].spec.group is not None and not g[0].tool) for g in self.groups]
        self._units: list[tuple] = []
        self._read_plan: tuple = ()
        self._reader = _closed_reader
        self._read_counts = None  # the native reader, when used
        self._leader_fds: list[int] = []
        self._opened = False
        self._enabled = False
        self.start_ns = 0
        #: the clock reading of the read() in progress (tool events take it too)
        self._read_ts: int | None = None
        self.last = None

    # -- open / close -------------------------------------------------------
    def _attr_for(self, ev: Evsel, grouped: bool) -> abi.perf_event_attr:
        # perf stat's defaults (leaders disabled, members follow; inherit; enable_on_exec for a workload)
        attr = apply_counting_defaults(
            ev.spec.attr.copy(),
            leader=ev.leader,
            group_size=2 if grouped else 1,
            enable_on_exec=self._exec_enables,
            inherit=self.inherit and not self.system_wide,
        )
        # every read carries the times; ID also for lone events (the read layout is fixed per session)
        attr.read_format = GROUP_READ_FORMAT if grouped else SINGLE_READ_FORMAT
        return attr

    def open(self) -> "Counter":
        """Open every fd (idempotent). Unsupported events raise
        :class:`~pmuscope.errors.EventNotSupportedError` unless the counter
        tolerates them (``pmuscope stat``), which marks them ``<not supported>``."""
        if self._opened:
            return self
        flags = abi.PERF_FLAG_FD_CLOEXEC
        if self.cgroup is not None:
            path = cgroup_dir(self.cgroup)
            self._cgroup_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            flags |= abi.PERF_FLAG_PID_CGROUP
            if self.cpus == [-1]:
                raise errors.PmuscopeError("cgroup counting needs CPUs (the kernel requires cpu >= 0)")
        attrs = {}
        for gi, group in enumerate(self.groups):
            for ev in group:
                attrs[ev.index] = self._attr_for(ev, self._is_group[gi])
                ev.fds = [[-1] * len(self.threads) for _ in self.cpus]
        try:
            dropped: list[int] = []
            for ci, cpu in enumerate(self.cpus):
                for ti, thread in enumerate(self.threads):
                    if ti in dropped:
                        continue
                    pid = self._cgroup_fd if self.cgroup is not None else thread
                    try:
                        for ev in self.evsels:
                            self._open_one(ev, attrs, ci, ti, pid, cpu, flags)
                    except errors.ProcessGoneError:
                        if len(self.threads) > 1 and self.workload is None:
                            # a thread exited between /proc/PID/task and the open: drop it
                            for ev in self.evsels:
                                for row in ev.fds:
                                    if row[ti] >= 0:
                                        _close(row[ti])
                                        row[ti] = -1
                            dropped.append(ti)
                            continue
                        raise
            if dropped:
                keep = [ti for ti in range(len(self.threads)) if ti not in dropped]
                self.threads = [self.threads[ti] for ti in keep]
                for ev in self.evsels:
                    ev.fds = [[row[ti] for ti in keep] for row in ev.fds]
        except BaseException:
            self._close_fds()
            raise
        self._build_units()
        self._opened = True
        return self

    def _open_one(self, ev: Evsel, attrs: dict, ci: int, ti: int, pid: int, cpu: int, flags: int) -> None:
        if not ev.supported or ev.tool:
            return
        group_fd = -1
        if not ev.leader:
            leader = self.groups[ev.group][0]
            if not leader.supported:
                ev.supported = False
                ev.error = f"group leader {leader.name} is not supported"
                return
            group_fd = leader.fds[ci][ti]
        attr = attrs[ev.index]
        try:
            fd = _sys.perf_event_open(attr, pid, cpu, group_fd, flags, event=ev.name)
        except errors.PermissionDeniedError:
            # perf's evsel__fallback: without the right to count the kernel, count user space
            if attr.exclude_kernel or self.system_wide:
                raise
            attr.exclude_kernel = 1
            attr.exclude_hv = 1
            fd = _sys.perf_event_open(attr, pid, cpu, group_fd, flags, event=ev.name)
            if not ev.name.endswith(":u"):
                ev.name += ":u"
        except errors.EventNotSupportedError as err:
            if not self.tolerate_unsupported or (ci, ti) != (0, 0):
                raise
            ev.supported = False
            ev.error = str(err)
            return
        except errors.InvalidAttrError as err:
            if group_fd >= 0 and self.tolerate_unsupported and (ci, ti) == (0, 0):
                # perf stat: a member the PMU refuses is <not supported>; the rest of the group is read
                # (and shows <not counted> if the kernel can never schedule it)
                ev.supported = False
                ev.error = str(err)
                return
            if group_fd >= 0:
                names = ",".join(e.name for e in self.groups[ev.group])
                raise errors.InvalidAttrError(
                    f"the group {{{names}}} cannot be opened together ({err.message}); "
                    "the PMU may have fewer counters than the group has events: split the group",
                    event=ev.name,
                ) from err
            raise
        ev.fds[ci][ti] = fd

    def _build_units(self) -> None:
        """Precompute the read plan: (fd, size, unpack, gi, ci, ti) per cell."""
        units = []
        leader_fds = []
        for gi, group in enumerate(self.groups):
            leader = group[0]
            if not leader.supported:
                continue
            members = [ev for ev in group if ev.supported]
            grouped = self._is_group[gi]
            st = group_struct(len(members)) if grouped else SINGLE_STRUCT
            for ci in range(len(self.cpus)):
                for ti in range(len(self.threads)):
                    fd = leader.fds[ci][ti]
                    if fd < 0:
                        continue
                    units.append((fd, st.size, st.unpack, gi, ci, ti))
                    leader_fds.append(fd)
        self._units = units
        self._read_plan = plan = tuple((fd, size, unpack) for fd, size, unpack, *_ in units)
        # the read path only reads: the bytes are decoded later (Counts.data), all at once
        if len(plan) == 1:
            ((fd0, size0, _),) = plan

            def reader():
                return [_read(fd0, size0)]
        else:
            fds = tuple((fd, size) for fd, size, _ in plan)

            def reader():
                read = _read
                return [read(fd, size) for fd, size in fds]

        tools = [(gi, group[0].tool) for gi, group in enumerate(self.groups) if group[0].tool]
        if tools:
            kernel_reader = reader
            tool_fns = [self._tool_reader(name) for _, name in tools]

            def reader():
                return kernel_reader() + [fn() for fn in tool_fns]

        self._reader = reader
        self._leader_fds = leader_fds
        self._unit_index = [(gi, ci, ti) for _, _, _, gi, ci, ti in units] + [(gi, 0, 0) for gi, _ in tools]
        self._members = [[ev.index for ev in g if ev.supported] for g in self.groups]
        self._grouped = self._is_group
        self.layout = Layout.from_counter(self)
        # tool events are measured in Python: such a session keeps the Python reader
        self._read_counts = None
        if NATIVE_READ and not tools and native_read_available():
            self._read_counts = _native.CountsReader(
                Counts, _NATIVE_FILL, _NATIVE_CLEAR, self.layout, tuple((fd, size) for fd, size, _ in plan),
                None if _read is os.read else _read,  # the read seam (tests' fake kernel) is honoured
            )

    def _tool_reader(self, name: str):
        """A function returning ``(value, value, value)`` in ns for a tool event:
        ``duration_time`` is wall time since start(); ``user_time``/``system_time``
        the CPU time of the workload (rusage once it exited, else /proc/PID/stat,
        children included), of the attached process, or of this process."""
        if name == "duration_time":
            def fn():
                v = (self._read_ts or _now()) - self.start_ns
                return (v, v, v)
            return fn
        field = 0 if name == "user_time" else 1
        tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
        target = self.workload.pid if self.workload is not None else (self.threads[0] if self.threads[0] > 0 else 0)
        base = [None]

        def cpu_ns() -> int:
            w = self.workload
            if w is not None and w.rusage is not None:
                return int((w.rusage.ru_utime, w.rusage.ru_stime)[field] * 1e9)
            if target > 0:
                try:
                    with open(f"{self.procfs}/{target}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    # utime, stime, cutime, cstime are fields 14-17 (proc(5)); [0] here is field 3
                    return int((int(fields[11 + field]) + int(fields[13 + field])) * tick_ns)
                except (OSError, IndexError, ValueError):
                    return 0
            t = os.times()
            return int((t.user + t.children_user, t.system + t.children_system)[field] * 1e9)

        def fn():
            if base[0] is None:
                base[0] = 0 if self.workload is not None else cpu_ns()
            v = max(cpu_ns() - base[0], 0)
            return (v, v or 1, v or 1)  # 0 ns of CPU time is a count, not <not counted>
        return fn

    def _close_fds(self) -> None:
        for ev in self.evsels:
            for row in ev.fds:
                for i, fd in enumerate(row):
                    if fd >= 0:
                        try:
                            _close(fd)
                        except OSError:
                            pass
                        row[i] = -1
        if self._cgroup_fd >= 0:
            os.close(self._cgroup_fd)
            self._cgroup_fd = -1

    def close(self) -> None:
        """Close every fd (a workload still corked is killed)."""
        self._close_fds()
        self._opened = False
        self._units = []
        self._read_plan = ()
        self._reader = _closed_reader
        self._read_counts = None
        if self.workload is not None and not self.workload.started:
            self.workload.cancel()

    # -- control ------------------------------------------------------------
    def _ioctl_all(self, request: int, arg: int) -> None:
        for fd in self._leader_fds:
            _ioctl(fd, request, arg)

    def start(self) -> "Counter":
        """Open if needed and enable counting. With a workload, release it:
        its counters enable themselves at exec (``enable_on_exec``)."""
        self.open()
        self.start_ns = time.monotonic_ns()
        if self.workload is not None and not self.workload.started:
            if not self._exec_enables:
                self._ioctl_all(abi.PERF_EVENT_IOC_ENABLE, abi.PERF_IOC_FLAG_GROUP)
            self.workload.start()
        else:
            self._ioctl_all(abi.PERF_EVENT_IOC_ENABLE, abi.PERF_IOC_FLAG_GROUP)
        self._enabled = True
        return self

    def stop(self) -> None:
        """Disable counting (values are kept; ``read()`` still works)."""
        if self._opened:
            self._ioctl_all(abi.PERF_EVENT_IOC_DISABLE, abi.PERF_IOC_FLAG_GROUP)
        self._enabled = False

    def reset(self) -> None:
        """Zero every counter (values and, for new reads, the delta base)."""
        if self._opened:
            self._ioctl_all(abi.PERF_EVENT_IOC_RESET, abi.PERF_IOC_FLAG_GROUP)
        self.start_ns = time.monotonic_ns()

    def read(self):
        """Read every counter now: one ``read()`` per group and cell.

        Returns :class:`~pmuscope.counting.results.Counts` (decoded lazily)."""
        native = self._read_counts
        if native is not None:
            self.last = c = native(self.start_ns)
        else:
            # one clock read gives the Counts its time and duration_time its value
            # (two reads let a preemption between them make the two disagree)
            self._read_ts = ts = _now()
            self.last = c = Counts(self.layout, self._reader(), ts, self.start_ns)
            self._read_ts = None
        return c

    @property
    def read_path(self) -> str:
        """``"native"`` when :meth:`read` is one C call, ``"python"`` otherwise
        (no native helper, ``NATIVE_READ`` off, tool events, or not open yet)."""
        return "native" if self._read_counts is not None else "python"

    def read_raw(self) -> list[bytes]:
        """The read() buffers, one per read unit (the leanest read). Unpack
        unit ``i`` with ``self._read_plan[i][2]``: group units give
        ``(nr, time_enabled, time_running, value0, id0, ...)``, single events
        ``(value, time_enabled, time_running, id)``."""
        return self._reader()

    def wait(self) -> int:
        """Wait for the workload to exit; returns its exit status (128+N if killed by signal N)."""
        if self.workload is None:
            raise errors.PmuscopeError("this counter has no workload to wait for")
        return self.workload.wait()

    # -- context manager ----------------------------------------------------
    def __enter__(self) -> "Counter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            if self._opened:
                self.stop()
                self.last = self.read()
        finally:
            self.close()

    def __del__(self) -> None:
        try:
            self._close_fds()
        except Exception:
            pass

    @property
    def names(self) -> list[str]:
        return [ev.name for ev in self.evsels]

    @property
    def fd_count(self) -> int:
        return sum(1 for ev in self.evsels for row in ev.fds for fd in row if fd >= 0)

    def __repr__(self) -> str:
        return f"Counter({self.names}, cpus={self.cpus}, threads={self.threads})"


def count(
    events,
    pid: int | Sequence[int] | None = None,
    tid: int | Sequence[int] | None = None,
    cpus: str | int | Sequence[int] | None = None,
    inherit: bool = True,
    cgroup: str | None = None,
    **kwargs,
) -> Counter:
    """Count ``events`` (an event string like ``"task-clock,{cycles,instructions}"``
    or EventSpecs). See :mod:`pmuscope.counting` for the targets."""
    return Counter(events, pid=pid, tid=tid, cpus=cpus, inherit=inherit, cgroup=cgroup, **kwargs)
