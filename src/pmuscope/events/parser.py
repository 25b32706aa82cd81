"""The perf event grammar: an event list string → :class:`EventSpec` s.

Mirrors what ``perf`` 6.x's ``parse-events.{l,y,c}`` builds::

    list     := item (',' item)*
    item     := [NAME] '{' event (',' event)* '}' [':' MODS] | event
    event    := 'mem:' ADDR ['/' LEN] [':' RWX] [':' MODS]
              | PMU '/' terms '/' [':' MODS]
              | (SYMBOLIC | CACHE | rHEX | ALIAS | SUBSYS ':' TRACEPOINT) ['/' terms '/'] [':' MODS]
    terms    := term (',' term)*      term := NAME ['=' VALUE]

Every event starts with ``exclude_guest=1`` (perf's ``event_attr_init``);
modifiers recompute the exclude bits the way perf's ``get_event_modifier``
does. Session defaults (read_format, disabled, inherit, ...) are *not* applied
here: see :mod:`pmuscope.events.defaults`.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from ..errors import EventParseError, UnknownEventError
from ..kernel.abi import (
    PERF_PMU_TYPE_SHIFT,
    PERF_TYPE_BREAKPOINT,
    PERF_TYPE_HW_CACHE,
    PERF_TYPE_RAW,
    PERF_SAMPLE_CPU,
    PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_RAW,
    PERF_SAMPLE_TIME,
    PERF_TYPE_TRACEPOINT,
    perf_event_attr,
)
from . import generic, tracepoints
from .spec import EventSpec

if TYPE_CHECKING:
    from .pmu import PMU, Alias


def _pmu():
    """The sysfs PMU module, imported when an event needs a PMU (``task-clock``
    does not: generic and software events are tables)."""
    from . import pmu

    return pmu

MODIFIER_CHARS = "ukhIGHpPSDWeb"
#: the environment variable naming a vendor table directory (``vendor.ENV_DIR``)
VENDOR_ENV_DIR = "PMUSCOPE_EVENTS_DIR"
_MOD_RE = re.compile(f"[{MODIFIER_CHARS}]+")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.*?\[\]!\-@]+")
_RAW_RE = re.compile(r"r([0-9a-fA-F]+)")
_TERM_KEY = re.compile(r"[A-Za-z0-9_.\-]+")

# breakpoint types (linux/hw_breakpoint.h)
HW_BREAKPOINT_R, HW_BREAKPOINT_W, HW_BREAKPOINT_X = 1, 2, 4

#: per-event terms every PMU accepts (perf's config_term_common + friends)
GENERAL_TERMS = (
    "config", "config1", "config2", "config3", "name", "period", "freq", "call-graph",
    "stack-size", "max-stack", "inherit", "no-inherit", "overwrite", "no-overwrite",
    "percore", "metric-id", "aux-output", "aux-sample-size", "time", "branch_type",
    "driver-config", "cpu",
)  # fmt: skip
_STRING_TERMS = ("name", "call-graph", "metric-id", "branch_type", "driver-config")


class _Term:
    """One ``key[=value]`` term and the columns of its key and value."""

    __slots__ = ("key", "value", "pos", "vpos")

    def __init__(self, key: str, value: int | str | None, pos: int, vpos: int) -> None:
        self.key = key
        self.value = value
        self.pos = pos
        self.vpos = vpos

    def __repr__(self) -> str:
        return f"_Term(key={self.key!r}, value={self.value!r}, pos={self.pos!r}, vpos={self.vpos!r})"


class _Parser:
    def __init__(self, text: str, sysfs_root: str, tracefs_root: str | None, vendor) -> None:
        self.text = text
        self.i = 0
        self.sysfs_root = sysfs_root
        self._tracefs = tracefs_root
        self.vendor = vendor
        self.out: list[EventSpec] = []
        self.ngroups = 0
        self.vendor_note = ""

    # -- errors / scanning ------------------------------------------------
    def error(self, reason: str, pos: int | None = None, cls=EventParseError) -> EventParseError:
        return cls(reason, self.text, self.i if pos is None else pos)

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def name(self, what: str = "an event name") -> tuple[str, int]:
        m = _NAME_CHARS.match(self.text, self.i)
        if not m:
            got = repr(self.peek()) if self.peek() else "end of string"
            raise self.error(f"expected {what}, got {got}")
        self.i = m.end()
        return m.group(0), m.start()

    @property
    def tracefs(self) -> str | None:
        if self._tracefs is None:
            self._tracefs = tracepoints.find_tracefs(self.sysfs_root) or ""
        return self._tracefs or None

    # -- grammar ----------------------------------------------------------
    def parse(self) -> list[EventSpec]:
        if not self.text.strip():
            raise self.error("empty event list", 0)
        while True:
            self.item()
            if self.i >= len(self.text):
                break
            if self.peek() != ",":
                raise self.error(f"unexpected {self.peek()!r}: expected ',' between events")
            self.i += 1
            if self.i >= len(self.text):
                raise self.error("expected an event after ','")
        return self.out

    def item(self) -> None:
        m = re.compile(r"([A-Za-z0-9_.\-]*)\{").match(self.text, self.i)
        if not m:
            self.out.extend(self.event())
            return
        start = self.i
        group_name = m.group(1) or None
        self.i = m.end()
        members: list[EventSpec] = []
        while True:
            if self.peek() == "{":
                raise self.error("groups cannot be nested")
            members.extend(self.event())
            c = self.peek()
            if c == ",":
                self.i += 1
                continue
            if c == "}":
                self.i += 1
                break
            raise self.error("expected ',' or '}' in group" if c else "unterminated group: expected '}'")
        group_mods = ""
        if self.peek() == ":":
            self.i += 1
            group_mods, mpos = self.modifiers()
        for part in _split_hybrid_group(members):
            self._finish_group(part, group_name, group_mods, mpos if group_mods else 0, start)
        self.out.extend(m for part in _split_hybrid_group(members) for m in part)

    def _finish_group(self, members: list[EventSpec], group_name, group_mods: str, mpos: int, start: int) -> None:
        index = self.ngroups
        self.ngroups += 1
        for k, spec in enumerate(members):
            spec.group = index
            spec.leader = k == 0
            spec.extra["group_size"] = len(members)
            if group_name:
                spec.extra["group_name"] = group_name
            if group_mods:
                _apply_modifiers(spec, group_mods, group=True, err=lambda r: self.error(r, mpos))
                spec.name = spec.name + (":" if ":" not in spec.name.split("/")[-1] else "") + group_mods
        if members:
            members[0].extra["group_text"] = self.text[start : self.i]

    def modifiers(self) -> tuple[str, int]:
        start = self.i
        m = _NAME_CHARS.match(self.text, self.i)
        word = m.group(0) if m else ""
        bad = next((k for k, c in enumerate(word) if c not in MODIFIER_CHARS), None)
        if not word:
            raise self.error("expected modifiers after ':'")
        if bad is not None:
            raise self.error(f"invalid modifier {word[bad]!r} (valid: {MODIFIER_CHARS})", start + bad)
        self.i = m.end()
        return word, start

    def event(self) -> list[EventSpec]:
        start = self.i
        if self.text.startswith("mem:", self.i):
            specs = [self.breakpoint()]
        else:
            word, wpos = self.name()
            if self.peek() == "/" and not _is_event_name(word, self):
                specs = self.pmu_event(word, wpos)
            elif self.peek() == ":" and self._tracepoint_follows(word):
                self.i += 1
                tp, tpos = self.name("a tracepoint name")
                specs = self.tracepoint(word, tp, wpos, tpos)
            else:
                specs = self.named_event(word, wpos)
            if self.peek() == "/" and specs and "pmu_terms" not in specs[0].extra:
                self.i += 1
                terms = self.terms()
                for spec in specs:
                    for term in terms:
                        if not self._general_term(spec, term):
                            raise self.error(
                                f"unknown term {term.key!r} for event {word!r} (valid: {', '.join(GENERAL_TERMS)})",
                                term.pos,
                                UnknownEventError,
                            )
        mods = ""
        if self.peek() == ":":
            self.i += 1
            mods, mpos = self.modifiers()
        elif self.i > start and self.text[self.i - 1] == "/" and _MOD_RE.match(self.text, self.i):
            mods, mpos = self.modifiers()  # perf also accepts pmu/terms/MODS without ':'
        if mods:
            for spec in specs:
                _apply_modifiers(spec, mods, group=False, err=lambda r: self.error(r, mpos))
        text = self.text[start : self.i]
        for spec in specs:
            spec.text = text
            spec.pos = start
            spec.modifiers = mods
            if spec.extra.get("named"):
                continue
            if "/" in text and spec.pmu != "tracepoint":
                spec.name = text
            else:
                spec.name = spec.name + (":" + mods if mods else "")
        return specs

    def _tracepoint_follows(self, word: str) -> bool:
        """``word:X`` is a tracepoint unless X is only modifier letters
        (perf's lexer makes the same choice)."""
        m = _NAME_CHARS.match(self.text, self.i + 1)
        if not m:
            return False
        return not _MOD_RE.fullmatch(m.group(0)) and not _is_event_name(word, self)

    # -- event kinds --------------------------------------------------------
    def new_spec(self, name: str, pmu: str | None, **attr_fields: int) -> EventSpec:
        attr = perf_event_attr(**attr_fields)
        attr.exclude_guest = 1  # perf's event_attr_init (perf_guest is false by default)
        return EventSpec(name=name, attr=attr, pmu=pmu)

    def named_event(self, word: str, wpos: int) -> list[EventSpec]:
        for table in (generic.HARDWARE, generic.SOFTWARE, generic.TOOL):
            if word in table:
                type_, config, _ = table[word]
                if table is generic.HARDWARE:
                    return self.per_core_pmu(word, type_, config)
                spec = self.new_spec(word, "software" if type_ == 1 else None, type=type_, config=config)
                if table is generic.TOOL:
                    spec.extra["tool"] = word
                return [spec]
        m = _RAW_RE.fullmatch(word)
        if m:
            config = int(m.group(1), 16)
            if config >> 64:
                raise self.error(f"raw event {word!r}: the config is more than 64 bits", wpos)
            return self.per_core_pmu(word, PERF_TYPE_RAW, config)
        try:
            config = generic.parse_cache_name(word)
        except generic.CacheOpInvalid as err:
            raise self.error(f"invalid cache event {word!r}: {err}", wpos, UnknownEventError) from None
        if config is not None:
            return self.per_core_pmu(word, PERF_TYPE_HW_CACHE, config)
        # a sysfs or vendor alias on any PMU (perf accepts bare alias names)
        found = []
        for pmu in _pmu().pmus(self.sysfs_root).values():
            alias = self.alias(pmu, word)
            if alias is not None:
                found.append(self.pmu_spec(pmu, [_Term(word, None, wpos, wpos)], word, wpos))
        if found:
            return found
        hint = _did_you_mean(word, self._known_names())
        if not hint and self.vendor_note and re.search(r"[._]", word):
            hint = self.vendor_note
        raise self.error(f"unknown event {word!r}{hint or ': see `pmuscope list`'}", wpos, UnknownEventError)

    def _known_names(self) -> list[str]:
        names = list(generic.HARDWARE) + list(generic.SOFTWARE) + list(generic.TOOL)
        names += [n for n, _c, _d in generic.cache_event_names()]
        for pmu in _pmu().pmus(self.sysfs_root).values():
            names += list(pmu.aliases)
        if self.vendor is not None:
            names += [a.name for a in self.vendor.events.values()]
        return names

    def per_core_pmu(self, word: str, type_: int, config: int) -> list[EventSpec]:
        """A generic hardware/cache/raw event: one event, or on a hybrid system
        (several core PMUs: cpu_core + cpu_atom, big.LITTLE armv8_pmuv3_N) one per
        core PMU, the PMU's type in config bits 32-63 (PERF_PMU_TYPE_SHIFT) for
        hardware/cache events and as the attr type for raw ones, as perf does."""
        cores = [p for p in _pmu().core_pmus(self.sysfs_root) if p.cpus is not None] if self._hybrid() else []
        if not cores:
            return [self.new_spec(word, None, type=type_, config=config)]
        out = []
        for pmu in cores:
            if type_ == PERF_TYPE_RAW:
                spec = self.new_spec(word, pmu.name, type=pmu.type, config=config)
            else:
                spec = self.new_spec(word, pmu.name, type=type_, config=config | pmu.type << PERF_PMU_TYPE_SHIFT)
            # not spec.cpus: a core PMU counts per task anywhere, the kernel just skips the other CPU type
            spec.extra["pmu_cpus"] = list(pmu.cpus or [])
            spec.extra["hybrid"] = True
            out.append(spec)
        return out

    def _hybrid(self) -> bool:
        return len(_pmu().core_pmus(self.sysfs_root)) > 1

    def tracepoint(self, subsys: str, name: str, spos: int, npos: int) -> list[EventSpec]:
        tracefs = self.tracefs
        if tracefs is None:
            raise self.error(
                f"tracepoint {subsys}:{name}: tracefs is not mounted under {self.sysfs_root}/kernel/tracing "
                "(mount -t tracefs nodev /sys/kernel/tracing)",
                spos,
                UnknownEventError,
            )
        events_dir = os.path.join(tracefs, "events")
        if not os.access(tracefs, os.R_OK | os.X_OK) or not os.access(events_dir, os.R_OK | os.X_OK):
            raise self.error(
                f"tracepoint {subsys}:{name}: cannot read {events_dir} (permission denied; tracefs is root-only "
                "by default: run as root, or remount it with mode=755 / a gid you belong to)",
                spos,
                UnknownEventError,
            )
        found = tracepoints.expand(tracefs, subsys, name)
        if not found:
            known = os.path.isdir(os.path.join(tracefs, "events", subsys)) or any(c in subsys for c in "*?[")
            if not known:
                hint = _did_you_mean(subsys, tracepoints.subsystems(tracefs))
                raise self.error(f"unknown tracepoint subsystem {subsys!r}{hint or f' (see {tracefs}/events)'}", spos, UnknownEventError)
            hint = _did_you_mean(name, tracepoints.events_of(tracefs, subsys))
            raise self.error(f"unknown tracepoint {subsys}:{name}{hint}", npos, UnknownEventError)
        out = []
        for sys_, ev, tid in found:
            spec = self.new_spec(f"{sys_}:{ev}", "tracepoint", type=PERF_TYPE_TRACEPOINT, config=tid)
            # perf's evsel__newtp: tracepoints sample every hit with raw data
            spec.attr.sample_period = 1
            spec.attr.sample_type = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD
            spec.extra["tracepoint"] = (sys_, ev)
            out.append(spec)
        return out

    def breakpoint(self) -> EventSpec:
        start = self.i
        self.i += 4
        m = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]+)").match(self.text, self.i)
        if not m:
            raise self.error("expected a breakpoint address after 'mem:' (e.g. mem:0x1000)")
        addr = int(m.group(1), 0)
        self.i = m.end()
        length = 0
        if self.peek() == "/":
            self.i += 1
            m = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]+)").match(self.text, self.i)
            if not m:
                raise self.error("expected a breakpoint length after '/' (1, 2, 4 or 8)")
            length = int(m.group(1), 0)
            if length not in (1, 2, 4, 8):
                raise self.error(f"breakpoint length {length} is not 1, 2, 4 or 8", m.start())
            self.i = m.end()
        bp_type = 0
        if self.peek() == ":" and re.compile(r":[rwx]{1,3}(?![A-Za-z])").match(self.text, self.i):
            self.i += 1
            rpos = self.i
            m = re.compile(r"[rwx]{1,3}").match(self.text, self.i)
            for k, c in enumerate(m.group(0)):
                bit = {"r": HW_BREAKPOINT_R, "w": HW_BREAKPOINT_W, "x": HW_BREAKPOINT_X}[c]
                if bp_type & bit:
                    raise self.error(f"breakpoint access {c!r} given twice", rpos + k)
                bp_type |= bit
            self.i = m.end()
        if not bp_type:
            bp_type = HW_BREAKPOINT_R | HW_BREAKPOINT_W
        if not length:
            # perf: execute breakpoints default to sizeof(long), data ones to 4 bytes
            length = 8 if bp_type == HW_BREAKPOINT_X else 4
        spec = self.new_spec(self.text[start : self.i], "breakpoint", type=PERF_TYPE_BREAKPOINT, bp_type=bp_type)
        spec.attr.bp_addr = addr
        spec.attr.bp_len = length
        spec.attr.sample_period = 1
        return spec

    # -- pmu/terms/ ---------------------------------------------------------
    def terms(self) -> list[_Term]:
        """Parse ``term[=value],...`` up to and including the closing '/'."""
        out: list[_Term] = []
        if self.peek() == "/":
            self.i += 1
            return out
        while True:
            m = _TERM_KEY.match(self.text, self.i)
            if not m:
                got = repr(self.peek()) if self.peek() else "end of string"
                raise self.error(f"expected a term name, got {got}")
            key, kpos = m.group(0), m.start()
            self.i = m.end()
            value: int | str | None = None
            vpos = self.i
            if self.peek() == "=":
                self.i += 1
                vpos = self.i
                value = self.term_value(key)
            out.append(_Term(key, value, kpos, vpos))
            c = self.peek()
            if c == ",":
                self.i += 1
                continue
            if c == "/":
                self.i += 1
                return out
            raise self.error("expected ',' or '/' after a term" if c else "missing closing '/'")

    def term_value(self, key: str) -> int | str:
        c = self.peek()
        if c in ("'", '"'):
            end = self.text.find(c, self.i + 1)
            if end < 0:
                raise self.error("unterminated quoted value")
            value = self.text[self.i + 1 : end]
            self.i = end + 1
            return value
        if key in _STRING_TERMS:
            m = re.compile(r"[^,/]+").match(self.text, self.i)
            if not m:
                raise self.error(f"expected a value for {key}=")
            self.i = m.end()
            return m.group(0)
        m = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+|\?").match(self.text, self.i)
        if not m or (self.i < len(self.text) and m.end() < len(self.text) and self.text[m.end()] not in ",/"):
            raise self.error(f"expected a number for {key}= (decimal or 0x hex)")
        if m.group(0) != "?" and int(m.group(0), 0) >> 64:
            raise self.error(f"value {m.group(0)} for {key}= is more than 64 bits")
        self.i = m.end()
        return m.group(0) if m.group(0) == "?" else int(m.group(0), 0)

    def pmu_event(self, pmu_name: str, ppos: int) -> list[EventSpec]:
        self.i += 1  # '/'
        terms = self.terms()
        matched = _pmu().find_pmus(pmu_name, self.sysfs_root)
        if not matched:
            hint = _did_you_mean(pmu_name, list(_pmu().pmus(self.sysfs_root)))
            raise self.error(
                f"cannot find PMU {pmu_name!r} in {os.path.join(self.sysfs_root, 'bus/event_source/devices')} "
                f"(missing kernel support or not this machine's hardware){hint}",
                ppos,
                UnknownEventError,
            )
        text = self.text[ppos : self.i]
        return [self.pmu_spec(pmu, terms, text, ppos) for pmu in matched]

    def alias(self, pmu: PMU, name: str) -> Alias | None:
        alias = pmu.alias(name)
        if alias is None and self.vendor is not None:
            alias = self.vendor.alias_for(pmu, name)
        return alias

    def pmu_spec(self, pmu: PMU, terms: list[_Term], name: str, pos: int) -> EventSpec:
        spec = self.new_spec(name, pmu.name, type=pmu.type)
        spec.extra["pmu_terms"] = True
        if pmu.cpus is not None and not pmu.is_core:
            spec.cpus = list(pmu.cpus)
        pending: dict[str, _Term] = {}
        for term in terms:
            self._pmu_term(spec, pmu, term, pending, depth=0)
        for key, term in pending.items():
            raise self.error(f"event needs a value for {key}= (the sysfs alias leaves it as '?')", term.pos)
        return spec

    def _pmu_term(self, spec: EventSpec, pmu: PMU, term: _Term, pending: dict, depth: int) -> None:
        attr = spec.attr
        key, value = term.key, term.value
        fmt = pmu.formats.get(key)
        if fmt is not None:
            if value == "?":
                pending[key] = term
                return
            pending.pop(key, None)
            num = 1 if value is None else value
            if not isinstance(num, int):
                raise self.error(f"{key}= needs a number", term.vpos)
            if num > fmt.max_value:
                raise self.error(
                    f"value {num:#x} too big for {key} ({fmt.text}): maximum is {fmt.max_value:#x}", term.vpos
                )
            current = getattr(attr, fmt.field)
            setattr(attr, fmt.field, (current & ~fmt.mask) | fmt.encode(num))
            return
        if self._general_term(spec, term):
            return
        m = re.fullmatch(r"r(?:0[xX])?([0-9a-fA-F]+)", key)
        if m and value is None:
            if int(m.group(1), 16) >> 64:
                raise self.error(f"raw config {key!r} is more than 64 bits", term.pos)
            attr.config = int(m.group(1), 16)
            return
        alias = self.alias(pmu, key) if value is None else None
        if alias is not None and depth < 4:
            for sub in _split_terms(alias.terms):
                k, _, v = sub.partition("=")
                k = k.strip()
                val: int | str | None
                if not v:
                    val = None
                elif v.strip() == "?":
                    val = "?"
                else:
                    try:
                        val = int(v.strip(), 0)
                    except ValueError:
                        val = v.strip()
                self._pmu_term(spec, pmu, _Term(k, val, term.pos, term.pos), pending, depth + 1)
            spec.scale = alias.scale
            spec.unit = alias.unit
            if alias.per_pkg:
                spec.extra["per_pkg"] = True
            if alias.snapshot:
                spec.extra["snapshot"] = True
            spec.extra["alias"] = alias.name
            if alias.source == "json":
                spec.extra["vendor_event"] = alias.name
                if "period" in alias.info and not spec.period_set:
                    spec.extra["sample_after_value"] = alias.info["period"]
            return
        valid = sorted(pmu.formats) + list(GENERAL_TERMS)
        hint = _did_you_mean(key, valid + list(pmu.aliases))
        raise self.error(
            f"unknown term {key!r} for PMU {pmu.name!r}{hint} (valid terms: {', '.join(valid)}; "
            f"events: {', '.join(sorted(pmu.aliases)) or 'none'})",
            term.pos,
            UnknownEventError,
        )

    def _general_term(self, spec: EventSpec, term: _Term) -> bool:
        attr = spec.attr
        key, value = term.key, term.value
        if key not in GENERAL_TERMS:
            return False
        if key in _pmu().CONFIG_FIELDS:
            if not isinstance(value, int):
                raise self.error(f"{key}= needs a number", term.vpos)
            setattr(attr, key, value)
        elif key == "name":
            if not isinstance(value, str) or not value:
                raise self.error("name= needs a string", term.vpos)
            spec.name = value
            spec.extra["named"] = True
        elif key == "period":
            attr.sample_period = _need_int(self, term)
            attr.freq = 0
            spec.period_set, spec.freq_set = True, False
        elif key == "freq":
            attr.sample_freq = _need_int(self, term)
            attr.freq = 1
            spec.period_set, spec.freq_set = False, True
        elif key == "call-graph":
            if not isinstance(value, str) or value.split(",")[0] not in ("fp", "dwarf", "lbr", "no"):
                raise self.error("call-graph= must be fp, dwarf, lbr or no", term.vpos)
            spec.call_graph = value
        elif key == "max-stack":
            spec.max_stack = _need_int(self, term)
        elif key == "stack-size":
            spec.extra["stack_size"] = _need_int(self, term)
        elif key in ("inherit", "no-inherit", "overwrite", "no-overwrite", "percore", "aux-output", "time"):
            spec.extra[key.replace("-", "_")] = 1 if value is None else _need_int(self, term)
        else:
            spec.extra[key.replace("-", "_")] = value
        return True


