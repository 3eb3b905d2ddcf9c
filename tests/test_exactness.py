"""Exactness of every backend against an independent brute force, on random small declarations.

Hypothesis generates well-typed declarations (2-8 fields with small domains, sometimes a fixed-length array of
objects read through ``*`` and ``{i}``/``{i+1}``/``{i-1}`` templates; 1-4 relations of every kind, nested
``implies``/``any``, mapped terms, forbid tables, objectives with ``require: optimal``, unsatisfiable ones too).
``tests/bruteforce.py`` enumerates every record and evaluates the relations' JSON itself (no library code), and
for each backend ("sat", "cpsat", "csp") we check:

- ``admissible(path)`` for every field equals the brute-force admissible set (in domain order), under a random
  partial assignment; ``certain()`` equals the brute-force singleton fields;
- ``push()``/``assign``/``pop()`` restores the admissible sets;
- an unsatisfiable declaration raises ``UnsatisfiableDeclaration`` at ``spec.session()``, with a minimal conflict;
- ``explain(path, value)`` for an inadmissible value is a minimal conflict (deletion-minimal, checked by brute
  force over the relations and assignments it names);
- ``spec.solutions()`` yields exactly the brute-force valid records.

Known library bugs are pinned by small ``xfail(strict=True)`` tests at the end of the file.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import factorspec_cp as fs


def _load_bruteforce() -> Any:
    name = "factorspec_exactness_bruteforce"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("bruteforce.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bf_mod = _load_bruteforce()
BruteForce = bf_mod.BruteForce
jeq = bf_mod.jeq
key_of = bf_mod.key_of

BACKENDS = ("sat", "cpsat", "csp")
OPS = ("==", "!=", "<", "<=", ">", ">=")
ORDER_OPS = ("<", "<=", ">", ">=")
PRODUCT_BUDGET = 1500  # records per declaration, so the brute force is instant
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])


# -- generating declarations ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """Something a relation may name: a concrete path, a template path (``{i}``) or a ``*`` path (``width`` > 1).

    ``typ`` is "int", "bool", "str" or "mixed" (an enum of integers and booleans, so ``1`` and ``true`` both)."""

    path: str
    typ: str
    values: tuple[Any, ...]
    width: int = 1

    @property
    def numeric(self) -> bool:
        return self.typ != "str"


def _eq_compatible(a: Entry, b: Entry) -> bool:
    """Fields ``compare`` may test with ==/!=. Mixed int/bool enums are left out: see the xfail test below."""
    return a.typ == b.typ and a.typ != "mixed"


@st.composite
def scalar_schema(draw: Any, item: bool = False) -> tuple[dict[str, Any], str, tuple[Any, ...]]:
    kinds = ["int", "int", "bool", "str", "str"] + ([] if item else ["mixed", "const", "multiple"])
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        lo = draw(st.integers(0, 2) if item else st.integers(-2, 2))
        hi = lo + draw(st.integers(1, 3))
        return {"type": "integer", "minimum": lo, "maximum": hi}, "int", tuple(range(lo, hi + 1))
    if kind == "multiple":
        hi = draw(st.integers(3, 6))
        return ({"type": "integer", "minimum": 0, "maximum": hi, "multipleOf": 2}, "int",
                tuple(range(0, hi + 1, 2)))
    if kind == "bool":
        return {"type": "boolean"}, "bool", (False, True)
    if kind == "str":
        vals = tuple(draw(st.lists(st.sampled_from(["red", "green", "blue", "gray"]), min_size=2, max_size=4,
                                   unique=True)))
        return {"enum": list(vals)}, "str", vals
    if kind == "mixed":
        vals = draw(st.sampled_from([(0, 1, True), (True, 0, False, 1), (1, True)]))
        return {"enum": list(vals)}, "mixed", vals
    const = draw(st.sampled_from(["fixed", 2]))
    return {"const": const}, ("str" if isinstance(const, str) else "int"), (const,)


@dataclass
class Pools:
    """What relations of a declaration may name."""

    plain: list[Entry]  # concrete fields
    items: list[Entry]  # item fields of the array, as "/items/{i}/name" (values of the item field)
    stars: list[Entry]  # "/items/*/name"


def _size(entries: list[Entry]) -> int:
    n = 1
    for e in entries:
        n *= len(e.values)
    return n


@st.composite
def schemas(draw: Any) -> tuple[dict[str, Any], Pools, int]:
    props: dict[str, Any] = {}
    plain: list[Entry] = []
    items: list[Entry] = []
    stars: list[Entry] = []
    n = 0
    if draw(st.integers(0, 9)) < 4:  # a fixed-length array of objects
        n = draw(st.sampled_from([2, 2, 3]))
        item_props: dict[str, Any] = {}
        for name in ("s", "u")[:draw(st.integers(1, 2))]:
            schema, typ, vals = draw(scalar_schema(item=True))
            item_props[name] = schema
            items.append(Entry(f"/items/{{i}}/{name}", typ, vals))
            stars.append(Entry(f"/items/*/{name}", typ, vals, width=n))
        if _size(items) ** n > PRODUCT_BUDGET:  # too many records: keep one item field
            del item_props["u"], items[1], stars[1]
        props["items"] = {"type": "array", "minItems": n, "maxItems": n, "items": {
            "type": "object", "additionalProperties": False, "required": list(item_props), "properties": item_props}}
        for k in range(n):
            for e in items:
                plain.append(Entry(e.path.replace("{i}", str(k)), e.typ, e.values))
    product = _size(plain)
    wanted = draw(st.integers(2 if n == 0 else 1, 4))
    for name in ("a", "b", "c", "d")[:wanted]:
        schema, typ, vals = draw(scalar_schema())
        if product * len(vals) > PRODUCT_BUDGET:
            continue
        product *= len(vals)
        props[name] = schema
        plain.append(Entry(f"/{name}", typ, vals))
    if len(plain) < 2:
        props["z"] = {"type": "boolean"}
        plain.append(Entry("/z", "bool", (False, True)))
    # record order: properties in order, array elements by index
    order = {p: k for k, p in enumerate(props)}
    plain.sort(key=lambda e: (order[e.path.split("/")[1]], e.path))
    schema = {"type": "object", "additionalProperties": False, "required": list(props), "properties": props}
    return schema, Pools(plain, items, stars), n


def _loose_value(draw: Any, e: Entry) -> Any:
    """A value of the entry's type, sometimes outside its domain."""
    if draw(st.integers(0, 9)) < 8:
        return draw(st.sampled_from(e.values))
    if e.typ == "str":
        return "purple"
    if e.typ == "bool":
        return draw(st.booleans())
    if e.typ == "mixed":
        return draw(st.sampled_from([0, 1, 2, True, False]))
    # integers outside an integer field's range crash the library: see test_out_of_range_integer_constants
    return draw(st.sampled_from(e.values))


