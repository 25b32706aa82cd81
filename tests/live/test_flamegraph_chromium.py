"""The HTML flame graph in a real headless Chromium: loads without console
errors, a click zooms, search highlights and counts, the flame/icicle toggle
works, and a screenshot is taken; the first 1280x800 screen of a page with a
128-deep tower of 2 samples (and of `pmuscope profile`'s demo page) shows the
5 widest frames of the profile without scrolling."""

import os

import pytest

from pmuscope.profile.flamegraph import write_html

from ..chromium import Browser
from ..first_screen import (DEEP_FOLDED, COMM, check_first_screen, deep_tower_profile, demo_profile,
                            frames_in_viewport, set_viewport)

FOLDED = {
    "main;parse;tokenize": 300,
    "main;parse;build_tree": 200,
    "main;solve;kernel_loop": 400,
    "main;solve;memcpy_[k]": 50,
    "main;write": 50,
}


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()


def frame_box(browser, name):
    return browser.js(
        f"""(() => {{ const el = [...document.querySelectorAll('.f')].find(e => e.dataset.name === {name!r} && e.style.display !== 'none');
            if (!el) return null; const r = el.getBoundingClientRect();
            return {{x: r.x, y: r.y, w: r.width, h: r.height}}; }})()"""
    )


def test_flamegraph_in_chromium(browser, tmp_path):
    page = write_html(FOLDED, str(tmp_path / "flame.html"), title="test profile")
    browser.open(page)
    assert browser.errors() == []
    chart_w = browser.js("document.getElementById('chart').clientWidth")
    root = frame_box(browser, "all")
    parse = frame_box(browser, "parse")
    solve = frame_box(browser, "solve")
    assert root and parse and solve
    assert root["w"] == pytest.approx(chart_w, abs=2)
    # widths are proportional to samples: parse 500/1000, solve 450/1000
    assert parse["w"] == pytest.approx(chart_w * 0.5, abs=2)
    assert solve["w"] == pytest.approx(chart_w * 0.45, abs=2)
    # icicle mode (the default): children are drawn below their parent
    assert parse["y"] > root["y"]
    browser.screenshot(str(tmp_path / "before.png"))

    # a real mouse click on "parse" zooms into it
    browser.click(parse["x"] + parse["w"] / 2, parse["y"] + parse["h"] / 2)
    assert browser.js("document.body.dataset.zoom") == "parse"
    zoomed = frame_box(browser, "parse")
    assert zoomed["w"] == pytest.approx(chart_w, abs=2)
    tok = frame_box(browser, "tokenize")
    assert tok["w"] == pytest.approx(chart_w * 300 / 500, abs=2)
    assert frame_box(browser, "solve") is None  # outside the zoomed subtree
    assert "dim" in browser.js("[...document.querySelectorAll('.f')].find(e => e.dataset.name === 'main').className")

    # reset, search, toggle
    browser.js("document.getElementById('reset').click()")
    assert browser.js("document.body.dataset.zoom") == "all"
    browser.js("document.getElementById('search').focus()")
    browser.type_text("kernel_loop|write")
    assert browser.js("document.getElementById('matched').textContent") == "Matched: 45.00%"
    assert browser.js("document.querySelectorAll('.f.hit').length") == 2
    browser.js("document.getElementById('toggle').click()")
    assert browser.js("document.body.dataset.mode") == "flame"
    assert frame_box(browser, "parse")["y"] < frame_box(browser, "all")["y"]
    shot = browser.screenshot(str(tmp_path / "flame.png"))
    assert os.path.getsize(shot) > 5000
    out = os.environ.get("PMUSCOPE_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        browser.screenshot(os.path.join(out, "flamegraph.png"))
    assert browser.errors() == []


def _shot(browser, tmp_path, name):
    shot = browser.screenshot(str(tmp_path / name))
    out = os.environ.get("PMUSCOPE_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        browser.screenshot(os.path.join(out, name))
    return shot


def test_flamegraph_first_screen_deep_tower(browser, tmp_path):
    """A wide graph plus a 128-deep, 2-sample tower: the page opens (icicle,
    root on top) on the 5 widest frames; the tower is cut a few rows below the
    wide frames and a click on its cut end zooms in and draws all 128 frames."""
    from pmuscope.profile.export import folded_stacks, write_flamegraph

    p = deep_tower_profile(str(tmp_path))
    folded = folded_stacks(p)
    assert folded == {f"{COMM};{k}": v for k, v in DEEP_FOLDED.items()}
    page = write_flamegraph(p, str(tmp_path / "deep.html"))  # what `pmuscope profile` writes
    set_viewport(browser)
    try:
        browser.open(page)
        assert browser.errors() == []
        assert browser.js("document.body.dataset.mode") == "icicle"
        check_first_screen(frames_in_viewport(browser), folded)
        # the tower (2.5 px wide) is cut 8 rows below the deepest wide frame (all, syn, main, solve,
        # kernel_loop, inner: depth 5), not 130 rows deep
        assert browser.js("document.body.dataset.cut") == "1"
        assert browser.js("document.body.dataset.depth") == str(5 + 8)
        assert browser.js("document.getElementById('chart').getBoundingClientRect().bottom") < 800
        _shot(browser, tmp_path, "flamegraph-deep-tower.png")
        cut = browser.js("""(() => { const e = document.querySelector('.f.cut'); const r = e.getBoundingClientRect();
            return {name: e.dataset.name, x: r.x + r.width / 2, y: r.y + r.height / 2}; })()""")
        assert cut["name"].startswith("deep_")
        browser.click(cut["x"], cut["y"])
        assert browser.js("document.body.dataset.zoom") == cut["name"]
        assert browser.js("document.body.dataset.depth") == str(1 + 128)  # all, syn, then 128 frames
        assert browser.js("document.body.dataset.cut") == "0"
        browser.js("document.getElementById('reset').click()")
        # flame mode (root at the bottom): the toggle scrolls the root into view, the widest frames too
        browser.js("document.getElementById('toggle').click()")
        assert browser.js("document.body.dataset.mode") == "flame"
        browser.js("window.scrollTo(0, 0)")
        check_first_screen(frames_in_viewport(browser), folded)
        assert browser.errors() == []
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


def test_flamegraph_first_screen_demo(browser, tmp_path):
    """`pmuscope profile -- python3 -m pmuscope.workloads demo`: its page opens
    on the 5 widest frames of its folded stacks."""
    prefix = demo_profile(str(tmp_path))
    folded = open(prefix + ".folded").read()
    set_viewport(browser)
    try:
        browser.open(prefix + ".html")
        assert browser.errors() == []
        page = frames_in_viewport(browser)
        check_first_screen(page, folded)
        assert browser.js("document.documentElement.scrollHeight") <= 2 * 800
        _shot(browser, tmp_path, "flamegraph-demo.png")
        assert browser.errors() == []
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
