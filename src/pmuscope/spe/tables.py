"""Load/store, branch and other tables with the columns Arm's spe-parser
(telemetry-solution ``tools/spe_parser``, ``schema.py``/``payload.py``) writes,
so its users can switch: same column names and order, same value spelling
(hex strings for addresses, ``ff`` inserted after ``0x`` for EL2 addresses,
``:``-joined event names, N1 data-source names), CSV without quoting, Parquet
gzip-compressed.

Where spe-parser has no answer (it raises on unknown data sources and on
branch or op payloads newer than its decoder) we write the closest honest
value: the decimal data-source code, newest-perf subclass names (``GCS``,
``SME``), and ``IMPDEF-<bit>`` for event bits nobody names.
"""

from __future__ import annotations

import errno
import os
from typing import Sequence

import numpy as np

from ..outfile import open_output, output_error
from ..errors import require
from .packets import COMMON_EVENTS, N1_EVENTS, is_midr_n1
from .records import SpeRecords

__all__ = ["LDST_COLS", "BRANCH_COLS", "OTHER_COLS", "SYMBOL_COLS", "spe_parser_tables", "write_tables", "TableWriter", "DATASOURCE_NAMES"]

LDST_COLS = [
    "cpu", "op", "pc", "el", "atomic", "excl", "ar", "subclass", "sve_evl", "sve_pred", "sve_sg",
    "event", "issue_lat", "total_lat", "vaddr", "xlat_lat", "paddr", "data_source", "context", "ts",
]
BRANCH_COLS = [
    "cpu", "op", "pc", "el", "condition", "indirect", "event", "issue_lat", "total_lat", "br_tgt",
    "br_tgt_lvl", "pbt", "pbt_lvl", "context", "ts",
]
OTHER_COLS = [
    "cpu", "op", "pc", "el", "subclass", "sve_evl", "sve_pred", "sve_fp", "condition", "event",
    "issue_lat", "total_lat", "context", "ts",
]
#: column -> kind: "i" int, "b" bool, "s" string (spe-parser's schema types)
COLUMN_KIND = {
    **{c: "s" for c in ("op", "pc", "subclass", "event", "vaddr", "paddr", "data_source", "context", "br_tgt", "pbt")},
    # symbol columns: strings quoted in CSV when they hold a comma (C++ argument lists)
    **{c: "q" for c in ("symbol", "dso", "data_object", "br_tgt_symbol", "br_tgt_dso")},
    **{c: "b" for c in ("atomic", "excl", "ar", "sve_pred", "sve_sg", "sve_fp", "condition", "indirect")},
    **{c: "i" for c in ("cpu", "el", "sve_evl", "issue_lat", "total_lat", "xlat_lat", "br_tgt_lvl", "pbt_lvl", "ts")},
}

#: spe-parser's ``DATASOURCE_MAP`` (Neoverse N1 encoding)
DATASOURCE_NAMES = {0: "L1D", 8: "L2D", 9: "PEER-CPU", 10: "LOCAL-CLUSTER", 11: "LL-CACHE", 12: "PEER-CLUSTER", 13: "REMOTE", 14: "DRAM"}

# SDEN885747 erratum 1912195: OTHER records (e.g. CAS) may carry memory events; spe-parser drops them
_OTHER_EXCLUDED_EVENTS = {"REMOTE-ACCESS", "LLC-REFILL", "LLC-ACCESS", "TLB-REFILL", "TLB-ACCESS", "L1D-REFILL", "L1D-ACCESS"}

TABLE_COLS = {"ldst": LDST_COLS, "br": BRANCH_COLS, "other": OTHER_COLS}
#: columns ``--symbols`` appends after spe-parser's (see :mod:`pmuscope.spe.symbols`)
SYMBOL_COLS = {
    "ldst": ["symbol", "dso", "data_object"],
    "br": ["symbol", "dso", "br_tgt_symbol", "br_tgt_dso"],
    "other": ["symbol", "dso"],
}


def _event_tokens(payload: int, n1: bool) -> list[str]:
    names = [name for bit, name in COMMON_EVENTS if payload >> bit & 1]
    known = sum(1 << b for b, _ in COMMON_EVENTS)
    rest = payload & ~known
    if n1:
        for bit, name in N1_EVENTS:
            if rest >> bit & 1:
                names.append(name)
                rest &= ~(1 << bit)
    names.extend(f"IMPDEF-{b}" for b in range(64) if rest >> b & 1)
    return names


