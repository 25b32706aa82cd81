"""DWARF call-frame unwinding of user stacks (``--call-graph dwarf``).

- :class:`CfiTable` — ``.eh_frame`` (``.eh_frame_hdr`` search table) and
  ``.debug_frame`` (also from a separate debug file) of one binary, one cached
  rule :class:`Row` per code address (``pmuscope.unwind.cfi``).
- :class:`Unwinder` — steps one sample's registers through its stack copy
  (x86-64 and AArch64 register sets, the frame-pointer rule for code without
  CFI), and :func:`unwind_batch` for many samples; :class:`UnwindStats`
  counts the chains that stopped early (``pmuscope.unwind.unwinder``).

Sits between ``symbols`` (ELF files, address spaces) and ``profile``, which
splices the unwound frames into each sample's call chain where the kernel
left the user part out.
"""

from pmuscope._lazy import lazy_exports

_LAZY = {
    "CfiTable": ".cfi", "Row": ".cfi", "FrameSection": ".cfi", "CfiError": ".cfi", "execute": ".cfi",
    "Unwinder": ".unwinder", "UnwindStats": ".unwinder", "Arch": ".unwinder", "X86_64": ".unwinder",
    "AARCH64": ".unwinder", "eval_expr": ".unwinder", "regs_from_perf": ".unwinder",
    "unwind_batch": ".batch",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
