"""Recording Arm SPE: the event's config terms, the AUX area, and AUXTRACE
records in a perf.data that ``perf report``/``pmuscope spe -i`` read.

:class:`SpeConfig` holds the terms ``drivers/perf/arm_spe_pmu.c`` publishes in
``/sys/bus/event_source/devices/arm_spe_N/format`` (``ts_enable``,
``pa_enable``, ``pct_enable``, ``jitter``, ``branch_filter``, ``load_filter``,
``store_filter``, ``discard``, ``event_filter``, ``inv_event_filter``,
``min_latency``, ...). :func:`spe_attr` encodes them with the PMU's *own*
format bits (read from sysfs, never hard-coded), so a kernel that moved or
added a field is followed. :func:`find_spe_pmu` finds the PMU or says in one
line why there is none.

:class:`SpeRecorder` opens one SPE event per CPU, maps each ring buffer with
an AUX area (:meth:`pmuscope.kernel.ring.RingBuffer.map_aux`), and on
:meth:`~SpeRecorder.drain` turns every PERF_RECORD_AUX into a
PERF_RECORD_AUXTRACE carrying the AUX bytes (as ``perf record`` does), then
:meth:`~SpeRecorder.write` produces perf.data with PERF_RECORD_AUXTRACE_INFO
(per-CPU MIDR, so data sources decode with the right table).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

from ..errors import EventNotSupportedError, NoHardwarePMUError, PmuscopeError
from ..kernel import abi

__all__ = ["SpeConfig", "find_spe_pmu", "spe_pmus", "spe_attr", "spe_event_string", "SpeRecorder",
           "aux_to_auxtrace", "read_midrs", "SPE_SAMPLE_TYPE"]

#: perf record's sample_type for the arm_spe evsel (IP|TID|TIME|CPU|IDENTIFIER|DATA_SRC; PHYS_ADDR with pa_enable)
SPE_SAMPLE_TYPE = (abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_TID | abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_CPU
                   | abi.PERF_SAMPLE_IDENTIFIER | abi.PERF_SAMPLE_DATA_SRC)


@dataclass
class SpeConfig:
    """SPE event terms (``arm_spe_0/ts_enable=1,load_filter=1,.../``).

    ``period`` is the sampling interval (operations between samples,
    PMSIRR.INTERVAL; perf's ``-c``); it is raised to the PMU's
    ``caps/min_interval`` when lower. Terms left at None are not written.
    ``extra`` holds any other sysfs format term by name (newer kernels add
    e.g. ``branch_filter_mask``, ``float_filter``)."""

    ts_enable: int | None = 1
    pa_enable: int | None = None
    pct_enable: int | None = None
    jitter: int | None = None
    branch_filter: int | None = None
    load_filter: int | None = None
    store_filter: int | None = None
    discard: int | None = None
    event_filter: int | None = None
    inv_event_filter: int | None = None
    min_latency: int | None = None
    period: int = 4096
    exclude_kernel: bool = False
    exclude_user: bool = False
    extra: dict[str, int] = field(default_factory=dict)

    def terms(self) -> dict[str, int]:
        """The set terms by name (``extra`` included)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("period", "exclude_kernel", "exclude_user", "extra") and getattr(self, f.name) is not None}
        out.update(self.extra)
        return out

    @classmethod
    def for_mem(cls, kind: str = "ldst", min_latency: int = 30, **kw) -> "SpeConfig":
        """The terms ``perf mem``/``perf c2c record`` use on arm64
        (tools/perf/arch/arm64/util/mem-events.c): ``spe-load``, ``spe-store``, ``spe-ldst``."""
        if kind == "load":
            return cls(ts_enable=1, pa_enable=1, load_filter=1, store_filter=0, min_latency=min_latency, **kw)
        if kind == "store":
            return cls(ts_enable=1, pa_enable=1, load_filter=0, store_filter=1, **kw)
        if kind == "ldst":
            return cls(ts_enable=1, pa_enable=1, load_filter=1, store_filter=1, min_latency=min_latency, **kw)
        raise PmuscopeError(f"SPE memory mode must be load, store or ldst, got {kind!r}")


def spe_pmus(sysfs_root: str = "/sys") -> list:
    """Every ``arm_spe_N`` PMU (one per CPU type on big.LITTLE parts)."""
    from ..events.pmu import pmus

    return [p for name, p in sorted(pmus(sysfs_root).items()) if name.startswith("arm_spe_")]


