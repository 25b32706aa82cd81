"""Platform event tables for the NUMA view, chosen by CPU identity.

The tables are data (``pmuscope/data/numa/{intel,amd,arm,power}.json``), not
code: supporting a new CPU is a new JSON row. Each row names, per metric
(``clk``, ``core_clk``, ``ir``, ``rma``, ``lma``), the list of events whose
counts are *summed* (POWER's RMA is DMEM + RMEM), or ``null`` with the reason
under ``missing``. Rows inherit their vendor file's ``defaults``.

A CPU that matches no row still gets :func:`generic_platform`: cycles and
instructions (CPI), and perf's generic ``node-loads``/``node-load-misses``
cache events for LMA/RMA where the kernel maps them — each metric whose
events do not exist is named with the reason instead of being shown as 0
(numatop instead exits with "CPU is not supported!").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..kernel import abi
from ..system import CpuIdentity

METRICS = ("clk", "ir", "rma", "lma")
TABLE_FILES = ("intel.json", "amd.json", "arm.json", "power.json")

#: generic hardware event ids (enum perf_hw_id)
_HW = {"cycles": 0, "instructions": 1, "ref-cycles": 9}
# PERF_TYPE_HW_CACHE config: id | op << 8 | result << 16 (include/uapi/linux/perf_event.h)
_CACHE_NODE, _OP_READ, _RESULT_ACCESS, _RESULT_MISS = 6, 0, 0, 1


@dataclass(frozen=True)
class EventRef:
    """One event of a metric: ``type`` is ``hardware`` (a generic name),
    ``raw`` (config/config1 for the core PMU) or ``cache``; ``sign`` -1
    subtracts it from the metric's sum."""

    type: str
    config: int
    config1: int = 0
    name: str = ""
    sign: int = 1

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EventRef":
        t = d["type"]
        cfg = d.get("config", 0)
        if t == "hardware":
            config = _HW[cfg]
        else:
            config = int(cfg, 0) if isinstance(cfg, str) else int(cfg)
        c1 = d.get("config1", 0)
        return cls(t, config, int(c1, 0) if isinstance(c1, str) else int(c1), d.get("name") or str(cfg), int(d.get("sign", 1)))

    def attr_fields(self) -> dict[str, int]:
        """perf_event_attr type/config/config1 for this event."""
        perf_type = {"hardware": abi.PERF_TYPE_HARDWARE, "raw": abi.PERF_TYPE_RAW, "cache": abi.PERF_TYPE_HW_CACHE}[self.type]
        out = {"type": int(perf_type), "config": self.config}
        if self.config1:
            out["config1"] = self.config1
        return out

    def to_dict(self) -> dict[str, Any]:
        d = {"type": self.type, "config": hex(self.config), "name": self.name}
        if self.config1:
            d["config1"] = hex(self.config1)
        if self.sign != 1:
            d["sign"] = self.sign
        return d


@dataclass
class Platform:
    """The events of one platform and what it cannot measure."""

    name: str
    description: str
    vendor: str
    events: dict[str, list[EventRef]]
    missing: dict[str, str] = field(default_factory=dict)
    uncore: dict[str, dict[str, Any]] = field(default_factory=dict)
    ll: dict[str, Any] | None = None
    source: str = ""

    @property
    def generic(self) -> bool:
        return self.name == "generic"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "vendor": self.vendor,
            "events": {k: [e.to_dict() for e in v] for k, v in self.events.items()},
            "missing": dict(self.missing),
            "uncore": self.uncore,
            "source": self.source,
        }


def load_tables() -> list[dict[str, Any]]:
    """The vendor table files as parsed JSON (package data)."""
    base = resources.files("pmuscope").joinpath("data", "numa")
    return [json.loads(base.joinpath(name).read_text(encoding="utf-8")) for name in TABLE_FILES]


def _matches(match: dict[str, Any], vendor: str, table_vendor: str, ident: CpuIdentity) -> bool:
    if "model_name_regex" in match:
        return re.search(match["model_name_regex"], ident.model_name or "") is not None
    if "midr_parts" in match:
        if ident.midr is None:
            return False
        mine = (ident.midr.implementer, ident.midr.part)
        for item in match["midr_parts"]:
            impl, part = (int(x, 0) for x in item.split(":"))
            if (impl, part) == mine:
                return True
        return False
    if vendor != table_vendor or ident.family is None:
        return False
    if "family_min" in match:
        return ident.family >= match["family_min"]
    if ident.family != match.get("family"):
        return False
    model = ident.model if ident.model is not None else -1
    if "models" in match and model not in match["models"]:
        return False
    if "model_ranges" in match and not any(lo <= model <= hi for lo, hi in match["model_ranges"]):
        return False
    return True


def _build(row: dict[str, Any], table: dict[str, Any]) -> Platform:
    defaults = table.get("defaults", {})
    events: dict[str, list[EventRef]] = {}
    missing = dict(defaults.get("missing", {}))
    merged = dict(defaults.get("events", {}))
    merged.update(row.get("events", {}))
    for metric, refs in merged.items():
        if refs is None:
            continue
        events[metric] = [EventRef.from_json(r) for r in refs]
    missing.update(row.get("missing", {}))
    for metric in METRICS:
        if metric not in events and metric not in missing:
            missing[metric] = f"no {metric} event in the {row['name']} table"
    uncore = dict(defaults.get("uncore", {}))
    uncore.update(row.get("uncore", {}))
    return Platform(row["name"], row.get("description", ""), table["vendor"], events, missing, uncore,
                    row.get("ll", defaults.get("ll")), table.get("source", ""))


def select_platform(ident: CpuIdentity) -> Platform | None:
    """The first table row matching this CPU, or None."""
    for table in load_tables():
        for row in table["platforms"]:
            if _matches(row.get("match", {}), ident.vendor, table["vendor"], ident):
                return _build(row, table)
    return None


def generic_platform(ident: CpuIdentity | None = None) -> Platform:
    """Events any perf-capable CPU may have: generic cycles/instructions and
    the NODE cache events (RMA = node-load-misses, LMA = node-loads −
    node-load-misses: perf's NODE "access" counts loads the memory of *some*
    node served, "miss" those a remote node served)."""
    node = _CACHE_NODE | _OP_READ << 8
    access = EventRef("cache", node | _RESULT_ACCESS << 16, name="node-loads")
    miss = EventRef("cache", node | _RESULT_MISS << 16, name="node-load-misses")
    what = ident.description if ident is not None else "this CPU"
    return Platform(
        "generic",
        f"generic events ({what} is not in the NUMA tables)",
        ident.vendor if ident is not None else "unknown",
        {"clk": [EventRef("hardware", 0, name="cycles")], "ir": [EventRef("hardware", 1, name="instructions")],
         "rma": [miss], "lma": [access, EventRef(miss.type, miss.config, name=miss.name, sign=-1)]},
        {"imc_mb": f"no memory-controller events in the tables for {what}",
         "upi_mb": f"no socket-link events in the tables for {what}"},
    )


def platform_for(ident: CpuIdentity) -> Platform:
    """:func:`select_platform`, else :func:`generic_platform`."""
    return select_platform(ident) or generic_platform(ident)
