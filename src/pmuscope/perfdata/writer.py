"""Writing perf.data that Linux ``perf report`` / ``perf script`` read.

File layout, as perf 6.1 writes it: the 104-byte ``perf_file_header``, the ids
arrays, the attrs section (``attr.size`` = 128 = VER7, because perf <= 6.2
refuses larger attrs), the data section (records streamed as they come), then
the feature section table and the feature payloads; the header is fixed up on
:meth:`PerfDataWriter.close`.
"""

from __future__ import annotations

import glob
import os
import re
import struct
import sys
from typing import Any, BinaryIO, Iterable

from .. import __version__ as _pmuscope_version
from ..kernel import abi
from . import synth
from ..errors import require
from ..outfile import OutputFile, open_output
from .features import (
    BuildId,
    Compressed,
    CpuTopology,
    EventDesc,
    Feature,
    NrCpus,
    NumaNode,
    SampleTime,
    encode_feature,
    encode_string,
)
from ._format import FILE_HEADER_SIZE, PERF_MAGIC2, PIPE_HEADER_SIZE, PerfDataAttr, default_event_name

ATTR_SIZE = abi.PERF_ATTR_SIZE_VER7
#: uncompressed bytes per zstd frame; below COMPRESS_MMAP_LEN, the decompression
#: buffer perf sizes from HEADER_COMPRESSED.mmap_len
COMPRESS_CHUNK = 256 << 10
COMPRESS_MMAP_LEN = 528384  # what perf record -z writes for its default 129-page buffers
MAX_COMPRESSED_PAYLOAD = 0xFFFF - 8


# --- facts about this machine, for the feature sections ---------------------------
def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpulist_max(text: str | None) -> int | None:
    if not text:
        return None
    nums = [int(n) for n in re.findall(r"\d+", text)]
    return max(nums) if nums else None


def _cpuinfo() -> dict[str, str]:
    out: dict[str, str] = {}
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def host_cpuid() -> str:
    """perf's ``get_cpuid()`` string: ``vendor,family,model,stepping`` on x86,
    the MIDR (``0x...``) on arm64."""
    info = _cpuinfo()
    if "vendor_id" in info:
        return f"{info['vendor_id']},{info.get('cpu family', '0')},{info.get('model', '0')},{info.get('stepping', '0')}"
    midr = _read("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1")
    return midr or os.uname().machine  # what platform.machine() returns, without importing platform


def host_features(argv: list[str] | None = None) -> dict[int, Any]:
    """HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS, CPUDESC, CPUID, TOTAL_MEM,
    CMDLINE, CPU_TOPOLOGY and NUMA_TOPOLOGY of the running machine."""
    uts = os.uname()
    feats: dict[int, Any] = {
        Feature.HOSTNAME: uts.nodename or __import__("socket").gethostname(),  # gethostname() is uname's nodename on Linux
        Feature.OSRELEASE: uts.release,
        Feature.VERSION: f"pmuscope {_pmuscope_version}",
        Feature.ARCH: uts.machine,
    }
    online = os.sysconf("SC_NPROCESSORS_ONLN")
    present = _cpulist_max(_read("/sys/devices/system/cpu/present"))
    nr_avail = (present + 1) if present is not None else online
    feats[Feature.NRCPUS] = NrCpus(nr_avail, online)
    info = _cpuinfo()
    desc = info.get("model name") or info.get("Hardware") or info.get("cpu model") or uts.machine
    feats[Feature.CPUDESC] = re.sub(r"\s+", " ", desc)
    feats[Feature.CPUID] = host_cpuid()
    m = re.search(r"MemTotal:\s+(\d+)", _read("/proc/meminfo") or "")
    if m:
        feats[Feature.TOTAL_MEM] = int(m.group(1))
    feats[Feature.CMDLINE] = list(sys.argv if argv is None else argv)
    topo = _cpu_topology(nr_avail)
    if topo is not None:
        feats[Feature.CPU_TOPOLOGY] = topo
    numa = _numa_topology()
    if numa:
        feats[Feature.NUMA_TOPOLOGY] = numa
    return feats