def find_spe_pmu(sysfs_root: str = "/sys", name: str | None = None):
    """The SPE PMU to use (``name`` or the first ``arm_spe_*``), or raise
    :class:`~pmuscope.errors.NoHardwarePMUError` saying why there is none."""
    found = spe_pmus(sysfs_root)
    if name is not None:
        found = [p for p in found if p.name == name]
    if found:
        return found[0]
    import platform

    devices = os.path.join(sysfs_root, "bus", "event_source", "devices")
    machine = platform.machine() if sysfs_root == "/sys" else "this sysfs tree"
    what = f"no PMU named {name}" if name else "no arm_spe_* PMU"
    hint = ("Arm SPE exists only on Armv8.2+ CPUs with the arm_spe_pmu driver (CONFIG_ARM_SPE_PMU) and an SPE "
            "interrupt in the firmware tables")
    if machine in ("x86_64", "amd64", "i686"):
        hint = f"this is an {machine} machine: Arm SPE is an Arm CPU feature (use PEBS/IBS memory sampling here)"
    raise NoHardwarePMUError(f"{what} under {devices}: {hint}", sysfs_root=sysfs_root)


def spe_attr(config: SpeConfig | None = None, pmu: Any = None, *, sysfs_root: str = "/sys") -> abi.perf_event_attr:
    """A ``perf_event_attr`` for the SPE PMU with ``config``'s terms encoded by
    the PMU's sysfs format bits; unknown terms and out-of-range values raise
    :class:`~pmuscope.errors.EventNotSupportedError` naming the term."""
    config = config or SpeConfig()
    pmu = pmu if pmu is not None else find_spe_pmu(sysfs_root)
    a = abi.perf_event_attr()
    a.type = pmu.type
    a.size = abi.PERF_ATTR_SIZE_VER7
    words = {"config": 0, "config1": 0, "config2": 0, "config3": 0}
    formats = pmu.formats
    for term, value in config.terms().items():
        fmt = formats.get(term)
        if fmt is None:
            known = ", ".join(sorted(formats)) or "none"
            raise EventNotSupportedError(f"{pmu.name} has no '{term}' term on this kernel (its format terms: {known})",
                                         term=term)
        if not 0 <= int(value) <= fmt.max_value:
            raise EventNotSupportedError(f"{pmu.name}/{term}={value}/: out of range 0..{fmt.max_value} ({fmt.text})",
                                         term=term)
        if fmt.field not in words:
            raise EventNotSupportedError(f"{pmu.name}/{term}/ targets {fmt.field}, which this attr layout lacks")
        words[fmt.field] |= fmt.encode(int(value))
    a.config, a.config1, a.config2 = words["config"], words["config1"], words["config2"]
    if words["config3"]:
        # config3 (inv_event_filter) is only read from an attr of at least PERF_ATTR_SIZE_VER8
        a.config3 = words["config3"]
        a.size = abi.PERF_ATTR_SIZE_VER8
    min_ival = 0
    try:
        min_ival = int(pmu.caps.get("min_interval", "0"), 0)
    except ValueError:
        pass
    a.sample_period = max(int(config.period), min_ival)
    a.sample_type = SPE_SAMPLE_TYPE | (abi.PERF_SAMPLE_PHYS_ADDR if config.pa_enable else 0)
    a.exclude_kernel = int(config.exclude_kernel)
    a.exclude_user = int(config.exclude_user)
    a.exclude_guest = 1
    a.disabled = 1
    a.sample_id_all = 1
    return a


def spe_event_string(config: SpeConfig | None = None, pmu_name: str = "arm_spe_0") -> str:
    """The perf event string for ``config``: ``arm_spe_0/ts_enable=1,.../``."""
    config = config or SpeConfig()
    return f"{pmu_name}/" + ",".join(f"{k}={v}" for k, v in config.terms().items()) + "/"


def read_midrs(sysfs_root: str = "/sys", cpus: Iterable[int] | None = None) -> dict[int, int]:
    """cpu -> MIDR_EL1 from ``devices/system/cpu/cpuN/regs/identification/midr_el1``
    (what perf puts into AUXTRACE_INFO); CPUs without the file are left out."""
    base = os.path.join(sysfs_root, "devices", "system", "cpu")
    out: dict[int, int] = {}
    if cpus is None:
        try:
            cpus = sorted(int(d[3:]) for d in os.listdir(base) if d.startswith("cpu") and d[3:].isdigit())
        except OSError:
            cpus = []
    for cpu in cpus:
        try:
            with open(os.path.join(base, f"cpu{cpu}", "regs", "identification", "midr_el1")) as f:
                out[cpu] = int(f.read().strip(), 16)
        except (OSError, ValueError):
            continue
    return out


