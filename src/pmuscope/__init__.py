"""pmuscope: observe a Linux machine through the kernel's perf_event subsystem."""

__version__ = "0.1.0"

from .errors import (  # noqa: E402
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
    RingBufferLost,
    MissingExtraError,
)

from .counting import count, Counter, Counts, EventCount, Workload  # noqa: E402
from .counting.monitor import monitor, Monitor  # noqa: E402
from .symbols import Symbolizer  # noqa: E402
from .events import EventSpec, parse_events, apply_counting_defaults, stat_defaults  # noqa: E402
from .system import read_topology, Topology, CpuIdentity  # noqa: E402
from .doctor import diagnose, Check  # noqa: E402
from .perfdata import PerfDataFile, PerfDataWriter  # noqa: E402
from .spe import decode_records, SpeRecords  # noqa: E402
