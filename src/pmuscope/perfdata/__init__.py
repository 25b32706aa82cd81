"""perf.data, both ways: :class:`PerfDataFile` reads file-mode and pipe-mode
perf.data (old attr sizes, every feature section, zstd-compressed data, AUXTRACE
payloads, FINISHED_ROUND time ordering); :class:`PerfDataWriter` writes files
that Linux ``perf report``/``perf script`` read."""

from pmuscope._lazy import lazy_exports

from .features import Feature
from ._format import PerfDataAttr, default_event_name

#: names imported on first use: reading a file for ``report``/``script`` never
#: loads the writer, and writing one (``record``) never loads the reader (whose
#: record decoding imports numpy)
_LAZY = {
    "AuxtraceBuffer": ".reader", "FileHeader": ".reader", "PerfDataFile": ".reader",
    "PerfDataWarning": ".reader", "Section": ".reader",
    "header_lines": ".describe", "stats_lines": ".describe",
    "PerfDataWriter": ".writer", "PerfPipeWriter": ".writer", "elf_build_id": ".writer",
    "host_features": ".writer", "rewrite": ".writer",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "AuxtraceBuffer",
    "Feature",
    "FileHeader",
    "PerfDataAttr",
    "PerfDataFile",
    "PerfDataWarning",
    "PerfDataWriter",
    "PerfPipeWriter",
    "elf_build_id",
    "header_lines", "stats_lines",
    "host_features",
    "rewrite",
    "Section",
    "default_event_name",
]
