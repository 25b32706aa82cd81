"""The output layer (pmuscope.outfile): perf's file rules and one-line errors,
and the Parquet appender that keeps a time series readable while it grows."""

from __future__ import annotations

import errno
import io
import os
import stat

import numpy as np
import pytest

from pmuscope import outfile
from pmuscope.outfile import OutputError, OutputWriteError, open_output, write_output


def test_new_file_existing_moved_to_old(tmp_path):
    p = tmp_path / "a.txt"
    write_output(p, "one")
    write_output(p, "two")
    assert p.read_text() == "two"
    assert (tmp_path / "a.txt.old").read_text() == "one"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.txt", "a.txt.old"]


def test_empty_file_replaced_without_old(tmp_path):
    p = tmp_path / "a"
    p.write_text("")
    write_output(p, "x")
    assert p.read_text() == "x" and not (tmp_path / "a.old").exists()


def test_backup_false_replaces(tmp_path):
    p = tmp_path / "a"
    p.write_text("old")
    write_output(p, "new", backup=False)
    assert p.read_text() == "new" and not (tmp_path / "a.old").exists()


@pytest.mark.parametrize("atomic", [True, False])
def test_symlink_is_moved_never_followed(tmp_path, atomic):
    victim = tmp_path / "victim"
    victim.write_text("secret")
    link = tmp_path / "out"
    link.symlink_to(victim)
    with open_output(link, "wb", perm=0o600, atomic=atomic) as f:
        f.write(b"PERFILE2")
    assert victim.read_text() == "secret"
    assert not link.is_symlink() and link.read_bytes() == b"PERFILE2"
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
    assert os.readlink(tmp_path / "out.old") == str(victim)


def test_recording_mode_0600_under_any_umask(tmp_path):
    old = os.umask(0)
    try:
        write_output(tmp_path / "perf.data", b"x", perm=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "perf.data").stat().st_mode) == 0o600


def test_error_inside_leaves_nothing_and_keeps_previous(tmp_path):
    p = tmp_path / "a"
    p.write_text("previous")
    with pytest.raises(RuntimeError):
        with open_output(p) as f:
            f.write("partial")
            raise RuntimeError
    assert p.read_text() == "previous"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a"]


@pytest.mark.parametrize("case, code, words", [
    ("missing", 73, "does not exist"),
    ("dir", 73, "is a folder"),
    ("notdir", 73, "not a folder"),
])
def test_create_errors_are_one_line(tmp_path, case, code, words):
    if case == "missing":
        p = tmp_path / "no" / "x"
    elif case == "dir":
        p = tmp_path
    else:
        (tmp_path / "f").write_text("")
        p = tmp_path / "f" / "x"
    with pytest.raises(OutputError) as ei:
        write_output(p, "x")
    assert ei.value.exit_code == code
    msg = str(ei.value)
    assert "\n" not in msg and str(p) in msg and words in msg


class _FullDisk(io.RawIOBase):
    """A raw file that takes ``room`` bytes, then fails with ENOSPC."""

    def __init__(self, fd: int, room: int) -> None:
        self._fd, self.room = fd, room

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return os.write(self._fd, b)

    def seekable(self) -> bool:
        return True

    def seek(self, pos, whence=0) -> int:
        return os.lseek(self._fd, pos, whence)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _shim_full(monkeypatch, room: int) -> None:
    def fdopen(fd, mode="wb", buffering=-1):
        return io.BufferedWriter(_FullDisk(fd, room), buffer_size=64)

    monkeypatch.setattr(outfile, "_fdopen", fdopen)


def test_full_disk_whole_file_removed(tmp_path, monkeypatch):
    _shim_full(monkeypatch, 10)
    p = tmp_path / "a"
    p.write_text("previous")
    with pytest.raises(OutputWriteError) as ei:
        write_output(p, "x" * 1000)
    assert ei.value.exit_code == 74
    assert "No space left on device" in str(ei.value) and "free some space" in str(ei.value)
    assert p.read_text() == "previous" and sorted(x.name for x in tmp_path.iterdir()) == ["a"]


