"""CPU identity for choosing a vendor event table.

The reader lives in :mod:`pmuscope.system.identity` (vendor/family/model/
stepping from ``<root>/proc/cpuinfo``, MIDR on Arm, perf's CPUID string and
its mapfile.csv matching rules); this module re-exports what event
resolution needs so callers of ``pmuscope.events`` have one import."""

from __future__ import annotations

from ..system.identity import CpuIdentity, perf_cpuid_matches, read_cpu_identity

__all__ = ["CpuIdentity", "read_cpu_identity", "perf_cpuid_matches"]
