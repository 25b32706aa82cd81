"""Vendor event tables in perf's pmu-events JSON format.

A table directory holds one directory per CPU model (``skylakex/``,
``amdzen4/`` ...) of ``*.json`` files, each a list of objects with
``EventName``, ``EventCode``, ``UMask``, ``BriefDescription`` ... plus a
``mapfile.csv`` mapping perf CPUID regexes to model directories
(``GenuineIntel-6-55-[01234],v1.29,skylakex,core``). Events become aliases of
the PMU their ``Unit`` names (the core PMU when absent), encoded as terms the
way perf's ``jevents.py`` encodes them.
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass, field

from ..errors import PmuscopeError
from .cpuid import CpuIdentity, perf_cpuid_matches, read_cpu_identity
from .pmu import PMU, Alias

ENV_DIR = "PMUSCOPE_EVENTS_DIR"

#: JSON field -> term, in the order jevents.py emits them
_EVENT_FIELDS = (
    ("AnyThread", "any"),
    ("PortMask", "ch_mask"),
    ("CounterMask", "cmask"),
    ("EdgeDetect", "edge"),
    ("FCMask", "fc_mask"),
    ("Invert", "inv"),
    ("UMask", "umask"),
)
#: MSRIndex -> the format term carrying MSRValue
_MSR_TERMS = {0x3F6: "ldlat", 0x1A6: "offcore_rsp", 0x1A7: "offcore_rsp", 0x3F7: "frontend"}
#: Unit -> PMU name (others: uncore_<unit lowercased>)
_UNIT_PMU = {
    "CBO": "uncore_cbox",
    "QPI LL": "uncore_qpi",
    "SBO": "uncore_sbox",
    "iMPH-U": "uncore_arb",
    "CPU-M-CF": "cpum_cf",
    "CPU-M-SF": "cpum_sf",
    "PAI-CRYPTO": "pai_crypto",
    "UPI LL": "uncore_upi",
    "cpu_core": "cpu_core",
    "cpu_atom": "cpu_atom",
}


def unit_to_pmu(unit: str | None) -> str | None:
    """perf's mapping of a JSON ``Unit`` to a PMU name; None means the core PMU."""
    if not unit:
        return None
    return _UNIT_PMU.get(unit, "uncore_" + unit.lower())


def _num(value) -> int:
    return int(str(value).split(",")[0].strip(), 0)


def json_event_terms(ev: dict) -> str:
    """The term string perf's jevents.py builds for one JSON event."""
    if "ConfigCode" in ev:
        terms = [f"config={_num(ev['ConfigCode']):#x}"]
    else:
        code = _num(ev.get("EventCode", "0"))
        if "ExtSel" in ev:
            code |= _num(ev["ExtSel"]) << 8
        terms = [f"event={code:#x}"]
    for key, term in _EVENT_FIELDS:
        if key in ev and str(ev[key]) not in ("0", "0x0", "0x00", ""):
            terms.append(f"{term}={_num(ev[key]):#x}")
    if ev.get("Filter"):
        terms.append(str(ev["Filter"]))
    if ev.get("MSRIndex") and ev.get("MSRValue"):
        idx = _num(ev["MSRIndex"])
        if idx in _MSR_TERMS:
            terms.append(f"{_MSR_TERMS[idx]}={_num(ev['MSRValue']):#x}")
    return ",".join(terms)


def _scale_unit(text: str) -> tuple[float, str]:
    m = re.fullmatch(r"\s*([0-9.eE+\-]+)\s*(.*)", text or "")
    if not m:
        return 1.0, text or ""
    try:
        return float(m.group(1)), m.group(2)
    except ValueError:
        return 1.0, text


