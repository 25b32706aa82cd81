"""Pushing profiles to a Pyroscope-compatible /ingest endpoint: a tiny local
HTTP server records what arrives; a closed port stands for a back end that is
down; a handler that blocks shows push() never waits for the network."""

from __future__ import annotations

import email.parser
import email.policy
import json
import logging
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pmuscope import errors
from pmuscope.export import PyroscopePusher, app_name, from_folded

from .pprof_schema import decode, folded_of

FOLDED = "main;work 90\nmain;idle 10\n"


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, statuses=(), gate: threading.Event | None = None):
        self.requests: list[dict] = []
        self.statuses = list(statuses)
        self.gate = gate
        self.arrived = threading.Event()
        super().__init__(("127.0.0.1", 0), _RecHandler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RecHandler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        srv = self.server
        srv.arrived.set()
        if srv.gate is not None:
            srv.gate.wait(10)
        status = srv.statuses.pop(0) if srv.statuses else 200
        path, _, query = self.path.partition("?")
        srv.requests.append({"path": path, "query": urllib.parse.parse_qs(query), "status": status,
                             "content_type": self.headers["Content-Type"], "body": body})
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _parts(req) -> dict[str, bytes]:
    raw = f"Content-Type: {req['content_type']}\r\n\r\n".encode() + req["body"]
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
    return {p.get_param("name", header="content-disposition"): p.get_payload(decode=True) for p in msg.iter_parts()}


@pytest.fixture()
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once closed


def test_push_delivers_pprof_with_labels():
    srv = Recorder()
    try:
        p = PyroscopePusher(srv.url, "pmuscope.cpu", {"service_name": "web", "host": "h1"}, backoff=0.01)
        assert p.push(from_folded(FOLDED), 1700000000.2, 1700000010.9, {"event": "cycles"})
        stats = p.close(5)
        assert (stats.sent, stats.dropped, stats.retries) == (1, 0, 0)
        (req,) = srv.requests
        assert req["path"] == "/ingest"
        q = {k: v[0] for k, v in req["query"].items()}
        assert q == {"name": "pmuscope.cpu{service_name=web,host=h1,event=cycles}", "format": "pprof",
                     "from": "1700000000", "until": "1700000010"}
        parts = _parts(req)
        assert folded_of(decode(parts["profile"])) == {"main;work": 90, "main;idle": 10}
        assert json.loads(parts["sample_type_config"])["samples"]["units"] == "samples"
    finally:
        srv.stop()


def test_push_retries_5xx_with_backoff_then_succeeds():
    srv = Recorder(statuses=[503, 500])
    try:
        p = PyroscopePusher(srv.url + "/ingest", backoff=0.01, jitter=0)
        p.push(from_folded(FOLDED), 1, 2)
        stats = p.close(5)
        assert (stats.sent, stats.retries, stats.dropped) == (1, 2, 0)
        assert [r["status"] for r in srv.requests] == [503, 500, 200]
        assert srv.requests[0]["body"] == srv.requests[2]["body"]
    finally:
        srv.stop()


def test_push_4xx_is_dropped_without_retry(caplog):
    srv = Recorder(statuses=[400])
    try:
        p = PyroscopePusher(srv.url, backoff=0.01)
        with caplog.at_level(logging.WARNING, logger="pmuscope.export.push"):
            p.push(from_folded(FOLDED), 1, 2)
            stats = p.close(5)
        assert (stats.sent, stats.retries, stats.dropped) == (0, 0, 1)
        assert len(srv.requests) == 1
        assert "HTTP 400" in caplog.text and "1 dropped so far" in caplog.text
    finally:
        srv.stop()


def test_push_backend_down_drops_with_counted_warning(closed_port, caplog):
    drops = []
    p = PyroscopePusher(f"http://127.0.0.1:{closed_port}", retries=2, backoff=0.01, jitter=0,
                        on_drop=lambda why, st: drops.append((why, st.dropped)))
    with caplog.at_level(logging.WARNING, logger="pmuscope.export.push"):
        assert p.push(from_folded(FOLDED), 1, 2)
        assert p.push(from_folded(FOLDED), 2, 3)
        stats = p.close(10)
    assert (stats.sent, stats.dropped, stats.retries) == (0, 2, 4)
    assert [n for _, n in drops] == [1, 2]
    assert "refused" in drops[0][0].lower()
    assert "2 dropped so far" in caplog.text


def test_push_never_blocks_and_drops_when_queue_full():
    gate = threading.Event()
    srv = Recorder(gate=gate)
    try:
        p = PyroscopePusher(srv.url, max_queue=2, backoff=0.01)
        ep = from_folded(FOLDED)
        assert p.push(ep, 1, 2)
        assert srv.arrived.wait(5)  # the worker is now stuck inside the first POST
        results = [p.push(ep, 1, 2) for _ in range(4)]  # returns at once though the server hangs
        assert results == [True, True, False, False]
        assert p.stats.dropped == 2
        gate.set()
        stats = p.close(10)
        assert (stats.sent, stats.dropped) == (3, 2)
        assert len(srv.requests) == 3
    finally:
        gate.set()
        srv.stop()


def test_close_drops_what_cannot_be_sent_in_time(closed_port):
    p = PyroscopePusher(f"http://127.0.0.1:{closed_port}", retries=50, backoff=0.2, jitter=0)
    for _ in range(3):
        p.push(from_folded(FOLDED), 1, 2)
    stats = p.close(0.3)
    assert stats.sent == 0 and stats.dropped == 3
    assert not p.push(from_folded(FOLDED), 1, 2)  # closed: refused and counted
    assert p.stats.dropped == 4


def test_bad_url_and_labels():
    with pytest.raises(errors.PmuscopeError, match="bad push URL"):
        PyroscopePusher("localhost:4040")
    with pytest.raises(errors.PmuscopeError, match="cannot contain"):
        app_name("app", {"host": "a,b"})
    with pytest.raises(errors.PmuscopeError, match="bad label name"):
        app_name("app", {"1x": "a"})
    assert app_name("app.cpu", {}) == "app.cpu"
