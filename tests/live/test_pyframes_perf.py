"""Python frames on the running machine: Linux ``perf report`` names the
Python functions of a CPython <= 3.11 program run with pmuscope's bootstrap
(``py::QUALNAME:FILE``, from the trampolines' /tmp/perf-PID.map), pmuscope
names every trampoline address exactly as perf does on the same perf.data,
and ``pmuscope record`` sets it all up (or not, with ``--no-python-frames``).
Events are ``cpu-clock``: no hardware PMU needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from pmuscope.sampling import pyframes

pytestmark = pytest.mark.skipif(
    not (sys.implementation.name == "cpython" and sys.version_info < (3, 12)) or pyframes.helper_path() is None,
    reason="these check pmuscope._pyperf, which serves CPython <= 3.11 and is built only with a C compiler",
)

PM = [sys.executable, "-m", "pmuscope"]

WORKLOAD = textwrap.dedent("""
    import os, sys, time

    def pyframes_fib(n):
        return n if n < 2 else pyframes_fib(n - 1) + pyframes_fib(n - 2)

    def pyframes_spin(n):
        t = 0
        for i in range(n):
            t += i * i % 7
        return t

    def pyframes_main(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pyframes_fib(16)
            pyframes_spin(20000)

    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
    pyframes_main(float(sys.argv[1]))
""")
FUNCS = ("pyframes_fib", "pyframes_spin")


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("pyframes") / "pyframes_workload.py"
    path.write_text(WORKLOAD)
    return str(path)


def _remove_map(pidfile) -> None:
    try:
        os.unlink(f"/tmp/perf-{int(open(pidfile).read())}.map")
    except (OSError, ValueError):
        pass


def _perf_record(perf_bin, out, workload, env, args=("--call-graph", "dwarf")):
    """perf record the workload; returns (perf.data, file holding the workload's pid)."""
    pidfile = f"{out}.pid"
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock", "-F", "2000", *args, "-o", str(out), "--",
                        sys.executable, workload, "1.0", pidfile], env=env, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-300:]}")
    return str(out), pidfile


def _py_names(text: str) -> set[str]:
    return set(re.findall(r"(py::[^\s+]+)", text))


@pytest.fixture(scope="module")
def perf_dwarf_file(tmp_path_factory, workload):
    import shutil

    perf_bin = shutil.which("perf")
    if not perf_bin:
        pytest.skip("Linux perf is not installed (apt-get install linux-perf)")
    d = tmp_path_factory.mktemp("pyframes_perf")
    path, pidfile = _perf_record(perf_bin, d / "dwarf.data", workload, pyframes.child_env())
    yield perf_bin, path
    _remove_map(pidfile)  # perf read it: report and script ran


def test_perf_report_names_the_python_functions(perf_dwarf_file, workload):
    perf_bin, path = perf_dwarf_file
    out = subprocess.run([perf_bin, "report", "--stdio", "--no-children", "-i", path],
                         capture_output=True, text=True, timeout=180).stdout
    names = _py_names(out)
    for fn in FUNCS:
        assert f"py::{fn}:{workload}" in names, sorted(names)[:20]


def test_without_python_frames_perf_names_none(perf_bin, tmp_path, workload):
    env = dict(os.environ)
    env.pop(pyframes.ENV_FLAG, None)
    path, pidfile = _perf_record(perf_bin, tmp_path / "off.data", workload, env)
    assert not os.path.exists(f"/tmp/perf-{int(open(pidfile).read())}.map")
    out = subprocess.run([perf_bin, "report", "--stdio", "--no-children", "-i", path],
                         capture_output=True, text=True, timeout=180).stdout
    assert "_PyEval_EvalFrameDefault" in out and not _py_names(out)


