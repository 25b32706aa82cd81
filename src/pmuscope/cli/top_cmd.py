"""``pmuscope top``: live system-wide (or -p) sampling with a refreshing symbol table, like perf top.

    pmuscope top                        # the whole machine, refreshed every 2 s (q or Ctrl-C to quit)
    pmuscope top -p 1234 -d 1           # one process, every second
    pmuscope top --once --json -d 3     # one snapshot after 3 s, for scripts
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys

from ..errors import PmuscopeError

USES_NUMPY = True
HELP = "live sampling with a symbol table refreshed every -d seconds, like perf top (--stdio, --once --json)"
DESCRIPTION = __doc__ + """
Samples cycles where the hardware PMU can, else cpu-clock (as perf top falls back), on every CPU or
the processes of -p. Entries decay by 7/8 per refresh as in perf top (-z: show only the last interval).
On a terminal the screen is redrawn in place; piped or with --stdio each refresh is printed in turn.
--once prints one snapshot after -d seconds and exits; with --json it is one object
{event, target, sort, interval, samples, total_samples, lost, rows:[{overhead, samples, period, <keys>}]}.
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("-e", "--event", metavar="EVENTS", help="event list (default cycles, or cpu-clock without a PMU)")
    p.add_argument("-p", "--pid", metavar="PID[,PID]", help="sample these processes instead of the whole machine")
    p.add_argument("-C", "--cpu", metavar="LIST", help="sample these CPUs only")
    p.add_argument("-F", "--freq", type=int, metavar="HZ", help="samples per second (default 4000)")
    p.add_argument("-d", "--delay", type=float, default=2.0, metavar="SECONDS", help="refresh every SECONDS (2)")
    p.add_argument("-s", "--sort", default="dso,sym", metavar="KEYS", help="sort keys (comm,pid,tid,dso,sym,cpu; "
                                                                            "default dso,sym like perf top)")
    p.add_argument("-z", "--zero", action="store_true", help="show each interval alone (no decay)")
    p.add_argument("--stdio", action="store_true", help="print each refresh as text (no screen redraw)")
    p.add_argument("--once", action="store_true", help="one snapshot after -d seconds, then exit")
    p.add_argument("-n", "--count", type=int, metavar="N", help="stop after N refreshes")
    p.add_argument("--rows", type=int, metavar="N", help="rows to show (default: the terminal's height)")
    p.add_argument("--json", action="store_true", help="JSON output (one object per refresh, a line each)")


def run(args: argparse.Namespace) -> int:
    from ..profile.report import parse_sort
    from ..top import Top, format_top, top_json
    from .report_cmd import _ints

    import math

    if not (math.isfinite(args.delay) and 0.01 <= args.delay <= 86_400):
        raise PmuscopeError(f"-d {args.delay}: the refresh delay must be between 0.01 and 86400 seconds")
    if args.count is not None and args.count < 1:
        raise PmuscopeError(f"-n {args.count}: the number of refreshes must be at least 1")
    if args.rows is not None and not 1 <= args.rows <= 1_000_000:
        raise PmuscopeError(f"--rows {args.rows}: must be at least 1")
    if args.freq is not None and args.freq <= 0:
        raise PmuscopeError(f"-F {args.freq}: the sample frequency must be positive")
    sort = parse_sort(args.sort)
    pids = _ints(args.pid, "pid") if args.pid else None
    top = Top(args.event, pid=pids, cpus=args.cpu, freq=args.freq, sort=sort, delay=args.delay, zero=args.zero)
    tty = sys.stdout.isatty() and not args.stdio and not args.json
    stopped: list[int] = []

    def on_signal(signum, _frame):
        stopped.append(signum)
        top.rec.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    count = 1 if args.once else args.count
    keys = _KeyReader(lambda: (stopped.append(0), top.rec.stop())) if tty and sys.stdin.isatty() else None
    if tty:
        sys.stdout.write("\x1b[?1049h\x1b[?25l")  # the alternate screen, no cursor (left as it was on exit)
    try:
        if keys is not None:
            keys.start()
        top.start()
        for note in top.notes:
            print(f"pmuscope top: note: {note}", file=sys.stderr)
        done = 0
        while not stopped:
            snap = top.refresh()
            done += 1
            if args.json:
                sys.stdout.write(top_json(snap) + "\n")
            else:
                size = shutil.get_terminal_size((120, 40))
                rows = args.rows or (max(size.lines - 5, 5) if tty else 40)
                text = format_top(snap, rows=rows, width=size.columns if tty else None)
                sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + text + ("" if tty else "\n"))
            sys.stdout.flush()
            if count is not None and done >= count:
                break
            if top.rec._finished(None):
                break  # the processes of -p are gone
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if keys is not None:
            keys.close()
        if tty:
            sys.stdout.write("\x1b[?25h\x1b[?1049l")
            sys.stdout.flush()
        top.close()
    return 0


class _KeyReader:
    """q on the terminal ends top: stdin in cbreak mode, read by a thread."""

    def __init__(self, on_quit) -> None:
        import threading

        self.on_quit = on_quit
        self.fd = sys.stdin.fileno()
        self.saved = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pmuscope-top-keys", daemon=True)

    def start(self) -> None:
        import termios
        import tty as _tty

        try:
            self.saved = termios.tcgetattr(self.fd)
            _tty.setcbreak(self.fd)
        except termios.error:
            return
        self._thread.start()

    def _run(self) -> None:
        import os
        import select

        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                ch = os.read(self.fd, 1)
                if ch in (b"q", b"Q", b""):
                    self.on_quit()
                    return

    def close(self) -> None:
        import termios

        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1)
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
