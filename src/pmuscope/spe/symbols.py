"""Symbols for SPE records: each record's PC (and a branch's target) as
``symbol+offset`` and ``dso``, and a load/store's data address as its data
object (``[heap]``, ``libc.so.6``, ``anon``...).

User-space addresses resolve in the address space of the process the record
belongs to: the pid in its CONTEXT packet (CONTEXTIDR holds the thread id with
``CONFIG_PID_IN_CONTEXTIDR``, mapped to its process through the file's COMM,
FORK and MMAP records); a record without CONTEXT uses the file's only process
when it has exactly one (or ``--pid``), else stays ``[unknown]``. The address
spaces come from the perf.data side band (MMAP/MMAP2/COMM/FORK/KSYMBOL)
applied in file order up to each AUXTRACE chunk, or for a bare buffer from
``/proc/PID/maps`` of a live process.

Kernel addresses (EL1/EL2, or the top bit set) resolve through this machine's
``/proc/kallsyms`` only when the file was recorded on the running kernel (same
hostname and release in its header); when its kernel MMAP says ``_text`` sat
elsewhere (a later boot with another KASLR offset) the addresses are shifted
by the difference, as perf relocates with ``ref_reloc_sym``. Otherwise they
stay ``[kernel.kallsyms]`` / ``[unknown]``.

Every distinct ``(pid, address)`` is resolved once per batch.
"""

from __future__ import annotations

import os
import re
from typing import Iterator

import numpy as np

from ..errors import PmuscopeError
from ..symbols import KERNEL_DSO, UNKNOWN, Maps, Symbolizer
from .tables import SYMBOL_COLS

__all__ = ["SYMBOL_COLS", "SpeSymbolizer", "iter_spe_chunks_at", "kallsyms_text"]


_R_MMAP, _R_COMM, _R_FORK, _R_MMAP2, _R_KSYMBOL = 1, 3, 7, 10, 17  # enum perf_event_type
_SIDEBAND = (_R_MMAP, _R_COMM, _R_FORK, _R_MMAP2, _R_KSYMBOL)
_KERNEL_MISC = 1  # PERF_RECORD_MISC_KERNEL
_M56 = np.uint64((1 << 56) - 1)


def kallsyms_text(procfs_root: str = "/proc") -> int | None:
    """Address of ``_text`` in this machine's kallsyms (None when unreadable or hidden)."""
    try:
        with open(os.path.join(procfs_root, "kallsyms"), "rb") as f:
            data = f.read()
    except OSError:
        return None
    m = re.search(rb"^([0-9a-fA-F]+) [Tt] _text$", data, re.M)
    if m is None:
        return None
    return int(m.group(1), 16) or None


def iter_spe_chunks_at(path: str, midr: int | None = None) -> Iterator[tuple[int, int, int, bytes, str]]:
    """:func:`pmuscope.spe.perfdata.iter_spe_chunks` with each chunk's file
    offset first: ``(file_offset, cpu, midr, data, header line)``."""
    from ..perfdata import PerfDataFile
    from .perfdata import _header_midr, auxtrace_header_line, read_auxtrace_info

    with PerfDataFile(path) as pdf:
        info = read_auxtrace_info(pdf)
        if info is None:
            raise PmuscopeError(f"{path}: no PERF_RECORD_AUXTRACE_INFO, so no Arm SPE data (record with -e arm_spe_0//)")
        fallback = _header_midr(pdf)
        for buf in pdf.auxtrace():
            cpu = buf.cpu - (1 << 32) if buf.cpu >= 1 << 31 else buf.cpu
            m = midr if midr is not None else info.midr.get(buf.cpu, fallback)
            yield buf.file_offset, cpu, m, bytes(buf.data), auxtrace_header_line(buf)


