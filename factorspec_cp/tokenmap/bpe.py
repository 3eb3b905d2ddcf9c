"""Byte-level BPE plumbing: the GPT-2 byte alphabet and `tokenizers` BPE models built from tiktoken ranks or GGUF.

A byte-level BPE spells every byte as one printable character (GPT-2's ``bytes_to_unicode``), so a token's
string maps back to its exact bytes. A `tokenizers` BPE built from tiktoken ranks (merges ordered by the rank
of the token they make, ``ignore_merges`` on) gives the same ids as tiktoken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cache, partial
from itertools import chain
from typing import Any

#: Pre-tokenizer split regexes, as the models' own ``tokenizer.json`` files carry them.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


#: GPT-2's split, which `tokenizers`' ``ByteLevel(use_regex=True)`` applies.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: SmolLM2's split in one pattern: `tokenizers`' ``Digits(individual_digits=True)`` (each digit alone), then GPT-2's
#: split inside each stretch between digits. No alternative but ``\p{N}`` takes a digit, so every other piece stops
#: before one, as it stops at its stretch's end; and a run of spaces before a digit is a stretch's last piece, where
#: ``(?!\S)`` holds as it does at the end of the text: ``(?![^\s\p{N}])`` (GPT-2's `` ?\p{N}+`` never matches).
DIGITS_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d|\p{N}| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""
#: Text the piecewise encoder splits itself: printable ASCII, space, tab and newline (where the split's classes mean
#: the same in Python's ``regex`` and in `tokenizers`' Oniguruma); other text goes to the tokenizer whole.
_PLAIN_TEXT = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A}
#: Pre-tokens kept per piecewise encoder.
PIECES_KEPT = 1 << 16
#: The mark of an encoder :func:`by_piece` made (its ``piecewise`` attribute), which checks its results where given a
#: ``check``.
PIECEWISE = object()


#: The splits ``factorspec_cp._pretok`` makes in C, by pattern (the number it knows each by).
_C_SPLITS = {GPT2_PATTERN: 0, DIGITS_GPT2_PATTERN: 1, QWEN2_PATTERN: 2, LLAMA3_PATTERN: 3}


#: ``known(text, memo)``: ``(ids, last pre-token)`` where ``memo`` keeps every pre-token of ``text``, else None.
Known = Callable[[str, dict[str, tuple[int, ...]]], Any]


def plain_text_known(pattern: str) -> Known | None:
    """For a pattern of :data:`_C_SPLITS`, with the extension built: ``factorspec_cp._pretok.known`` for it, which
    splits a plain text, looks each pre-token up in a memo of their ids and joins them, in one call (a planner's
    text, whose twenty-odd pre-tokens are nearly always kept: 3 us of Python, warm). ``None`` otherwise."""
    found = _c_split(pattern)
    return None if found is None else partial(found[0].known, found[1])


def _c_split(pattern: str) -> tuple[Any, int] | None:
    """The ``_pretok`` extension and its number for ``pattern``; ``None`` for another pattern or without the
    extension built."""
    kind = _C_SPLITS.get(pattern)
    if kind is None:
        return None
    try:
        from .. import _pretok  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _pretok, kind


def plain_text_split(pattern: str, *, compiled: bool = True) -> Callable[[str], list[str]]:
    """``pattern``'s ``findall`` for text of :data:`_PLAIN_TEXT` only. For the four patterns the bundled tokenizers
    split with (:data:`_C_SPLITS`), one pass in C (``factorspec_cp/_pretok.c``, which raises ``ValueError`` on other
    text; Python's ``re`` took 5 of the 11 us of a planner's encode in a meeting walk), unless ``compiled`` is
    false or the extension is not built. Else Python's ``re``: ``\\p{L}`` and ``\\p{N}`` become the ASCII letters
    and digits (inside a class or as one), and ``re.ASCII`` makes ``\\s`` ASCII's. On that text the classes are the
    same sets and both engines backtrack the same way, so the pieces are the same; ``re`` splits a planner's text in
    3 us where ``regex``, which knows ``\\p{..}``, takes 7."""
    import re

    found = _c_split(pattern) if compiled else None
    if found is not None:
        return partial(found[0].split, found[1])

    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            esc = pattern[i:i + 5]
            if esc in ("\\p{L}", "\\p{N}"):
                chars = "A-Za-z" if esc == "\\p{L}" else "0-9"
                out.append(chars if in_class else f"[{chars}]")
                i += 5
                continue
            if pattern[i + 1:i + 2] in ("p", "P"):
                raise ValueError(f"plain_text_split: {pattern[i:i + 8]!r} is not \\p{{L}} or \\p{{N}}")
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # (a leading ] is a member)
                out.append("]")
                i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        else:
            out.append(c)
        i += 1
    return re.compile("".join(out), re.ASCII).findall


def by_piece(pieces: Callable[[str], list[str]], encode_piece: Callable[[str], Any],
             encode_whole: Callable[[str], list[int]], known: Known | None = None) -> Callable[[str], list[int]]:
    """An encode function that splits plain text into pre-tokens with ``pieces`` and encodes each distinct one once
    with ``encode_piece`` (kept: ``"person"``, ``" \""`` and ``"\"},"`` recur in every record); text outside
    :data:`_PLAIN_TEXT` goes to ``encode_whole``. BPE merges never cross pre-tokens, so where ``pieces`` is the
    tokenizer's own split the ids are the tokenizer's. ``pieces`` must return consecutive pieces of the text, in
    order (as ``re.findall`` does).

    ``encode.check``: ``None``, or a function ``(text, ids)`` that raises where ``ids`` do not spell ``text``. Set
    before the first call (pre-tokens kept earlier are not checked again), the encoder calls it on each new pre-token
    as it keeps it and on what ``encode_whole`` returns, and on the whole text where the pre-tokens do not add up to it:
    every result is then checked, and a caller need not spell each text back. A :class:`~.vocab.Vocabulary` sets it
    on the encoders marked ``encode.piecewise is PIECEWISE`` (a planner's text is new in each record, its pre-tokens
    are not). ``encode.pieces`` is ``pieces`` (``Vocabulary.ends_pretoken`` splits with it); ``encode.last``, the last
    plain text split and its last pre-token (``None`` where the pieces did not cover it), which spares that split
    again where it asks right after encoding the text (a planner's run). ``known`` (:func:`plain_text_known`), where
    given, answers first a text whose pre-tokens are all kept, in one call; ``encode.known`` is ``(known, memo)``, with
    the memo of pre-tokens it reads (``None`` without ``known``)."""
    memo: dict[str, tuple[int, ...]] = {}
    plain_bytes = bytes(sorted(_PLAIN_TEXT))  # (deleted by translate: what is left is not plain text)

    def encode(text: str) -> list[int]:
        if known is not None:
            hit = known(text, memo)
            if hit is not None:
                encode.last = (text, hit[1])  # type: ignore[attr-defined]
                return hit[0]  # type: ignore[no-any-return]
        check = encode.check  # type: ignore[attr-defined]
        if not text.isascii() or text.encode().translate(None, plain_bytes):  # (some byte not plain text: a set's
            # issuperset over the bytes hashed each one, 2 us for a planner's text)
            whole = encode_whole(text)
            if check is not None:
                check(text, whole)
            return whole
        split = pieces(text)
        # each pre-token's ids from the memo in one pass in C (a planner's text has two dozen pre-tokens, most kept:
        # a loop over them in Python cost as much as the split); the new ones encoded, checked and kept
        found = list(map(memo.get, split))
        if not all(found):  # (a piece's ids are never empty: a miss is the one falsy entry)
            for i, piece in enumerate(split):
                if found[i] is None:
                    ids = memo.get(piece)  # (a piece twice in one text: encoded once)
                    if ids is None:
                        ids = tuple(encode_piece(piece))
                        if check is not None:
                            check(piece, ids)
                        if len(memo) >= PIECES_KEPT:
                            memo.clear()
                        memo[piece] = ids
                    found[i] = ids
        out: list[int] = list(chain.from_iterable(found))
        covered = sum(map(len, split))
        if check is not None and covered != len(text):
            check(text, out)  # (the split skipped some of the text: the check says what is wrong)
        last = split[-1] if split else ""
        encode.last = (text, last if covered == len(text) else None)  # type: ignore[attr-defined]
        return out

    encode.whole = encode_whole  # type: ignore[attr-defined]  # (what other text goes to: tests look for it)
    encode.known = None if known is None else (known, memo)  # type: ignore[attr-defined]  # (Vocabulary.known_pieces)
    encode.pieces = pieces  # type: ignore[attr-defined]  # (the split: Vocabulary.ends_pretoken reads it)
    encode.last = ("", None)  # type: ignore[attr-defined]  # the last text split and its last pre-token (the same)
    encode.check = None  # type: ignore[attr-defined]
    encode.piecewise = PIECEWISE  # type: ignore[attr-defined]
    return encode


def piecewise_encoder(tok: Any) -> Callable[[str], list[int]] | None:
    """For a `tokenizers` BPE with no normalizer whose pre-tokenizer is GPT-2's split (``ByteLevel`` with its regex,
    no prefix space), optionally after ``Digits(individual_digits=True)`` (SmolLM2): :func:`by_piece` over that split.
    A planner's text (one certain run: ``PM"}, {"person": "David", ...``) costs 20 us in the tokenizer, whose
    pre-tokenizer alone is 16 us of it. ``None`` for any other configuration."""
    import json

    spec = json.loads(tok.to_str())
    if spec.get("normalizer") is not None or spec.get("added_tokens"):
        return None
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    digits = bool(steps) and steps[0].get("type") == "Digits"
    if digits:
        if not steps[0].get("individual_digits"):
            return None
        steps = steps[1:]
    if len(steps) != 1 or steps[0].get("type") != "ByteLevel" or not steps[0].get("use_regex", True) or \
            steps[0].get("add_prefix_space", False):
        return None
    # (one findall: splitting at the digits first, then each stretch, took 8 us for a planner's text, against 5)
    pattern = DIGITS_GPT2_PATTERN if digits else GPT2_PATTERN
    pieces = plain_text_split(pattern)

    def whole(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    return by_piece(pieces, whole, whole, plain_text_known(pattern))


def tiktoken_piecewise(encoding: Any, pattern: str) -> Callable[[str], list[int]]:
    """tiktoken's ``encode_ordinary`` for ``encoding`` (whose split regex is ``pattern``) as :func:`by_piece`: the
    split by :func:`plain_text_split`, each new pre-token through tiktoken's BPE of one piece. On meeting's planned
    runs tiktoken costs 35 us a call between the planner's other work (5-10 us warm). A tiktoken without its
    one-piece BPE (``_encode_single_piece``, private) gets ``encode_ordinary`` as it is."""
    single = getattr(encoding, "_encode_single_piece", None)
    if single is None:
        return encoding.encode_ordinary  # type: ignore[no-any-return]
    return by_piece(plain_text_split(pattern), single, encoding.encode_ordinary, plain_text_known(pattern))


@cache
def byte_encoder() -> dict[int, str]:
    """GPT-2's byte -> printable character table (``bytes_to_unicode``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@cache
