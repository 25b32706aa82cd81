"""pmuscope.numa on fixtures: metrics, numa_maps, nodes and hot plug, platform
tables, switch attribution on synthetic streams, and the node/process tables
of recorded two-node and four-node (CXL memory-only) machines, every value
checked against a hand computation (numbers in tests/data/numa/make_fixtures.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.numa import metrics
from pmuscope.numa.attribution import SwitchAttributor
from pmuscope.numa.model import NodeSet, parse_maps, parse_numa_maps, parse_stat, read_nodes, read_task
from pmuscope.numa.platforms import generic_platform, load_tables, platform_for, select_platform
from pmuscope.numa.snapshot import attach_memory, build_snapshot, read_proc_state, select_rows
from pmuscope.system import CpuIdentity, read_cpu_identity
from pmuscope.system.identity import Midr
from tests.unit.test_system import TOPO, unpacked

NUMA = Path(__file__).resolve().parent.parent / "data" / "numa"
T0 = 1_000_000_000_000
MS = 1_000_000


@pytest.fixture(scope="module")
def clx() -> str:
    return str(unpacked("intel-clx-2s-2node"))


@pytest.fixture(scope="module")
def spr() -> str:
    return str(unpacked("intel-spr-2s-cxl-4node"))


# -- metrics -----------------------------------------------------------------------


def test_metric_formulas_are_numatops():
    assert metrics.rma_lma(300, 1200) == 0.25
    assert metrics.cpi(3_000_000, 2_000_000) == 1.5
    assert metrics.rpi(500, 2_000_000) == 0.25  # per 1000 instructions
    assert metrics.lpi(4000, 2_000_000) == 2.0
    assert metrics.cpu_pct_from_ns(250 * MS, 1000 * MS) == 25.0
    assert metrics.cpu_pct_from_ns(1000 * MS, 1000 * MS, ncpus=4) == 25.0
    # numatop: clk / (interval * clk_per_sec * ncpus)
    assert metrics.cpu_pct_from_clk(2e9, 1.0, 2e9, 2) == 50.0
    assert metrics.imc_mb([2**20, 2**20]) == 128.0  # 64-byte lines
    assert metrics.upi_mb(2**20) == 8.0
    assert metrics.scaled(100, 10, 5) == 200


def test_metrics_are_none_not_zero_without_inputs():
    assert metrics.rma_lma(5, 0) is None
    assert metrics.cpi(None, 10) is None
    assert metrics.rpi(5, 0) is None
    assert metrics.cpu_pct_from_ns(5, 0) is None
    assert metrics.cpu_pct_from_jiffies(0, 0) is None
    assert metrics.scaled(0, 10, 0) is None
    assert metrics.derived({"clk": 10.0, "ir": 5.0}) == {"rma_lma": None, "cpi": 2.0, "rpi": None, "lpi": None}


# -- procfs / sysfs readers ---------------------------------------------------------


def test_numa_maps_sums_pages_times_page_size():
    text = (
        "7f00 default anon=3 N0=2 N1=1 kernelpagesize_kB=4\n"
        "7f10 bind:1 huge anon=2 N1=2 kernelpagesize_kB=2048\n"
        "7f20 default file=/lib/x.so mapped=1 N0=1\n"  # no page size: base pages
        "7f30 default\n"  # nothing resident
    )
    assert parse_numa_maps(text) == {0: 3 * 4096, 1: 4096 + 2 * 2048 * 1024}
    assert parse_numa_maps(text, base_page_kb=64)[0] == 2 * 4096 + 64 * 1024


def test_numa_maps_by_area_joins_maps_on_start_address():
    from pmuscope.numa.model import parse_numa_maps_by_area

    text = (NUMA / "two-node" / "t1" / "proc" / "100" / "numa_maps").read_text()
    by_area = parse_numa_maps_by_area(text)
    assert by_area[0x400000] == {0: 5 * 4096}
    assert by_area[0x7F1000000000] == {1: 10 * 2048 * 1024}
    assert sum(sum(v.values()) for v in by_area.values()) == sum(parse_numa_maps(text).values())


def test_stat_with_parentheses_in_comm():
    line = "42 (a (b) c) S 1 42 42 0 -1 0 7 0 3 0 1 2 0 0 20 0 5 0 1 2 3" + " 0" * 14 + " 9 0 0"
    st = parse_stat(line)
    assert (st["comm"], st["minflt"], st["majflt"], st["num_threads"], st["processor"]) == ("a (b) c", 7, 3, 5, 9)


def test_maps_areas():
    areas = parse_maps("00400000-00401000 r-xp 00000000 08:01 1234 /usr/bin/mgen\n7f00-7f10 rw-p 00000000 00:00 0\n")
    assert [(a.size, a.desc, a.perms) for a in areas] == [(0x1000, "/usr/bin/mgen", "r-xp"), (0x10, "[anon]", "rw-p")]


def test_process_task_sums_threads():
    root = str(NUMA / "two-node" / "t1")
    proc = read_task(root, 100)
    assert (proc.runtime_ns, proc.migrations, proc.minflt, proc.majflt, proc.nthreads) == (2_400_000_000, 9, 1300, 3, 2)
    assert read_task(root, 100, 101).runtime_ns == 800_000_000
    assert read_task(root, 99999) is None


def test_nodes_two_node(clx):
    nodes = read_nodes(clx)
    assert [n.id for n in nodes] == [0, 1]
    assert nodes[0].cpus == tuple(range(0, 20)) + tuple(range(40, 60))
    assert nodes[0].distances == {0: 10, 1: 21}
    assert nodes[0].mem_total_kb == 196608000 and nodes[0].mem_used_kb == 6608000
    assert not nodes[0].memory_only


def test_nodes_four_node_memory_only(spr):
    nodes = read_nodes(spr)
    assert [n.id for n in nodes] == [0, 1, 2, 3]
    assert [n.memory_only for n in nodes] == [False, False, True, True]
    assert nodes[2].cpus == () and nodes[2].mem_total_kb > 0
    assert nodes[2].distances == {0: 14, 1: 24, 2: 10, 3: 26}


def test_hot_add_and_remove(clx, tmp_path):
    root = tmp_path / "m"
    shutil.copytree(clx, root, symlinks=True)
    ns = NodeSet(str(root))
    node_dir = root / "sys/devices/system/node"
    (node_dir / "node1/cpulist").write_text("20-39,60-78\n")  # cpu79 offlined
    (node_dir / "node2").mkdir()
    (node_dir / "node2/cpulist").write_text("80-81\n")  # a hot-added node
    (node_dir / "node2/distance").write_text("21 21 10\n")
    (node_dir / "online").write_text("0-2\n")
    change = ns.refresh()
    assert change.nodes_added == [2] and change.nodes_removed == []
    assert change.cpus_added == [80, 81] and change.cpus_removed == [79]
    assert ns.node_of_cpu()[80] == 2
    (node_dir / "online").write_text("0\n")
    change = ns.refresh()
    assert change.nodes_removed == [1, 2] and 20 in change.cpus_removed
    assert not ns.refresh()


# -- platform tables ------------------------------------------------------------------


def test_tables_are_package_data_and_complete():
    tables = load_tables()
    assert {t["vendor"] for t in tables} == {"GenuineIntel", "AuthenticAMD", "Arm", "IBM"}
    names = {row["name"] for t in tables for row in t["platforms"]}
    for need in ("nhm-ep", "wsm-ex", "snb-ep", "bdx", "skx", "icx", "spr", "srf", "zen", "zen3", "zen4", "zen5",
                 "neoverse-n1", "neoverse-v2", "power8", "power9", "power10"):
        assert need in names


@pytest.mark.parametrize("tree, name", [
    ("intel-clx-2s-2node", "skx"),
    ("intel-spr-2s-cxl-4node", "spr"),
    ("amd-genoa-1s-nps2-2node", "zen4"),
    ("arm-graviton3-neoverse-v1", "neoverse-v1"),
])
def test_platform_by_identity(tree, name):
    assert platform_for(read_cpu_identity(str(unpacked(tree)))).name == name


def test_platform_this_machine_capture():
    ident = read_cpu_identity(str(TOPO / "kvm-amd-zen5-1node"))
    p = platform_for(ident)
    assert p.name == "zen5"
    assert p.events["rma"][0].config == 0x4044 and p.events["lma"][0].config == 0x0844
    assert p.events["clk"][0].config == 0x100000120


def _intel(model):
    return CpuIdentity(arch="x86_64", vendor="GenuineIntel", family=6, model=model, stepping=1)


def test_intel_rows_match_numatop():
    skx = platform_for(_intel(85))
    assert (skx.events["rma"][0].config, skx.events["rma"][0].config1) == (0x01B7, 0x638000001)
    assert (skx.events["lma"][0].config, skx.events["lma"][0].config1) == (0x01BB, 0x1F84000001)
    assert skx.events["clk"][0].attr_fields() == {"type": 0, "config": 9}  # ref-cycles
    gnr = platform_for(_intel(173))
    assert gnr.name == "spr" and gnr.events["rma"][0].config == 0x012A
    srf = platform_for(_intel(175))
    assert srf.events["lma"][0].attr_fields() == {"type": 4, "config": 0x02B7, "config1": 0x184000001}
    assert platform_for(_intel(62)).name == "snb-ep"
    nhm = platform_for(_intel(26))
    assert "lma" not in nhm.events and "INVALID_CODE_UMASK" in nhm.missing["lma"]
    zen3 = platform_for(CpuIdentity(arch="x86_64", vendor="AuthenticAMD", family=25, model=0x21, stepping=0))
    assert zen3.name == "zen3" and zen3.events["clk"][0].config == 0  # cycles, not the P0 clock


def test_power_sums_two_rma_events():
    p9 = platform_for(CpuIdentity(arch="unknown", vendor="unknown", model_name="POWER9 (raw), altivec supported"))
    assert p9.name == "power9"
    assert [e.config for e in p9.events["rma"]] == [0x4C04C, 0x3C04A]
    assert [e.config for e in p9.events["lma"]] == [0x2C048]
    p10 = platform_for(CpuIdentity(arch="unknown", vendor="unknown", model_name="POWER10 (architected)"))
    assert p10.events["rma"][1].config == 0x0D4040000003C040


def test_arm_names_missing_lma():
    v2 = select_platform(CpuIdentity(arch="aarch64", vendor="Arm", midr=Midr(0x410FD4F1)))
    assert v2.name == "neoverse-v2" and v2.events["rma"][0].config == 0x31
    assert "no local-DRAM event" in v2.missing["lma"]


def test_unknown_cpu_gets_generic_events_and_names_what_is_missing():
    alder = _intel(151)
    assert select_platform(alder) is None
    g = platform_for(alder)
    assert g.generic and g.events["ir"][0].attr_fields() == {"type": 0, "config": 1}
    # RMA = node-load-misses, LMA = node-loads - node-load-misses (PERF_TYPE_HW_CACHE: NODE | READ<<8 | result<<16)
    assert g.events["rma"][0].attr_fields() == {"type": 3, "config": 0x10006}
    assert [(e.config, e.sign) for e in g.events["lma"]] == [(0x6, 1), (0x10006, -1)]
    assert "imc_mb" in g.missing and "in the tables for GenuineIntel" in g.missing["imc_mb"]
    assert generic_platform(None).vendor == "unknown"


# -- attribution on synthetic streams ------------------------------------------------------


def _att():
    a = SwitchAttributor(("time_ns", "clk:0", "ir:1"))
    a.start(0, 0, [0, 0, 0])
    return a


def _row(att, pid, tid, cpu=0):
    m = (att.pid == pid) & (att.tid == tid) & (att.cpu == cpu)
    return att.values[m].sum(axis=0).tolist() if m.any() else None


def test_deltas_end_exactly_at_switches():
    a = _att()
    # thread 10 runs 0..100 (clk 1000), thread 20 runs 100..130 (clk 90), 10 again 130..200 (clk 700)
    a.feed(0, [1, 2, 3], [1, 2, 1], [10, 20, 10], [[100, 1000, 500], [130, 1090, 530], [200, 1790, 880]])
    a.boundary(0, 3, [250, 2290, 1130], running=(2, 20))
    att = a.take()
    assert _row(att, 1, 10) == [170, 1700, 850]
    assert _row(att, 2, 20) == [80, 590, 280]
    assert att.samples == 3 and att.gaps == 0
    assert att.intervals_ns == {0: 250}
    # a split at the switch, not proportional: numatop would charge 0..130 to thread 20 (the later sample)


def test_unknown_tail_is_carried_to_the_next_switch_out():
    a = _att()
    a.feed(0, [1], [1], [10], [[100, 1000, 10]])
    a.boundary(0, 1, [150, 1400, 14], running=None)
    first = a.take()
    assert _row(first, 1, 10) == [100, 1000, 10] and _row(first, 3, 30) is None
    a.feed(0, [2], [3], [30], [[180, 1700, 17]])  # thread 30 ran 100..180 across the boundary
    a.boundary(0, 2, [200, 1800, 18], running=(1, 10))
    second = a.take()
    assert _row(second, 3, 30) == [80, 700, 7]
    assert _row(second, 1, 10) == [20, 100, 1]


def test_lost_samples_go_to_unattributed_never_to_a_guess():
    a = _att()
    a.feed(0, [1, 4, 5], [1, 2, 3], [10, 20, 30], [[10, 100, 1], [40, 400, 4], [50, 500, 5]])
    a.boundary(0, 7, [70, 700, 7], running=(1, 10))  # count 6..7 never arrived
    att = a.take()
    assert _row(att, -1, -1) == [50, 500, 5]  # 10..40 (gap) + 50..70 (tail after lost samples)
    assert _row(att, 2, 20) is None
    assert _row(att, 3, 30) == [10, 100, 1]
    assert att.gaps == 2


def test_refed_samples_are_not_counted_twice_and_negative_deltas_dropped():
    a = _att()
    a.feed(0, [1, 2], [1, 1], [10, 10], [[10, 100, 1], [20, 50, 2]])  # clk went backwards (reset)
    a.feed(0, [1, 2], [1, 1], [10, 10], [[10, 100, 1], [20, 50, 2]])
    att = a.take()
    assert _row(att, 1, 10) == [20, 100, 2]


def test_many_cpus_vectorized_matches_a_loop():
    rng = np.random.default_rng(7)
    a = SwitchAttributor(("time_ns", "clk:0"))
    expect: dict[tuple[int, int], float] = {}
    for cpu in range(4):
        a.start(cpu, 0, [0, 0])
        k = 500
        tids = rng.integers(1, 6, size=k)
        clk = np.cumsum(rng.integers(0, 1000, size=k)).astype(float)
        t = np.cumsum(rng.integers(1, 50, size=k)).astype(float)
        a.feed(cpu, np.arange(1, k + 1), tids, tids, np.column_stack([t, clk]))
        prev = 0.0
        for tid, c in zip(tids.tolist(), clk.tolist()):
            expect[(tid, cpu)] = expect.get((tid, cpu), 0.0) + c - prev
            prev = c
    att = a.take()
    for (tid, cpu), v in expect.items():
        assert _row(att, tid, tid, cpu)[1] == v


# -- the tables of recorded machines ---------------------------------------------------------


def _recorded_attribution():
    rec = json.loads((NUMA / "two-node" / "counts.json").read_text())
    a = SwitchAttributor(tuple(rec["columns"]))
    for cpu, d in rec["cpus"].items():
        cpu = int(cpu)
        a.start(cpu, d["start"][0], d["start"][1:])
        s = np.array(d["samples"], dtype=float)
        a.feed(cpu, s[:, 0], s[:, 1], s[:, 2], s[:, 3:])
        a.boundary(cpu, d["read"][0], d["read"][1:], tuple(d["running"]) if d["running"] else None)
    return a.take()


@pytest.fixture(scope="module")
def two_node(clx):
    nodes = read_nodes(clx)
    before = read_proc_state(str(NUMA / "two-node" / "t0"), threads=True)
    after = read_proc_state(str(NUMA / "two-node" / "t1"), threads=True)
    snap = build_snapshot(nodes, before, after, attribution=_recorded_attribution(), unavailable={
        "imc_mb": "no uncore_imc_N PMU in this fixture", "upi_mb": "no uncore_upi_N PMU in this fixture"}, platform="skx")
    attach_memory(snap.processes, nodes, str(NUMA / "two-node" / "t1"))
    return snap


def test_two_node_node_rows(two_node):
    n0, n1 = two_node.node(0), two_node.node(1)
    assert two_node.interval_s == 1.0
    # /proc/stat: cpu0 busy 70 of 100 jiffies, the other 39 node-0 CPUs idle; cpu20 busy 25 of 100
    assert n0["cpu_pct"] == pytest.approx(100 * 70 / 4000)
    assert n1["cpu_pct"] == pytest.approx(100 * 25 / 4000)
    # cpu0 charged everything up to its read: clk 2.65M, ir 2.05M, rma 1700, lma 5300
    assert (n0["clk"], n0["ir"], n0["rma"], n0["lma"]) == (2_650_000, 2_050_000, 1700, 5300)
    assert n0["rma_lma"] == pytest.approx(1700 / 5300)
    assert n0["cpi"] == pytest.approx(2.65 / 2.05)
    assert n0["rpi"] == pytest.approx(1700 * 1000 / 2_050_000)
    assert n0["lpi"] == pytest.approx(5300 * 1000 / 2_050_000)
    # cpu20's tail (who ran is not known yet) is carried, not charged: only the two samples count
    assert (n1["clk"], n1["ir"], n1["rma"], n1["lma"]) == (750_000, 400_000, 900, 300)
    assert (n1["rma_lma"], n1["cpi"], n1["rpi"], n1["lpi"]) == (3.0, 1.875, 2.25, 0.75)
    assert n0["mem_total_kb"] == 196608000 and n0["distances"] == {"0": 10, "1": 21}
    assert n0["imc_mb_s"] is None and "uncore_imc_N" in two_node.unavailable["imc_mb_s"]


def test_two_node_process_rows(two_node):
    p = two_node.process(100)
    assert p["comm"] == "mgen" and p["nthreads"] == 2
    assert p["cpu_pct"] == pytest.approx(90.0)  # schedstat: +600 ms +300 ms in 1 s
    assert (p["migrations"], p["minflt"], p["majflt"]) == (3, 300, 1)
    assert (p["clk"], p["ir"], p["rma"], p["lma"]) == (2_550_000, 1_900_000, 2100, 5100)
    assert p["cpi"] == pytest.approx(2.55 / 1.9)
    assert p["rma_lma"] == pytest.approx(2100 / 5100)
    assert p["rpi"] == pytest.approx(2100 * 1000 / 1_900_000)
    assert p["lpi"] == pytest.approx(5100 * 1000 / 1_900_000)
    by = {c["node"]: c for c in p["by_node"]}
    assert by[0]["cpu_pct"] == pytest.approx(65.0) and by[1]["cpu_pct"] == pytest.approx(25.0)
    assert (by[0]["clk"], by[0]["rma"], by[0]["lma"]) == (1_800_000, 1200, 4800)
    assert (by[1]["clk"], by[1]["rma"], by[1]["lma"]) == (750_000, 900, 300)
    # numa_maps: N0 60+5 4K pages; N1 40 4K pages + 10 2M pages
    assert p["mem_kb_by_node"] == {"0": 260, "1": 160 + 20480}
    assert p["mem_kb"] == 260 + 160 + 20480
    db = two_node.process(200)
    assert db["cpu_pct"] == pytest.approx(25.0)
    assert (db["cpi"], db["rma_lma"], db["rpi"], db["lpi"]) == (1.5, 1.0, 1.0, 1.0)
    assert db["mem_kb_by_node"] == {"0": 1024, "1": 1048576}  # one 1 GiB page on node 1


def test_two_node_threads(two_node):
    rows = {(t["pid"], t["tid"]): t for t in two_node.threads}
    assert rows[(100, 100)]["cpu_pct"] == pytest.approx(60.0)
    assert rows[(100, 101)]["cpu_pct"] == pytest.approx(30.0)
    t101 = rows[(100, 101)]
    assert (t101["clk"], t101["ir"], t101["rma"], t101["lma"]) == (750_000, 600_000, 500, 900)
    assert two_node.attribution == {"method": "switch-sampling", "samples": 5, "gaps": 0, "rebuilt": 0}


def test_select_sort_top_and_node_filter(two_node, clx):
    rows = two_node.processes
    assert [r["pid"] for r in select_rows(rows, sort="cpu_pct")] == [100, 200]
    assert [r["pid"] for r in select_rows(rows, sort="cpi")] == [200, 100]
    assert [r["pid"] for r in select_rows(rows, sort="mem_kb", top=1)] == [200]
    assert [r["pid"] for r in select_rows(rows, sort="comm", descending=False)] == [200, 100]
    assert [r["pid"] for r in select_rows(rows, node=1)] == [100]  # only mgen ran on node 1's CPUs
    with pytest.raises(PmuscopeError, match="cannot sort by 'bogus'"):
        select_rows(rows, sort="bogus")


@pytest.fixture(scope="module")
def four_node(spr):
    nodes = read_nodes(spr)
    before = read_proc_state(str(NUMA / "four-node-cxl" / "t0"))
    after = read_proc_state(str(NUMA / "four-node-cxl" / "t1"))
    snap = build_snapshot(nodes, before, after, attribution=None,
                          unavailable={"clk": "cycles: no hardware PMU (ENOENT)", "ir": "instructions: no hardware PMU (ENOENT)",
                                       "rma": "no hardware PMU", "lma": "no hardware PMU",
                                       "imc_mb": "no uncore", "upi_mb": "no uncore"})
    attach_memory(snap.processes, nodes, str(NUMA / "four-node-cxl" / "t1"))
    return nodes, snap


def test_four_node_without_pmu_or_side_band(four_node):
    nodes, snap = four_node
    assert snap.interval_s == 2.0
    p = snap.process(300)
    assert p["cpu_pct"] == pytest.approx(25.0)  # +500 ms in 2 s
    assert (p["minflt"], p["migrations"]) == (500, 1)
    for col in ("rma", "lma", "rma_lma", "cpi", "rpi", "lpi", "clk", "ir"):
        assert p[col] is None, col  # never a zero
        assert col in snap.unavailable
    assert "needs rma and lma" in snap.unavailable["rma_lma"]
    assert all(c["cpu_pct"] is None for c in p["by_node"]) and "cpu_pct_by_node" in snap.unavailable
    assert p["mem_kb_by_node"] == {"0": 400, "1": 0, "2": 4000, "3": 200}
    rows = {n["node"]: n for n in snap.nodes}
    assert rows[2]["memory_only"] and rows[2]["cpu_pct"] is None and rows[2]["cpus"] == []
    assert rows[0]["cpu_pct"] == 0.0
    assert rows[1]["cpu_pct"] == pytest.approx(100 * 200 / (104 * 200))  # cpu52 busy the whole 2 s
    assert rows[2]["mem_total_kb"] > 0
    # the per-node filter on a memory-only node selects by placement
    assert [r["pid"] for r in select_rows(snap.processes, node=2, nodes=nodes)] == [300]
    assert [r["pid"] for r in select_rows(snap.processes, node=1, nodes=nodes)] == [301]


def test_snapshot_json_contract(two_node, four_node):
    for snap in (two_node, four_node[1]):
        d = json.loads(json.dumps(snap.to_dict()))
        for n in d["nodes"]:
            for key in ("node", "cpus", "cpu_pct", "mem_total_kb", "mem_free_kb", "rma", "lma", "cpi"):
                assert key in n
        for p in d["processes"]:
            for key in ("pid", "comm", "cpu_pct", "rma", "lma", "rma_lma", "cpi", "mem_kb_by_node"):
                assert key in p
        assert isinstance(d["unavailable"], dict)


def test_interval_must_advance(clx):
    state = read_proc_state(str(NUMA / "two-node" / "t0"))
    with pytest.raises(PmuscopeError, match="not later"):
        build_snapshot(read_nodes(clx), state, state)


def test_sampler_degrades_when_cpu_wide_events_are_refused(clx, monkeypatch):
    from pmuscope.errors import PermissionDeniedError
    from pmuscope.numa import collector as collector_mod
    from pmuscope.numa.snapshot import NumaSampler

    def refuse(self):
        raise PermissionDeniedError("perf_event_open(cpu=0): EACCES: CPU-wide events need CAP_PERFMON or perf_event_paranoid <= 0")

    monkeypatch.setattr(collector_mod.SwitchCollector, "open", refuse)
    with NumaSampler(clx, pmu=True, switches=True) as s:
        assert s.platform.name == "skx" and s.collector is None
        snap = s.refresh()
    assert "CAP_PERFMON" in snap.unavailable["cpu_pct_by_node"]
    assert "CAP_PERFMON" in snap.unavailable["cpi"]  # derived column names its events' reason
    assert [n["node"] for n in snap.nodes] == [0, 1]
    assert all(n["rma"] is None and n["cpi"] is None for n in snap.nodes)
    assert snap.attribution == {"method": None}


def test_signed_events_are_subtracted(clx):
    # generic LMA = node-loads (lma:2) - node-load-misses (lma:3)
    a = SwitchAttributor(("time_ns", "rma:0", "lma:1", "lma:2"))
    a.start(0, 0, [0, 0, 0, 0])
    a.feed(0, [1], [5], [5], [[100, 30, 1000, 30]])
    a.boundary(0, 1, [100, 30, 1000, 30], running=(5, 5))
    nodes = read_nodes(clx)
    st0 = read_proc_state(str(NUMA / "two-node" / "t0"))
    st1 = read_proc_state(str(NUMA / "two-node" / "t1"))
    snap = build_snapshot(nodes, st0, st1, attribution=a.take(), member_signs={"lma:2": -1},
                          unavailable={"clk": "x", "ir": "y"})
    n0 = snap.node(0)
    assert (n0["rma"], n0["lma"], n0["rma_lma"]) == (30, 970, 30 / 970)
    assert n0["cpi"] is None and "needs clk and ir" in snap.unavailable["cpi"]


def test_uncore_bandwidth_per_node(tmp_path, monkeypatch):
    """Two IMCs on node 0 and one UPI link on node 1 (sysfs as on a 2-socket
    Xeon), with fake counter reads: MB = Σ CAS × 64 / 2^20, Σ flits × 8 / 2^20,
    scaled by enabled/running, per interval."""
    import struct as _struct

    from pmuscope.numa import collector as collector_mod
    from pmuscope.numa.collector import UncoreCounters

    base = tmp_path / "sys/bus/event_source/devices"
    for name, typ, mask in (("uncore_imc_0", 30, "0"), ("uncore_imc_1", 31, "0"), ("uncore_upi_0", 40, "20")):
        (base / name).mkdir(parents=True)
        (base / name / "type").write_text(f"{typ}\n")
        (base / name / "cpumask").write_text(f"{mask}\n")
    reads = {30: [(0, 0, 0), (2**20, 10, 10)], 31: [(0, 0, 0), (2**20, 10, 5)], 40: [(0, 0, 0), (2**20, 10, 10)]}
    opened = []

    class FakeFd:
        _next = 100

        def __init__(self, attr, pid, cpu, event=None):
            self.attr, self.cpu = attr, cpu
            self.fd = FakeFd._next
            FakeFd._next += 1
            self.queue = list(reads[attr.type])
            opened.append(self)

        def read(self, n):
            return _struct.pack("<QQQ", *self.queue.pop(0))

        def close(self):
            pass

    monkeypatch.setattr(collector_mod, "PerfEventFd", FakeFd)
    skx = platform_for(_intel(85))
    unc = UncoreCounters(skx, {0: 0, 20: 1}, str(tmp_path)).open()
    assert {(f.attr.type, f.attr.config, f.cpu) for f in opened} == {(30, 0xFF04, 0), (31, 0xFF04, 0), (40, 0x0F02, 20)}
    assert unc.read() == {"imc_mb": {0: 0.0}, "upi_mb": {1: 0.0}}
    mb = unc.read()
    assert mb["imc_mb"] == {0: 64.0 + 128.0}  # imc_1 ran half the time: scaled x2
    assert mb["upi_mb"] == {1: 8.0}
    assert not unc.unavailable
    # a platform without uncore tables names why instead
    zen = UncoreCounters(platform_for(CpuIdentity(arch="x86_64", vendor="AuthenticAMD", family=25, model=0x11, stepping=1)), {}, str(tmp_path)).open()
    assert "FEATURES: IMC N" in zen.unavailable["imc_mb"]
    # no such PMU under this root
    none = UncoreCounters(skx, {}, str(tmp_path / "empty")).open()
    assert "no uncore_imc_N PMU here" in none.unavailable["imc_mb"]


def test_node_bandwidth_columns(spr):
    nodes = read_nodes(spr)
    before = read_proc_state(str(NUMA / "four-node-cxl" / "t0"))
    after = read_proc_state(str(NUMA / "four-node-cxl" / "t1"))
    snap = build_snapshot(nodes, before, after, uncore={"imc_mb": {0: 192.0, 1: 64.0}, "upi_mb": {0: 8.0, 1: 16.0}})
    rows = {n["node"]: n for n in snap.nodes}
    assert (rows[0]["imc_mb_s"], rows[1]["imc_mb_s"]) == (96.0, 32.0)  # over 2 s
    assert (rows[0]["upi_mb_s"], rows[1]["upi_mb_s"]) == (4.0, 8.0)
    assert rows[2]["imc_mb_s"] is None and "this node" in snap.unavailable["imc_mb_s[node 2]"]
    assert "imc_mb_s" not in snap.unavailable


# -- memory latency (numatop WIN6/WIN7) ------------------------------------------------------


def test_memory_samples_filter_like_numatop():
    from pmuscope.numa.latency import keep_memory_samples

    addr = np.array([0x1000, 0, 0x2000, 0x3000, 0x4000], dtype=np.uint64)
    # mem_op: LOAD (0x02), LOAD, NA (0x01), EXEC (0x10), STORE (0x04)
    src = np.array([0x02, 0x02, 0x01, 0x10, 0x04], dtype=np.uint64)
    assert keep_memory_samples(addr, src).tolist() == [True, False, False, False, True]


def test_area_and_node_latency_tables():
    from pmuscope.numa.latency import area_stats, node_stats

    areas = parse_maps((NUMA / "two-node" / "t1" / "proc" / "100" / "maps").read_text())
    addr = np.array([0x400010, 0x400020, 0x400ff8, 0x7F0000000100, 0x10], dtype=np.uint64)  # the last is in no area
    weight = np.array([100, 200, 300, 1000, 7], dtype=np.float64)
    rows = area_stats(areas, addr, weight, ns_per_cycle=0.5)
    text, anon = rows
    assert (text["samples"], text["access_pct"], text["lat_ns"]) == (3, 75.0, 100.0)  # mean 200 cycles × 0.5 ns
    assert (anon["samples"], anon["access_pct"], anon["lat_ns"]) == (1, 25.0, 500.0)
    assert area_stats(areas, addr[:0], weight[:0], 0.5)[0]["access_pct"] is None
    assert area_stats([], addr, weight, 0.5) == []  # no maps: a kernel thread
    nodes = node_stats(np.array([0, 0, 1, -2]), np.array([100.0, 300.0, 1000.0, 5.0]), 0.5)
    assert nodes[0]["access_pct"] == pytest.approx(200 / 3) and nodes[0]["lat_ns"] == 100.0
    assert nodes[1] == {"access_pct": pytest.approx(100 / 3), "lat_ns": 500.0}
    assert -2 not in nodes  # -ENOENT: not resident


def test_clock_for_latency_ns(clx):
    from pmuscope.numa.latency import cycles_per_second

    model = next(line for line in Path(clx, "proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    ghz = float(model.split("@")[1].strip().rstrip("GHz"))
    assert cycles_per_second(clx) == ghz * 1e9  # numatop takes the model name's GHz first


def test_load_latency_event_per_platform(tmp_path):
    from pmuscope.numa.latency import ll_attr

    attr, name = ll_attr(platform_for(_intel(85)))
    assert (attr.type, attr.config, attr.config1, attr.precise_ip, attr.sample_period) == (4, 0x01CD, 128, 1, 1000)
    srf, _ = ll_attr(platform_for(_intel(175)))
    assert srf.config == 0x05D0
    zen = platform_for(CpuIdentity(arch="x86_64", vendor="AuthenticAMD", family=25, model=0x11, stepping=1))
    with pytest.raises(PmuscopeError, match="no ibs_op PMU here"):
        ll_attr(zen, str(tmp_path))
    (tmp_path / "sys/bus/event_source/devices/ibs_op").mkdir(parents=True)
    (tmp_path / "sys/bus/event_source/devices/ibs_op/type").write_text("11\n")
    ibs, name = ll_attr(zen, str(tmp_path))
    assert (ibs.type, ibs.sample_period, name) == (11, 1280, "IBS op")
    with pytest.raises(PmuscopeError, match="no load-latency event for power9"):
        ll_attr(platform_for(CpuIdentity(arch="unknown", vendor="unknown", model_name="POWER9")))


def test_gap_rebuilt_from_switch_records():
    a = SwitchAttributor(("time_ns", "clk:0"))
    a.start(0, 0, [0, 0])
    # who runs from when (switch-out records name the next task, switch-in records the arriving one)
    a.add_switches(0, [101, 102, 200, 201], [2, 2, 3, 3], [20, 20, 30, 30])
    # sample 2 (thread 20's switch-out) is missing: the count jumps 1 -> 3
    a.feed(0, [1, 3], [1, 3], [10, 30], [[100, 1000], [300, 3000]])
    a.boundary(0, 3, [300, 3000], running=(3, 30))
    att = a.take()
    assert _row(att, 1, 10) == [101, 1010]  # 0..100 sampled, 100..101 until its switch record
    assert _row(att, 2, 20) == [99, 990]  # 101..200: time exact, clk 2000 split by time
    assert _row(att, 3, 30) == [100, 1000]
    assert _row(att, -1, -1) in (None, [0, 0])
    assert (att.gaps, att.rebuilt) == (1, 1)


def test_gap_without_switch_records_stays_unattributed():
    a = _att()
    a.add_switches(0, [5], [9], [90])  # before the gap: says nothing about it
    a.feed(0, [1, 3], [1, 3], [10, 30], [[10, 100, 1], [30, 300, 3]])
    att = a.take()
    assert _row(att, -1, -1) == [20, 200, 2] and att.rebuilt == 0
