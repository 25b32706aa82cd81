"""Counting without a PMU: a FakeKernel stands in for perf_event_open, read and
ioctl, so grouping, read layouts, scaling, aggregation and metrics are checked
against scripted kernel answers."""

from __future__ import annotations

import errno
import os
import struct
import time

import pytest

from pmuscope import errors
from pmuscope.counting import counter as counter_mod
from pmuscope.counting import count, evaluate
from pmuscope.counting.results import Counts
from pmuscope.events.spec import EventSpec
from pmuscope.kernel import abi
from pmuscope.kernel import syscall as sc

#: every test here runs over both Counter.read paths (native helper, pure Python)
pytestmark = pytest.mark.usefixtures("read_path")


def sw(name, config, group=None, leader=False):
    return EventSpec(name, abi.perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=config), pmu="software",
                     group=group, leader=leader)


def hw(name, config, group=None, leader=False):
    return EventSpec(name, abi.perf_event_attr(type=abi.PERF_TYPE_HARDWARE, config=config), group=group, leader=leader)


class FakeKernel:
    """Scripted perf_event_open/read/ioctl. ``values[(name, cpu, pid)] = (value, ena, run)``."""

    def __init__(self, monkeypatch, values=None, fail=None):
        self.values = values if values is not None else {}
        self.fail = fail or {}  # name -> errno
        self.opens = []  # (name, attr copy, pid, cpu, group_fd, flags, fd)
        self.reads = []
        self.ioctls = []
        self.closed = []
        self.next_fd = 1000
        self.by_fd = {}
        self.members = {}
        monkeypatch.setattr(sc, "_open_hook", self.open)
        monkeypatch.setattr(counter_mod, "_read", self.read)
        monkeypatch.setattr(counter_mod, "_ioctl", self.ioctl)
        monkeypatch.setattr(counter_mod, "_close", self.closed.append)

    def _name(self, attr):
        return {(1, 1): "task-clock", (1, 2): "page-faults", (1, 3): "context-switches", (0, 0): "cycles",
                (0, 1): "instructions", (0, 4): "branches", (0, 5): "branch-misses"}[(attr.type, attr.config)]

    def open(self, attr, pid, cpu, group_fd, flags):
        name = self._name(attr)
        if name in self.fail:
            eno = self.fail[name]
            if eno != errno.EACCES or not attr.exclude_kernel:
                raise OSError(eno, "fake")
        fd = self.next_fd
        self.next_fd += 1
        self.opens.append((name, attr.copy(), pid, cpu, group_fd, flags, fd))
        self.by_fd[fd] = (name, cpu, pid, attr.read_format)
        self.members[fd] = [fd]
        if group_fd >= 0:
            self.members[group_fd].append(fd)
        return fd

    def read(self, fd, size):
        name, cpu, pid, fmt = self.by_fd[fd]
        self.reads.append(fd)
        if fmt & abi.PERF_FORMAT_GROUP:
            mems = self.members[fd]
            _, ena, run = self.values[(name, cpu, pid)]
            words = [len(mems), ena, run]
            for m in mems:
                mname, mcpu, mpid, _ = self.by_fd[m]
                words += [self.values[(mname, mcpu, mpid)][0], m]
        else:
            words = [*self.values[(name, cpu, pid)], fd]
        blob = struct.pack(f"={len(words)}Q", *words)
        assert len(blob) == size, "the counter asked for the wrong read size"
        return blob

    def ioctl(self, fd, request, arg=0):
        self.ioctls.append((fd, request, arg))
        return 0


def test_single_event_scaling_like_perf(monkeypatch):
    k = FakeKernel(monkeypatch, {("cycles", -1, 0): (1000, 200, 100)})
    c = count([hw("cycles", 0)])
    c.start()
    ev = c.read()["cycles"]
    assert (ev.value, ev.time_enabled, ev.time_running) == (1000, 200, 100)
    assert ev.scaled == 2000.0  # value * ena / run
    assert ev.ratio == 0.5 and ev.multiplexed and ev.counted
    attr = k.opens[0][1]
    assert attr.read_format == abi.PERF_FORMAT_ID | abi.PERF_FORMAT_TOTAL_TIME_ENABLED | abi.PERF_FORMAT_TOTAL_TIME_RUNNING
    assert attr.disabled == 1 and attr.inherit == 1
    assert k.ioctls[0][1] == abi.PERF_EVENT_IOC_ENABLE
    c.close()
    assert k.closed == [1000]


