"""Differential campaign: the fast paths against their references on damaged files.

pmuscope reads recordings through fast paths (C record decoding and symbol
resolution, streamed and collapsed reports and exports, the C script formatter,
the numpy-free small-file report and script), each with a reference path an
environment switch selects. The tests compare them on the corpus and on chosen
damages; this campaign compares them on random ones. Each case takes a file
(fuzz_perfdata.py's mutation: 1-4 integer fields set to edge or random values,
sometimes a cut or a record's bytes copied over another), runs one command in this process under the default
paths and under every reference switch, and compares exit code, standard output
and standard error. Mismatching inputs are saved under --out.

    python benchmarks/fuzz_paths.py [--mode paths|lite] [--seconds 600] [--seed N] [--out DIR]

``paths``: the corpus of tests/unit/test_perfdata_field_fuzz.py through report
(stdio, children, JSON, sorts), script (with and without call chains, fields)
and export (folded, pprof). ``lite``: files written as
tests/unit/test_report_lite.py writes them, through the option sets the
numpy-free path takes, compared where it accepts the damaged file.

One difference is known and counted apart, not as a mismatch: a file whose
sample periods add up past 2^53. The reference report sums periods in float64
(inexact there, and never wrapping), the collapsed path in uint64 first (as
perf's u64 sums: wrapping past 2^64). Only damaged periods get there.

Prints: cases, mismatches (0 is the goal), period sums past 2^53, hangs.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import signal
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fuzz_perfdata import mutate  # noqa: E402
from tests.fieldfuzz import fields  # noqa: E402
from tests.unit.test_perfdata_field_fuzz import CORPUS, Hang, _alarm  # noqa: E402

#: every reference switch of the readers (the numpy record decoder is a module flag)
REFERENCE = {"PMUSCOPE_NATIVE_SCRIPT": "0", "PMUSCOPE_SCRIPT_STREAM": "0", "PMUSCOPE_SCRIPT_ROUND_SAMPLES": "0",
             "PMUSCOPE_NATIVE_RESOLVE": "0", "PMUSCOPE_REPORT_STREAM": "0", "PMUSCOPE_EXPORT_VECTOR": "0",
             "PMUSCOPE_EXPORT_STREAM": "0", "PMUSCOPE_SCRIPT_LITE": "0", "PMUSCOPE_REPORT_LITE": "0"}

COMMANDS = {
    "paths": [["report", "--stdio"], ["report", "--stdio", "--no-children"], ["report", "--json"],
              ["report", "--stdio", "--sort", "pid,dso,sym", "-n"], ["report", "--stdio", "-g", "caller"],
              ["script"], ["script", "-G"], ["script", "-F", "comm,tid,ip,sym,dso"], ["script", "-F", "+period"],
              ["export", "-f", "folded", "-o", "-"], ["export", "-f", "pprof", "-o", "-"]],
    "lite": [["script"], ["script", "-G"], ["script", "-F", "comm,tid,ip,sym"], ["script", "-F", "+pid"],
             ["script", "--cpu", "0"], ["script", "--time", "0.000004,"], ["report", "--stdio"],
             ["report", "--stdio", "--sort", "pid,sym"], ["report", "--json"], ["report", "--stdio", "-n"],
             ["report", "--stdio", "--comm", "python3"]],
}


class _Text:
    """A text stream writing into bytes as the real stdout does (lone surrogates kept)."""

    def __init__(self, buffer: io.BytesIO) -> None:
        self.buffer = buffer

    def write(self, text: str) -> int:
        self.buffer.write(text.encode("utf-8", "surrogateescape"))
        return len(text)

    def flush(self) -> None:
        pass


def run(argv: list[str], reference: bool) -> tuple:
    """(exit code or 'CRASH ...', stdout bytes, stderr text) of one command in this process."""
    from pmuscope.cli.main import main
    from pmuscope.records import native

    saved = {k: os.environ.get(k) for k in REFERENCE}
    for k in REFERENCE:
        os.environ.pop(k, None)
    if reference:
        os.environ.update(REFERENCE)
    native.NATIVE_DECODE = not reference
    warnings._filters_mutated()  # as in a new process: every warning shown again
    out, err = io.BytesIO(), io.StringIO()
    real = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Text(out), err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                rc = main(argv)
            except SystemExit as e:
                rc = e.code
            except Hang:
                raise
            except Exception as e:  # noqa: BLE001 - the finding
                rc = f"CRASH {type(e).__name__}: {e}"[:300]
    finally:
        sys.stdout, sys.stderr = real
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        native.NATIVE_DECODE = True
    return rc, out.getvalue(), err.getvalue()


def periods_past_float(path: str) -> bool:
    """True when the samples' periods add up to 2^53 or more (the known difference)."""
    from pmuscope import _policy
    from pmuscope.profile.model import load_profile

    old, _policy.STRICT_READS = _policy.STRICT_READS, False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = load_profile(path, kernel_symbols=False)
        return sum(p.period.tolist()) >= 1 << 53
    except Exception:  # noqa: BLE001 - unreadable: not the known difference
        return False
    finally:
        _policy.STRICT_READS = old


