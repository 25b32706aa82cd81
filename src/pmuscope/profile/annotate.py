"""``perf annotate``: per-instruction sample shares of one symbol.

The disassembler is binutils' ``objdump``, run as perf runs it
(``objdump --start-address --stop-address -d --no-show-raw-insn -C``, plus
``-l -S`` when the file has debug info, which interleaves file:line and the
source lines). Why objdump and not a disassembler library (capstone): it is
what perf uses, so the instruction text is the same as ``perf annotate``'s
byte for byte; it reads the DWARF line table and the source itself (a library
would need a DWARF reader on top); it knows every architecture binutils
knows; and it is already on any machine that has perf. It is an external
program, so a missing one is a clear error, not an import failure.

Shares: a sample counts for the instruction its ip falls on; an instruction's
share is its period over the symbol's period (perf's "percent: local period").
The ip is placed in the file with the symbol table the samples were resolved
with: link-time address = symbol start + the sample's offset in the symbol.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np

from ..errors import PmuscopeError
from .model import Profile

_INSN = re.compile(r"^\s*([0-9a-f]+):\s*(.*)$")
#: objdump -l's location lines: "/path/file.c:42" or "/path/file.c:42 (discriminator 3)"
_LOCATION = re.compile(r"^\S*[./]\S*:(\d+)(?: \(discriminator \d+\))?$")


@dataclass
class AnnotatedLine:
    """A line of the listing: an instruction (``addr`` set) or source/line info."""

    text: str
    addr: int | None = None
    samples: int = 0
    period: float = 0.0
    percent: float = 0.0
    #: a source line's number in its file (None for other text)
    line_no: int | None = None
    #: objdump -l's "FILE:LINE" marker (not printed in the text layout; perf numbers the source lines instead)
    location: str | None = None

    def as_json(self) -> dict:
        if self.location is not None:
            return {"location": self.location}
        if self.addr is None:
            return {"source": self.text, "line": self.line_no} if self.line_no is not None else {"source": self.text}
        return {"addr": self.addr, "insn": self.text, "percent": round(self.percent, 4), "samples": self.samples,
                "period": int(self.period)}


@dataclass
class Annotation:
    """One symbol's annotated disassembly."""

    symbol: str
    dso: str
    event: str
    start: int
    end: int
    samples: int
    period: float
    lines: list[AnnotatedLine] = field(default_factory=list)
    #: samples whose address objdump printed no instruction for (should be 0)
    unplaced: int = 0
    has_source: bool = False

    def hottest(self, n: int = 5) -> list[AnnotatedLine]:
        ins = [ln for ln in self.lines if ln.addr is not None and ln.samples]
        return sorted(ins, key=lambda ln: -ln.period)[:n]

    def to_json(self) -> dict:
        return {"symbol": self.symbol, "dso": self.dso, "event": self.event, "start": self.start, "end": self.end,
                "samples": self.samples, "period": int(self.period), "source": self.has_source,
                "lines": [ln.as_json() for ln in self.lines]}


def objdump_path() -> str:
    path = shutil.which(os.environ.get("PMUSCOPE_OBJDUMP", "objdump"))
    if not path:
        raise PmuscopeError("annotate needs objdump to disassemble, and it is not installed "
                            "(apt-get install binutils)")
    return path


def _has_debug_info(path: str) -> bool:
    try:
        from ..symbols.elf import ElfFile

        with open(path, "rb"):
            pass
        elf = ElfFile.open(path)
        return elf.section(".debug_line") is not None
    except Exception:
        return False


def _symbol_range(p: Profile, sym_id: int) -> tuple[int, int]:
    table, i = p.symbolizer._locate(sym_id)
    return int(table.starts[i]), int(table.ends[i])


def _known_symbol(p: Profile, name: str) -> bool:
    for table in getattr(p.symbolizer, "_sym_tables", []):
        try:
            if name in table.names():
                return True
        except Exception:
            continue
    return False