def test_not_running_is_not_counted_not_zero(monkeypatch):
    FakeKernel(monkeypatch, {("cycles", -1, 0): (0, 500, 0)})
    with count([hw("cycles", 0)]) as c:
        pass
    ev = c.last["cycles"]
    assert not ev.counted and ev.status == "<not counted>" and ev.scaled == 0.0


def test_group_opened_as_one_group_and_read_once_per_cpu(monkeypatch):
    vals = {}
    for cpu in (0, 1):
        vals[("cycles", cpu, -1)] = (100 + cpu, 1000, 250)
        vals[("instructions", cpu, -1)] = (300 + cpu, 1000, 250)
        vals[("branches", cpu, -1)] = (50, 1000, 250)
    k = FakeKernel(monkeypatch, vals)
    specs = [hw("cycles", 0, 0, True), hw("instructions", 1, 0), hw("branches", 4, 0)]
    c = count(specs, cpus=[0, 1])
    c.start()
    r = c.read()
    assert len(k.reads) == 2  # one read() per (cpu, thread) cell
    leaders = [o for o in k.opens if o[0] == "cycles"]
    for name, attr, pid, cpu, group_fd, flags, fd in k.opens:
        assert pid == -1 and attr.inherit == 0  # system-wide: no inherit
        assert attr.read_format & abi.PERF_FORMAT_GROUP
        if name == "cycles":
            assert group_fd == -1 and attr.disabled == 1
        else:
            lead = next(o for o in leaders if o[3] == cpu)
            assert group_fd == lead[6] and attr.disabled == 0
    assert r["cycles"].value == 201 and r["cycles"].scaled == pytest.approx(804.0)
    assert r["instructions"].scaled == pytest.approx(4 * 601)
    per_cpu = r.per_cpu()
    assert per_cpu[1]["instructions"].value == 301 and per_cpu[1]["instructions"].ratio == 0.25
    # only leaders get ioctls, with the group flag
    assert {fd for fd, req, arg in k.ioctls} == {o[6] for o in leaders}
    assert all(arg == abi.PERF_IOC_FLAG_GROUP for _, _, arg in k.ioctls)
    c.close()


def test_unscheduled_group_is_reported(monkeypatch):
    FakeKernel(monkeypatch, {("cycles", -1, 0): (0, 900, 0), ("instructions", -1, 0): (0, 900, 0),
                             ("task-clock", -1, 0): (5, 900, 900)})
    with count([hw("cycles", 0, 0, True), hw("instructions", 1, 0), sw("task-clock", 1)]) as c:
        pass
    r = c.last
    assert [e.status for e in r] == ["<not counted>", "<not counted>", ""]


def test_unsupported_hardware_raises_or_is_marked(monkeypatch):
    FakeKernel(monkeypatch, {("task-clock", -1, 0): (5, 9, 9)}, fail={"cycles": errno.ENOENT})
    monkeypatch.setattr(sc, "_no_hardware_pmu", lambda sysfs="/sys": True)
    with pytest.raises(errors.NoHardwarePMUError):
        count([sw("task-clock", 1), hw("cycles", 0)]).start()
    with count([sw("task-clock", 1), hw("cycles", 0)], tolerate_unsupported=True) as c:
        pass
    assert c.last["cycles"].status == "<not supported>"
    assert c.last["task-clock"].display == pytest.approx(5e-6) and c.last["task-clock"].unit == "msec"


def test_permission_fallback_counts_user_space(monkeypatch):
    k = FakeKernel(monkeypatch, {("cycles", -1, 0): (7, 1, 1)}, fail={"cycles": errno.EACCES})
    with count([hw("cycles", 0)]) as c:
        pass
    assert c.names == ["cycles:u"] and k.opens[0][1].exclude_kernel == 1
    assert c.last["cycles"].value == 7  # looked up by base name


