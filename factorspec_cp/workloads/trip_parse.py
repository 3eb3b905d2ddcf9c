"""Parse a NATURAL PLAN trip-planning prompt (0-shot text) into a :class:`TripProblem`.

The prompt alone is the source: cities, stays, total days, directed flights and events. Every sentence must
match a known pattern; anything else raises :class:`ValueError` naming the sentence, never a silent skip.

>>> p = parse_prompt(
...     "You plan to visit 2 European cities for 5 days in total. You only take direct flights to commute "
...     "between cities. You want to spend 3 days in Riga. You plan to stay in Oslo for 3 days. You want to "
...     "meet a friend in Oslo between day 3 and day 5.\\n\\nHere are the cities that have direct flights:\\n"
...     "from Riga to Oslo.\\n\\nFind a trip plan of visiting the cities for 5 days by taking direct flights "
...     "to commute between them.")
>>> p.cities, p.stays, p.total_days, p.flights
(('Riga', 'Oslo'), {'Riga': 3, 'Oslo': 3}, 5, (('Riga', 'Oslo'),))
>>> p.events[0].city, p.events[0].first_day, p.events[0].last_day
('Oslo', 3, 5)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

_CITY = r"(?P<city>[A-Z][A-Za-z]*)"
_A = r"(?P<a>\d+)"
_B = r"(?P<b>\d+)"

#: Sentences that give the length of the stay in one city (3 patterns).
STAY_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        rf"You would like to visit {_CITY} for (?P<days>\d+) days\.",
        rf"You plan to stay in {_CITY} for (?P<days>\d+) days\.",
        rf"You want to spend (?P<days>\d+) days in {_CITY}\.",
    )
)

#: Sentences that pin the stay in one city to days a..b (7 patterns).
EVENT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        rf"You want to meet a friend in {_CITY} between day {_A} and day {_B}\.",
        rf"You are going to attend a wedding in {_CITY} between day {_A} and day {_B}\.",
        rf"You have to attend a workshop in {_CITY} between day {_A} and day {_B}\.",
        rf"You plan to visit relatives in {_CITY} between day {_A} and day {_B}\.",
        rf"From day {_A} to day {_B}, there is a annual show you want to attend in {_CITY}\.",
        rf"You would like to meet your friends at {_CITY} between day {_A} and day {_B} to tour together\.",
        rf"During day {_A} and day {_B}, you have to attend a conference in {_CITY}\.",
    )
)

_HEADER = re.compile(r"You plan to visit (?P<n>\d+) European cities for (?P<days>\d+) days in total\.")
_DIRECT_ONLY = "You only take direct flights to commute between cities."
_FLIGHTS_HEAD = "Here are the cities that have direct flights:"
_BOTH_WAYS = re.compile(r"(?P<x>[A-Z][A-Za-z]*) and (?P<y>[A-Z][A-Za-z]*)")
_ONE_WAY = re.compile(r"from (?P<x>[A-Z][A-Za-z]*) to (?P<y>[A-Z][A-Za-z]*)")
_QUESTION = re.compile(
    r"Find a trip plan of visiting the cities for (?P<days>\d+) days by taking direct flights to commute "
    r"between them\."
)


@dataclass(frozen=True)
class TripEvent:
    """An event in ``city`` on days ``first_day``..``last_day``: the stay there is exactly those days."""

    city: str
    first_day: int
    last_day: int
    text: str


@dataclass(frozen=True)
class TripProblem:
    """A trip-planning problem: visit every city once, consecutive cities joined by a direct flight.

    ``cities`` is in order of first mention; ``flights`` holds directed ``(from, to)`` pairs, sorted.
    A flight day counts for both cities, so ``sum(stays) == total_days + len(cities) - 1`` when solvable.
    """

    cities: tuple[str, ...]
    stays: dict[str, int] = field(hash=False)
    total_days: int
    flights: tuple[tuple[str, str], ...]
    events: tuple[TripEvent, ...]


def _split_sentences(paragraph: str) -> list[str]:
    """Sentences of a paragraph: split after every period that a space follows."""
    return [s for s in re.split(r"(?<=\.) +", paragraph.strip()) if s]


@lru_cache(maxsize=4096)
def parse_prompt(prompt: str) -> TripProblem:
    """Parse a 0-shot trip prompt; raise ``ValueError`` naming the first sentence no pattern matches."""
    paragraphs = prompt.strip().split("\n\n")
    if len(paragraphs) != 3:
        raise ValueError(f"trip prompt: expected 3 paragraphs (constraints, flights, question), got {len(paragraphs)}")
    sentences = _split_sentences(paragraphs[0])
    header = _HEADER.fullmatch(sentences[0]) if sentences else None
    if header is None:
        raise ValueError(f"trip prompt: unparsed header sentence {sentences[:1]!r}")
    n_cities, total = int(header["n"]), int(header["days"])
    if len(sentences) < 2 or sentences[1] != _DIRECT_ONLY:
        raise ValueError(f"trip prompt: expected {_DIRECT_ONLY!r}, got {sentences[1:2]!r}")

    stays: dict[str, int] = {}
    raw_events: list[tuple[str, int, int, str]] = []
    for sentence in sentences[2:]:
        stay = next((m for p in STAY_PATTERNS if (m := p.fullmatch(sentence))), None)
        if stay is not None:
            if stay["city"] in stays:
                raise ValueError(f"trip prompt: second stay for {stay['city']!r} in sentence {sentence!r}")
            stays[stay["city"]] = int(stay["days"])
            continue
        event = next((m for p in EVENT_PATTERNS if (m := p.fullmatch(sentence))), None)
        if event is None:
            raise ValueError(f"trip prompt: unparsed sentence {sentence!r}")
        raw_events.append((event["city"], int(event["a"]), int(event["b"]), sentence))

    cities = tuple(stays)
    if len(cities) != n_cities:
        raise ValueError(f"trip prompt: header says {n_cities} cities, stays name {len(cities)}: {cities}")
    events = []
    for city, a, b, text in raw_events:
        if city not in stays:
            raise ValueError(f"trip prompt: event in {city!r}, which has no stay: {text!r}")
        if not 1 <= a <= b <= total:
            raise ValueError(f"trip prompt: event days outside 1..{total} or reversed: {text!r}")
        events.append(TripEvent(city, a, b, text))

    flights = _parse_flights(paragraphs[1], stays)
    question = _QUESTION.fullmatch(paragraphs[2].strip())
    if question is None:
        raise ValueError(f"trip prompt: unparsed question {paragraphs[2].strip()!r}")
    if int(question["days"]) != total:
        raise ValueError(f"trip prompt: question says {question['days']} days, header says {total}")
    return TripProblem(cities, stays, total, flights, tuple(events))


def _parse_flights(paragraph: str, stays: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """Directed flight edges: ``A and B`` both ways, ``from A to B`` one way."""
    head, _, body = paragraph.strip().partition("\n")
    if head != _FLIGHTS_HEAD:
        raise ValueError(f"trip prompt: expected {_FLIGHTS_HEAD!r}, got {head!r}")
    if not body.endswith("."):
        raise ValueError(f"trip prompt: flight list does not end with a period: {body!r}")
    edges: set[tuple[str, str]] = set()
    for item in body[:-1].split(", "):
        if m := _BOTH_WAYS.fullmatch(item):
            pairs = [(m["x"], m["y"]), (m["y"], m["x"])]
        elif m := _ONE_WAY.fullmatch(item):
            pairs = [(m["x"], m["y"])]
        else:
            raise ValueError(f"trip prompt: unparsed flight {item!r}")
        for x, y in pairs:
            if x not in stays or y not in stays or x == y:
                raise ValueError(f"trip prompt: flight {item!r} names a city without a stay (or a loop)")
        edges.update(pairs)
    return tuple(sorted(edges))