@dataclass
class VendorEvents:
    """The events of one CPU model, keyed by lower-cased name."""

    model_dir: str
    events: dict[str, Alias] = field(default_factory=dict)
    #: lower-cased event name -> PMU name (None: the core PMU)
    pmu_of: dict[str, str | None] = field(default_factory=dict)
    cpuid: str = ""

    @classmethod
    def load(cls, model_dir: str, cpuid: str = "", arch_std: dict[str, dict] | None = None) -> "VendorEvents":
        """Load every ``*.json`` event file in ``model_dir`` (metric files are
        skipped). Entries that only name an ``ArchStdEvent`` (Arm) are filled
        in from ``arch_std`` (the architecture's common events by name), the
        entry's own fields taking precedence, as perf's jevents.py does."""
        table = cls(os.fspath(model_dir), cpuid=cpuid)
        arch_std = arch_std or {}
        try:
            names = sorted(os.listdir(model_dir))
        except OSError as err:
            raise PmuscopeError(f"cannot read vendor event directory {model_dir}: {err.strerror}") from None
        for fname in names:
            if not fname.endswith(".json"):
                continue
            path = os.path.join(model_dir, fname)
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError) as err:
                raise PmuscopeError(f"cannot load vendor event file {path}: {err}") from None
            if not isinstance(data, list):
                continue
            topic = fname[:-5]
            for ev in data:
                if isinstance(ev, dict) and "ArchStdEvent" in ev:
                    std = arch_std.get(str(ev["ArchStdEvent"]).upper())
                    if std is None:
                        continue
                    ev = {**std, **{k: v for k, v in ev.items() if k != "ArchStdEvent"}}
                if not isinstance(ev, dict) or "EventName" not in ev or "MetricName" in ev:
                    continue
                name = str(ev["EventName"])
                scale, unit = _scale_unit(str(ev.get("ScaleUnit", "")))
                info = {k: ev[k] for k in ("PEBS", "Counter", "Data_LA", "Errata", "Deprecated") if k in ev}
                if "SampleAfterValue" in ev:
                    try:
                        info["period"] = _num(ev["SampleAfterValue"])
                    except ValueError:
                        pass
                alias = Alias(
                    name,
                    json_event_terms(ev),
                    scale=scale,
                    unit=unit,
                    per_pkg=str(ev.get("PerPkg", "0")) == "1",
                    desc=str(ev.get("BriefDescription") or ev.get("PublicDescription") or ""),
                    source="json",
                    topic=topic,
                    info=info,
                )
                key = name.lower()
                table.events[key] = alias
                table.pmu_of[key] = unit_to_pmu(ev.get("Unit"))
        return table

    def alias_for(self, pmu: PMU, name: str) -> Alias | None:
        """The event ``name`` if it belongs to ``pmu`` (core events to core
        PMUs, uncore events to ``uncore_<unit>`` and its numbered instances)."""
        key = name.lower()
        alias = self.events.get(key)
        if alias is None:
            return None
        target = self.pmu_of.get(key)
        if target is None:
            return alias if pmu.is_core else None
        if pmu.name == target or re.fullmatch(re.escape(target) + r"_\d+", pmu.name):
            return alias
        return None


def match_mapfile(events_dir: str, cpuid: str) -> str | None:
    """The model directory ``mapfile.csv`` assigns to perf CPUID string ``cpuid``."""
    for mapfile in _mapfiles(events_dir):
        base = os.path.dirname(mapfile)
        with open(mapfile, newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                if len(row) < 3 or row[0].startswith("#") or row[0] == "Family-model":
                    continue
                if len(row) >= 4 and row[3].strip() not in ("core", ""):
                    continue
                if perf_cpuid_matches(row[0].strip(), cpuid):
                    return os.path.join(base, row[2].strip())
    return None


def _mapfiles(events_dir: str) -> list[str]:
    out = []
    direct = os.path.join(events_dir, "mapfile.csv")
    if os.path.isfile(direct):
        out.append(direct)
    # a whole pmu-events/arch tree: arch/<arch>/mapfile.csv
    try:
        for sub in sorted(os.listdir(events_dir)):
            path = os.path.join(events_dir, sub, "mapfile.csv")
            if os.path.isfile(path):
                out.append(path)
    except OSError:
        pass
    return out


def load_for_cpu(events_dir: str, identity: CpuIdentity | None = None) -> VendorEvents | None:
    """The table for ``identity`` (default: this CPU) from a pmu-events tree,
    or None when the mapfile has no entry for it. A directory holding
    ``*.json`` files directly is used as the model directory."""
    events_dir = os.fspath(events_dir)
    identity = identity or read_cpu_identity()
    cpuid = identity.perf_cpuid or ""
    if not _mapfiles(events_dir):
        if any(n.endswith(".json") for n in os.listdir(events_dir)):
            return VendorEvents.load(events_dir, cpuid)
        return None
    model_dir = match_mapfile(events_dir, cpuid)
    if model_dir is None or not os.path.isdir(model_dir):
        return None
    return VendorEvents.load(model_dir, cpuid, arch_std_events(model_dir))


def arch_std_events(model_dir: str) -> dict[str, dict]:
    """The architecture-standard events (Arm's ``common-and-microarch.json``,
    ``recommended.json`` ...): the JSON files of the directory holding
    ``mapfile.csv`` above ``model_dir``, by upper-cased EventName."""
    out: dict[str, dict] = {}
    d = os.path.dirname(os.path.abspath(model_dir))
    for _ in range(3):
        if os.path.isfile(os.path.join(d, "mapfile.csv")):
            break
        d = os.path.dirname(d)
    else:
        return out
    for fname in sorted(os.listdir(d)):
        if not fname.endswith(".json"):
            continue
        try:
            with open(os.path.join(d, fname), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        for ev in data if isinstance(data, list) else []:
            if isinstance(ev, dict) and "EventName" in ev:
                out[str(ev["EventName"]).upper()] = ev
    return out


_ENV_CACHE: dict[str, VendorEvents | None] = {}


def resolve_vendor_tables(vendor_tables, *, sysfs_root: str = "/sys") -> VendorEvents | None:
    """Normalize ``parse_events(vendor_tables=...)``: a VendorEvents, a path,
    or None (``$PMUSCOPE_EVENTS_DIR`` for this CPU, else no table)."""
    if isinstance(vendor_tables, VendorEvents):
        return vendor_tables
    if vendor_tables is None:
        path = os.environ.get(ENV_DIR)
        if not path:
            return None
        if path not in _ENV_CACHE:
            _ENV_CACHE[path] = load_for_cpu(path) if os.path.isdir(path) else None
        return _ENV_CACHE[path]
    return load_for_cpu(os.fspath(vendor_tables))
