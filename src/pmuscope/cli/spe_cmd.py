"""``pmuscope spe``: decode Arm SPE data.

    pmuscope spe --dump --raw spe.data            # packets, as `perf report -D` prints them
    pmuscope spe --raw spe.data -o out --format csv   # spe-parser style ldst/br/other tables
    pmuscope spe -i perf.data -o out               # AUXTRACE chunks of a perf.data file
    pmuscope spe -i perf.data -o out --symbols     # + symbol/dso columns from the MMAP side band
    pmuscope spe --raw spe.data --symbols --pid 1234 -o out   # a live process's /proc/PID/maps
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import PmuscopeError

HELP = "decode Arm SPE buffers: perf report -D packet dump, load/store/branch/other tables"
DESCRIPTION = (
    "Decode Arm Statistical Profiling Extension data from a perf.data file (AUXTRACE) or a bare "
    "SPE buffer (--raw). --dump prints packets in the exact format of `perf report -D`; -o writes "
    "load-store / branch / other tables with the columns of Arm's spe-parser."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="perf.data file, or a raw SPE buffer with --raw")
    parser.add_argument("-i", "--input", dest="input", help="input file (same as FILE)")
    parser.add_argument("-r", "--raw", action="store_true", help="FILE is one bare SPE buffer (e.g. WindowsPerf spe.data), not perf.data")
    parser.add_argument("-D", "--dump", action="store_true", help="print every packet as `perf report -D` does")
    parser.add_argument("--perf-style", choices=("newest", "6.1"), default="newest",
                        help="--dump text of the newest perf (default) or of perf 6.1, to diff with an older perf")
    parser.add_argument("-o", "--output", metavar="OUTDIR", help="write <prefix>-ldst/-br/-other tables into OUTDIR")
    parser.add_argument("-t", "--format", choices=("csv", "parquet"), default="csv", help="table format (default csv)")
    parser.add_argument("-p", "--prefix", default="spe", help="table file name prefix (default spe)")
    parser.add_argument("--cpu", type=int, default=0, help="cpu column for a raw buffer (default 0)")
    parser.add_argument("--midr", type=lambda s: int(s, 0), default=0, help="MIDR_EL1 of the CPU that wrote a raw buffer (names IMPDEF events, e.g. 0x410fd0c0 for Neoverse N1)")
    parser.add_argument("--noldst", action="store_true", help="skip the load/store table")
    parser.add_argument("--nobr", action="store_true", help="skip the branch table")
    parser.add_argument("--noother", action="store_true", help="skip the other table")
    parser.add_argument("--strict", action="store_true", help="fail on the first undecodable byte instead of skipping it as perf does")
    parser.add_argument("-s", "--symbols", action="store_true",
                        help="resolve PCs (and branch targets, data addresses) to symbol+offset, dso and data object "
                             "columns appended to the tables, from the perf.data MMAP side band and the CONTEXT pid")
    parser.add_argument("--pid", type=int, help="with --symbols: the process of records without CONTEXT; with --raw, "
                                               "the live process whose /proc/PID/maps names every user-space PC")


def _read(path: str):
    """The file's bytes, memory-mapped (large raw buffers stay out of RAM)."""
    import numpy as np

    try:
        if os.path.getsize(path) == 0:
            return b""
        return np.memmap(path, dtype=np.uint8, mode="r")
    except OSError as err:
        raise PmuscopeError(f"cannot read {path}: {err.strerror}") from err


def _chunks(args, path: str):
    """(cpu, midr, data, header line or None) per SPE buffer in the input."""
    if args.raw:
        yield args.cpu, args.midr, _read(path), None
        return
    if args.symbols:  # chunk offsets tell the symbolizer how much side band precedes each
        from ..spe.symbols import iter_spe_chunks_at

        for off, cpu, midr, data, header in iter_spe_chunks_at(path, midr=args.midr or None):
            args._symbolizer.advance(off)
            yield cpu, midr, data, header
        return
    try:
        from ..spe.perfdata import iter_spe_chunks
    except ImportError as err:
        raise PmuscopeError(
            "reading SPE data from perf.data needs the perf.data reader (pmuscope.perfdata), which "
            "this build does not have; pass --raw for a bare SPE buffer"
        ) from err
    yield from iter_spe_chunks(path, midr=args.midr or None)


