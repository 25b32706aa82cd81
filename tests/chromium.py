"""Drive a real headless Chromium through the DevTools protocol, for tests of
the HTML pmuscope writes (flame graphs, reports).

Chromium comes from Debian's ``chromium`` package (``.ci/run`` installs it);
the protocol client is ``websocket-client``. Chromium starts with the flags a
closed-network sandbox needs and a fresh ``--user-data-dir``.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
    "--window-size=1280,800",
]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page, driven over CDP."""

    def __init__(self) -> None:
        path = chromium_path()
        if not path:
            pytest.skip("Chromium is not installed (apt-get install chromium)")
        try:
            import websocket  # websocket-client
        except ImportError:
            pytest.skip("websocket-client is not installed (pip install websocket-client)")
        self.profile = tempfile.mkdtemp(prefix="pmuscope-chromium-")
        self.proc = subprocess.Popen(
            [path, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if time.time() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("Chromium did not start (no DevToolsActivePort)")
            time.sleep(0.05)
        port = open(port_file).read().split()[0]
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params):
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30):
        deadline = time.time() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(method)

    def open(self, path: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url="file://" + os.path.abspath(path))
        self.wait_event("Page.loadEventFired")

    def js(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JS error: {res['exceptionDetails']}")
        return res["result"].get("value")

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            extra = {"button": "left", "clickCount": 1} if kind != "mouseMoved" else {}
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def type_text(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions seen so far."""
        # drain pending events without blocking
        self.ws.settimeout(0.2)
        try:
            while True:
                self.events.append(json.loads(self.ws.recv()))
        except Exception:
            pass
        finally:
            self.ws.settimeout(30)
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:300])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:300])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "")[:300])
        return out

    def screenshot(self, path: str) -> str:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)
