"""Every typed error triggered for real on this kernel.

EACCES runs a snippet as an unprivileged user (setpriv, uid 65534), EMFILE
under a lowered RLIMIT_NOFILE in a subprocess, ESRCH against a reaped pid.
EBUSY needs an exclusive PMU already in use (intel_pt, arm_spe, cs_etm), which
this machine lacks: tests/unit/test_errors.py checks that message instead, as it
does NoHardwarePMUError (this VM exposes a vPMU).
"""

from __future__ import annotations

import ctypes
import errno
import json
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pmuscope.errors as E
from pmuscope.kernel import PerfEventFd, abi, perf_event_attr

from ..conftest import hardware_pmu_reason, nobody_python



def paranoid() -> int:
    return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())


def task_clock(**kw) -> perf_event_attr:
    return perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.TASK_CLOCK, **kw)


def open_error(attr: perf_event_attr, pid: int = 0, cpu: int = -1, event: str = "ev") -> E.PmuscopeError:
    try:
        PerfEventFd(attr, pid=pid, cpu=cpu, event=event).close()
    except E.PmuscopeError as err:
        return err
    pytest.fail(f"{event} opened, but the test expects the kernel to refuse it")


# -- EACCES / EPERM as an unprivileged user -------------------------------------------------------

SNIPPET = textwrap.dedent(
    """
    import json, sys
    from pmuscope.kernel import PerfEventFd, perf_event_attr
    from pmuscope.errors import PmuscopeError
    out = []
    for pid, cpu, exclude_kernel in json.loads(sys.argv[1]):
        attr = perf_event_attr(type=1, config=1, exclude_kernel=exclude_kernel)
        try:
            PerfEventFd(attr, pid=pid, cpu=cpu, event="task-clock").close()
            out.append(None)
        except PmuscopeError as e:
            out.append({"type": type(e).__name__, "message": str(e),
                        "fields": {k: v for k, v in e.fields.items() if isinstance(v, (int, str, type(None)))}})
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory):
    """Run SNIPPET as uid 65534 with a readable copy of the package
    (the checkout and the interpreter's site-packages may be private to root)."""
    python, env = nobody_python()

    def run(cases: list[tuple[int, int, int]]) -> list[dict | None]:
        proc = subprocess.run(python + ["-c", SNIPPET, json.dumps(cases)], env=env, cwd="/",
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    return run


def test_unprivileged_user_space_control(unprivileged):
    """User-space counting of one's own process works at every level below 3:
    the refusals below are about permission, not a broken setup."""
    if paranoid() >= 3:
        pytest.skip("perf_event_paranoid >= 3 forbids all unprivileged use")
    assert unprivileged([(0, -1, 1)]) == [None]


def test_eacces_cpu_wide(unprivileged):
    level = paranoid()
    if level <= 0:
        pytest.skip(f"perf_event_paranoid is {level}: CPU-wide events are allowed to everyone here")
    (err,) = unprivileged([(-1, 0, 1)])
    assert err["type"] == "PermissionDeniedError"
    assert err["fields"]["errno"] in (errno.EACCES, errno.EPERM)
    msg = err["message"]
    assert "CPU-wide monitoring (pid=-1, cpu=0)" in msg
    assert f"/proc/sys/kernel/perf_event_paranoid is {level}" in msg
    assert "this needs 0 or lower, or CAP_PERFMON" in msg
    assert "grant CAP_PERFMON" in msg and "sysctl -w kernel.perf_event_paranoid=0" in msg
    assert err["fields"]["paranoid"] == level and err["fields"]["needed"] == 0 and err["fields"]["cause"] == "paranoid"


def test_eacces_kernel_profiling(unprivileged):
    level = paranoid()
    if level <= 1:
        pytest.skip(f"perf_event_paranoid is {level}: kernel profiling of own processes is allowed here")
    (err,) = unprivileged([(0, -1, 0)])
    assert err["type"] == "PermissionDeniedError"
    msg = err["message"]
    assert f"/proc/sys/kernel/perf_event_paranoid is {level}" in msg
    assert "kernel-mode counting (exclude_kernel=0)" in msg
    assert "this needs 1 or lower" in msg and "task-clock:u" in msg
    assert err["fields"]["needed"] == 1


def test_eacces_other_users_process(unprivileged):
    if paranoid() >= 3:
        pytest.skip("perf_event_paranoid >= 3 forbids all unprivileged use")
    (err,) = unprivileged([(1, -1, 1)])  # pid 1 belongs to root
    assert err["type"] == "PermissionDeniedError"
    assert err["fields"]["cause"] == "ptrace"
    assert "pid 1 (owned by uid 0)" in err["message"] and "CAP_SYS_PTRACE" in err["message"]


# -- EMFILE under a lowered RLIMIT_NOFILE -------------------------------------------------------


def test_emfile_lowered_rlimit():
    code = textwrap.dedent(
        """
        import json, resource
        from pmuscope.kernel import PerfEventFd, perf_event_attr
        from pmuscope.errors import TooManyOpenFilesError
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while len(held) < 1000:
                held.append(PerfEventFd(perf_event_attr(type=1, config=1, exclude_kernel=1), event="task-clock"))
            print(json.dumps({"error": None}))
        except TooManyOpenFilesError as e:
            print(json.dumps({"error": str(e), "errno": e.errno, "soft": e.soft_limit, "opened": len(held),
                              "open_fds": e.open_fds}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["error"] is not None, "1000 events opened under RLIMIT_NOFILE=64"
    assert out["errno"] == errno.EMFILE and out["soft"] == 64
    assert 0 < out["opened"] < 64 and out["open_fds"] == 64
    assert "RLIMIT_NOFILE is exhausted (soft 64" in out["error"] and "'task-clock'" in out["error"]
    assert "ulimit -n" in out["error"] or "hard limit" in out["error"]


# -- ESRCH with a reaped pid ------------------------------------------------------------------------


def test_esrch_reaped_pid():
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: the pid no longer exists
    err = open_error(task_clock(exclude_kernel=1), pid=child.pid, event="task-clock")
    assert type(err) is E.ProcessGoneError and err.errno == errno.ESRCH
    assert f"pid {child.pid}: no such process" in str(err)


# -- ENOENT / EOPNOTSUPP ------------------------------------------------------------------------------


def test_enoent_no_such_pmu_type():
    err = open_error(perf_event_attr(type=9999, config=0), event="type 9999")
    assert type(err) is E.EventNotSupportedError and err.errno == errno.ENOENT
    assert "no PMU has type 9999" in str(err)


def test_enoent_no_such_software_event():
    err = open_error(perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=99), event="software config 99")
    assert type(err) is E.EventNotSupportedError and err.errno == errno.ENOENT
    assert "PMU software has no such event" in str(err)


def test_eopnotsupp_names_the_unsupported_field():
    err = open_error(task_clock(aux_output=1), event="task-clock")
    assert type(err) is E.EventNotSupportedError and err.errno == errno.EOPNOTSUPP
    assert err.field == "aux_output=1" and "does not support aux_output=1" in str(err)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="register 40 is an x86 extended (XMM) register")
def test_eopnotsupp_extended_registers_on_software_pmu():
    a = task_clock(sample_period=1000, sample_type=abi.PERF_SAMPLE_REGS_INTR, sample_regs_intr=1 << 40)
    err = open_error(a, event="task-clock")
    assert err.errno == errno.EOPNOTSUPP and err.field == "sample_regs_intr=0x10000000000"


def test_eopnotsupp_precise_ip_on_hardware():
    if hardware_pmu_reason() is not None:
        pytest.skip(f"needs a hardware PMU: {hardware_pmu_reason()}")
    try:
        PerfEventFd(perf_event_attr(type=0, config=0, precise_ip=3, exclude_kernel=1, sample_period=100000)).close()
        pytest.skip("this PMU supports precise_ip=3")
    except E.PmuscopeError as err:
        assert err.field == "precise_ip=3"
        assert "precise_ip" in str(err)


# -- EINVAL: the field is named -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, cpu, field",
    [
        (dict(sigtrap=1), -1, "sigtrap=1"),
        (dict(read_format=1 << 12), -1, "read_format=0x1000"),
        (dict(freq=1, sample_freq=10**8), -1, "sample_freq=100000000"),
        (dict(sample_period=1000, sample_type=abi.PERF_SAMPLE_IP | abi.PERF_SAMPLE_BRANCH_STACK,
              branch_sample_type=abi.PERF_SAMPLE_BRANCH_USER), -1, "branch_sample_type=0x1"),
        (dict(), 4096, "cpu=4096"),
        (dict(use_clockid=1, clockid=99), -1, "use_clockid=1"),  # found only by probing
    ],
)
def test_einval_names_the_rejected_field(kw, cpu, field):
    err = open_error(task_clock(exclude_kernel=1, **kw), pid=-1 if cpu >= 0 else 0, cpu=cpu, event="task-clock")
    assert type(err) is E.InvalidAttrError and err.errno == errno.EINVAL
    assert err.field == field
    assert f"the kernel rejected {field}" in str(err)


def test_einval_probing_finds_exclude_filter_on_msr_pmu():
    path = Path("/sys/bus/event_source/devices/msr/type")
    if not path.exists():
        pytest.skip("no msr PMU here")
    err = open_error(perf_event_attr(type=int(path.read_text()), config=0, exclude_kernel=1), event="msr/tsc/u")
    assert err.errno == errno.EINVAL and err.field == "exclude_kernel=1"
    assert "no exclude_* filtering" in str(err)


def test_einval_bad_tracepoint_id():
    err = open_error(perf_event_attr(type=abi.PERF_TYPE_TRACEPOINT, config=10**7), event="tracepoint id 10000000")
    assert err.errno == errno.EINVAL and err.field == "config=10000000"


# -- EOVERFLOW, E2BIG, ENOSPC ---------------------------------------------------------------------------


def test_eoverflow_sample_max_stack():
    limit = int(Path("/proc/sys/kernel/perf_event_max_stack").read_text())
    a = task_clock(exclude_kernel=1, sample_period=1000, sample_type=abi.PERF_SAMPLE_CALLCHAIN, sample_max_stack=limit + 1)
    err = open_error(a, event="task-clock")
    assert type(err) is E.InvalidAttrError and err.errno == errno.EOVERFLOW
    assert err.field == "sample_max_stack" and f"exceeds kernel.perf_event_max_stack={limit}" in str(err)


def test_e2big_attr_larger_than_the_kernel_knows():
    class Bigger(ctypes.Structure):
        _fields_ = [("attr", perf_event_attr), ("tail", ctypes.c_uint8 * 256)]

    big = Bigger()
    big.attr.type, big.attr.config, big.attr.exclude_kernel = 1, 1, 1
    big.attr.size = ctypes.sizeof(Bigger)
    big.tail[255] = 1  # a "field" this kernel does not have, non-zero
    err = open_error(big.attr, event="task-clock")
    assert type(err) is E.InvalidAttrError and err.errno == errno.E2BIG and err.field == "size"
    # the kernel wrote its own attr size back
    assert abi.PERF_ATTR_SIZE_VER0 <= err.kernel_attr_size < ctypes.sizeof(Bigger)


def test_enospc_out_of_breakpoint_slots():
    target = (ctypes.c_uint64 * 64)()
    held = []
    try:
        for i in range(64):
            a = perf_event_attr(type=abi.PERF_TYPE_BREAKPOINT, bp_type=abi.HW_BREAKPOINT_W,
                                bp_addr=ctypes.addressof(target) + 8 * i, bp_len=abi.HW_BREAKPOINT_LEN_8,
                                exclude_kernel=1, exclude_hv=1)
            try:
                held.append(PerfEventFd(a, event=f"mem:{ctypes.addressof(target) + 8 * i:#x}:w"))
            except E.PmuscopeError as err:
                assert type(err) is E.ResourceBusyError and err.errno == errno.ENOSPC
                assert "no free hardware breakpoint slot" in str(err)
                assert len(held) >= 1
                return
        pytest.skip("64 hardware breakpoints opened: no slot limit reached")
    finally:
        for ev in held:
            ev.close()


def test_unsupported_generic_hardware_event():
    """A generic hardware event this PMU lacks (on this AMD vPMU: bus-cycles) gets
    ENOENT/EOPNOTSUPP from the kernel: "not supported by this CPU's PMU" here, and
    NoHardwarePMUError when the same errno comes on a machine without a core PMU."""
    if hardware_pmu_reason() is not None:
        pytest.skip(f"needs a hardware PMU: {hardware_pmu_reason()}")
    names = {abi.PerfHwId.BUS_CYCLES: "bus-cycles", abi.PerfHwId.REF_CPU_CYCLES: "ref-cycles",
             abi.PerfHwId.STALLED_CYCLES_FRONTEND: "stalled-cycles-frontend",
             abi.PerfHwId.STALLED_CYCLES_BACKEND: "stalled-cycles-backend"}
    for config, name in names.items():
        try:
            PerfEventFd(perf_event_attr(type=abi.PERF_TYPE_HARDWARE, config=config, exclude_kernel=1), event=name).close()
        except E.EventNotSupportedError as err:
            assert type(err) is E.EventNotSupportedError and err.errno in (errno.ENOENT, errno.EOPNOTSUPP)
            assert f"'{name}' is not supported by this CPU's PMU" in str(err)
            from pmuscope.kernel.syscall import error_from_errno

            no_pmu = error_from_errno(err.errno, perf_event_attr(type=0, config=config), event=name, sysfs="/nonexistent")
            assert type(no_pmu) is E.NoHardwarePMUError and "exposes none" in str(no_pmu)
            return
    pytest.skip("every generic hardware event opens on this PMU")
