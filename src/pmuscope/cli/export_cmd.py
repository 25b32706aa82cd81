"""``pmuscope export``: a recording as pprof, speedscope or folded stacks, or
pushed to a Pyroscope-compatible ingest endpoint."""

from __future__ import annotations

import argparse
import os
import sys

from .. import errors

USES_NUMPY = True
#: leaves no file open; a push that outlives its timeout leaves its thread, and then the
#: interpreter exits the usual way (see main._exit_now)
FAST_EXIT = True
HELP = "convert a perf.data file to pprof / speedscope / folded, or push it to Pyroscope (--push URL)"
DESCRIPTION = (
    "Read a perf.data file (or folded stacks with --input-format folded) and write gzipped pprof "
    "(profile.proto: one sample type per event, mappings with build ids, pid/tid/cpu/comm labels), "
    "speedscope JSON (one profile per thread and event) or folded stacks. --push URL sends the pprof "
    "to URL/ingest (Pyroscope's API) with retries; a profile that cannot be delivered is dropped "
    "with a warning and exit status 1."
)


def configure(p: argparse.ArgumentParser) -> None:
    from ..export.files import FORMATS
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


def run(args: argparse.Namespace) -> int:
    from ..export.files import DEFAULT_OUTPUT, load, push_once, write
    from .report_cmd import apply_filters

    user_labels = _labels(args.label)  # checked before the (slow) load
    if args.push:
        from ..export.push import check_push_url

        check_push_url(args.push)
    if not 0 < args.push_timeout <= 86_400:
        raise errors.PmuscopeError(f"--push-timeout {args.push_timeout}: must be a positive number of seconds")
    ep, event_label = load(args.input, input_format=args.input_format,
                           kernel_symbols=False if args.no_kernel_symbols else None,
                           select=lambda prof: apply_filters(prof, args), aggregate=not args.no_aggregate)
    if not len(ep):
        print(f"pmuscope export: warning: {args.input} holds no samples (after filters)", file=sys.stderr)
    out = args.output if args.output is not None or args.push else DEFAULT_OUTPUT[args.format]
    if out is not None:
        write(ep, args.format, out, event=args.event)
        if out != "-":
            print(f"pmuscope export: {args.format} written to {out} ({len(ep)} sample rows, "
                  f"{', '.join(f'{k}={v}' for k, v in ep.totals().items())})", file=sys.stderr)
    if args.push:
        labels = {"service_name": args.app, "host": os.uname().nodename, "event": event_label, **user_labels}
        try:
            end = os.path.getmtime(args.input) if args.input != "-" else None
        except OSError:
            end = None
        stats = push_once(ep, args.push, args.app, labels, end=end, timeout=args.push_timeout)
        if stats.sent != 1:
            print(f"pmuscope export: warning: the profile was not delivered to {stats.url} ({stats.last_error}); "
                  f"{stats.dropped} dropped", file=sys.stderr)
            return 1
        print(f"pmuscope export: pushed to {stats.url} as {args.app} ({stats.retries} retries)", file=sys.stderr)
    return 0
