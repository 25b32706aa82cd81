"""What the recording commands (record, profile, mem record) share: running a
:class:`~pmuscope.sampling.Recorder` until its command exits, the duration
passes, or SIGINT/SIGTERM arrives — a signal stops it cleanly and the file stays
valid — and turning the outcome into an exit status."""

from __future__ import annotations

import signal
import sys


def run_recorder(rec, duration: float | None, prog: str):
    """Start ``rec`` and run it; prints the recorder's notes as ``prog: note: ...``.
    Returns ``(result, interrupted)``."""
    if duration is not None and not 0 < duration <= 10 * 365 * 86_400:
        from ..errors import PmuscopeError

        raise PmuscopeError(f"--duration {duration:g}: must be a positive number of seconds")
    interrupted: list[int] = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        rec.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rec.start()
        for note in rec.notes:
            print(f"{prog}: note: {note}", file=sys.stderr)
        result = rec.run(duration)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return result, bool(interrupted)


def exit_status(result, interrupted: bool) -> int:
    """The recorded command's exit status (pmuscope's own), 0 when stopped by a signal."""
    if result.exit_status is not None and not interrupted:
        return result.exit_status
    return 0
