"""Wide fields asked piecewise, against brute force and against the full admissible lists.

A wide field (a domain over ``Session.wide_domain`` values: minute-level times, date enums) is not listed: the
decoder asks ``Session.questions(path).among(groups)`` for the values under each next byte. Here:

- random declarations with wide-ish integer and string-enum domains (``tests/bruteforce.py`` enumerates every
  record without the solver): ``among`` over prefix groups, random intervals and value sets, ``admissible_among``,
  ``any_admissible``, ``certain()`` and ``admissible()`` afterwards equal brute force, on every backend, under
  assignments pushed and popped (witnesses inherited by larger assignments, refutations kept);
- the layout's asked slot (``has_prefix``, ``admits``, ``open_slot``) equals an enum slot of the brute-force
  admissible values, for every prefix of every rendering;
- the decoder's masks and certain runs with questions equal those computed from full admissible lists (the old
  path) on meeting problems and a BFCL date problem, with SmolLM2's tokenizer.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import factorspec_cp as fs
from factorspec_cp.tokenmap.layout import (
    EnumSlot,
    _AskedSlot,
    field_matcher,
    open_slot,
    render_value,
)

_spec = importlib.util.spec_from_file_location("bruteforce", Path(__file__).with_name("bruteforce.py"))
bruteforce = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("bruteforce", bruteforce)
_spec.loader.exec_module(bruteforce)  # type: ignore[union-attr]
BruteForce = bruteforce.BruteForce
jeq = bruteforce.jeq

BACKENDS = ("sat", "cpsat", "csp")
SEEDS = range(24)


# -- random declarations with wide-ish domains -------------------------------------------------------------------

def _clock(k: int) -> str:
    """Clock-like strings whose byte prefixes group values out of domain order, as meeting times do."""
    h, m = divmod(540 + 7 * k, 60)
    return f"{(h - 1) % 12 + 1}:{m:02d}{'AM' if h < 12 else 'PM'}"


def declaration(seed: int) -> dict[str, Any]:
    """Two wide fields (integers, maybe with ``multipleOf``, negative or not; clock strings) and a boolean, with
    2-4 random relations among linear, compare, implies, table, all_different, no_overlap and any."""
    rnd = random.Random(seed)
    lo = rnd.choice([0, 0, -40, 5])
    step = rnd.choice([1, 1, 1, 3])
    width = rnd.randint(70, 110)
    t = {"type": "integer", "minimum": lo, "maximum": lo + step * (width - 1)}
    if step > 1:
        t["multipleOf"] = step
        t["minimum"] = lo - lo % step
        t["maximum"] = t["minimum"] + step * (width - 1)
    clocks = [_clock(k) for k in range(rnd.randint(70, 100))]
    minutes = {c: k for k, c in enumerate(clocks)}
    props = {"t": t, "s": {"enum": clocks}, "b": {"type": "boolean"}}
    t_mid = (t["minimum"] + t["maximum"]) // 2

    def rel() -> dict[str, Any]:
        kind = rnd.choice(["linear", "compare", "implies", "table", "all_different", "no_overlap", "any"])
        if kind == "linear":
            return {"kind": "linear", "terms": [[rnd.choice([1, -1, 2]), "/t"], [rnd.choice([1, -1]), "/s", minutes]],
                    "op": rnd.choice(["<=", ">=", "==", "!="]), "rhs": rnd.randint(-60, 120)}
        if kind == "compare":
            return {"kind": "compare", "left": "/t", "op": rnd.choice(["<", ">", "<=", ">=", "!="]),
                    "right": rnd.randint(t["minimum"], t["maximum"])}
        if kind == "implies":
            return {"kind": "implies", "if": {"field": "/b", "op": "==", "value": rnd.choice([True, False])},
                    "then": {"kind": "linear", "terms": [[1, "/s", minutes]], "op": rnd.choice(["<=", ">="]),
                             "rhs": rnd.randint(0, len(clocks))}}
        if kind == "table":
            rows = [[rnd.choice(clocks), rnd.choice([True, False])] for _ in range(rnd.randint(3, 30))]
            return {"kind": "table", "fields": ["/s", "/b"], "rows": rows, "mode": rnd.choice(["allow", "forbid"])}
        if kind == "all_different":
            return {"kind": "implies", "if": {"field": "/b", "op": "==", "value": True},
                    "then": {"kind": "linear", "terms": [[1, "/t"], [-1, "/s", minutes]], "op": "!=", "rhs": 0}}
        if kind == "no_overlap":
            return {"kind": "linear", "terms": [[1, "/t"]], "op": rnd.choice(["<=", ">="]), "rhs": t_mid}
        return {"kind": "any", "relations": [
            {"kind": "compare", "left": "/t", "op": "<", "right": t["minimum"] + step * rnd.randint(0, width // 3)},
            {"kind": "linear", "terms": [[1, "/s", minutes]], "op": ">", "rhs": rnd.randint(len(clocks) // 2,
                                                                                         len(clocks))}]}

    relations = [rel() for _ in range(rnd.randint(2, 4))]
    return {"type": "object", "additionalProperties": False, "required": list(props), "properties": props,
            "x-factorspec": {"relations": relations}}


def _groups(rnd: random.Random, f: Any) -> list[list[tuple[int, int]]]:
    """Prefix groups of the field's renderings, random intervals, and random index sets."""
    m = field_matcher(f)
    renders = sorted(render_value(v) for v in f.values)
    out = []
    for _ in range(4):
        r = rnd.choice(renders)
        out.append(m.index_intervals(r[:rnd.randint(0, len(r))]))
    for _ in range(3):
        a = rnd.randrange(f.size)
        out.append([(a, min(f.size - 1, a + rnd.randint(0, 20)))])
    out.append(sorted({(k, k) for k in rnd.sample(range(f.size), min(5, f.size))}))
    out.append([])
    return out


