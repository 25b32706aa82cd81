"""``perf script``-style text: one line per sample, call chains below it.

The layout is perf 6.1's (``tools/perf/builtin-script.c``,
``perf_sample__fprintf_start`` and ``sample__fprintf_callchain``): ``comm``
right-aligned in 16 columns (left as is when call chains follow), ``tid``
in 5, ``[cpu]``, ``secs.usecs:``, the period in 10, ``event:``, then
``ip sym+off (dso)`` — or, with call chains, one ``\\t<addr> sym+off (dso)``
line per frame and a blank line. Call-chain addresses are map-relative for
user code (perf's ``map__map_ip``), absolute for the kernel.

Formatting is done in bulk: each frame's text is built once, per-sample
headers with one list comprehension, and the pieces joined by numpy index
arithmetic, so the cost per sample is a few string operations.

With the C extension, ``_native.script_text`` writes a whole batch's text
in one call from the sample columns and per-id texts built here (each
frame's, comm's and event's text once); the Python formatter below is the
reference (``PMUSCOPE_NATIVE_SCRIPT=0``) and serves what the C code does
not (tracepoint payloads, anything unusual it declines).
"""

from __future__ import annotations

import os
from array import array
from itertools import accumulate
from typing import Iterator, Sequence

import numpy as np

from ..errors import PmuscopeError
from .model import Profile, uniq, uniq_first
from .script_fields import FIELDS, FieldChanges, default_field_names, parse_fields  # noqa: F401 - re-exported

try:
    from .. import _native  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the Python formatter serves
    _native = None


def default_fields(p: Profile) -> tuple[str, ...]:
    """perf script's default fields for what was recorded (tracepoints: when every
    event present is one)."""
    present = set(uniq(p.event).tolist()) if len(p) else set()
    return default_field_names(has_cpu=p.has_cpu, has_time=p.has_time,
                               tracepoints=bool(p.tp_formats) and present <= set(p.tp_formats))


def native_script_available() -> bool:
    return _native is not None and hasattr(_native, "script_text")


def native_script_wanted() -> bool:
    """The C formatter, unless ``PMUSCOPE_NATIVE_SCRIPT=0`` or not built."""
    return os.environ.get("PMUSCOPE_NATIVE_SCRIPT", "1") != "0" and native_script_available()


# flags of _native.script_text: which header fields, and what follows the header
_NF = {"comm": 1, "pid": 2, "tid": 4, "cpu": 8, "time": 16, "period": 32, "event": 64, "nstime": 16 | 512}
_NF_FRAMES, _NF_CHAIN = 128, 256
#: the field --ns makes of ``time``: seconds and nanoseconds (perf script --ns)
NSTIME = "nstime"


def _event_texts(p: Profile) -> list[bytes] | None:
    """``event: `` of each event id, right-aligned to the longest name (as
    :func:`_middle`); None when the texts' byte lengths differ (non-ASCII
    names: the Python formatter serves those)."""
    width = max((len(x) for x in p.event_names), default=0)
    names = [(x.rjust(width) + ": ").encode() for x in p.event_names]
    if not names or len({len(x) for x in names}) != 1:
        return None
    return names


def _frame_table(p: Profile, **kw) -> np.ndarray:
    """Object array indexed by frame id: the text (bytes) of every frame."""
    return _objects(_frame_lines(p, **kw))


def _objects(texts: list[bytes]) -> np.ndarray:
    arr = np.empty(len(texts), dtype=object)
    arr[:] = texts
    return arr