def _term(draw: Any, e: Entry) -> list[Any]:
    coef = draw(st.sampled_from([1, -1, 2, -2, 3, 0]))
    if e.numeric and draw(st.integers(0, 9)) < 7:
        return [coef, e.path]
    mapping = {key_of(v): draw(st.integers(-3, 3)) for v in e.values}
    if draw(st.integers(0, 4)) == 0:
        mapping["unused"] = 7  # keys outside the domain are harmless
    return [coef, e.path, mapping]


def _term_range(term: list[Any], e: Entry) -> tuple[int, int]:
    if len(term) == 3:
        xs = [term[0] * term[2][key_of(v)] for v in e.values]
    else:
        xs = [term[0] * int(v) for v in e.values]
    return min(xs) * e.width, max(xs) * e.width


def _terms(draw: Any, entries: list[Entry], k_max: int = 3) -> tuple[list[list[Any]], int, int, int]:
    """Terms, their sum's bounds, and the sum at one random choice of values (a likely achievable right side)."""
    chosen = draw(st.lists(st.sampled_from(entries), min_size=1, max_size=k_max))
    terms = [_term(draw, e) for e in chosen]
    lo = hi = at = 0
    for t, e in zip(terms, chosen, strict=True):
        a, b = _term_range(t, e)
        lo, hi = lo + a, hi + b
        for _ in range(e.width):
            v = draw(st.sampled_from(e.values))
            at += t[0] * (t[2][key_of(v)] if len(t) == 3 else int(v))
    return terms, lo, hi, at


