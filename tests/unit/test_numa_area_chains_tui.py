"""numatop's WIN10 in the terminal UI, driven with textual's Pilot: memory
areas view -> select an area -> C -> "Call chains to area ADDR (DESC)" with
the chains of its slow loads, symbolized from a real binary (compiled by the
test) that the fixture /proc/PID/maps maps."""

from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from pmuscope.memory.samples import MemSamples  # noqa: E402
from pmuscope.numa.latency import memory_area_view  # noqa: E402
from pmuscope.numa.model import read_maps  # noqa: E402
from pmuscope.tui.numatop_app import NumatopApp  # noqa: E402
from tests.unit.test_numa_area_chains import HEAP, PID, _fixture, _samples, bins, demo  # noqa: E402,F401
from tests.unit.test_numa_tui import FakeSampler, _rows, two_node  # noqa: E402,F401

APP_PID = 100  # the process the two-node snapshot puts first (mgen, 90% CPU)


@pytest.fixture
def app_root(demo, tmp_path):  # noqa: F811
    """A root whose proc/100 has the demo binary's and the heap's maps."""
    procfs, _ = demo
    (tmp_path / "proc" / str(APP_PID)).mkdir(parents=True)
    shutil.copy(f"{procfs}/{PID}/maps", tmp_path / "proc" / str(APP_PID) / "maps")
    (tmp_path / "proc" / str(APP_PID) / "numa_maps").write_text("")
    return str(tmp_path)


def _latency_fn(root, ms):
    def fn(pid, tid=None):
        return memory_area_view(ms, read_maps(root, pid), pid, tid=tid, ns_per_cycle=0.5,
                                node_of=lambda a: np.zeros(len(a), np.int32), name=ms.source)
    return fn


def _drive(two_node, root, ms, select_key):  # noqa: F811
    app = NumatopApp(delay=0.05, sampler_factory=lambda: FakeSampler(two_node), root=root,
                     latency_fn=_latency_fn(root, ms), callchain_fn=lambda pid, metric, tid=None: None)

    async def go():
        async with app.run_test(size=(160, 40)) as pilot:
            while not app.refreshes:
                await pilot.pause(0.02)
            await pilot.press("m")
            for _ in range(200):
                if app.latency_pid == APP_PID:
                    break
                await pilot.pause(0.02)
            await pilot.pause(0.05)
            for _ in range(20):
                if app._selected_key() == select_key:
                    break
                await pilot.press("down")
            maps = app.screen_text()
            await pilot.press("c")
            for _ in range(200):
                if app.area_chains is not None:
                    break
                await pilot.pause(0.02)
            await pilot.pause(0.05)
            chains = app.screen_text()
            await pilot.press("b")
            await pilot.pause(0.05)
            return maps, chains, app.view_name
    return app, asyncio.run(go())


def test_c_on_a_memory_area_shows_the_call_chains_of_its_slow_loads(two_node, demo, app_root):  # noqa: F811
    _, addr = demo
    chains, rows = _fixture(addr)
    ms = _samples(addr, chains, [(APP_PID if p == PID else p, *rest) for p, *rest in rows])
    app, (maps, screen, back) = _drive(two_node, app_root, ms, f"a{HEAP.start:x}")
    assert "Memory areas of process 100" in maps and "C call chains to the selected area" in maps
    # 6 of pid 100's memory samples fall in the heap (the 7th is one past its end): ACCESS% 100 there
    heap_row = next(r for r in _rows(maps) if r and r[0] == f"{HEAP.start:x}")
    assert heap_row[3] == "100.0" and heap_row[-1] == "[heap]"
    assert f"Call chains to area {HEAP.start:x} ([heap])" in screen
    assert "5 loads above 128 cycles (2 at or below it left out)" in screen
    lines = _rows(screen)
    assert ["3", "alpha", "<-", "beta", "<-", "main"] in lines
    assert ["1", "local_helper", "<-", "alpha", "<-", "beta", "<-", "main"] in lines
    assert not any("weak_gamma" in line for line in screen.splitlines())  # only 128- and 20-cycle loads there
    assert back == "maps"


def test_spe_area_shows_top_pcs_labelled(two_node, demo, app_root):  # noqa: F811
    _, addr = demo
    H = HEAP.start
    ms = MemSamples.from_columns(3, pid=[APP_PID] * 3, tid=[APP_PID] * 3, addr=[H + 8, H + 16, H + 24],
                                 weight=[400, 300, 50], data_src=[0x02] * 3,
                                 ip=[addr["beta"], addr["beta"] + 1, addr["alpha"]], source="SPE")
    _, (_, screen, _) = _drive(two_node, app_root, ms, f"a{H:x}")
    assert f"Top PCs (no call chains) of loads to area {H:x} ([heap])" in screen
    assert "SPE records carry no call chain" in screen
    assert ["2", "beta"] in _rows(screen) and not any(r[:2] == ["1", "alpha"] for r in _rows(screen))
