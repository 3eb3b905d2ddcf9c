"""Readers: a Hugging Face tokenizer or a GGUF file's tokenizer -> every id's bytes, the specials, the eos ids and
an encode function (built on first use)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .bpe import GGUF_PRE_TOKENIZERS, bpe_string_to_bytes, byte_level_bpe, piecewise_encoder
from .errors import VocabularyError

# An added token shaped like a control marker (<think>, <|im_end|>, </tool_call>) is never content, even when its
# tokenizer calls it non-special (Qwen's <think>): the model emits it as a unit, not as text.
_MARKER = re.compile(r"<[^\s<>]+>")
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# Special-token names that end a generation, for tokenizers that do not say which ids do.
_EOS_NAMES = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>", "</s>", "<|end|>",
              "<end_of_turn>", "<eos>", "<|return|>")
# GGUF token types (llama.cpp's llama_token_type).
_GGUF_NORMAL, _GGUF_UNKNOWN, _GGUF_CONTROL, _GGUF_USER_DEFINED, _GGUF_UNUSED, _GGUF_BYTE = 1, 2, 3, 4, 5, 6


def tokenizer_parts(tokenizer: Any, *, name: str | None, eos_token_ids: Iterable[int] | None,
                    size: int | None) -> dict[str, Any]:
    """Vocabulary's constructor arguments for a ``tokenizers.Tokenizer`` or a fast transformers tokenizer."""
    from tokenizers import Tokenizer

    hf_specials: set[int] = set()
    if not isinstance(tokenizer, Tokenizer):
        backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
        if not isinstance(backend, Tokenizer):
            raise VocabularyError(
                f"cannot read the vocabulary of a {type(tokenizer).__name__}: expected a tokenizers.Tokenizer "
                "or a fast transformers tokenizer; load it with AutoTokenizer.from_pretrained(..., use_fast=True)")
        if name is None:
            name = getattr(tokenizer, "name_or_path", None) or None
        if eos_token_ids is None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos_token_ids = [tokenizer.eos_token_id]
        hf_specials = {int(i) for i in getattr(tokenizer, "all_special_ids", ()) or ()}
        tokenizer = backend
    tok: Tokenizer = tokenizer
    kind = _kind(tok)
    vocab = tok.get_vocab(with_added_tokens=False)
    added = tok.get_added_tokens_decoder()
    n = max([*vocab.values(), *added.keys(), *hf_specials, -1]) + 1
    tokens: list[bytes | None] = [None] * n
    byte_fallback = bool(getattr(tok.model, "byte_fallback", False))
    for s, i in vocab.items():
        tokens[i] = _token_bytes(s, kind, byte_fallback)
        if tokens[i] is None:
            raise VocabularyError(f"token {i} ({s!r}) is not in the byte-level alphabet of this tokenizer")
    specials: dict[int, str] = {}
    for i, at in added.items():
        if at.special or _MARKER.fullmatch(at.content):
            specials[i] = at.content
        else:  # an added word (GPT-NeoX's runs of spaces): matched on raw text
            tokens[i] = at.content.encode()
    unk = getattr(tok.model, "unk_token", None)
    if unk is not None and unk in vocab:
        specials.setdefault(vocab[unk], unk)
    for i in hf_specials:
        specials.setdefault(i, tok.id_to_token(i) or f"<special_{i}>")
    if eos_token_ids is None:
        eos_token_ids = _eos_by_name(specials)
    return dict(tokens=tokens, name=name or f"tokenizer-{n}", special_tokens=specials, eos_token_ids=eos_token_ids,
                encoder=lambda: _tokenizer_encoder(tok, kind), size=size)


def gguf_parts(data: dict[str, Any], *, name: str | None, eos_token_ids: Iterable[int] | None,
               size: int | None) -> dict[str, Any]:
    """Vocabulary's constructor arguments for the ``tokenizer.ggml.*`` fields of a GGUF file."""
    model, toks, types = data["model"], data["tokens"], data["token_type"] or [_GGUF_NORMAL] * len(data["tokens"])
    if model not in ("gpt2", "llama"):
        raise VocabularyError(f"GGUF tokenizer model {model!r} is not supported; supported: 'gpt2' (byte-level "
                              "BPE) and 'llama' (SentencePiece); or pass the Hugging Face tokenizer to "
                              "Vocabulary.from_tokenizer")
    kind = "bytelevel" if model == "gpt2" else "sentencepiece"
    tokens: list[bytes | None] = []
    specials: dict[int, str] = {}
    for i, (s, t) in enumerate(zip(toks, types)):
        if t in (_GGUF_CONTROL, _GGUF_UNKNOWN) or (t == _GGUF_USER_DEFINED and _MARKER.fullmatch(s)):
            specials[i] = s
            tokens.append(None)
        elif t == _GGUF_UNUSED:
            tokens.append(None)
        elif t == _GGUF_USER_DEFINED:
            tokens.append(s.replace("▁", " ").encode() if kind == "sentencepiece" else s.encode())
        else:
            b = _token_bytes(s, kind, byte_fallback=t == _GGUF_BYTE)
            if b is None:
                raise VocabularyError(f"GGUF token {i} ({s!r}) is not in the byte-level alphabet")
            tokens.append(b)
    if eos_token_ids is None:
        eos_token_ids = [i for i in (data.get("eos"), data.get("eot"), data.get("eom")) if i is not None]
    encoder = None
    if model == "gpt2" and data["pre"] in GGUF_PRE_TOKENIZERS and data["merges"] is not None:
        merges = [tuple(m.split(" ", 1)) for m in data["merges"]]
        vocab = {t: i for i, t in enumerate(tokens) if t is not None and i not in specials}
        pattern, digits, ignore = GGUF_PRE_TOKENIZERS[data["pre"]]

        def encoder() -> Callable[[str], list[int]]:
            tok = byte_level_bpe(vocab, merges, pattern=pattern, individual_digits=digits, ignore_merges=ignore)
            return plain_encoder(tok)
    return dict(tokens=tokens, name=name or data.get("name") or "gguf", special_tokens=specials,
                eos_token_ids=eos_token_ids, encoder=encoder, size=size)


