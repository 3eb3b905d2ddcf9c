"""Spec = JSON Schema + relations (+ objective): load, dump, instantiate path templates, check records.

>>> spec = Spec.from_json({"type": "object", "required": ["a", "b"], "additionalProperties": False,
...     "properties": {"a": {"enum": ["x", "y"]}, "b": {"enum": ["x", "y"]}},
...     "x-factorspec": {"relations": [{"kind": "all_different", "fields": ["/a", "/b"]}]}})
>>> s = spec.session()
>>> s.assign("/a", "x")
>>> s.admissible("/b")
['y']
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .errors import (
    CompileBudgetExceeded,
    DeclarationError,
    FreeFieldInRelation,
    MalformedRelation,
    NotAField,
    TableBudgetExceeded,
    UnboundedDomain,
    UnknownPath,
    UnsatisfiableDeclaration,
)
from .relations import (
    AllDifferent,
    Any_,
    Implies,
    Linear,
    Relation,
    Table,
    Term,
    _parse_terms,
    relation_from_json,
    relation_has_sat,
)
from .schema import (
    ArrayNode,
    Field,
    Leaf,
    Node,
    ObjectNode,
    UnionNode,
    check_json,
    compile_schema,
    escape,
    split_pointer,
)

if TYPE_CHECKING:
    from .graph import FactorGraph
    from .session import Session
    from .tokenmap.decoder import Decoder

DEFAULT_TABLE_BUDGET = 100_000
#: the most relation instances a declaration may have (templates instantiated at every {i}): NATURAL PLAN's largest
#: meeting declaration has 115; every session, encoding and repair table grows with the count
MAX_INSTANCES = 5_000
_TEMPLATE = re.compile(r"\{i([+-]\d+)?\}")
_INDEX = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_XKEYS = {"relations", "objective", "table_budget"}


@dataclass(frozen=True)
class Objective:
    """``minimize``/``maximize`` a linear expression; with ``require="optimal"`` only optimal records are admissible."""

    sense: str
    terms: list[Term]
    require: str = "optimal"

    def to_json(self) -> dict[str, Any]:
        return {self.sense: [t.to_json() for t in self.terms], "require": self.require}

    @staticmethod
    def from_json(doc: Any, where: str) -> Objective:
        if not isinstance(doc, dict):
            raise MalformedRelation("objective must be an object", pointer=where, found=doc)
        senses = [k for k in ("minimize", "maximize") if k in doc]
        unknown = set(doc) - {"minimize", "maximize", "require"}
        if len(senses) != 1 or unknown:
            raise MalformedRelation('objective takes one of "minimize"/"maximize" and "require"', pointer=where,
                                    found=sorted(doc))
        require = doc.get("require", "optimal")
        if require not in ("optimal", "any"):
            raise MalformedRelation("require is 'optimal' or 'any'", pointer=f"{where}/require", found=require)
        return Objective(senses[0], _parse_terms(doc[senses[0]], f"{where}/{senses[0]}"), require)


#: ``Instance.source`` of a relation the schema itself states (``uniqueItems``); the objective's is -1
SCHEMA_SOURCE = -2


@dataclass(eq=False)
class Instance:
    """One concrete relation: a template relation with its paths instantiated."""

    number: int  # position among all instances
    source: int  # index of the template in spec.relations; -1 for the objective
    relation: Relation
    where: str  # JSON Pointer of the template in the declaration
    i: int | None  # the {i} it was instantiated at
    scope: list[str]

    @property
    def label(self) -> str:
        name = f" '{self.relation.name}'" if self.relation.name else ""
        at = f" [i={self.i}]" if self.i is not None else ""
        what = {SCHEMA_SOURCE: "schema"}.get(self.source, "objective") if self.source < 0 else \
            f"relation {self.source}"
        return f"{what}{name} ({self.relation.kind}){at}"

    @property
    def math(self) -> str:
        """The instance written as math, with its instantiated paths (``/plan/1/first_day == /plan/0/last_day``)."""
        return self.relation.math()

    def describe(self) -> str:
        """``relation 4 'name' (linear) [i=0]: /plan/1/first_day == /plan/0/last_day``: what explanations and the
        command line print."""
        return f"{self.label}: {self.math}"


class Spec:
    """A declaration: a JSON Schema and relations among its fields. Build with :meth:`from_json` or directly.

    Parameters
    ----------
    schema
        The JSON Schema of the record (without ``x-factorspec``).
    relations
        Relation objects (templates allowed).
    objective
        Optional :class:`Objective`, or a list of them: lexicographic levels, each optimized with the ones before it
        held at their optima. ``objective`` (the attribute) is the first level, ``objectives`` all of them.
    table_budget
        Largest table (rows) accepted; ``None`` keeps the default (100,000) and is not written back.
    strict
        Refuse keywords that constrain nothing (annotations, vendor keys, unknown words); by default they are
        ignored and listed on ``ignored``. Keywords that constrain values are enforced exactly or refused, always.
    """

    def __init__(self, schema: Mapping[str, Any], relations: Sequence[Relation] = (), *,
                 objective: Objective | Sequence[Objective] | None = None, table_budget: int | None = None,
                 strict: bool = False):
        if not isinstance(schema, Mapping):
            raise DeclarationError("a declaration's schema must be a JSON object", pointer="#", found=schema,
                                   hint='boolean schemas have no layout; write {"type": ...}')
        check_json(dict(schema))  # before the deep copy: NaN, lone surrogates, nesting past the limit
        self.schema: dict[str, Any] = {k: copy.deepcopy(v) for k, v in schema.items() if k != "x-factorspec"}
        self.relations = list(relations)
        levels = [] if objective is None else [objective] if isinstance(objective, Objective) else list(objective)
        where = "#/x-factorspec/objective"
        if objective is not None and not levels:
            raise MalformedRelation("an objective list needs at least one level", pointer=where, found=[])
        for k, level in enumerate(levels):
            if not isinstance(level, Objective):
                raise MalformedRelation("objective levels must be Objective objects", pointer=f"{where}/{k}",
                                        found=level)
        if len({level.require for level in levels}) > 1:
            raise MalformedRelation("every objective level takes the same require", pointer=where,
                                    found=[level.require for level in levels])
        self.objectives: list[Objective] = levels
        self._as_list = objective is not None and not isinstance(objective, Objective)  # written back as given
        self.objective: Objective | None = levels[0] if levels else None
        self.table_budget = table_budget
        if table_budget is not None and (isinstance(table_budget, bool) or not isinstance(table_budget, int)
                                         or table_budget < 1):
            raise DeclarationError("table_budget must be a positive integer", pointer="#/x-factorspec/table_budget",
                                   found=table_budget)
        self.compiled = compile_schema(self.schema, strict=strict)
        #: the schema's keywords that constrain nothing, as (JSON Pointer of their schema, keyword): ignored (empty
        #: under ``strict=True``, which refuses them)
        self.ignored: list[tuple[str, str]] = list(self.compiled.ignored)
        #: every always-present finite-domain field, in record order
        self.fields: dict[str, Field] = {p: f for p, f in self.compiled.fields.items() if not f.conditional}
        self.instances: list[Instance] = []
        for k, rel in enumerate(self.relations):
            where = f"#/x-factorspec/relations/{k}"
            if not isinstance(rel, Relation):
                raise MalformedRelation("relations must be Relation objects", pointer=where, found=rel)
            relation_from_json(rel.to_json(), where)  # the JSON form's checks, for relations built in Python too
            self._instantiate(k, rel, where)
        for where, items in self.compiled.unique:  # uniqueItems: an all_different the schema itself states
            self._add_instance(SCHEMA_SOURCE, AllDifferent(items, name="uniqueItems"), where, None)
        self._level_terms: list[list[Term]] = []
        where = "#/x-factorspec/objective"
        for k, level in enumerate(levels):
            at = where if isinstance(objective, Objective) else f"{where}/{k}"
            terms = [u for t in level.terms for u in t.with_path(lambda p, many, at=at: self._expand(p, True, at))]
            for t in terms:
                t.validate(self.fields, at)
            self._level_terms.append(terms)
        self._check_magnitudes(objective)
        self._objective_terms: list[Term] = self._level_terms[0] if levels else []
        self._optima: list[int] | None = None
        self._encoded: dict[str, Any] = {}

    def _check_magnitudes(self, objective: Any) -> None:
        """Every integer a solver will see fits CP-SAT's 64-bit arithmetic (:class:`NumberOutOfRange` otherwise):
        domain values of the fields relations read, and every linear sum a relation or objective level can reach."""
        from .encoders.base import MAX_MAGNITUDE, MagnitudeCheck
        from .errors import NumberOutOfRange
        for p in self.scope_fields:
            f = self.fields[p]
            if f.numeric and f.size:
                vals = f.values
                big = max(abs(int(vals[0])), abs(int(vals[-1]))) if isinstance(vals, range) else max(
                    abs(int(v)) for v in vals)
                if big > MAX_MAGNITUDE:
                    at = next((i.where for i in self.instances if p in i.scope), "#/x-factorspec/objective")
                    raise NumberOutOfRange(f"{p}, read by this relation, has values past 2**62 (CP-SAT's 64-bit "
                                           "integers)", pointer=at, found=big, hint="narrow the field's bounds")
        for inst in self.instances:
            try:
                inst.relation.encode(MagnitudeCheck(self.fields, inst.where))
            except NotImplementedError:  # a custom kind that encodes itself for CP-SAT only
                pass
        for k, terms in enumerate(self._level_terms):
            at = "#/x-factorspec/objective" + ("" if not self._as_list else f"/{k}")
            MagnitudeCheck(self.fields, at).add_linear(terms, "<=", 0)

    # -- construction ----------------------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, strict: bool = False) -> Spec:
        """Build from the JSON form: a JSON Schema whose root may carry ``x-factorspec``. Keywords that constrain
        nothing (annotations such as ``title``, vendor keys, draft 4's ``id``, misspellings) are ignored and listed
        on ``ignored``; ``strict=True`` refuses them with :class:`UnsupportedKeyword`."""
        if not isinstance(doc, Mapping):
            raise DeclarationError("a declaration must be a JSON object", pointer="#", found=doc)
        x = doc.get("x-factorspec", {})
        check_json(x, "#/x-factorspec")  # the schema is checked by the constructor, before its deep copy
        if not isinstance(x, Mapping):
            raise DeclarationError("x-factorspec must be an object", pointer="#/x-factorspec", found=x)
        unknown = set(x) - _XKEYS
        if unknown:
            raise DeclarationError("unknown key(s) in x-factorspec", pointer="#/x-factorspec", found=sorted(unknown),
                                   hint=f"keys: {', '.join(sorted(_XKEYS))}")
        rels = x.get("relations", [])
        if not isinstance(rels, list):
            raise MalformedRelation("relations must be a list", pointer="#/x-factorspec/relations", found=rels)
        relations = [relation_from_json(r, f"#/x-factorspec/relations/{k}") for k, r in enumerate(rels)]
        objective: Objective | list[Objective] | None = None
        if "objective" in x:
            where = "#/x-factorspec/objective"
            if isinstance(x["objective"], list):  # lexicographic levels
                objective = [Objective.from_json(o, f"{where}/{k}") for k, o in enumerate(x["objective"])]
            else:
                objective = Objective.from_json(x["objective"], where)
        return cls(doc, relations, objective=objective, table_budget=x.get("table_budget"), strict=strict)

    def to_json(self) -> dict[str, Any]:
        """The JSON form; ``Spec.from_json(doc).to_json() == doc``."""
        doc = copy.deepcopy(self.schema)
        x: dict[str, Any] = {"relations": [r.to_json() for r in self.relations]}
        if self._as_list:
            x["objective"] = [o.to_json() for o in self.objectives]
        elif self.objectives:
            x["objective"] = self.objectives[0].to_json()
        if self.table_budget is not None:
            x["table_budget"] = self.table_budget
        doc["x-factorspec"] = x
        return doc

    @classmethod
    def from_pydantic(cls, model: Any, relations: Sequence[Relation] = (), *,
                      objective: Objective | Sequence[Objective] | None = None,
                      table_budget: int | None = None) -> Spec:
        """Build from a pydantic model class (its ``model_json_schema()``) and relations."""
        schema = model.model_json_schema()
        return cls(schema, relations, objective=objective, table_budget=table_budget)

    # -- paths -----------------------------------------------------------------------------------------------------
    def _expand(self, path: str, many: bool, where: str, strict: bool = True) -> list[str]:
        """Concrete field pointers named by ``path`` (``*`` expanded). Raise, or with ``strict=False`` return []
        when an index or property does not exist."""
        try:
            tokens = split_pointer(path)
        except ValueError:
            raise MalformedRelation("a path must be a JSON Pointer starting with '/'", pointer=where,
                                    found=path) from None
        current: list[tuple[str, Node]] = [("", self.compiled.root)]
        for tok in tokens:
            nxt: list[tuple[str, Node]] = []
            for ptr, node in current:
                if isinstance(node, ObjectNode):
                    prop = next((p for p in node.properties if p.name == tok), None)
                    if prop is None:
                        if not strict:
                            return []
                        raise UnknownPath(f"path {path!r} names nothing: {ptr or '/'} has no property {tok!r}",
                                          pointer=where, found=path, hint=self.compiled.suggest(f"{ptr}/{escape(tok)}")
                                          or f"properties: {', '.join(p.name for p in node.properties)}")
                    nxt.append((f"{ptr}/{escape(tok)}", prop.node))
                elif isinstance(node, ArrayNode):
                    if node.max_items is None or node.min_items != node.max_items:
                        raise NotAField(f"path {path!r} reads into the variable-length array {ptr}", pointer=where,
                                        found=path, hint="relations read only always-present fields: give the array "
                                                         "minItems == maxItems")
                    if not node.elements:
                        if not strict:
                            return []
                        raise UnknownPath(f"path {path!r} names nothing: the array {ptr} is always empty (its items "
                                          "admit no value)", pointer=where, found=path)
                    if tok == "*":
                        nxt.extend((f"{ptr}/{i}", el) for i, el in enumerate(node.elements))
                    elif _INDEX.fullmatch(tok) and int(tok) < len(node.elements):  # RFC 6901: 0 or [1-9][0-9]*
                        nxt.append((f"{ptr}/{tok}", node.elements[int(tok)]))
                    else:
                        if not strict:
                            return []
                        raise UnknownPath(f"path {path!r} names nothing: {ptr} has indices 0..{len(node.elements) - 1}",
                                          pointer=where, found=path,
                                          hint=None if _INDEX.fullmatch(tok) else "an index is written in ASCII digits "
                                          "without leading zeros (JSON Pointer)")
                elif isinstance(node, UnionNode):
                    raise NotAField(f"path {path!r} reads into the anyOf/oneOf at {ptr}", pointer=where, found=path,
                                    hint="relations read only always-present fields")
                else:
                    raise UnknownPath(f"path {path!r} continues past the field {ptr}", pointer=where, found=path)
            current = nxt
        out = []
        for ptr, node in current:
            if not isinstance(node, Leaf):
                raise NotAField(f"path {path!r} names {'an object' if isinstance(node, ObjectNode) else 'an array'}"
                                f" ({ptr or '/'}), not a field", pointer=where, found=path,
                                hint="name a leaf, e.g. " + (next(iter(self._leaves_under(ptr)), "") or "a field"))
            f = node.field
            if not isinstance(f, Field):
                if f.type in ("integer",):
                    raise UnboundedDomain(f"{ptr} has an unbounded (or too wide) integer domain", pointer=where,
                                          found=path, hint="give it minimum and maximum")
                raise FreeFieldInRelation(f"{ptr} is a free {f.type} field; relations may not read it",
                                          pointer=where, found=path, hint="give it an enum, or leave it out")
            if f.conditional:
                raise NotAField(f"{ptr} is not always present (optional property, variable-length array or union "
                                "branch)", pointer=where, found=path, hint="make it required / the array fixed-length")
            out.append(ptr)
        if not many and len(out) != 1:
            raise MalformedRelation(f"this place takes one field; {path!r} names {len(out)}", pointer=where,
                                    found=path)
        return out

    def _leaves_under(self, ptr: str) -> Iterator[str]:
        for p in self.compiled.fields:
            if p.startswith(ptr + "/"):
                yield p

    def _instantiate(self, source: int, rel: Relation, where: str) -> None:
        templ = rel.paths()
        doc = rel.to_json()

        def at(p: str) -> str:  # the JSON Pointer of the place holding template path p
            return where + _locate(doc, p)

        offsets = {int(m.group(1) or 0) for p in templ for m in _TEMPLATE.finditer(p)}
        if not offsets:
            concrete = rel.map_paths(lambda p, many: self._expand(p, many, at(p)))
            self._add_instance(source, concrete, where, None)
            return
        # Structural check: every template path must name something for some i.
        for p in templ:
            self._expand(_TEMPLATE.sub("*", p), True, at(p))
        limit = max((len(n.elements) for n in self.compiled.nodes.values() if isinstance(n, ArrayNode)), default=0)
        made = 0
        for i in range(limit):
            if any(i + o < 0 for o in offsets):
                continue

            def sub(p: str, i: int = i) -> str:
                return _TEMPLATE.sub(lambda m: str(i + int(m.group(1) or 0)), p)

            if not all(self._expand(sub(p), True, where, strict=False) for p in templ):
                continue
            concrete = rel.map_paths(lambda p, many: self._expand(sub(p), many, at(p)))
            self._add_instance(source, concrete, where, i)
            made += 1
        if made == 0:
            raise MalformedRelation("the path template instantiates for no i: no index has all of its paths",
                                    pointer=where, found=templ, hint="check the offsets ({i+1}, {i-1}) against the "
                                                                     "array lengths")

    def _add_instance(self, source: int, rel: Relation, where: str, i: int | None) -> None:
        rel.validate(self.fields, where)
        for t, inside in _tables(rel):
            budget = self.table_budget or DEFAULT_TABLE_BUDGET
            if len(t.rows) > budget:
                raise TableBudgetExceeded(f"table has {len(t.rows)} rows, over the table_budget of {budget}",
                                          pointer=where + inside, found=len(t.rows),
                                          hint='raise "table_budget" in x-factorspec, or express the table as '
                                               "linear/implies relations")
        scope = list(dict.fromkeys(rel.paths()))
        if len(self.instances) >= MAX_INSTANCES:
            raise CompileBudgetExceeded(f"the relations instantiate to more than {MAX_INSTANCES:,} instances",
                                        pointer=where, found=len(self.instances) + 1,
                                        hint="fewer array elements under {i} templates, or one relation over "
                                             "\"*\" (all_different, count) instead of one per element")
        self.instances.append(Instance(len(self.instances), source, rel, where, i, scope))

    # -- views -----------------------------------------------------------------------------------------------------
    @cached_property
    def scope_fields(self) -> list[str]:
        """Fields read by at least one relation (or the objective), in record order."""
        used = {p for inst in self.instances for p in inst.scope} | {t.path for ts in self._level_terms for t in ts}
        return [p for p in self.fields if p in used]

    @property
    def graph(self) -> FactorGraph:
        from .graph import FactorGraph
        return FactorGraph(self)

    @property
    def has_sat_encoding(self) -> bool:
        return all(relation_has_sat(inst.relation) for inst in self.instances)

    def optimum(self) -> int | None:
        """The optimal value of the (first) objective (CP-SAT), or None without an objective. Raises when
        unsatisfiable."""
        optima = self.optima()
        return optima[0] if optima else None

    def optima(self) -> list[int]:
        """The optimal value of each objective level in turn (CP-SAT): level ``k`` optimized with every level before
        it held at its optimum. Empty without an objective; raises when unsatisfiable."""
        if self._optima is None:
            from .encoders.cpsat import optimize
            out: list[int] = []
            for level, terms in zip(self.objectives, self._level_terms):
                value = optimize(self, terms, level.sense, held=list(zip(self._level_terms, out)))
                if value is None:
                    raise self.unsatisfiable()
                out.append(value)
            self._optima = out
        return self._optima

    @cached_property
    def active_instances(self) -> list[Instance]:
        """The instances sessions enforce: the relations, plus ``objective == optimum`` for each level under
        require=optimal (every backend enforces the same equalities, so optimality is exact everywhere)."""
        out = list(self.instances)
        if self.objective is not None and self.objective.require == "optimal":
            many = self._as_list
            for k, (level, terms, opt) in enumerate(zip(self.objectives, self._level_terms, self.optima())):
                name = f"{level.sense} (optimal = {opt})" if not many else f"level {k + 1}: {level.sense} " \
                                                                            f"(optimal = {opt})"
                rel = Linear(list(terms), "==", opt, name=name)
                scope = list(dict.fromkeys(t.path for t in terms))
                where = "#/x-factorspec/objective" + (f"/{k}" if many else "")
                out.append(Instance(len(out), -1, rel, where, None, scope))
        return out

    # -- solving ---------------------------------------------------------------------------------------------------
    def session(self, backend: str | None = None, *, time_limit: float | None = None) -> Session:
        """A new incremental session. ``backend``: "sat", "cpsat", "csp", or None for the default choice."""
        from .session import Session
        return Session(self, backend=backend, time_limit=time_limit)

    def decoder(self, vocab: Any, *, style: str | int = "compact", mode: str = "canonical",
                backend: str | None = None, session: Session | None = None) -> Decoder:
        """A token-level decoder for one record: exact masks, certain runs, rollback (see
        :class:`~factorspec_cp.tokenmap.decoder.Decoder`). ``vocab``: a :class:`~factorspec_cp.tokenmap.Vocabulary`
        (or anything :meth:`Vocabulary.from_tokenizer` takes)."""
        from .tokenmap import Vocabulary
        from .tokenmap.decoder import Decoder
        if not isinstance(vocab, Vocabulary):
            vocab = Vocabulary.from_tokenizer(vocab)
        return Decoder(self, vocab, style=style, mode=mode, session=session, backend=backend)

    def unsatisfiable(self) -> UnsatisfiableDeclaration:
        from .session import Session
        s = Session(self, backend="cpsat", _check=False, _relations=self.instances)
        return UnsatisfiableDeclaration("no record satisfies the declaration", pointer="#/x-factorspec",
                                        explanation=s.explain())

    def solutions(self, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Records satisfying the declaration, each once (SAT with blocking clauses where the declaration has a SAT
        encoding, else CP-SAT; free fields are left out of the records)."""
        from .encoders import cpsat, sat
        from .session import choose_backend
        use_sat = choose_backend(self, None, self.active_instances)[0] == "sat"
        for values in (sat if use_sat else cpsat).enumerate_solutions(self, limit):
            yield self.record(values)

    def record(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Build the record from field values (path -> JSON value); free and conditional parts are left out (an
        array keeps the elements it has values for; a record whose root is itself free is ``None``)."""
        out = _build(self.compiled.root, values)
        return None if out is _MISSING else out  # type: ignore[no-any-return]

    def check_record(self, record: Any) -> list[str]:
        """Violations of the schema (jsonschema) and of each relation instance; empty when the record is valid."""
        import jsonschema
        try:  # under the schema's own draft (draft 7's list-valued items, $ref beside keywords ignored)
            cls = jsonschema.validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
            errors = list(cls(self.schema).iter_errors(record))
        except (AttributeError, TypeError):  # a schema its own draft cannot read (draft 4 with "id": []): as 2020-12
            errors = list(jsonschema.Draft202012Validator(self.schema).iter_errors(record))
        problems = [f"schema: {e.message} at /{'/'.join(map(str, e.absolute_path))}" for e in errors]
        if problems:
            return problems
        values = {p: _get(record, p) for p in self.fields}
        for inst in self.active_instances:
            if not inst.relation.check(values):
                problems.append(f"violates {inst.describe()}")
        return problems

    # -- display ---------------------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"Spec({len(self.fields)} fields, {len(self.relations)} relations -> {len(self.instances)} "
                f"instances{', objective' if self.objective else ''})")

    def _repr_html_(self) -> str:
        from .display import spec_html
        return spec_html(self)


def _tables(rel: Relation, at: str = "") -> Iterator[tuple[Table, str]]:
    """Every table in ``rel`` (under ``implies`` / ``any`` too), with its JSON Pointer inside the relation."""
    if isinstance(rel, Table):
        yield rel, at
    elif isinstance(rel, Implies):
        yield from _tables(rel.then, f"{at}/then")
    elif isinstance(rel, Any_):
        for k, r in enumerate(rel.relations):
            yield from _tables(r, f"{at}/relations/{k}")


def _locate(doc: Any, target: str, at: str = "") -> str:
    """The JSON Pointer (relative to ``doc``) of the first string equal to ``target``; "" when absent."""
    if doc == target:
        return at
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        found = _locate(v, target, f"{at}/{escape(str(k))}")
        if found or v == target:
            return found
    return ""


def _get(record: Any, pointer: str) -> Any:
    cur = record
    for tok in split_pointer(pointer):
        cur = cur[int(tok)] if isinstance(cur, list) else cur[tok]
    return cur


def _build(node: Node, values: Mapping[str, Any]) -> Any:
    if isinstance(node, Leaf):
        return values.get(node.pointer, _MISSING)
    if isinstance(node, ObjectNode):
        out = {}
        for prop in node.properties:
            if not prop.required:
                continue
            v = _build(prop.node, values)
            if v is not _MISSING:
                out[prop.name] = v
        return out
    if isinstance(node, ArrayNode):
        return [v for v in (_build(el, values) for el in node.elements[:node.min_items]) if v is not _MISSING]
    return _MISSING


_MISSING: Any = object()
