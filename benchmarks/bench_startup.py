"""Start-up cost: ``pmuscope stat``, ``report`` and ``script`` on tiny inputs
against Linux perf and the bare interpreter, in the same run, interleaved.

Each round runs every command once, in the same order (so load changes hit all
of them alike); ``--rounds`` rounds (default 9) give each command's best and
median wall time. Commands:

* ``python3 -c pass`` (the interpreter with this machine's ``site``: its
  ``.pth`` files run at every start) and ``python3 -S -c pass`` (the floor: no
  ``site`` at all);
* ``perf stat -e task-clock -- true`` and ``pmuscope stat -e task-clock -- true``;
* ``perf report --stdio -i F`` / ``pmuscope report --stdio -i F`` and
  ``perf script -i F`` / ``pmuscope script -i F`` for F = ``tiny`` (a ~10-sample
  ``perf record -e cpu-clock -c PERIOD`` of a short Python run, recorded here,
  PERIOD from the run's own task-clock), ``tiny-user`` (the same with
  ``cpu-clock:u``: no kernel sample, so perf reads no kallsyms -- with one, perf
  parses /proc/kallsyms, ~80 ms here, and whether 10 samples hold one is luck) and ``perf-g-small`` (the repository's
  ``tests/data/perfdata/perf-g-small.data``, 265 samples with call chains);
* ``pmuscope stat`` again under ``python3 -S`` (site-packages on PYTHONPATH):
  pmuscope's own cost without this machine's ``site``.

The first lines say whether this tree's numpy-free path (``profile/lite.py``)
takes the tiny files (a ``[vdso]`` or kernel sample sends them to the numpy path).

pmuscope runs as installed: its console script (``pmuscope`` beside the
interpreter) when there is one, else ``python3 -m pmuscope``; from compiled
bytecode (a private ``PYTHONPYCACHEPREFIX`` when ``PYTHONDONTWRITEBYTECODE`` is
set, filled by one warm-up run of everything). Printed: each command's best
and median, the ratio to its perf command (best/best, median/median) and to
``python3 -c pass``; then ``-X importtime`` of stat and report (fastest of 3
runs per module): the top-level imports and the modules with the most
self time; then the targets (issue 14): stat <= 4x perf stat, report and
script on the tiny file <= 5x perf's.

``--compare SRC`` also times the pmuscope under SRC (another checkout's
``src``, e.g. the main branch's) in the same rounds, each command beside
this tree's, and prints this tree's time over SRC's.

    python benchmarks/bench_startup.py [--rounds N] [--keep DIR] [--compare SRC]
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = os.path.join(HERE, "..", "tests", "data", "perfdata", "perf-g-small.data")
#: the short recorded command: a few tens of ms of CPU in one process
WORK = "sum(range(2 * 10**6))"
TINY_SAMPLES = 10


def child_env(tmp: str) -> dict[str, str]:
    """This environment, with a private bytecode cache instead of
    PYTHONDONTWRITEBYTECODE (which would have every run compile pmuscope)."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
    return env


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall time (s) of one run of CMD, output discarded."""
    t = time.perf_counter()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()[-300:]}")
    return dt


def pmuscope_cmd() -> list[str]:
    script = os.path.join(sysconfig.get_path("scripts"), "pmuscope")
    if os.path.isfile(script):
        with open(script, "rb") as f:
            if f.read(2) == b"#!":  # a pip console script: run it as its shebang would
                return [sys.executable, script]
    return [sys.executable, "-m", "pmuscope"]


def samples_of(perf: str, path: str) -> int:
    out = subprocess.run([perf, "report", "--stats", "-i", path], capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        if "SAMPLE events:" in line:
            return int(line.split()[2])
    return 0


def record_tiny(perf: str, path: str, event: str = "cpu-clock") -> int:
    """A ~TINY_SAMPLES-sample recording of WORK on EVENT: the period is the
    run's own task-clock (measured now) divided by TINY_SAMPLES."""
    cmd = [sys.executable, "-S", "-c", WORK]
    r = subprocess.run([perf, "stat", "-x,", "-e", "task-clock", "--"] + cmd, capture_output=True, text=True)
    msec = float(r.stderr.strip().splitlines()[-1].split(",")[0])
    period = max(int(msec * 1e6 / TINY_SAMPLES), 100_000)
    subprocess.run([perf, "record", "-q", "-e", event, "-c", str(period), "-o", path, "--"] + cmd,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return samples_of(perf, path)


#: whether pmuscope's numpy-free path takes a file (report and script share its reading)
LITE_CHECK = """
import sys
from pmuscope.profile import lite
try:
    lite.script(sys.argv[1])
    lite.build(sys.argv[1])
    print("taken")
except lite.Decline as err:
    print(f"declined ({err})")
except AttributeError:
    print("not in this tree")
"""


def lite_takes(py: str, path: str, env: dict[str, str]) -> str:
    """'taken' or 'declined (why)': which path ``report``/``script`` of PATH time."""
    r = subprocess.run([py, "-c", LITE_CHECK, path], capture_output=True, text=True, env=env)
    return r.stdout.strip() or f"unknown ({r.stderr.strip()[-120:]})"


def import_times(cmd: list[str], env: dict[str, str], runs: int = 3) -> tuple[dict, dict, list]:
    """``-X importtime`` of CMD (a python command line): per module the
    fastest self and cumulative µs over RUNS runs, and the top-level modules in order."""
    best_self: dict[str, int] = {}
    best_cum: dict[str, int] = {}
    top: list[str] = []
    for _ in range(runs):
        r = subprocess.run([cmd[0], "-X", "importtime"] + cmd[1:], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL)
        for line in r.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            s, c, name = line[len("import time:"):].split("|")
            mod = name.strip()
            if name[1:3] != "  " and mod not in top:  # depth 0
                top.append(mod)
            best_self[mod] = min(best_self.get(mod, 1 << 62), int(s))
            best_cum[mod] = min(best_cum.get(mod, 1 << 62), int(c))
    return best_self, best_cum, top


def print_imports(label: str, cmd: list[str], env: dict[str, str]) -> None:
    self_t, cum, top = import_times(cmd, env)
    numpy_ms = cum.get("numpy", 0) / 1000
    ours = sum(v for k, v in self_t.items() if k.split(".")[0] == "pmuscope") / 1000
    print(f"\n{label}: {len(self_t)} modules, {sum(self_t.values()) / 1000:.1f} ms of imports "
          f"(pmuscope's own modules {ours:.1f} ms; numpy {'%.1f ms' % numpy_ms if 'numpy' in cum else 'not imported'})")
    print("  top-level imports (cumulative ms):  " + ", ".join(
        f"{m} {cum[m] / 1000:.1f}" for m in sorted(top, key=cum.get, reverse=True)[:12] if cum[m] >= 300))
    print("  most self time (ms):  " + ", ".join(
        f"{m} {self_t[m] / 1000:.1f}" for m in sorted(self_t, key=self_t.get, reverse=True)[:12]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds (best and median over them)")
    ap.add_argument("--keep", metavar="DIR", help="write the tiny recording and the bytecode cache here and keep them")
    ap.add_argument("--compare", metavar="SRC", help="also time the pmuscope package under SRC (another checkout's src)")
    args = ap.parse_args()
    perf = shutil.which("perf")
    if not perf:
        print("Linux perf is not installed: nothing to compare with")
        return 1
    tmp = args.keep or tempfile.mkdtemp(prefix="pmuscope-bench-startup-")
    os.makedirs(tmp, exist_ok=True)
    env = child_env(tmp)
    tiny = os.path.join(tmp, "tiny.data")
    n_tiny = record_tiny(perf, tiny)
    tiny_u = os.path.join(tmp, "tiny-user.data")
    n_tiny_u = record_tiny(perf, tiny_u, "cpu-clock:u")
    small = os.path.abspath(SMALL)
    n_small = samples_of(perf, small)
    py = sys.executable
    pm = pmuscope_cmd()
    # without site: the standard library and site-packages (numpy) still importable
    env_s = dict(env)
    # (and pmuscope itself: an editable install is found through a .pth file, which -S skips)
    import pmuscope

    here = os.path.dirname(os.path.dirname(os.path.abspath(pmuscope.__file__)))
    env_s["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), sysconfig.get_path("purelib"), here) if p)
    stat = ["stat", "-e", "task-clock", "--", "true"]
    cases: list[tuple[str, list[str], dict[str, str], str | None]] = [
        ("python3 -c pass", [py, "-c", "pass"], env, None),
        ("python3 -S -c pass", [py, "-S", "-c", "pass"], env, None),
        ("perf stat", [perf] + stat, env, None),
        ("pmuscope stat", pm + stat, env, "perf stat"),
        ("pmuscope stat (python3 -S)", [py, "-S", "-m", "pmuscope"] + stat, env_s, "perf stat"),
    ]
    for fname, path in (("tiny", tiny), ("tiny-user", tiny_u), ("perf-g-small", small)):
        for cmd, extra in (("report", ["--stdio"]), ("script", [])):
            ref = f"perf {cmd} {fname}"
            cases.append((ref, [perf, cmd] + extra + ["-i", path], env, None))
            cases.append((f"pmuscope {cmd} {fname}", pm + [cmd] + extra + ["-i", path], env, ref))
    if args.compare:
        # the other tree first on the path; its own bytecode cache (same paths would not collide, but be explicit)
        env_c = dict(env)
        env_c["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(args.compare), env.get("PYTHONPATH")) if p)
        if "PYTHONPYCACHEPREFIX" in env:
            env_c["PYTHONPYCACHEPREFIX"] = env["PYTHONPYCACHEPREFIX"] + "-compare"
        # its own cache directory: kept kallsyms/ELF tables of another format would be
        # replaced by each tree in turn (and parsed on every run)
        env_c["PMUSCOPE_CACHE_DIR"] = os.path.join(tmp, "cache-compare")
        with_c = []
        for case in cases:
            with_c.append(case)
            if case[0].startswith("pmuscope") and "python3 -S" not in case[0]:
                with_c.append((case[0] + " [compare]", case[1], env_c, case[3]))  # the same entry, the other tree
        cases = with_c
    print(f"pmuscope runs as: {' '.join(pm)}" + (f" (bytecode cache {env['PYTHONPYCACHEPREFIX']})"
                                                   if "PYTHONPYCACHEPREFIX" in env else ""))
    print(f"files: tiny {n_tiny} samples, tiny-user {n_tiny_u} ({tmp}), perf-g-small {n_small}; load average "
          f"{os.getloadavg()[0]:.1f} at start")
    print("numpy-free path (profile/lite.py) of this tree: " + "; ".join(
        f"{f} {lite_takes(py, p, env)}" for f, p in (("tiny", tiny), ("tiny-user", tiny_u))))
    for _, cmd, e, _ in cases:  # warm-up: bytecode cache, page cache, kallsyms cache
        timed(cmd, e)
    times: dict[str, list[float]] = {c[0]: [] for c in cases}
    for _ in range(args.rounds):
        for name, cmd, e, _ in cases:
            times[name].append(timed(cmd, e))
    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    base = "python3 -c pass"
    print(f"\n{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f} at the end\n")
    print(f"{'command':40} {'best ms':>8} {'median':>8} | {'vs perf best':>12} {'median':>7} | "
          f"{'vs python3':>10}")
    for name, _, _, ref in cases:
        vs = f"{best[name] / best[ref]:11.2f}x {med[name] / med[ref]:6.2f}x" if ref else f"{'':12} {'':7}"
        print(f"{name:40} {best[name] * 1e3:8.1f} {med[name] * 1e3:8.1f} | {vs} | "
              f"{best[name] / best[base]:9.2f}x")

    if args.compare:
        print(f"\nthis tree's time over {args.compare}'s, best and median:")
        for name, *_ in cases:
            if name.endswith(" [compare]"):
                mine = name[: -len(" [compare]")]
                print(f"  {mine:32} {best[mine] / best[name]:5.2f}x {med[mine] / med[name]:5.2f}x  "
                      f"({best[name] * 1e3:.1f} -> {best[mine] * 1e3:.1f} ms best)")

    print_imports("imports of pmuscope stat -e task-clock -- true",
                  [py, "-m", "pmuscope"] + stat, env)
    print_imports(f"imports of pmuscope report --stdio on tiny-user ({n_tiny_u} samples)",
                  [py, "-m", "pmuscope", "report", "--stdio", "-i", tiny_u], env)

    print("\ntargets (issue 14), best and median ratios:")
    checks = [("pmuscope stat", 4.0)] + [(f"pmuscope {c} {f}", 5.0) for f in ("tiny", "tiny-user", "perf-g-small")
                                          for c in ("report", "script")]
    refs = {c[0]: c[3] for c in cases}
    for name, limit in checks:
        ref = refs[name]
        rb, rm = best[name] / best[ref], med[name] / med[ref]
        verdict = ("met" if rb <= limit and rm <= limit else
                   "met at the median only" if rm <= limit else "met at best only" if rb <= limit else "NOT met")
        print(f"  {name:30} <= {limit:.0f}x {ref:26}: {rb:5.2f}x best, {rm:5.2f}x median  {verdict}")
    floor = best["python3 -c pass"] / best["perf stat"]
    print(f"  (the interpreter alone, python3 -c pass, is {floor:.2f}x perf stat; python3 -S -c pass "
          f"{best['python3 -S -c pass'] / best['perf stat']:.2f}x)")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
