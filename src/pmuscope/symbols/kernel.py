"""Kernel symbols from ``/proc/kallsyms`` and module ranges from
``/proc/modules``.

Symbols of the core kernel belong to the DSO ``[kernel.kallsyms]`` and those
of module ``foo`` to ``[foo]``, as perf names them. kallsyms has no sizes: a
symbol ends where the next one starts (perf's ``symbols__fixup_end``), and a
module's last symbol ends with the module's range from ``/proc/modules``.

When ``kernel.kptr_restrict`` hides the addresses (an unprivileged reader sees
every address as zero) :attr:`KernelSymbols.addresses_hidden` is True and no
address resolves; perf says the same ("kernel symbols are restricted").
"""

from __future__ import annotations

import os

import numpy as np

from .._plain import Plain
from ..errors import FormatError
from .table import SymbolTable

KERNEL_DSO = "[kernel.kallsyms]"
# perf's symbol_type__filter(): text, weak and data symbols
_KEEP_TYPES = frozenset(b"TtWwDdBb")


class ModuleRange(Plain):
    """One loaded module: ``[start, start + size)``."""

    _fields = ("name", "start", "size")

    name: str
    start: int
    size: int

    def __init__(self, name: str, start: int, size: int) -> None:
        self.name = name
        self.start = start
        self.size = size

    @property
    def dso(self) -> str:
        return f"[{self.name}]"


