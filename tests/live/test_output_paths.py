"""Every command that writes a file, walked through the ways an output path
goes wrong: a missing folder, a read-only folder, a folder where the file
should be, a symbolic link, and a full disk.

Each run is a real ``python -m pmuscope`` process: the assertions are on what
a user sees — one line on stderr, no traceback, exit status 73 (cannot create)
or 74 (write failed) — and on what is left on disk: never a partial file that
looks whole, never a write through a link.

A full disk is a filled 64 KiB tmpfs when this runs as root (and may mount),
else the equivalent fault: RLIMIT_FSIZE, under which a write past the limit
fails (EFBIG) exactly where ENOSPC would. A read-only folder is a read-only
tmpfs as root, a 0555 folder otherwise. ``PMUSCOPE_TEST_FSIZE_SHIM=1`` takes
the RLIMIT_FSIZE path as root too.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, SHARED_FIXTURES

ROOT = Path(__file__).resolve().parents[2]
PERF_DATA = SHARED_FIXTURES / "linux-perf-data" / "sleep.data"
SPE_DATA = DATA / "spe" / "spe-b1-ts0.data"

try:
    import pyarrow  # noqa: F401

    HAVE_ARROW = True
except ImportError:
    HAVE_ARROW = False

#: name -> (argv with {out} for the output path, kind): "file" outputs are
#: written whole under a temporary name; "stream" outputs (time series) are
#: written in place and must hold whole rows; "dir" is an output folder
COMMANDS: dict[str, tuple[list[str], str]] = {
    "record": (["record", "-e", "cpu-clock", "-q", "-o", "{out}", "--", "true"], "file"),
    "stat": (["stat", "-e", "task-clock", "-o", "{out}", "--", "true"], "file"),
    "stat-I": (["stat", "-e", "task-clock", "-a", "-I", "10", "--interval-count", "3", "-o", "{out}"], "stream"),
    "monitor-csv": (["monitor", "-e", "task-clock", "-a", "-I", "10", "--duration", "0.15", "-q", "--format", "csv",
                     "-o", "{out}"], "stream"),
    "monitor-jsonl": (["monitor", "-e", "task-clock", "-a", "-I", "10", "--duration", "0.15", "-q", "--format",
                       "jsonl", "-o", "{out}"], "stream"),
    "monitor-parquet": (["monitor", "-e", "task-clock", "-a", "-I", "10", "--duration", "0.15", "-q", "--format",
                         "parquet", "-o", "{out}"], "parquet"),
    "export-pprof": (["export", "-i", str(PERF_DATA), "-o", "{out}"], "file"),
    "export-speedscope": (["export", "-i", str(PERF_DATA), "-f", "speedscope", "-o", "{out}"], "file"),
    "export-folded": (["export", "-i", str(PERF_DATA), "-f", "folded", "-o", "{out}"], "file"),
    "report-folded": (["report", "-i", str(PERF_DATA), "--folded", "{out}"], "file"),
    "report-flamegraph": (["report", "-i", str(PERF_DATA), "--flamegraph", "{out}"], "file"),
    "report-html": (["report", "-i", str(PERF_DATA), "--html", "{out}"], "file"),
    "observe": (["observe", "-C", "0", "--duration", "0.05", "--rate", "1000", "-o", "{out}"], "file"),
    "spe": (["spe", "--raw", "-i", str(SPE_DATA), "-o", "{out}"], "dir"),
    "serve-textfile": (["serve", "--once", "--no-http", "--interval", "0.05", "--textfile", "{out}"], "dir"),
    "profile": (["profile", "-e", "cpu-clock", "-o", "{prefix}", "--", "true"], "file"),
}
if not HAVE_ARROW:
    del COMMANDS["monitor-parquet"]


def _run(argv: list[str], fsize: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONDONTWRITEBYTECODE="1")

    def limit():
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, "-m", "pmuscope", *argv], capture_output=True, text=True, env=env,
                          timeout=120, preexec_fn=limit, stdin=subprocess.DEVNULL)


def _argv(name: str, out: Path) -> list[str]:
    argv, kind = COMMANDS[name]
    prefix = str(out)[: -len(".data")] if name == "profile" else ""
    return [a.replace("{out}", str(out)).replace("{prefix}", prefix) for a in argv]


def _out(name: str, folder: Path) -> Path:
    """The path the checks look at (profile: PREFIX.data, the first it writes)."""
    return folder / {"observe": "series.csv", "profile": "p.data"}.get(name, "out")


def _one_line_error(r: subprocess.CompletedProcess, name: str) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    cmd = COMMANDS[name][0][0]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"pmuscope {cmd}: ") and "warning" not in ln
             and "note:" not in ln]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _whole(kind: str, path: Path) -> None:
    """What a time series keeps after a failure must be whole."""
    if not path.exists():
        return
    data = path.read_bytes()
    if kind == "stream":
        assert not data or data.endswith(b"\n"), data[-80:]
    elif kind == "parquet":
        import pyarrow.parquet as pq

        pq.read_table(path)  # raises on a file without a footer


def _no_temp(folder: Path) -> None:
    if folder.is_dir():
        left = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
        assert not left, left


@contextlib.contextmanager
def _tmpfs(path: Path, options: str):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if r.returncode:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", str(path)], check=False)


names = sorted(COMMANDS)


@pytest.mark.parametrize("name", names)
def test_missing_folder(tmp_path, name):
    out = _out(name, tmp_path / "no" / "such")
    r = _run(_argv(name, out))
    line = _one_line_error(r, name)
    assert r.returncode == 73, r.stderr
    assert "does not exist" in line and str(tmp_path / "no") in line
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("name", names)
def test_read_only_folder(tmp_path, name):
    folder = tmp_path / "ro"
    if os.geteuid() == 0:
        ctx = _tmpfs(folder, "ro,size=64k")
    else:
        folder.mkdir()
        folder.chmod(0o555)
        ctx = contextlib.nullcontext(True)
    with ctx as ok:
        if not ok:
            pytest.skip("root without the right to mount a read-only tmpfs")
        # serve --textfile takes an existing folder: the read-only one itself
        r = _run(_argv(name, folder if name == "serve-textfile" else _out(name, folder)))
        line = _one_line_error(r, name)
        assert r.returncode == 73, r.stderr
        assert "read-only" in line or "permission" in line.lower(), line
        assert list(folder.iterdir()) == []
    if os.geteuid() != 0:
        folder.chmod(0o755)


@pytest.mark.parametrize("name", names)
def test_directory_as_file(tmp_path, name):
    out = _out(name, tmp_path)
    if COMMANDS[name][1] == "dir":
        out.write_text("a file where the folder should be\n")
    else:
        out.mkdir()
        (out / "keep").write_text("x")
    r = _run(_argv(name, out))
    line = _one_line_error(r, name)
    assert r.returncode == 73, r.stderr
    assert "folder" in line
    if COMMANDS[name][1] == "dir":
        assert out.read_text() == "a file where the folder should be\n"
    else:
        assert [p.name for p in out.iterdir()] == ["keep"]
    _no_temp(tmp_path)


@pytest.mark.parametrize("name", [n for n in names if COMMANDS[n][1] != "dir"])
def test_symlink_is_moved_not_followed(tmp_path, name):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    out = _out(name, tmp_path)
    out.symlink_to(victim)
    r = _run(_argv(name, out))
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and out.is_file() and out.stat().st_size > 0
    old = Path(str(out) + ".old")
    assert old.is_symlink() and os.readlink(old) == str(victim)
    if name in ("record", "profile"):
        assert (out.stat().st_mode & 0o777) == 0o600  # perf's mode for perf.data
    _no_temp(tmp_path)


@pytest.mark.parametrize("name", names)
def test_full_disk(tmp_path, name):
    folder = tmp_path / "full"
    real = False
    if os.geteuid() == 0 and not os.environ.get("PMUSCOPE_TEST_FSIZE_SHIM"):
        ctx = _tmpfs(folder, "size=64k")
    else:
        ctx = contextlib.nullcontext(False)
    with ctx as mounted:
        if mounted:
            real = True
            filler = folder / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            with contextlib.suppress(OSError):  # fill it to the last block
                while True:
                    os.write(fd, b"\0" * 4096)
            os.close(fd)
        else:
            folder.mkdir(exist_ok=True)
        out = _out(name, folder)
        if COMMANDS[name][1] == "dir":
            out.mkdir(exist_ok=True)  # the folder exists, its files cannot be written
        r = _run(_argv(name, out), fsize=None if real else 8)
        line = _one_line_error(r, name)
        assert r.returncode in (73, 74), r.stderr
        assert ("No space left" in line) if real else ("too large" in line.lower()), line
        kind = COMMANDS[name][1]
        if kind == "file":
            assert not out.exists()
        elif kind == "dir":
            assert not out.exists() or not [p for p in out.iterdir() if p.stat().st_size]
        else:
            _whole(kind, out)
        _no_temp(folder)
