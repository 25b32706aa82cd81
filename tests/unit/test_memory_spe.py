"""Arm SPE records → perf_mem_data_src, per CPU table (arm-spe.c rules), and
SPE records in the common memory-sample table."""

from __future__ import annotations

import numpy as np
import pytest

from pmuscope.memory import datasrc as D
from pmuscope.memory.samples import from_spe_records
from pmuscope.memory.spe import (
    AMPEREONE, COMMON, FALLBACK, HISI_HIP, EV_HITM, EV_L1D_ACCESS, EV_L1D_REFILL, EV_L2D_ACCESS, EV_LLC_ACCESS,
    EV_LLC_MISS, EV_RECENTLY_FETCHED, EV_REMOTE_ACCESS, EV_SNOOPED, EV_TLB_ACCESS, EV_TLB_REFILL, ds_table_for_midr,
    midr_name, spe_data_src,
)
from pmuscope.spe import decode_records
from pmuscope.spe.packets import ADDRESS, CONTEXT, COUNTER, DATA_SOURCE, EVENTS, OP_TYPE, TIMESTAMP, encode_packet

N1 = 0x410FD0C0  # Neoverse N1 r0p0
N1_R4P1 = 0x414FD0C1  # variant/revision do not matter
V2 = 0x410FD4F0
AMPERE1A = 0xC00FAC40
HIP12 = 0x480FD060
A53 = 0x410FD030  # no table: events fallback


def ds(source, *, store=False, events=0, midr=N1, has_source=True, cap=None):
    return int(spe_data_src(np.array([1]), np.array([1 if store else 0]), np.array([events], np.uint64),
                            np.array([source], np.uint64), np.array([has_source]), np.array([midr], np.uint64),
                            event_filter_cap=cap)[0])


def test_midr_tables():
    t = ds_table_for_midr(np.array([N1, N1_R4P1, V2, AMPERE1A, HIP12, A53, 0], np.uint64))
    assert list(t) == [COMMON, COMMON, COMMON, AMPEREONE, HISI_HIP, FALLBACK, FALLBACK]
    assert midr_name(N1_R4P1) == "Neoverse-N1" and midr_name(A53).startswith("MIDR 0x")


@pytest.mark.parametrize("source, text, snoop", [
    (0x0, "L1 hit", "N/A"),
    (0x8, "L2 hit", "N/A"),
    # peers set only snoopx; perf then fills the empty mem_snoop with NA (no SNOOPED event/cap)
    (0x9, "L2 hit", "N/A or Peer"),
    (0xA, "L3 hit", "N/A or Peer"),
    (0xB, "L3 hit", "Hit"),
    (0xC, "L3 hit", "N/A or Peer"),
    (0xD, "N/A", "N/A or Peer"),
    (0xE, "RAM hit", "None"),
])
def test_common_encoding_loads(source, text, snoop):
    v = ds(source)
    f = D.decode(v)
    assert f.op == D.OP_LOAD
    if source == 0xD:
        assert f.lvl == D.LVL_NA and f.lvl_num == D.LVLNUM_NA and f.remote == 1 and f.snoopx == D.SNOOPX_PEER
        assert D.lvl_text(v) == "N/A"
    else:
        assert D.lvl_text(v) == text
    # L1/L2 set SNOOP_NONE in the table: the snoop text is "None" there
    want = {0x0: "None", 0x8: "None"}.get(source, snoop)
    assert D.snoop_text(v) == want


def test_common_encoding_store_is_na():
    v = ds(0x0, store=True)
    f = D.decode(v)
    assert f.op == D.OP_STORE and f.lvl == D.LVL_NA and f.lvl_num == D.LVLNUM_NA and f.snoop == D.SNOOP_NA


def test_ampereone_remaps_to_common():
    assert ds(0x0, midr=AMPERE1A) == ds(0x9, midr=N1)
    assert ds(0x3, midr=AMPERE1A) == ds(0xB, midr=N1)
    assert ds(0x5, midr=AMPERE1A) == ds(0xD, midr=N1)
    assert ds(0x7, midr=AMPERE1A) == ds(0xE, midr=N1)
    assert ds(0x8, midr=AMPERE1A) == ds(0x0, midr=N1)
    assert ds(0x9, midr=AMPERE1A) == ds(0x8, midr=N1)
    # an unknown AmpereOne code leaves the level to the events, like perf
    assert D.decode(ds(0x2, midr=AMPERE1A, events=EV_L1D_ACCESS)).lvl == D.LVL_L1 | D.LVL_HIT


def test_hisilicon_hitm_sources():
    v = ds(1, midr=HIP12)
    assert D.snoop_text(v) == "HitM or Peer" and D.lvl_text(v) == "L2 hit"
    v = ds(7, midr=HIP12)
    f = D.decode(v)
    assert f.lvl == D.LVL_REM_CCE2 and f.remote == 1 and f.snoop == D.SNOOP_HITM
    assert D.lvl_text(v) == "Remote Any cache "  # perf: no hit/miss bit in mem_lvl -> empty suffix
    assert D.lvl_text(ds(13, midr=HIP12)) == "I/O hit"
    assert D.lvl_text(ds(18, midr=HIP12)) == "L1 hit"


@pytest.mark.parametrize("events, text", [
    (EV_L1D_ACCESS, "L1 hit"),
    (EV_L1D_ACCESS | EV_L1D_REFILL | EV_RECENTLY_FETCHED, "LFB/MAB hit"),
    (EV_L1D_ACCESS | EV_L1D_REFILL | EV_L2D_ACCESS, "L2 hit"),
    (EV_L1D_ACCESS | EV_L1D_REFILL | EV_LLC_ACCESS, "L3 hit"),
    (EV_L1D_ACCESS | EV_L1D_REFILL | EV_LLC_ACCESS | EV_LLC_MISS, "L3 miss"),
    (EV_L1D_REFILL, "L1 miss"),
    (0, "N/A"),
])
def test_fallback_from_events(events, text):
    assert D.lvl_text(ds(0, midr=A53, events=events, has_source=False)) == text


