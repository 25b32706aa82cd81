"""Tracepoints from tracefs: ``events/<subsystem>/<name>/id`` gives the
``config`` of a ``PERF_TYPE_TRACEPOINT`` event."""

from __future__ import annotations

import fnmatch
import os


def _mount_tracefs(path: str) -> bool:
    """Mount tracefs at ``path`` as perf does when it finds it unmounted
    (tools/lib/api/fs/tracing_path.c: tracefs__mount). Only root can; a
    failure is not an error (the caller then reports tracefs as missing)."""
    if os.geteuid() != 0 or not os.path.isdir(path):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.mount(b"nodev", os.fsencode(path), b"tracefs", ctypes.c_ulong(0), None) == 0
    except (OSError, AttributeError):
        return False


def _mounted(sysfs_root: str) -> str | None:
    for rel in ("kernel/tracing", "kernel/debug/tracing"):
        path = os.path.join(sysfs_root, rel)
        if os.path.isdir(os.path.join(path, "events")):
            return path
    return None


def find_tracefs(sysfs_root: str = "/sys") -> str | None:
    """The tracefs mount under ``sysfs_root`` (``kernel/tracing``, else
    ``kernel/debug/tracing``), or None. On the real ``/sys``, an unmounted
    tracefs is mounted at ``/sys/kernel/tracing`` when running as root, like
    perf does (a fresh machine often has it unmounted until first use)."""
    path = _mounted(sysfs_root)
    if path is None and sysfs_root == "/sys" and _mount_tracefs("/sys/kernel/tracing"):
        path = _mounted(sysfs_root)
    if path is not None:
        return path
    # tracefs is root-only (mode 0700) by default: report it rather than "not mounted"
    path = os.path.join(sysfs_root, "kernel/tracing")
    if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
        return path
    return None


def subsystems(tracefs: str) -> list[str]:
    base = os.path.join(tracefs, "events")
    try:
        return sorted(n for n in os.listdir(base) if os.path.isdir(os.path.join(base, n)))
    except OSError:
        return []


def events_of(tracefs: str, subsystem: str) -> list[str]:
    base = os.path.join(tracefs, "events", subsystem)
    try:
        return sorted(n for n in os.listdir(base) if os.path.isfile(os.path.join(base, n, "id")))
    except OSError:
        return []


def tracepoint_id(tracefs: str, subsystem: str, name: str) -> int | None:
    try:
        with open(os.path.join(tracefs, "events", subsystem, name, "id")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _is_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def expand(tracefs: str, subsystem: str, name: str) -> list[tuple[str, str, int]]:
    """``(subsystem, name, id)`` for every tracepoint matching the (possibly
    globbed) ``subsystem:name``, in tracefs order (sorted)."""
    if not _is_glob(subsystem) and not _is_glob(name):
        tid = tracepoint_id(tracefs, subsystem, name)
        return [] if tid is None else [(subsystem, name, tid)]
    out = []
    systems = [s for s in subsystems(tracefs) if fnmatch.fnmatchcase(s, subsystem)]
    for sys_ in systems:
        for ev in events_of(tracefs, sys_):
            if fnmatch.fnmatchcase(ev, name):
                tid = tracepoint_id(tracefs, sys_, ev)
                if tid is not None:
                    out.append((sys_, ev, tid))
    return out


def all_tracepoints(tracefs: str) -> list[str]:
    """Every ``subsystem:name`` with an ``id`` file, like ``perf list``
    (which also shows ``ftrace:function``/``ftrace:print``, absent from
    ``available_events``)."""
    return [f"{s}:{e}" for s in subsystems(tracefs) for e in events_of(tracefs, s)]
