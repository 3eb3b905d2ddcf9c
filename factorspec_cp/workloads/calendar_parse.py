"""Parse a NATURAL PLAN calendar-scheduling prompt (0-shot text) into a :class:`CalendarProblem`.

Only the LAST ``TASK:`` of the prompt is read (a few-shot prompt holds worked examples before it). Every
sentence must match a known pattern; anything else raises :class:`ValueError` naming the sentence.

>>> p = parse_prompt(
...     "TASK: You need to schedule a meeting for Ann and Bob for half an hour between the work hours of "
...     "9:00 to 17:00 on either Monday or Tuesday. \\n\\nHere are the existing schedules for everyone during "
...     "the days: \\nAnn is busy on Monday during 9:00 to 10:00, Tuesday during 9:00 to 9:30; \\nBobhas no "
...     "meetings the whole week.\\n\\nBob can not meet on Monday. Tuesday before 11:00. The group would like "
...     "to meet at their earlist availability.\\nFind a time that works for everyone's schedule and "
...     "constraints. \\nSOLUTION: ")
>>> p.participants, p.duration, p.days, p.earliest
(('Ann', 'Bob'), 30, ('Monday', 'Tuesday'), True)
>>> [(b.person, b.day, b.start, b.end) for b in p.busy]
[('Ann', 'Monday', 540, 600), ('Ann', 'Tuesday', 540, 570)]
>>> [q.label for q in p.preferences]
['Bob: no meetings on Monday', 'Bob: no meetings on Tuesday before 11:00']
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DAY = "(?:" + "|".join(WEEKDAYS) + ")"
_TIME = r"\d{1,2}:\d\d"
_RANGE = rf"{_TIME} to {_TIME}"
_DURATIONS = {"half an hour": 30, "one hour": 60, "an hour": 60, "one and a half hours": 90, "two hours": 120}

_HEADER = re.compile(
    r"You need to schedule a meeting for (?P<people>[A-Za-z ,]+?) for (?P<dur>[a-z ]+|\d+ minutes) between the "
    rf"work hours of (?P<ws>{_TIME}) to (?P<we>{_TIME}) on (?:either )?(?P<days>{_DAY}(?:(?:, | or ){_DAY})*)\."
)
_SCHEDULES = re.compile(r"Here are the existing schedules for everyone during the days?:")
_CLOSING = "Find a time that works for everyone's schedule and constraints."
_BUSY_VERBS = ("has meetings on", "has blocked their calendar on", "is busy on")
_DAY_ITEM = rf"{_DAY} during {_RANGE}(?:, {_RANGE})*"
_FREE = re.compile(
    r"(?:has no meetings the whole (?:day|week)|is free the entire (?:day|week)|"
    r"'s calendar is wide open the entire (?:day|week))\."
)
_PREF_VERBS = ("would like to avoid more meetings", "would rather not meet", "do not want to meet", "can not meet")
_PREF_ITEM = re.compile(rf"(?P<day>{_DAY})(?: (?P<side>before|after) (?P<time>{_TIME}))?\.")
_EARLIEST = re.compile(
    r"(?:The group would like to meet|You would like to schedule the meeting) at their (?:earlist|earliest) "
    r"availability\."
)


@dataclass(frozen=True)
class Busy:
    """``person`` is busy on ``day`` during ``[start, end)`` (minutes after midnight)."""

    person: str
    day: str
    start: int
    end: int


@dataclass(frozen=True)
class Preference:
    """``person`` will not meet on ``day`` (``side`` None), or not ``before``/``after`` ``minute`` on it.

    All preferences are hard. ``before T``: the meeting starts at T or later. ``after T``: the meeting ends
    at T or earlier. ``verb`` is the phrasing (``can not meet`` ...); ``sentence`` the source fragment, which
    for a continuation item (``Joseph can not meet on Monday. Tuesday.``) is the bare item ``Tuesday.``.
    """

    person: str
    day: str
    side: str | None
    minute: int | None
    verb: str
    sentence: str

    @property
    def label(self) -> str:
        """A readable name: ``Billy: no meetings on Monday after 15:00``."""
        when = f" {self.side} {clock(self.minute)}" if self.side and self.minute is not None else ""
        return f"{self.person}: no meetings on {self.day}{when}"


@dataclass(frozen=True)
class CalendarProblem:
    """A calendar-scheduling problem: one meeting of ``duration`` minutes for all participants.

    ``days`` are the candidate days in prompt order; ``work`` the daily work hours ``(start, end)`` in minutes;
    ``step`` the slot grid in minutes (30, or finer when a time in the problem is off the 30-minute grid).
    """

    participants: tuple[str, ...]
    duration: int
    work: tuple[int, int]
    days: tuple[str, ...]
    busy: tuple[Busy, ...]
    preferences: tuple[Preference, ...]
    earliest: bool
    step: int


def minutes(text: str) -> int:
    """``"9:30"`` -> 570; raise ``ValueError`` on anything that is not ``H:MM`` within a day."""
    m = re.fullmatch(r"(\d{1,2}):(\d\d)", text)
    if m is None or int(m[2]) >= 60 or int(m[1]) > 24:
        raise ValueError(f"not a time of day (H:MM): {text!r}")
    return int(m[1]) * 60 + int(m[2])


def clock(minute: int) -> str:
    """570 -> ``"9:30"``: hours without a leading zero, as the prompts write them."""
    return f"{minute // 60}:{minute % 60:02d}"


def _task_text(prompt: str) -> str:
    """The text of the last ``TASK:`` up to its ``SOLUTION:``."""
    _, found, task = prompt.rpartition("TASK:")
    if not found:
        raise ValueError("calendar prompt: no 'TASK:' found")
    task, found, _ = task.partition("SOLUTION:")
    if not found:
        raise ValueError("calendar prompt: the last TASK has no 'SOLUTION:' marker")
    return task.strip()


def _sentences(text: str) -> list[str]:
    """Split on every period or semicolon (times use colons, so none occur inside a sentence)."""
    parts = re.findall(r"[^.;]+[.;]", text)
    rest = re.sub(r"[^.;]+[.;]", "", text)
    if rest.strip():
        raise ValueError(f"calendar prompt: unterminated text {rest.strip()!r}")
    return [p.strip() for p in parts]


@lru_cache(maxsize=4096)
def parse_prompt(prompt: str) -> CalendarProblem:
    """Parse the last task of a calendar prompt; raise ``ValueError`` naming the first unrecognized sentence."""
    sentences = _sentences(_task_text(prompt))
    if not sentences or (header := _HEADER.fullmatch(sentences[0])) is None:
        raise ValueError(f"calendar prompt: unparsed header sentence {sentences[:1]!r}")
    people = tuple(p for p in re.split(r",? and |, ", header["people"]) if p)
    if not all(re.fullmatch(r"[A-Z][a-z]+", p) for p in people) or len(set(people)) != len(people):
        raise ValueError(f"calendar prompt: unparsed participant list {header['people']!r}")
    duration = _duration(header["dur"], sentences[0])
    work = (minutes(header["ws"]), minutes(header["we"]))
    days = tuple(re.findall(_DAY, header["days"]))
    if work[0] >= work[1] or len(set(days)) != len(days):
        raise ValueError(f"calendar prompt: bad work hours or repeated day in {sentences[0]!r}")

    names = "|".join(sorted(map(re.escape, people), key=len, reverse=True))
    busy_re = re.compile(rf"(?P<who>{names}) ?(?:{'|'.join(_BUSY_VERBS)}) (?P<items>{_DAY_ITEM}(?:, {_DAY_ITEM})*);")
    free_re = re.compile(rf"(?P<who>{names}) ?{_FREE.pattern}")
    pref_re = re.compile(rf"(?P<who>{names}) (?P<verb>{'|'.join(_PREF_VERBS)}) on {_PREF_ITEM.pattern}")

    rest = sentences[1:]
    body = _SCHEDULES.match(rest[0]) if rest else None
    if body is None:
        raise ValueError(f"calendar prompt: expected the schedules header, got {rest[:1]!r}")
    rest[0] = rest[0][body.end() :].strip()
    described: set[str] = set()
    busy: list[Busy] = []
    prefs: list[Preference] = []
    earliest = closed = False
    last_pref: tuple[str, str] | None = None  # (person, verb) that a bare "Tuesday." continues
    for sentence in rest:
        if closed:
            raise ValueError(f"calendar prompt: text after the closing question: {sentence!r}")
        m_said = busy_re.fullmatch(sentence) or free_re.fullmatch(sentence)
        m_pref = pref_re.fullmatch(sentence)
        m_item = _PREF_ITEM.fullmatch(sentence) if last_pref else None
        if m_said is not None:
            who = m_said["who"]
            if who in described or prefs or earliest:
                raise ValueError(f"calendar prompt: second or misplaced schedule for {who}: {sentence!r}")
            described.add(who)
            if "items" in m_said.groupdict():
                busy.extend(_busy_items(who, m_said["items"], days, work, sentence))
            last_pref = None
        elif (item := m_pref or m_item) is not None:
            who, verb = (m_pref["who"], m_pref["verb"]) if m_pref else last_pref or ("", "")
            if item["day"] not in days:
                raise ValueError(f"calendar prompt: preference on a day that is not a candidate: {sentence!r}")
            minute = minutes(item["time"]) if item["time"] else None
            prefs.append(Preference(who, item["day"], item["side"], minute, verb, sentence))
            last_pref = (who, verb)
        elif _EARLIEST.fullmatch(sentence):
            if earliest:
                raise ValueError(f"calendar prompt: earliest availability asked twice: {sentence!r}")
            earliest, last_pref = True, None
        elif sentence == _CLOSING:
            closed = True
        else:
            raise ValueError(f"calendar prompt: unrecognized sentence {sentence!r}")
    if not closed:
        raise ValueError(f"calendar prompt: missing the closing question {_CLOSING!r}")
    if described != set(people):
        raise ValueError(f"calendar prompt: no schedule given for {sorted(set(people) - described)}")
    times = [*work, duration, *(t for b in busy for t in (b.start, b.end)), *(q.minute or 0 for q in prefs)]
    step = math.gcd(30, *times)
    return CalendarProblem(people, duration, work, days, tuple(busy), tuple(prefs), earliest, step)


def _duration(text: str, sentence: str) -> int:
    """Meeting length in minutes from ``half an hour``, ``one hour``, ``45 minutes`` ..."""
    if m := re.fullmatch(r"(\d+) minutes", text):
        return int(m[1])
    if text not in _DURATIONS:
        raise ValueError(f"calendar prompt: unknown meeting duration {text!r} in {sentence!r}")
    return _DURATIONS[text]


def _busy_items(who: str, items: str, days: tuple[str, ...], work: tuple[int, int], sentence: str) -> list[Busy]:
    """``Monday during 9:00 to 9:30, 11:00 to 12:00, Tuesday during ...`` -> busy blocks, checked."""
    out = []
    for day_item in re.finditer(rf"(?P<day>{_DAY}) during (?P<ranges>{_RANGE}(?:, {_RANGE})*)", items):
        if day_item["day"] not in days:
            raise ValueError(f"calendar prompt: busy on {day_item['day']}, not a candidate day: {sentence!r}")
        for a, b in re.findall(rf"({_TIME}) to ({_TIME})", day_item["ranges"]):
            start, end = minutes(a), minutes(b)
            if not work[0] <= start < end <= work[1]:
                raise ValueError(f"calendar prompt: busy block {a}-{b} empty or outside work hours: {sentence!r}")
            out.append(Busy(who, day_item["day"], start, end))
    return out
