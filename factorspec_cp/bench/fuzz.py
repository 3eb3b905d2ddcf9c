"""``factorspec bench fuzz``: bad and strange declarations through the whole compile path.

Each case is a declaration (a JSON Schema with ``x-factorspec`` relations) that is either drawn from a grammar of
schemas and relations seeded with hostile values, or a real JSONSchemaBench schema with a few of its keywords
mutated. It goes through :meth:`Spec.from_json`, :class:`~factorspec_cp.tokenmap.layout.Layout`, the decoder's
first mask over a real vocabulary, and, where the declaration compiled, one record (the first solution), which
must be JSON (no NaN or Infinity) and pass :meth:`Spec.check_record`.

Every case must either compile or raise a :class:`~factorspec_cp.errors.DeclarationError`. The outcomes:

- ``compiled`` / ``refused`` (a ``DeclarationError``, by class): as they should be;
- ``crashed``: any other exception (a bug), with the stage, the exception and the declaration;
- ``stalled``: the case ran past ``--timeout`` seconds (default 5) in a worker process, which is then killed;
- ``memory``: the worker ran out of its address-space limit (``MemoryError``) or died.

Cases run one at a time in a forked worker process (the vocabulary is loaded once, before the fork), so a stall
or a crash of the interpreter costs only that case. Writes ``benchmarks/fuzz.json`` and ``fuzz.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing as mp
import os
import platform
import random
import resource
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STAGES = ("parse", "layout", "mask", "record")

# -- hostile values --------------------------------------------------------------------------------------------------
NUMBERS: list[Any] = [math.nan, math.inf, -math.inf, 2**64 - 1, -(2**63), 2**63, 2**63 - 1, 10**30, -(10**30),
                      1e308, -1e308, 1e-308, 5e-324, 0.1, 0.5, -0.0, 1.5, 3.0, 2**53 + 1, 0, -1]
WRONG: list[Any] = [None, True, False, "3", "", "abc", [], [1], {}, {"a": 1}, "NaN"]
STRINGS: list[str] = ["\ud800", "\udfff", "", "a" * 300, "\u00b9", "\uff11", "01", "\x00", "\u00e9", "/", "~",
                      "~1", "*", "{i}", "\"", "\\", "\n", "\u2028", "\U0001f600", " ", "x" * 70]
PATTERNS: list[str] = ["a{99999}", "(a|b|c|d|e|f|g)*x(a|b|c|d|e|f|g){12}", "(a*)*b", "((a+)+)+$", "[", "(?=a)b",
                       r"\p{L}+", "^.*$", "(a|aa)+", "^(a|b|c|d|e|f|g)+(h|i|j|k|l|m|n){3,40}$", r"\d{1,1000}",
                       "[^\"]{5000}", "(?i)abc", r"\bword\b", "a{3,2}", "(", ")", "*", "a**", r"\1", "[z-a]",
                       "^[A-Z]{2}-[0-9]{4}$", "^\\S+@\\S+$", ".{0,65536}", "(x{50}){50}", "", "\ud800"]
FORMATS: list[str] = ["date", "time", "date-time", "uuid", "ipv4", "email", "duration", "hostname", "ipv6", "uri",
                      "regex", "nonsense", ""]
KEYWORDS: list[str] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                       "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems", "items", "prefixItems",
                       "contains", "properties", "required", "additionalProperties", "patternProperties", "enum",
                       "const", "type", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref", "$defs",
                       "definitions", "minProperties", "maxProperties", "dependentRequired", "dependencies",
                       "propertyNames", "title", "default", "id", "$id", "examples", "readOnly"]
TYPES: list[Any] = ["integer", "number", "string", "boolean", "null", "object", "array", "any", ["integer", "null"],
                    ["string", "integer"], [], "Integer", None, 3]
OPS: list[Any] = ["==", "!=", "<", "<=", ">", ">=", "=", "=~", None, 1]
KINDS = ["all_different", "table", "linear", "compare", "implies", "element", "no_overlap", "count"]
BAD_PATHS: list[Any] = ["/v/01", "/v/\u00b9", "/v/\uff11", "/nope", "", "v", "/", "//", "/v/-1", "/v/1e3", "/v/ 1",
                        "/v/{i+99999999999999999999}", "/v/{i-1}", "/v/{j}", "/~2", "/\ud800", None, 7, ["/a"]]


class Gen:
    """Declarations from one ``random.Random``; ``corpus`` holds real schemas (JSON objects) to mutate."""

    def __init__(self, rng: random.Random, corpus: list[Any] | None = None, targeted: float = 0.3):
        self.rng = rng
        self.corpus = corpus or []
        self.targeted_share = targeted  # the share of clean declarations with one targeted defect
        self.paths: list[str] = []  # leaf paths of the schema being drawn, for relations
        self.arrays: list[str] = []
        self.h = 1.0  # hostility of the declaration being drawn: how often a value is a bad one

    # -- values --------------------------------------------------------------------------------------------------
    def number(self, lo: int = -20, hi: int = 60) -> Any:
        r = self.rng.random()
        if r < 1 - 0.3 * self.h:
            return self.rng.randint(lo, hi)
        if r < 1 - 0.08 * self.h:
            return self.rng.choice(NUMBERS)
        return self.rng.choice(WRONG)

    def count(self) -> Any:
        r = self.rng.random()
        return self.rng.randint(0, 6) if r < 1 - 0.2 * self.h else self.rng.choice(NUMBERS + WRONG + [10**6, 99999])

    def string(self) -> Any:
        r = self.rng.random()
        if r < 1 - 0.4 * self.h:
            return self.rng.choice(["Paris", "Rome", "a", "b", "c", "x y", "Oslo", "q"])
        if r < 1 - 0.05 * self.h:
            return self.rng.choice(STRINGS)
        return self.rng.choice(WRONG)

    def key(self) -> str:
        k = self.string() if self.rng.random() < 0.8 else "k"
        return k if isinstance(k, str) else json.dumps(k)

    def value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if r < 0.35:
            return self.number()
        if r < 0.7:
            return self.string()
        if r < 0.8 and depth < 3:
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 3))]
        if r < 0.9 and depth < 3:
            return {self.key(): self.value(depth + 1)
                    for _ in range(self.rng.randint(0, 3))}
        return self.rng.choice([None, True, False])

    def wrong(self) -> Any:
        return self.rng.choice(WRONG + NUMBERS[:6] + [self.value()])

    def maybe(self, p: float = 0.1) -> bool:
        return self.rng.random() < p

    def size(self, lo: int, hi: int) -> int:
        """A list length in lo..hi, or (a hostile choice) from 0."""
        return self.rng.randint(0 if self.bad(0.3) else lo, hi)

    def bad(self, p: float) -> bool:
        """A hostile choice, as often as the declaration's hostility says."""
        return self.rng.random() < p * self.h

    # -- schemas -------------------------------------------------------------------------------------------------
    def schema(self, depth: int, path: str) -> Any:
        rng = self.rng
        kinds = ["integer", "enum", "boolean", "string", "number", "const", "null", "array", "object", "anyOf",
                 "allOf", "ref", "untyped", "types", "not"]
        weights = [20, 20, 6, 10, 5, 4, 2, 8 if depth < 4 else 0, 8 if depth < 4 else 0, 4 if depth < 4 else 0,
                   2, 2, 2, 2, 1]
        kind = rng.choices(kinds, weights)[0]
        s: dict[str, Any]
        if kind == "integer":
            s = {"type": "integer"}
            lo, hi = self.number(-5, 20), self.number(0, 80)
            if not self.maybe(0.1):
                s["minimum"] = lo
            if not self.maybe(0.1):
                s["maximum"] = hi
            if self.maybe(0.1):
                s["exclusiveMinimum" if self.maybe(0.5) else "exclusiveMaximum"] = self.number()
            if self.maybe(0.1):
                s["multipleOf"] = self.number(-2, 7)
            self.paths.append(path)
        elif kind == "number":
            s = {"type": "number", "minimum": self.number(), "maximum": self.number()}
            if self.maybe(0.2):
                s["multipleOf"] = rng.choice([0.5, 0.1, 0.25, 1e-9, 3, math.nan])
            self.paths.append(path)
        elif kind == "enum":
            n = self.size(1, 6) if not self.maybe(0.03) else rng.choice([300, 2000])
            if self.bad(0.5):
                members = [self.string() if rng.random() < 0.8 else self.value() for _ in range(n)]
            else:
                members = list(dict.fromkeys(f"{self.key()}{k}" if n > 8 else self.key() for k in range(n)))
            s = {"enum": members} if not self.maybe(0.1) else {"type": "string", "enum": members}
            self.paths.append(path)
        elif kind == "boolean":
            s = {"type": "boolean"}
            self.paths.append(path)
        elif kind == "const":
            s = {"const": self.value()}
            self.paths.append(path)
        elif kind == "null":
            s = {"type": "null"}
        elif kind == "string":
            s = {"type": "string"}
            if self.maybe(0.6):
                s["maxLength"] = self.count() if self.maybe(0.7) else self.number(0, 400)
            if self.maybe(0.3):
                s["minLength"] = self.count()
            if self.maybe(0.35):
                s["pattern"] = rng.choice(PATTERNS)
            if self.maybe(0.25):
                s["format"] = rng.choice(FORMATS)
        elif kind == "array":
            s = {"type": "array", "items": self.schema(depth + 1, path + "/{i}"), "minItems": self.count(),
                 "maxItems": self.count()}
            if self.maybe(0.15):
                s["uniqueItems"] = rng.choice([True, False, 1, "yes"])
            if self.maybe(0.05):
                s["prefixItems"] = [self.schema(depth + 1, path + "/0")]
            if self.maybe(0.05):
                s["contains"] = self.schema(depth + 1, path + "/c")
                if self.maybe(0.5):
                    s[rng.choice(["minContains", "maxContains"])] = self.count()
            if self.maybe(0.04):  # draft 7's tuple form
                s["items"] = [self.schema(depth + 1, path + f"/{k}") for k in range(rng.randint(0, 3))]
                if self.maybe(0.5):
                    s["additionalItems"] = rng.choice([False, True, {"type": "boolean"}, self.wrong()])
            self.arrays.append(path)
        elif kind == "object":
            s = self.object(depth + 1, path)
        elif kind == "anyOf":
            key = rng.choice(["anyOf", "oneOf"])
            s = {key: [self.schema(depth + 1, path) for _ in range(rng.randint(0, 3))]}
        elif kind == "allOf":
            s = {"allOf": [self.schema(depth + 1, path) for _ in range(rng.randint(0, 2))]}
        elif kind == "ref":
            s = {"$ref": rng.choice(["#/$defs/d", "#/$defs/loop", "#/definitions/d", "#", "#/$defs/none",
                                     "other.json#/x", "#/properties/v", "#%2Fbad", "#anchor", "urn:fuzz:d",
                                     "urn:fuzz:d#/minimum", "#/$defs/d/enum/0", "#/$defs/loop/properties/next"])}
            if self.maybe(0.2):  # a keyword beside it (asserted from 2019-09 on)
                s[rng.choice(["minimum", "maxLength", "type", "title", "enum"])] = self.value()
        elif kind == "untyped":
            s = {} if self.maybe(0.5) else {rng.choice(KEYWORDS): self.value()}
        elif kind == "types":
            s = {"type": rng.choice(TYPES)}
        else:
            s = {"not": self.schema(depth + 1, path)}
        if self.bad(0.08):  # a keyword with a value of the wrong type, or a keyword out of place
            s[rng.choice(KEYWORDS)] = self.wrong()
        if self.bad(0.02):
            return rng.choice([True, False, None, 3, "string", []])
        return s

    def object(self, depth: int, path: str) -> dict[str, Any]:
        rng = self.rng
        n = rng.randint(0, 5)
        names = []
        for _ in range(n):
            names.append(rng.choice(["a", "b", "c", "v", "w", "day", "city"]) if rng.random() < 0.85
                         else self.string())
        props = {}
        for name in names:
            if isinstance(name, str):
                props[name] = self.schema(depth, f"{path}/{_escape(name)}")
        s: dict[str, Any] = {"type": "object", "properties": props}
        r = rng.random()
        s["required"] = list(props) if r < 0.7 else [k for k in props if rng.random() < 0.5] if not self.bad(0.3) \
            else self.wrong()
        if rng.random() < 0.8:
            s["additionalProperties"] = False if not self.bad(0.1) else self.value()
        if self.maybe(0.05):
            s["minProperties"] = self.count()
        if self.maybe(0.05):
            s["dependentRequired"] = {k: [self.key()] for k in props}
        return s

    def declaration(self) -> dict[str, Any]:
        """One declaration: a clean one with one targeted defect (30%), a mutated corpus schema (30%, where a
        corpus is given) or a drawn one, hostile to a degree drawn per declaration."""
        self.paths, self.arrays = [], []
        self.h = self.rng.choice([0.0, 0.05, 0.2, 0.5, 1.0])
        if self.rng.random() < self.targeted_share:
            return self.targeted()
        if self.corpus and self.rng.random() < 0.43:
            doc = self.mutate(json.loads(json.dumps(self.rng.choice(self.corpus))))
            if not isinstance(doc, dict):
                return {"type": "object", "properties": {"v": doc}} if self.maybe(0.5) else doc  # type: ignore
            self.paths = _leaf_paths(doc)
            if self.maybe(0.5) and self.paths:
                doc["x-factorspec"] = self.extras()
            return doc
        doc = self.object(0, "")
        if self.maybe(0.2):
            anchored = self.schema(2, "/a")
            if isinstance(anchored, dict):
                anchored = {"$anchor": self.rng.choice(["anchor", "other", 5]), **anchored}
            doc["$defs"] = {"d": self.schema(2, "/d"),
                            "loop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/loop"}}},
                            "a": anchored,
                            "u": {"$id": self.rng.choice(["urn:fuzz:d", "http://x/y.json", "#frag", None]),
                                  "enum": [1]}}
        if self.paths or self.maybe(0.3):
            doc["x-factorspec"] = self.extras()
        return doc

    def targeted(self) -> dict[str, Any]:
        """A clean declaration (an integer pair, an enum, an array of objects, a relation each) with one defect of
        the classes seen in the wild: wide domains under relations, int64 overflow, path indices that ``int()`` and
        the fields disagree on, deep nesting, non-JSON numbers and strings, wrong keyword types, pathological
        patterns, huge tables."""
        rng = self.rng
        self.h = 0.0
        wide = rng.choice([9, 99, 65535, 999_999, 2**31, 2**64 - 1])
        doc: dict[str, Any] = {
            "type": "object", "additionalProperties": False, "required": ["a", "b", "c", "plan"],
            "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 9},
                "b": {"type": "integer", "minimum": 0, "maximum": 9},
                "c": {"enum": ["x", "y", "z"]},
                "plan": {"type": "array", "minItems": 3, "maxItems": 3, "items": {
                    "type": "object", "additionalProperties": False, "required": ["d", "e"],
                    "properties": {"d": {"type": "integer", "minimum": 1, "maximum": 5},
                                   "e": {"enum": ["p", "q", "r"]}}}}}}
        rels: list[Any] = [{"kind": "linear", "terms": [[1, "/a"], [1, "/b"]], "op": "<=", "rhs": 12},
                           {"kind": "all_different", "fields": ["/plan/*/e"]}]
        props = doc["properties"]
        k = rng.randrange(13)
        if k == 0:  # wide integer domains under a relation
            for f in ("a", "b"):
                props[f]["maximum"] = wide
            rels.append(rng.choice([{"kind": "linear", "terms": [[1, "/a"], [-1, "/b"]], "op": "==", "rhs": 0},
                                    {"kind": "compare", "left": "/a", "op": "<", "right": "/b"},
                                    {"kind": "all_different", "fields": ["/a", "/b"]}]))
        elif k == 1:  # coefficients, constants and objectives past int64
            big = rng.choice([2**63, 2**70, -(2**64), 10**30, 2**62, 1e300])
            rels.append(rng.choice([
                {"kind": "linear", "terms": [[big, "/a"], [1, "/b"]], "op": "<=", "rhs": 5},
                {"kind": "linear", "terms": [[1, "/a"]], "op": ">=", "rhs": big},
                {"kind": "element", "index": "/c", "map": {"x": big, "y": 1, "z": 2}, "target": "/a"},
                {"kind": "count", "fields": ["/plan/*/e"], "value": "p", "op": "<=", "rhs": big},
                {"kind": "compare", "left": "/a", "op": "<", "right": big}]))
            if rng.random() < 0.3:
                doc["x-factorspec"] = {"relations": rels, "objective": {"maximize": [[big, "/a"], [big, "/b"]]}}
                return doc
        elif k == 2:  # path indices
            idx = rng.choice(["01", "\u00b9", "\uff11", "+1", "1 ", "-0", "1.0", "0x1", "\u0661", "9", "3",
                              "99999999999999999999"])
            idx = json.loads(f'"{idx}"')
            rels.append({"kind": "compare", "left": f"/plan/{idx}/d", "op": "<=", "right": "/a"})
        elif k == 3:  # deep nesting
            depth = rng.choice([20, 60, 130, 400])
            r: Any = {"kind": "compare", "left": "/a", "op": "<=", "right": "/b"}
            for _ in range(depth):
                r = {"kind": "implies", "if": {"field": "/c", "op": "==", "value": "x"}, "then": r}
            rels.append(r)
        elif k == 4:  # numbers JSON has not, in every place
            bad = rng.choice([math.nan, math.inf, -math.inf])
            place = rng.randrange(5)
            if place == 0:
                props["a"]["maximum"] = bad
            elif place == 1:
                props["c"] = {"const": bad}
            elif place == 2:
                props["c"]["enum"] = ["x", bad]
            elif place == 3:
                rels.append({"kind": "linear", "terms": [[1, "/a"]], "op": "<=", "rhs": bad})
            else:
                rels.append({"kind": "implies", "if": {"field": "/a", "op": "==", "value": bad},
                             "then": {"kind": "compare", "left": "/b", "op": "==", "right": 1}})
        elif k == 5:  # strings without UTF-8
            lone = rng.choice(["\ud800", "\udfff", "a\ud83d"])
            lone = json.loads(f'"{lone}"')
            place = rng.randrange(3)
            if place == 0:
                props["c"]["enum"] = ["x", lone]
            elif place == 1:
                props[lone] = {"type": "integer", "minimum": 0, "maximum": 3}
                doc["required"].append(lone)
            else:
                rels.append({"kind": "implies", "if": {"field": "/c", "op": "==", "value": lone},
                             "then": {"kind": "compare", "left": "/a", "op": "==", "right": 1}})
        elif k == 6:  # keyword values of the wrong type
            key = rng.choice(["minimum", "maximum", "multipleOf", "exclusiveMinimum"])
            props["a"][key] = rng.choice([True, False, None, "3", [], {}, 1e308, 2**64 - 1])
        elif k == 7:  # bounds at the ends of the number line, under relations
            props["a"]["minimum"] = rng.choice([-(2**63), -1e308, -(2**64), 0])
            props["a"]["maximum"] = rng.choice([2**63 - 1, 1e308, 2**64 - 1, 10**6])
        elif k == 8:  # a pathological pattern next to the relations
            props["note"] = {"type": "string", "pattern": rng.choice(PATTERNS)}
            if rng.random() < 0.5:
                props["note"]["maxLength"] = rng.choice([5, 400, 10**6])
            doc["required"].append("note")
        elif k == 9:  # tables: wide, long, ragged
            n = rng.choice([10, 1000, 100_001])
            rows: list[Any] = [[i % 10, i % 7] for i in range(n)]
            if rng.random() < 0.3:
                rows.append([1])
            rels.append({"kind": "table", "fields": ["/a", "/b"], "rows": rows})
            if rng.random() < 0.3:
                doc["x-factorspec"] = {"relations": rels, "table_budget": rng.choice([1, 10**12, 0.5])}
                return doc
        elif k == 10:  # many fields, many instances
            props["plan"]["maxItems"] = rng.choice([30, 300, 10_000, 10_001])
            props["plan"]["minItems"] = props["plan"]["maxItems"] if rng.random() < 0.7 else rng.choice([0, 2, 30])
            rels.append({"kind": "linear", "terms": [[1, "/plan/{i+1}/d"], [-1, "/plan/{i}/d"]], "op": ">=",
                         "rhs": 0})
        elif k == 11:  # no_overlap and element over the array
            rels.append({"kind": "no_overlap", "intervals": [["/plan/{i}/d", "/a"], ["/b", "/plan/{i}/d"]]})
        else:  # a huge enum under a relation
            n = rng.choice([100, 5000, 200_000])
            props["c"]["enum"] = [f"v{i}" for i in range(n)]
            rels.append({"kind": "implies", "if": {"field": "/c", "op": "==", "value": "v7"},
                         "then": {"kind": "compare", "left": "/a", "op": "==", "right": 1}})
        doc["x-factorspec"] = {"relations": rels}
        return doc

    def mutate(self, doc: Any) -> Any:
        nodes = [n for n in _nodes(doc) if isinstance(n, dict)]
        for _ in range(self.rng.randint(1, 3)):
            if not nodes:
                break
            node = self.rng.choice(nodes)
            op = self.rng.random()
            if op < 0.4 and node:
                key = self.rng.choice(list(node))
                node[key] = self.wrong() if self.maybe(0.5) else self.rng.choice(NUMBERS + STRINGS + PATTERNS)
            elif op < 0.6 and node:
                del node[self.rng.choice(list(node))]
            elif op < 0.85:
                node[self.rng.choice(KEYWORDS)] = self.value() if self.maybe(0.5) else self.wrong()
            else:
                drawn = self.schema(3, "/m")
                node.update(drawn if isinstance(drawn, dict) else {})
        return doc

    # -- relations -----------------------------------------------------------------------------------------------
    def path(self) -> Any:
        if self.paths and not self.bad(0.15):
            p = self.rng.choice(self.paths)
            if "{i}" in p and self.bad(0.4):
                p = p.replace("{i}", self.rng.choice(["*", "0", "1", "{i+1}", "{i-1}", "01", "\u00b9"]))
            return p
        return self.rng.choice(BAD_PATHS + [a + "/*" for a in self.arrays])

    def terms(self) -> Any:
        if self.bad(0.05):
            return self.wrong()
        return [[self.number(-3, 3) if not self.bad(0.15) else self.rng.choice(NUMBERS + WRONG), self.path()]
                for _ in range(self.size(1, 3))]

    def literal(self) -> Any:
        return {"field": self.path(), "op": self.op(), "value": self.value() if self.bad(0.5) else self.string()}

    def op(self) -> Any:
        return self.rng.choice(OPS) if self.bad(0.5) else self.rng.choice(OPS[:6])

    def relation(self, depth: int = 0) -> Any:
        rng = self.rng
        kind = rng.choice(KINDS) if not self.bad(0.05) else rng.choice(["bogus", None, 3, ""])
        r: dict[str, Any] = {"kind": kind}
        if kind == "all_different":
            r["fields"] = [self.path() for _ in range(self.size(2, 3))] if not self.bad(0.1) else self.path()
        elif kind == "table":
            fields = [self.path() for _ in range(self.size(1, 3))]
            width = len(fields) if not self.bad(0.1) else rng.randint(0, 4)
            r["fields"] = fields
            r["rows"] = [[self.value() if self.bad(0.3) else self.number(0, 9) if rng.random() < 0.5
                          else self.string() for _ in range(width)] for _ in range(rng.randint(0, 5))]
            if self.maybe(0.2):
                r["mode"] = rng.choice(["allow", "forbid", "deny", None])
        elif kind == "linear":
            r.update(terms=self.terms(), op=self.op(), rhs=self.number())
        elif kind == "compare":
            r.update(left=self.path(), op=self.op(), right=self.path() if rng.random() < 0.5 else self.value())
        elif kind == "implies":
            cond = self.literal() if not self.bad(0.2) else [self.literal() for _ in range(rng.randint(0, 3))]
            deep = depth < 400 and (self.maybe(0.01) or depth > 0 and rng.random() < 0.98)
            r.update({"if": cond, "then": self.relation(depth + 1) if deep or rng.random() < 0.3 or depth > 6
                      else {"kind": "linear", "terms": self.terms(), "op": "<=", "rhs": self.number()}})
            if depth > 6 and not deep:
                r["then"] = {"kind": "compare", "left": self.path(), "op": "==", "right": self.value()}
        elif kind == "element":
            r.update(index=self.path(), map={self.key() if rng.random() < 0.9 else "NaN": self.number()
                                             for _ in range(rng.randint(0, 4))},
                     target=self.path() if rng.random() < 0.7 else {"terms": self.terms(), "constant": self.number()})
        elif kind == "no_overlap":
            r["intervals"] = [[self.path(), self.path()] for _ in range(self.size(1, 3))]
        elif kind == "count":
            r.update(fields=[self.path() for _ in range(self.size(1, 3))], value=self.value(),
                     op=self.op(), rhs=self.number(0, 4))
        if self.bad(0.05):
            r[rng.choice(["extra", "fields", "terms", "op"])] = self.wrong()
        if self.bad(0.03):
            del r["kind"]
        return r

    def extras(self) -> Any:
        x: dict[str, Any] = {"relations": [self.relation() for _ in range(self.rng.randint(0, 4))]}
        if self.maybe(0.1):
            x["objective"] = {self.rng.choice(["maximize", "minimize"]): self.terms(),
                              "require": self.rng.choice(["optimal", "any", "best"] if self.bad(0.3)
                                                         else ["optimal", "any"])}
            if self.maybe(0.3):
                x["objective"] = [x["objective"], {"minimize": self.terms()}]
        if self.maybe(0.05):
            x["table_budget"] = self.count() if self.maybe(0.5) else self.wrong()
        if self.bad(0.03):
            x[self.rng.choice(["relation", "extra"])] = []
        if self.bad(0.02):
            return self.wrong()
        return x


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _nodes(doc: Any) -> Iterator[Any]:
    stack = [doc]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, dict):
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)


