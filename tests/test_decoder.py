"""The decoder against brute force: every valid record rendered, every token tried.

For small finite declarations the set of valid records is enumerated here without the solver (schema instances
from a small recursive enumerator, relations evaluated by ``tests/bruteforce.py``), rendered as ``json.dumps``
would, and the exact mask at a typed prefix P is then, by definition, every token t such that some rendering
starts with P + t, plus EOS when P itself is a rendering. The canonical mask is recomputed independently too: the
bytes every remaining rendering starts with, tokenized canonically, cut before a token that some longer token
could extend past those bytes. Walks pick uniformly among the admitted tokens (all three real tokenizers, both
modes, compact and indented) and compare at every position, with rollbacks along the way.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import factorspec_cp as fs
from factorspec_cp.tokenmap import Vocabulary
from factorspec_cp.tokenmap.decoder import TokenRejected, mask_to_ids, mask_words

_spec = importlib.util.spec_from_file_location("bruteforce", Path(__file__).with_name("bruteforce.py"))
bruteforce = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("bruteforce", bruteforce)
_spec.loader.exec_module(bruteforce)  # type: ignore[union-attr]

DECLS: dict[str, dict[str, Any]] = {
    "sum": {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 1, "maximum": 3}, "b": {"type": "integer", "minimum": 1, "maximum": 3}},
        "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"], [1, "/b"]], "op": "==", "rhs": 4}]}},
    "trip": {"type": "object", "required": ["plan"], "properties": {"plan": {
        "type": "array", "minItems": 3, "maxItems": 3, "items": {
            "type": "object", "required": ["city", "days"], "properties": {
                "city": {"enum": ["Riga", "Rome", "Zürich", "東京"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 12}}}}},
        "x-factorspec": {"relations": [
            {"kind": "all_different", "fields": ["/plan/0/city", "/plan/1/city", "/plan/2/city"]},
            {"kind": "linear", "terms": [[1, "/plan/0/days"], [1, "/plan/1/days"], [1, "/plan/2/days"]],
             "op": "==", "rhs": 14},
            {"kind": "implies", "if": [{"field": "/plan/0/city", "op": "==", "value": "Rome"}],
             "then": {"kind": "compare", "left": "/plan/0/days", "op": ">=", "right": 10}}]}},
    "optional": {"type": "object", "required": ["kind", "n"], "properties": {
        "kind": {"enum": ["a", "b", "ab"]}, "note": {"enum": ["x", "yy", "\"q\""]},
        "n": {"type": "integer", "minimum": 0, "maximum": 120, "multipleOf": 7}, "ok": {"type": "boolean"}},
        "x-factorspec": {"relations": [
            {"kind": "implies", "if": [{"field": "/kind", "op": "==", "value": "a"}],
             "then": {"kind": "compare", "left": "/n", "op": ">=", "right": 100}}]}},
    "lists": {"type": "object", "required": ["xs", "flag"], "properties": {
        "xs": {"type": "array", "minItems": 0, "maxItems": 3, "items": {"enum": [1, 12, "1", None]}},
        "flag": {"type": "boolean"}}},
    "union": {"type": "object", "required": ["shape"], "properties": {"shape": {"oneOf": [
        {"type": "object", "required": ["t", "r"], "properties": {
            "t": {"const": "circle"}, "r": {"type": "integer", "minimum": 1, "maximum": 9}}},
        {"type": "object", "required": ["t", "w", "h"], "properties": {
            "t": {"const": "rect"}, "w": {"enum": [1, 2]}, "h": {"enum": [1, 2]}}}]}}},
    # unions without a discriminator: a list of types, anyOf over kinds and overlapping values, keywords beside
    # anyOf merged into each branch, oneOf over disjoint kinds, allOf merged; a relation on the fields around them
    "typelist": {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": ["boolean", "null"]},
        "b": {"anyOf": [{"enum": ["x", "xy", 10]}, {"type": "integer", "minimum": 8, "maximum": 11},
                        {"type": "array", "minItems": 0, "maxItems": 2, "items": {"type": ["null", "boolean"]}}]}}},
    "mixed": {"type": "object", "required": ["n", "u", "m"], "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 3},
        "u": {"oneOf": [{"type": "null"}, {"type": "object", "properties": {"k": {"enum": [1, 2]}},
                                           "additionalProperties": False}], "required": ["k"]},
        "m": {"allOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"maximum": 3}]}},
        "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/n"], [1, "/m"]], "op": "==", "rhs": 3}]}},
}


# ----------------------------------------------------------------------------------------- independent enumerator
def instances(schema: dict[str, Any]) -> list[Any]:
    """Every JSON instance of a small schema (object/array/enum/const/boolean/bounded integer/oneOf)."""
    # allOf / anyOf / oneOf: candidates from each part laid over the keywords beside it, kept where jsonschema
    # judges them valid for the whole schema (a candidate set that missed valid instances would show as a mask
    # wider than the oracle's)
    for key in ("allOf", "oneOf", "anyOf"):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k != key}
            parts = schema[key][:1] if key == "allOf" else schema[key]
            return [x for s in parts for x in instances({**rest, **s}) if _holds(x, schema)]
    if isinstance(schema.get("type"), list):
        return [x for t in schema["type"] for x in instances({**schema, "type": t})]
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    t = schema.get("type")
    if t == "boolean":
        return [False, True]
    if t == "null":
        return [None]
    if t == "integer":
        step = schema.get("multipleOf", 1)
        return [x for x in range(schema["minimum"], schema["maximum"] + 1) if x % step == 0]
    if t == "array":
        items = instances(schema["items"])
        return [list(c) for n in range(schema["minItems"], schema["maxItems"] + 1)
                for c in itertools.product(items, repeat=n)]
    if t == "object":
        props = schema["properties"]
        req = set(schema.get("required", ()))
        choices = []
        for name, sub in props.items():
            opts = [(name, v) for v in instances(sub)]
            choices.append(opts if name in req else [None, *opts])
        return [{kv[0]: kv[1] for kv in combo if kv is not None} for combo in itertools.product(*choices)]
    raise ValueError(schema)


def _holds(x: Any, schema: dict[str, Any]) -> bool:
    """``x`` is valid for ``schema`` (jsonschema, an implementation independent of ours)."""
    import jsonschema
    return jsonschema.Draft202012Validator(schema).is_valid(x)


def flatten(x: Any, at: str = "") -> dict[str, Any]:
    if isinstance(x, dict):
        return {k: v for name, sub in x.items() for k, v in flatten(sub, f"{at}/{name}").items()}
    if isinstance(x, list):
        return {k: v for i, sub in enumerate(x) for k, v in flatten(sub, f"{at}/{i}").items()}
    return {at: x}


def renderings(doc: dict[str, Any], indent: int | None) -> set[bytes]:
    schema = {k: v for k, v in doc.items() if k != "x-factorspec"}
    rels = doc.get("x-factorspec", {}).get("relations", [])
    out = set()
    for rec in instances(schema):
        flat = flatten(rec)
        if all(bruteforce.evaluate(r, flat) for r in rels):
            if indent is None:
                out.add(json.dumps(rec, separators=(", ", ": "), ensure_ascii=False).encode())
            else:
                out.add(json.dumps(rec, indent=indent, ensure_ascii=False).encode())
    return out


# ------------------------------------------------------------------------------------------ independent masks
class Oracle:
    def __init__(self, vocab: Vocabulary, name: str):
        self.vocab, self.name = vocab, name
        self.by_bytes = {t: i for i, t in enumerate(vocab.tokens) if t}
        self.proper_prefixes = {t[:k] for t in vocab.tokens if t for k in range(1, len(t))}
        self._encoded: dict[bytes, list[int]] = {}

    def exact(self, texts: set[bytes], typed: bytes) -> set[int]:
        rem = [s[len(typed):] for s in texts if s.startswith(typed)]
        out = {self.by_bytes[r[:k]] for r in rem for k in range(1, len(r) + 1) if r[:k] in self.by_bytes}
        if b"" in rem:
            out |= set(self.vocab.eos_token_ids)
        return out

    def run(self, texts: set[bytes], typed: bytes) -> list[int]:
        rem = [s[len(typed):] for s in texts if s.startswith(typed)]
        forced = bytes(_lcp(rem))
        end = len(rem) == 1
        if not forced:
            return [self.vocab.eos_token_ids[0]] if rem == [b""] else []
        cut = len(forced)
        while cut and not _decodes(forced[:cut]):
            cut -= 1
        end = end and cut == len(forced)
        data = forced[:cut]
        run, at = [], 0
        for t in self.vocab.encode(data.decode()):
            tb = self.vocab.tokens[t]
            if data[at:at + len(tb)] != tb:
                break
            if not end and data[at:] in self.proper_prefixes and not self.final(rem, data, [*run, t]):
                break
            run.append(t)
            at += len(tb)
        if end and at == len(data):
            run.append(self.vocab.eos_token_ids[0])
        return run

    def final(self, rem: list[bytes], data: bytes, tokens: list[int]) -> bool:
        """Where a longer token starts with the bytes left (it could run into what follows), whether a pre-token ends
        after ``data`` in every continuation from here, split by the tokenizer's own pattern in the ``regex`` engine
        (the library splits with ``re``), so that BPE keeps ``tokens`` (checked too: every continuation's encoding
        starts with them). Asked only where the decoder decides it (``Vocabulary.ends_pretoken``): plain ``data``,
        plain non-space next bytes."""
        if not all(0x20 <= b < 0x7F for b in data):
            return False
        if not all(0x20 < r[len(data)] < 0x7F for r in rem if len(r) > len(data)):
            return False
        if not all(len(data) in bruteforce.pretoken_ends(self.name, r.decode()) for r in rem):
            return False
        assert all(self.encoded(r)[:len(tokens)] == tokens for r in rem), (data, tokens)
        return True

    def encoded(self, text: bytes) -> list[int]:
        got = self._encoded.get(text)
        if got is None:
            got = self._encoded[text] = self.vocab.encode(text.decode())
        return got


def _lcp(xs: list[bytes]) -> bytes:
    if not xs:
        return b""
    a, b = min(xs), max(xs)
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return a[:k]


def _decodes(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


VOCABS = {"smollm2": Vocabulary.smollm2, "qwen3": Vocabulary.qwen3, "llama3": Vocabulary.llama3}
_oracles: dict[str, Oracle] = {}


def oracle(name: str) -> Oracle:
    if name not in _oracles:
        _oracles[name] = Oracle(VOCABS[name](), name)
    return _oracles[name]


def walk(spec: fs.Spec, orc: Oracle, texts: set[bytes], mode: str, indent: int | None, rng: random.Random,
         prime: bool = False) -> int:
    """One random walk, checking every mask; returns the number of positions checked. With ``prime``, the decoder
    first does its set-up work (``Decoder.prime``: the layout's choice tables built ahead, the root's rows), which
    the later walks of the same declaration share."""
    vocab = orc.vocab
    dec = spec.decoder(vocab, mode=mode, style="compact" if indent is None else indent)
    if prime:
        dec.prime()
    typed = b""
    row = np.zeros(mask_words(vocab.size), dtype=np.int32)
    history: list[tuple[int, frozenset[int]]] = []
    checked = 0
    carried: list[int] = []  # a run stays the plan while its tokens are taken (drafts match their masks)
    while True:
        exact = orc.exact(texts, typed)
        run = carried or orc.run(texts, typed)
        expected = {run[0]} if mode == "canonical" and run else exact
        dec.fill_mask(row)
        got = set(mask_to_ids(row, vocab.size).tolist())
        assert got == expected, (mode, typed, sorted(got ^ expected)[:10])
        assert dec.certain_run(64) == run, (typed, dec.certain_run(64), run)
        assert set(run[:1]) <= exact
        checked += 1
        tok = rng.choice(sorted(expected))
        history.append((tok, frozenset(got)))
        carried = run[1:] if run and tok == run[0] else []
        dec.consume(tok)
        if tok in vocab.eos_token_ids:
            break
        typed += vocab.tokens[tok]
        if rng.random() < 0.1 and len(history) > 2:  # roll back and replay: identical masks
            k = rng.randint(1, len(history) - 1)
            dec.rollback(k)
            for t, mask in history[-k:]:
                assert set(dec.allowed_tokens().tolist()) == mask
                dec.consume(t)
            assert dec.certain_run(64) == carried or not carried
    assert dec.is_terminated()
    assert typed in texts
    assert dec.record() == json.loads(typed)
    with pytest.raises(TokenRejected):
        dec.consume(history[0][0])
    return checked


def _grid() -> list[Any]:
    """Every (declaration, mode, tokenizer). The fast suite walks each declaration in each mode with one tokenizer,
    in rotation (so every tokenizer meets both modes and most declarations); the rest of the grid is marked slow."""
    names, modes, vocabs = sorted(DECLS), ["canonical", "exact"], sorted(VOCABS)
    return [pytest.param(name, mode, vocab_name, id=f"{name}-{mode}-{vocab_name}",
                         marks=() if (2 * i + j) % len(vocabs) == k else pytest.mark.slow)
            for i, name in enumerate(names) for j, mode in enumerate(modes) for k, vocab_name in enumerate(vocabs)]


@pytest.mark.parametrize(("name", "mode", "vocab_name"), _grid())
def test_masks_equal_brute_force(name: str, mode: str, vocab_name: str) -> None:
    doc = DECLS[name]
    spec = fs.Spec.from_json(doc)
    orc = oracle(vocab_name)
    rng = random.Random(f"{name}/{mode}/{vocab_name}")
    for indent in (None, 2):
        texts = renderings(doc, indent)
        assert texts
        positions = sum(walk(spec, orc, texts, mode, indent, rng, prime=k == 0) for k in range(4))
        assert positions > 6


def test_rejects_and_rollback_bounds() -> None:
    vocab = Vocabulary.smollm2()
    spec = fs.Spec.from_json(DECLS["sum"])
    dec = spec.decoder(vocab, mode="exact")
    with pytest.raises(TokenRejected):
        dec.consume(vocab.encode("[")[0])
    with pytest.raises(TokenRejected):
        dec.consume(vocab.eos_token_ids[0])
    with pytest.raises(ValueError):
        dec.rollback(1)
    with pytest.raises(ValueError):
        dec.fill_mask(np.zeros(3, dtype=np.int32))
    words = mask_words(vocab.size)  # the right size, but not int32 in this machine's order, or not one row
    swapped = np.dtype(np.int32).newbyteorder()
    for bad in (np.zeros(words, dtype=np.int64), np.zeros(words, dtype=swapped), np.zeros((1, words), dtype=np.int32)):
        with pytest.raises(ValueError):
            dec.fill_mask(bad)
    with pytest.raises(ValueError):
        spec.decoder(vocab, mode="fast")
    for t in vocab.encode('{"a": 3'):
        dec.consume(t)
    assert not dec.is_complete()
    with pytest.raises(TokenRejected):  # 3 + b == 4 leaves b = 1 only
        for t in vocab.encode(', "b": 2'):
            dec.consume(t)
    assert dec.output().startswith(b'{"a": 3, "b": ')


@pytest.mark.parametrize("mode", ["canonical", "exact"])
def test_rollback_then_another_token_equals_a_decoder_that_never_rolled_back(mode: str) -> None:
    """Rolled-back frames are kept for the same tokens taken again; a different token drops them. A walk that rolls
    back and goes on differently (or the same way) must show, at every position, the masks and certain runs of a
    fresh decoder fed the walk's tokens from the start."""
    from factorspec_cp.workloads import trip
    vocab = Vocabulary.smollm2()
    ex = next(trip.examples())
    spec = trip.declaration(trip.problem(ex))
    rng = random.Random(f"redo/{mode}")
    for _ in range(2):
        dec = spec.decoder(vocab, mode=mode)
        while not dec.is_terminated():
            ids = dec.allowed_tokens()
            dec.consume(int(ids[rng.randrange(len(ids))]))
            if rng.random() < 0.3 and len(dec.tokens) > 2:
                k = rng.randint(1, min(8, len(dec.tokens) - 1))
                undone = dec.tokens[-k:]
                dec.rollback(k)
                if rng.random() < 0.5:  # the same tokens again, in part
                    for t in undone[:rng.randint(0, k)]:
                        dec.consume(t)
            fresh = spec.decoder(vocab, mode=mode)
            for t in dec.tokens:
                fresh.consume(t)
            assert np.array_equal(dec.allowed_tokens(), fresh.allowed_tokens()), dec.output()
            assert dec.certain_run(64) == fresh.certain_run(64), dec.output()
        assert dec.record() == json.loads(dec.output())


