"""numatop's WIN10 (call chains to a memory area): synthetic load-latency
samples whose user-space chains point into a real binary compiled by the test
(tests/data/symbols/demo.c, non-PIE) that a fixture /proc/PID/maps maps;
symbol names checked against nm. Also the sampler's attr and the chain
filtering of raw PERF_SAMPLE_CALLCHAIN words (no kernel)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pmuscope.kernel import abi
from pmuscope.memory.samples import MemSamples
from pmuscope.numa.areachains import LL_THRESH, area_callchains
from pmuscope.numa.latency import MAX_STACK, LatencySamples, ll_attr, memory_area_view, samples_from_batch, user_chains
from pmuscope.numa.model import MemArea
from pmuscope.numa.platforms import platform_for
from pmuscope.symbols import Symbolizer
from pmuscope.system import CpuIdentity
from tests.unit.test_symbols_elf import _run, bins, nm_text_symbols  # noqa: F401 (session fixture: compiled demo binaries)

PID = 4242
HEAP = MemArea(0x7F0000000000, 0x7F0000010000, "rw-p", 0, "[heap]")
LOAD = 0x02              # perf_mem_data_src.mem_op: PERF_MEM_OP_LOAD
NA = 0x01                 # PERF_MEM_OP_NA: not a memory op, numatop drops it
U, K = abi.PERF_CONTEXT_USER, abi.PERF_CONTEXT_KERNEL


@pytest.fixture(scope="module")
def demo(bins, tmp_path_factory):  # noqa: F811
    """procfs root whose PID/maps maps demo_nopie's PT_LOADs, and the address of each function (nm)."""
    path = bins["demo_nopie"]
    root = tmp_path_factory.mktemp("proc")
    lines = []
    for line in _run("readelf", "-lW", str(path)).splitlines():  # the PT_LOADs, as ld.so maps them
        f = line.split()
        if not f or f[0] != "LOAD":
            continue
        offset, vaddr, memsz = int(f[1], 16), int(f[2], 16), int(f[5], 16)
        flags = "".join(f[6:-1])
        start, end = vaddr & ~0xFFF, (vaddr + memsz + 0xFFF) & ~0xFFF
        perms = ("r" if "R" in flags else "-") + ("w" if "W" in flags else "-") + ("x" if "E" in flags else "-") + "p"
        lines.append(f"{start:08x}-{end:08x} {perms} {offset & ~0xFFF:08x} 08:01 77 {path}")
    lines.append(f"{HEAP.start:x}-{HEAP.end:x} rw-p 00000000 00:00 0 [heap]")
    (root / str(PID)).mkdir()
    (root / str(PID) / "maps").write_text("\n".join(lines) + "\n")
    addr = {name: a for a, names in nm_text_symbols(path).items() for name in names}
    return str(root), addr


def _samples(addr, chains, rows):
    """rows: (pid, data address, weight cycles, data_src, chain index); chains leaf first."""
    pid, a, w, ds, ci = (np.array(c) for c in zip(*rows))
    flat = [np.array(chains[i], np.uint64) for i in ci]
    off = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(f) for f in flat], out=off[1:])
    ms = MemSamples.from_columns(len(rows), pid=pid, tid=pid, addr=a, weight=w, data_src=ds,
                                 ip=[f[0] if len(f) else 0 for f in flat], source="mem_trans_retired.load_latency")
    return LatencySamples.with_chains(ms, np.concatenate(flat), off)


def _fixture(addr):
    f = addr
    chains = [
        [f["alpha"], f["beta"] + 1, f["main"] + 2],                       # 0: alpha <- beta <- main
        [f["alpha"] + 1, f["beta"] + 1, f["main"] + 2],                   # 1: same functions, other offsets
        [f["local_helper"], f["alpha"] + 1, f["beta"] + 1, f["main"] + 2],  # 2: one level deeper
        [f["weak_gamma"], f["main"] + 3],                                 # 3
        [],                                                               # 4: no user frames (kernel-only)
    ]
    H = HEAP.start
    rows = [
        (PID, H + 0x10, 300, LOAD, 0),
        (PID, H + 0x20, 129, LOAD, 1),        # just above numatop's 128
        (PID, H + 0x30, 900, LOAD, 2),
        (PID, H + 0xFFF8, 500, LOAD, 0),
        (PID, H + 0x40, 128, LOAD, 3),        # at the threshold: left out
        (PID, H + 0x50, 20, LOAD, 3),         # fast: left out
        (PID, H + 0x10000, 5000, LOAD, 3),    # one past the area's end
        (PID + 1, H + 0x10, 5000, LOAD, 3),   # another process
        (PID, H + 0x60, 5000, NA, 3),         # not a memory op
        (PID, H + 0x70, 700, LOAD, 4),
    ]
    return chains, rows


