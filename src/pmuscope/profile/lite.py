"""``pmuscope report`` of a small perf.data file without numpy.

why: ``import numpy`` alone is ~40-60 ms here, more than five times what
``perf report --stdio`` takes on a file of a few tens of samples (~11-14 ms).
For such a file this module computes the overhead table with plain Python:
it reads the records with ``struct`` (:class:`~pmuscope.perfdata.PerfDataFile`,
:func:`~pmuscope.records.types.parse_sideband`,
:func:`~pmuscope.records._scalar.parse_sample`), keeps comms and address
spaces (:class:`~pmuscope.symbols.maps.Maps`) as
:class:`~pmuscope.profile.model.ProfileBuilder` does, reads only the ELF
symbols near the sampled addresses and prints through
:mod:`pmuscope.profile.report_format`, the module the numpy path prints with.

It is a second implementation of what the numpy path computes, so it is kept
to a narrow, common case and *declines* (raises :class:`Decline`; the command
then takes the numpy path, the reference) on anything else:

* a regular file in file mode, its data section at most
  :data:`MAX_DATA_BYTES`, not compressed, one event (attr) whose samples hold
  only IP, TID, TIME (required), ID, STREAM_ID, CPU, PERIOD, IDENTIFIER or
  ADDR, with ``sample_id_all``; no call chains, branch stacks, registers,
  stacks, raw or aux data;
* user-mode samples only (no kernel, guest or hypervisor sample), each in a
  file-backed mapping of its process (no anonymous/JIT memory, no ``[vdso]``
  or other special mapping, no address without a mapping), of a thread with
  a known comm;
* 64-bit little-endian ELF files (or none at all: the address is then
  unresolved, as on the numpy path), their symbols taken from the file
  :func:`~pmuscope.symbols.dso.find_symtab` picks (own ``.symtab``, debug
  file by build-id/debuglink, build-id cache, ``.dynsym``), one symbol per
  address by perf's rules (``SymbolTable.from_elf``, with the synthesized
  ``name@plt`` symbols of ``ElfFile.plt_symbols`` and ``dso._with_plt``);
* records only of the kinds a plain ``perf record`` writes, each side-band
  record time-stamped, and no record older than a round already flushed
  (perf's FINISHED_ROUND rule then orders everything by time, which is what
  is done here: side-band records before samples of the same time);
* a table whose rows are told apart by what they print (no two rows with the
  same text, no pid/tid row whose threads had different comms).

The options it takes are the table's: ``--stdio``, ``--json``, ``-n``,
``--sort``, ``--percent-limit``, ``--pid``/``--tid``/``--comm``/``--cpu``/``--time``;
the command hands everything else to the numpy path. ``PMUSCOPE_REPORT_LITE=0``
turns this path off.

``script`` reads and resolves the file with the same step (:func:`resolve`)
and prints ``profile/script.py``'s text of it (:func:`script`): the default
fields or ``-F`` lists without ``trace``, ``-G``, the filters ``--pid``/``--tid``/
``--comm``/``--cpu``/``--time``; it declines tracepoint events too.
``PMUSCOPE_SCRIPT_LITE=0`` turns that off.
"""

from __future__ import annotations

import os
import sys
import warnings
from bisect import bisect_left, bisect_right

from ..kernel import abi
# MAX_DATA_BYTES: files whose data section is larger go to the numpy path
from . import LITE_MAX_DATA_BYTES as MAX_DATA_BYTES, lite_candidate
from .report_format import (DEFAULT_SORT, Report, ReportRow, cpu_label, format_report, name_key, report_json,
                            short_dso_name, thread_label, thread_widths)

R = abi.PerfRecord
S = abi.PerfSample
_M64 = (1 << 64) - 1
_USER = abi.PERF_RECORD_MISC_USER
_CPUMODE_MASK = abi.PERF_RECORD_MISC_CPUMODE_MASK
_MMAP_DATA = abi.PERF_RECORD_MISC_MMAP_DATA
#: sample_type bits this path decodes (IP, TID and TIME are required too)
_SAMPLE_BITS = int(S.IP | S.TID | S.TIME | S.ID | S.STREAM_ID | S.CPU | S.PERIOD | S.IDENTIFIER | S.ADDR)
_NEEDED_BITS = int(S.IP | S.TID | S.TIME)
#: records whose content does not change the table (besides LOST/LOST_SAMPLES, counted)
_IGNORED = frozenset(int(t) for t in (R.EXIT, R.THROTTLE, R.UNTHROTTLE, R.SWITCH, R.SWITCH_CPU_WIDE,
                                      R.NAMESPACES, R.KSYMBOL, R.BPF_EVENT, R.CGROUP, R.FINISHED_INIT,
                                      R.ID_INDEX, R.THREAD_MAP, R.CPU_MAP, R.TIME_CONV, R.HEADER_BUILD_ID,
                                      R.EVENT_UPDATE))  # EVENT_UPDATE: names are read from it in pipe mode only
