"""Cost of Python frames (``pmuscope._pyperf``) for the recorded program.

Runs the bundled workloads' ``busy_iterations`` (recursive calls: the worst
case, every Python call goes through the trampoline) and a call-free loop in
fresh interpreters, alternately with and without the bootstrap environment
``pmuscope record``/``profile`` give a command (:func:`pmuscope.sampling.pyframes.child_env`),
and prints the median (over fresh interpreters) of the best of three in-process
runs, and the slowdown. On CPython <= 3.11
the frame-evaluation hook also stops ceval from inlining Python-to-Python
calls, which is part of the measured cost.

    python benchmarks/bench_pyframes.py [--rounds N] [--iterations N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

CALLS = """
import time
from pmuscope.workloads import busy_iterations
best = float("inf")
for _ in range(3):
    t = time.perf_counter(); busy_iterations({n}); best = min(best, time.perf_counter() - t)
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
    t = time.perf_counter(); loop({n} * 60); best = min(best, time.perf_counter() - t)
print(best)
"""


#: the child removes the perf map it wrote (nothing reads it here)
CLEANUP = "\nimport os\np = f'/tmp/perf-{os.getpid()}.map'\nos.path.exists(p) and os.unlink(p)\n"


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
    for name, code in (("busy_iterations (calls)", CALLS), ("loop (no calls)", LOOP)):
        code = code.format(n=args.iterations)
        off_t, on_t = [], []
        for _ in range(args.rounds):
            off_t.append(timed(code, base))
            on_t.append(timed(code, on))
        a, b = statistics.median(off_t), statistics.median(on_t)
        print(f"{name:26s} off {a * 1000:8.1f} ms  on {b * 1000:8.1f} ms  slowdown {100 * (b / a - 1):+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
