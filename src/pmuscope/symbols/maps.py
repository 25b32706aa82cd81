"""Process address spaces built from MMAP/MMAP2 side-band records (or from
``/proc/PID/maps``), with perf's rules for fork, exec and overlapping maps.

A :class:`Mapping` is ``[start, start + len)`` of ``filename`` at file
offset ``pgoff``; an ip in it sits at file offset ``ip - start + pgoff``.
:class:`Maps` keeps one :class:`AddressSpace` per pid: FORK copies the
parent's (a new thread with the same pid shares it), COMM with the exec flag
empties it, and a new mapping replaces the parts of older ones it overlaps
(perf's ``maps__fixup_overlappings``).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from ..errors import FormatError, ProcessGoneError

if TYPE_CHECKING:
    import numpy as np

#: the top of a 64-bit address space (ends of damaged mappings are clamped to it)
U64_MAX = (1 << 64) - 1

PROT_EXEC = 4
MAP_HUGETLB = 0x40000

_R_MMAP, _R_COMM, _R_FORK, _R_MMAP2, _R_KSYMBOL = 1, 3, 7, 10, 17  # enum perf_event_type
_CPUMODE_MASK, _MISC_KERNEL = 7, 1
_MISC_MMAP_DATA = _MISC_COMM_EXEC = 1 << 13
_KSYMBOL_UNREGISTER = 1

#: file names perf treats as anonymous memory (JIT code lives there)
ANON_NAMES = ("//anon", "/dev/zero", "/anon_hugepage", "[anon:")


class Mapping:
    """One memory mapping of a process (immutable: :meth:`replace` makes a changed copy).

    Written out by hand rather than as a frozen dataclass: importing
    ``dataclasses`` is ~6 ms, a tenth of a small report (see
    :mod:`pmuscope.profile.lite`)."""

    __slots__ = ("start", "len", "pgoff", "filename", "prot", "flags", "build_id", "maj", "min", "ino",
                 "ino_generation")

    start: int
    len: int
    pgoff: int
    filename: str
    prot: int
    flags: int
    build_id: str | None
    maj: int
    min: int
    ino: int
    ino_generation: int

    def __init__(self, start: int, len: int, pgoff: int, filename: str, prot: int = PROT_EXEC, flags: int = 0,
                 build_id: str | None = None, maj: int = 0, min: int = 0, ino: int = 0,
                 ino_generation: int = 0) -> None:
        put = object.__setattr__
        put(self, "start", start)
        put(self, "len", len)
        put(self, "pgoff", pgoff)
        put(self, "filename", filename)
        put(self, "prot", prot)
        put(self, "flags", flags)
        put(self, "build_id", build_id)
        put(self, "maj", maj)
        put(self, "min", min)
        put(self, "ino", ino)
        put(self, "ino_generation", ino_generation)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"Mapping is immutable: cannot set {name!r} (use replace())")

    def _astuple(self) -> tuple:
        return tuple(getattr(self, f) for f in self.__slots__)

    def replace(self, **changes) -> "Mapping":
        """A copy with ``changes`` applied (``dataclasses.replace`` of a frozen dataclass)."""
        kw = {f: getattr(self, f) for f in self.__slots__}
        kw.update(changes)
        return Mapping(**kw)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._astuple() == other._astuple()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._astuple())

    def __repr__(self) -> str:
        return "Mapping(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__slots__) + ")"

    @property
    def end(self) -> int:
        return self.start + self.len

    @property
    def is_anon(self) -> bool:
        """True for anonymous memory (perf: ``is_anon_memory``), where JIT code lives."""
        f = self.filename
        return not f or f.startswith(ANON_NAMES) or f.startswith("/memfd:")

    @property
    def identity(self) -> bool:
        """perf maps addresses in this mapping to themselves (``identity__map_ip``):
        anonymous memory (``//anon``, ``/dev/zero``, ``/anon_hugepage``, MAP_HUGETLB)
        and memory without a DSO (``[stack...``, ``/SYSV...``, ``[heap]``), util/map.c
        ``map__new``. Elsewhere a map-relative address is ``ip - start + pgoff``."""
        f = self.filename
        return (f == "//anon" or f.startswith(("/dev/zero", "/anon_hugepage", "[stack", "/SYSV"))
                or f == "[heap]" or bool(self.flags & MAP_HUGETLB))

    @property
    def is_special(self) -> bool:
        """``[vdso]``, ``[heap]``, ``[stack]``, ``[vsyscall]`` and the like."""
        return self.filename.startswith("[") and not self.filename.startswith("[anon:")


def _start_of(m: Mapping) -> int:
    return m.start


def _end_of(m: Mapping) -> int:
    return m.start + m.len


class AddressSpace:
    """The mappings of one process, sorted by start, with vectorized lookup."""

    def __init__(self, mappings: list[Mapping] | None = None):
        self._maps: list[Mapping] = sorted(mappings or [], key=lambda m: m.start)
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self.generation = 0
        # sorted, non-empty and non-overlapping: insert() then only visits the overlapped mappings
        self._disjoint = all(m.len > 0 for m in self._maps) and \
            all(a.start + a.len <= b.start for a, b in zip(self._maps, self._maps[1:]))

    def __len__(self) -> int:
        return len(self._maps)

    def __iter__(self):
        return iter(self._maps)

    def __getitem__(self, i: int) -> Mapping:
        return self._maps[i]

    def copy(self) -> "AddressSpace":
        return AddressSpace(list(self._maps))

    def clear(self) -> None:
        self._maps = []
        self._disjoint = True
        self._touch()

    def _touch(self) -> None:
        self._arrays = None
        self.generation += 1

    def insert(self, m: Mapping) -> None:
        """Add a mapping; older mappings it overlaps are trimmed or dropped."""
        if m.len <= 0:
            return
        if self._disjoint:
            maps = self._maps
            lo = bisect_right(maps, m.start, key=_end_of)  # maps[:lo] end at or before m
            hi = bisect_left(maps, m.end, lo, key=_start_of)  # maps[hi:] start at or after its end
            mid = []
            for old in maps[lo:hi]:
                if old.start < m.start:
                    mid.append(old.replace(len=m.start - old.start))
                if old.end > m.end:
                    cut = m.end - old.start
                    mid.append(old.replace(start=m.end, len=old.end - m.end, pgoff=(old.pgoff + cut) & U64_MAX))
            mid.append(m)
            mid.sort(key=_start_of)
            self._maps = maps[:lo] + mid + maps[hi:]
            self._touch()
            return
        out = []
        for old in self._maps:
            if old.end <= m.start or old.start >= m.end:
                out.append(old)
                continue
            if old.start < m.start:  # left remainder
                out.append(old.replace(len=m.start - old.start))
            if old.end > m.end:  # right remainder, its file offset moves too
                cut = m.end - old.start
                out.append(old.replace(start=m.end, len=old.end - m.end, pgoff=(old.pgoff + cut) & U64_MAX))
        out.append(m)
        out.sort(key=lambda x: x.start)
        self._maps = out
        self._touch()

    def remove(self, start: int, length: int) -> None:
        """Forget ``[start, start + length)`` (munmap is no perf record, but a
        live tool may know of it)."""
        self.insert(Mapping(start, length, 0, "\0munmap"))
        self._maps = [x for x in self._maps if x.filename != "\0munmap"]
        self._touch()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, ends)`` as uint64 arrays (cached until the next change)."""
        import numpy as np

        if self._arrays is None:
            # a damaged MMAP's start + len can pass 2^64: its end is the top of the space
            self._arrays = (np.array([m.start for m in self._maps], dtype=np.uint64),
                            np.array([min(m.end, U64_MAX) for m in self._maps], dtype=np.uint64))
        return self._arrays

    def find_many(self, ips: np.ndarray) -> np.ndarray:
        """Index of the mapping holding each ip, -1 for none."""
        import numpy as np

        ips = np.asarray(ips, dtype=np.uint64)
        starts, ends = self.arrays()
        if not len(starts):
            return np.full(len(ips), -1, dtype=np.int64)
        idx = np.searchsorted(starts, ips, side="right").astype(np.int64) - 1
        safe = np.maximum(idx, 0)
        ok = (idx >= 0) & (ips < ends[safe])
        return np.where(ok, idx, -1)

    def find(self, ip: int) -> Mapping | None:
        """The mapping holding ``ip`` (the last one starting at or below it, if
        ``ip`` is inside it: :meth:`find_many`'s rule), or None."""
        maps = self._maps
        i = bisect_right(maps, ip, key=_start_of) - 1
        if i < 0:
            return None
        m = maps[i]
        return m if ip < min(m.start + m.len, U64_MAX) else None

    @classmethod
    def from_proc_maps(cls, pid: int | str = "self", procfs_root: str = "/proc") -> "AddressSpace":
        """Read ``PROCFS_ROOT/PID/maps`` of a live process."""
        path = os.path.join(procfs_root, str(pid), "maps")
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError as err:
            raise ProcessGoneError(f"process {pid} does not exist ({path} is missing)",
                                   pid=pid) from err
        return cls.parse_proc_maps(text, source=path)

    @classmethod
    def parse_proc_maps(cls, text: str, source: str = "maps") -> "AddressSpace":
        """Parse the text of a ``/proc/PID/maps`` file."""
        maps = []
        for lineno, line in enumerate(text.splitlines(), 1):
            parts = line.split(None, 5)
            if not parts:
                continue
            try:
                lo, hi = parts[0].split("-")
                perms, off, dev, ino = parts[1], parts[2], parts[3], parts[4]
                maj, mnr = dev.split(":")
                prot = (1 if perms[0] == "r" else 0) | (2 if perms[1] == "w" else 0) | \
                    (PROT_EXEC if perms[2] == "x" else 0)
                start = int(lo, 16)
                name = parts[5].strip() if len(parts) > 5 else ""
                if name.endswith(" (deleted)"):
                    name = name[:-10]
                maps.append(Mapping(start, int(hi, 16) - start, int(off, 16), name or "//anon",
                                    prot=prot, maj=int(maj, 16), min=int(mnr, 16),
                                    ino=int(ino)))
            except (ValueError, IndexError) as err:
                raise FormatError(f"{source} line {lineno}: expected 'start-end perms offset "
                                  f"dev inode [path]', got {line!r}", offset=lineno) from err
        return cls(maps)


class Maps:
    """Address spaces of every process seen in a recording, keyed by pid.

    Feed side-band records in time order through :meth:`mmap2`,
    :meth:`fork`, :meth:`comm` and :meth:`exit`.
    """

    def __init__(self):
        self.spaces: dict[int, AddressSpace] = {}
        #: kernel MMAPs (pid -1: ``[kernel.kallsyms]_text``, modules), in arrival order
        self.kernel_maps: list[Mapping] = []
        #: PERF_RECORD_KSYMBOL registrations (BPF programs, trampolines): addr -> (len, name)
        self.ksymbols: dict[int, tuple[int, str]] = {}
        self.ksymbols_generation = 0

    def __contains__(self, pid: int) -> bool:
        return pid in self.spaces

    def space(self, pid: int) -> AddressSpace:
        """The address space of ``pid`` (created empty when new)."""
        s = self.spaces.get(pid)
        if s is None:
            s = self.spaces[pid] = AddressSpace()
        return s

    def mmap2(self, pid: int, start: int, len: int, pgoff: int, filename: str, *,
              prot: int = PROT_EXEC, flags: int = 0, build_id: str | bytes | None = None,
              maj: int = 0, min: int = 0, ino: int = 0, ino_generation: int = 0) -> Mapping:
        """A PERF_RECORD_MMAP2 (or MMAP: leave the inode fields at 0)."""
        if isinstance(build_id, (bytes, bytearray)):
            build_id = bytes(build_id).hex() or None
        m = Mapping(start, len, pgoff, filename, prot, flags, build_id, maj, min, ino,
                    ino_generation)
        self.space(pid).insert(m)
        return m

    mmap = mmap2

    def apply(self, record) -> bool:
        """Update from a decoded side-band record (``pmuscope.records``:
        Mmap, Mmap2, Comm, Fork, Ksymbol); other records are ignored.
        Returns True when the record changed something."""
        rtype = getattr(record, "type", None)
        if rtype in (_R_MMAP, _R_MMAP2):
            pid = record.pid
            if pid in (-1, 0xFFFFFFFF) or (record.misc & _CPUMODE_MASK) == _MISC_KERNEL:
                self.kernel_maps.append(Mapping(record.addr, record.len, record.pgoff,
                                                record.filename))
                return True
            if rtype == _R_MMAP:
                self.mmap2(pid, record.addr, record.len, record.pgoff, record.filename,
                           prot=PROT_EXEC if not record.misc & _MISC_MMAP_DATA else 1)
                return True
            self.mmap2(pid, record.addr, record.len, record.pgoff, record.filename,
                       prot=record.prot, flags=record.flags, build_id=record.build_id,
                       maj=record.maj or 0, min=record.min or 0, ino=record.ino or 0,
                       ino_generation=record.ino_generation or 0)
            return True
        if rtype == _R_COMM:
            if record.misc & _MISC_COMM_EXEC:
                self.comm(record.pid, exec=True)
                return True
            return False
        if rtype == _R_FORK:
            self.fork(record.pid, record.ppid)
            return True
        if rtype == _R_KSYMBOL:
            if record.flags & _KSYMBOL_UNREGISTER:
                self.ksymbols.pop(record.addr, None)
            else:
                self.ksymbols[record.addr] = (record.len, record.name)
            self.ksymbols_generation += 1
            return True
        return False

    def fork(self, pid: int, ppid: int) -> None:
        """A PERF_RECORD_FORK: a new process gets a copy of its parent's maps;
        a new thread (pid == ppid) shares them already."""
        if pid == ppid:
            return
        parent = self.spaces.get(ppid)
        self.spaces[pid] = parent.copy() if parent is not None else AddressSpace()

    def comm(self, pid: int, exec: bool) -> None:
        """A PERF_RECORD_COMM; with PERF_RECORD_MISC_COMM_EXEC the old image is gone."""
        if exec and pid in self.spaces:
            self.spaces[pid].clear()

    def exit(self, pid: int) -> None:
        """A PERF_RECORD_EXIT. The maps are kept, as perf keeps dead threads:
        samples of the exiting task may still follow in the stream; a reused
        pid starts over with its FORK."""

    def add_proc(self, pid: int, procfs_root: str = "/proc") -> AddressSpace:
        """Load a live process's maps from ``/proc/PID/maps``."""
        s = self.spaces[pid] = AddressSpace.from_proc_maps(pid, procfs_root)
        return s
