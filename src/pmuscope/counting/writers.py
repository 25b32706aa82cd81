"""Streaming writers for columnar time series: CSV, JSON lines and Parquet.

A writer receives batches — ``{column: numpy array}`` with every array the
same length — and writes them as they come, so a run of hours holds at most
one row group in memory. CSV and JSON lines need only the standard library;
Parquet needs the ``parquet`` extra (pyarrow).

Column kinds (the ``schema``): ``"i64"``, ``"i32"``, ``"f64"``, ``"bool"``,
``"str"``. NaN floats are written as an empty CSV field, JSON ``null`` and a
Parquet null.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from typing import IO, Mapping, Sequence

import numpy as np

from ..errors import PmuscopeError, require
from ..outfile import open_output

__all__ = ["Writer", "CsvWriter", "JsonLinesWriter", "ParquetWriter", "open_writer", "FORMATS", "format_for_path"]

FORMATS = ("parquet", "csv", "jsonl")
#: a Parquet row group is closed (and the file made whole) at least this often
DEFAULT_FLUSH_SECONDS = 5.0
_KINDS = {"i64", "i32", "f64", "bool", "str"}


def format_for_path(path: str, default: str = "csv") -> str:
    """The format implied by a file name (``.parquet``/``.pq``, ``.csv``,
    ``.jsonl``/``.ndjson``/``.json``), else ``default``."""
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith(".csv"):
        return "csv"
    return default


class Writer:
    """Base class: ``write(batch)`` then ``close()``; usable with ``with``."""

    def __init__(self, schema: Sequence[tuple[str, str]], metadata: Mapping[str, str] | None = None) -> None:
        for name, kind in schema:
            if kind not in _KINDS:
                raise PmuscopeError(f"column {name!r} has unknown kind {kind!r}; kinds: {', '.join(sorted(_KINDS))}")
        self.schema = list(schema)
        self.columns = [name for name, _ in self.schema]
        self.metadata = dict(metadata or {})
        self.rows_written = 0

    def write(self, batch: Mapping[str, np.ndarray]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        """After an error: leave what is whole and stop."""
        self.close()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _length(self, batch: Mapping[str, np.ndarray]) -> int:
        missing = [c for c in self.columns if c not in batch]
        if missing:
            raise PmuscopeError(f"batch lacks columns {missing}")
        lengths = {len(batch[c]) for c in self.columns}
        if len(lengths) > 1:
            raise PmuscopeError(f"batch columns differ in length: {sorted(lengths)}")
        return lengths.pop() if lengths else 0


def _open_text(path: str | IO[str]) -> tuple[IO[str], bool]:
    if not isinstance(path, str):
        return path, False
    if path == "-":
        return sys.stdout, False
    # written in place (not renamed at the end): each batch is flushed as it
    # comes, so a killed run keeps every batch but the one in flight, and an
    # error (a full disk) cuts the file back to the last whole batch
    return open_output(path, "w", atomic=False, newline=""), True


def _format_float(x: float) -> str:
    if x != x:  # NaN
        return ""
    s = repr(x)
    return s[:-2] if s.endswith(".0") else s


def _csv_quote(s: str) -> str:
    if any(c in s for c in ',"\n\r'):
        return '"' + s.replace('"', '""') + '"'
    return s


def _column_strings(arr: np.ndarray, kind: str) -> list[str]:
    """A column's CSV fields, value by value (the reference of :func:`_csv_column`)."""
    if kind in ("i64", "i32"):
        return [str(v) for v in arr.tolist()]
    if kind == "bool":
        return ["1" if v else "0" for v in arr.tolist()]
    if kind == "f64":
        return [_format_float(v) for v in arr.tolist()]
    return [_csv_quote(str(v)) for v in arr.tolist()]


# --------------------------------------------------------------------------- batch formatting
#
# A monitor writes thousands of rows a second; formatting them value by value
# was most of its consumer thread. Here a batch becomes one %-template per
# row filled by C: integers go in as ``%d``, floats whose repr is the field as
# ``%r``, whole floats (counts) as ``%d`` of their int; a column is converted
# once per run of equal values (a timestamp repeats for every CPU of an
# interval, context columns for many intervals), and a column with one value
# is written into the template. Every field is the string the per-value
# functions above give for it (tests compare the two on many batches).


