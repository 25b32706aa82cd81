"""SPE records as columnar tables.

A record (one sampled operation) is the run of packets ending with a
TIMESTAMP packet, or with an END packet when timestamps are off
(``arm_spe_read_record``). When a bad byte interrupts a record, perf drops the
partial record and starts a new one after the byte; so does this module, and
it reports every bad byte and dropped record with its offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..errors import FormatError, require
from .decode import BAD_TRUNCATED, PacketArrays, _as_u8, iter_packet_chunks
from .packets import (
    ADDRESS,
    BAD,
    CONTEXT,
    COUNTER,
    DATA_SOURCE,
    END,
    EVENTS,
    OP_TYPE,
    TIMESTAMP,
)

__all__ = ["SpeRecords", "decode_records", "iter_records", "perf_ip", "perf_data_va", "perf_pa", "OP_CLASS_NONE"]

#: ``op_class`` of a record without an operation-type packet
OP_CLASS_NONE = -1

# (column, packet type, index or None for any index, numpy dtype)
_FIELDS: tuple[tuple[str, int, int | None, type], ...] = (
    ("pc_raw", ADDRESS, 0, np.uint64),
    ("tgt_raw", ADDRESS, 1, np.uint64),
    ("va_raw", ADDRESS, 2, np.uint64),
    ("pa_raw", ADDRESS, 3, np.uint64),
    ("pbt_raw", ADDRESS, 4, np.uint64),
    ("tot_lat", COUNTER, 0, np.uint16),
    ("issue_lat", COUNTER, 1, np.uint16),
    ("xlat_lat", COUNTER, 2, np.uint16),
    ("events", EVENTS, None, np.uint64),
    ("data_source", DATA_SOURCE, None, np.uint64),
    ("context", CONTEXT, None, np.uint32),
    ("op_payload", OP_TYPE, None, np.uint8),
)

_M56 = np.uint64((1 << 56) - 1)
_TOP = np.uint64(0xFF << 56)


def perf_ip(raw: np.ndarray) -> np.ndarray:
    """PC/TGT/PBT payloads to addresses the way perf's ``arm_spe_calc_ip``
    does: drop bits 63:56, and fill them with 0xff for NS=1 at EL1/EL2."""
    raw = np.asarray(raw, np.uint64)
    ns = (raw >> np.uint64(63)) & np.uint64(1)
    el = (raw >> np.uint64(61)) & np.uint64(3)
    addr = raw & _M56
    kern = (ns == 1) & ((el == 1) | (el == 2))
    return np.where(kern, addr | _TOP, addr)


def perf_data_va(raw: np.ndarray) -> np.ndarray:
    """Data VA payloads to addresses (``arm_spe_calc_ip``): drop the tag byte
    and fill it with 0xff when bits 55:52 are all ones (kernel addresses)."""
    raw = np.asarray(raw, np.uint64)
    addr = raw & _M56
    kern = ((raw >> np.uint64(52)) & np.uint64(0xF)) == np.uint64(0xF)
    return np.where(kern, addr | _TOP, addr)


def perf_pa(raw: np.ndarray) -> np.ndarray:
    """Data PA payloads to addresses: bits 55:0."""
    return np.asarray(raw, np.uint64) & _M56


@dataclass
class SpeRecords:
    """Decoded SPE records, one numpy array per field (index = record number).

    Raw packet payloads are kept (``pc_raw``, ``tgt_raw``, ``va_raw``,
    ``pa_raw``, ``pbt_raw``, ``tot_lat``, ``issue_lat``, ``xlat_lat``,
    ``events``, ``data_source``, ``context``, ``op_payload``, ``timestamp``),
    each with a ``has_<name>`` boolean array; derived views (``pc``, ``el``,
    ``vaddr``, ``paddr``...) follow perf's rules. ``op_class`` is 0 OTHER,
    1 LD/ST/ATOMIC, 2 BRANCH/ERET, 3 undefined, -1 no operation packet.
    ``offset`` is the byte offset of a record's first packet and ``end_type``
    the packet type that closed it (TIMESTAMP or END).

    ``bad_offsets``/``bad_reasons`` list every undecodable byte (1 invalid
    header, 2 truncated packet) and ``dropped_offsets`` the start of each
    partial record perf would discard because of them; ``trailing_offset`` is
    where an unterminated last record starts (or -1). ``midr`` is the MIDR_EL1
    of the CPU that wrote each record (0 when unknown).
    """

    cpu: np.ndarray
    offset: np.ndarray
    end_type: np.ndarray
    op_class: np.ndarray
    columns: dict[str, np.ndarray]
    present: dict[str, np.ndarray]
    context_index: np.ndarray
    bad_offsets: np.ndarray
    bad_reasons: np.ndarray
    dropped_offsets: np.ndarray
    trailing_offset: int = -1
    midr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    size: int = 0
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.offset)

    def __getattr__(self, name: str):
        cols = self.__dict__.get("columns", {})
        if name in cols:
            return cols[name]
        if name.startswith("has_") and name[4:] in self.__dict__.get("present", {}):
            return self.__dict__["present"][name[4:]]
        raise AttributeError(name)

    # perf-style derived fields -------------------------------------------------
    @property
    def pc(self) -> np.ndarray:
        """Instruction address (perf's ``from_ip``)."""
        return perf_ip(self.columns["pc_raw"])

    @property
    def el(self) -> np.ndarray:
        """Exception level of the PC."""
        return ((self.columns["pc_raw"] >> np.uint64(61)) & np.uint64(3)).astype(np.uint8)

    @property
    def ns(self) -> np.ndarray:
        return (self.columns["pc_raw"] >> np.uint64(63)).astype(np.uint8)

    @property
    def branch_target(self) -> np.ndarray:
        """Branch target address (perf's ``to_ip``)."""
        return perf_ip(self.columns["tgt_raw"])

    @property
    def prev_branch_target(self) -> np.ndarray:
        return perf_ip(self.columns["pbt_raw"])

    @property
    def vaddr(self) -> np.ndarray:
        """Data virtual address (perf's ``virt_addr``)."""
        return perf_data_va(self.columns["va_raw"])

    @property
    def va_tag(self) -> np.ndarray:
        """Top-byte tag of the data VA."""
        return (self.columns["va_raw"] >> np.uint64(56)).astype(np.uint8)

    @property
    def paddr(self) -> np.ndarray:
        return perf_pa(self.columns["pa_raw"])

    @property
    def pa_ns(self) -> np.ndarray:
        return (self.columns["pa_raw"] >> np.uint64(63)).astype(np.uint8)

    @property
    def pa_ch(self) -> np.ndarray:
        """Checked access (MTE) bit of the PA packet."""
        return ((self.columns["pa_raw"] >> np.uint64(62)) & np.uint64(1)).astype(np.uint8)

    @property
    def pa_pat(self) -> np.ndarray:
        """Physical address tag (bits 59:56 of the PA packet)."""
        return ((self.columns["pa_raw"] >> np.uint64(56)) & np.uint64(0xF)).astype(np.uint8)

    @property
    def timestamp(self) -> np.ndarray:
        return self.columns["timestamp"]

    @property
    def is_load(self) -> np.ndarray:
        return (self.op_class == 1) & ((self.columns["op_payload"] & 1) == 0)

    @property
    def is_store(self) -> np.ndarray:
        return (self.op_class == 1) & ((self.columns["op_payload"] & 1) == 1)

    @property
    def is_branch(self) -> np.ndarray:
        return self.op_class == 2

    def to_dict(self) -> dict[str, np.ndarray]:
        """All columns as ``{name: array}``: raw payloads with their ``has_*``
        masks plus perf's derived addresses (``pc``, ``el``, ``ns``,
        ``branch_target``, ``prev_branch_target``, ``vaddr``, ``va_tag``,
        ``paddr``, ``pa_ns``, ``pa_ch``, ``pa_pat``) and the load/store/branch flags."""
        out: dict[str, np.ndarray] = {
            "cpu": self.cpu, "offset": self.offset, "op_class": self.op_class, "end_type": self.end_type,
            "context_index": self.context_index, "midr": self.midr,
        }
        out.update(self.columns)
        out.update({f"has_{k}": v for k, v in self.present.items()})
        for name in ("pc", "el", "ns", "branch_target", "prev_branch_target", "vaddr", "va_tag", "paddr",
                     "pa_ns", "pa_ch", "pa_pat", "is_load", "is_store", "is_branch"):
            out[name] = getattr(self, name)
        return out

    def to_pandas(self):
        """A pandas DataFrame of :meth:`to_dict` (needs ``pmuscope[pandas]``)."""
        pd = require("pandas", "pandas", "SpeRecords.to_pandas()")
        return pd.DataFrame(self.to_dict())

    def check(self) -> None:
        """Raise :class:`~pmuscope.errors.FormatError` naming the first bad
        offset if the buffer had any undecodable byte."""
        if len(self.bad_offsets):
            off = int(self.bad_offsets[0])
            why = "truncated packet" if int(self.bad_reasons[0]) == BAD_TRUNCATED else "invalid packet header"
            raise FormatError(
                f"SPE data: {why} at offset {off:#x} ({len(self.bad_offsets)} bad byte(s) in "
                f"{self.size} bytes); perf skips such bytes one at a time",
                offset=off,
            )

    @classmethod
    def concat(cls, parts: list["SpeRecords"]) -> "SpeRecords":
        """Join record tables (for example one per AUXTRACE chunk)."""
        if not parts:
            return decode_records(b"")
        if len(parts) == 1:
            return parts[0]

        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts])

        return cls(
            cpu=cat("cpu"),
            offset=cat("offset"),
            end_type=cat("end_type"),
            op_class=cat("op_class"),
            columns={k: np.concatenate([p.columns[k] for p in parts]) for k in parts[0].columns},
            present={k: np.concatenate([p.present[k] for p in parts]) for k in parts[0].present},
            context_index=cat("context_index"),
            bad_offsets=cat("bad_offsets"),
            bad_reasons=cat("bad_reasons"),
            dropped_offsets=cat("dropped_offsets"),
            trailing_offset=parts[-1].trailing_offset,
            midr=cat("midr"),
            size=sum(p.size for p in parts),
        )


