"""perf_event_open, ioctl and read on perf fds, with errno turned into typed errors.

This is the one choke point where the kernel's errno becomes a
:class:`~pmuscope.errors.PmuscopeError` (psutil's ``wrap_exceptions`` idea).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import Callable

from .. import errors
from . import abi

#: __NR_perf_event_open per architecture (uname -m)
SYSCALL_NUMBERS: dict[str, int] = {
    "x86_64": 298,
    "amd64": 298,
    "i386": 336,
    "i686": 336,
    "aarch64": 241,
    "arm64": 241,
    "riscv64": 241,
    "loongarch64": 241,
    "ppc64": 319,
    "ppc64le": 319,
    "ppc": 319,
    "s390x": 331,
    "armv7l": 364,
    "armv6l": 364,
    "mips64": 5296,  # n64 ABI
}


def syscall_number(machine: str | None = None) -> int:
    machine = machine or os.uname().machine  # platform.machine()
    try:
        return SYSCALL_NUMBERS[machine]
    except KeyError:
        raise errors.PmuscopeError(
            f"perf_event_open's syscall number is not known for architecture {machine!r}; "
            f"known: {', '.join(sorted(SYSCALL_NUMBERS))}"
        ) from None


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_ioctl = _libc.ioctl
_ioctl.restype = ctypes.c_int
_ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]

_NR = SYSCALL_NUMBERS.get(os.uname().machine, -1)

#: hook for tests: a callable with the signature of :func:`raw_perf_event_open`
#: that stands in for the kernel (a FakeKernel)
_open_hook: Callable[..., int] | None = None


def raw_perf_event_open(attr: abi.perf_event_attr, pid: int, cpu: int, group_fd: int, flags: int) -> int:
    """The bare syscall: returns the fd or raises ``OSError(errno)``."""
    if _open_hook is not None:
        return _open_hook(attr, pid, cpu, group_fd, flags)
    if _NR < 0:
        syscall_number()  # raises with the architecture named
    fd = _syscall(
        ctypes.c_long(_NR),
        ctypes.byref(attr),
        ctypes.c_int(pid),
        ctypes.c_int(cpu),
        ctypes.c_int(group_fd),
        ctypes.c_ulong(flags),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def perf_event_open(
    attr: abi.perf_event_attr,
    pid: int = 0,
    cpu: int = -1,
    group_fd: int = -1,
    flags: int = abi.PERF_FLAG_FD_CLOEXEC,
    *,
    event: str | None = None,
) -> int:
    """Open one event; on failure raise the typed error that explains it.

    ``event`` is the user's name for it, used in messages.
    """
    try:
        return raw_perf_event_open(attr, pid, cpu, group_fd, flags)
    except OSError as err:
        raise error_from_errno(err.errno or 0, attr, event=event, pid=pid, cpu=cpu, group_fd=group_fd, flags=flags) from err


def ioctl(fd: int, request: int, arg: int | ctypes.c_void_p | None = 0) -> int:
    if isinstance(arg, int):
        arg = ctypes.c_void_p(arg)
    ret = _ioctl(fd, request, arg)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ioctl {request:#x} on perf fd {fd}: {os.strerror(err)}")
    return ret


class PerfEventFd:
    """One open perf event file descriptor, owned: closed by :meth:`close`, by
    ``with``, or when garbage collected. Offers every perf ioctl by name."""

    __slots__ = ("fd", "attr", "event", "cpu", "pid", "__weakref__")

    def __init__(
        self,
        attr: abi.perf_event_attr,
        pid: int = 0,
        cpu: int = -1,
        group: "PerfEventFd | int | None" = None,
        flags: int = abi.PERF_FLAG_FD_CLOEXEC,
        *,
        event: str | None = None,
    ) -> None:
        self.fd = -1
        group_fd = group.fd if isinstance(group, PerfEventFd) else (-1 if group is None else group)
        self.attr = attr
        self.event = event
        self.cpu = cpu
        self.pid = pid
        self.fd = perf_event_open(attr, pid, cpu, group_fd, flags | abi.PERF_FLAG_FD_CLOEXEC, event=event)

    # -- lifetime
    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def __enter__(self) -> "PerfEventFd":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def fileno(self) -> int:
        return self.fd

    def __repr__(self) -> str:
        return f"PerfEventFd(fd={self.fd}, event={self.event!r}, pid={self.pid}, cpu={self.cpu})"

    # -- reads
    def read(self, size: int) -> bytes:
        return os.read(self.fd, size)

    def readinto(self, buf: bytearray | memoryview) -> int:
        return os.readv(self.fd, [buf])

    # -- ioctls
    def _ioctl(self, request: int, arg: int | ctypes.c_void_p | None = 0) -> int:
        return ioctl(self.fd, request, arg)

    def enable(self, group: bool = False) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_ENABLE, abi.PERF_IOC_FLAG_GROUP if group else 0)

    def disable(self, group: bool = False) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_DISABLE, abi.PERF_IOC_FLAG_GROUP if group else 0)

    def reset(self, group: bool = False) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_RESET, abi.PERF_IOC_FLAG_GROUP if group else 0)

    def refresh(self, count: int) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_REFRESH, count)

    def set_period(self, period: int) -> None:
        value = ctypes.c_uint64(period)
        self._ioctl(abi.PERF_EVENT_IOC_PERIOD, ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))

    def set_output(self, target: "PerfEventFd | int | None") -> None:
        """Redirect this event's records into ``target``'s ring buffer (-1/None: undo)."""
        tfd = target.fd if isinstance(target, PerfEventFd) else (-1 if target is None else target)
        self._ioctl(abi.PERF_EVENT_IOC_SET_OUTPUT, tfd & 0xFFFFFFFFFFFFFFFF if tfd < 0 else tfd)

    def set_filter(self, text: str) -> None:
        buf = ctypes.create_string_buffer(text.encode())
        self._ioctl(abi.PERF_EVENT_IOC_SET_FILTER, ctypes.cast(buf, ctypes.c_void_p))

    def id(self) -> int:
        value = ctypes.c_uint64(0)
        self._ioctl(abi.PERF_EVENT_IOC_ID, ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))
        return int(value.value)

    def set_bpf(self, prog_fd: int) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_SET_BPF, prog_fd)

    def pause_output(self, pause: bool = True) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_PAUSE_OUTPUT, 1 if pause else 0)

    def query_bpf(self, max_ids: int = 64) -> list[int]:
        class _Q(ctypes.Structure):
            _fields_ = [("ids_len", ctypes.c_uint32), ("prog_cnt", ctypes.c_uint32), ("ids", ctypes.c_uint32 * max_ids)]

        q = _Q(ids_len=max_ids)
        self._ioctl(abi.PERF_EVENT_IOC_QUERY_BPF, ctypes.cast(ctypes.pointer(q), ctypes.c_void_p))
        return list(q.ids[: min(q.prog_cnt, max_ids)])

    def modify_attributes(self, attr: abi.perf_event_attr) -> None:
        self._ioctl(abi.PERF_EVENT_IOC_MODIFY_ATTRIBUTES, ctypes.cast(ctypes.pointer(attr), ctypes.c_void_p))


# --- errno → typed errors ----------------------------------------------------

PARANOID_PATH = "/proc/sys/kernel/perf_event_paranoid"
PERF_SECURITY_DOC = "https://www.kernel.org/doc/html/latest/admin-guide/perf-security.html"
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21
#: types below this are the kernel's fixed PERF_TYPE_*; above, dynamic PMU types
PERF_TYPE_MAX = 6
CAP_PERFMON = 38


def read_paranoid(procfs: str = "/proc") -> int | None:
    """``kernel.perf_event_paranoid`` (None when unreadable)."""
    try:
        with open(os.path.join(procfs, "sys/kernel/perf_event_paranoid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def effective_capabilities(procfs: str = "/proc", pid: str = "self") -> int:
    """The ``CapEff`` mask of ``pid`` (0 when unreadable)."""
    try:
        with open(os.path.join(procfs, pid, "status")) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def has_perfmon(procfs: str = "/proc") -> bool:
    """The kernel's ``perfmon_capable()``: CAP_PERFMON or CAP_SYS_ADMIN."""
    caps = effective_capabilities(procfs)
    return bool(caps & (1 << CAP_PERFMON) or caps & (1 << CAP_SYS_ADMIN))


