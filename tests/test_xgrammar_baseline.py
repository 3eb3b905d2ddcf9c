"""XGrammarMatcher (factorspec_cp.baselines.xgrammar) against an independent oracle.

For finite schemas the oracle enumerates every valid record, renders each with json.dumps (compact separators
(", ", ": ") or indent=2, ensure_ascii=False), and derives the exact mask at any prefix: a content token is admitted
iff prefix + token is a prefix of some rendering, EOS iff the prefix is a whole rendering. XGrammar's mask must equal
it at every position of every canonical tokenization, for all three bundled vocabularies.
"""

from __future__ import annotations

import itertools
import json
from functools import cache

import numpy as np
import pytest

pytest.importorskip("xgrammar", reason="xgrammar is installed apart: pip install --no-deps xgrammar==0.2.9")

from factorspec_cp.baselines.xgrammar import (  # noqa: E402
    XGrammarMatcher,
    XGrammarRejected,
    compiler,
    tokenizer_info,
    tokenizer_info_seconds,
)
from factorspec_cp.tokenmap import Vocabulary  # noqa: E402

VOCABS = ["smollm2", "llama3", "qwen3"]


@cache
def vocab(name: str) -> Vocabulary:
    return getattr(Vocabulary, name)()


@cache
def by_bytes(name: str) -> dict[bytes, tuple[int, ...]]:
    out: dict[bytes, list[int]] = {}
    for i, t in enumerate(vocab(name).tokens):
        if t:
            out.setdefault(t, []).append(i)
    return {k: tuple(v) for k, v in out.items()}


# ------------------------------------------------------------------------------------------------- the oracle
def values(s: dict) -> list:
    """Every value a (small, finite) schema admits, properties in schema order."""
    if "enum" in s:
        return list(s["enum"])
    t = s["type"]
    if t == "boolean":
        return [True, False]
    if t == "integer":
        return list(range(s["minimum"], s["maximum"] + 1))
    if t == "array":
        items = values(s["items"])
        return [list(p) for n in range(s.get("minItems", 0), s["maxItems"] + 1)
                for p in itertools.product(items, repeat=n)]
    if t == "object":
        names = list(s["properties"])
        assert s["required"] == names
        return [dict(zip(names, combo)) for combo in itertools.product(*(values(s["properties"][n]) for n in names))]
    raise AssertionError(f"not finite here: {s}")


