"""NATURAL PLAN calendar scheduling: prompt text -> declaration, independent checker, gold records.

A record is ``{"day": "Monday", "start": "14:30", "end": "15:30"}``: ``day`` one of the candidate days,
``start``/``end`` clock strings (``H:MM``, no leading zero, as the prompts write them) on the problem's grid
(30 minutes unless a time in the problem is off it). Relations, each named after its source sentence:

- ``duration 30 min``: ``end - start == 30``, as mapped linear terms (clock string -> minutes);
- ``Steven busy Monday 11:30-12:00``: a ``forbid`` table of the ``(day, start)`` slots that would overlap it;
- ``Billy: no meetings on Monday after 15:00``: ``implies`` day == Monday -> end <= 900 (``before T``:
  start >= T; a whole day: a ``forbid`` table over ``day``). Every stated preference is hard.
- "meet at their earliest availability": an objective, minimize ``10000 * day index + start minutes``,
  ``require: optimal``: the earliest feasible slot, day first, then time.

The checker (:func:`check`) is plain Python over the parsed problem and never looks at the declaration.

>>> prompt = ("TASK: You need to schedule a meeting for Ann and Bob for half an hour between the work hours "
...     "of 9:00 to 17:00 on Monday. \\n\\nHere are the existing schedules for everyone during the day: \\n"
...     "Ann is busy on Monday during 9:00 to 16:00; \\nBob is free the entire day.\\n\\nBob can not meet on "
...     "Monday after 16:30. Find a time that works for everyone's schedule and constraints. \\nSOLUTION: ")
>>> feasible_slots(prompt)
[('Monday', '16:00', '16:30')]
>>> check(prompt, {"day": "Monday", "start": "16:30", "end": "17:00"})
['Bob: no meetings on Monday after 16:30: violated by Monday 16:30-17:00']
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from factorspec_cp.workloads._data import data_dir
from factorspec_cp.workloads.calendar_parse import CalendarProblem, Preference, clock, minutes, parse_prompt

if TYPE_CHECKING:
    from factorspec_cp import Spec

__all__ = [
    "DATA_FILE",
    "SAMPLE_FILE",
    "check",
    "declaration",
    "declaration_doc",
    "examples",
    "feasible_slots",
    "gold_record",
    "parse_prompt",
    "problem",
]

#: All 1,000 problems, relative to :func:`data_dir`.
DATA_FILE = "natural-plan/full-0shot/calendar_scheduling.jsonl"
#: 100 of them with all official fields.
SAMPLE_FILE = "natural-plan/sample100-allfields/calendar_scheduling_100.json"
_GOLD = re.compile(r"Here is the proposed time: (?P<day>[A-Z][a-z]+), (?P<start>\d{1,2}:\d\d) - (?P<end>\d{1,2}:\d\d)")
_FIELDS = ("day", "start", "end")


def examples(*, sample: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the calendar examples: all 1,000 (0-shot JSONL), or with ``sample=True`` the 100 with all fields.

    Full examples carry ``id``, ``input`` and ``expected_properties.golden_plan`` (their ``constraints`` is
    empty and ``task_type`` wrongly says "trip"); sample examples carry ``id`` (added from the key) and the
    official fields (``num_people``, ``num_days``, ``duration``, ``prompt_0shot``, ``golden_plan``, ...).
    """
    if sample:
        with open(data_dir() / SAMPLE_FILE, encoding="utf-8") as fh:
            for key, value in json.load(fh).items():
                yield {"id": key, **value}
        return
    with open(data_dir() / DATA_FILE, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def problem(example: Mapping[str, Any]) -> str:
    """The prompt text that :func:`declaration` takes: ``input`` (0-shot file) or ``prompt_0shot`` (sample)."""
    for key in ("input", "prompt_0shot"):
        if isinstance(text := example.get(key), str):
            return text
    raise ValueError(f"calendar example {example.get('id')!r} has neither 'input' nor 'prompt_0shot' text")


def gold_record(example: Mapping[str, Any]) -> dict[str, str]:
    """``"Here is the proposed time: Monday, 14:30 - 15:30 "`` -> ``{"day", "start", "end"}``."""
    plan = example.get("golden_plan") or example.get("expected_properties", {}).get("golden_plan")
    m = _GOLD.fullmatch(str(plan).strip())
    if m is None:
        raise ValueError(f"calendar example {example.get('id')!r}: unparsed golden plan {plan!r}")
    return {"day": m["day"], "start": clock(minutes(m["start"])), "end": clock(minutes(m["end"]))}


#: the ``objective`` values of :func:`declaration`: None (the prompt's own: earliest only where it asks), "gold"
#: (the same, the NATURAL PLAN convention), "earliest" (everywhere)
OBJECTIVES = (None, "gold", "earliest")


def _grid(p: CalendarProblem) -> list[str]:
    """Clock strings from the start to the end of the work hours, every ``p.step`` minutes."""
    return [clock(t) for t in range(p.work[0], p.work[1] + 1, p.step)]


def declaration_doc(prompt: str, *, objective: str | None = None) -> dict[str, Any]:
    """The JSON form of the declaration for one prompt (see the module docstring and :func:`declaration`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    p = parse_prompt(prompt)
    grid = _grid(p)
    to_min = {t: minutes(t) for t in grid}
    relations: list[dict[str, Any]] = [
        {
            "kind": "linear",
            "name": f"duration {p.duration} min",
            "terms": [[1, "/end", to_min], [-1, "/start", to_min]],
            "op": "==",
            "rhs": p.duration,
        }
    ]
    for b in p.busy:
        rows = [[b.day, t] for t, m in to_min.items() if m < b.end and m + p.duration > b.start]
        name = f"{b.person} busy {b.day} {clock(b.start)}-{clock(b.end)}"
        relations.append({"kind": "table", "name": name, "mode": "forbid", "fields": ["/day", "/start"], "rows": rows})
    relations.extend(_preference_relation(q, to_min) for q in p.preferences)
    doc: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": list(_FIELDS),
        "properties": {"day": {"enum": list(p.days)}, "start": {"enum": grid}, "end": {"enum": grid}},
        "x-factorspec": {"relations": relations},
    }
    if p.earliest or objective == "earliest":
        day_rank = {d: 10000 * i for i, d in enumerate(p.days)}
        doc["x-factorspec"]["objective"] = {
            "minimize": [[1, "/day", day_rank], [1, "/start", to_min]],
            "require": "optimal",
        }
    return doc


def _preference_relation(q: Preference, to_min: dict[str, int]) -> dict[str, Any]:
    """A whole day off: forbid the day. ``before T``: start >= T on that day. ``after T``: end <= T."""
    if q.side is None:
        return {"kind": "table", "name": q.label, "mode": "forbid", "fields": ["/day"], "rows": [[q.day]]}
    path, op = ("/start", ">=") if q.side == "before" else ("/end", "<=")
    return {
        "kind": "implies",
        "name": q.label,
        "if": {"field": "/day", "op": "==", "value": q.day},
        "then": {"kind": "linear", "terms": [[1, path, to_min]], "op": op, "rhs": q.minute},
    }


def declaration(prompt: str, *, objective: str | None = None) -> Spec:
    """The compiled declaration: ``Spec.from_json(declaration_doc(prompt, objective=objective))``.

    ``objective="gold"`` asks for the NATURAL PLAN gold convention, established from the data
    (``notes/gold_conventions.md``): the gold is the earliest slot exactly where the prompt asks for the earliest
    availability (176 of 176 such problems), and otherwise follows no stated rule (in 66 of the 824 other problems
    it is a later slot), so it is the declaration above, which already minimizes day and start exactly when asked;
    under it the gold is admissible in all 1,000 problems.

    ``objective="earliest"`` minimizes day and start in every problem: the earliest feasible slot, the only
    admissible record, as a solver that answers with the first admissible value of each field in order does
    (solve-then-emit). It states more than the prompt does: the gold is that slot in 934 of the 1,000 problems and
    inadmissible in the 66 above (``scripts/gold_conventions.py`` counts both)."""
    from factorspec_cp import Spec

    return Spec.from_json(declaration_doc(prompt, objective=objective))


# ---------------------------------------------------------------- independent checker (plain Python, no solver)


def _slot_violations(p: CalendarProblem, day: str, start: int, end: int) -> list[str]:
    """Everything wrong with meeting on ``day`` from ``start`` to ``end`` (minutes), earliest aside."""
    out = []
    when = f"{day} {clock(start)}-{clock(end)}"
    if day not in p.days:
        out.append(f"day {day!r} is not a candidate day {list(p.days)}")
    if start < p.work[0] or end > p.work[1]:
        out.append(f"{when} is outside the work hours {clock(p.work[0])}-{clock(p.work[1])}")
    if end - start != p.duration:
        out.append(f"{when} lasts {end - start} min, not {p.duration} min")
    for b in p.busy:
        if b.day == day and start < b.end and b.start < end:
            out.append(f"{b.person} busy {b.day} {clock(b.start)}-{clock(b.end)}: overlaps {when}")
    for q in p.preferences:
        if q.day == day and _breaks(q, start, end):
            out.append(f"{q.label}: violated by {when}")
    return out


def _breaks(q: Preference, start: int, end: int) -> bool:
    """Whether a meeting ``[start, end)`` on ``q.day`` breaks ``q`` (before T: starts before T; after T: ends after)."""
    if q.minute is None:
        return True
    return start < q.minute if q.side == "before" else end > q.minute


def _feasible(p: CalendarProblem, step: int) -> Iterator[tuple[str, int, int]]:
    """Brute force: every ``(day, start, end)`` on a ``step``-minute grid that breaks no rule (earliest aside)."""
    return (
        (day, s, s + p.duration)
        for day in p.days
        for s in range(p.work[0], p.work[1] - p.duration + 1, step)
        if not _slot_violations(p, day, s, s + p.duration)
    )


@lru_cache(maxsize=1024)
def _first_feasible(p: CalendarProblem) -> tuple[str, int, int] | None:
    """The earliest feasible meeting, searched minute by minute (independent of the declaration's grid)."""
    return next(_feasible(p, 1), None)


def feasible_slots(prompt: str, *, step: int | None = None, earliest: bool = False) -> list[tuple[str, str, str]]:
    """Every feasible ``(day, start, end)`` by brute force, in order (day, then time); ``step`` defaults to the
    problem's grid. With ``earliest=True`` and a prompt that asks for the earliest availability, only the first."""
    p = parse_prompt(prompt)
    slots = list(_feasible(p, step or p.step))
    if earliest and p.earliest:
        slots = slots[:1]
    return [(d, clock(s), clock(e)) for d, s, e in slots]


def check(prompt: str, record: Any) -> list[str]:
    """Violations of ``record`` against the prompt (empty when valid). Plain Python: no solver, no declaration.

    Checks: the three fields and their formats, a candidate day, work hours, exact duration, no overlap with any
    busy block, every preference (hard), and, when the prompt asks for the earliest availability, that no
    feasible slot starts earlier (day first, then time; searched minute by minute).
    """
    p = parse_prompt(prompt)
    if not isinstance(record, Mapping):
        return [f"record is not an object: {record!r}"]
    out = [f"missing field {k!r}" for k in _FIELDS if k not in record]
    out += [f"unexpected field {k!r}" for k in record if k not in _FIELDS]
    if out:
        return out
    day, times = record["day"], []
    for key in ("start", "end"):
        value = record[key]
        try:
            if not isinstance(value, str) or clock(minutes(value)) != value:
                raise ValueError
            times.append(minutes(value))
        except ValueError:
            out.append(f"{key} {value!r} is not a clock time written H:MM (no leading zero)")
    if not isinstance(day, str):
        out.append(f"day {day!r} is not a string")
    if out:
        return out
    start, end = times
    out = _slot_violations(p, day, start, end)
    if p.earliest and day in p.days:
        first = _first_feasible(p)
        if first is not None and (p.days.index(first[0]), first[1]) < (p.days.index(day), start):
            out.append(f"earliest availability: {first[0]} {clock(first[1])}-{clock(first[2])} is earlier")
    return out
