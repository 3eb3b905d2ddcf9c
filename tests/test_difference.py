"""The difference-logic search (factorspec_cp/difference.py, _difference.c) against independent answers.

- Random declarations whose relations are difference constraints (bounds, differences with scaled coefficients,
  ``<``/``<=``/``==``/``>=``/``>``), under implications on booleans and disjunctions, with a linear relation over the
  booleans alone: every field's admissible values at the root and under random assignments equal brute force
  (``tests/bruteforce.py``, which reads the JSON form without the library), with the search answering them.
- Larger random declarations (four time fields) and meeting-planning problems along random walks: the search's
  answers equal the solver's (the same session code with ``DIFFERENCE`` off, CP-SAT probing each value).
- What a search passes on to the next (the candidates it refuted, its root matrix): each refuted candidate has no
  record by brute force, and a search that starts from it answers what a fresh one does.
- Past its budget the search gives up and the solver answers: the same values.
- What is not a difference component is left to the solver.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

import pytest

import factorspec_cp as fs
from factorspec_cp import difference
from factorspec_cp import session as session_module
from factorspec_cp.difference import DifferenceModel

_spec = importlib.util.spec_from_file_location("bruteforce", Path(__file__).with_name("bruteforce.py"))
bruteforce = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("bruteforce", bruteforce)
_spec.loader.exec_module(bruteforce)  # type: ignore[union-attr]
BruteForce = bruteforce.BruteForce



def _clock(k: int) -> str:
    h, m = divmod(540 + k, 60)
    return f"{(h - 1) % 12 + 1}:{m:02d}{'AM' if h < 12 else 'PM'}"


def declaration(seed: int, times: int = 2) -> dict[str, Any]:
    """``times`` time fields (integers with an offset, maybe a step; the second a clock-string enum whose map is
    affine in the index), two or three booleans, and 3-6 relations that a difference component accepts."""
    rnd = random.Random(seed)
    props: dict[str, Any] = {}
    terms: dict[str, tuple[Any, int, int]] = {}  # path -> (map or None, first value, slope of value per index)
    for k in range(times):
        name = f"t{k}"
        if k == 1:
            width = rnd.randint(66, 80)
            clocks = [_clock(j) for j in range(width)]
            props[name] = {"enum": clocks}
            terms[f"/{name}"] = ({c: 540 + j for j, c in enumerate(clocks)}, 540, 1)
        else:
            width, lo = rnd.randint(66, 80), rnd.choice([0, 530, -10])
            props[name] = {"type": "integer", "minimum": lo, "maximum": lo + width - 1}
            terms[f"/{name}"] = (None, lo, 1)
    bools = [f"/b{k}" for k in range(rnd.choice([2, 3]))]
    for b in bools:
        props[b[1:]] = {"type": "boolean"}
    paths = list(terms)

    def term(coef: int, p: str) -> list[Any]:
        m = terms[p][0]
        return [coef, p] if m is None else [coef, p, m]

    def mid(p: str) -> int:
        return terms[p][1] + 35

    def diff() -> dict[str, Any]:
        p, q = rnd.sample(paths, 2)
        c = rnd.choice([1, 1, 1, 2, 3])
        return {"kind": "linear", "terms": [term(c, p), term(-c, q)], "op": rnd.choice(["<=", "<", ">=", ">", "=="]),
                "rhs": c * (terms[p][1] - terms[q][1]) + rnd.randint(-30, 30)}

    def bound() -> dict[str, Any]:
        p = rnd.choice(paths)
        c = rnd.choice([1, -1, 2, -3])
        if rnd.random() < 0.1:  # the same field twice, cancelling: a constant comparison
            return {"kind": "linear", "terms": [term(1, p), term(-1, p)], "op": rnd.choice(["<=", ">"]), "rhs": 0}
        return {"kind": "linear", "terms": [term(c, p)], "op": rnd.choice(["<=", ">=", "==", "<", ">"]),
                "rhs": c * (mid(p) + rnd.randint(-30, 30))}

    def lit(b: str) -> dict[str, Any]:
        return {"field": b, "op": "==", "value": rnd.choice([True, False])}

    def rel() -> dict[str, Any]:
        kind = rnd.choice(["diff", "bound", "implies", "implies2", "any", "side"])
        if kind == "diff":
            return diff()
        if kind == "bound":
            return bound()
        if kind == "implies":
            return {"kind": "implies", "if": lit(rnd.choice(bools)), "then": rnd.choice([diff, bound])()}
        if kind == "implies2":
            return {"kind": "implies", "if": [lit(b) for b in rnd.sample(bools, 2)],
                    "then": {"kind": "any", "relations": [diff(), diff()]}}
        if kind == "any":
            return {"kind": "any", "relations": [bound(), diff()]}
        return {"kind": "linear", "terms": [[1, b] for b in bools], "op": rnd.choice(["<=", ">=", "=="]),
                "rhs": rnd.randint(0, len(bools))}

    relations = [rel() for _ in range(rnd.randint(2, 5))]
    relations.append({"kind": "implies", "if": lit(bools[0]), "then": diff()})  # times and booleans linked
    return {"type": "object", "additionalProperties": False, "required": list(props), "properties": props,
            "x-factorspec": {"relations": relations}}


def _satisfiable_draw(first: int, extend: Any = None) -> tuple[dict[str, Any], Any]:
    """The first of ten draws from ``declaration(first + k)`` (changed by ``extend``) that brute force satisfies, with
    its brute force; skips the test where none does."""
    for draw in range(10):
        doc = declaration(first + draw)
        if extend is not None:
            extend(doc)
        bf = BruteForce(doc)
        if bf.count():
            return doc, bf
    pytest.skip("no satisfiable draw")


@pytest.mark.parametrize("seed", range(30))
def test_admissible_values_match_brute_force(seed: int) -> None:
    doc, bf = _satisfiable_draw(100 * seed)
    spec = fs.Spec.from_json(doc)
    model = DifferenceModel(spec, spec.active_instances)
    assert model.component("/t0") is not None and model.component("/t1") is not None
    rnd = random.Random(seed)
    s = spec.session()
    assignment: dict[str, Any] = {}
    order = list(spec.fields)
    rnd.shuffle(order)
    for path in order:
        for p in spec.fields:
            if p not in assignment:
                assert s.admissible(p) == bf.admissible(p, assignment), (p, assignment)
        vals = bf.admissible(path, assignment)
        assignment[path] = rnd.choice(vals)
        s.assign(path, assignment[path])
    assert s.stats.difference > 0  # the search answered (not the solver)


def test_carried_rows_are_refuted_by_brute_force() -> None:
    """What a search passes on (:class:`~factorspec_cp.difference.Rows`): each candidate it calls refuted has no
    record under the assignment (brute force), and a question that starts from an ancestor's rows and root matrix
    answers what the same question asked afresh does, along random walks of admissible values; on some of the
    declarations the carried rows skip refuted candidates."""
    skipped = [_carried_walk(seed) for seed in range(12)]
    assert sum(skipped) > 0, skipped


def test_carried_rows_with_tables_of_their_own() -> None:
    """The same, where a component's candidates do not all fit one table (``root_fits`` off): each assignment of the
    candidate fields gets a table of its free fields (restricted from a kept one, or enumerated), and the rows carried
    from an ancestor's table are matched by id."""
    skipped = [_carried_walk(seed, root=False) for seed in range(12)]
    assert sum(skipped) > 0, skipped


