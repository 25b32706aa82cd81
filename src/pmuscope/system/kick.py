"""Make one context switch happen on given CPUs, now.

Who runs on a CPU is learnt from context-switch records
(PERF_RECORD_SWITCH_CPU_WIDE, or a switch-triggered sample); a task that keeps
its CPU — a CPU hog alone on it — produces none, so its CPU's owner stays
unknown until the hog is preempted, which on a quiet machine may take seconds.
A short-lived thread pinned to each CPU wakes there: the hog is switched out
and back in, and the side band names it from the start.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterable


def kick_cpus(cpus: Iterable[int], nap_s: float = 0.0005) -> None:
    """Wake one thread on each CPU in ``cpus`` (in parallel) and wait for them."""

    def visit(cpu: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only
            time.sleep(nap_s)
        except OSError:  # offline, or outside this process's cpuset
            pass

    threads = [threading.Thread(target=visit, args=(cpu,), name=f"pmuscope-kick-{cpu}", daemon=True) for cpu in cpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
