"""Fast paths for reading a recording: whole-record chunks cut straight from a
plain perf.data data section, the profile builder's decoding (:class:`RoundSource`:
sample batches cut only at FINISHED_ROUND marks), and ``/proc/kallsyms``
parsed with numpy.

Each gives the same result as the general code (``PerfDataFile.raw_chunks``,
``RecordSource``, ``KernelSymbols.load``) and falls back to it when the input
is not the case it is made for (pipe mode, compressed data or AUX payloads
for the chunks; records without timestamps for :class:`RoundSource`; an
unusual kallsyms layout).
"""

from __future__ import annotations

import mmap
import os
from typing import Iterator

import numpy as np

from ..kernel import abi
from ..records.decode import chain_from_first
from ..symbols import KERNEL_DSO, KernelSymbols, SymbolTable
from ..symbols.table import _ends

CHUNK_BYTES = 4 << 20
_KEEP = np.zeros(256, dtype=bool)
_KEEP[list(b"TtWwDdBb")] = True  # perf's symbol_type__filter()
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def plain_data_chunks(pf, path: str) -> Iterator[tuple[int, memoryview]] | None:
    """``(file offset, chunk)`` pairs covering the data section of a
    file-mode perf.data with no compressed records and no AUX payloads, cut
    at record boundaries every ~4 MiB; None when the file is not that case."""
    from ..perfdata import Feature

    if pf.pipe if hasattr(pf, "pipe") else pf.header.pipe:
        return None
    if Feature.COMPRESSED in pf.features or Feature.AUXTRACE in pf.features:
        return None
    off, size = pf.header.data.offset, pf.header.data.size
    if size <= 0 or size % 8 or off % 8:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if off + size > st.st_size:
        return None
    return _chunks(path, off, size)


