"""numatop's WIN5 — one thread broken down by node — on the recorded
two-node machine (tests/data/numa/two-node): the model's per-thread
``by_node`` cells checked against a hand computation from counts.json, the
``--threads`` JSON, and the terminal view driven with textual's Pilot.

Hand computation (cpu0 is on node 0, cpu20 on node 1; columns time, clk,
ir, rma, lma; every delta ends at a switch-out sample of the thread leaving):

======  ====  =======================================  =====================
cpu     tid   delta                                    why
======  ====  =======================================  =====================
0       100   400 ms, 1.2M, 1.0M, 1000, 4000           first sample
0       0     100 ms, 0.1M, 0.05M, 0, 0                idle
0       200   250 ms, 0.75M, 0.5M, 500, 500            db
0       101   250 ms, 0.6M, 0.5M, 200, 800             tail to the read, 101 running
20      101   50 ms, 0.15M, 0.1M, 300, 100             first sample
20      100   200 ms, 0.6M, 0.3M, 600, 200             second sample (tail carried)
======  ====  =======================================  =====================

The side-band interval is 1 s on both CPUs, so CPU% per node = time / 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from pmuscope.numa.model import read_nodes
from pmuscope.numa.snapshot import THREAD_COLUMNS, build_snapshot, read_proc_state
from tests.unit.test_numa import NUMA, _recorded_attribution
from tests.unit.test_system import unpacked

#: (pid, tid) -> node -> (cpu_pct, clk, ir, rma, lma, rma_lma, cpi, rpi, lpi), from the table above
EXPECTED = {
    (100, 100): {0: (40.0, 1_200_000, 1_000_000, 1000, 4000, 1000 / 4000, 1.2, 1000 * 1000 / 1_000_000, 4000 * 1000 / 1_000_000),
                 1: (20.0, 600_000, 300_000, 600, 200, 600 / 200, 2.0, 600 * 1000 / 300_000, 200 * 1000 / 300_000)},
    (100, 101): {0: (25.0, 600_000, 500_000, 200, 800, 200 / 800, 1.2, 200 * 1000 / 500_000, 800 * 1000 / 500_000),
                 1: (5.0, 150_000, 100_000, 300, 100, 300 / 100, 1.5, 300 * 1000 / 100_000, 100 * 1000 / 100_000)},
}
CELL = ("cpu_pct", "clk", "ir", "rma", "lma", "rma_lma", "cpi", "rpi", "lpi")
UNAVAILABLE = {"imc_mb": "no uncore_imc_N PMU in this fixture", "upi_mb": "no uncore_upi_N PMU in this fixture"}


@pytest.fixture(scope="module")
def nodes():
    return read_nodes(str(unpacked("intel-clx-2s-2node")))


@pytest.fixture(scope="module")
def two_node(nodes):
    before = read_proc_state(str(NUMA / "two-node" / "t0"), threads=True)
    after = read_proc_state(str(NUMA / "two-node" / "t1"), threads=True)
    return build_snapshot(nodes, before, after, attribution=_recorded_attribution(), unavailable=UNAVAILABLE,
                          platform="skx")


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_thread_by_node_hand_computed(two_node, key):
    t = two_node.thread(*key)
    assert [c["node"] for c in t["by_node"]] == [0, 1]
    for cell in t["by_node"]:
        want = EXPECTED[key][cell["node"]]
        for name, value in zip(CELL, want):
            assert cell[name] == pytest.approx(value), (key, cell["node"], name)


def test_thread_nodes_add_up_to_the_thread_and_the_process(two_node):
    for key in EXPECTED:
        t = two_node.thread(*key)
        for m in ("clk", "ir", "rma", "lma"):
            assert sum(c[m] for c in t["by_node"]) == pytest.approx(t[m])
    # the per-node cells of mgen's two threads are its own WIN3 cells
    p = two_node.process(100)
    for i, cell in enumerate(p["by_node"]):
        for m in ("cpu_pct", "clk", "ir", "rma", "lma"):
            assert cell[m] == pytest.approx(sum(two_node.thread(100, tid)["by_node"][i][m] for tid in (100, 101)))


def test_node_a_thread_never_ran_on_is_zero_time_and_undefined_ratios(two_node):
    db = two_node.thread(200, 200)
    n0, n1 = db["by_node"]
    assert (n0["cpu_pct"], n0["rma_lma"], n0["cpi"]) == (pytest.approx(25.0), 1.0, 1.5)
    # counted (side-band and PMU present) but nothing ran there: zero counts, ratios undefined, not zero
    assert (n1["cpu_pct"], n1["clk"], n1["rma"]) == (0.0, 0.0, 0.0)
    assert (n1["rma_lma"], n1["cpi"], n1["rpi"], n1["lpi"]) == (None, None, None, None)


def test_without_side_band_thread_cells_are_null_with_reasons(nodes):
    before = read_proc_state(str(NUMA / "two-node" / "t0"), threads=True)
    after = read_proc_state(str(NUMA / "two-node" / "t1"), threads=True)
    snap = build_snapshot(nodes, before, after, attribution=None)
    t = snap.thread(100, 101)
    assert t["cpu_pct"] == pytest.approx(30.0)  # schedstat needs no side-band
    for cell in t["by_node"]:
        assert all(cell[m] is None for m in CELL), cell
    assert "cpu_pct_by_node" in snap.unavailable and "rma" in snap.unavailable


def test_unknown_thread_is_a_clear_key_error(two_node):
    with pytest.raises(KeyError, match="thread 999 of pid 100"):
        two_node.thread(100, 999)


def test_threads_json_keeps_its_keys_and_adds_by_node(two_node, nodes):
    from pmuscope.cli.numatop_cmd import _select

    args = argparse.Namespace(all=False, node=None, sort="cpu_pct", top=None, ascending=False, threads=True)
    d = json.loads(json.dumps(_select(two_node, args, nodes)))
    rows = {(t["pid"], t["tid"]): t for t in d["threads"]}
    assert set(rows) == {(100, 100), (100, 101), (200, 200)}
    for t in d["threads"]:
        assert set(THREAD_COLUMNS) <= set(t)  # the columns --threads always had
        assert [c["node"] for c in t["by_node"]] == [0, 1]
    cell = rows[(100, 101)]["by_node"][1]
    assert (cell["cpu_pct"], cell["rma"], cell["lma"], cell["cpi"]) == (pytest.approx(5.0), 300, 100, 1.5)
    args.threads = False
    assert "threads" not in _select(two_node, args, nodes)


def test_threads_csv_rows_mirror_the_json_threads(two_node, nodes):
    import csv
    import io

    from pmuscope.cli.numatop_cmd import CSV_COLUMNS, _csv_rows, _select, csv_columns

    args = argparse.Namespace(all=False, node=None, sort="cpu_pct", top=None, ascending=False, threads=True)
    d = _select(two_node, args, nodes)
    buf = io.StringIO()
    w = csv.DictWriter(buf, csv_columns(True))
    w.writeheader()
    w.writerows(_csv_rows(d, 0))
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    header = buf.getvalue().splitlines()[0].split(",")
    assert header[:len(CSV_COLUMNS)] == list(CSV_COLUMNS) and header[len(CSV_COLUMNS):] == ["tid"]
    assert [r["table"] for r in rows] == ["node"] * 2 + ["process"] * len(d["processes"]) + ["thread"] * len(d["threads"])
    threads = [r for r in rows if r["table"] == "thread"]
    assert [(int(r["pid"]), int(r["tid"])) for r in threads] == [(t["pid"], t["tid"]) for t in d["threads"]]
    t101 = next(r for r in threads if r["tid"] == "101")
    want = two_node.thread(100, 101)
    assert (t101["comm"], float(t101["cpu_pct"]), float(t101["rma"]), float(t101["lma"])) == (
        want["comm"], pytest.approx(want["cpu_pct"]), want["rma"], want["lma"])
    assert float(t101["cpi"]) == pytest.approx(want["cpi"]) and t101["node"] == "" and t101["mem_kb"] == ""
    assert all(r["tid"] == "" for r in rows if r["table"] != "thread")

    # without --threads: the header and rows scripts already read, no tid column, no thread rows
    args.threads = False
    plain = _csv_rows(_select(two_node, args, nodes), 0)
    assert csv_columns(False) == CSV_COLUMNS
    assert {r["table"] for r in plain} == {"node", "process"} and all("tid" not in r for r in plain)
