"""(pid, node), (pid, tid) and (pid, tid, node) sums of the snapshot are
grouped by tuples, not by one packed integer.

The former ``pid * 4096 + node`` key needed every node id in [0, 4096) and a
pid column wide enough for the product: pids go up to pid_max (4194304 on
64-bit), a CPU outside every node has node -1, and a pid column decoded from
``PERF_SAMPLE_TID`` is 32-bit, where ``4194307 * 4096`` wraps around.
"""

from __future__ import annotations

import numpy as np
import pytest

from pmuscope.numa.attribution import Attribution
from pmuscope.numa.model import Node, TaskStat
from pmuscope.numa.snapshot import ProcState, build_snapshot

BIG = (1 << 22) + 3  # above 2^22: pid * 4096 needs 35 bits
COLUMNS = ("time_ns", "clk:0", "ir:1", "rma:2", "lma:3")
#: node 0 has cpu 0, node 5 has cpu 1 (sparse node ids), cpu 7 is in no node
NODES = [Node(0, (0,), {0: 10, 5: 21}, {"MemTotal": 1 << 20, "MemFree": 1 << 19}),
         Node(5, (1,), {0: 21, 5: 10}, {"MemTotal": 1 << 20, "MemFree": 1 << 19})]


def _task(pid: int, tid: int, runtime_ns: int, nthreads: int = 1) -> TaskStat:
    return TaskStat(pid, tid, "big", runtime_ns, 0, 0, 0, None, nthreads)


def _states() -> tuple[ProcState, ProcState]:
    before = ProcState(0, {BIG: _task(BIG, BIG, 0, 2), BIG - 1: _task(BIG - 1, BIG - 1, 0)},
                       {(BIG, BIG): _task(BIG, BIG, 0), (BIG, BIG + 1): _task(BIG, BIG + 1, 0),
                        (BIG - 1, BIG - 1): _task(BIG - 1, BIG - 1, 0)}, {})
    after = ProcState(1_000_000_000, {BIG: _task(BIG, BIG, 700_000_000, 2), BIG - 1: _task(BIG - 1, BIG - 1, 50_000_000)},
                      {(BIG, BIG): _task(BIG, BIG, 400_000_000), (BIG, BIG + 1): _task(BIG, BIG + 1, 300_000_000),
                       (BIG - 1, BIG - 1): _task(BIG - 1, BIG - 1, 50_000_000)}, {})
    return before, after


def _attribution(dtype) -> Attribution:
    # rows: (pid, tid, cpu) -> time, clk, ir, rma, lma
    rows = [
        (BIG, BIG, 0, 100e6, 1000, 500, 10, 90),        # node 0
        (BIG, BIG, 1, 300e6, 6000, 2000, 70, 30),       # node 5
        (BIG, BIG + 1, 1, 200e6, 4000, 1000, 40, 60),   # node 5
        (BIG, BIG + 1, 7, 100e6, 9000, 9000, 9, 9),     # cpu 7: no node
        (BIG - 1, BIG - 1, 7, 50e6, 5000, 5000, 5, 5),  # cpu 7: no node
        (-1, -1, 1, 25e6, 800, 800, 8, 8),              # unattributed gap on node 5
    ]
    a = np.array(rows)
    return Attribution(COLUMNS, a[:, 0].astype(dtype), a[:, 1].astype(dtype), a[:, 2].astype(dtype),
                       a[:, 3:].astype(np.float64), intervals_ns={0: 1e9, 1: 1e9, 7: 1e9})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_big_pid_on_a_high_node_keeps_its_own_cells(dtype):
    before, after = _states()
    snap = build_snapshot(NODES, before, after, attribution=_attribution(dtype), platform="skx")
    p = snap.process(BIG)
    n0, n5 = p["by_node"]
    assert (n0["node"], n0["clk"], n0["rma"], n0["lma"]) == (0, 1000, 10, 90)
    assert (n5["node"], n5["clk"], n5["ir"], n5["rma"], n5["lma"]) == (5, 10000, 3000, 110, 90)
    assert n5["cpu_pct"] == pytest.approx(50.0)
    # the whole process also holds what it ran on cpu 7 (no node)
    assert (p["clk"], p["rma"]) == (1000 + 10000 + 9000, 10 + 110 + 9)

    t0, t1 = snap.thread(BIG, BIG), snap.thread(BIG, BIG + 1)
    assert (t0["clk"], t1["clk"]) == (7000, 13000)
    assert [(c["node"], c["clk"]) for c in t0["by_node"]] == [(0, 1000), (5, 6000)]
    assert [(c["node"], c["clk"]) for c in t1["by_node"]] == [(0, 0), (5, 4000)]

    # the neighbour pid ran only on cpu 7: nothing of BIG's (or of the gap) lands in its node cells
    q = snap.process(BIG - 1)
    assert q["clk"] == 5000
    assert [(c["clk"], c["rma"]) for c in q["by_node"]] == [(0, 0), (0, 0)]
    # node totals: every row on the node, the unattributed gap included
    assert (snap.node(5)["clk"], snap.node(0)["clk"]) == (10000 + 800, 1000)


def test_by_rows_tells_apart_what_a_packed_key_merges():
    # pid*4096+node: (P, -1) and (P-1, 4095) are both P*4096-1
    a = Attribution(("time_ns",), np.array([BIG, BIG - 1]), np.array([BIG, BIG - 1]), np.array([0, 0]),
                    np.array([[1.0], [2.0]]))
    sums = a.by_rows(a.pid, np.array([-1, 4095]))
    assert {k: float(v[0]) for k, v in sums.items()} == {(BIG, -1): 1.0, (BIG - 1, 4095): 2.0}
    assert a.by_rows(a.pid[:0], a.pid[:0]) == {}
