"""Arm SPE decode throughput in MB/s of SPE data (ratios measured in one run).

Builds a large, realistic AUX buffer from the real records we have (the two
Neoverse EL2 records of quipper's SampleSPEPackets, the load record of Arm's
spe-parser vectors, the WindowsPerf branch record), varying PCs, data
addresses, latencies, events, data sources and timestamps per record, with
the PAD runs of the originals and now and then a longer PAD run (an AUX
buffer's unused tail) and a bad byte.

Measures MB/s of:

* ``decode_packets`` (columnar packet arrays),
* ``decode_records`` (packets + records table, the path ``pmuscope spe -o`` uses),
* ``spe_parser_tables`` (records -> ldst/br/other columns with hex strings),
* the pure-Python reference decoder ``iter_packets`` (perf's byte-at-a-time walk),
* ``dump_lines`` (the ``perf report -D`` text) and, when Linux perf is
  installed, ``perf report -D`` itself on a perf.data holding the same data.

    python benchmarks/bench_spe.py [--mb 64] [--rounds 3] [--cpu-time]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

from pmuscope.spe import decode_packets, decode_records, dump_lines, iter_packets, spe_parser_tables

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data", "spe")


def _templates() -> list[tuple[bytes, list[tuple[int, int]]]]:
    """(record bytes, [(offset, length)] of fields to vary)."""
    import json

    quipper = open(os.path.join(DATA, "arm_spe_decoder_test.SampleSPEPackets.bin"), "rb").read()
    vec = json.load(open(os.path.join(DATA, "spe_packet_vectors.json")))
    load = bytes.fromhex(vec["records"][0]["hex"])
    load = load[9:] + load[:9]  # TS closes the record
    branch = open(os.path.join(DATA, "spe-b1-ts1.data"), "rb").read()
    return [
        # EL2 load: PC, events, issue/total latency, VA, xlat latency, data source, TS
        (quipper[:64], [(1, 4), (0x16, 1), (0x19, 1), (0x1C, 1), (0x1F, 5), (0x28, 1), (0x34, 1), (0x38, 5)]),
        # EL2 branch: PC, issue/total latency, target, TS
        (quipper[64:], [(1, 4), (0x19, 1), (0x1C, 1), (0x1F, 4), (0x38, 5)]),
        # EL0 load with PA and data source (TS moved to the end: it closes the record)
        (load, [(1, 4), (15, 1), (18, 1), (21, 4), (33, 4), (42, 1), (45, 5)]),
        # EL0 branch (WindowsPerf)
        (branch, [(1, 3), (0x19, 1), (0x1C, 1), (0x1F, 3), (0x38, 5)]),
    ]


def build(mb: float, seed: int = 1) -> bytes:
    rng = np.random.default_rng(seed)
    templates = _templates()
    target = int(mb * 1e6)
    # build a pool of varied records, then tile them (variety without a Python loop per MB)
    pool = []
    for _ in range(4096):
        tpl, fields = templates[int(rng.integers(0, len(templates)))]
        rec = bytearray(tpl)
        for off, n in fields:
            if n:
                rec[off : off + n] = rng.integers(1, 256, n, dtype=np.uint8).tobytes()
        pool.append(bytes(rec))
        if rng.random() < 0.01:
            pool.append(bytes(int(rng.integers(64, 2048))))  # unused tail of a buffer
        if rng.random() < 0.002:
            pool.append(b"\x05")  # a bad byte
    block = b"".join(pool)
    reps = target // len(block) + 1
    return (block * reps)[:target]


CLOCK = time.perf_counter


def _best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return min(times)


def _perf_dump_seconds(raw: bytes) -> float | None:
    perf = shutil.which("perf")
    if not perf:
        return None
    from pmuscope.kernel import abi
    from pmuscope.perfdata.writer import PerfDataWriter
    from pmuscope.spe.perfdata import auxtrace_info_record, auxtrace_record

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spe.data")
        with PerfDataWriter(path, host=False) as w:
            w.add_attr(abi.perf_event_attr(type=42, sample_period=1, sample_type=abi.PERF_SAMPLE_IP), [1], name="arm_spe_0//")
            w.write_record(auxtrace_info_record(42, version=1))
            step = 4 << 20
            for i in range(0, len(raw), step):
                w.write_record(auxtrace_record(raw[i : i + step], offset=i, cpu=0))
        t0 = time.perf_counter()
        with open(os.devnull, "w") as devnull:
            r = subprocess.run([perf, "report", "-D", "-i", path], stdout=devnull, stderr=subprocess.DEVNULL, timeout=600)
        dt = time.perf_counter() - t0
        return dt if r.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=64.0, help="size of the synthesized SPE buffer (MB)")
    ap.add_argument("--ref-mb", type=float, default=4.0, help="slice for the pure-Python and text references (MB)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu-time", action="store_true", help="time with process CPU time (steadier on a busy machine); perf is always wall time")
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time

    raw = build(args.mb)
    mb = len(raw) / 1e6
    small = raw[: int(args.ref_mb * 1e6)]
    smb = len(small) / 1e6

    recs = decode_records(raw)
    npk = len(decode_packets(small))
    print(f"SPE buffer: {mb:.1f} MB, {len(recs):,} records ({len(recs) / mb:,.0f}/MB), "
          f"{len(recs.bad_offsets)} bad bytes; packets in {smb:.0f} MB slice: {npk:,}")

    t_pk = _best(lambda: decode_packets(raw), args.rounds)
    t_rec = _best(lambda: decode_records(raw), args.rounds)
    t_tab = _best(lambda: spe_parser_tables(recs), 1)
    t_ref = _best(lambda: sum(1 for _ in iter_packets(small)), 1)
    t_txt = _best(lambda: sum(1 for _ in dump_lines(small)), 1)

    rows = [
        ("decode_packets (columnar)", mb / t_pk),
        ("decode_records (packets + records)", mb / t_rec),
        ("spe_parser_tables (strings)", mb / t_tab),
        ("iter_packets (pure-Python reference)", smb / t_ref),
        ("dump_lines (perf -D text)", smb / t_txt),
    ]
    t_perf = _perf_dump_seconds(small) if not args.cpu_time else None
    if t_perf:
        rows.append(("perf report -D (Linux perf, C)", smb / t_perf))
    ref = smb / t_ref
    for name, rate in rows:
        print(f"  {name:40s} {rate:9.1f} MB/s   x{rate / ref:6.1f} vs pure Python")
    if t_perf:
        print(f"  dump text: pmuscope {smb / t_txt:.1f} MB/s vs perf {smb / t_perf:.1f} MB/s "
              f"(ratio {(smb / t_txt) / (smb / t_perf):.2f})")
    print(f"records/s (decode_records): {len(recs) / t_rec:,.0f}")


if __name__ == "__main__":
    main()
