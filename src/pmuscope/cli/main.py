"""``pmuscope`` entry point: dispatches to one module per command.

A command module under ``pmuscope.cli`` defines ``HELP`` (one line),
``configure(parser)`` and ``run(args) -> int``; ``USES_NUMPY = True`` has
numpy imported (see :func:`import_numpy`) before ``run``; ``FAST_EXIT = True``
lets :func:`entry` end the process without the interpreter's teardown once
``run`` has returned (see :func:`_exit_now`). Errors derived from
:class:`~pmuscope.errors.PmuscopeError` are printed as one clear message
(no traceback unless ``-v``) and mapped to their ``exit_code``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from typing import Sequence

from .. import __version__, _lazy
from ..errors import PmuscopeError

#: command name -> module under pmuscope.cli (in the order `--help` lists them)
COMMANDS: dict[str, str] = {
    "list": "list_cmd",
    "attr": "attr_cmd",
    "doctor": "doctor_cmd",
    "topology": "topology_cmd",
    "stat": "stat_cmd",
    "monitor": "monitor_cmd",
    "observe": "observe_cmd",
    "spe": "spe_cmd",
    "record": "record_cmd",
    "report": "report_cmd",
    "diff": "diff_cmd",
    "annotate": "annotate_cmd",
    "top": "top_cmd",
    "script": "script_cmd",
    "profile": "profile_cmd",
    "serve": "serve_cmd",
    "numatop": "numatop_cmd",
    "export": "export_cmd",
    "mem": "mem_cmd",
    "c2c": "c2c_cmd",
}


def _available_commands(only: str | None = None) -> dict[str, object]:
    """Import the command modules (just ``only`` when the command is known:
    a command's start-up pays for its own imports, not everyone's)."""
    mods = {}
    for name, modname in COMMANDS.items():
        if only is not None and name != only:
            continue
        try:
            mods[name] = importlib.import_module(f"{__package__}.{modname}")
        except ModuleNotFoundError as err:
            if err.name == f"{__package__}.{modname}":
                continue  # command not built yet
            raise
    return mods


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line, ``pmuscope CMD: message (see pmuscope CMD -h)``,
    exit status 2, like every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} -h)\n")

    def _get_formatter(self):
        # argparse builds a formatter for every add_argument; without a width it
        # imports shutil (and zlib, bz2, lzma with it: ~1.5 ms of every start-up)
        return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the width of
    standard output's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pmuscope",
        description="Observe a Linux machine through perf_event_open: count, sample, NUMA, microscopy, SPE.",
    )
    parser.add_argument("--version", action="version", version=f"pmuscope {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more detail; -vv shows tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, mod in _available_commands(only).items():
        # argparse %-formats help strings (`95% CI` made `pmuscope --help` fail): a literal % is %%
        p = sub.add_parser(name, help=mod.HELP.replace("%", "%%"), description=getattr(mod, "DESCRIPTION", mod.HELP))
        p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        mod.configure(p)
        p.set_defaults(_run=mod.run, _numpy=getattr(mod, "USES_NUMPY", False),
                       _fast_exit=getattr(mod, "FAST_EXIT", False))
    return parser


#: environment variables that size OpenBLAS's thread pool (any one set by the user wins)
_BLAS_THREADS = _lazy.BLAS_THREADS


def import_numpy() -> None:
    """Import numpy with OpenBLAS's thread pool at one thread, unless the
    user sized it (see :func:`pmuscope._lazy.numpy`)."""
    _lazy.numpy(one_blas_thread=True)


def _fields_joined(argv: list[str]) -> list[str]:
    """``-F -dso`` as ``--fields=-dso``, the other arguments as they are."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("-F", "--fields") and i + 1 < len(argv) and argv[i + 1][:1] == "-" and len(argv[i + 1]) > 1:
            out.append(f"--fields={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    global _finished_cleanly
    _finished_cleanly = False
    argv = list(sys.argv[1:] if argv is None else argv)
    # the first word that is not an option names the command
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None and "--version" in argv:
        print(f"pmuscope {__version__}")
        return 0
    if first == "c2c":
        # perf c2c record is perf mem record of loads and stores: the same here
        i = argv.index("c2c")
        rest = [a for a in argv[i + 1:] if not a.startswith("-")]
        if rest and rest[0] == "record":
            j = argv.index("record", i + 1)
            argv = argv[:i] + ["mem", "record"] + argv[i + 1:j] + argv[j + 1:]
            first = "mem"
    if first == "script":
        # perf's -F -dso (take dso from the defaults): a value argparse would read as an option
        argv = _fields_joined(argv)
    # the command line is a process of its own: startup objects may leave the collector's view
    _lazy.FREEZE_AFTER_IMPORT = True
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    if getattr(args, "_numpy", False):
        import_numpy()
    from .. import _policy

    # read perf.data like perf: damaged optional metadata is a warning
    _policy.STRICT_READS = False
    # numpy, when a command gets to it later, comes without OpenBLAS's thread pool
    _lazy.ONE_BLAS_THREAD = True
    old_show = warnings.showwarning
    warnings.showwarning = _warning_printer(args.command)
    try:
        code = int(args._run(args) or 0)
        _finished_cleanly = bool(getattr(args, "_fast_exit", False))
        return code
    except PmuscopeError as err:
        if getattr(args, "verbose", 0) >= 2:
            raise
        print(f"pmuscope {args.command}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # output piped into `head`: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        warnings.showwarning = old_show
        _policy.STRICT_READS = True
        _lazy.ONE_BLAS_THREAD = False


def _warning_printer(command: str):
    """Warnings (a skipped damaged header section ...) as one line each:
    ``pmuscope CMD: warning: ...``."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"pmuscope {command}: warning: {message}", file=sys.stderr)

    return show


#: set by main() when the command finished without an error and its module
#: declares ``FAST_EXIT = True`` (it leaves no file open and no thread running)
_finished_cleanly = False


def _exit_now(code: int) -> None:
    """End the process with ``code`` without tearing the interpreter down.

    why: at exit CPython runs a full garbage collection and then frees every
    module's objects one by one. Here that was 8 ms for ``python3 -c pass``
    and 20 ms of CPU for ``pmuscope stat`` (the site-packages ``.pth`` files of
    this machine import ~100 modules before ours), as much as the whole
    count. Nothing in it is needed once the output is flushed, the exit
    handlers have run and no other thread is working: the kernel closes the
    fds and frees the memory. Returns (and the caller exits the usual way)
    when any of those is not so.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - e.g. a closed pipe: let the interpreter report it as it does
        return
    threading = sys.modules.get("threading")
    if threading is not None:
        main_thread = threading.main_thread()
        if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
            return  # the interpreter would wait for it
    import atexit

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None:
        return
    run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        return
    os._exit(code & 0xFF)


def entry() -> None:
    code = main()
    if _finished_cleanly:
        _exit_now(code)
    sys.exit(code)
