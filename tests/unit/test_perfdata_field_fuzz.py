"""No field value can crash a reader: every integer field of real perf.data files
(header, attrs, feature table, each kind of record, each sample field and
sample_id trailer) set in turn to the edge values (tests/fieldfuzz.py), and each
mutant read the way every command reads one: report (stdio with and without
children and call graphs, JSON, HTML for a share of them), script, folded
stacks, pprof and speedscope exports; mem and c2c for the memory recording.

Only PmuscopeError (a clean one-line message) may come out; no other exception,
no hang (each mutant has a time bound). The campaign with random multi-field
mutations lives in benchmarks/fuzz_perfdata.py.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError

from tests.conftest import DATA, SHARED_FIXTURES
from tests.fieldfuzz import edges, fields, mutants

CORPUS = [
    DATA / "perfdata" / "perf-g-small.data",  # perf 6.1, cpu-clock -g: kernel + user chains, MMAP2, COMM
    SHARED_FIXTURES / "linux-perf-data" / "sleep.data",
    SHARED_FIXTURES / "linux-perf-data" / "sleep.compressed.pipe.data",
    SHARED_FIXTURES / "perf_data_converter" / "perf.data.singleprocess-3.8",
    SHARED_FIXTURES / "perf_data_converter" / "perf.data.group_desc-4.14",
    SHARED_FIXTURES / "perf_data_converter" / "perf.data.lost_samples-4.4",
    SHARED_FIXTURES / "perf_data_converter" / "perf.data.piped.header_features_aligned-6.12",
]
#: cpu-clock samples with ADDR, DATA_SRC and WEIGHT_STRUCT, recorded by pmuscope (the
#: 13k side-band records of perf_data_converter's weight_struct take 0.4 s a read)
MEMORY = DATA / "memory" / "cpu-clock-mem-bits.data"
#: seconds one mutant may take through every reader before it counts as a hang
BOUND_S = 20


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang()


def consume(path: str, tmp: str, *, html: bool) -> None:
    from pmuscope.export import from_profile, pprof, speedscope
    from pmuscope.profile.callchain import parse_call_graph
    from pmuscope.profile.export import folded_stacks
    from pmuscope.profile.model import load_profile
    from pmuscope.profile.report import format_report, report_json, reports_by_event
    from pmuscope.profile.script import iter_script_bytes

    p = load_profile(path, kernel_symbols=False)
    cg = parse_call_graph("graph,0.5,caller") if p.has_callchain else None
    for children in (False, True):
        for rep in reports_by_event(p, ("comm", "dso", "sym"), children=children, call_graph=cg):
            format_report(rep)
    report_json(reports_by_event(p, ("comm", "dso", "sym")))
    for _ in iter_script_bytes(p):
        pass
    folded_stacks(p)
    ep = from_profile(p)
    pprof.dumps(ep)
    speedscope.dumps(ep)
    if html:
        from pmuscope.profile.html_report import write_report_html

        write_report_html(p, os.path.join(tmp, "m.html"))


def _sweep(files, tmp: str, consume_fn, *, html_every: int = 0, per_type: int = 2):
    """Run every mutant of ``files`` through ``consume_fn``; returns
    (mutants, clean errors, crashes as (file, field, value, exception))."""
    import warnings

    from pmuscope import _policy

    crashes, n, clean = [], 0, 0
    old = signal.signal(signal.SIGALRM, _alarm)
    strict = _policy.STRICT_READS
    quiet = warnings.catch_warnings()
    quiet.__enter__()
    warnings.simplefilter("ignore")  # the lenient reads warn about what they skip
    try:
        for f in files:
            data = f.read_bytes()
            for what, value, buf in mutants(data, per_type=per_type):
                n += 1
                path = os.path.join(tmp, "m.data")
                with open(path, "wb") as out:
                    out.write(buf)
                signal.alarm(BOUND_S)
                # every other mutant as the library reads (strict) and as the commands do
                # (perf's tolerance: damaged optional parts skipped with a warning)
                _policy.STRICT_READS = bool(n % 2)
                try:
                    consume_fn(path, tmp, html=bool(html_every) and n % html_every == 0)
                except PmuscopeError as err:
                    clean += 1
                    assert str(err).strip(), (f.name, what, value)
                except Exception as err:  # noqa: BLE001 - the finding
                    crashes.append((f.name, what, hex(value), f"{type(err).__name__}: {err}"[:300]))
                finally:
                    signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, old)
        _policy.STRICT_READS = strict
        quiet.__exit__(None, None, None)
    return n, clean, crashes


def test_mutator_walks_every_part_of_the_file():
    """The mutator finds the header, attr, feature-table and record fields, of
    file-mode and pipe-mode files alike, independently of pmuscope's reader."""
    data = CORPUS[0].read_bytes()
    names = [w for _, _, w in fields(data)]
    for part in ("header.data.offset", "attr[0].sample_type", "feature[0].offset", "data SAMPLE#0@",
                 "data MMAP2#0@", "data COMM#0@", "data FINISHED_ROUND#0@"):
        assert any(part in w for w in names), part
    pipe = [w for _, _, w in fields(CORPUS[2].read_bytes())]
    assert any(w.startswith("pipe HEADER_ATTR") for w in pipe) and any("COMPRESSED" in w for w in pipe)
    assert edges(8, 100) == [0, 1, 100, 1 << 31, (1 << 32) - 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def _with_records(data: bytearray, typ: int):
    """File offsets and sizes of the records of type ``typ`` in a file-mode perf.data."""
    import struct

    d_off, d_size = struct.unpack_from("<QQ", data, 40)
    pos = d_off
    while pos < d_off + d_size:
        t, _, size = struct.unpack_from("<IHH", data, pos)
        if t == typ:
            yield pos, size
        pos += size


def _load(data: bytes, tmp_path):
    from pmuscope.profile.model import load_profile

    path = tmp_path / "m.data"
    path.write_bytes(bytes(data))
    return load_profile(str(path), kernel_symbols=False)


def test_the_comm_time_that_crashed_report(tmp_path):
    """The one-byte change of the issue: a COMM's sample_id time with its top
    byte 0xff (perf report still shows every sample, 265 here)."""
    data = bytearray(CORPUS[0].read_bytes())
    comms = list(_with_records(data, 3))  # PERF_RECORD_COMM
    assert comms
    for pos, size in comms:
        data[pos + size - 1] = 0xFF  # the high byte of the trailer's last u64 (its time)
    p = _load(data, tmp_path)
    assert len(p) == 265
    from pmuscope.profile.report import build_report, format_report

    assert "python3" in format_report(build_report(p))


def test_unsigned_columns_stay_unsigned(tmp_path):
    """Times, addresses and periods decode as unsigned 64-bit: values with the
    top bit set are kept as they are, not made negative or an overflow."""
    import struct

    data = bytearray(CORPUS[0].read_bytes())
    # this file's samples are IP, TID, TIME, CALLCHAIN, PERIOD (perf record -g -e cpu-clock)
    pos, _ = next(_with_records(data, 9))
    struct.pack_into("<Q", data, pos + 8, (1 << 64) - 16)  # ip
    struct.pack_into("<Q", data, pos + 24, (1 << 63) + 5)  # time
    p = _load(data, tmp_path)
    assert len(p) == 265
    assert p.time.dtype == np.uint64 and p.ip.dtype == np.uint64 and p.period.dtype == np.uint64
    assert (1 << 63) + 5 in p.time.tolist() and (1 << 64) - 16 in p.ip.tolist()


@pytest.mark.parametrize("f", CORPUS, ids=lambda f: f.name)
def test_every_field_at_every_edge_value(f, tmp_path):
    t0 = time.monotonic()
    n, clean, crashes = _sweep([f], str(tmp_path), consume, html_every=25, per_type=1)
    assert n > 500
    assert not crashes, f"{len(crashes)} of {n} mutants crashed a reader:\n" + "\n".join(map(str, crashes[:20]))
    assert time.monotonic() - t0 < 600


def _consume_memory(path: str, tmp: str, *, html: bool) -> None:
    import contextlib
    import io

    from pmuscope.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        for argv in (["mem", "report", "-i", path, "--json"], ["mem", "report", "-i", path],
                     ["c2c", "report", "-i", path, "--json"]):
            rc = main(argv)
            text = err.getvalue()
            assert "Traceback" not in text, text[-2000:]
            if rc not in (0,):
                # a refusal is one line per command, naming the problem
                assert text.strip(), argv


def test_memory_recording_fields_through_mem_and_c2c(tmp_path):
    assert MEMORY.exists(), f"fixture missing from the checkout: {MEMORY}"
    n, _, crashes = _sweep([MEMORY], str(tmp_path), _consume_memory, per_type=1)
    assert n > 200
    assert not crashes, f"{len(crashes)} of {n} mutants crashed mem/c2c:\n" + "\n".join(map(str, crashes[:20]))
