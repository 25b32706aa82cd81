"""What start-up work moved to first use still gives what it gave before:
the abi enums, the hand-written value classes, lazy package exports."""

from __future__ import annotations

import enum
import pickle
import subprocess
import sys

import pytest

from pmuscope.kernel import abi


def test_abi_enums_are_the_kernel_tables_and_match_the_int_constants():
    assert issubclass(abi.PerfSample, enum.IntFlag) and issubclass(abi.PerfRecord, enum.IntEnum)
    assert [m.name for m in abi.PerfSample][:3] == ["IP", "TID", "TIME"]
    assert len(abi.PerfSample) == 25 and abi.PerfSample.WEIGHT_STRUCT == 1 << 24
    for m in abi.PerfSample:
        assert getattr(abi, "PERF_SAMPLE_" + m.name) == int(m)
    for m in abi.PerfBranchSample:
        assert getattr(abi, "PERF_SAMPLE_BRANCH_" + m.name) == int(m)
    for m in abi.PerfRecord:
        assert getattr(abi, "PERF_RECORD_" + m.name) == int(m)
    for m in abi.PerfFormat:
        assert getattr(abi, "PERF_FORMAT_" + m.name) == int(m)
    assert abi.PERF_COUNT_SW_TASK_CLOCK == abi.PerfSwId.TASK_CLOCK == 1
    assert abi.PerfRecord(10) is abi.PerfRecord.MMAP2 and abi.PerfRecord.COMPRESSED2 == 83
    assert abi.PERF_SAMPLE_WEIGHT_TYPE == abi.PerfSample.WEIGHT | abi.PerfSample.WEIGHT_STRUCT
    assert isinstance(abi.PERF_SAMPLE_WEIGHT_TYPE, abi.PerfSample)


def test_abi_enums_are_built_once_and_pickle_by_name():
    from pmuscope.kernel import PerfSample  # the package's lazy re-export: the same class

    assert PerfSample is abi.PerfSample is abi.PerfSample
    assert PerfSample.__module__ == "pmuscope.kernel.abi" and PerfSample.__qualname__ == "PerfSample"
    assert pickle.loads(pickle.dumps(abi.PerfRecord.SAMPLE)) is abi.PerfRecord.SAMPLE
    assert repr(abi.PerfType.RAW) == "<PerfType.RAW: 4>"
    assert "PerfSample" in dir(abi)
    with pytest.raises(AttributeError):
        abi.PerfNothing  # noqa: B018


