"""Unions, lists of types, untyped schemas and allOf, judged by ``jsonschema`` (an implementation independent of ours).

For each schema, every value of a pool is rendered and fed to the byte automaton: what the automaton accepts must be
valid (no weakening), and what is valid must be accepted unless it carries a property the schema does not declare
(narrowing, which is allowed: a record we emit carries only declared properties) or sits below the depth bound of an
untyped schema. Random records the layout generates must be valid too.
"""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

import factorspec_cp as fs
from factorspec_cp.bench import coverage as cov
from factorspec_cp.errors import DeclarationError, UnsupportedKeyword
from factorspec_cp.schema import ANY_DEPTH, UnionNode
from factorspec_cp.tokenmap.layout import Layout

POOL: list[Any] = [
    None, True, False, 0, 1, 2, 3, 7, 10, -1, 2.5, 1e3, "", "a", "ab", "abc", "abcd", "x", "xy", "2020-02-29",
    "2021-02-29", [], [1], [None], [True, None], ["a", "b"], [[1]], [[[[]]]], [1, 2, 3], {}, {"k": "a"}, {"k": "b"},
    {"k": 1}, {"k": 2}, {"k": "a", "x": True}, {"x": True}, {"y": False}, {"x": 1}, {"a": 1, "b": 2}, {"a": 1},
    {"a": 5}, {"b": "z"}, {"a": None}, {"k": "a", "n": 3}, {"k": "b", "s": "xy"}, {"t": "a"}, {"t": "b"},
    {"t": "a", "v": True}, {"t": "b", "v": True}, {"v": False}, {"p": 1}, {"q": 2}, {"p": 1, "q": 2},
    {"a": 1, "b": "z"}, {"b": 2}, {"b": 1}, {"a": 1, "b": 1}, {"ab": 2}, {"ab": 5}, {"ab": 2, "b": True}, {"a": 2},
    {"a": 0}, {"a": 1, "b": 2, "k": "a"}, [1, "a"], [1, "a", True], [None, 2], [0, "b", False, True], [3, 5],
    [2, "b", True, False, True], [None], [1, "c"],
]

