"""Derived metrics as data: perf stat's shadow metrics in one table.

Each :class:`Metric` names the event row it is printed on (``on``), a formula over
event names, and its unit. In formulas an event name is written with ``_`` for
``-`` (``branch_misses``); two pseudo-inputs exist:

- ``duration_time``: wall-clock nanoseconds of the measurement (perf's event of that name);
- ``nsecs``: ``task-clock`` or, failing that, ``cpu-clock`` (perf's STAT_NSECS).

Formulas use ``+ - * /``, numbers, ``min``/``max``. A metric whose inputs are
missing, unsupported or not counted, or whose divisor is 0, is *absent* with the
reason; it is never computed as a division by zero. ``on="*"`` rows apply to every
event without a metric of its own (perf's generic ``/sec`` rate). A ``rate`` unit
(``/sec``) gets perf's K/M/G prefix (``convert_unit_double``).
"""

from __future__ import annotations

import ast
import operator
from typing import Mapping

_FUNCS = {"max": max, "min": min}


def _names(formula: str) -> list[str]:
    tree = ast.parse(formula, mode="eval")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in _FUNCS:
            name = node.id if node.id in ("duration_time", "nsecs", "event") else node.id.replace("_", "-")
            if name not in out:
                out.append(name)
    return out


class _Frozen:
    """Immutable value objects compared (and hashed) by ``_KEY`` fields, as
    frozen dataclasses are; plain classes because creating a dataclass costs
    ~0.3 ms at import and ``stat`` starts in tens of ms."""

    __slots__ = ()
    _KEY: tuple[str, ...] = ()

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in self._KEY)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())


class Metric(_Frozen):
    """One derived metric: ``formula`` over event names, printed on the row of
    event ``on`` (``"*"``: every event without a metric of its own).

    ``fmt`` is the printf-style format perf uses for the value, ``show`` False
    keeps it to the Python API (not printed by `pmuscope stat`), ``rate`` makes
    it a ``/sec`` rate scaled to K/M/G like perf. ``inputs`` (the event names of
    the formula) is derived from the formula when not given."""

    __slots__ = ("name", "formula", "unit", "on", "fmt", "show", "rate", "_inputs")
    _KEY = ("name", "formula", "unit", "on", "fmt", "show", "rate")  # not inputs: derived

    def __init__(self, name: str, formula: str, unit: str, on: str, fmt: str = "%8.3f", show: bool = True,
                 rate: bool = False, inputs: tuple[str, ...] = ()) -> None:
        for k, v in (("name", name), ("formula", formula), ("unit", unit), ("on", on), ("fmt", fmt),
                     ("show", show), ("rate", rate), ("_inputs", tuple(inputs) or None)):
            object.__setattr__(self, k, v)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The formula's event names (``branch_misses`` → ``branch-misses``) and pseudo-inputs."""
        if self._inputs is None:  # parsed on first use: not for every row of the table at import
            object.__setattr__(self, "_inputs", tuple(_names(self.formula)))
        return self._inputs

    def __reduce__(self):  # copy and pickle through __init__ (attributes cannot be set)
        return (self.__class__, (self.name, self.formula, self.unit, self.on, self.fmt, self.show, self.rate,
                                 self._inputs or ()))

    def __repr__(self) -> str:
        return (f"Metric(name={self.name!r}, formula={self.formula!r}, unit={self.unit!r}, on={self.on!r}, "
                f"fmt={self.fmt!r}, show={self.show!r}, rate={self.rate!r}, inputs={self.inputs!r})")


METRICS: tuple[Metric, ...] = (
    Metric("CPUs utilized", "task_clock / duration_time", "CPUs utilized", on="task-clock"),
    Metric("CPUs utilized", "cpu_clock / duration_time", "CPUs utilized", on="cpu-clock"),
    Metric("GHz", "cycles / nsecs", "GHz", on="cycles"),
    Metric("IPC", "instructions / cycles", "insn per cycle", on="instructions", fmt="%7.2f "),
    Metric("stalled cycles per insn", "max(stalled_cycles_frontend, stalled_cycles_backend) / instructions",
           "stalled cycles per insn", on="instructions", fmt="%7.2f "),
    Metric("CPI", "cycles / instructions", "cycles per insn", on="instructions", fmt="%7.2f ", show=False),
    Metric("branch-miss %", "100 * branch_misses / branches", "of all branches", on="branch-misses", fmt="%7.2f%%"),
    Metric("cache-miss %", "100 * cache_misses / cache_references", "of all cache refs", on="cache-misses",
           fmt="%7.2f%%"),
    Metric("frontend stall %", "100 * stalled_cycles_frontend / cycles", "frontend cycles idle",
           on="stalled-cycles-frontend", fmt="%7.2f%%"),
    Metric("backend stall %", "100 * stalled_cycles_backend / cycles", "backend cycles idle",
           on="stalled-cycles-backend", fmt="%7.2f%%"),
    Metric("L1-dcache miss %", "100 * L1_dcache_load_misses / L1_dcache_loads", "of all L1-dcache accesses",
           on="L1-dcache-load-misses", fmt="%7.2f%%"),
    Metric("L1-icache miss %", "100 * L1_icache_load_misses / L1_icache_loads", "of all L1-icache accesses",
           on="L1-icache-load-misses", fmt="%7.2f%%"),
    Metric("LLC miss %", "100 * LLC_load_misses / LLC_loads", "of all LL-cache accesses", on="LLC-load-misses",
           fmt="%7.2f%%"),
    Metric("dTLB miss %", "100 * dTLB_load_misses / dTLB_loads", "of all dTLB cache accesses", on="dTLB-load-misses",
           fmt="%7.2f%%"),
    Metric("iTLB miss %", "100 * iTLB_load_misses / iTLB_loads", "of all iTLB cache accesses", on="iTLB-load-misses",
           fmt="%7.2f%%"),
    Metric("page-fault rate", "page_faults * 1e9 / nsecs", "/sec", on="page-faults", rate=True),
    # tool events: no generic /sec rate for them (perf 6.1 prints a meaningless G/sec)
    Metric("user CPUs", "user_time / duration_time", "user CPUs", on="user_time", show=False),
    Metric("system CPUs", "system_time / duration_time", "system CPUs", on="system_time", show=False),
    Metric("elapsed seconds", "duration_time / 1e9", "s", on="duration_time", show=False),
    Metric("rate", "event * 1e9 / nsecs", "/sec", on="*", rate=True),
)

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


