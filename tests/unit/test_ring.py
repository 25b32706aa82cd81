"""The ring-buffer protocol against a bytearray standing in for the mmap, with a
fake kernel writer that follows perf_output_begin/end (forward) and
write_backward (backward) rules."""

from __future__ import annotations

import struct

import pytest

from pmuscope.errors import FormatError, PmuscopeError
from pmuscope.kernel import abi
from pmuscope.kernel.ring import RingBuffer
from pmuscope.records import AttrTable, Lost, SampleBatch, decode

S = abi.PerfSample
PAGE = 4096
HEAD, TAIL, DOFF, DSIZE, AHEAD, ATAIL, AOFF, ASIZE = (1024 + 8 * i for i in range(8))
M64 = (1 << 64) - 1


def make_mem(pages: int = 1, *, fill_offsets: bool = True) -> bytearray:
    mem = bytearray(PAGE * (1 + pages))
    if fill_offsets:
        struct.pack_into("<QQ", mem, DOFF, PAGE, PAGE * pages)
    return mem


class FakeKernel:
    """Writes records the way the kernel does: at data_head, wrapping, only
    when the reader released the space (else counts a lost record)."""

    def __init__(self, mem: bytearray, backward: bool = False) -> None:
        self.mem = mem
        self.size = struct.unpack_from("<Q", mem, DSIZE)[0] or len(mem) - PAGE
        self.backward = backward
        self.lost = 0

    def head(self) -> int:
        return struct.unpack_from("<Q", self.mem, HEAD)[0]

    def _put(self, pos: int, data: bytes) -> None:
        start = pos % self.size
        first = min(len(data), self.size - start)
        self.mem[PAGE + start : PAGE + start + first] = data[:first]
        self.mem[PAGE : PAGE + len(data) - first] = data[first:]

    def write(self, record: bytes) -> bool:
        head = self.head()
        if self.backward:
            head = (head - len(record)) & M64
            self._put(head, record)
            struct.pack_into("<Q", self.mem, HEAD, head)
            return True
        tail = struct.unpack_from("<Q", self.mem, TAIL)[0]
        if self.lost:
            lost = struct.pack("<IHH", abi.PERF_RECORD_LOST, 0, 24) + struct.pack("<QQ", 1, self.lost)
            if head + len(lost) - tail > self.size:
                self.lost += 1
                return False
            self._put(head, lost)
            head += len(lost)
            self.lost = 0
        if head + len(record) - tail > self.size:
            self.lost += 1
            struct.pack_into("<Q", self.mem, HEAD, head)
            return False
        self._put(head, record)
        struct.pack_into("<Q", self.mem, HEAD, head + len(record))
        return True


ATTR = abi.perf_event_attr(sample_type=S.IP | S.TID | S.TIME | S.PERIOD | S.CALLCHAIN)
TABLE = AttrTable([(ATTR, [])])


def sample(k: int, depth: int = 3) -> bytes:
    body = struct.pack("<QIIQQQ", 0x1000 + k, 7, 7, k, 1, depth) + struct.pack(f"<{depth}Q", *range(k, k + depth))
    return struct.pack("<IHH", abi.PERF_RECORD_SAMPLE, abi.PERF_RECORD_MISC_USER, 8 + len(body)) + body


def decoded_ips(chunk: bytes) -> list[int]:
    return [int(x) for it in decode(chunk, TABLE) if isinstance(it, SampleBatch) for x in it.ip]


def test_read_records_follows_head_and_releases_tail():
    mem = make_mem(1)
    k = FakeKernel(mem)
    ring = RingBuffer.from_memory(mem, PAGE)
    assert ring.read_records() == b""
    for i in range(5):
        assert k.write(sample(i))
    chunk = ring.read_records()
    assert decoded_ips(chunk) == [0x1000 + i for i in range(5)]
    assert ring.data_tail == ring.data_head == len(chunk) == 5 * len(sample(0))
    assert ring.read_records() == b""


def test_records_wrapping_the_end_are_joined():
    mem = make_mem(1)
    k = FakeKernel(mem)
    ring = RingBuffer.from_memory(mem, PAGE)
    rec_size = len(sample(0))  # 72 bytes: 4096 is not a multiple, records will straddle the end
    got: list[int] = []
    straddled = 0
    for i in range(400):
        head = k.head()
        if head % PAGE + rec_size > PAGE:
            straddled += 1
        assert k.write(sample(i)), "reader keeps up, nothing is lost"
        if i % 7 == 6:
            got += decoded_ips(ring.read_records())
    got += decoded_ips(ring.read_records())
    assert straddled >= 5
    assert got == [0x1000 + i for i in range(400)]
    assert ring.data_head > 6 * PAGE


