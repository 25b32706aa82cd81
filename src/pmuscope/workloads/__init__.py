"""Bundled workloads with known behaviour, for demos, tests and benchmarks.

``python -m pmuscope.workloads NAME [ARGS]``:

- ``busy SECONDS``     a CPU-bound loop (pure Python arithmetic and calls)
- ``touch MIB``        touch MIB of fresh anonymous memory, one write per page
- ``sleeps N MS``      N sleeps of MS milliseconds (N voluntary context switches)
- ``demo``             a short mix of all three (the README's main job)
- ``false_sharing [-t 0|1] [-c CPU ...] [-d S]``  native threads on chosen CPUs
  writing one cache line (``c2c`` finds it; ``-t 1``: padded)
"""

from __future__ import annotations

import mmap
import sys
import time

PAGE = mmap.PAGESIZE


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def busy(seconds: float) -> int:
    """Spin in Python for ``seconds`` of wall time; returns the iterations."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        fib(15)
        n += 1
    return n


def busy_iterations(iterations: int) -> int:
    """A fixed amount of CPU work (deterministic instruction count)."""
    total = 0
    for i in range(iterations):
        total += fib(12) + i
    return total


def touch(mib: float) -> int:
    """Touch ``mib`` MiB of fresh anonymous memory: one page fault per page."""
    size = int(mib * 1024 * 1024)
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pages = 0
    for off in range(0, size, PAGE):
        buf[off] = 1
        pages += 1
    buf.close()
    return pages


def sleeps(n: int, ms: float) -> None:
    for _ in range(n):
        time.sleep(ms / 1000.0)


def demo() -> None:
    busy(0.5)
    touch(64)
    sleeps(10, 5)
    busy_iterations(20000)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    name, args = argv[0], argv[1:]
    if name == "busy":
        busy(float(args[0]) if args else 1.0)
    elif name == "iterations":
        busy_iterations(int(args[0]) if args else 100000)
    elif name == "touch":
        touch(float(args[0]) if args else 64)
    elif name == "sleeps":
        sleeps(int(args[0]) if args else 10, float(args[1]) if len(args) > 1 else 10)
    elif name == "demo":
        demo()
    elif name == "false_sharing":
        from .false_sharing import main as fs_main

        return fs_main(args)
    else:
        print(f"unknown workload {name!r}\n{__doc__}", file=sys.stderr)
        return 2
    return 0
