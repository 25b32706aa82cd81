"""Write the sysfs/procfs fixture trees of machines we cannot capture here.

Each tree follows the kernel's file formats exactly (cpulist and %*pb mask
formats, nodeN/meminfo lines, /proc/cpuinfo per-architecture layout); the
machine shapes come from published outputs listed in PROVENANCE.md.
Run:  python synthesize.py   (rewrites NAME.tar.gz next to this file; tests
unpack them into a temporary directory, which keeps ~20,000 tiny files out of git)
"""

from __future__ import annotations

import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))

MEMINFO_KEYS = (
    "MemTotal MemFree MemUsed SwapCached Active Inactive Active(anon) Inactive(anon) Active(file) "
    "Inactive(file) Unevictable Mlocked Dirty Writeback FilePages Mapped AnonPages Shmem KernelStack "
    "PageTables SecPageTables NFS_Unstable Bounce WritebackTmp KReclaimable Slab SReclaimable SUnreclaim "
    "AnonHugePages ShmemHugePages ShmemPmdMapped FileHugePages FilePmdMapped HugePages_Total HugePages_Free "
    "HugePages_Surp"
).split()


def cpulist(cpus) -> str:
    items = sorted(set(cpus))
    out, i = [], 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def cpumask(cpus, nbits: int) -> str:
    """The kernel's %*pb format: 32-bit hex words, most significant first,
    the first word only as wide as the bits left over."""
    value = 0
    for c in cpus:
        value |= 1 << c
    words = []
    bits = nbits
    while bits > 0:
        chunk = bits % 32 or 32
        bits -= chunk
        words.append(f"{(value >> bits) & ((1 << chunk) - 1):0{(chunk + 3) // 4}x}")
    return ",".join(words)


