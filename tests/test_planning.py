"""The planner's one-step paths agree with byte-by-byte matching.

``Layout.forced_bytes`` (fixed syntax and certain values taken whole), ``Layout.some_next_bytes`` (a few next bytes,
not the whole set), ``Layout.advance_in_string`` (the bytes that stay inside a free string) and ``Decoder.prime``
(the root pass and first certain run done ahead) are each checked against the general matcher they shortcut:
``allowed_next_bytes`` and ``advance`` one byte at a time, and an unprimed decoder on a fresh copy of the same
declaration. States come from random byte walks through real declarations (trip, a tool call with free strings and
wide year fields, a trip with a free note), filtered by a real session.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from factorspec_cp import Spec
from factorspec_cp.tokenmap import Vocabulary
from factorspec_cp.tokenmap.layout import Layout, State
from factorspec_cp.workloads import bfcl, trip

_TRIP = trip.problem(next(ex for ex in trip.examples() if trip.num_cities(ex) == 4))


def _note_doc() -> dict[str, Any]:
    doc = trip.declaration_doc(_TRIP)
    doc["properties"]["note"] = {"type": "string", "maxLength": 40}
    doc["required"] = [*doc["required"], "note"]
    return doc


def _specs() -> dict[str, Spec]:
    return {"trip": trip.declaration(_TRIP), "note": Spec.from_json(_note_doc()),
            "tool-call": bfcl.declaration(bfcl.problems()[0])}


SPECS = _specs()


def _walk_states(spec: Spec, seed: int, steps: int = 400) -> list[tuple[State, Any]]:
    """States along a random byte walk (each byte drawn among the admitted ones), with the filter in force there."""
    lay = Layout(spec)
    session = spec.session()
    rng = random.Random(seed)
    st = lay.start()
    out = []
    for _ in range(steps):
        flt = lay.filter(session.admissible)
        out.append((st, flt))
        nxt = sorted(lay.allowed_next_bytes(st, admissible=flt))
        if not nxt:
            break
        b = rng.choice(nxt)
        st = lay.advance(st, bytes((b,)), admissible=flt)
        assert st is not None
        for p, v in st.events:
            if p in spec.fields:
                session.assign(p, v)
    return out


def _byte_by_byte(lay: Layout, st: State, data: bytes, flt: Any) -> State | None:
    for b in data:
        st = lay.advance(st, bytes((b,)), admissible=flt)  # type: ignore[assignment]
        if st is None:
            return None
    return st


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_some_next_bytes_is_part_of_the_whole_set(name, seed):
    spec = SPECS[name]
    lay = Layout(spec)
    for st, flt in _walk_states(spec, seed):
        whole = lay.allowed_next_bytes(st, admissible=flt)
        for limit in (1, 2, 3):
            some = lay.some_next_bytes(st, limit, admissible=flt)
            assert some <= whole
            assert len(some) == min(limit, len(whole))


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forced_bytes_are_forced_and_their_states_match(name, seed):
    spec = SPECS[name]
    lay = Layout(spec)
    seen = 0
    for st, flt in _walk_states(spec, seed):
        got = lay.forced_bytes(st, admissible=flt)
        if got is None:
            continue
        seen += 1
        _step_through(lay, st, *got, flt)
    assert seen


def _step_through(lay: Layout, st: State, data: bytes, at: Any, flt: Any = None) -> State:
    """Step ``forced_bytes``' bytes one at a time from ``st``: each is the only one the matcher admits there, and
    ``at(k)`` is the state ``advance`` reaches after ``k`` of them. Returns the state after all of them."""
    cur = st
    for k in range(len(data)):
        assert lay.allowed_next_bytes(cur, admissible=flt) == frozenset({data[k]}), (data, k)
        if k:
            assert at(k) == cur
        cur = lay.advance(cur, data[k:k + 1], admissible=flt)  # type: ignore[assignment]
        assert cur is not None
    return cur


def test_fixed_syntax_between_two_slots_is_one_step():
    """Between one item's last value and the next item's first slot, the closing brace, the comma, the opening brace
    and the first key are several literals of the layout: ``forced_bytes`` gives them in one step, exactly the bytes
    the matcher admits one at a time (unfiltered: only fixed syntax) up to the next slot, and its state function
    gives the matcher's state at every offset, in each of those literals."""
    spec = Spec({"type": "object", "required": ["items"], "properties": {"items": {
        "type": "array", "minItems": 3, "maxItems": 3, "items": {
            "type": "object", "required": ["a", "b"], "properties": {"a": {"enum": [1, 2]}, "b": {"enum": [3, 4]}}}}}})
    lay = Layout(spec)
    st = lay.advance(lay.start(), b'{"items": [{"a": 1, "b": 3')
    assert st is not None
    data, at = lay.forced_bytes(st)
    assert data == b'}, {"a": '
    cur = _step_through(lay, st, data, at)
    assert len(lay.allowed_next_bytes(cur)) == 2  # the next item's first slot: 1 or 2
    # the last item: its closing brace, the array's and the record's are what follows, and then nothing
    last = lay.advance(lay.start(), b'{"items": [{"a": 1, "b": 3}, {"a": 1, "b": 3}, {"a": 2, "b": 4')
    assert last is not None and lay.forced_bytes(last)[0] == b"}]}"


