"""Masks inside free strings (:mod:`factorspec_cp.tokenmap.strings`, tables from :mod:`~.stringtables`) against
brute force over the vocabulary.

The oracle feeds every token's bytes through :class:`~factorspec_cp.tokenmap.layout.Layout` one byte at a time
(``Layout.advance``; tokens sharing a prefix share its states), never through the token tables: a token is admitted
iff the layout still has a valid record after its last byte. Positions cover ``maxLength``/``minLength``, patterns,
escapes (whole and pending), multi-byte UTF-8 (whole and pending), a string entered in the middle of a token, and
closing quotes that run on into the next slot (the next key, the end of an array at ``maxItems``, the end of the
record), on all three bundled tokenizers. A second part checks the disk cache: a round trip, and that a damaged,
stale or foreign file is rebuilt, never trusted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import factorspec_cp as fs
from factorspec_cp.tokenmap import Vocabulary
from factorspec_cp.tokenmap.decoder import TokenIndex, mask_to_ids
from factorspec_cp.tokenmap.layout import Layout, State
from factorspec_cp.tokenmap.strings import StringMasks
from factorspec_cp.tokenmap.stringtables import StringTables, automaton_key

from .bruteforce import BruteForce

VOCABS = {"smollm2": Vocabulary.smollm2, "qwen3": Vocabulary.qwen3, "llama3": Vocabulary.llama3}

FREE: dict[str, Any] = {"type": "object", "required": ["city", "note", "code", "tags", "word", "last"], "properties": {
    "city": {"enum": ["Riga", "Zürich"]},
    "note": {"type": "string", "minLength": 2, "maxLength": 12},
    "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{1,3}$"},
    "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string", "maxLength": 4}},
    "word": {"type": "string", "pattern": "^[a-zé]+$", "maxLength": 6},
    "last": {"type": "string", "maxLength": 3}}}
_HEAD = b'{"city": "Riga", "note": '
_MID = _HEAD + b'"ab", "code": "AB-1", '
#: (what the position shows, the bytes typed so far)
POSITIONS: list[tuple[str, bytes]] = [
    ("string entered inside a token", _HEAD[:-1]),
    ("below minLength: no closing quote", _HEAD + b'"a'),
    ("pending escape", _HEAD + b'"a\\'),
    ("pending \\u escape", _HEAD + b'"ab\\u00'),
    ("pending UTF-8 (2 of 3 bytes)", _HEAD + b'"ab\xe4\xb8'),
    ("one character left, then the next key", _HEAD + b'"0123456789\\n'),
    ("at maxLength: only the closing quote", _HEAD + b'"0123456789\xc3\xa9\xc3\xa9'),
    ("pattern", _MID[:-len(b'"AB-1", ')] + b'"A'),
    ("array item at maxItems: the array ends", _MID + b'"tags": ["ab", "c'),
    ("pattern with a two-byte character", _MID + b'"tags": ["ab"], "word": "caf'),
    ("last string: the record ends", _MID + b'"tags": ["ab"], "word": "x", "last": "y"'[:-1]),
]

#: a relation decides the field after the string (``b`` given ``a``), indented output
RELATED: dict[str, Any] = {
    "type": "object", "required": ["a", "note", "b"], "properties": {
        "a": {"enum": ["x", "y"]}, "note": {"type": "string", "maxLength": 5}, "b": {"enum": ["x", "y"]}},
    "x-factorspec": {"relations": [{"kind": "all_different", "fields": ["/a", "/b"]}]}}


def brute_force(layout: Layout, state: State, vocab: Vocabulary, admissible: Any = None) -> set[int]:
    """Every token whose bytes, fed to the layout one at a time, keep a valid record; EOS where it may end."""
    out: set[int] = set()
    stack: list[State | None] = [state]  # stack[k]: the state after the first k bytes of ``cur``
    cur = b""
    for tok, i in sorted((t, i) for i, t in enumerate(vocab.tokens) if t):
        k, m = 0, min(len(cur), len(tok), len(stack) - 1)
        while k < m and cur[k] == tok[k]:
            k += 1
        del stack[k + 1:]
        st = stack[-1]
        while st is not None and len(stack) - 1 < len(tok):
            st = layout.advance(st, tok[len(stack) - 1:len(stack)], admissible=admissible)
            stack.append(st)
        cur = tok[:len(stack) - 1]
        if st is not None and len(stack) - 1 == len(tok):
            out.add(i)
    if layout.finish(state, admissible=admissible) is not None:
        out |= set(vocab.eos_token_ids)
    return out


def drive(dec: Any, vocab: Vocabulary, data: bytes) -> None:
    """Consume ``data``: its whole characters as the canonical tokens, the bytes of a last partial one alone."""
    cut = len(data)
    while cut and not _decodes(data[:cut]):
        cut -= 1
    single = {t: i for i, t in enumerate(vocab.tokens) if t is not None and len(t) == 1}
    for t in [*vocab.encode(data[:cut].decode()), *(single[data[k:k + 1]] for k in range(cut, len(data)))]:
        dec.consume(t)


def _decodes(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


def check(dec: Any, vocab: Vocabulary, expected: set[int], what: str) -> None:
    got = set(dec.allowed_tokens().tolist())
    extra, missing = sorted(got - expected)[:8], sorted(expected - got)[:8]
    assert got == expected, (what, [vocab.tokens[t] for t in extra], [vocab.tokens[t] for t in missing])
    # the walk (token index positions) and the table row agree
    state = dec._frames[-1].state
    walk = set(dec._exact_ids(state).tolist())
    assert walk == got, (what, sorted(walk ^ got)[:8])


def _position_grid() -> list[Any]:
    """Every (tokenizer, position). The fast suite checks each position with one tokenizer, in rotation (every
    tokenizer at a third of the positions); the rest of the grid is marked slow."""
    vocabs = sorted(VOCABS)
    return [pytest.param(vocab_name, k, id=f"{vocab_name}-{k}", marks=() if k % len(vocabs) == j else pytest.mark.slow)
            for j, vocab_name in enumerate(vocabs) for k in range(len(POSITIONS))]


@pytest.mark.parametrize(("vocab_name", "k"), _position_grid())
def test_masks_inside_free_strings_equal_brute_force(vocab_name: str, k: int) -> None:
    vocab = VOCABS[vocab_name]()
    spec = fs.Spec.from_json(FREE)
    layout = Layout(spec)
    for what, typed in POSITIONS[k:k + 1]:
        dec = spec.decoder(vocab, mode="exact")
        drive(dec, vocab, typed)
        state = layout.advance(layout.start(), typed)
        assert state is not None, what
        expected = brute_force(layout, state, vocab)
        assert expected, what
        check(dec, vocab, expected, what)
        if what.startswith("at maxLength"):
            assert all(b'"' in vocab.tokens[t] for t in expected), what
        if what.startswith("below minLength"):
            assert not any(vocab.tokens[t].startswith(b'"') for t in expected), what


@pytest.mark.parametrize("vocab_name", sorted(VOCABS))
def test_closing_into_a_slot_decided_by_a_relation(vocab_name: str) -> None:
    vocab = VOCABS[vocab_name]()
    spec = fs.Spec.from_json(RELATED)
    layout = Layout(spec, indent=2)
    bf = BruteForce({**RELATED, "required": ["a", "b"], "properties": {k: v for k, v in RELATED["properties"].items()
                                                                       if k != "note"}})

    def admissible(p: str) -> list[Any] | None:
        return bf.admissible(p, {"/a": "x"}) if p == "/b" else None

    for typed in (b'{\n  "a": "x",\n  "note": "ab', b'{\n  "a": "x",\n  "note": "abcd\\t'):
        dec = spec.decoder(vocab, mode="exact", style=2)
        drive(dec, vocab, typed)
        state = layout.advance(layout.start(), typed, admissible=admissible)
        assert state is not None
        check(dec, vocab, brute_force(layout, state, vocab, admissible), typed.decode())


PATTERNS: list[tuple[dict[str, Any], list[str]]] = [
    ({"pattern": "^\\S+$", "maxLength": 5}, ["", "a~"]),  # \S: ASCII only (Python's and interegular's differ)
    ({"pattern": "^(ab|c)+$", "maxLength": 4}, ["a"]),
    ({"pattern": "b", "minLength": 2, "maxLength": 3}, [""]),  # re.search semantics: unanchored
    ({"pattern": "^[^a]*$", "maxLength": 3}, ["\u00e9"]),
    ({"pattern": "^[\u03b1-\u03c9]{2}$"}, ["\u03b1"]),
]


@pytest.mark.parametrize("vocab_name", sorted(VOCABS))
@pytest.mark.parametrize("k", range(len(PATTERNS)))
def test_patterns_equal_brute_force(k: int, vocab_name: str) -> None:
    vocab = VOCABS[vocab_name]()
    schema, typed = PATTERNS[k]
    doc = {"type": "object", "required": ["s", "n"], "properties": {
        "s": {"type": "string", **schema}, "n": {"enum": [1, 22]}}}
    spec = fs.Spec.from_json(doc)
    layout = Layout(spec)
    for text in typed:
        data = b'{"s": "' + text.encode()
        dec = spec.decoder(vocab, mode="exact")
        drive(dec, vocab, data)
        state = layout.advance(layout.start(), data)
        assert state is not None
        check(dec, vocab, brute_force(layout, state, vocab), f"{schema} {text!r}")


def test_lengths_do_not_multiply_the_tables() -> None:
    """Strings that differ only in their lengths share one table per core; each mask is a lookup there."""
    vocab = Vocabulary.smollm2()
    index = TokenIndex.of(vocab)
    lay = Layout(fs.Spec.from_json(FREE))
    note = lay.free_string(lay.advance(lay.start(), _HEAD + b'"'))
    last = lay.free_string(lay.advance(lay.start(), _MID + b'"tags": ["ab"], "word": "x", "last": "'))
    assert note is not None and last is not None and note[0] is not last[0]
    assert automaton_key(note[0]) == automaton_key(last[0])
    assert StringMasks.of(note[0], index).tables is StringMasks.of(last[0], index).tables


# ----------------------------------------------------------------------------------------------------- disk cache
def _subs(lay: Layout) -> list[tuple[Any, tuple[Any, ...]]]:
    """Sub-states in four cores: the note's start (twice: two lengths), pending UTF-8, a pending escape, a pattern."""
    out = []
    for typed in (_HEAD + b'"', _HEAD + b'"0123456789a', _HEAD + b'"ab\xe4', _HEAD + b'"ab\\',
                  _HEAD + b'"ab", "code": "A'):
        found = lay.free_string(lay.advance(lay.start(), typed))
        assert found is not None
        out.append(found)
    return out