def _frame_lines(p: Profile, *, relative: bool, ip: bool, sym: bool, symoff: bool, dso: bool,
                 prefix: str, suffix: str, start: int = 0, caches: tuple[dict, dict] | None = None) -> list[bytes]:
    """The text (bytes) of every frame from id ``start`` on."""
    # call-chain lines: user frames map-relative, kernel ones (modules too) as they are, as perf prints them
    addrs = (np.where(p.frame_kernel[start:], p.frame_ip[start:], p.frame_addr[start:]) if relative
             else p.frame_ip[start:]).tolist()
    syms = p.frame_sym[start:].tolist()
    offs = p.frame_off[start:].tolist()
    dsos = p.frame_dso[start:].tolist()
    name_cache: dict[int, str]
    dso_cache: dict[int, str]
    name_cache, dso_cache = caches if caches is not None else ({}, {})
    texts = []
    for a, s, o, d in zip(addrs, syms, offs, dsos):
        t = prefix
        if ip:
            t += f"{a:16x}" if relative else f" {a:16x}"
        if sym:
            n = name_cache.get(s)
            if n is None:
                n = name_cache[s] = p.sym_name(s)
            t += f" {n}+{o:#x}" if symoff and s >= 0 else f" {n}"
        if dso:
            dn = dso_cache.get(d)
            if dn is None:
                dn = dso_cache[d] = p.dso_name(d)
            t += f" ({dn})"
        texts.append((t + suffix).encode("utf-8", "surrogateescape"))
    return texts


def _put_digits(rows: np.ndarray, vals: np.ndarray, *, zero_pad: bool = False) -> None:
    """Right-aligned decimal digits of ``vals`` written into ``rows``, a
    (width, n) uint8 block: one contiguous row per digit position. Values
    below 2**32 are divided as uint32, ~2x faster than uint64."""
    width = rows.shape[0]
    if len(vals) and int(vals.max()) < (1 << 32):
        v = vals.astype(np.uint32)
        ten = np.uint32(10)
    else:
        v = vals.astype(np.uint64, copy=True)
        ten = np.uint64(10)
    for k in range(width - 1, -1, -1):
        q = v // ten
        d = (v - q * ten).astype(np.uint8)
        d += np.uint8(48)
        if not zero_pad and k < width - 1:
            d[v == 0] = 32  # a leading zero is a space; the last digit is always printed
        rows[k] = d
        v = q


def _ndigits(v: int) -> int:
    return len(str(int(v)))


def _middle(p: Profile, lo: int, hi: int, fs: set) -> list | None:
    """The pieces of ``secs.usecs: period event: `` as a plan for
    :func:`_header_block`: ``(width, fill)`` items where ``fill(rows)`` writes
    a (width, n) block; None when a field's width varies in this batch (the
    caller formats those in Python)."""
    m = hi - lo
    plan: list = []
    if "time" in fs or NSTIME in fs:
        ns = NSTIME in fs
        unit = np.uint64(1 if ns else 1000)
        per_sec = np.uint64(1_000_000_000 if ns else 1_000_000)
        usec = p.time[lo:hi] // unit
        secs = usec // per_sec
        w_hi = _ndigits(secs.max()) if m else 1
        w_lo = _ndigits(secs.min()) if m else 1
        if max(w_hi, 5) != max(w_lo, 5):
            return None
        frac = usec - secs * per_sec
        plan += [(max(w_hi, 5), lambda rows: _put_digits(rows, secs)), _const(b"."),
                 (9 if ns else 6, lambda rows: _put_digits(rows, frac, zero_pad=True)), _const(b": ")]
    if "period" in fs:
        per = p.period[lo:hi]
        top = int(per.max()) if m else 0
        if top >= 10 ** 10:
            return None
        if m and int(per.min()) == top:  # a fixed period (-c, or -F's steady state): one text
            plan.append(_const(f"{top:10d} ".encode()))
        else:
            plan += [(10, lambda rows: _put_digits(rows, per)), _const(b" ")]
    if "event" in fs:
        # perf script right-aligns event names to the longest of the session (evlist__max_name_len)
        width = max((len(x) for x in p.event_names), default=0)
        names = [(x.rjust(width) + ": ").encode() for x in p.event_names]
        w = max(len(x) for x in names)
        tab = np.frombuffer(b"".join(x.ljust(w) for x in names), dtype=np.uint8).reshape(len(names), w)
        ev = p.event[lo:hi]

        def fill_event(rows):
            rows[:] = tab[ev].T
        plan.append(_const(tab[0].tobytes()) if len(tab) == 1 else (w, fill_event))
    return plan


