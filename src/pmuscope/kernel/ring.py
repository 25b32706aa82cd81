"""The perf mmap ring buffer: ``1 + 2^n`` pages per (cpu | thread), the
``data_head``/``data_tail`` protocol, overwrite (backward) snapshots and the AUX
area. Records are copied out in bulk as chunks of whole records, which
:mod:`pmuscope.records` decodes columnar.

The protocol (``include/uapi/linux/perf_event.h``, ``struct
perf_event_mmap_page``; ``tools/lib/perf/mmap.c``)::

    head = page.data_head        # the kernel's store of head is a release
    smp_rmb()                    # ... so data reads must not pass this load
    copy data[tail : head]       # (mod data_size; a record may wrap the end)
    smp_mb()                     # all reads done before the kernel may reuse space
    page.data_tail = tail = head

Memory ordering from Python: ``data_head``/``data_tail`` are read and written
as single aligned 8-byte loads/stores (items of a ``memoryview`` cast to
``Q``: CPython copies an item with one fixed-size ``memcpy``, a plain ``mov``). On x86-64 (TSO) loads are
not reordered with older loads and stores are not reordered with older loads,
so program order gives exactly the ``smp_rmb``/``smp_mb`` the protocol needs.
On weakly ordered CPUs (aarch64, ppc64, riscv) Python cannot emit ``dmb``/
``lwsync`` itself; :func:`_barrier` then acquires and releases a
``threading.Lock``, whose C implementation executes the acquire/release
barrier instructions (LDAXR/STLR on aarch64, lwsync on ppc). That orders the
accesses in practice but is not a formal full fence: a pure-C reader is the
reference for those architectures.
"""

from __future__ import annotations

import errno
import mmap
import os
import platform
import select
import struct
import sys
import threading
from typing import Iterable, Iterator

from .. import errors
from . import abi
from .syscall import PerfEventFd

PAGE_SIZE = mmap.PAGESIZE

# word indices (u64) of the ring-buffer fields in perf_event_mmap_page
_W_DATA_HEAD = abi.perf_event_mmap_page.data_head.offset // 8
_W_DATA_TAIL = abi.perf_event_mmap_page.data_tail.offset // 8
_W_DATA_OFFSET = abi.perf_event_mmap_page.data_offset.offset // 8
_W_DATA_SIZE = abi.perf_event_mmap_page.data_size.offset // 8
_W_AUX_HEAD = abi.perf_event_mmap_page.aux_head.offset // 8
_W_AUX_TAIL = abi.perf_event_mmap_page.aux_tail.offset // 8
_W_AUX_OFFSET = abi.perf_event_mmap_page.aux_offset.offset // 8
_W_AUX_SIZE = abi.perf_event_mmap_page.aux_size.offset // 8

_HDR = struct.Struct("<IHH")
_U64_MASK = (1 << 64) - 1
_STRONGLY_ORDERED = platform.machine() in ("x86_64", "amd64", "i386", "i686")
_barrier_lock = threading.Lock()