class Gen:
    """Draws relations over one pool (concrete paths, or one template instantiation scheme)."""

    def __init__(self, draw: Any, single: list[Entry], many: list[Entry]):
        self.draw = draw
        self.single = single  # entries naming one field (places that take one path)
        self.many = many  # plus "*" entries (places that take lists)

    def pick(self, pred: Any = lambda e: True, pool: list[Entry] | None = None) -> Entry | None:
        cands = [e for e in (pool if pool is not None else self.single) if pred(e)]
        return self.draw(st.sampled_from(cands)) if cands else None

    def relation(self, depth: int = 0) -> dict[str, Any]:
        kinds = ["linear", "table", "all_different", "compare", "element", "no_overlap", "count"]
        if depth < 2:
            kinds += ["implies", "implies", "any"]
        kind = self.draw(st.sampled_from(kinds))
        return getattr(self, kind)(depth) or self.linear(depth)  # a kind the pool cannot serve: linear

    def all_different(self, depth: int) -> dict[str, Any] | None:
        stars = [e for e in self.many if e.width > 1]
        if stars and self.draw(st.integers(0, 2)) == 0:  # one "*" path: all elements of the array
            return {"kind": "all_different", "fields": [self.draw(st.sampled_from(stars)).path]}
        if len(self.single) < 2:
            return None
        entries = self.draw(st.lists(st.sampled_from(self.single), min_size=2, max_size=3, unique=True))
        return {"kind": "all_different", "fields": [e.path for e in entries]}

    def table(self, depth: int) -> dict[str, Any]:
        entries = self.draw(st.lists(st.sampled_from(self.many), min_size=1, max_size=3, unique=True))
        mode = self.draw(st.sampled_from([None, "allow", "forbid", "forbid"]))
        rows = []
        for _ in range(self.draw(st.integers(0 if mode == "forbid" else 1, 6))):
            rows.append([_loose_value(self.draw, e) for e in entries for _ in range(e.width)])
        rel: dict[str, Any] = {"kind": "table", "fields": [e.path for e in entries], "rows": rows}
        if mode is not None:
            rel["mode"] = mode
        return rel

    def linear(self, depth: int) -> dict[str, Any]:
        terms, lo, hi, at = _terms(self.draw, self.many)
        mid = (lo + hi) // 2
        rhs = self.draw(st.sampled_from([mid, at, mid + 1, at, mid - 1, lo, hi, lo - 1, hi + 1]))
        return {"kind": "linear", "terms": terms, "op": self.draw(st.sampled_from(OPS)), "rhs": rhs}

    def compare(self, depth: int) -> dict[str, Any] | None:
        left = self.pick()
        assert left is not None
        op = self.draw(st.sampled_from(OPS))
        if op in ("==", "!=") and left.typ == "mixed":
            op = self.draw(st.sampled_from(ORDER_OPS))
        if op in ORDER_OPS:
            if not left.numeric:
                return None
            right_e = self.pick(lambda e: e.numeric and e != left) if self.draw(st.booleans()) else None
            right: Any = right_e.path if right_e else self.draw(
                st.integers(min(map(int, left.values)) - 1, max(map(int, left.values)) + 1))
        else:
            right_e = self.pick(lambda e: _eq_compatible(left, e) and e != left) if self.draw(st.booleans()) else None
            right = right_e.path if right_e else self.draw(st.sampled_from(left.values))
        sides = [left.path, right]
        if right_e is None and self.draw(st.booleans()):
            sides.reverse()  # the constant on the left
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op) if self.draw(st.booleans()) else op
        return {"kind": "compare", "left": sides[0], "op": op, "right": sides[1]}

    def literal(self) -> dict[str, Any]:
        e = self.pick()
        assert e is not None
        ops = ["==", "!=", "in", "not in"] + (list(ORDER_OPS) if e.numeric else [])
        op = self.draw(st.sampled_from(ops))
        if op in ("==", "!="):
            value: Any = self.draw(st.sampled_from(e.values))
        elif op in ORDER_OPS:
            value = self.draw(st.integers(min(map(int, e.values)) - 1, max(map(int, e.values)) + 1))
        else:
            value = [_loose_value(self.draw, e) for _ in range(self.draw(st.integers(1, 3)))]
        return {"field": e.path, "op": op, "value": value}

    def implies(self, depth: int) -> dict[str, Any]:
        shape = self.draw(st.integers(0, 3))
        cond: Any = self.literal() if shape < 2 else [self.literal() for _ in range(shape - 1)]
        return {"kind": "implies", "if": cond, "then": self.relation(depth + 1)}

    def any(self, depth: int) -> dict[str, Any]:
        return {"kind": "any", "relations": [self.relation(depth + 1) for _ in range(self.draw(st.integers(2, 3)))]}

    def element(self, depth: int) -> dict[str, Any] | None:
        index = self.pick()
        assert index is not None
        present = self.draw(st.lists(st.sampled_from(index.values), min_size=1, max_size=len(index.values),
                                     unique_by=key_of))
        target_e = self.pick(lambda e: e.numeric) if self.draw(st.booleans()) else None
        if target_e is not None:
            target: Any = target_e.path
            reachable = [int(v) for v in target_e.values]
        else:
            terms, lo, hi, at = _terms(self.draw, self.many, 2)
            target = {"terms": terms}
            c = 0
            if self.draw(st.booleans()):
                c = target["constant"] = self.draw(st.integers(-2, 2))
            reachable = [at + c, lo + c, hi + c]
        mapping = {key_of(v): self.draw(st.sampled_from(reachable)) + self.draw(st.sampled_from([0, 0, 0, 1]))
                   for v in present}
        if self.draw(st.integers(0, 4)) == 0:
            mapping["elsewhere"] = 1
        return {"kind": "element", "index": index.path, "map": mapping, "target": target}

    def no_overlap(self, depth: int) -> dict[str, Any] | None:
        stars = [e for e in self.many if e.width > 1 and e.numeric]
        if stars and self.draw(st.booleans()):
            s, e = self.draw(st.sampled_from(stars)), self.draw(st.sampled_from(stars))
            return {"kind": "no_overlap", "intervals": [[s.path, e.path]]}
        numeric = [e for e in self.single if e.numeric]
        if len(numeric) < 2:
            return None
        intervals = []
        for _ in range(self.draw(st.integers(2, 3))):
            intervals.append([self.draw(st.sampled_from(numeric)).path, self.draw(st.sampled_from(numeric)).path])
        return {"kind": "no_overlap", "intervals": intervals}

    def count(self, depth: int) -> dict[str, Any]:
        entries = self.draw(st.lists(st.sampled_from(self.many), min_size=1, max_size=4, unique=True))
        candidates = [v for e in entries for v in e.values]
        value = self.draw(st.sampled_from(candidates))
        # an integer outside an integer field's range crashes the library: see test_out_of_range_integer_constants
        entries = [e for e in entries if e.typ != "int" or isinstance(value, (bool, str))
                   or any(jeq(value, v) for v in e.values)]
        width = sum(e.width for e in entries)
        return {"kind": "count", "fields": [e.path for e in entries], "value": value,
                "op": self.draw(st.sampled_from(OPS)), "rhs": self.draw(st.integers(0, width + 1))}


