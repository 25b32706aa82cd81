"""The attrs a record stream was produced with, and how to tell their samples apart.

perf's rules (``tools/perf/util/evsel.c`` ``__evsel__calc_id_pos`` /
``__evsel__calc_is_pos``, ``evlist.c`` ``evlist__valid_sample_type``): a SAMPLE
record carries its event id at word ``id_pos`` after the header, a side-band
record with ``sample_id_all`` carries it ``is_pos`` words before its end; when
there is more than one attr, every attr must agree on both positions.
"""

from __future__ import annotations

from types import SimpleNamespace

from typing import Iterable, Sequence

from typing import TYPE_CHECKING

from .._plain import Plain
from .. import errors
from ..kernel import abi

if TYPE_CHECKING:
    import numpy as np

S = SimpleNamespace(**{m.name: int(m) for m in abi.PerfSample})  # plain ints: IntFlag ops are slow

#: sample_type bits that make up the sample_id trailer of side-band records
SAMPLE_ID_BITS = S.TID | S.TIME | S.ID | S.STREAM_ID | S.CPU | S.IDENTIFIER


def id_pos(sample_type: int) -> int:
    """Word index (after the header) of the id in a SAMPLE record, or -1."""
    if sample_type & S.IDENTIFIER:
        return 0
    if not sample_type & S.ID:
        return -1
    return sum(1 for bit in (S.IP, S.TID, S.TIME, S.ADDR) if sample_type & bit)


def is_pos(sample_type: int) -> int:
    """Words from the end of a side-band record to its sample_id id, or -1."""
    if sample_type & S.IDENTIFIER:
        return 1
    if not sample_type & S.ID:
        return -1
    return 1 + sum(1 for bit in (S.CPU, S.STREAM_ID) if sample_type & bit)


def sample_id_size(sample_type: int) -> int:
    """Bytes of the sample_id trailer for this sample_type."""
    return 8 * bin(int(sample_type) & int(SAMPLE_ID_BITS)).count("1")


class AttrEntry(Plain):
    """One event of the stream: its attr, the ids its fds got, a display name."""

    _fields = ("index", "attr", "ids", "name")

    index: int
    attr: abi.perf_event_attr
    ids: list[int]
    name: str | None

    def __init__(
        self,
        index: int,
        attr: abi.perf_event_attr,
        ids: list[int] | None = None,
        name: str | None = None,
    ) -> None:
        self.index = index
        self.attr = attr
        self.ids = [] if ids is None else ids
        self.name = name
        self.__post_init__()

    def __post_init__(self) -> None:
        a = self.attr
        self.sample_type = int(a.sample_type)
        self.read_format = int(a.read_format)
        self.branch_sample_type = int(a.branch_sample_type)
        self.sample_id_all = bool(a.sample_id_all)
        self.regs_user_count = bin(int(a.sample_regs_user)).count("1")
        self.regs_intr_count = bin(int(a.sample_regs_intr)).count("1")
        self.id_pos = id_pos(self.sample_type)
        self.is_pos = is_pos(self.sample_type)
        self.trailer_size = sample_id_size(self.sample_type) if self.sample_id_all else 0
        if self.name is None:
            self.name = f"type={a.type},config={int(a.config):#x}"

    @property
    def has_hw_index(self) -> bool:
        return bool(self.sample_type & S.BRANCH_STACK and self.branch_sample_type & abi.PERF_SAMPLE_BRANCH_HW_INDEX)

    @property
    def has_branch_counters(self) -> bool:
        return bool(self.sample_type & S.BRANCH_STACK and self.branch_sample_type & abi.PERF_SAMPLE_BRANCH_COUNTERS)


class AttrTable:
    """The attrs of a record stream, built from ``[(perf_event_attr, [ids]), ...]``
    and optional event names (one per attr).

    With one attr every record belongs to it. With several, samples are told
    apart by their id, which must then sit at the same position for all attrs
    (perf requires the same; otherwise :class:`~pmuscope.errors.FormatError`).
    """

    def __init__(
        self,
        entries: Iterable[tuple[abi.perf_event_attr, Sequence[int]]],
        names: Sequence[str | None] | None = None,
    ) -> None:
        pairs = list(entries)
        if not pairs:
            raise errors.FormatError("an AttrTable needs at least one perf_event_attr")
        names = list(names) if names is not None else [None] * len(pairs)
        if len(names) != len(pairs):
            raise errors.FormatError(f"{len(names)} event names given for {len(pairs)} attrs")
        self.entries = [AttrEntry(i, attr, [int(x) for x in ids], name) for i, ((attr, ids), name) in enumerate(zip(pairs, names))]
        self.by_id: dict[int, int] = {}
        for e in self.entries:
            for i in e.ids:
                self.by_id[i] = e.index
        first = self.entries[0]
        self.id_pos = first.id_pos
        self.is_pos = first.is_pos
        self.sample_id_all = first.sample_id_all
        if len(self.entries) > 1:
            for e in self.entries[1:]:
                if e.id_pos != self.id_pos or (e.sample_id_all and self.sample_id_all and e.is_pos != self.is_pos):
                    raise errors.FormatError(
                        f"attrs {first.name!r} and {e.name!r} put the sample id at different positions "
                        f"(sample_type {first.sample_type:#x} vs {e.sample_type:#x}); "
                        "several events in one stream need PERF_SAMPLE_IDENTIFIER (or the same ID layout)"
                    )
            if self.id_pos < 0:
                raise errors.FormatError(
                    "several attrs but no PERF_SAMPLE_ID/IDENTIFIER in sample_type: samples cannot be told apart"
                )
        self._sorted: tuple | None = None  # (ids, attr indexes) sorted by id, made on first use

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> AttrEntry:
        return self.entries[index]

    def __iter__(self):
        return iter(self.entries)

    @property
    def single(self) -> bool:
        return len(self.entries) == 1

    def index_of_id(self, sample_id: int) -> int:
        """The entry index for an event id, or -1 if none has it (one attr: 0)."""
        if len(self.entries) == 1:
            return 0
        return self.by_id.get(sample_id, -1)

    def indices_of_ids(self, ids: np.ndarray) -> np.ndarray:
        """Vectorized :meth:`index_of_id`: int32 array, -1 for unknown ids."""
        import numpy as np  # this module is also read on numpy-free paths (the perf.data reader)

        if len(self.entries) == 1:
            return np.zeros(len(ids), dtype=np.int32)
        if self._sorted is None:
            sid = np.fromiter(self.by_id.keys(), dtype=np.uint64, count=len(self.by_id))
            idx = np.fromiter(self.by_id.values(), dtype=np.int32, count=len(self.by_id))
            order = np.argsort(sid, kind="stable")
            self._sorted = (sid[order], idx[order])
        sorted_ids, sorted_idx = self._sorted
        if not len(sorted_ids):
            return np.full(len(ids), -1, dtype=np.int32)
        pos = np.searchsorted(sorted_ids, ids)
        pos = np.minimum(pos, len(sorted_ids) - 1)
        hit = sorted_ids[pos] == ids
        return np.where(hit, sorted_idx[pos], -1).astype(np.int32)

    @classmethod
    def single_attr(cls, attr: abi.perf_event_attr, name: str | None = None, ids: Sequence[int] = ()) -> "AttrTable":
        return cls([(attr, list(ids))], [name])

    def __repr__(self) -> str:
        return f"AttrTable({[(e.name, e.ids) for e in self.entries]})"
