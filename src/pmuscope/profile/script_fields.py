"""``script``'s ``-F`` field lists, parsed without numpy (the numpy-free
path of :mod:`pmuscope.profile.lite` reads them too; :mod:`.script`
re-exports them)."""

from __future__ import annotations

from typing import Sequence

from ..errors import PmuscopeError

FIELDS = ("comm", "tid", "pid", "cpu", "time", "event", "ip", "sym", "dso", "period", "symoff", "trace")


def default_field_names(*, has_cpu: bool, has_time: bool, tracepoints: bool) -> tuple[str, ...]:
    """perf script's default fields for what was recorded: CPU and time when the
    samples hold them; for tracepoints the payload instead of the ip."""
    f = ["comm", "tid"]
    if has_cpu:
        f.append("cpu")
    if has_time:
        f.append("time")
    if tracepoints:
        return tuple(f + ["event", "trace"])
    return tuple(f + ["period", "event", "ip", "sym", "symoff", "dso"])


class FieldChanges(tuple):
    """``-F +period,-dso``: ``(("+", "period"), ("-", "dso"))``, changes to the
    default fields of what was recorded (perf's ``+``/``-`` form)."""

    def apply(self, base: Sequence[str]) -> tuple[str, ...]:
        out = list(base)
        for op, f in self:
            if op == "+" and f not in out:
                out.append(f)
            elif op == "-" and f in out:
                out.remove(f)
        return tuple(out)


def parse_fields(text: str | None) -> tuple[str, ...] | None:
    """``-F comm,tid,ip`` -> a tuple; None for the default set; ``-F +period,-dso``
    (a list starting with + or -: each name added to or taken from the default
    fields, the sign carried on to the names after it, as perf reads it) -> a
    :class:`FieldChanges`."""
    if not text:
        return None
    items = [f.strip() for f in text.split(",") if f.strip()]
    changes = bool(items) and items[0][0] in "+-"
    ops, op = [], "+"
    for it in items:
        if it[0] in "+-":
            if not changes:
                raise PmuscopeError(f"-F {text!r}: either name the fields or change the defaults "
                                    f"with +name/-name, not both")
            op, it = it[0], it[1:].strip()
        ops.append((op, it))
    bad = [f for _, f in ops if f not in FIELDS]
    if bad or not ops:
        raise PmuscopeError(f"-F {text!r}: unknown field(s) {', '.join(bad) or '(none)'}; "
                            f"choose from {','.join(FIELDS)}")
    return FieldChanges(ops) if changes else tuple(f for _, f in ops)
