"""PEP 562 lazy re-exports, shared by the package ``__init__`` modules.

A package lists ``{public name: relative module}``; the module is imported the
first time the name is looked up, and the value is then cached in the
package's globals so later lookups are plain dictionary hits. This keeps
``import pmuscope`` and every CLI command's start-up down to what it uses.

:func:`numpy` is the import of numpy for modules that need it only on some
paths (``import numpy`` is ~35-65 ms, more than a whole ``pmuscope stat``).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable


def lazy_exports(package: str, names: dict[str, str],
                 submodules: dict[str, str] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for PACKAGE: NAMES maps a name to the relative
    module defining it; SUBMODULES maps a name to a relative module that is the value."""
    subs = submodules or {}

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name], package), name)
        elif name in subs:
            value = importlib.import_module(subs[name], package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names) | set(subs))

    return __getattr__, __dir__


#: environment variables that size OpenBLAS's thread pool (any one set by the user wins)
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")

#: set by the command line: import numpy with OpenBLAS at one thread
ONE_BLAS_THREAD = False

#: set by the command line (a process of its own, not a host program): once numpy is
#: imported, every object alive is moved out of the collector's reach (``gc.freeze``)
FREEZE_AFTER_IMPORT = False


def numpy(one_blas_thread: bool | None = None):
    """The numpy module, imported now if it is not yet.

    With ``one_blas_thread`` (default: :data:`ONE_BLAS_THREAD`, which the
    command line sets) and no pool size chosen by the user, OpenBLAS is
    loaded with one thread. why: importing numpy loads OpenBLAS, which starts
    a thread per CPU that busy-waits for work before sleeping; pmuscope never
    calls BLAS. On a loaded 2-CPU machine that made ``import numpy`` take
    130 ms instead of 75 ms (median of 30), and the spinning thread competed
    with the command for a CPU. OpenBLAS reads the variable once, when the
    library is loaded, so it is removed again right after: processes
    pmuscope starts later do not inherit it.
    """
    np = sys.modules.get("numpy")
    if np is not None:
        return np
    if one_blas_thread is None:
        one_blas_thread = ONE_BLAS_THREAD
    # no garbage collection while numpy's ~150 modules load: their objects all live on, and
    # the ~30 collections the allocations set off (each rescanning what the last kept)
    # cost 2-3 ms of every command that reads a recording
    one_thread = one_blas_thread and not any(v in os.environ for v in BLAS_THREADS)
    collecting = gc.isenabled()
    gc.disable()
    if one_thread:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy as np
    finally:
        if one_thread:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        if FREEZE_AFTER_IMPORT:
            # why: the objects numpy's import made (tens of thousands, all kept for the life of
            # the process) would be scanned by the next young collection, then by the next
            # middle one (2 and 1.8 ms: 4 of script -G's ~95 ms on a small file); frozen, the
            # collector only ever looks at what the command allocates after this
            gc.freeze()
        if collecting:
            gc.enable()
    return np
