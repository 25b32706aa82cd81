"""``pmuscope diff``: perf diff's baseline/delta table of two recordings.

    pmuscope diff                                 # perf.data.old against perf.data, as perf diff
    pmuscope diff old.data new.data               # Baseline, Delta Abs, Shared Object, Symbol
    pmuscope diff a1.data,a2.data,a3.data b1.data,b2.data,b3.data
                                                  # repeats: mean delta, 95% CI, 'noise' when it spans 0
    pmuscope diff old.data new.data --json
"""

from __future__ import annotations

import argparse
import sys

USES_NUMPY = True
HELP = "compare two recordings like perf diff (baseline, delta); repeated recordings get a 95% CI per delta"
DESCRIPTION = __doc__ + """
Shares are each event's period share, matched by (shared object, symbol) as perf diff's
default -s dso,sym; rows are sorted by the absolute delta (perf's -c delta-abs). A comma-separated
list of files on a side is a set of repeated recordings: Baseline and Delta Abs are then means over
the runs, and a 95%% confidence interval of the delta (Welch's t interval; needs two runs or more per
side) is printed with a 'noise' mark on the deltas whose interval contains 0. --json prints
{events:[{event, old, new, rows:[{dso, sym, baseline, new, delta[, old_runs, new_runs, ci95, noise]}]}]}.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("old", nargs="?", help="baseline perf.data (FILE or FILE1,FILE2,... for repeats; "
                                               "default perf.data.old)")
    parser.add_argument("new", nargs="?", help="new perf.data (FILE or FILE1,FILE2,...; default perf.data)")
    parser.add_argument("--stdio", action="store_true", help="text output (the default; accepted for perf users)")
    parser.add_argument("--json", action="store_true", help="JSON output")

    parser.add_argument("--hide-noise", action="store_true", help="with repeats: leave out deltas flagged noise")


def _files(text: str) -> list[str]:
    return [f for f in (s.strip() for s in text.split(",")) if f]


def run(args: argparse.Namespace) -> int:
    from ..profile.diff import diff_files, diff_json, format_diff

    if args.old is not None and args.new is None:
        old, new = _files(args.old), ["perf.data"]
    else:
        old = _files(args.old or "perf.data.old")
        new = _files(args.new or "perf.data")
    diffs = diff_files(old, new)
    if args.hide_noise:
        for d in diffs:
            d.rows = [r for r in d.rows if r.noise is not True]
    if args.json:
        sys.stdout.write(diff_json(diffs) + "\n")
    else:
        sys.stdout.write(format_diff(diffs))
    return 0