def _carried_walk(seed: int, root: bool = True) -> int:
    try:
        doc, bf = _satisfiable_draw(900 + 100 * seed)
    except pytest.skip.Exception:
        return 0
    spec = fs.Spec.from_json(doc)
    model = DifferenceModel(spec, spec.active_instances)
    for comp in model.components.values():
        comp.root_fits = comp.root_fits and root
    fields = spec.fields
    rnd = random.Random(seed)
    assignment: dict[str, Any] = {}
    carried, carried_refuted = None, 0
    skipped = 0
    order = list(fields)
    rnd.shuffle(order)
    for path in order:
        fixed = {p: fields[p].index(v) for p, v in assignment.items()}
        mine, mine_refuted = None, 0
        for p in fields:
            if p in assignment or model.component(p) is None:
                continue
            fresh = model.admissible(p, fixed)
            assert fresh is not None
            values, _, rows = fresh
            cand = rows.table
            grid, free = cand[0], cand[2]
            refuted = 0
            for k, alive in enumerate(rows.alive):
                row = {q: fields[q].values[int(grid[k, j])] for j, q in enumerate(free)}
                if any(q in assignment and assignment[q] != v for q, v in row.items()):
                    assert not alive, (p, assignment, row)  # outside the assignment (a masked row): never searched
                elif not alive:  # refuted: no record has this completion of the candidate fields
                    assert bf.count({**assignment, **row}) == 0, (p, assignment, row)
                    refuted += 1
            if carried is not None:
                again = model.admissible(p, fixed, carried)
                assert again is not None and again[0] == values, (p, assignment)
                skipped += carried_refuted > 0
            if mine is None or refuted > mine_refuted:
                mine, mine_refuted = rows, refuted  # (any of them holds under the assignments that extend this one)
        carried, carried_refuted = mine, mine_refuted
        assignment[path] = rnd.choice(bf.admissible(path, assignment))
    return skipped


