"""One memory-sample table for every source: PEBS/IBS samples in perf.data
(``PERF_SAMPLE_DATA_SRC`` + ``ADDR`` + ``WEIGHT``/``WEIGHT_STRUCT``) and Arm
SPE records (data source mapped per CPU, see :mod:`pmuscope.memory.spe`).

Columns (numpy, one row per sample): ``time``, ``pid``, ``tid``, ``cpu``,
``ip``, ``addr``, ``phys_addr``, ``data_src`` (u64 ``perf_mem_data_src``),
``weight`` (latency in cycles: WEIGHT_STRUCT ``var1_dw``, SPE total latency),
``ins_lat`` (WEIGHT_STRUCT ``var2_w``, SPE issue latency), ``kernel`` (the ip
is a kernel address), ``dobj`` (index into ``dobj_names``: the data object
the address falls into — a DSO, ``anon``, ``[heap]``, ``[stack]`` — from the
recording's MMAP2 records or ``/proc/PID/maps``; -1 when unknown).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import PmuscopeError
from . import datasrc as D

__all__ = ["MemSamples", "load_mem_samples", "from_sample_batch", "from_spe_records", "data_object_name"]

_COLS = (("time", np.uint64), ("pid", np.int64), ("tid", np.int64), ("cpu", np.int32), ("ip", np.uint64),
         ("addr", np.uint64), ("phys_addr", np.uint64), ("data_src", np.uint64), ("weight", np.uint64),
         ("ins_lat", np.uint64), ("kernel", np.bool_), ("dobj", np.int32))

UNKNOWN = "[unknown]"


def data_object_name(filename: str) -> str:
    """perf's short DSO name for a mapping: ``/usr/bin/borglet`` → ``borglet``,
    ``//anon`` → ``anon``, ``[heap]``/``[stack]`` unchanged."""
    if not filename:
        return "anon"
    if filename.startswith("[anon:"):
        return "anon"
    return filename.rsplit("/", 1)[-1] if "/" in filename and not filename.startswith("[") else filename


