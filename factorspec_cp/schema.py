"""JSON Schema subset -> a tree of nodes, finite-domain fields and free fields, in record (layout) order.

Strict: every keyword that constrains values (:data:`ASSERTIONS`) and is outside the supported subset raises
:class:`UnsupportedKeyword` naming its JSON Pointer. Keywords that constrain nothing (annotations such as ``title``,
vendor keys, unknown words) are ignored and listed (``Spec.ignored``); ``strict=True`` refuses them. Narrowing is
allowed, weakening is not. The narrowings: a record we emit carries only declared properties (so
``additionalProperties`` binds only required names left undeclared); ``minProperties`` / ``maxProperties`` /
``dependentRequired`` / ``dependentSchemas`` promote, leave out or meet properties; any value (an untyped schema)
has empty objects and arrays at most :data:`ANY_DEPTH` deep; a ``oneOf`` branch may drop or require an optional
property so that it excludes its siblings; parts no value satisfies (:class:`EmptySchema`) are left out where
optional; a recursive ``$ref`` nests at most :data:`REF_DEPTH` deep; ``contains`` writes its matches first; ``not``
over a required name leaves that name out.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Union

from .errors import CompileBudgetExceeded, DeclarationError, EmptySchema, UnsupportedKeyword

#: JSON Schema's own annotations (drafts 4 to 2020-12): they constrain nothing, so like every keyword that constrains
#: nothing they are ignored and listed on ``Spec.ignored`` (refused under ``strict=True``).
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "$schema",
     "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "contentEncoding", "contentMediaType", "contentSchema"}
)
#: JSON Schema keywords (drafts 4 to 2020-12) that constrain a value. One that is not supported at its place is
#: refused with :class:`UnsupportedKeyword`, never weakened; every other keyword (an annotation, a vendor key such
#: as ``esriDocumentation``, draft 4's ``id``, an unknown word: JSON Schema treats unknown keywords as annotations)
#: is ignored and listed on ``Spec.ignored``, or refused under ``strict=True``.
ASSERTIONS = frozenset(
    {"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
     "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
     "maxProperties", "minProperties", "required", "dependentRequired", "dependencies", "dependentSchemas",
     "properties", "patternProperties", "additionalProperties", "propertyNames", "unevaluatedProperties", "items",
     "prefixItems", "additionalItems", "unevaluatedItems", "contains", "allOf", "anyOf", "oneOf", "not", "if",
     "then", "else", "$ref", "$dynamicRef", "$recursiveRef", "$recursiveAnchor", "format"}
)
#: The ``format`` names JSON Schema defines: each constrains strings (each is enforced: ``freeslot.FORMATS``).
#: A ``format`` naming anything else constrains nothing (an annotation) and is ignored like one.
KNOWN_FORMATS = frozenset(
    {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
     "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
     "relative-json-pointer", "regex"}
)


def constrains(key: str, value: Any) -> bool:
    """Whether keyword ``key`` (with ``value``) constrains the value it sits on (see :data:`ASSERTIONS`)."""
    if key == "format":
        return isinstance(value, str) and value in KNOWN_FORMATS
    return key in ASSERTIONS
#: Largest integer range enumerated as a finite domain.
MAX_DOMAIN = 1_000_000


def escape(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def split_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"not a JSON Pointer: {pointer!r}")
    return [unescape(t) for t in pointer[1:].split("/")]


def jkey(value: Any) -> tuple[str, Any]:
    """A hashable key that keeps JSON's distinctions Python blurs (``1 != true``, ``1 == 1.0``); objects and arrays
    (enum and const values) key by their members, an object's regardless of key order."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if value is None:
        return ("z", None)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(jkey(x) for x in value))
    if isinstance(value, dict):
        return ("o", tuple(sorted((k, jkey(x)) for k, x in value.items())))
    raise TypeError(f"not a JSON value: {value!r}")


class JSONList(list):  # type: ignore[type-arg]
    """An array value of an enum or const: a list that hashes (by :func:`jkey`), since layouts keep completed
    values in sets. Not to be changed once made."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(jkey(self))


class JSONObject(dict):  # type: ignore[type-arg]
    """An object value of an enum or const: a dict that hashes (by :func:`jkey`). Not to be changed once made."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(jkey(self))


def frozen(value: Any) -> Any:
    """``value`` with its arrays and objects, at every depth, as :class:`JSONList` and :class:`JSONObject`."""
    if isinstance(value, list):
        return JSONList(frozen(x) for x in value)
    if isinstance(value, dict):
        return JSONObject((k, frozen(x)) for k, x in value.items())
    return value


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


@dataclass(eq=False)
class Field:
    """A leaf with a finite domain. ``values`` is the domain in canonical order (a ``range`` for integers)."""

    pointer: str
    values: Union[range, tuple[Any, ...]]
    kind: str  # "integer" | "boolean" | "enum" | "const" | "null"
    conditional: bool = False  # not always present (optional property, variable-length array, union branch)
    _index: dict[Any, int] | None = field(default=None, repr=False)
    #: ``len(values)``, kept: the compiled per-token path reads it, where a property is a call into Python
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.size = len(self.values)

    @property
    def numeric(self) -> bool:
        """True where every value is an integer or a boolean (booleans count 0/1)."""
        if isinstance(self.values, range):
            return True
        return all(isinstance(v, (bool, int)) for v in self.values)

    def number(self, k: int) -> int:
        return int(self.values[k])

    def index(self, value: Any) -> int:
        """Position of ``value`` in the domain; ``KeyError`` when it is not there."""
        if isinstance(self.values, range):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise KeyError(value)
            try:
                return self.values.index(int(value))
            except ValueError:
                raise KeyError(value) from None
        if self._index is None:
            self._index = {jkey(v): k for k, v in enumerate(self.values)}
        try:
            return self._index[jkey(value)]
        except TypeError:
            raise KeyError(value) from None

    def __contains__(self, value: Any) -> bool:
        try:
            self.index(value)
        except KeyError:
            return False
        return True


@dataclass(eq=False)
class FreeField:
    """A leaf without a finite domain (a note string, an unbounded integer, a number). Relations may not read it."""

    pointer: str
    schema: dict[str, Any]
    conditional: bool = False
    where: str = field(default="", compare=False)  # the JSON Pointer of its schema in the declaration

    @property
    def type(self) -> str:
        return str(self.schema.get("type", "string"))


@dataclass(eq=False)
class Leaf:
    pointer: str
    field: Union[Field, FreeField]


@dataclass(eq=False)
class Property:
    name: str
    node: Node
    required: bool


@dataclass(eq=False)
class ObjectNode:
    pointer: str
    properties: list[Property]


@dataclass(eq=False)
class ArrayNode:
    pointer: str
    items: Node  # the template of the items after the prefix, laid out at index "*"
    min_items: int
    max_items: int | None
    elements: list[Node]  # one node per index below max_items (empty when unbounded)
    prefix: list[Node] = field(default_factory=list)  # prefixItems (a tuple's items): index i's own schema

    def item(self, i: int) -> Node:
        """The node of the item at index ``i``."""
        if i < len(self.elements):
            return self.elements[i]
        return self.prefix[i] if i < len(self.prefix) else self.items


@dataclass(eq=False)
class UnionNode:
    """``anyOf`` / ``oneOf`` / a list of types / an untyped schema: a record takes one branch. ``discriminator``
    names the property whose const value (one of ``tags``) picks an object branch; ``None``: branches of any kind,
    the first that fits a value renders it (``oneOf`` compiles only where its branches are disjoint)."""
    pointer: str
    branches: list[Node]
    discriminator: str | None = None
    tags: list[Any] = field(default_factory=list)


Node = Union[Leaf, ObjectNode, ArrayNode, UnionNode]


class CompiledSchema:
    """The schema as nodes, with lookup tables by JSON Pointer, and the keywords ignored (they constrain nothing)."""

    def __init__(self, root: Node, fields: dict[str, Field], free: dict[str, FreeField], nodes: dict[str, Node],
                 ignored: list[tuple[str, str]] | None = None, unique: list[tuple[str, list[str]]] | None = None):
        self.root = root
        #: ``uniqueItems`` arrays, as (JSON Pointer of the schema, the pointers of its items): each an all_different
        #: relation the spec enforces
        self.unique = unique or []
        self.fields = fields  # every finite-domain leaf, record order
        self.free = free
        self.nodes = nodes
        self.ignored = ignored or []  # (JSON Pointer of the schema, keyword), in the order met

    def suggest(self, pointer: str) -> str | None:
        close = difflib.get_close_matches(pointer, list(self.nodes), n=3, cutoff=0.6)
        return f"did you mean {', '.join(close)}?" if close else None