def test_depths_in_c_equal_numpy() -> None:
    """The depths of a narrowed table (``_difference.depths``, from the free flags of the candidate columns) are what
    ``_depths`` computes with numpy from the columns' depths, for every set of free columns of some components with
    candidate fields (the walks' declarations: a relation's depth decides which prefix of a row activates it)."""
    import numpy as np

    seen = 0
    for seed in range(40):
        try:
            doc, _ = _satisfiable_draw(900 + 100 * seed)
        except pytest.skip.Exception:
            continue
        spec = fs.Spec.from_json(doc)
        for comp in DifferenceModel(spec, spec.active_instances).components.values():
            c = len(comp.candidates)
            if not c or not comp.relations:
                continue
            for bits in range(1 << min(c, 6)):
                free = tuple(bool(bits >> j & 1) for j in range(c))
                col = np.zeros(c + 1, dtype=np.int32)
                for j, is_free in enumerate(free):
                    if is_free:
                        col[j] = j + 1
                assert difference._core.depths(comp.rel_cols, comp.rel_lits.shape[1], bytes(free)) == \
                    difference._depths(comp, col), (seed, free)
                seen += 1
    assert seen > 20, seen


def test_the_core_is_built() -> None:
    """pip builds the extension (setup.py); without it every difference component would go to the solver unseen."""
    assert difference._core is not None


