"""perf.data both ways with the real Linux perf: files perf records are read
with perf's own counts; files pmuscope writes are read by ``perf report`` and
``perf script`` with the sample count and the top symbols we put in."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

import pytest

from pmuscope.kernel import abi
from pmuscope.perfdata import Feature, PerfDataFile, synth
from pmuscope.perfdata.writer import PerfDataWriter, PerfPipeWriter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data", "perfdata"))
from perfstats import PIPE_ONLY, convert, our_stats, perf_stats  # noqa: E402

S = abi.PerfSample
WORKLOAD = [sys.executable, "-m", "pmuscope.workloads", "busy", "0.3"]


def _record(perf_bin, args, out, *, pipe=False):
    cmd = [perf_bin, "record", "-e", "cpu-clock", *args, "-o", "-" if pipe else str(out), "--", *WORKLOAD]
    if pipe:
        with open(out, "wb") as f:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, timeout=120)
    else:
        proc = subprocess.run(cmd, capture_output=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"perf record does not work here: {proc.stderr.decode()[-300:]}")
    return str(out)


@pytest.mark.parametrize("args,pipe", [([], False), (["-g"], False), (["-g", "-z"], False), (["-g"], True)],
                         ids=["file", "callgraph", "zstd", "pipe"])
def test_read_what_perf_records(perf_bin, tmp_path, args, pipe):
    path = _record(perf_bin, args, tmp_path / "rec.data", pipe=pipe)
    totals, per_event = perf_stats(perf_bin, path)
    with PerfDataFile(path) as p:
        assert p.pipe == pipe
        assert our_stats(p) == totals
        assert dict(zip(p.event_names, p.sample_counts())) == per_event
        assert totals["SAMPLE"] > 100
        assert p.features[Feature.HOSTNAME] == os.uname().nodename
        assert p.features[Feature.CMDLINE][1] == "record"
        if "-z" in args:
            assert p.features[Feature.COMPRESSED].type == 1


@pytest.mark.parametrize("args", [["-g"], ["-g", "-z"]], ids=["pipe", "zstd-pipe"])
def test_pipe_mode_is_read_in_large_aligned_chunks(perf_bin, tmp_path, args):
    """perf 6.1's pipe-mode preamble has HEADER_FEATURE records whose size is
    not a multiple of 8: the chunks after them start 8-byte aligned again (the
    decoder's columnar path, not a struct loop per sample), chunks are not cut
    at each record, and report/script read the file, its bytes from stdin and
    record by record (RecordSource) alike."""
    from pmuscope.profile.model import build_profile, load_profile
    from pmuscope.records.decode import iter_headers
    from pmuscope.symbols import Symbolizer

    path = _record(perf_bin, args, tmp_path / "rec.pipe", pipe=True)
    with PerfDataFile(path) as p:
        unpadded = [r for r in p.raw_records() if len(r[2]) % 8]
        chunks = [bytes(c) for _b, c in p.raw_chunks()]
        samples = sum(1 for r in p.raw_records() if r[0] == abi.PERF_RECORD_SAMPLE)
    if "-z" not in args:
        assert unpadded, "perf 6.1 pads its pipe-mode features now: this test no longer covers them"
    on_grid = [off % 8 == 0 for c in chunks for off, t, _m, _s in iter_headers(c) if t == abi.PERF_RECORD_SAMPLE]
    assert len(on_grid) == samples > 100 and all(on_grid)
    from pmuscope.perfdata.reader import CHUNK_BYTES

    with_samples = [c for c in chunks if any(t == abi.PERF_RECORD_SAMPLE for _o, t, _m, _s in iter_headers(c))]
    assert len(with_samples) <= 2 + sum(map(len, chunks)) // CHUNK_BYTES  # not cut at side-band records
    with PerfDataFile(path) as p:
        ref = build_profile(p.records(), event_names=p.event_names, symbolizer=Symbolizer(kernel=False))
    got = load_profile(path, symbolizer=Symbolizer(kernel=False))
    for col in ("pid", "tid", "time", "period", "ip", "comm", "leaf"):
        assert (getattr(got, col) == getattr(ref, col)).all(), col
    script = [sys.executable, "-m", "pmuscope", "script", "--no-kernel-symbols", "-i"]
    from_path = subprocess.run([*script, path], capture_output=True, text=True, timeout=120)
    with open(path, "rb") as f:
        from_stdin = subprocess.run([*script, "-"], stdin=f, capture_output=True, text=True, timeout=120)
    assert from_path.returncode == 0 and from_path.stdout == from_stdin.stdout
    assert from_path.stdout.count(" cpu-clock:") == samples


def test_read_directory_format(perf_bin, tmp_path):
    out = tmp_path / "thr.data"
    proc = subprocess.run([perf_bin, "record", "--threads", "-e", "cpu-clock", "-o", str(out), "--", *WORKLOAD],
                          capture_output=True, timeout=120)
    if proc.returncode != 0 or not out.is_dir():
        pytest.skip(f"perf record --threads does not work here: {proc.stderr.decode()[-300:]}")
    totals, per_event = perf_stats(perf_bin, str(out))
    with PerfDataFile(str(out)) as p:
        assert p.directory_format and our_stats(p) == totals
        assert dict(zip(p.event_names, p.sample_counts())) == per_event


def test_read_zstd_pipe_that_perf_cannot(perf_bin, tmp_path):
    """perf 6.1 fails on its own ``record -z -o -`` output ("Couldn't
    decompress data"); we read it, and perf agrees with our records once they
    are written back uncompressed."""
    path = _record(perf_bin, ["-z"], tmp_path / "rec.pipe", pipe=True)
    with PerfDataFile(path) as p:
        ours = our_stats(p)
        assert ours.get("COMPRESSED", 0) > 0
        written = convert(p, str(tmp_path / "conv.data"))
    totals, per_event = perf_stats(perf_bin, str(tmp_path / "conv.data"))
    assert totals == written
    assert totals["SAMPLE"] == ours["SAMPLE"] > 100


@pytest.mark.parametrize("key", ["linux-perf-data/sleep.data", "linux-perf-data/sleep.compressed2.data",
                                 "linux-perf-data/fibo.compressed2.pipe.data"])
def test_newer_perf_files_through_perf(perf_bin, shared_fixtures, tmp_path, key):
    """Files from a newer perf (attr.size 136, COMPRESSED2) that perf 6.1 refuses:
    rewritten by PerfDataWriter, perf counts exactly the records we read."""
    with PerfDataFile(str(shared_fixtures / key)) as p:
        ours = our_stats(p)
        written = convert(p, str(tmp_path / "conv.data"))
    totals, per_event = perf_stats(perf_bin, str(tmp_path / "conv.data"))
    assert totals == written
    expect = {k: v for k, v in ours.items() if k not in ("ATTR", "FEATURE", "COMPRESSED", "COMPRESSED2")}
    assert totals == expect


def test_perf_reads_our_zstd_file(perf_bin, tmp_path):
    """A perf-recorded file rewritten with PerfDataWriter(compress=3): perf
    decompresses our PERF_RECORD_COMPRESSED records and counts the same."""
    pytest.importorskip("zstandard")
    path = _record(perf_bin, ["-g"], tmp_path / "rec.data")
    src = PerfDataFile(path)
    dest = str(tmp_path / "z.data")
    with PerfDataWriter(dest, src.attrs, compress=3) as w:
        for base, chunk in src.raw_chunks():
            w.write(chunk)
    totals, per_event = perf_stats(perf_bin, dest)
    with PerfDataFile(dest) as z:
        assert our_stats(z) == totals and totals["COMPRESSED"] >= 1
    want = perf_stats(perf_bin, path)
    assert {k: v for k, v in totals.items() if k != "COMPRESSED"} == want[0] and per_event == want[1]
    reports = [subprocess.run([perf_bin, "report", "--stdio", "--no-children", "--sort", "comm,dso", "-i", f],
                              capture_output=True, text=True, timeout=120).stdout for f in (path, dest)]
    rows = [[line for line in r.splitlines() if line.strip() and not line.startswith("#")] for r in reports]
    assert rows[0] == rows[1] and rows[0]


def test_header_lines_match_perf(perf_bin, shared_fixtures, tmp_path):
    from pmuscope.perfdata import header_lines

    paths = [str(p) for p in sorted((shared_fixtures / "perf_data_converter").glob("perf.data.*"))
             if not p.name.endswith("buildids")]
    paths.append(_record(perf_bin, ["-g"], tmp_path / "rec.data"))
    for path in paths:
        perf = subprocess.run([perf_bin, "report", "--header-only", "-i", path], capture_output=True, text=True,
                              timeout=60).stdout.splitlines()
        ours = header_lines(PerfDataFile(path))
        assert len(ours) > 10
        assert [line for line in ours if line not in perf] == [], path


def test_rewrite_every_fixture_for_perf(perf_bin, shared_fixtures, tmp_path):
    """rewrite() turns every fixture (pipe, zstd, newer attrs, AUX payloads) into
    a file perf 6.1 opens and counts exactly as we wrote it."""
    from pmuscope.perfdata import rewrite
    from perfstats import stats_name

    paths = sorted(shared_fixtures.glob("linux-perf-data/*.data")) + sorted(
        p for p in shared_fixtures.glob("perf_data_converter/perf.data.*") if not p.name.endswith("buildids"))
    done = 0
    for path in paths:
        if path.name == "sleep.compressed2.pipe.data":  # ends in text, see test_perfdata.py
            continue
        written = rewrite(str(path), str(tmp_path / "rw.data"))
        totals, per_event = perf_stats(perf_bin, str(tmp_path / "rw.data"))
        assert totals == {stats_name(t): n for t, n in written.items()}, path
        assert sum(per_event.values()) == written[abi.PERF_RECORD_SAMPLE]
        done += 1
    assert done >= 10


def test_time_order_matches_perf_script(perf_bin, shared_fixtures, tmp_path):
    """Our FINISHED_ROUND ordering delivers samples in the order perf script prints them."""
    from pmuscope.perfdata.reader import _TimeKeyer

    paths = [str(shared_fixtures / "perf_data_converter" / n) for n in
             ("perf.data.lost_samples-4.4", "perf.data.group_desc-4.14", "perf.data.weight_struct")]
    paths.append(_record(perf_bin, ["-g"], tmp_path / "rec.data"))
    for path in paths:
        out = subprocess.run([perf_bin, "script", "-F", "time", "-i", path], capture_output=True, text=True, timeout=120)
        theirs = [line.strip().rstrip(":") for line in out.stdout.splitlines() if re.match(r"^\s*\d+\.\d+:", line)]
        with PerfDataFile(path) as p:
            keyer = _TimeKeyer(p.attrs)
            ours = [keyer.time(t, mv) for t, m, mv, o in p.raw_records(ordered=True) if t == abi.PERF_RECORD_SAMPLE]
        ours = [f"{t // 10**9}.{t % 10**9 // 1000:06d}" for t in ours]
        assert len(theirs) == len(ours) > 0 and theirs == ours, path


def _text_symbols(path, count=3):
    """(mapping of the executable segment, [(name, addr)]) for ``count`` functions of a real binary."""
    elftools = pytest.importorskip("elftools.elf.elffile")
    with open(path, "rb") as f:
        elf = elftools.ELFFile(f)
        base = 0x555555554000 if elf["e_type"] == "ET_DYN" else 0
        text = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1)
        lo, hi = text["p_vaddr"], text["p_vaddr"] + text["p_memsz"]
        syms = {}
        for name in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(name)
            if sec is None:
                continue
            for s in sec.iter_symbols():
                if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] >= 64 and lo <= s["st_value"] < hi and s.name:
                    syms.setdefault(s["st_value"], s.name)
        if len(syms) < count:
            pytest.skip(f"{path} has too few function symbols")
        picked = sorted(syms.items())[len(syms) // 2 : len(syms) // 2 + count]
        page = 0xFFF
        start = (lo & ~page) + base
        mapping = (start, ((hi + page) & ~page) + base - start, text["p_offset"] & ~page)
        return mapping, [(name, addr + base) for addr, name in picked]


def _binary_with_symbols() -> str:
    import glob

    for cand in [os.path.realpath(sys.executable), *sorted(glob.glob("/usr/bin/python3.*")), "/usr/bin/perf", "/bin/bash"]:
        if not os.path.isfile(cand):
            continue
        try:
            _text_symbols(os.path.realpath(cand))
        except pytest.skip.Exception:
            continue
        return os.path.realpath(cand)
    pytest.skip("no binary with enough function symbols found")


def _write_synthetic(path, binary, *, n=5000):
    (start, length, pgoff), syms = _text_symbols(binary)
    weights = [5, 3, 2]
    st = S.IP | S.TID | S.TIME | S.PERIOD | S.CPU | S.ID
    attr = abi.perf_event_attr(type=abi.PerfType.SOFTWARE, config=0, sample_period=4000, freq=1, sample_type=st,
                               read_format=abi.PerfFormat.ID, disabled=1, inherit=1, mmap=1, comm=1, task=1,
                               mmap2=1, comm_exec=1, sample_id_all=1)
    pid = 4242
    with PerfDataWriter(path) as w:
        w.add_attr(attr, [77, 78], "cpu-clock")
        w.add_build_id(binary, pid=pid)
        sid = synth.sample_id(st, pid=pid, tid=pid, time=1000, id=77)
        w.write_record(synth.comm(pid, pid, "synthetic", exec=True, sample_id=sid))
        w.write_record(synth.mmap2(pid, pid, start, length, pgoff, binary, sample_id=sid))
        order = [i for i, k in enumerate(weights) for _ in range(k)]
        for i in range(n):
            name, addr = syms[order[i % len(order)]]
            w.write_record(synth.sample(st, ip=addr + 8, pid=pid, tid=pid, time=2000 + i * 1000, id=77 + i % 2,
                                        cpu=i % 2, period=250000))
            if i % 1000 == 999:
                w.write_record(synth.finished_round())
    expected = collections.Counter()
    for i in range(n):
        expected[syms[order[i % len(order)]][0]] += 1
    return expected


def test_perf_reads_what_we_write(perf_bin, tmp_path):
    binary = _binary_with_symbols()
    path = str(tmp_path / "ours.data")
    expected = _write_synthetic(path, binary)
    totals, per_event = perf_stats(perf_bin, path)
    assert totals["SAMPLE"] == 5000 and per_event == {"cpu-clock": 5000}
    report = subprocess.run([perf_bin, "report", "--stdio", "--sort", "sym", "-i", path],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    rows = re.findall(r"^\s+([\d.]+)%\s+\[\.\]\s+(\S+)", report.stdout, re.M)
    got = [(name, round(float(pct))) for pct, name in rows]
    want = [(name, round(100 * n / 5000)) for name, n in expected.most_common()]
    assert got == want, report.stdout
    assert "of event 'cpu-clock'" in report.stdout
    script = subprocess.run([perf_bin, "script", "-F", "comm,pid,ip,sym,dso", "-i", path],
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0, script.stderr
    lines = script.stdout.splitlines()
    assert len(lines) == 5000
    seen = collections.Counter(line.split()[3].split("+")[0] for line in lines)
    assert seen == expected
    assert all(line.split()[:2] == ["synthetic", "4242"] for line in lines)
    header = subprocess.run([perf_bin, "report", "--header-only", "-i", path], capture_output=True, text=True, timeout=60)
    assert f"# hostname : {os.uname().nodename}" in header.stdout
    assert f"# os release : {os.uname().release}" in header.stdout
    assert "# event : name = cpu-clock" in header.stdout and "size = 128" in header.stdout
    from pmuscope.perfdata import elf_build_id

    bid = elf_build_id(binary)
    if bid is not None:
        listed = subprocess.run([perf_bin, "buildid-list", "-i", path], capture_output=True, text=True, timeout=60)
        assert f"{bid.hex()} {binary}" in listed.stdout.splitlines()
    # and we read our own file back the same way
    with PerfDataFile(path) as p:
        assert p.sample_counts() == [5000] and p.event_names == ["cpu-clock"]


def test_perf_reads_our_pipe(perf_bin, tmp_path):
    binary = _binary_with_symbols()
    (start, length, pgoff), syms = _text_symbols(binary)
    st = S.IP | S.TID | S.TIME | S.PERIOD
    attr = abi.perf_event_attr(type=abi.PerfType.SOFTWARE, config=0, sample_period=1, sample_type=st, mmap=1,
                               comm=1, mmap2=1, comm_exec=1, task=1)
    path = tmp_path / "ours.pipe"
    with open(path, "wb") as f:
        w = PerfPipeWriter(f)
        w.add_attr(attr, [9], "cpu-clock")
        w.write(synth.comm(7, 7, "piped", exec=True) + synth.mmap2(7, 7, start, length, pgoff, binary))
        for i in range(300):
            w.write(synth.sample(st, ip=syms[i % 2][1] + 4, pid=7, tid=7, time=100 + i))
        w.close()
    with open(path, "rb") as f:
        script = subprocess.run([perf_bin, "script", "-F", "comm,ip,sym", "-i", "-"], stdin=f, capture_output=True,
                                text=True, timeout=120)
    assert script.returncode == 0, script.stderr
    names = collections.Counter(line.split()[-1] for line in script.stdout.splitlines())
    assert names == {syms[0][0]: 150, syms[1][0]: 150}
    totals, _ = perf_stats(perf_bin, str(path))
    with PerfDataFile(str(path)) as p:
        assert our_stats(p) == totals
