"""perf report's group view: the events of a group (``perf record -e
'{cycles,instructions}'``, the file's HEADER_GROUP_DESC) in one table.

perf shows a recording with event groups this way by default (``--group``;
``--no-group`` for a section per event): one section per group leader whose
Overhead column holds one percentage per member, each of that member's own
total (``util/hist.c`` ``__hpp__fmt``), rows for every entry any member has
(``hists__link``: a member's entry the leader lacks shows 0.00% there), sorted
by the leader's period, then each member's in turn (``__hpp__sort``), then the
sort keys as in a single event's table. The header counts the samples and the
period of all members: ``# Samples: 13  of events 'anon group { a, b }'``.

Built here from each member's :class:`~pmuscope.profile.report.Report`
(whose row order already follows perf's rules for equal periods).
"""

from __future__ import annotations

from typing import Sequence

#: width of one member's percentage in the Overhead column ("%7.2f%%" after a space)
MEMBER_WIDTH = 8


class Group:
    """One event group: its name (None: anonymous) and its members' event indexes."""

    __slots__ = ("name", "members")

    def __init__(self, name: str | None, members: Sequence[int]) -> None:
        self.name = name
        self.members = tuple(members)

    def describe(self, event_names: Sequence[str]) -> str:
        """perf's ``evsel__group_desc``: ``anon group { a, b }`` or ``NAME { a, b }``."""
        names = ", ".join(event_names[i] for i in self.members)
        return f"{self.name or 'anon group'} {{ {names} }}"


def groups_of(descs, nr_events: int) -> list[Group]:
    """The groups of more than one member of HEADER_GROUP_DESC entries
    (``name``, ``leader_idx``, ``nr_members``) that fit the file's events."""
    out = []
    for d in descs or []:
        lo, n = int(d.leader_idx), int(d.nr_members)
        if n > 1 and 0 <= lo and lo + n <= nr_events:
            name = None if d.name in ("", "{anon_group}") else d.name
            out.append(Group(name, range(lo, lo + n)))
    return out


def row_key(row) -> tuple:
    return tuple(sorted(row.keys.items()))


def merge_group(reps: list, group: Group, event_names: Sequence[str], *, percent_limit: float = 0.0,
                children: bool = False):
    """One :class:`Report` of a group from its members' reports (``reps[i]``
    of member ``group.members[i]``; a member without samples: an empty
    report). Its rows carry ``member_overheads`` (one percentage per member),
    with ``children`` also ``member_children`` (perf's Children and Self
    columns, each a percentage per member), and the leader's call graph; a
    row's own weights are the leader's (0 for an entry only members have).
    The report's ``group`` is the description in the header, its
    ``chain_total`` the leader's total (what the call graphs are drawn against).

    With ``children`` the members' reports must be built with ``tie_info``:
    perf sorts the Children view by the leader's Children period alone
    (``__hpp__sort_acc`` has no group case), then, for two entries of one
    thread, by call-chain depth, then by the Self periods of the leader and
    each member in turn (``__hpp__sort``), then by the sort keys."""
    from .report_format import Report, ReportRow

    lead = reps[0]
    desc = group.describe(event_names)
    out = Report(desc, sum(r.samples for r in reps), sum(r.total_period for r in reps), lead.lost, lead.sort,
                 children=children, call_graph=lead.call_graph, group=desc, notes=list(lead.notes),
                 members=len(reps), chain_total=lead.total_period)
    found: dict[tuple, list] = {}  # key -> [per-member row or None, display, position]
    for m, rep in enumerate(reps):
        for pos, (row, disp) in enumerate(zip(rep.rows, rep.display)):
            k = row_key(row)
            cell = found.get(k)
            if cell is None:
                cell = found[k] = [[None] * len(reps), disp, (m, pos)]
            cell[0][m] = row
    for rep in reps:  # widths as perf sizes them over the leader's entries and the linked ones
        for k, w in rep.min_width.items():
            out.min_width[k] = max(out.min_width.get(k, 0), w)
        for k, w in rep.fixed_width.items():
            out.fixed_width[k] = max(out.fixed_width.get(k, 0), w)

    cells = list(found.values())
    if children:
        cells = _children_order(cells, lead)
    else:
        cells.sort(key=lambda c: (*(-(r.period if r is not None else 0.0) for r in c[0]), c[2]))
    for rows, disp, _ in cells:
        pcts = [r.overhead if r is not None else 0.0 for r in rows]
        main = [r.children if r is not None else 0.0 for r in rows] if children else pcts
        if main[0] < percent_limit or (percent_limit > 0 and rows[0] is None):
            continue
        first = next(r for r in rows if r is not None)
        ld = rows[0]
        row = ReportRow(dict(first.keys), ld.samples if ld else 0, ld.period if ld else 0.0, pcts[0],
                        member_overheads=pcts, member_samples=[r.samples if r is not None else 0 for r in rows])
        if children:
            row.children = main[0]
            row.children_samples = ld.children_samples if ld else 0
            row.children_period = ld.children_period if ld else 0.0
            row.member_children = main
        if ld is not None:
            row.callchain = ld.callchain
        out.rows.append(row)
        out.display.append(disp)
    return out


def _children_order(cells: list, lead) -> list:
    """``cells`` in perf's order of a group's Children view (see :func:`merge_group`)."""
    cg = lead.call_graph
    dsign = -1 if cg is not None and cg.resolved_order(True) == "caller" else 1

    def selfs(c) -> tuple:
        return tuple(-(r.period if r is not None else 0.0) for r in c[0])

    def key(c) -> tuple:
        return next(r for r in c[0] if r is not None).tie[2]

    led = [c for c in cells if c[0][0] is not None]
    rest = [c for c in cells if c[0][0] is None]  # the leader's Children period is 0 for these
    led.sort(key=lambda c: -c[0][0].children_period)
    out = []
    i = 0
    while i < len(led):
        j = i + 1
        acc = led[i][0][0].children_period
        while j < len(led) and led[j][0][0].children_period == acc:
            j += 1
        run = led[i:j]
        # perf compares chain depths of one thread's entries only (as a single event's table does)
        one_thread = len({c[0][0].tie[0] for c in run}) == 1 and run[0][0][0].tie[1] is not None
        run.sort(key=lambda c: (dsign * c[0][0].tie[1] if one_thread else 0, *selfs(c), key(c)))
        out += run
        i = j
    rest.sort(key=lambda c: (*selfs(c), key(c)))
    return out + rest
