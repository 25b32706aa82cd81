"""Symbol demangling: C++ (Itanium ABI) and Rust (legacy and v0).

C++ names go through ``__cxa_demangle`` from libstdc++ (loaded with ctypes;
no Python package needed). Rust legacy names (``_ZN...17h<hash>E``) are
decoded here, with the hash dropped and ``$LT$``-style escapes expanded, as
perf prints them; Rust v0 names (``_R...``) are decoded by a pure-Python
decoder of the v0 grammar (RFC 2603) whose output matches binutils'
``c++filt``. Results are cached per name.
"""

from __future__ import annotations

import ctypes
import functools
import re

__all__ = ["demangle", "demangle_cxx", "demangle_rust", "cxa_demangle_available"]


# -- C++ through libstdc++ ----------------------------------------------------
_cxa = None
_free = None


def _load_cxa():
    global _cxa, _free
    if _cxa is not None:
        return _cxa or None
    _cxa = False
    for name in ("libstdc++.so.6", None):
        if name is None:  # the soname did not load: ask the linker cache (runs ldconfig; imports subprocess)
            from ctypes.util import find_library

            name = find_library("stdc++")
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        free = libc.free
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        _cxa, _free = fn, free
        break
    return _cxa or None


def cxa_demangle_available() -> bool:
    """True when libstdc++'s ``__cxa_demangle`` could be loaded."""
    return _load_cxa() is not None


