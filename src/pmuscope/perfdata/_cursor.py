"""A bounds-checked little reader over a byte buffer that raises
:class:`~pmuscope.errors.FormatError` naming the file, the absolute byte offset
and what was expected, so no malformed input ever surfaces as a
``struct.error``/``IndexError`` traceback or an oversized allocation."""

from __future__ import annotations

import struct

from ..errors import FormatError

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")


def format_error(source: str, offset: int, what: str) -> FormatError:
    """The one error shape of this package: ``FILE: at byte OFFSET: WHAT``."""
    return FormatError(f"{source}: at byte {offset}: {what}", path=source, offset=offset, expected=what)


class Cursor:
    """Sequential reads from ``buf[pos:end]``; ``base`` is the file offset of ``buf[0]``."""

    __slots__ = ("buf", "pos", "end", "base", "source", "what")

    def __init__(self, buf, source: str, *, base: int = 0, start: int = 0, end: int | None = None, what: str = ""):
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = start
        self.end = len(self.buf) if end is None else end
        self.base = base
        self.source = source
        self.what = what

    @property
    def offset(self) -> int:
        """Absolute file offset of the next byte."""
        return self.base + self.pos

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def error(self, what: str) -> FormatError:
        where = f"{self.what}: " if self.what else ""
        return format_error(self.source, self.offset, where + what)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise self.error(f"expected {what} ({n} bytes) but only {max(self.remaining, 0)} bytes remain")

    def u32(self, what: str = "u32") -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def i32(self, what: str = "s32") -> int:
        self.need(4, what)
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str = "u64") -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def bytes(self, n: int, what: str = "bytes") -> bytes:
        self.need(n, what)
        v = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return v

    def view(self, n: int, what: str = "bytes") -> memoryview:
        self.need(n, what)
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v

    def count(self, n: int, item_size: int, what: str) -> int:
        """Validate an element count read from the file against the bytes left
        (each element takes at least ``item_size`` bytes), so a bogus count can
        never drive a huge loop or allocation."""
        if n * item_size > self.remaining:
            raise self.error(
                f"{what} count {n} needs at least {n * item_size} bytes but only {self.remaining} remain"
            )
        return n

    def string(self, what: str = "perf_header_string") -> str:
        """``struct perf_header_string {u32 len; char str[len];}`` (NUL padded)."""
        n = self.u32(f"{what} length")
        raw = self.bytes(n, what)
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def string_list(self, what: str = "perf_header_string_list") -> list[str]:
        n = self.count(self.u32(f"{what} count"), 4, what)
        return [self.string(what) for _ in range(n)]
