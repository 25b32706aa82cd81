"""Timing knobs of the calling thread, for loops that wake on deadlines
(``monitor``'s sampling thread, ``observe``'s observer): the timer slack and
SCHED_FIFO priority 1."""

from __future__ import annotations

import ctypes
import os

from ..errors import PmuscopeError

PR_SET_TIMERSLACK = 29


def set_timer_slack(ns: int = 1000) -> None:
    """Lower this thread's timer slack (50 µs by default) so 1 ms deadlines
    are met within microseconds (prctl(2) PR_SET_TIMERSLACK)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)
    except Exception:  # pragma: no cover
        pass


def request_fifo(required: bool, thread: str) -> bool:
    """Give this thread SCHED_FIFO priority 1. True when it has it; False when
    refused and not ``required``; a refusal when ``required`` is a
    :class:`PmuscopeError` naming ``thread`` (e.g. "the sampling thread")."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # 0: this thread
    except (OSError, AttributeError) as err:
        if required:
            raise PmuscopeError(f"cannot give {thread} SCHED_FIFO priority ({err}); run as root or with "
                                "CAP_SYS_NICE, or pass realtime=False") from err
        return False
    return True
