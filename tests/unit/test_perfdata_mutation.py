"""Corrupted perf.data never escapes as anything but FormatError: truncations,
random byte flips, bogus section offsets/sizes and record sizes, fed to the
reader by the hundreds (hypothesis, plus an exhaustive truncation sweep)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pmuscope.errors import FormatError
from pmuscope.perfdata import PerfDataFile, synth
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.kernel import abi

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

FIXTURES = os.environ.get("PMUSCOPE_SHARED_FIXTURES") or os.path.join(
    os.path.dirname(__file__), "..", "data", "fixtures")
CORPUS_FILES = [
    "linux-perf-data/sleep.data",
    "linux-perf-data/sleep.compressed.data",
    "linux-perf-data/sleep.compressed.pipe.data",
    "perf_data_converter/perf.data.piped.header_features_aligned-6.12",
    "perf_data_converter/perf.data.group_desc-4.14",
    "perf_data_converter/perf.data.singleprocess-3.8",
]


def _own_file(tmp_dir: str) -> bytes:
    S = abi.PerfSample
    st_ = S.IP | S.TID | S.TIME | S.ID | S.PERIOD
    path = os.path.join(tmp_dir, "own.data")
    with PerfDataWriter(path, argv=["a"]) as w:
        w.add_attr(abi.perf_event_attr(type=1, sample_type=st_, sample_id_all=1), [3, 4], "cpu-clock")
        w.add_build_id("/x", b"\x02" * 20)
        w.write_record(synth.comm(1, 1, "c", sample_id=synth.sample_id(st_, time=1, id=3)))
        for i in range(20):
            w.write_record(synth.sample(st_, ip=i, pid=1, tid=1, time=10 - i % 5, id=3 + i % 2))
            if i % 5 == 4:
                w.write_record(synth.finished_round())
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[bytes]:
    out = [_own_file(str(tmp_path_factory.mktemp("own")))]
    for rel in CORPUS_FILES:
        with open(os.path.join(FIXTURES, rel), "rb") as f:
            out.append(f.read())
    return out


def consume(data: bytes) -> None:
    """Everything a user can ask of the container; only FormatError may come out,
    in strict mode and in lenient mode."""
    _consume(data, True)
    _consume(data, False)


def _consume(data: bytes, strict: bool) -> None:
    try:
        p = PerfDataFile(data, name="mutant.data", strict=strict)
        _ = p.event_names, p.features, p.header
        for _rec in p.raw_records(ordered=True):
            pass
        for _chunk in p.raw_chunks(max_bytes=1024):
            pass
        for _buf in p.auxtrace():
            pass
        p.sample_counts()
    except FormatError as err:
        msg = str(err)
        assert msg.startswith("mutant.data: at byte "), msg
        assert isinstance(err.offset, int) and err.offset >= 0


def _mutate(data: bytes, draw) -> bytes:
    b = bytearray(data)
    kind = draw(st.sampled_from(["truncate", "flip", "u64", "size16", "section"]))
    if kind == "truncate":
        return bytes(b[: draw(st.integers(0, len(b)))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] ^= 1 << draw(st.integers(0, 7))
        return bytes(b)
    if kind == "u64":  # a header word (attr_size, section offsets/sizes, flags) made bogus
        at = draw(st.sampled_from(range(8, 104, 8)))
        val = draw(st.sampled_from([0, 1, 7, 16, 104, 0xFFFFFFFF, 1 << 62, 2**64 - 1, len(b), len(b) - 8]))
        if at + 8 <= len(b):
            struct.pack_into("<Q", b, at, val)
        return bytes(b)
    if kind == "size16":  # a record's u16 size field somewhere in the file
        at = draw(st.integers(0, max(0, len(b) - 2)))
        struct.pack_into("<H", b, at - at % 8 + 6 if at - at % 8 + 8 <= len(b) else 0, draw(st.sampled_from([0, 1, 8, 9, 0xFFFF])))
        return bytes(b)
    # a feature/ids section entry made to point anywhere
    at = draw(st.integers(0, max(0, len(b) - 16)))
    at -= at % 8
    struct.pack_into("<QQ", b, at, draw(st.integers(0, 2 * len(b))), draw(st.integers(0, 2**63)))
    return bytes(b)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                              HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutants_only_raise_format_error(corpus, data):
    base = data.draw(st.sampled_from(corpus))
    consume(_mutate(base, data.draw))


def test_every_truncation_of_a_small_file(corpus):
    base = corpus[0]
    for n in range(0, len(base), 4):
        consume(base[:n])


def test_every_truncation_of_a_pipe_file(corpus):
    pipes = [c for c in corpus if c[8:16] == struct.pack("<Q", 16)]
    assert pipes, "the corpus holds pipe-mode captures"
    base = min(pipes, key=len)
    for n in range(0, len(base), 37):
        consume(base[:n])


def test_zip_bomb_like_record_is_bounded(corpus):
    """A COMPRESSED record whose output would exceed the bound is refused."""
    zstd = pytest.importorskip("zstandard")
    payload = zstd.ZstdCompressor(level=19).compress(b"\0" * (80 << 20))
    rec = struct.pack("<IHH", abi.PERF_RECORD_COMPRESSED, 0, 8 + len(payload) + (-len(payload) % 8)) + payload + b"\0" * (-len(payload) % 8)
    blob = b"PERFILE2" + struct.pack("<Q", 16) + rec
    with pytest.raises(FormatError, match="expands beyond"):
        PerfDataFile(blob).counts()