class SpeSymbolizer:
    """Names the addresses of :class:`~pmuscope.spe.SpeRecords` batches.

    Build with :meth:`for_perf_data` (side band of a perf.data) or
    :meth:`for_pid` (a live process, for bare buffers); call :meth:`advance`
    with each AUXTRACE chunk's file offset before its records, then
    :meth:`columns` per batch.
    """

    def __init__(self, maps: Maps | None = None, *, kernel=False, sideband: list | None = None,
                 default_pid: int | None = None, force_pid: int | None = None, kernel_delta: int = 0,
                 kernel_note: str | None = None) -> None:
        self.maps = maps if maps is not None else Maps()
        self.symbolizer = Symbolizer(self.maps, kernel=kernel)
        self._sideband = sideband or []
        self._next = 0
        self._tgid: dict[int, int] = {}
        #: pid for records without CONTEXT (None: they stay [unknown])
        self.default_pid = default_pid
        #: every record resolves in this process (bare buffers with --pid)
        self.force_pid = force_pid
        #: added to kernel addresses: this boot's _text minus the file's
        self.kernel_delta = kernel_delta
        #: why kernel addresses stay unresolved (None when they resolve)
        self.kernel_note = kernel_note

    # -- construction -----------------------------------------------------------
    @classmethod
    def for_perf_data(cls, path: str, *, pid: int | None = None, kernel_symbols: bool | None = None,
                      procfs_root: str = "/proc") -> "SpeSymbolizer":
        """From a perf.data file's side band. ``pid`` is the process of records
        without CONTEXT (default: the file's only process, if it has one);
        ``kernel_symbols`` forces /proc/kallsyms on or off (default: on when the
        file comes from the running kernel)."""
        from ..perfdata import PerfDataFile
        from ..profile.model import _same_kernel

        sideband = []
        procs: set[int] = set()
        file_text = None
        with PerfDataFile(path) as pf:
            same = _same_kernel(pf) if kernel_symbols is None else kernel_symbols
            for item in pf.records():
                t = getattr(item, "type", None)
                if t not in _SIDEBAND:
                    continue
                sideband.append(item)
                if t in (_R_MMAP, _R_MMAP2):
                    if item.pid in (-1, 0xFFFFFFFF) or (item.misc & 7) == _KERNEL_MISC:
                        if file_text is None and item.filename.startswith(KERNEL_DSO) and item.pgoff:
                            file_text = item.pgoff  # perf: pgoff = address of ref_reloc_sym (_text)
                    elif item.pid > 0:
                        procs.add(item.pid)
        if pid is None and len(procs) == 1:
            pid = next(iter(procs))
        kernel, delta, note = False, 0, None
        if same:
            from ..profile._fastload import load_kernel_symbols

            ks = load_kernel_symbols(procfs_root)
            if ks.hidden_reason or not ks.tables:
                note = ks.hidden_reason or "kernel symbols are not readable"
            else:
                kernel = ks
                cur = kallsyms_text(procfs_root)
                if file_text is not None and cur is not None:
                    delta = cur - file_text
        else:
            note = f"{path} was recorded on another machine or kernel: kernel addresses are not resolved"
        return cls(kernel=kernel, sideband=sideband, default_pid=pid, kernel_delta=delta, kernel_note=note)

    @classmethod
    def for_pid(cls, pid: int, *, procfs_root: str = "/proc", kernel_symbols: bool = True) -> "SpeSymbolizer":
        """Every record in the address space of live process ``pid`` (its
        ``/proc/PID/maps``), kernel addresses from this machine's kallsyms: for
        a bare SPE buffer, which has no side band."""
        maps = Maps()
        maps.add_proc(pid, procfs_root)  # ProcessGoneError names the pid
        kernel, note = False, None
        if kernel_symbols:
            from ..profile._fastload import load_kernel_symbols

            ks = load_kernel_symbols(procfs_root)
            if ks.hidden_reason or not ks.tables:
                note = ks.hidden_reason or "kernel symbols are not readable"
            else:
                kernel = ks
        return cls(maps, kernel=kernel, force_pid=pid, default_pid=pid, kernel_note=note)

    # -- side band ---------------------------------------------------------------
    def advance(self, file_offset: int | None = None) -> None:
        """Apply the side-band records before ``file_offset`` (all when None)."""
        sb = self._sideband
        i = self._next
        apply = self.maps.apply
        tgid = self._tgid
        while i < len(sb) and (file_offset is None or sb[i].offset < file_offset):
            item = sb[i]
            apply(item)
            t = item.type
            if t in (_R_COMM, _R_FORK, _R_MMAP2, _R_MMAP) and item.pid not in (-1, 0xFFFFFFFF):
                tgid[item.tid] = item.pid
            i += 1
        self._next = i

    # -- resolution --------------------------------------------------------------
    def pids(self, recs) -> np.ndarray:
        """Process id of each record (-1 when unknown)."""
        n = len(recs)
        if self.force_pid is not None:
            return np.full(n, self.force_pid, np.int64)
        ctx = recs.columns["context"].astype(np.int64)
        has = recs.present["context"]
        out = np.full(n, -1 if self.default_pid is None else self.default_pid, np.int64)
        if has.any():
            u, inv = np.unique(ctx[has], return_inverse=True)
            mapped = np.array([self._tgid.get(int(t), int(t)) for t in u], np.int64)
            out[has] = mapped[inv.reshape(-1)]
        return out

    def _names(self, pid: np.ndarray, ips: np.ndarray, has: np.ndarray, is_kernel: np.ndarray,
               n: int) -> tuple[np.ndarray, np.ndarray]:
        sym_col = np.full(n, "", object)
        dso_col = np.full(n, "", object)
        rows = np.flatnonzero(has)
        if not len(rows):
            return sym_col, dso_col
        k = is_kernel[rows]
        # distinct (pid, address) pairs; a kernel address is the same in every
        # process (pid -2 marks it, -1 is an unknown process)
        p = np.where(k, -2, pid[rows])
        a = ips[rows]
        order = np.lexsort((a, p))
        ps, as_ = p[order], a[order]
        first = np.ones(len(order), bool)
        first[1:] = (ps[1:] != ps[:-1]) | (as_[1:] != as_[:-1])
        inv = np.empty(len(order), np.int64)
        inv[order] = np.cumsum(first) - 1
        upid, addr = ps[first], as_[first].copy()
        ukern = upid == -2
        if self.kernel_delta:
            addr[ukern] += np.uint64(self.kernel_delta % (1 << 64))
        upid = np.where(ukern, -1, upid)
        r = self.symbolizer.resolve_many(upid, addr, kernel=ukern)
        sy = self.symbolizer
        syms = [sy.sym_name(int(s)) + f"+{int(o):#x}" if s >= 0 else UNKNOWN
                for s, o in zip(r.sym_id.tolist(), r.offset.tolist())]
        dsos = [sy.dso_name(int(d)) for d in r.dso_id.tolist()]
        sym_col[rows] = np.array(syms, object)[inv]
        dso_col[rows] = np.array(dsos, object)[inv]
        return sym_col, dso_col

    def _data_objects(self, pid: np.ndarray, va: np.ndarray, has: np.ndarray, n: int) -> np.ndarray:
        from ..memory.samples import data_object_name

        out = np.full(n, "", object)
        rows = np.flatnonzero(has)
        if not len(rows):
            return out
        kern = (va[rows] >> np.uint64(63)).astype(bool)
        out[rows[kern]] = KERNEL_DSO
        user = rows[~kern]
        out[user] = UNKNOWN
        p = pid[user]
        for q in np.unique(p):
            sel = user[p == q]
            space = self.maps.spaces.get(int(q))
            if space is None or not len(space):
                continue
            idx = space.find_many(va[sel])
            ok = idx >= 0
            if not ok.any():
                continue
            ui, inv = np.unique(idx[ok], return_inverse=True)
            names = np.array([data_object_name(space[int(i)].filename) for i in ui], object)
            out[sel[ok]] = names[inv.reshape(-1)]
        return out

    def columns(self, recs) -> dict[str, np.ndarray]:
        """Per-record string columns (``""`` where the record has no such
        address): ``symbol``, ``dso`` (the PC), ``br_tgt_symbol``,
        ``br_tgt_dso`` (a branch's target), ``data_object`` (the data VA)."""
        n = len(recs)
        pid = self.pids(recs)
        col, has = recs.columns, recs.present
        out: dict[str, np.ndarray] = {}

        def kernel_of(raw):
            el = (raw >> np.uint64(61)) & np.uint64(3)
            return (el == 1) | (el == 2)

        pc = recs.pc
        k = kernel_of(col["pc_raw"]) | (pc >> np.uint64(63)).astype(bool)
        out["symbol"], out["dso"] = self._names(pid, pc, has["pc_raw"], k, n)
        tgt = recs.branch_target
        k = kernel_of(col["tgt_raw"]) | (tgt >> np.uint64(63)).astype(bool)
        out["br_tgt_symbol"], out["br_tgt_dso"] = self._names(pid, tgt, has["tgt_raw"] & (recs.op_class == 2), k, n)
        out["data_object"] = self._data_objects(pid, recs.vaddr, has["va_raw"] & (recs.op_class == 1), n)
        return out
