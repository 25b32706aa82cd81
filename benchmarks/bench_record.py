"""Recording overhead and fixed costs: ``pmuscope record`` vs Linux ``perf record``
(ratios measured in one run, configurations interleaved, medians).

1. Slowdown of a CPU-bound workload (``pmuscope.workloads.busy_iterations(N)``,
   ~2 s, pinned to one CPU with ``taskset``) under ``pmuscope record -F 4000 -g``
   and under ``perf record -F 4000 -g`` (same event: cycles where a hardware
   PMU exists, else cpu-clock), against no profiler. The workload times itself
   (wall ``perf_counter`` and CPU ``process_time``), so profiler start-up and
   tear-down do not count. pmuscope runs twice: as ``record`` does by default
   (Python frames: the workload runs through ``pmuscope._pyperf``'s trampolines,
   which perf has no counterpart of; ``bench_pyframes.py`` measures that cost
   alone) and with ``--no-python-frames`` (like for like with perf).
   Target: pmuscope's slowdown (like for like) <= perf's.
2. The profiler's own CPU in the same runs: user+sys of everything the
   profiler command ran (``RUSAGE_CHILDREN`` of this process around the run)
   minus the workload process's own user+sys (it reports its ``RUSAGE_SELF``
   at exit, start-up included). Target: <= perf's.
3. Wall time and CPU (user+sys, ``RUSAGE_CHILDREN``) of recording a command that
   exits at once (``-- true``), with a bare ``python3 -c pass`` as the floor of
   any Python tool: perf 6.1 waits up to 1 s at exit for its side-band thread,
   so only the CPU is compared. Target: CPU <= perf's.
4. The profilers' own CPU recording the whole machine (``-a -g``, ``--sw-seconds``)
   with a busy loop on every CPU: the drain at volume (and, for perf, its
   build-id pass over the file at exit).

Both profilers are pinned to another CPU than the workload (``--profiler-cpu``,
default 0), so what is measured is the sampling cost on the workload's CPU, not
where the scheduler happens to wake the profiler.

    python benchmarks/bench_record.py [--iterations N] [--rounds R] [--event E] [--freq HZ] [--sw-seconds S] [-v]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

INNER = (
    "import time, resource; from pmuscope.workloads import busy_iterations; "
    "w, c = time.perf_counter(), time.process_time(); busy_iterations({n}); "
    "w, c = time.perf_counter() - w, time.process_time() - c; r = resource.getrusage(resource.RUSAGE_SELF); "
    "print('INNER', w, c, r.ru_utime + r.ru_stime)"
)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_inner(prefix: list[str], n: int, cpu: int | None, env: dict[str, str]) -> tuple[float, float, float]:
    """(workload wall, workload CPU while working, profiler's own CPU)."""
    cmd = [sys.executable, "-c", INNER.format(n=n)]
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu)] + cmd
    c0 = children_cpu()
    proc = subprocess.run(prefix + cmd, capture_output=True, text=True, timeout=600, env=env)
    total = children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(prefix[:3])} failed: {proc.stderr[-500:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("INNER"):
            _, w, c, whole = line.split()
            return float(w), float(c), total - float(whole)
    raise SystemExit(f"no timing line from {' '.join(prefix)}: {proc.stdout[-300:]}")


def wall_cpu(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and user+sys CPU of a command (all its processes)."""
    c0 = children_cpu()
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, timeout=120, check=True, env=env)
    return time.perf_counter() - t, children_cpu() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=0, help="busy_iterations N (default: calibrated to ~2 s)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--event", default=None, help="event for both tools (default: pmuscope's default event)")
    ap.add_argument("--freq", type=int, default=4000)
    ap.add_argument("--sw-seconds", type=float, default=4.0, help="system-wide section: record -a for this long (0: skip)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="CPU to pin the workload to")
    ap.add_argument("--profiler-cpu", type=int, default=0 if (os.cpu_count() or 1) > 1 else None,
                    help="CPU to pin both profilers to (default 0: away from the workload); -1 for no pinning")
    args = ap.parse_args()

    perf = shutil.which("perf")
    if not perf:
        print("Linux perf is not installed: only pmuscope numbers")
    from pmuscope.sampling import default_event

    from bench_report import child_env  # same directory: benchmarks run as scripts

    event = args.event or default_event()
    tmp = tempfile.mkdtemp(prefix="bench_record.")
    env = child_env(tmp)  # a private bytecode cache: start-up without recompiling pmuscope
    n = args.iterations
    if not n:
        w, _, _ = run_inner([], 20000, args.cpu, env)
        n = max(1000, int(20000 * 2.0 / max(w, 1e-3)))
    print(f"workload: busy_iterations({n}) pinned to CPU {args.cpu}; event {event} -F {args.freq} -g; {args.rounds} rounds"
          + (f"; profilers pinned to CPU {args.profiler_cpu}" if args.profiler_cpu not in (None, -1) else ""))

    pin = ["taskset", "-c", str(args.profiler_cpu)] if args.profiler_cpu not in (None, -1) and shutil.which("taskset") else []
    ours = pin + [sys.executable, "-m", "pmuscope", "record", "-q", "-e", event, "-F", str(args.freq), "-g",
                  "-o", os.path.join(tmp, "ours.data"), "--"]
    nopy = ours[:-1] + ["--no-python-frames", "--"]
    theirs = pin + [perf, "record", "-q", "-e", event, "-F", str(args.freq), "-g", "-o", os.path.join(tmp, "perf.data"), "--"] \
        if perf else None
    configs = {"base": [], "pmuscope": ours, "pmuscope-nopy": nopy}
    if theirs:
        configs["perf"] = theirs
    res: dict[str, list[tuple[float, float, float]]] = {k: [] for k in configs}
    samples: dict[str, list[int]] = {k: [] for k in configs}
    run_inner([], 1000, args.cpu, env)  # fill the bytecode cache
    for r in range(args.rounds):
        order = list(configs)
        order = order[r % len(order):] + order[: r % len(order)]
        for name in order:
            w, c, own = run_inner(configs[name], n, args.cpu, env)
            res[name].append((w, c, own))
            line = f"  round {r} {name:14s} wall {w:.3f}s cpu {c:.3f}s profiler cpu {own:.3f}s"
            if name != "base":
                path = os.path.join(tmp, "perf.data" if name == "perf" else "ours.data")
                from pmuscope.perfdata import PerfDataFile

                f = PerfDataFile(path)
                samples[name].append(f.sample_counts()[0])
                lost = f.counts().get(2, 0) + f.counts().get(13, 0)
                if lost:
                    print(f"  round {r}: {name} file has {lost} LOST records")
                line += f" samples {samples[name][-1]}"
                f.close()
            if args.verbose:
                print(line)

    def med(name: str, i: int) -> float:
        return statistics.median(x[i] for x in res[name])

    # "added per sample": the workload's extra CPU over no profiler, per sample taken. The
    # profilers run on another CPU, so on the workload's CPU this is the kernel's sampling
    # (timer interrupt, call-chain walk, ring write) plus, with Python frames, the trampolines
    print(f"\n{'config':14s} {'inner wall':>11s} {'inner cpu':>10s} {'slowdown(wall)':>15s} {'slowdown(cpu)':>14s} "
          f"{'added/sample':>13s} {'profiler cpu':>13s} {'samples':>8s}")
    for name in configs:
        sw, sc = med(name, 0) / med("base", 0), med(name, 1) / med("base", 1)
        s = int(statistics.median(samples[name])) if samples.get(name) else 0
        per = f"{(med(name, 1) - med('base', 1)) / s * 1e6:11.1f}us" if s else f"{'':13s}"
        print(f"{name:14s} {med(name, 0):10.3f}s {med(name, 1):9.3f}s {sw:14.3f}x {sc:13.3f}x "
              f"{per} {med(name, 2):12.3f}s {s:8d}")
    if theirs:
        perf_w, perf_c = med("perf", 0) / med("base", 0), med("perf", 1) / med("base", 1)
        for name in ("pmuscope-nopy", "pmuscope"):
            ours_w, ours_c = med(name, 0) / med("base", 0), med(name, 1) / med("base", 1)
            # the slowdowns' excess over no profiler, as a ratio: 1.10x vs 1.05x is 2.0
            xs = (ours_c - 1) / (perf_c - 1) if perf_c > 1 else float("nan")
            print(f"{name}: slowdown / perf's {ours_w / perf_w:.3f} (wall), {ours_c / perf_c:.3f} (cpu), "
                  f"added CPU / perf's {xs:.2f}; own CPU / perf's {med(name, 2) / med('perf', 2):.2f}"
                  + ("  [targets: like for like <= 1]" if name == "pmuscope-nopy" else "  [Python frames on]"))

    # -- fixed cost: a command that exits at once -----------------------------------------
    fixed = {"python -c pass": [sys.executable, "-c", "pass"],
             "pmuscope": [sys.executable, "-m", "pmuscope", "record", "-q", "-o", os.path.join(tmp, "t1.data"), "--", "true"]}
    if perf:
        fixed["perf"] = [perf, "record", "-q", "-o", os.path.join(tmp, "t2.data"), "--", "true"]
    wall_cpu(fixed["pmuscope"], env)  # fill the bytecode cache
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in fixed}
    for r in range(max(args.rounds, 5)):
        for name, cmd in fixed.items():
            got[name].append(wall_cpu(cmd, env))
    print("\nrecord -- true (medians):")
    for name in fixed:
        w = statistics.median(x[0] for x in got[name])
        c = statistics.median(x[1] for x in got[name])
        line = f"  {name:15s} wall {w:.3f}s cpu {c:.3f}s"
        if perf and name != "perf":
            pw = statistics.median(x[0] for x in got["perf"])
            pc = statistics.median(x[1] for x in got["perf"])
            line += f"  / perf: wall {w / pw:.2f}, cpu {c / pc:.2f}"
        print(line)

    # -- system-wide: the drain at volume ----------------------------------------------------
    if args.sw_seconds > 0:
        d = args.sw_seconds
        sw = {"pmuscope": [sys.executable, "-m", "pmuscope", "record", "-q", "-a", "-g", "-F", str(args.freq), "-e", event,
                           "-o", os.path.join(tmp, "sw1.data"), "--duration", str(d)]}
        if perf:
            sw["perf"] = [perf, "record", "-q", "-a", "-g", "-F", str(args.freq), "-e", event,
                          "-o", os.path.join(tmp, "sw2.data"), "--", "sleep", str(d)]
        # one busy loop per CPU for the whole section (reaped at its end, outside every measurement)
        spin = "import time\nt = time.time() + %f\nwhile time.time() < t: pass" % (d * 2.5 * max(args.rounds // 2, 1) + 5)
        load = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
        got_sw: dict[str, list[tuple[float, int]]] = {k: [] for k in sw}
        try:
            for r in range(max(args.rounds // 2, 1)):
                for name, cmd in sw.items():
                    _, c = wall_cpu(cmd, env)
                    from pmuscope.perfdata import PerfDataFile

                    f = PerfDataFile(os.path.join(tmp, "sw1.data" if name == "pmuscope" else "sw2.data"))
                    got_sw[name].append((c, f.sample_counts()[0]))
                    f.close()
        finally:
            for p in load:
                p.kill()
                p.wait()
        print(f"\nrecord -a -g -F {args.freq} for {d:g} s, every CPU busy (medians):")
        for name in sw:
            c = statistics.median(x[0] for x in got_sw[name])
            n = int(statistics.median(x[1] for x in got_sw[name]))
            line = f"  {name:10s} own cpu {c:.3f}s  samples {n}"
            if perf and name != "perf":
                line += f"  / perf: cpu {c / statistics.median(x[0] for x in got_sw['perf']):.2f}"
            print(line)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
