"""pmuscope mem report: numbers equal perf mem report (perf 6.1) on a real
Intel load-latency capture; data objects from MMAP2 records."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from pmuscope.cli.main import main
from pmuscope.memory import datasrc as D
from pmuscope.memory.report import latency_histogram, mem_report
from pmuscope.memory.samples import MemSamples, data_object_name, load_mem_samples
from pmuscope.memory.synth import write_mem_perf_data

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "memory")


def _perf_table(name: str) -> list[tuple[float, int, str]]:
    rows = []
    with open(os.path.join(DATA, name)) as f:
        for line in f:
            m = re.match(r"\s+([\d.]+)%\s+(\d+)\s+(.*?)\s*$", line)
            if m:
                rows.append((float(m.group(1)), int(m.group(2)), m.group(3)))
    return rows


@pytest.fixture
def weight_struct(shared_fixtures):
    path = os.path.join(shared_fixtures, "perf_data_converter", "perf.data.weight_struct")
    assert os.path.exists(path), f"fixture missing from the checkout: {path}"
    return path


def test_by_data_source_equals_perf_mem_report(weight_struct):
    rep = mem_report(load_mem_samples(weight_struct), style="6.1")
    got = [(round(r["pct_weight"], 2), r["samples"], r["data_source"]) for r in rep["by_data_source"]]
    assert got == _perf_table("weight_struct.perf-mem-report-sort-mem-6.1.txt")
    assert rep["summary"]["total_weight"] == 1725  # perf: "Total weight : 1725"
    assert rep["summary"]["samples"] == 14


def test_by_data_object_equals_perf_mem_report(weight_struct):
    rep = mem_report(load_mem_samples(weight_struct))
    got = [(round(r["pct_weight"], 2), r["samples"], r["data_object"]) for r in rep["by_data_object"]]
    assert got == _perf_table("weight_struct.perf-mem-report-sort-dso_daddr-6.1.txt")


def test_latency_histogram_buckets():
    h = latency_histogram(np.array([0, 1, 3, 64, 65, 127, 128, 300], np.uint64))
    assert [(b["lo"], b["hi"], b["samples"]) for b in h] == [
        (0, 1, 1), (1, 2, 1), (2, 4, 1), (4, 8, 0), (8, 16, 0), (16, 32, 0), (32, 64, 0), (64, 128, 3),
        (128, 256, 1), (256, 512, 1)]
    assert latency_histogram(np.zeros(0, np.uint64)) == []


def test_data_object_names():
    assert data_object_name("/usr/lib/libc.so.6") == "libc.so.6"
    assert data_object_name("//anon") == "anon"
    assert data_object_name("[heap]") == "[heap]" and data_object_name("[stack]") == "[stack]"
    assert data_object_name("") == "anon" and data_object_name("[anon:arena]") == "anon"


def test_report_on_synthetic_file_with_heap_stack_anon(tmp_path, capsys):
    path = tmp_path / "mem.data"
    maps = [dict(pid=50, start=0x400000, length=0x1000, filename="/usr/bin/app", prot=5),
            dict(pid=50, start=0x600000, length=0x2000, filename="/usr/bin/app", prot=3),
            dict(pid=50, start=0x1000000, length=0x21000, filename="[heap]", prot=3),
            dict(pid=50, start=0x7F0000000000, length=0x100000, filename="//anon", prot=3),
            dict(pid=50, start=0x7FFF00000000, length=0x21000, filename="[stack]", prot=3)]
    l1 = D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1, snoop=D.SNOOP_NONE)
    ram = D.encode(op=D.OP_LOAD, lvl=D.LVL_LOC_RAM | D.LVL_HIT, lvl_num=D.LVLNUM_RAM, snoop=D.SNOOP_HIT)
    st = D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_HIT)
    samples = []
    for i, (addr, ds, w) in enumerate([(0x600010, l1, 5), (0x1000100, ram, 300), (0x1000200, ram, 280),
                                       (0x7F0000000040, l1, 6), (0x7FFF00000100, st, 2), (0x900000, l1, 4)]):
        samples.append(dict(ip=0x400100 + i, pid=50, tid=50, cpu=i % 2, time=100 + i, addr=addr, data_src=ds,
                            weight=w, phys_addr=0x10000 + i))
    write_mem_perf_data(path, samples, mmaps=maps, comms=[dict(pid=50, comm="app")])
    ms = load_mem_samples(path)
    assert list(ms.dobj_name_array()) == ["app", "[heap]", "[heap]", "anon", "[stack]", "[unknown]"]
    assert ms.phys_addr.tolist() == [0x10000 + i for i in range(6)]
    rep = mem_report(ms)
    assert rep["by_data_source"][0]["data_source"] == "RAM hit" and rep["by_data_source"][0]["samples"] == 2
    assert rep["summary"]["stores"] == 1 and rep["summary"]["loads"] == 5
    assert {r["data_object"]: r["samples"] for r in rep["by_data_object"]} == {
        "[heap]": 2, "app": 1, "anon": 1, "[stack]": 1, "[unknown]": 1}
    assert main(["mem", "report", "-i", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["samples"] == 6 and out["by_data_object"][0]["data_object"] == "[heap]"
    assert main(["mem", "report", str(path)]) == 0
    text = capsys.readouterr().out
    assert "RAM hit" in text and "[heap]" in text and "Load latency" in text
    assert main(["mem", "script", str(path), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["weight"] for x in lines] == [5, 300, 280, 6, 2, 4]
    assert lines[4]["data_src_text"].startswith("|OP STORE|LVL L1 hit")


def test_mem_report_errors_are_one_line(tmp_path, capsys, shared_fixtures):
    assert main(["mem", "report", "-i", str(tmp_path / "missing.data")]) != 0
    err = capsys.readouterr().err.strip()
    assert "no such file" in err and "\n" not in err
    pt = os.path.join(shared_fixtures, "perf_data_converter", "perf.data.intel_pt-4.14")
    if os.path.exists(pt):  # an AUX trace that is not SPE is no memory-sample source
        assert main(["mem", "report", "-i", pt]) != 0
        assert "PERF_SAMPLE_DATA_SRC" in capsys.readouterr().err
    sleep = os.path.join(shared_fixtures, "linux-perf-data", "sleep.data")
    if os.path.exists(sleep):
        assert main(["mem", "report", "-i", sleep]) != 0
        err = capsys.readouterr().err.strip()
        assert "PERF_SAMPLE_DATA_SRC" in err and "\n" not in err


def test_mem_report_raw_spe_buffer(tmp_path, capsys, data_dir):
    raw = data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin"
    assert main(["mem", "report", "--raw", str(raw), "--midr", "0x410fd0c0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["samples"] == 1 and out["by_data_source"][0]["data_source"] == "L1 hit"


def test_concat_renumbers_data_objects():
    a = MemSamples.from_columns(2, data_src=[1, 2], dobj=[0, -1], dobj_names=["x"])
    b = MemSamples.from_columns(2, data_src=[3, 4], dobj=[1, 0], dobj_names=["y", "x"])
    c = MemSamples.concat([a, b])
    assert list(c.dobj_name_array()) == ["x", "[unknown]", "x", "y"]


def test_symbols_and_data_objects_of_a_real_library(tmp_path):
    """Samples whose ip is libc's getpid and whose address is in libc's data
    resolve to that symbol and data object through MMAP2 records."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    ip = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    pid = os.getpid()
    maps, data_addr = [], None
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libc.so"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                maps.append(dict(pid=pid, start=lo, length=hi - lo, pgoff=int(parts[2], 16), filename=parts[5],
                                 prot=5 if "x" in parts[1] else 3))
                if "w" in parts[1]:
                    data_addr = lo + 16
    if not maps or data_addr is None:
        pytest.skip("no libc mapping with a writable segment in /proc/self/maps")
    path = tmp_path / "libc.data"
    l1 = D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1)
    write_mem_perf_data(path, [dict(ip=ip, pid=pid, tid=pid, time=i, addr=data_addr, data_src=l1, weight=7)
                               for i in range(3)], mmaps=maps, comms=[dict(pid=pid, comm="py")])
    rep = mem_report(load_mem_samples(path))
    sym = rep["by_symbol"][0]
    assert sym["samples"] == 3 and sym["symbol"].endswith("getpid") and sym["symbol"].startswith("[.] ")
    assert sym["dso"].endswith(os.path.basename(maps[0]["filename"]))
    assert rep["by_data_object"][0]["data_object"].startswith("libc.so")


