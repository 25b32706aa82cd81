"""``pmuscope export``: a recording as pprof, speedscope or folded stacks, or
pushed to a Pyroscope-compatible ingest endpoint."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .. import errors

HELP = "convert a perf.data file to pprof / speedscope / folded, or push it to Pyroscope (--push URL)"
DESCRIPTION = (
    "Read a perf.data file (or folded stacks with --input-format folded) and write gzipped pprof "
    "(profile.proto: one sample type per event, mappings with build ids, pid/tid/cpu/comm labels), "
    "speedscope JSON (one profile per thread and event) or folded stacks. --push URL sends the pprof "
    "to URL/ingest (Pyroscope's API) with retries; a profile that cannot be delivered is dropped "
    "with a warning and exit status 1."
)

FORMATS = ("pprof", "speedscope", "folded")


def configure(p: argparse.ArgumentParser) -> None:
    from .report_cmd import add_filter_options

    p.add_argument("-f", "--format", choices=FORMATS, default="pprof", help="output format (default pprof)")
    p.add_argument("-i", "--input", default="perf.data", metavar="FILE", help="perf.data file ('-' for stdin)")
    p.add_argument("--input-format", choices=("perf.data", "folded"), default=None,
                   help="what -i holds (default: folded when FILE ends in .folded or .txt, else perf.data)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output file ('-' for stdout; default perf.pb.gz / perf.speedscope.json / perf.folded "
                        "unless only pushing)")
    p.add_argument("--event", metavar="NAME", help="folded/speedscope: weigh by this event's period "
                                                   "(default: the first event; 'samples' for sample counts)")
    p.add_argument("--no-aggregate", action="store_true", help="pprof: one Sample per recorded sample")
    p.add_argument("--no-kernel-symbols", action="store_true", help="do not name kernel addresses from /proc/kallsyms")
    p.add_argument("--push", metavar="URL", help="send the pprof to a Pyroscope-compatible server (URL/ingest)")
    p.add_argument("--app", default="pmuscope", metavar="NAME", help="--push: application name (default pmuscope)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="--push: extra label (repeatable); service_name, host and event are set by default")
    p.add_argument("--push-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="--push: give up (drop, exit 1) after this long (default 30)")
    add_filter_options(p)


def _labels(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise errors.PmuscopeError(f"--label {it!r}: expected KEY=VALUE")
        out[k] = v
    return out


def _load(args) -> tuple[object, str]:
    """(ExportProfile, event label)."""
    from ..export import from_folded, from_profile

    fmt = args.input_format
    if fmt is None:
        fmt = "folded" if args.input.endswith((".folded", ".txt")) else "perf.data"
    if fmt == "folded":
        try:
            text = sys.stdin.read() if args.input == "-" else open(args.input, encoding="utf-8").read()
        except OSError as err:
            raise errors.PmuscopeError(f"cannot read {args.input}: {err.strerror}") from None
        return from_folded(text, name=os.path.basename(args.input)), "samples"
    from ..perfdata import Feature, PerfDataFile
    from ..profile import load_profile
    from .report_cmd import apply_filters

    if args.input != "-" and not os.path.exists(args.input):
        raise errors.PmuscopeError(f"{args.input} does not exist: record one with `pmuscope record` or pass -i FILE")
    pf = PerfDataFile(args.input)
    try:
        build_ids = {b.filename: b.hex for b in (pf.features.get(Feature.BUILD_ID) or [])}
        prof = load_profile(pf, kernel_symbols=False if args.no_kernel_symbols else None)
    finally:
        pf.close()
    prof = apply_filters(prof, args)
    ep = from_profile(prof, build_ids=build_ids, aggregate=not args.no_aggregate,
                      comments=[f"pmuscope export of {args.input}"])
    return ep, ",".join(prof.event_names)


def _weight_column(ep, event: str | None) -> int:
    if event is None:
        return 1 if len(ep.sample_types) > 1 else 0
    try:
        return ep.sample_type_index(event)
    except errors.FormatError:
        for i, (t, _u) in enumerate(ep.sample_types):  # a clock event is stored as "cpu"
            if event in ("cpu-clock", "task-clock") and t == "cpu":
                return i
        raise


def _write(data: bytes | str, path: str) -> None:
    if path == "-":
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
        return
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)


def run(args: argparse.Namespace) -> int:
    from ..export import PyroscopePusher, pprof, speedscope
    from ..profile.folded import format_folded

    ep, event_label = _load(args)
    if not len(ep):
        print(f"pmuscope export: warning: {args.input} holds no samples (after filters)", file=sys.stderr)
    out = args.output
    if out is None and not args.push:
        out = {"pprof": "perf.pb.gz", "speedscope": "perf.speedscope.json", "folded": "perf.folded"}[args.format]
    if out is not None:
        if args.format == "pprof":
            data: bytes | str = pprof.dumps(ep)
        elif args.format == "speedscope":
            cols = None if args.event is None else [_weight_column(ep, args.event)]
            data = speedscope.dumps(ep, sample_types=cols)
        else:
            data = format_folded(ep.folded(_weight_column(ep, args.event), comm=True))
        _write(data, out)
        if out != "-":
            print(f"pmuscope export: {args.format} written to {out} ({len(ep)} sample rows, "
                  f"{', '.join(f'{k}={v}' for k, v in ep.totals().items())})", file=sys.stderr)
    if args.push:
        labels = {"service_name": args.app, "host": os.uname().nodename, "event": event_label}
        labels.update(_labels(args.label))
        pusher = PyroscopePusher(args.push, args.app, labels, max_queue=1,
                                 retries=4, backoff=0.5, timeout=min(10.0, args.push_timeout))
        try:
            until = os.path.getmtime(args.input) if args.input != "-" else time.time()
        except OSError:
            until = time.time()
        start = until - max(ep.duration_nanos / 1e9, 1.0)
        pusher.push(ep, start, until)
        stats = pusher.close(args.push_timeout)
        if stats.sent != 1:
            print(f"pmuscope export: warning: the profile was not delivered to {args.push} ({stats.last_error}); "
                  f"{stats.dropped} dropped", file=sys.stderr)
            return 1
        print(f"pmuscope export: pushed to {pusher.url} as {args.app} ({stats.retries} retries)", file=sys.stderr)
    return 0
