"""Event grammar: generic, software, cache, raw, tracepoint, breakpoint,
modifiers, groups and error columns, against a fake sysfs/tracefs tree."""

from __future__ import annotations

import pytest

from pmuscope.errors import EventParseError, UnknownEventError
from pmuscope.events import parse_events, stat_defaults
from pmuscope.events import pmu as pmu_mod


@pytest.fixture
def root(tmp_path):
    """A tiny sysfs with a tracefs inside: sched:sched_switch id 316."""
    dev = tmp_path / "bus/event_source/devices"
    for name, type_ in (("software", 1), ("tracepoint", 2), ("breakpoint", 5)):
        (dev / name).mkdir(parents=True)
        (dev / name / "type").write_text(f"{type_}\n")
    ev = tmp_path / "kernel/tracing/events/sched"
    for name, id_ in (("sched_switch", 316), ("sched_wakeup", 320), ("sched_waking", 321)):
        (ev / name).mkdir(parents=True)
        (ev / name / "id").write_text(f"{id_}\n")
    pmu_mod.clear_cache()
    yield str(tmp_path)
    pmu_mod.clear_cache()


def one(text, root):
    specs = parse_events(text, sysfs_root=root)
    assert len(specs) == 1
    return specs[0]


@pytest.mark.parametrize(
    "text,type_,config",
    [
        ("cycles", 0, 0), ("cpu-cycles", 0, 0), ("instructions", 0, 1), ("cache-references", 0, 2),
        ("cache-misses", 0, 3), ("branches", 0, 4), ("branch-instructions", 0, 4), ("branch-misses", 0, 5),
        ("bus-cycles", 0, 6), ("stalled-cycles-frontend", 0, 7), ("idle-cycles-backend", 0, 8), ("ref-cycles", 0, 9),
        ("cpu-clock", 1, 0), ("task-clock", 1, 1), ("page-faults", 1, 2), ("faults", 1, 2), ("cs", 1, 3),
        ("context-switches", 1, 3), ("migrations", 1, 4), ("minor-faults", 1, 5), ("major-faults", 1, 6),
        ("alignment-faults", 1, 7), ("emulation-faults", 1, 8), ("dummy", 1, 9), ("bpf-output", 1, 10),
        ("cgroup-switches", 1, 11),
        ("L1-dcache-load-misses", 3, 0x10000), ("L1-dcache-loads", 3, 0), ("LLC-store-misses", 3, 0x10102),
        ("dTLB-loads", 3, 3), ("branch-load-misses", 3, 0x10005), ("iTLB-load-misses", 3, 0x10004),
        ("L1-icache-load-misses", 3, 0x10001), ("LLC-prefetches", 3, 0x202), ("node-loads", 3, 6),
        ("l1d-misses", 3, 0x10000), ("L1-dcache-misses-load", 3, 0x10000), ("dTLB-speculative-read-miss", 3, 0x10203),
        ("LLC", 3, 2), ("bpu", 3, 5),
        ("r003c", 4, 0x3C), ("r1a8", 4, 0x1A8), ("rc0", 4, 0xC0),
        ("sched:sched_switch", 2, 316),
    ],
)  # fmt: skip
def test_symbolic_names(root, text, type_, config):
    spec = one(text, root)
    assert (spec.attr.type, spec.attr.config) == (type_, config)
    assert spec.attr.exclude_guest == 1  # perf's event_attr_init default


@pytest.mark.parametrize("text", ["branch-stores", "iTLB-store-misses", "L1-icache-stores", "bpu-prefetches"])
def test_invalid_cache_ops_rejected(root, text):
    with pytest.raises(UnknownEventError) as info:
        parse_events(text, sysfs_root=root)
    assert "has no" in str(info.value)


def test_cache_names_are_case_sensitive_like_perf(root):
    with pytest.raises(UnknownEventError):
        parse_events("l1-dcache-load-miss", sysfs_root=root)


@pytest.mark.parametrize(
    "mods,bits",
    [
        ("u", dict(exclude_kernel=1, exclude_hv=1, exclude_guest=1)),
        ("k", dict(exclude_user=1, exclude_hv=1)),
        ("uk", dict(exclude_hv=1, exclude_guest=1)),
        ("h", dict(exclude_user=1, exclude_kernel=1)),
        ("G", dict(exclude_host=1)),
        ("H", dict(exclude_guest=1)),
        ("uG", dict(exclude_kernel=1, exclude_hv=1, exclude_host=1)),
        ("I", dict(exclude_idle=1)),
        ("D", dict(pinned=1)),
        ("e", dict(exclusive=1)),
        ("ppp", dict(precise_ip=3, exclude_guest=1)),
        ("pp", dict(precise_ip=2, exclude_guest=1)),
        ("P", dict()),
        ("S", dict()),
        ("W", dict()),
    ],
)
def test_modifier_bits_match_perf(root, mods, bits):
    attr = one(f"cpu-clock:{mods}", root).attr
    names = ["exclude_user", "exclude_kernel", "exclude_hv", "exclude_idle", "exclude_host", "exclude_guest",
             "precise_ip", "pinned", "exclusive"]  # fmt: skip
    assert {n: getattr(attr, n) for n in names if getattr(attr, n)} == bits


def test_bad_modifier_points_at_letter(root):
    with pytest.raises(EventParseError) as info:
        parse_events("cycles,cpu-clock:ux", sysfs_root=root)
    assert info.value.pos == len("cycles,cpu-clock:u")
    assert str(info.value).splitlines()[-1] == "  " + " " * info.value.pos + "^"


