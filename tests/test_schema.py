"""The supported JSON Schema subset compiles to the right fields, domains and record order.

Independent check: records built from random domain values (and every integer near a field's bounds) are judged
by ``jsonschema.Draft202012Validator``; the compiled domains must agree with it.
"""

from __future__ import annotations

import copy
import random
import string
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

import factorspec_cp as fs
from factorspec_cp import DeclarationError, UnsupportedKeyword
from factorspec_cp.schema import (
    ArrayNode,
    CompiledSchema,
    Field,
    FreeField,
    Leaf,
    Node,
    ObjectNode,
    UnionNode,
    compile_schema,
    escape,
    jkey,
    split_pointer,
    unescape,
)


def obj(props: dict[str, Any], required: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **kw}


def ints(lo: int, hi: int, **kw: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi, **kw}


BOOL = {"type": "boolean"}


def domains(c: CompiledSchema) -> dict[str, list[Any]]:
    return {p: list(f.values) for p, f in c.fields.items()}


def conditional(c: CompiledSchema) -> dict[str, bool]:
    return {p: f.conditional for p, f in c.fields.items()}


# -- objects: order, nesting, required vs optional ------------------------------------------------------------------

def test_nested_objects_follow_properties_order() -> None:
    schema = obj({"z": BOOL,
                  "o": obj({"b": {"enum": ["x", "y"]}, "a": obj({"q": ints(0, 2)})}, ["a", "b"]),
                  "a": {"type": "null"}},
                 ["a", "o", "z"])  # required lists a different order: properties order wins
    c = compile_schema(schema)
    assert list(c.fields) == ["/z", "/o/b", "/o/a/q", "/a"]
    assert domains(c) == {"/z": [False, True], "/o/b": ["x", "y"], "/o/a/q": [0, 1, 2], "/a": [None]}
    root = c.root
    assert isinstance(root, ObjectNode) and [p.name for p in root.properties] == ["z", "o", "a"]
    spec = fs.Spec(schema)
    rec = spec.record({"/z": True, "/o/b": "y", "/o/a/q": 2, "/a": None})
    assert rec == {"z": True, "o": {"b": "y", "a": {"q": 2}}, "a": None}
    assert list(rec) == ["z", "o", "a"] and list(rec["o"]) == ["b", "a"]


def test_type_object_and_array_inferred() -> None:
    c = compile_schema({"properties": {"v": {"items": BOOL, "minItems": 1, "maxItems": 1}}, "required": ["v"]})
    assert domains(c) == {"/v/0": [False, True]}


def test_required_and_optional() -> None:
    schema = obj({"r": BOOL, "o": ints(0, 3),
                  "sub": obj({"x": BOOL, "y": {"enum": [1, 2]}}, ["x"]),
                  "osub": obj({"x": BOOL})},
                 ["r", "sub"])
    c = compile_schema(schema)
    assert list(c.fields) == ["/r", "/o", "/sub/x", "/sub/y", "/osub/x"]
    # optional => conditional; a required property inside an optional object is conditional too
    assert conditional(c) == {"/r": False, "/o": True, "/sub/x": False, "/sub/y": True, "/osub/x": True}
    assert isinstance(c.root, ObjectNode)
    assert [(p.name, p.required) for p in c.root.properties] == [("r", True), ("o", False), ("sub", True),
                                                                 ("osub", False)]
    spec = fs.Spec(schema)
    assert list(spec.fields) == ["/r", "/sub/x"]  # relation variables: always-present fields only


@pytest.mark.parametrize("extra", [{}, {"additionalProperties": False}, {"additionalProperties": True}])
def test_additional_properties_absent_false_or_true(extra: dict[str, Any]) -> None:
    assert domains(compile_schema(obj({"a": BOOL}, **extra))) == {"/a": [False, True]}


# -- arrays ---------------------------------------------------------------------------------------------------------

def test_fixed_length_array() -> None:
    c = compile_schema(obj({"f": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 3, "maxItems": 3}}))
    assert list(c.fields) == ["/f/0", "/f/1", "/f/2"]
    assert not any(conditional(c).values())
    node = c.nodes["/f"]
    assert isinstance(node, ArrayNode) and (node.min_items, node.max_items, len(node.elements)) == (3, 3, 3)


def test_variable_length_array_elements_beyond_min_items_are_conditional() -> None:
    c = compile_schema(obj({"v": {"type": "array", "items": ints(1, 2), "minItems": 1, "maxItems": 4},
                            "w": {"type": "array", "items": BOOL, "maxItems": 2}}))
    assert conditional(c) == {"/v/0": False, "/v/1": True, "/v/2": True, "/v/3": True, "/w/0": True, "/w/1": True}
    assert all(list(f.values) == [1, 2] for p, f in c.fields.items() if p.startswith("/v/"))
    spec = fs.Spec(obj({"v": {"type": "array", "items": ints(1, 2), "minItems": 1, "maxItems": 4}}))
    assert list(spec.fields) == ["/v/0"]


