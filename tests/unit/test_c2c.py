"""c2c: false-sharing streams rank their line first; private data ranks nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pmuscope.cli.main import main
from pmuscope.errors import PmuscopeError
from pmuscope.memory import datasrc as D
from pmuscope.memory.c2c import c2c_analyze, classify, format_c2c
from pmuscope.memory.samples import MemSamples, from_spe_records
from pmuscope.memory.synth import write_mem_perf_data
from pmuscope.spe import decode_records
from pmuscope.spe.packets import ADDRESS, CONTEXT, COUNTER, DATA_SOURCE, EVENTS, OP_TYPE, TIMESTAMP, encode_packet

L1_HIT = D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1, snoop=D.SNOOP_NONE)
LCL_HITM = D.encode(op=D.OP_LOAD, lvl=D.LVL_L3 | D.LVL_HIT, lvl_num=D.LVLNUM_L3, snoop=D.SNOOP_HITM)
RMT_HITM = D.encode(op=D.OP_LOAD, lvl=D.LVL_REM_CCE1 | D.LVL_HIT, snoop=D.SNOOP_HITM)
ST_L1_HIT = D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_HIT)
ST_L1_MISS = D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_MISS)

STRUCT = 0x7F00_0000_1000  # struct { long a; long b; } shared by two threads: a at +0, b at +8
PRIV = (0x7F00_0000_8000, 0x7F00_0000_9000)


def false_sharing(n=200, seed=1, sharing=True):
    """Thread 1 (cpu 0) bumps field a, thread 2 (cpu 1) field b of one line;
    their loads see the other core's modified copy (HITM); each also reads
    private data (L1 hits)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        t = i % 2
        tid, cpu = 101 + t, t
        field_addr = (STRUCT + 8 * t) if sharing else (PRIV[t] + 8 * t)
        kind = rng.integers(0, 4)
        if kind == 0:
            rows.append((i, 100, tid, cpu, 0x401000 + 0x10 * t, field_addr, ST_L1_MISS if sharing else ST_L1_HIT, 5))
        elif kind == 1:
            rows.append((i, 100, tid, cpu, 0x401004 + 0x10 * t, field_addr, LCL_HITM if sharing else L1_HIT,
                         int(rng.integers(150, 400)) if sharing else 4))
        else:
            rows.append((i, 100, tid, cpu, 0x402000 + 0x10 * t, PRIV[t] + 64 * int(rng.integers(1, 8)), L1_HIT, 4))
    cols = list(zip(*rows))
    return MemSamples.from_columns(len(rows), time=cols[0], pid=cols[1], tid=cols[2], cpu=cols[3], ip=cols[4],
                                   addr=cols[5], data_src=cols[6], weight=cols[7])


def test_classify_follows_perf_rules():
    vals = np.array([L1_HIT, LCL_HITM, RMT_HITM, ST_L1_HIT, ST_L1_MISS,
                     D.encode(op=D.OP_LOAD, lvl=D.LVL_L2 | D.LVL_HIT, snoopx=D.SNOOPX_PEER),
                     D.encode(op=D.OP_LOAD, lvl=D.LVL_NA, remote=1, snoopx=D.SNOOPX_PEER),
                     D.encode(op=D.OP_LOAD, lvl=D.LVL_LOC_RAM | D.LVL_HIT, snoop=D.SNOOP_HIT),
                     D.encode(op=D.OP_STORE, lvl=D.LVL_NA), D.encode(op=D.OP_PFETCH)], np.uint64)
    addr = np.full(len(vals), 0x1000, np.uint64)
    addr[0] = 0  # a load without address
    st = classify(vals, addr)
    assert st["ld_noadrs"].tolist() == [True] + [False] * 9
    assert st["ld_l1hit"].tolist()[0] is False  # no address: not classified further
    assert st["lcl_hitm"].tolist() == [False, True] + [False] * 8
    assert st["rmt_hitm"].tolist() == [False, False, True] + [False] * 7
    assert st["st_l1hit"].tolist()[3] and st["st_l1miss"].tolist()[4] and st["st_na"].tolist()[8]
    assert st["lcl_peer"].tolist()[5] == 1 and st["rmt_peer"].tolist()[6] and st["rmt_hit"].tolist()[6]
    assert st["lcl_dram"].tolist()[7]
    assert st["noparse"].tolist()[9]
    assert int(st["tot_hitm"].sum()) == 2 and int(st["tot_peer"].sum()) == 2


def test_false_sharing_line_ranks_first():
    ms = false_sharing()
    res = c2c_analyze(ms)
    assert res.mode == "hitm"
    assert res.lines, "the shared line must be reported"
    top = res.lines[0]
    assert top["address"] == STRUCT
    assert top["cpus"] == 2 and top["pids"] == 1
    assert top["hitm"] == int(((ms.data_src == LCL_HITM)).sum()) == top["lcl_hitm"]
    assert top["st_l1miss"] == int((ms.data_src == ST_L1_MISS).sum())
    assert top["pct"] == pytest.approx(100.0)
    offs = {(o["offset"], o["pid"]) for o in top["offsets"]}
    assert offs == {(0, 100), (8, 100)}
    by_off = {}
    for o in top["offsets"]:
        by_off.setdefault(o["offset"], set()).update(o["tids"])
    assert by_off == {0: {101}, 8: {102}}
    assert top["mean_load_latency"] >= 150
    text = format_c2c(res)
    assert "Shared Data Cache Line Table" in text and f"{STRUCT:#x}" in text