def _rows(tables_of: Any, subs: list[tuple[Any, tuple[Any, ...]]]) -> list[np.ndarray]:
    """The rows at ``subs`` (every closing token admitted by what follows), from fresh tables."""
    out = []
    for slot, sub in subs:
        masks = StringMasks(slot, tables_of(slot))
        out.append(masks.row(sub, "place", lambda rests: [True] * len(rests)).copy())
    return out


def test_disk_cache_round_trip_and_damaged_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = Vocabulary.smollm2()
    index = TokenIndex.of(vocab)
    lay = Layout(fs.Spec.from_json(FREE))
    subs = _subs(lay)
    made: list[StringTables] = []

    def fresh(slot: Any) -> StringTables:
        t = StringTables(slot, index, folder=tmp_path / automaton_key(slot)[:8])
        made.append(t)
        return t

    first = _rows(fresh, subs)
    assert sum(t.built for t in made) == 4 and sum(t.loaded for t in made) == 1  # the second note row: from disk
    files = sorted(tmp_path.rglob("*.table"))
    assert len(files) == 4
    memory = [StringTables(slot, index, folder=None) for slot, _ in subs]
    assert [StringMasks(slot, t).row(sub, 0, lambda r: [True] * len(r)).tolist()
            for (slot, sub), t in zip(subs, memory)] == [r.tolist() for r in first]

    made.clear()
    again = _rows(fresh, subs)  # a fresh process, in effect: every core from disk
    assert [r.tolist() for r in again] == [r.tolist() for r in first]
    assert sum(t.loaded for t in made) == len(subs) and not any(t.built for t in made)
    assert any(len(mask_to_ids(r, vocab.size)) > 1000 for r in again)

    # damage: a flipped byte, a truncated file, a stale format, another vocabulary's table
    flipped, truncated, stale, foreign = files
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    truncated.write_bytes(truncated.read_bytes()[:100])
    from factorspec_cp.tokenmap import stringtables

    for path, key, value in ((stale, "format", stringtables.FORMAT - 1), (foreign, "vocabulary", "0" * 64)):
        decoded = stringtables.decode(path.read_bytes())
        assert decoded is not None
        meta, arrays, blob = decoded
        path.write_bytes(stringtables.encode({**meta, key: value}, arrays, blob))  # a valid file, not ours
    made.clear()
    rebuilt = _rows(fresh, subs)
    assert [r.tolist() for r in rebuilt] == [r.tolist() for r in first]
    assert sum(t.built for t in made) == 4 and sum(t.loaded for t in made) == 1
    made.clear()
    assert [r.tolist() for r in _rows(fresh, subs)] == [r.tolist() for r in first]  # rewritten, valid again
    assert sum(t.loaded for t in made) == len(subs)

    # the default folder is the user cache, $FACTORSPEC_CACHE where set
    monkeypatch.setenv("FACTORSPEC_CACHE", str(tmp_path / "env"))
    t = StringTables(subs[0][0], index)
    assert t.folder is not None and (tmp_path / "env") in t.folder.parents
    assert [StringMasks(subs[0][0], t).row(subs[0][1], 0, lambda r: [True] * len(r)).tolist()] == [first[0].tolist()]
    assert any((tmp_path / "env").rglob("*.table"))