@dataclass
class MemSamples:
    """Columnar memory samples (see the module docstring)."""

    time: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    cpu: np.ndarray
    ip: np.ndarray
    addr: np.ndarray
    phys_addr: np.ndarray
    data_src: np.ndarray
    weight: np.ndarray
    ins_lat: np.ndarray
    kernel: np.ndarray
    dobj: np.ndarray
    dobj_names: list[str] = field(default_factory=list)
    #: "perf.data" or "spe"
    source: str = ""
    #: extras: event names, files, MIDRs, ...
    meta: dict[str, Any] = field(default_factory=dict)
    #: the side-band maps of the recording (for symbol resolution), if any
    maps: Any = None

    def __len__(self) -> int:
        return len(self.data_src)

    @classmethod
    def empty(cls, **kw) -> "MemSamples":
        return cls(**{name: np.zeros(0, dt) for name, dt in _COLS}, **kw)

    @classmethod
    def from_columns(cls, n: int, *, dobj_names=None, source: str = "", meta=None, maps=None, **cols) -> "MemSamples":
        """Build from any subset of the columns (missing ones are zero; ``dobj`` -1, ``cpu`` -1)."""
        out = {}
        for name, dt in _COLS:
            val = cols.pop(name, None)
            if val is not None:
                out[name] = np.asarray(val).astype(dt, copy=False).reshape(-1)
                if len(out[name]) != n:
                    raise ValueError(f"MemSamples: column {name} has {len(out[name])} rows, expected {n}")
            else:
                fill = -1 if name in ("dobj", "cpu") else 0
                out[name] = np.full(n, fill, dt)
        if cols:
            raise ValueError(f"MemSamples: unknown columns {sorted(cols)}")
        return cls(**out, dobj_names=list(dobj_names or []), source=source, meta=dict(meta or {}), maps=maps)

    @property
    def fields(self) -> D.DataSrcFields:
        """The decoded ``perf_mem_data_src`` fields."""
        return D.decode(self.data_src)

    @property
    def is_load(self) -> np.ndarray:
        return D.is_load(self.data_src)

    @property
    def is_store(self) -> np.ndarray:
        return D.is_store(self.data_src)

    def select(self, mask) -> "MemSamples":
        """The rows where ``mask`` is true (or the given indices)."""
        kw = {name: getattr(self, name)[mask] for name, _ in _COLS}
        return MemSamples(**kw, dobj_names=self.dobj_names, source=self.source, meta=self.meta, maps=self.maps)

    @property
    def node(self) -> np.ndarray:
        """NUMA node of each sample's CPU (from the recording's NUMA_TOPOLOGY
        header, ``meta["cpu_node"]``); -1 when unknown."""
        table = self.meta.get("cpu_node")
        if not table or not len(self):
            return np.full(len(self), -1, np.int32)
        lut = np.full(max(max(table), int(self.cpu.max(initial=0))) + 2, -1, np.int32)
        for cpu, node in table.items():
            lut[cpu] = node
        return lut[np.where(self.cpu >= 0, self.cpu, len(lut) - 1)]

    def dobj_name_array(self) -> np.ndarray:
        """The data object of each sample as strings (``[unknown]`` when none)."""
        names = np.array(list(self.dobj_names) + [UNKNOWN], dtype=object)
        return names[np.where(self.dobj >= 0, self.dobj, len(self.dobj_names))]

    @classmethod
    def concat(cls, parts: list["MemSamples"]) -> "MemSamples":
        """Join tables; data-object ids are renumbered onto one name list."""
        parts = [p for p in parts if p is not None]
        if not parts:
            return cls.empty()
        names: list[str] = []
        index: dict[str, int] = {}
        cols: dict[str, list[np.ndarray]] = {name: [] for name, _ in _COLS}
        for p in parts:
            remap = np.array([index.setdefault(nm, len(index)) for nm in p.dobj_names] + [-1], dtype=np.int32)
            for name, _ in _COLS:
                col = getattr(p, name)
                if name == "dobj":
                    col = remap[np.where(col >= 0, col, len(p.dobj_names))]
                cols[name].append(col)
        names = list(index)
        meta: dict[str, Any] = {}
        for p in parts:
            meta.update(p.meta)
        return cls(**{name: np.concatenate(v).astype(dt, copy=False) for (name, dt), v in zip(_COLS, cols.values())},
                   dobj_names=names, source=parts[0].source, meta=meta, maps=parts[0].maps)

    def to_dict(self, *, decoded: bool = True, text: bool = False) -> dict[str, np.ndarray]:
        """The columns (plus the decoded ``mem_*`` fields, and the perf text of
        the data source and the data object name with ``text``)."""
        out = {name: getattr(self, name) for name, _ in _COLS}
        out["op"] = np.where(self.is_load, "load", np.where(self.is_store, "store", "other")).astype(object)
        if decoded:
            out.update(self.fields.to_dict())
        if text:
            out["data_src_text"] = D.texts(self.data_src)
            out["mem_access"] = D.texts(self.data_src, D.lvl_text)
            out["data_object"] = self.dobj_name_array()
        return out

    def to_pandas(self, **kw):
        from ..errors import require

        pd = require("pandas", "pandas", "MemSamples.to_pandas()")
        return pd.DataFrame(self.to_dict(**kw))


# ------------------------------------------------------------------ data objects

class _DobjIndex:
    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.names)
            self.names.append(name)
        return i


def _data_objects(maps, pid: np.ndarray, addr: np.ndarray, index: _DobjIndex, *, procfs_root: str | None = None) -> np.ndarray:
    """Data object id of each (pid, addr) from the current address spaces."""
    out = np.full(len(addr), -1, np.int32)
    if maps is None or not len(addr):
        return out
    for p in np.unique(pid):
        sel = np.flatnonzero((pid == p) & (addr != 0))
        if not len(sel):
            continue
        space = maps.spaces.get(int(p))
        if (space is None or not len(space)) and procfs_root is not None:
            try:
                space = maps.add_proc(int(p), procfs_root)
            except (OSError, PmuscopeError):
                space = None
        if space is None or not len(space):
            continue
        idx = space.find_many(addr[sel])
        ok = idx >= 0
        if not ok.any():
            continue
        uniq, inv = np.unique(idx[ok], return_inverse=True)
        ids = np.array([index.id(data_object_name(space[int(u)].filename)) for u in uniq], np.int32)
        out[sel[ok]] = ids[inv]
    return out