class Tree:
    def __init__(self, name: str) -> None:
        self.base = os.path.join(HERE, name)
        if os.path.exists(self.base):
            shutil.rmtree(self.base)

    def write(self, rel: str, text: str) -> None:
        p = os.path.join(self.base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")


def write_machine(t: Tree, cpus: list[dict], caches: list[dict], nodes: list[dict], distances: list[list[int]]) -> None:
    """cpus: dicts with cpu, pkg, die, core, cluster, node; caches: level, type,
    size_k, ways, line, group(cpu)->tuple of sharing cpus, id(cpu)."""
    n = len(cpus)
    allc = [c["cpu"] for c in cpus]
    s = "sys/devices/system/cpu"
    for f in ("online", "possible", "present"):
        t.write(f"{s}/{f}", cpulist(allc))
    t.write(f"{s}/offline", "")
    t.write(f"{s}/kernel_max", "8191")
    for c in cpus:
        sib = {
            "thread_siblings": [d["cpu"] for d in cpus if (d["pkg"], d["die"], d["core"]) == (c["pkg"], c["die"], c["core"])],
            "core_siblings": [d["cpu"] for d in cpus if d["pkg"] == c["pkg"]],
            "package_cpus": [d["cpu"] for d in cpus if d["pkg"] == c["pkg"]],
            "die_cpus": [d["cpu"] for d in cpus if (d["pkg"], d["die"]) == (c["pkg"], c["die"])],
            "cluster_cpus": [d["cpu"] for d in cpus if (d["pkg"], d["cluster"]) == (c["pkg"], c["cluster"])],
        }
        sib["core_cpus"] = sib["thread_siblings"]
        tp = f"{s}/cpu{c['cpu']}/topology"
        for k, v in (("core_id", c["core"]), ("physical_package_id", c["pkg"]), ("die_id", c["die"]), ("cluster_id", c["cluster"])):
            t.write(f"{tp}/{k}", str(v))
        for k, v in sib.items():
            t.write(f"{tp}/{k}", cpumask(v, n))
            t.write(f"{tp}/{k}_list", cpulist(v))
        for i, cache in enumerate(caches):
            cp = f"{s}/cpu{c['cpu']}/cache/index{i}"
            shared = cache["group"](c)
            sets = cache["size_k"] * 1024 // (cache["ways"] * cache["line"])
            for k, v in (
                ("level", cache["level"]), ("type", cache["type"]), ("size", f"{cache['size_k']}K"),
                ("ways_of_associativity", cache["ways"]), ("coherency_line_size", cache["line"]),
                ("number_of_sets", sets), ("physical_line_partition", 1), ("id", cache["id"](c)),
                ("shared_cpu_list", cpulist(shared)), ("shared_cpu_map", cpumask(shared, n)),
            ):
                t.write(f"{cp}/{k}", str(v))
        if c.get("midr"):
            t.write(f"{s}/cpu{c['cpu']}/regs/identification/midr_el1", f"0x{c['midr']:016x}")
            t.write(f"{s}/cpu{c['cpu']}/regs/identification/revidr_el1", f"0x{0:016x}")
    ns = "sys/devices/system/node"
    ids = [nd["id"] for nd in nodes]
    t.write(f"{ns}/online", cpulist(ids))
    t.write(f"{ns}/possible", cpulist(ids))
    t.write(f"{ns}/has_cpu", cpulist([nd["id"] for nd in nodes if nd["cpus"]]))
    t.write(f"{ns}/has_memory", cpulist(ids))
    t.write(f"{ns}/has_normal_memory", cpulist([nd["id"] for nd in nodes if nd["cpus"]]))
    for nd, row in zip(nodes, distances):
        p = f"{ns}/node{nd['id']}"
        t.write(f"{p}/cpulist", cpulist(nd["cpus"]))
        t.write(f"{p}/cpumap", cpumask(nd["cpus"], n))
        t.write(f"{p}/distance", " ".join(str(d) for d in row))
        total, free = nd["mem_kb"], nd["free_kb"]
        vals = {"MemTotal": total, "MemFree": free, "MemUsed": total - free}
        t.write(f"{p}/meminfo", "".join(f"Node {nd['id']} {k + ':':<15} {vals.get(k, 0):>8} kB\n" if not k.startswith("HugePages") else f"Node {nd['id']} {k + ':':<15} {0:>5}\n" for k in MEMINFO_KEYS))


def x86_cpuinfo(cpus, vendor, family, model, stepping, name, microcode, mhz, cache_kb, flags, bugs, bogomips, addr, nthreads, ncores, apicid) -> str:
    out = []
    for c in cpus:
        out.append(
            f"processor\t: {c['cpu']}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\nstepping\t: {stepping}\nmicrocode\t: {microcode}\ncpu MHz\t\t: {mhz}\n"
            f"cache size\t: {cache_kb} KB\nphysical id\t: {c['pkg']}\nsiblings\t: {nthreads}\ncore id\t\t: {c['core']}\n"
            f"cpu cores\t: {ncores}\napicid\t\t: {apicid(c)}\ninitial apicid\t: {apicid(c)}\nfpu\t\t: yes\n"
            f"fpu_exception\t: yes\ncpuid level\t: 27\nwp\t\t: yes\nflags\t\t: {flags}\nbugs\t\t: {bugs}\n"
            f"bogomips\t: {bogomips}\nclflush size\t: 64\ncache_alignment\t: 64\naddress sizes\t: {addr}\npower management:\n\n"
        )
    return "".join(out)


def doctor_files(t: Tree, *, osrelease, paranoid, uid, capeff, nofile, nmi, kptr, pmus, dmi=None, docker=False, rdpmc=None, caps=None) -> None:
    k = "proc/sys/kernel"
    t.write(f"{k}/osrelease", osrelease)
    for name, v in (("perf_event_paranoid", paranoid), ("perf_event_mlock_kb", 516), ("perf_event_max_sample_rate", 100000),
                    ("perf_event_max_stack", 127), ("nmi_watchdog", nmi), ("kptr_restrict", kptr)):
        t.write(f"{k}/{name}", str(v))
    t.write("proc/self/status", f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
            f"CapInh:\t0000000000000000\nCapPrm:\t{capeff:016x}\nCapEff:\t{capeff:016x}\nCapBnd:\t{capeff | 0xa80425fb:016x}\nCapAmb:\t0000000000000000\n")
    soft, hard = nofile
    t.write("proc/self/limits", f"{'Limit':<26}{'Soft Limit':<21}{'Hard Limit':<21}{'Units':<10}\n"
            f"{'Max open files':<26}{soft:<21}{hard:<21}{'files':<10}\n")
    for name, typ in pmus.items():
        t.write(f"sys/bus/event_source/devices/{name}/type", str(typ))
    if rdpmc is not None:
        t.write("sys/bus/event_source/devices/cpu/rdpmc", str(rdpmc))
    for name, value in (caps or {}).items():
        t.write(f"sys/bus/event_source/devices/cpu/caps/{name}", str(value))
    if dmi:
        t.write("sys/class/dmi/id/sys_vendor", dmi[0])
        t.write("sys/class/dmi/id/product_name", dmi[1])
    t.write("proc/mounts", "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\nsysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
            + ("" if docker else "tracefs /sys/kernel/tracing tracefs rw,nosuid,nodev,noexec,relatime 0 0\n"))
    if docker:
        t.write(".dockerenv", "")
        t.write("proc/1/cgroup", "0::/\n")
        t.write("proc/1/sched", "python3 (3521, #threads: 1)\n" + "-" * 67 + "\n")
    else:
        t.write("proc/1/cgroup", "0::/init.scope\n")
        t.write("proc/1/sched", "systemd (1, #threads: 1)\n" + "-" * 67 + "\n")


INTEL_FLAGS_CLX = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht "
    "tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc "
    "cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca "
    "sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch "
    "cpuid_fault epb cat_l3 cdp_l3 invpcid_single intel_ppin ssbd mba ibrs ibpb stibp ibrs_enhanced tpr_shadow "
    "vnmi flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid cqm mpx rdt_a avx512f "
    "avx512dq rdseed adx smap clflushopt clwb intel_pt avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves "
    "cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local dtherm ida arat pln pts pku ospke avx512_vnni md_clear "
    "flush_l1d arch_capabilities"
)
INTEL_FLAGS_SPR = INTEL_FLAGS_CLX.replace(" mpx", "").replace("avx512_vnni", "avx512ifma avx512vbmi umip waitpkg avx512_vbmi2 gfni vaes "
    "vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri movdir64b "
    "enqcmd fsrm uintr avx512_vp2intersect serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8") + " avx_vnni avx512_bf16"


