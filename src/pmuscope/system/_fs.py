"""Small readers for sysfs/procfs text files under an injectable root, and the
kernel's cpulist / cpumask formats."""

from __future__ import annotations

import os
import re
from typing import Iterable


def path(root: str, rel: str) -> str:
    """``<root>/<rel>`` (``rel`` may start with a slash)."""
    return os.path.join(root, rel.lstrip("/"))


def read_text(root: str, rel: str) -> str | None:
    """The stripped contents of ``<root>/<rel>``, or None when unreadable."""
    try:
        with open(path(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def read_int(root: str, rel: str, base: int = 10) -> int | None:
    text = read_text(root, rel)
    if text is None:
        return None
    try:
        return int(text.split()[0], base) if text else None
    except ValueError:
        return None


def listdir(root: str, rel: str) -> list[str]:
    try:
        return sorted(os.listdir(path(root, rel)))
    except OSError:
        return []


def numbered(names: Iterable[str], prefix: str) -> list[int]:
    """The N of every ``<prefix>N`` entry, sorted numerically."""
    out = []
    for name in names:
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            out.append(int(name[len(prefix):]))
    return sorted(out)


_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?$")


def parse_cpulist(text: str | None) -> list[int]:
    """Parse the kernel's list format (``bitmap_parselist``): ``"0-3,8,10-11"``,
    and strided groups ``"0-1023:2/256"`` (the first 2 of every 256). Empty → []."""
    if text is None:
        return []
    text = text.strip()
    if not text:
        return []
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"bad cpulist element {part!r} in {text!r}")
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) is not None else start
        if end < start:
            raise ValueError(f"bad cpulist range {part!r} in {text!r} (end < start)")
        if m.group(3) is not None:
            used, group = int(m.group(3)), int(m.group(4))
            if group == 0 or used > group:
                raise ValueError(f"bad cpulist stride {part!r} in {text!r}")
            for base in range(start, end + 1, group):
                cpus.update(c for c in range(base, min(base + used, end + 1)))
        else:
            cpus.update(range(start, end + 1))
    return sorted(cpus)


def cpu_list_arg(text: str) -> list[int]:
    """A CPU list typed by a user (``-C 0-3,8``): :func:`parse_cpulist`, with
    a :class:`~pmuscope.errors.PmuscopeError` that says what a list looks like."""
    from ..errors import PmuscopeError

    try:
        return parse_cpulist(text)
    except ValueError as err:
        why = "runs backwards" if "end < start" in str(err) else "is not N or N-M"
        part = str(err).split("'")[1] if "'" in str(err) else text
        raise PmuscopeError(f"bad CPU list {text.strip()!r}: {part!r} {why} (example: 0-3,8)") from None


def online_cpus(sysfs: str = "/sys") -> list[int]:
    """The online CPUs (``<sysfs>/devices/system/cpu/online``), or all CPUs
    ``os.cpu_count()`` reports when that file cannot be read."""
    import os

    try:
        with open(os.path.join(sysfs, "devices/system/cpu/online")) as f:
            return parse_cpulist(f.read())
    except (OSError, ValueError):
        return list(range(os.cpu_count() or 1))


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of :func:`parse_cpulist` (ranges, no strides): ``[0,1,2,5]`` → ``"0-2,5"``."""
    items = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        parts.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpumask(text: str | None) -> list[int]:
    """Parse the kernel's hex mask format (``"ffff,00000003"``, 32-bit words,
    most significant first)."""
    if text is None or not text.strip():
        return []
    value = int(text.strip().replace(",", ""), 16)
    out = []
    bit = 0
    while value:
        if value & 1:
            out.append(bit)
        value >>= 1
        bit += 1
    return out


def parse_size(text: str | None) -> int | None:
    """``"32K"`` / ``"1024K"`` / ``"2M"`` / ``"4096"`` → bytes."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1].upper())
    try:
        return int(text[:-1]) * mult if mult else int(text)
    except ValueError:
        return None