@st.composite
def declarations(draw: Any) -> dict[str, Any]:
    """A well-typed declaration (JSON form) whose records number at most PRODUCT_BUDGET."""
    schema, pools, n = draw(schemas())
    relations = []
    for k in range(draw(st.sampled_from([1, 2, 2, 3, 3, 4]))):
        if pools.items and draw(st.integers(0, 9)) < 4:  # a template relation: {i} with {i+1} or {i-1}
            d = draw(st.sampled_from(["{i+1}", "{i-1}"]))
            tmpl = pools.items + [Entry(e.path.replace("{i}", d), e.typ, e.values) for e in pools.items]
            scalars = [e for e in pools.plain if not e.path.startswith("/items/")]
            single = tmpl + scalars
            gen = Gen(draw, single, single + pools.stars)
        else:
            gen = Gen(draw, pools.plain, pools.plain + pools.stars)
        rel = gen.relation()
        if draw(st.booleans()):
            rel["name"] = f"rule {k}"
        relations.append(rel)
    x: dict[str, Any] = {"relations": relations}
    if draw(st.integers(0, 9)) < 3:
        require = draw(st.sampled_from(["optimal", "optimal", "optimal", "any"]))
        levels = []
        for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):  # one objective, or lexicographic levels
            terms, _, _, _ = _terms(draw, pools.plain + pools.stars)
            levels.append({draw(st.sampled_from(["minimize", "maximize"])): terms, "require": require})
        x["objective"] = levels[0] if len(levels) == 1 and draw(st.booleans()) else levels
    return {**schema, "x-factorspec": x}


@st.composite
def cases(draw: Any) -> tuple[dict[str, Any], dict[str, Any], tuple[str, Any]]:
    """A declaration, a partial assignment of 0-2 fields, and one more (field, value) to push."""
    doc = draw(declarations())
    doms = bf_mod.domains({k: v for k, v in doc.items() if k != "x-factorspec"})
    paths = list(doms)
    assigned = draw(st.lists(st.sampled_from(paths), max_size=2, unique=True))
    assignment = {p: draw(st.sampled_from(doms[p])) for p in assigned}
    rest = [p for p in paths if p not in assignment] or paths
    extra_path = draw(st.sampled_from(rest))
    return doc, assignment, (extra_path, draw(st.sampled_from(doms[extra_path])))


