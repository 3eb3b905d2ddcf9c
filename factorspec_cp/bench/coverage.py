"""``factorspec bench coverage``: how much of real-world JSON Schema the strict compiler takes, and whether what it
takes is ever weaker than the schema.

Datasets: every ``jsonschemabench/*.jsonl`` file (one schema per line, raw text) and the official JSON Schema Test
Suite (``draft2020-12`` and ``draft7``, their ``optional/`` folders as datasets of their own). Per dataset each
schema is one of: *compiled* (``Spec(schema)`` took it), *refused* (a typed :class:`DeclarationError`, tallied by
class and by keyword/reason), *crashed* (any other exception: a bug, listed) or *invalid JSON*.

"None silently weakened", checked two ways, neither of which uses ``jsonschema`` to decide acceptance:

- Test Suite: for every group whose schema compiles, each test datum is judged by two independent acceptors of the
  compiled layout: :func:`accepts` walks the compiled node tree (objects carry only declared properties and every
  required one; arrays respect ``minItems``/``maxItems``; a field's value is in its domain with JSON equality,
  ``true != 1``; a free leaf's type, length, pattern (``re.search`` with ECMA 262 classes) and bounds hold), and
  :func:`layout_accepts` feeds the canonical rendering of the datum through the byte automaton that masks tokens
  (:class:`~factorspec_cp.tokenmap.layout.Layout`). A datum either accepts while the suite says ``valid: false``
  is a *silent weakening*. Valid data the layout rejects are *narrowing* (allowed; counted).
- Random records: for every schema that compiles (both sources), a few records the layout could emit (random
  domain values, free strings from a random walk of the free slot's automaton, boundary and random free numbers)
  are validated by ``jsonschema`` under the schema's own draft (``$schema``; Draft 2020-12 by default, Draft 7 for
  the draft7 suite). Any failure is a weakening. Where the schema states a relation (``uniqueItems``: an
  all_different the session enforces, not the layout), the acceptors evaluate it too, and drawn records that break
  it are discarded and counted (``discarded_by_relations``).

Results: ``<out>/coverage.json`` and ``<out>/coverage.md`` (summary), and ``<out>/coverage/*.jsonl`` (every crash,
weakening, refusal and per-schema outcome). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import re
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..errors import DeclarationError
from ..schema import ArrayNode, Field, FreeField, Leaf, Node, ObjectNode, UnionNode, jkey
from ..spec import Spec
from ..tokenmap.freeslot import FORMATS
from . import summary_ms

#: Records generated per compiled schema (default).
SAMPLES = 3
#: Seconds one schema may take (compile, layout, checks) before it is listed as a timeout (0: no limit).
TIMEOUT = 20.0
#: Items listed per category in coverage.json (all of them go to coverage/*.jsonl).
LIST_CAP = 40
TOP_REASONS = 15


# ------------------------------------------------------------------------------------------------------- sources
@dataclass
class Item:
    """One schema to compile: its id, the raw text (or already-parsed document), and suite test cases if any."""

    id: str
    text: str | None = None
    doc: Any = None
    parsed: bool = False
    tests: list[dict[str, Any]] | None = None
    draft: str | None = None  # "draft2020-12" | "draft7" for suite groups


def jsonschemabench_files(root: Path | None = None) -> list[Path]:
    from ..workloads._data import data_dir
    root = root or data_dir() / "jsonschemabench"
    return sorted(root.glob("*.jsonl"))


def jsonschemabench_items(path: Path, limit: int | None = None) -> Iterator[Item]:
    with open(path, encoding="utf-8") as fh:
        for k, line in enumerate(fh):
            if limit is not None and k >= limit:
                break
            row = json.loads(line)
            yield Item(id=str(row.get("unique_id", k)), text=row["json_schema"])


def suite_root(root: Path | None = None) -> Path:
    from ..workloads._data import data_dir
    return root or data_dir() / "json-schema-test-suite" / "tests"


def suite_items(draft: str, optional: bool, root: Path | None = None) -> Iterator[Item]:
    """Groups of ``tests/<draft>/*.json`` (``optional``: of ``tests/<draft>/optional/**.json``)."""
    base = suite_root(root) / draft
    files = sorted((base / "optional").rglob("*.json")) if optional else sorted(base.glob("*.json"))
    for path in files:
        groups = json.loads(path.read_text(encoding="utf-8"))
        rel = path.relative_to(base).as_posix()
        for g, group in enumerate(groups):
            doc = group["schema"]
            if draft == "draft7" and isinstance(doc, dict) and "$schema" not in doc:  # the folder's dialect
                doc = {"$schema": "http://json-schema.org/draft-07/schema#", **doc}
            yield Item(id=f"{rel}#{g} {group.get('description', '')}", doc=doc, parsed=True,
                       tests=group.get("tests", []), draft=draft)


def datasets(args: argparse.Namespace) -> list[tuple[str, list[Item]]]:
    out: list[tuple[str, list[Item]]] = []
    limit = getattr(args, "limit", None)
    only = getattr(args, "datasets", None)
    for path in jsonschemabench_files():
        out.append((f"jsonschemabench/{path.stem}", list(jsonschemabench_items(path, limit))))
    for draft in ("draft2020-12", "draft7"):
        out.append((f"test-suite/{draft}", list(suite_items(draft, False))))
        out.append((f"test-suite/{draft}/optional", list(suite_items(draft, True))))
    if only:
        wanted = [w.strip() for w in only.split(",") if w.strip()]
        out = [(n, items) for n, items in out if any(w in n for w in wanted)]
    return out


# ------------------------------------------------------------------------------------------------------- refusals
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def refusal_reason(e: DeclarationError) -> str:
    """A short, groupable reason: ``keyword 'X'`` for an unsupported keyword, else the message without values."""
    msg = e.message
    m = re.fullmatch(r"keyword '(.*)' is not supported here", msg)
    if m:
        beside = re.match(r"supported at this place: (anyOf|oneOf) \(", e.hint or "")
        return f"keyword '{m.group(1)}'" + (f" beside {beside.group(1)}" if beside else "")
    m = re.fullmatch(r"type '(.*)' is not supported", msg)
    if m:
        return f"type '{m.group(1)}'"
    if msg.startswith("$ref "):
        return "$ref " + _QUOTED.sub("", msg[5:]).strip()
    return _QUOTED.sub("…", msg)


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame of the traceback (for grouping crashes)."""
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return "?"
    f = tb[-1]
    return f"{Path(f.filename).name}:{f.lineno} in {f.name}"


# ------------------------------------------------------------------------------------------------------- acceptors
_ECMA_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_ECMA_CLASS = {"d": "0-9", "w": "A-Za-z0-9_", "s": _ECMA_SPACE}


def ecma_regex(pattern: str) -> str:
    r"""A Python regex with ECMA 262's meaning of ``\d \w \s`` (and negations), ``.`` and ``$`` (no multiline).

    >>> ecma_regex(r"^\d+$")
    '^[0-9]+\\Z'
    """
    out: list[str] = []
    k, in_class, class_start = 0, False, 0
    while k < len(pattern):
        ch = pattern[k]
        if ch == "\\" and k + 1 < len(pattern):
            nx = pattern[k + 1]
            if nx in _ECMA_CLASS:
                out.append(_ECMA_CLASS[nx] if in_class else f"[{_ECMA_CLASS[nx]}]")
            elif nx.lower() in _ECMA_CLASS and not in_class:
                out.append(f"[^{_ECMA_CLASS[nx.lower()]}]")
            elif nx == "c" and pattern[k + 2: k + 3].isascii() and pattern[k + 2: k + 3].isalpha():
                out.append(f"\\x{ord(pattern[k + 2]) % 32:02x}")  # ECMA control escape \cX
                k += 1
            else:
                out.append(ch + nx)
            k += 2
            continue
        if in_class:
            if ch == "]" and k != class_start:
                in_class = False
            out.append(ch)
        elif ch == "[":
            in_class = True
            class_start = k + 1 + (pattern[k + 1: k + 2] == "^")
            out.append(ch)
        elif ch == "$":
            out.append("\\Z")
        elif ch == ".":
            out.append("[^\\n\\r\\u2028\\u2029]")
        else:
            out.append(ch)
        k += 1
    return "".join(out)


_PATTERNS: dict[tuple[str, str], Any] = {}


def pattern_search(pattern: str, s: str, dialect: str = "ecma") -> bool:
    """``pattern`` finds a match somewhere in ``s`` (JSON Schema's ``pattern``: unanchored; ``dialect`` "ecma":
    ECMA 262 as JSON Schema specifies, or "python": ``re.search`` as the ``jsonschema`` package does)."""
    key = (pattern, dialect)
    rx = _PATTERNS.get(key)
    if rx is None:
        rx = False
        for text in ((ecma_regex(pattern), pattern) if dialect == "ecma" else (pattern,)):
            for mod in ("re", "regex"):
                try:
                    rx = __import__(mod).compile(text)
                    break
                except Exception:  # not this dialect; try the next
                    continue
            if rx is not False:
                break
        _PATTERNS[key] = rx
    if rx is False:
        raise ValueError(f"pattern {pattern!r} compiles in neither re nor regex")
    return rx.search(s) is not None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bounds_ok(schema: dict[str, Any], v: float) -> bool:
    try:
        if "minimum" in schema and v < schema["minimum"]:
            return False
        if "maximum" in schema and v > schema["maximum"]:
            return False
        if "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]:
            return False
        if "exclusiveMaximum" in schema and v >= schema["exclusiveMaximum"]:
            return False
    except TypeError:
        return False
    return True


def free_accepts(f: FreeField, v: Any, dialect: str = "ecma") -> bool:
    """A free leaf takes ``v``: its type, then length and pattern (strings), bounds and multipleOf (numbers)."""
    sch = f.schema
    typ = f.type
    if typ == "string":
        if not isinstance(v, str):
            return False
        if len(v) < sch.get("minLength", 0) or ("maxLength" in sch and len(v) > sch["maxLength"]):
            return False
        fmt = sch.get("format")
        if isinstance(fmt, str) and fmt in FORMATS and re.fullmatch(FORMATS[fmt], v) is None:
            return False
        return "pattern" not in sch or pattern_search(sch["pattern"], v, dialect)
    if typ == "integer":
        if not _is_number(v) or v != int(v):
            return False
        step = sch.get("multipleOf", 1)
        return _bounds_ok(sch, v) and Fraction(int(v)) % Fraction(step) == 0
    if typ == "number":
        return _is_number(v) and _bounds_ok(sch, v)
    return False


def accepts(node: Node, v: Any, dialect: str = "ecma") -> bool:
    """Whether ``v`` is a record the compiled layout can emit (up to JSON equality), by walking the node tree.
    ``dialect``: how patterns read (see :func:`pattern_search`)."""
    if isinstance(node, Leaf):
        f = node.field
        if isinstance(f, Field):
            return v in f
        return free_accepts(f, v, dialect)
    if isinstance(node, ObjectNode):
        if not isinstance(v, dict):
            return False
        names = {p.name for p in node.properties}
        if not set(v) <= names:
            return False
        for p in node.properties:
            if p.name in v:
                if not accepts(p.node, v[p.name], dialect):
                    return False
            elif p.required:
                return False
        return True
    if isinstance(node, ArrayNode):
        if not isinstance(v, list) or len(v) < node.min_items:
            return False
        if node.max_items is not None and len(v) > node.max_items:
            return False
        return all(accepts(node.item(i), x, dialect)
                   for i, x in enumerate(v))
    if isinstance(node, UnionNode):
        if node.discriminator is None:
            return any(accepts(b, v, dialect) for b in node.branches)
        if not isinstance(v, dict) or node.discriminator not in v:
            return False
        try:
            tag = jkey(v[node.discriminator])
        except TypeError:
            return False
        return any(jkey(t) == tag and accepts(b, v, dialect) for t, b in zip(node.tags, node.branches))
    raise TypeError(f"unknown node {node!r}")  # pragma: no cover


def _numbers_as(v: Any, kind: type) -> Any:
    """``v`` with every integral number written as ``kind`` (``int``: ``1``, ``float``: ``1.0``)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() and abs(v) < 2**53:
        return kind(v)
    if isinstance(v, list):
        return [_numbers_as(x, kind) for x in v]
    if isinstance(v, dict):
        return {k: _numbers_as(x, kind) for k, x in v.items()}
    return v


def layout_accepts(layout: Any, v: Any) -> bool:
    """Whether the byte automaton accepts a rendering of ``v`` as a whole record: its canonical rendering, or the
    one with integral numbers written ``1``, or ``1.0`` (JSON Schema equates them, and the layout writes a field's
    values as declared: ``{"const": -2.0}`` emits ``-2.0``)."""
    seen = set()
    for w in (v, _numbers_as(v, int), _numbers_as(v, float)):
        try:
            data = layout.render(w).encode("utf-8")
        except (ValueError, TypeError, UnicodeEncodeError):  # a shape the layout has no place for; a lone surrogate
            continue
        if data in seen:
            continue
        seen.add(data)
        state = layout.advance(layout.start(), data)
        if state is not None and layout.accepting(state):
            return True
    return False


# ------------------------------------------------------------------------------------------------------- generator
class GenSkip(Exception):
    """The generator cannot make a value for this leaf (a free slot refused, or a walk that did not finish)."""


class Generator:
    """Random records the layout can emit: the compiled tree, with free leaves drawn from the layout's own slots."""

    def __init__(self, rng: random.Random, layout: Any = None):
        self.rng = rng
        self._slots: dict[int, Any] = {}
        from ..tokenmap.layout import FREE
        for ins in getattr(layout, "_code", ()):  # reuse the layout's free slots (building one can be slow)
            if ins[0] == FREE and isinstance(ins[3], FreeField):
                self._slots[id(ins[3])] = (ins[2], ins[3])

    def slot(self, f: FreeField) -> Any:
        hit = self._slots.get(id(f))
        if hit is None:
            from ..tokenmap.layout import _free_slot
            try:
                hit = (_free_slot(f), f)  # keep f alive so that its id is not reused
            except DeclarationError as e:
                raise GenSkip(f"free slot {f.pointer}: {e.message}") from None
            self._slots[id(f)] = hit
        return hit[0]

    def record(self, node: Node) -> Any:
        rng = self.rng
        if isinstance(node, Leaf):
            f = node.field
            if isinstance(f, Field):
                vals = f.values
                if isinstance(vals, range) and len(vals) > 2 and rng.random() < 0.4:
                    return rng.choice([vals[0], vals[-1]])
                return vals[rng.randrange(len(vals))]
            return self.free(f)
        if isinstance(node, ObjectNode):
            return {p.name: self.record(p.node) for p in node.properties if p.required or rng.random() < 0.5}
        if isinstance(node, ArrayNode):
            hi = node.max_items if node.max_items is not None else node.min_items + 3
            n = rng.randint(node.min_items, min(hi, node.min_items + 4))
            return [self.record(node.item(i)) for i in range(n)]
        if isinstance(node, UnionNode):
            return self.record(rng.choice(node.branches))
        raise TypeError(f"unknown node {node!r}")  # pragma: no cover

    def free(self, f: FreeField) -> Any:
        from ..tokenmap.freeslot import NOTHING, IntegerSlot, NumberSlot, StringSlot
        s = self.slot(f)
        if isinstance(s, StringSlot):
            return self._walk_string(s, f)
        if isinstance(s, IntegerSlot):
            cands = self._integer_candidates(s)
        elif isinstance(s, NumberSlot):
            cands = self._number_candidates(s)
        else:  # pragma: no cover
            raise GenSkip(f"unknown slot {type(s).__name__}")
        self.rng.shuffle(cands)
        for text in cands:
            sub = s.start
            for b in text.encode():
                sub = s.step(sub, b)
                if sub is None:
                    break
            if sub is not None and s.value(sub) is not NOTHING:
                return json.loads(text)
        raise GenSkip(f"no candidate number for {f.pointer}")

    def _integer_candidates(self, s: Any) -> list[str]:
        lo, hi, step = s.lo, s.hi, s.step_
        a = lo if lo is not None else (hi - 1000 if hi is not None else -1000)
        b = hi if hi is not None else a + 2000
        xs = [a, b, a + step, b - step, 0, self.rng.randint(a, b) if a <= b else a]
        xs += [x - (x - s.base) % step for x in xs]
        return [str(x) for x in xs]

    def _number_candidates(self, s: Any) -> list[str]:
        (lo, lo_in), (hi, hi_in) = s.lo, s.hi
        a = lo if lo is not None else (hi - 1000 if hi is not None else Fraction(-1000))
        b = hi if hi is not None else a + 2000
        xs: list[Fraction] = []
        if lo is not None and lo_in:
            xs.append(lo)
        if hi is not None and hi_in:
            xs.append(hi)
        span = b - a
        inner = [a + span * Fraction(self.rng.random()), (a + b) / 2, a + span / 1000, b - span / 1000, Fraction(0)]
        xs += [Fraction(round(float(x), 3)) for x in inner] + inner
        out = []
        for x in xs:
            out.append(str(int(x)) if x.denominator == 1 else repr(float(x)))
        return out

    def _walk_string(self, s: Any, f: FreeField) -> str:
        """A random walk of the string slot's automaton: bytes it allows, closing the string near a random
        target length (every prefix the slot keeps can still be finished)."""
        from ..tokenmap.freeslot import NOTHING
        rng = self.rng
        lo = f.schema.get("minLength", 0)
        hi = f.schema.get("maxLength")
        target = rng.randint(lo, lo + 12 if hi is None else min(hi, lo + 12))
        sub = s.start
        for _ in range(8 * (target + 40)):
            nxt = s.next_bytes(sub)
            if not nxt:
                break
            n = sub[3] if isinstance(sub, tuple) and len(sub) == 5 else 0
            if 0x22 in nxt and (n >= target or len(nxt) == 1) and sub != s.start:
                after = s.step(sub, 0x22)
                if after is not None and s.value(after) is not NOTHING:
                    return s.value(after)  # type: ignore[no-any-return]
            ascii_ = sorted(b for b in nxt if 0x20 <= b < 0x7F and b != 0x22 and (b != 0x5C or rng.random() < 0.2))
            other = sorted(nxt - set(ascii_) - {0x22})
            pool = ascii_ if ascii_ and (not other or rng.random() < 0.85) else other or sorted(nxt)
            sub = s.step(sub, rng.choice(pool))
            if sub is None:  # pragma: no cover - next_bytes promised a live step
                break
        raise GenSkip(f"string walk did not finish for {f.pointer}")


def validator_for(doc: Any, draft: str | None) -> Any:
    import jsonschema
    default = jsonschema.Draft7Validator if draft == "draft7" else jsonschema.Draft202012Validator
    cls = jsonschema.validators.validator_for(doc, default=default) if isinstance(doc, dict) else default
    return cls(doc, format_checker=cls.FORMAT_CHECKER)  # formats asserted: the ones we compile are enforced


# ------------------------------------------------------------------------------------------------------- one schema
@dataclass
class Tally:
    """Counts and lists for one dataset."""

    name: str
    total: int = 0
    invalid_json: int = 0
    compiled: int = 0
    refused: int = 0
    crashed: int = 0
    refused_by_class: Counter = field(default_factory=Counter)
    refused_by_reason: Counter = field(default_factory=Counter)
    crashes: list[dict[str, Any]] = field(default_factory=list)
    layout_built: int = 0
    layout_refused: int = 0
    layout_refused_by_reason: Counter = field(default_factory=Counter)
    layout_crashes: list[dict[str, Any]] = field(default_factory=list)
    # suite check (compiled groups only)
    tests: int = 0
    invalid_tests: int = 0
    invalid_rejected: int = 0
    valid_accepted: int = 0
    valid_rejected: int = 0
    valid_accepted_layout: int = 0
    weakenings_tree: list[dict[str, Any]] = field(default_factory=list)
    weakenings_layout: list[dict[str, Any]] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    check_errors: list[dict[str, Any]] = field(default_factory=list)
    # random records
    records: int = 0
    records_valid: int = 0
    records_skipped: int = 0
    records_discarded: int = 0  # drawn by the layout but breaking a relation the schema states (uniqueItems)
    skip_reasons: Counter = field(default_factory=Counter)
    weakenings_random: list[dict[str, Any]] = field(default_factory=list)
    layout_rejects_generated: list[dict[str, Any]] = field(default_factory=list)
    tree_rejects_generated: list[dict[str, Any]] = field(default_factory=list)
    validator_errors: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    timeouts: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    compile_seconds: float = 0.0
    compile_times: list[float] = field(default_factory=list)  # ours, seconds per compiled schema
    first_mask_times: list[float] = field(default_factory=list)  # ours: compile + layout + decoder + first mask
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)  # XGrammar, llguidance: see _engine_check

    @property
    def weakenings(self) -> int:
        return len(self.weakenings_tree) + len(self.weakenings_layout) + len(self.weakenings_random)

    def summary(self, cap: int = LIST_CAP) -> dict[str, Any]:
        def short(xs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [_short(x) for x in xs[:cap]]

        return {
            "dataset": self.name, "total": self.total, "invalid_json": self.invalid_json, "compiled": self.compiled,
            "refused": self.refused, "crashed": self.crashed,
            "refused_by_class": dict(self.refused_by_class.most_common()),
            "top_refusal_reasons": dict(self.refused_by_reason.most_common(TOP_REASONS)),
            "crashes": short(self.crashes),
            "layout": {"built": self.layout_built, "refused": self.layout_refused,
                       "refused_by_reason": dict(self.layout_refused_by_reason.most_common(TOP_REASONS)),
                       "crashed": len(self.layout_crashes), "crashes": short(self.layout_crashes)},
            "suite_check": None if not self.tests else {
                "tests": self.tests, "invalid_tests": self.invalid_tests, "invalid_rejected": self.invalid_rejected,
                "invalid_accepted_tree": len(self.weakenings_tree),
                "invalid_accepted_layout": len(self.weakenings_layout),
                "valid_accepted": self.valid_accepted, "valid_rejected_narrowing": self.valid_rejected,
                "valid_accepted_layout": self.valid_accepted_layout,
                "tree_vs_layout_disagreements": len(self.disagreements), "check_errors": len(self.check_errors),
                "weakenings_tree": short(self.weakenings_tree), "weakenings_layout": short(self.weakenings_layout),
                "disagreements": short(self.disagreements), "errors": short(self.check_errors)},
            "random_records": {
                "generated": self.records, "valid": self.records_valid, "invalid": len(self.weakenings_random),
                "discarded_by_relations": self.records_discarded,
                "schemas_skipped": self.records_skipped, "skip_reasons": dict(self.skip_reasons.most_common(10)),
                "layout_rejects_generated": len(self.layout_rejects_generated),
                "tree_rejects_generated": len(self.tree_rejects_generated),
                "tree_rejects": short(self.tree_rejects_generated),
                "validator_errors": len(self.validator_errors),
                "weakenings": short(self.weakenings_random),
                "layout_rejects": short(self.layout_rejects_generated)},
            "timeouts": short(self.timeouts),
            "seconds": round(self.seconds, 3), "compile_ms_mean": round(1e3 * self.compile_seconds
                                                                          / max(1, self.total), 4),
            "compile_ms": summary_ms(self.compile_times), "first_mask_ms": summary_ms(self.first_mask_times),
            "engines": {name: {**{k: v for k, v in e.items() if k not in ("times", "reasons", "weakenings")},
                               "compile_ms": summary_ms(e["times"]),
                               "top_refusal_reasons": dict(e["reasons"].most_common(TOP_REASONS)),
                               "weakenings": short(e["weakenings"])}
                        for name, e in self.engines.items()},
        }


def _short(x: dict[str, Any], limit: int = 600) -> dict[str, Any]:
    out = {}
    for k, v in x.items():
        text = json.dumps(v, ensure_ascii=False, default=str) if not isinstance(v, str) else v
        out[k] = v if len(text) <= limit else text[:limit] + "…"
    return out


class SchemaTimeout(BaseException):
    """One schema ran past its time budget (a BaseException, so that no ``except Exception`` swallows it)."""


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise SchemaTimeout

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _seed(seed: int, ident: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{ident}".encode()).digest()[:8], "big")


def _engine_check(item: Item, tally: Tally, engines: list[Any]) -> None:
    """Each other engine on the same schema: compiled or refused (its reason), compile milliseconds, and on the
    Test Suite the invalid data it accepts (weakenings) and the valid data it rejects."""
    for eng in engines:
        e = tally.engines.setdefault(eng.name, {"version": eng.version, "compiled": 0, "refused": 0,
                                                "reasons": Counter(), "times": [], "tests": 0, "invalid_tests": 0,
                                                "invalid_accepted": 0, "valid_rejected": 0, "check_errors": 0,
                                                "weakenings": []})
        compiled, reason, seconds = eng.compile(item.doc)
        e["times"].append(seconds)
        if compiled is None:
            e["refused"] += 1
            e["reasons"][reason] += 1
            continue
        e["compiled"] += 1
        for case in item.tests or []:
            data, valid = case["data"], bool(case["valid"])
            e["tests"] += 1
            e["invalid_tests"] += not valid
            try:
                ok = eng.accepts(compiled, item.doc, data)
            except Exception:  # noqa: BLE001 - an engine's own failure on a datum (listed as a count)
                e["check_errors"] += 1
                continue
            if ok and not valid:
                e["invalid_accepted"] += 1
                e["weakenings"].append({"group": item.id, "test": case.get("description", ""), "data": data})
            elif valid and not ok:
                e["valid_rejected"] += 1


def _first_mask(spec: Spec, vocab: Any) -> float:
    """Seconds from a compiled spec to its first mask over ``vocab`` (layout, token index, session, mask)."""
    import numpy as np
    t = time.perf_counter()
    dec = spec.decoder(vocab)
    dec.fill_mask(np.zeros((vocab.size + 31) // 32, dtype=np.int32))
    return time.perf_counter() - t


def process(item: Item, tally: Tally, *, samples: int = SAMPLES, seed: int = 0,
            row: dict[str, Any] | None = None, engines: list[Any] | None = None,
            vocab: Any = None) -> dict[str, Any]:
    """Compile one schema, check it, and record the outcome in ``tally``; returns the outcome row (``row``, filled
    in as the stages go: ``stage`` says which one ran last). ``engines``: other engines run on the same schema
    (:mod:`.coverage_engines`); ``vocab``: time our first mask over it."""
    tally.total += 1
    row = {} if row is None else row
    row.update(id=item.id, stage="compile")
    if not item.parsed:
        try:
            item.doc = json.loads(item.text or "")
        except (json.JSONDecodeError, RecursionError) as e:
            tally.invalid_json += 1
            row["status"] = "invalid_json"
            row["error"] = str(e)[:200]
            return row
    if engines:
        row["stage"] = "other engines"
        _engine_check(item, tally, engines)
        row["stage"] = "compile"
    t = time.perf_counter()
    try:
        spec = Spec(item.doc)  # the schema alone, no relations
    except DeclarationError as e:
        tally.compile_seconds += time.perf_counter() - t
        tally.refused += 1
        reason = refusal_reason(e)
        tally.refused_by_class[type(e).__name__] += 1
        tally.refused_by_reason[reason] += 1
        row.update(status="refused", error_class=type(e).__name__, reason=reason, pointer=e.pointer)
        return row
    except Exception as e:  # noqa: BLE001 - every other exception is a bug to list
        tally.compile_seconds += time.perf_counter() - t
        tally.crashed += 1
        crash = {"dataset": tally.name, "id": item.id, "exception": type(e).__name__, "message": str(e)[:300],
                 "where": _where(e), "schema": item.doc}
        tally.crashes.append(crash)
        row.update(status="crashed", exception=type(e).__name__, where=crash["where"])
        return row
    took = time.perf_counter() - t
    tally.compile_seconds += took
    tally.compile_times.append(took)
    tally.compiled += 1
    row["status"] = "compiled"
    root = spec.compiled.root

    from ..tokenmap.layout import Layout
    layout = None
    row["stage"] = "layout"
    try:
        layout = Layout(spec)
        tally.layout_built += 1
    except DeclarationError as e:
        tally.layout_refused += 1
        tally.layout_refused_by_reason[refusal_reason(e)] += 1
        row["layout"] = f"refused: {refusal_reason(e)}"
    except Exception as e:  # noqa: BLE001
        tally.layout_crashes.append({"dataset": tally.name, "id": item.id, "exception": type(e).__name__,
                                     "message": str(e)[:300], "where": _where(e), "schema": item.doc})
        row["layout"] = f"crashed: {type(e).__name__}"

    if vocab is not None and layout is not None:
        row["stage"] = "first mask"
        try:
            tally.first_mask_times.append(took + _first_mask(spec, vocab))
        except DeclarationError as e:  # a budget error on the way is a refusal of the layout, listed with it
            tally.layout_refused_by_reason[f"first mask: {refusal_reason(e)}"] += 1

    if item.tests is not None:
        row["stage"] = "suite check"
        _suite_check(item, tally, root, layout, spec)

    if samples > 0:
        row["stage"] = "random records"
        _random_check(item, tally, root, layout, samples, seed, spec)
    return row


def relations_hold(spec: Spec, v: Any) -> bool:
    """Whether ``v`` keeps the relations the schema itself states (``uniqueItems``: an all_different the session
    enforces, not the layout); ``True`` where there are none."""
    if not spec.instances:
        return True
    from ..spec import _get
    try:
        values = {p: _get(v, p) for p in spec.fields}
        return all(inst.relation.check(values) for inst in spec.instances)
    except (KeyError, IndexError, TypeError):
        return False


def _suite_check(item: Item, tally: Tally, root: Node, layout: Any, spec: Spec) -> None:
    for case in item.tests or []:
        tally.tests += 1
        data, valid = case["data"], bool(case["valid"])
        base = {"dataset": tally.name, "group": item.id, "test": case.get("description", ""), "schema": item.doc,
                "data": data, "valid": valid}
        try:
            tree = accepts(root, data)
        except Exception as e:  # noqa: BLE001 - a pattern neither dialect compiles, ...
            tally.check_errors.append({**base, "error": f"{type(e).__name__}: {e}"[:300]})
            tree = None
        lay = layout_accepts(layout, data) if layout is not None else None
        if not relations_hold(spec, data):  # neither accepts it (an acceptor that could not judge stays None)
            tree = None if tree is None else False
            lay = None if lay is None else False
        if not valid:
            tally.invalid_tests += 1
            if tree:
                tally.weakenings_tree.append(base)
            if lay:
                tally.weakenings_layout.append(base)
            if not tree and not lay:
                tally.invalid_rejected += 1
        else:
            if tree or (tree is None and lay):
                tally.valid_accepted += 1
            else:
                tally.valid_rejected += 1
            tally.valid_accepted_layout += bool(lay)
        if tree is not None and lay is not None and tree != lay:
            tally.disagreements.append({**base, "tree": tree, "layout": lay})


def _random_check(item: Item, tally: Tally, root: Node, layout: Any, samples: int, seed: int, spec: Spec) -> None:
    gen = Generator(random.Random(_seed(seed, item.id)), layout)
    records = []
    try:
        for _ in range(samples):
            records.append(gen.record(root))
    except GenSkip as e:
        tally.records_skipped += 1
        tally.skip_reasons[re.sub(r" for /\S*| /\S*:", ":", str(e))] += 1
        if not records:
            return
    try:
        validator = validator_for(item.doc, item.draft)
    except Exception as e:  # noqa: BLE001
        tally.validator_errors.append({"dataset": tally.name, "id": item.id, "error": f"{type(e).__name__}: {e}"})
        return
    for rec in records:
        if not relations_hold(spec, rec):  # the layout alone does not keep them: the session does
            tally.records_discarded += 1
            continue
        tally.records += 1
        try:
            errors = list(validator.iter_errors(rec))
        except Exception as e:  # noqa: BLE001 - e.g. a pattern Python's re cannot compile
            tally.validator_errors.append({"dataset": tally.name, "id": item.id, "record": rec,
                                           "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        if errors:
            err = errors[0]
            tally.weakenings_random.append({
                "dataset": tally.name, "id": item.id, "record": rec, "validator": type(validator).__name__,
                "error": err.message[:300], "at": "/" + "/".join(map(str, err.absolute_path)),
                "subschema": err.schema if isinstance(err.schema, dict) else repr(err.schema),
                "keyword": err.validator, "schema": item.doc})
        else:
            tally.records_valid += 1
        if layout is not None and not layout_accepts(layout, rec):
            tally.layout_rejects_generated.append({"dataset": tally.name, "id": item.id, "record": rec})
        try:
            tree_ok = accepts(root, rec)
        except Exception as e:  # noqa: BLE001 - a pattern neither dialect compiles
            tree_ok, why = False, f"{type(e).__name__}: {e}"[:200]
        else:
            why = "the tree acceptor (ECMA 262 patterns) rejects it"
        if not tree_ok:
            tally.tree_rejects_generated.append({"dataset": tally.name, "id": item.id, "record": rec, "why": why,
                                                 "schema": item.doc})


# ------------------------------------------------------------------------------------------------------- run
def run_dataset(name: str, items: list[Item], *, samples: int = SAMPLES, seed: int = 0,
                timeout: float | None = TIMEOUT, progress: bool = True, engines: list[Any] | None = None,
                vocab: Any = None) -> Tally:
    """Process every item of one dataset (each within ``timeout`` seconds, else listed under ``timeouts``)."""
    tally = Tally(name)
    t0 = time.perf_counter()
    for k, item in enumerate(items):
        row: dict[str, Any] = {}
        t = time.perf_counter()
        try:
            with _deadline(timeout):
                process(item, tally, samples=samples, seed=seed, row=row, engines=engines, vocab=vocab)
            row.pop("stage", None)  # kept only where a timeout struck
        except SchemaTimeout:
            tally.timeouts.append({"dataset": name, "id": item.id, "stage": row.get("stage"),
                                   "seconds": round(time.perf_counter() - t, 1), "schema": item.doc})
            row["timeout"] = row.get("stage")
        tally.outcomes.append(row)
        if progress and (k % 50 == 49 or k + 1 == len(items)):
            print(f"\r[bench coverage] {name:<34} {k + 1}/{len(items)} compiled {tally.compiled} "
                  f"refused {tally.refused} crashed {tally.crashed} weakened {tally.weakenings} "
                  f"{time.perf_counter() - t0:6.1f}s", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    tally.seconds = time.perf_counter() - t0
    return tally


def run(args: argparse.Namespace) -> int:
    samples = getattr(args, "samples", None)
    samples = SAMPLES if samples is None else samples
    seed = getattr(args, "seed", None) or 0
    out = Path(getattr(args, "out", None) or "benchmarks")
    t_start = time.perf_counter()
    timeout = getattr(args, "timeout", None)
    timeout = TIMEOUT if timeout is None else timeout
    wanted = [w.strip() for w in (getattr(args, "engines", "") or "").split(",") if w.strip()]
    vocab = others = None
    if wanted:  # the other engines and our first mask over Qwen3's vocabulary (151,643 tokens)
        from ..tokenmap import Vocabulary
        from .coverage_engines import engines as make_engines
        vocab = Vocabulary.qwen3()
        others = [e for e in make_engines(vocab) if e.name in wanted]
        missing = sorted(set(wanted) - {e.name for e in others})
        if missing:
            raise SystemExit(f"bench coverage: engines not installed: {', '.join(missing)} (pip install them, or "
                             "pass --engines with the ones you have)")
    tallies = [run_dataset(name, items, samples=samples, seed=seed, timeout=timeout, engines=others, vocab=vocab)
               for name, items in datasets(args)]
    doc = {
        "suite": "coverage",
        "command": getattr(args, "command_line", None) or "factorspec bench coverage " + " ".join(sys.argv[3:]),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.processor() or platform.machine()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": round(time.perf_counter() - t_start, 2),
        "samples_per_schema": samples, "seed": seed,
        "results": [t.summary() for t in tallies],
        "notes": NOTES,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
    md = markdown(doc)
    (out / "coverage.md").write_text(md)
    detail = out / "coverage"
    detail.mkdir(parents=True, exist_ok=True)
    lists = {"crashes": lambda t: t.crashes + t.layout_crashes,
             "timeouts": lambda t: t.timeouts,
             "weakenings": lambda t: ([{"oracle": "tree", **w} for w in t.weakenings_tree]
                                      + [{"oracle": "layout", **w} for w in t.weakenings_layout]
                                      + [{"oracle": "random", **w} for w in t.weakenings_random]),
             "disagreements": lambda t: t.disagreements,
             "layout_rejects_generated": lambda t: t.layout_rejects_generated,
             "tree_rejects_generated": lambda t: t.tree_rejects_generated,
             "validator_errors": lambda t: t.validator_errors + t.check_errors,
             "outcomes": lambda t: [{"dataset": t.name, **o} for o in t.outcomes]}
    for fname, get in lists.items():
        with open(detail / f"{fname}.jsonl", "w", encoding="utf-8") as fh:
            for t in tallies:
                for x in get(t):
                    fh.write(json.dumps(x, ensure_ascii=False, default=str) + "\n")
    print(md)
    bad = sum(t.crashed + len(t.layout_crashes) + t.weakenings + len(t.timeouts) for t in tallies)
    return 1 if bad else 0


NOTES = ("compiled: Spec(schema) took the schema; refused: a typed DeclarationError (by class and reason); crashed: "
         "any other exception (a bug). layout: the token layout (tokenmap.Layout) built for a compiled schema, or "
         "refused it (e.g. a pattern outside regular syntax). Suite check (compiled groups): each test datum judged "
         "by the compiled tree (tree) and by the byte automaton on its canonical rendering (layout); an invalid datum "
         "either accepts is a silent weakening; valid data rejected is narrowing (allowed). Random records: records "
         "the layout can emit (free strings by a random walk of the slot automaton, boundary and random free "
         "numbers) validated by jsonschema under the schema's draft; a failure is a weakening. ECMA-only: generated "
         "records that jsonschema (Python re) accepts but the tree acceptor, which reads patterns as ECMA 262 (the "
         "dialect JSON Schema specifies), rejects: e.g. a trailing newline under '$', or '\\r' under '.'.")


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# bench coverage", "", f"`{doc['command']}` on {doc['machine']['platform']} ({doc['date']}), "
             f"{doc['seconds']} s, {doc['samples_per_schema']} random records per compiled schema.", "",
             doc["notes"], "",
             "| dataset | total | invalid JSON | compiled | refused | crashed | timeouts | layout refused "
             "| suite tests (invalid) | weakened: tree / layout / random | valid accepted / narrowed "
             "| random records valid | ECMA-only | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        sc, rr = r["suite_check"], r["random_records"]
        suite = f"{sc['tests']} ({sc['invalid_tests']})" if sc else "-"
        weak = (f"{sc['invalid_accepted_tree']} / {sc['invalid_accepted_layout']} / {rr['invalid']}" if sc
                else f"- / - / {rr['invalid']}")
        acc = (f"{sc['valid_accepted']} / {sc['valid_rejected_narrowing']} (layout: {sc['valid_accepted_layout']} "
               f"accepted)" if sc else "-")
        pct = f" ({100 * r['compiled'] / r['total']:.1f}%)" if r["total"] else ""
        lines.append(f"| {r['dataset']} | {r['total']} | {r['invalid_json']} | {r['compiled']}{pct} | {r['refused']} "
                     f"| {r['crashed'] + r['layout']['crashed']} | {len(r['timeouts'])} | {r['layout']['refused']} "
                     f"| {suite} | {weak} | {acc} | {rr['valid']}/{rr['generated']} | {rr['tree_rejects_generated']} "
                     f"| {r['seconds']} |")
    if any(r.get("engines") for r in doc["results"]):
        lines += ["", "## Side by side: factorspec, XGrammar, llguidance (same schemas, same run)", "",
                  "compile ms: factorspec's `Spec(schema)`, and its first mask (compile, layout, token index, session "
                  "and the first mask over Qwen3's vocabulary; free-string token tables from the disk cache where "
                  "present); XGrammar's `compile_json_schema` (strict mode) and llguidance's grammar and validation "
                  "over the same vocabulary. Suite: invalid test data each one accepts (weakened) and valid ones "
                  "it rejects.", "",
                  "| dataset | engine | compiled | refused | compile ms p50 / p99 | first mask ms p50 / p99 "
                  "| suite: invalid accepted (weakened) / invalid | valid rejected | top refusal reasons |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in doc["results"]:
            n = r["total"] or 1
            sc = r["suite_check"]
            cm, fm = r.get("compile_ms", {}), r.get("first_mask_ms", {})
            top = "; ".join(f"{k} ({v})" for k, v in list(r["top_refusal_reasons"].items())[:3])
            weak = (f"{sc['invalid_accepted_layout']} / {sc['invalid_tests']}" if sc else "-")
            lines.append(f"| {r['dataset']} | factorspec | {r['compiled']} ({100 * r['compiled'] / n:.1f}%) "
                         f"| {r['refused']} | {cm.get('p50', '-')} / {cm.get('p99', '-')} "
                         f"| {fm.get('p50', '-')} / {fm.get('p99', '-')} | {weak} "
                         f"| {sc['valid_rejected_narrowing'] if sc else '-'} | {_md(top)} |")
            for name, e in r.get("engines", {}).items():
                ms = e["compile_ms"]
                top = "; ".join(f"{k} ({v})" for k, v in list(e["top_refusal_reasons"].items())[:3])
                weak = f"{e['invalid_accepted']} / {e['invalid_tests']}" if e["tests"] else "-"
                lines.append(f"| {r['dataset']} | {name} {e['version']} | {e['compiled']} "
                             f"({100 * e['compiled'] / n:.1f}%) | {e['refused']} | {ms.get('p50', '-')} / "
                             f"{ms.get('p99', '-')} | - | {weak} | {e['valid_rejected'] if e['tests'] else '-'} "
                             f"| {_md(top)} |")
    lines += ["", "## Top refusal reasons", ""]
    for r in doc["results"]:
        reasons = "; ".join(f"{k} ({v})" for k, v in r["top_refusal_reasons"].items())
        classes = ", ".join(f"{k} {v}" for k, v in r["refused_by_class"].items())
        lines.append(f"- **{r['dataset']}** [{classes}]: {reasons or '-'}")
        if r["layout"]["refused_by_reason"]:
            lay = "; ".join(f"{k} ({v})" for k, v in r["layout"]["refused_by_reason"].items())
            lines.append(f"  - layout refused: {lay}")
    problems = []
    for r in doc["results"]:
        for c in r["crashes"] + r["layout"]["crashes"]:
            problems.append(f"- crash in {r['dataset']} `{c['id']}`: {c['exception']} at {c['where']}: "
                            f"{c['message'][:160]}")
        sc = r["suite_check"] or {}
        for oracle in ("tree", "layout"):
            for w in sc.get(f"weakenings_{oracle}", []):
                problems.append(f"- weakening ({oracle}) in {r['dataset']} `{w['group']}` / {w['test']}: schema "
                                f"`{_json(w['schema'])}` accepts `{_json(w['data'])}` (suite: invalid)")
        for w in r["random_records"]["weakenings"]:
            problems.append(f"- weakening (random record) in {r['dataset']} `{w['id']}` at {w['at']}: {w['error']} "
                            f"(subschema `{_json(w['subschema'])}`)")
        for x in r["timeouts"]:
            problems.append(f"- timeout in {r['dataset']} `{x['id']}`: over {x['seconds']} s in stage {x['stage']}")
    ecma = []
    for r in doc["results"]:
        xs = r["random_records"]["tree_rejects"]
        if xs:
            shown = ", ".join(f"`{x['id']}`: `{_json(x['record'], 80)}`" for x in xs[:3])
            ecma.append(f"- {r['dataset']}: {r['random_records']['tree_rejects_generated']} records, e.g. {shown}")
    lines += ["", "## Crashes, weakenings and timeouts", ""] + (problems or ["none"])
    lines += ["", "## ECMA-only: generated records valid for jsonschema (Python re) but not under ECMA 262", ""]
    lines += ecma or ["none"]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def _json(v: Any, limit: int = 200) -> str:
    text = json.dumps(v, ensure_ascii=False, default=str)
    text = text.replace("|", "\\|").replace("`", "'")
    return text if len(text) <= limit else text[:limit] + "…"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m factorspec_cp.bench.coverage", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks")
    ap.add_argument("--samples", type=int, default=SAMPLES, help="random records per compiled schema")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="schemas per jsonschemabench file (default: all)")
    ap.add_argument("--datasets", default=None, help="comma-separated substrings of dataset names to keep")
    ap.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per schema (0: no limit)")
    args = ap.parse_args(argv)
    args.command_line = " ".join(["python -m factorspec_cp.bench.coverage", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
