"""The kernel ABI layer: ``perf_event.h`` mirrored in ctypes, the syscall,
ioctls, owned fds and errno → typed errors. Knows nothing of event names."""

from pmuscope._lazy import lazy_exports

from . import abi
from .abi import perf_event_attr, perf_event_mmap_page, perf_event_header

#: the syscall side, imported on first use (decoding a perf.data file needs
#: only the ABI layouts); the enum classes, created on first use (see abi)
_LAZY = {name: ".syscall" for name in ("PerfEventFd", "perf_event_open", "raw_perf_event_open",
                                        "error_from_errno", "syscall_number")}
_LAZY.update({name: ".abi" for name in ("PerfRecord", "PerfSample", "PerfFormat", "PerfType")})


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "abi",
    "perf_event_attr",
    "perf_event_mmap_page",
    "perf_event_header",
    "PerfRecord",
    "PerfSample",
    "PerfFormat",
    "PerfType",
    "PerfEventFd",
    "perf_event_open",
    "raw_perf_event_open",
    "error_from_errno",
    "syscall_number",
]
