"""Arm SPE packets: the byte encoding, a reference packet-at-a-time decoder,
the text ``perf report -D`` prints for each packet, and an encoder.

The rules follow Linux ``tools/perf/util/arm-spe-decoder/arm-spe-pkt-decoder.{c,h}``
(the newest version: SME/GCS operation subclasses, events 19-25, IMPDEF event
bits) and the Arm ARM chapter "Statistical Profiling Extension" (DDI 0487,
section D17). This module is the pure-Python reference; :mod:`pmuscope.spe.decode`
is the columnar fast path and is tested against it.
"""

from __future__ import annotations

import enum
from typing import Iterator, NamedTuple

__all__ = [
    "SpePacketType",
    "SpePacket",
    "get_packet",
    "iter_packets",
    "describe",
    "dump_lines",
    "dump_header",
    "encode_packet",
    "encode_alignment",
    "event_names",
    "ARM_SPE_PKT_MAX_SZ",
    "MIDR_NEOVERSE_N1",
    "PERF_STYLES",
]


class SpePacketType(enum.IntEnum):
    """``enum arm_spe_pkt_type`` (same order and values as perf)."""

    BAD = 0
    PAD = 1
    END = 2
    TIMESTAMP = 3
    ADDRESS = 4
    COUNTER = 5
    CONTEXT = 6
    OP_TYPE = 7
    EVENTS = 8
    DATA_SOURCE = 9


BAD, PAD, END, TIMESTAMP, ADDRESS, COUNTER, CONTEXT, OP_TYPE, EVENTS, DATA_SOURCE = range(10)

#: ``arm_spe_pkt_name()``; BAD has no name in perf (it prints "Bad packet!")
PACKET_NAME = ("BAD", "PAD", "END", "TS", "ADDR", "LAT", "CONTEXT", "OP-TYPE", "EVENTS", "DATA-SOURCE")

ARM_SPE_PKT_MAX_SZ = 16
#: perf's ``ARM_SPE_PKT_DESC_MAX``: a description that does not fit falls back to raw output
ARM_SPE_PKT_DESC_MAX = 256

# header byte 0 (short format) -------------------------------------------------
SPE_HEADER0_PAD = 0x00
SPE_HEADER0_END = 0x01
SPE_HEADER0_TIMESTAMP = 0x71
SPE_HEADER0_MASK1 = 0xCF  # GENMASK(7,6) | GENMASK(3,0)
SPE_HEADER0_EVENTS = 0x42
SPE_HEADER0_SOURCE = 0x43
SPE_HEADER0_MASK2 = 0xFC  # GENMASK(7,2)
SPE_HEADER0_CONTEXT = 0x64
SPE_HEADER0_OP_TYPE = 0x48
SPE_HEADER0_EXTENDED = 0x20
SPE_HEADER0_MASK3 = 0xF8  # GENMASK(7,3)
SPE_HEADER0_ADDRESS = 0xB0
SPE_HEADER0_COUNTER = 0x98
SPE_HEADER1_ALIGNMENT = 0x00

# address packet index --------------------------------------------------------
SPE_ADDR_PKT_HDR_INDEX_INS = 0
SPE_ADDR_PKT_HDR_INDEX_BRANCH = 1
SPE_ADDR_PKT_HDR_INDEX_DATA_VIRT = 2
SPE_ADDR_PKT_HDR_INDEX_DATA_PHYS = 3
SPE_ADDR_PKT_HDR_INDEX_PREV_BRANCH = 4
ADDR_INDEX_NAME = {0: "PC", 1: "TGT", 2: "VA", 3: "PA", 4: "PBT"}

# counter packet index --------------------------------------------------------
SPE_CNT_PKT_HDR_INDEX_TOTAL_LAT = 0
SPE_CNT_PKT_HDR_INDEX_ISSUE_LAT = 1
SPE_CNT_PKT_HDR_INDEX_TRANS_LAT = 2
COUNTER_INDEX_NAME = {0: "TOT", 1: "ISSUE", 2: "XLAT"}

# operation type class --------------------------------------------------------
SPE_OP_PKT_HDR_CLASS_OTHER = 0
SPE_OP_PKT_HDR_CLASS_LD_ST_ATOMIC = 1
SPE_OP_PKT_HDR_CLASS_BR_ERET = 2

ADDR_MASK_56 = (1 << 56) - 1

#: MIDR of Neoverse N1 with variant/revision zero (implementer 0x41, part 0xd0c)
MIDR_NEOVERSE_N1 = 0x410FD0C0
_MIDR_VARIANT_REVISION = 0x00F0000F

