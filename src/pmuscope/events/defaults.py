"""The attr defaults ``perf stat`` adds to parsed events for a counting
session (``create_perf_stat_counter`` in tools/perf/builtin-stat.c)."""

from __future__ import annotations

from ..kernel.abi import PerfFormat, PerfSample, perf_event_attr
from .spec import EventSpec


def apply_counting_defaults(
    attr: perf_event_attr,
    *,
    leader: bool = True,
    group_size: int = 1,
    enable_on_exec: bool = True,
    inherit: bool = True,
    identifier: bool = True,
) -> perf_event_attr:
    """Apply perf stat's counting defaults to ``attr`` in place and return it.

    - ``read_format`` = TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING, plus ID|GROUP
      for every member of a group of more than one event;
    - ``sample_type`` = IDENTIFIER (perf stat's ``identifier``), sampling
      period/frequency cleared (perf stat ignores ``period=``);
    - ``inherit`` = 1 unless ``inherit=False`` (``perf stat -i``);
    - group leaders (and lone events) get ``disabled`` = 1 and, when a
      workload is launched (``enable_on_exec=True``), ``enable_on_exec`` = 1.

    exclude_* bits are left as the parser set them: perf's default
    ``exclude_guest=1`` and its modifier rules are applied at parse time.
    """
    attr.read_format = PerfFormat.TOTAL_TIME_ENABLED | PerfFormat.TOTAL_TIME_RUNNING
    if group_size > 1:
        attr.read_format |= PerfFormat.ID | PerfFormat.GROUP
    attr.sample_type = PerfSample.IDENTIFIER if identifier else 0
    attr.sample_period = 0
    attr.freq = 0
    attr.inherit = 1 if inherit else 0
    if leader:
        attr.disabled = 1
        attr.enable_on_exec = 1 if enable_on_exec else 0
    else:
        attr.disabled = 0
        attr.enable_on_exec = 0
    return attr


def stat_defaults(spec: EventSpec, *, enable_on_exec: bool = True, inherit: bool = True) -> perf_event_attr:
    """A copy of ``spec.attr`` with perf stat's counting defaults applied,
    taking group membership from the spec."""
    in_group = spec.group is not None
    return apply_counting_defaults(
        spec.attr.copy(),
        leader=spec.leader or not in_group,
        group_size=int(spec.extra.get("group_size", 1)) if in_group else 1,
        # tool events (duration_time ...) are opened CPU-wide by perf, never enabled on exec
        enable_on_exec=enable_on_exec and not spec.extra.get("tool"),
        inherit=inherit,
    )
