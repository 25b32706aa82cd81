"""Record decoding throughput (ratios measured in one run).

Builds a buffer of ~150k PERF_RECORD_SAMPLE records with
IP|TID|TIME|PERIOD|CALLCHAIN and ~3 call-chain entries (the shape of
``perf record -g`` on a Python loop: PERF_CONTEXT_USER + 2-4 frames), with a
few side-band records (COMM, MMAP2, FINISHED_ROUND) mixed in, split into
~1 MiB chunks the way a ring buffer or perf.data reader hands them over.

Measures samples/s of:

* ``pmuscope.records.decode`` (columnar SampleBatch, all fields + call chains),
* a naive per-record ``struct.unpack_from`` loop building Python lists (the
  reference, measured in the same run),

and prints the ratio. For context: ``perf script`` does ~250-300k samples/s
on this kind of file on the development VM (default fields + call chains, with
symbolization; see the perf reference notes, section 5b) — decoding is only
its first stage.

With Linux ``perf`` installed it also records a real file (``perf record -F
10000 -g -e cpu-clock`` of a busy Python loop, or ``--perf-file FILE``) and
times, in the same run, ``perf script`` (default output, and ``-F
ip,tid,time,period`` which skips most formatting) against
``pmuscope.records.decode`` of that file's data section.

    python benchmarks/bench_decode.py [--samples N] [--rounds R] [--perf-file F | --no-perf]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

from pmuscope.kernel import abi
from pmuscope.records import AttrTable, DecodeStats, SampleBatch, decode

S = abi.PerfSample
SAMPLE_TYPE = S.IP | S.TID | S.TIME | S.PERIOD | S.CALLCHAIN


def build(n: int, seed: int = 1) -> tuple[list[bytes], int]:
    rng = np.random.default_rng(seed)
    depths = rng.integers(2, 5, size=n)  # 2..4 user frames + PERF_CONTEXT_USER marker ~ 4 entries; mean 3 frames
    ips = rng.integers(0x400000, 0x500000, size=n)
    hdr = struct.Struct("<IHH")
    fixed = struct.Struct("<QIIQQQ")
    out = bytearray()
    chunks = []
    t = 1_000_000
    for k in range(n):
        d = int(depths[k])
        ip = int(ips[k])
        frames = [abi.PERF_CONTEXT_USER, ip] + [0x400000 + 16 * j for j in range(d - 1)]
        body = fixed.pack(ip, 4242, 4242, t, 250_000, len(frames)) + struct.pack(f"<{len(frames)}Q", *frames)
        out += hdr.pack(abi.PERF_RECORD_SAMPLE, abi.PERF_RECORD_MISC_USER, 8 + len(body)) + body
        t += 250_000
        if k % 20_000 == 0:
            name = b"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\0"
            name += b"\0" * (-len(name) % 8)
            mm = struct.pack("<IIQQQIIQQII", 4242, 4242, 0x7F0000000000 + k, 0x1000, 0, 8, 1, k, 0, 5, 2) + name
            out += hdr.pack(abi.PERF_RECORD_MMAP2, abi.PERF_RECORD_MISC_USER, 8 + len(mm)) + mm
            out += hdr.pack(abi.PERF_RECORD_FINISHED_ROUND, 0, 8)
        if len(out) >= 1 << 20:
            chunks.append(bytes(out))
            out = bytearray()
    if out:
        chunks.append(bytes(out))
    return chunks, n


def naive(chunks: list[bytes]) -> int:
    """One Python object per sample: the per-record struct loop."""
    hdr = struct.Struct("<IHH")
    fixed = struct.Struct("<QIIQQQ")
    ips, pids, tids, times, periods, chains = [], [], [], [], [], []
    for buf in chunks:
        off, n = 0, len(buf)
        while off < n:
            t, misc, size = hdr.unpack_from(buf, off)
            if t == 9:
                ip, pid, tid, tm, period, nr = fixed.unpack_from(buf, off + 8)
                chain = struct.unpack_from(f"<{nr}Q", buf, off + 48)
                ips.append(ip)
                pids.append(pid)
                tids.append(tid)
                times.append(tm)
                periods.append(period)
                chains.append(chain)
            off += size
    return len(ips)


def columnar(chunks: list[bytes], table: AttrTable) -> int:
    stats = DecodeStats()
    n = 0
    for i, buf in enumerate(chunks):
        for item in decode(buf, table, stats=stats):
            if isinstance(item, SampleBatch):
                n += len(item)
    return n


def read_perf_data(path: str) -> tuple[AttrTable, bytes, int]:
    """Attrs and data section of a file-mode perf.data (just enough header)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, _hsize, attr_size = struct.unpack_from("<8sQQ", data, 0)
    if magic != b"PERFILE2":
        raise SystemExit(f"{path}: not a little-endian file-mode perf.data")
    a_off, a_size, d_off, d_size = struct.unpack_from("<QQQQ", data, 24)
    entries = []
    for i in range(a_size // attr_size):
        base = a_off + i * attr_size
        raw = data[base : base + attr_size - 16]
        attr = abi.attr_from_bytes(raw, struct.unpack_from("<I", raw, 4)[0] or len(raw))
        ids_off, ids_size = struct.unpack_from("<QQ", data, base + attr_size - 16)
        entries.append((attr, list(struct.unpack_from(f"<{ids_size // 8}Q", data, ids_off))))
    return AttrTable(entries), data[d_off : d_off + d_size], d_off


def bench_real_file(path: str, rounds: int) -> None:
    table, data, base = read_perf_data(path)
    chunk = 1 << 20
    # split at record boundaries into ~1 MiB chunks, as a reader streaming the file would
    pieces, off, start = [], 0, 0
    hdr = struct.Struct("<IHH")
    while off < len(data):
        size = hdr.unpack_from(data, off)[2]
        if off + size - start > chunk:
            pieces.append((base + start, data[start:off]))
            start = off
        off += size
    pieces.append((base + start, data[start:]))

    def ours() -> int:
        stats = DecodeStats()
        for b, piece in pieces:
            for _ in decode(piece, table, base_offset=b, stats=stats):
                pass
        return stats.samples

    n = ours()
    env = dict(os.environ, LC_ALL="C")

    def perf_script(*extra: str) -> float:
        t0 = time.perf_counter()
        subprocess.run(["perf", "script", "-i", path, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, env=env)
        return time.perf_counter() - t0

    t_ours, t_ps, t_psf = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ours()
        t_ours.append(time.perf_counter() - t0)
        t_ps.append(perf_script())
        t_psf.append(perf_script("-F", "ip,tid,time,period"))
    o, p, pf = (statistics.median(x) for x in (t_ours, t_ps, t_psf))
    print(f"\nreal file {path}: {n} samples, {len(data) / 1e6:.1f} MB data section, {len(data) / max(n, 1):.0f} bytes/sample")
    print(f"pmuscope.records.decode:             {n / o / 1e6:6.2f} M samples/s  ({o * 1e3:7.1f} ms)")
    print(f"perf script (default, same run):     {n / p / 1e6:6.2f} M samples/s  ({p * 1e3:7.1f} ms)  -> decode is {p / o:5.1f}x faster")
    print(f"perf script -F ip,tid,time,period:   {n / pf / 1e6:6.2f} M samples/s  ({pf * 1e3:7.1f} ms)  -> decode is {pf / o:5.1f}x faster")
    print("(perf script also symbolizes and formats text; this compares the decode stage only)")


def record_real_file(seconds: float) -> str | None:
    if shutil.which("perf") is None:
        print("\n(no perf binary: skipping the real-file comparison)")
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="pmuscope-bench-"), "perf.data")
    cmd = ["perf", "record", "-q", "-F", "10000", "-g", "-e", "cpu-clock", "-o", path, "--",
           sys.executable, "-m", "pmuscope.workloads", "busy", str(seconds)]
    print(f"\nrecording {' '.join(cmd[:9])} ... busy {seconds}")
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0 or not os.path.exists(path):
        print(f"(perf record failed: {r.stderr.strip()[:200]}; skipping the real-file comparison)")
        return None
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=150_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--perf-file", help="a file-mode perf.data to compare against perf script")
    ap.add_argument("--no-perf", action="store_true", help="skip the real perf.data comparison")
    ap.add_argument("--record-seconds", type=float, default=22.0, help="length of the recorded workload (~7k samples/s on the VM)")
    args = ap.parse_args()
    chunks, n = build(args.samples)
    table = AttrTable([(abi.perf_event_attr(sample_type=SAMPLE_TYPE), [])], ["cpu-clock"])
    size = sum(len(c) for c in chunks)
    print(f"buffer: {n} samples, {size / 1e6:.1f} MB in {len(chunks)} chunks, {size / n:.0f} bytes/sample")
    assert columnar(chunks, table) == n == naive(chunks)
    t_col, t_naive = [], []
    for _ in range(args.rounds):  # interleaved
        t0 = time.perf_counter()
        columnar(chunks, table)
        t_col.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        naive(chunks)
        t_naive.append(time.perf_counter() - t0)
    col, nav = statistics.median(t_col), statistics.median(t_naive)
    print(f"pmuscope.records.decode (columnar): {n / col / 1e6:6.2f} M samples/s  ({col * 1e3:6.1f} ms, median of {args.rounds})")
    print(f"naive per-record struct loop:       {n / nav / 1e6:6.2f} M samples/s  ({nav * 1e3:6.1f} ms)")
    print(f"ratio columnar / naive:             {nav / col:6.2f}x")
    print(f"vs perf script's ~0.25-0.30 M samples/s here (reference notes 5b): {n / col / 0.275e6:5.1f}x")
    if not args.no_perf:
        path = args.perf_file or record_real_file(args.record_seconds)
        if path:
            try:
                bench_real_file(path, max(3, args.rounds // 2 + 1))
            finally:
                if not args.perf_file:
                    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    main()
