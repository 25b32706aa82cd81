"""error_from_errno with injected procfs/sysfs roots, and pickling of every error class.

EBUSY cannot be provoked on this machine for real (it needs an exclusive PMU
such as intel_pt, arm_spe or cs_etm already in use), so its message is only
checked here; every other errno is also triggered for real in tests/live.
"""

from __future__ import annotations

import errno
import os
import pickle
import resource

import pytest

import pmuscope.errors as E
from pmuscope.kernel import abi, syscall
from pmuscope.kernel.syscall import error_from_errno, explain_invalid, required_paranoid


def attr(**kw) -> abi.perf_event_attr:
    return abi.perf_event_attr(**kw)


CYCLES = dict(type=abi.PERF_TYPE_HARDWARE, config=0)
TASK_CLOCK = dict(type=abi.PERF_TYPE_SOFTWARE, config=1)


@pytest.fixture
def procfs(tmp_path):
    """A fake /proc: paranoid level and CapEff set by the test."""
    root = tmp_path / "proc"
    (root / "sys/kernel").mkdir(parents=True)
    (root / "self").mkdir()

    def make(paranoid: int | None = 2, capeff: int = 0, **sysctl: int) -> str:
        p = root / "sys/kernel/perf_event_paranoid"
        if paranoid is None:
            p.unlink(missing_ok=True)
        else:
            p.write_text(f"{paranoid}\n")
        (root / "self/status").write_text(f"Name:\tx\nCapEff:\t{capeff:016x}\n")
        for k, v in sysctl.items():
            (root / f"sys/kernel/{k}").write_text(f"{v}\n")
        return str(root)

    return make


@pytest.fixture
def sysfs(tmp_path):
    """A fake /sys with the PMUs named by the test and CPUs online."""

    def make(pmus: dict[str, int], online: str = "0-3") -> str:
        root = tmp_path / "sys"
        for name, type_ in pmus.items():
            d = root / "bus/event_source/devices" / name
            d.mkdir(parents=True, exist_ok=True)
            (d / "type").write_text(f"{type_}\n")
        cpu = root / "devices/system/cpu"
        cpu.mkdir(parents=True, exist_ok=True)
        (cpu / "online").write_text(online + "\n")
        return str(root)

    return make


BASE_PMUS = {"software": 1, "tracepoint": 2, "breakpoint": 5}


# -- the paranoid table -------------------------------------------------------------


def test_required_paranoid():
    assert required_paranoid(attr(**TASK_CLOCK, exclude_kernel=1), 0, -1) == 2
    assert required_paranoid(attr(**TASK_CLOCK), 0, -1) == 1
    assert required_paranoid(attr(**TASK_CLOCK, exclude_kernel=1), -1, 0) == 0
    assert required_paranoid(attr(**CYCLES), -1, 3) == 0
    raw_tp = attr(type=abi.PERF_TYPE_TRACEPOINT, config=300, sample_period=1, sample_type=abi.PERF_SAMPLE_RAW)
    assert required_paranoid(raw_tp, -1, 0) == -1
    assert required_paranoid(raw_tp, 0, -1) == -1  # per task too (perf_trace_event_perm)
    # counting a tracepoint of one's own task is kernel-mode counting, not raw access
    assert required_paranoid(attr(type=abi.PERF_TYPE_TRACEPOINT, config=300), 0, -1) == 1


# -- EACCES / EPERM -------------------------------------------------------------------


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM])
@pytest.mark.parametrize(
    "kw, pid, cpu, needed, scope",
    [
        (dict(TASK_CLOCK), -1, 0, 0, "CPU-wide monitoring"),
        (dict(CYCLES), 0, -1, 1, "kernel-mode counting"),
    ],
)
@pytest.mark.parametrize("level", [0, 1, 2, 3, 4])
def test_permission_quotes_paranoid_level_and_ways_out(procfs, err, kw, pid, cpu, needed, scope, level):
    e = error_from_errno(err, attr(**kw), event="cycles", pid=pid, cpu=cpu, procfs=procfs(level))
    assert type(e) is E.PermissionDeniedError and isinstance(e, PermissionError)
    msg = str(e)
    assert scope in msg
    assert f"/proc/sys/kernel/perf_event_paranoid is {level}" in msg
    want = min(needed, 2)
    assert f"this needs {want} or lower, or CAP_PERFMON" in msg
    assert "grant CAP_PERFMON" in msg and f"sysctl -w kernel.perf_event_paranoid={want}" in msg
    assert syscall.PERF_SECURITY_DOC in msg
    assert e.paranoid == level and e.needed == needed and e.cause == "paranoid" and e.errno == err
    if pid == 0:
        assert "cycles:u" in msg  # the third way out: user space only
    assert e.exit_code == 13


def test_permission_unknown_level(procfs):
    e = error_from_errno(errno.EACCES, attr(**CYCLES), event="cycles", procfs=procfs(None))
    assert "perf_event_paranoid is unknown" in str(e) and e.paranoid is None


