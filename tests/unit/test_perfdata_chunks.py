"""``PerfDataFile.raw_chunks()`` on pipe-mode data: whole records in file order
(the same bytes ``raw_records()`` gives one by one), chunks as large as
``max_bytes`` allows whatever the source (mapped file, non-seekable stream
with short reads), samples 8-byte aligned in their chunk after an unpadded
record (perf before 6.12 wrote pipe-mode HEADER_FEATURE records unpadded),
AUXTRACE payloads longer than a read block, the same errors at the same
offsets on truncated input; and the profile built from pipe-mode input with
large batches (:func:`profile_source`) equal to the one built record by record.
"""

from __future__ import annotations

import io
import random
import struct

import numpy as np
import pytest

from pmuscope.errors import FormatError
from pmuscope.kernel import abi
from pmuscope.perfdata import PerfDataFile, synth
from pmuscope.perfdata.features import Feature
from pmuscope.perfdata.writer import PerfPipeWriter
from pmuscope.records import RecordSource, SampleBatch
from pmuscope.records.decode import iter_headers

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

R = abi.PerfRecord
S = abi.PerfSample
ST = S.IP | S.TID | S.TIME | S.ID | S.CPU | S.PERIOD | S.CALLCHAIN
N_SAMPLES = 3000
ROUND = 500
AUX_PAYLOAD = 10_000  # longer than the small read blocks below


def _attr() -> abi.perf_event_attr:
    return abi.perf_event_attr(type=1, config=0, sample_period=1000, sample_type=ST, read_format=abi.PerfFormat.ID,
                               disabled=1, mmap=1, comm=1, mmap2=1, comm_exec=1, sample_id_all=1)


def _unpadded_hostname(name: bytes) -> bytes:
    """HEADER_FEATURE(HOSTNAME) as perf 6.1 writes it in pipe mode: header.size
    not a multiple of 8 (u32 length + string, no padding after)."""
    payload = struct.pack("<Q", Feature.HOSTNAME) + struct.pack("<I", len(name)) + name
    assert (8 + len(payload)) % 8 == 4
    return struct.pack("<IHH", R.HEADER_FEATURE, 0, 8 + len(payload)) + payload


def _auxtrace(idx: int) -> bytes:
    hdr = struct.pack("<IHH", R.AUXTRACE, 0, 48) + struct.pack("<QQQIIII", AUX_PAYLOAD, 0, idx, idx, 7, 0, 0)
    return hdr + bytes([idx & 0xFF]) * AUX_PAYLOAD


