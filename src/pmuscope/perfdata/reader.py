"""Reading perf.data: file mode (``PERFILE2``) and pipe mode, zstd-compressed
data, AUXTRACE payloads, and time ordering by perf's FINISHED_ROUND rule.

Sources: ``tools/perf/Documentation/perf.data-file-format.txt``,
``tools/perf/util/header.c`` (``perf_session__read_header``, ``read_attr``,
``perf_header__process_sections``), ``tools/perf/util/session.c``
(``reader__read_event``, ``perf_session__process_compressed_event``,
``process_finished_round``).
"""

from __future__ import annotations

import io
import mmap
import os
import re
import struct
import sys
from typing import Any, BinaryIO, Iterator

from .._plain import Plain
from ..errors import FormatError, require
from ..kernel import abi
from ..records.attrs import id_pos, is_pos
from ._cursor import Cursor, format_error
from ._format import FILE_HEADER_SIZE, PERF_MAGIC1, PERF_MAGIC2, PIPE_HEADER_SIZE, PerfDataAttr, default_event_name
from .features import Compressed, Feature, NrCpus, feature_name, parse_feature

#: ``struct perf_trace_event_type {u64 event_id; char name[MAX_EVENT_NAME=64];}``
EVENT_TYPE_ENTRY_SIZE = 72
#: PERF_RECORD_EVENT_UPDATE types (tools/lib/perf/include/perf/event.h)
EVENT_UPDATE_UNIT, EVENT_UPDATE_SCALE, EVENT_UPDATE_NAME, EVENT_UPDATE_CPUS = 0, 1, 2, 3
#: chunks handed to the record decoder are cut near this size
CHUNK_BYTES = 4 << 20
#: a non-seekable stream has no file size to bound an AUXTRACE payload by
MAX_STREAM_AUXTRACE = 1 << 30

_HDR = struct.Struct("<IHH")
_U64 = struct.Struct("<Q")
_SECTION = struct.Struct("<QQ")

R = abi.PerfRecord
S = abi.PerfSample
_NO_TIME = -1
#: pseudo record types of the walkers' ``max_run`` mode: one item holds a run of
#: whole records back to back, at their own offsets (_RUN) or all decompressed
#: from the COMPRESSED record at the item's offset (_RUN_INNER)
_RUN, _RUN_INNER = -1, -2
#: records a run never holds: they need handling of their own (an AUXTRACE
#: payload follows; compressed data; pipe-mode attrs and names can come late)
_RUN_BREAK = frozenset({R.AUXTRACE, R.COMPRESSED, R.COMPRESSED2, R.HEADER_ATTR, R.EVENT_UPDATE, R.HEADER_FEATURE})
_RUN_BREAK_MAP = bytes(1 if t in _RUN_BREAK else 0 for t in range(256))


def _run_walker():
    """``_native.run_walk`` (the record loop of :meth:`PerfDataFile._walk`'s
    run mode in C) when the C record decoder is enabled; None otherwise: the
    Python loop, the reference (``PMUSCOPE_NATIVE_DECODE=0``)."""
    from ..records import native

    if not native.enabled():
        return None
    return getattr(native._native, "run_walk", None)


class Section(Plain):
    """``struct perf_file_section {u64 offset; u64 size;}``"""

    _fields = ("offset", "size")

    offset: int
    size: int

    def __init__(self, offset: int, size: int) -> None:
        self.offset = offset
        self.size = size


class FileHeader(Plain):
    """``struct perf_file_header`` (file mode) or the 16-byte pipe header."""

    _fields = ("magic", "size", "pipe", "attr_size", "attrs", "data", "event_types", "feature_bits")

    magic: bytes
    size: int
    pipe: bool
    attr_size: int
    attrs: Section
    data: Section
    event_types: Section
    #: feature bit numbers set in ``flags[4]``, ascending
    feature_bits: list[int]

    def __init__(
        self,
        magic: bytes,
        size: int,
        pipe: bool,
        attr_size: int = 0,
        attrs: Section | None = None,
        data: Section | None = None,
        event_types: Section | None = None,
        feature_bits: list[int] | None = None,
    ) -> None:
        self.magic = magic
        self.size = size
        self.pipe = pipe
        self.attr_size = attr_size
        self.attrs = Section(0, 0) if attrs is None else attrs
        self.data = Section(0, 0) if data is None else data
        self.event_types = Section(0, 0) if event_types is None else event_types
        self.feature_bits = [] if feature_bits is None else feature_bits


class AuxtraceBuffer(Plain):
    """A ``PERF_RECORD_AUXTRACE`` and the AUX area data that follows it in the file."""

    _fields = ("file_offset", "size", "offset", "reference", "idx", "tid", "cpu", "data")

    file_offset: int
    size: int
    offset: int
    reference: int
    idx: int
    tid: int
    cpu: int
    data: memoryview

    def __init__(
        self,
        file_offset: int,
        size: int,
        offset: int,
        reference: int,
        idx: int,
        tid: int,
        cpu: int,
        data: memoryview,
    ) -> None:
        self.file_offset = file_offset
        self.size = size
        self.offset = offset
        self.reference = reference
        self.idx = idx
        self.tid = tid
        self.cpu = cpu
        self.data = data


def _seekable(fileobj) -> bool:
    try:
        return bool(fileobj.seekable())
    except (AttributeError, OSError, ValueError):
        return False


