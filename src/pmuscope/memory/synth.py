"""Build memory-sample records and perf.data files (tests, conversions).

:func:`mem_sample` encodes a ``PERF_RECORD_SAMPLE`` with the fields perf mem
and perf c2c record (IDENTIFIER, IP, TID, TIME, ADDR, ID, CPU, PERIOD, WEIGHT,
DATA_SRC, WEIGHT_STRUCT, PHYS_ADDR) in the kernel's order;
:func:`mem_attr` gives a matching ``perf_event_attr``; :func:`write_mem_perf_data`
writes a perf.data that Linux perf reads.
"""

from __future__ import annotations

import struct
from typing import Iterable

from ..kernel import abi
from ..perfdata import synth

__all__ = ["MEM_SAMPLE_TYPE", "mem_attr", "mem_sample", "write_mem_perf_data"]

S = abi.PERF_SAMPLE_IP  # noqa: keep the import used
_IDENT, _IP, _TID, _TIME, _ADDR, _ID, _CPU, _PERIOD = 1 << 16, 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 6, 1 << 7, 1 << 8
_WEIGHT, _DATA_SRC, _PHYS, _WSTRUCT = 1 << 14, 1 << 15, 1 << 19, 1 << 24
_SUPPORTED = _IDENT | _IP | _TID | _TIME | _ADDR | _ID | _CPU | _PERIOD | _WEIGHT | _DATA_SRC | _PHYS | _WSTRUCT

#: what ``perf mem record --phys-data --sample-cpu`` asks for
MEM_SAMPLE_TYPE = _IDENT | _IP | _TID | _TIME | _ADDR | _CPU | _PERIOD | _DATA_SRC | _WSTRUCT | _PHYS


def mem_attr(sample_type: int = MEM_SAMPLE_TYPE, *, type_: int = abi.PERF_TYPE_RAW, config: int = 0x1CD,
             config1: int = 30, period: int = 1000, precise_ip: int = 2) -> abi.perf_event_attr:
    """A memory-sampling attr (default: Intel ``cpu/mem-loads,ldlat=30/P``)."""
    a = abi.perf_event_attr()
    a.type = type_
    a.size = abi.PERF_ATTR_SIZE_VER7
    a.config = config
    a.config1 = config1
    a.sample_period = period
    a.sample_type = sample_type
    a.precise_ip = precise_ip
    a.sample_id_all = 1
    a.disabled = 1
    a.mmap = a.comm = a.task = a.mmap_data = a.mmap2 = 1
    return a


def mem_sample(sample_type: int = MEM_SAMPLE_TYPE, *, ip: int = 0, pid: int = 0, tid: int = 0, time: int = 0,
               addr: int = 0, id: int = 0, cpu: int = 0, period: int = 1, weight: int = 0, ins_lat: int = 0,
               data_src: int = 0, phys_addr: int = 0, misc: int = abi.PERF_RECORD_MISC_USER) -> bytes:
    """One ``PERF_RECORD_SAMPLE``; ``weight``/``ins_lat`` fill WEIGHT_STRUCT's
    var1_dw/var2_w (or WEIGHT's u64)."""
    st = int(sample_type)
    if st & ~_SUPPORTED:
        raise ValueError(f"sample_type {st:#x} has fields mem_sample does not write")
    out = []
    if st & _IDENT:
        out.append(struct.pack("<Q", id))
    if st & _IP:
        out.append(struct.pack("<Q", ip & (2**64 - 1)))
    if st & _TID:
        out.append(struct.pack("<ii", pid, tid))
    if st & _TIME:
        out.append(struct.pack("<Q", time))
    if st & _ADDR:
        out.append(struct.pack("<Q", addr & (2**64 - 1)))
    if st & _ID:
        out.append(struct.pack("<Q", id))
    if st & _CPU:
        out.append(struct.pack("<II", cpu, 0))
    if st & _PERIOD:
        out.append(struct.pack("<Q", period))
    if st & _WSTRUCT:
        out.append(struct.pack("<IHH", weight, ins_lat, 0))
    elif st & _WEIGHT:
        out.append(struct.pack("<Q", weight))
    if st & _DATA_SRC:
        out.append(struct.pack("<Q", data_src))
    if st & _PHYS:
        out.append(struct.pack("<Q", phys_addr))
    return synth.record(abi.PERF_RECORD_SAMPLE, misc, b"".join(out))


def write_mem_perf_data(path, samples: Iterable[dict], *, mmaps: Iterable[dict] = (), comms: Iterable[dict] = (),
                        sample_type: int = MEM_SAMPLE_TYPE, attr: abi.perf_event_attr | None = None,
                        name: str = "cpu/mem-loads,ldlat=30/P") -> None:
    """Write a perf.data holding COMM and MMAP2 records then the given samples
    (dicts of :func:`mem_sample` keywords; mmaps: dicts of
    :func:`pmuscope.perfdata.synth.mmap2` keywords)."""
    from ..perfdata import PerfDataWriter

    attr = attr if attr is not None else mem_attr(sample_type)
    attr.sample_type = sample_type
    with PerfDataWriter(path) as w:
        w.add_attr(attr, [1], name)
        for c in comms:
            w.write(synth.comm(c["pid"], c.get("tid", c["pid"]), c["comm"],
                               sample_id=synth.sample_id(sample_type, pid=c["pid"], tid=c.get("tid", c["pid"]), id=1)))
        for m in mmaps:
            m = dict(m)
            sid = synth.sample_id(sample_type, pid=m["pid"], tid=m.get("tid", m["pid"]), id=1)
            pid = m.pop("pid")
            w.write(synth.mmap2(pid, m.pop("tid", pid), m.pop("start"), m.pop("length"), m.pop("pgoff", 0),
                                m.pop("filename"), sample_id=sid, **m))
        for s in samples:
            s = dict(s)
            s.setdefault("id", 1)
            w.write(mem_sample(sample_type, **s))
