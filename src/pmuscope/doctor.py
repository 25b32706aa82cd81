"""What this machine allows perf_event_open to do, and why.

:func:`diagnose` returns one :class:`Check` per question a perf engineer asks
first (paranoid level, capabilities, container/VM, PMUs, whether hardware
events open, rdpmc, NMI watchdog, fd limits, mlock budget, sample-rate cap,
kernel symbol visibility, tracefs), each with a status and, when something is
missing, the fix. Everything is read under ``root``; the two live probes
(opening ``task-clock`` and ``cycles``) run only against the real machine.

Facts are from the kernel's Documentation/admin-guide/perf-security.rst and
Documentation/admin-guide/sysctl/kernel.rst.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from .system import _fs
from .system.identity import read_cpu_identity
from .system.topology import CORE_PMU_NAMES, CORE_PMU_PREFIXES, read_cpu_lists

OK, WARN, MISSING = "ok", "warn", "missing"
STATUSES = (OK, WARN, MISSING)

# capability bit numbers (include/uapi/linux/capability.h)
CAP_IPC_LOCK = 14
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21
CAP_SYSLOG = 34
CAP_PERFMON = 38
CAPABILITY_NAMES = {
    CAP_IPC_LOCK: "CAP_IPC_LOCK",
    CAP_SYS_PTRACE: "CAP_SYS_PTRACE",
    CAP_SYS_ADMIN: "CAP_SYS_ADMIN",
    CAP_SYSLOG: "CAP_SYSLOG",
    CAP_PERFMON: "CAP_PERFMON",
}

PARANOID_MEANING = {
    -1: "no restrictions: every user may use every event, including raw tracepoints and CPU-wide monitoring",
    0: "unprivileged users may monitor CPU-wide and the kernel, but not read raw tracepoint data",
    1: "unprivileged users may profile their own processes, user and kernel space; no CPU-wide monitoring",
    2: "unprivileged users may profile only the user space of their own processes",
    3: "unprivileged users may not use perf_event_open at all (distribution patch)",
    4: "unprivileged users may not use perf_event_open at all (distribution patch)",
}


#: the number of fds an ordinary `perf stat -a` session opens per CPU is
#: about 10 (the default event set); below this many per CPU we warn
MIN_EVENTS_PER_CPU = 32


@dataclass
class Check:
    """One diagnosis: ``status`` is ``"ok"``, ``"warn"`` or ``"missing"``;
    ``fix`` says what to do when it is not ok."""

    name: str
    status: str
    summary: str
    detail: str = ""
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- readers -------------------------------------------------------------------


def read_status(root: str = "/") -> dict[str, str]:
    """``<root>/proc/self/status`` as a dict."""
    out = {}
    for line in (_fs.read_text(root, "proc/self/status") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def effective_uid(root: str = "/") -> int | None:
    uid = read_status(root).get("Uid", "").split()
    return int(uid[1]) if len(uid) > 1 else None


def effective_caps(root: str = "/") -> int:
    try:
        return int(read_status(root).get("CapEff", "0"), 16)
    except ValueError:
        return 0


def cap_names(caps: int) -> list[str]:
    return [name for bit, name in sorted(CAPABILITY_NAMES.items()) if caps >> bit & 1]


def perfmon_capable(caps: int) -> bool:
    """The kernel's perfmon_capable(): CAP_PERFMON or CAP_SYS_ADMIN."""
    return bool(caps >> CAP_PERFMON & 1 or caps >> CAP_SYS_ADMIN & 1)


def read_nofile_limit(root: str = "/") -> tuple[int | None, int | None]:
    """(soft, hard) ``Max open files`` from ``<root>/proc/self/limits``
    (None for unlimited or unreadable)."""
    for line in (_fs.read_text(root, "proc/self/limits") or "").splitlines():
        if line.startswith("Max open files"):
            parts = line[len("Max open files"):].split()
            conv = lambda v: None if v == "unlimited" else int(v)  # noqa: E731
            try:
                return conv(parts[0]), conv(parts[1])
            except (IndexError, ValueError):
                break
    return None, None


def list_pmus(root: str = "/") -> dict[str, int | None]:
    """PMU name → ``type`` (the perf_event_attr.type to use) from
    ``<root>/sys/bus/event_source/devices``."""
    base = "sys/bus/event_source/devices"
    return {name: _fs.read_int(root, f"{base}/{name}/type") for name in _fs.listdir(root, base)}


