"""Dwarf call graphs against Linux perf: programs built without frame
pointers (a shared-library call, a recursion) and a Python run, recorded by
``perf record --call-graph dwarf`` and by ``pmuscope record --call-graph
dwarf``; ``pmuscope script`` must print the same frames as ``perf script``
for at least 95% of the samples."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if __import__("platform").machine() not in ("x86_64", "amd64"):
    # the AArch64 register set and frame-pointer rule are unit-tested only
    pytest.skip("dwarf unwinding is compared with perf on x86-64 only so far", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

LIB_C = r"""
#include <math.h>
__attribute__((noinline)) double lib_work(double x, int n) {
  double s = 0; for (int i = 0; i < n; i++) s += sin(x + i) * 1.0001; return s;
}
"""
PROG_C = r"""
#include <stdio.h>
#include <stdlib.h>
double lib_work(double x, int n);
__attribute__((noinline)) double leaf(double x) { double s = 0; for (int i = 0; i < 2000; i++) s += x * i / (i + 1.0); return s; }
__attribute__((noinline)) double rec(int d, double x) { if (d == 0) return leaf(x) + lib_work(x, 500); return rec(d - 1, x + 1) * 0.5 + 1; }
__attribute__((noinline)) double mid(double x) { return rec(5, x) + leaf(x); }
int main(int argc, char **argv) { double t = 0; long n = argc > 1 ? atol(argv[1]) : 20000; for (long i = 0; i < n; i++) t += mid(i); printf("%f\n", t); return 0; }
"""
SIG_C = r"""
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
volatile double sink;
/* ~2 ms a call: longer than a sample period, so the handler is sampled whatever the phase of the
   itimer's ticks against the sampling clock (a 0.2 ms handler was hit 3 to 90 times a run) */
__attribute__((noinline)) void handler_work(void) { double s = 0; for (int i = 0; i < 2000000; i++) s += i * 0.5; sink = s; }
void on_alarm(int sig) { handler_work(); }
__attribute__((noinline)) double spin(long n) { double s = 0; for (long i = 0; i < n; i++) s += i / 3.0; return s; }
int main(void) {
  struct sigaction sa = {0}; sa.sa_handler = on_alarm; sigaction(SIGPROF, &sa, 0);
  sigset_t set; sigemptyset(&set); sigaddset(&set, SIGPROF); sigprocmask(SIG_UNBLOCK, &set, 0);  /* a blocked mask is inherited */
  struct itimerval it = {{0, 10000}, {0, 10000}}; setitimer(ITIMER_PROF, &it, 0);
  double t = 0; for (int k = 0; k < 120; k++) t += spin(3000000 + k);
  printf("%f\n", t); return 0;
}
"""
JIT_C = r"""
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
volatile double sink;
__attribute__((noinline)) void work(void) { double s = 0; for (int i = 0; i < 20000; i++) s += i * 0.25; sink = s; }
typedef void (*tramp_t)(void (*)(void));
int main(void) {
  /* a JIT trampoline like CPython's perf trampolines: push rbp; mov rbp, rsp; call *rdi; pop rbp; ret */
  static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
  unsigned char *mem = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  memcpy(mem, code, sizeof code);
  char path[64]; snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
  FILE *f = fopen(path, "w"); fprintf(f, "%lx %zx py::trampoline\n", (unsigned long)mem, sizeof code); fclose(f);
  tramp_t t = (tramp_t)mem;
  for (int k = 0; k < 20000; k++) t(work);
  printf("%f\n", sink);
  return 0;
}
"""
PY_WORK = ("import json, re\n"
           "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
           "for _ in range(3000): fib(12); json.dumps({'a': list(range(100))}); re.findall(r'\\d+', 'a1b22' * 40)\n")


def samples(text: str) -> list[list[str]]:
    """Each sample's frames as symbol names (offsets and addresses dropped)."""
    out = []
    for block in text.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        frames = []
        for ln in lines[1:]:
            m = re.match(r"^\s*[0-9a-f]+ (.*) \((.*)\)$", ln)
            if m:
                frames.append(re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)) + "@" + os.path.basename(m.group(2)))
        out.append(frames)
    return out


def agreement(ours: list[list[str]], theirs: list[list[str]]) -> float:
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    same = sum(a == b for a, b in zip(ours, theirs))
    return same / max(len(theirs), 1)


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("needs gcc")
    d = tmp_path_factory.mktemp("unwind")
    (d / "lib.c").write_text(LIB_C)
    (d / "prog.c").write_text(PROG_C)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", str(d / "libuw.so"),
                    str(d / "lib.c"), "-lm"], check=True)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(d / "prog"), str(d / "prog.c"),
                    f"-L{d}", "-luw", f"-Wl,-rpath,{d}"], check=True)
    return d


