"""Turn ``(pid, ip)`` pairs into ``(dso, symbol, offset)`` in bulk.

:meth:`Symbolizer.resolve_many` takes numpy arrays of pids and ips (plus,
optionally, which ips are kernel addresses) and returns integer arrays:
``dso_id`` and ``sym_id`` index string tables held by the symbolizer, and
``offset`` is the distance from the symbol start (or the DSO-relative address
when no symbol covers the ip, which perf prints as ``[unknown]``). Every
distinct ``(pid, ip)`` is looked up once per call, every binary is parsed once
per run, and each name is demangled once.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from .demangle import demangle as _demangle
from .._plain import Plain
from .._np import uniq, uniq_inv
from ..errors import FormatError, ProcessGoneError
from .dso import DEFAULT_BUILDID_DIR, DEFAULT_DEBUG_ROOT, DsoCache, load_elf_image, shared_cache
from .kernel import KERNEL_DSO, KernelSymbols
from .maps import AddressSpace, Mapping, Maps
from .jitdump import JitDumpMap
from .perfmap import PerfMap
from .table import SymbolTable

UNKNOWN = "[unknown]"
_PERF_CONTEXT_MAX = np.uint64(0xFFFFFFFFFFFFF001)  # (u64)-4095


def module_dso_name(path: str) -> str | None:
    """perf's DSO name of a kernel module mapping (util/dso.c ``__kmod_path__parse``):
    ``/lib/modules/.../videobuf2-memops.ko[.gz|.xz]`` -> ``[videobuf2_memops]``, a
    ``[name]`` as is; None for the kernel itself, the vdso and what is no module."""
    base = path.rsplit("/", 1)[-1]
    if base.startswith("["):
        if base.startswith(("[kernel.kallsyms]", "[guest.kernel.kallsyms", "[vdso]", "[vdso32]", "[vdsox32]",
                            "[vsyscall]")):
            return None
        return base
    for ext in (".ko", ".ko.gz", ".ko.xz"):
        if base.endswith(ext) and len(base) > len(ext):
            return "[" + base[:-len(ext)].replace("-", "_") + "]"
    return None


_AT_SYSINFO_EHDR = 33
_PAGE = 4096


def vdso_image(procfs_root: str = "/proc") -> bytes | None:
    """The vdso of this process, found without reading its maps (a few
    hundred lines once numpy is loaded): its address from the auxiliary
    vector (``AT_SYSINFO_EHDR``), its size from its ELF header (up to the end
    of its section headers, rounded up to a page: the whole mapping), read
    through ``PROCFS_ROOT/self/mem`` (a short read, never a fault, if that
    were wrong). None when any of it is unavailable (the caller then takes
    the ``[vdso]`` mapping from the maps)."""
    import struct

    try:
        with open(os.path.join(procfs_root, "self", "auxv"), "rb") as f:
            aux = f.read()
        base = 0
        for t, v in struct.iter_unpack("@LL", aux[:len(aux) - len(aux) % struct.calcsize("@LL")]):
            if t == _AT_SYSINFO_EHDR:
                base = v
                break
            if t == 0:
                break
        if not base:
            return None
        with open(os.path.join(procfs_root, "self", "mem"), "rb", buffering=0) as f:
            head = os.pread(f.fileno(), 64, base)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
                return None
            order = "<" if head[5] == 1 else ">"
            if head[4] == 2:
                phoff, shoff = struct.unpack_from(order + "QQ", head, 32)
                phent, phnum, shent, shnum = struct.unpack_from(order + "HHHH", head, 54)
            else:
                phoff, shoff = struct.unpack_from(order + "II", head, 28)
                phent, phnum, shent, shnum = struct.unpack_from(order + "HHHH", head, 42)
            end = max(shoff + shent * shnum if shoff else 0, phoff + phent * phnum)
            size = (end + _PAGE - 1) // _PAGE * _PAGE
            if not shoff or not 0 < size <= 1 << 20:
                return None
            image = os.pread(f.fileno(), size, base)
        return image if len(image) == size else None
    except (OSError, ValueError, struct.error):
        return None


class Resolved(Plain):
    """Columnar result of :meth:`Symbolizer.resolve_many` (one row per input ip)."""

    _fields = ("dso_id", "sym_id", "offset", "symbolizer")

    dso_id: np.ndarray
    sym_id: np.ndarray
    offset: np.ndarray
    symbolizer: "Symbolizer"

    def __init__(self, dso_id: np.ndarray, sym_id: np.ndarray, offset: np.ndarray, symbolizer: "Symbolizer") -> None:
        self.dso_id = dso_id
        self.sym_id = sym_id
        self.offset = offset
        self.symbolizer = symbolizer

    def __len__(self) -> int:
        return len(self.dso_id)

    def dso_names(self) -> list[str]:
        return [self.symbolizer.dso_name(int(d)) for d in self.dso_id]

    def sym_names(self, demangle: bool = True) -> list[str]:
        return [self.symbolizer.sym_name(int(s), demangle) for s in self.sym_id]

    def format(self, i: int) -> str:
        """``sym+0xoff (dso)`` for row ``i`` as perf script prints it."""
        s, o = int(self.sym_id[i]), int(self.offset[i])
        sym = self.symbolizer.sym_name(s)
        return f"{sym}+{o:#x} ({self.symbolizer.dso_name(int(self.dso_id[i]))})" if s >= 0 \
            else f"{sym} ({self.symbolizer.dso_name(int(self.dso_id[i]))})"


class Symbolizer:
    """Symbol resolution for a recording or for live processes.

    ``maps`` holds the address spaces (fed from MMAP2/FORK/COMM records); with
    ``use_proc_maps=True`` a pid it has never seen is read from
    ``PROCFS_ROOT/PID/maps`` (live profiling). ``sysroot`` is prefixed to
    file names (perf's ``--symfs``); ``debug_root`` is where separate debug
    files live; ``tmp_dir`` holds ``perf-PID.map`` JIT maps; ``kernel`` is a
    :class:`KernelSymbols` or None to read ``PROCFS_ROOT/kallsyms`` on first
    use (False: no kernel symbols; a function: called on first use for one of
    these, e.g. to wait for symbols being loaded in another thread). ``[vdso]`` addresses resolve against the
    running kernel's vdso (``vdso=False`` turns that off). Parsed binaries
    live in ``cache``, by default one shared by all symbolizers of the process.
    """

    def __init__(self, maps: Maps | None = None, *, kernel: KernelSymbols | None | bool = None,
                 procfs_root: str = "/proc", sysroot: str = "", debug_root: str = DEFAULT_DEBUG_ROOT,
                 buildid_dir: str | None = None, tmp_dir: str = "/tmp",
                 use_proc_maps: bool = False, cache: DsoCache | None = None, vdso: bool = True):
        self.maps = maps if maps is not None else Maps()
        self.procfs_root = procfs_root
        self.sysroot = sysroot
        self.tmp_dir = tmp_dir
        self.use_proc_maps = use_proc_maps
        if buildid_dir is None:
            buildid_dir = DEFAULT_BUILDID_DIR
        self.cache = cache if cache is not None else shared_cache(debug_root, buildid_dir)
        self._kernel = kernel
        self._dso_names: list[str] = []
        self._dso_ids: dict[str, int] = {}
        # symbol id ranges: one (base, table) per table ever handed out ids
        self._sym_bases: list[int] = []
        self._sym_tables: list[SymbolTable] = []
        self._sym_dso: list[int] = []
        self._base_of: dict[int, int] = {}  # id(table) -> base
        self._next_sym = 0
        self._perf_maps: dict[int, PerfMap | None] = {}
        self._elf_of: dict[tuple, object] = {}
        self._demangled: dict[int, str] = {}
        self.vdso = vdso
        self._vdso = False
        #: DSO id -> perf's short name of a kernel module known by its path ([ath9k])
        self.module_short: dict[int, str] = {}

    # -- string tables --------------------------------------------------------
    def dso_id(self, name: str) -> int:
        i = self._dso_ids.get(name)
        if i is None:
            i = self._dso_ids[name] = len(self._dso_names)
            self._dso_names.append(name)
        return i

    def dso_name(self, dso_id: int) -> str:
        """Name of a DSO id (``[unknown]`` for -1)."""
        return self._dso_names[dso_id] if dso_id >= 0 else UNKNOWN

    @property
    def dso_names(self) -> list[str]:
        return list(self._dso_names)

    @property
    def symbol_count(self) -> int:
        """Number of symbol ids handed out so far."""
        return self._next_sym

    def _sym_base(self, table: SymbolTable, dso_id: int) -> int:
        key = id(table)
        base = self._base_of.get(key)
        if base is None:
            base = self._base_of[key] = self._next_sym
            self._sym_bases.append(base)
            self._sym_tables.append(table)
            self._sym_dso.append(dso_id)
            self._next_sym += max(len(table), 1)
        return base

    def _locate(self, sym_id: int) -> tuple[SymbolTable, int]:
        k = int(np.searchsorted(np.asarray(self._sym_bases), sym_id, side="right")) - 1
        return self._sym_tables[k], sym_id - self._sym_bases[k]

    def sym_name(self, sym_id: int, demangle: bool = True) -> str:
        """Name of a symbol id, demangled by default (``[unknown]`` for -1)."""
        if sym_id < 0:
            return UNKNOWN
        if demangle:
            n = self._demangled.get(sym_id)
            if n is None:
                t, i = self._locate(sym_id)
                n = self._demangled[sym_id] = _demangle(t.name(i))
            return n
        t, i = self._locate(sym_id)
        return t.name(i)

    def sym_names(self, sym_ids, demangle: bool = True) -> list[str]:
        return [self.sym_name(int(s), demangle) for s in sym_ids]

    def sym_dso(self, sym_id: int) -> int:
        """The DSO id a symbol id belongs to."""
        k = int(np.searchsorted(np.asarray(self._sym_bases), sym_id, side="right")) - 1
        return self._sym_dso[k]

    # -- sources ----------------------------------------------------------------
    @property
    def kernel(self) -> KernelSymbols | None:
        if self._kernel is None:
            self._kernel = KernelSymbols.load(self.procfs_root)
        elif callable(self._kernel) and not isinstance(self._kernel, KernelSymbols):
            self._kernel = self._kernel()
            return self.kernel
        return self._kernel or None

    def perf_map(self, pid: int) -> PerfMap | JitDumpMap | None:
        """The JIT symbols of ``pid``: its perf map, else its jitdump
        (``jit-PID.dump``, read in-process where perf needs ``perf inject --jit``)."""
        if pid not in self._perf_maps:
            pm = PerfMap.for_pid(pid, self.tmp_dir)
            if not pm.exists():
                pm = JitDumpMap.for_pid(pid, self.tmp_dir)
            self._perf_maps[pid] = pm if pm.exists() else None
        return self._perf_maps[pid]

    def vdso_dso(self):
        """The vdso image of the running kernel, copied from this process's own
        memory (perf does the same: the vdso is one image per kernel), parsed
        once: its symbols, and its CFI for the DWARF unwinder."""
        if self._vdso is not False:
            return self._vdso
        self._vdso = None
        try:
            image = vdso_image(self.procfs_root)
            if image is None:
                space = AddressSpace.from_proc_maps("self", self.procfs_root)
                m = next((x for x in space if x.filename == "[vdso]"), None)
                if m is None:
                    return None
                image = ctypes.string_at(m.start, m.len)
            self._vdso = load_elf_image(image, "[vdso]")
        except (OSError, FormatError, ProcessGoneError, ValueError):
            self._vdso = None
        return self._vdso

    def _space(self, pid: int) -> AddressSpace | None:
        s = self.maps.spaces.get(pid)
        if s is None and self.use_proc_maps:
            try:
                s = self.maps.add_proc(pid, self.procfs_root)
            except Exception:  # process gone: nothing to map with
                s = None
        return s

    # -- resolution -------------------------------------------------------------
    def resolve(self, pid: int, ip: int, kernel: bool | None = None) -> tuple[str, str, int]:
        """``(dso, symbol, offset)`` for one address (convenience over resolve_many)."""
        r = self.resolve_many(np.array([pid]), np.array([ip], dtype=np.uint64),
                              None if kernel is None else np.array([kernel]))
        return self.dso_name(int(r.dso_id[0])), self.sym_name(int(r.sym_id[0])), int(r.offset[0])

    def resolve_many(self, pids, ips, kernel=None) -> Resolved:
        """Resolve arrays of pids and ips (same length, or one pid for all).

        ``kernel`` is a boolean array saying which ips are kernel addresses
        (from the sample's cpumode); by default an ip with the top bit set is
        taken as a kernel address (true on x86_64, arm64 and riscv64).
        Call-chain context markers (``PERF_CONTEXT_*``) come back as unknown
        (dso and symbol -1).
        """
        ips = np.asarray(ips).astype(np.uint64, copy=False)
        n = len(ips)
        pids = np.asarray(pids, dtype=np.int64)
        if pids.ndim == 0 or len(pids) == 1 and n != 1:
            pids = np.full(n, int(pids.reshape(-1)[0]), dtype=np.int64)
        if len(pids) != n:
            raise ValueError(f"resolve_many: {len(pids)} pids for {n} ips")
        if kernel is None:
            is_k = (ips >> np.uint64(63)).astype(bool)
        else:
            is_k = np.asarray(kernel, dtype=bool)
        dso = np.full(n, -1, dtype=np.int32)
        sym = np.full(n, -1, dtype=np.int64)
        off = ips.copy()
        # call-chain context markers (PERF_CONTEXT_KERNEL, _USER, ...: the top
        # 4095 values, include/uapi/linux/perf_event.h) are not addresses
        marker = ips >= _PERF_CONTEXT_MAX
        if marker.any():
            is_k = is_k & ~marker
        else:
            marker = None
        if is_k.any():
            self._resolve_kernel(np.flatnonzero(is_k), ips, dso, sym, off)
        user = np.flatnonzero(~is_k if marker is None else ~(is_k | marker))
        if len(user):
            order = user[np.argsort(pids[user], kind="stable")]
            p = pids[order]
            cuts = np.flatnonzero(p[1:] != p[:-1]) + 1
            for grp in np.split(order, cuts):
                self._resolve_pid(int(pids[grp[0]]), grp, ips, dso, sym, off)
        return Resolved(dso, sym, off, self)

    def _lookup_into(self, table: SymbolTable, dso_id: int, addrs: np.ndarray, rows: np.ndarray,
                     dso, sym, off) -> None:
        local, o = table.lookup(addrs)
        base = self._sym_base(table, dso_id)
        dso[rows] = dso_id
        sym[rows] = np.where(local >= 0, local + base, -1)
        off[rows] = o

    def _ksymbol_table(self) -> SymbolTable | None:
        ks = self.maps.ksymbols
        if not ks:
            return None
        gen = self.maps.ksymbols_generation
        if getattr(self, "_ksym_gen", None) != gen:
            addrs = sorted(ks)
            self._ksym_table = SymbolTable.from_arrays(
                np.array(addrs, dtype=np.uint64),
                np.array([ks[a][0] for a in addrs], dtype=np.uint64),
                [ks[a][1] for a in addrs], fixup_end=False)
            self._ksym_gen = gen
        return self._ksym_table

    def _resolve_kernel(self, rows, ips, dso, sym, off) -> None:
        ks = self.kernel
        u, inv = uniq_inv(ips[rows])
        inv = inv.reshape(-1)
        udso = np.full(len(u), self.dso_id(KERNEL_DSO), dtype=np.int32)
        usym = np.full(len(u), -1, dtype=np.int64)
        uoff = u.copy()
        kst = self._ksymbol_table()
        if kst is not None:
            # BPF programs and trampolines announced by PERF_RECORD_KSYMBOL: perf
            # names the DSO after the symbol (machine__process_ksymbol_register)
            local, o = kst.lookup(u)
            hit = np.flatnonzero(local >= 0)
            if len(hit):
                base = self._sym_base(kst, -1)
                for k in hit:
                    udso[k] = self.dso_id(kst.name(int(local[k])))
                    usym[k] = base + int(local[k])
                    uoff[k] = o[k]
            rest = np.flatnonzero(local < 0)
        else:
            rest = np.arange(len(u))
        if ks is not None and not ks.addresses_hidden and len(rest):
            u = u[rest]
            udso_all, usym_all, uoff_all = udso, usym, uoff
            udso, usym, uoff = udso[rest], usym[rest], uoff[rest]
            for name, idx in ks.dso_of(u):
                t = ks.tables.get(name)
                d = self.dso_id(name)
                if t is None:
                    udso[idx] = d
                    continue
                self._lookup_into(t, d, u[idx], idx, udso, usym, uoff)
            udso_all[rest], usym_all[rest], uoff_all[rest] = udso, usym, uoff
            udso, usym, uoff = udso_all, usym_all, uoff_all
        elif len(rest) and self.maps.kernel_maps:
            # no kallsyms of this kernel: the recording's own module MMAPs give module
            # addresses their module (its path; [name] in reports; offset in it), as perf
            # names them without symbols
            for m in self.maps.kernel_maps:
                name = module_dso_name(m.filename)
                if name is None:
                    continue
                a = u[rest]
                inside = rest[(a >= np.uint64(m.start)) & (a - np.uint64(m.start) < np.uint64(m.len))]
                if len(inside):
                    d = self.dso_id(m.filename)
                    self.module_short[d] = name
                    udso[inside] = d
                    uoff[inside] = u[inside] - np.uint64(m.start) + np.uint64(m.pgoff)
        self._outside_kernel_maps(u, udso, usym)
        dso[rows], sym[rows], off[rows] = udso[inv], usym[inv], uoff[inv]

    def _outside_kernel_maps(self, u, udso, usym) -> None:
        """Kernel-mode addresses that no kernel map of the recording holds (skid past
        a return to user space: a user address with a kernel cpumode) have no DSO,
        as perf's ``thread__find_map`` finds none for them; only when the recording
        has its kernel MMAP (from ``[start, start + len)``), and not those a symbol named."""
        kmaps = self.maps.kernel_maps
        if not any(m.filename.startswith(("[kernel.kallsyms]", "[guest.kernel.kallsyms")) for m in kmaps):
            return
        kd = self.dso_id(KERNEL_DSO)
        cand = np.flatnonzero((udso == kd) & (usym < 0))
        if not len(cand):
            return
        a = u[cand]
        held = np.zeros(len(cand), dtype=bool)
        for m in kmaps:
            if m.len:
                held |= (a >= np.uint64(m.start)) & (a - np.uint64(m.start) < np.uint64(m.len))
            elif m.start == 0:  # a zero-sized kernel MMAP: perf takes the whole address space
                held[:] = True
        udso[cand[~held]] = -1

    def _resolve_pid(self, pid, rows, ips, dso, sym, off) -> None:
        u, inv = uniq_inv(ips[rows])
        inv = inv.reshape(-1)
        udso = np.full(len(u), -1, dtype=np.int32)
        usym = np.full(len(u), -1, dtype=np.int64)
        uoff = u.copy()
        space = self._space(pid)
        midx = space.find_many(u) if space is not None else np.full(len(u), -1, np.int64)
        for mi in uniq(midx).tolist():
            sel = np.flatnonzero(midx == mi)
            addrs = u[sel]
            if mi < 0:
                # no mapping: perf shows [unknown]; a JIT map still names the addresses it
                # has a symbol for (code made executable by mprotect gets no MMAP record)
                pm = self.perf_map(pid)
                if pm is not None:
                    self._lookup_into(pm.table(), self.dso_id(pm.dso), addrs, sel, udso, usym, uoff)
                    miss = sel[usym[sel] < 0]
                    udso[miss] = -1
                    uoff[miss] = u[miss]
                continue
            m = space[int(mi)]
            self._resolve_mapping(pid, m, addrs, sel, udso, usym, uoff)
        dso[rows], sym[rows], off[rows] = udso[inv], usym[inv], uoff[inv]

    def _resolve_mapping(self, pid: int, m: Mapping, addrs, sel, udso, usym, uoff) -> None:
        if m.is_anon:
            pm = self.perf_map(pid)
            if pm is not None:
                self._lookup_into(pm.table(), self.dso_id(pm.dso), addrs, sel, udso, usym, uoff)
            else:
                udso[sel] = self.dso_id(m.filename or "//anon")
            return
        fileoff = addrs - np.uint64(m.start) + np.uint64(m.pgoff)
        if m.filename == "[vdso]" and self.vdso:
            vd = self.vdso_dso()
            if vd is not None:
                self._lookup_into(vd.table, self.dso_id("[vdso]"), vd.file_offset_to_vaddr(
                    addrs - np.uint64(m.start)), sel, udso, usym, uoff)
                return
        if m.is_special:  # [vdso], [heap], [stack]: no file to read symbols from
            udso[sel] = self.dso_id(m.filename)
            uoff[sel] = addrs - np.uint64(m.start)
            return
        fname = m.filename
        if fname.endswith(" (deleted)"):  # the kernel's d_path() of an unlinked file
            fname = fname[:-10]
        path = self.sysroot + fname if self.sysroot else fname
        # the file a mapping names is looked up (stat, realpath) once per
        # identity the record gives it: MMAP2's build id or device/inode
        fkey = (path, m.build_id, m.maj, m.min, m.ino, m.ino_generation)
        if fkey in self._elf_of:
            elf = self._elf_of[fkey]
        else:
            elf = self._elf_of[fkey] = self.cache.get(path, m.build_id)
        d = self.dso_id(m.filename)
        if elf is None:
            udso[sel] = d
            uoff[sel] = fileoff
            return
        vaddr = elf.map_to_vaddr(addrs, m.start, m.pgoff)
        self._lookup_into(elf.table, d, vaddr, sel, udso, usym, uoff)
