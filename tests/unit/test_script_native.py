"""The C script formatter (``_native.script_text``) against the Python one,
its reference: the same bytes on every perf.data file in tests/data, for
the default layouts and the -F field sets, whole profiles and chunks, and
where the C one declines (ids out of range, unusual dtypes, numbers wider
than the columns) the Python one takes over from that batch on."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from pmuscope import _policy
from pmuscope.cli.main import main as cli_main
from pmuscope.errors import PmuscopeError
from pmuscope.profile import model, script
from pmuscope.profile.model import iter_profile_chunks, load_profile
from pmuscope.profile.script import ScriptFormatter, parse_fields

from tests.conftest import DATA, perfdata_corpus


CORPUS = perfdata_corpus()
SMALL = next(p for p in CORPUS if "perf-g-small" in p)
native = pytest.mark.skipif(not script.native_script_available(), reason="_native not built")

# (fields, call chains)
LAYOUTS = [(None, True), (None, False), ("comm,tid,ip,sym", True), ("comm,pid,tid,cpu,time,event,ip,sym,symoff,dso,"
           "period", False), ("comm,pid,tid,cpu,time,event,ip,sym,symoff,dso,period", True),
           ("comm,tid,time,event,trace", True), ("pid,cpu,period", True), ("tid,time", False), ("comm", True),
           ("ip,sym,dso", True), ("pid,tid,event,ip", False), ("sym,symoff", True), ("cpu,event,dso", False)]


def _id(path: str) -> str:
    return str(pathlib.Path(path).relative_to(DATA))


def _load(path, **kw):
    """The profile as the commands read it: a damaged tail (one fixture is cut
    short) is a warning and the records before it count."""
    import warnings

    from pmuscope import _policy

    strict, _policy.STRICT_READS = _policy.STRICT_READS, False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load_profile(path, kernel_symbols=False, keep_raw=True, **kw)
    except PmuscopeError:
        return None
    finally:
        _policy.STRICT_READS = strict


class _Sink:
    def __init__(self):
        self.parts = []

    def write(self, b):
        self.parts.append(bytes(b))  # a view of the formatter's buffer: copied before the next batch
        return len(b)

    def text(self):
        return b"".join(self.parts)


def _both(p, fields, chain, batch=65536):
    """Python's text, and the C formatter's through format() and write()."""
    ref = b"".join(ScriptFormatter(fields, callchain=chain, native=False, batch=batch).format(p))
    fmt = ScriptFormatter(fields, callchain=chain, native=True, batch=batch)
    assert fmt.native
    by_format = b"".join(fmt.format(p))
    sink = _Sink()
    ScriptFormatter(fields, callchain=chain, native=True, batch=batch).write(p, sink.write)
    return ref, by_format, sink.text()


def test_the_corpus_is_there():
    assert len(CORPUS) >= 15


@native
@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_native_text_is_the_python_text(path):
    p = _load(path)
    assert p is not None and len(p), path
    for fl, chain in LAYOUTS:
        fields = parse_fields(fl)
        for batch in (65536, 3):
            ref, a, b = _both(p, fields, chain, batch)
            assert a == ref and b == ref, (fl, chain, batch)


@native
@pytest.mark.parametrize("path", [p for p in CORPUS if "fibo" in p or "perf-g-small" in p or "callgraph" in p],
                         ids=_id)
@pytest.mark.parametrize("layout", LAYOUTS[:5], ids=lambda x: f"{x[0] or 'default'}{'' if x[1] else ' -G'}")
def test_native_chunks_are_the_python_chunks(path, layout):
    # one formatter over a recording read in chunks (frame texts and comms met as they come)
    fields = parse_fields(layout[0])
    chunks = list(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=3, callchain=layout[1]))
    assert len(chunks) > 3 or "fibo" not in path  # a recording of many rounds: many chunks
    ref_fmt = ScriptFormatter(fields, callchain=layout[1], native=False)
    ref = b"".join(b"".join(ref_fmt.format(c)) for c in chunks)
    fmt = ScriptFormatter(fields, callchain=layout[1], native=True)
    sink = _Sink()
    for c in chunks:
        fmt.write(c, sink.write)
    assert sink.text() == ref and ref


@native
def test_odd_numbers_are_formatted_as_python_formats_them():
    # wider than the columns, negative, large: the C digits are Python's format()
    p = load_profile(SMALL, kernel_symbols=False)
    n = len(p)
    p.period[3] = 10 ** 12
    p.period[4] = 2 ** 64 - 1
    p.time[5] = 2 ** 64 - 1
    p.time[6] = 123_456_789_012_345_678
    p.pid[2] = p.tid[2] = -1
    p.pid[7] = p.tid[8] = 2 ** 40
    p.cpu[4] = -1
    p.cpu[9] = 12345
    p.cpu[10] = -123
    assert n > 10
    for fl in ("comm,pid,tid,cpu,time,period,event,ip,sym", "pid,cpu,time,period", "tid,cpu", "pid,tid"):
        for chain in (True, False):
            ref, a, b = _both(p, parse_fields(fl), chain)
            assert a == ref and b == ref, fl
    ref, a, b = _both(p, parse_fields("cpu,period,event"), True)
    assert b"1000000000000 cpu-clock:" in a and b"[-01]" in a and b"[12345]" in a and b"[-123]" in a


def _calls(monkeypatch):
    """Count the C formatter's answers (text, or None where it declines)."""
    seen = {"text": 0, "none": 0}
    real = script._native.script_text

    def counted(*args):
        out = real(*args)
        seen["none" if out is None else "text"] += 1
        return out

    class Native:
        script_text = staticmethod(counted)
    monkeypatch.setattr(script, "_native", Native)
    return seen


