"""``pmuscope serve``: system-wide counters as a Prometheus/OpenMetrics endpoint
(and/or node_exporter textfile-collector files)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from .. import errors

HELP = "serve counters to Prometheus (OpenMetrics/text endpoint, node_exporter textfile)"
DESCRIPTION = (
    "Count events system-wide and expose them per CPU (or per NUMA node, per cgroup) as monotonic "
    "pmuscope_perf_*_total counters named like node_exporter's perf collector, with time_enabled/"
    "time_running series, IPC and CPU utilization gauges, and the exporter's health. Listens on "
    "127.0.0.1 unless --address says otherwise. Read-only: no endpoint starts a recording or attaches to a process."
)


def configure(p: argparse.ArgumentParser) -> None:
    from ..serve.server import DEFAULT_ADDRESS, DEFAULT_PORT  # not ..serve: its collector imports numpy

    p.add_argument("-e", "--event", action="append", default=[], metavar="EVENTS",
                   help="event list (perf -e syntax); default: node_exporter's software set, plus its hardware set "
                        "when the machine has a PMU")
    p.add_argument("-C", "--cpu", metavar="LIST", help="only these CPUs (0-3,6); default all online")
    p.add_argument("--per", choices=("cpu", "node", "global"), default="cpu",
                   help="series per CPU (a cpu label, default), per NUMA node, or one for the machine")
    p.add_argument("-G", "--cgroup", action="append", default=[], metavar="CGROUP",
                   help="count only tasks of this cgroup (a cgroup label); repeatable")
    p.add_argument("--address", default=DEFAULT_ADDRESS,
                   help=f"address to listen on (default {DEFAULT_ADDRESS}; anything else exposes the counters "
                        "to the network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--no-http", action="store_true", help="no HTTP endpoint (with --textfile)")
    p.add_argument("--textfile", metavar="DIR", help="also write DIR/pmuscope.prom atomically every --interval "
                                                     "(node_exporter --collector.textfile.directory)")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="window of the derived gauges and period of --textfile writes (default 1)")
    p.add_argument("--once", action="store_true",
                   help="print one scrape (after one --interval) to stdout, or write one --textfile, and exit")
    p.add_argument("--openmetrics", action="store_true", help="with --once: OpenMetrics 1.0 instead of text 0.0.4")
    p.add_argument("--access-log", action="store_true", help="log each HTTP request to stderr")


def run(args: argparse.Namespace) -> int:
    from ..serve import MetricsServer, is_loopback, open_exporter, render, write_textfile

    if not 0 < args.interval <= 86_400:
        raise errors.PmuscopeError(f"--interval {args.interval}: must be more than 0 and at most 86400 seconds")
    if not 0 <= args.port <= 65535:
        raise errors.PmuscopeError(f"--port {args.port}: a TCP port is 0..65535 (0 picks a free one)")
    if args.textfile and not os.path.isdir(args.textfile):
        import errno as _errno

        from ..outfile import output_error

        code = _errno.ENOTDIR if os.path.exists(args.textfile) else _errno.ENOENT
        raise output_error(OSError(code, os.strerror(code)), os.path.join(args.textfile, "pmuscope.prom"))
    if args.no_http and not args.textfile and not args.once:
        raise errors.PmuscopeError("--no-http needs --textfile DIR (or --once): otherwise nothing is exported")
    events = ",".join(args.event) if args.event else None
    exporter = open_exporter(events, cpus=args.cpu, per=args.per, cgroups=args.cgroup, window=args.interval)
    stop = threading.Event()
    try:
        if args.once:
            exporter.collect()
            stop.wait(args.interval)
            if args.textfile:
                print(write_textfile(exporter, args.textfile))
            else:
                sys.stdout.write(render(exporter.collect(), openmetrics=args.openmetrics))
            return 0
        server = None
        if not args.no_http:
            server = MetricsServer(exporter, args.address, args.port, access_log=args.access_log)
            if not is_loopback(args.address):
                print(f"pmuscope serve: warning: listening on {args.address}, reachable from the network",
                      file=sys.stderr)
            server.start()
            print(f"pmuscope serve: listening on {server.url}", file=sys.stderr, flush=True)

        def _stop(signum, frame):
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _stop)
        if args.textfile:
            path = write_textfile(exporter, args.textfile)
            print(f"pmuscope serve: writing {path} every {args.interval:g} s", file=sys.stderr, flush=True)
        while not stop.wait(args.interval):
            if args.textfile:
                try:
                    write_textfile(exporter, args.textfile)
                except (OSError, errors.PmuscopeError) as err:
                    exporter.health.read_errors += 1
                    print(f"pmuscope serve: cannot write textfile: {err}", file=sys.stderr)
        if server is not None:
            server.shutdown()
            server.server_close()
        return 0
    finally:
        exporter.close()