def perf_unwinds(perf: str) -> bool:
    """Whether this perf was built with a DWARF unwinder (libunwind or libdw)."""
    out = subprocess.run([perf, "version", "--build-options"], capture_output=True, text=True, timeout=60).stdout
    return bool(re.search(r"^\s*(libunwind|libdw-dwarf-unwind):\s*\[\s*on", out, re.M))


def perf_record(perf: str, out: Path, cmd: list[str]) -> None:
    if not perf_unwinds(perf):
        pytest.skip("this perf has no DWARF unwinder (built without libunwind and libdw): nothing to compare with")
    r = subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-F", "2000", "--call-graph", "dwarf,4096",
                        "-o", str(out), "--", *cmd], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not out.exists():
        pytest.skip(f"perf record --call-graph dwarf does not work here: {r.stderr.strip()[-300:]}")


def scripts(perf: str, data: Path) -> tuple[str, str]:
    theirs = subprocess.run([perf, "script", "--no-inline", "-i", str(data)], capture_output=True, text=True,
                            timeout=300).stdout
    r = subprocess.run([sys.executable, "-m", "pmuscope", "script", "-i", str(data)], capture_output=True,
                       text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr
    return r.stdout, theirs


def test_c_program_without_frame_pointers(perf_bin, prog):
    data = prog / "c.data"
    perf_record(perf_bin, data, [str(prog / "prog"), "60000"])
    ours, theirs = scripts(perf_bin, data)
    a, b = samples(ours), samples(theirs)
    assert agreement(a, b) >= 0.95
    # the unwinding went all the way: through the library, the recursion, to main
    mains = [s for s in a if "main@prog" in s]
    assert len(mains) >= 0.5 * len(a)
    assert any(s.count("rec@prog") == 6 and "lib_work@libuw.so" in s for s in a)
    fp = subprocess.run([sys.executable, "-m", "pmuscope", "script", "-i", str(data)], capture_output=True,
                        text=True, timeout=300, env={**ENV, "PMUSCOPE_UNWIND": "0"}).stdout
    assert not any("main@prog" in s for s in samples(fp))  # what the kernel chains alone give


def test_python_run(perf_bin, tmp_path):
    data = tmp_path / "py.data"
    perf_record(perf_bin, data, [sys.executable, "-c", PY_WORK])
    ours, theirs = scripts(perf_bin, data)
    a, b = samples(ours), samples(theirs)
    assert agreement(a, b) >= 0.95
    evals = [s for s in a if any(f.startswith("_PyEval_EvalFrameDefault@") for f in s)]
    assert len(evals) >= 0.3 * len(a)
    assert any(len(s) > 15 for s in evals)


def test_pmuscope_record_dwarf(perf_bin, prog):
    if not perf_unwinds(perf_bin):
        pytest.skip("this perf has no DWARF unwinder: nothing to compare with")
    data = prog / "pm.data"
    r = subprocess.run([sys.executable, "-m", "pmuscope", "record", "-q", "-e", "cpu-clock", "-F", "2000",
                        "--call-graph", "dwarf,4096", "-o", str(data), "--", str(prog / "prog"), "60000"],
                       capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr
    ours, theirs = scripts(perf_bin, data)
    a, b = samples(ours), samples(theirs)
    assert agreement(a, b) >= 0.95
    assert sum("main@prog" in s for s in a) >= 0.5 * len(a)


def test_report_and_folded_get_unwound_frames(perf_bin, prog):
    data = prog / "c2.data"
    perf_record(perf_bin, data, [str(prog / "prog"), "30000"])
    r = subprocess.run([sys.executable, "-m", "pmuscope", "report", "-i", str(data), "--stdio", "-g",
                        "--no-children"], capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr
    assert "main" in r.stdout and "lib_work" in r.stdout
    code = ("from pmuscope.profile import load_profile, folded_stacks\n"
            f"p = load_profile({str(data)!r})\n"
            "print(p.unwind_stats.summary())\n"
            "print('\\n'.join(folded_stacks(p)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr
    assert "dwarf unwinding:" in r.stdout
    assert any(ln.startswith("prog;_start;__libc_start_main") and ";main;mid;rec;rec;" in ln
               for ln in r.stdout.splitlines()), r.stdout[:2000]


def test_profile_uses_dwarf_where_frame_pointers_are_missing(tmp_path):
    from pmuscope.unwind.framepointers import frame_pointer_share, needed_libraries

    libs = [p for p in needed_libraries(os.path.realpath(sys.executable)) if "libpython" in p]
    shares = [frame_pointer_share(p) for p in [os.path.realpath(sys.executable)] + libs]
    if not any(s is not None and s[0] < 0.5 for s in shares):
        pytest.skip("this Python keeps frame pointers: profile keeps fp chains")
    prefix = str(tmp_path / "demo")
    r = subprocess.run([sys.executable, "-m", "pmuscope", "profile", "-e", "cpu-clock", "-o", prefix, "--top", "3",
                        "--", sys.executable, "-m", "pmuscope.workloads", "busy", "0.5"],
                       capture_output=True, text=True, timeout=300, env=ENV)
    if r.returncode != 0 and "perf_event_open" in r.stderr:
        pytest.skip(f"cannot record here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    assert "--call-graph dwarf" in r.stderr and "keeps no frame pointers" in r.stderr
    folded = open(prefix + ".folded").read().splitlines()
    full = [ln for ln in folded if re.match(r"^[^;]+;_start;__libc_start_main[^;]*;__libc_start_call_main;", ln)
            and "_PyEval_EvalFrameDefault" in ln]
    total = sum(int(ln.rsplit(" ", 1)[1]) for ln in folded)
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in full) >= 0.8 * total


def test_signal_frames(perf_bin, prog):
    """Samples in a signal handler unwind through the kernel's signal frame
    (glibc's __restore_rt CFI: DWARF expressions over the rt_sigframe) into
    the interrupted code, as perf unwinds them."""
    (prog / "sig.c").write_text(SIG_C)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(prog / "sig"), str(prog / "sig.c")], check=True)
    data = prog / "sig.data"
    perf_record(perf_bin, data, [str(prog / "sig")])
    ours, theirs = scripts(perf_bin, data)
    a, b = samples(ours), samples(theirs)
    assert agreement(a, b) >= 0.95
    through = [s for s in a if "handler_work@sig" in s and "main@sig" in s[s.index("handler_work@sig"):]]
    assert len(through) >= 10, sum("handler_work@sig" in s for s in a)


@pytest.mark.parametrize("args", [["--children"], ["--no-children"]], ids=["children", "no-children"])
def test_report_call_graphs_match_perf(perf_bin, prog, args):
    """``report``'s call graphs on a dwarf recording: perf report's top rows
    and branches (the comparison of tests/live/test_report_callgraph_perf.py)."""
    from tests.live.test_report_callgraph_perf import MIN_ROW, _compare_branches, lone_run, parse_trees

    data = prog / "rep.data"
    if not data.exists():
        perf_record(perf_bin, data, [str(prog / "prog"), "60000"])
    theirs = parse_trees(subprocess.run([perf_bin, "report", "--stdio", "--no-inline", "--sort", "comm,dso,sym",
                                         "-i", str(data), *args], capture_output=True, text=True,
                                        timeout=300).stdout)
    r = subprocess.run([sys.executable, "-m", "pmuscope", "report", "--sort", "comm,dso,sym", "-i", str(data), *args],
                       capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr
    ours = parse_trees(r.stdout)
    top = [(k, v) for k, v in theirs.items() if v[0] >= MIN_ROW]
    assert top
    compared = 0
    for key, (overhead, tree) in top:
        assert key in ours, (key, list(ours)[:8])
        mine, tree = lone_run(ours[key][1], ours[key][0]), lone_run(tree, overhead)
        assert mine[0] == tree[0], (key, mine[0][:5], tree[0][:5])
        compared += _compare_branches(tree[2], mine[2], str(key))
    assert compared >= 1


def test_jit_trampoline_frame_pointer_rule(perf_bin, prog):
    """Code in anonymous memory (named by /tmp/perf-PID.map) has no CFI: the
    frame-pointer rule steps through a ``push rbp; mov rbp, rsp; call``
    trampoline into its caller. (perf 6.1's libunwind unwinding stops at such
    frames: its chains are a prefix of ours.)"""
    (prog / "jit.c").write_text(JIT_C)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(prog / "jit"), str(prog / "jit.c")], check=True)
    data = prog / "jit.data"
    perf_record(perf_bin, data, [str(prog / "jit")])
    try:
        ours, theirs = scripts(perf_bin, data)
    finally:
        for pid in set(re.findall(r"^jit\s+(\d+) ", subprocess.run(
                [perf_bin, "script", "-F", "comm,pid", "-i", str(data)], capture_output=True, text=True,
                timeout=300).stdout, re.M)):
            Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)
    a, b = samples(ours), samples(theirs)
    assert len(a) == len(b)
    prefix = sum(x[:len(y)] == y for x, y in zip(a, b))
    assert prefix >= 0.95 * len(b)
    work = [s for s in a if s and s[0] == "work@jit"]
    assert work
    through = [s for s in work if s[1:3] == [f"py::trampoline@{s[1].split('@')[1]}", "main@jit"]
               and s[1].startswith("py::trampoline@perf-")]
    assert len(through) >= 0.9 * len(work), work[:3]
