"""The numpy-free ``report`` of small files (:mod:`pmuscope.profile.lite`)
against the numpy path (``PMUSCOPE_REPORT_LITE=0``, the reference).

On every perf.data under tests/data, on files written here (real ELF files
mapped by several processes with fork, exec, a thread renamed, an overlapping
mapping, a vanished file, records out of order within a round) and on small
files recorded with Linux perf when it runs here, with several option sets:
the lite path either declines or prints the same bytes (text and JSON). It
must accept the written files and a small user-only recording (so it is not
silently declining everything), decline what it does not handle, and
``pmuscope report`` must run with numpy impossible to import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import perfdata_corpus

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", "..", "src"))

OPTION_SETS = [
    [], ["-n"], ["--json"], ["--sort", "pid"], ["--sort", "sym"], ["--sort", "dso"], ["--sort", "tid,comm"],
    ["--sort", "cpu,dso,sym"], ["--sort", "dso,sym", "-n"], ["--sort", "comm,pid,tid,dso,sym,cpu"],
    ["--sort", "pid,dso"], ["--json", "--sort", "pid,sym,cpu"], ["--percent-limit", "5"],
    ["--percent-limit", "20", "-n", "--sort", "comm,sym"], ["--comm", "python3"], ["--comm", "bash,worker"],
    ["--cpu", "0"], ["--pid", "101"], ["--tid", "102,100"], ["--time", ","], ["--time", ",0.000001"],
    ["--json", "--pid", "1"], ["--percent-limit", "5", "--sort", "pid,dso"], ["--sort", "cpu"],
    ["--percent-limit", "5", "--sort", "tid,sym", "-n"], ["--json", "--percent-limit", "5", "--sort", "dso,sym"],
]


# --- the reference and the lite path ---------------------------------------------------------------------------

def reference(path: str, argv: list[str], capsys, monkeypatch) -> str:
    from pmuscope.cli.main import main

    monkeypatch.setenv("PMUSCOPE_REPORT_LITE", "0")
    capsys.readouterr()
    rc = main(["report", "--stdio", *argv, "-i", path])
    out = capsys.readouterr().out
    monkeypatch.delenv("PMUSCOPE_REPORT_LITE")
    return f"rc={rc}\n{out}"


def lite(path: str, argv: list[str]) -> str | None:
    """The lite path's output (None: it declined); errors other than its own
    decline are raised, not turned into a decline as the command does."""
    from pmuscope.cli import report_cmd
    from pmuscope.cli.main import build_parser
    from pmuscope.profile.report_format import parse_sort

    args = build_parser("report").parse_args(["report", "--stdio", *argv, "-i", path])
    out = report_cmd._lite_report(args, parse_sort(args.sort), strict=True)
    return None if out is None else f"rc=0\n{out}"


def command(path: str, argv: list[str], capsys) -> str:
    from pmuscope.cli.main import main

    capsys.readouterr()
    rc = main(["report", "--stdio", *argv, "-i", path])
    return f"rc={rc}\n{capsys.readouterr().out}"


def declined_by_file(path: str) -> bool:
    """True when the numpy-free path refuses ``path`` whatever the options and
    filters: a large file, pipe mode, or what reading the records finds (several
    events, kernel samples, a damaged header...), all decided before any
    option is looked at."""
    from pmuscope.profile import lite as lite_mod
    from pmuscope.profile import lite_candidate

    if not lite_candidate(path):
        return True
    try:
        lite_mod._read(path)
    except lite_mod.Decline:
        return True
    except Exception:  # noqa: BLE001 - unreadable: the command's own error, compared in full
        return False
    return False


def compare(path: str, capsys, monkeypatch, option_sets=OPTION_SETS) -> list[list[str]]:
    """Asserts lite == reference wherever lite accepts; returns the option sets it accepted."""
    accepted = []
    for argv in option_sets:
        ref = reference(path, argv, capsys, monkeypatch)
        got = lite(path, argv)
        if got is not None:
            assert got == ref, f"{path} {argv}"
            accepted.append(argv)
        assert command(path, argv, capsys) == ref, f"{path} {argv} (the command)"
    return accepted


# --- files written here ----------------------------------------------------------------------------------------

def _real_elf_files() -> list[str]:
    """ELF files of this process with symbols (the executable, libc, libpython when shared)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "x" in parts[1] and parts[5].startswith("/") and parts[5] not in out:
                name = os.path.basename(parts[5])
                if name.startswith(("libc.so", "libpython", "python")) or parts[5] == os.path.realpath(sys.executable):
                    out.append(parts[5])
    return out


