"""perf stat layouts: golden comparison with real perf 6.1 output (tests/data/stat)
and the rules of perf's own CSV/JSON output linters
(tools/perf/tests/shell/lib/perf_{csv,json}_output_lint.py)."""

from __future__ import annotations

import io
import json
import math

import pytest

from pmuscope.counting.results import EventCount
from pmuscope.counting.statfmt import StatPrinter
from pmuscope.cli.stat_cmd import _mean_counts


def ev(name, value, run=None, ena=None, unit="", scale=1.0, counted=True, supported=True):
    run = value if run is None else run
    ena = run if ena is None else ena
    scaled = value * ena / run if (counted and run) else 0.0
    return EventCount(name, value, ena, run, scaled, counted, supported, unit, scale)


def clock(name, ns, run=None, ena=None):
    return ev(name, ns, run if run is not None else ns, ena, unit="msec", scale=1e-6)


def render(groups, duration_ns, **kw):
    buf = io.StringIO()
    ts = kw.pop("ts", None)
    StatPrinter(buf, **kw).print_block(groups, duration_ns, ts=ts)
    return buf.getvalue().splitlines()


# --- golden: perf 6.1 on this machine ------------------------------------------

def test_human_layout_matches_perf_61(data_dir):
    # raw values chosen to reproduce the printed numbers of perf61_human.txt
    task = 190070
    evs = [clock("task-clock", task), ev("page-faults", 51, task), ev("context-switches", 0, task),
           ev("cycles", 595174, task)]
    buf = io.StringIO()
    p = StatPrinter(buf, "human", big_num=False)
    p.header("'true'")
    p.print_block([(None, 1, evs)], 373990)
    p.footer(0.000373990, 0.000385, 0.0)
    assert buf.getvalue() == (data_dir / "stat" / "perf61_human.txt").read_text()


