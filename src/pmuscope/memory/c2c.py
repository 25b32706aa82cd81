"""``pmuscope c2c``: perf c2c's false-sharing analysis from any memory samples.

Every sample is classified as perf's ``c2c_decode_stats`` does
(tools/perf/util/mem-events.c): loads by where they hit (fill buffer, L1, L2,
LLC, local HITM, remote hit/HITM, local/remote DRAM, peer snoops), stores by
L1 hit/miss/N/A. Samples are then grouped by data cache line (``addr &
~(line_size - 1)``, 64 bytes or 128 with ``line_size=128`` — perf's
``--double-cl``) and the lines that saw contention are ranked: by HITM count
(x86: a load hit a line another core held modified) or by peer-snoop count
(Arm SPE, where the data source says "served by a peer core/cluster";
``perf c2c report -d peer``, the arm64 default). Each line lists its offsets
with the pids, code addresses (with symbols), CPUs and latencies touching it
(perf's "Shared Cache Line Distribution Pareto", coalesced by pid and iaddr).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import datasrc as D
from .samples import MemSamples

__all__ = ["classify", "c2c_analyze", "C2CResult", "format_c2c", "STAT_NAMES"]

#: per-sample counters, in perf's ``struct c2c_stats`` names
STAT_NAMES = ("load", "store", "ld_noadrs", "st_noadrs", "ld_fbhit", "ld_l1hit", "ld_l2hit", "ld_llchit",
              "lcl_hitm", "rmt_hitm", "rmt_hit", "lcl_peer", "rmt_peer", "lcl_dram", "rmt_dram", "ld_uncache",
              "ld_io", "ld_miss", "st_l1hit", "st_l1miss", "st_na", "st_uncache", "locks", "blk_data",
              "blk_addr", "noparse", "tot_hitm", "tot_peer")


def classify(data_src: np.ndarray, addr: np.ndarray) -> dict[str, np.ndarray]:
    """Boolean arrays, one per :data:`STAT_NAMES` counter, like ``c2c_decode_stats``."""
    f = D.decode(data_src)
    addr = np.asarray(addr, dtype=np.uint64)
    op, lvl, snoop, snoopx = f.op.astype(np.uint32), f.lvl.astype(np.uint32), f.snoop, f.snoopx
    has = addr != 0
    load = (op & D.OP_LOAD) != 0
    store = ~load & ((op & D.OP_STORE) != 0)
    mrem = (f.remote != 0) & (f.hops == 0)
    L = load & has
    S = store & has
    hit = (lvl & D.LVL_HIT) != 0
    peer = (snoopx & D.SNOOPX_PEER) != 0
    hitm = (snoop & D.SNOOP_HITM) != 0
    snp_hit = (snoop & D.SNOOP_HIT) != 0
    l3 = L & hit & ((lvl & D.LVL_L3) != 0)
    l2 = L & hit & ((lvl & D.LVL_L2) != 0)
    rem_cce = L & (((lvl & (D.LVL_REM_CCE1 | D.LVL_REM_CCE2)) != 0) | mrem)
    out = {
        "load": load, "store": store,
        "ld_noadrs": load & ~has, "st_noadrs": store & ~has,
        "ld_fbhit": L & hit & ((lvl & D.LVL_LFB) != 0),
        "ld_l1hit": L & hit & ((lvl & D.LVL_L1) != 0),
        "ld_l2hit": l2,
        "ld_llchit": l3 & ~hitm,
        "lcl_hitm": l3 & hitm,
        "rmt_hit": rem_cce & (snp_hit | (~hitm & peer)),
        "rmt_hitm": rem_cce & ~snp_hit & hitm,
        "lcl_peer": (l2 & peer) | (l3 & peer),
        "rmt_peer": rem_cce & ~snp_hit & ~hitm & peer,
        "lcl_dram": L & hit & ((lvl & D.LVL_LOC_RAM) != 0),
        "rmt_dram": L & hit & ((((lvl & (D.LVL_REM_RAM1 | D.LVL_REM_RAM2)) != 0)) | mrem),
        "ld_uncache": L & hit & ((lvl & D.LVL_UNC) != 0),
        "ld_io": L & hit & ((lvl & D.LVL_IO) != 0),
        "ld_miss": L & ((lvl & D.LVL_MISS) != 0),
        "st_l1hit": S & hit & ((lvl & D.LVL_L1) != 0),
        "st_l1miss": S & ((lvl & D.LVL_MISS) != 0) & ((lvl & D.LVL_L1) != 0),
        "st_na": S & ((lvl & D.LVL_NA) != 0),
        "st_uncache": S & hit & ((lvl & D.LVL_UNC) != 0),
        "locks": (f.lock & D.LOCK_LOCKED) != 0,
        "blk_data": (f.blk & D.BLK_DATA) != 0,
        "blk_addr": (f.blk & D.BLK_ADDR) != 0,
        "noparse": ~load & ~store,
    }
    # l2 peers count once even when both L2 and L3 bits are set, as PEER_INC per level does twice; keep perf's sum
    out["lcl_peer"] = (l2 & peer).astype(np.int64) + (l3 & peer).astype(np.int64)
    out["tot_hitm"] = out["lcl_hitm"].astype(np.int64) + out["rmt_hitm"].astype(np.int64)
    out["tot_peer"] = out["lcl_peer"] + out["rmt_peer"].astype(np.int64)
    return out


@dataclass
class C2CResult:
    """Output of :func:`c2c_analyze`: ``lines`` (ranked shared cache lines,
    each with its ``offsets``), ``totals`` (every counter over all samples),
    ``mode`` ("hitm" or "peer"), ``line_size``."""

    lines: list[dict[str, Any]]
    totals: dict[str, int]
    mode: str
    line_size: int
    samples: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "line_size": self.line_size, "samples": self.samples, "totals": self.totals,
                "shared_lines": self.lines, **self.extra}


def _sum_by(inv: np.ndarray, k: int, arr) -> np.ndarray:
    return np.bincount(inv, weights=np.asarray(arr, dtype=np.float64), minlength=k).astype(np.int64)


def _distinct_by(inv: np.ndarray, k: int, values: np.ndarray) -> np.ndarray:
    """Number of distinct ``values`` per group (one 1-D unique on a combined key)."""
    if not len(inv):
        return np.zeros(k, np.int64)
    v = np.asarray(values).astype(np.int64)
    _, vcode = np.unique(v, return_inverse=True)
    nv = int(vcode.max()) + 1
    pairs = np.unique(inv.astype(np.int64) * nv + vcode.reshape(-1))
    return np.bincount(pairs // nv, minlength=k)


def c2c_analyze(ms: MemSamples, *, line_size: int = 64, mode: str = "auto", top: int = 20,
                max_offsets: int = 16, symbols=None) -> C2CResult:
    """Rank the cache lines with contention (see the module docstring).

    ``mode``: "hitm"/"tot" (perf c2c ``-d tot``), "lcl" or "rmt" (local or
    remote HITMs only), "peer" (``-d peer``) or "auto" (peer when the samples
    carry peer snoops but no HITM, as SPE data does).
    ``symbols``: an array of symbol names per sample (else hex ips)."""
    if line_size not in (64, 128):
        from ..errors import PmuscopeError

        raise PmuscopeError(f"cache line size must be 64 or 128 bytes, got {line_size}")
    n = len(ms)
    st = classify(ms.data_src, ms.addr)
    totals = {k: int(np.asarray(v).sum()) for k, v in st.items()}
    if mode == "auto":
        mode = "peer" if totals["tot_peer"] and not totals["tot_hitm"] else "hitm"
    metric_name = {"hitm": "tot_hitm", "tot": "tot_hitm", "lcl": "lcl_hitm", "rmt": "rmt_hitm",
                   "peer": "tot_peer"}.get(mode)
    if metric_name is None:
        from ..errors import PmuscopeError

        raise PmuscopeError(f"c2c display mode must be auto, hitm (tot), lcl, rmt or peer, got {mode!r}")
    mode = "peer" if mode == "peer" else "hitm"
    metric = np.asarray(st[metric_name]).astype(np.int64)
    valid = (st["load"] | st["store"]) & (ms.addr != 0)
    idx = np.flatnonzero(valid)
    mask = np.uint64(~(line_size - 1) & 0xFFFFFFFFFFFFFFFF)
    line = ms.addr[idx] & mask
    if not len(idx):
        return C2CResult([], totals, mode, line_size, n)
    lines_u, inv = np.unique(line, return_inverse=True)
    inv = inv.reshape(-1)
    k = len(lines_u)
    m_line = _sum_by(inv, k, metric[idx])
    cand = np.flatnonzero(m_line > 0)
    total_metric = int(m_line.sum()) or 1
    records = np.bincount(inv, minlength=k)
    cols = {name: _sum_by(inv, k, st[name][idx]) for name in
            ("load", "store", "ld_fbhit", "ld_l1hit", "ld_l2hit", "ld_llchit", "lcl_hitm", "rmt_hitm", "rmt_hit",
             "lcl_peer", "rmt_peer", "lcl_dram", "rmt_dram", "st_l1hit", "st_l1miss", "st_na", "tot_hitm", "tot_peer")}
    cpus = _distinct_by(inv, k, ms.cpu[idx])
    pids = _distinct_by(inv, k, ms.pid[idx])
    pa_cnt = _distinct_by(inv, k, (ms.phys_addr[idx] & mask).astype(np.int64))
    has_pa = _sum_by(inv, k, ms.phys_addr[idx] != 0)
    load_w = _sum_by(inv, k, np.where(st["load"][idx], ms.weight[idx], 0))
    node = ms.node
    order = cand[np.lexsort((-records[cand], -cols["store"][cand], -m_line[cand]))][:top]

    rows = []
    for rank, li in enumerate(order):
        sel = idx[inv == li]
        row: dict[str, Any] = {
            "index": rank, "address": int(lines_u[li]), "pct": 100.0 * m_line[li] / total_metric,
            mode: int(m_line[li]), "records": int(records[li]), "cpus": int(cpus[li]), "pids": int(pids[li]),
            "pa_cnt": int(pa_cnt[li]) if has_pa[li] else 0,
            "nodes": sorted({int(x) for x in node[sel]} - {-1}),
            "mean_load_latency": float(load_w[li] / cols["load"][li]) if cols["load"][li] else 0.0,
        }
        row.update({name: int(v[li]) for name, v in cols.items()})
        row["offsets"] = _offsets(ms, st, sel, line_size, metric, mode, symbols, max_offsets, node)
        rows.append(row)
    extra = {"shared_lines_total": int(len(cand)), "metric_total": int(m_line.sum())}
    return C2CResult(rows, totals, mode, line_size, n, extra)


def _offsets(ms, st, sel, line_size, metric, mode, symbols, max_offsets, node) -> list[dict[str, Any]]:
    """Per (offset, pid, code address) rows of one line with contention or
    stores (perf c2c's Pareto shows no others):
    counts and shares of the line's local/remote HITMs (or peers) and of its
    L1-hit/L1-miss/N/A stores, and mean cycles per class in perf's priority
    (remote HITM, local HITM, remote peer, local peer, other loads)."""
    off = (ms.addr[sel] & np.uint64(line_size - 1)).astype(np.int64)
    key = np.stack([off, ms.pid[sel].astype(np.int64), ms.ip[sel].view(np.int64)])
    uk, inv = np.unique(key, axis=1, return_inverse=True)  # rows of one line only: small
    inv = inv.reshape(-1)
    k = uk.shape[1]
    m = _sum_by(inv, k, metric[sel])
    names = ("rmt_hitm", "lcl_hitm", "rmt_peer", "lcl_peer", "st_l1hit", "st_l1miss", "st_na", "store", "load")
    cnt = {nm: _sum_by(inv, k, np.asarray(st[nm])[sel]) for nm in names}
    tot = {nm: int(v.sum()) for nm, v in cnt.items()}
    tot_m = int(m.sum()) or 1
    # perf's compute_stats: each sample's weight counts in the first class it belongs to
    w = ms.weight[sel].astype(np.float64)
    left = np.ones(len(sel), bool)
    cycles = {}
    for nm in ("rmt_hitm", "lcl_hitm", "rmt_peer", "lcl_peer", "load"):
        cls = left & (np.asarray(st[nm])[sel] > 0)
        left &= ~cls
        n_cls = np.bincount(inv, weights=cls, minlength=k)
        w_cls = np.bincount(inv, weights=np.where(cls, w, 0.0), minlength=k)
        cycles[nm] = np.divide(w_cls, n_cls, out=np.zeros(k), where=n_cls > 0)
    cpus = _distinct_by(inv, k, ms.cpu[sel])
    records = np.bincount(inv, minlength=k)
    out = []
    order = np.lexsort((-cnt["load"], -cnt["store"], -m))
    # as perf's valid_hitm_or_store(): only rows that saw contention or stores
    order = order[(m[order] > 0) | (cnt["store"][order] > 0)]
    for j in order[:max_offsets]:
        first = sel[np.flatnonzero(inv == j)[0]]
        row = {
            "offset": int(uk[0, j]), "pid": int(uk[1, j]), "ip": int(np.int64(uk[2, j]).view(np.uint64)),
            "symbol": str(symbols[first]) if symbols is not None else f"{int(ms.ip[first]):#x}",
            mode: int(m[j]), "pct_" + mode: 100.0 * m[j] / tot_m, "records": int(records[j]),
            "stores": int(cnt["store"][j]), "pct_stores": 100.0 * cnt["store"][j] / (tot["store"] or 1),
            "loads": int(cnt["load"][j]), "cpus": int(cpus[j]),
            "tids": sorted({int(t) for t in ms.tid[sel][inv == j]})[:8],
            "nodes": sorted({int(x) for x in node[sel][inv == j]} - {-1}),
            "mean_load_latency": float(cycles["load"][j]),
        }
        for nm in ("rmt_hitm", "lcl_hitm", "rmt_peer", "lcl_peer", "st_l1hit", "st_l1miss", "st_na"):
            row[nm] = int(cnt[nm][j])
            row["pct_" + nm] = 100.0 * cnt[nm][j] / tot[nm] if tot[nm] else 0.0
        for nm in ("rmt_hitm", "lcl_hitm", "rmt_peer", "lcl_peer", "load"):
            row["cycles_" + nm] = float(cycles[nm][j])
        out.append(row)
    return out


def format_c2c(res: C2CResult) -> str:
    """perf c2c-like text: trace event totals, the Shared Data Cache Line Table
    and the per-offset Pareto."""
    t = res.totals
    label = "Hitm" if res.mode == "hitm" else "Peer Snoop"
    out = [
        "=================================================",
        "            Trace Event Information",
        "=================================================",
    ]
    for name, key in (("Total records", None), ("Locked Load/Store Operations", "locks"), ("Load Operations", "load"),
                      ("Loads - uncacheable", "ld_uncache"), ("Loads - IO", "ld_io"), ("Loads - Miss", "ld_miss"),
                      ("Loads - no mapping", "ld_noadrs"), ("Load Fill Buffer Hit", "ld_fbhit"),
                      ("Load L1D hit", "ld_l1hit"), ("Load L2D hit", "ld_l2hit"), ("Load LLC hit", "llc_total"),
                      ("Load Local HITM", "lcl_hitm"), ("Load Remote HITM", "rmt_hitm"),
                      ("Load Remote HIT", "rmt_hit"), ("Load Local Peer", "lcl_peer"), ("Load Remote Peer", "rmt_peer"),
                      ("Load Local DRAM", "lcl_dram"), ("Load Remote DRAM", "rmt_dram"),
                      ("Store Operations", "store"), ("Store - uncacheable", "st_uncache"),
                      ("Store - no mapping", "st_noadrs"), ("Store L1D Hit", "st_l1hit"),
                      ("Store L1D Miss", "st_l1miss"), ("Store No available memory level", "st_na"),
                      ("Unable to parse data source", "noparse")):
        if key == "llc_total":  # perf prints LLC hits including local HITMs
            val = t.get("ld_llchit", 0) + t.get("lcl_hitm", 0)
        else:
            val = res.samples if name == "Total records" else (t.get(key, 0) if key else 0)
        out.append(f"  {name:<40}: {val:10d}")
    out += ["", "=================================================",
            f"           Shared Data Cache Line Table   ({res.mode}, {res.line_size}-byte lines)",
            "=================================================",
            f"  Total shared cache lines: {res.extra.get('shared_lines_total', 0)}   total {label}: {res.extra.get('metric_total', 0)}",
            ""]
    hdr = (f"  {'Index':>5}  {'Cacheline':>18}  {'PA cnt':>6}  {label + ' %':>11}  {label:>10}  {'Records':>7}  "
           f"{'Loads':>6}  {'Stores':>6}  {'St L1Hit':>8}  {'St L1Miss':>9}  {'St N/A':>6}  {'CPUs':>4}  {'Pids':>4}  {'Ld lat':>7}  Node")
    out.append(hdr)
    for r in res.lines:
        out.append(f"  {r['index']:>5}  {r['address']:#18x}  {r['pa_cnt']:>6}  {r['pct']:>10.2f}%  {r[res.mode]:>10}  "
                   f"{r['records']:>7}  {r['load']:>6}  {r['store']:>6}  {r['st_l1hit']:>8}  {r['st_l1miss']:>9}  "
                   f"{r['st_na']:>6}  {r['cpus']:>4}  {r['pids']:>4}  {r['mean_load_latency']:>7.1f}  "
                   f"{','.join(map(str, r['nodes'])) or 'N/A'}")
    if not res.lines:
        out.append(f"  (no cache line with {label} — no sharing seen)")
    out += ["", "=================================================",
            "      Shared Cache Line Distribution Pareto",
            "=================================================", ""]
    rl = ("rmt_hitm", "lcl_hitm") if res.mode == "hitm" else ("rmt_peer", "lcl_peer")
    head = ("RmtHitm", "LclHitm") if res.mode == "hitm" else ("RmtPeer", "LclPeer")
    for r in res.lines:
        out.append(f"  #{r['index']}  cacheline {r['address']:#x}   {label} {r[res.mode]}  stores {r['store']}  "
                   f"loads {r['load']}")
        out.append(f"    {head[0]:>8} {head[1]:>8} {'L1 Hit':>8} {'L1 Miss':>8} {'N/A':>8}  {'Offset':>6}  {'Pid':>7}  "
                   f"{'Code address':>18}  {'cyc rmt':>7} {'cyc lcl':>7} {'cyc ld':>7}  {'Records':>7}  {'CPUs':>4}  Symbol")
        for o in r["offsets"]:
            out.append(f"    {o['pct_' + rl[0]]:>7.2f}% {o['pct_' + rl[1]]:>7.2f}% {o['pct_st_l1hit']:>7.2f}% "
                       f"{o['pct_st_l1miss']:>7.2f}% {o['pct_st_na']:>7.2f}%  {o['offset']:#6x}  {o['pid']:>7}  "
                       f"{o['ip']:#18x}  {o['cycles_' + rl[0]]:>7.0f} {o['cycles_' + rl[1]]:>7.0f} "
                       f"{o['cycles_load']:>7.0f}  {o['records']:>7}  {o['cpus']:>4}  {o['symbol']}")
        out.append("")
    return "\n".join(out)