@pytest.mark.pure  # counts the calls of a method (tests/conftest.py)
@pytest.mark.parametrize("seed", range(8))
def test_any_assignment_with_another_component_matches_brute_force(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Assignments drawn from whole domains, not only admissible values, two fields at a time, in a declaration with
    a second component (a table over two enums): each state extends its parent by several fields, so its
    satisfiability is decided per component (the search for the difference component; a record of an ancestor for
    the table) and knowledge is reused per component assignment. Satisfiability and every admissible set equal brute
    force, unsatisfiable assignments included."""
    calls = []
    original = session_module.Session._components_sat

    def counted(self: Any, *args: Any) -> Any:
        out = original(self, *args)
        calls.append(out)
        return out

    monkeypatch.setattr(session_module.Session, "_components_sat", counted)
    def with_table(doc: dict[str, Any]) -> None:
        doc["properties"]["c0"] = {"enum": ["x", "y"]}
        doc["properties"]["c1"] = {"enum": ["u", "v"]}
        doc["required"] += ["c0", "c1"]
        doc["x-factorspec"]["relations"].append(
            {"kind": "table", "fields": ["/c0", "/c1"], "rows": [["x", "u"], ["y", "v"]]})  # each value admissible

    rnd = random.Random(seed)
    doc, bf = _satisfiable_draw(5000 + 100 * seed, with_table)
    spec = fs.Spec.from_json(doc)
    s = spec.session()
    paths = list(spec.fields)
    for p in paths:  # the root's records (witnesses the table component's values)
        assert s.admissible(p) == bf.admissible(p, {})
    assignment: dict[str, Any] = {}
    for _ in range(6):
        free = [p for p in paths if p not in assignment]
        if len(free) < 2:
            break
        both = "/c0" in free and "/c1" in free and rnd.random() < 0.5  # the table's fields together, maybe a pair
        pair = ["/c0", "/c1"] if both else rnd.sample(free, 2)  # no row has
        trial = dict(assignment, **{p: rnd.choice(list(spec.fields[p].values)) for p in pair})
        s.push()
        for p in pair:
            s.assign(p, trial[p])
        sat = bf.count(trial) > 0
        assert s.is_satisfiable() == sat, trial
        for p in paths:
            if p not in trial:
                assert s.admissible(p) == bf.admissible(p, trial), (p, trial)
        if sat:
            assignment = trial  # keep it: the next states extend it
        else:
            s.pop()
    assert calls  # the per-component decision ran


def _same_answers(spec: Any, rnd: random.Random, steps: int) -> tuple[Any, Any]:
    """Walk ``spec`` with random admissible values, asking every field of two sessions at each step: the search's
    and the solver's (``DIFFERENCE`` off). Returns both sessions."""
    s = spec.session()
    old = session_module.DIFFERENCE
    session_module.DIFFERENCE = False
    try:
        ref = spec.session()
    finally:
        session_module.DIFFERENCE = old
    assert ref._difference is None and s._difference is not None
    order = [p for p in spec.fields if spec.fields[p].size > 1]
    for _ in range(steps):
        for p in order:
            assert s.admissible(p) == ref.admissible(p), p
        free = [p for p in order if p not in s.assignment]
        if not free:
            break
        path = free[0] if rnd.random() < 0.7 else rnd.choice(free)
        v = rnd.choice(ref.admissible(path))
        s.assign(path, v)
        ref.assign(path, v)
    return s, ref


@pytest.mark.parametrize("seed", range(8))
def test_four_time_fields_match_the_solver(seed: int) -> None:
    for draw in range(10):
        spec = fs.Spec.from_json(declaration(10_000 + 100 * seed + draw, times=4))
        try:
            spec.session()
            break
        except fs.UnsatisfiableDeclaration:
            continue
    else:
        pytest.skip("no satisfiable draw")
    s, _ = _same_answers(spec, random.Random(seed), 12)
    assert s.stats.difference > 0


def _meeting(k: int) -> Any:
    from factorspec_cp.workloads import meeting
    ex = next(e for j, e in enumerate(meeting.examples()) if j == k)
    return meeting.declaration(ex)


@pytest.mark.parametrize("k", [0, 2, 6])
def test_meeting_walks_match_the_solver(k: int) -> None:
    s, ref = _same_answers(_meeting(k), random.Random(k), 40)
    assert s.stats.difference > 0 and s.stats.difference_fallbacks == 0
    assert s.stats.solves < ref.stats.solves


@pytest.mark.parametrize("k", [5, 6, 11])
def test_tool_call_date_ranges_match_the_solver(k: int) -> None:
    """BFCL declarations whose dates (11,323 values) take part in ``end - start >= 1`` or a bound: components too."""
    from factorspec_cp.workloads import bfcl
    spec = bfcl.declaration(bfcl.problems()[k])
    s, _ = _same_answers(spec, random.Random(k), 6)
    assert s.stats.difference > 0 and s.stats.difference_fallbacks == 0


def test_past_its_budget_the_solver_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(difference, "BUDGET", 2)
    s, _ = _same_answers(_meeting(1), random.Random(5), 12)
    assert s.stats.difference_fallbacks > 0


def test_other_relations_are_left_to_the_solver() -> None:
    doc = declaration(3)
    doc["x-factorspec"]["relations"].append(  # != is no difference constraint: the component is not one
        {"kind": "linear", "terms": [[1, "/t0"], [-1, "/t0"]], "op": "!=", "rhs": 1})
    spec = fs.Spec.from_json(doc)
    model = DifferenceModel(spec, spec.active_instances)
    assert model.component("/t0") is None and model.components == {}
    doc = declaration(3)
    doc["properties"]["n"] = {"type": "integer", "minimum": 0, "maximum": 9}  # a narrow integer in a difference term
    doc["required"].append("n")
    doc["x-factorspec"]["relations"].append({"kind": "linear", "terms": [[1, "/t0"], [-1, "/n"]], "op": "<=",
                                             "rhs": 600})
    spec = fs.Spec.from_json(doc)
    assert DifferenceModel(spec, spec.active_instances).components == {}


def test_the_core_projects_and_decides_by_itself() -> None:
    """The compiled search on a hand-made system: x1 - x2 <= -5 or x2 - x1 <= -5 (one before the other by 5), both
    in 0..9, x2 fixed at 4 by one candidate and free in the other."""
    import numpy as np
    core = difference._core

    def arr(xs: list[Any]) -> bytes:
        return np.asarray(xs, dtype=np.int32).tobytes()

    bounds = arr([(0, 1, 9), (1, 0, 0), (0, 2, 9), (2, 0, 0)])
    rel_alt, alt_edge, edges = arr([0, 2, 3]), arr([0, 1, 2, 4]), arr([(2, 1, -5), (1, 2, -5), (0, 2, 4), (2, 0, -4)])
    model = (3, bounds, rel_alt, alt_edge, edges)
    # one free boolean column: row (1,) activates both relations, row (0,) the disjunction only; depth 1 each
    grid, depth = arr([[1], [0]]), arr([1, 1])
    got, _, _ = core.project(*model, bytes([1, 1]), 1, grid, 1, depth, 1, 1000, b"", b"")
    assert got == [(9, 9)]  # x2 = 4: x1 <= -1 (no) or x1 >= 9
    got, _, _ = core.project(*model, bytes([1, 1, 1, 0]), 2, grid, 1, depth, 1, 1000, b"", b"")
    assert got == [(0, 9)]  # merged: every value of 0..9 is 5 away from some value of 0..9
    (ok, witness, solution), _, _ = core.feasible(*model, bytes([1, 1, 1, 0]), 2, grid, 1, depth, arr([0, 1]), 1000,
                                                  b"", b"")
    assert ok == b"\x01\x01" and witness == 0 and solution[2] == 4 and abs(solution[1] - solution[2]) >= 5
    res, _, _ = core.project(*model, bytes([1, 1, 1, 0]), 2, grid, 1, depth, 1, 1, b"", b"")
    assert res is None  # past the budget
    # a prefix that is inconsistent cuts the rows below it: x2 = 4 and x2 = 5 at depth 1
    edges2 = arr([(2, 1, -5), (1, 2, -5), (0, 2, 4), (2, 0, -4), (0, 2, 5), (2, 0, -5)])
    two = (3, bounds, arr([0, 2, 3, 4]), arr([0, 1, 2, 4, 6]), edges2)
    grid2 = arr([[0, 0], [0, 1], [1, 0], [1, 1]])
    active2 = bytes([1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 1])  # rows (1, *) activate both fixings: inconsistent
    got, _, _ = core.project(*two, active2, 4, grid2, 2, arr([0, 1, 1]), 1, 1000, b"", b"")
    assert got == [(0, 9)]
    (ok, _, _), _, (alive, root) = core.feasible(*two, active2, 4, grid2, 2, arr([0, 1, 1]), arr([0, 1, 2, 3]), 1000,
                                                 b"", b"")
    assert ok == b"\x01\x01\x00\x00"
    assert alive == b"\x01\x01\x00\x00" and len(root) == 4 * 3 * 3  # rows (1, *) refuted; the root matrix
    # carried on: rows skipped stay refuted; x2 = 4 fixed on top of the root matrix gives the answer from scratch
    fix = bounds + arr([(0, 2, 4), (2, 0, -4)])
    (ok, _, _), _, (alive, _) = core.feasible(3, fix, *two[2:], active2, 4, grid2, 2, arr([0, 1, 1]),
                                              arr([0, 1, 2, 3]), 1000, bytes([0, 1, 1, 1]), root)
    assert ok == b"\x00\x01\x00\x00" and alive == b"\x00\x01\x00\x00"
    got, _, (alive, _) = core.project(3, fix, *two[2:], active2, 4, grid2, 2, arr([0, 1, 1]), 1, 1000, b"", root)
    assert got == [(9, 9)] and alive[2:] == b"\x00\x00"  # x1 >= 9 (or <= -1); rows (1, *) refuted again
    with pytest.raises(ValueError):
        core.project(*two, active2, 4, grid2, 2, arr([0, 1, 1]), 1, 1000, b"\x01", b"")  # one byte per row
    with pytest.raises(ValueError):
        core.project(*two, active2, 4, grid2, 2, arr([0, 1, 1]), 1, 1000, b"", b"\x00" * 8)  # not n x n int32


@pytest.mark.parametrize("seed", range(6))
def test_settled_asked_slot_matches_the_admissible_enum(seed: int) -> None:
    """The layout's asked slot over a settled field (counts over sorted renderings, no questions): ``has_prefix``,
    ``admits`` and ``forced`` (the bytes every admissible value consistent with a prefix writes next) equal an
    enum slot of the solver's admissible values, for every prefix of every rendering."""
    from factorspec_cp.tokenmap.layout import EnumSlot, _AskedSlot, field_matcher
    spec = _meeting(seed)
    rnd = random.Random(seed)
    s, ref = _same_answers(spec, rnd, rnd.randint(0, 12))
    for path in [p for p in spec.fields if s.wide(p) and p not in s.assignment][:4]:
        m = field_matcher(spec.fields[path])
        slot = _AskedSlot(m, s.questions(path))
        assert slot._settled() is not None  # the fast path, not questions
        want = EnumSlot(ref.admissible(path))
        for r in m.renders[::7]:
            for n in range(len(r) + 1):
                sub = r[:n]
                assert slot.has_prefix(sub) == want.has_prefix(sub), (path, sub)
                if m.index_of(sub) is not None:
                    assert slot.admits(sub) == want.admits(sub), (path, sub)
                lo, hi = want._span(sub)
                expected = None
                if lo < hi:
                    a, z = want.renders[lo], want.renders[hi - 1]
                    k = n
                    while k < min(len(a), len(z)) and a[k] == z[k]:
                        k += 1
                    expected = a[n:k]
                assert slot.forced(sub) == expected, (path, sub)


@pytest.mark.parametrize("name", ["qwen3", "llama3", "smollm2"])
def test_wide_table_rows_equal_the_walk_of_the_token_index(name: str) -> None:
    """Masks inside settled wide slots from the shared WideTable (counts at span ends, tokens running past a value
    checked under the solver) against the walk of the token index, at every position of random walks in exact mode
    (each token drawn from the mask), through two meeting records and a BFCL hotel booking (its dates are more than
    WIDE_TABLE_VALUES: no table, the walk): at the opening quote, inside values and before a value's closing quote,
    where tokens run into what follows."""
    import numpy as np

    from factorspec_cp.bench.walks import VOCABS
    from factorspec_cp.tokenmap.decoder import _pack
    from factorspec_cp.workloads import bfcl
    vocab = VOCABS[name]()
    rnd = random.Random(7)
    compared = 0
    for spec in (_meeting(0), _meeting(3), bfcl.declaration(bfcl.problems()[5])):  # times; a hotel's dates
        dec = spec.decoder(vocab, mode="exact").prime()
        row = np.zeros(dec._c.words, dtype=np.int32)
        while not dec.is_terminated():
            state = dec._frames[-1].state
            wide = dec._wide_row(state)
            if wide is not None:
                assert np.array_equal(wide, _pack(dec._exact_ids(state), vocab.size)), dec.output()[-30:]
                compared += 1
            dec.fill_mask(row)
            ids = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab.size])
            dec.consume(int(rnd.choice(ids.tolist())))
        assert dec.record()
    assert compared > 20


