"""`factorspec bench solve` runs end to end on a tiny sample and writes readable results (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factorspec_cp.cli import main


def test_bench_solve_tiny(tmp_path: Path) -> None:
    rc = main(["bench", "solve", "--per-size", "1", "--calendar", "2", "--meeting", "1", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "solve.json").read_text())
    rows = {(r["workload"], r["backend"]): r for r in doc["results"]}
    assert {("trip-3", "sat"), ("trip-10", "cpsat"), ("calendar", "csp"), ("meeting", "cpsat")} <= set(rows)
    assert all(r["gold_not_admitted"] == 0 for r in doc["results"])
    assert rows[("trip-3", "default")]["default_choice"] == {"sat": 1}
    assert rows[("meeting", "default")]["default_choice"] == {"cpsat": 1}
    assert any(s["workload"] == "meeting" and s["backend"] == "sat" for s in doc["skipped"])
    for r in doc["results"]:
        assert r["field_open_ms"]["n"] > 0 and 0 <= r["certain_share"] <= 1
    md = (tmp_path / "solve.md").read_text()
    assert "| trip-3 | sat |" in md and "skipped" in md


def test_generate_problems_with_the_gold_objective() -> None:
    """``bench generate --objective gold``'s suites: the declarations carry the convention, and each problem's gold
    (with ``order`` on meeting entries) passes the workload's own checker, so gold match is measurable."""
    from factorspec_cp.bench.generate import calendar_problems, meeting_problems
    for plain, gold, added in ((meeting_problems(2), meeting_problems(2, objective="gold"), True),
                               (calendar_problems(3), calendar_problems(3, objective="gold"), False)):
        for p, q in zip(plain, gold):
            # the convention's levels are added (calendar: only where the prompt asks for the earliest slot)
            assert len(q.spec.objectives) > len(p.spec.objectives) or not added, p.key
            assert q.check(q.gold) == [], q.key
    assert all("order" in e for e in meeting_problems(1, objective="gold")[0].gold["meetings"])
    # "earliest" (calendar only) minimizes the slot in every problem, asked or not
    assert all(len(p.spec.objectives) == 1 for p in calendar_problems(3, objective="earliest"))


def test_generate_objective_lists() -> None:
    from factorspec_cp.bench.generate import _objectives
    assert _objectives("none") == ["none"] and _objectives("both") == ["none", "gold"]
    assert _objectives("earliest,gold,earliest") == ["earliest", "gold"]
    with pytest.raises(SystemExit, match="not 'latest'"):
        _objectives("none,latest")