def _cpu_topology(nr_avail: int) -> CpuTopology | None:
    base = "/sys/devices/system/cpu"
    cores: list[str] = []
    threads: list[str] = []
    dies: list[str] = []
    ids: list[tuple[int, int]] = []
    die_ids: list[int] = []
    for cpu in range(nr_avail):
        t = f"{base}/cpu{cpu}/topology"
        core_sib = _read(f"{t}/core_siblings_list")
        thr_sib = _read(f"{t}/thread_siblings_list")
        die_sib = _read(f"{t}/die_cpus_list")
        if core_sib and core_sib not in cores:
            cores.append(core_sib)
        if thr_sib and thr_sib not in threads:
            threads.append(thr_sib)
        if die_sib and die_sib not in dies:
            dies.append(die_sib)
        core_id = _read(f"{t}/core_id")
        socket_id = _read(f"{t}/physical_package_id")
        die_id = _read(f"{t}/die_id")
        # offline CPUs: perf writes -1 ids
        ids.append((int(core_id) & 0xFFFFFFFF if core_id else 0xFFFFFFFF, int(socket_id) & 0xFFFFFFFF if socket_id else 0xFFFFFFFF))
        die_ids.append(int(die_id) & 0xFFFFFFFF if die_id else 0xFFFFFFFF)
    if not cores or not threads:
        return None
    topo = CpuTopology(cores, threads, ids)
    if dies:
        topo.die_siblings, topo.die_ids = dies, die_ids
    return topo


def _numa_topology() -> list[NumaNode]:
    nodes = []
    for path in sorted(glob.glob("/sys/devices/system/node/node[0-9]*"), key=lambda p: int(p.rsplit("node", 1)[1])):
        node = int(path.rsplit("node", 1)[1])
        meminfo = _read(f"{path}/meminfo") or ""
        total = re.search(r"MemTotal:\s+(\d+)", meminfo)
        free = re.search(r"MemFree:\s+(\d+)", meminfo)
        nodes.append(NumaNode(node, int(total.group(1)) if total else 0, int(free.group(1)) if free else 0,
                              _read(f"{path}/cpulist") or ""))
    return nodes


