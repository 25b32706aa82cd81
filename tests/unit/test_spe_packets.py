"""SPE packet decoding and perf's `-D` text, against published vectors and captures."""

from __future__ import annotations

import json

import pytest

from pmuscope.spe import describe, dump_lines, encode_packet, get_packet, iter_packets
from pmuscope.spe.packets import (
    ADDRESS,
    BAD,
    CONTEXT,
    COUNTER,
    DATA_SOURCE,
    END,
    EVENTS,
    MIDR_NEOVERSE_N1,
    OP_TYPE,
    PAD,
    TIMESTAMP,
    describe_op_type,
    encode_alignment,
    event_names,
)


@pytest.fixture
def spe_dir(data_dir):
    return data_dir / "spe"


def _vectors(spe_dir):
    return json.loads((spe_dir / "spe_packet_vectors.json").read_text())


def test_single_packet_vectors_match_perf_text(spe_dir):
    vectors = _vectors(spe_dir)["single_packets"]
    assert len(vectors) == 20
    for hexbytes, text in vectors:
        raw = bytes.fromhex(hexbytes)
        typ, index, payload, size = get_packet(raw)
        assert size == len(raw), hexbytes
        assert describe((typ, index, payload)) == text, hexbytes


def test_record_vectors_match_perf_text(spe_dir):
    for rec in _vectors(spe_dir)["records"]:
        raw = bytes.fromhex(rec["hex"]) if "hex" in rec else (spe_dir / rec["file"]).read_bytes()
        texts = [describe(p) for p in iter_packets(raw) if p.type != PAD]
        assert texts == rec["packets"]


