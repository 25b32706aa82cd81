"""``pmuscope stat``: count events for a command, processes, threads, CPUs or a
cgroup, in perf stat's layouts (table, ``-x`` CSV, ``-j`` JSON)."""

from __future__ import annotations

import argparse
import math
import os
import select
import sys
import time

from .. import errors

#: leaves no file open and no thread running: the CLI may end the process without interpreter teardown
FAST_EXIT = True
HELP = "count events like perf stat (table, CSV, JSON; interval, per-CPU/core/socket/node/thread)"
DESCRIPTION = (
    "Run a command and count events while it runs (or attach to -p/-t, -a, -C, -G). "
    "Output goes to stderr like perf stat (or -o FILE)."
)

#: perf's default events (tools/perf/builtin-stat.c default_attrs0/1); the
#: stalled-cycles events are shown only where they exist, as perf does
DEFAULT_SOFTWARE = ["context-switches", "cpu-migrations", "page-faults"]
DEFAULT_HARDWARE = ["cycles", "stalled-cycles-frontend", "stalled-cycles-backend", "instructions", "branches", "branch-misses"]
OPTIONAL_DEFAULT = {"stalled-cycles-frontend", "stalled-cycles-backend"}


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-e", "--event", action="append", default=[], metavar="EVENTS", help="event list (perf -e syntax); repeatable")
    p.add_argument("-p", "--pid", metavar="PID[,PID]", help="attach to processes (all their threads)")
    p.add_argument("-t", "--tid", metavar="TID[,TID]", help="attach to threads")
    p.add_argument("-a", "--all-cpus", action="store_true", help="system-wide: every CPU")
    p.add_argument("-C", "--cpu", metavar="LIST", help="system-wide on these CPUs (0-3,6)")
    p.add_argument("-G", "--cgroup", metavar="CGROUP", help="count only tasks of this cgroup (per CPU)")
    p.add_argument("-I", "--interval-print", type=int, metavar="MS", help="print counts every MS milliseconds")
    p.add_argument("--interval-count", type=int, metavar="N", help="stop after N intervals")
    p.add_argument("-x", "--field-separator", metavar="SEP", help="CSV output with this separator")
    p.add_argument("-j", "--json-output", action="store_true", help="JSON lines output")
    p.add_argument("-r", "--repeat", type=int, default=1, metavar="N", help="run the command N times: mean and ± stddev")
    aggr = p.add_mutually_exclusive_group()
    aggr.add_argument("-A", "--no-aggr", "--per-cpu", dest="aggr", action="store_const", const="cpu", help="one row per CPU")
    aggr.add_argument("--per-core", dest="aggr", action="store_const", const="core")
    aggr.add_argument("--per-die", dest="aggr", action="store_const", const="die")
    aggr.add_argument("--per-socket", dest="aggr", action="store_const", const="socket")
    aggr.add_argument("--per-node", dest="aggr", action="store_const", const="node")
    aggr.add_argument("--per-thread", dest="aggr", action="store_const", const="thread", help="one row per thread (-p/-t)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the counts to FILE (default: stderr)")
    p.add_argument("--append", action="store_true", help="append to -o FILE")
    p.add_argument("-D", "--delay", type=int, default=0, metavar="MS", help="start counting MS ms after the command starts")
    p.add_argument("-B", "--big-num", dest="big_num", action="store_true", default=True, help="thousands separators (default)")
    p.add_argument("--no-big-num", dest="big_num", action="store_false", help="no thousands separators")
    p.add_argument("-i", "--no-inherit", action="store_true", help="do not count child tasks")
    p.add_argument("workload", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS]")


def _split_ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise errors.PmuscopeError(f"bad {what} list {text!r}: expected numbers separated by commas") from None


def _parse(text: str):
    from ..events import parse_events

    return parse_events(text)


