"""perf.data, both ways: :class:`PerfDataFile` reads file-mode and pipe-mode
perf.data (old attr sizes, every feature section, zstd-compressed data, AUXTRACE
payloads, FINISHED_ROUND time ordering); :class:`PerfDataWriter` writes files
that Linux ``perf report``/``perf script`` read."""

from pmuscope._lazy import lazy_exports

from .features import Feature
from .reader import AuxtraceBuffer, FileHeader, PerfDataAttr, PerfDataFile, PerfDataWarning, Section, default_event_name

#: names whose modules only writing or describing a file needs, imported on
#: first use (reading a file for ``report``/``script`` never loads the writer)
_LAZY = {
    "header_lines": ".describe",
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
    "header_lines",
    "host_features",
    "rewrite",
    "Section",
    "default_event_name",
]