@native
@pytest.mark.parametrize("column,value", [("comm", -1), ("leaf", -1), ("stack", -1), ("event", 5)])
def test_declined_batches_are_formatted_in_python(column, value, monkeypatch):
    # an id out of range in sample 7: the C formatter writes batches 0-2 and 3-5, declines the
    # batch of 6-8, and the Python formatter goes on from sample 6 with its own rules
    p = load_profile(SMALL, kernel_symbols=False)
    if column == "event":
        p = dataclasses.replace(p, event_names=["cpu-clock", "task-clock"])
    arr = getattr(p, column)
    arr[int(p.stack_offsets[7]) if column == "stack" else 7] = value
    seen = _calls(monkeypatch)
    fields = parse_fields("comm,tid,time,event,ip,sym") if column == "event" else None
    chain = column != "leaf"
    if column == "event":  # numpy indexing with an event id out of range: an error on both paths
        with pytest.raises(IndexError):
            b"".join(ScriptFormatter(fields, callchain=chain, native=False, batch=3).format(p))
        with pytest.raises(IndexError):
            b"".join(ScriptFormatter(fields, callchain=chain, native=True, batch=3).format(p))
        assert seen == {"text": 2, "none": 1}
        return
    ref, a, b = _both(p, fields, chain, batch=3)
    assert a == ref and b == ref
    assert seen == {"text": 4, "none": 2}  # per path: two batches written, the third declined


@native
def test_unusual_columns_are_declined(monkeypatch):
    p = load_profile(SMALL, kernel_symbols=False)
    odd = [dataclasses.replace(p, pid=p.pid.astype(np.uint64)),  # a 64-bit unsigned id
           dataclasses.replace(p, time=p.time.astype(np.int64)),  # time not unsigned
           dataclasses.replace(p, tid=np.repeat(p.tid, 2)[::2]),  # not contiguous
           dataclasses.replace(p, cpu=p.cpu.astype(np.float64))]  # not integers
    for q in odd:
        seen = _calls(monkeypatch)
        fields = parse_fields("comm,pid,tid,cpu,time,period,event,ip,sym")
        ref, a, b = _both(q, fields, True)
        assert a == ref and b == ref
        assert seen == {"text": 0, "none": 2}
    # non-ASCII event names of different byte lengths: the Python formatter alone
    q = dataclasses.replace(p, event_names=["cpu-clock", "tâsk-clock"])
    seen = _calls(monkeypatch)
    ref, a, b = _both(q, None, True)
    assert a == ref and b == ref and seen == {"text": 0, "none": 0}


