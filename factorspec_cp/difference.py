"""Difference logic: exact admissible sets for the fields of scheduling declarations, without a solver call.

Meeting planning's times take part only in difference constraints (``end_i - start_i >= 30``, ``start_j - end_i >=
travel``, window bounds), under implications on narrow fields (``meet_i``) and disjunctions (``i then j, or j then
i``). A *difference component* is a connected part of a declaration (fields linked by relations) where that holds:

- every relation reading a *time* field is a :class:`~.relations.Linear` of one or two time terms whose columns are
  affine in the value index with opposite slopes (a bound or a difference), an :class:`~.relations.Any_` of such, or
  an :class:`~.relations.Implies` of either whose condition reads only the component's other fields;
- the other fields (the *candidate* fields: ``meet_i``) are narrow, and the relations that read only them (the
  objective's ``sum(meet) == optimum``) are checked on each completion of them.

Under an assignment, each completion of the free candidate fields that those relations allow is a *candidate*; it
activates the implications whose conditions hold. One candidate with a choice of alternative per disjunction is a
system of difference constraints: consistent exactly when its constraint graph has no negative cycle, and then the
values one time field takes over its solutions are one interval of integers, read off the shortest paths. So the
admissible values of a time field are the union of those intervals over every candidate and every consistent choice,
and a candidate field's admissible values are those of its consistent candidates: an exact answer from a search over
a graph of a few dozen nodes (``_difference.c``: incremental shortest paths, unit propagation of the disjunctions,
branches cut where the union found covers their interval). Where the search would pass its budget, or there are too
many candidates, the answer is ``None`` and the session asks its solver as before.

Along a record each question's assignment extends the last one's, so a search passes on what still holds
(:class:`Rows`): the candidates it refuted (skipped by the next search: on meeting planning one of 35-120 stays after
the first meeting) and its root matrix (the next search adds the newly assigned times to it, not every bound again).

Exactness does not depend on the rest of the declaration: relations never cross components, so under a satisfiable
assignment the other components have their records whatever this one takes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .checks import compiled
from .encoders.base import affine, weights, weights_memo
from .relations import Any_, Implies, Linear

if TYPE_CHECKING:
    from .spec import Instance, Spec

try:
    from . import _difference as _core  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the extension is built by pip; without it sessions use their solver
    _core = None

#: Search nodes per question before giving up to the solver (meeting planning, 10 people, the first question of a
#: record: a few hundred).
BUDGET = 200_000
#: Completions of the free candidate fields a question may enumerate (2^12).
MAX_CANDIDATES = 4096
#: Candidate fields wider than this make a component ineligible (they are enumerated).
MAX_CANDIDATE_SIZE = 64
#: Components with more time fields than this are left to the solver (the search keeps n x n matrices per level),
#: and those whose matrices, one per disjunction and per candidate column, would pass MAX_SEARCH_BYTES.
MAX_TIMES = 128
MAX_SEARCH_BYTES = 64 << 20
_BIG = 1 << 26  # weights are clamped into (-_BIG, _BIG): sums of three stay within int32 in the search

Interval = tuple[int, int]
_PIN = struct.Struct("=6i")  # two edges as int32 triples in native byte order, as the model's other edge buffers
Edge = tuple[int, int, int]  # (u, v, w): x_v - x_u <= w, node 0 the zero


@dataclass
class Component:
    """One difference component: its time fields (nodes 1..m), candidate fields, relations and side relations."""

    times: list[str]
    candidates: list[str]
    node: dict[str, int]
    relations: list[tuple[list[tuple[str, np.ndarray]], list[list[Edge]]]]  # (condition literals, alternatives)
    side: list[Any]  # relations over candidate fields only, with their checks
    sizes: dict[str, int]
    rel_alt: bytes = b""
    alt_edge: bytes = b""
    edges: bytes = b""
    bounds: list[Edge] = field(default_factory=list)
    bounds_bytes: bytes = b""
    literals: list[tuple[str, np.ndarray]] = field(default_factory=list)
    rel_lits: Any = None
    strides: dict[str, int] = field(default_factory=dict)  # a completion's id: sum(index * stride) (mixed radix)
    at: dict[str, int] = field(default_factory=dict)  # each candidate field's index among the candidates
    lit_candidate: Any = None  # each literal's field, as its index among the candidates (literal 0, true: -1)
    free_key: tuple[int, ...] = ()  # -1 per candidate field: the default of a candidate key
    root_fits: bool = False  # every completion of the candidate fields within MAX_CANDIDATES: one table, masked
    _candidates: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    _rows_with: dict[tuple[int, int], int] = field(default_factory=dict)  # (column, value) -> its rows (_narrowed)
    _col_bytes: dict[int, bytes] = field(default_factory=dict)  # column -> the root table's column, a byte per row
    rel_cols: bytes = b""  # each relation's literals' candidate columns (-1: none), int32 (_narrowed's depths)
    _every: int = -1  # every row of the root table, as _rows_with's integers hold rows (-1: not made yet)
    _depth_of: dict[tuple[bool, ...], bytes] = field(default_factory=dict)  # which columns are free -> depths
    _bases: dict[tuple[Any, ...], bytes] = field(default_factory=dict)  # assigned times -> _base's bytes
    _pinned: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (node, value) -> its two edges' bytes

    def __post_init__(self) -> None:
        rel_alt, alt_edge, edges = [0], [0], []
        for _, alts in self.relations:
            for alt in alts:
                edges.extend(alt)
                alt_edge.append(len(edges))
            rel_alt.append(len(alt_edge) - 1)
        self.rel_alt = np.asarray(rel_alt, dtype=np.int32).tobytes()
        self.alt_edge = np.asarray(alt_edge, dtype=np.int32).tobytes()
        self.edges = np.asarray(edges or [(0, 0, 0)], dtype=np.int32).reshape(-1, 3).tobytes()
        lits: dict[tuple[str, bytes], int] = {}  # each distinct literal a column (0: true), each relation its columns
        for conds, _ in self.relations:
            for p, ok in conds:
                lits.setdefault((p, ok.tobytes()), len(lits) + 1)
        self.literals = [(p, np.frombuffer(ok, dtype=bool)) for p, ok in lits]
        width = max((len(conds) for conds, _ in self.relations), default=0)
        self.rel_lits = np.zeros((len(self.relations), max(width, 1)), dtype=np.intp)
        for r, (conds, _) in enumerate(self.relations):
            for j, (p, ok) in enumerate(conds):
                self.rel_lits[r, j] = lits[(p, ok.tobytes())]
        for p in self.times:
            i = self.node[p]
            self.bounds += [(0, i, self.sizes[p] - 1), (i, 0, 0)]  # 0 <= index <= size - 1
        self.bounds_bytes = np.asarray(self.bounds, dtype=np.int32).reshape(-1, 3).tobytes()
        self.at = {p: j for j, p in enumerate(self.candidates)}
        self.lit_candidate = np.asarray([-1] + [self.at[p] for p, _ in self.literals], dtype=np.intp)
        self.rel_cols = np.ascontiguousarray(self.lit_candidate[self.rel_lits], dtype=np.int32).tobytes()
        self.free_key = (-1,) * len(self.candidates)
        stride = 1
        for p in reversed(self.candidates):  # the first candidate most significant: ids rise with the rows' order
            self.strides[p] = stride
            stride *= self.sizes[p]
        self.root_fits = stride <= MAX_CANDIDATES

    @property
    def n(self) -> int:
        return len(self.times) + 1


class DifferenceModel:
    """A declaration's difference components (:mod:`module doc <.difference>`), and the questions they answer."""

    def __init__(self, spec: Spec, instances: Sequence[Instance]):
        self.spec = spec
        fields = spec.fields
        parent: dict[str, str] = {}

        def find(p: str) -> str:
            while parent.setdefault(p, p) != p:
                parent[p] = parent[parent[p]]
                p = parent[p]
            return p

        for inst in instances:
            scope = list(dict.fromkeys(inst.scope))
            for q in scope[1:]:
                a, b = find(scope[0]), find(q)
                if a != b:
                    parent[a] = b
        groups: dict[str, list[Instance]] = {}
        for inst in instances:
            if inst.scope:
                groups.setdefault(find(inst.scope[0]), []).append(inst)
        self.part: dict[str, str] = {p: find(p) for p in parent}  # every field relations read -> its component's root
        self.split = len(set(self.part.values())) > 1  # several components (else part_key is the whole assignment)
        self.components: dict[str, Component] = {}
        memo = weights_memo(spec)
        for root, insts in groups.items():
            comp = _component(insts, fields, memo)
            if comp is not None:
                self.components[root] = comp

    @classmethod
    def of(cls, spec: Spec, instances: Sequence[Instance], cache: bool) -> DifferenceModel | None:
        """The declaration's model (kept on the spec for its own instances; without the compiled core it answers
        nothing, but its components still key :meth:`part_key`)."""
        hit = spec._encoded.get("difference") if cache else None
        if hit is None:
            hit = cls(spec, instances)
            if cache:
                spec._encoded["difference"] = hit
        return hit

    def component(self, path: str) -> Component | None:
        """``path``'s difference component, where it has one and the compiled core is built."""
        root = self.part.get(path)
        return None if root is None or _core is None else self.components.get(root)

    def part_key(self, path: str, fixed: dict[str, int], memo: dict[Any, tuple[Any, ...]] | None = None
                 ) -> tuple[Any, ...]:
        """The assigned fields of ``path``'s component (any component, not only difference ones), sorted: under two
        satisfiable assignments with the same key, ``path`` has the same admissible values (no relation crosses
        components, so the rest of the assignment has a record whatever the component takes). ``memo``: the
        component's part of ``fixed`` per component, kept with ``fixed`` (a state's), as it is asked for every field of
        the component."""
        part = self.part
        root = part.get(path)
        own = None if memo is None else memo.get(root)
        if own is None:
            own = tuple(sorted((p, k) for p, k in fixed.items() if part.get(p) == root))
            if memo is not None:
                memo[root] = own
        return (path, own)

    # -- questions ---------------------------------------------------------------------------------------------------
    def admissible(self, path: str, fixed: dict[str, int], live: Rows | None = None
                   ) -> tuple[list[Interval], int, Rows] | None:
        """The admissible value indices of ``path`` (in a difference component, not assigned) under ``fixed``, given
        that ``fixed`` is satisfiable, as intervals; with the search nodes spent, and the candidates not refuted
        (:class:`Rows`). ``live``: the candidates not refuted under an assignment that ``fixed`` extends (the others
        are skipped). ``None`` where the question is left to the solver (too many candidates, or the search
        budget)."""
        comp = self.component(path)
        if comp is None or path in fixed:
            return None
        cand = self._candidates(comp, fixed)
        if cand is None:
            return None
        grid, active, free, rows, depth = cand[:5]
        base = self._base(comp, fixed)
        common = (comp.n, base, comp.rel_alt, comp.alt_edge, comp.edges, active, len(grid), rows, len(free), depth)
        carried = _carried(cand, live)
        try:  # (a malformed model raises ValueError: a bug, not a fallback)
            if path in comp.node:
                res, nodes, out = _core.project(*common, comp.node[path], BUDGET, *carried)
                return None if res is None else (res, nodes, Rows(cand, out[0], out[1]))
            groups = np.ascontiguousarray(grid[:, free.index(path)], dtype=np.int32)
            res, nodes, out = _core.feasible(*common, groups.tobytes(), BUDGET, *carried)
        except MemoryError:
            return None
        if res is None:
            return None
        ok = res[0]
        return [(k, k) for k in range(len(ok)) if ok[k]], nodes, Rows(cand, out[0], out[1])

    def satisfiable(self, path: str, fixed: dict[str, int], live: Rows | None = None
                    ) -> tuple[bool, Rows] | None:
        """Whether the assigned fields of ``path``'s difference component extend to a record of it (the other
        components aside), by the search, with the candidates not refuted (``live``: as for :meth:`admissible`);
        ``None`` where it is left to the solver."""
        comp = self.component(path)
        if comp is None:
            return None
        cand = self._candidates(comp, fixed)
        if cand is None:
            return None
        grid, active, free, rows, depth = cand[:5]
        try:
            res, _, out = _core.feasible(comp.n, self._base(comp, fixed), comp.rel_alt, comp.alt_edge, comp.edges,
                                         active, len(grid), rows, len(free), depth, bytes(4 * len(grid)), BUDGET,
                                         *_carried(cand, live))  # one group: all
        except MemoryError:
            return None
        return None if res is None else (res[0] == b"\x01", Rows(cand, out[0], out[1]))

    def _base(self, comp: Component, fixed: dict[str, int]) -> bytes:
        """The bound edges, and two edges per assigned time field (``k <= x <= k``), as int32 triples (kept per
        assignment of the times: a record's questions ask each one several times)."""
        key = tuple([fixed.get(t) for t in comp.times])  # (a dict's get, compiled: map's calls were generic)
        hit = comp._bases.get(key)
        if hit is None:
            parts, pinned = [comp.bounds_bytes], comp._pinned
            for i, k in enumerate(key, 1):  # (node i is times[i - 1])
                if k is not None:
                    two = pinned.get((i, k))
                    if two is None:
                        if len(pinned) > 1 << 16:
                            pinned.clear()
                        two = pinned[(i, k)] = _PIN.pack(0, i, k, i, 0, -k)  # (an array's tobytes: 4,000 instructions)
                    parts.append(two)
            hit = b"".join(parts)
            if len(comp._bases) > 4096:
                comp._bases.clear()
            comp._bases[key] = hit
        return hit

    def _candidates(self, comp: Component, fixed: dict[str, int]) -> tuple[Any, ...] | None:
        """The completions of the free candidate fields that the side relations allow (rows of value indices, in
        lexicographic order), the relations each activates (one byte per relation per row), the fields of the
        columns, the rows as bytes, each relation's depth (one past the last column of a free field its condition
        reads: the search shares a prefix's constraints between the rows with that prefix), the rows' ids and the
        mask of the rows to search (``b""``: all); kept per assignment of the candidate fields. Where every
        completion fits (``Component.root_fits``), one table with every candidate free serves each assignment,
        masked to the rows that agree with it (:meth:`_narrowed`); elsewhere the table has the free fields' columns
        only."""
        key = tuple([fixed.get(p, d) for p, d in zip(comp.candidates, comp.free_key)])
        hit = comp._candidates.get(key)
        if hit is not None:
            return hit
        if comp.root_fits and key != comp.free_key:  # the table with every candidate free, narrowed by a row mask
            root = comp._candidates.get(comp.free_key)
            if root is None:
                root = self._candidates(comp, {})  # (side relations read candidate fields only)
            assert root is not None  # (every completion fits)
            return self._keep(comp, key, self._narrowed(comp, root, key))
        for j, k in enumerate(key):  # a kept table with one of these fields free: its rows with the value (in order)
            if k >= 0:
                up = comp._candidates.get(key[:j] + (-1,) + key[j + 1:])
                if up is not None:
                    return self._keep(comp, key, self._restrict(comp, up, comp.candidates[j], k))
        free = [p for p in comp.candidates if p not in fixed]
        total = 1
        for p in free:
            total *= comp.sizes[p]
        if total > MAX_CANDIDATES:
            return None
        axes = np.meshgrid(*[np.arange(comp.sizes[p], dtype=np.int32) for p in free], indexing="ij")
        grid = np.stack(axes, axis=-1).reshape(total, len(free)) if free else np.zeros((1, 0), dtype=np.int32)
        col = {p: k for k, p in enumerate(free)}
        keep = np.ones(total, dtype=bool)
        for _, check, cols in comp.side:
            if cols is not None:  # a linear relation: its sum over the rows at once
                op, rhs, terms = cols
                s = np.zeros(total, dtype=np.int64)
                for p, w in terms:
                    s += w[grid[:, col[p]]] if p in col else w[fixed[p]]
                keep &= _compare(s, op, rhs)
            else:
                fields = self.spec.fields
                for k in np.flatnonzero(keep).tolist():
                    idx = dict(fixed)
                    idx.update((p, int(grid[k, col[p]])) for p in free)
                    vals = {p: fields[p].values[j] for p, j in idx.items()}
                    if not check(idx, vals):
                        keep[k] = False
        grid = grid[keep]
        truth = np.ones((len(grid), len(comp.literals) + 1), dtype=bool)  # each literal on each row
        for j, (p, ok) in enumerate(comp.literals, 1):
            truth[:, j] = ok[grid[:, col[p]]] if p in col else ok[fixed[p]]
        active = np.ascontiguousarray(truth[:, comp.rel_lits].all(axis=2), dtype=np.uint8)  # each relation's
        ids = np.full(len(grid), sum(fixed[p] * comp.strides[p] for p in comp.candidates if p in fixed), np.int64)
        for p in free:  # condition on each row; the rows' ids
            ids += grid[:, col[p]].astype(np.int64) * comp.strides[p]
        return self._keep(comp, key, self._table(comp, grid, active, free, ids))

    @staticmethod
    def _table(comp: Component, grid: np.ndarray, active: np.ndarray, free: list[str], ids: np.ndarray
               ) -> tuple[Any, ...]:
        """(grid, active as bytes, free fields, grid as bytes, depths as bytes, active, ids): the candidate table the
        questions pass to the search."""
        col = np.zeros(len(comp.candidates) + 1, dtype=np.int32)  # each candidate's depth: its column + 1, or 0
        col[[comp.at[p] for p in free]] = np.arange(1, len(free) + 1, dtype=np.int32)
        return (grid, active.tobytes(), free, np.ascontiguousarray(grid, dtype=np.int32).tobytes(),
                _depths(comp, col), active, ids, b"")

    @staticmethod
    def _narrowed(comp: Component, root: tuple[Any, ...], key: tuple[int, ...]) -> tuple[Any, ...]:
        """The table of an assignment of some candidate fields (``key``: each one's value index, -1 free) as the
        table with every candidate free (``root``, one per component) and a mask of the rows that agree with it (one
        byte per row; the search skips the others, :func:`_carried`), with each relation's depth counting only the
        free fields' columns: the rows searched agree on the others. Its arrays are the root's (so the search's
        carried rows match without ids). The mask is one AND of integers per assigned column (each column and value's
        rows kept as an integer with a byte per row) and the depths are kept per set of free columns: 80,000
        instructions per new assignment on meeting in numpy, where a table of its own cost 50-300 us (a restriction,
        or a new enumeration where two fields were newly assigned). The mask is ``b""`` where every row agrees."""
        grid = root[0]
        keep = -1  # the rows that agree with every assigned column, one byte each (0 or 1) of a little-endian int
        rows_with = comp._rows_with
        for j, k in enumerate(key):  # the rows agreeing with each assigned column (kept per column and value)
            if k >= 0:
                agree = rows_with.get((j, k))
                if agree is None:  # the column as bytes (values below MAX_CANDIDATE_SIZE), once; its rows with k,
                    col = comp._col_bytes.get(j)  # a translate to 0/1 bytes (three numpy calls took 9 us)
                    if col is None:
                        col = comp._col_bytes[j] = np.ascontiguousarray(grid[:, j], dtype=np.uint8).tobytes()
                    agree = rows_with[(j, k)] = int.from_bytes(col.translate(_one_at(k)), "little")
                keep &= agree
        free = tuple(k < 0 for k in key)
        depths = comp._depth_of.get(free)
        if depths is None:  # (met once per assignment of the candidates: in C, 1 us where numpy's indexing took 12)
            if _core is not None:  # (no relations: rel_lits is 0 x 1, and the depths b"")
                depths = _core.depths(comp.rel_cols, comp.rel_lits.shape[1], bytes(free))
            else:
                col = np.zeros(len(comp.candidates) + 1, dtype=np.int32)  # each candidate's depth: column + 1, or 0
                for j, is_free in enumerate(free):
                    if is_free:
                        col[j] = j + 1
                depths = _depths(comp, col)
            comp._depth_of[free] = depths
        every = comp._every
        if every < 0:
            every = comp._every = int.from_bytes(b"\x01" * len(grid), "little")
        keep &= every
        mask = b"" if keep == every else keep.to_bytes(len(grid), "little")
        return (*root[:4], depths, *root[5:7], mask)

    @staticmethod
    def _keep(comp: Component, key: tuple[int, ...], hit: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(comp._candidates) > 4096:
            comp._candidates.clear()
        comp._candidates[key] = hit
        return hit

    def _restrict(self, comp: Component, up: tuple[Any, ...], path: str, k: int) -> tuple[Any, ...]:
        """The candidate table with ``path`` assigned ``k``, from the table with it free: the rows where its column is
        ``k``, without that column. The side relations and the conditions read the same values on those rows, so
        they keep their verdicts; lexicographic order is kept (a meshgrid and its filter cost 74 us, this 10)."""
        grid, free, active = up[0], up[2], up[5]
        j = free.index(path)
        keep = grid[:, j] == k
        return self._table(comp, np.delete(grid[keep], j, axis=1), np.ascontiguousarray(active[keep]),
                           free[:j] + free[j + 1:], up[6][keep])


class Rows:
    """What a search passes on to the questions of the assignments that extend the one it was asked under
    (``_difference.c``): the candidates of its table (:meth:`DifferenceModel._candidates`) it did not refute
    (``alive``, one byte per row: refuted under an assignment, a candidate is refuted under every extension of it),
    and its root matrix (``root``: shortest paths under the bounds, the assigned times and the relations every
    candidate activates, which hold under every extension; ``b""`` where they were inconsistent). Immutable by
    contract (a plain class: compiled, a frozen dataclass's generated ``__init__`` stays Python, 20,000
    instructions a search)."""

    def __init__(self, table: tuple[Any, ...], alive: bytes, root: bytes):
        self.table = table
        self.alive = alive
        self.root = root

    def __repr__(self) -> str:
        return f"Rows({len(self.alive)} rows, root {len(self.root)} bytes)"


def _carried(table: tuple[Any, ...], live: Rows | None) -> tuple[bytes, bytes]:
    """The search's last two arguments from ``live`` (an ancestor's :class:`Rows`): its mask over ``table``'s rows
    (empty: every row) and the root matrix to start from (empty: none). A table narrowed since (a candidate field
    assigned) has a subset of its rows: they are matched by id (both in ascending order)."""
    mask = table[7]  # the rows that agree with the assignment (a narrowed root table), or b"": all
    if live is None:
        return mask, b""
    if live.table[0] is table[0]:  # the same rows (the same table, or the component's root table narrowed)
        alive = live.alive
    else:
        ids = live.table[6][np.frombuffer(live.alive, dtype=np.bool_)]
        own = table[6]
        if not len(ids):
            return bytes(len(own)), live.root
        at = np.searchsorted(ids, own)
        alive = (ids[np.minimum(at, len(ids) - 1)] == own).tobytes()
    if mask:  # (bytes of 0 and 1: their AND as integers is the AND per row)
        alive = (int.from_bytes(alive, "little") & int.from_bytes(mask, "little")).to_bytes(len(mask), "little")
    return (b"" if b"\x00" not in alive else alive), live.root


_ONE_AT: list[bytes] = []


def _one_at(k: int) -> bytes:
    """A ``bytes.translate`` table that maps byte ``k`` to 1 and every other byte to 0."""
    while len(_ONE_AT) <= k:
        j = len(_ONE_AT)
        _ONE_AT.append(bytes(j) + b"\x01" + bytes(255 - j))
    return _ONE_AT[k]


def _depths(comp: Component, col: np.ndarray) -> bytes:
    """Each relation's depth as the search's int32 bytes, from each candidate's depth (``col``: its column + 1, or 0
    where its column is not searched; one more entry, 0, that literal 0 reads): the deepest of its literals'."""
    lit_depth = col[comp.lit_candidate]
    depth = lit_depth[comp.rel_lits].max(axis=1) if len(comp.relations) else np.zeros(0, dtype=np.int32)
    return np.ascontiguousarray(depth, np.int32).tobytes()


def _compare(s: np.ndarray, op: str, rhs: int) -> np.ndarray:
    return {"<=": s <= rhs, "<": s < rhs, ">=": s >= rhs, ">": s > rhs, "==": s == rhs, "!=": s != rhs}[op]


def _edges(rel: Any, fields: Any, memo: dict[Any, Any], times: set[str], node: dict[str, int]) -> list[Edge] | None:
    """A linear relation of one or two time terms as difference edges (over value indices), or ``None``."""
    if type(rel) is not Linear or rel.op == "!=" or type(rel.rhs) is not int:
        return None
    cols = weights(rel.terms, fields, memo)
    if not cols or len(cols) > 2 or any(p not in times for p in cols):
        return None
    lin = {}
    const = 0
    for p, col in cols.items():
        ab = affine(col, memo)
        if ab is None:
            return None
        const += ab[0]
        if ab[1]:
            lin[p] = ab[1]
    r = rel.rhs - const
    # the relation as constraints "sum(b_p * k_p) <= r"
    sides = {"<=": [(1, r)], "<": [(1, r - 1)], ">=": [(-1, -r)], ">": [(-1, -r - 1)], "==": [(1, r), (-1, -r)]}
    out: list[Edge] = []
    for sign, rr in sides[rel.op]:
        terms = [(p, sign * b) for p, b in lin.items()]
        if not terms:  # a constant comparison: nothing, or a contradiction (a negative self-loop)
            if 0 > rr:
                out.append((0, 0, -1))
            continue
        if len(terms) == 1:
            (p, b), = terms
            w = rr // abs(b)
            out.append((0, node[p], w) if b > 0 else (node[p], 0, w))  # k <= w, or -k <= w
            continue
        (p, b1), (q, b2) = terms
        if b1 != -b2:
            return None
        x, y = (p, q) if b1 > 0 else (q, p)  # |b| * (k_x - k_y) <= rr
        out.append((node[y], node[x], rr // abs(b1)))
    return [(u, v, max(-_BIG + 1, min(_BIG - 1, w))) for u, v, w in out]


def _component(insts: Sequence[Instance], fields: Any, memo: dict[Any, Any]) -> Component | None:
    """The component of these instances as a difference component, or ``None`` where it is not one."""
    times: set[str] = set()
    for inst in insts:  # time fields: those in the terms of a linear relation under the implications and disjunctions
        rel = inst.relation
        rel = rel.then if type(rel) is Implies else rel
        subs = rel.relations if type(rel) is Any_ else [rel]
        if not all(type(s) is Linear for s in subs):
            continue
        for s in subs:
            for t in s.terms:  # type: ignore[union-attr]  # (each one a Linear)
                f = fields[t.path]
                if f.size > MAX_CANDIDATE_SIZE:
                    times.add(t.path)
    if not times or len(times) > MAX_TIMES or any(fields[p].size >= _BIG for p in times):
        return None  # (weights are clamped into (-_BIG, _BIG): exact only for domains below it)
    scope = list(dict.fromkeys(p for inst in insts for p in inst.scope))
    node = {p: k + 1 for k, p in enumerate(sorted(times, key=scope.index))}
    candidates = [p for p in scope if p not in times]
    if any(fields[p].size > MAX_CANDIDATE_SIZE for p in candidates):
        return None
    relations: list[tuple[list[tuple[str, np.ndarray]], list[list[Edge]]]] = []
    side = []
    for inst in insts:
        rel = inst.relation
        if not times.intersection(inst.scope):
            cols = None
            if type(rel) is Linear:
                ws = weights(rel.terms, fields, memo)
                cols = (rel.op, rel.rhs, [(p, np.asarray(w, dtype=np.int64)) for p, w in ws.items()])
            side.append((rel, compiled(rel, fields, memo), cols))
            continue
        lits: list[tuple[str, np.ndarray]] = []
        if type(rel) is Implies:
            for lit in rel.if_:
                if lit.field in times:
                    return None
                ok = np.zeros(fields[lit.field].size, dtype=bool)
                ok[lit.allowed(fields[lit.field])] = True
                lits.append((lit.field, ok))
            rel = rel.then
        subs = rel.relations if type(rel) is Any_ else [rel]
        alts = []
        for s in subs:
            e = _edges(s, fields, memo, times, node)
            if e is None:
                return None
            alts.append(e)
        relations.append((lits, alts))
    levels = sum(len(alts) > 1 for _, alts in relations) + len(candidates) + 3
    if levels * (len(times) + 1) ** 2 * 4 > MAX_SEARCH_BYTES:
        return None
    return Component(sorted(times, key=node.__getitem__), candidates, node, relations, side,
                     {p: fields[p].size for p in scope})
