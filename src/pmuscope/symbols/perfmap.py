"""JIT symbol maps ``/tmp/perf-PID.map``.

Runtimes that generate code (CPython >= 3.12 with ``-X perf``, Node with
``--perf-basic-prof``, Java agents such as perf-map-agent) append one line per
compiled function: ``START SIZE name`` with START and SIZE in hex (with or
without ``0x``) and the name running to the end of the line
(tools/perf/Documentation/jit-interface.txt). The file only grows while the
process runs, so :class:`PerfMap` re-reads just the appended bytes when its
size changed.
"""

from __future__ import annotations

import os

import numpy as np

from .table import SymbolTable


def parse_perf_map(data: bytes) -> tuple[list[int], list[int], list[str], int]:
    """Parse complete lines of a perf map: ``(starts, sizes, names, bad)``
    where ``bad`` counts lines that were not ``START SIZE name``."""
    starts, sizes, names, bad = [], [], [], 0
    for line in data.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3:
            if line.strip():
                bad += 1
            continue
        try:
            start = int(parts[0], 16)
            size = int(parts[1], 16)
        except ValueError:
            bad += 1
            continue
        starts.append(start)
        sizes.append(size)
        names.append(parts[2].rstrip().decode("utf-8", "replace"))
    return starts, sizes, names, bad


class PerfMap:
    """The JIT map of one process; :meth:`table` reloads when the file grew."""

    def __init__(self, path: str):
        self.path = path
        self._pos = 0
        self._starts: list[int] = []
        self._sizes: list[int] = []
        self._names: list[str] = []
        self._table: SymbolTable | None = None
        self.bad_lines = 0
        self.reloads = 0
        #: set when the file was refused (not owned by this user or root)
        self.untrusted = False

    @classmethod
    def for_pid(cls, pid: int, tmp_dir: str = "/tmp") -> "PerfMap":
        return cls(os.path.join(tmp_dir, f"perf-{pid}.map"))

    @property
    def dso(self) -> str:
        """The DSO name perf shows for JIT code: ``/tmp/perf-PID.map``."""
        return self.path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def refresh(self) -> bool:
        """Read lines appended since the last call; True when new symbols came."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return False
        if size < self._pos:  # replaced by a new process with the same pid
            self._pos = 0
            self._starts, self._sizes, self._names = [], [], []
        if size == self._pos or self.untrusted:
            return False
        with open(self.path, "rb") as f:
            uid = os.fstat(f.fileno()).st_uid
            if uid not in (0, os.geteuid()):
                # perf's rule (util/symbol.c dso__load): anyone can write /tmp/perf-PID.map
                import warnings

                self.untrusted = True
                warnings.warn(f"{self.path} is not owned by the current user or root: ignoring it")
                return False
            f.seek(self._pos)
            data = f.read(size - self._pos)
        cut = data.rfind(b"\n")
        if cut < 0:
            return False  # a line still being written
        data = data[:cut + 1]
        self._pos += len(data)
        s, z, n, bad = parse_perf_map(data)
        self.bad_lines += bad
        self._starts += s
        self._sizes += z
        self._names += n
        self._table = None
        self.reloads += 1
        return bool(s)

    def table(self) -> SymbolTable:
        """The symbol table as of now (reloaded when the file grew)."""
        self.refresh()
        if self._table is None:
            self._table = SymbolTable.from_arrays(
                np.array(self._starts, dtype=np.uint64), np.array(self._sizes, dtype=np.uint64),
                self._names, fixup_end=False)
        return self._table
