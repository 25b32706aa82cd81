"""speedscope's file format (``https://www.speedscope.app/file-format-schema.json``,
``src/lib/file-format-spec.ts``): ``shared.frames`` and one ``sampled``
profile per thread and sample type, samples root → leaf in time order.

:func:`dumps` / :func:`write` produce the JSON text of :func:`to_speedscope`'s
document in pieces (:func:`iter_json`): the rows grouped with numpy and each
profile's ``samples`` written a batch of rows at a time, so neither a Python
list per frame id nor the whole text is held; ``PMUSCOPE_EXPORT_VECTOR=0``
serializes the document with ``json.dumps`` instead (the reference, the same text).
"""

from __future__ import annotations

import json
from typing import Iterator

import numpy as np

from .. import __version__
from .._np import uniq_first
from .model import ExportProfile, vectorized

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
#: speedscope's ValueUnit values
UNITS = ("none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes")


def _unit(u: str) -> str:
    return u if u in UNITS else "none"


def _profile_name(tid: int, comm_of: dict[int, str], kind: str) -> str:
    """A profile's name: its thread (comm and tid, else the tid, else every thread) and sample type."""
    thread = f"{comm_of[tid]} ({tid})" if tid in comm_of else (f"tid {tid}" if tid >= 0 else "all threads")
    return f"{thread} — {kind}"


def _frames(ep: ExportProfile) -> list[dict]:
    frames = []
    for f in ep.frames:
        fr: dict = {"name": f.name + (" [k]" if f.kernel else "")}
        if f.file:
            fr["file"] = f.file
        if f.line:
            fr["line"] = int(f.line)
        frames.append(fr)
    return frames


def _columns(ep: ExportProfile, sample_types: list[int] | None) -> list[int]:
    if sample_types is None:
        sample_types = list(range(len(ep.sample_types)))
        if len(sample_types) > 1 and ep.sample_types[0] == ("samples", "count"):
            sample_types = sample_types[1:]
    return sample_types


def _tids_in_time_order(ep: ExportProfile) -> tuple[np.ndarray, np.ndarray]:
    """``(tid per row (-1 without a tid column), the rows in time order (ties: row order))``."""
    n = len(ep)
    tid = np.asarray(ep.tid, dtype=np.int64) if ep.tid is not None else np.full(n, -1, dtype=np.int64)
    order = np.argsort(np.asarray(ep.time, dtype=np.int64), kind="stable") if ep.time is not None else np.arange(n)
    return tid, order


