"""perf report's call graph under each row, on a small synthetic recording
whose trees are known: branching callers, an entry with samples of its own
in mid-chain, recursion (gamma <- gamma), a branch below the 0.5% threshold
(phi, 0.38%) and a chain of one frame.

The expected texts are what Linux perf 6.1 prints for the same records
written as a perf.data file (``perf report --stdio --sort comm,sym`` with the
options of each test; '#' header lines left out): they were checked to be
identical when these tests were written. Symbols come from a JIT perf map, so
nothing depends on the machine.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pmuscope.cli.main import main as cli_main
from pmuscope.errors import PmuscopeError
from pmuscope.kernel import abi
from pmuscope.perfdata import synth
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.profile import build_profile, build_report, format_report, report_json
from pmuscope.profile.callchain import CallGraphParams, parse_call_graph
from pmuscope.records import AttrTable, RecordSource
from pmuscope.symbols import KernelSymbols, Symbolizer

S = abi.PerfSample
ST = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD
STG = ST | S.CALLCHAIN
UCTX = abi.PERF_CONTEXT_USER
PID = 4242
FUNCS = ["main", "alpha", "beta", "gamma", "delta", "eps", "phi"]
ADDR = {f: 0x400000 + 0x100 * i for i, f in enumerate(FUNCS)}
PERF_MAP = "".join(f"{ADDR[f]:x} 100 {f}\n" for f in FUNCS)
#: callee-first chains and their periods (total 8000)
CHAINS = [(("gamma", "alpha", "main"), 3000), (("delta", "alpha", "main"), 1500), (("gamma", "beta", "main"), 1200),
          (("alpha", "main"), 700), (("gamma", "gamma", "beta", "main"), 600), (("eps", "delta", "alpha", "main"), 500),
          (("phi", "beta", "main"), 30), (("main",), 410), (("eps", "main"), 60)]
SORT = ("comm", "sym")


def _sid(t, st=STG):
    return synth.sample_id(st, pid=PID, tid=PID, time=t, cpu=0)


def _records(st=STG):
    recs = [synth.comm(PID, PID, "syn", sample_id=_sid(1, st)),
            synth.mmap2(PID, PID, 0x400000, 0x1000, 0, "//anon", prot=7, flags=0x22, sample_id=_sid(2, st))]
    for i, (chain, period) in enumerate(CHAINS):
        ips = [ADDR[f] + 0x10 + 4 * k for k, f in enumerate(chain)]
        recs.append(synth.sample(st, ip=ips[0], pid=PID, tid=PID, time=10 * (i + 1), cpu=0, period=period,
                                 callchain=[UCTX, *ips] if st & S.CALLCHAIN else ()))
    return recs


def _attr(st=STG):
    return abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)


@pytest.fixture()
def prof(tmp_path):
    (tmp_path / f"perf-{PID}.map").write_text(PERF_MAP)
    sym = Symbolizer(kernel=KernelSymbols.parse(""), tmp_dir=str(tmp_path), vdso=False)
    table = AttrTable([(_attr(), [])], names=["cpu-clock"])
    return build_profile(RecordSource([b"".join(_records())], table), symbolizer=sym)


def _body(text: str) -> str:
    """The report without perf's '#' header lines and trailing blank lines."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("#")).strip("\n")


def _text(p, *, children, call_graph, sort=SORT, **kw):
    return _body(format_report(build_report(p, sort, children=children, call_graph=call_graph, **kw)))


CHILDREN_GRAPH = """\
   100.00%     5.12%  syn      [.] main
            |
            ---main
               |          
               |--71.25%--alpha
               |          |          
               |          |--37.50%--gamma
               |          |          
               |           --25.00%--delta
               |                     |          
               |                      --6.25%--eps
               |          
               |--22.88%--beta
               |          |          
               |           --22.50%--gamma
               |                     |          
               |                      --7.50%--gamma
               |          
                --0.75%--eps

    71.25%     8.75%  syn      [.] alpha
            |          
            |--62.50%--alpha
            |          |          
            |          |--37.50%--gamma
            |          |          
            |           --25.00%--delta
            |                     |          
            |                      --6.25%--eps
            |          
             --8.75%--main
                       alpha

    60.00%    60.00%  syn      [.] gamma
            |
            ---main
               |          
               |--37.50%--alpha
               |          gamma
               |          
                --22.50%--beta
                          gamma
                          |          
                           --7.50%--gamma

    25.00%    18.75%  syn      [.] delta
            |          
            |--18.75%--main
            |          alpha
            |          delta
            |          
             --6.25%--delta
                       eps

    22.88%     0.00%  syn      [.] beta
            |
            ---beta
               |          
                --22.50%--gamma
                          |          
                           --7.50%--gamma

     7.00%     7.00%  syn      [.] eps
            |
            ---main
               |          
               |--6.25%--alpha
               |          delta
               |          eps
               |          
                --0.75%--eps

     0.38%     0.38%  syn      [.] phi"""


