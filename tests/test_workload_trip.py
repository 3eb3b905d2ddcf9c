"""NATURAL PLAN trip workload: prompt parser, independent checker, gold records, brute force, declarations.

The checker and the brute force are plain Python; the declaration tests compare the solver against them.
"""

from __future__ import annotations

import copy
import itertools
import time
from functools import cache
from typing import Any

import pytest

from factorspec_cp.workloads import trip
from factorspec_cp.workloads.trip_parse import EVENT_PATTERNS, STAY_PATTERNS, parse_prompt


@cache
def _examples() -> tuple[dict[str, Any], ...]:
    return tuple(trip.examples())


@cache
def _sample() -> tuple[dict[str, Any], ...]:
    return tuple(trip.examples(sample=True))


def _itinerary(p: trip.TripProblem, order: tuple[str, ...]) -> dict[str, Any]:
    """The record visiting ``order``, days following from the stays (start day 1, fly on the last day)."""
    plan, day = [], 1
    for city in order:
        plan.append({"city": city, "first_day": day, "last_day": day + p.stays[city] - 1})
        day += p.stays[city] - 1
    return {"plan": plan}


def _flight_ok(p: trip.TripProblem, order: tuple[str, ...]) -> bool:
    flights = set(p.flights)
    return all(pair in flights for pair in itertools.pairwise(order))


@cache
def _valid_orders(example_id: str) -> tuple[tuple[str, ...], ...]:
    """Every city order whose itinerary the checker accepts (permutations prefiltered by flights)."""
    example = next(e for e in _examples() if e["id"] == example_id)
    prompt = trip.problem(example)
    p = parse_prompt(prompt)
    return tuple(
        order
        for order in itertools.permutations(p.cities)
        if _flight_ok(p, order) and not trip.check(prompt, _itinerary(p, order))
    )


def _small() -> list[dict[str, Any]]:
    return [e for e in _examples() if trip.num_cities(e) <= 7]


# ------------------------------------------------------------------------------------------- data + parser


def test_examples_load() -> None:
    full, sample = _examples(), _sample()
    assert len(full) == 1600 and len(sample) == 100
    counts = {n: sum(trip.num_cities(e) == n for e in full) for n in range(3, 11)}
    assert counts == dict.fromkeys(range(3, 11), 200)
    by_id = {e["id"]: e for e in full}
    for e in sample:  # the sample's prompts and golds are the full file's
        assert trip.problem(e) == trip.problem(by_id[e["id"]])
        assert trip.gold_record(e) == trip.gold_record(by_id[e["id"]])
        assert trip.num_cities(e) == trip.num_cities(by_id[e["id"]])


def test_every_prompt_parses_to_the_constraints_field() -> None:
    for e in _examples():
        p = parse_prompt(trip.problem(e))
        cities = e["constraints"]["cities"].split("**")
        durations = [int(d) for d in e["constraints"]["durations"].split("**")]
        assert p.stays == dict(zip(cities, durations, strict=True)), e["id"]
        assert sorted(p.cities) == sorted(cities)
        assert len(p.cities) == trip.num_cities(e)
        assert sum(p.stays.values()) == p.total_days + len(p.cities) - 1  # flight days count twice


def test_every_pattern_is_used() -> None:
    used: set[str] = set()
    for e in _examples():
        for sentence in trip.problem(e).split("\n\n")[0].split(". "):
            sentence = sentence if sentence.endswith(".") else sentence + "."
            used.update(p.pattern for p in (*STAY_PATTERNS, *EVENT_PATTERNS) if p.fullmatch(sentence))
    assert len(used) == len(STAY_PATTERNS) + len(EVENT_PATTERNS) == 10


def test_flight_directions() -> None:
    p = parse_prompt(trip.problem(_examples()[1]))  # "Riga and Manchester, from Manchester to Split."
    assert p.flights == (("Manchester", "Riga"), ("Manchester", "Split"), ("Riga", "Manchester"))
    one_way = sum(" from " in trip.problem(e).split("\n\n")[1] for e in _examples())
    assert one_way > 0