def _chunks(path: str, off: int, size: int) -> Iterator[tuple[int, memoryview]]:
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buf = memoryview(mm)
    h16 = buf[off:off + size].cast("H")
    hsize = np.frombuffer(mm, dtype="<u2", count=size // 2, offset=off)[3::4]  # header.size of every word
    pos = 0
    try:
        while pos < size:
            cut = min(pos + CHUNK_BYTES, size)
            p = size if cut == size else _next_boundary(hsize, pos >> 3, cut >> 3) if pos % 8 == 0 else None
            if p is None:  # headers that do not chain (or a corrupt size left us unaligned): walk them one by one
                p = pos
                while p < cut:
                    sz = h16[(p >> 1) + 3]
                    if sz < 8:
                        break  # malformed: hand the rest over, the decoder names the offset
                    p += sz
            if p <= pos or p > size or p < cut and p != size:
                p = size
            yield off + pos, buf[off + pos:off + p]
            pos = p
    finally:
        del h16, hsize
        buf.release()
        try:
            mm.close()
        except BufferError:  # views still held by the caller: freed with them
            pass


def _next_boundary(hsize: np.ndarray, pos: int, cut: int) -> int | None:
    """Byte offset of the first record boundary at or after word ``cut``,
    following the record headers from word ``pos`` (a boundary), without a
    Python step per record; None when the headers do not chain cleanly (the
    caller then walks them one by one). ``hsize`` is the ``header.size``
    field of every 8-byte word of the data.

    Candidates are the words that can be a header (a non-zero multiple of 8
    in ``header.size``) in ``[pos, cut + 8 Ki words)``: a record is at most
    64 KiB, so one starts in that window. The records are the candidates on
    the chain from ``pos`` (:func:`~pmuscope.records.decode.chain_from_first`)."""
    h = hsize[pos:min(len(hsize), cut + 8192)]
    cand = np.flatnonzero(((h & 7) == 0) & (h >= 8))
    if not len(cand) or cand[0] != 0:
        return None
    nxt = cand + (h[cand] >> 3)
    m = len(cand)
    at = np.searchsorted(cand, nxt)
    succ = np.where(cand[np.minimum(at, m - 1)] == nxt, at, m)  # m: leaves the window, or no header there
    path = chain_from_first(succ)
    if not np.array_equal(succ[path[:-1]], path[1:]):
        return None
    k = int(np.searchsorted(cand[path], cut - pos))
    if k == len(path):
        return None
    return (pos + int(cand[path[k]])) * 8


def load_kernel_symbols(procfs_root: str = "/proc") -> KernelSymbols:
    """:meth:`KernelSymbols.load` with the core kernel's symbols parsed in
    bulk (the ~100k lines of kallsyms) and names decoded on demand."""
    try:
        with open(os.path.join(procfs_root, "kallsyms"), "rb") as f:
            data = f.read()
    except OSError:
        return KernelSymbols.load(procfs_root)
    try:
        fast = _parse_core(data)
    except (ValueError, IndexError):
        fast = None
    if fast is None:
        return KernelSymbols.load(procfs_root)
    table, module_lines = fast
    try:
        with open(os.path.join(procfs_root, "modules")) as f:
            modules = f.read()
    except OSError:
        modules = ""
    ks = KernelSymbols.parse(b"\n".join(module_lines), modules)
    ks.tables[KERNEL_DSO] = table
    if len(table):
        ks.kernel_start = int(table.starts[0])
        ks.kernel_end = int(table.ends[-1])
    ks.addresses_hidden = False
    ks.hidden_reason = None
    return ks


def _parse_core(data: bytes):
    """(core kernel SymbolTable, module lines) or None when the layout is not
    the usual ``<16 hex> <type> <name>[\\t[module]]``."""
    if not data:
        return None
    arr = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    if not len(nl) or nl[-1] != len(arr) - 1:
        nl = np.append(nl, len(arr))
    starts = np.concatenate(([0], nl[:-1] + 1))
    ends = nl
    starts, ends = starts[ends > starts], ends[ends > starts]
    if not len(starts) or (ends - starts < 20).any():
        return None
    if (arr[starts + 16] != 32).any() or (arr[starts + 18] != 32).any():
        return None
    digits = _HEX[arr[starts[:, None] + np.arange(16)]]
    if (digits == 255).any():
        return None
    addr = np.zeros(len(starts), dtype=np.uint64)
    for k in range(16):
        addr = (addr << np.uint64(4)) | digits[:, k].astype(np.uint64)
    if not addr.any():
        return None  # kptr_restrict: the general path explains why
    # a line with a tab names its module: the first tab at or after its start lies before its end
    tabs = np.flatnonzero(arr == 9)
    nxt_tab = np.searchsorted(tabs, starts)
    has_mod = nxt_tab < len(tabs)
    has_mod[has_mod] = tabs[nxt_tab[has_mod]] < ends[has_mod]
    module_lines = [data[s:e] for s, e in zip(starts[has_mod].tolist(), ends[has_mod].tolist())]
    keep = ~has_mod & _KEEP[arr[starts + 17]] & (addr != 0)
    a = addr[keep]
    ns, ne = starts[keep] + 19, ends[keep]
    order = np.argsort(a, kind="stable")
    a, ns, ne = a[order], ns[order], ne[order]
    if len(a) > 1:  # the last definition at an address wins, as in SymbolTable.from_arrays
        last = np.ones(len(a), dtype=bool)
        last[:-1] = a[1:] != a[:-1]
        a, ns, ne = a[last], ns[last], ne[last]
    sym_ends = _ends(a, np.zeros(len(a), dtype=np.uint64), True, None)
    ns_l, ne_l = ns.tolist(), ne.tolist()

    def name_of(i: int) -> str:
        return data[ns_l[i]:ne_l[i]].decode("utf-8", "replace")

    return SymbolTable(a, sym_ends, name_of), module_lines


# --- decoding for the profile builder ------------------------------------------------

#: side-band records the profile uses (the rest are only counted)
_WANTED = frozenset((1, 2, 3, 7, 10, 13, 17))  # MMAP, LOST, COMM, FORK, MMAP2, LOST_SAMPLES, KSYMBOL
_FINISHED_ROUND = 68
_THROTTLE, _UNTHROTTLE, _LOST, _LOST_SAMPLES = 5, 6, 2, 13


def round_safe(attrs) -> bool:
    """Whether :class:`RoundSource` may stand in for ``RecordSource``: every
    sample carries PERF_SAMPLE_TIME and every side-band record its time in the
    ``sample_id_all`` trailer. The profile builder then orders by time alone;
    a record without a time is applied when it arrives, so the samples before
    it in the stream must have arrived first (which only record order gives)."""
    return all(e.sample_type & abi.PerfSample.TIME and e.sample_id_all for e in attrs)


def profile_source(pf, path: str | None = None):
    """The decoded stream :func:`~pmuscope.profile.build_profile` reads from
    ``pf`` (a :class:`~pmuscope.perfdata.PerfDataFile`): the data section cut
    straight from the file when it is plain (``path`` names it), else the
    reader's chunks (pipe mode, zstd-compressed data, AUX payloads, directory
    format: records copied together into ~4 MiB chunks). Either way samples are
    decoded in large batches by :class:`RoundSource` when :func:`round_safe`;
    a ``RecordSource`` (batches cut at every side-band record) otherwise."""
    from ..records import AttrTable, RecordSource

    table = AttrTable([(a.attr, a.ids) for a in pf.attrs], names=[a.name for a in pf.attrs])
    chunks = plain_data_chunks(pf, path) if path is not None and path != "-" else None
    if chunks is None:
        chunks = pf.raw_chunks(ordered=pf.directory_format)  # as PerfDataFile.records()
    return RoundSource(chunks, table) if round_safe(table) else RecordSource(chunks, table)


class RoundSource:
    """Like :class:`~pmuscope.records.RecordSource`, for a consumer that orders
    samples by time itself (the profile builder): a chunk's samples are
    decoded in one batch and cut only at FINISHED_ROUND marks, not at every
    side-band record, and side-band records the profile does not use are
    counted without being built. Needs PERF_SAMPLE_TIME on every attr."""

    def __init__(self, chunks, attrs) -> None:
        self.chunks = chunks
        self.attrs = attrs
        from ..records import DecodeStats

        self.stats = DecodeStats()

    def __iter__(self):
        from ..records.decode import _as_bytes_view, _walk, _walk_vectorized
        from ..records.sample import decode_samples
        from ..records.types import UserRecord, parse_sideband

        stats, attrs = self.stats, self.attrs
        for base, buf in self.chunks:
            buf = _as_bytes_view(buf)
            n = len(buf)
            stats.bytes += n
            walked = _walk_vectorized(buf) if n % 8 == 0 and n >= 8 else None
            sample_arr, size_arr, side = walked if walked is not None else _walk(buf, base)
            batch = None
            if len(sample_arr):
                stats.count(9, len(sample_arr))
                batch = decode_samples(buf, sample_arr, size_arr, attrs, base, stats)
                stats.samples += len(batch)
            start = 0
            for off, t, misc, size in side:
                stats.count(t)
                if t == _FINISHED_ROUND:
                    if batch is not None:
                        stop = int(np.searchsorted(batch.offset, base + off))
                        if stop > start:
                            yield batch._slice(start, stop)
                            start = stop
                    yield UserRecord(base + off, t, misc, bytes(buf[off:off + size]))
                    continue
                if t >= 64:
                    continue
                if t == _THROTTLE:
                    stats.throttle += 1
                    continue
                if t == _UNTHROTTLE:
                    stats.unthrottle += 1
                    continue
                if t not in _WANTED:
                    continue
                rec = parse_sideband(buf, off, t, misc, size, attrs, base)
                if rec is None:
                    stats.unknown += 1
                    continue
                if t == _LOST:
                    stats.lost += rec.lost
                elif t == _LOST_SAMPLES:
                    stats.lost_samples += rec.lost
                yield rec
            if batch is not None and start < len(batch):
                yield batch._slice(start, len(batch))