def test_fallback_stores_snoop_remote_tlb():
    v = ds(0, store=True, midr=A53, events=EV_L1D_ACCESS | EV_L1D_REFILL)
    assert D.lvl_text(v) == "L1 miss"
    v = ds(0, midr=A53, events=EV_SNOOPED | EV_HITM | EV_REMOTE_ACCESS | EV_TLB_ACCESS | EV_TLB_REFILL)
    f = D.decode(v)
    assert f.snoop == D.SNOOP_HITM and f.remote == 1 and f.dtlb == D.TLB_WK | D.TLB_MISS
    assert D.decode(ds(0, midr=A53, events=EV_SNOOPED)).snoop == D.SNOOP_HIT
    assert D.decode(ds(0, midr=A53, events=EV_TLB_ACCESS)).dtlb == D.TLB_WK | D.TLB_HIT
    # SNOOPED not seen: NONE only when the CPU can report it (caps/event_filter bit 23)
    assert D.decode(ds(0, midr=A53)).snoop == D.SNOOP_NA
    assert D.decode(ds(0, midr=A53, cap=1 << 23)).snoop == D.SNOOP_NONE


def test_non_memory_records_get_zero():
    out = spe_data_src(np.array([0, 2, -1]), np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(3, np.uint64),
                       np.ones(3, bool), np.full(3, N1, np.uint64))
    assert not out.any()


def _record(pc, va, *, store=False, source=0x0, lat=20, ts=1, ctx=None, pa=None, events=0x16):
    b = encode_packet(ADDRESS, 0, pc | (1 << 63) * 0)
    if ctx is not None:
        b += encode_packet(CONTEXT, 0, ctx)
    b += encode_packet(OP_TYPE, 1, 1 if store else 0)
    b += encode_packet(EVENTS, 0, events)
    b += encode_packet(COUNTER, 1, lat // 2) + encode_packet(COUNTER, 0, lat)
    b += encode_packet(ADDRESS, 2, va)
    if pa is not None:
        b += encode_packet(ADDRESS, 3, pa)
    b += encode_packet(DATA_SOURCE, 0, source, payload_len=2)
    return b + encode_packet(TIMESTAMP, 0, ts)


def test_spe_buffer_to_mem_samples():
    buf = (_record(0x400100, 0xFFFF000010, source=0x9, lat=40, ts=10, ctx=77, pa=0x8000_0010)
           + _record(0x400200, 0xFFFF000018, store=True, source=0x0, lat=5, ts=11, ctx=77)
           + encode_packet(ADDRESS, 0, 0x400300) + encode_packet(OP_TYPE, 2, 0) + encode_packet(TIMESTAMP, 0, 12))
    recs = decode_records(buf, cpu=3, midr=N1)
    assert len(recs) == 3
    ms = from_spe_records(recs)
    assert len(ms) == 2  # the branch is not a memory sample
    assert ms.ip.tolist() == [0x400100, 0x400200]
    assert ms.addr.tolist() == [0xFFFF000010, 0xFFFF000018]
    assert ms.phys_addr.tolist() == [0x8000_0010, 0]
    assert ms.pid.tolist() == [77, 77] and ms.cpu.tolist() == [3, 3]
    assert ms.weight.tolist() == [40, 5] and ms.ins_lat.tolist() == [20, 2]
    assert ms.time.tolist() == [10, 11]
    assert ms.is_load.tolist() == [True, False] and ms.is_store.tolist() == [False, True]
    assert D.data_src_text(int(ms.data_src[0])) == "|OP LOAD|LVL L2 hit|SNP N/A or Peer|TLB Walker hit|LCK No|BLK  N/A"
    assert D.data_src_text(int(ms.data_src[1])) == "|OP STORE|LVL N/A|SNP N/A|TLB Walker hit|LCK No|BLK  N/A"


def test_real_sample_packets_load(data_dir):
    """The load record of the perf_data_converter SampleSPEPackets buffer (events 0x16:
    RETIRED, L1D-ACCESS, TLB-ACCESS; data source 0) on a Neoverse N1 is an L1 hit."""
    with open(data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin", "rb") as f:
        recs = decode_records(f.read(), midr=N1)
    ms = from_spe_records(recs)
    assert len(ms) == 1
    assert D.data_src_text(int(ms.data_src[0])) == "|OP LOAD|LVL L1 hit|SNP None|TLB Walker hit|LCK No|BLK  N/A"


def test_random_records_invariants():
    """Any record mix: non-memory records get 0; every load/store gets its op,
    a memory level (N/A at least) and a snoop value, as perf always fills them."""
    rng = np.random.default_rng(4)
    n = 20000
    op_class = rng.integers(-1, 4, n).astype(np.int8)
    payload = rng.integers(0, 256, n).astype(np.uint64)
    events = rng.integers(0, 1 << 26, n).astype(np.uint64)
    source = rng.integers(0, 20, n).astype(np.uint64)
    midr = rng.choice(np.array([N1, V2, AMPERE1A, HIP12, A53], np.uint64), n)
    out = spe_data_src(op_class, payload, events, source, rng.random(n) < 0.8, midr)
    mem = op_class == 1
    assert not out[~mem].any()
    f = D.decode(out[mem])
    store = (payload[mem] & 1) == 1
    assert (f.op[store] == D.OP_STORE).all() and (f.op[~store] == D.OP_LOAD).all()
    assert (f.lvl != 0).all() and (f.snoop != 0).all() and (f.lvl_num != 0).all()
