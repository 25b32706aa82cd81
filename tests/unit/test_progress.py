"""Progress lines: on a terminal after the delay, never when piped, cleared at the end."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from pmuscope import progress
from tests.conftest import DATA


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_shown_on_a_terminal_and_cleared(monkeypatch):
    monkeypatch.delenv("PMUSCOPE_PROGRESS", raising=False)
    monkeypatch.setenv("PMUSCOPE_PROGRESS_DELAY", "0")
    out = _Tty()
    with progress.Progress("loading x", 4 << 20, stream=out) as p:
        p.update(2 << 20, force=True)
    text = out.getvalue()
    assert "loading x:  50.0%  2.0 MiB of 4.0 MiB" in text
    assert text.endswith("\r\x1b[K")  # the line is gone afterwards


def test_quiet_when_piped_or_quick(monkeypatch):
    monkeypatch.delenv("PMUSCOPE_PROGRESS", raising=False)
    monkeypatch.setenv("PMUSCOPE_PROGRESS_DELAY", "0")
    piped = io.StringIO()
    with progress.Progress("x", 10, stream=piped) as p:
        p.update(5, force=True)
    assert piped.getvalue() == ""
    monkeypatch.setenv("PMUSCOPE_PROGRESS_DELAY", "60")
    tty = _Tty()
    with progress.Progress("x", 10, stream=tty) as p:
        p.update(5, force=True)
    assert tty.getvalue() == ""


def test_activity_ticks(monkeypatch):
    monkeypatch.setenv("PMUSCOPE_PROGRESS", "1")
    monkeypatch.setenv("PMUSCOPE_PROGRESS_DELAY", "0")
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    with progress.activity("building"):
        time.sleep(0.5)
    assert "building... " in buf.getvalue()


def test_report_loading_progress_only_when_asked():
    f = str(DATA / "perfdata" / "perf-g-small.data")
    cmd = [sys.executable, "-m", "pmuscope", "report", "-i", f, "--stdio"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert "loading" not in quiet.stderr
    env = {**__import__("os").environ, "PMUSCOPE_PROGRESS": "1", "PMUSCOPE_PROGRESS_DELAY": "0"}
    shown = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert "loading perf-g-small.data: 100.0%" in shown.stderr
    assert shown.stdout == quiet.stdout


def test_loading_progress_on_a_real_terminal(tmp_path):
    import os
    import shutil

    import pytest

    if shutil.which("script") is None:
        pytest.skip("util-linux 'script' (a pseudo-terminal) is not installed")
    f = str(DATA / "perfdata" / "perf-g-small.data")
    log = tmp_path / "tty.log"
    env = {k: v for k, v in os.environ.items() if k != "PMUSCOPE_PROGRESS"}
    env["PMUSCOPE_PROGRESS_DELAY"] = "0"
    r = subprocess.run(["script", "-qec", f"{sys.executable} -m pmuscope report --stdio -i {f}", str(log)],
                       capture_output=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0
    screen = log.read_bytes().decode("utf-8", "replace")
    assert "loading perf-g-small.data: 100.0%" in screen and "\r\x1b[K" in screen
    assert "_PyObject_Free" in screen