def core_pmus(pmus: dict[str, int | None]) -> list[str]:
    return [n for n in pmus if n in CORE_PMU_NAMES or n.startswith(CORE_PMU_PREFIXES)]


def detect_container(root: str = "/") -> tuple[str | None, list[str]]:
    """(kind or None, evidence) from /.dockerenv, /run/.containerenv,
    /run/systemd/container, /proc/1/cgroup and /proc/1/sched."""
    evidence = []
    kind = None
    if os.path.exists(_fs.path(root, ".dockerenv")):
        kind, _ = "docker", evidence.append("/.dockerenv exists")
    if os.path.exists(_fs.path(root, "run/.containerenv")):
        kind = kind or "podman"
        evidence.append("/run/.containerenv exists")
    nspawn = _fs.read_text(root, "run/systemd/container")
    if nspawn:
        kind = kind or nspawn
        evidence.append(f"/run/systemd/container says {nspawn}")
    cgroup = _fs.read_text(root, "proc/1/cgroup") or ""
    m = re.search(r"(docker|kubepods|containerd|lxc|libpod|crio)", cgroup)
    if m:
        kind = kind or {"kubepods": "kubernetes", "libpod": "podman", "crio": "cri-o"}.get(m.group(1), m.group(1))
        evidence.append(f"/proc/1/cgroup mentions {m.group(1)}")
    sched = (_fs.read_text(root, "proc/1/sched") or "").splitlines()
    if sched:
        m2 = re.match(r"(.*) \((\d+), #threads", sched[0])
        if m2 and m2.group(1) not in ("systemd", "init") and m2.group(2) != "1":
            kind = kind or "container"
            evidence.append(f"pid 1 is {m2.group(1)!r}, pid {m2.group(2)} outside its namespace")
        elif m2 and m2.group(1) not in ("systemd", "init", "launchd", "runit", "openrc-init", "tini", "s6-svscan"):
            evidence.append(f"pid 1 is {m2.group(1)!r}, not an init system")
    return kind, evidence


def detect_vm(root: str = "/") -> tuple[str | None, list[str]]:
    """(hypervisor or "VM" or None, evidence) from the CPUID hypervisor bit,
    DMI ``sys_vendor``/``product_name`` and ``/sys/hypervisor/type``."""
    evidence = []
    ident = read_cpu_identity(root)
    kind = None
    if ident.hypervisor:
        kind = "hypervisor unknown"
        evidence.append("CPUID hypervisor bit set (flag 'hypervisor' in /proc/cpuinfo)")
    vendor = _fs.read_text(root, "sys/class/dmi/id/sys_vendor") or ""
    product = _fs.read_text(root, "sys/class/dmi/id/product_name") or ""
    known = {
        "QEMU": "QEMU/KVM", "KVM": "KVM", "VMware": "VMware", "innotek": "VirtualBox", "Xen": "Xen",
        "Microsoft Corporation": "Hyper-V", "Amazon EC2": "Amazon EC2 (Nitro)", "Google": "Google Compute Engine",
    }
    for key, name in known.items():
        if key in vendor or key in product:
            if name.startswith("Microsoft") and "Virtual" not in product:
                continue
            if key == "Amazon EC2" and product.endswith(".metal"):
                evidence.append(f"DMI: {vendor} / {product} (bare-metal instance)")
                break
            kind = name
            evidence.append(f"DMI: {vendor} / {product}")
            break
    else:
        if vendor or product:
            evidence.append(f"DMI: {vendor} / {product}")
    clocks = (_fs.read_text(root, "sys/devices/system/clocksource/clocksource0/available_clocksource") or "").split()
    for clock, name in (("kvm-clock", "KVM"), ("hyperv_clocksource_tsc_page", "Hyper-V"), ("xen", "Xen"), ("vmware-tsc", "VMware")):
        if clock in clocks:
            if kind in (None, "hypervisor unknown"):
                kind = name
            evidence.append(f"clock source {clock} available")
            break
    hv = _fs.read_text(root, "sys/hypervisor/type")
    if hv:
        kind = kind or hv
        evidence.append(f"/sys/hypervisor/type is {hv}")
    return kind, evidence


