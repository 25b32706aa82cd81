"""Reading a recording in chunks (``iter_profile_chunks``, what ``script``
streams) gives the samples and the text of reading it whole, on every
perf.data file in tests/data; ``script -G`` reads no call chains and prints
what the whole profile's formatting prints without them."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from pmuscope import _policy
from pmuscope.cli.main import main as cli_main
from pmuscope.errors import PmuscopeError
from pmuscope.profile import model
from pmuscope.profile.model import iter_profile_chunks, join_chunks, load_profile
from pmuscope.profile.script import ScriptFormatter, iter_script_bytes, parse_fields

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def _corpus() -> list[str]:
    out = []
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.stat().st_size > 64:
            with open(p, "rb") as f:
                if f.read(8) == b"PERFILE2":
                    out.append(str(p))
    return out


CORPUS = _corpus()
COLUMNS = ("pid", "tid", "cpu", "time", "period", "event", "comm", "ip", "cpumode", "leaf", "stack",
           "stack_offsets", "frame_ip", "frame_addr", "frame_dso", "frame_sym", "frame_off", "frame_kernel")


def _id(path: str) -> str:
    return str(pathlib.Path(path).relative_to(DATA))


def test_the_corpus_is_there():
    # the files the equality tests below run on (a missing corpus must fail, not pass empty)
    assert len(CORPUS) >= 15
    assert any("perf-g-small" in p for p in CORPUS) and any("fibo.compressed2.pipe" in p for p in CORPUS)


def _errors(text):
    """stderr without warning lines (Python prints a warning once per process)."""
    if isinstance(text, bytes):
        return [ln for ln in text.splitlines() if b"warning:" not in ln]
    return [ln for ln in text.splitlines() if "warning:" not in ln]


def _whole(path, **kw):
    try:
        return load_profile(path, kernel_symbols=False, **kw), None
    except PmuscopeError as err:
        return None, str(err)


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("size", [1, 7, 4096])
def test_chunks_joined_are_the_whole_profile(path, size):
    whole, err = _whole(path, keep_raw=True)
    if err is not None:
        with pytest.raises(PmuscopeError) as exc:
            list(iter_profile_chunks(path, kernel_symbols=False, keep_raw=True, chunk_samples=size))
        assert str(exc.value) == err
        return
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, keep_raw=True, chunk_samples=size))
    assert sum(len(c) for c in chunks) == len(whole)
    joined = join_chunks(chunks)
    for name in COLUMNS:
        a, b = getattr(joined, name), getattr(whole, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert joined.comms == whole.comms
    if whole.raw is not None:
        assert np.array_equal(joined.raw, whole.raw) and np.array_equal(joined.raw_offsets, whole.raw_offsets)
    # chunks one after another are in time order, as the whole profile is
    if whole.has_time:
        t = np.concatenate([c.time for c in chunks])
        assert np.array_equal(t, whole.time)


VARIANTS = [[], ["-G"], ["-F", "comm,tid,ip,sym"], ["-G", "-F", "comm,pid,tid,cpu,time,event,ip,sym,symoff,dso,period"],
            ["-F", "comm,tid,time,event,trace"], ["--comm", "perf"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", VARIANTS, ids=lambda a: " ".join(a) or "default")
def test_streamed_script_is_the_whole_profile_text(path, args, capsysbinary, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)  # read as the commands read
    fields = parse_fields(args[args.index("-F") + 1]) if "-F" in args else None
    whole, err = _whole(path, keep_raw=fields is None or "trace" in fields)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 5)  # many chunks, rounds cut anywhere
    rc = cli_main(["script", "-i", path, "--no-kernel-symbols", *args])
    out, cerr = capsysbinary.readouterr()
    monkeypatch.setenv("PMUSCOPE_SCRIPT_STREAM", "0")  # the command's reference path: the whole profile
    rc_ref = cli_main(["script", "-i", path, "--no-kernel-symbols", *args])
    out_ref, cerr_ref = capsysbinary.readouterr()
    assert (rc, out, _errors(cerr)) == (rc_ref, out_ref, _errors(cerr_ref))
    if err is not None:
        assert rc != 0 and err.encode() in cerr
        return
    assert rc == 0
    if "--comm" in args:
        whole = whole.filter(comms=[args[args.index("--comm") + 1]])
    ref = b"".join(iter_script_bytes(whole, fields, callchain="-G" not in args))
    assert out == ref
    if len(whole):
        assert out


@pytest.mark.parametrize("path", [p for p in CORPUS if "perf-g-small" in p or "callgraph" in p], ids=_id)
def test_no_callchain_reads_leaves_only(path):
    full = load_profile(path, kernel_symbols=False)
    bare = load_profile(path, kernel_symbols=False, callchain=False)
    assert full.has_callchain and not bare.has_callchain and len(bare.stack) == 0
    assert len(bare.frame_ip) < len(full.frame_ip)  # the chains' frames were never resolved
    for name in ("pid", "tid", "time", "period", "comm", "ip"):
        assert np.array_equal(getattr(bare, name), getattr(full, name))
    assert np.array_equal(bare.frame_ip[bare.leaf], full.frame_ip[full.leaf])
    assert bare.frame_names(bare.leaf) == full.frame_names(full.leaf)
    a = b"".join(iter_script_bytes(bare, None, callchain=False))
    b = b"".join(iter_script_bytes(full, None, callchain=False))
    assert a == b


def test_formatter_builds_each_frame_text_once():
    path = next(p for p in CORPUS if "fibo.compressed2.pipe" in p)  # a recording of many rounds
    fmt = ScriptFormatter()
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3))
    assert len(chunks) > 3
    text = b"".join(b"".join(fmt.format(c)) for c in chunks)
    assert len(fmt._texts) == len(chunks[-1].frame_ip)
    assert text == b"".join(iter_script_bytes(load_profile(path, kernel_symbols=False)))


REPORT_VARIANTS = [["--stdio"], ["--stdio", "--no-children"], ["--json"], ["--json", "--children"],
                   ["--stdio", "--sort", "pid,cpu,sym"], ["--stdio", "--sort", "tid,dso", "-n"],
                   ["--stdio", "-g", "caller"], ["--stdio", "--max-stack", "2"], ["--stdio", "-g", "fractal,0.5"],
                   ["--stdio", "--comm", "perf"], ["--stdio", "--percent-limit", "5"], ["--stdio", "--cpu", "0"],
                   ["--json", "--time", ",99999999"], ["--stdio", "-G", "-n"],
                   ["--stdio", "--no-children", "-g", "none"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", REPORT_VARIANTS, ids=" ".join)
def test_collapsed_report_is_the_whole_profile_report(path, args, capsys, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)  # read as the commands read
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)  # chunks of 8 samples
    from pmuscope.profile import collapse

    seen = []
    real = collapse.Collapser.profile

    def spy(self):
        prof = real(self)
        seen.append(prof)
        return prof
    monkeypatch.setattr(collapse.Collapser, "profile", spy)
    rc = cli_main(["report", "-i", path, "--no-kernel-symbols", *args])
    out, err = capsys.readouterr()
    monkeypatch.setenv("PMUSCOPE_REPORT_STREAM", "0")  # the reference: every sample held
    rc_ref = cli_main(["report", "-i", path, "--no-kernel-symbols", *args])
    out_ref, err_ref = capsys.readouterr()
    assert (rc, out, _errors(err)) == (rc_ref, out_ref, _errors(err_ref))
    if rc == 0:
        assert out and len(seen) == 1  # the collapsed path ran
        monkeypatch.setattr(_policy, "STRICT_READS", False)  # the command set it back
        whole = load_profile(path, kernel_symbols=False)
        if not {"--comm", "--cpu", "--time"} & set(args) and len(whole):  # unfiltered: every sample counted once
            assert seen[0].nr_samples == len(whole) and len(seen[0]) <= len(whole)
            assert int(seen[0].period.sum()) == int(whole.period.sum())


def test_collapse_merges_rows_and_chains():
    from pmuscope.profile.collapse import collapse_chunks

    path = next(p for p in CORPUS if "perf-g-small" in p)
    whole = load_profile(path, kernel_symbols=False)
    col = collapse_chunks(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3))
    assert len(col) < len(whole) and col.nr_samples == len(whole)
    # each row is a group of identical samples: same chain, same leaf, periods summed
    key = lambda p, i: (int(p.event[i]), int(p.comm[i]), int(p.pid[i]), int(p.tid[i]), int(p.cpu[i]),
                        int(p.leaf[i]), p.stack[p.stack_offsets[i]:p.stack_offsets[i + 1]].tobytes())
    want: dict = {}
    for i in range(len(whole)):
        k = key(whole, i)
        per, n = want.get(k, (0, 0))
        want[k] = (per + int(whole.period[i]), n + 1)
    got = {key(col, i): (int(col.period[i]), int(col.count[i])) for i in range(len(col))}
    assert got == want
    # rows in the order of their first sample
    firsts = {}
    for i in range(len(whole)):
        firsts.setdefault(key(whole, i), i)
    assert [firsts[key(col, i)] for i in range(len(col))] == sorted(firsts.values())


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", [["-f", "pprof"], ["-f", "speedscope"], ["-f", "folded"],
                                  ["-f", "folded", "--event", "samples"], ["-f", "pprof", "--comm", "perf"]],
                         ids=" ".join)
def test_collapsed_export_is_the_whole_profile_export(path, args, capsysbinary, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)  # chunks of 8 samples
    from pmuscope.profile import collapse

    made = []
    real = collapse.Collapser.profile
    monkeypatch.setattr(collapse.Collapser, "profile", lambda self: made.append(1) or real(self))
    rc = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", *args])
    out, err = capsysbinary.readouterr()
    monkeypatch.setenv("PMUSCOPE_EXPORT_STREAM", "0")  # the reference: every sample held
    rc_ref = cli_main(["export", "-i", path, "--no-kernel-symbols", "-o", "-", *args])
    out_ref, err_ref = capsysbinary.readouterr()
    assert (rc, out, _errors(err)) == (rc_ref, out_ref, _errors(err_ref))
    if rc == 0:
        assert made == [1]  # the collapsed path ran


def test_weighted_median_is_numpy_median():
    from pmuscope.profile.collapse import _histogram, weighted_median

    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 4, 9, 10, 1001):
        for hi in (3, 1000, 1 << 40):
            v = rng.integers(0, hi, n).astype(np.uint64)
            u, c = _histogram(v, None)
            assert weighted_median(u, c) == float(np.median(v))


def _rounds_file(tmp_path, late: bool):
    """Samples in rounds: 100, 300 | (flushed) | 200 when ``late`` (older than one
    already flushed: perf warns and delivers it after), else 400."""
    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.writer import PerfDataWriter

    st = abi.PerfSample.IP | abi.PerfSample.TID | abi.PerfSample.TIME | abi.PerfSample.PERIOD
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1, sample_id_all=1)
    path = tmp_path / ("late.data" if late else "ordered.data")
    recs = [synth.comm(7, 7, "prog", sample_id=synth.sample_id(st, pid=7, tid=7, time=1)),
            synth.sample(st, ip=0x1000, pid=7, tid=7, time=100), synth.sample(st, ip=0x1010, pid=7, tid=7, time=300),
            synth.finished_round(), synth.finished_round(),
            synth.sample(st, ip=0x1020, pid=7, tid=7, time=200 if late else 400),
            synth.finished_round(), synth.finished_round()]
    with PerfDataWriter(str(path), [(attr, [], "cpu-clock")], host=False) as w:
        w.write(b"".join(recs))
    return str(path)


@pytest.mark.parametrize("late", [False, True])
def test_script_streams_in_order_and_warns_of_a_late_sample(tmp_path, capsysbinary, monkeypatch, late):
    path = _rounds_file(tmp_path, late)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 1)
    chunks = list(iter_profile_chunks(path, kernel_symbols=False))
    assert [c.time.tolist() for c in chunks if len(c)] == ([[100, 300], [200]] if late else [[100, 300], [400]])
    assert cli_main(["script", "-i", path, "--no-kernel-symbols", "-F", "ip"]) == 0
    out, err = capsysbinary.readouterr()
    ips = [int(ln, 16) for ln in out.decode().split()]
    if late:
        # printed as it came (perf too delivers it after the flushed round), with a warning
        assert ips == [0x1000, 0x1010, 0x1020] and b"older than some already printed" in err
        whole = load_profile(path, kernel_symbols=False)
        assert whole.time.tolist() == [100, 200, 300]  # the whole profile sorts it in
    else:
        assert ips == [0x1000, 0x1010, 0x1020] and b"warning" not in err


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_released_chunks_hold_the_same_records(path, monkeypatch):
    # pages handed over are dropped once the next chunk is asked for: the chunks'
    # bytes (read before moving on) and the records are those of a plain read
    from pmuscope.perfdata import PerfDataFile

    monkeypatch.setattr(_policy, "STRICT_READS", False)

    def read(release):
        with PerfDataFile(path) as pf:
            try:
                return [(off, bytes(c)) for off, c in pf.raw_chunks(max_bytes=4096, release=release)], None
            except PmuscopeError as err:
                return None, str(err)

    assert read(True) == read(False)