def test_too_precise(root):
    with pytest.raises(EventParseError):
        parse_events("cycles:pppp", sysfs_root=root)


def test_group_modifiers_start_from_member_bits(root):
    lead, member = parse_events("{cycles,instructions}:k", sysfs_root=root)
    # group modifiers keep the default exclude_guest (perf passes the evsel in)
    for spec in (lead, member):
        assert (spec.attr.exclude_user, spec.attr.exclude_hv, spec.attr.exclude_guest) == (1, 1, 1)
    assert lead.leader and not member.leader and lead.group == member.group == 0
    a0, a1 = stat_defaults(lead), stat_defaults(member)
    assert a0.read_format == a1.read_format == 0xF
    assert (a0.disabled, a0.enable_on_exec, a1.disabled, a1.enable_on_exec) == (1, 1, 0, 0)


def test_pinned_exclusive_only_on_own_leader(root):
    a, b = parse_events("{cycles:D,instructions:e}", sysfs_root=root)
    assert (a.attr.pinned, b.attr.exclusive) == (1, 1)  # each led itself when its modifier was applied
    c, d = parse_events("{cycles,instructions}:D", sysfs_root=root)
    assert (c.attr.pinned, d.attr.pinned) == (1, 0)


def test_lists_and_groups(root):
    specs = parse_events("cycles,{cpu-clock,task-clock},sched:sched_switch,{cs,faults}:u", sysfs_root=root)
    assert [s.group for s in specs] == [None, 0, 0, None, 1, 1]
    assert [s.pos for s in specs][:4] == [0, 8, 18, 30]


def test_tracepoint_glob_and_defaults(root):
    specs = parse_events("sched:sched_wak*", sysfs_root=root)
    assert [(s.name, s.attr.config) for s in specs] == [("sched:sched_wakeup", 320), ("sched:sched_waking", 321)]
    spec = specs[0]
    assert spec.attr.sample_period == 1 and spec.attr.sample_type == 0x400 | 0x4 | 0x80 | 0x100  # RAW|TIME|CPU|PERIOD
    attr = stat_defaults(spec)
    assert (attr.sample_period, attr.sample_type) == (0, 0x10000)


@pytest.mark.parametrize("text", ["sched:nothing", "nosys:foo", "sched:zz*"])
def test_unknown_tracepoint(root, text):
    with pytest.raises(UnknownEventError):
        parse_events(text, sysfs_root=root)


@pytest.mark.parametrize(
    "text,bp_type,addr,length",
    [
        ("mem:0x1000", 3, 0x1000, 4), ("mem:0x1000:rw", 3, 0x1000, 4), ("mem:0x1000/8:w", 2, 0x1000, 8),
        ("mem:0x1000:x", 4, 0x1000, 8), ("mem:4096/2:r", 1, 4096, 2),
    ],
)  # fmt: skip
def test_breakpoints(root, text, bp_type, addr, length):
    attr = one(text, root).attr
    assert (attr.type, attr.bp_type, attr.bp_addr, attr.bp_len) == (5, bp_type, addr, length)
    assert attr.config1 == addr and attr.config2 == length  # the unions


def test_breakpoint_with_modifier(root):
    attr = one("mem:0x2000:w:u", root).attr
    assert (attr.bp_type, attr.exclude_kernel) == (2, 1)


@pytest.mark.parametrize("text", ["mem:", "mem:0x1000/3", "mem:0x1000:rr"])
def test_bad_breakpoints(root, text):
    with pytest.raises(EventParseError):
        parse_events(text, sysfs_root=root)


def test_event_terms_on_symbolic(root):
    spec = one("cycles/period=1000,name=cyc/", root)
    assert spec.attr.sample_period == 1000 and spec.period_set and spec.name == "cyc"
    spec = one("instructions/freq=99,call-graph=dwarf,max-stack=12/u", root)
    assert (spec.attr.freq, spec.attr.sample_freq, spec.call_graph, spec.max_stack) == (1, 99, "dwarf", 12)
    assert spec.attr.exclude_kernel == 1
    assert stat_defaults(spec).sample_freq == 0  # perf stat ignores sampling terms


def test_software_pmu_terms(root):
    spec = one("software/config=3/", root)
    assert (spec.attr.type, spec.attr.config) == (1, 3)


@pytest.mark.parametrize(
    "text,pos",
    [("", 0), ("cycles,", 7), ("{cycles", 7), ("{cycles,{a}}", 8), ("nopmu/event=1/", 0), ("cycles foo", 6), ("bogus", 0),
     ("cycles,bogus:u", 7)],
)  # fmt: skip
def test_errors_have_columns(root, text, pos):
    with pytest.raises(EventParseError) as info:
        parse_events(text, sysfs_root=root)
    assert info.value.pos == pos
    assert info.value.text == text


def test_tool_event(root):
    spec = one("duration_time", root)
    assert (spec.attr.type, spec.attr.config, spec.extra["tool"]) == (1, 9, "duration_time")


@pytest.mark.parametrize(
    "text,suggestion",
    [("cylces", "'cycles'"), ("instrutions:u", "'instructions'"), ("sched:sched_swich", "'sched_switch'"),
     ("shced:sched_switch", "'sched'"), ("L1-dcache-lod-misses", "'L1-dcache-load-misses'")],
)  # fmt: skip
def test_unknown_names_suggest_close_ones(root, text, suggestion):
    with pytest.raises(UnknownEventError) as info:
        parse_events(text, sysfs_root=root)
    assert f"did you mean {suggestion}" in str(info.value)
