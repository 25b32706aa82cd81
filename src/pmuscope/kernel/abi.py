"""ctypes mirror of ``include/uapi/linux/perf_event.h`` (Linux 6.x).

Names follow the kernel header exactly so that perf users find what they know:
``perf_event_attr.exclude_kernel``, ``PERF_SAMPLE_CALLCHAIN``, ``PERF_RECORD_MMAP2``.
This module is the one source of truth for the ABI; the perf.data reader and
writer, the ring buffer and the event parser all use it.
"""

from __future__ import annotations

import _thread
import ctypes
import enum
import os

c_u8 = ctypes.c_uint8
c_u16 = ctypes.c_uint16
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_s32 = ctypes.c_int32
c_s64 = ctypes.c_int64


# --- enum perf_type_id -------------------------------------------------------
#: PerfType (IntEnum, created on first use): (member, value) in declaration order
_PERFTYPE_MEMBERS = (
    ("HARDWARE", 0),
    ("SOFTWARE", 1),
    ("TRACEPOINT", 2),
    ("HW_CACHE", 3),
    ("RAW", 4),
    ("BREAKPOINT", 5),
)


PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_TRACEPOINT = 2
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4
PERF_TYPE_BREAKPOINT = 5

# Extended type for hybrid systems: config bits 32-63 carry the PMU type.
PERF_PMU_TYPE_SHIFT = 32
PERF_HW_EVENT_MASK = 0xFFFFFFFF


# --- enum perf_hw_id ---------------------------------------------------------
#: PerfHwId (IntEnum, created on first use): (member, value) in declaration order
_PERFHWID_MEMBERS = (
    ("CPU_CYCLES", 0),
    ("INSTRUCTIONS", 1),
    ("CACHE_REFERENCES", 2),
    ("CACHE_MISSES", 3),
    ("BRANCH_INSTRUCTIONS", 4),
    ("BRANCH_MISSES", 5),
    ("BUS_CYCLES", 6),
    ("STALLED_CYCLES_FRONTEND", 7),
    ("STALLED_CYCLES_BACKEND", 8),
    ("REF_CPU_CYCLES", 9),
)


# --- enum perf_hw_cache_id / op / result -------------------------------------
#: PerfHwCacheId (IntEnum, created on first use): (member, value) in declaration order
_PERFHWCACHEID_MEMBERS = (
    ("L1D", 0),
    ("L1I", 1),
    ("LL", 2),
    ("DTLB", 3),
    ("ITLB", 4),
    ("BPU", 5),
    ("NODE", 6),
)


#: PerfHwCacheOp (IntEnum, created on first use): (member, value) in declaration order
_PERFHWCACHEOP_MEMBERS = (
    ("READ", 0),
    ("WRITE", 1),
    ("PREFETCH", 2),
)


#: PerfHwCacheResult (IntEnum, created on first use): (member, value) in declaration order
_PERFHWCACHERESULT_MEMBERS = (
    ("ACCESS", 0),
    ("MISS", 1),
)


# --- enum perf_sw_ids --------------------------------------------------------
#: PerfSwId (IntEnum, created on first use): (member, value) in declaration order
_PERFSWID_MEMBERS = (
    ("CPU_CLOCK", 0),
    ("TASK_CLOCK", 1),
    ("PAGE_FAULTS", 2),
    ("CONTEXT_SWITCHES", 3),
    ("CPU_MIGRATIONS", 4),
    ("PAGE_FAULTS_MIN", 5),
    ("PAGE_FAULTS_MAJ", 6),
    ("ALIGNMENT_FAULTS", 7),
    ("EMULATION_FAULTS", 8),
    ("DUMMY", 9),
    ("BPF_OUTPUT", 10),
    ("CGROUP_SWITCHES", 11),
)

for _n, _v in _PERFSWID_MEMBERS:  # PERF_COUNT_SW_TASK_CLOCK ...
    globals()["PERF_COUNT_SW_" + _n] = _v


