"""The bundled false-sharing workload: native threads pinned to chosen CPUs,
one writer per word, all words on one cache line (or padded with -t 1); with
a memory-sampling PMU, ``mem record`` + ``c2c`` rank that line first."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pmuscope.memory.events import mem_events_status
from pmuscope.workloads import false_sharing as fs

CPUS = sorted(os.sched_getaffinity(0))[:2]
PMUSCOPE = [sys.executable, "-m", "pmuscope"]


def test_threads_share_one_line_and_run_on_their_cpus():
    res = fs.run(CPUS, sharing=True, seconds=0.2, burst=100_000)
    assert [r.cpu for r in res] == CPUS
    assert len({r.address // 64 for r in res}) == 1 and all(r.increments > 0 for r in res)
    padded = fs.run(CPUS, sharing=False, seconds=0.1, burst=100_000)
    assert len({r.address // 64 for r in padded}) == len(CPUS)


def test_machine_code_fallback_matches_extension(monkeypatch):
    import ctypes
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the fallback loop is x86-64 code")
    import pmuscope

    monkeypatch.setitem(sys.modules, "pmuscope._native", None)  # import fails: use the fallback
    monkeypatch.delattr(pmuscope, "_native", raising=False)
    loop = fs.store_loop()
    assert getattr(loop, "__name__", "") == "<lambda>"  # the mapped x86-64 loop, not the extension
    word = ctypes.c_uint64(5)
    loop(ctypes.addressof(word), 1000)
    loop(ctypes.addressof(word), 0)
    assert word.value == 1005


def test_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pmuscope.workloads", "false_sharing", "-t", "0", "-c", *map(str, CPUS),
                          "-d", "0.2"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.startswith("false_sharing: false sharing (one cache line), ")
    assert all(f"cpu {c:>3}" in out for c in CPUS)
    bad = subprocess.run([sys.executable, "-m", "pmuscope.workloads", "false_sharing", "-c", "100000"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not available" in bad.stderr


EVENTS, REASON = mem_events_status()


@pytest.mark.skipif(not EVENTS or len(CPUS) < 2, reason=f"needs a memory-sampling PMU and 2 CPUs: {REASON}")
def test_c2c_finds_the_shared_line(tmp_path):
    data = tmp_path / "fs.data"
    subprocess.run([*PMUSCOPE, "mem", "record", "-o", str(data), "--", sys.executable, "-m", "pmuscope.workloads",
                    "false_sharing", "-c", *map(str, CPUS), "-d", "2"], check=True, timeout=120, capture_output=True)
    import json

    out = subprocess.run([*PMUSCOPE, "c2c", "--json", str(data)], capture_output=True, text=True, timeout=120, check=True)
    lines = json.loads(out.stdout)["shared_lines"]
    assert lines, "c2c found no shared line"
    top = lines[0]
    assert top.get("hitm", 0) + top.get("peer", 0) > 0
