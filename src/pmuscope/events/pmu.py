"""PMU discovery from ``<sysfs_root>/bus/event_source/devices``.

Each directory there is a PMU: ``type`` (the perf_event_attr.type to use),
``format/`` (how named terms map onto config/config1/config2/config3 bits),
``events/`` (named aliases, with optional ``.scale``/``.unit``/``.per-pkg``/
``.snapshot`` companions), ``cpumask``/``cpus`` (uncore PMUs are opened on
one CPU per package) and ``caps/``. Results are cached per sysfs root;
:func:`clear_cache` forgets them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from functools import cached_property

from ..system._fs import parse_cpulist  # noqa: F401  (one cpulist parser; re-exported for callers)

#: attr fields a sysfs format may target
CONFIG_FIELDS = ("config", "config1", "config2", "config3")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class Format:
    """One sysfs ``format/<name>`` entry, e.g. ``config:0-7,32-35``."""

    name: str
    field: str  # config, config1, config2 or config3
    bits: tuple[int, ...]  # attr bit positions, ascending (value bit i goes to bits[i])
    text: str = ""

    @classmethod
    def parse(cls, name: str, text: str) -> "Format":
        m = re.fullmatch(r"\s*(config[123]?)\s*:\s*([0-9,\-\s]+)", text)
        if not m:
            raise ValueError(f"unrecognized sysfs format {name!r}: {text!r}")
        bits: list[int] = []
        for part in m.group(2).split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                bits.extend(range(lo, hi + 1))
            else:
                bits.append(int(part))
        return cls(name, m.group(1), tuple(bits), text.strip())

    @property
    def max_value(self) -> int:
        return (1 << len(self.bits)) - 1

    @property
    def mask(self) -> int:
        out = 0
        for b in self.bits:
            out |= 1 << b
        return out

    def encode(self, value: int) -> int:
        """Scatter ``value``'s low bits over this format's bit positions (the way
        perf's ``pmu_format_value`` does for split ranges)."""
        out = 0
        for i, bit in enumerate(self.bits):
            if value >> i & 1:
                out |= 1 << bit
        return out


@dataclass
class Alias:
    """A sysfs ``events/<name>`` entry: a term list such as ``event=0x3c,umask=0x00``."""

    name: str
    terms: str
    scale: float = 1.0
    unit: str = ""
    per_pkg: bool = False
    snapshot: bool = False
    desc: str = ""
    #: "sysfs" or "json" (a vendor event table)
    source: str = "sysfs"
    topic: str = ""
    #: extra facts from a vendor table (PEBS, SampleAfterValue, ...)
    info: dict = field(default_factory=dict)


@dataclass
class PMU:
    """One ``bus/event_source/devices/<name>`` directory."""

    name: str
    path: str
    type: int

    def _read_dir(self, sub: str) -> dict[str, str]:
        """Every readable file of ``<pmu>/<sub>/`` as name → text, by name."""
        base = os.path.join(self.path, sub)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return {}
        files = {name: _read(os.path.join(base, name)) for name in names}
        return {name: text for name, text in files.items() if text is not None}

    @cached_property
    def formats(self) -> dict[str, Format]:
        out: dict[str, Format] = {}
        for name, text in self._read_dir("format").items():
            try:
                out[name] = Format.parse(name, text)
            except ValueError:
                continue  # a format we cannot express; perf also ignores unknown ones
        return out

    @cached_property
    def aliases(self) -> dict[str, Alias]:
        out: dict[str, Alias] = {}
        files = self._read_dir("events")
        companions = (".scale", ".unit", ".per-pkg", ".snapshot")
        for name, text in files.items():
            if name.endswith(companions):
                continue
            alias = Alias(name, text.replace("\n", ","))
            scale = files.get(name + ".scale")
            if scale:
                try:
                    alias.scale = float(scale)
                except ValueError:
                    pass
            alias.unit = files.get(name + ".unit") or ""
            alias.per_pkg = (files.get(name + ".per-pkg") or "0").strip() == "1"
            alias.snapshot = (files.get(name + ".snapshot") or "0").strip() == "1"
            out[name] = alias
        return out

    def alias(self, name: str) -> Alias | None:
        """Look up an alias the way perf does: case-insensitively."""
        if name in self.aliases:
            return self.aliases[name]
        low = name.lower()
        for key, alias in self.aliases.items():
            if key.lower() == low:
                return alias
        return None

    @cached_property
    def cpus(self) -> list[int] | None:
        """CPUs this PMU is restricted to (``cpumask`` or ``cpus``), or None."""
        for fname in ("cpumask", "cpus"):
            text = _read(os.path.join(self.path, fname))
            if text:
                try:
                    return parse_cpulist(text)
                except ValueError:
                    return None
        return None

    @cached_property
    def caps(self) -> dict[str, str]:
        return self._read_dir("caps")

    @property
    def is_core(self) -> bool:
        """A CPU's core PMU (not uncore, not software)."""
        return is_core_pmu_name(self.name)

    @property
    def is_uncore(self) -> bool:
        return not self.is_core and self.cpus is not None


def is_core_pmu_name(name: str) -> bool:
    return name in ("cpu", "cpu_core", "cpu_atom", "cpum_cf") or name.startswith(
        ("armv8_", "armv7_", "armv9_", "arm_cortex", "riscv_pmu")
    )


_CACHE: dict[str, dict[str, PMU]] = {}


def devices_dir(sysfs_root: str = "/sys") -> str:
    return os.path.join(sysfs_root, "bus", "event_source", "devices")


def pmus(sysfs_root: str = "/sys") -> dict[str, PMU]:
    """All PMUs under ``sysfs_root`` by name (cached per root)."""
    root = os.path.abspath(os.fspath(sysfs_root))
    cached = _CACHE.get(root)
    if cached is not None:
        return cached
    out: dict[str, PMU] = {}
    base = devices_dir(root)
    try:
        names = sorted(os.listdir(base))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(base, name)
        text = _read(os.path.join(path, "type"))
        if text is None:
            continue
        try:
            type_ = int(text, 0)
        except ValueError:
            continue
        out[name] = PMU(name, path, type_)
    _CACHE[root] = out
    return out


def clear_cache() -> None:
    """Forget every cached sysfs scan (after hotplugging a PMU, or in tests)."""
    _CACHE.clear()


def find_pmus(name: str, sysfs_root: str = "/sys") -> list[PMU]:
    """PMUs a ``name/.../`` event refers to, the way perf matches them: the
    exact name; else ``uncore_<name>`` and numbered instances ``<name>_N``
    (``imc`` → ``uncore_imc_0``, ``uncore_imc_1`` ...); else a glob."""
    table = pmus(sysfs_root)
    if name in table:
        return [table[name]]
    out = []
    for candidate in (name, "uncore_" + name):
        pattern = re.compile(re.escape(candidate) + r"(_\d+)?")
        out = [p for n, p in table.items() if pattern.fullmatch(n)]
        if out:
            return out
    if any(c in name for c in "*?["):
        return [p for n, p in table.items() if fnmatch.fnmatchcase(n, name)]
    return []


def core_pmus(sysfs_root: str = "/sys") -> list[PMU]:
    """The core (CPU) PMUs, e.g. ``cpu`` or ``armv8_pmuv3_0``; empty on a VM without a vPMU."""
    return [p for p in pmus(sysfs_root).values() if p.is_core]
