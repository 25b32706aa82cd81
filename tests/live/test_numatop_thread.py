"""numatop's one-thread view (WIN5) on this machine: a process whose CPU-bound
work runs in a second thread (tid != pid) shows that thread in
``numatop --once --json --threads`` with its per-node breakdown, and the
terminal UI opens the thread's node table from the thread list."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

WORKER = """
import threading, time
def spin():
    end = time.monotonic() + 120  # killed when the test ends; outlives a slow UI on a loaded machine
    while time.monotonic() < end:
        pass
t = threading.Thread(target=spin)
t.start()
t.join()
"""


@pytest.fixture
def spinner():
    proc = subprocess.Popen([sys.executable, "-c", WORKER])
    try:
        deadline = time.monotonic() + 5
        tids = []
        while time.monotonic() < deadline:
            tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
            if tids:
                break
            time.sleep(0.02)
        assert tids, "the worker thread did not start"
        yield proc.pid, tids[0]
    finally:
        proc.kill()
        proc.wait()


def test_threads_json_has_per_node_breakdown(spinner):
    pid, tid = spinner
    out = subprocess.run([sys.executable, "-m", "pmuscope", "numatop", "--once", "--json", "--threads", "-d", "1",
                          "--top", "50"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    row = next(t for t in d["threads"] if (t["pid"], t["tid"]) == (pid, tid))
    main = next(t for t in d["threads"] if (t["pid"], t["tid"]) == (pid, pid))
    assert row["cpu_pct"] > 20 and main["cpu_pct"] < 5  # the spinner, not the thread joining it (loaded CI too)
    for key in ("pid", "tid", "comm", "cpu_pct", "rma", "lma", "rma_lma", "cpi", "migrations"):
        assert key in row
    node_ids = [n["node"] for n in d["nodes"]]
    assert [c["node"] for c in row["by_node"]] == node_ids
    if "cpu_pct_by_node" in d["unavailable"]:
        assert all(c["cpu_pct"] is None for c in row["by_node"])  # refused here: null, reason listed
        return
    on_nodes = sum(c["cpu_pct"] for c in row["by_node"])
    # the side-band's time on the nodes' CPUs is this thread's (not its sibling's, not
    # doubled): at most one CPU's worth, and of the order of schedstat's figure (the two
    # intervals differ by a few ms, more on a loaded machine)
    assert 0.5 * row["cpu_pct"] <= on_nodes <= 110
    assert sum(c["cpu_pct"] for c in main["by_node"]) < 5
    for col in ("cpi", "rma", "lma"):
        if col in d["unavailable"]:
            assert all(c[col] is None for c in row["by_node"]), col
    if "cpi" not in d["unavailable"]:
        busiest = max(row["by_node"], key=lambda c: c["cpu_pct"])
        assert busiest["cpi"] is not None and busiest["cpi"] > 0


def test_threads_csv_rows_name_the_spinning_thread(spinner):
    import csv
    import io

    from pmuscope.cli.numatop_cmd import CSV_COLUMNS

    pid, tid = spinner
    out = subprocess.run([sys.executable, "-m", "pmuscope", "numatop", "--once", "--csv", "--threads", "-d", "1",
                          "--top", "50"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    body = [line for line in out.stdout.splitlines() if not line.startswith("#")]
    assert body[0].split(",") == [*CSV_COLUMNS, "tid"]  # the old columns where they were, tid last
    rows = list(csv.DictReader(io.StringIO("\n".join(body))))
    procs = {int(r["pid"]) for r in rows if r["table"] == "process"}
    threads = {(int(r["pid"]), int(r["tid"])): r for r in rows if r["table"] == "thread"}
    assert pid in procs and {p for p, _ in threads} <= procs  # threads of the shown processes only
    row = threads[(pid, tid)]
    assert float(row["cpu_pct"]) > 20 and float(threads[(pid, pid)]["cpu_pct"]) < 5
    assert row["node"] == "" and row["mem_kb"] == ""


def test_tui_opens_the_thread_from_the_thread_list(spinner):
    pytest.importorskip("textual", reason="the tui extra (textual) is not installed")
    from pmuscope.tui.numatop_app import NumatopApp

    pid, tid = spinner
    app = NumatopApp(delay=0.5)
    screens = {}

    async def go():
        async with app.run_test(size=(150, 45)) as pilot:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                await pilot.pause(0.1)
                if app.refreshes >= 2 and f"{pid} " in app.screen_text():
                    break
            assert f"{pid} " in app.screen_text(), "the spinning process never appeared in the list"
            table = app.query_one("#table")
            table.move_cursor(row=table.get_row_index(f"p{pid}"))
            await pilot.press("t")
            await pilot.pause(0.1)
            table.move_cursor(row=table.get_row_index(f"t{tid}"))
            await pilot.press("enter")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                await pilot.pause(0.1)
                lines = [line.split() for line in app.screen_text().splitlines()]
                # node 0's row with the spinning thread's CPU% measured over a whole interval (the
                # first one after the view opens covers part of it; the notes above the table start
                # with "n/a" on a machine without a PMU: they say which columns it cannot fill)
                if app.refreshes >= 4 and any(r[:1] == ["0"] and _number(r[1:2]) > 10 for r in lines):
                    break
            screens["thread"] = app.screen_text()
    asyncio.run(go())
    text = screens["thread"]
    assert app.error is None and app.view_name == "thread"
    assert f"Thread {tid} of process {pid}: per-node breakdown" in text
    assert "keys here: L memory areas (latency) of this thread  C call chains of this thread" in text
    rows = [line.split() for line in text.splitlines()]
    node0 = next(r for r in rows if r[:1] == ["0"])
    assert len(node0) == 6  # NODE CPU% RMA(K) LMA(K) RMA/LMA CPI
    if node0[1] != "n/a":
        assert float(node0[1]) > 10  # the spinning thread's CPU% on node 0 (a loaded machine too)


def _number(cells: list[str]) -> float:
    """The first cell as a number (-1: none, or "n/a")."""
    try:
        return float(cells[0])
    except (IndexError, ValueError):
        return -1.0
