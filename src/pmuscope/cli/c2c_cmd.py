"""``pmuscope c2c``: cache-to-cache contention / false sharing (perf c2c report).

    pmuscope c2c -i perf.data                   # x86 PEBS: lines ranked by HITM
    pmuscope c2c -i spe.perf.data -d peer       # Arm SPE: lines ranked by peer snoops
    pmuscope c2c --raw spe.data --midr 0x410fd0c0 --line-size 128 --json
"""

from __future__ import annotations

import argparse
import json
import sys

from .mem_cmd import _add_source, _load

HELP = "shared data cache lines: HITM / peer-snoop contention per line and offset (perf c2c report)"
DESCRIPTION = __doc__


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the usage examples' lines
    _add_source(parser)
    parser.add_argument("--line-size", type=int, choices=(64, 128), default=64,
                        help="cache line size in bytes (default 64; 128 = perf c2c --double-cl)")
    parser.add_argument("-d", "--display", choices=("auto", "tot", "hitm", "lcl", "rmt", "peer"),
                        default="auto", help="rank lines by HITMs (tot/hitm, lcl, rmt: x86) or peer snoops (peer: Arm); "
                        "auto picks what the samples carry")
    parser.add_argument("--top", type=int, default=20, help="cache lines to show (default 20)")
    parser.add_argument("--offsets", type=int, default=16, help="offsets per line (default 16)")
    parser.add_argument("--json", action="store_true", help="JSON output")
    parser.add_argument("--no-symbols", action="store_true", help="print code addresses only")


def run(args: argparse.Namespace) -> int:
    from ..memory.c2c import c2c_analyze, format_c2c
    from ..memory.report import resolve_symbols

    ms = _load(args)
    syms = None
    if not args.no_symbols and len(ms):
        syms, _ = resolve_symbols(ms)
    res = c2c_analyze(ms, line_size=args.line_size, mode=args.display, top=args.top, max_offsets=args.offsets,
                      symbols=syms)
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_c2c(res))
    return 0
