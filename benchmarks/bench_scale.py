"""``report --stdio``, ``report --json``, ``script``, ``script -G`` and ``export``
against Linux perf on the same perf.data files of growing size: wall time and
peak memory (each child's own ``ru_maxrss`` from ``wait4``), both as ratios to
perf's in the same run, and the cost per sample, so a cost that grows with the
file shows as a per-sample figure that grows.

The files are given (``--files``; ``bench_report.py --keep DIR`` writes a
shallow and a deep one; a longer ``perf record -e cpu-clock -F 10000 -g`` of
CPU loops makes a bigger one). ``--pipe`` also times each file converted to
pipe mode (``perf inject -o -``), read from the file; ``--stdin`` adds each pipe-mode
copy read from a real pipe (``-i -``, fed by ``cat``: rows marked ``|``), the way
``perf record -o - | pmuscope script -i -`` reads, where the blocks read are copies.

References: ``perf report --stdio`` for both ``report`` outputs, ``perf
script`` / ``perf script -G`` for ``script`` / ``script -G``, and ``perf
script`` for ``export`` (pprof) as well: perf has no pprof writer, and its way
to hand a profile to other tools is its script output. Every pmuscope/perf
pair runs back to back, rounds interleaved; the best time and the lowest peak
of ``--rounds`` count (and the least CPU time, user + system: steadier than wall
time when other work shares the machine). pmuscope runs as users run it, its console
script (``bench_startup.pmuscope_cmd``; ``python3 -m pmuscope`` when none is installed).
Targets (issue 14): time <= 0.5x perf, peak memory <= 1x
perf's, flat cost per sample.

    python benchmarks/bench_scale.py --files A.data,B.data [--rounds 3] [--pipe [--stdin]] [--only report,script]
                                     [--before-src ../main/src]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import child_env  # noqa: E402

CASES = {
    # name: (pmuscope arguments, perf arguments)
    "report": (["report", "--stdio"], ["report", "--stdio"]),
    "report --json": (["report", "--json"], ["report", "--stdio"]),
    "script": (["script"], ["script"]),
    "script -G": (["script", "-G"], ["script", "-G"]),
    "export": (["export", "-f", "pprof", "-o", "-"], ["script"]),
}


LAST_CPU = [0.0]  # CPU seconds of the last timed run: on a loaded machine, steadier than wall time


def timed(cmd: list[str], env: dict[str, str], feed: str | None = None) -> tuple[float, int]:
    """Wall time (s) and peak RSS (KiB) of one run of CMD, output to /dev/null
    (its CPU time, user + system, is left in ``LAST_CPU``); ``feed``: a file
    that ``cat`` writes into CMD's standard input through a pipe."""
    t = time.perf_counter()
    cat = subprocess.Popen(["cat", feed], stdout=subprocess.PIPE) if feed else None
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE,
                             stdin=cat.stdout if cat else subprocess.DEVNULL, env=env)
        if cat:
            cat.stdout.close()  # the command's end of the pipe only
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        err = p.stderr.read()
        p.stderr.close()
        p.returncode = os.waitstatus_to_exitcode(status)
        if cat:
            cat.wait()
    LAST_CPU[0] = ru.ru_utime + ru.ru_stime
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {err.decode(errors='replace')[-500:]}")
    return wall, ru.ru_maxrss


