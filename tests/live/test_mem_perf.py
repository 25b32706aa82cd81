"""Live checks of pmuscope.memory against Linux perf (the installed perf is the
oracle for data_src text, weights and perf mem report's grouping) and of the
memory-sampling PMUs of this machine."""

from __future__ import annotations

import platform
import re
import subprocess

import numpy as np
import pytest

from pmuscope.cli.main import main
from pmuscope.errors import NoHardwarePMUError
from pmuscope.memory import datasrc as D
from pmuscope.memory.events import mem_events_status
from pmuscope.memory.report import mem_report
from pmuscope.memory.samples import load_mem_samples
from pmuscope.memory.synth import write_mem_perf_data
from pmuscope.spe.record import SpeRecorder, find_spe_pmu


def _perf_version(perf_bin) -> tuple[int, int]:
    out = subprocess.run([perf_bin, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _random_data_src(n: int, seed: int) -> np.ndarray:
    """Valid-looking perf_mem_data_src values: each field drawn from its flags."""
    rng = np.random.default_rng(seed)

    def pick(choices, k=2):
        out = np.zeros(n, np.uint64)
        for _ in range(k):
            out |= rng.choice(np.array(choices, np.uint64), n)
        return out

    return D.encode(
        op=pick([0, D.OP_LOAD, D.OP_STORE, D.OP_PFETCH, D.OP_EXEC, D.OP_NA], 1),
        lvl=pick([0, D.LVL_HIT, D.LVL_MISS, D.LVL_L1, D.LVL_LFB, D.LVL_L2, D.LVL_L3, D.LVL_LOC_RAM, D.LVL_REM_RAM1,
                  D.LVL_REM_CCE1, D.LVL_REM_CCE2, D.LVL_IO, D.LVL_UNC, D.LVL_NA]),
        snoop=pick([0, D.SNOOP_NA, D.SNOOP_NONE, D.SNOOP_HIT, D.SNOOP_MISS, D.SNOOP_HITM]),
        lock=pick([0, D.LOCK_NA, D.LOCK_LOCKED], 1),
        dtlb=pick([0, D.TLB_NA, D.TLB_HIT, D.TLB_MISS, D.TLB_L1, D.TLB_L2, D.TLB_WK, D.TLB_OS]),
        lvl_num=rng.integers(0, 16, n).astype(np.uint64),
        remote=rng.integers(0, 2, n).astype(np.uint64),
        snoopx=rng.integers(0, 4, n).astype(np.uint64),
        blk=pick([0, D.BLK_NA, D.BLK_DATA, D.BLK_ADDR]),
        hops=rng.integers(0, 5, n).astype(np.uint64),
    )


def _any_data_src(n: int, seed: int) -> np.ndarray:
    """Every bit of every field random, except mem_hops kept <= 4 (perf indexes
    a 5-entry table with it: larger values read past the array)."""
    vals = np.random.default_rng(seed).integers(0, 1 << 51, n, dtype=np.uint64)
    f = D.decode(vals)
    return D.encode(**{k: (np.minimum(getattr(f, k), 4) if k == "hops" else getattr(f, k)) for k in D.FIELDS})


@pytest.mark.parametrize("kind", ["flags", "any_bits"])
def test_data_src_text_and_weight_equal_perf_script(perf_bin, tmp_path, kind):
    if _perf_version(perf_bin) > (6, 2):
        pytest.skip("the 6.1 wording is checked against perf <= 6.2; newer perf prints the new wording")
    vals = _random_data_src(400, seed=11) if kind == "flags" else _any_data_src(1000, seed=12)
    path = tmp_path / "mem.data"
    write_mem_perf_data(path, [dict(ip=0x401000 + i, pid=100, tid=100, cpu=i % 2, time=1000 + i, addr=0x1000 * i + 8,
                                    data_src=int(v), weight=10 + i, ins_lat=i % 7) for i, v in enumerate(vals)],
                        comms=[dict(pid=100, comm="t")])
    out = subprocess.run([perf_bin, "script", "-F", "data_src,weight", "-i", str(path)], capture_output=True,
                         text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert len(lines) == len(vals), out.stderr[-500:]
    bad = []
    for i, (v, line) in enumerate(zip(vals, lines)):
        m = re.match(r"\s*([0-9a-f]+) (\|OP .*?)\s+(\d+)\s*$", line)
        assert m, line
        if (int(m.group(1), 16), m.group(2).rstrip(), int(m.group(3))) != (int(v), D.data_src_text(int(v), "6.1").rstrip(), 10 + i):
            bad.append((hex(int(v)), line, D.data_src_text(int(v), "6.1")))
    assert not bad, bad[:5]


def test_by_data_source_equals_perf_mem_report(perf_bin, tmp_path):
    if _perf_version(perf_bin) > (6, 2):
        pytest.skip("compares the 6.1 wording")
    rng = np.random.default_rng(3)
    choices = [D.encode(op=D.OP_LOAD, lvl=D.LVL_L1 | D.LVL_HIT, lvl_num=D.LVLNUM_L1, snoop=D.SNOOP_NONE),
               D.encode(op=D.OP_LOAD, lvl=D.LVL_L3 | D.LVL_HIT, lvl_num=D.LVLNUM_L3, snoop=D.SNOOP_HITM),
               D.encode(op=D.OP_LOAD, lvl=D.LVL_LOC_RAM | D.LVL_HIT, lvl_num=D.LVLNUM_RAM, snoop=D.SNOOP_HIT),
               # perf groups this column by mem_lvl alone (sort__lvl_cmp) and prints the first
               # entry's text; keep mem_lvl distinct per text so both groupings agree
               D.encode(op=D.OP_STORE, lvl=D.LVL_L1 | D.LVL_MISS)]
    samples = [dict(ip=0x401000, pid=100, tid=100, time=10 + i, addr=0x600000 + 8 * i,
                    data_src=int(choices[int(rng.integers(0, 4))]), weight=int(rng.integers(1, 500)))
               for i in range(300)]
    path = tmp_path / "mem.data"
    write_mem_perf_data(path, samples, comms=[dict(pid=100, comm="t")])
    out = subprocess.run([perf_bin, "mem", "report", "--stdio", "--sort=mem", "-i", str(path)],
                         capture_output=True, text=True, timeout=60).stdout
    perf_rows = [(float(a), int(b), c.strip()) for a, b, c in re.findall(r"^\s+([\d.]+)%\s+(\d+)\s+(.+?)\s*$", out, re.M)]
    rep = mem_report(load_mem_samples(path), style="6.1")
    ours = [(round(r["pct_weight"], 2), r["samples"], r["data_source"]) for r in rep["by_data_source"]]
    assert perf_rows and sorted(ours) == sorted(perf_rows)


def test_memory_sampling_pmus_of_this_machine(capsys):
    events, reason = mem_events_status()
    rc = main(["mem", "events"])
    cap = capsys.readouterr()
    if events:
        assert rc == 0 and all(e.tag in cap.out for e in events)
    else:
        assert rc == 1 and reason
        err = cap.err.strip()
        assert err.startswith("pmuscope mem: no memory-sampling PMU") and "\n" not in err


@pytest.mark.skipif(platform.machine() not in ("x86_64", "amd64"), reason="checks the no-SPE message on x86")
def test_no_spe_on_x86_is_one_clear_line(capsys, tmp_path):
    with pytest.raises(NoHardwarePMUError, match="no arm_spe_\\* PMU .*Arm CPU feature"):
        find_spe_pmu()
    with pytest.raises(NoHardwarePMUError):
        SpeRecorder()
    assert main(["mem", "record", "-o", str(tmp_path / "x.data"), "--", "true"]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and ("arm_spe" in err or "perf mem record" in err)


def test_pipe_mode_from_perf_inject_on_stdin(perf_bin, shared_fixtures):
    """perf inject -o - writes pipe-mode perf.data; pmuscope mem report -i - reads it from stdin."""
    import json
    import os
    import sys

    src = os.path.join(shared_fixtures, "perf_data_converter", "perf.data.weight_struct")
    assert os.path.exists(src), f"fixture missing from the checkout: {src}"
    pipe = subprocess.run([perf_bin, "inject", "-i", src, "-o", "-"], capture_output=True, timeout=60).stdout
    assert pipe[:8] == b"PERFILE2"
    out = subprocess.run([sys.executable, "-m", "pmuscope", "mem", "report", "-i", "-", "--json"], input=pipe,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr[-400:]
    rep = json.loads(out.stdout)
    assert rep["summary"]["samples"] == 14 and rep["summary"]["total_weight"] == 1725
    assert {r["data_object"]: r["samples"] for r in rep["by_data_object"]} == {"[unknown]": 9, "anon": 4, "borglet": 1}


def test_mem_script_byte_identical_to_perf_script(perf_bin, tmp_path, capsys):
    if _perf_version(perf_bin) > (6, 2):
        pytest.skip("compares the 6.1 wording")
    vals = _any_data_src(300, seed=21)
    path = tmp_path / "mem.data"
    write_mem_perf_data(path, [dict(ip=0x401000 + 8 * i, pid=100, tid=100, cpu=i % 2, time=1000 + i,
                                    addr=0x7F0000000000 + 64 * i, data_src=int(v), weight=(i * 37) % 1000)
                               for i, v in enumerate(vals)], comms=[dict(pid=100, comm="t")])
    perf = subprocess.run([perf_bin, "script", "-F", "ip,addr,data_src,weight", "-i", str(path)], capture_output=True,
                          text=True, timeout=60).stdout.splitlines()
    assert main(["mem", "script", "-i", str(path), "--perf-style", "6.1"]) == 0
    assert capsys.readouterr().out.splitlines() == perf


@pytest.mark.parametrize("keys", ["mem", "mem,snoop,tlb,locked,blocked", "local_weight,mem", "snoop,dso_daddr"])
def test_sort_tables_equal_perf_mem_report(perf_bin, tmp_path, keys):
    """perf groups each key by one data_src field and prints the first entry's
    text; sort_table does the same, so the rows are identical (distinct weights
    per sample avoid ties in the order)."""
    if _perf_version(perf_bin) > (6, 2):
        pytest.skip("compares the 6.1 wording")
    from pmuscope.memory.report import sort_table

    rng = np.random.default_rng(31)
    n = 150
    # realistic levels (perf 6.1 overflows a stack buffer on long multi-level texts: "stack smashing")
    lvls = [(D.LVL_L1 | D.LVL_HIT, D.LVLNUM_L1), (D.LVL_LFB | D.LVL_HIT, D.LVLNUM_LFB), (D.LVL_L2 | D.LVL_HIT, 2),
            (D.LVL_L3 | D.LVL_HIT, 3), (D.LVL_L3 | D.LVL_MISS, 3), (D.LVL_LOC_RAM | D.LVL_HIT, D.LVLNUM_RAM),
            (D.LVL_REM_CCE1 | D.LVL_HIT, D.LVLNUM_ANY_CACHE), (D.LVL_NA, D.LVLNUM_NA), (D.LVL_L1 | D.LVL_HIT, 0),
            (D.LVL_L2 | D.LVL_MISS, 0)]
    pick = rng.integers(0, len(lvls), n)
    vals = D.encode(op=np.full(n, D.OP_LOAD), lvl=np.array([lvls[i][0] for i in pick]),
                    lvl_num=np.array([lvls[i][1] for i in pick]),
                    snoop=rng.choice(np.array([D.SNOOP_NONE, D.SNOOP_HIT, D.SNOOP_HITM, D.SNOOP_NA, D.SNOOP_MISS]), n),
                    snoopx=rng.integers(0, 3, n), remote=(pick == 6).astype(int), hops=np.where(pick == 6, 2, 0),
                    dtlb=rng.choice(np.array([D.TLB_L1 | D.TLB_HIT, D.TLB_L2 | D.TLB_MISS, D.TLB_WK | D.TLB_HIT, 0]), n),
                    lock=rng.integers(0, 3, n), blk=rng.choice(np.array([0, D.BLK_NA, D.BLK_DATA, D.BLK_ADDR]), n))
    weights = rng.choice(np.arange(1, 1_000_000), n, replace=False)  # group sums do not tie
    maps = [dict(pid=100, start=0x600000, length=0x10000, filename="/usr/bin/app", prot=3),
            dict(pid=100, start=0x7F0000000000, length=0x100000, filename="//anon", prot=3)]
    addrs = rng.choice(np.array([0x600100, 0x7F0000000100, 0x900000], np.uint64), len(vals))
    path = tmp_path / "sort.data"
    write_mem_perf_data(path, [dict(ip=0x401000, pid=100, tid=100, time=10 + i, addr=int(addrs[i]), data_src=int(v),
                                    weight=int(weights[i])) for i, v in enumerate(vals)],
                        mmaps=maps, comms=[dict(pid=100, comm="t")])
    out = subprocess.run([perf_bin, "mem", "report", "--stdio", f"--sort={keys}", "-i", str(path)],
                         capture_output=True, text=True, timeout=60).stdout
    want = []
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\d+)\s+(.*?)\s*$", line)
        if m:
            want.append((float(m.group(1)), int(m.group(2)), re.split(r"\s{2,}", m.group(3))))
    rows = sort_table(load_mem_samples(path), keys, style="6.1")
    got = [(round(r["pct_weight"], 2), r["samples"], [str(r[k]) for k in keys.split(",")]) for r in rows]
    assert want and got == want
