"""Sample events synthesized from Arm SPE records, as perf's ``arm-spe.c`` does
for ``perf report``/``perf script`` (and ``perf inject --itrace``).

Every decoded SPE record yields, in this order, one sample in each event whose
condition it meets (``arm_spe_sample()``):

=============  =================================  ======  ===========================
event          record condition                    letter  addr
=============  =================================  ======  ===========================
l1d-miss       EVENTS bit 3 (L1D refill)           f       data VA
l1d-access     EVENTS bit 2 (L1D access)           f       data VA
llc-miss       EVENTS bit 9                        m       data VA
llc-access     EVENTS bit 8                        m       data VA
tlb-miss       EVENTS bit 5 (TLB walk)             t       data VA
tlb-access     EVENTS bit 4                        t       data VA
branch-miss    EVENTS bit 7 (mispredicted)         b       branch target
remote-access  EVENTS bit 10                       a       data VA
memory         a load/store (data_src != 0)        M       data VA
instructions   every Nth record (``--itrace=iNi``) i       data VA
=============  =================================  ======  ===========================

Each sample has ip = the record's PC, pid/tid (CONTEXT packet, else the
AUXTRACE buffer's thread), cpu (the buffer's), period 1 (instructions: N),
weight = total latency, ``data_src`` (:func:`pmuscope.memory.spe.spe_data_src`,
by the writing CPU's MIDR) and the physical address. The synthesized events
are ``PERF_TYPE_HARDWARE`` attrs appended after the file's own (ids = the SPE
event's first id + 1e9, as perf numbers them), so a file holding a PMU event
and SPE together reports both.

Without ``--itrace`` perf synthesizes f, m, t, b, a and M (perf's letters:
f first-level cache, m last-level cache, t TLB, b branch misses, a remote
access, M memory); ``i`` needs an
instruction period (``i1i``, ``i10i``): perf 6.1 warns "Only
instruction-based sampling period is currently supported by Arm SPE" for a
time period, and so does this module.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import tempfile

import numpy as np

from .._plain import Plain
from ..kernel import abi
from ..perfdata import Feature

__all__ = ["EVENTS", "ItraceOptions", "parse_itrace", "synthesize", "open_synthesized", "has_spe"]

S = abi.PerfSample
#: (event name, itrace letter, EVENTS bit or None)
EVENTS = (("l1d-miss", "f", 3), ("l1d-access", "f", 2), ("llc-miss", "m", 9), ("llc-access", "m", 8),
          ("tlb-miss", "t", 5), ("tlb-access", "t", 4), ("branch-miss", "b", 7), ("remote-access", "a", 10),
          ("memory", "M", None), ("instructions", "i", None))
DEFAULT_LETTERS = "fmtbaM"
SAMPLE_TYPE_BASE = int(S.IDENTIFIER | S.IP | S.TID | S.ADDR | S.CPU | S.PERIOD | S.WEIGHT | S.DATA_SRC | S.PHYS_ADDR)
KERNEL_START = 0xFFFF000000000000


class ItraceOptions(Plain):
    _fields = ("letters", "period", "warnings")

    letters: str
    #: instruction period (None: no instruction-based period given)
    period: int | None
    warnings: list[str]

    def __init__(
        self,
        letters: str = DEFAULT_LETTERS,
        period: int | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        self.letters = letters
        self.period = period
        self.warnings = [] if warnings is None else warnings

    def wants(self, letter: str) -> bool:
        return letter in self.letters


_PERIOD = re.compile(r"(\d+)(i|t|ms|us|ns)?")


def parse_itrace(text: str | None) -> ItraceOptions:
    """perf's ``--itrace`` letters (the ones SPE uses: i b f m t a M; others
    are accepted and ignored). None or "" gives perf's default."""
    if not text:
        return ItraceOptions()
    letters, period, warnings = "", None, []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch == ",":
            continue
        if not ch.isalpha():
            from ..errors import PmuscopeError

            raise PmuscopeError(f"--itrace {text!r}: unexpected {ch!r} at column {i}")
        letters += ch
        if ch in "iy":
            m = _PERIOD.match(text, i)
            if m:
                i = m.end()
                if ch == "i":
                    if m.group(2) == "i":
                        period = max(1, int(m.group(1)))
                    else:
                        period = None
                        warnings.append("Only instruction-based sampling period is currently supported by Arm SPE.")
            elif ch == "i":
                warnings.append("Only instruction-based sampling period is currently supported by Arm SPE.")
    if "i" in letters and period is not None and period > 1:
        warnings.append("Arm SPE has a hardware-based sample period.\n"
                        "Additional instruction events will be discarded by --itrace")
    return ItraceOptions(letters, period, warnings)