# -- checks ---------------------------------------------------------------------------------------------------------


def _same_values(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(jeq(x, y) for x, y in zip(a, b, strict=True))


def _flat(record: Any, paths: list[str]) -> tuple[str, ...]:
    out = []
    for p in paths:
        cur = record
        for tok in p.split("/")[1:]:
            cur = cur[int(tok)] if isinstance(cur, list) else cur[tok]
        out.append(json.dumps(cur))
    return tuple(out)


def _key(inst: Any) -> tuple[int, Any]:
    if inst.source >= 0:
        return (inst.source, inst.i)
    level = inst.where.rsplit("/", 1)[-1]  # "#/x-factorspec/objective/k" for a level of a list
    return (-1, int(level) if level.isdigit() else None)


def assert_minimal_conflict(bf: Any, expl: Any, assignment: dict[str, Any],
                            question: tuple[str, Any] | None = None) -> None:
    """``expl`` names relations and assignments that admit no record (with ``question`` fixed), and dropping any
    one of them admits one: a deletion-minimal conflict, judged by the brute force."""
    assert expl.conflict, str(expl)
    keys = [_key(inst) for inst in expl.relations]
    assert len(set(keys)) == len(keys) and all(k in bf.masks for k in keys), (keys, list(bf.masks))
    fixes = dict(expl.assignments)
    for p, v in fixes.items():
        assert p in assignment and jeq(assignment[p], v), (p, v, assignment)
    base = dict(fixes)
    if question is not None:
        base[question[0]] = question[1]
    assert bf.select(keys, base) == 0, f"not a conflict:\n{expl}"
    for k in keys:
        assert bf.select([q for q in keys if q != k], base) != 0, f"not minimal: {k} is redundant\n{expl}"
    for p in fixes:
        assert bf.select(keys, {q: v for q, v in base.items() if q != p}) != 0, \
            f"not minimal: assignment {p} is redundant\n{expl}"


def check_session(spec: fs.Spec, bf: Any, backend: str, assignment: dict[str, Any],
                  extra: tuple[str, Any]) -> None:
    s = spec.session(backend)
    assert s.backend == backend

    def expect(asg: dict[str, Any]) -> dict[str, list[Any]]:
        return {p: bf.admissible(p, asg) for p in bf.paths}

    def compare_all(asg: dict[str, Any], what: str) -> None:
        want = expect(asg)
        for p in bf.paths:
            got = s.admissible(p)
            assert _same_values(got, want[p]), f"{backend} {what}: admissible({p}) = {got}, brute force {want[p]}"
            mask = s.admissible_mask(p)  # the same set, one byte per domain value (what decoders key rows on)
            assert [bool(b) for b in mask] == [any(jeq(v, w) for w in want[p]) for v in bf.domains[p]], \
                f"{backend} {what}: admissible_mask({p}) = {mask!r}, brute force {want[p]}"
        certain = s.certain()
        want_certain = {p: vs[0] for p, vs in want.items() if len(vs) == 1}
        assert set(certain) == set(want_certain) and all(jeq(certain[p], want_certain[p]) for p in certain), \
            f"{backend} {what}: certain() = {certain}, brute force {want_certain}"

    # first under the empty assignment: a field with one value there answers every later question with it where
    # the assignment is satisfiable (Session._root), and with nothing where it is not
    compare_all({}, "under the empty assignment")
    for p, v in assignment.items():
        s.assign(p, v)
    compare_all(assignment, f"under {assignment}")
    s.push()
    path, value = extra
    if path in assignment:
        value = assignment[path]
    s.assign(path, value)
    compare_all({**assignment, path: value}, f"after push + assign {path}={value!r}")
    s.pop()
    assert s.assignment == assignment
    compare_all(assignment, "after pop")
    s.close()


def _kinds(rel: dict[str, Any]) -> list[str]:
    out = [rel["kind"]]
    if rel["kind"] == "implies":
        out += _kinds(rel["then"])
    if rel["kind"] == "any":
        out += [k for r in rel["relations"] for k in _kinds(r)]
    return out


# -- the properties -------------------------------------------------------------------------------------------------


@settings(max_examples=300, **SETTINGS)
@given(cases())
def test_admissible_certain_and_solutions_match_brute_force(case: Any) -> None:
    doc, assignment, extra = case
    bf = BruteForce(doc)
    spec = fs.Spec.from_json(doc)
    # the library reads the same fields, in the same order, with the same domains
    assert list(spec.fields) == bf.paths
    for p, f in spec.fields.items():
        assert _same_values(list(f.values), bf.domains[p]), p
    event(f"records: {'<100' if len(bf.records) < 100 else '<500' if len(bf.records) < 500 else '>=500'}")
    event("objective" if "objective" in doc["x-factorspec"] else "no objective")
    if bf.count() == 0:
        event("unsatisfiable declaration")
        for backend in BACKENDS:
            with pytest.raises(fs.UnsatisfiableDeclaration) as err:
                spec.session(backend)
            expl = err.value.explanation
            assert expl is not None and expl.relations, f"{backend}: the error names no relation"
            assert_minimal_conflict(bf, expl, {})
        try:
            assert list(spec.solutions()) == []
        except fs.UnsatisfiableDeclaration:
            pass  # with require: optimal there is no optimum to enumerate
        return
    for backend in BACKENDS:
        check_session(spec, bf, backend, assignment, extra)
    got = [_flat(r, bf.paths) for r in spec.solutions()]
    want = {tuple(json.dumps(r[p]) for p in bf.paths) for r in bf.valid()}
    assert set(got) == want
    # spec.solutions() may repeat records (see test_solutions_count_has_no_duplicates); distinct ones must match
    assert len(set(got)) == bf.count()


@settings(max_examples=300, **SETTINGS)
@given(declarations(), st.randoms(use_true_random=False))
def test_narrowing_refutes_only_what_a_relation_rules_out(doc: Any, rnd: Any) -> None:
    """``checks.narrowing`` (what a session refutes without a solve) against the relation's own ``check`` over
    every completion of the fields it reads: a value it rules out admits no completion, and where every other field
    is assigned it rules out exactly the values the relation refuses."""
    from factorspec_cp.checks import compile_narrowing
    from factorspec_cp.repair import compile_check

    spec = fs.Spec.from_json(doc)
    fields = spec.fields
    for inst in spec.instances:
        rel, scope = inst.relation, list(dict.fromkeys(inst.scope))
        narrow = compile_narrowing(spec, rel)
        for path in scope:
            others = [p for p in scope if p != path]
            given_ = [p for p in others if rnd.random() < 0.7]
            fixed = {p: rnd.randrange(fields[p].size) for p in given_}
            free = [p for p in others if p not in fixed]
            if _product(fields[p].size for p in free) * fields[path].size > 4000:
                continue
            mask = narrow(path, fixed)
            if mask is None:
                continue
            assert mask.shape == (fields[path].size,) and mask.dtype == bool
            event("narrowed exactly" if not free else "narrowed by projection")
            values = {p: fields[p].values[k] for p, k in fixed.items()}
            for k, v in enumerate(fields[path].values):
                ok = any(rel.check({**values, path: v, **dict(zip(free, combo))})
                         for combo in _combos([fields[p].values for p in free]))
                if not mask[k]:
                    assert not ok, f"{rel}: {path}={v!r} ruled out under {values}, yet a completion holds"
                elif not free:
                    assert ok, f"{rel}: {path}={v!r} kept under {values}, but the relation refuses it"
            # the repairer's compiled check agrees on full assignments (the same semantics on value indices)
            if not free:
                check = compile_check(spec, rel)[1]
                for k in range(fields[path].size):
                    idx = {**fixed, path: k}
                    assert check(idx, {p: fields[p].values[j] for p, j in idx.items()}) == bool(mask[k])


def test_narrowing_answers_where_the_assignment_decides() -> None:
    """Hand-checked cases of each kind (so the random test above cannot pass by answering ``None`` everywhere)."""
    from factorspec_cp.checks import compile_narrowing

    spec = fs.Spec.from_json({"type": "object", "required": ["a", "b", "c", "d"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 5}, "b": {"type": "integer", "minimum": 0, "maximum": 5},
        "c": {"type": "boolean"}, "d": {"enum": ["x", "y", "z"]}}, "x-factorspec": {"relations": [
            {"kind": "linear", "terms": [[1, "/a"], [2, "/b"]], "op": "<=", "rhs": 6},
            {"kind": "implies", "if": {"field": "/c", "op": "==", "value": True},
             "then": {"kind": "compare", "left": "/a", "op": ">=", "right": 4}},
            {"kind": "any", "relations": [{"kind": "compare", "left": "/a", "op": "==", "right": 0},
                                          {"kind": "linear", "terms": [[1, "/a"], [-1, "/b"]], "op": "==", "rhs": 1}]},
            {"kind": "table", "fields": ["/d", "/b"], "rows": [["x", 1], ["y", 2], ["x", 3]]}]}})
    lin, imp, either, table = (compile_narrowing(spec, i.relation) for i in spec.instances)

    def ids(m: Any) -> list[int] | None:
        return None if m is None else m.nonzero()[0].tolist()

    assert ids(lin("/a", {"/b": 2})) == [0, 1, 2] and ids(lin("/b", {"/a": 5})) == [0] and lin("/a", {}) is None
    assert ids(imp("/a", {"/c": 1})) == [4, 5] and imp("/a", {"/c": 0}) is None and imp("/a", {}) is None
    assert ids(imp("/c", {"/a": 2})) == [0]  # the condition read on the field itself: c must be false
    assert ids(either("/a", {"/b": 3})) == [0, 4] and either("/a", {}) is None
    assert ids(table("/b", {})) == [1, 2, 3] and ids(table("/b", {"/d": 0})) == [1, 3]
    assert ids(table("/d", {})) == [0, 1]