def _describe(attr: abi.perf_event_attr, event: str | None) -> str:
    if event:
        return repr(event)
    return f"type={attr.type} config={attr.config:#x}"


def required_paranoid(attr: abi.perf_event_attr, pid: int, cpu: int) -> int:
    """The highest perf_event_paranoid value at which an unprivileged user may
    open this event (kernel/events/core.c perf_event_open(),
    kernel/trace/trace_event_perf.c perf_trace_event_perm(), and the
    perf-security document)."""
    raw_tracepoint = (
        attr.type == abi.PERF_TYPE_TRACEPOINT and attr.sample_period and attr.sample_type & abi.PERF_SAMPLE_RAW
    )
    if raw_tracepoint:
        # raw tracepoint samples can leak kernel data: privileged only, except
        # per-task samples of the syscalls:* events (TRACE_EVENT_FL_CAP_ANY)
        return -1
    if pid == -1 and cpu >= 0:
        return 0  # CPU-wide monitoring
    if not attr.exclude_kernel:
        return 1  # kernel profiling of own processes
    return 2  # user-space only of own processes


PARANOID_LEVELS = {
    -1: "allow use of (almost) all events by all users",
    0: "disallow raw tracepoint access for unprivileged users",
    1: "disallow CPU event access for unprivileged users",
    2: "disallow kernel profiling for unprivileged users",
    3: "disallow all unprivileged perf_event_open (Debian/Android patch)",
    4: "disallow all unprivileged perf_event_open (distribution patch)",
}