def has_spe(pf) -> bool:
    """True when the open perf.data holds an Arm SPE AUXTRACE_INFO (perf record
    writes it among the first records, before any sample)."""
    from . import might_hold_spe

    if not might_hold_spe(pf):
        return False  # a stream (read once: its records are the reader's), or only core/software events
    for n, (type_, _misc, mv, _off) in enumerate(pf.raw_records()):
        if type_ == abi.PERF_RECORD_AUXTRACE_INFO:
            return len(mv) >= 12 and struct.unpack_from("<I", mv, 8)[0] == 4
        if type_ == abi.PERF_RECORD_SAMPLE or n > 1024:
            break
    return False


def _sample_dtype(with_time: bool) -> np.dtype:
    names = ["type", "misc", "size", "identifier", "ip", "pid", "tid"]
    formats = ["<u4", "<u2", "<u2", "<u8", "<u8", "<u4", "<u4"]
    if with_time:
        names.append("time")
        formats.append("<u8")
    names += ["addr", "cpu", "res", "period", "weight", "data_src", "phys_addr"]
    formats += ["<u8", "<u4", "<u4", "<u8", "<u8", "<u8", "<u8"]
    return np.dtype({"names": names, "formats": formats})


class _Synth:
    def __init__(self, pf, opts: ItraceOptions) -> None:
        from ..memory.samples import _time_conv
        from .perfdata import _header_midr, read_auxtrace_info

        self.opts = opts
        self.info = read_auxtrace_info(pf)
        self.header_midr = _header_midr(pf)
        spe = [a for a in pf.attrs if a.attr.type == self.info.pmu_type] or pf.attrs[:1]
        self.spe_attr = spe[0].attr
        self.with_time = any(a.attr.sample_type & S.TIME for a in pf.attrs)
        self.conv = _time_conv(pf) if self.with_time else None
        base = (spe[0].ids[0] if spe[0].ids else 0) + 1_000_000_000
        self.kinds = []  # (index in EVENTS, name, id)
        for k, (name, letter, _bit) in enumerate(EVENTS):
            if not opts.wants(letter) or (letter == "i" and opts.period is None):
                continue
            self.kinds.append((k, name, base + len(self.kinds)))
        self.dtype = _sample_dtype(self.with_time)
        self.tid_pid: dict[int, int] = {}
        self.instr_count: dict[int, int] = {}
        self.counts = {name: 0 for _, name, _ in self.kinds}

    def attrs(self):
        st = SAMPLE_TYPE_BASE | (int(S.TIME) if self.with_time else 0)
        out = []
        for k, name, sid in self.kinds:
            a = abi.perf_event_attr(type=abi.PERF_TYPE_HARDWARE, config=1 if name == "instructions" else 0,
                                    sample_period=self.opts.period if name == "instructions" else 1, sample_type=st,
                                    sample_id_all=self.spe_attr.sample_id_all,
                                    exclude_user=self.spe_attr.exclude_user, exclude_kernel=self.spe_attr.exclude_kernel,
                                    exclude_hv=self.spe_attr.exclude_hv, exclude_guest=self.spe_attr.exclude_guest,
                                    exclude_host=self.spe_attr.exclude_host)
            out.append((a, [sid], name))
        return out

    def side_band(self, type_: int, mv) -> None:
        if type_ in (abi.PERF_RECORD_COMM, abi.PERF_RECORD_FORK) and len(mv) >= 16:
            pid, tid = struct.unpack_from("<II", mv, 8 if type_ == abi.PERF_RECORD_COMM else 8)
            if type_ == abi.PERF_RECORD_FORK:
                pid, _ppid, tid = struct.unpack_from("<III", mv, 8)
            self.tid_pid[tid] = pid

    def samples(self, buf) -> bytes:
        from ..memory.samples import spe_time_to_perf
        from ..memory.spe import records_data_src
        from .records import decode_records

        midr = self.info.midr.get(buf.cpu, self.header_midr) if self.info else self.header_midr
        recs = decode_records(bytes(buf.data), cpu=max(buf.cpu, 0), midr=midr)
        n = len(recs)
        if not n or not self.kinds:
            return b""
        ev = recs.columns["events"].astype(np.uint64)
        ds = records_data_src(recs)
        conds = []
        phantom = b""
        for k, name, sid in self.kinds:
            _n, _l, bit = EVENTS[k]
            if bit is not None:
                m = ((ev >> np.uint64(bit)) & np.uint64(1)).astype(bool)
            elif name == "memory":
                m = ds != 0
            else:  # instructions: every period-th record of this queue
                if not self.with_time and buf.idx not in self.instr_count:
                    # why: perf decodes a timeless queue as "sample, then decode"
                    # (arm_spe_run_decoder), so its first instruction sample is of the
                    # still-empty record: ip 0, no address. Reproduced to give perf's counts.
                    self.instr_count[buf.idx] = 0
                    phantom = self._phantom(buf, sid)
                start = self.instr_count.get(buf.idx, 0)
                seq = start + np.arange(1, n + 1)
                m = seq % self.opts.period == 0
                self.instr_count[buf.idx] = int((start + n) % self.opts.period)
            conds.append(m)
        mask = np.stack(conds, axis=1)  # (records, kinds), in perf's per-record order
        rec_i, kind_i = np.nonzero(mask)
        out = np.zeros(len(rec_i), dtype=self.dtype)
        out["type"] = abi.PERF_RECORD_SAMPLE
        pc = recs.pc[rec_i]
        out["misc"] = np.where(pc >= np.uint64(KERNEL_START), abi.PERF_RECORD_MISC_KERNEL, abi.PERF_RECORD_MISC_USER)
        out["size"] = self.dtype.itemsize
        ids = np.array([sid for _, _, sid in self.kinds], dtype=np.uint64)
        out["identifier"] = ids[kind_i]
        out["ip"] = pc
        has_ctx = recs.present["context"][rec_i]
        ctx = recs.columns["context"].astype(np.int64)[rec_i]
        tid = np.where(has_ctx, ctx, np.int64(buf.tid))
        pid = np.array([self.tid_pid.get(int(t), int(t)) for t in tid], dtype=np.int64) if len(tid) else tid
        out["pid"] = pid.astype(np.uint32)
        out["tid"] = tid.astype(np.uint32)
        if self.with_time:
            out["time"] = spe_time_to_perf(recs.timestamp[rec_i], self.conv)
        branch = np.array([name == "branch-miss" for _, name, _ in self.kinds])[kind_i]
        out["addr"] = np.where(branch, recs.branch_target[rec_i], recs.vaddr[rec_i])
        out["cpu"] = buf.cpu & 0xFFFFFFFF
        period = np.array([self.opts.period if name == "instructions" else 1 for _, name, _ in self.kinds],
                          dtype=np.uint64)
        out["period"] = period[kind_i]
        out["weight"] = recs.columns["tot_lat"].astype(np.uint64)[rec_i]
        out["data_src"] = ds[rec_i]
        out["phys_addr"] = recs.paddr[rec_i]
        for j, (_k, name, _sid) in enumerate(self.kinds):
            self.counts[name] += int((kind_i == j).sum())
        return phantom + out.tobytes()

    def _phantom(self, buf, sid: int) -> bytes:
        # the empty record counts toward the instruction period like any other
        self.instr_count[buf.idx] = 1 % self.opts.period
        if self.opts.period != 1:
            return b""
        row = np.zeros(1, dtype=self.dtype)
        row["type"], row["misc"], row["size"] = abi.PERF_RECORD_SAMPLE, abi.PERF_RECORD_MISC_USER, self.dtype.itemsize
        row["identifier"] = sid
        row["pid"] = self.tid_pid.get(buf.tid, buf.tid) & 0xFFFFFFFF
        row["tid"] = buf.tid & 0xFFFFFFFF
        row["cpu"] = buf.cpu & 0xFFFFFFFF
        row["period"] = self.opts.period
        self.counts["instructions"] += 1
        return row.tobytes()


