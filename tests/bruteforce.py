"""An independent brute-force reading of a declaration's JSON form, for exactness tests.

Nothing here imports ``factorspec_cp``: domains come from the schema (a small subset: objects with required
properties, fixed-length arrays, bounded integers with ``multipleOf``, booleans, ``enum``, ``const``), path
templates are expanded here, and every relation kind is evaluated from DESIGN.md's semantics (JSON equality, so
``true != 1``; booleans count 0/1 in arithmetic).

Every record (the product of the field domains) is enumerated once; each relation instance becomes a bitset of the
records satisfying it, so any question (admissible values under an assignment, with some relations switched off)
is a few big-integer ANDs.

>>> doc = {"type": "object", "required": ["a", "b"], "properties": {
...     "a": {"enum": ["x", "y"]}, "b": {"enum": ["x", "y"]}},
...     "x-factorspec": {"relations": [{"kind": "all_different", "fields": ["/a", "/b"]}]}}
>>> bf = BruteForce(doc)
>>> bf.admissible("/b", {"/a": "x"})
['y']
>>> bf.count()
2
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

Record = Mapping[str, Any]
Key = tuple[int, Any]  # (template index, i) of a relation instance; (-1, None) is the objective


# -- JSON values ----------------------------------------------------------------------------------------------------


def jeq(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers (``true != 1``), ``1 == 1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def num(v: Any) -> int:
    """A value in arithmetic: integers as themselves, booleans as 0/1."""
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, int):
        return v
    raise TypeError(f"{v!r} in arithmetic")


def key_of(v: Any) -> str:
    """The object key a map uses for a value: a string itself, else its JSON text."""
    return v if isinstance(v, str) else json.dumps(v)


def holds(a: Any, op: str, b: Any) -> bool:
    if op == "==":
        return jeq(a, b)
    if op == "!=":
        return not jeq(a, b)
    if op == "in":
        return any(jeq(a, x) for x in b)
    if op == "not in":
        return not any(jeq(a, x) for x in b)
    x, y = num(a), num(b)
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


# -- schema ---------------------------------------------------------------------------------------------------------


def domains(schema: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every leaf's finite domain, in record order (properties in order, array elements by index)."""
    out: dict[str, list[Any]] = {}

    def walk(node: Mapping[str, Any], ptr: str) -> None:
        if "const" in node:
            out[ptr] = [node["const"]]
        elif "enum" in node:
            out[ptr] = list(node["enum"])
        elif node.get("type") == "boolean":
            out[ptr] = [False, True]
        elif node.get("type") == "integer":
            step = node.get("multipleOf", 1)
            out[ptr] = [v for v in range(node["minimum"], node["maximum"] + 1) if v % step == 0]
        elif node.get("type") == "object":
            for name, sub in node["properties"].items():
                assert name in node.get("required", []), "the brute force reads always-present fields only"
                walk(sub, f"{ptr}/{name}")
        elif node.get("type") == "array":
            assert node["minItems"] == node["maxItems"]
            for k in range(node["minItems"]):
                walk(node["items"], f"{ptr}/{k}")
        else:
            raise ValueError(f"unsupported schema at {ptr or '/'}: {node}")

    walk(schema, "")
    return out


# -- templates ------------------------------------------------------------------------------------------------------

_TEMPLATE = re.compile(r"\{i([+-]\d+)?\}")


def _rel_paths(rel: Mapping[str, Any]) -> list[str]:
    """Every path string a relation's JSON form holds (templates unexpanded)."""
    kind = rel["kind"]
    if kind in ("all_different", "table", "count"):
        fs = rel["fields"]
        return [fs] if isinstance(fs, str) else list(fs)
    if kind == "linear":
        return [t[1] for t in rel["terms"]]
    if kind == "compare":
        return [x for x in (rel["left"], rel["right"]) if _is_path(x)]
    if kind == "implies":
        lits = rel["if"] if isinstance(rel["if"], list) else [rel["if"]]
        return [lit["field"] for lit in lits] + _rel_paths(rel["then"])
    if kind == "any":
        return [p for r in rel["relations"] for p in _rel_paths(r)]
    if kind == "element":
        t = rel["target"]
        return [rel["index"]] + ([t] if _is_path(t) else [u[1] for u in t["terms"]])
    if kind == "no_overlap":
        return [p for pair in rel["intervals"] for p in pair]
    raise ValueError(f"unknown kind {kind!r}")


