"""--push-timeout is one deadline for the whole push, and push URLs never
leak credentials or raise a traceback."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from pmuscope import errors
from pmuscope.export.model import from_folded
from pmuscope.export.files import push_once
from pmuscope.export.push import PyroscopePusher, check_push_url, redact_url


def _trickler():
    """A server that accepts and answers one byte per 0.5 s, forever."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                conns.append(c)
            except OSError:
                pass
            for c in conns:
                try:
                    c.send(b"H")
                except OSError:
                    pass
            time.sleep(0.3)
        for c in conns:
            c.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1], stop


def test_trickling_server_cannot_stretch_the_timeout():
    port, stop = _trickler()
    try:
        ep = from_folded("main;work 10\n")
        t = time.monotonic()
        stats = push_once(ep, f"http://127.0.0.1:{port}", "app", {}, timeout=1.5)
        took = time.monotonic() - t
    finally:
        stop.set()
    assert stats.sent == 0 and stats.dropped >= 1
    assert took < 2.5, took


@pytest.mark.parametrize("url", ["http://[::1", "http://h:99999", "ftp://h", "http://"])
def test_bad_urls_are_one_line(url):
    with pytest.raises(errors.PmuscopeError, match="bad push URL"):
        check_push_url(url)


def test_credentials_never_shown():
    assert redact_url("http://user:secret@h:4040/x") == "http://***@h:4040/x"
    with pytest.raises(errors.PmuscopeError) as ei:
        check_push_url("http://user:secret@[::1")
    assert "secret" not in str(ei.value)
    p = PyroscopePusher("http://user:secret@127.0.0.1:1", "app")
    try:
        assert "secret" not in p.url and p.stats.url == "http://127.0.0.1:1/ingest"
        assert p._auth and p._auth.startswith("Basic ")
    finally:
        p.close(0.1)
