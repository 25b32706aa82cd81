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
import zlib
from _thread import allocate_lock  # threading.Lock, without importing threading (0.45 ms)
from typing import TYPE_CHECKING, Callable

from .._plain import Plain
from ..errors import FormatError
from .elf import (ET_EXEC, PF_X, SHT_DYNSYM, SHT_SYMTAB, STB_GLOBAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC, ElfFile,
                  RawSymbols)

if TYPE_CHECKING:
    import numpy as np

    from .table import SymbolTable

DEFAULT_DEBUG_ROOT = "/usr/lib/debug"
#: perf's build-id cache
DEFAULT_BUILDID_DIR = os.path.join(os.path.expanduser("~"), ".debug")


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


class ElfDso(Plain):
    """A parsed ELF DSO: program headers of the runtime binary (for file
    offset -> vaddr) and the symbol table from the best source."""

    _fields = ("path", "elf", "table", "build_id", "symtab_path", "symtab_section", "how")

    path: str
    elf: ElfFile | None
    table: SymbolTable
    build_id: str | None
    symtab_path: str | None
    symtab_section: str | None
    how: str

    def __init__(
        self,
        path: str,
        elf: ElfFile | None,
        table: SymbolTable,
        build_id: str | None,
        symtab_path: str | None,
        symtab_section: str | None,
        how: str,
    ) -> None:
        self.path = path
        self.elf = elf
        self.table = table
        self.build_id = build_id
        self.symtab_path = symtab_path
        self.symtab_section = symtab_section
        self.how = how

    @property
    def is_exec(self) -> bool:
        return self.elf is not None and self.elf.e_type == ET_EXEC

    @property
    def debug_only(self) -> bool:
        """True when the file is a separate debug file (found by build-id alone):
        its code segments are NOBITS, so their ``p_offset`` means nothing."""
        if self.elf is None:
            return False
        text = [s for s in self.elf.load_segments if s.p_flags & PF_X]
        return bool(text) and all(s.p_filesz == 0 and s.p_memsz > 0 for s in text)

    def file_offset_to_vaddr(self, offsets: np.ndarray) -> np.ndarray:
        """Link-time addresses (the ones in the symbol table) of file offsets."""
        import numpy as np

        if self.elf is None:
            return np.asarray(offsets, dtype=np.uint64)
        return self.elf.offset_to_vaddr(offsets)

    def map_to_vaddr(self, ips: np.ndarray, start: int, pgoff: int) -> np.ndarray:
        """Link-time addresses of ``ips`` in a mapping ``[start, ...)`` of this
        file at ``pgoff``. For a debug-only file the mapping is taken to begin
        at the page of the executable segment (the loader maps it that way)."""
        import numpy as np

        ips = np.asarray(ips, dtype=np.uint64)
        if self.debug_only:
            text = min((s for s in self.elf.load_segments if s.p_flags & PF_X),
                       key=lambda s: s.p_vaddr)
            return ips - np.uint64(start) + np.uint64(text.p_vaddr & ~0xFFF)
        return self.file_offset_to_vaddr(ips - np.uint64(start) + np.uint64(pgoff))


def _with_plt(raw: RawSymbols, elf: ElfFile) -> RawSymbols:
    """``raw`` plus the binary's synthesized ``name@plt`` symbols."""
    import numpy as np

    from .._np import isin

    try:
        plt = elf.plt_symbols()
    except FormatError:
        plt = []
    if not plt:
        return raw
    if any(not p[2] for p in plt):
        # IRELATIVE slots: name them after the IFUNC whose resolver the addend points at
        stt = raw.st_info & 0xF
        want = np.array(sorted({p[3] for p in plt if not p[2]}), dtype=np.uint64)
        cand = np.flatnonzero(((stt == STT_FUNC) | (stt == STT_GNU_IFUNC))
                              & isin(raw.st_value, want))
        by_value: dict[int, tuple] = {}
        bind_rank = {STB_GLOBAL: 0, STB_WEAK: 1}
        for i in cand:
            name = raw.name(int(i))
            key = (stt[i] != STT_GNU_IFUNC, bind_rank.get(int(raw.st_info[i]) >> 4, 2),
                   len(name) - len(name.lstrip("_")), -len(name), name)
            v = int(raw.st_value[i])
            if v not in by_value or key < by_value[v]:
                by_value[v] = key
        plt = [(a, z, n or (f"{by_value[add][-1]}@plt" if add in by_value
                            else f"offset_{a:#x}@plt")) for a, z, n, add in plt]
    blob = bytearray(raw.strtab)
    offs = []
    for _, _, name, *_ in plt:
        offs.append(len(blob))
        blob += name.encode() + b"\0"
    n = len(plt)
    return RawSymbols(
        st_name=np.concatenate([raw.st_name, np.array(offs, dtype=np.int64)]),
        st_value=np.concatenate([raw.st_value, np.array([p[0] for p in plt], dtype=np.uint64)]),
        st_size=np.concatenate([raw.st_size, np.array([p[1] for p in plt], dtype=np.uint64)]),
        st_info=np.concatenate([raw.st_info, np.full(n, (STB_GLOBAL << 4) | STT_FUNC, np.uint8)]),
        st_shndx=np.concatenate([raw.st_shndx, np.full(n, 1, np.uint16)]),
        strtab=bytes(blob), section=raw.section,
        st_other=None if raw.st_other is None else np.concatenate([raw.st_other, np.zeros(n, np.uint8)]),
        label_sections=raw.label_sections)