def _did_you_mean(word: str, candidates: list[str]) -> str:
    import difflib

    lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(lower), n=3, cutoff=0.75)
    if not close:
        return ""
    return ": did you mean " + " or ".join(repr(lower[c]) for c in close) + "?"


def _split_hybrid_group(members: list[EventSpec]) -> list[list[EventSpec]]:
    """perf splits a group of generic events on a hybrid system into one group
    per core PMU (a group cannot span PMUs); other groups stay whole."""
    if not members or not all(m.extra.get("hybrid") for m in members):
        return [members]
    parts: dict[str, list[EventSpec]] = {}
    for m in members:
        parts.setdefault(m.pmu or "", []).append(m)
    return list(parts.values())


def _need_int(p: _Parser, term: _Term) -> int:
    if not isinstance(term.value, int):
        raise p.error(f"{term.key}= needs a number", term.vpos)
    return term.value


def _split_terms(text: str) -> list[str]:
    return [t.strip() for t in text.replace("\n", ",").split(",") if t.strip()]


def _is_event_name(word: str, p: _Parser) -> bool:
    """True for names that are events by themselves (not PMUs or subsystems)."""
    if word in generic.HARDWARE or word in generic.SOFTWARE or word in generic.TOOL:
        return True
    if _RAW_RE.fullmatch(word):
        return word not in _pmu().pmus(p.sysfs_root)
    try:
        return generic.parse_cache_name(word) is not None
    except generic.CacheOpInvalid:
        return True


