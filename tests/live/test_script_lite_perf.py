"""``pmuscope script`` through its numpy-free path (:func:`pmuscope.profile.lite.script`)
on small user-only recordings of Linux perf, against ``perf script`` on the same file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", "..", "src"))

OPTIONS = [[], ["-G"], ["-F", "comm,tid,ip,sym,dso"], ["-F", "-dso"], ["-F", "+pid"], ["-F", "ip,sym"],
           ["-F", "ip,sym,symoff"], ["-F", "comm,pid,tid,time,period,event"], ["-F", "+pid,-symoff"],
           ["--comm", "python3"], ["--comm", "ls,sh"], ["--time", ","]]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A few processes (sh, two Python runs, ls) sampled in user mode, one the
    numpy-free path takes (a sample in the [vdso] makes it decline: a few tries)."""
    from pmuscope.profile import lite

    perf = shutil.which("perf")
    if perf is None:
        pytest.skip("no perf binary")
    folder = tmp_path_factory.mktemp("scriptlite")
    py = sys.executable
    reasons = []
    for i in range(5):
        path = str(folder / f"procs-{i}.data")
        r = subprocess.run([perf, "record", "-q", "-e", "cpu-clock:u", "-c", "200000", "-o", path, "--", "sh", "-c",
                            f"{py} -c 'sum(range(10**6))'; ls / >/dev/null; {py} -c 'import json' & wait"],
                           capture_output=True, timeout=120)
        if r.returncode != 0 or not os.path.exists(path):
            pytest.skip(f"perf record does not run here: {r.stderr.decode(errors='replace').strip()[-200:]}")
        try:
            lite.script(path)
        except lite.Decline as err:
            reasons.append(str(err))
            continue
        return perf, path
    pytest.fail(f"every recording declined: {reasons}")


@pytest.mark.parametrize("argv", OPTIONS, ids=" ".join)
def test_lite_script_is_perf_script(recording, argv):
    perf, path = recording
    theirs = subprocess.run([perf, "script", *argv, "-i", path], capture_output=True, timeout=120)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ours = subprocess.run([sys.executable, "-m", "pmuscope", "script", *argv, "-i", path], capture_output=True,
                          env=env, timeout=120)
    assert ours.returncode == 0 and ours.stderr == b"", ours.stderr[-300:]
    assert _plt_got_as_perf_61(ours.stdout, theirs.stdout) == theirs.stdout


def _plt_got_as_perf_61(ours: bytes, theirs: bytes) -> bytes:
    """``ours`` with each line that differs from perf's only by naming a PLT stub
    where perf prints ``[unknown]`` given perf's line. A sample that lands in
    ``.plt.got`` (libpython has one) is ``name@plt`` to pmuscope, as objdump and
    perf 6.3 on name it; perf 6.1 leaves those stubs unnamed
    (tests/live/test_symbols_live.py, test_plt_entries_match_objdump)."""
    a, b = ours.split(b"\n"), theirs.split(b"\n")
    if len(a) != len(b):
        return ours
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and b"[unknown]" in y and re.sub(rb"(?<= )\S+@plt(\+0x[0-9a-f]+)?(?= |$)", b"[unknown]", x) == y:
            a[i] = y
    return b"\n".join(a)
