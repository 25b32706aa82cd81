"""``pmuscope record`` for real: files that Linux ``perf report``/``perf script``
read with the same sample counts and top symbol, call chains, tracepoints
with decoded RAW fields, attaching with -p, no losses at 10 kHz, Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest

from pmuscope.perfdata import PerfDataFile
from pmuscope.records import Comm, Mmap2, SampleBatch
from pmuscope.sampling import Recorder, read_format

BUSY = [sys.executable, "-m", "pmuscope.workloads", "busy"]
#: a fixed amount of CPU work (~0.6 s here): cpu-clock samples follow the task's CPU time,
#: so unlike a wall-clock busy loop the count does not drop when the machine is loaded
WORK = [sys.executable, "-m", "pmuscope.workloads", "iterations", "40000"]
PMUSCOPE = [sys.executable, "-m", "pmuscope"]


def _can_sample() -> str | None:
    try:
        with Recorder("cpu-clock", cmd=["true"], output=None) as rec:
            pass
        rec.close()
    except Exception as err:  # noqa: BLE001 - turned into a skip reason
        return f"cannot open sampling events here: {err}"
    return None


pytestmark = pytest.mark.skipif(bool(_can_sample()), reason=str(_can_sample()))


def record(tmp_path, *args, name="perf.data", timeout=60):
    out = tmp_path / name
    proc = subprocess.run([*PMUSCOPE, "record", "-o", str(out), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def perf(perf_bin, *args, timeout=120) -> str:
    proc = subprocess.run([perf_bin, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def perf_sample_count(perf_bin, path) -> int:
    out = perf(perf_bin, "report", "--stats", "-i", str(path))
    m = re.search(r"^\s*SAMPLE events:\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def our_top_symbol(path) -> tuple[str, int]:
    """Symbolize every sample ip of the file with pmuscope.symbols; the most frequent symbol."""
    from pmuscope.symbols import Symbolizer
    from pmuscope.symbols.maps import Maps

    f = PerfDataFile(str(path))
    maps = Maps()
    sym = Symbolizer(maps)
    names: Counter = Counter()
    # time order (FINISHED_ROUND rounds), as perf reads it: rings are drained CPU by CPU, so an
    # MMAP2 on one CPU can sit after samples taken on another CPU in the same round
    for item in f.records(ordered=True):
        if isinstance(item, SampleBatch):
            kernel = (item.cpumode == 1)
            res = sym.resolve_many(item.pid.astype(np.int64), item.ip, kernel)
            names.update(res.sym_names())
        else:
            maps.apply(item)
    return names.most_common(1)[0]


@pytest.fixture(scope="module")
def busy_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rec")
    out, proc = record(tmp, "-e", "cpu-clock", "-F", "2000", "-g", "--", *WORK)
    return out, proc


def test_summary_and_our_reader(busy_file):
    out, proc = busy_file
    m = re.search(r"Captured and wrote ([\d.]+) MB (\S+) \((\d+) samples\)", proc.stderr)
    assert m, proc.stderr
    n = int(m.group(3))
    assert 500 <= n <= 4000  # ~0.6 s of CPU at 2 kHz plus interpreter start-up
    f = PerfDataFile(str(out))
    assert f.sample_counts() == [n]
    assert f.event_names == ["cpu-clock"]
    assert abs(float(m.group(1)) - os.path.getsize(out) / 2**20) < 0.001


def test_perf_report_and_script_read_our_file(busy_file, perf_bin):
    out, _ = busy_file
    n = PerfDataFile(str(out)).sample_counts()[0]
    assert perf_sample_count(perf_bin, out) == n
    script = perf(perf_bin, "script", "-G", "-F", "comm,tid,ip,sym", "-i", str(out))
    lines = [ln for ln in script.splitlines() if ln.strip()]
    assert len(lines) == n
    report = perf(perf_bin, "report", "--stdio", "--no-children", "--sort", "sym", "-i", str(out))
    assert re.search(r"# Samples: \S+\s+of event 'cpu-clock'", report)
    rows = re.findall(r"^\s+([\d.]+)%\s+\[[.k]\]\s+(\S+)", report, re.M)
    assert rows, report[:2000]
    perf_top = rows[0][1]
    # the interpreter loop dominates a pure-Python busy loop
    assert perf_top.startswith(("_PyEval", "Py", "_Py")) or "python" in perf_top.lower(), rows[:5]
    ours, _count = our_top_symbol(out)
    assert ours == perf_top


def test_call_chains_recorded(busy_file, perf_bin):
    out, _ = busy_file
    depths = []
    for item in PerfDataFile(str(out)).records():
        if isinstance(item, SampleBatch):
            depths += np.diff(item.callchain_offsets).tolist()
    assert depths and np.median(depths) >= 3  # context marker + leaf + callers
    script = perf(perf_bin, "script", "-F", "comm,ip,sym,dso", "-i", str(out))
    frames = [ln for ln in script.splitlines() if ln.startswith("\t") or ln.startswith("  ")]
    assert any("libpython" in ln or "python" in ln for ln in frames)
    assert len(frames) > 2 * len(depths) // 2


def test_tracepoint_raw_fields_match_perf_script(tmp_path, perf_bin):
    # system-wide, with a workload that switches out 30 times of its own accord: a quiet
    # machine's background alone can leave a CPU without a single switch for 0.3 s
    out, _ = record(tmp_path, "-e", "sched:sched_switch", "-a", "--", sys.executable, "-m", "pmuscope.workloads", "sleeps", "30", "2")
    fmt = read_format("sched", "sched_switch")
    ours = []
    for item in PerfDataFile(str(out)).records():
        if isinstance(item, SampleBatch):
            cols = fmt.decode_batch(item.raw, item.raw_offsets)
            ours += list(zip(cols["prev_comm"], cols["prev_pid"].tolist(), cols["next_comm"], cols["next_pid"].tolist()))
    assert len(ours) >= 30
    assert sum(1 for prev_comm, *_ in ours if prev_comm == "python3" or prev_comm.startswith("python")) >= 30
    script = perf(perf_bin, "script", "-F", "trace", "-i", str(out))
    theirs = []
    for ln in script.splitlines():
        m = re.search(r"prev_comm=(.*?) prev_pid=(\d+) .* next_comm=(.*?) next_pid=(\d+)", ln)
        if m:
            theirs.append((m.group(1), int(m.group(2)), m.group(3), int(m.group(4))))
    assert sorted(theirs) == sorted(ours)


def test_attach_to_running_process(tmp_path, perf_bin):
    target = subprocess.Popen([*BUSY, "5"])
    try:
        time.sleep(0.5)  # let it import and start spinning
        out, _ = record(tmp_path, "-e", "cpu-clock", "-F", "1000", "-p", str(target.pid), "--duration", "0.5")
    finally:
        target.kill()
        target.wait()
    f = PerfDataFile(str(out))
    comms, maps, pids = [], [], set()
    for item in f.records():
        if isinstance(item, Comm):
            comms.append((item.pid, item.comm))
        elif isinstance(item, Mmap2):
            maps.append((item.pid, item.filename))
        elif isinstance(item, SampleBatch):
            pids.update(item.pid.tolist())
    assert (target.pid, os.path.basename(sys.executable)[:15]) in comms
    assert any(pid == target.pid and "python" in os.path.basename(name) for pid, name in maps)
    assert pids == {target.pid}
    assert f.sample_counts()[0] >= 50
    report = perf(perf_bin, "report", "--stdio", "--sort", "comm,dso", "-i", str(out))
    assert re.search(r"%\s+python3?\S*\s+\S*(libpython|python)", report), report[:1500]


def test_no_lost_samples_at_10khz(tmp_path, perf_bin):
    from pmuscope.sampling.session import max_sample_rate

    # the kernel lowers perf_event_max_sample_rate after slow sampling interrupts (busy VMs):
    # then this checks the highest rate it still allows
    rate = min(10000, max_sample_rate() or 10000)
    # ~1 s of CPU work (not wall time): the sample count does not depend on the machine's load
    out, proc = record(tmp_path, "-e", "cpu-clock", "-F", str(rate), "-g", "--", *WORK[:-1], "70000")
    assert not re.search(r"\d+ lost|warning", proc.stderr), proc.stderr
    f = PerfDataFile(str(out))
    counts = f.counts()
    assert counts.get(2, 0) == 0 and counts.get(13, 0) == 0  # PERF_RECORD_LOST, LOST_SAMPLES
    assert f.sample_counts()[0] >= rate * 0.3
    stats = perf(perf_bin, "report", "--stats", "-i", str(out))
    assert "LOST" not in stats


def test_true_exits_quickly_with_its_status(tmp_path, perf_bin):
    # perf 6.1 waits ~1 s for its side-band thread; pmuscope waits on nothing. The speed itself is
    # benchmarks/bench_record.py's to measure: here only "no wait of its own", with room for a loaded
    # machine (both take longer there, and not by the same amount)
    t0 = time.monotonic()
    subprocess.run([perf_bin, "record", "-q", "-o", str(tmp_path / "p.data"), "--", "true"], capture_output=True,
                   timeout=60)
    theirs = time.monotonic() - t0
    t0 = time.monotonic()
    out, proc = record(tmp_path, "--", "true")
    wall = time.monotonic() - t0
    assert wall < max(3.0, 2 * theirs), f"recording `true` took {wall:.2f}s (perf record: {theirs:.2f}s)"
    assert PerfDataFile(str(out)).attrs
    failing = subprocess.run([*PMUSCOPE, "record", "-q", "-o", str(tmp_path / "f.data"), "--", "sh", "-c", "exit 7"],
                             capture_output=True, timeout=60)
    assert failing.returncode == 7


def test_recording_a_command_never_imports_numpy(tmp_path, perf_bin):
    """The whole run (open, synthesize, drain, build-ids, features) is
    numpy-free: ``import numpy`` alone is ~45 ms of a ~0.1 s ``record -- true``."""
    out = tmp_path / "n.data"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pmuscope", "record", "-o", str(out), "-g",
                           "--", *WORK[:3], "iterations", "2000"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "pmuscope.sampling.session" in imported  # the measurement saw the recording
    assert not {m for m in imported if m == "numpy" or m.startswith("numpy.")}, "record imported numpy"
    assert "Captured and wrote" in proc.stderr and perf_sample_count(perf_bin, out) > 0


def test_ctrl_c_writes_a_valid_file(tmp_path, perf_bin):
    out = tmp_path / "int.data"
    proc = subprocess.Popen([*PMUSCOPE, "record", "-e", "cpu-clock", "-F", "1000", "-a", "-o", str(out)],
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Captured and wrote" in err
    n = PerfDataFile(str(out)).sample_counts()[0]
    assert n > 0 and perf_sample_count(perf_bin, out) == n


def test_live_iteration_from_python():
    rec = Recorder("cpu-clock", freq=1000, cmd=WORK, output=None)
    rec.start()
    samples = 0
    comm_exec = False
    for item in rec.records(interval=0.05):
        if isinstance(item, SampleBatch):
            samples += len(item)
        elif isinstance(item, Comm) and item.exec:
            comm_exec = True
    result = rec.close()
    assert comm_exec and samples == result.samples >= 100
    assert result.exit_status == 0


def test_pipe_mode_to_perf_script(perf_bin):
    rec = subprocess.run([*PMUSCOPE, "record", "-q", "-e", "cpu-clock", "-F", "2000", "-o", "-", "--", *WORK],
                         capture_output=True, timeout=60)
    assert rec.returncode == 0, rec.stderr
    ours = PerfDataFile(rec.stdout)
    assert ours.pipe
    n = ours.sample_counts()[0]
    assert n > 100
    script = subprocess.run([perf_bin, "script", "-F", "comm,ip", "-i", "-"], input=rec.stdout, capture_output=True,
                            timeout=60)
    assert script.returncode == 0, script.stderr[-500:]
    assert len([ln for ln in script.stdout.decode().splitlines() if ln.strip()]) == n


def test_default_event_follows_the_hardware(tmp_path, perf_bin):
    from tests.conftest import hardware_pmu_reason

    out, _ = record(tmp_path, "--", *BUSY, "0.2")
    name = PerfDataFile(str(out)).event_names[0]
    assert name == ("cycles" if hardware_pmu_reason() is None else "cpu-clock")
    # (perf evlist rather than report: with the counters taken by another pinned session cycles may get no samples)
    assert perf(perf_bin, "evlist", "-i", str(out)).split() == [name]


def test_attach_ends_when_the_process_exits(tmp_path):
    # a fixed amount of CPU work (~1.5 s of CPU time), not a wall-clock loop: on a
    # loaded machine it only takes longer, so the attach (pmuscope's start-up, slower
    # under load too) still finds it running
    target = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "iterations", "100000"])
    try:
        time.sleep(0.3)
        out, proc = record(tmp_path, "-e", "cpu-clock", "-F", "500", "-p", str(target.pid), timeout=30)
    finally:
        target.kill()
        target.wait()
    assert PerfDataFile(str(out)).sample_counts()[0] > 0
    f = PerfDataFile(str(out))
    assert f.counts().get(4, 0) >= 1  # the kernel's PERF_RECORD_EXIT of the target was drained before closing


@pytest.mark.parametrize("args", [
    ["-e", "cpu-clock", "-F", "1000", "-g"],
    ["-e", "cpu-clock", "-c", "100000"],
    ["-e", "cycles,instructions", "-F", "999"],
    ["-e", "{cpu-clock,task-clock}:u"],
], ids=["cpu-clock-F1000-g", "cpu-clock-c100000", "cycles,instructions", "group-u"])
def test_event_headers_match_perf_record(tmp_path, perf_bin, args):
    """The attrs as `perf report --header-only` prints them, for perf's file and ours (ids aside)."""
    if "cycles" in args[1]:
        from tests.conftest import requires_hardware_pmu

        requires_hardware_pmu()
    theirs = tmp_path / "perf.data"
    subprocess.run([perf_bin, "record", "-q", "-o", str(theirs), *args, "--", "true"], check=True,
                   capture_output=True, timeout=60)
    ours, _ = record(tmp_path, *args, "--", "true", name="ours.data")

    def events(path):
        # perf names the members of a modified group without the modifier ({cpu-clock,task-clock}:u -> cpu-clock);
        # the attrs carry the modifier either way, so names are compared without it
        out = perf(perf_bin, "report", "--header-only", "-i", str(path))
        lines = [re.sub(r"name = ([^,:]+)(:\w+)?,", r"name = \1,", re.sub(r"id = \{[^}]*\}", "id = {}", ln))
                 for ln in out.splitlines() if ln.startswith(("# event :", "# group:"))]
        return [re.sub(r":\w+(?=[,}])", "", ln) if ln.startswith("# group:") else ln for ln in lines]

    assert events(ours) == events(theirs)


