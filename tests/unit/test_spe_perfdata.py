"""SPE inside perf.data: AUXTRACE_INFO v1/v2 metadata, AUXTRACE chunks, the CLI path."""

from __future__ import annotations

import pytest

from pmuscope.errors import FormatError, PmuscopeError
from pmuscope.kernel import abi
from pmuscope.perfdata import Feature
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe import encode_packet
from pmuscope.spe.packets import END, EVENTS, MIDR_NEOVERSE_N1, OP_TYPE
from pmuscope.spe.perfdata import (
    auxtrace_info_record,
    auxtrace_record,
    decode_perf_data,
    iter_spe_chunks,
    parse_auxtrace_info,
)

N2 = 0x410FD490


def _write(path, info: bytes, chunks, cpuid: str | None = None):
    attr = abi.perf_event_attr(type=42, sample_period=1, sample_type=abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_TID)
    w = PerfDataWriter(str(path), host=False)
    if cpuid:
        w.features[Feature.CPUID] = cpuid
    w.add_attr(attr, [1], name="arm_spe_0//")
    w.write_record(info)
    for cpu, data in chunks:
        w.write_record(auxtrace_record(data, cpu=cpu, tid=7))
    w.close()


def _late_prefetch_record():
    return encode_packet(OP_TYPE, 1, 0) + encode_packet(EVENTS, 0, 1 << 12 | 1 << 1, payload_len=2) + encode_packet(END)


def test_v2_metadata_gives_per_cpu_midr(tmp_path, data_dir, capsys):
    quipper = (data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes()
    path = tmp_path / "perf.data"
    _write(path, auxtrace_info_record(42, {0: MIDR_NEOVERSE_N1, 1: N2}), [(0, _late_prefetch_record()), (1, _late_prefetch_record()), (1, quipper)])
    chunks = list(iter_spe_chunks(str(path)))
    assert [(c, m, len(d)) for c, m, d, _ in chunks] == [(0, MIDR_NEOVERSE_N1, 8), (1, N2, 8), (1, N2, 128)]
    assert chunks[0][3].endswith("PERF_RECORD_AUXTRACE size: 0x8  offset: 0  ref: 0  idx: 0  tid: 7  cpu: 0")
    recs = decode_perf_data(str(path))
    assert len(recs) == 4 and recs.cpu.tolist() == [0, 1, 1, 1]
    assert recs.tot_lat.tolist()[2:] == [12, 17]

    from pmuscope.cli.main import main

    assert main(["spe", "--dump", str(path)]) == 0
    out = capsys.readouterr().out
    assert ".  00000002:  52 02 10                                        EV RETIRED LATE-PREFETCH" in out
    assert ".  00000002:  52 02 10                                        EV RETIRED IMPDEF:12" in out
    assert out.count(". ... ARM SPE data: size 0x8 bytes") == 2
    assert main(["spe", str(path), "-o", str(tmp_path / "out")]) == 0
    ldst = (tmp_path / "out" / "spe-ldst.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in ldst[1:]] == ["0", "1", "1"]
    assert ldst[1].split(",")[11] == "RETIRED:LATE-PREFETCH" and ldst[2].split(",")[11] == "RETIRED:IMPDEF-12"


def test_v1_metadata_takes_midr_from_cpuid_feature(tmp_path):
    path = tmp_path / "perf.data"
    _write(path, auxtrace_info_record(42, version=1), [(2, _late_prefetch_record())], cpuid="0x00000000410fd0c1")
    [(cpu, midr, data, _)] = list(iter_spe_chunks(str(path)))
    assert (cpu, midr) == (2, 0x410FD0C1)
    info = parse_auxtrace_info(auxtrace_info_record(42, version=1))
    assert (info.version, info.pmu_type, info.per_cpu_mmaps, info.midr) == (1, 42, 1, {})


def test_bad_metadata_and_other_aux_types(tmp_path, shared_fixtures):
    rec = bytearray(auxtrace_info_record(42, {3: N2}))
    rec[16 + 8 * 4] ^= 0xFF  # break the per-CPU magic
    with pytest.raises(FormatError, match="magic"):
        parse_auxtrace_info(bytes(rec))
    with pytest.raises(PmuscopeError, match="Intel PT, not Arm SPE"):
        list(iter_spe_chunks(str(shared_fixtures / "perf_data_converter" / "perf.data.intel_pt-4.14")))
    with pytest.raises(PmuscopeError, match="no PERF_RECORD_AUXTRACE_INFO"):
        list(iter_spe_chunks(str(shared_fixtures / "linux-perf-data" / "sleep.data")))


def test_pipe_mode_perf_data(tmp_path, data_dir):
    from pmuscope.perfdata.writer import PerfPipeWriter

    quipper = (data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin").read_bytes()
    path = tmp_path / "pipe.data"
    with open(path, "wb") as fh:
        w = PerfPipeWriter(fh, host=False)
        w.add_attr(abi.perf_event_attr(type=42, sample_period=1, sample_type=abi.PERF_SAMPLE_IP), [1], name="arm_spe_0//")
        w.write(auxtrace_info_record(42, {5: N2}))
        w.write(auxtrace_record(quipper, cpu=5, tid=9))
        w.close()
    [(cpu, midr, data, header)] = list(iter_spe_chunks(str(path)))
    assert (cpu, midr, data) == (5, N2, quipper)
    assert "tid: 9  cpu: 5" in header