# ------------------------------------------------------------------ sources

def from_sample_batch(batch, *, maps=None, dobj_index: _DobjIndex | None = None, mem_attrs=None,
                      procfs_root: str | None = None) -> MemSamples | None:
    """The memory samples of a :class:`pmuscope.records.SampleBatch` (those of
    attrs with ``PERF_SAMPLE_DATA_SRC``); None when there are none."""
    if batch.data_src is None:
        return None
    sel = np.ones(len(batch), bool)
    if mem_attrs is not None:
        sel = np.isin(batch.attr_index, mem_attrs)
    if not sel.any():
        return None
    n = int(sel.sum())

    def col(name):
        arr = getattr(batch, name)
        return None if arr is None else arr[sel]

    w = batch.weight
    weight = (w & 0xFFFFFFFF)[sel] if w is not None else None
    ins = ((w >> 32) & 0xFFFF)[sel] if w is not None else None
    # WEIGHT (not _STRUCT) carries the whole latency in the u64
    if w is not None:
        plain = np.zeros(len(batch), bool)
        for i, entry in enumerate(batch.attrs.entries if hasattr(batch.attrs, "entries") else []):
            st = int(entry.attr.sample_type)
            if st & (1 << 14) and not st & (1 << 24):
                plain |= batch.attr_index == i
        if plain.any():
            weight = np.where(plain[sel], w[sel], weight)
            ins = np.where(plain[sel], 0, ins)
    kernel = (batch.cpumode[sel] == 1) if batch.misc is not None else None
    pid, addr = col("pid"), col("addr")
    index = dobj_index or _DobjIndex()
    dobj = None
    if maps is not None and pid is not None and addr is not None:
        # as perf's thread__find_map: a kernel-mode sample's data address is
        # looked up in the kernel's maps only, so user memory touched by the
        # kernel (copy_from_user) stays [unknown] like in perf mem report
        user_addr = addr.astype(np.uint64)
        if kernel is not None:
            user_addr = np.where(kernel, np.uint64(0), user_addr)
        dobj = _data_objects(maps, pid.astype(np.int64), user_addr, index, procfs_root=procfs_root)
    return MemSamples.from_columns(
        n, time=col("time"), pid=pid, tid=col("tid"), cpu=col("cpu"), ip=col("ip"), addr=addr,
        phys_addr=col("phys_addr"), data_src=col("data_src"), weight=weight, ins_lat=ins, kernel=kernel,
        dobj=dobj, dobj_names=index.names, source="perf.data")


