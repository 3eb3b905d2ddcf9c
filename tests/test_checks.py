"""Relations compiled to value indices (``factorspec_cp.checks``) against their own ``check``, on the random
declarations of ``tests/test_exactness.py`` (every kind, nested implies/any, mapped terms) and random records."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings

import factorspec_cp as fs
from factorspec_cp.checks import compiled
from factorspec_cp.repair import Repairer, convex_shift
from factorspec_cp.witnesses import Known


def _load(name: str, file: str) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


exactness = _load("factorspec_checks_exactness", "test_exactness.py")


@settings(max_examples=150, **exactness.SETTINGS)
@given(exactness.declarations())
def test_compiled_checks_equal_relation_checks(doc: dict[str, Any]) -> None:
    spec = fs.Spec.from_json(doc)
    fields = spec.fields
    rnd = random.Random(repr(doc))
    checks = [(inst.relation, compiled(inst.relation, fields, {})) for inst in spec.instances]
    for _ in range(40):
        idx = {p: rnd.randrange(f.size) for p, f in fields.items()}
        vals = {p: fields[p].values[k] for p, k in idx.items()}
        for rel, check in checks:
            assert check(idx, vals) == bool(rel.check(vals)), (rel, vals)


def _shifted(idx: dict[str, int], group: list[str], d: int, fields: Any) -> dict[str, int] | None:
    out = dict(idx)
    for p in group:
        k = idx[p] + d
        if not 0 <= k < fields[p].size:
            return None
        out[p] = k
    return out


@settings(max_examples=120, **exactness.SETTINGS)
@given(exactness.declarations())
def test_convex_shifts_and_galloped_repairs_equal_brute_force(doc: dict[str, Any]) -> None:
    """``repair.convex_shift`` (a relation's valid shifts of some fields form one interval) against every shift,
    and the runs a repair adds (galloped where every relation is convex) against the records they stand for: each
    one valid, and a convex move's run the whole interval of valid shifts."""
    spec = fs.Spec.from_json(doc)
    fields = spec.fields
    insts = list(spec.instances)
    paths = [p for p in fields if any(p in i.scope for i in insts)]
    checks = [compiled(i.relation, fields, {}) for i in insts]
    rnd = random.Random(repr(doc))

    def holds(c: Any, idx: dict[str, int]) -> bool:
        return bool(c(idx, {p: fields[p].values[k] for p, k in idx.items()}))

    bases = []
    for _ in range(400):
        idx = {p: rnd.randrange(fields[p].size) for p in fields}
        if all(holds(c, idx) for c in checks):
            bases.append(idx)
            if len(bases) >= 4:
                break
    rep = Repairer(spec, insts, paths)
    memo: dict[Any, Any] = {}
    for idx in bases:
        for p in paths:
            n = fields[p].size
            groups = [[p], [p, *rep.siblings[p]]] if rep.siblings.get(p) else [[p]]
            whole = {}
            for group in groups:
                convex = True
                for inst, c in zip(insts, checks):
                    if not set(group) & set(inst.scope):
                        continue
                    claim = convex_shift(inst.relation, set(group), fields, memo)
                    ok = [d for d in range(-n, n) if (r := _shifted(idx, group, d, fields)) and holds(c, r)]
                    if claim:
                        assert ok == list(range(ok[0], ok[-1] + 1)), (inst.label, group, ok)
                    convex = convex and claim
                valid = [d for d in range(-n, n)
                         if (r := _shifted(idx, group, d, fields)) and all(holds(c, r) for c in checks)]
                lo = hi = 0
                while lo - 1 in valid:
                    lo -= 1
                while hi + 1 in valid:
                    hi += 1
                whole[tuple(paths.index(q) for q in group)] = (convex, lo, hi)
            runs: list[tuple[tuple[int, ...], int, int]] = []
            base = tuple(idx[q] for q in paths)
            rep.repair(p, base, [], Known(n), lambda pos, a, b, runs=runs: runs.append((pos, a, b)), steps=0,
                       tries=1)
            for pos, a, b in runs:
                group = [paths[k] for k in pos]
                for d in range(a, b + 1):
                    r = _shifted(idx, group, d, fields)
                    assert r is not None and all(holds(c, r) for c in checks), (group, d)
                convex, lo, hi = whole[pos]
                if convex:
                    assert (a, b) == (lo, hi), (group, (a, b), (lo, hi))
            for pos, (convex, lo, hi) in whole.items():  # a convex move with valid shifts always adds its run
                if convex and (lo or hi):
                    assert any(r[0] == pos for r in runs), (pos, lo, hi)


def test_convex_shift_examples() -> None:
    spec = fs.Spec({"type": "object", "required": ["x", "y", "on"], "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 20}, "y": {"type": "integer", "minimum": 0, "maximum": 20},
        "on": {"type": "boolean"}}},
        [fs.Implies({"field": "/on", "op": "==", "value": True}, fs.Linear([(1, "/y"), (-1, "/x")], ">=", 3)),
         fs.Compare("/x", "!=", "/y"), fs.Compare("/x", "<=", 12), fs.Compare("/x", "!=", 5)])
    rels = [i.relation for i in spec.instances]
    f = spec.fields
    assert convex_shift(rels[0], {"/x"}, f, {}) and convex_shift(rels[0], {"/x", "/y"}, f, {})
    assert not convex_shift(rels[0], {"/on"}, f, {})  # the condition moves
    assert not convex_shift(rels[1], {"/x"}, f, {})  # != leaves a hole
    assert convex_shift(rels[2], {"/x"}, f, {}) and not convex_shift(rels[3], {"/x"}, f, {})


def test_known_exactly_equals_marking_the_intervals_and_refuting_the_rest() -> None:
    """``Known.exactly`` (a settled field's status written anew from an exact search) against the three passes it
    replaced, on random knowledge that agrees with the answer: witnessed values inside it, refuted ones outside."""
    rnd = random.Random(7)
    for _ in range(300):
        size = rnd.randint(1, 60)
        admissible = sorted(rnd.sample(range(size), rnd.randint(0, size)))
        ivs: list[tuple[int, int]] = []
        for k in admissible:  # (sorted, disjoint intervals, as the search gives)
            if ivs and ivs[-1][1] == k - 1:
                ivs[-1] = (ivs[-1][0], k)
            else:
                ivs.append((k, k))
        before = Known(size)
        for k in range(size):  # what was known before the search: some admissible values witnessed, some others refuted
            if k in admissible and rnd.random() < 0.3:
                before.mark(k, k)
            elif k not in admissible and rnd.random() < 0.3:
                before.refute([(k, k)])
        old, new = Known(size), Known(size)
        for k in (old, new):
            k.status[:] = before.status
            k.known, k.refuted = before.known, before.refuted
        for a, b in ivs:
            old.mark(a, b)
        old.refute([(0, size - 1)])
        new.exactly(ivs)
        assert (new.status, new.known, new.refuted, new.complete) == (old.status, old.known, old.refuted, True)
        assert new.known_indices() == admissible