@pytest.mark.parametrize("cap", [syscall.CAP_PERFMON, syscall.CAP_SYS_ADMIN])
def test_permission_with_capability_means_seccomp(procfs, cap):
    e = error_from_errno(errno.EPERM, attr(**TASK_CLOCK), event="task-clock", procfs=procfs(2, 1 << cap))
    assert e.cause == "seccomp" and "seccomp" in str(e) and "--cap-add PERFMON" in str(e)
    assert e.capabilities == 1 << cap


def test_permission_on_other_process_means_ptrace(procfs, tmp_path):
    root = procfs(1)
    os.mkdir(os.path.join(root, "4242"))
    e = error_from_errno(errno.EACCES, attr(**TASK_CLOCK, exclude_kernel=1), event="task-clock", pid=4242, procfs=root)
    assert e.cause == "ptrace"
    assert "pid 4242" in str(e) and f"owned by uid {os.getuid()}" in str(e) and "CAP_SYS_PTRACE" in str(e)


# -- not supported ----------------------------------------------------------------------


@pytest.mark.parametrize("err", [errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV])
def test_hardware_event_without_pmu(sysfs, err):
    e = error_from_errno(err, attr(**CYCLES), event="cycles", sysfs=sysfs(BASE_PMUS), probe=False)
    assert type(e) is E.NoHardwarePMUError and isinstance(e, E.EventNotSupportedError)
    assert "'cycles' needs a hardware PMU" in str(e) and "exposes none" in str(e)


def test_hardware_event_with_pmu_not_supported(sysfs):
    root = sysfs({**BASE_PMUS, "cpu": 4})
    e = error_from_errno(errno.ENOENT, attr(type=abi.PERF_TYPE_HW_CACHE, config=0x10002), event="LLC-prefetch-misses", sysfs=root)
    assert type(e) is E.EventNotSupportedError
    assert "not supported by this CPU's PMU" in str(e) and "ENOENT" in str(e)
    e = error_from_errno(errno.EOPNOTSUPP, attr(**CYCLES, sample_period=1000), event="cycles", sysfs=root, probe=False)
    assert "cannot be sampled here" in str(e)


def test_unknown_dynamic_pmu_type(sysfs):
    root = sysfs({**BASE_PMUS, "cpu": 4, "uncore_imc_0": 17})
    e = error_from_errno(errno.ENOENT, attr(type=42, config=1), sysfs=root)
    assert "no PMU has type 42" in str(e) and e.pmu is None
    e = error_from_errno(errno.ENOENT, attr(type=17, config=0xFF), event="uncore_imc_0/event=0xff/", sysfs=root)
    assert "PMU uncore_imc_0 has no such event" in str(e) and e.pmu == "uncore_imc_0"


def test_offline_cpu(sysfs):
    e = error_from_errno(errno.ENODEV, attr(**TASK_CLOCK), event="task-clock", pid=-1, cpu=5, sysfs=sysfs(BASE_PMUS, "0-3"))
    assert type(e) is E.EventNotSupportedError and "cpu 5: that CPU is not online" in str(e) and "0,1,2,3" in str(e)


# -- EINVAL: the static rules ------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, pid, cpu, field, why",
    [
        (dict(TASK_CLOCK, read_format=1 << 12), 0, -1, "read_format=0x1000", "unknown PERF_FORMAT_* bits 0x1000"),
        (dict(TASK_CLOCK, sample_type=1 << 40), 0, -1, "sample_type=0x10000000000", "unknown PERF_SAMPLE_* bits"),
        (dict(TASK_CLOCK, sigtrap=1), 0, -1, "sigtrap=1", "requires remove_on_exec"),
        (dict(CYCLES, precise_ip=3), 0, -1, None, None),  # 3 is valid: not a static rule
        (dict(TASK_CLOCK, freq=1, sample_freq=200000), 0, -1, "sample_freq=200000", "perf_event_max_sample_rate=100000"),
        (dict(TASK_CLOCK, sample_period=1, sample_type=abi.PERF_SAMPLE_BRANCH_STACK, branch_sample_type=abi.PERF_SAMPLE_BRANCH_USER),
         0, -1, "branch_sample_type=0x1", "needs a branch type"),
        (dict(TASK_CLOCK), -1, 9, "cpu=9", "no such CPU online (online: 0,1,2,3)"),
        (dict(TASK_CLOCK), -1, -1, "pid=-1,cpu=-1", "needs a task"),
        (dict(type=abi.PERF_TYPE_TRACEPOINT, config=999999), 0, -1, "config=999999", "no tracepoint has this id"),
    ],
)
def test_invalid_names_the_field(procfs, sysfs, kw, pid, cpu, field, why):
    pr, sy = procfs(2, perf_event_max_sample_rate=100000), sysfs(BASE_PMUS)
    got_field, got_why = explain_invalid(attr(**kw), pid, cpu, procfs=pr, sysfs=sy, probe=False)
    assert got_field == field
    if why:
        assert why in got_why
    e = error_from_errno(errno.EINVAL, attr(**kw), event="ev", pid=pid, cpu=cpu, procfs=pr, sysfs=sy, probe=False)
    assert type(e) is E.InvalidAttrError and e.field == field
    if field:
        assert f"the kernel rejected {field}" in str(e)


