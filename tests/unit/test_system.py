"""pmuscope.system on captured and synthesized sysfs/procfs trees (tests/data/topology)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
from pathlib import Path

import pytest

from pmuscope.cli.main import main
from pmuscope.system import (
    Midr,
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
    read_caches,
    read_cpu_identity,
    read_cpu_lists,
    read_numa_nodes,
    read_topology,
)
from pmuscope.system._fs import parse_size

TOPO = Path(__file__).resolve().parent.parent / "data" / "topology"
ARCHIVES = ("amd-genoa-1s-nps2-2node", "intel-clx-2s-2node", "intel-spr-2s-cxl-4node", "arm-graviton3-neoverse-v1")


def unpacked(name: str) -> Path:
    """The synthesized tree ``name``, unpacked once per archive content into the
    temp directory and reused (read-only use; tests that modify copy it)."""
    archive = TOPO / f"{name}.tar.gz"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    dest = Path(tempfile.gettempdir()) / f"pmuscope-topology-{os.getuid()}-{digest}"
    if not (dest / name).is_dir():
        staging = Path(tempfile.mkdtemp(prefix="pmuscope-topology-"))
        with tarfile.open(archive) as tar:
            tar.extractall(staging)
        dest.mkdir(exist_ok=True)
        try:
            os.rename(staging / name, dest / name)  # atomic: a parallel run sees all or nothing
        except OSError:
            pass  # another run got there first
    return dest / name


@pytest.fixture(scope="module")
def roots() -> dict[str, str]:
    """Every fixture tree by name: the synthesized ones unpacked from their archives."""
    out = {"kvm-amd-zen5-1node": str(TOPO / "kvm-amd-zen5-1node")}
    for name in ARCHIVES:
        out[name] = str(unpacked(name))
    return out


# -- formats ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, cpus",
    [
        ("0-3", [0, 1, 2, 3]),
        ("0-1,4,8-9", [0, 1, 4, 8, 9]),
        ("7", [7]),
        ("", []),
        ("\n", []),
        ("0-15:2/4", [0, 1, 4, 5, 8, 9, 12, 13]),
        ("0-1023:2/256", [0, 1, 256, 257, 512, 513, 768, 769]),
        ("3-9:1/3", [3, 6, 9]),
        ("0-51,104-155", list(range(52)) + list(range(104, 156))),
    ],
)
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "0-7:3/2", "0-7:1/0", "1--2"])
def test_parse_cpulist_rejects_garbage(bad):
    with pytest.raises(ValueError, match="cpulist"):
        parse_cpulist(bad)


def test_format_cpulist_roundtrip():
    cpus = [0, 1, 2, 5, 7, 8, 9, 200]
    assert format_cpulist(cpus) == "0-2,5,7-9,200"
    assert parse_cpulist(format_cpulist(cpus)) == cpus
    assert format_cpulist([]) == ""


def test_parse_cpumask():
    assert parse_cpumask("3") == [0, 1]
    assert parse_cpumask("0000,00000000,00000100,00000000,00000000,00000001") == [0, 104]
    assert parse_cpumask("80000000,00000000") == [63]
    assert parse_cpumask("") == []


@pytest.mark.parametrize("text, size", [("32K", 32768), ("1024K", 1 << 20), ("2M", 2 << 20), ("4096", 4096), ("", None), ("xK", None)])
def test_parse_size(text, size):
    assert parse_size(text) == size


# -- MIDR -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, name, part, variant, revision",
    [
        (0x413FD0C1, "Neoverse N1", 0xD0C, 3, 1),  # Ampere Altra / Graviton2
        (0x411FD401, "Neoverse V1", 0xD40, 1, 1),  # Graviton3
        (0x410FD4F1, "Neoverse V2", 0xD4F, 0, 1),  # Grace / Graviton4
        (0x410FD493, "Neoverse N2", 0xD49, 0, 3),
        (0x481FD010, "TaiShan v110 (Kunpeng 920)", 0xD01, 1, 0),
    ],
)
def test_midr_decode(value, name, part, variant, revision):
    m = Midr(value)
    assert m.part == part and m.variant == variant and m.revision == revision
    assert m.architecture == 0xF
    assert m.part_name == name
    assert m.name.endswith(f"{name} r{variant}p{revision}")
    assert m.perf_cpuid == f"0x{value:016x}"
    assert int(m.perf_cpuid_masked, 16) == value & ~0x00F0000F


def test_midr_unknown_part_is_named_by_number():
    m = Midr(0xC00FAC31 ^ 0x00000AA0)  # Ampere implementer, a part not in the table
    assert m.implementer_name == "Ampere"
    assert m.part_name is None
    assert f"part {m.part:#05x}" in m.name


# -- identity ---------------------------------------------------------------------


def test_identity_this_machine_capture(roots):
    ident = read_cpu_identity(roots["kvm-amd-zen5-1node"])
    assert (ident.vendor, ident.family, ident.model, ident.stepping) == ("AuthenticAMD", 26, 2, 1)
    # what `perf stat -v` printed on this machine: "Using CPUID AuthenticAMD-26-2-1"
    assert ident.perf_cpuid == "AuthenticAMD-26-2-1"
    assert ident.hypervisor is True
    # family 0x1A = base 0xF + extended 0xB: EAX = ext_family<<20 | base_family<<8 | model<<4 | stepping
    assert ident.signature == 0x00B00F21


def test_identity_intel(roots):
    clx = read_cpu_identity(roots["intel-clx-2s-2node"])
    assert clx.perf_cpuid == "GenuineIntel-6-55-7"
    assert clx.perf_header_cpuid == "GenuineIntel,6,85,7"
    assert clx.signature == 0x50657  # Cascade Lake stepping 7
    assert clx.hypervisor is False
    spr = read_cpu_identity(roots["intel-spr-2s-cxl-4node"])
    assert spr.perf_cpuid == "GenuineIntel-6-8F-8"
    assert spr.signature == 0x806F8
    assert "amx_tile" in spr.flags


def test_identity_arm(roots):
    ident = read_cpu_identity(roots["arm-graviton3-neoverse-v1"])
    assert ident.arch == "aarch64"
    assert ident.midr == Midr(0x411FD401)
    assert ident.vendor == "Arm" and ident.model_name == "Neoverse V1"
    assert ident.perf_cpuid == "0x00000000411fd401"
    assert ident.family is None and ident.signature is None
    assert "sve" in ident.flags


def test_identity_arm_from_cpuinfo_only(tmp_path):
    """Without regs/identification (older kernels) the MIDR is rebuilt from /proc/cpuinfo."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n"
    )
    ident = read_cpu_identity(str(tmp_path))
    assert ident.midr == Midr(0x413FD0C1)
    assert ident.midr.part_name == "Neoverse N1"


