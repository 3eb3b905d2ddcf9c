"""The decoder: exact token masks and certain runs for one record (DESIGN.md, Tokens).

A :class:`Decoder` joins a declaration's canonical :class:`~.layout.Layout`, an incremental solver
:class:`~factorspec_cp.session.Session` and a :class:`~.vocab.Vocabulary`. At every position it says which token
ids keep the output on a valid record (``fill_mask``: a packed int32 row in XGrammar's layout) and which run of
tokens the declaration makes certain (``certain_run``); ``consume`` drives the session as field values complete,
and ``rollback`` undoes any number of tokens.

How a mask is computed: the vocabulary's content tokens are sorted by their bytes, so the tokens that start with a
given prefix form one range. A walk from the current state descends that implicit trie one byte at a time, only
along bytes the layout admits (field slots filtered by the session's admissible values), and admits every token
whose bytes it reaches. A token that completes a field value and runs on into the next slot is checked against
that slot's admissible set *given* the value (a nested solver query). Inside a free string the walk would visit
most of the vocabulary, so there the mask is a lookup in token tables per automaton state (:mod:`.strings`, built
once per automaton and vocabulary, kept on disk); tokens that close the string are grouped by what follows the
closing quote and checked once per group. Before or inside one finite field slot that every record goes through
(a calendar's ``"start": "``), the mask is a union of per-value token lists instead (:class:`ChoiceTable`: the
tokens inside each value's bytes and the fixed bytes every record with it writes next; tokens running further are
checked under the solver), built from the layout alone and shared by every declaration with the same schema text.
Exact masks are cached per (layout state, solver assignment), shared by every decoder of the same declaration,
vocabulary and style.

>>> import factorspec_cp as fs
>>> from factorspec_cp.tokenmap import Vocabulary
>>> spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {
...     "a": {"type": "integer", "minimum": 1, "maximum": 3},
...     "b": {"type": "integer", "minimum": 1, "maximum": 3}}},
...     [fs.Linear([[1, "/a"], [1, "/b"]], "==", 4)])
>>> vocab = Vocabulary.smollm2()
>>> dec = spec.decoder(vocab)
>>> [vocab.token_bytes(t) for t in dec.certain_run(8)]
[b'{"', b'a', b'":']
>>> for t in dec.certain_run(8):
...     dec.consume(t)
>>> [vocab.token_bytes(t) for t in dec.allowed_tokens()]  # a space: SmolLM2 spells digits alone
[b' ']
>>> dec.consume(vocab.encode(" ")[0])
>>> sorted(vocab.token_bytes(t) for t in dec.allowed_tokens())
[b'1', b'2', b'3']
>>> dec.consume(vocab.encode("3")[0])
>>> [vocab.token_bytes(t) for t in dec.certain_run(8)]
[b',', b' "', b'b', b'":', b' ', b'1', b'}', None]
>>> for t in dec.certain_run(8):
...     dec.consume(t)
>>> dec.is_terminated(), dec.record()
(True, {'a': 3, 'b': 1})
"""

from __future__ import annotations

import gc
import json
import threading
from bisect import bisect_left
from collections import OrderedDict, deque
from dataclasses import dataclass
from dataclasses import field as dc_field
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from mypy_extensions import mypyc_attr

from .errors import VocabularyError
from .freeslot import StringSlot
from .layout import (
    FIELD,
    JMP,
    LIT,
    EnumSlot,
    Layout,
    State,
    _rows,
    admissible_branches,
    admissible_common,
    admissible_counts,
    admissible_ends,
    field_index,
    prefix_spans,
    same_domain,
    span_has,
    value_key,
)
from .strings import Closing, StringMasks
from .stringtables import vocabulary_key
from .vocab import Vocabulary

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..session import Session
    from ..spec import Spec

__all__ = ["Decoder", "TokenRejected", "TokenIndex", "mask_words", "mask_to_ids"]

MODES = ("canonical", "exact")


class TokenRejected(ValueError):
    """A token that no valid record continues with at this position (or, in canonical mode, not the certain
    token)."""


def mask_words(size: int) -> int:
    """The int32 words of a mask row over ``size`` token ids: ``ceil(size / 32)``."""
    return (size + 31) // 32


def mask_to_ids(row: np.ndarray, size: int | None = None) -> np.ndarray:
    """The token ids a packed mask row admits (bit ``t % 32`` of word ``t // 32``)."""
    bits = np.unpackbits(np.ascontiguousarray(row, dtype="<i4").view(np.uint8), bitorder="little")
    if size is not None:
        bits = bits[:size]
    return np.flatnonzero(bits)


_INT32: Final = np.dtype(np.int32)  # a mask row's words


def _pack(ids: np.ndarray, size: int) -> np.ndarray:
    bits = np.zeros(mask_words(size) * 32, dtype=bool)
    bits[ids] = True
    return np.packbits(bits, bitorder="little").view("<i4")


# --------------------------------------------------------------------------------------------------------- tokens
_LayoutTables = tuple["OrderedDict[State, Any]", "OrderedDict[State, Any]", set[str]]


#: the first two bytes of a token as one key, in byte order: ``257 * b0 + b1 + 1``, and ``257 * b0`` for a one-byte
#: token (which sorts before every longer token starting with its byte)
_PAIRS: Final = 257 * 256


def _pair(t: bytes) -> int:
    return 257 * t[0] + (t[1] + 1 if len(t) > 1 else 0)


class TokenIndex:
    """A vocabulary's content tokens sorted by bytes: the tokens sharing a prefix are one range ``[lo, hi)``.

    ``ids[k]`` is the id of the ``k``-th token in byte order; ``lengths[k]`` its length in bytes.
    """

    def __init__(self, vocab: Vocabulary):
        pairs = sorted((t, i) for i, t in enumerate(vocab.tokens) if t)
        self.toks: list[bytes] = [t for t, _ in pairs]
        self.ids = np.array([i for _, i in pairs], dtype=np.int64)
        self.size = vocab.size
        self.lengths = np.array([len(t) for t in self.toks], dtype=np.int32)
        self.longest = [0] * 256  # the longest token starting with each byte
        for t in self.toks:
            if len(t) > self.longest[t[0]]:
                self.longest[t[0]] = len(t)
        # where the tokens of each first two bytes start (:meth:`span`'s bisections begin inside that range, not over
        # the whole vocabulary): ``_starts[_pair(t)]``, the first token whose pair sorts at or after ``t``'s
        starts = [0] * (_PAIRS + 1)
        j = 0
        for i, t in enumerate(self.toks):
            key = _pair(t)
            while j <= key:
                starts[j] = i
                j += 1
        for k in range(j, _PAIRS + 1):
            starts[k] = len(self.toks)
        self._starts = starts
        self._next: dict[tuple[int, int, int], frozenset[int]] = {}
        self._fs_tables_key: str | None = None  # (stringtables.vocabulary_key)
        self._crosses: dict[bytes, bool] = {}  # crosses' answers (a run's last bytes recur: `", "end":`, `":`)
        self.ends: dict[tuple[bytes, int, int], bool] = {}  # (Decoder._ends_pretoken)
        # a planner's texts: their ids and whether a pre-token ends where they do before given next bytes (the same
        # texts recur in every record, `PM", "end": "`: here a look-up from compiled code, not a call into Python)
        self.encoded: dict[str, tuple[int, ...]] = {}
        self.ends_before: dict[tuple[str, frozenset[int]], bool] = {}
        # the vocabulary's encoder of texts whose pre-tokens it has kept (Vocabulary.known_pieces), once asked
        self.known: Any = _NONE
        # the ids of the content tokens spelling each byte string
        by_bytes: dict[bytes, tuple[int, ...]] = {t: (i,) for t, i in reversed(pairs)}
        for k in range(1, len(pairs)):  # a spelling of several ids (rare): sorted by (bytes, id), they are neighbours
            if pairs[k][0] == pairs[k - 1][0]:
                by_bytes[pairs[k][0]] += (pairs[k][1],)
        self.by_bytes = by_bytes
        self._layouts: OrderedDict[Any, _LayoutTables] = OrderedDict()
        self.wide: OrderedDict[Any, WideTable] = OrderedDict()  # per (wide matcher, bytes before, bytes typed)
        self.wide_done: dict[int, Any] = {}  # the matchers whose tables Decoder.prime built ahead (kept alive here)
        self.lock = threading.Lock()

    def layout_tables(self, layout_key: Any) -> _LayoutTables:
        """What one layout (a schema's text and style) keeps over this vocabulary, per state, shared by every
        declaration with that layout: its choice tables (:class:`ChoiceTable` or ``None``), its free-string
        openings (see ``Decoder._opening``), which depend on the layout and the tokens, not on relations, and the
        set-up work done for it once (``"choices"``: :meth:`Decoder.prime` built its choice tables ahead)."""
        with self.lock:
            tables = self._layouts.get(layout_key)
            if tables is None:
                tables = self._layouts[layout_key] = (OrderedDict(), OrderedDict(), set())
                if len(self._layouts) > 256:
                    self._layouts.popitem(last=False)
            else:
                self._layouts.move_to_end(layout_key)
            return tables

    @classmethod
    def of(cls, vocab: Vocabulary) -> TokenIndex:
        """The index of ``vocab``, built once per vocabulary object."""
        idx = getattr(vocab, "_token_index", None)
        if idx is None:
            idx = cls(vocab)
            vocab._token_index = idx  # type: ignore[attr-defined]
        return idx

    def span(self, prefix: bytes, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
        """The range of tokens starting with ``prefix`` (within ``[lo, hi)``)."""
        if hi is None:
            if prefix and not lo:  # the range of its first two bytes (or first byte) holds both ends: bisect there
                key = _pair(prefix)
                lo, hi = self._starts[key], self._starts[key + 1 if len(prefix) > 1 else key + 257]
            else:
                hi = len(self.toks)
        a = bisect_left(self.toks, prefix, lo, hi)
        n = len(prefix)
        # the tokens starting with prefix are those >= prefix and < prefix with its last byte incremented
        k = n
        while k > 0 and prefix[k - 1] == 0xFF:
            k -= 1
        b = hi if k == 0 else bisect_left(self.toks, prefix[:k - 1] + bytes((prefix[k - 1] + 1,)), a, hi)
        return a, b

    def next_bytes(self, lo: int, hi: int, d: int) -> frozenset[int]:
        """The bytes at offset ``d`` of the tokens in ``[lo, hi)`` (tokens sharing their first ``d`` bytes), kept
        per node: a mask walk asks the layout only about bytes some token continues with."""
        key = (lo, hi, d)
        hit = self._next.get(key)
        if hit is None:
            toks, out = self.toks, set()
            i = lo
            while i < hi and len(toks[i]) <= d:
                i += 1
            while i < hi:
                b = toks[i][d]
                out.add(b)
                i = self.span(toks[i][:d + 1], i, hi)[1]
            if len(self._next) > 1 << 18:
                self._next.clear()
            hit = self._next[key] = frozenset(out)
        return hit

    def crosses(self, text: bytes) -> bool:
        """Whether some token is longer than ``text`` and starts with it (could merge with what follows)."""
        if text and len(text) >= self.longest[text[0]]:  # no token starting with its first byte is longer
            return False
        hit = self._crosses.get(text)
        if hit is None:
            a, b = self.span(text)
            hit = b - a > (1 if a < b and self.toks[a] == text else 0)
            if len(self._crosses) > 1 << 16:
                self._crosses.clear()
            self._crosses[text] = hit
        return hit


# ------------------------------------------------------------------------------------------------- choice tables
#: the most candidate values a choice table holds (above it, the walk of the token index)
CHOICE_MAX = 256
DENSE_CHOICE_WORDS = 1 << 14  # a choice table's matrix of candidates x mask words, at most (64 KB)
#: a choice table's row of at most this many token ids is kept as the ids (:class:`_IdsRow`), written where asked
SPARSE_IDS = 64
#: the choice tables a layout keeps over one vocabulary (the least recently used go first)
CHOICE_TABLES = 4096
#: what :meth:`Decoder.prime` spends at most, once per layout, building choice tables ahead (seconds, states)
PRIME_CHOICES_SECONDS = 0.05
PRIME_CHOICES_STATES = 2048
#: what :meth:`Decoder.prime` spends at most on the choice rows of the root's admissible sets (seconds)
PRIME_ROWS_SECONDS = 0.005
#: a newly planned certain run also computes the mask row where it ends (:meth:`Decoder._row_after`)
ROW_AHEAD: Final = True
#: with the row where a certain run ends, the row after the first token of the fixed bytes that follow (held back
#: where a longer token could run past them: the `` "`` before a value): the first choice inside the value (not
#: before a settled wide field's value, a clock time's, whose rows inside come from its WideTable in one call)
ROW_AFTER_FORCED: Final = True
#: how many of those fixed bytes :meth:`Decoder._forced_token` collects to find their first token
FORCED_AHEAD_BYTES = 16
#: masks in a settled wide field slot come from its :class:`WideTable` (else: the walk of the token index)
WIDE_TABLES: Final = True
#: :meth:`Decoder.prime` builds wide tables ahead, once per wide matcher and vocabulary, for domains of at most this
#: many values (a day of minutes: 900; BFCL's 11,323 dates are left to first use)
PRIME_WIDE_VALUES = 2048
#: :meth:`Decoder.prime` ends with a collection of the garbage collector's young generations (``gc.collect(1)``): the
#: objects the set-up made (the session's states, tables, the first run's frames) are walked by it once there, off
#: the step loop, not by the generation-1 collections inside the decode steps (0.8-1.0 ms each on meeting; this
#: collection 0.3 ms p50, and the walk 0.5-1.4 us per token cheaper, measured in stop 39's notes); the oldest
#: generation is left alone (a full collection took about 70 ms per set-up on the masks bench's heap)
PRIME_COLLECT = True
#: :meth:`Decoder.prime` encodes, once per compiled declaration, the string values of the fields with at most this
#: many values (a meeting's people and places: their pre-tokens are in the planner's text, new to the tokenizer's memo
#: the first time; BFCL's 11,323 dates, and any field above it, are left alone)
PRIME_TEXT_VALUES = 256
#: the largest domain whose masks come from :class:`WideTable` s (built ahead by prime: a day of minutes, 900; above,
#: BFCL's dates with thousands of prefixes, the walk of the token index)
WIDE_TABLE_VALUES: Final = 2048


@mypyc_attr(native_class=False)  # (compiled: a Python class, see setup.py)
@dataclass(frozen=True)
class ChoiceTable:
    """The tokens admitted at a state before or inside one finite field slot, per candidate value: where every
    record writes fixed bytes and then the slot's value, a token is admitted exactly when an admissible value's
    bytes (those fixed bytes, the rest of its rendering, and what every record with that value writes next) start
    with it, or when it runs further and a check of its bytes under the solver says so. Built once per (layout,
    state, vocabulary) from the layout alone; a mask there is the union of the admissible values' ids.

    ``ids[k]`` are the token ids admitted whenever candidate ``k`` is admissible; ``checks`` holds ``(k, id, bytes)``
    for the tokens that run past what every record with candidate ``k`` writes next (into another choice);
    ``may_finish``: whether the record may end at the state at all; ``index_of`` pairs each candidate's index in the
    field's domain with ``k`` (a session's admissible mask selects candidates with it). ``rows`` keeps the union
    per selection (the bytes of the selected ``k``: packed words, or the ids where they are few, :meth:`row`) and
    ``by_mask`` the row per admissible mask, shared by every declaration with the layout."""

    pointer: str
    ids: tuple[np.ndarray, ...]
    checks: tuple[tuple[int, int, bytes], ...]
    may_finish: bool
    index_of: tuple[tuple[int, int], ...]
    size: int
    rows: OrderedDict[bytes, Any] = dc_field(default_factory=OrderedDict, compare=False, repr=False)
    by_mask: OrderedDict[bytes, Any] = dc_field(default_factory=OrderedDict, compare=False, repr=False)
    # every candidate's ids as mask words and bits, flat, with the candidate each belongs to: a row is one
    # selection of these and one scatter, not a concatenation and a conversion per candidate (5 us, not 20-30)
    flat: tuple[np.ndarray, np.ndarray, np.ndarray] = dc_field(init=False, compare=False, repr=False)

    # the same bits as one small matrix (a row per candidate, a column per mask word any candidate touches), where
    # it stays small: a row is then an OR down the selected rows and one scatter (a choice inside a clock time: 2-17
    # candidates over 50-300 words)
    dense: tuple[np.ndarray, np.ndarray] | None = dc_field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, dtype=np.int64)
        owner = np.repeat(np.arange(len(self.ids), dtype=np.intp), [len(i) for i in self.ids])
        words, bits = _word_bits(ids)
        object.__setattr__(self, "flat", (words, bits, owner))
        cols = np.unique(words)
        dense = None
        if len(self.ids) * len(cols) <= DENSE_CHOICE_WORDS:
            matrix = np.zeros((len(self.ids), len(cols)), dtype=np.uint32)
            np.bitwise_or.at(matrix, (owner, np.searchsorted(cols, words)), bits)
            dense = (cols, matrix)
        object.__setattr__(self, "dense", dense)

    def row_for(self, mask: bytes, lock: threading.Lock) -> Any:
        """The packed row for a session's admissible mask over the field (kept per mask: one dictionary lookup
        where the same admissible set was seen before, by any declaration with the layout)."""
        hit = self.by_mask.get(mask)
        if hit is None:
            hit = self.row(self.select(mask), lock)
            with lock:
                _remember(self.by_mask, mask, hit, 256)
        return hit

    def select(self, mask: bytes) -> bytes:
        """The candidates a session's admissible mask (:meth:`Session.admissible_mask`) keeps, as their ``k``."""
        return bytes([k for i, k in self.index_of if mask[i]])

    def row(self, selected: bytes | None, lock: threading.Lock) -> Any:
        """The packed union of the selected candidates' ids (``None``: every candidate), built once per selection
        from their mask words (no pass over the vocabulary). Shared: callers never write into it. Where the union
        is at most :data:`SPARSE_IDS` ids (and the C pass is built), the ids themselves, an :class:`_IdsRow` that
        :func:`dense_row` writes out: a row of a few tokens kept as 6-19 KB of words costs its copy's cache misses
        where a record reaches it, kept since another declaration made it."""
        key = bytes(range(len(self.ids))) if selected is None else selected
        hit = self.rows.get(key)
        if hit is not None:
            return hit
        picked = [self.ids[k] for k in key]
        if _rows is not None and sum([len(i) for i in picked]) <= SPARSE_IDS:
            ids = np.unique(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)
            sparse = _IdsRow(ids.astype(np.int64).tobytes())
            with lock:
                _remember(self.rows, key, sparse, 64)
            return sparse
        out = np.zeros(mask_words(self.size), dtype=np.uint32)
        if key and self.dense is not None:
            cols, matrix = self.dense
            out[cols] = np.bitwise_or.reduce(matrix[np.frombuffer(key, dtype=np.uint8)], axis=0)
        elif key:
            words, bits, owner = self.flat
            chosen = np.zeros(len(self.ids), dtype=bool)
            chosen[np.frombuffer(key, dtype=np.uint8)] = True
            keep = chosen[owner]
            np.bitwise_or.at(out, words[keep], bits[keep])
        row = out.view(np.int32)
        with lock:
            _remember(self.rows, key, row, 64)
        return row