def _tree(obj: Any) -> Any:
    """The JSON of a tokenizers component (normalizer, pre-tokenizer, decoder), or None."""
    if obj is None:
        return None
    return json.loads(obj.__getstate__())


def _has(node: Any, pred: Callable[[dict], bool]) -> bool:
    if isinstance(node, dict):
        return pred(node) or any(_has(v, pred) for v in node.values())
    if isinstance(node, list):
        return any(_has(v, pred) for v in node)
    return False


def _kind(tok: Any) -> str:
    """'bytelevel' or 'sentencepiece', from the tokenizer's pipeline; anything else is refused."""
    from tokenizers import models

    parts = [_tree(tok.normalizer), _tree(tok.pre_tokenizer), _tree(tok.decoder)]
    if not isinstance(tok.model, models.BPE | models.Unigram):
        raise VocabularyError(f"tokenizer model {type(tok.model).__name__} is not supported: expected a byte-level "
                              "BPE (GPT-2, Llama 3, Qwen) or a SentencePiece-style BPE/Unigram")
    if _has(parts, lambda d: d.get("type") == "ByteLevel"):
        return "bytelevel"
    def sentencepiece(d: dict) -> bool:
        return d.get("type") in ("Metaspace", "ByteFallback") or "▁" in str(d.get("content", ""))

    if getattr(tok.model, "byte_fallback", False) or _has(parts, sentencepiece):
        return "sentencepiece"
    raise VocabularyError("tokenizer is neither byte-level BPE nor SentencePiece-style (no ByteLevel, Metaspace or "
                          "byte-fallback step), so its tokens' bytes are unknown")


def _token_bytes(s: str, kind: str, byte_fallback: bool) -> bytes | None:
    if kind == "bytelevel":
        return bpe_string_to_bytes(s)
    if byte_fallback:
        m = _BYTE_FALLBACK.fullmatch(s)
        if m:
            return bytes([int(m.group(1), 16)])
    return s.replace("▁", " ").encode()


def _eos_by_name(specials: Mapping[int, str]) -> list[int]:
    by_name = {s: i for i, s in specials.items()}
    return [by_name[s] for s in _EOS_NAMES if s in by_name]


def plain_encoder(tok: Any) -> Callable[[str], list[int]]:
    """``tok``'s encode without special tokens: split into pre-tokens here where that gives the same ids faster
    (:func:`~.bpe.piecewise_encoder`)."""
    return piecewise_encoder(tok) or (lambda text: tok.encode(text, add_special_tokens=False).ids)


_UNICODE_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD"}


def _tokenizer_encoder(tok: Any, kind: str) -> Callable[[str], list[int]]:
    """An encode function over a private copy of ``tok``: no added tokens, no post-processor, no Unicode
    normalization (byte-exact); SentencePiece's prepended ``▁`` is cut off so text mid-output encodes as such."""
    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    spec["added_tokens"] = []
    spec["post_processor"] = None
    spec["truncation"] = spec["padding"] = None
    norm = spec.get("normalizer")
    if norm is not None and norm.get("type") in _UNICODE_NORMALIZERS:
        spec["normalizer"] = None
    elif norm is not None and norm.get("type") == "Sequence":
        norm["normalizers"] = [n for n in norm["normalizers"] if n.get("type") not in _UNICODE_NORMALIZERS]
    copy = Tokenizer.from_str(json.dumps(spec))
    probe = copy.encode("a", add_special_tokens=False).tokens
    if kind == "sentencepiece" and probe and probe[0].startswith("▁"):  # a ▁ is prepended to the text
        return _sp_encoder(copy)
    return plain_encoder(copy)


def _sp_encoder(tok: Any) -> Callable[[str], list[int]]:
    """Encode after a newline, then drop the newline's tokens: SentencePiece prepends ``▁`` only at the start."""
    lead = tok.encode("\n", add_special_tokens=False).ids

    def encode(text: str) -> list[int]:
        ids = tok.encode("\n" + text, add_special_tokens=False).ids
        if ids[: len(lead)] != lead:
            raise VocabularyError(f"cannot encode {text[:60]!r} apart from the newline it was encoded after")
        return ids[len(lead):]

    return encode


def read_gguf_tokenizer(path: str) -> dict[str, Any]:
    """The ``tokenizer.ggml.*`` fields of a GGUF file."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as e:
        raise VocabularyError(f"cannot read GGUF file {path!r}: {e}") from e

    def get(key: str) -> Any:
        field = reader.fields.get(key)
        return None if field is None else field.contents()

    if get("tokenizer.ggml.tokens") is None:
        raise VocabularyError(f"GGUF file {path!r} has no tokenizer.ggml.tokens")
    return {
        "model": get("tokenizer.ggml.model"), "pre": get("tokenizer.ggml.pre") or "default",
        "tokens": get("tokenizer.ggml.tokens"), "token_type": get("tokenizer.ggml.token_type"),
        "merges": get("tokenizer.ggml.merges"), "eos": get("tokenizer.ggml.eos_token_id"),
        "eot": get("tokenizer.ggml.eot_token_id"), "eom": get("tokenizer.ggml.eom_token_id"),
        "name": get("general.name"),
    }