# --- enum perf_event_sample_format -------------------------------------------
#: PerfSample (IntFlag, created on first use): (member, value) in declaration order
_PERFSAMPLE_MEMBERS = (
    ("IP", 1 << 0),
    ("TID", 1 << 1),
    ("TIME", 1 << 2),
    ("ADDR", 1 << 3),
    ("READ", 1 << 4),
    ("CALLCHAIN", 1 << 5),
    ("ID", 1 << 6),
    ("CPU", 1 << 7),
    ("PERIOD", 1 << 8),
    ("STREAM_ID", 1 << 9),
    ("RAW", 1 << 10),
    ("BRANCH_STACK", 1 << 11),
    ("REGS_USER", 1 << 12),
    ("STACK_USER", 1 << 13),
    ("WEIGHT", 1 << 14),
    ("DATA_SRC", 1 << 15),
    ("IDENTIFIER", 1 << 16),
    ("TRANSACTION", 1 << 17),
    ("REGS_INTR", 1 << 18),
    ("PHYS_ADDR", 1 << 19),
    ("AUX", 1 << 20),
    ("CGROUP", 1 << 21),
    ("DATA_PAGE_SIZE", 1 << 22),
    ("CODE_PAGE_SIZE", 1 << 23),
    ("WEIGHT_STRUCT", 1 << 24),
)


PERF_SAMPLE_MAX = 1 << 25

# Module-level aliases with the kernel's names.
for _n, _v in _PERFSAMPLE_MEMBERS:
    globals()["PERF_SAMPLE_" + _n] = _v


# --- enum perf_branch_sample_type --------------------------------------------
#: PerfBranchSample (IntFlag, created on first use): (member, value) in declaration order
_PERFBRANCHSAMPLE_MEMBERS = (
    ("USER", 1 << 0),
    ("KERNEL", 1 << 1),
    ("HV", 1 << 2),
    ("ANY", 1 << 3),
    ("ANY_CALL", 1 << 4),
    ("ANY_RETURN", 1 << 5),
    ("IND_CALL", 1 << 6),
    ("ABORT_TX", 1 << 7),
    ("IN_TX", 1 << 8),
    ("NO_TX", 1 << 9),
    ("COND", 1 << 10),
    ("CALL_STACK", 1 << 11),
    ("IND_JUMP", 1 << 12),
    ("CALL", 1 << 13),
    ("NO_FLAGS", 1 << 14),
    ("NO_CYCLES", 1 << 15),
    ("TYPE_SAVE", 1 << 16),
    ("HW_INDEX", 1 << 17),
    ("PRIV_SAVE", 1 << 18),
    ("COUNTERS", 1 << 19),
)


for _n, _v in _PERFBRANCHSAMPLE_MEMBERS:
    globals()["PERF_SAMPLE_BRANCH_" + _n] = _v


# --- enum perf_event_read_format ---------------------------------------------
#: PerfFormat (IntFlag, created on first use): (member, value) in declaration order
_PERFFORMAT_MEMBERS = (
    ("TOTAL_TIME_ENABLED", 1 << 0),
    ("TOTAL_TIME_RUNNING", 1 << 1),
    ("ID", 1 << 2),
    ("GROUP", 1 << 3),
    ("LOST", 1 << 4),
)


PERF_FORMAT_TOTAL_TIME_ENABLED = 1
PERF_FORMAT_TOTAL_TIME_RUNNING = 2
PERF_FORMAT_ID = 4
PERF_FORMAT_GROUP = 8
PERF_FORMAT_LOST = 16


# --- attr size versions ------------------------------------------------------
PERF_ATTR_SIZE_VER0 = 64  # first published struct
PERF_ATTR_SIZE_VER1 = 72  # add: config2
PERF_ATTR_SIZE_VER2 = 80  # add: branch_sample_type
PERF_ATTR_SIZE_VER3 = 96  # add: sample_regs_user, sample_stack_user
PERF_ATTR_SIZE_VER4 = 104  # add: sample_regs_intr
PERF_ATTR_SIZE_VER5 = 112  # add: aux_watermark
PERF_ATTR_SIZE_VER6 = 120  # add: aux_sample_size
PERF_ATTR_SIZE_VER7 = 128  # add: sig_data
PERF_ATTR_SIZE_VER8 = 136  # add: config3

