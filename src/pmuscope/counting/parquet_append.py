"""A Parquet file that is whole after every row group: durable time series.

pyarrow writes the footer (the FileMetaData that locates every row group) only
when its writer closes, so a killed run leaves a file no reader opens. Here each
row group is written by pyarrow as a small complete file in memory; its row
groups are moved into the real file over the previous footer, and a new footer
listing every row group so far follows, in one ``pwrite``. Between appends the
file on disk is always a valid Parquet file (``pyarrow.parquet.read_table``
reads it); a kill can only lose the row group being appended.

The footer is Thrift's compact protocol (parquet-format ``parquet.thrift``);
only the file offsets inside the moved row groups change: ``RowGroup.file_offset``
(5), ``ColumnChunk.file_offset`` (2), ``offset_index_offset`` (4),
``column_index_offset`` (6), and ``ColumnMetaData`` ``data_page_offset`` (9),
``index_page_offset`` (10), ``dictionary_page_offset`` (11),
``bloom_filter_offset`` (14). Page indexes and bloom filters are not written.
"""

from __future__ import annotations

import os
import struct

from ..errors import FormatError

MAGIC = b"PAR1"

# Thrift compact protocol types
_STOP, _TRUE, _FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(buf):
            raise FormatError("Parquet footer: truncated varint")
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7


def _put_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zz(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _put_zz(n: int) -> bytes:
    return _put_varint((n << 1) ^ (n >> 63))


def _read_value(buf: bytes, pos: int, t: int):
    if t in (_TRUE, _FALSE):  # a bool inside a container: one byte
        return buf[pos] == 1, pos + 1
    if t == _I8:
        return struct.unpack_from("b", buf, pos)[0], pos + 1
    if t in (_I16, _I32, _I64):
        v, pos = _varint(buf, pos)
        return _zz(v), pos
    if t == _DOUBLE:
        return bytes(buf[pos:pos + 8]), pos + 8
    if t == _BINARY:
        n, pos = _varint(buf, pos)
        return bytes(buf[pos:pos + n]), pos + n
    if t in (_LIST, _SET):
        h = buf[pos]
        pos += 1
        n, et = h >> 4, h & 0x0F
        if n == 15:
            n, pos = _varint(buf, pos)
        items = []
        for _ in range(n):
            v, pos = _read_value(buf, pos, et)
            items.append(v)
        return (et, items), pos
    if t == _MAP:
        n, pos = _varint(buf, pos)
        if not n:
            return (0, 0, []), pos
        kv = buf[pos]
        pos += 1
        items = []
        for _ in range(n):
            k, pos = _read_value(buf, pos, kv >> 4)
            v, pos = _read_value(buf, pos, kv & 0x0F)
            items.append((k, v))
        return (kv >> 4, kv & 0x0F, items), pos
    if t == _STRUCT:
        return _read_struct(buf, pos)
    raise FormatError(f"Parquet footer: unknown Thrift type {t}")


def _read_struct(buf: bytes, pos: int) -> tuple[list, int]:
    fields = []
    fid = 0
    while True:
        h = buf[pos]
        pos += 1
        if h == _STOP:
            return fields, pos
        t, delta = h & 0x0F, h >> 4
        if delta:
            fid += delta
        else:
            v, pos = _varint(buf, pos)
            fid = _zz(v)
        if t in (_TRUE, _FALSE):
            fields.append([fid, t, t == _TRUE])
            continue
        v, pos = _read_value(buf, pos, t)
        fields.append([fid, t, v])


def _write_value(out: bytearray, t: int, v) -> None:
    if t in (_TRUE, _FALSE):
        out.append(1 if v else 2)
    elif t == _I8:
        out += struct.pack("b", v)
    elif t in (_I16, _I32, _I64):
        out += _put_zz(v)
    elif t == _DOUBLE:
        out += v
    elif t == _BINARY:
        out += _put_varint(len(v)) + v
    elif t in (_LIST, _SET):
        et, items = v
        if len(items) < 15:
            out.append(len(items) << 4 | et)
        else:
            out.append(0xF0 | et)
            out += _put_varint(len(items))
        for item in items:
            if et == _STRUCT and isinstance(item, (bytes, bytearray)):
                out += item  # already encoded
            else:
                _write_value(out, et, item)
    elif t == _MAP:
        kt, vt, items = v
        out += _put_varint(len(items))
        if items:
            out.append(kt << 4 | vt)
            for k, val in items:
                _write_value(out, kt, k)
                _write_value(out, vt, val)
    elif t == _STRUCT:
        _write_struct(out, v)
    else:
        raise ValueError(f"Thrift type {t}")


def _write_struct(out: bytearray, fields: list) -> None:
    last = 0
    for fid, t, v in fields:
        ct = (_TRUE if v else _FALSE) if t in (_TRUE, _FALSE) else t
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | ct)
        else:
            out.append(ct)
            out += _put_zz(fid)
        last = fid
        if t not in (_TRUE, _FALSE):
            _write_value(out, t, v)
    out.append(_STOP)


