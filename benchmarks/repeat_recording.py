"""Make a large pipe-mode perf.data from a real one by repeating its records.

    python benchmarks/repeat_recording.py IN.data OUT.data --times 4.5
    python benchmarks/repeat_recording.py IN.pipe OUT.pipe --times 4.5

A recording of N million samples takes this VM a long time to make (the
kernel's cost per cpu-clock sample here is 14-21 µs, and the sample rate
falls under load), so the reader benchmarks' largest files are built from a
real recording: its header records (attributes, features) once, then its
kernel records k times over (the last repetition cut to the fraction), each
repetition's timestamps shifted by the recording's span, so the result is
time-ordered and both Linux perf and pmuscope read it as one longer run of
the same program. FORK records are kept in the first repetition only and
EXIT records in the last, so each task lives once, and the side-band
perf synthesizes at time 0 (the maps and comms of running tasks) once. The input must be
one sample layout for every event; file mode or pipe mode (perf 6.1's
``perf inject`` cannot turn a pipe-mode file back into file mode, so
each mode is repeated as it is).
"""

from __future__ import annotations

import argparse
import struct
import sys

HDR = struct.Struct("<IHH")
SAMPLE, FORK, EXIT, FINISHED_ROUND = 9, 7, 4, 68
USER_TYPES = 64  # perf's synthesized records (attrs, features, rounds) and beyond
IDENTIFIER, IP, TID, TIME, ID, CPU, STREAM_ID = 1 << 16, 1 << 0, 1 << 1, 1 << 2, 1 << 6, 1 << 7, 1 << 9


def layout(attr: bytes) -> tuple[int, int | None]:
    """(offset of a sample's time, offset of the time from the end of a
    non-sample record or None) for one perf_event_attr."""
    sample_type = struct.unpack_from("<Q", attr, 24)[0]
    flags = struct.unpack_from("<Q", attr, 40)[0]
    if not sample_type & TIME:
        raise SystemExit("the recording has no timestamps: nothing to shift")
    off = 8 + 8 * sum(bool(sample_type & b) for b in (IDENTIFIER, IP, TID))
    tail = None
    if flags & (1 << 18):  # sample_id_all: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER at the end
        tail = 8 * (1 + sum(bool(sample_type & b) for b in (ID, STREAM_ID, CPU, IDENTIFIER)))
    return off, tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--times", type=float, default=4.5, help="how many times over (fractions cut the last one)")
    args = ap.parse_args()
    data = open(args.inp, "rb").read()
    if data[:8] != b"PERFILE2":
        raise SystemExit(f"{args.inp}: not a perf.data file")
    file_mode = struct.unpack_from("<Q", data, 8)[0] != 16
    pos, head, body, layouts = 16, [data[:16]], [], set()
    end = len(data)
    if file_mode:  # header, attrs and ids first; the data section; then the feature sections
        attr_size, a_off, a_size, pos, d_size = struct.unpack_from("<5Q", data, 16)
        end = pos + d_size
        for i in range(a_off, a_off + a_size, attr_size):
            layouts.add(layout(data[i:i + attr_size - 16]))
        head = [data[:pos]]
    t_min, t_max = None, 0
    while pos + 8 <= end:
        t, _misc, size = HDR.unpack_from(data, pos)
        if size < 8 or pos + size > end:
            raise SystemExit(f"{args.inp}: malformed record at byte {pos}")
        rec = data[pos:pos + size]
        if t == 64:  # PERF_RECORD_HEADER_ATTR
            layouts.add(layout(rec[8:]))
        if t >= USER_TYPES and not body and not file_mode:
            head.append(rec)
        else:
            body.append(rec)
            if t == SAMPLE and layouts:
                ts = struct.unpack_from("<Q", rec, next(iter(layouts))[0])[0]
                t_min = ts if t_min is None else min(t_min, ts)
                t_max = max(t_max, ts)
        pos += size
    if len(layouts) != 1:
        raise SystemExit(f"{args.inp}: {len(layouts)} sample layouts; this tool shifts one")
    (s_off, tail), = layouts
    span = t_max - (t_min or 0) + 1_000_000
    whole = int(args.times)
    parts = [(r, len(body)) for r in range(whole)]
    if args.times > whole:
        parts.append((whole, int(len(body) * (args.times - whole))))
    last = len(parts) - 1
    n_samples = 0
    with open(args.out, "wb") as f:
        f.write(b"".join(head))
        d_start = f.tell()
        for rep, count in parts:
            shift = rep * span
            out = []
            for rec in body[:count]:
                t = HDR.unpack_from(rec)[0]
                if (t == FORK and rep) or (t == EXIT and rep != last):
                    continue
                if shift and t < USER_TYPES:
                    b = bytearray(rec)
                    at = s_off if t == SAMPLE else (len(b) - tail if tail else None)
                    if at is not None:
                        ts = struct.unpack_from("<Q", b, at)[0]
                        if not ts:
                            continue  # synthesized side-band (time 0): once, at the start
                        struct.pack_into("<Q", b, at, ts + shift)
                    rec = bytes(b)
                n_samples += t == SAMPLE
                out.append(rec)
            f.write(b"".join(out))
        if file_mode:  # the feature sections follow the data: move them and their offsets
            d_new = f.tell() - d_start
            delta = d_new - (end - d_start)
            feats = bin(int.from_bytes(data[72:104], "little")).count("1")
            table = bytearray(data[end:end + 16 * feats])
            for i in range(feats):
                o = struct.unpack_from("<Q", table, 16 * i)[0]
                if o >= end:
                    struct.pack_into("<Q", table, 16 * i, o + delta)
            f.write(table)
            f.write(data[end + 16 * feats:])
            f.seek(48)
            f.write(struct.pack("<Q", d_new))
    print(f"{args.out}: {n_samples} samples, {len(parts)} repetitions of {args.inp}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