def test_proc_maps_name_data_of_a_live_process(tmp_path):
    """A recording without MMAP2 records: --proc-maps names data addresses of
    a running pid from /proc/PID/maps (here: this process's heap/anon memory)."""
    import ctypes

    buf = ctypes.create_string_buffer(1 << 20)  # malloc'd: [heap] or an anonymous mmap
    addr = ctypes.addressof(buf)
    pid = os.getpid()
    path = tmp_path / "noproc.data"
    l1 = D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1)
    write_mem_perf_data(path, [dict(ip=0x400000, pid=pid, tid=pid, time=1, addr=addr + 64, data_src=l1, weight=3)],
                        comms=[dict(pid=pid, comm="py")])
    assert list(load_mem_samples(path).dobj_name_array()) == ["[unknown]"]
    named = load_mem_samples(path, procfs=True).dobj_name_array()[0]
    assert named in ("[heap]", "anon")
    d = load_mem_samples(path).to_dict(text=True)
    assert d["op"].tolist() == ["load"] and d["mem_access"].tolist() == ["L1 hit"]
    assert d["mem_lvl_num"].tolist() == [D.LVLNUM_L1]
    del buf


def test_c2c_cli_raw_spe(tmp_path, capsys):
    from pmuscope.spe.packets import ADDRESS, COUNTER, DATA_SOURCE, EVENTS, OP_TYPE, TIMESTAMP, encode_packet

    rec = b"".join(encode_packet(ADDRESS, 0, 0x400000 + 4 * i) + encode_packet(OP_TYPE, 1, i % 2)
                   + encode_packet(EVENTS, 0, 0x16) + encode_packet(COUNTER, 0, 60)
                   + encode_packet(ADDRESS, 2, 0x7F0000001000 + 8 * (i % 4))
                   + encode_packet(DATA_SOURCE, 0, 0xA, payload_len=2) + encode_packet(TIMESTAMP, 0, i)
                   for i in range(20))
    raw = tmp_path / "spe.data"
    raw.write_bytes(rec)
    assert main(["c2c", "--raw", str(raw), "--midr", "0x410fd0c0", "--json", "--line-size", "128"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "peer" and out["shared_lines"][0]["address"] == 0x7F0000001000
    assert out["shared_lines"][0]["peer"] == 10 and out["shared_lines"][0]["lcl_peer"] == 10


def test_plain_weight_and_weight_struct(tmp_path):
    """PERF_SAMPLE_WEIGHT carries a u64 latency; WEIGHT_STRUCT splits var1 (latency) and var2 (instruction latency)."""
    from pmuscope.kernel import abi
    from pmuscope.memory.synth import MEM_SAMPLE_TYPE

    l1 = D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1)
    plain = (MEM_SAMPLE_TYPE & ~abi.PERF_SAMPLE_WEIGHT_STRUCT) | abi.PERF_SAMPLE_WEIGHT
    path = tmp_path / "w.data"
    write_mem_perf_data(path, [dict(ip=1, pid=1, tid=1, time=1, addr=8, data_src=l1, weight=(1 << 40) + 5)],
                        sample_type=plain, comms=[dict(pid=1, comm="x")])
    ms = load_mem_samples(path)
    assert ms.weight.tolist() == [(1 << 40) + 5] and ms.ins_lat.tolist() == [0]
    path2 = tmp_path / "ws.data"
    write_mem_perf_data(path2, [dict(ip=1, pid=1, tid=1, time=1, addr=8, data_src=l1, weight=77, ins_lat=12)],
                        comms=[dict(pid=1, comm="x")])
    ms = load_mem_samples(path2)
    assert ms.weight.tolist() == [77] and ms.ins_lat.tolist() == [12]


def test_spe_report_names_the_data_source_table(data_dir, capsys):
    raw = str(data_dir / "spe" / "arm_spe_decoder_test.SampleSPEPackets.bin")
    assert main(["mem", "report", "--raw", raw]) == 0
    assert "levels come from the events packet (give --midr)" in capsys.readouterr().out
    assert main(["mem", "report", "--raw", raw, "--midr", "0x410fd0c0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["spe_tables"] == {"Neoverse-N1": "common"}


def test_mem_script_equals_perf_script_lines(weight_struct, capsys):
    assert main(["mem", "script", "-i", weight_struct, "--perf-style", "6.1"]) == 0
    ours = capsys.readouterr().out.splitlines()
    with open(os.path.join(DATA, "weight_struct.perf-script-6.1.txt")) as f:
        perf = [line.rstrip("\n") for line in f]
    assert ours == perf


def test_sort_table_equals_perf_mem_report(weight_struct, capsys):
    keys = "mem,snoop,tlb,locked,blocked,dso_daddr"
    want = []
    with open(os.path.join(DATA, "weight_struct.perf-mem-report-sort-multi-6.1.txt")) as f:
        for line in f:
            m = re.match(r"\s+([\d.]+)%\s+(\d+)\s+(.*?)\s*$", line)
            if m:
                want.append((float(m.group(1)), int(m.group(2)), re.split(r"\s{2,}", m.group(3))))
    assert main(["mem", "report", "-i", weight_struct, "--sort", keys, "--perf-style", "6.1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = [(round(r["pct_weight"], 2), r["samples"], [r[k] for k in keys.split(",")]) for r in rows]
    assert got == want and len(got) == 10
    from pmuscope.errors import PmuscopeError
    from pmuscope.memory.report import sort_table

    with pytest.raises(PmuscopeError, match="unknown sort key 'memm'"):
        sort_table(load_mem_samples(weight_struct), "memm")


def test_fast_and_streaming_readers_agree(weight_struct, monkeypatch, tmp_path):
    import pmuscope.memory.samples as S
    from pmuscope.memory.synth import MEM_SAMPLE_TYPE, mem_attr, mem_sample
    from pmuscope.perfdata import PerfDataWriter, synth

    fast = load_mem_samples(weight_struct)
    monkeypatch.setattr(S, "FAST_PATH_MAX_BYTES", 0)
    slow = load_mem_samples(weight_struct)
    for name in ("time", "pid", "tid", "cpu", "ip", "addr", "data_src", "weight", "ins_lat", "kernel"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert list(fast.dobj_name_array()) == list(slow.dobj_name_array())
    monkeypatch.undo()
    # zstd-compressed data (perf record -z): the columnar pass meets COMPRESSED records and falls back
    pytest.importorskip("zstandard")
    path = tmp_path / "z.data"
    l1 = D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1)
    with PerfDataWriter(str(path), compress=3) as w:
        w.add_attr(mem_attr(), [1], "cpu/mem-loads,ldlat=30/P")
        w.write(synth.comm(7, 7, "z", sample_id=synth.sample_id(MEM_SAMPLE_TYPE, pid=7, tid=7, id=1)))
        w.write(synth.mmap2(7, 7, 0x600000, 0x1000, 0, "//anon", prot=3,
                            sample_id=synth.sample_id(MEM_SAMPLE_TYPE, pid=7, tid=7, id=1)))
        for i in range(50):
            w.write(mem_sample(ip=0x400000, pid=7, tid=7, time=i + 1, addr=0x600000 + 8 * i, id=1, data_src=l1,
                               weight=i))
    ms = load_mem_samples(path)
    assert len(ms) == 50 and ms.weight.tolist() == list(range(50))
    assert set(ms.dobj_name_array()) == {"anon"}
