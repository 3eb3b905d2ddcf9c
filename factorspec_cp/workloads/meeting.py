"""NATURAL PLAN meeting planning: declarations, an independent checker and gold records.

The declaration is built from the structured fields of an example (``constraints`` and ``dist_matrix``), never
from the prompt text. A record has one entry per person, in the order ``constraints`` lists them::

    {"meetings": [{"person": "Sarah", "location": "Fisherman's Wharf", "meet": true,
                   "start": "2:45PM", "end": "4:30PM"}, ...]}

Times are clock strings such as ``"2:45PM"`` (an enum over every minute from the start time to 11:59PM) that
take part in arithmetic through mapped linear terms; ``times="minutes"`` declares them as integers of minutes
since midnight instead: the same model, but its JSON is 44 kB instead of 3.6 MB for 10 people (every mapped term
carries its 900-entry map) and it compiles about 10x faster. A person who is not met gets the
canonical start and end ``"9:00AM"`` (the start time), so every plan has exactly one record.

Travel times are shortest paths over ``dist_matrix``: the official evaluator lets a plan chain travel steps
(A -> B -> C without a meeting at B), and 4 of the 100 sample matrices break the triangle inequality (by at most
3 minutes). With shortest paths, "every pair of met people is separated by the travel time" is exactly the
sequential feasibility of the plan; on this sample the optimum is the same either way.

>>> ex = next(examples())
>>> check(problem(ex), gold_record(ex))
[]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from factorspec_cp.workloads._data import data_dir

if TYPE_CHECKING:
    from factorspec_cp import Spec

DATA_FILE = "natural-plan/sample100-allfields/meeting_planning_100.json"
DAY_END = 23 * 60 + 59
Times = Literal["clock", "minutes"]
Goal = Literal["gold"] | None
_CLOCK = re.compile(r"(1[0-2]|[1-9]):([0-5][0-9])(AM|PM)")
_MEET = re.compile(r"You meet (.+) for (\d+) minutes from (\S+) to (\S+)\.")
_OTHER = (
    re.compile(r"You start at (.+) at (\S+)\."),
    re.compile(r"You travel to (.+) in (\d+) minutes and arrive at (\S+)\."),
    re.compile(r"You wait until (\S+)\."),
)


def to_minutes(clock: str) -> int:
    """Minutes since midnight of a clock string such as ``"2:45PM"`` (``ValueError`` if malformed)."""
    match = _CLOCK.fullmatch(clock)
    if match is None:
        raise ValueError(f"not a clock time like '2:45PM': {clock!r}")
    hour, minute, half = int(match[1]) % 12, int(match[2]), match[3]
    return (hour + (12 if half == "PM" else 0)) * 60 + minute


def to_clock(minutes: int) -> str:
    """The clock string of ``minutes`` since midnight, as the data writes it (``545 -> "9:05AM"``)."""
    hour, minute = divmod(minutes, 60)
    return f"{(hour - 1) % 12 + 1}:{minute:02d}{'AM' if hour < 12 else 'PM'}"


@dataclass(frozen=True)
class Person:
    """One friend: where they are, their availability window (minutes) and the minimum meeting length."""

    name: str
    location: str
    earliest: int
    latest: int
    minimum: int


@dataclass(frozen=True)
class MeetingProblem:
    """The structured content of one example, with shortest-path travel minutes between every two locations."""

    start_location: str
    start_time: int
    people: tuple[Person, ...]
    travel: Mapping[str, Mapping[str, int]]


def shortest_travel(dist: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """All-pairs shortest travel minutes over the directed ``dist_matrix`` (Floyd-Warshall)."""
    places = list(dist)
    best = {a: {b: 0 if a == b else int(dist[a][b]) for b in places} for a in places}
    for via in places:
        for a in places:
            for b in places:
                best[a][b] = min(best[a][b], best[a][via] + best[via][b])
    return best


def parse(example: Mapping[str, Any]) -> MeetingProblem:
    """Read ``constraints`` and ``dist_matrix`` of an example (or of what ``problem`` returns)."""
    (start_location, start_clock), *rows = example["constraints"]
    people = []
    for name, location, window, minimum in rows:
        first, last = (part.strip() for part in window.split(" to "))
        people.append(Person(name, location, to_minutes(first), to_minutes(last), int(minimum)))
    if len({p.name for p in people}) != len(people) or len(people) != example.get("num_people", len(people)):
        raise ValueError(f"people must be unique and num_people of them: {[p.name for p in people]}")
    return MeetingProblem(start_location, to_minutes(start_clock), tuple(people),
                          shortest_travel(example["dist_matrix"]))


def examples() -> Iterator[dict[str, Any]]:
    """The 100 sample examples with every official field, each with its ``id`` added."""
    with open(data_dir() / DATA_FILE, encoding="utf-8") as handle:
        data = json.load(handle)
    for key, example in data.items():
        yield {"id": key, **example}


def problem(example: Mapping[str, Any]) -> dict[str, Any]:
    """The structured part of an example that ``declaration`` and ``check`` read (no prompt, no gold)."""
    return {key: example[key] for key in ("id", "num_people", "constraints", "dist_matrix") if key in example}


def time_values(start_time: int) -> list[str]:
    """Every minute of the day window, from ``start_time`` to 11:59PM, as clock strings."""
    return [to_clock(m) for m in range(start_time, DAY_END + 1)]


def declaration_doc(example: Mapping[str, Any], *, times: Times = "clock", objective: Goal = None) -> dict[str, Any]:
    """The JSON declaration: schema, named relations and the objective "meet as many people as possible".

    ``objective="gold"`` declares the NATURAL PLAN gold convention (established from the data in
    ``notes/gold_conventions.md``: it rebuilds the gold in 100 of 100 problems): each entry gains ``order``, its
    place in the plan (0: not met), and the objective is lexicographic: most people met, then the first plan in
    the permutation order of the constraints list (one exact level: a base-(n+1) numeral whose digits are the entry
    indices in plan order), then every meeting as early as possible for exactly its minimum (least sum of starts
    and ends, which with the order fixed pins every time). Only the gold schedule is then admissible."""
    if objective not in (None, "gold"):
        raise ValueError(f"objective must be None or 'gold', not {objective!r}")
    prob = parse(example)
    day0, people, travel = prob.start_time, prob.people, prob.travel
    if times == "clock":
        minute_map = {to_clock(m): m for m in range(day0, DAY_END + 1)}
        time_schema: dict[str, Any] = {"enum": list(minute_map)}
    elif times == "minutes":
        time_schema = {"type": "integer", "minimum": day0, "maximum": DAY_END}
    else:
        raise ValueError(f"times must be 'clock' or 'minutes', not {times!r}")

    def term(coef: int, i: int, key: str) -> list[Any]:
        path = f"/meetings/{i}/{key}"
        return [coef, path, minute_map] if times == "clock" else [coef, path]

    def linear(name: str, terms: list[list[Any]], op: str, rhs: int) -> dict[str, Any]:
        return {"kind": "linear", "name": name, "terms": terms, "op": op, "rhs": rhs}

    def met(i: int, value: bool = True) -> dict[str, Any]:
        return {"field": f"/meetings/{i}/meet", "op": "==", "value": value}

    # One `items` schema serves every entry (the core has no prefixItems), so a one-row table pins entry i's
    # person and location; the solver sees them as certain fields.
    relations: list[dict[str, Any]] = []
    for i, p in enumerate(people):
        window = f"{to_clock(p.earliest)}-{to_clock(p.latest)}"
        arrive = day0 + travel[prob.start_location][p.location]
        relations += [
            {"kind": "table", "name": f"entry {i} is {p.name} at {p.location}",
             "fields": [f"/meetings/{i}/person", f"/meetings/{i}/location"], "rows": [[p.name, p.location]]},
            {"kind": "implies", "name": f"{p.name} starts in window {window}", "if": met(i),
             "then": linear(f"{p.name} start >= {to_clock(p.earliest)}", [term(1, i, "start")], ">=", p.earliest)},
            {"kind": "implies", "name": f"{p.name} ends in window {window}", "if": met(i),
             "then": linear(f"{p.name} end <= {to_clock(p.latest)}", [term(1, i, "end")], "<=", p.latest)},
            {"kind": "implies", "name": f"{p.name} for at least {p.minimum} minutes", "if": met(i),
             "then": linear(f"{p.name} end - start >= {p.minimum}",
                            [term(1, i, "end"), term(-1, i, "start")], ">=", p.minimum)},
            {"kind": "implies", "name": f"{p.name} reachable from {prob.start_location} by {to_clock(arrive)}",
             "if": met(i),
             "then": linear(f"{p.name} start >= {to_clock(arrive)}", [term(1, i, "start")], ">=", arrive)},
            {"kind": "implies", "name": f"{p.name} not met: start is {to_clock(day0)}", "if": met(i, False),
             "then": linear(f"{p.name} start == {to_clock(day0)}", [term(1, i, "start")], "==", day0)},
            {"kind": "implies", "name": f"{p.name} not met: end is {to_clock(day0)}", "if": met(i, False),
             "then": linear(f"{p.name} end == {to_clock(day0)}", [term(1, i, "end")], "==", day0)},
        ]
    for i, p in enumerate(people):
        for j in range(i + 1, len(people)):
            q = people[j]
            go, back = travel[p.location][q.location], travel[q.location][p.location]
            relations.append(
                {"kind": "implies", "name": f"travel between {p.name} and {q.name}", "if": [met(i), met(j)],
                 "then": {"kind": "any", "name": f"{p.name} and {q.name} in some order", "relations": [
                     linear(f"{p.name} then {go} min to {q.name}", [term(1, i, "end"), term(-1, j, "start")],
                            "<=", -go),
                     linear(f"{q.name} then {back} min to {p.name}", [term(1, j, "end"), term(-1, i, "start")],
                            "<=", -back)]}})
    n = len(people)
    props: dict[str, Any] = {"person": {"enum": [p.name for p in people]},
                             "location": {"enum": sorted({p.location for p in people})},
                             "meet": {"type": "boolean"}}
    most: dict[str, Any] = {"maximize": [[1, f"/meetings/{i}/meet"] for i in range(n)], "require": "optimal"}
    goal: Any = most
    if objective == "gold":
        props["order"] = {"type": "integer", "minimum": 0, "maximum": n}
        relations += _order_relations(prob, term, linear, met)
        numeral = [[1, f"/meetings/{i}/order", {str(k): (i + 1) * (n + 1) ** (n - k) if k else 0
                                               for k in range(n + 1)}] for i in range(n)]
        goal = [most, {"minimize": numeral, "require": "optimal"},
                {"minimize": [term(1, i, key) for i in range(n) for key in ("start", "end")], "require": "optimal"}]
    props.update({"start": time_schema, "end": dict(time_schema)})
    item = {"type": "object", "additionalProperties": False, "required": list(props), "properties": props}
    return {
        "type": "object", "additionalProperties": False, "required": ["meetings"],
        "properties": {"meetings": {"type": "array", "minItems": n, "maxItems": n, "items": item}},
        "x-factorspec": {"relations": relations, "objective": goal},
    }


def _order_relations(prob: MeetingProblem, term: Any, linear: Any, met: Any) -> list[dict[str, Any]]:
    """What ``order`` means: 0 exactly when not met, the met entries numbered 1..m, and each met entry right
    before another separated from it by the travel time."""
    people, travel = prob.people, prob.travel
    n = len(people)
    out: list[dict[str, Any]] = []

    def order(coef: int, i: int) -> list[Any]:
        return [coef, f"/meetings/{i}/order"]

    for i, p in enumerate(people):
        out += [
            {"kind": "implies", "name": f"{p.name} not met: order is 0", "if": met(i, False),
             "then": linear(f"{p.name} order == 0", [order(1, i)], "==", 0)},
            {"kind": "implies", "name": f"{p.name} met: order >= 1", "if": met(i),
             "then": linear(f"{p.name} order >= 1", [order(1, i)], ">=", 1)},
            linear(f"{p.name} order <= number met", [order(1, i)] + [[-1, f"/meetings/{j}/meet"] for j in range(n)],
                   "<=", 0),
        ]
    for i, p in enumerate(people):
        for j, q in enumerate(people):
            if i == j:
                continue
            if i < j:
                out.append({"kind": "implies", "name": f"{p.name} and {q.name} at different places in the plan",
                            "if": [met(i), met(j)],
                            "then": linear(f"{p.name} order != {q.name} order", [order(1, i), order(-1, j)], "!=", 0)})
            go = travel[p.location][q.location]
            out.append({"kind": "implies", "name": f"{p.name} right before {q.name}: {go} min travel",
                        "if": [met(i), met(j)], "then": {"kind": "any", "name": f"{p.name} not right before {q.name}, "
                                                         f"or {go} min between", "relations": [
                            linear(f"{q.name} order - {p.name} order != 1", [order(1, j), order(-1, i)], "!=", 1),
                            linear(f"{q.name} start - {p.name} end >= {go}", [term(1, j, "start"), term(-1, i, "end")],
                                   ">=", go)]}})
    return out


def declaration(example: Mapping[str, Any], *, times: Times = "clock", objective: Goal = None) -> Spec:
    """The compiled declaration of ``declaration_doc``."""
    from factorspec_cp import Spec

    return Spec.from_json(declaration_doc(example, times=times, objective=objective))


def gold_record(example: Mapping[str, Any], *, times: Times = "clock", objective: Goal = None) -> dict[str, Any]:
    """The record of the example's ``golden_plan`` (people the gold does not meet get the canonical values);
    with ``objective="gold"`` each entry carries its ``order`` in the gold plan (0: not met)."""
    prob = parse(example)
    meets: dict[str, tuple[str, str]] = {}
    for sentence in example["golden_plan"]:
        match = _MEET.fullmatch(sentence.strip())
        if match is not None:
            if match[1] in meets or match[1] not in {p.name for p in prob.people}:
                raise ValueError(f"gold meets an unknown person or someone twice: {sentence!r}")
            meets[match[1]] = (match[3], match[4])
        elif not any(pattern.fullmatch(sentence.strip()) for pattern in _OTHER):
            raise ValueError(f"unknown gold sentence: {sentence!r}")
    idle = to_clock(prob.start_time)
    as_time = to_minutes if times == "minutes" else str
    rows = []
    place = {name: k + 1 for k, name in enumerate(meets)}  # the gold's sentence order
    for p in prob.people:
        start, end = meets.get(p.name, (idle, idle))
        row: dict[str, Any] = {"person": p.name, "location": p.location, "meet": p.name in meets}
        if objective == "gold":
            row["order"] = place.get(p.name, 0)
        rows.append({**row, "start": as_time(start), "end": as_time(end)})
    return {"meetings": rows}


def max_meetings(prob: MeetingProblem) -> int:
    """The most people any plan meets: exact DP over (set met, last person) keeping the earliest finish."""
    people, travel = prob.people, prob.travel
    finish: dict[tuple[int, int], int] = {}
    for k, p in enumerate(people):
        begin = max(p.earliest, prob.start_time + travel[prob.start_location][p.location])
        if begin + p.minimum <= p.latest:
            finish[1 << k, k] = begin + p.minimum
    for mask in range(1, 1 << len(people)):  # supersets are numerically larger, so one pass suffices
        for last in range(len(people)):
            done = finish.get((mask, last))
            if done is None:
                continue
            for k, p in enumerate(people):
                if mask >> k & 1:
                    continue
                begin = max(p.earliest, done + travel[people[last].location][p.location])
                key = (mask | 1 << k, k)
                if begin + p.minimum <= p.latest and begin + p.minimum < finish.get(key, DAY_END + 1):
                    finish[key] = begin + p.minimum
    return max((mask.bit_count() for mask, _ in finish), default=0)


def _time(value: Any, where: str, problems: list[str]) -> int | None:
    """A record time (clock string or integer minutes) in minutes, or None with a violation noted."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        problems.append(f"{where}: not a time: {value!r}")
        return None
    try:
        minutes = to_minutes(value) if isinstance(value, str) else value
    except ValueError as error:
        problems.append(f"{where}: {error}")
        return None
    if not 0 <= minutes <= DAY_END:
        problems.append(f"{where}: {value!r} is outside the day")
        return None
    return minutes


