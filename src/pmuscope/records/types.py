"""Side-band records (everything but PERF_RECORD_SAMPLE) as small value classes,
their parsers, and the decode statistics.

The classes are written out (``__slots__``, ``__init__``) on :class:`~pmuscope._plain.Plain`
rather than made by ``@dataclass``: 26 dataclasses cost ~7 ms of every
``report``/``script`` start-up.

Layouts: ``include/uapi/linux/perf_event.h`` ``enum perf_event_type``.
"""

from __future__ import annotations

from types import SimpleNamespace

import struct

from .. import errors
from .._plain import Plain
from ..kernel import abi
from .attrs import AttrEntry, AttrTable

S = SimpleNamespace(**{m.name: int(m) for m in abi.PerfSample})  # plain ints: IntFlag ops are slow
R = abi.PerfRecord
_F = SimpleNamespace(**{m.name: int(m) for m in abi.PerfFormat})

_U64 = struct.Struct("<Q")
_U32x2 = struct.Struct("<II")


def _fmt_err(offset: int, what: str) -> errors.FormatError:
    return errors.FormatError(f"malformed record at byte offset {offset}: {what}", offset=offset)


class SampleId(Plain):
    """The ``struct sample_id`` trailer of a side-band record (``sample_id_all``).
    Fields the attr did not ask for are None."""

    __slots__ = ("pid", "tid", "time", "id", "stream_id", "cpu", "identifier")
    _fields = __slots__

    pid: int | None
    tid: int | None
    time: int | None
    id: int | None
    stream_id: int | None
    cpu: int | None
    identifier: int | None

    def __init__(
        self,
        pid: int | None = None,
        tid: int | None = None,
        time: int | None = None,
        id: int | None = None,
        stream_id: int | None = None,
        cpu: int | None = None,
        identifier: int | None = None,
    ) -> None:
        self.pid = pid
        self.tid = tid
        self.time = time
        self.id = id
        self.stream_id = stream_id
        self.cpu = cpu
        self.identifier = identifier


class ReadValues(Plain):
    """``struct read_format`` (PERF_RECORD_READ and PERF_SAMPLE_READ). For a
    group, ``values``/``ids``/``lost`` have one entry per member; otherwise one."""

    __slots__ = ("values", "time_enabled", "time_running", "ids", "lost", "group")
    _fields = __slots__

    values: list[int]
    time_enabled: int | None
    time_running: int | None
    ids: list[int] | None
    lost: list[int] | None
    group: bool

    def __init__(
        self,
        values: list[int],
        time_enabled: int | None = None,
        time_running: int | None = None,
        ids: list[int] | None = None,
        lost: list[int] | None = None,
        group: bool = False,
    ) -> None:
        self.values = values
        self.time_enabled = time_enabled
        self.time_running = time_running
        self.ids = ids
        self.lost = lost
        self.group = group


def parse_read_format(buf, pos: int, end: int, read_format: int, offset_for_errors: int) -> tuple[ReadValues, int]:
    """Parse a read_format at ``buf[pos:]`` (not past ``end``); return it and the new position."""
    F = SimpleNamespace(**{m.name: int(m) for m in abi.PerfFormat})

    def u64() -> int:
        nonlocal pos
        if pos + 8 > end:
            raise _fmt_err(offset_for_errors, f"read_format ({read_format:#x}) runs past the end of the record")
        (v,) = _U64.unpack_from(buf, pos)
        pos += 8
        return v

    if read_format & F.GROUP:
        nr = u64()
        per = 1 + bool(read_format & F.ID) + bool(read_format & F.LOST)
        te = u64() if read_format & F.TOTAL_TIME_ENABLED else None
        tr = u64() if read_format & F.TOTAL_TIME_RUNNING else None
        if nr * per * 8 > end - pos:
            raise _fmt_err(offset_for_errors, f"read_format group of nr={nr} members runs past the end of the record")
        values, ids, lost = [], [] if read_format & F.ID else None, [] if read_format & F.LOST else None
        for _ in range(nr):
            values.append(u64())
            if ids is not None:
                ids.append(u64())
            if lost is not None:
                lost.append(u64())
        return ReadValues(values, te, tr, ids, lost, True), pos
    value = u64()
    te = u64() if read_format & F.TOTAL_TIME_ENABLED else None
    tr = u64() if read_format & F.TOTAL_TIME_RUNNING else None
    ids = [u64()] if read_format & F.ID else None
    lost = [u64()] if read_format & F.LOST else None
    return ReadValues([value], te, tr, ids, lost, False), pos