class _Summary:
    """Counts for the one-screen summary, accumulated batch by batch."""

    def __init__(self) -> None:
        self.size = self.records = self.loads = self.stores = self.branches = self.other = 0
        self.dropped = self.bad = 0
        self.first_bad: int | None = None
        self.trailing: list[int] = []
        self.tot_lat: list = []
        self.symbols: dict[str, int] = {}

    def add_symbols(self, syms) -> None:
        import numpy as np

        sym = syms["symbol"]
        have = sym != ""
        if not have.any():
            return
        key = sym[have] + "\x1f" + syms["dso"][have]
        u, counts = np.unique(key, return_counts=True)
        for k, c in zip(u.tolist(), counts.tolist()):
            s, d = k.split("\x1f", 1)
            name = f"{s.rsplit('+0x', 1)[0]} ({d})"
            self.symbols[name] = self.symbols.get(name, 0) + c

    def add(self, recs) -> None:
        self.records += len(recs)
        self.loads += int(recs.is_load.sum())
        self.stores += int(recs.is_store.sum())
        self.branches += int(recs.is_branch.sum())
        self.other += int((recs.op_class == 0).sum())
        self.dropped += len(recs.dropped_offsets)
        self.bad += len(recs.bad_offsets)
        if self.first_bad is None and len(recs.bad_offsets):
            self.first_bad = int(recs.bad_offsets[0])
        self.tot_lat.append(recs.tot_lat[recs.has_tot_lat])

    def write(self, out) -> None:
        import numpy as np

        unknown = self.records - self.loads - self.stores - self.branches - self.other
        out.write(f"{self.size} bytes of SPE data, {self.records} records\n")
        out.write(f"  loads {self.loads}  stores {self.stores}  branches {self.branches}  other {self.other}  "
                  f"no-op-type {unknown}\n")
        tot = np.concatenate(self.tot_lat) if self.tot_lat else np.zeros(0)
        if len(tot):
            out.write(
                f"  total latency: mean {float(np.mean(tot)):.1f}  p50 {int(np.percentile(tot, 50))}  "
                f"p99 {int(np.percentile(tot, 99))}  max {int(tot.max())} cycles\n"
            )
        if self.dropped:
            out.write(f"  {self.dropped} partial record(s) dropped after bad bytes\n")
        for off in self.trailing:
            out.write(f"  unterminated record at offset {off:#x} ignored\n")
        if self.symbols:
            out.write("  top PCs by symbol:\n")
            top = sorted(self.symbols.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
            for name, c in top:
                out.write(f"  {c:>10}  {100.0 * c / max(self.records, 1):6.2f}%  {name}\n")


def _symbolizer(args, path: str):
    """The SpeSymbolizer for --symbols (kept on ``args`` for the chunk reader)."""
    from ..spe.symbols import SpeSymbolizer

    if args.raw:
        if args.pid is None:
            raise PmuscopeError(
                "--symbols with --raw needs --pid PID: a bare SPE buffer has no MMAP side band, so user-space PCs "
                "can only be named from the /proc/PID/maps of the live process that wrote it")
        sym = SpeSymbolizer.for_pid(args.pid)
    else:
        if not os.path.exists(path):
            raise PmuscopeError(f"cannot read {path}: no such file")
        sym = SpeSymbolizer.for_perf_data(path, pid=args.pid)
    args._symbolizer = sym
    return sym


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.cpu < 1 << 20:
        raise PmuscopeError(f"--cpu {args.cpu}: expected a CPU number (0 or more)")
    if not 0 <= args.midr < 1 << 64:
        raise PmuscopeError(f"--midr {args.midr:#x}: MIDR_EL1 is a 64-bit register value (e.g. 0x410fd0c0)")
    from ..spe import dump_lines
    from ..spe.records import iter_records
    from ..spe.tables import TableWriter

    path = args.input or args.file
    if not path:
        raise PmuscopeError("no input: give a perf.data file, or --raw and a bare SPE buffer")
    if args.pid is not None and not args.symbols:
        raise PmuscopeError("--pid only names the process for --symbols; add --symbols (or drop --pid)")
    symbolizer = _symbolizer(args, path) if args.symbols else None
    out = sys.stdout
    which = [n for n, skip in (("ldst", args.noldst), ("br", args.nobr), ("other", args.noother)) if not skip]
    writer = TableWriter(args.output, args.prefix, args.format, which, symbols=bool(symbolizer)) if args.output else None
    summary = _Summary()
    decode = bool(writer) or not args.dump or args.strict
    try:
        for cpu, midr, data, header in _chunks(args, path):
            summary.size += len(data)
            batches = iter_records(data, cpu=cpu, midr=midr) if decode else ()
            if args.strict:
                # --strict fails before printing a chunk it refuses
                batches = list(batches)
                for recs in batches:
                    recs.check()
            if args.dump:
                if header:
                    out.write(header + "\n")
                for line in dump_lines(data, midr=midr, header=True, style=args.perf_style):
                    out.write(line + "\n")
            for recs in batches:
                summary.add(recs)
                if recs.trailing_offset >= 0:
                    summary.trailing.append(recs.trailing_offset)
                syms = symbolizer.columns(recs) if symbolizer else None
                if syms is not None and not writer:
                    summary.add_symbols(syms)
                if writer:
                    writer.write(recs, syms)
    except BaseException:
        if writer:
            writer.abort()
        raise
    written = writer.close() if writer else {}
    if writer:
        for name, p in written.items():
            print(f"{name}: {p} ({writer.rows[name]} rows)", file=sys.stderr)
        if not written:
            print("no SPE records found", file=sys.stderr)
    elif not args.dump:
        summary.write(out)
    if symbolizer is not None and symbolizer.kernel_note:
        print(f"note: {symbolizer.kernel_note}", file=sys.stderr)
    if summary.bad:
        print(
            f"warning: {summary.bad} undecodable byte(s) skipped, the first at offset {summary.first_bad:#x} "
            "(--strict makes this an error)",
            file=sys.stderr,
        )
    return 0


__all__ = ["HELP", "configure", "run"]
