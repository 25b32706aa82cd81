"""PMU discovery and pmu/term/ resolution against sysfs trees from real
machines (tests/data/sysfs, see PROVENANCE.md), checked against values
computed by hand from the kernel's published format definitions."""

from __future__ import annotations

import pytest

from pmuscope.errors import EventParseError, UnknownEventError
from pmuscope.events import parse_events
from pmuscope.events import pmu as pmu_mod
from pmuscope.events.cpuid import read_cpu_identity
from pmuscope.events.vendor import VendorEvents, json_event_terms, load_for_cpu

from ..conftest import DATA

SYSFS = DATA / "sysfs"
INTEL, AMD, ARM, KRAVA = (str(SYSFS / n) for n in ("intel-skx", "amd-epyc-kvm", "arm-neoverse-n1", "perf-tests-pmu"))
EVENTS_DIR = str(DATA / "pmu-events")


def one(text, root, **kw):
    specs = parse_events(text, sysfs_root=root, **kw)
    assert len(specs) == 1, specs
    return specs[0]


def test_discovery_reads_type_formats_aliases_caps():
    pmus = pmu_mod.pmus(INTEL)
    assert {"cpu", "msr", "power", "uncore_imc_0", "uncore_imc_1", "software", "tracepoint"} <= set(pmus)
    cpu = pmus["cpu"]
    assert cpu.type == 4 and cpu.is_core and not cpu.is_uncore
    assert cpu.formats["event"].bits == tuple(range(8))
    assert cpu.formats["ldlat"].field == "config1"
    assert cpu.aliases["mem-loads"].terms == "event=0xcd,umask=0x1,ldlat=3"
    assert cpu.caps["max_precise"] == "3"
    imc = pmus["uncore_imc_0"]
    assert imc.cpus == [0, 28] and imc.is_uncore
    assert imc.aliases["cas_count_read"].scale == pytest.approx(6.103515625e-5)
    assert imc.aliases["cas_count_read"].unit == "MiB"
    assert pmu_mod.pmus(INTEL) is pmus  # cached per root


def test_split_range_format_amd():
    fmt = pmu_mod.pmus(AMD)["cpu"].formats["event"]
    assert fmt.text == "config:0-7,32-35" and fmt.max_value == 0xFFF
    # AMD extended event select: event bits 8-11 land in config bits 32-35
    assert one("cpu/event=0x1c0/", AMD).attr.config == 0x1000000C0
    assert one("cpu/event=0xfff,umask=0xff/", AMD).attr.config == 0xF0000FFFF


def test_perf_selftest_pmu_formats():
    """Linux tools/perf/tests/pmu.c: the same terms must give its published values."""
    attr = one(
        "krava/krava01=15,krava02=170,krava03=1,krava11=27,krava12=1,krava13=2,krava21=119,krava22=11,krava23=2/",
        KRAVA,
    ).attr
    assert attr.type == 42
    assert attr.config == 0xC00000000002A823
    assert attr.config1 == 0x8000400000000145
    assert attr.config2 == 0x0400000020041D07


@pytest.mark.parametrize(
    "text,config,config1",
    [
        ("cpu/event=0x3c,umask=0x0,cmask=1,inv/", 0x3C | 1 << 24 | 1 << 23, 0),
        ("cpu/event=0xc0,umask=0x1,any=1,edge/", 0x1C0 | 1 << 21 | 1 << 18, 0),
        ("cpu/mem-loads/", 0x1CD, 3),
        ("cpu/mem-loads,ldlat=30/", 0x1CD, 30),
        ("cpu/mem-stores/", 0x82D0, 0),
        ("cpu/event=0xb7,umask=0x1,offcore_rsp=0x10003c0091/", 0x1B7, 0x10003C0091),
        ("cpu/cycles-ct/", 0x3C | 1 << 32 | 1 << 33, 0),
        ("cpu/event=0xc2,umask=0x2,frontend=0x400406/", 0x2C2, 0x400406),
        ("cpu/config=0x5300c0,config1=7/", 0x5300C0, 7),
        ("cpu/r01c2/", 0x1C2, 0),
        ("mem-loads", 0x1CD, 3),
    ],
)  # fmt: skip
def test_intel_core_terms(text, config, config1):
    spec = one(text, INTEL)
    assert (spec.attr.type, spec.attr.config, spec.attr.config1) == (4, config, config1)
    assert spec.pmu == "cpu"


