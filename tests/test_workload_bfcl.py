"""BFCL tool-call workload: loader, BFCL's checker in plain Python, declarations, derived relations, gold records.

The checks run against independent things: BFCL's own possible answers (every gold call passes ``check``),
``jsonschema`` (the declaration's schema admits the gold), the plain-Python evaluation of the derived rules
(``check_relations``, dates through :mod:`datetime`) and the solver (``check_record`` and sessions).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import jsonschema
import pytest

from factorspec_cp import DeclarationError, Spec
from factorspec_cp.spec import _get
from factorspec_cp.workloads import bfcl

#: Golds that contradict their own function doc, so BFCL's checker fails them too: a required argument the
#: answer leaves out, or an argument the doc does not declare.
INCONSISTENT_GOLDS = {"live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_507-149-4",
                      "live_multiple_862-181-3", "live_multiple_964-207-0"}


@cache
def _all() -> tuple[bfcl.BfclProblem, ...]:
    return tuple(p for c in bfcl.CATEGORIES for p in bfcl.load(c))


@cache
def _selected() -> tuple[bfcl.BfclProblem, ...]:
    return tuple(bfcl.problems())


@cache
def _spec(problem_id: str) -> Spec:
    return bfcl.declaration(next(p for p in _selected() if p.id == problem_id))


def _fn(params: dict[str, Any], required: list[str], name: str = "f") -> dict[str, Any]:
    return {"name": name, "description": "synthetic", "parameters": {"type": "dict", "properties": params,
                                                                     "required": required}}


# ------------------------------------------------------------------------------------------------------- loading


def test_loader_reads_every_single_call_problem():
    counts = {c: len(bfcl.load(c)) for c in bfcl.CATEGORIES}
    assert counts == {"simple_python": 400, "multiple": 200, "live_simple": 258, "live_multiple": 1053}
    for p in _all():
        assert len(p.answers) == 1 and p.question.strip()
        assert p.gold_function in {f["name"] for f in p.functions}
        assert p.target is None
    with pytest.raises(ValueError, match="out-of-scope"):
        bfcl.load("parallel")


# ------------------------------------------------------------------------------------------------------- checker


def test_every_gold_passes_check_except_golds_that_contradict_their_doc():
    failing = {}
    for p in _all():
        for record in bfcl.gold_records(p):
            problems = bfcl.check(p, record)
            if problems:
                failing[p.id] = problems
    assert set(failing) == INCONSISTENT_GOLDS
    assert all(v.startswith(("missing required argument", "unexpected argument")) for vs in failing.values()
               for v in vs)


def test_standardize_string_is_bfcls():
    assert bfcl.standardize_string("April 1, 2024") == bfcl.standardize_string("april 1,2024") == "april12024"
    assert bfcl.standardize_string("New_York-City/NY.") == "newyorkcityny"
    assert bfcl.standardize_string("it's") == 'it"s'


def test_check_rejects_wrong_function_unknown_and_missing_arguments_and_values_off_the_list():
    for p in _all()[:1911:64] + _selected():
        gold = bfcl.gold_records(p)[0]
        assert bfcl.check(p, gold) == []
        assert bfcl.check(p, {**gold, "name": gold["name"] + "_x"})[0].startswith("wrong function")
        assert bfcl.check(p, {"name": gold["name"]}) != []
        assert bfcl.check(p, {"name": gold["name"], "arguments": {**gold["arguments"], "zz_unknown": 1}}) != []
        for param, value in gold["arguments"].items():
            wrong = copy.deepcopy(gold)
            wrong["arguments"][param] = "zz not an answer" if isinstance(value, str) else ["zz"] \
                if isinstance(value, list) else -987654321 if type(value) is int else "zz"
            assert any(param in v for v in bfcl.check(p, wrong)), (p.id, param)
        required = p.function(p.gold_function)["parameters"].get("required", [])
        for param in required[:1]:
            short = copy.deepcopy(gold)
            del short["arguments"][param]
            assert f"missing required argument {param!r}" in bfcl.check(p, short)


def test_check_follows_bfcl_type_and_string_rules():
    p = next(p for p in _all() if p.id == "simple_python_387")
    gold = bfcl.gold_records(p)[0]
    # strings: case, spaces and , . / - _ * ^ do not matter
    loud = {**gold, "arguments": {**gold["arguments"], "hotel_name": gold["arguments"]["hotel_name"].upper()}}
    assert bfcl.check(p, loud) == []
    # an alternative listed format of the same date is accepted by BFCL (the declaration only admits one format)
    alt = {**gold, "arguments": {**gold["arguments"], "start_date": "06/01/2022"}}
    assert bfcl.check(p, alt) == []
    # an int is a valid float; a bool is not an int; a float is not an int
    q = next(p for p in _all() if p.id == "simple_python_0")
    base = bfcl.gold_records(q)[0]
    assert bfcl.check(q, base) == [] and type(base["arguments"]["base"]) is int
    assert bfcl.check(q, {**base, "arguments": {**base["arguments"], "base": 10.0}})[0].startswith("base: wrong type")
    assert bfcl.check(q, {**base, "arguments": {**base["arguments"], "base": True}}) != []
    # optional argument: "" in the list means it may be left out
    assert "" in q.possible["unit"] and bfcl.check(q, {**base, "arguments": {"base": 10, "height": 5}}) == []


# -------------------------------------------------------------------------------------------------- declarations


def test_selection_has_at_least_30_problems_with_relations_and_consistent_counts():
    report = bfcl.selection_report()
    assert report["total"] == len(_all()) == 1911
    assert report["single_function"] + report["multi_function"] == report["total"]
    assert report["compiled"] + report["skipped"] == report["total"]
    assert sum(report["skipped_by_reason"].values()) == report["skipped"]
    assert report["with_relations"] == len(_selected()) >= 30
    assert report["with_relations_single_function"] + report["with_relations_gold_function_pinned"] == \
        report["with_relations"]
    assert set(report["relations"]) == {p.id for p in _selected()}
    assert all(report["relations"].values())
    assert sum(report["rules"].values()) >= report["with_relations"]
    assert all(reason.startswith(("unconvertible: ", "refused by compiler: "))
               for reason in report["skipped_by_reason"])
    # single-function only: the selection without pinning the gold's function is the single-function part
    single = bfcl.problems(pin_gold_function=False)
    assert len(single) == report["with_relations_single_function"]
    assert all(len(p.functions) == 1 for p in single)
    assert bfcl.problems(sample=5) == list(_selected()[:5])


def test_skipped_problems_are_really_refused():
    report = bfcl.selection_report()
    skipped = report["skipped_problems"]
    assert len(skipped) == report["skipped"]
    by_id = {p.id: p for p in _all()}
    for problem_id, reason in skipped.items():
        try:
            Spec.from_json(bfcl.declaration_doc(by_id[problem_id]))
        except bfcl.Unconvertible as error:
            assert reason == f"unconvertible: {error.reason}"
        except DeclarationError as error:
            assert reason == f"refused by compiler: {type(error).__name__}: {error.message}"
        else:
            raise AssertionError(f"{problem_id} compiles")


def test_selected_golds_pass_check_jsonschema_the_declaration_and_the_relations():
    for p in _selected():
        spec = _spec(p.id)
        gold = bfcl.gold_records(p)[0]
        assert bfcl.check(p, gold) == [], p.id
        jsonschema.validate(gold, spec.schema)
        assert spec.check_record(gold) == [], p.id
        assert bfcl.check_relations(p, gold) == [], p.id
        assert spec.instances and all(i.relation.check({k: _get(gold, k) for k in spec.fields}) for i in
                                      spec.instances)
        names = {r.name for r in spec.relations}
        assert names and all(names)


def test_relation_violations_are_caught_by_both_the_declaration_and_the_plain_check():
    broken = 0
    for p in _selected():
        spec = _spec(p.id)
        gold = bfcl.gold_records(p)[0]
        for rule in bfcl.rules_of(p):
            bad = copy.deepcopy(gold)
            args = bad["arguments"]
            if rule.rule in ("date_order", "number_order"):
                a, b = rule.params
                args[a], args[b] = args[b], args[a]
                if args[a] == args[b] and rule.op == ">=":
                    continue  # equal start and end: swapping changes nothing
            elif rule.rule == "differ":
                a, b = rule.params
                enums = [p.function(p.target)["parameters"]["properties"][k]["enum"] for k in (a, b)]
                args[a] = args[b] = next(v for v in enums[0] if v in enums[1])
            elif rule.rule == "date_bound":
                args[rule.params[0]] = rule.bound if rule.op == ">" else args[rule.params[0]]
            elif rule.rule == "calendar_day":
                args["day"], args["month"] = 31, 4
            if bfcl.check_relations(p, bad):
                broken += 1
                assert spec.check_record(bad) != [], (p.id, rule)
            else:
                assert spec.check_record(bad) == [], (p.id, rule)
    assert broken >= 25


def test_session_admits_each_gold_value_field_by_field():
    # one problem per rule kind; the strict check-in/check-out order is left to the check_record test above (its
    # sessions probe the 11,323-date domain for about 4 s)
    kinds = {}
    for p in _selected():
        for rule in bfcl.rules_of(p):
            if rule.rule not in kinds and (rule.rule, rule.op) != ("date_order", ">"):
                kinds[rule.rule] = p
    assert set(kinds) == {"date_order", "number_order", "differ", "calendar_day", "date_bound"}
    for p in kinds.values():
        spec = _spec(p.id)
        gold = bfcl.gold_records(p)[0]
        session = spec.session()
        for path in spec.fields:
            value = _get(gold, path)
            assert value in session.admissible(path), (p.id, path, value)
            session.assign(path, value)
        assert session.is_satisfiable()


def test_union_declaration_for_several_functions_carries_no_relations():
    p = next(p for p in _all() if p.id == "live_multiple_434-142-0")
    assert len(p.functions) > 1
    doc = bfcl.declaration_doc(p)
    assert [b["properties"]["name"]["const"] for b in doc["oneOf"]] == [f["name"] for f in p.functions]
    assert doc["x-factorspec"]["relations"] == []
    spec = Spec.from_json(doc)
    gold = bfcl.gold_records(p)[0]
    assert spec.check_record(gold) == []
    assert spec.check_record({**gold, "name": "not_a_function"}) != []
    pinned = bfcl.declaration(next(q for q in _selected() if q.id == p.id))
    assert pinned.schema["properties"]["name"] == {"const": p.gold_function} and pinned.relations


def test_declarations_round_trip_and_relations_are_listed():
    for p in _selected()[:3] + _selected()[-3:]:
        doc = bfcl.declaration_doc(p)
        assert Spec.from_json(doc).to_json() == doc
        listed = bfcl.relations_of(p)
        assert [r["name"] for r in listed] == [r["name"] for r in doc["x-factorspec"]["relations"]]
        assert len(json.dumps(listed)) < 2000  # date maps left out


# -------------------------------------------------------------------------------------------------- rule derivation


def test_rules_come_from_the_doc_only():
    date = {"type": "string", "description": "The start date in the format 'YYYY-MM-DD'."}
    end = {"type": "string", "description": "The end date, format YYYY-MM-DD."}
    args, rels, rules, defs = bfcl.derive(_fn({"start_date": date, "end_date": end}, ["start_date", "end_date"]))
    assert [r.rule for r in rules] == ["date_order"] and rels[0]["op"] == ">=" and rels[0]["rhs"] == 0
    assert args["properties"]["start_date"]["$ref"] == "#/$defs/date_Ymd" and len(defs["date_Ymd"]["enum"]) == 11323
    # optional -> no relation; no stated format -> none; a date-time -> none; different formats -> none
    assert bfcl.derive(_fn({"start_date": date, "end_date": end}, ["start_date"]))[2] == []
    assert bfcl.derive(_fn({"start_date": {"type": "string"}, "end_date": end}, ["start_date", "end_date"]))[2] == []
    stamp = {"type": "string", "description": "Start in 'YYYY-MM-DD HH:MM:SS'."}
    assert bfcl.derive(_fn({"start_date": stamp, "end_date": stamp}, ["start_date", "end_date"]))[2] == []
    us = {"type": "string", "description": "End date as MM/DD/YYYY."}
    assert bfcl.derive(_fn({"start_date": date, "end_date": us}, ["start_date", "end_date"]))[2] == []
    # check-in/check-out is strict
    rules = bfcl.derive(_fn({"check_in_date": date, "check_out_date": end}, ["check_in_date", "check_out_date"]))[2]
    assert [(r.rule, r.op) for r in rules] == [("date_order", ">")]
    # calendar years get YEAR_RANGE; free integers without "year" stay free and unrelated
    year = {"type": "integer", "description": "A year."}
    args, _, rules, _ = bfcl.derive(_fn({"start_year": year, "end_year": year}, ["start_year", "end_year"]))
    assert [r.rule for r in rules] == ["number_order"] and args["properties"]["end_year"]["maximum"] == 2100
    x = {"type": "integer", "description": "An x value."}
    assert bfcl.derive(_fn({"start_x": x, "end_x": x}, ["start_x", "end_x"]))[2] == []
    ranged = {"type": "integer", "description": "Must be between 1 and 5."}
    assert [r.rule for r in bfcl.derive(_fn({"min_n": ranged, "max_n": ranged}, ["min_n", "max_n"]))[2]] == \
        ["number_order"]
    # enum pairs that share values differ; a day/month pair with the doc's ranges is a calendar day
    lang = {"type": "string", "enum": ["en", "fr"], "description": "A language."}
    assert [r.rule for r in bfcl.derive(_fn({"source_language": lang, "target_language": lang},
                                            ["source_language", "target_language"]))[2]] == ["differ"]
    day = {"type": "integer", "description": "Valid values are from 1 to 31."}
    month = {"type": "integer", "description": "From 1 (January) to 12 (December)."}
    assert [r.rule for r in bfcl.derive(_fn({"day": day, "month": month}, ["day", "month"]))[2]] == ["calendar_day"]
    # a stated lower bound on a date
    after = {"type": "string", "description": "Date as 'dd/mm/yyyy'. The date must be after 14/03/2024."}
    (rule,) = bfcl.derive(_fn({"when": after}, ["when"]))[2]
    assert (rule.rule, rule.op, rule.bound, rule.date_format) == ("date_bound", ">", "14/03/2024", "%d/%m/%Y")


def test_rules_depend_on_the_function_doc_not_on_the_problem():
    by_doc: dict[str, list[str]] = {}
    for p in _selected():
        fn = p.function(p.target)
        key = json.dumps(fn, sort_keys=True)
        names = [r["name"] for r in bfcl.relations_of(p)]
        assert by_doc.setdefault(key, names) == names
        # the same function in an unrelated problem with another possible answer gives the same relations
        other = bfcl.BfclProblem("x", p.category, "", (), (fn,), ({fn["name"]: {}},))
        assert [r["name"] for r in bfcl.relations_of(other)] == names


def test_type_conversion():
    conv = bfcl.convert_parameter
    assert conv({"type": "string"}) == {"type": "string", "maxLength": bfcl.MAX_STRING}
    assert conv({"type": "float", "description": "d"}) == {"description": "d", "type": "number"}
    assert conv({"type": "integer", "description": "Must be between 1 to 5 adults."})["maximum"] == 5
    assert conv({"type": "integer", "description": "from 2 to 1"}) == {"description": "from 2 to 1",
                                                                     "type": "integer"}
    assert conv({"type": "any"})["type"] == "string"
    assert conv({"type": "tuple", "items": {"type": "float"}})["items"] == {"type": "number"}
    assert conv({"type": "array", "items": {"type": "string"}, "enum": ["a", "b"]})["items"]["enum"] == ["a", "b"]
    nested = conv({"type": "dict", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})
    assert nested["additionalProperties"] is False and nested["required"] == ["a"]
    for bad, reason in (({"type": "dict"}, "free-form dict"), ({"type": "array"}, "array without items"),
                        ({"type": "set"}, "unknown type")):
        with pytest.raises(bfcl.Unconvertible, match=reason):
            conv(bad)
