"""``Plain``: the base of small value classes written out by hand instead of
``@dataclass``.

why: creating a dataclass costs 0.2-0.4 ms at import (it generates and compiles
``__init__``, ``__repr__`` and ``__eq__``, and ``slots=True`` builds the class a
second time); the ~70 a ``report`` of a small file imported were 20-25 ms of
its start-up. A hand-written ``__init__`` is compiled once into the bytecode
cache; this base gives the rest the way a dataclass does: ``repr`` lists the
fields of ``_fields`` in order (``Name(a=1, b=2)``), ``==`` compares them when
both objects have the same class, and such objects are unhashable (mutable).
"""

from __future__ import annotations


class Plain:
    __slots__ = ()
    #: the fields in declaration order (a subclass's after its base's)
    _fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}(" + ", ".join(
            f"{f}={getattr(self, f)!r}" for f in self._fields) + ")"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, f) for f in self._fields) == tuple(getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]
