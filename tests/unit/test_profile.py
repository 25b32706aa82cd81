"""Profile model, report, script and folded stacks on small synthetic record
streams (pmuscope.perfdata.synth), with symbols from a JIT perf map and a
fake kallsyms so nothing depends on the machine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pmuscope.kernel import abi
from pmuscope.perfdata import synth
from pmuscope.profile import (build_profile, build_report, folded_stacks, format_report, format_script,
                              load_profile, parse_fields, parse_sort, report_json)
from pmuscope.records import AttrTable, RecordSource
from pmuscope.symbols import KernelSymbols, Symbolizer
from pmuscope.errors import PmuscopeError

S = abi.PerfSample
ST = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD
STG = ST | S.CALLCHAIN
KCTX = abi.PERF_CONTEXT_KERNEL
UCTX = abi.PERF_CONTEXT_USER
KERNEL = abi.PERF_RECORD_MISC_KERNEL
FIXTURE_COUNTS = Path(__file__).resolve().parents[1] / "data" / "perfdata" / "fixture_counts.json"

# JIT code of pid 100 (perf map): main 0x1000-0x1100, work 0x1100-0x1200, spin 0x1200-0x1300
PERF_MAP = "1000 100 main\n1100 100 work\n1200 100 spin\n"
KALLSYMS = "ffffffff81000000 T _stext\nffffffff81000100 T do_syscall_64\nffffffff81000200 T schedule\n" \
           "ffffffff81000300 T _etext\n"


def _attr(sample_type, period=1000, freq=False):
    return abi.perf_event_attr(type=1, config=0, sample_type=int(sample_type), sample_period=period,
                               freq=int(freq), sample_id_all=1)


def _symbolizer(tmp_path):
    (tmp_path / "perf-100.map").write_text(PERF_MAP)
    (tmp_path / "perf-200.map").write_text(PERF_MAP)
    return Symbolizer(kernel=KernelSymbols.parse(KALLSYMS), tmp_dir=str(tmp_path), vdso=False)


def _profile(tmp_path, records: list[bytes], sample_type=ST, **kw):
    attr = _attr(sample_type)
    table = AttrTable([(attr, [])], names=["cpu-clock"])
    return build_profile(RecordSource([b"".join(records)], table), symbolizer=_symbolizer(tmp_path), **kw)


def sid(t, pid=100, tid=100, cpu=0, st=ST):
    return synth.sample_id(st, pid=pid, tid=tid, time=t, cpu=cpu)


def test_columns_comm_and_symbols(tmp_path):
    recs = [synth.comm(100, 100, "app", sample_id=sid(1)),
            synth.sample(ST, ip=0x1010, pid=100, tid=100, time=10, cpu=1, period=300),
            synth.sample(ST, ip=0x1110, pid=100, tid=101, time=20, cpu=0, period=100),
            synth.sample(ST, ip=0xffffffff81000208, pid=100, tid=100, time=30, cpu=1, period=100, misc=KERNEL)]
    p = _profile(tmp_path, recs)
    assert len(p) == 3
    assert p.tid.tolist() == [100, 101, 100] and p.cpu.tolist() == [1, 0, 1]
    assert p.period.tolist() == [300, 100, 100]
    # tid 101 never had a COMM: perf names such a thread ":TID"
    assert [p.comms[c] for c in p.comm] == ["app", ":101", "app"]
    assert [p.sym_name(p.frame_sym[f]) for f in p.leaf] == ["main", "work", "schedule"]
    assert p.frame_off[p.leaf].tolist() == [0x10, 0x10, 8]
    assert p.frame_kernel[p.leaf].tolist() == [False, False, True]


def test_distinct_addresses_resolved_once(tmp_path):
    recs = [synth.comm(100, 100, "app", sample_id=sid(1))]
    recs += [synth.sample(ST, ip=0x1010 + (i % 3), pid=100, tid=100, time=10 + i) for i in range(50)]
    p = _profile(tmp_path, recs)
    assert len(p) == 50 and len(p.frame_ip) == 3


def test_side_band_applied_in_time_order(tmp_path):
    """A sample written before a COMM that precedes it in time (another CPU's
    ring drained first) gets the new comm, as perf's ordered processing gives."""
    recs = [synth.comm(100, 100, "old", sample_id=sid(1)),
            synth.sample(ST, ip=0x1010, pid=100, tid=100, time=50),  # written first, taken after the COMM
            synth.sample(ST, ip=0x1010, pid=100, tid=100, time=5),   # taken before the COMM
            synth.comm(100, 100, "new", sample_id=sid(40)),
            synth.finished_round(), synth.finished_round()]
    p = _profile(tmp_path, recs)
    # time-sorted like perf script: t=5 first (old name), then t=50 (new name)
    assert p.time.tolist() == [5, 50]
    assert [p.comms[c] for c in p.comm] == ["old", "new"]