def test_unbounded_array_has_a_template_but_no_fields() -> None:
    c = compile_schema(obj({"u": {"type": "array", "items": obj({"k": BOOL}), "minItems": 1}, "b": BOOL}))
    assert list(c.fields) == ["/b"]
    node = c.nodes["/u"]
    assert isinstance(node, ArrayNode) and node.max_items is None and node.elements == []
    assert isinstance(node.items, ObjectNode) and node.items.pointer == "/u/*"
    assert "/u/*/k" in c.nodes and "/u/*/k" not in c.fields


def test_nested_arrays_and_arrays_of_objects() -> None:
    c = compile_schema(obj({
        "m": {"type": "array", "minItems": 2, "maxItems": 2,
              "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": ints(0, 1)}},
        "p": {"type": "array", "minItems": 1, "maxItems": 2, "items": obj({"city": {"enum": ["R", "S"]}, "d": BOOL})},
    }))
    assert list(c.fields) == ["/m/0/0", "/m/0/1", "/m/1/0", "/m/1/1", "/p/0/city", "/p/0/d", "/p/1/city", "/p/1/d"]
    assert [p for p, f in c.fields.items() if f.conditional] == ["/p/1/city", "/p/1/d"]
    assert not any("*" in p for p in c.fields)  # templates are never fields


@pytest.mark.parametrize("array, pointer", [
    ({"type": "array", "items": BOOL, "minItems": 3, "maxItems": 2}, "#/properties/a"),
    ({"type": "array", "items": BOOL, "minItems": -1}, "#/properties/a/minItems"),
    ({"type": "array", "items": BOOL, "maxItems": 1.5}, "#/properties/a/maxItems"),
    ({"type": "array", "prefixItems": BOOL}, "#/properties/a/prefixItems"),
    ({"type": "array", "prefixItems": [BOOL, False], "minItems": 2}, "#/properties/a/prefixItems/1"),
])
def test_malformed_arrays(array: dict[str, Any], pointer: str) -> None:
    with pytest.raises(DeclarationError) as info:
        compile_schema(obj({"a": array}))
    assert info.value.pointer == pointer


# -- scalar leaves --------------------------------------------------------------------------------------------------

def test_enum_const_boolean_null() -> None:
    c = compile_schema(obj({"e": {"enum": ["x", 1, True, None, 2.5]}, "s": {"type": "string", "enum": ["p", "q"]},
                            "k": {"const": "get_weather"}, "b": BOOL, "n": {"type": "null"},
                            "i": {"type": "integer", "enum": [3, 1]}}))
    kinds = {p: f.kind for p, f in c.fields.items()}
    assert kinds == {"/e": "enum", "/s": "enum", "/k": "const", "/b": "boolean", "/n": "null", "/i": "enum"}
    assert domains(c) == {"/e": ["x", 1, True, None, 2.5], "/s": ["p", "q"], "/k": ["get_weather"],
                          "/b": [False, True], "/n": [None], "/i": [3, 1]}  # enum order kept
    e = c.fields["/e"]
    assert 1 in e and True in e and 1.0 in e and None in e
    assert False not in e and 0 not in e and "1" not in e  # JSON equality: true != 1
    assert c.fields["/b"].numeric and c.fields["/i"].numeric and not c.fields["/s"].numeric


@pytest.mark.parametrize("leaf, pointer", [
    ({"enum": []}, "#/properties/a/enum"),
    ({"enum": ["x", "x"]}, "#/properties/a/enum/1"),
    ({"enum": [1, 1.0]}, "#/properties/a/enum/1"),
    ({"type": "string", "enum": [2, 1]}, "#/properties/a/enum"),  # no value of the type (others are dropped)
    ({"enum": [{"k": 1}, {"k": 1.0}]}, "#/properties/a/enum/1"),
    ({"enum": [1], "const": 1}, "#/properties/a"),
])
def test_malformed_enums(leaf: dict[str, Any], pointer: str) -> None:
    with pytest.raises(DeclarationError) as info:
        compile_schema(obj({"a": leaf}))
    assert info.value.pointer == pointer


INTEGER_CASES = [
    (ints(0, 5), [0, 1, 2, 3, 4, 5]),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5}, [1, 2, 3, 4]),
    ({"type": "integer", "minimum": 0, "exclusiveMinimum": 2, "maximum": 9, "exclusiveMaximum": 7}, [3, 4, 5, 6]),
    ({"type": "integer", "minimum": 4, "exclusiveMinimum": 2, "maximum": 5, "exclusiveMaximum": 7}, [4, 5]),
    ({"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 3.5}, [1, 2, 3]),
    ({"type": "integer", "exclusiveMinimum": -0.5, "maximum": 2}, [0, 1, 2]),
    ({"type": "integer", "minimum": 1.5, "maximum": 4.0}, [2, 3, 4]),
    ({"type": "integer", "minimum": -3.5, "maximum": -1.5}, [-3, -2]),
    (ints(-7, 7, multipleOf=5), [-5, 0, 5]),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10, "multipleOf": 3}, [3, 6, 9]),
    (ints(-20, -1, multipleOf=4), [-20, -16, -12, -8, -4]),
    (ints(0, 10, multipleOf=2.0), [0, 2, 4, 6, 8, 10]),
    (ints(1, 30, multipleOf=7), [7, 14, 21, 28]),
    (ints(3, 3), [3]),
]


