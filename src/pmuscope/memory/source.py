"""Open any memory-sample source by file: perf.data with PEBS/IBS samples,
perf.data with Arm SPE AUX data, or a bare SPE buffer."""

from __future__ import annotations

import os

from ..errors import PmuscopeError
from .samples import MemSamples, from_spe_records, load_mem_samples

__all__ = ["load_source"]


def load_source(path: str, *, raw: bool = False, cpu: int = 0, midr: int | None = None, pid: int | None = None,
                procfs: bool = False) -> MemSamples:
    """Memory samples from ``path``. ``raw``: the file is one bare SPE buffer
    written by CPU ``cpu`` with MIDR ``midr`` (selects the data-source table,
    e.g. 0x410fd0c0 for Neoverse N1). For perf.data with SPE data ``midr``
    overrides what AUXTRACE_INFO says."""
    if path != "-" and not os.path.exists(path):
        raise PmuscopeError(f"{path}: no such file (record one with perf mem record, "
                            "or give a raw SPE buffer with --raw)")
    if raw:
        from ..spe import decode_records

        with open(path, "rb") as f:
            data = f.read()
        recs = decode_records(data, cpu=cpu, midr=midr or 0)
        ms = from_spe_records(recs, pid=pid)
        ms.meta["path"] = path
        return ms
    if midr is not None:
        from ..spe.perfdata import decode_perf_data

        recs = decode_perf_data(path, midr=midr)
        ms = from_spe_records(recs, pid=pid)
        ms.meta["path"] = path
        return ms
    return load_mem_samples(path, procfs=procfs)