@pytest.mark.parametrize("numpy_loaded", [True, False], ids=["numpy", "no-numpy"])
def test_full_ring_makes_kernel_emit_lost_which_is_counted(numpy_loaded, monkeypatch):
    # the LOST scan uses numpy's pre-check only when numpy is already imported: a ring read never
    # imports it (on_overflow's dispatcher thread would wait on the import)
    import sys

    if not numpy_loaded:
        monkeypatch.delitem(sys.modules, "numpy", raising=False)
    mem = make_mem(1)
    k = FakeKernel(mem)
    ring = RingBuffer.from_memory(mem, PAGE)
    written = sum(k.write(sample(i)) for i in range(100))
    assert written < 100
    first = ring.read_records()
    assert len(decoded_ips(first)) == written
    assert k.write(sample(1000))  # emits the pending LOST first, then the sample
    chunk = ring.read_records()
    items = list(decode(first, TABLE)) + list(decode(chunk, TABLE))
    lost = [i for i in items if isinstance(i, Lost)]
    assert lost and sum(i.lost for i in lost) == 100 - written
    assert ring.lost == 100 - written
    assert decoded_ips(chunk) == [0x1000 + 1000]


def test_max_bytes_cuts_at_record_boundary():
    mem = make_mem(1)
    k = FakeKernel(mem)
    ring = RingBuffer.from_memory(mem, PAGE)
    for i in range(10):
        k.write(sample(i))
    size = len(sample(0))
    part = ring.read_records(max_bytes=3 * size + 5)
    assert len(part) == 3 * size and decoded_ips(part) == [0x1000, 0x1001, 0x1002]
    assert decoded_ips(ring.read_records()) == [0x1000 + i for i in range(3, 10)]
    k.write(sample(11))
    with pytest.raises(PmuscopeError, match="smaller than the next record"):
        ring.read_records(max_bytes=8)


def test_corrupt_head_is_reported_not_looped():
    mem = make_mem(1)
    ring = RingBuffer.from_memory(mem, PAGE)
    struct.pack_into("<Q", mem, HEAD, 3 * PAGE)
    with pytest.raises(FormatError, match="more than its 4096-byte size"):
        ring.read_records()


def test_old_kernel_without_data_offset_fields():
    mem = make_mem(2, fill_offsets=False)
    ring = RingBuffer.from_memory(mem, PAGE)
    assert ring.data_offset == PAGE and ring.data_size == 2 * PAGE


def test_backward_overwrite_snapshot_returns_newest_whole_records_oldest_first():
    mem = make_mem(1)
    k = FakeKernel(mem, backward=True)
    ring = RingBuffer.from_memory(mem, PAGE, overwrite=True)
    for i in range(3):
        k.write(sample(i))
    assert decoded_ips(ring.snapshot()) == [0x1000, 0x1001, 0x1002]
    for i in range(3, 200):  # overwrite the buffer many times over
        k.write(sample(i))
    snap = ring.snapshot()
    ips = decoded_ips(snap)
    fit = PAGE // len(sample(0))
    assert ips == [0x1000 + i for i in range(200 - len(ips), 200)]
    assert fit - 1 <= len(ips) <= fit
    with pytest.raises(PmuscopeError, match="snapshot"):
        ring.read_records()


def test_aux_area_read_with_wrap():
    mem = make_mem(1)
    ring = RingBuffer.from_memory(mem, PAGE)
    aux = bytearray(PAGE)
    ring.attach_aux_memory(aux)
    assert struct.unpack_from("<QQ", mem, AOFF) == (2 * PAGE, PAGE)
    aux[:] = bytes(i % 251 for i in range(PAGE))
    struct.pack_into("<Q", mem, AHEAD, 3000)
    assert ring.read_aux() == bytes(aux[:3000])
    assert struct.unpack_from("<Q", mem, ATAIL)[0] == 3000
    struct.pack_into("<Q", mem, AHEAD, 3000 + 2000)  # wraps the end of the AUX area
    assert ring.read_aux() == bytes(aux[3000:]) + bytes(aux[: 2000 - (PAGE - 3000)])
    assert ring.read_aux() == b""


def test_pages_must_be_power_of_two():
    mem = make_mem(1)
    struct.pack_into("<Q", mem, DSIZE, 3000)
    with pytest.raises(FormatError, match="power of two"):
        RingBuffer.from_memory(mem, PAGE)