def _picks(path: str, n: int = 4):
    """File offsets in ``path``: ``n`` addresses inside sized functions of
    its symbol table (away from the PLT) and one in a gap between two
    symbols; with each its expected label (symbol name or None)."""
    from pmuscope.symbols.dso import load_elf_dso

    dso = load_elf_dso(path)
    t = dso.table
    if len(t) < 20:
        return None
    plt_hi = max([s.sh_addr + s.sh_size for s in dso.elf.sections if s.name.startswith(".plt")] or [0])
    loads = sorted(dso.elf.load_segments, key=lambda s: s.p_offset)

    def fileoff(vaddr: int) -> int | None:
        for s in loads:
            if s.p_vaddr <= vaddr < s.p_vaddr + s.p_filesz and s.p_flags & 1:
                return vaddr - s.p_vaddr + s.p_offset
        return None

    starts, ends = t.starts.tolist(), t.ends.tolist()
    funcs, gap = [], None
    for i in range(len(starts) - 1):
        if starts[i] <= plt_hi + 64 or fileoff(starts[i]) is None:
            continue
        if ends[i] - starts[i] > 8 and len(funcs) < n and i % 7 == 0:
            funcs.append((fileoff(starts[i] + 3), t.name(i)))
        if gap is None and starts[i + 1] > ends[i] + 2 and fileoff(ends[i] + 1) is not None:
            gap = (fileoff(ends[i] + 1), None)
    if len(funcs) < n or gap is None:
        return None
    return funcs + [gap]