_STATE = frozenset(int(t) for t in (R.MMAP, R.MMAP2, R.COMM, R.FORK))
#: addresses of the symbol table looked at, down from a sampled address (or up from a
#: zero-sized symbol), for a function: each costs a scan of the table (code is dense with
#: functions; an address among many data objects declines instead)
_MAX_WALK = 64
#: ELF sections whose addresses get synthesized ``name@plt`` symbols on the numpy path
_PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got")
#: event types of plain counters and tracepoints (no AUX-area PMU)
_PLAIN_TYPES = (abi.PERF_TYPE_HARDWARE, abi.PERF_TYPE_SOFTWARE, abi.PERF_TYPE_TRACEPOINT, abi.PERF_TYPE_HW_CACHE,
                abi.PERF_TYPE_RAW, abi.PERF_TYPE_BREAKPOINT)


class Decline(Exception):
    """The input or the options are outside what this path handles: use the numpy path."""


def enabled() -> bool:
    """False when ``PMUSCOPE_REPORT_LITE=0`` (the numpy path only: the reference)."""
    return os.environ.get("PMUSCOPE_REPORT_LITE", "1") != "0"


# --- symbols -------------------------------------------------------------------------
class LiteDso:
    """An ELF file and where its symbols come from, read only around the
    addresses asked for (:meth:`lookup`); what :func:`~pmuscope.symbols.dso.load_elf_dso`
    and ``SymbolTable.from_elf`` give for those addresses."""

    def __init__(self, path: str, elf, build_id: str | None, found) -> None:
        self.path = path
        self.elf = elf
        self.build_id = build_id
        self.found = found  # (ElfFile, section, how) or None: no symbols
        self._syms = None
        self._plt: list | None = None

    def map_to_vaddr(self, ip: int, start: int, pgoff: int) -> int:
        """``ElfDso.map_to_vaddr`` of one address (``offset_to_vaddr`` through the PT_LOAD segments)."""
        from ..symbols.elf import PF_X

        elf = self.elf
        text = [s for s in elf.load_segments if s.p_flags & PF_X]
        if text and all(s.p_filesz == 0 and s.p_memsz > 0 for s in text):
            raise Decline("a debug-only file")
        off = (ip - start + pgoff) & _M64
        loads = sorted(elf.load_segments, key=lambda s: s.p_offset)
        i = bisect_right([s.p_offset for s in loads], off) - 1
        if i < 0:
            return off
        s = loads[i]
        return (off + ((s.p_vaddr - s.p_offset) & _M64)) & _M64

    def _load(self):
        if self._syms is not None:
            return self._syms
        from ..errors import FormatError

        try:
            return self._read_symbols()
        except FormatError:  # load_elf_dso's caller keeps no symbols then
            raise Decline("an unreadable symbol table") from None

    def _read_symbols(self):
        from ..symbols.elf import SHF_ALLOC, SHF_COMPRESSED

        symfile, section, _ = self.found
        if not (symfile.elf64 and symfile.little_endian and self.elf.elf64 and self.elf.little_endian) or \
                sys.byteorder != "little":  # the table is read as native 64-bit words
            raise Decline("not a 64-bit little-endian ELF file")
        sec = symfile.section(section)
        if sec.sh_flags & SHF_COMPRESSED or (sec.sh_entsize and sec.sh_entsize != 24) or \
                not 0 < sec.sh_link < len(symfile.sections):
            raise Decline("an unusual symbol table")
        count = sec.sh_size // 24
        data = symfile.read(sec.sh_offset, count * 24, f"section {section}")
        strtab = symfile.section_data(symfile.sections[sec.sh_link])
        if not strtab:
            raise Decline("an empty string table")
        words = memoryview(data).cast("Q")
        labels = [0 if not s.sh_flags & SHF_ALLOC else 1 if "text" in s.name else 2 if "data" in s.name else 0
                  for s in symfile.sections]
        values = words[1::3].tolist()
        # where PLT symbols can be: the PLT sections (.plt and .plt.sec: as far as
        # .rela.plt's entries reach, should that pass the section's end)
        rel = self.elf.section(".rela.plt") or self.elf.section(".rel.plt")
        slots = rel.sh_size // (rel.sh_entsize or 8) if rel is not None else 0
        plt = [(s.sh_addr, s.sh_addr + s.sh_size if s.name == ".plt.got" else
                max(s.sh_addr + s.sh_size, s.sh_addr + 32 + slots * max(16, s.sh_entsize)))
               for s in self.elf.sections if s.name in _PLT_SECTIONS]
        self._syms = (words, values, sorted(values), strtab, labels, plt)  # sorted with repeats: cheaper than a set
        return self._syms

    def _wanted(self, j: int) -> bool:
        """Whether symbol ``j`` is one ``SymbolTable.from_elf`` keeps (include_objects=False)."""
        words, values, _, strtab, labels, _ = self._syms
        w = words[3 * j]
        name_off, info, other, shndx = w & 0xFFFFFFFF, (w >> 32) & 0xFF, (w >> 40) & 0xFF, w >> 48
        stt = info & 0xF
        ok = stt in (2, 10) and shndx != 0 and (shndx < 0xFF00 or shndx == 0xFFF1)  # FUNC, GNU_IFUNC
        if not ok and labels:  # perf's code labels: NOTYPE, visible, in an allocated "text" section
            ok = stt == 0 and name_off != 0 and shndx != 0 and shndx < len(labels) and \
                (other & 3) not in (1, 2) and labels[shndx] == 1
        return ok and values[j] != 0 and name_off < len(strtab) and strtab[name_off] != 0x24  # "$"

    def _at(self, v: int) -> list[int]:
        """Indexes of the wanted symbols at address ``v``."""
        values, starts = self._syms[1], self._syms[2]
        out, j = [], -1
        for _ in range(bisect_right(starts, v) - bisect_left(starts, v)):  # as many as there are
            j = values.index(v, j + 1)
            if self._wanted(j):
                out.append(j)
        return out

    def _keyed(self, cands: list[int]) -> list[tuple]:
        """``(perf's preference key, size, raw name)`` of symbols ``cands``
        (``from_elf``'s lexsort: sized, not weak, global, fewer leading
        underscores, longer name, then the first)."""
        words, _, _, strtab, _, _ = self._syms
        out = []
        for j in cands:
            w = words[3 * j]
            off, bind, size = w & 0xFFFFFFFF, (w >> 36) & 0xF, words[3 * j + 2]
            e = strtab.find(b"\0", off)
            nlen = (len(strtab) if e < 0 else e) - off
            under = 0
            for k in range(3):
                if under == k and strtab[min(off + k, len(strtab) - 1)] == 0x5F and nlen > k:
                    under += 1
            name = strtab[off:off + nlen].decode("utf-8", "replace")
            out.append(((-(size > 0), bind == 2, -(bind == 1), under, -nlen, j), size, name))
        return out

    def _plt_entries(self) -> list[tuple[int, int, str, int]]:
        """``(address, size, name, index)`` of the synthesized ``name@plt``
        symbols (``dso._with_plt``), by address; read when an address asks."""
        if self._plt is None:
            from ..errors import FormatError

            try:
                plt = self.elf.plt_symbols()
            except FormatError:
                plt = []
            n = len(self._syms[1])
            self._plt = sorted(((a, z, name, n + k) for k, (a, z, name, _) in enumerate(plt)), key=lambda e: e[0])
            self._plt_addend = {n + k: add for k, (_, _, _, add) in enumerate(plt)}
        return self._plt

    def _ifunc_name(self, addend: int) -> str | None:
        """The name ``dso._with_plt`` gives an IRELATIVE PLT slot: the
        function (an IFUNC first, then global, weak, fewest leading
        underscores, longest name) at its resolver's address ``addend``."""
        words, values, starts, strtab, _, _ = self._syms
        best, j = None, -1
        for _ in range(bisect_right(starts, addend) - bisect_left(starts, addend)):
            j = values.index(addend, j + 1)
            w = words[3 * j]
            stt, bind, off = (w >> 32) & 0xF, (w >> 36) & 0xF, w & 0xFFFFFFFF
            if stt not in (2, 10):  # STT_FUNC, STT_GNU_IFUNC
                continue
            e = strtab.find(b"\0", off)
            name = strtab[off:e if e >= 0 else len(strtab)].decode("utf-8", "replace")
            key = (stt != 10, {1: 0, 2: 1}.get(bind, 2), len(name) - len(name.lstrip("_")), -len(name), name)
            if best is None or key < best:
                best = key
        return None if best is None else best[-1]

    def _plt_keyed(self, entries) -> list[tuple]:
        out = []
        for a, z, name, idx in entries:
            if not name:  # an IRELATIVE slot (an IFUNC such as libc's strcmp)
                ifunc = self._ifunc_name(self._plt_addend[idx])
                name = f"{ifunc}@plt" if ifunc is not None else f"offset_{a:#x}@plt"
            if name[0] == "$":
                raise Decline("a PLT symbol perf's '$' rule leaves out")
            raw = name.encode()
            under = 0
            for k in range(3):
                if under == k and len(raw) > k and raw[k] == 0x5F:
                    under += 1
            out.append(((-(z > 0), False, -1, under, -len(raw), idx), z, name))
        return out

    def lookup(self, q: int) -> tuple[int, str] | None:
        """``(symbol start, raw name)`` of the symbol holding link-time address
        ``q``, or None (no symbol covers it): ``SymbolTable.from_elf`` of the
        table plus its PLT symbols, asked for one address."""
        if self.found is None:
            return None
        _, _, starts, _, _, plt_ranges = self._load()
        i = bisect_right(starts, q) - 1
        cands: list[int] = []
        for _ in range(_MAX_WALK):
            if i < 0 or starts[i] == 0:
                break
            cands = self._at(starts[i])
            if cands:
                break
            i = bisect_left(starts, starts[i]) - 1  # the next lower address
        else:
            raise Decline("an address far from every function (data?)")
        s = starts[i] if cands else 0
        keyed = self._keyed(cands)
        plt = None
        if any(lo <= q and hi > s for lo, hi in plt_ranges):
            plt = self._plt_entries()
            k = bisect_right([e[0] for e in plt], q)
            if k and plt[k - 1][0] >= s:
                sp = plt[k - 1][0]
                at = [e for e in plt if e[0] == sp]
                keyed = (keyed if sp == s else []) + self._plt_keyed(at)
                s = sp
        if not keyed:
            return None
        key, size, name = min(keyed)
        if size:
            end = (s + size) & _M64
        else:  # perf's symbols__fixup_end: up to the next symbol
            end = None
            k = bisect_right(starts, s)
            for _ in range(_MAX_WALK):
                if k >= len(starts):
                    break
                if self._at(starts[k]):
                    end = starts[k]
                    break
                k = bisect_right(starts, starts[k])  # the next higher address
            else:
                raise Decline("a zero-sized symbol far from the next function")
            if any(lo < (end if end is not None else _M64) and hi > s for lo, hi in plt_ranges):
                nxt = [e[0] for e in self._plt_entries() if e[0] > s]
                if nxt and (end is None or nxt[0] < end):
                    end = nxt[0]
            if end is None:  # perf: the last zero-sized symbol ends at roundup(start, 4096) + 4096
                end = (((s + 4095) & ~4095) + 4096) & _M64
        if q >= end:
            return None
        return s, name