@pytest.mark.parametrize("schema, values", INTEGER_CASES)
def test_integer_domains_agree_with_jsonschema(schema: dict[str, Any], values: list[int]) -> None:
    doc = obj({"a": schema})
    f = compile_schema(doc).fields["/a"]
    assert f.kind == "integer" and isinstance(f.values, range) and f.numeric
    assert list(f.values) == values
    validator = jsonschema.Draft202012Validator(doc)
    for v in range(-40, 41):
        assert (v in values) == validator.is_valid({"a": v}), v
    assert True not in f and 1.5 not in f and "1" not in f


@pytest.mark.parametrize("schema", [ints(5, 4), ints(1, 6, multipleOf=7),
                                    {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3}])
def test_empty_integer_range_is_an_error(schema: dict[str, Any]) -> None:
    with pytest.raises(DeclarationError, match="empty") as info:
        compile_schema(obj({"a": schema}))
    assert info.value.pointer == "#/properties/a"


@pytest.mark.parametrize("schema", [{"type": "integer"}, {"type": "integer", "minimum": 0},
                                    {"type": "integer", "maximum": 0}, ints(0, 10_000_000)])
def test_unbounded_or_wide_integers_are_free(schema: dict[str, Any]) -> None:
    c = compile_schema(obj({"a": schema}))
    assert c.fields == {}
    assert isinstance(c.free["/a"], FreeField) and c.free["/a"].type == "integer"


def test_free_strings_and_numbers() -> None:
    c = compile_schema(obj({"note": {"type": "string", "maxLength": 20, "pattern": "^[a-z ]*$"},
                            "s": {"type": "string", "minLength": 1}, "plain": {"type": "string"},
                            "x": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}, "k": BOOL}))
    assert list(c.fields) == ["/k"]
    assert list(c.free) == ["/note", "/s", "/plain", "/x"]
    assert c.free["/note"].schema == {"type": "string", "maxLength": 20, "pattern": "^[a-z ]*$"}
    assert [c.free[p].type for p in c.free] == ["string", "string", "string", "number"]
    optional = compile_schema(obj({"note": {"type": "string"}, "k": BOOL}, ["k"]))
    assert optional.free["/note"].conditional


# -- unions ---------------------------------------------------------------------------------------------------------

WEATHER = obj({"name": {"const": "get_weather"}, "city": {"enum": ["Riga", "Split"]}, "days": ints(1, 3)},
              additionalProperties=False)
BOOK = obj({"name": {"const": "book"}, "when": ints(0, 23), "ok": BOOL}, additionalProperties=False)


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_union_of_objects_with_const_discriminator(key: str) -> None:
    schema = obj({"call": {key: [WEATHER, BOOK]}, "id": ints(0, 9)})
    c = compile_schema(schema)
    u = c.nodes["/call"]
    assert isinstance(u, UnionNode)
    assert u.discriminator == "name" and u.tags == ["get_weather", "book"]
    assert [[p.name for p in b.properties] for b in u.branches] == [["name", "city", "days"], ["name", "when", "ok"]]
    leaves = [{p.name: list(p.node.field.values) for p in b.properties if isinstance(p.node, Leaf)}
              for b in u.branches]
    assert leaves == [{"name": ["get_weather"], "city": ["Riga", "Split"], "days": [1, 2, 3]},
                      {"name": ["book"], "when": list(range(24)), "ok": [False, True]}]
    assert all(f.conditional for p, f in c.fields.items() if p.startswith("/call/"))
    assert list(fs.Spec(schema).fields) == ["/id"]  # branch fields are not relation variables


def test_union_discriminator_by_single_enum_and_shared_consts() -> None:
    a = obj({"type": {"const": "function"}, "name": {"enum": ["a"]}, "x": BOOL})
    b = obj({"type": {"const": "function"}, "name": {"enum": ["b"]}, "y": BOOL})
    u = compile_schema(obj({"call": {"oneOf": [a, b]}})).nodes["/call"]
    assert isinstance(u, UnionNode) and u.discriminator == "name" and u.tags == ["a", "b"]


def test_union_at_the_root() -> None:
    u = compile_schema({"anyOf": [WEATHER, BOOK]}).root
    assert isinstance(u, UnionNode) and u.pointer == "" and u.tags == ["get_weather", "book"]


