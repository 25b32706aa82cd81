"""Data preparation of the HTML report without a browser: time buckets, row
caps, lost-sample markers from LOST/LOST_SAMPLES records, the summary, and the
page being self-contained."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.kernel import abi
from pmuscope.perfdata import Feature, PerfDataWriter, synth
from pmuscope.profile import load_profile
from pmuscope.profile.html_report import (
    MAX_BINS, LostEvents, bin_index, bin_rows, load_for_report, lost_markers, render_report_html, report_data,
    scan_lost, write_report_html,
)

R = abi.PerfRecord
S = abi.PerfSample
ST = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD
T0 = 1_000_000_000


def _data(html_text: str) -> dict:
    m = re.search(r'<script id="reportdata" type="application/json">(.*?)</script>', html_text, re.S)
    return json.loads(m.group(1))


def test_bin_index_ends_and_outside():
    t = np.array([100, 100, 150, 199, 200, 99, 201], dtype=np.uint64)
    b = bin_index(t, 100, 200, 10)
    assert b.tolist() == [0, 0, 5, 9, 9, -1, -1]
    # a zero-length range still has one bucket for its single time
    assert bin_index(np.array([5], np.uint64), 5, 5, 10).tolist() == [0]


def test_bin_rows_matches_a_histogram_per_key():
    rng = np.random.default_rng(3)
    n = 20000
    time = rng.integers(T0, T0 + 5_000_000, n).astype(np.uint64)
    key = rng.choice([11, 12, 13, 14, 99], n, p=[0.5, 0.2, 0.15, 0.1, 0.05])
    t0, t1 = int(time.min()), int(time.max())
    res = bin_rows(time, key, t0, t1, 250)
    assert res["counts"].shape == (5, 250)
    want = {int(k): int(c) for k, c in zip(*np.unique(key, return_counts=True))}
    assert dict(zip(res["keys"].tolist(), res["totals"].tolist())) == want
    assert res["totals"].tolist() == sorted(want.values(), reverse=True)  # busiest first
    assert (res["counts"].sum(axis=1) == res["totals"]).all()
    edges = t0 + (t1 - t0) * np.arange(251) / 250
    for k, row in zip(res["keys"].tolist(), res["counts"]):
        hist, _ = np.histogram(time[key == k].astype(np.float64), bins=edges)
        # float edges can move a time sitting on an edge by one bucket
        assert np.abs(np.cumsum(hist) - np.cumsum(row)).max() <= 1
        assert hist.sum() == row.sum()


def test_bin_rows_caps_rows_and_counts_the_rest():
    time = np.arange(100, dtype=np.uint64) + T0
    key = np.array([k for k in range(10) for _ in range(k + 1)] + [0] * 45)
    res = bin_rows(time, key, T0, T0 + 99, 5000, max_rows=3)
    assert res["counts"].shape[1] == MAX_BINS  # capped
    assert res["keys"].tolist() == [0, 9, 8]  # 46, 10, 9 samples
    assert res["hidden_rows"] == 7
    assert res["hidden_samples"] == 100 - 46 - 10 - 9
    assert res["counts"].sum() == 65


def test_lost_markers_aggregate_per_bucket_and_skip_untimed():
    lost = LostEvents(np.array([T0, T0 + 10, T0 + 990, 0, T0 + 5000], np.uint64), np.array([3, 4, 5, 100, 7]),
                      np.array([0, 1, 0, -1, 0], np.int32), np.full(5, int(R.LOST), np.int32))
    assert lost_markers(lost, T0, T0 + 999, 10) == [[0, 7, 2], [9, 5, 1]]
    assert lost.total == 119
    assert lost_markers(LostEvents.empty(), 0, 10, 10) == []


#: the drops _write_lossy(edges=True) adds: a LOST record 50 us before the first sample (the kernel
#: writes LOST when the ring has room again, with that moment's time: it can come before the first
#: sample kept), one 40 us after the last, and an untimed LOST_SAMPLES at the end (as perf 6.x writes)
EDGE_LOST = {"before": 11, "after": 13, "untimed": 29}


def _write_lossy(path, *, time_ok=True, edges=False):
    """A cpu-clock recording of two threads on two CPUs with LOST and
    LOST_SAMPLES records between the samples (and, with ``edges``, the
    records of :data:`EDGE_LOST` outside the samples' time range)."""
    st = ST if time_ok else (ST & ~S.TIME)
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1000, sample_id_all=1)
    w = PerfDataWriter(str(path), [(attr, [], "cpu-clock")], host=False, argv=["perf", "record", "-a", "--", "x"])
    w.features[Feature.HOSTNAME] = "testhost"
    w.features[Feature.CMDLINE] = ["perf", "record", "-a", "--", "x"]

    def sid(t, cpu):
        return synth.sample_id(st, pid=7, tid=7, time=t, cpu=cpu)

    recs = [synth.comm(7, 7, "main", sample_id=sid(T0, 0)), synth.comm(7, 8, "worker", sample_id=sid(T0, 0))]
    if edges:
        recs.append(synth.record(R.LOST, 0, struct.pack("<QQ", 0, EDGE_LOST["before"]) + sid(T0 - 50_000, 1)))
    for i in range(300):
        t = T0 + i * 1000
        recs.append(synth.sample(st, ip=0x1000, pid=7, tid=7 if i % 3 else 8, time=t, cpu=i % 2, period=1000))
        if i == 100:
            recs.append(synth.record(R.LOST, 0, struct.pack("<QQ", 0, 17) + sid(t + 1, 1)))
        if i == 250:
            recs.append(synth.record(R.LOST_SAMPLES, 0, struct.pack("<Q", 5) + sid(t + 1, 0)))
    if edges:
        recs.append(synth.record(R.LOST, 0, struct.pack("<QQ", 0, EDGE_LOST["after"]) + sid(T0 + 339_000, 0)))
        recs.append(synth.record(R.LOST_SAMPLES, 0, struct.pack("<Q", EDGE_LOST["untimed"]) + sid(0, 0)))
    w.write(b"".join(recs))
    w.set_sample_time(T0, T0 + 299 * 1000)
    w.close()
    return path


