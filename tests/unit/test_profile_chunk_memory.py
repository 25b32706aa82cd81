"""What a chunked read holds: each chunk is let go before the next one is
built (by the reader of iter_profile_chunks, the Collapser, report, script and
export), pending samples are split and joined a field at a time with the
same result as whole copies, and a small recording is decoded in smaller
chunks read into a buffer no larger than its data."""

from __future__ import annotations

import io
import weakref
from contextlib import redirect_stdout

import numpy as np
import pytest

from pmuscope.cli.main import main as cli_main
from pmuscope.kernel import abi
from pmuscope.perfdata import PerfDataFile, PerfDataWriter, synth
from pmuscope.profile import _fastload as fl
from pmuscope.profile import model
from pmuscope.profile.collapse import Collapser
from pmuscope.profile.model import _Pending, iter_profile_chunks, load_profile

pytestmark = pytest.mark.usefixtures("decode_path")

ST = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.PERIOD | abi.PerfSample.CALLCHAIN


def _write(tmp_path, nsamples: int, per_round: int = 50):
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(ST), sample_period=1, sample_id_all=1)
    path = tmp_path / "r.data"
    w = PerfDataWriter(str(path), [(attr, [], "cpu-clock")], host=False)
    recs = [synth.comm(7, 7, "prog", sample_id=synth.sample_id(ST, pid=7, tid=7, time=1))]
    for i in range(nsamples):
        chain = [abi.PERF_CONTEXT_USER, 0x1000 + i % 64, 0x2000 + i % 5]
        recs.append(synth.sample(ST, ip=0x1000 + i % 64, pid=7, tid=7 + i % 2, time=10 + i, period=1 + i % 3,
                                 callchain=chain))
        if i % per_round == per_round - 1:
            recs.append(synth.finished_round())
    w.write(b"".join(recs))
    w.close()
    return path


def test_chunk_bytes_by_size():
    full = fl.CHUNK_BYTES
    assert fl.chunk_bytes(None) == fl.chunk_bytes(0) == full // 4  # a pipe: its blocks are copies
    assert fl.chunk_bytes(1000) == full // 4  # never below a quarter
    assert fl.chunk_bytes(10_138_096) == 320 << 10  # a 32nd of the size, in 64 KiB steps
    assert fl.chunk_bytes(1 << 30) == full  # large files: the full size
    sizes = [fl.chunk_bytes(s) for s in range(1, 64 << 20, 1 << 20)]
    assert sizes == sorted(sizes) and all(s % (64 << 10) == 0 for s in sizes)


def test_small_file_read_in_buffers_no_larger_than_its_data(tmp_path):
    path = _write(tmp_path, 3000)
    with PerfDataFile(str(path)) as pf:
        size = pf.header.data.size
        chunks = list(fl.plain_data_chunks(pf, str(path)))
    assert sum(len(c) for _, c in chunks) == size
    for _, c in chunks:
        if isinstance(c.obj, bytearray):  # the C walker's reads (a memory map otherwise)
            assert len(c.obj) <= size


def test_chunk_bytes_cut_a_larger_file_into_more_chunks(tmp_path, monkeypatch):
    path = _write(tmp_path, 3000)
    with PerfDataFile(str(path)) as pf:
        size = pf.header.data.size
    monkeypatch.setattr(fl, "CHUNK_BYTES", 256 << 10)  # chunk_bytes: 64 KiB for this file
    assert fl.chunk_bytes(size) == 64 << 10 and size > 3 * (64 << 10)
    with PerfDataFile(str(path)) as pf:
        chunks = list(fl.plain_data_chunks(pf, str(path)))
    assert len(chunks) >= 4 and all(len(c) <= (64 << 10) + (1 << 16) for _, c in chunks)
    p = load_profile(str(path), kernel_symbols=False)
    assert len(p) == 3000 and np.array_equal(p.time, np.arange(10, 3010, dtype=np.uint64))


