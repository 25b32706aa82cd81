"""Streaming writers: CSV, JSON lines, Parquet round trips."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from pmuscope.counting import writers as w
from pmuscope.errors import MissingExtraError, PmuscopeError

SCHEMA = [("timestamp", "i64"), ("interval_ms", "f64"), ("cpu", "i32"), ("cycles", "f64"), ("late", "bool"), ("governor", "str")]


def batch(start: int, n: int) -> dict:
    return {
        "timestamp": np.arange(start, start + n, dtype=np.int64) * 1_000_000,
        "interval_ms": np.full(n, 1.0005),
        "cpu": np.arange(n, dtype=np.int32) % 2,
        "cycles": np.where(np.arange(n) % 3 == 0, np.nan, np.arange(n) * 1000.0),
        "late": np.arange(n) % 4 == 0,
        "governor": np.array(["powersave", "schedutil,x"] * (n // 2) + ["powersave"] * (n % 2), dtype=object),
    }


def test_format_for_path():
    assert w.format_for_path("a.parquet") == "parquet"
    assert w.format_for_path("a.PQ") == "parquet"
    assert w.format_for_path("a.jsonl") == "jsonl"
    assert w.format_for_path("a.ndjson") == "jsonl"
    assert w.format_for_path("a.csv") == "csv"
    assert w.format_for_path("a.dat") == "csv"


def test_csv_round_trip(tmp_path):
    path = tmp_path / "x.csv"
    with w.open_writer(str(path), SCHEMA) as out:
        out.write(batch(0, 5))
        out.write(batch(5, 4))
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 9
    assert list(rows[0]) == [c for c, _ in SCHEMA]
    assert rows[0]["cycles"] == ""  # NaN
    assert rows[1]["cycles"] == "1000"  # integral floats without ".0"
    assert rows[1]["interval_ms"] == "1.0005"
    assert rows[0]["late"] == "1" and rows[1]["late"] == "0"
    assert rows[1]["governor"] == "schedutil,x"  # quoted comma survives
    assert rows[8]["timestamp"] == str(8 * 1_000_000)


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "x.jsonl"
    with w.open_writer(str(path), SCHEMA) as out:
        out.write(batch(0, 3))
    rows = [json.loads(line) for line in open(path)]
    assert [r["cpu"] for r in rows] == [0, 1, 0]
    assert rows[0]["cycles"] is None and rows[1]["cycles"] == 1000.0
    assert rows[0]["late"] is True and rows[1]["late"] is False
    assert list(rows[0]) == [c for c, _ in SCHEMA]


def test_batch_validation(tmp_path):
    out = w.open_writer(str(tmp_path / "x.csv"), SCHEMA)
    b = batch(0, 3)
    del b["cpu"]
    with pytest.raises(PmuscopeError, match="lacks columns"):
        out.write(b)
    b = batch(0, 3)
    b["cpu"] = b["cpu"][:2]
    with pytest.raises(PmuscopeError, match="differ in length"):
        out.write(b)
    out.close()


def test_unknown_format_and_kind(tmp_path):
    with pytest.raises(PmuscopeError, match="unknown output format"):
        w.open_writer(str(tmp_path / "x"), SCHEMA, "xlsx")
    with pytest.raises(PmuscopeError, match="unknown kind"):
        w.CsvWriter(str(tmp_path / "x.csv"), [("a", "u128")])
    with pytest.raises(PmuscopeError, match="standard output"):
        w.open_writer("-", SCHEMA, "parquet")


def test_unwritable_path(tmp_path):
    with pytest.raises(PmuscopeError, match="cannot create .*x.csv: No such file or directory; the folder .* does not exist"):
        w.open_writer(str(tmp_path / "no" / "dir" / "x.csv"), SCHEMA)


def test_parquet_row_groups_and_metadata(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "x.parquet"
    out = w.open_writer(str(path), SCHEMA, metadata={"pmuscope.interval_ms": "1"}, row_group_rows=4)
    out.write(batch(0, 3))
    assert out.rows_written == 0  # buffered below one row group
    out.write(batch(3, 3))
    assert out.rows_written == 6  # flushed as one row group of 6
    out.write(batch(6, 2))
    out.close()
    f = pq.ParquetFile(path)
    assert f.metadata.num_rows == 8
    assert f.metadata.num_row_groups == 2
    assert f.schema_arrow.metadata[b"pmuscope.interval_ms"] == b"1"
    t = f.read().to_pydict()
    assert t["cycles"][0] is None and t["cycles"][1] == 1000.0
    assert t["timestamp"][7] == 7_000_000
    assert t["late"][:2] == [True, False]
    assert t["governor"][1] == "schedutil,x"


def test_parquet_missing_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingExtraError, match=r"pmuscope\[parquet\]"):
        w.open_writer(str(tmp_path / "x.parquet"), SCHEMA)


def test_format_float():
    assert w._format_float(math.nan) == ""
    assert w._format_float(3.0) == "3"
    assert w._format_float(0.1) == "0.1"
    assert w._format_float(1e20) == "1e+20"
