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
             extra: dict[str, np.ndarray] | None = None, labels: list | None = None) -> list[dict[str, Any]]:
    """Rows ``{key, samples, weight, pct_weight, pct_samples, mean_weight}``
    sorted by weight then samples (descending). ``keys`` are labels, or
    integer codes into ``labels`` (faster: no sort of strings)."""
    keys = np.asarray(keys)
    n = len(keys)
    if not n:
        return []
    if labels is None:
        uniq, inv = np.unique(keys, return_inverse=True)
        names = list(uniq)
    else:  # dense codes: no sort needed
        keys = keys.astype(np.int64)
        shift = 1 if (keys < 0).any() else 0  # -1 = unknown data object
        present = np.flatnonzero(np.bincount(keys + shift))
        remap = np.full(int(present[-1]) + 1, -1, np.int64)
        remap[present] = np.arange(len(present))
        inv = remap[keys + shift]
        names = [labels[int(c) - shift] for c in present]
    inv = inv.reshape(-1)
    k = len(names)
    cnt = np.bincount(inv, minlength=k)
    wsum = np.bincount(inv, weights=np.asarray(weight, dtype=np.float64), minlength=k)
    total_w = float(wsum.sum()) or 1.0
    order = np.lexsort((-cnt, -wsum))
    if top is not None:
        order = order[:top]
    first = np.full(k, n, np.int64)
    np.minimum.at(first, inv, np.arange(n))
    rows = []
    for j in order:
        name = names[j]
        row = {key_name: name.item() if hasattr(name, "item") else name, "samples": int(cnt[j]), "weight": int(wsum[j]),
               "pct_weight": 100.0 * wsum[j] / total_w, "pct_samples": 100.0 * cnt[j] / n,
               "mean_weight": float(wsum[j] / cnt[j])}
        for xname, arr in (extra or {}).items():
            v = arr[first[j]]
            row[xname] = v.item() if hasattr(v, "item") else v
        rows.append(row)
    return rows


def _text_codes(values, fn, **kw) -> tuple[np.ndarray, list[str]]:
    """Codes and labels of ``fn(value)`` computed once per distinct value;
    ``values`` may be ``(uniq, inv)`` from an earlier ``np.unique``."""
    if isinstance(values, tuple):
        uniq, inv = values
    else:
        uniq, inv = np.unique(np.asarray(values, dtype=np.uint64), return_inverse=True)
    texts = [fn(int(u), **kw) for u in uniq]
    labels: list[str] = []
    index: dict[str, int] = {}
    codes = np.array([index.setdefault(t, len(index)) for t in texts], np.int64)
    labels = list(index)
    return (codes[inv.reshape(-1)] if len(uniq) else np.zeros(0, np.int64)), labels


