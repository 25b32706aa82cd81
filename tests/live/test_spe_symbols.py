"""``pmuscope spe --symbols`` against real processes: the side band the kernel
writes for a workload under ``perf record`` (its exec COMM, MMAP2 of the
interpreter and libc with their real pgoff), and ``/proc/PID/maps`` of a live
process for a bare buffer with ``--pid``. The SPE data carries PCs the workload
reported for its own functions."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from pmuscope.cli.main import main
from pmuscope.perfdata import PerfDataFile
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe import encode_packet
from pmuscope.spe.packets import ADDRESS, CONTEXT, OP_TYPE, TIMESTAMP
from pmuscope.spe.perfdata import auxtrace_info_record, auxtrace_record
from pmuscope.spe.symbols import kallsyms_text

# prints "pid malloc Py_GetVersion" (addresses in hex), then waits for stdin to close
WORKLOAD = (
    "import ctypes, os, sys\n"
    "f = lambda lib, n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value\n"
    "print(os.getpid(), hex(f(ctypes.CDLL('libc.so.6'), 'malloc')), hex(f(ctypes.pythonapi, 'Py_GetVersion')), flush=True)\n"
    "sys.stdin.read()\n"
)


def _pc(addr: int, el: int = 0) -> int:
    return 1 << 63 | el << 61 | (addr & ((1 << 56) - 1))


def _rec(pc: int, ctx: int | None, op=(0, 0)) -> bytes:
    b = encode_packet(ADDRESS, 0, pc)
    if ctx is not None:
        b += encode_packet(CONTEXT, 0, ctx)
    return b + encode_packet(OP_TYPE, *op) + encode_packet(TIMESTAMP, 0, 1)


def _kernel_function() -> tuple[str, int] | None:
    """(name, address) of a core-kernel function, None when kallsyms hides addresses."""
    if kallsyms_text() is None:
        return None
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[1] in "Tt" and parts[2] in ("schedule", "do_idle", "vfs_read"):
                return parts[2], int(parts[0], 16)
    return None


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_real_side_band_from_perf_record_names_the_workloads_pcs(tmp_path, perf_bin):
    side = tmp_path / "side.data"
    proc = subprocess.run([perf_bin, "record", "-q", "-e", "dummy:u", "-o", str(side), "--", sys.executable, "-c", WORKLOAD],
                          input="", capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"perf record of a dummy event failed here: {proc.stderr.strip()[-200:]}")
    pid, malloc, pyver = (int(x, 0) for x in proc.stdout.split())
    spe = _rec(_pc(malloc + 4), pid) + _rec(_pc(pyver), pid) + _rec(_pc(pyver + 2), None)
    out = tmp_path / "perf.data"
    with PerfDataFile(str(side)) as pf:
        w = PerfDataWriter(str(out), [(a.attr, a.ids, a.name) for a in pf.attrs])
        w.write_record(auxtrace_info_record(42, {0: 0x410FD0C0}))
        for _type, _misc, mv, _off in pf.raw_records():
            w.write_record(bytes(mv))
    w.write_record(auxtrace_record(spe, cpu=0))
    w.close()
    assert main(["spe", "-i", str(out), "--symbols", "-o", str(tmp_path / "o")]) == 0
    rows = _rows(tmp_path / "o" / "spe-other.csv")
    assert [r["symbol"] for r in rows] == ["malloc+0x4", "Py_GetVersion+0x0", "Py_GetVersion+0x2"]
    assert rows[0]["dso"].endswith("libc.so.6") and "python" in rows[1]["dso"]


def test_raw_buffer_with_pid_uses_the_live_process_maps(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", WORKLOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid, malloc, pyver = (int(x, 0) for x in child.stdout.readline().split())
        data = _rec(_pc(malloc + 0x10), 12345, op=(1, 0)) + _rec(_pc(pyver + 4), None)
        kfn = _kernel_function()
        if kfn is not None:
            data += _rec(_pc(kfn[1] + 4, el=1), 0)
        raw = tmp_path / "spe.raw"
        raw.write_bytes(data)
        assert main(["spe", "--raw", str(raw), "--symbols", "--pid", str(pid), "-o", str(tmp_path / "o")]) == 0
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    (ld,) = _rows(tmp_path / "o" / "spe-ldst.csv")
    assert ld["symbol"] == "malloc+0x10" and ld["dso"].endswith("libc.so.6")
    other = _rows(tmp_path / "o" / "spe-other.csv")
    assert other[0]["symbol"] == "Py_GetVersion+0x4"
    if kfn is not None:  # kernel PCs of a bare buffer: this machine's kallsyms
        assert (other[1]["symbol"], other[1]["dso"]) == (f"{kfn[0]}+0x4", "[kernel.kallsyms]")