def _no_hardware_pmu(sysfs: str = "/sys") -> bool:
    """True when no core PMU (cpu, cpu_core, armv8_*, ...) is in sysfs."""
    base = os.path.join(sysfs, "bus/event_source/devices")
    try:
        names = os.listdir(base)
    except OSError:
        return True
    core = [n for n in names if n in ("cpu", "cpu_core", "cpu_atom", "cpum_cf") or n.startswith(("armv8", "armv7", "arm_cortex", "armv9", "riscv_pmu"))]
    return not core


def _pmu_name(type_: int, sysfs: str = "/sys") -> str | None:
    """The sysfs PMU whose ``type`` file holds ``type_``."""
    base = os.path.join(sysfs, "bus/event_source/devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(base, name, "type")) as f:
                if int(f.read()) == type_:
                    return name
        except (OSError, ValueError):
            continue
    return None


def _online_cpus(sysfs: str = "/sys") -> list[int] | None:
    try:
        with open(os.path.join(sysfs, "devices/system/cpu/online")) as f:
            text = f.read().strip()
    except OSError:
        return None
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        cpus.extend(range(int(a), int(b or a) + 1))
    return cpus


def _count_open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # minus the listing's own fd
    except OSError:
        pass
    # no fd left to list /proc/self/fd with (EMFILE): probe each descriptor
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft > 65536:
        return None
    count = 0
    for fd in range(soft):
        try:
            os.fstat(fd)
            count += 1
        except OSError:
            pass
    return count


def _pid_owner(pid: int, procfs: str) -> int | None:
    try:
        return os.stat(os.path.join(procfs, str(pid))).st_uid
    except OSError:
        return None


def error_from_errno(
    err: int,
    attr: abi.perf_event_attr,
    *,
    event: str | None = None,
    pid: int = 0,
    cpu: int = -1,
    group_fd: int = -1,
    flags: int = 0,
    procfs: str = "/proc",
    sysfs: str = "/sys",
    fds_needed: int | None = None,
    probe: bool = True,
) -> errors.PmuscopeError:
    """Turn a perf_event_open errno into the typed error that says what to do.

    ``procfs``/``sysfs`` are where the paranoid level, capabilities and PMUs
    are read from (injectable for tests); ``fds_needed`` is how many fds the
    whole request opens (for EMFILE); ``probe=False`` never re-opens events to
    find the field the kernel rejected."""
    name = _describe(attr, event)
    common = dict(event=event, errno=err, pid=pid, cpu=cpu)
    if err in (errno.EACCES, errno.EPERM):
        return _permission_error(err, attr, name, pid, cpu, procfs, common, probe=probe)
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO):
        return _unsupported_error(err, attr, name, pid, cpu, group_fd, flags, sysfs, probe, common)
    if err == errno.EINVAL:
        field, why = explain_invalid(attr, pid, cpu, group_fd, flags, sysfs=sysfs, procfs=procfs, probe=probe)
        detail = f": the kernel rejected {field}" + (f" ({why})" if why else "") if field else (f": {why}" if why else "")
        return errors.InvalidAttrError(
            f"invalid perf_event_attr for {name}{detail} (EINVAL); `pmuscope attr` shows the attr", field=field, **common
        )
    if err in (errno.EMFILE, errno.ENFILE):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        fmt = lambda v: "unlimited" if v == resource.RLIM_INFINITY else str(v)  # noqa: E731
        open_now = _count_open_fds()
        if err == errno.ENFILE:
            which = "the system-wide file table (fs.file-max) is full"
            fix = "raise fs.file-max (sysctl -w fs.file-max=...) or close files elsewhere"
        else:
            which = f"RLIMIT_NOFILE is exhausted (soft {fmt(soft)}, hard {fmt(hard)}; {open_now if open_now is not None else '?'} fds open now)"
            want = (open_now or 0) + (fds_needed or 0) + 64
            target = max(want, soft * 2 if soft != resource.RLIM_INFINITY else want)
            if hard != resource.RLIM_INFINITY and target > hard:
                fix = f"raise the hard limit (it is {hard}; LimitNOFILE= in systemd, nofile in limits.conf) or monitor fewer CPUs/threads/events"
            else:
                fix = f"raise it (ulimit -n {target}) or monitor fewer CPUs/threads/events"
        need = f"; this request needs {fds_needed} fds (one per event per CPU/thread)" if fds_needed else ""
        return errors.TooManyOpenFilesError(
            f"too many open files while opening {name}: {which}{need}; {fix}",
            soft_limit=soft,
            hard_limit=hard,
            open_fds=open_now,
            fds_needed=fds_needed,
            **common,
        )
    if err == errno.ESRCH:
        return errors.ProcessGoneError(
            f"cannot open {name} on pid {pid}: no such process (it exited, or the pid/tid is wrong)", **common
        )
    if err == errno.EBUSY:
        return errors.ResourceBusyError(
            f"{name} is busy: another user holds this PMU exclusively (an exclusive PMU such as intel_pt/arm_spe/"
            f"cs_etm allows one event per CPU, or a pinned/exclusive event conflicts); stop the other session "
            f"(`perf`, another pmuscope) and retry",
            **common,
        )
    if err == errno.ENOSPC:
        what = "hardware breakpoint slot (debug register: x86 has 4 per CPU)" if attr.type == abi.PERF_TYPE_BREAKPOINT else "PMU resource"
        return errors.ResourceBusyError(
            f"{name}: no free {what} left (ENOSPC); close other breakpoints/events on this task or CPU", **common
        )
    if err == errno.E2BIG:
        # perf_copy_attr() writes its own sizeof(perf_event_attr) back into attr.size
        return errors.InvalidAttrError(
            f"{name}: the kernel rejected the perf_event_attr size (E2BIG): it knows {attr.size} bytes of it and a "
            f"field beyond that is non-zero, i.e. a feature newer than this kernel was requested; leave it unset",
            field="size",
            kernel_attr_size=int(attr.size),
            **common,
        )
    if err == errno.EOVERFLOW:
        limit = _read_int(os.path.join(procfs, "sys/kernel/perf_event_max_stack"))
        return errors.InvalidAttrError(
            f"{name}: sample_max_stack={attr.sample_max_stack} exceeds kernel.perf_event_max_stack"
            + (f"={limit}" if limit is not None else "")
            + " (EOVERFLOW); ask for fewer frames or sysctl -w kernel.perf_event_max_stack=N",
            field="sample_max_stack",
            **common,
        )
    return errors.PmuscopeError(f"perf_event_open of {name} failed: {os.strerror(err)} (errno {err})", **common)


