"""Recording sessions: what ``perf record`` does, from Python.

Layout, as perf 6.1 does it (``perf record -vv`` shows the opens):

- ``-- CMD``, ``-p PID``, ``-t TID``: one fd per (thread, online CPU) with
  ``pid`` = the thread and ``inherit`` (children are followed; ``-t`` turns
  inherit off like perf), one ring per CPU;
- ``-a`` / ``-C LIST``: one fd per CPU with ``pid=-1``, one ring per CPU,
  ``PERF_SAMPLE_CPU`` added;
- the other events and threads of a CPU write into its ring through
  ``PERF_EVENT_IOC_SET_OUTPUT``.

Attrs are :func:`pmuscope.events.record_defaults` (perf's ``evsel__config``),
plus CALLCHAIN with ``callgraph``. The poll loop copies every ring out in
turn and appends the bytes to a :class:`~pmuscope.perfdata.writer.PerfDataWriter`
(streaming: memory stays bounded by the ring sizes), with a FINISHED_ROUND
after each pass that wrote something, like perf.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from .. import errors
from ..kernel import abi
from ..kernel.ring import PAGE_SIZE, RingBuffer
from ..kernel.syscall import PerfEventFd
from ..perfdata import synth as _pd_synth
from . import synthesize as _synth
from ..system import online_cpus, parse_cpulist

S = abi.PerfSample

#: data pages per ring: 128 pages = 512 KiB, perf's default for a privileged user
DEFAULT_MMAP_PAGES = 128
#: perf record's default sampling frequency (Hz)
DEFAULT_FREQ = 4000


def max_sample_rate(procfs_root: str = "/proc") -> int | None:
    """``kernel.perf_event_max_sample_rate`` (Hz), or None when unreadable."""
    try:
        with open(os.path.join(procfs_root, "sys/kernel/perf_event_max_sample_rate")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None

_default_event_cache: dict[str, str] = {}


def default_event(sysfs_root: str = "/sys") -> str:
    """``cycles`` when a hardware PMU can sample it here, else ``cpu-clock``
    (perf's fallback); probed once per process by opening a disabled
    ``cycles`` sampling event on this thread."""
    if sysfs_root in _default_event_cache:
        return _default_event_cache[sysfs_root]
    name = "cpu-clock"
    if os.path.isdir(os.path.join(sysfs_root, "bus/event_source/devices/cpu")):
        from ..events import parse_events

        try:
            attr = parse_events("cycles", sysfs_root=sysfs_root)[0].attr.copy()
        except errors.PmuscopeError:
            attr = None
        if attr is not None:
            attr.sample_freq, attr.freq, attr.disabled = 4000, 1, 1
            attr.exclude_kernel = attr.exclude_hv = 1  # passes at any perf_event_paranoid level
            try:
                PerfEventFd(attr, 0, -1).close()
                name = "cycles"
            except errors.PmuscopeError:
                pass
    _default_event_cache[sysfs_root] = name
    return name


def perf_modifiers(attr) -> str:
    """The modifier suffix perf gives an event it names from its attr
    (``:uH`` for a user-only event; perf_evsel__add_modifiers in
    tools/perf/util/evsel.c), or ""."""
    mods, guest_default = "", False
    if attr.exclude_kernel or attr.exclude_user or attr.exclude_hv:
        mods += "".join(c for c, excl in (("k", attr.exclude_kernel), ("u", attr.exclude_user),
                                          ("h", attr.exclude_hv)) if not excl)
        guest_default = True
    if attr.precise_ip:
        mods += "ppp"[: attr.precise_ip]
        guest_default = True
    if attr.exclude_host or bool(attr.exclude_guest) == guest_default:
        mods += "".join(c for c, excl in (("H", attr.exclude_host), ("G", attr.exclude_guest)) if not excl)
    return f":{mods}" if mods else ""


@dataclass
class RecordResult:
    """What a finished recording captured."""

    output: str | None
    samples: int = 0
    #: bytes of records written to the data section (synthesized ones included)
    data_bytes: int = 0
    #: file size after closing (0 without an output file)
    file_bytes: int = 0
    #: sum of PERF_RECORD_LOST.lost: records the kernel dropped because a ring was full
    lost: int = 0
    #: sum of PERF_RECORD_LOST_SAMPLES.lost
    lost_samples: int = 0
    #: PERF_RECORD_THROTTLE records: the kernel lowered the rate (perf_cpu_time_max_percent)
    throttled: int = 0
    wakeups: int = 0
    #: exit status of the launched command (128+N when killed by signal N), else None
    exit_status: int | None = None
    duration: float = 0.0
    events: list[str] = field(default_factory=list)
    interrupted: bool = False

    def summary(self, prog: str = "pmuscope record") -> str:
        """perf's closing lines: wake-ups, then size, file and samples (and
        lost/throttled when non-zero)."""
        extra = []
        if self.lost:
            extra.append(f"{self.lost} lost")
        if self.lost_samples:
            extra.append(f"{self.lost_samples} lost samples")
        if self.throttled:
            extra.append(f"{self.throttled} throttled")
        tail = "".join(", " + e for e in extra)
        size = (self.file_bytes or self.data_bytes) / (1024 * 1024)
        where = self.output or "(no file)"
        return (f"[ {prog}: Woken up {self.wakeups} times to write data ]\n"
                f"[ {prog}: Captured and wrote {size:.3f} MB {where} ({self.samples} samples{tail}) ]")


class Recorder:
    """A sampling session.

    ``events`` is a perf event list (``-e`` syntax; default: :func:`default_event`).
    Sampling at ``freq`` Hz (default 4000, lowered with a note to
    ``kernel.perf_event_max_sample_rate`` when that is lower, like perf; an
    explicit ``freq`` above it is an error), or every ``period`` events.
    ``callgraph=True`` (or ``"fp"``) records frame-pointer call chains
    (``-g``); ``"dwarf"`` / ``"dwarf,SIZE"`` records user registers and
    SIZE bytes of user stack (default 8192) for ``perf report`` to unwind,
    with perf's attrs for ``--call-graph dwarf``. Target:
    ``cmd`` (an argv to launch, enabled at exec), ``pid``/``tid`` (attach),
    ``system_wide`` or ``cpus`` (a list or perf cpu-list string); ``cmd`` may
    be combined with ``system_wide``/``cpus`` (record the machine while the
    command runs). ``output`` is the perf.data path, or None to only iterate
    records live, or ``"-"`` for pipe-mode perf.data on stdout (``perf record
    -o -``; tracepoint formats are not carried in pipe mode). An existing non-empty ``output`` (or a
    link there) is kept as ``output.old``, as perf does, when the new file is complete
    (:mod:`pmuscope.outfile`); the file is mode 0600.

    ``specs`` gives already-parsed :class:`~pmuscope.events.EventSpec` s
    instead of ``events`` (their attrs are copied, then configured like any
    event list). ``sample_type_extra`` is ORed into every event's
    ``sample_type`` (PERF_SAMPLE_* bits, e.g. ``ADDR|DATA_SRC|WEIGHT_STRUCT``
    for ``perf record -d -W``); with ADDR the first event also asks for data
    mmaps (``mmap_data``), as ``-d`` does. A kernel that rejects
    WEIGHT_STRUCT gets WEIGHT instead, like perf.

    ``python_frames=True`` names Python functions in the stacks of CPython
    processes: ``cmd`` runs with :func:`pyframes.child_env
    <pmuscope.sampling.pyframes.child_env>` (perf maps with ``py::`` names);
    for ``pid``, a note says when a Python process has no map.

    ``clockid`` stamps samples with that clock (``perf record -k``; e.g.
    ``time.CLOCK_MONOTONIC``, which ``perf inject --jit`` needs). With
    CLOCK_MONOTONIC and ``python_frames``, CPython <= 3.11 processes also write a
    jitdump, so ``perf inject --jit`` lets Linux perf unwind through Python frames.

    Use :meth:`run` (blocks until the command/target exits, :meth:`stop` is
    called, ``duration`` passes or Ctrl-C), or :meth:`start` then iterate
    :meth:`records` / call :meth:`poll` yourself, then :meth:`close`.
    """

    def __init__(
        self,
        events: str | Sequence[str] | None = None,
        *,
        specs: Sequence | None = None,
        sample_type_extra: int = 0,
        freq: int | None = None,
        period: int | None = None,
        callgraph: bool | str = False,
        pid: int | Sequence[int] | None = None,
        tid: int | Sequence[int] | None = None,
        cpus: str | Sequence[int] | None = None,
        system_wide: bool = False,
        cmd: Sequence[str] | None = None,
        output: str | os.PathLike | None = "perf.data",
        mmap_pages: int | None = None,
        inherit: bool | None = None,
        sample_cpu: bool = False,
        argv: list[str] | None = None,
        sysfs_root: str = "/sys",
        procfs_root: str = "/proc",
        build_ids: bool = True,
        python_frames: bool = False,
        clockid: int | None = None,
    ) -> None:
        from ..events import parse_events, record_defaults

        if period is not None and period <= 0:
            raise errors.PmuscopeError(f"sample period must be positive, got {period}")
        if freq is not None and freq <= 0 and period is None:
            raise errors.PmuscopeError(f"sample frequency must be positive, got {freq}")
        self.notes: list[str] = []
        max_rate = max_sample_rate(procfs_root)
        if freq is None:
            freq = DEFAULT_FREQ
            if max_rate is not None and freq > max_rate:
                # perf: "Lowering default frequency rate from 4000 to N" (record__opts_config_freq)
                self.notes.append(f"lowering the default frequency from {freq} to {max_rate} Hz "
                                  "(kernel.perf_event_max_sample_rate)")
                freq = max_rate
        elif period is None and max_rate is not None and freq > max_rate:
            raise errors.InvalidAttrError(
                f"-F {freq} exceeds kernel.perf_event_max_sample_rate={max_rate} (the kernel lowers it after slow "
                "sampling interrupts): use a lower frequency, or raise /proc/sys/kernel/perf_event_max_sample_rate"
            )
        self.freq = freq
        self.pids = _as_list(pid)
        self.tids = _as_list(tid)
        if self.pids and self.tids:
            raise errors.PmuscopeError("give either pid or tid, not both")
        if cmd is not None and (self.pids or self.tids):
            raise errors.PmuscopeError("a command and -p/-t cannot be combined: attach to one target")
        if isinstance(cpus, str):
            try:
                cpus = parse_cpulist(cpus)
            except ValueError as err:
                raise errors.PmuscopeError(f"bad CPU list {cpus!r}: {err}") from None
        online = online_cpus(sysfs_root)
        if cpus is not None:
            bad = sorted(set(cpus) - set(online))
            if bad:
                raise errors.PmuscopeError(f"CPU(s) {bad} are not online (online: {online})")
        self.cpu_wide = bool(system_wide or cpus is not None)
        if not self.cpu_wide and cmd is None and not self.pids and not self.tids:
            # perf record with no target and no command records the whole machine
            self.cpu_wide = True
        self.cpus = list(cpus) if cpus is not None else online
        self.cmd = list(cmd) if cmd is not None else None
        self.output = os.fspath(output) if output is not None else None
        self.procfs_root = procfs_root
        self.build_ids = build_ids
        self.argv = argv
        self.python_frames = python_frames
        if python_frames and self.cmd:
            from .pyframes import missing_helper_note

            note = missing_helper_note(self.cmd)
            if note:
                self.notes.append(note)
        if python_frames and self.pids:
            from .pyframes import attach_note

            for p in self.pids:
                note = attach_note(p, procfs_root)
                if note:
                    self.notes.append(note)
        if inherit is None:
            inherit = not self.tids  # perf: -t implies --no-inherit
        if specs is not None:
            if events is not None:
                raise errors.PmuscopeError("give either an event list or parsed event specs, not both")
            self.specs = [s.copy() for s in specs]
            if not self.specs:
                raise errors.PmuscopeError("no event specs given")
        else:
            text = events if isinstance(events, str) or events is None else ",".join(events)
            if not text:
                text = default_event(sysfs_root)
            self.specs = parse_events(text, sysfs_root=sysfs_root)
            if not self.specs:
                raise errors.PmuscopeError(f"no events in {text!r}")
        self.attrs = record_defaults(self.specs, freq=freq, period=period,
                                     enable_on_exec=self.cmd is not None and not self.cpu_wide, inherit=inherit)
        apply_record_extras(self.attrs, self.specs, sample_type_extra=sample_type_extra)
        default_cg = _parse_call_graph(callgraph)
        for i, (spec, attr) in enumerate(zip(self.specs, self.attrs)):
            mode = _parse_call_graph(spec.call_graph) if spec.call_graph else default_cg
            if mode is not None:
                _apply_call_graph(attr, mode, tracking=(i == 0))
            if spec.max_stack:
                attr.sample_max_stack = spec.max_stack
            if self.cpu_wide or sample_cpu:
                attr.sample_type |= S.CPU
        if clockid is not None:
            for attr in self.attrs:
                attr.use_clockid = 1
                attr.clockid = int(clockid)
        self.clockid = clockid
        self.names = [s.name for s in self.specs]
        if mmap_pages is None:
            mmap_pages = DEFAULT_MMAP_PAGES
        if mmap_pages & (mmap_pages - 1) or mmap_pages <= 0:
            raise errors.PmuscopeError(f"mmap pages must be a power of two, got {mmap_pages}")
        self.mmap_pages = mmap_pages
        self.fds: list[list[PerfEventFd]] = [[] for _ in self.attrs]
        self.rings: list[RingBuffer] = []
        self.workload = None
        self.writer = None
        self._pipe = False
        self._started = False
        self._closed = False
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._pidfd: int | None = None
        self._target_gone = False
        self._hung: set[int] = set()
        self._t0 = 0.0
        self._result = RecordResult(self.output, events=list(self.names))
        self._time_pos = _time_pos(int(self.attrs[0].sample_type))
        self._first_time: int | None = None
        self._last_time: int | None = None
        self._dso_names: set[str] = set()
        self._wrote_in_round = False

    # -- opening -----------------------------------------------------------------------
    def _threads(self) -> list[int]:
        if self.cpu_wide:
            return [-1]
        if self.workload is not None:
            return [self.workload.pid]
        if self.tids:
            for t in self.tids:
                if not os.path.exists(os.path.join(self.procfs_root, str(t))):
                    raise errors.ProcessGoneError(f"thread {t} does not exist (-t)")
            return list(self.tids)
        out = []
        for p in self.pids:
            tids = _synth.process_tids(p, self.procfs_root)
            if not tids:
                raise errors.ProcessGoneError(f"process {p} does not exist (-p)")
            out += tids
        return out

    def _open_one(self, i: int, pid: int, cpu: int, group: PerfEventFd | None) -> PerfEventFd | None:
        from ..events.defaults import open_fallbacks

        attr = self.attrs[i]
        try:
            return PerfEventFd(attr, pid, cpu, group, event=self.names[i])
        except errors.ProcessGoneError:
            if pid > 0 and not self.tids and self.pids:
                return None  # a thread of the process exited meanwhile: perf skips it too
            raise
        except errors.PmuscopeError as err:
            eno = getattr(err, "errno", None)
            import errno as _errno

            # errno.errorcode names 95 ENOTSUP on Linux, where it equals EOPNOTSUPP (the kernel's name)
            ename = "EOPNOTSUPP" if eno == _errno.EOPNOTSUPP else _errno.errorcode.get(eno or 0, "")
            tries = open_fallbacks(attr, ename)
            if (ename in ("ENOENT", "ENXIO", "ENODEV") and attr.type == abi.PERF_TYPE_HARDWARE
                    and attr.config == abi.PerfHwId.CPU_CYCLES and not self.fds[i]):
                # perf record's evsel__fallback: cycles without a hardware PMU is
                # sampled by the hrtimer-based cpu-clock (the event is renamed)
                alt = attr.copy()
                alt.type, alt.config = abi.PERF_TYPE_SOFTWARE, abi.PerfSwId.CPU_CLOCK
                try:
                    fd = PerfEventFd(alt, pid, cpu, group, event="cpu-clock")
                except errors.PmuscopeError:
                    raise err from None
                self.notes.append(f"the {self.names[i]} event is not supported here (no hardware PMU): "
                                  "fell back to cpu-clock, as perf record does")
                self.attrs[i] = alt
                self.names[i] = "cpu-clock" + perf_modifiers(alt)
                return fd
            if ename == "EINVAL" and attr.sample_type & S.WEIGHT_STRUCT:
                # perf's missing_features.weight_struct: kernels before 5.12 only know WEIGHT
                alt = attr.copy()
                alt.sample_type = (alt.sample_type & ~S.WEIGHT_STRUCT) | S.WEIGHT
                tries.append(("WEIGHT instead of WEIGHT_STRUCT (older kernel)", alt))
            for note, alt in tries:
                try:
                    fd = PerfEventFd(alt, pid, cpu, group, event=self.names[i])
                except errors.PmuscopeError:
                    continue
                if self.fds[i]:
                    fd.close()  # the attr of an event must not change once fds are open
                    raise
                self.attrs[i] = alt
                self.notes.append(f"{self.names[i]}: {note}")
                return fd
            raise

    def _open(self) -> None:
        threads = self._threads()
        ring_of_cpu: dict[int, RingBuffer] = {}
        for cpu in self.cpus:
            for pid in threads:
                leaders: dict[int, PerfEventFd] = {}
                for i, spec in enumerate(self.specs):
                    group = leaders.get(spec.group) if spec.group is not None and not spec.leader else None
                    if spec.cpus is not None and cpu not in spec.cpus:
                        continue
                    fd = self._open_one(i, pid, cpu, group)
                    if fd is None:
                        break
                    if spec.group is not None and spec.leader:
                        leaders[spec.group] = fd
                    self.fds[i].append(fd)
                    ring = ring_of_cpu.get(cpu)
                    if ring is None:
                        ring_of_cpu[cpu] = self._mmap(fd)
                    else:
                        ring.add(fd)
        self.rings = list(ring_of_cpu.values())
        if not self.rings:
            raise errors.PmuscopeError("no event could be opened on any CPU of the target")

    def _mmap(self, fd: PerfEventFd) -> RingBuffer:
        pages = self.mmap_pages
        while True:
            try:
                ring = RingBuffer(fd, pages, track_lost=False)  # _account counts LOST records
                break
            except errors.PermissionDeniedError:
                if pages <= 1:
                    raise
                pages //= 2  # the mlock budget (perf_event_mlock_kb) is per user: shrink like perf -m would
        if pages != self.mmap_pages and not any("ring" in n for n in self.notes):
            self.notes.append(f"ring buffers shrunk to {pages} pages ({pages * PAGE_SIZE // 1024} KiB) "
                              "by the perf_event_mlock_kb limit")
        return ring

    # -- lifetime ----------------------------------------------------------------------------
    def start(self) -> "Recorder":
        """Open the events, map the rings, write the header part and the
        synthesized side band, then enable (or let the command exec)."""
        if self._started:
            return self
        self._started = True
        self._t0 = time.monotonic()
        try:
            if self.cmd is not None:
                from ..counting.workload import Workload

                env = None
                if self.python_frames:
                    from .pyframes import child_env

                    env = child_env(jitdump=self.clockid == time.CLOCK_MONOTONIC)
                self.workload = Workload(self.cmd, env=env)
            self._open()
            if self.output is not None:
                self._open_writer()
            self._synthesize()
            if self.workload is not None:
                self._pidfd = self.workload.pidfd()
            elif len(self.pids) == 1 and not self.cpu_wide:
                # one process: its exit ends the session (several: when every ring hangs up)
                try:
                    self._pidfd = os.pidfd_open(self.pids[0])
                except (AttributeError, OSError):
                    self._pidfd = None
            if self.workload is None or self.cpu_wide:
                for fds in self.fds:
                    for fd in fds:
                        fd.enable()
            if self.workload is not None:
                self.workload.start()
        except BaseException:
            if self.workload is not None:
                self.workload.cancel()
            self._teardown()
            if self.writer is not None:
                self.writer.abort()
            raise
        return self

    def _open_writer(self) -> None:
        from ..perfdata.features import Feature
        from ..perfdata.writer import PerfDataWriter

        if self.output == "-":
            from ..perfdata.writer import PerfPipeWriter

            # pipe mode (perf record -o -): HEADER_ATTR/EVENT_UPDATE/HEADER_FEATURE records, then the data
            self.writer = PerfPipeWriter(sys.stdout.buffer, argv=self.argv)
            self._pipe = True
            for i, attr in enumerate(self.attrs):
                self.writer.add_attr(attr, [fd.id() for fd in self.fds[i]], self.names[i])
            return
        # the writer keeps a previous recording as FILE.old (perf's rule) when it completes
        self.writer = PerfDataWriter(self.output, argv=self.argv)
        for i, attr in enumerate(self.attrs):
            self.writer.add_attr(attr, [fd.id() for fd in self.fds[i]], self.names[i])
        groups = _group_desc(self.specs)
        if groups:
            self.writer.features[Feature.GROUP_DESC] = groups
        tps = [_tracepoint_path(s, a) for s, a in zip(self.specs, self.attrs) if a.type == abi.PERF_TYPE_TRACEPOINT]
        if tps:
            from .tpformat import tracing_data

            self.writer.features[Feature.TRACING_DATA] = tracing_data([t for t in tps if t is not None])

    def _synthesize(self) -> None:
        st = int(self.attrs[0].sample_type)
        if self.cpu_wide:
            pids = _synth.all_pids(self.procfs_root)
        elif self.workload is not None:
            pids = []
        else:
            pids = sorted({int(_synth._status(os.path.join(self.procfs_root, str(t), "status")).get("Tgid", t))
                           for t in (self.pids or self.tids)})
        out = list(_synth.synthesize(pids, st, procfs_root=self.procfs_root,
                                     data_mmaps=bool(self.attrs[0].mmap_data)))
        if out:
            blob = b"".join(out)
            self._write(blob)
            self._write(_FINISHED_ROUND)
            if self.build_ids:
                self._dso_names.update(_synth.mmap_filenames(blob))

    def _write(self, chunk: bytes) -> None:
        if self.writer is not None:
            self.writer.write(chunk)
        self._result.data_bytes += len(chunk)

    def stop(self) -> None:
        """Ask the session to end (thread- and signal-safe): :meth:`run` and
        :meth:`records` drain what is left and return."""
        self._stop.set()
        w = self._wake_w
        if w is not None:
            try:
                os.write(w, b"x")
            except OSError:
                pass

    # -- draining --------------------------------------------------------------------------
    def _account(self, chunk: bytes) -> None:
        """Count samples, throttles and lost records, note the sample time
        range and the MMAP file names, walking the record headers (the one
        walk: the rings do not scan for LOST records themselves)."""
        unpack = _HDR.unpack_from
        off, n = 0, len(chunk)
        samples = throttles = lost = lost_samples = 0
        first_s = last_s = -1
        while off < n:
            t, _misc, size = unpack(chunk, off)
            if size < 8:
                break
            if t == 9:  # PERF_RECORD_SAMPLE
                samples += 1
                if first_s < 0:
                    first_s = off
                last_s = off
            elif t == 5:  # PERF_RECORD_THROTTLE
                throttles += 1
            elif t == 2:  # PERF_RECORD_LOST: u64 id, u64 lost
                lost += _U64.unpack_from(chunk, off + 16)[0] if off + 24 <= n else 0
            elif t == 13:  # PERF_RECORD_LOST_SAMPLES: u64 lost
                lost_samples += _U64.unpack_from(chunk, off + 8)[0] if off + 16 <= n else 0
            elif t == 10 or t == 1:  # MMAP2 / MMAP
                if self.build_ids:
                    at = off + (72 if t == 10 else 40)
                    end = chunk.find(b"\0", at, off + size)
                    self._dso_names.add(chunk[at : end if end >= 0 else off + size].decode("utf-8", "replace"))
            off += size
        r = self._result
        r.samples += samples
        r.throttled += throttles
        r.lost += lost
        r.lost_samples += lost_samples
        tp = self._time_pos
        if first_s >= 0 and tp >= 0:
            t0 = struct.unpack_from("<Q", chunk, first_s + tp)[0]
            t1 = struct.unpack_from("<Q", chunk, last_s + tp)[0]
            self._first_time = t0 if self._first_time is None else min(self._first_time, t0)
            self._last_time = t1 if self._last_time is None else max(self._last_time, t1)

    def _drain(self) -> list[bytes]:
        """One pass over every ring; returns the chunks copied (already
        written to the file), with a FINISHED_ROUND after a pass that wrote."""
        out = []
        for ring in self.rings:
            chunk = ring.read_records()
            if chunk:
                self._account(chunk)
                self._write(chunk)
                out.append(chunk)
        if out:
            self._write(_FINISHED_ROUND)
        return out

    def _wait(self, timeout: float | None) -> None:
        """poll() on the rings, the wake pipe and the target's pidfd."""
        p = select.poll()
        for ring in self._live_rings():
            p.register(ring.fileno(), select.POLLIN)
        p.register(self._wake_r, select.POLLIN)
        if self._pidfd is not None:
            p.register(self._pidfd, select.POLLIN)
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        try:
            ready = p.poll(ms)
        except InterruptedError:
            return
        if ready:
            self._result.wakeups += 1  # perf's "Woken up N times": poll() returns with something to do
        for fd, bits in ready:
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 64)
                except OSError:
                    pass
            elif fd == self._pidfd:
                self._target_gone = True
            elif bits & (select.POLLHUP | select.POLLERR):
                self._hung.add(fd)

    def _live_rings(self) -> list[RingBuffer]:
        return [r for r in self.rings if r.fileno() not in self._hung]

    def _finished(self, deadline: float | None) -> bool:
        if self._stop.is_set() or self._target_gone:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return True
        if self.workload is not None and self._pidfd is None and self.workload.poll() is not None:
            return True
        if not self.cpu_wide and self.rings and not self._live_rings():
            return True  # every task we followed is gone (POLLHUP on all)
        return False

    def poll(self, timeout: float | None = None) -> list[bytes]:
        """Wait up to ``timeout`` seconds for data (or the end), drain every
        ring, and return the chunks copied (written to the file too)."""
        if not self._started:
            self.start()
        self._wait(timeout)
        return self._drain()

    def iter_chunks(self, duration: float | None = None, interval: float | None = None) -> Iterator[bytes]:
        """Raw record chunks as they come, until the session ends."""
        if not self._started:
            self.start()
        deadline = None if duration is None else time.monotonic() + duration
        while True:
            timeout = interval
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                timeout = left if timeout is None else min(timeout, left)
            self._wait(timeout)
            yield from self._drain()
            if self._finished(deadline):
                break
        self._disable()
        yield from self._drain()

    def records(self, duration: float | None = None, interval: float = 0.1):
        """Decoded records (:class:`~pmuscope.records.SampleBatch` runs and
        side-band dataclasses) live, until the session ends; also written to
        ``output`` when set. :meth:`close` afterwards."""
        from ..records import DecodeStats, decode

        table = self.attr_table()
        stats = DecodeStats()
        for chunk in self.iter_chunks(duration, interval):
            yield from decode(chunk, table, stats=stats)

    def attr_table(self):
        from ..records import AttrTable

        return AttrTable([(a, [fd.id() for fd in fds]) for a, fds in zip(self.attrs, self.fds)], names=self.names)

    def run(self, duration: float | None = None) -> RecordResult:
        """Record until the command or target exits, :meth:`stop`, Ctrl-C or
        ``duration`` seconds; then close and return the :class:`RecordResult`."""
        try:
            for _ in self.iter_chunks(duration):
                pass
        except KeyboardInterrupt:
            self._result.interrupted = True
            self._disable()
            self._drain()
        except BaseException:
            self.abort()
            raise
        return self.close()

    def abort(self) -> None:
        """After an error (a full disk): stop the command as :meth:`close` does,
        and remove the unfinished file (a previous one stays)."""
        if self.writer is not None and not self._pipe:
            self.writer.abort()
            self.writer = None
        try:
            self.close()
        except Exception:  # noqa: BLE001 - the first error is the one to report
            pass

    def _disable(self) -> None:
        for fds in self.fds:
            for fd in fds:
                try:
                    fd.disable()
                except OSError:
                    pass

    def close(self) -> RecordResult:
        """Stop, drain, reap the command, write the file's features and header."""
        if self._closed:
            return self._result
        self._closed = True
        r = self._result
        try:
            if self._started:
                self._disable()
                self._drain()
            if self.workload is not None:
                if self.workload.poll() is None and not self._target_gone:
                    # the session ended first (stop, Ctrl-C, duration): perf SIGTERMs a live workload too
                    self.workload.send_signal(signal.SIGTERM)
                r.exit_status = self.workload.wait()
        finally:
            self._teardown()
            if self.writer is not None and self._pipe:
                self.writer.close()
            elif self.writer is not None:
                if self._first_time is not None:
                    self.writer.set_sample_time(self._first_time, self._last_time)
                if self.build_ids:
                    self._add_build_ids()
                self.writer.close()
                r.file_bytes = os.path.getsize(self.output)
            r.duration = time.monotonic() - self._t0 if self._t0 else 0.0
        return r

    def _add_build_ids(self) -> None:
        seen = set()
        for name in sorted(self._dso_names):
            if not name.startswith("/") or name in seen:
                continue
            seen.add(name)
            path = name[: -len(" (deleted)")] if name.endswith(" (deleted)") else name
            self.writer.add_build_id(path)

    def _teardown(self) -> None:
        for ring in self.rings:
            ring.close()
        for fds in self.fds:
            for fd in fds:
                fd.close()
        for fd in (self._pidfd, self._wake_r, self._wake_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._pidfd = self._wake_r = self._wake_w = None

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self._teardown()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def result(self) -> RecordResult:
        return self._result


_HDR = struct.Struct("<IHH")
_U64 = struct.Struct("<Q")
_FINISHED_ROUND = _pd_synth.finished_round()


#: PERF_REGS_MASK of tools/perf/arch/*/include/perf_regs.h: the user registers perf samples for DWARF unwinding
_REGS_MASK = {"x86_64": 0xFF0FFF, "aarch64": (1 << 33) - 1, "riscv64": (1 << 32) - 1, "ppc64le": (1 << 45) - 1,
              "s390x": (1 << 34) - 1}


def _parse_call_graph(value) -> tuple[str, int] | None:
    """``True``/``"fp"`` -> ("fp", 0); ``"dwarf[,SIZE]"`` -> ("dwarf", SIZE); False/None/"no" -> None."""
    if value is None or value is False or value == "no":
        return None
    if value is True:
        return ("fp", 0)
    mode, _, size = str(value).partition(",")
    if mode == "fp":
        return ("fp", 0)
    if mode == "dwarf":
        try:
            n = int(size, 0) if size else 8192
        except ValueError:
            n = -1
        if n <= 0 or n > 65528 or n % 8:
            raise errors.PmuscopeError(f"call-graph dwarf stack size {size!r}: expected a multiple of 8 up to 65528")
        return ("dwarf", n)
    raise errors.PmuscopeError(f"call-graph mode {value!r}: expected fp, dwarf[,SIZE] or no (lbr is not supported)")


def _apply_call_graph(attr, mode: tuple[str, int], *, tracking: bool) -> None:
    """perf's ``evsel__config_callchain`` for fp and dwarf."""
    import platform

    attr.sample_type |= S.CALLCHAIN
    if mode[0] != "dwarf":
        return
    mask = _REGS_MASK.get(platform.machine())
    if mask is None:
        raise errors.PmuscopeError(f"--call-graph dwarf: no user register mask known for {platform.machine()}")
    # perf also asks for ADDR and DATA_SRC, and data mmaps on the tracking event, in dwarf mode
    attr.sample_type |= S.ADDR | S.REGS_USER | S.STACK_USER | S.DATA_SRC
    attr.exclude_callchain_user = 1
    attr.sample_regs_user = mask
    attr.sample_stack_user = mode[1]
    if tracking:
        attr.mmap_data = 1


#: what ``perf record -d`` adds to every event (evsel__config: ADDR and DATA_SRC, mmap_data on the first)
SAMPLE_DATA_ADDRESS = S.ADDR | S.DATA_SRC


def apply_record_extras(attrs, specs, *, sample_type_extra: int = 0):
    """The record options layered on :func:`~pmuscope.events.record_defaults`
    (perf's ``evsel__config``, tools/perf/util/evsel.c), in place:

    - the ``P`` modifier (``precise_max``) sets precise_ip = 3; the open
      lowers it one step at a time when the PMU refuses, as perf does;
    - ``sample_type_extra`` bits on every attr; with PERF_SAMPLE_ADDR the
      first (tracking) event also gets ``mmap_data`` (``-d``).

    Returns ``attrs``."""
    extra = int(sample_type_extra)
    if extra < 0 or extra >= abi.PERF_SAMPLE_MAX:
        raise errors.InvalidAttrError(
            f"sample_type_extra {extra:#x} is not a PERF_SAMPLE_* mask (bits below {abi.PERF_SAMPLE_MAX:#x})")
    for spec, attr in zip(specs, attrs):
        if spec.extra.get("precise_max"):
            attr.precise_ip = 3
        attr.sample_type |= extra
    if attrs and extra & S.ADDR:
        attrs[0].mmap_data = 1
    return attrs


def _group_desc(specs) -> list:
    """HEADER_GROUP_DESC entries for ``{...}`` groups of more than one event
    (perf's ``write_group_desc``: unnamed groups are ``{anon_group}``)."""
    from ..perfdata.features import GroupDesc

    out = []
    for i, spec in enumerate(specs):
        if spec.group is None or not spec.leader:
            continue
        n = sum(1 for s in specs if s.group == spec.group)
        if n > 1:
            out.append(GroupDesc(spec.extra.get("group_name") or "{anon_group}", i, n))
    return out


def _tracepoint_path(spec, attr) -> tuple[str, str] | None:
    """``(system, event)`` of a tracepoint evsel: from its name (``sys:event``
    with any ``:mods``/``/terms/`` dropped) when its tracefs id matches
    ``attr.config``, else by scanning tracefs ids."""
    from ..events.tracepoints import find_tracefs, tracepoint_id
    from .tpformat import _id_path

    tracefs = find_tracefs() or "/sys/kernel/tracing"
    parts = spec.name.split(":")
    if len(parts) >= 2:
        system, event = parts[0], parts[1].split("/")[0]
        if tracepoint_id(tracefs, system, event) == int(attr.config):
            return system, event
    return _id_path(tracefs).get(int(attr.config))


def _time_pos(sample_type: int) -> int:
    """Byte offset of the TIME field in a SAMPLE record (-1 without TIME)."""
    if not sample_type & S.TIME:
        return -1
    pos = 8
    for bit in (S.IDENTIFIER, S.IP, S.TID):
        if sample_type & bit:
            pos += 8
    return pos


def _as_list(v) -> list[int]:
    if v is None:
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, str):
        return [int(x) for x in v.split(",") if x.strip()]
    return [int(x) for x in v]


def record(
    events: str | Sequence[str] | None = None,
    *,
    freq: int | None = None,
    period: int | None = None,
    callgraph: bool | str = False,
    pid: int | Sequence[int] | None = None,
    tid: int | Sequence[int] | None = None,
    cpus: str | Sequence[int] | None = None,
    system_wide: bool = False,
    cmd: Sequence[str] | None = None,
    output: str | os.PathLike | None = "perf.data",
    duration: float | None = None,
    mmap_pages: int | None = None,
    **kwargs,
) -> RecordResult:
    """Record samples into ``output`` (perf.data that ``perf report`` reads)
    and return a :class:`RecordResult`. Runs until ``cmd`` exits, the
    ``pid``/``tid`` target exits, ``duration`` seconds pass, or Ctrl-C. See
    :class:`Recorder` for the arguments."""
    rec = Recorder(events, freq=freq, period=period, callgraph=callgraph, pid=pid, tid=tid, cpus=cpus,
                   system_wide=system_wide, cmd=cmd, output=output, mmap_pages=mmap_pages, **kwargs)
    rec.start()
    return rec.run(duration)