def _is_path(x: Any) -> bool:
    return isinstance(x, str) and x.startswith("/")


class Expander:
    """Expands ``*`` against the leaf paths and instantiates ``{i}``, ``{i+1}``, ``{i-1}``."""

    def __init__(self, leaves: Iterable[str], max_len: int):
        self.leaves = list(leaves)
        self.max_len = max_len

    def star(self, path: str) -> list[str]:
        pattern = re.compile("/".join("[0-9]+" if tok == "*" else re.escape(tok) for tok in path.split("/")))
        return [q for q in self.leaves if pattern.fullmatch(q)]

    def one(self, path: str) -> str:
        (q,) = self.star(path)
        return q

    def concrete(self, rel: Mapping[str, Any]) -> dict[str, Any]:
        """The relation with every ``*`` expanded (no templates left)."""
        kind = rel["kind"]
        out = dict(rel)
        if kind in ("all_different", "table", "count"):
            fs = rel["fields"]
            out["fields"] = [q for p in ([fs] if isinstance(fs, str) else fs) for q in self.star(p)]
        elif kind == "linear":
            out["terms"] = [[t[0], q, *t[2:]] for t in rel["terms"] for q in self.star(t[1])]
        elif kind == "compare":
            out["left"] = self.one(rel["left"]) if _is_path(rel["left"]) else rel["left"]
            out["right"] = self.one(rel["right"]) if _is_path(rel["right"]) else rel["right"]
        elif kind == "implies":
            lits = rel["if"] if isinstance(rel["if"], list) else [rel["if"]]
            out["if"] = [dict(lit, field=self.one(lit["field"])) for lit in lits]
            out["then"] = self.concrete(rel["then"])
        elif kind == "any":
            out["relations"] = [self.concrete(r) for r in rel["relations"]]
        elif kind == "element":
            out["index"] = self.one(rel["index"])
            t = rel["target"]
            if _is_path(t):
                out["target"] = self.one(t)
            else:
                out["target"] = dict(t, terms=[[u[0], q, *u[2:]] for u in t["terms"] for q in self.star(u[1])])
        elif kind == "no_overlap":
            pairs = []
            for s, e in rel["intervals"]:
                ss, es = self.star(s), self.star(e)
                assert len(ss) == len(es)
                pairs += [[a, b] for a, b in zip(ss, es, strict=True)]
            out["intervals"] = pairs
        return out

    def instances(self, rel: Mapping[str, Any]) -> list[tuple[int | None, dict[str, Any]]]:
        """``[(i, concrete relation)]``: one with ``i=None`` without templates, else one per ``i`` where every path
        exists."""
        paths = _rel_paths(rel)
        if not any(_TEMPLATE.search(p) for p in paths):
            return [(None, self.concrete(rel))]
        out = []
        for i in range(self.max_len):
            def sub(p: str, i: int = i) -> str:
                return _TEMPLATE.sub(lambda m: str(i + int(m.group(1) or 0)), p)

            if all(self.star(sub(p)) for p in paths):
                out.append((i, self.concrete(_map_paths(rel, sub))))
        return out


def _map_paths(rel: Any, f: Any) -> Any:
    """Apply ``f`` to every string that is a path inside a relation's JSON (keys of maps are not paths)."""
    if isinstance(rel, dict):
        return {k: (v if k in ("map", "rows", "value") else _map_paths(v, f)) for k, v in rel.items()}
    if isinstance(rel, list):
        return [_map_paths(v, f) for v in rel]
    return f(rel) if _is_path(rel) else rel


