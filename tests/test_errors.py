"""Typed declaration errors: every invalid declaration raises a specific ``DeclarationError`` subclass whose
``pointer`` is the JSON Pointer of the offending part, whose message names what was found and (where one makes
sense) a hint; nothing invalid is accepted silently. Also: unsatisfiable declarations and their minimal
explanation, checked against an independent deletion test, and usage errors on sessions.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

import factorspec_cp as fs
from factorspec_cp import (
    DeclarationError,
    FreeFieldInRelation,
    InvalidAssignment,
    MalformedRelation,
    NotAField,
    TableBudgetExceeded,
    TypeMismatch,
    UnboundedDomain,
    UnknownPath,
    UnknownRelationKind,
    UnsatisfiableDeclaration,
    UnsupportedKeyword,
)

DAY = {"type": "integer", "minimum": 1, "maximum": 15}

#: A trip-like record with one example of every kind of leaf a relation might (wrongly) name.
BASE: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["plan", "flag", "note", "count", "wide", "score", "meta", "tags"],
    "properties": {
        "plan": {"type": "array", "minItems": 3, "maxItems": 3, "items": {
            "type": "object", "additionalProperties": False, "required": ["city", "first_day", "last_day"],
            "properties": {"city": {"enum": ["Riga", "Manchester", "Split"]}, "first_day": DAY, "last_day": DAY}}},
        "flag": {"type": "boolean"},
        "note": {"type": "string", "maxLength": 40},
        "count": {"type": "integer", "minimum": 0},
        "wide": {"type": "integer", "minimum": 0, "maximum": 10_000_000},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "meta": {"type": "object", "required": ["level"],
                 "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 3}}},
        "opt": {"type": "integer", "minimum": 0, "maximum": 3},
        "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["a", "b"]}},
    },
}

#: Two valid relations, so that the offending one is relation 2.
VALID = [
    {"kind": "all_different", "fields": ["/plan/*/city"]},
    {"kind": "linear", "terms": [[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]], "op": "==", "rhs": 0},
]
R2 = "#/x-factorspec/relations/2"


def declaration(relation: Any, schema: dict[str, Any] | None = None, **x: Any) -> dict[str, Any]:
    doc = copy.deepcopy(schema if schema is not None else BASE)
    doc["x-factorspec"] = {"relations": [*copy.deepcopy(VALID), relation], **x}
    return doc


def obj(props: dict[str, Any], required: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **kw}


def under(pointer: str, prefix: str) -> bool:
    """``pointer`` is ``prefix`` or a pointer inside it."""
    return pointer == prefix or pointer.startswith(prefix + "/")


def resolves(doc: Any, pointer: str) -> bool:
    """``pointer`` (``#/...``) names a part that exists in ``doc`` (RFC 6901, with array indices)."""
    assert pointer.startswith("#")
    cur = doc
    for tok in [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")[1:]]:
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return False
    return True


def test_valid_base_compiles() -> None:
    """The fixtures themselves are valid: errors below come from the one offending part."""
    spec = fs.Spec.from_json(declaration({"kind": "compare", "left": "/meta/level", "op": "<=", "right": 2}))
    assert len(spec.instances) == 1 + 2 + 1
    assert spec.session().admissible("/meta/level") == [0, 1, 2]


def test_every_error_is_a_declaration_error() -> None:
    for cls in (fs.UnsupportedKeyword, fs.UnknownPath, fs.NotAField, fs.FreeFieldInRelation, fs.UnknownRelationKind,
                fs.TypeMismatch, fs.UnboundedDomain, fs.TableBudgetExceeded, fs.MalformedRelation,
                fs.UnsatisfiableDeclaration, fs.BackendUnsupported):
        assert issubclass(cls, fs.DeclarationError)
    assert issubclass(fs.DeclarationError, ValueError)
    assert not issubclass(fs.InvalidAssignment, fs.DeclarationError)
    e = fs.UnknownPath("names nothing", pointer="#/a", found="/b", hint="did you mean /a?")
    assert str(e) == "#/a: names nothing; found '/b'; hint: did you mean /a?"


# -- schema keywords ------------------------------------------------------------------------------------------------

SCHEMA_CASES = [
    pytest.param(obj({"a": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}),
                 "#/properties/a/uniqueItems", True, id="uniqueItems"),
    pytest.param(obj({"a": {"type": "string"}}, propertyNames={"maxLength": 3}),
                 "#/propertyNames", {"maxLength": 3}, id="propertyNames"),
    pytest.param({**obj({"a": {"enum": ["x", "y"]}}), "if": {"properties": {"a": {"const": "x"}}},
                  "then": {"required": ["a"]}}, "#/if", {"properties": {"a": {"const": "x"}}}, id="if-then-root"),
    pytest.param(obj({"a": {"type": "string", "if": {"maxLength": 3}, "then": {"pattern": "^a"}}}),
                 "#/properties/a/if", {"maxLength": 3}, id="if-then-nested"),
    pytest.param(obj({"a": {"$ref": "https://example.com/city.json"}}), "#/properties/a/$ref",
                 "https://example.com/city.json", id="remote-ref"),
    pytest.param({"$defs": {"Day": {"type": "object", "propertyNames": {"maxLength": 2}}},
                  **obj({"d": {"$ref": "#/$defs/Day"}})},
                 "#/$defs/Day/propertyNames", {"maxLength": 2}, id="keyword-inside-def"),
    pytest.param(obj({"v": {"type": "array", "maxItems": 2,
                            "items": obj({"x": {"type": "object", "unevaluatedProperties": False}})}}),
                 "#/properties/v/items/properties/x/unevaluatedProperties", False, id="keyword-inside-items"),
    pytest.param(obj({"a/b~c": {"type": "string", "$dynamicRef": "#x"}}), "#/properties/a~1b~0c/$dynamicRef", "#x",
                 id="keyword-under-escaped-name"),
    pytest.param(obj({"a": {"type": "integer", "minimum": 0, "maximum": 4, "multipleOf": 0.5}}),
                 "#/properties/a/multipleOf", 0.5, id="fractional-multipleOf"),
    pytest.param(obj({"a": {"type": "string", "not": {"minLength": 3}}}), "#/properties/a/not", {"minLength": 3},
                 id="not-undecidable"),
]


@pytest.mark.parametrize("schema, pointer, found", SCHEMA_CASES)
def test_unsupported_schema_keyword(schema: dict[str, Any], pointer: str, found: Any) -> None:
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec.from_json(schema)
    e = info.value
    assert e.pointer == pointer
    assert resolves(schema, pointer)
    assert e.found == found
    assert str(e).startswith(pointer + ": ")
    assert repr(found)[:150] in str(e)
    keyword = pointer.rsplit("/", 1)[1]
    assert keyword in str(e)


@pytest.mark.parametrize("pointer_end, hint", [("uniqueItems", "all_different"),
                                               ("$ref", "#/$defs/NAME")])
def test_unsupported_keyword_hints(pointer_end: str, hint: str) -> None:
    """Errors name what would work."""
    case = next(p for p in SCHEMA_CASES if p.values[1].endswith("/" + pointer_end))
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec.from_json(case.values[0])
    assert info.value.hint and hint in info.value.hint
    assert "hint: " + info.value.hint in str(info.value)


#: JSON Schema 2020-12 validation keywords outside the subset, by the type where they would apply: each constrains
#: values, so each is refused (never weakened).
SWEEP = [
    ("string", k, v) for k, v in [("not", {"minLength": 1}), ("$dynamicRef", "#x")]
] + [
    ("integer", k, v) for k, v in [("not", {"minimum": 1})]
] + [
    ("object", k, v) for k, v in [("propertyNames", {}), ("unevaluatedProperties", False), ("if", {}),
                                  ("then", {}), ("else", {}), ("not", {"properties": {"b": {"const": True}}})]
] + [
    ("array", k, v) for k, v in [("uniqueItems", True), ("unevaluatedItems", False)]
]
#: Keywords that constrain nothing (JSON Schema's content annotations, a format JSON Schema does not define, OpenAPI
#: and vendor keys, draft 4's ``id``, an unknown word): ignored and listed on ``spec.ignored`` (the keyword policy of
#: DESIGN.md), refused under ``strict=True``.
IGNORED = [
    ("string", k, v) for k, v in [("contentEncoding", "base64"), ("contentMediaType", "text/x"), ("title", "t")]
] + [
    ("integer", k, v) for k, v in [("format", "int32"), ("example", 2), ("dependentSchemas", {}), ("maxLength", 2)]
] + [
    ("string", k, v) for k, v in [("minimum", 3), ("items", {"type": "boolean"})]  # another type's vocabulary
] + [
    ("object", k, v) for k, v in [("discriminator", {"propertyName": "k"}), ("id", "urn:x"),
                                  ("esriDocumentation", {"a": 1})]
] + [
    ("boolean", k, v) for k, v in [("nullable", True), ("x-vendor", 1), ("enumNames", ["a"])]
] + [
    ("array", k, v) for k, v in [("minContains", 1), ("maxContains", 2), ("uniqueItems", False)]  # no contains
]
_SWEEP_BASE = {"string": {"type": "string"}, "integer": {"type": "integer", "minimum": 0, "maximum": 3},
               "object": obj({"b": {"type": "boolean"}}), "array": {"type": "array", "items": {"type": "boolean"}},
               "boolean": {"type": "boolean"}}


@pytest.mark.parametrize("typ, keyword, value", SWEEP, ids=[f"{t}-{k}" for t, k, _ in SWEEP])
def test_no_keyword_dropped_silently(typ: str, keyword: str, value: Any) -> None:
    schema = obj({"x": {**_SWEEP_BASE[typ], keyword: value}})
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec.from_json(schema)
    assert info.value.pointer == f"#/properties/x/{keyword}"
    assert repr(keyword) in str(info.value)


@pytest.mark.parametrize("typ, keyword, value", IGNORED, ids=[f"{t}-{k}" for t, k, _ in IGNORED])
def test_keywords_that_constrain_nothing_are_ignored_and_listed(typ: str, keyword: str, value: Any) -> None:
    """Ignored, listed with its schema's pointer, and the declaration the same as without it: the same fields and
    domains, and every record it admits valid under the original schema (``jsonschema``, which treats the keyword
    as an annotation too). ``strict=True`` refuses it, naming its pointer."""
    schema = obj({"x": {**_SWEEP_BASE[typ], keyword: value}})
    spec = fs.Spec.from_json(schema)
    assert (("#/properties/x", keyword)) in spec.ignored
    plain = fs.Spec.from_json(obj({"x": dict(_SWEEP_BASE[typ])}))
    assert {p: list(f.values) for p, f in spec.fields.items()} == {p: list(f.values) for p, f in plain.fields.items()}
    assert list(spec.compiled.free) == list(plain.compiled.free)
    records = list(spec.solutions(limit=50)) if spec.fields else []
    for rec in records:
        jsonschema.validate(rec, schema)
    with pytest.raises(UnsupportedKeyword) as info:
        fs.Spec.from_json(schema, strict=True)
    assert info.value.pointer == f"#/properties/x/{keyword}"


# -- relations ------------------------------------------------------------------------------------------------------

PATH_POINTER = ("path errors point at the whole relation (#/x-factorspec/relations/2), not at the place holding the "
                "path (.../left, .../fields/1, .../terms/0)")
LITERAL_POINTER = ('a single-literal "if" (an object, not a list) is reported at .../if/0, a pointer that does not '
                   "exist in the document; expected .../if")
def cmp(left: Any, op: str, right: Any) -> dict[str, Any]:
    return {"kind": "compare", "left": left, "op": op, "right": right}


def implies(lit: Any, then: Any) -> dict[str, Any]:
    return {"kind": "implies", "if": lit, "then": then}


THEN = cmp("/meta/level", "==", 1)

# (relation, x-factorspec extras, error type, exact pointer, found, words the message must contain, hint words)
RELATION_CASES = [
    # a relation path that names nothing
    pytest.param(cmp("/plan/0/ctiy", "==", "Riga"), {}, UnknownPath, R2 + "/left", "/plan/0/ctiy",
                 ["names nothing", "'ctiy'"], ["/plan/0/city"], id="unknown-path-typo"),
    pytest.param({"kind": "all_different", "fields": ["/plan/0/city", "/plan/1/cty"]}, {}, UnknownPath,
                 R2 + "/fields/1", "/plan/1/cty", ["names nothing"], ["/plan/1/city"], id="unknown-path-in-list"),
    pytest.param({"kind": "linear", "terms": [[1, "/plan/3/first_day"]], "op": "<=", "rhs": 5}, {}, UnknownPath,
                 R2 + "/terms/0", "/plan/3/first_day", ["names nothing", "0..2"], [], id="index-out-of-range"),
    pytest.param(cmp("/flag/x", "==", True), {}, UnknownPath, R2 + "/left", "/flag/x", ["past the field /flag"], [],
                 id="path-past-a-field"),
    # a path to something that is not an always-present finite field
    pytest.param(cmp("/meta", "==", 1), {}, NotAField, R2 + "/left", "/meta", ["an object"], ["/meta/level"],
                 id="object"),
    pytest.param({"kind": "all_different", "fields": ["/plan"]}, {}, NotAField, R2 + "/fields/0", "/plan",
                 ["an array"], ["/plan/0/city"], id="array"),
    pytest.param(cmp("/opt", "==", 1), {}, NotAField, R2 + "/left", "/opt", ["not always present"], ["required"],
                 id="optional-property"),
    pytest.param(cmp("/tags/0", "==", "a"), {}, NotAField, R2 + "/left", "/tags/0", ["variable-length"],
                 ["minItems == maxItems"], id="variable-length-array"),
    pytest.param(cmp("/note", "==", "x"), {}, FreeFieldInRelation, R2 + "/left", "/note", ["free string"], ["enum"],
                 id="free-string"),
    pytest.param({"kind": "linear", "terms": [[2, "/score"]], "op": "<=", "rhs": 1}, {}, FreeFieldInRelation,
                 R2 + "/terms/0", "/score", ["free number"], [], id="free-number"),
    # unbounded domains
    pytest.param(cmp("/count", "<", 5), {}, UnboundedDomain, R2 + "/left", "/count", ["unbounded"],
                 ["minimum and maximum"], id="integer-without-maximum"),
    pytest.param(cmp("/meta/level", "<", "/wide"), {}, UnboundedDomain, R2 + "/right", "/wide", ["too wide"],
                 ["maximum"], id="integer-too-wide"),
    # unknown kinds
    pytest.param({"kind": "all_diferent", "fields": ["/plan/*/city"]}, {}, UnknownRelationKind, R2 + "/kind",
                 "all_diferent", ["unknown relation kind 'all_diferent'"], ["all_different", "relation_kind"],
                 id="unknown-kind"),
    pytest.param({"fields": ["/plan/*/city"]}, {}, UnknownRelationKind, R2 + "/kind", None,
                 ["unknown relation kind None"], ["all_different"], id="missing-kind"),
    pytest.param(implies({"field": "/flag", "op": "==", "value": True}, {"kind": "sum"}), {}, UnknownRelationKind,
                 R2 + "/then/kind", "sum", ["'sum'"], ["linear"], id="unknown-kind-nested"),
    # type mismatches
    pytest.param({"kind": "linear", "terms": [[1, "/plan/0/city"], [1, "/plan/0/first_day"]], "op": "==", "rhs": 3},
                 {}, TypeMismatch, R2 + "/terms/0", ["Riga", "Manchester", "Split"],
                 ["/plan/0/city", "non-numeric", "arithmetic"], ["map"], id="string-enum-in-linear"),
    pytest.param({"kind": "linear", "terms": [[1, "/plan/0/city", {"Riga": 1, "Split": 2}]], "op": "==", "rhs": 1},
                 {}, TypeMismatch, R2 + "/terms/0", ["Manchester"], ["misses values"], ["map every value"],
                 id="linear-map-misses-a-value"),
    pytest.param({"kind": "element", "index": "/meta/level", "map": {"0": 1, "1": 2, "2": 3, "3": 4},
                  "target": "/plan/0/city"}, {}, TypeMismatch, R2 + "/target", ["Riga", "Manchester", "Split"],
                 ["non-numeric"], ["map"], id="string-element-target"),
    pytest.param(cmp("/plan/0/city", "<", "/plan/1/city"), {}, TypeMismatch, R2, None, ["not numeric", "'<'"],
                 ["==/!="], id="ordering-on-strings"),
    pytest.param(cmp("/plan/0/city", ">=", "Riga"), {}, TypeMismatch, R2, None, ["'>='"], ["==/!="],
                 id="ordering-string-field-with-string"),
    pytest.param(implies({"field": "/plan/0/city", "op": "<", "value": "Split"}, THEN), {}, TypeMismatch, R2 + "/if",
                 {"field": "/plan/0/city", "value": "Split"}, ["ordering '<'"], ["==/!="], id="ordering-in-literal"),
    pytest.param(implies([{"field": "/plan/0/city", "op": "<", "value": "Split"}], THEN), {}, TypeMismatch,
                 R2 + "/if/0", {"field": "/plan/0/city", "value": "Split"}, ["ordering '<'"], ["==/!="],
                 id="ordering-in-literal-list"),
    pytest.param(cmp("/plan/0/city", "==", 1), {}, TypeMismatch, R2, 1, ["/plan/0/city", "cannot compare"], [],
                 id="string-field-vs-integer"),
    pytest.param(cmp("/plan/0/city", "==", "/meta/level"), {}, TypeMismatch, R2, None,
                 ["/plan/0/city", "/meta/level", "different types"], [], id="string-field-vs-integer-field"),
    pytest.param(cmp("/plan/0/city", "==", "Paris"), {}, TypeMismatch, R2, "Paris", ["not in the domain"],
                 ["Riga"], id="string-not-in-domain"),
    pytest.param(implies({"field": "/flag", "op": "==", "value": 1}, THEN), {}, TypeMismatch, R2 + "/if", 1,
                 ["cannot compare"], [], id="boolean-literal-vs-integer"),
    pytest.param({"kind": "table", "fields": ["/plan/0/city", "/plan/1/city"], "rows": [["Riga", "Split"], ["Riga"]]},
                 {}, TypeMismatch, R2 + "/rows/1", ["Riga"], ["1 values for 2 fields"], [], id="table-row-width"),
    pytest.param({"kind": "table", "fields": ["/plan/0/city", "/plan/0/first_day"], "rows": [["Riga", 3], [3, "Riga"]]},
                 {}, TypeMismatch, R2 + "/rows/1", 3, ["type of /plan/0/city"], [], id="table-row-type"),
    pytest.param({"kind": "count", "fields": ["/plan/*/first_day"], "value": "Riga", "op": "==", "rhs": 1}, {},
                 TypeMismatch, R2 + "/value", "Riga", ["cannot compare with 'Riga'"], [], id="count-value-type"),
    # table budget
    pytest.param({"kind": "table", "fields": ["/plan/0/city"], "rows": [["Riga"], ["Split"], ["Manchester"]]},
                 {"table_budget": 2}, TableBudgetExceeded, R2, 3, ["3 rows", "table_budget of 2"],
                 ["table_budget", "linear/implies"], id="table-over-budget"),
    pytest.param(implies({"field": "/flag", "op": "==", "value": True},
                         {"kind": "table", "fields": ["/meta/level"], "rows": [[0], [1], [2]]}),
                 {"table_budget": 2}, TableBudgetExceeded, R2 + "/then", 3, ["3 rows"], ["table_budget"],
                 id="nested-table-over-budget"),
    # malformed relations
    pytest.param({"kind": "compare", "left": "/flag", "op": "=="}, {}, MalformedRelation, R2, ["right"],
                 ["missing key", "'compare'"], [], id="missing-key"),
    pytest.param({"kind": "compare", "left": "/flag", "op": "==", "right": True, "rigth": 1}, {}, MalformedRelation,
                 R2, ["rigth"], ["unknown key"], ["left", "right"], id="unknown-key"),
    pytest.param({"kind": "linear", "terms": [[1, "/meta/level"]], "op": "=", "rhs": 1}, {}, MalformedRelation,
                 R2 + "/op", "=", ["unknown operator '='"], ["==", "<="], id="bad-op-linear"),
    pytest.param(cmp("/meta/level", "=>", 1), {}, MalformedRelation, R2 + "/op", "=>", ["operator"], ["=="],
                 id="bad-op-compare"),
    pytest.param({"kind": "count", "fields": ["/flag"], "value": True, "op": "eq", "rhs": 1}, {}, MalformedRelation,
                 R2 + "/op", "eq", ["operator"], ["=="], id="bad-op-count"),
    pytest.param({"kind": "linear", "terms": [[0.5, "/meta/level"]], "op": "<=", "rhs": 1}, {}, MalformedRelation,
                 R2 + "/terms/0/0", 0.5, ["coefficient must be an integer"], ["scale"], id="fractional-coefficient"),
    pytest.param({"kind": "linear", "terms": [["1", "/meta/level"]], "op": "<=", "rhs": 1}, {}, MalformedRelation,
                 R2 + "/terms/0/0", "1", ["coefficient"], [], id="string-coefficient"),
    pytest.param({"kind": "linear", "terms": [[1, "/meta/level"]], "op": "<=", "rhs": 2.5}, {}, MalformedRelation,
                 R2 + "/rhs", 2.5, ["integer"], ["scale"], id="fractional-rhs"),
    pytest.param({"kind": "linear", "terms": [[1, "/meta/level"]], "op": "<=", "rhs": "Paris"}, {}, MalformedRelation,
                 R2 + "/rhs", "Paris", ["integer"], [], id="string-rhs"),
    pytest.param({"kind": "linear", "terms": [["/meta/level"]], "op": "<=", "rhs": 1}, {}, MalformedRelation,
                 R2 + "/terms/0", ["/meta/level"], ["[coefficient, path]"], [], id="term-not-a-pair"),
    pytest.param({"kind": "linear", "terms": [], "op": "<=", "rhs": 1}, {}, MalformedRelation, R2 + "/terms", [],
                 ["non-empty"], [], id="no-terms"),
    pytest.param({"kind": "implies", "if": {"field": "/flag", "op": "==", "value": True}}, {}, MalformedRelation, R2,
                 ["if", "kind"], ['"then"'], [], id="implies-without-then"),
    pytest.param({"kind": "implies", "then": THEN}, {}, MalformedRelation, R2, ["kind", "then"], ['"if"'], [],
                 id="implies-without-if"),
    pytest.param(implies({"field": "/flag", "op": "~", "value": True}, THEN), {}, MalformedRelation, R2 + "/if/op",
                 "~", ["unknown operator '~'"], ["in", "not in"], id="literal-unknown-op"),
    pytest.param(implies([{"field": "/flag", "op": "==", "value": True},
                          {"field": "/flag", "op": "is", "value": True}], THEN), {}, MalformedRelation,
                 R2 + "/if/1/op", "is", ["operator"], ["=="], id="literal-unknown-op-in-list"),
    pytest.param(implies({"field": "/flag", "value": True}, THEN), {}, MalformedRelation, R2 + "/if",
                 {"field": "/flag", "value": True}, ['"op"'], [], id="literal-missing-op"),
    pytest.param(implies({"field": "/meta/level", "op": "in", "value": 2}, THEN), {}, MalformedRelation,
                 R2 + "/if/value", 2, ["list"], [], id="literal-in-without-list"),
    pytest.param({"kind": "table", "fields": ["/flag"], "rows": [[True]], "mode": "deny"}, {}, MalformedRelation,
                 R2 + "/mode", "deny", ["'allow' or 'forbid'"], [], id="table-bad-mode"),
    pytest.param({"kind": "all_different", "fields": ["plan/0/city", "/plan/1/city"]}, {}, MalformedRelation,
                 R2 + "/fields", ["plan/0/city", "/plan/1/city"], ["JSON Pointer"], [], id="path-without-slash"),
    pytest.param("all_different", {}, MalformedRelation, R2, "all_different", ["`kind`"], [],
                 id="relation-not-an-object"),
    pytest.param(cmp(1, "==", 1), {}, MalformedRelation, R2, {"left": 1, "right": 1}, ["a path"], [],
                 id="compare-without-path"),
]


@pytest.mark.parametrize("relation, extra, error, pointer, found, words, hint", [
    pytest.param(*p.values, id=p.id) for p in RELATION_CASES])  # without the marks: type and message only
def test_relation_error_type_and_message(relation: Any, extra: dict[str, Any], error: type[DeclarationError],
                                         pointer: str, found: Any, words: list[str], hint: list[str]) -> None:
    with pytest.raises(error) as info:
        fs.Spec.from_json(declaration(relation, **extra))
    e = info.value
    assert type(e) is error
    assert e.pointer is not None and under(e.pointer, R2), e.pointer
    assert str(e).startswith(e.pointer + ": ")
    if found is not None:
        assert e.found == found
        assert repr(found)[:150] in str(e)
    for w in words:
        assert w in str(e)
    for h in hint:
        assert e.hint is not None and h in e.hint, e.hint
        assert h in str(e)


@pytest.mark.parametrize("relation, extra, error, pointer, found, words, hint", RELATION_CASES)
def test_relation_error_pointer(relation: Any, extra: dict[str, Any], error: type[DeclarationError], pointer: str,
                                found: Any, words: list[str], hint: list[str]) -> None:
    """``.pointer`` is the offending part itself (or a place inside it) and exists in the document."""
    doc = declaration(relation, **extra)
    with pytest.raises(error) as info:
        fs.Spec.from_json(doc)
    got = info.value.pointer
    assert got is not None and under(got, pointer), got
    missing_kind = isinstance(relation, dict) and "kind" not in relation and got == R2 + "/kind"
    assert resolves(doc, got) or missing_kind, got  # a missing "kind" may be named where it belongs


def test_table_over_default_budget() -> None:
    rows = [[1]] * 100_001
    with pytest.raises(TableBudgetExceeded) as info:
        fs.Spec.from_json(declaration({"kind": "table", "fields": ["/meta/level"], "rows": rows}))
    assert info.value.found == 100_001 and "100000" in str(info.value)
    fs.Spec.from_json(declaration({"kind": "table", "fields": ["/meta/level"], "rows": rows},
                                  table_budget=100_001))  # raising the budget accepts it


def test_template_errors_name_the_template() -> None:
    rel = {"kind": "compare", "left": "/plan/{i}/ctiy", "op": "<", "right": "/plan/{i+1}/first_day"}
    with pytest.raises(UnknownPath) as info:
        fs.Spec.from_json(declaration(rel))
    assert info.value.pointer is not None and under(info.value.pointer, R2)
    assert "ctiy" in str(info.value)


def test_template_that_instantiates_nothing() -> None:
    rel = {"kind": "compare", "left": "/plan/{i}/first_day", "op": "<", "right": "/plan/{i+5}/first_day"}
    with pytest.raises(MalformedRelation) as info:
        fs.Spec.from_json(declaration(rel))
    assert info.value.pointer is not None and under(info.value.pointer, R2)


def test_unhashable_kind() -> None:
    with pytest.raises((UnknownRelationKind, MalformedRelation)) as info:
        fs.Spec.from_json(declaration({"kind": ["linear"], "terms": [[1, "/meta/level"]], "op": "<=", "rhs": 1}))
    assert info.value.pointer is not None and under(info.value.pointer, R2)


# An integer constant outside a range domain is a typo (TypeMismatch); an `in` list may name values outside the
# domain (they never match), as tables may.
@pytest.mark.parametrize("relation, pointer", [
    (cmp("/meta/level", "==", 9), R2),
    (implies({"field": "/meta/level", "op": "==", "value": 9}, cmp("/flag", "==", True)), R2 + "/if"),
    ({"kind": "count", "fields": ["/meta/level", "/plan/0/first_day"], "value": 99, "op": "==", "rhs": 1},
     R2 + "/value"),
], ids=["compare", "literal", "count"])
def test_integer_constant_outside_domain(relation: Any, pointer: str) -> None:
    with pytest.raises(TypeMismatch) as info:
        fs.Spec.from_json(declaration(relation))
    assert info.value.pointer is not None and under(info.value.pointer, R2)


def test_table_row_outside_integer_domain_is_not_a_crash() -> None:
    try:
        fs.Spec.from_json(declaration({"kind": "table", "fields": ["/meta/level"], "rows": [[1], [9]]}))
    except DeclarationError:
        pass  # rejecting the row is fine; a bare ValueError is not


PY_UNCHECKED = ("relations built in Python are not validated like their JSON form: a bad op / table mode / "
                "non-integer rhs passes Spec(...) and fails later inside the backend (bare ValueError or OR-tools "
                "TypeError) or, for the table mode, silently acts as 'allow'")


@pytest.mark.parametrize("make", [
    lambda: fs.Linear([[1, "/meta/level"]], "=>", 1),
    lambda: fs.Compare("/meta/level", "=>", 1),
    lambda: fs.Count(["/meta/level"], 1, "eq", 1),
    lambda: fs.Table(["/meta/level"], [[1]], mode="deny"),
    lambda: fs.Linear([[1, "/meta/level"]], "==", 1.5),
], ids=["linear-op", "compare-op", "count-op", "table-mode", "linear-rhs"])
def test_python_relations_are_checked(make: Callable[[], fs.Relation]) -> None:
    with pytest.raises(MalformedRelation):
        spec = fs.Spec(BASE, [make()])
        spec.session().admissible("/meta/level")  # if construction let it through, this must not be reached


def test_python_relation_bad_coefficient() -> None:
    with pytest.raises(MalformedRelation) as info:
        fs.Linear([[0.5, "/meta/level"]], "==", 1)
    assert info.value.found == 0.5


def test_python_relation_errors_carry_the_instance_pointer() -> None:
    with pytest.raises(UnknownPath) as info:
        fs.Spec(BASE, [fs.AllDifferent("/plan/*/city"), fs.Compare("/meta/levl", "==", 1)])
    assert info.value.pointer is not None and under(info.value.pointer, "#/x-factorspec/relations/1")
    assert "did you mean /meta/level" in str(info.value)


def test_declaration_level_errors() -> None:
    with pytest.raises(DeclarationError) as info:
        fs.Spec.from_json({**BASE, "x-factorspec": {"relations": [], "budget": 5}})
    assert info.value.pointer == "#/x-factorspec" and "table_budget" in str(info.value)
    with pytest.raises(DeclarationError) as info:
        fs.Spec.from_json({**BASE, "x-factorspec": {"relations": [], "table_budget": 0}})
    assert info.value.pointer == "#/x-factorspec/table_budget"
    with pytest.raises(MalformedRelation) as info:
        fs.Spec.from_json({**BASE, "x-factorspec": {"relations": {"kind": "linear"}}})
    assert info.value.pointer == "#/x-factorspec/relations"


# -- unsatisfiable declarations -------------------------------------------------------------------------------------

INT5 = {"type": "integer", "minimum": 0, "maximum": 5}
UNSAT_SCHEMA = obj({"a": INT5, "b": INT5, "c": INT5})
UNSAT_RELATIONS = [
    {**cmp("/a", "<=", 1), "name": "a_small"},
    {**cmp("/b", ">=", 3), "name": "b_big"},
    {**cmp("/c", "!=", "/a"), "name": "c_not_a"},
    {**cmp("/a", ">", "/b"), "name": "a_above_b"},
    {"kind": "all_different", "fields": ["/b", "/c"], "name": "b_c_differ"},
    {"kind": "linear", "terms": [[1, "/a"], [1, "/b"], [1, "/c"]], "op": "<=", "rhs": 12, "name": "total"},
]


def _unsat_spec(indices: list[int]) -> fs.Spec:
    return fs.Spec.from_json({**UNSAT_SCHEMA, "x-factorspec": {"relations": [UNSAT_RELATIONS[k] for k in indices]}})


def _satisfiable(indices: list[int]) -> bool:
    """Independent of explain(): does a record exist? (brute force over the 6^3 records)."""
    spec = _unsat_spec(indices)
    fields = list(spec.fields)
    for values in itertools.product(range(6), repeat=len(fields)):
        if not spec.check_record(spec.record(dict(zip(fields, values, strict=True)))):
            return True
    return False


@pytest.mark.parametrize("backend", [None, "sat", "cpsat", "csp"])
def test_unsatisfiable_declaration_minimal_explanation(backend: str | None) -> None:
    spec = _unsat_spec(list(range(len(UNSAT_RELATIONS))))
    with pytest.raises(UnsatisfiableDeclaration) as info:
        spec.session(backend=backend)
    e = info.value
    assert isinstance(e, DeclarationError)
    assert e.pointer == "#/x-factorspec"
    ex = e.explanation
    assert ex.conflict
    assert [(i.source, i.relation.name) for i in ex.relations] == [(0, "a_small"), (1, "b_big"), (3, "a_above_b")]
    assert ex.assignments == []
    for name in ("a_small", "b_big", "a_above_b"):
        assert name in str(e)
    for name in ("c_not_a", "b_c_differ", "total"):
        assert name not in str(e)
    assert [r["where"] for r in ex.to_json()["relations"]] == [f"#/x-factorspec/relations/{k}" for k in (0, 1, 3)]


def test_unsatisfiable_explanation_is_minimal_by_brute_force() -> None:
    """The explained set is unsatisfiable and every proper subset obtained by dropping one relation is not."""
    core = [0, 1, 3]
    assert not _satisfiable(core)
    assert not _satisfiable(list(range(len(UNSAT_RELATIONS))))
    for k in core:
        assert _satisfiable([j for j in range(len(UNSAT_RELATIONS)) if j != k]), k


def test_unsatisfiable_template_names_instances() -> None:
    doc = {**obj({"v": {"type": "array", "minItems": 3, "maxItems": 3, "items": INT5}, "w": INT5}),
           "x-factorspec": {"relations": [
               {**cmp("/v/{i}", "<", "/v/{i+1}"), "name": "increasing"},
               {**cmp("/v/0", ">=", 4), "name": "start_high"},
               {**cmp("/w", "!=", "/v/1"), "name": "unrelated"}]}}
    with pytest.raises(UnsatisfiableDeclaration) as info:
        fs.Spec.from_json(doc).session()
    got = [(i.source, i.i) for i in info.value.explanation.relations]
    assert got == [(0, 0), (0, 1), (1, None)]
    assert "[i=1]" in str(info.value)


def test_single_relation_conflict() -> None:
    doc = {**UNSAT_SCHEMA, "x-factorspec": {"relations": [
        UNSAT_RELATIONS[2], {"kind": "linear", "terms": [[1, "/a"], [1, "/b"]], "op": "==", "rhs": 11,
                             "name": "too_much"}]}}
    with pytest.raises(UnsatisfiableDeclaration) as info:
        fs.Spec.from_json(doc).session()
    assert [i.relation.name for i in info.value.explanation.relations] == ["too_much"]


# -- sessions: usage errors -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def session() -> fs.Session:
    spec = fs.Spec.from_json({**obj({"a": INT5, "c": {"enum": ["x", "y"]}, "f": {"type": "string"}, "o": INT5},
                                    ["a", "c", "f"]),
                              "x-factorspec": {"relations": [cmp("/a", "<=", 3)]}})
    return spec.session()


def test_assign_unknown_path(session: fs.Session) -> None:
    with pytest.raises(InvalidAssignment, match=r"/aa is not a field.*did you mean /a"):
        session.assign("/aa", 1)
    with pytest.raises(InvalidAssignment, match="not a field"):
        session.admissible("/zz")


def test_assign_free_field(session: fs.Session) -> None:
    with pytest.raises(InvalidAssignment, match="free field"):
        session.assign("/f", "text")


def test_assign_outside_enum_domain(session: fs.Session) -> None:
    with pytest.raises(InvalidAssignment, match="'z' is not in the domain of /c"):
        session.assign("/c", "z")
    with pytest.raises(InvalidAssignment):
        session.assign("/a", True)  # a boolean is not an integer in JSON


def test_assign_outside_integer_range(session: fs.Session) -> None:
    with pytest.raises(InvalidAssignment):
        session.assign("/a", 9)


def test_explain_outside_integer_range(session: fs.Session) -> None:
    with pytest.raises(InvalidAssignment):
        session.explain("/a", 9)


def test_pop_without_push(session: fs.Session) -> None:
    with pytest.raises(InvalidAssignment, match="push"):
        session.pop()


def test_reassign_needs_push_pop(session: fs.Session) -> None:
    session.push()
    session.assign("/a", 1)
    session.assign("/a", 1)  # the same value again is fine
    with pytest.raises(InvalidAssignment, match="already assigned"):
        session.assign("/a", 2)
    session.pop()
    assert session.assignment == {}
    assert session.admissible("/a") == [0, 1, 2, 3]
