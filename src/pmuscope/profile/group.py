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


def merge_group(reps: list, group: Group, event_names: Sequence[str], *, percent_limit: float = 0.0):
    """One :class:`Report` of a group from its members' reports (``reps[i]``
    of member ``group.members[i]``; a member without samples: an empty
    report). Its rows carry ``member_overheads`` (one percentage per member)
    and the report ``group`` (the description in the header)."""
    from .report_format import Report, ReportRow

    lead = reps[0]
    desc = group.describe(event_names)
    out = Report(desc, sum(r.samples for r in reps), sum(r.total_period for r in reps), lead.lost, lead.sort,
                 children=False, group=desc, notes=list(lead.notes), members=len(reps))
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

    def order(item):
        rows, _, pos = item[1]
        return (*(-(r.period if r is not None else 0.0) for r in rows), pos)

    for _, (rows, disp, _) in sorted(found.items(), key=order):
        pcts = [r.overhead if r is not None else 0.0 for r in rows]
        if pcts[0] < percent_limit or (percent_limit > 0 and rows[0] is None):
            continue
        first = next(r for r in rows if r is not None)
        row = ReportRow(dict(first.keys), sum(r.samples for r in rows if r is not None),
                        sum(r.period for r in rows if r is not None), pcts[0], member_overheads=pcts,
                        member_samples=[r.samples if r is not None else 0 for r in rows])
        out.rows.append(row)
        out.display.append(disp)
    return out
