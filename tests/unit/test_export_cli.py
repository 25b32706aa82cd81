"""pmuscope export on real perf.data captures (google/perf_data_converter's
testdata, in the shared fixtures): pprof decoded with profile.proto's schema
agrees with `pmuscope report` (sample count, event total, stacks); speedscope
validates; --push reaches a recording server and fails cleanly when it is down."""

from __future__ import annotations

import json
import socket

import pytest

from pmuscope.cli.main import main as cli_main
from pmuscope.perfdata import Feature, PerfDataFile
from pmuscope.profile import folded_stacks, load_profile

from .pprof_schema import decode, labels_of
from .test_export import _validate_speedscope
from .test_export_push import Recorder, _parts

CALLGRAPH = "perf_data_converter/perf.data.callgraph-3.8"


@pytest.fixture()
def callgraph(shared_fixtures):
    path = shared_fixtures / CALLGRAPH
    assert path.exists(), f"fixture missing from the checkout: {path}"
    return str(path)


def _report(path, capsys) -> dict:
    assert cli_main(["report", "-i", path, "--no-children", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_pprof_agrees_with_report(callgraph, tmp_path, capsys):
    rep = _report(callgraph, capsys)
    out = tmp_path / "cg.pb.gz"
    assert cli_main(["export", "-i", callgraph, "-o", str(out), "--no-kernel-symbols"]) == 0
    prof = decode(out.read_bytes())
    st = prof.string_table
    types = [(st[t.type], st[t.unit]) for t in prof.sample_type]
    assert types == [("samples", "count"), ("cycles", "count")]
    assert sum(s.value[0] for s in prof.sample) == rep["samples"] == 1768
    assert sum(s.value[1] for s in prof.sample) == rep["event_count"]
    assert (st[prof.period_type.type], st[prof.period_type.unit]) == ("cycles", "count") and prof.period > 0
    # stacks: comm label as root + functions leaf-last == the profile module's folded stacks (period weight)
    funcs = {f.id: st[f.name] for f in prof.function}
    # the kernel and its modules (the file's module MMAPs name them by path without kallsyms)
    kern = {m.id for m in prof.mapping if st[m.filename].startswith("[kernel") or st[m.filename].endswith(".ko")}
    locs = {loc.id: funcs[loc.line[0].function_id] + ("_[k]" if loc.mapping_id in kern else "") for loc in prof.location}
    got: dict[str, int] = {}
    for s in prof.sample:
        key = ";".join([labels_of(prof, s)["comm"]] + [locs[i] for i in reversed(s.location_id)])
        got[key] = got.get(key, 0) + s.value[1]
    want = folded_stacks(load_profile(callgraph, kernel_symbols=False), weight="period")
    assert got == dict(want)
    # build ids of the file's HEADER_BUILD_ID feature land in Mapping.build_id
    with PerfDataFile(callgraph) as pf:
        file_ids = {b.filename: b.hex for b in pf.features.get(Feature.BUILD_ID) or []}
    mapped = {st[m.filename]: st[m.build_id] for m in prof.mapping}
    common = set(mapped) & set(file_ids)
    assert common and all(mapped[f] == file_ids[f] for f in common)
    assert all(set(labels_of(prof, s)) == {"pid", "tid", "cpu", "comm"} for s in prof.sample)
    # mapping[0] is what pprof calls the main binary: the most-sampled executable, not a library
    assert st[prof.mapping[0].filename] == "/opt/google/chrome/chrome"


def test_speedscope_and_folded_outputs(callgraph, tmp_path, capsys):
    rep = _report(callgraph, capsys)
    ss = tmp_path / "cg.json"
    assert cli_main(["export", "-i", callgraph, "-f", "speedscope", "-o", str(ss), "--no-kernel-symbols"]) == 0
    doc = json.loads(ss.read_text())
    _validate_speedscope(doc)
    assert sum(p["endValue"] for p in doc["profiles"]) == rep["event_count"]
    assert all(p["name"].endswith("— cycles") for p in doc["profiles"])
    capsys.readouterr()
    assert cli_main(["export", "-i", callgraph, "-f", "folded", "-o", "-", "--event", "samples",
                     "--no-kernel-symbols"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == 1768


def test_filters_apply(callgraph, tmp_path, capsys):
    out = tmp_path / "f.pb.gz"
    assert cli_main(["export", "-i", callgraph, "-o", str(out), "--comm", "Compositor", "--no-kernel-symbols"]) == 0
    prof = decode(out.read_bytes())
    assert prof.sample and {labels_of(prof, s)["comm"] for s in prof.sample} == {"Compositor"}


def test_push_folded_to_ingest(tmp_path, capsys):
    folded = tmp_path / "x.folded"
    folded.write_text("a;b 3\na 1\n")
    srv = Recorder()
    try:
        assert cli_main(["export", "-i", str(folded), "--push", srv.url, "--app", "myapp", "--label", "env=ci"]) == 0
    finally:
        srv.stop()
    (req,) = srv.requests
    name = req["query"]["name"][0]
    assert name.startswith("myapp{service_name=myapp,host=") and name.endswith(",event=samples,env=ci}")
    prof = decode(_parts(req)["profile"])
    assert sum(s.value[0] for s in prof.sample) == 4
    assert "pushed to" in capsys.readouterr().err


def test_push_to_down_backend_exits_1(tmp_path, capsys):
    folded = tmp_path / "x.folded"
    folded.write_text("a;b 3\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = cli_main(["export", "-i", str(folded), "--push", f"http://127.0.0.1:{port}", "--push-timeout", "0.5"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "not delivered" in err and "1 dropped" in err


def test_missing_input_is_one_clear_line(tmp_path, capsys):
    rc = cli_main(["export", "-i", str(tmp_path / "nope.data"), "-o", str(tmp_path / "o")])
    assert rc != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