def test_events_parse() -> None:
    p = parse_prompt(trip.problem(_examples()[0]))
    assert [(ev.city, ev.first_day, ev.last_day) for ev in p.events] == [("Florence", 9, 14)]
    assert p.cities == ("Florence", "Barcelona", "Helsinki")  # order of mention
    assert p.total_days == 14


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("You want to meet a friend in Florence", "You hope to meet a friend in Florence", "unparsed sentence"),
        ("Barcelona and Florence,", "Barcelona or Florence,", "unparsed flight"),
        ("Barcelona and Florence,", "Barcelona and Paris,", "city without a stay"),
        ("meet a friend in Florence", "meet a friend in Paris", "no stay"),
        ("for 14 days in total", "for 15 days in total", "question says"),
        ("3 European cities", "4 European cities", "header says 4 cities"),
        ("You would like to visit Barcelona for 5 days.", "You would like to visit Florence for 5 days.", "second"),
        ("\n\nFind a trip", " Find a trip", "3 paragraphs"),
    ],
)
def test_parser_fails_loudly(old: str, new: str, message: str) -> None:
    prompt = trip.problem(_examples()[0])
    assert old in prompt
    with pytest.raises(ValueError, match=message):
        parse_prompt(prompt.replace(old, new, 1))


def test_unparsed_sentence_is_named() -> None:
    prompt = trip.problem(_examples()[0]).replace("total. ", "total. You love trains. ", 1)
    with pytest.raises(ValueError, match="You love trains"):
        parse_prompt(prompt)


# ------------------------------------------------------------------------------------------ gold + checker


def test_every_gold_is_valid() -> None:
    for e in (*_examples(), *_sample()):
        record = trip.gold_record(e)
        assert trip.check(trip.problem(e), record) == [], e["id"]
        cities = e["constraints"]["cities"] if "constraints" in e else e["cities"]
        assert [s["city"] for s in record["plan"]] == cities.split("**")


def test_gold_record_of_first_example() -> None:
    assert trip.gold_record(_examples()[0]) == {
        "plan": [
            {"city": "Helsinki", "first_day": 1, "last_day": 5},
            {"city": "Barcelona", "first_day": 5, "last_day": 9},
            {"city": "Florence", "first_day": 9, "last_day": 14},
        ]
    }


def test_gold_record_fails_loudly() -> None:
    e = copy.deepcopy(_examples()[0])
    e["expected_properties"]["golden_plan"] += "\n**Day 15:** Relax."
    with pytest.raises(ValueError, match="Relax"):
        trip.gold_record(e)


def _mutations(record: dict[str, Any], p: trip.TripProblem) -> dict[str, dict[str, Any]]:
    """Mutations of a valid record that no valid record equals."""
    plan = record["plan"]
    out: dict[str, Any] = {}

    def mutate(name: str, fn: Any) -> None:
        r = copy.deepcopy(record)
        fn(r["plan"])
        out[name] = r

    mutate(
        "all days shifted", lambda q: [s.update(first_day=s["first_day"] + 1, last_day=s["last_day"] + 1) for s in q]
    )
    mutate("first stay one day longer", lambda q: q[0].update(last_day=q[0]["last_day"] + 1))
    mutate("last stay one day shorter", lambda q: q[-1].update(last_day=q[-1]["last_day"] - 1))
    mutate("gap day", lambda q: [s.update(first_day=s["first_day"] + 1, last_day=s["last_day"] + 1) for s in q[1:]])
    mutate("city repeated", lambda q: q[1].update(city=q[0]["city"]))
    mutate("stay dropped", lambda q: q.pop())
    mutate("stays reversed", lambda q: q.reverse())
    mutate("day as string", lambda q: q[0].update(first_day="1"))
    mutate("day as bool", lambda q: q[0].update(first_day=True))
    mutate("unknown city", lambda q: q[0].update(city="Atlantis"))
    mutate("extra key", lambda q: q[0].update(note="x"))
    out["extra top-level key"] = {**copy.deepcopy(record), "days": p.total_days}
    if p.stays[plan[0]["city"]] != p.stays[plan[1]["city"]]:
        mutate(
            "first two cities swapped, days kept",
            lambda q: (q[0].update(city=plan[1]["city"]), q[1].update(city=plan[0]["city"])),
        )
    return out


