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
import weakref
from typing import Iterator

import numpy as np

from ..kernel import abi
from ..records import native as _native_decode
from ..records.decode import chain_from_first
from ..symbols import KERNEL_DSO, KernelSymbols, SymbolTable
from ..symbols.table import _ends

CHUNK_BYTES = 1 << 20  # decoded at a time: larger chunks are no faster and hold more memory


def chunk_bytes(size: int | None) -> int:
    """Bytes decoded at a time from a data section of ``size`` bytes (None:
    not known, a pipe): :data:`CHUNK_BYTES`, or less for a small recording, down to
    a quarter of it (~a 32nd of the size, in 64 KiB steps). A reader holds
    about a chunk, its decoded samples and the samples waiting for their
    round, so a 10 MB file read 1 MiB at a time holds several MB more than
    read 320 KiB at a time; some 30 chunks cost no measurable time, and
    large files keep the full size (fewer steps). A pipe's chunks are a
    quarter too: its blocks are copies (read, then joined to the rest of the
    last one), a few of them alive at a time, where a file's are views of its
    pages (perf.data piped into ``script``: 5-6 MB less, in the same time)."""
    if not size or size <= 0:
        return CHUNK_BYTES // 4
    return max(CHUNK_BYTES // 4, min(CHUNK_BYTES, ((size + 31) // 32 + 0xFFFF) & ~0xFFFF))
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_KEEP = np.zeros(256, dtype=bool)
_KEEP[list(b"TtWwDdBb")] = True  # perf's symbol_type__filter()


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
    if _starts_with_auxtrace_info(path, off, size):
        return None  # AUXTRACE payloads follow without the AUXTRACE feature bit (perf reads such files too)
    return _chunks(path, off, size, chunk_bytes(size))


def _starts_with_auxtrace_info(path: str, off: int, size: int, max_records: int = 512) -> bool:
    """True when a PERF_RECORD_AUXTRACE_INFO (70) is among the first records:
    perf record writes it before any AUXTRACE, so its absence there means no
    AUX payloads hide between records."""
    import struct

    with open(path, "rb") as f:
        f.seek(off)
        head = f.read(min(size, 1 << 20))
    pos = 0
    for _ in range(max_records):
        if pos + 8 > len(head):
            break
        type_, _misc, rsize = struct.unpack_from("<IHH", head, pos)
        if type_ == 70:
            return True
        if rsize < 8:
            break
        pos += rsize
    return False


_MAX_RECORD = 1 << 16  # perf_event_header.size is a u16


def _chunks(path: str, off: int, size: int, chunk: int | None = None) -> Iterator[tuple[int, memoryview]]:
    """Chunks of about ``chunk`` bytes (None: :data:`CHUNK_BYTES`)."""
    chunk = chunk or CHUNK_BYTES
    return _read_chunks(path, off, size, chunk) if _native_decode.enabled() else \
        _mapped_chunks(path, off, size, chunk=chunk)


def _read_chunks(path: str, off: int, size: int, step: int | None = None) -> Iterator[tuple[int, memoryview]]:
    """The chunks of :func:`_mapped_chunks`, read into buffers with the C
    walker finding the cuts. Touching a memory map costs a page fault per page
    (on a VM several times a copy of the page: ~0.3 s for 245 MB where these
    reads take ~0.03 s), and so does a fresh buffer per chunk once the heap
    gives its top back to the kernel, so a buffer is read into again as soon as
    nothing holds a view of it (see :func:`_free_buffer`). When the headers do
    not chain cleanly (or the file is shorter than it says), the rest is
    :func:`_mapped_chunks`' from there on, which decides as before."""
    step = step or CHUNK_BYTES
    pool: list[bytearray] = []
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        pos = 0
        while pos < size:
            cut = min(step, size - pos)
            want = size - pos if cut == size - pos else min(cut + _MAX_RECORD, size - pos)
            buf = _free_buffer(pool, want, min(step + _MAX_RECORD, size))
            try:
                got = os.preadv(fd, [memoryview(buf)[:want]], off + pos)
            except OSError:
                got = -1
            p = want if cut == want else _native_decode.next_boundary(memoryview(buf)[:want], 0, cut)
            if got != want or p is None or p <= 0:
                del buf
                pool.clear()
                yield from _mapped_chunks(path, off, size, pos, step)
                return
            chunk = memoryview(buf)[:p]
            del buf
            yield off + pos, chunk
            del chunk
            pos += p


_POOL = 3  # buffers kept for reuse: the chunk being decoded, the one its reader still names, a spare


def _free_buffer(pool: list[bytearray], want: int, full: int | None = None) -> bytearray:
    """A buffer of ``pool`` at least ``want`` bytes long that no view uses any
    more (the reader of a chunk may keep it, or arrays over it, as long as it
    likes: such a buffer is left to it), else a new one of ``full`` bytes (what
    any chunk of the file needs; a new bytearray is zeroed, so every page of it
    is resident: no larger than that)."""
    for buf in pool:
        if len(buf) >= want:
            try:  # a bytearray cannot be resized while a view of it exists
                buf.append(0)
                del buf[-1]
            except BufferError:
                continue
            return buf
    if len(pool) >= _POOL:
        pool.pop(0)  # held elsewhere (or too short): its holder keeps it alive
    buf = bytearray(max(want, min(full or CHUNK_BYTES + _MAX_RECORD, 1 << 24)))
    pool.append(buf)
    return buf


def _mapped_chunks(path: str, off: int, size: int, start: int = 0,
                   chunk: int | None = None) -> Iterator[tuple[int, memoryview]]:
    chunk = chunk or CHUNK_BYTES
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buf = memoryview(mm)
    h16 = buf[off:off + size].cast("H")
    hsize = np.frombuffer(mm, dtype="<u2", count=size // 2, offset=off)[3::4]  # header.size of every word
    pos = start
    try:
        while pos < size:
            cut = min(pos + chunk, size)
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
            # the chunk is decoded: its pages leave this process's memory (read
            # again from the file if a view of them is still used), so a file of
            # any size costs a chunk's worth of resident pages, not its size
            lo = ((off + pos) // mmap.PAGESIZE) * mmap.PAGESIZE
            hi = ((off + p) // mmap.PAGESIZE) * mmap.PAGESIZE
            if hi > lo and _DONTNEED is not None:
                try:
                    mm.madvise(_DONTNEED, lo, hi - lo)
                except (OSError, ValueError):
                    pass
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
    bulk (the ~100k lines of kallsyms) and names decoded on demand.

    The core kernel's symbols are the same for the whole life of a boot
    (modules, BPF programs and trampolines come and go, but each carries a
    ``[module]`` tag), so the parsed core table is kept in the user's cache
    directory keyed by the boot id, and used only while the first page of
    ``kallsyms`` still reads the same (same KASLR base, addresses still
    visible to this reader). Reading ``/proc/kallsyms`` costs the kernel
    ~25 ms of formatting, one 4 KiB page per read(2), and parsing it ~10 ms
    more; the cached table is a memory map. Module symbols are read from
    ``kallsyms`` only when an address outside the core kernel needs them."""
    path = os.path.join(procfs_root, "kallsyms")
    try:
        with open(path, "rb", buffering=0) as f:
            first = f.read(_PAGE)
            boot = _boot_id(procfs_root) if first else None
            cached = _cache_load(boot, first) if boot else None
            if cached is not None:
                return _CoreKernelSymbols(cached, procfs_root)
            data = first + f.readall()
    except OSError:
        return KernelSymbols.load(procfs_root)
    fast = _from_kallsyms(data, procfs_root)
    if fast is None:
        return KernelSymbols.load(procfs_root)
    ks, name_at = fast
    if boot:
        _cache_store(boot, data, ks.tables[KERNEL_DSO], name_at)
    return ks


def _from_kallsyms(data: bytes, procfs_root: str) -> tuple[KernelSymbols, np.ndarray] | None:
    """Kernel and module symbols from the text of kallsyms (and where the core
    symbols' names lie in it), or None when its layout is not the usual one
    (the line parser then explains)."""
    try:
        fast = _parse_core(data)
    except (ValueError, IndexError):
        fast = None
    if fast is None:
        return None
    table, module_lines, name_at = fast
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
    return ks, name_at


class _CoreKernelSymbols(KernelSymbols):
    """The cached core kernel table; the first address outside the core
    kernel (a module, a BPF program, a trampoline) reads the rest of
    kallsyms. The core table object is kept: symbol ids already handed out
    for it stay valid."""

    def __init__(self, table: SymbolTable, procfs_root: str) -> None:
        super().__init__(tables={KERNEL_DSO: table}, kernel_start=int(table.starts[0]),
                         kernel_end=int(table.ends[-1]))
        self._procfs_root: str | None = procfs_root

    def dso_of(self, addrs: np.ndarray) -> list[tuple[str, np.ndarray]]:
        if self._procfs_root is not None:
            a = np.asarray(addrs, dtype=np.uint64)
            if len(a) and ((a < np.uint64(self.kernel_start)) | (a >= np.uint64(self.kernel_end))).any():
                self._complete()
        return super().dso_of(addrs)

    def _complete(self) -> None:
        root, self._procfs_root = self._procfs_root, None
        try:
            with open(os.path.join(root, "kallsyms"), "rb") as f:
                fast = _from_kallsyms(f.read(), root)
        except OSError:
            fast = None
        if fast is None:
            return
        full = fast[0]
        self.modules = full.modules
        for dso, t in full.tables.items():
            if dso != KERNEL_DSO:
                self.tables[dso] = t


# --- the core kernel table cache -----------------------------------------------------

_PAGE = 4096
_FORMAT = 3
_MAGIC = b"PMKSYM%02d" % _FORMAT
# magic, u64 symbols, u64 kallsyms bytes, u64 reserved; then the bounds (u64[n + 1]: each
# symbol's start, the last one's end: the core table's symbols end where the next one
# starts), the name offsets (u32[n] starts, u32[n] ends) and the kallsyms text
_HEAD = 32


# one cache directory and boot id for everything pmuscope keeps per boot
from ..system.cache import boot_id as _boot_id, cache_dir  # noqa: E402


def _cache_path(boot: str) -> str | None:
    d = cache_dir()
    # the format in the name: two pmuscope versions on one machine (a venv and a pipx
    # install) keep a table each instead of replacing each other's on every run
    return os.path.join(d, f"kallsyms{_FORMAT}-{boot}-{os.geteuid()}.bin") if d else None


def kernel_table_kept(procfs_root: str = "/proc") -> bool:
    """True when this boot's core kernel table is kept (then
    :func:`load_kernel_symbols` maps it in about a millisecond: no need to
    start it early in a thread, nor at all for a file without kernel samples)."""
    boot = _boot_id(procfs_root)
    path = _cache_path(boot) if boot else None
    return path is not None and os.path.exists(path)


def _cache_load(boot: str, first: bytes) -> SymbolTable | None:
    """The cached core table of this boot, if its kallsyms began with ``first``.

    Only the bounds are mapped (the table's starts and ends are two views of
    them, so nothing is computed or copied); names and their offsets are read
    with ``pread``: a page touched in a map brings its neighbours in with it
    (fault-around: whole page-cache folios here, up to hundreds of KiB), and
    looking up the names of a few hundred sampled kernel functions through the
    map made most of the 8 MB file resident (~7 MB of a small report's peak)."""
    path = _cache_path(boot)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        os.close(fd)
        return None
    n = size = -1
    if len(mm) >= _HEAD and mm[:8] == _MAGIC:
        n, size, _ = np.frombuffer(mm, np.uint64, 3, 8).tolist()
    names = _HEAD + 8 * (n + 1)
    body = names + 8 * n
    if n <= 0 or len(mm) != body + size or size < len(first) or os.pread(fd, len(first), body) != first:
        mm.close()
        os.close(fd)
        return None
    starts = np.frombuffer(mm, np.uint64, n, _HEAD)
    ends = np.frombuffer(mm, np.uint64, n, _HEAD + 8)

    def name_of(i: int) -> str:
        s = int.from_bytes(os.pread(fd, 4, names + 4 * i), "little")
        e = int.from_bytes(os.pread(fd, 4, names + 4 * (n + i)), "little")
        return os.pread(fd, max(e - s, 0), body + s).decode("utf-8", "replace")

    # the descriptor lives as long as the table (closed with it: a library that loads
    # many profiles does not collect open files)
    weakref.finalize(name_of, os.close, fd)
    return SymbolTable(starts, ends, name_of)


def _cache_store(boot: str, data: bytes, table: SymbolTable, name_at: np.ndarray) -> None:
    """Keep the parsed core table for the rest of this boot (best effort:
    an unwritable cache directory only costs the next run the parse)."""
    path = _cache_path(boot)
    n = len(table)
    if path is None or not n or len(data) >= 1 << 32:
        return
    if n > 1 and not np.array_equal(table.ends[:-1], table.starts[1:]):
        return  # not the layout the bounds hold (the core table's symbols are zero-sized)
    from ..system.cache import store

    head = _MAGIC + np.array([n, len(data), 0], dtype=np.uint64).tobytes()
    bounds = np.empty(n + 1, dtype=np.uint64)
    bounds[:n] = table.starts
    bounds[n] = table.ends[-1]
    # tables of earlier boots (of any format) are never valid again, nor half-written
    # ones of this format (a process that exited while its loader thread was writing)
    suffix = f"-{os.geteuid()}.bin"
    store(path, [head, bounds.tobytes(), np.ascontiguousarray(name_at, dtype=np.uint32).tobytes(), data],
          lambda name: name.startswith("kallsyms") and suffix in name and
          (boot not in name or name.startswith(f"kallsyms{_FORMAT}-")))


def _hex_fields(data: bytes, starts: np.ndarray) -> np.ndarray | None:
    """The 16 hex digits at the start of each line as uint64 (None when one
    is not 16 hex digits). The digits are copied out 8 bytes at a time
    through one uint64 view per byte alignment, and decoded by
    ``bytes.fromhex``: ~1 ms for kallsyms' ~120k lines."""
    words = np.empty((len(starts), 2), dtype=np.uint64)
    lanes = starts & 7
    for r in range(8):
        sel = np.flatnonzero(lanes == r)
        if not len(sel):
            continue
        w = np.frombuffer(data, dtype=np.uint64, count=(len(data) - r) // 8, offset=r)
        q = (starts[sel] - r) >> 3
        words[sel, 0] = w[q]
        words[sel, 1] = w[q + 1]
    try:
        raw = bytes.fromhex(words.tobytes().decode("ascii"))
    except ValueError:  # not hex digits (UnicodeDecodeError is one too)
        return None
    if len(raw) != 8 * len(starts):  # fromhex skips spaces between digit pairs
        return None
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def _parse_core(data: bytes):
    """(core kernel SymbolTable, module lines, where each symbol's name lies
    in ``data``: all starts, then all ends) or None when the layout is not
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
    addr = _hex_fields(data, starts)
    if addr is None:
        return None
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

    def name_of(i: int) -> str:
        return data[int(ns[i]):int(ne[i])].decode("utf-8", "replace")

    return SymbolTable(a, sym_ends, name_of), module_lines, np.concatenate((ns, ne))


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


def profile_source(pf, path: str | None = None, *, callchains: bool = True):
    """The decoded stream :func:`~pmuscope.profile.build_profile` reads from
    ``pf`` (a :class:`~pmuscope.perfdata.PerfDataFile`): the data section cut
    straight from the file when it is plain (``path`` names it), else the
    reader's chunks (pipe mode, zstd-compressed data, AUX payloads, directory
    format: records copied together into ~4 MiB chunks). Either way samples are
    decoded in large batches by :class:`RoundSource` when :func:`round_safe`
    (``callchains=False``: without call chains, for readers that use none);
    a ``RecordSource`` (batches cut at every side-band record) otherwise."""
    from ..records import AttrTable, RecordSource

    table = AttrTable([(a.attr, a.ids) for a in pf.attrs], names=[a.name for a in pf.attrs])
    chunks = plain_data_chunks(pf, path) if path is not None and path != "-" else None
    if chunks is None:
        chunks = pf.raw_chunks(max_bytes=chunk_bytes(pf.input_size), ordered=pf.directory_format,
                               release=True)  # as PerfDataFile.records()
    from ..progress import enabled, track_chunks

    if enabled():  # a line on a terminal's stderr while a large file loads
        size = getattr(getattr(getattr(pf, "header", None), "data", None), "size", None)
        chunks = track_chunks(chunks, size or None, f"loading {os.path.basename(path or 'perf.data')}")
    if round_safe(table):
        return RoundSource(chunks, table, callchains=callchains)
    return RecordSource(chunks, table)


class RoundSource:
    """Like :class:`~pmuscope.records.RecordSource`, for a consumer that orders
    samples by time itself (the profile builder): a chunk's samples are
    decoded in one batch and cut only at FINISHED_ROUND marks, not at every
    side-band record, and side-band records the profile does not use are
    counted without being built. Needs PERF_SAMPLE_TIME on every attr.

    :attr:`callchains` False (a reader that uses no call chains, like
    ``script -G``): batches carry none; the C decoder checks and skips them
    instead of copying them (most of a deep-stack file's bytes)."""

    def __init__(self, chunks, attrs, *, callchains: bool = True) -> None:
        self.chunks = chunks
        self.attrs = attrs
        self.callchains = callchains
        from ..records import DecodeStats

        self.stats = DecodeStats()

    def __iter__(self):
        from ..records.decode import _as_bytes_view, walk
        from ..records.sample import decode_samples
        from ..records.types import UserRecord, parse_sideband

        stats, attrs = self.stats, self.attrs
        for base, buf in self.chunks:
            buf = _as_bytes_view(buf)
            n = len(buf)
            stats.bytes += n
            sample_arr, size_arr, side = walk(buf, base)
            batch = None
            if len(sample_arr):
                stats.count(9, len(sample_arr))
                batch = decode_samples(buf, sample_arr, size_arr, attrs, base, stats, self.callchains)
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
            # no view of the chunk left here: its buffer is read into again for the next one
            del buf, batch, sample_arr, size_arr, side