@pytest.mark.parametrize("name", ["note", "tool-call"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_advance_in_string_equals_byte_by_byte(name, seed):
    spec = SPECS[name]
    lay = Layout(spec)
    rng = random.Random(seed)
    inside = 0
    for st, flt in _walk_states(spec, seed):
        if lay.free_string(st) is None:
            continue
        inside += 1
        data = bytes(rng.choice(b'ab "\\\xc3\xa9\xe2\x80\x94,}0') for _ in range(rng.randint(1, 6)))
        got, k = lay.advance_in_string(st, data)
        assert 0 <= k <= len(data)
        ref = _byte_by_byte(lay, st, data[:k], flt)
        assert ref is not None and got == ref
        if k < len(data):  # it stopped where the next byte closes the string, or leaves every record
            nxt = lay.advance(got, data[k:k + 1], admissible=flt)
            assert nxt is None or lay.free_string(nxt) is None
    assert inside


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.qwen3()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_prime_changes_no_mask_and_no_plan(vocab, name):
    """A primed decoder and an unprimed one on a fresh copy of the declaration write the same masks and certain
    runs along the same random token walk. Priming takes no token, and after the first certain run the row where
    the model first chooses is already computed (a cache hit)."""
    spec = Spec.from_json(json.loads(json.dumps(SPECS[name].to_json())))  # fresh copies: no cache from other tests
    fresh = Spec.from_json(json.loads(json.dumps(spec.to_json())))
    a = spec.decoder(vocab).prime()
    b = fresh.decoder(vocab)
    assert a.tokens == [] and not a.is_terminated()
    run = a.certain_run(1 << 20)
    assert run == b.certain_run(1 << 20)
    for t in run:
        a.consume(t)
        b.consume(t)
    if not a.is_terminated() and not a.certain_run(1):  # the model's first choice
        hits = a.stats.mask_hits
        assert np.array_equal(a.allowed_tokens(), b.allowed_tokens())
        assert a.stats.mask_hits == hits + 1
    rng = random.Random(7)
    for _ in range(120):
        if a.is_terminated():
            break
        assert a.certain_run(64) == b.certain_run(64)
        ids = a.allowed_tokens()
        assert np.array_equal(ids, b.allowed_tokens())
        t = int(ids[rng.randrange(len(ids))])
        a.consume(t)
        b.consume(t)
    assert a.is_terminated() == b.is_terminated()
    if a.is_terminated():
        assert a.record() == b.record()


# choice tables: per-value token lists, shared by declarations with one schema, against the token-index walk
def _choice_specs() -> dict[str, list[Spec]]:
    from factorspec_cp.workloads import calendar
    cals = [calendar.declaration(calendar.problem(ex)) for ex, _ in zip(calendar.examples(), range(3))]
    enums = {"type": "object", "required": ["a", "b", "c"], "properties": {
        "a": {"enum": [1, 12, 120, "1", None, True]}, "b": {"enum": ["x", "xy", "x\"y", "é"]},
        "c": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"enum": [[1, 2], {"k": 1}, 3]}}}}
    rel = {"relations": [{"kind": "implies", "if": [{"field": "/a", "op": "==", "value": 12}],
                          "then": {"kind": "table", "fields": ["/b"], "rows": [["xy"]]}}]}
    return {"calendar": cals, "trip": [SPECS["trip"], trip.declaration(_TRIP)],
            "enums": [Spec.from_json(enums), Spec.from_json({**enums, "x-factorspec": rel})]}


