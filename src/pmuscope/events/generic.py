"""Perf's built-in event names: generic hardware, software, tool events and
the hardware-cache matrix (names, aliases and validity as in perf's
``tools/perf/util/evsel.c`` / ``parse-events.l``)."""

from __future__ import annotations

from ..kernel.abi import PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE

#: name -> (type, config, description); aliases share the tuple
HARDWARE: dict[str, tuple[int, int, str]] = {}
SOFTWARE: dict[str, tuple[int, int, str]] = {}
#: perf's "tool" events: counted by perf itself, opened as software/dummy
TOOL: dict[str, tuple[int, int, str]] = {}

_HW = [
    (("cpu-cycles", "cycles"), 0, "CPU cycles"),
    (("instructions",), 1, "instructions retired"),
    (("cache-references",), 2, "cache accesses (usually the last-level cache)"),
    (("cache-misses",), 3, "cache misses (usually the last-level cache)"),
    (("branch-instructions", "branches"), 4, "branch instructions retired"),
    (("branch-misses",), 5, "mispredicted branches"),
    (("bus-cycles",), 6, "bus cycles"),
    (("stalled-cycles-frontend", "idle-cycles-frontend"), 7, "cycles the frontend was stalled"),
    (("stalled-cycles-backend", "idle-cycles-backend"), 8, "cycles the backend was stalled"),
    (("ref-cycles",), 9, "reference cycles (not affected by frequency scaling)"),
]
_SW = [
    (("cpu-clock",), 0, "per-CPU high-resolution timer (ns)"),
    (("task-clock",), 1, "per-task clock: time the task ran (ns)"),
    (("page-faults", "faults"), 2, "page faults"),
    (("context-switches", "cs"), 3, "context switches"),
    (("cpu-migrations", "migrations"), 4, "task migrations between CPUs"),
    (("minor-faults",), 5, "minor page faults (no I/O)"),
    (("major-faults",), 6, "major page faults (needed I/O)"),
    (("alignment-faults",), 7, "alignment faults fixed up by the kernel"),
    (("emulation-faults",), 8, "instructions emulated by the kernel"),
    (("dummy",), 9, "placeholder that counts nothing (for side-band records)"),
    (("bpf-output",), 10, "output channel for BPF programs"),
    (("cgroup-switches",), 11, "context switches to a task in a different cgroup"),
]
_TOOL = [
    (("duration_time",), "wall-clock time of the run (ns, measured by the tool)"),
    (("user_time",), "user CPU time of the workload (ns, from rusage)"),
    (("system_time",), "system CPU time of the workload (ns, from rusage)"),
]

#: canonical name for each generic event (first spelling)
CANONICAL: dict[tuple[int, int], str] = {}

for names, cfg, desc in _HW:
    for n in names:
        HARDWARE[n] = (PERF_TYPE_HARDWARE, cfg, desc)
    CANONICAL[(PERF_TYPE_HARDWARE, cfg)] = names[0]
for names, cfg, desc in _SW:
    for n in names:
        SOFTWARE[n] = (PERF_TYPE_SOFTWARE, cfg, desc)
    CANONICAL[(PERF_TYPE_SOFTWARE, cfg)] = names[0]
for names, desc in _TOOL:
    for n in names:
        TOOL[n] = (PERF_TYPE_SOFTWARE, 9, desc)  # perf opens tool events as software/dummy

