"""Microscopy: SHIM-style high-rate counter reads, trustable samples (DTE),
user-space reads through the mmap page, and likwid/PAPI-style regions."""

from .dte import DEFAULT_TOLERANCE, DteResult, dte_filter
from .mmap_page import MmapCounter, explain, read_page
from .observer import ObserveResult, Observer, observe, write_series

__all__ = [
    "DEFAULT_TOLERANCE",
    "DteResult",
    "dte_filter",
    "MmapCounter",
    "explain",
    "read_page",
    "ObserveResult",
    "Observer",
    "observe",
    "write_series",
]
