"""A false-sharing workload: native threads on chosen CPUs increment counters
that share one cache line (or, with ``-t 1``, sit on separate lines).

``python3 -m pmuscope.workloads false_sharing [-t TYPE] [-c CPU ...] [-d SECONDS] [-n ITER]``

- ``-t 0`` (default): false sharing — thread *i* increments word *i* of one
  64-byte line, so every store steals the line from the other CPUs
  (``perf c2c`` shows it as HITM / peer snoops on that line);
- ``-t 1``: the fix — each thread's word on its own 128-byte-aligned block;
- ``-c CPU ...``: one thread per CPU, pinned there (default: the first two
  CPUs this process may use);
- ``-d SECONDS``: run for this long (default 2); ``-n ITER``: increments per
  burst (default 2,000,000).

The thread body is native code (``pmuscope._native.store_loop``, or a
9-byte x86-64 loop mapped executable when the extension is not built) called
with the GIL released, so the threads really run at the same time. Prints
one line per thread (CPU, increments, rate) and the counters' addresses.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import platform
import sys
import threading
import time
from typing import Callable

LINE = 64

# add qword [rdi], 1 ; dec rsi ; jnz -9 ; ret   (rdi = address, rsi = n > 0)
_X86_LOOP = bytes.fromhex("48830701" "48ffce" "75f7" "c3")
_keep: list = []


def store_loop() -> Callable[[int, int], None]:
    """``loop(address, n)``: n increments of the u64 at address, GIL released."""
    try:
        from .. import _native

        return _native.store_loop
    except (ImportError, AttributeError):
        pass
    if platform.machine() not in ("x86_64", "amd64"):
        raise RuntimeError("the false-sharing workload needs pmuscope's C extension on this architecture "
                           "(python3 setup.py build_ext --inplace)")
    buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(_X86_LOOP)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
    _keep.append((buf, fn))  # ctypes releases the GIL around foreign calls
    return lambda addr, n: fn(addr, n) if n > 0 else None


class Result:
    def __init__(self, cpu: int, address: int) -> None:
        self.cpu = cpu
        self.address = address
        self.increments = 0
        self.seconds = 0.0


def run(cpus: list[int], *, sharing: bool = True, seconds: float = 2.0, burst: int = 2_000_000) -> list[Result]:
    """Run one pinned thread per CPU for ``seconds``; returns per-thread results."""
    loop = store_loop()
    stride = 8 if sharing else 128
    block = (ctypes.c_char * (stride * len(cpus) + 2 * 128))()
    base = (ctypes.addressof(block) + 127) // 128 * 128  # start of a line (and of a 128 B block)
    results = [Result(cpu, base + i * stride) for i, cpu in enumerate(cpus)]
    start = threading.Barrier(len(cpus))
    deadline = [0.0]

    def body(r: Result) -> None:
        os.sched_setaffinity(threading.get_native_id(), {r.cpu})
        start.wait()
        t0 = time.perf_counter()
        while time.perf_counter() < deadline[0]:
            loop(r.address, burst)
            r.increments += burst
        r.seconds = time.perf_counter() - t0

    threads = [threading.Thread(target=body, args=(r,), name=f"false_sharing-cpu{r.cpu}") for r in results]
    deadline[0] = time.perf_counter() + seconds
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _keep.append(block)
    for r in results:
        got = ctypes.c_uint64.from_address(r.address).value
        assert got == r.increments, (got, r.increments)  # each word has exactly one writer
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m pmuscope.workloads false_sharing", description=__doc__.split("\n\n")[0])
    parser.add_argument("-t", "--type", type=int, choices=(0, 1), default=0, help="0: false sharing, 1: padded")
    parser.add_argument("-c", "--cpus", type=int, nargs="+", default=None, help="CPUs, one thread each")
    parser.add_argument("-d", "--duration", type=float, default=2.0, help="seconds (default 2)")
    parser.add_argument("-n", "--iterations", type=int, default=2_000_000, help="increments per burst")
    args = parser.parse_args(argv)
    allowed = sorted(os.sched_getaffinity(0))
    cpus = args.cpus if args.cpus is not None else allowed[:2]
    bad = [c for c in cpus if c not in allowed]
    if bad:
        print(f"false_sharing: CPU(s) {bad} not available to this process (allowed: {allowed})", file=sys.stderr)
        return 2
    results = run(cpus, sharing=args.type == 0, seconds=args.duration, burst=max(1, args.iterations))
    kind = "false sharing (one cache line)" if args.type == 0 else "padded (separate cache lines)"
    print(f"false_sharing: {kind}, {len(cpus)} threads, line {results[0].address // LINE * LINE:#x}")
    for r in results:
        rate = r.increments / r.seconds / 1e6 if r.seconds else 0.0
        print(f"  cpu {r.cpu:>3}  word {r.address:#x}  {r.increments:>14,} increments  {rate:8.1f} M/s")
    return 0
