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


# --------------------------------------------------------------------------- batch formatting = value-by-value formatting

EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e15, 9999999999999998.0, 1e16, 1e17, -1e16, 2.0**53, 2.0**63, 1e300, 1e-5,
               1.5e-7, 123456.789, math.nan, math.inf, -math.inf, 5e-324, 0.1 + 0.2]


def _edge_batches():
    """Batches that take every path of the batch formatter: constant columns,
    runs, alternating values, whole and fractional floats, NaN and infinities,
    -0.0, floats past repr's switch to exponents, strings that need quoting,
    non-ASCII and '%' in strings, and columns whose dtype is not their kind's."""
    rng = np.random.default_rng(7)
    out = []
    for n in (1, 2, 3, 7, 500, 5000):
        ints = rng.integers(-2**62, 2**62, n)
        floats = rng.choice(np.array(EDGE_FLOATS), n)
        out.append({
            "timestamp": np.repeat(np.arange((n + 1) // 2, dtype=np.int64) * 1_000_000 + 7, 2)[:n],
            "interval_ms": np.repeat(rng.random((n + 1) // 2) + 0.5, 2)[:n],
            "cpu": (np.arange(n) % 2).astype(np.int32),
            "count": np.repeat(rng.integers(0, 10**9, (n + 1) // 2).astype(np.float64), 2)[:n],
            "edge": floats,
            "finite": rng.choice(np.array([f for f in EDGE_FLOATS if math.isfinite(f)]), n),
            "huge_whole": np.array(([1e16, 3.0, 1e17, 2.0**63, 9999999999999998.0] * n)[:n]),
            "whole_neg": -np.arange(n, dtype=np.float64),
            "zero": np.zeros(n),
            "negzero": np.full(n, -0.0),
            "nan": np.full(n, math.nan),
            "big": ints,
            "u64": np.full(n, 2**64 - 1, dtype=np.uint64),
            "late": np.arange(n) % 3 == 0,
            "never": np.zeros(n, dtype=bool),
            "int_as_bool": np.arange(n) % 3,
            "float_as_int": np.arange(n) * 1.5,
            "small": np.full(n, 7, dtype=np.int32),
            "governor": np.array((["powersave", 'say "hi", x', "ünï%s", "%d%%", "a\nb", ""] * n)[:n], dtype=object),
            "same": np.array(["schedutil"] * n, dtype=object),
        })
    return out


EDGE_SCHEMA = [("timestamp", "i64"), ("interval_ms", "f64"), ("cpu", "i32"), ("count", "f64"), ("edge", "f64"),
               ("finite", "f64"), ("huge_whole", "f64"),               ("whole_neg", "f64"), ("zero", "f64"), ("negzero", "f64"), ("nan", "f64"), ("big", "i64"),
               ("u64", "i64"), ("late", "bool"), ("never", "bool"), ("int_as_bool", "bool"), ("float_as_int", "i64"),
               ("small", "i32"), ("governor", "str"), ("same", "str")]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_batch_formatting_matches_value_by_value(fmt):
    fast, ref = (w.csv_rows, w.csv_rows_reference) if fmt == "csv" else (w.jsonl_rows, w.jsonl_rows_reference)
    for b in _edge_batches() + [batch(0, 1), batch(3, 10), batch(0, 1000)]:
        schema = EDGE_SCHEMA if "edge" in b else SCHEMA
        n = len(b["timestamp"])
        assert fast(schema, b, n) == ref(schema, b, n)
        for name, kind in schema:  # each column alone: constant templates, one-column rows
            assert fast([(name, kind)], b, n) == ref([(name, kind)], b, n), name


def test_batch_formatting_known_lines():
    b = {"t": np.array([5, 5, 6], dtype=np.int64), "x": np.array([1025319.0, -0.0, 0.25]), "g": np.array(["a,b", "a,b", "%s"], dtype=object),
         "l": np.array([True, False, True])}
    schema = [("t", "i64"), ("x", "f64"), ("g", "str"), ("l", "bool")]
    assert w.csv_rows(schema, b, 3) == '5,1025319,"a,b",1\n5,-0,"a,b",0\n6,0.25,%s,1\n'
    assert w.jsonl_rows(schema, b, 3) == ('{"t":5,"x":1025319.0,"g":"a,b","l":true}\n{"t":5,"x":-0.0,"g":"a,b","l":false}\n'
                                          '{"t":6,"x":0.25,"g":"%s","l":true}\n')


def test_monitor_batches_format_as_value_by_value(data_dir):
    """Batches as the monitor builds them (the dvfs fixture's context and
    power columns, NaN events), through both formatters."""
    from pmuscope.counting import monitor as mm

    d = data_dir / "dvfs"
    mon = mm.Monitor("task-clock,context-switches", cpus=[0, 1], interval_ms=1, sysfs=str(d / "sys"), procfs=str(d / "proc0"))
    mon._context_sampler()
    schema = mon.schema()
    rng = np.random.default_rng(3)
    n = 300
    b = {name: np.zeros(2 * n, dtype={"i64": np.int64, "i32": np.int32, "f64": np.float64, "bool": bool, "str": object}[kind])
         for name, kind in schema}
    b["timestamp"] = np.repeat(np.arange(n, dtype=np.int64) * 1_000_000 + 123, 2)
    b["interval_ms"] = np.repeat(1 + rng.random(n) / 10, 2)
    b["cpu"] = np.tile(np.array([0, 1], dtype=np.int32), n)
    b["task-clock"] = np.where(rng.random(2 * n) < 0.1, np.nan, rng.integers(0, 10**6, 2 * n).astype(float))
    b["governor"] = np.tile(np.array(mon._ctx.governors, dtype=object), n)
    for c in mon._ctx.machine_columns:
        b[c] = np.repeat(rng.random(n // 10) * 50, 20)
    mon.close()
    assert w.csv_rows(schema, b, 2 * n) == w.csv_rows_reference(schema, b, 2 * n)
    assert w.jsonl_rows(schema, b, 2 * n) == w.jsonl_rows_reference(schema, b, 2 * n)
