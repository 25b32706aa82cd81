"""Memory-sampling events for recording, built from the PMUs this machine
(or a sysfs tree) has — the counterparts of ``perf mem record`` /
``perf c2c record``:

* Intel PEBS load latency: ``cpu/mem-loads,ldlat=N/P`` (hybrid: ``cpu_core``),
  and on Sapphire Rapids and later — where sysfs lists ``mem-loads-aux`` —
  the group ``{cpu/mem-loads-aux/,cpu/mem-loads,ldlat=N/}:P`` the kernel
  requires; precise stores ``cpu/mem-stores/P``.
* AMD IBS op: ``ibs_op//`` (the kernel derives data_src/addr/latency from the
  IBS registers).
* Arm SPE: ``arm_spe_0/ts_enable=1,pa_enable=1,load_filter=1,store_filter=1,
  min_latency=N/`` (see :mod:`pmuscope.spe.record`).

Each :class:`MemEvent` has complete ``perf_event_attr`` s (sample_type as perf
mem record sets it: IP|TID|TIME|ADDR|PERIOD|IDENTIFIER|DATA_SRC|WEIGHT_STRUCT
plus CPU and PHYS_ADDR). :func:`mem_events` raises a one-line
:class:`~pmuscope.errors.NoHardwarePMUError` when the machine has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import NoHardwarePMUError, PmuscopeError
from ..kernel import abi

__all__ = ["MemEvent", "mem_events", "mem_events_status", "MEM_RECORD_SAMPLE_TYPE"]

MEM_RECORD_SAMPLE_TYPE = (abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_TID | abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_ADDR
                          | abi.PERF_SAMPLE_PERIOD | abi.PERF_SAMPLE_IDENTIFIER | abi.PERF_SAMPLE_DATA_SRC
                          | abi.PERF_SAMPLE_WEIGHT_STRUCT | abi.PERF_SAMPLE_CPU | abi.PERF_SAMPLE_PHYS_ADDR)


@dataclass
class MemEvent:
    """One memory-sampling event (or group): ``attrs[0]`` leads, ``attrs[sampler]``
    is the event whose samples carry the data source."""

    tag: str  # ldlat-loads, ldlat-stores, ibs-op, spe-ldst, spe-load, spe-store
    name: str  # the perf event string
    pmu: str
    attrs: list = field(default_factory=list)
    sampler: int = 0
    kind: str = ""  # pebs, ibs, spe


def _base_attr(type_: int, config: int, period: int, precise_ip: int) -> abi.perf_event_attr:
    a = abi.perf_event_attr()
    a.type = type_
    a.size = abi.PERF_ATTR_SIZE_VER7
    a.config = config
    a.sample_period = period
    a.sample_type = MEM_RECORD_SAMPLE_TYPE
    a.precise_ip = precise_ip
    a.disabled = 1
    a.sample_id_all = 1
    a.mmap = a.mmap2 = a.mmap_data = a.comm = a.comm_exec = a.task = 1
    return a


def _alias_config(pmu, name: str, **terms) -> tuple[int, int] | None:
    """``(config, config1)`` for a sysfs alias plus terms, through the event parser."""
    from ..events import parse_events

    if pmu.alias(name) is None:
        return None
    extra = "".join(f",{k}={v}" for k, v in terms.items())
    root = pmu.path.split("/bus/event_source/devices/")[0]
    spec = parse_events(f"{pmu.name}/{name}{extra}/", sysfs_root=root)[0]
    return int(spec.attr.config), int(spec.attr.config1)


def mem_events(kind: str = "ldst", *, ldlat: int = 30, period: int | None = None, sysfs_root: str = "/sys") -> list[MemEvent]:
    """The events ``perf mem record -t kind`` would open here (``kind``: load,
    store or ldst). Raises :class:`~pmuscope.errors.NoHardwarePMUError` with
    the reason when this machine has no memory-sampling PMU."""
    from ..events.pmu import pmus

    if kind not in ("load", "store", "ldst"):
        raise PmuscopeError(f"memory sampling kind must be load, store or ldst, got {kind!r}")
    table = pmus(sysfs_root)
    out: list[MemEvent] = []
    core = [table[n] for n in ("cpu_core", "cpu") if n in table]
    for pmu in core:
        if kind in ("load", "ldst"):
            loads = _alias_config(pmu, "mem-loads", ldlat=ldlat)
            if loads is not None:
                a = _base_attr(pmu.type, loads[0], period or 1000, 3)
                a.config1 = loads[1]
                aux = _alias_config(pmu, "mem-loads-aux")
                if aux is not None:
                    lead = _base_attr(pmu.type, aux[0], period or 1000, 3)
                    lead.sample_type = MEM_RECORD_SAMPLE_TYPE & ~(abi.PERF_SAMPLE_DATA_SRC | abi.PERF_SAMPLE_ADDR
                                                                  | abi.PERF_SAMPLE_WEIGHT_STRUCT | abi.PERF_SAMPLE_PHYS_ADDR)
                    a.disabled = 0  # group members follow the leader
                    out.append(MemEvent("ldlat-loads", f"{{{pmu.name}/mem-loads-aux/,{pmu.name}/mem-loads,ldlat={ldlat}/}}:P",
                                        pmu.name, [lead, a], sampler=1, kind="pebs"))
                else:
                    out.append(MemEvent("ldlat-loads", f"{pmu.name}/mem-loads,ldlat={ldlat}/P", pmu.name, [a], kind="pebs"))
        if kind in ("store", "ldst"):
            stores = _alias_config(pmu, "mem-stores")
            if stores is not None:
                a = _base_attr(pmu.type, stores[0], period or 1000, 3)
                a.config1 = stores[1]
                out.append(MemEvent("ldlat-stores", f"{pmu.name}/mem-stores/P", pmu.name, [a], kind="pebs"))
        if out:
            break  # hybrid: perf configures the first mem-capable PMU
    if "ibs_op" in table:
        pmu = table["ibs_op"]
        a = _base_attr(pmu.type, 0, period or 100000, 0)
        out.append(MemEvent("ibs-op", "ibs_op//", pmu.name, [a], kind="ibs"))
    from ..spe.record import SpeConfig, spe_attr, spe_event_string, spe_pmus

    for pmu in spe_pmus(sysfs_root)[:1]:
        cfg = SpeConfig.for_mem(kind, min_latency=ldlat, period=period or 4096)
        a = spe_attr(cfg, pmu)
        out.append(MemEvent(f"spe-{kind}", spe_event_string(cfg, pmu.name), pmu.name, [a], kind="spe"))
    if not out:
        raise NoHardwarePMUError(_no_mem_pmu_reason(table, sysfs_root))
    return out


def _no_mem_pmu_reason(table, sysfs_root: str) -> str:
    core = [n for n in ("cpu_core", "cpu", "cpu_atom") if n in table]
    where = f"{sysfs_root}/bus/event_source/devices"
    if not core and not any(n.startswith(("armv8_", "armv9_")) for n in table):
        return (f"no memory-sampling PMU: {where} has no core PMU at all (a VM without a virtual PMU); "
                "PEBS load latency, AMD IBS and Arm SPE all need hardware")
    if core:
        return (f"no memory-sampling PMU: the '{core[0]}' PMU in {where} lists no mem-loads/mem-stores events "
                "(no PEBS, e.g. an AMD CPU or a VM's virtual PMU) and there is no ibs_op or arm_spe_* PMU")
    return f"no memory-sampling PMU: no arm_spe_* PMU under {where} (SPE needs Armv8.2+ and the arm_spe_pmu driver)"


def mem_events_status(sysfs_root: str = "/sys") -> tuple[list[MemEvent], str | None]:
    """``(events, reason)``: what can be recorded here, or why nothing can."""
    try:
        return mem_events("ldst", sysfs_root=sysfs_root), None
    except NoHardwarePMUError as err:
        return [], str(err)
