"""The monitor's kernel timer: a cpu-clock sampling leader per CPU whose own
hrtimer interrupt writes the group's counts into that CPU's ring buffer.

The user loop (:mod:`.monitor`) wakes a thread at every deadline and reads
every CPU's group: one timer wake-up per interval plus, per remote CPU, an IPI
(``perf_event_read`` → ``smp_call_function_single``). Here each CPU gets a
group led by a ``cpu-clock`` event opened for sampling with ``sample_period``
= the interval in ns and ``PERF_SAMPLE_TIME | PERF_SAMPLE_READ`` with
``PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING | ID``; the
monitored events are its members. What the kernel does with it
(``kernel/events/core.c``):

- ``cpu_clock_event_add`` → ``perf_swevent_start_hrtimer`` starts a pinned
  hard hrtimer of ``max(10 µs, sample_period)`` when the group goes on the
  CPU (at enable); ``perf_swevent_hrtimer`` re-arms it with
  ``hrtimer_forward_now`` (the grid does not drift; a late expiry skips whole
  periods) and calls ``__perf_event_overflow`` → ``perf_output_sample`` →
  ``perf_output_read_group``, which reads every member on this CPU (no IPI).
- A per-CPU event's context is the CPU's, scheduled whether or not a task
  runs: the hrtimer fires on an idle CPU too (the sample is only suppressed
  for ``exclude_idle``/``exclude_user``/``exclude_kernel``, none of which the
  leader sets).
- Throttling: ``__perf_event_account_interrupt`` stops an event that
  overflowed ``max_samples_per_tick`` = ``perf_event_max_sample_rate / HZ``
  times since the CPU's last tick (``perf_throttled_seq``, advanced only by
  ``perf_event_task_tick``) and writes ``PERF_RECORD_THROTTLE``; the CPU's
  next tick restarts it (``PERF_RECORD_UNTHROTTLE``) on a new phase. 1 kHz is
  far below the default 100 kHz per tick-period, but with ``NO_HZ_IDLE`` an
  idle CPU stops its tick, and the 1 kHz hrtimer does not keep it
  (``tick_nohz_next_event`` looks only at timer-wheel timers under high-res
  timers): after 400 expiries (HZ=250, the default rate) of unbroken idle the
  leader is throttled and stays so until that CPU ticks again. The drain
  therefore unthrottles a CPU whose THROTTLE record it reads, with
  ``PERF_EVENT_IOC_PERIOD`` (``__perf_event_period`` clears the throttle and
  restarts the timer), and drains every 50 ms from then on; the intervals in
  between are skipped (and counted, and said). Raising
  ``kernel.perf_event_max_sample_rate`` lengthens the idle stretch allowed.
  The kernel also lowers that sysctl when perf interrupts run long, so the
  rate is checked at open.
- A full ring drops samples and later writes ``PERF_RECORD_LOST`` with the
  number lost: counted in :attr:`TimerAssembler.lost` and reported, the
  intervals they held become skipped ones (counts are cumulative, so the next
  row holds their counts; nothing is lost from the sums).
- Groups: the software leader keeps software and tracepoint members in the
  software context (never multiplexed). A hardware member moves the whole
  group to the CPU PMU's context (``move_group`` in ``perf_event_open``),
  where it can be multiplexed — the timer would stop with it. The monitor
  opens the leader ``pinned`` (the group is on the PMU all the time or in
  error, never rotated, and not flipped out and back in when a task with
  pinned events of its own is switched in); ``auto`` does not choose this
  mode for hardware events.
- On this KVM guest about 0.5-1 % of one CPU's expiries write no sample while
  the next ones are on the grid (no LOST or THROTTLE record; ``perf record -a
  -e cpu-clock -c 1000000`` shows the same gaps): those are skipped intervals.

Rows: interval *k* of the run ends at ``t0 + k * interval`` (``t0``: the
monotonic time just before the CPUs' groups are enabled). Each CPU's timer
runs on its own grid (offset from ``t0`` by the enabling skew, µs); its
``k``-th expiry gives that CPU's counts at the end of interval *k*. A row's
``timestamp`` is the nominal end of its interval (the same for every CPU, as in
the user loop), ``interval_ms`` the nominal span, ``time_enabled`` the exact
span the CPU's counts cover (the leader's enabled-time delta), ``late`` whether
that CPU's sample came more than the tolerance after its own grid point. An
interval is delivered when every CPU has a sample for it; a missing sample
(a vCPU descheduled past a whole period, a throttle, a lost record) makes the
next row span the gap (``skipped``, and ``late`` for every CPU), as a late
user-loop wake-up does.
"""