def _software_event_opens() -> bool:
    """True when a task-clock counter on this thread opens: perf_event_open
    itself is allowed (no seccomp filter or LSM blocking the call)."""
    try:
        os.close(raw_perf_event_open(abi.perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PERF_COUNT_SW_TASK_CLOCK,
                                                         disabled=1, exclude_kernel=1, exclude_hv=1),
                                     0, -1, -1, abi.PERF_FLAG_FD_CLOEXEC))
        return True
    except OSError:
        return False


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _permission_error(err, attr, name, pid, cpu, procfs, common, probe: bool = True) -> errors.PermissionDeniedError:
    paranoid = read_paranoid(procfs)
    needed = required_paranoid(attr, pid, cpu)
    caps = effective_capabilities(procfs)
    privileged = bool(caps & (1 << CAP_PERFMON) or caps & (1 << CAP_SYS_ADMIN))
    level = "unknown" if paranoid is None else str(paranoid)
    fields = dict(paranoid=paranoid, needed=needed, capabilities=caps, **common)
    # (the probe asks the running kernel: only when the facts came from it too)
    if privileged and probe and os.path.realpath(procfs) == "/proc" and _software_event_opens():
        # other events open: no seccomp filter is in the way, this event itself is refused
        hint = ""
        if attr.type == abi.PERF_TYPE_TRACEPOINT:
            hint = (f"; tracepoint id {int(attr.config)} is not one perf may use (the ids are in "
                    "/sys/kernel/tracing/events/SUBSYSTEM/EVENT/id: name the tracepoint, e.g. -e sched:sched_switch)")
        return errors.PermissionDeniedError(
            f"no permission to open {name}: the kernel refused this event (EACCES/EPERM) although other events "
            f"open here{hint}",
            cause="event",
            **fields,
        )
    if privileged:
        return errors.PermissionDeniedError(
            f"no permission to open {name} although this process holds CAP_PERFMON/CAP_SYS_ADMIN "
            f"({PARANOID_PATH} is {level}, which does not apply): perf_event_open is blocked by a seccomp filter "
            f"or security module, as container runtimes do by default.\n"
            f"  Run the container with --cap-add PERFMON and a seccomp profile that allows perf_event_open "
            f"(e.g. --security-opt seccomp=unconfined), or run on the host.\n  See {PERF_SECURITY_DOC}",
            cause="seccomp",
            **fields,
        )
    if pid > 0 and paranoid is not None and paranoid <= needed:
        owner = _pid_owner(pid, procfs)
        return errors.PermissionDeniedError(
            f"no permission to open {name} on pid {pid}"
            + (f" (owned by uid {owner})" if owner is not None else "")
            + f": monitoring another process needs ptrace access to it (same user and kernel.yama.ptrace_scope "
            f"allowing it, or CAP_SYS_PTRACE); {PARANOID_PATH} is {level} and is not the obstacle.\n"
            f"  Run as that process's user or root, or grant CAP_PERFMON and CAP_SYS_PTRACE.",
            cause="ptrace",
            **fields,
        )
    what = PARANOID_LEVELS.get(paranoid if paranoid is not None else 99, "")
    if pid == -1:
        scope = "CPU-wide monitoring (pid=-1, cpu=%d)" % cpu
    elif attr.type == abi.PERF_TYPE_TRACEPOINT and needed < 0:
        scope = "raw tracepoint samples"
    elif not attr.exclude_kernel:
        scope = "kernel-mode counting (exclude_kernel=0)"
    else:
        scope = "monitoring"
    if paranoid is not None and paranoid >= 3:
        needed = min(needed, 2)
    msg = (
        f"no permission to open {name} for {scope}: {PARANOID_PATH} is {level}"
        + (f" ({what})" if what else "")
        + f"; this needs {needed} or lower, or CAP_PERFMON.\n"
        f"  Either run as root / grant CAP_PERFMON (setcap cap_perfmon+ep <binary>), or lower the level:"
        f" sysctl -w kernel.perf_event_paranoid={needed}"
    )
    if needed >= 1 and not attr.exclude_kernel and pid != -1:
        msg += f"\n  Or count user space only: add the ':u' modifier ({common['event'] or 'EVENT'}:u)."
    if pid == -1:
        msg += "\n  Or monitor only your own processes (a command or -p PID) instead of whole CPUs."
    msg += f"\n  See {PERF_SECURITY_DOC}"
    return errors.PermissionDeniedError(msg, cause="paranoid", **fields)