CHOICE_SPECS = _choice_specs()


@pytest.mark.parametrize("vocab_name", ["smollm2", "qwen3", "llama3"])
@pytest.mark.parametrize("name", sorted(CHOICE_SPECS))
def test_choice_table_rows_equal_the_walk(vocab_name, name):
    """At every position of random exact-mode token walks, the mask row built from the state's choice table (where
    one applies) equals the walk of the token index over the same state, the assignment and the solver; the
    declarations of one group share one schema with different relations, so they share the tables, and those must
    not carry one declaration's relations into another's masks."""
    from factorspec_cp.tokenmap.decoder import _IdsRow, _pack, dense_row, mask_words
    v = getattr(Vocabulary, vocab_name)()
    used = sparse = 0
    words = mask_words(v.size)
    for k, spec in enumerate(CHOICE_SPECS[name]):
        rng = random.Random(f"{name}/{vocab_name}/{k}")
        for _ in range(3):
            dec = spec.decoder(v, mode="exact")
            while not dec.is_terminated():
                st = dec._frames[-1].state
                row = None if dec.layout.free_string(st) else dec._choice_row(st)
                if row is not None:
                    used += 1
                    want = _pack(dec._exact_ids(st), v.size)
                    assert np.array_equal(dense_row(row, words), want), dec.output()
                    if type(row) is _IdsRow:  # a few ids: the fill clears a row that held every bit, then sets them
                        sparse += 1
                        out = np.full(words, -1, dtype=np.int32)
                        dec.fill_mask(out)
                        assert np.array_equal(out, want), dec.output()
                ids = dec.allowed_tokens()
                dec.consume(int(ids[rng.randrange(len(ids))]))
    assert used >= 6  # the tables answered at some positions of each group
    assert sparse >= 1  # and some of their rows were a few ids
    tables = {id(spec.decoder(v)._c.choices) for spec in CHOICE_SPECS[name]}
    assert len(tables) == 1  # one schema: the group's declarations share one set of tables


def _decoder_pair(vocab: Vocabulary, name: str, second: str = "canonical") -> tuple[Any, Any]:
    """Two decoders of one declaration (``SPECS[name]``, or a meeting or calendar problem), each on a copy of its
    own: no cache shared between them or with other tests. The first is canonical, the second in mode ``second``."""
    from factorspec_cp.workloads import calendar, meeting
    if name == "meeting":
        src = meeting.declaration(next(e for k, e in enumerate(meeting.examples()) if k == 1))
    elif name == "calendar":
        src = calendar.declaration(calendar.problem(next(e for k, e in enumerate(calendar.examples()) if k == 1)))
    else:
        src = SPECS[name]
    a, b = (Spec.from_json(json.loads(json.dumps(src.to_json()))) for _ in range(2))
    return a.decoder(vocab), b.decoder(vocab, mode=second)


def _frame_view(dec: Any) -> list[tuple[Any, ...]]:
    return [(f.state, f.pushed, f.token, f.assigned, tuple(s.token for s in f.plan or ()), f.terminated)
            for f in dec._frames]


