"""perf.data reader and writer against real captures (tests/data/fixtures) and
hand-built files; the expected counts come from Linux perf (see
tests/data/perfdata/PROVENANCE.md)."""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import threading
import warnings

import pytest

from pmuscope.errors import FormatError
from pmuscope.kernel import abi
from pmuscope.perfdata import Feature, PerfDataFile, synth
from pmuscope.perfdata.features import BuildId, NrCpus, SampleTime
from pmuscope.perfdata.reader import _TimeKeyer
from pmuscope.perfdata.writer import PerfDataWriter, PerfPipeWriter, elf_build_id

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data", "perfdata"))
from perfstats import our_stats  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "perfdata")
with open(os.path.join(DATA, "fixture_counts.json")) as _f:
    GOLDEN = json.load(_f)
READABLE = sorted(k for k, v in GOLDEN.items() if "totals" in v)
S = abi.PerfSample
R = abi.PerfRecord


def _fixture(shared_fixtures, key):
    path = shared_fixtures / key
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return str(path)


@pytest.mark.parametrize("key", READABLE)
def test_fixture_counts_match_perf(shared_fixtures, key):
    gold = GOLDEN[key]
    with PerfDataFile(_fixture(shared_fixtures, key)) as p:
        assert our_stats(p) == gold["totals"]
        by_name = dict(zip(p.event_names, p.sample_counts()))
        for event, n in gold["samples_by_event"].items():
            event = gold.get("recorded_names", {}).get(event, event)
            assert by_name[event] == n, (event, by_name)
        assert sum(p.sample_counts()) == gold["totals"]["SAMPLE"]
        h = gold["header"]
        f = p.features
        assert f[Feature.HOSTNAME] == h["hostname"]
        assert f[Feature.OSRELEASE] == h["osrelease"]
        assert f[Feature.ARCH] == h["arch"]
        assert f[Feature.NRCPUS] == NrCpus(int(h["nrcpus_avail"]), int(h["nrcpus_online"]))
        if "cpuid" in h:
            assert f[Feature.CPUID] == h["cpuid"]


@pytest.mark.parametrize("key", READABLE)
def test_fixture_time_order_and_chunks(shared_fixtures, key):
    with PerfDataFile(_fixture(shared_fixtures, key)) as p:
        plain = list(p.raw_records())
        ordered = list(p.raw_records(ordered=True))
        assert sorted(bytes(r[2]) for r in plain) == sorted(bytes(r[2]) for r in ordered)
        keyer = _TimeKeyer(p.attrs)
        times = [t for t in (keyer.time(r[0], r[2]) for r in ordered) if t >= 0]
        assert times == sorted(times)
        # chunks: whole records back to back, same records in the same order
        again = []
        for base, chunk in p.raw_chunks(max_bytes=4096):
            pos = 0
            while pos < len(chunk):
                size = struct.unpack_from("<H", chunk, pos + 6)[0]
                again.append(bytes(chunk[pos : pos + size]))
                pos += size
            assert pos == len(chunk)
        assert again == [bytes(r[2]) for r in plain]


@pytest.mark.parametrize("key", READABLE)
def test_fixture_records_decode(shared_fixtures, key):
    """The record decoder of pmuscope.records over this container."""
    from pmuscope.records import SampleBatch

    with PerfDataFile(_fixture(shared_fixtures, key)) as p:
        n = sum(len(item) for item in p.records() if isinstance(item, SampleBatch))
        assert n == GOLDEN[key]["totals"]["SAMPLE"]


def test_fixture_with_trailing_text_is_a_clear_error(shared_fixtures):
    key = "linux-perf-data/sleep.compressed2.pipe.data"
    p = PerfDataFile(_fixture(shared_fixtures, key))
    assert p.pipe and p.event_names == ["cycles:P"]  # the preamble reads fine
    seen = []
    with pytest.raises(FormatError) as err:
        for rec in p.raw_records():
            seen.append(rec[0])
    assert err.value.offset == GOLDEN[key]["format_error_offset"]
    assert "sleep.compressed2.pipe.data" in str(err.value) and "at byte 31808" in str(err.value)
    assert seen.count(R.SAMPLE) > 0 and seen[-1] == R.FINISHED_ROUND


