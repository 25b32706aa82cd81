"""numatop's WIN5 in the terminal UI, driven with textual's Pilot on the
recorded two-node machine: process -> thread list -> Enter on a thread shows
the thread's per-node table (values from test_numa_thread.EXPECTED) and the
keys of the view; L and C there are about that thread."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from tests.unit.test_numa import NUMA  # noqa: E402
from tests.unit.test_numa_thread import nodes, two_node  # noqa: E402,F401  (module fixtures)

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")


def _drive(snap, steps, calls):
    from pmuscope.numa.callchains import CallChains
    from pmuscope.tui.numatop_app import NumatopApp
    from tests.unit.test_numa_tui import FakeSampler, _fake_latency

    def chains(pid, metric, tid=None):
        calls.append(("chains", pid, metric, tid))
        return CallChains(pid, metric, "cycles", 4, [(4, ["main", f"worker{tid}"])], tid=tid)

    def latency(pid, tid=None):
        calls.append(("latency", pid, tid))
        return _fake_latency(pid)

    app = NumatopApp(delay=0.05, sampler_factory=lambda: FakeSampler(snap), root=str(NUMA / "two-node" / "t1"),
                     callchain_fn=chains, latency_fn=latency)
    screens = []

    async def go():
        async with app.run_test(size=(140, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.02)
                if app.refreshes:
                    break
            for keys in steps:
                await pilot.press(*keys)
                for _ in range(200):
                    await pilot.pause(0.02)
                    if app.view_name == "maps" and (app.latency_pid, app.latency_tid) != (app.pid, app.scope_tid):
                        continue
                    if app.view_name == "callchain" and (app.chains is None or app.chains.tid != app.scope_tid):
                        continue
                    break
                screens.append((keys, app.view_name, app.screen_text()))
    asyncio.run(go())
    return app, screens


def _rows(text):
    return [line.split() for line in text.splitlines()]


def test_enter_on_a_thread_opens_its_node_breakdown(two_node):
    calls = []
    app, screens = _drive(two_node, [("enter",), ("t",), ("down",), ("enter",), ("l",), ("b",), ("c",), ("b",),
                                     ("b",), ("enter",)], calls)
    views = [v for _, v, _ in screens]
    assert views == ["process", "threads", "threads", "thread", "maps", "thread", "callchain", "thread", "threads",
                     "thread"]
    win5 = screens[3][2]
    assert "Thread 101 of process 100: per-node breakdown" in win5
    assert "keys here: L memory areas (latency) of this thread  C call chains of this thread" in win5
    # NODE CPU% RMA(K) LMA(K) RMA/LMA CPI, from EXPECTED[(100, 101)]
    assert ["NODE", "CPU%", "RMA(K)", "LMA(K)", "RMA/LMA", "CPI"] in _rows(win5)
    assert ["0", "25.0", "0.2", "0.8", "0.25", "1.20"] in _rows(win5)
    assert ["1", "5.0", "0.3", "0.1", "3.00", "1.50"] in _rows(win5)
    # L and C are about the thread, and say so
    maps = screens[4][2]
    assert "Memory areas of thread 101 of process 100" in maps and "/usr/bin/mgen" in maps
    chains = screens[6][2]
    assert "Call chains of thread 101 of process 100" in chains and "worker101 <- main" in chains
    assert ("latency", 100, 101) in calls and ("chains", 100, "clk", 101) in calls
    # back on the thread list the cursor is still on 101, so Enter opens 101 again
    assert "Thread 101 of process 100" in screens[9][2]


def test_main_thread_and_process_scope_after_leaving_win5(two_node):
    calls = []
    app, screens = _drive(two_node, [("enter",), ("t",), ("enter",), ("h",), ("c",)], calls)
    win5 = screens[2][2]
    assert "Thread 100 of process 100" in win5
    assert ["0", "40.0", "1.0", "4.0", "0.25", "1.20"] in _rows(win5)
    assert ["1", "20.0", "0.6", "0.2", "3.00", "2.00"] in _rows(win5)
    # C from the process list is about the whole process again
    assert "Call chains of process 100" in screens[4][2]
    assert calls[-1] == ("chains", 100, "clk", None)
