"""The HTML report of real recordings (perf record and pmuscope record of the
busy workload) in a real headless Chromium: no console errors, the summary
equals the Profile, the table sorts on a header click, search filters the
table and highlights the flame graph, a click on a frame zooms, and the
timelines have one row per thread (and CPU) with the right counts; the first
1280x800 screen shows the 5 widest frames of the flame graph."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from pmuscope.perfdata import Feature, PerfDataFile
from pmuscope.profile import build_report, load_profile
from pmuscope.profile.html_report import write_report_html

from ..chromium import Browser
from ..first_screen import check_first_screen, deep_tower_profile, demo_profile, frames_in_viewport, set_viewport

SHOT_DIR = "/tmp/pmuscope-shots"
WORKLOAD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.5"]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("html_report")
    out = {}
    perf = shutil.which("perf")
    if perf and subprocess.run([perf, "--version"], capture_output=True, timeout=30).returncode == 0:
        path = str(d / "perf.data")
        # --sample-cpu: the per-CPU timelines need PERF_SAMPLE_CPU
        subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-g", "--sample-cpu", "-o", path, "--", *WORKLOAD],
                       check=True, capture_output=True, timeout=120)
        out["perf"] = path
    path = str(d / "pmuscope.data")
    subprocess.run([sys.executable, "-m", "pmuscope", "record", "-q", "-g", "-o", path, "--", *WORKLOAD],
                   check=True, capture_output=True, timeout=120)
    out["pmuscope"] = path
    return out


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()


def _wait(browser, expr, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if browser.js(expr):
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {expr}")


def _visible_rows(browser):
    return browser.js("""[...document.querySelectorAll('#topbody tr')].filter(r => r.style.display !== 'none')
        .map(r => [...r.children].map(td => td.textContent))""")


def _full_page_shot(browser, path):
    browser.js("window.scrollTo(0, 0)")
    height = browser.js("document.documentElement.scrollHeight")
    browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=min(int(height), 4000),
                 deviceScaleFactor=1, mobile=False)
    try:
        time.sleep(0.2)
        return browser.screenshot(path)
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


def _center(browser, selector):
    r = browser.js(f"(() => {{ const e = document.querySelector({selector!r}); e.scrollIntoView({{block: 'center'}});"
                   " const b = e.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; })()")
    return r


@pytest.mark.parametrize("which", ["perf", "pmuscope"])
def test_html_report_in_chromium(recordings, browser, tmp_path, which):
    if which not in recordings:
        pytest.skip("Linux perf is not installed or does not run here")
    path = recordings[which]
    page = write_report_html(path, str(tmp_path / f"{which}.html"))
    p = load_profile(path)
    assert len(p) > 100
    browser.open(page)
    _wait(browser, "document.body.dataset.ready === '1' && document.body.dataset.flameReady === '1'")
    assert browser.errors() == []

    # --- summary equals the Profile and the header features
    summ = browser.js("Object.fromEntries([...document.querySelectorAll('#summaryList dd')]"
                      ".map(d => [d.dataset.key, d.dataset.value]))")
    assert int(summ["samples"]) == len(p)
    assert int(summ["lost"]) == p.lost
    assert summ["events"] == ",".join(p.event_names)
    with PerfDataFile(path) as pf:
        feats = pf.features
        assert int(summ["nr_cpus_online"]) == feats[Feature.NRCPUS].nr_cpus_online
        assert summ["host"] == feats[Feature.HOSTNAME]
        assert summ["cmdline"] == " ".join(feats[Feature.CMDLINE])
        st = feats[Feature.SAMPLE_TIME]
        assert float(summ["duration_s"]) == pytest.approx((st.last - st.first) / 1e9)
    assert int(summ["threads"]) == len(np.unique(p.tid))

    # --- the top table: perf report's rows; sorting by a real click on a header
    rep = build_report(p, ("comm", "dso", "sym"))
    rows = _visible_rows(browser)
    assert len(rows) == min(50, len(rep.rows))
    assert int(rows[0][1].replace(",", "")) == rep.rows[0].samples
    assert rows[0][5] == rep.rows[0].keys["sym"]
    x, y = _center(browser, "#tophead th[data-col='1']")  # Samples
    browser.click(x, y)
    samples = [int(r[1].replace(",", "")) for r in _visible_rows(browser)]
    assert samples == sorted(samples, reverse=True)
    browser.click(x, y)
    samples = [int(r[1].replace(",", "")) for r in _visible_rows(browser)]
    assert samples == sorted(samples) and len(set(samples)) > 1
    assert browser.js("document.querySelector(\"#tophead th[data-col='1']\").getAttribute('aria-sort')") == "ascending"
    x, y = _center(browser, "#tophead th[data-col='0']")  # back to overhead: numbers sort highest first
    browser.click(x, y)
    over = [float(r[0].rstrip("%")) for r in _visible_rows(browser)]
    assert over == sorted(over, reverse=True)

    # --- search: filters the table and highlights the flame graph
    sym = rep.rows[0].keys["sym"]
    browser.js("document.getElementById('search').focus()")
    browser.type_text(re.escape(sym))
    rows = _visible_rows(browser)
    shown = [r for r in rep.rows[:50] if re.search(re.escape(sym), f"{r.keys['comm']}\n{r.keys['dso']}\n{r.keys['sym']}")]
    assert len(rows) == len(shown) >= 1
    assert all(sym in (r[3] + r[4] + r[5]) for r in rows)
    fdoc = "document.getElementById('flame').contentDocument"
    assert browser.js(f"{fdoc}.getElementById('search').value") == re.escape(sym)
    assert browser.js(f"{fdoc}.querySelectorAll('.f.hit').length") >= 1
    assert browser.js(f"{fdoc}.getElementById('matched').textContent").startswith("Matched: ")
    # clearing the search shows every row again
    browser.js("(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()")
    assert len(_visible_rows(browser)) == min(50, len(rep.rows))
    assert browser.js(f"{fdoc}.querySelectorAll('.f.hit').length") == 0

    # --- a real click on a frame of the embedded flame graph zooms into it
    browser.js("document.getElementById('flame').scrollIntoView({block: 'start'})")
    target = browser.js(f"""(() => {{ const doc = {fdoc}; const fr = document.getElementById('flame').getBoundingClientRect();
        const full = doc.getElementById('chart').clientWidth;
        const els = [...doc.querySelectorAll('.f')].filter(e => e.style.display !== 'none'
            && e.getBoundingClientRect().width < full - 20 && e.getBoundingClientRect().width > 20);
        els.sort((a, b) => b.getBoundingClientRect().width - a.getBoundingClientRect().width);
        const e = els[0]; const r = e.getBoundingClientRect();
        return {{name: e.dataset.name, x: fr.x + r.x + Math.min(r.width / 2, 200), y: fr.y + r.y + r.height / 2, w: r.width}}; }})()""")
    full = browser.js(f"{fdoc}.getElementById('chart').clientWidth")
    assert target["w"] < full - 20  # not already the full width
    browser.click(target["x"], target["y"])
    assert browser.js(f"{fdoc}.body.dataset.zoom") == target["name"]
    zoomed = browser.js(f"""Math.max(...[...{fdoc}.querySelectorAll('.f')].filter(e => e.dataset.name === {target['name']!r}
        && e.style.display !== 'none' && !e.classList.contains('dim')).map(e => e.getBoundingClientRect().width))""")
    assert zoomed == pytest.approx(full, abs=2)
    browser.js(f"{fdoc}.getElementById('reset').click()")
    assert browser.js(f"{fdoc}.body.dataset.zoom") == "all"

    # --- timelines: one row per thread (and CPU) with its sample count
    tids, counts = np.unique(p.tid, return_counts=True)
    rows = browser.js("[...document.querySelectorAll('#threads .tl-row')].map(r => [+r.dataset.key, +r.dataset.total])")
    assert len(rows) == min(len(tids), 48)
    want = dict(zip(tids.tolist(), counts.tolist()))
    assert all(want[k] == n for k, n in rows)
    data_sums = browser.js("pmuscopeReport.timeline.threads.counts.map(r => r.reduce((a, b) => a + b, 0))")
    assert data_sums == [n for _, n in rows]
    if len(tids) <= 48:
        assert sum(data_sums) == len(p)
    if p.has_cpu:
        cpus, ccounts = np.unique(p.cpu, return_counts=True)
        crow = browser.js("[...document.querySelectorAll('#cpus .tl-row')].map(r => [+r.dataset.key, +r.dataset.total])")
        assert crow == [[int(c), int(n)] for c, n in zip(cpus, ccounts)]
    else:
        assert "PERF_SAMPLE_CPU" in browser.js("document.getElementById('cpusNote').textContent")
    assert int(browser.js("document.querySelector('.tl-lost').dataset.total")) == p.lost
    # hovering the busiest thread's strip shows a count
    x, y = _center(browser, "#threads .tl-row canvas")
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    assert re.search(r": [\d,]+ samples at [\d.]+", browser.js("document.body.dataset.tip || ''"))
    assert browser.errors() == []

    # full-page screenshots
    shot = _full_page_shot(browser, str(tmp_path / f"{which}.png"))
    assert os.path.getsize(shot) > 20000
    os.makedirs(SHOT_DIR, exist_ok=True)
    shutil.copy(shot, os.path.join(SHOT_DIR, f"html_report_{which}.png"))
    assert browser.errors() == []


def _lossy_recording(kind: str, d) -> str:
    """A recording that always loses records. ``synthetic``: written by
    pmuscope's writer with known LOST records (inside the samples' time range,
    50 us before the first sample, 40 us after the last) and an untimed
    LOST_SAMPLES. ``perf``: a system-wide perf recording into a one-page ring
    with 8 KiB user-stack copies per sample: a sample taken in user mode does
    not fit in the ring at all, so drops do not depend on how fast perf drains
    it (a quiet machine lost nothing with frame-pointer samples at a 20 us
    period; a loaded one did)."""
    if kind == "synthetic":
        from ..unit.test_html_report import _write_lossy

        return str(_write_lossy(d / "synthetic.data", edges=True))
    perf = shutil.which("perf")
    if not perf:
        pytest.skip("Linux perf is not installed")
    path = str(d / "lossy.data")
    subprocess.run([perf, "record", "-q", "-m", "1", "-e", "cpu-clock", "-c", "20000", "--call-graph", "dwarf,8192",
                    "-a", "-o", path, "--", *WORKLOAD], check=True, capture_output=True, timeout=120)
    return path


@pytest.mark.parametrize("kind", ["synthetic", "perf"])
def test_html_report_lost_markers_in_chromium(browser, tmp_path, kind):
    """Lost records are marked on the timelines: the summary's lost count is
    the Profile's, and the markers plus the untimed records add up to every
    LOST and LOST_SAMPLES record of the file, read by a second reader
    (scan_lost) and by the Profile's stats."""
    from pmuscope.profile.html_report import scan_lost

    path = _lossy_recording(kind, tmp_path)
    p = load_profile(path)
    assert p.stats.lost > 0, "the recording lost nothing"
    page = write_report_html(path, str(tmp_path / "lossy.html"))
    browser.open(page)
    _wait(browser, "document.body.dataset.ready === '1' && document.body.dataset.flameReady === '1'")
    assert browser.errors() == []
    assert int(browser.js("document.querySelector('#summaryList dd[data-key=lost]').dataset.value")) == p.lost
    marks = browser.js("pmuscopeReport.timeline.lost")
    untimed = browser.js("pmuscopeReport.timeline.lost_untimed")
    scanned = scan_lost(path)
    # every drop record is drawn or noted (LOST in time, LOST_SAMPLES written at the end untimed),
    # whatever its time: the same totals as the Profile's stats and as a scan of the file's records
    drawn = sum(m[1] for m in marks)
    assert marks and (drawn, untimed) == (int(scanned.lost[scanned.time > 0].sum()),
                                          int(scanned.lost[scanned.time == 0].sum()))
    assert drawn + untimed == p.stats.lost + p.stats.lost_samples == scanned.total
    assert sum(m[2] for m in marks) == int((scanned.time > 0).sum())  # records, too
    assert int(browser.js("document.querySelector('.tl-lost').dataset.total")) == drawn
    if kind == "synthetic":
        from ..unit.test_html_report import EDGE_LOST

        assert marks[0][1] == EDGE_LOST["before"] and marks[-1][1] == EDGE_LOST["after"]
        assert (marks[0][0], marks[-1][0]) == (0, browser.js("pmuscopeReport.timeline.nbins") - 1)
        assert untimed == EDGE_LOST["untimed"]
    # the marker is drawn: the lost row's canvas is red at the first marker's bucket
    red = browser.js(f"""(() => {{ const c = document.querySelector('.tl-lost canvas'); const g = c.getContext('2d');
        const x = Math.floor(({marks[0][0]} + 0.5) * c.width / pmuscopeReport.timeline.nbins);
        const px = g.getImageData(x, Math.floor(c.height * 0.7), 1, 1).data; return [px[0], px[1], px[2], px[3]]; }})()""")
    assert red[0] > 150 and red[1] < 100 and red[3] > 0, red
    # one row per CPU, totals as recorded
    cpus, counts = np.unique(p.cpu, return_counts=True)
    crow = browser.js("[...document.querySelectorAll('#cpus .tl-row')].map(r => [+r.dataset.key, +r.dataset.total])")
    assert crow == [[int(c), int(n)] for c, n in zip(cpus, counts)]
    shot = _full_page_shot(browser, str(tmp_path / "lossy.png"))
    assert os.path.getsize(shot) > 20000
    os.makedirs(SHOT_DIR, exist_ok=True)
    shutil.copy(shot, os.path.join(SHOT_DIR, "html_report.png" if kind == "perf" else "html_report_synthetic.png"))
    assert browser.errors() == []