def _const(text: bytes) -> tuple:
    """A plan item writing the same ``text`` in every row."""
    col = np.frombuffer(text, dtype=np.uint8)[:, None]

    def fill(rows: np.ndarray) -> None:
        rows[:] = col
    return len(text), fill


def _header_block(plan: list, m: int) -> np.ndarray:
    """Run a plan of (width, fill) items: a C-contiguous (m, width) uint8 matrix."""
    width = sum(w for w, _ in plan)
    block = np.empty((width, m), dtype=np.uint8)  # filled one contiguous row per column of text
    c = 0
    for w, fill in plan:
        fill(block[c:c + w])
        c += w
    return np.ascontiguousarray(block.T)


def _rows(mat: np.ndarray) -> list[bytes]:
    """Each row of a (m, width) uint8 matrix as bytes."""
    m, width = mat.shape
    if width == 0:
        return [b""] * m
    # why: numpy's S dtype drops trailing NUL bytes; header text never ends in one
    return mat.view(f"S{width}").ravel().tolist()


def _prefix(p: Profile, lo: int, hi: int, fs: set, chain: bool,
            cache: dict | None = None) -> tuple[list[bytes], np.ndarray]:
    """``comm tid [cpu] `` texts, one per distinct (comm, pid, tid, cpu) of
    the batch, and the index of each sample's text. ``cache`` keeps the texts
    by (comm id, pid, tid, cpu) for the next batches of the same recording
    (same fields; a ``-a`` recording has hundreds of such prefixes per batch,
    the same ones again and again)."""
    comm = p.comm[lo:hi].astype(np.int64)
    pid, tid = p.pid[lo:hi], p.tid[lo:hi]
    cpu = p.cpu[lo:hi].astype(np.int64)
    order = np.lexsort((cpu, tid, pid, comm))
    cols = (comm[order], pid[order], tid[order], cpu[order])
    flag = np.zeros(len(order), dtype=bool)
    if len(order):
        flag[0] = True
        for c in cols:
            flag[1:] |= c[1:] != c[:-1]
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.cumsum(flag) - 1
    u = zip(*(c[flag].tolist() for c in cols))
    out = []
    if cache is None:
        cache = {}
    get = cache.get
    for key in u:
        b = get(key)
        if b is not None:
            out.append(b)
            continue
        c, pi, ti, cp = key
        t = ""
        if "comm" in fs:
            name = p.comms[c]
            t += f"{name} " if chain else f"{name:>16} "
        if "pid" in fs and "tid" in fs:
            t += f"{pi:5d}/{ti:<5d} "
        elif "pid" in fs:
            t += f"{pi:5d} "
        elif "tid" in fs:
            t += f"{ti:5d} "
        if "cpu" in fs:
            t += f"[{cp:03d}] "
        b = cache[key] = t.encode("utf-8", "surrogateescape")
        out.append(b)
    return out, inv


def _headers(p: Profile, lo: int, hi: int, fields: Sequence[str], chain: bool, end: bytes = b"",
             cache: dict | None = None) -> list[bytes]:
    """The header of each sample (``comm tid [cpu] secs.usecs: period event: ``),
    followed by ``end``. Built as one byte matrix when every prefix of the
    batch has the same length (one comm, one thread: the common case), so
    each header is one row of it and no string is concatenated per sample."""
    fs = set(fields)
    m = hi - lo
    pre, pinv = _prefix(p, lo, hi, fs, chain, cache)
    plan = _middle(p, lo, hi, fs)
    if plan is None:
        mid = [_middle_slow(p, i, fs) for i in range(lo, hi)]
        return [pre[i] + b + end for i, b in zip(pinv.tolist(), mid)]
    if end:
        plan.append(_const(end))
    if len({len(x) for x in pre}) == 1:
        tab = np.frombuffer(b"".join(pre), dtype=np.uint8).reshape(len(pre), len(pre[0]))

        def fill_prefix(rows):
            rows[:] = tab[pinv].T if len(pre) > 1 else tab[0][:, None]
        return _rows(_header_block([(tab.shape[1], fill_prefix)] + plan, m))
    mid = _rows(_header_block(plan, m)) if plan else [b""] * m
    return [pre[i] + b for i, b in zip(pinv.tolist(), mid)]