def test_report_of_a_file_with_lost_records(tmp_path):
    path = str(_write_lossy(tmp_path / "lossy.data"))
    p, lost, feats = load_for_report(path, kernel_symbols=False)
    # lost samples are counted once: the LOST_SAMPLES sum when present (what perf prints),
    # while both kinds of record stay visible on the timeline and in stats
    assert len(p) == 300 and p.lost == 5 and (p.stats.lost, p.stats.lost_samples) == (17, 5)
    assert lost.lost.tolist() == [17, 5] and lost.kind.tolist() == [int(R.LOST), int(R.LOST_SAMPLES)]
    assert lost.time.tolist() == [T0 + 100_001, T0 + 250_001] and lost.cpu.tolist() == [1, 0]
    scanned = scan_lost(path)  # the side path for an already-loaded Profile
    assert scanned.time.tolist() == lost.time.tolist() and scanned.lost.tolist() == [17, 5]
    assert feats["host"] == "testhost" and feats["sample_time"] == (T0, T0 + 299_000)

    d = report_data(p, lost, feats, nbins=299)
    s = d["summary"]
    assert (s["samples"], s["lost"], s["lost_records"], s["host"]) == (300, 5, 2, "testhost")
    assert s["cmdline"] == "perf record -a -- x" and s["events"] == ["cpu-clock"]
    assert s["duration_s"] == pytest.approx(299e-6)
    tl = d["timeline"]
    # 299 buckets of 1000 ns: sample i in bucket i (the last one shares 298)
    assert tl["lost"] == [[100, 17, 1], [250, 5, 1]]
    th = tl["threads"]
    assert th["keys"] == [7, 8] and th["totals"] == [200, 100] and th["labels"] == ["main 7", "worker 8 (pid 7)"]
    assert [sum(r) for r in th["counts"]] == [200, 100]
    assert th["counts"][1][0] == 1 and th["counts"][0][0] == 0  # sample 0 is tid 8
    cp = tl["cpus"]
    assert cp["keys"] == [0, 1] and cp["totals"] == [150, 150] and cp["labels"] == ["CPU 0", "CPU 1"]

    out = write_report_html(path, str(tmp_path / "r.html"), kernel_symbols=False)
    text = open(out, encoding="utf-8").read()
    # 1000 buckets over 299 us: 100_001 ns is bucket 334, 250_001 ns bucket 836
    assert _data(text)["timeline"]["lost"] == [[334, 17, 1], [836, 5, 1]]
    # self-contained: no URL to load anything from
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "@import" not in text and "url(" not in text
    # the same page from an already loaded Profile (lost times read back from its file)
    p2 = load_profile(path, kernel_symbols=False)
    d2 = _data(render_report_html(p2, nbins=299))
    assert d2["timeline"]["lost"] == [[100, 17, 1], [250, 5, 1]]
    assert d2["summary"]["samples"] == 300 and d2["summary"]["host"] == "testhost"
    # a filtered Profile (what `report --html` with --tid/--cpu gives) reports only its samples
    out2 = write_report_html(p2.filter(tids=[8]), str(tmp_path / "tid8.html"), nbins=299)
    d3 = _data(open(out2, encoding="utf-8").read())
    assert d3["summary"]["samples"] == 100 and d3["timeline"]["threads"]["keys"] == [8]
    assert d3["top"]["rows"][0][3] == "worker" and d3["top"]["rows"][0][0] == pytest.approx(100.0)


