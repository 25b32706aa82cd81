"""``pmuscope mem``: memory-access samples (perf mem).

    pmuscope mem report -i perf.data            # by data source, latency, symbol, data object
    pmuscope mem report --sort mem,snoop,dso_daddr   # one table grouped as perf mem report --sort
    pmuscope mem report --raw spe.data --midr 0x410fd0c0 --json
    pmuscope mem script -i perf.data            # one line per sample: addr, data_src text, weight
    pmuscope mem events                         # what this machine can record (PEBS, IBS, SPE)
    pmuscope mem record -- CMD                  # PEBS load latency / AMD IBS op / Arm SPE samples of CMD
    pmuscope mem record -t load --ldlat 50 -p PID --duration 5
    pmuscope mem record -a -c 2000 --phys-data --duration 10
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "memory-access samples: report by data source/latency/symbol/data object (perf mem)"
DESCRIPTION = __doc__


def _int(s: str) -> int:
    return int(s, 0)


def _add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="perf.data (PEBS/IBS samples or Arm SPE), or a raw SPE buffer with --raw")
    p.add_argument("-i", "--input", dest="input", help="input file (default perf.data)")
    p.add_argument("-r", "--raw", action="store_true", help="the file is one bare Arm SPE buffer")
    p.add_argument("--cpu", type=int, default=0, help="cpu of a raw SPE buffer (default 0)")
    p.add_argument("--midr", type=_int, default=None,
                   help="MIDR_EL1 that wrote the SPE data (selects its data-source table; 0x410fd0c0 = Neoverse N1)")
    p.add_argument("--pid", type=int, default=None, help="pid for SPE records without CONTEXT packets")
    p.add_argument("--proc-maps", action="store_true",
                   help="attribute data addresses of pids the file has no maps for via /proc/PID/maps (live processes)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the usage examples' lines
    sub = parser.add_subparsers(dest="mem_action", metavar="ACTION")
    rep = sub.add_parser("report", help="summaries by data source, latency, symbol and data object")
    _add_source(rep)
    rep.add_argument("--json", action="store_true", help="JSON output")
    rep.add_argument("--top", type=int, default=20, help="rows in the symbol and data-object tables (default 20)")
    rep.add_argument("--perf-style", choices=("newest", "6.1"), default="newest",
                     help="memory-level wording of current perf (default) or perf <= 6.2 ('L1 or L1 hit')")
    rep.add_argument("-s", "--sort", metavar="KEYS",
                     help="one table grouped like perf mem report --sort KEYS (mem, snoop, tlb, locked, blocked, op, "
                          "dso_daddr, sym, dso, local_weight, local_ins_lat, pid)")
    scr = sub.add_parser("script", help="one line per memory sample, as perf script -F ip,addr,data_src,weight prints it")
    _add_source(scr)
    scr.add_argument("--perf-style", choices=("newest", "6.1"), default="newest")
    scr.add_argument("--json", action="store_true", help="JSON lines")
    rec = sub.add_parser("record", help="record memory samples (Intel PEBS load latency, AMD IBS op, Arm SPE)")
    rec.add_argument("-t", "--type", dest="kind", default="load,store",
                     help="memory operations: load, store or load,store (default; also 'ldst')")
    rec.add_argument("-l", "--ldlat", type=int, default=30,
                     help="minimum load latency in cycles (PEBS ldlat / SPE min_latency; default 30)")
    rec.add_argument("-c", "--count", type=int, default=None, help="sample every N events (default: -F)")
    rec.add_argument("-F", "--freq", type=int, default=None, help="sampling frequency in Hz (default 4000)")
    rec.add_argument("-p", "--pid", default=None, help="record existing process(es) PID[,PID...]")
    rec.add_argument("-a", "--all-cpus", action="store_true", help="system-wide")
    rec.add_argument("-C", "--cpu", default=None, help="only these CPUs (perf cpu list)")
    rec.add_argument("--phys-data", action="store_true", help="record physical data addresses (PERF_SAMPLE_PHYS_ADDR)")
    rec.add_argument("--data-page-size", action="store_true", help="record data page sizes (PERF_SAMPLE_DATA_PAGE_SIZE)")
    rec.add_argument("-o", "--output", default="perf.data")
    rec.add_argument("-e", "--with-events", dest="with_events", default=None, metavar="EVENTS",
                     help="Arm SPE: also sample these PMU events into the same file (e.g. l1d_cache_refill), "
                          "so report shows them next to SPE's l1d-miss ...")
    rec.add_argument("--duration", type=float, default=None, help="seconds to record when no command is given")
    rec.add_argument("-q", "--quiet", action="store_true", help="no summary lines")
    rec.add_argument("--sysfs", default="/sys", help=argparse.SUPPRESS)
    rec.add_argument("cmd", nargs=argparse.REMAINDER, help="command to run while recording (after --)")
    ev = sub.add_parser("events", help="memory-sampling events this machine offers (PEBS, IBS, SPE)")
    ev.add_argument("--sysfs", default="/sys", help="sysfs root (default /sys)")
    ev.add_argument("--json", action="store_true")
    ev.add_argument("--ldlat", type=int, default=30, help="load-latency threshold in cycles (default 30)")


def _load(args):
    from ..memory.source import load_source

    path = args.input or args.file or "perf.data"
    return load_source(path, raw=args.raw, cpu=args.cpu, midr=args.midr, pid=args.pid, procfs=args.proc_maps)


def _style(args) -> str:
    return "6.1" if args.perf_style == "6.1" else "new"


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "mem_action", None)
    if action == "report":
        from ..memory.report import format_report, format_sort_table, mem_report, sort_table

        if args.sort:
            rows = sort_table(_load(args), args.sort, style=_style(args))
            if args.json:
                json.dump(rows, sys.stdout, indent=1)
                sys.stdout.write("\n")
            else:
                print(format_sort_table(rows, args.sort))
            return 0
        rep = mem_report(_load(args), top=args.top, style=_style(args))
        if args.json:
            json.dump(rep, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print(format_report(rep))
        return 0
    if action == "script":
        from ..memory import datasrc as D

        ms = _load(args)
        text = D.texts(ms.data_src, D.data_src_text, style=_style(args))
        out = sys.stdout
        maxlen = 0
        for i in range(len(ms)):
            if args.json:
                out.write(json.dumps({"time": int(ms.time[i]), "pid": int(ms.pid[i]), "tid": int(ms.tid[i]),
                                      "cpu": int(ms.cpu[i]), "ip": int(ms.ip[i]), "addr": int(ms.addr[i]),
                                      "phys_addr": int(ms.phys_addr[i]), "data_src": int(ms.data_src[i]),
                                      "data_src_text": text[i], "weight": int(ms.weight[i]),
                                      "ins_lat": int(ms.ins_lat[i])}) + "\n")
            else:
                # perf script -F ip,addr,data_src,weight prints addr, data_src, weight, ip (its fixed
                # order); data_src__fprintf pads "%16lx %s" to the longest one printed so far
                ds = f"{int(ms.data_src[i]):16x} {text[i]}"[:99]
                maxlen = max(maxlen, len(ds))
                out.write(f"{int(ms.addr[i]):16x}{ds:<{maxlen}}{int(ms.weight[i]):16d} {int(ms.ip[i]):16x}\n")
        return 0
    if action == "record":
        return _record(args)
    if action == "events":
        from ..memory.events import mem_events_status

        events, reason = mem_events_status(args.sysfs)
        if args.json:
            json.dump({"events": [{"tag": e.tag, "name": e.name, "pmu": e.pmu, "kind": e.kind,
                                   "attrs": [{"type": a.type, "config": a.config, "config1": a.config1,
                                              "config2": a.config2, "sample_type": a.sample_type,
                                              "sample_period": a.sample_period, "precise_ip": a.precise_ip}
                                             for a in e.attrs]} for e in events], "reason": reason},
                      sys.stdout, indent=1)
            sys.stdout.write("\n")
        elif reason:
            print(f"pmuscope mem: {reason}", file=sys.stderr)
        else:
            for e in events:
                print(f"{e.tag:<14}: available  {e.name}")
        return 0 if events else 1
    print("usage: pmuscope mem {report,script,record,events} ... (see pmuscope mem -h)", file=sys.stderr)
    return 2


def _record(args) -> int:
    from ..errors import PmuscopeError
    from ..memory.events import mem_events, parse_mem_kind

    kind = parse_mem_kind(args.kind)
    if args.count is not None and args.count <= 0:
        raise PmuscopeError(f"-c {args.count}: the period must be positive")
    if args.freq is not None and args.freq <= 0:
        raise PmuscopeError(f"-F {args.freq}: the frequency must be positive")
    if not 0 <= args.ldlat <= 0xFFFF:
        raise PmuscopeError(f"--ldlat {args.ldlat}: expected 0..65535 cycles")
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if cmd and args.pid:
        raise PmuscopeError("give a command or -p PID, not both")
    events = mem_events(kind, ldlat=args.ldlat, period=args.count, freq=args.freq, phys_addr=args.phys_data,
                        data_page_size=args.data_page_size, sysfs_root=args.sysfs)
    if getattr(args, "with_events", None) and events[0].kind != "spe":
        raise PmuscopeError("-e/--with-events records PMU events next to Arm SPE; this machine's memory sampling "
                            f"is {events[0].kind} (use pmuscope record -e for more events)")
    if events[0].kind == "spe":
        return _record_spe(args, kind, cmd, events[0])
    return _record_samples(args, cmd, events)


def _record_samples(args, cmd: list[str], events) -> int:
    """PEBS / IBS: the events' specs through the sampling Recorder, with the
    sample_type bits perf mem record adds."""
    from ..sampling import Recorder
    from ._recording import exit_status, run_recorder

    argv = ["pmuscope", "mem", *sys.argv[2:]] if len(sys.argv) > 2 and sys.argv[1] == "mem" else None
    pids = [int(p) for p in args.pid.split(",") if p.strip()] if args.pid else None
    rec = Recorder(specs=[s for e in events for s in e.specs], sample_type_extra=events[0].sample_type_extra,
                   freq=args.freq, period=args.count, pid=pids, cpus=args.cpu, system_wide=args.all_cpus,
                   cmd=cmd or None, output=args.output, argv=argv, sysfs_root=args.sysfs)
    result, interrupted = run_recorder(rec, args.duration, "pmuscope mem record")
    if not args.quiet:
        print(result.summary("pmuscope mem record"), file=sys.stderr)
    return exit_status(result, interrupted)


def _record_spe(args, kind: str, cmd: list[str], event) -> int:
    """Arm SPE: one AUX-area event per CPU, system-wide while CMD runs."""
    import subprocess
    import time

    from ..errors import PmuscopeError
    from ..spe.record import SpeConfig, SpeRecorder

    if args.pid or args.cpu:
        raise PmuscopeError("Arm SPE recording is system-wide here: drop -p/-C (filter by pid in pmuscope mem report)")
    cfg = SpeConfig.for_mem(kind, min_latency=args.ldlat, period=args.count or 4096)
    extra = [args.with_events] if getattr(args, "with_events", None) else []
    with SpeRecorder(cfg, sysfs_root=args.sysfs, pmu_name=event.pmu, events=extra) as rec:
        rec.enable()
        start = time.monotonic()
        proc = subprocess.Popen(cmd) if cmd else None
        try:
            while True:
                time.sleep(0.1)
                rec.drain()
                if proc is not None and proc.poll() is not None:
                    break
                if proc is None and args.duration is not None and time.monotonic() - start >= args.duration:
                    break
        except KeyboardInterrupt:
            pass
        rec.disable()
        rec.drain()
        rec.write(args.output)
    print(f"pmuscope mem record: wrote {args.output} ({rec.event})", file=sys.stderr)
    return 0 if proc is None else int(proc.returncode or 0)