_DROP = (abi.PERF_RECORD_AUXTRACE_INFO, abi.PERF_RECORD_AUXTRACE)
_PIPE_ONLY = (abi.PERF_RECORD_HEADER_ATTR, abi.PERF_RECORD_HEADER_FEATURE, abi.PERF_RECORD_HEADER_TRACING_DATA)


def synthesize(source, dest, itrace: str | None = None, *, warn=None) -> dict[str, int]:
    """Write ``dest``: ``source`` with its SPE AUXTRACE data replaced by the
    synthesized samples (perf inject --itrace). Returns samples per event."""
    from ..perfdata import PerfDataFile
    from ..perfdata.writer import _LAYOUT_FEATURES, PerfDataWriter

    opts = parse_itrace(itrace)
    for w in opts.warnings:
        (warn or (lambda m: print(m, file=sys.stderr)))(w)
    src = source if isinstance(source, PerfDataFile) else PerfDataFile(source)
    syn = _Synth(src, opts)
    attrs = [(a.attr, a.ids, a.name) for a in src.attrs] + syn.attrs()
    with PerfDataWriter(dest, attrs, host=False) as w:
        for bit, value in src.features.items():
            if bit not in _LAYOUT_FEATURES and bit != Feature.EVENT_DESC:
                w.features[bit] = value
        # why: without PERF_SAMPLE_TIME perf decodes "timeless": a queue's samples
        # are delivered when its thread exits, else at the end, queue by queue
        # (arm_spe_process_timeless_queues); with time they go where the data is.
        pending: dict[int, list[tuple[int, bytes]]] = {}

        def flush(tid: int | None) -> None:
            for idx in sorted(pending):
                keep = []
                for qtid, chunk in pending[idx]:
                    if tid is None or qtid == tid:
                        w.write(chunk)
                    else:
                        keep.append((qtid, chunk))
                pending[idx] = keep

        for type_, misc, mv, off, payload in src._decompressed_records():
            if type_ in _PIPE_ONLY:
                continue
            if type_ == abi.PERF_RECORD_AUXTRACE and payload is not None:
                from ..perfdata.reader import AuxtraceBuffer

                size, offset, ref, idx, _tid, cpu = struct.unpack_from("<QQQIIi", mv, 8)
                tid = struct.unpack_from("<i", mv, 36)[0]
                chunk = syn.samples(AuxtraceBuffer(off, size, offset, ref, idx, tid, cpu, payload))
                if chunk and syn.with_time:
                    w.write(chunk)
                elif chunk:
                    pending.setdefault(idx, []).append((tid, chunk))
                continue
            if type_ in _DROP:
                continue
            syn.side_band(type_, mv)
            if type_ == abi.PERF_RECORD_EXIT and pending and len(mv) >= 20:
                flush(struct.unpack_from("<i", mv, 16)[0])
            w.write(mv)
        flush(None)
    return syn.counts


def open_synthesized(pf, itrace: str | None = None):
    """A :class:`~pmuscope.perfdata.PerfDataFile` of ``pf`` with SPE samples
    synthesized, or None when ``pf`` holds no Arm SPE data."""
    from ..perfdata import PerfDataFile

    if not has_spe(pf):
        return None
    fd, tmp = tempfile.mkstemp(prefix="pmuscope-spe-", suffix=".data")
    os.close(fd)
    try:
        synthesize(pf, tmp, itrace)
        with open(tmp, "rb") as f:
            data = f.read()
    finally:
        os.unlink(tmp)
    out = PerfDataFile(data)
    return out