def test_duration_ends_a_longer_command(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run([*PMUSCOPE, "record", "-q", "-e", "cpu-clock", "-o", str(tmp_path / "d.data"), "--duration",
                           "0.3", "--", "sleep", "30"], capture_output=True, timeout=60)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 128 + signal.SIGTERM  # the command was still running: SIGTERM, like perf
    assert PerfDataFile(str(tmp_path / "d.data")).attrs


def test_dwarf_call_graph_unwound_by_perf(tmp_path, perf_bin):
    # a fixed amount of CPU work (~0.6 s): as many samples on a loaded machine as on a quiet
    # one; without Python frames: perf's DWARF unwinder stops at the first Python
    # function's trampoline (no CFI; test_pyframes_perf covers that case)
    out, proc = record(tmp_path, "-e", "cpu-clock", "-F", "1000", "--call-graph", "dwarf", "--no-python-frames",
                       "--", *WORK)
    f = PerfDataFile(str(out))
    n = f.sample_counts()[0]
    assert n > 100 and perf_sample_count(perf_bin, out) == n
    stacks = 0
    for item in f.records():
        if isinstance(item, SampleBatch):
            sizes = np.diff(item.stack_user_offsets)
            stacks += int((sizes > 0).sum())
            assert item.regs_user is not None
    assert stacks > n // 2  # user stack copies on the user-mode samples
    report = perf(perf_bin, "report", "--stdio", "--no-children", "-i", str(out))
    # perf unwinds the copied stacks down to the interpreter's entry point
    assert "Py_RunMain" in report or "Py_BytesMain" in report or "pymain_run_python" in report, report[:3000]
