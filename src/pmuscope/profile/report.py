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

import numpy as np

from .callchain import CallGraphParams, build_call_trees, parse_call_graph
from .model import Profile, uniq, uniq_first, uniq_inv
# the table's text and JSON (no numpy: the small-file report prints them too)
from .report_format import (DEFAULT_SORT, SORT_KEYS, _HEADERS, Report, ReportRow, _nr, format_callchain,  # noqa: F401
                            cpu_label, format_report, name_key, parse_sort, report_json, thread_label, thread_widths)

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
                 call_graph: CallGraphParams | str | None = None, max_stack: int | None = None,
                 whole: tuple[int, int] | None = None, tie_info: bool = False) -> Report:
    """Aggregate ``p`` into a :class:`Report` sorted by overhead (highest first).

    ``call_graph`` (a :class:`~pmuscope.profile.callchain.CallGraphParams` or
    a perf ``-g`` string) also builds each row's call graph, when ``p`` has
    call chains. ``max_stack`` keeps that many frames of each chain in the
    call graph's order, for the Children column too (perf's ``--max-stack``).
    ``tie_info``: each row also gets ``tie``, what perf compares entries of equal
    periods by -- ``(thread id, chain depth or None, key tuple)`` -- for merging
    the reports of a group's members (:func:`pmuscope.profile.group.merge_group`).
    """
    if isinstance(call_graph, str):
        call_graph = parse_call_graph(call_graph)
    n = len(p)
    cnt = p.count  # samples per row (a collapsed profile), None: one
    # ``whole``: (samples, period) of every sample when ``p`` holds those of perf's entry
    # filters only (--pid, --comms ...): the totals and percentages are of the whole
    total = float(whole[1]) if whole is not None else float(p.period.sum(dtype=np.float64)) if n else 0.0
    ev = event if event is not None else ",".join(p.event_names[i] for i in uniq(p.event).tolist()) \
        if n else ",".join(p.event_names)
    if whole is not None:
        rep = Report(ev, int(whole[0]), int(whole[1]), p.lost, sort, children=children)
    else:
        rep = Report(ev, p.nr_samples, int(p.period.sum(dtype=np.uint64)) if n else 0, p.lost, sort,
                     children=children)
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
        del st_s  # each per-entry array goes as soon as it is used: a large file has millions of entries
        pair.sort()
        first_of = np.ones(len(pair), dtype=bool)
        first_of[1:] = pair[1:] != pair[:-1]
        pair = pair[first_of]
        del first_of
        ch_key = pair % (ns * nf)
        pair //= ns * nf  # now each entry's sample
        ch_w = p.period.astype(np.float64)[pair]
        ch_n = cnt[pair] if cnt is not None else None
        del pair
    # compact the key space
    remap = None
    if ns * nf <= (1 << 24):
        present = np.zeros(ns * nf, dtype=bool)
        present[leaf_key] = True
        if use_children:
            present[ch_key] = True
        ukey = np.flatnonzero(present)
        del present
        remap = np.full(ns * nf, -1, dtype=np.int64)
        remap[ukey] = np.arange(len(ukey))
        self_k = remap[leaf_key]
        ch_k = remap[ch_key] if use_children else None
    else:
        ukey, inv = uniq_inv(np.concatenate((leaf_key, ch_key)) if use_children else leaf_key)
        inv = inv.reshape(-1)
        self_k = inv[:n]
        ch_k = inv[n:] if use_children else None
        del inv
    del leaf_key
    if use_children:
        del ch_key
    nkeys = len(ukey)
    self_period = np.bincount(self_k, weights=p.period.astype(np.float64), minlength=nkeys)
    self_samples = _counts(self_k, cnt, nkeys)
    child_period = child_samples = None
    if use_children:
        child_period = np.bincount(ch_k, weights=ch_w, minlength=nkeys)
        child_samples = _counts(ch_k, ch_n, nkeys)
        del ch_k, ch_w, ch_n
    elif children:
        child_period, child_samples = self_period, self_samples
    depth = None
    if use_children and call_graph is not None and call_graph.enabled:
        depth = _chain_depths(call_graph.resolved_order(True), max_stack is not None, stack, st_off, row_key,
                              ukey, remap, self_k, nkeys)
    # the last per-entry temporaries: not alive while the rows and call graphs are made
    row_key = remap = self_k = None
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
                    disp[name] = thread_label(v, thread_comm(s))
                else:
                    v = int(p.cpu[s])
                    keys[name] = v
                    disp[name] = cpu_label(v)
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
        thread_widths(rep, max(len(thread_comm(s)) for s in set(s_all.tolist())), len(every) != len(order))
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
    if tie_info and rep.rows:
        tkey = row_sort_key(p, sort, s_of, f_of)
        dl = depth[order].tolist() if depth is not None else None
        for i, (row, t) in enumerate(zip(rep.rows, p.tid[s_of].tolist())):
            row.tie = (t, dl[i] if dl is not None else None, tkey(i))
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