def write_recording(path: str, *, extra: str = "") -> None:
    """Processes 100 (bash) and 101 (forked from it, exec'ing python3; thread
    102 renamed 'worker' later), real ELF files mapped in both, a vanished
    file, an overlapping mapping, samples of equal and unequal periods on two
    CPUs, records out of time order within their rounds. ``extra``: 'kernel'
    (one kernel sample), 'anon' (a sample in anonymous memory), 'hugetlb' (a
    sample in a file mapped with MAP_HUGETLB: perf maps its addresses to
    themselves, as anonymous memory's), 'callchain'."""
    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.writer import PerfDataWriter

    S = abi.PerfSample
    st = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD | (S.CALLCHAIN if extra == "callchain" else 0)
    files = [f for f in _real_elf_files() if _picks(f)]
    if not files:
        pytest.skip("no ELF file with a symbol table to map")
    picks = {f: _picks(f) for f in files}
    base = 0x7F0000000000
    recs: list[tuple[int, bytes]] = []  # (time, record) in the order written

    def sid(pid, tid, t, cpu=0):
        return synth.sample_id(st, pid=pid, tid=tid, time=t, cpu=cpu)

    def mmaps(pid, t):
        for k, f in enumerate(files):
            size = os.path.getsize(f)
            recs.append((t, synth.mmap2(pid, pid, base + k * 0x10000000, (size + 0xFFF) & ~0xFFF, 0, f,
                                        sample_id=sid(pid, pid, t))))
        recs.append((t, synth.mmap2(pid, pid, base + 0x70000000, 0x100000, 0, "/nonexistent/libgone.so",
                                    sample_id=sid(pid, pid, t))))
        recs.append((t, synth.mmap2(pid, pid, base + 0x78000000, 0x100000, 0x2000, "/nonexistent/lib del.so (deleted)",
                                    sample_id=sid(pid, pid, t))))

    def sample(pid, tid, t, ip, cpu=0, period=1000, misc=abi.PERF_RECORD_MISC_USER):
        cc = [abi.PERF_CONTEXT_USER, ip] if extra == "callchain" else ()
        recs.append((t, synth.sample(st, ip=ip, pid=pid, tid=tid, time=t, cpu=cpu, period=period, callchain=cc,
                                     misc=misc)))

    def ips():
        for k, f in enumerate(files):
            for off, _ in picks[f]:
                yield base + k * 0x10000000 + off
        yield base + 0x70000000 + 0x1234
        yield base + 0x78000000 + 0x40

    recs.append((1000, synth.comm(100, 100, "bash", sample_id=sid(100, 100, 1000))))
    mmaps(100, 1001)
    t = 2000
    for i, ip in enumerate(ips()):
        sample(100, 100, t + i, ip, cpu=i % 2, period=1000 if i % 3 else 2000)
    recs.append((2500, synth.finished_round()))
    # the fork and exec of the child: its samples before and after the exec, the COMM
    # written after samples it precedes in time (another CPU's buffer read first)
    recs.append((3000, synth.fork(101, 100, 101, 100, 3000, sample_id=sid(101, 101, 3000))))
    sample(101, 101, 3001, next(ips()), cpu=1)
    sample(101, 101, 3011, next(ips()), cpu=1)
    recs.append((3010, synth.comm(101, 101, "python3", exec=True, sample_id=sid(101, 101, 3010))))
    recs.append((3500, synth.finished_round()))
    recs.append((4000, synth.fork(101, 101, 102, 101, 4000, sample_id=sid(101, 102, 4000))))
    for i, ip in enumerate(ips()):
        sample(101, 102 if i % 2 else 101, 4100 + i, ip, cpu=i % 2, period=1000 + (i % 2) * 1000)
    # an overlapping mapping replaces part of the first file in pid 101 only
    recs.append((4500, synth.mmap2(101, 101, base, 0x2000, 0, "/nonexistent/overlay.so", sample_id=sid(101, 101, 4500))))
    sample(101, 101, 4501, base + 0x10)
    sample(101, 101, 4502, next(ips()))
    if extra == "kernel":
        sample(100, 100, 4600, 0xFFFFFFFF81000000, misc=abi.PERF_RECORD_MISC_KERNEL)
    if extra == "anon":
        recs.append((4600, synth.mmap2(100, 100, 0x10000, 0x1000, 0, "//anon", prot=7, sample_id=sid(100, 100, 4600))))
        sample(100, 100, 4601, 0x10010)
    if extra == "hugetlb":
        recs.append((4600, synth.mmap2(100, 100, 0x40000000, 0x200000, 0, "/nonexistent/huge.bin", flags=0x40002,
                                       sample_id=sid(100, 100, 4600))))
        sample(100, 100, 4601, 0x40000010)
    recs.append((4800, synth.finished_round()))
    recs.append((5000, synth.comm(101, 102, "worker", sample_id=sid(101, 102, 5000))))
    sample(101, 102, 5001, next(ips()), period=3000)
    recs.append((5500, synth.finished_round()))
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1000, sample_id_all=1)
    with PerfDataWriter(path, [(attr, [], "cpu-clock:u")], host=False) as w:
        w.write(b"".join(r for _, r in recs))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lite")
    out = {}
    for extra in ("", "kernel", "anon", "hugetlb", "callchain"):
        path = str(folder / f"written{'-' + extra if extra else ''}.data")
        write_recording(path, extra=extra)
        out[extra] = path
    return out


def test_written_file_accepted_and_identical(written, capsys, monkeypatch):
    accepted = compare(written[""], capsys, monkeypatch)
    # every option set of the table is taken, and prints the reference's bytes -- but perf's entry
    # filters (--pid/--tid: rows of those threads, percentages of every sample) take the numpy path
    assert accepted == [o for o in OPTION_SETS if "--pid" not in o and "--tid" not in o]


def test_written_file_shows_what_was_written(written):
    """Not only equal to the numpy path: the content is the one written."""
    out = lite(written[""], ["--sort", "pid,tid,comm", "-n"])
    assert "    102:worker" in out and "    100:bash" in out and "    101:python3" in out  # pid rows are threads
    out = lite(written[""], ["--sort", "dso,sym"])
    assert "libgone.so" in out and "lib del.so (deleted)" in out and "overlay.so" in out
    assert "0x0000000000001234" in out  # the vanished file: its map-relative address


