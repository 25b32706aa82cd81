"""``pmuscope record --push`` without the kernel: a fake Recorder writes a
small perf.data; the CLI then pushes it to a tiny local HTTP server that
records requests, or to a port nobody listens on. The workload's exit status
stays pmuscope's exit status either way."""

from __future__ import annotations

import email.parser
import email.policy
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pmuscope.cli import main as cli_main
from pmuscope.kernel import abi
from pmuscope.perfdata import PerfDataWriter, synth
from pmuscope.sampling.session import RecordResult

from .pprof_schema import decode

S = abi.PerfSample
ST = S.IP | S.TID | S.TIME | S.PERIOD


class Ingest(ThreadingHTTPServer):
    """Records every POST; answers with the queued statuses, then 200."""

    daemon_threads = True

    def __init__(self, statuses=()):
        self.requests: list[dict] = []
        self.statuses = list(statuses)
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        path, _, query = self.path.partition("?")
        self.server.requests.append({"path": path, "query": {k: v[0] for k, v in urllib.parse.parse_qs(query).items()},
                                     "status": status, "content_type": self.headers["Content-Type"], "body": body})
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def profile_part(req) -> bytes:
    raw = f"Content-Type: {req['content_type']}\r\n\r\n".encode() + req["body"]
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
    parts = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True) for p in msg.iter_parts()}
    return parts["profile"]


class FakeRecorder:
    """Stands in for pmuscope.sampling.Recorder: 'records' ``nsamples`` samples
    of one thread into ``output`` and reports ``exit_status``."""

    nsamples = 40
    exit_status = 3
    instances: list["FakeRecorder"] = []

    def __init__(self, events=None, *, output="perf.data", **kw):
        self.output = output
        self.notes: list[str] = []
        self.mmap_pages = 128
        self.pushed_before_done = None
        FakeRecorder.instances.append(self)

    def start(self):
        pass

    def stop(self):
        pass

    def run(self, duration=None):
        attr = abi.perf_event_attr(type=1, config=0, sample_type=int(ST), sample_period=250000, sample_id_all=1)
        w = PerfDataWriter(self.output, [(attr, [], "cpu-clock")], host=False)
        recs = [synth.comm(9, 9, "work", sample_id=synth.sample_id(ST, pid=9, tid=9, time=1))]
        recs += [synth.sample(ST, ip=0x1000 + (i % 2) * 0x10, pid=9, tid=9, time=10 + i, period=250000)
                 for i in range(self.nsamples)]
        w.write(b"".join(recs))
        w.close()
        return RecordResult(self.output, samples=self.nsamples, exit_status=self.exit_status, events=["cpu-clock"])


@pytest.fixture()
def fake_recorder(monkeypatch):
    import pmuscope.sampling as sampling

    FakeRecorder.instances.clear()
    monkeypatch.setattr(sampling, "Recorder", FakeRecorder)
    return FakeRecorder


@pytest.fixture()
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_push_after_recording_with_labels(fake_recorder, tmp_path, capsys):
    srv = Ingest(statuses=[503])  # one retry
    try:
        out = str(tmp_path / "p.data")
        rc = cli_main.main(["record", "-q", "-o", out, "--push", srv.url, "--app", "shop", "--label", "team=perf",
                            "--label", "region=eu-1", "--", "true"])
        assert rc == 3  # the workload's status
        assert [r["status"] for r in srv.requests] == [503, 200]
        req = srv.requests[-1]
        assert req["path"] == "/ingest" and req["query"]["format"] == "pprof"
        import os

        name = req["query"]["name"]
        assert name == f"shop{{service_name=shop,host={os.uname().nodename},event=cpu-clock,team=perf,region=eu-1}}"
        assert int(req["query"]["until"]) >= int(req["query"]["from"])
        prof = decode(profile_part(req))
        st = prof.string_table
        types = [st[t.type] for t in prof.sample_type]
        assert "samples" in types
        i = types.index("samples")
        assert sum(s.value[i] for s in prof.sample) == FakeRecorder.nsamples
        err = capsys.readouterr().err
        assert "warning" not in err  # -q: no success line either
    finally:
        srv.stop()


def test_backend_down_is_a_one_line_counted_warning(fake_recorder, tmp_path, capsys, closed_port):
    out = str(tmp_path / "p.data")
    rc = cli_main.main(["record", "-o", out, "--push", f"http://127.0.0.1:{closed_port}", "--push-timeout", "1.5",
                        "--", "true"])
    assert rc == 3
    err = capsys.readouterr().err.strip().splitlines()
    warn = [ln for ln in err if "warning" in ln]
    assert len(warn) == 1, err
    assert "not delivered" in warn[0] and "1 dropped" in warn[0] and "refused" in warn[0].lower()
    assert not any("pushed" in ln for ln in err)
    assert (tmp_path / "p.data").stat().st_size > 0  # the recording is untouched


def test_refused_by_backend_4xx(fake_recorder, tmp_path, capsys):
    srv = Ingest(statuses=[400])
    try:
        rc = cli_main.main(["record", "-q", "-o", str(tmp_path / "p.data"), "--push", srv.url, "--", "true"])
        assert rc == 3
        assert len(srv.requests) == 1  # a 4xx is not retried
        err = capsys.readouterr().err
        assert "HTTP 400" in err and "1 dropped" in err
    finally:
        srv.stop()


def test_success_line_and_zero_status(fake_recorder, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(FakeRecorder, "exit_status", 0)
    srv = Ingest()
    try:
        rc = cli_main.main(["record", "-o", str(tmp_path / "p.data"), "--push", srv.url + "/", "--", "true"])
        assert rc == 0 and len(srv.requests) == 1
        assert f"pushed {tmp_path / 'p.data'} to {srv.url}/ingest as pmuscope" in capsys.readouterr().err
    finally:
        srv.stop()


def test_nothing_recorded_nothing_pushed(fake_recorder, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(FakeRecorder, "nsamples", 0)
    srv = Ingest()
    try:
        rc = cli_main.main(["record", "-q", "-o", str(tmp_path / "p.data"), "--push", srv.url, "--", "true"])
        assert rc == 3 and srv.requests == []
        assert "no samples" in capsys.readouterr().err
    finally:
        srv.stop()


@pytest.mark.parametrize("argv, message", [
    (["--push", "ftp://x"], "expected http(s)://HOST:PORT"),
    (["--push", "http://127.0.0.1:1", "--label", "novalue"], "expected KEY=VALUE"),
    (["--push", "http://127.0.0.1:1", "--label", "1bad=x"], "bad label name"),
    (["--push", "http://127.0.0.1:1", "--label", "k=a,b"], "values cannot contain"),
    (["--push", "http://127.0.0.1:1", "-o", "-"], "use -o FILE"),
    (["--push", "http://127.0.0.1:1", "--push-timeout", "0"], "positive"),
])
def test_bad_push_options_fail_before_recording(fake_recorder, tmp_path, capsys, argv, message):
    args = ["record", *argv] + ([] if "-o" in argv else ["-o", str(tmp_path / "p.data")]) + ["--", "true"]
    rc = cli_main.main(args)
    assert rc != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert FakeRecorder.instances == []  # nothing was recorded
