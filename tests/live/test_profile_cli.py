"""`pmuscope profile` end to end (our own recording), and the report/script
commands' CLI contract (JSON shape, one-line errors)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PM = [sys.executable, "-m", "pmuscope"]
WORKLOAD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.5"]


def _run(args, **kw):
    return subprocess.run(PM + args, capture_output=True, text=True, timeout=180, **kw)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile")
    prefix = str(d / "busy")
    r = _run(["profile", "-e", "cpu-clock", "-o", prefix, "--top", "5", "--", *WORKLOAD])
    if r.returncode != 0 and "perf_event_open" in r.stderr:
        pytest.skip(f"cannot record here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    return prefix, r


def test_profile_prints_top_and_writes_files(profiled):
    prefix, r = profiled
    out = r.stdout
    assert "# Samples:" in out and "of event 'cpu-clock'" in out
    report = out.split("# Python functions", 1)[0]  # the Python table and call paths follow the report
    rows = [ln for ln in report.splitlines() if ln.strip().endswith(("_PyEval_EvalFrameDefault",)) or "%" in ln and not ln.startswith("#")]
    assert 1 <= len(rows) <= 5
    assert "_PyEval_EvalFrameDefault" in out  # the busy loop's interpreter
    for ext in (".data", ".folded", ".html"):
        assert f"{prefix}{ext}" in out
    folded = open(prefix + ".folded").read().splitlines()
    assert folded and all(line.rsplit(" ", 1)[1].isdigit() for line in folded)
    assert any("_PyEval_EvalFrameDefault" in line for line in folded)
    html = open(prefix + ".html").read()
    assert html.startswith("<!DOCTYPE html>") and "_PyEval_EvalFrameDefault" in html


def test_report_json_contract_on_our_file(profiled):
    prefix, _ = profiled
    r = _run(["report", "-i", prefix + ".data", "--json", "--sort", "dso,sym,comm,pid,cpu"])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert isinstance(doc["samples"], int) and doc["samples"] > 0
    assert isinstance(doc["lost"], int) and doc["event"] == "cpu-clock"
    rows = doc["rows"]
    assert rows and [x["overhead"] for x in rows] == sorted((x["overhead"] for x in rows), reverse=True)
    assert sum(x["samples"] for x in rows) == doc["samples"]
    for key in ("overhead", "samples", "comm", "pid", "dso", "sym", "cpu"):
        assert key in rows[0]
    assert "+0x" not in rows[0]["sym"]


def test_perf_reads_the_profile_recording(profiled, perf_bin):
    prefix, _ = profiled
    ours = json.loads(_run(["report", "-i", prefix + ".data", "--json"]).stdout)
    stats = subprocess.run([perf_bin, "report", "--stats", "-i", prefix + ".data"], capture_output=True, text=True,
                           timeout=120).stdout
    line = next(ln for ln in stats.splitlines() if "SAMPLE events:" in ln)
    assert int(line.split()[2]) == ours["samples"]


def test_script_fields_and_hidden_chains(profiled):
    prefix, _ = profiled
    full = _run(["script", "-i", prefix + ".data"]).stdout.splitlines()
    hidden = _run(["script", "-i", prefix + ".data", "-G"]).stdout.splitlines()
    picked = _run(["script", "-i", prefix + ".data", "-G", "-F", "comm,tid,ip,sym"]).stdout.splitlines()
    assert len(hidden) == len(picked) > 0
    assert len(full) > 2 * len(hidden)  # chains below each sample
    assert all(ln.lstrip().split()[0] for ln in picked)
    assert all("cpu-clock" not in ln and "(" not in ln for ln in picked[:50])


@pytest.mark.parametrize("args,needle", [
    (["report", "-i", "/nonexistent/perf.data"], "cannot open"),
    (["report", "--sort", "comm,bogus", "-i", "/dev/null"], "unknown key"),
    (["script", "-F", "comm,nope", "-i", "/dev/null"], "unknown field"),
    (["report", "--time", "abc", "-i", "/dev/null"], "--time"),
])
def test_bad_input_is_one_line(args, needle, tmp_path):
    r = _run(args)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_truncated_file_is_one_line(profiled, tmp_path):
    prefix, _ = profiled
    data = open(prefix + ".data", "rb").read()
    bad = tmp_path / "cut.data"
    bad.write_bytes(data[: len(data) // 2 + 3])
    r = _run(["report", "-i", str(bad)])
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cut.data" in lines[0], r.stderr
