"""BFCL single-call tool use: function docs -> declarations, BFCL's AST criterion in plain Python, gold records.

A record is one tool call::

    {"name": "hotel_booking", "arguments": {"hotel_name": "...", "start_date": "2022-06-01", ...}}

Problems come from the single-call categories of the Berkeley Function-Calling Leaderboard (``simple_python``,
``multiple``, ``live_simple``, ``live_multiple``; the parallel ones are out of scope). Each carries its id, the
user text, the function docs and BFCL's possible answers (for every argument a list of acceptable values; ``""``
in the list means the argument may be left out).

Declarations
    One function: ``{"name": {"const": f}, "arguments": {...}}``. Several functions: a ``oneOf`` of such
    branches, discriminated by the ``name`` const (our compiler supports exactly that form). Relations can only
    read always-present fields, and every field of a union branch is conditional, so **a union declaration
    carries no relations**. :func:`problems` therefore builds the declaration of a multi-function problem for the
    function of its gold answer (``problem.target``; this hands the decoder the gold's *function choice*, never
    its argument values; ``pin_gold_function=False`` keeps single-function problems only).

Parameter types (BFCL -> our JSON Schema subset): ``string`` -> string with ``maxLength`` :data:`MAX_STRING`
(or its ``enum``); ``integer`` -> integer, bounded where the doc states a range (``minimum``/``maximum`` keys, or
"between A and B" / "from A to B" in the description), else free; ``float`` -> number (free); ``boolean``;
``array``/``tuple`` -> array of the converted ``items`` with ``maxItems`` :data:`MAX_ITEMS` (an ``enum`` written on
the array itself is read as the items' enum); ``dict`` with ``properties`` -> object; ``any`` -> string (BFCL's
checker types ``any`` as ``str``). A ``dict`` without ``properties`` (a free-form map) or an array without
``items`` has no layout in our subset: the problem is skipped and counted (see :func:`selection_report`).

Relations (derived from the function doc only -- parameter names, types, enums and descriptions -- never from
the possible answers; every relation reads required parameters only, whose domains are finite):

``date_order``
    Two required string parameters whose names differ only by a start/end word pair (``start``/``end``,
    ``from``/``to``, ``check_in``/``check_out``, ``departure``/``return``, ``starting``/``ending``,
    ``begin``/``end``) and contain ``date``, and whose descriptions both state the same date format
    (``YYYY-MM-DD``, ``MM/DD/YYYY``, ``MM-DD-YYYY``, ``DD/MM/YYYY``, ``DD-MM-YYYY``, ``YYYY/MM/DD``; not a
    date-time). Both get the domain "every date of :data:`DATE_WINDOW` written in that format" and the end is on or
    after the start -- strictly after for check-in/check-out (a stay has at least one night). E.g.
    ``hotel_booking.start_date <= end_date``; ``hilton_hotel.check_availability.check_in_date < check_out_date``.
``number_order``
    Two required integer parameters paired the same way (plus ``min``/``max``, ``minimum``/``maximum``,
    ``lower``/``upper``, ``low``/``high``) with finite domains: ``end >= start``. A pair whose names contain
    ``year`` (and whose descriptions say "year") is a calendar-year pair and gets :data:`YEAR_RANGE` when the doc
    gives no range. E.g. ``history.get_key_events.end_year >= start_year``.
``differ``
    Two required enum parameters named ``source_X``/``target_X``, ``from_X``/``to_X`` or ``input_X``/``output_X``
    whose enums share values: they differ (converting or translating X into itself is no call at all). E.g.
    ``language_translator.translate.target_language != source_language``.
``calendar_day``
    Required integer parameters ``day`` and ``month`` (or ``X_day``/``X_month``) with the doc's ranges 1..31 and
    1..12: the day exists in that month (at most 30 in April, June, September, November; at most 29 in February,
    leap years allowed since the year is a free field). E.g. ``usage_api.UsageApi.get_hosts_per_day``.
``date_bound``
    A required string parameter whose description states one date format and says it "must/should be (a date)
    after/before/on or after/on or before/no earlier than/no later than D" with D written in that format: the
    date domain as above and the comparison with D. E.g. ``book_flight.departure_date after 14/03/2024``.

The date window and the year range are general choices, not fitted per problem: but they were chosen after
looking at the data (the gold dates of the selection fall in 2021-2024, the gold years in 300-2015), and a
probe over an 11,323-value date enum costs about 1 s of CP-SAT session time, so the window is not wider.

Checking: :func:`check` is BFCL's AST checker (``simple_function_checker`` with its ``type_checker``,
``string_checker``, ``list_checker``, ``dict_checker`` and ``list_dict_checker``) rewritten over our record form:
the function name equals the gold's; every required parameter is present; no argument outside the function's
parameters or the possible answer; each value has the documented type (an int is accepted for a float; a value
of the possible answer's type where the doc says otherwise is a "variable" and compared exactly); strings
compare after BFCL's ``standardize_string`` (lowercase, single quotes -> double quotes, and spaces and
``, . / - _ * ^`` removed), in lists element-wise and in dicts value-wise; other values compare with Python
``==``; a parameter the possible answer lists without ``""`` must be present. :func:`check_relations`
evaluates the derived rules in plain Python (dates parsed with :mod:`datetime`), independent of the solver.

>>> p = next(p for p in load("simple_python") if p.id == "simple_python_387")
>>> [r["name"] for r in derive(p.function("hotel_booking"))[1]]
['end_date on or after start_date']
>>> check(p, gold_records(p)[0]), check_relations(p, gold_records(p)[0])
([], [])
"""

