"""Writes the procfs fixtures of the NUMA view tests (python make_fixtures.py).

Two moments (t0, t1: one second apart) of a hand-designed machine state, so
every metric of the tests can be computed by hand from the numbers below.
The sysfs side (nodes, CPUs, distances, meminfo) comes from the topology
archives in ../topology. See PROVENANCE.md.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0_NS = 1_000_000_000_000
SEC = 1_000_000_000


def stat_line(pid, comm, minflt, majflt, nthreads, processor):
    # fields 1..52 of /proc/PID/stat (proc(5)); 10 minflt, 12 majflt, 20 num_threads, 39 processor
    f = [str(pid), f"({comm})", "R", "1", str(pid), str(pid), "0", "-1", "4194304", str(minflt), "0", str(majflt), "0",
         "100", "50", "0", "0", "20", "0", str(nthreads), "0", "12345", "104857600", "2560"]
    f += ["0"] * (38 - len(f)) + [str(processor)] + ["0"] * 13
    return " ".join(f) + "\n"


def sched_text(comm, tid, migrations):
    return (f"{comm} ({tid}, #threads: 1)\n-------------------------------------------------------------------\n"
            f"se.exec_start                                :      1000.000000\n"
            f"se.nr_migrations                             :                 {migrations}\n")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def proc_tree(root: Path, moment_ns: int, ncpus: int, cpu_jiffies: dict[int, tuple[int, int, int]], procs: list[dict]):
    if root.exists():
        shutil.rmtree(root)
    write(root / "proc" / "uptime_ns", f"{moment_ns}\n")
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    for c in range(ncpus):
        user, system, idle = cpu_jiffies.get(c, (1000, 500, 8000))
        lines.append(f"cpu{c} {user} 0 {system} {idle} 0 0 0 0 0 0")
    write(root / "proc" / "stat", "\n".join(lines) + "\nintr 0\n")
    for p in procs:
        base = root / "proc" / str(p["pid"])
        write(base / "stat", stat_line(p["pid"], p["comm"], p["minflt"], p["majflt"], len(p["threads"]), 0))
        write(base / "numa_maps", "".join(line + "\n" for line in p["numa_maps"]))
        write(base / "maps", "".join(line + "\n" for line in p.get("maps", [])))
        for tid, (runtime, migrations) in p["threads"].items():
            tb = base / "task" / str(tid)
            write(tb / "stat", stat_line(tid, p["comm"], 0, 0, 1, 0))
            write(tb / "schedstat", f"{runtime} 1000 10\n")
            write(tb / "sched", sched_text(p["comm"], tid, migrations))


def two_node() -> None:
    out = HERE / "two-node"
    maps100 = ["7f0000000000 default anon=100 dirty=100 active=0 N0=60 N1=40 kernelpagesize_kB=4",
               "7f1000000000 bind:1 anon=10 dirty=10 huge N1=10 kernelpagesize_kB=2048",
               "00400000 default file=/usr/bin/mgen mapped=5 N0=5 kernelpagesize_kB=4"]
    maps200 = ["7e0000000000 default anon=256 dirty=256 N0=256 kernelpagesize_kB=4",
               "7e8000000000 default huge anon=1 dirty=1 N1=1 kernelpagesize_kB=1048576"]
    common = {"maps": ["00400000-00401000 r-xp 00000000 08:01 1234 /usr/bin/mgen", "7f0000000000-7f0000064000 rw-p 00000000 00:00 0"]}
    t0 = [dict(pid=100, comm="mgen", minflt=1000, majflt=2, threads={100: (1_000_000_000, 5), 101: (500_000_000, 1)}, numa_maps=maps100, **common),
          dict(pid=200, comm="db", minflt=50, majflt=0, threads={200: (7_000_000_000, 10)}, numa_maps=maps200)]
    t1 = [dict(pid=100, comm="mgen", minflt=1300, majflt=3, threads={100: (1_600_000_000, 7), 101: (800_000_000, 2)}, numa_maps=maps100, **common),
          dict(pid=200, comm="db", minflt=50, majflt=0, threads={200: (7_250_000_000, 10)}, numa_maps=maps200)]
    proc_tree(out / "t0", T0_NS, 80, {}, t0)
    proc_tree(out / "t1", T0_NS + SEC, 80, {c: (1000, 500, 8100) for c in range(80)} | {0: (1060, 510, 8030), 20: (1025, 500, 8075)}, t1)
    # switch-out samples: [leader count, pid, tid, time, clk, ir, rma, lma] (cumulative group values)
    counts = {
        "columns": ["time_ns", "clk:0", "ir:1", "rma:2", "lma:3"],
        "cpus": {
            "0": {"start": [0, T0_NS, 0, 0, 0, 0],
                  "samples": [[1, 100, 100, T0_NS + 400_000_000, 1_200_000, 1_000_000, 1000, 4000],
                              [2, 0, 0, T0_NS + 500_000_000, 1_300_000, 1_050_000, 1000, 4000],
                              [3, 200, 200, T0_NS + 750_000_000, 2_050_000, 1_550_000, 1500, 4500]],
                  "read": [3, T0_NS + SEC, 2_650_000, 2_050_000, 1700, 5300], "running": [100, 101]},
            "20": {"start": [0, T0_NS, 0, 0, 0, 0],
                   "samples": [[1, 100, 101, T0_NS + 50_000_000, 150_000, 100_000, 300, 100],
                               [2, 100, 100, T0_NS + 250_000_000, 750_000, 400_000, 900, 300]],
                   "read": [2, T0_NS + SEC, 1_500_000, 700_000, 900, 300], "running": None},
        },
    }
    write(out / "counts.json", json.dumps(counts, indent=1) + "\n")


def four_node() -> None:
    out = HERE / "four-node-cxl"
    maps = ["7f0000000000 interleave:2-3 anon=1050 dirty=1050 N0=100 N2=1000 N3=50 kernelpagesize_kB=4"]
    t0 = [dict(pid=300, comm="cxlapp", minflt=10, majflt=0, threads={300: (2_000_000_000, 3)}, numa_maps=maps),
          dict(pid=301, comm="idle", minflt=0, majflt=0, threads={301: (5_000_000, 0)}, numa_maps=["7f00 default anon=1 N1=1 kernelpagesize_kB=4"])]
    t1 = [dict(pid=300, comm="cxlapp", minflt=510, majflt=0, threads={300: (2_500_000_000, 4)}, numa_maps=maps),
          dict(pid=301, comm="idle", minflt=0, majflt=0, threads={301: (5_000_000, 0)}, numa_maps=["7f00 default anon=1 N1=1 kernelpagesize_kB=4"])]
    proc_tree(out / "t0", T0_NS, 208, {}, t0)
    proc_tree(out / "t1", T0_NS + 2 * SEC, 208, {c: (1000, 500, 8200) for c in range(208)} | {52: (1100, 600, 8000)}, t1)


if __name__ == "__main__":
    two_node()
    four_node()
    print("wrote", HERE / "two-node", HERE / "four-node-cxl")
