"""PERF_RECORD_SAMPLE decoding into columnar :class:`SampleBatch` objects.

Fields appear in the kernel's order (``perf_output_sample()`` in
``kernel/events/core.c``; the layout comment of PERF_RECORD_SAMPLE in
``include/uapi/linux/perf_event.h``). Decoding is vectorized over all samples
of a chunk: records are 8-byte aligned and every variable-length field
(callchain, branch stack, regs, raw payload, user stack, aux) is a word count
or a byte count the kernel pads to 8, so each field's position is a numpy
array of word indices advanced per sample. When a payload is not padded (RAW
whose ``4 + size`` is not a multiple of 8, a foreign writer) the affected
samples go through :func:`parse_sample`, a plain ``struct`` loop.
"""

from __future__ import annotations

from types import SimpleNamespace

import struct
from typing import Any

import numpy as np

from .. import errors
from .._np import uniq
from .._plain import Plain
from ..kernel import abi
from . import native as _native_decode
from .attrs import AttrEntry, AttrTable
from .types import parse_read_format

S = SimpleNamespace(**{m.name: int(m) for m in abi.PerfSample})  # plain ints: IntFlag ops are slow
F = SimpleNamespace(**{m.name: int(m) for m in abi.PerfFormat})

_U64 = struct.Struct("<Q")
_U32x2 = struct.Struct("<II")

#: the u64 per-sample columns, in kernel order, with the sample_type bit of each
U64_COLUMNS: tuple[tuple[str, int], ...] = (
    ("ip", S.IP),
    ("time", S.TIME),
    ("addr", S.ADDR),
    ("stream_id", S.STREAM_ID),
    ("period", S.PERIOD),
    ("weight", S.WEIGHT | S.WEIGHT_STRUCT),
    ("data_src", S.DATA_SRC),
    ("transaction", S.TRANSACTION),
    ("phys_addr", S.PHYS_ADDR),
    ("cgroup", S.CGROUP),
    ("data_page_size", S.DATA_PAGE_SIZE),
    ("code_page_size", S.CODE_PAGE_SIZE),
)


