"""pmuscope serve without a kernel: exposition formats (parsed back by
prometheus_client), names, per-CPU/node aggregation, derived gauges, health,
the HTTP endpoint and the textfile writer, over a fake counting session."""

from __future__ import annotations

import http.client
import os
import threading

import numpy as np
import pytest

from pmuscope import errors
from pmuscope.counting.results import Counts, Layout
from pmuscope.events import parse_events
from pmuscope.serve import (
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    CounterExporter,
    MetricFamily,
    MetricsServer,
    Source,
    event_metric,
    negotiate,
    render,
    write_textfile,
)
from pmuscope.serve.collector import read_proc_stat

prom_parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client (test extra) not installed")
om_parser = pytest.importorskip("prometheus_client.openmetrics.parser")

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


class FakeEvsel:
    def __init__(self, spec):
        self.spec = spec
        self.name = spec.name


class FakeCounter:
    """A counting session whose reads return scripted ``[event, cpu, 3]`` arrays."""

    def __init__(self, events: str, cpus, reads, supported=None):
        self.evsels = [FakeEvsel(s) for s in parse_events(events)]
        n = len(self.evsels)
        self.layout = Layout(
            names=tuple(e.name for e in self.evsels), units=("",) * n, scales=(1.0,) * n,
            supported=tuple(supported or (True,) * n), errors=(None,) * n, cpus=tuple(cpus), threads=(-1,),
            units_plan=(), system_wide=True,
        )
        self.reads = list(reads)
        self.fd_count = n * len(cpus)
        self.closed = False
        self.t = 0

    def read(self):
        item = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(item, Exception):
            raise item
        ts, arr = item
        data = np.asarray(arr, dtype=np.uint64)[:, :, None, :]
        return Counts(self.layout, None, ts, 0, data=data)

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _samples(text: str, openmetrics: bool = False) -> dict[tuple, float]:
    parse = om_parser.text_string_to_metric_families if openmetrics else prom_parser.text_string_to_metric_families
    out = {}
    for fam in parse(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _arr(rows):
    """rows: per event, per cpu (value, enabled_ns, running_ns)."""
    return np.array(rows, dtype=np.uint64)


def test_render_text_and_openmetrics_parse_back():
    fams = [
        MetricFamily("pmuscope_perf_cpucycles_total", "counter", 'cycles "quoted" \\ back\nslash',
                     samples=[({"cpu": "0"}, 12345678901234), ({"cpu": "1"}, 7)]),
        MetricFamily("pmuscope_perf_cpu_clock_seconds", "counter", "clock", "seconds", samples=[({"cpu": "0"}, 1.5)]),
        MetricFamily("pmuscope_ipc", "gauge", "ipc", samples=[({"cpu": "0", "weird": 'a"b\\c\nd'}, float("nan"))]),
        MetricFamily("pmuscope_build", "info", "v", samples=[({"version": "1"}, 1)]),
    ]
    text = render(fams)
    om = render(fams, openmetrics=True)
    assert om.endswith("# EOF\n") and "# EOF" not in text
    assert "# TYPE pmuscope_perf_cpucycles_total counter" in text
    assert "# TYPE pmuscope_perf_cpucycles counter" in om and "# UNIT pmuscope_perf_cpu_clock_seconds seconds" in om
    for parsed in (_samples(text), _samples(om, True)):
        assert parsed[("pmuscope_perf_cpucycles_total", (("cpu", "0"),))] == 12345678901234
        assert parsed[("pmuscope_perf_cpucycles_total", (("cpu", "1"),))] == 7
        assert parsed[("pmuscope_perf_cpu_clock_seconds_total", (("cpu", "0"),))] == 1.5
        nan_key = ("pmuscope_ipc", (("cpu", "0"), ("weird", 'a"b\\c\nd')))
        assert parsed[nan_key] != parsed[nan_key]  # NaN survives, label escaping round-trips
    om_fams = {f.name: f for f in om_parser.text_string_to_metric_families(om)}
    assert om_fams["pmuscope_perf_cpucycles"].type == "counter"
    assert om_fams["pmuscope_perf_cpu_clock_seconds"].unit == "seconds"
    assert om_fams["pmuscope_perf_cpucycles"].documentation == 'cycles "quoted" \\ back\nslash'
    assert om_fams["pmuscope_build"].type == "info"


def test_unit_must_suffix_name():
    with pytest.raises(ValueError):
        MetricFamily("pmuscope_clock", "counter", "x", "seconds")


@pytest.mark.parametrize("accept, om", [
    (PROMETHEUS_ACCEPT, True),
    ("text/plain;version=0.0.4", False),
    (None, False),
    ("application/openmetrics-text;version=2.0.0,text/plain;q=0.5", False),
    ("application/openmetrics-text;q=0.3, text/plain;q=0.9", False),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
])
def test_negotiate(accept, om):
    assert negotiate(accept) is om


@pytest.mark.parametrize("event, name, unit", [
    ("cycles", "pmuscope_perf_cpucycles", ""),
    ("instructions", "pmuscope_perf_instructions", ""),
    ("branch-misses", "pmuscope_perf_branch_misses", ""),
    ("cache-references", "pmuscope_perf_cache_refs", ""),
    ("ref-cycles", "pmuscope_perf_ref_cpucycles", ""),
    ("stalled-cycles-backend", "pmuscope_perf_stalled_cycles_backend", ""),
    ("context-switches", "pmuscope_perf_context_switches", ""),
    ("major-faults", "pmuscope_perf_major_faults", ""),
    ("cpu-clock", "pmuscope_perf_cpu_clock_seconds", "seconds"),
    ("task-clock", "pmuscope_perf_task_clock_seconds", "seconds"),
    ("L1-dcache-load-misses", "pmuscope_perf_cache_l1d_read_misses", ""),
    ("L1-dcache-loads", "pmuscope_perf_cache_l1d_read_hits", ""),
    ("dTLB-store-misses", "pmuscope_perf_cache_tlb_data_write_misses", ""),
    ("LLC-loads", "pmuscope_perf_cache_ll_read_hits", ""),
    ("branch-load-misses", "pmuscope_perf_cache_bpu_read_misses", ""),
    ("cycles:u", "pmuscope_perf_cpucycles", ""),
])
def test_node_exporter_names(event, name, unit):
    """node_exporter's perf_linux.go names with the pmuscope_ prefix."""
    (spec,) = parse_events(event)
    em = event_metric(spec)
    assert (em.name, em.unit) == (name, unit)
    assert em.factor == (1e-9 if unit == "seconds" else 1.0)


def test_tracepoint_name():
    from pmuscope.events.spec import EventSpec
    from pmuscope.kernel import abi

    attr = abi.perf_event_attr()
    attr.type = abi.PERF_TYPE_TRACEPOINT
    spec = EventSpec("sched:sched_process_exec", attr, pmu="tracepoint", extra={"tracepoint": ("sched", "sched_process_exec")})
    assert event_metric(spec).name == "pmuscope_perf_sched_sched_process_exec"


def _exporter(reads, events="cpu-clock,{cycles,instructions}", cpus=(0, 1), per="cpu", node_of=None, supported=None):
    ctr = FakeCounter(events, cpus, reads, supported)
    clock = Clock()
    ex = CounterExporter([Source(ctr)], per=per, node_of=node_of, window=1.0, procfs="/nonexistent", clock=clock)
    return ex, ctr, clock


R0 = _arr([
    [(1_000_000_000, 1_000_000_000, 1_000_000_000), (1_000_000_000, 1_000_000_000, 1_000_000_000)],
    [(2_000, 1_000_000_000, 500_000_000), (4_000, 1_000_000_000, 1_000_000_000)],
    [(3_000, 1_000_000_000, 500_000_000), (2_000, 1_000_000_000, 1_000_000_000)],
])
R1 = _arr([
    [(3_000_000_000, 3_000_000_000, 3_000_000_000), (3_000_000_000, 3_000_000_000, 3_000_000_000)],
    [(3_000, 3_000_000_000, 1_000_000_000), (8_000, 3_000_000_000, 3_000_000_000)],
    [(6_000, 3_000_000_000, 1_000_000_000), (10_000, 3_000_000_000, 3_000_000_000)],
])


def test_collect_per_cpu_counters_times_and_ipc():
    ex, ctr, clock = _exporter([(1_000_000_000, R0), (3_000_000_000, R1)])
    first = _samples(render(ex.collect()))
    assert first[("pmuscope_perf_cpucycles_total", (("cpu", "0"),))] == 2000
    assert first[("pmuscope_perf_cpu_clock_seconds_total", (("cpu", "1"),))] == 1.0
    assert first[("pmuscope_perf_time_running_seconds_total", (("cpu", "0"), ("event", "cycles")))] == 0.5
    assert first[("pmuscope_perf_time_enabled_seconds_total", (("cpu", "0"), ("event", "cycles")))] == 1.0
    assert not any(k[0] == "pmuscope_instructions_per_cycle" for k in first)  # needs two reads a window apart
    clock.t = 2.0
    second = _samples(render(ex.collect(), openmetrics=True), True)
    assert second[("pmuscope_perf_cpucycles_total", (("cpu", "0"),))] == 3000
    # IPC over the window from *scaled* deltas: cpu0 scaled cycles 1000*2/0.5=4000, instr 3000*2/0.5=12000
    assert second[("pmuscope_instructions_per_cycle", (("cpu", "0"),))] == pytest.approx(3.0)
    assert second[("pmuscope_instructions_per_cycle", (("cpu", "1"),))] == pytest.approx(8000 / 4000)
    assert second[("pmuscope_perf_running_ratio", (("cpu", "0"), ("event", "cycles")))] == pytest.approx(0.25)
    assert second[("pmuscope_scrapes_total", ())] == 2
    assert second[("pmuscope_open_fds", (("kind", "perf_event"),))] == 6
    assert second[("pmuscope_read_errors_total", ())] == 0
    ex.close()
    assert ctr.closed


def test_per_node_and_global_sum_cpus():
    reads = [(1, _arr([[(5, 10, 10), (7, 10, 10), (11, 10, 5)]]))]
    ex, *_ = _exporter(reads, events="context-switches", cpus=(0, 1, 2), per="node", node_of={0: 0, 1: 1, 2: 1})
    s = _samples(render(ex.collect()))
    assert s[("pmuscope_perf_context_switches_total", (("node", "0"),))] == 5
    assert s[("pmuscope_perf_context_switches_total", (("node", "1"),))] == 18
    assert s[("pmuscope_perf_time_running_seconds_total", (("event", "context-switches"), ("node", "1")))] == 15e-9
    ex, *_ = _exporter(reads, events="context-switches", cpus=(0, 1, 2), per="global")
    s = _samples(render(ex.collect()))
    assert s[("pmuscope_perf_context_switches_total", ())] == 23


def test_unsupported_event_is_flagged_not_exported():
    reads = [(1, _arr([[(5, 10, 10)], [(0, 0, 0)]]))]
    ex, *_ = _exporter(reads, events="context-switches,cycles", cpus=(0,), supported=(True, False))
    s = _samples(render(ex.collect()))
    assert s[("pmuscope_perf_event_supported", (("event", "cycles"),))] == 0
    assert s[("pmuscope_perf_event_supported", (("event", "context-switches"),))] == 1
    assert not any(k[0] == "pmuscope_perf_cpucycles_total" for k in s)


def test_read_error_counted_and_last_values_served():
    reads = [(1, _arr([[(5, 10, 10)]])), OSError(5, "Input/output error"), (3, _arr([[(9, 30, 30)]]))]
    ex, *_ = _exporter(reads, events="context-switches", cpus=(0,))
    ex.collect()
    s = _samples(render(ex.collect()))
    assert s[("pmuscope_read_errors_total", ())] == 1
    assert s[("pmuscope_perf_context_switches_total", (("cpu", "0"),))] == 5
    s = _samples(render(ex.collect()))
    assert s[("pmuscope_perf_context_switches_total", (("cpu", "0"),))] == 9
    assert ex.health.last_error.endswith("Input/output error")


def test_lost_records_from_sampling_sessions():
    ex, *_ = _exporter([(1, R0)])
    ex.health.lost_record_sources.append(lambda: 17)
    ex.health.lost_record_sources.append(lambda: 1 / 0)  # a session that went away is ignored
    assert _samples(render(ex.collect()))[("pmuscope_lost_records_total", ())] == 17


def test_proc_stat_utilization(tmp_path):
    (tmp_path / "stat").write_text("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 10 0 10 30 0 0 0 0 0 0\ncpu1 0 0 0 50 0 0 0 0 0 0\nintr 1\n")
    assert read_proc_stat(str(tmp_path)) == {-1: (20, 100), 0: (20, 50), 1: (0, 50)}
    ctr = FakeCounter("context-switches", (0, 1), [(1, _arr([[(1, 1, 1), (1, 1, 1)]]))])
    clock = Clock()
    ex = CounterExporter([Source(ctr)], procfs=str(tmp_path), clock=clock)
    ex.collect()
    (tmp_path / "stat").write_text("cpu  40 0 10 150 0 0 0 0 0 0\ncpu0 40 0 10 50 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\n")
    clock.t = 1.5
    s = _samples(render(ex.collect()))
    assert s[("pmuscope_cpu_utilization_ratio", (("cpu", "0"),))] == pytest.approx(30 / 50)
    assert s[("pmuscope_cpu_utilization_ratio", (("cpu", "1"),))] == 0.0
    # only the CPUs being counted (-C) get a utilization series
    (tmp_path / "stat").write_text("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 10 0 10 30 0 0 0 0 0 0\ncpu1 0 0 0 50 0 0 0 0 0 0\n")
    ctr = FakeCounter("context-switches", (1,), [(1, _arr([[(1, 1, 1)]]))])
    ex = CounterExporter([Source(ctr)], procfs=str(tmp_path), clock=clock)
    ex.collect()
    (tmp_path / "stat").write_text("cpu  20 0 10 90 0 0 0 0 0 0\ncpu0 20 0 10 35 0 0 0 0 0 0\ncpu1 0 0 0 55 0 0 0 0 0 0\n")
    clock.t = 5.0
    s = _samples(render(ex.collect()))
    assert [k for k in s if k[0] == "pmuscope_cpu_utilization_ratio"] == [("pmuscope_cpu_utilization_ratio", (("cpu", "1"),))]


def test_bad_per_mode():
    with pytest.raises(errors.PmuscopeError, match="aggregation"):
        CounterExporter([], per="socket")


@pytest.fixture()
def server():
    ex, *_ = _exporter([(1, R0)])
    srv = MetricsServer(ex, "127.0.0.1", 0)
    t = srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(5)


def _request(srv, method, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    return resp, body


def test_http_endpoint_content_negotiation(server):
    assert server.server_address[0] == "127.0.0.1"
    resp, body = _request(server, "GET", "/metrics", {"Accept": PROMETHEUS_ACCEPT})
    assert resp.status == 200 and resp.getheader("Content-Type") == OPENMETRICS_CONTENT_TYPE
    assert body.endswith("# EOF\n")
    assert _samples(body, True)[("pmuscope_perf_cpucycles_total", (("cpu", "1"),))] == 4000
    resp, body = _request(server, "GET", "/metrics")
    assert resp.getheader("Content-Type") == TEXT_CONTENT_TYPE and "# EOF" not in body
    assert _samples(body)[("pmuscope_perf_instructions_total", (("cpu", "0"),))] == 3000


def test_http_endpoint_is_read_only(server):
    for method in ("POST", "PUT", "DELETE"):
        resp, _ = _request(server, method, "/metrics")
        assert resp.status == 405 and resp.getheader("Allow") == "GET, HEAD"
    resp, _ = _request(server, "GET", "/record?pid=1")
    assert resp.status == 404


def test_http_concurrent_scrapes(server):
    results = []

    def scrape():
        results.append(_request(server, "GET", "/metrics")[0].status)

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [200] * 8
    assert server.exporter.health.scrapes == 8


def test_listen_error_is_clear():
    ex, *_ = _exporter([(1, R0)])
    with pytest.raises(errors.PmuscopeError, match="cannot listen"):
        MetricsServer(ex, "203.0.113.1", 0)  # TEST-NET-3: not an address of this machine


def test_textfile_written_atomically(tmp_path):
    ex, *_ = _exporter([(1, R0)])
    path = write_textfile(ex, str(tmp_path))
    assert os.listdir(tmp_path) == ["pmuscope.prom"]
    with open(path) as f:
        text = f.read()
    assert _samples(text)[("pmuscope_perf_cpucycles_total", (("cpu", "0"),))] == 2000
    assert "# EOF" not in text  # node_exporter's textfile collector reads the text format
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    with pytest.raises(errors.PmuscopeError, match="does not exist"):
        write_textfile(ex, str(tmp_path / "missing"))


def test_duplicate_event_is_refused():
    with pytest.raises(errors.PmuscopeError, match="list each event once"):
        _exporter([(1, _arr([[(1, 1, 1)], [(1, 1, 1)]]))], events="cycles,cpu-cycles", cpus=(0,))


def test_http_gzip_when_asked(server):
    import gzip

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    assert resp.getheader("Content-Encoding") == "gzip"
    assert _samples(gzip.decompress(raw).decode())[("pmuscope_perf_cpucycles_total", (("cpu", "0"),))] == 2000
    resp, _ = _request(server, "GET", "/metrics", {"Accept-Encoding": "gzip;q=0, identity"})
    assert resp.getheader("Content-Encoding") is None
