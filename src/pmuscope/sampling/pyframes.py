"""Python function names in the stacks of a recorded Python command.

A CPython process runs Python functions inside one C function
(``_PyEval_EvalFrameDefault``), so native stacks alone say nothing about
which Python function ran. The fix perf documents (CPython 3.12's ``-X perf``)
gives every Python function a tiny piece of machine code of its own — a
*trampoline* that calls the evaluator — and names those in
``/tmp/perf-PID.map`` as ``py::QUALNAME:FILE``; a stack then shows each
Python function between the evaluator frames it runs in.

:func:`child_env` prepares the environment of a command ``record``/``profile``
start so that every CPython process in it does that:

- CPython >= 3.12: ``PYTHONPERFSUPPORT=1`` (the interpreter's own switch);
- CPython <= 3.11: a directory with a ``sitecustomize`` first on ``PYTHONPATH``
  and ``PMUSCOPE_PYTHON_FRAMES=1``; it activates ``pmuscope._pyperf`` (the same
  mechanism through the PEP 523 frame-evaluation hook) and chains to any other
  ``sitecustomize``. ``python -S``/``-E``/``-I`` skip it, and the command runs
  unchanged.

Both are set for any command (not only ``python*`` executables), so Python
processes started by shells, scripts and entry points are covered; other
programs ignore them. An already-running process (``-p``) cannot be changed:
:func:`attach_note` says what can be had.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

ENV_FLAG = "PMUSCOPE_PYTHON_FRAMES"
#: also write /tmp/jit-PID.dump for ``perf inject --jit`` (CPython <= 3.11, x86-64)
ENV_JITDUMP = "PMUSCOPE_PYTHON_JITDUMP"
#: the directory holding the bootstrap ``sitecustomize.py``
BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "pyboot")


def helper_path() -> str | None:
    """The ``_pyperf`` extension for this interpreter, or None (not built:
    no compiler at install time)."""
    import importlib.machinery

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = os.path.join(pkg, "_pyperf" + suffix)
        if os.path.exists(p):
            return p
    return None


def child_env(base: Mapping[str, str] | None = None, *, jitdump: bool = False) -> dict[str, str]:
    """``base`` (default: this process's environment) with Python frames
    switched on for CPython processes started with it.

    ``jitdump=True`` also has CPython <= 3.11 write ``/tmp/jit-PID.dump`` (x86-64):
    after ``perf record -k 1 --call-graph dwarf``, ``perf inject --jit`` turns
    it into one small ELF per trampoline with its CFI, and Linux perf then
    unwinds through every Python frame (without it perf's DWARF unwinder stops
    at the innermost one). CPython 3.12+ has ``-X perf_jit`` (3.13) instead."""
    env = dict(os.environ if base is None else base)
    env[ENV_FLAG] = "1"
    if jitdump:
        env[ENV_JITDUMP] = "1"
    env.setdefault("PYTHONPERFSUPPORT", "1")
    old = env.get("PYTHONPATH")
    parts = [p for p in old.split(os.pathsep) if p] if old else []
    if BOOT_DIR not in parts:
        env["PYTHONPATH"] = os.pathsep.join([BOOT_DIR, *parts])
    return env


def is_python_command(argv) -> bool:
    """Whether ``argv`` runs Python: its program is named ``python*``, or is a
    script whose ``#!`` line names a ``python*`` interpreter (``env python3``
    included). Entry-point scripts of pip-installed tools are such scripts."""
    import shutil

    if not argv:
        return False
    prog = argv[0]
    if os.path.basename(prog).startswith("python"):
        return True
    path = prog if os.sep in prog else shutil.which(prog)
    try:
        with open(path or prog, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    words = first[2:].split()
    return any(os.path.basename(w.decode("utf-8", "replace")).startswith("python") for w in words[:2])


def missing_helper_note(argv) -> str | None:
    """A note when ``argv`` runs Python and this interpreter (CPython <= 3.11,
    the same family as the command's, most likely) has no ``_pyperf`` helper
    built: its Python functions will not be named."""
    import sys

    if (sys.implementation.name != "cpython" or sys.version_info >= (3, 12) or helper_path() is not None
            or not is_python_command(argv)):
        return None
    return ("Python functions will not be named: pmuscope's helper pmuscope._pyperf was not built for this Python "
            "(no C compiler at install time); install gcc and the Python headers, then reinstall pmuscope")


def python_version_of(pid: int, procfs_root: str = "/proc") -> tuple[int, int] | None:
    """``(major, minor)`` of the CPython running as ``pid``, from the
    interpreter or libpython it has mapped; None when it is not Python (or
    the version cannot be told)."""
    found = None
    try:
        exe = os.path.basename(os.readlink(f"{procfs_root}/{pid}/exe"))
        m = re.fullmatch(r"python(\d)\.(\d+)", exe)
        if m:
            found = (int(m.group(1)), int(m.group(2)))
    except OSError:
        exe = ""
    if found is None:
        try:
            with open(f"{procfs_root}/{pid}/maps", "rb") as f:
                m = re.search(rb"/libpython(\d)\.(\d+)[^/\s]*\.so", f.read())
            if m:
                found = (int(m.group(1)), int(m.group(2)))
        except OSError:
            pass
    if found is None and exe.startswith("python"):
        return (0, 0)  # a Python of unknown version
    return found


def attach_note(pid: int, procfs_root: str = "/proc", tmp_dir: str = "/tmp") -> str | None:
    """A note for ``-p PID`` of a Python process that has no perf map (its
    Python functions cannot be named); None when there is nothing to say."""
    ver = python_version_of(pid, procfs_root)
    if ver is None or os.path.exists(os.path.join(tmp_dir, f"perf-{pid}.map")):
        return None
    if ver >= (3, 12):
        return (f"process {pid} is Python {ver[0]}.{ver[1]} without a perf map: its Python functions will not be "
                "named; in that process call sys.activate_stack_trampoline('perf') (or start it with -X perf)")
    return (f"process {pid} is Python{'' if ver == (0, 0) else f' {ver[0]}.{ver[1]}'} without a perf map: its Python "
            "functions cannot be named for a process already running; start it under pmuscope record/profile "
            "(or with PYTHONPATH and PMUSCOPE_PYTHON_FRAMES=1 set by pmuscope.sampling.pyframes.child_env)")