UNDISCRIMINATED = [
    pytest.param([obj({"x": BOOL}), obj({"y": BOOL})], True, id="no-const"),  # neither writes the other's
    pytest.param([obj({"k": {"const": "a"}}), obj({"k": {"const": "a"}})], False, id="same-tag"),
    pytest.param([obj({"k": {"const": "a"}}, []), obj({"k": {"const": "b"}}, [])], True, id="optional-tag"),
    pytest.param([obj({"k": {"const": "a"}}), obj({"j": {"const": "b"}})], True, id="different-keys"),
    pytest.param([obj({"k": {"enum": ["a", "c"]}}), obj({"k": {"const": "b"}})], True, id="enums-apart"),
    pytest.param([{"type": "string"}, {"type": "null"}], True, id="kinds-apart"),
    pytest.param([obj({"k": {"const": "a"}}), {"type": "integer", "minimum": 0, "maximum": 1}], True,
                 id="object-or-integer"),
]


@pytest.mark.parametrize("options, disjoint", UNDISCRIMINATED)
def test_union_without_discriminator(options: list[Any], disjoint: bool) -> None:
    """anyOf compiles without a discriminator (a general union); oneOf compiles only where no value a branch
    emits satisfies another (after narrowing an optional tag to required), and is refused where one can."""
    u = compile_schema(obj({"u": {"anyOf": options}})).nodes["/u"]
    assert isinstance(u, UnionNode) and len(u.branches) == 2
    if disjoint:
        compile_schema(obj({"u": {"oneOf": options}}))
    else:
        with pytest.raises(UnsupportedKeyword) as info:
            compile_schema(obj({"u": {"oneOf": options}}))
        assert info.value.pointer == "#/properties/u/oneOf" and "exclusivity" in str(info.value)


@pytest.mark.parametrize("union", [{"anyOf": []}, {"oneOf": "x"}])
def test_malformed_union(union: dict[str, Any]) -> None:
    with pytest.raises(DeclarationError) as info:
        compile_schema(obj({"u": union}))
    assert info.value.pointer == "#/properties/u/" + next(iter(union))


def test_union_beside_other_keywords_is_an_error() -> None:
    with pytest.raises(UnsupportedKeyword) as info:
        compile_schema(obj({"u": {"anyOf": [WEATHER, BOOK], "oneOf": [WEATHER, BOOK]}}))
    assert info.value.pointer == "#/properties/u/oneOf"


REF_UNION = ("anyOf/oneOf branches given as $ref (what pydantic emits for Union[A, B]) fail with a spurious "
             "'recursive $ref' UnsupportedKeyword: _union resolves each branch with _resolve, which pushes the ref "
             "on _ref_stack and never pops it, so compiling the branch afterwards sees the ref already on the stack")


def test_union_of_refs() -> None:
    schema = {"$defs": {"W": WEATHER, "B": BOOK}, **obj({"call": {"anyOf": [{"$ref": "#/$defs/W"},
                                                                             {"$ref": "#/$defs/B"}]}})}
    u = compile_schema(schema).nodes["/call"]
    assert isinstance(u, UnionNode) and u.tags == ["get_weather", "book"]


def test_union_with_ref_discriminator() -> None:
    schema = {"$defs": {"N": {"const": "get_weather"}},
              **obj({"call": {"anyOf": [obj({"name": {"$ref": "#/$defs/N"}, "x": BOOL}), BOOK]}})}
    u = compile_schema(schema).nodes["/call"]
    assert isinstance(u, UnionNode) and u.tags == ["get_weather", "book"]


def test_pydantic_union() -> None:
    from typing import Literal, Union

    from pydantic import BaseModel
    from pydantic import Field as PField

    class A(BaseModel):
        name: Literal["a"]
        x: int = PField(ge=0, le=3)

    class B(BaseModel):
        name: Literal["b"]
        y: bool

    class Call(BaseModel):
        call: Union[A, B]

    u = fs.Spec.from_pydantic(Call).compiled.nodes["/call"]
    assert isinstance(u, UnionNode) and u.tags == ["a", "b"]


def test_union_discriminator_field_has_every_tag() -> None:
    spec = fs.Spec(obj({"call": {"oneOf": [WEATHER, BOOK]}}))
    assert list(spec.compiled.fields["/call/name"].values) == ["get_weather", "book"]
    spec.session().assign("/call/name", "get_weather")


# -- $ref -----------------------------------------------------------------------------------------------------------

STOP = obj({"city": {"enum": ["Riga", "Split"]}, "day": ints(1, 15)})


@pytest.mark.parametrize("defs", ["$defs", "definitions"])
def test_ref_to_local_definitions_equals_inlining(defs: str) -> None:
    inlined = obj({"a": STOP, "b": STOP, "v": {"type": "array", "minItems": 2, "maxItems": 2, "items": STOP}})
    referenced = {defs: {"Stop": STOP},
                  **obj({"a": {"$ref": f"#/{defs}/Stop"}, "b": {"$ref": f"#/{defs}/Stop", "title": "B"},
                         "v": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"$ref": f"#/{defs}/Stop"}}})}
    want, got = compile_schema(inlined), compile_schema(referenced)
    assert domains(got) == domains(want)
    assert list(got.fields) == ["/a/city", "/a/day", "/b/city", "/b/day", "/v/0/city", "/v/0/day", "/v/1/city",
                                "/v/1/day"]
    assert got.fields["/a/city"] is not got.fields["/b/city"]  # one field per use