def _unsupported_error(err, attr, name, pid, cpu, group_fd, flags, sysfs, probe, common) -> errors.PmuscopeError:
    hardware = attr.type in (abi.PERF_TYPE_HARDWARE, abi.PERF_TYPE_HW_CACHE, abi.PERF_TYPE_RAW)
    code = errno.errorcode.get(err, str(err))
    if hardware and _no_hardware_pmu(sysfs):
        return errors.NoHardwarePMUError(
            f"{name} needs a hardware PMU, and this machine exposes none (a virtual machine without a vPMU?); "
            f"software events and tracepoints still work: `pmuscope doctor` explains",
            **common,
        )
    pmu = _pmu_name(attr.type, sysfs)
    if err in (errno.ENODEV, errno.ENXIO) and cpu >= 0:
        online = _online_cpus(sysfs)
        if online is not None and cpu not in online:
            return errors.EventNotSupportedError(
                f"cannot open {name} on cpu {cpu}: that CPU is not online ({code}); online CPUs: "
                f"{','.join(map(str, online))}",
                pmu=pmu,
                **common,
            )
    if err == errno.ENOENT and attr.type >= PERF_TYPE_MAX and pmu is None:
        return errors.EventNotSupportedError(
            f"{name}: no PMU has type {attr.type} here (ENOENT); /sys/bus/event_source/devices/*/type lists the PMUs "
            f"this kernel has",
            pmu=None,
            **common,
        )
    if err == errno.EOPNOTSUPP and probe:
        field = probe_invalid_field(attr, pid, cpu, group_fd, flags)
        if field:
            return errors.EventNotSupportedError(
                f"{name}: this PMU{f' ({pmu})' if pmu else ''} does not support {field} (EOPNOTSUPP)"
                + (f"; {_HINTS[field.split('=')[0].split()[0]]}" if field.split("=")[0].split()[0] in _HINTS else "")
                + "; drop that setting",
                pmu=pmu,
                field=field,
                **common,
            )
    if err == errno.EOPNOTSUPP and attr.sample_period and attr.type != abi.PERF_TYPE_SOFTWARE:
        return errors.EventNotSupportedError(
            f"{name} cannot be sampled here (the PMU has no overflow interrupt, EOPNOTSUPP); count it instead",
            pmu=pmu,
            **common,
        )
    if hardware:
        return errors.EventNotSupportedError(
            f"{name} is not supported by this CPU's PMU (<not supported>, {code}); `pmuscope list --probe` shows what works",
            pmu=pmu,
            **common,
        )
    return errors.EventNotSupportedError(
        f"{name} is not supported by the kernel here ({'PMU ' + pmu + ' has no such event' if pmu else 'no such PMU or event'}, {code})",
        pmu=pmu,
        **common,
    )