def byte_decoder() -> dict[str, int]:
    """Inverse of :func:`byte_encoder`: printable character -> byte."""
    return {c: b for b, c in byte_encoder().items()}


def bytes_to_bpe_string(token: bytes) -> str:
    """The byte-level BPE spelling of ``token``."""
    enc = byte_encoder()
    return "".join(enc[b] for b in token)


def bpe_string_to_bytes(token: str) -> bytes | None:
    """The bytes a byte-level BPE token string stands for, or None when it is not in the byte alphabet."""
    dec = byte_decoder()
    try:
        return bytes(dec[c] for c in token)
    except KeyError:
        return None


def _spell(part: bytes | str) -> str:
    return part if isinstance(part, str) else bytes_to_bpe_string(part)


def merges_from_ranks(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges equivalent to tiktoken's rank-ordered merging.

    Every split of a multi-byte token into two tokens is a merge; merges are ordered by the rank of the token
    they make, then by the ranks of the two halves (the order transformers' tiktoken converter uses).
    """
    merges: list[tuple[bytes, bytes]] = []
    for token, _rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        local = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        local.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
        merges.extend(local)
    return merges


def byte_level_bpe(
    vocab: Mapping[bytes, int],
    merges: Iterable[tuple[bytes, bytes]] | Iterable[tuple[str, str]],
    *,
    pattern: str | None,
    individual_digits: bool = False,
    ignore_merges: bool,
):
    """A `tokenizers.Tokenizer` for a byte-level BPE with no added tokens and no normalizer.

    ``pattern`` is the split regex (None: GPT-2's own, via ``ByteLevel(use_regex=True)``); ``individual_digits``
    splits every digit first (SmolLM2). Merges may be given as bytes pairs or as byte-level strings.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    str_vocab = {bytes_to_bpe_string(tok): i for tok, i in vocab.items()}
    str_merges: list[tuple[str, str]] = [
        (a, b) if isinstance(a, str) and isinstance(b, str) else (_spell(a), _spell(b)) for a, b in merges
    ]
    tok = Tokenizer(models.BPE(vocab=str_vocab, merges=str_merges, ignore_merges=ignore_merges))
    steps: list[pre_tokenizers.PreTokenizer] = []
    if individual_digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if pattern is not None:
        steps.append(pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=pattern is None))
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    return tok


def tiktoken_bpe(ranks: Mapping[bytes, int], *, pattern: str):
    """A `tokenizers.Tokenizer` giving tiktoken's ids for these mergeable ranks and split regex."""
    return byte_level_bpe(ranks, merges_from_ranks(ranks), pattern=pattern, ignore_merges=True)


#: GGUF ``tokenizer.ggml.pre`` -> (split regex or None for GPT-2's, digits split one by one, ignore_merges).
GGUF_PRE_TOKENIZERS: dict[str, tuple[str | None, bool, bool]] = {
    "default": (None, False, False),
    "gpt-2": (None, False, False),
    "gpt2": (None, False, False),
    "smollm": (None, True, False),
    "llama3": (LLAMA3_PATTERN, False, True),
    "llama-bpe": (LLAMA3_PATTERN, False, True),
    "qwen2": (QWEN2_PATTERN, False, False),
}
