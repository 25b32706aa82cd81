"""``pmuscope mem record`` on this machine: without a memory-sampling PMU it
fails with one line naming what is missing; the Recorder's extra
sample_type bits on a software event give samples whose ADDR/DATA_SRC/WEIGHT
fields decode here and that ``perf script``/``perf mem report`` read; with a
PEBS/IBS PMU a real recording is read back as memory samples."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pmuscope.kernel import abi
from pmuscope.memory.datasrc import data_src_text
from pmuscope.memory.events import mem_events_status
from pmuscope.perfdata import PerfDataFile
from pmuscope.records import SampleBatch
from pmuscope.sampling import Recorder

S = abi.PerfSample
PMUSCOPE = [sys.executable, "-m", "pmuscope"]
#: a fixed amount of CPU work, so cpu-clock samples do not depend on machine load
WORK = [sys.executable, "-m", "pmuscope.workloads", "iterations", "20000"]

EVENTS, REASON = mem_events_status()
MEM_KIND = EVENTS[0].kind if EVENTS else None


@pytest.mark.skipif(bool(EVENTS), reason="this machine has a memory-sampling PMU")
def test_no_memory_pmu_is_one_clear_line(tmp_path):
    out = tmp_path / "mem.data"
    proc = subprocess.run([*PMUSCOPE, "mem", "record", "-o", str(out), "--", "true"], capture_output=True,
                          text=True, timeout=60)
    err = proc.stderr.strip()
    assert proc.returncode != 0 and not out.exists()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("pmuscope mem: no memory-sampling PMU")
    # names the PMUs it looked for
    assert "mem-loads" in err and "ibs_op" in err and "arm_spe" in err


def test_extra_sample_bits_on_cpu_clock(tmp_path, perf_bin):
    out = tmp_path / "extra.data"
    rec = Recorder("cpu-clock", sample_type_extra=S.ADDR | S.DATA_SRC | S.WEIGHT, cmd=WORK, output=out, freq=1000)
    rec.start()
    result = rec.run()
    assert result.exit_status == 0 and result.samples > 10
    f = PerfDataFile(str(out))
    st = int(f.attrs[0].attr.sample_type)
    assert st & (S.ADDR | S.DATA_SRC | S.WEIGHT) == S.ADDR | S.DATA_SRC | S.WEIGHT
    assert f.attrs[0].attr.mmap_data == 1
    batches = [b for b in f.records() if isinstance(b, SampleBatch)]
    n = sum(len(b) for b in batches)
    assert n == result.samples
    for b in batches:
        # a software event has no data address/source/latency: the fields exist and decode, addr and
        # weight as zeros, data_src as the kernel's default (perf_sample_data_init: PERF_MEM_NA)
        assert b.addr is not None and b.data_src is not None and b.weight is not None
        assert len(b.addr) == len(b.data_src) == len(b.weight) == len(b)
        assert not b.addr.any() and not b.weight.any()
        assert {data_src_text(int(v)) for v in b.data_src} == {"|OP N/A|LVL N/A|SNP N/A|TLB N/A|LCK N/A|BLK  N/A"}
    proc = subprocess.run([perf_bin, "script", "-F", "ip,addr,data_src,weight", "-i", str(out)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == n
    # perf mem report reads the same samples (data source N/A for a software event)
    rep = subprocess.run([perf_bin, "mem", "report", "--stdio", "-i", str(out)], capture_output=True, text=True,
                         timeout=60)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert re.search(rf"^# Samples: {n}\s+of event 'cpu-clock'", rep.stdout, re.M), rep.stdout[:2000]


@pytest.mark.skipif(MEM_KIND not in ("pebs", "ibs"), reason=f"needs a PEBS or IBS PMU: {REASON or 'Arm SPE here'}")
def test_mem_record_real_pmu(tmp_path, perf_bin):
    out = tmp_path / "mem.data"
    proc = subprocess.run([*PMUSCOPE, "mem", "record", "-o", str(out), "--", *WORK], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    from pmuscope.memory import load_mem_samples

    ms = load_mem_samples(str(out))
    assert len(ms) > 0
    perf_out = subprocess.run([perf_bin, "mem", "report", "--stdio", "-i", str(out)], capture_output=True, text=True,
                              timeout=120)
    assert perf_out.returncode == 0, perf_out.stderr[-2000:]