def _spy_chunks(monkeypatch) -> list[bool]:
    """Make iter_profile_chunks record, each time its builder is asked for the
    next chunk (before any of it is built), whether the chunk handed out
    before is still alive anywhere (its reader, the generators)."""
    real = model.iter_builder_chunks
    alive: list[bool] = []

    def spy(*a, **kw):
        it = real(*a, **kw)
        prev = None
        while True:
            if prev is not None:
                alive.append(prev() is not None)
            try:
                c = next(it)
            except StopIteration:
                return
            prev = weakref.ref(c)
            yield c
            del c

    monkeypatch.setattr(model, "iter_builder_chunks", spy)
    return alive


def test_iter_profile_chunks_holds_no_chunk_handed_out(tmp_path, monkeypatch):
    path = _write(tmp_path, 2000)
    alive = _spy_chunks(monkeypatch)
    n = 0
    for c in iter_profile_chunks(str(path), kernel_symbols=False, chunk_samples=100):
        n += len(c)
        del c
    assert n == 2000 and len(alive) > 5 and not any(alive)


def test_collapser_keeps_no_samples_of_a_chunk(tmp_path, monkeypatch):
    path = _write(tmp_path, 2000)
    alive = _spy_chunks(monkeypatch)
    col = Collapser()
    for c in iter_profile_chunks(str(path), kernel_symbols=False, chunk_samples=100):
        col.add(c)
        del c
        assert len(col.last) == 0
    assert len(alive) > 5 and not any(alive)
    prof = col.profile()
    whole = load_profile(str(path), kernel_symbols=False)
    assert int(prof.count.sum()) == 2000 and int(prof.period.sum()) == int(whole.period.sum())
    assert np.array_equal(prof.frame_ip, whole.frame_ip) and prof.comms == whole.comms


@pytest.mark.parametrize("argv", [["script"], ["script", "-G"], ["report", "--stdio"],
                                  ["export", "-f", "pprof", "-o", "-"]], ids=" ".join)
def test_commands_let_each_chunk_go_before_the_next(tmp_path, monkeypatch, argv):
    path = _write(tmp_path, 40000, per_round=500)  # more than one chunk of every command
    alive = _spy_chunks(monkeypatch)
    out = io.StringIO()
    out.buffer = io.BytesIO()  # type: ignore[attr-defined]
    with redirect_stdout(out):
        assert cli_main([*argv, "-i", str(path), "--no-kernel-symbols"]) == 0
    assert len(alive) >= 2 and not any(alive)


def _pending(n: int, rng) -> _Pending:
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rng.integers(0, 4, n), out=off[1:])
    return _Pending({"time": rng.integers(0, 1 << 40, n).astype(np.uint64), "pid": rng.integers(0, 9, n)},
                    {"cc": (rng.integers(0, 1 << 50, int(off[-1])).astype(np.uint64), off)})


def _same(a: _Pending, b: _Pending) -> None:
    assert a.cols.keys() == b.cols.keys() and a.flat.keys() == b.flat.keys()
    for k in a.cols:
        assert a.cols[k].dtype == b.cols[k].dtype and np.array_equal(a.cols[k], b.cols[k]), k
    for k in a.flat:
        assert all(np.array_equal(x, y) for x, y in zip(a.flat[k], b.flat[k])), k


def test_pending_split_keep_concat_are_takes_and_joins():
    rng = np.random.default_rng(3)
    p = _pending(500, rng)
    mask = rng.random(500) < 0.3
    idx = np.flatnonzero(~mask)[::-1].copy()
    ref_a, ref_b = p.take(mask), p.take(idx)
    a, b = _pending(500, np.random.default_rng(3)).split(mask, idx)
    _same(a, ref_a)
    _same(b, ref_b)
    order = rng.permutation(500)
    _same(_pending(500, np.random.default_rng(3)).keep(order), p.take(order))
    parts = [_pending(n, np.random.default_rng(n)) for n in (5, 0, 40)]
    ref = _Pending({k: np.concatenate([q.cols[k] for q in parts]) for k in parts[0].cols},
                   {k: model._concat_flat([q.flat[k] for q in parts]) for k in parts[0].flat})
    _same(_Pending.concat(parts), ref)