def _leaf_paths(doc: Any, path: str = "", depth: int = 0) -> list[str]:
    """Paths a relation might name in a (mutated) corpus schema: properties of nested objects, items as ``*``."""
    out: list[str] = []
    if not isinstance(doc, dict) or depth > 6:
        return out
    props = doc.get("properties")
    if isinstance(props, dict):
        for k, v in props.items():
            if isinstance(k, str):
                out.append(f"{path}/{_escape(k)}")
                out.extend(_leaf_paths(v, f"{path}/{_escape(k)}", depth + 1))
    items = doc.get("items")
    if isinstance(items, dict):
        out.extend(_leaf_paths(items, f"{path}/*", depth + 1))
    return out[:40]


# -- one case --------------------------------------------------------------------------------------------------------
class _NotJSON(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not JSON")


def check(doc: Any, vocab: Any, stage: Any = None) -> dict[str, Any]:
    """Run one declaration through every stage. Returns the outcome: ``status`` compiled/refused/crashed, ``stage``
    (the last one reached), and for refusals the error class, for crashes the exception and where it was raised.
    ``stage``: an optional shared ``multiprocessing.Value('i')`` set to the index of the stage as it starts."""
    from ..errors import DeclarationError
    from ..spec import Spec
    from ..tokenmap.layout import Layout

    def at(k: int) -> str:
        if stage is not None:
            stage.value = k
        return STAGES[k]

    now = at(0)
    try:
        spec = Spec.from_json(doc)
        now = at(1)
        Layout(spec)
        now = at(2)
        dec = spec.decoder(vocab)
        ids = dec.allowed_tokens()
        if len(ids) == 0:
            raise AssertionError("the first mask of a compiled declaration admits no token")
        now = at(3)
        record = next(iter(spec.solutions(limit=1)), None)
        if record is not None:
            text = json.dumps(record, allow_nan=False)
            back = json.loads(text, parse_constant=_reject_constant)
            if back != record:
                raise AssertionError(f"the record {text[:200]} does not read back as itself")
            whole = (not spec.compiled.free and all(not f.conditional for f in spec.compiled.fields.values())
                     and _closed(spec.compiled.root))
            problems = spec.check_record(record) if whole else []
            if problems:
                raise AssertionError(f"the first solution {text[:200]} is invalid: {problems[:3]}")
        return {"status": "compiled", "stage": now}
    except DeclarationError as e:
        if not (isinstance(e.pointer, str) and e.pointer.startswith("#")):
            return {"status": "crashed", "stage": now, "exception": f"{type(e).__name__} without a pointer",
                    "message": str(e)[:300], "where": _where(e)}
        return {"status": "refused", "stage": now, "error_class": type(e).__name__}
    except RecursionError as e:
        return {"status": "crashed", "stage": now, "exception": "RecursionError", "message": str(e)[:300],
                "where": _where(e)}
    except MemoryError:
        return {"status": "memory", "stage": now}
    except Exception as e:  # noqa: BLE001 - every other exception is a bug to list
        return {"status": "crashed", "stage": now, "exception": type(e).__name__, "message": str(e)[:300],
                "where": _where(e)}


def _closed(node: Any) -> bool:
    """Whether every part of the layout has a finite-domain field (a solution is then the whole record)."""
    from ..schema import ArrayNode, Leaf, ObjectNode
    if isinstance(node, Leaf):
        return True
    if isinstance(node, ObjectNode):
        return all(_closed(p.node) for p in node.properties)
    if isinstance(node, ArrayNode):
        return len(node.elements) >= node.min_items and all(_closed(e) for e in node.elements)
    return False


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "factorspec_cp" in f.filename and "bench/fuzz" not in f.filename]
    f = (ours or frames)[-1] if frames else None
    return f"{Path(f.filename).name}:{f.lineno} {f.name}" if f else "?"


