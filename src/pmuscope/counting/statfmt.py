"""perf stat's output layouts: the human table, ``-x SEP`` CSV and ``-j`` JSON lines.

Field order, widths and keys follow Linux perf's ``tools/perf/util/stat-display.c``
(6.1 as installed here, with the newer ``counters`` key instead of
``aggregate-number``, which current perf JSON linters expect).
"""

from __future__ import annotations

import math
from typing import IO, Sequence

from .metrics import METRICS, Metric, MetricValue, evaluate
from .results import EventCount

METRIC_LEN = 35  # perf 6.1 util/stat-display.c

#: human-output formats of the metrics (perf's print_metric fmt strings)
_CACHE_MISS = "%8.3f %%"


def _metric_fmt(m: Metric) -> str:
    return _CACHE_MISS if m.name == "cache-miss %" else m.fmt


class Row:
    """One printed event line: the aggregated count, its aggregation key and
    number of aggregated CPUs, and optional ``-r`` relative stddev (%)."""

    # a plain class, not a dataclass: `stat` must not pay for creating one at start-up
    __slots__ = ("count", "key", "nr", "variance")

    def __init__(self, count: EventCount, key: object = None, nr: int = 0, variance: float | None = None) -> None:
        self.count = count
        self.key = key
        self.nr = nr
        self.variance = variance

    def __repr__(self) -> str:
        return f"Row(count={self.count!r}, key={self.key!r}, nr={self.nr!r}, variance={self.variance!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.count, self.key, self.nr, self.variance) == (other.count, other.key, other.nr, other.variance)

    __hash__ = None  # type: ignore[assignment]  (mutable and compared by value, as the dataclass was)


def _json_str(text: str) -> str:
    """``json.dumps(text)``; json is imported only by the ``-j`` layout."""
    import json

    return json.dumps(text)


def _aggr_key_human(mode: str, key, nr: int, sep: str, csv: bool, comm: str = "") -> str:
    if mode == "global" or key is None:
        return ""
    if mode == "cpu":
        return f"CPU{key}{sep}" if csv else f"CPU{key:<7d}{sep}"
    if mode == "thread":
        comm_s, tid = key if isinstance(key, tuple) else ("", key)
        return f"{comm_s}-{tid}{sep}" if csv else f"{comm_s:>16}-{tid:<8d}{sep}"
    if mode == "core":
        return f"{key}{sep}{nr}{sep}" if csv else f"{key:<16}{sep}{nr:4d}{sep}"
    # socket, die, node: "S0", "S0-D0", "N0"
    if csv:
        return f"{key}{sep}{nr}{sep}"
    width = 6 if mode != "die" else 9
    return f"{key:<{width}}{sep}{nr:4d}{sep}"


def _aggr_key_json(mode: str, key, nr: int) -> str:
    if mode == "global" or key is None:
        return ""
    if mode == "cpu":
        return f'"cpu" : "{key}", '
    if mode == "thread":
        comm_s, tid = key if isinstance(key, tuple) else ("", key)
        return f'"thread" : "{comm_s}-{tid}", '
    name = {"core": "core", "die": "die", "socket": "socket", "node": "node"}[mode]
    return f'"{name}" : "{key}", "counters" : {nr}, '


def _pct_running(ev: EventCount) -> float:
    if ev.time_running != ev.time_enabled and ev.time_enabled:
        return 100.0 * ev.time_running / ev.time_enabled
    return 100.0 if ev.time_running == ev.time_enabled else 0.0


def format_big(value: float, decimals: int, big_num: bool, width: int = 18) -> str:
    if big_num:
        return f"{value:{width},.{decimals}f}"
    return f"{value:{width}.{decimals}f}"


def _decimals(scale: float) -> int:
    return 2 if math.floor(scale) != scale else 0


def shown_metrics(row_counts: dict[str, EventCount], duration_ns: float, metrics: tuple[Metric, ...] = METRICS):
    """``{event: [present MetricValue]}`` for one printed block."""
    out = {}
    for ev, values in evaluate(row_counts, duration_ns, metrics).items():
        present = [v for v in values if v.value is not None]
        if present:
            out[ev] = present
    return out


