"""The HTTP endpoint (stdlib ``http.server``, one thread per request) and
node_exporter's textfile-collector output.

Read-only by design: ``GET /metrics`` (and ``/`` for a pointer to it). There is
no endpoint that starts a recording, changes events or attaches to a process.
"""

from __future__ import annotations

import errno
import gzip
import ipaddress
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .. import errors
from .collector import CounterExporter
from .exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, negotiate, render

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 9645


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _accepts_gzip(header: str | None) -> bool:
    """True when ``Accept-Encoding`` lists gzip with a non-zero q (Prometheus sends ``gzip``)."""
    for part in (header or "").split(","):
        bits = [b.strip() for b in part.split(";")]
        if bits[0].lower() == "gzip":
            q = next((b[2:] for b in bits[1:] if b.startswith("q=")), "1")
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


class _Handler(BaseHTTPRequestHandler):
    server_version = "pmuscope"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        if self.server.access_log:  # type: ignore[attr-defined]
            sys.stderr.write("pmuscope serve: %s %s\n" % (self.address_string(), format % args))

    def _send(self, code: int, body: bytes, ctype: str, head: bool = False, extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _get(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            om = negotiate(self.headers.get("Accept"))
            try:
                fams = self.server.exporter.collect()  # type: ignore[attr-defined]
            except Exception as err:  # never take the server down with a scrape
                self._send(500, f"pmuscope: scrape failed: {err}\n".encode(), "text/plain; charset=utf-8", head)
                return
            body = render(fams, openmetrics=om).encode()
            extra = {}
            if _accepts_gzip(self.headers.get("Accept-Encoding")):
                body = gzip.compress(body, compresslevel=1, mtime=0)
                extra["Content-Encoding"] = "gzip"
            self._send(200, body, OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE, head, extra)
        elif path == "/":
            body = b"<html><head><title>pmuscope</title></head><body><a href=\"/metrics\">/metrics</a></body></html>\n"
            self._send(200, body, "text/html; charset=utf-8", head)
        else:
            self._send(404, b"not found: this server has only /metrics\n", "text/plain; charset=utf-8", head)

    def do_GET(self) -> None:  # noqa: N802
        self._get(False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._get(True)

    def _refuse(self) -> None:
        self._send(405, b"method not allowed: /metrics is read-only\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815


class MetricsServer(ThreadingHTTPServer):
    """A threaded HTTP server around a :class:`CounterExporter`."""

    daemon_threads = True

    def __init__(self, exporter: CounterExporter, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT,
                 access_log: bool = False) -> None:
        self.exporter = exporter
        self.access_log = access_log
        if ":" in address:
            self.address_family = __import__("socket").AF_INET6
        try:
            super().__init__((address, port), _Handler)
        except OSError as err:
            hint = ("choose another --port (0 picks a free one)" if err.errno == errno.EADDRINUSE
                    else "--address must be an address of this machine (default 127.0.0.1)")
            raise errors.PmuscopeError(f"cannot listen on {address}:{port}: {err.strerror or err}; {hint}") from None

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = self.server_address[0]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> threading.Thread:
        """Serve in a background thread; ``shutdown()`` stops it."""
        t = threading.Thread(target=self.serve_forever, name="pmuscope-serve", daemon=True)
        t.start()
        return t


def write_textfile(exporter: CounterExporter, directory: str, name: str = "pmuscope.prom") -> str:
    """Write one scrape to ``directory/name`` atomically (a temporary file in
    the same directory, fsync, rename), as node_exporter's textfile collector
    requires: it must never read a half-written file. Returns the path."""
    if not os.path.isdir(directory):
        raise errors.PmuscopeError(f"--textfile directory {directory!r} does not exist; create it or point at "
                                   "node_exporter's --collector.textfile.directory")
    text = render(exporter.collect(), openmetrics=False)
    from ..outfile import write_output

    # a temporary file in the same folder renamed over the previous one (never
    # a link followed, no .old kept: it is rewritten every interval); 0644 so
    # node_exporter, running as another user, reads it
    return write_output(os.path.join(directory, name), text, backup=False, perm=0o644)
