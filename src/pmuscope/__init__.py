"""pmuscope: observe a Linux machine through the kernel's perf_event subsystem.

The public API is re-exported here and imported lazily (PEP 562), so that
``import pmuscope`` and every CLI command start fast: a name's module is
loaded the first time the name is used.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

from .errors import (  # noqa: E402  (cheap, and needed to catch errors from anything)
    PmuscopeError,
    EventParseError,
    UnknownEventError,
    EventNotSupportedError,
    NoHardwarePMUError,
    PermissionDeniedError,
    InvalidAttrError,
    TooManyOpenFilesError,
    ProcessGoneError,
    ResourceBusyError,
    FormatError,
    OutputError,
    OutputWriteError,
    RingBufferLost,
    MissingExtraError,
)

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    # counting
    "count": ".counting", "Counter": ".counting", "Counts": ".counting", "EventCount": ".counting",
    "Workload": ".counting", "monitor": ".counting.monitor", "Monitor": ".counting.monitor",
    # events, system, doctor
    "EventSpec": ".events", "parse_events": ".events", "apply_counting_defaults": ".events",
    "stat_defaults": ".events", "read_topology": ".system", "Topology": ".system", "CpuIdentity": ".system",
    "diagnose": ".doctor", "Check": ".doctor",
    # sampling side
    "Symbolizer": ".symbols", "PerfDataFile": ".perfdata", "PerfDataWriter": ".perfdata",
    "record": ".sampling", "Recorder": ".sampling", "RecordResult": ".sampling",
    "on_overflow": ".sampling.overflow", "OverflowInfo": ".sampling.overflow",
    "load_profile": ".profile", "Profile": ".profile", "build_report": ".profile",
    # microscopy
    "observe": ".observe", "Observer": ".observe", "region": ".observe.regions",
    # SPE
    "decode_records": ".spe", "SpeRecords": ".spe",
    # memory sampling (perf mem / perf c2c)
    "MemSamples": ".memory", "load_mem_samples": ".memory", "mem_report": ".memory", "c2c_analyze": ".memory",
    # beyond one machine: Prometheus exporter, profile exports
    "open_exporter": ".serve", "ExportProfile": ".export", "PyroscopePusher": ".export",
}
#: submodules reachable as attributes (``pmuscope.regions.table()``)
_SUBMODULES = {"regions": ".observe.regions", "numa": ".numa", "spe": ".spe", "memory": ".memory", "kernel": ".kernel", "events": ".events",
               "serve": ".serve", "export": ".export", "tags": ".tags"}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)


__all__ = [
    "PmuscopeError", "EventParseError", "UnknownEventError", "EventNotSupportedError", "NoHardwarePMUError",
    "PermissionDeniedError", "InvalidAttrError", "TooManyOpenFilesError", "ProcessGoneError",
    "ResourceBusyError", "FormatError", "OutputError", "OutputWriteError", "RingBufferLost", "MissingExtraError", *_LAZY,
]
