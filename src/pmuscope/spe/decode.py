"""Columnar SPE packet decoding with numpy.

Finding packet boundaries is inherently sequential (a packet's length depends
on its header), so the buffer is cut into blocks and every block is walked at
the same time, one numpy step per packet, starting from a guessed boundary at
the block start. SPE packets are short (at most 16 bytes), so a guessed walk
falls into step with the true one within a few packets; the true walk from the
previous block's exit is then replayed only up to that meeting point. The
result is exactly the packet sequence perf's byte-at-a-time decoder sees
(checked against :func:`pmuscope.spe.packets.iter_packets` in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .packets import (
    ADDRESS,
    BAD,
    CONTEXT,
    COUNTER,
    DATA_SOURCE,
    END,
    EVENTS,
    OP_TYPE,
    PAD,
    TIMESTAMP,
)

__all__ = ["PacketArrays", "decode_packets", "iter_packet_chunks", "BAD_INVALID_HEADER", "BAD_TRUNCATED"]

#: reason codes in :attr:`PacketArrays.bad_reason`
BAD_INVALID_HEADER = 1
BAD_TRUNCATED = 2

_BLOCK = 4096
_CHUNK = 1 << 22
#: how far into a zero run a walk can land (after a payload ending in zeros or
#: an alignment packet) and still jump the whole run in one step
_RUN_ENTRY_DEPTH = 4


def _build_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per header byte: packet type, payload length, length (short headers) and
    for the second byte of an extended header: type."""
    typ0 = np.full(256, BAD, np.uint8)
    plen = np.zeros(256, np.uint8)
    for h in range(256):
        p = 1 << ((h >> 4) & 3)
        if h == 0x00:
            typ0[h] = PAD
        elif h == 0x01:
            typ0[h] = END
        elif h == 0x71:
            typ0[h] = TIMESTAMP
        elif (h & 0xCF) == 0x42:
            typ0[h] = EVENTS
        elif (h & 0xCF) == 0x43:
            typ0[h] = DATA_SOURCE
        elif (h & 0xFC) == 0x64:
            typ0[h] = CONTEXT
        elif (h & 0xFC) == 0x48:
            typ0[h] = OP_TYPE
        elif (h & 0xFC) == 0x20:
            typ0[h] = 255  # extended: decided by the next byte
        elif (h & 0xF8) == 0xB0:
            typ0[h] = ADDRESS
        elif (h & 0xF8) == 0x98:
            typ0[h] = COUNTER
        if typ0[h] not in (BAD, PAD, END, 255):
            plen[h] = p
    typ1 = np.full(256, BAD, np.uint8)
    for h in range(256):
        if h == 0:
            typ1[h] = PAD  # alignment
        elif (h & 0xF8) == 0xB0:
            typ1[h] = ADDRESS
        elif (h & 0xF8) == 0x98:
            typ1[h] = COUNTER
    len0 = np.where(typ0 == 255, 0, 1 + plen).astype(np.uint8)
    return typ0, plen, len0, typ1


_TYP0, _PLEN, _LEN0, _TYP1 = _build_tables()
_IS_EXT = _TYP0 == 255
#: perf's packet index from a short header: address/counter index, context EL
#: index, op class, events payload length
_IDX0 = np.array(
    [
        (h & 7) if _TYP0[h] in (ADDRESS, COUNTER)
        else (h & 3) if _TYP0[h] in (CONTEXT, OP_TYPE)
        else _PLEN[h] if _TYP0[h] == EVENTS
        else 0
        for h in range(256)
    ],
    np.uint8,
)
_PAYLOAD_MASK = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)


@dataclass
class PacketArrays:
    """Packets of a buffer as parallel arrays (PAD and alignment packets left out).

    ``offset`` is the byte offset of each packet, ``type`` its
    :class:`~pmuscope.spe.packets.SpePacketType`, ``index`` perf's index
    (address/counter/context index, op class, events payload length),
    ``payload`` the little-endian payload. BAD packets (one byte each) carry
    ``bad_reason`` (invalid header or truncated at the end of the buffer).
    """

    offset: np.ndarray
    type: np.ndarray
    index: np.ndarray
    payload: np.ndarray
    bad_reason: np.ndarray
    size: int

    def __len__(self) -> int:
        return len(self.offset)

    @property
    def bad_offsets(self) -> np.ndarray:
        return self.offset[self.type == BAD]

    def __getitem__(self, sl: slice) -> "PacketArrays":
        return PacketArrays(self.offset[sl], self.type[sl], self.index[sl], self.payload[sl], self.bad_reason[sl], self.size)

    @classmethod
    def concat(cls, parts: list["PacketArrays"], size: int) -> "PacketArrays":
        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0)

        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint8), np.zeros(0, np.uint64), np.zeros(0, np.uint8), size)
        return cls(cat("offset"), cat("type"), cat("index"), cat("payload"), cat("bad_reason"), size)


