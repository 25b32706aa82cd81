"""pmuscope.count() against the running kernel (software events; hardware ones
skip with the reason when the machine has no PMU)."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

import pytest

import pmuscope
from pmuscope import errors
from pmuscope.counting import count, online_cpus

from ..conftest import requires_hardware_pmu, run_python

#: every test here runs over both Counter.read paths (native helper, pure Python)
pytestmark = pytest.mark.usefixtures("read_path")

PAGES_PER_MIB = 1024 * 1024 // mmap.PAGESIZE
WORKLOAD = [sys.executable, "-m", "pmuscope.workloads"]


def touch(mib):
    size = mib * 1024 * 1024
    buf = mmap.mmap(-1, size)
    for off in range(0, size, mmap.PAGESIZE):
        buf[off] = 1
    buf.close()


def test_self_counting_sees_page_faults_of_fresh_memory():
    with count("page-faults,minor-faults,task-clock") as c:
        touch(16)
    r = c.last
    assert 16 * PAGES_PER_MIB <= r["minor-faults"].value < 16 * PAGES_PER_MIB + 500
    assert r["page-faults"].value >= r["minor-faults"].value
    assert r["task-clock"].value > 0 and r["task-clock"].ratio == 1.0


def test_group_is_one_read_and_shares_times(read_path):
    c = count("{task-clock,page-faults,context-switches}")
    c.start()
    assert c.read_path == read_path
    touch(4)
    before = time.monotonic_ns()
    r = c.read()
    assert before <= r.timestamp_ns <= time.monotonic_ns() and r.start_ns == c.start_ns
    assert len(c._read_plan) == 1  # one read() for the whole group
    evs = list(r)
    assert len({(e.time_enabled, e.time_running) for e in evs}) == 1
    assert r["page-faults"].value >= 4 * PAGES_PER_MIB
    c.stop()
    frozen = c.read()["page-faults"].value
    touch(2)
    assert c.read()["page-faults"].value == frozen  # stopped counters do not move
    c.reset()
    assert c.read()["page-faults"].value == 0
    c.close()


def test_workload_counted_from_exec_and_exit_status():
    c = count("page-faults,task-clock", command=WORKLOAD + ["touch", "32"])
    c.start()
    assert c.wait() == 0
    r = c.read()
    c.close()
    assert 32 * PAGES_PER_MIB <= r["page-faults"].value < 32 * PAGES_PER_MIB + 10000  # + interpreter start-up
    c = count("task-clock", command=[sys.executable, "-c", "raise SystemExit(3)"])
    with c:
        assert c.wait() == 3


def test_workload_that_cannot_exec():
    c = count("task-clock", command=["/nonexistent/pmuscope-no-such-binary"])
    with pytest.raises(errors.PmuscopeError) as info:
        c.start()
    c.close()
    assert info.value.exit_code == 127 and "No such file" in str(info.value)


@pytest.mark.parametrize("inherit", [True, False])
def test_inherit_follows_children(inherit):
    child = f"import subprocess, sys; subprocess.run({WORKLOAD + ['touch', '32']!r})"
    c = count("page-faults", command=[sys.executable, "-c", child], inherit=inherit)
    with c:
        assert c.wait() == 0
    faults = c.last["page-faults"].value
    if inherit:
        assert faults >= 32 * PAGES_PER_MIB
    else:
        assert faults < 32 * PAGES_PER_MIB  # only the parent python


def test_attach_to_pid_follows_threads_started_later():
    code = (
        "import sys, threading, mmap\n"
        "sys.stdin.readline()\n"
        "def work():\n"
        "    b = mmap.mmap(-1, 32 << 20)\n"
        "    for o in range(0, 32 << 20, mmap.PAGESIZE): b[o] = 1\n"
        "t = threading.Thread(target=work); t.start(); t.join()\n"
        "print('done', flush=True); sys.stdin.readline()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        c = count("page-faults", pid=proc.pid)
        c.start()
        assert c.threads == sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        r = c.read()
        c.close()
        # the thread did not exist at attach time: inherit cloned the counter into it
        assert r["page-faults"].value >= 32 * PAGES_PER_MIB
    finally:
        proc.kill()
        proc.wait()


def test_system_wide_per_cpu():
    cpus = online_cpus()
    with count("cpu-clock", cpus="all") as c:
        time.sleep(0.1)
    per_cpu = c.last.per_cpu()
    assert sorted(per_cpu) == cpus
    for cpu, evs in per_cpu.items():
        assert 0.05e9 < evs["cpu-clock"].value < 1e9  # cpu-clock ticks for each CPU, busy or idle
    assert c.last["cpu-clock"].value == sum(e["cpu-clock"].value for e in per_cpu.values())


def _cgroup2_root():
    with open("/proc/mounts") as f:
        for line in f:
            p = line.split()
            if p[2] == "cgroup2":
                return p[1]
    return None


def test_cgroup_counts_only_its_tasks():
    root = _cgroup2_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup2 hierarchy")
    path = os.path.join(root, f"pmuscope-test-{os.getpid()}")
    os.mkdir(path)
    # a fixed amount of work (not a wall-clock loop: on a loaded machine that gets a fraction of a CPU)
    proc = subprocess.Popen(WORKLOAD + ["iterations", "40000"], stdin=subprocess.DEVNULL)
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(proc.pid))
        with count("task-clock", cgroup=path) as c:
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        busy = c.last["task-clock"].value
        cpu_ns = (ru.ru_utime + ru.ru_stime) * 1e9  # the kernel's own account of the child's CPU time
        with count("task-clock", cgroup=path) as c:
            time.sleep(0.2)  # the cgroup is empty now
        # all of the child's CPU time after it joined the cgroup and none of anyone else's: at most its whole
        # CPU time, at least what its work took beyond the interpreter's start (well under half of it)
        assert 0.5 * cpu_ns <= busy <= cpu_ns * 1.02 + 5e6, (busy, cpu_ns)
        assert c.last["task-clock"].value == 0
    finally:
        proc.kill()
        proc.wait()
        os.rmdir(path)


def test_pid_that_does_not_exist():
    with pytest.raises(errors.ProcessGoneError):
        count("task-clock", pid=2**22 + 12345)


def test_hardware_group_and_multiplexing():
    requires_hardware_pmu()
    with count("{cycles,instructions}") as c:
        sum(range(200000))
    r = c.last
    assert r["cycles"].counted and r["instructions"].value > 100000
    # more cycles events than the PMU has counters: they take turns and are scaled
    with count(",".join(["cycles"] * 12)) as c:
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            pass
    evs = list(c.last)
    multiplexed = [e for e in evs if e.multiplexed]
    if not multiplexed:
        pytest.skip("the PMU scheduled 12 events at once (no multiplexing to check)")
    for e in multiplexed:
        assert e.scaled == pytest.approx(e.value * e.time_enabled / e.time_running)


def test_read_errors_are_raised_as_os_read_raises_them(read_path):
    c = count("task-clock").start()
    c.read()
    fd = c._read_plan[0][0]
    d = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    os.dup2(d, fd)  # the counter's fd is now a directory: read() fails with EISDIR
    os.close(d)
    with pytest.raises(IsADirectoryError):
        c.read()
    c.close()
    with pytest.raises(errors.PmuscopeError, match="closed"):
        c.read()


def test_works_without_the_native_helper():
    """An install without a C compiler has no pmuscope._native: counting reads
    through the pure-Python reader and self-monitoring still imports."""
    code = (
        "import sys; sys.modules['pmuscope._native'] = None\n"  # import pmuscope._native -> ImportError
        "from pmuscope import count\n"
        "import pmuscope.observe\n"
        "with count('task-clock,page-faults') as c:\n"
        "    path = c.read_path\n"
        "    sum(range(100000))\n"
        "print(path, c.last['task-clock'].value > 0)\n"
    )
    assert run_python(code) == ["python", "True"]


def test_top_level_reexport():
    assert pmuscope.count is count