#: the flag bits of the attr's bitfield word, in kernel order, with their widths
ATTR_FLAG_BITS: tuple[tuple[str, int], ...] = (
    ("disabled", 1),
    ("inherit", 1),
    ("pinned", 1),
    ("exclusive", 1),
    ("exclude_user", 1),
    ("exclude_kernel", 1),
    ("exclude_hv", 1),
    ("exclude_idle", 1),
    ("mmap", 1),
    ("comm", 1),
    ("freq", 1),
    ("inherit_stat", 1),
    ("enable_on_exec", 1),
    ("task", 1),
    ("watermark", 1),
    ("precise_ip", 2),
    ("mmap_data", 1),
    ("sample_id_all", 1),
    ("exclude_host", 1),
    ("exclude_guest", 1),
    ("exclude_callchain_kernel", 1),
    ("exclude_callchain_user", 1),
    ("mmap2", 1),
    ("comm_exec", 1),
    ("use_clockid", 1),
    ("context_switch", 1),
    ("write_backward", 1),
    ("namespaces", 1),
    ("ksymbol", 1),
    ("bpf_event", 1),
    ("aux_output", 1),
    ("cgroup", 1),
    ("text_poke", 1),
    ("build_id", 1),
    ("inherit_thread", 1),
    ("remove_on_exec", 1),
    ("sigtrap", 1),
    ("__reserved_1", 26),
)
ATTR_FLAG_NAMES: tuple[str, ...] = tuple(n for n, _ in ATTR_FLAG_BITS if not n.startswith("__"))


class _SamplePeriodFreq(ctypes.Union):
    _fields_ = [("sample_period", c_u64), ("sample_freq", c_u64)]


class _WakeupUnion(ctypes.Union):
    _fields_ = [("wakeup_events", c_u32), ("wakeup_watermark", c_u32)]


class _Config1Union(ctypes.Union):
    _fields_ = [("bp_addr", c_u64), ("kprobe_func", c_u64), ("uprobe_path", c_u64), ("config1", c_u64)]


class _Config2Union(ctypes.Union):
    _fields_ = [("bp_len", c_u64), ("kprobe_addr", c_u64), ("probe_offset", c_u64), ("config2", c_u64)]


class perf_event_attr(ctypes.Structure):
    """``struct perf_event_attr`` at its newest size (VER8, 136 bytes).

    Every union member is reachable by its kernel name (``sample_period`` and
    ``sample_freq``; ``bp_addr`` and ``config1``; ...). ``size`` is set to the
    full structure size on construction.
    """

    _anonymous_ = ("_u_period", "_u_wakeup", "_u_config1", "_u_config2")
    _fields_ = [
        ("type", c_u32),
        ("size", c_u32),
        ("config", c_u64),
        ("_u_period", _SamplePeriodFreq),
        ("sample_type", c_u64),
        ("read_format", c_u64),
        *[(name, c_u64, width) for name, width in ATTR_FLAG_BITS],
        ("_u_wakeup", _WakeupUnion),
        ("bp_type", c_u32),
        ("_u_config1", _Config1Union),
        ("_u_config2", _Config2Union),
        ("branch_sample_type", c_u64),
        ("sample_regs_user", c_u64),
        ("sample_stack_user", c_u32),
        ("clockid", c_s32),
        ("sample_regs_intr", c_u64),
        ("aux_watermark", c_u32),
        ("sample_max_stack", c_u16),
        ("__reserved_2", c_u16),
        ("aux_sample_size", c_u32),
        # 6.13+: aux_action bitfield (aux_start_paused, aux_pause, aux_resume)
        ("aux_start_paused", c_u32, 1),
        ("aux_pause", c_u32, 1),
        ("aux_resume", c_u32, 1),
        ("__reserved_3", c_u32, 29),
        ("sig_data", c_u64),
        ("config3", c_u64),
    ]

    def __init__(self, **kwargs: int) -> None:
        super().__init__()
        self.size = ctypes.sizeof(self)
        for key, value in kwargs.items():
            if not hasattr(self, key):
                raise AttributeError(f"perf_event_attr has no field {key!r}")
            setattr(self, key, value)

    #: the scalar fields, in kernel order, as named by ``perf stat -vv``
    FIELDS: tuple[str, ...] = ()

    def to_dict(self, *, nonzero: bool = False) -> dict[str, int]:
        """All fields by kernel name (union members under their first name and
        ``config1``/``config2`` both spelled out)."""
        out: dict[str, int] = {}
        for name in ATTR_FIELD_NAMES:
            value = int(getattr(self, name))
            if nonzero and not value:
                continue
            out[name] = value
        return out

    def copy(self) -> "perf_event_attr":
        new = perf_event_attr()
        ctypes.memmove(ctypes.addressof(new), ctypes.addressof(self), ctypes.sizeof(self))
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, perf_event_attr):
            return NotImplemented
        return bytes(self) == bytes(other)

    def __hash__(self) -> int:
        return hash(bytes(self))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v:#x}" if k in _HEX_FIELDS else f"{k}={v}" for k, v in self.to_dict(nonzero=True).items())
        return f"perf_event_attr({fields})"