def _tracefs(root: str) -> tuple[str | None, bool | None]:
    mounts = _fs.read_text(root, "proc/mounts") or ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "tracefs":
            where = _fs.path(root, parts[1])
            if not os.path.isdir(where) and os.path.realpath(root) != "/":
                return parts[1], None  # a captured tree without the tracefs contents
            return parts[1], os.access(where, os.R_OK | os.X_OK)
    for cand in ("sys/kernel/tracing", "sys/kernel/debug/tracing"):
        if os.path.isdir(_fs.path(root, cand + "/events")):
            return "/" + cand, os.access(_fs.path(root, cand + "/events"), os.R_OK | os.X_OK)
    return None, False


# -- probes --------------------------------------------------------------------

#: a probe takes a PERF_TYPE_* and config and returns None when the event
#: opens (counting this process, user space only), else the reason
Probe = Callable[[int, int], "str | None"]


def kernel_probe(type_: int, config: int) -> str | None:
    """Open and close one user-space-only counting event on this process."""
    from .errors import PmuscopeError
    from .kernel import PerfEventFd, perf_event_attr

    try:
        PerfEventFd(perf_event_attr(type=type_, config=config, exclude_kernel=1, exclude_hv=1), pid=0, cpu=-1).close()
        return None
    except PmuscopeError as err:
        return str(err).splitlines()[0]


def _read_path_check() -> Check:
    """Which counter-read path self-monitoring (observe, regions) uses here."""
    try:
        from .observe.mmap_page import explain
    except ImportError as err:  # a stripped install (no numpy): say so, don't fail the diagnosis
        return Check("read_path", WARN, f"self-monitoring read paths not checked: {err}")
    info = explain()
    path = info.get("cycles_path", "read")
    native = "built" if info.get("native_helper") else "not built (no C compiler at install time)"
    text = f"self-monitoring counter reads use the {path} path; native helper {native}"
    if info.get("calibration_ns"):
        text += f"; measured ns/read {info['calibration_ns']}"
    status = OK if path == "rdpmc" or info.get("calibration_ns") else WARN
    reason = str(info.get("reason", ""))
    if status == OK:
        fix = None
    elif "needs a hardware PMU" in reason or "no hardware PMU" in reason:
        # the real cause: no counter to read from user space, whatever is built
        text += "; no hardware PMU here, so hardware counters cannot be read from user space at all"
        fix = "nothing to rebuild: software events are read with read(); on a machine with a (virtual) PMU rdpmc works"
    elif not info.get("native_helper"):
        fix = "rebuild with a C compiler (pip install --force-reinstall pmuscope) for the native read loop"
    else:
        fix = "allow user-space counter reads: sysctl kernel.perf_user_access=1 (arm64) or /sys/bus/event_source/devices/cpu/rdpmc=1 (x86)"
    return Check("read_path", status, text, reason, fix, info)


# -- the checks ----------------------------------------------------------------