def test_ref_chains_escaped_names_and_both_def_sections() -> None:
    schema = {"$defs": {"A": {"$ref": "#/definitions/B"}, "a/b~c": {"enum": [1, 2]}},
              "definitions": {"B": BOOL},
              **obj({"x": {"$ref": "#/$defs/A"}, "y": {"$ref": "#/$defs/a~1b~0c"}})}
    assert domains(compile_schema(schema)) == {"/x": [False, True], "/y": [1, 2]}


def test_errors_inside_a_definition_point_into_it() -> None:
    with pytest.raises(DeclarationError) as info:
        compile_schema({"$defs": {"D": ints(3, 2)}, **obj({"a": {"$ref": "#/$defs/D"}})})
    assert info.value.pointer == "#/$defs/D"


@pytest.mark.parametrize("ref", ["#/$defs/Missing", "other.json#/$defs/A", "https://example.com/schemas/a.json",
                                 "#/$defs/A/properties/y", "#/$defs/A#x"])
def test_refs_outside_the_document_are_refused(ref: str) -> None:
    schema = {"$defs": {"A": obj({"x": BOOL})}, **obj({"a": {"$ref": ref}})}
    with pytest.raises(UnsupportedKeyword) as info:
        compile_schema(schema)
    assert info.value.pointer == "#/properties/a/$ref" and info.value.found == ref


@pytest.mark.parametrize("schema, want", [
    ({"$defs": {"A": obj({"x": BOOL})}, **obj({"a": {"$ref": "#/$defs/A/properties/x"}})}, {"/a": [False, True]}),
    ({"$defs": {"c": {"$id": "http://example.com/c.json", "enum": [1, 2]}},
      **obj({"a": {"$ref": "http://example.com/c.json"}})}, {"/a": [1, 2]}),
    ({"$id": "http://example.com/root.json", "$defs": {"c": {"$id": "sub/c.json", "enum": ["x"]}},
      **obj({"a": {"$ref": "sub/c.json"}})}, {"/a": ["x"]}),
    ({"$defs": {"c": {"$anchor": "colour", "enum": ["red"]}}, **obj({"a": {"$ref": "#colour"}})}, {"/a": ["red"]}),
    ({"$id": "urn:uuid:deadbeef-1234-ffff-ffff-4321feebdaed", "$defs": {"b": BOOL},
      **obj({"a": {"$ref": "urn:uuid:deadbeef-1234-ffff-ffff-4321feebdaed#/$defs/b"}})}, {"/a": [False, True]}),
    ({"$defs": {"n": ints(1, 3)}, **obj({"a": {"$ref": "#/$defs/n", "minimum": 2}})}, {"/a": [2, 3]}),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"n": ints(1, 3)},
      **obj({"a": {"$ref": "#/definitions/n", "minimum": 2}})}, {"/a": [1, 2, 3]}),  # draft 7: $ref overrides
    ({"$defs": {"tilde~field": {"enum": [0]}}, **obj({"a": {"$ref": "#/$defs/tilde~0field"}})}, {"/a": [0]}),
    ({"$defs": {"t": True}, **obj({"a": {"$ref": "#/$defs/t"}, "b": {"enum": [5]}}, ["b"])}, {"/b": [5]}),
])
def test_refs_resolve_as_jsonschema_resolves_them(schema: dict[str, Any], want: dict[str, list[Any]]) -> None:
    """$id base URIs, $anchor, URNs, pointers into any part, siblings of $ref (2020-12 asserts them, draft 7
    ignores them), boolean targets; each checked against jsonschema on the field's values."""
    got = {p: v for p, v in domains(compile_schema(schema)).items() if p in want}
    assert got == want
    validator = jsonschema.validators.validator_for(schema)(schema)
    for p, values in want.items():
        others = {q[1:]: vs[0] for q, vs in want.items() if q != p}
        for v in [*values, 0, 1, 2, 3, 5, "x", "red", True, False]:
            admitted = any(jkey(v) == jkey(x) for x in values)
            assert validator.is_valid({**others, p[1:]: v}) == admitted, (p, v)