# -- workers ---------------------------------------------------------------------------------------------------------
def _worker(conn: Any, vocab: Any, stage: Any, memory_bytes: int) -> None:
    # what the parent had (a test run's whole heap) is never garbage here: kept out of the collector's passes, so
    # that a case's time is its own and not a scan of the parent's objects
    gc.freeze()
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    while True:
        try:
            text = conn.recv()
        except EOFError:
            return
        if text is None:
            return
        doc = json.loads(text)
        t = time.perf_counter()
        out = check(doc, vocab, stage)
        out["seconds"] = time.perf_counter() - t
        conn.send(out)


class Runner:
    """One forked worker process that runs cases with a time limit; a stalled or dead worker is replaced."""

    def __init__(self, vocab: Any, *, timeout: float = 5.0, memory_gb: float = 4.0):
        self.vocab = vocab
        self.timeout = timeout
        self.memory = int(memory_gb * 2**30)
        self.ctx = mp.get_context("fork")
        self.proc: Any = None
        self.restarts = 0

    def _start(self) -> None:
        self.stage = self.ctx.Value("i", 0)
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.vocab, self.stage, self.memory), daemon=True)
        self.proc.start()
        child.close()

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
            self.conn.close()
            self.proc = None
            self.restarts += 1

    def run(self, doc: Any) -> dict[str, Any]:
        try:
            text = json.dumps(doc)  # Python's json writes NaN and Infinity, and reads them back
        except (ValueError, RecursionError) as e:
            return {"status": "unserializable", "message": str(e)[:200]}
        if self.proc is None or not self.proc.is_alive():
            self._start()
        t = time.perf_counter()
        self.conn.send(text)
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()  # type: ignore[no-any-return]
            except EOFError:
                pass
        elapsed = time.perf_counter() - t
        stage = STAGES[self.stage.value]
        alive = self.proc.is_alive()
        code = self.proc.exitcode
        self._kill()
        if alive:
            return {"status": "stalled", "stage": stage, "seconds": elapsed}
        return {"status": "memory" if code in (-9, -6, 1) else "died", "stage": stage, "exitcode": code}

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()
        self.proc = None


