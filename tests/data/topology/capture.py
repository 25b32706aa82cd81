"""Copy the sysfs/procfs files pmuscope.system and `pmuscope doctor` read from
a live machine into a fixture tree:  python capture.py OUTDIR [ROOT]

Only small text files are copied; nothing is written outside OUTDIR.
/proc/self/* is taken from the capturing process.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

FILES = [
    "sys/devices/system/cpu/online",
    "sys/devices/system/cpu/possible",
    "sys/devices/system/cpu/present",
    "sys/devices/system/cpu/offline",
    "sys/devices/system/cpu/kernel_max",
    "sys/devices/system/cpu/cpu*/topology/*",
    "sys/devices/system/cpu/cpu*/cache/index*/*",
    "sys/devices/system/cpu/cpu*/regs/identification/*",
    "sys/devices/system/node/online",
    "sys/devices/system/node/possible",
    "sys/devices/system/node/has_cpu",
    "sys/devices/system/node/has_memory",
    "sys/devices/system/node/has_normal_memory",
    "sys/devices/system/node/node*/cpulist",
    "sys/devices/system/node/node*/cpumap",
    "sys/devices/system/node/node*/distance",
    "sys/devices/system/node/node*/meminfo",
    "sys/bus/event_source/devices/*/type",
    "sys/bus/event_source/devices/*/rdpmc",
    "sys/bus/event_source/devices/*/cpus",
    "sys/bus/event_source/devices/*/caps/*",
    "sys/class/dmi/id/sys_vendor",
    "sys/class/dmi/id/product_name",
    "sys/hypervisor/type",
    "sys/devices/system/clocksource/clocksource0/available_clocksource",
    "proc/cpuinfo",
    "proc/sys/kernel/osrelease",
    "proc/sys/kernel/perf_user_access",
    "proc/sys/kernel/perf_event_paranoid",
    "proc/sys/kernel/perf_event_mlock_kb",
    "proc/sys/kernel/perf_event_max_sample_rate",
    "proc/sys/kernel/perf_event_max_stack",
    "proc/sys/kernel/nmi_watchdog",
    "proc/sys/kernel/kptr_restrict",
    "proc/1/cgroup",
    "proc/1/sched",
    "proc/self/status",
    "proc/self/limits",
    ".dockerenv",
    "run/.containerenv",
]


def capture(out: str, root: str = "/") -> int:
    n = 0
    for pattern in FILES:
        for src in sorted(glob.glob(os.path.join(root, pattern))):
            if not os.path.isfile(src) or src.endswith("/uevent"):
                continue
            rel = os.path.relpath(src, root)
            dst = os.path.join(out, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                with open(src, "rb") as f:
                    data = f.read(1 << 20)
            except OSError:
                continue
            with open(dst, "wb") as f:
                f.write(data)
            n += 1
    mounts = os.path.join(root, "proc/mounts")
    if os.path.exists(mounts):
        with open(mounts) as f:
            keep = [line for line in f if line.split()[2:3] in (["tracefs"], ["debugfs"], ["sysfs"], ["proc"])]
        os.makedirs(os.path.join(out, "proc"), exist_ok=True)
        with open(os.path.join(out, "proc/mounts"), "w") as f:
            f.writelines(keep)
        n += 1
    return n


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if os.path.exists(sys.argv[1]):
        shutil.rmtree(sys.argv[1])
    print(capture(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/"), "files")