def read_format_size(read_format: int, nr: int = 1) -> int:
    """Bytes of a read_format (``nr`` members for a group)."""
    F = _F
    times = bool(read_format & F.TOTAL_TIME_ENABLED) + bool(read_format & F.TOTAL_TIME_RUNNING)
    per = 1 + bool(read_format & F.ID) + bool(read_format & F.LOST)
    if read_format & F.GROUP:
        return 8 * (1 + times + nr * per)
    return 8 * (times + per)


# --- the records ------------------------------------------------------------------


class Record(Plain):
    """Common part: byte ``offset`` of the record in its stream, header ``misc``,
    and the ``sample_id`` trailer (None without ``sample_id_all``)."""

    __slots__ = ("offset", "misc", "sample_id")
    _fields = __slots__
    type = 0

    offset: int
    misc: int
    sample_id: SampleId | None

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id

    @property
    def time(self) -> int | None:
        return self.sample_id.time if self.sample_id is not None else None

    @property
    def cpu(self) -> int | None:
        return self.sample_id.cpu if self.sample_id is not None else None

    @property
    def cpumode(self) -> int:
        return self.misc & abi.PERF_RECORD_MISC_CPUMODE_MASK


class Mmap(Record):
    __slots__ = ("pid", "tid", "addr", "len", "pgoff", "filename")
    _fields = Record._fields + __slots__
    type = R.MMAP

    pid: int
    tid: int
    addr: int
    len: int
    pgoff: int
    filename: str

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        pid: int,
        tid: int,
        addr: int,
        len: int,
        pgoff: int,
        filename: str,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.tid = tid
        self.addr = addr
        self.len = len
        self.pgoff = pgoff
        self.filename = filename


class Mmap2(Record):
    """MMAP2: ``maj``/``min``/``ino``/``ino_generation``, or ``build_id`` when misc
    has PERF_RECORD_MISC_MMAP_BUILD_ID (then the inode fields are None)."""

    __slots__ = ("pid", "tid", "addr", "len", "pgoff", "maj", "min", "ino", "ino_generation", "build_id", "prot", "flags",
                 "filename")
    _fields = Record._fields + __slots__
    type = R.MMAP2

    pid: int
    tid: int
    addr: int
    len: int
    pgoff: int
    maj: int | None
    min: int | None
    ino: int | None
    ino_generation: int | None
    build_id: bytes | None
    prot: int
    flags: int
    filename: str

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        pid: int,
        tid: int,
        addr: int,
        len: int,
        pgoff: int,
        maj: int | None,
        min: int | None,
        ino: int | None,
        ino_generation: int | None,
        build_id: bytes | None,
        prot: int,
        flags: int,
        filename: str,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.tid = tid
        self.addr = addr
        self.len = len
        self.pgoff = pgoff
        self.maj = maj
        self.min = min
        self.ino = ino
        self.ino_generation = ino_generation
        self.build_id = build_id
        self.prot = prot
        self.flags = flags
        self.filename = filename


class Comm(Record):
    __slots__ = ("pid", "tid", "comm")
    _fields = Record._fields + __slots__
    type = R.COMM

    pid: int
    tid: int
    comm: str

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None, pid: int, tid: int, comm: str) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.tid = tid
        self.comm = comm

    @property
    def exec(self) -> bool:
        """True when the comm changed because of an exec (PERF_RECORD_MISC_COMM_EXEC)."""
        return bool(self.misc & abi.PERF_RECORD_MISC_COMM_EXEC)