def _expected(bf: Any, path: str, f: Any, assignment: dict[str, Any],
              groups: list[list[tuple[int, int]]]) -> list[bool]:
    adm = {f.index(v) for v in bf.admissible(path, assignment)}
    return [any(a <= k <= b for k in adm for a, b in g) for g in groups]


def _seed_backend_grid() -> list[Any]:
    """Every (backend, seed) pair; the fast suite asks each seed's declaration on one backend, in rotation (so every
    declaration is checked, and every backend on a third of them), the rest of the grid is marked slow."""
    return [pytest.param(backend, seed, id=f"{backend}-{seed}",
                         marks=() if seed % len(BACKENDS) == k else pytest.mark.slow)
            for k, backend in enumerate(BACKENDS) for seed in SEEDS]


@pytest.mark.parametrize(("backend", "seed"), _seed_backend_grid())
def test_questions_match_brute_force(seed: int, backend: str) -> None:
    doc = declaration(seed)
    bf = BruteForce(doc)
    if bf.count() == 0:
        pytest.skip("unsatisfiable draw")
    spec = fs.Spec.from_json(doc)
    s = spec.session(backend)
    s.wide_domain = 8
    rnd = random.Random(1000 + seed)
    assert (s.wide("/t") or s.wide("/s")) and not s.wide("/b")
    for round_ in range(3):
        s.push()
        assignment: dict[str, Any] = {}
        if round_:  # a random assignment (maybe one leaving nothing admissible)
            path = rnd.choice(["/t", "/s", "/b"])
            assignment[path] = rnd.choice(list(spec.fields[path].values))
            s.assign(path, assignment[path])
        for path in ("/t", "/s", "/b"):
            f = spec.fields[path]
            groups = _groups(rnd, f)
            assert s.questions(path).among(groups) == _expected(bf, path, f, assignment, groups), (path, groups)
        values = list(spec.fields["/t"].values)
        picks = [values[:10], values[-10:], rnd.sample(values, 3), ["not a value", 10**9]]
        want = [any(jeq(v, a) for v in g for a in bf.admissible("/t", assignment)) for g in picks]
        assert s.admissible_among("/t", picks) == want
        r = range(values[0], values[0] + 30)
        assert s.any_admissible("/t", r) == any(v in r for v in bf.admissible("/t", assignment))
        for path in ("/t", "/s", "/b"):  # the cache the questions filled agrees with the full list
            assert s.admissible(path) == bf.admissible(path, assignment), path
        certain = {p: vals[0] for p in spec.fields if len(vals := bf.admissible(p, assignment)) == 1}
        assert s.certain() == certain
        s.pop()
    for path in ("/t", "/s"):  # back at the root: the answers are the root's again
        f = spec.fields[path]
        groups = _groups(rnd, f)
        assert s.questions(path).among(groups) == _expected(bf, path, f, {}, groups)