def _load_dso(path: str, *, debug_root: str, buildid_dir: str | None, expect_build_id: str | None) -> LiteDso:
    """The :class:`~pmuscope.symbols.dso.DsoCache` loader of this path (``load_elf_dso``'s signature)."""
    from ..symbols.dso import find_symtab
    from ..symbols.elf import ElfFile

    elf = ElfFile.open(path)
    build_id = elf.build_id
    return LiteDso(path, elf, build_id, find_symtab(path, elf, build_id, debug_root=debug_root,
                                                     buildid_dir=buildid_dir, expect_build_id=expect_build_id))


def _sym_label(name: str) -> str:
    """``Symbolizer.sym_name``: the name demangled (the demangler is imported
    only for a name it would change)."""
    base = name.partition("@")[0]
    if base.startswith(("_Z", "__Z", "_R", "__R")):
        from ..symbols.demangle import demangle

        return demangle(name)
    return name


# --- reading -----------------------------------------------------------------------------
class _Sample:
    __slots__ = ("time", "pid", "tid", "cpu", "period", "ip")


def _read(path: str):
    """``(event name, lost, time-ordered items, sample_type, attr type)`` of
    the file; items are ``(time, 0, seq, side-band record)`` and ``(time, 1,
    seq, _Sample)``."""
    from ..perfdata import Feature
    from ..perfdata.reader import PerfDataFile
    from ..records._scalar import parse_sample
    from ..records.attrs import AttrTable
    from ..records.types import parse_sideband

    # the reader's warnings (a damaged header section or record) are the numpy path's to print
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # not the reader's: an unrelated object's file closed by the garbage collector meanwhile
        # (a ResourceWarning here made the path decline at random)
        warnings.simplefilter("ignore", ResourceWarning)
        return _read_records(path, caught, Feature, PerfDataFile, parse_sample, AttrTable, parse_sideband)