_TREES: dict[str, ast.Expression] = {}


class _Absent(Exception):
    pass


def _eval(node: ast.AST, env: Mapping[str, float | None]) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.Name):
        return env[node.id]  # type: ignore[return-value]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Div) and right == 0:
            raise _Absent(f"divisor {ast.unparse(node.right)} is 0")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        args = [a for a in node.args if not (isinstance(a, ast.Name) and env.get(a.id) is None)]
        if not args:
            raise _Absent("none of " + ", ".join(ast.unparse(a) for a in node.args) + " was counted")
        values = [_eval(a, env) for a in args]
        return values[0] if len(values) == 1 else _FUNCS[node.func.id](*values)
    raise ValueError(f"unsupported formula element {ast.unparse(node)!r}")


class MetricValue(_Frozen):
    """A derived metric: ``value`` None means absent, ``reason`` says why."""

    __slots__ = ("metric", "value", "reason")
    _KEY = __slots__

    def __init__(self, metric: Metric, value: float | None, reason: str = "") -> None:
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "reason", reason)

    def __reduce__(self):
        return (self.__class__, (self.metric, self.value, self.reason))

    def __repr__(self) -> str:
        return f"MetricValue(metric={self.metric!r}, value={self.value!r}, reason={self.reason!r})"

    @property
    def name(self) -> str:
        return self.metric.name

    @property
    def unit(self) -> str:
        """The unit, with perf's K/M/G prefix on rates."""
        return self.scaled()[1]

    def scaled(self) -> tuple[float | None, str]:
        """(value, unit) with perf's convert_unit_double for rates."""
        if self.value is None or not self.metric.rate:
            return self.value, self.metric.unit
        v = self.value
        for limit, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
            if v > limit:
                return v / limit, prefix + self.metric.unit
        return v, self.metric.unit


def _base(name: str) -> str:
    from .results import base_name

    return base_name(name)


def evaluate(counts: Mapping[str, object], duration_ns: float, table: tuple[Metric, ...] = METRICS,
             *, all_metrics: bool = False) -> dict[str, list[MetricValue]]:
    """Evaluate ``table`` over ``counts`` (``{event name: EventCount}``).

    Returns ``{event name: [MetricValue, ...]}`` for every event that has
    metrics; absent metrics are included with their reason. ``all_metrics``
    also evaluates rows with ``show=False``."""
    env: dict[str, float | None] = {}
    why: dict[str, str] = {}
    by_base: dict[str, str] = {}
    for name, ev in counts.items():
        base = _base(name)
        by_base.setdefault(base, name)
        key = base.replace("-", "_")
        if not getattr(ev, "supported", True):
            env[key], why[key] = None, f"{base} is not supported"
        elif not getattr(ev, "counted", True):
            env[key], why[key] = None, f"{base} was not counted"
        else:
            env[key] = float(getattr(ev, "scaled", ev))
    env["duration_time"] = float(duration_ns) if duration_ns else None
    why["duration_time"] = "no elapsed time"
    env["nsecs"] = env.get("task_clock") if env.get("task_clock") is not None else env.get("cpu_clock")
    why["nsecs"] = "needs task-clock or cpu-clock"

    out: dict[str, list[MetricValue]] = {}
    specific = {m.on for m in table if m.on != "*"}
    for m in table:
        if not (m.show or all_metrics):
            continue
        targets = [b for b in by_base if b not in specific] if m.on == "*" else ([m.on] if m.on in by_base else [])
        for base in targets:
            local = dict(env)
            local["event"] = env.get(base.replace("-", "_"))
            tree = _TREES.get(m.formula) or _TREES.setdefault(m.formula, ast.parse(m.formula, mode="eval"))
            reasons = []
            for node in ast.walk(tree):
                if not isinstance(node, ast.Name) or node.id in _FUNCS or _inside_call(tree, node.id):
                    continue
                if node.id not in local:
                    reasons.append(f"needs {node.id.replace('_', '-')} (not measured)")
                elif local[node.id] is None:
                    reasons.append(why.get(node.id, f"{node.id.replace('_', '-')} was not counted"))
            for node in ast.walk(tree):  # optional max()/min() arguments
                if isinstance(node, ast.Name) and node.id not in local:
                    local[node.id] = None
            if reasons:
                out.setdefault(by_base[base], []).append(MetricValue(m, None, "; ".join(dict.fromkeys(reasons))))
                continue
            try:
                out.setdefault(by_base[base], []).append(MetricValue(m, _eval(tree, local)))
            except _Absent as err:
                out.setdefault(by_base[base], []).append(MetricValue(m, None, str(err)))
    return out


def _inside_call(tree: ast.AST, ident: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for a in node.args:
                if isinstance(a, ast.Name) and a.id == ident:
                    return True
    return False