def demangle_cxx(name: str) -> str | None:
    """Demangle an Itanium C++ name with ``__cxa_demangle``; None when it is
    not a valid mangled name or libstdc++ is not available."""
    fn = _load_cxa()
    if fn is None:
        return None
    status = ctypes.c_int(0)
    try:
        raw = name.encode()
    except UnicodeEncodeError:
        return None
    ptr = fn(raw, None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _free(ptr)


# -- Rust legacy -----------------------------------------------------------------
_LEGACY_ESCAPES = {"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(",
                   "RP": ")", "C": ","}
_HASH = re.compile(r"h[0-9a-f]{16}$")


def _legacy_rust(name: str, keep_hash: bool = False) -> str | None:
    # _ZN{len}{ident}...E with the last ident being h<16 hex> (the symbol hash)
    if name.startswith("__ZN"):
        name = name[1:]
    if not name.startswith("_ZN"):
        return None
    pos, parts = 3, []
    while pos < len(name) and name[pos] != "E":
        m = re.match(r"\d+", name[pos:])
        if not m:
            return None
        n = int(m.group())
        pos += len(m.group())
        if n == 0 or pos + n > len(name):
            return None
        parts.append(name[pos:pos + n])
        pos += n
    if pos >= len(name) or not parts or not _HASH.match(parts[-1]):
        return None
    if not keep_hash:
        parts = parts[:-1]
    out = []
    for part in parts:
        if part.startswith("_$"):
            part = part[1:]
        s, i, buf = part, 0, []
        while i < len(s):
            if s[i] == "$":
                j = s.find("$", i + 1)
                if j < 0:
                    return None
                code = s[i + 1:j]
                if code in _LEGACY_ESCAPES:
                    buf.append(_LEGACY_ESCAPES[code])
                elif code.startswith("u") and all(c in "0123456789abcdef" for c in code[1:]) \
                        and len(code) > 1:
                    buf.append(chr(int(code[1:], 16)))
                else:
                    return None
                i = j + 1
            elif s.startswith("..", i):
                buf.append("::")
                i += 2
            else:
                buf.append(s[i])
                i += 1
        out.append("".join(buf))
    return "::".join(out)


# -- Rust v0 -------------------------------------------------------------------
_BASIC = {"a": "i8", "b": "bool", "c": "char", "d": "f64", "e": "str", "f": "f32", "h": "u8",
          "i": "isize", "j": "usize", "l": "i32", "m": "u32", "n": "i128", "o": "u128",
          "s": "i16", "t": "u16", "u": "()", "v": "...", "x": "i64", "y": "u64", "z": "!",
          "p": "_"}


class _V0Error(Exception):
    pass


class _V0:
    """Decoder for the Rust v0 mangling (RFC 2603), printing like c++filt."""

    def __init__(self, s: str):
        self.s, self.pos, self.depth = s, 0, 0

    def peek(self) -> str:
        return self.s[self.pos] if self.pos < len(self.s) else ""

    def next(self) -> str:
        if self.pos >= len(self.s):
            raise _V0Error("eof")
        c = self.s[self.pos]
        self.pos += 1
        return c

    def eat(self, c: str) -> bool:
        if self.peek() == c:
            self.pos += 1
            return True
        return False

    def base62(self) -> int:
        # "_" is 0; otherwise digits/letters then "_", value + 1
        if self.eat("_"):
            return 0
        x = 0
        while True:
            c = self.next()
            if c == "_":
                return x + 1
            if c.isdigit():
                d = ord(c) - 48
            elif "a" <= c <= "z":
                d = ord(c) - 87
            elif "A" <= c <= "Z":
                d = ord(c) - 29
            else:
                raise _V0Error("base62")
            x = x * 62 + d

    def opt_base62(self, tag: str) -> int:
        return self.base62() + 1 if self.eat(tag) else 0

    def ident(self) -> tuple[str, int]:
        dis = self.opt_base62("s")
        puny = self.eat("u")
        m = re.match(r"0|[1-9]\d*", self.s[self.pos:])
        if not m:
            raise _V0Error("ident")
        self.pos += len(m.group())
        n = int(m.group())
        self.eat("_")
        raw = self.s[self.pos:self.pos + n]
        if len(raw) != n:
            raise _V0Error("ident length")
        self.pos += n
        if puny:
            raw = _punycode(raw)
        return raw, dis

    def backref(self, fn):
        start = self.pos - 1
        target = self.base62()
        if target + self.base_off >= start or self.depth > 100:
            raise _V0Error("backref")
        saved = self.pos
        self.pos = target + self.base_off
        self.depth += 1
        try:
            return fn()
        finally:
            self.depth -= 1
            self.pos = saved

    def path(self, in_value: bool = True) -> str:
        c = self.next()
        if c == "C":
            name, dis = self.ident()
            # c++filt (libiberty, verbose) always shows the crate disambiguator
            return f"{name}[{dis:x}]"
        if c == "N":
            ns = self.next()
            parent = self.path(in_value)
            name, dis = self.ident()
            if ns.isupper():
                label = {"C": "closure", "S": "shim"}.get(ns, ns)
                inner = f"{label}:{name}" if name else label
                return f"{parent}::{{{inner}#{dis}}}"
            return f"{parent}::{name}" if name else parent
        if c == "M":
            self.opt_base62("s")
            self.path()
            return f"<{self.type_()}>"
        if c == "X":
            self.opt_base62("s")
            self.path()
            ty = self.type_()
            tr = self.path(False)
            return f"<{ty} as {tr}>"
        if c == "Y":
            ty = self.type_()
            tr = self.path(False)
            return f"<{ty} as {tr}>"
        if c == "I":
            base = self.path(in_value)
            args = []
            while not self.eat("E"):
                args.append(self.generic_arg())
            sep = "::" if in_value else ""
            return f"{base}{sep}<{', '.join(args)}>"
        if c == "B":
            return self.backref(lambda: self.path(in_value))
        raise _V0Error(f"path {c!r}")

    def generic_arg(self) -> str:
        if self.eat("L"):
            lt = self.base62()
            return "'_" if lt == 0 else "'_"
        if self.eat("K"):
            return self.const()
        return self.type_()

    def const(self) -> str:
        if self.eat("B"):
            return self.backref(self.const)
        if self.eat("p"):
            return "_"
        ty = self.next()
        neg = self.eat("n")
        hexs = ""
        while not self.eat("_"):
            hexs += self.next()
        val = int(hexs, 16) if hexs else 0
        if ty == "b":
            return "true" if val else "false"
        if ty == "c":
            return repr(chr(val))
        # c++filt prints the type of an integer const
        return f"{'-' if neg else ''}{val}: {_BASIC.get(ty, ty)}"

    def binder(self) -> None:
        if self.eat("G"):
            self.base62()

    def type_(self) -> str:
        c = self.next()
        if c in _BASIC:
            return _BASIC[c]
        if c == "R" or c == "Q":
            if self.eat("L"):
                self.base62()
            inner = self.type_()
            return ("&" if c == "R" else "&mut ") + inner
        if c == "P":
            return "*const " + self.type_()
        if c == "O":
            return "*mut " + self.type_()
        if c == "A":
            ty = self.type_()
            return f"[{ty}; {self.const()}]"
        if c == "S":
            return f"[{self.type_()}]"
        if c == "T":
            items = []
            while not self.eat("E"):
                items.append(self.type_())
            if len(items) == 1:
                return f"({items[0]},)"
            return f"({', '.join(items)})"
        if c == "F":
            self.binder()
            unsafe = self.eat("U")
            abi = ""
            if self.eat("K"):
                if self.eat("C"):
                    abi = "C"
                else:
                    abi, _ = self.ident()
                    abi = abi.replace("_", "-")
            args = []
            while not self.eat("E"):
                args.append(self.type_())
            ret = self.type_()
            s = ("unsafe " if unsafe else "") + (f'extern "{abi}" ' if abi else "")
            s += f"fn({', '.join(args)})"
            return s if ret == "()" else f"{s} -> {ret}"
        if c == "D":
            self.binder()
            bounds = []
            while not self.eat("E"):
                b = self.path(False)
                while self.eat("p"):
                    name, _ = self.ident()
                    ty = self.type_()
                    b = (b[:-1] + f", {name} = {ty}>") if b.endswith(">") else f"{b}<{name} = {ty}>"
                bounds.append(b)
            self.eat("L") and self.base62()
            return "dyn " + " + ".join(bounds)
        if c == "B":
            return self.backref(self.type_)
        self.pos -= 1
        return self.path(False)


def _punycode(s: str) -> str:
    try:
        if "_" in s:
            basic, _, enc = s.rpartition("_")
            return (basic + "-" + enc).encode("ascii").decode("punycode")
        return s.encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        return s


def _v0_rust(name: str) -> str | None:
    if name.startswith("__R"):
        name = name[1:]
    if not name.startswith("_R"):
        return None
    d = _V0(name)
    d.pos = 2
    if d.peek().isdigit():  # encoding version
        return None
    d.base_off = 2
    try:
        out = d.path()
        # an optional instantiating crate follows; a "." suffix is kept verbatim
        return out
    except (_V0Error, ValueError, IndexError, RecursionError):
        return None


def demangle_rust(name: str, keep_hash: bool = False) -> str | None:
    """Demangle a Rust symbol (legacy or v0); None when it is not one."""
    if name.startswith(("_R", "__R")):
        return _v0_rust(name)
    return _legacy_rust(name, keep_hash)


@functools.lru_cache(maxsize=1 << 16)
def demangle(name: str, params: bool = False) -> str:
    """Demangle a C++ or Rust symbol name; other names come back unchanged.

    C++ names come as perf prints them (its ``DMGL_NO_OPTS``, what ``c++filt -p``
    prints): the qualified name with its template arguments, without the
    function's parameters, return type, cv-qualifiers or clone suffixes
    (``foo::S::bar``, ``work<long>``). ``params=True`` gives the whole
    signature, as ``c++filt`` and ``perf -v`` print it
    (``foo::S::bar(int) const``, ``long work<long>(long)``)."""
    if not name or name[0] != "_":
        return name
    if name.startswith(("_R", "__R")):
        return _v0_rust(name) or name
    if "@" in name:  # symbol version (foo@@GLIBC_2.2.5, foo@plt): not part of the mangling
        base, at, version = name.partition("@")
        out = demangle(base, params)
        return name if out == base else f"{out}@{version}"
    if name.startswith(("_Z", "__Z")):
        r = _legacy_rust(name)
        if r is not None:
            return r
        base, dot, suffix = name.partition(".")
        out = demangle_cxx(name)
        if out is None and dot:
            # compiler clones (foo.cold, foo.constprop.0): demangle the base, keep the suffix
            out = demangle_cxx(base)
            if out is not None:
                out = f"{out} [clone .{suffix}]"
        if out is None:
            return name
        return out if params else without_params(out)
    return name


_SPECIAL = ("transaction clone for ", "non-transaction clone for ", "non-virtual thunk to ", "virtual thunk to ",
            "covariant return thunk to ", "guard variable for ", "vtable for ", "VTT for ", "typeinfo for ",
            "typeinfo name for ", "typeinfo fn for ", "construction vtable for ", "reference temporary ",
            "TLS init function for ", "TLS wrapper function for ", "hidden alias for ", "java Class for ")
_QUALIFIERS = (" const", " volatile", " restrict", " &&", " &", " noexcept", " transaction_safe")


def without_params(text: str) -> str:
    """A demangled C++ signature without its parameter list, return type,
    trailing qualifiers and ``[clone ...]`` suffixes: ``long work<long>(long)``
    -> ``work<long>``. Names that are not functions (``vtable for X``,
    variables) come back unchanged."""
    if text.startswith(_SPECIAL):  # thunks, guard variables, vtables...: printed whole, as libiberty does
        return text
    while text.endswith("]") and " [clone " in text:
        text = text[: text.rindex(" [clone ")]
    end = len(text)
    changed = True
    while changed:  # qualifiers after the parameter list
        changed = False
        for q in _QUALIFIERS:
            if text.endswith(q, 0, end):
                end -= len(q)
                changed = True
    if end == 0 or text[end - 1] != ")":
        return text
    depth = 0
    i = end - 1
    while i >= 0:  # the '(' of the outermost parameter list
        c = text[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                break
        i -= 1
    if i <= 0:
        return text
    name = text[:i]
    return name[_name_start(name):]


def _name_start(name: str) -> int:
    """Where the function's qualified name starts after a return type
    (template functions have one): after the last space outside <>, (), []
    and {} and before any ``operator`` of the last name component."""
    limit = len(name)
    op = _operator_at(name)
    if op is not None:
        limit = op
    depth = 0
    start = 0
    for i in range(limit):
        c = name[i]
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        elif c == " " and depth == 0:
            start = i + 1
    return start


def _operator_at(name: str) -> int | None:
    """Index of the ``operator`` that names the function (``X::operator<``,
    ``operator new``), outside template arguments; None when there is none."""
    depth = 0
    i = 0
    n = len(name)
    while i < n:
        if name.startswith("operator", i) and (i == 0 or name[i - 1] in ": ") and depth == 0:
            rest = name[i + 8: i + 9]
            if not (rest.isalnum() or rest == "_"):
                return i
        c = name[i]
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        i += 1
    return None