#: events packet bit -> perf name (``common_ev_strings[]``)
COMMON_EVENTS: tuple[tuple[int, str], ...] = (
    (0, "EXCEPTION-GEN"),
    (1, "RETIRED"),
    (2, "L1D-ACCESS"),
    (3, "L1D-REFILL"),
    (4, "TLB-ACCESS"),
    (5, "TLB-REFILL"),
    (6, "NOT-TAKEN"),
    (7, "MISPRED"),
    (8, "LLC-ACCESS"),
    (9, "LLC-REFILL"),
    (10, "REMOTE-ACCESS"),
    (11, "ALIGNMENT"),
    (16, "TXN"),
    (17, "SVE-PARTIAL-PRED"),
    (18, "SVE-EMPTY-PRED"),
    (19, "L2D-ACCESS"),
    (20, "L2D-MISS"),
    (21, "HITM"),
    (22, "LFB"),
    (23, "SNOOPED"),
    (24, "STREAMING-SVE"),
    (25, "SMCU"),
)
#: IMPLEMENTATION DEFINED event bits perf names for Neoverse N1 (``n1_event_strings[]``)
N1_EVENTS: tuple[tuple[int, str], ...] = ((12, "LATE-PREFETCH"),)
_COMMON_EVENT_MASK = sum(1 << b for b, _ in COMMON_EVENTS)


class SpePacket(NamedTuple):
    """One decoded packet: ``type`` (:class:`SpePacketType`), perf's ``index``
    (address/counter index, context EL index, op class, or the payload length
    for events), the little-endian ``payload``, and where it sits."""

    offset: int
    length: int
    type: int
    index: int
    payload: int

    @property
    def name(self) -> str:
        return PACKET_NAME[self.type]


def is_midr_n1(midr: int) -> bool:
    """``MIDR_ALL_VERSIONS(MIDR_NEOVERSE_N1)``: ignore variant and revision."""
    return (midr & ~_MIDR_VARIANT_REVISION & 0xFFFFFFFF) == MIDR_NEOVERSE_N1


def _payload_len(hdr: int) -> int:
    return 1 << ((hdr >> 4) & 3)