def _chain_depths(order: str, truncated: bool, stack: np.ndarray, st_off: np.ndarray, row_key: np.ndarray,
                  ukey: np.ndarray, remap: np.ndarray | None, self_k: np.ndarray, nkeys: int) -> np.ndarray:
    """perf's ``callchain->max_depth`` of each Children row: the longest call chain
    appended to the entry (util/hist.c: a sample's own entry gets its whole chain,
    an entry of the chain the part from it on in the cursor's order, which is the
    call graph's order)."""
    lens = np.diff(st_off)
    pos = np.arange(len(stack), dtype=np.int64)
    pos -= np.repeat(st_off[:-1], lens)
    if order == "caller" and not truncated:
        # the stack is leaf first unless --max-stack gave it in caller order
        d = pos
        d += 1
    else:
        d = np.repeat(lens, lens)
        d -= pos
    del pos
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
    key = row_sort_key(p, sort, s_of, f_of)

    perm = list(range(n))
    for a, b in zip(starts.tolist(), ends.tolist()):
        if b - a > 1:
            if dl is None:
                perm[a:b] = sorted(range(a, b), key=key)
            else:
                one_thread = len(set(tids[a:b])) == 1  # perf compares depths of one thread's entries only
                perm[a:b] = sorted(range(a, b), key=lambda i: (dsign * dl[i] if one_thread else 0, -sl[i], key(i)))
    return perm


def row_sort_key(p: Profile, sort: tuple[str, ...], s_of: np.ndarray, f_of: np.ndarray):
    """``key(i)``: perf's order of rows by their sort keys alone (the rows of
    sample ``s_of[i]`` and frame ``f_of[i]``), the order of entries equal in
    every period (see :func:`_perf_tie_order`). The tuples compare across the
    reports of one profile (the members of a group view)."""
    s_list, f_list = s_of.tolist(), f_of.tolist()
    comm_names: dict[int, bytes] = {}
    dso_keys: dict[int, tuple] = {}

    def comm_key(s: int) -> bytes:
        c = int(p.comm[s])
        k = comm_names.get(c)
        if k is None:
            k = comm_names[c] = name_key(p.comms[c])
        return k

    def dso_key(fr: int) -> tuple:
        d = int(p.frame_dso[fr])
        k = dso_keys.get(d)
        if k is None:
            k = dso_keys[d] = (1, b"") if d < 0 else (0, name_key(p.dso_short_name(d)))
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
                    first.append((0, name_key(p.sym_name(sym))))
                    then.append((1, dso_key(fr), addr - int(p.frame_off[fr])))
        return (*first, *then)

    return key


def _counts(k: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    """Samples per key: occurrences of each key, or the sum of ``weights`` (samples per row)."""
    if weights is None:
        return np.bincount(k, minlength=size)
    return np.bincount(k, weights=weights, minlength=size).astype(np.int64)


def reports_by_event(p: Profile, sort: tuple[str, ...] = DEFAULT_SORT, *,
                     whole: dict[int, tuple[int, int]] | None = None, members: dict[int, int] | None = None,
                     **kw) -> list[Report]:
    """One report per event present (perf prints a section per event).
    ``whole``: the (samples, period) of every sample of each event when ``p``
    holds those that passed perf's entry filters (see :func:`build_report`).
    ``members``: the size of the group each leader event leads (``Report.members``)."""
    events = uniq(p.event).tolist() if len(p) else list(range(len(p.event_names)))[:1]
    if whole:
        events = sorted(set(events) | set(whole)) if len(p) else sorted(whole)
    w = whole if whole is not None else {}
    one = len(events) <= 1
    out = []
    for e in events or [None]:
        rep = build_report(p if one else p.filter(events=[e]), sort,
                           event=p.event_names[e] if e is not None else None,
                           whole=w.get(e) if whole is not None else None, **kw)
        rep.members = (members or {}).get(e, 1)
        out.append(rep)
    return out