_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties"}
_ARRAY_KEYS = {"type", "items", "minItems", "maxItems", "prefixItems", "additionalItems", "uniqueItems"}
_INTEGER_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
_STRING_KEYS = {"type", "maxLength", "minLength", "pattern"}
_NUMBER_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
#: JSON types in the order a union of them is laid out; "integer" is a kind of "number".
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
#: The keywords JSON Schema applies only to values of one type (a value of another type passes them).
_TYPE_VOCABULARY = {
    "string": frozenset({"maxLength", "minLength", "pattern", "format"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
    "object": frozenset({"properties", "required", "additionalProperties", "patternProperties", "minProperties",
                         "maxProperties", "dependentRequired", "dependencies", "dependentSchemas", "propertyNames",
                         "unevaluatedProperties"}),
    "array": frozenset({"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains",
                        "minContains", "maxContains", "unevaluatedItems"}),
}
_TYPE_SPECIFIC = frozenset().union(*_TYPE_VOCABULARY.values())
#: How deep values of an untyped schema (any JSON value) nest: below that, their arrays are empty.
ANY_DEPTH = 3
#: How many times a recursive ``$ref`` may nest inside itself in a record (narrowing: deeper parts are left out
#: where optional, as schemas no value satisfies are).
REF_DEPTH = 3
#: The most schema nodes one declaration compiles to (recursive definitions multiply them).
MAX_NODES = 20_000
#: object keywords met by narrowing (see ``_Compiler._object``)
_OBJECT_NARROWED = {"patternProperties", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
                    "dependencies"}
_DRAFT7_CONTENT = frozenset({"contentMediaType", "contentEncoding"})
_ALL_KINDS = frozenset({"null", "boolean", "number", "string", "array", "object"})


class _References:
    """``$ref`` resolution by the ``referencing`` library (what ``jsonschema`` uses): base URIs set by ``$id``,
    ``$anchor``, JSON Pointers into any part of the document, URNs, each draft's rules (draft 7's ``$ref`` overrides
    its siblings, and ``$id`` beside it changes nothing). References outside the document are not fetched."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self._where: dict[int, str] = {}
        self._scope: dict[int, Any] = {}
        self._root: Any = None
        self._made: list[Any] = []
        dialect = doc.get("$schema")
        self.ref_overrides = isinstance(dialect, str) and any(
            d in dialect for d in ("draft-07", "draft-06", "draft-04", "draft-03"))

    def _build(self) -> None:
        import referencing.jsonschema as rj
        dialect = self.doc.get("$schema")
        first = rj.specification_with(dialect if isinstance(dialect, str) else "", default=rj.DRAFT202012)
        error: Exception | None = None
        # a schema written to an older draft than it says (draft 7's list-valued items under 2020-12, common in
        # real schemas without $schema) is walked as 2019-09, then draft 7, reads both forms
        for spec in dict.fromkeys([first, rj.DRAFT201909, rj.DRAFT7]):
            try:
                self._walk(spec)
                break
            except Exception as e:  # noqa: BLE001 - the library's errors on a malformed $id / $anchor / keyword
                error = e
                self._scope.clear()
        else:
            raise DeclarationError(f"the declaration's identifiers do not resolve: {error}", pointer="#",
                                   hint="$id and $anchor must be strings, URIs and plain names") from None
        parts: list[tuple[Any, str]] = [(self.doc, "#")]
        while parts:  # where each part of the document is (for errors)
            v, at = parts.pop()
            if isinstance(v, dict):
                self._where.setdefault(id(v), at)
                parts.extend((x, f"{at}/{escape(k)}") for k, x in v.items())
            elif isinstance(v, list):
                parts.extend((x, f"{at}/{k}") for k, x in enumerate(v))

    def _walk(self, spec: Any) -> None:
        """The registry of the document's resources under ``spec``, and the resolver in scope at each schema."""
        import referencing
        root = spec.create_resource(self.doc)
        base = root.id() or ""
        registry = referencing.Registry().with_resource(base, root).crawl()
        self._root = registry.resolver(base_uri=base)
        stack = [(root, self._root)]
        while stack:
            res, resolver = stack.pop()
            self._scope.setdefault(id(res.contents), resolver)
            stack.extend((sub, resolver.in_subresource(sub)) for sub in res.subresources())

    def alias(self, copy: dict[str, Any], of: dict[str, Any]) -> dict[str, Any]:
        """``copy`` (a schema made from ``of``) resolves its ``$ref`` where ``of`` would."""
        if self._root is None:
            self._build()
        self._scope[id(copy)] = self._scope.get(id(of), self._root)
        self._made.append(copy)  # kept alive, so that its id names it while the compile runs
        return copy

    def lookup(self, schema: dict[str, Any], ref: str, at: str) -> tuple[Any, str]:
        """The schema ``ref`` (the ``$ref`` of ``schema``) names, and its JSON Pointer in the document."""
        import referencing.exceptions as rx
        if self._root is None:
            self._build()
        resolver = self._scope.get(id(schema), self._root)
        try:
            resolved = resolver.lookup(ref)
        except (rx.Unresolvable, rx.NoSuchResource, LookupError, ValueError, TypeError) as e:
            raise UnsupportedKeyword(f"$ref {ref!r} does not resolve inside the declaration", pointer=at,
                                     found=ref, hint="references outside the document are not fetched: copy the "
                                                     f"schema to #/$defs/NAME and point there ({type(e).__name__})"
                                     ) from None
        target = resolved.contents
        self._scope.setdefault(id(target), resolved.resolver)
        return target, self._where.get(id(target), ref)


class _Compiler:
    def __init__(self, doc: dict[str, Any], strict: bool = False):
        self.doc = doc
        self.strict = strict
        self.ignored: dict[tuple[str, str], None] = {}
        for key in ("$defs", "definitions"):
            if key in doc and not isinstance(doc[key], dict):
                raise UnsupportedKeyword(f"{key} must be an object", pointer=f"#/{key}", found=doc[key])
        self._refs = _References(doc)
        self.fields: dict[str, Field] = {}
        self.free: dict[str, FreeField] = {}
        self.nodes: dict[str, Node] = {}
        self._ref_stack: list[int] = []  # the targets of the $refs being compiled, one inside another (by id)
        # each enum schema object's domain (held with it, so its id stays its own): an array's items share one tuple
        self._enums: dict[int, tuple[dict[str, Any], tuple[Any, ...], str]] = {}
        self._nodes_made = 0
        self.unique: list[tuple[str, list[str]]] = []
        self._any_depth = 0  # untyped schemas (any value) being compiled, one inside another
        # draft 7 lets contentMediaType / contentEncoding assert (2020-12 makes them annotations): under a draft-7
        # $schema they are refused like every constraining keyword we do not enforce
        dialect = doc.get("$schema")
        self._asserting = _DRAFT7_CONTENT if isinstance(dialect, str) and "draft-07" in dialect else frozenset()

    # -- helpers --------------------------------------------------------------------------------------------------
    def _check_keys(self, schema: dict[str, Any], allowed: set[str], where: str) -> None:
        for key in schema:
            if key in allowed or key in ("$defs", "definitions"):
                continue
            if key == "x-factorspec" and where == "#":
                continue
            if constrains(key, schema[key]) or key in self._asserting:
                raise UnsupportedKeyword(
                    f"keyword {key!r} is not supported here", pointer=f"{where}/{escape(key)}", found=schema[key],
                    hint=f"supported at this place: {', '.join(sorted(allowed))} (keywords that constrain nothing "
                         "are ignored)")
            self._ignore(where, key, schema[key])

    def _ignore(self, where: str, key: str, value: Any) -> None:
        """Keyword ``key`` of the schema at ``where`` constrains nothing: listed, or refused under ``strict``."""
        if self.strict:
            raise UnsupportedKeyword(
                f"keyword {key!r} constrains nothing, and strict=True refuses what it would ignore",
                pointer=f"{where}/{escape(key)}", found=value,
                hint="drop it, or compile without strict=True: it is then ignored and listed on spec.ignored")
        self.ignored[(where, key)] = None

    def _resolve(self, schema: Any, where: str) -> tuple[dict[str, Any], str]:
        if not isinstance(schema, dict):
            if schema is True:
                return {}, where  # any value
            if schema is False:
                raise EmptySchema("the schema `false` admits no value", pointer=where, hint="leave the property out")
            raise DeclarationError("a schema must be an object", pointer=where, found=schema)
        chain: set[int] = set()  # the targets of this chain of $refs (a $ref straight to a $ref ...)
        while "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise DeclarationError("$ref must be a string", pointer=f"{where}/$ref", found=ref)
            others = {k: v for k, v in schema.items() if k not in ("$ref", "$defs", "definitions")}
            beside = {k: v for k, v in others.items() if constrains(k, v)}
            if beside and not self._refs.ref_overrides:  # 2019-09 and later: $ref is one more assertion
                both = {"allOf": [self._refs.alias({"$ref": ref}, schema), beside]}
                for k in others.keys() - beside.keys():
                    self._ignore(where, k, others[k])
                schema = both
                break
            for k, v in others.items():  # draft 7 and earlier: $ref overrides what is beside it
                self._ignore(where, k, v)
            target, target_where = self._refs.lookup(schema, ref, f"{where}/$ref")
            key = id(target)
            if key in chain:
                raise DeclarationError(f"$ref {ref!r} closes a cycle of references that names no schema",
                                       pointer=f"{where}/$ref", found=ref)
            chain.add(key)
            if self._ref_stack.count(key) >= REF_DEPTH:
                raise EmptySchema(f"recursive $ref {ref!r} nested past the depth bound ({REF_DEPTH})",
                                  pointer=f"{where}/$ref", found=ref,
                                  hint="records nest a recursive definition at most REF_DEPTH deep (narrowing): "
                                       "make the recursive part optional, or an array that may be empty")
            self._ref_stack.append(key)
            schema, where = target, target_where
            if not isinstance(schema, dict):
                return self._resolve(schema, where)
        _check_keyword_types(schema, where)
        return schema, where

    # -- nodes ----------------------------------------------------------------------------------------------------
    def node(self, schema: Any, pointer: str, where: str, conditional: bool) -> Node:
        self._nodes_made += 1
        if self._nodes_made > MAX_NODES:
            raise CompileBudgetExceeded(f"the schema compiles to more than {MAX_NODES:,} nodes", pointer=where,
                                        hint="recursive definitions and long arrays multiply the layout: bound "
                                             "them (maxItems), or make recursive parts optional")
        depth = len(self._ref_stack)
        schema, where = self._resolve(schema, where)
        try:
            node = self._node(schema, pointer, where, conditional)
        finally:
            del self._ref_stack[depth:]
        self.nodes[pointer] = node
        return node

    def _node(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> Node:
        if "allOf" in schema:
            return self._all_of(schema, pointer, where, conditional)
        if "not" in schema:
            schema = self._not(schema, where)
        if "anyOf" in schema or "oneOf" in schema:
            return self._union(schema, pointer, where, conditional)
        if "const" in schema or "enum" in schema:
            return self._enum(schema, pointer, where, conditional)
        typ = schema.get("type")
        if typ is None:
            if "properties" in schema:  # narrowed to objects (the records we emit are objects there)
                typ = "object"
            elif "items" in schema or "prefixItems" in schema:  # likewise arrays
                typ = "array"
            else:  # any JSON value: a union over every type, each under the keywords of its type
                self._any_depth += 1
                try:
                    return self._typed_union(schema, list(JSON_TYPES), pointer, where, conditional)
                finally:
                    self._any_depth -= 1
        if isinstance(typ, list):
            return self._typed_union(schema, typ, pointer, where, conditional)
        if isinstance(typ, str):  # a keyword of another type's vocabulary constrains nothing here
            vocab = _TYPE_VOCABULARY.get("number" if typ == "integer" else typ, frozenset())
            stray = [k for k in schema if k in _TYPE_SPECIFIC and k not in vocab]
            for k in stray:
                self._ignore(where, k, schema[k])
            if stray:
                schema = {k: v for k, v in schema.items() if k not in stray}
        if typ == "object":
            return self._object(schema, pointer, where, conditional)
        if typ == "array":
            return self._array(schema, pointer, where, conditional)
        if typ == "integer":
            return self._integer(schema, pointer, where, conditional)
        if typ == "boolean":
            self._check_keys(schema, {"type"}, where)
            return self._leaf(Field(pointer, (False, True), "boolean", conditional))
        if typ == "null":
            self._check_keys(schema, {"type"}, where)
            return self._leaf(Field(pointer, (None,), "null", conditional))
        if typ == "string":
            self._check_keys(schema, _STRING_KEYS | {"format"}, where)
            fmt = schema.get("format")
            if fmt is not None and constrains("format", fmt):
                from .tokenmap.freeslot import FORMATS
                if fmt not in FORMATS:
                    raise UnsupportedKeyword("keyword 'format' is not supported here", pointer=f"{where}/format",
                                             found=fmt, hint=f"supported formats: {', '.join(sorted(FORMATS))}")
                if "pattern" in schema:
                    raise UnsupportedKeyword("pattern beside format is not supported", pointer=f"{where}/pattern",
                                             found={"pattern": schema["pattern"], "format": fmt},
                                             hint="keep one of them")
                sub = dict(schema)
            else:
                if fmt is not None:
                    self._ignore(where, "format", fmt)  # a format JSON Schema does not define: an annotation
                sub = {k: v for k, v in schema.items() if k != "format"}
            return self._leaf(FreeField(pointer, sub, conditional, where))
        if typ == "number":
            self._check_keys(schema, _NUMBER_KEYS, where)
            return self._leaf(FreeField(pointer, dict(schema), conditional, where))
        raise UnsupportedKeyword(f"type {typ!r} is not supported", pointer=f"{where}/type", found=typ,
                                 hint="object, array, integer, boolean, string, number, null")

    def _not(self, schema: dict[str, Any], where: str) -> dict[str, Any]:
        """``schema`` with its ``not`` replaced by keywords the layout keeps. ``not N`` holds where one keyword of
        ``N`` fails, so one is made to fail: a name ``N`` requires is left out (narrowing: it is never written),
        ``N``'s types are taken out of the schema's, or ``N``'s values out of its finite domain. Where ``N`` is that
        keyword alone this is its exact complement (but for numbers that are not integers: none are written); where
        nothing of ``N`` can be made to fail, the keyword is refused, never dropped."""
        at = f"{where}/not"
        rest = {k: v for k, v in schema.items() if k != "not"}
        try:
            neg, _ = self._resolved(schema["not"], at)
        except EmptySchema:  # not false: every value
            return rest
        keys = {k for k, v in neg.items() if constrains(k, v)}
        for k in sorted(neg.keys() - keys - {"$defs", "definitions"}):
            self._ignore(at, k, neg[k])
        if not keys:
            raise EmptySchema("`not` of a schema every value satisfies admits no value", pointer=at,
                              hint="leave the property out")
        alone = len(keys) == 1
        req = neg.get("required")
        if isinstance(req, list) and req and all(isinstance(r, str) for r in req):
            own = rest.get("required", [])
            free = [r for r in req if not (isinstance(own, list) and r in own)]
            if free:
                props = rest.get("properties")
                if isinstance(props, dict) and free[0] in props:
                    rest["properties"] = {n: v for n, v in props.items() if n != free[0]}
                return rest  # an object we write carries only its declared properties: free[0] never appears
            if alone and rest.get("type") == "object":
                raise EmptySchema("`not` forbids properties the object requires", pointer=at, found=req)
        typ = neg.get("type")
        if typ is not None:
            banned = set(typ if isinstance(typ, list) else [typ])
            cur = rest.get("type", list(JSON_TYPES))
            cur = [c for c in (cur if isinstance(cur, list) else [cur]) if isinstance(c, str)]
            if "number" in banned:
                banned.add("integer")
            narrowed = "integer" in banned and "number" in cur and "number" not in banned
            if narrowed:  # numbers that are not integers: the layout's numbers may be integral, so none (narrowing)
                banned.add("number")
            left = [c for c in cur if c not in banned]
            if not left and alone and not narrowed:
                raise EmptySchema("`not` excludes every type the schema allows", pointer=at, found=neg)
            if left:
                rest["type"] = left if len(left) > 1 else left[0]
                return rest
        vals = _values(neg)
        if vals is not None:
            mine = _values(rest)
            if mine is None and rest.get("type") in ("boolean", "null"):
                mine = [False, True] if rest["type"] == "boolean" else [None]
            if mine is None and rest.get("type") == "integer":
                mine = _integers(rest)
                if mine is not None:
                    rest = {k: v for k, v in rest.items() if k not in _INTEGER_KEYS - {"type"}}
            if mine is not None:
                left = [v for v in mine if not any(_same(v, x) for x in vals)]
                if not left and alone:
                    raise EmptySchema("`not` excludes every value of the enum", pointer=at, found=neg)
                if left:
                    rest.pop("const", None)
                    rest["enum"] = left
                    return rest
        raise UnsupportedKeyword("keyword 'not' is supported where the layout can make one keyword of it fail (a "
                                 "required name, a type, a finite set of values)", pointer=at, found=schema["not"],
                                 hint="write the complement in the schema itself")

    def _leaf(self, f: Union[Field, FreeField]) -> Leaf:
        if isinstance(f, Field):
            self.fields[f.pointer] = f
        else:
            self.free[f.pointer] = f
        return Leaf(f.pointer, f)

    def _enum(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> Leaf:
        hit = self._enums.get(id(schema))
        if hit is not None and hit[0] is schema:
            return self._leaf(Field(pointer, hit[1], hit[2], conditional))
        leaf = self._enum_leaf(schema, pointer, where, conditional)
        f = leaf.field
        self._enums[id(schema)] = (schema, f.values, f.kind)  # type: ignore[arg-type]
        return leaf

    def _enum_leaf(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> Leaf:
        self._check_keys(schema, {"type", "enum", "const"}, where)
        if "const" in schema and "enum" in schema:
            raise UnsupportedKeyword("const beside enum", pointer=where, hint="use one of them")
        if "const" in schema:
            values, kind, key = [schema["const"]], "const", "const"
        else:
            values, kind, key = schema["enum"], "enum", "enum"
            if not isinstance(values, list) or not values:
                raise DeclarationError("enum must be a non-empty list", pointer=f"{where}/enum", found=values)
        seen: set[Any] = set()
        typ = schema.get("type")
        for k, v in enumerate(values):
            at = f"{where}/{key}" + (f"/{k}" if key == "enum" else "")
            if jkey(v) in seen:
                raise DeclarationError("duplicate enum value", pointer=at, found=v)
            seen.add(jkey(v))
        if typ is not None:  # the values of the type (type and enum both hold): the others can never be written
            values = [v for v in values if _has_type(v, typ)]
            if not values:
                raise EmptySchema(f"no enum value is of type {typ!r}", pointer=f"{where}/{key}", found=schema[key])
        return self._leaf(Field(pointer, tuple(frozen(v) for v in values), kind, conditional))

    def _integer(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> Leaf:
        self._check_keys(schema, _INTEGER_KEYS, where)
        for key in _INTEGER_KEYS - {"type"}:
            if key in schema and (isinstance(schema[key], bool) or not isinstance(schema[key], (int, float))):
                raise DeclarationError(f"{key} must be a number", pointer=f"{where}/{key}", found=schema[key])
        lo = schema.get("minimum")
        hi = schema.get("maximum")
        if "exclusiveMinimum" in schema:
            x = schema["exclusiveMinimum"]
            lo = max(lo, _floor(x) + 1) if lo is not None else _floor(x) + 1
        if "exclusiveMaximum" in schema:
            x = schema["exclusiveMaximum"]
            hi = min(hi, _ceil(x) - 1) if hi is not None else _ceil(x) - 1
        step = schema.get("multipleOf", 1)
        if step != int(step) or step <= 0:
            raise UnsupportedKeyword("multipleOf must be a positive integer for integers",
                                     pointer=f"{where}/multipleOf",
                                     found=step)
        step = int(step)
        if lo is None or hi is None:
            return self._leaf(FreeField(pointer, dict(schema), conditional, where))
        lo, hi = _ceil(lo), _floor(hi)
        first = lo + (-lo) % step
        width = (hi - first) // step + 1 if hi >= first else 0  # len(range) overflows past 2**63
        if width <= 0:
            raise EmptySchema("integer range is empty", pointer=where, found={"minimum": lo, "maximum": hi})
        values = range(first, hi + 1, step)
        if width > MAX_DOMAIN:
            return self._leaf(FreeField(pointer, dict(schema), conditional, where))
        return self._leaf(Field(pointer, values, "integer", conditional))

    def _object(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> ObjectNode:
        """An object: its declared properties in order. A record carries only declared properties (narrowing), so
        ``additionalProperties`` (a schema, true or false) binds only required names left undeclared, and each
        ``patternProperties`` schema whose pattern a declared (or required) name matches is met with that
        property's schema. ``minProperties`` promotes optional properties to required in order and
        ``maxProperties`` leaves trailing optional ones out; ``dependentRequired`` (and the list form of draft 7's
        ``dependencies``) makes the dependents required, ``dependentSchemas`` (the schema form) is met with the
        object: each a narrowing, exact for every record emitted."""
        self._check_keys(schema, _OBJECT_KEYS | _OBJECT_NARROWED, where)
        schema = self._dependent_schemas(schema, where)
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, (bool, dict)):
            raise DeclarationError("additionalProperties must be a schema", pointer=f"{where}/additionalProperties",
                                   found=extra)
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise DeclarationError("properties must be an object", pointer=f"{where}/properties", found=props)
        props = dict(props)
        required = schema.get("required", [])
        if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
            raise DeclarationError("required must be a list of names", pointer=f"{where}/required", found=required)
        required = list(dict.fromkeys(required))
        patterns = self._patterns(schema, where)
        for dep_key in ("dependentRequired", "dependencies"):
            deps = schema.get(dep_key, {})
            if not isinstance(deps, dict):
                raise DeclarationError(f"{dep_key} must be an object", pointer=f"{where}/{dep_key}", found=deps)
            for name, needs in deps.items():
                if isinstance(needs, list) and name in props:  # the dependents are written whenever name may be
                    if any(not isinstance(n, str) for n in needs):
                        raise DeclarationError(f"{dep_key} lists names", pointer=f"{where}/{dep_key}/{escape(name)}",
                                               found=needs)
                    required += [n for n in needs if n not in required]
        for r in required:
            if r not in props:
                matching = [sub for rx, sub in patterns if rx.search(r)]
                if matching:
                    props[r] = {"allOf": matching}
                elif extra is False:
                    raise DeclarationError("required names a property additionalProperties: false forbids",
                                           pointer=f"{where}/required", found=r)
                else:
                    props[r] = {} if extra is True else extra
        for name in list(props):
            matching = [sub for rx, sub in patterns if rx.search(name)]
            if matching:
                props[name] = {"allOf": [props[name], *matching]}
        lo, hi = schema.get("minProperties", 0), schema.get("maxProperties")
        for key, val in (("minProperties", lo), ("maxProperties", hi)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                raise DeclarationError(f"{key} must be a non-negative integer", pointer=f"{where}/{key}", found=val)
        if lo > len(props):
            raise UnsupportedKeyword("minProperties above the declared properties is not supported",
                                     pointer=f"{where}/minProperties", found=lo,
                                     hint="declare the properties a record must carry")
        for name in props:
            if len(required) >= lo:
                break
            if name not in required:
                required.append(name)
        if hi is not None:
            if len(required) > hi:
                raise DeclarationError("maxProperties is below the properties a record must carry",
                                       pointer=f"{where}/maxProperties", found={"maxProperties": hi,
                                                                                "required": required})
            keep = hi - len(required)
            for name in list(props):
                if name not in required:
                    if keep > 0:
                        keep -= 1
                    else:
                        del props[name]
        out = []
        for name, sub in props.items():
            req = name in required
            try:
                child = self.node(sub, f"{pointer}/{escape(name)}", f"{where}/properties/{escape(name)}",
                                  conditional or not req)
            except EmptySchema:
                if req:
                    raise
                continue  # an optional property no value satisfies: never written
            out.append(Property(name, child, req))
        return ObjectNode(pointer, out)

    def _patterns(self, schema: dict[str, Any], where: str) -> list[tuple[Any, Any]]:
        """``patternProperties`` as (compiled pattern, schema) pairs. A name is matched with Python's ``re`` in
        ASCII mode (ECMA 262's ``\\d``, ``\\w``); a pattern ``re`` does not compile is refused."""
        import re
        pats = schema.get("patternProperties", {})
        if not isinstance(pats, dict):
            raise DeclarationError("patternProperties must be an object", pointer=f"{where}/patternProperties",
                                   found=pats)
        out = []
        for pat, sub in pats.items():
            try:
                out.append((re.compile(pat, re.ASCII), sub))
            except re.error as e:
                raise UnsupportedKeyword(f"patternProperties pattern is not supported: {e}",
                                         pointer=f"{where}/patternProperties/{escape(pat)}", found=pat) from None
        return out

    def _dependent_schemas(self, schema: dict[str, Any], where: str) -> dict[str, Any]:
        """``dependentSchemas`` (and the schema form of ``dependencies``) for a declared property: the object is met
        with it always (a narrowing), or, where no object satisfies both, the property is left out."""
        for key in ("dependentSchemas", "dependencies"):
            deps = schema.get(key)
            if not isinstance(deps, dict):
                continue
            props = schema.get("properties", {})
            for name, sub in deps.items():
                if isinstance(sub, list) or not isinstance(props, dict) or name not in props:
                    continue  # a list: dependentRequired; an undeclared name is never written
                try:
                    got, _ = self._resolved(sub, f"{where}/{key}/{escape(name)}")
                except EmptySchema:  # `false`: the property may not be written
                    merged = None
                else:
                    merged = self._merge({k: v for k, v in schema.items() if k != key}, got,
                                         f"{where}/{key}/{escape(name)}")
                if merged is None or any(k in merged for k in ("anyOf", "oneOf", "allOf")) or merged.get(
                        "type", "object") != "object":
                    required = schema.get("required", [])
                    if isinstance(required, list) and name in required:
                        raise UnsupportedKeyword(f"{key} of a required property that does not merge with the object",
                                                 pointer=f"{where}/{key}/{escape(name)}", found=sub)
                    schema = {**schema, "properties": {n: v for n, v in props.items() if n != name}}
                else:
                    schema = {**merged, key: {n: v for n, v in deps.items() if n != name}}
                props = schema.get("properties", {})
        return schema

    def _array(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> ArrayNode:
        """An array: its prefix (``prefixItems``, or draft 7's list-valued ``items``), each index its own schema,
        then items of one schema (``items`` after ``prefixItems``, ``additionalItems`` after a list; ``false``:
        none), between ``minItems`` and ``maxItems``."""
        if any(k in schema for k in ("contains", "minContains", "maxContains")):
            schema = self._contains(schema, where)
        self._check_keys(schema, _ARRAY_KEYS, where)
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems")
        for key, val in (("minItems", lo), ("maxItems", hi)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                raise DeclarationError(f"{key} must be a non-negative integer", pointer=f"{where}/{key}", found=val)
        if hi is not None and hi < lo:
            raise DeclarationError("maxItems is below minItems", pointer=where, found={"minItems": lo, "maxItems": hi})
        items = schema.get("items", True)  # no `items`: items of any value
        prefix: list[Any] = []
        rest_key = "items"
        if "prefixItems" in schema:
            prefix, prefix_key = schema["prefixItems"], "prefixItems"
            if "additionalItems" in schema:  # not a 2020-12 keyword: beside prefixItems it constrains nothing
                self._ignore(where, "additionalItems", schema["additionalItems"])
        elif isinstance(items, list):  # draft 7 and earlier: a list of schemas is the prefix
            prefix, prefix_key = items, "items"
            items, rest_key = schema.get("additionalItems", True), "additionalItems"
        elif "additionalItems" in schema:  # beside a schema-valued (or absent) items it does nothing
            self._ignore(where, "additionalItems", schema["additionalItems"])
        if isinstance(hi, int) and hi > 10_000:
            raise UnsupportedKeyword("maxItems above 10000 is not supported", pointer=f"{where}/maxItems", found=hi)
        if len(prefix) > 10_000:
            raise UnsupportedKeyword("more than 10000 prefix items are not supported", pointer=f"{where}/prefixItems")
        heads: list[Node] = []  # the prefix's nodes, up to the first one no value satisfies
        for i, sub in enumerate(prefix[:hi] if hi is not None else prefix):
            saved = dict(self.fields), dict(self.free)
            try:
                heads.append(self.node(sub, f"{pointer}/{i}", f"{where}/{prefix_key}/{i}", conditional or i >= lo))
            except EmptySchema:
                if lo > i:
                    raise
                self.fields, self.free = saved
                hi = i  # no item satisfies index i: the array ends before it
                break
        if items is False or (hi is not None and hi <= len(heads)):
            hi = len(heads) if hi is None else min(hi, len(heads))
            items = {"type": "null"}  # a template no record uses
        elif items is True or items == {}:
            if self._any_depth >= ANY_DEPTH:  # any values nested this deep: the array is empty (narrowing)
                if lo:
                    raise UnsupportedKeyword(f"an array of any values nested more than {ANY_DEPTH} deep needs items",
                                             pointer=where, hint='give it "items"')
                hi = len(heads)
                items = {"type": "null"}
            else:
                items = {}
        if hi is not None and hi < lo:
            raise EmptySchema("minItems is above the items the array may have", pointer=where,
                              found={"minItems": lo, "items allowed": hi})
        # The template is laid out at "*" so that relations and layouts can name the item shape.
        saved = dict(self.fields), dict(self.free)
        try:
            template = self.node(items, f"{pointer}/*", f"{where}/{rest_key}", True)
        except EmptySchema:
            if lo > len(heads):
                raise
            self.fields, self.free = saved  # items no value satisfies: the array ends after its prefix
            template, hi, items = self.node({"type": "null"}, f"{pointer}/*", f"{where}/{rest_key}", True), \
                len(heads), {"type": "null"}
        self.fields, self.free = saved
        elements: list[Node] = []
        if hi is not None:
            elements = heads[:hi] + [self.node(items, f"{pointer}/{i}", f"{where}/{rest_key}", conditional or i >= lo)
                                     for i in range(len(heads), hi)]
        if schema.get("uniqueItems") is True and not (hi is not None and hi <= 1):
            self._unique(elements, lo, hi, conditional, where)
        elif schema.get("uniqueItems") is False:
            self._ignore(where, "uniqueItems", False)  # no constraint
        return ArrayNode(pointer, template, lo, hi, elements, heads[:hi] if hi is not None else heads)

    def _unique(self, elements: list[Node], lo: int, hi: int | None, conditional: bool, where: str) -> None:
        """``uniqueItems`` over an array of a fixed length whose items are finite-domain values: an all_different
        relation over them (where the items take fewer values than the length, no array is unique)."""
        leaves = [e.field for e in elements if isinstance(e, Leaf) and isinstance(e.field, Field)]
        if hi is None or lo != hi or conditional or len(leaves) != len(elements):
            raise UnsupportedKeyword("keyword 'uniqueItems' is supported over arrays of a fixed length (minItems == "
                                     "maxItems, always present) whose items are finite-domain values",
                                     pointer=f"{where}/uniqueItems", found=True,
                                     hint="it is then an all_different relation; otherwise drop it, or state the "
                                          "relation yourself")
        values = {jkey(v) for f in leaves for v in f.values}
        if len(values) < hi:
            raise EmptySchema(f"uniqueItems over {hi} items that take {len(values)} values admits no array",
                              pointer=f"{where}/uniqueItems")
        self.unique.append((f"{where}/uniqueItems", [f.pointer for f in leaves]))

    def _contains(self, schema: dict[str, Any], where: str) -> dict[str, Any]:
        """``contains`` (with ``minContains`` n, default 1) as n items after the prefix that satisfy it and the
        items schema both (narrowing: the matches come first; exact: every array written has n matches).
        ``maxContains`` is supported where ``maxItems`` already keeps it."""
        out = {k: v for k, v in schema.items() if k not in ("contains", "minContains", "maxContains")}
        if "contains" not in schema:  # minContains / maxContains without contains constrain nothing
            for k in ("minContains", "maxContains"):
                if k in schema:
                    self._ignore(where, k, schema[k])
            return out
        n, cap = schema.get("minContains", 1), schema.get("maxContains")
        for k, v in (("minContains", n), ("maxContains", cap)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise DeclarationError(f"{k} must be a non-negative integer", pointer=f"{where}/{k}", found=v)
        hi = schema.get("maxItems")
        if cap is not None and not (isinstance(hi, int) and cap >= hi):
            raise UnsupportedKeyword("keyword 'maxContains' below maxItems is not supported",
                                     pointer=f"{where}/maxContains", found=cap,
                                     hint="the matches would have to be counted among the other items")
        if cap is not None and n > cap:
            raise EmptySchema("minContains is above maxContains", pointer=where, found={"minContains": n,
                                                                                      "maxContains": cap})
        if n == 0:
            return out
        prefix, rest = _tuple_parts(schema)
        if prefix and (rest is False or isinstance(hi, int) and hi < len(prefix) + n):
            raise UnsupportedKeyword("contains beside prefix items that leave no room after them is not supported",
                                     pointer=f"{where}/contains", found=schema["contains"],
                                     hint="the match would have to be one of the prefix items")
        out.pop("additionalItems", None)
        match = {"allOf": [rest, schema["contains"]]}
        out["prefixItems"] = [*prefix, *[match] * n]
        out["items"] = rest
        out["minItems"] = max(schema.get("minItems", 0), len(prefix) + n)
        return out

    def _typed_union(self, schema: dict[str, Any], types: list[Any], pointer: str, where: str,
                     conditional: bool) -> Node:
        """A list of types (or an untyped schema: every type): one branch per type, each with the keywords of its
        type's vocabulary and every keyword that is not type-specific."""
        if not types or any(t not in JSON_TYPES for t in types):
            raise DeclarationError("type must list JSON types", pointer=f"{where}/type", found=types,
                                   hint=", ".join(JSON_TYPES))
        if len(set(types)) != len(types):
            raise DeclarationError("type lists a type twice", pointer=f"{where}/type", found=types)
        if "number" in types and "integer" in types:  # every integer is a number
            types = [t for t in types if t != "integer"]
        subs = []
        for t in types:
            vocab = _TYPE_VOCABULARY.get("number" if t == "integer" else t, frozenset())
            subs.append({**{k: v for k, v in schema.items() if k != "type" and (k in vocab or k not in _TYPE_SPECIFIC)},
                         "type": t})
        if len(subs) == 1:
            return self._node(subs[0], pointer, where, conditional)
        return UnionNode(pointer, [self._node(sub, pointer, where, True) for sub in subs])

    def _all_of(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> Node:
        """allOf: every part merged into one schema (keyword by keyword, :meth:`_merge`), then compiled."""
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            raise DeclarationError("allOf must be a non-empty list", pointer=f"{where}/allOf", found=parts)
        depth = len(self._ref_stack)
        try:
            merged: dict[str, Any] | None = {k: v for k, v in schema.items() if k != "allOf"}
            for k, part in enumerate(parts):
                opt, _ = self._resolve(part, f"{where}/allOf/{k}")
                merged = self._merge(merged, opt, f"{where}/allOf/{k}")  # type: ignore[arg-type]
                if merged is None:
                    raise EmptySchema("no value satisfies every part of allOf", pointer=f"{where}/allOf")
            return self._node(merged, pointer, where, conditional)
        finally:
            del self._ref_stack[depth:]

    def _merge(self, a: dict[str, Any], b: dict[str, Any], where: str) -> dict[str, Any] | None:
        """The schema both ``a`` and ``b`` describe (their ``allOf``), or ``None`` where no value satisfies both.
        Keywords on one side are taken; on both sides, the ones with a known meet are met (types intersected,
        bounds tightened, required and enum values joined and intersected, properties and items met as allOf);
        any other keyword on both sides with different values is refused."""
        tuple_keys = ("items", "prefixItems", "additionalItems")
        arrays = None
        if any("prefixItems" in x or isinstance(x.get("items"), list) for x in (a, b)):
            arrays = _met_items(a, b)  # each index under both sides' schemas for it
            a, b = ({k: v for k, v in x.items() if k not in tuple_keys} for x in (a, b))
        out = {k: v for k, v in a.items() if k not in ("$defs", "definitions")}
        if arrays is not None:
            out.update(arrays)
        for k, v in b.items():
            if k in ("$defs", "definitions"):
                continue
            if k not in out:
                out[k] = v
                continue
            u = out[k]
            if u == v or not (constrains(k, u) or constrains(k, v)):
                continue
            if k == "type":
                ta, tb = (x if isinstance(x, list) else [x] for x in (u, v))
                both = [t for t in ta if t in tb or (t == "integer" and "number" in tb)]
                both += [t for t in tb if t == "integer" and "number" in ta and t not in both]
                if not both:
                    return None
                out[k] = both if len(both) > 1 else both[0]
            elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties") and _numbers(u, v):
                out[k] = max(u, v)
            elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties") and _numbers(u, v):
                out[k] = min(u, v)
            elif k == "required" and isinstance(u, list) and isinstance(v, list):
                out[k] = list(dict.fromkeys([*u, *v]))
            elif k == "properties" and isinstance(u, dict) and isinstance(v, dict):
                out[k] = {**u, **{n: ({"allOf": [u[n], s]} if n in u else s) for n, s in v.items()}}
            elif k == "items" and isinstance(u, (dict, bool)) and isinstance(v, (dict, bool)):
                out[k] = {"allOf": [u, v]}
            elif k == "additionalProperties" and isinstance(u, bool) and isinstance(v, bool):
                out[k] = u and v
            elif k in ("enum", "const"):
                pass  # met below, with the other one
            else:
                raise UnsupportedKeyword(f"keyword {k!r} on both sides of allOf (or beside anyOf/oneOf) with "
                                         "different values is not supported", pointer=f"{where}/{escape(k)}",
                                         found=[u, v], hint="state it once")
        sets = [s for s in (a, b) if "enum" in s or "const" in s]
        if len(sets) == 2 or ("enum" in out and "const" in out):
            vals: list[Any] | None = None
            for s in (a, b):
                for key in ("const", "enum"):
                    if key in s:
                        got = [s["const"]] if key == "const" else s["enum"]
                        if not isinstance(got, list):
                            return out  # the enum's own check names what is wrong
                        vals = list(got) if vals is None else [x for x in vals if any(_same(x, y) for y in got)]
            out.pop("const", None)
            if not vals:
                return None
            out["enum"] = vals
        for side in (a, b):  # a side's additionalProperties binds the properties only the other side declares
            ap = side.get("additionalProperties", True)
            own = side.get("properties", {})
            if ap is True or not isinstance(own, dict) or not isinstance(ap, (bool, dict)):
                continue
            pats = self._patterns(side, where)

            def additional(n: str) -> bool:
                return n not in own and not any(rx.search(n) for rx, _ in pats)  # noqa: B023

            props = out.get("properties", {})
            if isinstance(props, dict):
                if ap is False:
                    out["properties"] = {n: s for n, s in props.items() if not additional(n)}
                else:
                    out["properties"] = {n: ({"allOf": [s, ap]} if additional(n) else s) for n, s in props.items()}
            req = out.get("required", [])
            if ap is False and isinstance(req, list) and any(isinstance(r, str) and additional(r) for r in req):
                return None
        return out

    def _kinds(self, schema: Any, where: str, depth: int = 0) -> frozenset[str]:
        """The JSON kinds (null, boolean, number, string, array, object) a schema's values may have (a superset)."""
        schema = self._sub(schema, where) if depth <= 16 else None
        if schema is None:
            return _ALL_KINDS
        vals = _values(schema)
        if vals is not None:
            return frozenset(_kind(v) for v in vals)
        typ = schema.get("type")
        kinds = _ALL_KINDS if typ is None else frozenset(
            "number" if t == "integer" else t for t in (typ if isinstance(typ, list) else [typ]))
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                kinds &= frozenset().union(*(self._kinds(o, where, depth + 1) for o in schema[key]))
        for part in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
            kinds &= self._kinds(part, where, depth + 1)
        return kinds

    def _resolved(self, schema: Any, where: str) -> tuple[dict[str, Any], str]:
        """:meth:`_resolve`, leaving the ``$ref`` stack as it was (for a look at a schema, not its compile)."""
        at = len(self._ref_stack)
        try:
            return self._resolve(schema, where)
        finally:
            del self._ref_stack[at:]

    def _sub(self, schema: Any, where: str) -> dict[str, Any] | None:
        """``schema`` resolved, or ``None`` where it does not resolve (the compile names what is wrong)."""
        try:
            return self._resolved(schema, where)[0]
        except DeclarationError:
            return None

    def _emitted_kinds(self, schema: dict[str, Any], where: str) -> frozenset[str]:
        """The kinds of the values the compiled layout of ``schema`` emits (a superset): its kinds, with an untyped
        schema that has ``properties`` (``items``) narrowed to objects (arrays), as :meth:`_node` compiles it."""
        if "type" not in schema and _values(schema) is None and not any(
                k in schema for k in ("anyOf", "oneOf", "allOf")):
            if "properties" in schema:
                return frozenset({"object"})
            if "items" in schema:
                return frozenset({"array"})
        return self._kinds(schema, where)

    def _excludes(self, a: dict[str, Any], b: dict[str, Any], where: str) -> bool:
        """Whether no value the compiled layout of ``a`` emits satisfies ``b`` (sound, incomplete): kinds apart,
        enums apart, or, for objects, a property ``b`` requires that ``a`` never writes, or one ``a`` always writes
        with a value ``b`` does not allow there. Failing those, ``a`` is narrowed (in place) where that makes it so:
        a property ``b`` requires that is optional in ``a`` is left out of ``a``; a property both declare with enums
        apart that is optional in ``a`` becomes required in ``a``. Narrowing is allowed: each record still holds."""
        emitted = self._emitted_kinds(a, where)
        if not emitted & self._kinds(b, where):
            return True
        va, vb = _values(a), _values(b)
        if va is not None and vb is not None:
            return not any(_same(x, y) for x in va for y in vb)
        if emitted != {"object"} or any(k in a for k in ("anyOf", "oneOf", "allOf")):
            return False
        pa, pb = a.get("properties", {}), b.get("properties", {})
        ra, rb = a.get("required", []), b.get("required", [])
        if not (isinstance(pa, dict) and isinstance(pb, dict) and isinstance(ra, list) and isinstance(rb, list)):
            return False
        dependents = {n for key in ("dependentRequired", "dependencies") if isinstance(a.get(key), dict)
                      for needs in a[key].values() if isinstance(needs, list) for n in needs}
        writes = set(pa) | {r for r in ra if isinstance(r, str)} | dependents  # _object declares required names
        if any(isinstance(r, str) and r not in writes for r in rb):  # a writes only the properties it declares
            return True

        def apart(n: str) -> bool:
            sa, sb = self._sub(pa[n], where), self._sub(pb[n], where)
            xa, xb = (None if x is None else _values(x) for x in (sa, sb))
            return xa is not None and xb is not None and not any(_same(x, y) for x in xa for y in xb)

        both = [n for n in pa if n in pb]
        if any(n in ra and apart(n) for n in both):
            return True
        drop = next((r for r in rb if isinstance(r, str) and r in pa and r not in ra and r not in dependents), None)
        if drop is not None:
            a["properties"] = {n: v for n, v in pa.items() if n != drop}
            return True
        tag = next((n for n in both if n not in ra and apart(n)), None)
        if tag is not None:
            a["required"] = [*ra, tag]
            return True
        return False

    def _union(self, schema: dict[str, Any], pointer: str, where: str, conditional: bool) -> UnionNode:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        if "anyOf" in schema and "oneOf" in schema:
            raise UnsupportedKeyword("anyOf beside oneOf is not supported", pointer=f"{where}/oneOf",
                                     hint="nest one inside an allOf part")
        options = schema[key]
        if not isinstance(options, list) or not options:
            raise DeclarationError(f"{key} must be a non-empty list", pointer=f"{where}/{key}", found=options)
        rest = {k: v for k, v in schema.items() if k not in (key, "$defs", "definitions")}
        for k in [k for k, v in rest.items() if not constrains(k, v) and k not in self._asserting]:
            self._ignore(where, k, rest.pop(k))
        try:
            resolved = [self._resolved(o, f"{where}/{key}/{k}") for k, o in enumerate(options)]
        except EmptySchema:  # a `false` branch: left out there
            return self._general_union(key, options, rest, pointer, where)
        if rest or not all(opt.get("type", "object" if "properties" in opt else None) == "object"
                           for opt, _ in resolved):
            return self._general_union(key, options, rest, pointer, where)
        tags: dict[str, list[Any]] = {}
        for opt, _ in resolved:
            props, req = opt.get("properties", {}), opt.get("required", [])
            if not isinstance(props, dict) or not isinstance(req, list):
                continue  # no tag here; the branch's own compile below names what is wrong
            for name, sub in props.items():
                sub_r, _ = self._resolved(sub, where)
                if name in req and ("const" in sub_r or len(sub_r.get("enum", [])) == 1):
                    tags.setdefault(name, []).append(sub_r["const"] if "const" in sub_r else sub_r["enum"][0])
        disc = next((n for n, vs in tags.items()
                     if len(vs) == len(options) and len({jkey(v) for v in vs}) == len(vs)), None)
        if disc is None:
            return self._general_union(key, options, rest, pointer, where)
        branches: list[Node] = []
        for k, option in enumerate(options):
            node = self.node(option, pointer, f"{where}/{key}/{k}", True)
            assert isinstance(node, ObjectNode)
            branches.append(node)
        # Branch fields share pointers (the last branch's wins in the lookup tables); all are conditional. The
        # discriminator's domain is every branch's tag.
        tag_ptr = f"{pointer}/{escape(disc)}"
        self.fields[tag_ptr] = Field(tag_ptr, tuple(tags[disc]), "enum", conditional=True)
        return UnionNode(pointer, branches, disc, tags[disc])

    def _general_union(self, key: str, options: list[Any], rest: dict[str, Any], pointer: str,
                       where: str) -> UnionNode:
        """anyOf / oneOf over any branches, the keywords beside it merged into each (``allOf`` distributes over
        ``anyOf``). ``oneOf`` compiles only where no value a branch emits satisfies another branch
        (:meth:`_excludes`, which may narrow a branch to make it so): its exclusivity is then kept exactly."""
        merged = []
        for k, o in enumerate(options):
            at = f"{where}/{key}/{k}"
            depth = len(self._ref_stack)
            try:
                opt, w = self._resolve(o, at)
            except EmptySchema:  # `false`: a branch no value takes (and under oneOf, one no value ever matches)
                del self._ref_stack[depth:]
                merged.append((None, at, []))
                continue
            m = self._merge(rest, opt, at) if rest else opt
            merged.append((m, w, list(self._ref_stack[depth:])))
            del self._ref_stack[depth:]
        if key == "oneOf":  # every value a branch emits must fail every other branch
            full = [m for m, _, _ in merged]  # what each branch means; ``merged`` becomes what each emits
            merged = [(None if m is None else dict(m), w, refs) for m, w, refs in merged]
            for i in range(len(merged)):
                for j in range(len(merged)):
                    a, b = merged[i][0], full[j]
                    if i != j and a is not None and b is not None and not self._excludes(a, b, where):
                        raise UnsupportedKeyword("oneOf branches that may both hold for one value are not "
                                                 "supported (their exclusivity would not be kept)",
                                                 pointer=f"{where}/oneOf", found=[i, j],
                                                 hint="make the branches disjoint (different types, or a required "
                                                      "const property), or use anyOf if overlap is fine")
        branches: list[Node] = []
        for m, w, refs in merged:
            if m is None:  # no value satisfies this branch beside its siblings
                continue
            depth = len(self._ref_stack)
            self._ref_stack.extend(refs)
            try:
                branches.append(self.node(m, pointer, w, True))
            except EmptySchema:
                continue  # a branch no value satisfies: nothing to write
            finally:
                del self._ref_stack[depth:]
        if not branches:
            raise EmptySchema(f"no branch of {key} can hold beside the keywords next to it", pointer=where)
        return UnionNode(pointer, branches)


def _tuple_parts(schema: dict[str, Any]) -> tuple[list[Any], Any]:
    """An array schema's prefix (``prefixItems``, or a list-valued ``items``) and the schema of the items after it."""
    if "prefixItems" in schema:
        return list(schema["prefixItems"]) if isinstance(schema["prefixItems"], list) else [], \
            schema.get("items", True)
    items = schema.get("items", True)
    if isinstance(items, list):
        return list(items), schema.get("additionalItems", True)
    return [], items


def _met_items(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """``prefixItems`` and ``items`` of the allOf of two array schemas: index i of the prefix under both sides'
    schemas for index i (a side's own prefix item, or its items after the prefix), the rest under both rests."""
    (pa, ra), (pb, rb) = _tuple_parts(a), _tuple_parts(b)
    n = max(len(pa), len(pb))
    prefix = [{"allOf": [pa[i] if i < len(pa) else ra, pb[i] if i < len(pb) else rb]} for i in range(n)]
    return {"prefixItems": prefix, "items": {"allOf": [ra, rb]}}


def _integers(schema: dict[str, Any], limit: int = 10_000) -> list[int] | None:
    """The values of an integer schema with finite bounds (at most ``limit`` of them), or ``None``."""
    if any(k in schema and not _numbers(schema[k]) for k in _INTEGER_KEYS - {"type"}):
        return None
    los = [_ceil(schema["minimum"])] if "minimum" in schema else []
    los += [_floor(schema["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in schema else []
    his = [_floor(schema["maximum"])] if "maximum" in schema else []
    his += [_ceil(schema["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in schema else []
    lo, hi = max(los, default=None), min(his, default=None)
    step = schema.get("multipleOf", 1)
    if lo is None or hi is None or hi - lo >= limit or not isinstance(step, int):
        return None
    return [v for v in range(lo, hi + 1) if v % step == 0]


def _numbers(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)


def _kind(v: Any) -> str:
    """The JSON kind of a value (integers are numbers)."""
    t = json_type(v)
    return {"integer": "number", "list": "array", "dict": "object"}.get(t, t)


def _same(x: Any, y: Any) -> bool:
    """JSON equality (``1 == 1.0``, ``1 != true``)."""
    if _kind(x) != _kind(y):
        return False
    if isinstance(x, list):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[n], y[n]) for n in x)
    return bool(x == y)


def _values(schema: dict[str, Any]) -> list[Any] | None:
    """The values a schema's ``const`` / ``enum`` allows (``None``: no such keyword)."""
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    return None


def _has_type(v: Any, typ: Any) -> bool:
    if isinstance(typ, list):
        return any(_has_type(v, t) for t in typ)
    actual = json_type(v)
    return actual == typ or (typ == "number" and actual == "integer")


def _floor(x: float) -> int:
    return int(x // 1)


def _ceil(x: float) -> int:
    return -int((-x) // 1)


#: the deepest nesting of JSON containers a declaration may have (the compiler recurses over it)
MAX_NESTING = 128
#: the largest minLength/maxLength/minItems/maxItems/minProperties/maxProperties read (2**31 - 1)
MAX_COUNT = 2**31 - 1

_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_STRING_KEYWORDS = ("pattern", "format", "$ref")
_LIST_KEYWORDS = ("enum", "anyOf", "oneOf", "allOf", "prefixItems")
_OBJECT_KEYWORDS = ("properties", "$defs", "definitions", "patternProperties", "dependentRequired")


def check_json(doc: Any, pointer: str = "#") -> None:
    """Refuse what is not JSON in a declaration document: NaN and Infinity (Python's ``json`` reads them), strings
    and names with lone surrogates (they have no UTF-8 form), keys that are not strings, nesting deeper than
    :data:`MAX_NESTING`. Iterative, so a document nested thousands deep fails here and not in the compiler."""
    stack: list[tuple[Any, str, int]] = [(doc, pointer, 0)]
    while stack:
        v, at, depth = stack.pop()
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise DeclarationError("NaN and Infinity are not JSON numbers", pointer=at, found=v,
                                       hint="give a finite number")
        elif isinstance(v, str):
            _check_text(v, at)
        elif isinstance(v, (dict, list)):
            if depth >= MAX_NESTING:
                raise DeclarationError(f"the declaration is nested deeper than {MAX_NESTING} levels", pointer=at,
                                       hint="flatten it")
            if isinstance(v, dict):
                for k, sub in v.items():
                    if not isinstance(k, str):
                        raise DeclarationError("object keys must be strings", pointer=at, found=k)
                    _check_text(k, at)
                    stack.append((sub, f"{at}/{escape(k)}", depth + 1))
            else:
                stack.extend((sub, f"{at}/{k}", depth + 1) for k, sub in enumerate(v))
        elif not (v is None or isinstance(v, (bool, int))):
            raise DeclarationError(f"a {type(v).__name__} is not a JSON value", pointer=at, found=v)


def _check_text(text: str, at: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DeclarationError("a string with a lone surrogate has no UTF-8 form", pointer=at,
                               found=text[max(0, e.start - 10):e.end + 10],
                               hint="surrogates come in pairs (\\ud83d\\ude00), or write the character itself"
                               ) from None


def _check_keyword_types(schema: dict[str, Any], where: str) -> None:
    """The value type of each keyword JSON Schema gives one to; a wrong type is a typed error, never read as
    something else (``"maximum": true`` is not 1)."""
    for key in ("$id", "$schema", "$anchor", "$dynamicAnchor", "$comment"):  # validators read these as strings
        if key in schema and not isinstance(schema[key], str):
            raise DeclarationError(f"{key} must be a string", pointer=f"{where}/{escape(key)}", found=schema[key])
    for key in _NUMBER_KEYWORDS:
        if key in schema:
            v = schema[key]
            if isinstance(v, bool) and key.startswith("exclusive"):
                raise UnsupportedKeyword(f"draft 4's boolean {key} is not supported", pointer=f"{where}/{key}",
                                         found=v, hint=f'write "{key}": <the bound> (draft 6 and later)')
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise DeclarationError(f"{key} must be a number", pointer=f"{where}/{key}", found=v)
            if key == "multipleOf" and v <= 0:
                raise DeclarationError("multipleOf must be above 0", pointer=f"{where}/{key}", found=v)
    for key in _COUNT_KEYWORDS:
        if key in schema:
            v = schema[key]
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise DeclarationError(f"{key} must be a non-negative integer", pointer=f"{where}/{key}", found=v)
            if v > MAX_COUNT:
                raise UnsupportedKeyword(f"{key} above {MAX_COUNT:,} is not supported", pointer=f"{where}/{key}",
                                         found=v, hint="leave it out: no string or array that long is written")
    if "uniqueItems" in schema and not isinstance(schema["uniqueItems"], bool):
        raise DeclarationError("uniqueItems must be a boolean", pointer=f"{where}/uniqueItems",
                               found=schema["uniqueItems"])
    for key in _STRING_KEYWORDS:
        if key in schema and not isinstance(schema[key], str):
            raise DeclarationError(f"{key} must be a string", pointer=f"{where}/{key}", found=schema[key])
    for key in _LIST_KEYWORDS:
        if key in schema and not isinstance(schema[key], list):
            raise DeclarationError(f"{key} must be a list", pointer=f"{where}/{key}", found=schema[key])
    for key in _OBJECT_KEYWORDS:
        if key in schema and not isinstance(schema[key], dict):
            raise DeclarationError(f"{key} must be an object", pointer=f"{where}/{key}", found=schema[key])
    typ = schema.get("type")
    if "type" in schema and typ is None:
        raise DeclarationError("type must be a type name or a list of them", pointer=f"{where}/type", found=typ,
                               hint='"null" (a string) is the type of null')
    if typ is not None and not isinstance(typ, str) and not (
            isinstance(typ, list) and all(isinstance(t, str) for t in typ)):
        raise DeclarationError("type must be a type name or a list of them", pointer=f"{where}/type", found=typ)


def compile_schema(doc: dict[str, Any], *, strict: bool = False) -> CompiledSchema:
    """Compile a JSON Schema document (the root of a declaration) into nodes and fields. Keywords that constrain
    nothing are ignored and listed on the result's ``ignored``; ``strict=True`` refuses them (see
    :data:`ASSERTIONS`)."""
    if not isinstance(doc, dict):
        raise DeclarationError("a declaration must be a JSON object (a JSON Schema)", pointer="#", found=doc)
    check_json(doc)
    c = _Compiler(doc, strict)
    root = c.node(doc, "", "#", False)
    return CompiledSchema(root, c.fields, c.free, c.nodes, list(c.ignored), c.unique)
