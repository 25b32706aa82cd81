"""Symbolization: turn ``(pid, ip)`` into ``(dso, symbol, offset)`` the way
perf does, fast.

- :class:`Symbolizer` — ``resolve_many(pids, ips)`` returns columnar ids with
  string tables; distinct addresses are looked up once, binaries parsed once.
- :class:`Maps` / :class:`AddressSpace` — per-process mappings from MMAP2,
  FORK and COMM-exec records, or from ``/proc/PID/maps``.
- :class:`ElfFile`, :class:`SymbolTable`, :func:`load_elf_dso` — ELF headers,
  build-id, ``.gnu_debuglink``, ``.symtab``/``.dynsym`` read in bulk, separate
  debug files under ``/usr/lib/debug``.
- :class:`KernelSymbols` — ``/proc/kallsyms`` and ``/proc/modules``.
- :class:`PerfMap` — JIT maps ``/tmp/perf-PID.map``; :class:`JitDumpMap` and
  :func:`parse_jitdump` — jitdumps ``/tmp/jit-PID.dump`` (read in-process).
- :func:`demangle` — C++ (libstdc++'s ``__cxa_demangle``) and Rust.
"""

from .demangle import cxa_demangle_available, demangle, demangle_cxx, demangle_rust
from .dso import DsoCache, ElfDso, debug_file_candidates, load_elf_dso, shared_cache
from .elf import ElfFile, RawSymbols, Section, Segment
from .kernel import KERNEL_DSO, KernelSymbols, ModuleRange, parse_modules
from .maps import AddressSpace, Mapping, Maps
from .jitdump import JitDump, JitDumpMap, parse_jitdump
from .perfmap import PerfMap, parse_perf_map
from .symbolizer import UNKNOWN, Resolved, Symbolizer
from .table import SymbolTable

__all__ = [
    "AddressSpace", "DsoCache", "ElfDso", "ElfFile", "JitDump", "JitDumpMap", "KERNEL_DSO", "KernelSymbols", "Mapping",
    "Maps", "ModuleRange", "PerfMap", "RawSymbols", "Resolved", "Section", "Segment",
    "SymbolTable", "Symbolizer", "UNKNOWN", "cxa_demangle_available", "debug_file_candidates",
    "demangle", "demangle_cxx", "demangle_rust", "load_elf_dso", "parse_modules",
    "parse_jitdump", "parse_perf_map", "shared_cache",
]