def _pipe_stream() -> bytes:
    """A pipe-mode stream: an unpadded feature in the preamble and one late in
    the data; samples with call chains interleaved with COMM/MMAP2 records
    (every 50th/100th sample), FINISHED_ROUND every 500, two AUXTRACE records."""
    buf = io.BytesIO()
    w = PerfPipeWriter(buf, host=False)
    w.add_attr(_attr(), [11], "cpu-clock")
    w.start()
    buf.write(_unpadded_hostname(b"box\0\0\0\0\0"))
    out = []
    for i in range(N_SAMPLES):
        t = 1000 + 10 * i
        sid = synth.sample_id(ST, pid=7, tid=7, time=t - 5, id=11)
        if i % 100 == 0:
            base = 0x400000 + 0x10000 * (i // 100)
            out.append(synth.mmap2(7, 7, base, 0x10000, 0, f"/lib/l{i // 100}.so", sample_id=sid))
        if i % 50 == 0:
            out.append(synth.comm(7, 7, f"w{i // 50}", sample_id=sid))
        ip = 0x400010 + 0x10000 * (i // 100) + i % 64
        out.append(synth.sample(ST, ip=ip, pid=7, tid=7, time=t, id=11, cpu=i % 2, period=100,
                                callchain=[ip, 0x400100, 0x400200][: 1 + i % 3]))
        if i == 1234:
            out.append(_auxtrace(1))
            out.append(_unpadded_hostname(b"late\0\0\0\0"))
        if i == 2222:
            out.append(_auxtrace(2))
        if i % ROUND == ROUND - 1:
            out.append(synth.finished_round())
    w.write(b"".join(out))
    w.close()
    return buf.getvalue()


class _ShortReads(io.BytesIO):
    """A non-seekable stream (a pipe) whose reads return fewer bytes than asked."""

    def __init__(self, data: bytes, seed: int = 5) -> None:
        super().__init__(data)
        self._rng = random.Random(seed)

    def seekable(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no fd")

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            return super().read()
        return super().read(max(1, min(n, self._rng.choice([n, n, 7, 100, 4096, 65536]))))


@pytest.fixture(scope="module")
def stream() -> bytes:
    return _pipe_stream()


def _source(kind: str, data: bytes):
    return data if kind == "mapped" else _ShortReads(data)


def _records(kind: str, data: bytes, strict: bool = True):
    """(bytes of every record one by one, the error) — the reference."""
    p = PerfDataFile(_source(kind, data), strict=strict)
    got = []
    try:
        for rec in p.raw_records():
            got.append(bytes(rec[2]))
    except FormatError as err:
        return b"".join(got), (err.offset, str(err))
    return b"".join(got), (None if p.data_error is None else (p.data_error.offset, str(p.data_error)))


def _chunks(kind: str, data: bytes, max_bytes: int, strict: bool = True):
    p = PerfDataFile(_source(kind, data), strict=strict)
    got = []
    try:
        for _base, chunk in p.raw_chunks(max_bytes=max_bytes):
            got.append(bytes(chunk))
    except FormatError as err:
        return got, (err.offset, str(err))
    return got, (None if p.data_error is None else (p.data_error.offset, str(p.data_error)))


@pytest.mark.parametrize("kind", ["mapped", "stream"])
@pytest.mark.parametrize("max_bytes", [64, 4096, 1 << 22])
def test_chunks_hold_the_records_in_order_aligned(stream, kind, max_bytes):
    want, err = _records(kind, stream)
    assert err is None
    chunks, err = _chunks(kind, stream, max_bytes)
    assert err is None and b"".join(chunks) == want
    samples = 0
    for chunk in chunks:
        for off, t, _misc, size in iter_headers(chunk):  # whole records only
            if t == R.SAMPLE:
                samples += 1
                assert off % 8 == 0, "a sample off the 8-byte grid of its chunk: the decoder would loop per sample"
        # a chunk is cut near max_bytes, not at every record (pipe-mode records are not copied one chunk each)
        assert len(chunk) < max_bytes + 0x10000
    assert samples == N_SAMPLES
    if max_bytes == 1 << 22:
        big = [c for c in chunks if any(t == R.SAMPLE for _o, t, _m, _s in iter_headers(c))]
        # runs of samples end only at the records that need handling of their own (AUXTRACE, the late feature)
        assert len(big) <= 4


@pytest.mark.parametrize("kind", ["mapped", "stream"])
@pytest.mark.parametrize("strict", [True, False])
def test_truncated_input_same_error_same_records(stream, kind, strict):
    aux = stream.index(_auxtrace(1)[:48])
    cuts = [aux + 20, aux + 48 + 5000, aux + 48 + AUX_PAYLOAD - 1, len(stream) - 3, len(stream) - 13]
    cuts += random.Random(3).sample(range(200, len(stream)), 12)
    for cut in cuts:
        data = stream[:cut]
        want, want_err = _records(kind, data, strict)
        for max_bytes in (64, 4096, 1 << 22):
            chunks, err = _chunks(kind, data, max_bytes, strict)
            assert err == want_err and err is not None, (cut, max_bytes)
            assert b"".join(chunks) == want, (cut, max_bytes)


def test_late_feature_is_still_applied(stream):
    p = PerfDataFile(stream)
    assert p.features[Feature.HOSTNAME] == "box"
    list(p.raw_chunks())
    assert p.features[Feature.HOSTNAME] == "late"


@pytest.mark.parametrize("kind", ["path", "stream"])
def test_pipe_profile_in_large_batches_equals_record_order(stream, tmp_path, kind):
    from pmuscope.profile._fastload import RoundSource, profile_source
    from pmuscope.profile.model import build_profile, load_profile
    from pmuscope.symbols import Symbolizer

    path = tmp_path / "pipe.data"
    path.write_bytes(stream)
    with PerfDataFile(str(path)) as pf:
        src = profile_source(pf, str(path))
        assert isinstance(src, RoundSource)
        batches = [len(b) for b in src if isinstance(b, SampleBatch)]
    # cut at the FINISHED_ROUND marks (and at the chunks' ends), not at the 60 places with COMM/MMAP2 records
    assert sum(batches) == N_SAMPLES and len(batches) <= N_SAMPLES // ROUND + 4
    with PerfDataFile(str(path)) as pf:
        cut = [len(b) for b in pf.records() if isinstance(b, SampleBatch)]
    assert len(cut) >= 60  # record order: a cut at each of the 60 places with COMM/MMAP2 records

    with PerfDataFile(str(path)) as pf:
        ref = build_profile(pf.records(), event_names=pf.event_names, symbolizer=Symbolizer(kernel=False))
    got = load_profile(str(path) if kind == "path" else PerfDataFile(_ShortReads(stream)),
                       symbolizer=Symbolizer(kernel=False))
    assert len(got) == len(ref) == N_SAMPLES
    for col in ("pid", "tid", "time", "period", "ip", "comm", "leaf"):
        assert np.array_equal(getattr(got, col), getattr(ref, col)), col
    assert got.frame_names(got.leaf) == ref.frame_names(ref.leaf)
    # the comm of a sample is the one set just before it (every 50 samples)
    assert [got.comms[c] for c in got.comm[[0, 49, 50, 2999]]] == ["w0", "w0", "w1", "w59"]


def test_record_source_still_cuts_at_side_band_records(stream):
    """RecordSource's contract (record order, batches cut at every side-band
    record) is what live consumers rely on: unchanged."""
    p = PerfDataFile(stream)
    kinds = [type(item).__name__ for item in RecordSource(p.raw_chunks(), p.records().attrs)]
    first_comm = kinds.index("Comm")
    assert kinds[first_comm + 1] == "SampleBatch"
    assert kinds.count("SampleBatch") >= 60