from __future__ import annotations

import struct
from functools import reduce
from typing import Sequence

import numpy as np

from ..errors import FormatError, PmuscopeError
from ..kernel import abi

__all__ = ["leader_attr", "member_attr", "decode_records", "TimerAssembler", "choose_timer", "ring_pages",
           "AUTO_MAX_INTERVAL_NS", "READ_FORMAT", "SAMPLE_TYPE"]

#: ``auto`` picks the kernel timer at intervals up to this (ns): where the
#: user loop's per-interval wake-up and IPIs cost a noticeable share of a CPU
AUTO_MAX_INTERVAL_NS = 5_000_000

READ_FORMAT = (abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING
               | abi.PERF_FORMAT_ID)
SAMPLE_TYPE = abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_READ
#: whether ``auto`` may choose the kernel timer. Off: on the 6.18 KVM guest
#: this was built on, a CPU's cpu-clock hrtimer keeps expiring on its grid but
#: for stretches writes no sample (no LOST or THROTTLE record, lost_samples 0;
#: ``perf record -a -e cpu-clock -c 1000000`` shows the same gaps): 0.3 % to
#: 37 % of the intervals of a run were skipped, against ~0 % for the user loop
AUTO_KERNEL = False

#: the kernel's minimum hrtimer period for cpu-clock (perf_swevent_start_hrtimer)
MIN_PERIOD_NS = 10_000

_SOFTWARE_TYPES = (abi.PERF_TYPE_SOFTWARE, abi.PERF_TYPE_TRACEPOINT)
_CORE_TYPES = (abi.PERF_TYPE_HARDWARE, abi.PERF_TYPE_SOFTWARE, abi.PERF_TYPE_HW_CACHE, abi.PERF_TYPE_RAW)


def sample_words(nmembers: int) -> int:
    """u64 words of one sample record: header, time, nr, enabled, running,
    (value, id) for the leader and each member."""
    return 5 + 2 * (1 + nmembers)


def leader_attr(interval_ns: int, *, pinned: bool = False, wakeup_bytes: int = 0) -> abi.perf_event_attr:
    """The cpu-clock sampling leader of one CPU's group."""
    if interval_ns < MIN_PERIOD_NS:
        raise PmuscopeError(f"the kernel timer's period is at least {MIN_PERIOD_NS} ns, not {interval_ns}")
    attr = abi.perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PERF_COUNT_SW_CPU_CLOCK)
    attr.sample_period = int(interval_ns)
    attr.sample_type = SAMPLE_TYPE
    attr.read_format = READ_FORMAT
    attr.disabled = 1
    attr.pinned = 1 if pinned else 0
    # sample times on CLOCK_MONOTONIC, the clock of the rows and of the hrtimer
    attr.use_clockid = 1
    attr.clockid = 1  # CLOCK_MONOTONIC
    # THROTTLE/LOST records carry a time too
    attr.sample_id_all = 1
    if wakeup_bytes:
        attr.watermark = 1
        attr.wakeup_watermark = int(wakeup_bytes)
    return attr


