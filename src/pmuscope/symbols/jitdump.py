"""JIT dump files ``/tmp/jit-PID.dump`` (tools/perf/Documentation/jitdump-specification.txt).

A runtime that generates code can describe it in a jitdump instead of (or as
well as) a perf map: a header, then records — ``JIT_CODE_LOAD`` (address,
size, name and the code bytes of one function), ``JIT_CODE_MOVE``,
``JIT_CODE_DEBUG_INFO``, ``JIT_CODE_CLOSE`` and ``JIT_CODE_UNWINDING_INFO``
(.eh_frame and .eh_frame_hdr for the next code load). Linux perf reads them
only through ``perf inject --jit``; pmuscope reads them in-process:
:class:`JitDumpMap` names the loaded functions the way a perf map does.
Writers: CPython 3.13's ``-X perf_jit`` and pmuscope's ``_pyperf`` helper
with ``PMUSCOPE_PYTHON_JITDUMP=1``; also V8, the JVM agents, .NET, LLVM.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from .._plain import Plain
from ..errors import FormatError
from .table import SymbolTable

MAGIC = 0x4A695444  # "JiTD" written in the writer's byte order
JIT_CODE_LOAD, JIT_CODE_MOVE, JIT_CODE_DEBUG_INFO, JIT_CODE_CLOSE, JIT_CODE_UNWINDING_INFO = range(5)

_HEADER = struct.Struct("<IIIIIIQQ")      # magic version total_size elf_mach pad1 pid timestamp flags
_RECORD = struct.Struct("<IIQ")           # id total_size timestamp
_LOAD = struct.Struct("<IIQQQQ")          # pid tid vma code_addr code_size code_index
_MOVE = struct.Struct("<IIQQQQQ")         # pid tid vma old_code_addr new_code_addr code_size code_index
_UNWIND = struct.Struct("<QQQ")           # unwinding_size eh_frame_hdr_size mapped_size


class CodeLoad(Plain):
    """One ``JIT_CODE_LOAD``: ``name`` at ``code_addr`` for ``code_size`` bytes."""

    _fields = ("timestamp", "pid", "tid", "vma", "code_addr", "code_size", "code_index", "name", "code", "unwinding", "eh_frame_hdr_size")

    timestamp: int
    pid: int
    tid: int
    vma: int
    code_addr: int
    code_size: int
    code_index: int
    name: str
    code: bytes
    #: the .eh_frame + .eh_frame_hdr of the ``JIT_CODE_UNWINDING_INFO`` before it, if any
    unwinding: bytes
    eh_frame_hdr_size: int

    def __init__(
        self,
        timestamp: int,
        pid: int,
        tid: int,
        vma: int,
        code_addr: int,
        code_size: int,
        code_index: int,
        name: str,
        code: bytes = b"",
        unwinding: bytes = b"",
        eh_frame_hdr_size: int = 0,
    ) -> None:
        self.timestamp = timestamp
        self.pid = pid
        self.tid = tid
        self.vma = vma
        self.code_addr = code_addr
        self.code_size = code_size
        self.code_index = code_index
        self.name = name
        self.code = code
        self.unwinding = unwinding
        self.eh_frame_hdr_size = eh_frame_hdr_size


class JitDump(Plain):
    _fields = ("pid", "elf_mach", "timestamp", "flags", "loads", "moves", "truncated")

    pid: int
    elf_mach: int
    timestamp: int
    flags: int
    loads: list[CodeLoad]
    moves: int
    truncated: bool

    def __init__(
        self,
        pid: int,
        elf_mach: int,
        timestamp: int,
        flags: int,
        loads: list[CodeLoad] | None = None,
        moves: int = 0,
        truncated: bool = False,
    ) -> None:
        self.pid = pid
        self.elf_mach = elf_mach
        self.timestamp = timestamp
        self.flags = flags
        self.loads = [] if loads is None else loads
        self.moves = moves
        self.truncated = truncated


def parse_jitdump(data: bytes) -> JitDump:
    """Parse a jitdump. A record cut short at the end (the writer is still
    running) ends the parse and sets ``truncated``; a bad header raises
    :class:`~pmuscope.errors.FormatError`."""
    if len(data) < _HEADER.size:
        raise FormatError(f"jitdump: {len(data)} bytes is shorter than its header")
    magic = struct.unpack_from("<I", data)[0]
    if magic != MAGIC:
        if struct.unpack_from(">I", data)[0] == MAGIC:
            raise FormatError("jitdump: written on a machine of the other byte order")
        raise FormatError(f"jitdump: bad magic {magic:#x} (expected {MAGIC:#x})")
    _, version, hsize, mach, _, pid, ts, flags = _HEADER.unpack_from(data)
    if version != 1 or hsize < _HEADER.size or hsize > len(data):
        raise FormatError(f"jitdump: version {version}, header size {hsize}: not a version-1 jitdump")
    out = JitDump(pid=pid, elf_mach=mach, timestamp=ts, flags=flags)
    pos = hsize
    unwind, unwind_hdr = b"", 0
    while pos + _RECORD.size <= len(data):
        rid, size, ts = _RECORD.unpack_from(data, pos)
        if size < _RECORD.size:
            raise FormatError(f"jitdump: record at offset {pos} has size {size}")
        if pos + size > len(data):
            out.truncated = True
            break
        body = pos + _RECORD.size
        if rid == JIT_CODE_LOAD:
            lpid, tid, vma, addr, csize, index = _LOAD.unpack_from(data, body)
            nstart = body + _LOAD.size
            nend = data.find(b"\0", nstart, pos + size)
            if nend < 0:
                raise FormatError(f"jitdump: code load at offset {pos} has no terminated name")
            code = bytes(data[nend + 1:nend + 1 + csize])
            out.loads.append(CodeLoad(ts, lpid, tid, vma, addr, csize, index,
                                      data[nstart:nend].decode("utf-8", "replace"), code, unwind, unwind_hdr))
            unwind, unwind_hdr = b"", 0
        elif rid == JIT_CODE_UNWINDING_INFO:
            usize, hdr_size, _mapped = _UNWIND.unpack_from(data, body)
            ustart = body + _UNWIND.size
            unwind, unwind_hdr = bytes(data[ustart:ustart + usize]), hdr_size
        elif rid == JIT_CODE_MOVE:
            out.moves += 1  # code moved: the names of its old address stay (perf inject does the same)
        elif rid == JIT_CODE_CLOSE:
            pos += size
            break
        pos += size
    else:
        out.truncated = pos != len(data)
    return out


class JitDumpMap:
    """The functions of one process's jitdump as a symbol table (re-read when
    the file grew), like :class:`~pmuscope.symbols.PerfMap` for perf maps."""

    def __init__(self, path: str):
        self.path = path
        self._size = -1
        self._table: SymbolTable | None = None
        self.loads: list[CodeLoad] = []

    @classmethod
    def for_pid(cls, pid: int, tmp_dir: str = "/tmp") -> "JitDumpMap":
        return cls(os.path.join(tmp_dir, f"jit-{pid}.dump"))

    @property
    def dso(self) -> str:
        return self.path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def table(self) -> SymbolTable:
        try:
            size = os.stat(self.path).st_size
        except OSError:
            size = self._size
        if size != self._size or self._table is None:
            self._size = size
            try:
                with open(self.path, "rb") as f:
                    self.loads = parse_jitdump(f.read()).loads
            except (OSError, FormatError):
                self.loads = []
            # a later load at the same address wins, as in a perf map read top to bottom
            last = {ld.code_addr: ld for ld in self.loads}
            starts = sorted(last)
            self._table = SymbolTable.from_arrays(
                np.array(starts, dtype=np.uint64), np.array([last[a].code_size for a in starts], dtype=np.uint64),
                [last[a].name for a in starts], fixup_end=False)
        return self._table
