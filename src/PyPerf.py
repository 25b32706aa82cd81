"""GearDVFS's ``PyPerf`` module name, served by :mod:`pmuscope.compat.geardvfs`.

Scripts written for GearDVFS's ``perf_lib`` keep their import line::

    import PyPerf as Perf
    pmus = Perf.sys_perf([0, 1], [0, 1], 10_000)

and :func:`sample_dict` builds the demo's lowercase ``cpu{c}_{abbrev}`` keys
(``cpu0_cycles``) by default, as GearDVFS's monitor does.
"""

from __future__ import annotations

from typing import Sequence

from pmuscope.compat import geardvfs as _geardvfs
from pmuscope.compat.geardvfs import (  # noqa: F401  (the PyPerf API)
    EVENT_LIST,
    SysPerf,
    close_all,
    get_supported_abbrevs,
    get_supported_events,
    get_supported_names,
    sys_perf,
)

#: PyPerf's flat key format
KEY = "cpu{cpu}_{abbrev}"


def sample_dict(cpus: Sequence[int], events: Sequence[int], micro_seconds: int, *, key: str = KEY, **kw) -> dict:
    """:func:`pmuscope.compat.geardvfs.sample_dict` with PyPerf's lowercase keys."""
    return _geardvfs.sample_dict(cpus, events, micro_seconds, key=key, **kw)


__all__ = ["EVENT_LIST", "KEY", "SysPerf", "close_all", "get_supported_abbrevs", "get_supported_events",
           "get_supported_names", "sample_dict", "sys_perf"]
