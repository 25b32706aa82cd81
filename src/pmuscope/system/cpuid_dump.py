"""Dump x86 CPUID leaves, as the ``cpuid`` tool does.

Leaves are read by executing ``cpuid`` from a few bytes of machine code
mapped executable (no privileges, no kernel module), or, where executable
mappings are refused, through the kernel's ``/dev/cpu/N/cpuid`` (the cpuid
module; ``pread`` at offset ``leaf | subleaf << 32`` returns eax, ebx, ecx,
edx — arch/x86/kernel/cpuid.c). Fixtures pass ``reader=`` a dict.

:func:`dump` returns the raw leaves (``cpuid -r``) and :func:`decode` the
decoded view: vendor, brand, family/model/stepping, caches and TLBs, feature
flags and the hypervisor leaves.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
from dataclasses import dataclass
from typing import Callable

from .. import errors

Regs = tuple[int, int, int, int]
Reader = Callable[[int, int], Regs]

# push rbx; mov r8,rdx; mov eax,edi; mov ecx,esi; cpuid;
# mov [r8],eax; mov [r8+4],ebx; mov [r8+8],ecx; mov [r8+12],edx; pop rbx; ret
_CODE = bytes.fromhex("53" "4989d0" "89f8" "89f1" "0fa2" "418900" "41895804" "41894808" "4189500c" "5b" "c3")

_fn_cache: list = []


def _native_reader() -> Reader:
    if not _fn_cache:
        buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        buf.write(_CODE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        fn = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)(addr)
        _fn_cache.append((buf, fn))
    fn = _fn_cache[0][1]
    out = (ctypes.c_uint32 * 4)()

    def read(leaf: int, sub: int) -> Regs:
        fn(leaf, sub, ctypes.addressof(out))
        return out[0], out[1], out[2], out[3]

    return read


def _dev_reader(cpu: int) -> Reader:
    fd = os.open(f"/dev/cpu/{cpu}/cpuid", os.O_RDONLY | os.O_CLOEXEC)

    def read(leaf: int, sub: int) -> Regs:
        return struct.unpack("<4I", os.pread(fd, 16, leaf | (sub << 32)))  # type: ignore[return-value]

    return read


def reader(cpu: int | None = None) -> Reader:
    """A leaf reader for this machine (``cpu``: read that CPU's leaves through
    /dev/cpu/N/cpuid; None: the CPU this thread runs on)."""
    if platform.machine() not in ("x86_64", "amd64", "i686", "i386"):
        raise errors.PmuscopeError(f"CPUID is an x86 instruction; this machine is {platform.machine()} "
                                   "(see `pmuscope topology` for MIDR_EL1 on arm64)")
    if cpu is None and platform.machine() in ("x86_64", "amd64"):
        try:
            return _native_reader()
        except (OSError, ValueError):
            cpu = os.sched_getaffinity(0).__iter__().__next__()
    try:
        return _dev_reader(cpu if cpu is not None else 0)
    except OSError as err:
        raise errors.PmuscopeError(f"cannot read CPUID: executable memory refused and /dev/cpu/{cpu}/cpuid "
                                   f"unavailable ({err.strerror}); load the cpuid module (modprobe cpuid)") from err


#: leaves with subleaves, and how many to read (until a terminator or this cap)
_SUBLEAVES = {0x4: 16, 0x7: 4, 0xB: 8, 0xD: 32, 0xF: 4, 0x10: 4, 0x12: 8, 0x14: 4, 0x17: 4, 0x18: 16, 0x1F: 8,
              0x8000001D: 16, 0x80000020: 4, 0x80000026: 8}


def _subleaf_done(leaf: int, sub: int, regs: Regs) -> bool:
    eax, ebx, ecx, edx = regs
    if leaf in (0x4, 0x8000001D):
        return eax & 0x1F == 0  # cache type 0: no more caches
    if leaf in (0xB, 0x1F):
        return sub > 0 and (ecx >> 8) & 0xFF == 0  # level type 0: invalid
    return sub > 0 and regs == (0, 0, 0, 0)


@dataclass
class Leaf:
    leaf: int
    subleaf: int
    eax: int
    ebx: int
    ecx: int
    edx: int

    def line(self) -> str:
        """``cpuid -r`` style."""
        return (f"   {self.leaf:#010x} {self.subleaf:#04x}: eax={self.eax:#010x} ebx={self.ebx:#010x} "
                f"ecx={self.ecx:#010x} edx={self.edx:#010x}")


def dump(read: Reader | dict | None = None) -> list[Leaf]:
    """Every basic, hypervisor and extended leaf (with subleaves)."""
    if read is None:
        read = reader()
    if isinstance(read, dict):
        table = read
        read = lambda leaf, sub: table.get((leaf, sub), (0, 0, 0, 0))  # noqa: E731
    out: list[Leaf] = []
    max_basic = read(0, 0)[0]
    hv = read(1, 0)[2] >> 31 & 1
    ranges = [(0, min(max_basic, 0x40))]
    if hv:
        top = read(0x40000000, 0)[0]
        ranges.append((0x40000000, top if 0x40000000 <= top <= 0x400000FF else 0x40000001))
    top = read(0x80000000, 0)[0]
    if 0x80000000 <= top <= 0x800000FF:
        ranges.append((0x80000000, top))
    for lo, hi in ranges:
        for leaf in range(lo, hi + 1):
            count = _SUBLEAVES.get(leaf, 1)
            if leaf == 0x7:  # 7.0:eax is the last subleaf
                count = min(count, read(7, 0)[0] + 1)
            for sub in range(count):
                regs = tuple(int(x) for x in read(leaf, sub))
                if sub and _subleaf_done(leaf, sub, regs):  # type: ignore[arg-type]
                    break
                out.append(Leaf(leaf, sub, *regs))
                if leaf in (0x4, 0x8000001D) and regs[0] & 0x1F == 0:
                    break
    return out


# -- decoding --------------------------------------------------------------------------

def _s(*regs: int) -> str:
    return b"".join(struct.pack("<I", r) for r in regs).rstrip(b"\0").decode("latin-1")


_F1_EDX = ["fpu", "vme", "de", "pse", "tsc", "msr", "pae", "mce", "cx8", "apic", None, "sep", "mtrr", "pge", "mca",
           "cmov", "pat", "pse36", "psn", "clflush", None, "ds", "acpi", "mmx", "fxsr", "sse", "sse2", "ss", "ht", "tm",
           "ia64", "pbe"]
_F1_ECX = ["sse3", "pclmulqdq", "dtes64", "monitor", "ds_cpl", "vmx", "smx", "est", "tm2", "ssse3", "cnxt_id",
           "sdbg", "fma", "cx16", "xtpr", "pdcm", None, "pcid", "dca", "sse4_1", "sse4_2", "x2apic", "movbe",
           "popcnt", "tsc_deadline", "aes", "xsave", "osxsave", "avx", "f16c", "rdrand", "hypervisor"]
_F7_EBX = ["fsgsbase", "tsc_adjust", "sgx", "bmi1", "hle", "avx2", "fdp_excptn_only", "smep", "bmi2", "erms",
           "invpcid", "rtm", "pqm", "zero_fcs_fds", "mpx", "rdt_a", "avx512f", "avx512dq", "rdseed", "adx", "smap",
           "avx512ifma", "pcommit", "clflushopt", "clwb", "intel_pt", "avx512pf", "avx512er", "avx512cd", "sha_ni",
           "avx512bw", "avx512vl"]
_F7_ECX = ["prefetchwt1", "avx512vbmi", "umip", "pku", "ospke", "waitpkg", "avx512_vbmi2", "cet_ss", "gfni", "vaes",
           "vpclmulqdq", "avx512_vnni", "avx512_bitalg", "tme", "avx512_vpopcntdq", None, "la57", None, None, None,
           None, None, "rdpid", "kl", "bus_lock_detect", "cldemote", None, "movdiri", "movdir64b", "enqcmd",
           "sgx_lc", "pks"]
_F7_EDX = [None, None, "avx512_4vnniw", "avx512_4fmaps", "fsrm", "uintr", None, None, "avx512_vp2intersect",
           "srbds_ctrl", "md_clear", "rtm_always_abort", None, "tsx_force_abort", "serialize", "hybrid",
           "tsxldtrk", None, "pconfig", "arch_lbr", "ibt", None, "amx_bf16", "avx512_fp16", "amx_tile",
           "amx_int8", "spec_ctrl", "intel_stibp", "flush_l1d", "arch_capabilities", "core_capabilities", "ssbd"]
_FE1_ECX = ["lahf_lm", "cmp_legacy", "svm", "extapic", "cr8_legacy", "abm", "sse4a", "misalignsse", "3dnowprefetch",
            "osvw", "ibs", "xop", "skinit", "wdt", None, "lwp", "fma4", "tce", None, "nodeid_msr", None, "tbm",
            "topoext", "perfctr_core", "perfctr_nb", None, "bpext", "ptsc", "perfctr_llc", "mwaitx", None, None]
_FE1_EDX = [None] * 11 + ["syscall"] + [None] * 8 + ["nx", None, "mmxext", None, None, "fxsr_opt", "pdpe1gb",
                                                      "rdtscp", None, "lm", "3dnowext", "3dnow"]


def _flags(value: int, names: list) -> list[str]:
    return [n for i, n in enumerate(names) if n and value >> i & 1]


_CACHE_TYPE = {1: "data", 2: "instruction", 3: "unified"}


def _det_cache(regs: Regs) -> dict | None:
    eax, ebx, ecx, edx = regs
    ctype = eax & 0x1F
    if not ctype:
        return None
    ways = (ebx >> 22) + 1
    parts = ((ebx >> 12) & 0x3FF) + 1
    line = (ebx & 0xFFF) + 1
    sets = ecx + 1
    return {"level": eax >> 5 & 7, "type": _CACHE_TYPE.get(ctype, str(ctype)), "size": ways * parts * line * sets,
            "ways": ways, "line_size": line, "sets": sets, "shared_by_threads": (eax >> 14 & 0xFFF) + 1,
            "fully_associative": bool(eax >> 9 & 1), "inclusive": bool(edx >> 1 & 1)}


def _amd_l1_tlb(reg: int, what: str) -> dict:
    return {"what": what, "entries": reg >> 16 & 0xFF, "ways": reg >> 24}


def decode(leaves: list[Leaf]) -> dict:
    """A ``cpuid``-like decoded view of :func:`dump`'s leaves (a JSON-able dict)."""
    by = {(lf.leaf, lf.subleaf): (lf.eax, lf.ebx, lf.ecx, lf.edx) for lf in leaves}
    z = (0, 0, 0, 0)
    l0 = by.get((0, 0), z)
    l1 = by.get((1, 0), z)
    eax = l1[0]
    base_fam, base_model = eax >> 8 & 0xF, eax >> 4 & 0xF
    family = base_fam + (eax >> 20 & 0xFF if base_fam == 0xF else 0)
    model = base_model | ((eax >> 16 & 0xF) << 4 if base_fam in (6, 0xF) else 0)
    out: dict = {
        "vendor": _s(l0[1], l0[3], l0[2]),
        "max_basic_leaf": l0[0],
        "signature": eax,
        "family": family, "model": model, "stepping": eax & 0xF,
        "brand": _s(*[r for leaf in (0x80000002, 0x80000003, 0x80000004) for r in by.get((leaf, 0), z)]).strip(),
        "apic_id": l1[1] >> 24, "logical_processors": l1[1] >> 16 & 0xFF,
        "clflush_line_size": (l1[1] >> 8 & 0xFF) * 8,
    }
    l7 = by.get((7, 0), z)
    e1 = by.get((0x80000001, 0), z)
    out["features"] = {
        "1:edx": _flags(l1[3], _F1_EDX), "1:ecx": _flags(l1[2], _F1_ECX),
        "7:ebx": _flags(l7[1], _F7_EBX), "7:ecx": _flags(l7[2], _F7_ECX), "7:edx": _flags(l7[3], _F7_EDX),
        "0x80000001:ecx": _flags(e1[2], _FE1_ECX), "0x80000001:edx": _flags(e1[3], _FE1_EDX),
    }
    caches = []
    for leaf in (0x4, 0x8000001D):
        for sub in range(16):
            c = by.get((leaf, sub))
            d = _det_cache(c) if c else None
            if d is None:
                break
            d["leaf"] = f"{leaf:#x}"
            caches.append(d)
        if caches:
            break
    out["caches"] = caches
    tlbs = []
    e5, e6 = by.get((0x80000005, 0)), by.get((0x80000006, 0))
    if e5 and any(e5):
        tlbs += [_amd_l1_tlb(e5[0], "L1 dTLB 2M/4M"), _amd_l1_tlb(e5[0] << 16 & 0xFFFFFFFF, "L1 iTLB 2M/4M"),
                 _amd_l1_tlb(e5[1], "L1 dTLB 4K"), _amd_l1_tlb(e5[1] << 16 & 0xFFFFFFFF, "L1 iTLB 4K")]
        out["l1_amd"] = {"l1d_kb": e5[2] >> 24, "l1d_line": e5[2] & 0xFF, "l1i_kb": e5[3] >> 24, "l1i_line": e5[3] & 0xFF}
    if e6 and any(e6):
        for reg, what in ((e6[0], "L2 TLB 2M/4M"), (e6[1], "L2 TLB 4K")):
            tlbs.append({"what": f"{what} (d)", "entries": reg >> 16 & 0xFFF, "ways_code": reg >> 28})
            tlbs.append({"what": f"{what} (i)", "entries": reg & 0xFFF, "ways_code": reg >> 12 & 0xF})
        out["l2_l3"] = {"l2_kb": e6[2] >> 16, "l2_line": e6[2] & 0xFF, "l3_kb": (e6[3] >> 18) * 512, "l3_line": e6[3] & 0xFF}
    if (2, 0) in by and out["vendor"] == "GenuineIntel":
        out["leaf2_descriptors"] = [f"{b:#04x}" for r in by[(2, 0)] if not r >> 31
                                    for b in struct.pack("<I", r) if b][1:]
    tlbs = [t for t in tlbs if t["entries"]]
    out["tlbs"] = tlbs
    h0 = by.get((0x40000000, 0))
    out["hypervisor"] = None
    if l1[2] >> 31 & 1 and h0:
        hv = {"vendor": _s(h0[1], h0[2], h0[3]), "max_leaf": h0[0]}
        h1 = by.get((0x40000001, 0), z)
        if hv["vendor"].startswith("KVMKVMKVM"):
            names = ["clocksource", "nop_io_delay", "mmu_op", "clocksource2", "async_pf", "steal_time", "pv_eoi",
                     "pv_unhalt", None, "pv_tlb_flush", "async_pf_vmexit", "pv_send_ipi", "poll_control",
                     "pv_sched_yield", "async_pf_int", "msi_ext_dest_id", "hc_map_gpa_range", "migration_control"]
            hv["kvm_features"] = _flags(h1[0], names)
        hv["leaf_0x40000001"] = [f"{r:#010x}" for r in h1]
        out["hypervisor"] = hv
    return out