def test_full_disk_stream_cut_to_last_checkpoint(tmp_path, monkeypatch):
    _shim_full(monkeypatch, 100)
    p = tmp_path / "s.csv"
    f = open_output(p, atomic=False)
    f.write("a,b\n1,2\n")
    f.checkpoint()
    with pytest.raises(OutputWriteError, match=r"keeps the 100 bytes of whole rows"):
        for _ in range(100):
            f.write("3,4\n")
            f.checkpoint()
    data = p.read_text()
    assert data.startswith("a,b\n1,2\n") and data.endswith("\n")


def test_stream_without_checkpoint_removed(tmp_path):
    p = tmp_path / "s.csv"
    f = open_output(p, atomic=False)
    f.write("partial")
    f.abort()
    assert not p.exists()


def test_append_cut_back_and_refuses_links(tmp_path, monkeypatch):
    p = tmp_path / "log"
    p.write_text("kept\n")
    (tmp_path / "ln").symlink_to(p)
    with pytest.raises(OutputError, match="symbolic link"):
        open_output(tmp_path / "ln", append=True)
    _shim_full(monkeypatch, 3)
    f = open_output(p, append=True)
    with pytest.raises(OutputWriteError):
        f.write("more than three\n")
        f.flush()
    assert p.read_text() == "kept\n"


def test_devices_written_in_place(tmp_path):
    write_output("/dev/null", "x")
    assert os.path.exists("/dev/null")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_output(fifo, b"hello")
        assert os.read(r, 10) == b"hello"
    finally:
        os.close(r)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# -- the Parquet appender ----------------------------------------------------------------