def find_symtab(path: str, elf: ElfFile, build_id: str | None, *, debug_root: str = DEFAULT_DEBUG_ROOT,
                buildid_dir: str | None = None,
                expect_build_id: str | None = None) -> tuple[ElfFile, str, str] | None:
    """Where the symbols of ``path`` (opened as ``elf``, its build-id
    ``build_id``) are read from, by the search order above: ``(the ELF file
    holding them, its section, how it was found)``, or None when there are
    none. Reads headers only (no numpy): :func:`load_elf_dso` and the
    small-file report (:mod:`pmuscope.profile.lite`) share it."""
    if elf.has_symtab():
        return elf, ".symtab", "symtab"
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
        return dbg, ".symtab", how
    sec = elf.section(".dynsym")
    if sec is not None and sec.sh_type in (SHT_SYMTAB, SHT_DYNSYM) and sec.sh_size != 0:
        return elf, ".dynsym", "dynsym"
    return None


def load_elf_dso(path: str, *, debug_root: str = DEFAULT_DEBUG_ROOT,
                 buildid_dir: str | None = None, expect_build_id: str | None = None,
                 include_objects: bool = False) -> ElfDso:
    """Open ``path`` and pick its symbol table by the search order above
    (:func:`find_symtab`). The parsed table is kept in the user's cache
    directory (:mod:`pmuscope.symbols._symcache`) and taken from there while
    the files it came from are unchanged.

    Raises :class:`FormatError` when ``path`` is not a readable ELF file.
    """
    elf = ElfFile.open(path)
    build_id = elf.build_id
    found = find_symtab(path, elf, build_id, debug_root=debug_root, buildid_dir=buildid_dir,
                        expect_build_id=expect_build_id)
    return _elf_dso(path, elf, build_id, found, include_objects, kept=True)


def load_elf_image(image: bytes, name: str, *, include_objects: bool = False) -> ElfDso:
    """An ELF image held in memory (the vdso), its symbols from its own
    ``.symtab`` else its ``.dynsym`` (no file, so no debug file to look for).
    The table is kept by boot id and image (the vdso is one image per kernel)."""
    elf = ElfFile.from_bytes(image, name)
    found = (elf, ".symtab", "symtab") if elf.has_symtab() else (elf, ".dynsym", "dynsym")
    from . import _symcache

    return _elf_dso(name, elf, elf.build_id, found, include_objects,
                    kept=_symcache.vdso_key(image, include_objects))