def test_python_formatter_without_native(monkeypatch):
    # no C extension (no compiler at install): the Python formatter, same text
    p = load_profile(SMALL, kernel_symbols=False)
    ref = b"".join(ScriptFormatter(native=False).format(p))
    monkeypatch.setattr(script, "_native", None)
    fmt = ScriptFormatter(native=True)
    assert not fmt.native and not script.native_script_wanted()
    sink = _Sink()
    fmt.write(p, sink.write)
    assert sink.text() == ref and b"".join(ScriptFormatter().format(p)) == ref


@native
def test_environment_selects_the_formatter(monkeypatch):
    monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", "0")
    assert not ScriptFormatter().native
    monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", "1")
    assert ScriptFormatter().native


CLI_VARIANTS = [[], ["-G"], ["--ns"], ["-F", "comm,tid,ip,sym"], ["-G", "-F", "comm,pid,tid,cpu,time,event,ip,sym,symoff,dso,"
                "period"], ["-F", "comm,tid,time,event,trace"], ["-F", "pid,cpu,time,period"], ["--comm", "perf"],
                ["--cpu", "0"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("args", CLI_VARIANTS, ids=lambda a: " ".join(a) or "default")
def test_cli_script_native_and_python_print_the_same(path, args, capsysbinary, monkeypatch):
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 5)  # many chunks
    outs = []
    for env in ("0", "1"):
        monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", env)
        rc = cli_main(["script", "-i", path, "--no-kernel-symbols", *args])
        out, err = capsysbinary.readouterr()
        outs.append((rc, out, [ln for ln in err.splitlines() if b"warning:" not in ln]))
    assert outs[0] == outs[1]


@native
def test_bad_frame_tables_are_declined():
    # the C formatter checks every frame it copies: offsets out of order or past the blob's end
    p = load_profile(SMALL, kernel_symbols=False)
    fmt = ScriptFormatter(native=True)
    good = b"".join(fmt.format(p))
    fields, fs, want_frames, chain = fmt._plan(p)
    assert chain and want_frames
    text = script._native.script_text
    cols = (p.comm, p.pid, p.tid, p.cpu, p.time, p.period, p.event, p.leaf, p.stack, p.stack_offsets)
    flags = sum(script._NF[f] for f in fs if f in script._NF) | script._NF_FRAMES | script._NF_CHAIN
    comms, events = fmt._comms(p, chain), script._event_texts(p)
    assert text(flags, comms, events, fmt._blob, fmt._foff, *cols, 0, len(p)) == good
    f = int(p.stack[0])
    for blob, foff in [(bytes(fmt._blob[:-1]), fmt._foff),  # the last frame's text cut short
                       (fmt._blob, np.array([0] + [len(fmt._blob) + 1] * (len(fmt._foff) - 1))),
                       (fmt._blob, np.where(np.arange(len(fmt._foff)) == f + 1, -5, np.array(fmt._foff))),
                       (fmt._blob, np.array(fmt._foff, dtype=np.int32))]:  # not int64
        assert text(flags, comms, events, blob, foff, *cols, 0, len(p)) is None
    with pytest.raises(TypeError):
        text(flags, comms, events, fmt._blob, fmt._foff, *cols, 0, len(p), b"not a bytearray")
    buf = bytearray()
    n = text(flags, comms, events, fmt._blob, fmt._foff, *cols, 0, len(p), buf)
    assert bytes(buf[:n]) == good and len(buf) >= n


@pytest.mark.parametrize("env", ["0", "1"])
def test_header_only_lines_end_like_perfs(env, capsysbinary, monkeypatch):
    """With no ip/sym/dso field perf's line is the header alone, its last field's
    trailing space kept (perf 6.1's first lines of perf-g-small.data)."""
    monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", env)
    path = [p for p in CORPUS if p.endswith("perf-g-small.data")][0]
    want = {"comm,tid,time": b"            bash 27363  1006.582394: \n",
            "tid,period": b"27363    1000000 \n",
            "comm,tid,time,period,event": b"            bash 27363  1006.582394:    1000000 cpu-clock: \n"}
    for fields, first in want.items():
        assert cli_main(["script", "-i", path, "-F", fields]) == 0
        out = capsysbinary.readouterr().out
        assert out.startswith(first) and out.count(b"\n") == 265


def test_fields_the_samples_do_not_have_are_refused(capsys):
    """perf script refuses -F cpu on samples recorded without PERF_SAMPLE_CPU
    ("Cannot print 'cpu' field"); so does pmuscope, in one line, instead of
    printing a made-up CPU."""
    path = [p for p in CORPUS if p.endswith("perf-g-small.data")][0]
    assert cli_main(["script", "-i", path, "-F", "comm,cpu,time"]) == 1
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and "PERF_SAMPLE_CPU" in err and "leave cpu out" in err


def test_field_changes_parse_like_perf():
    from pmuscope.errors import PmuscopeError
    from pmuscope.profile.script import FieldChanges, parse_fields

    assert parse_fields("comm,tid") == ("comm", "tid")
    ch = parse_fields("+period,cpu,-dso")
    assert isinstance(ch, FieldChanges) and list(ch) == [("+", "period"), ("+", "cpu"), ("-", "dso")]
    assert ch.apply(("comm", "tid", "period", "ip", "dso")) == ("comm", "tid", "period", "ip", "cpu")
    with pytest.raises(PmuscopeError, match="not both"):
        parse_fields("comm,-dso")
    with pytest.raises(PmuscopeError, match="unknown field"):
        parse_fields("+nope")


@pytest.mark.parametrize("env", ["0", "1"])
def test_time_and_stack_options(env, capsys, monkeypatch):
    """--reltime starts at 0, --deltatime adds up to the run's length, --max-stack N
    keeps N frames per chain, -F -dso keeps the rest of the default line, on both formatters."""
    monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", env)
    path = [p for p in CORPUS if p.endswith("perf-g-small.data")][0]

    def times(*opts):
        assert cli_main(["script", "-i", path, "-G", "-F", "time", *opts]) == 0
        return [float(ln.strip().rstrip(":")) for ln in capsys.readouterr().out.splitlines()]

    t, rel, delta = times(), times("--reltime"), times("--deltatime")
    assert rel[0] == 0 and rel[-1] == pytest.approx(t[-1] - t[0], abs=2e-6)
    assert delta[0] == 0 and all(d >= 0 for d in delta) and sum(delta) == pytest.approx(t[-1] - t[0], abs=1e-6 * len(delta))  # each printed in whole us
    assert cli_main(["script", "-i", path, "--max-stack", "2"]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    assert max(b.count("\n\t") for b in blocks) == 2
    assert cli_main(["script", "-i", path, "-F", "-dso"]) == 0
    out = capsys.readouterr().out
    assert "(" not in out and "\tffffffff" in out and "cpu-clock:" in out


@pytest.mark.parametrize("env", ["0", "1"])
def test_ns_times(env, capsys, monkeypatch):
    """--ns prints the nanoseconds the file holds (perf-g-small's first sample: 1006.582394xxx)."""
    monkeypatch.setenv("PMUSCOPE_NATIVE_SCRIPT", env)
    path = [p for p in CORPUS if p.endswith("perf-g-small.data")][0]
    from pmuscope.profile import load_profile

    t0 = int(load_profile(path).time[0])
    assert cli_main(["script", "-i", path, "-G", "--ns", "-F", "time"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"{t0 // 10**9:5d}.{t0 % 10**9:09d}: " and first.startswith(" 1006.582394")


@native
def test_batches_follow_the_text_per_sample(monkeypatch):
    """The C formatter's batches are sized by the previous batch's text per sample
    (deep call chains: fewer samples a batch); the text is the same."""
    from pmuscope.profile import script as sc

    p = _load(next(p for p in CORPUS if "perf-g-small" in p))
    fields = parse_fields(LAYOUTS[0][0])
    ref, _a, _b = _both(p, fields, True)
    monkeypatch.setattr(sc, "WRITE_BYTES", 2000)
    monkeypatch.setattr(sc, "MIN_BATCH", 1)
    monkeypatch.setattr(sc, "FIRST_BATCH", 40)
    sink = _Sink()
    fmt = ScriptFormatter(fields, callchain=True, native=True)
    fmt.write(p, sink.write)
    assert sink.text() == ref
    sizes = [len(x) for x in sink.parts]
    assert len(sizes) > 4 and len(ref) > 5 * 2000
    middle = sizes[1:-1]  # after the first batch (40 samples), each aims at 2000 bytes
    assert sum(middle) / len(middle) < 2 * 2000 and min(middle) > 2000 / 4