#: why the kernel rejects a field, by name (kernel/events/core.c perf_copy_attr(),
#: perf_event_open(), perf_event_alloc() and the PMU drivers)
_HINTS = {
    "precise_ip": "precise_ip asks for skid-free sampling (PEBS on Intel, IBS on AMD), which this PMU or level lacks",
    "exclude_guest": "the PMU cannot separate guest and host execution",
    "exclude_host": "the PMU cannot separate guest and host execution",
    "exclude_hv": "the PMU cannot filter hypervisor mode",
    "exclude_idle": "the PMU cannot filter idle",
    "exclude_kernel": "this PMU counts every privilege level at once (no exclude_* filtering; drop :u/:k)",
    "exclude_user": "this PMU counts every privilege level at once (no exclude_* filtering; drop :u/:k)",
    "sigtrap": "sigtrap requires remove_on_exec=1 (and a task, not a CPU-wide event)",
    "aux_output": "aux_output needs a PMU with an AUX area (intel_pt) as group leader",
    "branch_sample_type": "branch sampling (PERF_SAMPLE_BRANCH_STACK) needs LBR/BRBE hardware",
    "sample_regs_intr": "interrupt-time registers beyond the basic set need PEBS extended registers",
    "sample_regs_user": "a register bit not defined on this architecture",
    "sample_stack_user": "must be a multiple of 8 and below 64 KiB",
    "read_format": "unknown PERF_FORMAT_* bits for this kernel",
    "sample_type": "a PERF_SAMPLE_* bit this kernel or PMU does not support",
    "use_clockid": "use_clockid needs a valid clockid (CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME, CLOCK_BOOTTIME, CLOCK_TAI)",
    "clockid": "use_clockid needs a valid clock (CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME, CLOCK_BOOTTIME, CLOCK_TAI)",
    "inherit": "inherit cannot be combined with PERF_FORMAT_GROUP reads of sampling groups on older kernels",
    "cgroup": "PERF_RECORD_CGROUP needs a kernel with cgroup support",
}


