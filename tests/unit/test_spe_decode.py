"""Columnar SPE decoding: property tests against the reference decoder,
encode->decode round trips, records, spe-parser tables and the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pmuscope.errors import FormatError
from pmuscope.spe import (
    decode_packets,
    decode_records,
    dump_lines,
    encode_packet,
    iter_packets,
    spe_parser_tables,
    write_tables,
)
from pmuscope.spe.decode import BAD_INVALID_HEADER, BAD_TRUNCATED
from pmuscope.spe.packets import (
    ADDRESS,
    BAD,
    CONTEXT,
    COUNTER,
    DATA_SOURCE,
    END,
    EVENTS,
    OP_TYPE,
    PAD,
    TIMESTAMP,
    encode_alignment,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference(raw: bytes):
    return [(p.offset, p.type, p.index, p.payload) for p in iter_packets(raw) if p.type != PAD]


def _fast(raw: bytes, **kw):
    pk = decode_packets(raw, **kw)
    return list(zip(pk.offset.tolist(), pk.type.tolist(), pk.index.tolist(), [int(x) for x in pk.payload]))


# ------------------------------------------------------------------ properties

# bytes biased towards SPE headers and zero runs, so that real packets appear
_spe_byte = st.one_of(
    st.integers(0, 255),
    st.sampled_from([0x00, 0x00, 0x00, 0x01, 0x71, 0x42, 0x52, 0x62, 0x72, 0x43, 0x64, 0x65, 0x48, 0x49, 0x4A,
                     0x20, 0x21, 0x22, 0x23, 0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0x98, 0x99, 0x9A]),
)
_buffers = st.one_of(st.binary(max_size=600), st.lists(_spe_byte, max_size=600).map(bytes))


@SETTINGS
@given(raw=_buffers, block=st.integers(8, 200), chunk=st.integers(16, 1000))
def test_any_bytes_decode_without_exception_and_match_reference(raw, block, chunk):
    assert _fast(raw, block=block, chunk=chunk) == _reference(raw)
    recs = decode_records(raw)  # never raises
    pk = decode_packets(raw)
    bad = pk.type == BAD
    assert set(recs.bad_offsets.tolist()) == set(pk.offset[bad].tolist())
    assert all(0 <= o < len(raw) for o in recs.bad_offsets.tolist())
    assert set(recs.bad_reasons.tolist()) <= {BAD_INVALID_HEADER, BAD_TRUNCATED}
    lines = list(dump_lines(raw, header=True))
    assert len(lines) == 1 + len(list(iter_packets(raw)))
    assert len(list(dump_lines(raw, style="6.1"))) == len(lines) - 1
    assert sum(line.endswith(" Bad packet!") for line in lines) == len(recs.bad_offsets)
    tables = spe_parser_tables(recs)
    assert sum(len(t["cpu"]) for t in tables.values()) == int((recs.op_class >= 0).sum() - (recs.op_class == 3).sum())


def _packet_strategy():
    u64 = st.integers(0, 2**64 - 1)
    return st.one_of(
        st.just((PAD, 0, 0, None)),
        st.tuples(st.just(TIMESTAMP), st.just(0), u64, st.none()),
        st.tuples(st.just(EVENTS), st.just(0), st.integers(0, 2**16 - 1), st.sampled_from([2, 4, 8])),
        st.tuples(st.just(DATA_SOURCE), st.just(0), st.integers(0, 255), st.sampled_from([1, 2])),
        st.tuples(st.just(CONTEXT), st.integers(0, 3), st.integers(0, 2**32 - 1), st.none()),
        st.tuples(st.just(OP_TYPE), st.integers(0, 2), st.integers(0, 255), st.none()),
        st.tuples(st.just(ADDRESS), st.integers(0, 31), u64, st.none()),
        st.tuples(st.just(COUNTER), st.integers(0, 31), st.integers(0, 0xFFFF), st.none()),
    )


@st.composite
def _records(draw):
    """A sequence of records: packets closed by TS or END, with pads and
    extended-header packets mixed in."""
    packets = []
    for _ in range(draw(st.integers(1, 12))):
        packets.extend(draw(st.lists(_packet_strategy(), max_size=10)))
        if draw(st.booleans()):
            packets.append((TIMESTAMP, 0, draw(st.integers(0, 2**64 - 1)), None))
        else:
            packets.append((END, 0, 0, None))
    return packets


@SETTINGS
@given(packets=_records(), extended=st.booleans(), align=st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=40))
def test_valid_packet_sequences_round_trip(packets, extended, align):
    raw = b""
    for k, (t, i, p, n) in enumerate(packets):
        if k < len(align) and align[k][0]:  # an alignment packet before some packets
            raw += encode_alignment(len(raw), align[k][1])
        raw += encode_packet(t, i, p, payload_len=n, extended=extended)
    raw += bytes(16)  # an alignment near the end needs its whole span in the buffer
    decoded = [(t, i, p) for _, t, i, p in _fast(raw)]
    expected = []
    for t, i, p, n in packets:
        if t == PAD:
            continue
        if t == EVENTS:
            i = n  # perf keeps the payload length as the index of an events packet
        if t in (TIMESTAMP, END, DATA_SOURCE):
            i = 0
        expected.append((t, i, p))
    assert decoded == expected
    recs = decode_records(raw)
    assert len(recs.bad_offsets) == 0
    closers = [t for t, *_ in packets if t in (TIMESTAMP, END)]
    assert len(recs) == len(closers)
    assert recs.end_type.tolist() == closers
    # the last address packet of each index wins inside a record, like perf
    r = 0
    last_pc = {}
    for t, i, p, n in packets:
        if t == ADDRESS and i == 0:
            last_pc[r] = p
        if t in (TIMESTAMP, END):
            r += 1
    for r, p in last_pc.items():
        assert int(recs.pc_raw[r]) == p and bool(recs.has_pc_raw[r])
    assert int(recs.has_pc_raw.sum()) == len(last_pc)


def test_large_buffer_fast_path_matches_reference(data_dir):
    rng = np.random.default_rng(7)
    base = (data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes()
    parts = []
    for _ in range(2000):
        rec = bytearray(base[:64] if rng.random() < 0.5 else base[64:])
        rec[1:8] = rng.integers(0, 256, 7, dtype=np.uint8).tobytes()  # vary the PC
        parts.append(bytes(rec))
        if rng.random() < 0.05:
            parts.append(bytes(rng.integers(0, 256, int(rng.integers(1, 40)), dtype=np.uint8)))
        if rng.random() < 0.05:
            parts.append(bytes(int(rng.integers(1, 700))))
    raw = b"".join(parts)
    assert _fast(raw, block=512, chunk=50_000) == _reference(raw)


# ------------------------------------------------------------------ records


def test_quipper_records_have_the_values_its_test_expects(data_dir):
    recs = decode_records((data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes())
    assert len(recs) == 2
    assert recs.op_class.tolist() == [1, 2]
    assert recs.is_load.tolist() == [True, False]
    assert [hex(x) for x in recs.pc.tolist()] == ["0xffffba66eda1c2d0", "0xffffba66edefb0e0"]
    assert hex(int(recs.vaddr[0])) == "0xffff0e3703096b28"
    assert hex(int(recs.branch_target[1])) == "0xffffba66edefb0e4"
    assert recs.tot_lat.tolist() == [12, 17]
    assert recs.issue_lat.tolist() == [4, 16]
    assert int(recs.xlat_lat[0]) == 1 and not recs.has_xlat_lat[1]
    assert recs.timestamp.tolist() == [44731163950, 44731164045]
    assert recs.context.tolist() == [0x5F80, 0xE]
    assert recs.context_index.tolist() == [1, 1]  # CONTEXTIDR_EL2
    assert recs.el.tolist() == [2, 2] and recs.ns.tolist() == [1, 1]
    assert recs.data_source.tolist()[0] == 0 and recs.has_data_source.tolist() == [True, False]
    assert recs.offset.tolist() == [0, 0x40]
    assert recs.events.tolist() == [0x16, 0x42]


def test_pa_fields_and_perf_address_fixups():
    raw = (
        encode_packet(ADDRESS, 0, 0x20 << 56 | 0xFFFF_8000_1000)  # EL1, NS=0: no fill
        + encode_packet(ADDRESS, 2, 0x5A << 56 | 0x0000_AAAA_0000_0040)  # tagged user VA
        + encode_packet(ADDRESS, 3, 0xC7 << 56 | 0x8_0000_1000)  # NS=1 CH=1 PAT=7
        + encode_packet(OP_TYPE, 1, 0x01)
        + encode_packet(END)
    )
    recs = decode_records(raw)
    assert hex(int(recs.pc[0])) == "0xffff80001000"
    assert hex(int(recs.vaddr[0])) == "0xaaaa00000040" and int(recs.va_tag[0]) == 0x5A
    assert hex(int(recs.paddr[0])) == "0x800001000"
    assert (int(recs.pa_ns[0]), int(recs.pa_ch[0]), int(recs.pa_pat[0])) == (1, 1, 7)
    assert recs.is_store.tolist() == [True]


def test_bad_byte_drops_the_partial_record_like_perf():
    good = encode_packet(ADDRESS, 0, 0x1000) + encode_packet(OP_TYPE, 2, 1) + encode_packet(TIMESTAMP, 0, 5)
    raw = good + encode_packet(ADDRESS, 0, 0x2000) + b"\xff" + encode_packet(OP_TYPE, 2, 0) + encode_packet(END) + good
    recs = decode_records(raw)
    assert recs.bad_offsets.tolist() == [len(good) + 9]
    assert recs.bad_reasons.tolist() == [BAD_INVALID_HEADER]
    assert recs.dropped_offsets.tolist() == [len(good)]
    # the record after the bad byte starts fresh: no PC from before the bad byte
    assert len(recs) == 3
    assert recs.has_pc_raw.tolist() == [True, False, True]
    with pytest.raises(FormatError, match=r"invalid packet header at offset 0x1d"):
        decode_records(raw, strict=True)


def test_truncated_stream_names_the_offset():
    raw = encode_packet(OP_TYPE, 1, 0) + encode_packet(TIMESTAMP, 0, 1) + encode_packet(ADDRESS, 0, 0x1111_1111_1111_1111)[:6]
    recs = decode_records(raw)
    assert len(recs) == 1
    assert recs.bad_offsets.tolist() == [11, 12, 13, 14, 15, 16]
    assert int(recs.bad_reasons[0]) == BAD_TRUNCATED
    with pytest.raises(FormatError) as info:
        recs.check()
    assert "truncated packet at offset 0xb" in str(info.value)
    assert info.value.offset == 11


def test_unterminated_last_record_is_reported():
    raw = encode_packet(OP_TYPE, 1, 0) + encode_packet(END) + encode_packet(OP_TYPE, 1, 1)
    recs = decode_records(raw)
    assert len(recs) == 1 and recs.trailing_offset == 3


# ------------------------------------------------------------------ spe-parser tables


@pytest.mark.parametrize("name", ["spe-b1-ts0", "spe-b1-ts1"])
def test_branch_csv_equals_arm_spe_parser_output(data_dir, tmp_path, name):
    raw = (data_dir / "spe" / f"{name}.data").read_bytes()
    written = write_tables(decode_records(raw), str(tmp_path), prefix=name, fmt="csv")
    assert set(written) == {"br"}
    assert (tmp_path / f"{name}-br.csv").read_text() == (data_dir / "spe" / f"{name}.csv").read_text()


def test_ldst_and_other_tables_follow_spe_parser_rules():
    rec_ld = (
        encode_packet(ADDRESS, 0, 0xC0 << 56 | 0xFFC0C2868C8B5C)  # EL2 -> "ff" inserted
        + encode_packet(OP_TYPE, 1, 0x16)  # LD AT AR
        + encode_packet(EVENTS, 0, 0x316, payload_len=2)
        + encode_packet(COUNTER, 1, 7) + encode_packet(COUNTER, 0, 11) + encode_packet(COUNTER, 2, 1)
        + encode_packet(ADDRESS, 2, 0xFFFC2007C226C0)
        + encode_packet(ADDRESS, 3, 0x80 << 56 | 0x80BD88A09E8)
        + encode_packet(DATA_SOURCE, 0, 14)
        + encode_packet(CONTEXT, 1, 0x5F80)
        + encode_packet(TIMESTAMP, 0, 99)
    )
    rec_sve_st = encode_packet(ADDRESS, 0, 0x1000) + encode_packet(OP_TYPE, 1, 0xAD) + encode_packet(DATA_SOURCE, 0, 3) + encode_packet(END)
    rec_other = (
        encode_packet(ADDRESS, 0, 0x2000) + encode_packet(OP_TYPE, 0, 0x01)
        + encode_packet(EVENTS, 0, 0x1E | 0x2, payload_len=2) + encode_packet(END)
    )
    rec_sve_other = encode_packet(ADDRESS, 0, 0x3000) + encode_packet(OP_TYPE, 0, 0x3E) + encode_packet(END)
    rec_none = encode_packet(ADDRESS, 0, 0x4000) + encode_packet(END)
    t = spe_parser_tables(decode_records(rec_ld + rec_sve_st + rec_other + rec_sve_other + rec_none))
    ld = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in t["ldst"].items()}
    assert ld["op"] == ["LD", "ST"]
    assert ld["pc"] == ["0xffffc0c2868c8b5c", "0x1000"]
    assert ld["el"] == [2, 0]
    assert (ld["atomic"], ld["excl"], ld["ar"]) == ([True, False], [False, False], [True, False])
    assert ld["subclass"] == ["", "SVE"]
    assert (ld["sve_evl"], ld["sve_pred"], ld["sve_sg"]) == ([0, 128], [False, True], [False, True])
    assert ld["event"] == ["RETIRED:L1D-ACCESS:TLB-ACCESS:LLC-ACCESS:LLC-REFILL", ""]
    assert (ld["issue_lat"], ld["total_lat"], ld["xlat_lat"]) == ([7, 0], [11, 0], [1, 0])
    assert ld["vaddr"] == ["0xfffffc2007c226c0", ""]
    assert ld["paddr"] == ["0x80bd88a09e8", ""]
    assert ld["data_source"] == ["DRAM", "3"]
    assert ld["context"] == ["0x5f80", ""]
    assert ld["ts"] == [99, 0]
    other = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in t["other"].items()}
    assert other["subclass"] == ["OTHER", "SVE"]
    assert other["condition"] == [True, False]
    assert other["event"] == ["RETIRED", ""]  # erratum 1912195: memory events dropped, names sorted
    assert (other["sve_evl"], other["sve_pred"], other["sve_fp"]) == ([0, 256], [False, True], [False, True])
    assert len(t["br"]["cpu"]) == 0


def test_parquet_tables_have_spe_parser_schema(data_dir, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    raw = (data_dir / "spe" / "spe-b1-ts1.data").read_bytes()
    written = write_tables(decode_records(raw), str(tmp_path), fmt="parquet")
    table = pq.read_table(written["br"])
    assert table.column_names == [
        "cpu", "op", "pc", "el", "condition", "indirect", "event", "issue_lat", "total_lat", "br_tgt",
        "br_tgt_lvl", "pbt", "pbt_lvl", "context", "ts",
    ]
    row = table.to_pylist()[0]
    assert row["pc"] == "0x7ffdbf2143e0" and row["condition"] is True and row["ts"] == 3913207673451


# ------------------------------------------------------------------ CLI


def test_cli_dump_raw_prints_perf_text(data_dir, capsys):
    from pmuscope.cli.main import main

    path = data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin"
    assert main(["spe", "--dump", "--raw", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    expected = [
        line for line in (data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.expected.txt").read_text().splitlines()
        if line.startswith(".")
    ]
    assert out[0] == ". ... ARM SPE data: size 0x80 bytes"
    assert out[1:] == expected


def test_cli_raw_to_csv_and_errors(data_dir, tmp_path, capsys):
    from pmuscope.cli.main import main

    path = data_dir / "spe" / "spe-b1-ts0.data"
    assert main(["spe", "--raw", str(path), "-o", str(tmp_path), "--format", "csv"]) == 0
    assert (tmp_path / "spe-br.csv").read_text() == (data_dir / "spe" / "spe-b1-ts0.csv").read_text()
    bad = tmp_path / "bad.data"
    bad.write_bytes(path.read_bytes()[:20])
    assert main(["spe", "--raw", str(bad), "--strict"]) == FormatError.exit_code
    err = capsys.readouterr().err
    assert "truncated packet at offset 0x13" in err and "Traceback" not in err
    assert main(["spe", "--raw", str(tmp_path / "missing.data")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_batches_carry_records_across_chunk_boundaries(data_dir):
    from pmuscope.spe.records import iter_records

    base = (data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes()
    raw = base * 50 + b"\x05" + base * 50 + base[:30]
    whole = decode_records(raw)
    batches = list(iter_records(raw, chunk_bytes=1000))
    assert len(batches) > 5
    assert sum(len(b) for b in batches) == len(whole) == 200
    joined = np.concatenate([b.pc_raw for b in batches])
    assert np.array_equal(joined, whole.pc_raw)
    assert np.array_equal(np.concatenate([b.offset for b in batches]), whole.offset)
    assert whole.bad_offsets.tolist() == [len(base) * 50]
    assert whole.trailing_offset == len(base) * 100 + 1 and batches[-1].trailing_offset == whole.trailing_offset
    assert whole.size == len(raw)


@SETTINGS
@given(raw=_buffers, chunk=st.integers(16, 400))
def test_streamed_batches_equal_one_pass(raw, chunk):
    from pmuscope.spe.records import SpeRecords, iter_records, records_from_packets

    one = records_from_packets(decode_packets(raw, chunk=1 << 30))
    streamed = SpeRecords.concat(list(iter_records(raw, chunk_bytes=chunk)))
    assert len(streamed) == len(one)
    for name in one.columns:
        assert np.array_equal(streamed.columns[name], one.columns[name]), name
        assert np.array_equal(streamed.present[name], one.present[name]), name
    assert np.array_equal(streamed.offset, one.offset)
    assert np.array_equal(streamed.op_class, one.op_class)
    assert streamed.bad_offsets.tolist() == one.bad_offsets.tolist()
    assert streamed.dropped_offsets.tolist() == one.dropped_offsets.tolist()
    assert streamed.trailing_offset == one.trailing_offset


def test_records_to_pandas(data_dir):
    pytest.importorskip("pandas")
    recs = decode_records((data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes())
    df = recs.to_pandas()
    assert len(df) == 2
    assert df["pc"].tolist() == [0xFFFFBA66EDA1C2D0, 0xFFFFBA66EDEFB0E0]
    assert df["is_load"].tolist() == [True, False] and df["has_va_raw"].tolist() == [True, False]
    assert df["tot_lat"].tolist() == [12, 17]
