"""The exception hierarchy: everything pmuscope raises derives from
:class:`PmuscopeError`, carries structured fields, and says what to do.

Exceptions are picklable (they are rebuilt from their constructor arguments)
and show their public module path in tracebacks.
"""

from __future__ import annotations

from typing import Any


class PmuscopeError(Exception):
    """Base of every error pmuscope raises. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def __reduce__(self):  # picklable with structured fields
        return (_rebuild, (type(self), self.message, self.fields))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type, message: str, fields: dict[str, Any]) -> PmuscopeError:
    obj = cls.__new__(cls)
    PmuscopeError.__init__(obj, message, **fields)
    return obj


class EventParseError(PmuscopeError, ValueError):
    """An event string could not be parsed. ``text`` is the whole string and
    ``pos`` the 0-based column of the offending token; ``str()`` shows a caret
    under it, the way a compiler points at a column."""

    exit_code = 2

    def __init__(self, reason: str, text: str = "", pos: int = 0, **fields: Any) -> None:
        fields.setdefault("reason", reason)
        fields["text"] = text
        fields["pos"] = pos
        if text:
            message = f"event syntax error: {reason}\n  {text}\n  {' ' * pos}^"
        else:
            message = f"event syntax error: {reason}"
        super().__init__(message, **fields)


class UnknownEventError(EventParseError):
    """The string is well formed but names an event nobody here knows."""


class EventNotSupportedError(PmuscopeError):
    """The kernel does not offer this event here (ENOENT, EOPNOTSUPP, ENODEV)."""


class NoHardwarePMUError(EventNotSupportedError):
    """A hardware event on a machine that exposes no hardware PMU."""


class PermissionDeniedError(PmuscopeError, PermissionError):
    """EACCES/EPERM from perf_event_open, with the paranoid level and the way out."""

    exit_code = 13


class InvalidAttrError(PmuscopeError):
    """EINVAL: the kernel rejected a field of perf_event_attr."""


class TooManyOpenFilesError(PmuscopeError):
    """EMFILE/ENFILE: the request needs more file descriptors than allowed."""


class ProcessGoneError(PmuscopeError, ProcessLookupError):
    """ESRCH: the pid/tid does not exist (or exited)."""


class ResourceBusyError(PmuscopeError):
    """EBUSY: another user holds the PMU exclusively (or a counter is pinned)."""


class FormatError(PmuscopeError):
    """Malformed binary input (perf.data, ring buffer, SPE stream): names the
    file, the byte offset and what was expected."""

    exit_code = 3


class OutputError(PmuscopeError):
    """An output file could not be created (a missing folder, permissions, a
    folder in the way ...); ``path``, ``errno`` and ``reason`` say which and
    why. Raised by :mod:`pmuscope.outfile`."""

    exit_code = 73  # EX_CANTCREAT


class OutputWriteError(OutputError):
    """Writing an output file failed after it was created (a full disk, a
    quota, an I/O error); the partial file was removed or cut back to whole rows."""

    exit_code = 74  # EX_IOERR


class RingBufferLost(PmuscopeError):
    """Records were lost because a ring buffer overflowed."""


class MissingExtraError(PmuscopeError, ImportError):
    """An optional dependency is missing; names the pip extra that provides it."""

    def __init__(self, module: str, extra: str, purpose: str = "") -> None:
        what = f" for {purpose}" if purpose else ""
        super().__init__(
            f"the Python package {module!r} is needed{what}: pip install 'pmuscope[{extra}]'",
            module=module,
            extra=extra,
        )


def require(module: str, extra: str, purpose: str = "") -> Any:
    """Import an optional dependency or raise :class:`MissingExtraError`."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(module, extra, purpose) from err


for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, PmuscopeError):
        _cls.__module__ = "pmuscope"
