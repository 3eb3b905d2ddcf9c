"""XGrammar (0.2.x) as the baseline, behind the same per-request interface as our decoder.

:class:`XGrammarMatcher` compiles a JSON Schema with XGrammar for one of our :class:`~factorspec_cp.tokenmap.Vocabulary`
objects and offers ``consume`` / ``fill_mask`` / ``rollback`` / ``is_terminated`` like
:class:`~factorspec_cp.tokenmap.decoder.Decoder`; mask rows use the same layout (int32, ``ceil(size / 32)`` words,
bit ``t % 32`` of word ``t // 32``), which is XGrammar's own, so XGrammar fills our row in place.

Install (xgrammar's wheel requires triton, 1 GB, which the CPU path never imports)::

    pip install -e '.[test]'                    # brings torch==2.13.0 (CPU), transformers, apache-tvm-ffi, pydantic
    pip install --no-deps xgrammar==0.2.9

``import xgrammar`` needs torch (``matcher.py``), transformers (``tokenizer_info.py``), apache-tvm-ffi (the native
binding), pydantic and typing-extensions; sentencepiece and tiktoken are optional there, triton is never imported on
CPU. This module imports xgrammar lazily, so ``factorspec_cp.baselines`` imports without it.

How the vocabulary is given to XGrammar (:func:`tokenizer_info`): ``TokenizerInfo(raw bytes per id,
VocabType.RAW, vocab_size=vocab.size, stop_token_ids=vocab.eos_token_ids)``; our None ids (special / unused) are
passed as ``b""``, which XGrammar classes as special tokens: never admitted, ``accept_token`` refuses them. The EOS
ids are stop tokens, admitted exactly when the record is complete. Built once per vocabulary object (Qwen3's 151,669
ids: about 0.1 s).

How a schema is compiled: ``compile_json_schema(schema, any_whitespace=False, indent=indent,
separators=(", ", ": ") if indent is None else (",", ": "), strict_mode=True)``, i.e. the whitespace of
``json.dumps(record, ensure_ascii=False, separators=(", ", ": "))`` (compact) or
``json.dumps(record, ensure_ascii=False, indent=N)``; properties in schema order (``any_order=False``); strict mode
forbids properties and array items the schema does not name, unless ``additionalProperties`` / ``items`` allow them.

Where XGrammar's language differs from the canonical ``json.dumps`` rendering (checked on xgrammar 0.2.9; these
decide which schemas an "our exact mask == XGrammar's mask" comparison may use):

1. Unbounded free strings (``{"type": "string"}`` without minLength/maxLength/pattern/format) admit every JSON
   escape: ``\\/``, ``\\uXXXX`` for any code point (upper- or lower-case hex, lone surrogates such as ``\\ud83d``
   included) and escapes of characters json.dumps writes raw (``\\u00e9`` for ``é``). json.dumps with
   ``ensure_ascii=False`` writes only ``\\" \\\\ \\n \\r \\t \\b \\f`` and lower-case ``\\u00XX`` for the other
   control characters. Raw control characters (U+0000..U+001F) are refused, as in JSON. XGrammar's mask is a
   superset there.
2. Length-bounded free strings (minLength and/or maxLength) use the character class ``[^"\\\\\\r\\n]``: *no escape
   at all* (a value containing ``"``, ``\\`` or a newline cannot be written) while raw control characters other
   than CR/LF (TAB, U+0000, U+001F, ...) *are* admitted, which is not JSON. Lengths count code points, like Python's
   ``len`` and JSON Schema.
3. ``pattern`` and ``format`` strings (a regex with ``json_string=true``) admit no escape either, so a pattern that
   needs ``"`` or ``\\`` cannot be met; ``.`` excludes control characters. Formats are approximate (``date`` admits
   ``2024-02-31``).
4. Both kinds of string admit UTF-8 byte sequences that encode surrogates (``ED A0 80``), which are not valid UTF-8;
   lone continuation bytes are refused. Tokens ending inside a multi-byte character are admitted (byte-level).
5. ``number`` without bounds: ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``: admits ``-0``, ``1.50``,
   ``1e5``, ``1E+05``; json.dumps writes ``1.5``, ``1e+16``, ``1.5e-07`` and an integral float as ``1.0``. With
   minimum/maximum: no exponent, at most 6 fraction digits, trailing zeros admitted (``1.50``, ``10.0``), an
   integral value both as ``1`` and ``1.0``. Never compare masks on ``number`` fields.
6. ``integer``: ``0|-?[1-9][0-9]*`` (no ``-0``, no ``1.0``, no exponent), ranges exact: this matches json.dumps of
   ints. Integer-valued bounds are fine.
7. ``enum`` / ``const`` values are serialized by XGrammar's C++ JSON writer: strings like json.dumps with
   ``ensure_ascii=False`` (``"\\u0001"``, raw ``é``, ``/`` unescaped); floats: an integral float as an integer
   (``1.0`` -> ``1``, ``-0.0`` -> ``-0``), others as ``2.5`` / ``1e+20``; arrays and objects *compactly*
   (``{"a":[1,2]}``), ignoring the configured separators. Use scalar string / int / bool / null enums only.
8. Optional properties: any subset, in schema order (``{}`` when none is required); ``additionalProperties: true``
   admits extra keys after the named ones. Keep every property required (and no additionalProperties) to compare.
9. Unchecked keywords: ``uniqueItems``, ``minProperties`` / ``maxProperties`` and similar are not enforced.
10. After the stop token XGrammar refuses to fill a mask; :meth:`XGrammarMatcher.fill_mask` then writes an all-zero
    row, as our decoder does.

Array ``minItems`` / ``maxItems``, booleans, null, nested objects, ``indent=N`` (``",\\n" + N*depth`` spaces,
``": "``, ``[]`` / ``{}`` when empty) and the compact separators match json.dumps exactly.

>>> from factorspec_cp.tokenmap import Vocabulary
>>> vocab = Vocabulary.smollm2()
>>> m = XGrammarMatcher({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}, vocab)
>>> for t in vocab.encode('{"ok": true}'):
...     m.consume(t)
>>> [vocab.token_bytes(int(t)) for t in m.allowed_tokens()], m.is_complete()
([None], True)
>>> m.consume(vocab.eos_token_ids[0]); m.is_terminated()
True
"""

