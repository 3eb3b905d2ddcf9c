"""Schema coverage: over the JSON Schema Test Suite and real schemas (JSONSchemaBench), the strict compiler refuses
with a typed error or compiles, never crashes, and what it compiles is never weaker than the schema.

Weakening is judged without jsonschema by two acceptors of the compiled layout (the node tree, and the byte automaton
that masks tokens) against the suite's ``valid`` labels; and by jsonschema on random records the layout can emit.
The full sweep is ``factorspec bench coverage`` (``benchmarks/coverage.md``); this runs the suite and a sample.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from factorspec_cp import DeclarationError, Spec, UnsupportedKeyword
from factorspec_cp.bench import coverage as cov
from factorspec_cp.tokenmap.layout import Layout


def _have_data() -> bool:
    try:
        return cov.suite_root().is_dir() and bool(cov.jsonschemabench_files())
    except FileNotFoundError:
        return False


_DATA = _have_data()
needs_data = pytest.mark.skipif(not _DATA, reason="shared data (json-schema-test-suite, jsonschemabench) not found")

SUITES = [f"test-suite/{d}{o}" for d in ("draft2020-12", "draft7") for o in ("", "/optional")]
BENCH_SAMPLE = {"Github_trivial": None, "Github_easy": 650, "Glaiveai2K": 200}  # stem -> first N (None: all)
BENCH_SLOW = {"Github_easy": None}  # the whole file too, marked slow (the first third above is the fast share)
TIMEOUT = 3.0  # seconds per schema in these sweeps (known slow layouts are listed, not waited for)


@cache
def suite_tally(name: str) -> cov.Tally:
    draft = name.split("/")[1]
    return cov.run_dataset(name, list(cov.suite_items(draft, name.endswith("/optional"))), samples=3, seed=0,
                           progress=False)


@cache
def bench_tally(stem: str, first: int | None) -> cov.Tally:
    path = next(p for p in cov.jsonschemabench_files() if p.stem == stem)
    return cov.run_dataset(f"jsonschemabench/{stem}", list(cov.jsonschemabench_items(path, first)),
                           samples=3, seed=0, timeout=TIMEOUT, progress=False)


def _known_non_object_crash(c: dict[str, Any]) -> bool:
    """test_spec_of_a_non_object_schema_is_a_declaration_error: ``Spec(True)`` raises AttributeError."""
    return c["exception"] == "AttributeError" and not isinstance(c["schema"], dict)


def _known_whitespace_bug(w: dict[str, Any]) -> bool:
    """test_layout_strings_never_fail_jsonschema_pattern: a pattern failure on a string with U+001C..U+001F."""
    return w["keyword"] == "pattern" and any(c in json.dumps(w["record"]) for c in ("\\u001c", "\\u001d",
                                                                                    "\\u001e", "\\u001f"))


def _known_slow_alternation(x: dict[str, Any]) -> bool:
    """test_layout_builds_alternation_pattern_quickly: a layout build over a pattern of 5+ top-level alternatives."""
    pats: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            pats.extend(p for k, p in v.items() if k == "pattern" and isinstance(p, str))
            for w in v.values():
                walk(w)
        elif isinstance(v, list):
            for w in v:
                walk(w)

    walk(x["schema"])
    return x["stage"] == "layout" and any(p.count("|") >= 4 and "(" not in p for p in pats)


def _show(xs: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(cov._short(x, 300), ensure_ascii=False, default=str) for x in xs[:10])


# ------------------------------------------------------------------------------------------------------- sweeps
@needs_data
@pytest.mark.parametrize("name", SUITES)
def test_suite_never_crashes_and_never_weakens(name: str) -> None:
    t = suite_tally(name)
    assert t.total == t.compiled + t.refused + t.crashed + t.invalid_json
    assert t.compiled > 0 and t.refused > 0
    crashes = [c for c in t.crashes if not _known_non_object_crash(c)] + t.layout_crashes
    assert not crashes and not t.timeouts, _show(crashes + t.timeouts)
    assert not t.weakenings_tree, _show(t.weakenings_tree)
    assert not t.weakenings_layout, _show(t.weakenings_layout)
    assert not t.weakenings_random, _show(t.weakenings_random)
    # the check has something to bite on: invalid data of compiled groups, all rejected; valid data mostly accepted
    assert t.invalid_tests > 0 and t.invalid_rejected == t.invalid_tests
    assert t.valid_accepted > t.valid_rejected
    assert t.records > 0 and t.records_valid == t.records
    _only_dialect(t)


@needs_data
@pytest.mark.parametrize(("stem", "first"), [
    *[pytest.param(stem, BENCH_SAMPLE[stem], id=stem) for stem in sorted(BENCH_SAMPLE)],
    *[pytest.param(stem, n, id=f"{stem}-all", marks=pytest.mark.slow) for stem, n in sorted(BENCH_SLOW.items())]])
def test_jsonschemabench_never_crashes_and_random_records_validate(stem: str, first: int | None) -> None:
    t = bench_tally(stem, first)
    assert t.total == t.compiled + t.refused + t.crashed + t.invalid_json
    assert t.compiled > 0
    timeouts = [x for x in t.timeouts if not _known_slow_alternation(x)]
    assert not t.crashes and not t.layout_crashes and not timeouts, _show(t.crashes + t.layout_crashes + timeouts)
    assert not t.validator_errors, _show(t.validator_errors)
    weakened = [w for w in t.weakenings_random if not _known_whitespace_bug(w)]
    assert not weakened, _show(weakened)
    assert t.records >= 2 * (t.compiled - len(t.timeouts) - t.records_skipped)
    assert t.records_valid == t.records - len(t.weakenings_random)
    assert not t.layout_rejects_generated, _show(t.layout_rejects_generated)
    _only_dialect(t)


def _only_dialect(t: cov.Tally) -> None:
    """Generated records the tree acceptor rejects are rejected only for reading patterns as ECMA 262 (see
    test_layout_strings_match_ecma_patterns), never for anything else."""
    for x in t.tree_rejects_generated:
        root = Spec.from_json(x["schema"]).compiled.root
        assert cov.accepts(root, x["record"], "python"), x


@needs_data
def test_refusals_are_typed_and_named() -> None:
    t = suite_tally("test-suite/draft2020-12")
    assert set(t.refused_by_class) <= {"UnsupportedKeyword", "DeclarationError", "EmptySchema"}
    assert any(r.startswith("keyword 'if'") for r in t.refused_by_reason)
    rows = [o for o in t.outcomes if o.get("status") == "refused"]
    assert rows and all(o["pointer"] is not None and o["pointer"].startswith("#") for o in rows)


# ------------------------------------------------------------------------------------------------------- the oracles
def _item(schema: Any, tests: list[tuple[Any, bool]]) -> cov.Item:
    return cov.Item(id="t", doc=schema, parsed=True, tests=[{"data": d, "valid": v} for d, v in tests],
                    draft="draft2020-12")


def test_acceptors_catch_a_mislabelled_invalid_datum() -> None:
    """A datum the layout can emit, labelled invalid, is reported by both acceptors (the check has teeth)."""
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "string", "maxLength": 2},
                                                                  "b": {"enum": [1, True]}}}
    t = cov.Tally("x")
    cov.process(_item(schema, [({"a": "xy"}, False), ({"a": "xyz"}, False), ({"a": "x", "b": True}, True),
                               ({"a": "x", "c": 1}, True)]), t, samples=0)
    assert [w["data"] for w in t.weakenings_tree] == [{"a": "xy"}]
    assert [w["data"] for w in t.weakenings_layout] == [{"a": "xy"}]
    assert (t.valid_accepted, t.valid_rejected) == (1, 1)  # an undeclared property: narrowing, not weakening


@pytest.mark.parametrize("node_schema, datum, ok", [
    ({"enum": [1, "a"]}, True, False),                      # true != 1
    ({"enum": [True]}, 1, False),
    ({"enum": [1]}, 1.0, True),                             # 1 == 1.0
    ({"type": "integer", "minimum": 0, "maximum": 3}, 4, False),
    ({"type": "integer", "minimum": 0}, 10**30, True),
    ({"type": "integer", "minimum": 0, "multipleOf": 3}, 4, False),
    ({"type": "number", "exclusiveMaximum": 1}, 1, False),
    ({"type": "string", "pattern": "^a+$"}, "aab", False),
    ({"type": "string", "pattern": "b"}, "abc", True),       # unanchored search
    ({"type": "string", "pattern": "^abc$"}, "abc\n", False),  # ECMA $: no trailing-newline match
    ({"type": "string", "pattern": "^\\d$"}, "\u09ea", False),  # ECMA \d is ASCII
    ({"type": "string", "minLength": 2}, "\U0001f600", False),  # length in code points
    ({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2}, [True, True, False], False),
    ({"type": "array", "items": {"type": "boolean"}, "minItems": 1}, [], False),
])
def test_tree_acceptor(node_schema: dict[str, Any], datum: Any, ok: bool) -> None:
    assert cov.accepts(Spec(node_schema).compiled.root, datum) is ok


def test_tree_acceptor_union_picks_branch_by_tag() -> None:
    branch = [{"type": "object", "required": ["k", "x"], "properties": {"k": {"const": "a"}, "x": {"type": "integer",
                                                                                                    "minimum": 0,
                                                                                                    "maximum": 1}}},
              {"type": "object", "required": ["k"], "properties": {"k": {"const": "b"}, "y": {"type": "boolean"}}}]
    root = Spec({"anyOf": branch}).compiled.root
    assert cov.accepts(root, {"k": "a", "x": 1})
    assert cov.accepts(root, {"k": "b", "y": False})
    assert not cov.accepts(root, {"k": "a", "y": False})
    assert not cov.accepts(root, {"k": "c"})
    assert not cov.accepts(root, {"x": 1})


def test_layout_acceptor_treats_integral_numbers_as_equal() -> None:
    assert cov.layout_accepts(Layout({"const": -2.0}), -2)
    assert cov.layout_accepts(Layout({"type": "integer", "minimum": 0, "maximum": 5}), 2.0)
    assert not cov.layout_accepts(Layout({"type": "integer", "minimum": 0, "maximum": 5}), 2.5)
    assert not cov.layout_accepts(Layout({"type": "object", "properties": {"a": {"type": "boolean"}}}), {"b": True})


def test_ecma_regex() -> None:
    assert cov.ecma_regex(r"^[\d\w]\.$") == r"^[0-9A-Za-z0-9_]\.\Z"
    assert cov.pattern_search(r"^\cC$", "\x03") and not cov.pattern_search(r"^\cC$", "\\cC")
    assert cov.pattern_search(r"^\W$", "é") and not cov.pattern_search(r"^\w$", "é")
    assert cov.pattern_search(r"^\s$", "\ufeff") and not cov.pattern_search(r"^\s$", "\x1c")
    assert not cov.pattern_search(r"^a.b$", "a\rb")


def test_refusal_reason() -> None:
    with pytest.raises(UnsupportedKeyword) as e:
        Spec({"type": "string", "$dynamicRef": "#x"})
    assert cov.refusal_reason(e.value) == "keyword '$dynamicRef'"
    with pytest.raises(UnsupportedKeyword) as e:
        Spec({"oneOf": [{"type": "integer"}, {"type": "number"}]})
    assert cov.refusal_reason(e.value).startswith("oneOf branches that may both hold")
    with pytest.raises(DeclarationError) as e:
        Spec({"$ref": "http://x/y"})
    assert cov.refusal_reason(e.value) == "$ref does not resolve inside the declaration"


def test_generated_records_come_from_the_layout() -> None:
    import random
    schema = {"type": "object", "required": ["s", "n", "i", "tags"], "properties": {
        "s": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}, "n": {"type": "number", "exclusiveMinimum": 0,
                                                                      "maximum": 1},
        "i": {"type": "integer", "minimum": 7, "multipleOf": 7}, "o": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}}}
    spec, layout = Spec(schema), Layout(schema)
    gen = cov.Generator(random.Random(1), layout)
    for _ in range(30):
        rec = gen.record(spec.compiled.root)
        assert spec.check_record(rec) == [], rec
        assert cov.layout_accepts(layout, rec) and cov.accepts(spec.compiled.root, rec, "python"), rec


def test_cli_style_run_writes_results(tmp_path: Any) -> None:
    import argparse
    if not _DATA:
        pytest.skip("shared data not found")
    args = argparse.Namespace(out=str(tmp_path), samples=1, seed=0, limit=20, datasets="trivial,draft7/optional",
                              timeout=20.0)
    assert cov.run(args) == 0
    doc = json.loads((tmp_path / "coverage.json").read_text())
    assert [r["dataset"] for r in doc["results"]] == ["jsonschemabench/Github_trivial", "test-suite/draft7/optional"]
    assert doc["results"][0]["total"] == 20
    md = (tmp_path / "coverage.md").read_text()
    assert "| jsonschemabench/Github_trivial | 20 |" in md
    assert (tmp_path / "coverage" / "outcomes.jsonl").read_text().count("\n") == 20 + doc["results"][1]["total"]


# ------------------------------------------------------------------------------------------------------- known bugs
@pytest.mark.parametrize("schema", [True, False, []])
def test_spec_of_a_non_object_schema_is_a_declaration_error(schema: Any) -> None:
    with pytest.raises(DeclarationError):
        Spec(schema)


@pytest.mark.parametrize("pattern, text", [("^\\S+$", "\x1c"), ("^[^\\s]+$", "a\x1fb"),
                                           ("^[^:\\s]+:[^:\\s]+(:[^\\s]+)?$", "a\x1eb:c")])
def test_layout_strings_never_fail_jsonschema_pattern(pattern: str, text: str) -> None:
    schema = {"type": "string", "pattern": pattern}
    spec = Spec(schema)
    assert spec.check_record(text) != []  # jsonschema: invalid
    assert not cov.layout_accepts(Layout(spec), text)  # so the layout must not emit it


@pytest.mark.xfail(strict=True, reason=(
    "dialect weakening to decide: the free-string slot reads a pattern as Python's re (like jsonschema), which is "
    "wider than ECMA 262, the dialect JSON Schema specifies: {'type': 'string', 'pattern': '^abc$'} emits 'abc\\n' "
    "($ before a final newline) and {'type': 'string', 'pattern': '^a.b$'} emits 'a\\rb' and 'a\\u2028b' "
    "(. matches CR, LS, PS); ECMA validators (ajv, the Test Suite's semantics) reject them. Narrowing to the "
    "intersection of both dialects would be sound under either."))
@pytest.mark.parametrize("pattern, text", [("^abc$", "abc\n"), ("^a.b$", "a\rb"), ("^a.b$", "a\u2028b")])
def test_layout_strings_match_ecma_patterns(pattern: str, text: str) -> None:
    assert not cov.pattern_search(pattern, text)  # ECMA 262: no match
    assert not cov.layout_accepts(Layout({"type": "string", "pattern": pattern}), text)


def test_draft4_boolean_exclusive_bound_is_refused_or_kept() -> None:
    import jsonschema
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 5,
              "exclusiveMinimum": True}
    try:
        spec = Spec(schema)
    except DeclarationError as e:  # draft 4's boolean form is refused, at its keyword
        assert e.pointer == "#/exclusiveMinimum"
        return
    for x in (5, 5.5):  # whatever the layout emits must be valid under the schema's own draft
        if cov.layout_accepts(Layout(spec), x):
            assert jsonschema.Draft4Validator(schema).is_valid(x), x


# ------------------------------------------------------------------------------------------------------- other engines
def test_other_engines_compile_refuse_and_judge_data() -> None:
    """XGrammar and llguidance as bench coverage runs them: a schema both compile, the data each accepts and
    rejects, a keyword llguidance refuses (its reason grouped without names), and a process() row that counts them."""
    pytest.importorskip("llguidance")
    from factorspec_cp.bench.coverage_engines import LLGuidanceEngine, XGrammarEngine, _reason
    from factorspec_cp.tokenmap import Vocabulary
    vocab = Vocabulary.smollm2()
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "string", "maxLength": 2},
                                                                  "b": {"type": "integer"}}}
    for eng in (XGrammarEngine(vocab), LLGuidanceEngine(vocab)):
        compiled, reason, seconds = eng.compile(schema)
        assert compiled is not None and reason is None and seconds >= 0
        assert eng.accepts(compiled, schema, {"a": "x"})
        assert eng.accepts(compiled, schema, {"b": 1, "a": "q"})  # keys put in schema order
        assert not eng.accepts(compiled, schema, {"a": "xyz"})
        assert not eng.accepts(compiled, schema, {"a": "x", "b": 1.5})
    ll = LLGuidanceEngine(vocab)
    compiled, reason, _ = ll.compile({"type": "array", "uniqueItems": True, "items": {"type": "integer"}})
    assert compiled is None and reason and "Unimplemented" in reason
    assert _reason("[12:00:01] /project/cpp/json_schema_converter.cc:99: Schema 3 cannot accept 'x'") == \
        "Schema … cannot accept …"
    t = cov.Tally("x")
    item = cov.Item(id="t", doc=schema, parsed=True, tests=[{"data": {"a": "xyz"}, "valid": False},
                                                            {"data": {"a": "x"}, "valid": True}],
                    draft="draft2020-12")
    cov.process(item, t, samples=0, engines=[XGrammarEngine(vocab)], vocab=vocab)
    e = t.engines["xgrammar"]
    assert (e["compiled"], e["tests"], e["invalid_accepted"], e["valid_rejected"]) == (1, 2, 0, 0)
    assert len(t.first_mask_times) == 1 and t.first_mask_times[0] > 0
