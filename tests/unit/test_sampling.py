"""Recording sessions without a kernel: the tracefs format parser on captured
format files, the attrs and open layout against ``perf record -vv`` captures,
/proc synthesis on a fake procfs, and the poll loop over fake rings written
the way the kernel writes them."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from pmuscope import errors
from pmuscope.events.defaults import TRACKING_BITS
from pmuscope.kernel import abi
from pmuscope.kernel.ring import RingBuffer
from pmuscope.perfdata import PerfDataFile
from pmuscope.perfdata import synth
from pmuscope.records import Comm, Fork, Mmap, Mmap2, SampleBatch
from pmuscope.sampling import Recorder, RecordResult, parse_format, tracing_data
from pmuscope.sampling import session as session_mod
from pmuscope.sampling import synthesize as synth_mod
from pmuscope.sampling.tpformat import read_format

from tests.live.test_oracle_perf import parse_perf_vv
from tests.unit.test_events_oracle_golden import COMPARED
from tests.unit.test_ring import FakeKernel, make_mem

DATA = Path(__file__).resolve().parent.parent / "data" / "sampling"
S = abi.PerfSample


# --- tracefs format files ------------------------------------------------------------------
def test_sched_switch_format_fields():
    fmt = parse_format((DATA / "sched_switch.format").read_text(), system="sched")
    assert (fmt.name, fmt.id) == ("sched_switch", 372)
    names = [f.name for f in fmt.event_fields]
    assert names == ["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"]
    common = [f.name for f in fmt.fields if f.common]
    assert common == ["common_type", "common_flags", "common_preempt_count", "common_pid"]
    prev_comm = fmt.fields[4]
    assert (prev_comm.offset, prev_comm.size, prev_comm.array_len, prev_comm.is_string) == (8, 16, 16, True)
    dt = fmt.dtype()
    assert dt.itemsize == 64 and dt.fields["prev_state"][0] == np.dtype("<i8") and dt.fields["next_pid"][1] == 56
    assert fmt.print_fmt.startswith('"prev_comm=%s')


def _switch_payload(prev: str, prev_pid: int, nxt: str, next_pid: int, state: int = 1) -> bytes:
    return (struct.pack("<HBBi", 372, 0, 0, prev_pid) + prev.encode().ljust(16, b"\0")
            + struct.pack("<iiq", prev_pid, 120, state) + nxt.encode().ljust(16, b"\0") + struct.pack("<ii", next_pid, 100))


def test_decode_one_and_batch_payloads():
    fmt = parse_format((DATA / "sched_switch.format").read_text(), system="sched")
    p1 = _switch_payload("python3", 42, "swapper/1", 0)
    p2 = _switch_payload("kworker/0:1", 7, "bash", 99, state=0) + b"\0\0\0\0"  # RAW is padded to 8 with its u32 size
    one = fmt.decode(p1)
    assert one["prev_comm"] == "python3" and one["next_comm"] == "swapper/1"
    assert (one["prev_pid"], one["prev_state"], one["next_prio"], one["common_pid"]) == (42, 1, 100, 42)
    flat = np.frombuffer(p1 + p2, dtype=np.uint8)
    cols = fmt.decode_batch(flat, np.array([0, len(p1), len(p1) + len(p2)]))
    assert cols["prev_comm"].tolist() == ["python3", "kworker/0:1"]
    assert cols["next_pid"].tolist() == [0, 99]
    assert cols["prev_state"].dtype == np.int64 and cols["prev_state"].tolist() == [1, 0]
    with pytest.raises(errors.FormatError):
        fmt.decode(p1[:30])
    with pytest.raises(errors.FormatError):
        fmt.decode_batch(flat[:40], np.array([0, 40]))


def test_data_loc_string():
    fmt = parse_format((DATA / "sched_process_exec.format").read_text(), system="sched")
    f = next(f for f in fmt.fields if f.name == "filename")
    assert f.data_loc and f.is_string and f.type == "char"
    name = b"/usr/bin/true\0"
    fixed = fmt.fixed_size
    payload = struct.pack("<HBBi", fmt.id, 0, 0, 5) + struct.pack("<Iii", (len(name) << 16) | fixed, 5, 4)
    payload = payload.ljust(fixed, b"\0") + name
    assert fmt.decode(payload)["filename"] == "/usr/bin/true"
    assert fmt.decode(payload)["old_pid"] == 4
    cols = fmt.decode_batch(np.frombuffer(payload * 2, np.uint8), np.array([0, len(payload), 2 * len(payload)]))
    assert cols["filename"].tolist() == ["/usr/bin/true"] * 2


def test_rel_loc_and_pointer_fields():
    text = (
        "name: t\nID: 9\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n"
        "\tfield:__rel_loc char[] msg;\toffset:8;\tsize:4;\tsigned:0;\n"
        "\tfield:const char * filename;\toffset:16;\tsize:8;\tsigned:0;\n"
        "\tfield:u32 vec[2];\toffset:24;\tsize:8;\tsigned:0;\n"
    )
    fmt = parse_format(text)
    msg, fname, vec = fmt.event_fields
    assert msg.rel_loc and not fname.is_string and vec.array_len == 2
    # rel_loc offsets count from the end of the locator field (offset 12)
    payload = bytearray(32) + b"hi\0\0\0\0\0\0"
    struct.pack_into("<I", payload, 8, (3 << 16) | (32 - 12))
    struct.pack_into("<Q", payload, 16, 0xDEAD)
    struct.pack_into("<II", payload, 24, 1, 2)
    out = fmt.decode(bytes(payload))
    assert out["msg"] == "hi" and out["filename"] == 0xDEAD and out["vec"] == [1, 2]


def test_bad_format_files():
    with pytest.raises(errors.FormatError, match="not a tracefs format"):
        parse_format("hello\nworld\n")
    with pytest.raises(errors.FormatError, match=":3: cannot parse field"):
        parse_format("name: x\nID: 1\n\tfield:int a; offset:zz;\n", source="fmt")
    with pytest.raises(errors.PmuscopeError, match="cannot read the tracepoint format"):
        read_format("nosuch", "event", tracefs=str(DATA))


def test_tracing_data_layout(tmp_path):
    """HEADER_TRACING_DATA: magic, version 0.6, header files, one system with its format."""
    ev = tmp_path / "events"
    (ev / "sched" / "sched_switch").mkdir(parents=True)
    (ev / "header_page").write_text("page header\n")
    (ev / "header_event").write_text("event header\n")
    fmt_text = (DATA / "sched_switch.format").read_bytes()
    (ev / "sched" / "sched_switch" / "format").write_bytes(fmt_text)
    blob = tracing_data([("sched", "sched_switch")], tracefs=str(tmp_path))
    assert blob.startswith(b"\x17\x08Dtracing0.6\0\0\x08")
    pos = 10 + 4 + 2 + 4
    assert blob[pos : pos + 12] == b"header_page\0"
    size = struct.unpack_from("<Q", blob, pos + 12)[0]
    assert size == len("page header\n")
    i = blob.index(b"sched\0")
    assert struct.unpack_from("<IQ", blob, i + 6) == (1, len(fmt_text))
    assert blob[i + 18 : i + 18 + len(fmt_text)] == fmt_text
    assert blob.endswith(struct.pack("<IIQ", 0, 0, 0))


# --- attrs against perf record -vv --------------------------------------------------------------
FIELDS = COMPARED + ("sample_type", "sample_id_all", "sample_regs_user", "sample_stack_user", "mmap_data") + TRACKING_BITS

GOLDEN = [
    # (capture, Recorder kwargs, compare tracking bits)
    ("perf-record-vv-cpu-clock-F4000-g.txt", dict(events="cpu-clock", freq=4000, callgraph=True, cmd=["true"]), True),
    ("perf-record-vv-cpu-clock-c100000.txt", dict(events="cpu-clock", period=100000, cmd=["true"]), True),
    ("perf-record-vv-cycles-instructions-F1000-g.txt",
     dict(events="cycles,instructions", freq=1000, callgraph=True, cmd=["true"]), True),
    # perf -a with several events moves the tracking bits to an extra dummy event; we keep them on the first
    ("perf-record-vv-a-cpu-clock-sched_switch.txt", dict(events="cpu-clock,sched:sched_switch", system_wide=True), False),
    ("perf-record-vv-t-cpu-clock.txt", dict(events="cpu-clock", tid=os.getpid()), True),
    ("perf-record-vv-p-cpu-clock.txt", dict(events="cpu-clock", pid=os.getpid()), True),
    ("perf-record-vv-cpu-clock-dwarf.txt", dict(events="cpu-clock", callgraph="dwarf", cmd=["true"]), True),
    ("perf-record-vv-cpu-clock-dwarf4096.txt", dict(events="cpu-clock", callgraph="dwarf,4096", cmd=["true"]), True),
]


def _perf_events(name: str) -> tuple[list[dict], list[list[tuple[int, int]]]]:
    """The attrs perf opened (its side-band dummies dropped) and each one's (pid, cpu) opens."""
    text = (DATA / name).read_text()
    attrs = parse_perf_vv(text, FIELDS + ("watermark",))
    opens: list[list[tuple[int, int]]] = []
    for block in text.split("perf_event_attr:")[1:]:
        opens.append([(int(p), int(c)) for p, c in re.findall(r"sys_perf_event_open: pid (-?\d+)\s+cpu (-?\d+)", block)])
    keep = [i for i, a in enumerate(attrs) if not (a["type"] == 1 and a["config"] == 9)]
    return [attrs[i] for i in keep], [opens[i] for i in keep]


