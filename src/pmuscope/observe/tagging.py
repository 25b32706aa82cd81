"""``observe --tags``: read a process's software tags (:mod:`pmuscope.tags`)
with every counter sample.

The tag snapshot is taken inside each sample's timestamp bracket, so a period
the double-time check trusts has trustworthy tags too. A period whose tags
changed between its two samples spans two program states: its counts cannot
be given to one tag value, so ``tags_stable`` is false for it and the summary
counts the periods that are both trustable and stable (``trustable_tagged``).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from .. import errors
from ..tags import ENV, SIZE, TagReader, channel_path, create_file


def _tgid(tid: int) -> int:
    try:
        with open(f"/proc/{tid}/status") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return tid


def open_reader(tags, *, cpu=None, pid=None, tid=None) -> TagReader:
    """``tags`` is True (the target process's own channel), a channel path, or a TagReader."""
    if isinstance(tags, TagReader):
        return tags
    if isinstance(tags, (str, os.PathLike)):
        return TagReader(os.fspath(tags))
    if pid is None and tid is None:
        raise errors.PmuscopeError("observe --tags reads a process's tag channel: give -p PID, -t TID or -- CMD, not -C")
    return TagReader.for_pid(pid if pid is not None else _tgid(tid))


def command_channel() -> tuple[str, dict[str, str]]:
    """A fresh channel file for a command we start, and the environment that points it there."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix="pmuscope-tags-cmd-", dir=base)
    os.close(fd)
    create_file(path)
    return path, dict(os.environ, **{ENV: path})


def reset_channel(path: str) -> None:
    create_file(path)


def tag_columns(result) -> dict[str, np.ndarray]:
    """Per-period ``tag:<name>`` columns (the value read with the period's end
    sample) and ``tags_stable``."""
    cols: dict[str, np.ndarray] = {}
    stable = np.ones(max(0, result.samples - 1), dtype=bool)
    for name, vals in result.tags.items():
        vals = np.asarray(vals)
        cols[name] = vals[1:]
        a, b = vals[:-1], vals[1:]
        same = (a == b) | (np.isnan(a) & np.isnan(b)) if vals.dtype.kind == "f" else a == b
        stable &= same
    cols["tags_stable"] = stable
    return cols


def tag_summary(result) -> dict[str, object]:
    cols = tag_columns(result)
    trust = np.asarray(result.dte.trustable, dtype=bool)
    stable = cols.pop("tags_stable")
    both = trust & stable if len(trust) == len(stable) else stable
    per: dict[str, object] = {}
    for name, vals in cols.items():
        v = vals[both]
        v = v[~np.isnan(v)] if v.dtype.kind == "f" else v
        uniq, counts = np.unique(v, return_counts=True)
        order = np.argsort(-counts)[:20]
        per[name] = {"last": _py(vals[-1]) if len(vals) else None,
                     "trustable_periods_by_value": {str(_py(uniq[i])): int(counts[i]) for i in order}}
    return {"tags": per, "tags_stable": int(stable.sum()), "trustable_tagged": int(both.sum())}


def _py(x):
    x = x.item() if hasattr(x, "item") else x
    return None if isinstance(x, float) and x != x else x


__all__ = ["open_reader", "command_channel", "tag_columns", "tag_summary", "SIZE", "channel_path"]


def format_tags(summary: dict) -> str:
    """The text report's tag lines."""
    lines = [f"  tags         {summary['trustable_tagged']:>10,}   trustable periods with stable tags"]
    for name, t in summary["tags"].items():
        vals = ", ".join(f"{v}: {n}" for v, n in list(t["trustable_periods_by_value"].items())[:6])
        lines.append(f"    {name:<20} last {t['last']}; periods by value {vals or '-'}")
    return "\n".join(lines)
