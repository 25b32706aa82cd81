"""Progress of long work on a terminal: one line on stderr, redrawn in place.

Shown only when stderr is a terminal and the work has already taken
``PMUSCOPE_PROGRESS_DELAY`` seconds (0.5 by default: quick runs stay quiet);
never when stderr is piped or redirected. ``PMUSCOPE_PROGRESS=0`` turns it
off, ``=1`` turns it on even without a terminal (for logs and tests). The line
is cleared when the work ends, so the output that follows is unchanged.
"""

from __future__ import annotations

import os
import sys
import time
from _thread import allocate_lock
from contextlib import contextmanager
from typing import Iterable, Iterator, TextIO


def enabled(stream: TextIO | None = None) -> bool:
    forced = os.environ.get("PMUSCOPE_PROGRESS")
    if forced is not None:
        return forced not in ("", "0")
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _delay() -> float:
    try:
        return float(os.environ.get("PMUSCOPE_PROGRESS_DELAY", "0.5"))
    except ValueError:
        return 0.5


def _mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


class Progress:
    """``label``: what is being done; ``total``: bytes (or None: unknown)."""

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 show: bool | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.show = enabled(self.stream) if show is None else show
        self.done = 0
        self.t0 = time.monotonic()
        self.delay = _delay()
        self._last = 0.0
        self._drawn = False
        self._lock = allocate_lock()

    def update(self, n: int = 0, *, force: bool = False) -> None:
        """Add ``n`` units done; redraw at most 10 times a second."""
        self.done += n
        if not self.show:
            return
        now = time.monotonic()
        if now - self.t0 < self.delay or (not force and now - self._last < 0.1):
            return
        self._last = now
        el = now - self.t0
        if self.total:
            pct = min(100.0, 100.0 * self.done / self.total)
            text = f"{self.label}: {pct:5.1f}%  {_mib(self.done)} of {_mib(self.total)}  {el:.1f}s"
        elif self.done:
            text = f"{self.label}: {_mib(self.done)}  {el:.1f}s"
        else:
            text = f"{self.label}... {el:.1f}s"
        with self._lock:
            self.stream.write(f"\r\x1b[K{text}")
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track_chunks(chunks: Iterable, total: int | None, label: str) -> Iterator:
    """Pass ``(offset, buffer)`` chunks through, counting their bytes."""
    prog = Progress(label, total)
    if not prog.show:
        yield from chunks
        return
    try:
        for item in chunks:
            yield item
            prog.update(len(item[1]))
        prog.update(0, force=True)  # the last state, however soon after the one before
    finally:
        prog.close()


@contextmanager
def activity(label: str) -> Iterator[Progress]:
    """Elapsed time of work that reports no amounts (a ticking line)."""
    prog = Progress(label)
    stop = t = None
    if prog.show:  # else no thread (nor the threading module): there is nothing to draw
        import threading

        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(0.2):
                prog.update()

        t = threading.Thread(target=tick, name="pmuscope-progress", daemon=True)
        t.start()
    try:
        yield prog
    finally:
        if t is not None:
            stop.set()
            t.join()
        prog.close()