class StatPrinter:
    """Prints blocks of rows in one of perf stat's layouts.

    ``mode``: ``"human"``, ``"csv"`` (with ``sep``) or ``"json"``; ``aggr``:
    ``global``, ``cpu``, ``core``, ``die``, ``socket``, ``node``, ``thread``."""

    def __init__(self, out: IO[str], mode: str = "human", sep: str = ",", aggr: str = "global",
                 big_num: bool = True, interval: bool = False) -> None:
        self.out = out
        self.mode = mode
        self.sep = sep if mode == "csv" else " "
        self.aggr = aggr
        self.big_num = big_num and mode == "human"
        self.interval = interval
        self._intervals_printed = 0

    # -- pieces ---------------------------------------------------------------
    def _ts(self, ts: float | None) -> str:
        if ts is None:
            return ""
        sec = int(ts)
        nsec = int(round((ts - sec) * 1e9))
        if nsec >= 1_000_000_000:
            sec, nsec = sec + 1, nsec - 1_000_000_000
        if self.mode == "json":
            return f'"interval" : {sec}.{nsec:09d}, '
        return f"{sec:6d}.{nsec:09d}{self.sep}"

    def _metric_human(self, mv: MetricValue | None) -> str:
        if mv is None:
            return " " * METRIC_LEN
        value, unit = mv.scaled()
        val = _metric_fmt(mv.metric) % value
        head = " # " + val
        return head + " " + f"{unit:<{max(METRIC_LEN - len(head) - 1, 0)}}"

    def _metric_csv(self, mv: MetricValue | None) -> str:
        if mv is None:
            return self.sep + self.sep
        value, unit = mv.scaled()
        text = (_metric_fmt(mv.metric) % value).strip()
        end = 0
        while end < len(text) and (text[end].isdigit() or text[end] in ".-"):
            end += 1
        return f"{self.sep}{text[:end]}{self.sep}{unit}"

    def _metric_json(self, mv: MetricValue) -> str:
        value, unit = mv.scaled()
        return f'"metric-value" : {value:f}, "metric-unit" : {_json_str(unit)}'

    # -- one event ------------------------------------------------------------
    def event_lines(self, row: Row, metrics: Sequence[MetricValue], ts: float | None = None) -> list[str]:
        ev = row.count
        ts_s = self._ts(ts)
        if self.mode == "json":
            return self._json_lines(row, metrics, ts_s)
        csv = self.mode == "csv"
        sep = self.sep
        prefix = ts_s + _aggr_key_human(self.aggr, row.key, row.nr, sep, csv)
        counted = ev.supported and ev.counted
        noise = ""
        if row.variance is not None:
            noise = f"{sep}{row.variance:.2f}%" if csv else f"  ( +-{row.variance:6.2f}% )"
        run = ""
        if csv:
            run = f"{sep}{ev.time_running}{sep}{_pct_running(ev):.2f}"
        elif ev.time_running != ev.time_enabled:
            run = f"  ({_pct_running(ev):.2f}%)"
        first = metrics[0] if (metrics and counted) else None
        if counted:
            dec = _decimals(ev.scale)
            value = f"{ev.display:.{dec}f}" if csv else format_big(ev.display, dec, self.big_num)
            if csv:
                line = f"{prefix}{value}{sep}{ev.unit}{sep}{ev.name}{noise}{run}{self._metric_csv(first)}"
            else:
                line = f"{prefix}{value}{sep}{ev.unit:<4}{sep}{ev.name:<32}{self._metric_human(first)}{noise}{run}"
        else:
            status = ev.status
            if csv:
                line = f"{prefix}{status}{sep}{ev.unit}{sep}{ev.name}{noise}{run}{self._metric_csv(None)}"
            else:
                line = f"{prefix}{status:>18}{sep}{ev.unit:<4}{sep}{ev.name:<25}{' ' * METRIC_LEN}{noise}{run}"
        lines = [line]
        if counted:
            for mv in metrics[1:]:
                if csv:
                    # empty value,unit,event,[variance,]runtime,pcnt: the field count stays what perf's linter expects
                    empty = 5 + (row.variance is not None)
                    lines.append(f"{prefix}{sep * (empty - 1)}{self._metric_csv(mv)}")
                else:
                    pad = " " * 8 if self.aggr == "cpu" else ""
                    lines.append(f"{prefix}{pad}{' ' * 49}{self._metric_human(mv)}")
        return lines

    def _json_lines(self, row: Row, metrics: Sequence[MetricValue], ts_s: str) -> list[str]:
        ev = row.count
        prefix = ts_s + _aggr_key_json(self.aggr, row.key, row.nr)
        counted = ev.supported and ev.counted
        value = f"{ev.display:f}" if counted else ev.status
        parts = [f'{prefix}"counter-value" : "{value}", "unit" : {_json_str(ev.unit)}, "event" : {_json_str(ev.name)}, ']
        if row.variance is not None:
            parts.append(f'"variance" : {row.variance:.2f}, ')
        parts.append(f'"event-runtime" : {ev.time_running}, "pcnt-running" : {_pct_running(ev):.2f}')
        if counted and metrics:
            parts.append(", " + self._metric_json(metrics[0]))
        lines = ["{" + "".join(parts) + "}"]
        if counted:
            for mv in metrics[1:]:
                lines.append("{" + prefix + self._metric_json(mv) + "}")
        return lines

    # -- blocks ---------------------------------------------------------------
    def interval_header(self) -> str | None:
        if self.mode != "human":
            return None
        heads = {
            "global": "#           time             counts unit events",
            "cpu": "#           time CPU    counts unit events",
            "core": "#           time core         cpus             counts unit events",
            "die": "#           time die          cpus             counts unit events",
            "socket": "#           time socket cpus             counts unit events",
            "node": "#           time node   cpus             counts unit events",
            "thread": "#           time             comm-pid                  counts unit events",
        }
        return heads[self.aggr]

    def print_block(self, groups: Sequence[tuple[object, int, Sequence[EventCount]]], duration_ns: float,
                    ts: float | None = None, variances: dict[str, float] | None = None) -> None:
        """Print one read: ``groups`` as returned by :meth:`Counts.aggregate`.
        perf prints event-major for global/cpu/thread... and aggregation-key-major
        for core/socket/node; both are followed here."""
        w = self.out.write
        if ts is not None and self.mode == "human":
            if self._intervals_printed % 25 == 0:
                w(self.interval_header() + "\n")
            self._intervals_printed += 1
        blocks = []
        for key, nr, evs in groups:
            counts = {e.name: e for e in evs}
            metrics = shown_metrics(counts, duration_ns)
            blocks.append([(Row(e, key, nr, (variances or {}).get(e.name)), metrics.get(e.name, [])) for e in evs])
        if self.aggr in ("cpu", "thread") and blocks:
            # perf: for each event, every CPU/thread
            order = [blocks[b][i] for i in range(len(blocks[0])) for b in range(len(blocks))]
        else:
            order = [item for block in blocks for item in block]
        for row, metrics in order:
            for line in self.event_lines(row, metrics, ts):
                w(line + "\n")

    def header(self, target: str, runs: int = 1) -> None:
        if self.mode != "human":
            return
        runs_s = f" ({runs} runs)" if runs > 1 else ""
        self.out.write(f"\n Performance counter stats for {target}{runs_s}:\n\n")

    def footer(self, elapsed_s: float, user_s: float | None = None, sys_s: float | None = None,
               elapsed_stddev_s: float | None = None) -> None:
        if self.mode != "human":
            return
        w = self.out.write
        w("\n")
        if elapsed_stddev_s is None:
            w(f" {elapsed_s:17.9f} seconds time elapsed\n")
        else:
            precision = _precision(elapsed_stddev_s) + 2
            pct = 100.0 * elapsed_stddev_s / elapsed_s if elapsed_s else 0.0
            w(f" {elapsed_s:17.{precision}f} +- {elapsed_stddev_s:.{precision}f} seconds time elapsed  ( +-{pct:6.2f}% )\n")
        w("\n")
        if user_s is not None and sys_s is not None:
            w(f" {user_s:17.9f} seconds user\n")
            w(f" {sys_s:17.9f} seconds sys\n")
            w("\n\n")


def _precision(num: float) -> int:
    """perf's get_precision: decimals needed to show ``num``'s first digit."""
    if num <= 0:
        return 0
    e = math.floor(math.log10(num))
    return -e if e < 0 else 0
