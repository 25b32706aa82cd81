"""Build perf.data files holding Arm SPE AUXTRACE data, for comparing
pmuscope's SPE sample synthesis with Linux perf on the same file.

The records are the real captures' records (tests/data/spe: the Neoverse load
record of ``spe_packet_vectors.json``, the WindowsPerf branch record of
``spe-b1-ts1.data`` and quipper's EL2 load and branch) with their packet
order and counter values kept, relocated so their PCs land in functions of
this machine's libc (so both tools name the same symbols), and with event
bits / data sources varied over what those CPUs report (L1D refill, LLC
access/miss, TLB walk, remote access, mispredicts; Neoverse data sources).
"""

from __future__ import annotations

import random
import struct
import subprocess

from pmuscope.kernel import abi
from pmuscope.perfdata import synth
from pmuscope.perfdata.features import Feature
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe.packets import ADDRESS, CONTEXT, COUNTER, DATA_SOURCE, EVENTS, OP_TYPE, TIMESTAMP, encode_packet
from pmuscope.spe.perfdata import auxtrace_info_record, auxtrace_record

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
BASE = 0x7F0000000000
PMU_TYPE = 42
PID = 4242
NEOVERSE_N1 = 0x410FD0C0
FUNCS = ("malloc", "free", "printf", "qsort", "fopen", "puts")
WEIGHTS = (30, 20, 12, 8, 5, 3)
S = abi.PerfSample


def libc_symbols() -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "--defined-only", LIBC], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWw":
            syms.setdefault(parts[2].split("@")[0], int(parts[0], 16))
    return {f: syms[f] for f in FUNCS}


def _load(rng, pc, store=False) -> bytes:
    # the Neoverse load record's packets (spe_packet_vectors.json), events and source varied
    ev = 0x02 | 0x04 | 0x10  # RETIRED L1D-ACCESS TLB-ACCESS (as captured)
    src = 0
    r = rng.random()
    if r < 0.4:
        ev |= 0x08  # L1D refill
        src = rng.choice([8, 9, 10, 11, 12, 13, 14])
        if src >= 11 or rng.random() < 0.5:
            ev |= 0x100  # LLC access
            if src in (13, 14) or rng.random() < 0.3:
                ev |= 0x200  # LLC miss
        if src == 13:
            ev |= 0x400  # remote access
    if rng.random() < 0.15:
        ev |= 0x20  # TLB walk
    va = 0xAAAAE65DDA43 + rng.randrange(1 << 20) * 8
    pkts = [encode_packet(ADDRESS, 0, pc | 1 << 63),
            encode_packet(CONTEXT, 1, PID),
            encode_packet(OP_TYPE, 1, 0x01 if store else 0x00),
            encode_packet(EVENTS, 0, ev, payload_len=2),
            encode_packet(COUNTER, 1, 4),
            encode_packet(COUNTER, 0, 8 + rng.randrange(300)),
            encode_packet(ADDRESS, 2, va),
            encode_packet(COUNTER, 2, 1),
            encode_packet(ADDRESS, 3, (0x8032C955A43 + (va & 0xFFFFF)) | 1 << 63),
            encode_packet(DATA_SOURCE, 0, src, payload_len=2)]
    return b"".join(pkts)


def _branch(rng, pc) -> bytes:
    # the WindowsPerf branch record (spe-b1-ts1.data): B COND, EV RETIRED, LAT 41/42, TGT
    ev = 0x02 | (0x80 if rng.random() < 0.3 else 0) | (0x40 if rng.random() < 0.4 else 0)
    return b"".join([encode_packet(ADDRESS, 0, pc | 1 << 63), encode_packet(CONTEXT, 1, PID),
                     encode_packet(OP_TYPE, 2, 0x01), encode_packet(EVENTS, 0, ev, payload_len=2),
                     encode_packet(COUNTER, 1, 41), encode_packet(COUNTER, 0, 42),
                     encode_packet(ADDRESS, 1, (pc + 0x28) | 1 << 63)])


def _other(rng, pc) -> bytes:
    return b"".join([encode_packet(ADDRESS, 0, pc | 1 << 63), encode_packet(CONTEXT, 1, PID),
                     encode_packet(OP_TYPE, 0, 0x00), encode_packet(EVENTS, 0, 0x02, payload_len=2),
                     encode_packet(COUNTER, 0, 5)])


def spe_stream(rng: random.Random, n: int, syms: dict[str, int], t0: int) -> bytes:
    out = []
    for i in range(n):
        f = rng.choices(FUNCS, WEIGHTS)[0]
        pc = BASE + syms[f] + 4 * rng.randrange(16)
        kind = rng.random()
        body = _load(rng, pc) if kind < 0.55 else _load(rng, pc, True) if kind < 0.7 else _branch(rng, pc) if kind < 0.9 \
            else _other(rng, pc)
        out.append(body + encode_packet(TIMESTAMP, 0, t0 + 100 * i))
    return b"".join(out)


def build(path, *, seed: int = 1, records: int = 400, cpus=(0, 1), with_pmu_event: bool = False,
          auxtrace_feature: bool = True) -> dict:
    """Write the file; returns what it holds. The SPE attr has no
    PERF_SAMPLE_TIME, so perf decodes it "timeless" (no TIME_CONV needed)."""
    rng = random.Random(seed)
    syms = libc_symbols()
    spe_attr = abi.perf_event_attr(type=PMU_TYPE, config=0x1, sample_period=1,
                                   sample_type=S.IP | S.TID | S.CPU | S.IDENTIFIER, sample_id_all=1,
                                   exclude_guest=1, disabled=1)
    clock_attr = abi.perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=0, sample_period=100000,
                                     sample_type=S.IP | S.TID | S.CPU | S.PERIOD | S.IDENTIFIER, sample_id_all=1)
    w = PerfDataWriter(path)
    w.features[Feature.CPUID] = f"0x{NEOVERSE_N1:016x}"
    w.features[Feature.ARCH] = "aarch64"
    if auxtrace_feature:
        w.features[Feature.AUXTRACE] = []  # an empty auxtrace index: perf reads the AUXTRACE records in order
    w.add_attr(spe_attr, [1, 2], name="arm_spe_0//")
    if with_pmu_event:
        w.add_attr(clock_attr, [11, 12], name="cpu-clock")
    tr = lambda cpu, sid: struct.pack("<IIIIQ", PID, PID, cpu, 0, sid)  # noqa: E731  sample_id: TID CPU IDENTIFIER
    w.write_record(synth.comm(PID, PID, "spe-demo", sample_id=tr(0, 1)))
    w.write_record(synth.mmap2(PID, PID, BASE, 0x1D0000, 0, LIBC, sample_id=tr(0, 1)))
    w.write_record(auxtrace_info_record(PMU_TYPE, version=1))
    clock = []
    for cpu in cpus:
        data = spe_stream(rng, records, syms, 1000 + cpu)
        w.write_record(auxtrace_record(data, cpu=cpu, tid=PID, idx=cpu))
        if with_pmu_event:
            for i in range(50):
                f = rng.choices(FUNCS, WEIGHTS[::-1])[0]
                ip = BASE + syms[f] + 8
                clock.append(f)
                w.write_record(synth.record(abi.PERF_RECORD_SAMPLE, abi.PERF_RECORD_MISC_USER,
                                            struct.pack("<QQIIIIQ", 11 + cpu, ip, PID, PID, cpu, 0, 100000)))
    w.write_record(synth.exit(PID, 1, PID, 1, sample_id=tr(1, 2)))
    w.close()
    return {"pid": PID, "symbols": syms, "clock_samples": clock}
