"""SPE data inside perf.data: AUXTRACE_INFO metadata (per-CPU MIDR) and the
AUXTRACE chunks, read with :class:`pmuscope.perfdata.PerfDataFile`; plus the two
records for writing SPE data into a perf.data file.

Layout (tools/perf/util/arm-spe.h, ``arm_spe_process_auxtrace_info``):
``PERF_RECORD_AUXTRACE_INFO`` = header, ``u32 type`` (4 = PERF_AUXTRACE_ARM_SPE),
``u32 reserved``, ``u64 priv[]``. Version 1 is exactly ``[PMU_TYPE,
PER_CPU_MMAPS]`` (the MIDR then comes from the CPUID header feature); version 2
is ``[HEADER_VERSION=2, HEADER_SIZE, PMU_TYPE_V2, CPUS_NUM]`` followed by
CPUS_NUM blocks ``[MAGIC, CPU, NR_PARAMS, MIDR, PMU_TYPE, MIN_IVAL, ...]`` of
``3 + NR_PARAMS`` words.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator

from ..errors import FormatError, PmuscopeError
from ..kernel import abi
from ..perfdata import Feature, PerfDataFile
from ..perfdata import synth

__all__ = [
    "PERF_AUXTRACE_ARM_SPE",
    "SpeAuxtraceInfo",
    "parse_auxtrace_info",
    "read_auxtrace_info",
    "iter_spe_chunks",
    "decode_perf_data",
    "auxtrace_info_record",
    "auxtrace_record",
    "auxtrace_header_line",
]

#: ``enum auxtrace_type``
AUXTRACE_TYPE_NAMES = {0: "unknown", 1: "Intel PT", 2: "Intel BTS", 3: "CoreSight ETM", 4: "Arm SPE",
                       5: "s390 CPU-MF", 6: "HiSilicon PTT", 7: "VPA DTL"}
PERF_AUXTRACE_ARM_SPE = 4
ARM_SPE_CPU_MAGIC = 0x1010101010101010
ARM_SPE_HEADER_CURRENT_VERSION = 2


@dataclass
class SpeAuxtraceInfo:
    """What ``PERF_RECORD_AUXTRACE_INFO`` says about the SPE session."""

    version: int
    pmu_type: int
    per_cpu_mmaps: int = 0
    #: cpu -> MIDR_EL1 (version 2 only)
    midr: dict[int, int] = field(default_factory=dict)
    #: cpu -> SPE PMU type (2**64-1 when the CPU has none)
    cpu_pmu_type: dict[int, int] = field(default_factory=dict)
    #: cpu -> caps/min_interval
    min_interval: dict[int, int] = field(default_factory=dict)


def parse_auxtrace_info(record: bytes | memoryview, where: str = "AUXTRACE_INFO", base: int = 0) -> SpeAuxtraceInfo:
    """Parse a whole ``PERF_RECORD_AUXTRACE_INFO`` record (header included)."""
    mv = memoryview(record).cast("B")
    if len(mv) < 16:
        raise FormatError(f"{where}: PERF_RECORD_AUXTRACE_INFO at {base:#x} has {len(mv)} bytes, expected at least 16", offset=base)
    (typ,) = struct.unpack_from("<I", mv, 8)
    if typ != PERF_AUXTRACE_ARM_SPE:
        name = AUXTRACE_TYPE_NAMES.get(typ, f"type {typ}")
        raise PmuscopeError(f"{where}: the AUX trace is {name}, not Arm SPE; pmuscope spe decodes Arm SPE only")
    npriv = (len(mv) - 16) // 8
    priv = struct.unpack_from(f"<{npriv}Q", mv, 16)
    if npriv == 2:
        return SpeAuxtraceInfo(version=1, pmu_type=priv[0], per_cpu_mmaps=priv[1])
    if npriv < 4:
        raise FormatError(f"{where}: Arm SPE AUXTRACE_INFO at {base:#x} has {npriv} metadata words, expected 2 or at least 4", offset=base)
    version, hdr_size, pmu_type, ncpus = priv[:4]
    info = SpeAuxtraceInfo(version=version, pmu_type=pmu_type)
    at = hdr_size
    for _ in range(ncpus):
        if at + 3 > npriv:
            raise FormatError(f"{where}: Arm SPE per-CPU metadata runs past the AUXTRACE_INFO record at {base:#x}", offset=base)
        magic, cpu, nparams = priv[at : at + 3]
        if magic != ARM_SPE_CPU_MAGIC:
            raise FormatError(f"{where}: Arm SPE per-CPU metadata magic {magic:#x}, expected {ARM_SPE_CPU_MAGIC:#x}", offset=base + 16 + 8 * at)
        params = priv[at + 3 : at + 3 + nparams]
        if len(params) >= 1:
            info.midr[cpu] = params[0]
        if len(params) >= 2:
            info.cpu_pmu_type[cpu] = params[1]
        if len(params) >= 3:
            info.min_interval[cpu] = params[2]
        at += 3 + nparams
    return info


def read_auxtrace_info(pdf: PerfDataFile) -> SpeAuxtraceInfo | None:
    """The SPE AUXTRACE_INFO of an open perf.data, or None if it has none."""
    for type_, _misc, mv, off in pdf.raw_records():
        if type_ == abi.PERF_RECORD_AUXTRACE_INFO:
            return parse_auxtrace_info(mv, where=pdf.source, base=off)
    return None


def _header_midr(pdf: PerfDataFile) -> int:
    cpuid = pdf.parsed_feature(Feature.CPUID)
    if not cpuid:
        return 0
    try:
        return int(str(cpuid).split(",")[0], 16)
    except ValueError:
        return 0  # not an arm64 cpuid string (e.g. GenuineIntel,6,85,4)


def auxtrace_header_line(buf) -> str:
    """The ``perf report -D`` line of a PERF_RECORD_AUXTRACE (``perf_event__fprintf_auxtrace``)."""
    def x(v: int) -> str:  # C's %#lx prints 0 as "0"
        return f"{v:#x}" if v else "0"

    tid = buf.tid - (1 << 32) if buf.tid >= 1 << 31 else buf.tid
    cpu = buf.cpu - (1 << 32) if buf.cpu >= 1 << 31 else buf.cpu
    return (
        f"{x(buf.file_offset)} [0x30]: PERF_RECORD_AUXTRACE size: {x(buf.size)}  offset: {x(buf.offset)}  "
        f"ref: {x(buf.reference)}  idx: {buf.idx}  tid: {tid}  cpu: {cpu}"
    )


def iter_spe_chunks(path: str, midr: int | None = None) -> Iterator[tuple[int, int, bytes, str]]:
    """``(cpu, midr, data, header line)`` for every AUXTRACE chunk of a perf.data
    holding Arm SPE data. ``midr`` overrides what the file says."""
    with PerfDataFile(path) as pdf:
        info = read_auxtrace_info(pdf)
        if info is None:
            raise PmuscopeError(f"{path}: no PERF_RECORD_AUXTRACE_INFO, so no Arm SPE data (record with -e arm_spe_0//)")
        fallback = _header_midr(pdf)
        for buf in pdf.auxtrace():
            cpu = buf.cpu - (1 << 32) if buf.cpu >= 1 << 31 else buf.cpu
            m = midr if midr is not None else info.midr.get(buf.cpu, fallback)
            yield cpu, m, bytes(buf.data), auxtrace_header_line(buf)


def decode_perf_data(path: str, midr: int | None = None):
    """All SPE records of a perf.data file as one :class:`~pmuscope.spe.SpeRecords`
    (cpu column from each AUXTRACE chunk)."""
    from .records import SpeRecords, decode_records

    return SpeRecords.concat([decode_records(data, cpu=cpu, midr=m) for cpu, m, data, _ in iter_spe_chunks(path, midr)])


# ---------------------------------------------------------------- writing


def auxtrace_info_record(pmu_type: int, midr: dict[int, int] | None = None, *, per_cpu_mmaps: int = 1,
                         min_interval: int = 0, version: int = ARM_SPE_HEADER_CURRENT_VERSION) -> bytes:
    """A ``PERF_RECORD_AUXTRACE_INFO`` for Arm SPE: version 2 with one metadata
    block per CPU of ``midr`` (cpu -> MIDR_EL1), or version 1."""
    if version == 1:
        priv = [pmu_type, per_cpu_mmaps]
    else:
        midr = midr or {}
        priv = [ARM_SPE_HEADER_CURRENT_VERSION, 4, pmu_type, len(midr)]
        for cpu in sorted(midr):
            priv += [ARM_SPE_CPU_MAGIC, cpu, 3, midr[cpu], pmu_type, min_interval]
    return synth.record(abi.PERF_RECORD_AUXTRACE_INFO, 0, struct.pack("<II", PERF_AUXTRACE_ARM_SPE, 0) + struct.pack(f"<{len(priv)}Q", *priv))


def auxtrace_record(data: bytes, *, offset: int = 0, reference: int = 0, idx: int = 0, tid: int = -1, cpu: int = 0) -> bytes:
    """A ``PERF_RECORD_AUXTRACE`` followed by its data, padded to 8 bytes as
    perf record does (the padding is counted in ``size``)."""
    pad = -len(data) % 8
    body = struct.pack("<QQQIiiI", len(data) + pad, offset, reference, idx, tid, cpu, 0)
    return synth.record(abi.PERF_RECORD_AUXTRACE, 0, body) + bytes(data) + bytes(pad)
