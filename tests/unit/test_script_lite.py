"""The numpy-free ``script`` of small files (:func:`pmuscope.profile.lite.script`)
against the numpy path (``PMUSCOPE_SCRIPT_LITE=0``, the reference).

The same files as tests/unit/test_report_lite.py (every perf.data under
tests/data, files written there: real ELF files mapped by several processes
with fork, exec, a renamed thread, an overlapping mapping, a vanished file,
records out of order within a round; random timelines; small recordings of
Linux perf when it runs here) under many option sets: the lite path either
declines or prints the same bytes, on standard output and standard error,
with the same exit code. It must accept the written files and a small
user-only recording (so it is not silently declining everything), decline
what it does not handle, and ``pmuscope script`` must run with numpy
impossible to import.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import warnings

import pytest

from tests.conftest import perfdata_corpus
from tests.unit.test_report_lite import BLOCKED, write_random, write_recording

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", "..", "src"))

OPTION_SETS = [
    [], ["-G"], ["--no-kernel-symbols"], ["-F", "comm,tid,ip,sym"], ["-F", "+pid"], ["-F", "-dso"],
    ["-F", "comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso"], ["-F", "ip,sym,symoff"], ["-F", "ip,dso"],
    ["-F", "ip"], ["-F", "comm,tid"], ["-F", "pid,time"], ["-F", "sym,dso"], ["-F", "+period,-symoff"],
    ["-F", "-cpu,-time,+pid"], ["-F", "event,period,cpu"], ["-F", "tid,pid,ip,symoff,sym"], ["-F", "comm,cpu,ip"],
    ["--comm", "python3"], ["--comm", "bash,worker"], ["--pid", "101"], ["--tid", "102,100"], ["--cpu", "0"],
    ["--time", ","], ["--time", ",0.000004"], ["--time", "0.000004,"], ["-G", "-F", "comm,ip,sym", "--cpu", "1"],
    # refused by the numpy path: the lite path declines, the command prints the same error
    ["-F", "symoff"], ["-F", "ip,symoff"], ["--pid", "x"], ["--cpu", "a-b"],
]


# --- the reference and the lite path ---------------------------------------------------------------------------

def _argv(argv: list[str], path: str) -> list[str]:
    from pmuscope.cli.main import _fields_joined

    return _fields_joined(["script", *argv, "-i", path])


def command(path: str, argv: list[str], capsysbinary) -> tuple:
    from pmuscope.cli.main import main

    # as in a new process: a warning shown before (Python shows each once) is shown again
    warnings._filters_mutated()
    capsysbinary.readouterr()
    rc = main(_argv(argv, path))
    out = capsysbinary.readouterr()
    return rc, out.out, out.err


def reference(path: str, argv: list[str], capsysbinary, monkeypatch) -> tuple:
    monkeypatch.setenv("PMUSCOPE_SCRIPT_LITE", "0")
    try:
        return command(path, argv, capsysbinary)
    finally:
        monkeypatch.delenv("PMUSCOPE_SCRIPT_LITE")


def lite(path: str, argv: list[str]) -> tuple | None:
    """The lite path's output as ``(rc, stdout, stderr)`` (None: it declined);
    errors other than its own decline are raised, not turned into a decline
    as the command does."""
    from pmuscope.cli import script_cmd
    from pmuscope.cli.main import build_parser
    from pmuscope.errors import PmuscopeError
    from pmuscope.profile.script_fields import parse_fields

    args = build_parser("script").parse_args(_argv(argv, path))
    try:
        fields = parse_fields(args.fields)
    except PmuscopeError:
        return None  # run() refuses it before either path
    out = script_cmd._lite_script(args, fields, strict=True)
    return None if out is None else (0, out, b"")


def compare(path: str, capsysbinary, monkeypatch, option_sets=OPTION_SETS) -> list[list[str]]:
    """Asserts lite == reference wherever lite accepts, and the command ==
    reference everywhere; returns the option sets the lite path accepted."""
    accepted = []
    for argv in option_sets:
        ref = reference(path, argv, capsysbinary, monkeypatch)
        got = lite(path, argv)
        if got is not None:
            assert got == ref, f"{path} {argv}"
            accepted.append(argv)
        assert command(path, argv, capsysbinary) == ref, f"{path} {argv} (the command)"
    return accepted


# --- files written here ----------------------------------------------------------------------------------------

def _tracepoint_copy(src: str, dst: str) -> None:
    """``src`` with its event's type made PERF_TYPE_TRACEPOINT (no payloads recorded)."""
    from pmuscope.perfdata.reader import PerfDataFile

    data = bytearray(open(src, "rb").read())
    with PerfDataFile(src) as pf:
        off = pf.header.attrs.offset
    struct.pack_into("<I", data, off, 2)
    with open(dst, "wb") as f:
        f.write(bytes(data))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("litescript")
    out = {}
    for extra in ("", "kernel", "anon", "hugetlb", "callchain"):
        path = str(folder / f"written{'-' + extra if extra else ''}.data")
        write_recording(path, extra=extra)
        out[extra] = path
    out["tracepoint"] = str(folder / "written-tracepoint.data")
    _tracepoint_copy(out[""], out["tracepoint"])
    return out


