"""`pmuscope attr` and `pmuscope list` against sysfs fixtures (no kernel),
the event catalogue and perf's open fallbacks."""

from __future__ import annotations

import json

import pytest

from pmuscope.cli.main import main
from pmuscope.events.catalog import filter_events, list_events
from pmuscope.events.defaults import apply_counting_defaults, open_fallbacks
from pmuscope.kernel.abi import ATTR_FIELD_NAMES, perf_event_attr

from tests.conftest import DATA

SYSFS = DATA / "sysfs"
INTEL, AMD, ARM = (str(SYSFS / n) for n in ("intel-skx", "amd-epyc-kvm", "arm-neoverse-n1"))
EVENTS_DIR = str(DATA / "pmu-events")


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_attr_json_has_every_field_as_int(capsys):
    code, out, _ = run_cli(capsys, "attr", "--json", "--sysfs", INTEL, "cpu/mem-loads,ldlat=30/pp,{cs,faults}:u")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 3
    for row in rows:
        assert list(row) == list(ATTR_FIELD_NAMES)
        assert all(isinstance(v, int) for v in row.values())
    assert (rows[0]["type"], rows[0]["config"], rows[0]["config1"], rows[0]["precise_ip"]) == (4, 0x1CD, 30, 2)
    assert rows[0]["read_format"] == 3 and rows[0]["disabled"] == 1 and rows[0]["enable_on_exec"] == 1
    assert rows[1]["read_format"] == rows[2]["read_format"] == 0xF
    assert (rows[2]["disabled"], rows[2]["exclude_kernel"], rows[2]["exclude_guest"]) == (0, 1, 1)


def test_attr_text_and_raw(capsys):
    code, out, _ = run_cli(capsys, "attr", "--sysfs", INTEL, "--all", "--nonzero", "uncore_imc_0/cas_count_read/")
    assert code == 0
    assert "# uncore_imc_0/cas_count_read/  (pmu uncore_imc_0; scale 6.10352e-05 MiB; cpus 0,28)" in out
    assert "  config                     0x304" in out and "  type                       13" in out
    code, out, _ = run_cli(capsys, "attr", "--sysfs", INTEL, "--raw", "--nonzero", "sched:sched_switch,cycles")
    # the fixture has no tracefs: a clear one-line error, not a traceback
    assert code == 2


def test_attr_raw_has_no_session_defaults(capsys):
    code, out, _ = run_cli(capsys, "attr", "--sysfs", AMD, "--raw", "--json", "cycles:k")
    row = json.loads(out)[0]
    assert (row["disabled"], row["read_format"], row["inherit"], row["exclude_user"], row["exclude_guest"]) == (0, 0, 0, 1, 0)


def test_attr_vendor_event(capsys):
    import os

    old = os.environ.get("PMUSCOPE_EVENTS_DIR")
    os.environ.pop("PMUSCOPE_EVENTS_DIR", None)
    try:
        code, out, _ = run_cli(capsys, "attr", "--json", "--sysfs", INTEL, "--events-dir", f"{EVENTS_DIR}/x86/skylakex", "MEM_LOAD_RETIRED.L3_MISS")
    finally:
        if old is not None:
            os.environ["PMUSCOPE_EVENTS_DIR"] = old
    assert code == 0 and json.loads(out)[0]["config"] == 0x20D1


def test_attr_bad_event_prints_caret(capsys):
    code, out, err = run_cli(capsys, "attr", "--sysfs", AMD, "cycles,cpu/event=0x3c,bogus=1/")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert "unknown term 'bogus'" in lines[0] and lines[-1].index("^") == 2 + len("cycles,cpu/event=0x3c,")
    assert "Traceback" not in err


def test_catalogue_groups_and_filters():
    events = list_events(sysfs_root=ARM)
    groups = [e.group for e in events]
    assert groups.index("hardware") < groups.index("software") < groups.index("cache") < groups.index("pmu")
    names = {e.name for e in events}
    assert {"cpu-cycles", "L1-dcache-load-misses", "armv8_pmuv3_0/cpu_cycles/", "arm_spe_0//"} <= names
    assert "cycles" in next(e for e in events if e.name == "cpu-cycles").aliases
    assert all(e.description for e in events)
    assert {e.group for e in filter_events(events, "sw")} == {"software", "tool"}
    assert [e.name for e in filter_events(events, "CPU_CYC*")] == ["armv8_pmuv3_0/cpu_cycles/"]
    assert "branch-load-misses" in {e.name for e in filter_events(events, "branch-load")}