def test_children_graph_like_perf(prof):
    """perf's default for a call-chain file: caller order, the rest of each
    chain from a row's first occurrence; gamma's recursion counted once;
    phi's branch (0.38%) pruned below 0.5%."""
    assert _text(prof, children=True, call_graph=CallGraphParams()) == CHILDREN_GRAPH


NO_CHILDREN_FRACTAL = """\
    60.00%  syn      [.] gamma
            |
            ---gamma
               |          
               |--62.50%--alpha
               |          main
               |          
               |--25.00%--beta
               |          main
               |          
                --12.50%--gamma
                          beta
                          main

    18.75%  syn      [.] delta
            |
            ---delta
               alpha
               main

     8.75%  syn      [.] alpha
            |
            ---alpha
               main

     7.00%  syn      [.] eps
            |
            ---eps
               |          
               |--89.29%--delta
               |          alpha
               |          main
               |          
                --10.71%--main

     5.12%  syn      [.] main
            |
            ---main

     0.38%  syn      [.] phi
            |
            ---phi
               beta
               main"""


def test_no_children_fractal_like_perf(prof):
    """Without --children: callee order, each row's own samples only; fractal
    shares are of the parent (and phi's 100% of itself is drawn)."""
    assert _text(prof, children=False, call_graph="fractal") == NO_CHILDREN_FRACTAL


NO_CHILDREN_FLAT = """\
    60.00%  syn      [.] gamma
           37.50%
                gamma
                alpha
                main

           15.00%
                gamma
                beta
                main

           7.50%
                gamma
                gamma
                beta
                main

    18.75%  syn      [.] delta
           18.75%
                delta
                alpha
                main

     8.75%  syn      [.] alpha
           8.75%
                alpha
                main

     7.00%  syn      [.] eps
           6.25%
                eps
                delta
                alpha
                main

           0.75%
                eps
                main

     5.12%  syn      [.] main
           5.12%
                main

     0.38%  syn      [.] phi"""


def test_no_children_flat_like_perf(prof):
    assert _text(prof, children=False, call_graph="flat") == NO_CHILDREN_FLAT


CHILDREN_FOLDED = """\
   100.00%     5.12%  syn      [.] main
37.50% main;alpha;gamma
18.75% main;alpha;delta
15.00% main;beta;gamma
8.75% main;alpha
7.50% main;beta;gamma;gamma
6.25% main;alpha;delta;eps
5.12% main
0.75% main;eps
    71.25%     8.75%  syn      [.] alpha
37.50% alpha;gamma
18.75% alpha;delta
8.75% main;alpha
6.25% alpha;delta;eps
    60.00%    60.00%  syn      [.] gamma
37.50% main;alpha;gamma
15.00% main;beta;gamma
7.50% main;beta;gamma;gamma
    25.00%    18.75%  syn      [.] delta
18.75% main;alpha;delta
6.25% delta;eps
    22.88%     0.00%  syn      [.] beta
15.00% beta;gamma
7.50% beta;gamma;gamma
     7.00%     7.00%  syn      [.] eps
6.25% main;alpha;delta;eps
0.75% main;eps
     0.38%     0.38%  syn      [.] phi"""


def test_children_folded_like_perf(prof):
    assert _text(prof, children=True, call_graph="folded") == CHILDREN_FOLDED


MAX_STACK_2 = """\
   100.00%     5.12%  syn      [.] main
            |
            ---main
               |          
               |--71.25%--alpha
               |          
               |--22.88%--beta
               |          
                --0.75%--eps

    71.25%     8.75%  syn      [.] alpha
            |          
            |--62.50%--alpha
            |          
             --8.75%--main
                       alpha

    60.00%    60.00%  syn      [.] gamma
            |
            ---main
               |          
               |--37.50%--alpha
               |          
                --22.50%--beta

    22.88%     0.00%  syn      [.] beta
            |
            ---beta

    18.75%    18.75%  syn      [.] delta
            |
            ---main
               alpha

     7.00%     7.00%  syn      [.] eps
            |
            ---main
               |          
               |--6.25%--alpha
               |          
                --0.75%--eps

     0.38%     0.38%  syn      [.] phi"""