@pytest.mark.parametrize("capture,kwargs,tracking", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_attrs_match_perf_record(capture, kwargs, tracking):
    expected, _ = _perf_events(capture)
    rec = Recorder(output=None, **kwargs)
    fields = FIELDS if tracking else tuple(f for f in FIELDS if f not in TRACKING_BITS)
    ours = [{k: int(getattr(a, k)) for k in fields} for a in rec.attrs]
    assert ours == [{k: e[k] for k in fields} for e in expected]
    rec._teardown()


class FakeFd:
    """Stands in for PerfEventFd: remembers how it was opened; its fileno is a
    pipe the test makes readable to simulate a wake-up."""

    next_id = 100
    opened: list["FakeFd"] = []

    def __init__(self, attr, pid=0, cpu=-1, group=None, flags=0, *, event=None):
        self.attr, self.pid, self.cpu, self.group, self.event = attr.copy(), pid, cpu, group, event
        self.r, self.w = os.pipe()
        FakeFd.next_id += 1
        self._id = FakeFd.next_id
        self.enabled = False
        self.output = None
        FakeFd.opened.append(self)

    def id(self):
        return self._id

    def fileno(self):
        return self.r

    def enable(self, group=False):
        self.enabled = True

    def disable(self, group=False):
        self.enabled = False

    def set_output(self, target):
        self.output = target

    def close(self):
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.r = self.w = -1


class FakeRings:
    """RingBuffer over bytearrays, one FakeKernel writer each."""

    def __init__(self):
        self.rings: list[RingBuffer] = []
        self.kernels: list[FakeKernel] = []

    def __call__(self, fd, pages=16, *a, **kw):
        mem = make_mem(pages)
        ring = RingBuffer.from_memory(mem, 4096, fd=fd)
        self.rings.append(ring)
        self.kernels.append(FakeKernel(mem))
        return ring


@pytest.fixture
def fakes(monkeypatch):
    FakeFd.opened = []
    rings = FakeRings()
    monkeypatch.setattr(session_mod, "PerfEventFd", FakeFd)
    monkeypatch.setattr(session_mod, "RingBuffer", rings)
    yield rings
    for fd in FakeFd.opened:
        fd.close()


@pytest.mark.parametrize("capture,kwargs", [(g[0], g[1]) for g in GOLDEN if "cmd" not in g[1] and "pid" not in g[1]])
def test_open_layout_matches_perf(fakes, capture, kwargs):
    """One fd per (event, CPU), pid -1 for -a and the thread for -t, one ring per CPU."""
    _, perf_opens = _perf_events(capture)
    rec = Recorder(output=None, **kwargs)
    rec._open()
    for i, fds in enumerate(rec.fds):
        ours = [(fd.pid, fd.cpu) for fd in fds]
        want = [(-1 if p == -1 else os.getpid(), c) for p, c in perf_opens[i]]
        assert sorted(ours) == sorted(want)
    assert len(rec.rings) == len(rec.cpus)
    redirected = [fd for fds in rec.fds for fd in fds if fd.output is not None]
    assert len(redirected) == sum(map(len, rec.fds)) - len(rec.rings)
    assert all(fd.output.cpu == fd.cpu for fd in redirected)
    rec._teardown()


def test_tid_turns_inherit_off_and_pid_keeps_it():
    assert Recorder("cpu-clock", tid=os.getpid(), output=None).attrs[0].inherit == 0
    assert Recorder("cpu-clock", pid=os.getpid(), output=None).attrs[0].inherit == 1
    assert Recorder("cpu-clock", system_wide=True, output=None).attrs[0].sample_type & S.CPU


def test_bad_arguments():
    with pytest.raises(errors.PmuscopeError, match="positive"):
        Recorder("cpu-clock", period=0, output=None)
    with pytest.raises(errors.PmuscopeError, match="not online"):
        Recorder("cpu-clock", cpus=[4096], output=None)
    with pytest.raises(errors.PmuscopeError, match="either pid or tid"):
        Recorder("cpu-clock", pid=1, tid=1, output=None)
    with pytest.raises(errors.PmuscopeError, match="power of two"):
        Recorder("cpu-clock", system_wide=True, mmap_pages=3, output=None)


# --- /proc synthesis -------------------------------------------------------------------------
def fake_proc(root: Path) -> Path:
    (root / "kallsyms").write_text(
        "ffffffff81000000 T _stext\nffffffff81000000 T _text\nffffffff81001000 T start_kernel\nffffffff82200000 T _etext\n"
    )
    p = root / "4242"
    (p / "task" / "4242").mkdir(parents=True)
    (p / "task" / "4250").mkdir()
    (p / "status").write_text("Name:\tbusyloop\nTgid:\t4242\nPPid:\t1\n")
    (p / "task" / "4242" / "comm").write_text("busyloop\n")
    (p / "task" / "4250" / "comm").write_text("worker\n")
    (p / "maps").write_text(
        "55d0c0000000-55d0c0002000 r--p 00000000 fe:00 1234 /usr/bin/busyloop\n"
        "55d0c0002000-55d0c0010000 r-xp 00002000 fe:00 1234 /usr/bin/busyloop\n"
        "7f0000000000-7f0000100000 r-xp 00026000 fe:00 99 /usr/lib/libc.so.6\n"
        "7f0000200000-7f0000201000 rwxp 00000000 00:00 0 \n"
        "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]\n"
        "7ffd00010000-7ffd00020000 rw-p 00000000 00:00 0                          [stack]\n"
    )
    return root


def test_synthesize_from_proc(tmp_path):
    proc = fake_proc(tmp_path)
    st = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD
    blob = b"".join(synth_mod.synthesize([4242, 999], st, procfs_root=str(proc)))
    attr = abi.perf_event_attr(sample_type=st, sample_id_all=1)
    from pmuscope.records import AttrTable, decode

    items = list(decode(blob, AttrTable([(attr, [])])))
    kmap = items[0]
    assert isinstance(kmap, Mmap) and kmap.filename == "[kernel.kallsyms]_text"
    assert (kmap.addr, kmap.len, kmap.pgoff) == (0xFFFFFFFF81000000, 0x1200000, 0xFFFFFFFF81000000)
    assert kmap.misc & 7 == abi.PERF_RECORD_MISC_KERNEL
    forks = [i for i in items if isinstance(i, Fork)]
    comms = [i for i in items if isinstance(i, Comm)]
    assert [(f.pid, f.ppid, f.tid, f.ptid) for f in forks] == [(4242, 1, 4242, 1), (4242, 4242, 4250, 4242)]
    assert [(c.pid, c.tid, c.comm) for c in comms] == [(4242, 4242, "busyloop"), (4242, 4250, "worker")]
    assert all(c.sample_id is not None and c.sample_id.tid == c.tid for c in comms)
    maps = [i for i in items if isinstance(i, Mmap2)]
    assert [(m.filename, m.addr, m.len, m.pgoff) for m in maps] == [
        ("/usr/bin/busyloop", 0x55D0C0002000, 0xE000, 0x2000),
        ("/usr/lib/libc.so.6", 0x7F0000000000, 0x100000, 0x26000),
        ("//anon", 0x7F0000200000, 0x1000, 0),
        ("[vdso]", 0x7FFD00000000, 0x2000, 0),
    ]
    assert (maps[0].maj, maps[0].min, maps[0].ino, maps[0].prot, maps[0].flags) == (0xFE, 0, 1234, 5, 2)
    assert synth_mod.mmap_filenames(blob)[:2] == ["[kernel.kallsyms]_text", "/usr/bin/busyloop"]
    # with data mmaps (perf record -d), every mapping but the non-executable [stack]-like ones
    data = b"".join(synth_mod.process_records(4242, st, procfs_root=str(proc), data_mmaps=True))
    maps = [i for i in decode(data, AttrTable([(attr, [])])) if isinstance(i, Mmap2)]
    assert [(m.filename, m.addr, m.prot) for m in maps] == [
        ("/usr/bin/busyloop", 0x55D0C0000000, 1), ("/usr/bin/busyloop", 0x55D0C0002000, 5),
        ("/usr/lib/libc.so.6", 0x7F0000000000, 5), ("//anon", 0x7F0000200000, 7), ("[vdso]", 0x7FFD00000000, 5),
    ]


def test_kernel_map_hidden(tmp_path):
    (tmp_path / "kallsyms").write_text("0000000000000000 T _text\n0000000000000000 T _etext\n")
    assert synth_mod.kernel_mmap(S.IP, str(tmp_path)) == b""


def _kallsyms(etext: int, lines: int = 2000) -> str:
    """A kallsyms whose _etext lies past its first page, as in a real one."""
    body = "".join(f"ffffffff81{i:06x} t f{i}\n" for i in range(lines))
    return f"ffffffff81000000 T _stext\nffffffff81000000 T _text\n{body}{etext:016x} T _etext\n"


def test_kernel_text_range_is_kept_per_boot_and_first_page(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", str(cache))
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    boot = proc / "sys" / "kernel" / "random" / "boot_id"
    boot.write_text("c817b327-8ae1-4696-8a01-d5b7573ad346\n")
    ks = proc / "kallsyms"
    ks.write_text(_kallsyms(0xFFFFFFFF82200000))
    assert len(ks.read_bytes()) > 3 * 4096
    assert synth_mod.kernel_text_range(str(proc)) == (0xFFFFFFFF81000000, 0xFFFFFFFF82200000)
    (kept,) = cache.iterdir()
    assert kept.name == f"kernel-text-c817b327-8ae1-4696-8a01-d5b7573ad346-{os.geteuid()}.bin"
    # same boot, same first page: the kept range answers, the rest of kallsyms is not read
    ks.write_text(_kallsyms(0xFFFFFFFF82300000))
    assert synth_mod.kernel_text_range(str(proc)) == (0xFFFFFFFF81000000, 0xFFFFFFFF82200000)
    # another boot: read again, and the earlier boot's range is removed
    boot.write_text("00000000-0000-0000-0000-000000000002\n")
    assert synth_mod.kernel_text_range(str(proc)) == (0xFFFFFFFF81000000, 0xFFFFFFFF82300000)
    assert [p.name for p in cache.iterdir()] == [f"kernel-text-00000000-0000-0000-0000-000000000002-{os.geteuid()}.bin"]
    # another first page (KASLR moved _text, or a symbol more): read again
    ks.write_text(_kallsyms(0xFFFFFFFF82400000).replace("ffffffff81000000 T _text", "ffffffff81000000 T _text\n"
                                                          "ffffffff81000000 T _head"))
    assert synth_mod.kernel_text_range(str(proc)) == (0xFFFFFFFF81000000, 0xFFFFFFFF82400000)
    # hidden addresses in the first page: nothing, whatever is kept
    ks.write_text("0000000000000000 T _stext\n0000000000000000 T _text\n0000000000000000 T _etext\n")
    assert synth_mod.kernel_text_range(str(proc)) is None
    # a damaged kept file is ignored and rewritten
    ks.write_text(_kallsyms(0xFFFFFFFF82500000))
    assert synth_mod.kernel_text_range(str(proc))[1] == 0xFFFFFFFF82500000
    (kept,) = cache.iterdir()
    for bad in (b"", kept.read_bytes()[:30], b"XXXXXXXX" + kept.read_bytes()[8:], kept.read_bytes() + b"x"):
        kept.write_bytes(bad)
        ks.write_text(_kallsyms(0xFFFFFFFF82600000))
        assert synth_mod.kernel_text_range(str(proc))[1] == 0xFFFFFFFF82600000
        ks.write_text(_kallsyms(0xFFFFFFFF82700000))  # kept again: the next read is the kept range
        assert synth_mod.kernel_text_range(str(proc))[1] == 0xFFFFFFFF82600000
    # no cache directory: every run reads kallsyms
    monkeypatch.setenv("PMUSCOPE_CACHE_DIR", "")
    assert synth_mod.kernel_text_range(str(proc))[1] == 0xFFFFFFFF82700000


def test_recording_imports_neither_numpy_nor_the_reader():
    """``record`` pays for what it uses: numpy (~45 ms) and the perf.data reader
    are not imported by opening, draining and writing."""
    import subprocess
    import sys

    code = ("import sys; import pmuscope.cli.record_cmd, pmuscope.sampling.session, pmuscope.perfdata.writer, "
            "pmuscope.counting.workload, pmuscope.sampling.synthesize, pmuscope.events, pmuscope.sampling.pyframes; "
            "print(sorted(m for m in ('numpy', 'pmuscope.perfdata.reader', 'pmuscope.records', "
            "'pmuscope.sampling.tpformat', 'pmuscope.counting.results') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "[]", out.stdout
    # the names stay importable from their packages
    import pmuscope.counting as counting
    import pmuscope.perfdata as perfdata
    import pmuscope.sampling as sampling

    assert counting.Counts.__module__ == "pmuscope.counting.results"
    assert perfdata.PerfDataFile.__module__ == "pmuscope.perfdata.reader"
    assert perfdata.PerfDataAttr is __import__("pmuscope.perfdata.reader", fromlist=["x"]).PerfDataAttr
    assert sampling.TracepointDecoder.__module__ == "pmuscope.sampling.tpformat"


# --- the poll loop over fake rings -------------------------------------------------------------
def _sample(st, k, cpu):
    return synth.sample(st, ip=0x55D0C0003000 + k, pid=4242, tid=4242, time=1000 + k, cpu=cpu, period=250000)


def test_poll_loop_streams_into_perf_data(fakes, tmp_path):
    (tmp_path / "proc").mkdir()
    proc = fake_proc(tmp_path / "proc")
    out = tmp_path / "rec.data"
    rec = Recorder("cpu-clock", system_wide=True, cpus=[0], output=out, procfs_root=str(proc), mmap_pages=1,
                   build_ids=False)
    rec.start()
    assert all(fd.enabled for fds in rec.fds for fd in fds)
    st = int(rec.attrs[0].sample_type)
    k = fakes.kernels[0]
    for i in range(10):
        assert k.write(_sample(st, i, 0))
    os.write(rec.fds[0][0].w, b"!")  # the kernel's wake-up
    chunks = rec.poll(0.5)
    assert sum(len(c) for c in chunks) == 10 * len(_sample(st, 0, 0))
    # overflow the 1-page ring: the fake kernel drops records and then writes a PERF_RECORD_LOST
    n = 0
    while k.write(_sample(st, 100 + n, 0)):
        n += 1
    dropped = 3
    for _ in range(dropped - 1):
        k.write(_sample(st, 0, 0))
    rec.poll(0)
    assert k.write(_sample(st, 999, 0))  # the LOST record goes first, then this sample
    rec.stop()
    result = rec.run()
    assert isinstance(result, RecordResult)
    assert result.samples == 10 + n + 1
    assert result.lost == dropped
    assert not any(fd.enabled for fds in rec.fds for fd in fds)
    assert "lost" in result.summary() and f"({result.samples} samples, {dropped} lost)" in result.summary()
    f = PerfDataFile(str(out))
    assert f.sample_counts() == [result.samples]
    counts = f.counts()
    assert counts[abi.PERF_RECORD_FINISHED_ROUND] >= 3
    assert counts[abi.PERF_RECORD_LOST] == 1
    assert counts[abi.PERF_RECORD_MMAP] == 1 and counts[abi.PERF_RECORD_COMM] == 2
    assert f.attrs[0].ids == [fd.id() for fd in rec.fds[0]]
    # (the fake kernel's LOST record has no sample_id trailer, so read the ips raw)
    ips = [struct.unpack_from("<Q", mv, 8)[0] for t, _m, mv, *_ in f.raw_records() if t == abi.PERF_RECORD_SAMPLE]
    assert ips[:10] == [0x55D0C0003000 + i for i in range(10)] and ips[-1] == 0x55D0C0003000 + 999


def test_one_header_walk_counts_samples_lost_throttles_and_mmap_names():
    """The recorder's walk over a drained chunk gives what the ring's own
    LOST scan (the reference it replaced for recording) and the decoder give."""
    rec = Recorder("cpu-clock", system_wide=True, cpus=[0], output=None, build_ids=True)
    st = int(rec.attrs[0].sample_type)
    sid = synth.sample_id(st, pid=1, tid=1, time=50)
    chunk = b"".join([
        _sample(st, 0, 0),
        synth.record(abi.PERF_RECORD_LOST, 0, struct.pack("<QQ", 7, 11) + sid),
        synth.mmap2(1, 1, 0x1000, 0x1000, 0, "/usr/lib/x.so", sample_id=sid),
        _sample(st, 5, 0),
        synth.record(abi.PERF_RECORD_LOST_SAMPLES, 0, struct.pack("<Q", 4) + sid),
        synth.record(abi.PERF_RECORD_THROTTLE, 0, struct.pack("<QQQ", 60, 1, 1) + sid),
        synth.record(abi.PERF_RECORD_LOST, 0, struct.pack("<QQ", 7, 2) + sid),
        _sample(st, 9, 0),
    ])
    rec._account(chunk)
    r = rec.result
    assert (r.samples, r.lost, r.lost_samples, r.throttled) == (3, 13, 4, 1)
    assert (rec._first_time, rec._last_time) == (1000, 1009)
    assert rec._dso_names == {"/usr/lib/x.so"}
    ring = RingBuffer.from_memory(make_mem(1))
    ring._scan_lost(chunk)
    assert (ring.lost, ring.lost_samples) == (r.lost, r.lost_samples)
    rec.close()


def test_records_iterates_live_and_stops(fakes, tmp_path):
    rec = Recorder("cpu-clock", cpus=[0], output=None, procfs_root=str(tmp_path), mmap_pages=4)
    rec.start()
    st = int(rec.attrs[0].sample_type)
    for i in range(5):
        fakes.kernels[0].write(_sample(st, i, 0))
    got = []
    for item in rec.records(interval=0.01):
        if isinstance(item, SampleBatch):
            got += item.time.tolist()
            rec.stop()
    assert got == [1000 + i for i in range(5)]
    assert rec.close().samples == 5


def test_summary_line():
    r = RecordResult("perf.data", samples=1234, file_bytes=int(0.123 * 1024 * 1024) + 1, wakeups=2)
    assert r.summary().splitlines()[-1] == "[ pmuscope record: Captured and wrote 0.123 MB perf.data (1234 samples) ]"
    r.throttled = 7
    assert "(1234 samples, 7 throttled) ]" in r.summary()


def test_cli_bad_input_is_one_line(capsys):
    from pmuscope.cli.main import main

    assert main(["record", "-F", "0", "--", "true"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-F 0" in err[0]
    assert main(["record", "--call-graph", "lbr", "-o", "/nonexistent/x.data", "--", "true"]) != 0
    assert "lbr is not supported" in capsys.readouterr().err
    assert main(["record", "-p", "1", "--", "true"]) != 0
    assert "not several" in capsys.readouterr().err
    assert main(["record", "-e", "no-such-event", "-a"]) != 0
    assert len(capsys.readouterr().err.strip().splitlines()) >= 1


# --- TRACING_DATA and batch decoding ------------------------------------------------------------
def test_parse_perf_tracing_data():
    """The TRACING_DATA feature perf 6.1 wrote for sched:sched_switch."""
    from pmuscope.sampling import parse_tracing_data

    formats = parse_tracing_data((DATA / "perf-tracing-data-sched_switch.bin").read_bytes())
    fmt = formats[372]
    assert (fmt.system, fmt.name) == ("sched", "sched_switch")
    assert [f.name for f in fmt.event_fields][:2] == ["prev_comm", "prev_pid"]
    with pytest.raises(errors.FormatError, match="truncated"):
        parse_tracing_data((DATA / "perf-tracing-data-sched_switch.bin").read_bytes()[:300])
    with pytest.raises(errors.FormatError, match="bad magic"):
        parse_tracing_data(b"\0" * 64)


def test_tracing_data_round_trip(tmp_path):
    from pmuscope.sampling import parse_tracing_data

    ev = tmp_path / "events"
    for sys_, name in (("sched", "sched_switch"), ("sched", "sched_process_exec")):
        (ev / sys_ / name).mkdir(parents=True, exist_ok=True)
        (ev / sys_ / name / "format").write_bytes((DATA / f"{name}.format").read_bytes())
    (ev / "header_page").write_text("p\n")
    (ev / "header_event").write_text("e\n")
    formats = parse_tracing_data(tracing_data([("sched", "sched_switch"), ("sched", "sched_process_exec")], str(tmp_path)))
    assert sorted((f.system, f.name) for f in formats.values()) == [("sched", "sched_process_exec"), ("sched", "sched_switch")]


def test_decoder_on_a_mixed_batch():
    """cpu-clock and sched_switch samples in one batch: only the tracepoint rows are decoded."""
    from pmuscope.records import AttrTable, decode
    from pmuscope.sampling import TracepointDecoder, parse_tracing_data

    st = S.IDENTIFIER | S.IP | S.TID | S.TIME | S.PERIOD
    clock = abi.perf_event_attr(type=abi.PERF_TYPE_SOFTWARE, config=0, sample_type=st)
    tp = abi.perf_event_attr(type=abi.PERF_TYPE_TRACEPOINT, config=372, sample_type=st | S.RAW)
    table = AttrTable([(clock, [1]), (tp, [2])])

    def tp_sample(ident, payload):
        raw = struct.pack("<I", len(payload) + 4) + payload + b"\0" * 4
        body = struct.pack("<QQIIQQ", ident, 0x1000, 5, 5, 77, 1) + raw
        return struct.pack("<IHH", abi.PERF_RECORD_SAMPLE, 1, 8 + len(body)) + body

    chunk = (tp_sample(2, _switch_payload("a", 1, "b", 2)) + synth.sample(st, id=1, ip=0x2000, period=9)
             + tp_sample(2, _switch_payload("c", 3, "d", 4)))
    batches = [b for b in decode(chunk, table) if isinstance(b, SampleBatch)]
    assert len(batches) == 1
    dec = TracepointDecoder(table, formats=parse_tracing_data((DATA / "perf-tracing-data-sched_switch.bin").read_bytes()))
    (rows, cols), = dec.fields(batches[0]).values()
    assert rows.tolist() == [0, 2]
    assert cols["prev_comm"].tolist() == ["a", "c"] and cols["next_pid"].tolist() == [2, 4]


def test_cpu_lists():
    from pmuscope.sampling.session import parse_cpulist

    assert parse_cpulist("0-3,6, 8-8") == [0, 1, 2, 3, 6, 8]
    assert Recorder("cpu-clock", cpus="0", output=None).cpus == [0]
    with pytest.raises(errors.PmuscopeError, match="bad CPU list '1-0'"):
        Recorder("cpu-clock", cpus="1-0", output=None)
    with pytest.raises(errors.PmuscopeError, match="bad CPU list"):
        Recorder("cpu-clock", cpus="x", output=None)


def test_module_maps(tmp_path):
    (tmp_path / "modules").write_text(
        "xfs 1982464 1 - Live 0xffffffffc0400000\n"
        "nf_tables 290816 0 - Live 0xffffffffc0200000\n"
        "hidden 4096 0 - Live 0x0000000000000000\n"
    )
    mods = tmp_path / "lib"
    (mods / "kernel/fs/xfs").mkdir(parents=True)
    (mods / "modules.dep").write_text("kernel/fs/xfs/xfs.ko.xz: kernel/lib/libcrc32c.ko.xz\n")
    st = S.IP | S.TID | S.TIME
    recs = synth_mod.module_mmaps(st, str(tmp_path), modules_root=str(mods))
    from pmuscope.records import AttrTable, decode

    items = list(decode(b"".join(recs), AttrTable([(abi.perf_event_attr(sample_type=st, sample_id_all=1), [])])))
    assert [(m.filename, m.addr, m.len, m.pid, m.misc & 7) for m in items] == [
        (str(mods / "kernel/fs/xfs/xfs.ko.xz"), 0xFFFFFFFFC0400000, 1982464, 0xFFFFFFFF, abi.PERF_RECORD_MISC_KERNEL),
        ("[nf_tables]", 0xFFFFFFFFC0200000, 290816, 0xFFFFFFFF, abi.PERF_RECORD_MISC_KERNEL),
    ]


def test_frequency_against_max_sample_rate(tmp_path):
    (tmp_path / "sys/kernel").mkdir(parents=True)
    (tmp_path / "sys/kernel/perf_event_max_sample_rate").write_text("2500\n")
    rec = Recorder("cpu-clock", cmd=["true"], output=None, procfs_root=str(tmp_path))
    assert rec.attrs[0].sample_freq == 2500 and "lowering the default frequency from 4000 to 2500" in rec.notes[0]
    with pytest.raises(errors.InvalidAttrError, match="exceeds kernel.perf_event_max_sample_rate=2500"):
        Recorder("cpu-clock", freq=3000, cmd=["true"], output=None, procfs_root=str(tmp_path))
    assert Recorder("cpu-clock", period=10, cmd=["true"], output=None, procfs_root=str(tmp_path)).attrs[0].sample_period == 10


def test_default_event_without_a_cpu_pmu(tmp_path):
    """No /sys/bus/event_source/devices/cpu: perf's fallback to cpu-clock (no probe needed)."""
    session_mod._default_event_cache.pop(str(tmp_path), None)
    assert session_mod.default_event(str(tmp_path)) == "cpu-clock"
    assert Recorder(cmd=["true"], output=None, sysfs_root=str(tmp_path)).names == ["cpu-clock"]


def test_user_only_fallback_at_paranoid_2(fakes, monkeypatch, tmp_path):
    """EACCES for a kernel-including event: retried with exclude_kernel (perf's ':u' fallback), noted,
    and every fd of the event uses the same attr."""
    import errno

    class ParanoidFd(FakeFd):
        def __init__(self, attr, *a, **kw):
            if not attr.exclude_kernel:
                raise errors.PermissionDeniedError("perf_event_paranoid=2", errno=errno.EACCES)
            super().__init__(attr, *a, **kw)

    monkeypatch.setattr(session_mod, "PerfEventFd", ParanoidFd)
    rec = Recorder("cpu-clock", tid=os.getpid(), output=None, procfs_root="/proc")
    rec._open()
    assert rec.attrs[0].exclude_kernel == 1
    assert all(fd.attr.exclude_kernel for fd in rec.fds[0]) and len(rec.fds[0]) == len(rec.cpus)
    assert any("user space only" in n for n in rec.notes)
    rec._teardown()


def test_call_graph_modes():
    assert Recorder("cpu-clock/call-graph=dwarf/", cmd=["true"], output=None).attrs[0].sample_stack_user == 8192
    assert not Recorder("cpu-clock", callgraph="no", cmd=["true"], output=None).attrs[0].sample_type & S.CALLCHAIN
    with pytest.raises(errors.PmuscopeError, match="lbr is not supported"):
        Recorder("cpu-clock", callgraph="lbr", cmd=["true"], output=None)
    with pytest.raises(errors.PmuscopeError, match="multiple of 8"):
        Recorder("cpu-clock", callgraph="dwarf,100", cmd=["true"], output=None)
