"""Minimal encoders of the records a perf.data writer synthesizes (COMM, MMAP,
MMAP2, FORK/EXIT, SAMPLE with common fields, FINISHED_ROUND, EVENT_UPDATE,
HEADER_ATTR, HEADER_FEATURE), laid out as ``include/uapi/linux/perf_event.h``
and ``tools/lib/perf/include/perf/event.h`` define them."""

from __future__ import annotations

import struct

from ..kernel import abi

R = abi.PerfRecord
S = abi.PerfSample


def _align8(n: int) -> int:
    return (n + 7) & ~7


def _cstr(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else bytes(s)
    n = _align8(len(raw) + 1)
    return raw + b"\0" * (n - len(raw))


def record(type_: int, misc: int, payload: bytes) -> bytes:
    """A whole record: ``perf_event_header`` + payload (padded to 8 bytes)."""
    payload = bytes(payload)
    payload += b"\0" * (_align8(len(payload)) - len(payload))
    size = 8 + len(payload)
    if size > 0xFFFF:
        raise ValueError(f"record of {size} bytes exceeds the 64 KiB perf_event_header.size limit")
    return struct.pack("<IHH", type_, misc, size) + payload


def comm(pid: int, tid: int, name: str, *, exec: bool = False, sample_id: bytes = b"") -> bytes:
    misc = abi.PERF_RECORD_MISC_USER | (abi.PERF_RECORD_MISC_COMM_EXEC if exec else 0)
    return record(R.COMM, misc, struct.pack("<II", pid, tid) + _cstr(name[:15]) + sample_id)


def mmap(pid: int, tid: int, start: int, length: int, pgoff: int, filename: str, *, misc: int = abi.PERF_RECORD_MISC_USER,
         sample_id: bytes = b"") -> bytes:
    return record(R.MMAP, misc, struct.pack("<IIQQQ", pid, tid, start, length, pgoff) + _cstr(filename) + sample_id)


def mmap2(pid: int, tid: int, start: int, length: int, pgoff: int, filename: str, *, maj: int = 0, min: int = 0,
          ino: int = 0, ino_generation: int = 0, prot: int = 5, flags: int = 2,
          misc: int = abi.PERF_RECORD_MISC_USER, build_id: bytes | None = None, sample_id: bytes = b"") -> bytes:
    """``PERF_RECORD_MMAP2``; with ``build_id`` the maj/min/ino words carry it
    (``PERF_RECORD_MISC_MMAP_BUILD_ID``)."""
    if build_id is not None:
        misc |= abi.PERF_RECORD_MISC_MMAP_BUILD_ID
        bid = bytes(build_id[:20])
        ident = struct.pack("<BBH", len(bid), 0, 0) + bid + b"\0" * (20 - len(bid))
    else:
        ident = struct.pack("<IIQQ", maj, min, ino, ino_generation)
    body = struct.pack("<IIQQQ", pid, tid, start, length, pgoff) + ident + struct.pack("<II", prot, flags)
    return record(R.MMAP2, misc, body + _cstr(filename) + sample_id)


def fork(pid: int, ppid: int, tid: int, ptid: int, time: int = 0, *, sample_id: bytes = b"") -> bytes:
    return record(R.FORK, 0, struct.pack("<IIIIQ", pid, ppid, tid, ptid, time) + sample_id)


def exit(pid: int, ppid: int, tid: int, ptid: int, time: int = 0, *, sample_id: bytes = b"") -> bytes:
    return record(R.EXIT, 0, struct.pack("<IIIIQ", pid, ppid, tid, ptid, time) + sample_id)


_TID, _TIME, _ID, _STREAM_ID, _CPU, _IDENTIFIER = (int(b) for b in (S.TID, S.TIME, S.ID, S.STREAM_ID, S.CPU, S.IDENTIFIER))


def sample_id(sample_type: int, *, pid: int = 0, tid: int = 0, time: int = 0, id: int = 0, stream_id: int = 0,
              cpu: int = 0) -> bytes:
    """The ``sample_id_all`` trailer of a side-band record."""
    st = int(sample_type)  # plain ints: an IntFlag operand makes every & build an enum member (~17 us a call)
    out = b""
    if st & _TID:
        out += struct.pack("<II", pid, tid)
    if st & _TIME:
        out += struct.pack("<Q", time)
    if st & _ID:
        out += struct.pack("<Q", id)
    if st & _STREAM_ID:
        out += struct.pack("<Q", stream_id)
    if st & _CPU:
        out += struct.pack("<II", cpu, 0)
    if st & _IDENTIFIER:
        out += struct.pack("<Q", id)
    return out


_SUPPORTED = S.IDENTIFIER | S.IP | S.TID | S.TIME | S.ADDR | S.ID | S.STREAM_ID | S.CPU | S.PERIOD | S.CALLCHAIN


def sample(sample_type: int, *, ip: int = 0, pid: int = 0, tid: int = 0, time: int = 0, addr: int = 0, id: int = 0,
           stream_id: int = 0, cpu: int = 0, period: int = 1, callchain: list[int] | tuple = (),
           misc: int = abi.PERF_RECORD_MISC_USER) -> bytes:
    """A ``PERF_RECORD_SAMPLE`` with the fields up to CALLCHAIN, in kernel order."""
    if int(sample_type) & ~int(_SUPPORTED):
        raise ValueError(f"sample_type {int(sample_type):#x} has fields this encoder does not write")
    out = []
    st = sample_type
    if st & S.IDENTIFIER:
        out.append(struct.pack("<Q", id))
    if st & S.IP:
        out.append(struct.pack("<Q", ip))
    if st & S.TID:
        out.append(struct.pack("<II", pid, tid))
    if st & S.TIME:
        out.append(struct.pack("<Q", time))
    if st & S.ADDR:
        out.append(struct.pack("<Q", addr))
    if st & S.ID:
        out.append(struct.pack("<Q", id))
    if st & S.STREAM_ID:
        out.append(struct.pack("<Q", stream_id))
    if st & S.CPU:
        out.append(struct.pack("<II", cpu, 0))
    if st & S.PERIOD:
        out.append(struct.pack("<Q", period))
    if st & S.CALLCHAIN:
        out.append(struct.pack(f"<Q{len(callchain)}Q", len(callchain), *[c & 0xFFFFFFFFFFFFFFFF for c in callchain]))
    return record(R.SAMPLE, misc, b"".join(out))


def finished_round() -> bytes:
    return record(R.FINISHED_ROUND, 0, b"")


def header_attr(attr: abi.perf_event_attr, ids: list[int], *, attr_size: int = abi.PERF_ATTR_SIZE_VER7) -> bytes:
    """Pipe mode ``PERF_RECORD_HEADER_ATTR {attr; u64 id[]}``."""
    return record(R.HEADER_ATTR, 0, attr_bytes(attr, attr_size) + struct.pack(f"<{len(ids)}Q", *ids))


def event_update_name(id: int, name: str) -> bytes:
    return record(R.EVENT_UPDATE, 0, struct.pack("<QQ", 2, id) + _cstr(name))


def header_feature(bit: int, payload: bytes) -> bytes:
    return record(R.HEADER_FEATURE, 0, struct.pack("<Q", bit) + payload)


def attr_bytes(attr: abi.perf_event_attr, attr_size: int = abi.PERF_ATTR_SIZE_VER7) -> bytes:
    """The attr truncated to ``attr_size`` (default VER7 = 128, what perf <= 6.2
    accepts), with ``size`` set to it; refuses to drop nonzero newer fields."""
    raw = bytearray(bytes(attr))
    if any(raw[attr_size:]):
        raise ValueError(f"perf_event_attr uses fields beyond {attr_size} bytes (config3), cannot write it at this size")
    raw = raw[:attr_size] + b"\0" * max(0, attr_size - len(raw))
    struct.pack_into("<I", raw, 4, attr_size)
    return bytes(raw)
