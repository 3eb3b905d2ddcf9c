"""The factorspec command: check and explain, in text and JSON, including failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factorspec_cp.cli import main


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
    bad.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}))
    assert main(["check", str(bad)]) == 2
    assert "#/properties/a/format" in capsys.readouterr().err


def test_module_entry_point() -> None:
    r = subprocess.run([sys.executable, "-m", "factorspec_cp.cli", "explain", "--json"], capture_output=True,
                       text=True, check=True)
    assert json.loads(r.stdout)["backend"] == "sat"