def _assert_answers(s: Any, spec: Any, bf: Any, rnd: random.Random, assignment: dict[str, Any],
                    paths: tuple[str, ...] = ("/t", "/s", "/b")) -> None:
    """Random groups of each field in ``paths`` asked of ``s``, against brute force under ``assignment``."""
    for path in paths:
        f = spec.fields[path]
        groups = _groups(rnd, f)
        assert s.questions(path).among(groups) == _expected(bf, path, f, assignment, groups), (path, assignment)


@pytest.mark.parametrize("backend", ["cpsat", "sat"])
@pytest.mark.parametrize("seed", SEEDS)
def test_fields_known_certain_narrow_like_assigned_ones(seed: int, backend: str) -> None:
    """Narrowing treats a field known to be certain (under the assignment or one it extends) as assigned: the boolean
    is asked first (its admissible list, so a certain one is known), then the wide fields, at the root, under one
    more assigned field, and under both: every answer equals brute force."""
    doc = declaration(seed)
    bf = BruteForce(doc)
    if bf.count() == 0:
        pytest.skip("unsatisfiable draw")
    spec = fs.Spec.from_json(doc)
    rnd = random.Random(5000 + seed)
    for round_ in range(3):
        s = spec.session(backend)
        s.wide_domain = 8
        assignment: dict[str, Any] = {}
        for _ in range(2):
            assert s.admissible("/b") == bf.admissible("/b", assignment)
            _assert_answers(s, spec, bf, rnd, assignment, ("/t", "/s"))
            path = rnd.choice(["/t", "/s"] if round_ else ["/s"])
            vals = bf.admissible(path, assignment) or list(spec.fields[path].values)
            assignment[path] = rnd.choice(vals)
            s.assign(path, assignment[path])
        for path in ("/t", "/s", "/b"):
            assert s.admissible(path) == bf.admissible(path, assignment), path


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_a_state_inherits_from_a_recent_assignment_it_extends_in_any_order(seed: int) -> None:
    """A decoder assigns certain values late and in record order, so the assignment its planner asked under is often
    not a prefix of the next one. A new state inherits runs and refutations from the largest recent assignment it
    extends, whatever the order: here ``{x, z}`` is asked first, then ``{y}``, then ``y, x, z`` in that order (its
    prefixes ``{y}`` and ``{y, x}``; the parent is ``{x, z}``). Every answer equals brute force, including where
    the values picked leave nothing admissible."""
    doc = declaration(seed)
    bf = BruteForce(doc)
    if bf.count() == 0:
        pytest.skip("unsatisfiable draw")
    spec = fs.Spec.from_json(doc)
    rnd = random.Random(3000 + seed)
    for round_ in range(4):
        s = spec.session("cpsat")
        s.wide_domain = 8
        x, y, z = rnd.sample(["/t", "/s", "/b"], 3)
        pick = {}
        for p in (x, y, z):  # admissible at the root where possible, so that most draws stay satisfiable
            vals = bf.admissible(p, {}) if round_ < 3 else list(spec.fields[p].values)
            pick[p] = rnd.choice(vals or list(spec.fields[p].values))

        s.push()
        s.assign(x, pick[x])
        s.assign(z, pick[z])
        _assert_answers(s, spec, bf, rnd, {x: pick[x], z: pick[z]})
        s.pop()
        s.push()
        s.assign(y, pick[y])
        _assert_answers(s, spec, bf, rnd, {y: pick[y]})
        s.assign(x, pick[x])
        s.assign(z, pick[z])
        _assert_answers(s, spec, bf, rnd, dict(pick))
        if {x, y, z} <= s._scope:  # (a field no relation reads is not part of the assignment's key)
            st = s._states[s.fixed_key()]
            assert st.parent is not None and set(st.parent.fixed) == {x, z}  # not the prefix {y}
        for path in ("/t", "/s", "/b"):
            assert s.admissible(path) == bf.admissible(path, pick), path
        s.pop()


@pytest.mark.parametrize("seed", [pytest.param(seed, marks=() if seed % 2 == 0 else pytest.mark.slow)
                                  for seed in SEEDS[:12]])  # every other declaration in the fast suite
