"""numatop --once -p PID: memory_areas, node_latency and call_chains as data
(--json and --csv), each with its unavailable reason here, and the whole
document validated against docs/numatop.schema.json."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest

from pmuscope.numa.process_windows import csv_rows, process_windows

from ..conftest import ROOT

SCHEMA = json.loads((ROOT / "docs" / "numatop.schema.json").read_text())
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def _numatop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pmuscope", "numatop", *args], capture_output=True, text=True,
                          timeout=120, env=ENV)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_once_json_pid_validates_and_has_windows(sleeper):
    out = _numatop("--once", "--json", "-d", "0.3", "-p", str(sleeper))
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    jsonschema.validate(d, SCHEMA)
    assert [p["pid"] for p in d["processes"]] == [sleeper]
    ma, nl, cc = d["memory_areas"], d["node_latency"], d["call_chains"]
    assert ma["pid"] == nl["pid"] == cc["pid"] == sleeper
    # every /proc/PID/maps area is listed, whether or not loads could be sampled
    assert any(a["desc"] == "[heap]" or a["desc"].endswith("/sleep") for a in ma["areas"])
    assert set(cc["metrics"]) == {"rma", "lma", "clk", "ir"}
    if ma["samples"] == 0:
        assert ma["unavailable"] and nl["unavailable"]
    for m in cc["metrics"].values():
        assert m["chains"] or m["unavailable"]


def test_whole_document_validates_without_pid_and_with_threads():
    out = _numatop("--once", "--json", "-d", "0.3", "--threads", "--all")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    jsonschema.validate(d, SCHEMA)
    assert "memory_areas" not in d


def test_once_csv_pid_rows(sleeper):
    out = _numatop("--once", "--csv", "-d", "0.3", "-p", str(sleeper))
    assert out.returncode == 0, out.stderr
    body = [line for line in out.stdout.splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(io.StringIO("\n".join(body))))
    header = body[0].split(",")
    assert header[:21] == ["interval", "table", "node", "pid", "comm", "cpus", "cpu_pct", "rma", "lma", "rma_lma",
                           "cpi", "rpi", "lpi", "migrations", "minflt", "majflt", "mem_kb", "mem_total_kb",
                           "mem_free_kb", "imc_mb_s", "upi_mb_s"]  # the existing columns keep their places
    tables = {r["table"] for r in rows}
    assert {"node", "process", "area", "node_latency", "call_chain"} <= tables
    chains = [r for r in rows if r["table"] == "call_chain"]
    assert {r["metric"] for r in chains} == {"rma", "lma", "clk", "ir"}
    assert all(r["chain"] or r["unavailable"] for r in chains)


def test_windows_with_samples_from_a_measuring_machine():
    """The measured branch, with the TUI's measuring functions replaced by
    what a PEBS machine returns (areas with samples, per-node latency, chains)."""
    pid = os.getpid()
    lat = {"areas": [{"addr": 0x1000, "size": 4096, "perms": "rw-p", "desc": "[heap]", "samples": 30,
                      "access_pct": 75.0, "lat_ns": np.float64(120.5)},
                     {"addr": 0x9000, "size": 8192, "perms": "r--p", "desc": "/lib/x.so", "samples": 10,
                      "access_pct": 25.0, "lat_ns": 80.0}],
           "nodes": {0: {"access_pct": 60.0, "lat_ns": 90.0}, 1: {"access_pct": 40.0, "lat_ns": 150.0}},
           "samples": 40, "source": "cpu/mem-loads,ldlat=30/P", "reason": None}

    def chains(p, metric):
        if metric == "clk":
            return SimpleNamespace(event="cycles", samples=0, chains=[], reason="no cycles samples for pid 1 in 1s")
        return SimpleNamespace(event="r4044", samples=12, chains=[(7, ["main", "work", "load"]), (5, ["main"])],
                               reason=None)

    w = process_windows(pid, None, [0], latency_fn=lambda p: lat, callchain_fn=chains)
    doc = {"interval_s": 1.0, "platform": "skx", "nodes": [], "processes": [], "unavailable": {}, **w}
    jsonschema.validate(doc, SCHEMA)
    assert w["memory_areas"]["areas"][0] == {"addr": "0x1000", "size": 4096, "perms": "rw-p", "desc": "[heap]",
                                             "samples": 30, "access_pct": 75.0, "lat_ns": 120.5}
    assert w["node_latency"]["nodes"] == [{"node": 0, "access_pct": 60.0, "lat_ns": 90.0},
                                          {"node": 1, "access_pct": 40.0, "lat_ns": 150.0}]
    assert w["node_latency"]["unavailable"] is None and w["memory_areas"]["unavailable"] is None
    assert w["call_chains"]["metrics"]["rma"]["chains"][0] == {"count": 7, "frames": ["main", "work", "load"]}
    assert w["call_chains"]["metrics"]["clk"]["unavailable"].startswith("no cycles samples")
    rows = csv_rows(w, 0)
    assert [r["table"] for r in rows].count("area") == 2
    assert any(r["table"] == "call_chain" and r["chain"] == "main;work;load" for r in rows)


def test_gone_process():
    w = process_windows(2**22 + 12345, None, [0], latency_fn=lambda p: 1 / 0, callchain_fn=lambda p, m: 1 / 0)
    assert "does not exist" in w["memory_areas"]["unavailable"]
    assert all("does not exist" in m["unavailable"] for m in w["call_chains"]["metrics"].values())