def test_intel_term_overrides_alias_and_modifiers():
    spec = one("cpu/mem-loads,ldlat=30/pp", INTEL)
    assert spec.attr.precise_ip == 2 and spec.attr.config1 == 30
    spec = one("cpu/event=0x3c,name=unhalted/uk", INTEL)
    assert spec.name == "unhalted" and spec.attr.exclude_hv == 1


def test_msr_and_rapl_aliases():
    assert (one("msr/tsc/", INTEL).attr.type, one("msr/tsc/", INTEL).attr.config) == (8, 0)
    smi = one("smi", INTEL)  # a bare sysfs alias name, as perf accepts
    assert (smi.pmu, smi.attr.type, smi.attr.config) == ("msr", 8, 4)
    pkg = one("power/energy-pkg/", INTEL)
    assert (pkg.attr.type, pkg.attr.config) == (9, 2)
    assert pkg.scale == pytest.approx(2.3283064365386962890625e-10) and pkg.unit == "Joules"
    assert pkg.cpus == [0, 28]


def test_uncore_instances_and_prefix():
    specs = parse_events("uncore_imc/cas_count_read/", sysfs_root=INTEL)
    assert [(s.pmu, s.attr.type, s.attr.config) for s in specs] == [("uncore_imc_0", 13, 0x304), ("uncore_imc_1", 14, 0x304)]
    assert all(s.unit == "MiB" and s.cpus == [0, 28] for s in specs)
    assert [s.pmu for s in parse_events("imc/event=0x4,umask=0xc,thresh=2/", sysfs_root=INTEL)] == ["uncore_imc_0", "uncore_imc_1"]
    assert one("uncore_imc_1/event=0x4,umask=0xc,thresh=2/", INTEL).attr.config == 0x2000C04
    assert len(parse_events("cas_count_write", sysfs_root=INTEL)) == 2


def test_value_too_big_and_unknown_term_point_at_column():
    with pytest.raises(EventParseError) as info:
        parse_events("cycles,cpu/event=0x100/", sysfs_root=INTEL)
    assert info.value.pos == len("cycles,cpu/event=") and "maximum is 0xff" in str(info.value)
    with pytest.raises(UnknownEventError) as info:
        parse_events("cpu/event=1,bogus=2/", sysfs_root=INTEL)
    assert info.value.pos == len("cpu/event=1,") and "ldlat" in str(info.value)
    with pytest.raises(UnknownEventError) as info:
        parse_events("armv8_pmuv3_0/event=0x11/", sysfs_root=INTEL)
    assert info.value.pos == 0


def test_arm_core_pmu():
    spec = one("armv8_pmuv3_0/event=0x11/", ARM)
    assert (spec.attr.type, spec.attr.config) == (8, 0x11)
    assert one("armv8_pmuv3_0/inst_retired/", ARM).attr.config == 0x08
    assert one("armv8_pmuv3/l1d_cache_refill/", ARM).attr.config == 0x03  # instance suffix optional
    spec = one("armv8_pmuv3_0/event=0x11,long/", ARM)
    assert (spec.attr.config, spec.attr.config1) == (0x11, 1)
    assert one("cpu_cycles", ARM).attr.config == 0x11
    assert pmu_mod.pmus(ARM)["armv8_pmuv3_0"].cpus == [0, 1, 2, 3]
    with pytest.raises(EventParseError):
        parse_events("armv8_pmuv3_0/event=0x10000/", sysfs_root=ARM)


@pytest.mark.parametrize(
    "text,config,config1,config2",
    [
        ("arm_spe_0/ts_enable=1,load_filter=1,min_latency=64/", 1 | 1 << 33, 0, 64),
        ("arm_spe_0/ts_enable=1,pa_enable=1,pct_enable=1/", 0b111, 0, 0),
        ("arm_spe_0/branch_filter=1,store_filter=1,jitter=1/", 1 << 32 | 1 << 34 | 1 << 16, 0, 0),
        ("arm_spe_0/event_filter=0x2aa,min_latency=4095/", 0, 0x2AA, 4095),
        ("arm_spe/load_filter/", 1 << 33, 0, 0),
    ],
)  # fmt: skip
def test_arm_spe_terms(text, config, config1, config2):
    attr = one(text, ARM).attr
    assert (attr.type, attr.config, attr.config1, attr.config2) == (10, config, config1, config2)


