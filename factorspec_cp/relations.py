"""Relation kinds: dataclasses with a JSON form, a plain-Python check, and a backend-neutral encoding.

Every relation reads fields by JSON Pointer (templates with ``*``, ``{i}``, ``{i+1}``, ``{i-1}`` are instantiated
by :mod:`factorspec_cp.spec`). A relation encodes itself against an *encoding context* (see
:class:`factorspec_cp.encoders.base.Context`) that each backend implements: ``add_linear``, ``add_all_different``,
``add_table``, ``add_count``, ``add_any`` and ``when``. Custom kinds register with :func:`relation_kind`.

>>> r = AllDifferent("/plan/*/city")
>>> r.to_json()
{'kind': 'all_different', 'fields': ['/plan/*/city']}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Union

from .errors import MalformedRelation, TypeMismatch, UnknownRelationKind
from .schema import Field, jkey

if TYPE_CHECKING:
    from .encoders.base import Context

OPS = ("==", "!=", "<", "<=", ">", ">=")
LITERAL_OPS = OPS + ("in", "not in")
PathMap = Callable[[str, bool], list[str]]  # (path, many) -> concrete paths

_KINDS: dict[str, type[Relation]] = {}


def compare(a: Any, op: str, b: Any) -> bool:
    """``a op b`` with JSON equality (``true != 1``)."""
    if op == "==":
        return jkey(a) == jkey(b)
    if op == "!=":
        return jkey(a) != jkey(b)
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    if op == "in":
        return jkey(a) in {jkey(x) for x in b}
    if op == "not in":
        return jkey(a) not in {jkey(x) for x in b}
    raise ValueError(op)


def map_key(value: Any) -> str:
    """The JSON object key a mapped term uses for a field value: the string itself, else its JSON text."""
    return value if isinstance(value, str) else json.dumps(value)


def is_path(x: Any) -> bool:
    return isinstance(x, str) and x.startswith("/")


class Relation:
    """Base of every relation kind.

    Subclasses are dataclasses. ``path_fields`` names the dataclass fields holding paths (a string, or a list of
    strings where ``*`` may expand to many). Built-in kinds implement :meth:`encode` once for every backend; a
    custom kind implements :meth:`encode_cpsat` (required), :meth:`check` (required) and optionally
    :meth:`encode_sat`.
    """

    kind: ClassVar[str] = ""
    path_fields: ClassVar[tuple[str, ...]] = ()
    has_sat: ClassVar[bool] = True
    name: str | None

    # -- paths ------------------------------------------------------------------------------------------------------
    def map_paths(self, f: PathMap) -> Relation:
        """A copy with every path replaced by ``f(path, many)`` (one path where ``many`` is False)."""
        changes: dict[str, Any] = {}
        for fname in self.path_fields:
            val = getattr(self, fname)
            if isinstance(val, str):
                (changes[fname],) = f(val, False)
            else:
                changes[fname] = [q for p in val for q in f(p, True)]
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def paths(self) -> list[str]:
        """Every path this relation reads, in order."""
        out: list[str] = []
        self.map_paths(lambda p, many: (out.append(p), [p])[1])
        return out

    # -- semantics --------------------------------------------------------------------------------------------------
    def check(self, values: Mapping[str, Any]) -> bool:
        """Whether the relation holds, given a value for each of its (concrete) paths. Plain Python."""
        raise NotImplementedError(f"relation kind {self.kind!r} does not implement check()")

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        """Type checks on a concrete instance; raise :class:`TypeMismatch` or :class:`MalformedRelation`."""

    def encode(self, ctx: Context) -> None:
        raise NotImplementedError

    def encode_cpsat(self, ctx: Context) -> None:
        self.encode(ctx)

    def encode_sat(self, ctx: Context) -> None:
        self.encode(ctx)

    # -- JSON -------------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            val = getattr(self, f.name)
            if val is None and f.default is None:
                continue
            out[f.name] = _to_json_value(val)
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(doc) - names - {"kind"}
        if unknown:
            raise MalformedRelation(f"unknown key(s) for kind {cls.kind!r}", pointer=where, found=sorted(unknown),
                                    hint=f"keys of {cls.kind}: {', '.join(sorted(names))}")
        required = [f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in doc]
        if missing:
            raise MalformedRelation(f"missing key(s) for kind {cls.kind!r}", pointer=where, found=missing)
        return cls(**{k: v for k, v in doc.items() if k != "kind"})

    def label(self) -> str:
        return self.name or self.kind

    # -- display ----------------------------------------------------------------------------------------------------
    def math(self) -> str:
        """The relation written as math, e.g. ``/plan/{i+1}/first_day == /plan/{i}/last_day`` or
        ``all_different(/plan/*/city)``; a custom kind may override it (default: ``kind(paths..., key=value)``)."""
        from .display import relation_math
        return relation_math(self)


def _to_json_value(val: Any) -> Any:
    if isinstance(val, Relation):
        return val.to_json()
    if isinstance(val, (Term, Literal)):
        return val.to_json()
    if isinstance(val, (list, tuple)):
        return [_to_json_value(v) for v in val]
    if isinstance(val, dict):
        return {k: _to_json_value(v) for k, v in val.items()}
    return val


def relation_kind(name: str) -> Callable[[type], type]:
    """Register a custom relation kind under ``name`` (the class becomes a dataclass if it is not one).

    The class must implement ``check(values)`` and ``encode_cpsat(ctx)``; ``encode_sat(ctx)`` is optional (without
    it ``has_sat`` is False and sessions use CP-SAT). Set ``path_fields`` to the names of fields holding paths.
    """

    def register(cls: type) -> type:
        if not issubclass(cls, Relation):
            raise TypeError(f"{cls.__name__} must subclass factorspec_cp.Relation")
        if name in _KINDS and _KINDS[name] is not cls:
            raise ValueError(f"relation kind {name!r} is already registered by {_KINDS[name].__name__}")
        if not dataclasses.is_dataclass(cls):
            cls = dataclass(cls)
        cls.kind = name
        cls.has_sat = any("encode_sat" in c.__dict__ for c in cls.__mro__ if c is not Relation)
        _KINDS[name] = cls
        return cls

    return register


def relation_from_json(doc: Any, where: str) -> Relation:
    """Parse one relation from its JSON form; ``where`` is its JSON Pointer, used in errors."""
    if not isinstance(doc, dict):
        raise MalformedRelation("a relation must be an object with a `kind`", pointer=where, found=doc)
    kind = doc.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise UnknownRelationKind(f"unknown relation kind {kind!r}", pointer=f"{where}/kind", found=kind,
                                  hint=f"built-in kinds: {', '.join(k for k in _KINDS)}; register others with "
                                       "@factorspec_cp.relation_kind")
    return _KINDS[kind].from_json(doc, where)


def kinds() -> dict[str, type[Relation]]:
    return dict(_KINDS)


# -- pieces shared by several kinds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """``coef * value(path)``; with ``map``, ``coef * map[value(path)]`` (so string enums can take part)."""

    coef: int
    path: str
    map: dict[str, int] | None = None

    def to_json(self) -> list[Any]:
        return [self.coef, self.path] if self.map is None else [self.coef, self.path, dict(self.map)]

    @staticmethod
    def parse(doc: Any, where: str) -> Term:
        if isinstance(doc, Term):
            return doc
        if not isinstance(doc, (list, tuple)) or len(doc) not in (2, 3):
            raise MalformedRelation("a term is [coefficient, path] or [coefficient, path, {value: number}]",
                                    pointer=where, found=doc)
        coef, path = doc[0], doc[1]
        if isinstance(coef, bool) or not isinstance(coef, int):
            raise MalformedRelation("a coefficient must be an integer", pointer=f"{where}/0", found=coef,
                                    hint="scale the relation to integers")
        if not is_path(path):
            raise MalformedRelation("a term's path must be a JSON Pointer", pointer=f"{where}/1", found=path)
        mapping = doc[2] if len(doc) == 3 else None
        if mapping is not None:
            if not isinstance(mapping, dict) or any(isinstance(v, bool) or not isinstance(v, int)
                                                    for v in mapping.values()):
                raise MalformedRelation("a term's map must be {value: integer}", pointer=f"{where}/2", found=mapping)
        return Term(coef, path, mapping)

    def value(self, v: Any) -> int:
        return self.coef * (self.map[map_key(v)] if self.map is not None else int(v))

    def with_path(self, f: PathMap) -> list[Term]:
        return [Term(self.coef, p, self.map) for p in f(self.path, True)]

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        field = fields[self.path]
        if self.map is None:
            if not field.numeric:
                raise TypeMismatch(f"{self.path} has non-numeric values and cannot take part in arithmetic",
                                   pointer=where, found=[v for v in field.values if not isinstance(v, (int, bool))][:3],
                                   hint="compare it with ==/!= or a table, or give the term a map "
                                        "[coef, path, {value: number}]")
        else:
            missing = [v for v in field.values if map_key(v) not in self.map]
            if missing:
                raise TypeMismatch(f"the map of a term over {self.path} misses values of its domain",
                                   pointer=where, found=missing[:5], hint="map every value of the field")


def _parse_terms(doc: Any, where: str) -> list[Term]:
    if not isinstance(doc, (list, tuple)) or not doc:
        raise MalformedRelation("terms must be a non-empty list of [coefficient, path]", pointer=where, found=doc)
    return [Term.parse(t, f"{where}/{k}") for k, t in enumerate(doc)]


def _check_op(op: Any, where: str, allowed: Sequence[str] = OPS) -> None:
    if op not in allowed:
        raise MalformedRelation(f"unknown operator {op!r}", pointer=where, found=op,
                                hint=f"one of {', '.join(allowed)}")


def _check_int(x: Any, where: str) -> None:
    if isinstance(x, bool) or not isinstance(x, int):
        raise MalformedRelation("must be an integer", pointer=where, found=x, hint="scale the relation to integers")


def _paths_list(doc: Any, where: str) -> list[str]:
    if isinstance(doc, str):
        doc = [doc]
    if not isinstance(doc, (list, tuple)) or not doc or not all(is_path(p) for p in doc):
        raise MalformedRelation("fields must be a JSON Pointer or a non-empty list of them", pointer=where, found=doc)
    return list(doc)


@dataclass(frozen=True)
class Literal:
    """``value(field) op value``: the condition of an :class:`Implies`."""

    field: str
    op: str
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "op": self.op, "value": self.value}

    @staticmethod
    def parse(doc: Any, where: str) -> Literal:
        if isinstance(doc, Literal):
            return doc
        if not isinstance(doc, dict) or set(doc) != {"field", "op", "value"}:
            raise MalformedRelation('a literal is {"field": path, "op": op, "value": constant}', pointer=where,
                                    found=doc)
        if not is_path(doc["field"]):
            raise MalformedRelation("a literal's field must be a JSON Pointer", pointer=f"{where}/field",
                                    found=doc["field"])
        _check_op(doc["op"], f"{where}/op", LITERAL_OPS)
        if doc["op"] in ("in", "not in") and not isinstance(doc["value"], list):
            raise MalformedRelation(f"{doc['op']!r} takes a list value", pointer=f"{where}/value", found=doc["value"])
        return Literal(doc["field"], doc["op"], doc["value"])

    def holds(self, v: Any) -> bool:
        return compare(v, self.op, self.value)

    def allowed(self, field: Field) -> list[int]:
        """Indices of the field's values for which the literal holds."""
        return [k for k, v in enumerate(field.values) if self.holds(v)]

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        field = fields[self.field]
        if self.op in ("in", "not in"):
            for c in self.value:
                _check_comparable(field, "==", c, where, in_domain=False)
        else:
            _check_comparable(field, self.op, self.value, where)


def _check_comparable(field: Field, op: str, const: Any, where: str, in_domain: bool = True) -> None:
    if op in ("==", "!="):
        if isinstance(const, (dict, list)):
            raise TypeMismatch(f"cannot compare {field.pointer} with a structured value", pointer=where, found=const)
        if const not in field:
            types = {type(v).__name__ for v in field.values[:50]}
            if not any(json_type_compatible(v, const) for v in field.values[:50]):
                raise TypeMismatch(f"{field.pointer} holds {'/'.join(sorted(types))} values; cannot compare with "
                                   f"{const!r}", pointer=where, found=const)
            if not in_domain:
                return
            raise TypeMismatch(f"{const!r} is not in the domain of {field.pointer}", pointer=where, found=const,
                               hint=f"domain: {list(field.values[:10])}{' ...' if field.size > 10 else ''}")
        return
    if not field.numeric or isinstance(const, bool) or not isinstance(const, int):
        raise TypeMismatch(f"ordering {op!r} needs integer values on both sides", pointer=where,
                           found={"field": field.pointer, "value": const},
                           hint="use ==/!= for strings, or a mapped linear term")


def json_type_compatible(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return True
    return type(a) is type(b)


# -- built-in kinds -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllDifferent(Relation):
    """The fields take pairwise different values."""

    kind: ClassVar[str] = "all_different"
    path_fields: ClassVar[tuple[str, ...]] = ("fields",)
    fields: Union[str, list[str]]
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", _paths_list(self.fields, "fields"))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        if "fields" in doc:
            _paths_list(doc["fields"], f"{where}/fields")
        return super().from_json(doc, where)

    def check(self, values: Mapping[str, Any]) -> bool:
        keys = [jkey(values[p]) for p in self.fields]  # type: ignore[union-attr]
        return len(set(keys)) == len(keys)

    def encode(self, ctx: Context) -> None:
        ctx.add_all_different(list(self.fields))


@dataclass(frozen=True)
class Table(Relation):
    """The fields, read as a tuple, equal one of ``rows`` (``mode="forbid"``: none of them)."""

    kind: ClassVar[str] = "table"
    path_fields: ClassVar[tuple[str, ...]] = ("fields",)
    fields: list[str]
    rows: list[list[Any]]
    mode: str | None = None
    name: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        rel = super().from_json(doc, where)
        assert isinstance(rel, Table)
        _paths_list(rel.fields, f"{where}/fields")
        if rel.mode not in (None, "allow", "forbid"):
            raise MalformedRelation("mode is 'allow' or 'forbid'", pointer=f"{where}/mode", found=rel.mode)
        if not isinstance(rel.rows, list) or not all(isinstance(r, list) for r in rel.rows):
            raise MalformedRelation("rows must be a list of lists", pointer=f"{where}/rows", found=rel.rows)
        return rel

    @property
    def allow(self) -> bool:
        return self.mode != "forbid"

    def check(self, values: Mapping[str, Any]) -> bool:
        t = tuple(jkey(values[p]) for p in self.fields)
        hit = any(tuple(jkey(x) for x in row) == t for row in self.rows)
        return hit if self.allow else not hit

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        width = len(self.fields)
        for k, row in enumerate(self.rows):
            if len(row) != width:
                raise TypeMismatch(f"row has {len(row)} values for {width} fields", pointer=f"{where}/rows/{k}",
                                   found=row)
            for p, v in zip(self.fields, row):
                f = fields[p]
                if v not in f and not any(json_type_compatible(v, x) for x in f.values[:50]):
                    raise TypeMismatch(f"row value does not match the type of {p}", pointer=f"{where}/rows/{k}",
                                       found=v)

    def encode(self, ctx: Context) -> None:
        ctx.add_table(list(self.fields), [list(r) for r in self.rows], self.allow)


@dataclass(frozen=True)
class Linear(Relation):
    """``sum(coef * value) op rhs`` over integer/boolean fields (or mapped terms)."""

    kind: ClassVar[str] = "linear"
    terms: list[Any]
    op: str
    rhs: int
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", [Term.parse(t, "terms") for t in self.terms])

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        if "terms" in doc:
            _parse_terms(doc["terms"], f"{where}/terms")
        if "op" in doc:
            _check_op(doc["op"], f"{where}/op")
        if "rhs" in doc:
            _check_int(doc["rhs"], f"{where}/rhs")
        return super().from_json(doc, where)

    def map_paths(self, f: PathMap) -> Relation:
        return dataclasses.replace(self, terms=[u for t in self.terms for u in t.with_path(f)])

    def check(self, values: Mapping[str, Any]) -> bool:
        return compare(sum(t.value(values[t.path]) for t in self.terms), self.op, self.rhs)

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        for k, t in enumerate(self.terms):
            t.validate(fields, f"{where}/terms/{k}")

    def encode(self, ctx: Context) -> None:
        ctx.add_linear(list(self.terms), self.op, self.rhs)


@dataclass(frozen=True)
class Compare(Relation):
    """``left op right``; each side a path or a constant. Strings compare with ``==``/``!=`` only."""

    kind: ClassVar[str] = "compare"
    left: Any
    op: str
    right: Any
    name: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        rel = super().from_json(doc, where)
        assert isinstance(rel, Compare)
        _check_op(rel.op, f"{where}/op")
        if not is_path(rel.left) and not is_path(rel.right):
            raise MalformedRelation("compare needs a path on at least one side", pointer=where,
                                    found={"left": rel.left, "right": rel.right})
        return rel

    def map_paths(self, f: PathMap) -> Relation:
        left = f(self.left, False)[0] if is_path(self.left) else self.left
        right = f(self.right, False)[0] if is_path(self.right) else self.right
        return dataclasses.replace(self, left=left, right=right)

    def _side(self, x: Any, values: Mapping[str, Any]) -> Any:
        return values[x] if is_path(x) else x

    def check(self, values: Mapping[str, Any]) -> bool:
        return compare(self._side(self.left, values), self.op, self._side(self.right, values))

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        sides = [fields[x] if is_path(x) else x for x in (self.left, self.right)]
        if self.op in ("==", "!="):
            a, b = sides
            if isinstance(a, Field) and isinstance(b, Field):
                if not any(json_type_compatible(x, y) for x in a.values[:50] for y in b.values[:50]):
                    raise TypeMismatch(f"{a.pointer} and {b.pointer} hold values of different types", pointer=where)
            else:
                field, const = (a, b) if isinstance(a, Field) else (b, a)
                assert isinstance(field, Field)
                _check_comparable(field, self.op, const, where)
            return
        for s in sides:
            if isinstance(s, Field):
                if not s.numeric:
                    raise TypeMismatch(f"{s.pointer} is not numeric; {self.op!r} needs numbers", pointer=where,
                                       hint="use ==/!= or a table for strings")
            elif isinstance(s, bool) or not isinstance(s, int):
                raise TypeMismatch(f"constant {s!r} is not an integer", pointer=where)

    def numeric(self, fields: Mapping[str, Field]) -> bool:
        return all(fields[x].numeric if is_path(x) else (isinstance(x, int) and not isinstance(x, bool))
                   for x in (self.left, self.right))

    def encode(self, ctx: Context) -> None:
        if self.op not in ("==", "!=") and self.numeric(ctx.fields):
            terms, rhs = [], 0
            for sign, x in ((1, self.left), (-1, self.right)):
                if is_path(x):
                    terms.append(Term(sign, x))
                else:
                    rhs -= sign * x
            ctx.add_linear(terms, self.op, rhs)
            return
        allow = self.op == "=="
        if is_path(self.left) and is_path(self.right):
            a, b = ctx.fields[self.left], ctx.fields[self.right]
            common = [v for v in a.values if v in b]
            ctx.add_table([self.left, self.right], [[v, v] for v in common], allow)
        else:
            path, const = (self.left, self.right) if is_path(self.left) else (self.right, self.left)
            ctx.add_table([path], [[const]], allow)


@dataclass(frozen=True)
class Implies(Relation):
    """If every literal of ``if`` holds, ``then`` holds. JSON key ``if`` (Python attribute ``if_``)."""

    kind: ClassVar[str] = "implies"
    if_: Any
    then: Any
    name: str | None = None
    if_list: bool = dataclasses.field(default=False, repr=False)  # JSON form had a list under "if"

    def __post_init__(self) -> None:
        if isinstance(self.if_, list) and len(self.if_) != 1:
            object.__setattr__(self, "if_list", True)
        lits = self.if_ if isinstance(self.if_, list) else [self.if_]
        object.__setattr__(self, "if_", [Literal.parse(x, "if") for x in lits])
        if isinstance(self.then, dict):
            object.__setattr__(self, "then", relation_from_json(self.then, "then"))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        unknown = set(doc) - {"kind", "if", "then", "name"}
        if unknown or "if" not in doc or "then" not in doc:
            raise MalformedRelation('implies takes "if" (a literal or list of literals) and "then" (a relation)',
                                    pointer=where, found=sorted(unknown) or sorted(doc))
        cond = doc["if"]
        lits = cond if isinstance(cond, list) else [cond]
        if not lits:
            raise MalformedRelation("`if` needs at least one literal", pointer=f"{where}/if", found=cond)
        parsed = [Literal.parse(x, f"{where}/if" + (f"/{k}" if isinstance(cond, list) else ""))
                  for k, x in enumerate(lits)]
        then = relation_from_json(doc["then"], f"{where}/then")
        return cls(parsed, then, doc.get("name"), if_list=isinstance(cond, list))

    def to_json(self) -> dict[str, Any]:
        cond = [lit.to_json() for lit in self.if_]
        out: dict[str, Any] = {"kind": self.kind, "if": cond if self.if_list else cond[0],
                               "then": self.then.to_json()}
        if self.name is not None:
            out["name"] = self.name
        return out

    def map_paths(self, f: PathMap) -> Relation:
        lits = [Literal(f(lit.field, False)[0], lit.op, lit.value) for lit in self.if_]
        return dataclasses.replace(self, if_=lits, then=self.then.map_paths(f))

    def check(self, values: Mapping[str, Any]) -> bool:
        if all(lit.holds(values[lit.field]) for lit in self.if_):
            return self.then.check(values)
        return True

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        for k, lit in enumerate(self.if_):
            lit.validate(fields, f"{where}/if/{k}" if self.if_list else f"{where}/if")
        self.then.validate(fields, f"{where}/then")

    def encode(self, ctx: Context) -> None:
        ctx.when(list(self.if_)).post(self.then)

    @property
    def has_sat_encoding(self) -> bool:
        return self.then.has_sat


@dataclass(frozen=True)
class Any_(Relation):
    """At least one of ``relations`` holds (a disjunction)."""

    kind: ClassVar[str] = "any"
    relations: list[Any]
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "relations", [r if isinstance(r, Relation) else relation_from_json(r, "relations")
                                               for r in self.relations])

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        unknown = set(doc) - {"kind", "relations", "name"}
        rels = doc.get("relations")
        if unknown or not isinstance(rels, list) or not rels:
            raise MalformedRelation('any takes "relations": a non-empty list of relations', pointer=where, found=doc)
        return cls([relation_from_json(r, f"{where}/relations/{k}") for k, r in enumerate(rels)], doc.get("name"))

    def map_paths(self, f: PathMap) -> Relation:
        return dataclasses.replace(self, relations=[r.map_paths(f) for r in self.relations])

    def check(self, values: Mapping[str, Any]) -> bool:
        return any(r.check(values) for r in self.relations)

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        for k, r in enumerate(self.relations):
            r.validate(fields, f"{where}/relations/{k}")

    def encode(self, ctx: Context) -> None:
        ctx.add_any([lambda c, r=r: c.post(r) for r in self.relations])


@dataclass(frozen=True)
class Element(Relation):
    """``map[value(index)] == target``; ``target`` a path or ``{"terms": [...], "constant": c}``."""

    kind: ClassVar[str] = "element"
    index: str
    map: dict[str, int]
    target: Any
    name: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        rel = super().from_json(doc, where)
        assert isinstance(rel, Element)
        if not is_path(rel.index):
            raise MalformedRelation("index must be a JSON Pointer", pointer=f"{where}/index", found=rel.index)
        if not isinstance(rel.map, dict) or any(isinstance(v, bool) or not isinstance(v, int)
                                                for v in rel.map.values()):
            raise MalformedRelation("map must be {value: integer}", pointer=f"{where}/map", found=rel.map)
        t = rel.target
        if not is_path(t):
            if not isinstance(t, dict) or "terms" not in t or set(t) - {"terms", "constant"}:
                raise MalformedRelation('target is a path or {"terms": [...], "constant": c}',
                                        pointer=f"{where}/target", found=t)
            _parse_terms(t["terms"], f"{where}/target/terms")
            _check_int(t.get("constant", 0), f"{where}/target/constant")
        return rel

    def target_terms(self) -> tuple[list[Term], int]:
        if is_path(self.target):
            return [Term(1, self.target)], 0
        return [Term.parse(t, "target") for t in self.target["terms"]], int(self.target.get("constant", 0))

    def map_paths(self, f: PathMap) -> Relation:
        index = f(self.index, False)[0]
        if is_path(self.target):
            target: Any = f(self.target, False)[0]
        else:
            terms, const = self.target_terms()
            target = {"terms": [u.to_json() for t in terms for u in t.with_path(f)]}
            if "constant" in self.target:
                target["constant"] = const
        return dataclasses.replace(self, index=index, target=target)

    def check(self, values: Mapping[str, Any]) -> bool:
        key = map_key(values[self.index])
        if key not in self.map:
            return False
        terms, const = self.target_terms()
        return self.map[key] == sum(t.value(values[t.path]) for t in terms) + const

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        terms, _ = self.target_terms()
        for t in terms:
            t.validate(fields, f"{where}/target")
        index = fields[self.index]
        if not any(map_key(v) in self.map for v in index.values):
            raise TypeMismatch(f"no key of map is a value of {self.index}", pointer=f"{where}/map",
                               found=list(self.map)[:5], hint=f"domain: {list(index.values[:10])}")

    def encode(self, ctx: Context) -> None:
        index = ctx.fields[self.index]
        present = [v for v in index.values if map_key(v) in self.map]
        if len(present) < index.size:
            ctx.add_table([self.index], [[v] for v in present], True)
        terms, const = self.target_terms()
        for v in present:
            ctx.when([Literal(self.index, "==", v)]).add_linear(terms, "==", self.map[map_key(v)] - const)


@dataclass(frozen=True)
class NoOverlap(Relation):
    """Half-open intervals ``[start, end)`` given as path pairs are pairwise disjoint:
    ``end_i <= start_j or end_j <= start_i``."""

    kind: ClassVar[str] = "no_overlap"
    intervals: list[list[str]]
    name: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        rel = super().from_json(doc, where)
        assert isinstance(rel, NoOverlap)
        iv = rel.intervals
        if not isinstance(iv, list) or not all(isinstance(p, list) and len(p) == 2 and all(map(is_path, p))
                                               for p in iv):
            raise MalformedRelation("intervals is a list of [start path, end path] pairs",
                                    pointer=f"{where}/intervals", found=iv)
        return rel

    def map_paths(self, f: PathMap) -> Relation:
        out = []
        for s, e in self.intervals:
            ss, es = f(s, True), f(e, True)
            if len(ss) != len(es):
                raise MalformedRelation("start and end expand to different numbers of fields", found=[s, e])
            out.extend([a, b] for a, b in zip(ss, es))
        return dataclasses.replace(self, intervals=out)

    def pairs(self) -> list[tuple[int, int]]:
        n = len(self.intervals)
        return [(i, j) for i in range(n) for j in range(i + 1, n)]

    def check(self, values: Mapping[str, Any]) -> bool:
        iv = [(values[s], values[e]) for s, e in self.intervals]
        return all(iv[i][1] <= iv[j][0] or iv[j][1] <= iv[i][0] for i, j in self.pairs())

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        for s, e in self.intervals:
            for p in (s, e):
                Term(1, p).validate(fields, f"{where}/intervals")

    def encode(self, ctx: Context) -> None:
        for i, j in self.pairs():
            (si, ei), (sj, ej) = self.intervals[i], self.intervals[j]
            ctx.add_any([
                lambda c, ei=ei, sj=sj: c.add_linear([Term(1, ei), Term(-1, sj)], "<=", 0),
                lambda c, ej=ej, si=si: c.add_linear([Term(1, ej), Term(-1, si)], "<=", 0),
            ])


@dataclass(frozen=True)
class Count(Relation):
    """``#{f in fields : value(f) == value} op rhs``."""

    kind: ClassVar[str] = "count"
    path_fields: ClassVar[tuple[str, ...]] = ("fields",)
    fields: list[str]
    value: Any
    op: str
    rhs: int
    name: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Relation:
        rel = super().from_json(doc, where)
        assert isinstance(rel, Count)
        _paths_list(rel.fields, f"{where}/fields")
        _check_op(rel.op, f"{where}/op")
        _check_int(rel.rhs, f"{where}/rhs")
        return rel

    def check(self, values: Mapping[str, Any]) -> bool:
        n = sum(1 for p in self.fields if jkey(values[p]) == jkey(self.value))
        return compare(n, self.op, self.rhs)

    def validate(self, fields: Mapping[str, Field], where: str) -> None:
        if not any(self.value in fields[p] for p in self.fields):
            f = fields[self.fields[0]]
            _check_comparable(f, "==", self.value, f"{where}/value")

    def encode(self, ctx: Context) -> None:
        ctx.add_count(list(self.fields), self.value, self.op, self.rhs)


for _cls in (AllDifferent, Table, Linear, Compare, Implies, Any_, Element, NoOverlap, Count):
    _KINDS[_cls.kind] = _cls


def relation_has_sat(rel: Relation) -> bool:
    """Whether ``rel`` (and every relation nested in it) has a SAT encoding."""
    if isinstance(rel, Implies):
        return relation_has_sat(rel.then)
    if isinstance(rel, Any_):
        return all(relation_has_sat(r) for r in rel.relations)
    return type(rel).has_sat
