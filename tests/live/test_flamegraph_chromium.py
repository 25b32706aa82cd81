"""The HTML flame graph in a real headless Chromium: loads without console
errors, a click zooms, search highlights and counts, the icicle toggle works,
and a screenshot is taken."""

import os

import pytest

from pmuscope.profile.flamegraph import write_html

from ..chromium import Browser

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
    # flame mode: children are drawn above their parent
    assert parse["y"] < root["y"]
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
    assert browser.js("document.body.dataset.mode") == "icicle"
    assert frame_box(browser, "parse")["y"] > frame_box(browser, "all")["y"]
    shot = browser.screenshot(str(tmp_path / "flame.png"))
    assert os.path.getsize(shot) > 5000
    out = os.environ.get("PMUSCOPE_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        browser.screenshot(os.path.join(out, "flamegraph.png"))
    assert browser.errors() == []
