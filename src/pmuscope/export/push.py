"""Push finished profiles to a Pyroscope-compatible ingest endpoint, in the
background: ``POST {url}/ingest?name=<app>{labels}&format=pprof&from=&until=``
with a ``multipart/form-data`` body holding ``profile`` (gzipped pprof) and
``sample_type_config`` (how to show non-Go sample types; grafana/pyroscope's
server API reference).

:meth:`PyroscopePusher.push` never blocks: it queues (a bounded queue) and
returns. A worker thread sends with retries and exponential backoff on
connection errors, 5xx and 429; a profile is *dropped* — counted in
``stats.dropped`` and logged as a warning with the running count — when the
queue is full, when the back end refuses it (other 4xx), or when retries run
out.
"""

from __future__ import annotations

import collections
import json
import logging
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping

from .. import errors
from .model import ExportProfile

log = logging.getLogger("pmuscope.export.push")

_LABEL_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.]*$")


@dataclass
class PushStats:
    url: str = ""
    queued: int = 0
    sent: int = 0
    retries: int = 0
    dropped: int = 0
    last_error: str = ""


def app_name(name: str, labels: Mapping[str, str]) -> str:
    """Pyroscope's ``name`` parameter: ``app.cpu{service_name=x,host=y}``."""
    parts = []
    for k, v in labels.items():
        if not _LABEL_KEY.match(k):
            raise errors.PmuscopeError(f"bad label name {k!r}: use letters, digits, _ and . (not first)")
        v = str(v)
        if any(c in v for c in ",{}="):
            raise errors.PmuscopeError(f"label {k}={v!r}: values cannot contain , {{ }} or =")
        parts.append(f"{k}={v}")
    return name + ("{" + ",".join(parts) + "}" if parts else "")


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@`` (for messages)."""
    import re

    return re.sub(r"(?<=//)[^/?#@]*@", "***@", url)


def check_push_url(url: str) -> urllib.parse.SplitResult:
    """The parsed push URL, or a one-line :class:`PmuscopeError` (credentials
    never shown)."""
    try:
        parsed = urllib.parse.urlsplit(url)
        parsed.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as err:
        raise errors.PmuscopeError(f"bad push URL {redact_url(url)!r}: {err}; expected http(s)://HOST:PORT") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise errors.PmuscopeError(f"bad push URL {redact_url(url)!r}: expected http(s)://HOST:PORT (a Pyroscope server)")
    return parsed


def sample_type_config(ep: ExportProfile) -> dict:
    """Pyroscope's per-sample-type display config (units: samples/objects/bytes)."""
    cfg = {}
    for t, unit in ep.sample_types:
        cfg[t] = {"units": "bytes" if unit == "bytes" else "samples", "aggregation": "sum", "display-name": t,
                  "sampled": True}
    return cfg