def _apply_modifiers(spec: EventSpec, mods: str, *, group: bool, err) -> None:
    """perf's ``get_event_modifier``: event modifiers start from zero, group
    modifiers from each member's current bits (tools/perf/util/parse-events.c)."""
    a = spec.attr
    eu = a.exclude_user if group else 0
    ek = a.exclude_kernel if group else 0
    eh = a.exclude_hv if group else 0
    eH = a.exclude_host if group else 0
    eG = a.exclude_guest if group else 0
    eI = a.exclude_idle if group else 0
    precise = a.precise_ip if group else 0
    pinned = a.pinned if group else 0
    exclusive = a.exclusive if group else 0
    exclude = eu | ek | eh
    exclude_GH = spec.extra.get("exclude_GH", 0) if group else 0
    for c in mods:
        if c == "u":
            if not exclude:
                exclude = eu = ek = eh = 1
            if not exclude_GH:
                eG = 1
            eu = 0
        elif c == "k":
            if not exclude:
                exclude = eu = ek = eh = 1
            ek = 0
        elif c == "h":
            if not exclude:
                exclude = eu = ek = eh = 1
            eh = 0
        elif c == "G":
            if not exclude_GH:
                exclude_GH = eG = eH = 1
            eG = 0
        elif c == "H":
            if not exclude_GH:
                exclude_GH = eG = eH = 1
            eH = 0
        elif c == "I":
            eI = 1
        elif c == "p":
            precise += 1
            if not exclude_GH:  # precise sampling requires exclude_guest
                eG = 1
        elif c == "P":
            spec.extra["precise_max"] = True
        elif c == "S":
            spec.extra["sample_read"] = True
        elif c == "D":
            pinned = 1
        elif c == "e":
            exclusive = 1
        elif c == "W":
            spec.extra["weak_group"] = True
        elif c == "b":
            spec.extra["bpf_counter"] = True
    if precise > 3:
        raise err(f"precise level {precise} is too high: at most 'ppp' (3)")
    a.exclude_user, a.exclude_kernel, a.exclude_hv = eu, ek, eh
    a.exclude_host, a.exclude_guest, a.exclude_idle = eH, eG, eI
    a.precise_ip = precise
    spec.extra["exclude_GH"] = exclude_GH
    # perf applies pinned/exclusive only to an event that leads its group at this point
    if group and not spec.leader:
        return
    a.pinned, a.exclusive = pinned, exclusive


