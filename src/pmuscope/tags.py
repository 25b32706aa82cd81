"""Software signals: tags a program writes and ``pmuscope observe --tags`` reads
with every counter sample (SHIM's software signals).

::

    from pmuscope import tags
    tags.set("phase", 2)          # an int64 ...
    tags.set("load", 0.75)        # ... or a float64; one store into shared memory

The channel is one 4 KiB shared-memory file, ``/dev/shm/pmuscope-tags-<pid>``
(or the file named by ``$PMUSCOPE_TAGS_FILE``, which ``observe --tags -- CMD``
sets for its command), created on the first :func:`set`. Native programs use
the single header :func:`include_dir`/``pmuscope_tags.h`` (same layout). A tag's
value is one aligned 8-byte store, so a reader never sees a torn value; the
reader copies the count and all values in one ``memcpy`` inside its
timestamp bracket, so the double-time check that makes a counter sample
trustable covers its tags too.

Layout (little-endian; ``LAYOUT`` below is the one source of truth, and the C
header is checked against it by the tests)::

    0    char  magic[8] = "PMUTAGS\\0"
    8    u32   version = 1          12  u32 nslots = 64
    16   u32   pid of the creator   20  u32 name_size = 48
    24   u32   registration lock (C writers)
    56   u64   count: tags registered (slots 0..count-1 are valid)
    64   i64/f64 values[64]
    576  u8    types[64]  (0 int64, 1 float64)
    640  char  names[64][48]  (NUL-terminated)
"""

from __future__ import annotations

import atexit
import mmap
import os
import threading
from pathlib import Path

from . import errors

__all__ = ["set", "get", "names", "open_channel", "close", "channel_path", "TagReader", "include_dir", "LAYOUT"]

MAGIC = b"PMUTAGS\0"
VERSION = 1
NSLOTS = 64
NAME_SIZE = 48
SIZE = 4096
LAYOUT = {"magic": 0, "version": 8, "nslots": 12, "pid": 16, "name_size": 20, "lock": 24, "count": 56,
          "values": 64, "types": 64 + 8 * NSLOTS, "names": 64 + 9 * NSLOTS, "size": SIZE}
ENV = "PMUSCOPE_TAGS_FILE"
INT, FLOAT = 0, 1

_lock = threading.Lock()
_slots: dict[str, tuple[memoryview, int]] = {}
_chan: dict[str, object] = {}


def channel_path(pid: int | None = None) -> str:
    """Where process ``pid``'s channel lives (this process: honours ``$PMUSCOPE_TAGS_FILE``)."""
    if pid is None:
        env = os.environ.get(ENV)
        if env:
            return env
        pid = os.getpid()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else os.environ.get("TMPDIR", "/tmp")
    return os.path.join(base, f"pmuscope-tags-{pid}")


def create_file(path: str, pid: int = 0) -> None:
    """Create an empty channel file at ``path`` (what ``observe --tags -- CMD`` does)."""
    head = bytearray(SIZE)
    head[0:8] = MAGIC
    head[8:24] = VERSION.to_bytes(4, "little") + NSLOTS.to_bytes(4, "little") + pid.to_bytes(4, "little") \
        + NAME_SIZE.to_bytes(4, "little")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(head)
    os.replace(tmp, path)


def open_channel() -> mmap.mmap:
    """This process's channel, created (or adopted, when ``$PMUSCOPE_TAGS_FILE``
    names one an observer made) on first use."""
    with _lock:
        m = _chan.get("map")
        if m is not None:
            return m  # type: ignore[return-value]
        path = channel_path()
        owned = ENV not in os.environ
        if owned or not os.path.exists(path):
            create_file(path, os.getpid())
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if m[0:8] != MAGIC:
            raise errors.FormatError(f"{path} is not a pmuscope tag channel")
        _chan.update(map=m, path=path, owned=owned, ints=memoryview(m).cast("q"), floats=memoryview(m).cast("d"))
        if owned:
            atexit.register(close)
        return m


