"""numatop's memory-latency windows: load samples with a data address and a
latency (Intel PEBS load latency, AMD IBS op) mapped to the process's memory
areas (``/proc/PID/maps``) and to the node holding each page.

* WIN6 (areas): per area ACCESS% (its share of the samples) and LAT (mean
  latency in ns = weight cycles × ns per cycle);
* WIN7 (access-node distribution): the same per node of the sampled pages;
* the node of a page comes from ``move_pages(2)`` in query mode (``nodes``
  NULL: the kernel only fills ``status`` with the node or a -errno), as
  numatop's ``map_addr2nodedst`` does.

The aggregation (:func:`area_stats`, :func:`node_stats`) is pure numpy and
:func:`memory_area_view` applies it to one :class:`pmuscope.memory.MemSamples`
table whatever wrote it: :class:`LatencySampler` (the platform's load-latency
event per CPU: PEBS, IBS op) or :class:`SpeLatencySampler` (Arm SPE: load
records drained from each CPU's AUX area; latency = the record's total
latency counter in cycles, pid from its CONTEXT packet).

PEBS / IBS samples also carry ``PERF_SAMPLE_CALLCHAIN`` (user-space frames
only, at most :data:`MAX_STACK`, as numatop's ``IP_NUM``), kept per sample in
:class:`LatencySamples` for numatop's WIN10 (call chains to a memory area,
:func:`pmuscope.numa.areachains.area_callchains`).
"""

from __future__ import annotations

import ctypes
import os
import platform as _platform
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._np import ragged_index
from ..errors import PmuscopeError
from ..kernel import PerfEventFd, abi
from ..kernel.ring import RingBuffer
from ..memory.samples import MemSamples
from ..system import _fs
from .model import MemArea
from .platforms import Platform

# perf_mem_data_src.mem_op (include/uapi/linux/perf_event.h): bits 0-4
PERF_MEM_OP_NA = 0x01
PERF_MEM_OP_EXEC = 0x10
#: move_pages(2) syscall numbers
_SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239, "ppc64le": 301, "ppc64": 301, "riscv64": 239}
PAGE = os.sysconf("SC_PAGE_SIZE")
#: numatop's IP_NUM: user-space frames kept per call chain
MAX_STACK = 32
_PERF_CONTEXT_MAX = np.uint64(abi.PERF_CONTEXT_MAX)
_PERF_CONTEXT_USER = np.uint64(abi.PERF_CONTEXT_USER)


@dataclass
class LatencySamples(MemSamples):
    """:class:`~pmuscope.memory.MemSamples` plus each sample's user-space call
    chain (leaf first), flat with offsets as in
    :class:`pmuscope.records.SampleBatch`: sample i's chain is
    ``callchain[callchain_offsets[i]:callchain_offsets[i + 1]]``. ``None``
    when the source has no chains (Arm SPE)."""

    callchain: np.ndarray | None = None
    callchain_offsets: np.ndarray | None = None

    @classmethod
    def with_chains(cls, ms: MemSamples, callchain: np.ndarray | None, offsets: np.ndarray | None) -> "LatencySamples":
        """``ms`` with the chains ``callchain``/``offsets`` (n + 1 offsets)."""
        if (callchain is None) != (offsets is None):
            raise ValueError("LatencySamples: callchain and callchain_offsets go together")
        if offsets is not None and len(offsets) != len(ms) + 1:
            raise ValueError(f"LatencySamples: {len(offsets)} chain offsets for {len(ms)} samples (need n + 1)")
        kw = {f: getattr(ms, f) for f in ms.__dataclass_fields__}
        kw["callchain"] = None if callchain is None else np.asarray(callchain, dtype=np.uint64)
        kw["callchain_offsets"] = None if offsets is None else np.asarray(offsets, dtype=np.int64)
        return cls(**kw)

    def chain(self, i: int) -> np.ndarray:
        """Sample ``i``'s chain, leaf first (empty without chains)."""
        if self.callchain_offsets is None:
            return np.zeros(0, np.uint64)
        return self.callchain[self.callchain_offsets[i]:self.callchain_offsets[i + 1]]

    def select(self, mask) -> "LatencySamples":
        """The rows where ``mask`` is true (or the given indices), chains included."""
        base = MemSamples.select(self, mask)
        if self.callchain_offsets is None:
            return LatencySamples.with_chains(base, None, None)
        idx = np.arange(len(self))[mask]
        off = self.callchain_offsets
        pos, new_off = ragged_index(off[idx], off[idx + 1] - off[idx])
        return LatencySamples.with_chains(base, self.callchain[pos], new_off)

    @classmethod
    def concat(cls, parts: list[MemSamples]) -> "LatencySamples":
        """Join tables; a part without chains gets empty chains when another has some."""
        parts = [p for p in parts if p is not None]
        base = MemSamples.concat(parts)
        if not any(getattr(p, "callchain_offsets", None) is not None for p in parts):
            return cls.with_chains(base, None, None)
        flats, counts = [], []
        for p in parts:
            off = getattr(p, "callchain_offsets", None)
            if off is None:
                counts.append(np.zeros(len(p), np.int64))
            else:
                flats.append(p.callchain[off[0]:off[-1]])
                counts.append(np.diff(off))
        c = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        off = np.zeros(len(c) + 1, np.int64)
        np.cumsum(c, out=off[1:])
        flat = np.concatenate(flats).astype(np.uint64) if flats else np.zeros(0, np.uint64)
        return cls.with_chains(base, flat, off)


