"""Arm SPE records → ``perf_mem_data_src``, as perf's ``arm-spe.c`` synthesizes it.

The SPE DATA-SOURCE packet is IMPLEMENTATION DEFINED, so the value is read
with the table of the CPU that wrote it (its MIDR_EL1, from AUXTRACE_INFO):

* the common encoding (``arm_spe__synth_data_source_common``): Neoverse
  N1/N2/V1/V2, Cortex-A720/A720AE/A725/X1C/X3/X925;
* AmpereOne (``arm_spe__synth_data_source_ampereone``): remapped onto the
  common codes;
* HiSilicon HIP12 (``arm_spe__synth_data_source_hisi_hip``), which also
  reports HITM;
* any other CPU: the memory level comes from the events packet alone
  (``arm_spe__synth_memory_level``: L1D/LFB/L2D/LLC access and miss events).

Then, as current perf does, an unset level becomes N/A, an unset snoop comes
from the SNOOPED/HITM events (else N/A unless the CPU's ``event_filter`` cap
says SNOOPED is implemented: then NONE), the REMOTE-ACCESS event sets
``mem_remote``, and TLB-ACCESS/TLB-REFILL give ``TLB_WK | HIT/MISS``.
Everything is vectorized over the record arrays.
"""

from __future__ import annotations

import numpy as np

from . import datasrc as D

__all__ = ["spe_data_src", "ds_table_for_midr", "COMMON", "AMPEREONE", "HISI_HIP", "FALLBACK", "midr_name"]

COMMON, AMPEREONE, HISI_HIP, FALLBACK = "common", "ampereone", "hisi_hip", "fallback"

# MIDR_ALL_VERSIONS: implementer [31:24], architecture [19:16], part [15:4]
_MIDR_MODEL_MASK = 0xFF0FFFF0


def _model(implementer: int, part: int) -> int:
    return (implementer << 24) | (0xF << 16) | (part << 4)


_ARM, _AMPERE, _HISI = 0x41, 0xC0, 0x48
#: model -> (name, table)
MIDR_MODELS: dict[int, tuple[str, str]] = {
    _model(_ARM, 0xD81): ("Cortex-A720", COMMON),
    _model(_ARM, 0xD89): ("Cortex-A720AE", COMMON),
    _model(_ARM, 0xD87): ("Cortex-A725", COMMON),
    _model(_ARM, 0xD4C): ("Cortex-X1C", COMMON),
    _model(_ARM, 0xD4E): ("Cortex-X3", COMMON),
    _model(_ARM, 0xD85): ("Cortex-X925", COMMON),
    _model(_ARM, 0xD0C): ("Neoverse-N1", COMMON),
    _model(_ARM, 0xD49): ("Neoverse-N2", COMMON),
    _model(_ARM, 0xD40): ("Neoverse-V1", COMMON),
    _model(_ARM, 0xD4F): ("Neoverse-V2", COMMON),
    _model(_AMPERE, 0xAC4): ("AmpereOne AC04", AMPEREONE),
    _model(_HISI, 0xD06): ("HiSilicon HIP12", HISI_HIP),
}

# SPE events packet bits used here (arm-spe-decoder: EV_*)
EV_L1D_ACCESS, EV_L1D_REFILL, EV_TLB_ACCESS, EV_TLB_REFILL = 1 << 2, 1 << 3, 1 << 4, 1 << 5
EV_LLC_ACCESS, EV_LLC_MISS, EV_REMOTE_ACCESS = 1 << 8, 1 << 9, 1 << 10
EV_L2D_ACCESS, EV_L2D_MISS, EV_HITM, EV_RECENTLY_FETCHED, EV_SNOOPED = 1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 23


def midr_name(midr: int) -> str:
    """A CPU name for a MIDR_EL1 value, or its hex value."""
    hit = MIDR_MODELS.get(int(midr) & _MIDR_MODEL_MASK)
    return hit[0] if hit else f"MIDR {int(midr):#x}"


def ds_table_for_midr(midr) -> np.ndarray:
    """Which data-source table applies to each MIDR (object array of COMMON/AMPEREONE/HISI_HIP/FALLBACK)."""
    m = np.asarray(midr, dtype=np.uint64).reshape(-1) & np.uint64(_MIDR_MODEL_MASK)
    out = np.full(len(m), FALLBACK, dtype=object)
    for model, (_name, table) in MIDR_MODELS.items():
        out[m == np.uint64(model)] = table
    return out


def _lvl(lvl=0, num=0, snoop=0, remote=0, snoopx=0) -> int:
    return D.encode(lvl=lvl, lvl_num=num, snoop=snoop, remote=remote, snoopx=snoopx)


