"""Output files: created the way perf creates perf.data, with one-line errors.

Every file pmuscope writes (perf.data, stat/monitor output, exports, reports,
SPE tables, profile outputs) goes through :func:`open_output`. The rules follow
perf's ``tools/perf/util/data.c`` (``check_backup()``, ``open_file_write()``):

* ``-`` is standard output.
* An existing path is moved aside to ``PATH.old`` (``backup=True``, the default)
  — a regular file that is not empty, or a symbolic link, which is renamed
  itself: pmuscope never writes through a link (perf renames the link too when
  its target is not empty). An empty regular file is replaced.
* The new file is created ``O_CREAT|O_EXCL|O_NOFOLLOW``, with mode ``perm``
  under the umask (``0o600`` for recordings, as perf writes perf.data).
* ``atomic=True`` (the default): the content goes to a hidden temporary file in
  the same folder, renamed to PATH when :meth:`OutputFile.close` succeeds, so an
  error or a crash never leaves a partial PATH that looks whole (the ``.old``
  move happens at that rename, so a failed run keeps the previous file).
  ``atomic=False`` is for time series that must survive ``kill -9``: the file is
  PATH itself, and :meth:`OutputFile.checkpoint` marks the end of whole rows;
  on an error the file is cut back to the last checkpoint.
* A character device or a FIFO (``/dev/null``, a named pipe, ``/dev/stdout``) is
  written in place.
* Every ``OSError`` becomes an :class:`OutputError` — one line with the path, the
  reason and what to do; exit status 73 when the file cannot be created, 74 when
  writing it fails (a full disk).
"""

from __future__ import annotations

import errno as _errno
import io
import os
import stat as _stat
import sys
from typing import IO, Any

from .errors import OutputError, OutputWriteError

__all__ = ["OutputError", "OutputWriteError", "OutputFile", "open_output", "write_output", "output_error",
           "backup_path"]