def aux_to_auxtrace(aux_records: Iterable[tuple[int, int, int]], aux_data: bytes, *, cpu: int, tid: int = -1,
                    idx: int = 0, reference: int = 0, aux_base: int = 0) -> bytes:
    """PERF_RECORD_AUXTRACE records (each followed by its bytes) for the
    PERF_RECORD_AUX ``(aux_offset, aux_size, flags)`` entries of one CPU.

    ``aux_data`` holds the AUX bytes read since ``aux_base`` (the aux_offset
    of its first byte); records whose bytes are not in it are skipped."""
    from .perfdata import auxtrace_record

    out = bytearray()
    for off, size, _flags in aux_records:
        start = off - aux_base
        if size == 0 or start < 0 or start + size > len(aux_data):
            continue
        out += auxtrace_record(aux_data[start:start + size], offset=off, reference=reference, idx=idx, tid=tid, cpu=cpu)
    return bytes(out)


def _existing_processes(sample_type: int, procfs_root: str, pid: int) -> bytes:
    """COMM/FORK/MMAP2 (data mappings too) for processes that already run, as
    perf record synthesizes them."""
    from ..sampling.synthesize import all_pids, synthesize

    pids = [pid] if pid != -1 else all_pids(procfs_root)
    return b"".join(synthesize(pids, sample_type, procfs_root=procfs_root, kernel=True, data_mmaps=True))


