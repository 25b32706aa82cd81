"""Real ring buffers on software events and a tracepoint (no hardware PMU needed)."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import numpy as np
import pytest

from pmuscope.errors import PmuscopeError
from pmuscope.kernel import PerfEventFd, abi
from pmuscope.kernel.ring import RingBuffer, poll_rings
from pmuscope.records import AttrTable, DecodeStats, Lost, SampleBatch, Switch, decode

S = abi.PerfSample


def busy(seconds: float) -> int:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def cpu_clock(period_ns: int = 200_000, sample_type: int = S.IP | S.TID | S.TIME | S.PERIOD, **kw) -> abi.perf_event_attr:
    return abi.perf_event_attr(
        type=abi.PERF_TYPE_SOFTWARE,
        config=abi.PerfSwId.CPU_CLOCK,
        sample_period=period_ns,
        sample_type=sample_type,
        disabled=1,
        exclude_kernel=1,
        exclude_hv=1,
        sample_id_all=1,
        **kw,
    )


def drain(ring: RingBuffer, table: AttrTable, stats: DecodeStats | None = None) -> list:
    stats = stats if stats is not None else DecodeStats()
    out = []
    for chunk in ring.chunks():
        out += list(decode(chunk, table, stats=stats))
    return out


def samples_of(items) -> SampleBatch | None:
    parts = [i for i in items if isinstance(i, SampleBatch)]
    return SampleBatch.concat(parts) if parts else None


def test_cpu_clock_samples_of_this_process_with_callchain_and_wakeups():
    attr = cpu_clock(sample_type=S.IP | S.TID | S.TIME | S.PERIOD | S.CALLCHAIN | S.CPU, wakeup_events=4)
    with PerfEventFd(attr, pid=0, cpu=-1, event="cpu-clock") as fd:
        ring = RingBuffer(fd, pages=64)
        table = AttrTable([(attr, [fd.id()])], ["cpu-clock"])
        fd.enable()
        busy(0.05)
        woke = ring.poll(timeout=2.0)  # at least wakeup_events samples were written by now
        busy(0.25)
        fd.disable()
        items = drain(ring, table)
        ring.close()
    assert woke & select.POLLIN and ring.wakeups >= 1
    b = samples_of(items)
    assert b is not None and len(b) >= 100, f"only {0 if b is None else len(b)} samples in 0.3 s at 5 kHz"
    assert (b.pid == os.getpid()).all()
    assert (np.diff(b.time.astype(np.int64)) >= 0).all(), "time must not go backwards within one ring"
    assert (b.period > 0).all() and (b.cpu >= 0).all() and (b.cpu < os.cpu_count()).all()
    assert (b.cpumode == abi.PERF_RECORD_MISC_USER).all()
    depth = np.diff(b.callchain_offsets)
    assert (depth >= 2).all()  # PERF_CONTEXT_USER marker + at least the sampled ip
    first = b.callchain[b.callchain_offsets[:-1]]
    assert (first == abi.PERF_CONTEXT_USER).all()
    assert (b.callchain[b.callchain_offsets[:-1] + 1] == b.ip).all()


def test_context_switch_records_on_a_dummy_event():
    attr = abi.perf_event_attr(
        type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.DUMMY, sample_type=S.TID | S.TIME,
        sample_id_all=1, context_switch=1, disabled=1, exclude_kernel=1,
    )
    with PerfEventFd(attr, pid=0, cpu=-1, event="dummy") as fd:
        ring = RingBuffer(fd, pages=8)
        fd.enable()
        for _ in range(5):
            time.sleep(0.002)
        fd.disable()
        items = drain(ring, AttrTable([(attr, [])]))
        ring.close()
    switches = [i for i in items if isinstance(i, Switch)]
    assert sum(s.out for s in switches) >= 5 and sum(not s.out for s in switches) >= 5
    assert all(s.sample_id.pid == os.getpid() for s in switches)
    times = [s.time for s in switches]
    assert times == sorted(times)


def _tracepoint_id(name: str) -> int | None:
    from pmuscope.events.tracepoints import find_tracefs

    find_tracefs()  # mounts tracefs as perf does where it is not mounted yet
    for base in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        p = Path(base) / "events" / name / "id"
        try:
            return int(p.read_text())
        except OSError:
            continue
    return None


def test_tracepoint_raw_payload():
    tp = _tracepoint_id("sched/sched_switch")
    if tp is None:
        pytest.skip("sched:sched_switch is not readable in tracefs here")
    attr = abi.perf_event_attr(
        type=abi.PERF_TYPE_TRACEPOINT, config=tp, sample_period=1,
        sample_type=S.IP | S.TID | S.TIME | S.RAW, sample_id_all=1, disabled=1,
    )
    try:
        fd = PerfEventFd(attr, pid=0, cpu=-1, event="sched:sched_switch")
    except PmuscopeError as err:
        pytest.skip(f"tracepoints cannot be opened here: {err}")
    with fd:
        ring = RingBuffer(fd, pages=8)
        fd.enable()
        for _ in range(5):
            time.sleep(0.002)
        fd.disable()
        b = samples_of(drain(ring, AttrTable([(attr, [])])))
        ring.close()
    assert b is not None and len(b) >= 5
    assert (b.pid == os.getpid()).all()
    for i in range(len(b)):
        raw = b.raw_of(i)
        # struct trace_entry: u16 common_type is the tracepoint id
        assert int.from_bytes(raw[:2], "little") == tp
        assert len(raw) % 8 == 4  # the kernel pads so u32 size + data is 8-aligned


def test_tiny_buffer_overflow_produces_counted_lost_records():
    attr = cpu_clock(period_ns=50_000, sample_type=S.IP | S.TID | S.TIME | S.CALLCHAIN)
    stats = DecodeStats()
    with PerfEventFd(attr, pid=0, cpu=-1, event="cpu-clock") as fd:
        ring = RingBuffer(fd, pages=1)
        table = AttrTable([(attr, [fd.id()])])
        fd.enable()
        busy(0.3)  # ~6000 samples into a 4 KiB buffer nobody reads
        items = drain(ring, table, stats)
        busy(0.05)  # the kernel writes the LOST record once there is room again
        fd.disable()
        items += drain(ring, table, stats)
        ring.close()
    lost = [i for i in items if isinstance(i, Lost)]
    assert lost and stats.lost > 100
    assert ring.lost == stats.lost
    assert lost[0].id == table[0].ids[0]


def test_set_output_two_events_share_one_ring():
    a1 = cpu_clock(period_ns=200_000, sample_type=S.IDENTIFIER | S.IP | S.TID | S.TIME, wakeup_events=1)
    a2 = abi.perf_event_attr(
        type=abi.PERF_TYPE_SOFTWARE, config=abi.PerfSwId.TASK_CLOCK, sample_period=300_000,
        sample_type=S.IDENTIFIER | S.IP | S.TID | S.TIME, disabled=1, exclude_kernel=1, exclude_hv=1, sample_id_all=1,
    )
    with PerfEventFd(a1, pid=0, cpu=-1, event="cpu-clock") as f1, PerfEventFd(a2, pid=0, cpu=-1, event="task-clock") as f2:
        ring = RingBuffer(f1, pages=32)
        ring.add(f2)
        id1, id2 = f1.id(), f2.id()
        table = AttrTable([(a1, [id1]), (a2, [id2])], ["cpu-clock", "task-clock"])
        assert sorted(ring.ids()) == sorted([id1, id2])
        f1.enable()
        f2.enable()
        busy(0.2)
        f1.disable()
        f2.disable()
        assert ring in poll_rings([ring], timeout=0)
        stats = DecodeStats()
        b = samples_of(drain(ring, table, stats))
        ring.close()
    assert stats.unknown_id == 0
    n1, n2 = int((b.attr_index == 0).sum()), int((b.attr_index == 1).sum())
    assert n1 >= 50 and n2 >= 30, (n1, n2)
    assert set(b.id[b.attr_index == 0].tolist()) == {id1}
    assert set(b.id[b.attr_index == 1].tolist()) == {id2}


def test_backward_overwrite_snapshot():
    attr = cpu_clock(period_ns=100_000, sample_type=S.IP | S.TID | S.TIME, write_backward=1)
    with PerfEventFd(attr, pid=0, cpu=-1, event="cpu-clock") as fd:
        ring = RingBuffer(fd, pages=1, overwrite=True)
        fd.enable()
        busy(0.3)  # overwrites the 4 KiB buffer many times
        snap = ring.snapshot()
        fd.disable()
        ring.close()
    b = samples_of(list(decode(snap, AttrTable([(attr, [])]))))
    assert b is not None and len(b) >= 50  # ~4096 / 40-byte records, minus a partial one
    assert (np.diff(b.time.astype(np.int64)) > 0).all(), "oldest first"
    assert (b.pid == os.getpid()).all()


def test_aux_area_on_an_event_without_aux_is_a_clear_error():
    attr = cpu_clock()
    with PerfEventFd(attr, pid=0, cpu=-1, event="cpu-clock") as fd:
        with pytest.raises(PmuscopeError, match="AUX area"):
            RingBuffer(fd, pages=4, aux_pages=4)


def test_wakeup_watermark_poll():
    attr = cpu_clock(period_ns=100_000, watermark=1, wakeup_watermark=8192)
    with PerfEventFd(attr, pid=0, cpu=-1, event="cpu-clock") as fd:
        ring = RingBuffer(fd, pages=16)
        assert ring.poll(timeout=0) == 0  # nothing written yet
        fd.enable()
        busy(0.01)  # ~100 samples x 40 bytes: below the 8 KiB watermark
        early = ring.poll(timeout=0)
        written_early = ring.available()
        busy(0.3)
        late = ring.poll(timeout=2.0)
        fd.disable()
        avail = ring.available()
        ring.close()
    assert written_early < 8192 and not early & select.POLLIN
    assert late & select.POLLIN and avail >= 8192
