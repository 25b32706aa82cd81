"""Record decoding from hand-built bytes (layouts from include/uapi/linux/perf_event.h)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pmuscope.errors import FormatError
from pmuscope.kernel import abi
from pmuscope.records import (
    AttrTable,
    Aux,
    AuxOutputHwId,
    BpfEvent,
    Cgroup,
    Comm,
    DecodeStats,
    Exit,
    Fork,
    ItraceStart,
    Ksymbol,
    Lost,
    LostSamples,
    Mmap,
    Mmap2,
    Namespaces,
    Read,
    RecordSource,
    SampleBatch,
    Switch,
    SwitchCpuWide,
    TextPoke,
    Throttle,
    UnknownRecord,
    Unthrottle,
    UserRecord,
    decode,
    id_pos,
    is_pos,
    parse_sample,
)

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

S = abi.PerfSample
F = abi.PerfFormat
R = abi.PerfRecord


# --- builders ---------------------------------------------------------------------


def rec(rtype: int, body: bytes, misc: int = 0) -> bytes:
    assert len(body) % 8 == 0, "records are 8-byte aligned"
    return struct.pack("<IHH", rtype, misc, 8 + len(body)) + body


def cstr(s: str) -> bytes:
    b = s.encode() + b"\0"
    return b + b"\0" * (-len(b) % 8)


def q(*vals: int) -> bytes:
    return struct.pack(f"<{len(vals)}Q", *vals)


def sample_id_trailer(st: int, pid=0, tid=0, time=0, id=0, stream_id=0, cpu=0) -> bytes:
    out = b""
    if st & S.TID:
        out += struct.pack("<II", pid, tid)
    if st & S.TIME:
        out += q(time)
    if st & S.ID:
        out += q(id)
    if st & S.STREAM_ID:
        out += q(stream_id)
    if st & S.CPU:
        out += struct.pack("<II", cpu, 0)
    if st & S.IDENTIFIER:
        out += q(id)
    return out


def read_format_bytes(rf: int, values, enabled=0, running=0, ids=None, lost=None) -> bytes:
    out = b""
    if rf & F.GROUP:
        out += q(len(values))
        if rf & F.TOTAL_TIME_ENABLED:
            out += q(enabled)
        if rf & F.TOTAL_TIME_RUNNING:
            out += q(running)
        for i, v in enumerate(values):
            out += q(v)
            if rf & F.ID:
                out += q(ids[i])
            if rf & F.LOST:
                out += q(lost[i])
        return out
    out += q(values[0])
    if rf & F.TOTAL_TIME_ENABLED:
        out += q(enabled)
    if rf & F.TOTAL_TIME_RUNNING:
        out += q(running)
    if rf & F.ID:
        out += q(ids[0])
    if rf & F.LOST:
        out += q(lost[0])
    return out


def sample(attr: abi.perf_event_attr, misc: int = abi.PERF_RECORD_MISC_USER, **f) -> bytes:
    """Encode a PERF_RECORD_SAMPLE in kernel field order (perf_output_sample)."""
    st = attr.sample_type
    b = b""
    if st & S.IDENTIFIER:
        b += q(f["id"])
    if st & S.IP:
        b += q(f["ip"])
    if st & S.TID:
        b += struct.pack("<ii", f["pid"], f["tid"])
    if st & S.TIME:
        b += q(f["time"])
    if st & S.ADDR:
        b += q(f["addr"])
    if st & S.ID:
        b += q(f["id"])
    if st & S.STREAM_ID:
        b += q(f["stream_id"])
    if st & S.CPU:
        b += struct.pack("<II", f["cpu"], 0)
    if st & S.PERIOD:
        b += q(f["period"])
    if st & S.READ:
        b += read_format_bytes(attr.read_format, **f["read"])
    if st & S.CALLCHAIN:
        cc = f["callchain"]
        b += q(len(cc), *cc)
    if st & S.RAW:
        raw = f["raw"]
        b += struct.pack("<I", len(raw)) + raw
        if f.get("raw_pad", True):
            b += b"\0" * (-len(b) % 8)
    if st & S.BRANCH_STACK:
        br = f["branches"]
        b += q(len(br))
        if attr.branch_sample_type & abi.PERF_SAMPLE_BRANCH_HW_INDEX:
            b += q(f["hw_idx"])
        for fr, to, fl in br:
            b += q(fr, to, fl)
        if attr.branch_sample_type & abi.PERF_SAMPLE_BRANCH_COUNTERS:
            b += q(*f["branch_counters"])
    if st & S.REGS_USER:
        abi_, regs = f["regs_user"]
        b += q(abi_, *regs)
    if st & S.STACK_USER:
        data, dyn = f["stack_user"]
        b += q(len(data)) + data + (q(dyn) if data else b"")
    if st & (S.WEIGHT | S.WEIGHT_STRUCT):
        b += q(f["weight"])
    if st & S.DATA_SRC:
        b += q(f["data_src"])
    if st & S.TRANSACTION:
        b += q(f["transaction"])
    if st & S.REGS_INTR:
        abi_, regs = f["regs_intr"]
        b += q(abi_, *regs)
    if st & S.PHYS_ADDR:
        b += q(f["phys_addr"])
    if st & S.CGROUP:
        b += q(f["cgroup"])
    if st & S.DATA_PAGE_SIZE:
        b += q(f["data_page_size"])
    if st & S.CODE_PAGE_SIZE:
        b += q(f["code_page_size"])
    if st & S.AUX:
        b += q(len(f["aux"])) + f["aux"]
    return rec(R.SAMPLE, b, misc)


def one_batch(buf: bytes, table: AttrTable, **kw) -> SampleBatch:
    items = list(decode(buf, table, **kw))
    batches = [i for i in items if isinstance(i, SampleBatch)]
    assert len(batches) == 1, items
    return batches[0]


ALL_FIELDS = (
    S.IDENTIFIER | S.IP | S.TID | S.TIME | S.ADDR | S.ID | S.STREAM_ID | S.CPU | S.PERIOD | S.READ | S.CALLCHAIN
    | S.RAW | S.BRANCH_STACK | S.REGS_USER | S.STACK_USER | S.WEIGHT_STRUCT | S.DATA_SRC | S.TRANSACTION
    | S.REGS_INTR | S.PHYS_ADDR | S.CGROUP | S.DATA_PAGE_SIZE | S.CODE_PAGE_SIZE | S.AUX
)


def all_fields_attr(**kw) -> abi.perf_event_attr:
    return abi.perf_event_attr(
        sample_type=ALL_FIELDS,
        read_format=F.GROUP | F.TOTAL_TIME_ENABLED | F.TOTAL_TIME_RUNNING | F.ID | F.LOST,
        branch_sample_type=abi.PERF_SAMPLE_BRANCH_ANY | abi.PERF_SAMPLE_BRANCH_HW_INDEX,
        sample_regs_user=0b1011,  # 3 registers
        sample_regs_intr=0b11,  # 2 registers
        sample_id_all=1,
        **kw,
    )


def all_fields_values(k: int) -> dict:
    """Distinct values per sample k; variable-length fields vary in length with k."""
    return dict(
        id=42,
        ip=0x400000 + k,
        pid=100 + k,
        tid=200 + k,
        time=1_000_000 + k,
        addr=0xDEAD0000 + k,
        stream_id=7,
        cpu=k % 2,
        period=1000 + k,
        read=dict(values=[10 + k, 20 + k][: 1 + k % 2], enabled=300 + k, running=250 + k, ids=[42, 43][: 1 + k % 2],
                  lost=[0, k][: 1 + k % 2]),
        callchain=[abi.PERF_CONTEXT_KERNEL, 0xFFFFFFFF81000000 + k, abi.PERF_CONTEXT_USER] + [0x401000 + i for i in range(k)],
        raw=bytes(range(4 + 8 * k)),  # 4 + size is a multiple of 8, as the kernel pads it
        hw_idx=k,
        branches=[(0x1000 + i, 0x2000 + i, i) for i in range(k + 1)],
        regs_user=(abi.PERF_SAMPLE_REGS_ABI_64, [1 + k, 2, 3]) if k % 3 else (abi.PERF_SAMPLE_REGS_ABI_NONE, []),
        stack_user=(bytes([k]) * (16 * (k % 2)), 8 * (k % 2)),
        weight=(5 << 48) | (17 << 32) | (900 + k),
        data_src=0x68100142 + k,
        transaction=abi.PERF_TXN_TRANSACTION | (3 << abi.PERF_TXN_ABORT_SHIFT),
        regs_intr=(abi.PERF_SAMPLE_REGS_ABI_64, [0xAA, 0xBB + k]),
        phys_addr=0x1234000 + k,
        cgroup=99,
        data_page_size=4096,
        code_page_size=2 * 1024 * 1024,
        aux=bytes([0xA5]) * (8 * (k % 3)),
    )


def check_sample_matches(batch: SampleBatch, i: int, v: dict) -> None:
    assert batch.id[i] == v["id"]
    assert batch.ip[i] == v["ip"]
    assert batch.pid[i] == v["pid"] and batch.tid[i] == v["tid"]
    assert batch.time[i] == v["time"]
    assert batch.addr[i] == v["addr"]
    assert batch.stream_id[i] == v["stream_id"]
    assert batch.cpu[i] == v["cpu"]
    assert batch.period[i] == v["period"]
    r = v["read"]
    o = batch.read_offsets
    assert list(batch.read_value[o[i] : o[i + 1]]) == r["values"]
    assert list(batch.read_id[o[i] : o[i + 1]]) == r["ids"]
    assert list(batch.read_lost[o[i] : o[i + 1]]) == r["lost"]
    assert batch.read_time_enabled[i] == r["enabled"] and batch.read_time_running[i] == r["running"]
    assert list(batch.callchain_of(i)) == v["callchain"]
    assert batch.raw_of(i) == v["raw"]
    assert batch.branch_hw_idx[i] == v["hw_idx"]
    o = batch.branch_offsets
    got = list(zip(batch.branch_from[o[i] : o[i + 1]], batch.branch_to[o[i] : o[i + 1]], batch.branch_flags[o[i] : o[i + 1]]))
    assert got == v["branches"]
    abi_, regs = v["regs_user"]
    assert batch.regs_user_abi[i] == abi_
    o = batch.regs_user_offsets
    assert list(batch.regs_user[o[i] : o[i + 1]]) == regs
    data, dyn = v["stack_user"]
    o = batch.stack_user_offsets
    assert batch.stack_user[o[i] : o[i + 1]].tobytes() == data
    assert batch.stack_user_dyn_size[i] == (dyn if data else 0)
    assert batch.weight[i] == v["weight"]
    assert batch.weight_var1[i] == v["weight"] & 0xFFFFFFFF
    assert batch.weight_var2[i] == 17 and batch.weight_var3[i] == 5
    assert batch.data_src[i] == v["data_src"]
    assert batch.transaction[i] == v["transaction"]
    o = batch.regs_intr_offsets
    assert batch.regs_intr_abi[i] == v["regs_intr"][0]
    assert list(batch.regs_intr[o[i] : o[i + 1]]) == v["regs_intr"][1]
    assert batch.phys_addr[i] == v["phys_addr"]
    assert batch.cgroup[i] == v["cgroup"]
    assert batch.data_page_size[i] == v["data_page_size"]
    assert batch.code_page_size[i] == v["code_page_size"]
    o = batch.aux_offsets
    assert batch.aux[o[i] : o[i + 1]].tobytes() == v["aux"]


# --- id positions -------------------------------------------------------------------


def test_id_pos_and_is_pos_follow_perf():
    assert id_pos(S.IDENTIFIER | S.IP | S.ID) == 0
    assert id_pos(S.IP | S.TID | S.TIME | S.ID) == 3
    assert id_pos(S.IP | S.TID | S.TIME | S.ADDR | S.ID | S.CPU) == 4
    assert id_pos(S.IP | S.TID) == -1
    assert is_pos(S.IDENTIFIER | S.CPU) == 1
    assert is_pos(S.ID | S.CPU | S.STREAM_ID) == 3
    assert is_pos(S.ID | S.TIME) == 1
    assert is_pos(S.TID) == -1


# --- every sample field -------------------------------------------------------------


def test_every_sample_field_vectorized_matches_values():
    attr = all_fields_attr()
    table = AttrTable([(attr, [42, 43])])
    values = [all_fields_values(k) for k in range(7)]
    buf = b"".join(sample(attr, **v) for v in values)
    batch = one_batch(buf, table)
    assert len(batch) == 7
    for i, v in enumerate(values):
        check_sample_matches(batch, i, v)
    assert batch.attr_index.tolist() == [0] * 7
    assert (batch.cpumode == abi.PERF_RECORD_MISC_USER).all()


def test_every_sample_field_scalar_parser_agrees():
    attr = all_fields_attr()
    table = AttrTable([(attr, [42])])
    v = all_fields_values(4)
    buf = sample(attr, **v)
    d = parse_sample(buf, 0, len(buf), table[0])
    assert d["ip"] == v["ip"] and d["callchain"] == v["callchain"] and d["raw"] == v["raw"]
    assert d["read"].values == v["read"]["values"] and d["read"].ids == v["read"]["ids"]
    assert d["branch_hw_idx"] == 4 and d["branch_from"] == [b[0] for b in v["branches"]]
    assert d["aux"] == v["aux"] and d["stack_user"] == v["stack_user"][0]


def test_unpadded_raw_goes_through_struct_loop_with_same_result():
    attr = abi.perf_event_attr(sample_type=S.IP | S.RAW | S.PERIOD | S.TIME)
    table = AttrTable([(attr, [])])
    # a foreign writer that did not pad RAW: 4 + 5 bytes, record size still 8-aligned by trailing pad
    body = q(0x1234) + q(99) + q(5) + struct.pack("<I", 5) + b"hello" + b"\0" * 7
    buf = rec(R.SAMPLE, body) + sample(attr, ip=0x99, time=1, period=2, raw=b"abcd")
    batch = one_batch(buf, table)
    assert batch.ip.tolist() == [0x1234, 0x99]
    assert batch.raw_of(0) == b"hello" and batch.raw_of(1) == b"abcd"
    assert batch.period.tolist() == [5, 2]


def test_read_non_group_and_branch_counters():
    attr = abi.perf_event_attr(
        sample_type=S.IP | S.READ | S.BRANCH_STACK,
        read_format=F.TOTAL_TIME_ENABLED | F.ID,
        branch_sample_type=abi.PERF_SAMPLE_BRANCH_ANY | abi.PERF_SAMPLE_BRANCH_COUNTERS,
    )
    table = AttrTable([(attr, [])])
    buf = sample(attr, ip=1, read=dict(values=[77], enabled=5, ids=[9]), branches=[(1, 2, 3), (4, 5, 6)],
                 branch_counters=[0x11, 0x22])
    buf += sample(attr, ip=2, read=dict(values=[78], enabled=6, ids=[9]), branches=[], branch_counters=[])
    b = one_batch(buf, table)
    assert b.read_value.tolist() == [77, 78] and b.read_id.tolist() == [9, 9]
    assert b.read_time_enabled.tolist() == [5, 6] and b.read_time_running is None
    assert b.branch_from.tolist() == [1, 4] and b.branch_flags.tolist() == [3, 6]
    assert b.branch_counters.tolist() == [0x11, 0x22]
    assert b.branch_offsets.tolist() == [0, 2, 2]
    assert b.branch_hw_idx is None


def test_negative_pid_kept_signed():
    attr = abi.perf_event_attr(sample_type=S.TID | S.CPU)
    b = one_batch(sample(attr, pid=-1, tid=-1, cpu=3), AttrTable([(attr, [])]))
    assert b.pid.tolist() == [-1] and b.tid.tolist() == [-1] and b.cpu.tolist() == [3]


def test_uniform_samples_columns_and_callchain_markers():
    attr = abi.perf_event_attr(sample_type=S.IP | S.TID | S.TIME | S.PERIOD | S.CALLCHAIN)
    table = AttrTable([(attr, [])])
    chains = [[abi.PERF_CONTEXT_USER, 0x10 + k, 0x20 + k] for k in range(50)]
    buf = b"".join(sample(attr, ip=k, pid=1, tid=2, time=k * 10, period=1, callchain=c) for k, c in enumerate(chains))
    b = one_batch(buf, table)
    assert b.ip.tolist() == list(range(50))
    assert b.callchain_offsets.tolist() == list(range(0, 151, 3))
    assert b.callchain.reshape(50, 3)[:, 0].tolist() == [abi.PERF_CONTEXT_USER] * 50
    assert b.time.dtype == np.uint64 and b.pid.dtype == np.int32
    assert b.addr is None and b.raw is None


# --- multiple attrs -------------------------------------------------------------------


def test_two_attrs_told_apart_by_identifier_with_different_layouts():
    a1 = abi.perf_event_attr(sample_type=S.IDENTIFIER | S.IP | S.TID | S.CALLCHAIN, sample_id_all=1)
    a2 = abi.perf_event_attr(sample_type=S.IDENTIFIER | S.IP | S.TID | S.PERIOD | S.RAW, sample_id_all=1)
    table = AttrTable([(a1, [11, 12]), (a2, [21])], names=["cpu-clock", "sched:sched_switch"])
    buf = (
        sample(a1, id=11, ip=1, pid=5, tid=5, callchain=[1, 2])
        + sample(a2, id=21, ip=2, pid=6, tid=6, period=1, raw=b"\x01\x02\x03\x04")
        + sample(a1, id=12, ip=3, pid=5, tid=5, callchain=[3])
        + sample(a2, id=99, ip=4, pid=6, tid=6, period=1, raw=b"")  # unknown id: dropped, counted
    )
    stats = DecodeStats()
    b = one_batch(buf, table, stats=stats)
    assert b.attr_index.tolist() == [0, 1, 0]
    assert b.ip.tolist() == [1, 2, 3]
    assert b.period.tolist() == [0, 1, 0]
    assert b.callchain_offsets.tolist() == [0, 2, 2, 3] and b.callchain.tolist() == [1, 2, 3]
    assert b.raw_of(1) == b"\x01\x02\x03\x04" and b.raw_of(0) == b""
    assert stats.unknown_id == 1 and stats.samples == 3
    assert table[1].name == "sched:sched_switch"


def test_two_attrs_by_id_position_and_trailer_lookup():
    st = S.IP | S.TID | S.TIME | S.ID | S.CPU
    a1 = abi.perf_event_attr(sample_type=st, sample_id_all=1)
    a2 = abi.perf_event_attr(sample_type=st | S.PERIOD, sample_id_all=1)
    table = AttrTable([(a1, [1]), (a2, [2])])
    assert table.id_pos == 3 and table.is_pos == 2
    comm = rec(R.COMM, struct.pack("<II", 7, 8) + cstr("worker") + sample_id_trailer(st, pid=7, tid=8, time=55, id=2, cpu=1), misc=abi.PERF_RECORD_MISC_COMM_EXEC)
    buf = sample(a1, ip=10, pid=7, tid=8, time=1, id=1, cpu=0) + comm + sample(a2, ip=20, pid=7, tid=8, time=60, id=2, cpu=1, period=3)
    items = list(decode(buf, table))
    assert [type(i).__name__ for i in items] == ["SampleBatch", "Comm", "SampleBatch"]
    assert items[0].attr_index.tolist() == [0] and items[2].attr_index.tolist() == [1]
    assert items[2].period.tolist() == [3] and items[0].period.tolist() == [0]
    c = items[1]
    assert c.comm == "worker" and c.exec and c.time == 55 and c.sample_id.id == 2 and c.cpu == 1


def test_attrs_with_different_id_positions_are_rejected():
    a1 = abi.perf_event_attr(sample_type=S.IP | S.ID)
    a2 = abi.perf_event_attr(sample_type=S.IP | S.TID | S.ID)
    with pytest.raises(FormatError, match="different positions"):
        AttrTable([(a1, [1]), (a2, [2])])
    with pytest.raises(FormatError, match="cannot be told apart"):
        AttrTable([(abi.perf_event_attr(sample_type=S.IP), [1]), (abi.perf_event_attr(sample_type=S.IP), [2])])


# --- side-band records --------------------------------------------------------------

TRAILER_ST = S.TID | S.TIME | S.ID | S.STREAM_ID | S.CPU | S.IDENTIFIER


def sideband_table() -> AttrTable:
    attr = abi.perf_event_attr(sample_type=TRAILER_ST | S.IP, sample_id_all=1,
                               read_format=F.GROUP | F.ID | F.TOTAL_TIME_ENABLED)
    return AttrTable([(attr, [5])])


def tr(time: int = 1000) -> bytes:
    return sample_id_trailer(TRAILER_ST, pid=1, tid=2, time=time, id=5, stream_id=6, cpu=1)


def test_every_sideband_record_type():
    bid = bytes(range(20))
    recs = [
        rec(R.MMAP, struct.pack("<IIQQQ", 1, 2, 0x400000, 0x1000, 0) + cstr("/bin/true") + tr()),
        rec(R.MMAP2, struct.pack("<IIQQQIIQQII", 1, 2, 0x500000, 0x2000, 0x1000, 8, 1, 1234, 7, 5, 2) + cstr("/usr/lib/libc.so.6") + tr()),
        rec(R.MMAP2, struct.pack("<IIQQQBBH20sII", 1, 2, 0x600000, 0x3000, 0, 20, 0, 0, bid, 5, 2) + cstr("/usr/bin/python3") + tr(),
            misc=abi.PERF_RECORD_MISC_MMAP_BUILD_ID | abi.PERF_RECORD_MISC_USER),
        rec(R.COMM, struct.pack("<II", 1, 2) + cstr("bash") + tr(), misc=abi.PERF_RECORD_MISC_COMM_EXEC),
        rec(R.COMM, struct.pack("<II", 1, 3) + cstr("worker-thread") + tr()),
        rec(R.FORK, struct.pack("<IIIIQ", 10, 1, 11, 2, 777) + tr()),
        rec(R.EXIT, struct.pack("<IIIIQ", 10, 1, 11, 2, 888) + tr()),
        rec(R.LOST, q(5, 17) + tr()),
        rec(R.LOST_SAMPLES, q(3) + tr()),
        rec(R.THROTTLE, q(900, 5, 6) + tr()),
        rec(R.UNTHROTTLE, q(901, 5, 6) + tr()),
        rec(R.SWITCH, tr(), misc=abi.PERF_RECORD_MISC_SWITCH_OUT | abi.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT),
        rec(R.SWITCH_CPU_WIDE, struct.pack("<II", 33, 34) + tr()),
        rec(R.NAMESPACES, struct.pack("<II", 1, 2) + q(2, 4, 0xF0000001, 4, 0xF0000002) + tr()),
        rec(R.KSYMBOL, struct.pack("<QIHH", 0xFFFFFFFFC0000000, 0x80, abi.PERF_RECORD_KSYMBOL_TYPE_BPF, 1) + cstr("bpf_prog_x") + tr()),
        rec(R.BPF_EVENT, struct.pack("<HHI8s", abi.PERF_BPF_EVENT_PROG_LOAD, 0, 42, b"tagtag12") + tr()),
        rec(R.CGROUP, q(77) + cstr("/sys/fs/cgroup/user.slice") + tr()),
        rec(R.TEXT_POKE, struct.pack("<QHH", 0xFFFFFFFF81000000, 2, 3) + b"\x90\x90\xe8\x01\x02" + b"\0" * 7 + tr()),
        rec(R.AUX, q(4096, 8192, abi.PERF_AUX_FLAG_TRUNCATED) + tr()),
        rec(R.ITRACE_START, struct.pack("<II", 1, 2) + tr()),
        rec(R.AUX_OUTPUT_HW_ID, q(3) + tr()),
        rec(R.READ, struct.pack("<II", 1, 2) + q(2, 1000, 11, 5, 22, 6) + tr()),
    ]
    stats = DecodeStats()
    items = list(decode(b"".join(recs), sideband_table(), stats=stats))
    assert len(items) == len(recs)
    mm, m2, m2b, comm, comm2, fork, ex, lost, lsamp, thr, unthr, sw, swc, ns, ks, bpf, cg, poke, aux, its, hwid, rd = items
    assert isinstance(mm, Mmap) and mm.filename == "/bin/true" and mm.addr == 0x400000 and mm.len == 0x1000
    assert isinstance(m2, Mmap2) and (m2.maj, m2.min, m2.ino, m2.ino_generation) == (8, 1, 1234, 7)
    assert m2.build_id is None and m2.prot == 5 and m2.flags == 2 and m2.filename.endswith("libc.so.6")
    assert m2b.build_id == bid and m2b.ino is None and m2b.filename == "/usr/bin/python3" and m2b.pgoff == 0
    assert isinstance(comm, Comm) and comm.comm == "bash" and comm.exec and not comm2.exec
    assert comm2.comm == "worker-thread" and comm2.tid == 3
    assert isinstance(fork, Fork) and (fork.pid, fork.ppid, fork.tid, fork.ptid, fork.fork_time) == (10, 1, 11, 2, 777)
    assert isinstance(ex, Exit) and ex.exit_time == 888
    assert isinstance(lost, Lost) and lost.id == 5 and lost.lost == 17
    assert isinstance(lsamp, LostSamples) and lsamp.lost == 3
    assert isinstance(thr, Throttle) and thr.throttle_time == 900 and isinstance(unthr, Unthrottle)
    assert isinstance(sw, Switch) and sw.out and sw.preempt
    assert isinstance(swc, SwitchCpuWide) and (swc.next_prev_pid, swc.next_prev_tid) == (33, 34) and not swc.out
    assert isinstance(ns, Namespaces) and ns.namespaces == [(4, 0xF0000001), (4, 0xF0000002)]
    assert isinstance(ks, Ksymbol) and ks.name == "bpf_prog_x" and ks.len == 0x80 and ks.unregister
    assert isinstance(bpf, BpfEvent) and bpf.id == 42 and bpf.tag == b"tagtag12"
    assert isinstance(cg, Cgroup) and cg.id == 77 and cg.path == "/sys/fs/cgroup/user.slice"
    assert isinstance(poke, TextPoke) and poke.old_bytes == b"\x90\x90" and poke.new_bytes == b"\xe8\x01\x02"
    assert isinstance(aux, Aux) and aux.aux_offset == 4096 and aux.aux_size == 8192 and aux.truncated
    assert isinstance(its, ItraceStart) and its.tid == 2
    assert isinstance(hwid, AuxOutputHwId) and hwid.hw_id == 3
    assert isinstance(rd, Read) and rd.values.values == [11, 22] and rd.values.ids == [5, 6]
    assert rd.values.time_enabled == 1000 and rd.values.group
    for it in items:
        assert it.sample_id.pid == 1 and it.sample_id.tid == 2 and it.time == 1000
        assert it.sample_id.id == 5 and it.sample_id.stream_id == 6 and it.cpu == 1 and it.sample_id.identifier == 5
    assert stats.lost == 17 and stats.lost_samples == 3 and stats.throttle == 1 and stats.unthrottle == 1
    assert stats.records[R.MMAP2] == 2
    assert [i.offset for i in items] == list(np.cumsum([0] + [len(r) for r in recs[:-1]]))


def test_sideband_without_sample_id_all():
    attr = abi.perf_event_attr(sample_type=S.IP | S.TID)
    items = list(decode(rec(R.COMM, struct.pack("<II", 4, 4) + cstr("a" * 15)), AttrTable([(attr, [])])))
    assert items[0].comm == "a" * 15 and items[0].sample_id is None and items[0].time is None


def test_unknown_kernel_record_skipped_and_counted_user_records_passed_through():
    table = sideband_table()
    buf = rec(30, q(1, 2, 3)) + rec(R.FINISHED_ROUND, b"") + rec(R.LOST_SAMPLES, q(9) + tr())
    stats = DecodeStats()
    items = list(decode(buf, table, stats=stats))
    assert isinstance(items[0], UserRecord) and items[0].type == R.FINISHED_ROUND and items[0].offset == 32
    assert items[0].data == rec(R.FINISHED_ROUND, b"")
    assert isinstance(items[1], LostSamples) and len(items) == 2
    assert stats.unknown == 1 and stats.lost_samples == 9
    items = list(decode(buf, table, user_records=False, unknown_records=True))
    assert isinstance(items[0], UnknownRecord) and items[0].type == 30 and items[0].size == 32
    assert isinstance(items[1], LostSamples)


def test_batches_split_at_sideband_records_in_order():
    attr = abi.perf_event_attr(sample_type=S.IP | S.TIME | TRAILER_ST, sample_id_all=1)
    table = AttrTable([(attr, [5])])
    kw = dict(pid=1, tid=2, id=5, stream_id=6, cpu=0)
    buf = (sample(attr, ip=1, time=1, **kw) + sample(attr, ip=2, time=2, **kw)
           + rec(R.EXIT, struct.pack("<IIIIQ", 1, 0, 2, 0, 3) + tr(3))
           + sample(attr, ip=3, time=4, **kw))
    items = list(decode(buf, table, base_offset=4096))
    assert [type(i).__name__ for i in items] == ["SampleBatch", "Exit", "SampleBatch"]
    assert items[0].ip.tolist() == [1, 2] and items[2].ip.tolist() == [3]
    assert items[2].offset.tolist() == [4096 + 2 * len(sample(attr, ip=1, time=1, **kw)) + 80]


def test_record_source_chunks_and_concat():
    attr = abi.perf_event_attr(sample_type=S.IP | S.CALLCHAIN | S.RAW)
    table = AttrTable([(attr, [])])
    c1 = sample(attr, ip=1, callchain=[1], raw=b"abcd") + sample(attr, ip=2, callchain=[2, 3], raw=b"")
    c2 = rec(R.LOST, q(1, 4)) + sample(attr, ip=3, callchain=[], raw=b"wxyz" * 3)
    src = RecordSource(iter([c1, c2]), table)
    items = list(src)
    assert isinstance(items[1], Lost) and items[1].offset == len(c1)
    assert src.stats.samples == 3 and src.stats.lost == 4
    allb = SampleBatch.concat([i for i in items if isinstance(i, SampleBatch)])
    assert allb.ip.tolist() == [1, 2, 3]
    assert allb.callchain.tolist() == [1, 2, 3] and allb.callchain_offsets.tolist() == [0, 1, 3, 3]
    assert allb.raw_of(0) == b"abcd" and allb.raw_of(2) == b"wxyz" * 3
    sl = allb[1:3]
    assert sl.ip.tolist() == [2, 3] and sl.callchain_of(0).tolist() == [2, 3] and sl.raw_of(1) == b"wxyz" * 3
    src2 = RecordSource([(100, c2)], table)
    assert [i.offset for i in src2 if isinstance(i, Lost)] == [100]


def test_memoryview_and_bytearray_chunks():
    attr = abi.perf_event_attr(sample_type=S.IP | S.TID)
    table = AttrTable([(attr, [])])
    data = sample(attr, ip=7, pid=1, tid=1) * 3
    for buf in (bytearray(data), memoryview(data), memoryview(bytearray(b"\0" * 8 + data))[8:]):
        assert one_batch(buf, table).ip.tolist() == [7, 7, 7]


# --- malformed input -------------------------------------------------------------------


def test_size_zero_record_raises_with_offset():
    table = sideband_table()
    buf = rec(R.LOST_SAMPLES, q(1) + tr()) + struct.pack("<IHH", R.COMM, 0, 0) + b"\0" * 8
    with pytest.raises(FormatError, match=r"byte offset 64.*header.size=0, expected at least 8") as ei:
        list(decode(buf, table, base_offset=0))
    assert ei.value.offset == 64


def test_size_past_end_raises():
    attr = abi.perf_event_attr(sample_type=S.IP)
    buf = sample(attr, ip=1)[:-8] + b""
    with pytest.raises(FormatError, match=r"byte offset 1000: header.size=16 runs past the end"):
        list(decode(buf[:8] + b"\0" * 4, AttrTable([(attr, [])]), base_offset=1000))


def test_truncated_header_raises():
    attr = abi.perf_event_attr(sample_type=S.IP)
    with pytest.raises(FormatError, match="expected an 8-byte perf_event_header, only 4 bytes left"):
        list(decode(sample(attr, ip=1) + b"\0" * 4, AttrTable([(attr, [])])))


@pytest.mark.parametrize("field,body", [
    ("CALLCHAIN", q(1) + q(2) + q(1000, 1)),  # nr=1000 with one word present
    ("RAW", q(1) + q(2) + q(0) + struct.pack("<I", 500) + b"\0" * 4),
    ("BRANCH_STACK", q(1) + q(2) + q(0) + struct.pack("<I", 4) + b"abcd" + q(5) + q(1, 2, 3)),
])
def test_field_overrunning_record_raises(field, body):
    attr = abi.perf_event_attr(sample_type=S.IP | S.PERIOD | S.CALLCHAIN | S.RAW | S.BRANCH_STACK)
    table = AttrTable([(attr, [])])
    good = sample(attr, ip=1, period=1, callchain=[], raw=b"abcd", branches=[])
    if field == "CALLCHAIN":
        attr2 = abi.perf_event_attr(sample_type=S.IP | S.PERIOD | S.CALLCHAIN)
        table = AttrTable([(attr2, [])])
        good = sample(attr2, ip=1, period=1, callchain=[5])
    bad = rec(R.SAMPLE, body)
    with pytest.raises(FormatError, match=rf"byte offset {len(good)}: {field}.*runs past the end of the record"):
        list(decode(good + bad, table))
    # the scalar parser names the same problem
    with pytest.raises(FormatError, match=field):
        parse_sample(bad, 0, len(bad), table[0])


def test_fixed_fields_overrunning_and_short_sideband():
    attr = abi.perf_event_attr(sample_type=S.IP | S.TID | S.TIME | S.PERIOD)
    with pytest.raises(FormatError, match="TIME"):
        list(decode(rec(R.SAMPLE, q(1, 2)), AttrTable([(attr, [])])))
    with pytest.raises(FormatError, match="PERF_RECORD_MMAP2 needs at least 64 bytes"):
        list(decode(rec(R.MMAP2, q(1, 2, 3)), AttrTable([(attr, [])])))
    with pytest.raises(FormatError, match="TEXT_POKE bytes"):
        list(decode(rec(R.TEXT_POKE, struct.pack("<QHH", 0, 100, 100) + b"\0" * 4), AttrTable([(attr, [])])))


def test_garbage_never_hangs():
    rng = np.random.default_rng(1)
    attr = all_fields_attr()
    table = AttrTable([(attr, [42])])
    good = b"".join(sample(attr, **all_fields_values(k)) for k in range(5))
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        buf = bytearray(good)
        for _ in range(int(rng.integers(1, 6))):
            buf[int(rng.integers(0, len(buf)))] = int(rng.integers(0, 256))
        try:
            for _item in decode(bytes(buf), table):
                pass
            outcomes["ok"] += 1
        except FormatError as err:
            assert "byte offset" in str(err)
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0


def test_payload_words_that_look_like_headers_do_not_confuse_the_walk():
    from pmuscope.records.decode import _walk_vectorized

    attr = abi.perf_event_attr(sample_type=S.IP | S.TID | S.RAW)
    table = AttrTable([(attr, [])])
    # tid 524288 makes the pid/tid word's top 16 bits 8: it looks like a header of size 8
    fake_past_end = struct.pack("<IHH", 9, 0, 0xFFF8)  # a "header" in the RAW payload pointing past the end
    buf = b"".join(sample(attr, ip=k, pid=1, tid=524288 + k, raw=(b"\0" * 4 + fake_past_end + b"\0" * 4)) for k in range(20))
    walked = _walk_vectorized(buf)
    assert walked is not None and len(walked[0]) == 20
    b = one_batch(buf, table)
    assert b.ip.tolist() == list(range(20)) and b.tid.tolist() == [524288 + k for k in range(20)]
    # a chain that leads nowhere falls back to the record-by-record walk, same result
    odd = sample(attr, ip=99, pid=1, tid=1, raw=b"abcd") + buf
    assert one_batch(odd, table).ip.tolist() == [99] + list(range(20))


def test_chain_from_first_past_long_runs_of_look_alikes():
    from pmuscope.records.decode import chain_from_first

    # records at 0, 5, 10, ... 95 (successor = the next one, the last leaves: 20 = end);
    # look-alikes in between, each leading to the next: runs of 3 are dropped by elimination,
    # a run of 12 (longer than its rounds) by pointer doubling; the path is the same
    rng = np.random.default_rng(2)
    for run in (0, 3, 12):
        nodes = []  # (position, is_record)
        for r in range(20):
            nodes.append((r * 100, True))
            nodes += [(r * 100 + 1 + j, False) for j in range(run if r % 4 == 1 else int(rng.integers(0, 2)))]
        pos = [p for p, _ in nodes]
        index = {p: i for i, p in enumerate(pos)}
        succ = []
        for i, (p, real) in enumerate(nodes):
            if real:
                succ.append(index.get(p + 100, len(nodes)))
            else:  # into the next look-alike, or onto the next record
                succ.append(i + 1)
        path = chain_from_first(np.array(succ, dtype=np.int64))
        assert [pos[i] for i in path] == [r * 100 for r in range(20)], run
    # a broken chain: the caller's check sees the gap
    succ = np.array([1, 5, 3, 4, 5], dtype=np.int64)  # 0 -> 1 -> end; 2 -> 3 -> 4 unreachable
    path = chain_from_first(succ)
    assert path.tolist() == [0, 1]


def test_auxtrace_payload_inline_or_left_out():
    table = sideband_table()
    # PERF_RECORD_AUXTRACE: {u64 size, offset, reference; u32 idx, tid, cpu, reserved}, then `size` AUX bytes
    aux = rec(R.AUXTRACE, q(16, 0, 0) + struct.pack("<IIII", 0, 2, 1, 0))
    after = rec(R.LOST_SAMPLES, q(1) + tr())
    items = list(decode(aux + after, table))  # payload left out, as the perf.data reader's chunks do
    assert isinstance(items[0], UserRecord) and items[0].payload is None and isinstance(items[1], LostSamples)
    items = list(decode(aux + b"P" * 16 + after, table, auxtrace_inline=True))
    assert items[0].payload == b"P" * 16 and isinstance(items[1], LostSamples)
    with pytest.raises(FormatError, match="AUX payload runs past the end"):
        list(decode(aux + b"P" * 8, table, auxtrace_inline=True))


def test_sample_batch_fields_defaults_and_unknown_names():
    """SampleBatch is written out (no @dataclass): its fields in declaration
    order, absent ones None, a misspelt one refused as a dataclass would."""
    from pmuscope.records import SampleBatch

    table = "attrs"  # not looked at
    off = np.array([0, 8], dtype=np.int64)
    b = SampleBatch(table, off, np.zeros(2, np.uint16), np.zeros(2, np.int32), ip=np.array([1, 2], np.uint64))
    assert SampleBatch._fields[:6] == ("attrs", "offset", "misc", "attr_index", "id", "ip")
    assert SampleBatch._fields[-2:] == ("aux", "aux_offsets") and len(SampleBatch._fields) == 47
    assert len(b) == 2 and b.ip.tolist() == [1, 2] and b.offset is off
    assert b.id is None and all(getattr(b, f) is None for f in SampleBatch._fields[6:])
    assert repr(b).startswith("SampleBatch(attrs=") and "callchain=None" in repr(b)
    with pytest.raises(TypeError, match="no field callchian"):
        SampleBatch(table, off, off, off, callchian=off)
    assert b[1:2].ip.tolist() == [2] and b[1:2].pid is None