# -- semantics ------------------------------------------------------------------------------------------------------


def _terms_value(terms: Iterable[list[Any]], rec: Record) -> int:
    total = 0
    for t in terms:
        v = rec[t[1]]
        total += t[0] * (t[2][key_of(v)] if len(t) == 3 else num(v))
    return total


def evaluate(rel: Mapping[str, Any], rec: Record) -> bool:
    """Whether a concrete relation (no templates) holds for a full record (path -> value)."""
    kind = rel["kind"]
    if kind == "all_different":
        vals = [rec[p] for p in rel["fields"]]
        return all(not jeq(a, b) for a, b in itertools.combinations(vals, 2))
    if kind == "table":
        tup = [rec[p] for p in rel["fields"]]
        hit = any(all(jeq(a, b) for a, b in zip(tup, row, strict=True)) for row in rel["rows"])
        return not hit if rel.get("mode") == "forbid" else hit
    if kind == "linear":
        return holds(_terms_value(rel["terms"], rec), rel["op"], rel["rhs"])
    if kind == "compare":
        side = [rec[x] if _is_path(x) else x for x in (rel["left"], rel["right"])]
        return holds(side[0], rel["op"], side[1])
    if kind == "implies":
        if all(holds(rec[lit["field"]], lit["op"], lit["value"]) for lit in rel["if"]):
            return evaluate(rel["then"], rec)
        return True
    if kind == "any":
        return any(evaluate(r, rec) for r in rel["relations"])
    if kind == "element":
        k = key_of(rec[rel["index"]])
        if k not in rel["map"]:
            return False
        t = rel["target"]
        target = num(rec[t]) if _is_path(t) else _terms_value(t["terms"], rec) + t.get("constant", 0)
        return rel["map"][k] == target
    if kind == "no_overlap":
        iv = [(num(rec[s]), num(rec[e])) for s, e in rel["intervals"]]
        return all(a[1] <= b[0] or b[1] <= a[0] for a, b in itertools.combinations(iv, 2))
    if kind == "count":
        n = sum(1 for p in rel["fields"] if jeq(rec[p], rel["value"]))
        return holds(n, rel["op"], rel["rhs"])
    raise ValueError(f"unknown kind {kind!r}")


# -- the enumerator -------------------------------------------------------------------------------------------------