def test_lenient_mode_keeps_what_is_readable(shared_fixtures, tmp_path):
    key = "linux-perf-data/sleep.compressed2.pipe.data"
    p = PerfDataFile(_fixture(shared_fixtures, key), strict=False)
    counts = p.counts()
    assert counts[R.SAMPLE] > 0 and p.data_error is not None and p.data_error.offset == 31808
    good = bytearray(open(_write_file(str(tmp_path / "g.data")), "rb").read())
    p = PerfDataFile(bytes(good))
    cmdline_at = next(sec for sec in _feature_sections(good) if sec[0] == Feature.CMDLINE)[1]
    struct.pack_into("<I", good, cmdline_at, 1 << 30)  # the string list count
    with pytest.raises(FormatError, match="feature CMDLINE"):
        PerfDataFile(bytes(good))
    p = PerfDataFile(bytes(good), strict=False)
    assert set(p.feature_errors) == {Feature.CMDLINE} and isinstance(p.features[Feature.CMDLINE], bytes)
    assert p.sample_counts() == [34, 16] and p.data_error is None


def _feature_sections(blob):
    flags = struct.unpack_from("<4Q", blob, 72)
    bits = [w * 64 + b for w in range(4) for b in range(64) if flags[w] >> b & 1]
    data_off, data_size = struct.unpack_from("<QQ", blob, 40)
    table = data_off + data_size
    return [(bit, *struct.unpack_from("<QQ", blob, table + 16 * i)) for i, bit in enumerate(bits)]


def test_typed_features(shared_fixtures):
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.hybrid_topology"))
    assert [(h.pmu_name, h.cpus) for h in p.features[Feature.HYBRID_TOPOLOGY]] == [("cpu_core", "0-3"), ("cpu_atom", "4-11")]
    assert {c.pmu_name for c in p.features[Feature.PMU_CAPS]} >= {"cpu_core", "cpu_atom"}
    pmus = p.features[Feature.PMU_MAPPINGS]
    assert (pmus[4], pmus[7], pmus[1], pmus[9]) == ("cpu_core", "cpu_atom", "software", "intel_pt") and len(pmus) == 23
    topo = p.features[Feature.CPU_TOPOLOGY]  # what perf report --header-only -I prints for it
    assert topo.core_siblings == ["0-11"] and topo.thread_siblings[:3] == ["0-1", "2-3", "4"]
    assert topo.cpu_ids[:5] == [(0, 0), (0, 0), (4, 0), (4, 0), (8, 0)] and topo.die_ids == [0] * 12
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.group_desc-4.14"))
    (g,) = p.features[Feature.GROUP_DESC]
    assert (g.leader_idx, g.nr_members) == (0, 2)
    assert [c.level for c in p.features[Feature.CACHE]][:1] == [1]
    p = PerfDataFile(_fixture(shared_fixtures, "linux-perf-data/sleep.compressed.data"))
    comp = p.features[Feature.COMPRESSED]
    assert comp.type == 1 and comp.mmap_len > 0
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.callgraph-3.8"))
    bids = p.features[Feature.BUILD_ID]
    assert any(b.filename == "[kernel.kallsyms]" for b in bids) and all(len(b.build_id) == 20 for b in bids)
    assert p.features[Feature.CMDLINE][1] == "record"
    topo = p.features[Feature.CPU_TOPOLOGY]  # perf 3.8 wrote only the sibling lists
    assert (topo.core_siblings, topo.thread_siblings, topo.cpu_ids) == (["0-3"], ["0-1", "2-3"], [])
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.piped.header_features_aligned-6.12"))
    assert p.features[Feature.CPU_PMU_CAPS] == {"branches": "32", "max_precise": "3", "pmu_name": "skylake"}
    assert max(p.features) == Feature.PMU_CAPS  # the empty end-of-features marker is not a feature
    assert p.features[Feature.EVENT_DESC][0].name == "cycles:u"


def test_old_perf_versions(shared_fixtures):
    """perf 3.4 wrote attr.size 80 (VER2) in 96-byte entries, perf 3.8 96 (VER3)
    in 112-byte ones, both with the old event_types section."""
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.raw-3.4"))
    assert (p.header.attr_size, [a.attr.size for a in p.attrs]) == (96, [80])
    assert p.event_types == {0: "cycles"} and int(p.attrs[0].attr.config) == 0
    assert int(p.attrs[0].attr.sample_type) & S.RAW
    del p.features[Feature.EVENT_DESC]
    p.event_types[0] = "cycles-from-event-types"
    p._assign_names()
    assert p.event_names == ["cycles-from-event-types"]
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.callgraph-3.8"))
    assert (p.header.attr_size, [a.attr.size for a in p.attrs]) == (112, [96])