@pytest.mark.parametrize("vocab_name", sorted(VOCABS))
def test_token_index_span_agrees_with_a_scan_of_the_sorted_tokens(vocab_name: str) -> None:
    """``TokenIndex.span`` (its bisections start inside the range of the prefix's first two bytes) against a linear
    scan for the tokens starting with each prefix: every byte and pair of bytes, random prefixes of tokens and tokens
    with a byte more, and the 0xFF cases where the prefix has no successor of its length."""
    from bisect import bisect_left

    from factorspec_cp.tokenmap.decoder import TokenIndex
    idx = TokenIndex.of(VOCABS[vocab_name]())
    toks = idx.toks

    def scan(p: bytes) -> tuple[int, int]:
        a = bisect_left(toks, p)
        b = a
        while b < len(toks) and toks[b].startswith(p):
            b += 1
        return a, b

    rng = random.Random(7)
    probes = [bytes((a,)) for a in range(256)] + [bytes((a, b)) for a in range(256) for b in (0, 32, 97, 255)]
    probes += [t[:rng.randint(1, len(t))] for t in rng.sample(toks, 2000)]
    probes += [t + bytes((rng.randrange(256),)) for t in rng.sample(toks, 2000)]
    probes += [b"\xff", b"\xff\xff", b"\xff\xff\xff", b"a\xff", b"a\xff\xff", b" \xff"]
    assert [p for p in probes if idx.span(p) != scan(p)] == []
    assert idx.span(b" the", 5, 50) == (max(5, min(50, scan(b" the")[0])), max(5, min(50, scan(b" the")[1])))


