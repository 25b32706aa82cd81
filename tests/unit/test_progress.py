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
