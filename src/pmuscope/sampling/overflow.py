"""Overflow notification: call a Python function every N events.

:func:`on_overflow` opens one sampling event with ``sample_period = N`` and
asks the kernel to signal each overflow (``fcntl(O_ASYNC)``, the mechanism
PAPI's overflow handlers and perf's ``sigtrap`` tests use). Python runs signal
handlers only in the main thread, between bytecodes, so instead of a handler
the signal is directed at one dispatcher thread (``F_SETOWN_EX`` with
``F_OWNER_TID``), blocked there, and read from a ``signalfd``: no Python code
runs in signal context and the caller's thread is never interrupted. Each
wake-up drains the event's ring buffer; every sample record becomes one
``callback(info)`` call, subject to a rate limit.

``delivery="poll"`` uses ``poll(2)`` on the perf fd instead of a signal (same
result; for systems where ``signalfd`` is unavailable).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import signal
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import errors
from ..kernel import abi
from ..kernel.ring import RingBuffer
from ..kernel.syscall import PerfEventFd

__all__ = ["on_overflow", "OverflowHandle", "OverflowInfo", "EventCannotSampleError"]

# fcntl.h (asm-generic; the same numbers on x86-64, arm64, riscv64)
F_SETSIG = 10
F_SETOWN_EX = 15
F_OWNER_TID = 0
SFD_CLOEXEC = 0o2000000
SFD_NONBLOCK = 0o4000
_SIGINFO_SIZE = 128  # struct signalfd_siginfo
_SIGSET_BYTES = 128  # glibc sigset_t

#: PERF_SAMPLE_IP | TID | TIME | CPU | PERIOD, in the kernel's record order
_SAMPLE_TYPE = int(abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.CPU
                   | abi.PerfSample.PERIOD)
_SAMPLE = struct.Struct("<QIIQIIQ")
_HDR = struct.Struct("<IHH")
_LOST = struct.Struct("<QQ")


class EventCannotSampleError(errors.EventNotSupportedError):
    """The event counts but the kernel refuses a sample period for it (uncore
    and some software events), so it can never overflow."""


@dataclass
class OverflowInfo:
    """What one callback receives."""

    #: the event's count when the overflow was handled (read from the fd)
    count: int
    #: the sample's time (perf_clock ns; ``time.monotonic_ns()`` domain for
    #: software events) or, without a sample, the dispatcher's monotonic time
    time_ns: int
    #: 1 for the first callback, 2 for the second, ...
    index: int
    #: ``{"ip", "pid", "tid", "time", "cpu", "period"}`` of the overflow's sample
    sample: dict[str, int] | None = None
    #: overflows not called back since the previous call (rate limit)
    skipped: int = 0
    #: samples the kernel dropped (PERF_RECORD_LOST) or throttled so far
    lost: int = 0
    throttled: int = 0


class _Libc:
    """signalfd and sigset helpers (the stdlib has no signalfd)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.signalfd = libc.signalfd
        self.signalfd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        self.signalfd.restype = ctypes.c_int
        self.sigemptyset = libc.sigemptyset
        self.sigaddset = libc.sigaddset

    def open(self, signums: list[int]) -> int:
        mask = ctypes.create_string_buffer(_SIGSET_BYTES)
        self.sigemptyset(mask)
        for s in signums:
            self.sigaddset(mask, ctypes.c_int(s))
        fd = self.signalfd(-1, mask, SFD_CLOEXEC | SFD_NONBLOCK)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"signalfd: {os.strerror(err)}")
        return fd