@pytest.mark.parametrize("name", ["qwen3", "llama3", "smollm2"])
def test_wide_tables_built_together_equal_those_built_one_by_one(name: str) -> None:
    """WideTable.build_many (what prime runs, every branch prefix of a matcher at once, cut from shared arrays)
    against WideTable.build per prefix, array for array, and their rows in C (the extension, which must be built)
    against numpy's, on a meeting time domain and on a small integer-like domain
    where renderings are prefixes of others; and the branch prefixes against their definition, asked of the
    matcher's own next bytes."""
    import numpy as np

    from factorspec_cp.bench.walks import VOCABS
    from factorspec_cp.tokenmap import decoder
    from factorspec_cp.tokenmap.decoder import TokenIndex, WideTable, branch_prefixes
    from factorspec_cp.tokenmap.layout import FIELD, EnumSlot
    assert decoder._rows is not None, "the _rows extension is not built (pip install -e . builds it)"
    index = TokenIndex.of(VOCABS[name]())
    layout = _meeting(1).decoder(VOCABS[name](), mode="canonical").layout
    times = next(ins[2] for ins in layout._code if ins[0] == FIELD and type(ins[2]) is EnumSlot
                 and len(ins[2].domain) > 100)
    numbers = EnumSlot([1, 10, 100, 12, 2, 25, 250, 3, 31, 4, 400, 45, 5])
    for m in (times, numbers):
        want = sorted({r[:k] for r in m.renders for k in range(len(r))
                       if any(len(m.next_bytes(r[:j])) > 1 for j in range(k, min(len(r), k + 3)))},
                      key=lambda p: (len(p), p))
        subs = branch_prefixes(m)
        assert subs == want and subs
        subs = subs + [r for r in m.renders[:3] if r not in subs]  # whole renderings too (a number others extend)
        together = WideTable.build_many(index, m, subs)
        assert list(together) == subs
        pairs = [(b"", sub, together[sub]) for sub in subs]
        for before in (b" ", b'": ', b': "'[:2], b"\n"):  # bytes before the value (a planner's stop in the literal)
            pairs += [(before, sub, t) for sub, t in WideTable.build_many(index, m, [b"", subs[1]], before).items()]
        for before, sub, many in pairs:
            one = WideTable.build(index, m, before, sub)
            for f in ("ids", "lo", "hi", "words", "bits", "uwords", "starts"):
                a, b = getattr(one, f), getattr(many, f)
                assert a.dtype == b.dtype and np.array_equal(a, b), (m.renders[0], before, sub, f)
            assert one.checks == many.checks, (before, sub)
        assert any(len(t.ids) for _, _, t in pairs) and any(b and len(t.ids) for b, _, t in pairs)
        rnd = np.random.default_rng(len(m.renders))
        for _, _, t in pairs:  # the row in C against numpy's, under random admissible sets
            counts = np.zeros(len(m.renders) + 1, dtype=np.int64)
            np.cumsum(rnd.random(len(m.renders)) < 0.3, out=counts[1:])
            assert np.array_equal(t.row(counts, index.size // 32 + 1), t.row_numpy(counts, index.size // 32 + 1))
    with pytest.raises(ValueError):
        WideTable.build_many(index, numbers, [b"7"])


def test_admissible_counts_in_c_equal_numpy() -> None:
    """The admissible counts of a wide slot (``_rows.admissible_counts``, one pass in C) against numpy's gather and
    cumulative sum, on random masks (sparse, dense, empty, full) and orders; the layout's function gives both forms."""
    import numpy as np

    from factorspec_cp import _rows  # type: ignore[attr-defined]
    from factorspec_cp.tokenmap.layout import EnumSlot, admissible_counts

    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 1200))
        mask = (rng.random(n) < [0.0, 1.0, 0.01, 0.5][trial % 4]).astype(np.uint8).tobytes()
        order = rng.permutation(n).astype(np.int64)
        raw = _rows.admissible_counts(mask, order.tobytes())
        want = np.concatenate(([0], np.cumsum(np.frombuffer(mask, dtype=np.uint8)[order])))
        assert np.array_equal(np.frombuffer(raw, dtype=np.int64), want)
    with pytest.raises(IndexError):
        _rows.admissible_counts(b"\x01\x00", np.array([0, 2], dtype=np.int64).tobytes())
    m = EnumSlot([f"{h}:{mm:02d}" for h in range(1, 13) for mm in range(60)])
    mask = bytes(rng.integers(0, 2, len(m.domain), dtype=np.uint8))
    arr, raw = admissible_counts(m, mask)
    want = np.concatenate(([0], np.cumsum(np.frombuffer(mask, dtype=np.uint8)[np.asarray(m.order)])))
    assert np.array_equal(arr, want) and raw == want.astype(np.int64).tobytes()


