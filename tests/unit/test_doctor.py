"""pmuscope.doctor on fixture trees: every check, each status, each fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pmuscope.cli.main import main
from pmuscope.doctor import (
    CAP_IPC_LOCK,
    CAP_PERFMON,
    CAP_SYS_ADMIN,
    CAP_SYSLOG,
    STATUSES,
    Check,
    detect_container,
    detect_vm,
    diagnose,
    read_nofile_limit,
    summarize,
)

from .test_system import TOPO, unpacked


@pytest.fixture(scope="module")
def archives() -> dict[str, Path]:
    """The unpacked synthesized trees by name (read-only)."""
    return {n: unpacked(n) for n in ("amd-genoa-1s-nps2-2node", "intel-clx-2s-2node", "intel-spr-2s-cxl-4node", "arm-graviton3-neoverse-v1")}


@pytest.fixture
def kvm(tmp_path) -> Path:
    """A writable copy of this machine's capture."""
    root = tmp_path / "kvm"
    shutil.copytree(TOPO / "kvm-amd-zen5-1node", root)
    return root


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def set_status(root: Path, uid: int, capeff: int) -> None:
    (root / "proc/self/status").write_text(
        f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapInh:\t0000000000000000\nCapPrm:\t{capeff:016x}\n"
        f"CapEff:\t{capeff:016x}\n"
    )


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_every_check_has_a_valid_status_and_fix_when_not_ok(archives, kvm):
    roots = [kvm] + list(archives.values())
    for root in roots:
        checks = diagnose(str(root))
        assert len({c.name for c in checks}) == len(checks)
        for c in checks:
            assert c.status in STATUSES, c
            assert c.summary
            if c.status != "ok" and c.name not in ("container", "virtualization") or c.status == "missing":
                assert c.fix, f"{root.name}: {c.name} is {c.status} without a fix"
        # a captured tree is never probed
        assert "hardware_events" not in by_name(checks)
        json.dumps([c.to_dict() for c in checks])


def test_this_machine_capture(kvm):
    c = by_name(diagnose(str(kvm)))
    assert c["privileges"].status == "ok" and c["privileges"].data["euid"] == 0
    assert c["perf_event_paranoid"].data["level"] == 2 and c["perf_event_paranoid"].status == "ok"  # privileged
    assert c["container"].status == "warn" and c["container"].data["kind"] == "docker"
    assert c["virtualization"].status == "warn"
    assert "hypervisor bit" in c["virtualization"].detail and c["virtualization"].data["kind"] == "KVM"
    assert c["pmus"].status == "ok" and c["pmus"].data["core"] == ["cpu"]
    assert c["pmus"].data["pmus"]["software"] == 1 and c["pmus"].data["pmus"]["tracepoint"] == 2
    assert c["rdpmc"].data["rdpmc"] == {"cpu": 1}
    assert c["tracefs"].status == "ok" and c["tracefs"].data["mount"] == "/sys/kernel/tracing"
    # the vPMU here reports caps/max_precise 0
    assert c["precise_sampling"].status == "warn" and c["precise_sampling"].data["max_precise"] == {"cpu": 0}


def test_unprivileged_user_paranoid_levels(kvm):
    set_status(kvm, 1000, 0)
    expected = {-1: "ok", 0: "warn", 1: "warn", 2: "warn", 3: "missing", 4: "missing"}
    for level, status in expected.items():
        write(kvm, "proc/sys/kernel/perf_event_paranoid", f"{level}\n")
        c = by_name(diagnose(str(kvm)))
        assert c["privileges"].status == "warn" and "CAP_PERFMON" in c["privileges"].fix
        p = c["perf_event_paranoid"]
        assert p.status == status, level
        assert f"= {level}:" in p.summary
        allows = p.data["allows"]
        assert allows["cpu_wide"] is (level <= 0)
        assert allows["own_processes_kernel"] is (level <= 1)
        assert allows["own_processes_user"] is (level <= 2)
        assert allows["raw_tracepoints"] is (level <= -1)
        if status != "ok":
            assert "perf_event_paranoid" in p.fix