def corpus(limit: int | None = 2000, root: Path | None = None) -> list[Any]:
    """Real schemas to mutate: JSONSchemaBench's files (every ``limit``-th spread evenly), parsed."""
    from .coverage import jsonschemabench_files, jsonschemabench_items
    docs: list[Any] = []
    for path in jsonschemabench_files(root):
        for item in jsonschemabench_items(path):
            try:
                docs.append(json.loads(item.text or ""))
            except (json.JSONDecodeError, RecursionError):
                continue
    if limit and len(docs) > limit:
        step = len(docs) / limit
        docs = [docs[int(k * step)] for k in range(limit)]
    return docs


# -- the run ---------------------------------------------------------------------------------------------------------
def fuzz(n: int, *, seed: int = 0, vocab: Any = None, timeout: float = 5.0, memory_gb: float = 4.0,
         docs: list[Any] | None = None, progress: bool = False, keep: int = 40,
         targeted: float = 0.3) -> dict[str, Any]:
    """Run ``n`` cases; returns the tally (counts by status, stage and class, the slowest cases, every crash and
    stall up to ``keep`` of each with its declaration)."""
    if vocab is None:
        from ..tokenmap import Vocabulary
        vocab = Vocabulary.smollm2()
    rng = random.Random(seed)
    gen = Gen(rng, docs, targeted)
    runner = Runner(vocab, timeout=timeout, memory_gb=memory_gb)
    status: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    reached: Counter[str] = Counter()
    bad_by_class: Counter[str] = Counter()
    bad: list[dict[str, Any]] = []
    seconds: list[float] = []
    slowest: list[tuple[float, Any]] = []
    t0 = time.time()
    try:
        for k in range(n):
            try:
                doc = gen.declaration()
            except RecursionError:
                continue
            out = runner.run(doc)
            status[out["status"]] += 1
            reached[out.get("stage", "-")] += 1
            if out["status"] == "refused":
                refused[out["error_class"]] += 1
            if "seconds" in out:
                seconds.append(out["seconds"])
                slowest.append((out["seconds"], k))
                if len(slowest) > 200:
                    slowest = sorted(slowest, reverse=True)[:20]
            if out["status"] in ("crashed", "stalled", "memory", "died"):
                cls = f"{out['status']}: {out.get('exception', '')} {out.get('where', out.get('stage', ''))}".strip()
                bad_by_class[cls] += 1
                if bad_by_class[cls] <= 3 and len(bad) < keep:
                    bad.append({"case": k, **out, "declaration": _clip(doc)})
            if progress and (k + 1) % 500 == 0:
                print(f"  {k + 1:,}/{n:,} cases, {time.time() - t0:.0f} s: {dict(status)}", file=sys.stderr,
                      flush=True)
    finally:
        runner.close()
    seconds.sort()

    def pct(q: float) -> float:
        return seconds[min(len(seconds) - 1, int(q / 100 * len(seconds)))] if seconds else 0.0

    return {"cases": n, "seed": seed, "targeted": targeted, "timeout_s": timeout, "memory_gb": memory_gb,
            "status": dict(status),
            "refused_by_class": dict(refused.most_common()), "stage_reached": dict(reached),
            "bad_by_class": dict(bad_by_class.most_common()), "bad": bad,
            "seconds_p50": pct(50), "seconds_p99": pct(99), "seconds_max": seconds[-1] if seconds else 0.0,
            "restarts": runner.restarts, "wall_s": time.time() - t0}


