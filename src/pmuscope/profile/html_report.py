"""One self-contained HTML page for a recording (``pmuscope report --html``).

The page has no network dependency (no external script, style or font) and
holds:

- a summary from the perf.data header features (HEADER_CMDLINE, HOSTNAME,
  OSRELEASE, NRCPUS, CPUDESC, SAMPLE_TIME) and the decoded stream: events,
  samples, lost samples (PERF_RECORD_LOST + PERF_RECORD_LOST_SAMPLES), duration;
  laid out three items a row so that it stays a few lines tall;
- the interactive flame graph of :mod:`pmuscope.profile.flamegraph` (the same
  page, embedded as an ``iframe srcdoc``, so click-to-zoom and search work as
  in the stand-alone file), right below the summary and in the same default
  (icicle) orientation, so that the first screen shows its widest frames;
- the top table (overhead, samples, event, comm, dso, sym) of
  :func:`~pmuscope.profile.build_report`, sortable by clicking a header, with a
  search box (a regular expression) that filters the rows and highlights the
  matching frames of the flame graph;
- timelines: sample density over time per thread and per CPU, binned with
  numpy into at most 1000 buckets per row (rows capped to the busiest ones,
  with a note saying how many were left out), and markers at the times of
  PERF_RECORD_LOST / PERF_RECORD_LOST_SAMPLES records.

>>> from pmuscope.profile.html_report import write_report_html
>>> write_report_html("perf.data", "perf.html")          # doctest: +SKIP
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import PmuscopeError
from ..outfile import write_output
from ..kernel import abi
from .model import Profile, uniq_first, uniq_inv

R = abi.PerfRecord

#: the most time buckets a timeline row gets
MAX_BINS = 1000


@dataclass
class LostEvents:
    """PERF_RECORD_LOST / PERF_RECORD_LOST_SAMPLES records of a stream, as
    columns: ``time`` (ns from the sample_id trailer; 0 when the attr has no
    ``sample_id_all``/TIME), ``lost`` (the record's count), ``cpu`` (-1 when
    unknown), ``kind`` (the record type)."""

    time: np.ndarray
    lost: np.ndarray
    cpu: np.ndarray
    kind: np.ndarray

    @classmethod
    def empty(cls) -> "LostEvents":
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))

    @classmethod
    def from_records(cls, recs: list) -> "LostEvents":
        """From decoded :class:`~pmuscope.records.types.Lost` /
        ``LostSamples`` records."""
        if not recs:
            return cls.empty()
        t, n, c, k = [], [], [], []
        for r in recs:
            sid = r.sample_id
            t.append(sid.time if sid is not None and sid.time is not None else 0)
            c.append(sid.cpu if sid is not None and sid.cpu is not None else -1)
            n.append(int(r.lost))
            k.append(int(r.type))
        return cls(np.array(t, np.uint64), np.array(n, np.int64), np.array(c, np.int32), np.array(k, np.int32))

    def __len__(self) -> int:
        return len(self.time)

    @property
    def total(self) -> int:
        return int(self.lost.sum()) if len(self.lost) else 0


class _LostTap:
    """A record source that passes every item through and keeps the LOST and
    LOST_SAMPLES records it sees (``attrs``/``stats`` are the wrapped ones)."""

    def __init__(self, src) -> None:
        self.src = src
        self.attrs = src.attrs
        self.records: list = []

    @property
    def stats(self):
        return self.src.stats

    def __iter__(self):
        keep = self.records.append
        for item in self.src:
            t = getattr(item, "type", None)
            if t == R.LOST or t == R.LOST_SAMPLES:
                keep(item)
            yield item


def load_for_report(path: str, *, kernel_symbols: bool | None = None) -> tuple[Profile, LostEvents, dict]:
    """Read a perf.data file once: ``(Profile, LostEvents, header features by
    name)``. Same reading path as :func:`~pmuscope.profile.load_profile`."""
    from ..perfdata import PerfDataFile
    from ..symbols import Symbolizer
    from ._fastload import load_kernel_symbols, profile_source
    from .model import _same_kernel, build_profile

    if path != "-" and not os.path.exists(path):
        raise PmuscopeError(f"{path} does not exist: record one with `pmuscope record` (or perf record) first")
    pf = PerfDataFile(path)
    try:
        features = _features(pf)
        ks = kernel_symbols if kernel_symbols is not None else _same_kernel(pf)
        symbolizer = Symbolizer(kernel=load_kernel_symbols() if ks else False)
        tap = _LostTap(profile_source(pf, path))
        prof = build_profile(tap, event_names=pf.event_names, symbolizer=symbolizer, name=pf.source)
        return prof, LostEvents.from_records(tap.records), features
    finally:
        pf.close()


def scan_lost(path: str) -> LostEvents:
    """The LOST/LOST_SAMPLES records of a perf.data file, without decoding samples."""
    from ..perfdata import PerfDataFile
    from ..records import AttrTable
    from ..records.types import parse_sideband

    with PerfDataFile(path) as pf:
        table = AttrTable([(a.attr, a.ids) for a in pf.attrs], names=[a.name for a in pf.attrs])
        recs = []
        for rtype, misc, mv, off in pf.raw_records():
            if rtype == R.LOST or rtype == R.LOST_SAMPLES:
                rec = parse_sideband(mv, 0, rtype, misc, len(mv), table, off)
                if rec is not None:
                    recs.append(rec)
    return LostEvents.from_records(recs)


def _features(pf) -> dict:
    from ..perfdata import Feature

    f = pf.features
    out: dict[str, Any] = {}
    cmd = f.get(Feature.CMDLINE)
    if cmd:
        out["cmdline"] = " ".join(str(x) for x in cmd)
    for key, feat in (("host", Feature.HOSTNAME), ("os_release", Feature.OSRELEASE), ("arch", Feature.ARCH),
                      ("cpu_desc", Feature.CPUDESC), ("version", Feature.VERSION)):
        v = f.get(feat)
        if v:
            out[key] = str(v)
    nr = f.get(Feature.NRCPUS)
    if nr is not None:
        out["nr_cpus_online"] = int(nr.nr_cpus_online)
        out["nr_cpus_available"] = int(nr.nr_cpus_available)
    st = f.get(Feature.SAMPLE_TIME)
    if st is not None and st.last >= st.first > 0:
        out["sample_time"] = (int(st.first), int(st.last))
    return out


# --- data preparation (numpy) --------------------------------------------------------
def time_range(p: Profile, features: dict | None = None, lost: LostEvents | None = None) -> tuple[int, int] | None:
    """``(t0, t1)`` in ns covering every sample (and HEADER_SAMPLE_TIME when it
    is consistent with them) and every timed record of ``lost``: a
    PERF_RECORD_LOST carries the time the kernel wrote it, which can come
    before the first sample kept or after the last one; None when samples
    carry no time."""
    if not p.has_time or not len(p):
        return None
    t0, t1 = int(p.time.min()), int(p.time.max())
    st = (features or {}).get("sample_time")
    if st is not None and st[0] <= t0 and st[1] >= t1 and (st[1] - st[0]) <= 4 * max(t1 - t0, 1):
        t0, t1 = st
    if lost is not None and len(lost):
        timed = lost.time[lost.time > 0]
        if len(timed):
            t0, t1 = min(t0, int(timed.min())), max(t1, int(timed.max()))
    return t0, t1


def bin_index(time: np.ndarray, t0: int, t1: int, nbins: int) -> np.ndarray:
    """Bucket of each time in ``nbins`` equal buckets over ``[t0, t1]`` (both
    ends included: ``t1`` falls in the last bucket); times outside are -1."""
    t = np.asarray(time, dtype=np.uint64)
    span = max(int(t1) - int(t0), 1)
    rel = t.astype(np.int64) - np.int64(t0)
    # float64 keeps 53 bits: exact enough for a bucket of >= span/1000 ns
    b = np.floor(rel.astype(np.float64) * (nbins / span)).astype(np.int64)
    b = np.minimum(b, nbins - 1)
    b[(rel < 0) | (rel > span)] = -1
    return b


def bin_rows(time: np.ndarray, key: np.ndarray, t0: int, t1: int, nbins: int = MAX_BINS,
             max_rows: int | None = None) -> dict:
    """Sample density per key over time.

    Returns ``{"keys", "totals", "counts" (rows x nbins int64), "hidden_rows",
    "hidden_samples"}``: rows are the keys with the most samples (all of them,
    or the ``max_rows`` busiest), highest total first, ties by key; ``totals``
    counts every sample of the key, ``counts`` sums to it."""
    nbins = max(1, min(int(nbins), MAX_BINS))
    key = np.asarray(key)
    if not len(key):
        return {"keys": np.zeros(0, np.int64), "totals": np.zeros(0, np.int64),
                "counts": np.zeros((0, nbins), np.int64), "hidden_rows": 0, "hidden_samples": 0}
    ukeys, inv = uniq_inv(key)
    inv = inv.reshape(-1)
    totals = np.bincount(inv, minlength=len(ukeys))
    order = np.lexsort((ukeys, -totals))
    if max_rows is not None and len(order) > max_rows:
        shown, hidden = order[:max_rows], order[max_rows:]
    else:
        shown, hidden = order, order[:0]
    row_of = np.full(len(ukeys), -1, dtype=np.int64)
    row_of[shown] = np.arange(len(shown))
    r = row_of[inv]
    b = bin_index(time, t0, t1, nbins)
    sel = (r >= 0) & (b >= 0)
    counts = np.bincount(r[sel] * nbins + b[sel], minlength=len(shown) * nbins).reshape(len(shown), nbins)
    return {"keys": ukeys[shown], "totals": totals[shown], "counts": counts,
            "hidden_rows": int(len(hidden)), "hidden_samples": int(totals[hidden].sum())}


def lost_markers(lost: LostEvents, t0: int, t1: int, nbins: int = MAX_BINS) -> list[list[int]]:
    """``[[bucket, lost count, records], ...]`` of the LOST/LOST_SAMPLES
    records with a time inside ``[t0, t1]``, by bucket (ascending)."""
    if not len(lost):
        return []
    timed = lost.time > 0
    b = bin_index(lost.time[timed], t0, t1, nbins)
    n = lost.lost[timed]
    ok = b >= 0
    b, n = b[ok], n[ok]
    if not len(b):
        return []
    ub, inv = uniq_inv(b)
    inv = inv.reshape(-1)
    tot = np.bincount(inv, weights=n.astype(np.float64), minlength=len(ub))
    recs = np.bincount(inv, minlength=len(ub))
    return [[int(x), int(y), int(z)] for x, y, z in zip(ub.tolist(), tot.tolist(), recs.tolist())]


def _ints(counts: np.ndarray) -> list[int]:
    """A row of counts as plain ints (JSON-friendly)."""
    return counts.astype(np.int64).tolist()


def thread_labels(p: Profile, tids: np.ndarray) -> list[str]:
    """``comm tid`` of each tid: the comm of its last sample (after an exec)."""
    if not len(tids):
        return []
    rev_tid = p.tid[::-1]
    u, first, _ = uniq_first(rev_tid)
    last_idx = len(p) - 1 - first
    pos = np.searchsorted(u, tids)
    comms = p.comm[last_idx[pos]]
    pids = p.pid[last_idx[pos]]
    out = []
    for t, c, pid in zip(tids.tolist(), comms.tolist(), pids.tolist()):
        name = p.comms[c] if 0 <= c < len(p.comms) else "?"
        out.append(f"{name} {t}" if pid == t or pid < 0 else f"{name} {t} (pid {pid})")
    return out


def timeline_data(p: Profile, lost: LostEvents, features: dict | None = None, *, nbins: int = MAX_BINS,
                  max_rows: int = 48) -> dict:
    """The timelines section: per-thread and per-CPU rows and lost markers
    (over a time range that holds every timed lost record, so the markers add
    up to the timed records' total)."""
    tr = time_range(p, features, lost)
    if tr is None:
        return {"available": False, "note": "the samples carry no time (PERF_SAMPLE_TIME): no timelines"
                if len(p) else "no samples"}
    t0, t1 = tr
    nbins = max(1, min(int(nbins), MAX_BINS))
    out: dict[str, Any] = {"available": True, "t0": t0, "t1": t1, "nbins": nbins,
                           "bin_ns": max(t1 - t0, 1) / nbins}
    th = bin_rows(p.time, p.tid, t0, t1, nbins, max_rows)
    out["threads"] = {"keys": th["keys"].tolist(), "labels": thread_labels(p, th["keys"]),
                      "totals": th["totals"].tolist(), "counts": [_ints(c) for c in th["counts"]],
                      "hidden_rows": th["hidden_rows"], "hidden_samples": th["hidden_samples"]}
    if p.has_cpu and (p.cpu >= 0).any():
        cp = bin_rows(p.time, p.cpu.astype(np.int64), t0, t1, nbins, max_rows)
        keys = cp["keys"]
        o = np.argsort(keys, kind="stable")  # CPUs read best in CPU order
        out["cpus"] = {"keys": keys[o].tolist(), "labels": [f"CPU {c}" for c in keys[o].tolist()],
                       "totals": cp["totals"][o].tolist(), "counts": [_ints(cp["counts"][i]) for i in o.tolist()],
                       "hidden_rows": cp["hidden_rows"], "hidden_samples": cp["hidden_samples"]}
    else:
        out["cpus"] = None
        out["cpu_note"] = ("the samples carry no CPU (PERF_SAMPLE_CPU): record with -a/-C "
                           "(or perf record --sample-cpu) for per-CPU timelines")
    out["lost"] = lost_markers(lost, t0, t1, nbins)
    untimed = int(lost.lost[lost.time == 0].sum()) if len(lost) else 0
    out["lost_untimed"] = untimed
    return out


def _top_rows(p: Profile, top: int) -> dict:
    from .report import reports_by_event

    rows: list[list] = []
    total = 0
    for rep in reports_by_event(p, ("comm", "dso", "sym")):
        total += len(rep.rows)
        for r in rep.rows:
            rows.append([round(r.overhead, 4), r.samples, rep.event, str(r.keys["comm"]), str(r.keys["dso"]),
                         str(r.keys["sym"])])
    rows.sort(key=lambda r: (-r[0], -r[1]))
    return {"columns": ["Overhead", "Samples", "Event", "Command", "Shared Object", "Symbol"],
            "rows": rows[:top], "total_rows": total}


def report_data(p: Profile, lost: LostEvents | None = None, features: dict | None = None, *, top: int = 50,
                nbins: int = MAX_BINS, max_rows: int = 48) -> dict:
    """Everything the page shows, as JSON-able data (no flame graph)."""
    features = dict(features or {})
    lost = lost if lost is not None else LostEvents.empty()
    tr = time_range(p, features)
    if "sample_time" in features:
        dur = (features["sample_time"][1] - features["sample_time"][0]) / 1e9
    elif tr is not None:
        dur = (tr[1] - tr[0]) / 1e9
    else:
        dur = None
    present = sorted(set(p.event.tolist())) if len(p) else list(range(len(p.event_names)))
    summary = {
        "source": p.source,
        "cmdline": features.get("cmdline"),
        "host": features.get("host"),
        "os_release": features.get("os_release"),
        "arch": features.get("arch"),
        "cpu_desc": features.get("cpu_desc"),
        "recorder": features.get("version"),
        "events": [p.event_names[i] for i in present if 0 <= i < len(p.event_names)] or list(p.event_names),
        "samples": int(len(p)),
        "samples_per_event": {p.event_names[i]: int((p.event == i).sum()) for i in present
                              if 0 <= i < len(p.event_names)},
        "total_period": p.total_period,
        "lost": int(p.lost),
        "lost_records": int(len(lost)),
        # perf >= 6.0 also writes LOST_SAMPLES records (PERF_FORMAT_LOST read at the end, time 0) that
        # count the same ring-buffer drops as LOST records: show both kinds
        "lost_by_kind": {name: [int(lost.lost[lost.kind == int(k)].sum()), int((lost.kind == int(k)).sum())]
                         for name, k in (("LOST", R.LOST), ("LOST_SAMPLES", R.LOST_SAMPLES))
                         if (lost.kind == int(k)).any()},
        "duration_s": dur,
        "nr_cpus_online": features.get("nr_cpus_online"),
        "nr_cpus_available": features.get("nr_cpus_available"),
        "threads": int(len(np.unique(p.tid))) if len(p) else 0,
        "callchains": bool(p.has_callchain),
    }
    return {"summary": summary, "top": _top_rows(p, top),
            "timeline": timeline_data(p, lost, features, nbins=nbins, max_rows=max_rows)}


def render_report_html(profile_or_path: Profile | str | os.PathLike, *, title: str | None = None, top: int = 50,
                       lost: LostEvents | None = None, features: dict | None = None, nbins: int = MAX_BINS,
                       max_rows: int = 48, kernel_symbols: bool | None = None) -> str:
    """The HTML report of a recording: a perf.data path, or a
    :class:`~pmuscope.profile.Profile` (its header features and lost records
    are read from ``profile.source`` when that is a file and ``features`` /
    ``lost`` are not given). ``top`` caps the table, ``max_rows`` the
    timeline rows (busiest first), ``nbins`` the buckets per row (<= 1000)."""
    from .export import folded_stacks
    from .flamegraph import render_html

    if isinstance(profile_or_path, Profile):
        p = profile_or_path
        src = p.source
        readable = bool(src) and src != "-" and os.path.isfile(src)
        if features is None:
            features = {}
            if readable:
                from ..perfdata import PerfDataFile

                with PerfDataFile(src) as pf:
                    features = _features(pf)
        if lost is None:
            lost = scan_lost(src) if readable and p.lost else LostEvents.empty()
    else:
        path = os.fspath(profile_or_path)
        p, lost_read, feats = load_for_report(path, kernel_symbols=kernel_symbols)
        lost = lost if lost is not None else lost_read
        features = features if features is not None else feats
    data = report_data(p, lost, features, top=top, nbins=nbins, max_rows=max_rows)
    name = os.path.basename(p.source) if p.source else "recording"
    title = title or f"pmuscope report: {name}"
    ev = ",".join(data["summary"]["events"])
    # the flame graph's default orientation (icicle, root on top), as in `pmuscope profile`'s page
    flame = render_html(folded_stacks(p), title="Flame graph",
                        subtitle=f"{len(p)} samples of {ev}" + (f", {p.lost} lost" if p.lost else ""))
    payload = json.dumps({"title": title, **data}, separators=(",", ":")).replace("</", "<\\/")
    flame_json = json.dumps(flame).replace("</", "<\\/")
    return (_TEMPLATE.replace("__TITLE__", html.escape(title))
            .replace("__FLAME__", flame_json)
            .replace("__DATA__", payload))


def write_report_html(path_in: Profile | str | os.PathLike, path_out: str | os.PathLike, **kwargs) -> str:
    """Render the report of the perf.data ``path_in`` (or of a loaded, maybe
    filtered, :class:`~pmuscope.profile.Profile`) into ``path_out``; returns
    ``path_out``. Keyword arguments as :func:`render_report_html`."""
    text = render_report_html(path_in, **kwargs)
    out = os.fspath(path_out)
    return write_output(out, text)


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
 body{margin:0;font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#fafafa;color:#222}
 header{padding:10px 14px;background:#263238;color:#fff;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
 header h1{font-size:16px;margin:0;font-weight:600}
 header input{font:inherit;padding:3px 8px;width:260px;border:0;border-radius:3px}
 #rowsShown{color:#cfd8dc}
 section{margin:10px 14px;background:#fff;border:1px solid #ddd;border-radius:4px}
 section h2{font-size:13px;margin:0;padding:6px 10px;background:#eceff1;border-bottom:1px solid #ddd}
 .note{color:#8a5a00;padding:3px 10px}
 #summary dl{display:grid;grid-template-columns:repeat(3,max-content minmax(0,1fr));gap:2px 14px;margin:8px 10px}
 #summary dt{color:#555} #summary dd{margin:0;word-break:break-all}
 #summary dd[data-key=cmdline],#summary dd[data-key=source]{grid-column:2/-1}
 @media (max-width:900px){#summary dl{grid-template-columns:max-content minmax(0,1fr)} #summary dd[data-key]{grid-column:auto}}
 table{border-collapse:collapse;width:100%}
 th{position:sticky;top:0;background:#f5f5f5;text-align:left;padding:3px 8px;cursor:pointer;user-select:none;border-bottom:1px solid #ccc;white-space:nowrap}
 th[aria-sort=ascending]::after{content:" \25B2"} th[aria-sort=descending]::after{content:" \25BC"}
 td{padding:2px 8px;border-bottom:1px solid #f0f0f0;white-space:nowrap;max-width:520px;overflow:hidden;text-overflow:ellipsis}
 td.num{text-align:right} tr:hover td{background:#fff8e1}
 #tablewrap{max-height:420px;overflow:auto}
 #flame{width:100%;height:300px;border:0;display:block}
 .tl{padding:6px 10px}
 .tl-row{display:flex;align-items:center;height:16px;margin:1px 0}
 .tl-label{width:230px;flex:none;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;padding-right:6px}
 .tl-row canvas{flex:1;height:14px;min-width:100px;background:#f3f3f3;display:block}
 .tl-total{width:80px;flex:none;text-align:right;color:#555}
 .tl-axis{display:flex;justify-content:space-between;margin-left:230px;margin-right:80px;color:#777}
 .tl-lost .tl-label{color:#c62828}
 #tip{position:fixed;pointer-events:none;background:#263238;color:#fff;padding:3px 6px;border-radius:3px;display:none;z-index:10;white-space:nowrap}
</style></head>
<body>
<header><h1 id="title">__TITLE__</h1>
 <input id="search" type="search" placeholder="Search symbols, DSOs, commands (regex)" aria-label="search">
 <span id="rowsShown"></span></header>
<section id="summary"><h2>Summary</h2><dl id="summaryList"></dl><div id="summaryNotes"></div></section>
<section id="flamesec"><h2>Flame graph</h2><iframe id="flame" title="flame graph"></iframe></section>
<section id="top"><h2>Top symbols</h2><div id="topNote" class="note"></div>
 <div id="tablewrap"><table id="toptable"><thead><tr id="tophead"></tr></thead><tbody id="topbody"></tbody></table></div></section>
<section id="timelines"><h2>Timelines (samples over time)</h2>
 <div class="tl" id="tlThreadsSec"><b>Threads</b> <span id="threadsNote" class="note"></span><div id="threads"></div></div>
 <div class="tl" id="tlCpusSec"><b>CPUs</b> <span id="cpusNote" class="note"></span><div id="cpus"></div></div>
 <div class="tl"><div id="lostRow"></div><div class="tl-axis" id="axis"></div></div>
</section>
<div id="tip"></div>
<script id="flamedoc" type="application/json">__FLAME__</script>
<script id="reportdata" type="application/json">__DATA__</script>
<script>
"use strict";
(function(){
const D = JSON.parse(document.getElementById("reportdata").textContent);
window.pmuscopeReport = D;
const $ = id => document.getElementById(id);
const fmt = n => (n === null || n === undefined) ? "n/a" : Number(n).toLocaleString("en-US");
function esc(s){ return String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c])); }

// --- summary ------------------------------------------------------------------
const S = D.summary;
const items = [
  ["Command line", "cmdline", S.cmdline || "n/a"],
  ["File", "source", S.source || "n/a"],
  ["Host", "host", S.host || "n/a"],
  ["Kernel", "os_release", [S.os_release, S.arch].filter(Boolean).join(" ") || "n/a"],
  ["CPU", "cpu_desc", S.cpu_desc || "n/a"],
  ["Recorded by", "recorder", S.recorder || "n/a"],
  ["Event(s)", "events", S.events.join(", ")],
  ["Samples", "samples", fmt(S.samples) + (S.events.length > 1 ? " (" + Object.entries(S.samples_per_event).map(e => e[0] + ": " + fmt(e[1])).join(", ") + ")" : "")],
  ["Lost samples", "lost", fmt(S.lost) + (S.lost_records ? " (" + Object.entries(S.lost_by_kind).map(e => "PERF_RECORD_" + e[0] + ": " + fmt(e[1][0]) + " in " + fmt(e[1][1]) + " records").join(", ") + ")" : "")],
  ["Duration", "duration_s", S.duration_s === null ? "n/a" : S.duration_s.toFixed(3) + " s"],
  ["CPUs", "nr_cpus_online", S.nr_cpus_online === null || S.nr_cpus_online === undefined ? "n/a" : S.nr_cpus_online + " online / " + S.nr_cpus_available + " available"],
  ["Threads", "threads", fmt(S.threads)],
  ["Call chains", "callchains", S.callchains ? "yes" : "no (leaf frames only)"],
];
$("summaryList").innerHTML = items.map(it => {
  const raw = S[it[1]];
  const val = Array.isArray(raw) ? raw.join(",") : (raw === null || raw === undefined ? "" : String(raw));
  return "<dt>" + esc(it[0]) + "</dt><dd data-key=\"" + it[1] + "\" data-value=\"" + esc(val) + "\">" + esc(it[2]) + "</dd>";
}).join("");
if (S.lost) $("summaryNotes").innerHTML = "<div class=\"note\">" + fmt(S.lost) + " samples were lost (ring buffers full): the times are marked in red on the timelines.</div>";

// --- top table ----------------------------------------------------------------
const T = D.top, cols = T.columns, body = $("topbody");
let rows = T.rows.map((r, i) => ({r: r, i: i, el: null}));
let sortCol = 0, sortDir = -1, query = null;
$("tophead").innerHTML = cols.map((c, i) => "<th data-col=\"" + i + "\" scope=\"col\">" + esc(c) + "</th>").join("");
for (const row of rows){
  const tr = document.createElement("tr");
  tr.innerHTML = row.r.map((v, j) => j === 0 ? "<td class=\"num\">" + v.toFixed(2) + "%</td>" : j === 1 ? "<td class=\"num\">" + fmt(v) + "</td>" : "<td title=\"" + esc(v) + "\">" + esc(v) + "</td>").join("");
  tr.dataset.overhead = row.r[0]; tr.dataset.samples = row.r[1];
  row.el = tr;
}
$("topNote").textContent = T.total_rows > T.rows.length ? "showing the top " + T.rows.length + " of " + fmt(T.total_rows) + " entries" : "";
function cmp(a, b){
  const x = a.r[sortCol], y = b.r[sortCol];
  const c = (typeof x === "number") ? x - y : String(x).localeCompare(String(y));
  return (c || a.i - b.i) * sortDir;
}
function renderTable(){
  rows.sort(cmp);
  const frag = document.createDocumentFragment();
  let shown = 0;
  for (const row of rows){
    const hit = !query || query.test(row.r[3]) || query.test(row.r[4]) || query.test(row.r[5]);
    row.el.style.display = hit ? "" : "none";
    if (hit) shown++;
    frag.appendChild(row.el);
  }
  body.appendChild(frag);
  for (const th of document.querySelectorAll("#tophead th")){
    const i = +th.dataset.col;
    if (i === sortCol) th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending"); else th.removeAttribute("aria-sort");
  }
  $("rowsShown").textContent = query ? shown + " of " + rows.length + " rows match" : "";
  document.body.dataset.rowsShown = String(shown);
}
$("tophead").addEventListener("click", e => {
  const th = e.target.closest("th"); if (!th) return;
  const i = +th.dataset.col;
  if (i === sortCol) sortDir = -sortDir; else { sortCol = i; sortDir = (i <= 1) ? -1 : 1; }
  renderTable();
});

// --- flame graph (the stand-alone page, embedded) -------------------------------
const flame = $("flame");
let flameReady = false;
function flameDoc(){ try { return flame.contentDocument; } catch (err) { return null; } }
function flameSearch(){
  const doc = flameDoc(); if (!flameReady || !doc) return;
  const box = doc.getElementById("search"); if (!box) return;
  box.value = query ? query.source : "";
  box.dispatchEvent(new Event("input"));
}
function fitFlame(){
  // the height of the content (the bottom of its last element), not the document's scrollHeight:
  // that is at least the frame's own height, so it would only ever grow
  const doc = flameDoc(); if (!doc || !doc.body) return;
  const last = doc.getElementById("status");
  const h = last ? Math.ceil(last.getBoundingClientRect().bottom + doc.defaultView.scrollY) + 4 : doc.body.scrollHeight + 4;
  const px = Math.min(h, 640) + "px";
  if (flame.style.height !== px) flame.style.height = px;
}
flame.addEventListener("load", () => {
  flameReady = true; fitFlame(); flameSearch();
  const doc = flameDoc();
  if (doc) new MutationObserver(fitFlame).observe(doc.body, {attributes: true, attributeFilter: ["data-zoom", "data-mode"]});
  document.body.dataset.flameReady = "1";
});
flame.srcdoc = JSON.parse(document.getElementById("flamedoc").textContent);

// --- search -------------------------------------------------------------------
$("search").addEventListener("input", e => {
  const v = e.target.value;
  if (!v) query = null;
  else { try { query = new RegExp(v); } catch (err) { query = new RegExp(v.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")); } }
  renderTable(); flameSearch();
});
renderTable();

// --- timelines ----------------------------------------------------------------
const TL = D.timeline, tip = $("tip");
function msAt(bin){ return (bin * TL.bin_ns / 1e6); }
function drawRow(canvas, counts, max, lost, color){
  const w = canvas.clientWidth || 600, h = canvas.clientHeight || 14, dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
  const g = canvas.getContext("2d"); g.scale(dpr, dpr);
  const n = counts.length, bw = w / n;
  for (let i = 0; i < n; i++){
    const c = counts[i]; if (!c) continue;
    const a = Math.sqrt(c / max);
    g.fillStyle = color(a); g.fillRect(i * bw, 0, Math.max(bw, 1), h);
  }
  g.fillStyle = "rgba(198,40,40,0.8)";
  for (const m of lost) g.fillRect(m[0] * bw, 0, Math.max(bw, 1.5), h);
}
function addRows(host, group, lost, hue){
  if (!group){ return; }
  const max = Math.max(1, ...group.counts.map(r => Math.max(0, ...r)));
  const color = a => "hsla(" + hue + ",75%," + (70 - 40 * a) + "%," + (0.25 + 0.75 * a) + ")";
  group.counts.forEach((counts, k) => {
    const row = document.createElement("div"); row.className = "tl-row";
    row.dataset.key = group.keys[k]; row.dataset.total = group.totals[k];
    row.innerHTML = "<span class=\"tl-label\" title=\"" + esc(group.labels[k]) + "\">" + esc(group.labels[k]) + "</span><canvas></canvas><span class=\"tl-total\">" + fmt(group.totals[k]) + "</span>";
    host.appendChild(row);
    const cv = row.querySelector("canvas");
    cv.__draw = () => drawRow(cv, counts, max, lost, color);
    cv.addEventListener("mousemove", e => {
      const r = cv.getBoundingClientRect(); const b = Math.min(counts.length - 1, Math.max(0, Math.floor((e.clientX - r.left) / r.width * counts.length)));
      const lm = lost.find(m => m[0] === b);
      tip.textContent = group.labels[k] + ": " + fmt(counts[b]) + " samples at " + msAt(b).toFixed(2) + "–" + msAt(b + 1).toFixed(2) + " ms" + (lm ? " — " + fmt(lm[1]) + " lost" : "");
      tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
      document.body.dataset.tip = tip.textContent;
    });
    cv.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  });
}
function hiddenNote(group){
  return group && group.hidden_rows ? "(" + group.hidden_rows + " quieter rows with " + fmt(group.hidden_samples) + " samples not shown)" : "";
}
if (!TL.available){
  $("threadsNote").textContent = TL.note; $("tlCpusSec").style.display = "none";
} else {
  addRows($("threads"), TL.threads, TL.lost, 210);
  $("threadsNote").textContent = hiddenNote(TL.threads);
  if (TL.cpus){ addRows($("cpus"), TL.cpus, TL.lost, 140); $("cpusNote").textContent = hiddenNote(TL.cpus); }
  else $("cpusNote").textContent = TL.cpu_note;
  // lost-sample markers
  const lr = document.createElement("div"); lr.className = "tl-row tl-lost";
  const lostTotal = TL.lost.reduce((s, m) => s + m[1], 0);
  lr.dataset.total = String(lostTotal);
  lr.innerHTML = "<span class=\"tl-label\">lost samples</span><canvas></canvas><span class=\"tl-total\">" + fmt(lostTotal) + "</span>";
  $("lostRow").appendChild(lr);
  const lc = lr.querySelector("canvas");
  lc.__draw = () => {
    const w = lc.clientWidth || 600, h = lc.clientHeight || 14, dpr = window.devicePixelRatio || 1;
    lc.width = Math.round(w * dpr); lc.height = Math.round(h * dpr);
    const g = lc.getContext("2d"); g.scale(dpr, dpr); g.fillStyle = "#c62828";
    for (const m of TL.lost){ const x = (m[0] + 0.5) * w / TL.nbins; g.beginPath(); g.moveTo(x, 1); g.lineTo(x - 4, h - 1); g.lineTo(x + 4, h - 1); g.fill(); }
  };
  lc.addEventListener("mousemove", e => {
    const r = lc.getBoundingClientRect(); const b = Math.floor((e.clientX - r.left) / r.width * TL.nbins);
    const m = TL.lost.find(x => Math.abs(x[0] - b) <= 2);
    tip.textContent = m ? fmt(m[1]) + " samples lost in " + m[2] + " record(s) at " + msAt(m[0]).toFixed(2) + " ms" : "no lost samples here";
    tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
  });
  lc.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  const span = (TL.t1 - TL.t0) / 1e6;
  $("axis").innerHTML = [0, 0.25, 0.5, 0.75, 1].map(f => "<span>" + (span * f).toFixed(span < 10 ? 2 : 0) + " ms</span>").join("");
  if (TL.lost_untimed) $("threadsNote").textContent += " " + fmt(TL.lost_untimed) + " lost samples carry no time (records written at the end) and are not marked.";
}
function redraw(){ for (const c of document.querySelectorAll("#timelines canvas")) if (c.__draw) c.__draw(); }
window.addEventListener("resize", redraw);
redraw();
document.body.dataset.ready = "1";
})();
</script></body></html>
"""
