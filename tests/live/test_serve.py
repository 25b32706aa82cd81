"""pmuscope serve on the running kernel: the CLI's HTTP endpoint (loopback by
default, read-only), textfile output over time, --once, and per-cgroup counts
checked against the kernel's own CPU accounting of a workload."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest

from pmuscope.counting import online_cpus

from ..conftest import stop_process as _stop

prom_parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client (test extra) not installed")


def _samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in prom_parser.text_string_to_metric_families(text) for s in fam.samples}



def test_http_default_loopback_read_only():
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope", "serve", "--port", "0", "-e", "cpu-clock"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        r, _, _ = select.select([proc.stderr], [], [], 15)
        line = proc.stderr.readline() if r else ""
        assert "listening on http://127.0.0.1:" in line, line
        url = line.split("listening on ", 1)[1].strip()
        req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text;version=1.0.0"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
            body = resp.read().decode()
        assert body.endswith("# EOF\n")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=5)
        assert err.value.code == 405
        err.value.close()
    finally:
        _stop(proc)
    assert proc.returncode == 0


def test_textfile_updates(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope", "serve", "--no-http", "--textfile", str(tmp_path),
                             "--interval", "0.3", "-e", "cpu-clock,context-switches"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    path = tmp_path / "pmuscope.prom"
    try:
        deadline = time.monotonic() + 15
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        first = _samples(path.read_text())
        t0 = time.monotonic()
        time.sleep(0.8)
        second = _samples(path.read_text())
        elapsed = time.monotonic() - t0
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    for cpu in online_cpus():
        key = ("pmuscope_perf_cpu_clock_seconds_total", (("cpu", str(cpu)),))
        grew = second[key] - first[key]
        # written every 0.3 s, so the two reads are elapsed ± one interval apart
        assert elapsed - 0.35 <= grew <= elapsed + 0.35, (cpu, grew, elapsed)
        assert second[("pmuscope_perf_context_switches_total", (("cpu", str(cpu)),))] >= \
            first[("pmuscope_perf_context_switches_total", (("cpu", str(cpu)),))]
    assert second[("pmuscope_scrapes_total", ())] > first[("pmuscope_scrapes_total", ())]
    assert sorted(os.listdir(tmp_path)) == ["pmuscope.prom"]  # no temporary files left behind


def test_once_per_node_and_global():
    for per, label in (("node", "node"), ("global", None)):
        out = subprocess.run([sys.executable, "-m", "pmuscope", "serve", "--once", "--interval", "0.2", "--per", per,
                              "-e", "cpu-clock"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        s = _samples(out.stdout)
        series = [k for k in s if k[0] == "pmuscope_perf_cpu_clock_seconds_total"]
        assert series and all((dict(k[1]).keys() == {label}) if label else k[1] == () for k in series)
        total = sum(s[k] for k in series)
        # every CPU's cpu-clock runs for the whole session: at least 0.2 s each
        assert total >= 0.2 * len(online_cpus()) * 0.9


def _cgroup2_root() -> str | None:
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[2] == "cgroup2":
                return parts[1]
    return None


def test_per_cgroup_task_clock_matches_rusage():
    from pmuscope.serve import open_exporter, render

    root = _cgroup2_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("needs a writable cgroup2 hierarchy to make a test cgroup")
    name = f"pmuscope-test-{uuid.uuid4().hex[:8]}"
    path = os.path.join(root, name)
    try:
        os.mkdir(path)
    except OSError as err:
        pytest.skip(f"cannot create a cgroup here: {err}")
    try:
        ex = open_exporter("task-clock", cgroups=[name], window=0.1)
        try:
            before = _samples(render(ex.collect()))
            proc = subprocess.Popen(["sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$0" "$@"', sys.executable,
                                     "-m", "pmuscope.workloads", "busy", "0.5"])
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            assert proc.returncode == 0
            after = _samples(render(ex.collect()))
        finally:
            ex.close()
    finally:
        os.rmdir(path)
    grew = sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == "pmuscope_perf_task_clock_seconds_total")
    cpu = ru.ru_utime + ru.ru_stime
    # the cgroup's task-clock is the workload's CPU time (its sh and exec'd python), rusage at 1-tick resolution
    assert abs(grew - cpu) <= 0.15 * cpu + 0.03, (grew, cpu)
    assert all(dict(k[1]).get("cgroup") == name for k in after if k[0] == "pmuscope_perf_task_clock_seconds_total")
