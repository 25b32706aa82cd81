"""ELF DSOs: find the file with the best symbol table (the binary itself,
a separate debug file by build-id or ``.gnu_debuglink``, perf's build-id
cache) and parse it once per run.

Search order, as perf and gdb do it:

1. the binary's own ``.symtab``;
2. ``DEBUG_ROOT/.build-id/xx/yyyy.debug`` (build-id split after two hex digits);
3. ``BUILDID_DIR/.build-id/xx/yyyy/debug`` and ``.../elf`` (perf's cache, ``~/.debug``);
4. the ``.gnu_debuglink`` name in the binary's directory, in its ``.debug/``
   subdirectory and under ``DEBUG_ROOT/<directory>/``;
5. the binary's ``.dynsym``.

A debug file whose build-id differs from the binary's is never used.
"""

from __future__ import annotations

import os
import threading
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from .elf import ET_EXEC, ElfFile
from .table import SymbolTable

DEFAULT_DEBUG_ROOT = "/usr/lib/debug"


def _crc32_of(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                return crc & 0xFFFFFFFF
            crc = zlib.crc32(chunk, crc)


def debug_file_candidates(path: str, build_id: str | None, debuglink: str | None,
                          debug_root: str = DEFAULT_DEBUG_ROOT,
                          buildid_dir: str | None = None) -> list[tuple[str, str]]:
    """Candidate separate debug files for ``path`` as ``(how, file)`` pairs in
    search order (``how`` is ``build-id``, ``buildid-cache`` or ``debuglink``)."""
    out = []
    if build_id and len(build_id) > 2:
        out.append(("build-id", os.path.join(debug_root, ".build-id", build_id[:2],
                                             build_id[2:] + ".debug")))
        if buildid_dir:
            base = os.path.join(buildid_dir, ".build-id", build_id[:2], build_id[2:])
            out.append(("buildid-cache", os.path.join(base, "debug")))
    if debuglink:
        d = os.path.dirname(os.path.abspath(path))
        out.append(("debuglink", os.path.join(d, debuglink)))
        out.append(("debuglink", os.path.join(d, ".debug", debuglink)))
        out.append(("debuglink", os.path.join(debug_root, d.lstrip("/"), debuglink)))
    return out


@dataclass
class ElfDso:
    """A parsed ELF DSO: program headers of the runtime binary (for file
    offset -> vaddr) and the symbol table from the best source."""

    path: str
    elf: ElfFile | None
    table: SymbolTable
    build_id: str | None
    symtab_path: str | None
    symtab_section: str | None
    how: str

    @property
    def is_exec(self) -> bool:
        return self.elf is not None and self.elf.e_type == ET_EXEC

    def file_offset_to_vaddr(self, offsets: np.ndarray) -> np.ndarray:
        """Link-time addresses (the ones in the symbol table) of file offsets."""
        if self.elf is None:
            return np.asarray(offsets, dtype=np.uint64)
        return self.elf.offset_to_vaddr(offsets)


def load_elf_dso(path: str, *, debug_root: str = DEFAULT_DEBUG_ROOT,
                 buildid_dir: str | None = None, expect_build_id: str | None = None,
                 include_objects: bool = False) -> ElfDso:
    """Open ``path`` and pick its symbol table by the search order above.

    Raises :class:`FormatError` when ``path`` is not a readable ELF file.
    """
    elf = ElfFile.open(path)
    build_id = elf.build_id
    if elf.has_symtab():
        return ElfDso(path, elf, SymbolTable.from_elf(elf.symbols(".symtab"), include_objects=include_objects),
                      build_id, path, ".symtab", "symtab")
    link = elf.debuglink
    want_id = build_id or expect_build_id
    for how, cand in debug_file_candidates(path, want_id, link[0] if link else None,
                                           debug_root, buildid_dir):
        if not os.path.isfile(cand) or os.path.realpath(cand) == os.path.realpath(path):
            continue
        try:
            dbg = ElfFile.open(cand)
        except FormatError:
            continue
        if not dbg.has_symtab():
            continue
        dbg_id = dbg.build_id
        if want_id and dbg_id and dbg_id != want_id:
            continue
        if how == "debuglink" and not (want_id and dbg_id) and link and link[1]:
            try:
                if _crc32_of(cand) != link[1]:
                    continue
            except OSError:
                continue
        table = SymbolTable.from_elf(dbg.symbols(".symtab"), include_objects=include_objects)
        return ElfDso(path, elf, table, build_id, cand, ".symtab", how)
    raw = elf.symbols(".dynsym")
    if raw is not None:
        return ElfDso(path, elf, SymbolTable.from_elf(raw, include_objects=include_objects),
                      build_id, path, ".dynsym", "dynsym")
    empty = SymbolTable(np.zeros(0, np.uint64), np.zeros(0, np.uint64), lambda i: "")
    return ElfDso(path, elf, empty, build_id, None, None, "none")


class DsoCache:
    """Parsed DSOs keyed by file identity (real path, device, inode, size,
    mtime): each binary is parsed once however many processes map it. A
    failure (missing or non-ELF file) is cached too, as None."""

    def __init__(self, *, debug_root: str = DEFAULT_DEBUG_ROOT, buildid_dir: str | None = None):
        self.debug_root = debug_root
        self.buildid_dir = buildid_dir
        self._by_key: dict[tuple, ElfDso | None] = {}
        self._lock = threading.Lock()
        self.parsed = 0

    def get(self, path: str, expect_build_id: str | None = None) -> ElfDso | None:
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is None:
            # gone from disk: try the build-id cache / debug dir by build-id alone
            if expect_build_id and self.buildid_dir:
                elf = os.path.join(self.buildid_dir, ".build-id", expect_build_id[:2],
                                   expect_build_id[2:], "elf")
                if os.path.isfile(elf):
                    return self.get(elf, expect_build_id)
            return None
        key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._by_key:
                return self._by_key[key]
        try:
            dso = load_elf_dso(path, debug_root=self.debug_root, buildid_dir=self.buildid_dir,
                               expect_build_id=expect_build_id)
        except FormatError:
            dso = None
        with self._lock:
            self._by_key[key] = dso
            self.parsed += 1
        return dso