def test_arm_spe_min_latency_range():
    with pytest.raises(EventParseError) as info:
        parse_events("arm_spe_0/min_latency=4096/", sysfs_root=ARM)
    assert "config2:0-11" in str(info.value)


def test_cpu_identity_strings():
    assert read_cpu_identity(INTEL).perf_cpuid == "GenuineIntel-6-55-4"
    assert read_cpu_identity(AMD).perf_cpuid == "AuthenticAMD-26-2-1"
    assert read_cpu_identity(ARM).perf_cpuid == "0x00000000413fd0c1"


def test_vendor_table_chosen_by_cpu_identity():
    intel = load_for_cpu(EVENTS_DIR, read_cpu_identity(INTEL))
    assert intel is not None and intel.model_dir.endswith("skylakex")
    assert load_for_cpu(EVENTS_DIR, read_cpu_identity(AMD)) is None  # amdzen5 maps but is not shipped
    assert load_for_cpu(EVENTS_DIR, read_cpu_identity(ARM)) is None


def test_jevents_term_encoding():
    ev = {"EventCode": "0x48", "UMask": "0x1", "CounterMask": "1", "AnyThread": "1", "SampleAfterValue": "2000003"}
    assert json_event_terms(ev) == "event=0x48,any=0x1,cmask=0x1,umask=0x1"
    ev = {"EventCode": "0xCD", "UMask": "0x1", "MSRIndex": "0x3F6", "MSRValue": "0x20"}
    assert json_event_terms(ev) == "event=0xcd,umask=0x1,ldlat=0x20"


@pytest.fixture(scope="module")
def skx() -> VendorEvents:
    table = load_for_cpu(EVENTS_DIR, read_cpu_identity(INTEL))
    assert table is not None
    return table


@pytest.mark.parametrize(
    "text,config,config1",
    [
        ("MEM_LOAD_RETIRED.L3_MISS", 0x20D1, 0),
        ("mem_load_retired.l3_miss", 0x20D1, 0),
        ("cpu/MEM_LOAD_RETIRED.L3_MISS/", 0x20D1, 0),
        ("L1D_PEND_MISS.PENDING_CYCLES_ANY", 0x148 | 1 << 21 | 1 << 24, 0),
        ("MEM_TRANS_RETIRED.LOAD_LATENCY_GT_32", 0x1CD, 0x20),
        ("LONGEST_LAT_CACHE.MISS", 0x412E, 0),
    ],
)  # fmt: skip
def test_vendor_events_resolve(skx, text, config, config1):
    spec = one(text, INTEL, vendor_tables=skx)
    assert (spec.attr.type, spec.attr.config, spec.attr.config1) == (4, config, config1)
    assert spec.extra["vendor_event"].upper() == text.split("/")[-2 if "/" in text else 0].upper()


def test_vendor_event_with_modifier_and_period(skx):
    spec = one("MEM_LOAD_RETIRED.L3_MISS:pp", INTEL, vendor_tables=skx)
    assert spec.attr.precise_ip == 2 and spec.extra["sample_after_value"] == 100007


def test_vendor_uncore_event(skx):
    specs = parse_events("UNC_M_CAS_COUNT.RD", sysfs_root=INTEL, vendor_tables=skx)
    assert [(s.pmu, s.attr.config) for s in specs] == [("uncore_imc_0", 0x304), ("uncore_imc_1", 0x304)]
    assert specs[0].scale == 64 and specs[0].unit == "Bytes" and specs[0].extra["per_pkg"]


def test_vendor_events_need_a_core_pmu(skx):
    with pytest.raises(UnknownEventError):
        parse_events("MEM_LOAD_RETIRED.L3_MISS", sysfs_root=ARM, vendor_tables=skx)


def test_vendor_dir_from_environment(monkeypatch):
    from pmuscope.events import vendor

    monkeypatch.setenv(vendor.ENV_DIR, str(DATA / "pmu-events" / "x86" / "skylakex"))
    vendor._ENV_CACHE.clear()
    try:
        assert one("MEM_LOAD_RETIRED.L3_HIT", INTEL).attr.config == 0x04D1
    finally:
        vendor._ENV_CACHE.clear()