def member_attr(spec_attr: abi.perf_event_attr) -> abi.perf_event_attr:
    """A monitored event as a counting member of the leader's group."""
    attr = spec_attr.copy()
    attr.read_format = READ_FORMAT
    attr.sample_type = 0
    attr.sample_period = 0
    attr.freq = 0
    attr.disabled = 0
    attr.inherit = 0
    attr.pinned = 0
    # perf_event_open refuses a member whose clock is not the leader's
    attr.use_clockid = 1
    attr.clockid = 1
    return attr


def ring_pages(interval_ns: int, nmembers: int, drain_ns: int, page_size: int = 4096, cap: int = 512) -> int:
    """Data pages (a power of two) holding at least four drain periods of
    samples (the reader is woken at half: two drains late), at least 16
    (64 KiB) and at most ``cap``."""
    per_s = 1e9 / interval_ns * sample_words(nmembers) * 8
    need = per_s * max(4 * drain_ns, 200_000_000) / 1e9 / page_size
    pages = 16
    while pages < need and pages < cap:
        pages *= 2
    return pages


def max_sample_rate(procfs: str = "/proc") -> int | None:
    try:
        with open(f"{procfs}/sys/kernel/perf_event_max_sample_rate") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def choose_timer(requested: str | None, *, per_thread: bool, specs: Sequence, interval_ns: int, loop: str | None,
                 core_type: int | None, rate_limit: int | None, grouped: bool = True) -> tuple[str, str]:
    """``("kernel" | "user", why)`` for ``requested`` in auto/kernel/user.

    ``kernel`` when asked for raises if the run cannot use it; ``auto`` takes
    it for CPU-wide runs at intervals up to :data:`AUTO_MAX_INTERVAL_NS` whose
    events are all software or tracepoints (a software group is never
    multiplexed) and whose rate stays well under the kernel's sample-rate
    limit; ``user`` is the deadline loop."""
    requested = requested or "auto"
    if requested not in ("auto", "kernel", "user"):
        raise PmuscopeError(f"timer={requested!r}: choose 'auto', 'kernel' or 'user'")
    if requested == "user":
        return "user", "asked for"
    problems: list[str] = []
    if per_thread:
        problems.append("per-thread counting (-p) has no per-CPU timer to lead the group")
    if requested == "auto" and loop is not None:
        problems.append(f"the {loop} user loop was asked for")
    hardware = [s.name for s in specs if s.attr.type not in _SOFTWARE_TYPES]
    foreign = [s.name for s in specs
               if s.attr.type not in _SOFTWARE_TYPES and s.attr.type not in _CORE_TYPES and s.attr.type != core_type]
    restricted = [s.name for s in specs if getattr(s, "cpus", None)]
    if foreign or restricted:
        problems.append(f"{(foreign or restricted)[0]} is not a CPU PMU event and cannot join a cpu-clock group")
    elif hardware and requested == "auto":
        problems.append(f"{hardware[0]} is a hardware event: its group would move to the PMU's context and could "
                        "be multiplexed (ask --timer kernel to pin it)")
    if any(s.group is not None for s in specs) and len({s.group for s in specs}) > 1:
        problems.append("several braced groups cannot share one timer leader")
    if not grouped and requested == "auto":
        problems.append("--no-group asks for each event read alone")
    if requested == "auto" and interval_ns > AUTO_MAX_INTERVAL_NS:
        problems.append(f"the interval is over {AUTO_MAX_INTERVAL_NS / 1e6:g} ms (one wake-up per interval costs "
                        "little there)")
    rate = 1e9 / interval_ns
    if rate_limit is not None and rate * (2 if requested == "auto" else 1) > rate_limit:
        problems.append(f"{rate:.0f} samples/s per CPU is over the kernel's limit "
                        f"(perf_event_max_sample_rate = {rate_limit}); raise it with sysctl "
                        "kernel.perf_event_max_sample_rate")
    if interval_ns < MIN_PERIOD_NS:
        problems.append(f"the kernel's cpu-clock period is at least {MIN_PERIOD_NS / 1000:g} µs")
    if problems:
        if requested == "kernel":
            raise PmuscopeError("--timer kernel: " + "; ".join(problems))
        return "user", problems[0]
    if requested == "auto" and not AUTO_KERNEL:
        return "user", ("the kernel timer would do (--timer kernel), but is not chosen automatically: its cpu-clock "
                        "samples can go missing for stretches on some kernels")
    return "kernel", ("asked for" if requested == "kernel" else
                      "CPU-wide software events at a short interval: each CPU's cpu-clock timer writes its counts")