def explain_invalid(
    attr: abi.perf_event_attr,
    pid: int = 0,
    cpu: int = -1,
    group_fd: int = -1,
    flags: int = 0,
    *,
    sysfs: str = "/sys",
    procfs: str = "/proc",
    probe: bool = True,
) -> tuple[str | None, str | None]:
    """Name what made the kernel say EINVAL: ``(field, why)``.

    First the rules ``perf_copy_attr()`` and ``perf_event_open()`` check
    statically (unknown bits, sigtrap without remove_on_exec, sample_freq
    above the limit, a CPU that does not exist), then probing: clearing one
    non-zero field (or one bit of a mask) at a time and re-opening."""
    if attr.read_format & ~(abi.PERF_FORMAT_LOST * 2 - 1):
        bits = attr.read_format & ~(abi.PERF_FORMAT_LOST * 2 - 1)
        return f"read_format={attr.read_format:#x}", f"unknown PERF_FORMAT_* bits {bits:#x}"
    if attr.sample_type & ~(abi.PERF_SAMPLE_MAX - 1):
        bits = attr.sample_type & ~(abi.PERF_SAMPLE_MAX - 1)
        return f"sample_type={attr.sample_type:#x}", f"unknown PERF_SAMPLE_* bits {bits:#x}"
    if attr.sigtrap and not attr.remove_on_exec:
        return "sigtrap=1", _HINTS["sigtrap"]
    if attr.precise_ip > 3:
        return f"precise_ip={attr.precise_ip}", "precise_ip ranges 0..3"
    if attr.freq and attr.sample_freq:
        limit = _read_int(os.path.join(procfs, "sys/kernel/perf_event_max_sample_rate"))
        if limit is not None and attr.sample_freq > limit:
            return f"sample_freq={attr.sample_freq}", f"above kernel.perf_event_max_sample_rate={limit}"
    if attr.sample_type & abi.PERF_SAMPLE_BRANCH_STACK and not attr.branch_sample_type & ~0x7:
        return (f"branch_sample_type={attr.branch_sample_type:#x}",
                "PERF_SAMPLE_BRANCH_STACK needs a branch type (PERF_SAMPLE_BRANCH_ANY, ...) besides the privilege bits")
    if cpu >= 0:
        online = _online_cpus(sysfs)
        if online is not None and cpu not in online:
            return f"cpu={cpu}", f"no such CPU online (online: {','.join(map(str, online))})"
    if pid == -1 and cpu < 0:
        return "pid=-1,cpu=-1", "an event needs a task (pid >= 0) or a CPU (cpu >= 0), or both"
    if attr.type == abi.PERF_TYPE_TRACEPOINT:
        return f"config={attr.config}", "no tracepoint has this id (see <tracefs>/events/<subsys>/<name>/id)"
    if not probe:
        return None, None
    field = probe_invalid_field(attr, pid, cpu, group_fd, flags)
    if field:
        key = field.split("=")[0].split()[0]
        return field, _HINTS.get(key)
    if attr.type in (abi.PERF_TYPE_HARDWARE, abi.PERF_TYPE_HW_CACHE, abi.PERF_TYPE_SOFTWARE, abi.PERF_TYPE_BREAKPOINT) or _open_hook is None:
        bare = abi.perf_event_attr(type=attr.type, config=attr.config, config1=attr.config1, config2=attr.config2,
                                   config3=attr.config3, bp_type=attr.bp_type, exclude_kernel=1, exclude_hv=1)
        try:
            os.close(raw_perf_event_open(bare, 0 if pid == -1 and cpu < 0 else pid, cpu, -1, abi.PERF_FLAG_FD_CLOEXEC))
        except OSError as err:
            if err.errno == errno.EINVAL:
                return f"config={attr.config:#x}", f"the PMU does not accept this event encoding (type={attr.type})"
    return None, None