def _word_bits(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token ids as the mask words they fall in and the bit each sets there (XGrammar's packed layout)."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32))


def build_choice_table(layout: Layout, index: TokenIndex, state: State,
                       choice: tuple[str, Any, EnumSlot, bytes, bytes]) -> ChoiceTable | None:
    """The :class:`ChoiceTable` at ``state``, where :meth:`Layout.value_choice` found ``choice``; ``None`` where its
    candidates are more than :data:`CHOICE_MAX` or a value typed whole may go on."""
    pointer, _, m, before, sub = choice
    lo, hi = m._span(sub)
    if not lo < hi or hi - lo > CHOICE_MAX or len(m.renders[lo]) == len(sub) and not before:
        return None  # nothing to choose, too many, or a value typed whole that may go on (1 of 1..15): the walk
    toks, tids, by_bytes = index.toks, index.ids, index.by_bytes
    domain = layout.compiled.fields.get(pointer)  # the session's field at the pointer (a union's may differ)
    ids: list[np.ndarray] = []
    checks: list[tuple[int, int, bytes]] = []
    index_of: list[tuple[int, int]] = []
    for k, r in enumerate(m.renders[lo:hi]):
        v = m.by_render[r]
        if domain is not None and v in domain:
            index_of.append((domain.index(v), k))
        s = before + r[len(sub):]
        found = [i for j in range(1, len(s) + 1) for i in by_bytes.get(s[:j], ())]  # the tokens inside s
        a, z = index.span(s)
        while a < z and toks[a] == s:
            a += 1
        if a < z:  # tokens running past the value: judged by what every record with it writes next
            def just(p: str, v: Any = v) -> list[Any] | None:
                return [v] if p == pointer else None

            only = layout.filter(just)
            after = layout.advance(state, s, admissible=only)
            limit = int(index.lengths[a:z].max()) - len(s)
            nexts = b"" if after is None else layout.forced(after, admissible=only, limit=limit)
            for i in range(a, z):
                x = toks[i][len(s):]
                if nexts.startswith(x):
                    found.append(int(tids[i]))
                elif after is not None and layout.advance(after, x, admissible=only) is not None:
                    checks.append((k, int(tids[i]), toks[i]))
        ids.append(np.array(sorted(set(found)), dtype=np.int64))
    return ChoiceTable(pointer, tuple(ids), tuple(checks), layout.finish(state) is not None, tuple(sorted(index_of)),
                       index.size)


def _lead_ins(layout: Layout, m: EnumSlot) -> set[bytes]:
    """The literals of ``layout`` that lead straight (through jumps alone) into a slot of matcher ``m``."""
    code = layout._code
    slots = {pc for pc, ins in enumerate(code) if ins[0] == FIELD and ins[2] is m}
    out = set()
    for pc, ins in enumerate(code):
        if ins[0] == LIT:
            nxt = pc + 1
            for _ in range(8):
                if nxt < len(code) and code[nxt][0] == JMP:
                    nxt = code[nxt][1]
            if nxt in slots:
                out.add(ins[1])
    return out


def branch_prefixes(m: EnumSlot) -> list[bytes]:
    """The proper prefixes of ``m``'s renderings after which they branch within the next three bytes (the prefix
    itself, or one or two bytes further, has two next bytes), shortest first: where a model may choose inside a
    value or a planner stop before one. Kept on the matcher (one pass over the renderings' prefixes)."""
    hit = m._branch_prefixes
    if hit is None:
        nexts: dict[bytes, set[int]] = {}
        for r in m.renders:
            for j in range(len(r)):
                nexts.setdefault(r[:j], set()).add(r[j])
        hit = sorted({p[:k] for p, nb in nexts.items() if len(nb) > 1 for k in range(max(0, len(p) - 2), len(p) + 1)},
                     key=lambda p: (len(p), p))
        m._branch_prefixes = hit
    return hit


@mypyc_attr(native_class=False)  # (compiled: a Python class, see setup.py)
@dataclass(frozen=True)
class WideTable:
    """The tokens admitted at a state before or inside a wide field slot whose admissible values are settled
    (:meth:`Session._settled`): where every record writes fixed bytes ``before`` and then the slot's value, having
    typed ``sub`` of it. Built from the matcher and the token index alone, once per (matcher, before, sub) and
    vocabulary, and shared by every slot with that domain (every meeting time field of every declaration).

    A token that ends inside the value, ``before + rest`` of some rendering, is admitted iff an admissible value's
    rendering starts with ``sub`` and its bytes: the renderings that do are one span ``[lo, hi)`` of the sorted
    renderings, so a mask is one comparison of the admissible counts at the span ends per token. A token running
    past a rendering's end (``"`` then ``,``) is checked under the solver, like a choice table's ``checks``."""

    matcher: Any
    ids: np.ndarray  # the tokens that end inside a value
    lo: np.ndarray  # ... the span of sorted renderings each one is a prefix of
    hi: np.ndarray
    words: np.ndarray  # ... as mask words and bits (sorted by word)
    bits: np.ndarray
    checks: tuple[tuple[int, int, bytes], ...]  # (sorted position of the rendering, token id, token bytes)
    uwords: np.ndarray  # the distinct words, and where each one's run of tokens starts (a row ORs each run's bits)
    starts: np.ndarray
    # the C pass's one int64 array: [n, runs, lo, hi, bits, uwords, starts] (``_rows.wide_fill``)
    packed: np.ndarray = dc_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        packed = np.concatenate((np.array([len(self.ids), len(self.uwords)], dtype=np.int64), self.lo, self.hi,
                                 self.bits.astype(np.int64), self.uwords, self.starts)).astype(np.int64, copy=False)
        object.__setattr__(self, "packed", packed)

    @classmethod
    def build(cls, index: TokenIndex, m: EnumSlot, before: bytes, sub: bytes) -> WideTable:
        lo, hi = m._span(sub)
        renders = m.renders
        n = len(sub)
        spans: dict[bytes, int] = {}  # each distinct prefix of a rest -> the first sorted position it starts
        ids, los, his = [], [], []
        checks = []
        for j in range(lo, hi):
            rest = before + renders[j][n:]
            for k in range(1, len(rest) + 1):
                p = rest[:k]
                if p in spans:
                    continue
                spans[p] = j
                toks = index.by_bytes.get(p)
                if toks:
                    # the renderings whose rest starts with p: from j (sorted) to the first that does not
                    value = p[len(before):] if len(p) > len(before) else b""
                    end = m._span(sub + value)[1] if len(p) > len(before) else hi
                    for t in toks:
                        ids.append(t)
                        los.append(j)
                        his.append(end)
            a, z = index.span(rest)
            for i in range(a, z):
                if len(index.toks[i]) > len(rest):
                    checks.append((j, int(index.ids[i]), index.toks[i]))
        arr = np.array(ids, dtype=np.int64)
        words, bits = _word_bits(arr)
        order = np.argsort(words, kind="stable")
        words, bits = words[order], bits[order]
        uwords, starts = np.unique(words, return_index=True)
        return cls(m, arr[order], np.array(los, dtype=np.int64)[order], np.array(his, dtype=np.int64)[order], words,
                   bits, tuple(checks), uwords, starts.astype(np.int64))

    @classmethod
    def build_many(cls, index: TokenIndex, m: EnumSlot, subs: Iterable[bytes],
                   before: bytes = b"") -> dict[bytes, WideTable]:
        """``{sub: WideTable.build(index, m, before, sub)}`` for many ``sub`` at once, each a prefix of a rendering,
        equal array for array: the spans of the renderings' prefixes are found once for
        all of them, and every table's arrays are cut from one set of arrays sorted once, so a table costs a few
        slices, not its own sorts (the 278 of a day of clock times: 60 ms one by one on a slow 2-core machine).

        A sub's entries are the tokens spelling a proper prefix of ``before`` (with the sub's span), then the prefixes
        ``q`` of renderings that extend it (a contiguous run of the sorted prefixes, in the order :meth:`build` meets
        them) where ``before`` and ``q``'s bytes past ``sub`` spell a token, each with the span of the renderings
        that start with ``q``; a ``q`` whose bytes no token starts with ends the look at its descendants."""
        renders = m.renders
        spans = prefix_spans(renders)  # every prefix of a rendering (renderings included) -> its span [lo, hi)
        prefixes = sorted(spans)  # depth first: a prefix, then every prefix extending it
        by_bytes, whole, toks, tids = index.by_bytes, m.by_render, index.toks, index.ids
        spanned: dict[bytes, tuple[int, int]] = {}  # bytes -> the tokens starting with them (asked once per bytes)
        subs = list(subs)
        tab: list[int] = []
        ids: list[int] = []
        los: list[int] = []
        his: list[int] = []
        checks: list[list[tuple[int, int, bytes]]] = []
        for t, sub in enumerate(subs):
            n = len(sub)
            i = bisect_left(prefixes, sub)
            if i == len(prefixes) or prefixes[i] != sub:
                raise ValueError(f"{sub!r} is not a prefix of a rendering")
            z = bisect_left(prefixes, sub + b"\xff", i)  # (renderings are UTF-8: no 0xff byte)
            mine: list[tuple[int, int, bytes]] = []
            for k in range(1, len(before)):  # tokens ending inside the bytes before the value
                for tid in by_bytes.get(before[:k], ()):
                    tab.append(t)
                    ids.append(tid)
                    los.append(spans[sub][0])
                    his.append(spans[sub][1])
            while i < z:
                q = prefixes[i]
                rest = before + q[n:]
                sp = spanned.get(rest)
                if sp is None:
                    sp = spanned[rest] = index.span(rest)
                x, y = sp
                if x == y:  # no token starts with these bytes, nor with any longer ones: past q's descendants
                    i = bisect_left(prefixes, q + b"\xff", i + 1, z)
                    continue
                lo, hi = spans[q]
                if rest and toks[x] == rest:
                    for tid in by_bytes[rest]:
                        tab.append(t)
                        ids.append(tid)
                        los.append(lo)
                        his.append(hi)
                if q in whole:  # a whole rendering: the tokens running past its end
                    mine += [(lo, int(tids[k]), toks[k]) for k in range(x, y) if len(toks[k]) > len(rest)]
                i += 1
            checks.append(mine)
        owner = np.array(tab, dtype=np.int64)
        arr = np.array(ids, dtype=np.int64)
        words, bits = _word_bits(arr)
        order = np.lexsort((words, owner))  # by table, then by word; stable: build's order within a word
        owner, arr, words, bits = owner[order], arr[order], words[order], bits[order]
        lo_a, hi_a = np.array(los, dtype=np.int64)[order], np.array(his, dtype=np.int64)[order]
        edges = np.searchsorted(owner, np.arange(len(subs) + 1))  # table t holds [edges[t], edges[t + 1])
        new = np.ones(len(owner), dtype=bool)  # where a (table, word) run starts
        new[1:] = (owner[1:] != owner[:-1]) | (words[1:] != words[:-1])
        runs = np.flatnonzero(new)
        run_edges = np.searchsorted(runs, edges)
        out: dict[bytes, WideTable] = {}
        for t, sub in enumerate(subs):
            a, z = int(edges[t]), int(edges[t + 1])
            ra, rz = int(run_edges[t]), int(run_edges[t + 1])
            out[sub] = cls(m, arr[a:z], lo_a[a:z], hi_a[a:z], words[a:z], bits[a:z], tuple(checks[t]),
                           words[runs[ra:rz]], (runs[ra:rz] - a).astype(np.int64))
        return out

    def row(self, counts: np.ndarray, words: int, out: np.ndarray | None = None) -> np.ndarray:
        """The packed row (uint32) of the tokens ending inside an admissible value, given the admissible counts
        (int64): one pass in C (``_rows.wide_fill``, which clears the row first), else :meth:`row_numpy`, which
        computes the same. With ``out`` (``words`` 32-bit words, a caller's mask row): written there, over what it
        held, and returned."""
        if _rows is None:
            row = self.row_numpy(counts, words)
            if out is None:
                return row
            out.view(np.uint32)[:] = row
            return out
        if out is None:
            out = np.empty(words, dtype=np.uint32)
        _rows.wide_fill(out, counts, self.packed)
        return out

    def row_numpy(self, counts: np.ndarray, words: int) -> np.ndarray:
        """:meth:`row` in numpy (seven calls on arrays of a few dozen entries: 50 us between a decoder's other work on
        a 2-core machine, against a few for the pass in C)."""
        out = np.zeros(words, dtype=np.uint32)
        if len(self.ids):  # distinct tokens' bits in a word: OR-ing each word's run instead of a ufunc.at
            keep = counts.take(self.hi) > counts.take(self.lo)
            out[self.uwords] = np.bitwise_or.reduceat(self.bits * keep, self.starts)
        return out


# ------------------------------------------------------------------------------------------------------ compiled
class _Compiled:
    """What every decoder of one (declaration, vocabulary, style) shares: the layout, the token index, the free
    string masks and the caches of exact masks and certain runs."""

    def __init__(self, spec: Spec, vocab: Vocabulary, indent: int | None):
        self.spec, self.vocab, self.indent = spec, vocab, indent
        self.layout = Layout(spec, indent=indent)
        self.index = TokenIndex.of(vocab)
        vocabulary_key(self.index)  # the free string tables' disk key: with the index, not at a string's first mask
        self.words = mask_words(vocab.size)
        self.eos = np.array(vocab.eos_token_ids, dtype=np.int64)
        self.strings: dict[int, StringMasks] = {}
        self.masks: OrderedDict[Any, Any] = OrderedDict()  # packed rows, or an _IdsRow (a choice table's few ids)
        self.plans: OrderedDict[Any, tuple[_Step, ...]] = OrderedDict()
        self.suffixes: OrderedDict[Any, bool] = OrderedDict()
        self.tails: OrderedDict[Any, bytes | None] = OrderedDict()  # _fixed_tail by a free string's place
        self.wide_at: dict[State, Any] = {}  # per state: its wide slot's place (Decoder._wide_place) or None
        self.choice_at: dict[State, Any] = {}  # per state: Layout.value_choice (Decoder._value_choice)
        self.slot_at: dict[tuple[int, tuple[int, ...]], Any] = {}  # per (pc, counters): Decoder._slot_place's slot
        try:  # the layout is a function of the schema's text (property order included) and the style
            layout_key: Any = (json.dumps(spec.schema), indent)
        except (TypeError, ValueError):
            layout_key = ("declaration", id(self))
        self.choices, self.openings, self.done = self.index.layout_tables(layout_key)
        self.texts_known = False  # (Decoder._learn_texts, once)

    def string_masks(self, slot: StringSlot) -> StringMasks:
        """The masks inside one free string slot (token tables shared per automaton and vocabulary, on disk)."""
        masks = self.strings.get(id(slot))
        if masks is None:
            masks = self.strings[id(slot)] = StringMasks.of(slot, self.index)
        return masks


_NONE: Final[Any] = object()
#: a :class:`_Later` step's state: made when read (not None, which is EOS's)
_LAZY: Final[Any] = object()
#: the clock of the stats (Final: compiled, a C static, not a look-up in the module's globals)
_clock: Final = perf_counter
_ONE_BYTE: Final = tuple(bytes((b,)) for b in range(256))  # each byte as a bytes object


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> Any:
    cache[key] = value
    if len(cache) > limit:
        cache.popitem(last=False)
    return value


_STATS_FIELDS = ("mask_seconds", "masks", "mask_hits", "consume_seconds", "plan_seconds", "solver_seconds",
                 "walk_nodes")


class DecoderStats:
    """Where the decoder's time went (seconds) and how often caches answered. (A plain class: compiled, its counters
    are native fields; a dataclass's are a dict's, 2% of a meeting walk's instructions in their updates.)"""

    def __init__(self) -> None:
        self.mask_seconds = 0.0
        self.masks = 0
        self.mask_hits = 0
        self.consume_seconds = 0.0  # consumes of tokens that were not the planned ones (a planned token, or one a
        # rollback undid, is a frame pushed: its two clock reads were 1.5% of a meeting walk), and a planner's take of
        # its run for the row after it (once per run)
        self.plan_seconds = 0.0
        self.solver_seconds = 0.0
        self.walk_nodes = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in _STATS_FIELDS:
            v = getattr(self, k)
            out[k] = round(v, 6) if isinstance(v, float) else v
        return out

    def __repr__(self) -> str:
        return "DecoderStats(" + ", ".join(f"{k}={v!r}" for k, v in self.to_json().items()) + ")"


class _WideRow:
    """A wide value's mask row not written yet (:meth:`Decoder._wide_row` with ``later``): its table's packed arrays,
    the admissible counts and the extra tokens (int64 bytes, checked past a value or EOS). A row computed ahead, kept
    on its frame, is written once, into the caller's row, where the model chooses there (:meth:`Decoder.fill_mask`),
    instead of into a 19 KB array of its own that the fill then copies: a third of a wide row's time went to that
    array's allocation and first write. :meth:`write` makes the array where a caller reads the row itself."""

    __slots__ = ("packed", "counts", "extra")

    def __init__(self, packed: np.ndarray, counts: np.ndarray, extra: bytes):
        self.packed, self.counts, self.extra = packed, counts, extra

    def write(self, out: np.ndarray) -> np.ndarray:
        """Write the row into ``out`` (uint32 or int32 words, C-contiguous; ``_rows`` built) and return it."""
        assert _rows is not None  # (made only with the C pass)
        _rows.wide_fill(out, self.counts, self.packed)
        if self.extra:
            _rows.or_bits(out, self.extra)
        return out


class _IdsRow:
    """A mask row of a few tokens kept as their ids (int64 bytes; repeats allowed): a choice table's union of at most
    :data:`SPARSE_IDS` (:meth:`ChoiceTable.row`), with the tokens :meth:`Decoder._choice_row` adds where it checks
    them (those running into another choice, EOS). :meth:`write` clears the caller's row and sets their bits in one
    C call."""

    __slots__ = ("ids",)

    def __init__(self, ids: bytes):
        self.ids = ids

    def write(self, out: np.ndarray) -> np.ndarray:
        """Write the row into ``out`` (uint32 or int32 words, C-contiguous; ``_rows`` built) and return it."""
        assert _rows is not None  # (made only with the C pass)
        _rows.ids_fill(out, self.ids)
        return out


def dense_row(row: Any, words: int) -> np.ndarray:
    """A mask row as an int32 array of ``words`` words: ``row`` itself, or a row not written yet (a
    :class:`_WideRow` or an :class:`_IdsRow`) written into a new one."""
    if type(row) is not _WideRow and type(row) is not _IdsRow:
        return row  # type: ignore[no-any-return]
    out: np.ndarray = row.write(np.empty(words, dtype=np.uint32))
    return out.view(np.int32)


class _Step:
    """One planned token: the layout state after it (``None``: EOS; :data:`_LAZY` in a :class:`_Later`, which makes
    it when read) and the field values it completes; inside a wide value, what its frame keeps
    (:attr:`_Frame.value`). Not changed once made (plans are cached). (A plain class: a named tuple's ``__new__`` is
    Python, called once per planned token from the compiled planner.)"""

    __slots__ = ("token", "state", "events", "value")

    def __init__(self, token: int, state: Any, events: tuple[tuple[str, Any], ...] = (),
                 value: tuple[Any, Any, Any] | None = None):
        self.token, self.state, self.events, self.value = token, state, events, value

    def frame_state(self) -> Any:
        """What a frame after this step holds as its state: the state, or the step itself where made when read."""
        return self.state


class _Later(_Step):
    """A planned step whose token ends inside a stretch of fixed bytes: its layout state is ``at(k)``, with the
    function :meth:`Layout.forced_bytes` gives with the stretch, made when first read. The step is its own frame's
    state until then (:attr:`_Frame.st`): the state is made only where a frame's state is read (a plan's last step,
    where the next run is planned; a position a rollback returns to and plans from), not for every token of the run
    (0.7 us each, with the four objects a collection of the young generation walks while the frame lives), and the
    step and the maker are one object (they were two: one more per token for the collector to walk)."""

    __slots__ = ("at", "k")

    def __init__(self, token: int, at: Any, k: int, events: tuple[tuple[str, Any], ...] = ()):
        super().__init__(token, _LAZY, events)
        self.at, self.k = at, k

    def frame_state(self) -> Any:
        return self

    def made(self) -> State:
        """The state after the step, made (each call makes it again)."""
        return self.at(self.k)  # type: ignore[no-any-return]


class _Frame:
    """One position: the layout state (``st``: a :class:`_Later` from a planned step until read, :attr:`state`),
    whether the session got a push for it (and the field values assigned after it), and the certain run planned:
    ``plan[at:]`` (``None``: not planned yet, ``at`` 0; ``at`` is below ``len(plan)``). The frames of one planned run
    share its tuple, each at its own offset: a frame is kept per token (rollbacks), and a slice per frame kept the
    rest of the run in each (a run's length squared over two step references, a fifth of what the garbage collector
    traversed on meeting). (A plain class, not a dataclass: compiled, a dataclass's generated ``__init__`` stays
    Python, 3,600 instructions per frame, one frame per token.)"""

    __slots__ = ("st", "pushed", "plan", "at", "terminated", "token", "assigned", "row", "value")

    def __init__(self, st: State | _Later, pushed: bool, plan: tuple[_Step, ...] | None = None,
                 terminated: bool = False, token: int | None = None, assigned: tuple[tuple[str, Any], ...] = (),
                 value: tuple[Any, Any, Any] | None = None, at: int = 0):
        self.st = st
        self.pushed = pushed
        self.plan = plan
        self.at = at
        self.terminated = terminated
        self.token = token
        self.assigned = assigned
        self.row: tuple[Any, Any] | None = None  # the mask row here (an array, or one not written yet: _WideRow,
        # _IdsRow), with the assignment it was computed under
        self.value = value  # inside a wide value: its place, counts and key (Decoder._in_value_at)

    @property
    def state(self) -> State:
        st = self.st
        if type(st) is _Later:
            st = self.st = st.made()
        return st  # type: ignore[return-value]


class _Answers:
    """:meth:`Decoder._admissible`'s filter function: the session's admissible values of a pointer (a wide field: its
    questions), under the assignment ``key`` (``None``: with the ``extra`` values too, under the assignment in hand,
    entered for each question as :meth:`Session._extended` made it)."""

    def __init__(self, session: Session, fields: Any, key: Any, extra: list[tuple[str, Any]],
                 stats: DecoderStats) -> None:
        self.session, self.fields, self.key, self.extra, self.stats = session, fields, key, extra, stats
        self.base: Any = None  # the key object of the assignment the extension below was made under
        self.extended: Any = None  # it with ``extra`` assigned too (Session._extended), kept while it stands

    def __call__(self, p: str) -> Any:
        if p not in self.fields:
            return None
        session = self.session
        t = _clock()
        try:
            if not self.extra:
                if session.fixed_key() != self.key:  # a caller kept the filter past an assignment: a bug, not an answer
                    raise RuntimeError("a decoder filter was asked under another assignment than its own")
                return session.questions(p) if session.wide(p) else session.admissible(p)
            base = session.fixed_key()
            if self.extended is None or self.base is not base:  # (made under the assignment in hand; kept while it is)
                self.base, self.extended = base, session._extended(self.extra)
            session._enter(self.extended)
            try:
                return session.questions(p) if session.wide(p) else session.admissible(p)
            finally:
                session.pop()
        finally:
            self.stats.solver_seconds += _clock() - t


def compiled_for(spec: Spec, vocab: Vocabulary, style: str | int = "compact") -> _Compiled:
    """The layout, token index and caches that every decoder of ``spec`` over ``vocab`` in ``style`` shares (built on
    first use, kept on the spec)."""
    indent = _indent(style)
    cache = spec.__dict__.setdefault("_decoders", {})
    key = (id(vocab), indent)
    compiled = cache.get(key)
    if compiled is None or compiled.vocab is not vocab:
        compiled = cache[key] = _Compiled(spec, vocab, indent)
    return compiled


# ------------------------------------------------------------------------------------------------------- decoder
class Decoder:
    """Exact token masks and certain runs for one record. Create with :meth:`Spec.decoder`.

    Parameters
    ----------
    spec, vocab
        The declaration and the model's vocabulary (mask rows cover ``vocab.size`` ids).
    style
        ``"compact"`` (``", "``/``": "`` separators) or an integer indent (``json.dumps(indent=N)``).
    mode
        ``"canonical"`` (default): at a certain position the mask admits exactly the planned draft token, so a
        verify step always accepts it; ``"exact"``: every tokenization of a valid record is admitted.
    session
        The solver session to drive (default: a new one on the default backend).
    """

    def __init__(self, spec: Spec, vocab: Vocabulary, *, style: str | int = "compact", mode: str = "canonical",
                 session: Session | None = None, backend: str | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        compiled = compiled_for(spec, vocab, style)
        self.spec, self.vocab, self.mode = spec, vocab, mode
        self._c = compiled
        self.layout = compiled.layout
        self.session = session if session is not None else spec.session(backend)
        self._fields = spec.fields
        self._frames = [_Frame(self.layout.start(), pushed=False)]
        self._redo: list[_Frame] = []  # frames a rollback undid, the next one last
        self._filters: OrderedDict[Any, Any] = OrderedDict()  # the filter of each assignment (_admissible)
        self._last_filter: tuple[Any, Any] = (None, None)  # the last key object _admissible found, and its filter
        self._counts: dict[Any, tuple[np.ndarray, bytes]] = {}  # a settled wide field's admissible counts, per
        self._last_counts: dict[str, tuple[Any, Any]] = {}  # assignment; per field, the last of them, with its key
        self._masks: dict[Any, bytes] = {}  # a narrow field's admissible mask, per assignment
        self.stats = DecoderStats()
        self._eos = set(vocab.eos_token_ids)

    def prime(self) -> Decoder:
        """Do now the work the first token would wait for (a server runs this while the prompt is prefilled, off
        its step loop): the session's root pass (:meth:`Session.prepare`), the layout's positions
        (:meth:`Layout.prepare`, once per layout) and, in canonical mode, the certain run
        from the start, which for a record the declaration fixes is the whole record, and the mask row where that
        run ends (the model's first choice, sampled from the logits of the step that verifies the run: its tokens
        are taken and undone here, so taking them again restores their frames and the row is a cache hit; a
        constraint worker publishes the same row when a request opens); then the young generations' collection
        (:data:`PRIME_COLLECT`). Returns the decoder."""
        t = _clock()
        self.session.prepare()
        self.stats.solver_seconds += _clock() - t
        if len(self._frames) == 1:
            self.layout.prepare()
            self._build_choice_tables()
            self._root_rows()
            self._build_wide_tables()
            if self.mode == "canonical":
                self._learn_texts()
        if self.mode == "canonical" and len(self._frames) == 1:
            plan = self._plan()  # a new plan computes the row where it ends; one from the cache, here (a lookup
            if not plan or plan[-1].state is not None:  # where it was just computed; a run ending with EOS: no row)
                self._row_after(plan)
        if PRIME_COLLECT:
            gc.collect(1)
        return self

    def _repr_html_(self) -> str:
        from ..display import decoder_html
        return decoder_html(self)

    def __repr__(self) -> str:
        return (f"Decoder({self.vocab.name}, {self.mode}, {len(self._frames) - 1} tokens"
                f"{', terminated' if self.is_terminated() else ''})")

    # -- the session, seen through the layout -------------------------------------------------------------------
    def _key(self) -> tuple[tuple[str, int], ...]:
        return self.session.fixed_key()

    def _informative(self, ctx: tuple[tuple[str, Any], ...], flt: Any = None) -> list[tuple[str, Any]]:
        """The values of ``ctx`` that tell the session something: a narrow field whose admissible set under the
        current assignment (or under the filter ``flt``'s, which extends it) is that one value already adds nothing
        (every valid record extending the assignment has it), so assigning it changes no admissible set and needs
        no solve."""
        session, fields = self.session, self._fields
        out = []
        for p, v in ctx:
            if p not in fields:
                continue
            if not session.wide(p):
                vals = session.admissible(p) if flt is None else flt.answer(p)
                if len(vals) == 1 and value_key(vals[0]) == value_key(v):
                    continue
            else:  # a wide field settled to that one value (a meeting's end time its start and length decide)
                mask = (session.questions(p) if flt is None else flt.answer(p)).settled()
                if mask is not None and mask.count(1) == 1:
                    k = field_index(fields[p], v)
                    if k >= 0 and mask[k] == 1:
                        continue
            out.append((p, v))
        return out

    def _admissible(self, ctx: tuple[tuple[str, Any], ...] = (), extra: list[tuple[str, Any]] | None = None) -> Any:
        """A layout filter: the session's admissible values, given the extra field values ``ctx`` (or, where the
        caller has them, only its informative ones, ``extra``). A wide field gives the session's questions about it
        instead of a list: the layout asks what each next byte needs."""
        session, fields = self.session, self._fields
        if extra is None:
            extra = self._informative(ctx) if ctx else []
        key = None
        if not extra:  # the session's own assignment: one filter per assignment, its answers kept while it holds
            key = session.fixed_key()
            last = self._last_filter
            if last[0] is key:  # (the same key object: the assignment unchanged since; no key to hash)
                return last[1]
            hit = self._filters.get(key)
            if hit is not None:
                self._last_filter = (key, hit)
                return hit

        # (a callable object, not a closure: a nested function's cells, closure tuple and function were eight objects
        # per filter for the collector, a filter per certain run; it holds the session, not the decoder: a reference
        # to the decoder would make a cycle of them, as the filter is kept on the decoder)
        fn = _Answers(session, fields, key, extra, self.stats)
        flt = self.layout.filter(fn)
        if key is not None:
            _remember(self._filters, key, flt, 64)
            self._last_filter = (key, flt)
        return flt

    # -- masks --------------------------------------------------------------------------------------------------
    def _exact_ids(self, state: State) -> np.ndarray:
        """The ids of every token whose bytes some valid record continues with, and EOS where it may end."""
        c, layout, index = self._c, self.layout, self._c.index
        toks = index.toks
        filters: dict[tuple[Any, ...], Any] = {(): self._admissible()}
        parts: list[np.ndarray] = []
        singles: list[int] = []

        def flt(ctx: tuple[Any, ...]) -> Any:
            f = filters.get(ctx)
            if f is None:
                f = filters[ctx] = self._admissible(ctx)
            return f

        stack: list[tuple[int, int, int, State, tuple[Any, ...]]] = [(0, 0, len(toks), state, ())]
        nodes = 0
        while stack:
            d, lo, hi, st, ctx = stack.pop()
            nodes += 1
            if d:
                prefix = toks[lo][:d]
                if len(toks[lo]) == d:
                    singles.append(lo)
                    lo += 1
                    if lo >= hi:
                        continue
            else:
                prefix = b""
            fs = layout.free_string(st)
            if fs is not None:
                parts.append(self._string_positions(fs, st, lo, hi, d, ctx, flt))
                continue
            f = flt(ctx)
            among = index.next_bytes(lo, hi, d) if hi - lo <= 4096 else None  # a wide node: most bytes have tokens
            for b in sorted(layout.allowed_next_bytes(st, admissible=f, among=among)):
                a, z = index.span(prefix + bytes((b,)), lo, hi)
                if a >= z:
                    continue
                if z - a == 1 and len(toks[a]) == d + 1:  # a token ending at b and nothing longer: b is allowed
                    singles.append(a)
                    continue
                st2 = layout.advance(st, bytes((b,)), admissible=f)
                if st2 is None:
                    continue
                ctx2 = ctx + st2.events if st2.events else ctx
                stack.append((d + 1, a, z, st2, ctx2))
        self.stats.walk_nodes += nodes
        pos = np.concatenate([np.array(singles, dtype=np.int64), *parts]) if parts else np.array(singles, np.int64)
        ids = index.ids[pos]
        if layout.finish(state, admissible=filters[()]) is not None:
            ids = np.concatenate([ids, c.eos])
        return ids

    def _string_positions(self, fs: tuple[StringSlot, Any], st: State, lo: int, hi: int, d: int,
                          ctx: tuple[Any, ...], flt: Any) -> np.ndarray:
        """Inside a free string: the positions in ``[lo, hi)`` (tokens sharing ``d`` bytes) that stay valid."""
        slot, sub = fs
        return self._c.string_masks(slot).positions(sub, lo, hi, d, *self._string_closing(st, ctx, flt))

    def _string_closing(self, st: State, ctx: tuple[Any, ...], flt: Any) -> tuple[Any, Closing]:
        """How tokens closing the free string at ``st`` are judged: a key for the verdicts (the slot's place, the
        values ``ctx`` and the assignment decide them) and the verdict on each run of bytes after the quote."""
        th = st.one()
        if th is None:
            raise ValueError("a free string's closing needs a state of one thread")
        (pc, ctr, _), pending = th
        place = (pc, ctr, pending, ctx, self._key())
        tail = self._c.tails.get(place, _NONE)
        if tail is _NONE:
            tail = _remember(self._c.tails, place, self._fixed_tail(st, flt(ctx)), 4096)
        if tail is not None:
            # only fixed bytes follow the string to the record's end: a rest is good where it is a prefix of them,
            # whatever the declaration or the assignment, so the string's masks key on the bytes and are shared
            def prefix(rests: list[bytes]) -> list[bool]:
                return [tail.startswith(r) for r in rests]

            return ("tail", tail), prefix

        def verdicts(rests: list[bytes]) -> list[bool] | None:
            f = flt(ctx)
            after = self.layout.after_free_slot(st, admissible=f)
            if after is None:
                return None
            first = self.layout.allowed_next_bytes(after, admissible=f)  # the first byte decides most of them
            return [not r or (r[0] in first and self._suffix_ok(after, r, ctx, f)) for r in rests]

        return place, verdicts

    def _fixed_tail(self, st: State, f: Any, limit: int = 64) -> bytes | None:
        """The bytes after the free string at ``st`` when they are fixed to the record's end (one next byte each,
        no value completed on the way, the record whole after them); ``None`` otherwise."""
        after = self.layout.after_free_slot(st, admissible=f)
        out = bytearray()
        while after is not None and len(out) <= limit:
            nxt = self.layout.allowed_next_bytes(after, admissible=f)
            if not nxt:
                return bytes(out) if self.layout.accepting(after, admissible=f) else None
            step = self._only_byte(after, nxt, f)
            if step is None:
                return None
            b, after = step
            out.append(b)
        return None

    def _only_byte(self, st: State, nxt: frozenset[int], f: Any) -> tuple[int, State] | None:
        """The one next byte ``nxt`` holds and the state after it, where taking it completes no value."""
        if len(nxt) != 1:
            return None
        (b,) = nxt
        st2 = self.layout.advance(st, bytes((b,)), admissible=f)
        return None if st2 is None or st2.events else (b, st2)

    def _suffix_ok(self, after: State, rest: bytes, ctx: tuple[Any, ...], f: Any) -> bool:
        if not rest:
            return True
        key = (after, rest, ctx, self._key())
        hit = self._c.suffixes.get(key)
        if hit is None:
            hit = _remember(self._c.suffixes, key, self._advance_checked(after, rest, ctx) is not None, 100_000)
        return hit

    def _advance_checked(self, st: State, data: bytes, ctx: tuple[Any, ...]) -> State | None:
        """Advance over ``data`` with every completed value conditioning the admissible sets after it."""
        ctx = tuple(ctx)
        f = self._admissible(ctx)
        for b in data:
            st2 = self.layout.advance(st, bytes((b,)), admissible=f)
            if st2 is None:
                return None
            if st2.events:
                ctx = ctx + st2.events
                if self._informative(st2.events):  # else the filter in hand answers the same
                    f = self._admissible(ctx)
            st = st2
        return st

    def _exact_row(self, place: Any = _NONE, later: bool = False) -> Any:
        """The mask row at the current position (kept on its frame). ``place``: :meth:`_slot_place` of its state,
        where the caller found it. With ``later``, the row may be one not written yet (a wide value's
        :class:`_WideRow`, a choice table's few ids, an :class:`_IdsRow`), written where the model chooses
        (:meth:`fill_mask`); else it is an array (a kept one is written then)."""
        frame = self._frames[-1]
        if frame.terminated:
            return np.zeros(self._c.words, dtype=np.int32)
        fixed = self._key()
        kept = frame.row  # this position's row, computed before (a row ahead, taken again): no key to hash
        if kept is not None and (kept[0] is fixed or kept[0] == fixed):
            self.stats.mask_hits += 1
            row = kept[1]
            if (type(row) is _WideRow or type(row) is _IdsRow) and not later:
                row = dense_row(row, self._c.words)
                frame.row = (kept[0], row)
            return row
        row = self._row_at(frame.state, fixed, place, later)
        if type(row) is _IdsRow and not later:  # (a choice table's few ids)
            row = dense_row(row, self._c.words)
        frame.row = (fixed, row)
        return row

    def _row_at(self, state: State, fixed: Any, place: Any = _NONE, later: bool = False) -> Any:
        if place is _NONE:
            place = self._slot_place(state) if WIDE_TABLES else None
        if place is not None:  # inside a settled wide field's value (each digit of a clock time): its WideTable
            row = self._wide_row(state, place=place, later=later)
            if row is not None:  # (not kept in the shared LRU: a state inside a value is met once per record, and
                return row  # the frame keeps its row for a verify step's redo)
        fs = self.layout.free_string(state)
        if fs is not None:  # inside a free string: a lookup in its token tables (what _exact_ids would find there)
            return self._c.string_masks(fs[0]).row(fs[1], *self._string_closing(state, (), self._admissible))
        key = (state, fixed)
        row = self._c.masks.get(key)
        if row is not None:
            self._c.masks.move_to_end(key)
            self.stats.mask_hits += 1
            return row
        # a state with a choice table (built ahead for the narrow fields' slots: most choices) goes to it first; a
        # wide field's slot has none (it is asked piecewise): its WideTable, where the session has settled it
        tabled = state in self._c.choices
        row = self._choice_row(state) if tabled else None
        if row is None:
            choice = self._value_choice(state)
            if WIDE_TABLES and choice is not None and choice[0] in self._fields and self.session.wide(choice[0]):
                place = self._wide_place(state, choice)
                if place is not None:
                    row = self._wide_row(state, place=place)
            if row is None and not tabled:
                row = self._choice_row(state, choice)
        if row is not None:
            return _remember(self._c.masks, key, row, 2048)
        opening = self._opening(state)
        if opening is not None:  # fixed bytes, a free string, fixed bytes to the end: the same row everywhere
            tables, okey = opening
            row = tables.opening_rows.get(okey)
            if row is None:
                row = _pack(self._exact_ids(state), self.vocab.size)
                with tables.lock:
                    _remember(tables.opening_rows, okey, row, 256)
            return _remember(self._c.masks, key, row, 2048)
        row = _pack(self._exact_ids(state), self.vocab.size)
        return _remember(self._c.masks, key, row, 2048)

    def _choice_row(self, state: State, choice: Any = _NONE) -> Any:
        """The mask row at ``state`` from its :class:`ChoiceTable` (the union of the admissible values' tokens, and
        the tokens running into what follows checked under the solver), or ``None`` where no table applies (a wide
        field, asked piecewise, goes to the walk). A row of a few ids may be an :class:`_IdsRow` (:func:`dense_row`
        makes it an array)."""
        table = self._choice_table(state, choice)
        if table is None or table.pointer in self._fields and self.session.wide(table.pointer):
            return None
        # the session's admissible set, as a mask over the field's domain: cached with the solver state, and the
        # key of the union row the table keeps for it (a pointer the session does not know: every candidate)
        if table.pointer in self._fields:
            mask = self._admissible_mask(table.pointer)
            row = table.row_for(mask, self._c.index.lock)
        else:
            mask = None
            row = table.row(None, self._c.index.lock)
        extra: list[int] = []
        f = None
        if table.checks:  # tokens running into another choice: each checked under the solver
            f = self._admissible()
            ks = None if mask is None else set(table.select(mask))
            extra = [tid for k, tid, data in table.checks
                     if (ks is None or k in ks) and self._suffix_ok(state, data, (), f)]
        if table.may_finish and self.layout.finish(state, admissible=f or self._admissible()) is not None:
            extra += self._c.eos.tolist()
        if extra:
            ids = np.array(extra, dtype=np.int64)
            if type(row) is _IdsRow:  # (still a few ids: the table's and these)
                return _IdsRow(row.ids + ids.tobytes())
            row = row.copy()
            np.bitwise_or.at(row.view(np.uint32), *_word_bits(ids))
        return row

    def _admissible_mask(self, pointer: str) -> bytes:
        """:meth:`Session.admissible_mask`, kept per assignment (the states inside one value ask it in a row)."""
        key = (pointer, self._key())
        mask = self._masks.get(key)
        if mask is None:
            mask = self.session.admissible_mask(pointer)
            if len(self._masks) > 4096:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def _value_choice(self, state: State) -> Any:
        """:meth:`Layout.value_choice`, kept per state in the compiled declaration (it depends on the layout only)."""
        at = self._c.choice_at
        choice = at.get(state, _NONE)
        if choice is _NONE:
            if len(at) > 65536:
                at.clear()
            choice = at[state] = self.layout.value_choice(state)
        return choice

    def _wide_place(self, state: State, choice: Any = _NONE) -> tuple[str, EnumSlot, Any, bool] | None:
        """Where ``state`` is before or inside the slot of a field of at most WIDE_TABLE_VALUES values whose rows a
        :class:`WideTable` gives: the field's pointer, the slot's matcher, the table's key and whether the output may
        end here (the layout alone says so); ``None`` elsewhere. Kept per state in the compiled declaration: it
        depends on the layout only (whether the field is wide depends on the session: asked per row)."""
        wide_at = self._c.wide_at
        place = wide_at.get(state, _NONE)
        if place is _NONE:
            place = None
            if choice is _NONE:
                choice = self._value_choice(state)
            if choice is not None and choice[0] in self._fields:
                pointer, _, m, before, sub = choice
                # another domain at the pointer (a union branch), or a whole value that others extend (15 of 150,
                # where every token could run past it): the walk. BFCL's 11,323 dates: thousands of distinct
                # prefixes, each table built on first use (up to 0.1 s at the opening quote): the walk (a few ms)
                if same_domain(m, self._fields[pointer].values) and (before or sub not in m.by_render) \
                        and len(m.renders) <= WIDE_TABLE_VALUES:
                    place = (pointer, m, (id(m), before, sub), self.layout.finish(state) is not None)
            if len(wide_at) > 65536:
                wide_at.clear()
            wide_at[state] = place
        return place

    def _slot_place(self, state: State) -> tuple[str, EnumSlot, Any, bool] | None:
        """:meth:`_wide_place` for a state of one thread inside the value of a wide field's slot, a whole value not
        typed yet (where the session asks the field piecewise; ``None`` elsewhere, the general path): found per slot,
        not per state. The slot is kept per (program counter, array counters) in the compiled declaration, so the
        digits of one value, and the same value in every record, find it with one lookup, where the per-state caches
        missed at each of them (a state is new at every digit). On meeting/Qwen3, problems 0-4 after a warm-up, this
        took a cold wide row's fill from 13.4 to 7.8 us at the median. The output cannot end inside a value
        (``Layout.finish`` needs a whole rendering typed), so the place's ``may_finish`` is false."""
        th = state.one()
        if th is None:
            return None
        pc, ctr, sub = th[0]
        at = self._c.slot_at
        key = (pc, ctr)
        slot = at.get(key, _NONE)
        if slot is _NONE:
            slot = None
            got = self.layout.enum_slot_at(pc, ctr)
            if got is not None:  # the conditions of _wide_place, those that hold for the whole slot
                pointer, _, m = got
                f = self._fields.get(pointer)
                if f is not None and same_domain(m, f.values) and len(m.renders) <= WIDE_TABLE_VALUES:
                    slot = (pointer, m, id(m))
            if len(at) > 65536:
                at.clear()
            at[key] = slot
        if slot is None or sub in slot[1].by_render or not self.session.wide(slot[0]):
            return None
        return slot[0], slot[1], (slot[2], b"", sub), False

    def _in_value(self, state: State, data: bytes) -> State | None:
        """The state after ``data`` where ``state`` is inside a settled wide field's value (:meth:`_slot_place`) and
        ``data`` keeps it there: some admissible value's rendering starts with the bytes typed and ``data`` (one
        look-up in the admissible counts) and no value is whole on the way. That is what :meth:`Layout.advance`
        finds byte by byte under the filter (its asked slot reads the same counts), with no event: the same core, the
        value's bytes longer. ``None`` elsewhere, and where ``data`` leaves every admissible value (the general path
        then says why)."""
        got = self._in_value_at(state, data)
        return None if got is None else got[0]

    def _in_value_at(self, state: State, data: bytes) -> tuple[State, Any] | None:
        """:meth:`_in_value`, with what the state after ``data`` is inside: its slot's place (:meth:`_slot_place`),
        the admissible counts and the assignment's key they hold under (the frame keeps them for its row,
        :meth:`_value_fill`)."""
        place = self._slot_place(state)
        if place is None:
            return None
        th = state.one()
        if th is None:
            return None
        (pc, ctr, sub), pending = th
        if pending:
            return None
        pointer, m = place[0], place[1]
        new = sub + data
        whole = m.by_render
        if any(new[:k] in whole for k in range(len(sub) + 1, len(new) + 1)):
            return None  # a value completes inside the token: its event, and what follows it, on the general path
        counts = self._wide_counts(pointer, m)
        if counts is None:
            return None
        lo, hi = m._span(new)
        if not span_has(counts[1], lo, hi):
            return None
        # the place there: the same slot, ``new`` typed (not a whole value, checked above)
        one = ((pc, ctr, new), pending)
        return State(frozenset((one,)), (), one), ((pointer, m, (place[2][0], b"", new), False), counts, self._key())

    def _value_plan(self, state: State, kept: Any = None) -> tuple[_Step, ...] | None:
        """The certain run at ``state`` where it is inside a settled wide field's value (:meth:`_slot_place`) or in
        the fixed bytes before one, found from the admissible counts instead of the layout's walk (11 us at each
        digit of a clock time on meeting/Qwen3; a walk to the ``:`` after an hour and the row after it, 45-60 us);
        ``None`` elsewhere (the planner then decides). Empty where two admissible values part in the next byte (the
        first and last admissible renderings under the bytes typed: two searches in the counts,
        :func:`admissible_branches`, as the asked slot does). Inside the value, where every admissible value writes
        the same bytes next and then two part: those bytes' tokens (the ``:`` after an hour), where a pre-token ends
        after them before every byte that may follow (:meth:`Vocabulary.ends_pretoken`; the next bytes lie between the
        first and the last admissible value's); empty where it may not and their first token could run past them (a
        longer token starts with them: ``TokenIndex.crosses``), as before a value's `` "`` where the same holds.
        ``kept``: the frame's :attr:`_Frame.value`, where it has one."""
        place, counts = self._value_at(state, kept)
        before = b""
        if place is None:  # before a wide value: in the fixed bytes that lead to its slot (the `` "`` of a time)
            place = self._wide_place(state)
            if place is None or not place[2][1] or not self.session.wide(place[0]):
                return None
            counts, before = self._wide_counts(place[0], place[1]), place[2][1]
        if counts is None:
            return None
        m, sub, counts = place[1], place[2][2], counts[1]
        if not before and admissible_branches(m, counts, sub):
            return ()
        common = admissible_common(m, counts, sub)
        if common is None:
            return None
        data = before + common
        if not data or not data.isascii():
            return None
        ends = admissible_ends(m, counts, sub + common)
        if ends is None:
            return None  # (not met: ``common`` is admissible values' bytes)
        a, z = ends
        n = len(sub) + len(common)
        if not (len(a) > n and len(z) > n and a[n] != z[n]):
            return None  # no two values part after them (one is complete there): the planner plans on past the value
        if not self._ends_pretoken(data, a[n], z[n]):
            return () if self._c.index.crosses(data) else None
        if before:
            return None  # (the planner walks the fixed bytes before the slot)
        plan: list[_Step] = []
        st = state
        for t in self._encode(data.decode()):
            tb = self.vocab.tokens[t]
            after = None if tb is None else self._in_value_at(st, tb)
            if after is None:
                return None  # (not met: no value is whole inside those bytes)
            st = after[0]
            plan.append(_Step(t, st, (), after[1]))
        return tuple(plan)

    def _ends_pretoken(self, data: bytes, lo: int, hi: int) -> bool:
        """:meth:`Vocabulary.ends_pretoken` for ASCII ``data`` and a next byte in ``[lo, hi]``, kept per vocabulary
        (the same few questions in every record: ``:`` before the minutes, `` "`` before a time)."""
        memo = self._c.index.ends
        key = (data, lo, hi)
        hit = memo.get(key)
        if hit is None:
            hit = self.vocab.ends_pretoken(data.decode(), range(lo, hi + 1))
            if len(memo) > 4096:
                memo.clear()
            memo[key] = hit
        return hit

    def _encode(self, text: str) -> tuple[int, ...]:
        """The vocabulary's encoding of a planner's ``text`` (:meth:`Vocabulary.encode`), kept per vocabulary."""
        index = self._c.index
        memo = index.encoded
        ids = memo.get(text)
        if ids is None:
            # a new text (a certain run's, with the record's values in it) whose pre-tokens the encoder keeps: split
            # and joined in one call into C from here (the vocabulary's encode, its Python, was 18 us a text)
            fast = index.known
            if fast is _NONE:
                fast = index.known = self.vocab.known_pieces()
            hit = fast[0](text, fast[1]) if fast is not None else None
            if hit is not None:
                ids = tuple(hit[0])
                fast[2].last = (text, hit[1])  # (as the encoder sets it: Vocabulary.ends_pretoken reads it next)
            else:
                ids = tuple(self.vocab.encode(text))
            if len(text) <= 256:
                if len(memo) >= 4096:
                    memo.clear()
                memo[text] = ids
        return ids

    def _ends_before(self, text: str, follow: frozenset[int]) -> bool:
        """:meth:`Vocabulary.ends_pretoken` of a planner's ``text`` before the bytes ``follow``, kept per vocabulary."""
        memo = self._c.index.ends_before
        key = (text, follow)
        hit = memo.get(key)
        if hit is None:
            hit = self.vocab.ends_pretoken(text, follow)
            if len(memo) >= 4096:
                memo.clear()
            memo[key] = hit
        return hit

    def _value_at(self, state: State, kept: Any = None) -> tuple[Any, Any]:
        """The slot's place (:meth:`_slot_place`; ``None`` outside a wide value) and its admissible counts
        (:meth:`_wide_counts`; ``None`` outside or where not settled) at ``state``: what the consume into the value
        kept on the frame (``kept``, its :attr:`_Frame.value`) while the assignment stands, else found."""
        if kept is not None and kept[2] is self._key():
            return kept[0], kept[1]
        place = self._slot_place(state)
        return place, (None if place is None else self._wide_counts(place[0], place[1]))

    def _wide_counts(self, pointer: str, m: EnumSlot) -> tuple[np.ndarray, bytes] | None:
        """The admissible counts below each of ``m``'s sorted renderings (:func:`admissible_counts`: as an array, for
        a row's pass in C, and as its bytes, for single look-ups: :func:`span_has`), where the session has settled
        the wide field ``pointer`` under the current assignment (kept per assignment: a value's digits are asked in a
        row); ``None`` where it has not."""
        fixed = self._key()
        last = self._last_counts.get(pointer)  # the digits of one value ask in a row: one identity check (the
        if last is not None and last[0] is fixed:  # session keeps its key object while the assignment stands)
            return last[1]
        key = (pointer, fixed)
        counts = self._counts.get(key)
        if counts is None:
            mask = self.session.questions(pointer).settled()
            if mask is None:
                return None  # (not kept: a later question may settle it)
            counts = admissible_counts(m, mask)
            if len(self._counts) > 4096:
                self._counts.clear()
            self._counts[key] = counts
        self._last_counts[pointer] = (fixed, counts)
        return counts

    def _wide_row(self, state: State, place: Any = None, got: Any = None,
                  out: np.ndarray | None = None, later: bool = False) -> Any:
        """The mask row at ``state`` from its :class:`WideTable`, where ``state`` is before or inside a wide field
        slot whose admissible values the session has settled; ``None`` elsewhere (the walk of the token index). With
        ``place`` and ``got`` (:meth:`_wide_counts`), where the caller has them; with ``out``, written there; with
        ``later`` (and no ``out``), as a :class:`_WideRow` to write where the model chooses."""
        if place is None:
            place = self._wide_place(state)
            if place is None or not self.session.wide(place[0]):
                return None
        # (indexed: ``place`` and ``got`` are untyped, and compiled, unpacking them made an iterator each)
        pointer, m, key, may_finish = place[0], place[1], place[2], place[3]
        if got is None:
            got = self._wide_counts(pointer, m)  # the admissible count below each sorted position
            if got is None:
                return None
        counts, below = got[0], got[1]
        index = self._c.index
        table = index.wide.get(key)
        if table is None or table.matcher is not m:
            table = WideTable.build(index, m, *key[1:])
            with index.lock:
                _remember(index.wide, key, table, 4096)
        defer = later and out is None and _rows is not None
        if not defer:
            out = table.row(counts, self._c.words, out)
        extra: list[int] = []
        f = None
        for j, tid, data in table.checks:  # tokens running past a value: checked under the solver
            if span_has(below, j, j + 1):
                f = f or self._admissible()
                if self._suffix_ok(state, data, (), f):
                    extra.append(tid)
        if may_finish and self.layout.finish(state, admissible=f or self._admissible()) is not None:
            extra += self._c.eos.tolist()
        if defer:
            return _WideRow(table.packed, counts, np.array(extra, dtype=np.int64).tobytes() if extra else b"")
        assert out is not None
        if extra:  # (one C call: numpy's bitwise_or.at costs 5-10 us on a handful of ids)
            if _rows is not None:
                _rows.or_bits(out, np.array(extra, dtype=np.int64).tobytes())
            else:
                np.bitwise_or.at(out.view(np.uint32), *_word_bits(np.array(extra, dtype=np.int64)))
        return out.view(np.int32)

    def _choice_table(self, state: State, choice: Any = _NONE) -> ChoiceTable | None:
        """The :class:`ChoiceTable` at ``state`` (built on first use, kept per layout), or ``None`` where none applies
        or the field is wide (asked piecewise, never listed: not built; another declaration may list it)."""
        tables = self._c.choices
        table = tables.get(state, _NONE)
        if table is _NONE:
            choice = self.layout.value_choice(state) if choice is _NONE else choice
            if choice is not None and choice[0] in self._fields and self.session.wide(choice[0]):
                return None
            table = None if choice is None else build_choice_table(self.layout, self._c.index, state, choice)
            with self._c.index.lock:
                _remember(tables, state, table, CHOICE_TABLES)
        return table

    def _learn_texts(self) -> None:
        """Encode the string values of the declaration's narrow fields (at most :data:`PRIME_TEXT_VALUES` each), once
        per compiled declaration: a planner's certain run spells them (``"person": "Elizabeth"``), and a pre-token
        the tokenizer's encoder has not met is encoded, checked and kept there, on the step loop (25 us each on
        SmolLM2, about five per meeting record). A value's own pre-tokens are those of its text inside the record
        wherever the split starts a pre-token at its first byte (after the ``"`` of a string, in the splits of
        the bundled tokenizers); elsewhere this costs a little set-up time and saves nothing."""
        c = self._c
        if c.texts_known:
            return
        c.texts_known = True
        texts: dict[str, None] = {}  # (each once: a trip's legs share their cities)
        for f in self._fields.values():
            if f.size <= PRIME_TEXT_VALUES and not isinstance(f.values, range):
                for v in f.values:
                    if type(v) is str and v:
                        texts[v] = None
        encode = self.vocab.encode
        for v in texts:
            try:
                encode(v)
            except VocabularyError:  # (a value the vocabulary cannot spell: the planner meets it too)
                pass

    def _build_choice_tables(self, seconds: float = PRIME_CHOICES_SECONDS) -> int:
        """Build ahead the choice tables of the value slots whose field has several admissible values at the root,
        once per (layout, field): a first visit of a choice then costs a dictionary lookup, as every later one
        does, instead of the table's build (0.1-0.3 ms, on the path of the mask the model waits for). A walk of the
        layout alone, breadth first, within ``seconds``: every byte inside those slots (their prefixes are the
        states the model may choose at), one value of the others (certain, wide, done before or too many to list)
        to get past them, and every branch of the fixed syntax; free slots end it. What the budget leaves is built
        on first visit, as before. A table depends on the state alone, so one built here is the one a first visit
        would build. Returns the tables built."""
        layout, session, fields, done = self.layout, self.session, self._fields, self._c.done
        todo = {p for p, f in fields.items() if p not in done and 1 < f.size <= CHOICE_MAX and not session.wide(p)
                and len(session.admissible(p)) > 1}
        if not todo:
            return 0
        deadline = _clock() + seconds
        seen: set[State] = set()
        queue = deque([layout.start()])
        built = 0
        while queue and len(seen) < PRIME_CHOICES_STATES and _clock() < deadline:
            st = queue.popleft()
            if st in seen:
                continue
            seen.add(st)
            slot = layout.slot(st)
            if slot is not None and slot.kind == "free":
                continue
            choice = layout.value_choice(st)
            if choice is not None:
                pointer, _, m, before, sub = choice
                lo, hi = m._span(sub)
                if pointer not in todo or hi - lo > CHOICE_MAX:
                    if not sub:  # one value to get past the slot
                        after = layout.advance(st, before + m.renders[lo])
                        if after is not None:
                            queue.append(after)
                    continue
                if st not in self._c.choices:
                    self._choice_table(st, choice)
                    built += 1
            for b in sorted(layout.allowed_next_bytes(st)):
                nxt = layout.advance(st, bytes((b,)))
                if nxt is not None and nxt not in seen:
                    queue.append(nxt)
        with self._c.index.lock:  # done for every declaration with the layout (past the budget: left to first visits)
            done.update(todo)
        return built

    def _build_wide_tables(self) -> int:
        """Build ahead the :class:`WideTable` of every prefix where a wide field's renderings branch within the next
        two bytes (where a model may choose inside the value, or a planner stops before a token that could run into a
        choice: 278 of a day of clock times' 2,618 prefixes; :func:`branch_prefixes`), once per matcher and
        vocabulary, all of them (:meth:`WideTable.build_many`), and those of the slot's opening where a planner stops
        in the fixed bytes before it, for the declarations whose wide fields the session settles (difference
        components): a first choice inside a time value then finds its table (on first use,
        one at a time, 0.2-3 ms each on the path of the mask the model waits for). Domains above
        :data:`PRIME_WIDE_VALUES` are left to first use. Returns the tables built.

        (This was bounded by a time budget, 50 ms: on a slower machine the list of prefixes alone spent it, so the
        first records of a process met their tables unbuilt, one by one, at the model's choices.)"""
        dm = getattr(self.session, "_difference", None)
        if dm is None or not dm.components or not WIDE_TABLES:
            return 0
        index, wide_domain = self._c.index, self.session.wide_domain
        matchers = {id(ins[2]): ins[2] for ins in self.layout._code
                    if ins[0] == FIELD and type(ins[2]) is EnumSlot and len(ins[2].domain) > wide_domain}
        built = 0
        for key, m in matchers.items():
            m.fill_spans()  # (the slot's spans, once per matcher)
            if index.wide_done.get(key) is m or len(m.renders) > PRIME_WIDE_VALUES:
                continue
            # where a planner stops inside the fixed bytes before the slot (a token there could run into the value):
            # the ends of the literal before it that a longer token starts with
            befores = {lit[k:] for lit in _lead_ins(self.layout, m) for k in range(len(lit)) if index.crosses(lit[k:])}
            with index.lock:
                todo = {(b"", sub) for sub in branch_prefixes(m) if sub not in m.by_render}
                todo |= {(before, b"") for before in befores}
                todo = {w for w in todo if (key, *w) not in index.wide}
            tables = {(b"", sub): table for sub, table in
                      WideTable.build_many(index, m, sorted(sub for b, sub in todo if not b)).items()}
            for before in sorted(b for b, _ in todo if b):
                tables[(before, b"")] = WideTable.build_many(index, m, [b""], before)[b""]
            with index.lock:
                for (before, sub), table in tables.items():
                    _remember(index.wide, (key, before, sub), table, 4096)
                index.wide_done[key] = m
            built += len(tables)
        return built

    def _root_rows(self, seconds: float = PRIME_ROWS_SECONDS) -> int:
        """Fill, within ``seconds``, the choice tables' rows for the admissible sets at the root (kept per set, so a
        later declaration with the same sets finds them): a choice that follows another one, with no certain run
        between them to compute its row ahead (:meth:`_row_after`), then finds it (a row costs 5 us warm, 20-30 us
        on its first build between other work). Returns the rows looked up."""
        session, fields, lock = self.session, self._fields, self._c.index.lock
        deadline = _clock() + seconds
        masks: dict[str, bytes | None] = {}
        n = 0
        with lock:
            tables = list(self._c.choices.values())
        for table in tables:
            if table is None or table.pointer not in fields:
                continue
            if _clock() > deadline:
                break
            mask = masks.get(table.pointer, _NONE)
            if mask is _NONE:
                p = table.pointer
                mask = masks[p] = None if session.wide(p) or len(session.admissible(p)) < 2 else \
                    session.admissible_mask(p)
            if mask is not None:
                table.row_for(mask, lock)
                n += 1
        return n

    def _opening(self, st: State, limit: int = 16) -> tuple[Any, Any] | None:
        """Where ``st`` is a few bytes of fixed syntax before a free string that only fixed syntax follows to the
        record's end (a trip's closing note): the string's shared tables and a key that decides the mask there
        whatever the declaration or the assignment (the bytes before, the string's lengths, the bytes after).
        Found on the layout alone (a field slot on the way is no opening), once per state of a layout."""
        openings = self._c.openings
        hit = openings.get(st, _NONE)
        if hit is _NONE:
            hit = self._opening_at(st, limit)
            with self._c.index.lock:
                _remember(openings, st, hit, 4096)
        return hit

    def _opening_at(self, st: State, limit: int) -> tuple[Any, Any] | None:
        layout = self.layout
        before = bytearray()
        while len(before) <= limit:
            fs = layout.free_string(st)
            if fs is not None:
                slot, sub = fs
                _, phase, s, n, pending = sub
                if not before or phase != 1 or n != 0 or pending or s != slot.dfa.initial:
                    return None
                tail = self._syntax_tail(st)
                if tail is None:
                    return None
                tables = self._c.string_masks(slot).tables
                return tables, (bytes(before), tail, slot.dfa.min_len, slot.dfa.max_len)
            step = self._syntax_step(st, quote=True)
            if step is None:
                return None
            data, st = step
            before += data
        return None

    def _syntax_step(self, st: State, quote: bool = False) -> tuple[bytes, State] | None:
        """The rest of the fixed syntax at ``st`` (with ``quote``, or a free string's opening quote) and the state
        after it, on the layout alone: ``None`` at a field slot or where a value completes."""
        layout = self.layout
        jump = layout.forced_bytes(st)  # unfiltered: fixed syntax only (a field slot's bytes: None)
        if jump is None:
            slot = layout.slot(st) if quote else None
            nxt = layout.allowed_next_bytes(st) if slot is not None and slot.kind == "free" else ()
            if len(nxt) != 1:
                return None
            data = bytes(nxt)
        else:
            data, at = jump
            if len(data) > 1:
                st = at(len(data) - 1)
        after = layout.advance(st, data[-1:])
        return None if after is None or after.events else (data, after)

    def _syntax_tail(self, st: State, limit: int = 64) -> bytes | None:
        """The bytes after the free string at ``st`` when they are fixed syntax to the record's end (on the layout
        alone, no filter: a field slot on the way gives ``None``)."""
        layout = self.layout
        after = layout.after_free_slot(st)
        out = bytearray()
        while after is not None and len(out) <= limit:
            if layout.accepting(after):
                return bytes(out) if not layout.some_next_bytes(after, 1) else None
            step = self._syntax_step(after)
            if step is None:
                return None
            data, after = step
            out += data
        return None

    def fill_mask(self, row: np.ndarray) -> None:
        """Write the admitted token ids into ``row``: int32, ``ceil(vocab.size / 32)`` words, bit ``t % 32`` of word
        ``t // 32`` (XGrammar's layout). After termination nothing is admitted."""
        t = _clock()
        # (the dtype by identity first: numpy's comparison with a type converts it, code that is out of cache where
        # a choice comes after a long certain run; the flags read once)
        dt = row.dtype
        if dt is not _INT32 and dt != _INT32 or row.shape != (self._c.words,):
            raise ValueError(f"a mask row is int32 of shape ({self._c.words},), not {row.dtype} {row.shape}")
        contiguous: bool = row.flags.c_contiguous
        frame = self._frames[-1]
        place = _NONE
        if WIDE_TABLES and frame.row is None and not frame.plan and not frame.terminated and contiguous:
            written, place = self._value_fill(frame, row)  # (a strided row, a column of a batch: the copy below)
            if written:
                self.stats.masks += 1
                self.stats.mask_seconds += _clock() - t
                return
        plan: Any = ()
        if self.mode == "canonical" and not frame.terminated:
            plan = self._planned().plan
        if plan:
            t0 = plan[frame.at].token
            row[:] = 0
            bit = 1 << (t0 & 31)
            row[t0 >> 5] = bit - (1 << 32) if bit >> 31 else bit  # (as int32)
        elif _rows is not None and contiguous:  # (checked above: int32, the row's words)
            got = self._exact_row(place, later=True)
            if type(got) is _WideRow:
                got.write(row)
            elif type(got) is _IdsRow:
                got.write(row)
            else:
                _rows.copy_row(row, got)
        else:
            row[:] = self._exact_row(place)
        self.stats.masks += 1
        self.stats.mask_seconds += _clock() - t

    def _value_fill(self, frame: _Frame, row: np.ndarray) -> tuple[bool, Any]:
        """Write the mask row into the caller's ``row`` where ``frame`` is inside a settled wide field's value
        (:meth:`_slot_place`: each digit of a clock time, most of meeting's choices) and no next byte is certain: its
        :class:`WideTable` row in one C call, from the place and admissible counts the consume into the value kept on
        the frame, the plan set empty (:meth:`_value_plan`). Before, :meth:`_plan` and :meth:`_exact_row` each
        found the slot and the counts, and the row went into a new array and was copied out. Returns ``(written,
        place)``: nothing is written elsewhere, nor, in canonical mode, where a byte is certain (the planner's run
        then; exact mode writes the row there too); ``place`` is the slot's place (``None``: not inside a wide value),
        which :meth:`_row_at` then takes instead of finding it again. The row is not kept on the frame (a position
        inside a value is met once; a verify step's redo computes it again). Where the engine asked for its draft
        first (:meth:`certain_run`), the row was computed then and this is not reached."""
        place, got = self._value_at(frame.state, frame.value)
        if got is None:
            return False, place
        if frame.plan is None and self.mode == "canonical":
            if not admissible_branches(place[1], got[1], place[2][2]):
                return False, place
            frame.plan = ()
        table = self._c.index.wide.get(place[2])
        if table is None or table.matcher is not place[1] or table.checks or _rows is None:
            self._wide_row(frame.state, place, got, row)  # (a table to build, or tokens to check: the general row)
        else:  # most digits: one call
            _rows.wide_fill(row, got[0], table.packed)
        return True, place

    def allowed_tokens(self) -> np.ndarray:
        """The admitted ids as a sorted array (what :meth:`fill_mask` writes)."""
        row = np.zeros(self._c.words, dtype=np.int32)
        self.fill_mask(row)
        return mask_to_ids(row, self.vocab.size)

    # -- certain runs -------------------------------------------------------------------------------------------
    def _plan(self, ahead: bool = False) -> tuple[_Step, ...]:
        """The current position's certain run (:meth:`_planned`)."""
        frame = self._planned(ahead)
        plan = frame.plan
        return plan[frame.at:] if frame.at else plan  # type: ignore[index,return-value]  # (planned)

    def _planned(self, ahead: bool = False) -> _Frame:
        """The current frame, its certain run planned (once per position: ``plan[at:]``). A newly planned run also
        computes the mask row where it ends (:meth:`_row_after`); with ``ahead`` (the engine asking for its draft,
        :meth:`certain_run`), an empty run computes the row here, where the model chooses next: as at a run's end, the
        row is then ready when the forward pass's logits are (the constraint service computes it while the engine
        runs that pass), and the fill copies it."""
        frame = self._frames[-1]
        if frame.plan is None:
            t = _clock()
            free = self._free_choice(frame.state)
            inside = None if free or not WIDE_TABLES else self._value_plan(frame.state, frame.value)
            if free:
                frame.plan = ()  # not kept in the cache: a long string's states would crowd the others out
            elif inside is not None:  # in or before a wide value (not kept either: met once per record)
                frame.plan = inside
                if inside and ROW_AHEAD and self.mode == "canonical":
                    self._row_after(inside, forced=False)
            else:
                key = (frame.state, self._key())
                plan = self._c.plans.get(key)
                fresh = plan is None
                if fresh:
                    plan = _remember(self._c.plans, key, self._compute_plan(frame.state), 4096)
                frame.plan = plan
                if fresh and ROW_AHEAD and plan and plan[-1].state is not None and self.mode == "canonical":
                    self._row_after(plan)
            if ahead and ROW_AHEAD and not frame.plan and frame.row is None and self.mode == "canonical":
                # the model chooses here: its row with the (empty) draft (inside a wide value, from the slot found)
                self._exact_row(self._value_at(frame.state, frame.value)[0] if WIDE_TABLES else None, later=True)
            self.stats.plan_seconds += _clock() - t
        return frame

    def _row_after(self, plan: tuple[_Step, ...], forced: bool = True) -> None:
        """Compute and keep the mask row where ``plan`` ends, the model's next choice: its tokens are taken and
        undone, so taking them again restores their frames and the row is a cache hit then. Run with the plan, before
        the verify step whose logits that choice is sampled from (off the path between the forward pass and the
        sampler; a constraint worker publishes this row with the draft). With no plan: the row here. What was
        taken is undone even where the row fails. With :data:`ROW_AFTER_FORCED`, also the row after the first token
        of the fixed bytes held back at the run's end (:meth:`_forced_token`), except before a settled wide field's
        value, or where ``forced`` is false (a run inside one, :meth:`_value_plan`).
        (Assigning the plan's values for the while instead, without taking its tokens, measured 15% more CPU per token
        on trip with a free note, for no gain on meeting.)"""
        start = len(self._frames)
        try:
            self._take(plan)
            self._exact_row(later=True)
            if not forced:
                return
            # before a settled wide field's value, the row after the held-back bytes is inside the value, where a
            # fill writes it in one call (_value_fill) or a draft's plan computes it (_plan): not computed ahead here
            place = self._wide_place(self._frames[-1].state)
            wide = place is not None and self.session.wide(place[0]) and \
                self._wide_counts(place[0], place[1]) is not None
            tid = self._forced_token() if ROW_AFTER_FORCED and not wide else None
            if tid is not None:  # the bytes every record writes next, held back as a token could run past them
                self.consume(tid)
                self._exact_row(later=True)
        finally:
            self.rollback(len(self._frames) - start)

    def _take(self, plan: tuple[_Step, ...]) -> int:
        """Take the tokens of ``plan``, the current position's own plan, as :meth:`consume` takes planned tokens (a
        frame each with the step's state, its values assigned; a frame a rollback kept for the same token taken
        again), in one call: the checks ``consume`` makes per token hold for a plan's steps by construction.
        Returns how many were taken (all; where a step's assignment raises, that step's push is undone and the error
        raised, the steps before it taken, as a loop of ``consume`` would leave them)."""
        t0 = _clock()
        frames, redo, session, fields = self._frames, self._redo, self.session, self._fields
        if frames[-1].plan is not plan or frames[-1].at:
            raise ValueError("_take takes the current position's own plan")
        taken = 0
        try:
            for i, step in enumerate(plan):
                token = step.token
                if redo:
                    if redo[-1].token == token:
                        again = redo.pop()
                        if again.pushed:
                            session.push()
                            for p, v in again.assigned:
                                session.assign(p, v)
                        frames.append(again)
                        taken += 1
                        continue
                    redo.clear()
                if step.state is None:  # EOS: left to consume
                    raise ValueError("_take takes the steps before a plan's end of sequence")
                assigned = _assigned(step.events, fields)
                if assigned:
                    session.push()
                    try:
                        for p, v in assigned:
                            session.assign(p, v)
                    except BaseException:
                        session.pop()
                        raise
                more = i + 1 < len(plan)  # (the run goes on: the next frame holds it, one step on)
                frames.append(_Frame(step.frame_state(), pushed=bool(assigned), plan=plan if more else None,
                                     token=token, assigned=assigned, value=step.value, at=i + 1 if more else 0))
                taken += 1
        finally:
            self.stats.consume_seconds += _clock() - t0
        return taken

    def _forced_token(self) -> int | None:
        """Where the bytes every valid record writes next are fixed (a planner stops before them where a longer
        token could run into the choice after them: the `` "`` before a clock time), the first token of their
        canonical encoding, if admitted here: the token a model writing them takes. A row after it is then computed
        with the row here (the model's choice inside the value next)."""
        layout, f = self.layout, self._admissible()
        st: State | None = self._frames[-1].state
        data = b""
        while st is not None and len(data) < FORCED_AHEAD_BYTES:  # up to a choice, a value's end or the limit
            jump = layout.forced_bytes(st, admissible=f)
            if jump is not None:  # fixed syntax or a certain value
                more, at = jump
                if len(more) > 1:
                    st = at(len(more) - 1)
            else:  # one admissible next byte (a value's opening quote)
                nxt = layout.some_next_bytes(st, 2, admissible=f)
                if len(nxt) != 1:
                    break
                more = bytes(nxt)
            data += more
            st = layout.advance(st, more[-1:], admissible=f)
            if st is not None and st.events:
                break
        text, _ = _utf8_prefix(data[:FORCED_AHEAD_BYTES])
        if not text:
            return None
        tid = self._encode(text)[0]
        row = self._exact_row()
        return tid if int(row[tid >> 5]) >> (tid & 31) & 1 else None

    def _free_choice(self, state: State) -> bool:
        """Whether ``state`` is inside a free string with two next bytes that stay inside it (nothing certain)."""
        fs = self.layout.free_string(state)
        if fs is None:
            return False
        nb = fs[0].next_bytes(fs[1])
        return len(nb) - (0x22 in nb) > 1

    def _compute_plan(self, state: State) -> tuple[_Step, ...]:
        """The canonical tokens of the bytes every valid continuation starts with, stopped before a token that
        could merge with what follows; EOS after them when the record then ends. Each step keeps the state after
        it (inside a stretch of fixed bytes, how to make it: :class:`_Later`), so taking a planned token costs no
        matching."""
        layout, index = self.layout, self._c.index
        if self._free_choice(state):
            return ()  # inside a free string, two bytes that stay inside it: nothing is certain
        eos = self.vocab.eos_token_ids
        nxt: frozenset[int]  # the one next byte where no jump is forced
        # the forced bytes, each value completed on the way conditioning what follows it (those the filter in hand
        # knows certain add nothing: it answers the same)
        extra: list[tuple[str, Any]] = []
        f = self._admissible()
        out = bytearray()
        st = state
        # where each stretch of ``out`` starts and its states: a State (one byte stepped) or a jump's function of
        # the bytes taken into it (offsets ascending; of two at one offset the later one holds)
        mark_at: list[int] = [0]
        mark_st: list[Any] = [st]
        events: dict[int, tuple[Any, ...]] = {}
        while True:
            jump = layout.forced_bytes(st, admissible=f)
            if jump is not None:  # fixed syntax or a certain value: its bytes in one step, the last one stepped
                data, at = jump
                if len(data) > 1:
                    mark_at.append(len(out))
                    mark_st.append(at)
                    out += data[:-1]
                    st = at(len(data) - 1)
                one = data[-1:]
                b = one[0]
            elif layout.accepting(st, admissible=f) or layout.branches(st, admissible=f):
                break
            else:
                nxt = layout.some_next_bytes(st, 2, admissible=f)
                if len(nxt) != 1:
                    break
                (b,) = nxt
                one = _ONE_BYTE[b]  # (kept: a bytes((b,)) and a next(iter(...)) were generic calls at every byte)
            st2 = layout.advance(st, one, admissible=f)
            if st2 is None:  # only a filter that strands the walk gets here: stop the run before the byte
                break
            st = st2
            out.append(b)
            mark_at.append(len(out))
            mark_st.append(st)
            if st.events:
                events[len(out)] = st.events
                new = self._informative(st.events, f)
                if new:
                    extra += new
                    f = self._admissible(extra=list(extra))
        forced = bytes(out)
        end = layout.accepting(st, admissible=f) and not layout.some_next_bytes(st, 1, admissible=f)
        if not forced:
            return (_Step(eos[0], None),) if end and eos else ()
        text, cut = _utf8_prefix(forced)
        if not text:
            return ()
        end = end and cut == len(forced)
        plan: list[_Step] = []
        at = 0
        data = forced[:cut]
        where = sorted(events)  # the offsets where values complete
        tokens, marks, j, w = self.vocab.tokens, len(mark_at), 0, 0  # (tokens advance: the last mark, event so far)
        longest, size = index.longest, len(data)
        final = -1  # whether a pre-token ends where the bytes do, whatever follows (Vocabulary.ends_pretoken); -1: not
        # asked yet
        for t in self._encode(text):
            tb = tokens[t]
            if tb is None or data[at:at + len(tb)] != tb:
                break  # the canonical encoding does not spell the bytes token by token: stop here
            # a longer token starting here could run into what follows (none can where the rest is as long as the
            # longest token with its first byte: crosses' own first test, made here without slicing the rest), unless
            # the tokenizer's split ends a pre-token at the run's end before every byte that may follow: merges never
            # cross it (the `` "`` before a clock time's first digit)
            if not end and size - at < longest[data[at]] and index.crosses(data[at:]):
                if final < 0:  # (first the bytes that may follow without the relations, found sooner: where
                    # every one of them keeps the pre-token, those the relations admit do; else those: 14 us)
                    final = int(cut == len(forced) and (self._ends_before(text, layout.allowed_next_bytes(st)) or
                                self._ends_before(text, layout.allowed_next_bytes(st, admissible=f))))
                if not final:
                    break
            at += len(tb)
            evs: tuple[Any, ...] = ()
            while w < len(where) and where[w] <= at:  # the values completed inside the token
                evs += events[where[w]]
                w += 1
            while j + 1 < marks and mark_at[j + 1] <= at:  # the last mark at or before ``at``
                j += 1
            s = mark_st[j]
            plan.append(_Step(t, s, evs) if type(s) is State else _Later(t, s, at - mark_at[j], evs))
        if end and at == len(data) and eos:
            plan.append(_Step(eos[0], None))
        return tuple(plan)

    def certain_run(self, max_tokens: int = 64) -> list[int]:
        """The tokens certain from here (the draft), at most ``max_tokens``; ends with EOS when the record then
        ends. Consuming them in order is always admitted."""
        if self._frames[-1].terminated or max_tokens <= 0:
            return []
        frame = self._planned(ahead=True)
        plan: tuple[_Step, ...] = frame.plan  # type: ignore[assignment]  # (planned)
        # (indexed, not sliced: compiled, a slice of an optional tuple and a comprehension over it were generic calls,
        # 1,300 instructions a call, asked at every token of a run)
        out: list[int] = []
        for i in range(frame.at, min(len(plan), frame.at + max_tokens)):
            out.append(plan[i].token)
        return out

    # -- consuming ----------------------------------------------------------------------------------------------
    def consume(self, token: int) -> None:
        """Append ``token``; raises :class:`TokenRejected` (and changes nothing) when the mask does not admit it."""
        frame = self._frames[-1]
        if frame.terminated:
            raise TokenRejected("the record is already terminated")
        token = int(token)
        redo = self._redo
        if redo:  # the token a rollback undid here: its frame again, as it was (state, plan, assignments)
            if redo[-1].token == token:
                again = redo.pop()
                if again.pushed:
                    self.session.push()
                    for p, v in again.assigned:
                        self.session.assign(p, v)
                self._frames.append(again)
                return
            redo.clear()  # another token: what was undone is gone
        if self.mode == "canonical":
            self._planned()
        plan, at = frame.plan, frame.at  # the run from here is plan[at:]
        if self.mode == "canonical" and plan and token != plan[at].token:
            raise TokenRejected(f"token {token} at a certain position (the certain token is {plan[at].token})")
        step = plan[at] if plan and token == plan[at].token else None
        # the next frame's run: this one's, one step on (None where it ends, or the token is not the planned one)
        rest = plan if step is not None and at + 1 < len(plan) else None  # type: ignore[arg-type]
        more = at + 1 if rest is not None else 0
        if step is not None and step.state is not None:  # a planned token: its state is known
            assigned = _assigned(step.events, self._fields)
            if assigned:  # (a token that completes no value leaves the assignment as it is: nothing to save)
                self.session.push()
                try:
                    for p, v in assigned:
                        self.session.assign(p, v)
                except BaseException:
                    self.session.pop()
                    raise
            self._frames.append(_Frame(step.frame_state(), pushed=bool(assigned), plan=rest, token=token,
                                       assigned=assigned, value=step.value, at=more))
            return
        t0 = _clock()
        if token in self._eos and self.vocab.tokens[token] is None:
            if self.layout.finish(frame.state, admissible=self._admissible()) is None:
                raise TokenRejected("end of sequence before the record is complete")
            self._frames.append(_Frame(frame.state, pushed=False, plan=(), terminated=True, token=token))
            self.stats.consume_seconds += _clock() - t0
            return
        data = self.vocab.token_bytes(token)
        if data is None:
            raise TokenRejected(f"token {token} is a special token, not record content")
        layout = self.layout
        fs = layout.free_string(frame.state)
        if fs is not None:  # inside a free string: a token that stays inside is one lookup in its token table
            core = self._c.string_masks(fs[0]).step(fs[1], token)
            if core is not None:
                self._frames.append(_Frame(layout.in_string(frame.state, data, core), pushed=False,
                                           plan=rest, token=token, at=more))
                self.stats.consume_seconds += _clock() - t0
                return
        if WIDE_TABLES:  # inside a settled wide field's value, a token that stays inside it: one span look-up
            inside = self._in_value_at(frame.state, data)
            if inside is not None:
                self._frames.append(_Frame(inside[0], pushed=False, plan=rest, token=token, value=inside[1],
                                           at=more))
                self.stats.consume_seconds += _clock() - t0
                return
        pushed = False  # the assignment is saved at the first value the token completes (most complete none)
        st: State | None = frame.state
        done: list[tuple[str, Any]] = []
        try:
            f = self._admissible()
            i = 0
            while i < len(data):
                st, k = layout.advance_in_string(st, data[i:])  # type: ignore[arg-type]
                if k:  # the bytes that stay inside a free string, in one step
                    i += k
                    continue
                st = layout.advance(st, data[i:i + 1], admissible=f)
                i += 1
                if st is None:
                    raise TokenRejected(f"token {token} ({data!r}) leaves every valid record")
                if st.events:
                    for p, v in st.events:
                        if p in self._fields:
                            if not pushed:
                                self.session.push()
                                pushed = True
                            self.session.assign(p, v)
                            done.append((p, v))
                    f = self._admissible()  # the assignment changed: a new filter
        except BaseException:
            if pushed:
                self.session.pop()
            raise
        self._frames.append(_Frame(st, pushed=pushed, plan=rest, at=more, token=token,  # type: ignore[arg-type]
                                   assigned=tuple(done)))
        self.stats.consume_seconds += _clock() - t0

    def rollback(self, k: int = 1) -> None:
        """Undo the last ``k`` tokens (any depth within the request). The frames undone are kept: taking the same
        tokens again (a verify step's draft, taken to fill the row after it, undone, then committed) restores them
        without matching or planning again."""
        if k < 0 or k > len(self._frames) - 1:
            raise ValueError(f"cannot roll back {k} tokens: {len(self._frames) - 1} consumed")
        for _ in range(k):
            frame = self._frames.pop()
            if frame.pushed:
                self.session.pop()
            self._redo.append(frame)

    # -- state --------------------------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """The tokens consumed, in order."""
        return [f.token for f in self._frames[1:]]  # type: ignore[misc]

    def output(self) -> bytes:
        """The record bytes written so far (EOS excluded)."""
        return b"".join(self.vocab.tokens[f.token] or b"" for f in self._frames[1:]  # type: ignore[index]
                        if not f.terminated)

    def is_terminated(self) -> bool:
        """Whether EOS was consumed (the record is complete)."""
        return self._frames[-1].terminated

    def is_complete(self) -> bool:
        """Whether the output so far is a whole record (EOS would be admitted)."""
        frame = self._frames[-1]
        return frame.terminated or self.layout.finish(frame.state, admissible=self._admissible()) is not None

    def record(self) -> Any:
        """The record, once complete."""
        if not self.is_complete():
            raise ValueError("the record is not complete yet")
        return json.loads(self.output())


# ---------------------------------------------------------------------------------------------------------- helpers
def _indent(style: str | int | None) -> int | None:
    if style is None or style == "compact":
        return None
    if isinstance(style, int) and not isinstance(style, bool) and style >= 0:
        return style
    if isinstance(style, str) and style.startswith("indent=") and style[7:].isdigit():
        return int(style[7:])
    raise ValueError(f"style must be 'compact', an indent N >= 0 or 'indent=N', not {style!r}")


def _assigned(events: tuple[tuple[str, Any], ...], fields: Any) -> tuple[tuple[str, Any], ...]:
    """The events of a planned step that assign fields of the declaration: the step's own tuple where all of them do
    (the usual case: no new pairs for a frame to keep)."""
    if not events:
        return ()
    for p, _ in events:
        if p not in fields:
            return tuple(e for e in events if e[0] in fields)
    return events


def _utf8_prefix(data: bytes) -> tuple[str, int]:
    """The longest prefix of ``data`` that is whole UTF-8 characters, decoded, and its length in bytes."""
    for cut in range(len(data), max(-1, len(data) - 4), -1):
        try:
            return data[:cut].decode("utf-8"), cut
        except UnicodeDecodeError:
            continue
    return "", 0

