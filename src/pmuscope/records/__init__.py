"""Decoding of perf records: every ``PERF_RECORD_*`` and every ``PERF_SAMPLE_*``
field, into columnar sample batches and small side-band value classes.

The raw-chunk interface
=======================

Everything that produces records — a live ring buffer
(:class:`pmuscope.kernel.ring.RingBuffer`), the data section of a perf.data
file, a pipe-mode stream — hands this package **chunks**: ``bytes``,
``bytearray`` or ``memoryview`` objects holding zero or more *whole* records
back to back, each starting with ``struct perf_event_header {u32 type; u16
misc; u16 size}`` (little-endian, sizes multiples of 8 as the kernel and perf
write them; a reader of a big-endian perf.data must byte-swap first). A chunk
never ends in the middle of a record. Chunks may be split anywhere between
records; ``decode`` keeps no state between chunks except ``stats``.

Decoding is columnar: record boundaries are found without a Python loop per
record when possible (candidate headers chained in numpy), every sample field
is gathered with numpy fancy indexing, and only side-band records — rare —
become Python objects. Samples whose payloads are not 8-byte padded fall back
to a ``struct`` loop (:func:`parse_sample`) with the same result.

``decode(buf, attrs, *, base_offset=0, stats=None)``
    yields the chunk's items **in record order**:

    * :class:`SampleBatch` — a run of consecutive ``PERF_RECORD_SAMPLE``
      records, decoded into numpy columns (``ip``, ``pid``, ``tid``, ``time``,
      ``addr``, ``id``, ``cpu``, ``period``, ``weight``, ``data_src``, ...;
      call chains / raw payloads / branch stacks flat with ``*_offsets``;
      ``attr_index`` says which :class:`AttrTable` entry each sample belongs to).
      A batch ends where a side-band record sits between samples, so applying
      items in order keeps COMM/MMAP/FORK state correct for the samples after.
    * one small value class per side-band record (:class:`Mmap`, :class:`Mmap2`,
      :class:`Comm`, :class:`Fork`, :class:`Exit`, :class:`Lost`,
      :class:`LostSamples`, :class:`Throttle`, :class:`Unthrottle`,
      :class:`Switch`, :class:`SwitchCpuWide`, :class:`Namespaces`,
      :class:`Ksymbol`, :class:`BpfEvent`, :class:`Cgroup`, :class:`TextPoke`,
      :class:`Aux`, :class:`ItraceStart`, :class:`AuxOutputHwId`,
      :class:`Read`), each with its ``offset`` and its ``sample_id`` trailer
      (:class:`SampleId`, or None when ``sample_id_all`` is off).
    * :class:`UserRecord` — record types >= 64 that perf itself writes
      (FINISHED_ROUND, ID_INDEX, HEADER_ATTR, ...), passed through raw so the
      perf.data layer can act on them. Pass ``user_records=False`` to skip them.
      In perf.data, PERF_RECORD_AUXTRACE is followed by AUX bytes that its
      header.size does not cover: chunks leave those payloads out (the
      perf.data reader's ``raw_chunks()`` does), or pass
      ``auxtrace_inline=True`` for a raw data section and the decoder skips
      them and hands them over as ``UserRecord.payload``.

    Record types below 64 that this decoder does not know are skipped by their
    size and counted in ``stats.unknown`` (as perf does).

    ``base_offset`` is the position of ``buf[0]`` in the file/stream; every
    ``offset`` reported (records, samples, errors) is ``base_offset`` + the
    position inside the chunk, so a :class:`~pmuscope.errors.FormatError` names
    the real file offset.

    ``stats`` (a :class:`DecodeStats`, shared across chunks) counts records per
    type, lost events (``PERF_RECORD_LOST.lost``), lost samples
    (``PERF_RECORD_LOST_SAMPLES.lost``), throttles, unknown types and samples
    whose id is in no attr.

``AttrTable([(perf_event_attr, [ids]), ...], names=[...])``
    tells samples of several events apart by id (``PERF_SAMPLE_IDENTIFIER`` or
    ``PERF_SAMPLE_ID``, located with perf's ``id_pos``/``is_pos`` rules). With a
    single attr no id is needed.

``RecordSource(chunks, attrs)``
    the iterable the rest of pmuscope consumes: it wraps any iterator of
    ``(base_offset, chunk)`` pairs or bare chunks, decodes each, and yields the
    items in order; ``.stats`` accumulates. The ring buffer and the perf.data
    reader both plug in here.

Malformed input (a record of size < 8, a record running past the end of the
chunk, a field running past the end of its record) raises
:class:`~pmuscope.errors.FormatError` naming the byte offset and what was
expected. Decoding never loops without progress.
"""

import sys as _sys
import types as _types

from .attrs import AttrEntry, AttrTable, id_pos, is_pos, sample_id_size
from .types import (
    Aux,
    AuxOutputHwId,
    BpfEvent,
    Cgroup,
    Comm,
    DecodeStats,
    Exit,
    Fork,
    ItraceStart,
    Ksymbol,
    Lost,
    LostSamples,
    Mmap,
    Mmap2,
    Namespaces,
    Read,
    ReadValues,
    Record,
    SampleId,
    Switch,
    SwitchCpuWide,
    TextPoke,
    Throttle,
    UnknownRecord,
    Unthrottle,
    UserRecord,
)
from ._scalar import parse_sample
from .._lazy import lazy_exports

# the columnar decoder needs numpy: imported on first use (the perf.data reader
# and the small-file report read records without it)
__getattr__, __dir__ = lazy_exports(__name__, {"SampleBatch": ".sample", "RecordSource": ".decode",
                                               "decode": ".decode", "iter_headers": ".decode"})


class _Package(_types.ModuleType):
    """This package's module type: the name ``decode`` is the function
    :func:`~pmuscope.records.decode.decode`, also once the submodule of that
    name is imported (the import system then sets the package's attribute to
    the submodule, which an eager ``from .decode import decode`` used to
    overwrite)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "decode" and isinstance(value, _types.ModuleType):
            value = value.decode
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

__all__ = [
    "AttrEntry",
    "AttrTable",
    "id_pos",
    "is_pos",
    "sample_id_size",
    "Aux",
    "AuxOutputHwId",
    "BpfEvent",
    "Cgroup",
    "Comm",
    "DecodeStats",
    "Exit",
    "Fork",
    "ItraceStart",
    "Ksymbol",
    "Lost",
    "LostSamples",
    "Mmap",
    "Mmap2",
    "Namespaces",
    "Read",
    "ReadValues",
    "Record",
    "SampleId",
    "Switch",
    "SwitchCpuWide",
    "TextPoke",
    "Throttle",
    "UnknownRecord",
    "Unthrottle",
    "UserRecord",
    "SampleBatch",
    "parse_sample",
    "RecordSource",
    "decode",
    "iter_headers",
]
