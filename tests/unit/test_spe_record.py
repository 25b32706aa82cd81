"""SPE recording: attrs from the Arm sysfs fixture (format bits published by
drivers/perf/arm_spe_pmu.c), the AUX drain, and AUXTRACE records in perf.data
read back by `pmuscope spe`."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pmuscope.cli.main import main
from pmuscope.errors import EventNotSupportedError, NoHardwarePMUError
from pmuscope.events import parse_events
from pmuscope.events.pmu import Format, PMU
from pmuscope.kernel import abi
from pmuscope.kernel.ring import RingBuffer
from pmuscope.memory.events import mem_events
from pmuscope.perfdata import synth
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe import decode_records
from pmuscope.spe.packets import ADDRESS, COUNTER, DATA_SOURCE, EVENTS, OP_TYPE, TIMESTAMP, encode_packet
from pmuscope.spe.perfdata import auxtrace_info_record, decode_perf_data
from pmuscope.spe.record import (
    SPE_SAMPLE_TYPE, SpeConfig, aux_to_auxtrace, drain_ring, find_spe_pmu, spe_attr, spe_event_string,
)

N1 = 0x410FD0C0


@pytest.fixture
def arm_root(data_dir):
    return str(data_dir / "sysfs" / "arm-neoverse-n1")


def test_attr_bits_from_sysfs_formats(arm_root):
    pmu = find_spe_pmu(arm_root)
    assert pmu.name == "arm_spe_0"
    cfg = SpeConfig(ts_enable=1, pa_enable=1, pct_enable=1, jitter=1, branch_filter=1, load_filter=1,
                    store_filter=1, event_filter=0x2A, min_latency=0x123, period=100)
    a = spe_attr(cfg, pmu)
    assert a.type == int(open(f"{arm_root}/bus/event_source/devices/arm_spe_0/type").read())
    assert a.config == (1 << 0) | (1 << 1) | (1 << 2) | (1 << 16) | (1 << 32) | (1 << 33) | (1 << 34)
    assert a.config1 == 0x2A and a.config2 == 0x123
    assert a.sample_period == 1024  # raised to caps/min_interval
    assert a.sample_type == SPE_SAMPLE_TYPE | abi.PERF_SAMPLE_PHYS_ADDR
    assert a.exclude_guest == 1 and a.disabled == 1


def test_attr_equals_the_event_parser(arm_root):
    for kind in ("load", "store", "ldst"):
        cfg = SpeConfig.for_mem(kind, min_latency=30)
        ours = spe_attr(cfg, find_spe_pmu(arm_root))
        spec = parse_events(spe_event_string(cfg), sysfs_root=arm_root)[0]
        assert (ours.type, ours.config, ours.config1, ours.config2) == (
            spec.attr.type, spec.attr.config, spec.attr.config1, spec.attr.config2), kind
    # perf's spe-ldst string (tools/perf/arch/arm64/util/mem-events.c)
    assert spe_event_string(SpeConfig.for_mem("ldst", 30)) == \
        "arm_spe_0/ts_enable=1,pa_enable=1,load_filter=1,store_filter=1,min_latency=30/"


def test_terms_follow_the_pmu_not_hard_coded_bits(tmp_path):
    pmu = PMU("arm_spe_7", str(tmp_path), 42)
    pmu.__dict__["formats"] = {"ts_enable": Format.parse("ts_enable", "config:5"),
                               "min_latency": Format.parse("min_latency", "config2:0-3")}
    pmu.__dict__["caps"] = {}
    a = spe_attr(SpeConfig(ts_enable=1, jitter=None, min_latency=9, period=7), pmu)
    assert a.config == 1 << 5 and a.config2 == 9 and a.type == 42 and a.sample_period == 7
    with pytest.raises(EventNotSupportedError, match="min_latency=16.*0..15"):
        spe_attr(SpeConfig(min_latency=16), pmu)
    with pytest.raises(EventNotSupportedError, match="no 'load_filter' term"):
        spe_attr(SpeConfig(load_filter=1), pmu)


def test_no_spe_pmu_reason(data_dir):
    with pytest.raises(NoHardwarePMUError, match="no arm_spe_\\* PMU"):
        find_spe_pmu(str(data_dir / "sysfs" / "intel-skx"))
    with pytest.raises(NoHardwarePMUError, match="no PMU named arm_spe_3"):
        find_spe_pmu(str(data_dir / "sysfs" / "arm-neoverse-n1"), "arm_spe_3")


def test_mem_events_per_vendor(data_dir, arm_root):
    ev = mem_events(sysfs_root=arm_root)
    assert [e.tag for e in ev] == ["spe-ldst"] and ev[0].attrs[0].config2 == 30
    skx = mem_events(sysfs_root=str(data_dir / "sysfs" / "intel-skx"))
    assert [(e.tag, e.name) for e in skx] == [("ldlat-loads", "cpu/mem-loads,ldlat=30/P"),
                                              ("ldlat-stores", "cpu/mem-stores/P")]
    assert (skx[0].attrs[0].config, skx[0].attrs[0].config1) == (0x1CD, 30)
    assert skx[0].attrs[0].sample_type & abi.PERF_SAMPLE_DATA_SRC
    spr = mem_events(sysfs_root=str(data_dir / "memory" / "sysfs-spr"))
    lead, loads = spr[0].attrs
    assert spr[0].name == "{cpu/mem-loads-aux/,cpu/mem-loads,ldlat=30/}:P" and spr[0].sampler == 1
    assert lead.config == 0x8203 and loads.config == 0x1CD and loads.config1 == 30
    ibs = mem_events(sysfs_root=str(data_dir / "memory" / "sysfs-amd-ibs"))
    assert [(e.tag, e.attrs[0].type) for e in ibs] == [("ibs-op", 11)]
    with pytest.raises(NoHardwarePMUError, match="no mem-loads/mem-stores"):
        mem_events(sysfs_root=str(data_dir / "sysfs" / "amd-epyc-kvm"))


def _load_record(pc, va, source, lat, ts):
    return (encode_packet(ADDRESS, 0, pc) + encode_packet(OP_TYPE, 1, 0) + encode_packet(EVENTS, 0, 0x16)
            + encode_packet(COUNTER, 0, lat) + encode_packet(ADDRESS, 2, va)
            + encode_packet(DATA_SOURCE, 0, source, payload_len=2) + encode_packet(TIMESTAMP, 0, ts))


def _aux_record(off, size, flags=0, cpu=2):
    sid = synth.sample_id(SPE_SAMPLE_TYPE, pid=-1 & 0xFFFFFFFF, tid=-1 & 0xFFFFFFFF, time=off, cpu=cpu, id=9)
    return synth.record(abi.PERF_RECORD_AUX, 0, struct.pack("<QQQ", off, size, flags) + sid)


def _fake_ring(page=4096, aux_size=256):
    mem = bytearray(page * 3)
    ring = RingBuffer.from_memory(mem, page)
    aux = bytearray(aux_size)
    ring.attach_aux_memory(aux)
    ctl = np.frombuffer(mem, dtype="<u8", count=page // 8)
    return ring, mem, aux, ctl


def _publish(ring, mem, aux, ctl, spe: bytes, records: bytes, aux_head: int, data_head: int, page=4096):
    for i, b in enumerate(spe):
        aux[(aux_head + i) % len(aux)] = b
    for i, b in enumerate(records):
        mem[page + (data_head + i) % (2 * page)] = b
    ctl[abi.perf_event_mmap_page.aux_head.offset // 8] = aux_head + len(spe)
    ctl[abi.perf_event_mmap_page.data_head.offset // 8] = data_head + len(records)


def test_drain_turns_aux_records_into_auxtrace_and_perf_data_round_trips(tmp_path, arm_root, capsys):
    ring, mem, aux, ctl = _fake_ring()
    chunk1 = b"".join(_load_record(0x400000 + 4 * i, 0x10000 + 8 * i, 0x0, 3 + i, 100 + i) for i in range(3))
    chunk2 = b"".join(_load_record(0x500000 + 4 * i, 0x20000 + 8 * i, 0xE, 200 + i, 200 + i) for i in range(4))
    assert len(chunk1) + len(chunk2) > 256  # the second chunk wraps the AUX ring
    out = bytearray()
    base = [0]
    r1 = _aux_record(0, len(chunk1))
    _publish(ring, mem, aux, ctl, chunk1, r1, 0, 0)
    assert drain_ring(ring, 2, out, base, 0) == len(chunk1)
    r2 = _aux_record(len(chunk1), len(chunk2), flags=0)
    _publish(ring, mem, aux, ctl, chunk2, r2, len(chunk1), len(r1))
    assert drain_ring(ring, 2, out, base, 0) == len(chunk2)
    assert base == [len(chunk1) + len(chunk2)]

    pmu = find_spe_pmu(arm_root)
    attr = spe_attr(SpeConfig.for_mem("load", 0), pmu)
    path = tmp_path / "spe.data"
    with PerfDataWriter(str(path), host=False) as w:
        w.add_attr(attr, [9], spe_event_string(SpeConfig.for_mem("load", 0)))
        w.write(auxtrace_info_record(pmu.type, {2: N1}))
        w.write(bytes(out))
    recs = decode_perf_data(str(path))
    want = decode_records(chunk1 + chunk2, cpu=2, midr=N1)
    assert len(recs) == len(want) == 7
    assert recs.pc.tolist() == want.pc.tolist() and recs.cpu.tolist() == [2] * 7
    assert recs.midr.tolist() == [N1] * 7
    assert recs.columns["tot_lat"].tolist() == [3, 4, 5, 200, 201, 202, 203]

    assert main(["spe", "--dump", "-i", str(path)]) == 0
    dump = capsys.readouterr().out
    assert dump.count("PERF_RECORD_AUXTRACE size:") == 2
    assert main(["mem", "report", "-i", str(path), "--json"]) == 0
    import json

    rep = json.loads(capsys.readouterr().out)
    assert {r["data_source"]: r["samples"] for r in rep["by_data_source"]} == {"L1 hit": 3, "RAM hit": 4}


def test_aux_to_auxtrace_skips_bytes_it_does_not_have():
    data = bytes(range(16))
    rec = aux_to_auxtrace([(100, 8, 0), (108, 16, 0)], data, cpu=1, aux_base=100)
    size, offset = struct.unpack_from("<QQ", rec, 8)
    assert (size, offset) == (8, 100) and rec[48:56] == data[:8]
    assert len(rec) == 48 + 8  # the second one runs past the data: left out


class _FakeFd:
    """Stands in for PerfEventFd: records enable/disable, hands out ids."""

    opened: list = []

    def __init__(self, attr, pid=0, cpu=-1, group=None, flags=0, *, event=None):
        self.attr, self.pid, self.cpu, self.event = attr, pid, cpu, event
        self.enabled = False
        self.closed = False
        _FakeFd.opened.append(self)

    def enable(self):
        self.enabled = True

    def disable(self):
        self.enabled = False

    def id(self):
        return 100 + self.cpu

    def close(self):
        self.closed = True


class _FakeRing:
    """A RingBuffer over memory whose AUX area the test fills like the kernel would."""

    def __new__(cls, fd, pages=16, aux_pages=0, **kw):
        ring, mem, aux, ctl = _fake_ring()
        ring.fd = fd
        ring._test = (mem, aux, ctl)
        return ring


def test_recorder_end_to_end_without_a_kernel(monkeypatch, tmp_path, arm_root):
    import pmuscope.kernel.ring as ring_mod
    import pmuscope.kernel.syscall as sys_mod
    from pmuscope.spe.record import SpeRecorder

    _FakeFd.opened = []
    monkeypatch.setattr(sys_mod, "PerfEventFd", _FakeFd)
    monkeypatch.setattr(ring_mod, "RingBuffer", _FakeRing)
    rec = SpeRecorder(SpeConfig.for_mem("ldst", 20), cpus=[0, 1], sysfs_root=arm_root, synthesize_existing=False)
    assert [fd.cpu for fd in _FakeFd.opened] == [0, 1]
    assert all(fd.attr.type == 10 and fd.attr.mmap_data == 1 for fd in _FakeFd.opened)
    assert rec.event == "arm_spe_0/ts_enable=1,pa_enable=1,load_filter=1,store_filter=1,min_latency=20/"
    rec.enable()
    assert all(fd.enabled for fd in _FakeFd.opened)
    for i, ring in enumerate(rec.rings):
        mem, aux, ctl = ring._test
        spe = b"".join(_load_record(0x400000 + 0x100 * i + 4 * k, 0x10000 + 64 * i + 8 * k, 0x9, 50, k)
                       for k in range(2))
        _publish(ring, mem, aux, ctl, spe, _aux_record(0, len(spe), cpu=i), 0, 0)
    assert rec.drain() > 0
    rec.disable()
    path = tmp_path / "rec.data"
    rec.write(str(path))
    rec.close()
    assert all(fd.closed for fd in _FakeFd.opened)
    recs = decode_perf_data(str(path))
    assert sorted(recs.cpu.tolist()) == [0, 0, 1, 1] and len(recs) == 4
    from pmuscope.memory.samples import load_mem_samples

    ms = load_mem_samples(path)
    assert len(ms) == 4 and all(D_text.endswith("hit") for D_text in _lvl_texts(ms))


def _lvl_texts(ms):
    from pmuscope.memory import datasrc as D

    return [D.lvl_text(int(v)) for v in ms.data_src]


def test_config3_terms_grow_the_attr(tmp_path):
    pmu = PMU("arm_spe_0", str(tmp_path), 10)
    pmu.__dict__["formats"] = {"inv_event_filter": Format.parse("inv_event_filter", "config3:0-63")}
    pmu.__dict__["caps"] = {}
    a = spe_attr(SpeConfig(ts_enable=None, inv_event_filter=0x22), pmu)
    assert a.config3 == 0x22 and a.size == abi.PERF_ATTR_SIZE_VER8
    assert spe_attr(SpeConfig(ts_enable=None), pmu).size == abi.PERF_ATTR_SIZE_VER7


def test_mem_record_cli_drives_spe(monkeypatch, tmp_path, arm_root, capsys):
    import pmuscope.kernel.ring as ring_mod
    import pmuscope.kernel.syscall as sys_mod
    from pmuscope.perfdata import PerfDataFile
    from pmuscope.spe.perfdata import read_auxtrace_info

    _FakeFd.opened = []
    monkeypatch.setattr(sys_mod, "PerfEventFd", _FakeFd)
    monkeypatch.setattr(ring_mod, "RingBuffer", _FakeRing)
    out = tmp_path / "spe.data"
    assert main(["mem", "record", "--sysfs", arm_root, "-t", "load", "--ldlat", "64", "-o", str(out), "--", "true"]) == 0
    assert "arm_spe_0/ts_enable=1,pa_enable=1,load_filter=1,store_filter=0,min_latency=64/" in capsys.readouterr().err
    assert _FakeFd.opened and all(fd.closed for fd in _FakeFd.opened)
    assert all(fd.attr.config2 == 64 and fd.attr.config & (1 << 33) for fd in _FakeFd.opened)
    with PerfDataFile(str(out)) as pf:
        info = read_auxtrace_info(pf)
        assert info is not None and info.pmu_type == 10
        assert pf.attrs[0].attr.type == 10


def test_spe_timestamps_to_perf_clock(tmp_path, arm_root):
    """With a PERF_RECORD_TIME_CONV in the file, SPE timestamps become perf-clock ns
    (tsc_to_perf_time), so SPE samples share the time axis of other records."""
    from pmuscope.memory.samples import load_mem_samples, spe_time_to_perf

    conv = dict(time_shift=31, time_mult=2147483648 * 40, time_zero=1000)  # 40 ns per tick
    assert spe_time_to_perf(np.array([0, 1, 25], np.uint64), conv).tolist() == [1000, 1040, 2000]
    short = dict(conv, time_cycles=0x1_0000_0000, time_mask=0xFFFF_FFFF, cap_user_time_short=1)
    assert spe_time_to_perf(np.array([5], np.uint64), short).tolist() == [1000 + 40 * (0x1_0000_0000 + 5)]
    spe = b"".join(_load_record(0x400000, 0x10000, 0x0, 3, ts) for ts in (100, 200))
    pmu = find_spe_pmu(arm_root)
    path = tmp_path / "tc.data"
    with PerfDataWriter(str(path), host=False) as w:
        w.add_attr(spe_attr(SpeConfig(), pmu), [9], "arm_spe_0//")
        w.write(auxtrace_info_record(pmu.type, {0: N1}))
        w.write(synth.record(79, 0, struct.pack("<QQQ", 31, 2147483648 * 40, 1000)))
        from pmuscope.spe.perfdata import auxtrace_record

        w.write(auxtrace_record(spe, cpu=0))
    ms = load_mem_samples(path)
    assert ms.time.tolist() == [1000 + 40 * 100, 1000 + 40 * 200]


def test_time_conv_record_from_the_control_page():
    import ctypes

    from pmuscope.spe.record import time_conv_record

    page = abi.perf_event_mmap_page()
    pad = bytearray(4096 - ctypes.sizeof(page))
    assert time_conv_record(bytearray(bytes(page)) + pad) is None  # no cap_user_time_zero
    page.cap_user_time_zero = 1
    page.time_shift, page.time_mult, page.time_zero = 31, 0x50000000, 123
    rec = time_conv_record(bytearray(bytes(page)) + pad)
    assert struct.unpack_from("<I", rec)[0] == 79  # PERF_RECORD_TIME_CONV
    assert len(rec) == 8 + 48
    assert struct.unpack_from("<QQQ", rec, 8) == (31, 0x50000000, 123)


class _FakeFdOut(_FakeFd):
    """Also takes PERF_EVENT_IOC_SET_OUTPUT, and numbers fds per event type."""

    def set_output(self, target):
        self.output = target

    def id(self):
        return 100 + self.cpu + (1000 if self.attr.type == abi.PERF_TYPE_SOFTWARE else 0)


def test_pmu_event_and_spe_in_one_recording(monkeypatch, tmp_path, arm_root):
    """cpu-clock sampled with SPE: its fds write into each CPU's SPE ring, the
    file holds both attrs, and report shows the PMU event next to the SPE events."""
    import pmuscope.kernel.ring as ring_mod
    import pmuscope.kernel.syscall as sys_mod
    from pmuscope.profile import load_profile
    from pmuscope.spe.record import SpeRecorder

    _FakeFd.opened = []
    monkeypatch.setattr(sys_mod, "PerfEventFd", _FakeFdOut)
    monkeypatch.setattr(ring_mod, "RingBuffer", _FakeRing)
    rec = SpeRecorder(SpeConfig.for_mem("ldst", 20), cpus=[0, 1], sysfs_root=arm_root, synthesize_existing=False,
                      events=["cpu-clock"])
    spe_fds = [fd for fd in _FakeFd.opened if fd.attr.type == 10]
    clock_fds = [fd for fd in _FakeFd.opened if fd.attr.type == abi.PERF_TYPE_SOFTWARE]
    assert [fd.cpu for fd in clock_fds] == [0, 1] and [fd.output for fd in clock_fds] == spe_fds
    assert all(fd.attr.sample_type & abi.PERF_SAMPLE_IDENTIFIER and fd.attr.freq for fd in clock_fds)
    rec.enable()
    assert all(fd.enabled for fd in _FakeFd.opened)
    st = clock_fds[0].attr.sample_type
    for i, ring in enumerate(rec.rings):
        mem, aux, ctl = ring._test
        spe = b"".join(_load_record(0x400000 + 0x100 * i + 4 * k, 0x10000 + 64 * i + 8 * k, 0x9, 50, k)
                       for k in range(2))
        clock = b"".join(synth.record(abi.PERF_RECORD_SAMPLE, abi.PERF_RECORD_MISC_USER,
                                      struct.pack("<QQIIQIIQ", 1100 + i, 0x400010, 7, 7, 5 + k, i, 0, 250000))
                         for k in range(3))
        assert len(clock) == 3 * (8 + 8 * 6) and st == SPE_SAMPLE_TYPE & ~abi.PERF_SAMPLE_DATA_SRC | abi.PERF_SAMPLE_PERIOD
        _publish(ring, mem, aux, ctl, spe, _aux_record(0, len(spe), cpu=i) + clock, 0, 0)
    assert rec.drain() > 0
    rec.disable()
    path = tmp_path / "both.data"
    rec.write(str(path))
    rec.close()
    assert all(fd.closed for fd in _FakeFd.opened)
    prof = load_profile(str(path), kernel_symbols=False)
    counts = {prof.event_names[e]: int((prof.event == e).sum()) for e in set(prof.event.tolist())}
    assert counts["cpu-clock"] == 6
    assert counts["l1d-access"] == counts["tlb-access"] == counts["memory"] == 4


def test_mem_record_with_a_pmu_event(monkeypatch, tmp_path, arm_root):
    import pmuscope.kernel.ring as ring_mod
    import pmuscope.kernel.syscall as sys_mod
    from pmuscope.perfdata import PerfDataFile

    _FakeFd.opened = []
    monkeypatch.setattr(sys_mod, "PerfEventFd", _FakeFdOut)
    monkeypatch.setattr(ring_mod, "RingBuffer", _FakeRing)
    out = tmp_path / "spe.data"
    assert main(["mem", "record", "--sysfs", arm_root, "-e", "cpu-clock", "-o", str(out), "--", "true"]) == 0
    with PerfDataFile(str(out)) as pf:
        assert [a.name for a in pf.attrs][1:] == ["cpu-clock"]
        assert pf.attrs[1].ids == [1100 + c for c in sorted({fd.cpu for fd in _FakeFd.opened})]