from __future__ import annotations

import json
import os
import time
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    import xgrammar

    from ..tokenmap.vocab import Vocabulary

__all__ = ["XGrammarMatcher", "XGrammarRejected", "compiler", "tokenizer_info", "tokenizer_info_seconds",
           "xgrammar_version"]

XGRAMMAR_VERSION = "0.2.9"  # the version this module was written and checked against (0.2.x API)


class XGrammarRejected(ValueError):
    """A token XGrammar does not admit at this position (or any token after termination)."""


def _xgr() -> Any:
    import xgrammar  # lazy: pulls torch and transformers (about 2 s)

    return xgrammar


def xgrammar_version() -> str:
    """The installed xgrammar's version (from its package metadata)."""
    from importlib.metadata import version

    return version("xgrammar")


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# per vocabulary object: (weak reference, TokenizerInfo, GrammarCompiler, seconds to build the TokenizerInfo)
_VOCABS: dict[int, tuple[weakref.ref, Any, Any, float]] = {}


def _entry(vocab: Vocabulary) -> tuple[weakref.ref, Any, Any, float]:
    e = _VOCABS.get(id(vocab))
    if e is not None and e[0]() is vocab:
        return e
    if not vocab.eos_token_ids:
        raise ValueError(f"vocabulary {vocab.name!r} has no end-of-sequence id: XGrammar needs a stop token")
    xgr = _xgr()
    t = time.perf_counter()
    encoded = [b"" if tok is None else tok for tok in vocab.tokens]
    info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.size,
                             stop_token_ids=list(vocab.eos_token_ids), add_prefix_space=False)
    seconds = time.perf_counter() - t
    comp = xgr.GrammarCompiler(info, max_threads=_threads(), cache_enabled=True)
    key = id(vocab)
    e = (weakref.ref(vocab, lambda _r, key=key: _VOCABS.pop(key, None)), info, comp, seconds)
    _VOCABS[key] = e
    return e


def tokenizer_info(vocab: Vocabulary) -> xgrammar.TokenizerInfo:
    """XGrammar's ``TokenizerInfo`` for ``vocab``: raw bytes per id, None ids as ``b""`` (special, never admitted),
    ``vocab_size=vocab.size``, the EOS ids as stop tokens. Cached per vocabulary object."""
    return _entry(vocab)[1]


def tokenizer_info_seconds(vocab: Vocabulary) -> float:
    """Seconds the (cached) ``TokenizerInfo`` of ``vocab`` took to build."""
    return _entry(vocab)[3]


def compiler(vocab: Vocabulary) -> xgrammar.GrammarCompiler:
    """The ``GrammarCompiler`` of ``vocab`` (one per vocabulary object; ``min(8, cpu_count)`` threads)."""
    return _entry(vocab)[2]


def _words(size: int) -> int:
    return (size + 31) // 32


