"""Folded stacks: flamegraph.pl's format, the lingua franca of profilers.

One line per unique stack, frames root-first joined by ``;``, then a space
and an integer count (``main;parse;read 42``). The last space separates the
count, so frames may contain spaces; a ``;`` inside a frame name is replaced.
Kernel frames may carry ``_[k]`` and JIT frames ``_[j]`` (stackcollapse-perf's
``--kernel``/``--jit`` annotations).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Mapping, Sequence

from ..errors import FormatError

_LINE = re.compile(r"^(.*) (\d+)$")


def frame_name(name: str) -> str:
    """Make a frame name safe for the folded format."""
    return name.replace(";", ":").replace("\n", " ")


def fold(stacks: Iterable[tuple[Sequence[str], int]]) -> Counter:
    """Aggregate ``(frames root-first, count)`` pairs into a folded Counter."""
    out: Counter = Counter()
    for frames, count in stacks:
        if count:
            out[";".join(frame_name(f) for f in frames)] += int(count)
    return out


def parse_folded(text: str, *, source: str = "<folded>") -> Counter:
    """Parse folded text; a malformed line raises FormatError naming it."""
    out: Counter = Counter()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise FormatError(
                f"{source}:{lineno}: expected 'frame;frame;... COUNT', got {line[:80]!r}", path=source, line=lineno
            )
        out[m.group(1)] += int(m.group(2))
    return out


def format_folded(folded: Mapping[str, int]) -> str:
    """Folded text, stacks sorted (flamegraph.pl sorts them too)."""
    return "".join(f"{stack} {count}\n" for stack, count in sorted(folded.items()) if count)