class BruteForce:
    """Every record of a declaration, with a bitset per relation instance and per (field, value).

    ``keys`` are the instances as ``(template index, i)``; ``(-1, None)`` is ``objective == optimum`` when the
    declaration asks for optimal records (the optimum over the records satisfying every relation).
    """

    def __init__(self, doc: Mapping[str, Any]):
        self.doc = doc
        schema = {k: v for k, v in doc.items() if k != "x-factorspec"}
        self.domains = domains(schema)
        self.paths = list(self.domains)
        x = doc.get("x-factorspec", {})
        max_len = max((n["minItems"] for n in _arrays(schema)), default=0)
        exp = Expander(self.paths, max_len)
        self.instances: dict[Key, dict[str, Any]] = {}
        for k, rel in enumerate(x.get("relations", [])):
            for i, concrete in exp.instances(rel):
                self.instances[(k, i)] = concrete
        combos = itertools.product(*self.domains.values())
        self.records = [dict(zip(self.paths, combo, strict=True)) for combo in combos]
        self.all = (1 << len(self.records)) - 1
        self.masks: dict[Key, int] = {key: self._mask(lambda r, rel=rel: evaluate(rel, r))
                                      for key, rel in self.instances.items()}
        self.value_masks = {p: [self._mask(lambda r, p=p, v=v: jeq(r[p], v)) for v in vals]
                            for p, vals in self.domains.items()}
        self.optimum: int | None = None
        self.optima: list[int] = []
        obj = x.get("objective")
        levels = obj if isinstance(obj, list) else [obj] if obj is not None else []
        if levels and levels[0].get("require", "optimal") == "optimal":
            # lexicographic: level k's optimum over the records satisfying the relations and every level before it
            # at its optimum; a single objective is one level, keyed (-1, None) as before
            ok = self.select(self.relation_keys())
            for k, level in enumerate(levels):
                key = (-1, None) if not isinstance(obj, list) else (-1, k)
                sense = "minimize" if "minimize" in level else "maximize"
                terms = [[t[0], q, *t[2:]] for t in level[sense] for q in exp.star(t[1])]
                values = [_terms_value(terms, r) for r in self.records]
                feasible = [v for b, v in enumerate(values) if ok >> b & 1]
                if feasible:
                    best = (min if sense == "minimize" else max)(feasible)
                    self.optima.append(best)
                    self.masks[key] = sum(1 << b for b, v in enumerate(values) if v == best)
                    ok &= self.masks[key]
                else:  # no record: the objective adds nothing, the declaration is unsatisfiable anyway
                    self.masks[key] = self.all
            self.optimum = self.optima[0] if self.optima else None

    def _mask(self, pred: Any) -> int:
        m = 0
        for b, r in enumerate(self.records):
            if pred(r):
                m |= 1 << b
        return m

    def relation_keys(self) -> list[Key]:
        """The instances of the relations (not the objective)."""
        return [k for k in self.masks if k[0] >= 0]

    def active_keys(self) -> list[Key]:
        """Everything a valid record must satisfy: relations, plus the optimum under ``require: optimal``."""
        return list(self.masks)

    def select(self, keys: Iterable[Key] | None = None, assignment: Mapping[str, Any] | None = None) -> int:
        """Bitset of the records satisfying ``keys`` (default: all active) and the assignment."""
        m = self.all
        for k in self.active_keys() if keys is None else keys:
            m &= self.masks[k]
        for p, v in (assignment or {}).items():
            m &= self.value_masks[p][self.index(p, v)]
        return m

    def index(self, path: str, value: Any) -> int:
        return next(k for k, v in enumerate(self.domains[path]) if jeq(v, value))

    def admissible(self, path: str, assignment: Mapping[str, Any] | None = None,
                   keys: Iterable[Key] | None = None) -> list[Any]:
        m = self.select(keys, assignment)
        return [v for v, vm in zip(self.domains[path], self.value_masks[path], strict=True) if m & vm]

    def valid(self, assignment: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        m = self.select(None, assignment)
        return [r for b, r in enumerate(self.records) if m >> b & 1]

    def count(self, assignment: Mapping[str, Any] | None = None) -> int:
        return bin(self.select(None, assignment)).count("1")


def _arrays(node: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    if node.get("type") == "array":
        yield node
        yield from _arrays(node["items"])
    for sub in node.get("properties", {}).values():
        yield from _arrays(sub)


def pretoken_ends(name: str, text: str) -> set[int]:
    """The byte offsets where the tokenizer's pre-tokens of ``text`` end: the model's own split pattern in the
    ``regex`` engine (the library splits plain text with ``re``); SmolLM2 splits each digit alone first (its
    tokenizer.json's Sequence), then GPT-2's split."""
    import regex

    from factorspec_cp.tokenmap import bpe
    if name == "smollm2":
        parts = [q for k, seg in enumerate(regex.split(r"(\p{N})", text))
                 for q in ([seg] if k % 2 else regex.findall(bpe.GPT2_PATTERN, seg))]
    else:
        parts = regex.findall({"qwen3": bpe.QWEN2_PATTERN, "llama3": bpe.LLAMA3_PATTERN}[name], text)
    ends, at = set(), 0
    for q in parts:
        at += len(q.encode())
        ends.add(at)
    assert at == len(text.encode())
    return ends
