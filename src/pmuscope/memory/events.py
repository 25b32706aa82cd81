"""Memory-sampling events for recording, built from the PMUs this machine
(or a sysfs tree) has — what ``perf mem record`` / ``perf c2c record`` open:

* Intel PEBS load latency: ``cpu/mem-loads,ldlat=N/P`` (hybrid: ``cpu_core``),
  and on Sapphire Rapids and later — where sysfs lists ``mem-loads-aux`` —
  the group ``{cpu/mem-loads-aux/,cpu/mem-loads,ldlat=N/}:P`` the kernel
  requires; precise stores ``cpu/mem-stores/P``
  (tools/perf/arch/x86/util/mem-events.c).
* AMD IBS op: ``ibs_op//`` (the kernel derives data_src/addr/latency from the
  IBS registers).
* Arm SPE: ``arm_spe_0/ts_enable=1,pa_enable=1,load_filter=1,store_filter=1,
  min_latency=N/`` (see :mod:`pmuscope.spe.record`).

For PEBS and IBS, ``perf mem record`` runs ``perf record -W -d [--phys-data]
[--data-page-size] -e EVENTS`` (tools/perf/builtin-mem.c): perf record's
defaults (sampling at 4000 Hz unless ``-c``), plus PERF_SAMPLE_ADDR and
DATA_SRC (``-d``, with ``mmap_data`` on the first event), WEIGHT_STRUCT when
loads are recorded (``-W``; x86's ``arch_evsel__set_sample_weight``), and
precise_ip = 3 from the ``P`` modifier. :func:`mem_events` returns those
parsed specs, the ``sample_type`` bits to add
(:attr:`MemEvent.sample_type_extra`) and the attrs :class:`pmuscope.sampling.Recorder`
opens for ``-- CMD``. It raises a one-line
:class:`~pmuscope.errors.NoHardwarePMUError` when the machine has none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import NoHardwarePMUError, PmuscopeError
from ..kernel import abi

__all__ = ["MemEvent", "mem_events", "mem_events_status", "mem_record_sample_type", "MEM_RECORD_SAMPLE_TYPE",
           "parse_mem_kind"]

S = abi.PerfSample

#: sample_type of a lone ``perf mem record -t load`` PEBS/IBS event at the default frequency:
#: perf record's IP|TID|TIME|PERIOD plus ADDR|DATA_SRC (``-d``) and WEIGHT_STRUCT (``-W``)
MEM_RECORD_SAMPLE_TYPE = int(S.IP | S.TID | S.TIME | S.PERIOD | S.ADDR | S.DATA_SRC | S.WEIGHT_STRUCT)


@dataclass
class MemEvent:
    """One memory-sampling event (or group): ``attrs[0]`` leads, ``attrs[sampler]``
    is the event whose samples carry the data source. For PEBS/IBS ``specs``
    are the parsed events and ``sample_type_extra`` the PERF_SAMPLE_* bits
    ``perf mem record`` adds; ``attrs`` are what a recording of ``-- CMD``
    opens. SPE events (``kind == "spe"``) are recorded through the AUX area
    (:class:`pmuscope.spe.record.SpeRecorder`) and have no specs."""

    tag: str  # ldlat-loads, ldlat-stores, ibs-op (perf: mem-ldst), spe-ldst, spe-load, spe-store
    name: str  # the perf event string
    pmu: str
    attrs: list = field(default_factory=list)
    sampler: int = 0
    kind: str = ""  # pebs, ibs, spe
    specs: list = field(default_factory=list)
    sample_type_extra: int = 0


def parse_mem_kind(text: str) -> str:
    """``perf mem -t`` values: ``load``, ``store``, ``load,store`` (perf's
    default) or ``ldst`` -> ``load`` / ``store`` / ``ldst``."""
    parts = {p.strip() for p in str(text).split(",") if p.strip()}
    if parts == {"ldst"} or parts == {"load", "store"}:
        return "ldst"
    if parts in ({"load"}, {"store"}):
        return parts.pop()
    raise PmuscopeError(f"memory operation type {text!r}: expected load, store or load,store")


def mem_record_sample_type(kind: str, *, phys_addr: bool = False, data_page_size: bool = False) -> int:
    """The PERF_SAMPLE_* bits ``perf mem record -t KIND`` adds to perf
    record's defaults: ADDR|DATA_SRC (``-d``), WEIGHT_STRUCT when loads are
    recorded (``-W``), PHYS_ADDR (``--phys-data``), DATA_PAGE_SIZE
    (``--data-page-size``)."""
    bits = S.ADDR | S.DATA_SRC
    if kind in ("load", "ldst"):
        bits |= S.WEIGHT_STRUCT
    if phys_addr:
        bits |= S.PHYS_ADDR
    if data_page_size:
        bits |= S.DATA_PAGE_SIZE
    return int(bits)


def _core_mem_pmu(table):
    """perf's choice: the first core PMU (``cpu``, or ``cpu_core`` on hybrid parts)
    whose sysfs lists ``mem-loads`` or ``mem-stores``."""
    for name in ("cpu_core", "cpu"):
        pmu = table.get(name)
        if pmu is not None and (pmu.alias("mem-loads") is not None or pmu.alias("mem-stores") is not None):
            return pmu
    return None


def mem_events(kind: str = "ldst", *, ldlat: int = 30, period: int | None = None, freq: int | None = None,
               phys_addr: bool = False, data_page_size: bool = False, sysfs_root: str = "/sys") -> list[MemEvent]:
    """The events ``perf mem record -t kind`` would open here (``kind``: load,
    store, ldst or load,store; ``ldlat``: the load-latency threshold in
    cycles; ``period``: ``-c``, else sampling at ``freq`` Hz, default 4000).
    Raises :class:`~pmuscope.errors.NoHardwarePMUError` with the reason when
    this machine has no memory-sampling PMU."""
    from ..events import parse_events, record_defaults
    from ..events.pmu import pmus
    from ..sampling.session import DEFAULT_FREQ, apply_record_extras

    kind = parse_mem_kind(kind)
    table = pmus(sysfs_root)
    out: list[MemEvent] = []
    core = _core_mem_pmu(table)
    if core is not None:
        p = core.name
        if kind in ("load", "ldst") and core.alias("mem-loads") is not None:
            if core.alias("mem-loads-aux") is not None:
                out.append(MemEvent("ldlat-loads", f"{{{p}/mem-loads-aux/,{p}/mem-loads,ldlat={ldlat}/}}:P", p,
                                    sampler=1, kind="pebs"))
            else:
                out.append(MemEvent("ldlat-loads", f"{p}/mem-loads,ldlat={ldlat}/P", p, kind="pebs"))
        if kind in ("store", "ldst") and core.alias("mem-stores") is not None:
            out.append(MemEvent("ldlat-stores", f"{p}/mem-stores/P", p, kind="pebs"))
    elif "ibs_op" in table:
        # perf's AMD table has only the load+store event "mem-ldst": ibs_op// samples every op
        out.append(MemEvent("ibs-op", "ibs_op//", "ibs_op", kind="ibs"))
    if out:
        extra = mem_record_sample_type("load" if out[0].kind == "ibs" else kind, phys_addr=phys_addr,
                                       data_page_size=data_page_size)
        for e in out:
            e.specs = parse_events(e.name, sysfs_root=sysfs_root)
            e.sample_type_extra = extra
        # the whole list is configured together: ID vs IDENTIFIER depends on every event's sample_type
        specs = [s for e in out for s in e.specs]
        attrs = apply_record_extras(record_defaults(specs, freq=freq or DEFAULT_FREQ, period=period), specs,
                                    sample_type_extra=extra)
        i = 0
        for e in out:
            e.attrs = attrs[i:i + len(e.specs)]
            i += len(e.specs)
        return out
    from ..spe.record import SpeConfig, spe_attr, spe_event_string, spe_pmus

    for pmu in spe_pmus(sysfs_root)[:1]:
        cfg = SpeConfig.for_mem(kind, min_latency=ldlat, period=period or 4096)
        a = spe_attr(cfg, pmu)
        out.append(MemEvent(f"spe-{kind}", spe_event_string(cfg, pmu.name), pmu.name, [a], kind="spe"))
    if not out:
        raise NoHardwarePMUError(_no_mem_pmu_reason(table, sysfs_root))
    return out


def _cpuinfo(sysfs_root: str) -> str:
    for path in (os.path.join(sysfs_root, "proc", "cpuinfo"),
                 os.path.join(os.path.dirname(os.path.abspath(sysfs_root)), "proc", "cpuinfo")):
        try:
            with open(path, errors="replace") as f:
                return f.read(65536)
        except OSError:
            continue
    return ""


def _no_mem_pmu_reason(table, sysfs_root: str) -> str:
    core = [n for n in ("cpu_core", "cpu", "cpu_atom") if n in table]
    where = f"{sysfs_root}/bus/event_source/devices"
    if not core and not any(n.startswith(("armv8_", "armv9_")) for n in table):
        return (f"no memory-sampling PMU: {where} has no core PMU at all (a VM without a virtual PMU); "
                "PEBS load latency (cpu/mem-loads/), AMD IBS (ibs_op) and Arm SPE (arm_spe_*) all need hardware")
    if core:
        info = _cpuinfo(sysfs_root)
        if "AuthenticAMD" in info or "HygonGenuine" in info:
            guest = " (KVM does not pass IBS to guests)" if " hypervisor" in info else ""
            return (f"no memory-sampling PMU: this AMD CPU needs the ibs_op PMU (AMD IBS), which {where} lacks{guest}; "
                    f"the '{core[0]}' PMU lists no mem-loads/mem-stores events and there is no arm_spe_* PMU")
        return (f"no memory-sampling PMU: the '{core[0]}' PMU in {where} lists no mem-loads/mem-stores events "
                "(no PEBS, e.g. an AMD CPU or a VM's virtual PMU) and there is no ibs_op or arm_spe_* PMU")
    return f"no memory-sampling PMU: no arm_spe_* PMU under {where} (SPE needs Armv8.2+ and the arm_spe_pmu driver)"


def mem_events_status(sysfs_root: str = "/sys") -> tuple[list[MemEvent], str | None]:
    """``(events, reason)``: what can be recorded here, or why nothing can."""
    try:
        return mem_events("ldst", sysfs_root=sysfs_root), None
    except NoHardwarePMUError as err:
        return [], str(err)
