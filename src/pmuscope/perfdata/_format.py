"""The few perf.data facts both the reader and the writer need, in a module of
their own: writing a file (``pmuscope record``) must not import the reader,
whose record decoding brings numpy."""

from __future__ import annotations

from .._plain import Plain
from ..kernel import abi

PERF_MAGIC2 = b"PERFILE2"
PERF_MAGIC1 = b"PERFFILE"
FILE_HEADER_SIZE = 104
PIPE_HEADER_SIZE = 16


class PerfDataAttr(Plain):
    """One event of the file: its ``perf_event_attr``, the sample ids of its
    fds, and its name (from EVENT_DESC, EVENT_UPDATE or the old event_types
    section, else made up from type/config)."""

    _fields = ("index", "attr", "ids", "name")

    index: int
    attr: abi.perf_event_attr
    ids: list[int]
    name: str | None

    def __init__(self, index: int, attr: abi.perf_event_attr, ids: list[int], name: str | None = None) -> None:
        self.index = index
        self.attr = attr
        self.ids = ids
        self.name = name


_HW_NAMES = ["cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses", "bus-cycles",
             "stalled-cycles-frontend", "stalled-cycles-backend", "ref-cycles"]
_SW_NAMES = ["cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations", "minor-faults",
             "major-faults", "alignment-faults", "emulation-faults", "dummy", "bpf-output", "cgroup-switches"]


def default_event_name(attr: abi.perf_event_attr) -> str:
    """perf's name for an attr without a recorded name (generic events), else ``type:config``."""
    t, c = int(attr.type), int(attr.config)
    if t == abi.PERF_TYPE_HARDWARE and c < len(_HW_NAMES):
        return _HW_NAMES[c]
    if t == abi.PERF_TYPE_SOFTWARE and c < len(_SW_NAMES):
        return _SW_NAMES[c]
    return f"{t}:{c:#x}"