H = D.LVL_HIT
#: common encoding, loads: source -> data_src bits (lvl, lvl_num, snoop, remote, snoopx)
COMMON_LOAD = {
    0x0: _lvl(D.LVL_L1 | H, D.LVLNUM_L1, D.SNOOP_NONE),                      # L1D
    0x8: _lvl(D.LVL_L2 | H, D.LVLNUM_L2, D.SNOOP_NONE),                      # L2
    0x9: _lvl(D.LVL_L2 | H, D.LVLNUM_L2, snoopx=D.SNOOPX_PEER),              # PEER_CORE
    0xA: _lvl(D.LVL_L3 | H, D.LVLNUM_L3, snoopx=D.SNOOPX_PEER),              # LOCAL_CLUSTER
    0xB: _lvl(D.LVL_L3 | H, D.LVLNUM_L3, D.SNOOP_HIT),                       # SYS_CACHE
    0xC: _lvl(D.LVL_L3 | H, D.LVLNUM_L3, snoopx=D.SNOOPX_PEER),              # PEER_CLUSTER
    0xD: _lvl(D.LVL_NA, D.LVLNUM_NA, remote=1, snoopx=D.SNOOPX_PEER),        # REMOTE
    0xE: _lvl(D.LVL_LOC_RAM | H, D.LVLNUM_RAM, D.SNOOP_NONE),                # DRAM
}
_COMMON_STORE = _lvl(D.LVL_NA, D.LVLNUM_NA, D.SNOOP_NA)
#: AmpereOne source -> common source
AMPEREONE_TO_COMMON = {0x0: 0x9, 0x3: 0xB, 0x5: 0xD, 0x7: 0xE, 0x8: 0x0, 0x9: 0x8}
#: HiSilicon HIP, loads
HISI_LOAD = {
    0: _lvl(D.LVL_L2 | H, D.LVLNUM_L2, snoopx=D.SNOOPX_PEER),                              # PEER_CPU
    1: _lvl(D.LVL_L2 | H, D.LVLNUM_L2, D.SNOOP_HITM, snoopx=D.SNOOPX_PEER),                # PEER_CPU_HITM
    2: _lvl(D.LVL_L3 | H, D.LVLNUM_L3, D.SNOOP_HIT),                                       # L3
    3: _lvl(D.LVL_L3 | H, D.LVLNUM_L3, D.SNOOP_HITM),                                      # L3_HITM
    4: _lvl(D.LVL_REM_CCE1 | H, D.LVLNUM_L3, snoopx=D.SNOOPX_PEER),                        # PEER_CLUSTER
    5: _lvl(D.LVL_REM_CCE1 | H, D.LVLNUM_L3, D.SNOOP_HITM, snoopx=D.SNOOPX_PEER),          # PEER_CLUSTER_HITM
    6: _lvl(D.LVL_REM_CCE2, D.LVLNUM_ANY_CACHE, remote=1, snoopx=D.SNOOPX_PEER),           # REMOTE_SOCKET
    7: _lvl(D.LVL_REM_CCE2, D.LVLNUM_ANY_CACHE, D.SNOOP_HITM, remote=1, snoopx=D.SNOOPX_PEER),  # ..._HITM
    8: _lvl(D.LVL_LOC_RAM | H, D.LVLNUM_RAM, D.SNOOP_NONE),                                # LOCAL_MEM
    9: _lvl(D.LVL_REM_RAM1 | H, D.LVLNUM_RAM, remote=1),                                   # REMOTE_MEM
    13: _lvl(D.LVL_IO | H, D.LVLNUM_IO, D.SNOOP_NONE),                                     # NC_DEV
    16: _lvl(D.LVL_L2 | H, D.LVLNUM_L2, D.SNOOP_NONE),                                     # L2
    17: _lvl(D.LVL_L2 | H, D.LVLNUM_L2, D.SNOOP_HITM),                                     # L2_HITM
    18: _lvl(D.LVL_L1 | H, D.LVLNUM_L1, D.SNOOP_NONE),                                     # L1
}


def _lookup(table: dict[int, int], src: np.ndarray, sel: np.ndarray, out: np.ndarray) -> None:
    for code, bits in table.items():
        out[sel & (src == np.uint64(code))] |= np.uint64(bits)