def _read_records(path, caught, Feature, PerfDataFile, parse_sample, AttrTable, parse_sideband):
    pf = PerfDataFile(path)
    try:
        if caught or pf.feature_errors:
            raise Decline("a damaged header (the numpy path reports it)")
        h = pf.header
        if pf.pipe or pf.directory_format or Feature.COMPRESSED in h.feature_bits:
            raise Decline("pipe mode, directory or compressed data")
        if h.data.size > MAX_DATA_BYTES:
            raise Decline("a large file")
        if len(pf.attrs) != 1:
            raise Decline("several events")
        a = pf.attrs[0].attr
        st = int(a.sample_type)
        if st & ~_SAMPLE_BITS or st & _NEEDED_BITS != _NEEDED_BITS or not a.sample_id_all or \
                int(a.type) not in _PLAIN_TYPES:
            raise Decline("a sample layout outside the plain case")
        table = AttrTable([(x.attr, x.ids) for x in pf.attrs], names=[x.name for x in pf.attrs])
        entry = table[0]
        default_period = max(int(a.sample_period), 1) if not a.freq else 1
        has_period = bool(st & S.PERIOD)
        lost = lost_samples = 0
        items: list[tuple] = []
        seq = 0
        max_time = next_flush = 0
        flushed = -1  # newest time of the rounds the numpy path has resolved so far
        for type_, misc, mv, off in pf.raw_records():
            if type_ == R.SAMPLE:
                if misc & _CPUMODE_MASK != _USER:
                    raise Decline("a sample that is not in user mode")
                d = parse_sample(mv, 0, len(mv), entry, off)
                s = _Sample()
                s.time, s.pid, s.tid, s.ip = d["time"], d["pid"], d["tid"], d["ip"]
                s.cpu = d.get("cpu", -1)
                p = d["period"] if has_period else default_period
                s.period = p or 1
                t = s.time
                kind = 1
                rec = s
            elif type_ in _STATE:
                rec = parse_sideband(mv, 0, type_, misc, len(mv), table, off)
                if rec is None or rec.sample_id is None or rec.sample_id.time is None:
                    raise Decline("a damaged or untimed side-band record")
                t = rec.sample_id.time
                kind = 0
            elif type_ == R.FINISHED_ROUND:
                flushed = max(flushed, next_flush)
                next_flush = max_time
                continue
            elif type_ in (R.LOST, R.LOST_SAMPLES):
                rec = parse_sideband(mv, 0, type_, misc, len(mv), table, off)
                if rec is None:
                    raise Decline("a damaged LOST record")
                if type_ == R.LOST:
                    lost += rec.lost
                else:
                    lost_samples += rec.lost
                continue
            elif type_ in _IGNORED:
                continue
            else:
                raise Decline(f"a record of type {type_}")
            if t <= flushed:
                raise Decline("a record older than a flushed round")
            if t > max_time:
                max_time = t
            seq += 1
            items.append((t, kind, seq, rec))
        if pf.data_error is not None or caught:
            raise Decline("damaged data (the numpy path reports it)")
        name = pf.event_names[0]
    finally:
        pf.close()
    items.sort(key=lambda x: x[:3])
    return name, lost_samples or lost, items, st, int(a.type)