class _BoundedSink:
    """Collects zstd output; refuses more than ``limit`` bytes per record."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.n = 0

    def write(self, data) -> int:
        self.n += len(data)
        if self.n > self.limit:
            raise OverflowError(self.n)
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        self.n = 0
        return out


class _Stream:
    """A non-seekable byte stream (stdin, a pipe): exact reads with offsets."""

    def __init__(self, fileobj: BinaryIO, source: str) -> None:
        self.f = fileobj
        self.source = source
        self.pos = 0

    def read(self, n: int, what: str, *, eof_ok: bool = False, have: bytes = b"") -> bytes | None:
        """Exactly ``n`` bytes from ``pos`` on; ``have``: the first of them,
        already read (by a block reader)."""
        parts = [have] if have else []
        got = len(have)
        while got < n:
            chunk = self.f.read(min(n - got, 1 << 20))
            if not chunk:
                if eof_ok and got == 0:
                    return None
                raise format_error(self.source, self.pos + got, f"stream ends inside {what} (expected {n} bytes, got {got})")
            parts.append(chunk)
            got += len(chunk)
        self.pos += n
        return b"".join(parts) if len(parts) != 1 else parts[0]



def _joined(parts: list[memoryview]) -> memoryview:
    """The parts back to back: the one part itself (a view of bytes nothing
    writes to), else a copy of them together."""
    return parts[0] if len(parts) == 1 else memoryview(b"".join(parts))


class PerfDataWarning(UserWarning):
    """Something of a perf.data file was skipped (damaged optional metadata,
    trailing bytes) while the rest was read, as perf does."""


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, PerfDataWarning, stacklevel=3)


class PerfDataFile:
    """A perf.data file or stream, opened for reading.

    ``source`` is a path (``"-"`` for stdin), a binary file object (seekable or
    a pipe), or the file's bytes. File mode and pipe mode are both detected from
    the magic. Everything malformed raises :class:`~pmuscope.errors.FormatError`
    naming the file, the byte offset and what was expected. With
    ``strict=False`` (perf's own tolerance) a malformed feature section is kept
    as bytes and noted in ``feature_errors``, and a malformed record ends the
    data there, noted in ``data_error``; header and attr errors still raise.

    Attributes: ``header`` (:class:`FileHeader`), ``attrs`` (list of
    :class:`PerfDataAttr`), ``features`` (feature bit -> typed value; see
    :mod:`pmuscope.perfdata.features`), ``event_names``, ``pipe``.
    Iteration: :meth:`raw_records`, :meth:`raw_chunks`, :meth:`auxtrace`,
    :meth:`records`.
    """

    def __init__(self, source: Any, *, name: str | None = None, strict: bool | None = None) -> None:
        from .. import _policy

        # None: the library's default (strict), or perf's tolerance under the commands
        self.strict = _policy.STRICT_READS if strict is None else strict
        #: strict=False: feature bit -> the FormatError its payload raised (kept as bytes)
        self.feature_errors: dict[int, FormatError] = {}
        #: strict=False: the FormatError that ended the data early, else None
        self.data_error: FormatError | None = None
        #: bytes of the input when it is a regular file (a pipe-mode copy, a compressed
        #: file: what the readers size their chunks by), else None (a pipe, stdin, bytes)
        self.input_size: int | None = None
        self._file = None
        self._dir_files: list[str] = []
        self._dir_maps: list = []
        self._mmap = None
        self._stream: _Stream | None = None
        self._buf: memoryview | None = None
        self._pending: list[tuple] = []  # pipe stream: records read ahead while parsing the header part
        self._consumed = False
        self.attrs: list[PerfDataAttr] = []
        self.features: dict[int, Any] = {}
        self.event_types: dict[int, str] = {}
        self._names_by_id: dict[int, str] = {}
        self._decomp_limit = 64 << 20
        self._open(source, name)
        try:
            self._parse_header()
        except BaseException:
            self.close()
            raise

    # --- opening ------------------------------------------------------------------
    def _open(self, source: Any, name: str | None) -> None:
        if isinstance(source, (bytes, bytearray, memoryview)):
            self.source = name or "<bytes>"
            self._buf = memoryview(source).cast("B")
            return
        if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
            # perf record --threads: DIR/data holds the header, DIR/data.N the per-thread data
            directory = os.fspath(source)
            self._dir_files = sorted(
                (os.path.join(directory, n) for n in os.listdir(directory) if re.fullmatch(r"data\.\d+", n)),
                key=lambda p: int(p.rsplit(".", 1)[1]))
            source = os.path.join(directory, "data")
            name = name or source
        if isinstance(source, (str, os.PathLike)):
            if os.fspath(source) == "-":
                self.source = name or "<stdin>"
                self._stream = _Stream(sys.stdin.buffer, self.source)
                return
            self.source = name or os.fspath(source)
            try:
                self._file = open(source, "rb")
            except OSError as err:
                raise FormatError(f"{self.source}: cannot open: {err.strerror}", path=self.source, offset=0,
                                  expected="a readable file") from None
            fileobj = self._file
        else:
            fileobj = source
            fname = getattr(source, "name", None)
            self.source = name or (fname if isinstance(fname, str) else f"<fd {fname}>" if isinstance(fname, int) else "<stream>")
        try:
            fd = fileobj.fileno()
            st = os.fstat(fd)
            regular = st.st_mode & 0o170000 == 0o100000
        except (AttributeError, OSError, io.UnsupportedOperation):
            regular, st = False, None
        if regular:
            self.input_size = st.st_size
        if regular and st.st_size > 0:
            self._mmap = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            self._buf = memoryview(self._mmap)
        elif regular:
            self._buf = memoryview(b"")
        elif _seekable(fileobj):  # e.g. io.BytesIO: random access, size known
            self._buf = memoryview(fileobj.read())
        else:
            self._stream = _Stream(fileobj, self.source)

    def parsed_feature(self, bit: int, default: Any = None) -> Any:
        """The parsed value of header feature ``bit``, or ``default`` when the
        file has none or its section was damaged (``strict=False`` keeps a
        damaged section's raw bytes in :attr:`features`, which a caller
        expecting the parsed value must not take for it)."""
        if bit in self.feature_errors:
            return default
        return self.features.get(bit, default)

    def close(self) -> None:
        """Release the mapping and the file (views handed out become invalid)."""
        buf, self._buf = self._buf, None
        if buf is not None and self._mmap is not None:
            try:
                buf.release()
                self._mmap.close()
            except BufferError:  # memoryviews still exported: the map goes away with them
                pass
        self._mmap = None
        for m in self._dir_maps:
            try:
                if m is not None:
                    m.close()
            except BufferError:
                pass
        self._dir_maps = []
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "PerfDataFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _err(self, offset: int, what: str) -> FormatError:
        return format_error(self.source, offset, what)

    # --- header -------------------------------------------------------------------
    def _parse_header(self) -> None:
        if self._stream is not None:
            raw = self._stream.read(PIPE_HEADER_SIZE, "the perf.data header", eof_ok=True)
            if raw is None:
                raise self._err(0, "empty input, expected a perf.data header (magic 'PERFILE2')")
            magic, size = raw[:8], _U64.unpack_from(raw, 8)[0]
            self._check_magic(magic)
            if size != PIPE_HEADER_SIZE:
                raise self._err(8, f"header size {size} on a non-seekable stream: only pipe mode (size 16) can be streamed; "
                                   "give the file path instead")
            self.header = FileHeader(magic, size, True)
            self.pipe = True
            self._data_start, self._data_end = PIPE_HEADER_SIZE, None
            self._read_pipe_preamble()
            return
        buf = self._buf
        if len(buf) < PIPE_HEADER_SIZE:
            raise self._err(0, f"file is {len(buf)} bytes, too short for a perf.data header (expected magic 'PERFILE2')")
        magic = bytes(buf[:8])
        self._check_magic(magic)
        (size,) = _U64.unpack_from(buf, 8)
        if size == PIPE_HEADER_SIZE:
            self.header = FileHeader(magic, size, True)
            self.pipe = True
            self._data_start, self._data_end = PIPE_HEADER_SIZE, len(buf)
            self._read_pipe_preamble()
            return
        if size != FILE_HEADER_SIZE:
            raise self._err(8, f"header size {size}, expected {FILE_HEADER_SIZE} (file mode) or {PIPE_HEADER_SIZE} (pipe mode)")
        if len(buf) < FILE_HEADER_SIZE:
            raise self._err(len(buf), f"file is {len(buf)} bytes, shorter than the {FILE_HEADER_SIZE}-byte perf_file_header")
        self.pipe = False
        attr_size, ao, asz, do, dsz, eo, esz = struct.unpack_from("<7Q", buf, 16)
        flags = struct.unpack_from("<4Q", buf, 72)
        bits = [w * 64 + b for w in range(4) for b in range(64) if flags[w] >> b & 1]
        self.header = FileHeader(magic, size, False, attr_size, Section(ao, asz), Section(do, dsz), Section(eo, esz), bits)
        bad_attrs: FormatError | None = None
        for name, sec, at in (("attrs", self.header.attrs, 24), ("data", self.header.data, 40), ("event_types", self.header.event_types, 56)):
            try:
                self._check_section(sec, at, f"{name} section")
            except FormatError as err:
                if self.strict or name == "data" or (name == "attrs" and Feature.EVENT_DESC not in self.header.feature_bits):
                    raise
                if name == "attrs":
                    # perf takes the attrs from the EVENT_DESC header section then
                    bad_attrs = err
                    self.header.attrs = Section(0, 0)
                    continue
                # perf ignores the pre-3.x event_types section: names come from the features
                self.header.event_types = Section(0, 0)
                _warn(f"{err}; the obsolete event_types section was skipped")
        self._data_start, self._data_end = do, do + dsz
        self._read_features()
        self._read_attrs()
        if bad_attrs is not None:
            descs = self.parsed_feature(Feature.EVENT_DESC)
            if not descs:
                raise bad_attrs
            _warn(f"{bad_attrs}; the events were read from the EVENT_DESC header section")
            self.attrs = [PerfDataAttr(i, d.attr, list(d.ids), d.name) for i, d in enumerate(descs)]
        self._read_event_types()
        self._assign_names()

    def _check_magic(self, magic: bytes) -> None:
        if magic == PERF_MAGIC2:
            return
        if magic == PERF_MAGIC2[::-1]:
            raise self._err(0, "byte-swapped magic '2ELIFREP': the file was written on a machine of the other "
                               "endianness, which this reader does not support (convert it there with 'perf inject')")
        if magic == PERF_MAGIC1:
            raise self._err(0, "magic 'PERFFILE' (perf.data version 1, before Linux 3.x) is not supported; expected 'PERFILE2'")
        raise self._err(0, f"magic {magic!r} is not 'PERFILE2': not a perf.data file")

    def _check_section(self, sec: Section, at: int, what: str) -> None:
        n = len(self._buf)
        if sec.offset > n or sec.size > n - sec.offset:
            raise self._err(at, f"{what} [offset {sec.offset}, size {sec.size}] runs past the end of the {n}-byte file")

    def _parse_attr_bytes(self, raw: memoryview, at: int, declared: int | None = None) -> abi.perf_event_attr:
        """Build an attr of any size version; a larger-than-known attr must have a zero tail."""
        if len(raw) < abi.PERF_ATTR_SIZE_VER0:
            raise self._err(at, f"perf_event_attr of {len(raw)} bytes, expected at least {abi.PERF_ATTR_SIZE_VER0}")
        (size,) = struct.unpack_from("<I", raw, 4)
        if size == 0:
            size = abi.PERF_ATTR_SIZE_VER0
        known = abi.PERF_ATTR_SIZE_VER8
        n = min(size, len(raw))
        if n > known and any(raw[known:n]):
            raise self._err(at + known, f"perf_event_attr of {size} bytes sets fields beyond the {known} bytes this "
                                        "reader knows (a newer perf ABI)")
        return abi.attr_from_bytes(raw, n)

    def _read_attrs(self) -> None:
        h, buf = self.header, self._buf
        if h.attrs.size == 0:
            return
        if h.attr_size < abi.PERF_ATTR_SIZE_VER0 + 16 or h.attr_size % 8:
            raise self._err(16, f"attr_size {h.attr_size}, expected a multiple of 8 >= {abi.PERF_ATTR_SIZE_VER0 + 16}")
        if h.attrs.size % h.attr_size:
            raise self._err(32, f"attrs section size {h.attrs.size} is not a multiple of attr_size {h.attr_size}")
        for i in range(h.attrs.size // h.attr_size):
            at = h.attrs.offset + i * h.attr_size
            alen = h.attr_size - 16
            (declared,) = struct.unpack_from("<I", buf, at + 4)
            raw = buf[at : at + alen]
            if declared and (declared > alen or declared < abi.PERF_ATTR_SIZE_VER0):
                err = self._err(at + 4, f"perf_event_attr.size {declared} does not fit the {alen}-byte attr entry "
                                        f"(attr_size {h.attr_size} - 16)")
                if self.strict:
                    raise err
                # perf reads the attr entry as laid out in the file
                _warn(f"{err}; read as {alen} bytes")
                fixed = bytearray(raw)
                struct.pack_into("<I", fixed, 4, alen)
                raw = memoryview(bytes(fixed))
            attr = self._parse_attr_bytes(raw, at)
            ids_sec = Section(*_SECTION.unpack_from(buf, at + alen))
            try:
                self._check_section(ids_sec, at + alen, f"ids section of attr {i}")
                if ids_sec.size % 8:
                    raise self._err(at + alen + 8, f"ids section size {ids_sec.size} is not a multiple of 8")
            except FormatError as err:
                if self.strict:
                    raise
                # samples of a file with one event need no ids; with more, those of this
                # attr are then counted as of an unknown id
                _warn(f"{err}; attr {i} was read without its sample ids")
                ids_sec = Section(0, 0)
            ids = list(struct.unpack_from(f"<{ids_sec.size // 8}Q", buf, ids_sec.offset))
            self.attrs.append(PerfDataAttr(i, attr, ids))

    def _read_event_types(self) -> None:
        """The pre-3.x ``event_types`` section: ``{u64 event_id (= attr.config); char name[64]}``."""
        sec = self.header.event_types
        for i in range(sec.size // EVENT_TYPE_ENTRY_SIZE):
            at = sec.offset + i * EVENT_TYPE_ENTRY_SIZE
            (eid,) = _U64.unpack_from(self._buf, at)
            name = bytes(self._buf[at + 8 : at + EVENT_TYPE_ENTRY_SIZE]).split(b"\0", 1)[0].decode("utf-8", "replace")
            self.event_types[eid] = name

    def _feature_ctx(self) -> dict:
        ctx = {"parse_attr": lambda raw, at: self._parse_attr_bytes(raw, at)}
        nr = self.features.get(Feature.NRCPUS)
        if isinstance(nr, NrCpus):
            ctx["nr_cpus_available"] = nr.nr_cpus_available
        return ctx

    def _read_features(self) -> None:
        h, buf = self.header, self._buf
        table = h.data.offset + h.data.size
        n = len(h.feature_bits)
        if n and (table > len(buf) or 16 * n > len(buf) - table):
            err = self._err(table, f"feature section table of {n} entries runs past the end of the {len(buf)}-byte file")
            if self.strict:
                raise err
            # perf reads the samples without the optional metadata
            for bit in h.feature_bits:
                self.feature_errors[bit] = err
            _warn(f"{self.source}: the header's feature table runs past the end of the file; its optional "
                  f"metadata ({', '.join(feature_name(b) for b in h.feature_bits)}) was skipped")
            return
        sections = []
        for i, bit in enumerate(h.feature_bits):
            sec = Section(*_SECTION.unpack_from(buf, table + 16 * i))
            try:
                self._check_section(sec, table + 16 * i, f"feature section {feature_name(bit)}")
            except FormatError as err:
                if self.strict:
                    raise
                self.feature_errors[bit] = err
                _warn(f"{self.source}: skipped the damaged {feature_name(bit)} header section (it runs past the "
                      "end of the file); the samples are read")
                continue
            sections.append((bit, sec))
        # NRCPUS first: CPU_TOPOLOGY's layout depends on it
        sections.sort(key=lambda bs: bs[0] != Feature.NRCPUS)
        for bit, sec in sections:
            try:
                self._set_feature(bit, buf[sec.offset : sec.offset + sec.size], sec.offset)
            except FormatError as err:
                if self.strict:
                    raise
                self.feature_errors[bit] = err
                self.features[bit] = bytes(buf[sec.offset : sec.offset + sec.size])
                _warn(f"{self.source}: skipped the damaged {feature_name(bit)} header section ({err.args[0] if err.args else err}); "
                      "the samples are read")

    def _set_feature(self, bit: int, payload: memoryview, base: int) -> None:
        value = parse_feature(bit, payload, self.source, base, self._feature_ctx())
        self.features[bit] = value
        if isinstance(value, Compressed) and value.mmap_len:
            self._decomp_limit = max(self._decomp_limit, 4 * value.mmap_len)

    def _assign_names(self) -> None:
        descs = self.parsed_feature(Feature.EVENT_DESC) or []
        by_id = {}
        for d in descs:
            for i in d.ids:
                by_id[i] = d.name
        by_id.update(self._names_by_id)
        for i, a in enumerate(self.attrs):
            name = None
            for eid in a.ids:
                name = by_id.get(eid)
                if name:
                    break
            if not name:  # the old event_types section is keyed by attr.config
                name = self.event_types.get(int(a.attr.config))
            if not name and len(descs) == len(self.attrs) and not self.pipe:
                name = descs[i].name
            a.name = name or default_event_name(a.attr)

    # --- pipe mode ------------------------------------------------------------------
    _PREAMBLE_TYPES = frozenset({R.HEADER_ATTR, R.HEADER_FEATURE, R.EVENT_UPDATE, R.HEADER_TRACING_DATA, R.ID_INDEX,
                                 R.THREAD_MAP, R.CPU_MAP, R.TIME_CONV, R.HEADER_BUILD_ID, R.FINISHED_INIT,
                                 R.HEADER_EVENT_TYPE, R.STAT_CONFIG, R.AUXTRACE_INFO})

    def _read_pipe_preamble(self) -> None:
        """Pipe mode has no header sections: attrs, names and features arrive as
        records at the start of the stream. Read until the first other record so
        ``attrs``/``features`` are complete before iteration starts."""
        if self._stream is not None:
            it = self._stream_iter = self._stream_records()
        else:
            it = self._iter_file_records()
        self._preamble_end = self._data_start
        for rec in it:
            if self._stream is not None:
                self._pending.append(rec)
            if rec[0] not in self._PREAMBLE_TYPES:
                break
            self._process_pipe_record(rec)
            self._preamble_end = rec[3] + len(rec[2]) + (len(rec[4]) if rec[4] is not None else 0)
        self._assign_names()

    def _process_pipe_record(self, rec: tuple) -> None:
        type_, misc, mv, off, _ = rec
        c = Cursor(mv, self.source, base=off, start=8)
        if type_ == R.HEADER_ATTR:
            c.what = "PERF_RECORD_HEADER_ATTR"
            c.need(abi.PERF_ATTR_SIZE_VER0, "perf_event_attr")
            (size,) = struct.unpack_from("<I", mv, 12)
            size = size or abi.PERF_ATTR_SIZE_VER0
            if size % 8 or size > len(mv) - 8:
                raise self._err(off + 12, f"HEADER_ATTR attr.size {size} does not fit the {len(mv)}-byte record")
            attr = self._parse_attr_bytes(mv[8 : 8 + size], off + 8)
            nids = (len(mv) - 8 - size) // 8
            ids = list(struct.unpack_from(f"<{nids}Q", mv, 8 + size))
            self.attrs.append(PerfDataAttr(len(self.attrs), attr, ids))
        elif type_ == R.HEADER_FEATURE:
            c.what = "PERF_RECORD_HEADER_FEATURE"
            bit = c.u64("feat_id")
            if bit >= 256:
                raise self._err(off + 8, f"HEADER_FEATURE feat_id {bit}, expected < 256")
            if len(mv) == 16 and bit > max(Feature):
                # perf ends the stream's features with an empty HEADER_LAST_FEATURE
                # (tools/perf/util/header.c perf_event__synthesize_features)
                return
            self._set_feature(bit, mv[16:], off + 16)
        elif type_ == R.EVENT_UPDATE:
            c.what = "PERF_RECORD_EVENT_UPDATE"
            kind, eid = c.u64("type"), c.u64("id")
            if kind == EVENT_UPDATE_NAME:
                name = bytes(mv[24:]).split(b"\0", 1)[0].decode("utf-8", "replace")
                self._names_by_id[eid] = name
                for a in self.attrs:
                    if eid in a.ids:
                        a.name = name

    # --- record walking -----------------------------------------------------------
    def _iter_file_records(self, max_run: int = 0) -> Iterator[tuple]:
        """(type, misc, record view, file offset, AUXTRACE payload view or None)
        in file order, compressed records left as they are. In directory format
        the ``data.N`` files follow the header file's data section. With
        ``max_run``, see :meth:`_walk` (and :meth:`_stream_runs`)."""
        if self._stream is not None:
            yield from self._iter_stream_records(max_run)
            return
        yield from self._walk(self._buf, self._data_start, self._data_end, self.source, max_run)
        for i, path in enumerate(self._dir_files):
            if i >= len(self._dir_maps):  # mapped once, kept until close() like the header file
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
                self._dir_maps.append(m)
            m = self._dir_maps[i]
            if m is not None:
                yield from self._walk(memoryview(m), 0, len(m), path, max_run)

    def _walk(self, buf: memoryview, pos: int, end: int, source: str, max_run: int = 0) -> Iterator[tuple]:
        """Records of ``buf[pos:end]`` one by one; with ``max_run`` > 0, runs of
        consecutive records (not in :data:`_RUN_BREAK`) come as one ``_RUN``
        item of at most about ``max_run`` bytes, so that a consumer of whole
        chunks is not handed ~100k Python tuples for ~100k records. A run also
        ends after a record whose size is not a multiple of 8 (perf before 6.12
        wrote pipe-mode HEADER_FEATURE records unpadded): the next run starts
        8-byte aligned again, which the decoder's columnar path needs."""
        unpack = _HDR.unpack_from
        start = pos  # first record of the pending run
        bad: tuple[int, str] | None = None
        fast = _run_walker() if max_run else None
        while pos < end:
            if fast is not None:  # the C loop over the records of a run; stops where this loop must look
                p, cut = fast(buf, pos, end, max_run, start, _RUN_BREAK_MAP)
                if p != pos:
                    pos = p
                    if cut:
                        yield _RUN, 0, buf[start:pos], start, None
                        start = pos
                    continue
            if end - pos < 8:
                bad = (pos, f"{end - pos} bytes left in the data section, expected an 8-byte perf_event_header")
                break
            type_, misc, size = unpack(buf, pos)
            if size < 8:
                bad = (pos, f"record type {type_} has size {size}, expected at least 8 (perf_event_header)")
                break
            if size > end - pos:
                bad = (pos, f"record type {type_} of size {size} runs past the end of the data section at {end}")
                break
            if max_run and type_ not in _RUN_BREAK:
                pos += size
                if size & 7 or pos - start >= max_run:
                    yield _RUN, 0, buf[start:pos], start, None
                    start = pos
                continue
            if pos > start:
                yield _RUN, 0, buf[start:pos], start, None
            payload = None
            nxt = pos + size
            if type_ == R.AUXTRACE:
                if size < 48:
                    bad = (pos, f"PERF_RECORD_AUXTRACE of size {size}, expected at least 48")
                    start = pos
                    break
                (psz,) = _U64.unpack_from(buf, pos + 8)
                if psz > end - nxt:
                    bad = (pos + 8, f"AUXTRACE payload of {psz} bytes runs past the end of the data section at {end}")
                    start = pos
                    break
                payload = buf[nxt : nxt + psz]
                nxt += psz
            yield type_, misc, buf[pos : pos + size], pos, payload
            pos = start = nxt
        if pos > start:  # the records before a malformed one still count (strict=False keeps them)
            yield _RUN, 0, buf[start:pos], start, None
        if bad is not None:
            raise format_error(source, *bad)

    def _iter_stream_records(self, max_run: int = 0) -> Iterator[tuple]:
        if self._consumed:
            raise FormatError(f"{self.source}: a non-seekable stream can be iterated only once", path=self.source, offset=self._stream.pos, expected="one pass")
        self._consumed = True
        pending, self._pending = self._pending, []
        yield from pending
        # the preamble's reader stopped right after a whole record: either reader goes on from there
        yield from self._stream_runs(max_run) if max_run else self._stream_iter

    def _stream_runs(self, max_run: int) -> Iterator[tuple]:
        """:meth:`_stream_records` in :meth:`_walk`'s ``max_run`` mode: the
        stream is read in blocks of ``max_run`` bytes and the whole records of
        each block come as ``_RUN`` items (those of :data:`_RUN_BREAK` one by
        one), with the same checks and error offsets as record by record."""
        st = self._stream
        unpack = _HDR.unpack_from
        buf = b""
        base = st.pos  # stream offset of buf[0]
        # the C loop over a block's plain records (as _walk's); it stops where this loop must
        # look (a record to handle, a bad size, the block's partial last record) and, with a
        # run limit past the block, cuts runs only after an unpadded record, as this loop does
        fast = _run_walker()
        while True:
            more = st.f.read(max_run)
            if not more:
                break
            st.pos += len(more)
            buf = buf + more if buf else more
            del more  # joined to what was left of the last block: not held twice while it is walked
            n = len(buf)
            pos = start = 0
            while n - pos >= 8:
                if fast is not None:
                    p, cut = fast(buf, pos, n, n + 1, start, _RUN_BREAK_MAP)
                    if p != pos:
                        pos = p
                        if cut:
                            yield _RUN, 0, memoryview(buf)[start:pos], base + start, None
                            start = pos
                        continue
                type_, misc, size = unpack(buf, pos)
                if size < 8:
                    if pos > start:
                        yield _RUN, 0, memoryview(buf)[start:pos], base + start, None
                    raise self._err(base + pos, f"record type {type_} has size {size}, expected at least 8 (perf_event_header)")
                if size > n - pos:
                    break
                if type_ not in _RUN_BREAK:
                    pos += size
                    if size & 7:
                        yield _RUN, 0, memoryview(buf)[start:pos], base + start, None
                        start = pos
                    continue
                if pos > start:
                    yield _RUN, 0, memoryview(buf)[start:pos], base + start, None
                rec = memoryview(buf)[pos : pos + size]
                payload = None
                nxt = pos + size
                if type_ == R.AUXTRACE:
                    if size < 48:
                        raise self._err(base + pos, f"PERF_RECORD_AUXTRACE of size {size}, expected at least 48")
                    (psz,) = _U64.unpack_from(buf, pos + 8)
                    if psz > MAX_STREAM_AUXTRACE:
                        raise self._err(base + pos + 8, f"AUXTRACE payload of {psz} bytes, more than the {MAX_STREAM_AUXTRACE} "
                                                        "bytes accepted from a stream")
                    if psz <= n - nxt:
                        payload = memoryview(buf)[nxt : nxt + psz]
                    else:  # the rest of the payload is still in the stream: read it, then a new block
                        st.pos = base + nxt
                        payload = memoryview(st.read(psz, f"AUXTRACE payload of {psz} bytes", have=buf[nxt:]))
                        yield type_, misc, rec, base + pos, payload
                        buf, base, n, pos = b"", st.pos, 0, 0
                        break
                    nxt += psz
                yield type_, misc, rec, base + pos, payload
                pos = start = nxt
            if pos > start:
                yield _RUN, 0, memoryview(buf)[start:pos], base + start, None
            buf = buf[pos:]
            base += pos
        if buf:
            at = base + len(buf)
            if len(buf) < 8:
                raise self._err(at, f"stream ends inside a perf_event_header (expected 8 bytes, got {len(buf)})")
            type_, misc, size = unpack(buf, 0)
            raise self._err(at, f"stream ends inside record type {type_} of size {size} (expected {size - 8} bytes, "
                                f"got {len(buf) - 8})")

    def _stream_records(self) -> Iterator[tuple]:
        st = self._stream
        while True:
            pos = st.pos
            hdr = st.read(8, "a perf_event_header", eof_ok=True)
            if hdr is None:
                return
            type_, misc, size = _HDR.unpack(hdr)
            if size < 8:
                raise self._err(pos, f"record type {type_} has size {size}, expected at least 8 (perf_event_header)")
            rec = hdr + st.read(size - 8, f"record type {type_} of size {size}")
            payload = None
            if type_ == R.AUXTRACE:
                if size < 48:
                    raise self._err(pos, f"PERF_RECORD_AUXTRACE of size {size}, expected at least 48")
                (psz,) = _U64.unpack_from(rec, 8)
                if psz > MAX_STREAM_AUXTRACE:
                    raise self._err(pos + 8, f"AUXTRACE payload of {psz} bytes, more than the {MAX_STREAM_AUXTRACE} "
                                             "bytes accepted from a stream")
                payload = memoryview(st.read(psz, f"AUXTRACE payload of {psz} bytes"))
            yield type_, misc, memoryview(rec), pos, payload

    def _decompressed_records(self, containers: bool = False, max_run: int = 0) -> Iterator[tuple]:
        """File-order records with COMPRESSED/COMPRESSED2 expanded in place; the
        inner records carry the file offset of the compressed record. With
        ``containers`` the compressed records themselves come first too. With
        ``max_run``, consecutive records come as runs (:meth:`_walk`): ``_RUN``
        items from the file, ``_RUN_INNER`` items of decompressed records."""
        if self.strict:
            yield from self._decompressed_records_strict(containers, max_run)
            return
        try:
            yield from self._decompressed_records_strict(containers, max_run)
        except FormatError as err:
            self.data_error = err
            _warn(f"{err}; the records before it were read, the rest was skipped")

    def _decompressed_records_strict(self, containers: bool, max_run: int = 0) -> Iterator[tuple]:
        writer = sink = None
        leftover = b""
        left_at = 0
        unpack = _HDR.unpack_from
        for rec in self._iter_file_records(max_run):
            type_ = rec[0]
            if self.pipe and rec[3] >= self._preamble_end and type_ in (R.HEADER_ATTR, R.EVENT_UPDATE, R.HEADER_FEATURE):
                self._process_pipe_record(rec)
            if type_ != R.COMPRESSED and type_ != R.COMPRESSED2:
                yield rec
                continue
            if containers:
                yield rec
            mv, off = rec[2], rec[3]
            if type_ == R.COMPRESSED2:
                if len(mv) < 16:
                    raise self._err(off, f"PERF_RECORD_COMPRESSED2 of size {len(mv)}, expected at least 16")
                (dsz,) = _U64.unpack_from(mv, 8)
                if dsz > len(mv) - 16:
                    raise self._err(off + 8, f"COMPRESSED2 data_size {dsz} exceeds the {len(mv) - 16} bytes of the record")
                data = mv[16 : 16 + dsz]
            else:
                data = mv[8:]
            if writer is None:
                zstd = require("zstandard", "zstd", "zstd-compressed perf.data (perf record -z)")
                sink = _BoundedSink(self._decomp_limit)
                writer = zstd.ZstdDecompressor().stream_writer(sink, write_size=1 << 20)
            try:
                writer.write(data)
            except OverflowError:
                raise self._err(off, f"compressed record expands beyond {self._decomp_limit} bytes") from None
            except Exception as err:  # zstandard.ZstdError
                raise self._err(off, f"zstd data does not decompress: {err}") from None
            out = leftover + sink.take() if leftover else sink.take()
            pos, n = 0, len(out)
            start = 0  # first record of the pending run (max_run)
            bad = None
            view = memoryview(out)
            while n - pos >= 8:
                t, m, size = unpack(out, pos)
                if size < 8:
                    bad = f"decompressed record type {t} has size {size}, expected at least 8"
                    break
                if size > n - pos:
                    break
                if t == R.AUXTRACE or t == R.COMPRESSED or t == R.COMPRESSED2:
                    bad = f"record type {t} inside compressed data, which perf never writes"
                    break
                if max_run:
                    pos += size
                    if size & 7 or pos - start >= max_run:
                        yield _RUN_INNER, 0, view[start:pos], off, None
                        start = pos
                    continue
                yield t, m, view[pos : pos + size], off, None
                pos = start = pos + size
            if pos > start:
                yield _RUN_INNER, 0, view[start:pos], off, None
            if bad is not None:
                raise self._err(off, bad)
            leftover = out[pos:]
            left_at = off
        if leftover:
            raise self._err(left_at, f"compressed data ends with {len(leftover)} bytes of an incomplete record")

    # --- public iteration ---------------------------------------------------------
    def raw_records(self, *, ordered: bool = False) -> Iterator[tuple[int, int, memoryview, int]]:
        """Every record as ``(type, misc, view of the whole record incl. header,
        file_offset)``. Compressed records are expanded (inner records report
        the compressed record's offset); AUXTRACE payloads are skipped (see
        :meth:`auxtrace`). ``ordered=True`` sorts by time with perf's
        FINISHED_ROUND rule; records without a time pass through at once, as
        perf delivers them."""
        if ordered:
            for rec in self._ordered():
                yield rec[:4]
            return
        for rec in self._decompressed_records():
            yield rec[:4]

    def raw_chunks(self, *, max_bytes: int = CHUNK_BYTES, ordered: bool = False,
                   release: bool = False) -> Iterator[tuple[int, memoryview]]:
        """``(base_offset, chunk)`` pairs of whole records back to back, the
        raw-chunk interface of :mod:`pmuscope.records`: COMPRESSED records are
        replaced by their decompressed records, AUXTRACE payloads left out.
        With ``ordered=True`` chunks hold time-sorted records copied together
        and ``base_offset`` is that of the chunk's first record.

        Chunks are about ``max_bytes`` whatever the input: a mapped file's
        records are handed over in place, decompressed and streamed records
        copied together. A chunk ends early only at records that need handling
        of their own (AUXTRACE, pipe-mode HEADER_ATTR/EVENT_UPDATE/HEADER_FEATURE)
        and after a record whose size is not a multiple of 8, so every chunk's
        records start 8-byte aligned when their sizes allow it.

        ``release``: once the consumer asks for the next chunk, the pages of a
        mapped file it was handed leave the process's memory (read from the file
        again if still used), so a reader of one pass holds a chunk's pages, not
        the file's."""
        if ordered:
            parts: list[memoryview] = []
            first, total = 0, 0
            for rec in self._ordered():
                if not parts:
                    first = rec[3]
                parts.append(rec[2])
                total += len(rec[2])
                if total >= max_bytes:
                    yield first, memoryview(b"".join(parts))
                    parts, total = [], 0
            if parts:
                yield first, memoryview(b"".join(parts))
            return
        # runs of mapped records are handed over as they are; decompressed
        # records and a stream's records are copied together so the decoder
        # sees large chunks
        parts: list[memoryview] = []
        parts_off = parts_len = 0
        stream = self._stream is not None
        try:
            for rec in self._decompressed_records(max_run=max_bytes):
                type_, mv, off = rec[0], rec[2], rec[3]
                if type_ != _RUN_INNER and not stream:
                    if parts:
                        yield parts_off, memoryview(b"".join(parts))
                        parts, parts_len = [], 0
                    yield off, mv
                    if release:
                        self._release(off, len(mv))
                    continue
                if not parts:
                    parts_off = off
                parts.append(mv)
                parts_len += len(mv)
                # a chunk ends before an AUXTRACE payload and after an unpadded record
                # (the next one starts 8-byte aligned again: see _walk); a stream's
                # records come a block of about max_bytes at a time: a block of half
                # that is a chunk of its own (handed over as it is, not copied)
                if parts_len >= (max_bytes >> 1 if stream else max_bytes) or rec[4] is not None or len(mv) & 7:
                    yield parts_off, _joined(parts)
                    parts, parts_len = [], 0
        except FormatError:
            if parts:  # every whole record before the error, as record by record
                yield parts_off, _joined(parts)
            raise
        if parts:
            yield parts_off, _joined(parts)

    def _release(self, off: int, size: int) -> None:
        """Drop the whole pages of the mapped file's bytes [off, off + size) from memory."""
        mm = self._mmap
        if mm is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        lo = -(-off // mmap.PAGESIZE) * mmap.PAGESIZE
        hi = ((off + size) // mmap.PAGESIZE) * mmap.PAGESIZE
        if hi > lo:
            try:
                mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError):
                pass

    def auxtrace(self) -> Iterator[AuxtraceBuffer]:
        """The AUXTRACE records and the AUX area data each carries."""
        for type_, misc, mv, off, payload in self._iter_file_records():
            if type_ == R.AUXTRACE:
                size, offset, ref, idx, tid, cpu = struct.unpack_from("<QQQIII", mv, 8)
                yield AuxtraceBuffer(off, size, offset, ref, idx, tid, cpu, payload)

    @property
    def directory_format(self) -> bool:
        """True for ``perf record --threads`` output (a directory of data files)."""
        return bool(self._dir_files)

    def records(self, *, ordered: bool | None = None):
        """A :class:`pmuscope.records.RecordSource` over this file's data; time
        ordered by default for directory format, whose files interleave in time."""
        if ordered is None:
            ordered = self.directory_format
        from ..records import AttrTable, RecordSource

        table = AttrTable([(a.attr, a.ids) for a in self.attrs], names=[a.name for a in self.attrs])
        return RecordSource(self.raw_chunks(ordered=ordered), table)

    @property
    def event_names(self) -> list[str]:
        """Event names in attr order."""
        return [a.name or default_event_name(a.attr) for a in self.attrs]

    def counts(self) -> dict[int, int]:
        """Number of records of each type, like ``perf report --stats``: the
        records inside COMPRESSED/COMPRESSED2 and the compressed records themselves."""
        return self.record_counts()[0]

    def sample_counts(self) -> list[int]:
        """SAMPLE records per attr (by sample id; all on attr 0 when there is one)."""
        return self.record_counts()[1][R.SAMPLE]

    def record_counts(self, per_attr: tuple[int, ...] = (R.SAMPLE,)) -> tuple[dict[int, int], dict[int, list[int]]]:
        """One pass over the records: the number of each type (:meth:`counts`) and,
        for the types ``per_attr``, the number per attr (by id, as :meth:`sample_counts`)."""
        counts: dict[int, int] = {}
        by_attr = {t: [0] * max(len(self.attrs), 1) for t in per_attr}
        keyer = self._time_keyer()
        for type_, misc, mv, off, _ in self._decompressed_records(containers=True):
            counts[type_] = counts.get(type_, 0) + 1
            if type_ in by_attr:
                by_attr[type_][keyer.attr_index(type_, mv)] += 1
        return counts, by_attr

    # --- time ordering ------------------------------------------------------------
    def _time_keyer(self) -> "_TimeKeyer":
        return _TimeKeyer(self.attrs)

    def _ordered(self) -> Iterator[tuple]:
        keyer = self._time_keyer()
        heap: list = []
        seq = 0
        limit = -1
        seen_max = -1
        from heapq import heappop as pop, heappush as push

        for rec in self._decompressed_records():
            type_ = rec[0]
            if type_ == R.FINISHED_ROUND:
                while heap and heap[0][0] <= limit:
                    yield pop(heap)[2]
                limit = seen_max
                yield rec
                continue
            t = keyer.time(type_, rec[2])
            if t == _NO_TIME:
                yield rec
                continue
            if t > seen_max:
                seen_max = t
            push(heap, (t, seq, rec))
            seq += 1
        while heap:
            yield pop(heap)[2]


class _TimeKeyer:
    """Finds the timestamp (and attr) of a record from the attrs' sample_type:
    the TIME word of a SAMPLE, or the sample_id trailer of other kernel records."""

    def __init__(self, attrs: list[PerfDataAttr]) -> None:
        self.index_by_id: dict[int, int] = {}
        self.layouts = []
        for a in attrs:
            st = int(a.attr.sample_type)
            for i in a.ids:
                self.index_by_id[i] = a.index
            t_sample = -1
            if st & S.TIME:
                t_sample = 8 + 8 * sum(1 for b in (S.IDENTIFIER, S.IP, S.TID) if st & b)
            t_trailer = -1
            if a.attr.sample_id_all and st & S.TIME:
                t_trailer = 8 * (1 + sum(1 for b in (S.ID, S.STREAM_ID, S.CPU, S.IDENTIFIER) if st & b))
            id_word = id_pos(st)
            is_back = is_pos(st) if a.attr.sample_id_all else -1
            self.layouts.append((t_sample, t_trailer, id_word, is_back))
        self.uniform = len(set(self.layouts)) <= 1
        self.first = self.layouts[0] if self.layouts else (-1, -1, -1, -1)

    def attr_index(self, type_: int, mv: memoryview) -> int:
        if len(self.layouts) <= 1:
            return 0
        lay = self.first
        try:
            if type_ == R.SAMPLE:
                if lay[2] < 0:
                    return 0
                (i,) = _U64.unpack_from(mv, 8 + 8 * lay[2])
            else:
                if lay[3] < 0:
                    return 0
                (i,) = _U64.unpack_from(mv, len(mv) - 8 * lay[3])
        except struct.error:
            return 0
        return self.index_by_id.get(i, 0)

    def time(self, type_: int, mv: memoryview) -> int:
        if type_ >= abi.PERF_RECORD_USER_TYPE_START or not self.layouts:
            return _NO_TIME
        lay = self.first if self.uniform else self.layouts[self.attr_index(type_, mv)]
        n = len(mv)
        if type_ == R.SAMPLE:
            off = lay[0]
        else:
            off = n - lay[1] if lay[1] > 0 else -1
        if off < 8 or off + 8 > n:
            return _NO_TIME
        return _U64.unpack_from(mv, off)[0]
