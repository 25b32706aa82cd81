"""`pmuscope stat` end to end: layouts pass perf's linter rules, exit status,
intervals, output files, delay, Ctrl-C, attach."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ..unit.test_stat_format import csv_lint, json_lint

PMUSCOPE = [sys.executable, "-m", "pmuscope"]
PY = sys.executable


def stat(*args, timeout=60, **kw):
    return subprocess.run(PMUSCOPE + ["stat", *args], capture_output=True, text=True, timeout=timeout, **kw)


def test_default_human_output_and_exit_status():
    r = stat("--", PY, "-c", "import sys; sys.exit(3)")
    assert r.returncode == 3, r.stderr
    err = r.stderr
    assert f"Performance counter stats for '{PY} -c import sys; sys.exit(3)':" in err
    for name in ("task-clock", "context-switches", "cpu-migrations", "page-faults", "cycles", "instructions",
                 "branches", "branch-misses"):
        assert f" {name} " in err  # counted or <not supported>, never missing
    assert "CPUs utilized" in err and "seconds time elapsed" in err and "seconds user" in err


def test_csv_and_json_pass_perf_linter_rules(read_path):  # pmuscope stat on each Counter.read path
    r = stat("-x", ",", "--", PY, "-c", "pass")
    assert r.returncode == 0
    lines = r.stderr.strip().splitlines()
    csv_lint(lines, 6)
    assert lines[0].split(",")[1:3] == ["msec", "task-clock"]
    r = stat("-j", "-e", "task-clock,page-faults,{context-switches,cpu-migrations}", "--", PY, "-c", "pass")
    objs = json_lint(r.stderr.strip().splitlines(), (5, 7))
    assert [o["event"] for o in objs if "event" in o] == ["task-clock", "page-faults", "context-switches",
                                                           "cpu-migrations"]
    assert float(objs[1]["counter-value"]) > 100


def test_system_wide_interval_csv(read_path):  # pmuscope stat on each Counter.read path
    r = stat("-a", "-I", "100", "--interval-count", "3", "-x", ",", "-e", "cpu-clock,page-faults")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 0 and len(lines) == 6
    csv_lint(lines, 7)
    stamps = sorted({float(line.split(",")[0]) for line in lines})
    assert len(stamps) == 3
    for k, ts in enumerate(stamps, 1):
        assert abs(ts - 0.1 * k) < 0.05  # deadline-based ticks do not drift
    clocks = [float(line.split(",")[1]) for line in lines if ",cpu-clock," in line]
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for ms in clocks:  # every CPU's cpu-clock advances ~100 ms per interval
        assert 0.5 * 100 * ncpu < ms < 1.5 * 100 * ncpu


def test_per_cpu_and_per_socket_modes(read_path):  # pmuscope stat on each Counter.read path
    r = stat("-a", "-A", "-x", ";", "-e", "cpu-clock", "--", "sleep", "0.05")
    lines = r.stderr.strip().splitlines()
    csv_lint(lines, 7, sep=";")
    assert all(line.startswith("CPU") for line in lines)
    r = stat("-a", "--per-socket", "-j", "-e", "cpu-clock", "--", "sleep", "0.05")
    objs = json_lint(r.stderr.strip().splitlines(), (7, 9))
    assert objs[0]["socket"] == "S0" and objs[0]["counters"] >= 1


def test_output_file_append_and_repeat(tmp_path):
    out = tmp_path / "stat.txt"
    stat("-o", str(out), "-e", "page-faults", "--", "true")
    stat("-o", str(out), "--append", "-r", "3", "-e", "page-faults", "--", "true")
    text = out.read_text()
    assert text.count("Performance counter stats for 'true'") == 2
    assert "(3 runs)" in text and "( +-" in text


def test_delay_skips_the_start():
    # 20 sleeps of 20 ms: one voluntary switch each; a 300 ms delay must miss a good part of them
    def switches(*extra):
        r = stat("-x", ",", "-e", "context-switches", *extra, "--", PY, "-m", "pmuscope.workloads", "sleeps", "20", "20")
        return int(r.stderr.strip().split(",")[0])

    full = switches()
    delayed = switches("-D", "300")
    assert full >= 20 and delayed <= full - 5


def test_ctrl_c_prints_what_was_counted():
    proc = subprocess.Popen(PMUSCOPE + ["stat", "-e", "task-clock,context-switches", "--", "sleep", "10"],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # the terminal sends SIGINT to the whole foreground group
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert "task-clock" in err and "seconds time elapsed" in err


SLEEPER = "import time; print('ready', flush=True); time.sleep(1.0); [time.sleep(0.01) for _ in range(30)]"


def test_attach_pid_until_it_exits():
    # the target announces itself, gives the tool 1 s to attach, then sleeps 30 times
    target = subprocess.Popen([PY, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        r = stat("-p", str(target.pid), "-x", ",", "-e", "context-switches", timeout=30)
        assert r.returncode == 0
        value = int(r.stderr.strip().split(",")[0])
        assert 30 <= value <= 80  # the 30 sleeps after attach (one switch each) + preemptions on a busy machine
    finally:
        target.kill()
        target.wait()


def test_bad_input_is_one_line():
    r = stat("-e", "no-such-event-xyz", "--", "true")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 4  # the message (plus the caret lines of a syntax error)
    r = stat("--per-core", "--", "true")
    assert r.returncode != 0 and "needs system-wide" in r.stderr and "Traceback" not in r.stderr
    r = stat("--", "/nonexistent/cmd-xyz")
    assert r.returncode == 127 and "cannot run" in r.stderr


THREADED = (
    "import threading, time, sys\n"
    "def spin():\n"
    "    end = time.time() + 1.5\n"
    "    while time.time() < end: time.sleep(0.01)\n"
    "ts = [threading.Thread(target=spin, name=f'w{i}') for i in range(3)]\n"
    "[t.start() for t in ts]\n"
    "print('ready', flush=True)\n"
    "[t.join() for t in ts]\n"
)


def test_per_thread_and_tid(read_path):  # pmuscope stat on each Counter.read path
    proc = subprocess.Popen([PY, "-c", THREADED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        tids = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        assert len(tids) == 4
        r = stat("-p", str(proc.pid), "--per-thread", "-x", ",", "-e", "context-switches", timeout=30)
        lines = r.stderr.strip().splitlines()
        csv_lint(lines, 7)
        rows = {int(line.split(",")[0].rsplit("-", 1)[1]): int(line.split(",")[1]) for line in lines}
        assert sorted(rows) == tids
        workers = [rows[t] for t in tids if t != proc.pid]
        assert all(v >= 20 for v in workers)  # each worker sleeps ~100 times a second
    finally:
        proc.kill()
        proc.wait()
    proc = subprocess.Popen([PY, "-c", THREADED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        worker = max(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        r = stat("-t", str(worker), "-j", "-e", "context-switches", timeout=30)
        obj = json_lint(r.stderr.strip().splitlines(), (5, 7))[0]
        assert float(obj["counter-value"]) >= 20
    finally:
        proc.kill()
        proc.wait()


def test_cgroup_option():
    root = None
    with open("/proc/mounts") as f:
        for line in f:
            p = line.split()
            if p[2] == "cgroup2":
                root = p[1]
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup2 hierarchy")
    name = f"pmuscope-stat-{os.getpid()}"
    path = os.path.join(root, name)
    os.mkdir(path)
    proc = subprocess.Popen([PY, "-c", "import time; input(); [time.sleep(0.01) for _ in range(200)]"],
                            stdin=subprocess.PIPE, text=True)
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(proc.pid))
        proc.stdin.write("\n")
        proc.stdin.flush()  # now in the cgroup: start sleeping (for ~2 s)
        r = stat("-a", "-G", name, "-x", ",", "-e", "context-switches", "--", "sleep", "0.2")
        assert r.returncode == 0, r.stderr
        value = int(r.stderr.strip().split(",")[0])
        assert 5 <= value <= 60  # ~20 sleeps of the cgroup's task in 0.2 s, nothing else
    finally:
        proc.kill()
        proc.wait()
        os.rmdir(path)