def _clip(doc: Any, limit: int = 4000) -> Any:
    text = json.dumps(doc)
    return doc if len(text) <= limit else text[:limit] + "..."


def markdown(doc: dict[str, Any]) -> str:
    t = doc["tally"]
    lines = ["# Fuzzing the compile path", "",
             f"`factorspec bench fuzz --cases {t['cases']} --seed {t['seed']} --targeted {t.get('targeted', 0.3)}`: "
             f"{t['cases']:,} declarations (drawn hostile to a degree drawn per declaration; clean with one targeted "
             f"defect, a share of {t.get('targeted', 0.3):g}; or JSONSchemaBench schemas with mutated keywords) "
             f"through `Spec.from_json`, `Layout`, the first mask over "
             f"{doc['vocab']}'s vocabulary and the first solution; each case in a forked worker, "
             f"{t['timeout_s']:g} s and {t['memory_gb']:g} GiB at most.", "",
             f"Machine: {doc['machine']}. Commit {doc.get('commit', '?')}. {doc.get('note') or ''}".rstrip(), "",
             "| outcome | cases |", "|---|---:|"]
    for k, v in sorted(t["status"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k} | {v:,} |")
    lines += ["", f"Time per case: p50 {t['seconds_p50'] * 1e3:.1f} ms, p99 {t['seconds_p99'] * 1e3:.1f} ms, max "
              f"{t['seconds_max']:.2f} s; wall {t['wall_s']:.0f} s; worker restarts {t['restarts']}.", "",
              "Stage reached (the last one started):", "", "| stage | cases |", "|---|---:|"]
    for k in (*STAGES, "-"):
        if k in t["stage_reached"]:
            lines.append(f"| {k} | {t['stage_reached'][k]:,} |")
    lines += ["", "Refusals by class:", "", "| class | cases |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in t["refused_by_class"].items()]
    lines += ["", "Crashes, stalls and memory failures by class (none expected):", ""]
    if t["bad_by_class"]:
        lines += ["| class | cases |", "|---|---:|"] + [f"| {k} | {v:,} |" for k, v in t["bad_by_class"].items()]
        lines += ["", "The first cases of each class are in `fuzz.json` (`tally.bad`) with their declarations."]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def run(args: argparse.Namespace) -> int:
    from ..tokenmap import Vocabulary
    vocab = Vocabulary.smollm2()
    docs = corpus(limit=2000)
    tally = fuzz(args.cases, seed=args.seed, vocab=vocab, timeout=args.case_timeout, docs=docs, progress=True,
                 targeted=args.targeted)
    doc = {"suite": "fuzz", "vocab": "smollm2", "machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
           f"{platform.python_version()}", "commit": _commit(), "note": args.bench_note, "tally": tally}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz.json").write_text(json.dumps(doc, indent=1, default=repr) + "\n")
    (out / "fuzz.md").write_text(markdown(doc))
    print(markdown(doc))
    bad = sum(v for k, v in tally["status"].items() if k in ("crashed", "stalled", "memory", "died"))
    return 1 if bad else 0