def test_a_recursive_ref_nests_to_its_depth_bound() -> None:
    """A tree: records nest the recursive definition at most REF_DEPTH deep (narrowing), each valid."""
    from factorspec_cp.bench import coverage as cov
    from factorspec_cp.schema import REF_DEPTH
    from factorspec_cp.tokenmap.layout import Layout
    schema = {"$defs": {"node": obj({"v": BOOL, "kids": {"type": "array", "maxItems": 2, "items": {
        "$ref": "#/$defs/node"}}}, ["v"])}, "$ref": "#/$defs/node"}
    spec = fs.Spec(schema)
    validator = jsonschema.Draft202012Validator(schema)

    def depth(x: Any) -> int:
        return 1 + max((depth(k) for k in x.get("kids", [])), default=0)

    gen, deepest = cov.Generator(random.Random(3), Layout(spec)), 0
    for _ in range(60):
        rec = gen.record(spec.compiled.root)
        assert validator.is_valid(rec), rec
        deepest = max(deepest, depth(rec))
    assert deepest == REF_DEPTH
    deep = {"v": True, "kids": [{"v": True, "kids": [{"v": True, "kids": [{"v": False}]}]}]}
    assert validator.is_valid(deep) and depth(deep) == REF_DEPTH + 1
    assert not cov.layout_accepts(Layout(spec), deep)  # past the bound: not written (narrowing)


@pytest.mark.parametrize("schema, error", [
    ({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, **obj({"a": {"$ref": "#/$defs/A"}})},
     "cycle of references"),
    (obj({"a": {"$ref": "#/properties/a"}}), "cycle of references"),
    (obj({"next": {"$ref": "#"}}), "depth bound"),  # required all the way down: no finite record
])
def test_refs_without_a_finite_record_are_errors(schema: dict[str, Any], error: str) -> None:
    with pytest.raises(DeclarationError) as info:
        compile_schema(schema)
    assert error in str(info.value)
    assert info.value.pointer.startswith("#")


def test_keywords_beside_ref_assert_from_2019_09_and_are_ignored_in_draft_7() -> None:
    doc = {"$defs": {"A": {"type": "string"}}, **obj({"a": {"$ref": "#/$defs/A", "maxLength": 3}})}
    assert compile_schema(doc).free["/a"].schema.get("maxLength") == 3
    old = {"$schema": "http://json-schema.org/draft-07/schema#", **doc}
    got = compile_schema(old)
    assert "maxLength" not in got.free["/a"].schema and ("#/properties/a", "maxLength") in got.ignored


def test_root_ref_beside_defs() -> None:
    schema = {"$defs": {"R": obj({"a": BOOL})}, "$ref": "#/$defs/R"}
    assert domains(compile_schema(schema)) == {"/a": [False, True]}


def test_pydantic_model_with_nested_model_ref() -> None:
    from typing import Annotated, Literal

    from pydantic import BaseModel
    from pydantic import Field as PField

    class Stop(BaseModel):
        city: Literal["Riga", "Split"]
        day: Annotated[int, PField(ge=1, le=15)]

    class Plan(BaseModel):
        """A plan (the docstring becomes a description annotation)."""

        stops: Annotated[list[Stop], PField(min_length=2, max_length=2)]
        direct: bool
        note: str = ""

    spec = fs.Spec.from_pydantic(Plan)
    assert domains(spec.compiled) == {"/stops/0/city": ["Riga", "Split"], "/stops/0/day": list(range(1, 16)),
                                      "/stops/1/city": ["Riga", "Split"], "/stops/1/day": list(range(1, 16)),
                                      "/direct": [False, True]}
    assert list(spec.compiled.free) == ["/note"] and spec.compiled.free["/note"].conditional


# -- annotations ----------------------------------------------------------------------------------------------------

def _annotate(schema: Any, depth: int = 0) -> Any:
    """``schema`` with annotations on every subschema."""
    if isinstance(schema, list):
        return [_annotate(s, depth) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (_annotate(v, depth + 1) if k in ("items", "anyOf", "oneOf") else
               {n: _annotate(s, depth + 1) for n, s in v.items()} if k in ("properties", "$defs") else v)
           for k, v in schema.items()}
    out.update({"title": f"T{depth}", "description": "what and why", "default": None, "examples": [1, "x"],
                "$comment": "c", "deprecated": False, "readOnly": False, "writeOnly": False})
    return out


def test_annotations_are_ignored() -> None:
    schema = {"$defs": {"S": STOP},
              **obj({"a": {"$ref": "#/$defs/S"}, "n": {"type": "string", "maxLength": 3}, "k": {"enum": [1, 2]},
                     "v": {"type": "array", "items": ints(0, 2, multipleOf=2), "minItems": 1, "maxItems": 2},
                     "u": {"oneOf": [WEATHER, BOOK]}, "o": BOOL}, ["a", "n", "k", "v", "u"])}
    annotated = {**_annotate(schema), "$schema": "https://json-schema.org/draft/2020-12/schema",
                 "$id": "https://example.com/s"}
    plain, rich = compile_schema(schema), compile_schema(annotated)
    assert domains(rich) == domains(plain) and conditional(rich) == conditional(plain)
    assert list(rich.free) == list(plain.free)


