"""pmuscope diff against perf diff on two recordings of different workloads
made here with perf record -e cpu-clock; and repeated recordings."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

OLD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.5"]
NEW = [sys.executable, "-c", "import hashlib, time\nt = time.time()\n"
       "while time.time() - t < 0.5: hashlib.sha256(b'x' * 100000).digest()"]
ROW = re.compile(r"^\s+(?:([\d.]+)%)?\s+([+-][\d.]+%)?\s+(\S+)\s+(\[.\] .+?)\s*$")


def _record(perf_bin, path, workload):
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock", "-o", str(path), "--", *workload],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-200:]}")
    return str(path)


def _rows(text):
    out = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m and not line.startswith("#"):
            out[(m.group(3), m.group(4))] = (m.group(1), m.group(2))
    return out


def _pmuscope(*args):
    r = subprocess.run([sys.executable, "-m", "pmuscope", "diff", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_diff_matches_perf_diff(perf_bin, tmp_path):
    old = _record(perf_bin, tmp_path / "old.data", OLD)
    new = _record(perf_bin, tmp_path / "new.data", NEW)
    perf = subprocess.run([perf_bin, "diff", old, new], capture_output=True, text=True, timeout=120).stdout
    ours = _pmuscope(old, new)
    theirs, mine = _rows(perf), _rows(ours)
    assert len(theirs) > 10, perf[:2000]
    assert ours.splitlines()[2].split() == perf.splitlines()[2].split()  # the column headers
    # the same entries with the same Baseline and Delta Abs (a symbol the two
    # symbolizers name differently may be missing on each side; allow 2%)
    same = [k for k in theirs if mine.get(k) == theirs[k]]
    assert len(same) >= 0.98 * len(theirs), sorted(set(theirs.items()) - set(mine.items()))[:20]
    # the big changes (|delta| >= 1 point), in perf's order
    big = lambda rows: [(k, v) for k, v in rows.items() if v[1] and abs(float(v[1].rstrip("%"))) >= 1.0]  # noqa: E731
    top_p, top_m = big(theirs), big(mine)
    assert top_p
    assert sorted(top_p) == sorted(top_m)
    assert [v for _, v in top_p] == [v for _, v in top_m]
    # --json: the same numbers, unrounded
    (ev,) = json.loads(_pmuscope(old, new, "--json"))["events"]
    assert ev["event"].startswith("cpu-clock") and ev["old"] == [old] and ev["new"] == [new]
    first = ev["rows"][0]
    assert (first["dso"], first["sym"]) == top_p[0][0]
    assert abs(first["delta"] - float(top_p[0][1][1].rstrip("%"))) <= 0.0051
    assert "ci95" not in first  # one recording a side: no interval


def test_diff_repeats_ci(perf_bin, tmp_path):
    olds = [_record(perf_bin, tmp_path / f"old{i}.data", OLD) for i in range(3)]
    news = [_record(perf_bin, tmp_path / f"new{i}.data", NEW) for i in range(3)]
    j = json.loads(_pmuscope(",".join(olds), ",".join(news), "--json"))
    (ev,) = j["events"]
    assert ev["old"] == olds and ev["new"] == news
    rows = ev["rows"]
    assert all(len(r["old_runs"]) == 3 and len(r["new_runs"]) == 3 for r in rows)
    big = rows[0]  # the workloads differ: the largest delta is real
    assert abs(big["delta"]) > 20 and big["noise"] is False
    lo, hi = big["ci95"]
    assert lo <= big["delta"] <= hi
    # tiny deltas (a sample or two) are noise
    assert any(r["noise"] for r in rows if abs(r["delta"]) < 0.2)
    text = _pmuscope(",".join(olds), ",".join(news))
    assert "95% CI" in text and " noise " in text