def get_packet(buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> tuple[int, int, int, int]:
    """Decode the packet starting at ``buf[pos]`` the way ``arm_spe_do_get_packet``
    does. Returns ``(type, index, payload, length)``; ``length <= 0`` means perf
    would report a bad packet (``type`` is then BAD): -1 for "need more bytes"
    (truncated), -2 for an invalid header. ``end`` bounds the buffer.

    Alignment packets are positioned relative to ``pos`` (the offset in the AUX
    buffer), where perf uses its host pointer; PAD runs are not merged here.
    """
    if end is None:
        end = len(buf)
    left = end - pos
    if left <= 0:
        return BAD, 0, 0, -1
    hdr = buf[pos]
    if hdr == SPE_HEADER0_PAD:
        return PAD, 0, 0, 1
    if hdr == SPE_HEADER0_END:
        return END, 0, 0, 1
    ext = 0
    if hdr == SPE_HEADER0_TIMESTAMP:
        typ, index = TIMESTAMP, 0
    elif (hdr & SPE_HEADER0_MASK1) == SPE_HEADER0_EVENTS:
        typ, index = EVENTS, _payload_len(hdr)
    elif (hdr & SPE_HEADER0_MASK1) == SPE_HEADER0_SOURCE:
        typ, index = DATA_SOURCE, 0
    elif (hdr & SPE_HEADER0_MASK2) == SPE_HEADER0_CONTEXT:
        typ, index = CONTEXT, hdr & 3
    elif (hdr & SPE_HEADER0_MASK2) == SPE_HEADER0_OP_TYPE:
        typ, index = OP_TYPE, hdr & 3
    else:
        hb = hdr
        if (hdr & SPE_HEADER0_MASK2) == SPE_HEADER0_EXTENDED:
            if left == 1:
                return BAD, 0, 0, -2
            ext = 1
            hb = buf[pos + 1]
            if hb == SPE_HEADER1_ALIGNMENT:
                alignment = 1 << ((hdr & 0xF) + 1)
                if left < alignment:
                    return BAD, 0, 0, -1
                return PAD, 0, 0, alignment - (pos & (alignment - 1))
        if (hb & SPE_HEADER0_MASK3) == SPE_HEADER0_ADDRESS:
            typ = ADDRESS
        elif (hb & SPE_HEADER0_MASK3) == SPE_HEADER0_COUNTER:
            typ = COUNTER
        else:
            return BAD, 0, 0, -2
        index = (((hdr & 3) << 3) | (hb & 7)) if ext else (hb & 7)
        hdr = hb
    plen = _payload_len(hdr)
    size = 1 + ext + plen
    if left < size:
        return BAD, 0, 0, -1
    start = pos + 1 + ext
    payload = int.from_bytes(buf[start : start + plen], "little")
    return typ, index, payload, size


def iter_packets(data: bytes | bytearray | memoryview, merge_pads: bool = True) -> Iterator[SpePacket]:
    """Walk a raw SPE buffer packet by packet, as ``arm_spe_dump`` does.

    Runs of PAD bytes are merged into one packet of up to 16 bytes when
    ``merge_pads`` (perf's ``arm_spe_get_packet``). An undecodable byte yields a
    BAD packet of length 1 and decoding resumes at the next byte; this never
    raises for any input.
    """
    buf = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    n = len(buf)
    pos = 0
    while pos < n:
        typ, index, payload, size = get_packet(buf, pos, n)
        if size <= 0:
            yield SpePacket(pos, 1, BAD, 0, 0)
            pos += 1
            continue
        if merge_pads and typ == PAD:
            while size < ARM_SPE_PKT_MAX_SZ and pos + size < n and buf[pos + size] == 0:
                size += 1
        yield SpePacket(pos, size, typ, index, payload)
        pos += size


# --------------------------------------------------------------------------- text


def event_names(payload: int, midr: int = 0) -> list[str]:
    """Names perf prints for an events payload, in perf's order; bits nobody
    names become one ``IMPDEF:a,b`` token (``arm_spe_pkt_desc_event``)."""
    names = [name for bit, name in COMMON_EVENTS if payload >> bit & 1]
    rest = payload & ~_COMMON_EVENT_MASK
    if midr and is_midr_n1(midr):
        for bit, name in N1_EVENTS:
            if rest >> bit & 1:
                names.append(name)
                rest &= ~(1 << bit)
    if rest:
        names.append("IMPDEF:" + ",".join(str(b) for b in range(64) if rest >> b & 1))
    return names


def _sve_evl(v: int) -> int:
    return 32 << ((v >> 4) & 7)


def _sme_ets(v: int) -> int:
    return 128 << ((((v >> 4) & 7) << 1) | ((v >> 2) & 1))


def describe_op_type(op_class: int, v: int) -> str | None:
    """perf's text for an operation-type packet, or None for an unknown class."""
    if op_class == SPE_OP_PKT_HDR_CLASS_OTHER:
        if (v & 0x89) == 0x08:
            s = f"SVE-OTHER EVLEN {_sve_evl(v)}"
            if v & 0x2:
                s += " FP"
            if v & 0x4:
                s += " PRED"
            return s
        if (v & 0x89) == 0x88:
            s = f"SME-OTHER ETS {_sme_ets(v)}"
            if v & 0x2:
                s += " FP"
            return s
        if (v & 0xF8) == 0:
            s = "OTHER"
            if v & 0x4:
                s += " ASE"
            if v & 0x2:
                s += " FP"
            return s + (" COND-SELECT" if v & 1 else " INSN-OTHER")
        return ""  # perf prints nothing for an OTHER payload it does not recognise
    if op_class == SPE_OP_PKT_HDR_CLASS_LD_ST_ATOMIC:
        s = "ST" if v & 1 else "LD"
        sub = v & 0xFE
        if (v & 0xE2) == 0x02:  # SPE_OP_PKT_LDST_SUBCLASS_EXTENDED
            if v & 0x04:
                s += " AT"
            if v & 0x08:
                s += " EXCL"
            if v & 0x10:
                s += " AR"
        elif sub == 0x04:
            s += " SIMD-FP"
        elif sub == 0x00:
            s += " GP-REG"
        elif sub == 0x10:
            s += " UNSPEC-REG"
        elif sub == 0x30:
            s += " NV-SYSREG"
        elif sub == 0x14:
            s += " MTE-TAG"
        elif sub == 0x20:
            s += " MEMCPY"
        elif v == 0x25:
            s += " MEMSET"
        elif (v & 0x0A) == 0x08:
            s += f" SVE-SME-REG EVLEN {_sve_evl(v)}"
            if v & 0x04:
                s += " PRED"
            if v & 0x80:
                s += " SG"
        elif (v & 0xFA) == 0x40:
            s += " GCS"
            if v & 0x04:
                s += " COMM"
        return s
    if op_class == SPE_OP_PKT_HDR_CLASS_BR_ERET:
        s = "B"
        if v & 0x1:
            s += " COND"
        if v & 0x2:
            s += " IND"
        if v & 0x4:
            s += " GCS"
        cr = (v >> 3) & 3
        if cr == 1:
            s += " CR-BL"
        elif cr == 2:
            s += " CR-RET"
        elif cr == 3:
            s += " CR-NON-BL-RET"
        return s
    return None


#: text styles of :func:`describe`: the newest perf, and perf 6.1 (the Linux perf of
#: Debian 12 / many LTS distributions), checked against its ``perf report -D``
PERF_STYLES = ("newest", "6.1")
#: event bits perf 6.1 names; it drops the others silently
_EVENTS_61 = tuple((b, n) for b, n in COMMON_EVENTS if b <= 11 or b in (17, 18))


def describe_op_type_61(op_class: int, v: int) -> str | None:
    """perf 6.1's text for an operation-type packet (before the SPEv1.3
    subclasses, SME, GCS, ASE/FP and call/return were decoded)."""
    if op_class == SPE_OP_PKT_HDR_CLASS_OTHER:
        if (v & 0x89) == 0x08:
            s = f"SVE-OTHER EVLEN {_sve_evl(v)}"
            if v & 0x2:
                s += " FP"
            if v & 0x4:
                s += " PRED"
            return s
        return "OTHER " + ("COND-SELECT" if v & 1 else "INSN-OTHER")
    if op_class == SPE_OP_PKT_HDR_CLASS_LD_ST_ATOMIC:
        s = "ST" if v & 1 else "LD"
        if (v & 0xE2) == 0x02:
            if v & 0x04:
                s += " AT"
            if v & 0x08:
                s += " EXCL"
            if v & 0x10:
                s += " AR"
        s += {0x04: " SIMD-FP", 0x00: " GP-REG", 0x10: " UNSPEC-REG", 0x30: " NV-SYSREG"}.get(v & 0xFE, "")
        if (v & 0x0A) == 0x08:
            s += f" EVLEN {_sve_evl(v)}"
            if v & 0x04:
                s += " PRED"
            if v & 0x80:
                s += " SG"
        return s
    if op_class == SPE_OP_PKT_HDR_CLASS_BR_ERET:
        s = "B"
        if v & 0x1:
            s += " COND"
        if (v & 0xFE) == 0x2:
            s += " IND"
        return s
    return None


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def describe(packet: SpePacket | tuple, midr: int = 0, style: str = "newest") -> str:
    """The description ``arm_spe_pkt_desc`` writes for a packet (the text after
    the hex bytes in ``perf report -D``). ``midr`` selects IMPDEF event names;
    ``style="6.1"`` gives perf 6.1's text instead of the newest perf's."""
    old = style == "6.1"
    if isinstance(packet, SpePacket):
        typ, index, payload = packet.type, packet.index, packet.payload
    else:
        typ, index, payload = packet
    desc: str | None
    if typ in (PAD, END):
        desc = PACKET_NAME[typ]
    elif typ == BAD:
        return "Bad packet!"
    elif typ == EVENTS:
        if old:
            desc = " ".join(["EV", *(name for bit, name in _EVENTS_61 if payload >> bit & 1)])
        else:
            desc = " ".join(["EV", *event_names(payload, midr)])
    elif typ == OP_TYPE:
        desc = describe_op_type_61(index, payload) if old else describe_op_type(index, payload)
    elif typ in (DATA_SOURCE, TIMESTAMP):
        desc = f"{PACKET_NAME[typ]} {_signed64(payload)}"
    elif typ == ADDRESS:
        if index in (0, 1) or (index == 4 and not old):
            ns = payload >> 63
            el = (payload >> 61) & 3
            desc = f"{ADDR_INDEX_NAME[index]} 0x{payload & ADDR_MASK_56:x} el{el} ns={ns}"
        elif index == 2:
            desc = f"VA 0x{payload:x}"
        elif index == 3:
            ns = payload >> 63
            ch = (payload >> 62) & 1
            pat = (payload >> 56) & 0xF
            desc = f"PA 0x{payload & ADDR_MASK_56:x} ns={ns} ch={ch} pat={pat:x}"
        else:
            desc = None
    elif typ == CONTEXT:
        desc = f"CONTEXT 0x{payload:x} el{index + 1}"
    elif typ == COUNTER:
        desc = f"LAT {payload & 0xFFFF} " + COUNTER_INDEX_NAME.get(index, "")
    else:
        desc = None
    if desc is None or len(desc) >= ARM_SPE_PKT_DESC_MAX:
        # perf's fallback when a description fails or overflows its buffer
        desc = f"{PACKET_NAME[typ]} 0x{payload:x} ({index})"
    return desc


def dump_header(size: int) -> str:
    """The line perf prints before each buffer (``%#zx`` prints 0 as ``0``)."""
    return f". ... ARM SPE data: size {size:#x} bytes" if size else ". ... ARM SPE data: size 0 bytes"


def dump_lines(data: bytes | bytearray | memoryview, midr: int = 0, header: bool = False, style: str = "newest") -> Iterator[str]:
    """``perf report -D`` lines for a raw SPE buffer (``arm_spe_dump``), without
    the trailing newline. With ``header`` the ``. ... ARM SPE data`` line comes
    first. ``style`` is "newest" or "6.1" (see :func:`describe`)."""
    if style not in PERF_STYLES:
        raise ValueError(f"unknown perf text style {style!r}: one of {', '.join(PERF_STYLES)}")
    buf = bytes(data)
    if header:
        yield dump_header(len(buf))
    pads = ["   " * (16 - k) for k in range(17)]
    for pkt in iter_packets(buf):
        hexes = buf[pkt.offset : pkt.offset + pkt.length].hex(" ")
        yield f".  {pkt.offset:08x}:  {hexes}{pads[min(pkt.length, 16)]} {describe(pkt, midr, style)}"


# --------------------------------------------------------------------------- encoder

_PLEN_SZ = {1: 0, 2: 1, 4: 2, 8: 3}


def encode_packet(typ: int, index: int = 0, payload: int = 0, payload_len: int | None = None, extended: bool = False) -> bytes:
    """Encode one packet (the inverse of :func:`get_packet`). ``payload_len``
    picks 1/2/4/8 bytes for EVENTS and DATA-SOURCE (default: the smallest that
    fits); address and counter packets use the 2-byte extended header when
    ``extended`` or when ``index`` > 7 (5-bit index)."""
    if typ == PAD:
        return b"\x00"
    if typ == END:
        return b"\x01"
    if typ == TIMESTAMP:
        return b"\x71" + (payload & (2**64 - 1)).to_bytes(8, "little")
    if typ in (EVENTS, DATA_SOURCE):
        if payload_len is None:
            payload_len = next(n for n in (1, 2, 4, 8) if payload < 1 << (8 * n))
        base = SPE_HEADER0_EVENTS if typ == EVENTS else SPE_HEADER0_SOURCE
        return bytes([base | _PLEN_SZ[payload_len] << 4]) + payload.to_bytes(payload_len, "little")
    if typ == CONTEXT:
        if not 0 <= index <= 3:
            raise ValueError(f"CONTEXT index {index} out of range 0..3")
        return bytes([SPE_HEADER0_CONTEXT | index]) + payload.to_bytes(4, "little")
    if typ == OP_TYPE:
        if not 0 <= index <= 3:
            raise ValueError(f"OP_TYPE class {index} out of range 0..3")
        return bytes([SPE_HEADER0_OP_TYPE | index]) + payload.to_bytes(1, "little")
    if typ in (ADDRESS, COUNTER):
        base, plen = (SPE_HEADER0_ADDRESS, 8) if typ == ADDRESS else (SPE_HEADER0_COUNTER, 2)
        if not 0 <= index <= 31:
            raise ValueError(f"{PACKET_NAME[typ]} index {index} out of range 0..31")
        body = payload.to_bytes(plen, "little")
        if extended or index > 7:
            return bytes([SPE_HEADER0_EXTENDED | index >> 3, base | (index & 7)]) + body
        return bytes([base | index]) + body
    raise ValueError(f"cannot encode packet type {typ}")


def encode_alignment(offset: int, power: int) -> bytes:
    """An extended-header ALIGNMENT packet at buffer ``offset`` that pads to a
    ``2 ** (power + 1)`` boundary (``power`` 0..3 fits the 2-bit header field),
    followed by the zero bytes it covers. (When the packet covers only its
    first byte, its second byte decodes as a PAD.) The decoder needs at least
    ``2 ** (power + 1)`` bytes left at ``offset`` to accept it."""
    if not 0 <= power <= 3:
        raise ValueError("alignment power must be 0..3")
    alignment = 1 << (power + 1)
    size = alignment - (offset & (alignment - 1))
    out = bytes([SPE_HEADER0_EXTENDED | power, SPE_HEADER1_ALIGNMENT])
    return out + bytes(max(0, size - 2))
