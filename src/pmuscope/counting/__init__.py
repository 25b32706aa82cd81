"""Counting: perf stat's engine as a Python API.

Public API (names kept stable)::

    count(events, pid=None, tid=None, cpus=None, inherit=True, cgroup=None,
          *, command=None, workload=None, system_wide=False,
          tolerate_unsupported=False) -> Counter

    Counter.start() / stop() / reset() / read() -> Counts / close() / wait()
    Counter.read_raw() -> [bytes per read unit]   (the leanest read; decode with Counts or _read_plan[i][2])
    with count("task-clock,{cycles,instructions}") as c: ...   # c.last: final Counts

    Counts["cycles"] -> EventCount(name, value, time_enabled, time_running,
                                   scaled, counted, supported, unit, scale; .ratio, .display, .status)
    Counts.per_cpu() / per_thread() / aggregate(mode) / metrics() / to_dataframe()
    Counts - earlier -> the delta Counts (interval mode); Counts.data: uint64[event, cpu, thread, 3]

Targets (libperf's cpu map × thread map, one fd per event × cell):

- nothing: the calling thread, and with ``inherit`` everything it starts later;
- ``pid=P`` (or a list): every thread in ``/proc/P/task`` at open time; threads
  those threads create later are followed by ``inherit`` (the kernel clones the
  counter into the new thread and folds its counts into the parent's fd), so no
  re-scan is needed while ``inherit=True``;
- ``tid=T``: exactly that thread (or list of threads);
- ``command=[argv...]`` / ``workload=Workload(argv)``: start a command with the
  counters attached before exec (``enable_on_exec``), like ``perf stat CMD``;
- ``cpus="all"``/``"0-3"``/``[0, 2]`` (or ``system_wide=True``): per CPU, pid=-1;
- ``cgroup="name"``: per CPU, only tasks of that cgroup (``PERF_FLAG_PID_CGROUP``).

Events in ``{braces}`` are one perf group read with a single ``read()`` of
``PERF_FORMAT_GROUP|ID|TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING``; a group that never
got on the PMU is ``counted=False`` (perf's ``<not counted>``), never a silent 0.
"""

from .counter import Counter, Evsel, count, online_cpus, parse_cpu_list, process_threads
from .metrics import METRICS, Metric, MetricValue, evaluate
from .results import Counts, EventCount, Layout, scale_cells
from .workload import Workload

__all__ = [
    "count",
    "Counter",
    "Counts",
    "EventCount",
    "Evsel",
    "Layout",
    "Workload",
    "Metric",
    "MetricValue",
    "METRICS",
    "evaluate",
    "scale_cells",
    "online_cpus",
    "parse_cpu_list",
    "process_threads",
]