def test_identity_amd_extended_family(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
        "stepping\t: 1\nflags\t\t: fpu vme\n\n"
    )
    ident = read_cpu_identity(str(tmp_path))
    assert ident.perf_cpuid == "AuthenticAMD-25-11-1"  # Genoa, as perf prints it
    assert ident.signature == 0xA10F11


# mapfile.csv keys as they appear in tools/perf/pmu-events/arch/{x86,arm64}/mapfile.csv
@pytest.mark.parametrize(
    "key, cpuid, matches",
    [
        ("GenuineIntel-6-55-[01234]", "GenuineIntel-6-55-7", False),  # skylakex
        ("GenuineIntel-6-55-[56789ABCDEF]", "GenuineIntel-6-55-7", True),  # cascadelakex
        ("GenuineIntel-6-8F", "GenuineIntel-6-8F-8", True),  # no stepping in the key: ignored
        ("GenuineIntel-6-8[CD]", "GenuineIntel-6-8F-8", False),
        ("GenuineIntel-6-8[CD]", "GenuineIntel-6-8D-1", True),
        ("GenuineIntel-6-55-[56789ABCDEF]", "GenuineIntel-6-55", False),  # a full key needs a full CPUID
        ("AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]])", "AuthenticAMD-25-11-1", False),  # zen3 key, Genoa
        ("AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]])", "AuthenticAMD-25-21-0", True),  # zen3 (Vermeer)
        ("AuthenticAMD-25-[[:xdigit:]]+", "AuthenticAMD-25-11-1", True),  # zen4
        ("AuthenticAMD-26-[[:xdigit:]]+", "AuthenticAMD-26-2-1", True),  # zen5: this machine
        ("AuthenticAMD-23-[[:xdigit:]]+", "AuthenticAMD-26-2-1", False),
        ("0x00000000410fd400", "0x00000000411fd401", True),  # neoverse-v1 key, Graviton3 r1p1
        ("0x00000000410fd0c0", "0x00000000411fd401", False),  # neoverse-n1 key
        ("0x00000000413fd0c1", "0x00000000411fd0c1", False),  # the CPU's r1p1 is older than the key's r3p1
        ("0x00000000413fd0c1", "0x00000000413fd0c2", True),
    ],
)
def test_perf_mapfile_matching(key, cpuid, matches):
    from pmuscope.system import perf_cpuid_matches

    assert perf_cpuid_matches(key, cpuid) is matches


def test_identity_selects_mapfile_rows(roots):
    assert read_cpu_identity(roots["kvm-amd-zen5-1node"]).matches_perf_mapfile("AuthenticAMD-26-[[:xdigit:]]+")
    assert read_cpu_identity(roots["intel-clx-2s-2node"]).matches_perf_mapfile("GenuineIntel-6-55-[56789ABCDEF]")
    assert read_cpu_identity(roots["arm-graviton3-neoverse-v1"]).matches_perf_mapfile("0x00000000410fd400")
    assert not read_cpu_identity(roots["arm-graviton3-neoverse-v1"]).matches_perf_mapfile("0x00000000410fd490")


