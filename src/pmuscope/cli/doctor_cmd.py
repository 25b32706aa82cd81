"""`pmuscope doctor`: what this machine allows perf_event_open to do, and why."""

from __future__ import annotations

import argparse
import json
import sys

from ..doctor import diagnose, summarize

HELP = "check what this machine allows (paranoid, capabilities, container/VM, PMUs, rdpmc, limits) and how to fix it"

_MARK = {"ok": "ok     ", "warn": "WARN   ", "missing": "MISSING"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list of checks")
    parser.add_argument("--root", default="/", help="diagnose a captured sysfs/procfs tree (no live probes)")
    parser.add_argument("--no-probe", action="store_true", help="do not open test events")


def run(args: argparse.Namespace) -> int:
    checks = diagnose(args.root, probe=False if args.no_probe else None)
    if args.json:
        print(json.dumps([c.to_dict() for c in checks], indent=2))
        return 0
    color = sys.stdout.isatty()
    for c in checks:
        mark = _MARK[c.status]
        if color and c.status != "ok":
            mark = f"\033[{'33' if c.status == 'warn' else '31'}m{mark}\033[0m"
        print(f"{mark} {c.name:<27} {c.summary}")
        if c.detail and (c.status != "ok" or getattr(args, "verbose", 0)):
            print(f"        {'':<27} {c.detail}")
        if c.fix:
            print(f"        {'':<27} fix: {c.fix}")
    counts = summarize(checks)
    print(f"\n{counts['ok']} ok, {counts['warn']} warnings, {counts['missing']} missing")
    return 0