def intel_clx_2s() -> None:
    """Two-socket Xeon Gold 6248 (Cascade Lake, 20C/40T per socket), SNC off: two nodes."""
    t = Tree("intel-clx-2s-2node")
    core_ids = [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20, 24, 25, 26, 27, 28]
    cpus = []
    for i in range(80):
        pkg, k, thr = (i // 20) % 2, i % 20, i // 40
        cpus.append(dict(cpu=i, pkg=pkg, die=0, core=core_ids[k], cluster=pkg * 32 + core_ids[k], node=pkg, thr=thr))
    core_group = lambda c: tuple(d["cpu"] for d in cpus if (d["pkg"], d["core"]) == (c["pkg"], c["core"]))  # noqa: E731
    apic = lambda c: c["pkg"] * 64 + c["core"] * 2 + c["thr"]  # noqa: E731
    caches = [
        dict(level=1, type="Data", size_k=32, ways=8, line=64, group=core_group, id=lambda c: c["core"]),
        dict(level=1, type="Instruction", size_k=32, ways=8, line=64, group=core_group, id=lambda c: c["core"]),
        dict(level=2, type="Unified", size_k=1024, ways=16, line=64, group=core_group, id=lambda c: c["core"]),
        dict(level=3, type="Unified", size_k=28160, ways=11, line=64, group=lambda c: tuple(d["cpu"] for d in cpus if d["pkg"] == c["pkg"]), id=lambda c: c["pkg"]),
    ]
    nodes = [dict(id=p, cpus=[c["cpu"] for c in cpus if c["pkg"] == p], mem_kb=196_608_000 - p * 1_048_576, free_kb=190_000_000 - p * 2_000_000) for p in (0, 1)]
    write_machine(t, cpus, caches, nodes, [[10, 21], [21, 10]])
    t.write("proc/cpuinfo", x86_cpuinfo(cpus, "GenuineIntel", 6, 85, 7, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "0x5003604", "2500.000", 28160,
                                        INTEL_FLAGS_CLX, "spectre_v1 spectre_v2 spec_store_bypass swapgs taa itlb_multihit mmio_stale_data retbleed gds",
                                        "5000.00", "46 bits physical, 48 bits virtual", 40, 20, apic))
    pmus = dict(software=1, tracepoint=2, breakpoint=5, cpu=4, msr=6, power=7, uprobe=8, kprobe=9, cstate_core=10, cstate_pkg=11, intel_pt=12,
                **{f"uncore_imc_{i}": 13 + i for i in range(6)}, **{f"uncore_upi_{i}": 19 + i for i in range(3)})
    doctor_files(t, osrelease="5.15.0-122-generic", paranoid=2, uid=1000, capeff=0, nofile=(1024, 524288), nmi=1, kptr=1, pmus=pmus, dmi=("Dell Inc.", "PowerEdge R740"), rdpmc=1,
                 caps={"max_precise": 3, "branches": 32, "pmu_name": "skylake"})


def intel_spr_cxl() -> None:
    """Two-socket Xeon Platinum 8470 (Sapphire Rapids, 52C/104T per socket) with
    two CXL Type 3 memory expanders: four nodes, two of them memory-only."""
    t = Tree("intel-spr-2s-cxl-4node")
    cpus = []
    for i in range(208):
        pkg, k, thr = (i // 52) % 2, i % 52, i // 104
        cpus.append(dict(cpu=i, pkg=pkg, die=0, core=k, cluster=pkg * 64 + k, node=pkg, thr=thr))
    core_group = lambda c: tuple(d["cpu"] for d in cpus if (d["pkg"], d["core"]) == (c["pkg"], c["core"]))  # noqa: E731
    apic = lambda c: c["pkg"] * 128 + c["core"] * 2 + c["thr"]  # noqa: E731
    caches = [
        dict(level=1, type="Data", size_k=48, ways=12, line=64, group=core_group, id=lambda c: c["pkg"] * 64 + c["core"]),
        dict(level=1, type="Instruction", size_k=32, ways=8, line=64, group=core_group, id=lambda c: c["pkg"] * 64 + c["core"]),
        dict(level=2, type="Unified", size_k=2048, ways=16, line=64, group=core_group, id=lambda c: c["pkg"] * 64 + c["core"]),
        dict(level=3, type="Unified", size_k=107520, ways=15, line=64, group=lambda c: tuple(d["cpu"] for d in cpus if d["pkg"] == c["pkg"]), id=lambda c: c["pkg"]),
    ]
    MB = 1024
    nodes = [
        dict(id=0, cpus=[c["cpu"] for c in cpus if c["pkg"] == 0], mem_kb=64167 * MB, free_kb=62245 * MB),
        dict(id=1, cpus=[c["cpu"] for c in cpus if c["pkg"] == 1], mem_kb=64472 * MB, free_kb=61391 * MB),
        dict(id=2, cpus=[], mem_kb=65536 * MB, free_kb=65535 * MB),
        dict(id=3, cpus=[], mem_kb=131072 * MB, free_kb=131070 * MB),
    ]
    dist = [[10, 21, 14, 24], [21, 10, 24, 14], [14, 24, 10, 26], [24, 14, 26, 10]]
    write_machine(t, cpus, caches, nodes, dist)
    t.write("proc/cpuinfo", x86_cpuinfo(cpus, "GenuineIntel", 6, 143, 8, "Intel(R) Xeon(R) Platinum 8470", "0x2b0004b1", "2000.000", 107520,
                                        INTEL_FLAGS_SPR, "spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb", "4000.00",
                                        "46 bits physical, 57 bits virtual", 104, 52, apic))
    pmus = dict(software=1, tracepoint=2, breakpoint=5, cpu=4, msr=6, power=7, uprobe=8, kprobe=9, cstate_core=10, cstate_pkg=11, intel_pt=12,
                **{f"uncore_imc_{i}": 13 + i for i in range(8)}, **{f"uncore_cxlcm_{i}": 21 + i for i in range(2)})
    # root inside a Docker container with Docker's default capability set (no CAP_PERFMON/CAP_SYS_ADMIN)
    doctor_files(t, osrelease="6.8.0-45-generic", paranoid=2, uid=0, capeff=0xA80425FB, nofile=(1048576, 1048576), nmi=0, kptr=0, pmus=pmus,
                 dmi=("Intel Corporation", "ArcherCity"), docker=True, rdpmc=2,
                 caps={"max_precise": 3, "branches": 32, "pmu_name": "sapphire_rapids"})


def arm_graviton3() -> None:
    """AWS c7g.16xlarge: Graviton3, 64 Neoverse V1 cores, one socket, one node."""
    t = Tree("arm-graviton3-neoverse-v1")
    midr = 0x411FD401
    cpus = [dict(cpu=i, pkg=0, die=-1, core=i, cluster=0, node=0, midr=midr) for i in range(64)]
    own = lambda c: (c["cpu"],)  # noqa: E731
    caches = [
        dict(level=1, type="Data", size_k=64, ways=4, line=64, group=own, id=lambda c: c["cpu"]),
        dict(level=1, type="Instruction", size_k=64, ways=4, line=64, group=own, id=lambda c: c["cpu"]),
        dict(level=2, type="Unified", size_k=1024, ways=8, line=64, group=own, id=lambda c: c["cpu"]),
        dict(level=3, type="Unified", size_k=32768, ways=16, line=64, group=lambda c: tuple(range(64)), id=lambda c: 0),
    ]
    write_machine(t, cpus, caches, [dict(id=0, cpus=list(range(64)), mem_kb=130_000_000, free_kb=126_000_000)], [[10]])
    feats = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 "
             "asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng")
    t.write("proc/cpuinfo", "".join(
        f"processor\t: {i}\nBogoMIPS\t: 2100.00\nFeatures\t: {feats}\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
        f"CPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n\n" for i in range(64)))
    pmus = dict(software=1, tracepoint=2, breakpoint=5, armv8_pmuv3_0=8, kprobe=6, uprobe=7)
    t.write("proc/sys/kernel/perf_user_access", "0")
    doctor_files(t, osrelease="6.1.109-118.189.amzn2023.aarch64", paranoid=1, uid=1000, capeff=0, nofile=(65535, 65535), nmi=0, kptr=1, pmus=pmus, dmi=("Amazon EC2", "c7g.16xlarge"))


AMD_FLAGS_ZEN4 = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx "
    "mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good amd_lbr_v2 nopl nonstop_tsc cpuid extd_apicid aperfmperf "
    "rapl pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm "
    "cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core "
    "perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 invpcid_single hw_pstate ssbd mba perfmon_v2 ibrs ibpb stibp "
    "ibrs_enhanced vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap "
    "avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc "
    "cqm_mbm_total cqm_mbm_local avx512_bf16 clzero irperf xsaveerptr rdpru wbnoinvd amd_ppin cppc arat npt lbrv "
    "svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif "
    "x2avic v_spec_ctrl vnmi avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg "
    "avx512_vpopcntdq la57 rdpid overflow_recov succor smca fsrm flush_l1d"
)


