"""perf.data, both ways: :class:`PerfDataFile` reads file-mode and pipe-mode
perf.data (old attr sizes, every feature section, zstd-compressed data, AUXTRACE
payloads, FINISHED_ROUND time ordering); :class:`PerfDataWriter` writes files
that Linux ``perf report``/``perf script`` read."""

from .features import Feature
from .reader import AuxtraceBuffer, FileHeader, PerfDataAttr, PerfDataFile, Section, default_event_name
from .describe import header_lines
from .writer import PerfDataWriter, PerfPipeWriter, elf_build_id, host_features, rewrite

__all__ = [
    "AuxtraceBuffer",
    "Feature",
    "FileHeader",
    "PerfDataAttr",
    "PerfDataFile",
    "PerfDataWriter",
    "PerfPipeWriter",
    "elf_build_id",
    "header_lines",
    "host_features",
    "rewrite",
    "Section",
    "default_event_name",
]
