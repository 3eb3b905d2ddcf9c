"""What every backend shares: the encoding context relations write to, and the solver interface sessions use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..relations import Literal, Term, compare
from ..schema import Field

if TYPE_CHECKING:
    from ..spec import Spec

Fixed = Mapping[str, int]  # field path -> value index
Excluded = Mapping[str, Sequence[int]]  # field path -> value indices ruled out for this solve


class Context(ABC):
    """The operations a relation encodes itself with. Each backend implements them; ``when`` and ``add_any`` give
    sub-contexts whose constraints hold only under a condition (enforcement)."""

    fields: Mapping[str, Field]

    @abstractmethod
    def add_linear(self, terms: Sequence[Term], op: str, rhs: int) -> None: ...

    @abstractmethod
    def add_all_different(self, paths: Sequence[str]) -> None: ...

    @abstractmethod
    def add_table(self, paths: Sequence[str], rows: Sequence[Sequence[Any]], allow: bool) -> None: ...

    @abstractmethod
    def add_count(self, paths: Sequence[str], value: Any, op: str, rhs: int) -> None: ...

    @abstractmethod
    def add_any(self, branches: Sequence[Callable[[Context], None]]) -> None: ...

    @abstractmethod
    def when(self, literals: Sequence[Literal]) -> Context: ...

    @abstractmethod
    def post(self, relation: Any) -> None:
        """Encode a (nested) relation with this backend's method: ``encode_sat`` or ``encode_cpsat``."""


def weights(terms: Sequence[Term], fields: Mapping[str, Field]) -> dict[str, list[int]]:
    """Group terms by field: ``{path: [contribution of value k for k in domain]}`` (coefficients folded in)."""
    out: dict[str, list[int]] = {}
    for t in terms:
        f = fields[t.path]
        w = [t.value(v) for v in f.values]
        if t.path in out:
            out[t.path] = [a + b for a, b in zip(out[t.path], w)]
        else:
            out[t.path] = w
    return out


def count_bounds(op: str, rhs: int, n: int) -> list[tuple[int, int]]:
    """The count ranges ``[lo, hi]`` (within 0..n) that satisfy ``count op rhs``; a list of disjoint ranges."""
    ok = [c for c in range(n + 1) if compare(c, op, rhs)]
    ranges: list[tuple[int, int]] = []
    for c in ok:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    return ranges


class Backend(ABC):
    """One session's solver. ``solve`` returns a witness (every encoded field's value index) or None.

    ``fixed`` pins fields to value indices, ``excluded`` rules value indices out, ``enabled`` (a set of instance
    numbers; None = all) switches relations on for explanations. ``time_limit`` bounds one call in seconds; past it
    the call returns None and sets ``self.timed_out``.
    """

    name: str = ""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.timed_out = False
        self.solves = 0

    @abstractmethod
    def solve(self, fixed: Fixed, excluded: Excluded | None = None, enabled: set[int] | None = None,
              time_limit: float | None = None) -> dict[str, int] | None: ...

    def close(self) -> None:
        """Release solver resources."""
