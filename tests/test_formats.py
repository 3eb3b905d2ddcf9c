"""String ``format``s enforced by the layout (:data:`factorspec_cp.tokenmap.freeslot.FORMATS`) against independent
oracles: Python's calendar for ``date`` (every month and day number of leap, common and century years),
``ipaddress`` for ``ipv4``, ``uuid`` for ``uuid``, and ``jsonschema``'s format checker (with ``rfc3339-validator``
for ``time`` and ``date-time``) on strings drawn at random from the layout and on records the decoder writes over a
real tokenizer. A string the layout admits must be valid (nothing weakened); where the layout narrows the format
(upper-case ``T``/``Z``, no leap second, lower-case hex), the test says so."""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import json
import random
import uuid
from typing import Any

import jsonschema
import pytest

import factorspec_cp as fs
from factorspec_cp import UnsupportedKeyword
from factorspec_cp.schema import KNOWN_FORMATS
from factorspec_cp.tokenmap import Vocabulary
from factorspec_cp.tokenmap.freeslot import FORMATS
from factorspec_cp.tokenmap.layout import Layout

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def admits(layout: Layout, text: str) -> bool:
    st = layout.advance(layout.start(), json.dumps(text).encode())
    return st is not None and layout.accepting(st)


def layout_of(fmt: str, **more: Any) -> Layout:
    return Layout(fs.Spec({"type": "string", "format": fmt, **more}))


def test_the_oracle_checks_every_format() -> None:
    """jsonschema skips a format whose checker's dependency is missing: then it would check nothing."""
    assert set(FORMATS) <= set(CHECKER.checkers)


def test_dates_equal_the_calendar() -> None:
    lay = layout_of("date")
    for year in (0, 1, 4, 100, 400, 1600, 1900, 1996, 1999, 2000, 2001, 2004, 2023, 2024, 2100, 2400, 9999):
        for month, day in itertools.product(range(14), range(33)):
            text = f"{year:04d}-{month:02d}-{day:02d}"
            try:
                datetime.date.fromisoformat(text)
                valid = True
            except ValueError:
                valid = False
            assert admits(lay, text) == valid, text
    for text in ("2020-2-01", "20200-01-01", "2020-01-01 ", "2020/01/01", "２０２０-01-01"):
        assert not admits(lay, text), text


def test_ipv4_equals_ipaddress() -> None:
    lay = layout_of("ipv4")
    octets = ["0", "1", "9", "10", "99", "100", "199", "200", "249", "250", "255", "256", "300", "00", "01", "001"]
    rnd = random.Random(0)
    for _ in range(3000):
        text = ".".join(rnd.choice(octets) for _ in range(rnd.choice([3, 4, 4, 4, 5])))
        try:
            ipaddress.IPv4Address(text)
            valid = True
        except ValueError:
            valid = False
        assert admits(lay, text) == valid, text


def test_uuid_is_lower_case_uuid() -> None:
    lay = layout_of("uuid")
    rnd = random.Random(1)
    for _ in range(200):
        u = uuid.UUID(int=rnd.getrandbits(128))
        assert admits(lay, str(u)), u
        assert not admits(lay, str(u).upper()) or str(u) == str(u).upper()  # narrowed: lower-case hex only
    for text in ("123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
                 "{123e4567-e89b-12d3-a456-426614174000}"):
        assert not admits(lay, text), text


def _times(rnd: random.Random) -> str:
    hh, mm = rnd.choice(["00", "09", "23", "24", "7"]), rnd.choice(["00", "59", "60"])
    ss = rnd.choice(["00", "59", "60"])
    frac = rnd.choice(["", "", ".5", ".123456789", "."])
    off = rnd.choice(["Z", "z", "+05:30", "-23:59", "+24:00", "", "+0530"])
    return f"{hh}:{mm}:{ss}{frac}{off}"


@pytest.mark.parametrize("fmt", ["time", "date-time"])
def test_times_are_rfc3339(fmt: str) -> None:
    lay = layout_of(fmt)
    rnd = random.Random(2)
    for _ in range(3000):
        text = _times(rnd)
        if fmt == "date-time":
            text = rnd.choice(["2024-02-29", "2023-02-29", "1999-12-31"]) + rnd.choice(["T", "T", "t", " "]) + text
        valid = CHECKER.conforms(text, fmt)
        narrowed = "z" in text or "t" in text or ":60" in text  # RFC 3339 allows them; the layout does not
        assert admits(lay, text) == (valid and not narrowed), (text, valid)


def _draw(lay: Layout, rnd: random.Random, limit: int = 80) -> str | None:
    """A random string of the layout: random admitted bytes, stopping at a random accepting point."""
    st, out = lay.start(), bytearray()
    for _ in range(limit):
        if lay.accepting(st) and rnd.random() < 0.3:
            return json.loads(out.decode())  # type: ignore[no-any-return]
        nxt = sorted(lay.allowed_next_bytes(st))
        if not nxt:
            return json.loads(out.decode()) if lay.accepting(st) else None  # type: ignore[no-any-return]
        b = rnd.choice(nxt)
        out.append(b)
        st = lay.advance(st, bytes((b,)))
    return None


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_strings_drawn_from_the_layout_are_valid(fmt: str) -> None:
    lay = layout_of(fmt, maxLength=60)
    rnd = random.Random(fmt)
    drawn = [s for s in (_draw(lay, rnd) for _ in range(300)) if s is not None]
    assert len(drawn) > 100, fmt
    for s in drawn:
        assert CHECKER.conforms(s, fmt), (fmt, s)
        assert len(s) <= 60


def test_records_the_decoder_writes_are_valid() -> None:
    """Exact masks over SmolLM2's vocabulary, random admitted tokens: every record valid under jsonschema with
    its format checker."""
    vocab = Vocabulary.smollm2()
    schema = {"type": "object", "required": list(FORMATS),
              "properties": {f: {"type": "string", "format": f, "maxLength": 40} for f in FORMATS}}
    spec = fs.Spec(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=CHECKER)
    rnd = random.Random(3)
    for _ in range(15):
        dec = spec.decoder(vocab, mode="exact")
        while not dec.is_terminated():
            dec.consume(rnd.choice(dec.allowed_tokens().tolist()))
        validator.validate(dec.record())


def test_format_refusals_and_annotations() -> None:
    assert set(FORMATS) == KNOWN_FORMATS  # every format JSON Schema defines is enforced
    with pytest.raises(UnsupportedKeyword):
        fs.Spec({"type": "string", "format": "date", "pattern": "^2"})
    spec = fs.Spec({"type": "string", "format": "phone-number"})  # not a JSON Schema format: an annotation
    assert spec.ignored == [("#", "format")]
    with pytest.raises(UnsupportedKeyword):
        fs.Spec({"type": "string", "format": "phone-number"}, strict=True)
