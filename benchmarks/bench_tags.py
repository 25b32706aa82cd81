"""Cost of ``pmuscope.tags.set`` (a per-request software signal) and of the
observer's tag read, measured in one run.

``tags.set(name, value)`` is a dict lookup and one 8-byte store into the
shared page; the observer copies the count and all 64 values per sample.
On the 2-vCPU development VM: 46-62 ns per ``set`` (a call of an empty
lambda costs ~16 ns of that), ~0.1 µs per snapshot copy.
"""

from __future__ import annotations

import timeit

import numpy as np

from pmuscope import tags
from pmuscope.tags import TagReader, channel_path


def main() -> None:
    tags.set("phase", 1)
    tags.set("ratio", 0.5)
    n = 1_000_000
    per_int = min(timeit.repeat(lambda: tags.set("phase", 2), number=n, repeat=5)) / n
    per_float = min(timeit.repeat(lambda: tags.set("ratio", 0.25), number=n, repeat=5)) / n
    empty = min(timeit.repeat(lambda: None, number=n, repeat=5)) / n
    reader = TagReader(channel_path())
    snaps = np.zeros((10_000, reader.words.shape[0]), dtype=np.uint64)

    def copy_all() -> None:
        w = reader.words
        for i in range(len(snaps)):
            snaps[i] = w

    per_snap = min(timeit.repeat(copy_all, number=1, repeat=5)) / len(snaps)
    print(f"tags.set int    {per_int * 1e9:7.1f} ns")
    print(f"tags.set float  {per_float * 1e9:7.1f} ns")
    print(f"empty lambda    {empty * 1e9:7.1f} ns (call overhead included above)")
    print(f"observer copy   {per_snap * 1e9:7.1f} ns per sample (count + 64 values)")
    tags.close()


if __name__ == "__main__":
    main()