def test_max_stack_keeps_frames_of_the_display_order(prof):
    """perf's --max-stack counts in the call graph's order: in caller order
    the outermost frames stay, and the Children column follows (delta's 25%
    drops to its own 18.75%: eps is cut from alpha's chains)."""
    assert _text(prof, children=True, call_graph="caller", max_stack=2) == MAX_STACK_2


def test_sort_by_sym_first_leaves_out_the_repeated_entry(prof):
    """With --sort starting with sym, perf does not repeat a lone first entry
    that is the row's own symbol: the chain starts at the caller."""
    text = _text(prof, children=False, call_graph=CallGraphParams(), sort=("sym", "comm"))
    assert text.splitlines()[:6] == [
        "    60.00%  [.] gamma  syn",
        "            |          ",
        "            |--37.50%--alpha",
        "            |          main",
        "            |          ",
        "            |--15.00%--beta"]
    assert "    18.75%  [.] delta  syn\n            |\n            ---alpha\n               main\n" in text


def test_values_period_and_count_and_print_limit(prof):
    text = _text(prof, children=False, call_graph="graph,0.5,period")
    assert "               |--3000--alpha\n" in text and "                --600--gamma\n" in text
    text = _text(prof, children=False, call_graph="fractal,0.5,count")
    # gamma: 3 samples under it, one each way
    assert "               |--1--alpha\n" in text and text.count("--1--") >= 3
    # one entry per level: main's tree keeps alpha (and its first callee) only
    limited = _text(prof, children=True, call_graph="graph,0.5,1")
    main = limited.split("\n\n")[0].splitlines()
    assert main[3:] == ["               |          ", "               |--71.25%--alpha",
                        "               |          |          ", "               |          |--37.50%--gamma"]


def test_threshold_prunes_branches(prof):
    low = _text(prof, children=False, call_graph="graph,0")
    assert "phi\n               beta\n               main" in low  # phi's own chain, 0.38%
    # eps' 0.75% branch is below a 1% threshold: the lone remaining chain gets its share drawn
    high = _text(prof, children=False, call_graph="graph,1")
    eps = high.split("7.00%  syn      [.] eps\n")[1].split("\n\n")[0]
    assert eps.splitlines() == ["            |", "            ---eps", "               |          ",
                                "                --6.25%--delta", "                          alpha",
                                "                          main"]


def test_hash_collisions_do_not_change_the_trees(prof, monkeypatch):
    """Samples are grouped by a hash of their chains; when every chain hashes
    the same, the check against each group's representative finds it and the
    exact grouping gives the same trees."""
    from pmuscope.profile import callchain

    want = _text(prof, children=True, call_graph=CallGraphParams())
    monkeypatch.setattr(callchain, "_multipliers", lambda n: np.zeros(n, dtype=np.uint64))
    assert _text(prof, children=True, call_graph=CallGraphParams()) == want == CHILDREN_GRAPH
    # the check runs some samples at a time: batches of one entry's worth find it as well
    monkeypatch.setattr(callchain, "_VERIFY_ENTRIES", 1)
    assert _text(prof, children=True, call_graph=CallGraphParams()) == want


def test_distinct_chains_check_in_batches_is_the_whole_check(monkeypatch):
    """_distinct_chains compares every sample with its class's representative a batch of
    samples at a time: the classes are those of one whole comparison, colliding hashes or not."""
    from pmuscope.profile import callchain

    rng = np.random.default_rng(4)
    pool = [rng.integers(0, 5, int(k)).astype(np.int64) for k in (0, 3, 3, 6, 6, 9)]
    for zero in (False, True):
        if zero:
            monkeypatch.setattr(callchain, "_multipliers", lambda n: np.zeros(n, dtype=np.uint64))
        for _ in range(50):
            n = int(rng.integers(1, 120))
            parts = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
            off = np.zeros(n + 1, dtype=np.int64)
            np.cumsum([len(x) for x in parts], out=off[1:])
            ent = np.concatenate(parts)
            row = rng.integers(0, 2, n).astype(np.int64)
            got = []
            for batch in (1 << 30, 1, 7):
                monkeypatch.setattr(callchain, "_VERIFY_ENTRIES", batch)
                got.append(callchain._distinct_chains(ent, off, row))
            cls, rep = got[0]
            for c, r in got[1:]:
                assert np.array_equal(c, cls) and np.array_equal(r, rep)
            # each class holds equal chains of one row, and different classes differ
            keys = [(int(row[i]), ent[off[i]:off[i + 1]].tobytes()) for i in range(n)]
            assert all(keys[i] == keys[int(rep[cls[i]])] for i in range(n))
            assert len({keys[int(r)] for r in rep}) == len(rep)


