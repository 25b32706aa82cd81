"""What the CLI does before a command runs: numpy without OpenBLAS's thread pool."""

from __future__ import annotations

import os
import subprocess
import sys

from pmuscope.cli import main as cli_main

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


def test_file_reading_commands_ask_for_numpy_first():
    parser = cli_main.build_parser("report")
    assert parser.parse_args(["report", "-i", "x.data"])._numpy is True
    parser = cli_main.build_parser("list")
    assert parser.parse_args(["list"])._numpy is False