def default_events(system_wide: bool):
    """perf's default set as EventSpecs: hardware events this machine lacks are
    kept (printed ``<not supported>``) except the optional stalled-cycles ones."""
    from ..kernel import PerfEventFd

    clock = "cpu-clock" if system_wide else "task-clock"
    specs = _parse(",".join([clock] + DEFAULT_SOFTWARE))
    for name in DEFAULT_HARDWARE:
        spec = _parse(name)[0]
        if name in OPTIONAL_DEFAULT:
            try:
                probe = spec.attr.copy()
                probe.exclude_kernel = 1
                PerfEventFd(probe, pid=0, cpu=-1).close()
            except errors.PmuscopeError:
                continue
        specs.append(spec)
    return specs


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class _Stopper:
    """What ends the count: the workload's exit, every attached pid/tid's exit, or Ctrl-C.

    Processes are watched through pidfds; a thread (no pidfd for a non-leader
    tid before Linux 6.9) or a kernel without pidfd_open is polled in /proc."""

    def __init__(self, workload=None, pids: list[int] | None = None) -> None:
        self.workload = workload
        self.poller = select.poll()
        self.fds: list[int] = []
        self.polled: list[int] = []
        self._done: set[int] = set()
        targets = [] if workload is not None else list(pids or [])
        if workload is not None:
            fd = workload.pidfd()
            if fd is not None:
                self.fds.append(fd)
            else:
                self.polled.append(workload.pid)
        for pid in targets:
            try:
                self.fds.append(os.pidfd_open(pid))
            except (AttributeError, OSError):
                self.polled.append(pid)
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)
        self.watching = bool(self.fds or self.polled)

    def _all_gone(self) -> bool:
        if self.workload is not None:
            return self.workload.poll() is not None
        fds_done = len(self._done) == len(self.fds)
        return fds_done and not any(os.path.exists(f"/proc/{p}") for p in self.polled)

    def finished(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` (None: until done); True when everything watched has exited."""
        if not self.watching:  # system-wide without a command: until Ctrl-C (or -I's count)
            if timeout_s is None:
                while True:
                    time.sleep(3600)
            time.sleep(max(timeout_s, 0))
            return False
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if end is None else max(end - time.monotonic(), 0.0)
            step = left if not self.polled else (0.05 if left is None else min(left, 0.05))
            pending = [fd for fd in self.fds if fd not in self._done]
            if pending:
                for fd, _ in self.poller.poll(-1 if step is None else int(step * 1000)):
                    self._done.add(fd)
                    self.poller.unregister(fd)
            elif step:
                time.sleep(step)
            if self._all_gone():
                if self.workload is not None:
                    self.workload.wait()
                return True
            if end is not None and time.monotonic() >= end:
                return False

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _mean_counts(runs, aggr, topology):
    """-r: per (key, event) mean of the aggregated counts and perf's relative
    stddev of the mean (util/stat.c: stddev_stats / avg_stats)."""
    from ..counting.results import EventCount

    per_run = [r.aggregate(aggr, topology) for r in runs]
    out = []
    variances: dict[tuple, float] = {}
    for gi, (key, nr, evs) in enumerate(per_run[0]):
        merged = []
        for ei, ev in enumerate(evs):
            cells = [run[gi][2][ei] for run in per_run]
            n = len(cells)
            vals = [c.scaled for c in cells]
            mean = sum(vals) / n
            var = sum((v - mean) ** 2 for v in vals) / (n - 1) if n > 1 else 0.0
            sd_mean = math.sqrt(var / n)
            variances[(key, ev.name)] = 100.0 * sd_mean / mean if mean else 0.0
            merged.append(EventCount(ev.name, round(sum(c.value for c in cells) / n),
                                     round(sum(c.time_enabled for c in cells) / n),
                                     round(sum(c.time_running for c in cells) / n), mean,
                                     all(c.counted for c in cells), ev.supported, ev.unit, ev.scale, ev.error))
        out.append((key, nr, merged))
    return out, variances


def run(args: argparse.Namespace) -> int:
    from ..counting import Counter, Workload
    from ..counting.statfmt import StatPrinter

    command = list(args.workload or [])
    if command and command[0] == "--":
        command = command[1:]
    targets = [bool(command), bool(args.pid), bool(args.tid)]
    if sum(targets) > 1:
        raise errors.PmuscopeError("give a command, -p PID or -t TID, not several")
    system_wide = bool(args.all_cpus or args.cpu or args.cgroup)
    if not command and not args.pid and not args.tid and not system_wide:
        raise errors.PmuscopeError("nothing to count: give -- COMMAND, -p PID, -t TID, -a or -C LIST")
    if not 1 <= args.repeat <= 100_000:
        raise errors.PmuscopeError(f"-r {args.repeat}: needs a count of 1 to 100000")
    if args.repeat > 1 and not command:
        raise errors.PmuscopeError("-r repeats a command: give -- COMMAND")
    if args.repeat > 1 and args.interval_print:
        raise errors.PmuscopeError("-r and -I cannot be combined")
    if args.interval_print is not None and args.interval_print < 1:
        raise errors.PmuscopeError("-I needs an interval of at least 1 ms")
    if args.interval_count is not None and args.interval_count < 1:
        raise errors.PmuscopeError(f"--interval-count {args.interval_count}: needs a count of 1 or more")
    if args.delay is not None and args.delay < 0:
        raise errors.PmuscopeError(f"-D {args.delay}: the delay must be 0 or more milliseconds")
    if args.append and not args.output:
        raise errors.PmuscopeError("--append needs -o FILE")
    if args.field_separator is not None and args.json_output:
        raise errors.PmuscopeError("-x and -j cannot be combined")
    aggr = args.aggr or "global"
    if aggr in ("core", "die", "socket", "node") and not system_wide:
        raise errors.PmuscopeError(f"--per-{aggr} needs system-wide counting (-a or -C)")
    if aggr == "thread" and not (args.pid or args.tid or command):
        raise errors.PmuscopeError("--per-thread needs -p PID, -t TID or a command")
    if aggr == "cpu" and not system_wide:
        raise errors.PmuscopeError("-A/--no-aggr needs system-wide counting (-a or -C)")

    if args.event:
        specs = _parse(",".join(args.event))
    else:
        specs = default_events(system_wide)

    mode = "json" if args.json_output else ("csv" if args.field_separator is not None else "human")
    out = sys.stderr
    if args.output:
        from ..outfile import open_output

        # -I rows are written as they come (kept when the run is killed); a
        # plain count appears at FILE only when complete
        out = open_output(args.output, "w", atomic=not args.interval_print, append=args.append)
    printer = StatPrinter(out, mode, sep=args.field_separator or ",", aggr=aggr, big_num=args.big_num,
                          interval=bool(args.interval_print))
    topology = None
    if aggr in ("core", "die", "socket", "node"):
        from ..counting.topology import CpuTopology

        topology = CpuTopology.read()

    pids = _split_ints(args.pid, "PID") if args.pid else None
    tids = _split_ints(args.tid, "TID") if args.tid else None
    cpus = args.cpu if args.cpu else ("all" if system_wide else None)
    # perf's print_header order: -a, then -C, then the command, then -p/-t
    if args.all_cpus:
        target = "'system wide'"
    elif args.cpu:
        target = f"'CPU(s) {args.cpu}'"
    elif command:
        target = "'" + " ".join(command) + "'"
    elif pids:
        target = f"process id '{args.pid}'"
    elif tids:
        target = f"thread id '{args.tid}'"
    else:
        target = "'system wide'"

    status = 0
    runs = []
    elapsed = []
    usage = None
    interrupted = False
    try:
        for _ in range(args.repeat):
            workload = Workload(command) if command else None
            counter = Counter([s.copy() for s in specs], pid=pids, tid=tids, cpus=cpus, inherit=not args.no_inherit,
                              cgroup=args.cgroup, workload=workload, tolerate_unsupported=True,
                              enable_on_exec=not args.delay)
            comms = {t: _comm(t) for t in counter.threads} if aggr == "thread" else {}
            stopper = None
            try:
                counter.open()
                if workload is not None and args.delay:
                    workload.start()
                    time.sleep(args.delay / 1000.0)
                elif args.delay:
                    time.sleep(args.delay / 1000.0)
                counter.start()
                t0 = counter.start_ns
                stopper = _Stopper(workload, pids or tids)
                try:
                    if args.interval_print:
                        _interval_loop(counter, stopper, printer, args, aggr, topology, comms, t0)
                    else:
                        stopper.finished(None)
                except KeyboardInterrupt:
                    interrupted = True
                    if workload is not None:  # it got SIGINT too: give it a moment to exit
                        end = time.monotonic() + 2.0
                        while workload.poll() is None and time.monotonic() < end:
                            time.sleep(0.01)
                final = counter.read()
                t_end = time.monotonic_ns()
                if workload is not None and workload.status is not None:
                    t_end = min(t_end, workload.end_ns) if workload.end_ns else t_end
                    status = workload.status
                    usage = workload.rusage
                elif workload is not None and interrupted:
                    status = 130
                runs.append(final)
                elapsed.append((t_end - t0) / 1e9)
            finally:
                if stopper is not None:
                    stopper.close()
                counter.close()
            if interrupted:
                break

        if not args.interval_print and runs:
            printer.header(target, len(runs) if args.repeat > 1 else 1)
            if len(runs) > 1:
                groups, variances = _mean_counts(runs, aggr, topology)
                mean_el = sum(elapsed) / len(elapsed)
                for key, nr, evs in groups:
                    printer.print_block([(key, nr, evs)], mean_el * 1e9,
                                        variances={e.name: variances[(key, e.name)] for e in evs})
                sd = math.sqrt(sum((e - mean_el) ** 2 for e in elapsed) / (len(elapsed) - 1) / len(elapsed))
                printer.footer(mean_el, elapsed_stddev_s=sd)
            else:
                groups = runs[0].aggregate(aggr, topology)
                if aggr == "thread":
                    groups = [((comms.get(k, "?"), k), nr, evs) for k, nr, evs in groups]
                printer.print_block(groups, elapsed[0] * 1e9)
                user = sys_t = None
                if usage is not None and not system_wide:  # perf shows rusage only for a counted command
                    user, sys_t = usage.ru_utime, usage.ru_stime
                printer.footer(elapsed[0], user, sys_t)
        out.flush()
    except BaseException:
        if out is not sys.stderr:
            out.abort()
        raise
    if out is not sys.stderr:
        out.close()
    if interrupted and not command:
        return 0
    return status


def _interval_loop(counter, stopper, printer, args, aggr, topology, comms, t0) -> None:
    """Deadline-based: tick k prints the delta since tick k-1 at t0 + k*interval."""
    interval_ns = args.interval_print * 1_000_000
    prev = counter.read()
    k = 0
    done = False

    def emit():
        nonlocal prev
        now = counter.read()
        delta = now - prev
        prev = now
        groups = delta.aggregate(aggr, topology)
        if aggr == "thread":
            groups = [((comms.get(key, "?"), key), nr, evs) for key, nr, evs in groups]
        printer.print_block(groups, delta.elapsed_ns, ts=(now.timestamp_ns - t0) / 1e9)
        getattr(printer.out, "checkpoint", printer.out.flush)()  # each interval's rows are whole

    while not done:
        k += 1
        deadline = t0 + k * interval_ns
        timeout = max(deadline - time.monotonic_ns(), 0) / 1e9
        try:
            done = stopper.finished(timeout)
        except KeyboardInterrupt:
            emit()  # Ctrl-C: the partial last interval, as perf does
            raise
        emit()
        if args.interval_count and k >= args.interval_count:
            break