SCHEMAS: dict[str, dict[str, Any]] = {
    "type-list": {"type": ["string", "null"], "maxLength": 2},
    "type-list-numbers": {"type": ["integer", "boolean"], "minimum": 1, "maximum": 3},
    "integer-and-number": {"type": ["integer", "number"], "maximum": 2},
    "untyped": {},
    "property-true": {"type": "object", "required": ["a"], "properties": {"a": True}},
    "untyped-keywords": {"minLength": 2, "maximum": 2, "description": "anything"},
    "untyped-format": {"format": "date"},
    "array-without-items": {"type": "array", "maxItems": 2},
    "anyOf-kinds": {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 0, "maximum": 3},
                              {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 2}}]},
    "anyOf-overlap": {"anyOf": [{"enum": [1, 2, "a"]}, {"type": "integer", "minimum": 2, "maximum": 3}]},
    "anyOf-siblings": {"type": "object", "required": ["k"], "properties": {"k": {"enum": ["a", "b"]}},
                       "anyOf": [{"properties": {"k": {"const": "a"}, "n": {"type": "integer", "minimum": 0,
                                                                            "maximum": 5}}},
                                 {"properties": {"k": {"const": "b"}, "s": {"type": "string"}}}]},
    "oneOf-kinds": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["k"],
                                                 "properties": {"k": {"enum": ["a", "b"]}}}]},
    "oneOf-enums": {"oneOf": [{"enum": [1, "a"]}, {"enum": [2, "b"]}]},
    "oneOf-tags": {"type": "object", "oneOf": [
        {"required": ["k"], "properties": {"k": {"const": "a"}, "x": {"type": "boolean"}}},
        {"required": ["k"], "properties": {"k": {"const": "b"}, "s": {"type": "string", "maxLength": 2}}}]},
    "oneOf-required": {"type": "object", "properties": {"p": {"type": "integer", "minimum": 0, "maximum": 3},
                                                        "q": {"type": "integer", "minimum": 0, "maximum": 3}},
                       "oneOf": [{"required": ["p"]}, {"required": ["q"]}]},
    "oneOf-optional-tags": {"type": "object", "oneOf": [
        {"properties": {"t": {"enum": ["a"]}, "v": {"type": "boolean"}}}, {"properties": {"t": {"enum": ["b", "c"]}}}]},
    "oneOf-required-undeclared": {"type": "object", "oneOf": [
        {"required": ["p"], "properties": {"q": {"type": "integer", "minimum": 0, "maximum": 3}}},
        {"required": ["q"], "properties": {"q": {"type": "integer", "minimum": 0, "maximum": 3}}}]},
    "allOf-bounds": {"allOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"minimum": 2}, {"maximum": 3}]},
    "allOf-objects": {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}},
        {"required": ["a"], "properties": {"a": {"maximum": 2}, "b": {"type": "integer", "minimum": 0,
                                                                     "maximum": 9}}}]},
    "allOf-closed": {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
         "additionalProperties": False},
        {"properties": {"b": {"type": "integer", "minimum": 0, "maximum": 9}}}]},
    "allOf-enums": {"allOf": [{"enum": [1, 2, "a", None]}, {"enum": [2, "a", True]}]},
    "allOf-ref": {"$defs": {"base": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}}},
                  "allOf": [{"$ref": "#/$defs/base"}, {"required": ["k"]}]},
    "pattern-properties": {"type": "object", "required": ["ab"], "properties": {
        "ab": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}},
        "patternProperties": {"^a": {"maximum": 3}}},
    "required-undeclared": {"type": "object", "required": ["a"],
                            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 2}},
    "min-max-properties": {"type": "object", "properties": {"a": {"enum": [1]}, "b": {"enum": [2]},
                                                            "k": {"enum": ["a"]}},
                           "minProperties": 1, "maxProperties": 2},
    "dependent-required": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                                            "b": {"type": "string", "maxLength": 1}},
                           "dependentRequired": {"a": ["b"]}},
    "dependencies-schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                                             "b": {"type": "integer", "minimum": 0, "maximum": 9}},
                            "dependencies": {"a": {"properties": {"b": {"maximum": 1}}}}},
    "dependent-false": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 2},
                                                         "b": {"type": "boolean"}}, "dependentSchemas": {"a": False}},
    "enum-typed": {"type": "string", "enum": ["a", "b", 1, None]},
    "empty-parts": {"type": "object", "required": ["a"], "properties": {
        "a": {"anyOf": [{"type": "integer", "enum": ["x"]}, {"type": "integer", "minimum": 0, "maximum": 2}]},
        "b": False, "k": {"type": "object", "enum": ["MODIFIABLE"]}, "s": {"type": "array", "items": False}}},
    "enum-structured": {"enum": [{"k": "a"}, [1], [[1]], {}, [], 1, {"a": 1, "b": 2}]},
    "const-structured": {"type": "object", "const": {"a": 1, "b": 2}},
    "prefix-items": {"type": "array", "maxItems": 4, "items": {"type": "boolean"},
                     "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 3}, {"enum": ["a", "b"]}]},
    "tuple-draft7": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "minItems": 1,
                     "additionalItems": False,
                     "items": [{"type": ["null", "integer"], "minimum": 1, "maximum": 3}, {"type": "integer"}]},
    "prefix-required": {"type": "array", "minItems": 2, "prefixItems": [{"type": "integer"}, {"const": "a"}]},
    "allOf-prefix": {"allOf": [{"prefixItems": [{"minimum": 3}]}], "items": {"type": "integer", "minimum": 5,
                                                                           "maximum": 9}},
    "not-types": {"not": {"type": ["string", "object", "array"]}},
    "not-enum-integer": {"type": "integer", "minimum": 0, "maximum": 3, "not": {"enum": [1, 2]}},
    "not-required": {"type": "object", "properties": {"a": {"enum": [1]}, "b": {"enum": [2]}},
                     "not": {"required": ["a", "b"], "properties": {"a": {"enum": [1]}}}},
    "not-integer": {"not": {"type": "integer"}},
    "not-forbidden": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 2},
                                                       "b": {"not": {}}}},
    "not-const": {"enum": [1, "a", None], "not": {"const": "a"}},
    "contains": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "contains": {"minimum": 5},
                 "maxItems": 3},
    "contains-twice": {"type": "array", "items": {"enum": [1, 2, 3, 5]}, "contains": {"enum": [2, 3]},
                       "minContains": 2, "maxContains": 3, "maxItems": 3},
    "contains-untyped": {"contains": {"const": 1}},
    "stray-keywords": {"type": "string", "minimum": 3, "items": {"type": "boolean"}, "maxLength": 1},
}


