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

from pmuscope._lazy import lazy_exports

# not lazy: the submodule has the name of its function, and a lazy import of
# the module would leave the module, not the function, as ``symbols.demangle``
from .demangle import cxa_demangle_available, demangle, demangle_cxx, demangle_rust

#: imported on first use (PEP 562): e.g. a user of ``SymbolTable`` does not
#: need the symbolizer, and a decoder does not need the ELF reader
_LAZY = {
    **{name: ".dso" for name in ("DsoCache", "ElfDso", "debug_file_candidates", "load_elf_dso", "load_elf_image",
                                 "shared_cache")},
    **{name: ".elf" for name in ("ElfFile", "RawSymbols", "Section", "Segment")},
    **{name: ".kernel" for name in ("KERNEL_DSO", "KernelSymbols", "ModuleRange", "parse_modules")},
    **{name: ".maps" for name in ("AddressSpace", "Mapping", "Maps")},
    **{name: ".jitdump" for name in ("JitDump", "JitDumpMap", "parse_jitdump")},
    **{name: ".perfmap" for name in ("PerfMap", "parse_perf_map")},
    **{name: ".symbolizer" for name in ("UNKNOWN", "Resolved", "Symbolizer")},
    "SymbolTable": ".table",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "AddressSpace", "DsoCache", "ElfDso", "ElfFile", "JitDump", "JitDumpMap", "KERNEL_DSO", "KernelSymbols", "Mapping",
    "Maps", "ModuleRange", "PerfMap", "RawSymbols", "Resolved", "Section", "Segment",
    "SymbolTable", "Symbolizer", "UNKNOWN", "cxa_demangle_available", "debug_file_candidates",
    "demangle", "demangle_cxx", "demangle_rust", "load_elf_dso", "load_elf_image", "parse_modules",
    "parse_jitdump", "parse_perf_map", "shared_cache",
]