def _resolve_unique(ms: MemSamples, symbolizer=None):
    """Resolve each distinct (pid, ip, kernel) once: ``(inv, syms, dsos, kernel)``
    with the per-distinct arrays and ``inv`` mapping samples onto them."""
    uips, ip_code = np.unique(ms.ip, return_inverse=True)
    upids, pid_code = np.unique(ms.pid, return_inverse=True)
    key = (ip_code.reshape(-1).astype(np.int64) * len(upids) + pid_code.reshape(-1)) * 2 + ms.kernel
    ukey, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    ukern = (ukey & 1).astype(bool)
    upid = upids[(ukey >> 1) % len(upids)].astype(np.int64)
    uip = uips[(ukey >> 1) // len(upids)].astype(np.uint64)
    syms = np.array([f"{int(x):#x}" for x in uip], dtype=object)
    dsos = np.where(ukern, "[kernel.kallsyms]", "[unknown]").astype(object)
    if symbolizer is None and ms.maps is not None:
        from ..symbols import Symbolizer

        symbolizer = Symbolizer(ms.maps, kernel=False)
    if symbolizer is not None:
        try:
            r = symbolizer.resolve_many(upid, uip, kernel=ukern)
        except Exception:  # noqa: BLE001 - an unreadable binary must not hide the memory report
            r = None
        if r is not None:
            for i in np.flatnonzero(np.asarray(r.sym_id) >= 0):
                syms[i] = symbolizer.sym_name(int(r.sym_id[i]))
            for i in np.flatnonzero(np.asarray(r.dso_id) >= 0):
                dsos[i] = symbolizer.dso_name(int(r.dso_id[i]))
    return inv, syms, dsos, ukern


def resolve_symbols(ms: MemSamples, symbolizer=None) -> tuple[np.ndarray, np.ndarray]:
    """``(symbol, dso)`` string arrays for each sample's ip, resolved through
    the recording's maps (each distinct (pid, ip) once); unresolved ips print
    as hex, their DSO as ``[unknown]`` (or ``[kernel.kallsyms]`` for kernel ips)."""
    if not len(ms):
        return np.zeros(0, object), np.zeros(0, object)
    inv, syms, dsos, _ = _resolve_unique(ms, symbolizer)
    return syms[inv], dsos[inv]


class _DobjLabels:
    """``dobj`` code -> name, with -1 = ``[unknown]``."""

    def __init__(self, names):
        self.names = names

    def __getitem__(self, code: int) -> str:
        return self.names[code] if code >= 0 else "[unknown]"


def mem_report(ms: MemSamples, *, top: int = 20, symbolizer=None, style: str = "new") -> dict[str, Any]:
    """Summary, by data source / snoop / TLB / lock, latency histograms, by
    symbol and by data object (JSON-ready dict)."""
    n = len(ms)
    load, store = ms.is_load, ms.is_store
    w = ms.weight
    ds = np.unique(ms.data_src, return_inverse=True)
    lvl = _text_codes(ds, D.lvl_text, style=style)
    snp = _text_codes(ds, D.snoop_text)
    tlb = _text_codes(ds, D.tlb_text)
    lck = _text_codes(ds, D.lock_text)
    op = _text_codes(ds, D.op_text)
    if n:
        inv, usyms, udsos, ukern = _resolve_unique(ms, symbolizer)
        index: dict[str, int] = {}
        ucodes = np.array([index.setdefault(f"{'[k]' if k else '[.]'} {sname}", len(index))
                           for sname, k in zip(usyms, ukern)], np.int64)
        sym_labels = list(index)
        sym_codes = ucodes[inv]
        dsos = udsos[inv]
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
    if ms.source == "spe":
        from .spe import ds_table_for_midr, midr_name

        midrs = ms.meta.get("midr", [])
        summary["spe_tables"] = {midr_name(m): str(ds_table_for_midr([m])[0]) for m in midrs}
    return {
        "summary": summary,
        "by_op": group_by(op[0], w, key_name="op", labels=op[1]),
        "by_data_source": group_by(lvl[0], w, key_name="data_source", labels=lvl[1]),
        "by_snoop": group_by(snp[0], w, key_name="snoop", labels=snp[1]),
        "by_tlb": group_by(tlb[0], w, key_name="tlb", labels=tlb[1]),
        "by_lock": group_by(lck[0], w, key_name="locked", labels=lck[1]),
        "load_latency_histogram": latency_histogram(w, load),
        "store_latency_histogram": latency_histogram(w, store),
        "by_symbol": group_by(sym_codes, w, top=top, key_name="symbol", extra={"dso": dsos}, labels=sym_labels) if n else [],
        "by_data_object": group_by(ms.dobj, w, top=top, key_name="data_object",
                                   labels=_DobjLabels(ms.dobj_names)),
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
    ]
    for cpu, table in (s.get("spe_tables") or {}).items():
        how = ("no data-source table for this CPU: levels come from the events packet (give --midr)"
               if table == "fallback" else f"{table} data-source table")
        lines.append(f"# SPE records of {cpu}: {how}")
    lines.append("")
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


#: ``--sort`` keys of perf mem report this module groups by, with what perf compares
SORT_KEYS = ("mem", "snoop", "tlb", "locked", "blocked", "op", "dso_daddr", "sym", "dso", "local_weight",
             "local_ins_lat", "pid")


def sort_table(ms: MemSamples, keys: str | list[str] = "mem", *, style: str = "new", symbolizer=None,
               top: int | None = None) -> list[dict[str, Any]]:
    """perf mem report's table for a ``--sort`` key list: samples grouped by the
    combination of keys, rows ``{pct_weight, samples, weight, <key>: label}``
    sorted by weight.

    Grouping follows perf's compare functions, which look at one
    ``perf_mem_data_src`` field per key (``mem``: mem_lvl, ``snoop``:
    mem_snoop, ``tlb``: mem_dtlb, ``locked``: mem_lock, ``blocked``:
    mem_blk, ``op``: mem_op) and print the text of the group's first sample —
    so ``--sort=mem`` here equals perf's column even where two level numbers
    share a mem_lvl value. ``dso_daddr`` is the data object, ``sym``/``dso``
    the code symbol and its DSO, ``local_weight``/``local_ins_lat`` the raw
    latencies, ``pid`` the process."""
    if isinstance(keys, str):
        keys = [k.strip() for k in keys.split(",") if k.strip()]
    bad = [k for k in keys if k not in SORT_KEYS]
    if bad:
        from ..errors import PmuscopeError

        raise PmuscopeError(f"unknown sort key {bad[0]!r}: use one or more of {', '.join(SORT_KEYS)}")
    n = len(ms)
    if not n or not keys:
        return []
    field_of = {"mem": "lvl", "snoop": "snoop", "tlb": "dtlb", "locked": "lock", "blocked": "blk", "op": "op"}
    text_of = {"mem": lambda v: D.lvl_text(v, style), "snoop": D.snoop_text, "tlb": D.tlb_text,
               "locked": D.lock_text, "blocked": lambda v: D.blk_text(v).strip(), "op": D.op_text}
    syms = dsos = None
    if {"sym", "dso"} & set(keys):
        inv, usyms, udsos, ukern = _resolve_unique(ms, symbolizer)
        syms = np.array([f"{'[k]' if k else '[.]'} {s}" for s, k in zip(usyms, ukern)], dtype=object)[inv]
        dsos = udsos[inv]
    codes = []
    for k in keys:
        if k in field_of:
            c = D.field(ms.data_src, field_of[k]).astype(np.int64)
        elif k == "dso_daddr":
            c = ms.dobj.astype(np.int64) + 1
        elif k == "local_weight":
            c = np.unique(ms.weight, return_inverse=True)[1].reshape(-1)
        elif k == "local_ins_lat":
            c = np.unique(ms.ins_lat, return_inverse=True)[1].reshape(-1)
        elif k == "pid":
            c = np.unique(ms.pid, return_inverse=True)[1].reshape(-1)
        else:  # sym, dso
            c = np.unique(syms if k == "sym" else dsos, return_inverse=True)[1].reshape(-1)
        codes.append(np.asarray(c, np.int64))
    combined = np.zeros(n, np.int64)
    for c in codes:
        combined = np.unique(combined * (int(c.max()) + 1) + c, return_inverse=True)[1].reshape(-1)
    k_groups = int(combined.max()) + 1
    cnt = np.bincount(combined, minlength=k_groups)
    w = np.bincount(combined, weights=ms.weight.astype(np.float64), minlength=k_groups)
    first = np.full(k_groups, n, np.int64)
    np.minimum.at(first, combined, np.arange(n))
    total = float(w.sum()) or 1.0
    order = np.lexsort((-cnt, -w))
    if top is not None:
        order = order[:top]
    dobj_names = ms.dobj_name_array() if "dso_daddr" in keys else None
    rows = []
    for g in order:
        i = int(first[g])
        row: dict[str, Any] = {"pct_weight": 100.0 * w[g] / total, "samples": int(cnt[g]), "weight": int(w[g])}
        for k in keys:
            if k in text_of:
                row[k] = text_of[k](int(ms.data_src[i]))
            elif k == "dso_daddr":
                row[k] = str(dobj_names[i])
            elif k == "local_weight":
                row[k] = int(ms.weight[i])
            elif k == "local_ins_lat":
                row[k] = int(ms.ins_lat[i])
            elif k == "pid":
                row[k] = int(ms.pid[i])
            elif k == "sym":
                row[k] = str(syms[i])
            elif k == "dso":
                row[k] = str(dsos[i])
        rows.append(row)
    return rows


def format_sort_table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    """Text like perf mem report --stdio for :func:`sort_table` rows."""
    if isinstance(keys, str):
        keys = [k.strip() for k in keys.split(",") if k.strip()]
    widths = {k: max([len(k)] + [len(str(r[k])) for r in rows]) for k in keys}
    head = f"# {'Overhead':>8}  {'Samples':>12}  " + "  ".join(f"{k:<{widths[k]}}" for k in keys)
    out = [head, "#"]
    for r in rows:
        out.append(f"  {r['pct_weight']:7.2f}%  {r['samples']:>12}  " + "  ".join(f"{str(r[k]):<{widths[k]}}" for k in keys))
    return "\n".join(out)
