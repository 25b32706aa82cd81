"""Shared test helpers.

- ``unit`` tests (tests/unit) need no kernel support; ``live`` tests
  (tests/live) open real perf events and may run the real ``perf`` binary.
- A test that needs what this machine lacks skips with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What pmuscope keeps across runs (the parsed core kernel table, ELF symbol
# tables) goes to a directory of this test session, not the user's
# ~/.cache/pmuscope: set before any test runs, so the commands tests start
# inherit it too. A test of the cache itself sets its own; a PMUSCOPE_CACHE_DIR
# given to the session is kept (empty: the suite runs with nothing kept).
_SESSION_CACHE = None
if "PMUSCOPE_CACHE_DIR" not in os.environ:
    import tempfile

    _SESSION_CACHE = tempfile.mkdtemp(prefix="pmuscope-test-cache-")
    os.environ["PMUSCOPE_CACHE_DIR"] = _SESSION_CACHE


def pytest_unconfigure(config):
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)
DATA = ROOT / "tests" / "data"


def perfdata_corpus() -> list[str]:
    """Every perf.data under tests/data (file or pipe mode, by its magic), sorted:
    the files the readers' native and reference paths are compared on."""
    out = []
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.stat().st_size > 64:
            with open(p, "rb") as f:
                if f.read(8) == b"PERFILE2":
                    out.append(str(p))
    return out