def _lite_takes(argv: list[str]) -> bool:
    """Whether the numpy-free path accepts this command's file (else both runs are the numpy path)."""
    from pmuscope.cli import report_cmd, script_cmd
    from pmuscope.cli.main import build_parser
    from pmuscope.errors import PmuscopeError

    args = build_parser(argv[0]).parse_args(argv)
    try:
        if argv[0] == "script":
            from pmuscope.profile.script_fields import parse_fields

            return script_cmd._lite_script(args, parse_fields(args.fields)) is not None
        from pmuscope.profile.report_format import parse_sort

        return report_cmd._lite_report(args, parse_sort(args.sort)) is not None
    except PmuscopeError:
        return False


def _corpus(mode: str, tmp: str) -> list[tuple[str, bytes]]:
    if mode == "paths":
        return [(f.name, f.read_bytes()) for f in CORPUS]
    from tests.unit.test_report_lite import write_recording

    out = []
    for extra in ("", "kernel", "anon"):
        path = os.path.join(tmp, f"written{extra}.data")
        write_recording(path, extra=extra)
        out.append((os.path.basename(path), open(path, "rb").read()))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=sorted(COMMANDS), default="paths")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default="fuzz-mismatches")
    a = ap.parse_args(argv)
    from pmuscope.cli.main import _fields_joined

    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _alarm)
    n = compared = known = hangs = 0
    found: list[str] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [(name, data, fields(data, per_type=4)) for name, data in _corpus(a.mode, tmp)]
        path = os.path.join(tmp, "m.data")
        while time.monotonic() - t0 < a.seconds:
            name, data, flds = rng.choice(corpus)
            buf, what = mutate(data, flds, rng)  # fuzz_perfdata's: 1-4 fields, a cut or a copied record
            with open(path, "wb") as f:
                f.write(buf)
            cmd = [*rng.choice(COMMANDS[a.mode]), "-i", path]
            if cmd[0] == "script":
                cmd = _fields_joined(cmd)
            n += 1
            signal.alarm(60)
            try:
                if a.mode == "lite" and not _lite_takes(cmd):
                    continue
                got, ref = run(cmd, False), run(cmd, True)
            except Hang:
                hangs += 1
                continue
            finally:
                signal.alarm(0)
            compared += 1
            crashed = isinstance(got[0], str) or isinstance(ref[0], str)
            if got == ref and not crashed:
                continue
            if not crashed and periods_past_float(path):
                known += 1
                continue
            os.makedirs(a.out, exist_ok=True)
            keep = os.path.join(a.out, f"case{len(found)}.data")
            with open(keep, "wb") as f:
                f.write(buf)
            part = "exit code" if got[0] != ref[0] else "stdout" if got[1] != ref[1] else "stderr"
            found.append(f"{keep} ({name}: {'; '.join(what)}) `{' '.join(cmd[:-2])}`: {part} differs"
                         + (f" ({got[0] if isinstance(got[0], str) else ref[0]})" if crashed else ""))
    dt = time.monotonic() - t0
    print(f"seed {seed}, mode {a.mode}: {n} cases in {dt:.0f} s, {compared} compared, {len(found)} mismatches, "
          f"{known} with period sums past 2^53 (known), {hangs} hangs")
    for line in found[:40]:
        print("  " + line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
