"""``pmuscope annotate``: per-instruction sample shares of a symbol, like perf annotate.

    pmuscope annotate -i perf.data -s work --stdio    # Percent | Source code & Disassembly
    pmuscope annotate -i perf.data                    # the hottest user-space symbol
    pmuscope annotate -i perf.data -s work --json
"""

from __future__ import annotations

import argparse
import sys

USES_NUMPY = True
HELP = "per-instruction sample shares of a symbol with its disassembly and source, like perf annotate"
DESCRIPTION = __doc__ + """
Disassembly comes from objdump (binutils), run as perf runs it; with debug info the source lines are
interleaved (objdump -l -S). Each instruction's share is its sample period over the symbol's
(perf's 'percent: local period'). --json prints {annotations:[{symbol, dso, event, samples, period,
lines:[{addr, insn, percent, samples, period} | {source}]}]}.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("symbol_arg", nargs="?", metavar="SYMBOL", help="symbol to annotate (same as -s)")
    parser.add_argument("-i", "--input", default="perf.data", metavar="FILE", help="perf.data file")
    parser.add_argument("-s", "--symbol", help="symbol to annotate (default: the hottest user-space symbol)")
    parser.add_argument("-d", "--dsos", metavar="DSO", help="the shared object of the symbol, when several have it")
    parser.add_argument("-e", "--event", help="event to annotate (default: the first with samples)")
    parser.add_argument("--stdio", action="store_true", help="text output (the default; accepted for perf users)")
    parser.add_argument("--no-source", action="store_true", help="disassembly only, no source lines")
    parser.add_argument("--json", action="store_true", help="JSON output")


def run(args: argparse.Namespace) -> int:
    from ..profile.annotate import annotate_symbol, annotation_json, format_annotation, hottest_symbol
    from ..profile.model import load_profile

    p = load_profile(args.input)
    name = args.symbol or args.symbol_arg or hottest_symbol(p, args.event)
    ann = annotate_symbol(p, name, dso=args.dsos, event=args.event, source=False if args.no_source else None)
    if args.json:
        sys.stdout.write(annotation_json([ann]) + "\n")
    else:
        sys.stdout.write(format_annotation(ann))
    return 0