def test_asked_slot_matches_the_admissible_enum(seed: int) -> None:
    doc = declaration(seed)
    bf = BruteForce(doc)
    if bf.count() == 0:
        pytest.skip("unsatisfiable draw")
    spec = fs.Spec.from_json(doc)
    s = spec.session("cpsat")
    s.wide_domain = 8
    rnd = random.Random(seed)
    assignment = {"/b": rnd.choice([True, False])}
    s.assign("/b", assignment["/b"])
    for path in ("/t", "/s"):
        f = spec.fields[path]
        adm = bf.admissible(path, assignment)
        ref = EnumSlot(adm)
        asked = _AskedSlot(field_matcher(f), s.questions(path))
        renders = {render_value(v) for v in f.values}
        prefixes = sorted({r[:k] for r in renders for k in range(len(r) + 1)}, key=lambda p: (len(p), p))
        rnd.shuffle(prefixes)  # the answers may not depend on the order of the questions
        for p in prefixes:
            assert asked.has_prefix(p) == ref.has_prefix(p), (path, p)
        for r in renders:
            assert asked.admits(r) == ref.admits(r), (path, r)
        assert asked.values(b"") == adm
        m = field_matcher(f)
        sub = b""  # open_slot's walk, on the brute-force enum
        while True:
            nxt = [c for c in sorted(m.next_bytes(sub)) if ref.has_prefix(sub + bytes((c,)))]
            whole = m.index_of(sub) is not None and ref.admits(sub)
            if len(nxt) != 1 or whole:
                break
            sub += bytes(nxt)
        assert open_slot(f, s.questions(path)) == (sub, nxt, whole)


def test_wide_fields_are_left_out_of_prepare_and_asked_without_listing() -> None:
    spec = fs.Spec({"type": "object", "required": ["a", "t"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 3},
        "t": {"type": "integer", "minimum": 0, "maximum": 9999}}},
        [fs.Linear([[1, "/t"], [-1000, "/a"]], ">=", 2500)])
    s = spec.session("cpsat").prepare()
    assert s.wide("/t") and not s.wide("/a")
    n = s.stats.solves
    assert s.admissible_among("/t", [range(0, 2500), range(2500, 2600), range(9000, 10000)]) == [False, True, True]
    assert s.stats.solves - n <= 4  # a handful of solves, not one per value
    assert s.admissible("/a") == [0, 1, 2, 3] and s.certain() == {}
    s.assign("/a", 3)
    assert s.certain() == {"/a": 3}
    s.push()
    s.assign("/t", 7000)
    assert s.certain() == {"/a": 3, "/t": 7000}
    s.pop()
    s.assign("/t", 5499)  # t >= 2500 + 1000 a: nothing is admissible
    assert s.certain() == {} and not s.is_satisfiable() and s.admissible_among("/t", [range(10000)]) == [False]


# -- the decoder: questions against full admissible lists -----------------------------------------------------------

def _masks(spec: Any, vocab: Any, tokens: list[int], *, wide: bool, mode: str) -> list[Any]:
    dec = fs.Spec.from_json(spec.to_json()).decoder(vocab, mode=mode)  # a spec of its own: no shared mask cache
    if not wide:
        dec.session.wide_domain = 10**9  # every field listed: the path before questions
    out = []
    for t in tokens:
        out.append((dec.allowed_tokens().tolist(), dec.certain_run(16)))
        dec.consume(t)
    out.append((dec.allowed_tokens().tolist(), dec.certain_run(16)))
    return out


def _walk_tokens(spec: Any, vocab: Any, rnd: random.Random, limit: int = 400) -> list[int]:
    """A random walk through the decoder (exact mode): uniform among admitted tokens, EOS excluded till the end."""
    dec = fs.Spec.from_json(spec.to_json()).decoder(vocab, mode="exact")
    out: list[int] = []
    eos = set(vocab.eos_token_ids)
    while not dec.is_terminated() and len(out) < limit:
        ids = dec.allowed_tokens().tolist()
        content = [t for t in ids if t not in eos]
        t = rnd.choice(content) if content else ids[0]
        dec.consume(t)
        out.append(t)
    return out


@pytest.fixture(scope="module")
def smollm2() -> Any:
    from factorspec_cp.tokenmap import Vocabulary
    return Vocabulary.smollm2()


def _meeting(people: int) -> tuple[Any, Any]:
    from factorspec_cp.workloads import meeting
    ex = next(e for e in meeting.examples() if e["num_people"] == people)
    return meeting.declaration(meeting.problem(ex)), meeting.gold_record(ex)


