"""serve's bounded connection handling: idle and slow clients hold a socket,
never a worker thread, so a scrape is answered at once; clients that go away
are quiet; the pool of threads stays the same size."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from pmuscope import errors
from pmuscope.serve import MetricsServer
from tests.unit.test_serve import R0, _exporter


@pytest.fixture()
def server():
    ex, *_ = _exporter([(1, R0)])
    srv = MetricsServer(ex, "127.0.0.1", 0, idle_timeout=3.0, request_timeout=2.0)
    t = srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(5)


def _scrape(srv) -> tuple[int, float]:
    t = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status, time.monotonic() - t


def _threads() -> int:
    return threading.active_count()


def test_300_idle_and_300_half_sent_connections_do_not_block_a_scrape(server):
    before = _threads()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(300)]
    half = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        half.append(s)
    try:
        time.sleep(0.3)
        status, took = _scrape(server)
        assert status == 200 and took < 2.0, took
        assert _threads() - before <= 4  # the pool, not a thread per connection
        # the half-sent requests are dropped after request_timeout, the idle ones after idle_timeout
        deadline = time.monotonic() + 10
        while server.connections and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.connections == 0
    finally:
        for s in idle + half:
            s.close()


def test_keep_alive_between_scrapes(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    for _ in range(3):
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read()
    conn.close()


def test_client_that_leaves_is_quiet(server, capfd):
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()
    time.sleep(0.5)
    assert _scrape(server)[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err


@pytest.mark.parametrize("port", [-1, 65536, 99999])
def test_port_out_of_range_is_one_line(port):
    ex, *_ = _exporter([(1, R0)])
    with pytest.raises(errors.PmuscopeError, match="0..65535"):
        MetricsServer(ex, "127.0.0.1", port)