# -- topology ---------------------------------------------------------------------


def test_this_machine_capture(roots):
    t = read_topology(roots["kvm-amd-zen5-1node"])
    assert t.online == (0, 1)
    assert len(t.cores) == 2 and len(t.sockets) == 1 and t.threads_per_core == 1
    assert [n.id for n in t.nodes] == [0] and t.nodes[0].cpus == (0, 1)
    assert t.nodes[0].distances == {0: 10}
    assert t.nodes[0].mem_total_kb > 1_000_000
    names = [(c.name, c.size, c.shared_cpus) for c in t.caches]
    assert ("L1d", 48 * 1024, (0,)) in names and ("L3", 32 << 20, (0, 1)) in names


def test_intel_two_socket_two_node(roots):
    t = read_topology(roots["intel-clx-2s-2node"])
    assert len(t.online) == 80 and len(t.sockets) == 2 and len(t.cores) == 40 and t.threads_per_core == 2
    assert [s.cores for s in t.sockets] == [20, 20]
    assert t.nodes[0].cpus == tuple(list(range(20)) + list(range(40, 60)))
    assert t.nodes[1].distances == {0: 21, 1: 10}
    assert t.memory_only_nodes == ()
    assert t.node_of(45) == 0 and t.socket_of(25) == 1
    assert t.core_of(0).cpus == (0, 40)  # hyperthread siblings
    assert t.cpu(0).thread_siblings == (0, 40)
    l3 = [c for c in t.caches if c.level == 3]
    assert len(l3) == 2 and l3[0].size == 28160 * 1024 and l3[0].ways_of_associativity == 11
    assert l3[1].shared_cpus == tuple(list(range(20, 40)) + list(range(60, 80)))
    l2 = [c for c in t.caches if c.level == 2]
    assert len(l2) == 40 and all(len(c.shared_cpus) == 2 for c in l2)


def test_amd_one_socket_two_nodes_nps2(roots):
    t = read_topology(roots["amd-genoa-1s-nps2-2node"])
    assert t.identity.perf_cpuid == "AuthenticAMD-25-11-1"  # the Genoa CPUID perf prints
    assert len(t.sockets) == 1 and t.sockets[0].nodes == (0, 1) and t.sockets[0].cores == 32
    assert t.nodes[0].cpus == tuple(list(range(16)) + list(range(32, 48)))
    assert t.nodes[0].distances == {0: 10, 1: 12}
    l3 = [c for c in t.caches if c.level == 3]
    assert len(l3) == 8 and all(len(c.shared_cpus) == 8 for c in l3)  # one L3 per CCD: 4 cores x 2 threads
    assert l3[0].shared_cpus == (0, 1, 2, 3, 32, 33, 34, 35)
    assert t.core_of(33).cpus == (1, 33) and t.core_of(33).core_id == 1
    assert t.core_of(4).core_id == 8  # core ids skip the absent cores of each CCD


def test_four_node_with_cxl_memory_only_nodes(roots):
    t = read_topology(roots["intel-spr-2s-cxl-4node"])
    assert [n.id for n in t.nodes] == [0, 1, 2, 3]
    assert [n.id for n in t.memory_only_nodes] == [2, 3]
    n2 = t.nodes[2]
    assert n2.cpus == () and n2.mem_total_kb == 65536 * 1024
    assert t.nodes[0].distances == {0: 10, 1: 21, 2: 14, 3: 24}
    assert t.nodes[3].distances[2] == 26
    # the CPU nodes follow the sockets; no CPU lives in a CXL node
    assert {c.node for c in t.cpus} == {0, 1}
    assert [s.nodes for s in t.sockets] == [(0,), (1,)]
    assert len(t.online) == 208 and len(t.cores) == 104


def test_arm_single_node(roots):
    t = read_topology(roots["arm-graviton3-neoverse-v1"])
    assert len(t.online) == 64 and len(t.cores) == 64 and t.threads_per_core == 1
    assert t.identity.midr.part_name == "Neoverse V1"
    assert t.cpu(5).die_id == -1  # arm64 reports no die
    l3 = [c for c in t.caches if c.level == 3]
    assert len(l3) == 1 and l3[0].shared_cpus == tuple(range(64))


def test_to_dict_is_json(roots):
    for name, root in roots.items():
        d = json.loads(json.dumps(read_topology(root).to_dict()))
        assert d["cpu_count"] == len(d["cpus"]["online"]) > 0
        assert d["node_count"] == len(d["nodes"])
        assert sum(len(n["cpus"]) for n in d["nodes"]) == d["cpu_count"], name
        assert d["identity"]["perf_cpuid"]