@pytest.mark.parametrize("people", [2, 3])
def test_meeting_masks_with_questions_equal_masks_from_lists(smollm2: Any, people: int) -> None:
    spec, gold = _meeting(people)
    assert any(spec.session().wide(p) for p in spec.fields)
    gold_tokens = smollm2.encode(json.dumps(gold, separators=(", ", ": "), ensure_ascii=False))
    walks = [gold_tokens, _walk_tokens(spec, smollm2, random.Random(people))]
    for tokens in walks:
        for mode in ("exact", "canonical"):
            if mode == "canonical" and tokens is not gold_tokens:
                continue  # a random exact-mode walk need not follow the canonical tokens
            assert _masks(spec, smollm2, tokens, wide=True, mode=mode) == \
                _masks(spec, smollm2, tokens, wide=False, mode=mode)


def test_bfcl_date_masks_with_questions_equal_masks_from_lists(smollm2: Any) -> None:
    from factorspec_cp.workloads import bfcl
    problem = next(p for p in bfcl.problems() if p.id == "live_multiple_157-60-0")
    spec = bfcl.declaration(problem)
    dates = [p for p, f in spec.fields.items() if f.size > 10_000]
    assert len(dates) == 2 and all(spec.session().wide(p) for p in dates)
    from factorspec_cp.tokenmap.layout import Layout
    tokens = smollm2.encode(Layout(spec).render(bfcl.gold_records(problem)[0]))
    for mode in ("exact", "canonical"):
        assert _masks(spec, smollm2, tokens, wide=True, mode=mode) == _masks(spec, smollm2, tokens, wide=False,
                                                                               mode=mode)
    walk = _walk_tokens(spec, smollm2, random.Random(7))
    assert _masks(spec, smollm2, walk, wide=True, mode="exact") == _masks(spec, smollm2, walk, wide=False,
                                                                            mode="exact")


def _meeting_walks(vocab: Any, people: int, seed: int) -> Any:
    """A fresh exact-mode decoder of a meeting problem with the gold record's tokens, then another with a random
    walk's."""
    spec, gold = _meeting(people)
    gold_tokens = vocab.encode(json.dumps(gold, separators=(", ", ": "), ensure_ascii=False))
    for tokens in (gold_tokens, _walk_tokens(spec, vocab, random.Random(seed))):
        yield fs.Spec.from_json(spec.to_json()).decoder(vocab, mode="exact"), tokens


@pytest.mark.parametrize("people", [2, 3])
def test_a_slots_place_equals_the_place_found_per_state(smollm2: Any, people: int) -> None:
    """``Decoder._slot_place`` (kept per slot, the fast path of a wide value's digits) names what ``_wide_place``
    (derived per state from ``Layout.value_choice``, ``same_domain`` and ``Layout.finish``) names, at every state
    of the gold walk and of a random walk where it applies, and it applies inside every settled wide value typed."""
    for dec, tokens in _meeting_walks(smollm2, people, people + 10):
        applied = 0
        for t in tokens + [None]:
            state = dec._frames[-1].state
            fast = dec._slot_place(state)
            slow = dec._wide_place(state)
            if fast is not None:
                applied += 1
                assert slow is not None and dec.session.wide(slow[0])
                assert fast[:2] == slow[:2] and fast[2][1:] == slow[2][1:] and fast[3] == slow[3]
                assert fast[2][0] == slow[2][0] == id(fast[1])
            elif slow is not None and dec.session.wide(slow[0]):
                assert slow[2][1] or slow[2][2] in slow[1].by_render  # before the value, or a whole value typed
            dec.allowed_tokens()
            if t is not None:
                dec.consume(t)
        assert applied >= 8  # the digits of the meetings' clock times


