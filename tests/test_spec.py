"""Spec: JSON round-trip, Python classes, pydantic, custom kinds from outside the package, the factor graph."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal as TLiteral

import pytest

import factorspec_cp as fs

DESIGN_EXAMPLE = json.loads(resources.files("factorspec_cp").joinpath("examples/trip.json").read_text())


def test_design_example_round_trips_exactly() -> None:
    doc = copy.deepcopy(DESIGN_EXAMPLE)
    spec = fs.Spec.from_json(doc)
    assert spec.to_json() == DESIGN_EXAMPLE
    assert fs.Spec.from_json(spec.to_json()).to_json() == DESIGN_EXAMPLE
    assert doc == DESIGN_EXAMPLE  # the input is not mutated


def test_every_kind_round_trips() -> None:
    schema = {"type": "object", "required": ["a", "b", "c", "s"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 5},
        "b": {"type": "integer", "minimum": 0, "maximum": 5},
        "c": {"type": "boolean"},
        "s": {"enum": ["x", "y", "z"]}}}
    rels = [
        {"kind": "all_different", "fields": ["/a", "/b"]},
        {"kind": "table", "fields": ["/s", "/a"], "rows": [["x", 1], ["y", 2]], "mode": "forbid", "name": "t"},
        {"kind": "linear", "terms": [[1, "/a"], [2, "/s", {"x": 0, "y": 1, "z": 2}]], "op": "<=", "rhs": 6},
        {"kind": "compare", "left": "/a", "op": "<", "right": "/b"},
        {"kind": "compare", "left": "/s", "op": "!=", "right": "z"},
        {"kind": "implies", "if": [{"field": "/c", "op": "==", "value": True}],
         "then": {"kind": "compare", "left": "/a", "op": ">=", "right": 1}},
        {"kind": "implies", "if": {"field": "/s", "op": "in", "value": ["x", "y"]},
         "then": {"kind": "any", "relations": [{"kind": "compare", "left": "/b", "op": "==", "right": 5},
                                                {"kind": "compare", "left": "/a", "op": "==", "right": 0}]}},
        {"kind": "element", "index": "/s", "map": {"x": 1, "y": 2, "z": 3}, "target": "/b"},
        {"kind": "element", "index": "/s", "map": {"x": 1, "y": 2, "z": 3},
         "target": {"terms": [[1, "/a"]], "constant": 1}},
        {"kind": "no_overlap", "intervals": [["/a", "/b"], ["/b", "/a"]]},
        {"kind": "count", "fields": ["/a", "/b"], "value": 2, "op": "<=", "rhs": 1},
    ]
    doc = dict(schema, **{"x-factorspec": {"relations": rels, "objective": {"maximize": [[1, "/a"]],
                                                                            "require": "any"}}})
    assert fs.Spec.from_json(doc).to_json() == doc


def test_python_classes_build_the_same_spec_as_json() -> None:
    schema = {k: v for k, v in DESIGN_EXAMPLE.items() if k != "x-factorspec"}
    rels = [
        fs.AllDifferent(["/plan/*/city"]),
        fs.Table(["/plan/{i}/city", "/plan/{i+1}/city"],
                 [["Riga", "Manchester"], ["Manchester", "Riga"], ["Manchester", "Split"]]),
        fs.Linear([[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]], "==", 0),
        fs.Implies({"field": "/plan/{i}/city", "op": "==", "value": "Split"},
                   fs.Linear([[1, "/plan/{i}/last_day"], [-1, "/plan/{i}/first_day"]], "==", 5)),
    ]
    spec = fs.Spec(schema, rels, table_budget=100000)
    assert spec.to_json() == DESIGN_EXAMPLE
    from_json = fs.Spec.from_json(DESIGN_EXAMPLE)
    assert [i.describe() for i in spec.instances] == [i.describe() for i in from_json.instances]


def test_templates_instantiate_where_all_paths_exist() -> None:
    spec = fs.Spec.from_json(DESIGN_EXAMPLE)
    by_source: dict[int, list[int | None]] = {}
    for inst in spec.instances:
        by_source.setdefault(inst.source, []).append(inst.i)
    assert by_source == {0: [None], 1: [0, 1], 2: [0, 1], 3: [0, 1, 2]}
    assert spec.instances[0].scope == ["/plan/0/city", "/plan/1/city", "/plan/2/city"]
    assert spec.instances[2].scope == ["/plan/1/city", "/plan/2/city"]


def test_from_pydantic() -> None:
    pydantic = pytest.importorskip("pydantic")
    from typing import Annotated

    class Stay(pydantic.BaseModel):
        city: TLiteral["Riga", "Manchester", "Split"]
        first_day: Annotated[int, pydantic.Field(ge=1, le=15)]
        last_day: Annotated[int, pydantic.Field(ge=1, le=15)]

    class Trip(pydantic.BaseModel):
        plan: Annotated[list[Stay], pydantic.Field(min_length=3, max_length=3)]

    spec = fs.Spec.from_pydantic(Trip, relations=[fs.AllDifferent("/plan/*/city"),
                                                  fs.Compare("/plan/0/city", "==", "Split")])
    assert list(spec.fields) == [f"/plan/{i}/{k}" for i in range(3) for k in ("city", "first_day", "last_day")]
    s = spec.session()
    assert s.admissible("/plan/1/city") == ["Riga", "Manchester"]
    assert s.admissible("/plan/2/last_day") == list(range(1, 16))
    # the record built from a solution validates against the pydantic model itself
    record = next(spec.solutions())
    Trip.model_validate(record)


# A custom kind defined outside the package: "the sum of the fields is even".
@fs.relation_kind("even_sum_test")
@dataclass(frozen=True)
class EvenSum(fs.Relation):
    path_fields = ("fields",)
    fields: list[str]
    name: str | None = None

    def check(self, values: dict) -> bool:
        return sum(int(values[p]) for p in self.fields) % 2 == 0

    def encode_cpsat(self, ctx) -> None:  # type: ignore[no-untyped-def]
        half = ctx.model.NewIntVar(0, 1000, "half")
        ctx.add(sum(ctx.number(p) for p in self.fields) == 2 * half)


def _custom_doc() -> dict:
    return {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 3}, "b": {"type": "integer", "minimum": 0, "maximum": 3}},
        "x-factorspec": {"relations": [
            {"kind": "even_sum_test", "fields": ["/a", "/b"]},
            {"kind": "implies", "if": {"field": "/a", "op": ">=", "value": 2},
             "then": {"kind": "even_sum_test", "fields": ["/a", "/b"], "name": "inner"}}]}}


def test_custom_kind_from_outside_the_package() -> None:
    doc = _custom_doc()
    spec = fs.Spec.from_json(doc)
    assert spec.to_json() == doc
    assert not spec.has_sat_encoding
    s = spec.session()
    assert s.backend == "cpsat" and "SAT" in s.backend_reason
    s.assign("/a", 1)
    assert s.admissible("/b") == [1, 3]
    assert spec.session("csp").admissible("/b") == [0, 1, 2, 3]
    with pytest.raises(fs.BackendUnsupported):
        spec.session("sat")
    assert spec.check_record({"a": 1, "b": 2}) != [] and spec.check_record({"a": 1, "b": 3}) == []
    assert len(list(spec.solutions())) == 8


def test_custom_kind_with_sat_encoding_is_used_by_sat() -> None:
    @fs.relation_kind("at_most_one_true_test")
    @dataclass(frozen=True)
    class AtMostOneTrue(fs.Relation):
        path_fields = ("fields",)
        fields: list[str]
        name: str | None = None

        def check(self, values: dict) -> bool:
            return sum(bool(values[p]) for p in self.fields) <= 1

        def encode_cpsat(self, ctx) -> None:  # type: ignore[no-untyped-def]
            ctx.add(sum(ctx.number(p) for p in self.fields) <= 1)

        def encode_sat(self, ctx) -> None:  # type: ignore[no-untyped-def]
            ctx.add_count(self.fields, True, "<=", 1)

    schema = {"type": "object", "required": ["x", "y", "z"],
              "properties": {k: {"type": "boolean"} for k in "xyz"}}
    spec = fs.Spec(schema, [AtMostOneTrue(["/x", "/y", "/z"])])
    assert spec.session().backend == "sat"
    for backend in ("sat", "cpsat", "csp"):
        s = spec.session(backend)
        s.assign("/x", True)
        assert s.certain() == {"/x": True, "/y": False, "/z": False}, backend


def test_unknown_kind_lists_registered_custom_kinds() -> None:
    doc = {"type": "object", "required": ["a"], "properties": {"a": {"type": "boolean"}},
           "x-factorspec": {"relations": [{"kind": "even_sums", "fields": ["/a"]}]}}
    with pytest.raises(fs.UnknownRelationKind) as e:
        fs.Spec.from_json(doc)
    assert "even_sum_test" in str(e.value) and e.value.pointer == "#/x-factorspec/relations/0/kind"


def test_objective_optimal_restricts_admissible() -> None:
    doc = {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 4}, "b": {"type": "integer", "minimum": 0, "maximum": 4}},
        "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"], [1, "/b"]], "op": "<=", "rhs": 5}],
                         "objective": {"maximize": [[2, "/a"], [1, "/b"]], "require": "optimal"}}}
    spec = fs.Spec.from_json(doc)
    assert spec.optimum() == 9
    for backend in ("sat", "cpsat", "csp"):
        assert spec.session(backend).certain() == {"/a": 4, "/b": 1}
    doc["x-factorspec"]["objective"]["require"] = "any"
    assert fs.Spec.from_json(doc).session().admissible("/a") == [0, 1, 2, 3, 4]


def test_lexicographic_objective_matches_enumeration() -> None:
    """Two levels: most of /a + /b first, then least /a. The admissible records are found by enumerating every
    record in plain Python (no solver) and keeping the lexicographic optima; every backend must agree."""
    import itertools
    levels = [{"maximize": [[1, "/a"], [1, "/b"]], "require": "optimal"},
              {"minimize": [[1, "/a"]], "require": "optimal"}]
    doc = {"type": "object", "required": ["a", "b", "c"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 4}, "b": {"type": "integer", "minimum": 0, "maximum": 3},
        "c": {"type": "integer", "minimum": 0, "maximum": 2}},
        "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"], [1, "/b"], [1, "/c"]], "op": "<=",
                                        "rhs": 5}], "objective": levels}}
    spec = fs.Spec.from_json(doc)
    assert spec.to_json() == doc and fs.Spec.from_json(spec.to_json()).to_json() == doc
    records = [r for r in itertools.product(range(5), range(4), range(3)) if sum(r) <= 5]
    best1 = max(a + b for a, b, _ in records)
    records = [r for r in records if r[0] + r[1] == best1]
    best2 = min(a for a, _, _ in records)
    records = [r for r in records if r[0] == best2]
    assert spec.optima() == [best1, best2] and spec.optimum() == best1
    for backend in ("sat", "cpsat", "csp"):
        s = spec.session(backend)
        for k, p in enumerate(("/a", "/b", "/c")):
            assert s.admissible(p) == sorted({r[k] for r in records}), (backend, p)
    assert spec.check_record({"a": best2, "b": best1 - best2, "c": 0}) == []
    assert spec.check_record({"a": best2 + 1, "b": best1 - best2 - 1, "c": 0})  # level 1 holds, level 2 not
    bad = copy.deepcopy(doc)
    bad["x-factorspec"]["objective"][1]["require"] = "any"
    with pytest.raises(fs.DeclarationError) as e:
        fs.Spec.from_json(bad)
    assert e.value.pointer == "#/x-factorspec/objective"
    bad["x-factorspec"]["objective"] = []
    with pytest.raises(fs.DeclarationError):
        fs.Spec.from_json(bad)


def test_graph_and_networkx_export() -> None:
    spec = fs.Spec.from_json(DESIGN_EXAMPLE)
    graph = spec.graph
    assert len(graph.variables) == 9 and len(graph.factors) == 8
    table = [f for f in graph.factors if f.kind == "table"]
    assert [f.rows for f in table] == [3, 3] and all(f.space == 9 for f in table)
    g = graph.to_networkx()
    assert g.number_of_nodes() == 17
    alldiff = next(n for n, d in g.nodes(data=True) if d.get("rel_kind") == "all_different")
    assert set(g.neighbors(alldiff)) == {"/plan/0/city", "/plan/1/city", "/plan/2/city"}
    assert "<table>" in graph._repr_html_() and "<table>" in spec._repr_html_()


def test_session_repr_html_and_push_pop() -> None:
    spec = fs.Spec.from_json(DESIGN_EXAMPLE)
    s = spec.session()
    before = {p: s.admissible(p) for p in spec.fields}
    s.push()
    s.assign("/plan/2/first_day", 4)
    assert s.admissible("/plan/2/last_day") == [9]
    s.pop()
    assert {p: s.admissible(p) for p in spec.fields} == before
    assert "certain" in s._repr_html_()


@pytest.mark.parametrize("seed", range(16))
def test_a_certain_value_assigned_keeps_its_state_and_the_answers_stay_exact(seed: int) -> None:
    """Assigning a field the one value it admits changes no admissible set: the session answers from the state it
    had (``Session._derive`` returns it). Checked against every record enumerated, at every step of a random
    assignment order that, like a decoder, writes a certain field first where there is one; and the state must be
    the same object where the value was certain (so the shortcut is exercised, not bypassed)."""
    import itertools
    import random

    rnd = random.Random(seed)
    names = ["a", "b", "c", "d"]
    r0 = {n: rnd.randint(0, 5) for n in names}  # every declaration has this record
    rels, picked = [], []
    for _ in range(3):
        x, y = rnd.sample(names, 2)
        w, op = rnd.choice([1, -1]), rnd.choice(["<=", ">=", "==", "=="])
        s = r0[x] + w * r0[y]
        rhs = s if op == "==" else s + rnd.randint(0, 2) if op == "<=" else s - rnd.randint(0, 2)
        rels.append(fs.Linear([[1, f"/{x}"], [w, f"/{y}"]], op, rhs))
        picked.append((x, y, op, rhs, w))
    spec = fs.Spec({"type": "object", "required": names,
                    "properties": {n: {"type": "integer", "minimum": 0, "maximum": 5} for n in names}}, rels)

    def holds(rec: dict[str, int]) -> bool:
        for x, y, op, rhs, w in picked:
            s = rec[x] + w * rec[y]
            if not (s <= rhs if op == "<=" else s >= rhs if op == ">=" else s == rhs):
                return False
        return True

    records = [r for r in (dict(zip(names, v)) for v in itertools.product(range(6), repeat=4)) if holds(r)]
    session = spec.session()
    fixed: dict[str, int] = {}
    certain = 0
    while len(fixed) < len(names):
        live = [r for r in records if all(r[k] == v for k, v in fixed.items())]
        values = {m: sorted({r[m] for r in live}) for m in names if m not in fixed}
        for m, vals in values.items():
            assert session.admissible(f"/{m}") == vals, (m, fixed)
        ones = [m for m, vals in values.items() if len(vals) == 1]
        n = rnd.choice(ones or list(values))
        before = session._state()[0]
        v = rnd.choice(values[n])
        session.assign(f"/{n}", v)
        fixed[n] = v
        if len(values[n]) == 1:  # certain: the same state answers
            assert session._state()[0] is before
            certain += 1
    assert [r for r in records if r == fixed] == [fixed]
    assert all(session.admissible(f"/{m}") == [fixed[m]] for m in names)


def test_a_value_certain_under_the_empty_assignment_decides_nothing_when_assigned() -> None:
    """A field whose one admissible value is known under the empty assignment (a meeting's pinned person) leaves the
    session's key, and so its states, as they were when assigned that value; any other value of its domain is still an
    assignment (nothing is admissible then), and pop returns to the key before either."""
    spec = fs.Spec({"type": "object", "required": ["a", "b", "c"], "properties": {
        "a": {"enum": ["x", "y"]}, "b": {"type": "integer", "minimum": 0, "maximum": 3},
        "c": {"type": "integer", "minimum": 0, "maximum": 3}}},
        [fs.Table(["/a"], [["x"]]), fs.Linear([[1, "/b"], [1, "/c"]], "==", 3)])
    s = spec.session()
    assert s.admissible("/a") == ["x"]  # (asked under the empty assignment: known there)
    s.assign("/b", 1)
    key = s.fixed_key()
    s.push()
    s.assign("/a", "x")
    assert s.fixed_key() is key and s.assignment == {"/b": 1, "/a": "x"}
    assert s.admissible("/c") == [2] and s.admissible("/a") == ["x"] and s.certain() == {"/a": "x", "/b": 1, "/c": 2}
    s.pop()
    s.push()
    s.assign("/a", "y")  # outside the one value: an assignment like any other, and nothing is admissible
    assert s.fixed_key() != key and s.admissible("/c") == [] and not s.is_satisfiable()
    s.pop()
    assert s.fixed_key() is key and s.assignment == {"/b": 1} and s.admissible("/c") == [2]


@pytest.mark.parametrize("seed", range(8))
def test_nested_push_assign_pop_restore_what_a_stack_of_copies_restores(seed: int) -> None:
    """``push`` keeps how many fields were assigned, not a copy, and ``pop`` drops the fields assigned since (the
    last ones inserted): checked against a stack of copies of the assignment, over random nested pushes, assignments
    and pops, with a filter's extension entered and left (``_extended``/``_enter``) on the way, and the key
    (``fixed_key``) against the sorted value indices each time."""
    import random

    rng = random.Random(seed)
    spec = fs.Spec.from_json(DESIGN_EXAMPLE)
    s = spec.session()
    paths = list(spec.fields)
    ref: dict[str, object] = {}
    stack: list[dict[str, object]] = []

    def check() -> None:
        assert s.assignment == ref
        assert s.fixed_key() == tuple(sorted((p, spec.fields[p].index(v)) for p, v in ref.items()
                                             if p in s._scope))

    for _ in range(60):
        op = rng.random()
        free = [p for p in paths if p not in ref]
        if op < 0.35 or not stack:
            s.push()
            stack.append(dict(ref))
        elif op < 0.7 and free:
            p = rng.choice(free)
            v = rng.choice(list(spec.fields[p].values))
            s.assign(p, v)
            ref[p] = v
        elif op < 0.8 and free:  # a filter's questions under an extension, left as they found the assignment
            p = rng.choice(free)
            ext = s._extended([(p, rng.choice(list(spec.fields[p].values)))])
            key = s.fixed_key()
            s._enter(ext)
            assert p in s.assignment and s.fixed_key() is ext[2]
            s.pop()
            assert s.fixed_key() is key
        else:
            s.pop()
            ref = stack.pop()
        check()
    while stack:
        s.pop()
        ref = stack.pop()
        check()
