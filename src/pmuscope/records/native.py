"""The C record walker and sample decoder (``pmuscope._native``).

The numpy code of this package (``decode._walk_vectorized`` / ``decode._walk``,
``sample._decode_group``, ``profile._fastload._next_boundary``) is the
reference: the C functions give the same arrays on the inputs they accept and
return None on anything else (a truncated header, a size below 8 or running
past the chunk, AUXTRACE payloads inline, a sample field running past its
record, a sample layout they do not handle), and the numpy path then decides,
with its usual errors. :data:`NATIVE_DECODE` (or ``PMUSCOPE_NATIVE_DECODE=0``
in the environment) selects the numpy path; without the compiled module it is
the only one.

What the C side does per chunk, in one call each: follow ``header.size``
from record to record (the numpy path finds the same chain among every word
that looks like a header, a dozen array passes per chunk), and copy the
fields of samples whose layout is fixed words plus a call chain (IP, TID,
TIME, ADDR, ID, STREAM_ID, CPU, PERIOD, CALLCHAIN, WEIGHT, DATA_SRC,
TRANSACTION, PHYS_ADDR, CGROUP, page sizes) into their columns.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache

import numpy as np

from ..kernel import abi

NATIVE_DECODE = os.environ.get("PMUSCOPE_NATIVE_DECODE", "1") != "0"

try:
    from .. import _native  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the numpy reference serves
    _native = None
if _native is not None and (not hasattr(_native, "walk_records") or sys.byteorder != "little"):
    _native = None  # a build from before these functions; the C code reads host-order words


def available() -> bool:
    """Whether the compiled helpers are there (whatever :data:`NATIVE_DECODE` says)."""
    return _native is not None


def enabled() -> bool:
    return NATIVE_DECODE and _native is not None


def walk(buf, auxtrace_inline: bool = False):
    """``(sample offsets, sample sizes, side)`` of a chunk of whole records as
    ``decode._walk`` gives them, or None (not enabled, or anything unusual)."""
    if not NATIVE_DECODE or _native is None:
        return None
    r = _native.walk_records(buf, auxtrace_inline)
    if r is None:
        return None
    offs, sizes, side = r
    return np.frombuffer(offs, dtype=np.int64), np.frombuffer(sizes, dtype=np.int64), side


def next_boundary(data, pos: int, cut: int) -> int | None:
    """The first record boundary at or after byte ``cut`` of ``data``,
    following the headers from ``pos``; None when they do not chain cleanly
    (sizes below 8 or not multiples of 8, a record past the data) or when
    not enabled."""
    if not NATIVE_DECODE or _native is None:
        return None
    return _native.next_boundary(data, pos, cut)


_S = abi.PerfSample
#: fields the C decoder copies, in kernel order: (sample_type bits, op, columns)
_FIXED = (
    (int(_S.IDENTIFIER), b"u", (("id", np.uint64),)),
    (int(_S.IP), b"u", (("ip", np.uint64),)),
    (int(_S.TID), b"t", (("pid", np.int32), ("tid", np.int32))),
    (int(_S.TIME), b"u", (("time", np.uint64),)),
    (int(_S.ADDR), b"u", (("addr", np.uint64),)),
    (int(_S.ID), b"u", (("id", np.uint64),)),
    (int(_S.STREAM_ID), b"u", (("stream_id", np.uint64),)),
    (int(_S.CPU), b"c", (("cpu", np.int32),)),
    (int(_S.PERIOD), b"u", (("period", np.uint64),)),
    (int(_S.CALLCHAIN), b"C", ()),
    (int(_S.WEIGHT | _S.WEIGHT_STRUCT), b"u", (("weight", np.uint64),)),
    (int(_S.DATA_SRC), b"u", (("data_src", np.uint64),)),
    (int(_S.TRANSACTION), b"u", (("transaction", np.uint64),)),
    (int(_S.PHYS_ADDR), b"u", (("phys_addr", np.uint64),)),
    (int(_S.CGROUP), b"u", (("cgroup", np.uint64),)),
    (int(_S.DATA_PAGE_SIZE), b"u", (("data_page_size", np.uint64),)),
    (int(_S.CODE_PAGE_SIZE), b"u", (("code_page_size", np.uint64),)),
)
_HANDLED = 0
for _bits, _op, _cols in _FIXED:
    _HANDLED |= _bits


@lru_cache(maxsize=64)
def fixed_layout(sample_type: int, callchains: bool = True) -> tuple[bytes, tuple[tuple[str, type], ...]] | None:
    """``(ops, columns)`` for :func:`_native.sample_fields`, or None when a
    field of ``sample_type`` is not one the C decoder handles (``callchains``
    False: call chains are checked and skipped, not copied)."""
    if sample_type & ~_HANDLED:
        return None
    ops = b""
    cols: list[tuple[str, type]] = []
    for bits, op, names in _FIXED:
        if sample_type & bits:
            ops += op if op != b"C" or callchains else b"S"
            cols.extend(names)
    return ops, tuple(cols)


def sample_columns(buf, offs: np.ndarray, sizes: np.ndarray, sample_type: int, callchains: bool = True):
    """The columns of the SAMPLE records at ``offs`` (all of ``sample_type``)
    as ``(misc, {name: array}, callchain, callchain_offsets)`` — the arrays
    ``sample._decode_group`` and ``_gather`` make — or None (not enabled, a
    layout the C decoder does not handle, or a field past its record)."""
    if not NATIVE_DECODE or _native is None:
        return None
    layout = fixed_layout(sample_type, callchains)
    if layout is None:
        return None
    ops, names = layout
    n = len(offs)
    cols: dict[str, np.ndarray] = {}
    bufs = []
    for name, dtype in names:
        arr = cols.get(name)
        if arr is None:
            arr = cols[name] = np.empty(n, dtype=dtype)
        bufs.append(arr)
    misc = np.empty(n, dtype=np.uint16)
    r = _native.sample_fields(buf, np.ascontiguousarray(offs, dtype=np.int64),
                              np.ascontiguousarray(sizes, dtype=np.int64), ops, tuple(bufs), misc)
    if r is None:
        return None
    chain, chain_off = r
    if chain is not None:
        chain = np.frombuffer(chain, dtype=np.uint64)
        chain_off = np.frombuffer(chain_off, dtype=np.int64)
    return misc, cols, chain, chain_off