def test_pid_attaches_every_thread_and_drops_vanished(monkeypatch, tmp_path):
    for tid in (10, 11, 12):
        (tmp_path / "10" / "task" / str(tid)).mkdir(parents=True)
    vals = {("task-clock", -1, t): (t, 1, 1) for t in (10, 11)}
    k = FakeKernel(monkeypatch, vals)
    real = k.open

    def open_(attr, pid, cpu, group_fd, flags):
        if pid == 12:
            raise OSError(errno.ESRCH, "gone")
        return real(attr, pid, cpu, group_fd, flags)

    monkeypatch.setattr(sc, "_open_hook", open_)
    with count([sw("task-clock", 1)], pid=10, procfs=str(tmp_path)) as c:
        pass
    assert c.threads == [10, 11]
    assert c.last["task-clock"].value == 21
    assert {t: e["task-clock"].value for t, e in c.last.per_thread().items()} == {10: 10, 11: 11}


def test_delta_and_aggregate_modes(monkeypatch):
    vals = {("page-faults", cpu, -1): (10 * (cpu + 1), 100, 100) for cpu in range(4)}
    k = FakeKernel(monkeypatch, vals)
    c = count([sw("page-faults", 2)], cpus="0-3")
    c.start()
    first = c.read()
    for cpu in range(4):
        vals[("page-faults", cpu, -1)] = (10 * (cpu + 1) + cpu, 200, 200)
    second = c.read()
    d = second - first
    assert d["page-faults"].value == 0 + 1 + 2 + 3 and d["page-faults"].time_enabled == 400

    class Topo:
        def key(self, cpu, mode):
            return f"S{cpu // 2}"

    rows = second.aggregate("socket", Topo())
    assert [(key, n, evs[0].value) for key, n, evs in rows] == [("S0", 2, 10 + 21), ("S1", 2, 32 + 43)]
    c.close()


def test_workload_attrs_enable_on_exec(monkeypatch):
    k = FakeKernel(monkeypatch, {})
    c = count([sw("task-clock", 1), sw("page-faults", 2)], command=["true"])
    c.open()
    for name, attr, pid, *_ in k.opens:
        assert pid == c.workload.pid and attr.enable_on_exec == 1 and attr.disabled == 1 and attr.inherit == 1
    c.close()  # a corked child is cancelled and reaped
    assert c.workload.status == 127


def test_metrics_from_table_and_absent_reasons():
    class E:
        def __init__(self, scaled, counted=True, supported=True):
            self.scaled, self.counted, self.supported = scaled, counted, supported

    m = evaluate({"task-clock": E(2e9), "cycles": E(4e9), "instructions": E(8e9), "branches": E(1000),
                  "branch-misses": E(25), "page-faults": E(5000)}, duration_ns=1e9)
    get = {(ev, v.name): v for ev, vs in m.items() for v in vs}
    assert get[("task-clock", "CPUs utilized")].value == pytest.approx(2.0)
    assert get[("cycles", "GHz")].value == pytest.approx(2.0)
    assert get[("instructions", "IPC")].value == pytest.approx(2.0)
    assert get[("branch-misses", "branch-miss %")].value == pytest.approx(2.5)
    pf = get[("page-faults", "page-fault rate")]
    assert pf.scaled() == (pytest.approx(2.5), "K/sec")
    assert get[("branches", "rate")].scaled() == (pytest.approx(500.0), "/sec")

    m = evaluate({"instructions": E(10), "cycles": E(0, counted=False), "branch-misses": E(3),
                  "branches": E(0)}, duration_ns=1e9)
    get = {(ev, v.name): v for ev, vs in m.items() for v in vs}
    ipc = get[("instructions", "IPC")]
    assert ipc.value is None and "cycles was not counted" in ipc.reason
    bm = get[("branch-misses", "branch-miss %")]
    assert bm.value is None and "is 0" in bm.reason  # never a ZeroDivisionError
    cpi = evaluate({"instructions": E(10), "cycles": E(20)}, 1, all_metrics=True)["instructions"]
    assert [v.value for v in cpi if v.name == "CPI"] == [2.0]
    missing = evaluate({"branch-misses": E(3)}, 1)["branch-misses"][0]
    assert missing.value is None and "branches (not measured)" in missing.reason