def elf_build_id(path: str) -> bytes | None:
    """The GNU build-id note (NT_GNU_BUILD_ID) of an ELF file, or None."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 64 or ident[:4] != b"\x7fELF":
                return None
            is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
            if is64:
                phoff, = struct.unpack_from(end + "Q", ident, 32)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
            else:
                phoff, = struct.unpack_from(end + "I", ident, 28)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 42)
            f.seek(phoff)
            phdrs = f.read(phentsize * min(phnum, 256))
            for i in range(len(phdrs) // max(phentsize, 1)):
                ph = phdrs[i * phentsize : (i + 1) * phentsize]
                if is64:
                    p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(end + "IIQQQQ", ph)
                else:
                    p_type, p_offset, _, _, p_filesz = struct.unpack_from(end + "IIIII", ph)
                if p_type != 4 or p_filesz > 1 << 16:  # PT_NOTE
                    continue
                f.seek(p_offset)
                notes = f.read(p_filesz)
                pos = 0
                while pos + 12 <= len(notes):
                    namesz, descsz, ntype = struct.unpack_from(end + "III", notes, pos)
                    name_at = pos + 12
                    desc_at = name_at + ((namesz + 3) & ~3)
                    if ntype == 3 and notes[name_at : name_at + namesz].rstrip(b"\0") == b"GNU":
                        return bytes(notes[desc_at : desc_at + descsz])
                    pos = desc_at + ((descsz + 3) & ~3)
    except OSError:
        return None
    return None


# --- the writers ---------------------------------------------------------------------
class PerfDataWriter:
    """Writes a file-mode perf.data.

    Add the events with :meth:`add_attr` (before the first record), stream
    whole records with :meth:`write` (bytes holding one or more records, e.g. a
    drained ring buffer), and :meth:`close` — which writes the feature sections
    and fixes up the header. ``features`` starts with :func:`host_features`
    (pass ``host=False`` to start empty); EVENT_DESC is made from the attrs,
    BUILD_ID from :meth:`add_build_id`. Usable as a context manager.
    """

    def __init__(self, path: str | os.PathLike, attrs: Iterable = (), *, host: bool = True,
                 argv: list[str] | None = None, compress: int | None = None) -> None:
        self.path = os.fspath(path)
        #: zstd level when the data section is written as PERF_RECORD_COMPRESSED (perf record -z)
        self.compress = compress
        self._zstd = None
        self._pending = bytearray()
        self._raw_bytes = 0
        self._compressed_bytes = 0
        if compress is not None:
            zstd = require("zstandard", "zstd", "writing compressed perf.data")
            self._zstd = zstd.ZstdCompressor(level=compress)
        self.attrs: list[PerfDataAttr] = []
        self.features: dict[int, Any] = host_features(argv) if host else {}
        self.build_ids: list[BuildId] = []
        # perf's rules (outfile): a previous file becomes PATH.old, never
        # written through a link, mode 0600; written under a temporary name and
        # renamed by close(), so a failed run leaves no partial PATH
        self._f: OutputFile | None = open_output(self.path, "wb", perm=0o600)
        self._f.write(b"\0" * FILE_HEADER_SIZE)
        self._data_offset: int | None = None
        self._data_size = 0
        self._attr_section = (0, 0)
        self._first_time: int | None = None
        self._last_time: int | None = None
        self.nr_records = 0
        for item in attrs:  # (attr, ids, name) tuples or PerfDataAttr objects
            if isinstance(item, PerfDataAttr):
                self.add_attr(item.attr, item.ids, item.name)
            else:
                self.add_attr(*item)

    def add_attr(self, attr: abi.perf_event_attr, ids: Iterable[int] = (), name: str | None = None) -> int:
        """Add an event; returns its index. ``ids`` are the sample ids of its fds."""
        if self._data_offset is not None:
            raise RuntimeError("add every attr before writing records")
        synth.attr_bytes(attr)  # refuses attrs that need more than 128 bytes
        self.attrs.append(PerfDataAttr(len(self.attrs), attr.copy(), [int(i) for i in ids], name or default_event_name(attr)))
        return len(self.attrs) - 1

    def add_build_id(self, filename: str, build_id: bytes | None = None, *, pid: int = -1,
                     misc: int = abi.PERF_RECORD_MISC_USER) -> bool:
        """Record a DSO's build-id (read from the ELF file when not given);
        returns False when the file has none."""
        if build_id is None:
            build_id = elf_build_id(filename)
            if build_id is None:
                return False
        self.build_ids.append(BuildId(filename, bytes(build_id), pid, misc))
        return True

    def set_sample_time(self, first: int, last: int) -> None:
        """HEADER_SAMPLE_TIME (the range ``perf report --time`` percentages use)."""
        self._first_time, self._last_time = first, last

    def _start_data(self) -> None:
        f = self._f
        entries = []
        for a in self.attrs:
            off = f.tell()
            f.write(struct.pack(f"<{len(a.ids)}Q", *a.ids))
            entries.append(synth.attr_bytes(a.attr, ATTR_SIZE) + struct.pack("<QQ", off, 8 * len(a.ids)))
        start = f.tell()
        f.write(b"".join(entries))
        self._attr_section = (start, f.tell() - start)
        self._data_offset = f.tell()

    def write(self, records: bytes | bytearray | memoryview) -> None:
        """Append whole records (one or several back to back, e.g. a chunk
        drained from a ring buffer) to the data section. Records written this
        way are not parsed: give the sample time range with
        :meth:`set_sample_time` if HEADER_SAMPLE_TIME is wanted."""
        if self._f is None:
            raise ValueError(f"{self.path}: writer is closed")
        if self._data_offset is None:
            self._start_data()
        n = len(records)
        if n % 8:
            raise ValueError(f"records must be 8-byte multiples, got {n} bytes")
        if self._zstd is not None:
            self._pending += records
            if len(self._pending) >= COMPRESS_CHUNK:
                self._flush_compressed()
            return
        self._f.write(records)
        self._data_size += n

    def _flush_compressed(self) -> None:
        """One zstd frame per chunk of whole records, cut into PERF_RECORD_COMPRESSED
        records. Their sizes are not 8-aligned: perf 6.1 feeds ``header.size - 8``
        bytes to zstd (tools/perf/util/session.c perf_session__process_compressed_event)."""
        buf = self._pending
        while buf:
            cut = 0
            while cut < len(buf) and cut < COMPRESS_CHUNK:  # whole records only
                size = struct.unpack_from("<H", buf, cut + 6)[0]
                if size < 8:
                    raise ValueError(f"record of size {size} at offset {cut} of the written data")
                cut += size
            frame = self._zstd.compress(bytes(buf[:cut]))
            self._raw_bytes += cut
            for i in range(0, len(frame), MAX_COMPRESSED_PAYLOAD):
                part = frame[i : i + MAX_COMPRESSED_PAYLOAD]
                self._f.write(struct.pack("<IHH", abi.PERF_RECORD_COMPRESSED, 0, 8 + len(part)) + part)
                self._data_size += 8 + len(part)
                self._compressed_bytes += 8 + len(part)
            del buf[:cut]

    def write_record(self, record: bytes) -> None:
        """Append one record and track the sample time range for SAMPLE records."""
        self.write(record)
        self.nr_records += 1
        if len(record) >= 8 and struct.unpack_from("<I", record)[0] == abi.PERF_RECORD_SAMPLE and self.attrs:
            from .reader import _TimeKeyer

            t = _TimeKeyer(self.attrs[:1] if len(self.attrs) == 1 else self.attrs).time(abi.PERF_RECORD_SAMPLE, memoryview(record))
            if t >= 0:
                self._first_time = t if self._first_time is None else min(self._first_time, t)
                self._last_time = t if self._last_time is None else max(self._last_time, t)

    def _feature_payloads(self) -> dict[int, bytes]:
        feats = dict(self.features)
        feats.setdefault(Feature.EVENT_DESC, [EventDesc(a.attr, a.name or default_event_name(a.attr), a.ids) for a in self.attrs])
        if self.build_ids:
            feats.setdefault(Feature.BUILD_ID, self.build_ids)
        if self._first_time is not None:
            feats.setdefault(Feature.SAMPLE_TIME, SampleTime(self._first_time, self._last_time))
        out = {}
        for bit in sorted(feats):
            if feats[bit] is None:
                continue
            if feats[bit] is False and bit in (Feature.BRANCH_STACK, Feature.STAT):
                continue
            out[bit] = encode_feature(bit, feats[bit], attr_size=ATTR_SIZE)
        return out

    def abort(self) -> None:
        """Give up the file: nothing is left at ``path`` (a previous file stays)."""
        f, self._f = self._f, None
        if f is not None:
            f.abort()

    def close(self) -> None:
        """Write the feature sections and the final header; idempotent. On an
        error (a full disk) the file is removed and :class:`OutputWriteError` raised."""
        f = self._f
        if f is None:
            return
        done = False
        try:
            if self._data_offset is None:
                self._start_data()
            if self._zstd is not None:
                self._flush_compressed()
                ratio = self._raw_bytes // max(self._compressed_bytes, 1)
                self.features[Feature.COMPRESSED] = Compressed(0, 1, self.compress, ratio, COMPRESS_MMAP_LEN)
            payloads = self._feature_payloads()
            table_at = self._data_offset + self._data_size
            f.seek(table_at)
            pos = table_at + 16 * len(payloads)
            table, blobs = [], []
            for bit, blob in payloads.items():
                table.append(struct.pack("<QQ", pos, len(blob)))
                blobs.append(blob)
                pos += len(blob)
            f.write(b"".join(table) + b"".join(blobs))
            flags = [0, 0, 0, 0]
            for bit in payloads:
                flags[bit // 64] |= 1 << (bit % 64)
            header = PERF_MAGIC2 + struct.pack(
                "<Q Q QQ QQ QQ 4Q", FILE_HEADER_SIZE, ATTR_SIZE + 16, *self._attr_section,
                self._data_offset, self._data_size, 0, 0, *flags,
            )
            f.seek(0)
            f.write(header)
            done = True
        finally:
            self._f = None
            if done:
                f.close()
            else:
                f.abort()

    def __enter__(self) -> "PerfDataWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


class PerfPipeWriter:
    """Writes pipe-mode perf.data (``perf record -o -`` style) to a binary
    stream: the 16-byte header, then HEADER_ATTR, EVENT_UPDATE names and
    HEADER_FEATURE records once the first record (or :meth:`start`) comes,
    then the records. ``perf script -i -`` reads it."""

    def __init__(self, fileobj: BinaryIO, *, host: bool = True, argv: list[str] | None = None) -> None:
        self.f = fileobj
        self.attrs: list[PerfDataAttr] = []
        self.features: dict[int, Any] = host_features(argv) if host else {}
        self._started = False
        self.f.write(PERF_MAGIC2 + struct.pack("<Q", PIPE_HEADER_SIZE))

    def add_attr(self, attr: abi.perf_event_attr, ids: Iterable[int] = (), name: str | None = None) -> int:
        if self._started:
            raise RuntimeError("add every attr before writing records")
        synth.attr_bytes(attr)
        self.attrs.append(PerfDataAttr(len(self.attrs), attr.copy(), [int(i) for i in ids], name or default_event_name(attr)))
        return len(self.attrs) - 1

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        out = []
        for a in self.attrs:
            out.append(synth.header_attr(a.attr, a.ids, attr_size=ATTR_SIZE))
            for i in a.ids[:1]:
                out.append(synth.event_update_name(i, a.name))
        for bit in sorted(self.features):
            # perf 6.1 handles only these in a stream without its own evlist context
            if bit in (Feature.HOSTNAME, Feature.OSRELEASE, Feature.VERSION, Feature.ARCH, Feature.CPUDESC,
                       Feature.CPUID, Feature.NRCPUS, Feature.TOTAL_MEM, Feature.CMDLINE):
                out.append(synth.header_feature(bit, encode_feature(bit, self.features[bit])))
        self.f.write(b"".join(out))

    def write(self, records: bytes | bytearray | memoryview) -> None:
        self.start()
        self.f.write(records)

    def close(self) -> None:
        self.start()
        self.f.flush()

    def abort(self) -> None:
        """Nothing to remove from a stream."""


#: features that describe the source file's layout, not the machine: not copied by rewrite()
_LAYOUT_FEATURES = (Feature.AUXTRACE, Feature.DIR_FORMAT, Feature.COMPRESSED)
_PIPE_ONLY = (abi.PERF_RECORD_HEADER_ATTR, abi.PERF_RECORD_HEADER_FEATURE, abi.PERF_RECORD_HEADER_TRACING_DATA)


def rewrite(source: "str | os.PathLike | PerfDataFile", dest: str | os.PathLike, *, compress: int | None = None) -> dict[int, int]:
    """Rewrite any perf.data pmuscope reads (pipe mode, zstd, directory format,
    attrs from a newer perf) as a plain file-mode perf.data with 128-byte attrs
    that perf 6.1 opens — like ``perf inject -i IN -o OUT``. Feature sections
    are carried over (except the layout ones: AUXTRACE index, DIR_FORMAT,
    COMPRESSED); AUXTRACE payloads are kept. Returns record counts written by type."""
    from .reader import PerfDataFile as _File

    src = source if isinstance(source, _File) else _File(source)
    counts: dict[int, int] = {}
    with PerfDataWriter(dest, src.attrs, host=False, compress=compress) as w:
        for bit, value in src.features.items():
            if bit not in _LAYOUT_FEATURES and bit != Feature.EVENT_DESC:
                w.features[bit] = value
        for type_, misc, mv, off, payload in src._decompressed_records():
            if type_ in _PIPE_ONLY:
                continue
            w.write(mv if payload is None else bytes(mv) + bytes(payload))
            counts[type_] = counts.get(type_, 0) + 1
    return counts
