"""Parsed ELF symbol tables kept across runs, in the cache directory of
:mod:`pmuscope.system.cache` (the one the core kernel table is kept in).

Parsing a large library's symbols (libpython: ~5 ms, libc with its debug
file: ~2 ms) is most of what a report spends on user-space symbols; a kept
table is one read of a small file. An entry is used only when everything the
parse depended on is unchanged, all of it written into the entry and compared
byte for byte (:func:`elf_key`): the runtime file's identity (real path,
device, inode, size, mtime), the file the symbols were read from
(:func:`~pmuscope.symbols.dso.find_symtab`'s choice, which still runs: a debug
file that appeared since changes it) with its identity, section and how it
was found, ``include_objects``, the entry format and the identity of the
parsing code. A body checksum guards against damaged files.

Layout (little-endian; ``n`` symbols)::

    magic "PMELFS01", u64 n, u64 key bytes, u64 name bytes, u32 crc32 of the rest, u32 0
    key (padded to 8), starts u64[n], ends u64[n], name offsets u32[n + 1], names

Bounds: one file per (real path, ``include_objects``, format and parser:
two pmuscope versions on one machine keep an entry each), so a rebuilt or
upgraded library replaces its own entry; at most :data:`MAX_FILES` entries
and :data:`MAX_BYTES` in all (the oldest written go first). Everything is best
effort: an unreadable, damaged or foreign entry is parsed again (and
replaced), an unwritable directory costs only the parse.
"""

from __future__ import annotations

import os
import zlib

import numpy as np

from .table import SymbolTable

FORMAT = 1
MAGIC = b"PMELFS01"
_HEAD = 40
#: entries kept at most (files ``elf-*``), and bytes in all
MAX_FILES = 512
MAX_BYTES = 64 << 20
_TMP_AGE_NS = 60 * 10**9  # a temporary file older than this was left by a writer that died


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


_CODE: list[tuple] = []


def _code_identity() -> tuple:
    """What identifies the parsing code: the size and mtime of the modules
    whose result is kept (an edited or upgraded parser never reads an entry
    an older one wrote)."""
    if not _CODE:
        from . import dso, elf, table

        ids = []
        for mod in (elf, table, dso):
            try:
                st = os.stat(mod.__file__)
                ids.append((st.st_size, st.st_mtime_ns))
            except (OSError, TypeError):
                ids.append(None)
        _CODE.append(tuple(ids))
    return _CODE[0]


def elf_key(path: str, symfile: str, section: str, how: str, include_objects: bool) -> tuple[str, bytes] | None:
    """``(file name, key)`` of the entry for ``path``'s symbols read from
    ``symfile``; None when a stat fails or nothing is kept (``PMUSCOPE_CACHE_DIR`` empty)."""
    from ..system.cache import cache_dir

    if cache_dir() is None:
        return None
    rt = _identity(path)
    sf = rt if symfile == path else _identity(symfile)
    if rt is None or sf is None:
        return None
    key = repr((FORMAT, _code_identity(), rt, sf, section, how, bool(include_objects))).encode()
    # the parser's identity in the name too: two pmuscope versions on one machine keep an
    # entry each instead of replacing each other's on every run
    tag = repr((rt[0], bool(include_objects), FORMAT, _code_identity())).encode()
    return f"elf-{zlib.crc32(tag):08x}{zlib.adler32(tag):08x}-{int(bool(include_objects))}", key


def _path(name: str) -> str | None:
    from ..system.cache import cache_dir

    d = cache_dir()
    return os.path.join(d, f"{name}-{os.geteuid()}.bin") if d else None


def load(name: str, key: bytes) -> SymbolTable | None:
    """The kept table of entry ``name`` if it was stored under ``key``, else None."""
    path = _path(name)
    if path is None:
        return None
    try:
        with open(path, "rb", buffering=0) as f:
            data = f.readall()
    except OSError:
        return None
    return _decode(data, key)


def _decode(data: bytes, key: bytes) -> SymbolTable | None:
    if len(data) < _HEAD or data[:8] != MAGIC:
        return None
    n, klen, blen = np.frombuffer(data, "<u8", 3, 8).tolist()
    crc = int.from_bytes(data[32:36], "little")
    kpad = (klen + 7) & ~7
    body = _HEAD + kpad
    if n > len(data) or klen != len(key) or len(data) != body + 16 * n + 4 * (n + 1) + blen:
        return None
    if data[_HEAD:_HEAD + klen] != key or zlib.crc32(memoryview(data)[_HEAD:]) != crc:
        return None
    starts = np.frombuffer(data, "<u8", n, body).astype(np.uint64, copy=False)
    ends = np.frombuffer(data, "<u8", n, body + 8 * n).astype(np.uint64, copy=False)
    at = np.frombuffer(data, "<u4", n + 1, body + 16 * n).astype(np.uint32, copy=False)
    names = body + 16 * n + 4 * (n + 1)
    if int(at[0]) != 0 or int(at[-1]) != blen or (at[1:] < at[:-1]).any():
        return None

    def name_of(i: int) -> str:
        return data[names + int(at[i]):names + int(at[i + 1])].decode("utf-8", "replace")

    return SymbolTable(starts, ends, name_of)