def test_to_dataframe(monkeypatch):
    pytest.importorskip("pandas")
    FakeKernel(monkeypatch, {("page-faults", cpu, -1): (cpu + 1, 10, 5) for cpu in (0, 1)})
    with count([sw("page-faults", 2)], cpus=[0, 1]) as c:
        pass
    df = c.last.to_dataframe()
    assert list(df["cpu"]) == [0, 1] and list(df["scaled"]) == [2.0, 4.0]
    assert c.last.to_dataframe(by="event")["scaled"].iloc[0] == 6.0


def test_python_and_numpy_aggregation_agree(monkeypatch):
    from pmuscope.counting import results

    vals = {}
    for cpu in (0, 1, 2):
        vals[("cycles", cpu, -1)] = (1000 + cpu, 900, 300 * cpu)  # cpu0 never ran
        vals[("instructions", cpu, -1)] = (7 * cpu, 900, 300 * cpu)
        vals[("page-faults", cpu, -1)] = (5, 100, 100)
    FakeKernel(monkeypatch, vals)
    c = count([hw("cycles", 0, 0, True), hw("instructions", 1, 0), sw("page-faults", 2)], cpus=[0, 1, 2])
    c.start()
    raws = c.read_raw()
    small = Counts(c.layout, raws, 10, 0)
    monkeypatch.setattr(results, "_PY_CELLS", 0)
    big = Counts(c.layout, raws, 10, 0)
    assert list(small) == list(big)
    assert small["cycles"].scaled == pytest.approx(1001 * 3 + 1002 * 1.5)  # cpu0 run=0 adds nothing
    assert small["cycles"].counted and small["cycles"].time_running == 900
    c.close()