def _narrowed(name: str, v: Any) -> bool:
    """Valid values a compiled layout need not emit (narrowing): undeclared properties; any value's objects are
    empty objects; arrays nested past :data:`ANY_DEPTH` in an untyped schema."""
    def depth(x: Any) -> int:
        return 1 + max((depth(y) for y in x), default=0) if isinstance(x, list) else 0
    if isinstance(v, dict) and v and name in ("untyped", "untyped-keywords", "untyped-format"):
        return True
    if isinstance(v, list) and depth(v) > ANY_DEPTH:
        return True
    if name in ("array-without-items",) and any(isinstance(x, dict) and x for x in v if isinstance(v, list)):
        return True
    if name == "property-true" and isinstance(v, dict) and (set(v) != {"a"} or isinstance(v["a"], (dict, list))):
        return True
    if name == "not-integer" and (isinstance(v, float) and not v.is_integer() or isinstance(v, dict) and v):
        return True  # numbers that are not integers are not written; any value's objects are empty
    if name == "not-required" and isinstance(v, dict) and "a" in v:
        return True  # `not required [a, b]`: a is never written
    if name in ("contains", "contains-twice") and isinstance(v, list) and v:
        return True  # the matches come first: a valid array whose first items do not match is not written
    if name == "contains-untyped" and (isinstance(v, dict) and v or isinstance(v, list) and v[:1] != [1]):
        return True  # any value's objects are empty; the match comes first
    if name == "allOf-prefix" and not isinstance(v, list):
        return True  # an untyped schema with items compiles to arrays
    if name == "oneOf-optional-tags" and isinstance(v, dict) and v.get("t") != "a" and "v" in v:
        return True  # valid by the second branch's additional property, which the layout does not write
    narrowed = {  # valid values these layouts leave out on purpose (see _Compiler._object)
        "min-max-properties": lambda x: isinstance(x, dict) and "a" not in x or "k" in x,  # a required, k dropped
        "dependent-required": lambda x: isinstance(x, dict) and "b" not in x,  # b always written
        "dependencies-schema": lambda x: isinstance(x, dict) and x.get("b", 0) > 1,  # b <= 1 always
    }
    if name in narrowed and isinstance(v, dict) and narrowed[name](v):
        return True
    declared = {
        "oneOf-required-undeclared": {"p", "q"}, "empty-parts": {"a", "s"}, "pattern-properties": {"ab", "b"},
        "required-undeclared": {"a"}, "min-max-properties": {"a", "b", "k"}, "not-required": {"a", "b"},
        "not-forbidden": {"a"}, "dependent-required": {"a", "b"},
        "dependencies-schema": {"a", "b"}, "dependent-false": {"b"}, "oneOf-required": {"p", "q"},
        "oneOf-optional-tags": {"t", "v"}, "anyOf-siblings": {"k", "n", "s"}, "oneOf-kinds": {"k"},
        "oneOf-tags": {"k", "x", "s"}, "allOf-objects": {"a", "b"}, "allOf-closed": {"a"}, "allOf-ref": {"k"}
    }
    return isinstance(v, dict) and name in declared and not set(v) <= declared[name]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_layout_agrees_with_jsonschema(name: str) -> None:
    schema = SCHEMAS[name]
    spec = fs.Spec(schema)
    layout = Layout(spec)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=jsonschema.FormatChecker())
    for v in POOL:
        valid = validator.is_valid(v)
        accepted = cov.layout_accepts(layout, v)
        assert not accepted or valid, (name, v, "accepted but invalid: a weakening")
        if valid and not _narrowed(name, v):
            assert accepted, (name, v, "valid but not accepted")
    gen = cov.Generator(random.Random(7), layout)
    for _ in range(40):
        try:
            rec = gen.record(spec.compiled.root)
        except cov.GenSkip:
            continue
        assert validator.is_valid(rec), (name, rec)
        assert cov.layout_accepts(layout, rec), (name, rec)


