"""speedscope's file format (``https://www.speedscope.app/file-format-schema.json``,
``src/lib/file-format-spec.ts``): ``shared.frames`` and one ``sampled``
profile per thread and sample type, samples root → leaf in time order."""

from __future__ import annotations

import json

import numpy as np

from .. import __version__
from .model import ExportProfile

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
#: speedscope's ValueUnit values
UNITS = ("none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes")


def _unit(u: str) -> str:
    return u if u in UNITS else "none"


def to_speedscope(ep: ExportProfile, *, sample_types: list[int] | None = None) -> dict:
    """The speedscope JSON document of ``ep``: one profile per (thread,
    sample type); ``sample_types`` selects columns (default: every column
    except ``samples/count`` when there are others)."""
    ep.validate()
    frames = []
    for f in ep.frames:
        fr: dict = {"name": f.name + (" [k]" if f.kernel else "")}
        if f.file:
            fr["file"] = f.file
        if f.line:
            fr["line"] = int(f.line)
        frames.append(fr)
    if sample_types is None:
        sample_types = list(range(len(ep.sample_types)))
        if len(sample_types) > 1 and ep.sample_types[0] == ("samples", "count"):
            sample_types = sample_types[1:]
    n = len(ep)
    tid = np.asarray(ep.tid, dtype=np.int64) if ep.tid is not None else np.full(n, -1, dtype=np.int64)
    order = np.argsort(np.asarray(ep.time, dtype=np.int64), kind="stable") if ep.time is not None else np.arange(n)
    off = ep.stack_offsets.tolist()
    st = ep.stack.tolist()
    stacks = [st[off[i]:off[i + 1]][::-1] for i in range(n)]
    comm_of: dict[int, str] = {}
    if ep.comm is not None:
        for t, c in zip(tid.tolist(), np.asarray(ep.comm).tolist()):
            if c >= 0:
                comm_of.setdefault(t, ep.comms[c])
    by_tid: dict[int, list[int]] = {}
    tl = tid.tolist()
    for i in order.tolist():
        by_tid.setdefault(tl[i], []).append(i)
    profiles = []
    for k in sample_types:
        kind, unit = ep.sample_types[k]
        col = ep.values[:, k]
        for t in sorted(by_tid):
            rows = [i for i in by_tid[t] if col[i]]
            if not rows:
                continue
            weights = [int(col[i]) for i in rows]
            thread = f"{comm_of[t]} ({t})" if t in comm_of else (f"tid {t}" if t >= 0 else "all threads")
            profiles.append({
                "type": "sampled",
                "name": f"{thread} — {kind}",
                "unit": _unit(unit),
                "startValue": 0,
                "endValue": int(sum(weights)),
                "samples": [stacks[i] for i in rows],
                "weights": weights,
            })
    return {
        "$schema": SCHEMA,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": ep.name,
        "activeProfileIndex": 0,
        "exporter": f"pmuscope@{__version__}",
    }


def dumps(ep: ExportProfile, **kwargs) -> str:
    return json.dumps(to_speedscope(ep, **kwargs), separators=(",", ":"))


def write(ep: ExportProfile, path: str, **kwargs) -> str:
    from ..outfile import write_output

    return write_output(path, dumps(ep, **kwargs))