@pytest.mark.parametrize("cap", [CAP_PERFMON, CAP_SYS_ADMIN])
def test_capabilities_bypass_paranoid(kvm, cap):
    set_status(kvm, 1000, 1 << cap)
    write(kvm, "proc/sys/kernel/perf_event_paranoid", "3\n")
    c = by_name(diagnose(str(kvm)))
    assert c["privileges"].status == "ok" and c["privileges"].data["perfmon_capable"]
    assert c["perf_event_paranoid"].status == "ok"
    assert all(c["perf_event_paranoid"].data["allows"].values())


def test_root_without_capabilities_is_not_privileged(archives):
    c = by_name(diagnose(str(archives["intel-spr-2s-cxl-4node"])))
    assert c["privileges"].status == "warn" and "capabilities were dropped" in c["privileges"].summary
    assert c["perf_event_paranoid"].status == "warn"
    assert c["container"].status == "warn" and "seccomp" in c["container"].fix
    assert c["tracefs"].status == "missing" and "mount -t tracefs" in c["tracefs"].fix
    assert c["kptr_restrict"].status == "warn"  # kptr 0 but paranoid 2 and no CAP_SYSLOG
    assert c["rdpmc"].data["rdpmc"] == {"cpu": 2}


def test_bare_metal_intel(archives):
    c = by_name(diagnose(str(archives["intel-clx-2s-2node"])))
    assert c["virtualization"].status == "ok" and "PowerEdge" in c["virtualization"].detail
    assert c["container"].status == "ok"
    assert c["nmi_watchdog"].status == "warn" and c["nmi_watchdog"].fix == "sysctl -w kernel.nmi_watchdog=0 while measuring"
    # 1024 fds, 80 CPUs: (1024 - 64) // 80 = 12 events per CPU
    r = c["rlimit_nofile"]
    assert r.status == "warn" and r.data["events_per_cpu"] == 12 and r.data["cpus"] == 80
    assert r.fix == "ulimit -n 524288"
    # RAPL's "power" PMU is not a core PMU
    assert c["pmus"].data["core"] == ["cpu"]
    p = c["precise_sampling"]
    assert p.status == "ok" and "up to :ppp" in p.summary and "32-entry branch stack" in p.summary


def test_arm_cloud_vm(archives):
    c = by_name(diagnose(str(archives["arm-graviton3-neoverse-v1"])))
    assert c["virtualization"].status == "warn" and c["virtualization"].data["kind"].startswith("Amazon EC2")
    assert c["pmus"].data["core"] == ["armv8_pmuv3_0"]
    assert c["rdpmc"].status == "warn" and c["rdpmc"].fix == "sysctl -w kernel.perf_user_access=1"
    assert c["perf_event_paranoid"].data["level"] == 1


def test_no_core_pmu(kvm):
    shutil.rmtree(kvm / "sys/bus/event_source/devices/cpu")
    c = by_name(diagnose(str(kvm)))
    assert c["pmus"].status == "missing" and "virtual PMU" in c["pmus"].fix
    assert c["rdpmc"].status == "missing"


def test_no_perf_support_and_no_sysfs(tmp_path):
    c = by_name(diagnose(str(tmp_path)))
    assert c["perf_events"].status == "missing" and "CONFIG_PERF_EVENTS" in c["perf_events"].fix
    assert c["pmus"].status == "missing"
    assert c["tracefs"].status == "missing"


