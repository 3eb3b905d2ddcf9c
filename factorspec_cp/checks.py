"""Relations checked on a record's value indices: what repairing a witness evaluates at every step it tries.

``compiled(relation, fields, memo)`` is ``check(indices, values) -> bool``, equal to ``relation.check(values)``
for the record whose field value indices are ``indices`` (and values ``values``). Linear relations read the
columns the encoders read (:func:`~factorspec_cp.encoders.base.weights`), literals the index sets the encoders
read (:meth:`~factorspec_cp.relations.Literal.allowed`), a table its rows as index tuples, a comparison with a
constant one precomputed column: a step costs lookups rather than value comparisons (on meeting planning about 8x
less than ``check``). Every other kind, and any subclass, is checked with its own ``check(values)``.

>>> import factorspec_cp as fs
>>> spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {
...     "a": {"type": "integer", "minimum": 0, "maximum": 9},
...     "b": {"enum": ["lo", "hi"]}}},
...     [fs.Implies({"field": "/b", "op": "==", "value": "hi"}, fs.Compare("/a", ">=", 5))])
>>> check = compiled(spec.instances[0].relation, spec.fields, {})
>>> check({"/a": 3, "/b": 1}, {}), check({"/a": 3, "/b": 0}, {}), check({"/a": 7, "/b": 1}, {})
(False, True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .encoders.base import weights, weights_memo
from .relations import Any_, Compare, Implies, Linear, Table, compare, is_path
from .schema import Field

#: ``check(indices, values)``: field path -> value index, field path -> value, of one full record.
Check = Callable[[Mapping[str, int], Mapping[str, Any]], bool]


def compiled(rel: Any, fields: Mapping[str, Field], memo: dict[Any, Any]) -> Check:
    """``rel.check`` on value indices (see the module doc); ``memo`` is a :func:`weights` memo."""
    kind = type(rel)
    if kind is Linear:
        cols = list(weights(rel.terms, fields, memo).items())
        op, rhs = rel.op, rel.rhs
        return lambda idx, vals: compare(sum(col[idx[p]] for p, col in cols), op, rhs)
    if kind is Implies:
        lits = [(lit.field, frozenset(lit.allowed(fields[lit.field]))) for lit in rel.if_]
        then = compiled(rel.then, fields, memo)
        return lambda idx, vals: not all(idx[p] in ok for p, ok in lits) or then(idx, vals)
    if kind is Any_:
        subs = [compiled(r, fields, memo) for r in rel.relations]
        return lambda idx, vals: any(sub(idx, vals) for sub in subs)
    if kind is Table:
        paths = list(rel.fields)
        rows = set(table_rows(rel, fields, memo))
        allow = rel.allow
        return lambda idx, vals: (tuple(idx[p] for p in paths) in rows) == allow
    if kind is Compare and is_path(rel.left) != is_path(rel.right):
        path, const, flip = (rel.left, rel.right, False) if is_path(rel.left) else (rel.right, rel.left, True)
        col = [compare(const, rel.op, v) if flip else compare(v, rel.op, const) for v in fields[path].values]
        return lambda idx, vals: col[idx[path]]
    return lambda idx, vals: bool(rel.check(vals))


# ------------------------------------------------------------------------------------------------------ narrowing
#: The kinds :func:`narrowing` can answer for (any other gives ``None``; subclasses too, as in :func:`compiled`).
NARROWED = frozenset({Linear, Compare, Implies, Any_, Table})
#: A table with more rows than this is not projected by :func:`narrowing` (a pass over its rows per question).
NARROW_TABLE_ROWS = 512
#: Linear columns whose values reach this are left to the solver (numpy's int64 sums must stay exact).
_NARROW_LIMIT = 1 << 52

#: ``narrow(path, fixed)``: one bool per value index of ``path``, False where no record that extends ``fixed``
#: (field path -> value index) and takes that value satisfies the relation; ``None`` where that is not decided
#: from ``fixed`` alone (a field other than ``path`` is free, or the kind is not narrowed).
Narrow = Callable[[str, Mapping[str, int]], Any]


def compile_narrowing(spec: Any, rel: Any) -> Narrow:
    """:func:`narrowing` of ``rel``, cached on the declaration (it depends only on it)."""
    cache = spec._encoded.setdefault("narrowings", {})
    hit = cache.get(id(rel))
    if hit is None:  # the relation is kept with its narrowing, so its id stays its own
        hit = cache[id(rel)] = (rel, narrowing(rel, spec.fields, weights_memo(spec)))
    return hit[1]  # type: ignore[no-any-return]


def narrowing(rel: Any, fields: Mapping[str, Field], memo: dict[Any, Any]) -> Narrow:
    """The values of one field a relation rules out, under an assignment of (some of) the others: node consistency.

    Exact where every other field the relation reads is assigned: a linear relation (its columns, as
    :func:`compiled` reads them), a comparison with a constant, an implication (its condition decided by the
    assignment, or read on the field itself) and a disjunction of those. A table (``allow``) is projected even with
    other fields free: a value no row compatible with the assigned fields holds is ruled out. Every ruled-out value
    is ruled out by the relation itself, so a session may refute it without a solve; anything else gives ``None``.

    >>> import factorspec_cp as fs
    >>> spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {
    ...     "a": {"type": "integer", "minimum": 0, "maximum": 9},
    ...     "b": {"type": "integer", "minimum": 0, "maximum": 9}}}, [fs.Linear([(1, "/a"), (1, "/b")], "<=", 6)])
    >>> narrow = narrowing(spec.instances[0].relation, spec.fields, {})
    >>> narrow("/a", {"/b": 4}).nonzero()[0].tolist(), narrow("/a", {}) is None
    ([0, 1, 2], True)
    """
    import numpy as np

    kind = type(rel)
    if kind is Linear:
        cols = {p: _column(col, memo) for p, col in weights(rel.terms, fields, memo).items()}
        if any(col is None for col in cols.values()):
            return lambda path, fixed: None
        op, rhs = rel.op, rel.rhs

        def linear(path: str, fixed: Mapping[str, int]) -> Any:
            rest = 0
            for p, col in cols.items():
                if p != path:
                    if p not in fixed:
                        return None
                    rest += int(col[fixed[p]])
            own = cols.get(path)
            if own is None:
                return np.full(fields[path].size, compare(rest, op, rhs), dtype=bool)
            return _vcompare(own + rest, op, rhs)
        return linear
    if kind is Compare and is_path(rel.left) != is_path(rel.right):
        at, const, flip = (rel.left, rel.right, False) if is_path(rel.left) else (rel.right, rel.left, True)
        col = np.array([compare(const, rel.op, v) if flip else compare(v, rel.op, const)
                        for v in fields[at].values], dtype=bool)

        def versus(path: str, fixed: Mapping[str, int]) -> Any:
            if path == at:
                return col
            return np.full(fields[path].size, bool(col[fixed[at]])) if at in fixed else None
        return versus
    if kind is Implies:
        lits = [(lit.field, frozenset(lit.allowed(fields[lit.field]))) for lit in rel.if_]
        then = narrowing(rel.then, fields, memo)
        own_memo: dict[str, Any] = {}

        def implies(path: str, fixed: Mapping[str, int]) -> Any:
            for p, ok in lits:  # a free condition decides nothing; a false one leaves anything
                if p != path and (p not in fixed or fixed[p] not in ok):
                    return None
            out = then(path, fixed)
            if out is None:
                return None
            if any(p == path for p, _ in lits):  # the condition reads the field: where it fails, anything goes
                cond = own_memo.get(path)
                if cond is None:
                    cond = np.ones(fields[path].size, dtype=bool)
                    for p, ok in lits:
                        if p == path:
                            cond &= np.isin(np.arange(fields[path].size), sorted(ok))
                    own_memo[path] = cond
                out = out | ~cond
            return out
        return implies
    if kind is Any_:
        subs = [narrowing(r, fields, memo) for r in rel.relations]

        def either(path: str, fixed: Mapping[str, int]) -> Any:
            out = None
            for sub in subs:
                m = sub(path, fixed)
                if m is None:
                    return None
                out = m if out is None else out | m
            return out
        return either
    if kind is Table and rel.allow and len(rel.rows) <= NARROW_TABLE_ROWS and len(set(rel.fields)) == len(rel.fields):
        paths = list(rel.fields)
        rows = table_rows(rel, fields, memo)
        seen: dict[Any, Any] = {}

        def project(path: str, fixed: Mapping[str, int]) -> Any:
            if path not in paths:
                return None
            at = paths.index(path)
            given = tuple((k, fixed[p]) for k, p in enumerate(paths) if k != at and p in fixed)
            key = (at, given)
            hit = seen.get(key)
            if hit is None:
                hit = np.zeros(fields[path].size, dtype=bool)
                for row in rows:
                    if all(row[k] == v for k, v in given):
                        hit[row[at]] = True
                if len(seen) < 4096:
                    seen[key] = hit
            return hit
        return project
    return lambda path, fixed: None


def table_rows(rel: Table, fields: Mapping[str, Field], memo: dict[Any, Any]) -> list[tuple[int, ...]]:
    """A table's rows as value-index tuples (a row with a value outside a field's domain matches no record: left
    out), kept in ``memo`` by the relation's identity: its check and its narrowing read the same list."""
    key = ("table rows", id(rel))
    hit = memo.get(key)
    if hit is None or hit[0] is not rel:
        rows = []
        for row in rel.rows:
            try:
                rows.append(tuple(fields[p].index(v) for p, v in zip(rel.fields, row)))
            except KeyError:
                continue
        hit = memo[key] = (rel, rows)  # the relation is kept with its rows, so its id stays its own
    return hit[1]  # type: ignore[no-any-return]


def _column(col: Any, memo: dict[Any, Any]) -> Any:
    """A :func:`weights` column as an int64 array (``None`` past :data:`_NARROW_LIMIT`), kept in ``memo`` by the
    column's identity: the relations of a declaration share their columns (a meeting's start time: a dozen)."""
    import numpy as np

    key = ("narrow column", id(col))
    hit = memo.get(key)
    if hit is None or hit[0] is not col:
        try:
            arr = np.asarray(col, dtype=np.int64)
        except OverflowError:
            arr = None
        if arr is not None and arr.size and int(np.abs(arr).max()) >= _NARROW_LIMIT:
            arr = None
        hit = memo[key] = (col, arr)  # the column is kept with its array, so its id stays its own
    return hit[1]


def _vcompare(a: Any, op: str, b: int) -> Any:
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    raise ValueError(op)