def test_ignored_keywords_are_listed_with_their_pointers_and_refused_when_strict() -> None:
    """The keyword policy: keywords that constrain nothing (annotations, vendor keys, draft 4's ``id``, a format
    JSON Schema does not define, keys beside a ``$ref``) compile to the same layout as without them, each listed
    once with the pointer of its schema; ``strict=True`` refuses the first one met."""
    schema = {"$defs": {"S": {**STOP, "x-note": 1}},
              **obj({"a": {"$ref": "#/$defs/S", "description": "beside the ref"},
                     "b": {"$ref": "#/$defs/S"},
                     "n": {"type": "string", "format": "my-format", "esriDocumentation": {}}}, ["a", "b", "n"]),
              "id": "urn:draft4"}
    plain = {"$defs": {"S": STOP}, **obj({"a": {"$ref": "#/$defs/S"}, "b": {"$ref": "#/$defs/S"},
                                          "n": {"type": "string"}}, ["a", "b", "n"])}
    got, want = compile_schema(schema), compile_schema(plain)
    assert domains(got) == domains(want) and list(got.free) == list(want.free)
    assert sorted(got.ignored) == sorted([("#", "id"), ("#/properties/a", "description"), ("#/$defs/S", "x-note"),
                                          ("#/properties/n", "format"), ("#/properties/n", "esriDocumentation")])
    assert not want.ignored
    with pytest.raises(UnsupportedKeyword) as info:
        compile_schema(schema, strict=True)
    assert info.value.pointer is not None and info.value.pointer.rsplit("/", 1)[-1] in {
        "id", "description", "x-note", "format", "esriDocumentation"}
    beside = compile_schema(obj({"a": {"$ref": "#/$defs/S", "minimum": 1}}) | {"$defs": {"S": STOP}})
    assert ("#/properties/a", "minimum") in beside.ignored  # asserted beside the ref: on an object it binds nothing


# -- JSON Pointer escaping ------------------------------------------------------------------------------------------

def test_property_names_with_slash_and_tilde() -> None:
    names = ["a/b", "m~n", "~1", "x/~y", "plain"]
    schema = obj({n: ints(0, 3) for n in names})
    c = compile_schema(schema)
    assert list(c.fields) == ["/a~1b", "/m~0n", "/~01", "/x~1~0y", "/plain"]
    assert [split_pointer(p) for p in c.fields] == [[n] for n in names]
    rel = [fs.Compare("/a~1b", "<", "/m~0n"), fs.Compare("/~01", ">", "/x~1~0y")]
    spec = fs.Spec(schema, rel)
    s = spec.session()
    assert s.admissible("/a~1b") == [0, 1, 2] and s.admissible("/~01") == [1, 2, 3]
    rec = spec.record({"/a~1b": 0, "/m~0n": 1, "/~01": 2, "/x~1~0y": 0, "/plain": 3})
    assert rec == {"a/b": 0, "m~n": 1, "~1": 2, "x/~y": 0, "plain": 3}
    assert spec.check_record(rec) == []
    with pytest.raises(fs.UnknownPath):
        fs.Spec(schema, [fs.Compare("/a/b", "==", 1)])  # unescaped: a property "a" that does not exist


def test_nested_escaped_names_in_arrays() -> None:
    c = compile_schema(obj({"i/o": {"type": "array", "minItems": 2, "maxItems": 2, "items": obj({"~": BOOL})}}))
    assert list(c.fields) == ["/i~1o/0/~0", "/i~1o/1/~0"]


@given(st.lists(st.text(alphabet="ab/~01", max_size=5), max_size=4))
def test_escape_round_trip(tokens: list[str]) -> None:
    assert [unescape(escape(t)) for t in tokens] == tokens
    pointer = "".join("/" + escape(t) for t in tokens)
    assert split_pointer(pointer) == tokens


# -- cross-check with jsonschema: random records from the compiled domains ------------------------------------------

def _free_value(f: FreeField, rng: random.Random) -> Any:
    s = f.schema
    if f.type == "string":
        lo, hi = s.get("minLength", 0), min(s.get("maxLength", 8), 8)
        return "".join(rng.choice(string.ascii_lowercase[:3]) for _ in range(rng.randint(lo, max(lo, hi))))
    if f.type == "number":
        lo = s.get("minimum", s.get("exclusiveMinimum", -50.0))
        hi = s.get("maximum", s.get("exclusiveMaximum", lo + 100.0))
        v = rng.uniform(lo, hi)
        return v if lo < v < hi else (lo + hi) / 2
    step = int(s.get("multipleOf", 1))
    lo = s["minimum"] if "minimum" in s else s["exclusiveMinimum"] + 1 if "exclusiveMinimum" in s else -10**9
    hi = s["maximum"] if "maximum" in s else s["exclusiveMaximum"] - 1 if "exclusiveMaximum" in s else lo + 10**4
    return rng.randrange(lo + (-lo) % step, hi + 1, step)


