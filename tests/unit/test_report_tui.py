"""The interactive report browser driven with textual's Pilot on a real
perf recording with call chains (tests/data/perfdata/perf-g-small.data):
rows, call-graph expansion, zooms, search, sort keys, back."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from pmuscope.profile import build_report, load_profile  # noqa: E402
from pmuscope.profile.callchain import CallGraphParams  # noqa: E402
from pmuscope.tui.report_app import ReportApp  # noqa: E402
from tests.conftest import DATA  # noqa: E402

FILE = DATA / "perfdata" / "perf-g-small.data"


def _drive(steps, **kw):
    prof = load_profile(str(FILE), kernel_symbols=False)
    app = ReportApp(prof, call_graph=CallGraphParams(), **kw)
    screens = []

    async def go():
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.05)
            screens.append(("start", app.screen_text()))
            for keys in steps:
                await pilot.press(*keys)
                await pilot.pause(0.05)
                screens.append((keys, app.screen_text()))
    asyncio.run(go())
    return app, prof, screens


def _row_lines(text):
    """The top-level rows (call-graph lines are indented), without their mark
    (+ collapsed, - expanded, · no call graph)."""
    return [ln[2:] for ln in text.splitlines() if ln[:2] in ("+ ", "- ", "· ")]


def test_rows_match_the_text_report():
    app, prof, screens = _drive([])
    start = screens[0][1]
    assert "Samples: 265  of event 'cpu-clock'" in start  # perf's unit character, a space
    assert "keys: Enter expand" in start and "q quit" in start
    rep = build_report(prof, ("comm", "dso", "sym"), children=True)
    first = _row_lines(start)[0].split()
    top = rep.rows[0]
    assert first[0] == f"{top.children:.2f}%" and first[1] == f"{top.overhead:.2f}%"
    assert first[-1] == top.keys["sym"]
    assert app.rows_shown == len(rep.rows)


def test_expand_zoom_search_sort_back():
    app, prof, screens = _drive([("enter",), ("t",), ("t",), ("d",), ("b",), ("s",), ("slash", "F", "r", "e", "e",
                                 "enter"), ("escape",), ("k",), ("k",), ("q",)])
    shot = [v for _, v in screens]  # shot[0]: the start; shot[n]: after the n-th step
    expanded = shot[1].splitlines()
    i = next(n for n, ln in enumerate(expanded) if ln.startswith("- "))
    assert expanded[i + 1].startswith("    ") and "%" in expanded[i + 1]  # its call graph, one level down
    assert "zoom: Thread python3" in shot[2]
    assert "zoom:" not in shot[3]  # t again leaves the zoom
    assert "zoom: DSO libpython3.11.so.1.0" in shot[4]
    # (callers of those samples keep their own rows in the Children column, with no self time)
    assert all("libpython3.11.so.1.0" in ln for ln in _row_lines(shot[4]) if ln.split()[1] != "0.00%")
    assert "zoom:" not in shot[5]
    assert "zoom: Symbol _PyObject_Free" in shot[6]
    rows = _row_lines(shot[6])
    assert len(rows) >= 1 and rows[0].split()[1] == "100.00%"
    found = shot[7]
    assert "search: 'Free'" in found
    assert all("free" in ln.lower() for ln in _row_lines(found))
    assert "search:" not in shot[8]
    assert "sort dso,sym" in shot[9] and "Shared Object" in shot[9] and "Command" not in shot[9].splitlines()[3]
    assert "sort sym" in shot[10]


def test_zoom_needs_the_column():
    app, prof, screens = _drive([("k", "k"), ("t",)], sort=("comm", "dso", "sym"))
    assert "no comm column in this sort" in screens[-1][1]


def test_call_graph_levels_expand_one_by_one():
    app, prof, screens = _drive([("enter",), ("down", "enter")], sort=("sym",))
    one, two = screens[1][1].splitlines(), screens[2][1].splitlines()
    depth1 = [ln for ln in one if ln.startswith("    ") and not ln.startswith("        ")]
    assert depth1, screens[1][1][:1500]
    if depth1[0].lstrip()[:2] == "+ ":  # that caller has callers of its own: they appear under it
        assert any(ln.startswith("        ") for ln in two)
    assert len(two) >= len(one)