class SampleBatch(Plain):
    """A run of samples as numpy columns. A column is None when no sample of
    the batch has the field; when only some attrs have it, the others hold 0.

    Variable-length fields are flat arrays with ``*_offsets`` (length n+1):
    sample i's call chain is ``callchain[callchain_offsets[i]:callchain_offsets[i+1]]``
    (PERF_CONTEXT_* markers included, as the kernel wrote them).

    Written out rather than a ``@dataclass`` (generating its 47 fields' methods
    cost ~1 ms of every start-up that reads samples): the annotations below are
    the fields, ``_fields`` lists them in order, a field not given is None.
    """

    attrs: AttrTable
    #: byte offset of each record in the stream
    offset: np.ndarray
    #: perf_event_header.misc (cpumode in the low 3 bits, EXACT_IP ...)
    misc: np.ndarray
    #: index into ``attrs`` of each sample
    attr_index: np.ndarray
    id: np.ndarray | None
    ip: np.ndarray | None
    pid: np.ndarray | None
    tid: np.ndarray | None
    time: np.ndarray | None
    addr: np.ndarray | None
    stream_id: np.ndarray | None
    cpu: np.ndarray | None
    period: np.ndarray | None
    # PERF_SAMPLE_READ
    read_time_enabled: np.ndarray | None
    read_time_running: np.ndarray | None
    read_value: np.ndarray | None
    read_id: np.ndarray | None
    read_lost: np.ndarray | None
    read_offsets: np.ndarray | None
    # PERF_SAMPLE_CALLCHAIN
    callchain: np.ndarray | None
    callchain_offsets: np.ndarray | None
    # PERF_SAMPLE_RAW
    raw: np.ndarray | None
    raw_offsets: np.ndarray | None
    # PERF_SAMPLE_BRANCH_STACK
    branch_hw_idx: np.ndarray | None
    branch_from: np.ndarray | None
    branch_to: np.ndarray | None
    branch_flags: np.ndarray | None
    branch_counters: np.ndarray | None
    branch_offsets: np.ndarray | None
    # PERF_SAMPLE_REGS_USER
    regs_user_abi: np.ndarray | None
    regs_user: np.ndarray | None
    regs_user_offsets: np.ndarray | None
    # PERF_SAMPLE_STACK_USER
    stack_user: np.ndarray | None
    stack_user_offsets: np.ndarray | None
    stack_user_dyn_size: np.ndarray | None
    weight: np.ndarray | None
    data_src: np.ndarray | None
    transaction: np.ndarray | None
    # PERF_SAMPLE_REGS_INTR
    regs_intr_abi: np.ndarray | None
    regs_intr: np.ndarray | None
    regs_intr_offsets: np.ndarray | None
    phys_addr: np.ndarray | None
    cgroup: np.ndarray | None
    data_page_size: np.ndarray | None
    code_page_size: np.ndarray | None
    # PERF_SAMPLE_AUX
    aux: np.ndarray | None
    aux_offsets: np.ndarray | None

    def __init__(self, attrs: AttrTable, offset: np.ndarray, misc: np.ndarray, attr_index: np.ndarray,
                 **columns: np.ndarray | None) -> None:
        """The four columns every batch has; any other field by name (None: absent)."""
        d = self.__dict__
        d.update(_NO_FIELDS)
        if columns:
            unknown = columns.keys() - _NO_FIELDS.keys()
            if unknown:
                raise TypeError(f"SampleBatch has no field {', '.join(sorted(unknown))}")
            d.update(columns)
        d["attrs"], d["offset"], d["misc"], d["attr_index"] = attrs, offset, misc, attr_index

    def __len__(self) -> int:
        return len(self.offset)

    @property
    def cpumode(self) -> np.ndarray:
        """PERF_RECORD_MISC_CPUMODE of each sample (KERNEL=1, USER=2, ...)."""
        return self.misc & abi.PERF_RECORD_MISC_CPUMODE_MASK

    @property
    def weight_var1(self) -> np.ndarray | None:
        """WEIGHT_STRUCT ``var1_dw`` (the low 32 bits; the whole weight for WEIGHT)."""
        return None if self.weight is None else (self.weight & 0xFFFFFFFF)

    @property
    def weight_var2(self) -> np.ndarray | None:
        """WEIGHT_STRUCT ``var2_w`` (e.g. instruction latency on Intel)."""
        return None if self.weight is None else ((self.weight >> 32) & 0xFFFF)

    @property
    def weight_var3(self) -> np.ndarray | None:
        return None if self.weight is None else ((self.weight >> 48) & 0xFFFF)

    def _flat(self, name: str, i: int) -> np.ndarray | None:
        arr = getattr(self, name)
        if arr is None:
            return None
        off = getattr(self, name + "_offsets" if name not in ("branch_from", "branch_to", "branch_flags", "branch_counters") else "branch_offsets")
        if name in ("read_value", "read_id", "read_lost"):
            off = self.read_offsets
        return arr[off[i] : off[i + 1]]

    def callchain_of(self, i: int) -> np.ndarray | None:
        return self._flat("callchain", i)

    def raw_of(self, i: int) -> bytes | None:
        arr = self._flat("raw", i)
        return None if arr is None else arr.tobytes()

    def sample(self, i: int) -> dict[str, Any]:
        """Sample ``i`` as a dict of Python values (for debugging and tests)."""
        out: dict[str, Any] = {}
        for name in self._fields:
            if name == "attrs" or name.endswith("_offsets"):
                continue
            arr = getattr(self, name)
            if arr is None:
                continue
            if name in ("callchain", "raw", "regs_user", "regs_intr", "stack_user", "aux", "read_value", "read_id", "read_lost",
                        "branch_from", "branch_to", "branch_flags", "branch_counters"):
                base = {"read_value": "read", "read_id": "read", "read_lost": "read", "branch_from": "branch",
                        "branch_to": "branch", "branch_flags": "branch", "branch_counters": "branch"}.get(name, name)
                off = getattr(self, base + "_offsets")
                part = arr[off[i] : off[i + 1]]
                out[name] = part.tobytes() if arr.dtype == np.uint8 else [int(x) for x in part]
            else:
                out[name] = int(arr[i])
        return out

    def __getitem__(self, key: slice) -> "SampleBatch":
        if not isinstance(key, slice):
            raise TypeError("SampleBatch supports slicing only; use sample(i) for one sample")
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise ValueError("SampleBatch slices must be contiguous")
        return self._slice(start, stop)

    def _slice(self, start: int, stop: int) -> "SampleBatch":
        if start == 0 and stop == len(self):
            return self
        # what SampleBatch(**fields) makes, without its __init__ of every field
        # (a batch is cut at every FINISHED_ROUND: thousands of times a file)
        d = self.__dict__
        out = object.__new__(SampleBatch)
        kw = out.__dict__
        kw.update(_NO_FIELDS)
        kw["attrs"] = d["attrs"]
        for name in _PER_SAMPLE:
            arr = d[name]
            if arr is not None:
                kw[name] = arr[start:stop]
        for off_name, names in _FLAT_ITEMS:
            off = d[off_name]
            if off is None:
                continue
            a, b = int(off[start]), int(off[stop])
            kw[off_name] = off[start : stop + 1] - a
            for n in names:
                arr = d[n]
                if arr is not None:
                    kw[n] = arr[a:b]
        return out

    @classmethod
    def concat(cls, batches: list["SampleBatch"]) -> "SampleBatch":
        """Join batches decoded with the same AttrTable into one."""
        if not batches:
            raise ValueError("concat of no batches")
        if len(batches) == 1:
            return batches[0]
        n = [len(b) for b in batches]
        kw: dict[str, Any] = {"attrs": batches[0].attrs}  # a field left out is None
        for name in cls._fields:
            if name == "attrs" or name in _FLAT_BY_OFFSETS:
                continue
            arrs = [getattr(b, name) for b in batches]
            if all(a is None for a in arrs):
                continue
            ref = next(a for a in arrs if a is not None)
            if name in _FLAT_NAMES:
                kw[name] = np.concatenate([a if a is not None else np.zeros(0, dtype=ref.dtype) for a in arrs])
            else:
                kw[name] = np.concatenate([a if a is not None else np.zeros(k, dtype=ref.dtype) for a, k in zip(arrs, n)])
        for off_name, names in _FLAT_BY_OFFSETS.items():
            offs = [getattr(b, off_name) for b in batches]
            if all(o is None for o in offs):
                kw[off_name] = None
                continue
            parts = [np.zeros(1, dtype=np.int64)]
            total = 0
            for o, k in zip(offs, n):
                o = o if o is not None else np.zeros(k + 1, dtype=np.int64)
                parts.append(o[1:] + total)
                total += int(o[-1])
            kw[off_name] = np.concatenate(parts)
        return cls(**kw)


