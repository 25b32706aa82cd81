"""Structure-aware mutation of perf.data files: every integer field set to edge values.

A perf.data file is walked as perf lays it out (tools/perf/util/header.c and
include/uapi/linux/perf_event.h), independently of pmuscope's reader:

- file mode: the ``perf_file_header`` (attr_size, the attrs/data/event_types
  sections, the feature bitmap), each ``perf_file_attr`` (the attr's fields and
  its ids section), the feature section table after the data;
- both modes: every record in the data (file mode) or the stream (pipe mode):
  ``header.type``, ``misc``, ``size``, and each u64 word of the body (which is
  how every ``PERF_SAMPLE_*`` field, every side-band record field and every
  ``sample_id_all`` trailer is laid out), with both u32 halves of the first
  words (pid/tid, cpu/res).

:func:`fields` lists ``(offset, width, what)``; :func:`mutants` yields
``(what, value, bytes)`` with each field set to each of :data:`EDGES`
(0, 1, -1 as unsigned, 2^31, 2^32-1, 2^63-1, 2^63, and the file's size; 16-bit
fields get their own edges). ``consume`` (in the tests) feeds each mutant to
every reader of a perf.data: report (stdio, json, html), script, export.
"""

from __future__ import annotations

import struct
from typing import Iterator

PERF_RECORD_NAMES = {
    1: "MMAP", 2: "LOST", 3: "COMM", 4: "EXIT", 5: "THROTTLE", 6: "UNTHROTTLE", 7: "FORK", 8: "READ",
    9: "SAMPLE", 10: "MMAP2", 11: "AUX", 12: "ITRACE_START", 13: "LOST_SAMPLES", 14: "SWITCH",
    15: "SWITCH_CPU_WIDE", 16: "NAMESPACES", 17: "KSYMBOL", 18: "BPF_EVENT", 19: "CGROUP",
    20: "TEXT_POKE", 21: "AUX_OUTPUT_HW_ID", 64: "HEADER_ATTR", 65: "HEADER_EVENT_TYPE",
    66: "HEADER_TRACING_DATA", 67: "HEADER_BUILD_ID", 68: "FINISHED_ROUND", 69: "ID_INDEX",
    70: "AUXTRACE_INFO", 71: "AUXTRACE", 72: "AUXTRACE_ERROR", 73: "THREAD_MAP", 74: "CPU_MAP",
    75: "STAT_CONFIG", 76: "STAT", 77: "STAT_ROUND", 78: "EVENT_UPDATE", 79: "TIME_CONV", 80: "HEADER_FEATURE",
    81: "COMPRESSED", 82: "FINISHED_INIT", 83: "COMPRESSED2",
}  # fmt: skip

#: the attr fields (offset, width, name) of ``struct perf_event_attr``
ATTR_FIELDS = [
    (0, 4, "type"), (4, 4, "size"), (8, 8, "config"), (16, 8, "sample_period"), (24, 8, "sample_type"),
    (32, 8, "read_format"), (40, 8, "flags"), (48, 4, "wakeup_events"), (52, 4, "bp_type"), (56, 8, "config1"),
    (64, 8, "config2"), (72, 8, "branch_sample_type"), (80, 8, "sample_regs_user"), (88, 4, "sample_stack_user"),
    (92, 4, "clockid"), (96, 8, "sample_regs_intr"), (104, 4, "aux_watermark"), (108, 2, "sample_max_stack"),
]  # fmt: skip


def edges(width: int, size: int) -> list[int]:
    """The edge values of a ``width``-byte unsigned field in a file of ``size`` bytes."""
    if width == 2:
        return [0, 1, 7, 8, 0x8000, 0xFFFF]
    top = (1 << (8 * width)) - 1
    vals = [0, 1, top, 1 << 31, (1 << 32) - 1, (1 << 63) - 1, 1 << 63, size]
    return sorted({v & top for v in vals})


def _records(data: bytes, pos: int, end: int, what: str, per_type: int) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    seen: dict[int, int] = {}
    while pos + 8 <= end:
        typ, misc, size = struct.unpack_from("<IHH", data, pos)
        if size < 8 or pos + size > end:
            break
        n = seen.get(typ, 0)
        seen[typ] = n + 1
        if n < per_type:
            name = f"{what} {PERF_RECORD_NAMES.get(typ, typ)}#{n}@{pos:#x}"
            out += [(pos, 4, f"{name}.type"), (pos + 4, 2, f"{name}.misc"), (pos + 6, 2, f"{name}.size")]
            words = (size - 8) // 8
            for k in range(min(words, 24)):
                out.append((pos + 8 + 8 * k, 8, f"{name}.u64[{k}]"))
                if k < 3:
                    out.append((pos + 8 + 8 * k, 4, f"{name}.u32[{2 * k}]"))
                    out.append((pos + 12 + 8 * k, 4, f"{name}.u32[{2 * k + 1}]"))
        pos += size
    return out


def fields(data: bytes, *, per_type: int = 2) -> list[tuple[int, int, str]]:
    """Every integer field to mutate: ``(offset, width, what)``; records of each
    type are taken ``per_type`` at a time (their fields are laid out alike)."""
    if len(data) < 16 or data[:8] not in (b"PERFILE2", b"2ELIFREP"):
        return []
    size = struct.unpack_from("<Q", data, 8)[0]
    if size == 16:  # pipe mode: a stream of records after the 16-byte header
        return [(8, 8, "header.size")] + _records(data, 16, len(data), "pipe", per_type)
    out = [(8, 8, "header.size"), (16, 8, "header.attr_size")]
    for name, at in (("attrs", 24), ("data", 40), ("event_types", 56)):
        out += [(at, 8, f"header.{name}.offset"), (at + 8, 8, f"header.{name}.size")]
    out += [(72 + 8 * k, 8, f"header.flags[{k}]") for k in range(4)]
    attr_size, a_off, a_size, d_off, d_size = struct.unpack_from("<QQQQQ", data, 16)
    if 16 < attr_size <= 4096 and a_off + a_size <= len(data):
        for i in range(min(a_size // attr_size, 4)):
            base = a_off + i * attr_size
            inner = attr_size - 16
            out += [(base + off, w, f"attr[{i}].{n}") for off, w, n in ATTR_FIELDS if off + w <= inner]
            out += [(base + inner, 8, f"attr[{i}].ids.offset"), (base + inner + 8, 8, f"attr[{i}].ids.size")]
    if d_off + d_size <= len(data):
        out += _records(data, d_off, d_off + d_size, "data", per_type)
        feats = bin(int.from_bytes(data[72:104], "little")).count("1")
        fs = d_off + d_size
        for k in range(feats):
            if fs + 16 * k + 16 <= len(data):
                out += [(fs + 16 * k, 8, f"feature[{k}].offset"), (fs + 16 * k + 8, 8, f"feature[{k}].size")]
    return out


def mutants(data: bytes, *, per_type: int = 2) -> Iterator[tuple[str, int, bytes]]:
    """``(what, value, mutated file)`` for each field and each of its edge values
    (values equal to the field's own are skipped)."""
    for off, width, what in fields(data, per_type=per_type):
        fmt = {2: "<H", 4: "<I", 8: "<Q"}[width]
        cur = struct.unpack_from(fmt, data, off)[0]
        for v in edges(width, len(data)):
            if v == cur:
                continue
            buf = bytearray(data)
            struct.pack_into(fmt, buf, off, v)
            yield what, v, bytes(buf)