def test_cache_catalogue_is_perf_valid_matrix():
    from pmuscope.events import parse_events

    cache = [e for e in list_events(sysfs_root=ARM) if e.group == "cache"]
    # 7 caches; L1D/LLC/dTLB/node: 3 ops, L1I: 2, iTLB/BPU: 1; x2 results
    assert len(cache) == 2 * (3 + 2 + 3 + 3 + 1 + 1 + 3)
    for e in cache:
        assert parse_events(e.name, sysfs_root=ARM)[0].attr.type == 3


def test_vendor_events_listed(tmp_path):
    events = list_events(sysfs_root=INTEL, vendor_tables=f"{EVENTS_DIR}/x86/skylakex", glob="vendor")
    names = {e.name: e for e in events}
    assert names["MEM_LOAD_RETIRED.L3_MISS"].pmu == "cpu"
    assert names["UNC_M_CAS_COUNT.RD"].pmu == "uncore_imc"
    assert "missed L3" in names["MEM_LOAD_RETIRED.L3_MISS"].description


def test_list_notes_missing_hardware_pmu(capsys, tmp_path):
    dev = tmp_path / "bus/event_source/devices/software"
    dev.mkdir(parents=True)
    (dev / "type").write_text("1\n")
    code, out, _ = run_cli(capsys, "list", "--sysfs", str(tmp_path), "sw")
    assert code == 0
    assert "Software events:" in out and "task-clock" in out
    assert "note: no hardware PMU" in out
    code, out, _ = run_cli(capsys, "list", "--sysfs", AMD, "sw")
    assert "no hardware PMU" not in out


def test_list_json(capsys):
    code, out, _ = run_cli(capsys, "list", "--json", "--sysfs", INTEL, "uncore")
    rows = json.loads(out)
    assert {r["name"] for r in rows} == {f"uncore_imc_{i}/{e}/" for i in (0, 1) for e in ("clockticks", "cas_count_read", "cas_count_write")}
    assert all(r["group"] == "pmu" and "works" not in r for r in rows)


@pytest.mark.parametrize(
    "errno_name,fields,expect",
    [
        ("EINVAL", dict(type=9, exclude_guest=1), [dict(exclude_guest=0)]),
        ("EOPNOTSUPP", dict(precise_ip=3), [dict(precise_ip=2), dict(precise_ip=1), dict(precise_ip=0)]),
        ("EACCES", dict(), [dict(exclude_kernel=1, exclude_hv=1)]),
        ("EACCES", dict(exclude_kernel=1, exclude_hv=1), []),
        ("ENOENT", dict(exclude_guest=1), []),
    ],
)
def test_open_fallbacks_follow_perf(errno_name, fields, expect):
    attr = perf_event_attr(**fields)
    got = open_fallbacks(attr, errno_name)
    assert len(got) == len(expect)
    for (note, new), want in zip(got, expect):
        assert note and all(getattr(new, k) == v for k, v in want.items())
    assert attr == perf_event_attr(**fields)  # the input is not modified


def test_counting_defaults_without_workload():
    attr = apply_counting_defaults(perf_event_attr(sample_period=1000, freq=1), enable_on_exec=False, inherit=False)
    assert (attr.disabled, attr.enable_on_exec, attr.inherit, attr.sample_period, attr.freq) == (1, 0, 0, 0, 0)
    member = apply_counting_defaults(perf_event_attr(), leader=False, group_size=2)
    assert (member.disabled, member.read_format) == (0, 0xF)


def test_callchain_modes_offline():
    from pmuscope.errors import PmuscopeError
    from pmuscope.events.defaults import apply_callchain

    a = apply_callchain(perf_event_attr(), "dwarf,4096", tracking=True, max_stack=32, machine="aarch64")
    assert (a.sample_stack_user, a.sample_regs_user, a.mmap_data, a.sample_max_stack) == (4096, (1 << 33) - 1, 1, 32)
    assert a.sample_type & 0x3000 == 0x3000 and a.exclude_callchain_user == 1
    lbr = apply_callchain(perf_event_attr(), "lbr")
    assert lbr.sample_type & 0x800 and lbr.branch_sample_type == 0x1 | 0x800 | 0x4000 | 0x8000 | 0x20000
    assert apply_callchain(perf_event_attr(), "no").sample_type == 0
    with pytest.raises(PmuscopeError):
        apply_callchain(perf_event_attr(), "dwarf", machine="s390x")
    with pytest.raises(PmuscopeError):
        apply_callchain(perf_event_attr(), "frame")
