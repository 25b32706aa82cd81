"""The kernel ABI layer: ``perf_event.h`` mirrored in ctypes, the syscall,
ioctls, owned fds and errno → typed errors. Knows nothing of event names."""

from . import abi
from .abi import perf_event_attr, perf_event_mmap_page, perf_event_header, PerfRecord, PerfSample, PerfFormat, PerfType
from .syscall import PerfEventFd, perf_event_open, raw_perf_event_open, error_from_errno, syscall_number

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
