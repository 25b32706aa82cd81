"""numatop's memory-areas view (WIN6/WIN7) from Arm SPE load records: records
synthesized packet by packet, decoded, mapped to a fixture process's
/proc/PID/maps areas and to injected page nodes through the same code path
as PEBS / IBS op samples."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.memory.samples import MemSamples, from_spe_records
from pmuscope.numa.latency import (
    PAGE, area_stats, latency_source, ll_attr, measure_latency, memory_area_view, spe_samples_by_process,
)
from pmuscope.numa.model import read_maps
from pmuscope.numa.platforms import platform_for
from pmuscope.spe import decode_records
from pmuscope.spe.packets import ADDRESS, CONTEXT, COUNTER, DATA_SOURCE, EVENTS, OP_TYPE, TIMESTAMP, encode_packet
from pmuscope.system import CpuIdentity
from pmuscope.system.identity import Midr

ROOT = str(Path(__file__).resolve().parent.parent / "data" / "numa" / "two-node" / "t1")
PID = 100  # threads 100 and 101 (proc/100/task); areas: text 0x400000-0x401000, anon 0x7f0000000000-0x7f0000064000
N1 = 0x410FD0C0
TEXT, ANON = 0x400000, 0x7F0000000000


def _load(va, lat, *, ctx=None, source=0xE, pc=0x400100):
    b = encode_packet(ADDRESS, 0, pc)
    if ctx is not None:
        b += encode_packet(CONTEXT, 0, ctx)
    b += encode_packet(OP_TYPE, 1, 0)  # load/store class, load
    b += encode_packet(EVENTS, 0, 0x2)
    b += encode_packet(COUNTER, 1, lat // 3) + encode_packet(COUNTER, 0, lat)  # issue, total latency
    b += encode_packet(ADDRESS, 2, va)
    b += encode_packet(DATA_SOURCE, 0, source, payload_len=2)
    return b + encode_packet(TIMESTAMP, 0, 1)


def _branch():
    return encode_packet(ADDRESS, 0, 0x400300) + encode_packet(OP_TYPE, 2, 0) + encode_packet(TIMESTAMP, 0, 2)


# (va, total latency cycles, CONTEXT tid)
LOADS = [
    (TEXT + 0x10, 100, 100),
    (TEXT + 0x800, 300, 101),          # the second thread of pid 100
    (ANON + 0x100, 1000, 100),
    (ANON + 0x63FF8, 600, 100),        # last word of the anon area
    (0x10, 7, 100),                    # in no area
    (TEXT + 0x10, 9999, 200),          # another process
    (ANON + 0x64000, 8888, 100),       # one past the anon area's end: in no area
]


def _spe_samples(loads=LOADS, extra=b""):
    buf = b"".join(_load(va, lat, ctx=ctx) for va, lat, ctx in loads) + _branch() + extra
    recs = decode_records(buf, cpu=2, midr=N1)
    return spe_samples_by_process(from_spe_records(recs), PID, ROOT)


def _node_of(calls):
    """The node of each page: text on node 0, the anon area's first page on
    node 1, its other pages not resident (-ENOENT); address 0x10 -EFAULT."""

    def lookup(addrs):
        calls.append(np.asarray(addrs).tolist())
        page = np.asarray(addrs, dtype=np.uint64) & ~np.uint64(PAGE - 1)
        out = np.full(len(page), -2, np.int32)
        out[(page >= TEXT) & (page < TEXT + 0x1000)] = 0
        out[page == ANON] = 1
        out[page == 0] = -14
        return out

    return lookup


def test_spe_loads_map_to_areas_and_nodes():
    ms = _spe_samples()
    assert ms.source == "SPE" and len(ms) == len(LOADS)  # the branch is no memory sample
    assert ms.tid.tolist() == [ctx for _, _, ctx in LOADS]
    assert ms.pid.tolist() == [100, 100, 100, 100, 100, -1, 100]  # thread 101 belongs to 100; 200 does not
    calls: list = []
    res = memory_area_view(ms, read_maps(ROOT, PID), PID, ns_per_cycle=0.5, node_of=_node_of(calls), name="SPE")
    text, anon = res["areas"]
    assert (text["addr"], anon["addr"]) == (TEXT, ANON)
    # 4 of pid 100's samples fall in an area: 2 in each
    assert (text["samples"], text["access_pct"], text["lat_ns"]) == (2, 50.0, 100.0)   # (100+300)/2 cycles x 0.5
    assert (anon["samples"], anon["access_pct"], anon["lat_ns"]) == (2, 50.0, 400.0)   # (1000+600)/2 x 0.5
    assert res["samples"] == 6 and res["source"] == "SPE" and res["reason"] is None
    # the node lookup saw exactly pid 100's sampled addresses
    assert calls == [[TEXT + 0x10, TEXT + 0x800, ANON + 0x100, ANON + 0x63FF8, 0x10, ANON + 0x64000]]
    nodes = res["nodes"]
    assert set(nodes) == {0, 1}  # not resident / no page: left out
    assert nodes[0] == {"access_pct": pytest.approx(200 / 3), "lat_ns": 100.0}
    assert nodes[1] == {"access_pct": pytest.approx(100 / 3), "lat_ns": 500.0}


def test_one_thread_of_the_process():
    res = memory_area_view(_spe_samples(), read_maps(ROOT, PID), PID, tid=101, ns_per_cycle=0.5,
                           node_of=_node_of([]), name="SPE")
    text, anon = res["areas"]
    assert (text["samples"], text["access_pct"], text["lat_ns"]) == (1, 100.0, 150.0)
    assert (anon["samples"], anon["access_pct"], anon["lat_ns"]) == (0, 0.0, None)
    assert res["nodes"] == {0: {"access_pct": 100.0, "lat_ns": 150.0}}


def test_spe_and_pebs_samples_take_one_path():
    """The same accesses as PEBS/IBS samples (pid column, weight in cycles)
    give the same rows as the SPE records, and as area_stats itself."""
    spe = _spe_samples()
    mine = [(va, lat) for va, lat, ctx in LOADS if ctx in (100, 101)]
    pebs = MemSamples.from_columns(len(mine), pid=[PID] * len(mine), tid=[PID] * len(mine),
                                   addr=[va for va, _ in mine], weight=[lat for _, lat in mine],
                                   data_src=[0x2] * len(mine), source="PEBS")
    areas = read_maps(ROOT, PID)
    a = memory_area_view(spe, areas, PID, ns_per_cycle=0.25, node_of=_node_of([]), name="SPE")
    b = memory_area_view(pebs, areas, PID, ns_per_cycle=0.25, node_of=_node_of([]), name="PEBS")
    assert a["areas"] == b["areas"] and a["nodes"] == b["nodes"] and a["samples"] == b["samples"]
    assert a["areas"] == area_stats(areas, np.array([va for va, _ in mine], np.uint64),
                                    np.array([lat for _, lat in mine], np.float64), 0.25)


def test_records_without_context_name_why():
    ms = _spe_samples(loads=[(TEXT + 0x10, 100, None), (ANON, 50, None)])
    assert ms.meta["no_context"] == 2 and (ms.pid == -1).all()
    res = memory_area_view(ms, read_maps(ROOT, PID), PID, ns_per_cycle=1.0, node_of=_node_of([]), name="SPE",
                           duration=0.5)
    assert res["samples"] == 0 and res["nodes"] == {}
    assert all(r["access_pct"] is None for r in res["areas"])
    assert res["reason"].startswith("no SPE samples for pid 100 in 0.5s (2 SPE records have no CONTEXT packet")
    assert "\n" not in res["reason"]


def test_arm_platforms_use_spe():
    n1 = platform_for(CpuIdentity(arch="aarch64", vendor="ARM", midr=Midr(N1)))
    assert n1.name == "neoverse-n1" and latency_source(n1) == "spe"
    zen = platform_for(CpuIdentity(arch="x86_64", vendor="AuthenticAMD", family=25, model=0x11, stepping=1))
    assert latency_source(zen) == "ll"
    with pytest.raises(PmuscopeError, match="Arm SPE writes an AUX trace"):
        ll_attr(n1)


def test_no_spe_pmu_is_one_line_reason(tmp_path):
    n1 = platform_for(CpuIdentity(arch="aarch64", vendor="ARM", midr=Midr(N1)))
    res = measure_latency(PID, n1, [0, 1], duration=0.01, root=str(tmp_path))
    assert res["samples"] == 0 and res["areas"] == [] and res["source"] == "SPE"
    assert res["reason"].startswith(f"SPE: no arm_spe_* PMU under {tmp_path}/sys/bus/event_source/devices")
    assert "\n" not in res["reason"]
    with pytest.raises(PmuscopeError, match="latency source"):
        measure_latency(PID, n1, [0], root=str(tmp_path), source="pt")


def test_this_machine_without_spe_says_so():
    from pmuscope.spe.record import spe_pmus

    if spe_pmus("/sys"):
        pytest.skip("this machine has an Arm SPE PMU (the live sampler opens it)")
    res = measure_latency(os.getpid(), platform_for(CpuIdentity(arch="x86_64", vendor="GenuineIntel", family=6, model=85)),
                          [0], duration=0.01, source="spe")
    assert res["reason"].startswith("SPE: no arm_spe_* PMU under /sys/bus/event_source/devices")
    assert "\n" not in res["reason"] and res["samples"] == 0


class _FakeRing:
    def __init__(self, aux):
        self.aux = aux

    def read_records(self):
        return b""

    def read_aux(self):
        aux, self.aux = self.aux, b""
        return aux


class _FakeFd:
    def __init__(self, cpu):
        self.cpu = cpu


class _FakeRecorder:
    """What SpeLatencySampler uses of SpeRecorder: per-CPU rings with AUX bytes, fds, MIDRs."""

    def __init__(self, per_cpu):
        self.rings = [_FakeRing(aux) for aux in per_cpu.values()]
        self.fds = [_FakeFd(cpu) for cpu in per_cpu]
        self.midr = {cpu: N1 for cpu in per_cpu}
        self.closed = False

    def close(self):
        self.closed = True


def _fake_sampler(per_cpu):
    from pmuscope.numa.latency import SpeLatencySampler as real

    s = object.__new__(real)
    s._rec = _FakeRecorder(per_cpu)
    return s


def test_sampler_collect_decodes_each_cpus_aux_area():
    s = _fake_sampler({0: _load(TEXT + 0x10, 100, ctx=100), 3: _load(ANON, 40, ctx=101, source=0x0) + _branch()})
    ms = s.collect()
    assert ms.cpu.tolist() == [0, 3] and ms.tid.tolist() == [100, 101] and ms.weight.tolist() == [100, 40]
    from pmuscope.memory import datasrc as D

    assert D.data_src_text(int(ms.data_src[0])).startswith("|OP LOAD|LVL RAM hit")  # N1 source 0xE: DRAM
    assert D.data_src_text(int(ms.data_src[1])).startswith("|OP LOAD|LVL L1 hit")
    assert len(s.collect()) == 0  # drained


def test_measure_latency_spe_end_to_end(monkeypatch):
    """measure_latency's SPE path with the sampler's AUX areas faked: the
    fixture process's maps, its threads and the injected page nodes."""
    import pmuscope.numa.latency as lat

    real = lat.SpeLatencySampler
    buf = b"".join(_load(va, l, ctx=ctx) for va, l, ctx in LOADS)
    made = []

    def fake(cpus, root, **kw):
        made.append((cpus, root, kw))
        s = object.__new__(real)
        s._rec = _FakeRecorder({1: buf})
        return s

    monkeypatch.setattr(lat, "SpeLatencySampler", fake)
    n1 = platform_for(CpuIdentity(arch="aarch64", vendor="ARM", midr=Midr(N1)))
    res = measure_latency(PID, n1, [0, 1], duration=0.0, root=ROOT, node_of=_node_of([]))
    assert made == [([0, 1], ROOT, {"min_latency": 30})]
    text, anon = res["areas"]  # no cpuinfo in the fixture: 1 ns per cycle
    assert (text["access_pct"], text["lat_ns"], anon["access_pct"], anon["lat_ns"]) == (50.0, 200.0, 50.0, 800.0)
    assert res["source"] == "SPE" and res["samples"] == 6 and res["reason"] is None
    assert res["nodes"][1] == {"access_pct": pytest.approx(100 / 3), "lat_ns": 1000.0}