# -- fds, processes, busy, sizes ---------------------------------------------------------------


def test_emfile_says_limit_and_need():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    e = error_from_errno(errno.EMFILE, attr(**TASK_CLOCK), event="task-clock", fds_needed=4096)
    assert type(e) is E.TooManyOpenFilesError
    assert e.soft_limit == soft and e.hard_limit == hard and e.fds_needed == 4096
    assert f"soft {soft}" in str(e) and "this request needs 4096 fds" in str(e)
    assert "ulimit -n" in str(e) or "raise the hard limit" in str(e)
    assert e.open_fds is not None and e.open_fds > 0
    e = error_from_errno(errno.ENFILE, attr(**TASK_CLOCK), event="task-clock")
    assert "fs.file-max" in str(e)


def test_esrch():
    e = error_from_errno(errno.ESRCH, attr(**TASK_CLOCK), event="task-clock", pid=31337)
    assert type(e) is E.ProcessGoneError and isinstance(e, ProcessLookupError)
    assert "pid 31337: no such process" in str(e)


def test_ebusy_message_only():
    """Not provokable here: EBUSY comes from exclusive PMUs (intel_pt, arm_spe, cs_etm) this VM lacks."""
    e = error_from_errno(errno.EBUSY, attr(type=8, config=0), event="intel_pt//")
    assert type(e) is E.ResourceBusyError
    assert "'intel_pt//' is busy" in str(e) and "exclusive" in str(e) and "retry" in str(e)


def test_enospc_breakpoint():
    a = attr(type=abi.PERF_TYPE_BREAKPOINT, bp_type=abi.HW_BREAKPOINT_W, bp_addr=0x1000, bp_len=8)
    e = error_from_errno(errno.ENOSPC, a, event="mem:0x1000:w")
    assert type(e) is E.ResourceBusyError and "breakpoint slot" in str(e)


def test_e2big_and_eoverflow(procfs):
    e = error_from_errno(errno.E2BIG, attr(**TASK_CLOCK), event="task-clock")
    assert type(e) is E.InvalidAttrError and e.field == "size" and f"knows {abi.perf_event_attr().size} bytes" in str(e)
    a = attr(**TASK_CLOCK, sample_period=1, sample_type=abi.PERF_SAMPLE_CALLCHAIN, sample_max_stack=500)
    e = error_from_errno(errno.EOVERFLOW, a, event="task-clock", procfs=procfs(2, perf_event_max_stack=127))
    assert e.field == "sample_max_stack" and "sample_max_stack=500 exceeds kernel.perf_event_max_stack=127" in str(e)


def test_other_errno_is_still_a_pmuscope_error():
    e = error_from_errno(errno.EFAULT, attr(**TASK_CLOCK), event="task-clock")
    assert type(e) is E.PmuscopeError and "Bad address" in str(e) and e.errno == errno.EFAULT


def test_perf_event_open_converts_and_chains(monkeypatch):
    def fake(attr, pid, cpu, group_fd, flags):
        raise OSError(errno.ESRCH, os.strerror(errno.ESRCH))

    monkeypatch.setattr(syscall, "_open_hook", fake)
    with pytest.raises(E.ProcessGoneError) as info:
        syscall.PerfEventFd(attr(**TASK_CLOCK), pid=99999, event="task-clock")
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ESRCH
    assert info.value.pid == 99999


# -- pickling ------------------------------------------------------------------------------------


def _all_error_classes() -> list[type]:
    seen, todo = [], [E.PmuscopeError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in seen if c.__module__ == "pmuscope"]


def _instance(cls: type) -> E.PmuscopeError:
    if issubclass(cls, E.EventParseError):
        return cls("unexpected ','", "cycles,,instructions", 7, token=",")
    if issubclass(cls, E.MissingExtraError):
        return cls("pyarrow", "parquet", "Parquet export")
    return cls(f"{cls.__name__} happened", event="cycles", errno=5, pid=1, cpu=-1, extra=[1, 2])


def test_every_error_class_pickles():
    classes = _all_error_classes()
    names = {c.__name__ for c in classes}
    assert {"EventParseError", "UnknownEventError", "EventNotSupportedError", "NoHardwarePMUError", "PermissionDeniedError",
            "InvalidAttrError", "TooManyOpenFilesError", "ProcessGoneError", "ResourceBusyError", "FormatError",
            "RingBufferLost", "MissingExtraError"} <= names
    for cls in classes:
        e = _instance(cls)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls
        assert str(back) == str(e) and back.fields == e.fields and back.exit_code == e.exit_code
        for k, v in e.fields.items():
            assert getattr(back, k) == v


def test_errors_from_errno_pickle_with_fields(procfs, sysfs):
    pr, sy = procfs(2), sysfs(BASE_PMUS)
    for err in (errno.EACCES, errno.ENOENT, errno.EINVAL, errno.EMFILE, errno.ESRCH, errno.EBUSY, errno.ENOSPC, errno.E2BIG):
        e = error_from_errno(err, attr(**CYCLES), event="cycles", procfs=pr, sysfs=sy, probe=False)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and back.fields == e.fields
