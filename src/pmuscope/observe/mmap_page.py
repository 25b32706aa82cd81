"""User-space counter reads through the perf mmap page (self-monitoring).

The kernel documents the protocol in ``include/uapi/linux/perf_event.h``
(comment above ``struct perf_event_mmap_page``) and PAPI implements it in
``perf_helpers.h:mmap_read_self()``::

    do { seq = pc->lock; barrier();
         enabled = pc->time_enabled; running = pc->time_running;
         if (cap_user_time && enabled != running) cyc = rdtsc(), time_* ...
         idx = pc->index; count = pc->offset;
         if (cap_user_rdpmc && idx) count += sign_extend(rdpmc(idx - 1), pmc_width);
         barrier();
    } while (pc->lock != seq);

``index == 0`` (software events, a descheduled counter) or a missing
``cap_user_rdpmc`` means the counter cannot be read from user space: the
reader falls back to ``read()`` on the fd, which is always right.

Three paths, fastest first (``MmapCounter.path`` says which one is active):

- ``rdpmc``: the whole loop in C (:mod:`pmuscope._native`), when the native
  helper is built and the page allows rdpmc;
- ``mmap``: the same loop in Python over the mapped page, with ``rdpmc``
  from the native helper (the reference implementation the C loop is tested
  against);
- ``read``: the ``read(2)`` fallback.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from typing import Callable

from ..kernel import PerfEventFd, abi

try:  # optional native helper
    from .. import _native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised where no compiler exists
    _native = None

#: lock (u32 @8), index (u32 @12), offset (s64 @16), time_enabled, time_running,
#: capabilities (u64 @40), pmc_width, time_shift (u16 @48, @50), time_mult (u32 @52),
#: time_offset (u64 @56)
_LOCK = struct.Struct("=I")
_BODY = struct.Struct("=IqQQQHHIQ")
_SHORT = struct.Struct("=QQ")  # time_cycles, time_mask @80
assert _BODY.size == 52  # offsets 12..64

MAX_RETRIES = 10000


def native_available() -> bool:
    return _native is not None


def native_rdpmc_available() -> bool:
    return _native is not None and bool(getattr(_native, "HAVE_RDPMC", 0))


def sign_extend(value: int, width: int) -> int:
    """Sign-extend a ``width``-bit counter value (``pmc_width``) to Python int."""
    if width <= 0 or width >= 64:
        value &= (1 << 64) - 1
        return value - (1 << 64) if value >> 63 else value
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def extrapolate_time(cyc: int, time_offset: int, time_mult: int, time_shift: int,
                     time_cycles: int = 0, time_mask: int = 0, short: bool = False) -> int:
    """Nanoseconds since the page's last update for TSC value ``cyc``
    (the kernel's formula; ``cap_user_time_short`` folds ``cyc`` first)."""
    if short:
        cyc = time_cycles + ((cyc - time_cycles) & time_mask)
    quot = cyc >> time_shift
    rem = cyc & ((1 << time_shift) - 1)
    return (time_offset + quot * time_mult + ((rem * time_mult) >> time_shift)) & ((1 << 64) - 1)


def read_page(
    buf,
    rdpmc: Callable[[int], int] | None = None,
    rdtsc: Callable[[], int] | None = None,
    *,
    _between: Callable[[int], None] | None = None,
) -> tuple[int, int, int] | None:
    """The seqlock read over a page buffer (any object supporting the buffer
    protocol): ``(count, time_enabled, time_running)``, or None when the
    counter is not readable from user space (index 0, no cap_user_rdpmc, or no
    ``rdpmc`` callable) and ``read()`` must be used.

    ``_between(attempt)`` is a test hook called after the fields are read and
    before the lock is checked again, to play a concurrent kernel update.
    """
    for attempt in range(MAX_RETRIES):
        seq = _LOCK.unpack_from(buf, 8)[0]
        index, offset, enabled, running, caps, width, shift, mult, toff = _BODY.unpack_from(buf, 12)
        if not (caps & abi.CAP_USER_RDPMC and index and rdpmc is not None):
            return None
        count = offset + sign_extend(rdpmc(index - 1), width)
        delta = 0
        if caps & abi.CAP_USER_TIME and enabled != running and rdtsc is not None:
            short = bool(caps & abi.CAP_USER_TIME_SHORT)
            tcyc, tmask = _SHORT.unpack_from(buf, 80) if short else (0, 0)
            delta = extrapolate_time(rdtsc(), toff, mult, shift, tcyc, tmask, short)
        if _between is not None:
            _between(attempt)
        if _LOCK.unpack_from(buf, 8)[0] == seq:
            return count, enabled + delta, running + delta
    raise RuntimeError("perf mmap page lock did not settle")  # the kernel never holds it this long


_ENA_RUN = struct.Struct("=QQQ")


class MmapCounter:
    """One self-monitoring counter of the calling thread, read through its mmap
    page where the hardware allows, else through ``read()``.

    ``attr`` is opened for ``pid=0`` (the calling thread) and ``cpu=-1``.
    ``read()`` returns ``(count, time_enabled, time_running)``.
    """

    def __init__(self, attr: abi.perf_event_attr, *, event: str | None = None, prefer: str = "auto") -> None:
        attr = attr.copy()
        attr.read_format = abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING
        self.fd = PerfEventFd(attr, pid=0, cpu=-1, event=event)
        self.event = event
        self._map = mmap.mmap(self.fd.fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._addr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._buf = bytearray(24)
        #: measured ns per read of each usable path, when ``prefer="auto"`` had to choose
        self.calibration: dict[str, float] = {}
        self.path = "read"
        self.path = self._choose(prefer)

    def page(self) -> abi.perf_event_mmap_page:
        """A snapshot of the mmap page."""
        return abi.perf_event_mmap_page.from_buffer_copy(self._map[: ctypes.sizeof(abi.perf_event_mmap_page)])

    def _choose(self, prefer: str) -> str:
        if prefer == "read":
            return "read"
        p = self.page()
        usable = bool(p.cap_user_rdpmc and p.index)
        if usable and native_rdpmc_available():
            if prefer == "auto":
                # why: under a hypervisor that traps RDPMC (KVM's vPMU) a user-space
                # read costs a VM exit and is slower than read(2): measure, don't assume
                self.calibration = self._calibrate()
                return min(self.calibration, key=self.calibration.__getitem__)
            if prefer in ("rdpmc", "mmap"):
                return prefer
        return "read"

    def _calibrate(self, reps: int = 300) -> dict[str, float]:
        import time

        costs: dict[str, float] = {}
        for path in ("rdpmc", "read"):
            self.path = path
            self.read()
            t = time.perf_counter_ns()
            for _ in range(reps):
                self.read()
            costs[path] = (time.perf_counter_ns() - t) / reps
        return costs

    def read(self) -> tuple[int, int, int]:
        if self.path == "rdpmc":
            got = _native.mmap_read(self._addr)
            if got is not None:
                return got
        elif self.path == "mmap":
            got = read_page(self._map, _native.rdpmc, _native.rdtsc)
            if got is not None:
                return got
        os.readv(self.fd.fd, [self._buf])
        return _ENA_RUN.unpack_from(self._buf)

    def read_syscall(self) -> tuple[int, int, int]:
        """Always through read(2) (the reference)."""
        os.readv(self.fd.fd, [self._buf])
        return _ENA_RUN.unpack_from(self._buf)

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a ctypes view is still alive; the fd close releases it at exit
                pass
            self._map = None
        self.fd.close()

    def __enter__(self) -> "MmapCounter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MmapCounter(event={self.event!r}, path={self.path!r})"


def explain() -> dict[str, object]:
    """Which read paths are available here and why (for doctor / --explain)."""
    info: dict[str, object] = {
        "native_helper": native_available(),
        "native_rdpmc": native_rdpmc_available(),
    }
    rdpmc_file = "/sys/bus/event_source/devices/cpu/rdpmc"
    try:
        with open(rdpmc_file) as f:
            info["sysfs_rdpmc"] = f.read().strip()
    except OSError:
        info["sysfs_rdpmc"] = None
    try:
        c = MmapCounter(abi.perf_event_attr(type=abi.PERF_TYPE_HARDWARE, config=0, exclude_kernel=1, exclude_hv=1), event="cycles:u")
        p = c.page()
        info.update(cycles_path=c.path, cap_user_rdpmc=bool(p.cap_user_rdpmc), index=p.index,
                    cap_user_time=bool(p.cap_user_time), pmc_width=p.pmc_width)
        if c.calibration:
            info["calibration_ns"] = {k: round(v) for k, v in c.calibration.items()}
            if c.path == "read":
                info["reason"] = "rdpmc works here but is slower than read() (the hypervisor traps RDPMC): using read()"
        c.close()
    except Exception as err:  # no PMU, no permission: the reason is the answer
        info["cycles_path"] = "read"
        info["reason"] = str(err)
    if info.get("cycles_path") != "rdpmc" and "reason" not in info:
        if not native_available():
            info["reason"] = "the native helper is not built (no C compiler at install time): using read()"
        elif not info.get("cap_user_rdpmc"):
            info["reason"] = "the kernel does not allow rdpmc for this event (cap_user_rdpmc=0): using read()"
    return info
