"""The canonical byte layout: renderings equal ``json.dumps``, byte walks give records jsonschema accepts, bytes
outside the layout are refused, and admissible filters restrict field values.

Independent references: ``json.dumps``/``json.loads``, ``jsonschema.Draft202012Validator``, ``re.search``, and brute
force over small alphabets.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema
import pytest

from factorspec_cp import Spec, UnsupportedKeyword
from factorspec_cp.schema import ArrayNode, Field, FreeField, Leaf, Node, ObjectNode, UnionNode, escape
from factorspec_cp.tokenmap.freeslot import NOTHING, IntegerSlot, NumberSlot, StringSlot
from factorspec_cp.tokenmap.layout import Layout, State
from factorspec_cp.workloads import calendar, meeting, trip

# ----------------------------------------------------------------------------------------------------- schemas
_TOOL_CALL = {"anyOf": [
    {"type": "object", "additionalProperties": False, "required": ["name", "arguments"], "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "required": ["city"], "properties": {
            "city": {"enum": ["Paris", "Oslo", "São Paulo"]}, "unit": {"enum": ["C", "F"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}}}}},
    {"type": "object", "required": ["name", "arguments"], "properties": {
        "name": {"const": "get_time"},
        "arguments": {"type": "object", "required": ["tz"], "properties": {
            "tz": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z_]+$"}}}}},
    {"type": "object", "required": ["name"], "properties": {"name": {"const": "noop"}}},
]}

SCHEMAS: dict[str, dict[str, Any]] = {
    "optional": {"type": "object", "required": ["c"], "properties": {
        "a": {"enum": ["x", "y", 'q"uote']}, "b": {"type": "integer", "minimum": 0, "maximum": 120},
        "c": {"type": "boolean"}, "d": {"type": "null"},
        "e": {"type": "object", "properties": {"f": {"enum": [1, 12, 123]}, "g": {"const": "k"}}}}},
    "all_optional": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": [None, 2.5, -3]}}},
    "arrays": {"type": "object", "required": ["xs", "tags", "fixed"], "properties": {
        "xs": {"type": "array", "minItems": 1, "items": {
            "type": "array", "maxItems": 3, "items": {"type": "integer", "minimum": -5, "maximum": 30}}},
        "tags": {"type": "array", "maxItems": 4, "items": {"enum": ["a", "ab", "abc"]}},
        "fixed": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "boolean"}},
        "empty": {"type": "array", "maxItems": 0, "items": {"type": "boolean"}},
        "objs": {"type": "array", "items": {"type": "object", "properties": {
            "k": {"type": "integer", "minimum": 0, "maximum": 3, "multipleOf": 3}}}}}},
    "union": {"type": "object", "required": ["calls"], "properties": {
        "calls": {"type": "array", "minItems": 1, "maxItems": 3, "items": _TOOL_CALL}}},
    "union_shared_prefix": {"type": "object", "required": ["u"], "properties": {"u": {"oneOf": [
        {"type": "object", "required": ["x", "kind"], "properties": {
            "x": {"type": "integer", "minimum": 0, "maximum": 9}, "kind": {"const": "small"}}},
        {"type": "object", "required": ["x", "kind"], "properties": {
            "x": {"type": "integer", "minimum": 0, "maximum": 99}, "kind": {"const": "big"}}}]}}},
    "refs": {"type": "object", "required": ["p", "q"], "$defs": {"pt": {"type": "object", "required": ["x", "y"],
             "properties": {"x": {"type": "integer", "minimum": -3, "maximum": 3},
                            "y": {"type": "integer", "minimum": -3, "maximum": 3}}}},
             "properties": {"p": {"$ref": "#/$defs/pt"}, "q": {"$ref": "#/$defs/pt"}}},
    "strings": {"type": "object", "required": ["code", "note", "mail", "word", "tail"], "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
        "note": {"type": "string", "minLength": 1, "maxLength": 6},
        "mail": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.(com|org)$"},
        "word": {"type": "string", "pattern": "^(foo|bar)+$", "maxLength": 9},
        "tail": {"type": "string", "pattern": "ab", "maxLength": 8},
        "solid": {"type": "string", "pattern": "^\\S+$", "maxLength": 5},
        "any": {"type": "string"}}},
    "numbers": {"type": "object", "required": ["n", "m", "i", "j", "k"], "properties": {
        "n": {"type": "number", "minimum": -2.5, "exclusiveMaximum": 10},
        "m": {"type": "number"},
        "i": {"type": "integer", "minimum": 7, "multipleOf": 5},
        "j": {"type": "integer", "exclusiveMaximum": 0},
        "k": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.001}}},
    "mixed_enum": {"type": "object", "required": ["v"], "properties": {
        "v": {"enum": [1, 12, "a\"b", None, True, 1.5, "é", "\n", "\\", "😀", -7]}}},
    "structured_enum": {"type": "object", "required": ["v", "w"], "properties": {
        "v": {"enum": [{"x": 1, "y": [1, {"z": None}]}, [1, "b"], {}, [], 3, "q", {"x": 1}, [[]]]},
        "w": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"const": {"k": [True, 1.5], "é": {}}}}}},
    "tuple": {"type": "object", "required": ["t", "u"], "properties": {
        "t": {"type": "array", "minItems": 1, "maxItems": 4, "prefixItems": [{"enum": ["x", "y"]}, {"const": 0}],
              "items": {"type": "array", "maxItems": 2, "prefixItems": [{"type": "boolean"}],
                        "items": {"type": "integer", "minimum": 0, "maximum": 2}}},
        "u": {"type": "array", "prefixItems": [{"type": "null"}, {"enum": [1, 2]}], "items": False}}},
    "indexed": {"type": "object", "required": ["grid"], "properties": {"grid": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {
            "type": "array", "minItems": 2, "maxItems": 3, "items": {"enum": ["o", "x"]}}}}},
    "odd_keys": {"type": "object", "required": ["a/b", "é\"ñ", "~"], "properties": {
        "a/b": {"type": "boolean"}, "é\"ñ": {"const": 0}, "~": {"enum": ["t"]}}},
}
_HAS_NUMBERS = {"numbers"}  # free numbers follow the JSON grammar, not one canonical form


@cache
def _workloads() -> dict[str, Spec]:
    out = {}
    for k, ex in enumerate(itertools.islice(trip.examples(sample=True), 3)):
        out[f"trip{k}"] = trip.declaration(trip.problem(ex))
    for k, ex in enumerate(itertools.islice(calendar.examples(sample=True), 2)):
        out[f"calendar{k}"] = calendar.declaration(calendar.problem(ex))
    ex = next(iter(meeting.examples()))
    out["meeting_clock"] = meeting.declaration(meeting.problem(ex))
    out["meeting_minutes"] = meeting.declaration(meeting.problem(ex), times="minutes")
    return out


@cache
def _spec(name: str) -> Spec:
    return _workloads()[name] if name in _workloads() else Spec(SCHEMAS[name])


@cache
def _layout(name: str, indent: int | None) -> Layout:
    return Layout(_spec(name), indent=indent)


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(_spec(name).schema)


NAMES = [*SCHEMAS, "trip0", "trip1", "trip2", "calendar0", "calendar1", "meeting_clock", "meeting_minutes"]


# ----------------------------------------------------------------------------------------------- record maker
_PATTERN_SAMPLES: dict[str, Callable[[random.Random], str]] = {
    "^[A-Z]{3}-[0-9]{2,4}$": lambda r: "".join(r.choices("ABCXYZ", k=3)) + "-" + "".join(
        r.choices("0123456789", k=r.randint(2, 4))),
    "^[a-z]+@[a-z]+\\.(com|org)$": lambda r: "".join(r.choices("abz", k=r.randint(1, 4))) + "@" + "".join(
        r.choices("xyz", k=r.randint(1, 3))) + r.choice([".com", ".org"]),
    "^(foo|bar)+$": lambda r: "".join(r.choices(["foo", "bar"], k=r.randint(1, 3))),
    "ab": lambda r: r.choice(["", "x", "é", "\n"]) + "ab" + r.choice(["", "\"", "ü!", "\\"]),
    "^\\S+$": lambda r: "".join(r.choices("a!~\"\\", k=r.randint(1, 5))),
    "^[A-Z][a-z]+/[A-Z][a-z_]+$": lambda r: r.choice(["Europe/Oslo", "America/New_york", "Asia/Tokyo"]),
}
_CHARS = "aZ 09\"\\/\n\t\x00\x1f\x7fé€😀\u2028"


def _free_value(f: FreeField, r: random.Random) -> Any:
    s = f.schema
    if f.type == "string":
        if "pattern" in s:
            return _PATTERN_SAMPLES[s["pattern"]](r)
        lo = s.get("minLength", 0)
        return "".join(r.choices(_CHARS, k=r.randint(lo, min(s.get("maxLength", lo + 6), lo + 6))))
    if f.type == "integer":
        lo = s.get("minimum", s.get("exclusiveMinimum", -10**6) + 1)
        hi = s.get("maximum", s.get("exclusiveMaximum", 10**6) - 1)
        step = s.get("multipleOf", 1)
        x = r.randint(lo, hi)
        return x + (-x) % step if x + (-x) % step <= hi else x - x % step
    lo = s.get("minimum", s.get("exclusiveMinimum", -1e6))
    hi = s.get("maximum", s.get("exclusiveMaximum", 1e6))
    while True:  # decimals, integers, and values that json.dumps writes with an exponent
        x = r.choice([round(r.uniform(lo, hi), r.randint(0, 4)), r.randint(int(lo), int(hi)),
                      r.uniform(lo, hi) * 1e-7, 3e-05])
        if s.get("minimum", -1e300) <= x <= s.get("maximum", 1e300) and x > s.get("exclusiveMinimum", -1e300) \
                and x < s.get("exclusiveMaximum", 1e300):
            return x


def _record(node: Node, r: random.Random) -> Any:
    if isinstance(node, Leaf):
        f = node.field
        return r.choice(f.values) if isinstance(f, Field) else _free_value(f, r)
    if isinstance(node, ObjectNode):
        return {p.name: _record(p.node, r) for p in node.properties if p.required or r.random() < 0.5}
    if isinstance(node, ArrayNode):
        n = r.randint(node.min_items, node.max_items if node.max_items is not None else node.min_items + 3)
        return [_record(node.item(i), r) for i in range(n)]
    assert isinstance(node, UnionNode)
    return _record(r.choice(node.branches), r)


def _fields(node: Node, value: Any, at: str = "") -> list[tuple[str, Any]]:
    """The (pointer, value) of every finite-domain leaf of a record, in record order."""
    if isinstance(node, Leaf):
        return [(at, value)] if isinstance(node.field, Field) else []
    if isinstance(node, ArrayNode):
        return [e for k, x in enumerate(value) for e in _fields(node.item(k), x, f"{at}/{k}")]
    if isinstance(node, UnionNode):
        branch = next(b for b, t in zip(node.branches, node.tags) if t == value[node.discriminator])
        return _fields(branch, value, at)
    assert isinstance(node, ObjectNode)
    return [e for p in node.properties if p.name in value
            for e in _fields(p.node, value[p.name], f"{at}/{escape(p.name)}")]


def _feed(lay: Layout, data: bytes, admissible: Any = None) -> tuple[State | None, list[tuple[str, Any]]]:
    """Advance byte by byte; the final state (None on refusal) and every completed field."""
    state: State | None = lay.start()
    events: list[tuple[str, Any]] = []
    for b in data:
        assert state is not None
        state = lay.advance(state, bytes((b,)), admissible=admissible)
        if state is None:
            return None, events
        events += lay.completed(state)
    return state, events


def _walk(lay: Layout, r: random.Random, admissible: Any = None, on_event: Any = None) -> tuple[bytes, list]:
    """Pick random allowed bytes until the layout accepts (closing bytes favoured so walks end)."""
    state, out, events = lay.start(), bytearray(), []
    while True:
        allowed = sorted(lay.allowed_next_bytes(state, admissible=admissible))
        if lay.accepting(state, admissible=admissible) and (not allowed or r.random() < 0.5):
            return bytes(out), events
        assert allowed, f"dead end after {bytes(out)!r}"
        closing = [b for b in allowed if b in b'"]},']
        b = r.choice(closing) if closing and r.random() < 0.4 else r.choice(allowed)
        nxt = lay.advance(state, bytes((b,)), admissible=admissible)
        assert nxt is not None, (bytes(out), b)
        for ev in lay.completed(nxt):
            events.append(ev)
            if on_event is not None:
                on_event(*ev)
        state = nxt
        out.append(b)
        assert len(out) < 4000, bytes(out)


# ---------------------------------------------------------------------------------------------------- rendering
@pytest.mark.parametrize("indent", [None, 2, 0])
@pytest.mark.parametrize("name", NAMES)
def test_canonical_rendering_is_json_dumps_and_accepted(name: str, indent: int | None) -> None:
    lay, spec, r = _layout(name, indent), _spec(name), random.Random(f"{name}{indent}")
    for _ in range(12 if indent is None else 4):
        rec = _record(spec.compiled.root, r)
        assert not list(_validator(name).iter_errors(rec)), rec
        text = lay.render(rec)
        if indent is None:
            assert text == json.dumps(rec, separators=(", ", ": "), ensure_ascii=False)
        else:
            assert text == json.dumps(rec, indent=indent, ensure_ascii=False)
        if isinstance(rec, dict):  # key order in the input does not matter
            assert lay.render(dict(reversed(list(rec.items())))) == text
        state, events = _feed(lay, text.encode())
        assert state is not None, text
        assert lay.accepting(state) and lay.finish(state) == ()
        assert events == _fields(spec.compiled.root, rec)
        assert lay.advance(state, b" ") is None and lay.advance(state, b"\n") is None


@pytest.mark.parametrize("name", NAMES)
def test_random_walks_give_valid_canonical_records(name: str) -> None:
    lay, spec, r = _layout(name, None), _spec(name), random.Random(name)
    for k in range(25):
        data, events = _walk(lay, r)
        rec = json.loads(data)
        assert not list(_validator(name).iter_errors(rec)), data
        assert events == _fields(spec.compiled.root, rec)
        if name not in _HAS_NUMBERS:
            assert lay.render(rec).encode() == data
        if k % 5 == 0:  # the same with indentation
            data = _walk(_layout(name, 2), r)[0]
            rec = json.loads(data)
            assert not list(_validator(name).iter_errors(rec)), data
            if name not in _HAS_NUMBERS:
                assert json.dumps(rec, indent=2, ensure_ascii=False).encode() == data


@pytest.mark.parametrize("name", ["optional", "arrays", "union", "union_shared_prefix", "strings", "numbers",
                                  "mixed_enum", "trip0", "meeting_minutes"])
def test_allowed_next_bytes_is_exact(name: str) -> None:
    """``allowed_next_bytes`` agrees with ``advance`` over all 256 bytes, with and without a filter."""
    lay, spec, r = _layout(name, None), _spec(name), random.Random(name)
    fields = spec.fields  # always-present fields: any choice per field is a record (as a solver's sets would be)
    keep = {p: r.sample(list(f.values), max(1, f.size // 2)) if f.size <= 1000 else None for p, f in fields.items()}
    adm = keep.get
    for filt in (None, adm):
        data = _walk(lay, r, filt)[0]
        for cut in sorted(r.sample(range(len(data) + 1), min(8, len(data) + 1))):
            state = lay.advance(lay.start(), data[:cut], admissible=filt)
            assert state is not None
            allowed = lay.allowed_next_bytes(state, admissible=filt)
            assert allowed == {b for b in range(256) if lay.advance(state, bytes((b,)), admissible=filt)}


# ---------------------------------------------------------------------------------------------------- refusals
_SMALL = {"type": "object", "required": ["city", "days"], "properties": {
    "city": {"enum": ["Riga", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 15},
    "note": {"type": "string", "maxLength": 3}, "tags": {"type": "array", "minItems": 1, "maxItems": 2,
                                                          "items": {"enum": ["a", "b"]}}}}


@pytest.mark.parametrize("text", [
    '{"city":"Riga", "days": 1}', '{ "city": "Riga", "days": 1}', '{"days": 1, "city": "Riga"}',
    '{"city": "Paris", "days": 1}', '{"city": "Riga", "days": 16}', '{"city": "Riga", "days": 0}',
    '{"city": "Riga", "days": 01}', '{"city": "Riga", "days": -0}', '{"city": "Riga", "days": 1.0}',
    '{"city": "Riga", "days": 1} ', '{"city": "Riga", "days": 1}}', '{"city": "Riga"}',
    '{"city": "Riga", "days": 1, "note": "abcd"}', '{"city": "Riga", "days": 1, "note": "\\/"}',
    '{"city": "Riga", "days": 1, "note": "\\u0041"}', '{"city": "Riga", "days": 1, "note": "\n"}',
    '{"city": "Riga", "days": 1, "note": "\\U0000"}', '{"city": "Riga", "days": 1, "tags": []}',
    '{"city": "Riga", "days": 1, "tags": ["a", "b", "a"]}', '{"city": "Riga", "days": 1, "tags": ["a","b"]}',
    '{"city": "Riga", "days": 1, "extra": 1}', '{"city": "Riga", "days": 1, "note": "a", "note": "b"}',
    '{"city": "\\u0052iga", "days": 1}', '{"city": "Riga", "days": 1,}',
])
def test_invalid_text_is_refused(text: str) -> None:
    lay = Layout(_SMALL)
    state, _ = _feed(lay, text.encode())
    assert state is None or not lay.accepting(state)


@pytest.mark.parametrize("data", [b'"\xc3\x28"', b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"',
                                  b'"\xff"', b'"\x80"', b'"\xe2\x82"x'])
def test_invalid_utf8_is_refused(data: bytes) -> None:
    lay = Layout({"type": "string"})
    state, _ = _feed(lay, data)
    assert state is None or not lay.accepting(state)


@pytest.mark.parametrize("name", ["optional", "arrays", "union", "strings", "numbers", "mixed_enum", "trip1"])
def test_mutated_records_accepted_only_when_valid(name: str) -> None:
    """Single-byte edits of canonical texts: whatever the layout still accepts is valid, canonical JSON."""
    lay, spec, r = _layout(name, None), _spec(name), random.Random(name)
    for _ in range(120):
        data = bytearray(lay.render(_record(spec.compiled.root, r)).encode())
        k = r.randrange(len(data))
        op = r.random()
        if op < 0.4:
            data[k] = r.choice(b' ,:"{}[]\\0123456789-.eatrufnl\xc3\xa9')
        elif op < 0.7:
            data.insert(k, r.choice(b' ,"\\0-.e\n'))
        else:
            del data[k]
        state, _ = _feed(lay, bytes(data))
        if state is not None and lay.accepting(state):
            rec = json.loads(data)
            assert not list(_validator(name).iter_errors(rec)), bytes(data)
            if name not in _HAS_NUMBERS:
                assert lay.render(rec).encode() == bytes(data)


# --------------------------------------------------------------------------------------------- slots, filters
def test_slot_boundaries_and_candidates() -> None:
    lay = Layout(_SMALL)
    s = lay.advance(lay.start(), b'{"city": ')
    assert s is not None and lay.slot(s) is not None
    assert (lay.slot(s).pointer, lay.slot(s).kind, lay.slot(s).typed) == ("/city", "field", b"")
    assert lay.candidates(s) == ["Riga", "Rome"]
    s = lay.advance(s, b'"Ri')
    assert lay.candidates(s) == ["Riga"] and lay.completed(s) == ()
    s = lay.advance(s, b'ga"')  # nothing extends "Riga": complete at its closing quote
    assert lay.completed(s) == (("/city", "Riga"),) and lay.slot(s) is None
    s = lay.advance(s, b', "days": 1')
    assert lay.slot(s).typed == b"1" and lay.candidates(s) == [1, 10, 11, 12, 13, 14, 15]
    assert lay.completed(s) == ()  # "1" may become "12": complete only with the next byte
    assert lay.advance(s, b"}").events == (("/days", 1),)
    assert lay.advance(s, b"5").events == (("/days", 15),)  # nothing extends 15
    assert lay.advance(s, b"6") is None
    assert lay.forced(lay.advance(s, b"5")) == b""  # "}" or ", " may follow
    assert lay.forced(lay.start()) == b'{"city": "R'
    # a union: the discriminator's bytes pick the branch; shared bytes keep both alive
    lay = _layout("union_shared_prefix", None)
    s = lay.advance(lay.start(), b'{"u": {"x": 5')
    assert lay.slot(s).pointer == "/u/x" and lay.candidates(s) == [5, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]
    assert lay.advance(s, b', "kind": "small"}}') is not None and lay.advance(s, b', "kind": "big"}}') is not None
    s = lay.advance(s, b'0')
    assert lay.advance(s, b', "kind": "small"}}') is None and lay.advance(s, b', "kind": "big"}}') is not None


def test_events_carry_array_indices_and_escaped_keys() -> None:
    lay = _layout("indexed", None)
    text = '{"grid": [["o", "x"], ["x", "x", "o"]]}'
    state, events = _feed(lay, text.encode())
    assert state is not None and lay.accepting(state)
    assert events == [("/grid/0/0", "o"), ("/grid/0/1", "x"), ("/grid/1/0", "x"), ("/grid/1/1", "x"),
                      ("/grid/1/2", "o")]
    lay = _layout("odd_keys", None)
    state, events = _feed(lay, '{"a/b": true, "é\\"ñ": 0, "~": "t"}'.encode())
    assert state is not None and events == [("/a~1b", True), ("/é\"ñ", 0), ("/~0", "t")]


def test_admissible_restricts_field_values() -> None:
    spec = _spec("trip0")
    lay, r = _layout("trip0", None), random.Random(7)
    for _ in range(10):
        keep = {p: set(r.sample(list(f.values), max(1, f.size // 3))) for p, f in spec.fields.items()}
        adm = lambda p, keep=keep: sorted(keep[p], key=str) if p in keep else None  # noqa: E731
        data, events = _walk(lay, r, adm)
        rec = json.loads(data)
        assert not list(_validator("trip0").iter_errors(rec))
        assert events and all(v in keep[p] for p, v in events)
        assert events == _fields(spec.compiled.root, rec)
    lay = Layout(_SMALL)
    only = {"/city": ["Rome"], "/days": [3, 12]}
    s = lay.advance(lay.start(), b'{"city": ', admissible=only.get)
    assert lay.allowed_next_bytes(s, admissible=only.get) == {ord('"')}
    assert lay.candidates(s, admissible=only.get) == ["Rome"]
    assert lay.advance(s, b'"Ri', admissible=only.get) is None
    s = lay.advance(s, b'"Rome", "days": 1', admissible=only.get)
    assert lay.candidates(s, admissible=only.get) == [12]
    assert lay.allowed_next_bytes(s, admissible=only.get) == {ord("2")}  # 1 alone is not admissible
    assert lay.advance(s, b"}", admissible=only.get) is None
    assert lay.forced(s, admissible=only.get) == b"2"
    # an empty admissible set: the slot cannot even be entered; values outside the domain are ignored
    assert lay.advance(lay.start(), b'{"city": ', admissible=lambda p: [] if p == "/city" else None) is None
    s = lay.advance(lay.start(), b'{"city": ', admissible=lambda p: ["Oslo", "Rome", 5])
    assert s is not None and lay.candidates(s, admissible=lambda p: ["Oslo", "Rome", 5]) == ["Rome"]


def test_filtered_slots_are_shared_only_between_equal_values_of_equal_types() -> None:
    """A filter's slot of admissible values is shared by every layout with the same values of the same types, in
    the same order; ``True`` and ``1``, ``1`` and ``1.0``, and values in another order each get their own slot, and
    each renders its own values (``json.dumps``). Floats and containers are never shared."""
    from factorspec_cp.tokenmap.layout import filtered_slot, render_value

    a = filtered_slot(["Rome", "Oslo"])
    assert filtered_slot(["Rome", "Oslo"]) is a and filtered_slot(["Oslo", "Rome"]) is not a
    one, true, one_f = filtered_slot([1]), filtered_slot([True]), filtered_slot([1.0])
    assert len({id(one), id(true), id(one_f)}) == 3 and filtered_slot([1]) is one and filtered_slot([1.0]) is not one_f
    assert filtered_slot([{"a": 1}]) is not filtered_slot([{"a": 1}])
    for slot in (a, one, true, one_f, filtered_slot([None, "x", 7])):
        assert slot.renders == sorted(json.dumps(v).encode() for v in slot.domain)
        assert [render_value(v) for v in slot.domain] == [json.dumps(v).encode() for v in slot.domain]


@pytest.mark.parametrize("name", ["calendar0", "trip1"])
def test_walk_driven_by_a_session_satisfies_the_relations(name: str) -> None:
    """The decoder's loop in miniature: admissible from the session, completed values assigned to it."""
    spec, lay, r = _spec(name), _layout(name, None), random.Random(name)
    for _ in range(2):
        session = spec.session()

        def assign(p: str, v: Any, session: Any = session) -> None:
            if p in spec.fields:
                session.assign(p, v)

        def admissible(p: str, session: Any = session) -> Any:
            return session.admissible(p) if p in spec.fields else None

        data, _ = _walk(lay, r, admissible, on_event=assign)
        assert spec.check_record(json.loads(data)) == [], data