def _product(sizes: Any) -> int:
    out = 1
    for n in sizes:
        out *= n
    return out


def _combos(domains: list[list[Any]]) -> Any:
    import itertools
    return itertools.product(*domains)


@settings(max_examples=200, **SETTINGS)
@given(cases())
def test_explain_gives_minimal_conflicts(case: Any) -> None:
    doc, assignment, _ = case
    bf = BruteForce(doc)
    if bf.count() == 0:
        event("unsatisfiable declaration")
        return  # covered by the test above
    spec = fs.Spec.from_json(doc)
    stuck = bf.count(assignment) == 0
    # inadmissible (path, value) questions about unassigned fields: spread over the fields, at most three
    questions = [(p, v) for p in bf.paths if p not in assignment
                 for v in bf.domains[p] if not any(jeq(v, w) for w in bf.admissible(p, assignment))]
    picks = questions[::max(1, len(questions) // 3)][:3]
    event(f"questions: {len(picks)}" + (", stuck" if stuck else ""))
    for backend in BACKENDS:
        s = spec.session(backend)
        for p, v in assignment.items():
            s.assign(p, v)
        if stuck:
            assert_minimal_conflict(bf, s.explain(), assignment)
        for p, v in picks:
            assert_minimal_conflict(bf, s.explain(p, v), assignment, (p, v))
        # and an admissible value is no conflict
        for p in bf.paths[:2]:
            ok = bf.admissible(p, assignment)
            if ok and p not in assignment:
                assert not s.explain(p, ok[0]).conflict
        s.close()


def test_generator_covers_every_kind_and_unsatisfiable_declarations() -> None:
    """The strategy draws every kind (nested too), templates, stars, mapped terms, objectives, and both satisfiable
    and unsatisfiable declarations."""
    seen: Counter[str] = Counter()

    @settings(max_examples=150, **SETTINGS)
    @given(declarations())
    def collect(doc: dict[str, Any]) -> None:
        x = doc["x-factorspec"]
        text = json.dumps(x)
        for rel in x["relations"]:
            seen.update(_kinds(rel))
            seen.update(f"nested {k}" for k in _kinds(rel)[1:])
        seen.update(f for f in ("{i+1}", "{i-1}", "/*/", '"forbid"', '"unused"', '"minimize"', '"maximize"',
                                '"optimal"', '"in"', '"not in"') if f in text)
        seen["array"] += "items" in doc["properties"]
        seen["unsat" if BruteForce(doc).count() == 0 else "sat"] += 1

    collect()
    kinds = ["all_different", "table", "linear", "compare", "implies", "any", "element", "no_overlap", "count"]
    missing = [k for k in kinds + [f"nested {k}" for k in kinds if k != "any"] if seen[k] == 0]
    assert not missing, (missing, seen)
    for feature in ("{i+1}", "{i-1}", "/*/", '"forbid"', '"unused"', '"minimize"', '"maximize"', '"optimal"',
                    '"in"', '"not in"', "array", "unsat", "sat"):
        assert seen[feature] > 0, (feature, seen)
    assert seen["unsat"] >= 5 and seen["sat"] >= 75, seen


# -- known bugs, pinned -----------------------------------------------------------------------------------------------

ANY_DOC = {"type": "object", "additionalProperties": False, "required": ["a", "b"], "properties": {
    "a": {"type": "integer", "minimum": 0, "maximum": 2}, "b": {"type": "integer", "minimum": 0, "maximum": 2}},
    "x-factorspec": {"relations": [{"kind": "any", "relations": [
        {"kind": "compare", "left": "/a", "op": "<=", "right": 1},
        {"kind": "compare", "left": "/b", "op": "<=", "right": 1}]}]}}


def test_solutions_count_has_no_duplicates() -> None:
    spec = fs.Spec.from_json(ANY_DOC)
    records = [json.dumps(r, sort_keys=True) for r in spec.solutions()]
    assert len(set(records)) == BruteForce(ANY_DOC).count() == 8
    assert len(records) == 8  # actual: 16, each record with a and b both <= 1 twice


MIXED_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["m", "b"], "properties": {
    "m": {"enum": [0, 1, True, False]}, "b": {"type": "boolean"}}}
MIXED_RELATIONS = {
    "/m == /b": {"kind": "compare", "left": "/m", "op": "==", "right": "/b"},
    "/m != /b": {"kind": "compare", "left": "/m", "op": "!=", "right": "/b"},
    "/m == 1": {"kind": "compare", "left": "/m", "op": "==", "right": 1},
    "/m != 0": {"kind": "compare", "left": "/m", "op": "!=", "right": 0},
}


def _mixed(what: str) -> tuple[fs.Spec, Any]:
    doc = {**MIXED_SCHEMA, "x-factorspec": {"relations": [MIXED_RELATIONS[what]]}}
    return fs.Spec.from_json(doc), BruteForce(doc)


@pytest.mark.parametrize("backend", ["sat", "cpsat"])
@pytest.mark.parametrize("what", list(MIXED_RELATIONS))
def test_compare_equality_keeps_true_and_1_apart(what: str, backend: str) -> None:
    spec, bf = _mixed(what)
    s = spec.session(backend)
    s.assign("/b", True)
    # e.g. "/m == /b" with b = true: brute force [True]; actual [1, True]
    assert s.admissible("/m") == bf.admissible("/m", {"/b": True})


@pytest.mark.parametrize("what", list(MIXED_RELATIONS))
def test_compare_equality_keeps_true_and_1_apart_csp(what: str) -> None:
    spec, bf = _mixed(what)
    s = spec.session("csp")
    s.assign("/b", True)
    assert s.admissible("/m") == bf.admissible("/m", {"/b": True})


RANGE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["a", "b"], "properties": {
    "a": {"type": "integer", "minimum": 0, "maximum": 1}, "b": {"type": "integer", "minimum": 0, "maximum": 3}}}
