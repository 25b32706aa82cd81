"""pprof: gzipped ``perftools.profiles.Profile`` (google/pprof
``proto/profile.proto``), encoded by hand — the format needs only varints and
length-delimited fields, so there is no protobuf dependency.

Layout written (field numbers from profile.proto): ``sample_type`` (1) per
:attr:`ExportProfile.sample_types`; ``sample`` (2) with packed
``location_id`` (leaf first) and ``value``, ``label`` (3) ``pid``/``tid``/
``cpu`` as numbers and ``comm`` as a string; ``mapping`` (3) with ``build_id``;
``location`` (4) one per frame (id = frame id + 1) with one ``line``;
``function`` (5) one per distinct (name, system_name, file); ``string_table``
(6) with ``""`` first; ``time_nanos`` (9), ``duration_nanos`` (10),
``period_type`` (11), ``period`` (12), ``comment`` (13),
``default_sample_type`` (14). proto3 fields at their default are omitted.
"""

from __future__ import annotations

import functools
import io
import os
import struct
import zlib
from typing import BinaryIO, Iterator

import numpy as np

from .._np import uniq_inv
from .model import ExportProfile, vectorized

_VARINT, _LEN = 0, 2
_SMALL = [bytes([i]) for i in range(128)]


def varint(n: int) -> bytes:
    """Base-128 varint of an unsigned value; a negative int64 is its 64-bit
    two's complement (10 bytes), as protobuf encodes int64."""
    if 0 <= n < 128:
        return _SMALL[n]
    if n < 0:
        n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Varints of a whole array at once: ``(concatenated bytes, byte offsets)``,
    value ``i`` being ``bytes[off[i]:off[i + 1]]`` (negatives as 64-bit two's complement)."""
    a = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    nbytes = np.ones(len(a), dtype=np.int64)
    for k in range(1, 10):
        m = a >= np.uint64(1 << (7 * k))
        if not m.any():  # no longer values: the rest of the comparisons would all be False
            break
        nbytes += m
    off = np.zeros(len(a) + 1, dtype=np.int64)
    np.cumsum(nbytes, out=off[1:])
    out = np.empty(int(off[-1]), dtype=np.uint8)
    # byte j of every value that has one: the values still long enough, fewer each round
    pos, rest, left = off[:-1], a, nbytes
    for j in range(int(nbytes.max()) if len(a) else 0):
        if j:
            keep = left > j
            pos, rest, left = pos[keep], rest[keep], left[keep]
        byte = (rest & np.uint64(0x7F)).astype(np.uint8)
        byte[left - 1 > j] |= 0x80
        out[pos + j] = byte
        rest = rest >> np.uint64(7)
    return out.tobytes(), off


def _key(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


def field_varint(field: int, n: int) -> bytes:
    """A varint field; omitted (b"") at proto3's default 0."""
    return _key(field, _VARINT) + varint(int(n)) if n else b""


def field_bytes(field: int, data: bytes) -> bytes:
    return _key(field, _LEN) + varint(len(data)) + data


def field_packed(field: int, values) -> bytes:
    if not len(values):
        return b""
    return field_bytes(field, b"".join(varint(int(v)) for v in values))


class StringTable:
    """pprof's string table: index 0 is always ``""``."""

    def __init__(self) -> None:
        self.strings: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.strings)
            self.strings.append(s)
        return i


def _value_type(st: StringTable, t: tuple[str, str]) -> bytes:
    return field_varint(1, st(t[0])) + field_varint(2, st(t[1]))


def _samples_loop(ep: ExportProfile, label, comm_idx: list[int], keys: tuple[int, int, int, int]) -> Iterator[bytes]:
    """The Sample messages of ``ep``, one row at a time (the reference of :func:`_samples`)."""
    k_pid, k_tid, k_cpu, k_comm = keys
    n = len(ep)
    loc_bytes, loc_boff = varints(ep.stack.astype(np.int64) + 1)
    starts, ends = ep.row_bounds()
    loc_a, loc_b = loc_boff[starts].tolist(), loc_boff[ends].tolist()  # byte range of each row's location ids
    val_bytes, val_boff = varints(ep.values.reshape(-1))
    k = ep.values.shape[1]
    val_off = val_boff[::k].tolist() if k else [0] * (n + 1)
    cols = [(key, getattr(ep, name).tolist()) for key, name in ((k_pid, "pid"), (k_tid, "tid"), (k_cpu, "cpu"))
            if getattr(ep, name) is not None]
    comm_col = ep.comm.tolist() if ep.comm is not None else None
    loc_key, val_key, sample_key = _key(1, _LEN), _key(2, _LEN), _key(2, _LEN)
    for i in range(n):
        a, b = loc_a[i], loc_b[i]
        body = [loc_key + varint(b - a) + loc_bytes[a:b]] if b > a else []
        a, b = val_off[i], val_off[i + 1]
        body.append(val_key + varint(b - a) + val_bytes[a:b])
        for key, col in cols:
            if col[i] >= 0:
                body.append(label(key, col[i], False))
        if comm_col is not None and comm_col[i] >= 0:
            body.append(label(k_comm, comm_idx[comm_col[i]], True))
        msg = b"".join(body)
        yield sample_key + varint(len(msg)) + msg


#: rows per vectorized batch: bounds the temporaries (the index arrays take ~40 bytes per
#: output byte of a batch, a row of a deep stack ~40 output bytes: ~6 MB at 4096 rows)
SAMPLE_BATCH = 1 << 12


def _gather(out: np.ndarray, dst: np.ndarray, src: np.ndarray, src_start: np.ndarray, lens: np.ndarray) -> None:
    """``out[dst[i]:dst[i] + lens[i]] = src[src_start[i]:src_start[i] + lens[i]]`` for every i."""
    total = int(lens.sum())
    if not total:
        return
    excl = np.cumsum(lens) - lens
    step = np.arange(total, dtype=np.int64) - np.repeat(excl, lens)
    out[np.repeat(dst, lens) + step] = src[np.repeat(src_start, lens) + step]


def _samples(ep: ExportProfile, label, comm_idx: list[int], keys: tuple[int, int, int, int]) -> Iterator[bytes]:
    """The Sample messages of ``ep`` (the same bytes as :func:`_samples_loop`),
    built with numpy :data:`SAMPLE_BATCH` rows at a time, one bytes object per
    batch: each message is its key, its length, then ``location_id`` (when the
    stack is not empty), ``value`` and the labels; labels come from a pool of
    each distinct value's encoding. Only the label columns' pool indices are
    made for every row at once; the rest is the batch's."""
    k_pid, k_tid, k_cpu, k_comm = keys
    n = len(ep)
    if not n:
        return
    stack_off = np.asarray(ep.stack_offsets, dtype=np.int64)
    sidx = None if ep.stack_index is None else np.asarray(ep.stack_index, dtype=np.int64)
    if sidx is not None:
        # rows share their distinct stacks: each stack's location ids encoded once, gathered per row
        g_bytes, g_boff = varints(ep.stack.astype(np.int64) + 1)
        g_src = np.frombuffer(g_bytes, dtype=np.uint8)
        g_b = g_boff[stack_off]
        g_start, g_len = g_b[:-1], np.diff(g_b)
        del g_boff, g_b
    k = ep.values.shape[1]
    # label columns: (pool bytes, pool offsets, pool lengths (0 = no label), each row's pool entry)
    labels = []
    cols = [(key, getattr(ep, name), False) for key, name in ((k_pid, "pid"), (k_tid, "tid"), (k_cpu, "cpu"))
            if getattr(ep, name) is not None]
    if ep.comm is not None:
        cols.append((k_comm, ep.comm, True))
    for key, col, is_str in cols:
        u, inv = uniq_inv(np.asarray(col, dtype=np.int64))
        enc = [label(key, comm_idx[v] if is_str else v, is_str) if v >= 0 else b"" for v in u.tolist()]
        plen = np.array([len(e) for e in enc], dtype=np.int64)
        poff = np.cumsum(plen) - plen
        inv = inv.astype(np.int32 if len(u) < (1 << 31) else np.int64)
        labels.append((np.frombuffer(b"".join(enc), dtype=np.uint8), poff, plen, inv))
    for r0 in range(0, n, SAMPLE_BATCH):
        r1 = min(r0 + SAMPLE_BATCH, n)
        if sidx is not None:
            loc_src, loc_a, loc_len = g_src, g_start[sidx[r0:r1]], g_len[sidx[r0:r1]]
        else:
            s0, s1 = int(stack_off[r0]), int(stack_off[r1])
            loc_bytes, loc_boff = varints(ep.stack[s0:s1].astype(np.int64) + 1)  # this batch's location ids
            loc_src = np.frombuffer(loc_bytes, dtype=np.uint8)
            loc_off = loc_boff[stack_off[r0:r1 + 1] - s0]
            loc_a, loc_len = loc_off[:-1], np.diff(loc_off)
        val_bytes, val_boff = varints(ep.values[r0:r1].reshape(-1))  # this batch's values
        val_off = val_boff[::k] if k else np.zeros(r1 - r0 + 1, dtype=np.int64)
        val_a, val_len = val_off[:-1], np.diff(val_off)
        lh_bytes, lh_off = varints(loc_len)
        lh_len = np.diff(lh_off)
        lh_len[loc_len == 0] = 0  # an empty stack: no location_id field at all
        vh_bytes, vh_off = varints(val_len)
        vh_len = np.diff(vh_off)
        msg = (lh_len + (loc_len > 0)) + loc_len + (1 + vh_len) + val_len
        lab = [(pool, poff[inv[r0:r1]], plen[inv[r0:r1]]) for pool, poff, plen, inv in labels]
        for _pool, _po, pl in lab:
            msg = msg + pl
        mh_bytes, mh_off = varints(msg)
        mh_len = np.diff(mh_off)
        total = 1 + mh_len + msg
        pos = np.cumsum(total) - total
        buf = np.empty(int(total.sum()), dtype=np.uint8)
        buf[pos] = 0x12  # Profile.sample
        _gather(buf, pos + 1, np.frombuffer(mh_bytes, dtype=np.uint8), mh_off[:-1], mh_len)
        pos = pos + 1 + mh_len
        buf[pos[loc_len > 0]] = 0x0A  # Sample.location_id
        _gather(buf, pos + 1, np.frombuffer(lh_bytes, dtype=np.uint8), lh_off[:-1], lh_len)
        pos = pos + (lh_len + (loc_len > 0))
        _gather(buf, pos, loc_src, loc_a, loc_len)
        pos = pos + loc_len
        buf[pos] = 0x12  # Sample.value
        _gather(buf, pos + 1, np.frombuffer(vh_bytes, dtype=np.uint8), vh_off[:-1], vh_len)
        pos = pos + 1 + vh_len
        _gather(buf, pos, np.frombuffer(val_bytes, dtype=np.uint8), val_a, val_len)
        pos = pos + val_len
        for pool, po, pl in lab:
            _gather(buf, pos, pool, po, pl)
            pos = pos + pl
        yield buf.tobytes()


# -- vectorized messages: a "part" is (source bytes, start per row, length per row); _rows
# concatenates parts row by row into (bytes, row offsets)

def _rows(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    lens = sum(p[2] for p in parts)
    off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    buf = np.empty(int(off[-1]), dtype=np.uint8)
    pos = off[:-1]
    for src, start, ln in parts:
        _gather(buf, pos, src, start, ln)
        pos = pos + ln
    return buf, off


def _const(b: bytes, n: int, present: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ln = np.full(n, len(b), dtype=np.int64) if present is None else np.where(present, len(b), 0)
    return np.frombuffer(b, dtype=np.uint8), np.zeros(n, dtype=np.int64), ln


def _varint_part(values: np.ndarray, present: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data, off = varints(values)
    ln = np.diff(off)
    if present is not None:
        ln[~present] = 0
    return np.frombuffer(data, dtype=np.uint8), off[:-1], ln


def _fields(*cols: tuple[int, np.ndarray]) -> list:
    """Varint fields (field number, values) per row, each omitted where 0 (as :func:`field_varint`)."""
    parts = []
    for field, values in cols:
        nz = values != 0
        parts += [_const(_key(field, _VARINT), len(values), nz), _varint_part(values, nz)]
    return parts


def _wrap(field: int, msg: tuple[np.ndarray, np.ndarray]) -> list:
    """Each row's bytes as a length-delimited field (as :func:`field_bytes`)."""
    data, off = msg
    ln = np.diff(off)
    return [_const(_key(field, _LEN), len(ln)), _varint_part(ln), (data, off[:-1], ln)]


_U64 = (1 << 64) - 1


def _int64s(values: list[int]) -> np.ndarray | None:
    """``values`` as int64 (a uint64 above 2**63 as its two's complement, as
    :func:`varint` encodes it); None when one does not fit 64 bits."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        if values and (min(values) < -(1 << 63) or max(values) > _U64):
            return None
        return np.fromiter((v & _U64 for v in values), dtype=np.uint64, count=len(values)).view(np.int64)


def _locations_and_functions(ep: ExportProfile, st: StringTable) -> list[bytes] | None:
    """The Location messages (one per frame) then the Function messages (one per
    distinct name, system name, file), as the frame loop of :func:`encode` writes
    them; strings are interned in the same order. None (nothing interned) when a
    frame's number does not fit 64 bits: the loop then writes them."""
    frames = ep.frames
    nf = len(frames)
    if not nf:
        return []
    lines = _int64s([f.line for f in frames])
    maps = _int64s([f.mapping for f in frames])
    addrs = _int64s([f.address for f in frames])
    if lines is None or maps is None or addrs is None:
        return None
    functions: dict[tuple[str, str, str], int] = {}
    func_of: list[int] = []
    fcols: list[tuple[int, int, int]] = []
    for f in frames:
        fkey = (f.name, f.system_name, f.file)
        func_id = functions.get(fkey)
        if func_id is None:
            func_id = functions[fkey] = len(functions) + 1
            fcols.append((st(f.name), st(f.system_name or f.name), st(f.file)))
        func_of.append(func_id)
    line = _rows(_fields((1, np.array(func_of, dtype=np.int64)), (2, lines)))
    loc = _rows(_fields((1, np.arange(1, nf + 1, dtype=np.int64)), (2, maps), (3, addrs)) + _wrap(4, line))
    fa = np.array(fcols, dtype=np.int64).reshape(-1, 3)
    func = _rows(_fields((1, np.arange(1, len(fa) + 1, dtype=np.int64)), (2, fa[:, 0]), (3, fa[:, 1]), (4, fa[:, 2])))
    return [_rows(_wrap(4, loc))[0].tobytes(), _rows(_wrap(5, func))[0].tobytes()]


def encode(ep: ExportProfile) -> bytes:
    """The serialized (not compressed) Profile message of ``ep``."""
    return b"".join(iter_encode(ep))


def iter_encode(ep: ExportProfile) -> Iterator[bytes]:
    """The serialized Profile message of ``ep`` in pieces (joined: :func:`encode`),
    the samples a batch of rows at a time, so that the whole message is never held."""
    ep.validate()
    st = StringTable()
    for t in ep.sample_types:
        yield field_bytes(1, _value_type(st, t))

    # labels are few distinct values: cache their encodings
    k_pid, k_tid, k_cpu, k_comm = st("pid"), st("tid"), st("cpu"), st("comm")
    label_cache: dict[tuple[int, int, bool], bytes] = {}

    def label(key: int, value: int, is_str: bool) -> bytes:
        ck = (key, value, is_str)
        b = label_cache.get(ck)
        if b is None:
            body = field_varint(1, key) + (field_varint(2, value) if is_str else field_varint(3, value) or _key(3, 0) + b"\x00")
            b = label_cache[ck] = field_bytes(3, body)
        return b

    comm_idx = [st(c) for c in ep.comms]
    if vectorized():
        yield from _samples(ep, label, comm_idx, (k_pid, k_tid, k_cpu, k_comm))
    else:
        yield from _samples_loop(ep, label, comm_idx, (k_pid, k_tid, k_cpu, k_comm))
    out: list[bytes] = []  # the mappings, locations and functions: small (one per DSO / frame)

    for mid, m in enumerate(ep.mappings, 1):
        body = (field_varint(1, mid) + field_varint(2, m.memory_start) + field_varint(3, m.memory_limit)
                + field_varint(4, m.file_offset) + field_varint(5, st(m.filename)) + field_varint(6, st(m.build_id))
                + field_varint(7, int(m.has_functions)))
        out.append(field_bytes(3, body))

    tables = _locations_and_functions(ep, st) if vectorized() else None
    if tables is not None:
        out.extend(tables)
    else:
        functions: dict[tuple[str, str, str], int] = {}
        func_msgs: list[bytes] = []
        for fid, f in enumerate(ep.frames, 1):
            fkey = (f.name, f.system_name, f.file)
            func_id = functions.get(fkey)
            if func_id is None:
                func_id = functions[fkey] = len(functions) + 1
                func_msgs.append(field_bytes(5, field_varint(1, func_id) + field_varint(2, st(f.name))
                                             + field_varint(3, st(f.system_name or f.name))
                                             + field_varint(4, st(f.file))))
            line = field_bytes(4, field_varint(1, func_id) + field_varint(2, f.line))
            out.append(field_bytes(4, field_varint(1, fid) + field_varint(2, f.mapping) + field_varint(3, f.address)
                                   + line))
        out.extend(func_msgs)

    tail = [field_varint(9, ep.time_nanos), field_varint(10, ep.duration_nanos)]
    if ep.period_type is not None:
        tail.append(field_bytes(11, _value_type(st, ep.period_type)))
    tail.append(field_varint(12, ep.period))
    comments = [st(c) for c in ep.comments]
    if ep.default_sample_type:
        tail.append(field_varint(14, st(ep.default_sample_type)))
    # the string table last: every index above is assigned by now
    if vectorized():
        enc = [_utf8(s) for s in st.strings]
        lens = np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))
        data = np.frombuffer(b"".join(enc), dtype=np.uint8)
        strings = _rows([_const(_key(6, _LEN), len(enc)), _varint_part(lens),
                         (data, np.cumsum(lens) - lens, lens)])[0].tobytes()
    else:
        strings = b"".join(field_bytes(6, _utf8(s)) for s in st.strings)
    yield b"".join(out) + strings + b"".join(tail) + b"".join(field_varint(13, c) for c in comments)


def _utf8(s: str) -> bytes:
    """``s`` as valid UTF-8 (protobuf strings must be): bytes that were not
    UTF-8 in the recording (kept as surrogate escapes) become U+FFFD."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode("utf-8")


@functools.cache
def _gzip_header() -> bytes:
    """The 10-byte header ``gzip.compress(data, compresslevel=6, mtime=0)``
    writes with this Python (its OS byte is zlib's on 3.11+, 255 before),
    taken from gzip itself: then the deflate body (level 6, the whole input) and
    the CRC-32 and size trailer are the same on every version."""
    import gzip

    return gzip.compress(b"", compresslevel=6, mtime=0)[:10]


def dump(ep: ExportProfile, f: BinaryIO) -> int:
    """Write the gzipped Profile to the binary file ``f`` as it is encoded (the
    message and its compressed copy are never held whole); the bytes are those
    of :func:`dumps`, ``gzip.compress(encode(ep), compresslevel=6, mtime=0)``
    (deflate's output does not depend on how its input is split). Returns the
    number of bytes written."""
    comp = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc, size = 0, 0
    head = _gzip_header()
    f.write(head)
    written = len(head)
    for piece in iter_encode(ep):
        crc = zlib.crc32(piece, crc)
        size += len(piece)
        z = comp.compress(piece)
        if z:
            f.write(z)
            written += len(z)
    z = comp.flush() + struct.pack("<LL", crc, size & 0xFFFFFFFF)
    f.write(z)
    return written + len(z)


def dumps(ep: ExportProfile) -> bytes:
    """Gzipped Profile (what ``go tool pprof``, Pyroscope and Parca read)."""
    buf = io.BytesIO()
    dump(ep, buf)
    return buf.getvalue()


def write(ep: ExportProfile, path: str) -> str:
    """Write the gzipped Profile to ``path`` (``-``: standard output) as it is encoded."""
    from ..outfile import open_output

    with open_output(path, "wb") as out:
        dump(ep, out)
    return os.fspath(path)