class XGrammarMatcher:
    """One request's XGrammar matcher, with our decoder's interface.

    ``compile_seconds`` is what compiling this (schema, indent, vocabulary) took when it was compiled;
    ``compile_cached`` says whether this matcher reused that compilation (the class-level cache, keyed by the
    schema's JSON text *in its own key order* (property order decides the rendering), ``indent`` and the vocabulary
    object).
    """

    _compiled: ClassVar[dict[tuple[str, int | None, int], tuple[weakref.ref, Any, float]]] = {}

    def __init__(self, schema: dict[str, Any], vocab: Vocabulary, *, indent: int | None = None):
        if indent is not None and (isinstance(indent, bool) or not isinstance(indent, int) or indent < 0):
            raise ValueError(f"indent must be None (compact) or an int >= 0, not {indent!r}")
        self.schema = schema
        self.vocab = vocab
        self.indent = indent
        self.words = _words(vocab.size)
        self.compiled, self.compile_seconds, self.compile_cached = self._compile(schema, vocab, indent)
        self._matcher = _xgr().GrammarMatcher(self.compiled)
        self._tokens: list[int] = []
        self._terminated = False
        self._eos = frozenset(vocab.eos_token_ids)
        self.mask_seconds = 0.0
        self.masks = 0

    # -- compilation --------------------------------------------------------------------------------------------
    @classmethod
    def _compile(cls, schema: dict[str, Any], vocab: Vocabulary, indent: int | None) -> tuple[Any, float, bool]:
        key = (json.dumps(schema, ensure_ascii=False), indent, id(vocab))
        hit = cls._compiled.get(key)
        if hit is not None and hit[0]() is vocab:
            return hit[1], hit[2], True
        comp = compiler(vocab)
        separators = (", ", ": ") if indent is None else (",", ": ")
        t = time.perf_counter()
        compiled = comp.compile_json_schema(schema, any_whitespace=False, indent=indent, separators=separators,
                                            strict_mode=True)
        seconds = time.perf_counter() - t
        cls._compiled[key] = (weakref.ref(vocab), compiled, seconds)
        return compiled, seconds, False

    @classmethod
    def clear_cache(cls) -> None:
        """Forget every compiled grammar (ours and the vocabularies' XGrammar compiler caches), so the next matcher
        measures a cold compile."""
        cls._compiled.clear()
        for e in list(_VOCABS.values()):
            e[2].clear_cache()

    # -- masks --------------------------------------------------------------------------------------------------
    def fill_mask(self, row: np.ndarray) -> None:
        """Write the admitted token ids into ``row``: int32, ``ceil(vocab.size / 32)`` words, bit ``t % 32`` of
        word ``t // 32``. After termination nothing is admitted (an all-zero row)."""
        t = time.perf_counter()
        if row.shape != (self.words,) or row.dtype != np.int32 or not row.flags.c_contiguous:
            raise ValueError(f"a mask row is a contiguous int32 array of shape ({self.words},), "
                             f"not {row.dtype} {row.shape}")
        if self._terminated:
            row[:] = 0
        else:
            self._matcher.fill_next_token_bitmask(row)
        self.masks += 1
        self.mask_seconds += time.perf_counter() - t

    def allowed_tokens(self) -> np.ndarray:
        """The admitted ids as a sorted array (what :meth:`fill_mask` writes)."""
        row = np.zeros(self.words, dtype=np.int32)
        self.fill_mask(row)
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: self.vocab.size]
        return np.flatnonzero(bits)

    # -- consuming ----------------------------------------------------------------------------------------------
    def consume(self, token_id: int) -> None:
        """Append ``token_id``; raises :class:`XGrammarRejected` (a ValueError; nothing changes) when not admitted."""
        token_id = int(token_id)
        if self._terminated:
            raise XGrammarRejected("the record is already terminated")
        if not 0 <= token_id < self.vocab.size:
            raise XGrammarRejected(f"token id {token_id} is outside the vocabulary (size {self.vocab.size})")
        if self.vocab.tokens[token_id] is None and token_id not in self._eos:
            raise XGrammarRejected(f"token {token_id} is a special token, not record content")
        if not self._matcher.accept_token(token_id):
            what = "end of sequence" if token_id in self._eos else repr(self.vocab.tokens[token_id])
            raise XGrammarRejected(f"XGrammar rejects token {token_id} ({what}) after {len(self._tokens)} tokens")
        self._tokens.append(token_id)
        self._terminated = self._matcher.is_terminated()

    def rollback(self, k: int = 1) -> None:
        """Undo the last ``k`` tokens (any depth within the request; XGrammar keeps the whole history)."""
        if k < 0 or k > len(self._tokens):
            raise ValueError(f"cannot roll back {k} tokens: {len(self._tokens)} consumed")
        if k:
            self._matcher.rollback(k)
            del self._tokens[len(self._tokens) - k:]
            self._terminated = self._matcher.is_terminated()

    def reset(self) -> None:
        """Back to the start of the record."""
        self._matcher.reset()
        self._tokens.clear()
        self._terminated = False

    # -- state --------------------------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """The tokens consumed, in order."""
        return list(self._tokens)

    def output(self) -> bytes:
        """The record bytes written so far (EOS excluded)."""
        return self.vocab.decode(self._tokens)

    def is_terminated(self) -> bool:
        """Whether EOS was consumed (the record is complete)."""
        return self._terminated

    def is_complete(self) -> bool:
        """Whether the output so far is a whole record (EOS would be admitted)."""
        return self._terminated or self._matcher.is_completed()
