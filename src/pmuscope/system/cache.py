"""Where pmuscope keeps derived data that is cheap to lose (parsed kallsyms,
the kernel's text range), and the boot id such data is keyed by: a kernel's
symbol addresses (KASLR) hold until the next boot."""

from __future__ import annotations

import os
from typing import Callable


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


def store(path: str, parts: list[bytes], stale: Callable[[str], bool]) -> bool:
    """Write ``parts`` to ``path`` (0600, in a 0700 directory) through a
    temporary name and a rename, then remove the other files of that
    directory for which ``stale(name)`` is true (what earlier boots left, or
    half-written files of a process that exited while writing). Best effort:
    False when the directory or the file cannot be written; an unwritable
    cache only costs the next run the work."""
    d = os.path.dirname(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    mine = os.path.basename(path)
    try:
        for name in os.listdir(d):
            if name != mine and stale(name):
                os.unlink(os.path.join(d, name))
    except OSError:
        pass
    return True
