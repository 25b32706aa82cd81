"""Random campaign over the perf.data readers (the longer sibling of
tests/unit/test_perfdata_field_fuzz.py, which sets one field at a time).

Each case takes a file of the test corpus, picks 1-4 of its integer fields
(tests/fieldfuzz.py: header, attrs, feature table, every kind of record and
sample field) and sets each to an edge value or a random 8/16/32/64-bit value,
sometimes also truncates the file or duplicates a record's bytes elsewhere, then
reads it the way every command does (report stdio/JSON/HTML, script, folded,
pprof, speedscope; mem and c2c for the memory recording). Only PmuscopeError
may come out. Crashing inputs are saved under --out with the exception.

    python benchmarks/fuzz_perfdata.py [--seconds 600] [--seed N] [--out DIR]

Prints: cases run, clean refusals, crashes (0 is the goal), hangs, cases/s.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import struct
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pmuscope.errors import PmuscopeError  # noqa: E402
from tests.fieldfuzz import edges, fields  # noqa: E402
from tests.unit.test_perfdata_field_fuzz import CORPUS, MEMORY, Hang, _alarm, _consume_memory, consume  # noqa: E402


def mutate(data: bytes, flds, rng: random.Random) -> tuple[bytes, list[str]]:
    buf = bytearray(data)
    what = []
    for off, width, name in rng.sample(flds, min(len(flds), rng.randint(1, 4))):
        fmt = {2: "<H", 4: "<I", 8: "<Q"}[width]
        if rng.random() < 0.7:
            v = rng.choice(edges(width, len(data)))
        else:
            v = rng.getrandbits(8 * rng.choice([1, 2, 4, 8])) & ((1 << (8 * width)) - 1)
        struct.pack_into(fmt, buf, off, v)
        what.append(f"{name}={v:#x}")
    r = rng.random()
    if r < 0.1:
        cut = rng.randrange(len(buf))
        del buf[cut:]
        what.append(f"truncated@{cut}")
    elif r < 0.2 and len(flds) > 2:
        a, b = rng.sample(flds, 2)
        n = rng.choice([8, 16, 64])
        buf[b[0]:b[0] + n] = buf[a[0]:a[0] + n]
        what.append(f"copied {n}B {a[2]} -> {b[2]}")
    return bytes(buf), what


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default="fuzz-crashes")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    corpus = [(f, f.read_bytes(), consume) for f in CORPUS] + [(MEMORY, MEMORY.read_bytes(), _consume_memory)]
    corpus = [(f, d, fn, fields(d, per_type=4)) for f, d, fn in corpus]
    signal.signal(signal.SIGALRM, _alarm)
    n = clean = hangs = 0
    crashes: dict[tuple, str] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.data")
        while time.monotonic() - t0 < a.seconds:
            f, data, fn, flds = rng.choice(corpus)
            buf, what = mutate(data, flds, rng)
            with open(path, "wb") as out:
                out.write(buf)
            n += 1
            signal.alarm(30)
            try:
                fn(path, tmp, html=n % 20 == 0)
            except PmuscopeError:
                clean += 1
            except Hang:
                hangs += 1
                key = ("hang", f.name)
                crashes.setdefault(key, f"{f.name}: {'; '.join(what)}")
            except Exception as err:  # noqa: BLE001 - the finding
                tb = traceback.extract_tb(err.__traceback__)[-1]
                key = (type(err).__name__, os.path.basename(tb.filename), tb.lineno)
                if key not in crashes:
                    os.makedirs(a.out, exist_ok=True)
                    name = os.path.join(a.out, f"crash{len(crashes)}.data")
                    with open(name, "wb") as out:
                        out.write(buf)
                    crashes[key] = f"{name} ({f.name}: {'; '.join(what)}): {type(err).__name__}: {err}"[:400]
            finally:
                signal.alarm(0)
    dt = time.monotonic() - t0
    print(f"seed {seed}: {n} cases in {dt:.0f} s ({n / dt:.0f}/s), {clean} clean refusals, "
          f"{len(crashes)} distinct crashes, {hangs} hangs")
    for key, text in crashes.items():
        print(f"  {key}: {text}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
