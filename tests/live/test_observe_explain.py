"""observe --explain: one row per event fd with its rdpmc index and read path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

from pmuscope.observe import explain_events as ee

from ..conftest import ROOT


def test_software_events_of_this_thread():
    rows = ee.explain_events("task-clock,context-switches")
    assert [r["event"] for r in rows] == ["task-clock", "context-switches"]
    assert rows[0]["leader"] and rows[1]["leader_fd"] == rows[0]["fd"] and rows[0]["fd"] != rows[1]["fd"]
    for r in rows:
        assert r["index"] == 0 and r["rdpmc"] is None and r["path"] == "read" and "index 0" in r["reason"]
    # the fds were closed again
    assert not os.path.exists(f"/proc/self/fd/{rows[1]['fd']}") or "perf_event" not in os.readlink(f"/proc/self/fd/{rows[1]['fd']}")


def test_path_rules_on_pages_with_a_hardware_counter():
    page = types.SimpleNamespace(index=3, cap_user_rdpmc=1, pmc_width=48)
    path, why = ee._path(page, self_thread=True)
    assert path == ("rdpmc" if ee.native_rdpmc_available() else "read")
    assert ee._path(page, self_thread=False)[0] == "read"
    assert "rdpmc=0" in ee._path(types.SimpleNamespace(index=3, cap_user_rdpmc=0, pmc_width=48), self_thread=True)[1]
    text = ee.format_rows([{"event": "cycles", "fd": 7, "leader_fd": 7, "tid": 42, "cpu": None, "index": 3, "rdpmc": 2,
                            "pmc_width": 48, "path": "rdpmc", "reason": "ok"}])
    assert text.splitlines()[1].split()[:8] == ["cycles", "7", "7", "42", "-", "3", "2", "48"]


def test_cli_explain_per_cpu_json():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-m", "pmuscope", "observe", "--explain", "--json", "-C", "0", "-e",
                          "task-clock,page-faults"], capture_output=True, text=True, env=env, timeout=60, check=True)
    js = json.loads(out.stdout)
    assert "native_helper" in js and [r["event"] for r in js["events"]] == ["task-clock", "page-faults"]
    assert all(r["cpu"] == 0 and r["tid"] is None for r in js["events"])
    text = subprocess.run([sys.executable, "-m", "pmuscope", "observe", "--explain", "-e", "task-clock"],
                          capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert "EVENT" in text and "RDPMC" in text and "task-clock" in text
