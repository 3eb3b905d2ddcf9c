"""NATURAL PLAN trip planning: prompt text -> declaration, an independent checker, gold records, a loader.

The record is ``{"plan": [{"city", "first_day", "last_day"}, ...]}`` with one stay per city, in visiting
order. A flight day counts for both cities: the next stay starts on the day the previous one ends.

>>> ex = next(examples())
>>> gold = gold_record(ex)
>>> gold["plan"][0]
{'city': 'Helsinki', 'first_day': 1, 'last_day': 5}
>>> check(problem(ex), gold)
[]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from factorspec_cp.workloads._data import data_dir
from factorspec_cp.workloads.trip_parse import TripEvent, TripProblem, parse_prompt

if TYPE_CHECKING:
    from factorspec_cp import Spec

__all__ = [
    "TripEvent",
    "TripProblem",
    "check",
    "declaration",
    "declaration_doc",
    "examples",
    "gold_record",
    "num_cities",
    "parse_prompt",
    "problem",
]

FULL_FILE = "natural-plan/full-0shot/trip_planning.jsonl"
SAMPLE_FILE = "natural-plan/sample100-allfields/trip_planning_100.json"


# ---------------------------------------------------------------------------------------------- loader


def examples(*, sample: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the trip examples: all 1,600 (0-shot JSONL), or with ``sample=True`` the 100 with all fields.

    Full examples carry ``id``, ``constraints``, ``input`` and ``expected_properties.golden_plan``; sample
    examples carry ``id`` (added from the key) and the official fields (``prompt_0shot``, ``golden_plan``, ...).
    """
    if sample:
        with open(data_dir() / SAMPLE_FILE, encoding="utf-8") as fh:
            for key, value in json.load(fh).items():
                yield {"id": key, **value}
        return
    with open(data_dir() / FULL_FILE, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def problem(example: dict[str, Any]) -> str:
    """The 0-shot prompt text of an example (what :func:`declaration` and :func:`check` take)."""
    if "prompt_0shot" in example:
        return str(example["prompt_0shot"])
    return str(example["input"])


def num_cities(example: dict[str, Any]) -> int:
    """How many cities the example visits (``num_cities`` where present, else counted from the gold cities)."""
    if "num_cities" in example:
        return int(example["num_cities"])
    cities = example["constraints"]["cities"] if "constraints" in example else example["cities"]
    return len(str(cities).split("**"))


# ----------------------------------------------------------------------------------------- declaration


def _city(i: int | str) -> str:
    return f"/plan/{i}/city"


def declaration_doc(prompt: str) -> dict[str, Any]:
    """The JSON declaration (schema + ``x-factorspec`` relations) of a trip prompt."""
    p = parse_prompt(prompt)
    n, total = len(p.cities), p.total_days
    day = {"type": "integer", "minimum": 1, "maximum": total}
    stay_item = {
        "type": "object",
        "additionalProperties": False,
        "required": ["city", "first_day", "last_day"],
        "properties": {"city": {"enum": list(p.cities)}, "first_day": dict(day), "last_day": dict(day)},
    }
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["plan"],
        "properties": {"plan": {"type": "array", "minItems": n, "maxItems": n, "items": stay_item}},
    }
    relations: list[dict[str, Any]] = [
        {"name": "visit each city once", "kind": "all_different", "fields": ["/plan/*/city"]},
        {"name": "arrive on day 1", "kind": "linear", "terms": [[1, "/plan/0/first_day"]], "op": "==", "rhs": 1},
        {
            "name": f"leave on day {total}",
            "kind": "linear",
            "terms": [[1, f"/plan/{n - 1}/last_day"]],
            "op": "==",
            "rhs": total,
        },
        {
            "name": "direct flight between consecutive cities",
            "kind": "table",
            "fields": [_city("{i}"), _city("{i+1}")],
            "rows": [list(edge) for edge in p.flights],
        },
        {
            "name": "fly on the last day of the previous stay",
            "kind": "linear",
            "terms": [[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]],
            "op": "==",
            "rhs": 0,
        },
    ]
    for city in p.cities:
        relations.append(
            {
                "name": f"stay in {city} for {p.stays[city]} days",
                "kind": "implies",
                "if": {"field": _city("{i}"), "op": "==", "value": city},
                "then": {
                    "kind": "linear",
                    "terms": [[1, "/plan/{i}/last_day"], [-1, "/plan/{i}/first_day"]],
                    "op": "==",
                    "rhs": p.stays[city] - 1,
                },
            }
        )
    for event in p.events:
        for end, value in (("first_day", event.first_day), ("last_day", event.last_day)):
            relations.append(
                {
                    "name": f"{event.text} ({end.replace('_', ' ')} {value})",
                    "kind": "implies",
                    "if": {"field": _city("{i}"), "op": "==", "value": event.city},
                    "then": {"kind": "linear", "terms": [[1, f"/plan/{{i}}/{end}"]], "op": "==", "rhs": value},
                }
            )
    return {**schema, "x-factorspec": {"relations": relations}}