class OverflowHandle:
    """A running overflow notification; stop it with :meth:`close` or ``with``.

    Attributes: ``calls`` (callbacks made), ``overflows`` (samples seen),
    ``skipped`` (over the rate limit), ``lost`` and ``throttled`` (kernel),
    ``delivery`` ("signal" or "poll").
    """

    def __init__(self, spec, *, period: int, callback: Callable[[OverflowInfo], Any], pid: int, cpu: int,
                 max_rate: float | None, delivery: str, signum: int | None, pages: int) -> None:
        self.event = spec.name
        self.period = period
        self.callback = callback
        self.delivery = delivery
        self.max_rate = max_rate
        self.calls = 0
        self.overflows = 0
        self.skipped = 0
        self.lost = 0
        self.throttled = 0
        #: signals read from the signalfd (delivery="signal")
        self.signals = 0
        self.error: BaseException | None = None
        self._pending_skip = 0
        self._tokens = max(1.0, (max_rate or 0) / 10)
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._signum = signum if signum is not None else signal.SIGRTMIN + 5
        self._sfd = -1
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._ready = threading.Event()
        self._tid = 0
        self._thread_error: BaseException | None = None

        attr = spec.attr.copy()
        attr.sample_period = period
        attr.freq = 0
        attr.sample_type = _SAMPLE_TYPE
        attr.read_format = 0
        attr.disabled = 1
        attr.wakeup_events = 1
        attr.watermark = 0
        attr.sample_id_all = 1
        self.fd = _open_sampling(attr, spec.name, pid, cpu)
        try:
            self.ring = RingBuffer(self.fd, pages=pages, track_lost=False)  # _dispatch counts LOST records
            self._thread = threading.Thread(target=self._run, name=f"pmuscope-overflow-{spec.name}", daemon=True)
            self._thread.start()
            self._ready.wait()
            if self._thread_error is not None:
                raise self._thread_error
            if delivery == "signal":
                self._arm_signal()
            self.fd.enable()
        except BaseException:
            self.close()
            raise

    # -- setup ------------------------------------------------------------------------
    def _arm_signal(self) -> None:
        fd = self.fd.fileno()
        # why: F_SETOWN_EX with F_OWNER_TID sends the signal to exactly the
        # dispatcher thread (fcntl(2)); F_SETSIG makes it a queued real-time
        # signal instead of SIGIO; O_ASYNC turns delivery on (the perf fd's
        # ->fasync hook, kernel/events/core.c perf_fasync()).
        owner = struct.pack("ii", F_OWNER_TID, self._tid)
        fcntl.fcntl(fd, F_SETOWN_EX, owner)
        fcntl.fcntl(fd, F_SETSIG, self._signum)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_ASYNC | os.O_NONBLOCK)

    # -- the dispatcher thread -----------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.delivery == "signal":
                # blocked in this thread only: the thread-directed signal stays
                # pending here and signalfd reads it. SIGIO too: the kernel falls
                # back to it when the real-time queue is full (fcntl(2) F_SETSIG).
                signal.pthread_sigmask(signal.SIG_BLOCK, {self._signum, signal.SIGIO})
                self._sfd = _LIBC().open([self._signum, signal.SIGIO])
                self._tid = threading.get_native_id()
                wait_fd = self._sfd
            else:
                wait_fd = self.fd.fileno()
        except BaseException as err:  # reported to the constructor
            self._thread_error = errors.PmuscopeError(f"overflow delivery {self.delivery!r} unavailable: {err}")
            self._ready.set()
            return
        self._ready.set()
        poller = select.poll()
        poller.register(wait_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stop.is_set():
            try:
                poller.poll(100)
            except InterruptedError:
                continue
            if self.delivery == "signal":
                self._drain_signalfd()
            self._dispatch()
            if self.error is not None:
                break
        if self.delivery == "signal":
            self._drain_signalfd()  # the signals of the last records: counted too
        self._dispatch()

    def _drain_signalfd(self) -> None:
        while True:
            try:
                got = os.read(self._sfd, _SIGINFO_SIZE * 64)
                if not got:
                    return
                self.signals += len(got) // _SIGINFO_SIZE
            except BlockingIOError:
                return
            except OSError:
                return

    def _dispatch(self) -> None:
        if self.error is not None or self.ring is None:
            return
        data = self.ring.read_records()
        off, n = 0, len(data)
        while off + 8 <= n:
            rtype, _misc, size = _HDR.unpack_from(data, off)
            if size < 8:
                break
            if rtype == abi.PerfRecord.SAMPLE and size >= 8 + _SAMPLE.size:
                ip, pid, tid, t, cpu, _res, period = _SAMPLE.unpack_from(data, off + 8)
                self._one({"ip": ip, "pid": pid, "tid": tid, "time": t, "cpu": cpu, "period": period})
            elif rtype == abi.PerfRecord.LOST and size >= 8 + _LOST.size:
                self.lost += _LOST.unpack_from(data, off + 8)[1]
            elif rtype == abi.PerfRecord.THROTTLE:
                self.throttled += 1
            off += size

    def _one(self, sample: dict[str, int]) -> None:
        self.overflows += 1
        if self.max_rate:
            # a token bucket: ``max_rate`` calls per second on average, bursts of
            # a tenth of a second's worth (samples arrive in batches: the
            # dispatcher thread needs the GIL to run)
            now = time.monotonic()
            burst = max(1.0, self.max_rate / 10)
            self._tokens = min(burst, self._tokens + (now - self._last) * self.max_rate)
            self._last = now
            if self._tokens < 1.0:
                self.skipped += 1
                self._pending_skip += 1
                return
            self._tokens -= 1.0
        self.calls += 1
        info = OverflowInfo(count=self._count(), time_ns=sample["time"], index=self.calls, sample=sample,
                            skipped=self._pending_skip, lost=self.lost, throttled=self.throttled)
        self._pending_skip = 0
        try:
            self.callback(info)
        except BaseException as err:  # stop, and re-raise in the caller's thread at close()
            self.error = err

    def _count(self) -> int:
        try:
            return struct.unpack("<Q", os.read(self.fd.fileno(), 8))[0]
        except (OSError, struct.error):
            return self.overflows * self.period

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop notifications, join the dispatcher, release the event. Re-raises
        an exception the callback raised."""
        fd = getattr(self, "fd", None)
        if fd is not None and fd.fileno() >= 0:
            try:
                fd.disable()
            except OSError:
                pass
        self._stop.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        thread = getattr(self, "_thread", None)
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join()
        ring = getattr(self, "ring", None)
        if ring is not None:
            ring.close()
            self.ring = None
        if fd is not None:
            fd.close()
        for f in (self._sfd, self._wake_r, self._wake_w):
            if f >= 0:
                try:
                    os.close(f)
                except OSError:
                    pass
        self._sfd = self._wake_r = self._wake_w = -1
        err, self.error = self.error, None
        if err is not None:
            raise err

    @property
    def closed(self) -> bool:
        return self._wake_r < 0

    def __enter__(self) -> "OverflowHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<OverflowHandle {self.event} period={self.period} calls={self.calls} "
                f"overflows={self.overflows} delivery={self.delivery}>")


_libc_cache: list[_Libc] = []


def _LIBC() -> _Libc:
    if not _libc_cache:
        _libc_cache.append(_Libc())
    return _libc_cache[0]


def _open_sampling(attr: abi.perf_event_attr, name: str, pid: int, cpu: int) -> PerfEventFd:
    try:
        return PerfEventFd(attr, pid=pid, cpu=cpu, event=name)
    except (errors.InvalidAttrError, errors.EventNotSupportedError) as err:
        counting = attr.copy()
        counting.sample_period = 0
        counting.sample_type = 0
        counting.wakeup_events = 0
        try:
            PerfEventFd(counting, pid=pid, cpu=cpu, event=name).close()
        except errors.PmuscopeError:
            raise err from None
        raise EventCannotSampleError(
            f"event {name!r} counts but cannot sample: the kernel refused a sample period for it "
            f"({err}), so it never overflows. Use a core or software event (cpu-clock, task-clock, "
            f"cycles, instructions), or poll the counter instead.", event=name) from err


def on_overflow(event: str, *, period: int, callback: Callable[[OverflowInfo], Any], pid: int = 0, cpu: int = -1,
                max_rate: float | None = 10_000.0, delivery: str = "signal", signum: int | None = None,
                pages: int = 8) -> OverflowHandle:
    """Call ``callback(info)`` every ``period`` events of ``event``.

    ``event`` is one event string (``cpu-clock``, ``instructions:u``, ...);
    ``pid``/``cpu`` as in perf_event_open (``pid=0``: the calling thread).
    ``callback`` runs in a dispatcher thread and gets an :class:`OverflowInfo`
    (count so far, time, the overflow's sample). ``max_rate`` caps callbacks
    per second (overflows above it are counted in ``info.skipped``; None: no
    cap; the kernel also throttles at ``kernel.perf_event_max_sample_rate``).
    ``delivery`` is "signal" (a real-time signal read through signalfd) or
    "poll". Returns an :class:`OverflowHandle`; use it as a context manager::

        with pmuscope.on_overflow("cpu-clock", period=1_000_000, callback=print):
            work()

    Raises :class:`EventCannotSampleError` for an event that counts but
    cannot sample.
    """
    from ..events import parse_events

    if int(period) <= 0:
        raise errors.PmuscopeError(f"overflow period must be a positive event count, got {period!r}")
    if delivery not in ("signal", "poll"):
        raise errors.PmuscopeError(f"delivery must be 'signal' or 'poll', got {delivery!r}")
    if not callable(callback):
        raise TypeError("callback must be callable")
    specs = parse_events(event)
    if len(specs) != 1:
        raise errors.PmuscopeError(f"on_overflow takes one event, {event!r} names {len(specs)}")
    if pages & (pages - 1):
        raise errors.PmuscopeError(f"pages must be a power of two, got {pages}")
    return OverflowHandle(specs[0], period=int(period), callback=callback, pid=pid, cpu=cpu, max_rate=max_rate,
                          delivery=delivery, signum=signum, pages=pages)