class CountingSymbolizer(Symbolizer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []

    def resolve_many(self, pids, ips, kernel=None):
        self.calls.append(np.asarray(ips).copy())
        return super().resolve_many(pids, ips, kernel)


def test_chains_above_threshold_aggregated_and_symbolized(demo):
    root, addr = demo
    chains, rows = _fixture(addr)
    ms = _samples(addr, chains, rows)
    sym = CountingSymbolizer(kernel=False, use_proc_maps=True, procfs_root=root)
    res = area_callchains(ms, HEAP, pid=PID, symbolizer=sym)
    assert res.kind == "callchain" and res.min_latency_cycles == LL_THRESH == 128
    assert (res.samples, res.below) == (5, 2)  # 300, 129, 900, 500, 700 above; 128 and 20 not
    assert res.chains == [
        (3, ["main", "beta", "alpha"]),            # chains 0, 1, 0 merge: same functions
        (1, ["main", "beta", "alpha", "local_helper"]),
        (1, ["[no user-space frames]"]),
    ]
    assert res.title == f"Call chains to area {HEAP.start:x} ([heap])"
    # one symbol lookup per distinct address of the selected chains
    assert len(sym.calls) == 1
    looked_up = sym.calls[0]
    expect = {addr["alpha"], addr["alpha"] + 1, addr["beta"] + 1, addr["main"] + 2, addr["local_helper"]}
    assert sorted(looked_up.tolist()) == sorted(expect)


def test_threshold_top_and_default_symbolizer_from_procfs(demo):
    root, addr = demo
    chains, rows = _fixture(addr)
    ms = _samples(addr, chains, rows)
    res = area_callchains(ms, HEAP, pid=PID, min_latency_cycles=600, procfs_root=root)
    assert (res.samples, res.below) == (2, 5)  # 900 and 700
    assert sorted(res.chains) == [(1, ["[no user-space frames]"]), (1, ["main", "beta", "alpha", "local_helper"])]
    res = area_callchains(ms, HEAP, pid=PID, min_latency_cycles=0, top=1, procfs_root=root)
    assert res.samples == 7 and res.chains[0][0] == 3 and len(res.chains) == 1
    # weak_gamma's loads (128 and 20 cycles) count once the threshold is 0: 2 of them
    res = area_callchains(ms, HEAP, pid=PID, min_latency_cycles=0, procfs_root=root)
    assert (2, ["main", "weak_gamma"]) in res.chains
    none = area_callchains(ms, HEAP, pid=PID, min_latency_cycles=10_000, procfs_root=root)
    assert none.chains == [] and none.samples == 0 and "above 10000 cycles (7 at or below it)" in none.reason


def test_spe_samples_give_top_pcs(demo):
    root, addr = demo
    H = HEAP.start
    ms = MemSamples.from_columns(4, pid=[PID] * 4, tid=[PID] * 4, addr=[H + 8, H + 16, H + 24, H + 32],
                                 weight=[400, 300, 200, 50], data_src=[LOAD] * 4,
                                 ip=[addr["alpha"], addr["alpha"] + 1, addr["beta"], addr["beta"]], source="SPE")
    res = area_callchains(ms, HEAP, pid=PID, procfs_root=root)
    assert res.kind == "pc" and res.title.startswith("Top PCs (no call chains) of loads to area 7f0000000000")
    assert res.chains == [(2, ["alpha"]), (1, ["beta"])] and res.below == 1


def test_user_chains_keep_user_frames_only_and_cap_the_depth():
    deep = [U] + list(range(0x1000, 0x1000 + 40))
    words = np.array([K, 0xFFFFFFFF81000010, 0xFFFFFFFF81000020, U, 0x401000, 0x401100,  # kernel part dropped
                      0x401000, 0x401200,  # no marker: user addresses (top bit clear) kept
                      K, 0xFFFFFFFF81000030] + deep, np.uint64)
    off = np.array([0, 6, 8, 10, 10 + len(deep)])
    flat, new = user_chains(words, off)
    assert new.tolist() == [0, 2, 4, 4, 4 + MAX_STACK]
    assert flat[:4].tolist() == [0x401000, 0x401100, 0x401000, 0x401200]
    assert flat[4:].tolist() == list(range(0x1000, 0x1000 + MAX_STACK))  # the 32 innermost


def test_samples_from_batch_and_select_keep_chains_aligned():
    batch = SimpleNamespace(
        addr=np.array([1, 2, 3], np.uint64), pid=np.array([5, 6, 5]), tid=np.array([5, 6, 5]),
        weight=np.array([200, 300, 400], np.uint64), ip=np.array([0x10, 0x20, 0x30], np.uint64),
        data_src=np.array([LOAD] * 3, np.uint64), cpu=np.array([0, 1, 0]),
        callchain=np.array([U, 0x10, 0x11, K, 0xFFFFFFFF81000000, U, 0x20, U, 0x30, 0x31, 0x32], np.uint64),
        callchain_offsets=np.array([0, 3, 7, 11]))
    ls = samples_from_batch(batch, "ibs_op")
    assert [ls.chain(i).tolist() for i in range(3)] == [[0x10, 0x11], [0x20], [0x30, 0x31, 0x32]]
    sub = ls.select(ls.pid == 5)
    assert [sub.chain(i).tolist() for i in range(2)] == [[0x10, 0x11], [0x30, 0x31, 0x32]]
    both = LatencySamples.concat([sub, MemSamples.from_columns(1, pid=[5], addr=[9])])
    assert len(both) == 3 and [both.chain(i).tolist() for i in range(3)] == [[0x10, 0x11], [0x30, 0x31, 0x32], []]
    # memory_area_view hands the process's samples (chains included) to the area view
    view = memory_area_view(ls, [MemArea(0, 0x100, "rw-p", 0, "")], 5, node_of=lambda a: np.zeros(len(a), np.int32))
    assert view["samples"] == 2 and view["mem_samples"].chain(1).tolist() == [0x30, 0x31, 0x32]


def test_ll_attr_records_user_callchains():
    for ident in (CpuIdentity(arch="x86_64", vendor="GenuineIntel", family=6, model=0x55),):
        attr, _ = ll_attr(platform_for(ident))
        assert attr.sample_type & abi.PerfSample.CALLCHAIN and attr.sample_type & abi.PerfSample.IP
        assert attr.exclude_callchain_kernel == 1 and attr.sample_max_stack == MAX_STACK == 32


def test_aggregation_without_a_compiler_names_dso_or_unknown():
    """The same path on the recorded two-node procfs (its /usr/bin/mgen is not on this
    machine): frames name their mapping, or [unknown] outside every mapping; no gcc needed."""
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent / "data" / "numa" / "two-node" / "t1" / "proc")
    anon = MemArea(0x7F0000000000, 0x7F0000064000, "rw-p", 0, "")
    chains = [[0x400100, 0x400200], [0x400180, 0x400200], [0x10, 0x400200]]
    rows = [(100, anon.start + 8, 200, LOAD, 0), (100, anon.start + 16, 300, LOAD, 1),
            (100, anon.start + 24, 400, LOAD, 2), (100, anon.start + 32, 100, LOAD, 2)]
    res = area_callchains(_samples(None, chains, rows), anon, pid=100, procfs_root=root)
    assert res.title == "Call chains to area 7f0000000000 ([anon])"
    assert (res.samples, res.below) == (3, 1)
    assert res.chains == [(2, ["[mgen]", "[mgen]"]), (1, ["[mgen]", "[unknown]"])]