def _middle_slow(p: Profile, i: int, fs: set) -> bytes:
    t = ""
    if "time" in fs:
        usec = int(p.time[i]) // 1000
        t += f"{usec // 1_000_000:5d}.{usec % 1_000_000:06d}: "
    elif NSTIME in fs:
        nsec = int(p.time[i])
        t += f"{nsec // 1_000_000_000:5d}.{nsec % 1_000_000_000:09d}: "
    if "period" in fs:
        t += f"{int(p.period[i]):10d} "
    if "event" in fs:
        width = max((len(x) for x in p.event_names), default=0)
        t += p.event_names[int(p.event[i])].rjust(width) + ": "
    return t.encode()


#: samples per piece of text :class:`ScriptFormatter` builds at most: the text of a batch
#: is held whole (~70 bytes a sample without call chains, ~200 with a short chain), so
#: 4096 keeps it under a MiB; larger batches are no faster (one C call and one
#: write(2) per batch)
WRITE_BATCH = 4096
#: the text a batch of the C formatter aims at: samples of deep call chains (~900 bytes
#: each in a system-wide recording) are taken fewer at a time, as the last batch's text
#: per sample says (from :data:`FIRST_BATCH` samples, between :data:`MIN_BATCH` and the
#: formatter's batch): the buffer the text is written to keeps its largest size
WRITE_BYTES = 1 << 20
FIRST_BATCH = 1024
MIN_BATCH = 64