def test_lost_records_outside_the_samples_are_marked(tmp_path):
    """A LOST record timed before the first sample or after the last one is
    still marked (the timeline's range stretches to it), so the markers plus
    the untimed records add up to every lost count of the file."""
    path = str(_write_lossy(tmp_path / "edges.data", edges=True))
    p, lost, feats = load_for_report(path, kernel_symbols=False)
    assert (p.stats.lost, p.stats.lost_samples) == (17 + 11 + 13, 5 + 29)
    d = report_data(p, lost, feats, nbins=389)
    tl = d["timeline"]
    assert (tl["t0"], tl["t1"]) == (T0 - 50_000, T0 + 339_000)
    # 389 buckets of 1000 ns from T0 - 50 us: the edge records in the first and last bucket
    assert tl["lost"] == [[0, 11, 1], [150, 17, 1], [300, 5, 1], [388, 13, 1]]
    assert tl["lost_untimed"] == 29
    assert sum(m[1] for m in tl["lost"]) + tl["lost_untimed"] == p.stats.lost + p.stats.lost_samples
    assert sum(sum(r) for r in tl["threads"]["counts"]) == 300
    # the summary's duration stays the samples' span (HEADER_SAMPLE_TIME)
    assert d["summary"]["duration_s"] == pytest.approx(299e-6) and d["summary"]["lost"] == 5 + 29


def test_top_table_rows_and_cap(tmp_path):
    path = str(_write_lossy(tmp_path / "lossy.data"))
    d = _data(render_report_html(path, top=1, kernel_symbols=False))
    top = d["top"]
    assert top["columns"][:2] == ["Overhead", "Samples"]
    # one address, two comms: two entries, one shown
    assert top["total_rows"] == 2 and len(top["rows"]) == 1
    assert top["rows"][0][1] == 200 and top["rows"][0][3] == "main"
    assert top["rows"][0][0] == pytest.approx(100 * 200 / 300, abs=1e-3)


def test_no_time_no_timelines(tmp_path):
    path = str(_write_lossy(tmp_path / "notime.data", time_ok=False))
    d = _data(render_report_html(path, kernel_symbols=False))
    assert d["timeline"]["available"] is False and "PERF_SAMPLE_TIME" in d["timeline"]["note"]
    assert d["summary"]["samples"] == 300


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(PmuscopeError, match="does not exist"):
        render_report_html(str(tmp_path / "nope.data"))