def _runs(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(first index, length) of each run of bitwise-equal values, or None
    where runs do not pay (object arrays, short or unrepeating columns)."""
    n = len(arr)
    if n < 2 or arr.dtype.kind not in "biuf" or arr.dtype.itemsize not in (1, 2, 4, 8):
        return None
    bits = np.ascontiguousarray(arr).view(f"u{arr.dtype.itemsize}")
    starts = np.flatnonzero(np.concatenate(([True], bits[1:] != bits[:-1])))
    if len(starts) > n // 2 and len(starts) > 1:
        return None
    return starts, np.diff(np.append(starts, n))


def _values(arr: np.ndarray, kind: str, as_json: bool) -> tuple[str, list]:
    """(conversion, values): the fields of ``arr`` are ``conversion % value``."""
    dk = arr.dtype.kind
    if kind in ("i64", "i32") and dk in "iu":
        return "%d", arr.tolist()
    if kind == "bool" and dk == "b":
        if as_json:
            return "%s", [("false", "true")[v] for v in arr.tolist()]
        return "%d", arr.view(np.uint8).tolist()
    if kind == "f64" and dk == "f" and arr.dtype.itemsize == 8:
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(arr)
            if finite.all():
                if as_json:
                    return "%r", arr.tolist()  # json writes a float as its repr
                # repr ends in ".0", which CSV drops, exactly for whole values below 1e16
                whole = (arr == np.trunc(arr)) & (np.abs(arr) < 1e16)
                if not whole.any():
                    return "%r", arr.tolist()
                if whole.all() and not np.signbit(arr[arr == 0]).any():  # -0.0 is written "-0"
                    return "%d", arr.astype(np.int64).tolist()
    if kind == "str":
        strs = list(map(str, arr.tolist()))
        quote = _json_str if as_json else _csv_quote
        fmt = {s: quote(s) for s in dict.fromkeys(strs)}
        return "%s", [fmt[s] for s in strs]
    if as_json:
        return "%s", [_json_field(v) for v in _json_values(arr, kind)]
    return "%s", _column_strings(arr, kind)


def _column(arr: np.ndarray, kind: str, as_json: bool = False) -> tuple[str, list | None]:
    """A column as (its one field, None) when every row has the same field,
    else (conversion, a value per row)."""
    runs = _runs(arr)
    if runs is None:
        conv, values = _values(arr, kind, as_json)
        if len(values) > 1 and values.count(values[0]) == len(values) and conv == "%s":
            return values[0], None
        return conv, values
    starts, lengths = runs
    conv, heads = _values(arr[starts], kind, as_json)
    if len(heads) == 1:
        return conv % heads[0], None
    obj = np.empty(len(heads), dtype=object)
    obj[:] = heads
    return conv, np.repeat(obj, lengths).tolist()


_json_str = json.encoder.encode_basestring_ascii  # what JSONEncoder (ensure_ascii) writes for a str


def _json_field(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, float):
        return float.__repr__(v)
    if isinstance(v, int):
        return int.__repr__(v)
    return json.dumps(v, separators=(",", ":"), allow_nan=False)


def _rows_text(n: int, parts: list[tuple[str, bool]], columns: list[list]) -> str:
    """n lines from a template: ``parts`` are (text, is_conversion) pieces,
    one conversion per list of ``columns``. The lines are made by one ``%``
    over many rows at a time (a per-row ``%`` parses its template every time)."""
    tmpl = "".join(t if conv else t.replace("%", "%%") for t, conv in parts) + "\n"
    m = len(columns)
    if not m:
        return (tmpl % ()) * n
    out = []
    step = 4096
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        flat: list = [None] * ((hi - lo) * m)
        for j, values in enumerate(columns):
            flat[j::m] = values[lo:hi]
        out.append((tmpl * (hi - lo)) % tuple(flat))
    return "".join(out)


def csv_rows(schema: Sequence[tuple[str, str]], batch: Mapping[str, np.ndarray], n: int) -> str:
    """The CSV lines of a batch of ``n`` rows (each ending in a newline)."""
    parts: list[tuple[str, bool]] = []
    columns = []
    for i, (name, kind) in enumerate(schema):
        if i:
            parts.append((",", False))
        text, values = _column(np.asarray(batch[name]), kind)
        parts.append((text, values is not None))
        if values is not None:
            columns.append(values)
    return _rows_text(n, parts, columns)


def csv_rows_reference(schema: Sequence[tuple[str, str]], batch: Mapping[str, np.ndarray], n: int) -> str:
    """:func:`csv_rows` value by value and row by row (the reference)."""
    cols = [_column_strings(np.asarray(batch[name]), kind) for name, kind in schema]
    return "\n".join(",".join(row) for row in zip(*cols)) + "\n"


def jsonl_rows(schema: Sequence[tuple[str, str]], batch: Mapping[str, np.ndarray], n: int) -> str:
    """The JSON lines of a batch of ``n`` rows: one object per row, keys in
    schema order, as ``json`` writes them (``separators=(",", ":")``, ASCII)."""
    parts: list[tuple[str, bool]] = []
    columns = []
    for i, (name, kind) in enumerate(schema):
        parts.append((("{" if i == 0 else ",") + _json_str(name) + ":", False))
        text, values = _column(np.asarray(batch[name]), kind, as_json=True)
        parts.append((text, values is not None))
        if values is not None:
            columns.append(values)
    parts.append(("}" if schema else "{}", False))
    return _rows_text(n, parts, columns)


def jsonl_rows_reference(schema: Sequence[tuple[str, str]], batch: Mapping[str, np.ndarray], n: int) -> str:
    """:func:`jsonl_rows` with ``json`` row by row (the reference)."""
    dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    names = [name for name, _ in schema]
    cols = [_json_values(np.asarray(batch[name]), kind) for name, kind in schema]
    out = io.StringIO()
    for row in zip(*cols):
        out.write(dumps(dict(zip(names, row))))
        out.write("\n")
    return out.getvalue()


class _TextWriter(Writer):
    """A writer of text lines to a path, ``-`` (stdout) or an open text file."""

    def __init__(self, path: str | IO[str], schema: Sequence[tuple[str, str]], metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(schema, metadata)
        self._f, self._owned = _open_text(path)

    def flush(self) -> None:
        getattr(self._f, "checkpoint", self._f.flush)()

    def close(self) -> None:
        if self._f is None:
            return
        f, self._f = self._f, None  # type: ignore[assignment]
        if self._owned:
            f.close()
        else:
            f.flush()

    def abort(self) -> None:
        """After an error: stop writing; the file keeps its whole batches."""
        f, self._f = self._f, None  # type: ignore[assignment]
        if f is not None and self._owned:
            f.abort()
        elif f is not None:
            f.flush()


class CsvWriter(_TextWriter):
    """CSV with a header line of column names (RFC 4180 quoting). Booleans are
    written ``0``/``1``; NaN as an empty field."""

    def __init__(self, path: str | IO[str], schema: Sequence[tuple[str, str]], metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(path, schema, metadata)
        self._f.write(",".join(_csv_quote(c) for c in self.columns) + "\n")
        self.flush()

    def write(self, batch: Mapping[str, np.ndarray]) -> None:
        n = self._length(batch)
        if not n:
            return
        self._f.write(csv_rows(self.schema, batch, n))
        self.rows_written += n
        self.flush()  # durable per batch


def _json_values(arr: np.ndarray, kind: str) -> list:
    values = arr.tolist()
    if kind == "f64":
        return [None if v != v or v in (math.inf, -math.inf) else v for v in values]
    if kind == "bool":
        return [bool(v) for v in values]
    if kind == "str":
        return [str(v) for v in values]
    return values


class JsonLinesWriter(_TextWriter):
    """One JSON object per row (JSON lines), keys in schema order; NaN as null."""

    def __init__(self, path: str | IO[str], schema: Sequence[tuple[str, str]], metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(path, schema, metadata)

    def write(self, batch: Mapping[str, np.ndarray]) -> None:
        n = self._length(batch)
        if not n:
            return
        self._f.write(jsonl_rows(self.schema, batch, n))
        self.rows_written += n
        self.flush()  # durable per batch


class ParquetWriter(Writer):
    """Parquet through pyarrow, durable while it is written: a row group is
    closed every ``row_group_rows`` rows or ``flush_seconds`` seconds
    (whichever comes first) and the file on disk is a whole Parquet file after
    each one (:mod:`~pmuscope.counting.parquet_append`), so a killed run keeps
    all but the last ``flush_seconds`` and ``pyarrow`` reads it. Memory holds
    at most one row group. ``metadata`` goes into the file's key-value metadata."""

    def __init__(
        self,
        path: str,
        schema: Sequence[tuple[str, str]],
        metadata: Mapping[str, str] | None = None,
        *,
        row_group_rows: int = 65536,
        compression: str = "zstd",
        flush_seconds: float = DEFAULT_FLUSH_SECONDS,
    ) -> None:
        super().__init__(schema, metadata)
        pa = require("pyarrow", "parquet", "Parquet output")
        self._pq = require("pyarrow.parquet", "parquet", "Parquet output")
        self._pa = pa
        types = {"i64": pa.int64(), "i32": pa.int32(), "f64": pa.float64(), "bool": pa.bool_(), "str": pa.dictionary(pa.int32(), pa.string())}
        self._arrow_schema = pa.schema(
            [pa.field(name, types[kind]) for name, kind in self.schema],
            metadata={k.encode(): str(v).encode() for k, v in self.metadata.items()},
        )
        self.row_group_rows = max(1, int(row_group_rows))
        self.flush_seconds = float(flush_seconds)
        self.compression = compression
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_rows = 0
        self._last_flush = time.monotonic()
        from .parquet_append import ParquetAppender

        self._out = open_output(path, "wb", atomic=False)
        self._w = self._out.guard(ParquetAppender, self._out.fileno(), self._segment(self._arrow_schema.empty_table()))
        self._out.checkpoint()

    def _segment(self, table) -> bytes:
        buf = io.BytesIO()
        self._pq.write_table(table, buf, compression=self.compression, row_group_size=max(len(table), 1))
        return buf.getvalue()

    def write(self, batch: Mapping[str, np.ndarray]) -> None:
        n = self._length(batch)
        if not n:
            return
        self._pending.append({c: np.asarray(batch[c]) for c in self.columns})
        self._pending_rows += n
        if self._pending_rows >= self.row_group_rows or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        pa = self._pa
        arrays = []
        for name, kind in self.schema:
            data = np.concatenate([b[name] for b in self._pending])
            if kind == "f64":
                arrays.append(pa.array(data.astype(np.float64), from_pandas=True))  # NaN -> null
            elif kind == "str":
                arrays.append(pa.array(data, type=pa.string()).dictionary_encode())
            else:
                arrays.append(pa.array(data, type=self._arrow_schema.field(name).type))
        segment = self._segment(pa.Table.from_arrays(arrays, schema=self._arrow_schema))
        rows = self.rows_written
        self._out.guard(self._w.append, segment)
        self._out.checkpoint()
        self.rows_written = rows + self._pending_rows
        self._pending = []
        self._pending_rows = 0

    def close(self) -> None:
        if self._w is None:
            return
        try:
            self.flush()
        finally:
            self._w = None
        self._out.close()

    def abort(self) -> None:
        if self._w is None:
            return
        self._w = None
        self._out.abort()  # cut back to the last whole file


def open_writer(
    path: str,
    schema: Sequence[tuple[str, str]],
    format: str | None = None,
    metadata: Mapping[str, str] | None = None,
    **kwargs,
) -> Writer:
    """Open the writer for ``format`` (default: from the file name, else CSV)."""
    fmt = format or format_for_path(path)
    if fmt == "csv":
        return CsvWriter(path, schema, metadata)
    if fmt == "jsonl":
        return JsonLinesWriter(path, schema, metadata)
    if fmt == "parquet":
        if path == "-":
            raise PmuscopeError("Parquet cannot be written to standard output; give a file name with -o")
        return ParquetWriter(path, schema, metadata, **kwargs)
    raise PmuscopeError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")

