"""The factorspec command: check and explain, in text and JSON, including failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factorspec_cp.cli import _read, main
from factorspec_cp.spec import Spec


def test_explain_bundled_example(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert "/plan/1/city: [\"Manchester\"] (1) certain" in out
    assert main(["explain", "--json", "--assign", "/plan/2/first_day=4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["path"]: r["admissible"] for r in doc["fields"]}
    assert rows["/plan/2/last_day"] == [9] and rows["/plan/1/last_day"] == [4]


def test_explain_reports_conflict(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["explain", "--backend", "cpsat", "--assign", "/plan/0/city=Split"]) == 1
    out = capsys.readouterr().out
    assert "minimal conflict" in out and "assigned /plan/0/city = 'Split'" in out


def test_check_counts_and_unsatisfiable(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["check", "--json", "--cap", "5000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["satisfiable"] and doc["solutions"] == 2250 and len(doc["relations"]) == 8
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "object", "required": ["a"], "properties": {"a": {"type": "boolean"}},
                               "x-factorspec": {"relations": [
                                   {"kind": "compare", "left": "/a", "op": "==", "right": True, "name": "yes"},
                                   {"kind": "compare", "left": "/a", "op": "==", "right": False, "name": "no"}]}}))
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "satisfiable: NO" in out and "'yes'" in out and "'no'" in out


def test_declaration_errors_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "object",
                               "properties": {"a": {"type": "string", "$dynamicRef": "#x"}}}))
    assert main(["check", str(bad)]) == 2
    assert "#/properties/a/$dynamicRef" in capsys.readouterr().err


def test_module_entry_point() -> None:
    r = subprocess.run([sys.executable, "-m", "factorspec_cp.cli", "explain", "--json"], capture_output=True,
                       text=True, check=True)
    assert json.loads(r.stdout)["backend"] == "sat"


EXAMPLES = Path(__file__).resolve().parent.parent / "factorspec_cp" / "examples"


def test_check_prints_relations_as_math(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["check", "--cap", "10"]) == 0
    out = capsys.readouterr().out
    assert "relation 2 (linear) [i=0]: /plan/1/first_day == /plan/0/last_day  (space 225)" in out
    assert "relation 3 (implies) [i=2]: /plan/2/city == \"Split\"  =>  /plan/2/last_day == /plan/2/first_day + 5" \
        in out
    assert main(["check", "--json", "--cap", "10"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["relations"][0]["math"] == "all_different(/plan/0/city, /plan/1/city, /plan/2/city)"


def test_problem_files_are_taken_where_declarations_are(capsys) -> None:  # type: ignore[no-untyped-def]
    problem = str(EXAMPLES / "trip_natural_plan.json")
    assert main(["check", problem, "--cap", "10"]) == 0
    out = capsys.readouterr().out
    assert "15 fields" in out and "/plan/1/first_day == /plan/0/last_day" in out
    assert main(["explain", problem, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "sat"
    from factorspec_cp.cli import _problem
    doc = json.loads(Path(problem).read_text())
    declaration, prompt = _problem(doc, problem)
    assert declaration == doc["declaration"] and prompt == doc["prompt"]  # what `generate FILE` uses


def test_a_prompt_without_declaration_says_so(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"prompt": "plan a trip", "schema": {}}))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "holds a prompt but no declaration" in err and '"declaration"' in err


def test_explain_prints_the_conflict_as_math(capsys) -> None:  # type: ignore[no-untyped-def]
    """Text and JSON name the same relations, each written as its instance's math (as ``explain()`` does)."""
    assert main(["explain", "--assign", "/plan/0/city=Split"]) == 1
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("- relation")]
    assert main(["explain", "--json", "--assign", "/plan/0/city=Split"]) == 1
    rels = json.loads(capsys.readouterr().out)["explanation"]["relations"]
    spec = Spec.from_json(_read(None)[0])
    inst = {(i.source, i.i): i for i in spec.instances}
    assert rels and all(r["math"] == inst[(r["relation"], r["i"])].math for r in rels)
    assert lines == [f"- {inst[(r['relation'], r['i'])].describe()}" for r in rels]
    assert any(" == " in r["math"] or "(" in r["math"] for r in rels)  # math, not a list of paths


def test_problem_file_errors_point_into_the_file(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"prompt": "a date", "declaration": {
        "type": "object", "properties": {"a": {"type": "string", "$dynamicRef": "#x"}}}}))
    for command in (["check", str(bad)], ["explain", str(bad)], ["generate", str(bad)]):
        assert main(command) == 2, command
        assert "#/declaration/properties/a/$dynamicRef" in capsys.readouterr().err


def test_check_lists_ignored_keywords_and_strict_refuses_them(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    doc = {"type": "object", "esriDocumentation": {"x": 1}, "required": ["a"],
           "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 2, "example": 1}}}
    f = tmp_path / "d.json"
    f.write_text(json.dumps(doc))
    assert main(["check", str(f)]) == 0
    out = capsys.readouterr().out
    assert "ignored (they constrain nothing): esriDocumentation at #, example at #/properties/a" in out
    assert main(["check", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ignored"] == [
        {"pointer": "#", "keyword": "esriDocumentation"}, {"pointer": "#/properties/a", "keyword": "example"}]
    assert main(["check", str(f), "--strict"]) == 2
    assert "#/esriDocumentation" in capsys.readouterr().err
