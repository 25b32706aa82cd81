"""Oracle: for a corpus of event strings, pmuscope's perf_event_attr (perf
stat counting defaults applied) must equal the attr Linux perf prints with
``perf stat -vv -e STR -- true`` on this machine (perf prints the attr before
the open, so this works for events that fail to open too).

``python -m tests.live.test_oracle_perf --write-golden`` records perf's
answers into tests/data/sysfs/amd-epyc-kvm/perf-stat-vv.json for the offline
version of this test (tests/unit/test_events_oracle_golden.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from pmuscope.events import pmu as pmu_mod
from pmuscope.kernel.abi import PerfFormat, PerfSample

from tests.unit.test_events_oracle_golden import COMPARED, GOLDEN, ours

CORPUS = [
    # generic hardware names and aliases
    "cycles", "cpu-cycles", "instructions", "cache-references", "cache-misses", "branches",
    "branch-instructions", "branch-misses", "bus-cycles", "stalled-cycles-frontend", "idle-cycles-frontend",
    "stalled-cycles-backend", "ref-cycles",
    # software
    "cpu-clock", "task-clock", "page-faults", "faults", "context-switches", "cs", "cpu-migrations", "migrations",
    "minor-faults", "major-faults", "alignment-faults", "emulation-faults", "dummy", "bpf-output", "cgroup-switches",
    "duration_time",
    # hardware cache matrix
    "L1-dcache-loads", "L1-dcache-load-misses", "L1-dcache-stores", "L1-dcache-prefetches", "L1-icache-load-misses",
    "LLC-loads", "LLC-store-misses", "LLC-prefetch-misses", "dTLB-loads", "dTLB-load-misses", "dTLB-store-misses",
    "dTLB-speculative-read-miss", "iTLB-loads", "iTLB-load-misses", "branch-loads", "branch-load-misses", "node-loads",
    "node-store-misses", "l1d-misses", "L1-dcache-misses-load", "LLC", "bpu",
    # raw
    "r003c", "r1a8", "rc0:u", "r76:k",
    # modifiers
    "cycles:u", "cycles:k", "cycles:h", "cycles:uk", "cycles:I", "cycles:G", "cycles:H", "cycles:uG", "cycles:D",
    "cycles:e", "cycles:p", "cycles:pp", "cycles:ppp", "cycles:P", "cycles:S", "cycles:W", "instructions:upp",
    "task-clock:u", "cpu-clock:k", "cpu-clock:kh", "cpu-clock:Hk", "cpu-clock:I", "L1-dcache-load-misses:k",
    # tracepoints
    "sched:sched_switch", "sched:sched_wakeup", "sched:sched_process_e*", "raw_syscalls:sys_enter",
    "sched:sched_switch:u", "irq:irq_handler_entry",
    # breakpoints
    "mem:0x1000", "mem:0x1000:rw", "mem:0x1000/8:w", "mem:0x1000:x", "mem:0x2000/2:r", "mem:0x1000:w:u",
    # pmu/terms/ through sysfs format/ and events/
    "cpu/event=0x76/", "cpu/event=0xc0,umask=0x0/", "cpu/event=0x3c,umask=1,inv,cmask=2,edge/", "cpu/event=0x123/",
    "cpu/config=0x3c,config1=5/", "cpu/cpu-cycles/", "cpu/instructions,name=insn/u", "cpu/r0xc0/",
    "cpu/event=0x76,period=1000/", "cpu/event=0x76,umask=0x3,name=foo,period=1000/u", "cpu/ref-cycles/k",
    "software/config=3/", "software/config=0x1/k", "tracepoint/config=0x174/", "msr/tsc/", "tsc", "msr/tsc/u",
    # per-event terms on symbolic events
    "cycles/period=1000/", "instructions/name=foo/",
    # lists and groups
    "cycles,instructions:u,cs", "{cycles,instructions}", "{cycles,instructions}:u", "{cpu-clock,task-clock}:k",
    "{cycles:D,instructions:e}", "{cycles,instructions}:D", "{cs,faults},sched:sched_switch",
]  # fmt: skip

_FLAG_NAMES = {"TOTAL_TIME_ENABLED": PerfFormat.TOTAL_TIME_ENABLED, "TOTAL_TIME_RUNNING": PerfFormat.TOTAL_TIME_RUNNING,
               "ID": PerfFormat.ID, "GROUP": PerfFormat.GROUP, "LOST": getattr(PerfFormat, "LOST", 16)}  # fmt: skip
_UNIONS = {"{ sample_period, sample_freq }": "sample_period", "{ bp_addr, config1 }": "config1",
           "{ bp_len, config2 }": "config2", "{ wakeup_events, wakeup_watermark }": "wakeup_events"}  # fmt: skip


def parse_perf_vv(output: str, fields: tuple[str, ...] = COMPARED) -> list[dict[str, int]]:
    """The attrs of the events perf opened, from ``perf stat -vv`` output:
    one dict per event (retries after a failed open are dropped), fields
    perf omitted are 0."""
    events: list[dict[str, int]] = []
    block: dict[str, int] | None = None
    last_ok = True
    for line in output.splitlines():
        if line.startswith("perf_event_attr:"):
            block = {}
            continue
        if block is not None and line.startswith("  "):
            m = re.match(r"  (\{[^}]*\}|\S+)\s+(.*)$", line)
            if not m:
                continue
            key, value = _UNIONS.get(m.group(1), m.group(1)), m.group(2).strip()
            if key == "read_format":
                block[key] = sum(int(_FLAG_NAMES[f]) for f in value.split("|"))
            elif key == "sample_type":
                block[key] = sum(int(PerfSample[f]) for f in value.split("|"))
            else:
                try:
                    block[key] = int(value, 0)
                except ValueError:
                    pass
            continue
        if line.startswith("sys_perf_event_open:") and block is not None:
            attr = {k: block.get(k, 0) for k in fields}
            retry = not last_ok and events and (events[-1]["type"], events[-1]["config"]) == (attr["type"], attr["config"])
            if not retry:
                events.append(attr)
            last_ok = bool(re.search(r"= \d+\s*$", line))
            block = None
    return events


def perf_attrs(perf: str, text: str) -> list[dict[str, int]]:
    proc = subprocess.run(
        [perf, "stat", "-vv", "-e", text, "--", "true"], capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    events = parse_perf_vv(out)
    if not events:
        raise AssertionError(f"perf printed no attr for {text!r}:\n{out[-2000:]}")
    return events


def _collect(perf: str, tolerant: bool = False) -> dict[str, list[dict[str, int]] | None]:
    def one(text: str):
        try:
            return perf_attrs(perf, text)
        except AssertionError:
            if not tolerant:
                raise
            return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, CORPUS))
    return dict(zip(CORPUS, results))


@pytest.fixture(scope="module")
def perf_answers():
    import shutil

    perf_bin = shutil.which("perf")
    if not perf_bin or subprocess.run([perf_bin, "--version"], capture_output=True).returncode != 0:
        pytest.skip("Linux perf is not installed (apt-get install linux-perf)")
    return _collect(perf_bin, tolerant=True)


def _missing_pmu(text: str) -> str | None:
    """The PMU ``text`` names that this machine's sysfs lacks, or None."""
    devices = "/sys/bus/event_source/devices"
    for pmu in ("cpu", "msr"):
        if (f"{pmu}/" in text or (pmu == "msr" and text == "tsc")) and not os.path.isdir(f"{devices}/{pmu}"):
            return pmu
    return None