class ScriptFormatter:
    """``perf script`` text of one recording handed over in pieces (the chunks
    of :func:`~pmuscope.profile.model.iter_profile_chunks`, which share one
    frame table): each frame's text is built once, when a chunk first uses
    the table up to it. The text of each sample depends on that sample and the
    shared tables alone, so the pieces' texts joined are the whole profile's."""

    def __init__(self, fields: Sequence[str] | None = None, *, callchain: bool = True, batch: int = WRITE_BATCH,
                 native: bool | None = None, ns: bool = False) -> None:
        self._changes = fields if isinstance(fields, FieldChanges) else None
        self.fields = tuple(fields) if fields and self._changes is None else None
        self.callchain = callchain
        self.ns = ns  # times with nanoseconds (perf script --ns)
        self.batch = batch
        self._step = min(batch, FIRST_BATCH)  # the C formatter's next batch (see WRITE_BYTES)
        #: the C formatter (None: unless ``PMUSCOPE_NATIVE_SCRIPT=0``); the Python one is the reference
        self.native = native_script_wanted() if native is None else native and native_script_available()
        self._texts: list[bytes] = []
        self._table: np.ndarray | None = None
        self._caches: tuple[dict, dict] = ({}, {})
        # (comm id, pid, tid, cpu) -> its ``comm tid [cpu] `` text, by fields and chain
        self._prefixes: dict = {}
        # the native path's frame texts: all of them in one buffer, frame id f at _foff[f]:_foff[f + 1]
        self._blob = bytearray()
        self._foff = array("q", [0])
        # the native path's comm texts by comm id, and the names they are of
        self._comm_names: list[str] = []
        self._comm_texts: list[bytes] = []
        self._buf = bytearray()  # where write() has the C formatter put each batch's text

    def _frame_lines_to(self, p: Profile, chain: bool, fs: set) -> None:
        nf = len(p.frame_ip)
        if nf > len(self._texts):
            self._texts += _frame_lines(p, relative=chain, ip="ip" in fs, sym="sym" in fs or "symoff" in fs,
                                        symoff="symoff" in fs, dso="dso" in fs, prefix="\t" if chain else "",
                                        suffix="\n", start=len(self._texts), caches=self._caches)

    def _frame_texts(self, p: Profile, chain: bool, fs: set) -> np.ndarray:
        nf = len(p.frame_ip)
        if self._table is None or len(self._table) < nf:
            self._frame_lines_to(p, chain, fs)
            self._table = _objects(self._texts)
        return self._table

    def _frame_blob(self, p: Profile, chain: bool, fs: set) -> None:
        self._frame_lines_to(p, chain, fs)
        done = len(self._foff) - 1
        if len(self._texts) > done:
            new = self._texts[done:]
            self._blob += b"".join(new)
            self._foff.extend(accumulate(map(len, new), initial=self._foff[-1]))
            del self._foff[done + 1]  # accumulate's initial value: already the last offset

    def _comms(self, p: Profile, chain: bool) -> list[bytes]:
        names = p.comms
        k = len(self._comm_names)
        if names[:k] != self._comm_names:
            self._comm_names, self._comm_texts, k = [], [], 0
        for name in names[k:]:
            t = f"{name} " if chain else f"{name:>16} "
            self._comm_texts.append(t.encode("utf-8", "surrogateescape"))
            self._comm_names.append(name)
        return self._comm_texts

    def _plan(self, p: Profile) -> tuple[tuple, set, bool, bool]:
        if self.fields is None:
            self.fields = default_fields(p)
            if self._changes is not None:
                self.fields = self._changes.apply(self.fields)
        if self.ns and "time" in self.fields:
            self.fields = tuple(NSTIME if f == "time" else f for f in self.fields)
        fs = set(self.fields)
        if "symoff" in fs and "sym" not in fs:
            raise PmuscopeError("-F: symoff (offsets in symbols) needs sym; add sym or leave symoff out")
        # perf prints sym, symoff and dso beside an ip only (and call chains only with ip)
        want_frames = "ip" in fs
        chain = self.callchain and p.has_callchain and want_frames
        return self.fields, fs, want_frames, chain

    def _python(self, p: Profile, fields: tuple, fs: set, want_frames: bool, chain: bool,
                start: int) -> Iterator[bytes]:
        table = self._frame_texts(p, chain, fs) if want_frames else None
        prefixes = self._prefixes.setdefault((frozenset(fs), chain), {})
        return _format(p, fields, fs, chain, table, self.batch, prefixes, start)

    def format(self, p: Profile) -> Iterator[bytes]:
        """Yield the text of ``p``'s samples, ``batch`` samples at a time."""
        fields, fs, want_frames, chain = self._plan(p)
        start = 0
        if self.native and not ("trace" in fs and p.raw is not None):
            for lo, text in self._native_format(p, fs, chain, want_frames):
                if text is None:  # declined from sample lo on: the Python formatter goes on from there
                    start = lo
                    break
                yield text
            else:
                return
        yield from self._python(p, fields, fs, want_frames, chain, start)

    def write(self, p: Profile, write) -> None:
        """Write the text of ``p``'s samples with ``write`` (a binary file's),
        the bytes :meth:`format` yields. The C formatter fills one buffer
        kept from call to call and hands ``write`` a view of it (the view is
        released when ``write`` returns): no new bytes, no fresh pages, per batch."""
        fields, fs, want_frames, chain = self._plan(p)
        start = 0
        if self.native and not ("trace" in fs and p.raw is not None):
            buf = self._buf
            for lo, n in self._native_format(p, fs, chain, want_frames, buf):
                if n is None:
                    start = lo
                    break
                with memoryview(buf) as view, view[:n] as piece:
                    write(piece)
            else:
                return
        for text in self._python(p, fields, fs, want_frames, chain, start):
            write(text)

    def _native_format(self, p: Profile, fs: set, chain: bool, want_frames: bool,
                       into: bytearray | None = None) -> Iterator[tuple[int, bytes | int | None]]:
        """``(lo, text)`` of each batch from ``_native.script_text`` (with
        ``into``: the length of the text written there); ``(lo, None)`` where
        it declines (the caller formats the rest in Python)."""
        flags = 0
        for name, bit in _NF.items():
            if name in fs:
                flags |= bit
        events = _event_texts(p) if "event" in fs else []
        if events is None:
            yield 0, None
            return
        comms = self._comms(p, chain) if "comm" in fs else []
        if want_frames:
            self._frame_blob(p, chain, fs)
            flags |= _NF_FRAMES | (_NF_CHAIN if chain else 0)
        n = len(p)
        text = _native.script_text
        args = (flags, comms, events, self._blob, self._foff, p.comm, p.pid, p.tid, p.cpu, p.time, p.period,
                p.event, p.leaf, p.stack, p.stack_offsets)
        lo = 0
        while lo < n:
            hi = min(n, lo + self._step)
            out = text(*args, lo, hi, into)
            yield lo, out
            if out is None:
                return
            # the next batch sized by this one's text per sample (the same text either way)
            size = out if isinstance(out, int) else len(out)
            self._step = min(self.batch, max(MIN_BATCH, (hi - lo) * WRITE_BYTES // max(size, 1)))
            lo = hi


def iter_script_bytes(p: Profile, fields: Sequence[str] | None = None, *, callchain: bool = True,
                      batch: int = 65536) -> Iterator[bytes]:
    """Yield the ``perf script`` text of ``p`` as UTF-8 bytes, ``batch`` samples at a time."""
    return ScriptFormatter(fields, callchain=callchain, batch=batch).format(p)


def _format(p: Profile, fields: tuple, fs: set, chain: bool, table: np.ndarray | None,
            batch: int, prefixes: dict | None = None, start: int = 0) -> Iterator[bytes]:
    n = len(p)
    if start >= n:
        return
    stacks = _stack_texts(p, table) if chain else None
    for lo in range(start, n, batch):
        hi = min(n, lo + batch)
        # with call chains, the header line ends here, or where the stack's text begins
        heads = _headers(p, lo, hi, fields, chain, b"\n" if chain and stacks is None else b"", prefixes)
        if chain and stacks is not None:
            # per sample: its header, then its stack's text (one object per distinct stack)
            pieces = [b""] * (2 * (hi - lo))
            pieces[0::2] = heads
            pieces[1::2] = stacks[0][stacks[1][lo:hi]].tolist()
            yield b"".join(pieces)
            continue
        if chain:
            a, b = int(p.stack_offsets[lo]), int(p.stack_offsets[hi])
            texts = table[p.stack[a:b]]
            rel = p.stack_offsets[lo:hi] - a
            counts = np.diff(p.stack_offsets[lo:hi + 1])
            m = hi - lo
            # layout per sample: header line, its frames, a blank line
            start = rel + 2 * np.arange(m, dtype=np.int64)
            pieces = np.empty(len(texts) + 2 * m, dtype=object)
            pieces[start] = heads
            pieces[start + 1 + counts] = b"\n"
            pieces[np.repeat(start + 1 - rel, counts) + np.arange(len(texts), dtype=np.int64)] = texts
            yield b"".join(pieces.tolist())
        else:
            texts = table[p.leaf[lo:hi]].tolist() if table is not None else [b"\n"] * (hi - lo)
            if "trace" in fs and p.raw is not None:
                extra = _trace_texts(p, lo, hi)
                yield b"".join([(h + t[:-1]).rstrip() + e + b"\n" for h, t, e in zip(heads, texts, extra)])
            elif table is not None:
                pieces = [b""] * (2 * (hi - lo))
                pieces[0::2] = heads
                pieces[1::2] = texts
                yield b"".join(pieces)
            else:  # the header alone: perf ends every field with a space, the line too
                yield b"".join([h + b"\n" for h in heads])


#: deepest stack formatted through the per-stack path (perf's default max is 127 frames)
_MAX_DEPTH = 1024


def _hash_weights(k: int) -> np.ndarray:
    """``k`` odd pseudo-random 64-bit weights (splitmix64 of 1..k)."""
    with np.errstate(over="ignore"):
        z = np.arange(1, k + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) | np.uint64(1)


_HASH_W = _hash_weights(_MAX_DEPTH + 1)


def _stack_texts(p: Profile, table: np.ndarray, min_mean_depth: float = 2.0) -> tuple[np.ndarray, np.ndarray] | None:
    """``(texts, stack id of each sample)``: ``b"\\n" + frame lines + b"\\n"``
    built once per distinct call stack (a recording repeats a few thousand
    stacks); None when stacks are shallow (joining frame by frame is as
    fast), too deep, or two stacks hash alike (the caller then joins frame
    by frame)."""
    off = p.stack_offsets
    n = len(p)
    if n == 0 or len(p.stack) < min_mean_depth * n:
        return None
    counts = np.diff(off)
    if int(counts.max()) > _MAX_DEPTH:
        return None
    frames = p.stack
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    col = np.arange(len(frames), dtype=np.int64) - off[:-1][row]
    h = counts.astype(np.uint64) * _HASH_W[_MAX_DEPTH]
    nz = np.flatnonzero(counts)
    if len(nz):
        with np.errstate(over="ignore"):
            vals = (frames.astype(np.uint64) + np.uint64(1)) * _HASH_W[col]
            h[nz] += np.add.reduceat(vals, off[nz])
    _, first, inv = uniq_first(h)
    rep = first[inv]
    # exact check: every sample has its representative's stack
    if not np.array_equal(counts[rep], counts) or \
            not np.array_equal(frames[off[rep][row] + col], frames):
        return None
    ucounts = counts[first]
    uframes = frames[np.repeat(off[first], ucounts) + (np.arange(int(ucounts.sum()), dtype=np.int64) -
                                                        np.repeat(np.cumsum(ucounts) - ucounts, ucounts))]
    lines = table[uframes].tolist()
    ends = np.cumsum(ucounts).tolist()
    nl = b"\n"
    texts = []
    s = 0
    for e in ends:
        texts.append(nl + b"".join(lines[s:e]) + nl)
        s = e
    arr = np.empty(len(texts), dtype=object)
    arr[:] = texts
    return arr, inv


def _trace_texts(p: Profile, lo: int, hi: int) -> list[bytes]:
    """`` field=value ...`` of each sample's tracepoint payload (its tracefs
    format's own fields), or the payload in hex when the format is unknown."""
    out = []
    raw, off = p.raw, p.raw_offsets
    for i in range(lo, hi):
        payload = raw[off[i]:off[i + 1]].tobytes()
        fmt = p.tp_formats.get(int(p.event[i]))
        if not payload:
            out.append(b"")
            continue
        if fmt is None:
            out.append(b" " + payload.hex(" ").encode())
            continue
        try:
            vals = fmt.decode(payload)
        except Exception:
            out.append(b" " + payload.hex(" ").encode())
            continue
        names = [f.name for f in fmt.event_fields]
        out.append((" " + " ".join(f"{n}={vals.get(n)}" for n in names)).encode("utf-8", "replace"))
    return out


def iter_script(p: Profile, fields: Sequence[str] | None = None, *, callchain: bool = True,
                batch: int = 65536) -> Iterator[str]:
    """Yield the ``perf script`` text of ``p`` in pieces of ``batch`` samples."""
    for chunk in iter_script_bytes(p, fields, callchain=callchain, batch=batch):
        yield chunk.decode("utf-8", "surrogateescape")


def format_script(p: Profile, fields: Sequence[str] | None = None, *, callchain: bool = True) -> str:
    """The whole ``perf script`` text as one string."""
    return "".join(iter_script(p, fields, callchain=callchain))