@pytest.mark.parametrize("in_c", [True, False], ids=["c", "python"])
def test_span_questions_equal_brute_force(in_c: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``span_has`` and ``span_ends`` (an asked slot's questions on the admissible counts: in C, and the Python path
    taken without the extension) against a scan of the mask in sorted order, on random masks (sparse, dense, empty,
    full) and every span of small domains; spans outside the counts raise."""
    import numpy as np

    from factorspec_cp.tokenmap import layout

    if not in_c:
        monkeypatch.setattr(layout, "_rows", None)
    rng = np.random.default_rng(13)
    for trial in range(120):
        n = int(rng.integers(1, 40))
        ok = (rng.random(n) < [0.0, 1.0, 0.1, 0.5][trial % 4]).astype(np.int64)  # admissible, in sorted order
        counts = np.concatenate(([0], np.cumsum(ok))).astype(np.int64).tobytes()
        for lo in range(n + 1):
            for hi in range(lo, n + 1):
                inside = [j for j in range(lo, hi) if ok[j]]
                assert layout.span_has(counts, lo, hi) == bool(inside)
                assert layout.span_ends(counts, lo, hi) == ((inside[0], inside[-1]) if inside else None)
    counts = np.array([0, 1, 1], dtype=np.int64).tobytes()
    for lo, hi in [(-1, 1), (1, 3), (2, 1)]:
        with pytest.raises(IndexError):
            layout.span_has(counts, lo, hi)
        with pytest.raises(IndexError):
            layout.span_ends(counts, lo, hi)


def test_row_helpers_in_c_equal_numpy() -> None:
    """``_rows.or_bits`` (a wide row's tokens checked in) against numpy's ``bitwise_or.at``, and ``_rows.copy_row``
    against a copy, on random rows; ids outside the row and rows of different sizes raise."""
    import numpy as np

    from factorspec_cp import _rows  # type: ignore[attr-defined]

    rng = np.random.default_rng(11)
    for _ in range(200):
        words = int(rng.integers(1, 300))
        row = rng.integers(0, 2**32, words, dtype=np.uint32)
        want = row.copy()
        ids = rng.integers(0, words * 32, int(rng.integers(0, 12))).astype(np.int64)
        np.bitwise_or.at(want, ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32))
        _rows.or_bits(row, ids.tobytes())
        assert np.array_equal(row, want)
        out = np.zeros(words, dtype=np.int32)
        _rows.copy_row(out, row)
        assert np.array_equal(out.view(np.uint32), row)
    with pytest.raises(IndexError):
        _rows.or_bits(np.zeros(2, dtype=np.uint32), np.array([64], dtype=np.int64).tobytes())
    with pytest.raises(ValueError):
        _rows.copy_row(np.zeros(2, dtype=np.int32), np.zeros(3, dtype=np.int32))
