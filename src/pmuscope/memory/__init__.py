"""Memory-access sampling from any source: ``perf_mem_data_src`` decoding
(:mod:`~pmuscope.memory.datasrc`), Arm SPE data sources mapped per CPU
(:mod:`~pmuscope.memory.spe`), one columnar table of memory samples
(:class:`MemSamples`), ``perf mem report``-style summaries
(:func:`mem_report`), perf c2c's false-sharing analysis (:func:`c2c_analyze`)
and the recording events for PEBS / IBS / SPE (:func:`mem_events`).

>>> from pmuscope.memory import load_mem_samples, mem_report, c2c_analyze
>>> ms = load_mem_samples("perf.data")            # doctest: +SKIP
>>> mem_report(ms)["by_data_source"][0]            # doctest: +SKIP
{'data_source': 'L1 hit', 'samples': 812, ...}
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "datasrc": ".datasrc",
    "DataSrcFields": ".datasrc",
    "decode_data_src": (".datasrc", "decode"),
    "encode_data_src": (".datasrc", "encode"),
    "data_src_text": ".datasrc",
    "lvl_text": ".datasrc",
    "spe_data_src": ".spe",
    "MemSamples": ".samples",
    "load_mem_samples": ".samples",
    "from_spe_records": ".samples",
    "from_sample_batch": ".samples",
    "load_source": ".source",
    "mem_report": ".report",
    "format_report": ".report",
    "c2c_analyze": ".c2c",
    "C2CResult": ".c2c",
    "format_c2c": ".c2c",
    "MemEvent": ".events",
    "mem_events": ".events",
    "mem_events_status": ".events",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "datasrc":
        return importlib.import_module(".datasrc", __name__)
    mod, attr = (target, name) if isinstance(target, str) else target
    value = getattr(importlib.import_module(mod, __name__), attr)
    globals()[name] = value
    return value