# --- hardware cache events ---------------------------------------------------
#: cache ids: spellings per PERF_COUNT_HW_CACHE_* (first is canonical)
CACHE_TYPES: list[tuple[str, ...]] = [
    ("L1-dcache", "l1-d", "l1d", "L1-data"),
    ("L1-icache", "l1-i", "l1i", "L1-instruction"),
    ("LLC", "L2"),
    ("dTLB", "d-tlb", "Data-TLB"),
    ("iTLB", "i-tlb", "Instruction-TLB"),
    ("branch", "branches", "bpu", "btb", "bpc"),
    ("node",),
]
CACHE_OPS: list[tuple[str, ...]] = [
    ("load", "loads", "read"),
    ("store", "stores", "write"),
    ("prefetch", "prefetches", "speculative-read", "speculative-load"),
]
CACHE_RESULTS: list[tuple[str, ...]] = [
    ("refs", "Reference", "ops", "access"),
    ("misses", "miss"),
]
_R, _W, _P = 1, 2, 4
#: which ops perf accepts per cache (evsel__hw_cache_stat)
CACHE_VALID_OPS = [_R | _W | _P, _R | _P, _R | _W | _P, _R | _W | _P, _R, _R, _R | _W | _P]

_TYPE_INDEX = {n: i for i, names in enumerate(CACHE_TYPES) for n in names}
_OP_INDEX = {n: i for i, names in enumerate(CACHE_OPS) for n in names}
_RESULT_INDEX = {n: i for i, names in enumerate(CACHE_RESULTS) for n in names}


class CacheOpInvalid(ValueError):
    pass


def parse_cache_name(name: str) -> int | None:
    """``L1-dcache-load-misses`` → config ``0x10000`` (cache | op<<8 | result<<16).

    Returns None when ``name`` is not spelled like a cache event; raises
    :class:`CacheOpInvalid` for a combination perf rejects (``branch-stores``).
    Spellings are case-sensitive, as in perf's lexer.
    """
    if name in _TYPE_INDEX and name != "branches":  # a bare cache type: its load accesses
        return _TYPE_INDEX[name]
    parts = name.split("-")
    # cache type names may themselves contain dashes (L1-dcache, d-tlb, Data-TLB)
    for ntype in (2, 1):
        if len(parts) <= ntype:
            continue
        type_name = "-".join(parts[:ntype])
        if type_name not in _TYPE_INDEX:
            continue
        rest = parts[ntype:]
        words = _split_op_result(rest)
        if words is None or not 1 <= len(words) <= 2:
            continue
        cache = _TYPE_INDEX[type_name]
        op = result = -1
        for word in words:
            if op == -1 and word in _OP_INDEX:
                op = _OP_INDEX[word]
                if not CACHE_VALID_OPS[cache] >> op & 1:
                    raise CacheOpInvalid(f"{CACHE_TYPES[cache][0]} has no {CACHE_OPS[op][0]} events")
                continue
            if result == -1 and word in _RESULT_INDEX:
                result = _RESULT_INDEX[word]
        op = 0 if op == -1 else op
        result = 0 if result == -1 else result
        return cache | op << 8 | result << 16
    return None


def _split_op_result(parts: list[str]) -> list[str] | None:
    """Re-join dash-separated words into op/result words (``speculative-read``)."""
    words: list[str] = []
    i = 0
    while i < len(parts):
        two = "-".join(parts[i : i + 2])
        if i + 1 < len(parts) and (two in _OP_INDEX or two in _RESULT_INDEX):
            words.append(two)
            i += 2
        elif parts[i] in _OP_INDEX or parts[i] in _RESULT_INDEX:
            words.append(parts[i])
            i += 1
        else:
            return None
    return words


def cache_event_names() -> list[tuple[str, int, str]]:
    """Every valid cache event by its canonical name, like ``perf list`` shows
    them: ``(name, config, description)``."""
    out = []
    for cache, names in enumerate(CACHE_TYPES):
        for op, op_names in enumerate(CACHE_OPS):
            if not CACHE_VALID_OPS[cache] >> op & 1:
                continue
            for result, res_names in enumerate(CACHE_RESULTS):
                if result == 0:
                    name = f"{names[0]}-{op_names[1]}"  # the plural spelling: loads, stores, prefetches
                    what = "accesses"
                else:
                    name = f"{names[0]}-{op_names[0]}-misses"
                    what = "misses"
                desc = f"{names[0]} {op_names[0]} {what}"
                out.append((name, cache | op << 8 | result << 16, desc))
    return out
