"""``perf report``-style aggregation of a :class:`~pmuscope.profile.Profile`.

Samples are grouped by any combination of sort keys (``comm``, ``pid``,
``tid``, ``dso``, ``sym``, ``cpu``) with numpy: every key becomes a dense
integer column, the columns are combined into one int64 key, and periods and
sample counts are summed with ``bincount``. Overhead is weighted by the
sample period, as perf's ``Overhead`` column is (for a frequency-sampled
``cpu-clock`` that is time; for ``cycles`` the cycle count); ``samples`` is the
number of samples.

Symbols follow perf's identity rules (``sort__sym_cmp``): a resolved symbol is
one entry per (DSO, symbol); an address no symbol covers is one entry per
map-relative address, shown as perf shows it (``0x00000000004011a6``).
With ``children=True`` each sample also counts once for every distinct entry
of its call chain (perf's ``Children`` column).

With ``call_graph`` (perf's ``-g``), each row also carries its call graph
(:mod:`pmuscope.profile.callchain`), drawn under the row by
:func:`format_report` the way ``perf report --stdio`` draws it: the ``graph``
and ``fractal`` trees with perf's ``|``, ``---`` and ``--N.NN%--``
connectors, ``flat`` chains and ``folded`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import PmuscopeError
from .callchain import CallGraphParams, CallNode, CallTree, build_call_trees, parse_call_graph, tree_json
from .model import Profile, uniq, uniq_first, uniq_inv

SORT_KEYS = ("comm", "pid", "tid", "dso", "sym", "cpu")
DEFAULT_SORT = ("comm", "dso", "sym")
_HEADERS = {"comm": "Command", "pid": "    Pid:Command", "tid": "    Tid:Command", "dso": "Shared Object",
            "sym": "Symbol", "cpu": "CPU"}


def parse_sort(text: str | None) -> tuple[str, ...]:
    """``comm,dso,sym`` -> a tuple of sort keys; unknown keys raise a clear error."""
    if not text:
        return DEFAULT_SORT
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in keys if k not in SORT_KEYS]
    if bad or not keys:
        raise PmuscopeError(f"--sort {text!r}: unknown key(s) {', '.join(bad) or '(none)'}; "
                            f"choose from {','.join(SORT_KEYS)}")
    return tuple(dict.fromkeys(keys))


@dataclass
class ReportRow:
    """One line of the report: the values of the sort keys, and its weights."""

    keys: dict[str, object]
    samples: int
    period: float
    overhead: float
    children: float | None = None
    children_samples: int | None = None
    children_period: float | None = None
    #: the row's call graph (only when the report was built with ``call_graph``)
    callchain: CallTree | None = None

    def as_json(self) -> dict:
        out: dict = {"overhead": round(self.overhead, 4), "samples": self.samples}
        if self.children is not None:
            out["children"] = round(self.children, 4)
        for k, v in self.keys.items():
            out[k] = v
        out["period"] = int(self.period)
        return out

    @property
    def chain_parent_period(self) -> float:
        """What perf compares a call graph's first entry with (the row's
        period: the Children period when that column is on)."""
        return self.children_period if self.children_period is not None else self.period


@dataclass
class Report:
    """The aggregated report of one event (or of all events together)."""

    event: str
    samples: int
    total_period: int
    lost: int
    sort: tuple[str, ...]
    rows: list[ReportRow] = field(default_factory=list)
    children: bool = False
    #: display strings of each row (same order as ``rows``), with perf's [k]/[.] level marks
    display: list[dict[str, str]] = field(default_factory=list)
    #: how the rows' call graphs were built and are drawn (None: no call graphs)
    call_graph: CallGraphParams | None = None
    #: least width of a column (perf widens the DSO column to 16 when an entry has no symbol)
    min_width: dict[str, int] = field(default_factory=dict)
    #: exact width of a column, longer values cut (perf's Command column: the longest
    #: current name of the rows' threads, not of the names shown)
    fixed_width: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The JSON contract: samples, lost, event, rows (highest overhead first).

        With call graphs, each row also has ``callchain`` (nested ``{sym, dso,
        samples, period, percent, children}``) and the report ``call_graph``
        (mode, threshold, order, value) telling how they were built."""
        out = {"samples": self.samples, "lost": self.lost, "event": self.event,
               "event_count": self.total_period, "sort": list(self.sort),
               "weight": "period", "children": self.children,
               "rows": [r.as_json() for r in self.rows]}
        cg = self.call_graph
        if cg is not None and cg.enabled:
            out["call_graph"] = {"mode": cg.mode, "min_percent": cg.min_percent,
                                 "order": cg.resolved_order(self.children), "value": cg.value}
            for r, j in zip(self.rows, out["rows"]):
                if r.callchain is not None:
                    j["callchain"] = tree_json(r.callchain, total=float(self.total_period), params=cg,
                                               row_period=r.chain_parent_period)
        return out


