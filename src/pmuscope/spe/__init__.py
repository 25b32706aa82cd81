"""Arm Statistical Profiling Extension (SPE): packet decoding, ``perf report -D``
text, columnar record tables and spe-parser compatible CSV/Parquet output.

>>> from pmuscope.spe import decode_records
>>> recs = decode_records(open("spe.data", "rb").read())   # doctest: +SKIP
>>> recs.pc[recs.is_load], recs.tot_lat[recs.is_load]        # doctest: +SKIP
"""

from .packets import (
    SpePacket,
    SpePacketType,
    describe,
    dump_header,
    dump_lines,
    encode_alignment,
    encode_packet,
    event_names,
    get_packet,
    iter_packets,
)
from .decode import PacketArrays, decode_packets
from .records import SpeRecords, decode_records, perf_data_va, perf_ip, perf_pa
from .tables import BRANCH_COLS, LDST_COLS, OTHER_COLS, spe_parser_tables, write_tables

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
