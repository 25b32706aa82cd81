"""The overhead table of ``perf report`` as text and JSON: sort keys,
:class:`ReportRow`/:class:`Report`, :func:`format_report` (with the call
graphs drawn under the rows as ``perf report --stdio`` draws them) and
:func:`report_json`.

No numpy here: the rows are built by :func:`pmuscope.profile.report.build_report`
(numpy) or, for a small file, by :mod:`pmuscope.profile.lite` (plain Python),
and both print through this module, so the layout exists once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .._plain import Plain
from ..errors import PmuscopeError

if TYPE_CHECKING:
    from .callchain import CallGraphParams, CallNode, CallTree

SORT_KEYS = ("comm", "pid", "tid", "dso", "sym", "cpu")
DEFAULT_SORT = ("comm", "dso", "sym")
_HEADERS = {"comm": "Command", "pid": "    Pid:Command", "tid": "    Tid:Command", "dso": "Shared Object",
            "sym": "Symbol", "cpu": "CPU"}


def short_dso_name(name: str) -> str:
    """perf report's DSO column for a DSO's full name: the base name of a path,
    ``[kernel.kallsyms]`` as is, ``[JIT] tid PID`` for a JIT map /tmp/perf-PID.map
    (perf's name for it)."""
    if name.startswith("["):
        return name
    base = name.rpartition("/")[2] or name
    if base.startswith("perf-") and base.endswith(".map") and base[5:-4].isdigit():
        return f"[JIT] tid {base[5:-4]}"
    return base


def name_key(text: str) -> bytes:
    """A name as C's strcmp sees it (perf's order of comm, DSO and symbol names):
    its bytes, invalid ones kept as surrogate escapes."""
    return text.encode("utf-8", "surrogateescape")


def thread_label(tid: int, name: str) -> str:
    """perf's Pid:Command text, ``"%7d:%-*.*s"`` of the thread id and its current name."""
    return f"{tid:7d}:{name}"


def cpu_label(cpu: int) -> str:
    """perf's CPU text, C's ``"%*.*d"`` with 3 and 3: -1 (no CPU) is ``-001``."""
    return f"{'-' if cpu < 0 else ''}{abs(cpu):03d}"


def thread_widths(rep: "Report", longest: int, hidden: bool) -> None:
    """The Command and Pid:Command widths perf gives a table (util/hist.c
    hists__calc_col_len): ``longest``, the longest current name of the threads
    of every entry; the Command column that wide exactly (names cut), the
    Pid:Command one at least that plus 8 when --percent-limit hides rows (the
    shown rows size it otherwise)."""
    if "comm" in rep.sort:
        rep.fixed_width["comm"] = max(len(_HEADERS["comm"]), longest)
    if hidden:
        for k in ("pid", "tid"):
            if k in rep.sort:
                rep.min_width[k] = longest + 8


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


class ReportRow(Plain):
    """One line of the report: the values of the sort keys, and its weights."""

    _fields = ("keys", "samples", "period", "overhead", "children", "children_samples", "children_period",
               "callchain", "member_overheads", "member_samples", "member_children")

    keys: dict[str, object]
    samples: int
    period: float
    overhead: float
    children: float | None
    children_samples: int | None
    children_period: float | None
    #: the row's call graph (only when the report was built with ``call_graph``)
    callchain: CallTree | None
    #: a group report's row: the overhead of each member event (the leader's first), its samples,
    #: and in the Children view each member's Children percentage
    member_overheads: list[float] | None
    member_samples: list[int] | None
    member_children: list[float] | None
    #: what perf compares entries of equal periods by, ``(thread id, chain depth or None,
    #: key tuple)``: set by ``build_report(tie_info=True)`` for merging a group's members;
    #: not a field (sort metadata, not part of the row's value)
    tie: tuple | None = None

    def __init__(self, keys: dict[str, object], samples: int, period: float, overhead: float,
                 children: float | None = None, children_samples: int | None = None,
                 children_period: float | None = None, callchain: CallTree | None = None,
                 member_overheads: list[float] | None = None, member_samples: list[int] | None = None,
                 member_children: list[float] | None = None) -> None:
        self.keys = keys
        self.samples = samples
        self.period = period
        self.overhead = overhead
        self.children = children
        self.children_samples = children_samples
        self.children_period = children_period
        self.callchain = callchain
        self.member_overheads = member_overheads
        self.member_samples = member_samples
        self.member_children = member_children

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


class Report(Plain):
    """The aggregated report of one event (or of all events together)."""

    _fields = ("event", "samples", "total_period", "lost", "sort", "rows", "children", "display", "call_graph",
               "min_width", "fixed_width", "group", "notes", "members", "chain_total")

    event: str
    samples: int
    total_period: int
    lost: int
    sort: tuple[str, ...]
    rows: list[ReportRow]
    children: bool
    #: display strings of each row (same order as ``rows``), with perf's [k]/[.] level marks
    display: list[dict[str, str]]
    #: how the rows' call graphs were built and are drawn (None: no call graphs)
    call_graph: CallGraphParams | None
    #: least width of a column (perf widens the DSO column to 16 when an entry has no symbol)
    min_width: dict[str, int]
    #: exact width of a column, longer values cut (perf's Command column: the longest
    #: current name of the rows' threads, not of the names shown)
    fixed_width: dict[str, int]
    #: a group report (perf's group view): ``anon group { a, b }``; None: one event
    group: str | None
    #: header lines before the totals (perf's ``# comm: bash`` of a one-name filter)
    notes: list[str]
    #: events in the group this event leads (perf says "of events" then); 1: no group
    members: int
    #: the period the call graphs' percentages are of (None: ``total_period``; a group
    #: report's: its leader's)
    chain_total: int | None

    def __init__(self, event: str, samples: int, total_period: int, lost: int, sort: tuple[str, ...],
                 rows: list[ReportRow] | None = None, children: bool = False,
                 display: list[dict[str, str]] | None = None, call_graph: CallGraphParams | None = None,
                 min_width: dict[str, int] | None = None, fixed_width: dict[str, int] | None = None,
                 group: str | None = None, notes: list[str] | None = None, members: int = 1,
                 chain_total: int | None = None) -> None:
        self.event = event
        self.samples = samples
        self.total_period = total_period
        self.lost = lost
        self.sort = sort
        self.rows = [] if rows is None else rows
        self.children = children
        self.display = [] if display is None else display
        self.call_graph = call_graph
        self.min_width = {} if min_width is None else min_width
        self.fixed_width = {} if fixed_width is None else fixed_width
        self.group = group
        self.notes = [] if notes is None else notes
        self.members = members
        self.chain_total = chain_total

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
            from .callchain import tree_json

            for r, j in zip(self.rows, out["rows"]):
                if r.callchain is not None:
                    j["callchain"] = tree_json(r.callchain, total=float(self.total_period), params=cg,
                                               row_period=r.chain_parent_period)
        return out


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


#: lines of a report joined into one piece of text by :func:`iter_format_report`
LINE_BATCH = 4096


def format_report(rep: Report, *, show_samples: bool = False, header: bool = True, lost: bool = True,
                  quiet: bool = False) -> str:
    """The report as ``perf report --stdio`` prints it (header, column rule, rows).
    ``lost``: the ``# Total Lost Samples`` lines, which perf prints once, above
    the first event's table."""
    return "".join(iter_format_report(rep, show_samples=show_samples, header=header, lost=lost, quiet=quiet))


def iter_format_report(rep: Report, *, show_samples: bool = False, header: bool = True, lost: bool = True,
                       quiet: bool = False) -> Iterator[str]:
    """:func:`format_report`'s text in pieces of about :data:`LINE_BATCH` lines
    (joined: the same text), so that a writer never holds a large report's whole text."""
    lines: list[str] = []
    if header and not quiet:
        if rep.notes:
            lines += ["#", *rep.notes]
        if lost:
            lines += ["#", f"# Total Lost Samples: {rep.lost}", "#"]
        plural = "s" if rep.members > 1 else ""
        lines += [f"# Samples: {_nr(rep.samples)} of event{plural} '{rep.group or rep.event}'",
                  f"# Event count (approx.): {rep.total_period}", "#"]
    cols: list[tuple[str, list[str], bool]] = []  # (header, values, right aligned)
    if rep.group is not None:
        # one percentage per member, each in 8 (util/hist.c __hpp__fmt of a group event)
        def members(vals) -> list[str]:
            return ["".join(f"{v:.2f}%".rjust(8) for v in vs) for vs in vals] or [" " * (8 * rep.members)]

        if rep.children:
            cols.append(("Children", members(r.member_children or [r.children] for r in rep.rows), True))
            cols.append(("Self", members(r.member_overheads or [r.overhead] for r in rep.rows), True))
        else:
            cols.append(("Overhead", members(r.member_overheads or [r.overhead] for r in rep.rows), True))
    elif rep.children:
        cols.append(("Children", [f"{r.children:.2f}%" for r in rep.rows], True))
        cols.append(("Self", [f"{r.overhead:.2f}%" for r in rep.rows], True))
    else:
        cols.append(("Overhead", [f"{r.overhead:.2f}%" for r in rep.rows], True))
    if show_samples and rep.group is not None:  # each member's count in 12
        cols.append(("Samples", ["".join(str(n).rjust(12) for n in (r.member_samples or [r.samples]))
                                 for r in rep.rows] or [" " * (12 * rep.members)], True))
    elif show_samples:
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

    if not quiet:  # perf -q: the rows alone
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
            lines.extend(format_callchain(row.callchain, cg, total=float(rep.total_period if rep.chain_total is None
                                                                         else rep.chain_total),
                                          parent_period=row.chain_parent_period, skip_first=skip_first))
        if len(lines) >= LINE_BATCH:
            lines.append("")  # the piece ends with its last line's newline
            yield "\n".join(lines)
            lines = []
    lines.append("")
    yield "\n".join(lines) + "\n"


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