#: real captures from other projects, kept in the repository with their licenses
#: (tests/data/fixtures/README.md says where each came from)
SHARED_FIXTURES = Path(os.environ.get("PMUSCOPE_SHARED_FIXTURES", DATA / "fixtures"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.fspath)
        if f"{os.sep}live{os.sep}" in path:
            item.add_marker(pytest.mark.live)


def event_opens(type_: int, config: int, **fields) -> str | None:
    """None when the event opens here, else the reason it does not."""
    from pmuscope.kernel import PerfEventFd, perf_event_attr
    from pmuscope.errors import PmuscopeError

    try:
        PerfEventFd(perf_event_attr(type=type_, config=config, **fields), pid=0, cpu=-1).close()
        return None
    except PmuscopeError as err:
        return str(err)


_HW_REASON: list = []


def hardware_pmu_reason() -> str | None:
    """None when hardware events (cycles) open here, else why not."""
    if not _HW_REASON:
        _HW_REASON.append(event_opens(0, 0, exclude_kernel=1, exclude_hv=1))
    return _HW_REASON[0]


requires_pmu = pytest.mark.skipif(
    "hardware_pmu_reason() is not None", reason="needs a hardware PMU (cycles does not open here)"
)


def requires_hardware_pmu():
    reason = hardware_pmu_reason()
    if reason is not None:
        pytest.skip(f"needs a hardware PMU: {reason}")


@pytest.fixture
def jit_maps_in(monkeypatch):
    """``jit_maps_in(folder)``: ``perf-PID.map`` files (JIT symbols, which perf
    and pmuscope look for in /tmp) are looked up in ``folder`` for the rest of
    the test, so a test's own maps are found and nobody else's."""
    from pmuscope.symbols.perfmap import PerfMap

    for_pid = PerfMap.for_pid.__func__

    def point(folder) -> None:
        monkeypatch.setattr(PerfMap, "for_pid",
                            classmethod(lambda cls, pid, tmp_dir="/tmp": for_pid(cls, pid, str(folder))))

    return point


@pytest.fixture
def perf_bin() -> str:
    path = shutil.which("perf")
    if not path:
        pytest.skip("Linux perf is not installed (apt-get install linux-perf)")
    try:
        subprocess.run([path, "--version"], check=True, capture_output=True, timeout=30)
    except Exception as err:  # perf wrapper without a matching binary
        pytest.skip(f"Linux perf does not run here: {err}")
    return path


@pytest.fixture
def shared_fixtures() -> Path:
    # the captures are part of the repository: a missing folder is a broken
    # checkout, not a reason to skip
    assert SHARED_FIXTURES.is_dir(), f"real captures missing: {SHARED_FIXTURES}"
    return SHARED_FIXTURES


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(params=["native", "python"])
def read_path(request, monkeypatch) -> str:
    """Run a test over both ``Counter.read`` paths: the native helper's one C call
    and the pure-Python reader (the reference, and the fallback without a C
    compiler). Counters opened during the test use it, and so do ``pmuscope``
    subprocesses (``PMUSCOPE_NATIVE_READ``)."""
    from pmuscope.counting import counter

    return _select_path(request, monkeypatch, counter, "NATIVE_READ", counter.native_read_available())


@pytest.fixture(params=["native", "numpy"])
def decode_path(request, monkeypatch) -> str:
    """Run a test over both record decoders: the C walker and sample decoder
    (``pmuscope.records.native``) and the numpy code (the reference, and the
    only path without a C compiler). ``pmuscope`` subprocesses follow through
    ``PMUSCOPE_NATIVE_DECODE``."""
    from pmuscope.records import native

    return _select_path(request, monkeypatch, native, "NATIVE_DECODE", native.available())


def _select_path(request, monkeypatch, module, flag: str, built: bool) -> str:
    """The parametrized path (``"native"`` or the reference) set in ``module.flag``
    for this process and in ``PMUSCOPE_<flag>`` for ``pmuscope`` subprocesses;
    the native one skipped where the helper was not built."""
    on = request.param == "native"
    if on and not built:
        pytest.skip("the native helper is not built here (no C compiler at install time)")
    monkeypatch.setattr(module, flag, on)
    monkeypatch.setenv(f"PMUSCOPE_{flag}", "1" if on else "0")
    return request.param


def stop_process(proc: subprocess.Popen) -> str:
    """Terminate (then kill) ``proc``; returns what is left of its stderr and
    closes its pipes (servers the live tests start: pmuscope serve, Prometheus)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    err = ""
    if proc.stderr is not None:
        err = proc.stderr.read() or ""
        proc.stderr.close()
    if proc.stdout is not None:
        proc.stdout.close()
    return err if isinstance(err, str) else err.decode(errors="replace")


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def run_python(code: str, *argv: str, timeout: float = 60) -> list[str]:
    """Run ``code`` in a fresh interpreter (this one's executable, this environment)
    and return the words it printed; a failure shows its standard error. For what
    only a new process shows: what an import loads, the first use of something."""
    import sys

    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def nobody_python() -> tuple[list[str], dict[str, str]]:
    """A command prefix and environment that run ``python3`` as uid 65534 with this
    checkout of pmuscope (and numpy) importable: copies of both in a world-readable
    directory, run by the system interpreter, since the test interpreter may live in a
    home directory that user cannot enter. Skips (naming why) without root or setpriv."""
    import sys
    import sysconfig
    import tempfile

    import numpy

    import pmuscope

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a command as uid 65534")
    system_python = "/usr/bin/python3"
    if not os.access(system_python, os.X_OK):
        pytest.skip(f"{system_python} is missing: no interpreter uid 65534 can run")
    site = Path(tempfile.mkdtemp(prefix="pmuscope-nobody-"))  # not under pytest's 0700 base dir
    shutil.copytree(Path(pmuscope.__file__).resolve().parent, site / "pmuscope",
                    ignore=shutil.ignore_patterns("__pycache__"))
    version = subprocess.run([system_python, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version == str(sys.version_info[:2]) and sysconfig.get_config_var("SOABI"):
        # same minor version: numpy's extension modules are ABI-compatible, copy them too
        numpy_dir = Path(numpy.__file__).resolve().parent
        shutil.copytree(numpy_dir, site / "numpy", ignore=shutil.ignore_patterns("__pycache__", "tests"))
        libs = numpy_dir.parent / "numpy.libs"
        if libs.is_dir():
            shutil.copytree(libs, site / "numpy.libs")
    for p in [site, *site.rglob("*")]:
        p.chmod(0o755 if p.is_dir() or os.access(p, os.X_OK) else 0o644)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    probe = subprocess.run(NOBODY + [system_python, "-c", "import numpy, pmuscope.cli.main"],
                           env=env, cwd=site, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"uid 65534 cannot import pmuscope with {system_python} "
                    f"(python {version} here, {sys.version_info[:2]} for the tests): {probe.stderr.strip()[-200:]}")
    return NOBODY + [system_python], env


_SESSION_START = time.time()


def pytest_sessionfinish(session, exitstatus):
    """Remove the /tmp/perf-PID.map files the suite's recorded Python processes wrote (maps outlive
    their process on purpose, for reports; a test run should not leave hundreds behind, and a later
    process with a reused pid would find a stale one)."""
    import glob

    for path in glob.glob("/tmp/perf-*.map"):
        try:
            st = os.lstat(path)
            if st.st_mtime >= _SESSION_START and st.st_uid == os.geteuid():
                os.unlink(path)
        except OSError:
            pass
