"""Start a command corked, so counters can be attached before it runs.

perf's ``evlist__prepare_workload`` approach: fork; the child blocks reading a
"cork" pipe; the parent opens the events on the child's pid with
``disabled=1, enable_on_exec=1``, then writes one byte. The child execs and the
kernel enables the counters at exec, so nothing of the parent (or of Python's
fork path) is counted. Exec failures come back through a CLOEXEC pipe (EOF
means the exec succeeded).
"""

from __future__ import annotations

import os
import resource
import struct
from typing import Sequence

from .. import errors


class Workload:
    """A forked child waiting to exec ``argv``. ``start()`` releases it,
    ``wait()`` reaps it (exit status; ``rusage`` holds its resource usage)."""

    def __init__(self, argv: Sequence[str], env: dict | None = None, cwd: str | None = None) -> None:
        if not argv:
            raise errors.PmuscopeError("no command given to run")
        self.argv = [str(a) for a in argv]
        self.started = False
        self.status: int | None = None
        self.rusage: resource.struct_rusage | None = None
        self.start_ns = 0
        self.end_ns = 0
        cork_r, cork_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(cork_w)
                os.close(err_r)
                # the C module under `signal` (which builds enums at import, ~1 ms here, on the
                # way to the exec the parent waits for)
                import _signal

                _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
                if os.read(cork_r, 1) != b"g":
                    os._exit(127)  # cancelled: the parent closed the cork
                os.close(cork_r)
                if cwd:
                    os.chdir(cwd)
                if env is None:
                    os.execvp(self.argv[0], self.argv)
                else:
                    os.execvpe(self.argv[0], self.argv, env)
            except OSError as err:
                try:
                    os.write(err_w, struct.pack("=i", err.errno or 0))
                finally:
                    os._exit(127)
            except BaseException:
                os._exit(127)
            os._exit(127)
        os.close(cork_r)
        os.close(err_w)
        self.pid = pid
        self._cork = cork_w
        self._err = err_r

    def start(self) -> None:
        """Let the child exec. Raises if the command cannot be executed."""
        if self.started:
            return
        self.started = True
        import time

        self.start_ns = time.monotonic_ns()
        os.write(self._cork, b"g")
        os.close(self._cork)
        data = os.read(self._err, 4)  # EOF at a successful exec (the pipe is CLOEXEC)
        os.close(self._err)
        if data:
            (eno,) = struct.unpack("=i", data)
            self.wait()
            err = errors.PmuscopeError(f"cannot run {self.argv[0]!r}: {os.strerror(eno)}", errno=eno, command=self.argv)
            err.exit_code = 127  # the shell's "command not found / not executable"
            raise err

    def cancel(self) -> None:
        """Kill a child that was never started."""
        if self.started or self.status is not None:
            return
        self.started = True
        try:
            os.close(self._cork)
            os.close(self._err)
        except OSError:
            pass
        self.wait()

    def poll(self) -> int | None:
        """The exit status if the child has exited, else None (non-blocking)."""
        if self.status is None:
            self._wait(os.WNOHANG)
        return self.status

    def wait(self) -> int:
        """Block until the child exits; returns its exit status (128+N when
        killed by signal N, the shell's convention)."""
        while self.status is None:
            self._wait(0)
        return self.status

    def _wait(self, options: int) -> None:
        import time

        pid, status, rusage = os.wait4(self.pid, options)
        if pid == 0:
            return
        self.end_ns = time.monotonic_ns()
        self.rusage = rusage
        if os.WIFSIGNALED(status):
            self.status = 128 + os.WTERMSIG(status)
        else:
            self.status = os.waitstatus_to_exitcode(status)

    def send_signal(self, sig: int) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def pidfd(self) -> int | None:
        """A pidfd for poll() (Linux 5.3+), or None."""
        try:
            return os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return None

    def __repr__(self) -> str:
        return f"Workload({self.argv!r}, pid={self.pid}, status={self.status})"