# --- the file read and resolved (report and script) ------------------------------------------
class Resolved:
    """A small file read and its samples resolved to mappings: what ``report``
    and ``script`` print from. ``picked``: ``(sample, comm, frame)`` of each
    sample the filters keep, in the numpy path's order (time; side-band
    records first); ``frame``: ``(mapping's file name, LiteDso, link-time
    address, map-relative address)``, or ``(file name, None, map-relative
    address)`` when the file could not be read; ``comm_of``: each thread's
    last name."""

    __slots__ = ("event", "lost", "picked", "comm_of", "sample_type", "attr_type")

    def __init__(self, event, lost, picked, comm_of, sample_type, attr_type) -> None:
        self.event, self.lost, self.picked, self.comm_of = event, lost, picked, comm_of
        self.sample_type, self.attr_type = sample_type, attr_type


def symbol(frame: tuple) -> tuple[int, str] | None:
    """``(symbol start, raw name)`` of a frame's link-time address, or None
    (unresolved: no symbol there, or the file unreadable)."""
    return frame[1].lookup(frame[2]) if frame[1] is not None else None


def resolve(path: str, *, pids=None, tids=None, comms=None, cpus=None, time_range=None) -> Resolved:
    """``path`` read (:func:`_read`), its address spaces and comms followed
    in time order as :class:`~pmuscope.profile.model.ProfileBuilder` does and
    each sample's frame found; samples outside ``pids``/``tids``/``comms``/
    ``cpus``/``time_range`` left out (``Profile.filter``). :class:`Decline`
    when the file is outside this path's case (whatever the filters keep)."""
    from ..symbols.dso import DEFAULT_BUILDID_DIR, DEFAULT_DEBUG_ROOT, DsoCache
    from ..symbols.maps import Maps

    # the data section's size from the file header, before any header section is parsed
    if not lite_candidate(path):
        raise Decline("not a small file-mode perf.data")
    event, lost, items, sample_type, attr_type = _read(path)
    maps = Maps()
    comm_of: dict[int, str] = {0: "swapper"}  # perf names the idle task (pid/tid 0) "swapper"
    cache = DsoCache(debug_root=DEFAULT_DEBUG_ROOT, buildid_dir=DEFAULT_BUILDID_DIR, loader=_load_dso)
    frames: dict[tuple, tuple] = {}  # (mapping, ip) -> (dso name, LiteDso or None, address)
    dsos: dict[tuple, LiteDso | None] = {}
    picked = []  # (sample, comm, frame)
    want_pids = set(pids) if pids is not None else None
    want_tids = set(tids) if tids is not None else None
    want_cpus = set(cpus) if cpus is not None else None
    want_comms = set(comms) if comms is not None else None
    lo, hi = time_range if time_range is not None else (None, None)
    if (lo is not None and lo < 0) or (hi is not None and hi < 0):
        raise Decline("a negative time")
    for _, kind, _, rec in items:
        if kind == 0:
            rtype = rec.type
            if rtype in (R.MMAP, R.MMAP2):
                if rec.pid in (-1, 0xFFFFFFFF) or rec.misc & _CPUMODE_MASK == 1:
                    continue  # a kernel map: no user address is in it
                if not (rtype == R.MMAP2 and not rec.prot & 4) and not (rtype == R.MMAP and rec.misc & _MMAP_DATA):
                    maps.apply(rec)
            elif rtype == R.COMM:
                comm_of[rec.tid] = rec.comm  # an exec keeps the maps until new ones overlap them
            else:  # FORK
                parent = comm_of.get(rec.ptid)
                if parent is None:
                    parent = comm_of.get(rec.ppid)
                if parent is not None:
                    comm_of[rec.tid] = parent
                if rec.pid != rec.ppid:
                    maps.apply(rec)
            continue
        comm = comm_of.get(rec.tid)
        if comm is None:
            raise Decline("a thread without a comm")
        if rec.pid >= 1 << 31 or rec.tid >= 1 << 31:
            raise Decline("a pid or tid the numpy path holds as a negative number")
        ip = rec.ip
        if ip >= 1 << 48:
            raise Decline("an address no user mapping holds")
        space = maps.spaces.get(rec.pid)
        m = space.find(ip) if space is not None else None
        if m is None or m.is_anon or m.identity or m.filename.startswith("["):
            # identity: perf shows absolute addresses there (MAP_HUGETLB, /SYSV..., util/map.c map__new)
            raise Decline("an address outside a file mapping")
        if not ((want_pids is None or rec.pid in want_pids) and (want_tids is None or rec.tid in want_tids)
                and (want_cpus is None or rec.cpu in want_cpus) and (want_comms is None or comm in want_comms)
                and (lo is None or rec.time >= lo) and (hi is None or rec.time <= hi)):
            continue
        key = (m, ip)
        fr = frames.get(key)
        if fr is None:
            fname = m.filename[:-10] if m.filename.endswith(" (deleted)") else m.filename
            # the file is looked up (stat, realpath) once per name and build-id, as the Symbolizer does
            dkey = (fname, m.build_id)
            dso = dsos[dkey] if dkey in dsos else dsos.setdefault(dkey, cache.get(fname, m.build_id))
            if dso is None:
                fr = (m.filename, None, (ip - m.start + m.pgoff) & _M64)
            else:
                fr = (m.filename, dso, dso.map_to_vaddr(ip, m.start, m.pgoff), (ip - m.start + m.pgoff) & _M64)
            frames[key] = fr
        picked.append((rec, comm, fr))
    return Resolved(event, lost, picked, comm_of, sample_type, attr_type)


