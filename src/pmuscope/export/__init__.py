"""Profile exports for the tools people already run: pprof (go tool pprof,
Pyroscope, Parca), speedscope, folded stacks; and pushing to a
Pyroscope-compatible ingest endpoint.

Public API::

    ep = from_folded("main;work 90\\nmain;idle 10\\n")   # or from_profile(Profile), from_stacks(...)
    pprof.write(ep, "cpu.pb.gz"); speedscope.write(ep, "cpu.speedscope.json")
    pusher = PyroscopePusher("http://127.0.0.1:4040", "pmuscope.cpu", {"host": "h"})
    pusher.push(ep, start, end, {"event": "cycles"}); pusher.close()
    ep, event = load("perf.data"); data = render(ep, "pprof"); push_once(ep, url, "app", {...})
"""

from pmuscope._lazy import lazy_exports

#: imported on first use (PEP 562): `pmuscope export --help` needs FORMATS, not numpy
_LAZY = {
    **{name: ".files" for name in ("FORMATS", "load", "push_once", "render")},
    **{name: ".model" for name in ("CLOCK_EVENTS", "ExportProfile", "Frame", "Mapping", "aggregate_rows",
                                   "from_folded", "from_profile", "from_stacks")},
    **{name: ".push" for name in ("PushStats", "PyroscopePusher", "app_name", "sample_type_config")},
}
_SUBMODULES = {"pprof": ".pprof", "speedscope": ".speedscope"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "FORMATS",
    "load",
    "push_once",
    "render",
    "CLOCK_EVENTS",
    "ExportProfile",
    "Frame",
    "Mapping",
    "PushStats",
    "PyroscopePusher",
    "aggregate_rows",
    "app_name",
    "from_folded",
    "from_profile",
    "from_stacks",
    "pprof",
    "sample_type_config",
    "speedscope",
]