def _elf_dso(path: str, elf: ElfFile, build_id: str | None, found: tuple[ElfFile, str, str] | None,
             include_objects: bool, kept) -> ElfDso:
    """The :class:`ElfDso` of ``elf`` with the symbols ``found`` names: the
    kept table when there is one for this very choice (``kept``: True for a
    file, keyed by its identity; a ``(name, key)`` pair; falsy: keep
    nothing), else parsed (and kept)."""
    import numpy as np

    from . import _symcache
    from .table import SymbolTable, elf_columns

    if found is not None:
        symfile, section, how = found
        entry = None
        if kept is True:
            entry = _symcache.elf_key(path, symfile.path, section, how, include_objects)
        elif kept:
            entry = kept
        if entry is not None:
            table = _symcache.load(*entry)
            if table is not None:
                return ElfDso(path, elf, table, build_id, symfile.path, section, how)
        # PLT entries come from the runtime binary (a debug file's .plt is NOBITS)
        raw = symfile.symbols(section)
        if raw is not None:
            raw = _with_plt(raw, elf)
            starts, ends, offs, lens = elf_columns(raw, include_objects)
            blob = raw.strtab
            table = SymbolTable.from_strtab(starts, ends, offs, blob)
            # kept only when the files did not change while they were read
            if entry is not None and (kept is not True or entry == _symcache.elf_key(
                    path, symfile.path, section, how, include_objects)):
                parts = _symcache.encode(entry[1], starts, ends, offs, lens, blob)
                (_symcache.store if kept is True else _symcache.store_vdso)(entry[0], parts)
            return ElfDso(path, elf, table, build_id, symfile.path, section, how)
    empty = SymbolTable(np.zeros(0, np.uint64), np.zeros(0, np.uint64), lambda i: "")
    return ElfDso(path, elf, empty, build_id, None, None, "none")


class DsoCache:
    """Parsed DSOs keyed by file identity (real path, device, inode, size,
    mtime): each binary is parsed once however many processes map it. A
    failure (missing or non-ELF file) is cached too, as None."""

    def __init__(self, *, debug_root: str = DEFAULT_DEBUG_ROOT, buildid_dir: str | None = None,
                 loader: Callable[..., object] | None = None):
        self.debug_root = debug_root
        self.buildid_dir = buildid_dir
        #: how a file is parsed: :func:`load_elf_dso`'s signature, returning an
        #: object with ``build_id`` (the small-file report plugs its own in)
        self._load = loader or load_elf_dso
        self._by_key: dict[tuple, ElfDso | None] = {}
        self._lock = allocate_lock()
        self.parsed = 0

    def clear(self) -> None:
        """Forget every parsed DSO."""
        with self._lock:
            self._by_key.clear()

    def get(self, path: str, expect_build_id: str | None = None) -> ElfDso | None:
        """The DSO for ``path``. With ``expect_build_id`` (from an MMAP2 record)
        a file that is gone or was rebuilt since the recording gives way to the
        matching file in the build-id cache or the debug directory, as perf does."""
        dso = self._get_file(path, expect_build_id)
        if expect_build_id and (dso is None or (dso.build_id and dso.build_id != expect_build_id)):
            alt = self.by_build_id(expect_build_id)
            if alt is not None:
                return alt
        return dso

    def by_build_id(self, build_id: str) -> ElfDso | None:
        """A DSO found by build-id alone (``BUILDID_DIR/.build-id/xx/yyyy/{elf,debug}``,
        ``DEBUG_ROOT/.build-id/xx/yyyy.debug``) whose build-id matches, or None."""
        if len(build_id) < 3:
            return None
        cands = []
        if self.buildid_dir:
            base = os.path.join(self.buildid_dir, ".build-id", build_id[:2], build_id[2:])
            cands += [os.path.join(base, "elf"), os.path.join(base, "debug")]
        cands.append(os.path.join(self.debug_root, ".build-id", build_id[:2], build_id[2:] + ".debug"))
        for cand in cands:
            if os.path.isfile(cand):
                d = self._get_file(cand, build_id)
                if d is not None and d.build_id == build_id:
                    return d
        return None

    def _get_file(self, path: str, expect_build_id: str | None) -> ElfDso | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._by_key:
                return self._by_key[key]
        try:
            dso = self._load(path, debug_root=self.debug_root, buildid_dir=self.buildid_dir,
                             expect_build_id=expect_build_id)
        except FormatError:
            dso = None
        with self._lock:
            self._by_key[key] = dso
            self.parsed += 1
        return dso


_SHARED: dict[tuple, DsoCache] = {}
_SHARED_LOCK = allocate_lock()


def shared_cache(debug_root: str = DEFAULT_DEBUG_ROOT,
                 buildid_dir: str | None = DEFAULT_BUILDID_DIR) -> DsoCache:
    """The process-wide :class:`DsoCache` for these search roots, so every
    :class:`~pmuscope.symbols.Symbolizer` of a run parses a binary only once."""
    key = (debug_root, buildid_dir)
    with _SHARED_LOCK:
        c = _SHARED.get(key)
        if c is None:
            c = _SHARED[key] = DsoCache(debug_root=debug_root, buildid_dir=buildid_dir)
        return c