def test_bench_service_tiny(tmp_path: Path) -> None:
    # the step loop replays every stream to its gold record (it raises otherwise) in-process and through a worker
    rc = main(["bench", "service", "--concurrency", "4", "--workers", "0,1", "--problems", "1", "--forward-ms", "1",
               "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "service.json").read_text())
    got = {(r["engine"], r["workers"], r["draft_wait_ms"]) for r in doc["rows"]}
    assert got == {("xgrammar", 0, None), ("factorspec", 0, None), ("factorspec", 1, None), ("factorspec", 1, 0.0)}
    assert doc["problems"] == {"trip": 1, "calendar": 1, "meeting": 1, "tool-call": 1}
    for r in doc["rows"]:
        assert r["in_flight"] == 4 and r["steps"] > 0 and r["step_ms"]["n"] == r["steps"] and r["tokens"] > 0
    rows = {(r["engine"], r["workers"], r["draft_wait_ms"]): r for r in doc["rows"]}
    # the oracle's drafts (XGrammar's) are the gold certain runs, which our grammars draft whenever they wait for them
    assert rows["xgrammar", 0, None]["drafted"] == rows["factorspec", 0, None]["drafted"] > 0
    assert rows["factorspec", 1, None]["drafted"] == rows["factorspec", 0, None]["drafted"]
    assert rows["factorspec", 1, 0.0]["drafted"] <= rows["factorspec", 0, None]["drafted"]
    assert "| 4 | factorspec | 1 |" in (tmp_path / "service.md").read_text()


def test_breakdown_meter_counts_each_part_its_own_time() -> None:
    """The meter's own-time accounting against sleeps of known length: a call's part gets its own time only, the
    wrapped call inside it gets its own, a collection inside is counted apart, and nothing is counted while it is
    not active."""
    import gc
    import time

    from factorspec_cp.bench.breakdown import PARTS, Meter
    meter = Meter()
    inner = meter.wrap(lambda: (time.sleep(0.03), gc.collect()), PARTS[1])
    outer = meter.wrap(lambda: (time.sleep(0.001), inner()), PARTS[0])
    gc.callbacks.append(meter.gc_callback)
    try:
        outer()  # not active: nothing counted
        assert sum(meter.own.values()) == 0 and sum(meter.calls.values()) == 0
        meter.active = True
        outer()
    finally:
        gc.callbacks.remove(meter.gc_callback)
    assert 0.001 <= meter.own[PARTS[0]] < 0.02  # (with the 30 ms inside it counted, it would be above 31 ms)
    assert meter.own[PARTS[1]] >= 0.03
    assert meter.own["gc"] > 0 and meter.calls["gc"] == 1
    assert meter.calls[PARTS[0]] == 1 and meter.calls[PARTS[1]] == 1


def test_bench_breakdown_tiny(tmp_path: Path) -> None:
    """One meeting record on SmolLM2: the gold walk runs instrumented, every part's own time is at least 0 (the
    rest, what the named parts leave of the total, too), the parts a meeting record must reach are reached, and
    every wrapped entry point is restored afterwards."""
    from factorspec_cp import difference
    from factorspec_cp.bench.breakdown import PARTS, _targets
    rc = main(["bench", "breakdown", "--meeting", "1", "--vocabs", "smollm2", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "breakdown.json").read_text())
    row = doc["rows"]["meeting/smollm2"]
    assert row["records"] == 1 and row["tokens"] > 100 and row["xgrammar_us_per_token"] > 0
    parts = row["parts_us_per_token"]
    assert set(parts) == set(PARTS) and all(v >= 0 for v in parts.values()), parts
    for p in ("search (C)", "search set-up (Python)", "session (Python)", "layout (Python)", "mask rows",
              "planner (Python)", "consume (Python)"):
        assert row["calls_per_token"][p] > 0, p
    assert not any(hasattr(getattr(owner, name), "__wrapped__") for owner, name, _ in _targets())
    assert difference._core is None or type(difference._core).__name__ == "module"
    assert "| search (C) |" in (tmp_path / "breakdown.md").read_text()


def test_bench_masks_walks_each_tokenizer_on_its_own_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench masks`` on one calendar problem and two tokenizers: both walks reproduce the gold and are replayed
    through XGrammar, and neither walks the declaration it was handed (each walks its own copy, a first request on
    its declaration: nothing is built on the original, so no tokenizer finds another's declaration caches warm)."""
    pytest.importorskip("xgrammar")
    from factorspec_cp.bench import masks
    from factorspec_cp.workloads import calendar

    ex = next(iter(calendar.examples()))
    spec, gold = calendar.declaration(calendar.problem(ex)), calendar.gold_record(ex)
    monkeypatch.setattr(masks, "problems", lambda *args: iter([("calendar", spec, gold)]))
    res = masks.run_masks(0, 1, 0, vocabs=["smollm2", "qwen3"])
    assert set(res["rows"]) == {"calendar/smollm2", "calendar/qwen3"}
    for row in res["rows"].values():
        assert row["records"] == 1 and row["tokens"] > 0 and row["xgrammar_cpu_us_per_token"] > 0
    assert "_decoders" not in spec.__dict__ and not spec._encoded.get("difference")


def test_bench_masks_splits_cpu_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench masks`` splits our CPU by kind of position (a run planned, a planned token taken, the model's
    choice): the kinds cover every token and the whole CPU, a planned position is certain, and each certain position
    right after a choice is one where a run was planned (a chosen token leaves no plan behind it)."""
    pytest.importorskip("xgrammar")
    from factorspec_cp.bench import masks
    from factorspec_cp.workloads import meeting

    ex = next(iter(meeting.examples()))
    spec, gold = meeting.declaration(ex), meeting.gold_record(ex)
    walk = masks.gold_walk(meeting.declaration(ex), masks.VOCABS["smollm2"](), gold)
    certain, planned = walk["certain"], walk["planned"]
    assert len(planned) == len(certain) == len(walk["tokens"])
    assert all(c for c, p in zip(certain, planned) if p)
    after_choice = [i for i in range(1, len(certain)) if certain[i] and not certain[i - 1]]
    assert after_choice and all(planned[i] for i in after_choice)
    monkeypatch.setattr(masks, "problems", lambda *args: iter([("meeting", spec, gold)]))
    row = masks.run_masks(0, 0, 1, vocabs=["smollm2"])["rows"]["meeting/smollm2"]
    split = row["cpu_by_position"]
    assert set(split) == set(masks.POSITIONS) and all(split[k]["n"] > 0 for k in masks.POSITIONS)
    assert sum(v["n"] for v in split.values()) == row["tokens"]
    assert sum(v["us_per_token"] for v in split.values()) == pytest.approx(row["cpu_us_per_token"], abs=0.05)
    assert sum(v["share"] for v in split.values()) == pytest.approx(1.0, abs=0.002)
    assert "Where our CPU per token goes, by position" in masks.report_md({"rows": {"meeting/smollm2": row}})