def _register(name: str, value) -> tuple[memoryview, int]:
    m = open_channel()
    kind = FLOAT if isinstance(value, float) else INT
    raw = name.encode()
    if not raw or len(raw) >= NAME_SIZE or b"\0" in raw:
        raise errors.PmuscopeError(f"tag name must be 1-{NAME_SIZE - 1} bytes without NUL, got {name!r}")
    with _lock:
        if name in _slots:
            return _slots[name]
        count = int.from_bytes(m[56:64], "little")
        existing = {_name_at(m, i): i for i in range(count)}  # a name registered by an earlier open (C side)
        if name in existing:
            i = existing[name]
            kind = m[LAYOUT["types"] + i]
        else:
            if count >= NSLOTS:
                raise errors.PmuscopeError(f"tag channel is full ({NSLOTS} tags); cannot add {name!r}")
            i = count
            off = LAYOUT["names"] + i * NAME_SIZE
            m[off:off + NAME_SIZE] = raw.ljust(NAME_SIZE, b"\0")
            m[LAYOUT["types"] + i] = kind
            # publish last: a reader trusts slots below count
            m[56:64] = (count + 1).to_bytes(8, "little")
        view = _chan["floats" if kind == FLOAT else "ints"]
        _slots[name] = (view, 8 + i)  # type: ignore[assignment]
        return _slots[name]


def set(name: str, value: int | float) -> None:  # noqa: A001  (tags.set, as the API reads)
    """Set tag ``name`` to ``value`` (int64 or float64, fixed by the first set)."""
    try:
        view, i = _slots[name]
    except KeyError:
        view, i = _register(name, value)
    view[i] = value


def get(name: str) -> int | float:
    view, i = _slots[name]
    return view[i]


def names() -> list[str]:
    return list(_slots)


def close() -> None:
    """Unmap the channel, and remove its file when this process created it."""
    with _lock:
        m = _chan.pop("map", None)
        path, owned = _chan.pop("path", None), _chan.pop("owned", False)
        for k in ("ints", "floats"):
            v = _chan.pop(k, None)
            if v is not None:
                v.release()
        _slots.clear()
        if m is not None:
            m.close()  # type: ignore[union-attr]
        if owned and path:
            try:
                os.unlink(path)  # type: ignore[arg-type]
            except OSError:
                pass


def _name_at(buf, i: int) -> str:
    off = LAYOUT["names"] + i * NAME_SIZE
    return bytes(buf[off:off + NAME_SIZE]).split(b"\0", 1)[0].decode(errors="replace")


def include_dir() -> str:
    """The directory holding ``pmuscope_tags.h`` (``cc -I$(python3 -c ...)``)."""
    return str(Path(__file__).parent / "data" / "include")


class TagReader:
    """The observer's side: maps a channel read-only; :meth:`snapshot_into`
    copies ``count`` and every value (one contiguous 520-byte copy)."""

    def __init__(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise errors.PmuscopeError(
                f"no tag channel at {path}: the process must call pmuscope.tags.set(...) (or pmuscope_tag_set() "
                f"from pmuscope_tags.h) first, or run it as `observe --tags -- CMD`") from None
        try:
            self.map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        if self.map[0:8] != MAGIC:
            raise errors.FormatError(f"{path} is not a pmuscope tag channel (bad magic)")
        self.path = path
        import numpy as np

        #: [count, values...] as u64 words over the mapping
        self.words = np.frombuffer(self.map, dtype="<u8", count=1 + NSLOTS, offset=56)

    @classmethod
    def for_pid(cls, pid: int) -> "TagReader":
        return cls(channel_path(pid))

    def tags(self) -> list[tuple[str, int]]:
        """(name, type) of the registered slots, in slot order."""
        count = int(self.words[0])
        return [(_name_at(self.map, i), self.map[LAYOUT["types"] + i]) for i in range(min(count, NSLOTS))]

    def columns(self, snaps) -> dict[str, "object"]:
        """``tag:<name>`` → per-sample values from an (n, 1+NSLOTS) u64 array of
        snapshots: float tags as float64 (NaN before the tag was registered),
        int tags as int64 (0 before it was registered, as a fresh channel reads)."""
        import numpy as np

        out: dict[str, object] = {}
        count = snaps[:, 0]
        for i, (name, kind) in enumerate(self.tags()):
            col = snaps[:, 1 + i]
            vals = col.view(np.float64) if kind == FLOAT else col.view(np.int64)
            missing = count <= i
            if missing.any():
                vals = vals.copy()
                vals[missing] = np.nan if kind == FLOAT else 0
            out[f"tag:{name}"] = vals
        return out

    def close(self) -> None:
        self.words = None  # type: ignore[assignment]
        try:
            self.map.close()
        except BufferError:
            pass
