"""Exports of a :class:`~pmuscope.profile.Profile`: folded stacks (the
flamegraph.pl / stackcollapse-perf format) and the HTML flame graph."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .folded import format_folded, frame_name
from .model import Profile


def frame_labels(p: Profile, *, annotate_kernel: bool = True) -> list[str]:
    """A display name per frame id, as stackcollapse-perf names frames: the
    symbol, else ``[dso]`` (base name), else ``[unknown]``; kernel frames get
    ``_[k]``."""
    labels = []
    sym_cache: dict[int, str] = {}
    for s, d, k in zip(p.frame_sym.tolist(), p.frame_dso.tolist(), p.frame_kernel.tolist()):
        if s >= 0:
            n = sym_cache.get(s)
            if n is None:
                n = sym_cache[s] = p.sym_name(s)
        elif d >= 0:
            short = p.dso_short_name(d)
            n = short if short.startswith("[JIT]") else f"[{short}]"
        else:
            n = "[unknown]"
        labels.append(frame_name(n + "_[k]" if k and annotate_kernel else n))
    return labels


def folded_stacks(p: Profile, *, comm: bool = True, weight: str = "samples",
                  annotate_kernel: bool = True) -> Counter:
    """Folded stacks (root first, ``;``-joined) -> count. The process name is
    the root frame (``comm=True``, like stackcollapse-perf); ``weight`` is
    ``"samples"`` or ``"period"``."""
    out: Counter = Counter()
    if not len(p):
        return out
    labels = frame_labels(p, annotate_kernel=annotate_kernel)
    # frames with the same label merge: map frame id -> label id
    lab_ids: dict[str, int] = {}
    fl = np.fromiter((lab_ids.setdefault(x, len(lab_ids)) for x in labels), dtype=np.int32, count=len(labels))
    names = list(lab_ids)
    frames, offsets = p.stacks()
    seq = fl[frames] if len(frames) else np.zeros(0, np.int32)
    w = p.period if weight == "period" else np.ones(len(p), dtype=np.uint64)
    off = offsets.tolist()
    comm_ids = p.comm.tolist()
    wl = w.tolist()
    buf = seq.tobytes()
    acc: dict[tuple[int, bytes], int] = {}
    for i in range(len(p)):
        key = (comm_ids[i], buf[off[i] * 4:off[i + 1] * 4])
        acc[key] = acc.get(key, 0) + wl[i]
    comms = [frame_name(c) for c in p.comms]
    for (c, raw), count in acc.items():
        ids = np.frombuffer(raw, dtype=np.int32)[::-1].tolist()
        parts = [names[j] for j in ids]
        if comm:
            parts.insert(0, comms[c])
        out[";".join(parts)] += int(count)
    return out


def write_folded(p: Profile, path: str, **kwargs) -> str:
    """Write folded stacks of ``p`` to ``path``."""
    from ..outfile import write_output

    return write_output(path, format_folded(folded_stacks(p, **kwargs)))


def write_flamegraph(p: Profile, path: str, *, title: str = "pmuscope flame graph", folded: Counter | None = None,
                     **kwargs) -> str:
    """Write the self-contained HTML flame graph of ``p`` to ``path``."""
    from .flamegraph import write_html  # here: json and html are not needed by the other exports

    if folded is None:
        folded = folded_stacks(p)
    ev = ",".join(p.event_names)
    sub = f"{len(p)} samples of {ev}" + (f", {p.lost} lost" if p.lost else "")
    return write_html(folded, path, title=title, subtitle=sub, **kwargs)