def test_fork_inherits_comm(tmp_path):
    recs = [synth.comm(100, 100, "parent", sample_id=sid(1)),
            synth.fork(200, 100, 200, 100, 2, sample_id=sid(2, 200, 200)),
            synth.sample(ST, ip=0x1210, pid=200, tid=200, time=10)]
    p = _profile(tmp_path, recs)
    assert p.comms[p.comm[0]] == "parent"
    assert p.sym_name(p.frame_sym[p.leaf[0]]) == "spin"


def _chain_records():
    return [synth.comm(100, 100, "app", sample_id=sid(1, st=STG)),
            # kernel leaf, user callers: spin <- work <- main
            synth.sample(STG, ip=0xffffffff81000208, pid=100, tid=100, time=10, period=100, misc=KERNEL,
                         callchain=[KCTX, 0xffffffff81000208, 0xffffffff81000110, UCTX, 0x1210, 0x1110, 0x1010]),
            synth.sample(STG, ip=0x1210, pid=100, tid=100, time=20, period=100,
                         callchain=[UCTX, 0x1210, 0x1110, 0x1010]),
            synth.sample(STG, ip=0x1110, pid=100, tid=100, time=30, period=200,
                         callchain=[UCTX, 0x1110, 0x1010])]


def test_call_stacks_drop_context_markers(tmp_path):
    p = _profile(tmp_path, _chain_records(), sample_type=STG)
    assert p.has_callchain
    first = p.stack[p.stack_offsets[0]:p.stack_offsets[1]]
    assert [p.sym_name(p.frame_sym[f]) for f in first] == ["schedule", "do_syscall_64", "spin", "work", "main"]
    assert p.frame_kernel[first].tolist() == [True, True, False, False, False]
    assert np.diff(p.stack_offsets).tolist() == [5, 3, 2]


def test_report_self_and_children(tmp_path):
    p = _profile(tmp_path, _chain_records(), sample_type=STG)
    rep = build_report(p, ("sym",))
    got = {r.keys["sym"]: (round(r.overhead, 2), r.samples) for r in rep.rows}
    assert got == {"work": (50.0, 1), "schedule": (25.0, 1), "spin": (25.0, 1)}
    assert rep.rows[0].keys["sym"] == "work"  # by period, not by sample count
    ch = build_report(p, ("sym",), children=True)
    kids = {r.keys["sym"]: round(r.children, 2) for r in ch.rows}
    assert kids == {"main": 100.0, "work": 100.0, "spin": 50.0, "schedule": 25.0, "do_syscall_64": 25.0}
    assert ch.rows[0].keys["sym"] in ("main", "work")
    text = format_report(ch)
    assert "Children      Self" in text and "[k] schedule" in text


def test_report_sort_keys_any_order_and_json_contract(tmp_path):
    recs = [synth.comm(100, 100, "app", sample_id=sid(1)), synth.comm(200, 200, "other", sample_id=sid(1, 200, 200))]
    recs += [synth.sample(ST, ip=0x1010, pid=100, tid=100, time=10 + i, cpu=i % 2, period=100) for i in range(6)]
    recs += [synth.sample(ST, ip=0x1110, pid=200, tid=200, time=20 + i, cpu=1, period=100) for i in range(2)]
    recs += [synth.sample(ST, ip=0x9999, pid=200, tid=200, time=40, cpu=1, period=100)]  # no symbol
    p = _profile(tmp_path, recs)
    doc = json.loads(report_json([build_report(p, parse_sort("sym,comm,pid,cpu,dso"))]))
    assert doc["samples"] == 9 and doc["lost"] == 0 and doc["event"] == "cpu-clock"
    rows = doc["rows"]
    assert [r["overhead"] for r in rows] == sorted((r["overhead"] for r in rows), reverse=True)
    assert sum(r["samples"] for r in rows) == 9
    assert abs(sum(r["overhead"] for r in rows) - 100) < 1e-3
    top = rows[0]
    assert set(top) >= {"overhead", "samples", "sym", "comm", "pid", "cpu", "dso"}
    assert (top["sym"], top["comm"], top["pid"], top["samples"]) == ("main", "app", 100, 3)
    assert round(top["overhead"], 2) == 33.33
    unknown = [r for r in rows if r["sym"].startswith("0x")]
    # no symbol covers it: one row for the address, named as perf names it
    assert len(unknown) == 1 and unknown[0]["sym"] == "0x0000000000009999"
    by_comm = build_report(p, ("comm",))
    assert [(r.keys["comm"], r.samples) for r in by_comm.rows] == [("app", 6), ("other", 3)]
    limited = build_report(p, ("comm", "sym"), percent_limit=20)
    assert [r.keys["sym"] for r in limited.rows] == ["main", "work"]