def test_a_type_list_is_a_union_of_typed_branches() -> None:
    u = fs.Spec({"type": ["string", "null"], "maxLength": 2}).compiled.root
    assert isinstance(u, UnionNode) and u.discriminator is None and len(u.branches) == 2


@pytest.mark.parametrize("schema, pointer", [
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "#/oneOf"),  # every integer is a number
    ({"oneOf": [{"type": "string"}, {"minLength": 2}]}, "#/oneOf"),  # an untyped branch holds for strings too
    ({"oneOf": [{"enum": [1, 2]}, {"enum": [2, 3]}]}, "#/oneOf"),
    ({"type": "object", "oneOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"b": {"const": 1}}}]},
     "#/oneOf"),  # {} holds for both
    ({"type": "object", "oneOf": [{"required": ["p"]}, {"required": ["p"], "properties": {"q": {"type": "null"}}}]},
     "#/oneOf"),  # {"p": 1} holds for both: a required name left undeclared is still written
])
def test_oneOf_that_may_overlap_is_refused(schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec(schema)
    assert info.value.pointer == pointer and "exclusivity" in str(info.value)


@pytest.mark.parametrize("schema, pointer", [
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "#/allOf"),
    ({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]}, "#/allOf"),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": False},
                {"required": ["b"], "properties": {"b": {"type": "boolean"}}}]}, "#/allOf"),
    ({"type": "integer", "anyOf": [{"type": "string"}, {"type": "null"}]}, "#"),
])
def test_unsatisfiable_combinations_are_errors(schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(DeclarationError) as info:
        fs.Spec(schema)
    assert info.value.pointer == pointer


def test_allOf_parts_that_disagree_on_a_keyword_without_a_meet_are_refused() -> None:
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec({"allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "b$"}]})
    assert info.value.pointer == "#/allOf/1/pattern"


def test_content_keywords_assert_under_draft_7_only() -> None:
    doc = {"type": "string", "contentMediaType": "application/json"}
    assert ("#", "contentMediaType") in fs.Spec(doc).ignored  # 2020-12: an annotation
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec({"$schema": "http://json-schema.org/draft-07/schema#", **doc})
    assert info.value.pointer == "#/contentMediaType"


def test_relations_may_not_read_into_a_general_union() -> None:
    doc = {"type": "object", "required": ["u", "n"], "properties": {
        "u": {"type": ["integer", "null"], "minimum": 0, "maximum": 3},
        "n": {"type": "integer", "minimum": 0, "maximum": 3}},
        "x-factorspec": {"relations": [{"kind": "compare", "left": "/u", "op": "<=", "right": "/n"}]}}
    with pytest.raises(DeclarationError) as info:
        fs.Spec.from_json(doc)
    assert type(info.value).__name__ == "NotAField"


def test_relations_read_the_fields_of_a_fixed_tuple() -> None:
    """A tuple of two integers with ``/0 < /1``: the records a decoder writes keep it (and ``/2`` names nothing)."""
    doc = {"type": "array", "minItems": 2, "items": False, "prefixItems": [
        {"type": "integer", "minimum": 0, "maximum": 3}, {"type": "integer", "minimum": 0, "maximum": 3}],
        "x-factorspec": {"relations": [{"kind": "compare", "left": "/0", "op": "<", "right": "/1"}]}}
    spec = fs.Spec.from_json(doc)
    assert sorted(spec.fields) == ["/0", "/1"]
    records = set()
    from factorspec_cp.bench.walks import walk
    from factorspec_cp.tokenmap import Vocabulary
    vocab, rng = Vocabulary.smollm2(), random.Random(5)
    for _ in range(8):
        out = walk(spec, vocab, "canonical", rng, rollback_p=0.1)
        a, b = out["record"]
        records.add((a, b))
        assert a < b, out["record"]
    assert len(records) > 1  # the walks choose, not one forced record
    bad = dict(doc, **{"x-factorspec": {"relations": [{"kind": "compare", "left": "/2", "op": "<", "right": "/1"}]}})
    with pytest.raises(DeclarationError):
        fs.Spec.from_json(bad)


def test_unique_items_is_an_all_different_relation() -> None:
    """uniqueItems over a fixed-length array of finite values: the records the spec admits are exactly the ones
    jsonschema finds valid (every tuple of the domain, brute force), and decoder walks keep the items apart."""
    import itertools

    from factorspec_cp.bench.walks import walk
    from factorspec_cp.tokenmap import Vocabulary
    schema = {"type": "array", "minItems": 3, "maxItems": 3, "uniqueItems": True,
              "items": {"enum": [1, 2, "1", True]}}
    spec = fs.Spec(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for rec in itertools.product([1, 2, "1", True], repeat=3):  # 1, "1" and true are three values
        assert (not spec.check_record(list(rec))) == validator.is_valid(list(rec)), rec
    vocab, rng = Vocabulary.smollm2(), random.Random(2)
    for _ in range(6):
        out = walk(spec, vocab, "canonical", rng, rollback_p=0.1)
        assert validator.is_valid(out["record"]), out["record"]
    with pytest.raises(DeclarationError):  # three items, two values: no unique array
        fs.Spec({**schema, "items": {"enum": ["a", "b"]}})


def test_a_decoder_walks_a_union_to_valid_records() -> None:
    """Random decoder walks over SmolLM2's vocabulary through unions of every kind end in valid records."""
    from factorspec_cp.bench.walks import walk
    from factorspec_cp.tokenmap import Vocabulary
    vocab = Vocabulary.smollm2()
    schema = {"type": "object", "required": ["a", "b", "c", "d", "e"], "properties": {
        "a": {"type": ["string", "null"], "maxLength": 4},
        "b": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 20}, {"type": "array", "maxItems": 2}]},
        "c": {"oneOf": [{"type": "boolean"}, {"type": "object", "required": ["k"],
                                              "properties": {"k": {"enum": ["a", "b"]}}}]},
        "d": {"enum": [{"x": [1, 2]}, {"x": [1]}, [True, None], "s"]},
        "e": {"type": "array", "prefixItems": [{"enum": ["p", "q"]}, {"type": "integer", "minimum": 0, "maximum": 9}],
              "items": {"type": "boolean"}, "maxItems": 3}}}
    spec = fs.Spec(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(3)
    for mode in ("canonical", "exact"):
        for _ in range(6):
            out = walk(spec, vocab, mode, rng, rollback_p=0.1)
            assert validator.is_valid(out["record"]), out["record"]
            assert out["mismatches"] == 0


@pytest.mark.parametrize("schema, pointer", [
    ({"type": "object", "required": ["b"], "properties": {"b": False}}, "#/properties/b"),
    ({"type": "object", "required": ["k"], "properties": {"k": {"type": "object", "enum": ["x"]}}},
     "#/properties/k/enum"),
    ({"type": "array", "minItems": 1, "items": {"allOf": [{"type": "string"}, {"type": "null"}]}}, "#/items/allOf"),
])
def test_a_required_part_no_value_satisfies_is_an_empty_schema(schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(fs.EmptySchema) as info:
        fs.Spec(schema)
    assert info.value.pointer == pointer


def test_optional_parts_no_value_satisfies_are_left_out() -> None:
    root = fs.Spec(SCHEMAS["empty-parts"]).compiled.root
    assert [p.name for p in root.properties] == ["a", "s"]  # type: ignore[union-attr]
    s = root.properties[1].node  # type: ignore[union-attr]
    assert s.max_items == 0