def amd_genoa_nps2() -> None:
    """One-socket EPYC 9354 (Genoa, Zen 4, 32C/64T: 8 CCDs x 4 cores, 32 MB L3 per CCD)
    in NPS2 mode: two NUMA nodes on one socket."""
    t = Tree("amd-genoa-1s-nps2-2node")
    cpus = []
    for i in range(64):
        k, thr = i % 32, i // 32
        ccd, c = k // 4, k % 4
        core = ccd * 8 + c  # APIC ids reserve 8 cores per CCD
        cpus.append(dict(cpu=i, pkg=0, die=0, core=core, cluster=core, node=0 if ccd < 4 else 1, thr=thr, ccd=ccd))
    core_group = lambda c: tuple(d["cpu"] for d in cpus if d["core"] == c["core"])  # noqa: E731
    apic = lambda c: c["core"] * 2 + c["thr"]  # noqa: E731
    caches = [
        dict(level=1, type="Data", size_k=32, ways=8, line=64, group=core_group, id=lambda c: c["core"]),
        dict(level=1, type="Instruction", size_k=32, ways=8, line=64, group=core_group, id=lambda c: c["core"]),
        dict(level=2, type="Unified", size_k=1024, ways=8, line=64, group=core_group, id=lambda c: c["core"]),
        dict(level=3, type="Unified", size_k=32768, ways=16, line=64,
             group=lambda c: tuple(d["cpu"] for d in cpus if d["ccd"] == c["ccd"]), id=lambda c: c["ccd"]),
    ]
    nodes = [dict(id=n, cpus=[c["cpu"] for c in cpus if c["node"] == n], mem_kb=197_000_000, free_kb=190_500_000 - n * 1_000_000)
             for n in (0, 1)]
    write_machine(t, cpus, caches, nodes, [[10, 12], [12, 10]])
    t.write("proc/cpuinfo", x86_cpuinfo(cpus, "AuthenticAMD", 25, 17, 1, "AMD EPYC 9354 32-Core Processor", "0xa101148", "3250.000",
                                        1024, AMD_FLAGS_ZEN4, "sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso",
                                        "6499.74", "52 bits physical, 57 bits virtual", 64, 32, apic))
    pmus = dict(software=1, tracepoint=2, breakpoint=5, cpu=4, msr=6, power=7, uprobe=8, kprobe=9, amd_df=10, amd_l3=11,
                ibs_fetch=12, ibs_op=13, amd_iommu_0=14, amd_umc_0=15)
    doctor_files(t, osrelease="6.8.0-51-generic", paranoid=2, uid=1000, capeff=0, nofile=(1024, 1048576), nmi=1, kptr=1,
                 pmus=pmus, dmi=("Supermicro", "AS -1115CS-TNR"), rdpmc=1)


def pack(name: str) -> None:
    import gzip
    import tarfile

    base = os.path.join(HERE, name)
    # mtime=0 in the gzip header and every member: the same tree gives the same bytes
    with gzip.GzipFile(base + ".tar.gz", "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in sorted(os.walk(base)):
            dirnames.sort()
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                info = tar.gettarinfo(full, arcname=os.path.relpath(full, HERE))
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                with open(full, "rb") as f:
                    tar.addfile(info, f)
    shutil.rmtree(base)


if __name__ == "__main__":
    for make, name in ((amd_genoa_nps2, "amd-genoa-1s-nps2-2node"), (intel_clx_2s, "intel-clx-2s-2node"), (intel_spr_cxl, "intel-spr-2s-cxl-4node"), (arm_graviton3, "arm-graviton3-neoverse-v1")):
        make()
        pack(name)
