"""pmuscope's SPE packet text against the real Linux perf: synthesize perf.data
files holding Arm SPE AUXTRACE data and diff `perf report -D` with
`pmuscope spe --dump` line by line.

The installed perf may be older than the decoder rules pmuscope follows (the
newest perf), so the generated packets stay within what every perf since 5.11
prints the same way: no IMPDEF/newest event bits, no SME/GCS/ASE/FP or SVE
load/store op types, no MTE-TAG/MEMCPY/MEMSET subclasses (perf 6.1 prints none of them), no previous-branch-target
address (index 4, printed as PBT since perf 6.3, raw before), and no alignment
packets (perf aligns them to its own heap pointer).
"""

from __future__ import annotations

import random
import re
import subprocess

import pytest

from pmuscope.kernel import abi
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe import dump_lines, encode_packet
from pmuscope.spe.packets import ADDRESS, CONTEXT, COUNTER, DATA_SOURCE, END, EVENTS, OP_TYPE, TIMESTAMP
from pmuscope.spe.perfdata import auxtrace_info_record, auxtrace_record

_EVENT_BITS = list(range(12)) + [17, 18]
_LDST = [0x00, 0x01, 0x04, 0x05, 0x10, 0x11, 0x30, 0x31] + [
    v for v in range(0x20) if (v & 0xE2) == 0x02
]
_OTHER = [0x00, 0x01] + [v for v in range(256) if (v & 0x89) == 0x08]


def _record(rng: random.Random) -> bytes:
    out = []
    if rng.random() < 0.9:
        out.append(encode_packet(ADDRESS, 0, rng.getrandbits(64), extended=rng.random() < 0.1))
    cls = rng.choice([0, 1, 1, 2])
    out.append(encode_packet(OP_TYPE, cls, rng.choice(_OTHER if cls == 0 else _LDST if cls == 1 else [0, 1, 2, 3])))
    ev = sum(1 << b for b in _EVENT_BITS if rng.random() < 0.3)
    out.append(encode_packet(EVENTS, 0, ev, payload_len=rng.choice([4, 8] if ev >> 16 else [2, 4, 8])))
    for idx in rng.sample([0, 1, 2, 5], rng.randint(0, 3)):
        out.append(encode_packet(COUNTER, idx, rng.getrandbits(16), extended=rng.random() < 0.1))
    for idx in rng.sample([1, 2, 3, 6, 12], rng.randint(0, 3)):
        out.append(encode_packet(ADDRESS, idx, rng.getrandbits(64), extended=idx > 7 or rng.random() < 0.1))
    if rng.random() < 0.5:
        out.append(encode_packet(DATA_SOURCE, 0, rng.getrandbits(8 * (n := rng.choice([1, 2]))), payload_len=n))
    if rng.random() < 0.5:
        out.append(encode_packet(CONTEXT, rng.randint(0, 3), rng.getrandbits(32)))
    if rng.random() < 0.1:
        out.append(bytes([rng.choice(range(0x02, 0x20))]))  # an invalid header byte
    rng.shuffle(out)
    out.append(bytes(rng.choice([0, 0, 3, 17])))
    out.append(encode_packet(TIMESTAMP, 0, rng.getrandbits(64)) if rng.random() < 0.7 else encode_packet(END))
    return b"".join(out)


def _perf_data(path, chunks):
    attr = abi.perf_event_attr(type=42, config=0, sample_period=1,
                               sample_type=abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_TID | abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_CPU)
    with PerfDataWriter(path) as w:
        w.add_attr(attr, [1], name="arm_spe_0//")
        w.write_record(auxtrace_info_record(42, version=1))
        for cpu, data in chunks:
            w.write_record(auxtrace_record(data, cpu=cpu, tid=100 + cpu))


_PKT_LINE = re.compile(r"^\.  [0-9a-f]{8}:  ")