def _frame_sym_keys(p: Profile, by_dso: bool = True) -> np.ndarray:
    """A dense symbol key per frame: (dso, symbol) for resolved frames,
    (dso, map-relative address) for unresolved ones -- or the address alone
    without ``by_dso``: perf's ``sort__sym_cmp`` compares two unresolved
    entries by address only, so with no ``dso`` sort key one address in
    several DSOs is one row."""
    nf = len(p.frame_sym)
    if nf == 0:
        return np.zeros(0, dtype=np.int64)
    known = p.frame_sym >= 0
    key = np.empty(nf, dtype=np.int64)
    ks = p.frame_sym[known]
    uk, kinv = uniq_inv(ks)
    key[known] = kinv.reshape(-1)
    unk = ~known
    if unk.any():
        # rank of each (dso, address) pair in lexicographic order (np.unique(axis=0), sort based)
        a = p.frame_addr[unk].astype(np.uint64)
        d = p.frame_dso[unk].astype(np.uint64) if by_dso else np.zeros(len(a), np.uint64)
        order = np.lexsort((a, d))
        sd, sa = d[order], a[order]
        flag = np.ones(len(order), dtype=bool)
        flag[1:] = (sd[1:] != sd[:-1]) | (sa[1:] != sa[:-1])
        uinv = np.empty(len(order), dtype=np.int64)
        uinv[order] = np.cumsum(flag) - 1
        key[unk] = len(uk) + uinv
    return key


def _combine(cols: list[np.ndarray], size: int) -> tuple[np.ndarray, int, np.ndarray]:
    """Dense key of the rows of ``cols`` (mixed radix over each column's
    ranks, then compacted): (key per row, number of keys, first row of each key)."""
    if not cols:
        return np.zeros(size, dtype=np.int64), 1, np.zeros(1, dtype=np.int64)
    combined = np.zeros(size, dtype=np.int64)
    for c in cols:
        u, inv = _dense(c)
        combined = combined * len(u) + inv
    _, first, inv = uniq_first(combined)
    return inv.reshape(-1).astype(np.int64), len(first), first


def _sample_keys(p: Profile, sort) -> tuple[np.ndarray, int, np.ndarray]:
    cols = []
    for k in sort:
        if k == "comm":
            cols.append(p.comm.astype(np.int64))
        elif k in ("pid", "tid"):
            # perf's "pid" key is the thread (sort__thread_cmp compares tids)
            cols.append(p.tid)
        elif k == "cpu":
            cols.append(p.cpu.astype(np.int64))
    return _combine(cols, len(p))


def _frame_keys(p: Profile, sort) -> tuple[np.ndarray, int, np.ndarray]:
    cols = []
    for k in sort:
        if k == "dso":
            cols.append(p.frame_dso.astype(np.int64))
        elif k == "sym":
            cols.append(_frame_sym_keys(p, by_dso="dso" in sort))
    if cols and "sym" in sort:
        # perf's [k]/[.] level is part of what a row shows
        cols.append(p.frame_kernel.astype(np.int64))
    return _combine(cols, len(p.frame_ip))