def test_checker_rejects_mutated_golds() -> None:
    for e in _examples()[::8]:
        prompt, gold = trip.problem(e), trip.gold_record(e)
        p = parse_prompt(prompt)
        for name, record in _mutations(gold, p).items():
            assert trip.check(prompt, record), (e["id"], name)
        # a city order that breaks a flight, days recomputed: the checker names the missing flight
        bad = next((o for o in itertools.permutations(p.cities) if not _flight_ok(p, o)), None)
        if bad is not None:
            assert any("no direct flight" in v for v in trip.check(prompt, _itinerary(p, bad)))


def test_checker_names_the_event() -> None:
    e = _examples()[0]
    prompt = trip.problem(e)
    record = trip.gold_record(e)
    record["plan"] = [{**s, "first_day": s["first_day"] - 1, "last_day": s["last_day"] - 1} for s in record["plan"]]
    record["plan"][0]["first_day"] = 1
    messages = trip.check(prompt, record)
    assert any("meet a friend in Florence" in m for m in messages), messages


def test_brute_force_counts() -> None:
    """3 and 4 cities: one valid itinerary; 22 of the 1,000 problems with 3..7 cities have several."""
    start = time.perf_counter()
    several = []
    for e in _small():
        orders = _valid_orders(e["id"])
        gold = tuple(s["city"] for s in trip.gold_record(e)["plan"])
        assert gold in orders, e["id"]
        if trip.num_cities(e) <= 4:
            assert orders == (gold,), e["id"]
        if len(orders) > 1:
            several.append(e["id"])
    assert len(_small()) == 1000
    assert len(several) == 22
    assert time.perf_counter() - start < 30


def test_only_events_reject_flight_valid_orders() -> None:
    """With days following from the stays, a flight-valid order can only fail on an event window."""
    for e in _small()[::5]:
        prompt = trip.problem(e)
        p = parse_prompt(prompt)
        for order in itertools.permutations(p.cities):
            if _flight_ok(p, order):
                assert all(
                    "between day" in v or "From day" in v or "During day" in v
                    for v in trip.check(prompt, _itinerary(p, order))
                )


@pytest.mark.slow
def test_brute_force_without_prefilter() -> None:
    """Every permutation through the checker, no flight prefilter: the same valid orders."""
    for e in _small():
        prompt = trip.problem(e)
        p = parse_prompt(prompt)
        valid = tuple(o for o in itertools.permutations(p.cities) if not trip.check(prompt, _itinerary(p, o)))
        assert valid == _valid_orders(e["id"]), e["id"]


# --------------------------------------------------------------------------------------------- declaration


def test_declaration_doc_shape() -> None:
    e = _examples()[1]
    doc = trip.declaration_doc(trip.problem(e))
    plan = doc["properties"]["plan"]
    assert plan["minItems"] == plan["maxItems"] == 3
    assert doc["additionalProperties"] is False and doc["required"] == ["plan"]
    item = plan["items"]
    assert item["additionalProperties"] is False and item["required"] == ["city", "first_day", "last_day"]
    assert item["properties"]["city"] == {"enum": ["Split", "Manchester", "Riga"]}
    assert item["properties"]["last_day"] == {"type": "integer", "minimum": 1, "maximum": 15}
    relations = doc["x-factorspec"]["relations"]
    names = [r["name"] for r in relations]
    assert len(names) == len(set(names))
    table = next(r for r in relations if r["kind"] == "table")
    assert table["rows"] == [["Manchester", "Riga"], ["Manchester", "Split"], ["Riga", "Manchester"]]
    # 5 global relations, one stay relation per city, two per event
    p = parse_prompt(trip.problem(e))
    assert len(relations) == 5 + len(p.cities) + 2 * len(p.events)


# ------------------------------------------------------------------------------------ declaration vs core

try:
    from factorspec_cp import Spec  # noqa: F401

    _HAVE_CORE = True
except ImportError:  # the core is built alongside the workloads
    _HAVE_CORE = False

needs_core = pytest.mark.skipif(not _HAVE_CORE, reason="factorspec_cp.Spec not available")