def test_per_socket_node_core_on_a_two_socket_fixture(monkeypatch, tmp_path, data_dir):
    import tarfile

    from pmuscope.counting.topology import CpuTopology

    with tarfile.open(data_dir / "topology" / "intel-clx-2s-2node.tar.gz") as tar:
        tar.extractall(tmp_path)
    topo = CpuTopology.read(str(tmp_path / "intel-clx-2s-2node"))
    cpus = sorted(topo.socket)
    FakeKernel(monkeypatch, {("page-faults", cpu, -1): (1, 10, 10) for cpu in cpus})
    with count([sw("page-faults", 2)], cpus=cpus) as c:
        pass
    by_socket = {key: (n, evs[0].value) for key, n, evs in c.last.aggregate("socket", topo)}
    assert sorted(by_socket) == ["S0", "S1"]
    assert sum(n for n, _ in by_socket.values()) == len(cpus)
    assert all(n == v for n, v in by_socket.values())  # one fault per CPU
    nodes = {key for key, _, _ in c.last.aggregate("node", topo)}
    assert nodes == {"N0", "N1"}
    cores = c.last.aggregate("core", topo)
    # hyperthreads: each core key aggregates the CPUs sharing (socket, die, core_id)
    assert {n for _, n, _ in cores} == {len(cpus) // len(cores)}


def test_stat_cli_default_set_without_a_pmu(monkeypatch, capsys):
    """No hardware PMU: the software defaults are counted and the hardware ones
    print <not supported> (perf's behaviour); the optional stalled-cycles rows are dropped."""
    from pmuscope.cli.main import main

    vals = {}

    class NoPmu(FakeKernel):
        def _name(self, attr):
            names = {(1, 0): "cpu-clock", (1, 3): "context-switches", (1, 4): "cpu-migrations", (1, 2): "page-faults"}
            return names.get((attr.type, attr.config), f"hw{attr.config}")

        def open(self, attr, pid, cpu, group_fd, flags):
            if attr.type == abi.PERF_TYPE_HARDWARE:
                raise OSError(errno.ENOENT, "fake")
            vals.setdefault((self._name(attr), cpu, pid), (1000, 10, 10))
            return super().open(attr, pid, cpu, group_fd, flags)

    NoPmu(monkeypatch, vals)
    monkeypatch.setattr(sc, "_no_hardware_pmu", lambda sysfs="/sys": True)
    rc = main(["stat", "-C", "0", "-I", "10", "--interval-count", "1", "-x", ","])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0
    events = [line.split(",")[3] for line in err]
    assert events == ["cpu-clock", "context-switches", "cpu-migrations", "page-faults", "cycles", "instructions",
                      "branches", "branch-misses"]
    for line in err:
        f = line.split(",")
        if f[3] in ("cycles", "instructions", "branches", "branch-misses"):
            assert f[1] == "<not supported>"
        else:
            assert f[1] != "<not supported>"


def test_tool_events_are_measured_not_opened(monkeypatch):
    from pmuscope.events import parse_events

    k = FakeKernel(monkeypatch, {("task-clock", -1, 0): (5, 9, 9)})
    c = count(parse_events("duration_time,task-clock,user_time"))
    c.start()
    t0 = c.start_ns
    r = c.read()
    assert [o[0] for o in k.opens] == ["task-clock"]  # only the kernel event was opened
    d = r["duration_time"]
    assert d.unit == "ns" and d.counted and 0 < d.value <= r.timestamp_ns - t0
    assert r["user_time"].counted and r["task-clock"].value == 5
    later = c.read()
    # measured at read time (a few µs from the Counts timestamp)
    assert abs((later - r)["duration_time"].value - (later.timestamp_ns - r.timestamp_ns)) < 1_000_000
    c.close()


# -- the read paths ------------------------------------------------------------


def test_read_uses_the_path_asked_for_and_gives_the_same_counts(monkeypatch, read_path):
    vals = {}
    for cpu in (0, 1):
        vals[("cycles", cpu, -1)] = (100 + cpu, 1000, 250 * cpu)  # cpu0 never ran
        vals[("instructions", cpu, -1)] = (300 + cpu, 1000, 250 * cpu)
        vals[("page-faults", cpu, -1)] = (7, 1000, 1000)
    k = FakeKernel(monkeypatch, vals)
    specs = [hw("cycles", 0, 0, True), hw("instructions", 1, 0), sw("page-faults", 2)]
    c = count(specs, cpus=[0, 1])
    assert c.read_path == "python"  # nothing to read before open
    c.start()
    assert c.read_path == read_path
    before = time.monotonic_ns()
    r = c.read()
    after = time.monotonic_ns()
    assert c.last is r and type(r) is Counts
    assert len(k.reads) == 4  # one read per group and CPU, through the kernel seam on both paths
    # the state Counts.__init__ makes, whichever path built it
    assert r.layout is c.layout and r.start_ns == c.start_ns and before <= r.timestamp_ns <= after
    assert [bytes(b) for b in r._raws] == [bytes(b) for b in c.read_raw()]
    assert r._data is None and r._agg is None
    reference = Counts(c.layout, c.read_raw(), r.timestamp_ns, c.start_ns)
    assert list(r) == list(reference) and (r.data == reference.data).all()
    assert r["cycles"].scaled == 101 * 4.0 and r["page-faults"].value == 14
    c.close()
    assert c.read_path == "python"
    with pytest.raises(errors.PmuscopeError, match="closed"):
        c.read()


def test_tool_events_keep_the_python_reader(monkeypatch, read_path):
    from pmuscope.events import parse_events

    FakeKernel(monkeypatch, {("task-clock", -1, 0): (5, 9, 9)})
    c = count(parse_events("task-clock,duration_time"))
    c.start()
    assert c.read_path == "python"
    assert c.read()["task-clock"].value == 5
    c.close()


def test_without_the_native_helper_the_python_reader_is_used(monkeypatch, read_path):
    monkeypatch.setattr(counter_mod, "_native", None)
    FakeKernel(monkeypatch, {("task-clock", -1, 0): (5, 9, 9)})
    c = count([sw("task-clock", 1)])
    c.start()
    assert not counter_mod.native_read_available() and c.read_path == "python"
    assert c.read()["task-clock"].value == 5
    c.close()


def test_lookup_of_one_event_agrees_with_all_events_and_numpy(monkeypatch, read_path):
    """counts[name] right after a read sums only that event's cells; it must give
    what the all-events path and the numpy path give, cell case by cell case."""
    from pmuscope.counting import results

    vals = {}
    for cpu in (0, 1, 2):
        vals[("cycles", cpu, -1)] = (1000 + cpu, 900, 300 * cpu)  # cpu0 never ran, the others multiplexed
        vals[("instructions", cpu, -1)] = (7 * cpu, 900, 300 * cpu)
        vals[("page-faults", cpu, -1)] = (5, 100, 100)
    FakeKernel(monkeypatch, vals)
    specs = [hw("cycles", 0, 0, True), hw("instructions", 1, 0), sw("page-faults", 2)]
    for cpus in ([1], [0], [0, 1, 2]):  # one cell (multiplexed; not running) and several
        c = count(specs, cpus=cpus)
        c.start()
        raws = c.read_raw()
        every = list(Counts(c.layout, raws, 10, 0))
        one = [Counts(c.layout, raws, 10, 0)[name] for name in c.names]  # a fresh Counts per lookup
        monkeypatch.setattr(results, "_PY_CELLS", 0)
        big = list(Counts(c.layout, raws, 10, 0))
        monkeypatch.setattr(results, "_PY_CELLS", 16)
        assert one == every == big, cpus
        # the other forms a Counts takes: unpacked words (tuples, lists), other buffers
        for form in (results._unpack, lambda b: list(results._unpack(b)), bytearray, memoryview):
            raws2 = [form(b) for b in raws]
            assert [Counts(c.layout, raws2, 10, 0)[name] for name in c.names] == one, (cpus, form)
            assert list(Counts(c.layout, raws2, 10, 0)) == one, (cpus, form)
        c.close()
    assert one[0].scaled == pytest.approx(1001 * 3 + 1002 * 1.5) and one[0].time_running == 900


def test_lookup_of_a_member_a_short_group_read_left_out():
    """A group read returns ``nr`` members: one the buffer does not hold is not
    counted, on every path (decode() reads ``nr`` the same way)."""
    from pmuscope.counting import results

    layout = results.Layout(names=("a", "b"), units=("", ""), scales=(1.0, 1.0), supported=(True, True),
                            errors=(None, None), cpus=(-1,), threads=(0,), units_plan=((True, (0, 1), 0, 0),))
    short = struct.pack("=5Q", 1, 100, 50, 7, 1)  # nr=1: only a's {value, id}
    full = struct.pack("=7Q", 1, 100, 50, 7, 1, 9, 2)  # nr=1 but room for b
    for raw in (short, full):
        assert Counts(layout, [raw], 1)["a"].scaled == 14.0
        b = Counts(layout, [raw], 1)["b"]
        assert (b.value, b.counted, b.scaled) == (0, False, 0.0)
        assert list(Counts(layout, [raw], 1)) == list(Counts(layout, None, 1, data=results.decode(layout, [raw])))


def test_name_lookup_exact_first_then_without_modifier():
    from pmuscope.counting import results

    layout = results.Layout(names=("cycles:u", "cycles", "instructions:u"), units=("",) * 3, scales=(1.0,) * 3,
                            supported=(True,) * 3, errors=(None,) * 3, cpus=(-1,), threads=(0,),
                            units_plan=tuple((False, (i,), 0, 0) for i in range(3)))
    raws = [struct.pack("=4Q", 10 * (i + 1), 5, 5, i) for i in range(3)]
    r = Counts(layout, raws, 1)
    assert r["cycles"].value == 20 and r["cycles:u"].value == 10  # the exact name wins
    assert r["instructions"].name == "instructions:u"  # else the name without its modifier
    assert "instructions" in r and "branches" not in r
    with pytest.raises(KeyError, match="no event 'branches' in these counts \\(have cycles:u, cycles, instructions:u\\)"):
        r["branches"]
    assert r.value("cycles") == 20.0