@pytest.mark.parametrize(("vocab_name", "k"), _position_grid())
def test_token_table_steps_equal_byte_steps(vocab_name: str, k: int) -> None:
    """``StringMasks.step`` (a token inside a free string in one table lookup, what ``Decoder.consume`` takes)
    against the slot's own byte-by-byte stepping (``Layout.advance_in_string``), for every token of the
    vocabulary: a core exactly for the tokens whose every byte stays inside the string, and then the same state."""
    vocab = VOCABS[vocab_name]()
    spec = fs.Spec.from_json(FREE)
    layout = Layout(spec)
    what, typed = POSITIONS[k]
    state = layout.advance(layout.start(), typed)
    found = layout.free_string(state)
    if found is None:
        pytest.skip(f"{what}: not inside a string")
    slot, sub = found
    masks = StringMasks.of(slot, TokenIndex.of(vocab))
    inside = 0
    for t, data in enumerate(vocab.tokens):
        if not data:
            continue
        core = masks.step(sub, t)
        by_bytes, n = layout.advance_in_string(state, data)
        if n == len(data):
            inside += 1
            assert core is not None, (what, data)
            assert layout.in_string(state, data, core) == by_bytes, (what, data)
        else:
            assert core is None, (what, data, n)
    assert (inside == 0) == what.startswith("at maxLength"), (what, inside)  # there only the quote may follow


