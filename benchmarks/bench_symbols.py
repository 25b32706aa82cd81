"""Symbolization throughput (ratios measured in one run).

Takes this Python process's own address space (``/proc/self/maps``) and draws
N instruction addresses inside the executable segment of libpython (or of the
python3 executable when it is linked statically): a "report-like" set where
addresses repeat the way samples do (Zipf over 20k distinct ips) and an
"all distinct" set. Measures symbols/s of:

* ``Symbolizer.resolve_many`` cold (binary parsed in the run) and warm
  (parsed already), plus the names of the distinct symbols (demangled);
* a naive per-address loop over the same parsed tables: ``bisect`` into the
  mapping starts, file offset -> vaddr through the PT_LOAD list, ``bisect``
  into the symbol starts, check the end, look the name up (the reference);

and prints the ratios. It also times parsing the symbol table with pyelftools
(one Python object per symbol) against our bulk numpy read, when pyelftools is
installed.

    python benchmarks/bench_symbols.py [--samples N] [--rounds R]
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import sysconfig
import time

import numpy as np

from pmuscope.symbols import AddressSpace, DsoCache, ElfFile, KernelSymbols, Maps, Symbolizer
from pmuscope.symbols.maps import PROT_EXEC


def target_binary() -> str:
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    so = sysconfig.get_config_var("INSTSONAME") or ""
    p = os.path.realpath(os.path.join(libdir, so)) if so else ""
    space = AddressSpace.from_proc_maps("self")
    mapped = {os.path.realpath(m.filename) for m in space if m.filename.startswith("/")}
    if p in mapped:
        return p
    return os.path.realpath("/proc/self/exe")


def text_ips(path: str, n: int, distinct: int | None, rng) -> np.ndarray:
    space = AddressSpace.from_proc_maps("self")
    m = next(m for m in space if os.path.realpath(m.filename) == path and m.prot & PROT_EXEC)
    lo, hi = m.start, m.end
    if distinct is None:
        return rng.integers(lo, hi, size=n, dtype=np.uint64)
    pool = rng.integers(lo, hi, size=distinct, dtype=np.uint64)
    ranks = np.minimum(rng.zipf(1.3, size=n), distinct) - 1
    return pool[ranks]


def naive_resolve(space: AddressSpace, dsos: dict, ips: np.ndarray) -> list:
    """The reference: one Python-level lookup per address."""
    starts = [m.start for m in space]
    loads = {}
    for path, dso in dsos.items():
        segs = sorted(dso.elf.load_segments, key=lambda s: s.p_offset)
        loads[path] = ([s.p_offset for s in segs], [s.p_vaddr - s.p_offset for s in segs],
                       dso.table.starts.tolist(), dso.table.ends.tolist(), dso.table)
    out = []
    for ip in ips.tolist():
        i = bisect.bisect_right(starts, ip) - 1
        if i < 0 or ip >= space[i].end:
            out.append(("[unknown]", "[unknown]", ip))
            continue
        m = space[i]
        t = loads.get(m.filename)
        if t is None:
            out.append((m.filename, "[unknown]", ip))
            continue
        poffs, deltas, sstarts, sends, table = t
        off = ip - m.start + m.pgoff
        k = bisect.bisect_right(poffs, off) - 1
        va = off + deltas[k] if k >= 0 else off
        j = bisect.bisect_right(sstarts, va) - 1
        if j >= 0 and va < sends[j]:
            out.append((m.filename, table.name(j), va - sstarts[j]))
        else:
            out.append((m.filename, "[unknown]", va))
    return out


def timed(fn, rounds):
    times, result = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    path = target_binary()
    pid = os.getpid()
    space = AddressSpace.from_proc_maps("self")
    print(f"binary: {path}")

    # parse cost: ours (bulk) vs pyelftools (per symbol)
    cache = DsoCache()
    t0 = time.perf_counter()
    dso = cache.get(path)
    t_parse = time.perf_counter() - t0
    print(f"symbol table: {dso.symtab_path} {dso.symtab_section}, {len(dso.table)} function "
          f"symbols; parse + sort {t_parse * 1e3:.1f} ms")
    try:
        from elftools.elf.elffile import ELFFile
        t0 = time.perf_counter()
        with open(dso.symtab_path, "rb") as f:
            sec = ELFFile(f).get_section_by_name(dso.symtab_section)
            syms = [(s["st_value"], s["st_size"], s.name) for s in sec.iter_symbols()]
        t_pe = time.perf_counter() - t0
        t0 = time.perf_counter()
        ElfFile.open(dso.symtab_path).symbols(dso.symtab_section)
        t_ours = time.perf_counter() - t0
        print(f"read {len(syms)} raw symbols: pyelftools {t_pe * 1e3:.1f} ms, pmuscope "
              f"{t_ours * 1e3:.2f} ms -> {t_pe / t_ours:.0f}x faster")
    except ImportError:
        print("pyelftools not installed: parse comparison skipped")

    for label, distinct in (("report-like (Zipf over 20k distinct ips)", 20_000),
                            ("all distinct", None)):
        ips = text_ips(path, args.samples, distinct, rng)
        n_unique = len(np.unique(ips))
        print(f"\n{label}: {len(ips)} addresses, {n_unique} distinct")

        def ours_cold():
            maps = Maps()
            maps.spaces[pid] = space
            s = Symbolizer(maps, kernel=False, cache=DsoCache())  # parses the binary again
            r = s.resolve_many(pid, ips)
            s.sym_names(np.unique(r.sym_id))
            return s, r

        def ours_warm(s=Symbolizer(Maps(), kernel=False, cache=cache)):
            s.maps.spaces[pid] = space
            r = s.resolve_many(pid, ips)
            s.sym_names(np.unique(r.sym_id))
            return s, r

        t_cold, _ = timed(ours_cold, args.rounds)
        t_warm, (s, r) = timed(ours_warm, args.rounds)
        t_naive, ref = timed(lambda: naive_resolve(space, {path: dso}, ips), args.rounds)
        # same answers
        names = s.sym_names(r.sym_id[:2000], demangle=False)
        assert [x[1] for x in ref[:2000]] == names, "naive and vectorized results differ"
        assert [x[2] for x in ref[:2000]] == [int(o) for o in r.offset[:2000]]
        known = float(np.mean(r.sym_id >= 0)) * 100
        print(f"  resolve_many cold (parse included): {len(ips) / t_cold / 1e6:6.2f} M symbols/s "
              f"({t_cold * 1e3:.0f} ms)")
        print(f"  resolve_many warm:                  {len(ips) / t_warm / 1e6:6.2f} M symbols/s "
              f"({t_warm * 1e3:.0f} ms)")
        print(f"  naive per-address bisect loop:      {len(ips) / t_naive / 1e6:6.2f} M symbols/s "
              f"({t_naive * 1e3:.0f} ms)")
        print(f"  ratio warm / naive: {t_naive / t_warm:.1f}x, cold / naive: "
              f"{t_naive / t_cold:.1f}x; {known:.1f}% of ips inside a symbol")

    # kernel addresses through /proc/kallsyms
    t0 = time.perf_counter()
    ks = KernelSymbols.load()
    t_ks = time.perf_counter() - t0
    if ks.addresses_hidden or not ks.tables:
        print(f"\nkallsyms: {ks.hidden_reason}; kernel benchmark skipped")
        return
    kt = ks.tables["[kernel.kallsyms]"]
    print(f"\nkallsyms: {len(kt)} symbols parsed in {t_ks * 1e3:.0f} ms")
    kips = rng.integers(int(kt.starts[0]), int(kt.ends[-1]), size=args.samples, dtype=np.uint64)
    ks_sym = Symbolizer(Maps(), kernel=ks)
    t_k, _ = timed(lambda: ks_sym.resolve_many(-1, kips), args.rounds)
    print(f"  resolve_many of {len(kips)} kernel ips: {len(kips) / t_k / 1e6:.2f} M symbols/s "
          f"({t_k * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
