"""Where pmuscope keeps derived data that is cheap to lose (parsed kallsyms,
the kernel's text range), and the boot id such data is keyed by: a kernel's
symbol addresses (KASLR) hold until the next boot."""

from __future__ import annotations

import os


def boot_id(procfs_root: str = "/proc") -> str | None:
    """``/proc/sys/kernel/random/boot_id``, or None when unreadable or odd."""
    try:
        with open(os.path.join(procfs_root, "sys", "kernel", "random", "boot_id"), "rb") as f:
            text = f.read(64).strip().decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    return text if text and all(c in "0123456789abcdef-" for c in text) else None


def cache_dir() -> str | None:
    """``$PMUSCOPE_CACHE_DIR`` (empty: keep nothing), else
    ``$XDG_CACHE_HOME/pmuscope``, else ``~/.cache/pmuscope``."""
    d = os.environ.get("PMUSCOPE_CACHE_DIR")
    if d is not None:
        return d or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pmuscope")
