"""node_exporter (Debian's prometheus-node-exporter) as the reference for
names and for the textfile collector:

- its perf collector (``--collector.perf``) and ``pmuscope serve`` count the
  same events here: every ``node_perf_<x>_total`` it exposes has a
  ``pmuscope_perf_<x>_total`` twin with the same ``cpu`` label values, and
  context switches per CPU over the same ~1.5 s window agree within 15 % + 80
  (both count system-wide; the two reads are a few ms apart);
- its textfile collector reads ``serve --textfile`` output without a scrape
  error and re-exposes our series.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ..conftest import stop_process as _stop

prom_parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client (test extra) not installed")


#: node_exporter perf collector name (hodgesds/perf-utils profilers) -> the perf event it opens
NODE_PERF_EVENTS = {
    "cpucycles": "cycles", "instructions": "instructions", "branch_instructions": "branches",
    "branch_misses": "branch-misses", "cache_refs": "cache-references", "cache_misses": "cache-misses",
    "ref_cpucycles": "ref-cycles", "stalled_cycles_frontend": "stalled-cycles-frontend",
    "stalled_cycles_backend": "stalled-cycles-backend",
    "page_faults": "page-faults", "context_switches": "context-switches", "cpu_migrations": "cpu-migrations",
    "minor_faults": "minor-faults", "major_faults": "major-faults",
    "cache_l1d_read_hits": "L1-dcache-loads", "cache_l1d_read_misses": "L1-dcache-load-misses",
    "cache_l1d_write_hits": "L1-dcache-stores", "cache_l1_instr_read_misses": "L1-icache-load-misses",
    "cache_tlb_instr_read_hits": "iTLB-loads", "cache_tlb_instr_read_misses": "iTLB-load-misses",
    "cache_tlb_data_read_hits": "dTLB-loads", "cache_tlb_data_read_misses": "dTLB-load-misses",
    "cache_tlb_data_write_hits": "dTLB-stores", "cache_tlb_data_write_misses": "dTLB-store-misses",
    "cache_ll_read_hits": "LLC-loads", "cache_ll_read_misses": "LLC-load-misses",
    "cache_ll_write_hits": "LLC-stores", "cache_ll_write_misses": "LLC-store-misses",
    "cache_bpu_read_hits": "branch-loads", "cache_bpu_read_misses": "branch-load-misses",
}


@pytest.fixture(scope="module")
def node_exporter():
    path = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if path is None:
        pytest.skip("node_exporter is not installed (apt-get install prometheus-node-exporter; .ci/run does)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> dict[tuple, float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in prom_parser.text_string_to_metric_families(text) for s in fam.samples}


def _wait_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert proc.poll() is None, _stop(proc)
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                r.read()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")



def _by_cpu(samples: dict, name: str) -> dict[str, float]:
    return {dict(k[1])["cpu"]: v for k, v in samples.items() if k[0] == name and "cpu" in dict(k[1])}


def test_perf_collector_names_and_counts_match(node_exporter, tmp_path):
    port = _free_port()
    ne = subprocess.Popen([node_exporter, "--collector.disable-defaults", "--collector.perf",
                           f"--web.listen-address=127.0.0.1:{port}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    events = ",".join(NODE_PERF_EVENTS.values())
    serve = subprocess.Popen([sys.executable, "-m", "pmuscope", "serve", "--port", "0", "-e", events],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ne_url = f"http://127.0.0.1:{port}/metrics"
        _wait_up(ne_url, ne)
        line = serve.stderr.readline()
        assert "listening on" in line, line + _stop(serve)
        our_url = line.split("listening on ", 1)[1].strip()
        ne0, our0 = _scrape(ne_url), _scrape(our_url)
        time.sleep(1.5)
        ne1, our1 = _scrape(ne_url), _scrape(our_url)
    finally:
        _stop(ne)
        _stop(serve)
    theirs = {k[0] for k in ne1 if k[0].startswith("node_perf_")}
    if not theirs:
        pytest.skip("node_exporter's perf collector exposed nothing here")
    supported = {dict(k[1])["event"] for k, v in our1.items() if k[0] == "pmuscope_perf_event_supported" and v == 1}
    checked = 0
    for name in sorted(theirs):
        stem = name[len("node_perf_"):-len("_total")]
        assert stem in NODE_PERF_EVENTS, f"node_exporter exposes {name}, which this test does not know"
        if NODE_PERF_EVENTS[stem] not in supported:
            continue
        ours = f"pmuscope_perf_{stem}_total"
        assert set(_by_cpu(our1, ours)) == set(_by_cpu(ne1, name)), (ours, name)
        checked += 1
    assert checked >= 5, f"only {checked} names compared: {sorted(theirs)}"
    print(f"{checked} node_perf_* names have pmuscope_perf_* twins with the same cpu labels")
    ne_d = {c: v - _by_cpu(ne0, "node_perf_context_switches_total")[c]
            for c, v in _by_cpu(ne1, "node_perf_context_switches_total").items()}
    our_d = {c: v - _by_cpu(our0, "pmuscope_perf_context_switches_total")[c]
             for c, v in _by_cpu(our1, "pmuscope_perf_context_switches_total").items()}
    for cpu, want in ne_d.items():
        assert abs(our_d[cpu] - want) <= 0.15 * want + 80, (cpu, our_d[cpu], want)
        print(f"context switches cpu{cpu} over ~1.5 s: node_exporter {want:.0f}, pmuscope {our_d[cpu]:.0f}")


def test_textfile_collector_reads_our_file(node_exporter, tmp_path):
    out = subprocess.run([sys.executable, "-m", "pmuscope", "serve", "--once", "--interval", "0.2",
                          "--textfile", str(tmp_path), "-e", "cpu-clock,context-switches"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    port = _free_port()
    ne = subprocess.Popen([node_exporter, "--collector.disable-defaults", "--collector.textfile",
                           f"--collector.textfile.directory={tmp_path}", f"--web.listen-address=127.0.0.1:{port}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        _wait_up(url, ne)
        got = _scrape(url)
    finally:
        _stop(ne)
    assert got[("node_textfile_scrape_error", ())] == 0
    ours = _scrape_file(tmp_path / "pmuscope.prom")
    assert ours and all(got.get(k) == v for k, v in ours.items()), "node_exporter changed or dropped our series"


def _scrape_file(path) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in prom_parser.text_string_to_metric_families(path.read_text()) for s in fam.samples}
