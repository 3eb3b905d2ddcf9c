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

from .encoders.base import weights
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
        rows = set()
        for row in rel.rows:  # a row with a value outside a field's domain matches no record
            try:
                rows.add(tuple(fields[p].index(v) for p, v in zip(paths, row)))
            except KeyError:
                continue
        allow = rel.allow
        return lambda idx, vals: (tuple(idx[p] for p in paths) in rows) == allow
    if kind is Compare and is_path(rel.left) != is_path(rel.right):
        path, const, flip = (rel.left, rel.right, False) if is_path(rel.left) else (rel.right, rel.left, True)
        col = [compare(const, rel.op, v) if flip else compare(v, rel.op, const) for v in fields[path].values]
        return lambda idx, vals: col[idx[path]]
    return lambda idx, vals: bool(rel.check(vals))