def nsamples(path: str, env: dict[str, str]) -> int:
    """PERF_RECORD_SAMPLEs in a file-mode or pipe-mode perf.data: a walk of the
    record headers (building a profile of a 5M-sample file only to count it
    would take longer than the benchmark), in a child process: a child
    forked later starts with this process's resident pages, and on Linux its
    ``ru_maxrss`` keeps that across exec."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--count-samples", path], env=env,
                         capture_output=True, text=True, check=True).stdout
    return int(out)


def count_samples(path: str) -> int:
    import mmap
    import struct

    hdr = struct.Struct("<IHH")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        pos, end = 16, len(data)
        if struct.unpack_from("<Q", data, 8)[0] != 16:  # file mode: the data section
            pos, size = struct.unpack_from("<2Q", data, 40)
            end = pos + size
        n = 0
        while pos + 8 <= end:
            t, _misc, size = hdr.unpack_from(data, pos)
            if size < 8:
                break
            n += t == 9
            pos += size
    return n


def to_pipe(path: str, tmp: str) -> str:
    out = os.path.join(tmp, os.path.basename(path) + ".pipe")
    if not os.path.exists(out):
        with open(out, "wb") as f:
            subprocess.run(["perf", "inject", "-i", path, "-o", "-"], stdout=f, check=True)
    return out


def main() -> int:
    if sys.argv[1:2] == ["--count-samples"]:
        print(count_samples(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", required=True, help="comma list of perf.data files")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pipe", action="store_true", help="also pipe-mode copies of the files")
    ap.add_argument("--only", help="comma list of cases: " + ", ".join(CASES))
    ap.add_argument("--stdin", action="store_true", help="with --pipe: also read each pipe-mode copy from a real "
                    "pipe ('-i -' fed by cat, as 'perf record -o - | ... -i -'), rows marked '|'")
    ap.add_argument("--pipe-dir", default=None, help="where pipe-mode copies go (default: a temporary directory)")
    ap.add_argument("--before-src", metavar="DIR", help="also time the pmuscope whose sources are in DIR (another "
                    "checkout's src/), in the same rounds: columns 'before'")
    args = ap.parse_args()
    tmp = args.pipe_dir or tempfile.mkdtemp(prefix="pmuscope-scale-")
    env = child_env(tmp)
    cases = [c.strip() for c in args.only.split(",")] if args.only else list(CASES)
    files = [f for f in args.files.split(",") if f]
    if args.pipe:
        files += [to_pipe(f, tmp) for f in list(files)]
    # as users run it: the console script when installed (python3 -m pmuscope costs runpy's ~3-4 ms more)
    from bench_startup import pmuscope_cmd

    pm = pmuscope_cmd()
    print(f"pmuscope runs as: {' '.join(pm)}")
    for f in files:  # untimed warm-up: the page cache and pmuscope's bytecode cache
        timed(pm + ["script", "-G", "-i", f], env)
    benv = None
    if args.before_src:
        benv = dict(env, PYTHONPATH=os.path.abspath(args.before_src))
        benv["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache-before")
        # its own cache directory: two versions whose kept kallsyms/ELF tables differ in
        # format would otherwise replace each other's on every run (and parse every time)
        benv["PMUSCOPE_CACHE_DIR"] = os.path.join(tmp, "cache-before")
        for f in files:
            timed(pm + ["script", "-G", "-i", f], benv)
    print(f"{'file':<22} {'samples':>9} {'case':<14} {'perf s':>7} {'ours s':>7} {'time':>6} "
          f"{'perf MB':>8} {'ours MB':>8} {'mem':>6} {'perf us/s':>9} {'ours us/s':>9}"
          f" {'perf cpu':>8} {'ours cpu':>8} {'cpu':>6}"
          + (f" {'before s':>8} {'time':>6} {'bef. MB':>8} {'mem':>6}" if benv else ""))
    inputs = [(f, None) for f in files]
    if args.stdin:
        inputs += [(f, f) for f in files if f.endswith(".pipe")]
    for f, feed in inputs:
        n = nsamples(f, env)
        src = "-" if feed else f
        label = os.path.basename(f)[:21] + ("|" if feed else "")
        for case in cases:
            ours_args, perf_args = CASES[case]
            best = {"ours": (1e9, 1 << 60), "perf": (1e9, 1 << 60), "before": (1e9, 1 << 60)}
            cpu = {"ours": 1e9, "perf": 1e9, "before": 1e9}
            runs = [("perf", ["perf", *perf_args, "-i", src], env), ("ours", pm + ours_args + ["-i", src], env)]
            if benv is not None:
                runs.append(("before", pm + ours_args + ["-i", src], benv))
            for _ in range(args.rounds):
                for who, cmd, e in runs:
                    w, m = timed(cmd, e, feed)
                    cpu[who] = min(cpu[who], LAST_CPU[0])
                    bw, bm = best[who]
                    best[who] = (min(bw, w), min(bm, m))
            (pw, pmem), (ow, omem), (bw, bmem) = best["perf"], best["ours"], best["before"]
            print(f"{label:<22} {n:>9} {case:<14} {pw:>7.2f} {ow:>7.2f} {ow / pw:>5.2f}x "
                  f"{pmem / 1024:>8.0f} {omem / 1024:>8.0f} {omem / pmem:>5.2f}x "
                  f"{pw / max(n, 1) * 1e6:>9.2f} {ow / max(n, 1) * 1e6:>9.2f}"
                  + f" {cpu['perf']:>8.2f} {cpu['ours']:>8.2f} {cpu['ours'] / max(cpu['perf'], 1e-9):>5.2f}x"
                  + (f" {bw:>8.2f} {bw / pw:>5.2f}x {bmem / 1024:>8.0f} {bmem / pmem:>5.2f}x" if benv else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
