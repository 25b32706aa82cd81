"""pmuscope attr against the perf_event_attr blocks perf stat -vv prints
for the same events (a breakpoint among them), and the note on events that
cannot open here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import hardware_pmu_reason

EVENTS = ["cpu-clock", "task-clock:u", "page-faults", "mem:0x1000:rw", "context-switches:k", "cycles"]


def _blocks(text):
    out, cur = [], None
    for line in text.splitlines():
        if line == "perf_event_attr:":
            cur = []
        elif cur is not None and line.startswith("  "):
            name, _, value = line[2:].partition("  ")
            cur.append((name.strip(), value.strip()))
        elif cur is not None:
            out.append(cur)
            cur = None
    return out


@pytest.mark.parametrize("event", EVENTS)
def test_attr_matches_perf_stat_vv(perf_bin, event):
    perf = subprocess.run([perf_bin, "stat", "-vv", "-e", event, "true"], capture_output=True, text=True, timeout=60)
    theirs = _blocks(perf.stderr + perf.stdout)
    if not theirs:
        pytest.skip(f"perf printed no attr for {event}: {perf.stderr[-300:]}")
    r = subprocess.run([sys.executable, "-m", "pmuscope", "attr", event], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ours = _blocks(r.stdout)
    # size: the attr version each tool was built with (perf 6.1: 128; ours: 136, VER8)
    drop = {"size"}
    assert [[kv for kv in b if kv[0] not in drop] for b in ours] == \
        [[kv for kv in b if kv[0] not in drop] for b in theirs[:1]]
    cannot = "# cannot open here:" in r.stdout
    if event == "cycles":
        assert cannot == (hardware_pmu_reason() is not None)
    else:
        assert not cannot, r.stdout