class Fork(Record):
    __slots__ = ("pid", "ppid", "tid", "ptid", "fork_time")
    _fields = Record._fields + __slots__
    type = R.FORK

    pid: int
    ppid: int
    tid: int
    ptid: int
    fork_time: int

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        pid: int,
        ppid: int,
        tid: int,
        ptid: int,
        fork_time: int,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.ppid = ppid
        self.tid = tid
        self.ptid = ptid
        self.fork_time = fork_time


class Exit(Record):
    __slots__ = ("pid", "ppid", "tid", "ptid", "exit_time")
    _fields = Record._fields + __slots__
    type = R.EXIT

    pid: int
    ppid: int
    tid: int
    ptid: int
    exit_time: int

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        pid: int,
        ppid: int,
        tid: int,
        ptid: int,
        exit_time: int,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.ppid = ppid
        self.tid = tid
        self.ptid = ptid
        self.exit_time = exit_time


class Lost(Record):
    """The kernel dropped ``lost`` records of event ``id`` (ring buffer full)."""

    __slots__ = ("id", "lost")
    _fields = Record._fields + __slots__
    type = R.LOST

    id: int
    lost: int

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None, id: int, lost: int) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.id = id
        self.lost = lost


class LostSamples(Record):
    """``lost`` samples dropped before reaching the buffer (e.g. PEBS/SPE)."""

    __slots__ = ("lost",)
    _fields = Record._fields + __slots__
    type = R.LOST_SAMPLES

    lost: int

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None, lost: int) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.lost = lost


class _ThrottleRecord(Record):
    """PERF_RECORD_THROTTLE and UNTHROTTLE: the same fields."""

    __slots__ = ("throttle_time", "id", "stream_id")
    _fields = Record._fields + __slots__

    throttle_time: int
    id: int
    stream_id: int

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        throttle_time: int,
        id: int,
        stream_id: int,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.throttle_time = throttle_time
        self.id = id
        self.stream_id = stream_id


class Throttle(_ThrottleRecord):
    __slots__ = ()
    type = R.THROTTLE


class Unthrottle(_ThrottleRecord):
    __slots__ = ()
    type = R.UNTHROTTLE


class Switch(Record):
    __slots__ = ()
    _fields = Record._fields + __slots__
    type = R.SWITCH

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id

    @property
    def out(self) -> bool:
        return bool(self.misc & abi.PERF_RECORD_MISC_SWITCH_OUT)

    @property
    def preempt(self) -> bool:
        return bool(self.misc & abi.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)


class SwitchCpuWide(Record):
    """``next_prev_pid``/``tid``: the task switched to (on out) or from (on in)."""

    __slots__ = ("next_prev_pid", "next_prev_tid")
    _fields = Record._fields + __slots__
    type = R.SWITCH_CPU_WIDE

    next_prev_pid: int
    next_prev_tid: int

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        next_prev_pid: int,
        next_prev_tid: int,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.next_prev_pid = next_prev_pid
        self.next_prev_tid = next_prev_tid

    @property
    def out(self) -> bool:
        return bool(self.misc & abi.PERF_RECORD_MISC_SWITCH_OUT)

    @property
    def preempt(self) -> bool:
        return bool(self.misc & abi.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)


class Namespaces(Record):
    """``namespaces``: (dev, inode) per namespace, indexed by NET_NS_INDEX ..."""

    __slots__ = ("pid", "tid", "namespaces")
    _fields = Record._fields + __slots__
    type = R.NAMESPACES

    pid: int
    tid: int
    namespaces: list[tuple[int, int]]

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        pid: int,
        tid: int,
        namespaces: list[tuple[int, int]],
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.tid = tid
        self.namespaces = namespaces


class Ksymbol(Record):
    __slots__ = ("addr", "len", "ksym_type", "flags", "name")
    _fields = Record._fields + __slots__
    type = R.KSYMBOL

    addr: int
    len: int
    ksym_type: int
    flags: int
    name: str

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        addr: int,
        len: int,
        ksym_type: int,
        flags: int,
        name: str,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.addr = addr
        self.len = len
        self.ksym_type = ksym_type
        self.flags = flags
        self.name = name

    @property
    def unregister(self) -> bool:
        return bool(self.flags & abi.PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER)


