"""Meeting planning workload: parsing, gold records, the independent checker, and the declaration's solutions."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from factorspec_cp.workloads import meeting

EXAMPLES = list(meeting.examples())
TIMES = ("clock", "minutes")


def _core_ready() -> bool:
    try:
        from factorspec_cp import Spec  # noqa: F401
    except ImportError:
        return False
    return True


needs_core = pytest.mark.skipif(not _core_ready(), reason="factorspec_cp core (Spec) not importable yet")


def _met(record: dict[str, Any]) -> list[int]:
    return [i for i, row in enumerate(record["meetings"]) if row["meet"]]


def _official_score(example: dict[str, Any], plan: list[str]) -> int:
    """People met by a text plan, simulated the way NATURAL PLAN's evaluator does (an independent reading)."""
    people = {name: (loc, window, minimum) for name, loc, window, minimum in example["constraints"][1:]}
    here, now = example["constraints"][0][0], meeting.to_minutes(example["constraints"][0][1])
    score = 0
    for step in plan:
        if step.startswith("You travel to "):
            there = step.removeprefix("You travel to ").split(" in ")[0]
            now, here = now + example["dist_matrix"][here][there], there
        elif step.startswith("You wait until "):
            later = meeting.to_minutes(step.removeprefix("You wait until ").rstrip("."))
            assert later > now, step
            now = later
        elif step.startswith("You meet "):
            loc, window, minimum = people[step.removeprefix("You meet ").split(" for ")[0]]
            first, last = (meeting.to_minutes(part) for part in window.split(" to "))
            assert loc == here and first <= now and now + minimum <= last, step
            now, score = now + minimum, score + 1
    return score


def test_all_examples_parse() -> None:
    assert len(EXAMPLES) == 100
    sizes = {ex["num_people"] for ex in EXAMPLES}
    assert sizes == set(range(1, 11))
    for ex in EXAMPLES:
        prob = meeting.parse(meeting.problem(ex))
        assert len(prob.people) == ex["num_people"]
        assert prob.start_time == 9 * 60
        assert all(p.location in prob.travel and p.earliest + p.minimum <= p.latest for p in prob.people)


def test_clock_round_trip() -> None:
    for minutes in range(24 * 60):
        assert meeting.to_minutes(meeting.to_clock(minutes)) == minutes
    assert meeting.to_clock(12 * 60) == "12:00PM" and meeting.to_clock(0) == "12:00AM"
    for bad in ("13:00PM", "9:5AM", "09:00AM", "9:00 AM", "noon"):
        with pytest.raises(ValueError):
            meeting.to_minutes(bad)


def test_shortest_travel_never_exceeds_direct() -> None:
    shortcuts = 0
    for ex in EXAMPLES:
        direct = ex["dist_matrix"]
        best = meeting.shortest_travel(direct)
        for a, row in direct.items():
            for b, minutes in row.items():
                assert best[a][b] <= minutes
                shortcuts += best[a][b] < minutes
    assert shortcuts == 4  # the sample's only triangle-inequality violations


@pytest.mark.parametrize("times", TIMES)
def test_gold_is_valid_and_optimal(times: str) -> None:
    for ex in EXAMPLES:
        record = meeting.gold_record(ex, times=times)
        assert meeting.check(meeting.problem(ex), record) == [], ex["id"]
        count = len(_met(record))
        assert count == _official_score(ex, ex["golden_plan"])
        assert count == meeting.max_meetings(meeting.parse(ex))


def test_max_meetings_matches_brute_force_over_orders() -> None:
    """The DP optimum equals trying every order of every subset (small problems only)."""
    for ex in (ex for ex in EXAMPLES if ex["num_people"] <= 6):
        prob = meeting.parse(ex)
        best = 0
        for order in itertools.chain.from_iterable(
            itertools.permutations(prob.people, k) for k in range(1, len(prob.people) + 1)
        ):
            here, now = prob.start_location, prob.start_time
            for p in order:
                now = max(now + prob.travel[here][p.location], p.earliest) + p.minimum
                here = p.location
                if now > p.latest:
                    break
            else:
                best = max(best, len(order))
        assert meeting.max_meetings(prob) == best, ex["id"]