def encode(key: bytes, starts: np.ndarray, ends: np.ndarray, offs: np.ndarray, lens: np.ndarray,
           strtab: bytes) -> list[bytes] | None:
    """The parts of an entry for the table with these columns (names: ``lens``
    bytes at ``offs`` in ``strtab``); None when it does not fit the format."""
    n = len(starts)
    lens = np.asarray(lens, dtype=np.int64)
    at = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=at[1:])
    total = int(at[-1])
    if total >= 1 << 32:
        return None
    if total:
        src = np.frombuffer(strtab, dtype=np.uint8)
        idx = np.repeat(np.asarray(offs, dtype=np.int64) - at[:-1], lens) + np.arange(total, dtype=np.int64)
        names = src[idx].tobytes()
    else:
        names = b""
    body = [key, b"\0" * (((len(key) + 7) & ~7) - len(key)),
            np.ascontiguousarray(starts, dtype="<u8").tobytes(), np.ascontiguousarray(ends, dtype="<u8").tobytes(),
            at.astype("<u4").tobytes(), names]
    crc = 0
    for part in body:
        crc = zlib.crc32(part, crc)
    head = MAGIC + np.array([n, len(key), total], dtype="<u8").tobytes() + crc.to_bytes(4, "little") + bytes(4)
    return [head, *body]


def store(name: str, parts: list[bytes] | None) -> bool:
    """Keep an entry (best effort), then bound the directory: what a dead
    writer left half-written goes, and the oldest ``elf-`` entries beyond
    :data:`MAX_FILES` files or :data:`MAX_BYTES` bytes."""
    path = _path(name) if parts is not None else None
    if path is None:
        return False
    from ..system.cache import store as _store

    d = os.path.dirname(path)
    suffix = f"-{os.geteuid()}.bin"

    def stale(fname: str) -> bool:
        if not (fname.startswith(("elf-", "vdso-")) and fname.endswith(".tmp") and suffix in fname):
            return False
        try:
            import time

            return time.time_ns() - os.stat(os.path.join(d, fname)).st_mtime_ns > _TMP_AGE_NS
        except OSError:
            return False

    if not _store(path, parts, stale):
        return False
    _bound(d, suffix, os.path.basename(path))
    return True


def _bound(d: str, suffix: str, mine: str) -> None:
    try:
        entries = []
        for fname in os.listdir(d):
            if fname.startswith("elf-") and fname.endswith(suffix) and fname != mine:
                try:
                    st = os.stat(os.path.join(d, fname))
                except OSError:
                    continue
                entries.append((st.st_mtime_ns, st.st_size, fname))
        total = sum(e[1] for e in entries) + os.stat(os.path.join(d, mine)).st_size
        entries.sort()
        count = len(entries) + 1
        for _, size, fname in entries:
            if count <= MAX_FILES and total <= MAX_BYTES:
                break
            try:
                os.unlink(os.path.join(d, fname))
            except OSError:
                pass
            count -= 1
            total -= size
    except OSError:
        pass


# --- the vdso ---------------------------------------------------------------------

def vdso_key(image: bytes, include_objects: bool = False) -> tuple[str, bytes] | None:
    """``(file name, key)`` of the kept table of the running kernel's vdso
    (one image per kernel: the boot id names the entry, the image itself is
    the key); None without a boot id."""
    from ..system.cache import boot_id

    boot = boot_id()
    if boot is None:
        return None
    key = repr((FORMAT, _code_identity(), "vdso", boot, bool(include_objects))).encode() + bytes(image)
    return f"vdso-{boot}", key


def store_vdso(name: str, parts: list[bytes] | None) -> bool:
    """Keep the vdso's table; the entries of earlier boots go."""
    path = _path(name) if parts is not None else None
    if path is None:
        return False
    from ..system.cache import store as _store

    suffix = f"-{os.geteuid()}.bin"
    return _store(path, parts, lambda fname: fname.startswith("vdso-") and suffix in fname)