def test_json_tree_under_rows(prof):
    rep = build_report(prof, ("comm", "dso", "sym"), children=False, call_graph=CallGraphParams())
    data = json.loads(report_json([rep]))
    assert data["call_graph"] == {"mode": "graph", "min_percent": 0.5, "order": "callee", "value": "percent"}
    row = data["rows"][0]
    # the contract keys stay; the tree is one more key
    assert {"overhead", "samples", "comm", "dso", "sym", "period"} <= set(row)
    assert row["sym"] == "gamma" and row["samples"] == 3
    (top,) = row["callchain"]
    assert (top["sym"], top["samples"], top["period"], top["percent"]) == ("gamma", 3, 4800, 60.0)
    kids = [(c["sym"], c["period"], c["percent"]) for c in top["children"]]
    assert kids == [("alpha", 3000, 37.5), ("beta", 1200, 15.0), ("gamma", 600, 7.5)]
    assert [c["sym"] for c in top["children"][2]["children"]] == ["beta"]
    assert top["children"][0]["children"][0]["children"] == []  # main, the outermost caller
    assert set(top) == {"sym", "dso", "samples", "period", "percent", "children"}
    # fractal: shares of the parent
    rel = json.loads(report_json([build_report(prof, ("sym",), call_graph="fractal")]))
    assert [c["percent"] for c in rel["rows"][0]["callchain"][0]["children"]] == [62.5, 25.0, 12.5]


def test_no_call_graph_without_params_or_chains(prof, tmp_path):
    rep = build_report(prof, SORT)
    assert rep.call_graph is None and all(r.callchain is None for r in rep.rows)
    assert "callchain" not in report_json([rep]) and "---" not in format_report(rep)
    none = build_report(prof, SORT, call_graph="none")
    assert "---" not in format_report(none) and "callchain" not in report_json([none])
    table = AttrTable([(_attr(ST), [])], names=["cpu-clock"])
    plain = build_profile(RecordSource([b"".join(_records(ST))], table), symbolizer=Symbolizer(tmp_dir=str(tmp_path)))
    rep = build_report(plain, SORT, call_graph=CallGraphParams())
    assert rep.call_graph is None and "callchain" not in report_json([rep])


@pytest.mark.parametrize("text, want", [
    (None, CallGraphParams("graph", 0.5, 0, "caller", "percent")),
    ("fractal", CallGraphParams(mode="fractal")),
    ("f", CallGraphParams(mode="flat")),  # perf tries graph, flat, fractal, folded in turn
    ("fo,2,callee", CallGraphParams(mode="folded", min_percent=2.0, order="callee")),
    ("caller,1.5,10,count", CallGraphParams(min_percent=1.5, print_limit=10, order="caller", value="count")),
    ("function,period", CallGraphParams(value="period")),
    ("none", CallGraphParams(mode="none")),
    ("n", CallGraphParams(mode="none")),
])
def test_parse_call_graph_like_perf(text, want):
    assert parse_call_graph(text) == want


def test_parse_call_graph_keeps_what_is_not_named():
    base = parse_call_graph("fractal,2")
    assert parse_call_graph("caller", base) == CallGraphParams("fractal", 2.0, 0, "caller", "percent")


@pytest.mark.parametrize("text, msg", [("bogus", "not a print type"), ("graph,abc", "'abc'"),
                                       ("1,2,3", "'3'"), ("address", "not supported")])
def test_parse_call_graph_errors(text, msg):
    with pytest.raises(PmuscopeError, match=msg):
        parse_call_graph(text)


# --- the command line -------------------------------------------------------------------
@pytest.fixture()
def data_file(tmp_path, jit_maps_in):
    # the command looks for the JIT map in /tmp; point it at this test's own copy
    (tmp_path / f"perf-{PID}.map").write_text(PERF_MAP)
    jit_maps_in(tmp_path)
    path = tmp_path / "syn.data"
    with PerfDataWriter(path, [(_attr(), [], "cpu-clock")], host=False) as w:
        w.write(b"".join(_records()))
    return str(path)


