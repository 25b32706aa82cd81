"""CPU identity: vendor/family/model/stepping on x86, MIDR_EL1 on Arm, and the
CPUID string perf uses to pick its pmu-events tables.

On x86 pure Python cannot execute the ``cpuid`` instruction, so identity comes
from ``/proc/cpuinfo``. Note that the kernel already folds the *extended*
family and model fields into what it prints there (``arch/x86/kernel/cpu/common.c``,
``x86_family()``/``x86_model()``): ``cpu family`` is base family + extended
family when the base is 0xF, and ``model`` is base model + (extended model << 4)
when the family is 6 or above. So ``cpu family: 25``, ``model: 17`` is AMD
Zen 4 (Genoa, 0x19/0x11) and ``cpu family: 6``, ``model: 143`` is Intel
Sapphire Rapids (0x8F). :attr:`CpuIdentity.signature` rebuilds the raw
CPUID leaf 1 EAX from those values.

On arm64 the kernel exports each CPU's ``MIDR_EL1`` at
``/sys/devices/system/cpu/cpuN/regs/identification/midr_el1``
(Documentation/arch/arm64/cpu-feature-registers.rst).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from . import _fs

#: MIDR_EL1 implementer codes (Arm ARM, D19.2 MIDR_EL1; arch/arm64/include/asm/cputype.h)
MIDR_IMPLEMENTERS: dict[int, str] = {
    0x41: "Arm",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x53: "Samsung",
    0x61: "Apple",
    0x69: "Intel",
    0x6D: "Microsoft",
    0xC0: "Ampere",
}

#: (implementer, part number) → core name (arch/arm64/include/asm/cputype.h)
MIDR_PARTS: dict[tuple[int, int], str] = {
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD04): "Cortex-A35",
    (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse N1",
    (0x41, 0xD0D): "Cortex-A77",
    (0x41, 0xD40): "Neoverse V1",
    (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1",
    (0x41, 0xD46): "Cortex-A510",
    (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2",
    (0x41, 0xD49): "Neoverse N2",
    (0x41, 0xD4A): "Neoverse E1",
    (0x41, 0xD4B): "Cortex-A78C",
    (0x41, 0xD4D): "Cortex-A715",
    (0x41, 0xD4E): "Cortex-X3",
    (0x41, 0xD4F): "Neoverse V2",
    (0x41, 0xD80): "Cortex-A520",
    (0x41, 0xD81): "Cortex-A720",
    (0x41, 0xD82): "Cortex-X4",
    (0x41, 0xD83): "Neoverse V3AE",
    (0x41, 0xD84): "Neoverse V3",
    (0x41, 0xD8E): "Neoverse N3",
    (0x43, 0x0AF): "ThunderX2",
    (0x46, 0x001): "A64FX",
    (0x48, 0xD01): "TaiShan v110 (Kunpeng 920)",
    (0x4E, 0x004): "Carmel",
    (0x51, 0x800): "Kryo 2xx Gold",
    (0x51, 0x801): "Kryo 2xx Silver",
    (0x61, 0x022): "M1 Icestorm",
    (0x61, 0x023): "M1 Firestorm",
    (0xC0, 0xAC3): "AmpereOne",
}


@dataclass(frozen=True)
class Midr:
    """A decoded ``MIDR_EL1`` (bits: implementer[31:24] variant[23:20]
    architecture[19:16] partnum[15:4] revision[3:0])."""

    value: int

    @property
    def implementer(self) -> int:
        return (self.value >> 24) & 0xFF

    @property
    def variant(self) -> int:
        return (self.value >> 20) & 0xF

    @property
    def architecture(self) -> int:
        return (self.value >> 16) & 0xF

    @property
    def part(self) -> int:
        return (self.value >> 4) & 0xFFF

    @property
    def revision(self) -> int:
        return self.value & 0xF

    @property
    def implementer_name(self) -> str:
        return MIDR_IMPLEMENTERS.get(self.implementer, f"implementer {self.implementer:#04x}")

    @property
    def part_name(self) -> str | None:
        return MIDR_PARTS.get((self.implementer, self.part))

    @property
    def name(self) -> str:
        """e.g. ``"Arm Neoverse N1 r3p1"`` (rVpR is variant/revision)."""
        part = self.part_name or f"part {self.part:#05x}"
        return f"{self.implementer_name} {part} r{self.variant}p{self.revision}"

    @property
    def perf_cpuid(self) -> str:
        """The string perf's arm64 ``get_cpuid_str()`` returns: the 64-bit MIDR
        as ``0x%016lx`` (tools/perf/arch/arm64/util/header.c)."""
        return f"0x{self.value:016x}"

    @property
    def perf_cpuid_masked(self) -> str:
        """The MIDR with variant and revision cleared, the form most entries of
        perf's ``pmu-events/arch/arm64/mapfile.csv`` match against."""
        return f"0x{self.value & ~0x00F0000F:016x}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": f"{self.value:#x}",
            "implementer": self.implementer,
            "implementer_name": self.implementer_name,
            "variant": self.variant,
            "architecture": self.architecture,
            "part": self.part,
            "part_name": self.part_name,
            "revision": self.revision,
            "name": self.name,
        }


