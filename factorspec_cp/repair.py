"""Witnesses for free: a solver's witness moved to nearby values, each moved record checked valid in Python.

A solution is moved by shifting one field, alone or together with its *siblings* (fields of the same object with
the same domain: the start and end of one interval, moved whole), by a delta of value indices. Only the relations
that read a moved field can change their verdict, so checking those (compiled to value indices,
:mod:`.checks`) on the moved record proves it a full valid record. A move found holds for a range of deltas (a
*run*, :mod:`.witnesses`). Exactness never depends on this: a record is kept only when it checks, and the solver
decides the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from .checks import Check, compiled
from .encoders.base import affine, weights, weights_memo
from .relations import Compare, Implies, Linear, compare, is_path
from .witnesses import Interval, Known

if TYPE_CHECKING:
    from .spec import Instance, Spec

#: Repairing a witness for a wide field's question steps at most this far each way: each step checks relations
#: (about 0.02 ms on meeting planning, a twentieth of a solve), and trying each asked group's nearest value answers
#: more questions per check (over 40 meeting problems, 0 or 8 steps each way with that try: 1,099 and 998 solves,
#: the same time within noise).
WIDE_REPAIR_STEPS = 0
#: ... and tries at most this many of each asked group's values nearest the witness's (2: as many solves).
WIDE_REPAIR_TRIES = 1

#: ``add(positions, first delta, last delta)``: keep the run of the witness with those positions shifted.
Add = Callable[[tuple[int, ...], int, int], None]


class Repairer:
    """A declaration's repairs: which relations read each field, each field's siblings, and the checks."""

    def __init__(self, spec: Spec, instances: Sequence[Instance], paths: Sequence[str]):
        self.spec, self.paths = spec, list(paths)
        self.pos = {p: k for k, p in enumerate(self.paths)}
        self.touching: dict[str, list[Instance]] = {}
        for inst in instances:
            for p in inst.scope:
                self.touching.setdefault(p, []).append(inst)
        fields = spec.fields
        self.siblings: dict[str, list[str]] = {}
        self._convex: dict[tuple[int, frozenset[str]], bool] = {}  # (relation, moved fields) -> convex_shift
        self._entries: dict[tuple[str, ...], list[tuple[Any, Check, Check | None]]] = {}  # per moved group
        self.narrows: dict[str, list[Any]] = {}  # per field, what Session._narrow reads (built there, kept here)
        by_parent: dict[str, list[str]] = {}  # grouped first: a 10,000-element array has 20,000 paths
        for q in self.paths:
            by_parent.setdefault(q.rsplit("/", 1)[0], []).append(q)
        for p in self.paths:
            self.siblings[p] = [q for q in by_parent[p.rsplit("/", 1)[0]] if q != p and fields[p].size > 2
                                and fields[q].values == fields[p].values]

    @classmethod
    def of(cls, spec: Spec, instances: Sequence[Instance], paths: Sequence[str], cache: bool) -> Repairer:
        """The declaration's repairer (kept on the spec for its own instances: it depends only on them)."""
        if not cache:
            return cls(spec, instances, paths)
        hit = spec._encoded.get("repair")
        if hit is None:
            hit = spec._encoded["repair"] = cls(spec, instances, paths)
        return hit

    def repair(self, path: str, base: tuple[int, ...], fixed: Collection[str], known: Known, add: Add, *,
               steps: int | None = None, tries: int = 0, targets: Sequence[Sequence[Interval]] = ()) -> None:
        """Move the witness ``base`` (value indices in ``paths`` order) at ``path``: step outward while the moved
        record stays valid (at most ``steps`` each way; ``None``: as far as it goes), then try each target group
        no witness answers yet at its ``tries`` values nearest the witness's. ``fixed`` fields do not move;
        ``known`` is the path's knowledge (refuted values are not tried; each run found is added, and marks it)."""
        if path not in self.touching:
            return
        fields, pos = self.spec.fields, self.pos
        limit = fields[path].size if steps is None else steps
        free_siblings = [q for q in self.siblings.get(path, []) if q not in fixed]
        moves = [[path], [path, *free_siblings]] if free_siblings else [[path]]
        values = {p: fields[p].values[k] for p, k in zip(self.paths, base)}
        indices = dict(zip(self.paths, base))
        start = base[pos[path]]
        for group in moves:
            checks, convex = self._live_checks(group, indices)
            move = _Move(group, base, pos, fields, values, indices, known.status, checks)
            reach = {}
            for step in (1, -1):
                if convex:  # the valid shifts form one interval: its ends in a logarithmic number of checks
                    reach[step] = step * _gallop(move, step, fields[path].size)
                    continue
                d = step
                while abs(d) <= limit and move.valid(d):
                    d += step
                reach[step] = d - step
            if reach[1] or reach[-1]:
                add(move.positions, reach[-1], reach[1])
            for g in targets:
                if known.any_known(g):
                    continue
                near = sorted({min(max(start, a), b) for a, b in g}, key=lambda k: abs(k - start))
                for k in near[:tries]:
                    if move.valid(k - start):
                        add(move.positions, k - start, k - start)
                        break
            move.restore()

    def _live_checks(self, group: Sequence[str], indices: dict[str, int]) -> tuple[list[Check], bool]:
        """The checks to run when ``group`` moves: the relations reading it, less the implications whose condition
        reads none of it and is false in ``indices`` (they hold whatever the group takes); and whether the shifts
        that pass them all are one interval of deltas (:func:`convex_shift`). What depends only on the group is
        kept per group (a repair runs several times per question)."""
        key = tuple(group)
        entries = self._entries.get(key)
        if entries is None:
            moved = set(group)
            entries = self._entries[key] = []
            for inst in {id(i): i for p in group for i in self.touching.get(p, [])}.values():
                _, check, condition = compile_check(self.spec, inst.relation)
                entries.append((inst.relation, check, None if condition is None or moved & condition[0]
                                else condition[1]))
        out = []
        convex = True
        moved_key = None
        for rel, check, condition in entries:
            if condition is not None and not condition(indices, {}):
                continue
            out.append(check)
            if convex:
                if moved_key is None:
                    moved_key = frozenset(key)
                hit = self._convex.get((id(rel), moved_key))
                if hit is None:
                    hit = self._convex[(id(rel), moved_key)] = convex_shift(rel, set(key), self.spec.fields,
                                                                          weights_memo(self.spec))
                convex = hit
        return out, convex


