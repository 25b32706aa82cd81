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


def python_summary(folded: Mapping[str, int], top: int) -> str:
    """Python functions of the profile, as py-spy shows them: each function's
    share of samples with its callees (Total) and as the innermost Python
    frame (Own: running its own bytecode or the native code it called), and
    the hottest Python call paths (the folded stacks with only their ``py::``
    frames, recursion folded). Empty when no sample has a Python frame."""
    total_n = 0
    total: dict[str, int] = {}
    own: dict[str, int] = {}
    paths: dict[str, int] = {}
    for stack, n in folded.items():
        total_n += n
        py = [f[4:] for f in stack.split(";") if f.startswith("py::")]
        if not py:
            continue
        for f in set(py):
            total[f] = total.get(f, 0) + n
        own[py[-1]] = own.get(py[-1], 0) + n
        names = [f.partition(":")[0] for f in py]
        path = [x for i, x in enumerate(names) if i == 0 or x != names[i - 1]]
        key = " -> ".join(path[-4:])
        paths[key] = paths.get(key, 0) + n
    if not total or not total_n:
        return ""

    def name(label: str) -> str:
        func, _, where = label.partition(":")
        return f"{func}  ({where.rsplit('/', 1)[-1]})" if where and not where.startswith("<") else func

    pct = lambda n: 100.0 * n / total_n  # noqa: E731
    out = ["", "# Python functions (Total: samples in the function and its callees; Own: as the innermost",
           "# Python frame, in its bytecode or the native code it called)", "#   Total      Own  Function"]
    for f, n in sorted(total.items(), key=lambda kv: (-kv[1], -own.get(kv[0], 0)))[:top]:
        out.append(f"  {pct(n):6.2f}%  {pct(own.get(f, 0)):6.2f}%  {name(f)}")
    out += ["", "# Hottest Python call paths (innermost four functions, recursion folded)"]
    for key, n in sorted(paths.items(), key=lambda kv: -kv[1])[:5]:
        out.append(f"  {pct(n):6.2f}%  {key}")
    return "\n".join(out) + "\n"