def test_bad_sort_key_is_a_clear_error():
    with pytest.raises(PmuscopeError, match="unknown key.*bogus"):
        parse_sort("comm,bogus")
    with pytest.raises(PmuscopeError, match="unknown field"):
        parse_fields("comm,nope")


def test_filters(tmp_path):
    recs = [synth.comm(100, 100, "app", sample_id=sid(1)), synth.comm(200, 200, "other", sample_id=sid(1, 200, 200))]
    recs += [synth.sample(ST, ip=0x1010, pid=100, tid=100 + (i % 2), time=1_000_000_000 * i, cpu=i % 2)
             for i in range(1, 7)]
    recs += [synth.sample(ST, ip=0x1110, pid=200, tid=200, time=500, cpu=1)]
    p = _profile(tmp_path, recs)
    assert len(p.filter(pids=[200])) == 1
    assert len(p.filter(tids=[101])) == 3
    assert len(p.filter(comms=["app"])) == 3  # tid 101 had no COMM: it is ":101"
    assert len(p.filter(comms=[":101"])) == 3
    assert len(p.filter(cpus=[0])) == 3
    assert p.filter(time_range=(2_000_000_000, 4_000_000_000)).time.tolist() == [2e9, 3e9, 4e9]


def test_script_lines_like_perf(tmp_path):
    p = _profile(tmp_path, [synth.comm(100, 100, "app", sample_id=sid(1)),
                            synth.sample(ST, ip=0x1010, pid=100, tid=100, time=1959939414053, cpu=1, period=250000),
                            synth.sample(ST, ip=0xffffffff81000208, pid=100, tid=100, time=1959939663353, cpu=0,
                                         period=250000, misc=KERNEL)])
    lines = format_script(p).splitlines()
    # a JIT frame: the DSO is the perf map, as perf names it
    assert lines[0] == ("             app   100 [001]  1959.939414:     250000 cpu-clock:              1010 main+0x10 "
                        f"({tmp_path}/perf-100.map)")
    assert lines[1] == "             app   100 [000]  1959.939663:     250000 cpu-clock:  ffffffff81000208 schedule+0x8 ([kernel.kallsyms])"
    picked = format_script(p, parse_fields("comm,tid,ip,sym")).splitlines()
    assert picked[1] == "             app   100  ffffffff81000208 schedule"


def test_script_call_chains(tmp_path):
    p = _profile(tmp_path, _chain_records(), sample_type=STG)
    text = format_script(p)
    blocks = text.split("\n\n")
    first = blocks[0].splitlines()
    assert first[0].startswith("app   100 ") and first[0].endswith("cpu-clock: ")
    assert first[1] == "\tffffffff81000208 schedule+0x8 ([kernel.kallsyms])"
    assert [ln.split()[1] for ln in first[1:]] == ["schedule+0x8", "do_syscall_64+0x10", "spin+0x10", "work+0x10",
                                                  "main+0x10"]
    assert len(text.splitlines()) == 3 + 5 + 3 + 2 + 3  # header + frames + blank line per sample
    hidden = format_script(p, callchain=False).splitlines()
    assert len(hidden) == 3 and hidden[0].endswith("schedule+0x8 ([kernel.kallsyms])")


def test_script_per_stack_text_same_as_per_frame(tmp_path, monkeypatch):
    from pmuscope.profile import script

    p = _profile(tmp_path, _chain_records() + _chain_records()[1:], sample_type=STG)
    stack_texts = script._stack_texts
    monkeypatch.setattr(script, "_stack_texts", lambda *a, **k: None)
    per_frame = format_script(p)
    assert len(per_frame.split("\n\n")) == 7  # six samples
    table = script._frame_table(p, relative=True, ip=True, sym=True, symoff=True, dso=True, prefix="\t",
                                suffix="\n")
    texts, ids = stack_texts(p, table, min_mean_depth=0)
    assert len(texts) == 3 and sorted(ids.tolist()) == [0, 0, 1, 1, 2, 2]
    monkeypatch.setattr(script, "_stack_texts", lambda q, t: stack_texts(q, t, min_mean_depth=0))
    assert format_script(p) == per_frame
    # every stack hashing alike (all weights zero): the exact check refuses, frames are joined one by one
    monkeypatch.setattr(script, "_HASH_W", np.zeros_like(script._HASH_W))
    assert stack_texts(p, table, min_mean_depth=0) is None
    assert format_script(p) == per_frame


