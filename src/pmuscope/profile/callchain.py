"""Call graphs under report rows, as ``perf report -g`` builds them.

perf appends every sample's call chain to a tree per report entry
(``callchain_append`` in tools/perf/util/callchain.c), then prunes branches
below a minimum share and draws what is left. This module builds the same
trees from the Profile's already-symbolized chains, with numpy:

* which chains go under which row follows perf's ``hist_entry_iter``: without
  ``--children`` a row gets the whole chain of every sample whose leaf it is;
  with ``--children`` it also gets, from every sample whose chain passes
  through it, the part of the chain from its first occurrence on (in display
  order), once per sample even under recursion;
* chain entries are told apart as perf's ``match_chain`` does for the
  ``function`` key: a resolved frame by its symbol (so every address in one
  function is one entry), an unresolved one by (DSO, address);
* samples with the same row and the same chain are merged first (a hash of
  each chain, checked entry by entry), so the cost is per distinct chain, not
  per sample;
* the trees are built one depth at a time over all rows at once, and a
  branch is dropped as soon as it falls below the threshold: nothing under
  it could be shown (perf's ``graph``/``flat``/``folded`` threshold is a share
  of the event total, ``fractal``'s a share of the parent's callees).

Each :class:`CallNode` is one chain entry; perf's radix nodes (a run of
entries every sample passes through in full) are rebuilt when drawing, from
``branches`` (children before pruning) and ``self_samples``.
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import dataclass, field

import numpy as np

from ..errors import PmuscopeError
from .model import Profile, ragged_index, uniq_first, uniq_inv

#: print types, in the order perf matches a prefix against them (parse_callchain_mode)
MODES = ("graph", "flat", "fractal", "folded")
ORDERS = ("callee", "caller")
VALUES = ("percent", "period", "count")
#: what ``-g`` alone means to perf report (callchain_default_opt)
DEFAULT_CALL_GRAPH = "graph,0.5,caller,function,percent"


@dataclass(frozen=True)
class CallGraphParams:
    """perf's ``callchain_param`` for drawing: print type (``graph``,
    ``fractal``, ``flat``, ``folded`` or ``none``), threshold in percent,
    entries per level (0: all), order (``None``: perf's default, ``caller``
    with the Children column and ``callee`` without) and the value shown."""

    mode: str = "graph"
    min_percent: float = 0.5
    print_limit: int = 0
    order: str | None = None
    value: str = "percent"

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    def resolved_order(self, children: bool) -> str:
        return self.order or ("caller" if children else "callee")


def _prefix(tok: str, words) -> str | None:
    for w in words:
        if w.startswith(tok):
            return w
    return None


def parse_call_graph(text: str | None, base: CallGraphParams | None = None) -> CallGraphParams:
    """Apply a perf ``-g`` argument (``print_type,threshold[,print_limit],order,sort_key,value``,
    any order, prefixes allowed as perf allows them) to ``base``; ``None`` is
    what ``-g`` alone means to perf (``graph,0.5,caller,function,percent``).

    Only the fields named change, as in perf: ``-g caller`` keeps the print
    type and threshold already set. A wrong token raises a one-line error.
    """
    params = base or CallGraphParams()
    spec = DEFAULT_CALL_GRAPH if text is None else text
    numbers = 0
    for tok in spec.split(","):
        tok = tok.strip()
        if not tok:
            continue
        if "none".startswith(tok):
            return dataclasses.replace(params, mode="none")
        mode = _prefix(tok, MODES)
        if mode:
            params = dataclasses.replace(params, mode=mode)
            continue
        order = _prefix(tok, ORDERS)
        if order:
            params = dataclasses.replace(params, order=order)
            continue
        if "function".startswith(tok):
            continue
        if "address".startswith(tok) or "srcline".startswith(tok) or tok == "branch":
            raise PmuscopeError(f"-g {spec!r}: {tok!r} is not supported here; the call graph is keyed by "
                                "function (drop it or use 'function')")
        value = _prefix(tok, VALUES)
        if value:
            params = dataclasses.replace(params, value=value)
            continue
        try:
            if numbers == 0:
                params = dataclasses.replace(params, min_percent=float(tok))
            elif numbers == 1:
                params = dataclasses.replace(params, print_limit=int(tok, 0))
            else:
                raise ValueError
        except ValueError:
            raise PmuscopeError(
                f"-g {spec!r}: {tok!r} is not a print type (graph, flat, fractal, folded, none), an order "
                "(caller, callee), a value (percent, period, count) or a threshold and print limit") from None
        numbers += 1
    return params


@dataclass(slots=True)
class CallNode:
    """One entry of a row's call graph: a function (or an unresolved
    address) reached through its parent.

    ``period``/``samples`` count every chain through this entry (perf's
    cumulative hits), ``self_period``/``self_samples`` the chains that end
    here; ``branches`` is the number of distinct next entries before pruning.
    ``dso_id`` (a rank: -2 no DSO, -1 the kernel, else the DSO id) and
    ``addr`` (the symbol's start in its DSO, or the address of an unresolved
    entry) order entries of equal weight as perf does: by descending DSO and
    address, the order of its tree of entries.
    """

    frame: int
    sym: str
    dso: str
    period: float
    samples: int
    self_period: float
    self_samples: int
    branches: int = 0
    children: list["CallNode"] = field(default_factory=list)
    dso_id: int = -1
    addr: int = 0

    @property
    def tie_key(self) -> tuple[int, int]:
        return (-self.dso_id, -self.addr)

    @property
    def children_period(self) -> float:
        return self.period - self.self_period

    @property
    def children_samples(self) -> int:
        return self.samples - self.self_samples


@dataclass(slots=True)
class CallTree:
    """The call graph under one report row: its first entries, and the
    weight of every chain appended to it (perf's root node)."""

    roots: list[CallNode]
    period: float
    samples: int


def node_keys(p: Profile) -> np.ndarray:
    """A dense key per frame telling call-graph entries apart like perf's
    ``match_chain`` with the function key: the symbol for resolved frames,
    (DSO, address) for unresolved ones."""
    nf = len(p.frame_sym)
    key = np.empty(nf, dtype=np.int64)
    if nf == 0:
        return key
    known = p.frame_sym >= 0
    uk, kinv = uniq_inv(p.frame_sym[known])
    key[known] = kinv.reshape(-1)
    unk = ~known
    if unk.any():
        d = p.frame_dso[unk].astype(np.int64) + 1
        ip = p.frame_ip[unk]
        order = np.lexsort((ip, d))
        sd, si = d[order], ip[order]
        flag = np.ones(len(order), dtype=bool)
        flag[1:] = (sd[1:] != sd[:-1]) | (si[1:] != si[:-1])
        inv = np.empty(len(order), dtype=np.int64)
        inv[order] = np.cumsum(flag) - 1
        key[unk] = len(uk) + inv
    return key


def frame_label(p: Profile, frame: int) -> str:
    """A frame as perf names a call-chain entry: the symbol, else the address
    (``%#x``: ``0x7f...``, ``0`` for zero)."""
    s = int(p.frame_sym[frame])
    if s >= 0:
        return p.sym_name(s)
    ip = int(p.frame_ip[frame])
    return f"{ip:#x}" if ip else "0"


# fixed odd multipliers, one per chain position, for the chain hash: the first 256
# are numpy's ``default_rng(0x9E3779B97F4A7C15).integers(1, 1 << 63, size=256,
# dtype=np.uint64) * 2 + 1``, kept here as little-endian bytes (importing
# numpy.random costs 8-19 ms of every report's start-up: secrets, hashlib, OpenSSL)
_MULT_B64 = (
    "T9pjgyYP4QVVVM9iaUPgWqseFHI5K1oby9PfyR7uapiZ0sCQUv7YywkC3unYnwhWOwIsDL7kjE9jWXomoPZNmoteoD2DjZD+NUyP/C0s"
    "oz5x9jy6F0HzQDGDdyvQpdvlbTNPOZnMs7vp67jfMFmgKZvERNwQgefcD7QCnTmAVFS9VZrQSvKgg4s15gtO0gC9l46wWKOiv+JNJJdG"
    "hXpn+LurxSF/E7QRldl9YpAKdNAv2h/00L+Vlx3jHEcnBazmccoXnTpJakGZfh3H9yBngMHwZwePGLoUvb0kq6N4CUVbyURqCxuRPqlB"
    "1k1wW/ZmYzrhCFkJ48pDmff2y5Dieimty1+pPzO5P3oIWl4wZvXdeQ0KIpK5c30p6HYM4ln7ScGirMF11G/b6XK5Oc2djRk5dmarPblS"
    "HVekDlX0q4vz/nj2qShrjCOTgG1NE0psVUJfyFDbIfvnVSyTeRSdXNFhQTr+Yaa92cXQKCC/vjmV133anPWv3n3jgpdoNEQ/mxVEYa6N"
    "xz5H2SnfVBKlo6E3iTumK+CbTULilvLEvJmHsaRFU5fvUjWzThcc3JrcI5/eNKWwaQsxUa6UXfe988OeKaqW1msaIeeUC3ekhzMzH2Ps"
    "PXwXOyGBPwplM5xLOU7GyIgpWQoxa5EKbsfc7yGsXoS56ctNpxxJdaNGcfR7eO/Uv7eprDVd3vBZYSkUq/0t9kL05cy/x4h+UyU0nItl"
    "oyu85/HDRTv12FyBGyjxreBAUPcIQPOkoOl2I5Y0SdDFfCEhNXyrgJb+sTCY9oOIJUfee1BnwQjMmEap9k5pSqINcfCPUJeZGCi3KhVN"
    "SW7PXyouzD5n01n0VQaoI8fyTrEmaKc7T9wvwhibEHMNk043CsWq4c1zmy//zOTxwwM8T0YR+8FZRsmevxDAGNcOkieg0/DXLe7m8ept"
    "FLIt5PeCvoglW9vsj4dUtszjPeDbBvW4w6L7iyeGtEg6Q7N/e7EyWVroUSZiHWl43B7H4l7R2dqzRbGwXKkwdcBKua74aYTvFyttIzUg"
    "YonMCsf0RjW+Ye8Iz38J+3I/98HhaFfQkJPpRglcjv4DnjovZVkKWEqo7q2/oUaoY7HvjsuxRYi9FAoaPx6pJ2gZsyq7FPEHOjbkup9b"
    "5dlvYkNC4WvHd7kHnG6Xczi4KCV3RPNyWwB4rdIigT4ZBUW6kOdj0Fu1ymlYpFvVF4WDL04857zM3G0GqczTbNMMxhfDIhOsh62RSkgT"
    "MQy4nP51zj5D2s0aIOCt05s/gzjyoLRioeP5M+57+PzXXxDcbik+G115tCXdy3sDh9V4keiNBfW/HZaVwLdyiBNMUd2cA+S/YcFwGFQI"
    "1No3zKFLAiQiVnMFUxLKN1XgewUErJZFympzMq87m5739h2+J3dTyn5yK7YR8XPBE//VpU3FO8tgnhkcwX02WlL2lYsFqCq/aDLpMML/"
    "RM1xFttzO4wHK7hXGYGe1yRMUCE3GSgaEkpKkGGuEZbpY3v0wby3r1RhhUb7W8N14PPtcpfM5mVJwY66LQ95bJirI48zVa8rUNlvEV27"
    "etV73bCxfYKh6eo8DLvHou3Gim9+CAvllIyyGF4ULf9kNdP//y87mgqGPnd+nnFc+vVL4t/D8ag0pivAaOaR3KX0tJM6/Mt0PHTeRUex"
    "z2blpHo5s+gnALCiqEZ4C3mQP3KowkE3aQyVxfdakzgvr3saPgi4KKdvoFk9Db9JuyC8RWbQOdJRVSFMCj7mpPmCg+i5Auf7jQv2A7WS"
    "8L7fuXlT1KjDhVnS2/zfHjaEJdU/Ug0kkTP5R3HihKugBc8eKnR9AMYc4YBPxhtK59TZbAGbTRGfb8VkTlB102kLS1iEwIPscAZpxq9W"
    "EziR6s+jxiBbup8ovSdB6bf837WBFkURKISZyenR5W5L2xKR7QjzluyyjR/NNtRHT7B0j6XWkVuH+rdZf0ewd0oJo9Jr+LIlHfcrHuE2"
    "ZQjfFqJWeUEY8/OnClnFM2tpK3kWTUkRi40YNe9RiUuz30xcCXHJnanMAav2GVd1IddvjIsZg7KDBf3n5LZNKPofQhsVcMG/5mc92xXX"
    "KU7K68gpacB921YqcSScGbVK+o2y2NFczbroF73+/KyL0QfhyIp0NFn5rQ0a9Wy+xRMifFn3k8aXKyivjgw/S9vjFl03D6pMc5lStzHJ"
    "9X4viP/IAugtEPd5BrH8j9Fa01wJHjmPf9aRrOtVxXeoCfefOzLcjVAtCdxyX+reDaFX8Q4vd1wsgcPDHf4/PPJWWWoFRZp2HagPomNj"
    "Kh8RFfNFyqSnk/ruA+6dCT7KMxfriQyor/9X0XfRbP4WZ8uW/f6YTl/LF7QFrK9572iQ4U0SRQFssu/N5RPtBGppEp0ZQcXWv9YbUBNp"
    "5Nd5cgaPTb4YkN2Jse+FZ2WdKH8ZL0mlR05J5h2CBxPfNHa0peCdyAGZremJkqWVnap/GE4cnWk4tnKAYxgVgCifZC1z9+H0aVDdRofn"
    "sX0TUC/zYo4PATjp/apj4mHYlM/EgwqUv0TrouuDdcYPtCqt+4iDsmGUn7q8MCcYPZOJquIQm3ixeaXEP0aYRW8HQujYvww9t4QrDGjJ"
    "5/Iri8XT5V7p4iEYV3nrxIiaBcQzzWIq/tEFoZoH+ikIW4usj1nT4XPGOf0kcBDtXmCtcVQY1s6OBtX5axo2CgJmIbV+EBfPD5Y7zh2r"
    "W7qEgbEXd0lwja5c0WwhUjKRbRY="
)
_MULT = None


def _multipliers(n: int) -> np.ndarray:
    global _MULT
    if _MULT is None:
        import binascii  # base64's own decoder, without base64's import

        _MULT = np.frombuffer(binascii.a2b_base64(_MULT_B64), dtype="<u8").astype(np.uint64)
    if n > len(_MULT):
        more = np.random.default_rng(n).integers(1, 1 << 63, size=n - len(_MULT), dtype=np.uint64) * 2 + 1
        _MULT = np.concatenate((_MULT, more))
    return _MULT[:n]


#: chain entries :func:`_distinct_chains` checks against their representatives at a time
_VERIFY_ENTRIES = 1 << 18


def _distinct_chains(ent: np.ndarray, off: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group samples with the same ``row`` and the same chain (``ent`` between
    ``off``): ``(class of each sample, one sample of each class)``.

    A 64-bit hash of each chain (with its row and length) sorts them; every
    sample is then compared with its class's representative entry by entry,
    and a mismatch (a hash collision) falls back to exact grouping, so the
    result never depends on the hash."""
    n = len(row)
    lens = np.diff(off)
    start = off[:-1]
    with np.errstate(over="ignore"):
        if len(ent):
            # each per-entry temporary goes once used (a large file's chains hold millions of entries)
            pos = np.arange(len(ent), dtype=np.int64)
            pos -= np.repeat(start, lens)
            vals = _multipliers(int(lens.max()))[pos]
            del pos
            vals *= ent.astype(np.uint64) + np.uint64(1)
            cs = np.zeros(len(vals) + 1, dtype=np.uint64)
            np.cumsum(vals, dtype=np.uint64, out=cs[1:])
            del vals
            h = cs[off[1:]] - cs[start]
            del cs
        else:
            h = np.zeros(n, dtype=np.uint64)
        key = h ^ (row.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) \
            ^ (lens.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))
    order = np.argsort(key)
    sk = key[order]
    flag = np.ones(n, dtype=bool)
    np.not_equal(sk[1:], sk[:-1], out=flag[1:])
    cls = np.empty(n, dtype=np.int64)
    cls[order] = np.cumsum(flag) - 1
    rep = order[flag]
    rs = rep[cls]
    same = np.array_equal(row[rs], row) and np.array_equal(lens[rs], lens)
    if same and len(ent):
        # every sample against its class's representative, entry by entry, some samples at a time
        step = max(1, _VERIFY_ENTRIES // max(int(lens.max()), 1))
        for a in range(0, n, step):
            b = min(a + step, n)
            e0, e1 = int(off[a]), int(off[b])
            if e1 == e0:
                continue
            at, _ = ragged_index(start[rs[a:b]], lens[a:b])  # the representatives' entries
            if not np.array_equal(ent[at], ent[e0:e1]):
                same = False
                break
    if not same:
        seen: dict = {}
        cls = np.array([seen.setdefault((int(row[i]), ent[off[i]:off[i + 1]].tobytes()), len(seen))
                        for i in range(n)], dtype=np.int64)
        rep = np.zeros(len(seen), dtype=np.int64)
        rep[cls[::-1]] = np.arange(n - 1, -1, -1)
    return cls, rep


def build_call_trees(p: Profile, *, sample_key: np.ndarray, nf: int, frame_key: np.ndarray,
                     rows: np.ndarray, children: bool, params: CallGraphParams, total: float,
                     max_stack: int | None = None) -> list[CallTree]:
    """The call graph of each report row.

    ``rows`` are the rows' keys as :func:`~pmuscope.profile.report.build_report`
    makes them: ``sample_key * nf + frame_key[frame]`` (sample-level sort keys
    times frame-level ones); a sample's own row is the key of its leaf.
    ``total`` is the event's total period (perf's threshold for ``graph``,
    ``flat`` and ``folded`` is ``min_percent`` of it).
    """
    nrows = len(rows)
    if nrows == 0 or len(p) == 0 or not p.has_callchain:
        return [CallTree([], 0.0, 0) for _ in range(nrows)]
    order = params.resolved_order(children)
    # which samples share a chain does not depend on its order: without
    # --max-stack they are grouped on the stored chains, and only one chain
    # per group is turned into caller order
    flip = max_stack is None and order == "caller"
    frames, off = p.chains(order="callee" if flip else order, max_stack=max_stack)
    nk = node_keys(p)
    # frame classes: (entry identity, row key part); a chain is a sequence of classes
    fcu, fc = uniq_inv(nk * nf + frame_key)
    fc_node = fcu // nf
    fc_fkey = fcu % nf
    fc_frame = np.empty(len(fcu), dtype=np.int64)
    fc_frame[fc[::-1]] = np.arange(len(fc) - 1, -1, -1)
    nkeys = int(fc_node.max()) + 1 if len(fc_node) else 1
    ent = fc[frames]
    period = p.period.astype(np.float64)
    self_row = sample_key * nf + frame_key[p.leaf]
    cls, rep = _distinct_chains(ent, off, self_row)
    nc = len(rep)
    c_w = np.bincount(cls, weights=period, minlength=nc)
    c_n = np.bincount(cls, minlength=nc) if p.count is None else \
        np.bincount(cls, weights=p.count, minlength=nc).astype(np.int64)
    c_len = np.diff(off)[rep]
    c_row = self_row[rep]
    # the distinct chains back to back, in display order
    c_off = np.zeros(nc + 1, dtype=np.int64)
    np.cumsum(c_len, out=c_off[1:])
    c_start = c_off[:-1]
    e_cls = np.repeat(np.arange(nc, dtype=np.int64), c_len)
    e_pos = np.arange(int(c_off[-1]), dtype=np.int64) - c_start[e_cls]
    src = off[:-1][rep][e_cls] + (c_len[e_cls] - 1 - e_pos if flip else e_pos)
    ent = ent[src]

    # rows drawn: key -> index
    rsort = np.argsort(rows, kind="stable")
    rsorted = rows[rsort]

    def row_index(keys: np.ndarray) -> np.ndarray:
        pos = np.minimum(np.searchsorted(rsorted, keys), len(rsorted) - 1)
        return np.where(rsorted[pos] == keys, rsort[pos], -1)

    # paths: (row, class, first entry); every sample's own row gets its whole chain
    r = row_index(c_row)
    ok = (r >= 0) & (c_len > 0)
    p_row, p_cls, p_start = [r[ok]], [np.flatnonzero(ok)], [np.zeros(int(ok.sum()), dtype=np.int64)]
    if children and len(ent):
        e_rk = sample_key[rep][e_cls] * nf + fc_fkey[ent]
        _, rk = uniq_inv(e_rk)
        _, first, _ = uniq_first(e_cls * (int(rk.max()) + 1) + rk)
        first = first[e_rk[first] != c_row[e_cls[first]]]
        r = row_index(e_rk[first])
        ok = r >= 0
        p_row.append(r[ok])
        p_cls.append(e_cls[first][ok])
        p_start.append(e_pos[first][ok])
        del e_rk, rk, first
    prow = np.concatenate(p_row)
    pcls = np.concatenate(p_cls)
    base = c_start[pcls] + np.concatenate(p_start)
    plen = c_len[pcls] - np.concatenate(p_start)
    pw, pn = c_w[pcls], c_n[pcls]
    # what only made the paths goes before the levels are grown (their own temporaries come)
    del frames, off, nk, fc, cls, rep, c_w, c_n, c_len, c_row, c_off, c_start, e_cls, e_pos, src, self_row, \
        period, r, ok, p_row, p_cls, p_start, pcls
    rel = params.mode == "fractal"
    frac = params.min_percent / 100.0
    min_hit = max(int(total * frac), 0)
    parent = prow
    # kept nodes of each depth: (parent id, frame, cumul period, cumul samples, self period, self samples)
    levels: list[tuple[np.ndarray, ...]] = []
    branches: list[np.ndarray] = []
    first_id = 0
    next_id = nrows  # ids 0..nrows-1 are the rows' roots
    root_w, root_n = np.zeros(nrows), np.zeros(nrows)
    d = 0
    while len(parent):
        cl = ent[base + d]
        gu, gfirst, g = uniq_first(parent * nkeys + fc_node[cl])
        ng = len(gu)
        gp = gu // nkeys
        cw = np.bincount(g, weights=pw, minlength=ng)
        cn = np.bincount(g, weights=pn, minlength=ng)
        ends = plen == d + 1
        hw = np.bincount(g, weights=np.where(ends, pw, 0.0), minlength=ng)
        hn = np.bincount(g, weights=np.where(ends, pn, 0), minlength=ng)
        up, upi = uniq_inv(gp)
        nb = np.bincount(upi, minlength=len(up))
        if d == 0:
            root_w = np.bincount(gp, weights=cw, minlength=nrows)
            root_n = np.bincount(gp, weights=cn, minlength=nrows)
        else:
            branches[-1][up - first_id] = nb
        if rel:
            ch_hit = np.bincount(upi, weights=cw, minlength=len(up))
            keep = cw >= np.ceil(ch_hit[upi] * frac)
        else:
            keep = cw >= min_hit
        ids = np.full(ng, -1, dtype=np.int64)
        nkept = int(keep.sum())
        ids[keep] = np.arange(next_id, next_id + nkept)
        levels.append((gp[keep], fc_frame[cl[gfirst[keep]]], cw[keep], cn[keep], hw[keep], hn[keep]))
        branches.append(np.zeros(nkept, dtype=np.int64))
        first_id, next_id = next_id, next_id + nkept
        go = keep[g] & ~ends
        parent = ids[g[go]]
        base, plen, pw, pn = base[go], plen[go], pw[go], pn[go]
        d += 1

    trees = [CallTree([], w, n) for w, n in zip(root_w.tolist(), root_n.astype(np.int64).tolist())]
    # objects for the kept nodes, parents first; they hold no cycles, so the
    # collector need not walk the growing heap while they are made
    collect = gc.isenabled()
    gc.disable()
    try:
        _make_nodes(p, trees, levels, branches)
    finally:
        if collect:
            gc.enable()
    return trees


def _make_nodes(p: Profile, trees: list[CallTree], levels: list, branches: list) -> None:
    names: dict[int, tuple] = {}
    by_id: list = [t.roots for t in trees]
    for (gp, fr, cw, cn, hw, hn), nb in zip(levels, branches):
        for par, f, a, b, c, e, k in zip(gp.tolist(), fr.tolist(), cw.tolist(), cn.tolist(), hw.tolist(),
                                         hn.tolist(), nb.tolist()):
            lab = names.get(f)
            if lab is None:
                d = int(p.frame_dso[f])
                # perf's match_chain: a symbol's start (DSO-relative), else the address itself
                at = int(p.frame_addr[f]) - int(p.frame_off[f]) if p.frame_sym[f] >= 0 else int(p.frame_ip[f])
                # perf compares DSO pointers: no DSO lowest, then the kernel's (made
                # first), then the others as they were found
                rank = -2 if d < 0 else -1 if p.frame_kernel[f] else d
                lab = names[f] = (frame_label(p, f), p.dso_short_name(d), rank, at)
            node = CallNode(f, lab[0], lab[1], a, int(b), c, int(e), k, dso_id=lab[2], addr=lab[3])
            by_id.append(node.children)
            by_id[par].append(node)
    for kids in by_id:
        if len(kids) > 1:
            kids.sort(key=lambda c: (-c.period, c.tie_key))


def tree_json(tree: CallTree, *, total: float, params: CallGraphParams, row_period: float) -> list[dict]:
    """Nested ``{sym, dso, samples, period, percent, children}`` of a row's
    call graph. ``percent`` is what the text shows: a share of the event total
    (``graph``, ``flat``, ``folded``) or of the parent entry's callees
    (``fractal``; the first entries: of the row's period)."""

    def conv(nodes: list[CallNode], base: float) -> list[dict]:
        out = []
        for c in nodes:
            pct = c.period * 100.0 / base if base else 0.0
            out.append({"sym": c.sym, "dso": c.dso, "samples": c.samples, "period": int(c.period),
                        "percent": round(pct, 4),
                        "children": conv(c.children, c.children_period if params.mode == "fractal" else total)})
        return out

    return conv(tree.roots, row_period if params.mode == "fractal" else total)