def test_parquet_appender_whole_after_each_append_and_after_a_failed_one(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from pmuscope.counting import parquet_append
    from pmuscope.counting.parquet_append import ParquetAppender

    schema = pa.schema([("t", pa.int64()), ("s", pa.dictionary(pa.int32(), pa.string())), ("v", pa.float64())],
                       metadata={b"run": b"1"})

    def seg(table) -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return buf.getvalue()

    path = tmp_path / "x.parquet"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    ap = ParquetAppender(fd, seg(schema.empty_table()))
    assert pq.read_table(path).num_rows == 0
    for i in range(20):
        t = pa.table({"t": np.arange(i * 7, i * 7 + 7), "s": pa.array([f"e{i}"] * 7).dictionary_encode(),
                      "v": [float(i)] * 7}, schema=schema)
        ap.append(seg(t))
        got = pq.read_table(path)
        assert got.num_rows == 7 * (i + 1)
        assert got.column("t").to_pylist() == list(range(7 * (i + 1)))
    assert pq.ParquetFile(path).metadata.num_row_groups == 20
    assert got.schema.metadata[b"run"] == b"1"

    size = os.path.getsize(path)

    real_pwrite = os.pwrite
    calls = []

    def failing(fd_, data, at):  # a full disk halfway through the append (space comes back after the cut)
        calls.append(at)
        if len(calls) > 1:
            return real_pwrite(fd_, data, at)
        real_pwrite(fd_, bytes(data[: len(data) // 2]), at)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(parquet_append.os, "pwrite", failing)
    with pytest.raises(OSError):
        ap.append(seg(t))
    monkeypatch.undo()
    assert os.path.getsize(path) == size
    assert pq.read_table(path).num_rows == 140
    os.close(fd)


def test_parquet_writer_memory_flat_for_an_hour_at_1ms(tmp_path):
    """One hour at 1 ms (3.6 M rows) through the monitor's Parquet writer with
    a row group per 5 s: the process's memory does not grow with the rows."""
    pytest.importorskip("pyarrow")
    import resource

    from pmuscope.counting import writers

    schema = [("timestamp", "i64"), ("cpu", "i32"), ("task-clock", "i64"), ("late", "bool"), ("util", "f64")]
    path = tmp_path / "hour.parquet"
    w = writers.ParquetWriter(str(path), schema, row_group_rows=5000, flush_seconds=3600)
    per = 5000  # 5 s of 1 ms intervals

    def batch(k):
        t = np.arange(k * per, (k + 1) * per, dtype=np.int64) * 1_000_000
        return {"timestamp": t, "cpu": np.zeros(per, np.int32), "task-clock": np.full(per, 999_000, np.int64),
                "late": np.zeros(per, bool), "util": np.full(per, 0.5)}

    rss = []
    for k in range(720):
        w.write(batch(k))
        if k in (72, 719):
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    w.close()
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == 3_600_000 and meta.num_row_groups == 720
    assert rss[1] - rss[0] < 40 * 1024, rss  # KiB: flat (the 3.6 M rows would be >100 MB)


def test_perf_map_of_another_user_is_ignored(tmp_path):
    """perf's rule: a /tmp/perf-PID.map not owned by the reading user or root is
    refused with a warning (anyone can write /tmp)."""
    from pmuscope.symbols.perfmap import PerfMap

    path = tmp_path / "perf-4242.map"
    path.write_text("1000 10 jitted_fn\n")
    assert PerfMap(str(path)).table() is not None and PerfMap(str(path)).refresh()
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(path, 65534, 65534)
    pm = PerfMap(str(path))
    with pytest.warns(UserWarning, match="not owned by the current user or root"):
        assert not pm.refresh()
    assert pm.untrusted and len(pm.table()) == 0


def test_csv_writer_hour_at_1ms_flushed_per_batch_and_flat(tmp_path):
    """One hour at 1 ms in 0.25 s batches (the monitor's chunks): after every
    batch the file on disk holds every row so far (a kill loses nothing
    written), and memory does not grow with the rows."""
    import resource

    from pmuscope.counting import writers

    schema = [("timestamp", "i64"), ("cpu", "i32"), ("task-clock", "i64"), ("late", "bool"), ("util", "f64")]
    path = tmp_path / "hour.csv"
    w = writers.CsvWriter(str(path), schema)
    per = 250
    rss = []
    for k in range(14_400):
        ts = np.arange(k * per, (k + 1) * per, dtype=np.int64) * 1_000_000
        w.write({"timestamp": ts, "cpu": np.zeros(per, np.int32), "task-clock": np.full(per, 999_000, np.int64),
                 "late": np.zeros(per, bool), "util": np.full(per, 0.5)})
        if k in (1_440, 14_399):
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        if k in (0, 7_000):
            with open(path, "rb") as f:
                assert sum(1 for _ in f) == 1 + (k + 1) * per  # on disk already, before close
    w.close()
    assert rss[1] - rss[0] < 20 * 1024, rss  # KiB
    with open(path, "rb") as f:
        assert sum(1 for _ in f) == 1 + 3_600_000


def test_leftovers_of_killed_runs_are_removed(tmp_path):
    """A run killed before its rename leaves .BASE.PID.N.tmp behind; the next
    write of the same path removes those of dead processes (with a warning)
    and keeps those of running ones, other names and other files."""
    import subprocess
    import sys
    import warnings

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stale = tmp_path / f".perf.data.{dead_pid}.0.tmp"
        running = tmp_path / f".perf.data.{live.pid}.0.tmp"
        other = tmp_path / f".other.data.{dead_pid}.0.tmp"
        odd = tmp_path / ".perf.data.notapid.0.tmp"
        for f in (stale, running, other, odd):
            f.write_bytes(b"partial")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write_output(str(tmp_path / "perf.data"), b"whole")
        assert (tmp_path / "perf.data").read_bytes() == b"whole"
        assert not stale.exists() and running.exists() and other.exists() and odd.exists()
        assert len(caught) == 1 and stale.name in str(caught[0].message) and "interrupted" in str(caught[0].message)
    finally:
        live.kill()
        live.wait()
