"""Minimal CPU identity for choosing a vendor event table: vendor, family,
model, stepping from ``<root>/proc/cpuinfo`` (x86), MIDR fields on Arm.

:mod:`pmuscope.system` has the full reader; this one only needs enough to
form perf's CPUID string (``GenuineIntel-6-55-4``, ``AuthenticAMD-26-2-1``,
``0x00000000410fd0c0``) and match it against a pmu-events ``mapfile.csv``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuIdentity:
    vendor: str  # GenuineIntel, AuthenticAMD, HygonGenuine, ARM (0x41) ...
    family: int = 0
    model: int = 0
    stepping: int = 0
    #: Arm MIDR_EL1 (0 on x86)
    midr: int = 0

    @property
    def perf_cpuid(self) -> str:
        """The string perf matches against ``mapfile.csv``: ``vendor-family-MODEL-STEPPING``
        (family decimal, model and stepping upper-case hex) on x86, the MIDR on Arm."""
        if self.midr:
            return f"0x{self.midr:016x}"
        return f"{self.vendor}-{self.family}-{self.model:X}-{self.stepping:X}"


def _num(text: str) -> int:
    text = text.strip()
    return int(text, 0) if text.lower().startswith("0x") else int(text)


def read_cpu_identity(root: str = "/") -> CpuIdentity:
    """CPU identity of the first processor in ``<root>/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    try:
        with open(os.path.join(root, "proc", "cpuinfo"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return CpuIdentity("unknown")
    if "vendor_id" in fields:
        try:
            return CpuIdentity(
                fields["vendor_id"],
                _num(fields.get("cpu family", "0")),
                _num(fields.get("model", "0")),
                _num(fields.get("stepping", "0") or "0"),
            )
        except ValueError:
            return CpuIdentity(fields["vendor_id"])
    if "CPU implementer" in fields:
        try:
            impl = _num(fields["CPU implementer"])
            variant = _num(fields.get("CPU variant", "0"))
            arch = 0xF  # MIDR architecture field reads 0xf on every ARMv7+/v8 CPU
            part = _num(fields.get("CPU part", "0"))
            rev = _num(fields.get("CPU revision", "0"))
        except ValueError:
            return CpuIdentity("arm")
        midr = impl << 24 | variant << 20 | arch << 16 | part << 4 | rev
        return CpuIdentity(f"0x{impl:02x}", 0, part, rev, midr)
    return CpuIdentity("unknown")