def _field(fields: list, fid: int):
    for f in fields:
        if f[0] == fid:
            return f
    return None


def _shift(fields: list, fids: tuple[int, ...], by: int) -> None:
    for f in fields:
        if f[0] in fids and f[1] == _I64:
            f[2] += by


def split(data: bytes) -> tuple[bytes, list]:
    """A whole Parquet file -> (the bytes between the magics and the footer,
    the decoded FileMetaData)."""
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise FormatError("not a Parquet file (no PAR1 magic at both ends)")
    (flen,) = struct.unpack_from("<I", data, len(data) - 8)
    start = len(data) - 8 - flen
    if start < 4:
        raise FormatError("Parquet footer length runs past the start of the file")
    meta, _ = _read_struct(data, start)
    return data[4:start], meta


class ParquetAppender:
    """Keeps the Parquet file open on ``fd`` whole after each :meth:`append`.

    ``first`` is a complete Parquet file (typically the schema with no rows),
    written at once; ``append(segment)`` adds the row groups of another
    complete Parquet file with the same schema."""

    def __init__(self, fd: int, first: bytes) -> None:
        self.fd = fd
        data, meta = split(first)
        self._template = [f for f in meta if f[0] not in (3, 4)]
        self.num_rows = 0
        self._groups: list[bytes] = []
        self.end = 4  # where the next row group goes (after PAR1)
        self._footer_blob = b""
        self._add(data, meta)
        self._pwrite(MAGIC, 0)
        self._commit(data)

    @property
    def row_groups(self) -> int:
        return len(self._groups)

    def _add(self, data: bytes, meta: list) -> None:
        rows = _field(meta, 3)
        groups = _field(meta, 4)
        by = self.end - 4
        for rg in (groups[2][1] if groups else []):
            n = _field(rg, 3)
            if n is not None and n[2] == 0:
                continue  # the empty row group of a schema-only file
            _shift(rg, (5,), by)
            cols = _field(rg, 1)
            for cc in (cols[2][1] if cols else []):
                _shift(cc, (2, 4, 6), by)
                md = _field(cc, 3)
                if md is not None:
                    _shift(md[2], (9, 10, 11, 14), by)
            ordinal = _field(rg, 7)
            if ordinal is not None:
                ordinal[2] = len(self._groups)
            enc = bytearray()
            _write_struct(enc, rg)
            self._groups.append(bytes(enc))
        self.num_rows += rows[2] if rows else 0

    def _footer(self) -> bytes:
        fields = list(self._template) + [[3, _I64, self.num_rows], [4, _LIST, (_STRUCT, self._groups)]]
        fields.sort(key=lambda f: f[0])
        out = bytearray()
        _write_struct(out, fields)
        return bytes(out) + struct.pack("<I", len(out)) + MAGIC

    def _pwrite(self, blob: bytes, at: int) -> None:
        view = memoryview(blob)
        while view:
            n = os.pwrite(self.fd, view, at)
            view = view[n:]
            at += n

    def _commit(self, data: bytes) -> None:
        footer = self._footer()
        old_end, old_footer = self.end, self._footer_blob
        try:
            # the row groups over the old footer and the new footer, in one write
            self._pwrite(data + footer, self.end)
            self.end += len(data)
            os.ftruncate(self.fd, self.end + len(footer))
        except OSError:
            # put the previous footer back: the file stays what it was
            self.end = old_end
            try:
                os.ftruncate(self.fd, old_end)
                if old_footer:
                    self._pwrite(old_footer, old_end)
            except OSError:
                pass
            raise
        self._footer_blob = footer

    def append(self, segment: bytes) -> None:
        """Add the row groups of ``segment`` (a complete Parquet file)."""
        data, meta = split(segment)
        groups, rows = list(self._groups), self.num_rows
        self._add(data, meta)
        try:
            self._commit(data)
        except OSError:
            self._groups, self.num_rows = groups, rows
            raise