def load_mem_samples(path, *, procfs: bool = False) -> MemSamples:
    """Memory samples of a perf.data file: PEBS/IBS samples with data_src, or
    (when the file holds Arm SPE AUX data) the SPE load/store records.

    Data addresses are attributed to the mappings of the file's MMAP/MMAP2
    records as they stand when each sample is read; with ``procfs`` a pid the
    file has no maps for is looked up in ``/proc/PID/maps`` (a recording of
    this machine's running processes). ``path`` may be ``"-"`` (stdin), a file
    object or bytes. A plain file's data section (up to
    :data:`FAST_PATH_MAX_BYTES`) is decoded in one columnar pass; compressed,
    pipe-mode and larger files are read record chunk by chunk. Samples come
    back in time order, as perf's ordered-events view shows them."""
    from ..perfdata import PerfDataFile
    from ..records import SampleBatch
    from ..symbols.maps import Maps

    if isinstance(path, str) and path == "-":
        import sys

        path = sys.stdin.buffer.read()  # read the stream once; it is walked more than once below
    elif hasattr(path, "read"):
        path = path.read()
    maps = Maps()
    index = _DobjIndex()
    parts: list[MemSamples] = []
    with PerfDataFile(path) as pf:
        # AUXTRACE_INFO with type PERF_AUXTRACE_ARM_SPE (4); Intel PT and others are not memory samples
        has_aux = any(type_ == 70 and len(mv) >= 12 and mv[8] == 4 and not any(mv[9:12])
                      for type_, _misc, mv, _off in _first_records(pf))
        mem_attrs = [i for i, a in enumerate(pf.attrs) if int(a.attr.sample_type) & (1 << 15)]
        names = pf.event_names
        cpu_node = _cpu_nodes(pf)
    if has_aux:
        return _load_spe_perf_data(path, maps)
    if not mem_attrs:
        raise PmuscopeError(f"{_label(path)}: none of its events samples PERF_SAMPLE_DATA_SRC and it holds no Arm SPE "
                            "data; record memory samples (perf mem record, perf c2c record; pmuscope mem events lists them)")

    def feed(items) -> bool:
        for item in items:
            if isinstance(item, SampleBatch):
                ms = from_sample_batch(item, maps=maps, dobj_index=index, mem_attrs=mem_attrs,
                                       procfs_root="/proc" if procfs else None)
                if ms is not None and len(ms):
                    parts.append(ms)
            elif getattr(item, "type", None) in (_R_COMPRESSED, _R_COMPRESSED2):
                return False
            else:
                maps.apply(item)
        return True

    with PerfDataFile(path) as pf:
        fast = _whole_data_section(pf, path)
        if fast is None or not feed(fast):
            maps, index, parts = Maps(), _DobjIndex(), []
            feed(pf.records())
    out = MemSamples.concat(parts) if parts else MemSamples.empty(source="perf.data")
    out.dobj_names = index.names if parts else []
    if parts:  # concat renumbered in first-seen order; the shared index is already global
        out.dobj = np.concatenate([p.dobj for p in parts])
    out.maps = maps
    out.source = "perf.data"
    if len(out) and out.time.any():
        order = np.argsort(out.time, kind="stable")  # perf's ordered-events view
        if (np.diff(order) != 1).any():
            out = out.select(order)
    out.meta.update({"path": _label(path), "events": [names[i] for i in mem_attrs]})
    if cpu_node:
        out.meta["cpu_node"] = cpu_node
    return out


_R_COMPRESSED, _R_COMPRESSED2 = 81, 83
#: data sections up to this size are decoded in one columnar pass
FAST_PATH_MAX_BYTES = 256 << 20


def _whole_data_section(pf, path):
    """Decoded items of a plain file-mode perf.data's data section in one
    columnar pass over a read-only mmap (a compressed file — seen as a
    COMPRESSED record — or a pipe/directory/huge file returns None or makes
    the caller fall back to the record-by-record reader)."""
    import mmap

    from ..records import AttrTable, decode

    hdr = pf.header
    if hdr.pipe or pf.directory_format or not isinstance(path, (str, os.PathLike)):
        return None
    sec = hdr.data
    if not sec.size or sec.size > FAST_PATH_MAX_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    if sec.offset + sec.size > len(mm):
        return None
    table = AttrTable([(a.attr, a.ids) for a in pf.attrs], names=[a.name for a in pf.attrs])
    buf = bytes(memoryview(mm)[sec.offset:sec.offset + sec.size])
    mm.close()
    return decode(buf, table, base_offset=sec.offset, auxtrace_inline=True)


def _label(path) -> str:
    return "<stdin>" if isinstance(path, (bytes, bytearray)) else os.fspath(path)


def _cpu_nodes(pf) -> dict[int, int]:
    """cpu -> NUMA node from the HEADER_NUMA_TOPOLOGY feature."""
    from ..events.pmu import parse_cpulist
    from ..perfdata import Feature

    out: dict[int, int] = {}
    for node in pf.parsed_feature(Feature.NUMA_TOPOLOGY) or []:
        try:
            for cpu in parse_cpulist(node.cpus):
                out[cpu] = int(node.node)
        except (AttributeError, ValueError):
            continue
    return out


def _first_records(pf, limit: int = 4096):
    for n, rec in enumerate(pf.raw_records()):
        if n >= limit:
            return
        yield rec