#: fields probed, in order, when the kernel says EINVAL/EOPNOTSUPP: zeroing one
#: that makes the open succeed names the culprit
_PROBE_FIELDS = (
    "precise_ip",
    "exclude_guest",
    "exclude_host",
    "exclude_hv",
    "exclude_idle",
    "exclude_kernel",
    "exclude_user",
    "exclude_callchain_kernel",
    "exclude_callchain_user",
    "exclusive",
    "pinned",
    "inherit",
    "inherit_stat",
    "enable_on_exec",
    "sample_id_all",
    "mmap2",
    "comm_exec",
    "use_clockid",
    "context_switch",
    "write_backward",
    "namespaces",
    "ksymbol",
    "bpf_event",
    "aux_output",
    "cgroup",
    "text_poke",
    "build_id",
    "inherit_thread",
    "remove_on_exec",
    "sigtrap",
    "branch_sample_type",
    "sample_regs_user",
    "sample_stack_user",
    "sample_regs_intr",
    "sample_max_stack",
    "aux_sample_size",
    "sig_data",
    "config1",
    "config2",
    "config3",
    "read_format",
    "sample_type",
    "clockid",
)

#: attr field -> the abi enum naming its bits (looked up when probing: the enum classes are built on first use)
_MASK_FIELDS = {"read_format": "PerfFormat", "sample_type": "PerfSample", "branch_sample_type": "PerfBranchSample"}


def _try(trial: abi.perf_event_attr, pid: int, cpu: int, group_fd: int, flags: int) -> bool:
    try:
        fd = raw_perf_event_open(trial, pid, cpu, group_fd, flags | abi.PERF_FLAG_FD_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def probe_invalid_field(attr: abi.perf_event_attr, pid: int, cpu: int, group_fd: int, flags: int) -> str | None:
    """Find which attr field made the kernel refuse (EINVAL/EOPNOTSUPP) by
    clearing one non-zero field -- or one bit of ``sample_type``/``read_format``/
    ``branch_sample_type`` -- at a time and retrying (perf's fallback does the
    same for a few fields). Returns e.g. ``"precise_ip=3"`` or
    ``"sample_type bit PERF_SAMPLE_BRANCH_STACK"``, or None."""
    if _open_hook is not None:
        return None
    for name in _PROBE_FIELDS:
        value = getattr(attr, name)
        if not value:
            continue
        if name in _MASK_FIELDS:
            enum_cls = getattr(abi, _MASK_FIELDS[name])
            bit = 1
            while bit <= value:
                if value & bit:
                    trial = attr.copy()
                    setattr(trial, name, value & ~bit)
                    if name == "sample_type" and bit == abi.PERF_SAMPLE_BRANCH_STACK:
                        trial.branch_sample_type = 0
                    if _try(trial, pid, cpu, group_fd, flags):
                        try:
                            label = f"{enum_cls(bit).name}"
                        except ValueError:
                            label = f"{bit:#x}"
                        prefix = {"read_format": "PERF_FORMAT_", "sample_type": "PERF_SAMPLE_", "branch_sample_type": "PERF_SAMPLE_BRANCH_"}[name]
                        return f"{name} bit {prefix}{label}"
                bit <<= 1
        trial = attr.copy()
        setattr(trial, name, 0)
        if name == "sample_regs_user":
            trial.sample_stack_user = 0
            trial.sample_type &= ~(abi.PERF_SAMPLE_REGS_USER | abi.PERF_SAMPLE_STACK_USER)
        if name == "sample_stack_user":
            trial.sample_type &= ~abi.PERF_SAMPLE_STACK_USER
        if name == "sample_regs_intr":
            trial.sample_type &= ~abi.PERF_SAMPLE_REGS_INTR
        if name == "sigtrap":
            trial.remove_on_exec = 0
        if name == "branch_sample_type":
            trial.sample_type &= ~abi.PERF_SAMPLE_BRANCH_STACK
        if _try(trial, pid, cpu, group_fd, flags):
            return f"{name}={value:#x}" if name in ("read_format", "sample_type", "branch_sample_type", "config1", "config2", "config3", "sample_regs_intr", "sample_regs_user") else f"{name}={value}"
    return None


_U64 = struct.Struct("=Q")
