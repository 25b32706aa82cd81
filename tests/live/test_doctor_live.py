"""doctor and topology against this machine, checked with independent sources
(resource, os, lscpu, and perf's own "Using CPUID")."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pmuscope.system import read_topology
from pmuscope.doctor import diagnose

from ..conftest import hardware_pmu_reason, nobody_python


@pytest.fixture(scope="module")
def checks() -> dict:
    return {c.name: c for c in diagnose()}


def test_live_probes_agree_with_the_kernel(checks):
    assert checks["software_events"].status == "ok"
    hw = checks["hardware_events"]
    if hardware_pmu_reason() is None:
        assert hw.status == "ok"
    else:
        assert hw.status == "missing" and hw.detail


def test_sysctls_and_limits_match(checks):
    level = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    assert checks["perf_event_paranoid"].data["level"] == level
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    r = checks["rlimit_nofile"].data
    inf = resource.RLIM_INFINITY
    assert (r["soft"], r["hard"]) == (None if soft == inf else soft, None if hard == inf else hard)
    assert r["cpus"] == len(os.sched_getaffinity(0)) or r["cpus"] == os.cpu_count()
    assert checks["privileges"].data["euid"] == os.geteuid()


def test_pmus_match_sysfs(checks):
    base = Path("/sys/bus/event_source/devices")
    expected = {p.name: int((p / "type").read_text()) for p in base.iterdir()}
    assert checks["pmus"].data["pmus"] == expected


def test_doctor_cli_json():
    proc = subprocess.run([sys.executable, "-m", "pmuscope", "doctor", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = [c["name"] for c in json.loads(proc.stdout)]
    assert "software_events" in names and "perf_event_paranoid" in names


def test_topology_matches_lscpu():
    lscpu = shutil.which("lscpu")
    if not lscpu:
        pytest.skip("lscpu (util-linux) is not installed")
    out = subprocess.run([lscpu, "-p=CPU,CORE,SOCKET,NODE"], capture_output=True, text=True, timeout=60).stdout
    rows = [line.split(",") for line in out.splitlines() if line and not line.startswith("#")]
    topo = read_topology()
    assert [int(r[0]) for r in rows] == list(topo.online)
    for cpu, core, socket, node in rows:
        c = topo.cpu(int(cpu))
        assert c.physical_package_id == int(socket)
        if node:
            assert c.node == int(node)
    # lscpu numbers cores logically: compare the grouping, not the ids
    lscpu_cores = {}
    for cpu, core, socket, _ in rows:
        lscpu_cores.setdefault((socket, core), []).append(int(cpu))
    assert sorted(tuple(v) for v in lscpu_cores.values()) == sorted(c.cpus for c in topo.cores)


def test_perf_cpuid_matches_perf(perf_bin):
    proc = subprocess.run([perf_bin, "stat", "-v", "-e", "task-clock", "true"], capture_output=True, text=True, timeout=60)
    m = re.search(r"Using CPUID (\S+)", proc.stdout + proc.stderr)
    if not m:
        pytest.skip("this perf does not print 'Using CPUID'")
    assert read_topology().identity.perf_cpuid == m.group(1)


def test_doctor_as_unprivileged_user(tmp_path):
    """The same library run as uid 65534 reports the restrictions root does not have."""
    python, env = nobody_python()
    code = "import json; from pmuscope.doctor import diagnose; print(json.dumps([c.to_dict() for c in diagnose()]))"
    proc = subprocess.run(python + ["-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    c = {d["name"]: d for d in json.loads(proc.stdout)}
    assert c["privileges"]["data"]["euid"] == 65534 and c["privileges"]["status"] == "warn"
    level = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    assert c["perf_event_paranoid"]["status"] == ("ok" if level <= -1 else "missing" if level >= 3 else "warn")
    if level < 3:
        assert c["software_events"]["status"] == "ok"  # user-space task-clock is always allowed below 3


def test_max_precise_agrees_with_the_kernel(checks):
    """caps/max_precise N: precise_ip=N opens for a sampling cycles event, N+1 does not."""
    if hardware_pmu_reason() is not None:
        pytest.skip(f"needs a hardware PMU: {hardware_pmu_reason()}")
    if "precise_sampling" not in checks:
        pytest.skip("the core PMU has no caps/max_precise")
    from pmuscope.errors import PmuscopeError
    from pmuscope.kernel import PerfEventFd, perf_event_attr

    (level,) = set(checks["precise_sampling"].data["max_precise"].values())

    def opens(p: int) -> bool:
        try:
            PerfEventFd(perf_event_attr(type=0, config=0, precise_ip=p, sample_period=100000, exclude_kernel=1)).close()
            return True
        except PmuscopeError:
            return False

    assert opens(level)
    if level < 3:
        assert not opens(level + 1)