def test_arm_arch_std_events_are_merged(tmp_path):
    """Arm tables list ``{"ArchStdEvent": "L1D_CACHE"}`` and take the encoding
    from the architecture's common file (perf's jevents.py)."""
    import json

    arch = tmp_path / "arm64"
    (arch / "arm" / "neoverse-n1").mkdir(parents=True)
    (arch / "mapfile.csv").write_text("Family-model,Version,Filename,EventType\n0x00000000410fd0c0,v1,arm/neoverse-n1,core\n")
    (arch / "common-and-microarch.json").write_text(json.dumps([
        {"EventCode": "0x04", "EventName": "L1D_CACHE", "BriefDescription": "Level 1 data cache access"},
        {"EventCode": "0x11", "EventName": "CPU_CYCLES", "BriefDescription": "Cycle"},
    ]))  # fmt: skip
    (arch / "arm" / "neoverse-n1" / "l1d_cache.json").write_text(json.dumps([
        {"ArchStdEvent": "L1D_CACHE", "PublicDescription": "Counts level 1 data cache accesses"},
        {"ArchStdEvent": "NOT_IN_COMMON"},
    ]))  # fmt: skip
    table = load_for_cpu(str(arch), read_cpu_identity(ARM))
    assert table is not None and set(table.events) == {"l1d_cache"}
    assert table.events["l1d_cache"].desc == "Level 1 data cache access"
    spec = one("L1D_CACHE", ARM, vendor_tables=table)
    assert (spec.pmu, spec.attr.type, spec.attr.config) == ("armv8_pmuv3_0", 8, 0x04)


HYBRID = str(SYSFS / "intel-adl-hybrid")


def test_hybrid_generic_events_expand_per_core_pmu():
    specs = parse_events("cycles", sysfs_root=HYBRID)
    assert [(s.pmu, s.attr.type, s.attr.config, s.extra["pmu_cpus"][0]) for s in specs] == [
        ("cpu_atom", 0, 0xA00000000, 16),
        ("cpu_core", 0, 0x400000000, 0),
    ]
    cache = parse_events("L1-dcache-load-misses:u", sysfs_root=HYBRID)
    assert [s.attr.config for s in cache] == [0xA00010000, 0x400010000]
    assert all(s.attr.exclude_kernel == 1 for s in cache)
    raw = parse_events("r01c2", sysfs_root=HYBRID)
    assert [(s.attr.type, s.attr.config) for s in raw] == [(10, 0x1C2), (4, 0x1C2)]
    assert [(s.attr.type, s.attr.config) for s in parse_events("cs", sysfs_root=HYBRID)] == [(1, 3)]


def test_hybrid_groups_split_per_pmu():
    specs = parse_events("{cycles,instructions}:u", sysfs_root=HYBRID)
    assert [(s.pmu, s.group, s.leader, s.attr.config & 0xFF) for s in specs] == [
        ("cpu_atom", 0, True, 0), ("cpu_atom", 0, False, 1), ("cpu_core", 1, True, 0), ("cpu_core", 1, False, 1),
    ]  # fmt: skip
    assert all(s.extra["group_size"] == 2 and s.attr.exclude_kernel for s in specs)


def test_hybrid_pmu_aliases_differ_per_pmu():
    core = one("cpu_core/mem-loads,ldlat=30/", HYBRID)
    atom = one("cpu_atom/mem-loads,ldlat=30/", HYBRID)
    assert (core.attr.type, core.attr.config, core.attr.config1) == (4, 0x1CD, 30)
    assert (atom.attr.type, atom.attr.config, atom.attr.config1) == (10, 0x5D0, 30)
    assert [s.pmu for s in parse_events("mem-stores", sysfs_root=HYBRID)] == ["cpu_atom", "cpu_core"]


def test_vendor_dir_without_a_table_for_this_cpu_says_so(monkeypatch, tmp_path):
    # a pmu-events tree whose mapfile names no CPU like the one running the tests
    (tmp_path / "mapfile.csv").write_text("Family-model,Version,Filename,EventType\nNoSuchVendor-99-99,v1,none,core\n")
    with pytest.raises(UnknownEventError) as info:
        parse_events("MEM_LOAD_RETIRED.L3_MISS", sysfs_root=INTEL, vendor_tables=str(tmp_path))
    assert "no vendor event table" in str(info.value) and "perf CPUID" in str(info.value)
