"""numatop's deeper per-process windows as data, for ``numatop --once -p PID``.

- ``memory_areas`` (WIN6): every area of ``/proc/PID/maps`` with its share
  of the sampled loads (ACCESS%) and their mean latency;
- ``node_latency`` (WIN7): the same per node holding the sampled pages;
- ``call_chains`` (WIN9): the top call chains at which each NUMA event
  (``rma``, ``lma``, ``clk``, ``ir``) overflowed.

Each window carries ``unavailable``: None when measured, else the one-line
reason this machine cannot measure it (no load-latency PMU, no hardware
PMU, the process exited, ...). The measuring functions are the ones the TUI
uses (:func:`pmuscope.numa.latency.measure_latency`,
:func:`pmuscope.numa.callchains.record_callchains`), injectable for tests.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

METRICS = ("rma", "lma", "clk", "ir")


def _areas_without_samples(pid: int, root: str) -> list[dict[str, Any]]:
    from .latency import area_stats
    from .model import read_maps

    return area_stats(read_maps(root, pid) or [], np.zeros(0, np.uint64), np.zeros(0), 1.0)


def _area_row(a: dict[str, Any]) -> dict[str, Any]:
    return {"addr": f"{int(a['addr']):#x}", "size": int(a["size"]), "perms": a["perms"], "desc": a["desc"],
            "samples": int(a["samples"]), "access_pct": a["access_pct"],
            "lat_ns": None if a["lat_ns"] is None else float(a["lat_ns"])}


def process_windows(pid: int, platform, cpus: list[int], *, duration: float = 1.0, root: str = "/",
                    latency_fn: Callable[..., dict] | None = None,
                    callchain_fn: Callable[..., Any] | None = None, top: int = 10) -> dict[str, Any]:
    """``{"memory_areas": ..., "node_latency": ..., "call_chains": ...}`` for ``pid``."""
    from .model import read_maps

    alive = read_maps(root, pid) is not None
    gone = None if alive else f"pid {pid} does not exist (it exited?)"
    if latency_fn is None:
        from .latency import measure_latency

        latency_fn = lambda p: measure_latency(p, platform, cpus, duration=duration, root=root)  # noqa: E731
    if callchain_fn is None:
        from .callchains import record_callchains

        callchain_fn = lambda p, m: record_callchains(p, m, platform, duration=duration, top=top)  # noqa: E731
    lat = latency_fn(pid) if alive else {"areas": [], "nodes": {}, "samples": 0, "source": None, "reason": gone}
    why = lat.get("reason")
    areas = lat.get("areas") or (_areas_without_samples(pid, root) if alive else [])
    memory_areas = {"pid": pid, "source": lat.get("source"), "samples": int(lat.get("samples") or 0),
                    "areas": [_area_row(a) for a in areas], "unavailable": why}
    nodes = [{"node": int(n), "access_pct": float(v["access_pct"]), "lat_ns": float(v["lat_ns"])}
             for n, v in sorted((lat.get("nodes") or {}).items())]
    node_latency = {"pid": pid, "source": lat.get("source"), "samples": memory_areas["samples"], "nodes": nodes,
                    "unavailable": why if not nodes else None}
    if node_latency["unavailable"] is None and not nodes:
        node_latency["unavailable"] = "no sampled page is resident on a node"
    chains: dict[str, Any] = {}
    for metric in METRICS:
        if not alive:
            chains[metric] = {"event": None, "samples": 0, "chains": [], "unavailable": gone}
            continue
        cc = callchain_fn(pid, metric)
        chains[metric] = {"event": cc.event, "samples": int(cc.samples),
                          "chains": [{"count": int(n), "frames": list(frames)} for n, frames in cc.chains],
                          "unavailable": cc.reason}
    return {"memory_areas": memory_areas, "node_latency": node_latency,
            "call_chains": {"pid": pid, "metrics": chains}}


#: CSV columns the windows add (appended after the others, only with -p)
CSV_WINDOW_COLUMNS = ("addr", "size", "perms", "desc", "samples", "access_pct", "lat_ns", "metric", "event", "count",
                      "chain", "unavailable")


def csv_rows(windows: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """table=area / node_latency / call_chain rows; a window with nothing to
    show gives one row holding its ``unavailable`` reason."""
    out: list[dict[str, Any]] = []
    ma = windows["memory_areas"]
    for a in ma["areas"]:
        out.append({"interval": index, "table": "area", "pid": ma["pid"], **a, "unavailable": ma["unavailable"]})
    if not ma["areas"]:
        out.append({"interval": index, "table": "area", "pid": ma["pid"], "unavailable": ma["unavailable"]})
    nl = windows["node_latency"]
    for n in nl["nodes"]:
        out.append({"interval": index, "table": "node_latency", "pid": nl["pid"], "node": n["node"],
                    "access_pct": n["access_pct"], "lat_ns": n["lat_ns"], "samples": nl["samples"]})
    if not nl["nodes"]:
        out.append({"interval": index, "table": "node_latency", "pid": nl["pid"], "unavailable": nl["unavailable"]})
    pid = windows["call_chains"]["pid"]
    for metric, m in windows["call_chains"]["metrics"].items():
        for c in m["chains"]:
            out.append({"interval": index, "table": "call_chain", "pid": pid, "metric": metric, "event": m["event"],
                        "count": c["count"], "chain": ";".join(c["frames"]), "samples": m["samples"]})
        if not m["chains"]:
            out.append({"interval": index, "table": "call_chain", "pid": pid, "metric": metric, "event": m["event"],
                        "unavailable": m["unavailable"]})
    return out
