"""Memory-sample throughput: ``pmuscope mem report`` / ``c2c`` against
``perf mem report`` / ``perf script -F data_src`` on the same synthetic
PEBS-style perf.data (N samples, several data sources, 4 threads on 2 CPUs,
a falsely shared line), plus SPE data-source mapping rate.

    python benchmarks/bench_memory.py [--samples 1000000]

Prints seconds for each and the ratio perf / pmuscope (> 1: pmuscope faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from pmuscope.memory import datasrc as D
from pmuscope.memory.c2c import c2c_analyze
from pmuscope.memory.report import mem_report
from pmuscope.memory.samples import load_mem_samples
from pmuscope.memory.spe import spe_data_src
from pmuscope.memory.synth import MEM_SAMPLE_TYPE, mem_attr
from pmuscope.perfdata import PerfDataWriter, synth


def write_file(path: str, n: int) -> None:
    rng = np.random.default_rng(0)
    kinds = np.array([D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=1, snoop=D.SNOOP_NONE),
                      D.encode(op=D.OP_LOAD, lvl=D.LVL_L3 | D.LVL_HIT, lvl_num=3, snoop=D.SNOOP_HITM),
                      D.encode(op=D.OP_LOAD, lvl=D.LVL_LOC_RAM | D.LVL_HIT, lvl_num=0xD, snoop=D.SNOOP_HIT),
                      D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_MISS)], np.uint64)
    # IDENTIFIER IP TID TIME ADDR CPU PERIOD WEIGHT_STRUCT DATA_SRC PHYS_ADDR: 11 u64 words + 8 header
    rec = np.zeros(n, dtype=[("hdr", "<u8"), ("id", "<u8"), ("ip", "<u8"), ("pid", "<u4"), ("tid", "<u4"),
                             ("time", "<u8"), ("addr", "<u8"), ("cpu", "<u8"), ("period", "<u8"),
                             ("weight", "<u8"), ("data_src", "<u8"), ("phys", "<u8")])
    size = rec.dtype.itemsize
    rec["hdr"] = 9 | (2 << 32) | (size << 48)
    rec["id"] = 1
    t = rng.integers(0, 4, n)
    rec["ip"] = 0x401000 + 16 * t
    rec["pid"] = 100
    rec["tid"] = 101 + t
    rec["time"] = np.arange(n) + 1000
    shared = rng.random(n) < 0.2
    rec["addr"] = np.where(shared, 0x600000 + 8 * (t % 2), 0x700000 + 4096 * t + 8 * rng.integers(0, 512, n))
    rec["cpu"] = t % 2
    rec["period"] = 1
    rec["weight"] = rng.integers(4, 400, n)
    rec["data_src"] = kinds[rng.integers(0, 4, n)]
    rec["phys"] = rec["addr"] + 0x100000000
    with PerfDataWriter(path) as w:
        w.add_attr(mem_attr(MEM_SAMPLE_TYPE), [1], "cpu/mem-loads,ldlat=30/P")
        w.write(synth.comm(100, 100, "bench", sample_id=synth.sample_id(MEM_SAMPLE_TYPE, pid=100, tid=100, id=1)))
        w.write(rec.tobytes())


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_memory.")
    try:
        path = os.path.join(tmp, "mem.data")
        write_file(path, args.samples)
        mb = os.path.getsize(path) / 1e6
        t_load, ms = timed(lambda: load_mem_samples(path))
        t_rep, _ = timed(lambda: mem_report(ms))
        t_c2c, res = timed(lambda: c2c_analyze(ms))
        ours = t_load + t_rep
        print(f"samples {len(ms)}  file {mb:.1f} MB")
        print(f"pmuscope load_mem_samples {t_load:.2f} s ({len(ms) / t_load / 1e6:.2f} M samples/s), "
              f"mem_report {t_rep:.2f} s, c2c_analyze {t_c2c:.2f} s (top line {res.lines[0]['address']:#x})")
        perf = shutil.which("perf")
        if perf:
            t_perf, _ = timed(lambda: subprocess.run([perf, "mem", "report", "--stdio", "--sort=mem", "-i", path],
                                                     capture_output=True))
            t_script, _ = timed(lambda: subprocess.run([perf, "script", "-F", "data_src,weight", "-i", path],
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            t_c2c_perf, _ = timed(lambda: subprocess.run([perf, "c2c", "report", "--stdio", "-i", path],
                                                         capture_output=True))
            print(f"perf mem report --sort=mem {t_perf:.2f} s -> ratio {t_perf / ours:.1f}x")
            print(f"perf script -F data_src,weight {t_script:.2f} s")
            print(f"perf c2c report {t_c2c_perf:.2f} s vs pmuscope load+c2c {t_load + t_c2c:.2f} s -> ratio "
                  f"{t_c2c_perf / (t_load + t_c2c):.1f}x")
        n = args.samples
        rng = np.random.default_rng(1)
        t_spe, _ = timed(lambda: spe_data_src(np.ones(n, np.int8), rng.integers(0, 2, n).astype(np.uint64),
                                              rng.integers(0, 1 << 24, n).astype(np.uint64),
                                              rng.integers(0, 16, n).astype(np.uint64), np.ones(n, bool),
                                              np.full(n, 0x410FD0C0, np.uint64)))
        print(f"spe_data_src {n / t_spe / 1e6:.1f} M records/s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