def _closing_note(first: str, n: int) -> dict[str, Any]:
    """A declaration that ends with a free note: ``n`` enum fields before it, so declarations differ."""
    props: dict[str, Any] = {f"f{k}": {"enum": [first, "other"]} for k in range(n)}
    props["note"] = {"type": "string", "maxLength": 40}
    return {"type": "object", "required": list(props), "additionalProperties": False, "properties": props}


@pytest.mark.parametrize("vocab_name", ["smollm2", "qwen3"])
def test_rows_shared_across_declarations_by_a_fixed_tail_equal_brute_force(vocab_name: str) -> None:
    """Where only fixed bytes follow a string to the record's end, its masks (and the one a few bytes before it)
    are shared by every declaration that ends so: the second, different declaration's masks, read from what the
    first one built, must equal brute force on its own layout."""
    vocab = VOCABS[vocab_name]()
    for k, (first, n) in enumerate([("Riga", 1), ("Split", 3)]):
        spec = fs.Spec.from_json(_closing_note(first, n))
        layout = Layout(spec)
        head = "{" + ", ".join(f'"f{j}": "{first}"' for j in range(n)) + ', "note":'
        for typed in (head.encode(), (head + ' "').encode(), (head + ' "Sta').encode(), (head + ' "ab c"').encode()):
            dec = spec.decoder(vocab, mode="exact")
            drive(dec, vocab, typed)
            state = layout.advance(layout.start(), typed)
            assert state is not None, typed
            if k == 1:  # the second declaration: every row comes from the shared memos, checked against the layout
                check(dec, vocab, brute_force(layout, state, vocab), typed.decode())
            else:
                dec.allowed_tokens()