_FLAT_BY_OFFSETS = {
    "read_offsets": ("read_value", "read_id", "read_lost"),
    "callchain_offsets": ("callchain",),
    "raw_offsets": ("raw",),
    "branch_offsets": ("branch_from", "branch_to", "branch_flags", "branch_counters"),
    "regs_user_offsets": ("regs_user",),
    "stack_user_offsets": ("stack_user",),
    "regs_intr_offsets": ("regs_intr",),
    "aux_offsets": ("aux",),
}


_FLAT_NAMES = {n for names in _FLAT_BY_OFFSETS.values() for n in names}
_FLAT_ITEMS = tuple(_FLAT_BY_OFFSETS.items())
#: the fields in declaration order (what ``dataclasses.fields`` gave when it was a dataclass)
SampleBatch._fields = tuple(SampleBatch.__annotations__)
_NO_FIELDS = {f: None for f in SampleBatch._fields}
#: the per-sample columns (everything but attrs and the flat fields)
_PER_SAMPLE = tuple(
    f for f in SampleBatch._fields
    if f != "attrs" and f not in _FLAT_NAMES and f not in _FLAT_BY_OFFSETS
)


# --- scalar reference parser: records/_scalar.py (numpy-free, for the small-file report path too)
from ._scalar import _overrun, _s32, parse_sample  # noqa: E402,F401