def user_chains(callchain: np.ndarray, offsets: np.ndarray, max_stack: int = MAX_STACK) -> tuple[np.ndarray, np.ndarray]:
    """The user-space part of kernel call chains (``PERF_SAMPLE_CALLCHAIN``
    words with their ``PERF_CONTEXT_*`` markers), at most ``max_stack`` frames
    per sample, leaf first: numatop keeps only user IPs, up to ``IP_NUM``.
    Words after ``PERF_CONTEXT_USER`` are user frames; any other marker
    (kernel, guest) starts frames that are dropped; words before the first
    marker count as user frames when their top bit is clear."""
    words = np.asarray(callchain, dtype=np.uint64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    counts = np.diff(offsets)
    sample_of = np.repeat(np.arange(n, dtype=np.int64), counts)
    words = words[offsets[0]:offsets[-1]]
    pos = np.arange(len(words), dtype=np.int64)
    marker = words >= _PERF_CONTEXT_MAX
    start = np.zeros(len(words), bool)
    start[(offsets[:-1] - offsets[0])[counts > 0]] = True
    last = np.maximum.accumulate(np.where(marker | start, pos, -1)) if len(words) else pos
    ctx_is_marker = marker[last] if len(words) else marker
    in_user = np.where(ctx_is_marker, words[last] == _PERF_CONTEXT_USER, (words >> np.uint64(63)) == 0)
    keep = ~marker & in_user
    kept_sample = sample_of[keep]
    kc = np.bincount(kept_sample, minlength=n).astype(np.int64)
    koff = np.zeros(n + 1, np.int64)
    np.cumsum(kc, out=koff[1:])
    rank = np.arange(len(kept_sample), dtype=np.int64) - koff[:-1][kept_sample]
    cut = rank < max_stack
    flat = words[keep][cut]
    c = np.bincount(kept_sample[cut], minlength=n).astype(np.int64)
    out = np.zeros(n + 1, np.int64)
    np.cumsum(c, out=out[1:])
    return flat, out


def keep_memory_samples(addr: np.ndarray, data_src: np.ndarray | None) -> np.ndarray:
    """Mask of samples that are memory accesses: numatop drops samples whose
    ``data_src.mem_op`` is NA or EXEC, and those with no address."""
    keep = addr != 0
    if data_src is not None:
        op = data_src.astype(np.uint64) & np.uint64(0x1F)
        keep &= (op & np.uint64(PERF_MEM_OP_NA | PERF_MEM_OP_EXEC)) == 0
    return keep


def area_stats(areas: list[MemArea], addr: np.ndarray, weight: np.ndarray, ns_per_cycle: float) -> list[dict[str, Any]]:
    """Per memory area: samples, ACCESS% (of all samples that fall in an
    area) and mean latency in ns. Areas without samples are kept (0%, None)."""
    if not areas:
        return []  # a kernel thread, or a process that exited
    starts = np.array([a.start for a in areas], dtype=np.uint64)
    ends = np.array([a.end for a in areas], dtype=np.uint64)
    addr = np.asarray(addr, dtype=np.uint64)
    weight = np.asarray(weight, dtype=np.float64)
    order = np.argsort(starts, kind="stable")
    idx = np.searchsorted(starts[order], addr, side="right") - 1
    inside = idx >= 0
    idx_c = np.where(inside, idx, 0)
    inside &= addr < ends[order][idx_c]
    area_of = order[idx_c[inside]]
    counts = np.bincount(area_of, minlength=len(areas))
    wsum = np.bincount(area_of, weights=weight[inside], minlength=len(areas))
    total = int(inside.sum())
    out = []
    for i, a in enumerate(areas):
        n = int(counts[i])
        out.append({"addr": a.start, "size": a.size, "perms": a.perms, "desc": a.desc, "samples": n,
                    "access_pct": 100.0 * n / total if total else None,
                    "lat_ns": wsum[i] / n * ns_per_cycle if n else None})
    return out


def node_stats(nodes: np.ndarray, weight: np.ndarray, ns_per_cycle: float) -> dict[int, dict[str, float]]:
    """Per node of the sampled pages (negative = not resident/unknown, left
    out): ACCESS% and mean latency in ns (numatop's WIN7)."""
    nodes = np.asarray(nodes)
    weight = np.asarray(weight, dtype=np.float64)
    ok = nodes >= 0
    total = int(ok.sum())
    out = {}
    for n in np.unique(nodes[ok]).tolist():
        m = nodes == n
        out[int(n)] = {"access_pct": 100.0 * m.sum() / total, "lat_ns": float(weight[m].mean() * ns_per_cycle)}
    return out


def move_pages_query(pid: int, addrs: np.ndarray) -> np.ndarray:
    """The node of each address's page in ``pid`` (0 = this process), via
    ``move_pages(pid, n, pages, NULL, status, 0)``; -errno per page that is
    not resident (-ENOENT) or not accessible (-EFAULT)."""
    nr = _SYS_MOVE_PAGES.get(_platform.machine())
    if nr is None:
        raise PmuscopeError(f"move_pages: syscall number unknown for {_platform.machine()}")
    pages = np.asarray(addrs, dtype=np.uint64) & ~np.uint64(PAGE - 1)
    n = pages.size
    status = np.zeros(n, dtype=np.int32)
    if n == 0:
        return status
    libc = ctypes.CDLL(None, use_errno=True)
    ptrs = (ctypes.c_void_p * n)(*[int(p) for p in pages.tolist()])
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_int(pid), ctypes.c_ulong(n), ptrs, None,
                       status.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(0))
    if ret < 0:
        err = ctypes.get_errno()
        raise PmuscopeError(f"move_pages(pid={pid}) failed: {os.strerror(err)}"
                            + (" (needs CAP_SYS_NICE or the same user)" if err == 1 else ""))
    return status