class SpeRecorder:
    """Record SPE on every CPU the PMU covers (or ``cpus``), system-wide or for ``pid``.

    Existing processes' COMM/MMAP2 records (data mappings included) are
    synthesized first (``synthesize_existing``), new ones arrive as side band
    on the SPE events (``attr.mmap2``/``mmap_data``/``comm``/``task``).

    >>> with SpeRecorder(SpeConfig.for_mem("ldst")) as rec:   # doctest: +SKIP
    ...     rec.enable(); time.sleep(1); rec.disable()
    ...     rec.drain(); rec.write("spe.data")

    ``events`` adds sampling PMU events (``"cycles"``, ``"l1d_cache_refill"``)
    recorded with SPE in the same file, on the same CPUs: each writes into its
    CPU's SPE ring (``PERF_EVENT_IOC_SET_OUTPUT``), so ``report`` compares "which
    code misses L1" by PMU counting and by SPE (``l1d-miss``) on one recording.
    ``freq`` is their sampling frequency.
    """

    def __init__(self, config: SpeConfig | None = None, *, pid: int = -1, cpus: Iterable[int] | None = None,
                 pages: int = 16, aux_pages: int = 128, sysfs_root: str = "/sys", pmu_name: str | None = None,
                 procfs_root: str = "/proc", synthesize_existing: bool = True, events: Iterable[str] = (),
                 freq: int = 4000) -> None:
        from ..kernel.ring import RingBuffer
        from ..kernel.syscall import PerfEventFd

        self.config = config or SpeConfig()
        self.pmu = find_spe_pmu(sysfs_root, pmu_name)
        self.attr = spe_attr(self.config, self.pmu)
        # side band (COMM/MMAP2 incl. data mappings, FORK/EXIT) rides on the SPE events
        # themselves, so data addresses can be named (heap, stack, DSO) afterwards
        a = self.attr
        a.mmap = a.mmap2 = a.mmap_data = a.comm = a.comm_exec = a.task = 1
        cpu_list = list(cpus) if cpus is not None else (self.pmu.cpus or list(range(os.cpu_count() or 1)))
        self.midr = read_midrs(sysfs_root, cpu_list)
        self.event = spe_event_string(self.config, self.pmu.name)
        self.fds: list = []
        self.rings: list = []
        #: (attr, name, [fd per CPU]) of the PMU events recorded with SPE
        self.extra: list = []
        extra_specs = []
        if events:
            from ..events import parse_events

            for spec in parse_events(",".join(events)):
                ea = spec.attr.copy()
                ea.sample_type = SPE_SAMPLE_TYPE & ~abi.PERF_SAMPLE_DATA_SRC | abi.PERF_SAMPLE_PERIOD
                ea.sample_id_all = 1
                ea.disabled = 1
                if not spec.period_set:
                    ea.freq, ea.sample_freq = 1, freq
                extra_specs.append((ea, spec.name))
        self._records = bytearray()
        self.procfs_root = procfs_root
        if synthesize_existing:
            self._records += _existing_processes(self.attr.sample_type, procfs_root, pid)
        try:
            for cpu in cpu_list:
                fd = PerfEventFd(self.attr.copy() if hasattr(self.attr, "copy") else self.attr, pid=pid, cpu=cpu,
                                 event=self.event)
                self.fds.append(fd)
                self.rings.append(RingBuffer(fd, pages=pages, aux_pages=aux_pages))
                for k, (ea, name) in enumerate(extra_specs):
                    if len(self.extra) <= k:
                        self.extra.append((ea, name, []))
                    efd = PerfEventFd(ea.copy(), pid=pid, cpu=cpu, event=name)
                    self.extra[k][2].append(efd)
                    efd.set_output(fd)  # same CPU: its samples go into this CPU's SPE ring
        except BaseException:
            self.close()
            raise
        self._aux_base = [0] * len(self.rings)

    def _all_fds(self) -> list:
        return self.fds + [efd for _a, _n, fds in self.extra for efd in fds]

    def enable(self) -> None:
        for fd in self._all_fds():
            fd.enable()

    def disable(self) -> None:
        for fd in self._all_fds():
            fd.disable()

    def drain(self) -> int:
        """Move the data written so far into the recording; returns the AUX bytes taken."""
        return sum(drain_ring(r, fd.cpu, self._records, self._aux_base, i) for i, (r, fd) in enumerate(zip(self.rings, self.fds)))

    def write(self, path: str | os.PathLike) -> None:
        """Write perf.data: the SPE attr, AUXTRACE_INFO, then the side-band and AUXTRACE records."""
        from ..perfdata import PerfDataWriter
        from .perfdata import auxtrace_info_record

        ids = [fd.id() for fd in self.fds] if self.fds else []
        with PerfDataWriter(path) as w:
            w.add_attr(self.attr, ids, self.event)
            for ea, name, fds in self.extra:
                w.add_attr(ea, [fd.id() for fd in fds], name)
            w.write(auxtrace_info_record(self.pmu.type, self.midr or {fd.cpu: 0 for fd in self.fds}))
            conv = time_conv_record(self.rings[0].mem) if self.rings else None
            if conv:
                w.write(conv)
            w.write(bytes(self._records))

    def close(self) -> None:
        for r in self.rings:
            r.close()
        for fd in self._all_fds():
            fd.close()
        self.rings, self.fds, self.extra = [], [], []

    def __enter__(self) -> "SpeRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def time_conv_record(mmap_page_mem) -> bytes | None:
    """A PERF_RECORD_TIME_CONV from a ring's control page (perf record writes
    one so SPE timestamps convert to perf time), or None when the kernel does
    not offer ``cap_user_time_zero``."""
    import ctypes

    from ..perfdata import synth

    page = abi.perf_event_mmap_page.from_buffer_copy(bytes(mmap_page_mem[: ctypes.sizeof(abi.perf_event_mmap_page)]))
    if not page.cap_user_time_zero:
        return None
    body = struct.pack("<QQQQQBB6x", page.time_shift, page.time_mult, page.time_zero, page.time_cycles,
                       page.time_mask, page.cap_user_time_zero, page.cap_user_time_short)
    return synth.record(79, 0, body)


def drain_ring(ring, cpu: int, out: bytearray, aux_base: list[int], i: int) -> int:
    """Copy one ring's records and AUX data into ``out``: side-band records
    are kept as they are, and each PERF_RECORD_AUX is followed by the
    PERF_RECORD_AUXTRACE carrying its bytes (``aux_base[i]`` tracks the
    aux_offset of the next unread AUX byte)."""
    chunk = ring.read_records()
    aux = ring.read_aux() if getattr(ring, "aux", None) is not None else b""
    pos = 0
    mv = memoryview(chunk)
    while pos + 8 <= len(mv):
        type_, _misc, size = struct.unpack_from("<IHH", mv, pos)
        if size < 8:
            raise PmuscopeError(f"ring buffer of cpu {cpu}: record of size {size} at {pos}")
        rec = bytes(mv[pos:pos + size])
        out += rec
        if type_ == abi.PERF_RECORD_AUX:
            off, sz, flags = struct.unpack_from("<QQQ", rec, 8)
            out += aux_to_auxtrace([(off, sz, flags)], aux, cpu=cpu, aux_base=aux_base[i])
        pos += size
    aux_base[i] += len(aux)
    return len(aux)