def render(leaves: list[Leaf], decoded: dict | None = None) -> str:
    """The text ``topology --cpuid`` prints: decoded sections, then the raw leaves."""
    d = decoded or decode(leaves)
    lines = ["CPU:",
             f"   vendor_id = \"{d['vendor']}\"",
             f"   brand = \"{d['brand']}\"",
             f"   (family synth)  = {d['family']:#x} ({d['family']})",
             f"   (model synth)   = {d['model']:#x} ({d['model']})",
             f"   stepping id     = {d['stepping']:#x} ({d['stepping']})",
             f"   signature (1:eax) = {d['signature']:#010x}",
             f"   APIC ID = {d['apic_id']}, logical processors = {d['logical_processors']}, "
             f"CLFLUSH line size = {d['clflush_line_size']} B",
             "feature flags:"]
    for reg, names in d["features"].items():
        lines.append(f"   {reg:<15} " + (" ".join(names) or "-"))
    lines.append("caches:")
    for c in d["caches"]:
        lines.append(f"   L{c['level']} {c['type']:<11} {c['size'] // 1024:>6} KB  {c['ways']:>2}-way  "
                     f"{c['line_size']} B lines  {c['sets']} sets  shared by {c['shared_by_threads']} threads "
                     f"(leaf {c['leaf']})")
    if not d["caches"]:
        lines.append("   (no deterministic cache leaf)")
    lines.append("TLBs:")
    for t in d["tlbs"]:
        ways = t.get("ways", t.get("ways_code"))
        ways = "full" if ways == 0xFF else ways
        lines.append(f"   {t['what']:<22} {t['entries']:>5} entries, ways {ways}")
    if "leaf2_descriptors" in d:
        lines.append("   leaf 2 descriptors: " + " ".join(d["leaf2_descriptors"]))
    if not d["tlbs"] and "leaf2_descriptors" not in d:
        lines.append("   (no TLB leaves)")
    hv = d["hypervisor"]
    lines.append("hypervisor:")
    if hv:
        lines.append(f"   vendor = \"{hv['vendor']}\", max leaf {hv['max_leaf']:#x}")
        if "kvm_features" in hv:
            lines.append("   KVM features (0x40000001:eax) = " + " ".join(hv["kvm_features"]))
    else:
        lines.append("   (none: hypervisor bit clear)")
    lines.append("raw leaves:")
    lines.extend(lf.line() for lf in leaves)
    return "\n".join(lines)