def test_no_sharing_ranks_nothing():
    res = c2c_analyze(false_sharing(sharing=False))
    assert res.lines == [] and res.extra["shared_lines_total"] == 0
    assert res.totals["tot_hitm"] == 0
    assert "no sharing seen" in format_c2c(res)


def test_line_size_128_merges_neighbouring_lines():
    base = 0x7F00_0000_2000
    ms = MemSamples.from_columns(4, cpu=[0, 1, 0, 1], pid=[1, 1, 1, 1], tid=[1, 2, 1, 2], ip=[1, 2, 3, 4],
                                 addr=[base, base + 64, base + 8, base + 72], data_src=[LCL_HITM] * 4, weight=[100] * 4)
    assert len(c2c_analyze(ms, line_size=64).lines) == 2
    res = c2c_analyze(ms, line_size=128)
    assert len(res.lines) == 1 and res.lines[0]["address"] == base and res.lines[0]["hitm"] == 4
    assert sorted(o["offset"] for o in res.lines[0]["offsets"]) == [0, 8, 64, 72]
    with pytest.raises(PmuscopeError, match="64 or 128"):
        c2c_analyze(ms, line_size=32)


def _spe_rec(pc, va, *, store, source, ctx, ts):
    return (encode_packet(ADDRESS, 0, pc) + encode_packet(CONTEXT, 0, ctx) + encode_packet(OP_TYPE, 1, int(store))
            + encode_packet(EVENTS, 0, 0x16) + encode_packet(COUNTER, 0, 80 if source == 0x9 else 4)
            + encode_packet(ADDRESS, 2, va) + encode_packet(DATA_SOURCE, 0, source, payload_len=2)
            + encode_packet(TIMESTAMP, 0, ts))


def test_arm_spe_false_sharing_ranked_by_peer_snoops():
    """Neoverse N1: loads served by the peer core (data source 0x9) are the signal."""
    parts = []
    for cpu in (0, 1):
        buf = b"".join(_spe_rec(0x400000 + 0x40 * cpu + 4 * (i % 2), STRUCT + 8 * cpu + (0 if i % 3 else 0),
                                store=(i % 2 == 1), source=0x9, ctx=200 + cpu, ts=i) for i in range(30))
        buf += b"".join(_spe_rec(0x410000, PRIV[cpu] + 256, store=False, source=0x0, ctx=200 + cpu, ts=100 + i)
                        for i in range(30))
        parts.append(from_spe_records(decode_records(buf, cpu=cpu, midr=0x410FD0C0)))
    ms = MemSamples.concat(parts)
    res = c2c_analyze(ms, line_size=128)
    assert res.mode == "peer"
    assert len(res.lines) == 1 and res.lines[0]["address"] == STRUCT
    assert res.lines[0]["peer"] == 30 and res.lines[0]["lcl_peer"] == 30 and res.lines[0]["cpus"] == 2
    assert res.lines[0]["st_na"] == 30  # SPE stores carry no level, as in perf c2c on arm64
    assert c2c_analyze(ms, mode="hitm").lines == []


def test_c2c_cli_json_on_perf_data(tmp_path, capsys):
    ms = false_sharing(n=60)
    path = tmp_path / "c2c.data"
    write_mem_perf_data(path, [dict(ip=int(ms.ip[i]), pid=int(ms.pid[i]), tid=int(ms.tid[i]), cpu=int(ms.cpu[i]),
                                    time=1000 + i, addr=int(ms.addr[i]), data_src=int(ms.data_src[i]),
                                    weight=int(ms.weight[i])) for i in range(len(ms))],
                        comms=[dict(pid=100, comm="fs")])
    assert main(["c2c", "-i", str(path), "--json", "--no-symbols"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "hitm" and out["shared_lines"][0]["address"] == STRUCT
    assert out["samples"] == 60
    assert main(["c2c", "-i", str(path), "--line-size", "128"]) == 0
    assert f"{STRUCT:#x}" in capsys.readouterr().out


def test_nodes_from_the_numa_topology_header(tmp_path, capsys):
    ms = false_sharing(n=40)
    path = tmp_path / "c2c.data"
    write_mem_perf_data(path, [dict(ip=int(ms.ip[i]), pid=100, tid=int(ms.tid[i]), cpu=int(ms.cpu[i]), time=i,
                                    addr=int(ms.addr[i]), data_src=int(ms.data_src[i]), weight=5)
                               for i in range(len(ms))], comms=[dict(pid=100, comm="fs")])
    from pmuscope.memory.samples import load_mem_samples
    from pmuscope.perfdata import Feature, PerfDataFile

    with PerfDataFile(str(path)) as pf:
        numa = pf.features.get(Feature.NUMA_TOPOLOGY)
    loaded = load_mem_samples(path)
    if not numa:
        assert (loaded.node == -1).all()
        return
    from pmuscope.events.pmu import parse_cpulist

    node_of = {c: n.node for n in numa for c in parse_cpulist(n.cpus)}
    assert loaded.node.tolist() == [node_of.get(int(c), -1) for c in loaded.cpu]
    top = c2c_analyze(loaded).lines[0]
    assert top["nodes"] == sorted({node_of[c] for c in (0, 1) if c in node_of})