# --------------------------------------------------------------------------- ring decoding

_HDR = struct.Struct("<IHH")


class Decoded:
    """The samples of one drained chunk of one CPU's ring, columnar: ``time``
    (ns), ``enabled``/``running`` (the leader's cumulative times), ``values``
    (m × members, cumulative counts), ``ids`` (the leader's then members' ids,
    from the first sample) and the other records seen."""

    __slots__ = ("time", "enabled", "running", "values", "ids", "lost", "throttles", "unthrottles", "other")

    def __init__(self, nmembers: int) -> None:
        self.time = np.zeros(0, dtype=np.int64)
        self.enabled = np.zeros(0, dtype=np.int64)
        self.running = np.zeros(0, dtype=np.int64)
        self.values = np.zeros((0, nmembers), dtype=np.uint64)
        self.ids: list[int] | None = None
        self.lost = 0
        self.throttles = 0
        self.unthrottles = 0
        self.other = 0


def decode_records(buf: bytes, nmembers: int, ids: Sequence[int] | None = None) -> Decoded:
    """Decode a chunk of whole records from one timer leader's ring.

    Samples are fixed-size (``sample_words(nmembers)`` u64): when the chunk
    holds only samples (the usual case) it is decoded as one 2-D view;
    otherwise the headers are walked and LOST (``lost`` += its count),
    THROTTLE/UNTHROTTLE and any other record are counted and skipped.
    ``ids``: the group's event ids in order; a sample with another layout
    raises FormatError."""
    out = Decoded(nmembers)
    n = len(buf)
    if n == 0:
        return out
    words = sample_words(nmembers)
    size = words * 8
    if n % 8:
        raise FormatError(f"timer ring chunk of {n} bytes is not whole u64 words")
    W = np.frombuffer(buf, dtype="<u8")
    fast = n % size == 0
    if fast:
        hdr = W[::words]
        fast = bool(((hdr & np.uint64(0xFFFFFFFF)) == abi.PERF_RECORD_SAMPLE).all()
                    and ((hdr >> np.uint64(48)) == size).all())
    if fast:
        S = W.reshape(-1, words)
    else:
        starts = []
        off = 0
        unpack = _HDR.unpack_from
        while off + 8 <= n:
            rtype, _misc, rsize = unpack(buf, off)
            if rsize < 8 or rsize % 8 or off + rsize > n:
                raise FormatError(f"timer ring record at offset {off} has size {rsize} (chunk of {n} bytes)")
            if rtype == abi.PERF_RECORD_SAMPLE:
                if rsize != size:
                    raise FormatError(f"timer sample at offset {off} has {rsize} bytes, expected {size} "
                                      f"for {nmembers} members")
                starts.append(off // 8)
            elif rtype == abi.PERF_RECORD_LOST and rsize >= 24:
                out.lost += struct.unpack_from("<Q", buf, off + 16)[0]
            elif rtype == abi.PERF_RECORD_THROTTLE:
                out.throttles += 1
            elif rtype == abi.PERF_RECORD_UNTHROTTLE:
                out.unthrottles += 1
            else:
                out.other += 1
            off += rsize
        idx = np.asarray(starts, dtype=np.int64)
        S = W[idx[:, None] + np.arange(words)] if len(idx) else np.zeros((0, words), dtype=np.uint64)
    if len(S):
        nr = S[:, 2]
        if not (nr == 1 + nmembers).all():
            bad = int(nr[nr != 1 + nmembers][0])
            raise FormatError(f"timer sample reads a group of {bad} events, expected {1 + nmembers}")
        got = S[0, 6::2].tolist()
        if ids is not None and got != list(ids):
            raise FormatError(f"timer sample carries event ids {got}, expected {list(ids)}")
        out.ids = got
        out.time = S[:, 1].view(np.int64)
        out.enabled = S[:, 3].view(np.int64)
        out.running = S[:, 4].view(np.int64)
        out.values = S[:, 7::2].copy()  # members' values (the leader's is at word 5)
    return out


# --------------------------------------------------------------------------- samples → intervals


class Rows:
    """Intervals every CPU has a sample for: ``k`` (interval numbers),
    ``skipped`` (intervals between the previous row and this one), ``late``
    (m × CPUs), ``enabled``/``running`` (m × CPUs, cumulative) and
    ``values`` (m × CPUs × members, cumulative)."""

    __slots__ = ("k", "skipped", "late", "enabled", "running", "values")


class TimerAssembler:
    """Turns each CPU's samples into rows of intervals (pure: tested with
    synthetic samples).

    A CPU's sample at time ``t`` is its interval ``floor((t - anchor + P/16) / P)``
    (at least one more than its previous sample's), where ``anchor`` is when its
    timer started: the first sample's time less its enabled time. An interval
    becomes a row once every CPU has passed it, if every CPU has a sample for
    it; samples of intervals some CPU lacks are dropped (their counts fold into
    the next row: counts are cumulative). With ``last`` > 0 the run ends at
    interval ``last`` (a last common interval beyond it is clipped to it)."""

    def __init__(self, ncpu: int, nmembers: int, interval_ns: int, tolerance_ns: int, last: int = -1) -> None:
        self.ncpu, self.nmembers = ncpu, nmembers
        self.P = int(interval_ns)
        self.tolerance = int(tolerance_ns)
        self.last = int(last)
        self.anchor: list[int | None] = [None] * ncpu
        self._reanchor = [False] * ncpu
        #: per CPU: the time of its latest sample (None before the first)
        self.last_time: list[int | None] = [None] * ncpu
        self.kmax = [0] * ncpu
        # per CPU: the pending samples, as lists of (k, late, enabled, running, values) parts
        self._parts: list[list[tuple]] = [[] for _ in range(ncpu)]
        self.prev_k = 0
        self.done = False
        self.samples = 0
        self.dropped = 0

    def add(self, cpu: int, time: np.ndarray, enabled: np.ndarray, running: np.ndarray, values: np.ndarray) -> None:
        m = len(time)
        if m == 0:
            return
        time = np.asarray(time, dtype=np.int64)
        P = self.P
        slack = min(P // 16, 50_000)
        if self.anchor[cpu] is None:
            # the timer started when the group was enabled: about the first
            # sample's time less its enabled time (which starts at the enable
            # ioctl, µs before the CPU starts the hrtimer). A timer never fires
            # before its grid point, so the grid is at most the earliest
            # offset of this first batch from it
            a0 = int(time[0]) - int(enabled[0])
            off = time - a0 - ((time - a0 + slack) // P) * P
            self.anchor[cpu] = a0 + int(off.min())
        elif self._reanchor[cpu]:
            # the timer was restarted (unthrottled) on a new phase: its grid
            # now runs from its first sample, which ends the interval it falls in
            k1 = max(int((time[0] - self.anchor[cpu]) // P), self.kmax[cpu] + 1)
            self.anchor[cpu] = int(time[0]) - k1 * P
        self._reanchor[cpu] = False
        self.last_time[cpu] = int(time[-1])
        anchor = self.anchor[cpu]
        # the slack covers what is left of the anchor's error
        k = (time - anchor + slack) // P
        if m > 1 or k[0] <= self.kmax[cpu]:
            # strictly increasing: k_j >= k_(j-1) + 1 and k_0 >= kmax + 1
            j = np.arange(m, dtype=np.int64)
            k = np.maximum.accumulate(np.concatenate([[self.kmax[cpu] + 1], k - j]))[1:] + j
        late = (time - (anchor + k * P)) > self.tolerance
        self.kmax[cpu] = int(k[-1])
        self.samples += m
        self._parts[cpu].append((k, late, np.asarray(enabled, dtype=np.int64), np.asarray(running, dtype=np.int64),
                                 np.asarray(values, dtype=np.uint64).reshape(m, self.nmembers)))

    def reanchor(self, cpu: int) -> None:
        """The CPU's timer restarts on a new phase (an unthrottle, or
        PERF_EVENT_IOC_PERIOD): take its grid from its next sample."""
        if self.anchor[cpu] is not None:
            self._reanchor[cpu] = True

    def _pending(self, cpu: int) -> tuple:
        parts = self._parts[cpu]
        if not parts:
            return (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64),
                    np.zeros(0, dtype=np.int64), np.zeros((0, self.nmembers), dtype=np.uint64))
        if len(parts) > 1:
            parts[:] = [tuple(np.concatenate(col) for col in zip(*parts))]
        return parts[0]

    @property
    def ready(self) -> int:
        """The last interval every CPU has passed."""
        return min(self.kmax)

    @property
    def ended(self) -> bool:
        return self.last > 0 and self.ready >= self.last

    def take(self) -> Rows | None:
        """The rows now complete (None when there is none)."""
        if self.done:
            return None
        ready = self.ready
        if ready <= self.prev_k:
            return None
        pend = [self._pending(c) for c in range(self.ncpu)]
        ks = [p[0][: int(np.searchsorted(p[0], ready, side="right"))] for p in pend]
        if all(len(k) == len(ks[0]) for k in ks) and all(np.array_equal(k, ks[0]) for k in ks[1:]):
            common = ks[0]  # the usual case: every CPU has every interval
            pos = [np.arange(len(common))] * self.ncpu
        else:
            common = reduce(np.intersect1d, ks)
            pos = [np.searchsorted(p[0], common) for p in pend]
        clip = False
        if self.last > 0 and ready >= self.last:
            n_in = int(np.searchsorted(common, self.last, side="right"))
            if (n_in == 0 or common[n_in - 1] < self.last) and n_in < len(common):
                n_in += 1
                clip = True
            common = common[:n_in]
            pos = [p[:n_in] for p in pos]
            self.done = True
        rows = None
        if len(common):
            rows = Rows()
            rows.k = common.copy()
            rows.late = np.stack([pend[c][1][pos[c]] for c in range(self.ncpu)], axis=1)
            rows.enabled = np.stack([pend[c][2][pos[c]] for c in range(self.ncpu)], axis=1)
            rows.running = np.stack([pend[c][3][pos[c]] for c in range(self.ncpu)], axis=1)
            rows.values = np.stack([pend[c][4][pos[c]] for c in range(self.ncpu)], axis=1)
            if clip:
                rows.k[-1] = self.last
                rows.late[-1] = True
            rows.skipped = (np.diff(rows.k, prepend=self.prev_k) - 1).astype(np.int32)
            # as in the user loop, a row that spans skipped intervals is late (their deadlines passed unread)
            rows.late |= (rows.skipped > 0)[:, None]
            self.prev_k = int(rows.k[-1])
        cut = ready if not self.done else max(self.kmax)
        for c in range(self.ncpu):
            k = pend[c][0]
            i = int(np.searchsorted(k, cut, side="right"))
            self.dropped += i
            self._parts[c] = [tuple(col[i:] for col in pend[c])] if i < len(k) else []
        if rows is not None:
            self.dropped -= len(rows.k) * self.ncpu
        return rows

    def finish(self) -> Rows | None:
        """At a stop: the rows every CPU has passed, then no more."""
        rows = self.take()
        self.done = True
        return rows