_HEX_FIELDS = {"config", "config1", "config2", "config3", "sample_type", "read_format", "bp_addr", "branch_sample_type"}

#: every field of perf_event_attr by its kernel name, in kernel order; union
#: members appear once under the name perf stat -vv prints first
ATTR_FIELD_NAMES: tuple[str, ...] = (
    "type",
    "size",
    "config",
    "sample_period",
    "sample_type",
    "read_format",
    *ATTR_FLAG_NAMES,
    "wakeup_events",
    "bp_type",
    "config1",
    "config2",
    "branch_sample_type",
    "sample_regs_user",
    "sample_stack_user",
    "clockid",
    "sample_regs_intr",
    "aux_watermark",
    "sample_max_stack",
    "aux_sample_size",
    "aux_start_paused",
    "aux_pause",
    "aux_resume",
    "sig_data",
    "config3",
)
perf_event_attr.FIELDS = ATTR_FIELD_NAMES

assert ctypes.sizeof(perf_event_attr) == PERF_ATTR_SIZE_VER8, ctypes.sizeof(perf_event_attr)


def attr_from_bytes(data: bytes | memoryview, size: int | None = None) -> perf_event_attr:
    """Build an attr from its on-disk/in-record bytes of any size version.

    Shorter (older) attrs are zero-extended; longer (newer) ones are truncated
    to what this mirror knows (the caller decides whether the tail is zero).
    """
    attr = perf_event_attr()
    n = min(len(data), ctypes.sizeof(attr)) if size is None else min(size, len(data), ctypes.sizeof(attr))
    ctypes.memmove(ctypes.addressof(attr), bytes(data[:n]), n)
    return attr


# --- breakpoint types (linux/hw_breakpoint.h) --------------------------------
HW_BREAKPOINT_EMPTY = 0
HW_BREAKPOINT_R = 1
HW_BREAKPOINT_W = 2
HW_BREAKPOINT_RW = 3
HW_BREAKPOINT_X = 4
HW_BREAKPOINT_INVALID = HW_BREAKPOINT_RW | HW_BREAKPOINT_X
HW_BREAKPOINT_LEN_1 = 1
HW_BREAKPOINT_LEN_2 = 2
HW_BREAKPOINT_LEN_4 = 4
HW_BREAKPOINT_LEN_8 = 8


# --- perf_event_open flags ---------------------------------------------------
PERF_FLAG_FD_NO_GROUP = 1 << 0
PERF_FLAG_FD_OUTPUT = 1 << 1
PERF_FLAG_PID_CGROUP = 1 << 2
PERF_FLAG_FD_CLOEXEC = 1 << 3


# --- ioctls -------------------------------------------------------------------
def _ioc_layout(machine: str) -> tuple[int, int, int, int, int]:
    """(NONE, WRITE, READ, sizebits, dirshift) of asm-generic/ioctl.h and the
    architectures that override it (powerpc, mips, sparc use 13 size bits)."""
    if machine.startswith(("ppc", "powerpc", "mips", "sparc")):
        return 1, 4, 2, 13, 29
    return 0, 1, 2, 14, 30


_IOC_NONE, _IOC_WRITE, _IOC_READ, _IOC_SIZEBITS, _IOC_DIRSHIFT = _ioc_layout(os.uname().machine)  # platform.machine(), without importing platform


def _IOC(direction: int, typ: int, nr: int, size: int) -> int:
    return (direction << _IOC_DIRSHIFT) | (size << 16) | (typ << 8) | nr


def _IO(typ: int, nr: int) -> int:
    return _IOC(_IOC_NONE, typ, nr, 0)


def _IOW(typ: int, nr: int, size: int) -> int:
    return _IOC(_IOC_WRITE, typ, nr, size)


def _IOR(typ: int, nr: int, size: int) -> int:
    return _IOC(_IOC_READ, typ, nr, size)


def _IOWR(typ: int, nr: int, size: int) -> int:
    return _IOC(_IOC_READ | _IOC_WRITE, typ, nr, size)