def _random_record(node: Node, rng: random.Random) -> Any:
    """A record built from the compiled tree: domain values, optional parts present or not, any legal length."""
    if isinstance(node, Leaf):
        f = node.field
        return rng.choice(list(f.values)) if isinstance(f, Field) else _free_value(f, rng)
    if isinstance(node, ObjectNode):
        return {p.name: _random_record(p.node, rng) for p in node.properties if p.required or rng.random() < 0.5}
    if isinstance(node, ArrayNode):
        n = rng.randint(node.min_items, node.max_items if node.max_items is not None else node.min_items + 3)
        return [_random_record(node.elements[i] if node.elements else node.items, rng) for i in range(n)]
    assert isinstance(node, UnionNode)
    return _random_record(rng.choice(node.branches), rng)


CROSS_SCHEMAS = {
    "trip": obj({
        "plan": {"type": "array", "minItems": 3, "maxItems": 3, "items": obj({
            "city": {"enum": ["Riga", "Manchester", "Split"]},
            "first_day": ints(1, 15), "last_day": {"type": "integer", "exclusiveMinimum": 0, "maximum": 15}},
            additionalProperties=False)},
        "extra": {"type": "array", "minItems": 0, "maxItems": 4, "items": {"type": "string", "enum": ["x", "y"]}},
        "note": {"type": "string", "maxLength": 12, "pattern": "^[a-c]*$"},
        "budget": {"type": "integer", "minimum": 0, "multipleOf": 50},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "flags": obj({"direct": BOOL, "none": {"type": "null"}, "v": {"const": 2}}, ["direct"]),
        "level": ints(-30, 30, multipleOf=7)}, ["plan", "note", "level"], additionalProperties=False),
    "tool_call": obj({"call": {"oneOf": [WEATHER, BOOK]}, "seq": {"type": "array", "items": {"anyOf": [WEATHER, BOOK]},
                                                                   "maxItems": 3}}),
    "defs": {"$defs": {"Stop": STOP, "Pair": {"type": "array", "minItems": 2, "maxItems": 2,
                                              "items": {"$ref": "#/$defs/Stop"}}},
             "definitions": {"Flag": BOOL},
             **obj({"pair": {"$ref": "#/$defs/Pair"}, "f": {"$ref": "#/definitions/Flag"},
                    "odd": {"type": "integer", "exclusiveMinimum": -5.5, "exclusiveMaximum": 9.5, "multipleOf": 3}},
                   ["pair"])},
    "escaped": obj({"a/b": {"enum": [1, True, None, "1"]}, "c~d": obj({"e/f~": ints(0, 2)}, [])}, ["a/b"]),
}


@pytest.mark.parametrize("name", list(CROSS_SCHEMAS))
def test_random_records_validate_with_jsonschema(name: str) -> None:
    schema = CROSS_SCHEMAS[name]
    c = compile_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    rng = random.Random(f"schema-{name}")
    for _ in range(300):
        record = _random_record(c.root, rng)
        errors = [e.message for e in validator.iter_errors(record)]
        assert errors == [], (record, errors)


def _set(record: Any, pointer: str, value: Any) -> None:
    *head, last = split_pointer(pointer)
    for tok in head:
        record = record[int(tok)] if isinstance(record, list) else record[tok]
    record[int(last) if isinstance(record, list) else last] = value


@pytest.mark.parametrize("name", ["trip", "defs", "escaped"])
def test_values_outside_the_domains_are_invalid(name: str) -> None:
    """Each always-present field's domain is exact: a valid record changed in one field validates iff the new
    value is in that field's domain (probed near the domain's ends and with other JSON types)."""
    schema = CROSS_SCHEMAS[name]
    spec = fs.Spec(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(name)
    record = _random_record(spec.compiled.root, rng)
    assert validator.is_valid(record), record
    assert spec.fields
    for p, f in spec.fields.items():
        probes: list[Any] = ["Riga", "1", True, False, None, 0.5, 1.0]
        if isinstance(f.values, range):
            probes += list(range(f.values.start - 3, f.values[-1] + 4))
        else:
            probes += list(f.values)
        for v in probes:
            rec = copy.deepcopy(record)
            _set(rec, p, v)
            expected = any(jkey(v) == jkey(x) for x in f.values)
            assert validator.is_valid(rec) == expected, (p, v)


def test_solutions_validate_with_jsonschema() -> None:
    schema = obj({"plan": CROSS_SCHEMAS["trip"]["properties"]["plan"], "flags": CROSS_SCHEMAS["trip"]["properties"][
        "flags"], "note": {"type": "string"}, "level": ints(-30, 30, multipleOf=7)}, ["plan", "flags", "level"])
    spec = fs.Spec(schema, [fs.AllDifferent("/plan/*/city"),
                            fs.Linear([[1, "/plan/{i}/last_day"], [-1, "/plan/{i}/first_day"]], ">=", 1)])
    validator = jsonschema.Draft202012Validator(schema)
    records = list(spec.solutions(limit=40))
    assert len(records) == 40
    for rec in records:
        assert validator.is_valid(rec), rec
        assert spec.check_record(rec) == []
