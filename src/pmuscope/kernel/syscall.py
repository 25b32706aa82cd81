"""perf_event_open, ioctl and read on perf fds, with errno turned into typed errors.

This is the one choke point where the kernel's errno becomes a
:class:`~pmuscope.errors.PmuscopeError` (psutil's ``wrap_exceptions`` idea).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
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
    machine = machine or platform.machine()
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

_NR = SYSCALL_NUMBERS.get(platform.machine(), -1)

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
CAP_SYS_ADMIN = 21
CAP_PERFMON = 38


def read_paranoid(procfs: str = "/proc") -> int | None:
    try:
        with open(os.path.join(procfs, "sys/kernel/perf_event_paranoid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def effective_capabilities(procfs: str = "/proc", pid: str = "self") -> int:
    try:
        with open(os.path.join(procfs, pid, "status")) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def has_perfmon(procfs: str = "/proc") -> bool:
    caps = effective_capabilities(procfs)
    return bool(caps & (1 << CAP_PERFMON) or caps & (1 << CAP_SYS_ADMIN))


def _describe(attr: abi.perf_event_attr, event: str | None) -> str:
    if event:
        return repr(event)
    return f"type={attr.type} config={attr.config:#x}"


def required_paranoid(attr: abi.perf_event_attr, pid: int, cpu: int) -> int:
    """The highest perf_event_paranoid value at which an unprivileged user may
    open this event (kernel/events/core.c and the perf-security document)."""
    if attr.type == abi.PERF_TYPE_TRACEPOINT:
        return -1  # raw tracepoint data needs CAP_PERFMON (or paranoid -1)
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
    core = [n for n in names if n in ("cpu", "cpu_core", "cpu_atom", "cpum_cf") or n.startswith(("armv8", "armv7", "arm_cortex", "armv9", "power", "riscv_pmu"))]
    return not core


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
) -> errors.PmuscopeError:
    """Turn a perf_event_open errno into the typed error that says what to do."""
    name = _describe(attr, event)
    common = dict(event=event, errno=err, pid=pid, cpu=cpu)
    if err in (errno.EACCES, errno.EPERM):
        paranoid = read_paranoid(procfs)
        needed = required_paranoid(attr, pid, cpu)
        caps = effective_capabilities(procfs)
        level = "unknown" if paranoid is None else str(paranoid)
        what = PARANOID_LEVELS.get(paranoid if paranoid is not None else 99, "")
        scope = "system-wide (per-CPU) monitoring" if pid == -1 else ("kernel-mode counting" if not attr.exclude_kernel else "monitoring")
        msg = (
            f"no permission to open {name} for {scope}: {PARANOID_PATH} is {level}"
            + (f" ({what})" if what else "")
            + f"; this needs {needed} or lower, or CAP_PERFMON.\n"
            f"  Either run as root / grant CAP_PERFMON (setcap cap_perfmon+ep), or lower the level:"
            f" sysctl kernel.perf_event_paranoid={needed}"
        )
        if needed >= 1 and not attr.exclude_kernel and pid != -1:
            msg += f"\n  Or count user space only: add the ':u' modifier ({event or 'EVENT'}:u)."
        msg += f"\n  See {PERF_SECURITY_DOC}"
        return errors.PermissionDeniedError(msg, paranoid=paranoid, needed=needed, capabilities=caps, **common)
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO):
        hardware = attr.type in (abi.PERF_TYPE_HARDWARE, abi.PERF_TYPE_HW_CACHE, abi.PERF_TYPE_RAW)
        if hardware and _no_hardware_pmu(sysfs):
            return errors.NoHardwarePMUError(
                f"{name} needs a hardware PMU, and this machine exposes none (a virtual machine?)", **common
            )
        if err == errno.EOPNOTSUPP and attr.sample_period and attr.type != abi.PERF_TYPE_SOFTWARE:
            return errors.EventNotSupportedError(
                f"{name} cannot be sampled here (the PMU has no overflow interrupt); count it instead", **common
            )
        if hardware:
            return errors.EventNotSupportedError(
                f"{name} is not supported by this CPU's PMU (<not supported>); `pmuscope list --probe` shows what works",
                **common,
            )
        return errors.EventNotSupportedError(
            f"{name} is not supported by the kernel here (no such PMU or event, errno {errno.errorcode.get(err, err)})",
            **common,
        )
    if err == errno.EINVAL:
        field = probe_invalid_field(attr, pid, cpu, group_fd, flags)
        why = f": the kernel rejected {field}" if field else ""
        return errors.InvalidAttrError(
            f"invalid perf_event_attr for {name}{why} (EINVAL); `pmuscope attr` shows the attr", field=field, **common
        )
    if err in (errno.EMFILE, errno.ENFILE):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        which = "system-wide file table (fs.file-max)" if err == errno.ENFILE else f"RLIMIT_NOFILE (soft {soft}, hard {hard})"
        return errors.TooManyOpenFilesError(
            f"too many open files while opening {name}: the {which} is exhausted; "
            f"raise it (ulimit -n {max(hard, soft * 2) if hard != resource.RLIM_INFINITY else soft * 2}) "
            f"or monitor fewer CPUs/threads/events",
            soft_limit=soft,
            hard_limit=hard,
            **common,
        )
    if err == errno.ESRCH:
        return errors.ProcessGoneError(f"cannot open {name} on pid {pid}: no such process (it exited?)", **common)
    if err == errno.EBUSY:
        return errors.ResourceBusyError(
            f"{name} is busy: another tool holds the PMU exclusively (or a pinned/exclusive event conflicts); retry later",
            **common,
        )
    if err == errno.E2BIG:
        return errors.InvalidAttrError(
            f"the kernel does not accept perf_event_attr of size {attr.size} for {name} (E2BIG): it is older than this attr",
            **common,
        )
    if err == errno.EOVERFLOW:
        return errors.InvalidAttrError(
            f"{name}: sample_max_stack/callchain depth exceeds kernel.perf_event_max_stack (EOVERFLOW)", **common
        )
    return errors.PmuscopeError(f"perf_event_open of {name} failed: {os.strerror(err)} (errno {err})", **common)


#: fields probed, in order, when the kernel says EINVAL: zeroing one that makes
#: the open succeed names the culprit
_PROBE_FIELDS = (
    "precise_ip",
    "exclude_guest",
    "exclude_host",
    "exclude_hv",
    "exclude_idle",
    "exclude_callchain_kernel",
    "exclude_callchain_user",
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


def probe_invalid_field(attr: abi.perf_event_attr, pid: int, cpu: int, group_fd: int, flags: int) -> str | None:
    """Find which attr field made the kernel say EINVAL by clearing one
    non-zero field at a time and retrying (perf's fallback does the same for a
    few fields). Returns e.g. ``"precise_ip=3"`` or None."""
    if _open_hook is not None:
        return None
    for name in _PROBE_FIELDS:
        value = getattr(attr, name)
        if not value:
            continue
        trial = attr.copy()
        setattr(trial, name, 0)
        if name == "sample_regs_user":
            trial.sample_stack_user = 0
        if name == "sigtrap":
            trial.remove_on_exec = 0
        try:
            fd = raw_perf_event_open(trial, pid, cpu, group_fd, flags | abi.PERF_FLAG_FD_CLOEXEC)
        except OSError:
            continue
        os.close(fd)
        return f"{name}={value:#x}" if name in ("read_format", "sample_type", "branch_sample_type", "config1", "config2", "config3") else f"{name}={value}"
    if attr.freq and attr.sample_freq:
        try:
            with open("/proc/sys/kernel/perf_event_max_sample_rate") as f:
                limit = int(f.read())
            if attr.sample_freq > limit:
                return f"sample_freq={attr.sample_freq} (above kernel.perf_event_max_sample_rate={limit})"
        except (OSError, ValueError):
            pass
    return None


_U64 = struct.Struct("=Q")
