"""``observe --explain``: each event's fd, rdpmc index and read path.

SHIM's view of its counters: ``creat`` opens each event and ``updateindex``
re-reads the mmap page's ``index`` (the hardware counter + 1 that ``rdpmc``
takes, 0 when the event is not in a hardware counter) before a sampling
burst. This opens the observer's groups for the target exactly as a run
would, enables them for a moment, and reports per event: the fd, its group
leader's fd, thread/CPU, ``index`` and ``rdpmc`` counter number, the page's
``cap_user_rdpmc``/``pmc_width``, and the path the observer would read it by,
with the reason.
"""

from __future__ import annotations

import mmap
import threading
import time

from ..kernel import abi
from .mmap_page import native_rdpmc_available


def _page(fd: int) -> abi.perf_event_mmap_page | None:
    try:
        m = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    except OSError:
        return None
    try:
        return abi.perf_event_mmap_page.from_buffer_copy(m[: abi.ctypes.sizeof(abi.perf_event_mmap_page)])
    finally:
        m.close()


def _path(page, *, self_thread: bool) -> tuple[str, str]:
    if page is None:
        return "read", "the event has no mmap page (mmap refused)"
    if not page.index:
        return "read", ("index 0: the event is not in a hardware counter (a software event, or not scheduled "
                        "at this moment)")
    if not page.cap_user_rdpmc:
        return "read", "cap_user_rdpmc=0: the kernel does not allow rdpmc (sysfs cpu/rdpmc=0)"
    if not self_thread:
        return "read", ("another thread's or CPU's counter: rdpmc reads only the registers of the CPU it runs on, "
                        "so the observer read()s the fd")
    if not native_rdpmc_available():
        return "read", "the native helper is not built: no rdpmc from Python"
    return "rdpmc", "self-monitoring with cap_user_rdpmc and a hardware counter"


def explain_events(events, *, cpu: int | None = None, pid: int | None = None, tid: int | None = None) -> list[dict]:
    """One row per opened event fd (all threads of ``pid``; the calling thread
    when no target is given)."""
    from .observer import Observer

    self_thread = cpu is None and pid is None and tid is None
    if self_thread:
        tid = threading.get_native_id()
    obs = Observer(events, cpu=cpu, pid=pid, tid=tid)
    rows: list[dict] = []
    try:
        obs._open()
        for group in obs._groups:
            group[0].enable(group=True)
        end = time.perf_counter() + 0.002  # let the events be scheduled onto counters
        while time.perf_counter() < end:
            pass
        for group in obs._groups:
            for i, fd in enumerate(group):
                page = _page(fd.fd)
                path, reason = _path(page, self_thread=self_thread)
                index = int(page.index) if page is not None else 0
                rows.append({
                    "event": fd.event, "fd": fd.fd, "leader_fd": group[0].fd, "leader": i == 0,
                    "tid": fd.pid if fd.pid not in (0, -1) else None, "cpu": fd.cpu if fd.cpu >= 0 else None,
                    "type": int(fd.attr.type), "config": int(fd.attr.config),
                    "index": index, "rdpmc": index - 1 if index else None,
                    "cap_user_rdpmc": bool(page.cap_user_rdpmc) if page is not None else False,
                    "pmc_width": int(page.pmc_width) if page is not None else None,
                    "path": path, "reason": reason,
                })
        for group in obs._groups:
            group[0].disable(group=True)
    finally:
        obs.close()
    return rows


def format_rows(rows: list[dict]) -> str:
    head = f"{'EVENT':<24} {'FD':>4} {'LEADER':>6} {'TID':>8} {'CPU':>4} {'INDEX':>5} {'RDPMC':>5} {'WIDTH':>5}  PATH   WHY"
    lines = [head]
    for r in rows:
        dash = lambda v: "-" if v is None else str(v)  # noqa: E731
        lines.append(f"{r['event']:<24} {r['fd']:>4} {r['leader_fd']:>6} {dash(r['tid']):>8} {dash(r['cpu']):>4} "
                     f"{r['index']:>5} {dash(r['rdpmc']):>5} {dash(r['pmc_width']):>5}  {r['path']:<6} {r['reason']}")
    return "\n".join(lines)


def print_explain(args, out) -> int:
    """The CLI's ``--explain``: the read-path facts, then the per-event table."""
    import json

    from .mmap_page import explain

    info = explain()
    rows = explain_events(args.events, cpu=args.cpu, pid=args.pid, tid=args.tid)
    if args.json:
        print(json.dumps({**info, "events": rows}), file=out)
        return 0
    for k, v in info.items():
        print(f"{k:>16}: {v}", file=out)
    print(file=out)
    print(format_rows(rows), file=out)
    return 0