def _needs(text: str) -> str | None:
    """Why ``text`` cannot be checked on this machine, or None."""
    if any(tp in text for tp in ("sched:", "raw_syscalls:", "irq:")):
        from pmuscope.events.tracepoints import find_tracefs

        if not find_tracefs():  # mounts it as perf does, where this user may
            return "needs tracefs (not mounted, and this user cannot mount it)"
    return None


def assert_same_attrs(mine: list[dict[str, int]], theirs: list[dict[str, int]], text: str) -> None:
    """``mine`` equals what perf printed. Where perf printed fewer attrs, it must
    have stopped at an event this machine cannot open (perf stat gives up at the
    first group member that fails, e.g. ``cycles`` without a hardware PMU, after
    printing that member's attr): then the attrs up to and including that one
    must agree, and that event must really fail to open here."""
    from tests.conftest import event_opens

    if len(theirs) < len(mine):
        last = theirs[-1]
        fields = {k: last[k] for k in ("exclude_kernel", "exclude_user", "exclude_hv") if last.get(k)}
        reason = event_opens(last["type"], last["config"], **fields)
        assert reason is not None, (
            f"perf printed {len(theirs)} of {len(mine)} attrs for {text!r}, yet its last "
            f"(type {last['type']}, config {last['config']:#x}) opens here")
        mine = mine[: len(theirs)]
    assert mine == theirs


def test_corpus_size():
    assert len(CORPUS) >= 60 and len(set(CORPUS)) == len(CORPUS)


@pytest.mark.parametrize("text", CORPUS)
def test_attr_matches_perf(perf_answers, text):
    reason = _needs(text)
    if reason:
        pytest.skip(reason)
    pmu_mod.clear_cache()
    missing = _missing_pmu(text)
    if missing:
        # the PMU is not on this machine (no vPMU: no 'cpu'): both refuse the string
        from pmuscope.errors import EventParseError

        assert perf_answers[text] is None, f"perf built an attr for {text!r} without the {missing!r} PMU"
        with pytest.raises(EventParseError, match=f"cannot find PMU '{missing}'"):
            ours(text, "/sys")
        return
    assert perf_answers[text] is not None, f"perf printed no attr for {text!r}"
    assert_same_attrs(ours(text, "/sys"), perf_answers[text], text)


def test_parser_of_perf_output_drops_retries():
    out = (
        "perf_event_attr:\n  type                             9\n  exclude_guest                    1\n"
        "------\nsys_perf_event_open: pid 1  cpu -1  group_fd -1  flags 0x8\n"
        "perf_event_attr:\n  type                             9\n"
        "------\nsys_perf_event_open: pid 1  cpu -1  group_fd -1  flags 0 = 3\n"
        "perf_event_attr:\n  type                             1\n  { bp_addr, config1 }             0x10\n"
        "  read_format                      TOTAL_TIME_ENABLED|ID\n"
        "------\nsys_perf_event_open: pid 1  cpu -1  group_fd -1  flags 0x8 = 4\n"
    )
    events = parse_perf_vv(out)
    assert [(e["type"], e["exclude_guest"], e["config1"], e["read_format"]) for e in events] == [(9, 1, 0, 0), (1, 0, 0x10, 5)]


def main(argv: list[str]) -> int:
    import shutil

    if "--write-golden" not in argv:
        print("usage: python -m tests.live.test_oracle_perf --write-golden", file=sys.stderr)
        return 2
    perf = shutil.which("perf")
    if not perf:
        print("perf not found", file=sys.stderr)
        return 1
    version = subprocess.run([perf, "--version"], capture_output=True, text=True).stdout.strip()
    data = {
        "perf": version,
        "kernel": os.uname().release,
        "command": "perf stat -vv -e STR -- true",
        "note": "per event: the perf_event_attr fields perf printed (omitted = 0); retries after failed opens dropped",
        "events": _collect(perf),
    }
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"wrote {GOLDEN} ({len(data['events'])} event strings)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