def parse_modules(text: str) -> list[ModuleRange]:
    """Parse ``/proc/modules`` (``name size refcount deps state address``)."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 6:
            raise FormatError(f"/proc/modules line {lineno}: expected 6 fields "
                              f"(name size refcount deps state address), got {line!r}",
                              offset=lineno)
        try:
            out.append(ModuleRange(parts[0], int(parts[5], 16), int(parts[1])))
        except ValueError as err:
            raise FormatError(f"/proc/modules line {lineno}: bad number in {line!r}",
                              offset=lineno) from err
    return out


def _hidden_reason(procfs_root: str) -> str:
    def read(name: str) -> str:
        try:
            with open(os.path.join(procfs_root, "sys", "kernel", name)) as f:
                return f.read().strip()
        except OSError:
            return "?"

    return (f"kernel symbols are hidden: {procfs_root}/kallsyms shows every address as 0 "
            f"(kernel.kptr_restrict={read('kptr_restrict')}, "
            f"kernel.perf_event_paranoid={read('perf_event_paranoid')}); run as root, or set "
            "kptr_restrict=0 and perf_event_paranoid<=1, to see kernel symbols")


class KernelSymbols(Plain):
    """Kernel and module symbols, one :class:`SymbolTable` each.

    Use :meth:`load` (injectable ``procfs_root``) or :meth:`parse`.
    ``resolve(addrs)`` gives per address the DSO name index into ``dsos``,
    the symbol index into ``tables[dso]`` and the offset.
    """

    _fields = ("tables", "modules", "addresses_hidden", "kernel_start", "kernel_end", "hidden_reason")

    tables: dict[str, SymbolTable]
    modules: list[ModuleRange]
    addresses_hidden: bool
    kernel_start: int
    kernel_end: int
    #: why kernel addresses cannot be resolved (None when they can)
    hidden_reason: str | None

    def __init__(
        self,
        tables: dict[str, SymbolTable] | None = None,
        modules: list[ModuleRange] | None = None,
        addresses_hidden: bool = False,
        kernel_start: int = 0,
        kernel_end: int = 0,
        hidden_reason: str | None = None,
    ) -> None:
        self.tables = {} if tables is None else tables
        self.modules = [] if modules is None else modules
        self.addresses_hidden = addresses_hidden
        self.kernel_start = kernel_start
        self.kernel_end = kernel_end
        self.hidden_reason = hidden_reason

    @classmethod
    def load(cls, procfs_root: str = "/proc") -> "KernelSymbols":
        """Read ``kallsyms`` and ``modules`` under ``procfs_root``; missing
        files give empty tables (a kernel without modules has no
        ``/proc/modules``)."""
        kallsyms = modules = ""
        try:
            with open(os.path.join(procfs_root, "kallsyms"), "rb") as f:
                kallsyms = f.read()
        except OSError:
            kallsyms = b""
        try:
            with open(os.path.join(procfs_root, "modules")) as f:
                modules = f.read()
        except OSError:
            modules = ""
        self = cls.parse(kallsyms, modules)
        if self.addresses_hidden:
            self.hidden_reason = _hidden_reason(procfs_root)
        elif not self.tables:
            self.hidden_reason = f"{os.path.join(procfs_root, 'kallsyms')} is not readable"
        return self

    @classmethod
    def parse(cls, kallsyms: bytes | str, modules: str = "") -> "KernelSymbols":
        """Build from the text of ``/proc/kallsyms`` and ``/proc/modules``."""
        if isinstance(kallsyms, str):
            kallsyms = kallsyms.encode()
        mods = parse_modules(modules) if modules else []
        per_dso: dict[str, tuple[list[int], list[str]]] = {}
        total = zero = 0
        for lineno, line in enumerate(kallsyms.splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 3 or len(parts[1]) != 1:
                raise FormatError(f"kallsyms line {lineno}: expected 'address type name "
                                  f"[module]', got {line[:80]!r}", offset=lineno)
            total += 1
            try:
                addr = int(parts[0], 16)
            except ValueError as err:
                raise FormatError(f"kallsyms line {lineno}: bad address {parts[0][:20]!r}",
                                  offset=lineno) from err
            if addr == 0:
                zero += 1
                continue
            if parts[1][0] not in _KEEP_TYPES:
                continue
            dso = KERNEL_DSO
            if len(parts) >= 4 and parts[3].startswith(b"[") and parts[3].endswith(b"]"):
                dso = parts[3].decode("utf-8", "replace")
            entry = per_dso.get(dso)
            if entry is None:
                entry = per_dso[dso] = ([], [])
            entry[0].append(addr)
            entry[1].append(parts[2].decode("utf-8", "replace"))
        self = cls(modules=mods)
        self.addresses_hidden = total > 0 and zero == total
        if self.addresses_hidden:
            self.hidden_reason = "kallsyms shows every address as 0 (kptr_restrict)"
        limits = {m.dso: m.start + m.size for m in mods}
        for dso, (addrs, names) in per_dso.items():
            limit = limits.get(dso)
            if limit is None and addrs and dso != KERNEL_DSO:
                limit = max(addrs) + 4096
            self.tables[dso] = SymbolTable.from_arrays(
                np.array(addrs, dtype=np.uint64), np.zeros(len(addrs), dtype=np.uint64), names,
                limit=limit)
        kt = self.tables.get(KERNEL_DSO)
        if kt is not None and len(kt):
            self.kernel_start = int(kt.starts[0])
            self.kernel_end = int(kt.ends[-1])
        return self

    def dso_of(self, addrs: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """Split addresses by DSO: ``[(dso, index array), ...]``; addresses in
        no module and not in the core kernel's range go to ``[kernel.kallsyms]``
        too (they resolve to no symbol there)."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        owner = np.full(len(addrs), -1, dtype=np.int64)
        ranges = [(m.dso, m.start, m.start + m.size) for m in self.modules]
        if not ranges:
            # no /proc/modules: use the span of each module's symbols
            for dso, t in self.tables.items():
                if dso != KERNEL_DSO and len(t):
                    ranges.append((dso, int(t.starts[0]), int(t.ends[-1])))
        names = [KERNEL_DSO]
        for dso, lo, hi in ranges:
            sel = (addrs >= np.uint64(lo)) & (addrs < np.uint64(hi)) & (owner < 0)
            if sel.any():
                owner[sel] = len(names)
                names.append(dso)
        owner[owner < 0] = 0
        return [(names[k], np.flatnonzero(owner == k)) for k in range(len(names))
                if (owner == k).any()]
