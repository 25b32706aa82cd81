"""Memory-sample recording without the hardware: the attrs ``pmuscope mem
record`` builds on Intel SKX / SPR, AMD IBS and Arm sysfs trees against what
``perf mem record`` opens (values from perf's source: builtin-mem.c runs
``perf record -W -d -e EVENTS``; util/evsel.c ``evsel__config`` turns ``-d`` into
ADDR|DATA_SRC plus mmap_data on the first event, ``-W`` into x86's
WEIGHT_STRUCT, ``P`` into precise_ip=3; arch/x86/util/mem-events.c names the
events), and the Recorder's ``sample_type_extra`` / ``specs`` over fake fds
and rings."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from pmuscope import errors
from pmuscope.cli.main import main
from pmuscope.kernel import abi
from pmuscope.memory.events import mem_events, mem_record_sample_type, parse_mem_kind
from pmuscope.memory.synth import mem_sample
from pmuscope.perfdata import PerfDataFile
from pmuscope.records import SampleBatch
from pmuscope.sampling import Recorder
from pmuscope.sampling import session as session_mod

from tests.unit.test_sampling import FakeFd, fakes  # noqa: F401 - the fixture

S = abi.PerfSample
DATA = Path(__file__).resolve().parent.parent / "data"
SKX = str(DATA / "sysfs" / "intel-skx")
SPR = str(DATA / "memory" / "sysfs-spr")
IBS = str(DATA / "memory" / "sysfs-amd-ibs")
ARM = str(DATA / "sysfs" / "arm-neoverse-n1")

#: perf record's defaults for an event of a ``-- CMD`` session at the default 4000 Hz
BASE = S.IP | S.TID | S.TIME | S.PERIOD
#: -d (ADDR|DATA_SRC) and -W (WEIGHT_STRUCT on x86)
MEM = S.ADDR | S.DATA_SRC | S.WEIGHT_STRUCT

# sysfs event strings (arch/x86/events/intel/core.c) and their config encodings
SKX_LOADS, SKX_STORES = 0x01CD, 0x82D0  # event=0xcd,umask=0x1 / event=0xd0,umask=0x82
SPR_AUX, SPR_LOADS, SPR_STORES = 0x8203, 0x01CD, 0x02CD  # event=0x03,umask=0x82 / 0xcd,0x1 / 0xcd,0x2


def _fields(a) -> dict:
    return {k: int(getattr(a, k)) for k in ("type", "config", "config1", "precise_ip", "freq", "sample_freq",
                                            "sample_type", "read_format", "disabled", "enable_on_exec", "inherit",
                                            "mmap_data", "sample_id_all", "mmap", "comm")}


def _want(type_, config, config1, sample_type, *, first, leader=True, precise=3, period=None):
    freq = period is None
    return {"type": type_, "config": config, "config1": config1, "precise_ip": precise, "freq": int(freq),
            "sample_freq": 4000 if freq else period, "sample_type": int(sample_type),
            "read_format": int(abi.PerfFormat.ID | abi.PerfFormat.LOST), "disabled": int(leader),
            "enable_on_exec": int(leader), "inherit": 1, "mmap_data": int(first), "sample_id_all": 1,
            "mmap": int(first), "comm": int(first)}


def test_skx_load_store_is_two_precise_pebs_events():
    ev = mem_events("load,store", sysfs_root=SKX)
    assert [(e.tag, e.name, e.kind) for e in ev] == [("ldlat-loads", "cpu/mem-loads,ldlat=30/P", "pebs"),
                                                     ("ldlat-stores", "cpu/mem-stores/P", "pebs")]
    # two events with equal sample_types: perf adds ID (not IDENTIFIER)
    st = BASE | MEM | S.ID
    assert [_fields(a) for e in ev for a in e.attrs] == [
        _want(4, SKX_LOADS, 30, st, first=True), _want(4, SKX_STORES, 0, st, first=False)]


def test_skx_single_kinds_ldlat_and_period():
    (loads,) = mem_events("load", ldlat=75, sysfs_root=SKX)
    assert loads.name == "cpu/mem-loads,ldlat=75/P"
    assert _fields(loads.attrs[0]) == _want(4, SKX_LOADS, 75, BASE | MEM, first=True)
    # -t store: perf adds -W only when loads are recorded
    (stores,) = mem_events("store", period=2000, sysfs_root=SKX)
    assert _fields(stores.attrs[0]) == _want(4, SKX_STORES, 0, S.IP | S.TID | S.TIME | S.ADDR | S.DATA_SRC,
                                             first=True, period=2000)


def test_spr_loads_need_the_aux_group():
    ev = mem_events("ldst", sysfs_root=SPR)
    assert [(e.tag, e.name) for e in ev] == [("ldlat-loads", "{cpu/mem-loads-aux/,cpu/mem-loads,ldlat=30/}:P"),
                                             ("ldlat-stores", "cpu/mem-stores/P")]
    lead, loads = ev[0].specs
    assert lead.leader and not loads.leader and lead.group == loads.group is not None and ev[0].sampler == 1
    assert ev[1].specs[0].group is None
    st = BASE | MEM | S.ID
    assert [_fields(a) for e in ev for a in e.attrs] == [
        _want(4, SPR_AUX, 0, st, first=True),
        _want(4, SPR_LOADS, 30, st, first=False, leader=False),  # a member: enabled with its leader
        _want(4, SPR_STORES, 0, st, first=False)]


def test_amd_ibs_op():
    (ibs,) = mem_events(sysfs_root=IBS)
    assert (ibs.tag, ibs.name, ibs.kind, ibs.pmu) == ("ibs-op", "ibs_op//", "ibs", "ibs_op")
    assert _fields(ibs.attrs[0]) == _want(11, 0, 0, BASE | MEM, first=True, precise=0)
    (ibs,) = mem_events(period=100000, phys_addr=True, sysfs_root=IBS)
    assert _fields(ibs.attrs[0]) == _want(11, 0, 0, S.IP | S.TID | S.TIME | MEM | S.PHYS_ADDR, first=True,
                                          precise=0, period=100000)


def test_arm_spe_terms():
    (spe,) = mem_events("ldst", ldlat=40, sysfs_root=ARM)
    assert spe.kind == "spe" and not spe.specs
    # tools/perf/arch/arm64/util/mem-events.c: spe-ldst
    assert spe.name == "arm_spe_0/ts_enable=1,pa_enable=1,load_filter=1,store_filter=1,min_latency=40/"
    a = spe.attrs[0]
    fmt = DATA / "sysfs" / "arm-neoverse-n1" / "bus" / "event_source" / "devices" / "arm_spe_0" / "format"
    bits = {n: int((fmt / n).read_text().split(":")[1].split("-")[0]) for n in
            ("ts_enable", "pa_enable", "load_filter", "store_filter")}
    assert a.config == sum(1 << b for b in bits.values())
    assert (a.config2, a.sample_period) == (40, 4096)


def test_kinds_and_sample_type_bits():
    assert [parse_mem_kind(k) for k in ("load", "store", "load,store", "store,load", "ldst")] == \
        ["load", "store", "ldst", "ldst", "ldst"]
    with pytest.raises(errors.PmuscopeError, match="expected load, store or load,store"):
        parse_mem_kind("loads")
    assert mem_record_sample_type("store", data_page_size=True) == S.ADDR | S.DATA_SRC | S.DATA_PAGE_SIZE
    with pytest.raises(errors.NoHardwarePMUError, match="ibs_op.*no mem-loads/mem-stores"):
        mem_events(sysfs_root=str(DATA / "sysfs" / "amd-epyc-kvm"))


# --- the Recorder over fake fds and rings -----------------------------------------------------
EXTRA = S.ADDR | S.DATA_SRC | S.WEIGHT


def test_sample_type_extra_reaches_every_fd_and_the_file(fakes, tmp_path):  # noqa: F811
    out = tmp_path / "x.data"
    rec = Recorder("cpu-clock,task-clock", sample_type_extra=EXTRA, system_wide=True, cpus=[0, 1], output=out,
                   procfs_root=str(tmp_path), build_ids=False)
    rec.start()
    assert len(FakeFd.opened) == 4
    assert all(fd.attr.sample_type & EXTRA == EXTRA for fd in FakeFd.opened)
    assert [a.mmap_data for a in rec.attrs] == [1, 0]  # -d: data mmaps on the tracking event only
    st = int(rec.attrs[0].sample_type)
    assert st == int(S.IP | S.TID | S.TIME | S.CPU | S.PERIOD | S.ID | EXTRA)
    ids = [fd.id() for fd in rec.fds[1]]
    for k in range(5):
        assert fakes.kernels[0].write(mem_sample(st, ip=0x401000 + k, pid=7, tid=7, time=100 + k, addr=0x7000 + 8 * k,
                                                 id=ids[0], period=1, weight=10 * k, data_src=0x1234 + k))
    rec.stop()
    result = rec.run()
    assert result.samples == 5
    f = PerfDataFile(str(out))
    assert [int(a.attr.sample_type) for a in f.attrs] == [st, st]
    assert [a.attr.mmap_data for a in f.attrs] == [1, 0]
    batches = [b for b in f.records() if isinstance(b, SampleBatch)]
    addr = [int(x) for b in batches for x in b.addr]
    assert addr == [0x7000 + 8 * k for k in range(5)]
    assert [int(x) for b in batches for x in b.data_src] == [0x1234 + k for k in range(5)]
    assert [int(x) for b in batches for x in b.weight] == [10 * k for k in range(5)]


def test_specs_from_mem_events_open_as_perf_mem_record(fakes, tmp_path):  # noqa: F811
    ev = mem_events("ldst", sysfs_root=SPR)
    rec = Recorder(specs=[s for e in ev for s in e.specs], sample_type_extra=ev[0].sample_type_extra, cmd=["true"],
                   output=None, procfs_root=str(tmp_path), sysfs_root=SPR)
    assert [_fields(a) for a in rec.attrs] == [_fields(a) for e in ev for a in e.attrs]
    rec.start()
    lead, member, stores = (fds[0] for fds in rec.fds)
    assert member.group is lead and lead.group is None and stores.group is None
    assert member.attr.precise_ip == 3 and member.attr.config1 == 30
    assert rec.run().exit_status == 0
    with pytest.raises(errors.PmuscopeError, match="not both"):
        Recorder("cpu-clock", specs=ev[1].specs, output=None)
    with pytest.raises(errors.InvalidAttrError, match="not a PERF_SAMPLE"):
        Recorder("cpu-clock", sample_type_extra=abi.PERF_SAMPLE_MAX, output=None)


def test_weight_struct_falls_back_to_weight(fakes, monkeypatch, tmp_path):  # noqa: F811
    class OldKernelFd(FakeFd):
        def __init__(self, attr, *a, **kw):
            if attr.sample_type & S.WEIGHT_STRUCT:
                err = errors.InvalidAttrError("Invalid argument")
                err.errno = errno.EINVAL
                raise err
            super().__init__(attr, *a, **kw)

    monkeypatch.setattr(session_mod, "PerfEventFd", OldKernelFd)
    rec = Recorder("cpu-clock", sample_type_extra=S.ADDR | S.DATA_SRC | S.WEIGHT_STRUCT, cpus=[0], output=None,
                   procfs_root=str(tmp_path))
    rec._open()
    st = rec.attrs[0].sample_type
    assert st & S.WEIGHT and not st & S.WEIGHT_STRUCT and st & S.DATA_SRC
    assert any("WEIGHT instead of WEIGHT_STRUCT" in n for n in rec.notes)
    rec._teardown()


def test_cli_records_pebs_events_with_the_recorder(fakes, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "mem.data"
    rc = main(["mem", "record", "--sysfs", SKX, "-t", "load", "--ldlat", "50", "-o", str(out), "--", "true"])
    assert rc == 0, capsys.readouterr().err
    (ev,) = mem_events("load", ldlat=50, sysfs_root=SKX)
    f = PerfDataFile(str(out))
    assert [_fields(a.attr) for a in f.attrs] == [_fields(a) for a in ev.attrs]
    assert all(fd.attr.config1 == 50 and fd.attr.precise_ip == 3 for fd in FakeFd.opened)
    assert "pmuscope mem record: Captured and wrote" in capsys.readouterr().err


def test_cli_bad_input_is_one_line(capsys):
    assert main(["mem", "record", "--sysfs", str(DATA / "sysfs" / "amd-epyc-kvm"), "--", "true"]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ibs_op" in err and "Traceback" not in err
    assert main(["mem", "record", "--sysfs", SKX, "-t", "both", "--", "true"]) != 0
    assert "memory operation type 'both'" in capsys.readouterr().err


def test_max_precise_is_lowered_until_the_pmu_accepts(fakes, monkeypatch, tmp_path):  # noqa: F811
    """``:P`` asks for precise_ip 3 (evsel__config); a PMU refusing with EOPNOTSUPP (errno 95, which
    Python names ENOTSUP) gets 2, 1, then 0, as evsel__precise_ip_fallback does."""
    tried = []

    class NoPebsFd(FakeFd):
        def __init__(self, attr, *a, **kw):
            tried.append(attr.precise_ip)
            if attr.precise_ip > 1:
                err = errors.EventNotSupportedError("Operation not supported")
                err.errno = errno.EOPNOTSUPP
                raise err
            super().__init__(attr, *a, **kw)

    monkeypatch.setattr(session_mod, "PerfEventFd", NoPebsFd)
    rec = Recorder("cpu-clock:P", cpus=[0], output=None, procfs_root=str(tmp_path))
    assert rec.attrs[0].precise_ip == 3
    rec._open()
    assert tried == [3, 2, 1] and rec.attrs[0].precise_ip == 1 and rec.notes == ["cpu-clock:P: precise_ip lowered to 1"]
    rec._teardown()