def check(example: Mapping[str, Any], record: Any) -> list[str]:
    """Violations of ``record`` (empty when valid): shape, windows, minimum lengths, travel, optimality.

    Plain Python, independent of the declaration: feasibility is checked in time order from the start
    location, optimality against ``max_meetings``. Times may be clock strings or integer minutes.
    """
    prob = parse(example)
    rows = record.get("meetings") if isinstance(record, dict) else None
    if not isinstance(rows, list) or len(rows) != len(prob.people):
        return [f"record must be {{'meetings': [{len(prob.people)} entries]}}"]
    problems: list[str] = []
    visits: list[tuple[int, int, Person]] = []
    for i, (row, p) in enumerate(zip(rows, prob.people, strict=True)):
        if not isinstance(row, dict) or set(row) - {"person", "location", "meet", "order", "start", "end"}:
            problems.append(f"entry {i}: unexpected shape {row!r}")
            continue
        if row.get("person") != p.name or row.get("location", p.location) != p.location:
            problems.append(f"entry {i}: must be {p.name} at {p.location}, not {row.get('person')!r}")
        start = _time(row.get("start"), f"{p.name} start", problems)
        end = _time(row.get("end"), f"{p.name} end", problems)
        if not isinstance(row.get("meet"), bool):
            problems.append(f"{p.name}: meet must be true or false, not {row.get('meet')!r}")
        elif start is None or end is None:
            continue
        elif not row["meet"]:
            if start != prob.start_time or end != prob.start_time:
                problems.append(f"{p.name} not met: start and end must both be {to_clock(prob.start_time)}")
        else:
            span = f"{p.name} met {to_clock(start)}-{to_clock(end)}"
            if start < p.earliest or end > p.latest:
                problems.append(f"{span} outside window {to_clock(p.earliest)}-{to_clock(p.latest)}")
            if end - start < p.minimum:
                problems.append(f"{span} shorter than {p.minimum} minutes")
            visits.append((start, end, p))
    visits.sort(key=lambda visit: (visit[0], visit[1]))
    orders = [row.get("order") for row in rows if isinstance(row, dict) and "order" in row]
    if orders:  # the plan order, where the record states it: 0 when not met, the met numbered 1..m in time order
        index = {p.name: i for i, p in enumerate(prob.people)}
        if len(orders) != len(rows) or any(isinstance(o, bool) or not isinstance(o, int) for o in orders):
            problems.append("order must be an integer in every entry")
        else:
            met_orders = [rows[index[p.name]]["order"] for _, _, p in visits]
            if met_orders != list(range(1, len(visits) + 1)):
                problems.append(f"order of the met people in time order must be 1..{len(visits)}, not {met_orders}")
            if any(o != 0 for o, row in zip(orders, rows) if row.get("meet") is False):
                problems.append("a person not met must have order 0")
    here, free = prob.start_location, prob.start_time
    for k, (start, end, p) in enumerate(visits):
        if k and start < visits[k - 1][1]:
            problems.append(f"{visits[k - 1][2].name} and {p.name} overlap")
        elif free + prob.travel[here][p.location] > start:
            problems.append(f"{p.name} at {to_clock(start)}: {p.location} is {prob.travel[here][p.location]} min"
                            f" from {here}, free at {to_clock(free)}")
        here, free = p.location, max(free, end)
    if not problems and len(visits) < (best := max_meetings(prob)):
        problems.append(f"not optimal: meets {len(visits)} people, {best} is possible")
    return problems
