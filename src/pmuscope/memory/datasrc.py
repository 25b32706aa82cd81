"""``union perf_mem_data_src`` (include/uapi/linux/perf_event.h), vectorized.

A data source is a u64 bit field laid out as::

    mem_op 0-4 | mem_lvl 5-18 | mem_snoop 19-23 | mem_lock 24-25 | mem_dtlb 26-32 |
    mem_lvl_num 33-36 | mem_remote 37 | mem_snoopx 38-39 | mem_blk 40-42 |
    mem_hops 43-45 | mem_region 46-50

:func:`decode` splits numpy arrays of values into one array per field,
:func:`encode` builds values back, and :func:`data_src_text` /
:func:`lvl_text` ... print them the way perf does (``tools/perf/util/mem-events.c``:
``perf script -F data_src``'s ``|OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2
hit|LCK No|BLK  N/A``). ``style="6.1"`` reproduces the memory-level text of
perf up to 6.2 (``L1 or L1 hit``: the mem_lvl bits and then the level number),
the default style that of current perf (``L1 hit``, ``Remote Cache (1 hop) hit``,
``Remote core, same node Any cache hit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "FIELDS", "DataSrcFields", "decode", "encode", "field",
    "op_text", "lvl_text", "snoop_text", "tlb_text", "lock_text", "blk_text", "data_src_text",
    "texts", "is_load", "is_store", "is_hitm", "is_peer",
]

#: field name -> (shift, width)
FIELDS: dict[str, tuple[int, int]] = {
    "op": (0, 5),
    "lvl": (5, 14),
    "snoop": (19, 5),
    "lock": (24, 2),
    "dtlb": (26, 7),
    "lvl_num": (33, 4),
    "remote": (37, 1),
    "snoopx": (38, 2),
    "blk": (40, 3),
    "hops": (43, 3),
    "region": (46, 5),
}

# PERF_MEM_OP_*
OP_NA, OP_LOAD, OP_STORE, OP_PFETCH, OP_EXEC = 0x1, 0x2, 0x4, 0x8, 0x10
# PERF_MEM_LVL_*
LVL_NA, LVL_HIT, LVL_MISS, LVL_L1, LVL_LFB, LVL_L2, LVL_L3 = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40
LVL_LOC_RAM, LVL_REM_RAM1, LVL_REM_RAM2, LVL_REM_CCE1, LVL_REM_CCE2 = 0x80, 0x100, 0x200, 0x400, 0x800
LVL_IO, LVL_UNC = 0x1000, 0x2000
# PERF_MEM_LVLNUM_*
LVLNUM_L1, LVLNUM_L2, LVLNUM_L3, LVLNUM_L4, LVLNUM_L2_MHB, LVLNUM_MSC, LVLNUM_L0 = 1, 2, 3, 4, 5, 6, 7
LVLNUM_UNC, LVLNUM_CXL, LVLNUM_IO, LVLNUM_ANY_CACHE, LVLNUM_LFB, LVLNUM_RAM, LVLNUM_PMEM, LVLNUM_NA = (
    8, 9, 0xA, 0xB, 0xC, 0xD, 0xE, 0xF)
# PERF_MEM_SNOOP_* / SNOOPX_*
SNOOP_NA, SNOOP_NONE, SNOOP_HIT, SNOOP_MISS, SNOOP_HITM = 0x1, 0x2, 0x4, 0x8, 0x10
SNOOPX_FWD, SNOOPX_PEER = 0x1, 0x2
# PERF_MEM_LOCK_*
LOCK_NA, LOCK_LOCKED = 0x1, 0x2
# PERF_MEM_TLB_*
TLB_NA, TLB_HIT, TLB_MISS, TLB_L1, TLB_L2, TLB_WK, TLB_OS = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40
# PERF_MEM_REMOTE_REMOTE, PERF_MEM_BLK_*, PERF_MEM_HOPS_*
REMOTE_REMOTE = 0x1
BLK_NA, BLK_DATA, BLK_ADDR = 0x1, 0x2, 0x4
HOPS_0, HOPS_1, HOPS_2, HOPS_3 = 1, 2, 3, 4

_TLB_NAMES = ("N/A", "HIT", "MISS", "L1", "L2", "Walker", "Fault")
_LVL_NAMES = ("N/A", "HIT", "MISS", "L1", "LFB/MAB", "L2", "L3", "Local RAM", "Remote RAM (1 hop)",
              "Remote RAM (2 hops)", "Remote Cache (1 hop)", "Remote Cache (2 hops)", "I/O", "Uncached")
_LVLNUM_NAMES = {1: "L1", 2: "L2", 3: "L3", 4: "L4", 5: "L2 MHB", 6: "Memory-side Cache", 8: "Uncached",
                 9: "CXL", 0xA: "I/O", 0xB: "Any cache", 0xC: "LFB/MAB", 0xD: "RAM", 0xE: "PMEM", 0xF: "N/A"}
# perf <= 6.2 had no names for L1..L4 and printed "L%d"
_LVLNUM_NAMES_61 = {9: "CXL", 0xA: "I/O", 0xB: "Any cache", 0xC: "LFB/MAB", 0xD: "RAM",
                    0xE: "PMEM", 0xF: "N/A"}
_HOPS_NAMES = ("N/A", "core, same node", "node, same socket", "socket, same board", "board")
_SNOOP_NAMES = ("N/A", "None", "Hit", "Miss", "HitM")
_SNOOPX_NAMES = ("Fwd", "Peer")


@dataclass
class DataSrcFields:
    """One numpy array per ``perf_mem_data_src`` field (see :data:`FIELDS`)."""

    op: np.ndarray
    lvl: np.ndarray
    snoop: np.ndarray
    lock: np.ndarray
    dtlb: np.ndarray
    lvl_num: np.ndarray
    remote: np.ndarray
    snoopx: np.ndarray
    blk: np.ndarray
    hops: np.ndarray
    region: np.ndarray

    def to_dict(self, prefix: str = "mem_") -> dict[str, np.ndarray]:
        return {prefix + k: getattr(self, k) for k in FIELDS}


def field(values, name: str) -> np.ndarray:
    """One field of an array of data_src values (uint16 array)."""
    shift, width = FIELDS[name]
    v = np.asarray(values, dtype=np.uint64)
    return ((v >> np.uint64(shift)) & np.uint64((1 << width) - 1)).astype(np.uint16)


def decode(values) -> DataSrcFields:
    """Split ``perf_mem_data_src`` values (any integer array or scalar) into fields."""
    return DataSrcFields(**{name: field(values, name) for name in FIELDS})


def encode(**fields) -> np.ndarray | int:
    """Build data_src values from fields (arrays broadcast; all scalars give an int).

    >>> hex(encode(op=OP_LOAD, lvl=LVL_L1 | LVL_HIT, snoop=SNOOP_NONE, dtlb=TLB_HIT | TLB_L1 | TLB_L2,
    ...            lvl_num=LVLNUM_L1, blk=BLK_NA, lock=0))
    '0x10268100142'
    """
    scalar = all(np.ndim(v) == 0 for v in fields.values())
    out = np.uint64(0)
    for name, val in fields.items():
        if name not in FIELDS:
            raise ValueError(f"unknown perf_mem_data_src field {name!r}; fields are {', '.join(FIELDS)}")
        shift, width = FIELDS[name]
        out = out | ((np.asarray(val, dtype=np.uint64) & np.uint64((1 << width) - 1)) << np.uint64(shift))
    return int(out) if scalar else np.asarray(out, dtype=np.uint64)


# ------------------------------------------------------------------ per-value text (perf's wording)

def _f(v: int, name: str) -> int:
    shift, width = FIELDS[name]
    return (v >> shift) & ((1 << width) - 1)


def op_text(v: int) -> str:
    """``perf_mem__op_scnprintf``."""
    op = _f(v, "op")
    for bit, text in ((OP_NA, "N/A"), (OP_LOAD, "LOAD"), (OP_STORE, "STORE"), (OP_PFETCH, "PFETCH"), (OP_EXEC, "EXEC")):
        if op & bit:
            return text
    return "No"


def _bits_or(m: int, names) -> list[str]:
    return [names[i] for i in range(len(names)) if m >> i & 1]


def lvl_text(v: int, style: str = "new") -> str:
    """``perf_mem__lvl_scnprintf`` (the "Memory access" column of ``perf mem report``)."""
    lvl, num, remote, hops = _f(v, "lvl"), _f(v, "lvl_num"), _f(v, "remote"), _f(v, "hops")
    if style == "6.1":
        out = "Remote " if remote else ""
        parts: list[str] = []
        if hops:
            out += (_HOPS_NAMES[hops] if hops < len(_HOPS_NAMES) else "") + " "
        else:
            parts = _bits_or(lvl & ~(LVL_HIT | LVL_MISS), _LVL_NAMES)
        if num:
            parts.append(_LVLNUM_NAMES_61.get(num, f"L{num}"))
        out += " or ".join(parts)
        if not out:
            out = "N/A"
        if lvl & LVL_HIT:
            out += " hit"
        if lvl & LVL_MISS:
            out += " miss"
        return out
    hm = "hit" if lvl & LVL_HIT else "miss" if lvl & LVL_MISS else ""
    if num and num != LVLNUM_NA:
        out = "Remote " if remote else ""
        if hops:
            out += (_HOPS_NAMES[hops] if hops < len(_HOPS_NAMES) else "(null)") + " "
        out += _LVLNUM_NAMES.get(num, f"Unknown level {num}")
        return f"{out} {hm}"
    m = lvl & ~(LVL_NA | LVL_HIT | LVL_MISS)
    if not m:
        return "N/A"
    return " or ".join(_bits_or(m, _LVL_NAMES)) + f" {hm}"


def snoop_text(v: int) -> str:
    """``perf_mem__snp_scnprintf`` (snoop, then the snoopx Fwd/Peer bits)."""
    parts = _bits_or(_f(v, "snoop"), _SNOOP_NAMES) + _bits_or(_f(v, "snoopx"), _SNOOPX_NAMES)
    return " or ".join(parts) if parts else "N/A"


def tlb_text(v: int) -> str:
    """``perf_mem__tlb_scnprintf``."""
    m = _f(v, "dtlb")
    out = " or ".join(_bits_or(m & ~(TLB_HIT | TLB_MISS), _TLB_NAMES)) or "N/A"
    if m & TLB_HIT:
        out += " hit"
    if m & TLB_MISS:
        out += " miss"
    return out


def lock_text(v: int) -> str:
    """``perf_mem__lck_scnprintf``."""
    m = _f(v, "lock")
    return "N/A" if m & LOCK_NA else "Yes" if m & LOCK_LOCKED else "No"


def blk_text(v: int) -> str:
    """``perf_mem__blk_scnprintf`` (note perf's leading space: ``" N/A"``)."""
    m = _f(v, "blk")
    if not m or m & BLK_NA:
        return " N/A"
    return (" Data" if m & BLK_DATA else "") + (" Addr" if m & BLK_ADDR else "")


#: perf script formats ``"%16lx " + text`` into one 100-byte buffer, so at
#: most 99 - 17 = 82 characters of the text survive (checked against perf 6.1)
PERF_SCRIPT_TEXT_MAX = 82


def data_src_text(v: int, style: str = "new", *, truncate: bool = True) -> str:
    """``perf_script__meminfo_scnprintf``: ``|OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK No|BLK  N/A``.

    With ``truncate`` the text is cut to 82 characters as ``perf script``'s
    100-byte buffer (hex value included) cuts it: long remote-level texts lose
    the end of ``BLK``."""
    v = int(v)
    text = (f"|OP {op_text(v)}|LVL {lvl_text(v, style)}|SNP {snoop_text(v)}|TLB {tlb_text(v)}"
            f"|LCK {lock_text(v)}|BLK {blk_text(v)}")
    return text[:PERF_SCRIPT_TEXT_MAX] if truncate else text


def texts(values, fn=data_src_text, **kw) -> np.ndarray:
    """Apply a text function to an array of values, once per distinct value
    (object array of str, same shape)."""
    v = np.asarray(values, dtype=np.uint64).reshape(-1)
    if not len(v):
        return np.zeros(0, dtype=object)
    uniq, inv = np.unique(v, return_inverse=True)
    table = np.array([fn(int(u), **kw) for u in uniq], dtype=object)
    return table[inv]


# ------------------------------------------------------------------ classification (vectorized)

def is_load(values) -> np.ndarray:
    return (field(values, "op") & OP_LOAD) != 0


def is_store(values) -> np.ndarray:
    return ((field(values, "op") & OP_STORE) != 0) & ~is_load(values)


def is_hitm(values) -> np.ndarray:
    """Load hit a line modified in another core's cache (snoop HITM)."""
    return is_load(values) & ((field(values, "snoop") & SNOOP_HITM) != 0)


def is_peer(values) -> np.ndarray:
    """Load served by a peer core/cluster's cache (snoopx PEER, Arm SPE's signal)."""
    return is_load(values) & ((field(values, "snoopx") & SNOOPX_PEER) != 0)
