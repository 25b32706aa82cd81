"""Python function names for perf in a Python started by ``pmuscope record``
or ``pmuscope profile``.

pmuscope puts this directory first on the command's ``PYTHONPATH``, so CPython's
``site`` imports this file at start-up. With ``PMUSCOPE_PYTHON_FRAMES=1`` on a
CPython <= 3.11 it loads pmuscope's ``_pyperf`` helper (by path: pmuscope itself
need not be importable, and a helper built for another interpreter is skipped)
and activates it: every Python function then runs through a trampoline of its
own, named in /tmp/perf-PID.map. Then it hands over to the next
``sitecustomize`` on ``sys.path``, if any, as if this one had not been there.
Nothing here may fail loudly: the command must run as it would without pmuscope.
"""


def _pmuscope_python_frames() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if (os.environ.get("PMUSCOPE_PYTHON_FRAMES") == "1" and sys.implementation.name == "cpython"
            and sys.version_info < (3, 12)):
        try:
            import importlib.machinery
            import importlib.util

            pkg = os.path.dirname(os.path.dirname(here))  # .../pmuscope (this is pmuscope/data/pyboot)
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(pkg, "_pyperf" + suffix)
                if os.path.exists(path):
                    loader = importlib.machinery.ExtensionFileLoader("pmuscope._pyperf", path)
                    spec = importlib.util.spec_from_file_location("pmuscope._pyperf", path, loader=loader)
                    mod = importlib.util.module_from_spec(spec)
                    loader.exec_module(mod)
                    # truncate: a stale map of an earlier process with this pid
                    mod.activate(truncate=True, jitdump=os.environ.get("PMUSCOPE_PYTHON_JITDUMP") == "1")
                    break
        except Exception:  # another interpreter's build, /tmp not writable, ...: run without names
            pass
    # hand over to the sitecustomize this one hides
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    me = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except ImportError as err:
        if err.name != "sitecustomize":
            raise
        if me is not None:
            sys.modules["sitecustomize"] = me


_pmuscope_python_frames()
del _pmuscope_python_frames