def annotate_symbol(p: Profile, name: str, *, dso: str | None = None, event: str | None = None,
                    source: bool | None = None) -> Annotation:
    """Annotate symbol ``name`` (demangled or raw; in the shared object
    ``dso``, base name or path, when several have it) of profile ``p``.

    ``event`` picks the event (default: the first with samples of the symbol);
    ``source`` interleaves source lines (default: when the file has debug info).
    Raises :class:`~pmuscope.errors.PmuscopeError` for an unknown symbol, a
    symbol without samples, a kernel symbol, a missing file or objdump.
    """
    if not len(p):
        raise PmuscopeError(f"no samples in {p.source or 'the recording'}")
    leaf_sym = p.frame_sym[p.leaf]
    syms = np.unique(leaf_sym[leaf_sym >= 0])
    cands = []
    for s in syms.tolist():
        if p.sym_name(s) == name or p.symbolizer.sym_name(s, demangle=False) == name:
            d = p.dso_name(p.symbolizer.sym_dso(s))
            if dso is None or d == dso or os.path.basename(d) == dso:
                cands.append(s)
    if not cands:
        if _known_symbol(p, name):
            raise PmuscopeError(f"symbol {name!r} has no samples in {p.source or 'the recording'}")
        raise PmuscopeError(f"unknown symbol {name!r}: no sample of {p.source or 'the recording'} falls in a "
                            f"symbol of that name (pmuscope report lists the sampled symbols)")
    weights = {s: float(p.period[leaf_sym == s].sum()) for s in cands}
    sym = max(cands, key=lambda s: weights[s])
    sel = leaf_sym == sym
    ev_ids = np.unique(p.event[sel]).tolist()
    if event is not None:
        if event not in p.event_names:
            raise PmuscopeError(f"no event {event!r} in the recording (it has {', '.join(p.event_names)})")
        ev = p.event_names.index(event)
        if ev not in ev_ids:
            raise PmuscopeError(f"symbol {name!r} has no {event} samples")
    else:
        ev = ev_ids[0]
    sel &= p.event == ev
    leaves = p.leaf[sel]
    if bool(p.frame_kernel[leaves].any()):
        raise PmuscopeError(f"{name!r} is a kernel symbol: annotating kernel code needs vmlinux, "
                            "which pmuscope annotate does not read yet")
    path = p.dso_name(p.symbolizer.sym_dso(sym))
    if not os.path.isfile(path):
        raise PmuscopeError(f"cannot annotate {name!r}: its file {path} is not on this machine")
    start, end = _symbol_range(p, sym)
    addrs = (np.uint64(start) + p.frame_off[leaves].astype(np.uint64)).astype(np.int64)
    periods = p.period[sel].astype(np.float64)
    if source is None:
        source = _has_debug_info(path)
    cmd = [objdump_path(), f"--start-address=0x{start:x}", f"--stop-address=0x{end:x}", "-d",
           "--no-show-raw-insn", "-C"]
    if source:
        cmd[1:1] = ["-l", "-S"]
    r = subprocess.run(cmd + [path], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise PmuscopeError(f"objdump failed on {path}: {r.stderr.strip()[-300:]}")
    total = float(periods.sum())
    ann = Annotation(p.sym_name(sym), path, p.event_names[ev], start, end, int(sel.sum()), total,
                     has_source=bool(source))
    by_addr: dict[int, AnnotatedLine] = {}
    body = r.stdout.split("\n")
    # skip objdump's banner (the file name and format): keep from
    # "Disassembly of section" on, blank lines included, as perf shows them
    began = False
    marker: int | None = None  # the line of the last "FILE:LINE" location (objdump -l)
    block: list[AnnotatedLine] = []  # the source lines printed after it (objdump -S)
    for raw in body:
        line = raw.rstrip()
        if not began:
            if line.startswith("Disassembly of section"):
                began = True
                ann.lines.append(AnnotatedLine(line))
            continue
        m = _INSN.match(line)
        if m and m.group(2) and not line.startswith("/"):
            addr = int(m.group(1), 16)
            ln = AnnotatedLine(m.group(2).rstrip(), addr)
            by_addr[addr] = ln
            ann.lines.append(ln)
            marker, block = None, []
            continue
        loc = _LOCATION.match(line) if source else None
        if loc:
            ann.lines.append(AnnotatedLine(line, location=line))
            marker, block = int(loc.group(1)), []
            continue
        ln = AnnotatedLine(line)
        ann.lines.append(ln)
        if marker is not None and line:
            # objdump -S prints the source lines up to the location's line:
            # number the block backwards from it
            block.append(ln)
            for i, b in enumerate(reversed(block)):
                b.line_no = marker - i if marker - i > 0 else None
    while ann.lines and ann.lines[-1].addr is None and not ann.lines[-1].text:
        ann.lines.pop()
    ins = np.array(sorted(by_addr), dtype=np.int64)
    if len(ins):
        # a sample belongs to the instruction starting at or before its address
        k = np.searchsorted(ins, addrs, side="right") - 1
        ok = k >= 0
        ann.unplaced = int((~ok).sum())
        cnt = np.bincount(k[ok], minlength=len(ins))
        per = np.bincount(k[ok], weights=periods[ok], minlength=len(ins))
        for j, a in enumerate(ins.tolist()):
            ln = by_addr[a]
            ln.samples = int(cnt[j])
            ln.period = float(per[j])
            ln.percent = 100.0 * ln.period / total if total else 0.0
    else:
        ann.unplaced = ann.samples
    return ann


def format_annotation(ann: Annotation) -> str:
    """perf annotate --stdio's layout: ``Percent | Source code & Disassembly``."""
    title = (f" Percent |\tSource code & Disassembly of {os.path.basename(ann.dso)} for {ann.event} "
             f"({ann.samples} samples, percent: local period)")
    out = [title, "-" * (len(title) + 5)]  # perf: the printed length (tab and newline included) + 4
    for ln in ann.lines:
        if ln.location is not None:
            continue  # perf shows the line numbers on the source lines instead
        if ln.addr is None:
            num = "" if ln.line_no is None else str(ln.line_no)
            out.append(f"         : {num:<5}{ln.text}".rstrip())
        else:
            out.append(f"{ln.percent:8.2f} :   {ln.addr:x}:   {ln.text}")
    return "\n".join(out) + "\n"


def annotation_json(anns: list[Annotation]) -> str:
    return json.dumps({"annotations": [a.to_json() for a in anns]})


def hottest_symbol(p: Profile, event: str | None = None) -> str:
    """The user-space symbol with the largest period (what annotate shows by default)."""
    leaf_sym = p.frame_sym[p.leaf]
    ok = (leaf_sym >= 0) & ~p.frame_kernel[p.leaf]
    if event is not None and event in p.event_names:
        ok &= p.event == p.event_names.index(event)
    if not ok.any():
        raise PmuscopeError(f"no user-space sample with a symbol in {p.source or 'the recording'}: "
                            f"name one with -s SYM")
    ids, inv = np.unique(leaf_sym[ok], return_inverse=True)
    w = np.bincount(inv, weights=p.period[ok].astype(np.float64))
    return p.sym_name(int(ids[int(np.argmax(w))]))
