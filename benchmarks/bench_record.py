"""Recording overhead and fixed costs: ``pmuscope record`` vs Linux ``perf record``
(ratios measured in one run, configurations interleaved, medians).

1. Slowdown of a CPU-bound workload (``pmuscope.workloads.busy_iterations(N)``,
   ~2 s, pinned to one CPU with ``taskset``) under ``pmuscope record -F 4000 -g``
   and under ``perf record -F 4000 -g`` (same event: cycles where a hardware
   PMU exists, else cpu-clock), against no profiler. The workload times itself
   (wall ``perf_counter`` and CPU ``process_time``), so profiler start-up and
   tear-down do not count. Target: pmuscope's slowdown <= 1.05x perf's.
2. Wall time of recording a command that exits at once (``-- true``): perf
   6.1 waits up to 1 s at exit for its side-band thread.

Both profilers are pinned to another CPU than the workload (``--profiler-cpu``,
default 0), so what is measured is the sampling cost on the workload's CPU, not
where the scheduler happens to wake the profiler.

    python benchmarks/bench_record.py [--iterations N] [--rounds R] [--event E] [--freq HZ] [-v]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

INNER = (
    "import time; from pmuscope.workloads import busy_iterations; "
    "w, c = time.perf_counter(), time.process_time(); busy_iterations({n}); "
    "print('INNER', time.perf_counter() - w, time.process_time() - c)"
)


def run_inner(prefix: list[str], n: int, cpu: int | None) -> tuple[float, float, str]:
    cmd = [sys.executable, "-c", INNER.format(n=n)]
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu)] + cmd
    proc = subprocess.run(prefix + cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(prefix[:3])} failed: {proc.stderr[-500:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("INNER"):
            _, w, c = line.split()
            return float(w), float(c), proc.stderr
    raise SystemExit(f"no timing line from {' '.join(prefix)}: {proc.stdout[-300:]}")


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, timeout=120, check=True)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=0, help="busy_iterations N (default: calibrated to ~2 s)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--event", default=None, help="event for both tools (default: pmuscope's default event)")
    ap.add_argument("--freq", type=int, default=4000)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="CPU to pin the workload to")
    ap.add_argument("--profiler-cpu", type=int, default=0 if (os.cpu_count() or 1) > 1 else None,
                    help="CPU to pin both profilers to (default 0: away from the workload); -1 for no pinning")
    args = ap.parse_args()

    perf = shutil.which("perf")
    if not perf:
        print("Linux perf is not installed: only pmuscope numbers")
    from pmuscope.sampling import default_event

    event = args.event or default_event()
    tmp = tempfile.mkdtemp(prefix="bench_record.")
    n = args.iterations
    if not n:
        w, _, _ = run_inner([], 20000, args.cpu)
        n = max(1000, int(20000 * 2.0 / max(w, 1e-3)))
    print(f"workload: busy_iterations({n}) pinned to CPU {args.cpu}; event {event} -F {args.freq} -g; {args.rounds} rounds"
          + (f"; profilers pinned to CPU {args.profiler_cpu}" if args.profiler_cpu not in (None, -1) else ""))

    pin = ["taskset", "-c", str(args.profiler_cpu)] if args.profiler_cpu not in (None, -1) and shutil.which("taskset") else []
    ours = pin + [sys.executable, "-m", "pmuscope", "record", "-q", "-e", event, "-F", str(args.freq), "-g",
            "-o", os.path.join(tmp, "ours.data"), "--"]
    theirs = pin + [perf, "record", "-q", "-e", event, "-F", str(args.freq), "-g", "-o", os.path.join(tmp, "perf.data"), "--"] \
        if perf else None
    configs = {"base": [], "pmuscope": ours}
    if theirs:
        configs["perf"] = theirs
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in configs}
    samples: dict[str, list[int]] = {"pmuscope": [], "perf": []}
    for r in range(args.rounds):
        order = list(configs)
        order = order[r % len(order):] + order[: r % len(order)]
        for name in order:
            w, c, _ = run_inner(configs[name], n, args.cpu)
            res[name].append((w, c))
            if args.verbose:
                print(f"  round {r} {name:9s} wall {w:.3f}s cpu {c:.3f}s")
            if name != "base":
                path = os.path.join(tmp, "ours.data" if name == "pmuscope" else "perf.data")
                from pmuscope.perfdata import PerfDataFile

                f = PerfDataFile(path)
                samples[name].append(f.sample_counts()[0])
                lost = f.counts().get(2, 0) + f.counts().get(13, 0)
                if lost:
                    print(f"  round {r}: {name} file has {lost} LOST records")
                f.close()

    def med(name: str, i: int) -> float:
        return statistics.median(x[i] for x in res[name])

    print(f"\n{'config':10s} {'inner wall':>11s} {'inner cpu':>10s} {'slowdown(wall)':>15s} {'slowdown(cpu)':>14s} {'samples':>8s}")
    for name in configs:
        sw, sc = med(name, 0) / med("base", 0), med(name, 1) / med("base", 1)
        s = int(statistics.median(samples[name])) if samples.get(name) else 0
        print(f"{name:10s} {med(name, 0):10.3f}s {med(name, 1):9.3f}s {sw:14.3f}x {sc:13.3f}x {s:8d}")
    if theirs:
        ours_w, perf_w = med("pmuscope", 0) / med("base", 0), med("perf", 0) / med("base", 0)
        ours_c, perf_c = med("pmuscope", 1) / med("base", 1), med("perf", 1) / med("base", 1)
        print(f"\npmuscope slowdown / perf slowdown: {ours_w / perf_w:.3f} (wall), {ours_c / perf_c:.3f} (cpu)  "
              f"[target <= 1.05]")

    # -- fixed cost: a command that exits at once -----------------------------------------
    t_ours, t_perf = [], []
    for _ in range(args.rounds):
        t_ours.append(wall([sys.executable, "-m", "pmuscope", "record", "-q", "-o", os.path.join(tmp, "t1.data"), "--", "true"]))
        if perf:
            t_perf.append(wall([perf, "record", "-q", "-o", os.path.join(tmp, "t2.data"), "--", "true"]))
    line = f"\nrecord -- true: pmuscope {statistics.median(t_ours):.3f}s"
    if t_perf:
        line += f", perf {statistics.median(t_perf):.3f}s, ratio {statistics.median(t_ours) / statistics.median(t_perf):.2f}"
    print(line + " (medians)")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
