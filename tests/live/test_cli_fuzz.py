"""Every numeric option of every command, driven with bad values (negative,
zero, huge, not a number, NaN) and missing input files: never a traceback;
an invalid value is a non-zero exit with one line on stderr.

The options are found in the parsers themselves, so a new option is fuzzed
without touching this file. Each command gets base arguments that make the
rest of its run short (a ``true`` workload, 50 ms durations)."""

from __future__ import annotations

import argparse
import math
import signal

import pytest

from pmuscope.cli.main import build_parser, main
from tests.conftest import DATA, SHARED_FIXTURES

PERF_DATA = str(SHARED_FIXTURES / "linux-perf-data" / "sleep.data")
SPE_RAW = str(DATA / "spe" / "spe-b1-ts0.data")


def _base(tmp) -> dict[str, list[str]]:
    """Arguments after the fuzzed option: a quick, otherwise valid run."""
    return {
        "list": ["sw"],
        "attr": ["-e", "task-clock"],
        "doctor": [],
        "topology": [],
        "stat": ["-e", "task-clock", "-o", f"{tmp}/s.txt", "--", "true"],
        "monitor": ["-e", "task-clock", "-a", "-q", "-o", f"{tmp}/m.csv", "-I", "10", "--duration", "0.05"],
        "observe": ["--duration", "0.05", "-C", "0"],
        "spe": ["--raw", SPE_RAW],
        "record": ["-e", "cpu-clock", "-q", "-o", f"{tmp}/r.data", "--", "true"],
        "report": ["-i", PERF_DATA],
        "script": ["-i", PERF_DATA],
        "profile": ["-o", f"{tmp}/p", "--", "true"],
        "serve": ["--once", "--interval", "0.05"],
        "numatop": ["--once", "--json", "-d", "0.05"],
        "export": ["-i", PERF_DATA, "-o", f"{tmp}/x.pb.gz"],
        "c2c": ["-i", PERF_DATA],
        "mem report": ["-i", PERF_DATA],
        "mem record": ["-o", f"{tmp}/mem.data", "--", "true"],
    }


def _numeric_options() -> list[tuple[str, str]]:
    """(command, option) for every option whose value is a number."""
    out = []
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        parsers = [(name, p)]
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                parsers += [(f"{name} {n}", sp) for n, sp in a.choices.items()]
        for cmd, sp in parsers:
            for a in sp._actions:
                if not a.option_strings or a.nargs == 0 or a.help == argparse.SUPPRESS:
                    continue
                numeric = a.type in (int, float) or getattr(a.type, "__name__", "") == "<lambda>"
                numeric = numeric or (a.metavar or "").upper() in ("PID[,PID]", "TID[,TID]", "HZ", "PID", "N", "MS")
                if numeric:
                    out.append((cmd, max(a.option_strings, key=len)))
    return out


OPTIONS = _numeric_options()
TIMEISH = ("duration", "interval", "timeout", "delay", "time", "rate", "flush", "count")
BAD = ["-1", "abc", "nan"]


class _Hang(Exception):
    pass


def _run(argv: list[str], capsys) -> tuple[int, str]:
    def alarm(signum, frame):
        raise _Hang(" ".join(argv))

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(30)
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, capsys.readouterr().err


def _argv(cmd: str, opt: str, value: str, tmp) -> list[str]:
    base = _base(tmp).get(cmd, [])
    # the fuzzed option replaces the base's own value for it
    base = list(base)
    if opt in base:
        i = base.index(opt)
        del base[i:i + 2]
    if "--" in base:
        i = base.index("--")
        return [*cmd.split(), *base[:i], f"{opt}={value}", *base[i:]]
    return [*cmd.split(), *base, f"{opt}={value}"]


def _one_line(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.strip() and "warning:" not in ln and "note:" not in ln]


def test_every_command_has_fuzzed_options():
    cmds = {c for c, _ in OPTIONS}
    assert {"stat", "record", "monitor", "observe", "serve", "numatop", "export"} <= cmds, cmds


@pytest.mark.parametrize("cmd, opt", OPTIONS, ids=[f"{c}:{o}" for c, o in OPTIONS])
def test_bad_numbers_are_one_line_errors(cmd, opt, tmp_path, capsys):
    values = BAD + (["0"] if True else [])
    if not any(t in opt for t in TIMEISH):
        values.append("99999999999999999999")
    for value in values:
        rc, err = _run(_argv(cmd, opt, value, tmp_path), capsys)
        assert "Traceback" not in err, (cmd, opt, value, err)
        if value in BAD:
            assert rc != 0, (cmd, opt, value, err)
        if rc != 0:
            lines = _one_line(err)
            assert len(lines) >= 1 and lines[0].startswith("pmuscope"), (cmd, opt, value, err)
            # one line, except the caret display of event syntax errors and multi-line diagnoses
            assert len(lines) == 1 or "syntax error" in err or "\n  " in err, (cmd, opt, value, err)


@pytest.mark.parametrize("cmd", ["report", "script", "export", "c2c", "mem report", "spe"])
def test_missing_input_file(cmd, tmp_path, capsys):
    argv = [*cmd.split(), "-i", str(tmp_path / "missing.data")]
    if cmd == "export":
        argv += ["-o", str(tmp_path / "o")]
    rc, err = _run(argv, capsys)
    assert rc != 0 and "Traceback" not in err
    lines = _one_line(err)
    assert len(lines) == 1 and "missing.data" in lines[0], err


def test_nan_and_inf_are_not_numbers_of_seconds(tmp_path, capsys):
    for v in ("nan", "inf", "-inf"):
        rc, err = _run(["monitor", "-e", "task-clock", "-a", "-q", "-o", str(tmp_path / "m.csv"), "-I", "10",
                        "--duration", v], capsys)
        assert rc != 0 and len(_one_line(err)) == 1, (v, err)
    assert math.isnan(float("nan"))
