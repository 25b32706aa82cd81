"""Profile exports: pprof decoded by the protobuf runtime with profile.proto's
schema, speedscope validated by speedscope's own JSON Schema, folded, and the
ExportProfile builders."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from pmuscope import errors
from pmuscope.export import ExportProfile, Frame, Mapping, aggregate_rows, from_folded, from_profile, from_stacks
from pmuscope.export import pprof, speedscope
from pmuscope.profile.folded import format_folded, parse_folded

from .pprof_schema import decode, folded_of, labels_of

SCHEMA = Path(__file__).resolve().parent.parent / "data" / "export" / "speedscope-file-format-schema.json"

FOLDED = "main;parse;read_[k] 7\nmain;parse;lex 30\nmain;eval 50\nmain 3\nworker;spin loop 10\n"


def test_varint_matches_protobuf_encoding():
    from google.protobuf.internal import encoder  # the runtime's own varint writer

    for n in (0, 1, 127, 128, 300, 2**32, 2**63 - 1, 2**64 - 1):
        parts: list[bytes] = []
        encoder._VarintEncoder()(parts.append, n, True)
        assert pprof.varint(n) == b"".join(parts), n
    parts = []
    encoder._SignedVarintEncoder()(parts.append, -1, True)
    assert pprof.varint(-1) == b"".join(parts)


def test_pprof_from_folded_decodes_with_schema(tmp_path):
    ep = from_folded(FOLDED, comments=["recorded by a test"], period_type=("samples", "count"), period=1)
    path = pprof.write(ep, str(tmp_path / "p.pb.gz"))
    with open(path, "rb") as f:
        blob = f.read()
    assert blob[:2] == b"\x1f\x8b"  # gzip on disk, as profile.proto requires
    prof = decode(blob)
    assert prof.string_table[0] == ""
    assert [(prof.string_table[t.type], prof.string_table[t.unit]) for t in prof.sample_type] == [("samples", "count")]
    want = {k.replace("read_[k]", "read"): v for k, v in parse_folded(FOLDED).items()}
    assert folded_of(prof) == want
    assert sum(s.value[0] for s in prof.sample) == 100
    assert [prof.string_table[c] for c in prof.comment] == ["recorded by a test"]
    assert (prof.string_table[prof.period_type.type], prof.period) == ("samples", 1)
    ids = [loc.id for loc in prof.location]
    assert 0 not in ids and len(set(ids)) == len(ids)
    assert len(prof.function) == len({f.name for f in prof.function})  # one function per name
    assert "spin loop" in [prof.string_table[f.name] for f in prof.function]  # spaces survive


def _rich_profile() -> ExportProfile:
    frames = [
        Frame("main", file="/usr/bin/app", address=0x1100, mapping=1, system_name="main"),
        Frame("compute", file="/usr/bin/app", address=0x1234, mapping=1, line=42, system_name="_Z7computev"),
        Frame("memcpy", file="/lib/libc.so.6", address=0x9a000, mapping=2),
        Frame("clear_page_erms", address=0xffffffff81234567, kernel=True, mapping=3),
    ]
    # rows: leaf-first stacks
    stacks = [[1, 0], [2, 1, 0], [3, 2, 1, 0], [1, 0], [0]]
    flat = [f for s in stacks for f in s]
    off = np.cumsum([0] + [len(s) for s in stacks])
    values = np.array([[1, 1_000_000, 0], [1, 0, 5000], [1, 1_000_000, 0], [2, 2_000_000, 0], [1, 0, 7000]])
    return ExportProfile(
        sample_types=[("samples", "count"), ("cpu", "nanoseconds"), ("cycles", "count")],
        frames=frames, stack=np.array(flat), stack_offsets=off, values=values,
        pid=np.array([10, 10, 10, 11, 0]), tid=np.array([10, 12, 10, 11, 0]), cpu=np.array([0, 1, 1, 0, 1]),
        time=np.array([5, 1, 3, 2, 4]), comm=np.array([0, 0, 0, 1, -1]), comms=["app", "app2"],
        mappings=[Mapping("/usr/bin/app", 0, 0x2000, 0, "ab12cd34"), Mapping("/lib/libc.so.6", 0, 0x100000, 0, "ee99"),
                  Mapping("[kernel.kallsyms]", 0xffffffff80000000, 0xffffffffffffffff, 0, "")],
        period_type=("cpu", "nanoseconds"), period=1_000_000, time_nanos=1_700_000_000_000_000_000,
        duration_nanos=3_000_000_000, default_sample_type="cpu",
    )


def test_pprof_rich_profile_fields():
    ep = _rich_profile()
    prof = decode(pprof.dumps(ep))
    st = prof.string_table
    assert [(st[t.type], st[t.unit]) for t in prof.sample_type] == ep.sample_types
    for k, (name, _unit) in enumerate(ep.sample_types):
        assert sum(s.value[k] for s in prof.sample) == ep.totals()[name]
    assert [st[m.build_id] for m in prof.mapping] == ["ab12cd34", "ee99", ""]
    assert [st[m.filename] for m in prof.mapping] == ["/usr/bin/app", "/lib/libc.so.6", "[kernel.kallsyms]"]
    assert prof.mapping[2].memory_limit == 0xffffffffffffffff and all(m.has_functions for m in prof.mapping)
    locs = {loc.id: loc for loc in prof.location}
    kernel_loc = locs[4]
    assert kernel_loc.address == 0xffffffff81234567 and kernel_loc.mapping_id == 3
    funcs = {f.id: f for f in prof.function}
    compute = funcs[locs[2].line[0].function_id]
    assert (st[compute.name], st[compute.system_name], locs[2].line[0].line) == ("compute", "_Z7computev", 42)
    s2 = prof.sample[2]
    assert list(s2.location_id) == [4, 3, 2, 1]  # leaf first
    assert labels_of(prof, s2) == {"pid": 10, "tid": 10, "cpu": 1, "comm": "app"}
    assert labels_of(prof, prof.sample[4]) == {"pid": 0, "tid": 0, "cpu": 1}  # comm unknown: no label
    assert (st[prof.period_type.type], st[prof.period_type.unit], prof.period) == ("cpu", "nanoseconds", 1_000_000)
    assert (prof.time_nanos, prof.duration_nanos, st[prof.default_sample_type]) == (ep.time_nanos, 3_000_000_000, "cpu")


@settings(max_examples=60, deadline=None)
@given(hst.dictionaries(
    hst.lists(hst.text(alphabet=hst.characters(blacklist_characters=";\n\r", blacklist_categories=("Cs",)), min_size=1,
                       # a trailing _[k] marks a kernel frame: pprof keeps the name without it
                       max_size=12).filter(lambda s: s.strip() == s and s and not s.endswith("_[k]")),
             min_size=1, max_size=8).map(";".join),
    hst.integers(min_value=1, max_value=2**40), min_size=1, max_size=30))
def test_pprof_roundtrip_arbitrary_stacks(folded):
    prof = decode(pprof.dumps(from_folded(dict(folded))))
    assert folded_of(prof) == folded
    assert prof.string_table[0] == ""


def test_from_stacks_value_count_mismatch():
    with pytest.raises(errors.FormatError, match="2 values for 1 sample types"):
        from_stacks([(["a"], [1, 2])])


def test_validate_rejects_bad_frame_ids():
    ep = from_folded("a;b 1\n")
    ep.stack = np.array([0, 5])
    with pytest.raises(errors.FormatError, match="frame id"):
        ep.validate()


def test_aggregate_rows_sums_same_stack_and_labels():
    ep = _rich_profile()
    ep.tid = np.array([10, 12, 10, 10, 0])
    ep.pid = np.array([10, 10, 10, 10, 0])
    ep.cpu = np.array([0, 1, 1, 0, 1])
    ep.comm = np.array([0, 0, 0, 0, -1])
    agg = aggregate_rows(ep)
    assert len(agg) == 4  # rows 0 and 3: same stack [1,0], pid, tid, cpu, comm
    assert agg.totals() == ep.totals()
    assert agg.values[0].tolist() == [3, 3_000_000, 0]
    assert agg.time[0] == 2  # the earliest of the merged rows
    assert [agg.stack_of(i).tolist() for i in range(len(agg))] == [[1, 0], [2, 1, 0], [3, 2, 1, 0], [0]]


def _validate_speedscope(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (test extra) not installed")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(doc, {**schema, "$ref": "#/definitions/FileFormat.File"})


def test_speedscope_validates_against_schema():
    ep = _rich_profile()
    doc = speedscope.to_speedscope(ep)
    _validate_speedscope(doc)
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    names = [p["name"] for p in doc["profiles"]]
    # one profile per thread and sample type (samples/count left out when others exist)
    assert sorted(names) == sorted(["app (10) — cpu", "app2 (11) — cpu", "app (12) — cycles", "tid 0 — cycles"])
    by = {p["name"]: p for p in doc["profiles"]}
    p10 = by["app (10) — cpu"]
    frames = doc["shared"]["frames"]
    # time order (rows 2 at t=3, 0 at t=5), root → leaf
    assert [[frames[i]["name"] for i in s] for s in p10["samples"]] == [
        ["main", "compute", "memcpy", "clear_page_erms [k]"], ["main", "compute"]]
    assert p10["weights"] == [1_000_000, 1_000_000] and p10["unit"] == "nanoseconds"
    assert p10["endValue"] == sum(p10["weights"])
    assert by["app (12) — cycles"]["unit"] == "none"
    for p in doc["profiles"]:
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < len(frames) for s in p["samples"] for i in s)
    assert frames[1] == {"name": "compute", "file": "/usr/bin/app", "line": 42}


def test_speedscope_schema_rejects_broken_document():
    jsonschema = pytest.importorskip("jsonschema")
    doc = speedscope.to_speedscope(from_folded(FOLDED))
    _validate_speedscope(doc)
    del doc["profiles"][0]["weights"]
    with pytest.raises(jsonschema.ValidationError):
        _validate_speedscope(doc)


def test_folded_of_export_profile():
    ep = from_folded(FOLDED)
    assert format_folded(ep.folded()) == format_folded(parse_folded(FOLDED))
    rich = _rich_profile()
    f = rich.folded("cycles", comm=True)
    assert f == Counter({"app;main;compute;memcpy": 5000, "[unknown];main": 7000})
    with pytest.raises(errors.FormatError, match="no sample type 'bogus'"):
        rich.folded("bogus")


class FakeSymbolizer:
    pass


class FakeProfile:
    """The columns pmuscope.profile.Profile documents (duck-typed)."""

    def __init__(self):
        self.pid = np.array([100, 100, 100, 200])
        self.tid = np.array([100, 101, 100, 200])
        self.cpu = np.array([0, 1, 0, 1])
        self.time = np.array([1000, 2000, 3000, 4000], dtype=np.uint64)
        self.period = np.array([250000, 250000, 250000, 99], dtype=np.uint64)
        self.event = np.array([0, 0, 0, 1])
        self.comm = np.array([0, 0, 0, 1])
        self.comms = ["python3", "sh"]
        self.event_names = ["cpu-clock", "cycles"]
        self.frame_ip = np.array([0x401000, 0x401100, 0xffffffff81000000], dtype=np.uint64)
        self.frame_addr = np.array([0x1000, 0x1100, 0xffffffff81000000], dtype=np.uint64)
        self.frame_dso = np.array([0, 0, 1])
        self.frame_sym = np.array([0, -1, 1])
        self.frame_kernel = np.array([False, False, True])
        self.has_cpu = self.has_time = True
        self.source = "perf.data"
        # leaf-first stacks per sample
        st = [[1, 0], [0], [2, 1, 0], [0]]
        self._stack = np.array([f for s in st for f in s])
        self._off = np.cumsum([0] + [len(s) for s in st])
        self.leaf = np.array([s[0] for s in st])

    def __len__(self):
        return len(self.pid)

    def stacks(self):
        return self._stack, self._off

    def dso_name(self, d):
        return ["/usr/bin/python3", "[kernel.kallsyms]"][d]

    def dso_short_name(self, d):
        return ["python3", "[kernel.kallsyms]"][d]

    def sym_name(self, s):
        return ["main", "do_syscall_64"][s]


def test_from_profile_sample_types_mappings_and_totals():
    ep = from_profile(FakeProfile(), build_ids={"/usr/bin/python3": "deadbeef"})
    assert ep.sample_types == [("samples", "count"), ("cpu", "nanoseconds"), ("cycles", "count")]
    assert ep.totals() == {"samples": 4, "cpu": 750000, "cycles": 99}
    assert (ep.period_type, ep.period) == (("cpu", "nanoseconds"), 250000)
    assert [f.name for f in ep.frames] == ["main", "[python3]", "do_syscall_64"]
    assert [m.build_id for m in ep.mappings] == ["deadbeef", ""]  # the executable first, as pprof expects
    assert (ep.mappings[1].memory_start, ep.mappings[1].memory_limit) == (0xffffffff81000000, 0xffffffff81000001)
    assert ep.duration_nanos == 3000
    prof = decode(pprof.dumps(ep))
    st = prof.string_table
    assert [st[m.build_id] for m in prof.mapping] == ["deadbeef", ""]
    assert sum(s.value[1] for s in prof.sample) == 750000
    assert folded_of(prof, 1) == {"main;[python3]": 250000, "main": 250000, "main;[python3];do_syscall_64": 250000}
    assert {labels_of(prof, s)["comm"] for s in prof.sample} == {"python3", "sh"}
    # aggregation: nothing shares stack+labels here, so all 4 rows stay
    assert len(ep) == 4 and len(from_profile(FakeProfile(), aggregate=False)) == 4


def test_gzip_is_deterministic():
    ep = from_folded(FOLDED)
    assert pprof.dumps(ep) == pprof.dumps(ep)
    assert gzip.decompress(pprof.dumps(ep)) == pprof.encode(ep)


@settings(max_examples=50, deadline=None)
@given(hst.lists(hst.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=50))
def test_vectorized_varints_equal_scalar(values):
    data, off = pprof.varints(np.array(values, dtype=np.int64))
    assert [data[off[i]:off[i + 1]] for i in range(len(values))] == [pprof.varint(v) for v in values]


@hst.composite
def _random_rows(draw):
    """An ExportProfile with few distinct frames and labels, so rows often merge;
    empty stacks, -1 labels and missing columns included."""
    n = draw(hst.integers(min_value=0, max_value=40))
    stacks = [draw(hst.lists(hst.integers(0, 3), max_size=4)) for _ in range(n)]
    flat = [f for s in stacks for f in s]
    off = np.cumsum([0] + [len(s) for s in stacks]).astype(np.int64)
    col = lambda: np.array(draw(hst.lists(hst.integers(-1, 2), min_size=n, max_size=n)), dtype=np.int64)
    opt = lambda: col() if draw(hst.booleans()) else None
    big = hst.one_of(hst.integers(0, 300), hst.integers(2**63 - 5, 2**64 - 1), hst.integers(-(2**63), -1))
    frames = [Frame(draw(hst.sampled_from(["f", "g", "h\udcff", "é\"q"])), file=draw(hst.sampled_from(["", "a.so"])),
                    line=draw(hst.integers(0, 70000)), address=draw(big), mapping=draw(hst.integers(0, 2)),
                    kernel=draw(hst.booleans()), system_name=draw(hst.sampled_from(["", "_Zf"])))
              for _ in range(4)]
    return ExportProfile(
        sample_types=[("samples", "count"), ("cpu", "nanoseconds")], frames=frames,
        mappings=[Mapping("a.so", 0, 4096), Mapping("[kernel]", 1 << 63, (1 << 64) - 1, build_id="ab")],
        stack=np.array(flat, dtype=np.int64), stack_offsets=off,
        values=np.array(draw(hst.lists(hst.integers(0, 2**40), min_size=2 * n, max_size=2 * n)),
                        dtype=np.int64).reshape(n, 2),
        pid=col(), tid=opt(), cpu=opt(), time=opt(), comm=opt(), comms=["a", "b—", "c\udcff"])


def _same_profile(a, b):
    for name in ("stack", "stack_offsets", "values", "pid", "tid", "cpu", "time", "comm"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.tolist() == y.tolist(), name


@settings(max_examples=150, deadline=None)
@given(_random_rows())
def test_vectorized_aggregation_and_encoding_equal_the_reference(ep):
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"PMUSCOPE_EXPORT_VECTOR": "0"}):
        ref = aggregate_rows(ep)
        ref_bytes = pprof.encode(ref)
        ref_raw = pprof.encode(ep)
    with mock.patch.dict(os.environ, {"PMUSCOPE_EXPORT_VECTOR": "1"}):
        got = aggregate_rows(ep)
        _same_profile(got, ref)
        assert pprof.encode(got) == ref_bytes
        assert pprof.encode(ep) == ref_raw
        # int32 frame ids (what from_profile keeps), samples in batches of 3 rows, streamed gzip
        ep32 = dataclasses.replace(ep, stack=ep.stack.astype(np.int32))
        _same_profile(aggregate_rows(ep32), ref)
        with mock.patch.object(pprof, "SAMPLE_BATCH", 3):
            assert pprof.encode(ep32) == pprof.encode(ep) == ref_raw
            assert pprof.dumps(ep32) == gzip.compress(ref_raw, compresslevel=6, mtime=0)
    # speedscope: json.dumps of the document (the reference) against the text in pieces
    from pmuscope.export import model as em

    for sample_types in (None, [0], [1]):
        with mock.patch.dict(os.environ, {"PMUSCOPE_EXPORT_VECTOR": "0"}):
            ref_json = speedscope.dumps(ep, sample_types=sample_types)
        for batch in (2, 1 << 13):
            with mock.patch.object(speedscope, "ROW_BATCH", batch):
                assert speedscope.dumps(ep, sample_types=sample_types) == ref_json
    for k, comm in ((0, False), (1, True)):
        whole = list(ep.folded(k, comm=comm).items())
        with mock.patch.object(em, "FOLD_BATCH", 2):
            assert list(ep.folded(k, comm=comm).items()) == whole


def _indexed(ep: ExportProfile, *, split_first: bool = True) -> ExportProfile:
    """``ep`` with each distinct stack held once, in reverse first-seen order, and a
    ``stack_index`` per row; one stack is held twice (rows alternating between its
    copies: equal sequences under two numbers) and an unused stack is added."""
    flat, off = ep.stack.tolist(), ep.stack_offsets.tolist()
    rows = [tuple(flat[off[i]:off[i + 1]]) for i in range(len(ep))]
    distinct = list(dict.fromkeys(rows))[::-1]
    if split_first and distinct:
        distinct.append(distinct[0])
    distinct.append((0, 0, 0))  # used by no row
    number: dict[tuple, int] = {}  # a stack's first number
    for j, st in enumerate(distinct):
        number.setdefault(st, j)
    twin = len(distinct) - 2 if split_first and rows else None
    index = []
    for i, st in enumerate(rows):
        j = number[st]
        index.append(twin if twin is not None and j == 0 and i % 2 else j)
    lens = [len(st) for st in distinct]
    return dataclasses.replace(
        ep, stack=np.array([f for st in distinct for f in st], dtype=np.int32),
        stack_offsets=np.cumsum([0] + lens).astype(np.int64), stack_index=np.array(index, dtype=np.int64))


def _row_form(ep: ExportProfile) -> tuple[list, list]:
    st, off = ep.row_stacks()
    return st.tolist(), off.tolist()


@settings(max_examples=100, deadline=None)
@given(_random_rows())
def test_indexed_stacks_write_what_row_stacks_write(ep):
    """An ExportProfile whose rows index shared stacks gives every writer's bytes, the
    aggregation and the folded stacks of the one with a stack per row."""
    import os
    from unittest import mock

    ix = _indexed(ep).validate()
    assert len(ix) == len(ep)
    assert _row_form(ix) == _row_form(ep)
    assert [ix.stack_of(i).tolist() for i in range(len(ep))] == [ep.stack_of(i).tolist() for i in range(len(ep))]
    for vector in ("0", "1"):
        with mock.patch.dict(os.environ, {"PMUSCOPE_EXPORT_VECTOR": vector}):
            assert pprof.encode(ix) == pprof.encode(ep)
            with mock.patch.object(pprof, "SAMPLE_BATCH", 3):
                assert pprof.encode(ix) == pprof.encode(ep)
            assert speedscope.dumps(ix) == speedscope.dumps(ep)
            ref = aggregate_rows(ep)
            got = aggregate_rows(ix)
            assert got.stack_index is not None
            assert _row_form(got) == _row_form(ref)
            for name in ("values", "pid", "tid", "cpu", "time", "comm"):
                x, y = getattr(got, name), getattr(ref, name)
                assert (x is None) == (y is None) and (x is None or x.tolist() == y.tolist()), name
            assert pprof.encode(got) == pprof.encode(ref)
    with mock.patch.object(speedscope, "ROW_BATCH", 2):
        assert speedscope.dumps(ix) == speedscope.dumps(ep)
    from pmuscope.export import model as em

    with mock.patch.object(em, "FOLD_BATCH", 2):
        assert ix.folded(1, comm=True) == ep.folded(1, comm=True)


def test_stack_index_is_validated():
    ep = _indexed(from_folded(FOLDED), split_first=False)
    bad = dataclasses.replace(ep, stack_index=np.array([0, 1, 2, 3, len(ep.stack_offsets) - 1]))
    with pytest.raises(errors.FormatError, match="stack_index"):
        bad.validate()
    with pytest.raises(errors.FormatError, match="values has shape"):
        dataclasses.replace(ep, stack_index=np.zeros(3, dtype=np.int64)).validate()


def test_stack_ids_fall_back_on_a_hash_collision(monkeypatch):
    from pmuscope.export import model as em

    stack = np.array([1, 2, 2, 1, 1, 2], dtype=np.int64)
    off = np.array([0, 2, 4, 6], dtype=np.int64)
    ids = em._stack_ids(stack, off)
    assert ids[0] == ids[2] != ids[1]
    # every row hashing alike: the element check catches it and the dict decides
    monkeypatch.setattr(np, "cumsum", lambda a, out=None: out.fill(0) if out is not None else np.zeros_like(a))
    assert em._stack_ids(stack, off).tolist() == em._stack_ids_dict(stack, off).tolist() == [0, 1, 0]


def test_frame_numbers_past_64_bits_take_the_loop(monkeypatch):
    ep = from_folded(FOLDED)
    ep.frames[0] = Frame(ep.frames[0].name, address=2**64 + 5, line=-(2**63))
    got = pprof.encode(ep)
    monkeypatch.setenv("PMUSCOPE_EXPORT_VECTOR", "0")
    assert got == pprof.encode(ep)