def _cli(capsys, *args):
    rc = cli_main(["report", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _rows(text):
    return [ln for ln in text.splitlines() if re.match(r"^ +\d+\.\d\d% +\d+\.\d\d%  ", ln)]


def test_cli_draws_by_default_and_hides_on_request(data_file, capsys):
    rc, out, _ = _cli(capsys, "-i", data_file)
    assert rc == 0 and "Children      Self" in out and "            ---" in out and "--71.25%--" in out
    assert len(_rows(out)) == 7
    for hide in (["-g", "none"], ["--no-call-graph"], ["-g", "graph", "--no-call-graph"]):
        rc, out2, _ = _cli(capsys, "-i", data_file, *hide)
        assert rc == 0 and "---" not in out2 and "%--" not in out2
        assert _rows(out2) == _rows(out)  # same table, no trees


def test_cli_options_like_perf(data_file, capsys):
    # -g alone is perf's graph,0.5,caller: caller order even without --children
    _, out, _ = _cli(capsys, "-i", data_file, "--no-children", "-g")
    assert "[.] gamma\n            |\n            ---main\n" in out
    _, callee, _ = _cli(capsys, "-i", data_file, "--no-children")
    assert "[.] gamma\n            |\n            ---gamma\n" in callee
    _, inverted, _ = _cli(capsys, "-i", data_file, "--no-children", "-G")
    assert callee != inverted and inverted == out
    # --percent-limit sets the threshold too; the later of it and -g's counts
    _, a, _ = _cli(capsys, "-i", data_file, "--no-children", "-g", "graph,0", "--percent-limit", "5")
    _, b, _ = _cli(capsys, "-i", data_file, "--no-children", "--percent-limit", "5", "-g", "graph,0")
    assert "--0.75%--" not in a and "--0.75%--" in b
    _, folded, _ = _cli(capsys, "-i", data_file, "-g", "folded")
    assert any(ln.startswith("37.50% ") and ln.count(";") == 2 for ln in folded.splitlines())
    rc, js, _ = _cli(capsys, "-i", data_file, "--json")
    data = json.loads(js)
    assert rc == 0 and data["rows"][0]["callchain"] and data["call_graph"]["order"] == "callee"
    rc, js, _ = _cli(capsys, "-i", data_file, "--json", "-g", "none")
    assert rc == 0 and "callchain" not in js


def test_cli_errors_are_one_line(data_file, tmp_path, capsys):
    plain = tmp_path / "plain.data"
    with PerfDataWriter(plain, [(_attr(ST), [], "cpu-clock")], host=False) as w:
        w.write(b"".join(_records(ST)))
    rc, out, err = _cli(capsys, "-i", str(plain), "-g")
    assert rc != 0 and "no call chains" in err and len(err.strip().splitlines()) == 1
    rc, out, _ = _cli(capsys, "-i", str(plain))  # without -g a plain file just has no tree
    assert rc == 0 and "---" not in out
    for bad, msg in ((["-g", "sideways"], "sideways"), (["--max-stack", "-3"], "--max-stack")):
        rc, _, err = _cli(capsys, "-i", data_file, *bad)
        assert rc != 0 and msg in err and "Traceback" not in err


@pytest.mark.parametrize("children", [False, True], ids=["self", "children"])
def test_report_text_in_pieces_is_the_whole_text(prof, children, monkeypatch):
    """``iter_format_report`` (what ``report --stdio`` writes as it formats): its
    pieces, whatever their size, join to ``format_report``'s text."""
    from pmuscope.profile import report_format

    rep = build_report(prof, SORT, children=children, call_graph=parse_call_graph("graph,0.5,caller"))
    whole = format_report(rep)
    assert whole.count("\n") > 20 and "--" in whole
    for batch in (1, 3, 7, 1 << 20):
        monkeypatch.setattr(report_format, "LINE_BATCH", batch)
        pieces = list(report_format.iter_format_report(rep))
        assert "".join(pieces) == whole
        assert len(pieces) > 1 or batch == 1 << 20
        assert all(p.endswith("\n") for p in pieces)
    quiet = list(report_format.iter_format_report(rep, quiet=True))
    assert "".join(quiet) == format_report(rep, quiet=True)