def to_speedscope(ep: ExportProfile, *, sample_types: list[int] | None = None) -> dict:
    """The speedscope JSON document of ``ep``: one profile per (thread,
    sample type); ``sample_types`` selects columns (default: every column
    except ``samples/count`` when there are others)."""
    ep.validate()
    frames = _frames(ep)
    sample_types = _columns(ep, sample_types)
    n = len(ep)
    tid, order = _tids_in_time_order(ep)
    starts, ends = ep.row_bounds()
    st = ep.stack.tolist()
    stacks = [st[a:b][::-1] for a, b in zip(starts.tolist(), ends.tolist())]
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
            profiles.append({
                "type": "sampled",
                "name": _profile_name(t, comm_of, kind),
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


#: rows whose stacks are turned into JSON text at a time by :func:`iter_json`
ROW_BATCH = 1 << 13


def _profile_rows(ep: ExportProfile, sample_types: list[int]) -> Iterator[tuple[str, str, np.ndarray, np.ndarray]]:
    """``(name, unit, rows, weights)`` of each profile :func:`to_speedscope` makes, in its
    order: per sample type, per thread (ascending tid), the rows with a nonzero
    value in time order (ties: row order)."""
    tid, order = _tids_in_time_order(ep)
    comm_of: dict[int, str] = {}  # a thread's name: the comm of its first row (in row order) that has one
    if ep.comm is not None:
        comm = np.asarray(ep.comm, dtype=np.int64)
        has = np.flatnonzero(comm >= 0)
        ut, first, _ = uniq_first(tid[has])
        comm_of = {t: ep.comms[c] for t, c in zip(ut.tolist(), comm[has[first]].tolist())}
    tid_o = tid[order]
    for k in sample_types:
        kind, unit = ep.sample_types[k]
        col = ep.values[:, k]
        nonzero = col[order] != 0
        sel = order[nonzero]  # time order, then grouped by thread (stable)
        sel = sel[np.argsort(tid_o[nonzero], kind="stable")]
        ts, starts, _ = uniq_first(tid[sel])
        ends = np.append(starts[1:], len(sel))
        for t, a, b in zip(ts.tolist(), starts.tolist(), ends.tolist()):
            yield _profile_name(t, comm_of, kind), _unit(unit), sel[a:b], col


def _stack_texts(ep: ExportProfile, rows: np.ndarray, ids: list[str]) -> str:
    """``rows``' stacks root first as JSON arrays, comma-separated (json.dumps's text)."""
    a, b = ep.row_bounds(rows)
    lens = b - a
    ends = np.cumsum(lens)
    # each row's frame ids from its last (the root) to its first (the leaf)
    idx = np.repeat(b - 1 + (ends - lens), lens) - np.arange(int(ends[-1]) if len(ends) else 0)
    flat = [ids[j] for j in ep.stack[idx].tolist()]
    bounds = [0, *ends.tolist()]
    return ",".join(["[" + ",".join(flat[bounds[i]:bounds[i + 1]]) + "]" for i in range(len(rows))])


def iter_json(ep: ExportProfile, *, sample_types: list[int] | None = None) -> Iterator[str]:
    """``json.dumps(to_speedscope(ep, sample_types=...), separators=(",", ":"))`` in
    pieces: the profiles' ``samples`` and ``weights`` :data:`ROW_BATCH` rows at a time."""
    ep.validate()
    sep = (",", ":")
    yield (f'{{"$schema":{json.dumps(SCHEMA)},"shared":{json.dumps({"frames": _frames(ep)}, separators=sep)}'
           ',"profiles":[')
    ids = [str(i) for i in range(len(ep.frames))]
    for p, (name, unit, rows, col) in enumerate(_profile_rows(ep, _columns(ep, sample_types))):
        batches = [(a, min(a + ROW_BATCH, len(rows))) for a in range(0, len(rows), ROW_BATCH)]
        end = sum(sum(col[rows[a:b]].tolist()) for a, b in batches)  # Python ints: no int64 overflow
        yield (f'{"," if p else ""}{{"type":"sampled","name":{json.dumps(name)},"unit":{json.dumps(unit)},'
               f'"startValue":0,"endValue":{end},"samples":[')
        for j, (a, b) in enumerate(batches):
            yield ("," if j else "") + _stack_texts(ep, rows[a:b], ids)
        yield '],"weights":['
        for j, (a, b) in enumerate(batches):
            yield ("," if j else "") + ",".join(map(str, col[rows[a:b]].tolist()))
        yield "]}"
    yield (f'],"name":{json.dumps(ep.name)},"activeProfileIndex":0,'
           f'"exporter":{json.dumps(f"pmuscope@{__version__}")}}}')


def dumps(ep: ExportProfile, **kwargs) -> str:
    if vectorized():
        return "".join(iter_json(ep, **kwargs))
    return json.dumps(to_speedscope(ep, **kwargs), separators=(",", ":"))


def dump(ep: ExportProfile, f, **kwargs) -> None:
    """Write :func:`dumps`'s text to the text file ``f`` as it is made."""
    if not vectorized():
        f.write(dumps(ep, **kwargs))
        return
    for piece in iter_json(ep, **kwargs):
        f.write(piece)


def write(ep: ExportProfile, path: str, **kwargs) -> str:
    """Write the speedscope JSON to ``path`` (``-``: standard output) as it is made."""
    import os

    from ..outfile import open_output

    with open_output(path, "w") as out:
        dump(ep, out, **kwargs)
    return os.fspath(path)