def test_written_file_accepted_and_identical(written, capsysbinary, monkeypatch):
    accepted = compare(written[""], capsysbinary, monkeypatch)
    refused = (["-F", "symoff"], ["-F", "ip,symoff"], ["--pid", "x"], ["--cpu", "a-b"])
    assert accepted == [o for o in OPTION_SETS if o not in refused]
    for argv in refused:
        rc, out, err = command(written[""], argv, capsysbinary)
        assert rc != 0 and out == b"" and err, argv


def test_written_file_shows_what_was_written(written):
    """Not only equal to the numpy path: the content is the one written."""
    _, out, _ = lite(written[""], [])
    lines = out.decode().splitlines()
    assert len(lines) > 12
    assert lines[0].startswith("            bash   100 [000]     0.000002:       2000 cpu-clock:u: ")
    assert any(ln.startswith("          worker   102 ") for ln in lines)  # the name at the sample's time
    assert sum(ln.startswith("         python3   102 ") for ln in lines) > 0  # ... before the rename
    assert any(ln.endswith(" [unknown] (/nonexistent/libgone.so)") for ln in lines)
    assert any(ln.endswith(" [unknown] (/nonexistent/lib del.so (deleted))") for ln in lines)
    assert any("+0x3 (" in ln for ln in lines)  # symbols with their offsets
    _, out, _ = lite(written[""], ["-F", "comm,tid"])
    assert out.decode().splitlines()[0] == "            bash   100 "  # perf ends every field with a space
    times = [float(ln.split()[3][:-1]) for ln in lines]
    assert times == sorted(times)


@pytest.mark.parametrize("extra", ["kernel", "anon", "hugetlb", "callchain", "tracepoint"])
def test_declines_outside_its_case(written, extra, capsysbinary, monkeypatch):
    assert compare(written[extra], capsysbinary, monkeypatch, [[], ["-G"], ["-F", "comm,tid,ip,sym"]]) == []


@pytest.mark.parametrize("path", perfdata_corpus(), ids=os.path.basename)
def test_corpus_declined_or_identical(path, capsysbinary, monkeypatch):
    from tests.unit.test_report_lite import declined_by_file

    if declined_by_file(path):
        # refused before any option is looked at: every option set takes the numpy path (a few show it)
        assert compare(path, capsysbinary, monkeypatch, OPTION_SETS[:3]) == []
    else:
        compare(path, capsysbinary, monkeypatch)


def test_options_outside_its_case_decline(written):
    for argv in (["--ns"], ["--reltime"], ["--deltatime"], ["--max-stack", "3"], ["--header"], ["--header-only"],
                 ["--itrace", "i"], ["-F", "comm,trace"], ["-F", "+trace"]):
        assert lite(written[""], argv) is None, argv
    # cpu not recorded: the numpy path refuses -F cpu
    assert lite(written[""], ["-F", "comm,ip"]) is not None


