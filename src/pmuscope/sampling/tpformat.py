"""Tracepoint payloads (``PERF_SAMPLE_RAW``) decoded by the tracefs ``format`` file.

``/sys/kernel/tracing/events/<sys>/<name>/format`` lists one line per field::

    field:char prev_comm[16];	offset:8;	size:16;	signed:0;
    field:__data_loc char[] filename;	offset:8;	size:4;	signed:0;

A ``__data_loc`` field is a u32 whose low 16 bits are the offset of the data
inside the payload and whose high 16 bits its length (``__get_dynamic_array``
in ``include/trace/trace_events.h``); ``__rel_loc`` is the same but the offset
is relative to the end of the field itself (Linux 5.17+).

:class:`TracepointFormat` turns the field list into a numpy structured dtype
for the fixed part, so a whole :class:`~pmuscope.records.SampleBatch` worth of
RAW payloads decodes in one call (:meth:`TracepointFormat.decode_batch`).
:func:`tracing_data` builds the perf.data ``HEADER_TRACING_DATA`` feature
(``tools/perf/util/trace-event-info.c``) that ``perf script`` needs to print
the fields.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field

import numpy as np

from .. import errors
from .._np import ragged_index

_FIELD_RE = re.compile(
    r"^\s*field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);\s*(?:signed:(?P<signed>-?\d+);)?"
)
_ARRAY_RE = re.compile(r"^(?P<type>.*?)\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\[(?P<len>[^\]]*)\]$")


@dataclass
class TracepointField:
    """One ``field:`` line of a format file."""

    name: str
    type: str
    offset: int
    size: int
    signed: bool
    #: element count of a fixed array (``char comm[16]`` -> 16), 0 for a scalar
    array_len: int = 0
    #: ``__data_loc`` (absolute) or ``__rel_loc`` (relative) dynamic field
    data_loc: bool = False
    rel_loc: bool = False
    common: bool = False

    @property
    def is_string(self) -> bool:
        return self.type.split()[-1] == "char" and (self.array_len > 0 or self.data_loc or self.rel_loc)


@dataclass
class TracepointFormat:
    """A parsed tracefs ``format`` file."""

    system: str
    name: str
    id: int
    fields: list[TracepointField] = field(default_factory=list)
    print_fmt: str = ""

    @property
    def event_fields(self) -> list[TracepointField]:
        """The fields after the ``common_*`` header."""
        return [f for f in self.fields if not f.common]

    def dtype(self, *, common: bool = True) -> np.dtype:
        """A structured numpy dtype of the fixed-size part (dynamic fields are
        their u32 locator); ``itemsize`` is the end of the last field."""
        names, formats, offsets = [], [], []
        end = 0
        for f in self.fields:
            if f.common and not common:
                continue
            names.append(f.name)
            formats.append(_field_dtype(f))
            offsets.append(f.offset)
            end = max(end, f.offset + f.size)
        return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": end})

    @property
    def fixed_size(self) -> int:
        return max((f.offset + f.size for f in self.fields), default=0)

    def decode(self, payload: bytes | memoryview) -> dict:
        """One payload -> ``{field: value}`` (strings decoded, arrays as lists)."""
        buf = bytes(payload)
        out: dict = {}
        for f in self.fields:
            if f.offset + f.size > len(buf):
                raise errors.FormatError(
                    f"{self.system}:{self.name} payload of {len(buf)} bytes is too short for field {f.name!r} "
                    f"(offset {f.offset}, size {f.size})"
                )
            if f.data_loc or f.rel_loc:
                (loc,) = struct.unpack_from("<I", buf, f.offset)
                start, length = loc & 0xFFFF, loc >> 16
                if f.rel_loc:
                    start += f.offset + f.size
                raw = buf[start : start + length]
                out[f.name] = _cstring(raw) if f.is_string else raw
            elif f.is_string:
                out[f.name] = _cstring(buf[f.offset : f.offset + f.size])
            else:
                v = np.frombuffer(buf, dtype=_field_dtype(f), count=1, offset=f.offset)[0]
                out[f.name] = v.tolist()
        return out

    def decode_batch(self, raw: np.ndarray, raw_offsets: np.ndarray, *, strings: bool = True) -> dict[str, np.ndarray]:
        """Columnar decoding of many payloads: ``raw`` is the flat payload
        storage of a :class:`~pmuscope.records.SampleBatch` (bytes or u64
        words) and ``raw_offsets`` its ``n + 1`` boundaries (in units of
        ``raw``'s items). Returns one array per field; strings become object
        arrays of ``str`` when ``strings`` is true (fixed ``char[N]`` fields
        otherwise stay ``S`` arrays)."""
        flat = np.ascontiguousarray(raw).view(np.uint8)
        unit = np.asarray(raw).dtype.itemsize if np.asarray(raw).dtype != object else 1
        starts = np.asarray(raw_offsets[:-1], dtype=np.int64) * unit
        ends = np.asarray(raw_offsets[1:], dtype=np.int64) * unit
        n = len(starts)
        size = self.fixed_size
        if n and int((ends - starts).min()) < size:
            raise errors.FormatError(f"{self.system}:{self.name}: a RAW payload is shorter than the format's {size} bytes")
        idx = starts[:, None] + np.arange(size, dtype=np.int64)[None, :]
        fixed = flat[idx] if n else np.zeros((0, size), np.uint8)
        rec = np.ascontiguousarray(fixed).view(self.dtype()).reshape(n)
        out: dict[str, np.ndarray] = {}
        for f in self.fields:
            col = rec[f.name]
            if f.data_loc or f.rel_loc:
                loc = col.astype(np.int64)
                off = loc & 0xFFFF
                ln = loc >> 16
                if f.rel_loc:
                    off = off + f.offset + f.size
                vals = [bytes(flat[s + o : s + o + k]) for s, o, k in zip(starts.tolist(), off.tolist(), ln.tolist())]
                out[f.name] = np.array([_cstring(v) for v in vals] if f.is_string else vals, dtype=object)
            elif f.is_string:
                out[f.name] = np.array([_cstring(v) for v in col.tolist()], dtype=object) if strings else col
            else:
                out[f.name] = np.array(col)
        return out


def _cstring(raw: bytes) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")


_INT_SIZES = {1: "i1", 2: "<i2", 4: "<i4", 8: "<i8"}
_UINT_SIZES = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def _field_dtype(f: TracepointField):
    if f.data_loc or f.rel_loc:
        return np.dtype("<u4")
    if f.is_string:
        return np.dtype(f"S{f.size}")
    if f.array_len:
        elem = f.size // f.array_len if f.array_len else f.size
        table = _INT_SIZES if f.signed else _UINT_SIZES
        if elem in table:
            return np.dtype((table[elem], (f.array_len,)))
        return np.dtype(f"V{f.size}")
    table = _INT_SIZES if f.signed else _UINT_SIZES
    return np.dtype(table.get(f.size, f"V{f.size}"))


def parse_format(text: str, *, system: str = "", source: str = "format") -> TracepointFormat:
    """Parse the text of a tracefs ``format`` file."""
    name, tp_id, print_fmt = "", -1, ""
    fields: list[TracepointField] = []
    common = True
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            if fields:
                common = False  # a blank line separates common_* from the event's fields
            continue
        if s.startswith("name:"):
            name = s[5:].strip()
        elif s.startswith("ID:"):
            try:
                tp_id = int(s[3:].strip())
            except ValueError:
                raise errors.FormatError(f"{source}:{lineno}: bad ID line {s!r}") from None
        elif s.startswith("print fmt:"):
            print_fmt = s[len("print fmt:"):].strip()
        elif s.startswith("field:"):
            m = _FIELD_RE.match(s)
            if not m:
                raise errors.FormatError(f"{source}:{lineno}: cannot parse field line {s!r}")
            fields.append(_parse_field(m, common, source, lineno))
    if not fields and tp_id < 0:
        raise errors.FormatError(f"{source}: no 'ID:' or 'field:' lines; not a tracefs format file")
    return TracepointFormat(system, name, tp_id, fields, print_fmt)


def _parse_field(m: re.Match, common: bool, source: str, lineno: int) -> TracepointField:
    decl = m.group("decl").strip()
    offset, size = int(m.group("offset")), int(m.group("size"))
    signed = m.group("signed") not in (None, "0")
    data_loc = rel_loc = False
    if decl.startswith("__data_loc "):
        data_loc, decl = True, decl[len("__data_loc "):]
    elif decl.startswith("__rel_loc "):
        rel_loc, decl = True, decl[len("__rel_loc "):]
    array_len = 0
    am = _ARRAY_RE.match(decl)
    if am:
        type_, name = am.group("type").strip(), am.group("name")
        n = am.group("len").strip()
        if not (data_loc or rel_loc):
            try:
                array_len = int(n, 0) if n else 0
            except ValueError:
                # a symbolic length (TASK_COMM_LEN): infer from the size of char arrays
                array_len = size if type_.split()[-1] == "char" else 0
    else:
        # "__data_loc char[] name" puts [] on the type
        parts = decl.replace("[]", " ").split()
        if not parts:
            raise errors.FormatError(f"{source}:{lineno}: empty field declaration")
        type_, name = " ".join(parts[:-1]), parts[-1]
    is_common = common and name.startswith("common_")
    return TracepointField(name, type_, offset, size, signed, array_len, data_loc, rel_loc, is_common)


def read_format(system: str, name: str, tracefs: str | None = None) -> TracepointFormat:
    """Read and parse ``<tracefs>/events/<system>/<name>/format``."""
    if tracefs is None:
        from ..events.tracepoints import find_tracefs

        tracefs = find_tracefs() or "/sys/kernel/tracing"
    path = os.path.join(tracefs, "events", system, name, "format")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as err:
        raise errors.PmuscopeError(
            f"cannot read the tracepoint format {path}: {os.strerror(err.errno or 0)}; "
            "tracefs must be mounted and readable (root, or mount -o mode=755)",
            errno=err.errno,
        ) from err
    return parse_format(text, system=system, source=path)


def format_for_id(tp_id: int, tracefs: str | None = None) -> TracepointFormat | None:
    """The format of the tracepoint whose ``id`` (attr.config) is ``tp_id``, or None."""
    path = _id_path(tracefs).get(int(tp_id))
    if path is None:
        return None
    system, name = path
    return read_format(system, name, tracefs)


def _id_path(tracefs: str | None) -> dict[int, tuple[str, str]]:
    from ..events.tracepoints import events_of, find_tracefs, subsystems, tracepoint_id

    tracefs = tracefs or find_tracefs() or "/sys/kernel/tracing"
    out = {}
    for s in subsystems(tracefs):
        for e in events_of(tracefs, s):
            i = tracepoint_id(tracefs, s, e)
            if i is not None:
                out[i] = (s, e)
    return out


def tracing_data(events: list[tuple[str, str]], tracefs: str | None = None) -> bytes:
    """The ``HEADER_TRACING_DATA`` payload (format version 0.6) for the given
    ``(system, name)`` tracepoints: magic, endianness, long size, page size,
    ``header_page``/``header_event``, no ftrace formats, the event formats per
    system, empty kallsyms/printk/saved_cmdlines (``tracing_data_get`` in
    tools/perf/util/trace-event-info.c; read by ``trace_report``)."""
    if tracefs is None:
        from ..events.tracepoints import find_tracefs

        tracefs = find_tracefs() or "/sys/kernel/tracing"

    def content(rel: str) -> bytes:
        path = os.path.join(tracefs, rel)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as err:
            raise errors.PmuscopeError(f"cannot read {path}: {os.strerror(err.errno or 0)}", errno=err.errno) from err

    out = [bytes([23, 8, 68]) + b"tracing", b"0.6\0", bytes([0 if struct.pack("=I", 1)[0] == 1 else 1]),
           bytes([struct.calcsize("l")]), struct.pack("<I", os.sysconf("SC_PAGESIZE"))]
    for hdr in ("header_page", "header_event"):
        data = content(os.path.join("events", hdr))
        out.append(hdr.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
    out.append(struct.pack("<I", 0))  # ftrace event formats
    by_system: dict[str, list[str]] = {}
    for system, name in events:
        lst = by_system.setdefault(system, [])
        if name not in lst:
            lst.append(name)
    out.append(struct.pack("<I", len(by_system)))
    for system, names in by_system.items():
        out.append(system.encode() + b"\0" + struct.pack("<I", len(names)))
        for name in names:
            data = content(os.path.join("events", system, name, "format"))
            out.append(struct.pack("<Q", len(data)) + data)
    out.append(struct.pack("<I", 0))  # kallsyms
    out.append(struct.pack("<I", 0))  # printk formats
    out.append(struct.pack("<Q", 0))  # saved cmdlines (0.6)
    return b"".join(out)


def parse_tracing_data(blob: bytes | memoryview, *, source: str = "TRACING_DATA") -> dict[int, TracepointFormat]:
    """The event formats inside a ``HEADER_TRACING_DATA`` payload (what
    ``perf record`` stores for tracepoint events, and what :func:`tracing_data`
    writes), by tracepoint id — so a perf.data file's RAW payloads decode
    without the recording machine's tracefs (``trace_report`` in
    tools/perf/util/trace-event-read.c)."""
    buf = bytes(blob)
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(buf):
            raise errors.FormatError(f"{source}: truncated at byte {pos}: expected {n} bytes of {what}", offset=pos)
        out = buf[pos : pos + n]
        pos += n
        return out

    def cstr(what: str) -> str:
        nonlocal pos
        end = buf.find(b"\0", pos)
        if end < 0:
            raise errors.FormatError(f"{source}: unterminated {what} at byte {pos}", offset=pos)
        out = buf[pos:end].decode("utf-8", "replace")
        pos = end + 1
        return out

    if take(10, "magic") != bytes([23, 8, 68]) + b"tracing":
        raise errors.FormatError(f"{source}: bad magic, expected \\x17\\x08Dtracing", offset=0)
    version = cstr("version")
    endian = take(1, "endianness")[0]
    e = ">" if endian else "<"
    take(1, "long size")
    take(4, "page size")
    for hdr in ("header_page", "header_event"):
        name = cstr(f"{hdr} name")
        if name != hdr:
            raise errors.FormatError(f"{source}: expected {hdr!r} at byte {pos}, found {name!r}", offset=pos)
        (n,) = struct.unpack(e + "Q", take(8, f"{hdr} size"))
        take(n, hdr)
    formats: dict[int, TracepointFormat] = {}
    (count,) = struct.unpack(e + "I", take(4, "ftrace format count"))
    for _ in range(count):
        (n,) = struct.unpack(e + "Q", take(8, "ftrace format size"))
        fmt = parse_format(take(n, "ftrace format").decode("utf-8", "replace"), system="ftrace", source=source)
        formats[fmt.id] = fmt
    (nsys,) = struct.unpack(e + "I", take(4, "system count"))
    for _ in range(nsys):
        system = cstr("system name")
        (count,) = struct.unpack(e + "I", take(4, f"{system} event count"))
        for _ in range(count):
            (n,) = struct.unpack(e + "Q", take(8, "event format size"))
            fmt = parse_format(take(n, "event format").decode("utf-8", "replace"), system=system, source=source)
            formats[fmt.id] = fmt
    del version  # kallsyms, printk formats and saved cmdlines follow; not needed to decode payloads
    return formats


class TracepointDecoder:
    """Decodes the RAW payloads of a session's tracepoint events, batch by batch.

    ``attrs`` is an :class:`~pmuscope.records.AttrTable` (or a list of
    ``perf_event_attr``); formats come from ``formats`` (e.g.
    :func:`parse_tracing_data` of a perf.data file's TRACING_DATA feature)
    and otherwise from this machine's tracefs, looked up by ``attr.config``.
    """

    def __init__(self, attrs, formats: dict[int, TracepointFormat] | None = None, tracefs: str | None = None) -> None:
        from ..kernel import abi

        entries = getattr(attrs, "entries", None)
        attr_list = [getattr(en, "attr", en) for en in entries] if entries is not None else list(attrs)
        self.formats: dict[int, TracepointFormat] = {}
        for i, attr in enumerate(attr_list):
            if attr.type != abi.PERF_TYPE_TRACEPOINT:
                continue
            fmt = (formats or {}).get(int(attr.config))
            if fmt is None:
                fmt = format_for_id(int(attr.config), tracefs)
            if fmt is not None:
                self.formats[i] = fmt

    def fields(self, batch) -> dict[int, tuple[np.ndarray, dict[str, np.ndarray]]]:
        """``{attr_index: (rows, columns)}`` for the tracepoint samples of a
        :class:`~pmuscope.records.SampleBatch`: ``rows`` indexes the batch,
        ``columns`` maps field name -> array (see :meth:`TracepointFormat.decode_batch`)."""
        out = {}
        if batch.raw is None:
            return out
        for i, fmt in self.formats.items():
            rows = np.flatnonzero(batch.attr_index == i)
            if not len(rows):
                continue
            offs = batch.raw_offsets
            # gather the selected payloads into one flat buffer with new offsets
            idx, new_offs = ragged_index(offs[rows], offs[rows + 1] - offs[rows])
            flat = np.asarray(batch.raw)[idx]
            out[i] = (rows, fmt.decode_batch(flat, new_offs))
        return out