# --------------------------------------------------------------------------------------------- states, scalars
def test_states_are_values_for_rollback_and_caching() -> None:
    lay = _layout("union", None)
    text = lay.render(_record(_spec("union").compiled.root, random.Random(3))).encode()
    stack = [lay.start()]
    for b in text:
        stack.append(lay.advance(stack[-1], bytes((b,))))  # type: ignore[arg-type]
    assert all(s is not None for s in stack) and lay.accepting(stack[-1])  # type: ignore[arg-type]
    again = lay.advance(lay.start(), text[: len(text) // 2])
    assert again == stack[len(text) // 2] and hash(again) == hash(stack[len(text) // 2])
    assert len({s: k for k, s in enumerate(stack)}) == len(stack)  # hashable; distinct positions differ
    chunked, events = lay.start(), []
    for k in range(0, len(text), 5):
        chunked = lay.advance(chunked, text[k:k + 5])
        events += lay.completed(chunked)
    assert chunked == stack[-1] and events == _feed(lay, text)[1]
    with pytest.raises(AttributeError):
        stack[0].threads = frozenset()  # type: ignore[misc]


def test_root_scalars_complete_at_the_end() -> None:
    lay = Layout({"type": "integer", "minimum": 0, "maximum": 200})
    s = lay.advance(lay.start(), b"12")
    assert lay.accepting(s) and lay.finish(s) == (("", 12),) and lay.completed(s) == ()
    assert sorted(lay.allowed_next_bytes(s)) == [ord(c) for c in "0123456789"]
    assert lay.advance(s, b"00") is None and lay.finish(lay.advance(lay.start(), b"200")) == ()
    assert lay.render(7) == "7"
    lay = Layout({"type": "string", "maxLength": 2})
    assert lay.accepting(lay.advance(lay.start(), b'"\\n\xc3\xa9"'))
    assert lay.advance(lay.start(), b'"abc') is None


def test_layout_errors() -> None:
    with pytest.raises(UnsupportedKeyword, match="pattern"):
        Layout({"type": "string", "pattern": "(a)\\1"})
    with pytest.raises(UnsupportedKeyword, match="anchors"):
        Layout({"type": "string", "pattern": "(a$)|b"})
    with pytest.raises(ValueError, match="indent"):
        Layout({"type": "boolean"}, indent=-1)
    with pytest.raises(ValueError, match="no value"):
        Layout({"type": "number", "minimum": 3, "maximum": 2})
    with pytest.raises(ValueError, match="not in the schema"):
        Layout(_SMALL).render({"city": "Riga", "days": 1, "x": 0})


# ------------------------------------------------------------------------------------- slot automata, brute force
def _strings(alphabet: str, n: int) -> list[str]:
    return ["".join(p) for k in range(n + 1) for p in itertools.product(alphabet, repeat=k)]


@pytest.mark.parametrize("lo,hi,step", [(1, 15, 1), (-40, 7, 3), (7, None, 5), (None, -1, 1), (None, None, 4),
                                        (0, 0, 1), (95, 1003, 1)])
def test_integer_slot_against_brute_force(lo: int | None, hi: int | None, step: int) -> None:
    slot = IntegerSlot(lo, hi, step, 0)
    window = range(-20000 if lo is None else lo, (20000 if hi is None else hi) + 1)  # holds every 3-byte prefix
    texts = [str(x) for x in window if x % step == 0]
    prefixes = {t[:k] for t in texts for k in range(len(t) + 1)}
    for t in _strings("-0123456789", 3):
        assert slot.prefix_ok(t.encode()) == (t in prefixes), t
        assert (slot.value(t.encode()) is not NOTHING) == (t in texts and len(t) <= 3), t


@pytest.mark.parametrize("schema", [
    {"minimum": -2.5, "exclusiveMaximum": 10}, {"exclusiveMinimum": 0, "maximum": 0.001}, {},
    {"minimum": 5, "maximum": 5}, {"minimum": 120}, {"exclusiveMaximum": -0.5}])
def test_number_slot_against_brute_force(schema: dict[str, Any]) -> None:
    """Every complete text is a JSON number in bounds (as jsonschema judges it); every kept prefix completes."""
    slot = NumberSlot({"type": "number", **schema})
    check = jsonschema.Draft202012Validator({"type": "number", **schema})
    for t in _strings("-01259.e", 4):
        v = slot.value(t.encode())
        try:
            parsed = json.loads(t) if t and t.strip() == t else None
        except ValueError:
            parsed = None
        ok = parsed is not None and check.is_valid(parsed)
        assert (v is not NOTHING) == ok, t
        if len(t) <= 3 and slot.prefix_ok(t.encode()):  # a kept prefix has a completion a few bytes on
            assert _completes(slot, t.encode(), 8), t


def _completes(slot: NumberSlot, sub: bytes, depth: int, budget: list[int] | None = None) -> bool:
    """Depth-first search for a complete number extending ``sub`` (exponents first: they reach any scale)."""
    budget = [3000] if budget is None else budget
    budget[0] -= 1
    if slot.value(sub) is not NOTHING:
        return True
    if depth == 0 or budget[0] < 0:
        return False
    nxt = slot.next_bytes(sub)
    return any(_completes(slot, sub + bytes((b,)), depth - 1, budget) for b in b"e-+.01259" if b in nxt)


@pytest.mark.parametrize("schema", [
    {"pattern": "^(ab|c)+$", "maxLength": 4}, {"pattern": "b", "minLength": 2, "maxLength": 3},
    {"pattern": "^a|c$"}, {"minLength": 1, "maxLength": 2}, {"pattern": "^\\S\\w$"},
    {"pattern": "^[^a]*$", "maxLength": 3}])
def test_string_slot_against_re_search(schema: dict[str, Any]) -> None:
    slot = StringSlot({"type": "string", **schema})
    check = jsonschema.Draft202012Validator({"type": "string", **schema})
    for s in _strings("abcé\"\n", 4):
        sub: Any = slot.start
        for b in json.dumps(s, ensure_ascii=False).encode():
            sub = slot.step(sub, b)
            if sub is None:
                break
        accepted = sub is not None and slot.value(sub) == s
        if accepted:
            assert check.is_valid(s), s
        elif check.is_valid(s):  # shorthand classes stay ASCII in the layout (a documented subset)
            assert re.search(r"\\[SWDswd]", schema.get("pattern", "")) and not s.isascii(), s


def test_pattern_anchors_follow_search_semantics() -> None:
    for pattern in ["^a|c$", "a|b", "^(a|b)$", "x\\$", "^$", "[$^]"]:
        slot = StringSlot({"type": "string", "pattern": pattern, "maxLength": 3})
        for s in _strings("abc$^x\n", 3):
            sub: Any = slot.start
            for b in json.dumps(s).encode():
                sub = slot.step(sub, b) if sub is not None else None
            assert (sub is not None and slot.value(sub) == s) == bool(re.search(pattern, s)), (pattern, s)


def _nested_arrays() -> dict[str, Any]:
    return {"type": "object", "required": ["a"], "properties": {"a": {"type": "array", "items": {
        "type": "object", "required": ["x", "y"], "properties": {
            "x": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}},
            "y": {"type": "string"}}}}}}


@pytest.mark.parametrize(("schema", "finite"), [(_TOOL_CALL, True), (_nested_arrays(), False), ("meeting", True)])
def test_prepare_covers_what_a_walk_computes(schema: Any, finite: bool) -> None:
    """``Layout.prepare`` fills the per-position caches ahead: where the layout has finitely many positions, random byte
    walks (with their ends, value choices and jumps over fixed bytes) then compute no new entry, and agree byte by byte
    with a layout that computes them on first use; where it has unboundedly many (arrays with no ``maxItems``), it
    stops at the limit."""
    if schema == "meeting":
        schema = meeting.declaration(next(iter(meeting.examples())))
    prepared, fresh = Layout(schema), Layout(schema)
    limit = 10**6 if finite else 200
    visited = prepared.prepare(limit=limit)
    assert 0 < visited < limit if finite else visited == limit
    assert prepared.prepare() == 0  # once per layout
    caches = ("_closures", "_chains", "_follows", "_pointers")
    before = {name: set(getattr(prepared, name)) for name in caches}
    assert all(before.values())
    rng = random.Random(7)
    for _ in range(30):  # random walks agree byte by byte with the lazy layout
        a, b = prepared.start(), fresh.start()
        for _ in range(400):
            nxt = sorted(prepared.allowed_next_bytes(a))
            assert nxt == sorted(fresh.allowed_next_bytes(b))
            assert (prepared.finish(a) is None) == (fresh.finish(b) is None)
            ca, cb = prepared.value_choice(a), fresh.value_choice(b)  # (pointer, bytes before, typed: each layout
            assert (ca is None) == (cb is None)                       # has its own field and matcher objects)
            assert ca is None or cb is None or (ca[0], ca[3], ca[4]) == (cb[0], cb[3], cb[4])
            if not nxt:
                break
            byte = bytes([rng.choice(nxt)])
            if rng.random() < 0.3 and prepared.forced_bytes(a) is not None:  # a jump over fixed bytes, as a planner
                assert fresh.forced_bytes(b) is not None
            a, b = prepared.advance(a, byte), fresh.advance(b, byte)
            assert a is not None and b is not None and a.threads == b.threads and a.events == b.events
    if finite:
        assert {name: set(getattr(prepared, name)) for name in caches} == before, "a walk computed a new entry"