class BpfEvent(Record):
    __slots__ = ("bpf_event_type", "flags", "id", "tag")
    _fields = Record._fields + __slots__
    type = R.BPF_EVENT

    bpf_event_type: int
    flags: int
    id: int
    tag: bytes

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        bpf_event_type: int,
        flags: int,
        id: int,
        tag: bytes,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.bpf_event_type = bpf_event_type
        self.flags = flags
        self.id = id
        self.tag = tag


class Cgroup(Record):
    __slots__ = ("id", "path")
    _fields = Record._fields + __slots__
    type = R.CGROUP

    id: int
    path: str

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None, id: int, path: str) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.id = id
        self.path = path


class TextPoke(Record):
    __slots__ = ("addr", "old_bytes", "new_bytes")
    _fields = Record._fields + __slots__
    type = R.TEXT_POKE

    addr: int
    old_bytes: bytes
    new_bytes: bytes

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        addr: int,
        old_bytes: bytes,
        new_bytes: bytes,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.addr = addr
        self.old_bytes = old_bytes
        self.new_bytes = new_bytes


class Aux(Record):
    """New data landed in the AUX area at ``aux_offset`` (``flags``: PERF_AUX_FLAG_*)."""

    __slots__ = ("aux_offset", "aux_size", "flags")
    _fields = Record._fields + __slots__
    type = R.AUX

    aux_offset: int
    aux_size: int
    flags: int

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        aux_offset: int,
        aux_size: int,
        flags: int,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.aux_offset = aux_offset
        self.aux_size = aux_size
        self.flags = flags

    @property
    def truncated(self) -> bool:
        return bool(self.flags & abi.PERF_AUX_FLAG_TRUNCATED)

    @property
    def collision(self) -> bool:
        return bool(self.flags & abi.PERF_AUX_FLAG_COLLISION)


class ItraceStart(Record):
    __slots__ = ("pid", "tid")
    _fields = Record._fields + __slots__
    type = R.ITRACE_START

    pid: int
    tid: int

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None, pid: int, tid: int) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.tid = tid


class AuxOutputHwId(Record):
    __slots__ = ("hw_id",)
    _fields = Record._fields + __slots__
    type = R.AUX_OUTPUT_HW_ID

    hw_id: int

    def __init__(self, offset: int, misc: int, sample_id: SampleId | None, hw_id: int) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.hw_id = hw_id


class Read(Record):
    __slots__ = ("pid", "tid", "values")
    _fields = Record._fields + __slots__
    type = R.READ

    pid: int
    tid: int
    values: ReadValues

    def __init__(
        self,
        offset: int,
        misc: int,
        sample_id: SampleId | None,
        pid: int,
        tid: int,
        values: ReadValues,
    ) -> None:
        self.offset = offset
        self.misc = misc
        self.sample_id = sample_id
        self.pid = pid
        self.tid = tid
        self.values = values


class UserRecord(Plain):
    """A record type >= 64 (written by perf, not the kernel), passed through raw:
    ``data`` is the whole record including its 8-byte header; for
    PERF_RECORD_AUXTRACE, ``payload`` holds the AUX bytes that follow it."""

    __slots__ = ("offset", "type", "misc", "data", "payload")
    _fields = __slots__

    offset: int
    type: int
    misc: int
    data: bytes
    payload: bytes | None

    def __init__(self, offset: int, type: int, misc: int, data: bytes, payload: bytes | None = None) -> None:
        self.offset = offset
        self.type = type
        self.misc = misc
        self.data = data
        self.payload = payload


class UnknownRecord(Plain):
    """A kernel record type this decoder does not know (only yielded on request)."""

    __slots__ = ("offset", "type", "misc", "size")
    _fields = __slots__

    offset: int
    type: int
    misc: int
    size: int

    def __init__(self, offset: int, type: int, misc: int, size: int) -> None:
        self.offset = offset
        self.type = type
        self.misc = misc
        self.size = size


