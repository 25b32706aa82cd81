"""observe: a command that exits at once is still observed (attached before
its exec, enabled by the kernel at exec as perf stat does); --duration is
seconds even when the asked rate cannot be kept; every bound is one line."""

from __future__ import annotations

import time

import pytest

from pmuscope.cli.main import main
from pmuscope.observe.observer import Observer, native_available


def test_observe_true_runs(capsys):
    rc = main(["observe", "--json", "--", "true"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert '"samples"' in out and "does not exist" not in err


@pytest.mark.parametrize("loop", ["python"] + (["native"] if native_available() else []))
def test_duration_is_seconds_when_the_rate_cannot_be_kept(loop):
    t = time.monotonic()
    r = Observer("task-clock", cpu=0, rate_hz=1_000_000, duration=0.5, loop=loop).run()
    took = time.monotonic() - t
    assert took < 1.5, took  # not rate * duration samples at whatever rate was reached
    assert 0 < r.dte.taken + 1 <= 500_001


@pytest.mark.parametrize("argv, words", [
    (["--rate", "1e12", "-C", "0"], "above 1,000,000"),
    (["--rate", "1000000", "--duration", "100000", "-C", "0"], "GiB"),
    (["--observer-cpu", "99", "-C", "0"], "not a CPU this process may run on"),
    (["--tolerance", "-1", "-C", "0"], "--tolerance"),
    (["--timeline", "t.csv", "-C", "0"], "--timeline needs --switches"),
    (["--duration", "inf", "-C", "0"], "--duration"),
])
def test_bounds_are_one_line(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["observe", *argv])
    err = capsys.readouterr().err
    assert rc != 0 and words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t.csv").exists()
