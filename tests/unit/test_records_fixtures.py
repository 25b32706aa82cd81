"""Decode the data sections of real perf.data files written by several perf
versions (tests/data/fixtures), and check the record counts against what Linux
perf 6.1's ``perf report --stats`` prints for the same files.

Only the few header fields needed to find the attrs and the data section are
read here (``struct perf_file_header``, tools/perf/util/header.h); the real
reader is ``pmuscope.perfdata``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from pmuscope.kernel import abi
from pmuscope.records import AttrTable, DecodeStats, SampleBatch, UserRecord, decode

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

R = abi.PerfRecord
S = abi.PerfSample

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"


def read_file_mode(path: Path) -> tuple[AttrTable, bytes, int]:
    data = path.read_bytes()
    magic, hsize, attr_size = struct.unpack_from("<8sQQ", data, 0)
    assert magic == b"PERFILE2", f"{path.name} is not a little-endian file-mode perf.data"
    a_off, a_size, d_off, d_size = struct.unpack_from("<QQQQ", data, 24)
    entries = []
    for i in range(a_size // attr_size):
        base = a_off + i * attr_size
        raw = data[base : base + attr_size - 16]
        attr = abi.attr_from_bytes(raw, struct.unpack_from("<I", raw, 4)[0] or len(raw))
        ids_off, ids_size = struct.unpack_from("<QQ", data, base + attr_size - 16)
        ids = list(struct.unpack_from(f"<{ids_size // 8}Q", data, ids_off))
        entries.append((attr, ids))
    return AttrTable(entries), data[d_off : d_off + d_size], d_off


# SAMPLE / LOST_SAMPLES / total counts printed by `perf report --stats` (perf 6.1) for each file
PERF_STATS = {
    "perf_data_converter/perf.data.callgraph-3.8": (1768, 0, 3798),
    "perf_data_converter/perf.data.weight_struct": (14, 0, 12964),
    "perf_data_converter/perf.data.branch_stack_hw_index": (5, 0, 5728),
    "perf_data_converter/perf.data.hybrid_topology": (7, 0, 124),
    "perf_data_converter/perf.data.raw-3.4": (441, 0, 2317),
    "perf_data_converter/perf.data.lost_samples-4.4": (191, 2, 243),
    "perf_data_converter/perf.data.group_desc-4.14": (13, 0, 50),
    "perf_data_converter/perf.data.singleprocess-3.8": (13, 0, 119),
    "perf_data_converter/perf.data.intel_pt-4.14": (15, 0, 257),
}


@pytest.mark.parametrize("name", sorted(PERF_STATS))
def test_real_perf_data_record_counts_match_perf(name):
    path = FIXTURES / name
    assert path.exists(), f"fixture missing from the checkout: {path}"
    table, data, base = read_file_mode(path)
    stats = DecodeStats()
    items = list(decode(data, table, base_offset=base, stats=stats, auxtrace_inline=True))
    samples, lost_samples, total = PERF_STATS[name]
    assert stats.samples == samples
    assert stats.records.get(R.LOST_SAMPLES, 0) == lost_samples
    assert sum(stats.records.values()) == total
    assert stats.unknown == 0 and stats.unknown_id == 0
    batches = [i for i in items if isinstance(i, SampleBatch)]
    b = SampleBatch.concat(batches)
    offsets = b.offset
    assert (np.diff(offsets) > 0).all() and offsets[0] >= base
    if table[0].sample_type & S.CALLCHAIN:
        assert len(b.callchain) >= len(b)
    if name.endswith("intel_pt-4.14"):
        aux = [i for i in items if isinstance(i, UserRecord) and i.type == R.AUXTRACE]
        assert len(aux) == 2 and all(len(a.payload) == struct.unpack_from("<Q", a.data, 8)[0] for a in aux)


def test_weight_struct_and_data_src_fields_from_pebs_file():
    path = FIXTURES / "perf_data_converter/perf.data.weight_struct"
    assert path.exists(), f"fixture missing from the checkout: {path}"
    table, data, base = read_file_mode(path)
    st = table[0].sample_type
    assert st & S.WEIGHT_STRUCT and st & S.DATA_SRC and st & S.ADDR
    b = SampleBatch.concat([i for i in decode(data, table, base_offset=base) if isinstance(i, SampleBatch)])
    assert len(b) == 14
    assert (b.weight_var1 > 0).all()  # load latency in cycles
    assert (b.data_src != 0).all() and (b.addr != 0).all()


def test_branch_stack_hw_index_file():
    path = FIXTURES / "perf_data_converter/perf.data.branch_stack_hw_index"
    assert path.exists(), f"fixture missing from the checkout: {path}"
    table, data, base = read_file_mode(path)
    e = [x for x in table if x.sample_type & S.BRANCH_STACK][0]
    assert e.has_hw_index
    b = SampleBatch.concat([i for i in decode(data, table, base_offset=base) if isinstance(i, SampleBatch)])
    n = np.diff(b.branch_offsets)
    assert len(b) == 5 and (n > 0).all()
    assert len(b.branch_from) == len(b.branch_to) == len(b.branch_flags) == n.sum()
    assert (b.branch_from != 0).all()


def test_newer_perf_file_with_136_byte_attr_decodes():
    path = FIXTURES / "linux-perf-data/sleep.data"
    assert path.exists(), f"fixture missing from the checkout: {path}"
    table, data, base = read_file_mode(path)
    stats = DecodeStats()
    b = SampleBatch.concat([i for i in decode(data, table, base_offset=base, stats=stats) if isinstance(i, SampleBatch)])
    assert len(b) > 0 and stats.unknown == 0
    assert len(set(b.pid.tolist())) == 1  # `sleep 1` only


@pytest.mark.parametrize("name", sorted(PERF_STATS))
def test_vectorized_and_struct_loop_paths_agree_on_real_files(name, monkeypatch):
    path = FIXTURES / name
    assert path.exists(), f"fixture missing from the checkout: {path}"
    import importlib

    dec = importlib.import_module("pmuscope.records.decode")  # the module, not the decode() function
    smp = importlib.import_module("pmuscope.records.sample")

    table, data, base = read_file_mode(path)

    def run():
        parts = [i for i in decode(data, table, base_offset=base, auxtrace_inline=True) if isinstance(i, SampleBatch)]
        b = SampleBatch.concat(parts)
        return [b.sample(i) for i in range(len(b))]

    fast = run()
    monkeypatch.setattr(dec, "_walk_vectorized", lambda buf, inline=False: None)

    def unaligned(*a, **k):
        raise smp._Unaligned

    monkeypatch.setattr(smp, "_decode_group", unaligned)
    slow = run()
    assert len(fast) == len(slow) == PERF_STATS[name][0]
    for f, s in zip(fast, slow):
        f = {k: v for k, v in f.items() if v not in (0, [], b"")}
        s = {k: v for k, v in s.items() if v not in (0, [], b"")}
        assert f == s