def declaration(prompt: str) -> Spec:
    """The compiled :class:`~factorspec_cp.Spec` of a trip prompt."""
    from factorspec_cp import Spec

    return Spec.from_json(declaration_doc(prompt))


# --------------------------------------------------------------------------------------------- checker


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_errors(p: TripProblem, record: Any) -> list[str]:
    """Schema-level problems: keys, list length, types and ranges. Empty when the record is well formed."""
    if not isinstance(record, dict) or set(record) != {"plan"}:
        return [f"record must be an object with exactly the key 'plan', got {record!r:.80}"]
    plan = record["plan"]
    if not isinstance(plan, list) or len(plan) != len(p.cities):
        return [f"plan must be a list of {len(p.cities)} stays, got {plan!r:.80}"]
    errors = []
    for i, stay in enumerate(plan):
        if not isinstance(stay, dict) or set(stay) != {"city", "first_day", "last_day"}:
            errors.append(f"plan[{i}] must have exactly city, first_day, last_day: {stay!r:.80}")
            continue
        if stay["city"] not in p.cities:
            errors.append(f"plan[{i}].city {stay['city']!r} is not one of {list(p.cities)}")
        for key in ("first_day", "last_day"):
            if not _is_int(stay[key]) or not 1 <= stay[key] <= p.total_days:
                errors.append(f"plan[{i}].{key} {stay[key]!r} is not an integer in 1..{p.total_days}")
    return errors


def check(prompt: str, record: Any) -> list[str]:
    """Violations of the trip constraints by ``record`` (empty when valid); plain Python, no solver or Spec."""
    p = parse_prompt(prompt)
    errors = _shape_errors(p, record)
    if errors:
        return errors
    plan: list[dict[str, Any]] = record["plan"]
    order = [stay["city"] for stay in plan]
    for city in p.cities:
        if order.count(city) != 1:
            errors.append(f"{city} is visited {order.count(city)} times, must be once")
    for i, stay in enumerate(plan):
        length = stay["last_day"] - stay["first_day"] + 1
        if length != p.stays[stay["city"]]:
            errors.append(
                f"plan[{i}]: {stay['city']} days {stay['first_day']}-{stay['last_day']} is {length} days,"
                f" must be {p.stays[stay['city']]}"
            )
    flights = set(p.flights)
    for i, (a, b) in enumerate(pairwise(plan)):
        if (a["city"], b["city"]) not in flights:
            errors.append(f"plan[{i}]->plan[{i + 1}]: no direct flight from {a['city']} to {b['city']}")
        if b["first_day"] != a["last_day"]:
            errors.append(
                f"plan[{i + 1}]: {b['city']} starts on day {b['first_day']}, must start on the flight day"
                f" {a['last_day']} (last day in {a['city']})"
            )
    if plan[0]["first_day"] != 1:
        errors.append(f"plan[0]: the trip starts on day {plan[0]['first_day']}, must start on day 1")
    if plan[-1]["last_day"] != p.total_days:
        errors.append(f"plan[-1]: the trip ends on day {plan[-1]['last_day']}, must end on day {p.total_days}")
    for event in p.events:
        for i, stay in enumerate(plan):
            if stay["city"] == event.city and (stay["first_day"], stay["last_day"]) != (
                event.first_day,
                event.last_day,
            ):
                errors.append(
                    f"plan[{i}]: {event.city} days {stay['first_day']}-{stay['last_day']}, must be days"
                    f" {event.first_day}-{event.last_day} ({event.text})"
                )
    return errors


# ------------------------------------------------------------------------------------------------ gold

_GOLD_HEAD = re.compile(r"Here is the trip plan for visiting the \d+ European cities for \d+ days:")
_GOLD_STAY = re.compile(
    r"\*\*Day (?P<a>\d+)-(?P<b>\d+):\*\* (?:Arriving in (?P<arrive>[A-Z][A-Za-z]*) and visit|Visit)"
    r" (?P<city>[A-Z][A-Za-z]*) for (?P<days>\d+) days\."
)
_GOLD_FLY = re.compile(r"\*\*Day \d+:\*\* Fly from [A-Z][A-Za-z]* to [A-Z][A-Za-z]*\.")


def gold_record(example: dict[str, Any]) -> dict[str, Any]:
    """The gold plan as a record, from ``golden_plan`` text (``**Day 1-5:** Arriving in Helsinki ...``)."""
    text = example["golden_plan"] if "golden_plan" in example else example["expected_properties"]["golden_plan"]
    plan = []
    for line in str(text).strip().splitlines():
        line = line.strip()
        if not line or _GOLD_HEAD.fullmatch(line) or _GOLD_FLY.fullmatch(line):
            continue
        m = _GOLD_STAY.fullmatch(line)
        if m is None or (m["arrive"] is not None and m["arrive"] != m["city"]):
            raise ValueError(f"golden plan: unparsed line {line!r}")
        first, last = int(m["a"]), int(m["b"])
        if last - first + 1 != int(m["days"]):
            raise ValueError(f"golden plan: days {first}-{last} disagree with '{m['days']} days' in {line!r}")
        plan.append({"city": m["city"], "first_day": first, "last_day": last})
    return {"plan": plan}