_T = ord("$")
_PTR = ctypes.sizeof(ctypes.c_void_p)
PERF_EVENT_IOC_ENABLE = _IO(_T, 0)
PERF_EVENT_IOC_DISABLE = _IO(_T, 1)
PERF_EVENT_IOC_REFRESH = _IO(_T, 2)
PERF_EVENT_IOC_RESET = _IO(_T, 3)
PERF_EVENT_IOC_PERIOD = _IOW(_T, 4, 8)  # __u64
PERF_EVENT_IOC_SET_OUTPUT = _IO(_T, 5)
PERF_EVENT_IOC_SET_FILTER = _IOW(_T, 6, _PTR)  # char *
PERF_EVENT_IOC_ID = _IOR(_T, 7, _PTR)  # __u64 *
PERF_EVENT_IOC_SET_BPF = _IOW(_T, 8, 4)  # __u32
PERF_EVENT_IOC_PAUSE_OUTPUT = _IOW(_T, 9, 4)  # __u32
PERF_EVENT_IOC_QUERY_BPF = _IOWR(_T, 10, _PTR)  # struct perf_event_query_bpf *
PERF_EVENT_IOC_MODIFY_ATTRIBUTES = _IOW(_T, 11, _PTR)  # struct perf_event_attr *

PERF_IOC_FLAG_GROUP = 1 << 0


class perf_event_query_bpf(ctypes.Structure):
    """Header of the QUERY_BPF argument; ``ids`` follow in memory."""

    _fields_ = [("ids_len", c_u32), ("prog_cnt", c_u32)]


# --- struct perf_event_mmap_page ---------------------------------------------
class perf_event_mmap_page(ctypes.Structure):
    """The first page of a perf mmap: counter self-monitoring fields, then the
    ring-buffer head/tail at offset 1024 and the AUX area description."""

    _fields_ = [
        ("version", c_u32),
        ("compat_version", c_u32),
        ("lock", c_u32),
        ("index", c_u32),
        ("offset", c_s64),
        ("time_enabled", c_u64),
        ("time_running", c_u64),
        ("cap_bit0", c_u64, 1),
        ("cap_bit0_is_deprecated", c_u64, 1),
        ("cap_user_rdpmc", c_u64, 1),
        ("cap_user_time", c_u64, 1),
        ("cap_user_time_zero", c_u64, 1),
        ("cap_user_time_short", c_u64, 1),
        ("cap_____res", c_u64, 58),
        ("pmc_width", c_u16),
        ("time_shift", c_u16),
        ("time_mult", c_u32),
        ("time_offset", c_u64),
        ("time_zero", c_u64),
        ("size", c_u32),
        ("__reserved_1", c_u32),
        ("time_cycles", c_u64),
        ("time_mask", c_u64),
        ("__reserved", c_u8 * (116 * 8)),
        ("data_head", c_u64),
        ("data_tail", c_u64),
        ("data_offset", c_u64),
        ("data_size", c_u64),
        ("aux_head", c_u64),
        ("aux_tail", c_u64),
        ("aux_offset", c_u64),
        ("aux_size", c_u64),
    ]


MMAP_PAGE_CAPABILITIES_OFFSET = 40
MMAP_PAGE_DATA_HEAD_OFFSET = perf_event_mmap_page.data_head.offset
assert MMAP_PAGE_DATA_HEAD_OFFSET == 1024

# capability bits of perf_event_mmap_page.capabilities
CAP_BIT0 = 1 << 0
CAP_BIT0_IS_DEPRECATED = 1 << 1
CAP_USER_RDPMC = 1 << 2
CAP_USER_TIME = 1 << 3
CAP_USER_TIME_ZERO = 1 << 4
CAP_USER_TIME_SHORT = 1 << 5


# --- records ------------------------------------------------------------------
class perf_event_header(ctypes.Structure):
    _fields_ = [("type", c_u32), ("misc", c_u16), ("size", c_u16)]