@pytest.mark.pure  # counts the calls of a method (tests/conftest.py)
@pytest.mark.parametrize("vocab_name", ["qwen3", "llama3"])
def test_prime_builds_the_choice_tables_a_walk_needs(vocab_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After ``prime``, random walks through calendar declarations that share a layout build no choice table on
    the way (each was built ahead, once per layout), and their masks and certain runs equal those of decoders over
    a second copy of the vocabulary, where every table is built on first visit and nothing is primed."""
    from factorspec_cp.tokenmap import decoder as D
    from factorspec_cp.workloads import calendar
    base = VOCABS[vocab_name]()  # (one object per tokenizer): two fresh copies, each with its own token index
    vocab, cold = base.padded(base.size), base.padded(base.size)
    assert D.TokenIndex.of(vocab) is not D.TokenIndex.of(cold)
    probs = [calendar.problem(ex) for ex in itertools.islice(calendar.examples(), 12)]
    specs = [calendar.declaration(p) for p in probs]
    same = [k for k, s in enumerate(specs) if s.schema == specs[1].schema]  # 1: its start has several root values
    assert len(same) >= 4
    first = specs[1].decoder(vocab)
    assert not first._c.choices
    first.prime()
    assert len(first._c.choices) > 50  # the start and end slots' states (the day is certain)
    assert specs[1].decoder(vocab)._build_choice_tables() == 0  # once per (layout, field)
    built, armed = D.build_choice_table, [False]

    def build(*args: Any) -> Any:
        assert not armed[0], "a choice table built on the primed walk"
        return built(*args)

    monkeypatch.setattr(D, "build_choice_table", build)
    rng = random.Random(vocab_name)
    for k in same:
        dec, ref = specs[k].decoder(vocab).prime(), specs[k].decoder(cold)
        while not dec.is_terminated():
            armed[0] = True
            ids = dec.allowed_tokens()
            run = dec.certain_run(64)
            armed[0] = False
            assert np.array_equal(ids, ref.allowed_tokens()), dec.output()
            assert run == ref.certain_run(64), dec.output()
            tok = int(ids[rng.randrange(len(ids))])
            dec.consume(tok)
            ref.consume(tok)
        assert calendar.check(probs[k], dec.record()) == []


@pytest.mark.parametrize("vocab_name", ["smollm2", "qwen3", "llama3"])
def test_prime_encodes_the_string_values_a_planner_spells(vocab_name: str) -> None:
    """``prime`` encodes the string values of the declaration's narrow fields, once per compiled declaration: the
    pre-tokens of names the tokenizer has never met are in its encoder's memo after ``prime`` (not before), so a
    certain run that spells them finds them there; the walk still writes the record."""
    import inspect
    import string
    vocab = VOCABS[vocab_name]()
    vocab.encode("{}")
    encoder = vocab._encoder
    memo = inspect.getclosurevars(encoder).nonlocals["memo"]  # (bpe.by_piece's pre-tokens kept)
    rng = random.Random(f"{vocab_name}-{len(memo)}")
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(11)).title() for _ in range(6)]
    names = [words[0], words[1] + " " + words[2], words[3], words[4] + " " + words[5]]
    new = [p for n in names for p in encoder.pieces(n)]
    assert len(new) == 6 and not any(p in memo for p in new)
    spec = fs.Spec({"type": "object", "required": ["who", "where"],
                    "properties": {"who": {"enum": names[:2]}, "where": {"enum": names[2:]}}},
                   relations=[fs.Table(["/who", "/where"], [[names[0], names[2]], [names[1], names[3]]])])
    dec = spec.decoder(vocab)
    assert not any(p in memo for p in new)
    dec.prime()
    assert all(p in memo for p in new)
    gold = {"who": names[1], "where": names[3]}  # (the where is certain once the who is written)
    for tok in vocab.encode(json.dumps(gold)):
        run = dec.certain_run(64)
        assert not run or run[0] == tok
        dec.consume(tok)
    assert dec.output() == json.dumps(gold).encode() and dec.record() == gold


@pytest.mark.parametrize("vocab_name", ["smollm2", "qwen3", "llama3"])
def test_the_planner_encodes_kept_pretokens_without_the_vocabularys_python(vocab_name: str, monkeypatch: Any) -> None:
    """A planner's new text whose pre-tokens the encoder keeps is encoded by one call into C from the compiled
    planner (``Vocabulary.known_pieces``), not by ``Vocabulary.encode``; the ids are the tokenizer's (the vocabulary's
    ``encode`` of the same text, and its spelling), the encoder's ``last`` is set as ``encode`` sets it, and a text
    with a pre-token never met still goes to ``encode``."""
    import string

    from factorspec_cp.tokenmap.vocab import Vocabulary
    vocab = VOCABS[vocab_name]()
    spec = fs.Spec({"type": "object", "required": ["a"], "properties": {"a": {"enum": ["x", "y"]}}})
    dec = spec.decoder(vocab)
    known = vocab.known_pieces()
    assert known is not None and known[2] is vocab._encoder
    rng = random.Random(vocab_name)
    texts = [f'PM"}}, {{"person": "Kimberly", "location": "Presidio", "meet": true, "start": "{rng.randrange(12)}:'
             for _ in range(3)] + [f'{rng.randrange(60)}AM", "end": "{rng.randrange(12)}' for _ in range(3)]
    for t in texts:
        vocab.encode(t)  # (its pre-tokens kept)
    calls: list[str] = []
    real = Vocabulary.encode

    def counted(self: Vocabulary, text: str) -> list[int]:
        calls.append(text)
        return real(self, text)

    monkeypatch.setattr(Vocabulary, "encode", counted)
    for t in texts:
        assert t not in dec._c.index.encoded  # (the planner's memo of texts has not met it)
        ids = dec._encode(t)
        assert calls == [] and list(ids) == real(vocab, t) and vocab.decode(ids) == t.encode()
        assert vocab._encoder.last == (t, vocab._encoder.pieces(t)[-1])
    odd = "".join(rng.choice(string.ascii_lowercase) for _ in range(13))
    ids = dec._encode(f'"{odd}"')  # (a pre-token never met: the encoder's own path)
    assert calls == [f'"{odd}"'] and vocab.decode(ids) == f'"{odd}"'.encode()


def test_a_meeting_walk_makes_no_reference_cycles() -> None:
    """A decoder's walk through a meeting record (certain runs, their rows ahead, the filters of the values completed
    on the way, choices) leaves nothing for the cycle collector: what it drops goes by reference counting. (Each
    filter a plan made was a cycle of its closures until stop 51: ten objects a plan for the collector to find.)"""
    import gc

    from factorspec_cp.workloads import meeting
    vocab = VOCABS["qwen3"]()
    ex = next(e for e in meeting.examples() if e["num_people"] == 5)
    gold = meeting.gold_record(ex)
    dec = meeting.declaration(meeting.problem(ex)).decoder(vocab).prime()
    gc.collect()
    gc.disable()
    try:
        for tok in vocab.encode(json.dumps(gold)):
            dec.certain_run(64)
            dec.consume(tok)
        assert dec.record() == gold
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("wide", [False, True])
def test_nothing_the_declaration_keeps_holds_a_dropped_decoder_or_its_session(wide: bool) -> None:
    """Dropped, a decoder is freed at once and its session by the cycle collector (a session and the questions it
    hands out refer to each other), even while the declaration lives on in a server. Two things held them for the
    declaration's life: the exception saying a declaration is too wide for SAT, kept with its traceback (whose
    frames held the first session and decoder, and which grew by one session each time it was raised again), and
    the layout's table of asked slots per questions object, whose values held their keys."""
    import gc

    from factorspec_cp.session import Session
    from factorspec_cp.tokenmap.decoder import Decoder

    def alive(ids: set[int], cls: type) -> bool:  # (a compiled class's objects take no weak references)
        return any(type(o) is cls and id(o) in ids for o in gc.get_objects())

    hi = 5000 if wide else 3  # 5000 values: past SAT's domain limit (the backend choice meets EncodingTooLarge),
    spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {  # and a wide field (asked slots)
        "a": {"type": "integer", "minimum": 0, "maximum": hi},
        "b": {"type": "integer", "minimum": 0, "maximum": hi}}}, [fs.Linear([[1, "/a"], [1, "/b"]], "==", 3)])
    vocab = Vocabulary.smollm2()
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        decoders, sessions = set(), set()
        for _ in range(3):
            dec = spec.decoder(vocab)
            dec.certain_run(4)
            dec.allowed_tokens()
            decoders.add(id(dec))
            sessions.add(id(dec.session))
            assert alive({id(dec)}, Decoder) and alive({id(dec.session)}, Session)  # (the check sees live ones)
            del dec
        assert not alive(decoders, Decoder)
        gc.collect()
        assert not alive(sessions, Session)
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("collect", [True, False])
def test_prime_leaves_the_set_up_to_the_old_generation(collect: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``prime`` ends with a collection of the young generations (``PRIME_COLLECT``): the session and the frames
    the set-up made are then in the oldest generation, where the collections inside the decode steps do not walk
    them; without it (automatic collections off, so none moves them) they are still young."""
    import gc

    from factorspec_cp.tokenmap import decoder as D
    monkeypatch.setattr(D, "PRIME_COLLECT", collect)
    spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 3},
        "b": {"type": "integer", "minimum": 0, "maximum": 3}}}, [fs.Linear([[1, "/a"], [1, "/b"]], "==", 3)])
    vocab = Vocabulary.smollm2()
    was = gc.isenabled()
    gc.disable()
    try:
        dec = spec.decoder(vocab).prime()
        old = {id(o) for o in gc.get_objects(generation=2)}
        made = [dec, dec.session, dec._frames]
        assert [id(o) in old for o in made] == [collect] * len(made)
    finally:
        if was:
            gc.enable()


def test_a_kept_filter_asked_under_another_assignment_raises() -> None:
    """A decoder keeps one layout filter per assignment; asked after the assignment changed, it would answer for the
    old one, so it raises instead."""
    spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 3},
        "b": {"type": "integer", "minimum": 0, "maximum": 3}}}, [fs.Linear([[1, "/a"], [1, "/b"]], "==", 3)])
    dec = spec.decoder(Vocabulary.smollm2())
    flt = dec._admissible()
    assert dec._admissible() is flt  # kept for the assignment
    assert flt.answer("/a") == [0, 1, 2, 3]
    dec.session.assign("/a", 1)
    with pytest.raises(RuntimeError, match="another assignment"):
        flt.answer("/b")
    assert dec._admissible() is not flt and dec._admissible().answer("/b") == [2]


@pytest.mark.parametrize("sparse_limit", [0, 64])
@pytest.mark.parametrize("dense_limit", [0, 1 << 14])
def test_choice_table_rows_are_the_union_of_the_selected_candidates(dense_limit: int, sparse_limit: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A choice table's row for a selection of candidates, from its small matrix (candidates x mask words) or,
    past the matrix's limit, from its flat scatter, or kept as the ids where they are few, is exactly the union of
    the selected candidates' ids."""
    import threading

    from factorspec_cp.tokenmap import decoder as D
    monkeypatch.setattr(D, "DENSE_CHOICE_WORDS", dense_limit)
    monkeypatch.setattr(D, "SPARSE_IDS", sparse_limit)
    rng = random.Random(dense_limit)
    words = mask_words(5000)
    size = 5000
    for _ in range(20):
        n = rng.randrange(1, 24)
        ids = tuple(np.array(sorted(rng.sample(range(size), rng.randrange(0, 60))), dtype=np.int64) for _ in range(n))
        table = D.ChoiceTable("/x", ids, (), False, tuple((k, k) for k in range(n)), size)
        assert (table.dense is None) == (dense_limit == 0)
        lock = threading.Lock()
        for _ in range(10):
            chosen = sorted(rng.sample(range(n), rng.randrange(0, n + 1)))
            row = table.row(bytes(chosen), lock)
            # kept as the ids where the selected candidates hold at most SPARSE_IDS (the C pass built), else words
            assert (type(row) is D._IdsRow) == (sum(len(ids[k]) for k in chosen) <= sparse_limit), len(chosen)
            want = sorted({int(t) for k in chosen for t in ids[k]})
            assert mask_to_ids(D.dense_row(row, words), size).tolist() == want
        every = D.dense_row(table.row(None, lock), words)
        assert mask_to_ids(every, size).tolist() == sorted({int(t) for i in ids for t in i})
        empty = table.row(b"", lock)  # no candidate: no ids, under any limit
        assert type(empty) is D._IdsRow and not D.dense_row(empty, words).any()


def test_ids_fill_clears_the_row_and_sets_exactly_the_ids() -> None:
    """``_rows.ids_fill`` (a choice row of a few ids, written where the model chooses) leaves exactly the ids' bits
    in a row that held others, against numpy's packing; an id outside the row is refused and nothing is written."""
    from factorspec_cp import _rows  # type: ignore[attr-defined]
    from factorspec_cp.tokenmap.decoder import _pack
    rng = random.Random(7)
    size = 5000
    for n in (0, 1, 5, 64):
        ids = np.array([rng.randrange(size) for _ in range(n)], dtype=np.int64)  # (repeats allowed)
        row = np.array([rng.randrange(-2**31, 2**31) for _ in range(mask_words(size))], dtype=np.int32)
        _rows.ids_fill(row, ids.tobytes())
        assert np.array_equal(row, _pack(np.unique(ids), size))
    row = np.full(mask_words(size), -1, dtype=np.int32)
    for bad in ([3, 32 * mask_words(size)], [3, -1]):  # past the row, negative: refused before any write
        with pytest.raises(IndexError):
            _rows.ids_fill(row, np.array(bad, dtype=np.int64).tobytes())
        assert (row == -1).all()
    with pytest.raises(ValueError):  # ids not whole int64s
        _rows.ids_fill(row, b"\x01" * 12)
    assert (row == -1).all()


def test_consume_seconds_counts_the_tokens_that_were_not_planned() -> None:
    """``DecoderStats.consume_seconds`` times the consumes that take a path of their own (the model's choice), not a
    planned token's, nor a token a rollback undid taken again: those push a frame, and their two clock reads were
    1.5% of a meeting walk. (A planner's take of its run, for the row after it, is timed once per run.)"""
    vocab = VOCABS["smollm2"]()
    dec = fs.Spec(DECLS["sum"]).decoder(vocab)
    run = dec.certain_run(64)
    assert run and vocab.decode(run).startswith(b'{"a"')
    before = dec.stats.consume_seconds  # (the planner's own take of the run, for the row after it)
    for t in run:
        dec.consume(t)
    assert dec.stats.consume_seconds == before
    dec.rollback(len(run))
    for t in run:  # (the frames the rollback kept, taken again)
        dec.consume(t)
    assert dec.stats.consume_seconds == before and dec.certain_run(1) == []
    row = np.zeros(mask_words(vocab.size), dtype=np.int32)
    dec.fill_mask(row)
    dec.consume(int(mask_to_ids(row, vocab.size)[0]))  # the model's choice: its own path, timed
    assert dec.stats.consume_seconds > before
