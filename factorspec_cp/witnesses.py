"""What a session knows under one assignment: the valid records it has seen, and per field which value indices are
witnessed (admissible), refuted, or not known yet.

Records are kept as *runs*: a full valid record (a solver's witness) and, optionally, a few fields shifted together
by every delta in a range (what repairing a witness finds, each shifted record checked valid). A run stays valid
under any larger assignment it agrees with, so a new assignment inherits the runs of the one it extends; refuted
values stay refuted under every larger assignment. Both keep exactness: a value is witnessed only by a valid record
and refuted only by a solve that proved it out (or by an assignment it extends).

Value indices of a field are kept in a ``bytearray`` (0 unknown, 1 witnessed, 2 refuted), so questions about
intervals of indices (``find``, a regex over zeros) run at C speed on domains of 10,000 values.

>>> k = Known(10)
>>> k.mark(2, 4); k.refute([(0, 1)])
>>> k.any_known([(5, 9)]), k.unknown([(0, 9)]), k.known_indices(), k.ends()
(False, [(5, 9)], [2, 3, 4], (2, 9))
>>> k.refute([(5, 9)]); k.ends()
(2, 4)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

Interval = tuple[int, int]  # first and last index, inclusive
#: (base record as value indices in the session's field order, positions shifted together, first and last delta)
Run = tuple[tuple[int, ...], tuple[int, ...], int, int]

_ZEROS = re.compile(rb"\x00+")
_ONES = re.compile(rb"\x01+")
_KEEP_REFUTED = bytes(2 if b == 2 else 0 for b in range(256))
_WITNESS = bytes(1 if b == 0 else b for b in range(256))
_REFUTE = bytes(2 if b == 0 else b for b in range(256))
_ONLY_WITNESSED = bytes(1 if b == 1 else 0 for b in range(256))


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, non-adjacent intervals covering the same indices."""
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if a > b:
            continue
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def from_indices(indices: Iterable[int]) -> list[Interval]:
    """The intervals of a set of indices."""
    return merge((k, k) for k in indices)


def clip(intervals: Iterable[Interval], size: int) -> list[Interval]:
    """``intervals`` within ``0 .. size - 1``, merged."""
    return merge((max(a, 0), min(b, size - 1)) for a, b in intervals)


