"""Walking a chunk of records, and :class:`RecordSource`, the stream of decoded
items every consumer (report, script, flame graphs ...) reads."""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, Union

import numpy as np

from .. import errors
from ..kernel import abi
from . import native as _native_decode
from .attrs import AttrTable
from .sample import SampleBatch, decode_samples
from .types import DecodeStats, UnknownRecord, UserRecord, parse_sideband

R = abi.PerfRecord
_HDR = struct.Struct("<IHH")
_SAMPLE = int(R.SAMPLE)
_USER_START = abi.PERF_RECORD_USER_TYPE_START
_AUXTRACE = int(R.AUXTRACE)

Chunk = Union[bytes, bytearray, memoryview]


def _as_bytes_view(buf: Chunk) -> Chunk:
    if isinstance(buf, (bytes, bytearray)):
        return buf
    mv = memoryview(buf)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def iter_headers(buf: Chunk, *, base_offset: int = 0) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(offset, type, misc, size)`` of each record in ``buf`` (offsets
    inside ``buf``), checking that every record is at least a header long and
    ends inside ``buf``."""
    buf = _as_bytes_view(buf)
    n = len(buf)
    off = 0
    unpack = _HDR.unpack_from
    while off < n:
        if n - off < 8:
            raise _truncated_header(base_offset + off, n - off)
        t, misc, size = unpack(buf, off)
        if size < 8 or off + size > n:
            raise _bad_size(base_offset + off, t, size, n - off)
        yield off, t, misc, size
        off += size


def _truncated_header(offset: int, left: int) -> errors.FormatError:
    return errors.FormatError(
        f"truncated record at byte offset {offset}: expected an 8-byte perf_event_header, only {left} bytes left",
        offset=offset,
    )


def _bad_size(offset: int, rtype: int, size: int, left: int) -> errors.FormatError:
    if size < 8:
        what = f"header.size={size}, expected at least 8 (the header itself)"
    else:
        what = f"header.size={size} runs past the end of the data ({left} bytes left)"
    return errors.FormatError(f"malformed record (type {rtype}) at byte offset {offset}: {what}", offset=offset)


def walk(buf: Chunk, base_offset: int, auxtrace_inline: bool = False) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int, int]]]:
    """``(sample offsets, sample sizes, side)`` of a chunk of whole records:
    the offsets and sizes of its SAMPLE records, and ``(offset, type, misc,
    size)`` of the others, offsets inside ``buf`` (the C walker, else the
    vectorized walk, else one record at a time, which names a bad offset)."""
    walked = _native_decode.walk(buf, auxtrace_inline)
    if walked is None and len(buf) % 8 == 0 and len(buf) >= 8:
        walked = _walk_vectorized(buf, auxtrace_inline)
    return walked if walked is not None else _walk(buf, base_offset, auxtrace_inline)


def _walk(buf: Chunk, base_offset: int, auxtrace_inline: bool = False) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int, int]]]:
    """Record boundaries by following header.size, one record at a time."""
    n = len(buf)
    sample_offs: list[int] = []
    sample_sizes: list[int] = []
    side: list[tuple[int, int, int, int]] = []
    unpack = _HDR.unpack_from
    append_off = sample_offs.append
    append_size = sample_sizes.append
    off = 0
    while off < n:
        if n - off < 8:
            raise _truncated_header(base_offset + off, n - off)
        t, misc, size = unpack(buf, off)
        if size < 8 or off + size > n:
            raise _bad_size(base_offset + off, t, size, n - off)
        if t == _SAMPLE:
            append_off(off)
            append_size(size)
        else:
            side.append((off, t, misc, size))
            if t == _AUXTRACE and auxtrace_inline:
                # perf's PERF_RECORD_AUXTRACE is followed by u64 size bytes of
                # AUX data that header.size does not cover (tools/perf/util/auxtrace.c)
                if size < 16:
                    raise _bad_size(base_offset + off, t, size, n - off)
                (payload,) = struct.unpack_from("<Q", buf, off + 8)
                if off + size + payload > n:
                    raise errors.FormatError(
                        f"PERF_RECORD_AUXTRACE at byte offset {base_offset + off}: its {payload}-byte AUX payload "
                        f"runs past the end of the data ({n - off - size} bytes left)", offset=base_offset + off)
                off += payload
        off += size
    return np.array(sample_offs, dtype=np.int64), np.array(sample_sizes, dtype=np.int64), side


def _walk_vectorized(buf: Chunk, auxtrace_inline: bool = False):
    """Record boundaries without a Python loop per record, or None.

    Every 8-byte word whose top 16 bits (``header.size``) are a non-zero
    multiple of 8 is a candidate header. If the candidates chain exactly —
    the first at 0, each one's ``offset + size`` the next candidate, the last
    ending at the end of the chunk — they are the records: by induction from
    offset 0 each is a real header. Anything else (a payload word that looks
    like a header, an odd size, corruption) returns None and the caller walks
    one record at a time, which also names the offending offset.
    """
    W = np.frombuffer(buf, dtype="<u8")
    hsize = np.frombuffer(buf, dtype="<u2")[3::4]  # the header.size field of every word
    cand = np.flatnonzero(((hsize & 7) == 0) & (hsize >= 8))
    if not len(cand) or cand[0] != 0:
        return None
    size_w = (hsize[cand] >> 3).astype(np.int64)
    nxt = cand + size_w
    if nxt[-1] != len(W) or not np.array_equal(nxt[:-1], cand[1:]):
        path = _follow_chain(cand, nxt, len(W))
        if path is None:
            return None
        cand, size_w = cand[path], size_w[path]
    heads = W[cand]
    types = (heads & np.uint64(0xFFFFFFFF)).astype(np.int64)
    if auxtrace_inline and (types == _AUXTRACE).any():
        return None  # its payload is not made of records: walk one by one
    is_sample = types == _SAMPLE
    offs = cand * 8
    sizes = size_w * 8
    if is_sample.all():
        return offs, sizes, []
    other = np.flatnonzero(~is_sample)
    misc = ((heads[other] >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    side = list(zip(offs[other].tolist(), types[other].tolist(), misc.tolist(), sizes[other].tolist()))
    return offs[is_sample], sizes[is_sample], side


def _follow_chain(cand: np.ndarray, nxt: np.ndarray, end: int) -> np.ndarray | None:
    """Indexes of the candidates reachable from the one at 0 (payload words
    that merely look like headers drop out); None if the chain does not end
    exactly at ``end``."""
    m = len(cand)
    pos = np.searchsorted(cand, nxt)
    hit = cand[np.minimum(pos, m - 1)] == nxt
    succ = np.where(hit, pos, np.where(nxt == end, m, m + 1))
    path = chain_from_first(succ)
    if path is None:
        return None
    if not np.array_equal(succ[path[:-1]], path[1:]) or succ[path[-1]] != m:
        return None  # the chain hit DEAD (or never reached the end)
    return path


def chain_from_first(succ: np.ndarray) -> np.ndarray:
    """The nodes on the path from node 0 through ``succ`` (successor index of
    each node; values >= ``len(succ)`` end a path), in order, when every
    successor lies after its node (record headers: each record starts after
    the one before it). The caller checks that the path is unbroken.

    Usually by elimination: a node that no remaining node leads to, other
    than node 0, is not on the path (records tile the data, so a record is
    never the successor of a payload word); dropping those round after round
    leaves the path, in as many rounds as the longest run of look-alikes
    leading into each other (one or two in real data). Past a few rounds,
    pointer doubling, which needs log2(path length) rounds whatever the data.
    """
    m = len(succ)
    alive = np.ones(m, dtype=bool)
    for _ in range(6):
        led = np.zeros(m + 2, dtype=bool)
        led[np.minimum(succ[alive], m)] = True
        led[0] = True
        still = alive & led[:m]
        if np.array_equal(still, alive):
            return np.flatnonzero(alive)
        alive = still
    jump = np.concatenate([np.minimum(succ, m), [m]])  # m (the end) is a fixed point
    path = np.zeros(1, dtype=np.int64)
    on_path = np.zeros(m + 1, dtype=bool)
    on_path[0] = True
    while True:
        on_path[jump[path]] = True
        grown = np.flatnonzero(on_path)
        if len(grown) == len(path):
            break
        path = grown
        jump = jump[jump]
    return path[path < m]


def decode(
    buf: Chunk,
    attrs: AttrTable,
    *,
    base_offset: int = 0,
    stats: DecodeStats | None = None,
    user_records: bool = True,
    unknown_records: bool = False,
    auxtrace_inline: bool = False,
) -> Iterator[object]:
    """Decode a chunk of whole records; yield :class:`SampleBatch` runs and
    side-band records in record order (see the package docstring).

    ``user_records``: yield perf's own record types (>= 64) as
    :class:`UserRecord`; ``unknown_records``: yield an :class:`UnknownRecord`
    for each skipped unknown kernel record (they are always counted).
    ``auxtrace_inline``: the chunk is a raw perf.data data section in which
    each PERF_RECORD_AUXTRACE is followed by its AUX payload (not covered by
    header.size); the payload is skipped and handed over as
    ``UserRecord.payload``. By default chunks hold records only (the perf.data
    reader's ``raw_chunks()`` leaves the payloads out).
    """
    if stats is None:
        stats = DecodeStats()
    buf = _as_bytes_view(buf)
    n = len(buf)
    stats.bytes += n
    sample_arr, size_arr, side = walk(buf, base_offset, auxtrace_inline)

    batch: SampleBatch | None = None
    if len(sample_arr):
        stats.count(_SAMPLE, len(sample_arr))
        batch = decode_samples(buf, sample_arr, size_arr, attrs, base_offset, stats)
        stats.samples += len(batch)
        if not side:
            if len(batch):
                yield batch
            return
    start = 0
    record_offsets = batch.offset if batch is not None else None
    for off, t, misc, size in side:
        if record_offsets is not None and start < len(record_offsets):
            stop = int(np.searchsorted(record_offsets, base_offset + off))
            if stop > start:
                yield batch._slice(start, stop)
                start = stop
        stats.count(t)
        if t >= _USER_START:
            if user_records:
                payload = None
                if t == _AUXTRACE and auxtrace_inline:
                    (plen,) = struct.unpack_from("<Q", buf, off + 8)
                    payload = bytes(buf[off + size : off + size + plen])
                yield UserRecord(base_offset + off, t, misc, bytes(buf[off : off + size]), payload)
            continue
        rec = parse_sideband(buf, off, t, misc, size, attrs, base_offset)
        if rec is None:
            stats.unknown += 1
            if unknown_records:
                yield UnknownRecord(base_offset + off, t, misc, size)
            continue
        if t == R.LOST:
            stats.lost += rec.lost
        elif t == R.LOST_SAMPLES:
            stats.lost_samples += rec.lost
        elif t == R.THROTTLE:
            stats.throttle += 1
        elif t == R.UNTHROTTLE:
            stats.unthrottle += 1
        yield rec
    if batch is not None and start < len(batch):
        yield batch._slice(start, len(batch))


class RecordSource:
    """The decoded-record stream: wraps any iterable of raw chunks (bare
    buffers, or ``(base_offset, buffer)`` pairs) and an :class:`AttrTable`.

    Iterating yields side-band records, :class:`UserRecord` and
    :class:`SampleBatch` items in stream order; :attr:`stats` accumulates over
    the whole stream. A live ring buffer (``RingBuffer.chunks()``) and the
    perf.data reader's data-section chunks both plug in here.
    """

    def __init__(self, chunks: Iterable[Chunk | tuple[int, Chunk]], attrs: AttrTable, *, user_records: bool = True) -> None:
        self.chunks = chunks
        self.attrs = attrs
        self.user_records = user_records
        self.stats = DecodeStats()

    def __iter__(self) -> Iterator[object]:
        pos = 0
        for item in self.chunks:
            if isinstance(item, tuple):
                base, buf = item
            else:
                base, buf = pos, item
            yield from decode(buf, self.attrs, base_offset=base, stats=self.stats, user_records=self.user_records)
            pos = base + len(buf)

    def batches(self) -> Iterator[SampleBatch]:
        """Only the sample batches (side-band records are still counted)."""
        for item in self:
            if isinstance(item, SampleBatch):
                yield item

    def all_samples(self) -> SampleBatch | None:
        """Every sample of the stream in one batch (None if there were none)."""
        parts = list(self.batches())
        return SampleBatch.concat(parts) if parts else None
