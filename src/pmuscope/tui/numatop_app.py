"""``pmuscope numatop``'s live terminal UI (textual), with numatop's windows:

======  =========================  ==========================================
key     view                       numatop window
======  =========================  ==========================================
H       process list (home)        WIN1 TOPNPROC
I       normalized (RPI/LPI)       WIN2
Enter   one process, per node      WIN3 (on the process list) / WIN12 (nodes)
T       threads of a process       WIN4 TOPNLWP
Enter   one thread, per node       WIN5 (on the thread list)
M, L    memory areas               WIN6 (ACCESS%, LAT from load-latency samples; per-node placement; WIN7 by node);
                                   of the one thread when opened from WIN5 (numatop's LAT_LWP)
C       call chains                WIN9 (1-4 there: RMA, LMA, CLK, IR); of the one thread from WIN5;
                                   on a memory area (M/L view): WIN10, the chains of its loads above
                                   128 cycles (SPE: the top PCs, it records no chains)
N       node overview              WIN11
D       node detail                WIN12
1-5     sort by RMA, LMA, RMA/LMA, CPI, CPU%
B       back;  R refresh now;  Q quit
======  =========================  ==========================================

Columns this machine cannot measure show ``n/a``; the header names why.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..errors import require

require("textual", "tui", "the numatop terminal UI")

from textual.app import App, ComposeResult  # noqa: E402
from textual.binding import Binding  # noqa: E402
from textual.css.query import NoMatches  # noqa: E402
from textual.widgets import DataTable, Footer, Static  # noqa: E402

from ..numa.model import parse_numa_maps_by_area, read_maps, read_numa_maps  # noqa: E402
from ..system import _fs  # noqa: E402
from ..numa.snapshot import NumaSampler, Snapshot, attach_memory, group_reasons, select_rows  # noqa: E402



class _NodeRef:
    """The two fields of a node the row filters need."""

    def __init__(self, id: int, cpus: tuple[int, ...]) -> None:
        self.id, self.cpus = id, cpus


SORT_KEYS = {"1": "rma", "2": "lma", "3": "rma_lma", "4": "cpi", "5": "cpu_pct"}


def _f(v: Any, spec: str = ".2f", scale: float = 1.0) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return format(v / scale, spec)
    return str(v)


def _k(v: Any) -> str:
    return _f(v, ".1f", 1000.0)


class NumatopApp(App):
    """The live NUMA view. ``sampler_factory`` builds the sampler (a
    :class:`~pmuscope.numa.snapshot.NumaSampler` by default)."""

    TITLE = "pmuscope numatop"
    CSS = "#header { height: auto; padding: 0 1; } DataTable { height: 1fr; }"
    BINDINGS = [
        Binding("h", "view('home')", "Home"),
        Binding("i", "view('normalized')", "Normalized"),
        Binding("n", "view('nodes')", "Nodes"),
        Binding("d", "view('node')", "Node detail"),
        Binding("enter", "open", "Open", show=True),
        Binding("t", "view('threads')", "Threads"),
        Binding("m", "view('maps')", "Mem areas"),
        Binding("l", "view('maps')", "Latency", show=False),
        Binding("c", "view('callchain')", "Call chains"),
        Binding("b", "back", "Back"),
        Binding("r", "refresh_now", "Refresh"),
        Binding("1", "sort('1')", "RMA", show=False),
        Binding("2", "sort('2')", "LMA", show=False),
        Binding("3", "sort('3')", "RMA/LMA", show=False),
        Binding("4", "sort('4')", "CPI", show=False),
        Binding("5", "sort('5')", "CPU%", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, *, delay: float = 5.0, run_time: float | None = None,
                 sampler_factory: Callable[[], Any] | None = None, top: int = 200,
                 root: str = "/", node: int | None = None, sort: str = "cpu_pct",
                 callchain_fn: Callable[..., Any] | None = None,
                 latency_fn: Callable[..., Any] | None = None) -> None:
        super().__init__()
        self.latency_fn = latency_fn
        self.latency: dict[str, Any] | None = None
        self.latency_pid: int | None = None
        self.callchain_fn = callchain_fn
        self.chain_metric = "clk"
        self.chains = None
        #: WIN10: the selected memory area and its chains (AreaCallChains)
        self.area: Any = None
        self.area_chains: Any = None
        self.root = root
        self.node_filter = node
        self.delay = delay
        self.run_time = run_time
        self.sampler_factory = sampler_factory or (lambda: NumaSampler(threads=True))
        self.top = top
        self.sampler = None
        self.snap: Snapshot | None = None
        self.view_name = "home"
        self.history: list[str] = []
        self.sort = sort
        self.pid: int | None = None
        self.tid: int | None = None  # the thread of WIN5
        #: the thread the memory-area and call-chain views are about (None: the whole process)
        self.scope_tid: int | None = None
        self.latency_tid: int | None = None
        self.node_id: int | None = None
        self.refreshes = 0
        self.error: str | None = None
        self._busy = threading.Lock()
        self.header_text = ""

    def compose(self) -> ComposeResult:
        yield Static("starting: opening per-CPU events...", id="header")
        yield DataTable(id="table", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._open, thread=True, exclusive=False)
        if self.run_time is not None:
            self.set_timer(self.run_time, self.exit)

    # -- sampling (worker threads)
    def _open(self) -> None:
        try:
            self.sampler = self.sampler_factory()
        except Exception as err:  # a PmuscopeError names the cause; show it, don't crash
            self.call_from_thread(self._fail, f"{type(err).__name__}: {err}")
            return
        if not self.is_running:  # quit while the events were opening
            self.sampler.close()
            self.sampler = None
            return
        self.call_from_thread(self.set_interval, self.delay, self.action_refresh_now)
        self.call_from_thread(self._header)

    def _fail(self, text: str) -> None:
        self.error = text
        self.header_text = f"[b]cannot observe:[/b] {text}"
        self.query_one("#header", Static).update(self.header_text)

    def action_refresh_now(self) -> None:
        if self.sampler is not None:
            self.run_worker(self._refresh, thread=True, exclusive=False)

    def _refresh(self) -> None:
        if not self._busy.acquire(blocking=False):
            return
        try:
            if self.sampler is None:
                return
            snap = self.sampler.refresh(memory_pids=())
        finally:
            self._busy.release()
        if self.is_running:
            self.call_from_thread(self._show, snap)

    def _show(self, snap: Snapshot) -> None:
        self.snap = snap
        self.refreshes += 1
        try:
            self._render()
        except NoMatches:
            pass  # a refresh that lands while the app shuts down

    # -- views
    def _header(self) -> None:
        snap = self.snap
        plat = self.sampler.platform.name if self.sampler is not None else "?"
        where = f"   node filter {self.node_filter}" if self.node_filter is not None else ""
        from rich.markup import escape

        lines = [f"[b]{escape(self.view_title())}[/b]   platform {plat}   interval {self.delay:g}s   sort {self.sort}{where}"
                 + (f"   refreshed {self.refreshes}x, last {snap.interval_s:.2f}s" if snap else "   (waiting for the first interval)")]
        if snap is not None:
            if snap.attribution.get("unattributed_pct"):
                lines.append(f"attribution: switch sampling, {snap.attribution['unattributed_pct']:.1f}% of time unattributed (lost samples)")
            for why, cols in group_reasons(snap.unavailable):
                lines.append(f"n/a {', '.join(cols)}: {why}")
        lines.append("keys: 1-5 sort  I normalized  N nodes  D node detail  Enter open  T threads  M memory areas  C call chains  B back  H home  R refresh  Q quit")
        self.header_text = "\n".join(lines)
        self.query_one("#header", Static).update(self.header_text)

    def view_title(self) -> str:
        return {
            "home": "Monitoring the load of the system (processes)",
            "normalized": "Normalized by instructions (RPI/LPI per 1000 instructions)",
            "process": f"Process {self.pid}: per-node breakdown",
            "threads": f"Threads of process {self.pid}",
            "thread": f"Thread {self.tid} of process {self.pid}: per-node breakdown",
            "maps": f"Memory areas of {self._scope()}",
            "callchain": f"Call chains of {self._scope()}",
            "areachains": self._area_title(),
            "nodes": "Node overview",
            "node": f"Node {self.node_id} detail",
        }[self.view_name]

    def _table(self, columns: list[str], rows: list[list[str]], keys: list[str] | None = None) -> None:
        table = self.query_one("#table", DataTable)
        selected = self._selected_key()
        table.clear(columns=True)
        table.add_columns(*columns)
        for i, row in enumerate(rows):
            table.add_row(*row, key=keys[i] if keys else None)
        # keep the cursor on the same process/node across refreshes and view changes
        want = selected if selected and keys and selected in keys else None
        if want is None and keys:
            want = {"p": f"p{self.pid}", "n": f"n{self.node_id}", "t": f"t{self.tid}"}.get(keys[0][:1])
        if want is not None and keys and want in keys:
            table.move_cursor(row=keys.index(want))

    def _processes(self) -> list[dict[str, Any]]:
        rows = [r for r in self.snap.processes if (r["cpu_pct"] or 0) > 0 or self.node_filter is not None]
        if self.node_filter is not None or self.sort.startswith("mem"):
            attach_memory(rows, [_NodeRef(n["node"], tuple(n["cpus"])) for n in self.snap.nodes], self.root)
        return select_rows(rows, sort=self.sort, top=self.top, node=self.node_filter,
                           nodes=[_NodeRef(n["node"], tuple(n["cpus"])) for n in self.snap.nodes])

    def _render(self) -> None:
        self._header()
        snap = self.snap
        if snap is None:
            return
        v = self.view_name
        if v in ("home", "normalized"):
            procs = self._processes()
            if v == "home":
                cols = ["PID", "PROC", "RMA(K)", "LMA(K)", "RMA/LMA", "CPI", "*CPU%"]
                rows = [[str(p["pid"]), p["comm"], _k(p["rma"]), _k(p["lma"]), _f(p["rma_lma"]), _f(p["cpi"]), _f(p["cpu_pct"], ".1f")] for p in procs]
            else:
                cols = ["PID", "PROC", "RPI(K)", "LPI(K)", "CPI", "*CPU%"]
                rows = [[str(p["pid"]), p["comm"], _f(p["rpi"], ".4f"), _f(p["lpi"], ".4f"), _f(p["cpi"]), _f(p["cpu_pct"], ".1f")] for p in procs]
            self._table(cols, rows, [f"p{p['pid']}" for p in procs])
        elif v == "process":
            p = self._proc()
            if p is None:
                return
            mem = read_numa_maps(self.root, p["pid"]) or {}
            cols = ["NODE", "CPU%", "RMA(K)", "LMA(K)", "RMA/LMA", "CPI", "MEM(MB)"]
            rows = [[str(c["node"]), _f(c["cpu_pct"], ".1f"), _k(c["rma"]), _k(c["lma"]), _f(c["rma_lma"]), _f(c["cpi"]),
                     _f(mem.get(c["node"], 0) / 2**20, ".1f")] for c in p["by_node"]]
            self._table(cols, rows)
        elif v == "threads":
            threads = select_rows([t for t in snap.threads if t["pid"] == self.pid], sort=self.sort)
            cols = ["TID", "PROC", "RMA(K)", "LMA(K)", "RMA/LMA", "CPI", "*CPU%"]
            rows = [[str(t["tid"]), t["comm"], _k(t["rma"]), _k(t["lma"]), _f(t["rma_lma"]), _f(t["cpi"]), _f(t["cpu_pct"], ".1f")] for t in threads]
            self._table(cols, rows, [f"t{t['tid']}" for t in threads])
        elif v == "thread":
            self.header_text += "\nkeys here: L memory areas (latency) of this thread  C call chains of this thread  B back  H home"
            self.query_one("#header", Static).update(self.header_text)
            t = self._thread()
            cols = ["NODE", "CPU%", "RMA(K)", "LMA(K)", "RMA/LMA", "CPI"]
            if t is None:
                self._table(cols, [["n/a", f"thread {self.tid} of {self.pid} did not run in the last interval (or exited)", "", "", "", ""]])
                return
            rows = [[str(c["node"]), _f(c["cpu_pct"], ".1f"), _k(c["rma"]), _k(c["lma"]), _f(c["rma_lma"]), _f(c["cpi"])]
                    for c in t["by_node"]]
            self._table(cols, rows)
        elif v == "maps":
            areas = read_maps(self.root, self.pid) if self.pid is not None else None
            placement = parse_numa_maps_by_area(_fs.read_text(self.root, f"proc/{self.pid}/numa_maps") or "")
            lat = self.latency if (self.latency_pid, self.latency_tid) == (self.pid, self.scope_tid) else None
            by_start = {r["addr"]: r for r in (lat or {}).get("areas", [])}
            node_ids = [n["node"] for n in snap.nodes]
            cols = ["ADDR", "SIZE(K)", "PERMS", "ACCESS%", "LAT(ns)"] + [f"N{n}(K)" for n in node_ids] + ["DESC"]
            rows, keys = [], []
            for a in areas or []:
                keys.append(f"a{a.start:x}")
                place = placement.get(a.start, {})
                la = by_start.get(a.start, {})
                rows.append([f"{a.start:x}", str(a.size // 1024), a.perms, _f(la.get("access_pct"), ".1f"),
                             _f(la.get("lat_ns"), ".0f")] + [str(place.get(n, 0) // 1024) for n in node_ids] + [a.desc])
            self._table(cols, rows, keys)
            if lat is None:
                note = "ACCESS%/LAT: sampling loads..."
            elif lat.get("reason"):
                note = f"n/a ACCESS%/LAT: {lat['reason']}"
            else:
                dist = "  ".join(f"node{n} {d['access_pct']:.1f}% {d['lat_ns']:.0f}ns" for n, d in sorted(lat["nodes"].items()))
                src = f" ({lat['source']})" if lat.get("source") else ""
                note = f"ACCESS%/LAT from {lat['samples']} load samples{src}; by node of the page: {dist or 'n/a'}"
            self.header_text += "\n" + note + "\nkeys here: C call chains to the selected area  B back  H home"
            self.query_one("#header", Static).update(self.header_text)
        elif v == "areachains":
            self._render_area_chains()
        elif v == "callchain":
            self._render_chains()
        elif v == "nodes":
            cols = ["NODE", "MEM.ALL(GB)", "MEM.FREE(GB)", "RMA(K)", "LMA(K)", "RMA/LMA", "CPI", "CPU%"]
            rows = [[str(n["node"]) + (" (memory only)" if n["memory_only"] else ""), _f(n["mem_total_kb"], ".1f", 2**20),
                     _f(n["mem_free_kb"], ".1f", 2**20), _k(n["rma"]), _k(n["lma"]), _f(n["rma_lma"]), _f(n["cpi"]),
                     _f(n["cpu_pct"], ".1f")] for n in snap.nodes]
            self._table(cols, rows, [f"n{n['node']}" for n in snap.nodes])
        elif v == "node":
            n = next((x for x in snap.nodes if x["node"] == self.node_id), snap.nodes[0])
            from ..system._fs import format_cpulist

            items = [("CPU", format_cpulist(n["cpus"]) or "(none: memory-only node)"), ("CPU%", _f(n["cpu_pct"], ".1f")),
                     ("MEM total (GB)", _f(n["mem_total_kb"], ".2f", 2**20)), ("MEM free (GB)", _f(n["mem_free_kb"], ".2f", 2**20)),
                     ("MEM active (GB)", _f(n["active_kb"], ".2f", 2**20)), ("MEM inactive (GB)", _f(n["inactive_kb"], ".2f", 2**20)),
                     ("Dirty (MB)", _f(n["dirty_kb"], ".1f", 1024)), ("Writeback (MB)", _f(n["writeback_kb"], ".1f", 1024)),
                     ("Mapped (MB)", _f(n["mapped_kb"], ".1f", 1024)), ("IMC bandwidth (MB/s)", _f(n["imc_mb_s"], ".1f")),
                     ("UPI bandwidth (MB/s)", _f(n["upi_mb_s"], ".1f")),
                     ("Distances", " ".join(f"{k}:{d}" for k, d in n["distances"].items()))]
            self._table(["ITEM", "VALUE"], [[a, b] for a, b in items])

    def _render_chains(self) -> None:
        ch = self.chains
        self.header_text += "\nkeys here: 1 RMA  2 LMA  3 CLK  4 IR (the event whose overflows are sampled)"
        self.query_one("#header", Static).update(self.header_text)
        if ch is None or ch.pid != self.pid or ch.metric != self.chain_metric or ch.tid != self.scope_tid:
            self._table(["COUNT", "CALL CHAIN (leaf first)"], [["", f"recording {self.chain_metric.upper()} call chains of {self.pid}..."]])
            return
        if not ch.chains:
            self._table(["COUNT", "CALL CHAIN (leaf first)"], [["n/a", ch.reason or "no call chains"]])
            return
        rows = [[str(count), " <- ".join(reversed(frames))] for count, frames in ch.chains]
        self._table(["COUNT", f"CALL CHAIN (leaf first; {ch.event}, {ch.samples} samples)"], rows)

    def _area_title(self) -> str:
        ac = self.area_chains
        if ac is not None and self.area is not None and ac.area_start == self.area.start:
            return ac.title
        return f"Call chains to area {self.area.start:x} ({self.area.desc})" if self.area is not None else "Call chains to area"

    def _render_area_chains(self) -> None:
        ac, cols = self.area_chains, ["COUNT", "CALL CHAIN (leaf first)"]
        if ac is None or self.area is None or ac.area_start != self.area.start:
            self._table(cols, [["", f"collecting the loads to {self.area.start:x}..."]] if self.area else [])
            return
        if ac.kind == "pc":
            self.header_text += (f"\n{ac.source or 'this source'} records carry no call chain: the load PCs of the area's "
                                 "accesses, symbolized")
        self.header_text += (f"\n{ac.samples} loads above {ac.min_latency_cycles} cycles "
                             f"({ac.below} at or below it left out)")
        self.query_one("#header", Static).update(self.header_text)
        if not ac.chains:
            self._table(cols, [["n/a", ac.reason or "no call chains"]])
            return
        head = "CALL CHAIN (leaf first)" if ac.kind == "callchain" else "PC (symbol)"
        self._table(["COUNT", head], [[str(n), " <- ".join(reversed(frames))] for n, frames in ac.chains])

    def _area_chains(self) -> None:
        from ..numa.areachains import area_callchains

        area, lat = self.area, self.latency
        if (self.latency_pid, self.latency_tid) != (self.pid, self.scope_tid):
            lat = None  # of another process or thread: the maps view's sampling is still running
        if lat is None or "mem_samples" not in lat:
            from ..numa.areachains import AreaCallChains

            why = (lat or {}).get("reason") or "sampling the loads of this process..."
            result = AreaCallChains(self.latency_pid, area.start, area.end, area.desc, reason=why)
        else:
            result = area_callchains(lat["mem_samples"], area, pid=self.latency_pid, tid=self.latency_tid,
                                     procfs_root=f"{self.root.rstrip('/')}/proc")
        self.call_from_thread(self._area_chains_done, result)

    def _area_chains_done(self, result) -> None:
        self.area_chains = result
        if self.view_name == "areachains":
            try:
                self._render()
            except NoMatches:
                pass

    def _record_chains(self) -> None:
        pid, metric, tid = self.pid, self.chain_metric, self.scope_tid
        fn = self.callchain_fn
        if fn is None:
            from ..numa.callchains import record_callchains

            fn = lambda pid, metric, tid=None: record_callchains(  # noqa: E731
                pid, metric, self.sampler.platform, duration=min(self.delay, 2.0), tid=tid)
        # callchain_fn(pid, metric[, tid=]): tid only for one thread (WIN5)
        result = fn(pid, metric) if tid is None else fn(pid, metric, tid=tid)
        self.call_from_thread(self._chains_done, result)

    def _record_latency(self) -> None:
        pid, tid = self.pid, self.scope_tid
        fn = self.latency_fn
        if fn is None:
            from ..numa.latency import measure_latency

            fn = lambda pid, tid=None: measure_latency(pid, self.sampler.platform, self.sampler.nodeset.cpus,  # noqa: E731
                                                       duration=min(self.delay, 2.0), root=self.root, tid=tid)
        # latency_fn(pid[, tid=]): tid only for one thread (WIN5)
        result = fn(pid) if tid is None else fn(pid, tid=tid)
        self.call_from_thread(self._latency_done, pid, result, tid)

    def _latency_done(self, pid: int, result: dict[str, Any], tid: int | None = None) -> None:
        self.latency, self.latency_pid, self.latency_tid = result, pid, tid
        if self.view_name == "areachains" and self.area is not None:
            self.run_worker(self._area_chains, thread=True, exclusive=False)
        if self.view_name == "maps":
            try:
                self._render()
            except NoMatches:
                pass

    def _chains_done(self, result) -> None:
        self.chains = result
        if self.view_name == "callchain":
            try:
                self._render()
            except NoMatches:
                pass

    def _scope(self) -> str:
        return f"process {self.pid}" if self.scope_tid is None else f"thread {self.scope_tid} of process {self.pid}"

    def _thread(self) -> dict[str, Any] | None:
        if self.snap is None or self.pid is None or self.tid is None:
            return None
        return next((t for t in self.snap.threads if t["pid"] == self.pid and t["tid"] == self.tid), None)

    def _proc(self) -> dict[str, Any] | None:
        if self.snap is None or self.pid is None:
            return None
        return next((p for p in self.snap.processes if p["pid"] == self.pid), None)

    def _selected_key(self) -> str | None:
        table = self.query_one("#table", DataTable)
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value

    # -- actions
    def _go(self, name: str) -> None:
        if name != self.view_name:
            self.history.append(self.view_name)
        self.view_name = name
        self._render()

    def action_view(self, name: str) -> None:
        if name == "callchain" and self.view_name in ("maps", "areachains"):
            self._open_area_chains()
            return
        if name in ("maps", "callchain"):
            # from WIN5 (or a view opened from it) these are about the one thread
            if self.view_name == "thread":
                self.scope_tid = self.tid
            elif self.view_name not in ("maps", "callchain"):
                self.scope_tid = None
        if name in ("threads", "maps", "callchain", "process"):
            key = self._selected_key()
            if key and key.startswith("p"):
                self.pid = int(key[1:])
            if self.pid is None:
                self.bell()
                return
        if name == "node":
            key = self._selected_key()
            if key and key.startswith("n"):
                self.node_id = int(key[1:])
            elif self.node_id is None and self.snap is not None:
                self.node_id = self.snap.nodes[0]["node"]
        self._go(name)
        if name == "callchain" and self.sampler is not None:
            self.run_worker(self._record_chains, thread=True, exclusive=False)
        if name == "maps" and self.sampler is not None:
            self.run_worker(self._record_latency, thread=True, exclusive=False)

    def _open_area_chains(self) -> None:
        """WIN10: C on a memory area opens the call chains of its slow loads."""
        key = self._selected_key()
        if self.view_name != "maps" or not key or not key.startswith("a"):
            self.bell()
            return
        from ..numa.model import read_maps as _read_maps

        start = int(key[1:], 16)
        self.area = next((a for a in _read_maps(self.root, self.pid) or [] if a.start == start), None)
        if self.area is None:
            self.bell()  # the area went away since the view was drawn
            return
        self.area_chains = None
        self._go("areachains")
        self.run_worker(self._area_chains, thread=True, exclusive=False)

    def action_open(self) -> None:
        key = self._selected_key()
        if key and key.startswith("p"):
            self.pid = int(key[1:])
            self._go("process")
        elif key and key.startswith("n"):
            self.node_id = int(key[1:])
            self._go("node")
        elif key and key.startswith("t") and self.view_name == "threads":
            self.tid = int(key[1:])
            self._go("thread")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_back(self) -> None:
        self.view_name = self.history.pop() if self.history else "home"
        self._render()

    def action_sort(self, key: str) -> None:
        if self.view_name == "callchain":
            metric = {"1": "rma", "2": "lma", "3": "clk", "4": "ir"}.get(key)
            if metric is not None and metric != self.chain_metric:
                self.chain_metric = metric
                self._render()
                self.run_worker(self._record_chains, thread=True, exclusive=False)
            return
        self.sort = SORT_KEYS[key]
        self._render()

    def screen_text(self) -> str:
        """The current screen as plain text: header, table, keys (for logs and tests)."""
        table = self.query_one("#table", DataTable)
        from rich.text import Text

        text = Text.from_markup(self.header_text).plain
        cols = [str(c.label) for c in table.ordered_columns]
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
        out = [text, "", "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
        out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        return "\n".join(out)

    def on_unmount(self) -> None:
        with self._busy:  # not while a refresh is reading the events
            if self.sampler is not None:
                self.sampler.close()
                self.sampler = None


def run_app(*, delay: float = 5.0, run_time: float | None = None, pmu: bool = True, switches: bool = True,
            node: int | None = None, sort: str = "cpu_pct", top: int | None = None) -> int:
    app = NumatopApp(delay=delay, run_time=run_time, node=node, sort=sort, top=top or 200,
                     sampler_factory=lambda: NumaSampler(pmu=pmu, switches=switches, threads=True, memory=False))
    app.run()
    return 0 if app.error is None else 1