@pytest.mark.parametrize("people", [2, 3])
def test_a_token_inside_a_wide_value_steps_as_the_layout_does(smollm2: Any, people: int) -> None:
    """``Decoder._in_value`` (a consumed token that stays inside a settled wide value: one look-up in the admissible
    counts) gives the state ``Layout.advance`` reaches byte by byte under the decoder's filter, for every admitted
    token at positions of the gold walk and of a random walk, and declines every token the layout rejects there."""
    rnd = random.Random(people + 20)
    for dec, tokens in _meeting_walks(smollm2, people, people + 30):
        stepped = declined = 0
        for t in tokens:
            state = dec._frames[-1].state
            if dec._slot_place(state) is not None:
                admitted = dec.allowed_tokens().tolist()
                others = [u for u in rnd.sample(range(smollm2.size), 200) if smollm2.tokens[u] is not None]
                for u in sorted(set(admitted[:60] + others + [t])):
                    data = smollm2.token_bytes(u)
                    if data is None:
                        continue
                    fast = dec._in_value(state, data)
                    slow = dec.layout.advance(state, data, admissible=dec._admissible())
                    if fast is not None:
                        stepped += 1
                        assert slow is not None and fast == slow and not slow.events
                    else:
                        declined += 1
            dec.consume(t)
        assert stepped >= 20 and declined >= 20


@pytest.mark.parametrize("people", [2, 3])
def test_a_wide_values_plan_is_the_planners(smollm2: Any, people: int) -> None:
    """``Decoder._value_plan`` (from the admissible counts: nothing where two admissible values part in the next byte,
    or where the bytes all of them write next could merge with what follows; those bytes' tokens where a pre-token
    ends after them) is, wherever it answers, the run the planner finds by asking the layout (``_compute_plan``):
    the same tokens, each with the same state after it, at every position of the gold walk and of a random walk. It
    answers at the model's choices inside values (nothing) and at the ``:`` after an hour (its token)."""
    from factorspec_cp.tokenmap.decoder import _Later
    for dec, tokens in _meeting_walks(smollm2, people, people + 40):
        empty = runs = 0
        for t in tokens:
            state = dec._frames[-1].state
            got = dec._value_plan(state)
            if got is not None:
                planned = dec._compute_plan(state)
                assert [s.token for s in got] == [s.token for s in planned], (dec.output(), got, planned)
                for mine, theirs in zip(got, planned):
                    made = theirs.made() if type(theirs) is _Later else theirs.state
                    assert mine.state == made and not mine.events and not theirs.events
                empty += not got
                runs += bool(got)
                assert not got or dec._slot_place(state) is not None  # (runs only inside a value)
            dec.consume(t)
        assert empty >= 8 and runs >= 2, (empty, runs)


@pytest.mark.pure  # counts the calls of a method (tests/conftest.py)
@pytest.mark.parametrize("people", [2, 3])
def test_a_wide_values_row_written_in_place_equals_the_token_index_walk(smollm2: Any, people: int) -> None:
    """``Decoder._value_fill`` (inside a settled wide value: the row written straight into the caller's, from the
    place and counts the consume into the value kept on the frame) writes over a row of garbage exactly the tokens
    the walk of the token index admits there (``_exact_ids``, no tables), at every position of the gold walk and of a
    random walk in exact mode and of the gold walk in canonical mode, where it plans nothing exactly where the
    planner does, and the place it hands the general path where it declines is the slot's; and it is taken at the
    digits, from the kept place at most of them."""
    from factorspec_cp.tokenmap.decoder import mask_to_ids
    spec, gold = _meeting(people)
    gold_tokens = smollm2.encode(json.dumps(gold, separators=(", ", ": "), ensure_ascii=False))
    walks = [(dec, tokens) for dec, tokens in _meeting_walks(smollm2, people, people + 50)]
    walks.append((fs.Spec.from_json(spec.to_json()).decoder(smollm2, mode="canonical"), gold_tokens))
    for dec, tokens in walks:
        taken = kept = general = 0
        row = np.zeros(dec._c.words, dtype=np.int32)
        wide_row = dec._wide_row

        def counted(*args: Any, _wide_row: Any = wide_row, **kw: Any) -> Any:
            nonlocal general
            general += 1
            return _wide_row(*args, **kw)

        dec._wide_row = counted  # type: ignore[method-assign]
        for t in tokens:
            frame = dec._frames[-1]
            if frame.row is None and not frame.plan:
                planned = dec._compute_plan(frame.state) if dec.mode == "canonical" else None
                row[:] = -1
                written, place = dec._value_fill(frame, row)
                assert place == dec._slot_place(frame.state)  # (what it hands the general row when declining)
                if written:
                    taken += 1
                    kept += frame.value is not None
                    assert mask_to_ids(row, smollm2.size).tolist() == sorted(dec._exact_ids(frame.state).tolist())
                    if dec.mode == "canonical":
                        assert frame.plan == () and planned == ()
                else:
                    assert (row == -1).all()  # declined: nothing written
            dec.consume(t)
        assert taken >= 8 and kept >= taken // 2
        assert taken - general >= 4  # most in the one C call (general: a table with tokens to check)


