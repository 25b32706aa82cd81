"""The monitor's kernel timer without a kernel: ring records decoded from
synthetic bytes, samples turned into intervals, the attrs requested, the
mode chosen."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pmuscope.counting import ktimer as kt
from pmuscope.counting import monitor as mm
from pmuscope.errors import FormatError, PmuscopeError
from pmuscope.events.spec import EventSpec
from pmuscope.kernel import abi

MS = 1_000_000
IDS = [100, 101, 102]  # leader, two members


def sample(t, ena, run, leader, values, ids=IDS, nr=None):
    words = kt.sample_words(len(values))
    body = [t, nr if nr is not None else 1 + len(values), ena, run, leader, ids[0]]
    for v, i in zip(values, ids[1:]):
        body += [v, i]
    return struct.pack("<IHH", abi.PERF_RECORD_SAMPLE, 0, words * 8) + struct.pack(f"<{words - 1}Q", *body)


def lost(n, t=0):
    return struct.pack("<IHHQQQ", abi.PERF_RECORD_LOST, 0, 32, 7, n, t)


def throttle(kind, t=0):
    return struct.pack("<IHHQQQQ", kind, 0, 40, t, 7, 7, t)


def test_decode_samples_fast_path():
    buf = b"".join(sample(1000 + j * MS, (j + 1) * MS, (j + 1) * MS, 5 * j, [10 * j, 2**64 - 1 - j]) for j in range(4))
    d = kt.decode_records(buf, 2, IDS)
    assert d.time.tolist() == [1000 + j * MS for j in range(4)]
    assert d.enabled.tolist() == d.running.tolist() == [MS, 2 * MS, 3 * MS, 4 * MS]
    assert d.values.tolist() == [[10 * j, 2**64 - 1 - j] for j in range(4)]
    assert d.ids == IDS and (d.lost, d.throttles, d.unthrottles, d.other) == (0, 0, 0, 0)


def test_decode_counts_lost_and_throttle_records_between_samples():
    buf = (sample(1, 1, 1, 0, [1, 2]) + lost(17) + throttle(abi.PERF_RECORD_THROTTLE)
           + throttle(abi.PERF_RECORD_UNTHROTTLE) + sample(2, 2, 2, 0, [3, 4]) + lost(3)
           + struct.pack("<IHH", 99, 0, 16) + b"\0" * 8)
    d = kt.decode_records(buf, 2, IDS)
    assert d.time.tolist() == [1, 2] and d.values.tolist() == [[1, 2], [3, 4]]
    assert (d.lost, d.throttles, d.unthrottles, d.other) == (20, 1, 1, 1)
    # a chunk of records and no sample
    d = kt.decode_records(lost(5), 2, IDS)
    assert len(d.time) == 0 and d.lost == 5 and d.values.shape == (0, 2)
    assert len(kt.decode_records(b"", 2).time) == 0


def test_decode_rejects_other_layouts():
    with pytest.raises(FormatError, match="group of 4"):
        kt.decode_records(sample(1, 1, 1, 0, [1, 2], nr=4), 2, IDS)
    with pytest.raises(FormatError, match="ids"):
        kt.decode_records(sample(1, 1, 1, 0, [1, 2], ids=[100, 102, 101]), 2, IDS)
    with pytest.raises(FormatError, match="has 72 bytes, expected 88"):
        kt.decode_records(sample(1, 1, 1, 0, [1, 2]) + sample(1, 1, 1, 0, [1], ids=IDS[:2]), 2, IDS)
    with pytest.raises(FormatError, match="size 0"):
        kt.decode_records(sample(1, 1, 1, 0, [1, 2]) + b"\0" * 8, 2, IDS)
    with pytest.raises(FormatError, match="whole u64"):
        kt.decode_records(b"\0" * 12, 2, IDS)


# --------------------------------------------------------------------------- samples → intervals


def feed(asm, cpu, ks, *, anchor, lat=0, per_ms=(1, 10), ena_lag=0):
    """Samples of ``cpu`` at its grid points ``ks`` (+ latency ``lat`` ns each, or per sample):
    counts grow by per_ms per ms of enabled time."""
    ks = np.asarray(ks, dtype=np.int64)
    lat = np.broadcast_to(np.asarray(lat, dtype=np.int64), ks.shape)
    t = anchor + ks * MS + lat
    ena = t - anchor + ena_lag
    vals = np.stack([ena // MS * per_ms[0], ena // MS * per_ms[1]], axis=1).astype(np.uint64)
    asm.add(cpu, t, ena, ena, vals)


def test_assembler_rows_wait_for_every_cpu_and_skip_missing_samples():
    asm = kt.TimerAssembler(2, 2, MS, 100_000)
    feed(asm, 0, [1, 2, 3, 4, 5], anchor=10_000, lat=[3000, 5000, 150_000, 0, 0])
    feed(asm, 1, [1, 2, 4], anchor=25_000)  # CPU 1 has no sample for interval 3, and has not reached 5
    rows = asm.take()
    assert rows.k.tolist() == [1, 2, 4] and rows.skipped.tolist() == [0, 0, 1]
    # CPU 0's third sample (150 µs after its grid point) was late, but interval 3 is not a row;
    # the row after the gap is late on every CPU (interval 3's deadline passed unread), as in the user loop
    assert rows.late.tolist() == [[False, False], [False, False], [True, True]]
    assert rows.enabled[:, 1].tolist() == [MS, 2 * MS, 4 * MS]
    # cumulative counts: interval 4's row holds CPU 0's counts through 4 (its sample 3 is folded in)
    assert rows.values[-1, 0].tolist() == [4, 40]
    assert asm.take() is None  # nothing new: CPU 1 has not passed 4
    feed(asm, 1, [5, 6], anchor=25_000, lat=[200_000, 0])
    rows = asm.take()
    assert rows.k.tolist() == [5] and rows.skipped.tolist() == [0]
    assert rows.late.tolist() == [[False, True]]


def test_assembler_late_flag_and_interval_of_each_sample():
    asm = kt.TimerAssembler(1, 2, MS, 100_000)
    # 2: 150 µs late; 3: 0.9 ms late (still interval 3); then a stall: the next sample 2.5 periods on (interval 6)
    feed(asm, 0, [1, 2, 3], anchor=0, lat=[0, 150_000, 900_000])
    asm.add(0, np.array([6 * MS + 500_000]), np.array([6 * MS + 500_000]), np.array([6 * MS + 500_000]),
            np.zeros((1, 2), dtype=np.uint64))
    rows = asm.take()
    assert rows.k.tolist() == [1, 2, 3, 6] and rows.skipped.tolist() == [0, 0, 0, 2]
    assert rows.late[:, 0].tolist() == [False, True, True, True]
    asm = kt.TimerAssembler(1, 2, MS, 100_000)
    feed(asm, 0, [1, 2, 4], anchor=0)  # on its grid, but interval 3 has no sample
    assert asm.take().late[:, 0].tolist() == [False, False, True]


def test_assembler_keeps_intervals_strictly_increasing():
    # the anchor is estimated from the first sample; a later sample that would
    # round onto its predecessor's interval takes the next one
    asm = kt.TimerAssembler(1, 2, MS, 100_000)
    t = np.array([MS, 2 * MS - 200_000, 2 * MS + 700_000], dtype=np.int64)
    asm.add(0, t, t, t, np.zeros((3, 2), dtype=np.uint64))
    assert asm.take().k.tolist() == [1, 2, 3]


def test_assembler_ends_at_the_last_interval():
    asm = kt.TimerAssembler(2, 2, MS, 100_000, last=4)
    feed(asm, 0, [1, 2, 3, 4, 5, 6], anchor=0)
    feed(asm, 1, [1, 2, 3], anchor=0)
    assert asm.take().k.tolist() == [1, 2, 3] and not asm.ended
    feed(asm, 1, [4, 5], anchor=0)
    rows = asm.take()
    assert rows.k.tolist() == [4] and asm.done and asm.take() is None


def test_assembler_clips_a_last_row_past_the_end():
    asm = kt.TimerAssembler(2, 2, MS, 100_000, last=4)
    feed(asm, 0, [1, 2, 3, 4, 5], anchor=0)
    feed(asm, 1, [1, 2, 3, 5], anchor=0)  # CPU 1 missed interval 4
    rows = asm.take()
    # the run covers deadlines 1..4: the row past the gap is the last one, counted as interval 4
    assert rows.k.tolist() == [1, 2, 3, 4] and rows.skipped.tolist() == [0, 0, 0, 0]
    assert rows.late[-1].all() and rows.values[-1, 1].tolist() == [5, 50]
    assert asm.done


def test_assembler_finish_at_stop():
    asm = kt.TimerAssembler(2, 2, MS, 100_000)
    feed(asm, 0, [1, 2, 3], anchor=0)
    feed(asm, 1, [1, 2], anchor=0)
    rows = asm.finish()
    assert rows.k.tolist() == [1, 2] and asm.done and asm.take() is None


# --------------------------------------------------------------------------- the attrs and the mode


def test_leader_and_member_attrs():
    a = kt.leader_attr(MS, wakeup_bytes=32768)
    assert (a.type, a.config) == (abi.PERF_TYPE_SOFTWARE, abi.PERF_COUNT_SW_CPU_CLOCK)
    assert a.sample_period == MS and a.freq == 0
    assert a.sample_type == abi.PERF_SAMPLE_TIME | abi.PERF_SAMPLE_READ
    assert a.read_format == (abi.PERF_FORMAT_GROUP | abi.PERF_FORMAT_TOTAL_TIME_ENABLED
                             | abi.PERF_FORMAT_TOTAL_TIME_RUNNING | abi.PERF_FORMAT_ID)
    assert (a.disabled, a.pinned, a.use_clockid, a.clockid, a.sample_id_all) == (1, 0, 1, 1, 1)
    assert (a.watermark, a.wakeup_watermark) == (1, 32768)
    # the leader samples idle, user and kernel time alike: the timer must fire on every CPU state
    assert (a.exclude_idle, a.exclude_user, a.exclude_kernel, a.inherit) == (0, 0, 0, 0)
    assert kt.leader_attr(MS, pinned=True).pinned == 1
    with pytest.raises(PmuscopeError, match="10000 ns"):
        kt.leader_attr(5000)
    spec_attr = abi.perf_event_attr(type=abi.PERF_TYPE_HARDWARE, config=0, exclude_guest=1, disabled=1, inherit=1,
                                    sample_period=4000)
    m = kt.member_attr(spec_attr)
    assert (m.type, m.config, m.exclude_guest) == (0, 0, 1)
    assert (m.disabled, m.inherit, m.sample_period, m.sample_type, m.pinned) == (0, 0, 0, 0, 0)
    assert m.read_format == a.read_format and (m.use_clockid, m.clockid) == (1, 1)
    assert spec_attr.disabled == 1  # a copy


def test_ring_pages_hold_four_drains():
    assert kt.ring_pages(MS, 4, 250 * MS) == 32  # 250 samples of 120 bytes, 4 times: 120 KB
    assert kt.ring_pages(100_000, 4, 250 * MS) == 512  # 10 kHz: 1.2 MB
    assert kt.ring_pages(10_000, 60, 1000 * MS) == 512  # capped


def _specs(*types):
    return [EventSpec(name=f"e{i}", attr=abi.perf_event_attr(type=t, config=0)) for i, t in enumerate(types)]


def test_choose_timer_auto_is_the_user_loop_unless_enabled():
    kw = dict(per_thread=False, interval_ns=MS, loop=None, core_type=4, rate_limit=100_000)
    mode, why = kt.choose_timer("auto", specs=_specs(1, 1), **kw)
    assert mode == "user" and "--timer kernel" in why
    assert kt.choose_timer("kernel", specs=_specs(1, 1), **kw)[0] == "kernel"


def test_choose_timer(monkeypatch):
    monkeypatch.setattr(kt, "AUTO_KERNEL", True)
    sw = _specs(1, 1, 2)
    kw = dict(per_thread=False, interval_ns=MS, loop=None, core_type=4, rate_limit=100_000)
    assert kt.choose_timer("auto", specs=sw, **kw)[0] == "kernel"
    assert kt.choose_timer(None, specs=sw, **kw)[0] == "kernel"
    assert kt.choose_timer("user", specs=sw, **kw)[0] == "user"
    assert kt.choose_timer("auto", specs=sw, **dict(kw, interval_ns=10 * MS)) == (
        "user", "the interval is over 5 ms (one wake-up per interval costs little there)")
    assert kt.choose_timer("kernel", specs=sw, **dict(kw, interval_ns=10 * MS))[0] == "kernel"
    mode, why = kt.choose_timer("auto", specs=sw, **dict(kw, per_thread=True))
    assert mode == "user" and "-p" in why
    with pytest.raises(PmuscopeError, match="-p"):
        kt.choose_timer("kernel", specs=sw, **dict(kw, per_thread=True))
    assert kt.choose_timer("auto", specs=sw, **dict(kw, loop="python"))[0] == "user"
    assert kt.choose_timer("auto", specs=sw, grouped=False, **kw)[0] == "user"
    # hardware members: never by auto, pinned when asked for
    hw = _specs(1, 0, 4)
    mode, why = kt.choose_timer("auto", specs=hw, **kw)
    assert mode == "user" and "hardware" in why
    assert kt.choose_timer("kernel", specs=hw, **kw)[0] == "kernel"
    # another PMU (power, uncore) cannot join
    with pytest.raises(PmuscopeError, match="not a CPU PMU"):
        kt.choose_timer("kernel", specs=_specs(1, 23), **kw)
    # the kernel's sample-rate limit: auto keeps a factor of 2
    assert kt.choose_timer("auto", specs=sw, **dict(kw, rate_limit=1500))[0] == "user"
    assert kt.choose_timer("kernel", specs=sw, **dict(kw, rate_limit=1500))[0] == "kernel"
    with pytest.raises(PmuscopeError, match="perf_event_max_sample_rate"):
        kt.choose_timer("kernel", specs=sw, **dict(kw, rate_limit=500))
    with pytest.raises(PmuscopeError, match="auto"):
        kt.choose_timer("fast", specs=sw, **kw)


def test_monitor_opens_a_pinned_leader_for_hardware_members(monkeypatch, data_dir):
    """The attrs the kernel timer asks for, per CPU (the oracle: what the code
    requests), without a PMU: perf_event_open, the ring and the id ioctl are stand-ins."""
    import os

    from pmuscope.kernel import ring as ring_mod
    from pmuscope.kernel import syscall as sc

    opened = []

    def fake_open(attr, pid, cpu, group_fd, flags):
        fd = os.open(os.devnull, os.O_RDONLY)
        opened.append((attr.copy(), pid, cpu, group_fd, fd))
        return fd

    class FakeRing:
        def __init__(self, fd, pages, track_lost):
            self.fd, self.pages = fd, pages

        def close(self):
            pass

    monkeypatch.setattr(sc, "_open_hook", fake_open)
    monkeypatch.setattr(ring_mod, "RingBuffer", FakeRing)
    monkeypatch.setattr(sc.PerfEventFd, "id", lambda self: 1000 + self.fd)
    d = data_dir / "dvfs"
    mon = mm.Monitor("cycles,task-clock", cpus=[0, 1], interval_ms=1, timer="kernel", power=False, context=False,
                     sysfs=str(d / "sys"), procfs=str(d / "proc0"))
    mon.open()
    try:
        assert mon.timer == "kernel" and mon.loop == "kernel"
        assert [(pid, cpu) for _a, pid, cpu, _g, _fd in opened] == [(-1, 0)] * 3 + [(-1, 1)] * 3
        for c in range(2):
            (lead, _, _, g0, lfd), *members = opened[3 * c: 3 * c + 3]
            assert g0 == -1 and lead.pinned == 1 and lead.config == abi.PERF_COUNT_SW_CPU_CLOCK
            assert lead.sample_period == MS and lead.sample_type == kt.SAMPLE_TYPE
            assert [(a.type, a.config) for a, *_ in members] == [(0, 0), (1, 1)]
            assert all(g == lfd and a.pinned == 0 and a.read_format == kt.READ_FORMAT for a, _, _, g, _ in members)
        assert mon._timer_ids[0] == [1000 + fd for *_, fd in opened[:3]]
        assert mon._rec_words == 2 * 5
    finally:
        mon.close()


def test_build_batch_with_per_cpu_late_flags(data_dir):
    d = data_dir / "dvfs"
    mon = mm.Monitor("task-clock", cpus=[0, 1], interval_ms=1, context=False, power=False,
                     sysfs=str(d / "sys"), procfs=str(d / "proc0"))
    mon._slots = [mm._Slot(None, 0, [0], 0, 4), mm._Slot(None, 1, [0], 4, 4)]
    mon._rec_words = 8
    buf = struct.pack("=8Q", 1, MS, MS, 900_000, 1, MS, MS, 800_000)
    chunk = mm._Chunk(bytearray(buf))
    chunk.n, chunk.ts = 1, np.array([MS], dtype=np.int64)
    chunk.late, chunk.skipped = np.array([True]), np.zeros(1, dtype=np.int32)
    chunk.late_e = np.array([[False, True]])
    out, *_ = mon._build_batch(chunk, np.zeros(8, dtype=np.uint64), 0, None)
    assert out["late"].tolist() == [False, True] and out["task-clock"].tolist() == [900_000, 800_000]


def test_assembler_reanchors_a_restarted_timer():
    # CPU 0's timer is restarted 0.4 ms off its grid after interval 3 (an unthrottle): its samples are not
    # all late from then on; the first one ends the interval it falls in
    asm = kt.TimerAssembler(2, 2, MS, 100_000)
    feed(asm, 0, [1, 2, 3], anchor=0)
    feed(asm, 1, [1, 2, 3, 4, 5, 6, 7], anchor=0)
    asm.take()
    asm.reanchor(0)
    t = np.array([5 * MS + 400_000, 6 * MS + 400_000, 7 * MS + 400_000], dtype=np.int64)
    asm.add(0, t, t, t, np.zeros((3, 2), dtype=np.uint64))
    rows = asm.take()
    assert rows.k.tolist() == [5, 6, 7] and rows.skipped.tolist() == [1, 0, 0]
    assert rows.late.tolist() == [[True, True], [False, False], [False, False]]
    assert asm.last_time[0] == 7 * MS + 400_000
    # without the re-anchoring every later sample would be 0.4 ms late
    asm = kt.TimerAssembler(1, 2, MS, 100_000)
    feed(asm, 0, [1, 2, 3], anchor=0)
    asm.add(0, t, t, t, np.zeros((3, 2), dtype=np.uint64))
    assert asm.take().late[:, 0].tolist() == [False, False, False, True, True, True]