def _barrier() -> None:
    """smp_rmb()/smp_mb() stand-in; a no-op on x86 (see the module docstring)."""
    if not _STRONGLY_ORDERED:
        _barrier_lock.acquire()
        _barrier_lock.release()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class RingBuffer:
    """The mmap'd ring buffer of one perf event fd.

    ``pages`` data pages (a power of two) follow the control page.
    ``overwrite=True`` maps read-only, which tells the kernel to overwrite old
    data instead of dropping new data; with ``attr.write_backward`` set, take
    consistent snapshots with :meth:`snapshot`. ``aux_pages`` > 0 also maps the
    AUX area (SPE, Intel PT, CoreSight).

    Other events can write into this buffer with :meth:`add` (ioctl
    ``PERF_EVENT_IOC_SET_OUTPUT``; same CPU, or same task, required by the kernel).
    """

    def __init__(
        self,
        fd: PerfEventFd,
        pages: int = 16,
        aux_pages: int = 0,
        overwrite: bool = False,
        *,
        aux_overwrite: bool = False,
        track_lost: bool = True,
    ) -> None:
        if not _is_pow2(pages):
            raise errors.PmuscopeError(f"ring buffer data pages must be a power of two, got {pages}")
        self.fd = fd
        self.outputs: list[PerfEventFd] = [fd]
        self.pages = pages
        length = (1 + pages) * PAGE_SIZE
        prot = mmap.PROT_READ | (0 if overwrite else mmap.PROT_WRITE)
        try:
            mem = mmap.mmap(fd.fileno(), length, mmap.MAP_SHARED, prot)
        except OSError as err:
            raise _mmap_error(err, fd, length, "ring buffer") from err
        self._setup(mem, PAGE_SIZE, overwrite, track_lost)
        if aux_pages:
            self.map_aux(aux_pages, overwrite=aux_overwrite)

    # -- construction over any buffer (tests, replays) -------------------------------
    @classmethod
    def from_memory(cls, mem, page_size: int = PAGE_SIZE, *, overwrite: bool = False, fd: PerfEventFd | None = None,
                    track_lost: bool = True) -> "RingBuffer":
        """A ring over ``mem`` (e.g. a bytearray laid out like the mmap: a
        control page then the data pages) — used to test the protocol without a kernel."""
        self = cls.__new__(cls)
        self.fd = fd
        self.outputs = [fd] if fd is not None else []
        self.pages = len(mem) // page_size - 1
        self._setup(mem, page_size, overwrite, track_lost)
        return self

    def _setup(self, mem, page_size: int, overwrite: bool, track_lost: bool) -> None:
        self.mem = mem
        self.page_size = page_size
        self.overwrite = overwrite
        self.track_lost = track_lost
        # why not numpy: recording must not pay for importing it (~45 ms of a
        # ~0.2 s ``record -- true``); the views are released by close()
        self._views = [memoryview(mem)]
        self._views.append(self._views[0][:page_size])
        self._ctl = self._views[1].cast("Q")
        # data_offset/data_size are filled in by kernels >= 4.1; before that
        # the data pages start right after the control page.
        self.data_offset = int(self._ctl[_W_DATA_OFFSET]) or page_size
        self.data_size = int(self._ctl[_W_DATA_SIZE]) or (len(mem) - page_size)
        if not _is_pow2(self.data_size):
            raise errors.FormatError(f"ring buffer data_size {self.data_size} is not a power of two")
        self._mask = self.data_size - 1
        self._tail = int(self._ctl[_W_DATA_TAIL])
        self.aux: mmap.mmap | None = None
        self.aux_size = 0
        self._aux_tail = 0
        #: bytes copied out so far, and wake-ups seen by :meth:`poll`
        self.bytes_read = 0
        self.wakeups = 0
        #: sums of PERF_RECORD_LOST.lost / LOST_SAMPLES.lost seen in chunks read
        self.lost = 0
        self.lost_samples = 0

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """Unmap (the fds stay open; close them separately)."""
        ctl, self._ctl = self._ctl, None
        for v in [ctl, *reversed(getattr(self, "_views", ()))]:
            if v is not None:
                v.release()  # no view may outlive the mapping: mmap.close() refuses while one is exported
        self._views = []
        for m in (self.aux, self.mem):
            if isinstance(m, mmap.mmap) and not m.closed:
                try:
                    m.close()
                except BufferError:
                    pass  # a decoded view still refers to it; unmapped when collected
        self.aux = None

    def __enter__(self) -> "RingBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fileno(self) -> int:
        if self.fd is None:
            raise errors.PmuscopeError("this ring buffer has no perf fd (built from memory)")
        return self.fd.fileno()

    # -- sharing --------------------------------------------------------------------------
    def add(self, other: PerfEventFd) -> None:
        """Send ``other``'s records into this buffer (PERF_EVENT_IOC_SET_OUTPUT)."""
        try:
            other.set_output(self.fd)
        except OSError as err:
            raise errors.InvalidAttrError(
                f"cannot redirect {other!r} into the ring buffer of {self.fd!r}: {os.strerror(err.errno or 0)}; "
                "SET_OUTPUT needs both events on the same CPU (or the same task), the same clock, "
                "and the redirected event must not have its own mmap",
                errno=err.errno,
            ) from err
        self.outputs.append(other)

    def ids(self) -> list[int]:
        """The event ids of every fd writing into this buffer (for an AttrTable)."""
        return [f.id() for f in self.outputs]

    # -- head / tail ------------------------------------------------------------------------
    @property
    def data_head(self) -> int:
        return int(self._ctl[_W_DATA_HEAD])

    @property
    def data_tail(self) -> int:
        return int(self._ctl[_W_DATA_TAIL])

    def available(self) -> int:
        """Bytes written by the kernel and not yet consumed."""
        return (int(self._ctl[_W_DATA_HEAD]) - self._tail) & _U64_MASK

    def _copy(self, pos: int, n: int) -> bytes:
        """``n`` bytes of the data area from ring position ``pos``, across the wrap."""
        start = pos & self._mask
        base = self.data_offset
        mem = self.mem
        if start + n <= self.data_size:
            return bytes(mem[base + start : base + start + n])
        first = self.data_size - start
        return bytes(mem[base + start : base + self.data_size]) + bytes(mem[base : base + n - first])

    def read_records(self, max_bytes: int | None = None) -> bytes:
        """Copy out every whole record written since the last call (at most
        ``max_bytes``, cut at a record boundary), then release the space to the
        kernel by writing ``data_tail``. Returns b"" when there is nothing new.

        The kernel only publishes ``data_head`` at record boundaries, so the
        chunk always holds whole records (a record wrapping the end of the
        buffer is joined up in the copy).
        """
        if self.overwrite:
            raise errors.PmuscopeError("an overwrite-mode ring is read with snapshot(), not read_records()")
        head = int(self._ctl[_W_DATA_HEAD])
        _barrier()  # smp_rmb: data reads after the data_head load
        tail = self._tail
        avail = (head - tail) & _U64_MASK
        if avail == 0:
            return b""
        if avail > self.data_size:
            raise errors.FormatError(
                f"ring buffer data_head={head} is {avail} bytes past data_tail={tail}, more than its "
                f"{self.data_size}-byte size: the control page is corrupt or another reader moved data_tail"
            )
        if max_bytes is not None and avail > max_bytes:
            avail = self._cut(tail, avail, max_bytes)
            if avail == 0:
                raise errors.PmuscopeError(f"max_bytes={max_bytes} is smaller than the next record")
        chunk = self._copy(tail, avail)
        _barrier()  # smp_mb: the copy is complete before the kernel may reuse it
        self._tail = (tail + avail) & _U64_MASK
        self._ctl[_W_DATA_TAIL] = self._tail
        self.bytes_read += avail
        if self.track_lost:
            self._scan_lost(chunk)
        return chunk

    def _cut(self, tail: int, avail: int, max_bytes: int) -> int:
        """Bytes of whole records from ``tail`` that fit in ``max_bytes``."""
        taken = 0
        while taken < avail:
            hdr = self._copy(tail + taken, 8)
            size = _HDR.unpack(hdr)[2]
            if size < 8:
                raise errors.FormatError(f"ring buffer record at position {tail + taken} has size {size}")
            if taken + size > max_bytes:
                break
            taken += size
        return taken

    def _scan_lost(self, chunk: bytes) -> None:
        n = len(chunk)
        # numpy only when it is already there: importing it here (~45 ms, far more in a thread
        # that shares the GIL with a busy one) held up on_overflow's first callbacks ~180 ms
        np = sys.modules.get("numpy")
        if n % 8 == 0 and n and np is not None:
            # cheap pre-check: any word that could be a LOST/LOST_SAMPLES header?
            W = np.frombuffer(chunk, dtype="<u8")
            t = W & np.uint64(0xFFFFFFFF)
            size = W >> np.uint64(48)
            maybe = ((t == abi.PERF_RECORD_LOST) | (t == abi.PERF_RECORD_LOST_SAMPLES)) & (size >= 16) & (size <= 128)
            if not maybe.any():
                return
        off = 0
        unpack = _HDR.unpack_from
        while off + 8 <= n:
            t, _misc, size = unpack(chunk, off)
            if size < 8:
                break
            if t == abi.PERF_RECORD_LOST and off + 24 <= n:
                self.lost += struct.unpack_from("<Q", chunk, off + 16)[0]
            elif t == abi.PERF_RECORD_LOST_SAMPLES and off + 16 <= n:
                self.lost_samples += struct.unpack_from("<Q", chunk, off + 8)[0]
            off += size

    def chunks(self) -> Iterator[bytes]:
        """Drain what is there now, as chunks (non-blocking)."""
        while True:
            chunk = self.read_records()
            if not chunk:
                return
            yield chunk

    def source(self, attrs):
        """A :class:`~pmuscope.records.RecordSource` over what is in the buffer now."""
        from ..records import RecordSource

        return RecordSource(self.chunks(), attrs)

    # -- wake-ups -----------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> int:
        """Wait until the kernel wakes readers (``wakeup_events`` records or
        ``wakeup_watermark`` bytes, as set in the attr) or ``timeout`` seconds
        pass. Returns the poll event mask (0 on timeout); POLLHUP means the
        monitored task is gone."""
        p = select.poll()
        p.register(self.fileno(), select.POLLIN | select.POLLHUP)
        ev = p.poll(None if timeout is None else max(0, int(timeout * 1000)))
        mask = 0
        for _fd, bits in ev:
            mask |= bits
        if mask & select.POLLIN:
            self.wakeups += 1
        return mask

    # -- overwrite mode ------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """Pause the buffer (PERF_EVENT_IOC_PAUSE_OUTPUT), copy the newest whole
        records of a ``write_backward`` overwrite ring, resume. Records are
        returned oldest first, like :meth:`read_records`."""
        if not self.overwrite:
            raise errors.PmuscopeError("snapshot() is for rings mapped with overwrite=True")
        if self.fd is not None:
            if not self.fd.attr.write_backward:
                raise errors.InvalidAttrError(
                    "overwrite snapshots need the event opened with attr.write_backward=1 "
                    "(a forward overwrite ring has no record boundary to start from)"
                )
            self.fd.pause_output(True)
        try:
            return self._read_backward()
        finally:
            if self.fd is not None:
                self.fd.pause_output(False)

    def _read_backward(self) -> bytes:
        head = int(self._ctl[_W_DATA_HEAD])
        _barrier()
        # In backward mode data_head counts down from 0: the newest record
        # starts at head, older ones follow at higher addresses. Walk until a
        # zero header (never written) or one whole buffer (perf's
        # overwrite_rb_find_range in tools/lib/perf/mmap.c).
        positions: list[tuple[int, int]] = []
        pos = head
        size_total = 0
        while size_total < self.data_size:
            hdr = self._copy(pos, 8)
            size = _HDR.unpack(hdr)[2]
            if size == 0:
                break
            if size < 8 or size_total + size > self.data_size:
                break
            positions.append((pos, size))
            pos = (pos + size) & _U64_MASK
            size_total += size
        out = b"".join(self._copy(p, s) for p, s in reversed(positions))
        if self.track_lost:
            self._scan_lost(out)
        return out

    # -- AUX area --------------------------------------------------------------------------------
    def map_aux(self, aux_pages: int, *, overwrite: bool = False) -> None:
        """Map the AUX area after the data pages: write ``aux_offset``/``aux_size``
        into the control page, then mmap that region of the fd."""
        if not _is_pow2(aux_pages):
            raise errors.PmuscopeError(f"AUX pages must be a power of two, got {aux_pages}")
        if self.overwrite:
            raise errors.PmuscopeError("the AUX area needs a writable (non-overwrite) control page")
        aux_offset = self.data_offset + self.data_size
        aux_size = aux_pages * self.page_size
        self._ctl[_W_AUX_OFFSET] = aux_offset
        self._ctl[_W_AUX_SIZE] = aux_size
        if self.fd is None:
            raise errors.PmuscopeError("this ring buffer has no perf fd to map an AUX area from")
        prot = mmap.PROT_READ | (0 if overwrite else mmap.PROT_WRITE)
        try:
            self.aux = mmap.mmap(self.fd.fileno(), aux_size, mmap.MAP_SHARED, prot, offset=aux_offset)
        except OSError as err:
            raise _mmap_error(err, self.fd, aux_size, "AUX area") from err
        self.aux_size = aux_size
        self._aux_tail = int(self._ctl[_W_AUX_TAIL])

    def attach_aux_memory(self, aux_mem) -> None:
        """Use ``aux_mem`` as the AUX area (tests; aux_offset/aux_size are set too)."""
        self._ctl[_W_AUX_OFFSET] = self.data_offset + self.data_size
        self._ctl[_W_AUX_SIZE] = len(aux_mem)
        self.aux = aux_mem
        self.aux_size = len(aux_mem)
        self._aux_tail = int(self._ctl[_W_AUX_TAIL])

    @property
    def aux_head(self) -> int:
        return int(self._ctl[_W_AUX_HEAD])

    def read_aux(self) -> bytes:
        """Copy out the AUX data between ``aux_tail`` and ``aux_head`` and release it.
        The PERF_RECORD_AUX records in the data area say which parts belong to what."""
        if self.aux is None:
            raise errors.PmuscopeError("no AUX area is mapped (RingBuffer(..., aux_pages=N))")
        head = int(self._ctl[_W_AUX_HEAD])
        _barrier()
        tail = self._aux_tail
        n = (head - tail) & _U64_MASK
        if n == 0:
            return b""
        if n > self.aux_size:
            raise errors.FormatError(f"aux_head={head} is {n} bytes past aux_tail={tail}, more than aux_size={self.aux_size}")
        start = tail % self.aux_size
        if start + n <= self.aux_size:
            data = bytes(self.aux[start : start + n])
        else:
            data = bytes(self.aux[start:]) + bytes(self.aux[: n - (self.aux_size - start)])
        _barrier()
        self._aux_tail = (tail + n) & _U64_MASK
        self._ctl[_W_AUX_TAIL] = self._aux_tail
        return data


def poll_rings(rings: Iterable[RingBuffer], timeout: float | None = None) -> list[RingBuffer]:
    """Wait on several rings at once; return those with data (or hang-up)."""
    rings = list(rings)
    p = select.poll()
    by_fd = {}
    for r in rings:
        p.register(r.fileno(), select.POLLIN | select.POLLHUP)
        by_fd[r.fileno()] = r
    ready = []
    for fd, bits in p.poll(None if timeout is None else max(0, int(timeout * 1000))):
        r = by_fd[fd]
        if bits & select.POLLIN:
            r.wakeups += 1
        ready.append(r)
    return ready


def _mmap_error(err: OSError, fd: PerfEventFd, length: int, what: str) -> errors.PmuscopeError:
    if err.errno == errno.EPERM or err.errno == errno.ENOMEM:
        try:
            with open("/proc/sys/kernel/perf_event_mlock_kb") as f:
                limit = f.read().strip()
        except OSError:
            limit = "?"
        return errors.PermissionDeniedError(
            f"cannot mmap a {length // 1024} KiB perf {what} for {fd!r}: {os.strerror(err.errno)}; "
            f"the per-user limit kernel.perf_event_mlock_kb is {limit} KiB (plus RLIMIT_MEMLOCK): "
            "use fewer pages or raise the limit",
            errno=err.errno,
        )
    return errors.PmuscopeError(f"cannot mmap a perf {what} of {length} bytes for {fd!r}: {os.strerror(err.errno or 0)}",
                                errno=err.errno)