def _lengths(d: np.ndarray, lo: int, hi: int, n: int) -> np.ndarray:
    """Packet length at every position of ``d[lo:hi]`` (the buffer has ``n``
    bytes; positions whose packet would be BAD get length 1). The first byte of
    a zero run gets the length of the whole run (capped at 255): every byte of a
    run is a PAD packet, so skipping it cannot move any later boundary."""
    seg = d[lo:hi]
    L = _LEN0[seg]  # uint8 copy
    ext = np.flatnonzero(_IS_EXT[seg])
    if len(ext):
        gpos = ext + lo
        h0 = seg[ext]
        h1 = d[np.minimum(gpos + 1, n - 1)]
        left = n - gpos
        t1 = _TYP1[h1]
        el = np.where(t1 == PAD, 0, 2 + (1 << ((h1 >> 4) & 3)).astype(np.int64))
        alignment = (1 << ((h0 & 0xF).astype(np.int64) + 1))
        al_len = alignment - (gpos & (alignment - 1))
        el = np.where(t1 == PAD, np.where(left >= alignment, al_len, 1), el)
        el = np.where(t1 == BAD, 1, el)
        el = np.where(left < 2, 1, el)
        el = np.where((t1 != PAD) & (t1 != BAD) & (left < el), 1, el)
        L[ext] = el
    # truncated packets can only start in the last 15 bytes
    tail_lo = max(lo, n - 16)
    if tail_lo < hi:
        t = np.arange(tail_lo, hi, dtype=np.int64)
        lt = L[t - lo].astype(np.int64)
        L[t - lo] = np.where(t + lt > n, 1, lt)
    z = (seg == 0).view(np.int8)
    edges = np.diff(z, prepend=np.int8(0), append=np.int8(0))
    run_start = np.flatnonzero(edges == 1).astype(np.int32)
    if len(run_start):
        # a walk enters a zero run at its start, or a few bytes in when the run
        # began inside the previous packet's payload (at most 15 bytes: payloads
        # are <= 8 bytes, alignment packets <= 16): jump to the end of the run
        run_end = np.flatnonzero(edges == -1).astype(np.int32)
        del z, edges
        multi = np.flatnonzero(run_end - run_start > 1)  # a 1-byte run already has length 1
        run_start, run_end = run_start[multi], run_end[multi]
        rs, rl = run_start, run_end - run_start
        for j in range(_RUN_ENTRY_DEPTH):
            L[rs + j] = np.minimum(rl - j, 255)
            more = rl > j + 1
            if not more.all():
                rs, rl = rs[more], rl[more]
                if not len(rs):
                    break
        long = np.flatnonzero(run_end - run_start > 255)
        if len(long):
            # a long run (an unused buffer tail) is crossed in hops of 255 from
            # wherever the walk entered it (within its first 16 bytes): give the
            # first 16 bytes of every 255-byte window the distance to the end
            ls, le = run_start[long], run_end[long]
            nwin = (le - ls + 254) // 255
            win = np.repeat(ls, nwin)
            win += 255 * (np.arange(len(win)) - np.repeat(np.cumsum(nwin) - nwin, nwin))
            wend = np.repeat(le, nwin)
            for j in range(16):
                at = win + j
                ok = at < wend
                L[at[ok]] = np.minimum(wend[ok] - at[ok], 255)
    return L


def _walk_chunk(d: np.ndarray, n: int, entry: int, chunk_end: int, block: int) -> tuple[np.ndarray, int]:
    """Packet start offsets on the true path from ``entry`` up to ``chunk_end``
    (packets starting before it), and the first boundary at or after it."""
    hi = min(n, chunk_end + 256)
    L = _lengths(d, entry, hi, n)
    span = chunk_end - entry
    starts = np.arange(0, span, block, dtype=np.int64)
    ends = np.minimum(starts + block, span)
    mark = np.zeros(span + 1, np.bool_)  # last slot: sink for inactive lanes
    pos = starts.copy()
    Lw = L  # uint8: adding it to the int64 positions widens per step
    sink = span
    step = 0
    while True:
        act = pos < ends
        if step % 8 == 0 and not act.any():
            break
        mark[np.where(act, pos, sink)] = True
        pos = np.where(act, pos + Lw[np.minimum(pos, len(Lw) - 1)], pos)
        step += 1
    mark[sink] = False
    # replay the true walk at each block start until it meets the guessed walk
    exit_pos = int(pos[0])
    for b in range(1, len(starts)):
        s, e = int(starts[b]), int(ends[b])
        p = exit_pos
        true_nodes = []
        while p < e and not mark[p]:
            true_nodes.append(p)
            p += int(Lw[p])
        if p < e:
            mark[s:p] = False
            exit_pos = int(pos[b])
        else:
            mark[s:e] = False
            exit_pos = p
        if true_nodes:
            mark[true_nodes] = True
    return np.flatnonzero(mark) + entry, exit_pos + entry


