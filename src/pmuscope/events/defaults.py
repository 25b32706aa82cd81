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


def open_fallbacks(attr: perf_event_attr, errno_name: str) -> list[tuple[str, perf_event_attr]]:
    """The attrs perf retries with after ``perf_event_open`` fails with
    ``errno_name`` (``"EINVAL"``, ``"EACCES"``, ``"EOPNOTSUPP"`` ...), each with
    a note saying what was given up, in perf's order
    (``evsel__detect_missing_features`` / ``evsel__fallback`` in tools/perf/util/evsel.c):

    - EINVAL with exclude_guest/exclude_host set: retry without them (PMUs
      such as ``msr`` cannot tell guest from host);
    - EOPNOTSUPP/EINVAL with precise_ip: lower precise_ip one step at a time;
    - EACCES/EPERM without exclude_kernel: retry user-space only (``:u``).
    """
    out: list[tuple[str, perf_event_attr]] = []
    if errno_name == "EINVAL" and (attr.exclude_guest or attr.exclude_host):
        new = attr.copy()
        new.exclude_guest = new.exclude_host = 0
        out.append(("counted without exclude_guest (this PMU cannot separate guest and host)", new))
    if errno_name in ("EOPNOTSUPP", "EINVAL") and attr.precise_ip:
        for level in range(attr.precise_ip - 1, -1, -1):
            new = attr.copy()
            new.precise_ip = level
            out.append((f"precise_ip lowered to {level}", new))
    if errno_name in ("EACCES", "EPERM") and not attr.exclude_kernel:
        new = attr.copy()
        new.exclude_kernel = new.exclude_hv = 1
        out.append(("user space only (:u) at this perf_event_paranoid level", new))
    return out