def _remove_stale_temps(folder: str, base: str) -> None:
    """Remove the hidden temporary files of PATH (``.BASE.PID.N.tmp``) that a run
    killed before its rename left behind (``kill -9``, a power cut): those of
    processes that no longer exist, owned by this user, regular files. One
    warning names them: their content was never a whole file."""
    prefix, gone = f".{base}.", []
    try:
        names = [n for n in os.listdir(folder or ".") if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        parts = name[len(prefix):-4].split(".")
        if len(parts) != 2 or not all(x.isdigit() for x in parts):
            continue
        pid = int(parts[0])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still running (or not ours to signal): its file, not a leftover
        except ProcessLookupError:
            pass
        except OSError:
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if _stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(path)
                gone.append(name)
        except OSError:
            pass
    if gone:
        import warnings

        warnings.warn(f"removed {', '.join(gone)} in {folder or '.'}: partial output of an interrupted run",
                      stacklevel=4)


def _folder(path: str) -> str:
    return os.path.dirname(os.path.abspath(path)) or "/"


def _hint(err: OSError, path: str) -> str:
    code = err.errno
    folder = _folder(path)
    if code == _errno.ENOENT:
        if not os.path.isdir(folder):
            return f"the folder {folder} does not exist: create it or choose another path"
        return f"files cannot be created in {folder}: choose another path"
    if code == _errno.ENOTDIR:
        return "a part of the path is not a folder: choose another path"
    if code in (_errno.EACCES, _errno.EPERM):
        return "no permission to write there: choose a folder you can write to"
    if code == _errno.EROFS:
        return "the file system is read-only: choose another path"
    if code == _errno.EISDIR:
        return "it is a folder: give a file name"
    if code in (_errno.ENOSPC, _errno.EDQUOT):
        return "free some space or write to another file system"
    if code == _errno.EFBIG:
        return "the file system does not take files this large: write elsewhere"
    if code == _errno.ENAMETOOLONG:
        return "use a shorter name"
    if code == _errno.ELOOP:
        return "it is a symbolic link: give the file itself, or another path"
    if code == _errno.EXDEV:
        return "choose another path"
    return "choose another path"


def output_error(err: OSError, path: str, action: str = "create", note: str = "") -> OutputError:
    """The one-line :class:`OutputError` for ``err`` on ``path``. ``action`` is
    ``create`` or ``write`` (write failures are :class:`OutputWriteError`)."""
    reason = err.strerror or str(err)
    cls = OutputWriteError if action == "write" else OutputError
    msg = f"cannot {action} {path}: {reason}; {_hint(err, path)}"
    if note:
        msg += f" ({note})"
    return cls(msg, path=path, errno=err.errno, reason=reason)


def backup_path(path: str) -> str:
    """Where an existing PATH is moved: ``PATH.old`` (perf's name)."""
    return path + ".old"


def _is_stream(st: os.stat_result) -> bool:
    return _stat.S_ISCHR(st.st_mode) or _stat.S_ISFIFO(st.st_mode)


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == _errno.ENOTDIR:
            return None  # creating will say so
        raise output_error(err, path) from None


def _stream_target(path: str, st: os.stat_result | None) -> bool:
    """True when PATH is (or links to) a character device or FIFO."""
    if st is None:
        return False
    if _stat.S_ISLNK(st.st_mode):
        try:
            return _is_stream(os.stat(path))
        except OSError:
            return False
    return _is_stream(st)


def _move_aside(path: str, backup: bool) -> None:
    """perf's check_backup(): a non-empty file or a link goes to PATH.old; an
    empty file is removed (``backup=False``: anything is removed)."""
    st = _lstat(path)
    if st is None:
        return
    if _stat.S_ISDIR(st.st_mode):
        raise output_error(OSError(_errno.EISDIR, os.strerror(_errno.EISDIR)), path)
    keep = backup and (_stat.S_ISLNK(st.st_mode) or st.st_size > 0)
    try:
        if keep:
            os.replace(path, backup_path(path))
        else:
            os.unlink(path)
    except OSError as err:
        what = f"move the existing {path} to {backup_path(path)}" if keep else f"replace the existing {path}"
        raise OutputError(f"cannot {what}: {err.strerror}; {_hint(err, path)}",
                          path=path, errno=err.errno, reason=err.strerror) from None


#: how a created fd becomes a file object (tests put a full-disk fault here)
_fdopen = os.fdopen

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class OutputFile:
    """A file being written; see the module docstring. Behaves like a file
    object (``write``, ``flush``, ``seek``, ``tell``, ``fileno``) whose errors
    are :class:`OutputError`. :meth:`close` completes it (renames the temporary
    file into place); :meth:`abort` removes what is not whole. As a context
    manager, an exception aborts."""

    def __init__(self, path: str | os.PathLike, mode: str = "w", *, perm: int = 0o666, atomic: bool = True,
                 backup: bool = True, append: bool = False, encoding: str = "utf-8", newline: str | None = None,
                 buffering: int = -1) -> None:
        if mode not in ("w", "wb"):
            raise ValueError(f"mode {mode!r}: 'w' or 'wb'")
        self.path = os.fspath(path)
        self.name = self.path
        self.binary = mode == "wb"
        self.atomic = False
        self.backup = backup
        self.tmp_path: str | None = None
        self._owned = True
        self._good = 0  # bytes known to be whole (atomic=False)
        self._checkpointed = False
        self._kind = "file"  # or "stream" (device/FIFO: never removed), "append"
        self.closed = False
        if self.path == "-":
            self._owned = False
            self._f: Any = sys.stdout.buffer if self.binary else sys.stdout
            return
        st = _lstat(self.path)
        if st is not None and _stat.S_ISDIR(st.st_mode):
            raise output_error(OSError(_errno.EISDIR, os.strerror(_errno.EISDIR)), self.path)
        if _stream_target(self.path, st):
            flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
            fd = self._open_fd(self.path, flags, perm)
            self._kind = "stream"
        elif append:
            if st is not None and _stat.S_ISLNK(st.st_mode):
                raise output_error(OSError(_errno.ELOOP, "not appending through a symbolic link"), self.path)
            fd = self._open_fd(self.path, (_CREATE & ~os.O_EXCL) | os.O_APPEND, perm)
            self._kind = "append"
            self._checkpointed = True  # an error cuts the file back to what it held
            self._good = os.fstat(fd).st_size
        elif atomic:
            self.atomic = True
            fd = self._open_temp(perm)
        else:
            _move_aside(self.path, backup)
            fd = self._open_fd(self.path, _CREATE, perm)
        try:
            raw = _fdopen(fd, "wb", buffering=buffering if buffering != -1 else io.DEFAULT_BUFFER_SIZE * 8)
        except BaseException:
            os.close(fd)
            raise
        self._bin = raw
        self._f = raw if self.binary else io.TextIOWrapper(raw, encoding=encoding, newline=newline,
                                                             write_through=False)

    def _open_fd(self, path: str, flags: int, perm: int) -> int:
        try:
            return os.open(path, flags, perm)
        except OSError as err:
            raise output_error(err, self.path) from None

    def _open_temp(self, perm: int) -> int:
        folder, base = os.path.split(self.path)
        _remove_stale_temps(folder, base)
        for i in range(100):
            tmp = os.path.join(folder, f".{base}.{os.getpid()}.{i}.tmp")
            try:
                fd = os.open(tmp, _CREATE, perm)
            except FileExistsError:
                continue
            except OSError as err:
                raise output_error(err, self.path) from None
            self.tmp_path = tmp
            return fd
        raise output_error(OSError(_errno.EEXIST, os.strerror(_errno.EEXIST)), self.path)

    # -- file protocol ----------------------------------------------------------------
    @property
    def file(self) -> IO:
        """The underlying (buffered) file object, for libraries that need one;
        wrap its calls in :meth:`guard`."""
        return self._f

    def _fail(self, err: OSError) -> OutputError:
        note = ""
        if self._kind == "file" and not self.atomic and self._checkpointed:
            note = f"{self.path} keeps the {self._good} bytes of whole rows written before"
        self.abort()
        return output_error(err, self.path, "write", note)

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except OSError as err:
            if err.errno == _errno.EPIPE or not self._owned:
                raise
            raise self._fail(err) from None

    def guard(self, fn, *args, **kwargs):
        """Call ``fn`` (a library writing to :attr:`file`), turning its OSError
        into :class:`OutputWriteError` after aborting."""
        try:
            return fn(*args, **kwargs)
        except OSError as err:
            if not self._owned:
                raise
            raise self._fail(err) from None

    def flush(self) -> None:
        self.guard(self._f.flush)

    def seek(self, *args) -> int:
        return self.guard(self._f.seek, *args)

    def tell(self) -> int:
        return self._f.tell()

    def fileno(self) -> int:
        return self._f.fileno()

    def checkpoint(self) -> None:
        """Flush: what was written so far is whole (a kill after this keeps it;
        an error later cuts the file back to here)."""
        self.flush()
        if self._owned and not self.closed:
            self._checkpointed = True
            try:
                self._good = os.fstat(self._f.fileno()).st_size
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        """Complete the file: flush, close, and (atomic) move the previous PATH
        to PATH.old and rename the temporary file to PATH. Idempotent."""
        if self.closed:
            return
        if not self._owned:
            self.closed = True
            try:
                self._f.flush()
            except BrokenPipeError:
                raise
            return
        try:
            self._f.flush()
            self._f.close()
        except OSError as err:
            raise self._fail(err) from None
        self.closed = True
        if self.tmp_path is not None:
            try:
                st = _lstat(self.path)
                if st is not None and _stat.S_ISDIR(st.st_mode):
                    raise output_error(OSError(_errno.EISDIR, os.strerror(_errno.EISDIR)), self.path)
                if st is not None and self.backup and (_stat.S_ISLNK(st.st_mode) or st.st_size > 0):
                    _move_aside(self.path, True)
                os.replace(self.tmp_path, self.path)
            except OutputError:
                self._unlink_tmp()
                raise
            except OSError as err:
                self._unlink_tmp()
                raise output_error(err, self.path) from None
            self.tmp_path = None

    commit = close

    def _unlink_tmp(self) -> None:
        if self.tmp_path is not None:
            try:
                os.unlink(self.tmp_path)
            except OSError:
                pass
            self.tmp_path = None

    def abort(self) -> None:
        """Give up: remove the temporary file (atomic), or cut PATH back to the
        last :meth:`checkpoint` (removed when there was none)."""
        if not self._owned:
            self.closed = True
            return
        was_closed = self.closed
        self.closed = True
        if not was_closed:
            # closing flushes the buffer (maybe failing again): what follows
            # removes or cuts it anyway; the fd is closed either way
            try:
                self._f.close()
            except (OSError, ValueError):
                pass
        if self.tmp_path is not None:
            self._unlink_tmp()
        elif not was_closed and self._kind != "stream":
            try:
                if self._checkpointed:
                    os.truncate(self.path, self._good)
                else:
                    os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> "OutputFile":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        # never completed (an exception escaped the caller): leave nothing half-written
        if not getattr(self, "closed", True) and getattr(self, "atomic", False):
            try:
                self.abort()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


def open_output(path: str | os.PathLike, mode: str = "w", **kwargs) -> OutputFile:
    """Create an output file with perf's rules; see :class:`OutputFile`."""
    return OutputFile(path, mode, **kwargs)


def write_output(path: str | os.PathLike, data: bytes | str, **kwargs) -> str:
    """Write ``data`` as the whole content of ``path`` (temporary file, then
    rename); returns the path."""
    with open_output(path, "wb" if isinstance(data, (bytes, bytearray, memoryview)) else "w", **kwargs) as f:
        f.write(data)
    return os.fspath(path)