def _as_u8(data) -> np.ndarray:
    d = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    return d.reshape(-1).view(np.uint8)


def iter_packet_chunks(data: bytes | bytearray | memoryview | np.ndarray, block: int = _BLOCK, chunk: int = _CHUNK) -> Iterator[PacketArrays]:
    """Decode a raw SPE buffer ``chunk`` bytes at a time (bounded temporary
    memory), yielding :class:`PacketArrays` with offsets into the whole buffer."""
    d = _as_u8(data)
    n = len(d)
    entry = 0
    while entry < n:
        chunk_end = min(n, entry + chunk)
        starts, entry = _walk_chunk(d, n, entry, chunk_end, block)
        yield _classify(d, n, starts)


def decode_packets(data: bytes | bytearray | memoryview | np.ndarray, block: int = _BLOCK, chunk: int = _CHUNK) -> PacketArrays:
    """Decode every packet of a raw SPE buffer into :class:`PacketArrays`.

    Never raises on bad input: undecodable bytes become BAD packets at their
    offsets and decoding resumes at the next byte, as perf does.
    """
    d = _as_u8(data)
    parts = list(iter_packet_chunks(d, block, chunk))
    if len(parts) == 1:
        return parts[0]
    return PacketArrays.concat(parts, len(d))


def _classify(d: np.ndarray, n: int, P: np.ndarray) -> PacketArrays:
    """Packet arrays for the packet start offsets ``P`` of buffer ``d``."""
    h0 = d[P]
    nz = np.flatnonzero(h0)  # zero bytes are PADs: drop them first
    P, h0 = P[nz], h0[nz]
    # short headers decide everything from byte 0 (table lookups) ...
    t = _TYP0[h0]
    plen = _PLEN[h0]
    index = _IDX0[h0]
    reason = np.zeros(len(P), np.uint8)
    base = P + 1
    # ... extended headers (rare) from byte 1
    ext = np.flatnonzero(t == 255)
    if len(ext):
        pe, h0e = P[ext], h0[ext].astype(np.int64)
        h1e = d[np.minimum(pe + 1, n - 1)].astype(np.int64)
        lefte = n - pe
        te = np.where(lefte >= 2, _TYP1[h1e], BAD).astype(np.uint8)
        ac = (te == ADDRESS) | (te == COUNTER)
        ple = np.where(ac, 1 << ((h1e >> 4) & 3), 0)
        alignment = 1 << ((h0e & 0xF) + 1)
        short = np.where(te == PAD, lefte < alignment, ac & (lefte < 2 + ple))
        reason[ext] = np.where(short, BAD_TRUNCATED, np.where(te == BAD, BAD_INVALID_HEADER, 0))
        te[short] = BAD
        ple[short] = 0
        t[ext] = te
        plen[ext] = ple
        index[ext] = np.where(ac & ~short, ((h0e & 3) << 3) | (h1e & 7), 0)
        base[ext] += 1
    bad = t == BAD
    reason[bad & (reason == 0)] = BAD_INVALID_HEADER
    # short packets can only run past the end in the last 16 bytes
    tail = np.arange(np.searchsorted(P, n - 16), len(P))
    if len(tail):
        tt = tail[(t[tail] != BAD) & (_IS_EXT[h0[tail]] == 0) & (n - P[tail] < 1 + plen[tail].astype(np.int64))]
        t[tt] = BAD
        plen[tt] = 0
        index[tt] = 0
        reason[tt] = BAD_TRUNCATED
    keep = np.flatnonzero(t != PAD)
    if len(keep) != len(t):
        P, t, plen, index, reason, base = (a[keep] for a in (P, t, plen, index, reason, base))
    payload = np.zeros(len(P), np.uint64)
    if n >= 8:
        # one unaligned little-endian 8-byte load per packet, masked to its payload length
        d8 = np.ndarray(shape=(n - 7,), dtype="<u8", buffer=d, offset=0, strides=(1,))
        fast = base <= n - 8
        payload[fast] = d8[base[fast]] & _PAYLOAD_MASK[plen[fast]]
        slow = np.flatnonzero(~fast & (plen > 0))
    else:
        slow = np.flatnonzero(plen > 0)
    for i in slow.tolist():  # the last few packets of the buffer
        b = int(base[i])
        payload[i] = int.from_bytes(d[b : b + int(plen[i])].tobytes(), "little")
    return PacketArrays(P.astype(np.int64), t.astype(np.uint8), index.astype(np.uint8), payload, reason, n)