def _gold_fields(record: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(json pointer, value)`` of every field of a record, in layout order."""
    return [(f"/plan/{i}/{key}", stay[key]) for i, stay in enumerate(record["plan"]) for key in stay]


def _record_key(record: dict[str, Any]) -> tuple[tuple[str, int, int], ...]:
    return tuple((s["city"], s["first_day"], s["last_day"]) for s in record["plan"])


def _compiles(examples: list[dict[str, Any]]) -> None:
    for e in examples:
        prompt = trip.problem(e)
        p = parse_prompt(prompt)
        spec = trip.declaration(prompt)
        assert list(spec.fields) == [path for path, _ in _gold_fields(trip.gold_record(e))], e["id"]
        for i in range(len(p.cities)):
            assert list(spec.fields[f"/plan/{i}/city"].values) == list(p.cities)
            assert list(spec.fields[f"/plan/{i}/first_day"].values) == list(range(1, p.total_days + 1))


@needs_core
def test_declarations_compile_sample() -> None:
    _compiles(list(_examples()[::8]))


@needs_core
@pytest.mark.slow
def test_every_declaration_compiles() -> None:
    _compiles(list(_examples()))


def _admit_gold_field_by_field(e: dict[str, Any], backend: str | None = None) -> None:
    """Walk the gold record field by field: each gold value is admissible, then assigned."""
    session = trip.declaration(trip.problem(e)).session(backend=backend)
    try:
        for path, value in _gold_fields(trip.gold_record(e)):
            admissible = session.admissible(path)
            assert value in admissible, (e["id"], path, value, admissible)
            session.assign(path, value)
        assert session.certain() == dict(_gold_fields(trip.gold_record(e)))
    finally:
        session.close()


@needs_core
def test_gold_admitted_field_by_field_sample() -> None:
    for e in _examples()[::50]:  # 32 problems, every city count
        _admit_gold_field_by_field(e)


@needs_core
@pytest.mark.slow
def test_gold_admitted_field_by_field_all() -> None:
    """All 1,600 golds on the default backend (several minutes: session set-up dominates at 8-10 cities)."""
    for e in _examples():
        _admit_gold_field_by_field(e)


@needs_core
@pytest.mark.parametrize("backend", ["sat", "cpsat", "csp"])
def test_gold_admitted_by_every_backend(backend: str) -> None:
    for e in [e for e in _examples() if trip.num_cities(e) <= 5][::50]:
        _admit_gold_field_by_field(e, backend)


@needs_core
def test_backends_agree_on_open_fields() -> None:
    """Before any assignment, the three backends admit the same values for every field."""
    for e in [e for e in _small() if len(_valid_orders(e["id"])) > 1 and trip.num_cities(e) <= 5]:
        spec = trip.declaration(trip.problem(e))
        answers = []
        for backend in ("sat", "cpsat", "csp"):
            session = spec.session(backend=backend)
            answers.append({path: sorted(map(str, session.admissible(path))) for path in spec.fields})
            session.close()
        assert answers[0] == answers[1] == answers[2], e["id"]


@needs_core
def test_unique_itinerary_is_certain_before_any_assignment() -> None:
    """With one valid itinerary (3 and 4 cities) every field is certain from the start."""
    for e in [e for e in _examples() if trip.num_cities(e) <= 4][::20]:
        session = trip.declaration(trip.problem(e)).session()
        assert session.certain() == dict(_gold_fields(trip.gold_record(e))), e["id"]
        session.close()


def _solutions_match(examples: list[dict[str, Any]]) -> None:
    for e in examples:
        prompt = trip.problem(e)
        p = parse_prompt(prompt)
        found = [_record_key(r) for r in trip.declaration(prompt).solutions()]
        assert len(found) == len(set(found)), e["id"]
        assert set(found) == {_record_key(_itinerary(p, o)) for o in _valid_orders(e["id"])}, e["id"]


@needs_core
def test_solutions_equal_brute_force_sample() -> None:
    """Every problem with several itineraries, and every 25th of the rest (3..7 cities)."""
    several = [e for e in _small() if len(_valid_orders(e["id"])) > 1]
    _solutions_match([*_small()[::25], *several])


@needs_core
@pytest.mark.slow
def test_solutions_equal_brute_force_all() -> None:
    _solutions_match(_small())


@needs_core
def test_spec_check_record_agrees_with_checker() -> None:
    for e in _examples()[::40]:
        prompt, gold = trip.problem(e), trip.gold_record(e)
        spec = trip.declaration(prompt)
        assert spec.check_record(gold) == [], e["id"]
        for name, record in _mutations(gold, parse_prompt(prompt)).items():
            assert spec.check_record(record), (e["id"], name)
