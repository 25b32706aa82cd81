"""pmuscope serve scraped by a real Prometheus server (Debian's ``prometheus``
package) on loopback, compared with pmuscope.count() over the same window, and
its exposition linted by ``promtool check metrics``.

Tolerances (stated, and why):
- cpu-clock per CPU (system-wide it runs whenever the CPU is online, so its
  increase equals wall time): Prometheus's increase between its first and last
  scrape agrees with the reference session interpolated at the scrape
  timestamps within 2 % + 20 ms, and with the scrape timestamps' own distance
  within 5 % + 20 ms. The residue is the gap between Prometheus stamping a
  scrape and the exporter's read() (a few ms).
- context-switches (machine-wide, noisy): within 15 % + 60 switches per CPU
  over the window, for the same reason at a few thousand switches/s.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest

from tests.conftest import hardware_pmu_reason
from tests.conftest import stop_process as _stop

SCRAPES = 6


def _which_or_install(name: str) -> str | None:
    path = shutil.which(name)
    if path or os.environ.get("PMUSCOPE_NO_APT") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return path
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return shutil.which(name)


@pytest.fixture(scope="module")
def prometheus_bins():
    prom = _which_or_install("prometheus")
    promtool = shutil.which("promtool")
    if not prom or not promtool:
        pytest.skip("Debian's prometheus package is not installed and `apt-get install -y prometheus` did not work "
                    "(not root, no network, or no apt) — .ci/run installs it")
    return prom, promtool


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def _start_serve(events: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pmuscope", "serve", "--port", "0", "--interval", "1", "-e", events],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 15
    buf = ""
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stderr], [], [], 0.2)
        if r:
            line = proc.stderr.readline()
            buf += line
            if "listening on " in line:
                return proc, line.split("listening on ", 1)[1].strip()
        if proc.poll() is not None:
            break
    raise AssertionError(f"pmuscope serve did not start: {buf}{_stop(proc)}")


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _query(base: str, q: str) -> list:
    body = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})))
    assert body["status"] == "success", body
    return body["data"]["result"]


class Reference(threading.Thread):
    """A pmuscope.count() session of the same events, read every 10 ms:
    (wall time, uint64[event, cpu]) to interpolate at Prometheus's scrape times."""

    def __init__(self, events: str):
        super().__init__(daemon=True)
        import pmuscope

        self.counter = pmuscope.count(events, cpus="all", system_wide=True)
        self.counter.start()
        self.times: list[float] = []
        self.values: list[np.ndarray] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            c = self.counter.read()
            t = time.time()
            self.values.append(c.data[..., 0].sum(axis=2).copy())
            self.times.append(t)

    def at(self, event_index: int, cpu_index: int, t: float) -> float:
        # a scrape just before the query can be newer than the last read (every 10 ms):
        # wait for the read after it (one CI run asked 1.4 ms past the last read)
        deadline = time.monotonic() + 2
        while self.times[-1] < t and self.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        # the reads so far, as pairs (the thread appends a value, then its time, meanwhile)
        k = min(len(self.times), len(self.values))
        times = self.times[:k]
        v = np.array([a[event_index, cpu_index] for a in self.values[:k]], dtype=np.float64)
        assert times[0] <= t <= times[-1], "scrape outside the reference window"
        return float(np.interp(t, times, v))

    def stop(self) -> None:
        self.done.set()
        self.join(5)
        self.counter.close()


