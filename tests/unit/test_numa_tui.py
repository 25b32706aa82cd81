"""The numatop terminal UI driven for real with textual's Pilot, on the
recorded two-node machine (tests/data/numa): what each view shows on screen,
keys included, for values computed by hand in test_numa.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from pmuscope.tui.numatop_app import NumatopApp  # noqa: E402
from tests.unit.test_numa import NUMA  # noqa: E402


class _Platform:
    name = "skx"


class FakeSampler:
    """Hands the app the recorded snapshot, as NumaSampler.refresh would."""

    def __init__(self, snap):
        self.snap = snap
        self.platform = _Platform()
        self.closed = False

    def refresh(self, memory_pids=None):
        return self.snap

    def close(self):
        self.closed = True


def _drive(snap, keys_and_checks, size=(140, 40), **kw):
    kw.setdefault("callchain_fn", _fake_chains)
    kw.setdefault("latency_fn", _fake_latency)
    sampler = FakeSampler(snap)
    app = NumatopApp(delay=0.05, sampler_factory=lambda: sampler, root=str(NUMA / "two-node" / "t1"), **kw)
    screens = []

    async def go():
        async with app.run_test(size=size) as pilot:
            for _ in range(100):
                await pilot.pause(0.02)
                if app.refreshes:
                    break
            screens.append(("start", app.screen_text()))
            for keys in keys_and_checks:
                await pilot.press(*keys)
                await pilot.pause(0.05)
                for _ in range(100):  # the workers behind the memory-area and call-chain views
                    if app.view_name == "maps" and app.latency_pid != app.pid:
                        await pilot.pause(0.02)
                    elif app.view_name == "callchain" and (app.chains is None or app.chains.metric != app.chain_metric):
                        await pilot.pause(0.02)
                    else:
                        break
                await pilot.pause(0.02)
                screens.append((keys, app.screen_text()))
    asyncio.run(go())
    return app, sampler, screens


def _rows(text):
    return [line.split() for line in text.splitlines()]


def test_views_show_the_recorded_values(two_node):
    app, sampler, screens = _drive(two_node, [("4",), ("5",), ("i",), ("h", "enter"), ("b", "t"), ("n",), ("enter",), ("m",), ("q",)])
    home = dict(screens)["start"]
    assert "keys: 1-5 sort" in home and "Q quit" in home
    assert "n/a imc_mb_s: no uncore_imc_N PMU in this fixture" in home
    rows = _rows(home)
    # PID PROC RMA(K) LMA(K) RMA/LMA CPI *CPU%: mgen first by CPU% (90.0), db second (25.0)
    assert ["100", "mgen", "2.1", "5.1", "0.41", "1.34", "90.0"] in rows
    assert ["200", "db", "0.5", "0.5", "1.00", "1.50", "25.0"] in rows
    assert home.index("mgen") < home.index("db ")
    by_cpi = dict(screens)[("4",)]
    assert by_cpi.index(" db ") < by_cpi.index("mgen")  # CPI 1.50 > 1.34
    normalized = dict(screens)[("i",)]
    assert "RPI(K)" in normalized and ["100", "mgen", "1.1053", "2.6842", "1.34", "90.0"] in _rows(normalized)
    process = dict(screens)[("h", "enter")]
    assert "Process 100: per-node breakdown" in process
    # NODE CPU% RMA(K) LMA(K) RMA/LMA CPI MEM(MB) (numa_maps: 260 KiB on node 0, 20640 KiB on node 1)
    assert ["0", "65.0", "1.2", "4.8", "0.25", "1.20", "0.3"] in _rows(process)
    assert ["1", "25.0", "0.9", "0.3", "3.00", "1.88", "20.2"] in _rows(process)
    threads = dict(screens)[("b", "t")]
    assert "Threads of process 100" in threads
    assert ["100", "mgen", "1.6", "4.2", "0.38", "1.38", "60.0"] in _rows(threads)
    assert ["101", "mgen", "0.5", "0.9", "0.56", "1.25", "30.0"] in _rows(threads)
    nodes = dict(screens)[("n",)]
    assert "Node overview" in nodes
    assert ["0", "187.5", "181.2", "1.7", "5.3", "0.32", "1.29", "1.8"] in _rows(nodes)
    detail = dict(screens)[("enter",)]
    assert "Node 0 detail" in detail and ["CPU", "0-19,40-59"] in _rows(detail)
    assert ["IMC", "bandwidth", "(MB/s)", "n/a"] in _rows(detail)
    maps = dict(screens)[("m",)]
    assert "Memory areas of process 100" in maps and "/usr/bin/mgen" in maps
    # ADDR SIZE(K) PERMS ACCESS% LAT(ns) N0(K) N1(K) DESC, placement joined from numa_maps by start address
    # ACCESS% and LAT(ns) from (fake) load samples: 3 of 4 in the text, mean 200 cycles x 0.5 ns
    assert ["400000", "4", "r-xp", "75.0", "100", "20", "0", "/usr/bin/mgen"] in _rows(maps)
    assert ["7f0000000000", "400", "rw-p", "25.0", "500", "240", "160", "[anon]"] in _rows(maps)
    assert "by node of the page: node0 75.0% 100ns  node1 25.0% 500ns" in maps
    assert sampler.closed  # q quits and closes the events


def test_node_filter_and_memory_sort(two_node):
    _, _, screens = _drive(two_node, [], node=1)
    home = dict(screens)["start"]
    assert "node filter 1" in home
    pids = [r[0] for r in _rows(home) if r and r[0].isdigit()]
    assert pids == ["100"]  # only mgen ran on node 1's CPUs
    _, _, screens = _drive(two_node, [], sort="mem_kb")
    pids = [r[0] for r in _rows(dict(screens)["start"]) if r and r[0].isdigit()]
    assert pids == ["200", "100"]  # db holds a 1 GiB page


def _fake_latency(pid):
    from pmuscope.numa.latency import area_stats
    from pmuscope.numa.model import read_maps

    areas = read_maps(str(NUMA / "two-node" / "t1"), pid)
    addr = np.array([0x400010, 0x400020, 0x400ff8, 0x7F0000000100], dtype=np.uint64)
    weight = np.array([100, 200, 300, 1000], dtype=np.float64)
    return {"areas": area_stats(areas, addr, weight, 0.5), "nodes": {0: {"access_pct": 75.0, "lat_ns": 100.0},
            1: {"access_pct": 25.0, "lat_ns": 500.0}}, "samples": 4, "reason": None}


def _fake_chains(pid, metric):
    from pmuscope.numa.callchains import CallChains

    if metric == "rma":
        return CallChains(pid, metric, None, reason="no rma event in this fixture")
    return CallChains(pid, metric, "cycles", 10, [(7, ["main", "work", "leaf"]), (3, ["main", "other"])])


def test_call_chain_view(two_node):
    app, _, screens = _drive(two_node, [("c",), ("1",)])
    chains = dict(screens)[("c",)]
    assert "Call chains of process 100" in chains and "1 RMA  2 LMA  3 CLK  4 IR" in chains
    assert "7      leaf <- work <- main" in chains and "3      other <- main" in chains
    assert "cycles, 10 samples" in chains
    rma = dict(screens)[("1",)]
    assert "no rma event in this fixture" in rma
    assert app.sort == "cpu_pct"  # 1-4 pick the event here, they do not re-sort the process list


def test_failure_to_open_is_shown_not_raised(two_node):
    def broken():
        from pmuscope.errors import PermissionDeniedError

        raise PermissionDeniedError("perf_event_open: CPU-wide events need CAP_PERFMON (perf_event_paranoid 2)")

    app = NumatopApp(delay=0.05, sampler_factory=broken)

    async def go():
        async with app.run_test(size=(120, 20)) as pilot:
            await pilot.pause(0.2)
            return app.screen_text()
    text = asyncio.run(go())
    assert "cannot observe" in text and "CAP_PERFMON" in text
    assert app.error is not None


@pytest.fixture(scope="module")
def two_node():
    from tests.unit.test_numa import _recorded_attribution
    from tests.unit.test_system import unpacked
    from pmuscope.numa.model import read_nodes
    from pmuscope.numa.snapshot import build_snapshot, read_proc_state

    nodes = read_nodes(str(unpacked("intel-clx-2s-2node")))
    before = read_proc_state(str(NUMA / "two-node" / "t0"), threads=True)
    after = read_proc_state(str(NUMA / "two-node" / "t1"), threads=True)
    return build_snapshot(nodes, before, after, attribution=_recorded_attribution(),
                          unavailable={"imc_mb": "no uncore_imc_N PMU in this fixture", "upi_mb": "no uncore_upi_N PMU in this fixture"})


def test_cursor_stays_on_the_process_across_refreshes_and_views(two_node):
    sampler = FakeSampler(two_node)
    app = NumatopApp(delay=0.05, sampler_factory=lambda: sampler, root=str(NUMA / "two-node" / "t1"),
                     callchain_fn=_fake_chains, latency_fn=_fake_latency)

    async def go():
        async with app.run_test(size=(140, 40)) as pilot:
            while not app.refreshes:
                await pilot.pause(0.02)
            await pilot.press("down")  # db (pid 200)
            seen = app.refreshes
            while app.refreshes < seen + 3:
                await pilot.pause(0.02)
            after_refresh = app._selected_key()
            await pilot.press("m")
            await pilot.pause(0.05)
            title = app.view_title()
            await pilot.press("b")
            await pilot.pause(0.05)
            return after_refresh, title, app._selected_key()
    after_refresh, title, back = asyncio.run(go())
    assert after_refresh == "p200"
    assert title == "Memory areas of process 200"
    assert back == "p200"