@pytest.mark.parametrize("name", ["note", "tool-call", "meeting"])  # (a trip's one run ends the record)
def test_taking_a_plan_at_once_equals_consuming_its_tokens(vocab, name):
    """``Decoder._take`` (a certain run's tokens in one call: what the row computed ahead at a run's end takes and
    undoes) leaves the frames and the session's assignment that consuming the tokens one by one leaves, at each
    certain run of a random canonical walk; undone and taken again (the frames a rollback keeps), the same again."""
    a, b = _decoder_pair(vocab, name)
    rng = random.Random(11)
    runs = 0
    for _ in range(200):
        if a.is_terminated():
            break
        plan = a._plan()
        assert [s.token for s in plan] == [s.token for s in b._plan()]
        if plan and plan[-1].state is not None:
            a._redo.clear()  # (the row ahead took and undid the run with _take: new frames first, then kept ones)
            b._redo.clear()
            for again in (False, True):
                if again:
                    a.rollback(len(plan))
                    b.rollback(len(plan))
                assert a._take(a._frames[-1].plan) == len(plan)
                for s in plan:
                    b.consume(s.token)
                assert _frame_view(a) == _frame_view(b)
                assert a.session.fixed_key() == b.session.fixed_key()
                assert a.session._assigned == b.session._assigned
                assert len(a.session._stack) == len(b.session._stack)
            runs += 1
            continue
        ids = a.allowed_tokens()
        assert np.array_equal(ids, b.allowed_tokens())
        t = int(ids[rng.randrange(len(ids))])
        a.consume(t)
        b.consume(t)
    assert runs >= (5 if name == "meeting" else 1)


@pytest.mark.parametrize("name", ["tool-call", "meeting"])
def test_certain_run_is_the_plans_tokens_from_each_position_up_to_the_bound(vocab, name):
    """``certain_run(k)``, at every position of a walk that takes each run's tokens one at a time (so mid-run too),
    is the first ``k`` tokens of the run planned there (``_plan``, the steps from the frame's offset), for bounds
    below, at and above the run's length; nothing for a bound of 0."""
    a, _ = _decoder_pair(vocab, name)
    rng = random.Random(5)
    mid = 0
    for _ in range(300):
        if a.is_terminated():
            break
        run = a.certain_run(64)
        plan = [s.token for s in a._plan()][:64]
        assert run == plan and a.certain_run(0) == []
        for k in (1, 2, 3, len(run), len(run) + 1):
            assert a.certain_run(k) == run[:k]
        mid += a._frames[-1].at > 0
        if run:
            a.consume(run[0])
            continue
        ids = a.allowed_tokens()
        a.consume(int(ids[rng.randrange(len(ids))]))
    assert mid >= 5


@pytest.mark.parametrize("name", ["note", "tool-call", "meeting"])
def test_a_planned_steps_state_made_when_read_is_the_stepped_one(vocab, name):
    """A planned token inside a stretch of fixed bytes keeps how to make its layout state (``_Later``), made when a
    frame's state is first read: along a random canonical walk, every frame's state equals the one an exact-mode
    decoder (which plans nothing, and steps each token's bytes through the layout) reaches on the same tokens; the
    walk took planned tokens whose states were not made yet."""
    from factorspec_cp.tokenmap.decoder import _Later
    a, b = _decoder_pair(vocab, name, second="exact")
    rng = random.Random(5)
    later = 0
    for _ in range(300):
        if a.is_terminated():
            break
        run = a.certain_run(64)
        if run:
            for t in run:
                a.consume(t)
                later += type(a._frames[-1].st) is _Later
                b.consume(t)
            continue
        ids = a.allowed_tokens()
        t = int(ids[rng.randrange(len(ids))])
        a.consume(t)
        b.consume(t)
    assert later >= 10
    assert [f.state for f in a._frames] == [f.state for f in b._frames]


@pytest.mark.parametrize("name", ["note", "tool-call", "meeting", "calendar"])
def test_a_drafts_empty_plan_computes_the_row_the_fill_would(vocab, name):
    """Where the engine asks for its draft (``certain_run``) and nothing is certain, the row there is computed with
    the plan (ready when the forward pass's logits are) and the fill takes it: the mask equals the one a decoder that
    was never asked for a draft computes at the fill, at every position of a random canonical walk."""
    a, b = _decoder_pair(vocab, name)
    rng = random.Random(5)
    ahead = 0
    for _ in range(300):
        if a.is_terminated():
            break
        run = a.certain_run(1)
        if not run:
            assert a._frames[-1].row is not None  # computed with the (empty) draft
            ahead += 1
        hits = a.stats.mask_hits
        ids = a.allowed_tokens()
        assert a.stats.mask_hits == hits + (not run)  # the fill took it
        assert np.array_equal(ids, b.allowed_tokens())
        t = run[0] if run else int(ids[rng.randrange(len(ids))])
        a.consume(t)
        b.consume(t)
    assert ahead >= (1 if name in ("note", "calendar") else 3)  # (their records are nearly all certain)