def diagnose(root: str = "/", *, probe: Probe | bool | None = None) -> list[Check]:
    """Every check, in a fixed order. ``probe`` opens real events: by default
    only when ``root`` is ``"/"``; pass False to never open, or a callable
    (see :data:`Probe`) to stand in for the kernel."""
    if probe is None:
        probe = os.path.realpath(root) == "/"
    if probe is True:
        probe = kernel_probe
    checks: list[Check] = []
    osrelease = _fs.read_text(root, "proc/sys/kernel/osrelease")
    paranoid = _fs.read_int(root, "proc/sys/kernel/perf_event_paranoid")
    uid = effective_uid(root)
    caps = effective_caps(root)
    privileged = perfmon_capable(caps)
    cpus = read_cpu_lists(root).online
    ncpu = len(cpus) or 1
    pmus = list_pmus(root)
    core = core_pmus(pmus)

    # kernel support
    if paranoid is None:
        checks.append(Check("perf_events", MISSING, "kernel.perf_event_paranoid is absent: no perf_event support",
                            "The kernel was built without CONFIG_PERF_EVENTS, or /proc is not mounted.",
                            "Use a kernel with CONFIG_PERF_EVENTS=y (every distribution kernel has it)."))
    else:
        checks.append(Check("perf_events", OK, f"kernel {osrelease or '?'} supports perf_event_open", data={"osrelease": osrelease}))

    # privileges
    names = cap_names(caps)
    who = "root" if uid == 0 else f"uid {uid}"
    if privileged:
        st, summ = OK, f"{who} with {'CAP_PERFMON' if caps >> CAP_PERFMON & 1 else 'CAP_SYS_ADMIN'}: perf_event_paranoid does not apply"
        fix = None
    else:
        st = WARN
        summ = f"{who} without CAP_PERFMON or CAP_SYS_ADMIN: perf_event_paranoid limits what opens"
        if uid == 0:
            summ += " (root whose capabilities were dropped, as in a container)"
        fix = ("grant CAP_PERFMON (Linux >= 5.8): `setcap cap_perfmon,cap_ipc_lock,cap_syslog+ep $(which python3)`, "
               "or run as root, or lower kernel.perf_event_paranoid")
    checks.append(Check("privileges", st, summ, f"effective uid {uid}; CapEff {caps:#018x} ({', '.join(names) or 'none of the perf-related capabilities'})",
                        fix, {"euid": uid, "cap_eff": f"{caps:#x}", "capabilities": names, "perfmon_capable": privileged}))

    # paranoid level
    if paranoid is not None:
        meaning = PARANOID_MEANING.get(min(max(paranoid, -1), 4), "unknown level")
        data = {"level": paranoid, "path": "/proc/sys/kernel/perf_event_paranoid"}
        allows = {
            "own_processes_user": privileged or paranoid <= 2,
            "own_processes_kernel": privileged or paranoid <= 1,
            "cpu_wide": privileged or paranoid <= 0,
            "raw_tracepoints": privileged or paranoid <= -1,
        }
        data["allows"] = allows
        if privileged or paranoid <= -1:
            st, fix = OK, None
        elif paranoid >= 3:
            st, fix = MISSING, "sysctl -w kernel.perf_event_paranoid=2 (or 1/0/-1 for more), or grant CAP_PERFMON"
        else:
            st = WARN
            steps = [(1, "kernel profiling of your processes"), (0, "CPU-wide monitoring"), (-1, "raw tracepoint samples")]
            lower = "; ".join(f"={lvl} for {what}" for lvl, what in steps if lvl < paranoid)
            fix = (f"sysctl -w kernel.perf_event_paranoid=N ({lower}), or grant CAP_PERFMON; "
                   "persist it in /etc/sysctl.d/")
        can = [k.replace("_", " ") for k, v in allows.items() if v]
        cannot = [k.replace("_", " ") for k, v in allows.items() if not v]
        summary = f"kernel.perf_event_paranoid = {paranoid}: {meaning}"
        detail = ("this process may: " + (", ".join(can) or "nothing") + ("; may not: " + ", ".join(cannot) if cannot else "")
                  + (" (privileged: the level does not apply)" if privileged else ""))
        checks.append(Check("perf_event_paranoid", st, summary, detail, fix, data))

    # container
    kind, evidence = detect_container(root)
    if kind:
        checks.append(Check("container", WARN, f"running in a container ({kind})",
                            "; ".join(evidence) + ". The container runtime's seccomp profile and capability set decide whether "
                            "perf_event_open is allowed; kernel.perf_event_paranoid is the host's and cannot be changed from inside.",
                            "run the container with --cap-add PERFMON (or SYS_ADMIN before Linux 5.8) and a seccomp profile "
                            "allowing perf_event_open (e.g. --security-opt seccomp=unconfined), or set paranoid on the host",
                            {"kind": kind, "evidence": evidence}))
    else:
        checks.append(Check("container", OK, "not in a container", "; ".join(evidence), data={"kind": None, "evidence": evidence}))

    # virtualization
    vm, vm_evidence = detect_vm(root)
    if vm:
        checks.append(Check("virtualization", WARN, f"virtual machine ({vm})",
                            "; ".join(vm_evidence) + ". Hardware events exist only if the hypervisor exposes a virtual PMU, "
                            "usually with fewer counters and no uncore, PEBS/IBS, LBR or SPE.",
                            "on KVM start the guest with a vPMU (-cpu host,pmu=on / libvirt <pmu state='on'/>); on VMware enable "
                            "'Virtualize CPU performance counters'; on clouds use a bare-metal or full-socket instance",
                            {"kind": vm, "evidence": vm_evidence}))
    else:
        checks.append(Check("virtualization", OK, "bare metal (no hypervisor detected)", "; ".join(vm_evidence),
                            data={"kind": None, "evidence": vm_evidence}))

    # PMUs
    listing = ", ".join(f"{n} ({t})" for n, t in sorted(pmus.items(), key=lambda kv: (kv[1] is None, kv[1] or 0, kv[0])))
    if not pmus:
        checks.append(Check("pmus", MISSING, "no PMUs in /sys/bus/event_source/devices", "sysfs is not mounted or perf is disabled.",
                            "mount sysfs (mount -t sysfs sysfs /sys)", {"pmus": {}}))
    elif core:
        checks.append(Check("pmus", OK, f"{len(pmus)} PMUs; core PMU: {', '.join(core)}", listing, data={"pmus": pmus, "core": core}))
    else:
        checks.append(Check("pmus", MISSING, f"{len(pmus)} PMUs but no hardware (core) PMU: only software events, tracepoints, breakpoints",
                            listing, "hardware counters need a core PMU: on a VM enable the virtual PMU (see virtualization); "
                            "on bare metal check dmesg for 'Performance Events' and that the CPU is supported by this kernel",
                            {"pmus": pmus, "core": []}))

    # precise sampling (caps/max_precise: 0 none, 1-3 PEBS/IBS levels)
    caps_of = {n: {c: _fs.read_text(root, f"sys/bus/event_source/devices/{n}/caps/{c}")
                   for c in _fs.listdir(root, f"sys/bus/event_source/devices/{n}/caps")} for n in core}
    precise = {n: int(caps["max_precise"]) for n, caps in caps_of.items() if (caps.get("max_precise") or "").isdigit()}
    if precise:
        best = max(precise.values())
        text = ", ".join(f"{n}: max_precise {v}" for n, v in precise.items())
        branches = {n: caps.get("branches") for n, caps in caps_of.items() if caps.get("branches")}
        extra = "; " + ", ".join(f"{n}: {b}-entry branch stack (LBR)" for n, b in branches.items()) if branches else ""
        if best:
            checks.append(Check("precise_sampling", OK, f"precise sampling up to :{'p' * best} ({text}){extra}",
                                data={"max_precise": precise, "caps": caps_of}))
        else:
            checks.append(Check("precise_sampling", WARN, f"no precise sampling ({text}): cycles:p and memory-access "
                                "sampling (PEBS/IBS load latency) will not open, samples skid",
                                "Virtual PMUs rarely pass PEBS/IBS through.",
                                "use a bare-metal machine (or a hypervisor with PEBS passthrough) for :p/:pp events",
                                {"max_precise": precise, "caps": caps_of}))

    # live probes
    if callable(probe):
        sw = probe(1, 1)  # PERF_TYPE_SOFTWARE / PERF_COUNT_SW_TASK_CLOCK
        if sw is None:
            checks.append(Check("software_events", OK, "software events open (task-clock on this process)"))
        else:
            checks.append(Check("software_events", MISSING, "perf_event_open fails even for task-clock", sw,
                                "perf_event_open is blocked outright: a seccomp filter (container) or perf_event_paranoid >= 3; "
                                "see the container and perf_event_paranoid checks"))
        hw = probe(0, 0)  # PERF_TYPE_HARDWARE / PERF_COUNT_HW_CPU_CYCLES
        if hw is None:
            checks.append(Check("hardware_events", OK, "hardware events open (cycles, user space, on this process)"))
        else:
            checks.append(Check("hardware_events", MISSING, "hardware events do not open: cycles fails", hw,
                                "see the pmus and virtualization checks; `pmuscope list --probe` shows what works"))

    # rdpmc
    rd = {n: _fs.read_int(root, f"sys/bus/event_source/devices/{n}/rdpmc") for n in core}
    rd = {n: v for n, v in rd.items() if v is not None}
    user_access = _fs.read_int(root, "proc/sys/kernel/perf_user_access")
    rd_meaning = {0: "disabled for user space", 1: "allowed while the task has the event mmapped (default)", 2: "allowed for every task, always"}
    if rd:
        worst = min(rd.values())
        text = "; ".join(f"{n}: {v} ({rd_meaning.get(v, 'unknown')})" for n, v in rd.items())
        checks.append(Check("rdpmc", OK if worst >= 1 else WARN, f"user-space counter reads (rdpmc): {text}",
                            "pmuscope's self-monitoring reads counters with rdpmc through the mmapped perf_event_mmap_page.",
                            None if worst >= 1 else "echo 1 > /sys/bus/event_source/devices/cpu/rdpmc", {"rdpmc": rd}))
    elif user_access is not None:
        checks.append(Check("rdpmc", OK if user_access else WARN, f"kernel.perf_user_access = {user_access} (arm64 user-space counter access)",
                            "", None if user_access else "sysctl -w kernel.perf_user_access=1", {"perf_user_access": user_access}))
    elif core:
        checks.append(Check("rdpmc", WARN, "no rdpmc control for the core PMU: user-space counter reads unavailable; reads go through read(2)",
                            data={"rdpmc": {}}))
    else:
        checks.append(Check("rdpmc", MISSING, "no core PMU, so no user-space counter reads (rdpmc)", data={"rdpmc": {}}))
    if probe is kernel_probe:
        checks.append(_read_path_check())

    # NMI watchdog
    nmi = _fs.read_int(root, "proc/sys/kernel/nmi_watchdog")
    if nmi:
        checks.append(Check("nmi_watchdog", WARN, "kernel.nmi_watchdog = 1: the hard-lockup detector holds one hardware counter on every CPU",
                            "perf's group of N events then needs N+1 counters and multiplexes sooner (perf stat prints the same hint).",
                            "sysctl -w kernel.nmi_watchdog=0 while measuring", {"nmi_watchdog": nmi}))
    else:
        checks.append(Check("nmi_watchdog", OK, "NMI watchdog off: no hardware counter reserved" if nmi == 0 else "no NMI watchdog here",
                            data={"nmi_watchdog": nmi}))

    # fds
    soft, hard = read_nofile_limit(root)
    if soft is None and hard is None and _fs.read_text(root, "proc/self/limits") is None:
        checks.append(Check("rlimit_nofile", WARN, "RLIMIT_NOFILE unknown (/proc/self/limits unreadable)"))
    else:
        reserve = 64  # stdio, Python's own files, the perf.data file
        per_cpu = None if soft is None else max(0, (soft - reserve) // ncpu)
        per_cpu_hard = None if hard is None else max(0, (hard - reserve) // ncpu)
        fmt = lambda v: "unlimited" if v is None else str(v)  # noqa: E731
        summary = (f"RLIMIT_NOFILE {fmt(soft)} (hard {fmt(hard)}) with {ncpu} CPUs: "
                   f"{'any number of' if per_cpu is None else per_cpu} events per CPU fit in a CPU-wide session")
        detail = ("A CPU-wide session opens one fd per event per CPU (CPUs × events); per-thread monitoring opens one per "
                  "event per thread.")
        if per_cpu is not None and per_cpu < MIN_EVENTS_PER_CPU:
            fix = (f"ulimit -n {hard}" if hard is None or (hard - reserve) // ncpu >= MIN_EVENTS_PER_CPU
                   else "raise the hard limit (LimitNOFILE= in systemd, nofile in /etc/security/limits.conf)")
            checks.append(Check("rlimit_nofile", WARN, summary, detail, fix,
                                {"soft": soft, "hard": hard, "cpus": ncpu, "events_per_cpu": per_cpu, "events_per_cpu_hard": per_cpu_hard}))
        else:
            checks.append(Check("rlimit_nofile", OK, summary, detail, None,
                                {"soft": soft, "hard": hard, "cpus": ncpu, "events_per_cpu": per_cpu, "events_per_cpu_hard": per_cpu_hard}))

    # mlock budget for ring buffers
    mlock = _fs.read_int(root, "proc/sys/kernel/perf_event_mlock_kb")
    if mlock is not None:
        # kernel/events/core.c perf_mmap(): beyond the budget, EPERM unless
        # CAP_IPC_LOCK or perf_event_paranoid == -1 (CAP_PERFMON does not help)
        unlimited = bool(caps >> CAP_IPC_LOCK & 1) or paranoid == -1
        data_pages = max(0, mlock * 1024 // 4096 - 1)
        pow2 = 1 << (data_pages.bit_length() - 1) if data_pages else 0
        summary = (f"kernel.perf_event_mlock_kb = {mlock}: ring buffers of up to {pow2} data pages ({pow2 * 4} KiB) per CPU "
                   f"without CAP_IPC_LOCK" + ("; not limited here (CAP_IPC_LOCK or paranoid -1)" if unlimited else ""))
        low = mlock < 516 and not unlimited
        checks.append(Check("perf_event_mlock_kb", WARN if low else OK, summary,
                            "Each CPU's sampling ring buffer (perf record -m) is locked memory; beyond this budget per CPU "
                            "the user's RLIMIT_MEMLOCK is charged.",
                            "sysctl -w kernel.perf_event_mlock_kb=2048 (or grant CAP_IPC_LOCK)" if low else None,
                            {"mlock_kb": mlock, "max_data_pages": pow2}))

    # sample rate cap
    rate = _fs.read_int(root, "proc/sys/kernel/perf_event_max_sample_rate")
    if rate is not None:
        low = rate < 4000
        checks.append(Check("perf_event_max_sample_rate", WARN if low else OK,
                            f"kernel.perf_event_max_sample_rate = {rate} samples/s per event"
                            + (" (below perf record's default 4000 Hz)" if low else
                               " (lowered from the kernel's default 100000)" if rate < 100000 else ""),
                            "The kernel lowers this itself when sampling interrupts take too long ('perf: interrupt took "
                            "too long ... lowering kernel.perf_event_max_sample_rate' in dmesg).",
                            "sysctl -w kernel.perf_event_max_sample_rate=100000" if low else None, {"max_sample_rate": rate}))
    max_stack = _fs.read_int(root, "proc/sys/kernel/perf_event_max_stack")
    if max_stack is not None:
        checks.append(Check("perf_event_max_stack", OK if max_stack >= 64 else WARN, f"call chains up to {max_stack} frames "
                            "(kernel.perf_event_max_stack)", fix=None if max_stack >= 64 else "sysctl -w kernel.perf_event_max_stack=127",
                            data={"max_stack": max_stack}))

    # kernel symbols
    kptr = _fs.read_int(root, "proc/sys/kernel/kptr_restrict")
    if kptr is not None:
        syslog = bool(caps >> CAP_SYSLOG & 1)
        # kernel/kallsyms.c kallsyms_show_value(): 0 → visible if paranoid <= 1,
        # else as for 1; 1 → needs CAP_SYSLOG; 2 → never
        visible = (kptr == 0 and paranoid is not None and paranoid <= 1) or (kptr <= 1 and syslog)
        why = {0: "addresses shown to CAP_SYSLOG, or to everyone when perf_event_paranoid <= 1",
               1: "addresses shown only to CAP_SYSLOG", 2: "addresses hidden from everyone"}.get(kptr, "")
        checks.append(Check("kptr_restrict", OK if visible else WARN,
                            f"kernel.kptr_restrict = {kptr}: kernel symbols {'resolvable' if visible else 'NOT resolvable'} for this process",
                            why + "; /proc/kallsyms shows zero addresses otherwise and kernel samples stay unsymbolized.",
                            None if visible else ("sysctl -w kernel.kptr_restrict=0 (plus perf_event_paranoid <= 1), or grant CAP_SYSLOG"
                                                  if kptr < 2 else "sysctl -w kernel.kptr_restrict=0 (2 hides addresses even from root)"),
                            {"kptr_restrict": kptr, "symbols_visible": visible}))

    # tracefs
    mount, readable = _tracefs(root)
    if mount is None:
        checks.append(Check("tracefs", MISSING, "tracefs is not mounted: tracepoint events (sched:sched_switch, ...) cannot be resolved",
                            fix="mount -t tracefs nodev /sys/kernel/tracing", data={"mount": None, "readable": False}))
    elif readable is False:
        checks.append(Check("tracefs", WARN, f"tracefs at {mount} is not readable by this user: tracepoint ids cannot be looked up",
                            fix=f"chgrp -R tracing {mount} && chmod -R g+rx {mount} (and add the user to that group), or run as root",
                            data={"mount": mount, "readable": False}))
    else:
        checks.append(Check("tracefs", OK, f"tracefs mounted at {mount}" + (" and readable" if readable else " (readability not checked)"),
                            data={"mount": mount, "readable": readable}))
    return checks


def summarize(checks: list[Check]) -> dict[str, int]:
    """How many checks have each status."""
    return {s: sum(1 for c in checks if c.status == s) for s in STATUSES}