OUT_OF_RANGE = {
    "table row": {"kind": "table", "fields": ["/a"], "rows": [[0], [5]]},
    "in literal": {"kind": "implies", "if": {"field": "/a", "op": "in", "value": [0, 5]},
                   "then": {"kind": "compare", "left": "/a", "op": "==", "right": 0}},
    "count over fields of different ranges": {"kind": "count", "fields": ["/a", "/b"], "value": 2, "op": "==",
                                              "rhs": 1},
}


@pytest.mark.parametrize("what", list(OUT_OF_RANGE))
def test_out_of_range_integer_constants(what: str) -> None:
    doc = {**RANGE_SCHEMA, "x-factorspec": {"relations": [OUT_OF_RANGE[what]]}}
    spec = fs.Spec.from_json(doc)  # actual: ValueError: 5 is not in range
    bf = BruteForce(doc)
    for backend in BACKENDS:
        s = spec.session(backend)
        assert [s.admissible(p) for p in bf.paths] == [bf.admissible(p) for p in bf.paths]


def test_out_of_range_compare_constant_is_a_declaration_error() -> None:
    doc = {**RANGE_SCHEMA, "x-factorspec": {"relations": [{"kind": "compare", "left": "/a", "op": "==", "right": 5}]}}
    with pytest.raises(fs.DeclarationError):  # documented: TypeMismatch, "5 is not in the domain of /a"
        fs.Spec.from_json(doc)


def test_out_of_range_assignment_is_invalid_assignment() -> None:
    s = fs.Spec.from_json(RANGE_SCHEMA).session()
    with pytest.raises(fs.InvalidAssignment):
        s.assign("/a", 5)