def _dense(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, inv = uniq_inv(col)
    return u, inv.reshape(-1).astype(np.int64)


def _sym_label(p: Profile, frame: int) -> str:
    s = int(p.frame_sym[frame])
    if s >= 0:
        return p.sym_name(s)
    addr = int(p.frame_addr[frame])
    # perf prints "%-#.*llx" with precision 16: C's '#' adds no 0x to a zero value
    return f"{addr:#018x}" if addr else "0" * 16


def build_report(p: Profile, sort: tuple[str, ...] = DEFAULT_SORT, *, children: bool = False,
                 percent_limit: float = 0.0, event: str | None = None,
                 call_graph: CallGraphParams | str | None = None, max_stack: int | None = None) -> Report:
    """Aggregate ``p`` into a :class:`Report` sorted by overhead (highest first).

    ``call_graph`` (a :class:`~pmuscope.profile.callchain.CallGraphParams` or
    a perf ``-g`` string) also builds each row's call graph, when ``p`` has
    call chains. ``max_stack`` keeps that many frames of each chain in the
    call graph's order, for the Children column too (perf's ``--max-stack``).
    """
    if isinstance(call_graph, str):
        call_graph = parse_call_graph(call_graph)
    n = len(p)
    cnt = p.count  # samples per row (a collapsed profile), None: one
    total = float(p.period.sum(dtype=np.float64)) if n else 0.0
    ev = event if event is not None else ",".join(p.event_names[i] for i in uniq(p.event).tolist()) \
        if n else ",".join(p.event_names)
    rep = Report(ev, p.nr_samples, int(p.period.sum(dtype=np.uint64)) if n else 0, p.lost, sort, children=children)
    if call_graph is not None and p.has_callchain:
        rep.call_graph = call_graph
    if n == 0:
        return rep
    # dense keys: one for the sample-level sort keys (comm, pid, tid, cpu),
    # one for the frame-level ones (dso, sym), computed on the small tables
    skey, ns, srep = _sample_keys(p, sort)
    fkey, nf, frep = _frame_keys(p, sort)
    leaf_key = skey * nf + fkey[p.leaf]
    use_children = children and p.has_callchain
    if use_children:
        if max_stack is None:
            stack, st_off = p.stack, p.stack_offsets
        else:
            order = call_graph.resolved_order(True) if call_graph is not None else "caller"
            stack, st_off = p.chains(order=order, max_stack=max_stack)
        st_s = np.repeat(np.arange(n, dtype=np.int64), np.diff(st_off))
        row_key = skey[st_s] * nf + fkey[stack]
        # each sample counts once per distinct entry of its chain (leaf included)
        pair = np.concatenate((np.arange(n, dtype=np.int64), st_s)) * (ns * nf) + \
            np.concatenate((leaf_key, row_key))
        pair.sort()
        first_of = np.ones(len(pair), dtype=bool)
        first_of[1:] = pair[1:] != pair[:-1]
        pair = pair[first_of]
        ch_key = pair % (ns * nf)
        ch_w = p.period.astype(np.float64)[pair // (ns * nf)]
        ch_n = cnt[pair // (ns * nf)] if cnt is not None else None
    # compact the key space
    if ns * nf <= (1 << 24):
        present = np.zeros(ns * nf, dtype=bool)
        present[leaf_key] = True
        if use_children:
            present[ch_key] = True
        ukey = np.flatnonzero(present)
        remap = np.full(ns * nf, -1, dtype=np.int64)
        remap[ukey] = np.arange(len(ukey))
        self_k = remap[leaf_key]
        ch_k = remap[ch_key] if use_children else None
    else:
        ukey, inv = uniq_inv(np.concatenate((leaf_key, ch_key)) if use_children else leaf_key)
        inv = inv.reshape(-1)
        self_k = inv[:n]
        ch_k = inv[n:] if use_children else None
    nkeys = len(ukey)
    depth = None
    if use_children and call_graph is not None and call_graph.enabled:
        depth = _chain_depths(call_graph.resolved_order(True), max_stack is not None, stack, st_off, row_key,
                              ukey, remap if ns * nf <= (1 << 24) else None, self_k, nkeys)
    self_period = np.bincount(self_k, weights=p.period.astype(np.float64), minlength=nkeys)
    self_samples = _counts(self_k, cnt, nkeys)
    child_period = child_samples = None
    if use_children:
        child_period = np.bincount(ch_k, weights=ch_w, minlength=nkeys)
        child_samples = _counts(ch_k, ch_n, nkeys)
    elif children:
        child_period, child_samples = self_period, self_samples
    main = child_period if child_period is not None else self_period
    order = np.lexsort((-self_period, -main))
    limit = percent_limit * total / 100.0
    order = order[main[order] > 0]
    every = order  # perf sizes the columns for every entry, --percent-limit hides some at print time
    order = order[main[order] >= limit]
    uk = ukey[order]
    s_of = srep[uk // nf]
    f_of = frep[uk % nf]
    # labels are made once per distinct sample key / frame key, then shared
    s_lab: dict[int, tuple[dict, dict]] = {}
    f_lab: dict[int, tuple[dict, dict]] = {}
    s_names = [k for k in sort if k in ("comm", "pid", "tid", "cpu")]
    f_names = [k for k in sort if k in ("dso", "sym")]
    dso_cache: dict[int, str] = {}
    tc = p.thread_comm
    final_comm: dict[int, str] = {}

    def thread_comm(s: int) -> str:
        """The current name of sample ``s``'s thread (its own name when unknown)."""
        t = int(p.tid[s])
        name = final_comm.get(t)
        if name is None:
            c = tc.get(t) if tc is not None else None
            name = final_comm[t] = p.comms[int(p.comm[s]) if c is None else c]
        return name
    sp = (self_period[order] * (100.0 / total) if total else np.zeros(len(order))).tolist()
    cp = (child_period[order] * (100.0 / total) if total else np.zeros(len(order))).tolist() \
        if child_period is not None else None
    cs = child_samples[order].tolist() if child_period is not None else None
    cpd = child_period[order].tolist() if child_period is not None else None
    spd = self_period[order].tolist()
    ss = self_samples[order].tolist()
    for i, (s, fr) in enumerate(zip(s_of.tolist(), f_of.tolist())):
        sl = s_lab.get(s)
        if sl is None:
            keys: dict = {}
            disp: dict = {}
            for name in s_names:
                if name == "comm":
                    keys[name] = disp[name] = p.comms[int(p.comm[s])]
                elif name in ("pid", "tid"):
                    # one row per thread (perf's "pid" is the thread): its process and thread id
                    # in JSON, perf's "%7d:%-*.*s" of the thread id and current name shown
                    v = int(p.tid[s])
                    keys[name] = int(p.pid[s]) if name == "pid" else v
                    if name == "pid":
                        keys["tid"] = v
                    disp[name] = f"{v:7d}:{thread_comm(s)}"
                else:
                    v = int(p.cpu[s])
                    keys[name] = v
                    disp[name] = f"{'-' if v < 0 else ''}{abs(v):03d}"  # C's "%*.*d", 3, 3: -1 is -001
            sl = s_lab[s] = (keys, disp)
        fl = f_lab.get(fr)
        if fl is None:
            keys, disp = {}, {}
            for name in f_names:
                if name == "dso":
                    d = int(p.frame_dso[fr])
                    n_ = dso_cache.get(d)
                    if n_ is None:
                        n_ = dso_cache[d] = p.dso_short_name(d)
                    keys[name] = disp[name] = n_
                else:
                    label = _sym_label(p, fr)
                    keys[name] = label
                    disp[name] = f"[{'k' if p.frame_kernel[fr] else '.'}] {label}"
            fl = f_lab[fr] = (keys, disp)
        keys = {**sl[0], **fl[0]}
        if len(sort) > 1:
            keys = {k: keys[k] for k in (*sort, "tid") if k in keys}
        row = ReportRow(keys, ss[i], spd[i], sp[i])
        if cp is not None:
            row.children = cp[i]
            row.children_samples = cs[i]
            row.children_period = cpd[i]
        rep.rows.append(row)
        rep.display.append({**sl[1], **fl[1]})
    # column widths as util/hist.c hists__calc_col_len sets them, over every entry
    s_all, f_all = (s_of, f_of) if len(every) == len(order) else (srep[ukey[every] // nf], frep[ukey[every] % nf])
    if rep.rows and tc is not None and any(k in sort for k in ("comm", "pid", "tid")):
        longest = max(len(thread_comm(s)) for s in set(s_all.tolist()))  # thread__comm_len of each entry's thread
        if "comm" in sort:
            rep.fixed_width["comm"] = max(len(_HEADERS["comm"]), longest)
        if len(every) != len(order):
            for k in ("pid", "tid"):
                if k in sort:
                    rep.min_width[k] = longest + 8
    if "dso" in sort and len(f_all) and (p.frame_sym[f_all] < 0).any():
        # hists__set_unres_dso_col_len: room for an unresolved address
        rep.min_width["dso"] = 16
    if len(every) != len(order) and len(f_all):
        frames = set(f_all.tolist())
        if "dso" in sort:
            names = {int(p.frame_dso[f]) for f in frames}
            rep.min_width["dso"] = max(rep.min_width.get("dso", 0),
                                       max(len(p.dso_short_name(d)) if d >= 0 else 9 for d in names))
        if "sym" in sort:
            rep.min_width["sym"] = max(len(_sym_label(p, f)) + 4 for f in frames)
    perm = _perf_tie_order(p, sort, main[order], self_period[order], s_of, f_of,
                           None if depth is None else (depth[order], call_graph.resolved_order(True)))
    if perm is not None:
        rep.rows = [rep.rows[i] for i in perm]
        rep.display = [rep.display[i] for i in perm]
        uk = uk[np.asarray(perm, dtype=np.int64)]
    if rep.call_graph is not None and rep.call_graph.enabled:
        trees = build_call_trees(p, sample_key=skey, nf=nf, frame_key=fkey, rows=uk, children=use_children,
                                 params=rep.call_graph, total=total, max_stack=max_stack)
        for row, tree in zip(rep.rows, trees):
            row.callchain = tree
    return rep


def _name_key(text: str) -> bytes:
    """A name as C's strcmp sees it: its bytes (invalid ones kept as surrogate escapes)."""
    return text.encode("utf-8", "surrogateescape")


def _chain_depths(order: str, truncated: bool, stack: np.ndarray, st_off: np.ndarray, row_key: np.ndarray,
                  ukey: np.ndarray, remap: np.ndarray | None, self_k: np.ndarray, nkeys: int) -> np.ndarray:
    """perf's ``callchain->max_depth`` of each Children row: the longest call chain
    appended to the entry (util/hist.c: a sample's own entry gets its whole chain,
    an entry of the chain the part from it on in the cursor's order, which is the
    call graph's order)."""
    lens = np.diff(st_off)
    pos = np.arange(len(stack), dtype=np.int64) - np.repeat(st_off[:-1], lens)
    whole = np.repeat(lens, lens)
    if order == "caller":
        # the stack is leaf first unless --max-stack gave it in caller order
        d = whole - pos if truncated else pos + 1
    else:
        d = whole - pos
    rk = remap[row_key] if remap is not None else np.searchsorted(ukey, row_key)
    out = np.zeros(nkeys, dtype=np.int64)
    np.maximum.at(out, rk, d)
    np.maximum.at(out, self_k, lens)
    return out


def _perf_tie_order(p: Profile, sort: tuple[str, ...], main: np.ndarray, self_: np.ndarray,
                    s_of: np.ndarray, f_of: np.ndarray, depth: tuple[np.ndarray, str] | None = None
                    ) -> list[int] | None:
    """The order perf prints rows whose overhead is equal (None: no such rows).

    perf sorts its output by the sort list ``[overhead_children,] overhead,
    <--sort keys>`` (util/sort.c ``setup_overhead`` prepends the overhead
    fields; util/hist.c ``hist_entry__sort``): after the period, each key in
    turn by its ``se_sort`` (or ``se_cmp``) function -- comm, dso and symbol
    names in ascending strcmp order, an entry without a map or without a
    symbol after those with one (``cmp_null``), pid/tid and cpu ascending.
    Entries still equal (two unresolved addresses, or two symbols of one
    name) keep the order of perf's collapsed tree, whose ``se_collapse``/
    ``se_cmp`` order is: unresolved addresses ascending, symbols of one name
    by DSO name then start address."""
    n = len(main)
    if n < 2:
        return None
    # with call graphs perf puts, of two Children entries of one period and one thread,
    # the one with the longer chain first in caller order (the caller above its callee;
    # hpp__sort_overhead_acc), the shorter first in callee order -- before the Self period
    tie = main[1:] == main[:-1] if depth is not None else (main[1:] == main[:-1]) & (self_[1:] == self_[:-1])
    if not tie.any():
        return None
    tids = p.tid[s_of].tolist() if depth is not None else None
    dsign = -1 if depth is not None and depth[1] == "caller" else 1
    dl = depth[0].tolist() if depth is not None else None
    sl = self_.tolist()
    # runs of rows equal in both periods (already in descending order of them)
    starts = np.flatnonzero(np.concatenate(([True], ~tie)))
    ends = np.append(starts[1:], n)
    s_list, f_list = s_of.tolist(), f_of.tolist()
    comm_names: dict[int, bytes] = {}
    dso_keys: dict[int, tuple] = {}

    def comm_key(s: int) -> bytes:
        c = int(p.comm[s])
        k = comm_names.get(c)
        if k is None:
            k = comm_names[c] = _name_key(p.comms[c])
        return k

    def dso_key(fr: int) -> tuple:
        d = int(p.frame_dso[fr])
        k = dso_keys.get(d)
        if k is None:
            k = dso_keys[d] = (1, b"") if d < 0 else (0, _name_key(p.dso_short_name(d)))
        return k

    def key(i: int) -> tuple:
        s, fr = s_list[i], f_list[i]
        first: list = []
        then: list = []
        for name in sort:
            if name == "comm":
                k = comm_key(s)
                first.append(k)
                then.append(k)
            elif name in ("pid", "tid", "cpu"):
                v = int((p.cpu if name == "cpu" else p.tid)[s])
                first.append(v)
                then.append(v)
            elif name == "dso":
                k = dso_key(fr)
                first.append(k)
                then.append(k)
            else:  # sym
                sym = int(p.frame_sym[fr])
                addr = int(p.frame_addr[fr])
                if sym < 0:
                    first.append((1, b""))
                    then.append((0, addr))
                else:
                    first.append((0, _name_key(p.sym_name(sym))))
                    then.append((1, dso_key(fr), addr - int(p.frame_off[fr])))
        return (*first, *then)

    perm = list(range(n))
    for a, b in zip(starts.tolist(), ends.tolist()):
        if b - a > 1:
            if dl is None:
                perm[a:b] = sorted(range(a, b), key=key)
            else:
                one_thread = len(set(tids[a:b])) == 1  # perf compares depths of one thread's entries only
                perm[a:b] = sorted(range(a, b), key=lambda i: (dsign * dl[i] if one_thread else 0, -sl[i], key(i)))
    return perm


def _counts(k: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    """Samples per key: occurrences of each key, or the sum of ``weights`` (samples per row)."""
    if weights is None:
        return np.bincount(k, minlength=size)
    return np.bincount(k, weights=weights, minlength=size).astype(np.int64)


def _nr(n: int) -> str:
    """perf's sample count with its unit character (``convert_unit``: 1618 ->
    ``1K``, 96 -> ``96 ``: the unit is a space below 1001, so perf's header
    reads ``# Samples: 96  of event``)."""
    unit = " "
    for u in "KMG":
        if n > 1000:
            n //= 1000
            unit = u
    return f"{n}{unit}"


def format_report(rep: Report, *, show_samples: bool = False, header: bool = True) -> str:
    """The report as ``perf report --stdio`` prints it (header, column rule, rows)."""
    lines: list[str] = []
    if header:
        lines += ["#", f"# Total Lost Samples: {rep.lost}", "#",
                  f"# Samples: {_nr(rep.samples)} of event '{rep.event}'",
                  f"# Event count (approx.): {rep.total_period}", "#"]
    cols: list[tuple[str, list[str], bool]] = []  # (header, values, right aligned)
    if rep.children:
        cols.append(("Children", [f"{r.children:.2f}%" for r in rep.rows], True))
        cols.append(("Self", [f"{r.overhead:.2f}%" for r in rep.rows], True))
    else:
        cols.append(("Overhead", [f"{r.overhead:.2f}%" for r in rep.rows], True))
    if show_samples:
        cols.append(("Samples", [str(r.samples) for r in rep.rows], True))
    for k in rep.sort:
        cols.append((_HEADERS[k], [d[k] for d in rep.display], False))
    widths = [max([len(h)] + [len(v) for v in vals]) for h, vals, _ in cols]
    if show_samples:
        widths[len(cols) - len(rep.sort) - 1] = max(widths[len(cols) - len(rep.sort) - 1], 12)  # perf's width
    for i, k in enumerate(rep.sort):
        j = len(cols) - len(rep.sort) + i
        widths[j] = max(widths[j], rep.min_width.get(k, 0))
        if k == "cpu":
            widths[j] = 3  # perf's CPU column: "-001" for no CPU runs past it
        if k in rep.fixed_width:
            w = widths[j] = rep.fixed_width[k]
            h, vals, right = cols[j]
            cols[j] = (h, [v[:w] for v in vals], right)
    # perf pads the percentage columns to at least 8 characters
    widths = [max(w, 8) if right else w for w, (_, _, right) in zip(widths, cols)]

    lines.append("# " + "  ".join((h.rjust(w) if right else h.ljust(w))
                                  for (h, _, right), w in zip(cols, widths)).rstrip())
    lines.append("# " + "  ".join("." * w for w in widths))
    lines.append("#")
    padded = [[v.rjust(w) for v in vals] if right else [v.ljust(w) for v in vals]
              for (_, vals, right), w in zip(cols, widths)]
    cg = rep.call_graph if rep.call_graph is not None and rep.call_graph.enabled else None
    # perf leaves out a lone first entry that repeats the row's symbol when the sort starts with it
    skip_first = bool(rep.sort) and rep.sort[0] == "sym"
    for row, parts in zip(rep.rows, zip(*padded)):
        lines.append(("  " + "  ".join(parts)).rstrip())
        if cg is not None and row.callchain is not None:
            lines.extend(format_callchain(row.callchain, cg, total=float(rep.total_period),
                                          parent_period=row.chain_parent_period, skip_first=skip_first))
    lines.append("")
    return "\n".join(lines) + "\n"


# --- call graphs, drawn as perf's ui/stdio/hist.c draws them ------------------------
_LEFT = " " * 12  # perf's callchain__fprintf_left_margin


def _radix(node: CallNode) -> tuple[list[CallNode], CallNode]:
    """The entries of perf's radix node starting at ``node``: it runs on while
    every chain through an entry goes on to one same next entry."""
    entries = [node]
    while node.branches == 1 and node.self_samples == 0 and len(node.children) == 1:
        node = node.children[0]
        entries.append(node)
    return entries, node


def _value(cg: CallGraphParams, period: float, samples: int, total: float) -> str:
    if cg.value == "period":
        return str(int(period))
    if cg.value == "count":
        return str(int(samples))
    return f"{period * 100.0 / total if total else 0.0:.2f}%"


def _graph_line(depth: int, mask: int, margin: int) -> str:
    return _LEFT + " " * margin + "".join("|          " if mask & (1 << i) else "           " for i in range(depth))


def _entry_line(cg: CallGraphParams, name: str, period: float, samples: int, depth: int, mask: int, first: bool,
                total: float, margin: int) -> str:
    parts = [_LEFT, " " * margin]
    for i in range(depth):
        parts.append("|" if mask & (1 << i) else " ")
        parts.append(f"--{_value(cg, period, samples, total)}--" if first and i == depth - 1 else " " * 10)
    parts.append(name)
    return "".join(parts)


def _graph_level(out: list[str], cg: CallGraphParams, nodes: list[CallNode], total: float, depth: int, mask: int,
                 margin: int, parent_samples: int) -> None:
    """One level of the tree (perf's __callchain__fprintf_graph): a ``|``
    line, then each entry's first line with its share, deeper levels below;
    in ``fractal`` the rest of the parent (pruned callees, its own samples)
    closes the level as ``[...]``."""
    rel = cg.mode == "fractal"
    remaining = total
    new_mask = mask
    cumul_samples = 0
    for i, child in enumerate(nodes):
        entries, tail = _radix(child)
        remaining -= child.period
        cumul_samples += child.samples
        # the last entry of a level ends its vertical bar, unless [...] follows
        if i == len(nodes) - 1 and (not rel or not remaining):
            new_mask &= ~(1 << (depth - 1))
        out.append(_graph_line(depth, mask, margin))
        for j, e in enumerate(entries):
            out.append(_entry_line(cg, e.sym, child.period, child.samples, depth, new_mask, j == 0, total, margin))
        _graph_level(out, cg, tail.children, tail.children_period if rel else total, depth + 1,
                     new_mask | (1 << depth), margin, tail.children_samples)
        if i + 1 == cg.print_limit:
            break
    if rel and remaining and remaining != total:
        rest = parent_samples - cumul_samples
        if cg.value == "count" and nodes and rest <= 0:
            return
        new_mask &= ~(1 << (depth - 1))
        out.append(_entry_line(cg, "[...]", remaining, rest, depth, new_mask, True, total, margin))


def _with_self(tree: CallTree, min_period: float) -> list[list[CallNode]]:
    """Every chain that ends somewhere (its own samples at or above
    ``min_period``), root first, most samples first (perf's flat sort)."""
    found: list[list[CallNode]] = []
    path: list[CallNode] = []

    def walk(nodes: list[CallNode]) -> None:
        # perf walks its tree of entries (descending address) children first,
        # and equal weights keep that order
        for c in nodes if len(nodes) < 2 else sorted(nodes, key=lambda c: c.tie_key):
            path.append(c)
            walk(c.children)
            if c.self_period > 0 and c.self_period >= min_period:
                found.append(path.copy())
            path.pop()

    walk(tree.roots)
    found.sort(key=lambda chain: -chain[-1].self_period)
    return found


def format_callchain(tree: CallTree, cg: CallGraphParams, *, total: float, parent_period: float,
                     skip_first: bool = False) -> list[str]:
    """The lines perf report --stdio prints under a row for its call graph.

    ``total`` is the event's total period (``graph`` shares and thresholds),
    ``parent_period`` the row's own period (its Children period when that
    column is on): a lone first entry carrying all of it is drawn without a
    share (``---name``), and ``fractal`` shares its first level out of it.
    """
    out: list[str] = []
    limit = cg.print_limit or None
    if cg.mode in ("flat", "folded"):
        chains = _with_self(tree, max(int(total * cg.min_percent / 100.0), 0))[:limit]
        for chain in chains:
            leaf = chain[-1]
            if cg.mode == "flat":
                out.append(" " * 11 + _value(cg, leaf.period, leaf.samples, total))
                out.extend(" " * 16 + e.sym for e in chain)
                out.append("")
            else:
                out.append(f"{_value(cg, leaf.self_period, leaf.self_samples, total)} "
                           + ";".join(e.sym for e in chain))
        return out
    margin = 0
    nodes, parent_samples = tree.roots, tree.samples
    if len(nodes) == 1 and nodes[0].period == parent_period:
        entries, tail = _radix(nodes[0])
        shown = 0
        for j, e in enumerate(entries):
            if j == 0 and skip_first:
                continue
            pad = _LEFT + " " * margin
            if shown == 0:
                out += [pad + "|", pad + "---" + e.sym]
                margin += 3
            else:
                out.append(pad + e.sym)
            shown += 1
            if shown == cg.print_limit:
                break
        nodes, parent_samples = tail.children, tail.children_samples
    _graph_level(out, cg, nodes, parent_period if cg.mode == "fractal" else total, 1, 1, margin, parent_samples)
    if out:
        out.append("")
    return out


def report_json(reports: list[Report]) -> str:
    """One JSON object: for a single event the report itself; for several,
    the first event's fields plus ``events`` holding each event's report."""
    import json

    if len(reports) == 1:
        return json.dumps(reports[0].to_json())
    first = reports[0].to_json()
    first["events"] = [r.to_json() for r in reports]
    return json.dumps(first)


def reports_by_event(p: Profile, sort: tuple[str, ...] = DEFAULT_SORT, **kw) -> list[Report]:
    """One report per event present (perf prints a section per event)."""
    events = uniq(p.event).tolist() if len(p) else list(range(len(p.event_names)))[:1]
    if len(events) <= 1:
        return [build_report(p, sort, event=p.event_names[events[0]] if events else None, **kw)]
    return [build_report(p.filter(events=[e]), sort, event=p.event_names[e], **kw) for e in events]
