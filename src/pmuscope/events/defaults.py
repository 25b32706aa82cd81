"""The attr defaults ``perf stat`` adds to parsed events for a counting
session (``create_perf_stat_counter`` in tools/perf/builtin-stat.c)."""

from __future__ import annotations

import os

from ..errors import PmuscopeError
from ..kernel import abi as _abi
from ..kernel.abi import perf_event_attr
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
    attr.read_format = _abi.PERF_FORMAT_TOTAL_TIME_ENABLED | _abi.PERF_FORMAT_TOTAL_TIME_RUNNING
    if group_size > 1:
        attr.read_format |= _abi.PERF_FORMAT_ID | _abi.PERF_FORMAT_GROUP
    attr.sample_type = _abi.PERF_SAMPLE_IDENTIFIER if identifier else 0
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


#: the side-band records the first event of a record session asks for (perf's "tracking" evsel)
TRACKING_BITS = ("mmap", "comm", "task", "mmap2", "comm_exec", "ksymbol", "bpf_event")


#: the user registers perf samples for DWARF unwinding (PERF_REGS_MASK of tools/perf/arch/*/include/perf_regs.h)
DWARF_REGS_MASK = {"x86_64": 0xFF0FFF, "aarch64": (1 << 33) - 1}
DEFAULT_DWARF_STACK = 8192


def apply_callchain(attr: perf_event_attr, mode: str, *, tracking: bool = False, max_stack: int | None = None,
                    machine: str | None = None) -> perf_event_attr:  # fmt: skip
    """Set what perf record sets for ``--call-graph MODE`` / ``call-graph=MODE``
    (``evsel__config_callchain`` in tools/perf/util/evsel.c): ``fp`` adds
    CALLCHAIN; ``dwarf[,SIZE]`` adds CALLCHAIN|REGS_USER|STACK_USER (and
    ADDR|DATA_SRC, mmap_data on the tracking event, as perf 6.1 does), the
    user registers, a SIZE-byte user stack copy (default 8192) and
    exclude_callchain_user; ``lbr`` adds CALLCHAIN|BRANCH_STACK with the
    call-stack branch filter; ``no`` changes nothing."""
    kind, _, size = mode.partition(",")
    if kind == "no":
        return attr
    if kind not in ("fp", "dwarf", "lbr"):
        raise PmuscopeError(f"unknown call-graph mode {mode!r}: use fp, dwarf[,size], lbr or no")
    attr.sample_type |= _abi.PERF_SAMPLE_CALLCHAIN
    if kind == "dwarf":
        machine = machine or os.uname().machine  # platform.machine()
        if machine not in DWARF_REGS_MASK:
            raise PmuscopeError(f"call-graph=dwarf: user register set for {machine} is not known; use fp")
        stack = int(size, 0) if size else DEFAULT_DWARF_STACK
        attr.sample_type |= _abi.PERF_SAMPLE_REGS_USER | _abi.PERF_SAMPLE_STACK_USER | _abi.PERF_SAMPLE_ADDR | _abi.PERF_SAMPLE_DATA_SRC
        attr.sample_regs_user = DWARF_REGS_MASK[machine]
        attr.sample_stack_user = stack
        attr.exclude_callchain_user = 1
        if tracking:
            attr.mmap_data = 1
    elif kind == "lbr":
        attr.sample_type |= _abi.PERF_SAMPLE_BRANCH_STACK
        attr.branch_sample_type = (
            _abi.PERF_SAMPLE_BRANCH_USER | _abi.PERF_SAMPLE_BRANCH_CALL_STACK | _abi.PERF_SAMPLE_BRANCH_NO_FLAGS
            | _abi.PERF_SAMPLE_BRANCH_NO_CYCLES | _abi.PERF_SAMPLE_BRANCH_HW_INDEX
        )  # fmt: skip
    if max_stack is not None:
        attr.sample_max_stack = max_stack
    return attr


def record_defaults(
    specs: list[EventSpec],
    *,
    freq: int = 4000,
    period: int | None = None,
    callchain: str | None = None,
    enable_on_exec: bool = True,
    inherit: bool = True,
) -> list[perf_event_attr]:
    """Copies of the specs' attrs with what ``perf record`` adds (perf 6.1,
    ``evsel__config``/``evlist__config`` in tools/perf/util/):

    - sample_type IP|TID|TIME, plus PERIOD when sampling by frequency; events
      that set their own period (tracepoints, breakpoints, ``period=``) keep it;
    - with several events: ID in sample_type when all sample_types agree, else
      IDENTIFIER; read_format ID|LOST on every event;
    - ``freq``=1 with ``sample_freq``=4000 by default (``period`` switches to
      a fixed sample_period, like ``-c``);
    - sample_id_all, inherit; disabled and enable_on_exec on group leaders;
    - the side-band bits (mmap, comm, task, mmap2, comm_exec, ksymbol,
      bpf_event) on the first event only;
    - call chains: the event's ``call-graph=``/``max-stack=`` terms, else
      ``callchain`` (like ``-g`` / ``--call-graph``), see :func:`apply_callchain`.
    """
    attrs: list[perf_event_attr] = []
    for n, spec in enumerate(specs):
        attr = spec.attr.copy()
        attr.sample_type |= _abi.PERF_SAMPLE_IP | _abi.PERF_SAMPLE_TID | _abi.PERF_SAMPLE_TIME
        if spec.freq_set:
            attr.freq = 1
            attr.sample_type |= _abi.PERF_SAMPLE_PERIOD
        elif spec.period_set:
            attr.freq = 0
            attr.sample_type &= ~_abi.PERF_SAMPLE_PERIOD
        elif period is not None:
            attr.freq = 0
            attr.sample_period = period
        elif not attr.sample_period:
            attr.freq = 1
            attr.sample_freq = freq
            attr.sample_type |= _abi.PERF_SAMPLE_PERIOD
        attr.read_format = _abi.PERF_FORMAT_ID | _abi.PERF_FORMAT_LOST
        attr.sample_id_all = 1
        attr.inherit = 1 if inherit else 0
        leader = spec.leader or spec.group is None
        attr.disabled = 1 if leader else 0
        attr.enable_on_exec = 1 if leader and enable_on_exec else 0
        mode = spec.call_graph or callchain
        if mode:
            stack = spec.extra.get("stack_size")
            if stack and mode.split(",")[0] == "dwarf" and "," not in mode:
                mode = f"dwarf,{stack}"
            apply_callchain(attr, mode, tracking=n == 0, max_stack=spec.max_stack)
        elif spec.max_stack is not None:
            attr.sample_max_stack = spec.max_stack
        attrs.append(attr)
    if len(attrs) > 1:
        same = len({int(a.sample_type) for a in attrs}) == 1
        for attr in attrs:
            attr.sample_type |= _abi.PERF_SAMPLE_ID if same else _abi.PERF_SAMPLE_IDENTIFIER
    if attrs:
        for bit in TRACKING_BITS:
            setattr(attrs[0], bit, 1)
    return attrs


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
    if errno_name == "ENOTSUP":  # why: Linux's errno 95 is both; errno.errorcode[95] says ENOTSUP
        errno_name = "EOPNOTSUPP"
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