from __future__ import annotations

import calendar
import copy
import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from factorspec_cp.workloads._data import data_dir

if TYPE_CHECKING:
    from factorspec_cp import Spec

__all__ = [
    "CATEGORIES", "DATE_WINDOW", "MAX_ITEMS", "MAX_STRING", "YEAR_RANGE",
    "BfclProblem", "Rule", "Unconvertible",
    "check", "check_relations", "convert_parameter", "date_bound", "date_format", "date_values", "declaration",
    "declaration_doc", "derive", "described_range", "gold_records", "load", "problems", "relations_of", "rules_of",
    "selection_report", "standardize_string",
]

#: The single-call categories this workload reads.
CATEGORIES = ("simple_python", "multiple", "live_simple", "live_multiple")
#: ``maxLength`` of a free string argument (the longest gold string in these categories has 224 characters).
MAX_STRING = 256
#: ``maxItems`` of an array argument.
MAX_ITEMS = 16
#: First and last date of a date domain (11,323 days; a wider enum makes each session probe slower).
DATE_WINDOW = (dt.date(2000, 1, 1), dt.date(2030, 12, 31))
#: Domain of a calendar-year integer whose doc gives no range (AD years up to 2100).
YEAR_RANGE = (1, 2100)

_PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                                  "tuple": list, "dict": dict, "any": str}


class Unconvertible(ValueError):
    """A function doc our JSON Schema subset cannot express; ``reason`` is the short, countable cause."""

    def __init__(self, reason: str, where: str):
        self.reason = reason
        self.where = where
        super().__init__(f"{where}: {reason}")


# ------------------------------------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class BfclProblem:
    """One BFCL single-call entry. ``target`` is the function the declaration is built for (None: all of them)."""

    id: str
    category: str
    question: str
    messages: tuple[dict[str, Any], ...]
    functions: tuple[dict[str, Any], ...]
    answers: tuple[dict[str, dict[str, list[Any]]], ...]
    target: str | None = None

    @property
    def gold_function(self) -> str:
        """The function name of the (single) gold call."""
        return next(iter(self.answers[0]))

    @property
    def possible(self) -> dict[str, list[Any]]:
        """The gold call's possible answer: argument -> list of acceptable values (``""``: may be left out)."""
        return self.answers[0][self.gold_function]

    def function(self, name: str) -> dict[str, Any]:
        """The doc of the function called ``name`` (``KeyError`` when the problem has none)."""
        for fn in self.functions:
            if fn["name"] == name:
                return fn
        raise KeyError(name)


def _read_jsonl(path: Any) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


@cache
def _load(category: str) -> tuple[BfclProblem, ...]:
    if category not in CATEGORIES:
        raise ValueError(f"unknown or out-of-scope category {category!r}; one of {', '.join(CATEGORIES)}")
    root = data_dir() / "bfcl"
    answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(root / "possible_answer" / f"BFCL_v4_{category}.json")}
    out = []
    for q in _read_jsonl(root / f"BFCL_v4_{category}.json"):
        truth = answers.get(q["id"])
        if truth is None or len(truth) != 1 or len(q["question"]) != 1:
            continue  # not a single call in a single turn
        messages = tuple(q["question"][0])
        text = "\n".join(m["content"] for m in messages if m.get("role") == "user")
        out.append(BfclProblem(q["id"], category, text, messages, tuple(q["function"]),
                               tuple(truth)))
    return tuple(out)


def load(category: str) -> list[BfclProblem]:
    """Every single-call problem of ``category`` with its possible answers (``target`` unset)."""
    return list(_load(category))


# ----------------------------------------------------------------------------------------------- type conversion

_RANGE = re.compile(r"\b(?:between|from)\s+(-?\d+)(?:\s*\([^)]*\))?\s+(?:and|to)\s+(-?\d+)(?:\s*\([^)]*\))?"
                    r"(?!\.?\d)", re.I)


