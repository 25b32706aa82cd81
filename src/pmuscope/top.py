"""``perf top``: live sampling with a symbol table refreshed every few seconds.

A :class:`Top` session samples the whole machine (or ``pid``) with a
:class:`~pmuscope.sampling.Recorder` that writes no file (``cycles`` where a
hardware PMU samples it, else ``cpu-clock``, as perf top falls back), drains
the rings every ``delay`` seconds, symbolizes the new samples with one
long-lived :class:`~pmuscope.profile.model.ProfileBuilder` (so each binary is
parsed once and processes keep their names and maps), and aggregates them with
:func:`~pmuscope.profile.report.build_report`.

As in perf top, an entry's weight decays between refreshes (perf's
``hists__decay_entries``: each refresh keeps 7/8 of it, an entry is dropped
once it reaches zero); ``zero=True`` (perf top ``-z``) shows only the last
interval.

>>> with Top(delay=1.0) as top:              # doctest: +SKIP
...     snap = top.refresh()
...     print(format_top(snap))
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Sequence

from .errors import PmuscopeError

#: perf top's decay per refresh (hists__decay_entry: period * 7 / 8)
DECAY = 7 / 8
DEFAULT_SORT = ("dso", "sym")


@dataclass
class TopRow:
    keys: dict[str, str]
    display: dict[str, str]
    period: float
    samples: float
    overhead: float = 0.0

    def as_json(self) -> dict:
        out = {"overhead": round(self.overhead, 4), "samples": int(round(self.samples)), "period": int(self.period)}
        out.update(self.keys)
        return out


@dataclass
class TopSnapshot:
    """One refresh: rows highest overhead first."""

    event: str
    sort: tuple[str, ...]
    interval: float
    #: samples taken in the last interval, and since the start
    samples: int
    total_samples: int
    lost: int
    rows: list[TopRow] = field(default_factory=list)
    target: str = "system-wide"
    notes: list[str] = field(default_factory=list)
    #: share of the interval's samples taken in the kernel (percent)
    kernel_pct: float = 0.0
    freq: int | None = None
    #: perf top's target text: "all, N CPUs" or "target_pid: N"
    perf_target: str = ""

    def to_json(self) -> dict:
        return {"event": self.event, "target": self.target, "sort": list(self.sort), "interval": self.interval,
                "samples": self.samples, "total_samples": self.total_samples, "lost": self.lost,
                "kernel_pct": round(self.kernel_pct, 2), "rows": [r.as_json() for r in self.rows]}


class Top:
    """A live perf-top session (see the module docstring).

    ``events``: a perf event list (default: ``cycles``, or ``cpu-clock``
    without a hardware PMU); ``pid``: processes to follow instead of the
    whole machine; ``cpus``: a CPU list for system-wide sampling; ``freq``:
    samples per second per CPU (default 4000, lowered to the kernel limit);
    ``sort``: report keys (default ``dso,sym`` like perf top).
    """

    def __init__(self, events: str | None = None, *, pid: int | Sequence[int] | None = None,
                 cpus: str | None = None, freq: int | None = None, sort: Sequence[str] = DEFAULT_SORT,
                 delay: float = 2.0, zero: bool = False, procfs_root: str = "/proc") -> None:
        from .sampling import Recorder

        if delay <= 0:
            raise PmuscopeError(f"refresh delay must be positive, got {delay}")
        self.delay = delay
        self.zero = zero
        self.sort = tuple(sort)
        self.procfs_root = procfs_root
        pids = [pid] if isinstance(pid, int) else list(pid or [])
        self.target = f"pid {','.join(map(str, pids))}" if pids else (f"CPU(s) {cpus}" if cpus else "system-wide")
        self.rec = Recorder(events, freq=freq, pid=pids or None, cpus=cpus, system_wide=not pids, output=None,
                            sample_cpu=True, procfs_root=procfs_root, build_ids=False)
        self._pids = pids
        self._builder = None
        self._table = None
        self._stats = None
        self._acc: dict[tuple, TopRow] = {}
        self._total = 0
        self._last = time.monotonic()

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> "Top":
        from .profile.model import ProfileBuilder
        from .records import DecodeStats, decode
        from .sampling import synthesize as synth
        from .symbols import Symbolizer

        self.rec.start()
        self._table = self.rec.attr_table()
        self._stats = DecodeStats()
        self._builder = ProfileBuilder(self._table, event_names=list(self.rec.names),
                                       symbolizer=Symbolizer(procfs_root=self.procfs_root, use_proc_maps=True))
        # the side band of the processes that exist already (the recorder
        # writes it only into a file): names and maps for the builder
        st = int(self.rec.attrs[0].sample_type)
        pids = synth.all_pids(self.procfs_root) if not self._pids else self._pids
        blob = b"".join(synth.synthesize(pids, st, procfs_root=self.procfs_root))
        for item in decode(blob, self._table, stats=self._stats):
            self._builder.feed(item)
        self._last = time.monotonic()
        return self

    @property
    def notes(self) -> list[str]:
        return list(self.rec.notes)

    @property
    def event(self) -> str:
        return ",".join(self.rec.names)

    def close(self) -> None:
        self.rec.stop()
        try:
            self.rec.close()
        except Exception:
            pass

    def __enter__(self) -> "Top":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- refreshing ---------------------------------------------------------------------
    def _collect(self, until: float) -> None:
        from .records import decode

        while True:
            left = until - time.monotonic()
            for chunk in self.rec.poll(max(0.0, min(left, 0.25))):
                for item in decode(chunk, self._table, stats=self._stats):
                    self._builder.feed(item)
            if left <= 0 or self.rec._finished(None):
                break

    def _take_profile(self):
        """The samples since the last refresh, as a Profile (the builder's
        output columns are emptied: memory stays bounded by one interval)."""
        prof = self._builder.finish(stats=self._stats)
        # why: finish() leaves the builder able to go on (its session state,
        # frame caches and symbol tables stay); only the per-sample output
        # columns are dropped, so the next refresh starts from zero samples
        for parts in getattr(self._builder, "_out", {}).values():
            parts.clear()
        return prof

    def refresh(self, timeout: float | None = None) -> TopSnapshot:
        """Sample until ``delay`` (or ``timeout``) seconds after the last
        refresh, then return the updated table."""
        from .profile.report import build_report

        if self._builder is None:
            self.start()
        wait = self.delay if timeout is None else timeout
        self._collect(self._last + wait)
        now = time.monotonic()
        interval, self._last = now - (self._last), now
        prof = self._take_profile()
        n = len(prof)
        self._total += n
        if self.zero:
            self._acc.clear()
        else:
            for key in list(self._acc):
                row = self._acc[key]
                row.period *= DECAY
                row.samples *= DECAY
                if row.period < 1.0:
                    del self._acc[key]
        if n:
            rep = build_report(prof, self.sort, event=self.event)
            for row, disp in zip(rep.rows, rep.display):
                key = tuple(str(row.keys[k]) for k in self.sort)
                acc = self._acc.get(key)
                if acc is None:
                    self._acc[key] = TopRow({k: str(v) for k, v in row.keys.items()}, dict(disp), row.period,
                                            float(row.samples))
                else:
                    acc.period += row.period
                    acc.samples += row.samples
        total = sum(r.period for r in self._acc.values()) or 1.0
        rows = sorted(self._acc.values(), key=lambda r: -r.period)
        for r in rows:
            r.overhead = 100.0 * r.period / total
        kernel = float((prof.cpumode == 1).sum()) * 100.0 / n if n else 0.0  # PERF_RECORD_MISC_KERNEL
        attr = self.rec.attrs[0]
        freq = int(attr.sample_freq) if attr.freq else None
        perf_target = (f"target_pid: {','.join(map(str, self._pids))}" if self._pids
                       else f"all, {len(self.rec.cpus)} CPU{'s' if len(self.rec.cpus) != 1 else ''}")
        return TopSnapshot(self.event, self.sort, round(interval, 3), n, self._total, int(self._stats.lost),
                           rows, self.target, self.notes, kernel, freq, perf_target)


def format_top(snap: TopSnapshot, *, rows: int | None = None, width: int | None = None) -> str:
    """perf top --stdio's screen: a header line, then ``Overhead  <keys>``."""
    from .profile.report import _HEADERS

    # perf top's header (perf_top__header_snprintf), less its exact/drop counts
    rate = f"{snap.freq}Hz " if snap.freq else ""
    head = (f"   PerfTop: {snap.samples / max(snap.interval, 1e-9):8.0f} irqs/sec  kernel:{snap.kernel_pct:4.1f}%  "
            f"lost: {snap.lost}/{snap.samples}  [{rate}{snap.event}],  ({snap.perf_target})")
    out = [head, "-" * min(len(head), width or len(head)), ""]
    shown = snap.rows[:rows] if rows else snap.rows
    widths = {k: max([len(_HEADERS[k])] + [len(r.display.get(k, r.keys[k])) for r in shown]) for k in snap.sort}
    out.append("Overhead  " + "  ".join(f"{_HEADERS[k]:<{widths[k]}}" for k in snap.sort).rstrip())
    for r in shown:
        cells = "  ".join(f"{r.display.get(k, r.keys[k]):<{widths[k]}}" for k in snap.sort)
        line = f"{r.overhead:7.2f}%  {cells}".rstrip()
        out.append(line[:width] if width else line)
    return "\n".join(out) + "\n"


def top_json(snap: TopSnapshot) -> str:
    return json.dumps(snap.to_json())
