"""The real ``pmuscope record --push`` (a subprocess sampling a real
workload) against a tiny local ingest server that records requests, and
against a back end that is down."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from pmuscope.profile import build_report, load_profile

from ..unit.pprof_schema import decode
from ..unit.test_record_push import Ingest, profile_part

WORKLOAD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.3"]
# a workload that burns CPU, then exits with status 3
EXIT3 = [sys.executable, "-c", "import sys, time\nt = time.time()\nwhile time.time() - t < 0.3: pass\nsys.exit(3)"]


@pytest.fixture()
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once closed


def _record(args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pmuscope", "record", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_record_push_delivers_the_recording(tmp_path):
    srv = Ingest()
    try:
        out = str(tmp_path / "push.data")
        t0 = time.time()
        res = _record(["-e", "cpu-clock", "-g", "-o", out, "--push", srv.url, "--app", "busy-app",
                       "--label", "team=perf", "--", *WORKLOAD])
        t1 = time.time()
        assert res.returncode == 0, res.stderr
        assert f"pushed {out} to {srv.url}/ingest as busy-app" in res.stderr
        (req,) = srv.requests
        q = req["query"]
        assert q["name"] == f"busy-app{{service_name=busy-app,host={os.uname().nodename},event=cpu-clock,team=perf}}"
        assert int(t0) <= int(q["from"]) <= int(q["until"]) <= int(t1) + 1
        prof = decode(profile_part(req))
        p = load_profile(out)
        st = prof.string_table
        types = [st[t.type] for t in prof.sample_type]
        # every recorded sample arrives, with the same total weight
        assert sum(s.value[types.index("samples")] for s in prof.sample) == len(p) > 50
        top = build_report(p, ("sym",)).rows[0].keys["sym"]
        assert top in st  # the busiest symbol travels as a function name
    finally:
        srv.stop()


def test_record_push_backend_down_keeps_exit_status(tmp_path, closed_port):
    out = str(tmp_path / "down.data")
    t = time.monotonic()
    res = _record(["-e", "cpu-clock", "-o", out, "--push", f"http://127.0.0.1:{closed_port}", "--push-timeout", "2",
                   "--", *EXIT3])
    elapsed = time.monotonic() - t
    assert res.returncode == 3, res.stderr
    warn = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert len(warn) == 1 and "1 dropped" in warn[0] and "not delivered" in warn[0], res.stderr
    assert "Traceback" not in res.stderr
    assert len(load_profile(out)) > 20  # the recording itself is complete
    assert elapsed < 30  # the push gave up at its timeout
