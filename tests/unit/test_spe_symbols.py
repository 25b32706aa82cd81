"""``pmuscope spe --symbols``: SPE PCs, branch targets and data addresses named
from a synthetic perf.data whose MMAP2 side band maps real binaries of this
machine (libc, libpython/python) at the addresses this test process has them."""

from __future__ import annotations

import csv
import ctypes
import os

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.kernel import abi
from pmuscope.perfdata import Feature, synth
from pmuscope.perfdata.writer import PerfDataWriter
from pmuscope.spe import decode_records, encode_packet
from pmuscope.spe.packets import ADDRESS, CONTEXT, OP_TYPE, TIMESTAMP
from pmuscope.spe.perfdata import auxtrace_info_record, auxtrace_record
from pmuscope.spe.symbols import SpeSymbolizer, kallsyms_text
from pmuscope.spe.tables import BRANCH_COLS, LDST_COLS, OTHER_COLS

PID, THREAD = 4242, 4243
HEAP = (0x5500_0000_0000, 0x21000)
ANON = (0x7e00_0000_0000, 0x10000)
N1 = 0x410FD0C0


def _fn(lib, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def _mapping_of(addr: int) -> tuple[int, int, int, str]:
    """(start, len, pgoff, path) of this process's executable mapping holding addr."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return lo, hi - lo, int(parts[2], 16), parts[5].strip()
    raise AssertionError(f"{addr:#x} is in no mapping")


LIBC = ctypes.CDLL("libc.so.6")
MALLOC = _fn(LIBC, "malloc")
PYVER = _fn(ctypes.pythonapi, "Py_GetVersion")


def _pc(addr: int, el: int = 0) -> int:
    return 1 << 63 | el << 61 | (addr & ((1 << 56) - 1))


def _rec(*, pc: int, op: tuple[int, int], ctx: int | None = None, tgt: int | None = None, va: int | None = None,
         ts: int = 1) -> bytes:
    b = encode_packet(ADDRESS, 0, pc)
    if tgt is not None:
        b += encode_packet(ADDRESS, 1, tgt)
    if va is not None:
        b += encode_packet(ADDRESS, 2, va)
    if ctx is not None:
        b += encode_packet(CONTEXT, 0, ctx)
    b += encode_packet(OP_TYPE, op[0], op[1])
    return b + encode_packet(TIMESTAMP, 0, ts)


def _write(path, data: bytes, *, procs=(PID,), host: bool = False, hostname: str | None = None,
           kernel_text: int | None = None, late: bytes = b"") -> None:
    attr = abi.perf_event_attr(type=42, sample_period=1, sample_type=abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_TID)
    w = PerfDataWriter(str(path), host=host)
    if hostname:
        w.features[Feature.HOSTNAME] = hostname
    w.add_attr(attr, [1], name="arm_spe_0//")
    w.write_record(auxtrace_info_record(42, {0: N1}))
    if kernel_text is not None:
        w.write_record(synth.mmap(0xFFFFFFFF, 0, kernel_text, 0x1000000, kernel_text, "[kernel.kallsyms]_text",
                                  misc=abi.PERF_RECORD_MISC_KERNEL))
    for pid in procs:
        w.write_record(synth.comm(pid, pid, "worker", exec=True))
        w.write_record(synth.comm(pid, pid + 1, "worker-t"))
        for addr in (MALLOC, PYVER):
            start, length, pgoff, name = _mapping_of(addr)
            w.write_record(synth.mmap2(pid, pid, start, length, pgoff, name))
        w.write_record(synth.mmap2(pid, pid, HEAP[0], HEAP[1], 0, "[heap]", prot=3))
        w.write_record(synth.mmap2(pid, pid, ANON[0], ANON[1], 0, "//anon", prot=3))
    w.write_record(auxtrace_record(data, cpu=0, tid=-1))
    if late:
        w.write_record(late)
    w.close()


def _spe(path, *args) -> dict[str, list[dict[str, str]]]:
    from pmuscope.cli.main import main

    out = path.parent / "out"
    assert main(["spe", "-i", str(path), "-o", str(out), "--symbols", *args]) == 0
    tables = {}
    for name in ("ldst", "br", "other"):
        p = out / f"spe-{name}.csv"
        if p.exists():
            with open(p, newline="") as f:
                tables[name] = list(csv.DictReader(f))
    return tables


def test_pcs_targets_and_data_objects_named_from_the_mmap2_side_band(tmp_path):
    data = (
        _rec(pc=_pc(PYVER + 4), op=(1, 0), ctx=PID, va=HEAP[0] + 0x10)        # load in Py_GetVersion, heap data
        + _rec(pc=_pc(MALLOC + 8), op=(1, 1), ctx=THREAD, va=ANON[0] + 0x40)  # store by a thread of PID
        + _rec(pc=_pc(MALLOC), op=(2, 1), ctx=PID, tgt=_pc(PYVER))            # branch malloc -> Py_GetVersion
        + _rec(pc=_pc(PYVER + 0x10), op=(0, 0))                             # no CONTEXT: the file's only process
        + _rec(pc=_pc(MALLOC), op=(1, 0), ctx=999, va=HEAP[0])                # a pid the file never mapped
    )
    path = tmp_path / "perf.data"
    _write(path, data)
    t = _spe(path)
    _, _, _, libc = _mapping_of(MALLOC)
    _, _, _, pylib = _mapping_of(PYVER)
    # spe-parser's columns first and unchanged, symbol columns after them
    assert list(t["ldst"][0]) == LDST_COLS + ["symbol", "dso", "data_object"]
    assert list(t["br"][0]) == BRANCH_COLS + ["symbol", "dso", "br_tgt_symbol", "br_tgt_dso"]
    assert list(t["other"][0]) == OTHER_COLS + ["symbol", "dso"]
    ld = t["ldst"]
    assert [(r["symbol"], r["dso"], r["data_object"]) for r in ld] == [
        ("Py_GetVersion+0x4", pylib, "[heap]"),
        ("malloc+0x8", libc, "anon"),
        ("[unknown]", "[unknown]", "[unknown]"),
    ]
    assert ld[0]["pc"] == f"0x{PYVER + 4:x}" and ld[1]["context"] == f"0x{THREAD:x}"
    (br,) = t["br"]
    assert (br["symbol"], br["dso"], br["br_tgt_symbol"], br["br_tgt_dso"]) == ("malloc+0x0", libc, "Py_GetVersion+0x0", pylib)
    (other,) = t["other"]
    assert (other["symbol"], other["dso"]) == ("Py_GetVersion+0x10", pylib)


def test_without_context_and_several_processes_pc_stays_unknown_unless_pid_given(tmp_path):
    path = tmp_path / "perf.data"
    _write(path, _rec(pc=_pc(MALLOC + 2), op=(0, 0)), procs=(PID, PID + 100))
    assert [(r["symbol"], r["dso"]) for r in _spe(path)["other"]] == [("[unknown]", "[unknown]")]
    (row,) = _spe(path, "--pid", str(PID + 100))["other"]
    assert row["symbol"] == "malloc+0x2" and row["dso"].endswith("libc.so.6")


def test_side_band_applies_in_file_order(tmp_path):
    """An exec after the AUXTRACE chunk (COMM exec empties the maps) does not
    un-name the chunk's PCs; the file's side band is read up to each chunk."""
    path = tmp_path / "perf.data"
    _write(path, _rec(pc=_pc(MALLOC), op=(0, 0), ctx=PID), late=synth.comm(PID, PID, "other", exec=True))
    assert _spe(path)["other"][0]["symbol"] == "malloc+0x0"
    sym = SpeSymbolizer.for_perf_data(str(path))
    recs = decode_records(_rec(pc=_pc(MALLOC), op=(0, 0), ctx=PID))
    sym.advance()  # all of it, the late exec included
    assert sym.columns(recs)["symbol"].tolist() == ["[unknown]"]


def _kernel_function() -> tuple[str, int]:
    """A kernel text symbol of this machine, or skip."""
    text = kallsyms_text()
    if text is None:
        pytest.skip("/proc/kallsyms shows no _text address (kptr_restrict or not root)")
    with open("/proc/kallsyms") as f:
        for line in f:
            a, t, name = line.split()[:3]
            if t in "Tt" and name in ("schedule", "do_idle", "vfs_read") and len(line.split()) == 3:
                return name, int(a, 16)
    pytest.skip("no schedule/do_idle/vfs_read in kallsyms")


def test_kernel_pcs_use_kallsyms_for_files_from_this_machine(tmp_path):
    name, addr = _kernel_function()
    text = kallsyms_text()
    path = tmp_path / "perf.data"
    _write(path, _rec(pc=_pc(addr + 4, el=1), op=(0, 0), ctx=0), host=True, kernel_text=text)
    (row,) = _spe(path)["other"]
    assert row["el"] == "1" and (row["symbol"], row["dso"]) == (f"{name}+0x4", "[kernel.kallsyms]")
    # the file's kernel MMAP says _text sat 2 MiB lower (another boot's KASLR): addresses shift back
    shift = 0x200000
    _write(path, _rec(pc=_pc(addr - shift + 8, el=1), op=(0, 0)), host=True, kernel_text=text - shift)
    (row,) = _spe(path)["other"]
    assert (row["symbol"], row["dso"]) == (f"{name}+0x8", "[kernel.kallsyms]")


def test_kernel_pcs_of_another_machine_stay_unresolved(tmp_path, capsys):
    name, addr = _kernel_function()
    path = tmp_path / "perf.data"
    _write(path, _rec(pc=_pc(addr, el=1), op=(0, 0), ctx=PID), hostname="not-" + os.uname().nodename)
    (row,) = _spe(path)["other"]
    assert (row["symbol"], row["dso"]) == ("[unknown]", "[kernel.kallsyms]")
    assert "recorded on another machine" in capsys.readouterr().err


def test_summary_lists_top_symbols_without_output_dir(tmp_path, capsys):
    from pmuscope.cli.main import main

    path = tmp_path / "perf.data"
    data = b"".join(_rec(pc=_pc(MALLOC + 4 * i), op=(1, 0), ctx=PID) for i in range(3)) + _rec(pc=_pc(PYVER), op=(0, 0), ctx=PID)
    _write(path, data)
    assert main(["spe", str(path), "--symbols"]) == 0
    lines = capsys.readouterr().out.splitlines()
    top = lines[lines.index("  top PCs by symbol:") + 1:]
    assert top[0].split()[0] == "3" and top[0].split()[2] == "malloc"
    assert top[1].split()[0] == "1" and top[1].split()[2] == "Py_GetVersion"


def test_parquet_carries_symbol_columns(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from pmuscope.cli.main import main

    path = tmp_path / "perf.data"
    _write(path, _rec(pc=_pc(MALLOC + 4), op=(1, 0), ctx=PID, va=HEAP[0]))
    assert main(["spe", str(path), "--symbols", "-t", "parquet", "-o", str(tmp_path / "o")]) == 0
    t = pq.read_table(tmp_path / "o" / "spe-ldst.parquet").to_pydict()
    assert t["symbol"] == ["malloc+0x4"] and t["data_object"] == ["[heap]"] and list(t)[:len(LDST_COLS)] == LDST_COLS


def test_without_symbols_the_tables_keep_exactly_spe_parsers_columns(tmp_path):
    from pmuscope.cli.main import main

    path = tmp_path / "perf.data"
    _write(path, _rec(pc=_pc(MALLOC), op=(1, 0), ctx=PID))
    assert main(["spe", str(path), "-o", str(tmp_path / "o")]) == 0
    header = (tmp_path / "o" / "spe-ldst.csv").read_text().splitlines()[0]
    assert header == ",".join(f'"{c}"' for c in LDST_COLS)


def test_csv_quotes_symbol_names_with_commas():
    from pmuscope.spe.tables import _csv_rows

    table = {"symbol": ['f(int, char)+0x4', 'plain+0x0'], "dso": ["a", 'x"y']}
    text = _csv_rows(table, ["symbol", "dso"])
    assert list(csv.reader(text.splitlines())) == [["f(int, char)+0x4", "a"], ["plain+0x0", 'x"y']]


def test_distinct_pid_pc_pairs_resolve_once(tmp_path, monkeypatch):
    path = tmp_path / "perf.data"
    _write(path, b"")
    sym = SpeSymbolizer.for_perf_data(str(path))
    sym.advance()
    recs = decode_records(b"".join(_rec(pc=_pc(MALLOC + (i % 3)), op=(0, 0), ctx=PID) for i in range(300)))
    seen = []
    real = sym.symbolizer.resolve_many
    monkeypatch.setattr(sym.symbolizer, "resolve_many", lambda p, a, kernel=None: seen.append(len(a)) or real(p, a, kernel))
    cols = sym.columns(recs)
    assert seen[0] == 3
    assert np.unique(cols["symbol"]).tolist() == ["malloc+0x0", "malloc+0x1", "malloc+0x2"]


def test_cli_errors(tmp_path, capsys):
    from pmuscope.cli.main import main

    raw = tmp_path / "spe.raw"
    raw.write_bytes(_rec(pc=_pc(MALLOC), op=(0, 0)))
    assert main(["spe", "--raw", str(raw), "--symbols"]) != 0
    err = capsys.readouterr().err
    assert "--raw needs --pid PID" in err and "Traceback" not in err
    assert main(["spe", "--raw", str(raw), "--pid", "12"]) != 0
    assert "add --symbols" in capsys.readouterr().err
    dead = 2**22 + 12345  # above pid_max's default ceiling: no such process
    assert main(["spe", "--raw", str(raw), "--symbols", "--pid", str(dead)]) != 0
    assert f"process {dead} does not exist" in capsys.readouterr().err
    assert main(["spe", str(tmp_path / "missing.data"), "--symbols"]) != 0
    assert "missing.data" in capsys.readouterr().err
    with pytest.raises(PmuscopeError, match="does not exist"):
        SpeSymbolizer.for_pid(dead)