def _multipart(fields: list[tuple[str, str, bytes, str]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = bytearray()
    for name, filename, data, ctype in fields:
        out += f"--{boundary}\r\n".encode()
        out += f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'.encode()
        out += f"Content-Type: {ctype}\r\n\r\n".encode()
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


@dataclass
class _Item:
    body: bytes
    content_type: str
    query: str


class PyroscopePusher:
    """Background pusher to ``url`` (the server root, e.g. ``http://127.0.0.1:4040``).

    ``name`` is the application name (``pmuscope.cpu``), ``labels`` the labels
    every profile carries (service_name, host, ...). ``push(ep, start, end,
    labels)`` adds per-profile labels (e.g. ``event``).
    """

    def __init__(self, url: str, name: str = "pmuscope", labels: Mapping[str, str] | None = None, *,
                 max_queue: int = 16, retries: int = 4, backoff: float = 0.5, max_backoff: float = 8.0,
                 timeout: float = 5.0, jitter: float = 0.1, on_drop: Callable[[str, PushStats], None] | None = None):
        parsed = check_push_url(url)
        self._auth = None
        if parsed.username is not None or parsed.password is not None:
            # credentials go in an Authorization header, never in a printed URL
            import base64

            user = urllib.parse.unquote(parsed.username or "")
            pw = urllib.parse.unquote(parsed.password or "")
            self._auth = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
            parsed = parsed._replace(netloc=parsed.netloc.rpartition("@")[2])
        self.url = urllib.parse.urlunsplit(parsed).rstrip("/")
        if not self.url.endswith("/ingest"):
            self.url += "/ingest"
        self.name = name
        self.labels = dict(labels or {})
        app_name(name, self.labels)  # validate now, not in the worker
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.jitter = jitter
        self.on_drop = on_drop
        self.stats = PushStats(url=self.url)
        self._queue: collections.deque[_Item] = collections.deque()
        self._max_queue = max_queue
        self._cv = threading.Condition()
        self._closing = threading.Event()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="pmuscope-push", daemon=True)
        self._thread.start()

    # -- producer side (never blocks) ---------------------------------------
    def push(self, profile: ExportProfile | bytes, start: float, end: float,
             labels: Mapping[str, str] | None = None) -> bool:
        """Queue one profile covering wall time ``start``..``end`` (Unix
        seconds). Returns False when it was dropped because the queue is full."""
        from . import pprof

        if isinstance(profile, ExportProfile):
            data, cfg = pprof.dumps(profile), sample_type_config(profile)
        else:
            data, cfg = bytes(profile), None
        fields = [("profile", "profile.pprof", data, "application/octet-stream")]
        if cfg:
            fields.append(("sample_type_config", "sample_type_config.json", json.dumps(cfg).encode(), "application/json"))
        body, ctype = _multipart(fields)
        query = urllib.parse.urlencode({
            "name": app_name(self.name, {**self.labels, **(labels or {})}),
            "format": "pprof",
            "from": int(start),
            "until": max(int(end), int(start) + 1),
        })
        with self._cv:
            if self._closing.is_set() or len(self._queue) >= self._max_queue:
                self._drop("queue full" if not self._closing.is_set() else "pusher closed")
                return False
            self._queue.append(_Item(body, ctype, query))
            self.stats.queued += 1
            self._cv.notify()
        return True

    def _drop(self, why: str) -> None:
        self.stats.dropped += 1
        self.stats.last_error = why
        log.warning("pmuscope push: dropped a profile for %s (%s); %d dropped so far", self.url, why, self.stats.dropped)
        if self.on_drop is not None:
            try:
                self.on_drop(why, self.stats)
            except Exception:
                pass

    # -- worker ---------------------------------------------------------------
    def _send(self, item: _Item) -> tuple[bool, bool, str]:
        """(delivered, retryable, error)."""
        headers = {"Content-Type": item.content_type, "User-Agent": "pmuscope"}
        if self._auth:
            headers["Authorization"] = self._auth
        req = urllib.request.Request(f"{self.url}?{item.query}", data=item.body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                resp.read()
                return True, False, ""
        except urllib.error.HTTPError as err:
            err.close()
            return False, err.code >= 500 or err.code == 429, f"HTTP {err.code} {err.reason}"
        except (urllib.error.URLError, OSError, socket.timeout) as err:
            reason = getattr(err, "reason", err)
            return False, True, str(reason)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closing.is_set():
                    self._cv.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                self._deliver(item)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _deliver(self, item: _Item) -> None:
        delay = self.backoff
        for attempt in range(self.retries + 1):
            ok, retryable, err = self._send(item)
            if self._gave_up:
                return  # close() already counted it as dropped
            if ok:
                self.stats.sent += 1
                return
            self.stats.last_error = err
            if not retryable or attempt == self.retries:
                self._drop(err + ("" if retryable else " (not retried)"))
                return
            self.stats.retries += 1
            wait = min(delay, self.max_backoff) * (1 + self.jitter * random.random())
            delay *= 2
            if self._closing.wait(wait) and self._abandon:
                self._drop(err + " (closing)")
                return

    _abandon = False
    _gave_up = False

    # -- shutdown ---------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued was delivered or dropped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> PushStats:
        """Deliver what is queued (waiting at most ``timeout`` s), then stop;
        what is still queued after that is dropped and counted."""
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        self._abandon = True
        with self._cv:
            self._closing.set()
            while self._queue:
                self._queue.popleft()
                self._drop("not sent before close")
            self._cv.notify_all()
        # one deadline for everything: a server that trickles its answer
        # cannot hold the caller past ``timeout``
        self._thread.join(max(deadline - time.monotonic(), 0.05))
        with self._cv:
            if self._thread.is_alive() and self._busy and not self._gave_up:
                self._gave_up = True
                self._drop(f"no answer within {timeout:g} s")
        return self.stats