def test_a_strided_mask_row_gets_the_rows_a_contiguous_one_gets(smollm2: Any) -> None:
    """``fill_mask`` into a strided row (a column of a batch's array: the row written in place inside a wide value
    needs a contiguous one) writes what it writes into a contiguous row, at every position of a meeting's gold walk
    in both modes (the contiguous one first, written in place inside a value)."""
    spec, gold = _meeting(2)
    tokens = smollm2.encode(json.dumps(gold, separators=(", ", ": "), ensure_ascii=False))
    for mode in ("exact", "canonical"):
        dec = fs.Spec.from_json(spec.to_json()).decoder(smollm2, mode=mode)
        words = dec._c.words
        inside = 0
        for t in tokens:
            row = np.full(words, -1, dtype=np.int32)
            dec.fill_mask(row)  # (first: written in place inside a value, not kept on the frame)
            inside += dec._frames[-1].value is not None and dec._frames[-1].row is None
            strided = np.full((words, 2), -1, dtype=np.int32)[:, 0]
            dec.fill_mask(strided)
            assert np.array_equal(strided, row)
            dec.consume(t)
        assert inside >= 4


@pytest.mark.parametrize("people", [2, 3])
def test_a_row_ahead_written_where_the_model_chooses_equals_the_token_index_walk(smollm2: Any, people: int) -> None:
    """A wide value's row computed ahead (at a run's end, or where the engine asks for its draft and nothing is
    certain) is kept unwritten (``_WideRow``) and written by ``fill_mask`` into the caller's row of garbage: it admits
    exactly what the walk of the token index admits there (``_exact_ids``, no tables), at every choice of a meeting's
    gold walk in canonical mode, asked as ``bench masks`` and an engine ask (the draft first, then the fill); and
    ``allowed_tokens``, which reads the row itself, gets the same ids from the kept one."""
    from factorspec_cp.tokenmap.decoder import _WideRow, mask_to_ids
    spec, gold = _meeting(people)
    tokens = smollm2.encode(json.dumps(gold, separators=(", ", ": "), ensure_ascii=False))
    dec = fs.Spec.from_json(spec.to_json()).decoder(smollm2, mode="canonical").prime()
    row = np.zeros(dec._c.words, dtype=np.int32)
    deferred = 0
    for t in tokens:
        if not dec.certain_run(1):
            frame = dec._frames[-1]
            deferred += frame.row is not None and type(frame.row[1]) is _WideRow
            row[:] = -1
            dec.fill_mask(row)
            want = sorted(dec._exact_ids(frame.state).tolist())
            assert mask_to_ids(row, smollm2.size).tolist() == want
            assert dec.allowed_tokens().tolist() == want
        dec.consume(t)
    assert deferred >= 2


def test_filled_spans_are_the_bisections_of_the_renderings() -> None:
    """``EnumSlot.fill_spans`` keeps, for every prefix of every rendering, the span of renderings that start with it,
    as the two bisections of ``_span`` find it (compared on a fresh matcher of the same values, by bisection); a prefix
    of no rendering still gets its empty span on demand; a domain with more prefixes than ``SPANS_FILLED`` is left to
    the bisections."""
    from bisect import bisect_left

    from factorspec_cp.tokenmap import layout as lay
    values = [_clock(k) for k in range(180)] + ["9:00PM", "12:30AM", "1:05PM"]
    m = EnumSlot(values)
    m.fill_spans()
    fresh = EnumSlot(values)
    prefixes = {r[:n] for r in m.renders for n in range(len(r) + 1)}
    assert set(m._spans) == prefixes
    for t in sorted(prefixes) + [b"\"1:6", b"\"2:", b"\"9:99", b"x", b"\"12:30AM\"x"]:
        want = (bisect_left(fresh.renders, t), bisect_left(fresh.renders, t + b"\xff"))
        assert m._span(t) == want == fresh._span(t), t
    big = EnumSlot([f"{k:07d}" for k in range(3000)])
    assert sum(map(len, big.renders)) + len(big.renders) > lay.SPANS_FILLED
    big.fill_spans()
    assert big._spans == {} and big._span(b"\"00012") == (1200, 1300)