def _perf_json_counts(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    task = next(r for r in rows if r["event"] == "task-clock")
    duration = task["event-runtime"] / task["metric-value"]
    evs = []
    for r in rows:
        if r["unit"] == "msec":
            evs.append(clock(r["event"], r["event-runtime"]))
        else:
            evs.append(ev(r["event"], int(float(r["counter-value"])), r["event-runtime"]))
    return rows, evs, duration


def test_json_and_csv_match_perf_61(data_dir):
    rows, evs, duration = _perf_json_counts(data_dir / "stat" / "perf61_json.txt")
    ours = [json.loads(line) for line in render([(None, 1, evs)], duration, mode="json")]
    assert [list(o) for o in ours] == [list(r) for r in rows]  # same keys, same order
    for o, r in zip(ours, rows):
        assert o["counter-value"] == r["counter-value"] and o["event-runtime"] == r["event-runtime"]
        assert o["metric-unit"] == r["metric-unit"]
        assert o["metric-value"] == pytest.approx(r["metric-value"], rel=1e-5)
    csv = render([(None, 1, evs)], duration, mode="csv", sep=",")
    perf_csv = (data_dir / "stat" / "perf61_csv.txt").read_text().splitlines()
    for ours_line, perf_line in zip(csv, perf_csv):
        a, b = ours_line.split(","), perf_line.split(",")
        assert len(a) == len(b) == 7
        assert a[1:3] == b[1:3] and a[4] == b[4] and a[6] == b[6]  # unit, event, pcnt, metric unit


def test_per_core_csv_and_per_socket_json_prefixes(data_dir):
    line = (data_dir / "stat" / "perf61_csv_per_core.txt").read_text().splitlines()[0]
    f = line.split(",")
    got = render([(f[0], 1, [clock("cpu-clock", int(f[5]))])], int(f[5]) / float(f[7]), mode="csv", aggr="core")
    assert got[0].split(",")[:7] == f[:7]
    perf = json.loads((data_dir / "stat" / "perf61_json_per_socket.txt").read_text())
    ours = json.loads(render([("S0", 2, [clock("cpu-clock", perf["event-runtime"])])], 1e6, mode="json",
                             aggr="socket")[0])
    assert ours["socket"] == "S0" and ours["counters"] == perf["aggregate-number"] == 2


# --- perf's linters ------------------------------------------------------------

def csv_lint(lines, expected_seps, sep=","):
    """perf_csv_output_lint.py: every line (except 'failed') has N separators."""
    for line in lines:
        if "failed" in line or not line.strip():
            continue
        assert line.count(sep) == expected_seps, line


def _isfloat(x):
    try:
        float(x)
        return True
    except (TypeError, ValueError):
        return False


JSON_CHECKS = {
    "aggregate-number": _isfloat, "counters": _isfloat, "core": lambda x: True, "counter-value":
        lambda x: _isfloat(x) or x in ("<not counted>", "<not supported>"),
    "cgroup": lambda x: True, "cpu": lambda x: _isfloat(x) and float(x).is_integer(), "event": lambda x: True,
    "event-runtime": _isfloat, "interval": _isfloat, "metric-unit": lambda x: True,
    "metric-value": lambda x: _isfloat(x) or x == "none", "node": lambda x: True, "pcnt-running": _isfloat,
    "socket": lambda x: True, "thread": lambda x: True, "unit": lambda x: True, "die": lambda x: True,
}


def json_lint(lines, key_counts):
    """perf_json_output_lint.py: key count per object and typed allow-list."""
    objs = json.loads("[" + ",".join(line for line in lines if line.strip()) + "]")
    for obj in objs:
        metric_line = set(obj) <= {"interval", "cpu", "core", "socket", "node", "die", "thread", "counters",
                                   "metric-value", "metric-unit"}
        if not metric_line:
            assert len(obj) in key_counts, obj
        for key, value in obj.items():
            assert key in JSON_CHECKS, f"unexpected key {key}"
            assert JSON_CHECKS[key](value), (key, value)
    return objs


def _sample(multiplexed=False):
    task = 2_000_000
    return [clock("task-clock", task), ev("page-faults", 100, task),
            ev("cycles", 5000, task // 4 if multiplexed else task, task),
            ev("instructions", 8000, task), ev("stalled-cycles-frontend", 1000, task),
            ev("branches", 0, 0, 0, counted=False, supported=False),
            ev("branch-misses", 0, 0, 1000, counted=False)]


@pytest.mark.parametrize("aggr,key,nr,seps,keys", [
    ("global", None, 2, 6, (5, 7)), ("cpu", 1, 1, 7, (6, 8)), ("thread", ("python3", 42), 1, 7, (6, 8)),
    ("core", "S0-D0-C1", 1, 8, (7, 9)), ("socket", "S0", 2, 8, (7, 9)), ("node", "N0", 2, 8, (7, 9)),
])
def test_linters_accept_every_aggregation_mode(aggr, key, nr, seps, keys):
    groups = [(key, nr, _sample(multiplexed=True))]
    csv = render(groups, 4e6, mode="csv", sep=";", aggr=aggr)
    csv_lint(csv, seps, sep=";")
    objs = json_lint(render(groups, 4e6, mode="json", aggr=aggr), keys)
    values = [o.get("counter-value") for o in objs]
    assert "<not supported>" in values and "<not counted>" in values
    assert any(o.get("metric-unit") == "stalled cycles per insn" for o in objs)
    # intervals add one field / key
    csv_lint(render(groups, 4e6, mode="csv", aggr=aggr, ts=1.5), seps + 1)
    objs = json_lint(render(groups, 4e6, mode="json", aggr=aggr, ts=1.5), tuple(k + 1 for k in keys))
    assert objs[0]["interval"] == 1.5


def test_human_marks_scaling_and_status():
    lines = render([(None, 1, _sample(multiplexed=True))], 4e6, mode="human", big_num=True)
    cyc = next(line for line in lines if " cycles " in line)
    assert cyc.rstrip().endswith("(25.00%)")  # run/ena
    assert "20,000" in cyc  # scaled 5000 * 4, with a thousands separator
    assert any(line.lstrip().startswith("<not supported>") and "branches" in line for line in lines)
    bm = next(line for line in lines if "branch-misses" in line)
    assert bm.lstrip().startswith("<not counted>") and bm.rstrip().endswith("(0.00%)")
    ipc = next(line for line in lines if "instructions" in line)
    assert "#    0.40  insn per cycle" in ipc  # 8000 / 20000 scaled cycles


def test_interval_and_per_cpu_human_prefixes():
    lines = render([(0, 1, [clock("cpu-clock", 10**8)]), (1, 1, [clock("cpu-clock", 10**8)])], 10**8,
                   mode="human", aggr="cpu", ts=0.100368483)
    assert lines[0] == "#           time CPU    counts unit events"
    assert lines[1].startswith("     0.100368483 CPU0                   100.00 msec cpu-clock ")
    assert "#    1.000 CPUs utilized" in lines[1]


def test_repeat_mean_and_relative_stddev():
    class Fake:
        def __init__(self, v):
            self.v = v

        def aggregate(self, aggr, topo):
            return [(None, 1, [ev("page-faults", self.v)])]

    groups, var = _mean_counts([Fake(100), Fake(110), Fake(120)], "global", None)
    mean = groups[0][2][0]
    assert mean.scaled == 110
    # perf: stddev of the mean = sqrt(var/n), var = M2/(n-1); relative in %
    assert var[(None, "page-faults")] == pytest.approx(100 * math.sqrt(100 / 3) / 110)
    lines = render([(None, 1, [mean])], 1e9, mode="human", big_num=False)
    buf = io.StringIO()
    StatPrinter(buf, "human").print_block([(None, 1, [mean])], 1e9, variances={"page-faults": 5.25})
    assert buf.getvalue().rstrip().endswith("( +-  5.25% )")
    assert lines