def cycles_per_second(root: str = "/") -> float | None:
    """numatop's ``os_calibrate`` order: the GHz figure in the model name,
    then ``cpuinfo_max_freq``, then ``cpu MHz`` of /proc/cpuinfo."""
    import re

    text = _fs.read_text(root, "proc/cpuinfo") or ""
    m = re.search(r"model name\s*:.*@\s*([\d.]+)\s*GHz", text)
    if m:
        return float(m.group(1)) * 1e9
    khz = _fs.read_int(root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if khz:
        return khz * 1e3
    m = re.search(r"cpu MHz\s*:\s*([\d.]+)", text)
    return float(m.group(1)) * 1e6 if m else None


def ll_attr(platform: Platform, root: str = "/") -> tuple[abi.perf_event_attr, str]:
    """The load-latency sampling attr of ``platform`` (raises with the reason
    when it has none here)."""
    ll = platform.ll
    if not ll:
        raise PmuscopeError(f"no load-latency event for {platform.name} (numatop: latency N)")
    # CALLCHAIN for WIN10: user frames only (exclude_callchain_kernel), at most MAX_STACK of them
    sample_type = int(abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_TID | abi.PerfSample.ADDR | abi.PerfSample.WEIGHT
                      | abi.PerfSample.DATA_SRC | abi.PERF_SAMPLE_CPU | abi.PERF_SAMPLE_IDENTIFIER
                      | abi.PerfSample.CALLCHAIN)
    chains = {"exclude_callchain_kernel": 1, "sample_max_stack": MAX_STACK}
    if is_spe(ll):
        raise PmuscopeError(f"{ll['name']}: Arm SPE writes an AUX trace, not samples (use SpeLatencySampler)")
    if "pmu" in ll:
        ptype = _fs.read_int(root, f"sys/bus/event_source/devices/{ll['pmu']}/type")
        if ptype is None:
            raise PmuscopeError(f"{ll['name']}: no {ll['pmu']} PMU here (a VM rarely exposes it)")
        return abi.perf_event_attr(type=ptype, config=int(str(ll.get("config", "0")), 0), sample_period=ll.get("sample_period", 1280),
                                   sample_type=sample_type, disabled=1, **chains), ll["name"]
    return abi.perf_event_attr(type=abi.PERF_TYPE_RAW, config=int(ll["config"], 0), config1=int(ll.get("config1", "128"), 0),
                               precise_ip=1, exclude_guest=1, sample_period=1000, sample_type=sample_type,
                               disabled=1, **chains), ll["name"]


class LatencySampler:
    """The platform's load-latency event on every CPU; :meth:`collect` returns
    the memory-access samples since the last call."""

    def __init__(self, platform: Platform, cpus: list[int], root: str = "/") -> None:
        from ..records import AttrTable

        self.attr, self.name = ll_attr(platform, root)
        self._fds: list[PerfEventFd] = []
        self._rings: list[RingBuffer] = []
        try:
            for cpu in cpus:
                fd = PerfEventFd(self.attr, pid=-1, cpu=cpu, event=self.name)
                self._fds.append(fd)
                self._rings.append(RingBuffer(fd, pages=64))
        except PmuscopeError:
            self.close()
            raise
        self._attrs = AttrTable([(self.attr, [fd.id() for fd in self._fds])])
        for fd in self._fds:
            fd.enable()

    def collect(self) -> "LatencySamples":
        """The samples since the last call (all of them: :func:`memory_area_view`
        filters), each with its user-space call chain."""
        from ..records import decode

        parts = []
        for ring in self._rings:
            for item in decode(ring.read_records(), self._attrs):
                if getattr(item, "addr", None) is not None and item.weight is not None:
                    parts.append(samples_from_batch(item, self.name))
        return LatencySamples.concat(parts) if parts else LatencySamples.with_chains(MemSamples.empty(source=self.name), None, None)

    def close(self) -> None:
        for r in self._rings:
            r.close()
        for fd in self._fds:
            fd.close()
        self._rings.clear()
        self._fds.clear()


def samples_from_batch(item: Any, source: str) -> LatencySamples:
    """A decoded load-latency :class:`~pmuscope.records.SampleBatch` as a
    :class:`LatencySamples` table (user-space chains, at most MAX_STACK)."""
    n = len(item.addr)
    ms = MemSamples.from_columns(n, pid=item.pid, tid=item.tid, addr=item.addr, weight=item.weight, ip=item.ip,
                                 data_src=item.data_src, cpu=getattr(item, "cpu", None), source=source)
    if getattr(item, "callchain_offsets", None) is None:
        return LatencySamples.with_chains(ms, None, None)
    return LatencySamples.with_chains(ms, *user_chains(item.callchain, item.callchain_offsets))


def is_spe(ll: dict[str, Any] | None) -> bool:
    """Whether a platform's load-latency entry names an Arm SPE PMU."""
    return bool(ll) and str(ll.get("pmu", "")).startswith("arm_spe")


class SpeLatencySampler:
    """Arm SPE load records on every CPU the SPE PMU covers (of ``cpus``);
    :meth:`collect` drains each CPU's AUX area and returns the memory
    records since the last call as :class:`~pmuscope.memory.MemSamples`.

    The thread of a record comes from its CONTEXT packet (CONTEXTIDR_EL1
    holds the thread id when the kernel has ``CONFIG_PID_IN_CONTEXTIDR`` and
    the opener is perfmon-capable, ``drivers/perf/arm_spe_pmu.c``);
    :func:`spe_samples_by_process` names the process."""

    name = "SPE"

    def __init__(self, cpus: list[int], root: str = "/", *, min_latency: int = 30, period: int = 4096,
                 pmu_name: str | None = None) -> None:
        from ..spe.record import SpeConfig, SpeRecorder, find_spe_pmu

        sysfs = os.path.join(root, "sys")
        pmu = find_spe_pmu(sysfs, pmu_name)
        covered = [c for c in cpus if not pmu.cpus or c in pmu.cpus]
        # loads only (perf mem's spe-load without pa_enable: physical addresses are not needed here)
        config = SpeConfig(ts_enable=1, load_filter=1, store_filter=0, min_latency=min_latency or None, period=period)
        self._rec = SpeRecorder(config, cpus=covered, sysfs_root=sysfs, pmu_name=pmu.name, synthesize_existing=False,
                                procfs_root=os.path.join(root, "proc"))
        self._rec.enable()

    def collect(self) -> MemSamples:
        from ..memory.samples import from_spe_records
        from ..spe import decode_records

        parts = []
        for ring, fd in zip(self._rec.rings, self._rec.fds):
            ring.read_records()  # side band: not needed, only released
            aux = ring.read_aux()
            if aux:
                parts.append(from_spe_records(decode_records(aux, cpu=fd.cpu, midr=self._rec.midr.get(fd.cpu, 0))))
        return MemSamples.concat(parts) if parts else MemSamples.empty(source="SPE")

    def close(self) -> None:
        self._rec.close()


def spe_samples_by_process(ms: MemSamples, pid: int, root: str = "/") -> MemSamples:
    """SPE memory samples (``pid`` = ``tid`` = the CONTEXT packet's thread
    id, -1 without one) with ``pid`` set to ``pid`` for the records of its
    threads (``/proc/PID/task``) and -1 for any other; ``meta["no_context"]``
    counts the records that carry no CONTEXT packet (they belong to no process)."""
    try:
        tids = {int(t) for t in os.listdir(os.path.join(root, "proc", str(pid), "task")) if t.isdigit()}
    except OSError:
        tids = set()
    tids.add(int(pid))
    ms.pid = np.where(np.isin(ms.tid, np.fromiter(tids, np.int64)), np.int64(pid), np.int64(-1))
    ms.source = "SPE"
    ms.meta["no_context"] = int((ms.tid < 0).sum())
    return ms


def memory_area_view(samples: MemSamples, areas: list[MemArea], pid: int, *, tid: int | None = None,
                     ns_per_cycle: float = 1.0, node_of: Any = None, name: str = "load",
                     duration: float | None = None) -> dict[str, Any]:
    """numatop's memory-areas result for ``pid`` (only its thread ``tid``
    when given) from memory samples of any source (PEBS, IBS op, Arm SPE):
    ``{"areas": area_stats rows, "nodes": node_stats, "samples": n,
    "source": name, "reason": None or why there are none, "mem_samples":
    the samples of pid (tid) for call chains to an area}``.

    ``node_of(addrs) -> nodes`` gives the node of each sampled page
    (default: :func:`move_pages_query` on ``pid``; negative = not resident)."""
    keep = keep_memory_samples(samples.addr, samples.data_src) & (samples.pid == pid)
    if tid is not None:
        keep &= samples.tid == tid
    addr = samples.addr[keep]
    weight = samples.weight[keep].astype(np.float64)
    rows = area_stats(areas, addr, weight, ns_per_cycle)
    lookup = node_of if node_of is not None else (lambda a: move_pages_query(pid, a))
    try:
        nodes = node_stats(lookup(addr), weight, ns_per_cycle) if addr.size else {}
    except PmuscopeError:
        nodes = {}
    reason = None
    if not addr.size:
        who = f"pid {pid}" if tid is None else f"thread {tid} of pid {pid}"
        within = f" in {duration:g}s" if duration is not None else ""
        reason = f"no {name} samples for {who}{within}"
        lost = int(samples.meta.get("no_context", 0))
        if lost:
            reason += (f" ({lost} SPE records have no CONTEXT packet to name their process: the kernel needs "
                       "CONFIG_PID_IN_CONTEXTIDR and the opener CAP_PERFMON)")
    mine = samples.pid == pid if tid is None else (samples.pid == pid) & (samples.tid == tid)
    # the process's samples (chains included): numatop's WIN10 reads them (pmuscope.numa.areachains)
    return {"areas": rows, "nodes": nodes, "samples": int(addr.size), "source": name, "reason": reason,
            "mem_samples": samples.select(mine)}


def latency_source(platform: Platform) -> str:
    """``"spe"`` when the platform's load-latency entry is an Arm SPE PMU (or
    an Arm CPU not in the tables: SPE is its only load-latency source), else
    ``"ll"`` (the sampling load-latency event: PEBS, IBS op)."""
    if is_spe(platform.ll):
        return "spe"
    if not platform.ll and platform.generic and _platform.machine() in ("aarch64", "arm64"):
        return "spe"
    return "ll"


def measure_latency(pid: int, platform: Platform, cpus: list[int], *, duration: float = 1.0,
                    root: str = "/", tid: int | None = None, source: str | None = None,
                    node_of: Any = None) -> dict[str, Any]:
    """Sample loads for ``duration`` seconds and return ``{"areas": [...],
    "nodes": {...}, "samples": n, "source": name, "reason": None}`` for ``pid``
    (only its thread ``tid`` when given: numatop's LAT_LWP), or the reason there is
    nothing (``"reason"``: no load-latency PMU here, ...).

    ``source`` is ``"ll"`` (the platform's PEBS / IBS op event), ``"spe"``
    (Arm SPE) or None: :func:`latency_source` of the platform."""
    import time

    from .model import read_maps

    kind = source or latency_source(platform)
    if kind not in ("ll", "spe"):
        raise PmuscopeError(f"latency source must be 'll' (PEBS/IBS) or 'spe' (Arm SPE), got {source!r}")
    label = "SPE" if kind == "spe" else ((platform.ll or {}).get("name") or "load-latency")
    try:
        if kind == "spe":
            ll = platform.ll if is_spe(platform.ll) else {}
            sampler: Any = SpeLatencySampler(cpus, root, min_latency=int(ll.get("min_latency", 30)))
        else:
            sampler = LatencySampler(platform, cpus, root)
    except PmuscopeError as err:
        msg = str(err).splitlines()[0]
        if kind == "spe" and not msg.startswith("SPE"):
            msg = f"SPE: {msg}"
        return {"areas": [], "nodes": {}, "samples": 0, "source": label, "reason": msg}
    try:
        time.sleep(duration)
        s = sampler.collect()
    finally:
        sampler.close()
    if kind == "spe":
        s = spe_samples_by_process(s, pid, root)
    hz = cycles_per_second(root) or 1e9
    return memory_area_view(s, read_maps(root, pid) or [], pid, tid=tid, ns_per_cycle=1e9 / hz, node_of=node_of,
                            name=sampler.name, duration=duration)