#: PerfRecord (IntEnum, created on first use): (member, value) in declaration order
_PERFRECORD_MEMBERS = (
    ("MMAP", 1),
    ("LOST", 2),
    ("COMM", 3),
    ("EXIT", 4),
    ("THROTTLE", 5),
    ("UNTHROTTLE", 6),
    ("FORK", 7),
    ("READ", 8),
    ("SAMPLE", 9),
    ("MMAP2", 10),
    ("AUX", 11),
    ("ITRACE_START", 12),
    ("LOST_SAMPLES", 13),
    ("SWITCH", 14),
    ("SWITCH_CPU_WIDE", 15),
    ("NAMESPACES", 16),
    ("KSYMBOL", 17),
    ("BPF_EVENT", 18),
    ("CGROUP", 19),
    ("TEXT_POKE", 20),
    ("AUX_OUTPUT_HW_ID", 21),
    ("HEADER_ATTR", 64),
    ("HEADER_EVENT_TYPE", 65),
    ("HEADER_TRACING_DATA", 66),
    ("HEADER_BUILD_ID", 67),
    ("FINISHED_ROUND", 68),
    ("ID_INDEX", 69),
    ("AUXTRACE_INFO", 70),
    ("AUXTRACE", 71),
    ("AUXTRACE_ERROR", 72),
    ("THREAD_MAP", 73),
    ("CPU_MAP", 74),
    ("STAT_CONFIG", 75),
    ("STAT", 76),
    ("STAT_ROUND", 77),
    ("EVENT_UPDATE", 78),
    ("TIME_CONV", 79),
    ("HEADER_FEATURE", 80),
    ("COMPRESSED", 81),
    ("FINISHED_INIT", 82),
    ("COMPRESSED2", 83),
)


for _n, _v in _PERFRECORD_MEMBERS:
    globals()["PERF_RECORD_" + _n] = _v

PERF_RECORD_MAX = 22
PERF_RECORD_USER_TYPE_START = 64

# header.misc
PERF_RECORD_MISC_CPUMODE_MASK = 7
PERF_RECORD_MISC_CPUMODE_UNKNOWN = 0
PERF_RECORD_MISC_KERNEL = 1
PERF_RECORD_MISC_USER = 2
PERF_RECORD_MISC_HYPERVISOR = 3
PERF_RECORD_MISC_GUEST_KERNEL = 4
PERF_RECORD_MISC_GUEST_USER = 5
PERF_RECORD_MISC_PROC_MAP_PARSE_TIMEOUT = 1 << 12
PERF_RECORD_MISC_MMAP_DATA = 1 << 13
PERF_RECORD_MISC_COMM_EXEC = 1 << 13
PERF_RECORD_MISC_FORK_EXEC = 1 << 13
PERF_RECORD_MISC_SWITCH_OUT = 1 << 13
PERF_RECORD_MISC_EXACT_IP = 1 << 14
PERF_RECORD_MISC_SWITCH_OUT_PREEMPT = 1 << 14
PERF_RECORD_MISC_MMAP_BUILD_ID = 1 << 14
PERF_RECORD_MISC_EXT_RESERVED = 1 << 15

# PERF_RECORD_KSYMBOL types / flags
PERF_RECORD_KSYMBOL_TYPE_UNKNOWN = 0
PERF_RECORD_KSYMBOL_TYPE_BPF = 1
PERF_RECORD_KSYMBOL_TYPE_OOL = 2
PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER = 1 << 0

# PERF_RECORD_BPF_EVENT types
PERF_BPF_EVENT_UNKNOWN = 0
PERF_BPF_EVENT_PROG_LOAD = 1
PERF_BPF_EVENT_PROG_UNLOAD = 2

# PERF_RECORD_AUX flags
PERF_AUX_FLAG_TRUNCATED = 0x01
PERF_AUX_FLAG_OVERWRITE = 0x02
PERF_AUX_FLAG_PARTIAL = 0x04
PERF_AUX_FLAG_COLLISION = 0x08
PERF_AUX_FLAG_PMU_FORMAT_TYPE_MASK = 0xFF00
PERF_AUX_FLAG_CORESIGHT_FORMAT_CORESIGHT = 0x0000
PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW = 0x0100

# namespaces (PERF_RECORD_NAMESPACES order)
NET_NS_INDEX, UTS_NS_INDEX, IPC_NS_INDEX, PID_NS_INDEX, USER_NS_INDEX, MNT_NS_INDEX, CGROUP_NS_INDEX = range(7)
NR_NAMESPACES = 7

PERF_MAX_STACK_DEPTH = 127
PERF_MAX_CONTEXTS_PER_STACK = 8

