"""Cost of Python frames (``pmuscope._pyperf``) for the recorded program.

Runs the bundled workloads' ``busy_iterations`` (recursive calls: the worst
case, every Python call goes through the trampoline) and a call-free loop in
fresh interpreters, alternately with and without the bootstrap environment
``pmuscope record``/``profile`` give a command (:func:`pmuscope.sampling.pyframes.child_env`),
and prints the median (over fresh interpreters) of the best of three in-process
runs (CPU time of the process), and the slowdown. On CPython <= 3.11
the frame-evaluation hook also stops ceval from inlining Python-to-Python
calls, which is part of the measured cost: the floor any PEP 523 tool pays.
That floor is measured too, where a C compiler is at hand: a hook that only
calls the default evaluator (built into a temporary directory), so the
share of the trampolines themselves is the difference between the two.

    python benchmarks/bench_pyframes.py [--rounds N] [--iterations N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

CALLS = """
import time
from pmuscope.workloads import busy_iterations
best = float("inf")
for _ in range(3):
    t = time.process_time(); busy_iterations({n}); best = min(best, time.process_time() - t)
print(best)
"""
LOOP = """
import time
def loop(n):
    t = 0
    for i in range(n):
        t += i * i % 7
    return t
best = float("inf")
for _ in range(3):
    t = time.process_time(); loop({n} * 60); best = min(best, time.process_time() - t)
print(best)
"""


#: the child removes the perf map it wrote (nothing reads it here)
CLEANUP = "\nimport os\np = f'/tmp/perf-{os.getpid()}.map'\nos.path.exists(p) and os.unlink(p)\n"


#: a frame-evaluation hook that does nothing but call the default evaluator (CPython 3.11)
HOOK_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
static PyObject *ev(PyThreadState *ts, struct _PyInterpreterFrame *f, int throw) {
    return _PyEval_EvalFrameDefault(ts, f, throw);
}
static PyObject *activate(PyObject *s, PyObject *a) {
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), ev);
    Py_RETURN_NONE;
}
static PyMethodDef m[] = {{"activate", activate, METH_NOARGS, NULL}, {NULL}};
static struct PyModuleDef md = {PyModuleDef_HEAD_INIT, "bench_hookonly", NULL, -1, m};
PyMODINIT_FUNC PyInit_bench_hookonly(void) { return PyModule_Create(&md); }
"""


def build_hook(tmp: str) -> str | None:
    """The directory of the hook-only module, or None (not CPython 3.11, no compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or sys.version_info[:2] != (3, 11) or sys.implementation.name != "cpython":
        return None
    src = os.path.join(tmp, "bench_hookonly.c")
    with open(src, "w") as f:
        f.write(HOOK_C)
    out = os.path.join(tmp, "bench_hookonly" + sysconfig.get_config_var("EXT_SUFFIX"))
    proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], src, "-o", out],
                          capture_output=True, text=True)
    return tmp if proc.returncode == 0 else None


def timed(code: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", code + CLEANUP], env=env, check=True, capture_output=True,
                         text=True).stdout
    return float(out.split()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=4000)
    args = ap.parse_args()
    sys.path.insert(0, SRC)
    from pmuscope.sampling.pyframes import child_env, helper_path

    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [base.get("PYTHONPATH")])])
    base.pop("PMUSCOPE_PYTHON_FRAMES", None)
    on = child_env(base)
    print(f"python {sys.version.split()[0]}; helper {helper_path() or 'not built'}")
    tmp = tempfile.mkdtemp(prefix="bench_pyframes.")
    hook_dir = build_hook(tmp)
    hook = None
    if hook_dir:
        hook = dict(base)
        hook["PYTHONPATH"] = os.pathsep.join([hook_dir, base["PYTHONPATH"]])
    else:
        print("hook-only floor: not measured (needs CPython 3.11 and a C compiler)")
    try:
        for name, code in (("busy_iterations (calls)", CALLS), ("loop (no calls)", LOOP)):
            code = code.format(n=args.iterations)
            off_t, on_t, hook_t = [], [], []
            for _ in range(args.rounds):
                off_t.append(timed(code, base))
                on_t.append(timed(code, on))
                if hook:
                    hook_t.append(timed("import bench_hookonly; bench_hookonly.activate()\n" + code, hook))
            a, b = statistics.median(off_t), statistics.median(on_t)
            line = f"{name:26s} off {a * 1000:8.1f} ms  on {b * 1000:8.1f} ms  slowdown {100 * (b / a - 1):+6.1f}%"
            if hook_t:
                h = statistics.median(hook_t)
                line += f"  (hook alone {h * 1000:8.1f} ms, {100 * (h / a - 1):+6.1f}%)"
            print(line)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
