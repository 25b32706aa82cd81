"""``pmuscope report`` on a terminal: an interactive browser of the overhead
table (textual), in the spirit of perf report's TUI.

==========  ==============================================================
key         does
==========  ==============================================================
Enter       expand / collapse the row's call graph (rows with call chains)
t           zoom into the selected row's thread (command); again to leave
d           zoom into the selected row's shared object; again to leave
s           zoom into the selected row's symbol; again to leave
/           search: keep the rows whose symbol contains the text (Esc clears)
k           next sort keys (comm,dso,sym → dso,sym → sym → comm → pid → tid,comm)
e, Tab      next event
a           annotate the selected symbol (per-instruction shares); b back
b, Esc      back: leave the annotation, the search, then the last zoom
q           quit
==========  ==============================================================

The text the browser shows comes from the same library calls as ``--stdio``
(:func:`~pmuscope.profile.report.build_report`,
:func:`~pmuscope.profile.annotate.annotate_symbol`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import require

require("textual", "tui", "the interactive report browser")

from textual.app import App, ComposeResult  # noqa: E402
from textual.binding import Binding  # noqa: E402
from textual.containers import VerticalScroll  # noqa: E402
from textual.widgets import Footer, Input, Static, Tree  # noqa: E402

from ..profile.report import _HEADERS, _nr, build_report  # noqa: E402

SORT_PRESETS: list[tuple[str, ...]] = [("comm", "dso", "sym"), ("dso", "sym"), ("sym",), ("comm",), ("pid",),
                                       ("tid", "comm")]


@dataclass
class _Zoom:
    kind: str  # thread | dso | sym
    value: str

    def label(self) -> str:
        return {"thread": "Thread", "dso": "DSO", "sym": "Symbol"}[self.kind] + f" {self.value}"


class ReportApp(App):
    """Browse the report of ``profile`` (a :class:`~pmuscope.profile.Profile`)."""

    TITLE = "pmuscope report"
    CSS = ("#header { height: auto; padding: 0 1; } Tree { height: 1fr; } #annotate { height: 1fr; display: none; } "
           "#search { dock: bottom; display: none; }")
    BINDINGS = [
        Binding("t", "zoom('thread')", "Thread"),
        Binding("d", "zoom('dso')", "DSO"),
        Binding("s", "zoom('sym')", "Symbol"),
        Binding("slash", "search", "Search"),
        Binding("k", "next_sort", "Sort"),
        Binding("e", "next_event", "Event"),
        Binding("tab", "next_event", "Event", show=False, priority=True),
        Binding("a", "annotate", "Annotate"),
        Binding("b", "back", "Back"),
        Binding("escape", "back", "Back", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, profile, *, sort: tuple[str, ...] = ("comm", "dso", "sym"), children: bool | None = None,
                 call_graph=None, percent_limit: float = 0.0, source: str = "") -> None:
        super().__init__()
        self.profile = profile
        self.sort = tuple(sort)
        self.show_children = profile.has_callchain if children is None else children
        self.call_graph = call_graph
        self.percent_limit = percent_limit
        self.source = source or profile.source
        present = sorted(set(np.unique(profile.event).tolist())) if len(profile) else []
        self.events: list[int] = present or [0]
        self.event_pos = 0
        self.zooms: list[_Zoom] = []
        self.search = ""
        self.annotating: str | None = None
        self.message = ""
        self.report = None
        self.header_text = ""
        self.rows_shown = 0

    # -- layout
    def compose(self) -> ComposeResult:
        yield Static("", id="header")
        tree: Tree = Tree("report", id="rows")
        tree.show_root = False
        tree.guide_depth = 3
        yield tree
        with VerticalScroll(id="annotate"):
            yield Static("", id="annotate-text")
        yield Input(placeholder="symbol contains...", id="search")
        yield Footer()

    def on_mount(self) -> None:
        self._render()
        self.query_one("#rows", Tree).focus()

    # -- data
    def _event_name(self) -> str:
        names = self.profile.event_names
        i = self.events[self.event_pos]
        return names[i] if i < len(names) else "?"

    def _view_profile(self):
        p = self.profile
        if len(self.events) > 1:
            p = p.filter(events=[self.events[self.event_pos]])
        for z in self.zooms:
            if not len(p):
                break
            if z.kind == "thread":
                p = p.filter(comms=[z.value])
            elif z.kind == "dso":
                names = np.array(p.dso_names(p.frame_dso[p.leaf], short=True), dtype=object)
                p = p.select(names == z.value)
            else:
                p = p.select(np.array(p.frame_names(p.leaf), dtype=object) == z.value)
        return p

    def _render(self) -> None:
        p = self._view_profile()
        cg = self.call_graph if (self.call_graph is not None and p.has_callchain) else None
        rep = build_report(p, self.sort, children=bool(self.show_children and p.has_callchain),
                           percent_limit=self.percent_limit, event=self._event_name(), call_graph=cg)
        self.report = rep
        tree = self.query_one("#rows", Tree)
        tree.clear()
        total = float(rep.total_period) or 1.0
        shown = 0
        widths = {k: max([len(_HEADERS[k])] + [len(d.get(k, "")) for d in rep.display[:2000]]) for k in self.sort}
        self.widths = widths
        for row, disp in zip(rep.rows, rep.display):
            if self.search and self.search.lower() not in str(row.keys.get("sym", disp.get("sym", ""))).lower():
                continue
            cells = "  ".join(f"{disp.get(k, str(row.keys[k])):<{widths[k]}}" for k in self.sort).rstrip()
            ch = f"{row.children:7.2f}%  " if row.children is not None else ""
            label = f"{ch}{row.overhead:7.2f}%  {cells}"
            has_chain = row.callchain is not None and bool(row.callchain.roots)
            tree.root.add(label, data=row, allow_expand=has_chain)
            shown += 1
        self.rows_shown = shown
        if tree.root.children:
            tree.move_cursor(tree.root.children[0])
        self._header()

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        """Call-graph levels are added when their parent is first expanded
        (a large report has thousands of rows with deep graphs)."""
        node = event.node
        if node.children or self.report is None:
            return
        data = node.data
        if hasattr(data, "callchain"):  # a report row
            kids = data.callchain.roots if data.callchain is not None else []
        else:  # a call-graph node
            kids = data.children
        total = float(self.report.total_period) or 1.0
        for n in kids or []:
            node.add(f"{100.0 * n.period / total:6.2f}%  {n.sym}", data=n, allow_expand=bool(n.children))

    def _header(self) -> None:
        rep = self.report
        zoom = "   zoom: " + " > ".join(z.label() for z in self.zooms) if self.zooms else ""
        search = f"   search: {self.search!r}" if self.search else ""
        widths = getattr(self, "widths", {})
        cols = ("Children  " if rep is not None and rep.children else "") + "Overhead  " + \
            "  ".join(f"{_HEADERS[k]:<{widths.get(k, 0)}}" for k in self.sort)
        lines = [f"Samples: {_nr(rep.samples if rep else 0)} of event '{self._event_name()}', "
                 f"Event count (approx.): {rep.total_period if rep else 0}   {self.source}{zoom}{search}",
                 f"sort {','.join(self.sort)}   {self.rows_shown} rows" + (f"   {self.message}" if self.message else ""),
                 "keys: Enter expand  t thread  d dso  s symbol  / search  k sort  e event  a annotate  b back  q quit",
                 cols]
        if self.annotating is not None:
            lines[3] = f"Annotate {self.annotating} (b: back)"
        self.header_text = "\n".join(lines)
        from rich.markup import escape

        self.query_one("#header", Static).update(escape(self.header_text))

    # -- selection
    def _selected_row(self):
        tree = self.query_one("#rows", Tree)
        node = tree.cursor_node
        while node is not None and node.parent is not None and node.parent is not tree.root:
            node = node.parent
        return node.data if node is not None and node.parent is tree.root else None

    def _selected(self, key: str) -> str | None:
        row = self._selected_row()
        if row is None:
            return None
        if key == "thread":
            return str(row.keys["comm"]) if "comm" in row.keys else None
        return str(row.keys[key]) if key in row.keys else None

    # -- actions
    def action_zoom(self, kind: str) -> None:
        if self.annotating is not None:
            return
        if self.zooms and self.zooms[-1].kind == kind:
            self.zooms.pop()
            self.message = ""
            self._render()
            return
        value = self._selected(kind)
        if value is None:
            need = {"thread": "comm", "dso": "dso", "sym": "sym"}[kind]
            self.message = f"no {need} column in this sort: press k for one that has it"
            self._header()
            return
        self.zooms.append(_Zoom(kind, value))
        self.message = ""
        self._render()

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.value = self.search
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.search = event.value.strip()
        event.input.display = False
        self.query_one("#rows", Tree).focus()
        self._render()

    def action_next_sort(self) -> None:
        try:
            i = SORT_PRESETS.index(self.sort)
        except ValueError:
            i = -1
        self.sort = SORT_PRESETS[(i + 1) % len(SORT_PRESETS)]
        self.message = ""
        self._render()

    def action_next_event(self) -> None:
        self.event_pos = (self.event_pos + 1) % len(self.events)
        self._render()

    def action_annotate(self) -> None:
        from ..errors import PmuscopeError
        from ..profile.annotate import annotate_symbol, format_annotation

        sym, dso = self._selected("sym"), self._selected("dso")
        if sym is None:
            self.message = "no symbol column in this sort: press k for one that has it"
            self._header()
            return
        try:
            ann = annotate_symbol(self.profile, sym, dso=dso, event=self._event_name())
        except PmuscopeError as err:
            self.message = f"annotate: {err}"
            self._header()
            return
        self.annotating = sym
        self.annotation_text = format_annotation(ann)
        self.query_one("#annotate-text", Static).update(self.annotation_text.replace("[", r"\["))
        self.query_one("#rows", Tree).display = False
        self.query_one("#annotate", VerticalScroll).display = True
        self.query_one("#annotate", VerticalScroll).focus()
        self._header()

    def action_back(self) -> None:
        box = self.query_one("#search", Input)
        if box.display:
            box.display = False
            self.query_one("#rows", Tree).focus()
            return
        if self.annotating is not None:
            self.annotating = None
            self.query_one("#annotate", VerticalScroll).display = False
            tree = self.query_one("#rows", Tree)
            tree.display = True
            tree.focus()
            self._header()
            return
        if self.search:
            self.search = ""
        elif self.zooms:
            self.zooms.pop()
        self.message = ""
        self._render()

    # -- for tests and logs
    def screen_text(self) -> str:
        """The screen as plain text: header, then the visible rows (expanded call graphs indented)."""
        out = [self.header_text, ""]
        if self.annotating is not None:
            return "\n".join(out) + "\n" + self.annotation_text
        tree = self.query_one("#rows", Tree)

        def walk(node, depth: int) -> None:
            for kid in node.children:
                mark = ("- " if kid.is_expanded else "+ ") if kid.allow_expand else "· "
                out.append("    " * depth + mark + str(kid.label))
                if kid.is_expanded:
                    walk(kid, depth + 1)

        walk(tree.root, 0)
        return "\n".join(out)


def run_browser(profile, **kw: Any) -> int:
    """Run the browser on the terminal until q."""
    ReportApp(profile, **kw).run()
    return 0