@dataclass(frozen=True)
class CpuIdentity:
    """What CPU this is. On x86 ``vendor``/``family``/``model``/``stepping``
    (family and model already include the extended fields); on Arm ``midr``."""

    arch: str
    vendor: str
    model_name: str = ""
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    microcode: str | None = None
    flags: tuple[str, ...] = ()
    midr: Midr | None = None

    @property
    def hypervisor(self) -> bool:
        """The CPUID hypervisor-present bit (leaf 1 ECX[31]), as the kernel's
        ``hypervisor`` flag. Arm has no such bit: False there."""
        return "hypervisor" in self.flags

    @property
    def signature(self) -> int | None:
        """CPUID leaf 1 EAX rebuilt from family/model/stepping (x86 only)."""
        if self.family is None or self.model is None or self.stepping is None:
            return None
        base_family = min(self.family, 0xF)
        ext_family = self.family - 0xF if self.family >= 0xF else 0
        if self.family >= 6:
            base_model, ext_model = self.model & 0xF, self.model >> 4
        else:
            base_model, ext_model = self.model, 0
        return self.stepping | base_model << 4 | base_family << 8 | ext_model << 16 | ext_family << 20

    @property
    def perf_cpuid(self) -> str | None:
        """The CPUID string perf prints as ``Using CPUID ...`` and matches in
        pmu-events' mapfile.csv: ``GenuineIntel-6-8F-8`` on x86 (family in
        decimal, model and stepping in hex; tools/perf/arch/x86/util/header.c),
        the MIDR on arm64."""
        if self.midr is not None:
            return self.midr.perf_cpuid
        if self.family is None or self.model is None:
            return None
        return f"{self.vendor}-{self.family}-{self.model:X}-{(self.stepping or 0):X}"

    @property
    def perf_header_cpuid(self) -> str | None:
        """The form perf writes into perf.data's CPUID header feature on x86
        (``GenuineIntel,6,143,8``)."""
        if self.midr is not None:
            return self.midr.perf_cpuid
        if self.family is None or self.model is None:
            return None
        return f"{self.vendor},{self.family},{self.model},{self.stepping or 0}"

    def matches_perf_mapfile(self, mapcpuid: str) -> bool:
        """Whether a key of perf's ``pmu-events/arch/<arch>/mapfile.csv``
        selects this CPU, with perf's rules (see :func:`perf_cpuid_matches`)."""
        cpuid = self.perf_cpuid
        return cpuid is not None and perf_cpuid_matches(mapcpuid, cpuid)

    @property
    def description(self) -> str:
        if self.midr is not None:
            return self.midr.name
        fam = "" if self.family is None else f" (family {self.family:#x} model {self.model:#x} stepping {self.stepping})"
        return f"{self.model_name or self.vendor}{fam}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = list(self.flags)
        d["midr"] = self.midr.to_dict() if self.midr else None
        d.update(
            hypervisor=self.hypervisor,
            signature=None if self.signature is None else f"{self.signature:#x}",
            perf_cpuid=self.perf_cpuid,
            description=self.description,
        )
        return d


_POSIX_CLASSES = {
    "[:xdigit:]": "0-9A-Fa-f",
    "[:digit:]": "0-9",
    "[:alpha:]": "A-Za-z",
    "[:alnum:]": "0-9A-Za-z",
    "[:upper:]": "A-Z",
    "[:lower:]": "a-z",
}


