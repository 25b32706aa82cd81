"""Does a binary keep frame pointers? Read from its CFI: code built with
frame pointers defines the CFA through the frame-pointer register
(``DW_CFA_def_cfa_register rbp`` / ``x29``) after its prologue, code
built without them through the stack pointer. ``pmuscope profile`` uses
this to choose ``--call-graph dwarf`` where ``fp`` chains would break."""

from __future__ import annotations

import os
import struct

from .cfi import CFA_REG, CfiTable, execute

#: DWARF number of the frame-pointer register by ELF e_machine
_FP_REG = {62: 6, 183: 29}  # EM_X86_64: rbp, EM_AARCH64: x29
DT_NEEDED, DT_RPATH, DT_RUNPATH = 1, 15, 29


def frame_pointer_share(path: str, sample: int = 400) -> tuple[float, int] | None:
    """``(share, functions)``: of up to ``sample`` functions with CFI spread
    over the binary, the share whose CFA is the frame pointer by the end of
    the function; None when the binary has no usable CFI (or is not ELF)."""
    from ..errors import FormatError
    from ..symbols import ElfFile

    try:
        elf = ElfFile.open(path)
        table = CfiTable.from_elf(elf)
    except (OSError, FormatError):
        return None
    fp = _FP_REG.get(elf.e_machine)
    if fp is None or not table.sections:
        return None
    sec = table.sections[0]
    n = len(sec.begin)
    if not n:
        return None
    step = max(1, n // sample)
    total = uses = 0
    for i in range(0, n, step):
        b, e = int(sec.begin[i]), int(sec.end[i])
        if e - b < 16 or e - b > 1 << 24:
            continue
        try:
            f = sec.find(b)
            if f is None:
                continue
            # the row near the end of the function body (before any epilogue)
            cie, pc_begin, insns = f
            r = execute(cie, pc_begin, insns, b + (e - b) // 2)
        except Exception:  # a malformed entry says nothing either way
            continue
        total += 1
        uses += r.cfa[0] == CFA_REG and r.cfa[1] == fp
    return (uses / total, total) if total else None


def needed_libraries(path: str) -> list[str]:
    """Paths of the shared libraries ``path`` names in DT_NEEDED, found
    through its DT_RUNPATH/DT_RPATH (``$ORIGIN`` expanded) and the usual
    system directories; names not found are left out."""
    from ..errors import FormatError
    from ..symbols import ElfFile

    try:
        elf = ElfFile.open(path)
        dyn = elf.section(".dynamic")
        strs = elf.section(".dynstr")
        if dyn is None or strs is None:
            return []
        d = elf.section_data(dyn)
        s = elf.section_data(strs)
    except (OSError, FormatError):
        return []
    fmt = elf.order + ("qQ" if elf.elf64 else "iI")
    size = struct.calcsize(fmt)

    def string(off: int) -> str:
        end = s.find(b"\0", off)
        return s[off:end if end >= 0 else len(s)].decode("utf-8", "replace")

    needed, dirs = [], []
    for pos in range(0, len(d) - size + 1, size):
        tag, val = struct.unpack_from(fmt, d, pos)
        if tag == 0:
            break
        if tag == DT_NEEDED:
            needed.append(string(val))
        elif tag in (DT_RPATH, DT_RUNPATH):
            origin = os.path.dirname(os.path.realpath(path))
            dirs += [x.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for x in string(val).split(":") if x]
    dirs += ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
             "/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    out = []
    for name in needed:
        for dd in dirs:
            p = os.path.join(dd, name)
            if os.path.isfile(p):
                out.append(p)
                break
    return out


def choose_call_graph(mode: str, command: list[str], pids, system_wide: bool) -> tuple[str, str | None]:
    """The call-graph mode for ``--call-graph MODE`` and, for ``auto``, one
    line saying why: ``dwarf`` when the program (or the libpython it links)
    keeps no frame pointers, since frame-pointer chains break after one frame
    there; ``fp`` when it keeps them, and system-wide (a stack copy per sample
    of every process costs too much there)."""
    if mode != "auto":
        return mode, None
    if system_wide:
        return "fp", "frame-pointer call chains (system-wide; --call-graph dwarf to unwind user stacks)"
    import platform
    import shutil

    exes = []
    if command:
        exe = shutil.which(command[0])
        if exe:
            exes.append(os.path.realpath(exe))
    for pid in pids or []:
        try:
            exes.append(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            pass
    bins = []
    for exe in exes:
        bins.append(exe)
        bins += [lib for lib in needed_libraries(exe) if os.path.basename(lib).startswith("libpython")]
    unknown, without = [], []
    for path in bins:
        got = frame_pointer_share(path)
        if got is None:
            unknown.append(path)
        elif got[0] < 0.5:
            without.append((got[1], got[0], path))
    if without:  # name the biggest such binary (libpython rather than a 3-function launcher)
        n, share, path = max(without)
        return ("dwarf", f"call chains from DWARF unwinding (--call-graph dwarf): {os.path.basename(path)} keeps "
                         f"no frame pointers ({share:.0%} of {n} functions use one); --call-graph fp to override")
    if (unknown or not bins) and platform.machine() in ("x86_64", "amd64"):
        what = os.path.basename(unknown[0]) if unknown else "the program"
        return ("dwarf", f"call chains from DWARF unwinding (--call-graph dwarf): cannot tell whether {what} keeps "
                         "frame pointers (most x86-64 distribution binaries do not); --call-graph fp to override")
    return "fp", None
