"""What every backend shares: the encoding context relations write to, and the solver interface sessions use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..relations import Literal, Term, compare
from ..schema import Field

if TYPE_CHECKING:
    from ..spec import Spec

Fixed = Mapping[str, int]  # field path -> value index
Excluded = Mapping[str, Sequence[int]]  # field path -> value indices ruled out for this solve
Allowed = Mapping[str, Sequence[tuple[int, int]]]  # field path -> the only value indices allowed (inclusive intervals)


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


def weights(terms: Sequence[Term], fields: Mapping[str, Field],
            memo: dict[Any, Any] | None = None) -> dict[str, list[int]]:
    """Group terms by field: ``{path: [contribution of value k for k in domain]}`` (coefficients folded in).

    ``memo`` (one per encoding) keeps each (field, map) column, so many terms over wide fields (meeting times, each
    with its 900-entry map) are mapped once, not once per term."""
    out: dict[str, list[int]] = {}
    for t in terms:
        f = fields[t.path]
        if memo is None:
            w = [t.value(v) for v in f.values]
        else:  # columns are shared: callers build new lists, never change these
            key = (t.path, id(t.map), t.coef)
            hit = memo.get(key)
            if hit is None:  # the map is kept with its column, so its id stays its own while the memo lives
                unit = memo.get((t.path, id(t.map), 1))
                if unit is None:
                    one = Term(1, t.path, t.map)
                    unit = memo[(t.path, id(t.map), 1)] = (t.map, [one.value(v) for v in f.values])
                hit = memo[key] = unit if t.coef == 1 else (t.map, [t.coef * x for x in unit[1]])
            w = hit[1]
        if t.path in out:
            out[t.path] = [a + b for a, b in zip(out[t.path], w)]
        else:
            out[t.path] = w
    return out


def affine(seq: Sequence[Any], memo: dict[Any, Any]) -> tuple[int, int] | None:
    """``(a, b)`` with ``seq[k] == a + b * k`` for every ``k`` (integers, not booleans), or ``None``: a column or a
    domain that maps value indices affinely. Kept in ``memo`` (a :func:`weights` memo) by the sequence's identity."""
    key = ("affine", id(seq))
    hit = memo.get(key)
    if hit is not None and hit[0] is seq:
        return hit[1]
    out = None
    if isinstance(seq, range):
        out = (seq.start, seq.step) if seq else (0, 0)
    elif all(type(x) is int for x in seq):
        if len(seq) <= 1:
            out = (seq[0] if seq else 0, 0)
        else:
            big = max(map(abs, seq)) >= 1 << 62
            arr = np.asarray(seq, dtype=object if big else np.int64)
            a, b = int(arr[0]), int(arr[1] - arr[0])
            d = arr[1:] - arr[:-1]
            if bool((d == b).all()):
                out = (a, b)
    memo[key] = (seq, out)  # the sequence is kept with its answer, so its id stays its own
    return out


def weights_memo(spec: Spec) -> dict[Any, Any]:
    """The declaration's :func:`weights` memo, shared by its encodings and sessions (columns depend only on it)."""
    return spec._encoded.setdefault("weights", {})


def index_domains(fields: Mapping[str, Field], paths: Iterable[str]) -> None:
    """Build each field's value -> index map now, with the declaration's encoding: sessions look values up at
    every assignment, and a 900-value enum's map costs about a millisecond to build."""
    for p in paths:
        f = fields[p]
        if f.size:
            f.index(f.values[0])


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

    ``fixed`` pins fields to value indices, ``excluded`` rules value indices out, ``allowed`` restricts fields to
    intervals of value indices (a wide field's question: "any admissible value in these?"), ``enabled`` (a set of
    instance numbers; None = all) switches relations on for explanations. ``time_limit`` bounds one call in
    seconds; past it the call returns None and sets ``self.timed_out``.
    """

    name: str = ""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.timed_out = False
        self.solves = 0

    @abstractmethod
    def solve(self, fixed: Fixed, excluded: Excluded | None = None, enabled: set[int] | None = None,
              time_limit: float | None = None, *, allowed: Allowed | None = None) -> dict[str, int] | None: ...

    def bounds(self, fixed: Fixed, path: str, time_limit: float | None = None, *, least: bool = True,
               greatest: bool = True) -> tuple[dict[str, int] | None, dict[str, int] | None] | None:
        """Witnesses with the least and the greatest value index ``path`` takes in valid records under ``fixed``,
        each proven (an optimization), for the ends asked (``None`` in the place of one not asked); ``None`` where
        the backend does not optimize or a proof ran out of time."""
        return None

    def close(self) -> None:
        """Release solver resources."""


#: the largest magnitude a linear sum may reach (CP-SAT works in 64-bit integers and keeps a factor of 2 in reserve)
MAX_MAGNITUDE = 2**62


class NullContext(Context):
    """A context whose condition never holds: everything added to it is vacuous."""

    def __init__(self, fields: Any):
        self.fields = fields

    def add_linear(self, terms: Sequence[Term], op: str, rhs: int) -> None:
        pass

    def add_all_different(self, paths: Sequence[str]) -> None:
        pass

    def add_table(self, paths: Sequence[str], rows: Sequence[Sequence[Any]], allow: bool) -> None:
        pass

    def add_count(self, paths: Sequence[str], value: Any, op: str, rhs: int) -> None:
        pass

    def add_any(self, branches: Sequence[Callable[[Context], None]]) -> None:
        pass

    def when(self, literals: Sequence[Literal]) -> Context:
        return self

    def post(self, relation: Any) -> None:
        pass


class MagnitudeCheck(NullContext):
    """A context that encodes nothing and checks that no linear constraint can leave :data:`MAX_MAGNITUDE`: each
    sum's largest possible value (|coefficient| x the largest |value| of its field, and |rhs|) must stay within it.
    Relations encode themselves into it once, at declaration time, so an overflow is a typed error naming the
    relation instead of a solver failure later."""

    def __init__(self, fields: Mapping[str, Field], where: str):
        super().__init__(fields)
        self.where = where
        self._largest: dict[tuple[str, int], int] = {}

    def _big(self, t: Term) -> int:
        key = (t.path, id(t.map))
        m = self._largest.get(key)
        if m is None:
            if t.map is not None:
                m = max((abs(v) for v in t.map.values()), default=0)
            else:
                vals = self.fields[t.path].values
                m = max(abs(int(vals[0])), abs(int(vals[-1]))) if isinstance(vals, range) and len(vals) else max(
                    (abs(int(v)) for v in vals), default=0)
            self._largest[key] = m
        return m

    def add_linear(self, terms: Sequence[Term], op: str, rhs: int) -> None:
        from ..errors import NumberOutOfRange
        reach = abs(rhs) + sum(abs(t.coef) * self._big(t) for t in terms)
        if reach > MAX_MAGNITUDE:
            raise NumberOutOfRange(f"a linear sum of this relation can reach {reach:.3g}, past 2**62 (CP-SAT's "
                                   "64-bit integers)", pointer=self.where,
                                   found={"terms": [[t.coef, t.path] for t in terms[:6]], "rhs": rhs},
                                   hint="scale the coefficients and constants down, or narrow the fields' bounds")

    def add_any(self, branches: Sequence[Callable[[Context], None]]) -> None:
        for b in branches:
            b(self)

    def post(self, relation: Any) -> None:
        try:
            relation.encode(self)
        except NotImplementedError:  # a custom kind that encodes itself for CP-SAT only: its own business
            pass