def test_header_lines_like_perf(shared_fixtures):
    from pmuscope.perfdata import header_lines

    lines = header_lines(PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.group_desc-4.14")))
    # as `perf report --header-only` (perf 6.1) prints them for this file
    for want in ["# data offset    : 424", "# data size      : 4648", "# feat offset    : 5072",
                 "# perf version : ", "# nrcpus online : 4", "# cpuid : GenuineIntel,6,78,3",
                 "# total memory : 16299868 kB",
                 "# cmdline : /usr/bin/perf record -e {cache-references,branch-misses} -o /tmp/perf.data.group_desc-4.14 -- echo Hello, World! ",
                 "# group: {cache-references,branch-misses}",
                 "# missing features: TRACING_DATA NUMA_TOPOLOGY BRANCH_STACK AUXTRACE STAT SAMPLE_TIME MEM_TOPOLOGY "
                 "CLOCKID DIR_FORMAT BPF_PROG_INFO BPF_BTF COMPRESSED CPU_PMU_CAPS CLOCK_DATA HYBRID_TOPOLOGY PMU_CAPS "]:
        assert want in lines
    lines = header_lines(PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.hybrid_topology")))
    for want in ["# time of first sample : 101.132490", "# time of last sample : 101.132592",
                 "# sample duration :      0.103 ms",
                 "# cpu_atom pmu capabilities: branches=32, max_precise=3, pmu_name=alderlake_hybrid"]:
        assert want in lines


def test_auxtrace_payloads(shared_fixtures):
    p = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.intel_pt-4.14"))
    bufs = list(p.auxtrace())
    index = p.features[Feature.AUXTRACE]
    assert [b.file_offset for b in bufs] == [e.file_offset for e in index]
    assert all(len(b.data) == b.size > 0 for b in bufs)
    # the intel_pt PSB packet (02 82 repeated) starts an Intel PT trace
    assert bytes(bufs[0].data[:4]) == b"\x02\x82\x02\x82"
    assert p.event_names[0] == "intel_pt//"


def test_pipe_from_non_seekable_stream(shared_fixtures):
    path = _fixture(shared_fixtures, "linux-perf-data/fibo.compressed2.pipe.data")
    with open(path, "rb") as f:
        data = f.read()
    r, w = os.pipe()
    t = threading.Thread(target=lambda: (os.write(w, data), os.close(w)))
    t.start()
    with os.fdopen(r, "rb") as stream:
        p = PerfDataFile(stream)
        assert p.event_names == ["cycles:P", "dummy:u"]
        assert our_stats(p) == GOLDEN["linux-perf-data/fibo.compressed2.pipe.data"]["totals"]
        with pytest.raises(FormatError, match="only once"):
            list(p.raw_records())
    t.join()


def test_pipe_from_stdin(shared_fixtures):
    import subprocess

    path = _fixture(shared_fixtures, "perf_data_converter/perf.data.piped.header_features_aligned-6.12")
    code = "from pmuscope.perfdata import PerfDataFile; p = PerfDataFile('-'); print(p.source, p.event_names, p.sample_counts())"
    with open(path, "rb") as f:
        out = subprocess.run([sys.executable, "-c", code], stdin=f, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "<stdin> ['cycles:u'] [9]", out.stderr


def test_bytes_fileobj_and_path_agree(shared_fixtures):
    path = _fixture(shared_fixtures, "perf_data_converter/perf.data.lost_samples-4.4")
    with open(path, "rb") as f:
        raw = f.read()
    a = PerfDataFile(path).counts()
    assert PerfDataFile(raw).counts() == a == PerfDataFile(io.BytesIO(raw)).counts()


# --- hand-built files -------------------------------------------------------------
ST = S.IP | S.TID | S.TIME | S.ID | S.CPU | S.PERIOD


def _attr(**kw):
    base = dict(type=1, config=0, sample_period=1000, sample_type=ST, read_format=abi.PerfFormat.ID, disabled=1,
                mmap=1, comm=1, mmap2=1, comm_exec=1, sample_id_all=1)
    base.update(kw)
    return abi.perf_event_attr(**base)


def _write_file(path, n=50, rounds=True):
    with PerfDataWriter(path, argv=["pmuscope", "record"]) as w:
        w.add_attr(_attr(), [11, 12], "cpu-clock")
        w.add_attr(_attr(config=1), [21], "task-clock")
        sid = synth.sample_id(ST, pid=7, tid=7, time=5, id=11)
        w.write_record(synth.comm(7, 7, "work", exec=True, sample_id=sid))
        w.write_record(synth.mmap2(7, 7, 0x400000, 0x1000, 0, "/bin/true", sample_id=sid))
        for i in range(n):
            # times go backwards inside a round: ordering must fix it
            w.write_record(synth.sample(ST, ip=0x400010 + i, pid=7, tid=7, time=1000 + (i // 10) * 10 + (9 - i % 10),
                                        id=(11, 12, 21)[i % 3], cpu=i % 2, period=100))
            if rounds and i % 10 == 9:
                w.write_record(synth.finished_round())
        w.add_build_id("/bin/true", b"\x01" * 20)
    return path


def test_writer_round_trip(tmp_path):
    path = _write_file(str(tmp_path / "w.data"))
    p = PerfDataFile(path)
    assert p.header.attr_size == 144 and all(a.attr.size == 128 for a in p.attrs)
    assert [a.ids for a in p.attrs] == [[11, 12], [21]]
    assert p.event_names == ["cpu-clock", "task-clock"]
    assert p.sample_counts() == [34, 16]
    assert p.counts() == {R.COMM: 1, R.MMAP2: 1, R.SAMPLE: 50, R.FINISHED_ROUND: 5}
    f = p.features
    assert f[Feature.CMDLINE] == ["pmuscope", "record"]
    assert f[Feature.HOSTNAME] == os.uname().nodename and f[Feature.ARCH] == os.uname().machine
    assert f[Feature.SAMPLE_TIME] == SampleTime(1000, 1049)
    assert f[Feature.BUILD_ID] == [BuildId("/bin/true", b"\x01" * 20, -1, abi.PERF_RECORD_MISC_USER)]
    assert f[Feature.NRCPUS].nr_cpus_online == os.sysconf("SC_NPROCESSORS_ONLN")
    times = [struct.unpack_from("<Q", mv, 24)[0] for t, m, mv, o in p.raw_records(ordered=True) if t == R.SAMPLE]
    assert times == sorted(times) and len(times) == 50
    file_times = [struct.unpack_from("<Q", mv, 24)[0] for t, m, mv, o in p.raw_records() if t == R.SAMPLE]
    assert file_times != sorted(file_times)


def test_writer_copies_a_file(tmp_path, shared_fixtures):
    """attrs given to the constructor, records streamed as chunks: the copy has the same records."""
    src = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.lost_samples-4.4"))
    dest = str(tmp_path / "copy.data")
    with PerfDataWriter(dest, src.attrs, host=False) as w:
        for base, chunk in src.raw_chunks(max_bytes=2048):
            w.write(chunk)
    copy = PerfDataFile(dest)
    assert copy.event_names == src.event_names and [a.ids for a in copy.attrs] == [a.ids for a in src.attrs]
    assert [bytes(r[2]) for r in copy.raw_records()] == [bytes(r[2]) for r in src.raw_records()]
    assert copy.sample_counts() == [97, 80, 14]
    assert sorted(copy.features) == [Feature.EVENT_DESC]


def test_writer_zstd_round_trip(tmp_path, shared_fixtures):
    pytest.importorskip("zstandard")
    src = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.callgraph-3.8"))
    dest = str(tmp_path / "z.data")
    with PerfDataWriter(dest, src.attrs, host=False, compress=3) as w:
        for base, chunk in src.raw_chunks(max_bytes=50000):
            w.write(chunk)
    z = PerfDataFile(dest)
    assert [bytes(r[2]) for r in z.raw_records()] == [bytes(r[2]) for r in src.raw_records()]
    counts = z.counts()
    assert counts[R.COMPRESSED] >= 2 and counts[R.SAMPLE] == 1768
    assert z.features[Feature.COMPRESSED].type == 1 and z.features[Feature.COMPRESSED].ratio >= 2
    assert os.path.getsize(dest) < os.path.getsize(src.source) / 2


def test_directory_format(tmp_path):
    """perf record --threads layout: DIR/data (header, side-band) + DIR/data.N (records)."""
    d = tmp_path / "thr.data"
    d.mkdir()
    with PerfDataWriter(str(d / "data"), host=False) as w:
        w.add_attr(_attr(), [11], "cpu-clock")
        w.features[Feature.DIR_FORMAT] = 1
        w.write_record(synth.comm(7, 7, "work", sample_id=synth.sample_id(ST, pid=7, tid=7, time=1, id=11)))
    for n, times in ((0, [30, 10]), (1, [20, 40]), (2, [])):
        (d / f"data.{n}").write_bytes(b"".join(synth.sample(ST, ip=t, pid=7, tid=7, time=t, id=11) for t in times))
    p = PerfDataFile(str(d))
    assert p.directory_format and p.features[Feature.DIR_FORMAT] == 1
    assert p.counts() == {R.COMM: 1, R.SAMPLE: 4}
    ordered = [struct.unpack_from("<Q", mv, 24)[0] for t, m, mv, o in p.raw_records(ordered=True) if t == R.SAMPLE]
    assert ordered == [10, 20, 30, 40]
    (d / "data.1").write_bytes(b"\x09\x00\x00\x00\x00\x00\x04\x00")
    with pytest.raises(FormatError, match=r"data\.1: at byte 0: record type 9 has size 4"):
        PerfDataFile(str(d)).counts()


def test_rewrite_keeps_records_features_and_aux(tmp_path, shared_fixtures):
    from pmuscope.perfdata import rewrite

    src = PerfDataFile(_fixture(shared_fixtures, "perf_data_converter/perf.data.intel_pt-4.14"))
    dest = str(tmp_path / "rw.data")
    counts = rewrite(src, dest)
    out = PerfDataFile(dest)
    assert counts == out.counts() == src.counts()
    assert [bytes(b.data) for b in out.auxtrace()] == [bytes(b.data) for b in src.auxtrace()]
    assert out.event_names == src.event_names and out.features[Feature.CPUID] == src.features[Feature.CPUID]
    assert Feature.AUXTRACE not in out.features  # the index of the source layout is not carried over
    pipe = PerfDataFile(_fixture(shared_fixtures, "linux-perf-data/fibo.compressed2.pipe.data"))
    rewrite(pipe, dest)
    out = PerfDataFile(dest)
    assert not out.pipe and out.sample_counts() == [547, 0] and R.COMPRESSED2 not in out.counts()
    assert all(a.attr.size == 128 for a in out.attrs)


def test_pipe_writer_round_trip():
    buf = io.BytesIO()
    w = PerfPipeWriter(buf, argv=["x"])
    w.add_attr(_attr(), [5], "cpu-clock")
    w.write(synth.comm(1, 1, "a") + synth.sample(ST, ip=1, pid=1, tid=1, time=3, id=5))
    w.close()
    p = PerfDataFile(buf.getvalue())
    assert p.pipe and p.event_names == ["cpu-clock"] and p.attrs[0].ids == [5]
    assert bytes(p.attrs[0].attr)[:128] == synth.attr_bytes(_attr())
    assert p.features[Feature.CMDLINE] == ["x"]
    assert p.sample_counts() == [1]


@pytest.mark.parametrize("size", [64, 72, 80, 96, 104, 112, 120, 128, 136, 144])
def test_old_and_new_attr_sizes(size):
    """File entries of every attr size version; a larger-than-known attr is
    accepted only with a zero tail."""
    attr = _attr()
    raw = bytearray(bytes(attr)[: min(size, 136)]) + b"\0" * max(0, size - 136)
    struct.pack_into("<I", raw, 4, size)
    ids_at = 104
    attrs_at = ids_at + 8
    data_at = attrs_at + size + 16
    rec = synth.sample(ST, ip=1, pid=2, tid=2, time=3, id=9)
    hdr = b"PERFILE2" + struct.pack("<QQ QQ QQ QQ 4Q", 104, size + 16, attrs_at, size + 16, data_at, len(rec), 0, 0, 0, 0, 0, 0)
    blob = hdr + struct.pack("<Q", 9) + bytes(raw) + struct.pack("<QQ", ids_at, 8) + rec
    p = PerfDataFile(blob)
    assert p.attrs[0].ids == [9] and int(p.attrs[0].attr.sample_type) == ST
    assert p.sample_counts() == [1]
    if size > 136:
        bad = bytearray(blob)
        bad[attrs_at + 140] = 1
        with pytest.raises(FormatError, match="beyond the 136 bytes"):
            PerfDataFile(bytes(bad))


def test_foreign_and_bogus_headers(tmp_path):
    good = open(_write_file(str(tmp_path / "g.data")), "rb").read()
    with pytest.raises(FormatError, match="other endianness"):
        PerfDataFile(b"2ELIFREP" + good[8:])
    with pytest.raises(FormatError, match="version 1"):
        PerfDataFile(b"PERFFILE" + good[8:])
    with pytest.raises(FormatError, match="not a perf.data file") as err:
        PerfDataFile(b"\x7fELF" + good[4:], name="x.data")
    assert str(err.value).startswith("x.data: at byte 0:")
    with pytest.raises(FormatError, match="too short"):
        PerfDataFile(good[:10])
    with pytest.raises(FormatError, match="cannot open"):
        PerfDataFile(str(tmp_path / "missing.data"))
    bad = bytearray(good)
    struct.pack_into("<Q", bad, 40, 1 << 40)  # data.offset
    with pytest.raises(FormatError, match="data section .* runs past the end") as err:
        PerfDataFile(bytes(bad))
    assert err.value.offset == 40


def test_compressed_without_zstandard(shared_fixtures, monkeypatch):
    from pmuscope.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "zstandard", None)
    p = PerfDataFile(_fixture(shared_fixtures, "linux-perf-data/sleep.compressed.data"))
    with pytest.raises(MissingExtraError, match=r"pmuscope\[zstd\]"):
        p.counts()


def test_elf_build_id_of_python():
    bid = elf_build_id(os.path.realpath(sys.executable))
    assert bid is None or len(bid) == 20
    assert elf_build_id(__file__) is None


def test_input_size_is_a_regular_files_size(tmp_path):
    """What the readers size their chunks by: the bytes of a regular file,
    opened by path or handed over open; nothing for bytes or a stream."""
    path = os.path.join(os.path.dirname(__file__), "..", "data", "perfdata", "perf-g-small.data")
    size = os.path.getsize(path)
    with PerfDataFile(path) as pf:
        assert pf.input_size == size
    with open(path, "rb") as f, PerfDataFile(f) as pf:
        assert pf.input_size == size
    with open(path, "rb") as f:
        data = f.read()
    with PerfDataFile(data) as pf:
        assert pf.input_size is None
    with PerfDataFile(io.BytesIO(data)) as pf:
        assert pf.input_size is None


DAMAGED_FEATURE_COMMANDS = [
    ["report", "--stdio"], ["report", "--stdio", "--group"], ["report", "--json"], ["script"],
    ["export", "-f", "pprof", "-o", "OUT"], ["export", "-f", "folded", "-o", "OUT"], ["mem", "report"], ["c2c", "report"],
]


@pytest.mark.parametrize("name", ["perf-g-small.data", "../fixtures/linux-perf-data/sleep.data",
                                  "../memory/cpu-clock-mem-bits.data"])
def test_every_command_skips_each_damaged_feature_section(name, tmp_path, capsys):
    """A header feature section perf's parser would refuse (here: cut to one
    byte) is skipped with a warning by every command, which reads the samples:
    its raw bytes, which the lenient reader keeps in ``features``, are never
    taken for the parsed value (``parsed_feature``); export read BUILD_ID's
    bytes as build-id entries and crashed."""
    from pmuscope.cli.main import main

    good = open(os.path.join(DATA, name), "rb").read()
    damaged = 0
    flags = struct.unpack_from("<4Q", good, 72)
    bits = [w * 64 + b for w in range(4) for b in range(64) if flags[w] >> b & 1]
    table = sum(struct.unpack_from("<QQ", good, 40))  # the data section's end
    for i, bit in enumerate(bits):
        blob = bytearray(good)
        struct.pack_into("<Q", blob, table + 16 * i + 8, 1)  # the section's size
        path = tmp_path / "d.data"
        path.write_bytes(bytes(blob))
        p = PerfDataFile(bytes(blob), strict=False)
        if bit not in p.feature_errors:
            continue  # a one-byte payload this feature's parser takes
        damaged += 1
        assert p.parsed_feature(bit) is None and p.parsed_feature(bit, "none") == "none"
        assert isinstance(p.features[bit], bytes)
        for argv in DAMAGED_FEATURE_COMMANDS:
            argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
            capsys.readouterr()
            warnings._filters_mutated()  # as in a new process: each warning is shown again
            rc = main([*argv, "-i", str(path)])
            err = capsys.readouterr().err
            assert rc in (0, 1, 2), (bit, argv, rc)
            assert f"skipped the damaged {Feature(bit).name}" in err or rc != 0, (bit, argv, err)
    assert damaged >= 3