def render(record, indent: int | None) -> str:
    if indent is None:
        return json.dumps(record, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(record, ensure_ascii=False, indent=indent)


def oracle_mask(renderings: list[bytes], prefix: bytes, name: str) -> set[int]:
    table, v = by_bytes(name), vocab(name)
    out: set[int] = set()
    for r in renderings:
        if not r.startswith(prefix):
            continue
        rest = r[len(prefix):]
        if not rest:
            out.update(v.eos_token_ids)
        for k in range(1, len(rest) + 1):
            out.update(table.get(rest[:k], ()))
    return out


def obj(**props) -> dict:
    return {"type": "object", "properties": props, "required": list(props)}


FINITE = {
    "enum": obj(color={"enum": ["red", "green", "blue", "dark red", "é"]}),
    "int": obj(n={"type": "integer", "minimum": -5, "maximum": 120}),
    "bool": obj(ok={"type": "boolean"}, flag={"type": "boolean"}),
    "nested": obj(user=obj(name={"enum": ["ann", "bo"]}, age={"type": "integer", "minimum": 18, "maximum": 20}),
                  active={"type": "boolean"}),
    "array": obj(tags={"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3}),
}

STRING = obj(city={"type": "string", "maxLength": 12}, ok={"type": "boolean"})
STRING_RECORDS = [{"city": "Riga", "ok": True}, {"city": "São Paulo", "ok": False}, {"city": "", "ok": True},
                  {"city": "abcdefghijkl", "ok": False}, {"city": "a b-c.d/é", "ok": True}]


def mask_ids(m: XGrammarMatcher) -> np.ndarray:
    row = np.zeros(m.words, dtype=np.int32)
    m.fill_mask(row)
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))  # every bit, padding included


def pick_records(all_records: list, k: int = 4) -> list:
    """First, last and a few spread in between (deterministic)."""
    idx = sorted({0, len(all_records) - 1, *range(0, len(all_records), max(1, len(all_records) // (k - 1)))})
    return [all_records[i] for i in idx][: k + 1]


# ------------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("name", VOCABS)
def test_tokenizer_info(name):
    v = vocab(name)
    info = tokenizer_info(v)
    assert tokenizer_info(v) is info and compiler(v) is compiler(v)
    assert info.vocab_size == v.size
    assert sorted(info.stop_token_ids) == sorted(v.eos_token_ids)
    none_ids = {i for i, t in enumerate(v.tokens) if t is None}
    assert set(info.special_token_ids) == none_ids - set(v.eos_token_ids)
    assert tokenizer_info_seconds(v) < 5.0


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("schema_name", list(FINITE))
def test_mask_equals_oracle(schema_name, name, indent):
    schema, v = FINITE[schema_name], vocab(name)
    all_records = values(schema)
    renderings = [render(r, indent).encode() for r in all_records]
    eos, specials = set(v.eos_token_ids), set(v.special_ids) - set(v.eos_token_ids)
    for record in pick_records(all_records):
        text = render(record, indent)
        ids = v.encode(text)
        m = XGrammarMatcher(schema, v, indent=indent)
        prefix = b""
        for t in ids:
            got = mask_ids(m)
            assert got.max() < v.size and not specials.intersection(got.tolist())
            assert set(got.tolist()) == oracle_mask(renderings, prefix, name), (text, prefix)
            assert t in got and not eos.intersection(got.tolist())
            assert not m.is_complete()
            m.consume(t)
            prefix += v.tokens[t]
        assert prefix == text.encode()
        assert set(mask_ids(m).tolist()) == eos and m.is_complete()
        m.consume(v.eos_token_ids[-1])
        assert m.is_terminated() and mask_ids(m).size == 0


@pytest.mark.parametrize("name", VOCABS)
def test_free_string_with_max_length(name):
    v = vocab(name)
    eos = set(v.eos_token_ids)
    newline = set(by_bytes(name).get(b"\n", ()))
    for record in STRING_RECORDS:
        text = render(record, None)
        ids = v.encode(text)
        m = XGrammarMatcher(STRING, v)
        prefix = b""
        for t in ids:
            got = set(mask_ids(m).tolist())
            assert t in got and not eos & got
            if prefix.startswith(b'{"city": "') and prefix.count(b'"') == 3:
                assert not newline & got  # a raw newline never stands in a JSON string
            if prefix == b'{"city": "abcdefghijkl':  # 12 code points: only the closing quote may follow
                assert all(v.tokens[i].startswith(b'"') for i in got)
            m.consume(t)
            prefix += v.tokens[t]
        assert set(mask_ids(m).tolist()) == eos
        m.consume(v.eos_token_ids[0])
        assert m.is_terminated()


@pytest.mark.parametrize("name", VOCABS)
def test_rejects_invalid_tokens(name):
    v = vocab(name)
    m = XGrammarMatcher(FINITE["nested"], v)
    first = set(mask_ids(m).tolist())
    for junk in (b"[", b"x", b" ", b"}", b'"'):
        for t in by_bytes(name).get(junk, ()):
            assert t not in first
            with pytest.raises(ValueError):
                m.consume(t)
    with pytest.raises(XGrammarRejected):
        m.consume(v.eos_token_ids[0])
    special = min(v.special_ids - set(v.eos_token_ids))
    with pytest.raises(ValueError):
        m.consume(special)
    with pytest.raises(ValueError):
        m.consume(v.size)
    assert m.tokens == [] and set(mask_ids(m).tolist()) == first  # nothing changed
    text = render({"user": {"name": "bo", "age": 19}, "active": True}, None)
    for t in v.encode(text):
        m.consume(t)
    m.consume(v.eos_token_ids[0])
    with pytest.raises(ValueError):
        m.consume(v.eos_token_ids[0])


@pytest.mark.parametrize("name", VOCABS)
def test_rollback_gives_identical_masks(name):
    v = vocab(name)
    schema = FINITE["array"]
    ids = [*v.encode(render({"tags": ["c", "a", "b"]}, 2)), v.eos_token_ids[0]]
    m = XGrammarMatcher(schema, v, indent=2)
    masks = []
    for t in ids:
        masks.append(mask_ids(m))
        m.consume(t)
    masks.append(mask_ids(m))
    assert m.is_terminated()
    n = len(ids)
    for k in (1, 2, n // 2, n):
        m.rollback(k)
        assert m.tokens == ids[: n - k] and not m.is_terminated()
        assert np.array_equal(mask_ids(m), masks[n - k])
        for j in range(n - k, n):
            m.consume(ids[j])
            assert np.array_equal(mask_ids(m), masks[j + 1])
        assert m.is_terminated()
    with pytest.raises(ValueError):
        m.rollback(n + 1)
    m.rollback(0)
    assert m.tokens == ids


@pytest.mark.parametrize("name", VOCABS)
def test_row_layout(name):
    v = vocab(name)
    m = XGrammarMatcher(FINITE["bool"], v)
    words = -(-v.size // 32)
    assert m.words == words
    row = np.full(words, -1, dtype=np.int32)
    m.fill_mask(row)
    want = {t for t in oracle_mask([render(r, None).encode() for r in values(FINITE["bool"])], b"", name)}
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")
    assert set(np.flatnonzero(bits).tolist()) == want  # bit t % 32 of word t // 32, padding bits cleared
    for bad in (np.zeros(words - 1, dtype=np.int32), np.zeros(words, dtype=np.int64),
                np.zeros((1, words), dtype=np.int32)):
        with pytest.raises(ValueError):
            m.fill_mask(bad)


def test_compile_cache_and_order():
    v = vocab("smollm2")
    a = obj(x={"type": "boolean"}, y={"type": "integer", "minimum": 0, "maximum": 3})
    b = obj(y={"type": "integer", "minimum": 0, "maximum": 3}, x={"type": "boolean"})
    m1, m2 = XGrammarMatcher(a, v), XGrammarMatcher(a, v)
    assert m2.compile_cached and m2.compiled is m1.compiled and m2.compile_seconds == m1.compile_seconds
    assert m1.compile_seconds >= 0
    mb = XGrammarMatcher(b, v)  # property order decides the rendering: not the same grammar
    assert mb.compiled is not m1.compiled
    for t in v.encode('{"y": 2, "x": true}'):
        mb.consume(t)
    assert mb.is_complete()
    assert XGrammarMatcher(a, v, indent=2).compiled is not m1.compiled
    with pytest.raises(ValueError):
        XGrammarMatcher(a, v, indent=-1)


def test_time_masks():
    from factorspec_cp.bench.masks_xgrammar import time_masks

    v = vocab("smollm2")
    seqs = [[*v.encode(render(r, None)), v.eos_token_ids[0]] for r in values(FINITE["bool"])]
    out = time_masks(FINITE["bool"], v, seqs)
    assert out["sequences"] == 4 and [len(f) for f in out["fill_mask_seconds"]] == [len(s) for s in seqs]
    assert out["positions"] == sum(map(len, seqs)) == out["fill_mask_ms"]["n"] == out["consume_ms"]["n"]
    assert out["compile_seconds"] > 0 and all(x >= 0 for f in out["fill_mask_seconds"] for x in f)