class _EventFormatter:
    """Event payload -> spe-parser's event string, memoised (few distinct values)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, bool, int], str] = {}

    def __call__(self, payload: int, other: bool, midr: int) -> str:
        key = (payload, other, midr)
        s = self.cache.get(key)
        if s is None:
            toks = _event_tokens(payload, bool(midr) and is_midr_n1(midr))
            if other:
                toks = sorted(set(toks) - _OTHER_EXCLUDED_EVENTS)
            s = self.cache[key] = ":".join(toks)
        return s


def _hex(values: np.ndarray, has: np.ndarray, el2: np.ndarray | None = None) -> list[str]:
    out = []
    el2l = el2.tolist() if el2 is not None else None
    for i, (v, h) in enumerate(zip(values.tolist(), has.tolist())):
        if not h:
            out.append("")
        elif el2l is not None and el2l[i]:
            out.append(f"0xff{v:x}")  # spe-parser's EL2 fix: insert "ff" after "0x"
        else:
            out.append(f"0x{v:x}")
    return out


def _sve_evl(v: np.ndarray) -> np.ndarray:
    return (32 << ((v.astype(np.int64) >> 4) & 7))


def _sme_ets(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int64)
    return 128 << ((((v >> 4) & 7) << 1) | ((v >> 2) & 1))


def spe_parser_tables(recs: SpeRecords, which: Sequence[str] = ("ldst", "br", "other"),
                      symbols: dict[str, np.ndarray] | None = None) -> dict[str, dict[str, list | np.ndarray]]:
    """Split records into spe-parser's tables: ``{"ldst"|"br"|"other": {column: values}}``.

    Records without an operation-type packet belong to no table (spe-parser
    logs them as invalid and skips them). ``symbols`` (per-record columns from
    :meth:`pmuscope.spe.symbols.SpeSymbolizer.columns`) appends
    :data:`SYMBOL_COLS` after spe-parser's columns.
    """
    M56 = np.uint64((1 << 56) - 1)
    evfmt = _EventFormatter()
    out: dict[str, dict[str, list | np.ndarray]] = {}
    col = recs.columns
    has = recs.present
    for name, cls in (("ldst", 1), ("br", 2), ("other", 0)):
        if name not in which:
            continue
        sel = np.flatnonzero(recs.op_class == cls)
        v = col["op_payload"][sel]
        pc_raw = col["pc_raw"][sel]
        el = ((pc_raw >> np.uint64(61)) & np.uint64(3)).astype(np.int64)
        el = np.where(has["pc_raw"][sel], el, 0)
        t: dict[str, list | np.ndarray] = {
            "cpu": recs.cpu[sel].astype(np.int64),
            "pc": _hex(pc_raw & M56, has["pc_raw"][sel], el == 2),
            "el": el,
            "issue_lat": col["issue_lat"][sel].astype(np.int64),
            "total_lat": col["tot_lat"][sel].astype(np.int64),
            "context": _hex(col["context"][sel], has["context"][sel]),
            "ts": col["timestamp"][sel].astype(np.uint64),
        }
        ev = col["events"][sel].tolist()
        hev = has["events"][sel].tolist()
        midr = recs.midr[sel].tolist()
        t["event"] = [evfmt(e, cls == 0, m) if h else "" for e, h, m in zip(ev, hev, midr)]
        if cls == 1:
            t["op"] = np.where(v & 1, "ST", "LD").tolist()
            extended = (v & 0xE2) == 0x02
            sub = v & 0xFE
            sve = ~extended & np.isin(sub, [0x04, 0x00, 0x10, 0x30, 0x14, 0x20], invert=True) & (v != 0x25) & ((v & 0x0A) == 0x08)
            gcs = ~extended & ~sve & ((v & 0xFA) == 0x40)
            t["atomic"] = extended & ((v & 0x04) != 0)
            t["excl"] = extended & ((v & 0x08) != 0)
            t["ar"] = extended & ((v & 0x10) != 0)
            names = {0x04: "SIMD-FP", 0x00: "GP-REG", 0x10: "UNSPEC-REG", 0x30: "NV-SYSREG", 0x14: "MTE-TAG", 0x20: "MEMCPY"}
            subclass = []
            for x, e, s, g in zip(v.tolist(), extended.tolist(), sve.tolist(), gcs.tolist()):
                if e:
                    subclass.append("")
                elif s:
                    subclass.append("SVE")
                elif g:
                    subclass.append("GCS")
                elif x == 0x25:
                    subclass.append("MEMSET")
                else:
                    subclass.append(names.get(x & 0xFE, ""))
            t["subclass"] = subclass
            t["sve_evl"] = np.where(sve, _sve_evl(v), 0)
            t["sve_pred"] = sve & ((v & 0x04) != 0)
            t["sve_sg"] = sve & ((v & 0x80) != 0)
            el2 = el == 2
            t["vaddr"] = _hex(col["va_raw"][sel], has["va_raw"][sel], el2)
            t["xlat_lat"] = col["xlat_lat"][sel].astype(np.int64)
            t["paddr"] = _hex(col["pa_raw"][sel] & M56, has["pa_raw"][sel])
            ds = col["data_source"][sel].tolist()
            hds = has["data_source"][sel].tolist()
            t["data_source"] = [DATASOURCE_NAMES.get(x, str(x)) if h else "" for x, h in zip(ds, hds)]
        elif cls == 2:
            t["op"] = ["B"] * len(sel)
            t["condition"] = (v & 1) != 0
            t["indirect"] = (v & 2) != 0
            tgt = col["tgt_raw"][sel]
            tgt_el = np.where(has["tgt_raw"][sel], (tgt >> np.uint64(61)) & np.uint64(3), 0).astype(np.int64)
            pbt = col["pbt_raw"][sel]
            pbt_el = np.where(has["pbt_raw"][sel], (pbt >> np.uint64(61)) & np.uint64(3), 0).astype(np.int64)
            t["br_tgt"] = _hex(tgt & M56, has["tgt_raw"][sel], tgt_el == 2)
            t["br_tgt_lvl"] = tgt_el
            t["pbt"] = _hex(pbt & M56, has["pbt_raw"][sel], pbt_el == 2)
            t["pbt_lvl"] = pbt_el
        else:
            t["op"] = ["OTHER"] * len(sel)
            sve = (v & 0x89) == 0x08
            sme = (v & 0x89) == 0x88
            other = (v & 0xF8) == 0
            t["subclass"] = np.select([sve, sme, other], ["SVE", "SME", "OTHER"], "").tolist()
            t["sve_evl"] = np.where(sve, _sve_evl(v), np.where(sme, _sme_ets(v), 0))
            t["sve_pred"] = sve & ((v & 0x04) != 0)
            t["sve_fp"] = (sve | sme) & ((v & 0x02) != 0)
            t["condition"] = other & ((v & 0x01) != 0)
        out[name] = {c: t[c] for c in TABLE_COLS[name]}
        if symbols is not None:
            for c in SYMBOL_COLS[name]:
                out[name][c] = symbols[c][sel].tolist()
    return out


def _csv_quote(x: str) -> str:
    if "," in x or '"' in x or "\n" in x:
        return '"' + x.replace('"', '""') + '"'
    return x


def _csv_cell(kind: str):
    if kind == "b":
        return lambda x: "true" if x else "false"
    if kind == "q":
        return _csv_quote
    return str


def _csv_rows(table: dict[str, list | np.ndarray], cols: Sequence[str]) -> str:
    series = []
    for c in cols:
        vals = table[c]
        vals = vals.tolist() if isinstance(vals, np.ndarray) else vals
        fmt = _csv_cell(COLUMN_KIND[c])
        series.append([fmt(x) for x in vals])
    return "".join(",".join(row) + "\n" for row in zip(*series))


def _arrow_table(table: dict[str, list | np.ndarray], cols: Sequence[str]):
    pa = require("pyarrow", "parquet", "Parquet output")
    arrays = []
    for c in cols:
        kind = COLUMN_KIND[c]
        vals = table[c]
        if kind == "i":
            arr = np.asarray(vals)
            if arr.dtype == np.uint64 and (len(arr) == 0 or int(arr.max()) < 2**63):
                arr = arr.astype(np.int64)
            arrays.append(pa.array(arr))
        elif kind == "b":
            arrays.append(pa.array(np.asarray(vals, np.bool_)))
        else:
            arrays.append(pa.array(list(vals), pa.string()))
    return pa.table(arrays, names=list(cols))


class TableWriter:
    """Writes ``<prefix>-ldst``, ``<prefix>-br`` and ``<prefix>-other`` files
    batch by batch (CSV as spe-parser writes it: quoted header, unquoted
    values, ``true``/``false``; Parquet gzip-compressed). Files are created at
    their first row, so tables without rows are skipped, as spe-parser does.
    With ``symbols=True`` every :meth:`write` takes the per-record symbol
    columns and the files get :data:`SYMBOL_COLS` after spe-parser's columns.
    """

    def __init__(self, outdir: str, prefix: str = "spe", fmt: str = "csv", which: Sequence[str] = ("ldst", "br", "other"),
                 symbols: bool = False) -> None:
        if fmt not in ("csv", "parquet"):
            raise ValueError(f"unknown SPE table format {fmt!r}: use csv or parquet")
        if fmt == "parquet":
            require("pyarrow.parquet", "parquet", "Parquet output")
        try:
            os.mkdir(outdir)  # OUTDIR itself, in a folder that exists
        except FileExistsError:
            if not os.path.isdir(outdir):
                raise output_error(NotADirectoryError(errno.ENOTDIR, "it exists and is not a folder"), outdir) from None
        except OSError as err:
            raise output_error(err, outdir) from None
        self.outdir, self.prefix, self.fmt, self.which = outdir, prefix, fmt, tuple(which)
        self._open: dict[str, object] = {}
        self.written: dict[str, str] = {}
        self.rows: dict[str, int] = {name: 0 for name in self.which}
        self.symbols = symbols

    def write(self, recs: SpeRecords, symbols: dict[str, np.ndarray] | None = None) -> None:
        if self.symbols and symbols is None:
            raise ValueError("TableWriter(symbols=True).write needs the records' symbol columns")
        for name, table in spe_parser_tables(recs, self.which, symbols if self.symbols else None).items():
            cols = TABLE_COLS[name] + SYMBOL_COLS[name] if self.symbols else TABLE_COLS[name]
            nrows = len(table["cpu"])
            if not nrows:
                continue
            self.rows[name] += nrows
            path = os.path.join(self.outdir, f"{self.prefix}-{name}.{self.fmt}")
            if self.fmt == "csv":
                fh = self._open.get(name)
                if fh is None:
                    fh = self._open[name] = open_output(path, "w", newline="")
                    fh.write(",".join(f'"{c}"' for c in cols) + "\n")
                fh.write(_csv_rows(table, cols))
            else:
                pq = require("pyarrow.parquet", "parquet", "Parquet output")
                at = _arrow_table(table, cols)
                pair = self._open.get(name)
                if pair is None:
                    out = open_output(path, "wb")
                    w = out.guard(pq.ParquetWriter, out.file, at.schema, compression="gzip")
                    pair = self._open[name] = (out, w)
                out, w = pair
                out.guard(w.write_table, at.cast(w.schema))
            self.written[name] = path

    def close(self) -> dict[str, str]:
        """Finish the files; returns ``{table: path}`` of the files written."""
        try:
            for obj in self._open.values():
                if isinstance(obj, tuple):
                    out, w = obj
                    out.guard(w.close)
                    out.close()
                else:
                    obj.close()
        except BaseException:
            self.abort()
            raise
        self._open.clear()
        return dict(self.written)

    def abort(self) -> None:
        """After an error: remove the unfinished tables."""
        for obj in self._open.values():
            (obj[0] if isinstance(obj, tuple) else obj).abort()
        self._open.clear()
        self.written.clear()

    def __enter__(self) -> "TableWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_tables(recs: SpeRecords, outdir: str, prefix: str = "spe", fmt: str = "csv", which: Sequence[str] = ("ldst", "br", "other")) -> dict[str, str]:
    """Write ``<prefix>-ldst``, ``<prefix>-br`` and ``<prefix>-other`` files
    (tables without rows are skipped, as spe-parser does). Returns
    ``{table: path}`` of the files written."""
    with TableWriter(outdir, prefix, fmt, which) as w:
        w.write(recs)
    return w.close()
