"""``perf diff``: the baseline/delta table of two recordings, and of repeats.

Two profiles are compared symbol by symbol the way ``perf diff`` does with its
default ``-s dso,sym`` and ``-c delta-abs``: each side's share of its own
event total (``Baseline`` is the old file's, ``Delta Abs`` is the new share
minus the old one), entries matched by (shared object, symbol), sorted by the
absolute delta. One section per event name present in the baseline.

With several recordings per side (``perf record -r``-style repeats), each
symbol's shares in the old runs and in the new runs give a mean delta and a
95% confidence interval (Welch's t interval: unequal variances, the
Welch–Satterthwaite degrees of freedom); a delta whose interval contains 0 is
flagged ``noise``. Only the standard library is used: the t quantile comes
from the regularized incomplete beta function.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import PmuscopeError
from .model import Profile



@dataclass
class DiffRow:
    """One symbol of the comparison (shares in percent of each side's total)."""

    dso: str
    sym: str
    #: the old side's share (mean over the old runs); 0 when absent there
    baseline: float
    #: the new side's share (mean over the new runs); 0 when absent there
    new: float
    in_old: bool
    in_new: bool
    #: per-run shares (one value per recording, 0 where the symbol is absent)
    old_runs: list[float] = field(default_factory=list)
    new_runs: list[float] = field(default_factory=list)
    #: 95% confidence interval of the delta (None with one recording on a side)
    ci: tuple[float, float] | None = None

    @property
    def delta(self) -> float:
        return self.new - self.baseline

    @property
    def noise(self) -> bool | None:
        """True when the confidence interval contains 0 (None without one)."""
        if self.ci is None:
            return None
        return self.ci[0] <= 0.0 <= self.ci[1]

    def as_json(self) -> dict:
        out = {"dso": self.dso, "sym": self.sym, "baseline": round(self.baseline, 4),
               "new": round(self.new, 4), "delta": round(self.delta, 4)}
        if len(self.old_runs) > 1 or len(self.new_runs) > 1:
            out["old_runs"] = [round(v, 4) for v in self.old_runs]
            out["new_runs"] = [round(v, 4) for v in self.new_runs]
            out["ci95"] = None if self.ci is None else [round(self.ci[0], 4), round(self.ci[1], 4)]
            out["noise"] = self.noise
        return out


@dataclass
class Diff:
    """The comparison of one event."""

    event: str
    old_files: list[str]
    new_files: list[str]
    rows: list[DiffRow]

    @property
    def repeated(self) -> bool:
        return len(self.old_files) > 1 or len(self.new_files) > 1

    def to_json(self) -> dict:
        return {"event": self.event, "old": self.old_files, "new": self.new_files,
                "rows": [r.as_json() for r in self.rows]}


# --- statistics (stdlib only) ------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` (real, > 0) degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Inverse of :func:`t_cdf` (bisection; ``0 < p < 1``)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


def welch_interval(old: Sequence[float], new: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Confidence interval of mean(new) - mean(old) (Welch); None when a
    side has fewer than two values."""
    n1, n2 = len(old), len(new)
    if n1 < 2 or n2 < 2:
        return None
    m1, m2 = sum(old) / n1, sum(new) / n2
    v1 = sum((x - m1) ** 2 for x in old) / (n1 - 1)
    v2 = sum((x - m2) ** 2 for x in new) / (n2 - 1)
    se2 = v1 / n1 + v2 / n2
    d = m2 - m1
    if se2 == 0.0:
        return (d, d)
    df = se2 * se2 / ((v1 / n1) ** 2 / (n1 - 1) + (v2 / n2) ** 2 / (n2 - 1))
    half = t_quantile(0.5 + level / 2.0, df) * math.sqrt(se2)
    return (d - half, d + half)


# --- the comparison ------------------------------------------------------------------

_UNRESOLVED = re.compile(r"^(\[.\]) (0x[0-9a-f]+)$")


def symbol_shares(p: Profile) -> dict[str, dict[tuple[str, str], tuple[float, str]]]:
    """event name -> {(shared object, symbol key): (percent of that event's
    period, the ``[k]/[.] symbol`` to print)}.

    As perf diff does, the addresses no symbol covers count as one entry per
    shared object (its symbol comparison finds two missing symbols equal),
    printed with the lowest of those addresses."""
    from .report import reports_by_event

    out: dict[str, dict[tuple[str, str], tuple[float, str]]] = {}
    for rep in reports_by_event(p, ("dso", "sym")):
        shares: dict[tuple[str, str], tuple[float, str]] = {}
        for row, disp in zip(rep.rows, rep.display):
            sym = disp["sym"]
            m = _UNRESOLVED.match(sym)
            key = (disp["dso"], f"{m.group(1)} <unresolved>" if m else sym)
            if key in shares:
                pct, shown = shares[key]
                if m and int(m.group(2), 16) < int(_UNRESOLVED.match(shown).group(2), 16):
                    shown = sym
                shares[key] = (pct + row.overhead, shown)
            else:
                shares[key] = (row.overhead, sym)
        out.setdefault(rep.event, {}).update(shares)
    return out


def diff_profiles(old: Sequence[Profile], new: Sequence[Profile], *, old_names: Sequence[str] = (),
                  new_names: Sequence[str] = (), level: float = 0.95) -> list[Diff]:
    """Compare the profiles of ``old`` (the baseline runs) with those of
    ``new``: one :class:`Diff` per event of the baseline, rows in perf diff's
    order (largest absolute delta first; entries only in the baseline last)."""
    if not old or not new:
        raise PmuscopeError("diff needs at least one baseline and one new recording")
    return diff_shares([symbol_shares(p) for p in old], [symbol_shares(p) for p in new],
                       old_names=old_names, new_names=new_names, level=level)


def diff_shares(olds: Sequence[dict], news: Sequence[dict], *, old_names: Sequence[str] = (),
                new_names: Sequence[str] = (), level: float = 0.95) -> list[Diff]:
    """:func:`diff_profiles` of :func:`symbol_shares` tables (one per run)."""
    events = list(dict.fromkeys(e for s in olds for e in s))
    diffs = []
    for ev in events:
        o_runs = [s.get(ev, {}) for s in olds]
        n_runs = [s.get(ev, {}) for s in news]
        keys = list(dict.fromkeys([k for r in o_runs for k in r] + [k for r in n_runs for k in r]))
        rows = []
        for k in keys:
            ov = [r[k][0] if k in r else 0.0 for r in o_runs]
            nv = [r[k][0] if k in r else 0.0 for r in n_runs]
            shown = next(r[k][1] for r in o_runs + n_runs if k in r)
            row = DiffRow(k[0], shown, sum(ov) / len(ov), sum(nv) / len(nv),
                          any(k in r for r in o_runs), any(k in r for r in n_runs), ov, nv)
            row.ci = welch_interval(ov, nv, level)
            rows.append(row)
        # perf: equal deltas go by shared object, then symbol name; the baseline
        # entries without a pair in the new file (no delta computed) come last,
        # by baseline share
        rows.sort(key=lambda r: (0, -round(abs(r.delta), 9), r.dso, r.sym[4:]) if r.in_new
                  else (1, -round(r.baseline, 9), r.dso, r.sym[4:]))
        diffs.append(Diff(ev, list(old_names) or [f"old{i}" for i in range(len(olds))],
                          list(new_names) or [f"new{i}" for i in range(len(news))], rows))
    return diffs


def format_diff(diffs: Sequence[Diff]) -> str:
    """perf diff's default text (``Baseline  Delta Abs  Shared Object  Symbol``);
    with repeats, a ``95% CI`` column and a ``noise`` mark are added."""
    out: list[str] = []
    for di, d in enumerate(diffs):
        if di:
            out.append("")
        rep = d.repeated
        dso_w = max([len("Shared Object")] + [len(r.dso) for r in d.rows])
        sym_w = max([len("Symbol")] + [len(r.sym) for r in d.rows])
        out.append(f"# Event '{d.event}'")
        out.append("#")
        if rep:
            out.append(f"# Runs: {len(d.old_files)} baseline, {len(d.new_files)} new; Baseline and Delta Abs "
                       f"are means over the runs, 95% CI is Welch's t interval of the delta")
            out.append("#")
        ci_h = f"  {'95% CI':>17}  {'':5}" if rep else ""
        out.append(f"# Baseline  Delta Abs{ci_h}  {'Shared Object':<{dso_w}}  {'Symbol':<{sym_w}}")
        ci_d = f"  {'.' * 17}  {'.' * 5}" if rep else ""
        out.append(f"# ........  .........{ci_d}  {'.' * dso_w}  {'.' * sym_w}")
        out.append("#")
        for r in d.rows:
            base = f"{r.baseline:.2f}%" if r.in_old and r.baseline > 0 else ""
            delta = f"{r.delta:+.2f}%" if r.in_new else ""
            line = f"{base:>10}  {delta:>9}"
            if rep:
                ci = "" if r.ci is None else f"[{r.ci[0]:+.2f}, {r.ci[1]:+.2f}]"
                line += f"  {ci:>17}  {'noise' if r.noise else '':5}"
            line += f"  {r.dso:<{dso_w}}  {r.sym}"
            out.append(line.rstrip())
    return "\n".join(out) + "\n"


def diff_json(diffs: Sequence[Diff]) -> str:
    return json.dumps({"events": [d.to_json() for d in diffs]})


def diff_files(old: Sequence[str], new: Sequence[str], **kw) -> list[Diff]:
    """:func:`diff_profiles` of perf.data paths."""
    from .model import load_profile

    return diff_profiles([load_profile(f) for f in old], [load_profile(f) for f in new],
                         old_names=old, new_names=new, **kw)
