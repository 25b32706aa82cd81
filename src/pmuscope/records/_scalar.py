"""Decoding one PERF_RECORD_SAMPLE with a plain ``struct`` loop (no numpy).

The reference the vectorized decoder of :mod:`pmuscope.records.sample` is
tested against, its fallback for samples whose payloads are not 8-byte padded,
and the decoder of the numpy-free report of small files
(:mod:`pmuscope.profile.lite`).
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

from .. import errors
from ..kernel import abi
from .attrs import AttrEntry
from .types import parse_read_format

S = SimpleNamespace(**{m.name: int(m) for m in abi.PerfSample})  # plain ints: IntFlag ops are slow

_U64 = struct.Struct("<Q")
_U32x2 = struct.Struct("<II")


def _overrun(offset: int, what: str, sample_type: int) -> errors.FormatError:
    return errors.FormatError(
        f"malformed PERF_RECORD_SAMPLE at byte offset {offset}: {what} runs past the end of the record "
        f"(sample_type {sample_type:#x})",
        offset=offset,
    )


def parse_sample(buf, off: int, size: int, entry: AttrEntry, base_offset: int = 0) -> dict[str, Any]:
    """Decode one SAMPLE record at ``buf[off:off+size]`` with a ``struct`` loop.

    Returns a dict with the same names as :class:`SampleBatch` columns (flat
    fields as lists/bytes; ``read`` as :class:`~pmuscope.records.ReadValues`).
    This is the reference the vectorized decoder is tested against, and the
    fallback for samples whose payloads are not 8-byte padded.
    """
    st = entry.sample_type
    end = off + size
    pos = off + 8
    offset = base_offset + off
    out: dict[str, Any] = {"offset": offset, "misc": struct.unpack_from("<H", buf, off + 4)[0], "attr_index": entry.index}

    def u64(what: str) -> int:
        nonlocal pos
        if pos + 8 > end:
            raise _overrun(offset, what, st)
        (v,) = _U64.unpack_from(buf, pos)
        pos += 8
        return v

    def u32x2(what: str) -> tuple[int, int]:
        nonlocal pos
        if pos + 8 > end:
            raise _overrun(offset, what, st)
        v = _U32x2.unpack_from(buf, pos)
        pos += 8
        return v

    def words(n: int, what: str) -> list[int]:
        nonlocal pos
        if n < 0 or pos + 8 * n > end:
            raise _overrun(offset, f"{what} (nr={n})", st)
        v = list(struct.unpack_from(f"<{n}Q", buf, pos))
        pos += 8 * n
        return v

    def blob(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > end:
            raise _overrun(offset, f"{what} (size={n})", st)
        v = bytes(buf[pos : pos + n])
        pos += n
        return v

    if st & S.IDENTIFIER:
        out["id"] = u64("IDENTIFIER")
    if st & S.IP:
        out["ip"] = u64("IP")
    if st & S.TID:
        pid, tid = u32x2("TID")
        out["pid"], out["tid"] = _s32(pid), _s32(tid)
    if st & S.TIME:
        out["time"] = u64("TIME")
    if st & S.ADDR:
        out["addr"] = u64("ADDR")
    if st & S.ID:
        out["id"] = u64("ID")
    if st & S.STREAM_ID:
        out["stream_id"] = u64("STREAM_ID")
    if st & S.CPU:
        out["cpu"] = _s32(u32x2("CPU")[0])
    if st & S.PERIOD:
        out["period"] = u64("PERIOD")
    if st & S.READ:
        out["read"], pos = parse_read_format(buf, pos, end, entry.read_format, offset)
    if st & S.CALLCHAIN:
        nr = u64("CALLCHAIN nr")
        out["callchain"] = words(nr, "CALLCHAIN")
    if st & S.RAW:
        if pos + 4 > end:
            raise _overrun(offset, "RAW size", st)
        (rsz,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        out["raw"] = blob(rsz, "RAW")
    if st & S.BRANCH_STACK:
        nr = u64("BRANCH_STACK nr")
        if entry.has_hw_index:
            out["branch_hw_idx"] = u64("BRANCH_STACK hw_idx")
        ents = words(3 * nr, "BRANCH_STACK entries")
        out["branch_from"], out["branch_to"], out["branch_flags"] = ents[0::3], ents[1::3], ents[2::3]
        if entry.has_branch_counters:
            out["branch_counters"] = words(nr, "BRANCH_STACK counters")
    if st & S.REGS_USER:
        abi_ = u64("REGS_USER abi")
        out["regs_user_abi"] = abi_
        out["regs_user"] = words(entry.regs_user_count if abi_ else 0, "REGS_USER")
    if st & S.STACK_USER:
        sz = u64("STACK_USER size")
        out["stack_user"] = blob(sz, "STACK_USER")
        out["stack_user_dyn_size"] = u64("STACK_USER dyn_size") if sz else 0
    if st & (S.WEIGHT | S.WEIGHT_STRUCT):
        out["weight"] = u64("WEIGHT")
    if st & S.DATA_SRC:
        out["data_src"] = u64("DATA_SRC")
    if st & S.TRANSACTION:
        out["transaction"] = u64("TRANSACTION")
    if st & S.REGS_INTR:
        abi_ = u64("REGS_INTR abi")
        out["regs_intr_abi"] = abi_
        out["regs_intr"] = words(entry.regs_intr_count if abi_ else 0, "REGS_INTR")
    if st & S.PHYS_ADDR:
        out["phys_addr"] = u64("PHYS_ADDR")
    if st & S.CGROUP:
        out["cgroup"] = u64("CGROUP")
    if st & S.DATA_PAGE_SIZE:
        out["data_page_size"] = u64("DATA_PAGE_SIZE")
    if st & S.CODE_PAGE_SIZE:
        out["code_page_size"] = u64("CODE_PAGE_SIZE")
    if st & S.AUX:
        sz = u64("AUX size")
        out["aux"] = blob(sz, "AUX")
    return out


def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v
