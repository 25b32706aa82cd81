"""The ctypes mirror matches include/uapi/linux/perf_event.h."""

import ctypes

from pmuscope.kernel import abi


def test_attr_size_versions():
    assert ctypes.sizeof(abi.perf_event_attr) == abi.PERF_ATTR_SIZE_VER8 == 136
    a = abi.perf_event_attr
    assert a.config2.offset == abi.PERF_ATTR_SIZE_VER1 - 8
    assert a.branch_sample_type.offset == abi.PERF_ATTR_SIZE_VER2 - 8
    assert a.clockid.offset + 4 == abi.PERF_ATTR_SIZE_VER3
    assert a.sample_regs_intr.offset + 8 == abi.PERF_ATTR_SIZE_VER4
    assert a.sample_max_stack.offset + 4 == abi.PERF_ATTR_SIZE_VER5
    assert a.aux_sample_size.offset + 8 == abi.PERF_ATTR_SIZE_VER6
    assert a.sig_data.offset + 8 == abi.PERF_ATTR_SIZE_VER7
    assert a.config3.offset + 8 == abi.PERF_ATTR_SIZE_VER8


def test_flag_bit_positions():
    # bit positions from perf_event.h's bitfield, checked through the raw u64 at offset 40
    expected = {"disabled": 0, "exclude_kernel": 5, "freq": 10, "precise_ip": 15, "sample_id_all": 18,
                "exclude_guest": 20, "mmap2": 23, "context_switch": 26, "ksymbol": 29, "text_poke": 33,
                "build_id": 34, "sigtrap": 37}
    for name, bit in expected.items():
        attr = abi.perf_event_attr(**{name: 1})
        word = int.from_bytes(bytes(attr)[40:48], "little")
        assert word == 1 << bit, name


def test_unions_alias():
    attr = abi.perf_event_attr(sample_freq=4000, bp_addr=0x1000, bp_len=8)
    assert attr.sample_period == 4000
    assert attr.config1 == 0x1000 and attr.config2 == 8


def test_mmap_page_layout():
    p = abi.perf_event_mmap_page
    assert p.offset.offset == 16 and p.pmc_width.offset == 48 and p.time_mult.offset == 52
    assert p.time_cycles.offset == 80 and p.data_head.offset == 1024 and p.aux_size.offset == 1080


def test_ioctl_numbers_x86_64_layout():
    # values as compiled on x86_64/aarch64 (asm-generic ioctl layout)
    if abi._IOC_SIZEBITS != 14:
        return
    assert abi.PERF_EVENT_IOC_ENABLE == 0x2400
    assert abi.PERF_EVENT_IOC_ID == 0x80082407
    assert abi.PERF_EVENT_IOC_SET_FILTER == 0x40082406
    assert abi.PERF_EVENT_IOC_PAUSE_OUTPUT == 0x40042409
    assert abi.PERF_EVENT_IOC_MODIFY_ATTRIBUTES == 0x4008240B


def test_attr_roundtrip_bytes_older_size():
    attr = abi.perf_event_attr(type=4, config=0x3C, sample_type=0x127, exclude_guest=1)
    old = abi.attr_from_bytes(bytes(attr)[: abi.PERF_ATTR_SIZE_VER5])
    assert old.config == 0x3C and old.sample_type == 0x127 and old.exclude_guest == 1 and old.config3 == 0