@pytest.mark.parametrize("which", ["deep_tower", "demo"])
def test_html_report_first_screen(browser, tmp_path, which):
    """The report opens with the flame graph (icicle, as the stand-alone page)
    right below a compact summary: the 5 widest frames of the profile are
    inside the 1280x800 viewport and inside the embedded frame's box, without
    scrolling, for a 128-deep 2-sample tower beside a wide graph and for
    `pmuscope profile`'s demo recording."""
    from pmuscope.profile.export import folded_stacks

    if which == "deep_tower":
        p = deep_tower_profile(str(tmp_path))
        page = write_report_html(p, str(tmp_path / "deep.html"))
        folded = folded_stacks(p)
    else:
        prefix = demo_profile(str(tmp_path))
        page = write_report_html(prefix + ".data", str(tmp_path / "demo.html"))
        folded = open(prefix + ".folded").read()
    set_viewport(browser)
    try:
        browser.open(page)
        _wait(browser, "document.body.dataset.ready === '1' && document.body.dataset.flameReady === '1'")
        assert browser.errors() == []
        fdoc = "document.getElementById('flame').contentDocument"
        assert browser.js(f"{fdoc}.body.dataset.mode") == "icicle"
        check_first_screen(frames_in_viewport(browser, embedded=True), folded)
        shot = browser.screenshot(str(tmp_path / f"first-{which}.png"))
        os.makedirs(SHOT_DIR, exist_ok=True)
        shutil.copy(shot, os.path.join(SHOT_DIR, f"html_report_first_{which}.png"))
        assert browser.errors() == []
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