def compile_checks(spec: Spec, instances: Sequence[Instance]) -> None:
    """Compile the relations' checks into the declaration's cache now (with its encoding: they depend only on it)."""
    for inst in instances:
        compile_check(spec, inst.relation)


def compile_check(spec: Spec, rel: Any) -> tuple[Any, Check, tuple[set[str], Check] | None]:
    """``(relation, its check on value indices, its condition if an implication)``, cached on the spec."""
    cache = spec._encoded.setdefault("checks", {})
    hit = cache.get(id(rel))
    if hit is None:  # the relation is kept with its check, so its id stays its own
        hit = cache[id(rel)] = (rel, compiled(rel, spec.fields, weights_memo(spec)), _condition(rel, spec.fields))
    return hit


def _condition(rel: Any, fields: Any) -> tuple[set[str], Check] | None:
    """An implication's condition: the fields it reads and its check on value indices (``None``: no implication)."""
    if type(rel) is not Implies:
        return None
    lits = [(lit.field, frozenset(lit.allowed(fields[lit.field]))) for lit in rel.if_]
    return {p for p, _ in lits}, lambda idx, vals: all(idx[p] in ok for p, ok in lits)


#: comparisons whose solutions in an affine function of the shift are one interval (``!=`` leaves a hole)
_CONVEX_OPS = frozenset({"==", "<", "<=", ">", ">="})


def convex_shift(rel: Any, moved: set[str], fields: Any, memo: dict[Any, Any]) -> bool:
    """Whether, when the ``moved`` fields shift together by one delta of value indices and every other field
    stays, the deltas under which ``rel`` holds are one interval (given that it holds at delta 0: an implication
    kept for a move has a condition that is true there or reads a moved field). True for a linear relation or a
    numeric comparison whose moved fields map indices affinely (meeting minutes, integer ranges) under
    ``==``/``<``/``<=``/``>``/``>=``, for a comparison with a constant whose true values are one run of indices,
    and for an implication whose condition reads no moved field and whose consequent is convex. False otherwise
    (tables, ``!=``, all-different, ...): then a repair steps one delta at a time."""
    kind = type(rel)
    if kind is Implies:
        if any(lit.field in moved for lit in rel.if_):
            return False
        return convex_shift(rel.then, moved, fields, memo)
    if kind is Linear:
        if rel.op not in _CONVEX_OPS:
            return False
        cols = weights(rel.terms, fields, memo)
        return all(affine(col, memo) is not None for p, col in cols.items() if p in moved)
    if kind is Compare:
        left, right = is_path(rel.left), is_path(rel.right)
        if left != right:
            path, const = (rel.left, rel.right) if left else (rel.right, rel.left)
            if path not in moved:
                return True
            ok = [compare(v, rel.op, const) if left else compare(const, rel.op, v) for v in fields[path].values]
            runs = sum(1 for k, x in enumerate(ok) if x and (k == 0 or not ok[k - 1]))
            return runs <= 1
        if rel.op not in _CONVEX_OPS or not rel.numeric(fields):
            return False
        return all(affine(fields[p].values, memo) is not None for p in (rel.left, rel.right) if p in moved)
    return False


def _gallop(move: _Move, step: int, size: int) -> int:
    """The largest ``m`` with ``move.valid(step * m')`` for every ``m' <= m``, where the valid deltas are known to
    be one interval containing 0: doubling to the first invalid delta, then bisecting."""
    lo, hi = 0, 1
    while hi < size and move.valid(step * hi):
        lo, hi = hi, 2 * hi
    hi = min(hi, size)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if move.valid(step * mid):
            lo = mid
        else:
            hi = mid
    return lo


class _Move:
    """Fields of one record shifted together by a delta of value indices, checked against the relations that read
    them (``values`` and ``indices`` are the record's, changed in place; :meth:`restore` puts the base back)."""

    def __init__(self, group: Sequence[str], base: tuple[int, ...], pos: dict[str, int], fields: Any,
                 values: dict[str, Any], indices: dict[str, int], status: bytearray, checks: list[Check]):
        self.group, self.fields, self.values, self.status, self.checks = list(group), fields, values, status, checks
        self.indices = indices
        self.positions = tuple(pos[p] for p in group)
        self.at = [base[k] for k in self.positions]
        self.sizes = [fields[p].size for p in group]

    def valid(self, d: int) -> bool:
        """Whether the record with the group shifted by ``d`` is valid (the first field's value not refuted)."""
        k = self.at[0] + d
        if not 0 <= k < self.sizes[0] or self.status[k] == 2:
            return False
        shifted = [j + d for j in self.at]
        if any(not 0 <= j < n for j, n in zip(shifted, self.sizes)):
            return False
        for p, j in zip(self.group, shifted):
            self.values[p] = self.fields[p].values[j]
            self.indices[p] = j
        return all(check(self.indices, self.values) for check in self.checks)

    def restore(self) -> None:
        for p, j in zip(self.group, self.at):
            self.values[p] = self.fields[p].values[j]
            self.indices[p] = j
