"""``pmuscope report --json`` and ``pmuscope script`` on pipe-mode and
zstd-compressed perf.data, against the same workload recorded in plain file
mode in this run (the reference: the machine is shared, compare ratios).

Recordings (Linux ``perf record -e cpu-clock -F 10000 -g`` on a CPU-bound
Python loop of ``--seconds``, default 16 s: ~100k samples here):

* ``file``: ``-o FILE`` (the reference);
* ``pipe``: ``-o - > FILE`` (pipe mode: attrs and features as records, perf
  6.1 writes HEADER_FEATURE records not padded to 8 bytes);
* ``zstd``: ``-z -o FILE`` (PERF_RECORD_COMPRESSED);
* ``zstd-pipe``: ``-z -o - > FILE``;

and ``pipe (stdin)``: the pipe-mode file given on standard input (``-i -``,
a non-seekable stream). Each command runs ``--rounds`` times, interleaved
with the reference; the best time counts. Target: every input within ~1.2x
of file mode (the extra work is zstd and copying records together).

    python benchmarks/bench_stream_report.py [--seconds S] [--rounds R] [--keep DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from bench_report import add_workdir_options, run, workdir  # same directory: benchmarks run as scripts

LOOP = "import time\nt=time.time()\nx=0\nwhile time.time()-t<{s}: x+=1\n"
ENV = None  # environment of the timed commands (set in main)


def timed(cmd: list[str], stdin_path: str | None = None) -> float:
    if not stdin_path:
        return run(cmd, env=ENV)[0]
    with open(stdin_path, "rb") as stdin:
        return run(cmd, stdin=stdin, env=ENV)[0]


def record(perf: str, args: list[str], path: str, seconds: float) -> None:
    pipe = "-o" in args and args[args.index("-o") + 1] == "-"
    cmd = [perf, "record", "-q", "-e", "cpu-clock", "-F", "10000", "-g", *args]
    if not pipe:
        cmd += ["-o", path]
    cmd += ["--", sys.executable, "-c", LOOP.format(s=seconds)]
    with open(path, "wb") if pipe else open(os.devnull, "wb") as out:
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"perf record failed: {r.stderr.strip()[-300:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=16.0, help="length of each recording")
    ap.add_argument("--rounds", type=int, default=5)
    add_workdir_options(ap)
    args = ap.parse_args()
    global ENV
    perf = shutil.which("perf")
    if not perf:
        print("Linux perf is not installed: nothing to record")
        return 1
    tmp, ENV = workdir(args.keep, "pmuscope-bench-stream-")
    inputs = {"file": [], "pipe": ["-o", "-"], "zstd": ["-z"], "zstd-pipe": ["-z", "-o", "-"]}
    paths = {name: os.path.join(tmp, f"{name}.data") for name in inputs}
    for name, rec_args in inputs.items():
        if not (args.reuse and args.keep and os.path.exists(paths[name])):
            record(perf, rec_args, paths[name], args.seconds)
    pm = [sys.executable, "-m", "pmuscope"]
    from pmuscope.perfdata import PerfDataFile

    cases = [(name, paths[name], None) for name in inputs] + [("pipe (stdin)", "-", paths["pipe"])]
    print(f"{'input':13} {'samples':>8} | {'report --json':>13} {'vs file':>7} | {'script':>7} {'vs file':>7}")
    best: dict[tuple[str, str], float] = {}
    for cmd in (["report", "--json"], ["script"]):
        for name, path, stdin in cases:  # warm-up: bytecode and page cache
            timed(pm + cmd + ["-i", path], stdin)
        for _ in range(args.rounds):
            for name, path, stdin in cases:
                key = (name, cmd[0])
                best[key] = min(best.get(key, float("inf")), timed(pm + cmd + ["-i", path], stdin))
    for name, path, stdin in cases:
        with PerfDataFile(stdin or path) as p:
            n = sum(p.sample_counts())
        r, s = best[(name, "report")], best[(name, "script")]
        print(f"{name:13} {n:8d} | {r:12.3f}s {r / best[('file', 'report')]:6.2f}x | "
              f"{s:6.3f}s {s / best[('file', 'script')]:6.2f}x")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