def test_cpu_lists_and_missing_files(tmp_path):
    cpu = tmp_path / "sys/devices/system/cpu"
    for n in (0, 1, 2):
        (cpu / f"cpu{n}").mkdir(parents=True)
    # no online/possible files (an old kernel or a partial capture): the cpuN dirs count
    lists = read_cpu_lists(str(tmp_path))
    assert lists.online == (0, 1, 2) and lists.possible == (0, 1, 2) and lists.offline == ()
    (cpu / "online").write_text("0,2\n")
    (cpu / "offline").write_text("1\n")
    (cpu / "possible").write_text("0-3\n")
    lists = read_cpu_lists(str(tmp_path))
    assert lists.online == (0, 2) and lists.offline == (1,) and lists.possible == (0, 1, 2, 3)
    # no NUMA in sysfs: one node 0 holding every online CPU, as numactl shows
    nodes = read_numa_nodes(str(tmp_path))
    assert len(nodes) == 1 and nodes[0].cpus == (0, 2)
    t = read_topology(str(tmp_path))
    assert t.online == (0, 2) and t.caches == ()
    with pytest.raises(KeyError, match="cpu1 is not online"):
        t.cpu(1)


def test_hybrid_core_types(roots, tmp_path):
    """Intel hybrid: cpu_core and cpu_atom PMUs each list their CPUs."""
    import shutil

    root = tmp_path / "hybrid"
    shutil.copytree(roots["kvm-amd-zen5-1node"], root)
    dev = root / "sys/bus/event_source/devices"
    shutil.rmtree(dev / "cpu")
    for name, cpus, type_ in (("cpu_core", "0", 4), ("cpu_atom", "1", 10)):
        (dev / name).mkdir()
        (dev / name / "cpus").write_text(cpus + "\n")
        (dev / name / "type").write_text(f"{type_}\n")
    t = read_topology(str(root))
    assert t.core_types == {"cpu_core": (0,), "cpu_atom": (1,)}
    assert t.cpu(1).pmu == "cpu_atom"
    from pmuscope.cli.topology_cmd import render

    assert "Core types (PMUs):    cpu_core 0; cpu_atom 1" in render(t)


def test_single_core_pmu_covers_all(roots):
    t = read_topology(roots["kvm-amd-zen5-1node"])
    assert t.core_types == {"cpu": (0, 1)}
    arm = read_topology(roots["arm-graviton3-neoverse-v1"])
    assert set(arm.core_types) == {"armv8_pmuv3_0"} and len(arm.core_types["armv8_pmuv3_0"]) == 64


def test_not_a_sysfs_tree(tmp_path, capsys):
    from pmuscope.errors import PmuscopeError

    with pytest.raises(PmuscopeError, match="no CPUs found under"):
        read_topology(str(tmp_path))
    assert main(["topology", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pmuscope topology: no CPUs found") and "Traceback" not in err


def test_caches_fall_back_to_shared_cpu_map(roots, tmp_path):
    import shutil

    root = tmp_path / "m"
    shutil.copytree(roots["kvm-amd-zen5-1node"], root)
    for f in root.glob("sys/devices/system/cpu/cpu*/cache/index*/shared_cpu_list"):
        f.unlink()
    l3 = [c for c in read_caches(str(root)) if c.level == 3]
    assert len(l3) == 1 and l3[0].shared_cpus == (0, 1)


# -- CLI ------------------------------------------------------------------------------


def test_topology_command_text(roots, capsys):
    assert main(["topology", "--root", roots["intel-spr-2s-cxl-4node"]]) == 0
    out = capsys.readouterr().out
    assert "perf CPUID:" in out and "GenuineIntel-6-8F-8" in out
    assert "NUMA node(s):         4 (2 memory-only: 2,3)" in out
    assert "node 0 cpus: 0-51,104-155" in out
    assert "node 2 cpus: (none: memory-only node)" in out
    assert "  0:   10  21  14  24" in out
    assert "L3" in out and "105 MiB" in out
    assert "L2       2 MiB   16-way  64 B lines  × 104  (per core; 208 MiB total)" in out


def test_topology_command_arm_and_json(roots, capsys):
    assert main(["topology", "--root", roots["arm-graviton3-neoverse-v1"]]) == 0
    out = capsys.readouterr().out
    assert "Arm Neoverse V1 r1p1" in out and "MIDR_EL1:             0x411fd401" in out
    assert main(["topology", "--json", "--root", roots["intel-clx-2s-2node"]]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["socket_count"] == 2 and d["threads_per_core"] == 2
    assert d["identity"]["perf_cpuid"] == "GenuineIntel-6-55-7"
