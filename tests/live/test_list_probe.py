"""`pmuscope list --probe` on this machine: software events and tracepoints
must open; hardware events open exactly when the machine has a usable PMU
(and otherwise say why); `pmuscope attr` agrees with perf stat -vv."""

from __future__ import annotations

import json
import os

import pytest

from pmuscope.cli.main import main
from pmuscope.events import pmu as pmu_mod

from tests.conftest import hardware_pmu_reason


def listing(capsys, *argv):
    pmu_mod.clear_cache()
    assert main(["list", "--json", *argv]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_software_events_work(capsys):
    rows, _ = listing(capsys, "--probe", "sw")
    assert len(rows) >= 12
    broken = {r["name"]: r.get("reason") for r in rows if r["works"] is not True}
    assert not broken


def test_tracepoints_work_and_are_limited(capsys):
    from pmuscope.events.tracepoints import find_tracefs

    # pmuscope mounts tracefs as perf does when it is not mounted yet (as root)
    tracefs = find_tracefs()
    assert tracefs and os.path.isdir(f"{tracefs}/events/sched"), "tracefs is neither mounted nor mountable here"
    rows, _ = listing(capsys, "--probe", "sched:sched_switch")
    assert [(r["name"], r["works"]) for r in rows] == [("sched:sched_switch", True)]
    rows, err = listing(capsys, "--probe", "--probe-tracepoints", "2", "sched:*")
    assert len(rows) > 2
    assert [r["works"] for r in rows[:2]] == [True, True] and all(r["works"] is None for r in rows[2:])
    assert f"probed 2 of {len(rows)} tracepoints" in err


def test_hardware_events_match_pmu_presence(capsys):
    rows, _ = listing(capsys, "--probe", "hw")
    cycles = next(r for r in rows if r["name"] == "cpu-cycles")
    reason = hardware_pmu_reason()
    if reason is None:
        assert cycles["works"] is True
    else:
        assert cycles["works"] is False and cycles["reason"]


def test_msr_tsc_needs_perfs_exclude_guest_fallback(capsys):
    if not os.path.isdir("/sys/bus/event_source/devices/msr"):
        pytest.skip("no msr PMU here")
    rows, _ = listing(capsys, "--probe", "msr/tsc/")
    (row,) = [r for r in rows if r["name"] == "msr/tsc/"]
    assert row["works"] is True
    # on a KVM guest the msr PMU rejects exclude_guest=1, and perf retries without it
    if "note" in row:
        assert "exclude_guest" in row["note"]


def test_full_probe_covers_every_kind(capsys):
    rows, err = listing(capsys, "--probe")
    groups = {r["group"] for r in rows}
    assert {"hardware", "software", "cache", "tracepoint", "breakpoint", "raw"} <= groups
    probed = [r for r in rows if r.get("works") is not None]
    assert len(probed) > 60
    assert all(r["works"] is True for r in probed if r["group"] == "software")
    assert all(isinstance(r.get("reason", ""), str) for r in probed)


def test_attr_cli_agrees_with_perf(capsys, perf_bin):
    from tests.live.test_oracle_perf import assert_same_attrs, perf_attrs
    from tests.unit.test_events_oracle_golden import COMPARED

    group, rest = "{cycles,instructions}:u", "cpu-clock:k,sched:sched_switch,mem:0x1000/8:w"
    assert main(["attr", "--json", f"{group},{rest}"]) == 0
    ours = [{k: row[k] for k in COMPARED} for row in json.loads(capsys.readouterr().out)]
    assert len(ours) == 5
    # without a hardware PMU perf stops at cycles: the rest is checked on its own
    assert_same_attrs(ours, perf_attrs(perf_bin, f"{group},{rest}"), group)
    assert ours[2:] == perf_attrs(perf_bin, rest)


def _perf_list(perf: str, group: str) -> set[str]:
    import subprocess

    out = subprocess.run([perf, "list", "--raw-dump", group], capture_output=True, text=True, timeout=120).stdout
    return set(out.split())


@pytest.mark.parametrize("group", ["hw", "sw", "cache", "pmu", "tracepoint"])
def test_lists_everything_perf_lists(capsys, perf_bin, group):
    rows, _ = listing(capsys, group)
    ours = {n for r in rows for n in [r["name"], *r.get("aliases", [])]}
    missing = _perf_list(perf_bin, group) - ours
    assert not missing


@pytest.mark.parametrize("group", ["hw", "cache"])
def test_probe_agrees_with_perf_list(capsys, perf_bin, group):
    """perf list shows only the hardware/cache events that open here
    (is_event_supported): exactly those must probe as working."""
    rows, _ = listing(capsys, "--probe", group)
    perf_says = _perf_list(perf_bin, group)
    assert {r["name"] for r in rows if r["works"]} == {r["name"] for r in rows if r["name"] in perf_says}


def test_default_list_hides_what_cannot_open(capsys):
    """As perf list: hardware and cache events that do not open here are left out
    unless --all (or --probe) asks, with one note saying how many and why."""
    from tests.conftest import hardware_pmu_reason

    shown, err = listing(capsys)
    everything, _ = listing(capsys, "--all")
    probed, _ = listing(capsys, "--probe", "hw")
    works = {r["name"] for r in probed if r["works"]}
    hw_shown = {r["name"] for r in shown if r["group"] == "hardware"}
    assert hw_shown == works  # exactly the hardware events that open
    assert {r["name"] for r in everything if r["group"] == "hardware"} >= {r["name"] for r in probed}
    if hardware_pmu_reason() is not None:
        assert not hw_shown and "cannot open here and are not listed" in err and "--all" in err
    assert len(everything) > len(shown) or not (set(r["name"] for r in probed) - works)


def test_probe_text_gives_each_reason_once(capsys):
    assert main(["list", "--probe", "hw"]) == 0
    out = capsys.readouterr().out
    body, _, reasons = out.partition("Reasons (")
    if "[unavailable" not in body:
        return  # every hardware event opens here: nothing to explain
    lines = [ln for ln in reasons.splitlines()[1:] if ln.startswith("  ") and ln.split(":", 1)[0].strip().isdigit()]
    texts = [ln.split(": ", 1)[1] for ln in lines]
    assert len(texts) == len(set(texts))  # each reason once
    for ln in lines:  # every numbered reason is the one of some event above
        n = ln.split(":", 1)[0].strip()
        assert f"[unavailable {n}]" in body or f"[works {n}]" in body, n
