"""perf_event_attr as ``perf stat -vv`` / ``perf record -vv`` print it.

perf's ``perf_event_attr__fprintf`` (tools/perf/util/perf_event_attr_fprintf.c,
perf 6.1): only non-zero fields, ``"  %-32s %s"``, unions under both names
(``{ sample_period, sample_freq }``, ``{ bp_addr, config1 }``,
``{ bp_len, config2 }``), ``sample_type``/``read_format``/``branch_sample_type``
as flag names joined by ``|`` in perf's table order (bits perf has no name
for are left out, as perf does).
"""

from __future__ import annotations

from ..kernel.abi import ATTR_FLAG_NAMES, PerfBranchSample, PerfFormat, PerfSample, perf_event_attr

#: perf's order of the sample_type names (__p_sample_type; it has no TRANSACTION)
_SAMPLE_BITS = ("IP", "TID", "TIME", "ADDR", "READ", "CALLCHAIN", "ID", "CPU", "PERIOD", "STREAM_ID", "RAW",
                "BRANCH_STACK", "REGS_USER", "STACK_USER", "IDENTIFIER", "REGS_INTR", "DATA_SRC", "WEIGHT",
                "PHYS_ADDR", "AUX", "CGROUP", "DATA_PAGE_SIZE", "CODE_PAGE_SIZE", "WEIGHT_STRUCT")
_READ_BITS = ("TOTAL_TIME_ENABLED", "TOTAL_TIME_RUNNING", "ID", "GROUP", "LOST")
_BRANCH_BITS = ("USER", "KERNEL", "HV", "ANY", "ANY_CALL", "ANY_RETURN", "IND_CALL", "ABORT_TX", "IN_TX", "NO_TX",
                "COND", "CALL_STACK", "IND_JUMP", "CALL", "NO_FLAGS", "NO_CYCLES", "TYPE_SAVE", "HW_INDEX",
                "PRIV_SAVE")
SEPARATOR = "-" * 60


def _bits(value: int, names: tuple[str, ...], flags) -> str:
    return "|".join(n for n in names if value & int(flags[n]))


def attr_lines(attr: perf_event_attr) -> list[tuple[str, str]]:
    """``[(name, value text)]`` of the non-zero fields, in perf's order."""
    out: list[tuple[str, str]] = []

    def add(name: str, value: int, text: str | None = None) -> None:
        if value:
            out.append((name, text if text is not None else str(value)))

    add("type", int(attr.type))
    add("size", int(attr.size))
    add("config", int(attr.config), f"{int(attr.config):#x}")
    add("{ sample_period, sample_freq }", int(attr.sample_period))
    add("sample_type", int(attr.sample_type), _bits(int(attr.sample_type), _SAMPLE_BITS, PerfSample))
    add("read_format", int(attr.read_format), _bits(int(attr.read_format), _READ_BITS, PerfFormat))
    for name in ATTR_FLAG_NAMES:
        add(name, int(getattr(attr, name)))
    add("{ wakeup_events, wakeup_watermark }", int(attr.wakeup_events))
    add("bp_type", int(attr.bp_type))
    add("{ bp_addr, config1 }", int(attr.config1), f"{int(attr.config1):#x}")
    add("{ bp_len, config2 }", int(attr.config2), f"{int(attr.config2):#x}")
    add("branch_sample_type", int(attr.branch_sample_type),
        _bits(int(attr.branch_sample_type), _BRANCH_BITS, PerfBranchSample))
    add("sample_regs_user", int(attr.sample_regs_user), f"{int(attr.sample_regs_user):#x}")
    add("sample_stack_user", int(attr.sample_stack_user))
    add("clockid", int(attr.clockid))
    add("sample_regs_intr", int(attr.sample_regs_intr), f"{int(attr.sample_regs_intr):#x}")
    add("aux_watermark", int(attr.aux_watermark))
    add("sample_max_stack", int(attr.sample_max_stack))
    add("aux_sample_size", int(attr.aux_sample_size))
    add("sig_data", int(attr.sig_data))
    add("config3", int(getattr(attr, "config3", 0)), f"{int(getattr(attr, 'config3', 0)):#x}")  # perf >= 6.3
    return out


def format_attr(attr: perf_event_attr) -> str:
    """perf's block: a separator, ``perf_event_attr:``, the fields, a separator."""
    body = "".join(f"  {name:<32} {text}\n" for name, text in attr_lines(attr))
    return f"{SEPARATOR}\nperf_event_attr:\n{body}{SEPARATOR}\n"