def _gold_with_met(least: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    pairs = [(ex, meeting.gold_record(ex)) for ex in EXAMPLES]
    return [(ex, rec) for ex, rec in pairs if len(_met(rec)) >= least]


def _set(row: dict[str, Any], start: int, end: int) -> None:
    row["start"], row["end"] = meeting.to_clock(start), meeting.to_clock(end)


def _span(row: dict[str, Any]) -> tuple[int, int]:
    return meeting.to_minutes(row["start"]), meeting.to_minutes(row["end"])


def test_rejects_overlap() -> None:
    for ex, gold in _gold_with_met(2):
        record = copy.deepcopy(gold)
        first, second = sorted(_met(record), key=lambda i: _span(record["meetings"][i]))[:2]
        start, _ = _span(record["meetings"][first])
        minimum = ex["constraints"][second + 1][3]
        _set(record["meetings"][second], start, start + minimum)
        assert any("overlap" in v for v in meeting.check(ex, record)), ex["id"]


def test_rejects_too_short() -> None:
    for ex, gold in _gold_with_met(1):
        record = copy.deepcopy(gold)
        row = record["meetings"][_met(record)[0]]
        start, end = _span(row)
        _set(row, start, end - 1)
        assert any("shorter than" in v for v in meeting.check(ex, record)), ex["id"]


def test_rejects_outside_window() -> None:
    for ex, gold in _gold_with_met(1):
        record = copy.deepcopy(gold)
        i = _met(record)[-1]
        latest = meeting.to_minutes(ex["constraints"][i + 1][2].split(" to ")[1])
        start, _ = _span(record["meetings"][i])
        _set(record["meetings"][i], start, latest + 1)
        assert any("outside window" in v for v in meeting.check(ex, record)), ex["id"]


def test_rejects_travel_violation() -> None:
    """Pull a met person one minute too early to be reached from the previous place; keep the window."""
    tried = 0
    for ex, gold in _gold_with_met(1):
        prob = meeting.parse(ex)
        record = copy.deepcopy(gold)
        order = sorted(_met(record), key=lambda i: _span(record["meetings"][i]))
        here, free = prob.start_location, prob.start_time
        for i in order:
            p = prob.people[i]
            too_early = free + prob.travel[here][p.location] - 1
            if too_early >= max(p.earliest, free):
                _set(record["meetings"][i], too_early, too_early + p.minimum)
                violations = meeting.check(ex, record)
                assert any(" min from " in v for v in violations), (ex["id"], violations)
                tried += 1
                break
            here, free = p.location, _span(record["meetings"][i])[1]
    assert tried >= 50


def test_rejects_suboptimal_and_malformed() -> None:
    for ex, gold in _gold_with_met(1):
        record = copy.deepcopy(gold)
        row = record["meetings"][_met(record)[0]]
        row.update(meet=False, start="9:00AM", end="9:00AM")
        assert [v for v in meeting.check(ex, record) if v.startswith("not optimal")], ex["id"]
    ex, gold = _gold_with_met(1)[0]
    broken: list[Any] = [{"meetings": gold["meetings"][:-1]}, None]
    for change in ({"meet": "yes"}, {"start": "9:00 AM"}, {"person": "Nobody"}, {"extra": 1}):
        record = copy.deepcopy(gold)
        record["meetings"][0].update(change)
        broken.append(record)
    unmet = copy.deepcopy(gold)
    unmet["meetings"][_met(gold)[0]]["meet"] = False
    broken.append(unmet)
    for record in broken:
        assert meeting.check(ex, record), record


def test_gold_record_rejects_unknown_sentences() -> None:
    ex = dict(EXAMPLES[0], golden_plan=[*EXAMPLES[0]["golden_plan"], "You fly home."])
    with pytest.raises(ValueError, match="unknown gold sentence"):
        meeting.gold_record(ex)


@pytest.mark.parametrize("times", TIMES)
def test_declaration_doc_shape(times: str) -> None:
    ex = max(EXAMPLES, key=lambda e: e["num_people"])
    doc = meeting.declaration_doc(meeting.problem(ex), times=times)
    n = ex["num_people"]
    assert doc["properties"]["meetings"]["minItems"] == doc["properties"]["meetings"]["maxItems"] == n
    names = [r["name"] for r in doc["x-factorspec"]["relations"]]
    assert len(names) == len(set(names)) == 7 * n + n * (n - 1) // 2
    with pytest.raises(ValueError):
        meeting.declaration_doc(ex, times="seconds")  # type: ignore[arg-type]


# ---- with the core: compile, admit the gold field by field, solve ----
# Clock-time declarations carry one 900-entry map per time term, so compiling all 100 takes ~20 s, and a cpsat
# session needs about one solve per admissible time: the fast suite compiles every minutes declaration and works
# on a spread of sizes; the full sweeps over all 100 are marked slow.


def _spread(k: int) -> list[dict[str, Any]]:
    """``k`` examples spread over the problem sizes (deterministic)."""
    ordered = sorted(EXAMPLES, key=lambda e: (e["num_people"], e["id"]))
    return [ordered[round(j * (len(ordered) - 1) / max(k - 1, 1))] for j in range(k)]


def _failures(run: Callable[[dict[str, Any], str], None], times: str, exs: list[dict[str, Any]]) -> list[str]:
    """Run ``run`` on each example; the ids (and messages) of those that fail."""
    failed = []
    for ex in exs:
        try:
            run(ex, times)
        except AssertionError as error:
            failed.append(f"{ex['id']}: {error}")
    return failed


def _compiles_and_admits_gold(ex: dict[str, Any], times: str) -> None:
    spec = meeting.declaration(meeting.problem(ex), times=times)
    assert spec.check_record(meeting.gold_record(ex, times=times)) == []


def _admit_gold(ex: dict[str, Any], times: str) -> None:
    spec = meeting.declaration(meeting.problem(ex), times=times)
    session = spec.session(backend="cpsat")
    for i, row in enumerate(meeting.gold_record(ex, times=times)["meetings"]):
        for key, value in row.items():
            path = f"/meetings/{i}/{key}"
            assert value in session.admissible(path), (path, value)
            session.assign(path, value)


def _solve_matches_gold(ex: dict[str, Any], times: str) -> None:
    spec = meeting.declaration(meeting.problem(ex), times=times)
    record = next(spec.solutions())
    assert meeting.check(meeting.problem(ex), record) == [], record
    assert len(_met(record)) == len(_met(meeting.gold_record(ex)))


@needs_core
def test_declarations_compile_and_admit_gold() -> None:
    for ex in EXAMPLES:
        meeting.declaration(meeting.problem(ex), times="minutes")
    for times in TIMES:
        assert _failures(_compiles_and_admits_gold, times, _spread(10)) == []


@needs_core
def test_cpsat_session_admits_gold_sample() -> None:
    assert _failures(_admit_gold, "clock", _spread(3)) == []


@needs_core
@pytest.mark.parametrize("times", TIMES)
def test_solution_is_valid_and_optimal_sample(times: str) -> None:
    assert _failures(_solve_matches_gold, times, _spread(10)) == []


@needs_core
@pytest.mark.slow
@pytest.mark.parametrize("times", TIMES)
def test_declarations_compile_and_admit_gold_all(times: str) -> None:
    assert _failures(_compiles_and_admits_gold, times, EXAMPLES) == []


@needs_core
@pytest.mark.slow
@pytest.mark.parametrize("times", TIMES)
def test_cpsat_session_admits_gold_all(times: str) -> None:
    assert _failures(_admit_gold, times, EXAMPLES) == []


@needs_core
@pytest.mark.slow
@pytest.mark.parametrize("times", TIMES)
def test_solution_is_valid_and_optimal_all(times: str) -> None:
    assert _failures(_solve_matches_gold, times, EXAMPLES) == []


# ---- objective="gold": the NATURAL PLAN gold convention as a lexicographic objective ----


def _gold_is_the_only_record(ex: dict[str, Any], times: str) -> None:
    """Under objective="gold" every field is certain and the certain values are the gold record's (the gold is
    the unique lexicographic optimum), which the independent checker also accepts, order included."""
    from factorspec_cp.spec import _get
    spec = meeting.declaration(meeting.problem(ex), times=times, objective="gold")
    gold = meeting.gold_record(ex, times=times, objective="gold")
    assert meeting.check(meeting.problem(ex), gold) == []
    assert spec.check_record(gold) == []
    certain = spec.session().certain()
    assert set(certain) == set(spec.fields)
    assert all(_get(gold, p) == v for p, v in certain.items())


def test_gold_objective_leaves_only_the_gold() -> None:
    assert _failures(_gold_is_the_only_record, "minutes", _spread(4)) == []


@pytest.mark.slow
def test_gold_objective_leaves_only_the_gold_in_all_100() -> None:
    assert _failures(_gold_is_the_only_record, "minutes", EXAMPLES) == []


def test_checker_judges_the_order_field() -> None:
    ex = next(e for e in EXAMPLES if len(_met(meeting.gold_record(e))) >= 2)
    gold = meeting.gold_record(ex, objective="gold")
    met = [row for row in gold["meetings"] if row["meet"]]
    met[0]["order"], met[1]["order"] = met[1]["order"], met[0]["order"]  # swapped: no longer the time order
    assert any("order" in p for p in meeting.check(meeting.problem(ex), gold))
    gold = meeting.gold_record(ex, objective="gold")
    unmet = [row for row in gold["meetings"] if not row["meet"]]
    if unmet:
        unmet[0]["order"] = 1
        assert any("order" in p for p in meeting.check(meeting.problem(ex), gold))
    with pytest.raises(ValueError):
        meeting.declaration_doc(ex, objective="latest")  # type: ignore[arg-type]