def test_prometheus_scrapes_serve(prometheus_bins, tmp_path):
    prom_bin, promtool = prometheus_bins
    hw = hardware_pmu_reason() is None
    events = "cpu-clock,context-switches" + (",{cycles,instructions}" if hw else "")
    ref = Reference("cpu-clock,context-switches")
    ref.start()
    serve, metrics_url = _start_serve(events)
    prom = None
    try:
        # promtool lints the classic text exposition (Prometheus 2.42's promtool parses only that)
        lint = subprocess.run([promtool, "check", "metrics"], input=_get(metrics_url), capture_output=True, timeout=20)
        assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint

        port = _free_port()
        target = metrics_url.split("//", 1)[1].split("/", 1)[0]
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
            "scrape_configs:\n  - job_name: pmuscope\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        prom_log = open(tmp_path / "prometheus.log", "w")
        prom = subprocess.Popen(
            [prom_bin, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=prom_log,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        n = 0
        while time.monotonic() < deadline:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                res = _query(base, 'count_over_time(pmuscope_perf_cpu_clock_seconds_total{cpu="0"}[1m])')
                n = int(float(res[0]["value"][1])) if res else 0
            except OSError:
                n = 0
            if n >= SCRAPES:
                break
            time.sleep(0.25)
        assert n >= SCRAPES, f"Prometheus scraped {n} times in 20 s: {(tmp_path / 'prometheus.log').read_text()}"
        up = _query(base, 'up{job="pmuscope"}')
        assert up and up[0]["value"][1] == "1"

        cpus = [str(c) for c in ref.counter.layout.cpus]
        for ei, metric, rel, absolute in ((0, "pmuscope_perf_cpu_clock_seconds_total", 0.02, 0.02),
                                          (1, "pmuscope_perf_context_switches_total", 0.15, 60)):
            series = {s["metric"]["cpu"]: s["values"] for s in _query(base, f"{metric}[1m]")}
            assert sorted(series) == sorted(cpus), f"{metric}: cpu labels {sorted(series)} != {cpus}"
            for ci, cpu in enumerate(cpus):
                pts = [(float(t), float(v)) for t, v in series[cpu]]
                vals = [v for _, v in pts]
                assert vals == sorted(vals), f"{metric}{{cpu={cpu}}} is not monotonic: {vals}"
                (t0, v0), (t1, v1) = pts[0], pts[-1]
                got = v1 - v0
                want = ref.at(ei, ci, t1) - ref.at(ei, ci, t0)
                if ei == 0:
                    want /= 1e9
                    assert got > 0
                    assert abs(got - (t1 - t0)) <= 0.05 * (t1 - t0) + 0.02, (cpu, got, t1 - t0)
                assert abs(got - want) <= rel * want + absolute, (metric, cpu, got, want)
                print(f"{metric}{{cpu={cpu}}}: prometheus {got:.4f} vs count() {want:.4f} over {t1 - t0:.2f} s")

        for name in ("pmuscope_perf_time_enabled_seconds_total", "pmuscope_perf_time_running_seconds_total"):
            inc = _query(base, f'increase({name}{{event="context-switches"}}[1m])')
            assert len(inc) == len(cpus) and all(float(s["value"][1]) > 0 for s in inc), (name, inc)
        assert _query(base, "pmuscope_scrapes_total")[0]["value"][1] != "0"
        # Prometheus negotiated OpenMetrics: '# UNIT' reached its metadata, and the info family was read
        meta = json.loads(_get(f"{base}/api/v1/targets/metadata?" + urllib.parse.urlencode(
            {"match_target": '{job="pmuscope"}', "metric": "pmuscope_perf_cpu_clock_seconds"})))["data"]
        assert meta and meta[0]["type"] == "counter" and meta[0]["unit"] == "seconds", meta
        assert _query(base, "pmuscope_build_info")[0]["metric"]["version"]
        assert _query(base, 'pmuscope_open_fds{kind="perf_event"}')[0]["value"][1] == str(len(events.split(",")) * len(cpus))
        util = _query(base, "pmuscope_cpu_utilization_ratio")
        assert len(util) == len(cpus) and all(0 <= float(s["value"][1]) <= 1 for s in util)
        if hw:
            ipc = _query(base, "pmuscope_instructions_per_cycle")
            assert len(ipc) == len(cpus) and all(float(s["value"][1]) > 0 for s in ipc)
    finally:
        if prom is not None:
            _stop(prom)
            prom_log.close()
        serve_err = _stop(serve)
        ref.stop()
    assert serve.returncode == 0, serve_err