def test_script_headers_same_as_the_per_sample_formatter(tmp_path, monkeypatch):
    """Headers are built as one byte matrix per batch; perf's per-sample
    layout (the fallback formatter, f-strings) gives the same text for every
    field set, prefixes of different lengths, and two event names."""
    from pmuscope.profile import script

    threads = [(100, 100, "app"), (200, 1234567, "a-much-longer-name"), (100, 101, "app")]
    recs = [synth.comm(pid, tid, name, sample_id=sid(1, pid=pid, tid=tid, st=STG)) for pid, tid, name in threads]
    for i in range(60):
        pid, tid, _ = threads[i % 3]
        recs.append(synth.sample(STG, ip=0x1010 + (i % 3) * 0x100, pid=pid, tid=tid, time=5_000_000_000 + i * 1_234_567,
                                 cpu=i % 4, period=[1, 250000, 9_999_999_999][i % 3],
                                 callchain=[UCTX, 0x1210, 0x1110, 0x1010][: 1 + i % 4]))
    p = _profile(tmp_path, recs, sample_type=STG)
    p.event_names = ["cpu-clock", "major-faults"]
    p.event = (np.arange(len(p)) % 2).astype(p.event.dtype)
    fields = [None, "comm,tid,time", "tid,period,event,ip", "comm,pid,tid,cpu,time,event,ip,sym,dso",
              "pid,ip", "comm", "time,period"]
    fast = [format_script(p, parse_fields(f), callchain=c) for f in fields for c in (True, False)]
    monkeypatch.setattr(script, "_middle", lambda *a: None)
    slow = [format_script(p, parse_fields(f), callchain=c) for f in fields for c in (True, False)]
    assert fast == slow
    # comms are cut to 15 characters (TASK_COMM_LEN), the event name is padded to the longest
    assert "\na-much-longer-n 1234567 [001]     5.001234:     250000 major-faults: \n\t" in fast[0]
    assert "\napp   101 [002]     5.002469: 9999999999    cpu-clock: \n\t" in fast[0]


def test_folded_stacks(tmp_path):
    p = _profile(tmp_path, _chain_records(), sample_type=STG)
    f = folded_stacks(p)
    assert f == {"app;main;work;spin;do_syscall_64_[k];schedule_[k]": 1, "app;main;work;spin": 1, "app;main;work": 1}


def test_empty_stream(tmp_path):
    p = _profile(tmp_path, [synth.comm(100, 100, "app", sample_id=sid(1))])
    rep = build_report(p)
    assert len(p) == 0 and rep.rows == [] and "# Samples: 0  of event 'cpu-clock'" in format_report(rep)


def _fixture_cases():
    if not FIXTURE_COUNTS.exists():
        return []
    doc = json.loads(FIXTURE_COUNTS.read_text())
    return sorted((k, sum(v["samples_by_event"].values())) for k, v in doc.items() if v.get("samples_by_event"))


@pytest.mark.parametrize("name,samples", _fixture_cases())
def test_every_fixture_reports(shared_fixtures, name, samples):
    path = shared_fixtures / name
    assert path.exists(), f"fixture missing from the checkout: {path}"
    p = load_profile(str(path), kernel_symbols=False)
    assert len(p) == samples
    rep = build_report(p, ("comm", "dso", "sym"))
    assert rep.samples == samples
    assert sum(r.samples for r in rep.rows) == samples
    if name.endswith("lost_samples-4.4"):
        assert p.lost == rep.lost == 2  # perf report: "# Total Lost Samples: 2"
    if name.endswith("callgraph-3.8"):
        assert samples == 1768
        assert p.has_callchain and (np.diff(p.stack_offsets) >= 2).mean() > 0.5


def test_profile_python_summary_from_folded_stacks():
    """profile's Python table: Total counts a function once per sample wherever it
    is on the stack, Own where it is the innermost Python frame; call paths fold
    recursion and keep the innermost four functions."""
    from collections import Counter

    from pmuscope.profile.folded import python_summary

    folded = Counter({
        "python3;py::main:/w/app.py;_PyEval_EvalFrameDefault;py::work:/w/app.py;py::fib:/w/app.py;py::fib:/w/app.py;"
        "_PyEval_EvalFrameDefault": 60,
        "python3;py::main:/w/app.py;py::io:/w/app.py;read": 30,
        "python3;_start;main": 10,
    })
    text = python_summary(folded, 10)
    lines = [ln.split() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    table = {ln[2]: (ln[0], ln[1]) for ln in lines if len(ln) >= 3 and ln[1].endswith("%") and "->" not in ln}
    assert table["main"] == ("90.00%", "0.00%") and table["fib"] == ("60.00%", "60.00%")
    assert table["io"] == ("30.00%", "30.00%")
    assert "  60.00%  main -> work -> fib" in text and "  30.00%  main -> io" in text
    assert python_summary(Counter({"python3;_start;main": 5}), 10) == ""
