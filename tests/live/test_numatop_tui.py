"""The numatop terminal UI on this machine, driven with textual's Pilot: a
CPU-bound process appears in the process list, the node views show node 0,
and a screenshot (SVG) of the real screen can be saved."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from pmuscope.tui.numatop_app import NumatopApp  # noqa: E402


def test_live_screen(tmp_path):
    # it outlives the UI however loaded the machine is (killed at the end): a workload that ends while the
    # UI is still starting leaves no row to select
    busy = subprocess.Popen([sys.executable, "-m", "pmuscope.workloads", "busy", "120"])
    try:
        time.sleep(0.3)
        app = NumatopApp(delay=0.5)
        screens = {}

        async def go():
            async with app.run_test(size=(150, 45)) as pilot:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    await pilot.pause(0.1)
                    if app.refreshes >= 2 and f"{busy.pid} " in app.screen_text():
                        break
                assert f"{busy.pid} " in app.screen_text(), "the busy process never appeared in the list"
                screens["home"] = app.screen_text()
                app.save_screenshot("home.svg", str(tmp_path))
                await pilot.press("n")
                await pilot.pause(0.1)
                screens["nodes"] = app.screen_text()
                await pilot.press("h")
                await pilot.pause(0.1)
                table = app.query_one("#table")
                table.move_cursor(row=table.get_row_index(f"p{busy.pid}"))
                await pilot.press("c")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and (app.chains is None or app.chains.pid != busy.pid):
                    await pilot.pause(0.1)
                await pilot.pause(0.1)
                screens["chains"] = app.screen_text()
        asyncio.run(go())
    finally:
        busy.kill()
        busy.wait()
    home = screens["home"]
    assert app.error is None
    assert "keys: 1-5 sort" in home
    row = next(line.split() for line in home.splitlines() if line.startswith(f"{busy.pid} "))
    assert float(row[-1]) > 1.0  # its CPU%
    nodes = screens["nodes"]
    assert "Node overview" in nodes
    assert any(line.split()[:1] == ["0"] for line in nodes.splitlines())
    chains = screens["chains"]
    assert f"Call chains of process {busy.pid}" in chains
    assert app.chains is not None and app.chains.pid == busy.pid
    if app.chains.reason is None:
        assert " <- " in chains and "samples)" in chains
    else:
        assert app.chains.reason in chains  # e.g. no hardware PMU: says why
    svg = (tmp_path / "home.svg").read_text()
    assert svg.startswith("<svg") and "PROC" in svg


def test_cli_tui_exits_after_run_time(tmp_path):
    import shutil

    if shutil.which("script") is None:
        pytest.skip("util-linux 'script' (a pseudo-terminal for the UI) is not installed")
    log = tmp_path / "tty.log"
    t0 = time.monotonic()
    out = subprocess.run(["script", "-qec", f"{sys.executable} -m pmuscope numatop -t 1.5 -d 0.5", str(log)],
                         capture_output=True, timeout=60)
    assert out.returncode == 0
    assert 1.5 <= time.monotonic() - t0 < 30
    screen = log.read_bytes().decode("utf-8", "replace")
    assert "Monitoring the load" in screen and "Q quit" in screen