def parse_events(
    text: str,
    *,
    sysfs_root: str = "/sys",
    tracefs_root: str | None = None,
    vendor_tables=None,
) -> list[EventSpec]:
    """Parse a perf event list (``-e`` syntax) into :class:`EventSpec` s.

    ``sysfs_root`` points PMU discovery at another sysfs tree (fixtures);
    ``tracefs_root`` defaults to ``<sysfs_root>/kernel/tracing``;
    ``vendor_tables`` is a :class:`~pmuscope.events.vendor.VendorEvents`, a
    directory of perf pmu-events JSON, or None (use ``$PMUSCOPE_EVENTS_DIR``
    when set). Raises :class:`~pmuscope.errors.EventParseError` (or its
    subclass :class:`~pmuscope.errors.UnknownEventError`) pointing at the
    offending column.
    """
    if vendor_tables is None and not os.environ.get(VENDOR_ENV_DIR):
        vendor = wanted = None  # no table: the vendor module (JSON, CSV, CPU identity) is not needed
    else:
        from .vendor import resolve_vendor_tables

        vendor = resolve_vendor_tables(vendor_tables, sysfs_root=sysfs_root)
        wanted = vendor_tables if isinstance(vendor_tables, (str, os.PathLike)) else os.environ.get(VENDOR_ENV_DIR)
    parser = _Parser(text, os.fspath(sysfs_root), tracefs_root, vendor)
    if vendor is None and wanted:
        from .cpuid import read_cpu_identity

        parser.vendor_note = (
            f" (no vendor event table in {os.fspath(wanted)} matches this CPU, "
            f"perf CPUID {read_cpu_identity().perf_cpuid})"
        )
    return parser.parse()
