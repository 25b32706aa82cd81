"""perf.data feature sections (``HEADER_*`` bits of ``perf_file_header.flags``):
typed values, and the one decoder and encoder of each layout, used by both the
reader and the writer.

Layouts follow ``tools/perf/util/header.c`` (``write_*``/``process_*``) and
``tools/perf/Documentation/perf.data-file-format.txt``.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Callable

from .._plain import Plain
from ..kernel import abi
from ._cursor import Cursor


class Feature(enum.IntEnum):
    """Feature bit numbers (``enum { HEADER_TRACING_DATA = 1, ... }`` in header.h)."""

    RESERVED = 0
    TRACING_DATA = 1
    BUILD_ID = 2
    HOSTNAME = 3
    OSRELEASE = 4
    VERSION = 5
    ARCH = 6
    NRCPUS = 7
    CPUDESC = 8
    CPUID = 9
    TOTAL_MEM = 10
    CMDLINE = 11
    EVENT_DESC = 12
    CPU_TOPOLOGY = 13
    NUMA_TOPOLOGY = 14
    BRANCH_STACK = 15
    PMU_MAPPINGS = 16
    GROUP_DESC = 17
    AUXTRACE = 18
    STAT = 19
    CACHE = 20
    SAMPLE_TIME = 21
    MEM_TOPOLOGY = 22
    CLOCKID = 23
    DIR_FORMAT = 24
    BPF_PROG_INFO = 25
    BPF_BTF = 26
    COMPRESSED = 27
    CPU_PMU_CAPS = 28
    CLOCK_DATA = 29
    HYBRID_TOPOLOGY = 30
    PMU_CAPS = 31


#: misc bit of a build_id_event saying byte 32 holds the real build-id length
PERF_RECORD_MISC_BUILD_ID_SIZE = 1 << 15


# --- typed values ---------------------------------------------------------------
class NrCpus(Plain):
    _fields = ("nr_cpus_available", "nr_cpus_online")

    nr_cpus_available: int
    nr_cpus_online: int

    def __init__(self, nr_cpus_available: int, nr_cpus_online: int) -> None:
        self.nr_cpus_available = nr_cpus_available
        self.nr_cpus_online = nr_cpus_online


class BuildId(Plain):
    """One ``struct build_id_event``: a DSO path and its GNU build-id."""

    _fields = ("filename", "build_id", "pid", "misc")

    filename: str
    build_id: bytes
    pid: int
    misc: int

    def __init__(self, filename: str, build_id: bytes, pid: int = -1, misc: int = abi.PERF_RECORD_MISC_USER) -> None:
        self.filename = filename
        self.build_id = build_id
        self.pid = pid
        self.misc = misc

    @property
    def hex(self) -> str:
        return self.build_id.hex()


class EventDesc(Plain):
    """One entry of HEADER_EVENT_DESC: the attr, its name and ids."""

    _fields = ("attr", "name", "ids")

    attr: abi.perf_event_attr
    name: str
    ids: list[int]

    def __init__(self, attr: abi.perf_event_attr, name: str, ids: list[int]) -> None:
        self.attr = attr
        self.name = name
        self.ids = ids


class CpuTopology(Plain):
    _fields = ("core_siblings", "thread_siblings", "cpu_ids", "die_siblings", "die_ids", "extra")

    core_siblings: list[str]
    thread_siblings: list[str]
    #: (core_id, socket_id) per available CPU, when present
    cpu_ids: list[tuple[int, int]]
    die_siblings: list[str]
    die_ids: list[int]
    #: bytes after the parts this reader knows (later revisions append fields)
    extra: bytes

    def __init__(
        self,
        core_siblings: list[str],
        thread_siblings: list[str],
        cpu_ids: list[tuple[int, int]] | None = None,
        die_siblings: list[str] | None = None,
        die_ids: list[int] | None = None,
        extra: bytes = b"",
    ) -> None:
        self.core_siblings = core_siblings
        self.thread_siblings = thread_siblings
        self.cpu_ids = [] if cpu_ids is None else cpu_ids
        self.die_siblings = [] if die_siblings is None else die_siblings
        self.die_ids = [] if die_ids is None else die_ids
        self.extra = extra


class NumaNode(Plain):
    _fields = ("node", "mem_total", "mem_free", "cpus")

    node: int
    mem_total: int
    mem_free: int
    cpus: str

    def __init__(self, node: int, mem_total: int, mem_free: int, cpus: str) -> None:
        self.node = node
        self.mem_total = mem_total
        self.mem_free = mem_free
        self.cpus = cpus


class GroupDesc(Plain):
    _fields = ("name", "leader_idx", "nr_members")

    name: str
    leader_idx: int
    nr_members: int

    def __init__(self, name: str, leader_idx: int, nr_members: int) -> None:
        self.name = name
        self.leader_idx = leader_idx
        self.nr_members = nr_members


class AuxtraceIndexEntry(Plain):
    _fields = ("file_offset", "size")

    file_offset: int
    size: int

    def __init__(self, file_offset: int, size: int) -> None:
        self.file_offset = file_offset
        self.size = size


class CacheLevel(Plain):
    _fields = ("level", "line_size", "sets", "ways", "type", "size", "map")

    level: int
    line_size: int
    sets: int
    ways: int
    type: str
    size: str
    map: str

    def __init__(self, level: int, line_size: int, sets: int, ways: int, type: str, size: str, map: str) -> None:
        self.level = level
        self.line_size = line_size
        self.sets = sets
        self.ways = ways
        self.type = type
        self.size = size
        self.map = map


class SampleTime(Plain):
    _fields = ("first", "last")

    first: int
    last: int

    def __init__(self, first: int, last: int) -> None:
        self.first = first
        self.last = last


class MemoryNode(Plain):
    _fields = ("node", "size", "bitmap")

    node: int
    size: int
    bitmap: list[int]

    def __init__(self, node: int, size: int, bitmap: list[int]) -> None:
        self.node = node
        self.size = size
        self.bitmap = bitmap


class MemTopology(Plain):
    _fields = ("version", "block_size", "nodes")

    version: int
    block_size: int
    nodes: list[MemoryNode]

    def __init__(self, version: int, block_size: int, nodes: list[MemoryNode]) -> None:
        self.version = version
        self.block_size = block_size
        self.nodes = nodes


class Compressed(Plain):
    _fields = ("version", "type", "level", "ratio", "mmap_len")

    version: int
    type: int
    level: int
    ratio: int
    mmap_len: int

    def __init__(self, version: int, type: int, level: int, ratio: int, mmap_len: int) -> None:
        self.version = version
        self.type = type
        self.level = level
        self.ratio = ratio
        self.mmap_len = mmap_len


class ClockData(Plain):
    _fields = ("version", "clockid", "wall_clock_ns", "clockid_time_ns")

    version: int
    clockid: int
    wall_clock_ns: int
    clockid_time_ns: int

    def __init__(self, version: int, clockid: int, wall_clock_ns: int, clockid_time_ns: int) -> None:
        self.version = version
        self.clockid = clockid
        self.wall_clock_ns = wall_clock_ns
        self.clockid_time_ns = clockid_time_ns


class HybridCpuPmu(Plain):
    _fields = ("pmu_name", "cpus")

    pmu_name: str
    cpus: str

    def __init__(self, pmu_name: str, cpus: str) -> None:
        self.pmu_name = pmu_name
        self.cpus = cpus


class PmuCaps(Plain):
    _fields = ("pmu_name", "caps")

    pmu_name: str
    caps: dict[str, str]

    def __init__(self, pmu_name: str, caps: dict[str, str]) -> None:
        self.pmu_name = pmu_name
        self.caps = caps


# --- decoders -------------------------------------------------------------------
def _parse_string(c: Cursor, ctx: dict) -> str:
    return c.string()


def _parse_build_ids(c: Cursor, ctx: dict) -> list[BuildId]:
    out = []
    while c.remaining > 0:
        start = c.pos
        c.need(8, "build_id_event header")
        _, misc, size = struct.unpack_from("<IHH", c.buf, c.pos)
        c.pos += 8
        if size < 36 or start + size > c.end:
            c.pos = start
            raise c.error(f"build_id_event size {size} is not in [36, {c.end - start}]")
        pid = c.i32("build_id_event.pid")
        raw = c.bytes(24, "build_id_event.build_id")
        n = 20
        if misc & PERF_RECORD_MISC_BUILD_ID_SIZE and 0 < raw[20] <= 20:
            n = raw[20]
        name = c.bytes(start + size - c.pos, "build_id_event.filename").split(b"\0", 1)[0]
        out.append(BuildId(name.decode("utf-8", "replace"), raw[:n], pid, misc & 0xFFFF & ~PERF_RECORD_MISC_BUILD_ID_SIZE))
    return out


def _parse_nrcpus(c: Cursor, ctx: dict) -> NrCpus:
    return NrCpus(c.u32("nr_cpus_available"), c.u32("nr_cpus_online"))


def _parse_u64(c: Cursor, ctx: dict) -> int:
    return c.u64()


def _parse_cmdline(c: Cursor, ctx: dict) -> list[str]:
    return c.string_list("cmdline")


def _parse_event_desc(c: Cursor, ctx: dict) -> list[EventDesc]:
    nr = c.u32("event_desc nr")
    attr_size = c.u32("event_desc attr_size")
    if attr_size < abi.PERF_ATTR_SIZE_VER0:
        raise c.error(f"event_desc attr_size {attr_size} is smaller than PERF_ATTR_SIZE_VER0 (64)")
    c.count(nr, attr_size + 8, "event_desc")
    out = []
    for _ in range(nr):
        at = c.offset
        raw = c.view(attr_size, "event_desc perf_event_attr")
        attr = ctx["parse_attr"](raw, at)
        nr_ids = c.u32("event_desc nr_ids")
        name = c.string("event_desc name")
        c.count(nr_ids, 8, "event_desc ids")
        ids = [c.u64("event_desc id") for _ in range(nr_ids)]
        out.append(EventDesc(attr, name, ids))
    return out


def _parse_cpu_topology(c: Cursor, ctx: dict) -> CpuTopology:
    topo = CpuTopology(c.string_list("core_siblings"), c.string_list("thread_siblings"))
    nr = ctx.get("nr_cpus_available")
    if nr and c.remaining >= 8 * nr:
        topo.cpu_ids = [(c.u32("core_id"), c.u32("socket_id")) for _ in range(nr)]
        if c.remaining >= 4:
            topo.die_siblings = c.string_list("die_siblings")
            c.count(nr, 4, "die_id")
            topo.die_ids = [c.u32("die_id") for _ in range(nr)]
    topo.extra = c.bytes(c.remaining)
    return topo


def _parse_numa(c: Cursor, ctx: dict) -> list[NumaNode]:
    nr = c.count(c.u32("numa nr"), 24, "numa node")
    return [NumaNode(c.u32("node"), c.u64("mem_total"), c.u64("mem_free"), c.string("cpus")) for _ in range(nr)]


def _parse_pmu_mappings(c: Cursor, ctx: dict) -> dict[int, str]:
    nr = c.count(c.u32("pmu_mappings nr"), 8, "pmu mapping")
    out = {}
    for _ in range(nr):
        type_ = c.u32("pmu type")
        out[type_] = c.string("pmu name")
    return out


def _parse_group_desc(c: Cursor, ctx: dict) -> list[GroupDesc]:
    nr = c.count(c.u32("group_desc nr"), 12, "group_desc")
    return [GroupDesc(c.string("group name"), c.u32("leader_idx"), c.u32("nr_members")) for _ in range(nr)]


def _parse_auxtrace(c: Cursor, ctx: dict) -> list[AuxtraceIndexEntry]:
    nr = c.count(c.u64("auxtrace index nr"), 16, "auxtrace index entry")
    return [AuxtraceIndexEntry(c.u64("file_offset"), c.u64("sz")) for _ in range(nr)]


def _parse_cache(c: Cursor, ctx: dict) -> list[CacheLevel]:
    version = c.u32("cache version")
    if version != 1:
        raise c.error(f"cache version {version}, expected 1")
    nr = c.count(c.u32("cache nr"), 28, "cache level")
    return [
        CacheLevel(c.u32("level"), c.u32("line_size"), c.u32("sets"), c.u32("ways"), c.string("type"), c.string("size"), c.string("map"))
        for _ in range(nr)
    ]


def _parse_sample_time(c: Cursor, ctx: dict) -> SampleTime:
    return SampleTime(c.u64("first sample time"), c.u64("last sample time"))


def _parse_mem_topology(c: Cursor, ctx: dict) -> MemTopology:
    version, block_size, nr = c.u64("version"), c.u64("block_size"), c.u64("count")
    c.count(nr, 16, "memory node")
    nodes = []
    for _ in range(nr):
        node, size = c.u64("node"), c.u64("size")
        words = c.count((size + 63) // 64, 8, "memory bitmap")
        nodes.append(MemoryNode(node, size, [c.u64("bitmap") for _ in range(words)]))
    return MemTopology(version, block_size, nodes)


def _parse_compressed(c: Cursor, ctx: dict) -> Compressed:
    return Compressed(c.u32("version"), c.u32("type"), c.u32("level"), c.u32("ratio"), c.u32("mmap_len"))


def _parse_cpu_pmu_caps(c: Cursor, ctx: dict) -> dict[str, str]:
    nr = c.count(c.u32("caps nr"), 8, "cap")
    out = {}
    for _ in range(nr):
        name = c.string("cap name")
        out[name] = c.string("cap value")
    return out


def _parse_clock_data(c: Cursor, ctx: dict) -> ClockData:
    return ClockData(c.u32("version"), c.u32("clockid"), c.u64("wall_clock_ns"), c.u64("clockid_time_ns"))


def _parse_hybrid(c: Cursor, ctx: dict) -> list[HybridCpuPmu]:
    nr = c.count(c.u32("hybrid nr"), 8, "hybrid pmu")
    return [HybridCpuPmu(c.string("pmu_name"), c.string("cpus")) for _ in range(nr)]


def _parse_pmu_caps(c: Cursor, ctx: dict) -> list[PmuCaps]:
    nr = c.count(c.u32("nr_pmu"), 8, "pmu caps")
    out = []
    for _ in range(nr):
        ncaps = c.count(c.u32("nr_caps"), 8, "cap")
        caps = {}
        for _ in range(ncaps):
            name = c.string("cap name")
            caps[name] = c.string("cap value")
        out.append(PmuCaps(c.string("pmu_name"), caps))
    return out


def _parse_flag(c: Cursor, ctx: dict) -> bool:
    return True


_PARSERS: dict[int, Callable[[Cursor, dict], Any]] = {
    Feature.BUILD_ID: _parse_build_ids,
    Feature.HOSTNAME: _parse_string,
    Feature.OSRELEASE: _parse_string,
    Feature.VERSION: _parse_string,
    Feature.ARCH: _parse_string,
    Feature.NRCPUS: _parse_nrcpus,
    Feature.CPUDESC: _parse_string,
    Feature.CPUID: _parse_string,
    Feature.TOTAL_MEM: _parse_u64,
    Feature.CMDLINE: _parse_cmdline,
    Feature.EVENT_DESC: _parse_event_desc,
    Feature.CPU_TOPOLOGY: _parse_cpu_topology,
    Feature.NUMA_TOPOLOGY: _parse_numa,
    Feature.BRANCH_STACK: _parse_flag,
    Feature.PMU_MAPPINGS: _parse_pmu_mappings,
    Feature.GROUP_DESC: _parse_group_desc,
    Feature.AUXTRACE: _parse_auxtrace,
    Feature.STAT: _parse_flag,
    Feature.CACHE: _parse_cache,
    Feature.SAMPLE_TIME: _parse_sample_time,
    Feature.MEM_TOPOLOGY: _parse_mem_topology,
    Feature.CLOCKID: _parse_u64,
    Feature.DIR_FORMAT: _parse_u64,
    Feature.COMPRESSED: _parse_compressed,
    Feature.CPU_PMU_CAPS: _parse_cpu_pmu_caps,
    Feature.CLOCK_DATA: _parse_clock_data,
    Feature.HYBRID_TOPOLOGY: _parse_hybrid,
    Feature.PMU_CAPS: _parse_pmu_caps,
}


def feature_name(bit: int) -> str:
    try:
        return Feature(bit).name
    except ValueError:
        return f"feature#{bit}"


def parse_feature(bit: int, buf: memoryview, source: str, base: int, ctx: dict) -> Any:
    """Decode one feature payload; unknown features (and TRACING_DATA, BPF_*)
    stay ``bytes``. Raises FormatError on a malformed payload."""
    parser = _PARSERS.get(bit)
    if parser is None:
        return bytes(buf)
    c = Cursor(buf, source, base=base, what=f"feature {feature_name(bit)}")
    return parser(c, ctx)


# --- encoders -------------------------------------------------------------------
def _align(n: int, a: int) -> int:
    return (n + a - 1) & ~(a - 1)


def encode_string(s: str) -> bytes:
    """``perf_header_string``, NUL-terminated and padded to 64 bytes as perf does."""
    raw = s.encode()
    n = _align(len(raw) + 1, 64)
    return struct.pack("<I", n) + raw + b"\0" * (n - len(raw))


def encode_string_list(items: list[str]) -> bytes:
    return struct.pack("<I", len(items)) + b"".join(encode_string(s) for s in items)


def encode_build_id(b: BuildId) -> bytes:
    name = b.filename.encode()
    name_len = _align(len(name) + 1, 64)
    size = 8 + 4 + 24 + name_len
    bid = bytes(b.build_id[:20])
    body = bid + b"\0" * (20 - len(bid)) + bytes([len(bid), 0, 0, 0])
    misc = (b.misc & 0xFFFF) | PERF_RECORD_MISC_BUILD_ID_SIZE
    return struct.pack("<IHHi", abi.PERF_RECORD_HEADER_BUILD_ID, misc, size, b.pid) + body + name + b"\0" * (name_len - len(name))


def encode_event_desc(descs: list[EventDesc], attr_size: int) -> bytes:
    out = [struct.pack("<II", len(descs), attr_size)]
    for d in descs:
        raw = bytearray(bytes(d.attr)[:attr_size])
        raw += b"\0" * (attr_size - len(raw))
        struct.pack_into("<I", raw, 4, attr_size)
        out.append(bytes(raw))
        out.append(struct.pack("<I", len(d.ids)))
        out.append(encode_string(d.name))
        out.append(struct.pack(f"<{len(d.ids)}Q", *d.ids))
    return b"".join(out)


def encode_feature(bit: int, value: Any, *, attr_size: int = abi.PERF_ATTR_SIZE_VER7) -> bytes:
    """Encode a typed feature value (the inverse of :func:`parse_feature`)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if bit in (Feature.HOSTNAME, Feature.OSRELEASE, Feature.VERSION, Feature.ARCH, Feature.CPUDESC, Feature.CPUID):
        return encode_string(value)
    if bit == Feature.BUILD_ID:
        return b"".join(encode_build_id(b) for b in value)
    if bit == Feature.NRCPUS:
        return struct.pack("<II", value.nr_cpus_available, value.nr_cpus_online)
    if bit in (Feature.TOTAL_MEM, Feature.CLOCKID, Feature.DIR_FORMAT):
        return struct.pack("<Q", value)
    if bit == Feature.CMDLINE:
        return encode_string_list(list(value))
    if bit == Feature.EVENT_DESC:
        return encode_event_desc(value, attr_size)
    if bit == Feature.CPU_TOPOLOGY:
        out = encode_string_list(value.core_siblings) + encode_string_list(value.thread_siblings)
        if value.cpu_ids:
            out += b"".join(struct.pack("<II", core, sock) for core, sock in value.cpu_ids)
            if value.die_ids:
                out += encode_string_list(value.die_siblings)
                out += struct.pack(f"<{len(value.die_ids)}I", *value.die_ids)
        return out + value.extra
    if bit == Feature.NUMA_TOPOLOGY:
        return struct.pack("<I", len(value)) + b"".join(
            struct.pack("<IQQ", n.node, n.mem_total, n.mem_free) + encode_string(n.cpus) for n in value
        )
    if bit == Feature.PMU_MAPPINGS:
        return struct.pack("<I", len(value)) + b"".join(struct.pack("<I", t) + encode_string(n) for t, n in value.items())
    if bit == Feature.GROUP_DESC:
        return struct.pack("<I", len(value)) + b"".join(
            encode_string(g.name) + struct.pack("<II", g.leader_idx, g.nr_members) for g in value
        )
    if bit == Feature.AUXTRACE:
        return struct.pack("<Q", len(value)) + b"".join(struct.pack("<QQ", e.file_offset, e.size) for e in value)
    if bit in (Feature.BRANCH_STACK, Feature.STAT):
        return b""
    if bit == Feature.CACHE:
        return struct.pack("<II", 1, len(value)) + b"".join(
            struct.pack("<IIII", x.level, x.line_size, x.sets, x.ways) + encode_string(x.type) + encode_string(x.size) + encode_string(x.map)
            for x in value
        )
    if bit == Feature.SAMPLE_TIME:
        return struct.pack("<QQ", value.first, value.last)
    if bit == Feature.MEM_TOPOLOGY:
        out = struct.pack("<QQQ", value.version, value.block_size, len(value.nodes))
        for n in value.nodes:
            out += struct.pack(f"<QQ{len(n.bitmap)}Q", n.node, n.size, *n.bitmap)
        return out
    if bit == Feature.COMPRESSED:
        return struct.pack("<IIIII", value.version, value.type, value.level, value.ratio, value.mmap_len)
    if bit == Feature.CPU_PMU_CAPS:
        return struct.pack("<I", len(value)) + b"".join(encode_string(k) + encode_string(v) for k, v in value.items())
    if bit == Feature.CLOCK_DATA:
        return struct.pack("<IIQQ", value.version, value.clockid, value.wall_clock_ns, value.clockid_time_ns)
    if bit == Feature.HYBRID_TOPOLOGY:
        return struct.pack("<I", len(value)) + b"".join(encode_string(h.pmu_name) + encode_string(h.cpus) for h in value)
    if bit == Feature.PMU_CAPS:
        out = struct.pack("<I", len(value))
        for p in value:
            out += struct.pack("<I", len(p.caps)) + b"".join(encode_string(k) + encode_string(v) for k, v in p.caps.items())
            out += encode_string(p.pmu_name)
        return out
    raise TypeError(f"cannot encode feature {feature_name(bit)} from {type(value).__name__}")