def _spe_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(". ... ARM SPE data") or _PKT_LINE.match(line)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_perf_report_dump_equals_pmuscope_dump(perf_bin, tmp_path, seed, capsys):
    rng = random.Random(seed)
    chunks = []
    for cpu in (0, 1):
        data = b"".join(_record(rng) for _ in range(300)) + bytes(rng.randint(0, 5))
        chunks.append((cpu, data + bytes(-len(data) % 8)))  # perf record pads AUXTRACE data to 8 bytes
    path = tmp_path / "spe.data"
    _perf_data(str(path), chunks)
    proc = subprocess.run([perf_bin, "report", "-D", "-i", str(path)], capture_output=True, text=True, timeout=120)
    perf_lines = _spe_lines(proc.stdout)
    if not perf_lines:
        pytest.skip(f"this perf does not dump Arm SPE AUXTRACE data: {proc.stderr.strip()[-200:]}")
    ours = []
    for _, data in chunks:
        ours.extend(dump_lines(data, header=True))
    # perf before 6.2 printed the size in decimal ("size 1234 bytes"); compare packet lines exactly
    assert [l for l in perf_lines if _PKT_LINE.match(l)] == [l for l in ours if _PKT_LINE.match(l)]
    assert sum("Bad packet!" in l for l in perf_lines) > 0  # the stream did exercise resynchronisation
    # the CLI reads the same perf.data through the perf.data reader
    from pmuscope.cli.main import main

    assert main(["spe", "--dump", str(path)]) == 0
    out = capsys.readouterr().out
    assert [l for l in _spe_lines(out) if _PKT_LINE.match(l)] == [l for l in perf_lines if _PKT_LINE.match(l)]
    aux_perf = re.findall(r"(0x[0-9a-f]+ \[0x30\]: PERF_RECORD_AUXTRACE .*)", proc.stdout)
    aux_ours = re.findall(r"(0x[0-9a-f]+ \[0x30\]: PERF_RECORD_AUXTRACE .*)", out)
    assert aux_ours == aux_perf and len(aux_ours) == 2


@pytest.mark.parametrize("name", ["arm_spe_decoder_test.SampleSPEPackets.bin", "spe-b1-ts0.data", "spe-b1-ts1.data"])
def test_perf_prints_the_published_captures_as_pmuscope_does(perf_bin, tmp_path, data_dir, name):
    data = (data_dir / "spe" / name).read_bytes()
    path = tmp_path / "capture.data"
    _perf_data(str(path), [(0, data)])
    proc = subprocess.run([perf_bin, "report", "-D", "-i", str(path)], capture_output=True, text=True, timeout=120)
    perf_lines = [l for l in _spe_lines(proc.stdout) if _PKT_LINE.match(l)]
    if not perf_lines:
        pytest.skip(f"this perf does not dump Arm SPE AUXTRACE data: {proc.stderr.strip()[-200:]}")
    assert perf_lines == list(dump_lines(data))
    if name.startswith("arm_spe"):
        expected = [l for l in (data_dir / "spe" / (name[:-4] + ".expected.txt")).read_text().splitlines() if l.startswith(".")]
        assert perf_lines == expected


def _any_record(rng: random.Random) -> bytes:
    """A record with any op payload, any event bits, any address/counter index."""
    out = [encode_packet(ADDRESS, 0, rng.getrandbits(64))]
    out.append(encode_packet(OP_TYPE, rng.randint(0, 3), rng.getrandbits(8)))
    out.append(encode_packet(EVENTS, 0, rng.getrandbits(64) & rng.getrandbits(64), payload_len=8))
    for idx in rng.sample(range(8), 3):
        out.append(encode_packet(ADDRESS, idx, rng.getrandbits(64)))
        out.append(encode_packet(COUNTER, idx, rng.getrandbits(16)))
    rng.shuffle(out)
    return b"".join(out) + encode_packet(TIMESTAMP, 0, rng.getrandbits(64))


def test_perf_61_style_matches_perf_61_on_any_payload(perf_bin, tmp_path):
    version = subprocess.run([perf_bin, "--version"], capture_output=True, text=True, timeout=30).stdout
    if not re.match(r"perf version 6\.1\.", version):
        pytest.skip(f"the 6.1 text style is checked against perf 6.1, this is {version.strip()}")
    rng = random.Random(61)
    data = b"".join(_any_record(rng) for _ in range(1500))
    data += bytes(-len(data) % 8)
    path = tmp_path / "spe.data"
    _perf_data(str(path), [(0, data)])
    proc = subprocess.run([perf_bin, "report", "-D", "-i", str(path)], capture_output=True, text=True, timeout=120)
    perf_lines = [l for l in _spe_lines(proc.stdout) if _PKT_LINE.match(l)]
    ours = list(dump_lines(data, style="6.1"))
    assert perf_lines == ours
    newest = list(dump_lines(data))
    assert sum(a != b for a, b in zip(ours, newest)) > 1000  # the styles really differ on such data
