"""``pmuscope serve``: counters as a Prometheus/OpenMetrics endpoint and as
node_exporter textfile-collector files.

Public API::

    exporter = open_exporter("cycles,instructions", per="cpu")   # started counting sessions
    exporter.collect() -> [MetricFamily]                         # one scrape
    render(families, openmetrics=False) -> str                   # text 0.0.4 / OpenMetrics 1.0
    srv = MetricsServer(exporter, "127.0.0.1", 9645); srv.start(); ...; srv.shutdown()
    write_textfile(exporter, "/var/lib/node_exporter/textfile")   # atomic *.prom

Names mirror node_exporter's perf collector with the ``pmuscope_`` prefix
(``pmuscope_perf_cpucycles_total{cpu="0"}``); see :mod:`pmuscope.serve.names`.
"""

from pmuscope._lazy import lazy_exports

#: imported on first use (PEP 562): `pmuscope --help` needs the server's
#: defaults, not the collector (numpy) or the HTTP server
_LAZY = {
    **{name: ".collector" for name in ("CounterExporter", "Health", "Source", "default_events", "has_hardware_pmu",
                                       "open_exporter", "read_proc_stat")},
    **{name: ".exposition" for name in ("OPENMETRICS_CONTENT_TYPE", "TEXT_CONTENT_TYPE", "MetricFamily", "negotiate",
                                        "render")},
    **{name: ".names" for name in ("EventMetric", "event_metric")},
    **{name: ".server" for name in ("DEFAULT_ADDRESS", "DEFAULT_PORT", "MetricsServer", "is_loopback",
                                    "write_textfile")},
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "CounterExporter",
    "Health",
    "Source",
    "MetricFamily",
    "MetricsServer",
    "EventMetric",
    "OPENMETRICS_CONTENT_TYPE",
    "TEXT_CONTENT_TYPE",
    "DEFAULT_ADDRESS",
    "DEFAULT_PORT",
    "default_events",
    "event_metric",
    "has_hardware_pmu",
    "is_loopback",
    "negotiate",
    "open_exporter",
    "read_proc_stat",
    "render",
    "write_textfile",
]
