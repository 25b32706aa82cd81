"""perf reads the SPE perf.data our recorder path writes: AUXTRACE_INFO,
PERF_RECORD_AUX and the AUXTRACE chunks, with the same packet dump as ours."""

from __future__ import annotations

import re
import subprocess

import tests.unit.test_spe_record as T
from pmuscope.cli.main import main
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe.perfdata import auxtrace_info_record
from pmuscope.spe.record import SpeConfig, drain_ring, find_spe_pmu, spe_attr, spe_event_string


def test_perf_dumps_our_auxtrace(perf_bin, tmp_path, data_dir, capsys):
    ring, mem, aux, ctl = T._fake_ring()
    chunk1 = b"".join(T._load_record(0x400000 + 4 * i, 0x10000 + 8 * i, 0x9, 3 + i, 100 + i) for i in range(3))
    chunk2 = b"".join(T._load_record(0x500000 + 4 * i, 0x20000 + 8 * i, 0xE, 200 + i, 200 + i) for i in range(4))
    out, base = bytearray(), [0]
    r1 = T._aux_record(0, len(chunk1))
    T._publish(ring, mem, aux, ctl, chunk1, r1, 0, 0)
    drain_ring(ring, 2, out, base, 0)
    T._publish(ring, mem, aux, ctl, chunk2, T._aux_record(len(chunk1), len(chunk2)), len(chunk1), len(r1))
    drain_ring(ring, 2, out, base, 0)
    pmu = find_spe_pmu(str(data_dir / "sysfs" / "arm-neoverse-n1"))
    cfg = SpeConfig.for_mem("ldst", 0)
    path = tmp_path / "spe.data"
    with PerfDataWriter(str(path)) as w:
        w.add_attr(spe_attr(cfg, pmu), [9], spe_event_string(cfg))
        w.write(auxtrace_info_record(pmu.type, {2: T.N1}))
        w.write(bytes(out))
    perf = subprocess.run([perf_bin, "report", "-D", "-i", str(path)], capture_output=True, text=True, timeout=60)
    assert perf.returncode == 0, perf.stderr[-400:]
    text = perf.stdout
    assert "PERF_RECORD_AUXTRACE_INFO type: 4" in text
    assert text.count("PERF_RECORD_AUX offset:") == 2 and text.count("PERF_RECORD_AUXTRACE size:") == 2
    spe_line = re.compile(r"^\.  [0-9a-f]{8}:  ")  # SPE packets (raw record hex dumps use 4 digits)
    perf_packets = [ln for ln in text.splitlines() if spe_line.match(ln)]
    assert sum("LAT" in ln for ln in perf_packets) == 7
    assert main(["spe", "--dump", "--perf-style", "6.1", "-i", str(path)]) == 0
    ours = [ln for ln in capsys.readouterr().out.splitlines() if spe_line.match(ln)]
    assert ours == perf_packets