def _perf_script_py_addresses(perf_bin, path):
    """(pid, address, name) of every sample ip and call-chain entry perf names py::..."""
    out = subprocess.run([perf_bin, "script", "-i", path], capture_output=True, text=True, timeout=180).stdout
    found, pid = [], None
    for line in out.splitlines():
        if line and not line[0].isspace() or re.match(r"^\s+\S+\s+\d+\s+[\d.]+:", line):
            m = re.match(r"^\s*\S+\s+(\d+)", line)
            pid = int(m.group(1)) if m else None
            continue
        m = re.match(r"^\s+([0-9a-f]+) (py::.+?)\+0x[0-9a-f]+ \(", line)
        if m and pid is not None:
            found.append((pid, int(m.group(1), 16), m.group(2)))
    return found


def test_pmuscope_names_trampoline_addresses_like_perf(perf_dwarf_file):
    """Every address perf names through a trampoline (leaf samples and the
    call-chain entries its DWARF unwinder found) is named the same by
    pmuscope's symbolizer, with the maps of the same perf.data."""
    from pmuscope.profile import load_profile

    perf_bin, path = perf_dwarf_file
    theirs = _perf_script_py_addresses(perf_bin, path)
    assert len(theirs) >= 10, theirs[:5]
    prof = load_profile(path)
    sym = prof.symbolizer
    mismatched = [(pid, hex(ip), name, sym.resolve(pid, ip)[1]) for pid, ip, name in set(theirs)
                  if sym.resolve(pid, ip)[1] != name]
    assert not mismatched, mismatched[:5]


def _report_py_rows_perf(perf_bin, path):
    out = subprocess.run([perf_bin, "report", "--stdio", "--no-children", "--sort", "dso,sym", "-F", "sample,dso,sym",
                          "-i", path], capture_output=True, text=True, timeout=180).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s+(\d+)\s+(.+?)\s+\[\.\] (py::.+?)\s*$", line)  # names hold spaces: <frozen x>
        if m:  # two code objects may share a name: one row each
            key = (m.group(2).strip(), m.group(3))
            rows[key] = rows.get(key, 0) + int(m.group(1))
    return rows


