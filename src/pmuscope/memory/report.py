"""``pmuscope mem report``: memory samples grouped the way ``perf mem report``
groups them — by data source (perf's "Memory access" text), snoop and TLB
result, by symbol and by data object — plus a latency histogram.

:func:`mem_report` returns plain dicts/lists (JSON-ready); :func:`format_report`
renders them as text. Shares are of total weight (perf mem report's
"Overhead" column is weight-based) and of sample count. Rows are keyed by
the printed text; perf keys its "Memory access" column by ``mem_lvl`` alone
(``sort__lvl_cmp``), so where two data sources share mem_lvl but differ in
level number (an L1-hit load and an L1-hit store) perf merges them under the
first one's text and this report does not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import datasrc as D
from .samples import MemSamples

__all__ = ["mem_report", "format_report", "latency_histogram", "group_by", "resolve_symbols"]


def latency_histogram(weight: np.ndarray, mask: np.ndarray | None = None) -> list[dict[str, int]]:
    """Samples per power-of-two latency bucket ``[lo, hi)`` (bucket 0 is ``[0, 1)``)."""
    w = np.asarray(weight, dtype=np.uint64)
    if mask is not None:
        w = w[mask]
    if not len(w):
        return []
    b = np.zeros(len(w), np.int64)
    nz = w > 0
    b[nz] = np.floor(np.log2(w[nz].astype(np.float64))).astype(np.int64) + 1
    counts = np.bincount(b)
    out = []
    for i, c in enumerate(counts):
        lo = 0 if i == 0 else 1 << (i - 1)
        hi = 1 if i == 0 else 1 << i
        out.append({"lo": lo, "hi": hi, "samples": int(c)})
    # trim empty leading buckets
    while out and out[0]["samples"] == 0:
        out.pop(0)
    return out


def group_by(keys: np.ndarray, weight: np.ndarray, *, top: int | None = None, key_name: str = "key",
             extra: dict[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """Rows ``{key, samples, weight, pct_weight, pct_samples, mean_weight}``
    sorted by weight then samples (descending)."""
    keys = np.asarray(keys)
    n = len(keys)
    if not n:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    inv = inv.reshape(-1)
    cnt = np.bincount(inv, minlength=len(uniq))
    wsum = np.bincount(inv, weights=np.asarray(weight, dtype=np.float64), minlength=len(uniq))
    total_w = float(wsum.sum()) or 1.0
    order = np.lexsort((-cnt, -wsum))
    if top is not None:
        order = order[:top]
    rows = []
    for k in order:
        row = {key_name: uniq[k].item() if hasattr(uniq[k], "item") else uniq[k], "samples": int(cnt[k]),
               "weight": int(wsum[k]), "pct_weight": 100.0 * wsum[k] / total_w, "pct_samples": 100.0 * cnt[k] / n,
               "mean_weight": float(wsum[k] / cnt[k])}
        if extra:
            for name, arr in extra.items():
                row[name] = arr[np.flatnonzero(inv == k)[0]].item() if hasattr(arr[0], "item") else arr[np.flatnonzero(inv == k)[0]]
        rows.append(row)
    return rows


def resolve_symbols(ms: MemSamples, symbolizer=None) -> tuple[np.ndarray, np.ndarray]:
    """``(symbol, dso)`` string arrays for each sample's ip: perf's ``[k]``/``[.]``
    names where the maps and binaries allow, else the hex address."""
    n = len(ms)
    if not n:
        return np.zeros(0, object), np.zeros(0, object)
    if symbolizer is None:
        from ..symbols import Symbolizer

        symbolizer = Symbolizer(ms.maps, kernel=False) if ms.maps is not None else None
    syms = np.empty(n, object)
    dsos = np.empty(n, object)
    if symbolizer is None:
        for i in range(n):
            syms[i] = f"{int(ms.ip[i]):#x}"
            dsos[i] = "[unknown]"
        return syms, dsos
    try:
        r = symbolizer.resolve_many(ms.pid, ms.ip, kernel=ms.kernel)
    except Exception:  # a broken binary must not hide the memory report
        r = None
    for i in range(n):
        if r is not None and int(r.sym_id[i]) >= 0:
            syms[i] = symbolizer.sym_name(int(r.sym_id[i]))
        else:
            syms[i] = f"{int(ms.ip[i]):#x}"
        if r is not None and int(r.dso_id[i]) >= 0:
            dsos[i] = symbolizer.dso_name(int(r.dso_id[i]))
        else:
            dsos[i] = "[kernel.kallsyms]" if ms.kernel[i] else "[unknown]"
    return syms, dsos


def mem_report(ms: MemSamples, *, top: int = 20, symbolizer=None, style: str = "new") -> dict[str, Any]:
    """Summary, by data source / snoop / TLB / lock, latency histograms, by
    symbol and by data object (JSON-ready dict)."""
    n = len(ms)
    load, store = ms.is_load, ms.is_store
    w = ms.weight
    lvl = D.texts(ms.data_src, D.lvl_text, style=style)
    snp = D.texts(ms.data_src, D.snoop_text)
    tlb = D.texts(ms.data_src, D.tlb_text)
    lck = D.texts(ms.data_src, D.lock_text)
    op = D.texts(ms.data_src, D.op_text)
    syms, dsos = resolve_symbols(ms, symbolizer)
    sym_key = np.array([f"{'[k]' if k else '[.]'} {s}" for s, k in zip(syms, ms.kernel)], dtype=object) if n else syms
    lw = w[load] if n else w
    summary = {
        "samples": n,
        "loads": int(load.sum()),
        "stores": int(store.sum()),
        "other": int(n - load.sum() - store.sum()),
        "total_weight": int(w.sum()),
        "mean_load_latency": float(lw.mean()) if len(lw) else 0.0,
        "median_load_latency": float(np.median(lw)) if len(lw) else 0.0,
        "p99_load_latency": float(np.percentile(lw, 99)) if len(lw) else 0.0,
        "with_addr": int((ms.addr != 0).sum()),
        "with_phys_addr": int((ms.phys_addr != 0).sum()),
        "source": ms.source,
    }
    summary.update({k: v for k, v in ms.meta.items() if k in ("path", "events", "midr")})
    return {
        "summary": summary,
        "by_op": group_by(op, w, key_name="op"),
        "by_data_source": group_by(lvl, w, key_name="data_source"),
        "by_snoop": group_by(snp, w, key_name="snoop"),
        "by_tlb": group_by(tlb, w, key_name="tlb"),
        "by_lock": group_by(lck, w, key_name="locked"),
        "load_latency_histogram": latency_histogram(w, load),
        "store_latency_histogram": latency_histogram(w, store),
        "by_symbol": group_by(sym_key, w, top=top, key_name="symbol", extra={"dso": dsos}) if n else [],
        "by_data_object": group_by(ms.dobj_name_array(), w, top=top, key_name="data_object"),
    }


def _table(rows: list[dict], key: str, title: str, width: int = 40) -> list[str]:
    out = [f"# {title}", f"# {'Overhead':>9} {'Samples':>9} {'Avg lat':>9}  {key}"]
    for r in rows:
        label = r[key] + (f"  ({r['dso']})" if "dso" in r else "")
        out.append(f"  {r['pct_weight']:8.2f}% {r['samples']:9d} {r['mean_weight']:9.1f}  {label}")
    out.append("")
    return out


def format_report(rep: dict[str, Any]) -> str:
    """Text rendering of :func:`mem_report`."""
    s = rep["summary"]
    lines = [
        f"# Memory samples: {s['samples']} ({s['loads']} loads, {s['stores']} stores, {s['other']} other)"
        + (f" from {s['path']}" if s.get("path") else ""),
        f"# Total weight: {s['total_weight']}   load latency: mean {s['mean_load_latency']:.1f}, "
        f"median {s['median_load_latency']:.0f}, p99 {s['p99_load_latency']:.0f} cycles",
        "",
    ]
    lines += _table(rep["by_data_source"], "data_source", "Memory access (data source)")
    lines += _table(rep["by_snoop"], "snoop", "Snoop")
    lines += _table(rep["by_tlb"], "tlb", "TLB access")
    for name, title in (("load_latency_histogram", "Load latency (cycles)"), ("store_latency_histogram", "Store latency (cycles)")):
        hist = rep[name]
        if not hist:
            continue
        peak = max(b["samples"] for b in hist) or 1
        lines.append(f"# {title}")
        for b in hist:
            bar = "#" * max(1 if b["samples"] else 0, round(40 * b["samples"] / peak))
            lines.append(f"  [{b['lo']:>6}, {b['hi']:>6}) {b['samples']:8d} {bar}")
        lines.append("")
    lines += _table(rep["by_symbol"], "symbol", "By symbol")
    lines += _table(rep["by_data_object"], "data_object", "By data object")
    return "\n".join(lines)