def perf_cpuid_matches(mapcpuid: str, cpuid: str) -> bool:
    """perf's ``strcmp_cpuid_str()`` == 0, for a mapfile.csv key and a CPUID string.

    x86 (tools/perf/arch/x86/util/header.c): the key is a POSIX extended
    regex that must match the whole CPUID; when the key has no stepping
    (fewer than three ``-``) the CPUID's stepping is ignored.
    arm64 (tools/perf/arch/arm64/util/header.c): MIDRs compare equal without
    variant/revision, and the CPU's rNpM must be >= the key's."""
    if mapcpuid.startswith("0x") and cpuid.startswith("0x"):
        try:
            key, mine = int(mapcpuid, 16), int(cpuid, 16)
        except ValueError:
            return False
        mask = ~0x00F0000F
        if key & mask != mine & mask:
            return False
        return (mine >> 20 & 0xF, mine & 0xF) >= (key >> 20 & 0xF, key & 0xF)
    full_key, full_id = mapcpuid.count("-") == 3, cpuid.count("-") == 3
    if full_key and not full_id:
        return False
    pattern = mapcpuid
    for posix, py in _POSIX_CLASSES.items():
        pattern = pattern.replace(posix, py)
    target = cpuid[: cpuid.rindex("-")] if full_id and not full_key else cpuid
    try:
        # POSIX takes the longest leftmost match; a full match exists iff fullmatch finds one
        return re.fullmatch(pattern, target) is not None
    except re.error:
        return False


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            cur[key.strip()] = value.strip()
    if cur:
        blocks.append(cur)
    return blocks


def _int(value: str | None, base: int = 0) -> int | None:
    if value is None:
        return None
    try:
        return int(value, base)
    except ValueError:
        return None


def read_midr(root: str = "/", cpu: int | None = None) -> Midr | None:
    """MIDR_EL1 of ``cpu`` (default: the first CPU that exports one)."""
    cpus = [cpu] if cpu is not None else _fs.numbered(_fs.listdir(root, "sys/devices/system/cpu"), "cpu")
    for c in cpus:
        value = _fs.read_int(root, f"sys/devices/system/cpu/cpu{c}/regs/identification/midr_el1", 16)
        if value is not None:
            return Midr(value)
    return None


def read_cpu_identity(root: str = "/", arch: str | None = None) -> CpuIdentity:
    """Identify the CPU from ``<root>/proc/cpuinfo`` (and MIDR from sysfs on Arm).

    ``arch`` is guessed from what the files contain when not given."""
    text = _fs.read_text(root, "proc/cpuinfo") or ""
    blocks = _cpuinfo_blocks(text)
    first = next((b for b in blocks if "processor" in b), blocks[0] if blocks else {})
    header = blocks[0] if blocks else {}
    midr = read_midr(root)
    if midr is None and "CPU implementer" in first:
        impl, var = _int(first.get("CPU implementer")), _int(first.get("CPU variant"))
        part, rev = _int(first.get("CPU part")), _int(first.get("CPU revision"), 10)
        if None not in (impl, var, part, rev):
            midr = Midr(impl << 24 | var << 20 | 0xF << 16 | part << 4 | rev)  # type: ignore[operator]
    if "vendor_id" in first or arch in ("x86_64", "i686", "i386"):
        flags = tuple(first.get("flags", "").split())
        return CpuIdentity(
            arch=arch or "x86_64",
            vendor=first.get("vendor_id", "unknown"),
            model_name=first.get("model name", ""),
            family=_int(first.get("cpu family"), 10),
            model=_int(first.get("model"), 10),
            stepping=_int(first.get("stepping"), 10),
            microcode=first.get("microcode"),
            flags=flags,
        )
    if midr is not None or arch in ("aarch64", "arm64"):
        feats = tuple((first.get("Features") or header.get("Features") or "").split())
        return CpuIdentity(
            arch=arch or "aarch64",
            vendor=midr.implementer_name if midr else "unknown",
            model_name=(midr.part_name or "") if midr else "",
            flags=feats,
            midr=midr,
        )
    return CpuIdentity(arch=arch or "unknown", vendor=first.get("vendor_id", "unknown"), model_name=first.get("model name", first.get("cpu", "")))
