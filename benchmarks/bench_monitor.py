"""``pmuscope monitor`` at 1 ms on every CPU: its CPU cost and how many
intervals start on time, with the floors measured in the same run.

Reported:

- the monitor's CPU time (user+sys of the whole process during the run, and of
  the sampling thread alone) as % of one CPU; target <= 3 %;
- the fraction of intervals on time (read within 10 % of the interval after
  its deadline); target >= 99 %;
- the floors: a bare ``clock_nanosleep(TIMER_ABSTIME)`` loop at the same
  interval (the cost of waking 1000 times a second at all), the kernel's
  cost of the group reads themselves (``os.read`` of every group, timed in a
  tight loop), and the C sampling loop alone (``_native.monitor_loop`` with
  no Python, context or output: sleeping only, and sleeping and reading
  every group) — what any implementation of this design pays.

Then (unless ``--no-cli``) the command itself against Linux perf, interleaved
round by round: ``pmuscope monitor -a -I MS -e EVENTS -o FILE`` (CSV, JSON
lines, Parquet when pyarrow is installed) and ``perf stat -a -A -I MS -x, -e
EVENTS -o FILE -- sleep S`` (the same events; ``-A``: a line per CPU, as the
monitor's rows), at 1 ms and 10 ms. Each command's CPU time is the sum of its
threads' on-CPU time (``/proc/PID/task/*/schedstat``) over the same steady
window (from 0.5 s after its output file appears to 0.5 s before its end), and
the whole process's user+sys (``wait4``), start-up included. Targets: at 1 ms
<= 3 % of one CPU and >= 99 % of intervals on time; at 10 ms at most perf
stat's CPU. Reported as the median over the rounds, with pmuscope/perf ratios.
Each format runs with each ``--cli-timers`` mode (``--timer kernel``: each
CPU's cpu-clock timer writes its counts into a ring; ``--timer user``: the
deadline loop), so the kernel timer, the user loop and perf stat share rounds.

    python benchmarks/bench_monitor.py [--duration 10] [--interval 1] [-e EVENTS] [--format csv|parquet|jsonl|none]
                                       [--loop native|python] [--cli-rounds 3] [--cli-duration 10] [--cli-intervals 1,10]
                                       [--cli-formats csv,jsonl,parquet] [--cli-timers kernel,user] [--baseline OTHER/src]
                                       [--no-cli] [--cli-only]
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from pmuscope.counting.monitor import Monitor, make_sleep_until, monotonic_ns, set_timer_slack
from pmuscope.counting.writers import open_writer


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def bare_sleep_loop(interval_ns: int, seconds: float) -> tuple[float, float]:
    """(% of one CPU, fraction on time) of a loop that only sleeps to deadlines."""
    set_timer_slack(1000)
    sleep_until = make_sleep_until()
    n = int(seconds * 1e9 / interval_ns)
    late = 0
    c0 = time.thread_time()
    t0 = monotonic_ns()
    k = 1
    for _ in range(n):
        deadline = t0 + k * interval_ns
        sleep_until(deadline)
        lateness = monotonic_ns() - deadline
        late += lateness > interval_ns // 10
        k += 1 + (lateness // interval_ns if lateness >= interval_ns else 0)
    wall = (monotonic_ns() - t0) / 1e9
    return 100 * (time.thread_time() - c0) / wall, 1 - late / n


def read_floor(mon: Monitor, interval_ms: float, n: int = 2000) -> float:
    """% of one CPU spent reading every group once per interval, in a tight
    loop (thread CPU time: the kernel's cost of the reads alone)."""
    mon.open()
    for s in mon._slots:
        s.fd.enable(group=True)
    plan = [(s.fd.fd, s.nwords * 8) for s in mon._slots]
    read = os.read
    t = time.thread_time()
    for _ in range(n):
        for fd, size in plan:
            read(fd, size)
    per_interval = (time.thread_time() - t) / n
    mon.close()
    return 100 * per_interval / (interval_ms / 1e3)


def native_floor(mon: Monitor, interval_ns: int, seconds: float, reads: bool) -> tuple[float, float] | None:
    """(% of one CPU, fraction on time) of the C sampling loop alone
    (``_native.monitor_loop``, SCHED_FIFO as the monitor's thread): sleeping
    to each deadline, and with ``reads`` reading every group — what any
    implementation of this design pays, before Python, context and output."""
    import threading

    import numpy as np

    from pmuscope.counting import monitor as mm

    native = mm._native_loop()
    if native is None:
        return None
    mon.open()
    for s in mon._slots:
        s.fd.enable(group=True)
    plan = [(s.fd.fd, s.offset * 8, s.nwords * 8) for s in mon._slots] if reads else []
    flat = np.array(plan, dtype=np.int64).reshape(-1, 3).tobytes()
    n = max(1, int(seconds * 1e9 / interval_ns))
    rec = mon._rec_words * 8
    chunk = mm._make_chunk(plan, rec, n, views=False)
    out = {}

    def run() -> None:
        set_timer_slack(1000)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            pass
        c0, t0 = time.thread_time(), monotonic_ns()
        i, _, _ = native(flat, chunk.buf, rec, chunk.ts, chunk.deadline_idx, chunk.late, chunk.skipped, 0, n, 1, t0,
                         interval_ns, max(interval_ns // 10, 20_000), -1, 0, np.array([0, 1], dtype=np.int64), 0,
                         bytearray(1))
        out["r"] = (100 * (time.thread_time() - c0) / ((monotonic_ns() - t0) / 1e9), 1 - chunk.late[:i].mean())

    th = threading.Thread(target=run)
    th.start()
    th.join()
    mon.close()
    return out["r"]


def _cycles_open() -> bool:
    from pmuscope.errors import PmuscopeError
    from pmuscope.kernel import PerfEventFd, perf_event_attr

    try:
        PerfEventFd(perf_event_attr(type=0, config=0), pid=0, cpu=-1).close()
        return True
    except PmuscopeError:
        return False


# --------------------------------------------------------------------------- the command against perf stat


def child_env(tmp: str) -> dict[str, str]:
    """This environment, except that PYTHONDONTWRITEBYTECODE (which would make
    every run compile pmuscope again) becomes a private bytecode cache."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
    return env


def tasks_cpu_ns(pid: int) -> int:
    """On-CPU ns of every thread of PID so far (schedstat's first field)."""
    total = 0
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _running(pid: int) -> bool:
    """Whether PID has not exited yet, without reaping it (Popen.poll would, and wait4's rusage would be lost)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rfind(b")") + 2: text.rfind(b")") + 3] not in (b"Z", b"X")


def timed_run(cmd: list[str], out: str, duration: float, env: dict[str, str]) -> dict:
    """Run CMD (which writes OUT and lasts about DURATION s after start-up):
    steady-window CPU % from schedstat, whole-process user+sys, wall time."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    window = None
    try:
        while time.monotonic() - t0 < 30 and _running(p.pid):
            if os.path.exists(out) and os.path.getsize(out) > 0:
                break
            time.sleep(0.01)
        ready = time.monotonic()
        time.sleep(0.5)
        w0, c0 = time.monotonic(), tasks_cpu_ns(p.pid)
        time.sleep(max(0.5, ready + duration - 0.5 - time.monotonic()))
        if _running(p.pid):
            w1, c1 = time.monotonic(), tasks_cpu_ns(p.pid)
            window = 100 * (c1 - c0) / 1e9 / (w1 - w0)
    except OSError:  # the process ended under us
        pass
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({p.returncode}): {err.strip()[-400:]}")
    return {"window": window, "total": ru.ru_utime + ru.ru_stime, "wall": wall, "err": err}


def monitor_rows(path: str, fmt: str) -> tuple[int, int, int, int]:
    """(rows, intervals, late intervals, skipped intervals) of a monitor output file."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        t = pq.read_table(path, columns=["timestamp", "late", "skipped"])
        ts, late, skip = (t.column(c).to_pylist() for c in ("timestamp", "late", "skipped"))
    elif fmt == "jsonl":
        import json

        ts, late, skip = [], [], []
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                ts.append(r["timestamp"])
                late.append(r["late"])
                skip.append(r["skipped"])
    else:
        with open(path, newline="") as f:
            rd = csv.DictReader(f)
            ts, late, skip = [], [], []
            for r in rd:
                ts.append(int(r["timestamp"]))
                late.append(r["late"] == "1")
                skip.append(int(r["skipped"]))
    per = {}
    skipped = {}
    for t, lt, sk in zip(ts, late, skip):
        per[t] = per.get(t, False) or lt  # an interval is late when any CPU's reading was
        skipped[t] = sk
    return len(ts), len(per), sum(per.values()), sum(skipped.values())


def perf_intervals(path: str) -> int:
    stamps = set()
    with open(path) as f:
        for line in f:
            if line and not line.startswith("#") and "," in line:
                stamps.add(line.split(",", 1)[0])
    return len(stamps)


def cli_vs_perf(events: str, intervals: list[float], rounds: int, duration: float, perf: str,
                baseline: str | None = None, formats: list[str] | None = None, timers: list[str] | None = None) -> None:
    formats = list(formats or ["csv", "jsonl", "parquet"])
    if "parquet" in formats:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            print("(pyarrow is not installed: no Parquet runs)")
            formats.remove("parquet")
    tmp = tempfile.mkdtemp(prefix="bench-monitor-")
    env = child_env(tmp)
    timers = list(timers or ["kernel", "user"])
    runs = [f"{t} {fmt}" for t in timers for fmt in formats]
    envs = {run: env for run in runs}
    if baseline:
        # another pmuscope (e.g. an older checkout's src/), CSV, in the same rounds
        base_env = dict(env, PYTHONPATH=baseline, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache-baseline"))
        runs.insert(0, "baseline csv")
        envs["baseline csv"] = base_env
    pm = [sys.executable, "-m", "pmuscope", "monitor"]
    try:
        # compile pmuscope into the private cache once
        for e in {id(v): v for v in envs.values()}.values():
            subprocess.run(pm + ["-a", "-I", "10", "--interval-count", "1", "-e", events, "-q", "-o", os.path.join(tmp, "warm.csv")],
                           env=e, check=True, stdout=subprocess.DEVNULL)
        results: dict[tuple, list[dict]] = {}
        for r in range(rounds):
            for ms in intervals:
                out = os.path.join(tmp, "perf.csv")
                cmd = [perf, "stat", "-a", "-A", "-I", f"{ms:g}", "-x,", "-e", events, "-o", out, "--", "sleep", f"{duration:g}"]
                res = timed_run(cmd, out, duration, env)
                res["intervals"] = perf_intervals(out)
                results.setdefault(("perf", ms), []).append(res)
                os.unlink(out)
                for run in runs:
                    fmt = run.split()[-1]
                    out = os.path.join(tmp, f"mon.{fmt}")
                    cmd = pm + ["-a", "-I", f"{ms:g}", "--duration", f"{duration:g}", "-e", events, "-q", "-o", out]
                    if not run.startswith("baseline"):
                        cmd += ["--timer", run.split()[0]]
                    res = timed_run(cmd, out, duration, envs[run])
                    res["rows"], res["intervals"], res["late"], res["skipped"] = monitor_rows(out, fmt)
                    res["err"] = [ln for ln in res["err"].splitlines() if "lost" in ln or "throttled" in ln]
                    expected = duration * 1000 / ms
                    if res["err"] or res["intervals"] + res["skipped"] < 0.95 * expected or res["skipped"] > 0.01 * expected:
                        print(f"    {run} -I {ms:g}: {res['intervals']} intervals, {res['skipped']} skipped, "
                              f"{res['wall']:.1f} s; {' '.join(res['err'])}", flush=True)
                    results.setdefault((run, ms), []).append(res)
                    os.unlink(out)
            print(f"  round {r + 1}/{rounds} done; load avg {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(runs, key):
        vals = [x[key] for x in runs if x[key] is not None]
        return statistics.median(vals) if vals else float("nan")

    print(f"\nmedians of {rounds} rounds, {duration:g} s each; CPU in % of one CPU "
          "(steady window | whole process incl. start-up); ratio = pmuscope / perf stat, same rounds")
    print(f"{'-I':>4} {'command':<26} {'steady CPU':>10} {'ratio':>6} {'whole':>7} {'ratio':>6} {'intervals':>9} {'on time':>8} "
          f"{'skipped':>7}  target")
    for ms in intervals:
        pr = results[("perf", ms)]
        p_win, p_tot = med(pr, "window"), 100 * med(pr, "total") / duration
        expected = duration * 1000 / ms
        print(f"{ms:>4g} {'perf stat -A':<26} {p_win:>9.2f}% {'':>6} {p_tot:>6.2f}% {'':>6} "
              f"{100 * med(pr, 'intervals') / expected:>8.1f}%")
        for fmt in runs:
            rr = results[(fmt, ms)]
            win, tot = med(rr, "window"), 100 * med(rr, "total") / duration
            on_time = statistics.median(100 * (1 - x["late"] / x["intervals"]) if x["intervals"] else 0 for x in rr)
            if ms <= 1:
                ok = win <= 3 and on_time >= 99
                target = f"<= 3%, >= 99% on time: {'MET' if ok else 'NOT MET'}"
            else:
                ok = win <= p_win
                target = f"<= perf's CPU: {'MET' if ok else 'NOT MET'} (whole process {'MET' if tot <= p_tot else 'NOT MET'})"
            print(f"{ms:>4g} {'pmuscope ' + fmt:<26} {win:>9.2f}% {win / p_win:>5.2f}x {tot:>6.2f}% {tot / p_tot:>5.2f}x "
                  f"{100 * med(rr, 'intervals') / expected:>8.1f}% {on_time:>7.2f}% {100 * med(rr, 'skipped') / expected:>6.2f}%  "
                  f"{target}")


def default_event_list() -> str:
    from pmuscope.cli.monitor_cmd import default_monitor_events

    return ",".join(s.name for s in default_monitor_events(system_wide=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0, help="ms")
    ap.add_argument("-e", "--events", help="default: cycles,instructions (task-clock,context-switches without a PMU)")
    ap.add_argument("--format", default="csv", choices=("csv", "parquet", "jsonl", "none"))
    ap.add_argument("--no-context", action="store_true")
    ap.add_argument("--loop", choices=("native", "python"), help="the in-process run's sampling loop (default: native where built)")
    ap.add_argument("--cli-rounds", type=int, default=3)
    ap.add_argument("--cli-duration", type=float, default=10.0)
    ap.add_argument("--cli-intervals", default="1,10", help="ms, comma-separated")
    ap.add_argument("--cli-events", help="default: monitor's default events (perf stat's that open here)")
    ap.add_argument("--perf", default=shutil.which("perf") or "perf")
    ap.add_argument("--cli-formats", default="csv,jsonl,parquet")
    ap.add_argument("--cli-timers", default="kernel,user", help="monitor --timer modes to run, comma-separated")
    ap.add_argument("--baseline", metavar="SRC", help="also run another pmuscope's monitor (PYTHONPATH=SRC), CSV, "
                                                      "in the same rounds: before/after")
    ap.add_argument("--no-cli", action="store_true", help="only the in-process run")
    ap.add_argument("--cli-only", action="store_true", help="only the command against perf stat")
    args = ap.parse_args()

    if not args.cli_only:
        in_process(args)
    if not args.no_cli:
        events = args.cli_events or default_event_list()
        intervals = [float(x) for x in args.cli_intervals.split(",")]
        print(f"\npmuscope monitor against {args.perf} stat: -e {events}, -I {args.cli_intervals} ms, "
              f"{args.cli_rounds} rounds of {args.cli_duration:g} s; load avg {os.getloadavg()[0]:.2f}")
        cli_vs_perf(events, intervals, args.cli_rounds, args.cli_duration, args.perf, args.baseline,
                    args.cli_formats.split(","), args.cli_timers.split(","))
    return 0


def in_process(args) -> None:
    events = args.events
    if events is None:
        events = "cycles,instructions" if _cycles_open() else "task-clock,context-switches"
    interval_ns = int(args.interval * 1e6)
    ncpu = len(Monitor(events, interval_ms=args.interval).entities)
    print(f"pmuscope bench_monitor: -e {events} on {ncpu} CPUs, -I {args.interval:g} ms, {args.duration:g} s, "
          f"output {args.format}, context {'off' if args.no_context else 'on'}; load avg {os.getloadavg()[0]:.2f}")

    fl = min(3.0, args.duration)
    floor_cpu, floor_on_time = bare_sleep_loop(interval_ns, fl)
    reads = read_floor(Monitor(events, interval_ms=args.interval, context=False), args.interval)
    print(f"floor: Python deadline-sleep loop {floor_cpu:.2f}% CPU, {100 * floor_on_time:.2f}% on time; "
          f"kernel group reads alone {reads:.2f}% CPU")
    c_sleep = native_floor(Monitor(events, interval_ms=args.interval, context=False), interval_ns, fl, reads=False)
    c_reads = native_floor(Monitor(events, interval_ms=args.interval, context=False), interval_ns, fl, reads=True)
    if c_sleep is not None and c_reads is not None:
        print(f"floor: C loop sleeping only {c_sleep[0]:.2f}% CPU ({100 * c_sleep[1]:.2f}% on time); "
              f"C loop sleeping and reading every group {c_reads[0]:.2f}% CPU ({100 * c_reads[1]:.2f}% on time)")

    mon = Monitor(events, interval_ms=args.interval, duration=args.duration, context=not args.no_context,
                  loop=args.loop)
    mon.open()
    with tempfile.TemporaryDirectory() as tmp:
        writer = None
        if args.format != "none":
            writer = open_writer(os.path.join(tmp, f"out.{args.format}"), mon.schema(), args.format, mon.metadata())
        c0, t0 = cpu_s(), time.monotonic()
        for batch in mon.batches():
            if writer is not None:
                writer.write(batch)
        if writer is not None:
            writer.close()
        cpu, wall = cpu_s() - c0, time.monotonic() - t0
        mon.close()
    st = mon.stats
    proc_pct = 100 * cpu / wall
    thread_pct = 100 * st.sampler_cpu_s / st.elapsed_s
    on_time = 100 * st.on_time_fraction
    print(f"monitor ({mon.loop} loop): {st.intervals} intervals, {st.rows} rows in {wall:.2f} s; late {st.late}, skipped deadlines {st.skipped}")
    print(f"  CPU: whole process {proc_pct:.2f}% of one CPU (sampling thread {thread_pct:.2f}%); "
          f"{proc_pct / floor_cpu:.1f}x the Python sleep loop"
          + (f", {proc_pct / c_reads[0]:.2f}x the C sleep+read loop" if c_reads else "")
          + f"; target <= 3%: {'MET' if proc_pct <= 3 else 'NOT MET'}")
    print(f"  on time: {on_time:.2f}% of intervals (bare loop {100 * floor_on_time:.2f}%); target >= 99%: "
          f"{'MET' if on_time >= 99 else 'NOT MET'}")


if __name__ == "__main__":
    sys.exit(main())