def _record(tmp_path, workload, *flags, seconds="1.0", result=False):
    data, pidfile = tmp_path / "rec.data", tmp_path / "pid"
    r = subprocess.run(PM + ["record", "-e", "cpu-clock", "-F", "20000", *flags, "-o", str(data), "--",
                             sys.executable, workload, seconds, str(pidfile)],
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0 and "perf_event_open" in r.stderr:
        pytest.skip(f"cannot record here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    if result:
        return str(data), int(pidfile.read_text()), r
    return str(data), int(pidfile.read_text())


def test_pmuscope_record_names_python_functions_like_perf(perf_bin, tmp_path, workload):
    """``pmuscope record`` starts the command with Python frames: its map is
    written, and the samples that land in trampolines are reported under the
    same names, DSO and counts by ``perf report`` and ``pmuscope report``."""
    from pmuscope.profile import build_report, load_profile

    path, pid, r = _record(tmp_path, workload, result=True)
    mapfile = f"/tmp/perf-{pid}.map"
    try:
        names = {ln.split(" ", 2)[2].rstrip("\n") for ln in open(mapfile)}
        for fn in FUNCS + ("pyframes_main",):
            assert f"py::{fn}:{workload}" in names
        theirs = _report_py_rows_perf(perf_bin, path)
        assert theirs, "perf report shows no sample inside a trampoline (too few samples?)"
        rep = build_report(load_profile(path), ("dso", "sym"))
        mine: dict = {}
        for row in rep.rows:
            if row.keys["sym"].startswith("py::"):
                key = (row.keys["dso"], row.keys["sym"])
                mine[key] = mine.get(key, 0) + row.samples
        assert mine == theirs, r.stderr
    finally:
        os.unlink(mapfile)


def test_no_python_frames_flag(tmp_path, workload):
    t0 = time.time()
    _, pid = _record(tmp_path, workload, "--no-python-frames", seconds="0.2")
    # no map written by this run (a map of an earlier process with the same pid may still lie in /tmp:
    # maps outlive their process so that reports can name JIT code; pids are reused)
    path = f"/tmp/perf-{pid}.map"
    assert not os.path.exists(path) or os.stat(path).st_mtime < t0 - 1, path


def _wait_for(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("with_map", [False, True], ids=["no-map", "map"])
def test_attach_to_python_process(tmp_path, with_map):
    """``-p`` of a Python process: a note when it has no map (nothing can be
    done for a 3.11 process already running), silence when it has one."""
    env = pyframes.child_env() if with_map else {k: v for k, v in os.environ.items() if k != pyframes.ENV_FLAG}
    proc = subprocess.Popen([sys.executable, "-c", "import time\nfor _ in range(600): time.sleep(0.05)"], env=env)
    try:
        if with_map:
            assert _wait_for(lambda: os.path.exists(f"/tmp/perf-{proc.pid}.map"))
        else:
            assert _wait_for(lambda: "python" in os.path.basename(os.readlink(f"/proc/{proc.pid}/exe")))
        r = subprocess.run(PM + ["record", "-e", "cpu-clock", "-p", str(proc.pid), "--duration", "0.3",
                                 "-o", str(tmp_path / "p.data")], capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and "perf_event_open" in r.stderr:
            pytest.skip(f"cannot record here: {r.stderr.strip()[-200:]}")
        assert r.returncode == 0, r.stderr
        noted = "without a perf map" in r.stderr
        assert noted is (not with_map), r.stderr
        if noted:
            assert r.stderr.count("without a perf map") == 1
    finally:
        proc.kill()
        proc.wait()
        try:
            os.unlink(f"/tmp/perf-{proc.pid}.map")
        except OSError:
            pass


def test_main_job_folded_stacks_show_python_functions(tmp_path):
    """The README's main job: the demo's Python functions nest in the folded
    stacks (demo -> busy_iterations -> fib), interleaved with the evaluator's
    C frames. Needs pmuscope's DWARF unwinder (``pmuscope.unwind``) to walk
    libpython, which has no frame pointers; enabled by its presence."""
    from pmuscope.profile import folded_stacks, load_profile

    data = tmp_path / "demo.data"
    r = subprocess.run(PM + ["record", "-q", "-e", "cpu-clock", "--call-graph", "dwarf", "-o", str(data), "--",
                             sys.executable, "-m", "pmuscope.workloads", "demo"],
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0 and "perf_event_open" in r.stderr:
        pytest.skip(f"cannot record here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    prof = load_profile(str(data))
    folded = folded_stacks(prof)
    for pid in set(prof.pid.tolist()):
        try:
            os.unlink(f"/tmp/perf-{pid}.map")
        except OSError:
            pass
    pat = re.compile(r"py::demo:[^;]*workloads/__init__\.py;.*py::busy_iterations:[^;]*;.*py::fib:")
    hits = sum(n for stack, n in folded.items() if pat.search(stack))
    assert hits > 0, "\n".join(sorted(folded, key=folded.get, reverse=True)[:10])
    # between two Python functions sit the evaluator's C frames
    assert any(re.search(r"py::busy_iterations:[^;]*;(?:[^;]*;)*_PyEval_EvalFrameDefault;(?:[^;]*;)*py::fib:", s)
               for s in folded)


def test_readme_main_job_prints_the_python_functions(tmp_path):
    """`pmuscope profile -- python3 -m pmuscope.workloads demo` (the README's first
    command) picks DWARF stacks here (libpython keeps no frame pointers) and prints
    the workload's Python functions and call paths, as py-spy would."""
    r = subprocess.run(PM + ["profile", "-o", str(tmp_path / "p"), "--", sys.executable, "-m",
                             "pmuscope.workloads", "demo"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "# Python functions" in out and "# Hottest Python call paths" in out, out
    table = out.split("# Python functions", 1)[1].split("# Hottest", 1)[0].splitlines()[1:]
    rows = {line.split()[2]: float(line.split()[0].rstrip("%"))
            for line in table if line.startswith("  ") and line.split()[0].endswith("%")}
    for func in ("demo", "fib", "busy_iterations"):
        assert rows.get(func, 0) > 5, (func, rows)
    assert re.search(r"demo -> busy_iterations -> fib", out), out
    folded = (tmp_path / "p.folded").read_text()
    assert "py::busy_iterations:" in folded


def _samples(script_text: str) -> list[list[str]]:
    """perf script's samples as lists of their call-chain symbols, leaf first."""
    out, cur = [], None
    for line in script_text.splitlines():
        if not line.strip():
            if cur is not None:
                out.append(cur)
            cur = None
        elif line[0].isspace() and cur is not None:
            parts = line.split(None, 1)
            if len(parts) == 2:
                cur.append(parts[1].rsplit(" (", 1)[0])
        else:
            cur = []
    if cur is not None:
        out.append(cur)
    return out


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the helper writes jitdumps on x86-64 only")
@pytest.mark.parametrize("recorder", ["perf", "pmuscope"])
def test_perf_inject_jit_unwinds_through_every_python_frame(perf_bin, tmp_path, workload, recorder):
    """With the jitdump, ``perf inject --jit`` gives perf the trampolines' CFI:
    its DWARF unwinder then walks from fib through the evaluator frames to
    pyframes_main and <module>, where without it every stack stops at the
    innermost Python function. Recorded by perf with our environment, or by
    ``pmuscope record -k monotonic``, which sets the jitdump up itself."""
    import glob

    data, pidfile = tmp_path / "jit.data", tmp_path / "pid"
    args = ["record", "-q", "-k", "1" if recorder == "perf" else "monotonic", "--call-graph", "dwarf", "-e",
            "cpu-clock", "-F", "1000", "-o", str(data), "--", sys.executable, workload, "1.0", str(pidfile)]
    if recorder == "perf":
        r = subprocess.run([perf_bin, *args], env=pyframes.child_env(jitdump=True), capture_output=True, text=True,
                           timeout=180)
    else:
        r = subprocess.run(PM + args, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        pytest.skip(f"{recorder} record failed here: {r.stderr.strip()[-300:]}")
    pid = int(pidfile.read_text())
    try:
        injected = tmp_path / "jit.inj.data"
        r = subprocess.run([perf_bin, "inject", "--jit", "-i", str(data), "-o", str(injected)],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        assert glob.glob(f"/tmp/jitted-{pid}-*.so"), "perf inject generated no ELF for the trampolines"
        text = subprocess.run([perf_bin, "script", "-i", str(injected)], capture_output=True, text=True,
                              timeout=180).stdout
        fib, main = f"py::pyframes_fib:{workload}", f"py::pyframes_main:{workload}"
        in_fib = [s for s in _samples(text) if any(f.startswith(fib) for f in s)]
        assert in_fib
        whole = [s for s in in_fib
                 if any(f.startswith(main) for f in s[max(i for i, f in enumerate(s) if f.startswith(fib)):])
                 and any(f.startswith(f"py::<module>:{workload}") for f in s)]
        # nearly every stack through fib reaches its callers (a sample on the
        # trampoline's own push/pop may not)
        assert len(whole) >= 0.9 * len(in_fib), (len(whole), len(in_fib), in_fib[:2])
        nested = next(s for s in whole)
        i = next(k for k, f in enumerate(nested) if f.startswith(fib))
        assert any(f.startswith("_PyEval_EvalFrameDefault") for f in nested[i + 1:])  # C frames in between
    finally:
        for f in [f"/tmp/jit-{pid}.dump", f"/tmp/perf-{pid}.map", *glob.glob(f"/tmp/jitted-{pid}-*.so")]:
            try:
                os.unlink(f)
            except OSError:
                pass
