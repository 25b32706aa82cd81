"""What the CLI does before a command runs: numpy without OpenBLAS's thread pool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmuscope.cli import main as cli_main
from tests.conftest import run_python

PROBE = ("import os, sys\n"
         "from pmuscope.cli.main import import_numpy\n"
         "import_numpy()\n"
         "print('numpy' in sys.modules, len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))\n")


def _probe(**env_extra):
    env = {k: v for k, v in os.environ.items() if k not in cli_main._BLAS_THREADS}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_numpy_without_blas_threads_and_nothing_left_in_the_environment():
    loaded, threads, var = _probe()
    # one thread: OpenBLAS started no pool; the variable is gone, so workloads pmuscope starts do not inherit it
    assert (loaded, threads, var) == ("True", "1", "None")


def test_a_pool_size_the_user_chose_is_kept():
    _loaded, _threads, var = _probe(OPENBLAS_NUM_THREADS="2")
    assert var == "2"


GC_PROBE = ("import gc, sys\n"
            "from pmuscope import _lazy\n"
            "runs = []\n"
            "gc.callbacks.append(lambda phase, info: phase == 'start' and runs.append(1))\n"
            "DISABLE\n"
            "_lazy.numpy()\n"
            "print('numpy' in sys.modules, len(runs), gc.isenabled())\n")


@pytest.mark.parametrize("disabled", [False, True], ids=["gc-on", "gc-off-before"])
def test_numpy_loads_without_garbage_collections_and_leaves_the_collector_as_it_was(disabled):
    code = GC_PROBE.replace("DISABLE", "gc.disable()" if disabled else "pass")
    assert run_python(code) == ["True", "0", str(not disabled)]


FREEZE_PROBE = ("import gc, sys\n"
                "from pmuscope import _lazy\n"
                "FLAG\n"
                "_lazy.numpy()\n"
                "print(gc.get_freeze_count() > 1000, gc.isenabled())\n")


@pytest.mark.parametrize("cli", [True, False], ids=["command-line", "library"])
def test_the_command_line_freezes_what_numpy_left_and_a_library_user_keeps_his_collector(cli):
    """The CLI (its own process) moves the objects alive once numpy is in out of the
    collector's view; imported as a library, pmuscope leaves the host's objects alone."""
    code = FREEZE_PROBE.replace("FLAG", "_lazy.FREEZE_AFTER_IMPORT = True" if cli else "pass")
    assert run_python(code) == [str(cli), "True"]


def test_cli_main_sets_the_freeze(monkeypatch, capsys):
    from pmuscope import _lazy

    monkeypatch.setattr(_lazy, "FREEZE_AFTER_IMPORT", False)
    assert cli_main.main(["report", "-i", "/nonexistent/x.data"]) != 0
    capsys.readouterr()
    assert _lazy.FREEZE_AFTER_IMPORT is True


def test_file_reading_commands_ask_for_numpy_first():
    # report imports numpy itself, only when its numpy-free path for small files
    # declines (tests/unit/test_report_lite.py)
    parser = cli_main.build_parser("report")
    assert parser.parse_args(["report", "-i", "x.data"])._numpy is False
    parser = cli_main.build_parser("export")
    assert parser.parse_args(["export", "-i", "x.data"])._numpy is True
    parser = cli_main.build_parser("list")
    assert parser.parse_args(["list"])._numpy is False


# -- what each command imports ---------------------------------------------------------------------------------

IMPORTS_PROBE = ("import os, sys\n"
                 "from pmuscope.cli.main import main\n"
                 "try:\n"
                 "    rc = main(sys.argv[1:])\n"
                 "except SystemExit as e:\n"
                 "    rc = e.code\n"
                 "sys.stdout.flush()\n"
                 "roots = os.environ['PROBE_ROOTS'].split()\n"
                 "heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots)\n"
                 "print('RC', rc, 'HEAVY', ' '.join(heavy) or '-', file=sys.stderr)\n")


def _imports_of(*argv: str, roots: tuple[str, ...] = ("numpy", "dataclasses"),
                no_site: bool = False) -> tuple[int, list[str], str, str]:
    """Run ``pmuscope ARGV`` in a fresh interpreter: ``(exit status, the modules under
    ``roots`` it loaded, stdout, stderr)``. ``no_site``: without ``site`` (``-S``: an
    interpreter's .pth files may import modules of their own), pmuscope and numpy
    found through PYTHONPATH."""
    env = dict(os.environ, PROBE_ROOTS=" ".join(roots))
    cmd = [sys.executable]
    if no_site:
        import numpy

        import pmuscope

        env["PYTHONPATH"] = os.pathsep.join(str(Path(m.__file__).parents[1]) for m in (pmuscope, numpy))
        cmd.append("-S")
    out = subprocess.run([*cmd, "-c", IMPORTS_PROBE, *argv], capture_output=True, text=True, timeout=60, env=env)
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("RC "), out.stderr
    _, rc, _, heavy = last.split(" ", 3)
    return int(rc), ([] if heavy == "-" else heavy.split()), out.stdout, out.stderr


def test_stat_of_a_command_imports_neither_numpy_nor_dataclasses():
    rc, heavy, _out, err = _imports_of("stat", "-x,", "-e", "task-clock", "--", "true")
    assert heavy == []
    if rc == 0:  # where perf_event_open is allowed: the count itself came out
        assert ",msec,task-clock," in err


@pytest.mark.parametrize("argv", [["script", "-G"], ["script"], ["report", "--stdio"]])
def test_reading_a_recording_imports_neither_threading_nor_heapq(argv):
    """`script` and `report` of a file: the DSO cache's locks come from
    ``_thread``, a progress line that is not drawn starts no thread, ``heapq``
    loads where records are put in time order by the reader that needs it
    (0.2-0.5 ms each of a start-up that is most of a small file's run). Run
    without ``site``: this machine's .pth files import threading. Reverting
    either change fails this test."""
    path = str(Path(__file__).parents[1] / "data" / "perfdata" / "perf-g-small.data")
    # --no-kernel-symbols: reading kallsyms (when its cache is cold) is done in a thread of its own
    rc, loaded, out, err = _imports_of(*argv, "--no-kernel-symbols", "-i", path, roots=("threading", "heapq"),
                                       no_site=True)
    assert rc == 0, err
    assert out.count("\n") > 10  # it printed the recording
    assert loaded == [], err


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["stat", "--help"], ["report", "--help"],
                                  ["attr", "task-clock"], ["list", "sw"]])
def test_commands_that_need_no_arrays_do_not_import_numpy(argv):
    rc, heavy, out, _err = _imports_of(*argv)
    assert "numpy" not in heavy
    assert rc == 0 and out.strip()  # and they printed what they are for


def test_every_subcommand_is_listed_by_help():
    # a literal % in a command's one-line help (diff's "95% CI") made argparse's help formatting fail
    rc, _heavy, out, _err = _imports_of("--help")
    assert rc == 0
    assert "95% CI" in out and all(name in out for name in cli_main.COMMANDS)


def test_counts_of_many_read_units_still_aggregate_with_numpy():
    # the plain-Python aggregation covers a few read units; more take the numpy path, imported then
    probe = ("import sys\n"
             "from pmuscope.counting.results import Counts, Layout\n"
             "import struct\n"
             "n = 20\n"
             "lay = Layout(names=('a',), units=('',), scales=(1.0,), supported=(True,), errors=(None,),\n"
             "             cpus=tuple(range(n)), threads=(-1,), units_plan=tuple((False, (0,), c, 0) for c in range(n)))\n"
             "raws = [struct.pack('=4Q', 10 * c, 100, 50 if c % 2 else 100, c) for c in range(n)]\n"
             "big = Counts(lay, raws, 1)['a']\n"
                          "print('numpy' in sys.modules, big.value, big.time_enabled, big.time_running, big.scaled)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded, value, ena, run, scaled = out.stdout.split()
    n = 20
    assert loaded == "True"
    assert int(value) == sum(10 * c for c in range(n)) and int(ena) == 100 * n
    assert int(run) == sum(50 if c % 2 else 100 for c in range(n))
    assert float(scaled) == sum(10 * c * (2 if c % 2 else 1) for c in range(n))


# -- the end of a run: no interpreter teardown, the same bytes ----------------------------------------------------

DATA = Path(__file__).resolve().parents[1] / "data"
FILES = sorted(p for p in DATA.rglob("*.data") if p.stat().st_size > 1024 and "memory" not in p.parts)
IN_PROCESS = ("import io, sys\n"
              "from pmuscope.cli.main import main\n"
              "rc = main(sys.argv[1:])\n"
              "sys.stdout.flush()\n"
              "sys.exit(rc)\n")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(cli_main.__file__).resolve().parents[2]),
                                                    env.get("PYTHONPATH")] if p)
    return env


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("argv", [["report", "--stdio"], ["report", "--json"], ["script"],
                                  ["export", "-f", "pprof", "-o", "-"], ["export", "-f", "folded", "-o", "-"]],
                         ids=" ".join)
def test_the_entry_point_writes_the_same_bytes_as_main(path, argv):
    """``python -m pmuscope`` ends report/script/export with os._exit after flushing:
    its output must be byte for byte what main() writes in a process that
    exits the usual way."""
    cmd = [*argv, "--no-kernel-symbols", "-i", str(path)]
    fast = subprocess.run([sys.executable, "-m", "pmuscope", *cmd], capture_output=True, timeout=120, env=_env())
    slow = subprocess.run([sys.executable, "-c", IN_PROCESS, *cmd], capture_output=True, timeout=120, env=_env())
    assert fast.returncode == slow.returncode
    assert fast.stdout == slow.stdout
    assert fast.stderr == slow.stderr
    if fast.returncode == 0:
        assert len(fast.stdout) > (100 if argv[0] != "export" else 50)  # a short folded file is ~70 bytes


def test_the_entry_point_keeps_the_commands_exit_status():
    env = _env()
    ok = subprocess.run([sys.executable, "-m", "pmuscope", "stat", "-x,", "-e", "task-clock", "--", "true"],
                        capture_output=True, text=True, timeout=60, env=env)
    if ok.returncode != 0:
        pytest.skip(f"perf_event_open not allowed here: {ok.stderr.strip()[-200:]}")
    assert ",msec,task-clock," in ok.stderr
    failed = subprocess.run([sys.executable, "-m", "pmuscope", "stat", "-x,", "-e", "task-clock", "--", "false"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert failed.returncode == 1 and ",msec,task-clock," in failed.stderr


EXIT_PROBE = ("import atexit, sys, threading, time\n"
              "from pmuscope.cli import main as m\n"
              "atexit.register(lambda: print('exit handler ran', flush=True))\n"
              "if sys.argv[1] == 'thread':\n"
              "    def late():\n"
              "        time.sleep(0.3)\n"
              "        print('thread finished', flush=True)\n"
              "    threading.Thread(target=late).start()\n"
              "sys.stdout.write('buffered output')  # no newline, no flush: still in the buffer\n"
              "m._exit_now(3)\n"
              "print(' (the interpreter exits the usual way)')\n"
              "sys.exit(3)\n")


@pytest.mark.parametrize("case", ["plain", "thread"])
def test_exit_now_flushes_runs_exit_handlers_and_waits_for_threads(case):
    out = subprocess.run([sys.executable, "-c", EXIT_PROBE, case], capture_output=True, text=True, timeout=60,
                         env=_env())
    assert out.returncode == 3
    assert out.stdout.startswith("buffered output")
    assert "exit handler ran" in out.stdout
    if case == "thread":
        # a non-daemon thread still working: no fast exit, the interpreter waits for it as always
        assert "(the interpreter exits the usual way)" in out.stdout and "thread finished" in out.stdout
    else:
        assert "(the interpreter exits the usual way)" not in out.stdout