def test_quipper_sample_dump_equals_expected_text(spe_dir):
    raw = (spe_dir / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes()
    expected = [
        line.rstrip("\n")
        for line in (spe_dir / "arm_spe_decoder_test.SampleSPEPackets.expected.txt").read_text().splitlines()
        if line.startswith(".")
    ]
    assert len(expected) == 23
    assert list(dump_lines(raw)) == expected


def test_dump_header_and_column_layout(spe_dir):
    raw = (spe_dir / "spe-b1-ts0.data").read_bytes()
    lines = list(dump_lines(raw, header=True))
    assert lines[0] == ". ... ARM SPE data: size 0x40 bytes"
    # ".", "  %08x: ", 16 columns of " %02x" (3 chars each), " ", description
    for line in lines[1:]:
        assert line[:13] == f".  {int(line[3:11], 16):08x}: "
        assert line[13 + 48] == " "
    assert lines[-1] == ".  0000003f:  01                                              END"
    assert lines[2] == ".  00000009:  00 00 00 00 00 00 00 00 00 00                   PAD"


def test_pad_runs_merge_up_to_16_bytes():
    raw = bytes(20) + b"\x01"
    pkts = list(iter_packets(raw))
    assert [(p.offset, p.length, p.type) for p in pkts] == [(0, 16, PAD), (16, 4, PAD), (20, 1, END)]


def test_bad_header_reported_at_offset_and_skipped_one_byte():
    raw = b"\x01\x02\xff\x49\x00"
    pkts = list(iter_packets(raw))
    assert [(p.offset, p.type) for p in pkts] == [(0, END), (1, BAD), (2, BAD), (3, OP_TYPE)]
    lines = list(dump_lines(raw))
    assert lines[1] == ".  00000001:  02                                              Bad packet!"
    assert lines[3].endswith(" LD GP-REG")


def test_truncated_packet_at_end_is_bad_byte_by_byte():
    raw = encode_packet(ADDRESS, 0, 0x80000000DEADBEEF)[:5]
    pkts = list(iter_packets(raw))
    assert pkts[0] == (0, 1, BAD, 0, 0)
    assert get_packet(raw)[3] == -1  # perf's ARM_SPE_NEED_MORE_BYTES
    assert all(p.length == 1 for p in pkts) and len(pkts) == 5


def test_extended_header_needs_second_byte():
    assert get_packet(b"\x21")[0] == BAD
    assert get_packet(b"\x21\x71" + bytes(8))[0] == BAD  # only address/counter may be extended


@pytest.mark.parametrize(
    "raw,text",
    [
        # extended headers carry a 5-bit index: ((h0 & 3) << 3) | (h1 & 7)
        (bytes([0x20, 0xB0]) + (0xC0 << 56 | 0x1234).to_bytes(8, "little"), "PC 0x1234 el2 ns=1"),
        (bytes([0x20, 0xB4]) + (0x20 << 56 | 0x10).to_bytes(8, "little"), "PBT 0x10 el1 ns=0"),
        (bytes([0x21, 0xB1]) + (5).to_bytes(8, "little"), "ADDR 0x5 (9)"),
        (bytes([0x23, 0x9F]) + (7).to_bytes(2, "little"), "LAT 7 "),
        (bytes([0x20, 0x9A]) + (3).to_bytes(2, "little"), "LAT 3 XLAT"),
        (bytes([0xB5]) + (0xAB).to_bytes(8, "little"), "ADDR 0xab (5)"),
        (bytes([0xB3]) + (0xC5 << 56 | 0xABC).to_bytes(8, "little"), "PA 0xabc ns=1 ch=1 pat=5"),
        (bytes([0xB2]) + (0xF1 << 56 | 0xFF000000001234).to_bytes(8, "little"), "VA 0xf1ff000000001234"),
        (bytes([0x65, 0x80, 0x5F, 0, 0]), "CONTEXT 0x5f80 el2"),
        (bytes([0x64, 1, 0, 0, 0]), "CONTEXT 0x1 el1"),
        (bytes([0x73]) + (2**64 - 1).to_bytes(8, "little"), "DATA-SOURCE -1"),
        (bytes([0x53, 0x0D, 0x00]), "DATA-SOURCE 13"),
        (bytes([0x71]) + (2**63).to_bytes(8, "little"), f"TS {-(2**63)}"),
        (bytes([0x4B, 0x00]), "OP-TYPE 0x0 (3)"),
    ],
)
def test_packet_text_edge_cases(raw, text):
    typ, index, payload, size = get_packet(raw)
    assert size == len(raw)
    assert describe((typ, index, payload)) == text


@pytest.mark.parametrize(
    "op_class,payload,text",
    [
        (0, 0x00, "OTHER INSN-OTHER"),
        (0, 0x01, "OTHER COND-SELECT"),
        (0, 0x06, "OTHER ASE FP INSN-OTHER"),
        (0, 0x08, "SVE-OTHER EVLEN 32"),
        (0, 0x7E, "SVE-OTHER EVLEN 4096 FP PRED"),
        (0, 0x88, "SME-OTHER ETS 128"),
        (0, 0x8C, "SME-OTHER ETS 256"),
        (0, 0xFE, "SME-OTHER ETS 4194304 FP"),
        (0, 0xAA, "SME-OTHER ETS 2048 FP"),
        (0, 0x80, ""),
        (1, 0x00, "LD GP-REG"),
        (1, 0x01, "ST GP-REG"),
        (1, 0x04, "LD SIMD-FP"),
        (1, 0x10, "LD UNSPEC-REG"),
        (1, 0x31, "ST NV-SYSREG"),
        (1, 0x14, "LD MTE-TAG"),
        (1, 0x20, "LD MEMCPY"),
        (1, 0x25, "ST MEMSET"),
        (1, 0x24, "LD"),
        (1, 0x16, "LD AT AR"),
        (1, 0x1F, "ST AT EXCL AR"),
        (1, 0x0B, "ST EXCL"),
        (1, 0x08, "LD SVE-SME-REG EVLEN 32"),
        (1, 0xFD, "ST SVE-SME-REG EVLEN 4096 PRED SG"),
        (1, 0xAC, "LD SVE-SME-REG EVLEN 128 PRED SG"),
        (1, 0x40, "LD GCS"),
        (1, 0x45, "ST GCS COMM"),
        (2, 0x00, "B"),
        (2, 0x01, "B COND"),
        (2, 0x02, "B IND"),
        (2, 0x0E, "B IND GCS CR-BL"),
        (2, 0x13, "B COND IND CR-RET"),
        (2, 0x18, "B CR-NON-BL-RET"),
    ],
)
def test_operation_type_every_class_and_subclass(op_class, payload, text):
    assert describe_op_type(op_class, payload) == text
    raw = encode_packet(OP_TYPE, op_class, payload)
    assert describe(get_packet(raw)[:3]) == text


def test_events_every_bit_and_impdef():
    all_named = sum(1 << b for b in list(range(12)) + list(range(16, 26)))
    text = describe((EVENTS, 8, all_named))
    assert text == (
        "EV EXCEPTION-GEN RETIRED L1D-ACCESS L1D-REFILL TLB-ACCESS TLB-REFILL NOT-TAKEN MISPRED "
        "LLC-ACCESS LLC-REFILL REMOTE-ACCESS ALIGNMENT TXN SVE-PARTIAL-PRED SVE-EMPTY-PRED "
        "L2D-ACCESS L2D-MISS HITM LFB SNOOPED STREAMING-SVE SMCU"
    )
    assert describe((EVENTS, 2, 1 << 12 | 1 << 1)) == "EV RETIRED IMPDEF:12"
    assert describe((EVENTS, 8, 1 << 12 | 1 << 13 | 1 << 40)) == "EV IMPDEF:12,13,40"
    assert event_names(1 << 12, midr=MIDR_NEOVERSE_N1 | 0x00300001) == ["LATE-PREFETCH"]
    assert event_names(1 << 12, midr=0x410FD490) == ["IMPDEF:12"]  # Neoverse N2: not N1
    # a description longer than perf's 256-byte buffer falls back to raw output
    assert describe((EVENTS, 8, 2**64 - 1)) == "EVENTS 0xffffffffffffffff (8)"
    for size, hdr in ((1, 0x42), (2, 0x52), (4, 0x62), (8, 0x72)):
        raw = encode_packet(EVENTS, 0, 0x2, payload_len=size)
        assert raw[0] == hdr and get_packet(raw) == (EVENTS, size, 0x2, 1 + size)


def test_alignment_packet_pads_to_boundary_from_buffer_offset():
    # 0x23 0x00 at offset 3: 16-byte alignment -> covers bytes 3..15
    # (perf wants the whole alignment, 16 bytes, left in the buffer at the header)
    raw = bytes([0x01, 0x01, 0x01]) + encode_alignment(3, 3) + b"\x01\x01\x01"
    assert len(raw) == 19
    pkts = list(iter_packets(raw))
    assert [(p.offset, p.length, p.type) for p in pkts] == [
        (0, 1, END), (1, 1, END), (2, 1, END), (3, 13, PAD), (16, 1, END), (17, 1, END), (18, 1, END)
    ]
    assert [p.type for p in iter_packets(raw[:-3])][3] == BAD
    # at an odd offset a 2-byte alignment covers only its first byte; the second is a PAD
    odd = b"\x01" + encode_alignment(1, 0) + b"\x01"
    assert [(p.offset, p.length, p.type) for p in iter_packets(odd, merge_pads=False)] == [
        (0, 1, END), (1, 1, PAD), (2, 1, PAD), (3, 1, END)
    ]
    # too few bytes left for the alignment -> need more bytes -> bad
    assert get_packet(bytes([0x23, 0x00, 0, 0]))[0] == BAD


def test_encoder_round_trips_every_packet_type():
    cases = [
        (PAD, 0, 0), (END, 0, 0), (TIMESTAMP, 0, 2**64 - 1), (EVENTS, 4, 0x12345678), (DATA_SOURCE, 0, 14),
        (CONTEXT, 1, 0xFFFFFFFF), (OP_TYPE, 2, 0x13), (ADDRESS, 4, 0xC0FF_FFFF_0000_1234), (ADDRESS, 31, 1),
        (COUNTER, 2, 0xFFFF), (COUNTER, 17, 3),
    ]
    for typ, index, payload in cases:
        raw = encode_packet(typ, index, payload, payload_len=4 if typ == EVENTS else None)
        t, i, p, size = get_packet(raw)
        assert (t, p, size) == (typ, payload, len(raw))
        if typ not in (PAD, END, TIMESTAMP, DATA_SOURCE):
            assert i == index


def test_lkml_perf_dumps_decode_to_the_same_text_and_sample_ips(spe_dir):
    from pmuscope.spe import decode_records

    vec = json.loads((spe_dir / "lkml_dump_vectors.json").read_text())
    raw = b""
    expected_lines = []
    for rec in vec["records"]:
        for _off, hexbytes, text in rec["packets"]:
            b = bytes.fromhex(hexbytes)
            expected_lines.append(f".  {len(raw):08x}:  {hexbytes}{'   ' * (16 - len(b))} {text}")
            raw += b
    assert list(dump_lines(raw)) == expected_lines
    recs = decode_records(raw)
    assert len(recs) == 16 and recs.is_branch.all()
    assert [f"{ip:x}" for ip in recs.pc.tolist()] == [r["sample_ip"] for r in vec["records"]]
    assert recs.timestamp.tolist() == [int(r["packets"][-1][2].split()[1]) for r in vec["records"]]
    assert recs.tot_lat.tolist() == [int(r["packets"][2][2].split()[1]) for r in vec["records"]]
    for hexbytes, text in vec["newest_perf_lines"]:
        assert describe(get_packet(bytes.fromhex(hexbytes))[:3]) == text, hexbytes


@pytest.mark.parametrize(
    "hexbytes,newest,perf61",
    [  # perf 6.1 column: what Linux perf 6.1.187 `perf report -D` printed for these bytes
        ("49 14", "LD MTE-TAG", "LD"),
        ("49 20", "LD MEMCPY", "LD"),
        ("49 25", "ST MEMSET", "ST"),
        ("49 08", "LD SVE-SME-REG EVLEN 32", "LD EVLEN 32"),
        ("49 30", "LD NV-SYSREG", "LD NV-SYSREG"),
        ("48 02", "OTHER FP INSN-OTHER", "OTHER INSN-OTHER"),
        ("48 88", "SME-OTHER ETS 128", "OTHER INSN-OTHER"),
        ("4a 04", "B GCS", "B"),
        ("4a 08", "B CR-BL", "B"),
        ("62 00 10 0f 00", "EV TXN SVE-PARTIAL-PRED SVE-EMPTY-PRED L2D-ACCESS IMPDEF:12",
         "EV SVE-PARTIAL-PRED SVE-EMPTY-PRED"),
        ("b4 05 00 00 00 00 00 00 20", "PBT 0x5 el1 ns=0", "ADDR 0x2000000000000005 (4)"),
    ],
)
def test_perf_61_text_style(hexbytes, newest, perf61):
    pkt = get_packet(bytes.fromhex(hexbytes))[:3]
    assert describe(pkt) == newest
    assert describe(pkt, style="6.1") == perf61
    line = list(dump_lines(bytes.fromhex(hexbytes), style="6.1"))[0]
    assert line.endswith(" " + perf61)
    with pytest.raises(ValueError, match="unknown perf text style"):
        list(dump_lines(b"\x01", style="5.4"))