# --- the report -----------------------------------------------------------------------------
def build(path: str, *, sort: tuple[str, ...] = DEFAULT_SORT, percent_limit: float = 0.0, **filters) -> Report:
    """The :class:`~pmuscope.profile.report_format.Report` of ``path`` that
    ``build_report`` makes of its profile (filtered as ``Profile.filter``
    does, ``filters`` as :func:`resolve` takes them); :class:`Decline` when
    the file is outside this path's case."""
    r = resolve(path, **filters)
    return _table(r.event, r.lost, r.picked, sort, percent_limit, r.comm_of)


def _table(event: str, lost: int, picked: list, sort: tuple[str, ...], percent_limit: float,
           thread_comm: dict[int, str]) -> Report:
    """``build_report`` of the picked samples ``(sample, comm, frame)``:
    rows by the sort keys, highest period first, rows of equal period in
    perf's order (``report._perf_tie_order``), Pid:Command and the Command
    column's width from each row's first thread's current name (``thread_comm``)."""
    rep = Report(event, len(picked), sum(s.period for s, _, _ in picked), lost, sort)
    if not picked:
        return rep
    total = float(rep.total_period)
    if total >= 2.0 ** 53:
        raise Decline("periods too large to sum exactly")
    by_dso = "dso" in sort
    s_names = [k for k in sort if k in ("comm", "pid", "tid", "cpu")]
    syms: dict[tuple, tuple] = {}  # frame -> (sym key, label, resolved?, start as a map-relative address)
    rows: dict[tuple, list] = {}
    first_of: dict[tuple, object] = {}  # sample-level key -> its first sample (build_report's srep)
    for s, comm, fr in picked:
        sy = syms.get(fr)
        if sy is None:
            hit = symbol(fr)
            addr = fr[-1]
            if hit is not None:
                # the symbol's start as frame_addr - frame_off (the address vs. the link-time one)
                sy = ((id(fr[1]), hit[0]), _sym_label(hit[1]), True, (addr - ((fr[2] - hit[0]) & _M64)))
            else:  # unresolved: one entry per map-relative address (and DSO, when that is a sort key)
                sy = ((fr[0], addr) if by_dso else ("", addr), f"{addr:#018x}" if addr else "0" * 16, False, addr)
            syms[fr] = sy
        # perf's "pid" key is the thread, as "tid" is (sort__thread_cmp compares tids)
        skey = tuple(comm if k == "comm" else s.cpu if k == "cpu" else s.tid for k in s_names)
        rep_s = first_of.setdefault(skey, s)
        key = (skey, fr[0] if by_dso else None, sy[0] if "sym" in sort else None)
        row = rows.get(key)
        if row is None:
            rows[key] = [s.period, 1, comm, rep_s, fr, sy, False]
        else:
            row[0] += s.period
            row[1] += 1
            if row[4][0] != fr[0] and "sym" in sort:
                # build_report orders such a row by its first frame's DSO (by frame id)
                raise Decline("a symbol reached through several DSO names")
            if row[5][2] != sy[2]:
                row[6] = True  # resolved and unresolved addresses (no sym key)
    out = []
    for period, count, comm, rs, fr, sy, mixed in rows.values():
        keys: dict = {}
        disp: dict = {}
        first: list = []
        then: list = []
        for k in sort:
            if k == "comm":
                keys[k] = disp[k] = comm
                first.append(name_key(comm))
                then.append(first[-1])
            elif k in ("pid", "tid"):
                # one row per thread: its process and thread id in JSON, perf's "%7d:%-*.*s" of
                # the thread id and its current name shown
                v = rs.tid
                if k == "pid":
                    keys["pid"] = rs.pid
                keys["tid"] = v
                disp[k] = thread_label(v, thread_comm[v])
                first.append(v)
                then.append(v)
            elif k == "cpu":
                v = rs.cpu
                keys[k] = v
                disp[k] = cpu_label(v)
                first.append(v)
                then.append(v)
            elif k == "dso":
                keys[k] = disp[k] = short_dso_name(fr[0])
                first.append((0, name_key(keys[k])))
                then.append(first[-1])
            else:
                keys[k] = sy[1]
                disp[k] = f"[.] {sy[1]}"
                if sy[2]:
                    first.append((0, name_key(sy[1])))
                    then.append((1, (0, name_key(short_dso_name(fr[0]))), sy[3]))
                else:
                    first.append((1, b""))
                    then.append((0, sy[3]))
        if len(sort) > 1:
            keys = {k: keys[k] for k in (*sort, "tid") if k in keys}
        out.append(((-float(period), *first, *then), period, count, keys, disp, rs, sy, mixed))
    out.sort(key=lambda o: o[0])
    if any(a[0] == b[0] for a, b in zip(out, out[1:])):
        raise Decline("two rows perf's order does not tell apart")
    limit = percent_limit * total / 100.0
    scale = 100.0 / total
    for _, period, count, keys, disp, rs, sy, mixed in out:
        p = float(period)
        if p >= limit:
            rep.rows.append(ReportRow(keys, count, p, p * scale))
            rep.display.append(disp)
    # column widths as util/hist.c hists__calc_col_len sets them: over every entry, also
    # those --percent-limit hides (every row's period is above 0)
    hidden = len(rep.rows) != len(out)
    if rep.rows and any(k in sort for k in ("comm", "pid", "tid")):
        thread_widths(rep, max(len(thread_comm[o[5].tid]) for o in out), hidden)
    if by_dso and any(not o[6][2] or o[7] for o in out):
        # hists__set_unres_dso_col_len: room for an unresolved address (build_report asks each
        # row's first frame, by frame id: a row of both kinds is decided here only when the
        # widening cannot show)
        if any(o[7] for o in out) and max(len(o[4]["dso"]) for o in out) < 16:
            raise Decline("a DSO row of resolved and unresolved addresses in a narrow column")
        rep.min_width["dso"] = 16
    if hidden:
        if by_dso:
            rep.min_width["dso"] = max(rep.min_width.get("dso", 0), max(len(o[4]["dso"]) for o in out))
        if "sym" in sort:
            rep.min_width["sym"] = max(len(o[4]["sym"]) for o in out)  # the label and its "[.] "
    return rep


