"""Call chains of one process for one of the NUMA events (numatop's WIN9:
the chains at which RMA, LMA, CLK or IR overflowed), recorded with the
sampling engine and symbolized by the profile layer."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from ..errors import PmuscopeError
from .platforms import EventRef, Platform

#: numatop's default sample periods ("normal" precision, common/os/pfwrapper.c)
PERIODS = {"rma": 10_000, "lma": 10_000, "clk": 10_000_000, "ir": 10_000_000}
_HW_NAMES = {0: "cycles", 1: "instructions", 9: "ref-cycles"}


def event_string(ref: EventRef) -> str:
    """The event-string form of a table event (``cycles``, ``r4044``,
    ``cpu/config=0x1b7,config1=0x638000001/``, ``node-loads``)."""
    if ref.type == "hardware":
        return _HW_NAMES[ref.config]
    if ref.type == "cache":
        return ref.name
    if ref.config1:
        return f"cpu/config={ref.config:#x},config1={ref.config1:#x}/"
    return f"r{ref.config:x}"


@dataclass
class CallChains:
    """The most frequent call chains (root first) and their sample counts."""

    pid: int
    metric: str
    event: str | None
    samples: int = 0
    chains: list[tuple[int, list[str]]] = field(default_factory=list)
    reason: str | None = None  # why there are none
    tid: int | None = None  # one thread of pid (numatop's WIN5 -> WIN9), or None: every thread


def record_callchains(pid: int, metric: str, platform: Platform, *, duration: float = 1.0, top: int = 20,
                      tid: int | None = None) -> CallChains:
    """Sample ``pid`` (only its thread ``tid`` when given) on the platform's
    ``metric`` event (``rma``, ``lma``, ``clk``, ``ir``) with call chains for
    ``duration`` seconds: DWARF-unwound user stacks when the process's
    program (or its libpython) keeps no frame pointers, frame pointers else."""
    refs = platform.events.get(metric)
    if not refs:
        return CallChains(pid, metric, None, reason=platform.missing.get(metric, f"no {metric} event for this CPU"), tid=tid)
    ref = next((r for r in refs if r.sign > 0), refs[0])
    event = event_string(ref)
    from ..profile.export import folded_stacks
    from ..profile.model import load_profile
    from ..sampling import record

    fd, path = tempfile.mkstemp(prefix="pmuscope-numa-", suffix=".data")
    os.close(fd)
    try:
        try:
            target = {"pid": pid} if tid is None else {"tid": tid}
            # dwarf stacks where the process keeps no frame pointers (as pmuscope profile chooses)
            from ..unwind.framepointers import choose_call_graph

            mode, _ = choose_call_graph("auto", [], [pid], False)
            res = record(event, callgraph=mode, output=path, duration=duration, period=PERIODS[metric], **target)
        except PmuscopeError as err:
            return CallChains(pid, metric, event, reason=f"{event}: {str(err).splitlines()[0]}", tid=tid)
        folded = folded_stacks(load_profile(path), comm=False)
    finally:
        os.unlink(path)
    chains = [(count, stack.split(";")) for stack, count in folded.most_common(top)]
    who = f"pid {pid}" if tid is None else f"thread {tid} of pid {pid}"
    reason = None if chains else f"no {event} samples for {who} in {duration:g}s"
    return CallChains(pid, metric, event, res.samples, chains, reason, tid)
