"""`pmuscope numatop` on this machine: a CPU-bound process shows up with the
CPU% its own scheduler accounting says, node 0 holds its memory, and what
cannot be measured is null with a reason (unprivileged, procfs only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import hardware_pmu_reason, nobody_python


def counters_busy() -> str | None:
    """Why hardware counters cannot count right now (all taken by other perf
    users), or None. Opens cycles on this thread and spins briefly."""
    import struct

    from pmuscope.kernel import PerfEventFd, abi

    attr = abi.perf_event_attr(type=0, config=0, read_format=int(abi.PerfFormat.TOTAL_TIME_ENABLED | abi.PerfFormat.TOTAL_TIME_RUNNING))
    with PerfEventFd(attr, pid=0, cpu=-1) as fd:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        value, enabled, running = struct.unpack("<QQQ", fd.read(24))
    return "every hardware counter is held by another perf user right now" if running == 0 else None


def _runtime_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


@pytest.fixture
def busy():
    # it must outlive every numatop run of a test: on a loaded 2-vCPU machine one run (interpreter
    # start, events, -d 1, numa_maps of every process) has taken longer than 8 s, and an exited
    # (zombie) process has an empty numa_maps: mem_kb 0
    proc = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", "120"])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def _numatop(*args: str, python: list[str] | None = None, env: dict | None = None) -> dict:
    """Run the command (as another user when PYTHON is given) and return its JSON."""
    cmd = (python or [sys.executable]) + ["-m", "pmuscope", "numatop", "--once", "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_busy_process_cpu_pct_and_memory_on_node0(busy):
    r0, t0 = _runtime_ns(busy.pid), time.monotonic()
    d = _numatop("-d", "1", "--all")
    r1, t1 = _runtime_ns(busy.pid), time.monotonic()
    window_pct = 100 * (r1 - r0) / ((t1 - t0) * 1e9)  # its own accounting over the whole run
    row = next(p for p in d["processes"] if p["pid"] == busy.pid)
    assert d["interval_s"] >= 0.9
    # its CPU time inside the interval cannot exceed what it got over the whole run
    assert row["cpu_pct"] * d["interval_s"] * 1e7 <= (r1 - r0) * 1.02 + 5e6
    # and it cannot be less than what it got over the whole run minus a full CPU for the time outside the
    # interval (a one-thread loop runs on at most one CPU): bounds that hold however loaded the machine is
    outside_ns = ((t1 - t0) - d["interval_s"]) * 1e9
    assert row["cpu_pct"] * d["interval_s"] * 1e7 >= (r1 - r0) - outside_ns - 5e6, (row, window_pct)
    assert 1 < row["cpu_pct"] <= 101  # a busy loop gets some CPU in a second, at most one CPU
    assert row["mem_kb"] > 1000 and row["mem_kb_by_node"]["0"] == row["mem_kb"]
    node0 = d["nodes"][0]
    assert node0["node"] == 0 and 0 in node0["cpus"] and node0["mem_total_kb"] > 0
    assert 0 < node0["cpu_pct"] <= 100
    for col, value in row.items():
        if value is None:
            assert col in d["unavailable"], col  # every null column has its reason


def test_pmu_columns_and_exact_node_split(busy):
    reason = hardware_pmu_reason() or counters_busy()
    if reason is not None:
        pytest.skip(f"needs a free hardware PMU: {reason}")
    d = _numatop("-d", "1", "--all")
    assert busy.poll() is None, "the busy process exited during the run"
    if "never scheduled" in d["unavailable"].get("cpi", ""):
        pytest.skip(f"hardware counters were taken during the run: {d['unavailable']['cpi']}")
    row = next(p for p in d["processes"] if p["pid"] == busy.pid)
    assert row["cpi"] is not None and 0.05 < row["cpi"] < 20
    assert row["clk"] > 1e7 and row["ir"] > 1e7
    # the side-band's per-node time and schedstat measure the same thing two ways, over one
    # window: procfs is read right after the counter groups, before the side-band is decoded
    assert row["by_node"][0]["cpu_pct"] == pytest.approx(row["cpu_pct"], abs=15)
    assert d["attribution"]["method"] == "switch-sampling" and d["attribution"]["samples"] > 0
    if "rma" not in d["unavailable"]:
        assert row["rma"] is not None and row["lma"] is not None
        assert row["rma"] == 0  # one node here: nothing is remote


def test_procfs_only_mode_names_every_missing_column(busy):
    d = _numatop("-d", "0.5", "--no-switches", "--all")
    row = next(p for p in d["processes"] if p["pid"] == busy.pid)
    assert row["cpu_pct"] > 0
    for col in ("rma", "lma", "rma_lma", "cpi", "rpi", "lpi"):
        assert row[col] is None and d["nodes"][0][col] is None
        assert d["unavailable"][col]
    assert "disabled" in d["unavailable"]["cpu_pct_by_node"]


def test_unprivileged_user_degrades_with_reasons(busy):
    python, env = nobody_python()
    d = _numatop("-d", "0.5", "--all", python=python, env=env)
    row = next(p for p in d["processes"] if p["pid"] == busy.pid)
    assert row["cpu_pct"] > 0  # schedstat is world-readable
    paranoid = int(open("/proc/sys/kernel/perf_event_paranoid").read())
    if paranoid > 0:
        assert "do not open" in d["unavailable"]["cpu_pct_by_node"]
        assert row["cpi"] is None and "cpi" in d["unavailable"]


def test_call_chains_of_the_busy_process(busy):
    reason = hardware_pmu_reason() or counters_busy()
    if reason is not None:
        pytest.skip(f"needs a free hardware PMU: {reason}")
    from pmuscope.numa.callchains import record_callchains
    from pmuscope.numa.platforms import platform_for
    from pmuscope.system import read_cpu_identity

    ch = record_callchains(busy.pid, "ir", platform_for(read_cpu_identity()), duration=1.0)
    assert ch.reason is None and ch.samples > 0
    total = sum(count for count, _ in ch.chains)
    assert 0 < total <= ch.samples
    assert any(frames for _, frames in ch.chains)


def test_busy_counters_degrade_to_the_software_side_band(busy):
    """When no hardware counter is free the group never runs; the sampler must
    fall back to the software side-band and name why the PMU columns are null."""
    if hardware_pmu_reason() is not None:
        pytest.skip("no hardware PMU: the group has no hardware members to be starved")
    from pmuscope.numa.snapshot import NumaSampler

    with NumaSampler() as s:
        if s.collector is None:
            pytest.skip(f"CPU-wide events do not open: {s.unavailable.get('cpu_pct_by_node')}")
        if s.collector.members:
            s.collector.multiplexed = {cpu: 0.0 for cpu in s.collector.cpus}  # what a starved group reports
            assert s._degrade_if_unscheduled()
        elif "never scheduled" not in s.unavailable["clk"]:
            pytest.skip(f"no hardware members opened: {s.unavailable['clk']}")
        # (else the counters really were all taken and the sampler already fell back)
        assert s.collector is not None and s.collector.members == []
        time.sleep(0.5)
        snap = s.refresh()
    row = snap.process(busy.pid)
    assert row["cpi"] is None and "never scheduled" in snap.unavailable["cpi"]
    assert row["by_node"][0]["cpu_pct"] is not None and row["by_node"][0]["cpu_pct"] > 0
