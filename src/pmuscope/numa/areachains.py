"""numatop's WIN10 (LLCALLCHAIN): the call chains of the loads that went to
one memory area with a latency above a threshold (numatop: 128 cycles, its
``LL_THRESH``).

The chains are the user-space frames the load-latency sampler recorded with
each sample (:class:`~pmuscope.numa.latency.LatencySamples`, PEBS / IBS op).
They are symbolized through :class:`pmuscope.symbols.Symbolizer` — the
symbolizer behind the profile layer that WIN9's call chains go through — one
lookup per distinct address, and merged when their frames name the same
functions (as WIN9's folded stacks merge). Arm SPE records carry a PC but no
call chain: for them the result is the top PCs of the area's loads,
``kind="pc"``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..memory.samples import MemSamples
from .latency import keep_memory_samples
from .model import MemArea

#: numatop's LL_THRESH: WIN10 shows only loads slower than this (cycles)
LL_THRESH = 128


@dataclass
class AreaCallChains:
    """The most frequent call chains (root first) of the slow loads to one
    memory area, with their sample counts; ``kind`` is ``"callchain"`` or
    ``"pc"`` (the source has no chains: each "chain" is the load's PC)."""

    pid: int | None
    area_start: int
    area_end: int
    desc: str
    kind: str = "callchain"
    min_latency_cycles: int = LL_THRESH
    samples: int = 0          # loads to the area above the threshold
    below: int = 0            # loads to the area at or below it (not shown)
    chains: list[tuple[int, list[str]]] = field(default_factory=list)
    source: str = ""
    reason: str | None = None
    tid: int | None = None

    @property
    def title(self) -> str:
        what = "Call chains to" if self.kind == "callchain" else "Top PCs (no call chains) of loads to"
        return f"{what} area {self.area_start:x} ({self.desc})"


def _labels(symbolizer: Any, pids: np.ndarray, ips: np.ndarray) -> list[str]:
    """A name per (pid, ip), as WIN9's folded stacks name frames: the symbol,
    else ``[dso]`` (base name), else ``[unknown]``."""
    r = symbolizer.resolve_many(pids, ips, np.zeros(len(ips), bool))
    out = []
    for s, d in zip(r.sym_id.tolist(), r.dso_id.tolist()):
        if s >= 0:
            name = symbolizer.sym_name(s)
        elif d >= 0:
            dso = symbolizer.dso_name(d)
            name = f"[{dso if dso.startswith('[') else os.path.basename(dso) or dso}]"
        else:
            name = "[unknown]"
        out.append(name.replace(";", ":").replace("\n", " "))
    return out


def area_callchains(samples: MemSamples, area: MemArea, *, pid: int | None = None, tid: int | None = None,
                    min_latency_cycles: int = LL_THRESH, top: int = 20, symbolizer: Any = None,
                    procfs_root: str = "/proc") -> AreaCallChains:
    """The call chains (root first, most frequent first, at most ``top``) of
    the memory samples whose address falls in ``area`` and whose latency
    (``weight``, cycles) is above ``min_latency_cycles``; only ``pid``'s
    (its thread ``tid``'s) samples when given.

    ``samples`` is a :class:`~pmuscope.numa.latency.LatencySamples` with
    chains (PEBS / IBS op) or any :class:`~pmuscope.memory.MemSamples`
    without (Arm SPE): then the top PCs, ``kind="pc"``. ``symbolizer`` is a
    :class:`pmuscope.symbols.Symbolizer` (default: one reading
    ``procfs_root/PID/maps`` of the live process)."""
    keep = keep_memory_samples(samples.addr, samples.data_src)
    keep &= (samples.addr >= np.uint64(area.start)) & (samples.addr < np.uint64(area.end))
    if pid is not None:
        keep &= samples.pid == pid
    if tid is not None:
        keep &= samples.tid == tid
    slow = keep & (samples.weight > np.uint64(max(int(min_latency_cycles), 0)))
    idx = np.flatnonzero(slow)
    offsets = getattr(samples, "callchain_offsets", None)
    kind = "callchain" if offsets is not None else "pc"
    res = AreaCallChains(pid, area.start, area.end, area.desc, kind, int(min_latency_cycles), len(idx),
                         int(keep.sum()) - len(idx), source=samples.source, tid=tid)
    if not len(idx):
        res.reason = (f"no loads to this area above {min_latency_cycles} cycles"
                      f" ({res.below} at or below it)")
        return res
    if kind == "callchain":
        starts, ends = offsets[idx], offsets[idx + 1]
        counts = (ends - starts).astype(np.int64)
        pos = np.repeat(starts, counts) + (np.arange(int(counts.sum()), dtype=np.int64)
                                           - np.repeat(np.cumsum(counts) - counts, counts))
        frames = samples.callchain[pos]
        frame_pid = np.repeat(samples.pid[idx], counts)
    else:
        counts = np.ones(len(idx), np.int64)
        frames = samples.ip[idx]
        frame_pid = samples.pid[idx]
    if symbolizer is None:
        from ..symbols import Symbolizer

        symbolizer = Symbolizer(kernel=False, use_proc_maps=True, procfs_root=procfs_root)
    # one lookup per distinct (pid, address)
    key = np.stack([frame_pid.astype(np.uint64), frames.astype(np.uint64)], axis=1) if len(frames) \
        else np.zeros((0, 2), np.uint64)
    uk, inv = np.unique(key, axis=0, return_inverse=True)
    names = _labels(symbolizer, uk[:, 0].astype(np.int64), uk[:, 1]) if len(uk) else []
    label = np.asarray(inv, dtype=np.int64).reshape(-1)
    agg: Counter = Counter()
    cuts = np.cumsum(counts).tolist()
    lab = label.tolist()
    prev = 0
    empty = 0
    for end in cuts:
        if end == prev:
            empty += 1
        else:
            agg[tuple(names[j] for j in reversed(lab[prev:end]))] += 1
        prev = end
    if empty:
        agg[("[no user-space frames]",)] += empty
    res.chains = [(n, list(ch)) for ch, n in agg.most_common(top)]
    return res