@pytest.mark.parametrize("extra", ["kernel", "anon", "hugetlb", "callchain"])
def test_declines_outside_its_case(written, extra, capsys, monkeypatch):
    assert compare(written[extra], capsys, monkeypatch, [[], ["--json"], ["--sort", "pid"]]) == []


def test_hugetlb_mapping_shows_absolute_addresses(written, capsys, monkeypatch):
    """A file mapped with MAP_HUGETLB: perf (util/map.c map__new) treats it as
    anonymous memory, so its unresolved addresses print absolute, not
    map-relative; the lite path declines it rather than print them relative."""
    monkeypatch.setenv("PMUSCOPE_REPORT_LITE", "0")
    from pmuscope.cli.main import main

    capsys.readouterr()
    main(["report", "--stdio", "--sort", "dso,sym", "-i", written["hugetlb"]])
    out = capsys.readouterr().out
    huge = [line for line in out.splitlines() if "huge.bin" in line]
    assert len(huge) == 1 and huge[0].endswith("[.] 0x0000000040000010"), out


@pytest.mark.parametrize("path", perfdata_corpus(), ids=os.path.basename)
def test_corpus_declined_or_identical(path, capsys, monkeypatch):
    from tests.unit.test_report_lite import declined_by_file

    if declined_by_file(path):
        # refused before any option is looked at: every option set takes the numpy path (a few show it)
        assert compare(path, capsys, monkeypatch, OPTION_SETS[:3]) == []
    else:
        compare(path, capsys, monkeypatch)


def test_an_unrelated_resource_warning_does_not_decline(written, capsys, monkeypatch):
    """The path declines when the reader warns (a damaged file is the numpy path's
    to report); a ResourceWarning is not the reader's (the garbage collector closing
    some other object's file while the file is read) and made it decline at random."""
    import warnings

    from pmuscope.perfdata import reader

    real = reader.PerfDataFile.__init__

    def init(self, *a, **kw):
        warnings.warn("unclosed file <somebody else's>", ResourceWarning)
        real(self, *a, **kw)

    monkeypatch.setattr(reader.PerfDataFile, "__init__", init)
    assert lite(written[""], []) == reference(written[""], [], capsys, monkeypatch)


def test_options_outside_the_table_decline(written):
    for argv in (["--children"], ["-g"], ["--no-call-graph"], ["-G"], ["--max-stack", "3"], ["--itrace", "i"],
                 ["--pid", "101"], ["--comms", "bash"], ["--dsos", "libc.so.6"], ["-S", "main"], ["--header"],
                 ["--header-only"], ["--group"]):
        assert lite(written[""], argv) is None, argv