# --- vectorized decoding -----------------------------------------------------------


class _Unaligned(Exception):
    """A payload is not padded to 8 bytes: these samples need the scalar parser."""


def _gather(arr: np.ndarray, starts: np.ndarray, counts: np.ndarray, stride: "int | np.ndarray" = 1) -> tuple[np.ndarray, np.ndarray]:
    """Flatten ``arr[s : s + c*stride : stride]`` for each (s, c) into one array
    + offsets (``stride`` may be per sample)."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return arr[:0].copy(), offsets
    if not isinstance(stride, np.ndarray) and stride == 1 and total >= 1024 * len(counts):
        # long runs (user stack copies, AUX; >= 1 KiB on average): one slice copy per
        # run beats an index array 8x the size of the data
        out = np.empty(total, dtype=arr.dtype)
        for s_, o_, c_ in zip(starts.tolist(), offsets[:-1].tolist(), counts.tolist()):
            if c_:
                out[o_:o_ + c_] = arr[s_:s_ + c_]
        return out, offsets
    if isinstance(stride, np.ndarray):
        local = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], counts)
        idx = np.repeat(starts, counts) + np.repeat(stride, counts) * local
    else:
        idx = np.repeat(starts - stride * offsets[:-1], counts) + stride * np.arange(total, dtype=np.int64)
    return arr[idx], offsets


class _Cols:
    """Per-sample column arrays and flat-field (start, count) arrays for one chunk."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.cols: dict[str, np.ndarray] = {}
        self.flat: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.strides: dict[str, np.ndarray] = {}

    def stride(self, name: str) -> np.ndarray:
        arr = self.strides.get(name)
        if arr is None:
            arr = self.strides[name] = np.ones(self.n, dtype=np.int64)
        return arr

    def col(self, name: str, dtype) -> np.ndarray:
        arr = self.cols.get(name)
        if arr is None:
            arr = self.cols[name] = np.zeros(self.n, dtype=dtype)
        return arr

    def span(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        sp = self.flat.get(name)
        if sp is None:
            sp = self.flat[name] = (np.zeros(self.n, dtype=np.int64), np.zeros(self.n, dtype=np.int64))
        return sp


def _decode_group(W: np.ndarray, w: np.ndarray, e: np.ndarray, rec_off: np.ndarray, m: np.ndarray | slice,
                  entry: AttrEntry, out: _Cols, base_offset: int) -> None:
    """Decode the samples at word indices ``w`` (record end words ``e``) that all
    belong to ``entry`` into ``out`` at rows ``m``."""
    st = entry.sample_type
    p = w + 1

    def check(k, what: str) -> None:
        bad = p + k > e
        if bad.any():
            i = int(np.argmax(bad))
            raise _overrun(base_offset + int(rec_off[i]), what, st)

    def u64(name: str | None, what: str) -> np.ndarray:
        nonlocal p
        check(1, what)
        v = W[p]
        p = p + 1
        if name is not None:
            out.col(name, np.uint64)[m] = v
        return v

    if st & S.IDENTIFIER:
        u64("id", "IDENTIFIER")
    if st & S.IP:
        u64("ip", "IP")
    if st & S.TID:
        v = u64(None, "TID")
        out.col("pid", np.int32)[m] = (v & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        out.col("tid", np.int32)[m] = (v >> 32).astype(np.uint32).view(np.int32)
    if st & S.TIME:
        u64("time", "TIME")
    if st & S.ADDR:
        u64("addr", "ADDR")
    if st & S.ID:
        u64("id", "ID")
    if st & S.STREAM_ID:
        u64("stream_id", "STREAM_ID")
    if st & S.CPU:
        v = u64(None, "CPU")
        out.col("cpu", np.int32)[m] = (v & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    if st & S.PERIOD:
        u64("period", "PERIOD")
    if st & S.READ:
        rf = entry.read_format
        if rf & F.GROUP:
            nr = u64(None, "READ nr").astype(np.int64)
            if rf & F.TOTAL_TIME_ENABLED:
                u64("read_time_enabled", "READ time_enabled")
            if rf & F.TOTAL_TIME_RUNNING:
                u64("read_time_running", "READ time_running")
            per = 1 + bool(rf & F.ID) + bool(rf & F.LOST)
            bad = (nr < 0) | (nr > (e - p) // per)
            if bad.any():
                i = int(np.argmax(bad))
                raise _overrun(base_offset + int(rec_off[i]), f"READ group (nr={int(nr[i])})", st)
        else:
            nr = np.ones(len(p), dtype=np.int64)
            per = 1 + bool(rf & F.ID) + bool(rf & F.LOST)
            check(per + bool(rf & F.TOTAL_TIME_ENABLED) + bool(rf & F.TOTAL_TIME_RUNNING), "READ")
            # single: value, [enabled], [running], [id], [lost]
            vpos = p
            p = p + 1
            if rf & F.TOTAL_TIME_ENABLED:
                u64("read_time_enabled", "READ time_enabled")
            if rf & F.TOTAL_TIME_RUNNING:
                u64("read_time_running", "READ time_running")
            # present value/id/lost as a stride-1 "group" of one starting at vpos,
            # with id/lost found after the times
            s, c = out.span("read_value")
            s[m], c[m] = vpos, 1
            if rf & F.ID:
                s, c = out.span("read_id")
                s[m], c[m] = p, 1
                p = p + 1
            if rf & F.LOST:
                s, c = out.span("read_lost")
                s[m], c[m] = p, 1
                p = p + 1
            nr = None
        if nr is not None:
            k = 0
            for name, bit in (("read_value", 0), ("read_id", F.ID), ("read_lost", F.LOST)):
                if bit and not rf & bit:
                    continue
                s, c = out.span(name)
                s[m], c[m] = p + k, nr
                k += 1
            p = p + per * nr
        for name in ("read_value", "read_id", "read_lost"):
            if name in out.flat:
                out.stride(name)[m] = per
    if st & S.CALLCHAIN:
        nr = u64(None, "CALLCHAIN nr").astype(np.int64)
        bad = (nr < 0) | (nr > e - p)
        if bad.any():
            i = int(np.argmax(bad))
            raise _overrun(base_offset + int(rec_off[i]), f"CALLCHAIN (nr={int(W[p[i] - 1])})", st)
        s, c = out.span("callchain")
        s[m], c[m] = p, nr
        p = p + nr
    if st & S.RAW:
        check(1, "RAW size")
        rsz = (W[p] & 0xFFFFFFFF).astype(np.int64)
        if ((4 + rsz) & 7).any():
            raise _Unaligned
        bad = (p * 8 + 4 + rsz) > e * 8
        if bad.any():
            i = int(np.argmax(bad))
            raise _overrun(base_offset + int(rec_off[i]), f"RAW (size={int(rsz[i])})", st)
        s, c = out.span("raw")
        s[m], c[m] = p * 8 + 4, rsz
        p = p + (4 + rsz) // 8
    if st & S.BRANCH_STACK:
        nr = u64(None, "BRANCH_STACK nr").astype(np.int64)
        if entry.has_hw_index:
            u64("branch_hw_idx", "BRANCH_STACK hw_idx")
        per = 3 + entry.has_branch_counters
        bad = (nr < 0) | (nr > (e - p) // per)
        if bad.any():
            i = int(np.argmax(bad))
            raise _overrun(base_offset + int(rec_off[i]), f"BRANCH_STACK (nr={int(nr[i])})", st)
        s, c = out.span("branch")
        s[m], c[m] = p, nr
        p = p + 3 * nr
        if entry.has_branch_counters:
            s, c = out.span("branch_counters")
            s[m], c[m] = p, nr
            p = p + nr
    if st & S.REGS_USER:
        p = _regs(W, p, e, rec_off, m, out, "regs_user", entry.regs_user_count, base_offset, st)
    if st & S.STACK_USER:
        check(1, "STACK_USER size")
        sz = W[p].astype(np.int64)
        p = p + 1
        if (sz & 7).any():
            raise _Unaligned
        has = sz != 0
        bad = (sz < 0) | (sz // 8 + has > e - p)
        if bad.any():
            i = int(np.argmax(bad))
            raise _overrun(base_offset + int(rec_off[i]), f"STACK_USER (size={int(sz[i])})", st)
        s, c = out.span("stack_user")
        s[m], c[m] = p * 8, sz
        p = p + sz // 8
        dyn = out.col("stack_user_dyn_size", np.uint64)
        dyn[m] = np.where(has, W[np.minimum(p, len(W) - 1)], 0)
        p = p + has
    if st & (S.WEIGHT | S.WEIGHT_STRUCT):
        u64("weight", "WEIGHT")
    if st & S.DATA_SRC:
        u64("data_src", "DATA_SRC")
    if st & S.TRANSACTION:
        u64("transaction", "TRANSACTION")
    if st & S.REGS_INTR:
        p = _regs(W, p, e, rec_off, m, out, "regs_intr", entry.regs_intr_count, base_offset, st)
    if st & S.PHYS_ADDR:
        u64("phys_addr", "PHYS_ADDR")
    if st & S.CGROUP:
        u64("cgroup", "CGROUP")
    if st & S.DATA_PAGE_SIZE:
        u64("data_page_size", "DATA_PAGE_SIZE")
    if st & S.CODE_PAGE_SIZE:
        u64("code_page_size", "CODE_PAGE_SIZE")
    if st & S.AUX:
        check(1, "AUX size")
        sz = W[p].astype(np.int64)
        p = p + 1
        if (sz & 7).any():
            raise _Unaligned
        bad = (sz < 0) | (sz // 8 > e - p)
        if bad.any():
            i = int(np.argmax(bad))
            raise _overrun(base_offset + int(rec_off[i]), f"AUX (size={int(sz[i])})", st)
        s, c = out.span("aux")
        s[m], c[m] = p * 8, sz
        p = p + sz // 8


def _regs(W, p, e, rec_off, m, out: _Cols, name: str, count: int, base_offset: int, st: int):
    bad = p + 1 > e
    if bad.any():
        i = int(np.argmax(bad))
        raise _overrun(base_offset + int(rec_off[i]), f"{name.upper()} abi", st)
    abi_ = W[p]
    out.col(name + "_abi", np.uint64)[m] = abi_
    p = p + 1
    n = np.where(abi_ != 0, count, 0).astype(np.int64)
    bad = p + n > e
    if bad.any():
        i = int(np.argmax(bad))
        raise _overrun(base_offset + int(rec_off[i]), f"{name.upper()} ({count} registers)", st)
    s, c = out.span(name)
    s[m], c[m] = p, n
    return p + n


def decode_samples(buf, offs: np.ndarray, sizes: np.ndarray, attrs: AttrTable, base_offset: int, stats,
                   callchains: bool = True) -> SampleBatch:
    """Decode the SAMPLE records at byte offsets ``offs`` (sizes ``sizes``) of ``buf``.

    Samples whose id is in no attr are dropped and counted in ``stats.unknown_id``.
    ``callchains=False``: the batch has no call chains (they are still checked;
    the C decoder does not copy them).
    """
    batch = _decode_samples(buf, offs, sizes, attrs, base_offset, stats, callchains)
    if not callchains and batch.callchain is not None:
        batch.callchain = batch.callchain_offsets = None
    return batch


def _decode_samples(buf, offs: np.ndarray, sizes: np.ndarray, attrs: AttrTable, base_offset: int, stats,
                    callchains: bool) -> SampleBatch:
    n = len(offs)
    mv = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    if n and len(attrs.entries) == 1:  # the C decoder checks alignment and bounds itself
        got = _native_decode.sample_columns(mv, offs, sizes, attrs.entries[0].sample_type, callchains)
        if got is not None:
            return _native_batch(got, attrs, offs, base_offset, np.zeros(n, dtype=np.int32))
    nbytes = len(mv)
    aligned = not ((offs | sizes) & 7).any()
    if aligned and nbytes >= 8:
        W = np.frombuffer(mv, dtype="<u8", count=nbytes // 8)
        w = offs >> 3
        e = (offs + sizes) >> 3
        if len(attrs.entries) == 1:
            ai = np.zeros(n, dtype=np.int32)
        else:
            ip_ = w + 1 + attrs.id_pos
            bad = ip_ >= e
            if bad.any():
                i = int(np.argmax(bad))
                raise errors.FormatError(
                    f"malformed PERF_RECORD_SAMPLE at byte offset {base_offset + int(offs[i])}: too short to hold its id "
                    f"(word {attrs.id_pos} after the header)", offset=base_offset + int(offs[i]))
            ai = attrs.indices_of_ids(W[ip_])
            unknown = ai < 0
            if unknown.any():
                stats.unknown_id += int(unknown.sum())
                keep = ~unknown
                offs, sizes, w, e, ai = offs[keep], sizes[keep], w[keep], e[keep], ai[keep]
                n = len(offs)
        st = attrs.entries[0].sample_type
        if n and len(attrs.entries) > 1 and all(en.sample_type == st for en in attrs.entries):
            got = _native_decode.sample_columns(mv, offs, sizes, st, callchains)
            if got is not None:
                return _native_batch(got, attrs, offs, base_offset, ai)
        out = _Cols(n)
        groups = uniq(ai) if len(attrs.entries) > 1 else np.zeros(1, dtype=np.int32)
        try:
            for g in groups:
                if len(groups) == 1:
                    m: np.ndarray | slice = slice(None)
                    gw, ge, go = w, e, offs
                else:
                    m = ai == g
                    gw, ge, go = w[m], e[m], offs[m]
                _decode_group(W, gw, ge, go, m, attrs.entries[int(g)], out, base_offset)
        except _Unaligned:
            return _decode_scalar(mv, offs, sizes, attrs, base_offset, stats)
        misc = ((W[w] >> 32) & 0xFFFF).astype(np.uint16)
        batch = SampleBatch(attrs=attrs, offset=offs + base_offset, misc=misc, attr_index=ai)
        for name, arr in out.cols.items():
            setattr(batch, name, arr)
        B = None
        for name, (s, c) in out.flat.items():
            if name in ("raw", "stack_user", "aux"):
                if B is None:
                    B = np.frombuffer(mv, dtype=np.uint8, count=nbytes)
                flat, offsets = _gather(B, s, c)
                setattr(batch, name, flat)
                setattr(batch, name + "_offsets", offsets)
            elif name == "branch":
                batch.branch_from, offsets = _gather(W, s, c, 3)
                batch.branch_to, _ = _gather(W, s + 1, c, 3)
                batch.branch_flags, _ = _gather(W, s + 2, c, 3)
                batch.branch_offsets = offsets
            elif name == "branch_counters":
                batch.branch_counters, _ = _gather(W, s, c)
            elif name.startswith("read_"):
                flat, offsets = _gather(W, s, c, out.strides.get(name, 1))
                setattr(batch, name, flat)
                batch.read_offsets = offsets
            else:
                flat, offsets = _gather(W, s, c)
                setattr(batch, name, flat)
                setattr(batch, name + "_offsets", offsets)
        return batch
    return _decode_scalar(mv, offs, sizes, attrs, base_offset, stats)


def _native_batch(got, attrs: AttrTable, offs: np.ndarray, base_offset: int, ai: np.ndarray) -> SampleBatch:
    """The batch of :func:`native.sample_columns`' arrays (the C decoder's copy
    of what ``_decode_group`` and ``_gather`` make)."""
    misc, cols, chain, chain_off = got
    batch = SampleBatch(attrs=attrs, offset=offs + base_offset, misc=misc, attr_index=ai)
    for name, arr in cols.items():
        setattr(batch, name, arr)
    if chain is not None:
        batch.callchain, batch.callchain_offsets = chain, chain_off
    return batch


def _decode_scalar(buf, offs: np.ndarray, sizes: np.ndarray, attrs: AttrTable, base_offset: int, stats) -> SampleBatch:
    """The struct-loop path: one :func:`parse_sample` per record, then columns."""
    rows = []
    for off, size in zip(offs.tolist(), sizes.tolist()):
        if len(attrs.entries) == 1:
            entry = attrs.entries[0]
        else:
            pos = off + 8 + 8 * attrs.id_pos
            if pos + 8 > off + size:
                raise errors.FormatError(
                    f"malformed PERF_RECORD_SAMPLE at byte offset {base_offset + off}: too short to hold its id",
                    offset=base_offset + off)
            idx = attrs.index_of_id(_U64.unpack_from(buf, pos)[0])
            if idx < 0:
                stats.unknown_id += 1
                continue
            entry = attrs.entries[idx]
        rows.append(parse_sample(buf, off, size, entry, base_offset))
    return batch_from_rows(rows, attrs)


def batch_from_rows(rows: list[dict[str, Any]], attrs: AttrTable) -> SampleBatch:
    """Build a :class:`SampleBatch` from :func:`parse_sample` dicts."""
    n = len(rows)
    batch = SampleBatch(
        attrs=attrs,
        offset=np.array([r["offset"] for r in rows], dtype=np.int64),
        misc=np.array([r["misc"] for r in rows], dtype=np.uint16),
        attr_index=np.array([r["attr_index"] for r in rows], dtype=np.int32),
    )
    present = set().union(*(r.keys() for r in rows)) if rows else set()
    for name in ("id", "ip", "time", "addr", "stream_id", "period", "weight", "data_src", "transaction", "phys_addr",
                 "cgroup", "data_page_size", "code_page_size", "branch_hw_idx", "regs_user_abi", "regs_intr_abi",
                 "stack_user_dyn_size"):
        if name in present:
            setattr(batch, name, np.array([r.get(name, 0) for r in rows], dtype=np.uint64))
    for name in ("pid", "tid", "cpu"):
        if name in present:
            setattr(batch, name, np.array([r.get(name, 0) for r in rows], dtype=np.int32))

    def flat_u64(names: tuple[str, ...], off_name: str) -> None:
        if not any(nm in present for nm in names):
            return
        lens = [len(r.get(names[0], ())) for r in rows]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        setattr(batch, off_name, offsets)
        for nm in names:
            if nm in present:
                vals = [v for r in rows for v in r.get(nm, [0] * len(r.get(names[0], ())))]
                setattr(batch, nm, np.array(vals, dtype=np.uint64))

    def flat_bytes(name: str) -> None:
        if name not in present:
            return
        parts = [r.get(name, b"") for r in rows]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(x) for x in parts], out=offsets[1:])
        setattr(batch, name, np.frombuffer(b"".join(parts), dtype=np.uint8).copy())
        setattr(batch, name + "_offsets", offsets)

    flat_u64(("callchain",), "callchain_offsets")
    flat_u64(("branch_from", "branch_to", "branch_flags"), "branch_offsets")
    if "branch_counters" in present:
        batch.branch_counters = np.array([v for r in rows for v in r.get("branch_counters", [])], dtype=np.uint64)
    flat_u64(("regs_user",), "regs_user_offsets")
    flat_u64(("regs_intr",), "regs_intr_offsets")
    for name in ("raw", "stack_user", "aux"):
        flat_bytes(name)
    if "read" in present:
        reads = [r.get("read") for r in rows]
        lens = [len(rv.values) if rv else 0 for rv in reads]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        batch.read_offsets = offsets
        batch.read_value = np.array([v for rv in reads if rv for v in rv.values], dtype=np.uint64)
        if any(rv and rv.ids is not None for rv in reads):
            batch.read_id = np.array([v for rv in reads if rv for v in (rv.ids or [0] * len(rv.values))], dtype=np.uint64)
        if any(rv and rv.lost is not None for rv in reads):
            batch.read_lost = np.array([v for rv in reads if rv for v in (rv.lost or [0] * len(rv.values))], dtype=np.uint64)
        if any(rv and rv.time_enabled is not None for rv in reads):
            batch.read_time_enabled = np.array([(rv.time_enabled or 0) if rv else 0 for rv in reads], dtype=np.uint64)
        if any(rv and rv.time_running is not None for rv in reads):
            batch.read_time_running = np.array([(rv.time_running or 0) if rv else 0 for rv in reads], dtype=np.uint64)
    return batch
