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
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from ..errors import PmuscopeError
from .model import Profile

FIELDS = ("comm", "tid", "pid", "cpu", "time", "event", "ip", "sym", "dso", "period", "symoff", "trace")


def parse_fields(text: str | None) -> tuple[str, ...] | None:
    """``-F comm,tid,ip`` -> a tuple; None for the default set."""
    if not text:
        return None
    out = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in out if f not in FIELDS]
    if bad or not out:
        raise PmuscopeError(f"-F {text!r}: unknown field(s) {', '.join(bad) or '(none)'}; "
                            f"choose from {','.join(FIELDS)}")
    return out


def default_fields(p: Profile) -> tuple[str, ...]:
    """perf script's default fields for what was recorded."""
    f = ["comm", "tid"]
    if p.has_cpu:
        f.append("cpu")
    if p.has_time:
        f.append("time")
    f += ["period", "event", "ip", "sym", "symoff", "dso"]
    return tuple(f)


def _frame_texts(p: Profile, frames: np.ndarray, *, relative: bool, ip: bool, sym: bool, symoff: bool,
                 dso: bool, prefix: str, suffix: str) -> np.ndarray:
    """Object array: the text of each frame id in ``frames`` (built once per
    distinct frame)."""
    u, inv = np.unique(frames, return_inverse=True)
    addrs = (p.frame_addr if relative else p.frame_ip)[u].tolist()
    syms = p.frame_sym[u].tolist()
    offs = p.frame_off[u].tolist()
    dsos = p.frame_dso[u].tolist()
    name_cache: dict[int, str] = {}
    dso_cache: dict[int, str] = {}
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
        texts.append(t + suffix)
    arr = np.empty(len(texts), dtype=object)
    arr[:] = texts
    return arr[inv.reshape(-1)]


def _headers(p: Profile, lo: int, hi: int, fields: Sequence[str], chain: bool) -> list[str]:
    cols = []
    fmt = []
    fs = set(fields)
    if "comm" in fs:
        comms = np.empty(len(p.comms), dtype=object)
        comms[:] = [(c if chain else f"{c:>16}") for c in p.comms]
        cols.append(comms[p.comm[lo:hi]].tolist())
        fmt.append("{} ")
    if "pid" in fs and "tid" in fs:
        cols.append([f"{a:5d}/{b:<5d}" for a, b in zip(p.pid[lo:hi].tolist(), p.tid[lo:hi].tolist())])
        fmt.append("{} ")
    elif "pid" in fs or "tid" in fs:
        cols.append(p.pid[lo:hi].tolist() if "pid" in fs else p.tid[lo:hi].tolist())
        fmt.append("{:5d} ")
    if "cpu" in fs:
        cols.append(p.cpu[lo:hi].tolist())
        fmt.append("[{:03d}] ")
    if "time" in fs:
        t = p.time[lo:hi]
        usec = t // np.uint64(1000)
        cols.append((usec // np.uint64(1_000_000)).tolist())
        cols.append((usec % np.uint64(1_000_000)).tolist())
        fmt.append("{:5d}.{:06d}: ")
    if "period" in fs:
        cols.append(p.period[lo:hi].tolist())
        fmt.append("{:10d} ")
    if "event" in fs:
        # perf script right-aligns event names to the longest of the session (evlist__max_name_len)
        width = max((len(x) for x in p.event_names), default=0)
        names = np.empty(len(p.event_names), dtype=object)
        names[:] = [x.rjust(width) for x in p.event_names]
        cols.append(names[p.event[lo:hi]].tolist())
        fmt.append("{}: ")
    f = "".join(fmt)
    if not cols:
        return [""] * (hi - lo)
    return [f.format(*row) for row in zip(*cols)]


def iter_script(p: Profile, fields: Sequence[str] | None = None, *, callchain: bool = True,
                batch: int = 65536) -> Iterator[str]:
    """Yield the ``perf script`` text of ``p`` in pieces of ``batch`` samples."""
    fields = tuple(fields) if fields else default_fields(p)
    fs = set(fields)
    want_frames = bool(fs & {"ip", "sym", "dso"})
    chain = callchain and p.has_callchain and want_frames
    sym = "sym" in fs
    symoff = "symoff" in fs or (sym and fields is None)
    if "symoff" in fs and not sym:
        sym = True
    n = len(p)
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        heads = _headers(p, lo, hi, fields, chain)
        if chain:
            a, b = int(p.stack_offsets[lo]), int(p.stack_offsets[hi])
            texts = _frame_texts(p, p.stack[a:b], relative=True, ip="ip" in fs, sym=sym, symoff=symoff,
                                 dso="dso" in fs, prefix="\t", suffix="\n")
            counts = np.diff(p.stack_offsets[lo:hi + 1])
            m = hi - lo
            # layout per sample: header, its frames, a blank line
            start = (p.stack_offsets[lo:hi] - a) + 2 * np.arange(m, dtype=np.int64)
            pieces = np.empty(len(texts) + 2 * m, dtype=object)
            pieces[start] = [h + "\n" for h in heads]
            pieces[start + 1 + counts] = "\n"
            fpos = np.repeat(start + 1 - (p.stack_offsets[lo:hi] - a), counts) + np.arange(len(texts), dtype=np.int64)
            pieces[fpos] = texts
            yield "".join(pieces.tolist())
        else:
            if want_frames:
                texts = _frame_texts(p, p.leaf[lo:hi], relative=False, ip="ip" in fs, sym=sym, symoff=symoff,
                                     dso="dso" in fs, prefix="", suffix="").tolist()
            else:
                texts = [""] * (hi - lo)
            extra = None
            if "trace" in fs and p.raw is not None:
                extra = [" " + p.raw[p.raw_offsets[i]:p.raw_offsets[i + 1]].tobytes().hex(" ")
                         for i in range(lo, hi)]
            if extra is None:
                yield "".join([(h + t).rstrip() + "\n" for h, t in zip(heads, texts)])
            else:
                yield "".join([(h + t + e).rstrip() + "\n" for h, t, e in zip(heads, texts, extra)])


def format_script(p: Profile, fields: Sequence[str] | None = None, *, callchain: bool = True) -> str:
    """The whole ``perf script`` text as one string."""
    return "".join(iter_script(p, fields, callchain=callchain))