def spe_data_src(op_class, op_payload, events, source, has_source, midr, *,
                 event_filter_cap=None) -> np.ndarray:
    """``perf_mem_data_src`` values (uint64) for SPE records.

    Arguments are per-record arrays as :class:`pmuscope.spe.SpeRecords` holds
    them (``op_class``, ``op_payload``, ``events``, ``data_source`` and its
    ``has_data_source`` mask, ``midr``). Records that are not loads/stores get
    0, as in perf. ``event_filter_cap`` (per record or scalar: the CPU's
    ``caps/event_filter`` mask) decides whether "no SNOOPED event" means
    SNOOP_NONE or SNOOP_NA.
    """
    op_class = np.asarray(op_class)
    n = len(op_class)
    op_payload = np.asarray(op_payload, dtype=np.uint64)
    ev = np.asarray(events, dtype=np.uint64)
    src = np.asarray(source, dtype=np.uint64)
    has_src = np.asarray(has_source, dtype=bool)
    mem = op_class == 1
    store = mem & ((op_payload & np.uint64(1)) == 1)
    load = mem & ~store
    out = np.zeros(n, dtype=np.uint64)
    out[load] = np.uint64(D.encode(op=D.OP_LOAD))
    out[store] = np.uint64(D.encode(op=D.OP_STORE))

    tables = ds_table_for_midr(np.broadcast_to(np.asarray(midr, dtype=np.uint64), (n,)))
    with_src = mem & has_src
    common = with_src & (tables == COMMON)
    amp = with_src & (tables == AMPEREONE)
    hisi = with_src & (tables == HISI_HIP)
    # stores on common/AmpereOne/HiSilicon: LVL_NA, LVLNUM_NA, SNOOP_NA
    out[(common | hisi) & store] |= np.uint64(_COMMON_STORE)
    _lookup(COMMON_LOAD, src, common & load, out)
    _lookup(HISI_LOAD, src, hisi & load, out)
    if amp.any():
        csrc = np.full(n, np.uint64(0xFF), dtype=np.uint64)
        for a, c in AMPEREONE_TO_COMMON.items():
            csrc[amp & (src == np.uint64(a))] = np.uint64(c)
        known = amp & (csrc != np.uint64(0xFF))
        out[known & store] |= np.uint64(_COMMON_STORE)
        _lookup(COMMON_LOAD, csrc, known & load, out)

    # arm_spe__synth_memory_level
    lvl = D.field(out, "lvl")
    nolvl = mem & (lvl == 0)

    def has(bit):
        return (ev & np.uint64(bit)) != 0

    def hit(access, miss):
        return has(access) & ~has(miss)

    def set_lvl(sel, lvl_bits, num):
        out[sel] |= np.uint64(D.encode(lvl=lvl_bits, lvl_num=num))

    pending = nolvl & load
    for sel, bits, num in (
        (hit(EV_L1D_ACCESS, EV_L1D_REFILL), D.LVL_L1 | H, D.LVLNUM_L1),
        (has(EV_RECENTLY_FETCHED), D.LVL_LFB | H, D.LVLNUM_LFB),
        (hit(EV_L2D_ACCESS, EV_L2D_MISS), D.LVL_L2 | H, D.LVLNUM_L2),
        (hit(EV_LLC_ACCESS, EV_LLC_MISS), D.LVL_L3 | H, D.LVLNUM_L3),
        (has(EV_LLC_MISS), D.LVL_L3 | D.LVL_MISS, D.LVLNUM_L3),
        (has(EV_L2D_MISS), D.LVL_L2 | D.LVL_MISS, D.LVLNUM_L2),
        (has(EV_L1D_REFILL), D.LVL_L1 | D.LVL_MISS, D.LVLNUM_L1),
    ):
        take = pending & sel
        set_lvl(take, bits, num)
        pending &= ~take
    pending = nolvl & store
    for access, miss, lvl_bit, num in (
        (EV_LLC_ACCESS, EV_LLC_MISS, D.LVL_L3, D.LVLNUM_L3),
        (EV_L2D_ACCESS, EV_L2D_MISS, D.LVL_L2, D.LVLNUM_L2),
        (EV_L1D_ACCESS, EV_L1D_REFILL, D.LVL_L1, D.LVLNUM_L1),
    ):
        take = pending & (has(access) | has(miss))
        set_lvl(take & has(miss), lvl_bit | D.LVL_MISS, num)
        set_lvl(take & ~has(miss), lvl_bit | H, num)
        pending &= ~take
    still = mem & (D.field(out, "lvl") == 0)
    set_lvl(still, D.LVL_NA, D.LVLNUM_NA)

    nosnoop = mem & (D.field(out, "snoop") == 0)
    snooped = has(EV_SNOOPED)
    out[nosnoop & snooped & has(EV_HITM)] |= np.uint64(D.encode(snoop=D.SNOOP_HITM))
    out[nosnoop & snooped & ~has(EV_HITM)] |= np.uint64(D.encode(snoop=D.SNOOP_HIT))
    if event_filter_cap is None:
        cap_snooped = np.zeros(n, dtype=bool)
    else:
        cap_snooped = (np.broadcast_to(np.asarray(event_filter_cap, dtype=np.uint64), (n,)) & np.uint64(EV_SNOOPED)) != 0
    out[nosnoop & ~snooped & cap_snooped] |= np.uint64(D.encode(snoop=D.SNOOP_NONE))
    out[nosnoop & ~snooped & ~cap_snooped] |= np.uint64(D.encode(snoop=D.SNOOP_NA))

    out[mem & (D.field(out, "remote") == 0) & has(EV_REMOTE_ACCESS)] |= np.uint64(D.encode(remote=1))
    tlb = mem & (has(EV_TLB_ACCESS) | has(EV_TLB_REFILL))
    out[tlb & has(EV_TLB_REFILL)] |= np.uint64(D.encode(dtlb=D.TLB_WK | D.TLB_MISS))
    out[tlb & ~has(EV_TLB_REFILL)] |= np.uint64(D.encode(dtlb=D.TLB_WK | D.TLB_HIT))
    return out


def records_data_src(recs, *, event_filter_cap=None) -> np.ndarray:
    """:func:`spe_data_src` for a whole :class:`pmuscope.spe.SpeRecords`."""
    return spe_data_src(recs.op_class, recs.columns["op_payload"], recs.columns["events"],
                        recs.columns["data_source"], recs.present["data_source"], recs.midr,
                        event_filter_cap=event_filter_cap)
