"""Our report/script on perf.data written by the real Linux perf, compared
with perf report / perf script on the same file."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pmuscope.profile import build_report, format_script, load_profile

WORKLOAD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.5"]
#: overhead of a top symbol may differ by this many percentage points
TOLERANCE = 0.5


def _record(perf_bin, path, args):
    cmd = [perf_bin, "record", "-e", "cpu-clock", *args, "-o", str(path), "--", *WORKLOAD]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-200:]}")
    return str(path)


def _perf_report(perf_bin, path):
    out = subprocess.run([perf_bin, "report", "--stdio", "--no-children", "--sort", "comm,dso,sym", "-i", path],
                         capture_output=True, text=True, timeout=120).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+\[.\] (.+?)\s*$", line)
        if m:
            rows[(m.group(2), m.group(3), m.group(4))] = float(m.group(1))
    return rows, out


def _perf_sample_count(perf_bin, path):
    out = subprocess.run([perf_bin, "report", "--stats", "-i", path], capture_output=True, text=True, timeout=120).stdout
    return int(re.search(r"SAMPLE events:\s+(\d+)", out).group(1))


@pytest.mark.parametrize("args", [["-g"], [], ["-a"]], ids=["callgraph", "plain", "system-wide"])
def test_report_matches_perf_report(perf_bin, tmp_path, args):
    path = _record(perf_bin, tmp_path / "rec.data", args)
    prof = load_profile(path)
    assert len(prof) == _perf_sample_count(perf_bin, path)
    ours = build_report(prof, ("comm", "dso", "sym"))
    theirs, text = _perf_report(perf_bin, path)
    assert theirs, text[:2000]
    top = sorted(theirs.items(), key=lambda kv: -kv[1])[:5]
    mine = {(r.keys["comm"], r.keys["dso"], r.keys["sym"]): r.overhead for r in ours.rows}
    for key, pct in top:
        if pct < 2.0:
            continue
        assert key in mine, f"perf's row {key} ({pct}%) missing from ours: {list(mine)[:10]}"
        assert abs(mine[key] - pct) <= TOLERANCE, (key, mine[key], pct)


@pytest.mark.parametrize("args", [["-g"], []], ids=["callgraph", "plain"])
def test_script_matches_perf_script(perf_bin, tmp_path, args):
    path = _record(perf_bin, tmp_path / "rec.data", args)
    theirs = subprocess.run([perf_bin, "script", "-i", path], capture_output=True, text=True, timeout=120).stdout
    ours = format_script(load_profile(path))
    tl, ol = theirs.splitlines(), ours.splitlines()
    assert len(ol) == len(tl)
    # sample header lines (comm, tid, time, period, event) are identical
    heads_t = [ln.split(" cpu-clock:")[0] for ln in tl if ln and not ln.startswith("\t")]
    heads_o = [ln.split(" cpu-clock:")[0] for ln in ol if ln and not ln.startswith("\t")]
    assert heads_o == heads_t
    # addresses identical everywhere; symbol names identical for >= 99% of lines
    # (perf also names ld.so's zero-size _start/_dl_start_user and some PLT stubs)
    n = min(len(tl), 3000)

    def ip_of(line):
        if line.startswith("\t"):
            return line.split()[0]
        m = re.search(r":\s+([0-9a-f]+) \S", line.split("cpu-clock:")[-1]) if "cpu-clock:" in line else None
        return m.group(1) if m else None

    assert [ip_of(a) for a in ol[:n]] == [ip_of(b) for b in tl[:n]]
    same = sum(a == b for a, b in zip(ol[:n], tl[:n]))
    assert same >= 0.99 * n, [(a, b) for a, b in zip(ol[:n], tl[:n]) if a != b][:5]


def test_tracepoint_payloads_like_perf_script(perf_bin, tmp_path):
    path = str(tmp_path / "tp.data")
    r = subprocess.run([perf_bin, "record", "-e", "sched:sched_switch", "-a", "-o", path, "--", "sleep", "0.2"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"cannot record sched:sched_switch here: {r.stderr.strip()[-200:]}")
    theirs = subprocess.run([perf_bin, "script", "-i", path, "-F", "tid,trace"], capture_output=True, text=True,
                            timeout=120).stdout.splitlines()
    ours = subprocess.run([sys.executable, "-m", "pmuscope", "script", "-i", path, "-F", "tid,trace"],
                          capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert len(ours) == len(theirs) > 0
    fields = re.compile(r"(prev_pid|next_pid|next_comm|prev_prio)=(\S+)")
    for a, b in zip(ours, theirs):
        assert a.split()[0] == b.split()[0]  # tid
        assert dict(fields.findall(a)) == dict(fields.findall(b)), (a, b)


def test_small_report_text_is_perfs(perf_bin, tmp_path):
    """A few tens of user-space samples of several short processes (bash,
    pyenv, python3 ...): many rows tie, so perf's order of equal rows, its
    column widths and the sample count's unit all show. The whole table is
    perf's, byte for byte (past perf's first '#' lines and its closing tip)."""
    path = str(tmp_path / "small.data")
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock:u", "-c", "2000000", "-o", path, "--",
                        sys.executable, "-c", "sum(range(2 * 10**6))"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-200:]}")
    from tests.unit.test_report_perf_order import body

    theirs = subprocess.run([perf_bin, "report", "--stdio", "-i", path], capture_output=True, text=True,
                            timeout=120).stdout
    ours = subprocess.run([sys.executable, "-m", "pmuscope", "report", "--stdio", "-i", path], capture_output=True,
                          text=True, timeout=120).stdout
    assert body(theirs).count("\n") >= 8, theirs  # enough rows to mean something
    assert body(ours) == body(theirs)


SWEEP_FILES = ["perfdata/perf-g-small.data", "fixtures/perf_data_converter/perf.data.callgraph-3.8",
               "fixtures/perf_data_converter/perf.data.singleprocess-3.8"]
SWEEP_OPTS = ["--stats", "--no-children", "-q --no-children -g none", "--comms bash,python3 --no-children", "--sort dso,sym --no-children", "--sort pid --no-children", "-n --no-children",
              "--sort comm,dso --no-children", "--sort cpu --no-children -g none", "--sort cpu,comm,dso,sym -g none "
              "--no-children", "--no-children -g caller", "--no-children --percent-limit 0.5", "--no-children -G"]


@pytest.mark.parametrize("opts", SWEEP_OPTS)
@pytest.mark.parametrize("name", SWEEP_FILES)
def test_report_text_is_perfs_on_recordings(perf_bin, name, opts):
    """The whole --stdio text against perf's on recordings of this machine and
    of others (foreign kernels: module names from the file's MMAPs, no vdso).
    Not here: the Children view of call-chain files and sorts with ``sym`` but
    without ``dso`` (see tests/unit/test_report_perf_fixtures.py)."""
    from tests.conftest import DATA
    from tests.unit.test_report_perf_order import body

    path = str(DATA / name)
    theirs = subprocess.run([perf_bin, "report", "--stdio", *opts.split(), "-i", path], capture_output=True,
                            text=True, timeout=300)
    ours = subprocess.run([sys.executable, "-m", "pmuscope", "report", "--stdio", *opts.split(), "-i", path],
                          capture_output=True, text=True, timeout=300)
    if "no callchain" in theirs.stderr:  # perf says so and exits 0; a refusal is an error here
        assert ours.returncode == 1 and "has no call chains" in ours.stderr, ours.stderr
        return
    assert theirs.returncode == 0 and ours.returncode == 0, (theirs.stderr[-300:], ours.stderr[-300:])
    if "--stats" in opts.split():
        assert ours.stdout == theirs.stdout
        return
    if "-q" in opts.split():  # the rows alone
        assert [ln.rstrip() for ln in ours.stdout.splitlines()] == [ln.rstrip() for ln in theirs.stdout.splitlines()]
        return
    assert body(ours.stdout) == body(theirs.stdout)


SCRIPT_OPTS = ["--ns", "--ns -G --deltatime", "-F -ip", "-F +period,-ip", "-F comm,tid,sym,dso", "-F -dso", "-F comm,tid,ip,dso", "--max-stack 1",
               "--reltime", "--deltatime -G", "--deltatime --max-stack 3", "--header-only", "--header -G"]


@pytest.mark.parametrize("opts", SCRIPT_OPTS)
def test_script_text_is_perfs_with_options(perf_bin, opts):
    """perf script's options: -F changes to the default fields (+name/-name), sym and dso
    only beside an ip, --max-stack, --reltime/--deltatime, the file header. (The foreign
    recording of the report sweep is left out: perf names some of its kernel modules by the
    modules this machine has.)"""
    from tests.conftest import DATA

    path = str(DATA / SWEEP_FILES[0])
    theirs = subprocess.run([perf_bin, "script", *opts.split(), "-i", path], capture_output=True, timeout=300)
    ours = subprocess.run([sys.executable, "-m", "pmuscope", "script", *opts.split(), "-i", path],
                          capture_output=True, timeout=300)
    assert ours.returncode == 0, ours.stderr[-300:]
    assert ours.stdout == theirs.stdout


def test_script_refuses_what_perf_refuses(perf_bin):
    from tests.conftest import DATA

    path = str(DATA / SWEEP_FILES[0])
    for opts in (["-F", "-sym"], ["-F", "comm,cpu"]):
        theirs = subprocess.run([perf_bin, "script", *opts, "-i", path], capture_output=True, text=True, timeout=60)
        ours = subprocess.run([sys.executable, "-m", "pmuscope", "script", *opts, "-i", path], capture_output=True,
                              text=True, timeout=60)
        assert not theirs.stdout.strip() and theirs.stderr.strip()  # perf prints nothing but its complaint
        assert ours.returncode == 1 and not ours.stdout and ours.stderr.count("\n") == 1, ours.stderr
