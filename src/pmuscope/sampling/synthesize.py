"""Side-band records for state that existed before recording started, read
from procfs the way ``perf record`` synthesizes them
(``tools/perf/util/synthetic-events.c``): the kernel map as
``PERF_RECORD_MMAP`` of ``[kernel.kallsyms]_text`` and one per module, and per process a FORK
and a COMM per thread plus an MMAP2 per executable mapping.

Every synthesized record carries the ``sample_id_all`` trailer of the
session's first attr with ``id`` 0 — perf's convention for "synthesized"
(``evlist__event2evsel`` maps id 0 to the first event).
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

from ..kernel import abi
from ..perfdata import synth

KERNEL_MMAP_NAME = "[kernel.kallsyms]_text"
#: perf's HOST_KERNEL_ID (pid -1 as u32) for kernel maps
HOST_KERNEL_PID = 0xFFFFFFFF

_PROT = {"r": 1, "w": 2, "x": 4}


def kernel_text_range(procfs_root: str = "/proc") -> tuple[int, int] | None:
    """``(_text, _etext)`` from kallsyms, or None when addresses are hidden
    (kptr_restrict / unprivileged: kallsyms shows zeros).

    _etext lies near the end of kallsyms' ~120k lines, whose text the kernel
    generates on every read (~40 ms of a ``record -- true``'s ~0.2 s): the
    range is kept per boot in the cache directory, beside the first page of
    kallsyms it was read with; a run whose first page is the same (same boot,
    same visibility of addresses, _text in that page) takes it from there."""
    path = os.path.join(procfs_root, "kallsyms")
    try:
        with open(path, "rb", buffering=0) as f:
            first = f.read(_PAGE)
            if _text_in(first) == 0:
                return None  # the first page is what decides: _text hidden or absent
            kept = _kept_range(procfs_root, first)
            if kept is not None:
                return kept
            data = first + f.readall()  # one read: the kernel generates the text, per-line iteration costs ~4x more
    except OSError:
        return None
    found = {}
    for name in (b"_text", b"_stext", b"_etext"):
        for kind in b"Tt":
            i = data.find(b" %c %s\n" % (kind, name))
            if i >= 0:
                line_start = data.rfind(b"\n", 0, i) + 1
                found[name.decode()] = int(data[line_start:i], 16)
                break
    text = found.get("_text") or found.get("_stext")
    etext = found.get("_etext")
    if not text:
        return None
    if not etext or etext <= text:
        etext = (1 << 64) - 1
    _keep_range(procfs_root, first, text, etext)
    return text, etext


_PAGE = 4096
_RANGE_MAGIC = b"PMKTEXT1"


def _text_in(page: bytes) -> int | None:
    """_text (else _stext) as the first page of kallsyms shows it: 0 when
    hidden, None when neither is in that page."""
    for name in (b"_text", b"_stext"):
        for kind in b"Tt":
            i = page.find(b" %c %s\n" % (kind, name))
            if i >= 0:
                try:
                    return int(page[page.rfind(b"\n", 0, i) + 1:i], 16)
                except ValueError:
                    return None
    return None


def _range_path(procfs_root: str) -> str | None:
    from ..system.cache import boot_id, cache_dir

    d, boot = cache_dir(), boot_id(procfs_root)
    return os.path.join(d, f"kernel-text-{boot}-{os.geteuid()}.bin") if d and boot else None


def _kept_range(procfs_root: str, first: bytes) -> tuple[int, int] | None:
    """The range kept by an earlier run of this boot that saw the same first
    page of kallsyms, else None."""
    if not _text_in(first):
        return None
    path = _range_path(procfs_root)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            kept = f.read(len(_RANGE_MAGIC) + 16 + len(first) + 1)
    except OSError:
        return None
    head = len(_RANGE_MAGIC) + 16
    if len(kept) != head + len(first) or not kept.startswith(_RANGE_MAGIC) or kept[head:] != first:
        return None
    text, etext = int.from_bytes(kept[8:16], "little"), int.from_bytes(kept[16:24], "little")
    return (text, etext) if 0 < text < etext else None


def _keep_range(procfs_root: str, first: bytes, text: int, etext: int) -> None:
    """Best effort: an unwritable cache directory costs the next run the read."""
    if not first or _text_in(first) != text:
        return
    path = _range_path(procfs_root)
    if path is None:
        return
    from ..system.cache import store

    # ranges of earlier boots are never valid again
    suffix = f"-{os.geteuid()}.bin"
    store(path, [_RANGE_MAGIC + text.to_bytes(8, "little") + etext.to_bytes(8, "little") + first],
          lambda name: name.startswith("kernel-text-") and name.endswith(suffix))


def kernel_mmap(sample_type: int, procfs_root: str = "/proc") -> bytes:
    """``PERF_RECORD_MMAP -1/0: [_text(len) @ _text]: [kernel.kallsyms]_text``
    (pgoff holds the relocation reference address, as perf writes it), or b""
    when kernel addresses are hidden."""
    rng = kernel_text_range(procfs_root)
    if rng is None:
        return b""
    start, end = rng
    return synth.mmap(HOST_KERNEL_PID, 0, start, end - start, start, KERNEL_MMAP_NAME,
                      misc=abi.PERF_RECORD_MISC_KERNEL,
                      sample_id=synth.sample_id(sample_type, pid=HOST_KERNEL_PID, tid=0))


def module_mmaps(sample_type: int, procfs_root: str = "/proc", modules_root: str | None = None) -> list[bytes]:
    """One ``PERF_RECORD_MMAP`` (misc KERNEL, pid -1) per loaded module from
    ``/proc/modules``, named by its ``.ko`` path from ``modules.dep`` when
    found, else ``[name]`` (``perf_event__synthesize_modules``). Empty when
    module addresses are hidden."""
    try:
        with open(os.path.join(procfs_root, "modules")) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    paths: dict[str, str] = {}
    if modules_root is None:
        modules_root = os.path.join("/lib/modules", os.uname().release)
    try:
        with open(os.path.join(modules_root, "modules.dep")) as f:
            for line in f:
                rel = line.split(":", 1)[0].strip()
                base = os.path.basename(rel).split(".ko")[0].replace("-", "_")
                paths[base] = os.path.join(modules_root, rel)
    except OSError:
        pass
    out = []
    sid = synth.sample_id(sample_type, pid=HOST_KERNEL_PID, tid=0)
    for line in lines:
        parts = line.split()
        if len(parts) < 6:
            continue
        try:
            size, addr = int(parts[1]), int(parts[5], 16)
        except ValueError:
            continue
        if not addr:
            continue
        name = parts[0]
        out.append(synth.mmap(HOST_KERNEL_PID, 0, addr, size, 0, paths.get(name, f"[{name}]"),
                              misc=abi.PERF_RECORD_MISC_KERNEL, sample_id=sid))
    return out


def _status(path: str) -> dict[str, str]:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


def _comm(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().rstrip(b"\n").decode("utf-8", "replace")
    except OSError:
        return None


def process_tids(pid: int, procfs_root: str = "/proc") -> list[int]:
    """The thread ids of process ``pid`` (its main thread first)."""
    try:
        tids = sorted(int(t) for t in os.listdir(os.path.join(procfs_root, str(pid), "task")) if t.isdigit())
    except OSError:
        return []
    if pid in tids:
        tids.remove(pid)
        tids.insert(0, pid)
    return tids


def all_pids(procfs_root: str = "/proc") -> list[int]:
    try:
        return sorted(int(p) for p in os.listdir(procfs_root) if p.isdigit())
    except OSError:
        return []


def parse_maps_line(line: str) -> tuple[int, int, int, int, int, int, int, int, str] | None:
    """One ``/proc/PID/maps`` line -> ``(start, end, pgoff, maj, min, ino, prot, flags, filename)``."""
    parts = line.split(None, 5)
    if len(parts) < 5:
        return None
    try:
        lo, hi = parts[0].split("-")
        start, end = int(lo, 16), int(hi, 16)
        perms = parts[1]
        pgoff = int(parts[2], 16)
        maj_s, min_s = parts[3].split(":")
        maj, mnr = int(maj_s, 16), int(min_s, 16)
        ino = int(parts[4])
    except ValueError:
        return None
    name = parts[5].strip() if len(parts) > 5 else ""
    prot = sum(v for k, v in _PROT.items() if k in perms[:3])
    flags = 1 if perms[3:4] == "s" else 2  # MAP_SHARED / MAP_PRIVATE
    return start, end, pgoff, maj, mnr, ino, prot, flags, name


def process_records(pid: int, sample_type: int, *, procfs_root: str = "/proc", data_mmaps: bool = False) -> Iterator[bytes]:
    """FORK + COMM for every thread of ``pid`` and MMAP2 for its executable
    mappings (all mappings with ``data_mmaps``). Yields nothing for a process
    that is gone."""
    base = os.path.join(procfs_root, str(pid))
    st = _status(os.path.join(base, "status"))
    if not st:
        return
    try:
        tgid = int(st.get("Tgid", pid))
        ppid = int(st.get("PPid", 0))
    except ValueError:
        return
    for tid in process_tids(tgid, procfs_root) or [tgid]:
        name = _comm(os.path.join(base, "task", str(tid), "comm")) or st.get("Name", "")
        sid = synth.sample_id(sample_type, pid=tgid, tid=tid)
        if tid == tgid:
            yield synth.fork(tgid, ppid, tid, ppid, sample_id=sid)
        else:
            yield synth.fork(tgid, tgid, tid, tgid, sample_id=sid)
        yield synth.comm(tgid, tid, name, sample_id=sid)
    try:
        with open(os.path.join(base, "maps")) as f:
            lines = f.readlines()
    except OSError:
        return
    sid = synth.sample_id(sample_type, pid=tgid, tid=tgid)
    for line in lines:
        if not data_mmaps:
            sp = line.find(" ")  # "start-end rwxp ...": skip the mappings that are not executable before parsing
            if line[sp + 3:sp + 4] != "x":
                continue
        m = parse_maps_line(line)
        if m is None:
            continue
        start, end, pgoff, maj, mnr, ino, prot, flags, name = m
        if not (prot & 4) and not data_mmaps:
            continue
        if not name:
            name = "//anon"
        elif name.startswith("[") and name not in ("[vdso]", "[vsyscall]") and not (prot & 4):
            continue
        yield synth.mmap2(tgid, tgid, start, end - start, pgoff, name, maj=maj, min=mnr, ino=ino, prot=prot,
                          flags=flags, sample_id=sid)


def synthesize(pids: Iterable[int], sample_type: int, *, procfs_root: str = "/proc", kernel: bool = True,
               data_mmaps: bool = False) -> Iterator[bytes]:
    """The kernel MMAP (when ``kernel``) then :func:`process_records` for each pid."""
    if kernel:
        k = kernel_mmap(sample_type, procfs_root)
        if k:
            yield k
            yield from module_mmaps(sample_type, procfs_root)
    for pid in pids:
        yield from process_records(pid, sample_type, procfs_root=procfs_root, data_mmaps=data_mmaps)


def mmap_filenames(records: bytes) -> list[str]:
    """File names of the MMAP/MMAP2 records in a chunk of whole records."""
    import struct

    out = []
    off, n = 0, len(records)
    while off + 8 <= n:
        t, misc, size = struct.unpack_from("<IHH", records, off)
        if size < 8:
            break
        if t in (abi.PERF_RECORD_MMAP, abi.PERF_RECORD_MMAP2):
            at = off + (40 if t == abi.PERF_RECORD_MMAP else 72)
            end = records.find(b"\0", at, off + size)
            out.append(records[at : end if end >= 0 else off + size].decode("utf-8", "replace"))
        off += size
    return out