def test_limits_and_sysctls(kvm):
    write(kvm, "proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max open files            100                  200                  files     \n")
    write(kvm, "proc/sys/kernel/perf_event_max_sample_rate", "1250\n")
    write(kvm, "proc/sys/kernel/perf_event_mlock_kb", "128\n")
    write(kvm, "proc/sys/kernel/kptr_restrict", "2\n")
    write(kvm, "proc/sys/kernel/nmi_watchdog", "1\n")
    set_status(kvm, 1000, 0)
    c = by_name(diagnose(str(kvm)))
    assert read_nofile_limit(str(kvm)) == (100, 200)
    r = c["rlimit_nofile"]
    assert r.status == "warn" and r.data["events_per_cpu"] == 18 and r.data["events_per_cpu_hard"] == 68
    assert r.fix == "ulimit -n 200"  # the hard limit leaves 68 per CPU: enough
    assert c["perf_event_max_sample_rate"].status == "warn" and "100000" in c["perf_event_max_sample_rate"].fix
    write(kvm, "proc/sys/kernel/perf_event_max_sample_rate", "13000\n")
    rate = by_name(diagnose(str(kvm)))["perf_event_max_sample_rate"]
    assert rate.status == "ok" and "lowered from the kernel's default 100000" in rate.summary
    m = c["perf_event_mlock_kb"]
    assert m.status == "warn" and m.data["max_data_pages"] == 16  # 128 KiB = 32 pages - 1 → 16 (power of 2)
    assert c["kptr_restrict"].status == "warn" and "even from root" in c["kptr_restrict"].fix
    assert c["nmi_watchdog"].status == "warn"
    # CAP_IPC_LOCK lifts the mlock budget; CAP_SYSLOG shows kernel symbols at kptr_restrict 1
    set_status(kvm, 1000, 1 << CAP_IPC_LOCK | 1 << CAP_SYSLOG)
    write(kvm, "proc/sys/kernel/kptr_restrict", "1\n")
    c = by_name(diagnose(str(kvm)))
    assert c["perf_event_mlock_kb"].status == "ok"
    assert c["kptr_restrict"].status == "ok" and c["kptr_restrict"].data["symbols_visible"]


def test_nofile_hard_limit_too_low(kvm):
    write(kvm, "proc/self/limits", "Max open files            100                  100                  files     \n")
    r = by_name(diagnose(str(kvm)))["rlimit_nofile"]
    assert r.status == "warn" and "raise the hard limit" in r.fix


def test_unlimited_nofile(kvm):
    write(kvm, "proc/self/limits", "Max open files            unlimited            unlimited            files     \n")
    c = by_name(diagnose(str(kvm)))
    assert c["rlimit_nofile"].status == "ok" and "any number of events" in c["rlimit_nofile"].summary


def test_kptr_restrict_zero_depends_on_paranoid(kvm):
    set_status(kvm, 1000, 0)
    write(kvm, "proc/sys/kernel/kptr_restrict", "0\n")
    write(kvm, "proc/sys/kernel/perf_event_paranoid", "1\n")
    assert by_name(diagnose(str(kvm)))["kptr_restrict"].status == "ok"
    write(kvm, "proc/sys/kernel/perf_event_paranoid", "2\n")
    assert by_name(diagnose(str(kvm)))["kptr_restrict"].status == "warn"


@pytest.mark.parametrize(
    "cgroup, kind",
    [
        ("12:pids:/docker/3f2a9c\n", "docker"),
        ("0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-ab.scope\n", "kubernetes"),
        ("0::/machine.slice/libpod-99.scope\n", "podman"),
    ],
)
def test_container_from_cgroup(tmp_path, cgroup, kind):
    write(tmp_path, "proc/1/cgroup", cgroup)
    assert detect_container(str(tmp_path))[0] == kind


def test_container_from_pid_namespace_and_markers(tmp_path):
    write(tmp_path, "proc/1/sched", "bash (48123, #threads: 1)\n---\n")
    kind, evidence = detect_container(str(tmp_path))
    assert kind == "container" and "48123" in evidence[0]
    write(tmp_path, "run/.containerenv", "")
    assert detect_container(str(tmp_path))[0] == "podman"
    write(tmp_path / "host", "proc/1/sched", "systemd (1, #threads: 1)\n---\n")
    write(tmp_path / "host", "proc/1/cgroup", "0::/init.scope\n")
    assert detect_container(str(tmp_path / "host")) == (None, [])