def spe_time_to_perf(ts: np.ndarray, conv: dict[str, int] | None) -> np.ndarray:
    """SPE timestamps (generic-timer counts) to perf clock ns with a
    PERF_RECORD_TIME_CONV's parameters, as perf's ``tsc_to_perf_time`` does
    (with ``cap_user_time_short``: the counter is first widened from
    ``time_cycles``/``time_mask``). Without ``conv`` the counts are returned."""
    ts = np.asarray(ts, dtype=np.uint64)
    if not conv or not conv.get("time_mult"):
        return ts
    if conv.get("cap_user_time_short"):
        cyc0, mask = np.uint64(conv["time_cycles"]), np.uint64(conv["time_mask"])
        ts = cyc0 + ((ts - cyc0) & mask)
    shift = np.uint64(conv["time_shift"])
    mult = np.uint64(conv["time_mult"])
    quot = ts >> shift
    rem = ts & ((np.uint64(1) << shift) - np.uint64(1))
    return np.uint64(conv["time_zero"]) + quot * mult + ((rem * mult) >> shift)


def _time_conv(pf) -> dict[str, int] | None:
    """The PERF_RECORD_TIME_CONV of an open perf.data, if any."""
    import struct

    for type_, _misc, mv, _off in pf.raw_records():
        if type_ == 79 and len(mv) >= 32:
            shift, mult, zero = struct.unpack_from("<QQQ", mv, 8)
            out = {"time_shift": shift, "time_mult": mult, "time_zero": zero}
            if len(mv) >= 56:
                cycles, mask = struct.unpack_from("<QQ", mv, 32)
                out.update(time_cycles=cycles, time_mask=mask, cap_user_time_zero=mv[48], cap_user_time_short=mv[49])
            return out
    return None


def _load_spe_perf_data(path, maps) -> MemSamples:
    from ..perfdata import PerfDataFile
    from ..spe.perfdata import decode_perf_data

    recs = decode_perf_data(path if isinstance(path, (bytes, bytearray)) else os.fspath(path))
    with PerfDataFile(path) as pf:
        conv = _time_conv(pf)
    with PerfDataFile(path) as pf:
        for item in pf.records():
            if not hasattr(item, "attrs"):
                maps.apply(item)
    out = from_spe_records(recs, maps=maps)
    if conv is not None:
        out.time = spe_time_to_perf(out.time, conv)
        out.meta["time"] = "perf clock (TIME_CONV)"
    out.meta["path"] = _label(path)
    with PerfDataFile(path) as pf:
        cpu_node = _cpu_nodes(pf)
    if cpu_node:
        out.meta["cpu_node"] = cpu_node
    return out


def from_spe_records(recs, *, maps=None, event_filter_cap=None, pid=None) -> MemSamples:
    """Load/store records of a :class:`pmuscope.spe.SpeRecords` as memory samples.

    pid/tid come from the CONTEXT packet (CONTEXTIDR holds the pid with
    ``CONFIG_PID_IN_CONTEXTIDR``), else ``pid`` (or -1); ``weight`` is the total
    latency, ``ins_lat`` the issue latency, ``time`` the raw timestamp."""
    from .spe import records_data_src

    ds = records_data_src(recs, event_filter_cap=event_filter_cap)
    sel = recs.op_class == 1
    ctx = recs.columns["context"].astype(np.int64)
    has_ctx = recs.present["context"]
    fallback = -1 if pid is None else int(pid)
    tid = np.where(has_ctx, ctx, fallback)[sel]
    el = recs.el[sel]
    index = _DobjIndex()
    addr = recs.vaddr[sel]
    dobj = _data_objects(maps, tid, addr, index) if maps is not None else None
    midrs = sorted({int(m) for m in np.unique(recs.midr)}) if len(recs) else []
    return MemSamples.from_columns(
        int(sel.sum()), time=recs.timestamp[sel], pid=tid, tid=tid, cpu=recs.cpu[sel], ip=recs.pc[sel],
        addr=addr, phys_addr=recs.paddr[sel], data_src=ds[sel], weight=recs.columns["tot_lat"][sel],
        ins_lat=recs.columns["issue_lat"][sel], kernel=(el == 1) | (el == 2), dobj=dobj,
        dobj_names=index.names, source="spe", meta={"midr": midrs}, maps=maps)
