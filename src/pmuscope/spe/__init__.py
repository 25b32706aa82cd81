"""Arm Statistical Profiling Extension (SPE): packet decoding, ``perf report -D``
text, columnar record tables and spe-parser compatible CSV/Parquet output.

>>> from pmuscope.spe import decode_records
>>> recs = decode_records(open("spe.data", "rb").read())   # doctest: +SKIP
>>> recs.pc[recs.is_load], recs.tot_lat[recs.is_load]        # doctest: +SKIP
"""

from pmuscope._lazy import lazy_exports

#: imported on first use (PEP 562): ``load_profile`` asks ``spe.synth`` whether a
#: file holds SPE data, which must not cost the packet decoder and its tables
_LAZY = {
    **{name: ".packets" for name in ("SpePacket", "SpePacketType", "describe", "dump_header", "dump_lines",
                                     "encode_alignment", "encode_packet", "event_names", "get_packet",
                                     "iter_packets")},
    **{name: ".decode" for name in ("PacketArrays", "decode_packets")},
    **{name: ".records" for name in ("SpeRecords", "decode_records", "perf_data_va", "perf_ip", "perf_pa")},
    **{name: ".tables" for name in ("BRANCH_COLS", "LDST_COLS", "OTHER_COLS", "spe_parser_tables", "write_tables")},
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


def might_hold_spe(pf) -> bool:
    """False when the open perf.data ``pf`` cannot hold Arm SPE data: a stream
    (synthesis needs a file), or no event of a dynamic PMU type (SPE is one).
    The first checks of ``spe.synth.has_spe``, without importing it: what
    every reader of a file of core or software events pays."""
    from ..kernel.abi import PerfType

    if pf.pipe if hasattr(pf, "pipe") else getattr(pf.header, "pipe", False):
        return False
    return any(a.attr.type > PerfType.BREAKPOINT for a in pf.attrs)


__all__ = [
    "SpePacket",
    "SpePacketType",
    "describe",
    "dump_header",
    "dump_lines",
    "encode_alignment",
    "encode_packet",
    "event_names",
    "get_packet",
    "iter_packets",
    "PacketArrays",
    "decode_packets",
    "SpeRecords",
    "decode_records",
    "perf_data_va",
    "perf_ip",
    "perf_pa",
    "LDST_COLS",
    "BRANCH_COLS",
    "OTHER_COLS",
    "spe_parser_tables",
    "write_tables",
]