class Known:
    """One field's value indices under one assignment: witnessed, refuted or unknown (see the module doc)."""

    __slots__ = ("status", "known", "refuted", "probed", "bounded", "narrowed", "searched", "kept", "_mask")

    def __init__(self, size: int, ancestor: Known | None = None):
        if ancestor is None:
            self.status = bytearray(size)
            self.refuted = 0
        else:  # what an assignment this one extends refuted stays refuted
            self.status = ancestor.status.translate(_KEEP_REFUTED)
            self.refuted = ancestor.refuted
        self.known = 0
        self.probed = False  # whether a solve asked for any value not witnessed (see Session._among)
        self.bounded = False  # whether the least and greatest admissible values were asked
        self.narrowed = False  # whether the values a relation rules out on its own were refuted (Session._narrow)
        self.searched = False  # whether Session._settle looked (a component's kept knowledge, the search)
        self.kept = 0  # Session._keep: the generation of the store (_parts_kept, from 1) it went into; 0: not yet
        self._mask: bytes | None = None

    @property
    def size(self) -> int:
        return len(self.status)

    @property
    def complete(self) -> bool:
        """Whether every value is witnessed or refuted."""
        return self.known + self.refuted >= len(self.status)

    def mark(self, a: int, b: int) -> None:
        """Indices ``a..b`` are witnessed by valid records."""
        st = self.status
        if a == b:
            if st[a] == 0:
                st[a] = 1
                self.known += 1
            return
        seg = st[a:b + 1]
        n = seg.count(0)
        if n:
            st[a:b + 1] = seg.translate(_WITNESS)
            self.known += n

    def exactly(self, intervals: Iterable[Interval]) -> None:
        """An exact answer (a difference component's search): the indices in ``intervals`` are witnessed, every other
        one refuted. What was known agrees with it (a witnessed index lies in them, a refuted one outside), so the
        status is written anew: one pass, where marking each interval and refuting the gaps took three."""
        size = len(self.status)
        out = bytearray(b"\x02") * size
        n = 0
        for a, b in intervals:
            out[a:b + 1] = b"\x01" * (b - a + 1)
            n += b - a + 1
        self.status[:] = out
        self.known, self.refuted = n, size - n

    def refute(self, intervals: Iterable[Interval]) -> None:
        """A solve proved that no valid record takes these indices (those witnessed stay witnessed)."""
        st = self.status
        for a, b in intervals:
            seg = st[a:b + 1]
            n = seg.count(0)
            if n:
                st[a:b + 1] = seg.translate(_REFUTE)
                self.refuted += n

    def ends(self) -> tuple[int, int] | None:
        """The least and the greatest index not refuted (``None``: every index is refuted)."""
        st = self.status
        lo = len(st) - len(st.lstrip(b"\x02"))
        if lo == len(st):
            return None
        return lo, len(st.rstrip(b"\x02")) - 1

    def any_known(self, intervals: Iterable[Interval]) -> bool:
        st = self.status
        return any(st.find(1, a, b + 1) >= 0 for a, b in intervals)

    def unknown(self, intervals: Iterable[Interval]) -> list[Interval]:
        """The unknown indices within ``intervals``, as intervals."""
        out: list[Interval] = []
        for a, b in intervals:
            out.extend((m.start(), m.end() - 1) for m in _ZEROS.finditer(self.status, a, b + 1))
        return out

    def mask(self) -> bytes:
        """``m[k] == 1`` where index ``k`` is witnessed, else 0 (kept once complete: nothing changes then)."""
        m = self._mask
        if m is None:
            m = bytes(self.status.translate(_ONLY_WITNESSED))
            if self.complete:
                self._mask = m
        return m

    def known_indices(self) -> list[int]:
        st = self.status
        if len(st) <= 64:
            return [k for k in range(len(st)) if st[k] == 1]
        return [k for m in _ONES.finditer(st) for k in range(m.start(), m.end())]

    def known_intervals(self) -> list[Interval]:
        return [(m.start(), m.end() - 1) for m in _ONES.finditer(self.status)]


def restrict(run: Run, extra: Sequence[tuple[int, int]]) -> Run | None:
    """The part of ``run`` that agrees with ``extra`` (position, value index) pairs; ``None`` when none does."""
    base, group, lo, hi = run
    for pos, k in extra:
        if pos in group:
            d = k - base[pos]
            lo, hi = max(lo, d), min(hi, d)
            if lo > hi:
                return None
        elif base[pos] != k:
            return None
    return base, group, lo, hi


def span(run: Run, pos: int) -> Interval:
    """The value indices the field at ``pos`` takes across ``run`` (one interval)."""
    base, group, lo, hi = run
    k = base[pos]
    return (k + lo, k + hi) if pos in group else (k, k)


class State:
    """What is known under one assignment (``fixed``: field path -> value index, in assignment order). (A plain
    class: compiled, a dataclass's generated ``__init__`` stays Python; a decoder makes one per assignment.)"""

    def __init__(self, fixed: dict[str, int], sat: bool | None = None, runs: list[Run] | None = None,
                 parent: State | None = None):
        self.fixed = fixed
        self.sat = sat
        self.runs: list[Run] = [] if runs is None else runs
        self.known: dict[str, Known] = {}
        self.parent = parent  # the assignment this one extends, whose refutations it inherits
        self.questions: dict[str, Any] = {}
        self.parts: dict[Any, tuple[Any, ...]] = {}  # a component's assigned fields, per component
        self.rows: dict[Any, Any] = {}  # per difference component, the candidates its search left

    def __repr__(self) -> str:
        return f"State({len(self.fixed)} fixed, sat={self.sat}, {len(self.runs)} runs)"

    def ancestor_known(self, path: str) -> Known | None:
        """The nearest extended assignment's knowledge of ``path`` (for its refutations)."""
        st = self.parent
        while st is not None:
            hit = st.known.get(path)
            if hit is not None:
                return hit
            st = st.parent
        return None