def test_stat_builds_no_enum_class():
    probe = ("import sys\n"
             "from pmuscope.cli.main import main\n"
             "main(['stat', '-e', 'task-clock', '--', 'true'])\n"
             "from pmuscope.kernel import abi\n"
             "print(sorted(n for n in abi._ENUMS if n in vars(abi)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr  # 1: perf_event_open refused here; the imports are the same
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_record_classes_compare_and_print_like_the_dataclasses_they_were():
    from pmuscope.records.types import Comm, DecodeStats, Mmap2, SampleId, Switch, UserRecord

    sid = SampleId(pid=1, tid=2, time=3)
    assert repr(sid) == "SampleId(pid=1, tid=2, time=3, id=None, stream_id=None, cpu=None, identifier=None)"
    c = Comm(8, 0x2000, sid, 1, 2, "true")
    assert repr(c) == ("Comm(offset=8, misc=8192, sample_id=SampleId(pid=1, tid=2, time=3, id=None, stream_id=None, "
                       "cpu=None, identifier=None), pid=1, tid=2, comm='true')")
    assert c == Comm(8, 0x2000, SampleId(1, 2, 3), 1, 2, "true") and c != Comm(8, 0, sid, 1, 2, "true")
    assert c.exec and c.time == 3 and c.type == abi.PERF_RECORD_COMM
    assert Switch(0, 0, None) != Comm(0, 0, None, 0, 0, "")  # other class: not equal
    with pytest.raises(TypeError):
        hash(c)
    with pytest.raises(AttributeError):
        c.other = 1  # __slots__, as @dataclass(slots=True)
    m = Mmap2(0, 0, None, 1, 1, 0x1000, 0x2000, 0, 8, 1, 42, 0, None, 5, 2, "/bin/true")
    assert m.filename == "/bin/true" and m.ino == 42 and m.type == abi.PERF_RECORD_MMAP2
    assert UserRecord(0, 68, 0, b"").payload is None
    a, b = DecodeStats(), DecodeStats()
    a.count(9, 2)
    assert a.records == {9: 2} and b.records == {}  # a dict each, not one shared
    assert repr(b) == ("DecodeStats(records={}, samples=0, lost=0, lost_samples=0, throttle=0, unthrottle=0, "
                       "unknown=0, unknown_id=0, bytes=0)")
    assert pickle.loads(pickle.dumps(m)) == m


def test_feature_classes_compare_and_print_like_the_dataclasses_they_were():
    from pmuscope.perfdata.features import BuildId, CpuTopology, NrCpus

    assert repr(NrCpus(2, 1)) == "NrCpus(nr_cpus_available=2, nr_cpus_online=1)"
    assert NrCpus(2, 1) == NrCpus(2, 1) != NrCpus(2, 2)
    t = CpuTopology(["0-1"], ["0", "1"])
    assert t.cpu_ids == [] and t.die_ids == [] and t.extra == b"" and t.cpu_ids is not CpuTopology([], []).cpu_ids
    assert BuildId("/bin/true", b"\x01\x02").hex == "0102"


def test_vendor_tables_env_var_is_one_name():
    from pmuscope.events import parser, vendor

    assert parser.VENDOR_ENV_DIR == vendor.ENV_DIR


@pytest.mark.parametrize("package, name", [("pmuscope.events", "parse_events"), ("pmuscope.system", "online_cpus"),
                                           ("pmuscope.symbols", "Symbolizer"), ("pmuscope.spe", "decode_records"),
                                           ("pmuscope.serve", "MetricsServer"), ("pmuscope.export", "render"),
                                           ("pmuscope.export", "pprof"), ("pmuscope.symbols", "demangle")])
def test_lazy_package_exports_resolve(package, name):
    probe = (f"import {package} as p\n"
             f"from {package} import {name}\n"
             f"print(type({name}).__name__, {name} is getattr(p, {name!r}), {name!r} in dir(p))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    kind, same, listed = out.stdout.split()
    assert same == listed == "True"
    assert (kind == "module") == (name == "pprof")  # symbols.demangle: the function, not its submodule


def test_counting_value_classes_are_immutable_compare_by_value_and_copy():
    import copy

    from pmuscope.counting.metrics import METRICS, Metric, MetricValue
    from pmuscope.counting.results import Layout

    lay = Layout(names=("cycles:u", "b"), units=("", ""), scales=(1.0, 1.0), supported=(True, True),
                 errors=(None, None), cpus=(-1,), threads=(7,), units_plan=((True, (0, 1), 0, 0),))
    assert lay.index == {"cycles:u": 0, "b": 1, "cycles": 0}
    assert lay == Layout(*[getattr(lay, f) for f in ("names", "units", "scales", "supported", "errors", "cpus",
                                                     "threads", "units_plan")])
    assert hash(lay) == hash(copy.copy(lay)) and pickle.loads(pickle.dumps(lay)).index == lay.index
    assert repr(lay).startswith("Layout(names=('cycles:u', 'b'), units=('', ''), ") and "system_wide=False)" in repr(lay)
    with pytest.raises(AttributeError):
        lay.names = ()
    m = METRICS[0]
    assert m.inputs == ("task-clock", "duration_time")
    assert m == Metric(m.name, m.formula, m.unit, m.on) and hash(m) == hash(copy.deepcopy(m))
    assert Metric("x", "a / b", "u", on="a", inputs=("z",)).inputs == ("z",)
    with pytest.raises(AttributeError):
        m.unit = "?"
    mv = MetricValue(m, None, "no elapsed time")
    assert pickle.loads(pickle.dumps(mv)) == mv and mv.scaled() == (None, "CPUs utilized")