@pytest.mark.parametrize("knob", ["PMUSCOPE_NATIVE_SCRIPT", "PMUSCOPE_SCRIPT_STREAM", "PMUSCOPE_SCRIPT_ROUND_SAMPLES"])
def test_numpy_path_switches_take_the_numpy_path(written, knob, monkeypatch):
    assert lite(written[""], []) is not None
    monkeypatch.setenv(knob, "0")
    assert lite(written[""], []) is None


def test_switch_forces_the_numpy_path(written, capsysbinary, monkeypatch):
    from pmuscope.cli.main import main
    from pmuscope.profile import lite as lite_mod

    calls = []
    real = lite_mod.script

    def counted(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(lite_mod, "script", counted)
    monkeypatch.setenv("PMUSCOPE_SCRIPT_LITE", "0")
    assert main(["script", "-i", written[""]]) == 0
    ref = capsysbinary.readouterr().out
    assert calls == [] and b"cpu-clock:u" in ref
    monkeypatch.delenv("PMUSCOPE_SCRIPT_LITE")
    monkeypatch.setenv("PMUSCOPE_REPORT_LITE", "0")  # report's switch: script's lite path unchanged
    assert main(["script", "-i", written[""]]) == 0
    assert len(calls) == 1 and capsysbinary.readouterr().out == ref


# --- numpy impossible to import --------------------------------------------------------------------------------

def _blocked(argv: list[str], **env_extra):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    return subprocess.run([sys.executable, "-c", BLOCKED, *argv], capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("argv", [[], ["-G"], ["-F", "comm,pid,tid,time,ip,sym,dso"], ["--comm", "worker"]])
def test_script_runs_without_numpy(written, argv, capsysbinary, monkeypatch):
    r = _blocked(_argv(argv, written[""]))
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().strip().splitlines()[-1] == "HEAVY -"  # nor dataclasses
    assert (0, r.stdout, b"") == reference(written[""], argv, capsysbinary, monkeypatch)


def test_numpy_path_is_the_one_blocked(written):
    r = _blocked(["script", "-i", written[""]], PMUSCOPE_SCRIPT_LITE="0")
    assert r.returncode != 0 and b"numpy is blocked" in r.stderr
    r = _blocked(["script", "-i", written["kernel"]])
    assert r.returncode != 0 and b"numpy is blocked" in r.stderr


# --- recorded with Linux perf ------------------------------------------------------------------------------------

def _perf_record(path: str, cmd: list[str], period: str = "200000") -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("perf"), "record", "-q", "-e", "cpu-clock:u", "-c", period, "-o", path,
                           "--", *cmd], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    if shutil.which("perf") is None:
        pytest.skip("no perf binary")
    folder = tmp_path_factory.mktemp("rec")
    out = {}
    py = sys.executable
    for name, cmd in (("tiny-user", [py, "-c", "sum(range(2 * 10**6))"]),
                      ("procs", ["sh", "-c", f"{py} -c 'sum(range(10**6))'; ls / >/dev/null; "
                                             f"{py} -c 'import json' & wait"])):
        path = str(folder / f"{name}.data")
        r = _perf_record(path, cmd)
        if r.returncode != 0 or not os.path.exists(path):
            pytest.skip(f"perf record does not run here: {r.stderr.decode(errors='replace').strip()[-200:]}")
        out[name] = path
    return out


def test_recorded_files_declined_or_identical(recorded, capsysbinary, monkeypatch):
    for path in recorded.values():
        compare(path, capsysbinary, monkeypatch)


def test_tiny_user_recording_accepted(tmp_path, capsysbinary, monkeypatch):
    """The benchmark's case (benchmarks/bench_startup.py: ~10-30 user-only
    samples of a short Python run) is taken by the lite path (a [vdso]
    sample makes it decline, rightly: a few recordings are tried)."""
    from pmuscope.profile import lite as lite_mod

    if shutil.which("perf") is None:
        pytest.skip("no perf binary")
    reasons = []
    for i in range(6):
        path = str(tmp_path / f"tiny-{i}.data")
        r = _perf_record(path, [sys.executable, "-c", "sum(range(2 * 10**6))"], "2000000")
        if r.returncode != 0:
            pytest.skip(f"perf record does not run here: {r.stderr.decode(errors='replace').strip()[-200:]}")
        try:
            lite_mod.script(path)
        except lite_mod.Decline as err:
            reasons.append(str(err))
            continue
        for argv in ([], ["-G"], ["-F", "+pid,-cpu"]):
            got = lite(path, argv)
            assert got is not None, argv
            assert got == reference(path, argv, capsysbinary, monkeypatch)
        return
    pytest.fail(f"every recording declined: {reasons}")


# --- random timelines ------------------------------------------------------------------------------------------

RANDOM_OPTIONS = [[], ["-F", "comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso"], ["-F", "ip,sym"],
                  ["-F", "-symoff,+pid"], ["--cpu", "1,3"], ["--comm", "worker,a-long-thread-name"],
                  ["--pid", "300,302"]]


def test_random_timelines(tmp_path, capsysbinary, monkeypatch):
    accepted = 0
    for seed in range(16):
        path = str(tmp_path / f"random-{seed}.data")
        write_random(path, seed)
        accepted += len(compare(path, capsysbinary, monkeypatch, RANDOM_OPTIONS))
    # script has no table whose rows must be told apart: all but a few are taken
    assert accepted >= 16 * len(RANDOM_OPTIONS) * 3 // 4, accepted


# --- damaged copies ----------------------------------------------------------------------------------------------

def test_damaged_files_print_as_the_numpy_path(written, tmp_path):
    """A damaged copy of a file the lite path takes: the same output, errors
    and warnings as with the numpy path alone (a process each: Python shows
    a warning once per process)."""
    from pmuscope.perfdata.reader import PerfDataFile

    data = bytearray(open(written[""], "rb").read())
    with PerfDataFile(written[""]) as pf:
        start, size = pf.header.data.offset, pf.header.data.size
    pos, n = start, 0
    while n < 12:
        pos += struct.unpack_from("<IHH", data, pos)[2]
        n += 1
    variants = {"truncated": data[:start + size // 2], "record-size": bytearray(data),
                "header": bytearray(data), "sample-type": bytearray(data), "feature": bytearray(data),
                "comm-size": bytearray(data)}
    struct.pack_into("<H", variants["record-size"], pos + 6, 0xFFF8)
    struct.pack_into("<Q", variants["header"], 48, size + 4096)  # data section past the feature table
    struct.pack_into("<I", variants["sample-type"], pos, 9)  # a side-band record read as a sample
    struct.pack_into("<Q", variants["feature"], start + size + 8, 1 << 40)  # a feature section past the end
    struct.pack_into("<H", variants["comm-size"], start + 6, 12)  # the first record (a COMM) cut short
    for name, blob in variants.items():
        path = tmp_path / f"{name}.data"
        path.write_bytes(bytes(blob))
        outs = []
        for argv in ([], ["-F", "comm,tid,ip,sym"]):
            for switch in ("1", "0"):
                env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
                           PMUSCOPE_SCRIPT_LITE=switch)
                r = subprocess.run([sys.executable, "-m", "pmuscope", "script", *argv, "-i", str(path)],
                                   capture_output=True, env=env, timeout=120)
                outs.append((r.returncode, r.stdout, r.stderr))
            assert outs[-2] == outs[-1], (name, argv)
        if name == "feature":
            # the skipped EVENT_DESC section held the event's name: perf's name of the attr instead
            assert outs[0][0] == 0 and outs[0][2].count(b"warning") == 1 and b" cpu-clock: " in outs[0][1]
