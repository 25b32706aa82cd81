"""Recording sessions (``perf record`` from Python): open sampling events per
CPU or per thread, drain their ring buffers with ``poll()``, stream the records
into perf.data, synthesize side band for processes that already existed, and
decode tracepoint payloads with the tracefs ``format`` files.

>>> from pmuscope.sampling import record
>>> result = record(cmd=["python3", "-m", "pmuscope.workloads", "busy", "0.5"], output="perf.data")  # doctest: +SKIP
>>> print(result.summary())  # doctest: +SKIP

Live, without a file (samples arrive as columnar ``SampleBatch`` objects)::

    from pmuscope.records import SampleBatch
    from pmuscope.sampling import Recorder

    with Recorder("cpu-clock", freq=999, system_wide=True, output=None) as rec:
        for item in rec.records(duration=2.0, interval=0.1):
            if isinstance(item, SampleBatch):
                print(len(item), item.cpu.min(), item.cpu.max())
    print(rec.result.samples, rec.result.lost)

Tracepoint payloads decode with :class:`TracepointDecoder` (formats from the
file's TRACING_DATA via :func:`parse_tracing_data`, or from tracefs).
"""

from pmuscope._lazy import lazy_exports

from .session import DEFAULT_MMAP_PAGES, Recorder, RecordResult, default_event, record

#: the tracepoint decoder imports numpy: recording does not need it
_LAZY = {name: ".tpformat" for name in (
    "TracepointDecoder", "TracepointField", "TracepointFormat", "format_for_id", "parse_format",
    "parse_tracing_data", "read_format", "tracing_data")}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "DEFAULT_MMAP_PAGES",
    "Recorder",
    "RecordResult",
    "default_event",
    "record",
    "TracepointDecoder",
    "TracepointField",
    "TracepointFormat",
    "format_for_id",
    "parse_format",
    "parse_tracing_data",
    "read_format",
    "tracing_data",
]