@pytest.mark.parametrize(
    "vendor, product, kind",
    [
        ("QEMU", "Standard PC (Q35 + ICH9, 2009)", "QEMU/KVM"),
        ("VMware, Inc.", "VMware Virtual Platform", "VMware"),
        ("Microsoft Corporation", "Virtual Machine", "Hyper-V"),
        ("Amazon EC2", "m7i.large", "Amazon EC2 (Nitro)"),
        ("Amazon EC2", "m7i.metal-24xl", "Amazon EC2 (Nitro)"),
        ("Amazon EC2", "c7g.metal", None),
        ("Dell Inc.", "PowerEdge R750", None),
    ],
)
def test_vm_from_dmi(tmp_path, vendor, product, kind):
    write(tmp_path, "sys/class/dmi/id/sys_vendor", vendor + "\n")
    write(tmp_path, "sys/class/dmi/id/product_name", product + "\n")
    assert detect_vm(str(tmp_path))[0] == kind


def test_vm_from_clocksource(tmp_path):
    write(tmp_path, "sys/devices/system/clocksource/clocksource0/available_clocksource", "kvm-clock tsc acpi_pm \n")
    kind, evidence = detect_vm(str(tmp_path))
    assert kind == "KVM" and evidence == ["clock source kvm-clock available"]


def test_injected_probe(kvm):
    calls = []

    def fake(type_, config):
        calls.append((type_, config))
        return None if type_ == 1 else "'cycles' needs a hardware PMU, and this machine exposes none"

    c = by_name(diagnose(str(kvm), probe=fake))
    assert calls == [(1, 1), (0, 0)]
    assert c["software_events"].status == "ok"
    assert c["hardware_events"].status == "missing" and "exposes none" in c["hardware_events"].detail
    blocked = by_name(diagnose(str(kvm), probe=lambda t, c: "no permission"))
    assert blocked["software_events"].status == "missing" and "seccomp" in blocked["software_events"].fix


def test_summarize():
    checks = [Check("a", "ok", "x"), Check("b", "warn", "y", fix="z"), Check("c", "ok", "w")]
    assert summarize(checks) == {"ok": 2, "warn": 1, "missing": 0}


def test_doctor_command(archives, capsys):
    root = str(archives["intel-clx-2s-2node"])
    assert main(["doctor", "--root", root]) == 0
    out = capsys.readouterr().out
    assert "WARN    nmi_watchdog" in out and "fix: sysctl -w kernel.nmi_watchdog=0" in out
    assert "ok      pmus" in out
    assert out.rstrip().splitlines()[-1].endswith("missing")
    assert main(["doctor", "--json", "--root", root]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["name"] for d in data} >= {"perf_event_paranoid", "privileges", "container", "virtualization", "pmus",
                                         "rdpmc", "nmi_watchdog", "rlimit_nofile", "perf_event_mlock_kb",
                                         "perf_event_max_sample_rate", "kptr_restrict", "tracefs"}
    assert all(set(d) == {"name", "status", "summary", "detail", "fix", "data"} for d in data)


def test_read_path_advice_names_the_real_cause(monkeypatch):
    """Without a hardware PMU the advice is not 'rebuild' (the helper may be built):
    there is no counter to read; with the helper missing it says to rebuild; with
    both there it says how to allow rdpmc."""
    from pmuscope import doctor
    from pmuscope.observe import mmap_page

    cases = [
        ({"cycles_path": "read", "native_helper": True,
          "reason": "'cycles:u' needs a hardware PMU, and this machine exposes none"}, "nothing to rebuild"),
        ({"cycles_path": "read", "native_helper": False, "reason": "rdpmc disabled"}, "rebuild with a C compiler"),
        ({"cycles_path": "read", "native_helper": True, "reason": "cap_user_rdpmc is 0"}, "allow user-space counter reads"),
        ({"cycles_path": "rdpmc", "native_helper": True, "reason": ""}, None),
    ]
    for info, fix in cases:
        monkeypatch.setattr(mmap_page, "explain", lambda info=info: dict(info))
        c = doctor._read_path_check()
        assert (c.fix is None) if fix is None else (fix in c.fix), (info, c.fix)