class DecodeStats(Plain):
    """Counters kept while decoding; shared across the chunks of one stream."""

    _fields = ("records", "samples", "lost", "lost_samples", "throttle", "unthrottle", "unknown", "unknown_id", "bytes")

    records: dict[int, int]
    samples: int
    #: sum of PERF_RECORD_LOST.lost (records the kernel could not write)
    lost: int
    #: sum of PERF_RECORD_LOST_SAMPLES.lost
    lost_samples: int
    throttle: int
    unthrottle: int
    #: kernel record types (< 64) this decoder does not know, skipped by size
    unknown: int
    #: SAMPLE records whose id matches no attr (dropped, as perf does)
    unknown_id: int
    bytes: int

    def __init__(
        self,
        records: dict[int, int] | None = None,
        samples: int = 0,
        lost: int = 0,
        lost_samples: int = 0,
        throttle: int = 0,
        unthrottle: int = 0,
        unknown: int = 0,
        unknown_id: int = 0,
        bytes: int = 0,
    ) -> None:
        self.records = {} if records is None else records
        self.samples = samples
        self.lost = lost
        self.lost_samples = lost_samples
        self.throttle = throttle
        self.unthrottle = unthrottle
        self.unknown = unknown
        self.unknown_id = unknown_id
        self.bytes = bytes

    def count(self, rtype: int, n: int = 1) -> None:
        self.records[rtype] = self.records.get(rtype, 0) + n

    def merge(self, other: "DecodeStats") -> None:
        for k, v in other.records.items():
            self.count(k, v)
        for name in ("samples", "lost", "lost_samples", "throttle", "unthrottle", "unknown", "unknown_id", "bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> str:
        names = {int(m): m.name for m in R}
        parts = ", ".join(f"{names.get(t, t)}={n}" for t, n in sorted(self.records.items()))
        return (
            f"{self.samples} samples, {self.lost} lost events, {self.lost_samples} lost samples, "
            f"{self.throttle} throttles, {self.unknown} unknown records ({parts})"
        )


# --- parsing side-band records ---------------------------------------------------


def _cstr(raw: bytes) -> str:
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw.decode("utf-8", "surrogateescape")


def entry_for_sideband(buf, off: int, size: int, attrs: AttrTable) -> AttrEntry:
    """The attr whose sample_id layout applies to the side-band record at ``off``."""
    if len(attrs.entries) == 1 or not attrs.sample_id_all or attrs.is_pos < 1:
        return attrs.entries[0]
    pos = off + size - 8 * attrs.is_pos
    if pos < off + 8:
        return attrs.entries[0]
    (sid,) = _U64.unpack_from(buf, pos)
    idx = attrs.by_id.get(sid, 0)
    return attrs.entries[idx]


def parse_sample_id(buf, pos: int, sample_type: int) -> SampleId:
    sid = SampleId()
    if sample_type & S.TID:
        sid.pid, sid.tid = _U32x2.unpack_from(buf, pos)
        pos += 8
    if sample_type & S.TIME:
        (sid.time,) = _U64.unpack_from(buf, pos)
        pos += 8
    if sample_type & S.ID:
        (sid.id,) = _U64.unpack_from(buf, pos)
        pos += 8
    if sample_type & S.STREAM_ID:
        (sid.stream_id,) = _U64.unpack_from(buf, pos)
        pos += 8
    if sample_type & S.CPU:
        (sid.cpu, _res) = _U32x2.unpack_from(buf, pos)
        pos += 8
    if sample_type & S.IDENTIFIER:
        (sid.identifier,) = _U64.unpack_from(buf, pos)
        if sid.id is None:
            sid.id = sid.identifier
    return sid


_NAMES = {int(m): m.name for m in R}


def _need(body_len: int, n: int, offset: int, rtype: int) -> None:
    if body_len < n:
        raise _fmt_err(
            offset, f"PERF_RECORD_{_NAMES.get(rtype, rtype)} needs at least {n} bytes of payload, has {body_len}"
        )


_MMAP = struct.Struct("<IIQQQ")
_MMAP2_INO = struct.Struct("<IIQQQIIQQII")
_MMAP2_BID = struct.Struct("<IIQQQBBH20sII")
_EXIT = struct.Struct("<IIIIQ")
_THROTTLE = struct.Struct("<QQQ")
_AUX = struct.Struct("<QQQ")
_KSYM = struct.Struct("<QIHH")
_BPF = struct.Struct("<HHI8s")
_POKE = struct.Struct("<QHH")


def parse_sideband(buf, off: int, rtype: int, misc: int, size: int, attrs: AttrTable, base_offset: int = 0):
    """Decode one side-band record at ``buf[off:off+size]``; None if ``rtype`` is unknown.

    A record too short for its type raises :class:`~pmuscope.errors.FormatError`;
    under the commands' perf-like tolerance (``pmuscope._policy.STRICT_READS``
    off) it is skipped as an unknown record is (counted by the caller), as perf
    goes on past a damaged side-band record."""
    if rtype not in _KNOWN:
        return None
    try:
        return _parse_sideband(buf, off, rtype, misc, size, attrs, base_offset)
    except errors.FormatError:
        from .. import _policy

        if _policy.STRICT_READS:
            raise
        return None


def _parse_sideband(buf, off: int, rtype: int, misc: int, size: int, attrs: AttrTable, base_offset: int = 0):
    entry = entry_for_sideband(buf, off, size, attrs)
    tsize = entry.trailer_size
    body = off + 8
    end = off + size - tsize
    offset = base_offset + off
    if end < body:
        raise _fmt_err(offset, f"record of size {size} is shorter than its {tsize}-byte sample_id trailer")
    sid = parse_sample_id(buf, end, entry.sample_type) if tsize else None
    blen = end - body
    if rtype == R.MMAP:
        _need(blen, 32, offset, rtype)
        pid, tid, addr, ln, pgoff = _MMAP.unpack_from(buf, body)
        return Mmap(offset, misc, sid, pid, tid, addr, ln, pgoff, _cstr(bytes(buf[body + 32 : end])))
    if rtype == R.MMAP2:
        _need(blen, 64, offset, rtype)
        if misc & abi.PERF_RECORD_MISC_MMAP_BUILD_ID:
            pid, tid, addr, ln, pgoff, bsz, _r1, _r2, bid, prot, flags = _MMAP2_BID.unpack_from(buf, body)
            return Mmap2(offset, misc, sid, pid, tid, addr, ln, pgoff, None, None, None, None, bytes(bid[: min(bsz, 20)]), prot, flags, _cstr(bytes(buf[body + 64 : end])))
        pid, tid, addr, ln, pgoff, maj, mn, ino, gen, prot, flags = _MMAP2_INO.unpack_from(buf, body)
        return Mmap2(offset, misc, sid, pid, tid, addr, ln, pgoff, maj, mn, ino, gen, None, prot, flags, _cstr(bytes(buf[body + 64 : end])))
    if rtype == R.COMM:
        _need(blen, 8, offset, rtype)
        pid, tid = _U32x2.unpack_from(buf, body)
        return Comm(offset, misc, sid, pid, tid, _cstr(bytes(buf[body + 8 : end])))
    if rtype == R.FORK or rtype == R.EXIT:
        _need(blen, 24, offset, rtype)
        pid, ppid, tid, ptid, t = _EXIT.unpack_from(buf, body)
        cls = Fork if rtype == R.FORK else Exit
        return cls(offset, misc, sid, pid, ppid, tid, ptid, t)
    if rtype == R.LOST:
        _need(blen, 16, offset, rtype)
        i, n = struct.unpack_from("<QQ", buf, body)
        return Lost(offset, misc, sid, i, n)
    if rtype == R.LOST_SAMPLES:
        _need(blen, 8, offset, rtype)
        return LostSamples(offset, misc, sid, _U64.unpack_from(buf, body)[0])
    if rtype == R.THROTTLE or rtype == R.UNTHROTTLE:
        _need(blen, 24, offset, rtype)
        t, i, s = _THROTTLE.unpack_from(buf, body)
        return (Throttle if rtype == R.THROTTLE else Unthrottle)(offset, misc, sid, t, i, s)
    if rtype == R.SWITCH:
        return Switch(offset, misc, sid)
    if rtype == R.SWITCH_CPU_WIDE:
        _need(blen, 8, offset, rtype)
        p, t = _U32x2.unpack_from(buf, body)
        return SwitchCpuWide(offset, misc, sid, p, t)
    if rtype == R.NAMESPACES:
        _need(blen, 16, offset, rtype)
        pid, tid = _U32x2.unpack_from(buf, body)
        (nr,) = _U64.unpack_from(buf, body + 8)
        if nr > (blen - 16) // 16:
            raise _fmt_err(offset, f"PERF_RECORD_NAMESPACES with nr_namespaces={nr} runs past the end of the record")
        ns = [struct.unpack_from("<QQ", buf, body + 16 + 16 * i) for i in range(nr)]
        return Namespaces(offset, misc, sid, pid, tid, ns)
    if rtype == R.KSYMBOL:
        _need(blen, 16, offset, rtype)
        addr, ln, kt, fl = _KSYM.unpack_from(buf, body)
        return Ksymbol(offset, misc, sid, addr, ln, kt, fl, _cstr(bytes(buf[body + 16 : end])))
    if rtype == R.BPF_EVENT:
        _need(blen, 16, offset, rtype)
        t, fl, i, tag = _BPF.unpack_from(buf, body)
        return BpfEvent(offset, misc, sid, t, fl, i, bytes(tag))
    if rtype == R.CGROUP:
        _need(blen, 8, offset, rtype)
        return Cgroup(offset, misc, sid, _U64.unpack_from(buf, body)[0], _cstr(bytes(buf[body + 8 : end])))
    if rtype == R.TEXT_POKE:
        _need(blen, 12, offset, rtype)
        addr, old_len, new_len = _POKE.unpack_from(buf, body)
        if 12 + old_len + new_len > blen:
            raise _fmt_err(offset, f"PERF_RECORD_TEXT_POKE bytes (old_len={old_len}, new_len={new_len}) run past the end of the record")
        p = body + 12
        return TextPoke(offset, misc, sid, addr, bytes(buf[p : p + old_len]), bytes(buf[p + old_len : p + old_len + new_len]))
    if rtype == R.AUX:
        _need(blen, 24, offset, rtype)
        a, s, fl = _AUX.unpack_from(buf, body)
        return Aux(offset, misc, sid, a, s, fl)
    if rtype == R.ITRACE_START:
        _need(blen, 8, offset, rtype)
        p, t = _U32x2.unpack_from(buf, body)
        return ItraceStart(offset, misc, sid, p, t)
    if rtype == R.AUX_OUTPUT_HW_ID:
        _need(blen, 8, offset, rtype)
        return AuxOutputHwId(offset, misc, sid, _U64.unpack_from(buf, body)[0])
    if rtype == R.READ:
        _need(blen, 8, offset, rtype)
        p, t = _U32x2.unpack_from(buf, body)
        values, _ = parse_read_format(buf, body + 8, end, entry.read_format, offset)
        return Read(offset, misc, sid, p, t, values)
    return None


SIDEBAND_TYPES: dict[int, type] = {
    cls.type: cls
    for cls in (Mmap, Mmap2, Comm, Fork, Exit, Lost, LostSamples, Throttle, Unthrottle, Switch, SwitchCpuWide,
                Namespaces, Ksymbol, BpfEvent, Cgroup, TextPoke, Aux, ItraceStart, AuxOutputHwId, Read)
}

_KNOWN = frozenset(int(t) for t in SIDEBAND_TYPES)