def report(path: str, *, sort: tuple[str, ...] = DEFAULT_SORT, as_json: bool = False, show_samples: bool = False,
           **kw) -> str:
    """What ``pmuscope report`` prints for ``path`` (text, or ``--json``);
    :class:`Decline` when this path does not take the file."""
    rep = build(path, sort=sort, **kw)
    if as_json:
        return report_json([rep]) + "\n"
    return format_report(rep, show_samples=show_samples)


# --- script -----------------------------------------------------------------------------------
def script_enabled() -> bool:
    """False when ``PMUSCOPE_SCRIPT_LITE=0`` (``script`` takes the numpy path only: the reference)."""
    return os.environ.get("PMUSCOPE_SCRIPT_LITE", "1") != "0"


def script(path: str, fields=None, **filters) -> bytes:
    """What ``pmuscope script`` prints for ``path`` (no call chains are
    recorded: one line a sample), ``fields`` as ``parse_fields`` gives them
    (None: the defaults), ``filters`` as :func:`resolve` takes them (the
    command's ``apply_filters``). The text of ``profile/script.py``'s
    formatters, piece by piece: ``comm`` right-aligned in 16, ``pid/tid``,
    ``[cpu]``, ``secs.usecs:``, the period in 10, ``event:``, then
    `` ip sym+off (dso)``; a line without ``ip`` ends with the header's
    space. :class:`Decline` for what the numpy path prints otherwise or
    refuses (tracepoints, ``trace``, ``symoff`` without ``sym``, ``cpu`` not
    recorded)."""
    from .script_fields import FieldChanges, default_field_names

    r = resolve(path, **filters)
    if r.attr_type == abi.PERF_TYPE_TRACEPOINT:
        raise Decline("a tracepoint (other default fields, payloads)")
    has_cpu = bool(r.sample_type & S.CPU)
    # TIME is always there: this path requires it
    base = default_field_names(has_cpu=has_cpu, has_time=True, tracepoints=False)
    fs = set(base if fields is None else fields.apply(base) if isinstance(fields, FieldChanges) else fields)
    if "trace" in fs or ("symoff" in fs and "sym" not in fs) or ("cpu" in fs and not has_cpu):
        raise Decline("fields the numpy path prints or refuses")
    try:
        r.event.encode()  # the formatters encode it strictly (a name with lone surrogates: their error)
    except UnicodeEncodeError:
        raise Decline("an event name that is not UTF-8") from None
    f_comm, f_pid, f_tid, f_cpu = "comm" in fs, "pid" in fs, "tid" in fs, "cpu" in fs
    f_time, f_period, ev = "time" in fs, "period" in fs, f"{r.event}: " if "event" in fs else ""
    f_ip, f_sym, f_off, f_dso = "ip" in fs, "sym" in fs, "symoff" in fs, "dso" in fs
    prefixes: dict[tuple, str] = {}
    texts: dict[tuple, str] = {}  # (frame, ip) -> " ip sym+off (dso)"
    out = []
    for s, comm, fr in r.picked:
        key = (comm, s.pid, s.tid, s.cpu)
        t = prefixes.get(key)
        if t is None:
            t = f"{comm:>16} " if f_comm else ""
            if f_pid and f_tid:
                t += f"{s.pid:5d}/{s.tid:<5d} "
            elif f_pid:
                t += f"{s.pid:5d} "
            elif f_tid:
                t += f"{s.tid:5d} "
            if f_cpu:
                t += f"[{s.cpu:03d}] "
            prefixes[key] = t
        if f_time:
            usec = s.time // 1000
            t += f"{usec // 1_000_000:5d}.{usec % 1_000_000:06d}: "
        if f_period:
            t += f"{s.period:10d} "
        t += ev
        if f_ip:
            fkey = (fr, s.ip)
            ft = texts.get(fkey)
            if ft is None:
                ft = f" {s.ip:16x}"
                if f_sym:
                    hit = symbol(fr)
                    if hit is None:
                        ft += " [unknown]"
                    else:
                        ft += f" {_sym_label(hit[1])}+{(fr[2] - hit[0]) & _M64:#x}" if f_off else \
                            f" {_sym_label(hit[1])}"
                if f_dso:
                    ft += f" ({fr[0]})"
                texts[fkey] = ft
            t += ft
        out.append(t)
    if not out:
        return b""
    return ("\n".join(out) + "\n").encode("utf-8", "surrogateescape")
