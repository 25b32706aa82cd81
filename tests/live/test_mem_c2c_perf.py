"""pmuscope c2c against perf c2c report on the same perf.data: the Shared Data
Cache Line Table (HITM mode for x86-style samples, peer mode for SPE-style
data sources) has the same lines and the same per-line counts."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from pmuscope.memory import datasrc as D
from pmuscope.memory.c2c import c2c_analyze
from pmuscope.memory.samples import MemSamples, load_mem_samples
from pmuscope.memory.synth import write_mem_perf_data
from tests.unit.test_c2c import false_sharing

# perf's table columns after Index/Address/Node/PA cnt/pct
COLS = ("total", "local", "remote", "records", "load", "store", "st_l1hit", "st_l1miss", "st_na", "ld_fbhit",
        "ld_l1hit", "ld_l2hit", "ld_llchit", "lcl_hitm", "rmt_hit", "rmt_hitm", "lcl_dram", "rmt_dram")


def _write(path, ms: MemSamples) -> None:
    write_mem_perf_data(path, [dict(ip=int(ms.ip[i]), pid=int(ms.pid[i]), tid=int(ms.tid[i]), cpu=int(ms.cpu[i]),
                                    time=1000 + i, addr=int(ms.addr[i]), data_src=int(ms.data_src[i]),
                                    weight=int(ms.weight[i])) for i in range(len(ms))],
                        comms=[dict(pid=int(p), comm="fs") for p in np.unique(ms.pid)])


def _perf_table(perf_bin, path, mode) -> dict[int, dict[str, int]]:
    out = subprocess.run([perf_bin, "c2c", "report", "--stdio", "-d", mode, "-i", str(path)], capture_output=True,
                         text=True, timeout=120).stdout
    table = out.split("Shared Data Cache Line Table", 1)[1].split("=====", 2)[-1] if "Shared Data Cache" in out else ""
    table = table.split("Shared Cache Line Distribution Pareto")[0]
    rows = {}
    for line in table.splitlines():
        m = re.match(r"\s+(\d+)\s+(0x[0-9a-f]+)\s+(\S+)\s+(\d+)\s+([\d.]+)%\s+(.*)$", line)
        if m:
            nums = [int(x) for x in m.group(6).split()]
            rows[int(m.group(2), 16)] = dict(zip(COLS, nums))
    return rows


def _ours(ms, mode):
    res = c2c_analyze(ms, mode=mode, top=1000)
    out = {}
    for r in res.lines:
        total = r["hitm"] if mode == "tot" else r["peer"]
        local = r["lcl_hitm"] if mode == "tot" else r["lcl_peer"]
        remote = r["rmt_hitm"] if mode == "tot" else r["rmt_peer"]
        out[r["address"]] = dict(zip(COLS, [total, local, remote] + [r[c] for c in COLS[3:]]))
    return out


def _mixed_stream(seed=5) -> MemSamples:
    """Three shared lines with different HITM mixes (local, remote) plus private noise."""
    rng = np.random.default_rng(seed)
    kinds = [D.encode(op=D.OP_LOAD, lvl=D.LVL_L3 | D.LVL_HIT, lvl_num=3, snoop=D.SNOOP_HITM),
             D.encode(op=D.OP_LOAD, lvl=D.LVL_REM_CCE1 | D.LVL_HIT, snoop=D.SNOOP_HITM),
             D.encode(op=D.OP_LOAD, lvl=D.LVL_REM_CCE1 | D.LVL_HIT, snoop=D.SNOOP_HIT),
             D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=1, snoop=D.SNOOP_NONE),
             D.encode(op=D.OP_LOAD, lvl=D.LVL_LFB | D.LVL_HIT, snoop=D.SNOOP_NONE),
             D.encode(op=D.OP_LOAD, lvl=D.LVL_LOC_RAM | D.LVL_HIT, snoop=D.SNOOP_HIT),
             D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_HIT),
             D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_MISS),
             D.encode(op=D.OP_STORE, lvl=D.LVL_NA)]
    n = 1500
    line = rng.integers(0, 6, n)
    addr = 0x7F0000010000 + 64 * line + 8 * rng.integers(0, 8, n)
    ds = np.array(kinds, np.uint64)[rng.integers(0, len(kinds), n)]
    ds[line >= 3] = np.uint64(kinds[3])  # lines 3..5: private L1 hits only
    return MemSamples.from_columns(n, pid=np.full(n, 300), tid=300 + rng.integers(0, 4, n), cpu=rng.integers(0, 4, n),
                                   ip=0x401000 + 4 * rng.integers(0, 16, n), addr=addr, data_src=ds,
                                   weight=rng.integers(4, 500, n))


@pytest.mark.parametrize("stream", ["false_sharing", "mixed", "no_sharing"])
def test_shared_line_table_equals_perf_c2c_hitm(perf_bin, tmp_path, stream):
    ms = {"false_sharing": lambda: false_sharing(n=400), "mixed": _mixed_stream,
          "no_sharing": lambda: false_sharing(n=400, sharing=False)}[stream]()
    path = tmp_path / "c2c.data"
    _write(path, ms)
    perf = _perf_table(perf_bin, path, "tot")
    ours = _ours(load_mem_samples(path), "tot")
    assert ours == perf
    assert (len(ours) == 0) == (stream == "no_sharing")


def test_shared_line_table_equals_perf_c2c_peer(perf_bin, tmp_path):
    """SPE-style data sources (Neoverse common encoding: peer core/cluster, remote)."""
    from pmuscope.memory.spe import spe_data_src

    rng = np.random.default_rng(9)
    n = 1200
    source = rng.choice(np.array([0x0, 0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE], np.uint64), n)
    store = rng.random(n) < 0.3
    line = rng.integers(0, 5, n)
    source[line >= 3] = 0x0
    ds = spe_data_src(np.ones(n, np.int8), store.astype(np.uint64), np.full(n, 0x16, np.uint64), source,
                      np.ones(n, bool), np.full(n, 0x410FD0C0, np.uint64))
    ms = MemSamples.from_columns(n, pid=np.full(n, 400), tid=400 + rng.integers(0, 2, n), cpu=rng.integers(0, 2, n),
                                 ip=0x500000 + 4 * rng.integers(0, 8, n),
                                 addr=0x7F0000020000 + 64 * line + 8 * rng.integers(0, 8, n), data_src=ds,
                                 weight=rng.integers(4, 300, n))
    path = tmp_path / "c2c-peer.data"
    _write(path, ms)
    perf = _perf_table(perf_bin, path, "peer")
    ours = _ours(load_mem_samples(path), "peer")
    assert perf and ours == perf


def test_trace_event_totals_equal_perf(perf_bin, tmp_path):
    from pmuscope.memory.c2c import format_c2c

    ms = _mixed_stream(seed=8)
    path = tmp_path / "c2c.data"
    _write(path, ms)
    out = subprocess.run([perf_bin, "c2c", "report", "--stdio", "-i", str(path)], capture_output=True, text=True,
                         timeout=120).stdout
    ours = format_c2c(c2c_analyze(load_mem_samples(path)))
    for name in ("Total records", "Load Operations", "Load Fill Buffer Hit", "Load L1D hit", "Load LLC hit",
                 "Load Local HITM", "Load Remote HITM", "Load Remote HIT", "Load Local DRAM", "Store Operations",
                 "Store L1D Hit", "Store L1D Miss", "Store No available memory level"):
        want = re.search(rf"^\s+{re.escape(name)}\s+:\s+(\d+)$", out, re.M)
        got = re.search(rf"^\s+{re.escape(name)}\s+:\s+(\d+)$", ours, re.M)
        assert want and got and int(got.group(1)) == int(want.group(1)), name


def _perf_pareto(perf_bin, path, mode="tot") -> dict[tuple[int, int, int], tuple]:
    out = subprocess.run([perf_bin, "c2c", "report", "--stdio", "-d", mode, "-i", str(path)], capture_output=True,
                         text=True, timeout=120).stdout
    pareto = out.split("Shared Cache Line Distribution Pareto", 1)[1]
    rows, line = {}, None
    for text in pareto.splitlines():
        m = re.match(r"\s+\d+(?:\s+\d+){5}\s+(0x[0-9a-f]+)\s*$", text)
        if m:
            line = int(m.group(1), 16)
            continue
        m = re.match(r"\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+(0x[0-9a-f]+)\s+\S+\s+\d+\s+"
                     r"(0x[0-9a-f]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", text)
        if m and line is not None:
            pcts = tuple(float(m.group(i)) for i in range(1, 6))
            cyc = tuple(int(m.group(i)) for i in (8, 9, 10))
            rows[(line, int(m.group(6), 16), int(m.group(7), 16))] = (pcts, int(m.group(11)), cyc)
    return rows


def _peer_stream(seed=17) -> MemSamples:
    from pmuscope.memory.spe import spe_data_src

    rng = np.random.default_rng(seed)
    n = 1500
    source = rng.choice(np.array([0x0, 0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE], np.uint64), n)
    store = rng.random(n) < 0.3
    line = rng.integers(0, 4, n)
    ds = spe_data_src(np.ones(n, np.int8), store.astype(np.uint64), np.full(n, 0x16, np.uint64), source,
                      np.ones(n, bool), np.full(n, 0x410FD0C0, np.uint64))
    return MemSamples.from_columns(n, pid=np.full(n, 400), tid=400 + rng.integers(0, 2, n), cpu=rng.integers(0, 2, n),
                                   ip=0x500000 + 4 * rng.integers(0, 12, n),
                                   addr=0x7F0000020000 + 64 * line + 8 * rng.integers(0, 8, n), data_src=ds,
                                   weight=rng.integers(4, 300, n))


@pytest.mark.parametrize("mode", ["tot", "peer"])
def test_pareto_offsets_equal_perf_c2c(perf_bin, tmp_path, mode):
    ms = _mixed_stream(seed=13) if mode == "tot" else _peer_stream()
    path = tmp_path / "pareto.data"
    _write(path, ms)
    perf = _perf_pareto(perf_bin, path, mode)
    res = c2c_analyze(load_mem_samples(path), mode=mode, top=1000, max_offsets=10_000)
    cls = ("rmt_hitm", "lcl_hitm") if mode == "tot" else ("rmt_peer", "lcl_peer")
    ours = {}
    for r in res.lines:
        for o in r["offsets"]:
            pcts = tuple(round(o[k], 2) for k in (f"pct_{cls[0]}", f"pct_{cls[1]}", "pct_st_l1hit", "pct_st_l1miss",
                                                  "pct_st_na"))
            cyc = tuple(o[k] for k in (f"cycles_{cls[0]}", f"cycles_{cls[1]}", "cycles_load"))
            ours[(r["address"], o["offset"], o["ip"])] = (pcts, o["records"], cyc)
    assert perf and set(ours) == set(perf)
    for key, (pcts, records, cyc) in perf.items():
        assert ours[key][0] == pcts and ours[key][1] == records, key
        assert all(abs(a - b) <= 1 for a, b in zip(ours[key][2], cyc)), (key, ours[key][2], cyc)
