"""PEP 562 lazy re-exports, shared by the package ``__init__`` modules.

A package lists ``{public name: relative module}``; the module is imported the
first time the name is looked up, and the value is then cached in the
package's globals so later lookups are plain dictionary hits. This keeps
``import pmuscope`` and every CLI command's start-up down to what it uses.
"""

from __future__ import annotations

import importlib
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
