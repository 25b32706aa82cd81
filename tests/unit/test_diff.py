"""pmuscope diff: the statistics (t quantiles, Welch intervals) and perf
diff's rows, order and text on share tables."""

from __future__ import annotations

import json
import math

import pytest

from pmuscope.profile.diff import diff_json, diff_shares, format_diff, t_cdf, t_quantile, welch_interval


@pytest.mark.parametrize("df,q", [(1, 12.706205), (2, 4.302653), (4, 2.776445), (10, 2.228139),
                                  (30, 2.042272), (60, 2.000298)])
def test_t_quantile_matches_tables(df, q):
    assert t_quantile(0.975, df) == pytest.approx(q, abs=2e-4)
    assert t_cdf(q, df) == pytest.approx(0.975, abs=1e-6)


def test_t_quantile_tends_to_normal():
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-4)
    assert t_quantile(0.025, 10) == pytest.approx(-2.228139, abs=1e-5)


def test_welch_interval():
    # equal variances and sizes: df = 2n-2 = 4; se = sqrt(2 * 1/3)
    old, new = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    lo, hi = welch_interval(old, new)
    half = 2.776445 * math.sqrt(2 / 3)
    assert lo == pytest.approx(3 - half, abs=1e-4) and hi == pytest.approx(3 + half, abs=1e-4)
    assert welch_interval([1.0], [2.0, 3.0]) is None
    assert welch_interval([1.0, 1.0], [2.0, 2.0]) == (1.0, 1.0)


def _shares(d):
    return {"cpu-clock": {(dso, sym): (pct, sym) for (dso, sym), pct in d.items()}}


def test_rows_and_order_like_perf_diff():
    old = _shares({("a.so", "[.] f"): 50.0, ("a.so", "[.] g"): 30.0, ("[kernel.kallsyms]", "[k] k"): 20.0})
    new = _shares({("a.so", "[.] f"): 20.0, ("b.so", "[.] h"): 60.0, ("[kernel.kallsyms]", "[k] k"): 20.0})
    (d,) = diff_shares([old], [new])
    got = [(r.sym, round(r.baseline, 2), round(r.delta, 2), r.in_new) for r in d.rows]
    # largest |delta| first; a baseline-only entry (no pair, no delta) last
    assert got == [("[.] h", 0.0, 60.0, True), ("[.] f", 50.0, -30.0, True), ("[k] k", 20.0, 0.0, True),
                   ("[.] g", 30.0, -30.0, False)]
    text = format_diff([d]).splitlines()
    assert text[0] == "# Event 'cpu-clock'"
    assert text[2].startswith("# Baseline  Delta Abs  Shared Object")
    assert text[5].split() == ["+60.00%", "b.so", "[.]", "h"]
    assert text[6].split() == ["50.00%", "-30.00%", "a.so", "[.]", "f"]
    assert text[7].split() == ["20.00%", "+0.00%", "[kernel.kallsyms]", "[k]", "k"]
    assert text[8].split() == ["30.00%", "a.so", "[.]", "g"]  # perf leaves its delta empty


def test_repeats_flag_noise():
    olds = [_shares({("a.so", "[.] f"): v, ("a.so", "[.] g"): w}) for v, w in ((50, 10), (52, 12), (48, 11))]
    news = [_shares({("a.so", "[.] f"): v, ("a.so", "[.] g"): w}) for v, w in ((30, 11), (31, 9), (29, 12))]
    (d,) = diff_shares(olds, news)
    rows = {r.sym: r for r in d.rows}
    assert rows["[.] f"].delta == pytest.approx(-20.0)
    assert rows["[.] f"].noise is False and rows["[.] f"].ci[1] < 0
    assert rows["[.] g"].noise is True
    j = json.loads(diff_json([d]))["events"][0]
    assert {r["sym"]: r["noise"] for r in j["rows"]} == {"[.] f": False, "[.] g": True}
    assert j["rows"][0]["old_runs"] == [50, 52, 48]
    text = format_diff([d])
    assert "95% CI" in text and "noise" in text.split("[.] f")[1]
