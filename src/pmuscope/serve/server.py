"""The HTTP endpoint (a selector thread that holds the connections and a small
pool of threads that answer complete requests; ``http.server`` parses them)
and node_exporter's textfile-collector output.

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
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from .. import errors
from .exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, negotiate, render

if TYPE_CHECKING:  # annotations only: the collector imports numpy, `pmuscope --help` needs these defaults
    from .collector import CounterExporter

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


class _SocketWriter:
    """The handler's ``wfile``: every write goes out whole (``sendall``)."""

    def __init__(self, sock) -> None:
        self._sock = sock

    def write(self, data) -> int:
        self._sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    """Answers the one request whose bytes the selector loop read (``raw``);
    whether the connection stays open is left in ``close_connection``."""

    server_version = "pmuscope"
    protocol_version = "HTTP/1.1"

    def __init__(self, sock, addr, server, raw: bytes) -> None:
        self._raw = raw
        super().__init__(sock, addr, server)

    def setup(self) -> None:
        import io

        self.connection = self.request
        self.rfile = io.BytesIO(self._raw)
        self.wfile = _SocketWriter(self.request)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        if self.rfile.read():  # pipelined bytes: not supported, close after this answer
            self.close_connection = True

    def finish(self) -> None:
        pass

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
        self.close_connection = True  # a body may follow that was not read
        self._send(405, b"method not allowed: /metrics is read-only\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815


class _Conn:
    __slots__ = ("sock", "addr", "buf", "deadline")

    def __init__(self, sock, addr, deadline: float) -> None:
        self.sock, self.addr, self.buf, self.deadline = sock, addr, bytearray(), deadline


class MetricsServer:
    """The HTTP endpoint around a :class:`CounterExporter`, with bounded
    resources: one thread waits on every connection (a selector) and reads
    requests until their headers are complete; only a complete request goes to
    the pool of ``workers`` threads, which answer it. So idle or slow clients
    hold a socket, never a worker, and cannot delay a scrape:

    * a connection that sends nothing is closed after ``idle_timeout`` seconds
      (also between keep-alive requests);
    * a request whose headers are not complete ``request_timeout`` seconds
      after its first byte is closed (slowloris);
    * a response that the client does not read within ``write_timeout`` is
      dropped;
    * at most ``max_connections`` are held: beyond that the longest-idle one is
      closed to admit a new one.

    Client disconnects are quiet. ``start()`` serves in a background thread,
    ``shutdown()`` stops it, ``server_close()`` releases the socket.
    """

    def __init__(self, exporter: CounterExporter, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT,
                 access_log: bool = False, *, workers: int = 4, max_connections: int = 1024,
                 idle_timeout: float = 30.0, request_timeout: float = 5.0, write_timeout: float = 10.0) -> None:
        import selectors
        import socket
        from concurrent.futures import ThreadPoolExecutor

        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise errors.PmuscopeError(f"--port {port}: a TCP port is 0..65535 (0 picks a free one)")
        self.exporter = exporter
        self.access_log = access_log
        self.idle_timeout, self.request_timeout, self.write_timeout = idle_timeout, request_timeout, write_timeout
        self.max_connections = max_connections
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(128)
        except (OSError, OverflowError) as err:
            sock.close()
            code = getattr(err, "errno", None)
            hint = ("choose another --port (0 picks a free one)" if code == errno.EADDRINUSE
                    else "--address must be an address of this machine (default 127.0.0.1)")
            raise errors.PmuscopeError(f"cannot listen on {address}:{port}: "
                                       f"{getattr(err, 'strerror', None) or err}; {hint}") from None
        sock.setblocking(False)
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._sel.register(sock, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="pmuscope-http")
        self._conns: dict[int, _Conn] = {}
        self._returned: list[_Conn] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = self.server_address[0]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metrics"

    @property
    def connections(self) -> int:
        """Connections held by the selector (not counting those being answered)."""
        return len(self._conns)

    def start(self) -> threading.Thread:
        """Serve in a background thread; ``shutdown()`` stops it."""
        self._stopped.clear()
        t = threading.Thread(target=self.serve_forever, name="pmuscope-serve", daemon=True)
        t.start()
        return t

    # -- the selector loop ------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        import selectors
        import time

        self._stopped.clear()
        try:
            while not self._stop.is_set():
                for key, _ in self._sel.select(timeout=min(poll_interval, 0.25)):
                    if key.fileobj is self.socket:
                        self._accept(time.monotonic())
                    elif key.data == "wake":
                        try:
                            while self._wake_r.recv(512):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
                    else:
                        self._readable(key.data, time.monotonic())
                with self._lock:
                    back, self._returned = self._returned, []
                now = time.monotonic()
                for c in back:  # keep-alive: wait for the next request
                    c.buf.clear()
                    c.deadline = now + self.idle_timeout
                    self._hold(c)
                for c in [c for c in self._conns.values() if c.deadline <= now]:
                    self._drop(c)
        finally:
            for c in list(self._conns.values()):
                self._drop(c)
            self._stopped.set()

    def _hold(self, c: _Conn) -> None:
        import selectors

        try:
            c.sock.setblocking(False)
            self._sel.register(c.sock, selectors.EVENT_READ, c)
        except (OSError, ValueError):
            self._close(c)
            return
        self._conns[c.sock.fileno()] = c
        if len(self._conns) > self.max_connections:
            # the longest-idle connection makes room
            self._drop(min(self._conns.values(), key=lambda x: x.deadline))

    def _accept(self, now: float) -> None:
        for _ in range(64):
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and the like: try again at the next wake-up
                return
            self._hold(_Conn(sock, addr, now + self.idle_timeout))

    def _drop(self, c: _Conn) -> None:
        try:
            self._sel.unregister(c.sock)
        except (KeyError, ValueError, OSError):
            pass
        self._conns.pop(c.sock.fileno(), None)
        self._close(c)

    @staticmethod
    def _close(c: _Conn) -> None:
        try:
            c.sock.close()
        except OSError:
            pass

    def _readable(self, c: _Conn, now: float) -> None:
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(c)
            return
        if not c.buf:
            c.deadline = now + self.request_timeout  # the headers must be complete by then
        c.buf += data
        if b"\r\n\r\n" in c.buf or b"\n\n" in c.buf or len(c.buf) > 65536:
            self._sel.unregister(c.sock)
            self._conns.pop(c.sock.fileno(), None)
            self._pool.submit(self._answer, c)

    def _answer(self, c: _Conn) -> None:
        keep = False
        try:
            c.sock.setblocking(True)
            c.sock.settimeout(self.write_timeout)
            if len(c.buf) > 65536:
                c.sock.sendall(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                               b"Connection: close\r\n\r\n")
            else:
                h = _Handler(c.sock, c.addr, self, bytes(c.buf))
                keep = not h.close_connection
        except OSError:
            keep = False  # the client went away or stopped reading: quiet
        except Exception as err:  # noqa: BLE001 - one line, never a traceback, never the server
            print(f"pmuscope serve: error answering {c.addr[0]}: {err}", file=sys.stderr)
            keep = False
        if keep and not self._stop.is_set():
            with self._lock:
                self._returned.append(c)
            self._wake()
        else:
            self._close(c)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait for it."""
        self._stop.set()
        self._wake()
        self._stopped.wait(10)

    def server_close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for s in (self.socket, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
        try:
            self._sel.close()
        except OSError:
            pass


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