def described_range(doc: Mapping[str, Any]) -> tuple[int, int] | None:
    """The integer range an integer parameter's doc states (``minimum``/``maximum``, or "between 1 and 5",
    "from 1 (January) to 12 (December)" in its description), else None."""
    lo, hi = doc.get("minimum"), doc.get("maximum")
    match = _RANGE.search(doc.get("description", "") or "")
    if match is not None:
        a, b = int(match[1]), int(match[2])
        if a <= b:
            lo = a if lo is None else max(lo, a)
            hi = b if hi is None else min(hi, b)
    if isinstance(lo, int) and isinstance(hi, int) and lo <= hi:
        return lo, hi
    return None


def convert_parameter(doc: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """The JSON Schema (our subset) of one BFCL parameter doc; :class:`Unconvertible` when it has none."""
    typ = doc.get("type")
    out: dict[str, Any] = {}
    if isinstance(doc.get("description"), str):
        out["description"] = doc["description"]
    if typ in ("array", "tuple"):
        items = doc.get("items")
        if not isinstance(items, dict) or "type" not in items:
            raise Unconvertible("array without items", where)
        items = dict(items)
        if "enum" in doc and "enum" not in items:
            items["enum"] = doc["enum"]  # BFCL writes the items' enum on the array
        return {**out, "type": "array", "items": convert_parameter(items, f"{where}/items"), "maxItems": MAX_ITEMS}
    if typ == "dict":
        props = doc.get("properties")
        if not isinstance(props, dict) or not props:
            raise Unconvertible("free-form dict (no properties)", where)
        required = [r for r in doc.get("required", []) if r in props]
        if len(required) != len(doc.get("required", [])):
            raise Unconvertible("required names an undeclared property", where)
        return {**out, "type": "object", "additionalProperties": False, "required": required,
                "properties": {k: convert_parameter(v, f"{where}/{k}") for k, v in props.items()}}
    json_type = {"string": "string", "any": "string", "integer": "integer", "float": "number",
                 "boolean": "boolean"}.get(typ)  # type: ignore[arg-type]
    if json_type is None:
        raise Unconvertible(f"unknown type {typ!r}", where)
    if "enum" in doc:
        return {**out, "type": json_type, "enum": list(doc["enum"])}
    if json_type == "string":
        return {**out, "type": "string", "maxLength": MAX_STRING}
    if json_type == "integer":
        bounds = described_range(doc)
        if bounds is not None:
            return {**out, "type": "integer", "minimum": bounds[0], "maximum": bounds[1]}
    return {**out, "type": json_type}


# ------------------------------------------------------------------------------------------------------ relations

_ORDER_PAIRS = (("checkin", "checkout"), ("start", "end"), ("starting", "ending"), ("begin", "end"),
                ("from", "to"), ("departure", "return"))
_NUMBER_PAIRS = _ORDER_PAIRS + (("minimum", "maximum"), ("min", "max"), ("lower", "upper"), ("low", "high"))
_DIFFER_PAIRS = (("source", "target"), ("from", "to"), ("input", "output"))
_DATE_FORMAT = re.compile(r"(?<![A-Za-z])(YYYY-MM-DD|MM/DD/YYYY|MM-DD-YYYY|DD/MM/YYYY|DD-MM-YYYY|YYYY/MM/DD)"
                          r"(?![A-Za-z])(\s*[T ]\s*HH)?", re.I)
_STRFTIME = {"YYYY": "%Y", "MM": "%m", "DD": "%d"}


@dataclass(frozen=True)
class Rule:
    """One derived relation, in a form :func:`check_relations` evaluates without the solver."""

    rule: str  # "date_order" | "date_bound" | "number_order" | "differ" | "calendar_day"
    params: tuple[str, ...]  # (first, second): start/end, source/target, day/month; (param,) for a bound
    op: str = ">="  # second op first; for a bound: param op bound
    date_format: str | None = None  # strftime format of the dates a date rule reads
    bound: str | None = None  # the constant date of a date_bound, in date_format
    name: str = ""


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _paired(a: str, b: str, pairs: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """The (first, second) word pair by which the names ``a`` and ``b`` differ, if any."""
    na, nb = _norm(a), _norm(b)
    for s, e in pairs:
        for k in range(len(na) - len(s) + 1):
            same_rest = nb[:k] == na[:k] and nb[k + len(e):] == na[k + len(s):]
            if na[k:k + len(s)] == s and nb[k:k + len(e)] == e and same_rest:
                return s, e
    return None


def date_format(description: str) -> str | None:
    """The strftime format of the one date format a description states (``"%Y-%m-%d"``); None when it states
    none, several, or a date-time (``YYYY-MM-DD HH:MM``, ``YYYY-MM-DDTHH:MM:SS``)."""
    matches = list(_DATE_FORMAT.finditer(description))
    found = {m[1].upper() for m in matches}
    if len(found) != 1 or any(m[2] for m in matches):
        return None
    fmt = found.pop()
    for token, code in _STRFTIME.items():
        fmt = fmt.replace(token, code)
    return fmt


_BOUND = re.compile(r"\b(?:must|should)\s+be\s+(?:a\s+date\s+)?(on or after|on or before|after|before|no earlier than|"
                    r"no later than)\s+'?([0-9][0-9/\-]+[0-9])'?", re.I)
_BOUND_OPS = {"after": ">", "before": "<", "on or after": ">=", "on or before": "<=", "no earlier than": ">=",
              "no later than": "<="}


def date_bound(description: str, fmt: str) -> tuple[str, str] | None:
    """(op, date) of a "must be after 14/03/2024" sentence whose date is written in ``fmt``, else None."""
    match = _BOUND.search(description)
    if match is None:
        return None
    try:
        dt.datetime.strptime(match[2], fmt)
    except ValueError:
        return None
    return _BOUND_OPS[match[1].lower()], match[2]


@cache
def date_values(fmt: str) -> tuple[tuple[str, ...], dict[str, int]]:
    """Every date of :data:`DATE_WINDOW` in ``fmt``, and the map date -> days since the window's first day."""
    first, last = DATE_WINDOW
    values = tuple((first + dt.timedelta(days=k)).strftime(fmt) for k in range((last - first).days + 1))
    return values, {v: k for k, v in enumerate(values)}


def _pointer(name: str) -> str:
    return "/arguments/" + name.replace("~", "~0").replace("/", "~1")


def _finite(schema: Mapping[str, Any]) -> bool:
    return "enum" in schema or schema.get("type") == "boolean" or (
        schema.get("type") == "integer" and "minimum" in schema and "maximum" in schema)


@dataclass
class _Derivation:
    """What :func:`derive` builds for one function doc."""

    docs: dict[str, Any]  # required parameter -> BFCL doc
    schemas: dict[str, Any]  # parameter -> converted schema
    relations: list[dict[str, Any]] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    defs: dict[str, Any] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def desc(self, k: str) -> str:
        return str(self.docs[k].get("description") or "")

    def dates(self, k: str, fmt: str) -> dict[str, int]:
        """Give ``k`` the date domain of ``fmt`` (a shared ``$defs`` entry); return the date -> day map."""
        values, ordinal = date_values(fmt)
        key = "date_" + re.sub(r"\W", "", fmt.replace("%", ""))
        self.defs[key] = {"type": "string", "enum": list(values)}
        self.schemas[k] = {"description": self.desc(k), "$ref": f"#/$defs/{key}"}
        return ordinal

    def add(self, relations: list[dict[str, Any]], rule: Rule) -> None:
        self.relations += relations
        self.rules.append(rule)
        self.used.update(rule.params)


def _date_order(d: _Derivation, a: str, b: str) -> bool:
    pair = _paired(a, b, _ORDER_PAIRS)
    if not pair or not all(d.docs[k].get("type") == "string" and "enum" not in d.docs[k] and "date" in _norm(k)
                           for k in (a, b)):
        return False
    fmt = date_format(d.desc(a))
    if fmt is None or fmt != date_format(d.desc(b)):
        return False
    ordinal = d.dates(a, fmt)
    d.dates(b, fmt)
    strict = pair == ("checkin", "checkout")
    name = f"{b} after {a}" if strict else f"{b} on or after {a}"
    d.add([{"kind": "linear", "name": name, "terms": [[1, _pointer(b), ordinal], [-1, _pointer(a), ordinal]],
            "op": ">=", "rhs": 1 if strict else 0}],
          Rule("date_order", (a, b), ">" if strict else ">=", fmt, None, name))
    return True


def _number_order(d: _Derivation, a: str, b: str) -> bool:
    if not _paired(a, b, _NUMBER_PAIRS) or not d.docs[a].get("type") == d.docs[b].get("type") == "integer":
        return False
    if all("year" in _norm(k) and "year" in d.desc(k).lower() for k in (a, b)):
        for k in (a, b):
            if not _finite(d.schemas[k]):
                d.schemas[k] = {"description": d.desc(k), "type": "integer", "minimum": YEAR_RANGE[0],
                                "maximum": YEAR_RANGE[1]}
    if not (_finite(d.schemas[a]) and _finite(d.schemas[b])):
        return False
    name = f"{b} >= {a}"
    d.add([{"kind": "compare", "name": name, "left": _pointer(b), "op": ">=", "right": _pointer(a)}],
          Rule("number_order", (a, b), ">=", name=name))
    return True


def _differ(d: _Derivation, a: str, b: str) -> bool:
    da, db = d.docs[a], d.docs[b]
    if not _paired(a, b, _DIFFER_PAIRS) or "enum" not in da or "enum" not in db or da.get("type") != db.get("type"):
        return False
    if not any(v in db["enum"] for v in da["enum"]):
        return False
    name = f"{b} differs from {a}"
    d.add([{"kind": "compare", "name": name, "left": _pointer(b), "op": "!=", "right": _pointer(a)}],
          Rule("differ", (a, b), "!=", name=name))
    return True


def _calendar_day(d: _Derivation, a: str, b: str) -> bool:
    na, nb = _norm(a), _norm(b)
    if not (na.endswith("day") and nb.endswith("month") and na[:-3] == nb[:-5]):
        return False
    if not (d.docs[a].get("type") == d.docs[b].get("type") == "integer"):
        return False
    if described_range(d.docs[a]) != (1, 31) or described_range(d.docs[b]) != (1, 12):
        return False
    pa, pb = _pointer(a), _pointer(b)
    d.add([{"kind": "implies", "name": f"{a} exists in a 30-day {b}",
            "if": {"field": pb, "op": "in", "value": [4, 6, 9, 11]},
            "then": {"kind": "compare", "left": pa, "op": "<=", "right": 30}},
           {"kind": "implies", "name": f"{a} exists in February", "if": {"field": pb, "op": "==", "value": 2},
            "then": {"kind": "compare", "left": pa, "op": "<=", "right": 29}}],
          Rule("calendar_day", (a, b), "<=", name=f"{a} exists in {b}"))
    return True


def _date_bound(d: _Derivation, a: str) -> None:
    if d.docs[a].get("type") != "string" or "enum" in d.docs[a]:
        return
    fmt = date_format(d.desc(a))
    found = date_bound(d.desc(a), fmt) if fmt is not None else None
    if fmt is None or found is None:
        return
    op, bound = found
    ordinal = d.dates(a, fmt)
    if bound not in ordinal:
        return
    name = f"{a} {({'>': 'after', '<': 'before', '>=': 'on or after', '<=': 'on or before'})[op]} {bound}"
    d.relations.append({"kind": "linear", "name": name, "terms": [[1, _pointer(a), ordinal]], "op": op,
                        "rhs": ordinal[bound]})
    d.rules.append(Rule("date_bound", (a,), op, fmt, bound, name))


def derive(fn: Mapping[str, Any], *, relations: bool = True
           ) -> tuple[dict[str, Any], list[dict[str, Any]], list[Rule], dict[str, Any]]:
    """The arguments schema of a function doc, its derived relations (JSON), their :class:`Rule` forms and the
    ``$defs`` they need. With ``relations=False``: the plain conversion, no relations and no domains for them.
    Raises :class:`Unconvertible`."""
    params = fn.get("parameters") or {}
    if params.get("type", "dict") != "dict":
        raise Unconvertible(f"parameters of type {params.get('type')!r}", fn["name"])
    props: dict[str, Any] = params.get("properties") or {}
    required = list(params.get("required") or [])
    if any(r not in props for r in required):
        raise Unconvertible("required names an undeclared parameter", fn["name"])
    d = _Derivation({k: props[k] for k in required},
                    {k: convert_parameter(v, f"{fn['name']}/{k}") for k, v in props.items()})
    if relations:
        for a in required:
            for b in required:
                if a != b and a not in d.used and b not in d.used:
                    _ = _date_order(d, a, b) or _number_order(d, a, b) or _differ(d, a, b) or _calendar_day(d, a, b)
        for a in required:
            _date_bound(d, a)
    arguments = {"type": "object", "additionalProperties": False, "required": required, "properties": d.schemas}
    return arguments, d.relations, d.rules, d.defs


# --------------------------------------------------------------------------------------------------- declarations


def _branch(fn: Mapping[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                           "properties": {"name": {"const": fn["name"]}, "arguments": arguments}}
    if isinstance(fn.get("description"), str):
        out["description"] = fn["description"]
    return out


def declaration_doc(problem: BfclProblem, function: str | None = None) -> dict[str, Any]:
    """The JSON declaration for ``function`` (default: ``problem.target``, else every function of the problem:
    one branch, or a ``oneOf`` union without relations). Raises :class:`Unconvertible`."""
    name = function or problem.target
    fns = [problem.function(name)] if name is not None else list(problem.functions)
    if len(fns) == 1:
        arguments, relations, _, defs = derive(fns[0])
        doc = _branch(fns[0], arguments)
        if defs:
            doc["$defs"] = defs
        doc["x-factorspec"] = {"relations": relations}
        return doc
    # a union's fields are all conditional: no relation can read them, so no relation domains either
    branches = [_branch(fn, derive(fn, relations=False)[0]) for fn in fns]
    return {"oneOf": branches, "x-factorspec": {"relations": []}}


def declaration(problem: BfclProblem, function: str | None = None) -> Spec:
    """The compiled declaration of :func:`declaration_doc`."""
    from factorspec_cp import Spec

    return Spec.from_json(declaration_doc(problem, function))


def rules_of(problem: BfclProblem, function: str | None = None) -> list[Rule]:
    """The derived rules the declaration of ``function`` (default: the target) enforces ([] for a union)."""
    name = function or problem.target or (problem.functions[0]["name"] if len(problem.functions) == 1 else None)
    return [] if name is None else derive(problem.function(name))[2]


def relations_of(problem: BfclProblem, function: str | None = None) -> list[dict[str, Any]]:
    """The relations (JSON, with names) of the declaration, with the date maps left out, for reports."""
    doc = declaration_doc(problem, function)
    out = []
    for rel in doc["x-factorspec"]["relations"]:
        rel = copy.deepcopy(rel)
        for term in rel.get("terms", []):
            del term[2:]
        out.append(rel)
    return out


# --------------------------------------------------------------------------------------------------------- checker


def standardize_string(text: str) -> str:
    """BFCL's ``standardize_string``: drop spaces and ``, . / - _ * ^``, lowercase, ``'`` -> ``"``."""
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')


def _answer_type(possible: Sequence[Any]) -> type | None:
    for answer in possible:
        if answer != "":
            return type(answer)
    return None


def _type_ok(value: Any, possible: Sequence[Any], expected: type, nested: type | None) -> tuple[bool, bool]:
    """BFCL's ``type_checker``: (valid, is_variable)."""
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type != expected
    if type(value) is expected:
        if nested is None:
            return True, is_variable
        for item in possible:  # an answer that is not a list passes the nested check, as in BFCL
            if type(item) is not list or all(_type_ok(v, item, nested, None)[0] for v in value):
                return True, is_variable
        return False, False  # BFCL returns its failed nested result even where the variable case matches
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, False


def _std(value: Any) -> Any:
    return standardize_string(value) if type(value) is str else value


def _dict_ok(value: dict[str, Any], possible: Sequence[Any]) -> bool:
    for answer in possible:
        if answer == "":
            continue
        if all(key in answer and _std(v) in [_std(a) for a in answer[key]] for key, v in value.items()) and \
                all(key in value or "" in options for key, options in answer.items()):
            return True
    return False


def _list_dict_ok(value: list[Any], possible: Sequence[Any]) -> bool:
    for answer in possible:
        if isinstance(answer, (list, str)) and len(answer) == len(value) and \
                all(isinstance(v, dict) and _dict_ok(v, [a]) for v, a in zip(value, answer)):
            return True
    return False


def check(problem: BfclProblem, record: Any) -> list[str]:
    """Violations of BFCL's AST criterion (empty when the call is correct); see the module doc."""
    if not isinstance(record, dict) or set(record) != {"name", "arguments"}:
        return ['record must be {"name": ..., "arguments": {...}}']
    name, args = record["name"], record["arguments"]
    if not isinstance(args, dict):
        return ["arguments must be an object"]
    gold = problem.gold_function
    if name != gold:
        return [f"wrong function {name!r}, expected {gold!r}"]
    try:
        fn = problem.function(gold)
    except KeyError:
        return [f"the gold function {gold!r} is not among the problem's functions"]
    params = (fn.get("parameters") or {}).get("properties") or {}
    required = (fn.get("parameters") or {}).get("required") or []
    possible = problem.possible
    problems = [f"missing required argument {p!r}" for p in required if p not in args]
    for param, value in args.items():
        if param not in params or param not in possible:
            problems.append(f"unexpected argument {param!r}")
            continue
        doc, options = params[param], possible[param]
        typ = doc.get("type")
        expected = _PYTHON_TYPES.get(typ, object)
        nested = None
        if typ in ("array", "tuple"):
            nested = _PYTHON_TYPES.get((doc.get("items") or {}).get("type"), object)
        if typ == "float" and type(value) is int:
            value = float(value)
        valid, variable = _type_ok(value, options, expected, nested)
        if not valid:
            problems.append(f"{param}: wrong type {type(value).__name__}, expected {typ}")
            continue
        if not variable:
            if expected is dict:
                ok = _dict_ok(value, options)
            elif expected is list and nested is dict:
                ok = _list_dict_ok(value, options)
            elif expected is str:
                ok = _std(value) in [_std(o) for o in options if type(o) is str]
            elif expected is list:
                ok = [_std(v) for v in value] in [[_std(x) for x in o] for o in options if isinstance(o, (list, str))]
            else:
                ok = value in options
        else:
            ok = value in options
        if not ok:
            problems.append(f"{param}: {value!r} is not among the possible answers {options!r}")
    for param, options in possible.items():
        if param not in args and "" not in options and param not in required:
            problems.append(f"argument {param!r} is required by the possible answer")
    return problems


def check_relations(problem: BfclProblem, record: Any, function: str | None = None) -> list[str]:
    """Violations of the derived rules of the declaration (plain Python, no solver): dates are parsed with
    :mod:`datetime` in the doc's format, years and numbers compared as integers."""
    name = function or problem.target or (problem.functions[0]["name"] if len(problem.functions) == 1 else None)
    if name is None or not isinstance(record, dict) or record.get("name") != name:
        return [] if name is None else [f"record is not a call of {name!r}"]
    args = record.get("arguments") or {}
    out = []
    for rule in rules_of(problem, name):
        missing = [k for k in rule.params if k not in args]
        if missing:
            out.append(f"{rule.name}: {', '.join(missing)} must be present")
            continue
        values = [args[k] for k in rule.params]
        try:
            ok = _holds(rule, values)
        except (TypeError, ValueError) as error:
            out.append(f"{rule.name}: cannot read {values!r} ({error})")
            continue
        if not ok:
            out.append(f"violates {rule.name}: " + ", ".join(f"{k}={v!r}" for k, v in zip(rule.params, values)))
    return out


def _holds(rule: Rule, values: list[Any]) -> bool:
    """Whether a derived rule holds on its parameters' values (plain Python; raises on unreadable values)."""
    if rule.rule in ("date_order", "date_bound"):
        assert rule.date_format is not None
        days = [dt.datetime.strptime(v, rule.date_format).date() for v in values]
        if not all(DATE_WINDOW[0] <= d <= DATE_WINDOW[1] for d in days):
            raise ValueError(f"dates outside {DATE_WINDOW[0]}..{DATE_WINDOW[1]}")
        if rule.rule == "date_bound":
            assert rule.bound is not None
            first, second = days[0], dt.datetime.strptime(rule.bound, rule.date_format).date()
            op = rule.op
        else:
            first, second, op = days[1], days[0], rule.op
        return {">": first > second, ">=": first >= second, "<": first < second, "<=": first <= second}[op]
    if rule.rule == "number_order":
        return type(values[1]) is int and type(values[0]) is int and values[1] >= values[0]
    if rule.rule == "differ":
        return bool(values[1] != values[0])
    day, month = values  # calendar_day: leap years allowed
    return type(day) is int and type(month) is int and 1 <= month <= 12 and \
        1 <= day <= calendar.monthrange(2000, month)[1]


# ----------------------------------------------------------------------------------------------------------- gold


def _admits(schema: Mapping[str, Any], defs: Mapping[str, Any], value: Any) -> bool:
    import jsonschema

    doc = {**schema, "$defs": dict(defs)} if defs else dict(schema)
    return jsonschema.Draft202012Validator(doc).is_valid(value)


def _realize(doc: Mapping[str, Any], option: Any) -> Any:
    """One acceptable value of a parameter from one entry of its possible-answer list: a dict entry maps each key
    to its own list of options (a key whose list is only ``""`` is left out; one level deep, as BFCL's
    ``dict_checker``), a list of dicts is realized element by element; everything else is the value itself."""
    typ = doc.get("type")
    if typ == "dict" and isinstance(option, dict):
        return {k: next(v for v in opts if v != "") for k, opts in option.items() if any(v != "" for v in opts)}
    if typ in ("array", "tuple") and (doc.get("items") or {}).get("type") == "dict" and isinstance(option, list):
        return [_realize(doc["items"], item) for item in option]
    return option


def _choices(doc: Mapping[str, Any], options: Sequence[Any], schema: Mapping[str, Any] | None,
             defs: Mapping[str, Any]) -> list[Any]:
    """The realized acceptable values of a parameter, those the converted schema admits first (a value equal under
    BFCL's string standardization to an enum member is replaced by that member)."""
    values = [_realize(doc, v) for v in options if v != ""]
    if schema is None:
        return values
    enum = schema.get("enum") or (schema.get("items") or {}).get("enum") or []
    by_std = {standardize_string(e): e for e in enum if isinstance(e, str)}

    def snap(v: Any) -> Any:
        if isinstance(v, str) and standardize_string(v) in by_std:
            return by_std[standardize_string(v)]
        if isinstance(v, list) and v and all(isinstance(x, str) and standardize_string(x) in by_std for x in v):
            return [by_std[standardize_string(x)] for x in v]
        return v

    admitted = [v for v in values if _admits(schema, defs, v)]
    snapped = [snap(v) for v in values if snap(v) is not v and _admits(schema, defs, snap(v))]
    return admitted + [v for v in snapped if v not in admitted] + [v for v in values if v not in admitted]


def gold_records(problem: BfclProblem) -> list[dict[str, Any]]:
    """Gold calls built from the possible answer, distinct, in this order:

    1. *declared*: per argument the first acceptable value the declaration's schema (of the gold function, with
       its relation domains) admits; an optional argument the answer lets be left out is left out when none is;
    2. *literal*: per argument the first acceptable value as BFCL lists it;
    3. *minimal*: the declared call without every optional argument the answer lets be left out.
    """
    fn = problem.function(problem.gold_function)
    props = (fn.get("parameters") or {}).get("properties") or {}
    required = (fn.get("parameters") or {}).get("required") or []
    try:
        arguments, _, _, defs = derive(fn)
        schemas: dict[str, Any] = arguments["properties"]
    except Unconvertible:
        schemas, defs = {}, {}
    declared: dict[str, Any] = {}
    literal: dict[str, Any] = {}
    for param in dict.fromkeys([*props, *problem.possible]):
        options = problem.possible.get(param)
        if options is None or all(v == "" for v in options):
            continue
        doc = props.get(param, {})
        literal[param] = _realize(doc, next(v for v in options if v != ""))
        choices = _choices(doc, options, schemas.get(param), defs)
        schema = schemas.get(param)
        if schema is not None and not _admits(schema, defs, choices[0]) and "" in options and param not in required:
            continue
        declared[param] = choices[0]
    minimal = {k: v for k, v in declared.items() if k in required or "" not in problem.possible[k]}
    out: list[dict[str, Any]] = []
    for args in (declared, literal, minimal):
        record = {"name": problem.gold_function, "arguments": args}
        if record not in out:
            out.append(record)
    return out


# ------------------------------------------------------------------------------------------------------ selection


@dataclass
class _Survey:
    total: int = 0
    by_category: Counter[str] = field(default_factory=Counter)
    single_function: int = 0
    multi_function: int = 0
    compiled: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_ids: dict[str, str] = field(default_factory=dict)
    selected: list[BfclProblem] = field(default_factory=list)
    selected_single: int = 0
    selected_pinned: int = 0
    pinned_unconvertible: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    relations: dict[str, list[str]] = field(default_factory=dict)
    gold_rejected: dict[str, str] = field(default_factory=dict)  # id -> first violation of the gold's declaration


def _reason(error: Exception) -> str:
    if isinstance(error, Unconvertible):
        return f"unconvertible: {error.reason}"
    message = getattr(error, "message", str(error))
    return f"refused by compiler: {type(error).__name__}: {message}"


@cache
def _survey(categories: tuple[str, ...]) -> _Survey:
    from factorspec_cp import DeclarationError, Spec

    s = _Survey()
    for category in categories:
        for p in _load(category):
            s.total += 1
            s.by_category[category] += 1
            single = len(p.functions) == 1
            s.single_function += single
            s.multi_function += not single
            try:
                Spec.from_json(declaration_doc(p))
                s.compiled += 1
            except (Unconvertible, DeclarationError) as error:
                s.skipped[_reason(error)] += 1
                s.skipped_ids[p.id] = _reason(error)
                if single:
                    continue
            target = replace(p, target=p.gold_function)
            try:
                spec = Spec.from_json(declaration_doc(target))
            except (Unconvertible, DeclarationError) as error:
                if not single:
                    s.pinned_unconvertible[_reason(error)] += 1
                continue
            violations = spec.check_record(gold_records(p)[0])
            if violations:
                s.gold_rejected[p.id] = violations[0]
            rules = rules_of(target)
            if not rules:
                continue
            s.selected.append(target)
            s.selected_single += single
            s.selected_pinned += not single
            s.rules.update(r.rule for r in rules)
            s.relations[p.id] = [r["name"] for r in relations_of(target)]
    return s


def problems(sample: int | None = None, *, categories: Sequence[str] = CATEGORIES,
             pin_gold_function: bool = True) -> list[BfclProblem]:
    """The selected problems: those whose declaration compiles and carries at least one relation, each with
    ``target`` set (its function; for a multi-function problem the gold's, unless ``pin_gold_function=False``,
    which keeps single-function problems only). ``sample``: the first ``sample`` of them."""
    chosen = [p for p in _survey(tuple(categories)).selected if pin_gold_function or len(p.functions) == 1]
    return chosen if sample is None else chosen[:sample]


def selection_report(*, categories: Sequence[str] = CATEGORIES) -> dict[str, Any]:
    """Counts: problems seen, by category and by number of functions; full declarations (every function, a
    union when several) that compile, and the reasons of the others; the selection (with relations) split into
    single-function and gold-pinned problems; rule counts; each selected problem's relation names; and the
    problems whose first gold record the declaration of the gold's function rejects (the gold contradicts the
    doc: a value outside the documented enum or type, a missing required or an undocumented argument)."""
    s = _survey(tuple(categories))
    return {
        "total": s.total,
        "by_category": dict(s.by_category),
        "single_function": s.single_function,
        "multi_function": s.multi_function,
        "compiled": s.compiled,
        "skipped": sum(s.skipped.values()),
        "skipped_by_reason": dict(s.skipped.most_common()),
        "skipped_problems": dict(s.skipped_ids),
        "pinned_skipped_by_reason": dict(s.pinned_unconvertible.most_common()),
        "with_relations": len(s.selected),
        "with_relations_single_function": s.selected_single,
        "with_relations_gold_function_pinned": s.selected_pinned,
        "rules": dict(s.rules),
        "relations": dict(s.relations),
        "gold_rejected_by_declaration": len(s.gold_rejected),
        "gold_rejected": dict(s.gold_rejected),
    }
