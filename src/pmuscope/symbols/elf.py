"""A small ELF reader: section and program headers, build-id notes,
``.gnu_debuglink`` and bulk symbol tables.

Only the standard library and numpy are needed (numpy only for the bulk
symbol tables: headers, notes and sections are read without it). Symbol tables are read in one
piece with a numpy structured dtype (``Elf64_Sym``/``Elf32_Sym`` in the file's
byte order) instead of one Python object per symbol; names stay as offsets into
the string table until somebody asks for them.

Layouts follow the System V gABI (``elf.h``). pyelftools is not needed here;
the test suite cross-checks this reader against it.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import TYPE_CHECKING

from .._plain import Plain
from ..errors import FormatError

if TYPE_CHECKING:
    import numpy as np

# e_type
ET_EXEC = 2
ET_DYN = 3
# sh_type
SHT_NOBITS = 8
SHT_SYMTAB = 2
SHT_DYNSYM = 11
SHT_RELA = 4
SHT_REL = 9
EM_386 = 3
R_X86_64_GLOB_DAT = 6
EM_X86_64 = 62
EM_AARCH64 = 183
SHT_NOTE = 7
SHF_COMPRESSED = 0x800
SHF_EXECINSTR = 0x4
SHF_ALLOC = 0x2
# p_type
PT_LOAD = 1
PT_NOTE = 4
PF_X = 1
# symbols
STT_NOTYPE = 0
STT_OBJECT = 1
STT_FUNC = 2
STT_GNU_IFUNC = 10
STB_LOCAL = 0
STB_GLOBAL = 1
STB_WEAK = 2
STV_INTERNAL = 1
STV_HIDDEN = 2
SHN_UNDEF = 0
SHN_ABS = 0xFFF1
SHN_LORESERVE = 0xFF00
SHN_XINDEX = 0xFFFF
NT_GNU_BUILD_ID = 3

_ELF_MAGIC = b"\x7fELF"


def _sym_dtype(elf64: bool, order: str) -> np.dtype:
    import numpy as np

    if elf64:
        return np.dtype([("st_name", order + "u4"), ("st_info", "u1"), ("st_other", "u1"),
                         ("st_shndx", order + "u2"), ("st_value", order + "u8"),
                         ("st_size", order + "u8")])
    return np.dtype([("st_name", order + "u4"), ("st_value", order + "u4"),
                     ("st_size", order + "u4"), ("st_info", "u1"), ("st_other", "u1"),
                     ("st_shndx", order + "u2")])


class Section(Plain):
    """One section header (``ElfN_Shdr``) with its resolved name."""

    __slots__ = _fields = ("index", "name", "sh_type", "sh_flags", "sh_addr", "sh_offset", "sh_size", "sh_link",
                           "sh_info", "sh_addralign", "sh_entsize")

    index: int
    name: str
    sh_type: int
    sh_flags: int
    sh_addr: int
    sh_offset: int
    sh_size: int
    sh_link: int
    sh_info: int
    sh_addralign: int
    sh_entsize: int

    def __init__(self, index: int, name: str, sh_type: int, sh_flags: int, sh_addr: int, sh_offset: int,
                 sh_size: int, sh_link: int, sh_info: int, sh_addralign: int, sh_entsize: int) -> None:
        self.index = index
        self.name = name
        self.sh_type = sh_type
        self.sh_flags = sh_flags
        self.sh_addr = sh_addr
        self.sh_offset = sh_offset
        self.sh_size = sh_size
        self.sh_link = sh_link
        self.sh_info = sh_info
        self.sh_addralign = sh_addralign
        self.sh_entsize = sh_entsize


class Segment(Plain):
    """One program header (``ElfN_Phdr``)."""

    __slots__ = _fields = ("p_type", "p_flags", "p_offset", "p_vaddr", "p_paddr", "p_filesz", "p_memsz", "p_align")

    p_type: int
    p_flags: int
    p_offset: int
    p_vaddr: int
    p_paddr: int
    p_filesz: int
    p_memsz: int
    p_align: int

    def __init__(self, p_type: int, p_flags: int, p_offset: int, p_vaddr: int, p_paddr: int, p_filesz: int,
                 p_memsz: int, p_align: int) -> None:
        self.p_type = p_type
        self.p_flags = p_flags
        self.p_offset = p_offset
        self.p_vaddr = p_vaddr
        self.p_paddr = p_paddr
        self.p_filesz = p_filesz
        self.p_memsz = p_memsz
        self.p_align = p_align


class RawSymbols(Plain):
    """A symbol table as columns: ``st_value``, ``st_size``, ``st_info``,
    ``st_shndx`` and ``st_name`` (offsets into ``strtab``); ``st_other``
    (visibility) and ``label_sections`` (per section index: 1 for an
    ``SHF_ALLOC`` section whose name contains "text", 2 for one whose name
    contains "data", else 0: where perf takes ``STT_NOTYPE`` labels) when
    read from a file, None when unknown (no label is then taken)."""

    _fields = ("st_name", "st_value", "st_size", "st_info", "st_shndx", "strtab", "section", "st_other",
               "label_sections")

    st_name: np.ndarray
    st_value: np.ndarray
    st_size: np.ndarray
    st_info: np.ndarray
    st_shndx: np.ndarray
    strtab: bytes
    section: str
    st_other: np.ndarray | None
    label_sections: np.ndarray | None

    def __init__(self, st_name: np.ndarray, st_value: np.ndarray, st_size: np.ndarray, st_info: np.ndarray,
                 st_shndx: np.ndarray, strtab: bytes, section: str, st_other: np.ndarray | None = None,
                 label_sections: np.ndarray | None = None) -> None:
        self.st_name = st_name
        self.st_value = st_value
        self.st_size = st_size
        self.st_info = st_info
        self.st_shndx = st_shndx
        self.strtab = strtab
        self.section = section
        self.st_other = st_other
        self.label_sections = label_sections

    def __len__(self) -> int:
        return len(self.st_value)

    def name(self, i: int) -> str:
        """The name of symbol ``i`` (decoded on demand)."""
        off = int(self.st_name[i])
        end = self.strtab.find(b"\0", off)
        return self.strtab[off:end if end >= 0 else len(self.strtab)].decode("utf-8", "replace")


class ElfFile(Plain):
    """Headers of one ELF file, read eagerly (they are small); section
    contents are read on demand from ``path``.

    ``ElfFile.open(path)`` raises :class:`FormatError` for a file that is not
    ELF or whose headers point outside the file.
    """

    _fields = ("path", "elf64", "little_endian", "e_type", "e_machine", "e_entry", "sections", "segments",
               "file_size")

    path: str
    elf64: bool
    little_endian: bool
    e_type: int
    e_machine: int
    e_entry: int
    sections: list[Section]
    segments: list[Segment]
    file_size: int

    def __init__(self, path: str, elf64: bool, little_endian: bool, e_type: int, e_machine: int, e_entry: int,
                 sections: list[Section] | None = None, segments: list[Segment] | None = None,
                 file_size: int = 0) -> None:
        self.path = path
        self.elf64 = elf64
        self.little_endian = little_endian
        self.e_type = e_type
        self.e_machine = e_machine
        self.e_entry = e_entry
        self.sections = [] if sections is None else sections
        self.segments = [] if segments is None else segments
        self.file_size = file_size

    # -- construction -------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike) -> "ElfFile":
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                ident = f.read(64)
                return cls._parse(path, f, size, ident)
        except OSError as err:
            raise FormatError(f"{path}: cannot read ELF file: {err.strerror or err}",
                              path=path, offset=0) from err

    @classmethod
    def from_bytes(cls, data: bytes, name: str) -> "ElfFile":
        """An ELF image held in memory (the vdso), called ``name`` in messages;
        its contents are read from ``data`` instead of a file."""
        import io

        data = bytes(data)
        self = cls._parse(name, io.BytesIO(data), len(data), data[:64])
        self._image = data
        return self

    @staticmethod
    def is_elf(path: str | os.PathLike) -> bool:
        """True when ``path`` is a readable file starting with the ELF magic."""
        try:
            with open(path, "rb") as f:
                return f.read(4) == _ELF_MAGIC
        except OSError:
            return False

    @classmethod
    def _parse(cls, path, f, size, ident) -> "ElfFile":
        if len(ident) < 52 or ident[:4] != _ELF_MAGIC:
            raise FormatError(f"{path}: not an ELF file (expected magic 7f 45 4c 46 at offset 0)",
                              path=path, offset=0)
        ei_class, ei_data = ident[4], ident[5]
        if ei_class not in (1, 2) or ei_data not in (1, 2):
            raise FormatError(f"{path}: unknown ELF class {ei_class} / data encoding {ei_data} "
                              "at offset 4 (expected 1 or 2)", path=path, offset=4)
        elf64 = ei_class == 2
        order = "<" if ei_data == 1 else ">"
        if elf64:
            fmt = order + "HHIQQQIHHHHHH"
        else:
            fmt = order + "HHIIIIIHHHHHH"
        need = 16 + struct.calcsize(fmt)
        if len(ident) < need:
            raise FormatError(f"{path}: truncated ELF header ({len(ident)} of {need} bytes)",
                              path=path, offset=len(ident))
        (e_type, e_machine, _ver, e_entry, e_phoff, e_shoff, _flags, _ehsize,
         e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from(fmt, ident, 16)
        self = cls(path, elf64, ei_data == 1, e_type, e_machine, e_entry, file_size=size)

        def read(off: int, n: int, what: str) -> bytes:
            if off < 0 or n < 0 or off + n > size:
                raise FormatError(f"{path}: {what} at offset {off:#x} (+{n} bytes) lies outside "
                                  f"the file ({size} bytes): truncated or corrupt ELF",
                                  path=path, offset=off)
            f.seek(off)
            return f.read(n)

        # program headers
        if e_phoff and e_phnum:
            if elf64:
                pfmt, pent = order + "IIQQQQQQ", 56
            else:
                pfmt, pent = order + "IIIIIIII", 32
            if e_phentsize < pent:
                raise FormatError(f"{path}: e_phentsize {e_phentsize} at offset 0x36 is smaller "
                                  f"than {pent}", path=path, offset=0x36 if elf64 else 0x2A)
            blob = read(e_phoff, e_phentsize * e_phnum, "program header table")
            for i in range(e_phnum):
                v = struct.unpack_from(pfmt, blob, i * e_phentsize)
                if elf64:
                    p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align = v
                else:
                    p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_flags, p_align = v
                self.segments.append(Segment(p_type, p_flags, p_offset, p_vaddr, p_paddr,
                                             p_filesz, p_memsz, p_align))

        # section headers
        if e_shoff:
            if elf64:
                sfmt, sent = order + "IIQQQQIIQQ", 64
            else:
                sfmt, sent = order + "IIIIIIIIII", 40
            if e_shentsize < sent:
                raise FormatError(f"{path}: e_shentsize {e_shentsize} is smaller than {sent}",
                                  path=path, offset=0x3A if elf64 else 0x2E)
            first = struct.unpack_from(sfmt, read(e_shoff, sent, "section header 0"))
            # gABI: more than SHN_LORESERVE sections keep the count in section 0's
            # sh_size and the string-table index in its sh_link
            if e_shnum == 0:
                e_shnum = first[5]
            if e_shstrndx == SHN_XINDEX:
                e_shstrndx = first[6]
            blob = read(e_shoff, e_shentsize * e_shnum, "section header table")
            raw = [struct.unpack_from(sfmt, blob, i * e_shentsize) for i in range(e_shnum)]
            names = b""
            if 0 < e_shstrndx < e_shnum:
                s = raw[e_shstrndx]
                names = read(s[4], s[5], "section name string table")
            for i, (sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info,
                    sh_addralign, sh_entsize) in enumerate(raw):
                end = names.find(b"\0", sh_name)
                name = names[sh_name:end if end >= 0 else len(names)].decode("ascii", "replace")
                self.sections.append(Section(i, name, sh_type, sh_flags, sh_addr, sh_offset,
                                             sh_size, sh_link, sh_info, sh_addralign, sh_entsize))
        return self

    # -- contents -----------------------------------------------------------
    def read(self, offset: int, size: int, what: str = "data") -> bytes:
        """``size`` bytes at file ``offset``; FormatError when out of bounds."""
        if offset < 0 or size < 0 or offset + size > self.file_size:
            raise FormatError(f"{self.path}: {what} at offset {offset:#x} (+{size} bytes) lies "
                              f"outside the file ({self.file_size} bytes): truncated or corrupt ELF",
                              path=self.path, offset=offset)
        image = self.__dict__.get("_image")
        if image is not None:
            return image[offset:offset + size]
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def section(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def section_data(self, sec: Section) -> bytes:
        """The bytes of a section (empty for SHT_NOBITS)."""
        if sec.sh_type == SHT_NOBITS:
            return b""
        return self.read(sec.sh_offset, sec.sh_size, f"section {sec.name or sec.index}")

    @property
    def order(self) -> str:
        return "<" if self.little_endian else ">"

    @property
    def load_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.p_type == PT_LOAD]

    def _notes(self, data: bytes):
        order, pos = self.order, 0
        while pos + 12 <= len(data):
            namesz, descsz, ntype = struct.unpack_from(order + "III", data, pos)
            pos += 12
            name = data[pos:pos + namesz]
            pos += (namesz + 3) & ~3
            desc = data[pos:pos + descsz]
            pos += (descsz + 3) & ~3
            yield name.rstrip(b"\0"), ntype, desc

    @property
    def build_id(self) -> str | None:
        """The GNU build-id as lowercase hex (``NT_GNU_BUILD_ID`` note), or None."""
        blobs = []
        for s in self.sections:
            if s.sh_type == SHT_NOTE:
                blobs.append((s.sh_offset, s.sh_size))
        if not blobs:
            blobs = [(p.p_offset, p.p_filesz) for p in self.segments if p.p_type == PT_NOTE]
        for off, size in blobs:
            try:
                data = self.read(off, size, "note")
            except FormatError:
                continue
            for name, ntype, desc in self._notes(data):
                if name == b"GNU" and ntype == NT_GNU_BUILD_ID and desc:
                    return desc.hex()
        return None

    @property
    def debuglink(self) -> tuple[str, int] | None:
        """``(file name, crc32)`` from ``.gnu_debuglink``, or None."""
        sec = self.section(".gnu_debuglink")
        if sec is None or sec.sh_type == SHT_NOBITS:
            return None
        data = self.section_data(sec)
        end = data.find(b"\0")
        if end <= 0:
            return None
        crc_off = (end + 4) & ~3
        crc = struct.unpack_from(self.order + "I", data, crc_off)[0] if crc_off + 4 <= len(data) else 0
        return data[:end].decode("utf-8", "replace"), crc

    def has_symtab(self) -> bool:
        s = self.section(".symtab")
        return s is not None and s.sh_type == SHT_SYMTAB and s.sh_size > 0

    def symbols(self, which: str = ".symtab") -> RawSymbols | None:
        """Read ``.symtab`` or ``.dynsym`` in bulk; None when absent."""
        import numpy as np

        sec = self.section(which)
        if sec is None or sec.sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or sec.sh_size == 0:
            return None
        if sec.sh_flags & SHF_COMPRESSED:
            raise FormatError(f"{self.path}: section {which} is compressed (SHF_COMPRESSED), "
                              "which is not supported for symbol tables", path=self.path,
                              offset=sec.sh_offset)
        dt = _sym_dtype(self.elf64, self.order)
        if sec.sh_entsize and sec.sh_entsize != dt.itemsize:
            raise FormatError(f"{self.path}: {which} sh_entsize is {sec.sh_entsize}, expected "
                              f"{dt.itemsize}", path=self.path, offset=sec.sh_offset)
        if not 0 < sec.sh_link < len(self.sections):
            raise FormatError(f"{self.path}: {which} sh_link {sec.sh_link} names no string table",
                              path=self.path, offset=sec.sh_offset)
        count = sec.sh_size // dt.itemsize
        data = self.read(sec.sh_offset, count * dt.itemsize, f"section {which}")
        arr = np.frombuffer(data, dtype=dt)
        strtab = self.section_data(self.sections[sec.sh_link])
        return RawSymbols(
            st_name=arr["st_name"].astype(np.int64),
            st_value=arr["st_value"].astype(np.uint64),
            st_size=arr["st_size"].astype(np.uint64),
            st_info=arr["st_info"].copy(),
            st_shndx=arr["st_shndx"].astype(np.uint16),
            strtab=strtab,
            section=which,
            st_other=arr["st_other"].copy(),
            label_sections=self.label_sections(),
        )

    def label_sections(self) -> np.ndarray:
        """Per section index, where perf takes ``STT_NOTYPE`` labels defined
        there as symbols (``dso__load_sym_internal``: the section occupies
        memory, ``SHF_ALLOC``, and ``elf_sec__filter`` passes): 1 when its
        name contains "text", 2 when it contains "data" (and not "text"), 0
        otherwise."""
        import numpy as np

        return np.array([0 if not sec.sh_flags & SHF_ALLOC else 1 if "text" in sec.name
                         else 2 if "data" in sec.name else 0 for sec in self.sections], dtype=np.uint8)

    def plt_symbols(self) -> list[tuple[int, int, str, int]]:
        """Synthesized ``name@plt`` symbols for the PLT entries, as
        ``(address, size, name, addend)``: the PLT has no symbols of its own,
        perf makes them from ``.rela.plt``/``.rel.plt``
        (``dso__synthesize_plt_symbols``). On x86 with IBT the entries live in
        ``.plt.sec`` (no header). An IRELATIVE slot (an IFUNC, no symbol) gets
        the name ``""`` and its resolver's address as ``addend``. Read with
        ``struct`` (no numpy: the small-file report needs them too)."""
        plt = self.section(".plt")
        rel = self.section(".rela.plt") or self.section(".rel.plt")
        if plt is None or rel is None or plt.sh_type == SHT_NOBITS or rel.sh_type == SHT_NOBITS:
            return []
        if not 0 < rel.sh_link < len(self.sections):
            return []
        is_rela = rel.sh_type == SHT_RELA
        x86 = self.e_machine in (EM_386, EM_X86_64)
        if x86:
            header, entry = 16, 16
        elif self.e_machine == EM_AARCH64:
            header, entry = 32, 16
        else:
            entry = plt.sh_entsize or 16
            header = entry
        rels = self._relocs(rel)
        if x86:  # IFUNC relocations are not in PLT order (perf sorts them too)
            rels.sort(key=lambda r: r[0])
        count = len(rels)
        shift = 32 if self.elf64 else 8
        dyn = self._symbol_names(self.sections[rel.sh_link].name)
        if dyn is None:
            return []
        n_dyn, dyn_name = dyn
        sec = self.section(".plt.sec") if x86 else None
        if sec is not None and sec.sh_type != SHT_NOBITS:
            addr = sec.sh_addr
        elif count * entry == plt.sh_size:  # no lazy-binding header
            addr = plt.sh_addr
        else:
            addr = plt.sh_addr + header
        out = []
        for r in rels:
            idx = r[1] >> shift
            name = dyn_name(idx) if 0 < idx < n_dyn else ""
            out.append((addr, entry, f"{name}@plt" if name else "", r[2] if is_rela else 0))
            addr += entry
        if x86 and self.elf64:
            out += self._plt_got_symbols(n_dyn, dyn_name)
        return out

    def _symbol_names(self, which: str):
        """``(count, name of symbol i)`` of a symbol table read for its names
        alone (no numpy); None when absent. Fails as :meth:`symbols` does."""
        sec = self.section(which)
        if sec is None or sec.sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or sec.sh_size == 0:
            return None
        size = 24 if self.elf64 else 16
        if sec.sh_flags & SHF_COMPRESSED:
            raise FormatError(f"{self.path}: section {which} is compressed (SHF_COMPRESSED), "
                              "which is not supported for symbol tables", path=self.path,
                              offset=sec.sh_offset)
        if sec.sh_entsize and sec.sh_entsize != size:
            raise FormatError(f"{self.path}: {which} sh_entsize is {sec.sh_entsize}, expected "
                              f"{size}", path=self.path, offset=sec.sh_offset)
        if not 0 < sec.sh_link < len(self.sections):
            raise FormatError(f"{self.path}: {which} sh_link {sec.sh_link} names no string table",
                              path=self.path, offset=sec.sh_offset)
        count = sec.sh_size // size
        data = self.read(sec.sh_offset, count * size, f"section {which}")
        strtab = self.section_data(self.sections[sec.sh_link])
        u32 = struct.Struct(self.order + "I").unpack_from

        def name(i: int) -> str:
            off = u32(data, i * size)[0]
            end = strtab.find(b"\0", off)
            return strtab[off:end if end >= 0 else len(strtab)].decode("utf-8", "replace")

        return count, name

    def _relocs(self, sec: Section) -> list[list[int]]:
        """A SHT_RELA/SHT_REL section as ``[r_offset, r_info, r_addend]`` rows
        (r_addend 0 for SHT_REL)."""
        rela = sec.sh_type == SHT_RELA
        fmt = self.order + ("QQq" if self.elf64 else "IIi") if rela else self.order + ("QQ" if self.elf64 else "II")
        size = struct.calcsize(fmt)
        count = sec.sh_size // size
        data = self.read(sec.sh_offset, count * size, f"section {sec.name}")
        if rela:
            return [list(r) for r in struct.iter_unpack(fmt, data)]
        return [[o, i, 0] for o, i in struct.iter_unpack(fmt, data)]

    def _plt_got_symbols(self, n_dyn: int, dyn_name) -> list[tuple[int, int, str, int]]:
        # .plt.got entries jump through a GOT slot filled by a GLOB_DAT relocation
        # in .rela.dyn: decode "jmp *disp32(%rip)" (ff 25, maybe after endbr64 and
        # a bnd prefix) to find the slot, and name the entry after its symbol.
        sec = self.section(".plt.got")
        rela = self.section(".rela.dyn")
        if sec is None or rela is None or sec.sh_type == SHT_NOBITS or not sec.sh_size:
            return []
        entry = sec.sh_entsize or 8
        code = self.section_data(sec)
        jumps = []
        for pos in range(0, len(code) - entry + 1, entry):
            chunk = code[pos:pos + entry]
            j = chunk.find(b"\xff\x25")
            if j < 0 or j + 6 > len(chunk):
                continue
            addr = sec.sh_addr + pos
            jumps.append((addr, addr + j + 6 + struct.unpack_from("<i", chunk, j + 2)[0]))
        if not jumps:
            return []
        slot_sym = self._glob_dat_slots(rela, {slot for _, slot in jumps})
        out = []
        for addr, slot in jumps:
            idx = slot_sym.get(slot, 0)
            if 0 < idx < n_dyn:
                out.append((addr, entry, f"{dyn_name(idx)}@plt", 0))
        return out

    def _glob_dat_slots(self, rela: Section, slots: set[int]) -> dict[int, int]:
        """GOT slot -> symbol index of the GLOB_DAT relocations (x86-64) of
        ``rela`` at these slots (the last one when a slot has several): one
        pass over the r_offset words (a large library has tens of thousands
        of relocations; the .plt.got entries are a few)."""
        from itertools import compress

        size = 24 if rela.sh_type == SHT_RELA else 16
        count = rela.sh_size // size
        data = self.read(rela.sh_offset, count * size, f"section {rela.name}")
        step = size // 8
        if self.order == "<" and sys.byteorder == "little":
            words = memoryview(data).cast("Q")
            offs = words[0::step]
        else:
            words = [w for (w,) in struct.iter_unpack(self.order + "Q", data)]
            offs = words[0::step]
        out: dict[int, int] = {}
        for i in compress(range(count), map(slots.__contains__, offs)):
            info = words[i * step + 1]
            if info & 0xFFFFFFFF == R_X86_64_GLOB_DAT:
                out[offs[i]] = info >> 32
        return out

    def offset_to_vaddr(self, offsets: np.ndarray) -> np.ndarray:
        """Map file offsets to link-time virtual addresses through the PT_LOAD
        segment that holds each offset (``vaddr = off - p_offset + p_vaddr``).

        Offsets in no segment's file range use the nearest segment below them
        (e.g. ``.bss`` beyond ``p_filesz``), and the identity before the first.
        """
        import numpy as np

        offsets = np.asarray(offsets, dtype=np.uint64)
        loads = sorted(self.load_segments, key=lambda s: s.p_offset)
        if not loads:
            return offsets.copy()
        # prefer executable segments when two segments start at the same offset
        starts = np.array([s.p_offset for s in loads], dtype=np.uint64)
        delta = np.array([(s.p_vaddr - s.p_offset) & 0xFFFFFFFFFFFFFFFF for s in loads],
                         dtype=np.uint64)
        idx = np.searchsorted(starts, offsets, side="right") - 1
        out = offsets.copy()
        ok = idx >= 0
        out[ok] = offsets[ok] + delta[idx[ok]]  # wraps modulo 2**64 like the hardware
        return out