def _last_per_record(rec: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the last packet of each record (records ascending in ``rec``)."""
    if len(rec) == 0:
        return rec, j
    last = np.ones(len(rec), np.bool_)
    last[:-1] = rec[1:] != rec[:-1]
    return rec[last], j[last]


def records_from_packets(pk: PacketArrays, cpu: int = 0, midr: int = 0) -> SpeRecords:
    """Group decoded packets into records (see the module docstring)."""
    t = pk.type
    boundary = (t == TIMESTAMP) | (t == END) | (t == BAD)
    bidx = np.flatnonzero(boundary)
    nb = len(bidx)
    rid = np.cumsum(boundary) - boundary  # boundaries strictly before each packet
    good_group = t[bidx] != BAD
    recno = np.full(nb + 1, -1, np.int64)
    ng = int(good_group.sum())
    recno[:nb][good_group] = np.arange(ng)
    prec = recno[rid]  # record number of each packet, -1 if dropped/trailing

    # first packet of each group
    gstart = np.zeros(nb, np.int64)
    if nb:
        gstart[1:] = bidx[:-1] + 1
    offset = pk.offset[gstart[good_group]] if nb else np.zeros(0, np.int64)
    # a BAD group that held packets besides the bad byte is a dropped partial record
    bad_groups = np.flatnonzero(~good_group)
    dropped = bad_groups[gstart[bad_groups] < bidx[bad_groups]]
    dropped_offsets = pk.offset[gstart[dropped]]
    trailing = int(pk.offset[bidx[-1] + 1]) if nb and bidx[-1] + 1 < len(t) else (
        int(pk.offset[0]) if not nb and len(t) else -1
    )

    columns: dict[str, np.ndarray] = {}
    present: dict[str, np.ndarray] = {}
    for name, ptype, pindex, dtype in _FIELDS:
        sel = t == ptype
        if pindex is not None:
            sel &= pk.index == pindex
        j = np.flatnonzero(sel)
        r = prec[j]
        ok = r >= 0
        r, j = _last_per_record(r[ok], j[ok])
        col = np.zeros(ng, dtype)
        col[r] = pk.payload[j].astype(dtype)
        has = np.zeros(ng, np.bool_)
        has[r] = True
        columns[name] = col
        present[name] = has
        if name == "context":
            ctx_idx = np.zeros(ng, np.uint8)
            ctx_idx[r] = pk.index[j]
        if name == "op_payload":
            op_class = np.full(ng, OP_CLASS_NONE, np.int8)
            op_class[r] = pk.index[j].astype(np.int8)
    end_j = bidx[good_group]
    end_type = t[end_j]
    ts = np.where(end_type == TIMESTAMP, pk.payload[end_j], np.uint64(0)).astype(np.uint64)
    columns["timestamp"] = ts
    present["timestamp"] = end_type == TIMESTAMP
    bad = t == BAD
    return SpeRecords(
        cpu=np.full(ng, cpu, np.int32),
        offset=offset.astype(np.int64),
        end_type=end_type.astype(np.uint8),
        op_class=op_class,
        columns=columns,
        present=present,
        context_index=ctx_idx,
        bad_offsets=pk.offset[bad],
        bad_reasons=pk.bad_reason[bad],
        dropped_offsets=dropped_offsets.astype(np.int64),
        trailing_offset=trailing,
        midr=np.full(ng, midr, np.uint64),
        size=pk.size,
    )


def iter_records(data: bytes | bytearray | memoryview | np.ndarray, cpu: int = 0, midr: int = 0,
                 chunk_bytes: int = 1 << 22) -> Iterator[SpeRecords]:
    """Decode a raw SPE buffer into batches of :class:`SpeRecords`, about
    ``chunk_bytes`` of SPE data each, so memory stays bounded for any input
    size (the buffer itself may be an ``np.memmap``). A record cut by a chunk
    boundary is carried into the next batch; bad bytes and dropped records are
    reported in the batch that holds them. Each batch's ``size`` is that of
    the whole buffer."""
    carry: PacketArrays | None = None
    n = 0
    for pk in iter_packet_chunks(data, chunk=chunk_bytes):
        n = pk.size
        if carry is not None and len(carry):
            pk = PacketArrays.concat([carry, pk], n)
        t = pk.type
        closers = np.flatnonzero((t == TIMESTAMP) | (t == END) | (t == BAD))
        if not len(closers):
            carry = pk
            continue
        cut = int(closers[-1]) + 1
        carry = pk[cut:]
        yield records_from_packets(pk[:cut], cpu=cpu, midr=midr)
    last = records_from_packets(carry if carry is not None else PacketArrays.concat([], n), cpu=cpu, midr=midr)
    if carry is not None and len(carry) or not n:
        yield last


def decode_records(data: bytes | bytearray | memoryview | np.ndarray, cpu: int = 0, midr: int = 0, strict: bool = False) -> SpeRecords:
    """Decode a raw SPE buffer (one AUX buffer, or a whole ``spe.data`` fill
    buffer) into :class:`SpeRecords`.

    ``cpu`` fills the cpu column and ``midr`` (the CPU's MIDR_EL1, from
    AUXTRACE_INFO) selects IMPLEMENTATION DEFINED names later. Bad bytes are
    reported in the result; with ``strict`` they raise
    :class:`~pmuscope.errors.FormatError` naming the first offset.
    """
    d = _as_u8(data)
    recs = SpeRecords.concat(list(iter_records(d, cpu=cpu, midr=midr)))
    recs.size = len(d)
    if strict:
        recs.check()
    return recs