# enum perf_callchain_context: markers inside PERF_SAMPLE_CALLCHAIN (as u64)
PERF_CONTEXT_HV = (-32) & 0xFFFFFFFFFFFFFFFF
PERF_CONTEXT_KERNEL = (-128) & 0xFFFFFFFFFFFFFFFF
PERF_CONTEXT_USER = (-512) & 0xFFFFFFFFFFFFFFFF
PERF_CONTEXT_GUEST = (-2048) & 0xFFFFFFFFFFFFFFFF
PERF_CONTEXT_GUEST_KERNEL = (-2176) & 0xFFFFFFFFFFFFFFFF
PERF_CONTEXT_GUEST_USER = (-2560) & 0xFFFFFFFFFFFFFFFF
PERF_CONTEXT_MAX = (-4095) & 0xFFFFFFFFFFFFFFFF

# enum perf_sample_regs_abi
PERF_SAMPLE_REGS_ABI_NONE = 0
PERF_SAMPLE_REGS_ABI_32 = 1
PERF_SAMPLE_REGS_ABI_64 = 2

# PERF_TXN_* (PERF_SAMPLE_TRANSACTION)
PERF_TXN_ELISION = 1 << 0
PERF_TXN_TRANSACTION = 1 << 1
PERF_TXN_SYNC = 1 << 2
PERF_TXN_ASYNC = 1 << 3
PERF_TXN_RETRY = 1 << 4
PERF_TXN_CONFLICT = 1 << 5
PERF_TXN_CAPACITY_WRITE = 1 << 6
PERF_TXN_CAPACITY_READ = 1 << 7
PERF_TXN_ABORT_SHIFT = 32


class perf_branch_entry(ctypes.Structure):
    """24-byte branch stack entry (from, to, then a bitfield word)."""

    _fields_ = [
        ("from_", c_u64),
        ("to", c_u64),
        ("mispred", c_u64, 1),
        ("predicted", c_u64, 1),
        ("in_tx", c_u64, 1),
        ("abort", c_u64, 1),
        ("cycles", c_u64, 16),
        ("type", c_u64, 4),
        ("spec", c_u64, 2),
        ("new_type", c_u64, 4),
        ("priv", c_u64, 3),
        ("reserved", c_u64, 31),
    ]


assert ctypes.sizeof(perf_branch_entry) == 24


# --- the enum classes, created on first use ------------------------------------
# why: creating an IntFlag of 25 members costs ~0.4 ms, an IntEnum ~0.2 ms; the ten
# above were 1.5-2 ms of every start-up, and `stat` of a software event uses none of
# them (the PERF_* int constants above carry the same values). ``abi.PerfSample``
# (and ``from .abi import PerfSample``) builds the class once, through PEP 562.

_ENUMS = {
    "PerfType": (enum.IntEnum, _PERFTYPE_MEMBERS, None),
    "PerfHwId": (enum.IntEnum, _PERFHWID_MEMBERS, None),
    "PerfHwCacheId": (enum.IntEnum, _PERFHWCACHEID_MEMBERS, None),
    "PerfHwCacheOp": (enum.IntEnum, _PERFHWCACHEOP_MEMBERS, None),
    "PerfHwCacheResult": (enum.IntEnum, _PERFHWCACHERESULT_MEMBERS, None),
    "PerfSwId": (enum.IntEnum, _PERFSWID_MEMBERS, None),
    "PerfSample": (enum.IntFlag, _PERFSAMPLE_MEMBERS, None),
    "PerfBranchSample": (enum.IntFlag, _PERFBRANCHSAMPLE_MEMBERS, None),
    "PerfFormat": (enum.IntFlag, _PERFFORMAT_MEMBERS, None),
    "PerfRecord": (enum.IntEnum, _PERFRECORD_MEMBERS, 'enum perf_event_type, plus the record types perf itself synthesizes (>= 64).'),
}
_ENUM_LOCK = _thread.allocate_lock()


def __getattr__(name: str):
    spec = _ENUMS.get(name)
    if spec is not None:
        with _ENUM_LOCK:
            cls = globals().get(name)
            if cls is None:
                kind, members, doc = spec
                cls = kind(name, members, module=__name__, qualname=name)
                if doc:
                    cls.__doc__ = doc
                globals()[name] = cls
        return cls
    if name == "PERF_SAMPLE_WEIGHT_TYPE":
        sample = __getattr__("PerfSample")
        value = globals()[name] = sample.WEIGHT | sample.WEIGHT_STRUCT
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ENUMS) | {"PERF_SAMPLE_WEIGHT_TYPE"})