def test_switch_forces_the_numpy_path(written, capsys, monkeypatch):
    from pmuscope.cli.main import main
    from pmuscope.profile import lite as lite_mod

    calls = []
    real = lite_mod.report

    def counted(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(lite_mod, "report", counted)
    monkeypatch.setenv("PMUSCOPE_REPORT_LITE", "0")
    assert main(["report", "--stdio", "-i", written[""]]) == 0
    ref = capsys.readouterr().out
    assert calls == [] and "Total Lost Samples" in ref
    monkeypatch.delenv("PMUSCOPE_REPORT_LITE")
    assert main(["report", "--stdio", "-i", written[""]]) == 0
    assert len(calls) == 1 and capsys.readouterr().out == ref


# --- numpy impossible to import --------------------------------------------------------------------------------

BLOCKED = textwrap.dedent("""
    import sys

    class NoNumpy:
        def find_spec(self, name, path=None, target=None):
            if name == "numpy" or name.startswith("numpy."):
                raise ImportError("numpy is blocked in this test")

    sys.meta_path.insert(0, NoNumpy())
    from pmuscope.cli.main import main
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    print("HEAVY", " ".join(sorted(m for m in sys.modules if m in ("dataclasses", "numpy"))) or "-", file=sys.stderr)
    sys.exit(rc)
""")


def _blocked(argv: list[str], **env_extra):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    return subprocess.run([sys.executable, "-c", BLOCKED, *argv], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("argv", [[], ["--json"], ["-n", "--sort", "pid,sym"]])
def test_report_runs_without_numpy(written, argv, capsys, monkeypatch):
    r = _blocked(["report", "--stdio", *argv, "-i", written[""]])
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "HEAVY -"  # nor dataclasses (~6 ms to import)
    assert f"rc=0\n{r.stdout}" == reference(written[""], argv, capsys, monkeypatch)


def test_numpy_path_is_the_one_blocked(written):
    # the switch (or a file the lite path declines) needs numpy: the block is real
    r = _blocked(["report", "--stdio", "-i", written[""]], PMUSCOPE_REPORT_LITE="0")
    assert r.returncode != 0 and "numpy is blocked" in r.stderr
    r = _blocked(["report", "--stdio", "-i", written["kernel"]])
    assert r.returncode != 0 and "numpy is blocked" in r.stderr


# --- recorded with Linux perf -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    perf = shutil.which("perf")
    if perf is None:
        pytest.skip("no perf binary")
    folder = tmp_path_factory.mktemp("rec")
    out = {}
    py = sys.executable
    for name, cmd in (("tiny-user", [py, "-c", "sum(range(2 * 10**6))"]),
                      ("procs", ["sh", "-c", f"{py} -c 'sum(range(10**6))'; ls / >/dev/null; "
                                             f"{py} -c 'import json' & wait"])):
        path = str(folder / f"{name}.data")
        r = subprocess.run([perf, "record", "-q", "-e", "cpu-clock:u", "-c", "200000", "-o", path, "--", *cmd],
                           capture_output=True, timeout=120)
        if r.returncode != 0 or not os.path.exists(path):
            pytest.skip(f"perf record does not run here: {r.stderr.decode(errors='replace').strip()[-200:]}")
        out[name] = path
    return out


def test_recorded_files_declined_or_identical(recorded, capsys, monkeypatch):
    for path in recorded.values():
        compare(path, capsys, monkeypatch)


def test_tiny_user_recording_accepted(recorded, tmp_path, capsys, monkeypatch):
    """The benchmark's case (benchmarks/bench_startup.py: ~10-30 user-only
    samples of a short Python run) is taken by the lite path. A sample in the
    [vdso] (clock_gettime) makes it decline, rightly: a few recordings are
    tried for one without."""
    from pmuscope.profile import lite as lite_mod

    reasons = []
    for i in range(6):
        path = str(tmp_path / f"tiny-{i}.data")
        r = subprocess.run([shutil.which("perf"), "record", "-q", "-e", "cpu-clock:u", "-c", "2000000", "-o", path,
                            "--", sys.executable, "-c", "sum(range(2 * 10**6))"], capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        try:
            lite_mod.build(path)
        except lite_mod.Decline as err:
            reasons.append(str(err))
            continue
        for argv in ([], ["--json"], ["-n"]):
            got = lite(path, argv)
            assert got is not None, argv
            assert got == reference(path, argv, capsys, monkeypatch)
        return
    pytest.fail(f"every recording declined: {reasons}")


# --- symbols: the lite lookup against SymbolTable.from_elf ------------------------------------------------------

def _system_elf_files(limit: int = 40) -> list[str]:
    import glob

    from pmuscope.symbols.elf import ElfFile

    cands = _real_elf_files() + ["/usr/bin/bash", "/bin/sh", shutil.which("perf") or ""]
    cands += sorted(glob.glob("/usr/lib/x86_64-linux-gnu/*.so*"))[:200:7] + sorted(glob.glob("/usr/bin/*"))[:300:11]
    out = []
    for f in cands:
        if f and os.path.isfile(f) and f not in out and ElfFile.is_elf(f):
            out.append(f)
    return out[:limit]


def test_symbol_lookup_is_from_elfs():
    """Random addresses in the executable segments (and every PLT entry, every
    symbol's first and last byte and the byte after it) of real ELF files
    resolve as the numpy symbol table resolves them, or decline."""
    import random

    import numpy as np

    from pmuscope.profile import lite as lite_mod
    from pmuscope.symbols.dso import load_elf_dso

    rng = random.Random(5)
    checked = declined = 0
    for path in _system_elf_files():
        try:
            ref = load_elf_dso(path)
        except Exception:  # noqa: BLE001 - not a loadable ELF file: nothing to compare
            continue
        mine = lite_mod._load_dso(path, debug_root="/usr/lib/debug", buildid_dir=None, expect_build_id=None)
        t = ref.table
        qs = set()
        for seg in ref.elf.load_segments:
            if seg.p_flags & 1 and seg.p_memsz:
                qs.update(rng.randrange(seg.p_vaddr, seg.p_vaddr + seg.p_memsz) for _ in range(150))
        if len(t):
            idx = rng.sample(range(len(t)), min(len(t), 150))
            for i in idx:
                s, e = int(t.starts[i]), int(t.ends[i])
                qs.update((s, e - 1, e))
        qs = sorted(q for q in qs if q)
        sym, _ = t.lookup(np.array(qs, dtype=np.uint64))
        for q, k in zip(qs, sym.tolist()):
            try:
                got = mine.lookup(q)
            except lite_mod.Decline:
                declined += 1
                continue
            want = None if k < 0 else (int(t.starts[k]), t.name(k))
            assert got == want, (path, hex(q))
            checked += 1
    assert checked > 1000 and declined < checked / 50, (checked, declined)


# --- random timelines ------------------------------------------------------------------------------------------

def write_random(path: str, seed: int) -> None:
    """Processes forking, exec'ing, renaming threads and mapping real ELF
    files (some over older mappings) at random, samples in their mappings
    with a few periods on four CPUs; each round's records written in a random
    order, rounds in time order (as perf's FINISHED_ROUND rule has them)."""
    import random

    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.writer import PerfDataWriter

    rng = random.Random(seed)
    S = abi.PerfSample
    st = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD
    files = [f for f in _real_elf_files() if _picks(f)]
    if not files:
        pytest.skip("no ELF file with a symbol table to map")
    picks = {f: [off for off, _ in _picks(f)] for f in files}
    names = ["bash", "python3", "sh", "worker", "a-long-thread-name"]
    maps: dict[int, list[tuple[int, int, str]]] = {}  # pid -> (start, len, file) as written
    threads: dict[int, list[int]] = {}
    t, next_pid, out = 1000, 300, []
    for _ in range(rng.randrange(4, 9)):
        rnd = []
        for _ in range(rng.randrange(3, 25)):
            t += rng.randrange(1, 50)
            what = rng.random()
            if not threads or what < 0.1:  # a new process (comm and maps first)
                pid = next_pid
                next_pid += 1
                threads[pid] = [pid]
                rnd.append((t, synth.comm(pid, pid, rng.choice(names), sample_id=synth.sample_id(st, pid=pid, tid=pid, time=t))))
                maps[pid] = []
                for k, f in enumerate(rng.sample(files, rng.randrange(1, len(files) + 1))):
                    start = 0x7F0000000000 + rng.randrange(0, 64) * 0x10000000
                    size = (os.path.getsize(f) + 0xFFF) & ~0xFFF
                    maps[pid].append((start, size, f))
                    rnd.append((t, synth.mmap2(pid, pid, start, size, 0, f, sample_id=synth.sample_id(st, pid=pid, tid=pid, time=t))))
                continue
            pid = rng.choice(sorted(threads))
            tid = rng.choice(threads[pid])
            sid = synth.sample_id(st, pid=pid, tid=tid, time=t)
            if what < 0.15:  # a forked process inherits comm and maps
                child = next_pid
                next_pid += 1
                threads[child] = [child]
                maps[child] = list(maps[pid])
                rnd.append((t, synth.fork(child, pid, child, tid, t, sample_id=synth.sample_id(st, pid=child, tid=child, time=t))))
            elif what < 0.2:  # a new thread
                nt = next_pid
                next_pid += 1
                threads[pid].append(nt)
                rnd.append((t, synth.fork(pid, pid, nt, tid, t, sample_id=synth.sample_id(st, pid=pid, tid=nt, time=t))))
            elif what < 0.27:  # a rename (an exec or prctl)
                rnd.append((t, synth.comm(pid, tid, rng.choice(names), exec=rng.random() < 0.5, sample_id=sid)))
            elif what < 0.3 and maps[pid]:  # a mapping over part of an older one
                start, size, _ = rng.choice(maps[pid])
                f = rng.choice(files)
                rnd.append((t, synth.mmap2(pid, pid, start + 0x1000 * rng.randrange(0, 4), 0x3000, 0, f, sample_id=sid)))
            elif maps[pid]:
                start, size, f = rng.choice(maps[pid])
                ip = start + rng.choice(picks[f]) + rng.choice((0, 0, rng.randrange(-0x80, 0x80)))
                rnd.append((t, synth.sample(st, ip=ip, pid=pid, tid=tid, time=t, cpu=rng.randrange(4),
                                            period=rng.choice((1000, 1000, 2000, 3000)))))
        rng.shuffle(rnd)
        out += [r for _, r in rnd] + [synth.finished_round()]
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1000, sample_id_all=1)
    with PerfDataWriter(path, [(attr, [], "cpu-clock:u")], host=False) as w:
        w.write(b"".join(out))


RANDOM_OPTIONS = [[], ["--json"], ["-n", "--sort", "pid"], ["--sort", "tid,comm"], ["--sort", "dso,sym"],
                  ["--sort", "sym"], ["--sort", "comm,pid,tid,dso,sym,cpu"], ["--sort", "dso"],
                  ["--percent-limit", "3"], ["--json", "--sort", "cpu,comm,pid"],
                  ["--percent-limit", "4", "--sort", "pid,sym"], ["--percent-limit", "6", "--sort", "dso", "-n"]]


def test_random_timelines(tmp_path, capsys, monkeypatch):
    accepted = 0
    for seed in range(24):
        path = str(tmp_path / f"random-{seed}.data")
        write_random(path, seed)
        accepted += len(compare(path, capsys, monkeypatch, RANDOM_OPTIONS))
    # most are taken (a row the numpy path would show through ids declines)
    assert accepted >= 24 * len(RANDOM_OPTIONS) // 2, accepted


def test_damaged_files_print_as_the_numpy_path(written, tmp_path):
    """A damaged copy of a file the lite path takes: the same output, errors
    and warnings (printed once) as with the numpy path alone."""
    import struct

    from pmuscope.perfdata.reader import PerfDataFile

    data = bytearray(open(written[""], "rb").read())
    with PerfDataFile(written[""]) as pf:
        start, size = pf.header.data.offset, pf.header.data.size
    pos, n = start, 0
    while n < 12:
        pos += struct.unpack_from("<IHH", data, pos)[2]
        n += 1
    variants = {"truncated": data[:start + size // 2], "record-size": bytearray(data),
                "header": bytearray(data), "sample-type": bytearray(data), "feature": bytearray(data)}
    struct.pack_into("<H", variants["record-size"], pos + 6, 0xFFF8)
    struct.pack_into("<Q", variants["header"], 48, size + 4096)  # data section past the feature table
    struct.pack_into("<I", variants["sample-type"], pos, 9)  # a side-band record read as a sample
    struct.pack_into("<Q", variants["feature"], start + size + 8, 1 << 40)  # a feature section past the end: a warning
    for name, blob in variants.items():
        path = tmp_path / f"{name}.data"
        path.write_bytes(bytes(blob))
        outs = []
        for switch in ("1", "0"):  # a process each: Python shows a warning once per process
            env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       PMUSCOPE_REPORT_LITE=switch)
            r = subprocess.run([sys.executable, "-m", "pmuscope", "report", "--stdio", "-i", str(path)],
                               capture_output=True, text=True, env=env, timeout=120)
            outs.append((r.returncode, r.stdout, r.stderr))
        assert outs[0] == outs[1], name
        if name == "feature":
            assert outs[0][0] == 0 and outs[0][2].count("warning") == 1 and "Total Lost Samples" in outs[0][1]
