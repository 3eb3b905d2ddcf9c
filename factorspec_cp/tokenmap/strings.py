"""Free strings: exact token masks from token tables per automaton state (DESIGN.md, Tokens).

Inside a free string (a JSON string with ``minLength``/``maxLength``/``pattern``) nearly every token is admitted, so
a walk over the vocabulary per position is the wrong shape. Here each token's run through the string's automaton
is computed once per *core* (pattern state, pending bytes of an unfinished character) and vocabulary: the core it
ends in and the characters it adds, or, for a token that closes the string, the core before the quote, the
characters before it and the bytes after it. The character count is kept apart, so ``maxLength`` does not multiply
the table: a mask at ``n`` characters keeps the token groups ``(end core, k)`` whose end is live at ``n + k``
(one vectorized lookup), which is a few distinct signatures per string; each signature's packed int32 row is
built once. Closing tokens are grouped by the bytes after the quote and checked once per group against what may
follow the string (the caller's verdict, memoized per place and assignment).

:class:`StringTables` (per automaton and vocabulary, length independent) is kept in memory and on disk: one file
per core under ``$FACTORSPEC_CACHE/strings/`` (or the user cache dir), written atomically and checked on load
(format, automaton and vocabulary keys, a SHA-256 of the content); anything else is rebuilt
(:mod:`.stringtables`). :class:`StringMasks` answers for one free string slot of one declaration.

Why not a library (outlines-core 0.2.14, llguidance 1.9.1 and XGrammar were weighed): outlines-core's ``Index`` is
this kind of table (allowed tokens and next state per regex state), but it has no character count apart from the
state, so ``maxLength: 400`` would be 400 copies of every state, each with its token list; llguidance walks the token
trie through its lexer at every mask (no table to keep), the length again inside the lexer state. All three would
also need our string language as a byte regex: canonical escapes only (``json.dumps(ensure_ascii=False)``), lengths
in code points with an escape as one character, ``pattern`` over the decoded characters (``re.search``). None offers
that for JSON strings (XGrammar's differences: :mod:`factorspec_cp.baselines.xgrammar`), and translating a pattern
through escapes and UTF-8 is where exactness would be lost. The table here runs the very automaton
:class:`~.layout.Layout` matches with (:meth:`.StringSlot.entry`), so the two agree by construction.

>>> import factorspec_cp as fs
>>> from factorspec_cp.tokenmap import Vocabulary
>>> spec = fs.Spec({"type": "object", "required": ["note"], "properties": {
...     "note": {"type": "string", "maxLength": 2}}})
>>> vocab = Vocabulary.smollm2()
>>> dec = spec.decoder(vocab, mode="exact")
>>> for t in vocab.encode('{"note": "ab'):
...     dec.consume(t)
>>> sorted(vocab.token_bytes(t) for t in dec.allowed_tokens())  # two characters typed: only the quote closes
[b'"', b'"}']
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .freeslot import StringSlot
from .stringtables import CoreTable, StringTables, remember

if TYPE_CHECKING:
    from .decoder import TokenIndex

__all__ = ["StringMasks", "Closing"]

#: ``closing(rests)``: for each run of bytes after a closing quote, whether what follows the string admits it
#: (``None``: nothing may follow the string here).
Closing = Callable[[list[bytes]], "Sequence[bool] | None"]


def _pack_ids(ids: np.ndarray, words: int) -> np.ndarray:
    bits = np.zeros(words * 32, dtype=bool)
    bits[ids] = True
    return np.packbits(bits, bitorder="little").view("<i4")


def _group_of_id(t: CoreTable, tables: StringTables) -> np.ndarray:
    """Per token id, its group in ``t`` (``len(t.g_cnt)`` where it has none), in the narrowest integer type: one
    such array per table, a byte per token id for a table of fewer than 255 groups."""
    n = len(t.g_cnt)
    dtype = np.uint8 if n < 255 else np.uint16 if n < 65535 else np.int32
    g = np.full(tables.words * 32, n, dtype=dtype)
    g[tables.index.ids[t.in_pos]] = np.repeat(np.arange(n, dtype=dtype), t.g_cnt)
    return g


class _Signature:
    """Which groups and closing tokens of a table the lengths admit after ``n`` characters."""

    __slots__ = ("adm", "key_in", "ex_ok", "key_ex")

    def __init__(self, adm: np.ndarray, ex_ok: np.ndarray):
        self.adm, self.ex_ok = adm, ex_ok
        self.key_in: bytes | None = None if adm.all() else np.packbits(adm).tobytes()
        self.key_ex = np.packbits(ex_ok).tobytes()


# ---------------------------------------------------------------------------------------------------- lengths
class _Liveness:
    """One (minLength, maxLength) on a :class:`StringTables`: whether a group ``(end core, k)`` is still live
    after ``n + k`` characters (or, for a closing token, whether the string may end there).

    Answers are kept in a grid: end cores that share every answer form one class (rows), and character counts
    that share every answer one column: below ``minLength`` each count is its own, then a band where nothing
    changes (every count up to ``maxLength - len(reach) - 1``), then each count up to ``maxLength + 1`` (dead).
    A plain ``maxLength: 400`` has 4 columns; a column is computed the first time a mask needs it."""

    def __init__(self, tables: StringTables, slot: StringSlot):
        self.tables, self.dfa = tables, slot.dfa
        lo, hi = self.dfa.min_len, self.dfa.max_len
        self.lo, self.hi = lo, hi
        self.b1 = -1 if hi is None else hi - len(self.dfa._reach) - 1  # the band is [lo, b1]
        self.ncols = lo + 1 if hi is None else (lo + 1 + hi + 1 - self.b1 if self.b1 >= lo else hi + 2)
        self.keys: list[tuple[Any, ...]] = [("never",)]
        self.at: dict[tuple[Any, ...], int] = {("never",): 0}
        self.grid = np.zeros((8, self.ncols), dtype=bool)
        self.done = np.zeros(self.ncols, dtype=np.int64)  # classes computed per column

    def column(self, m: np.ndarray) -> np.ndarray:
        """The grid column of each character count in ``m``."""
        if self.hi is None:
            return np.minimum(m, self.lo)
        m = np.minimum(m, self.hi + 1)
        if self.b1 < self.lo:
            return m
        return np.where(m <= self.lo, m, np.where(m <= self.b1, self.lo, self.lo + m - self.b1))

    def _count(self, c: int) -> int:
        """A character count of column ``c``."""
        return c if self.hi is None or self.b1 < self.lo or c <= self.lo else self.b1 + (c - self.lo)

    def _lam(self, key: tuple[Any, ...]) -> int:
        k = self.at.get(key)
        if k is None:
            k = self.at[key] = len(self.keys)
            self.keys.append(key)
            if k >= len(self.grid):
                self.grid = np.vstack([self.grid, np.zeros_like(self.grid)])
        return k

    def classes(self, t: CoreTable) -> tuple[np.ndarray, np.ndarray]:
        """The class of each group's end core (staying inside) and of each closing token's core before the quote."""
        hit = t.lams.get(self)
        if hit is None:
            finals = self.dfa.finals
            inside = np.array([self._lam(("p", s, part) if pending else ("c", s))
                               for (s, pending), part in zip(t.ends, t.partials)], dtype=np.int32)
            closing = np.array([self._lam(("x",) if not pending and s in finals else ("never",))
                                for s, pending in t.ends], dtype=np.int32)
            hit = t.lams[self] = (inside[t.g_end], closing[t.ex_end])
        return hit

    def _value(self, key: tuple[Any, ...], m: int) -> bool:
        dfa = self.dfa
        if key[0] == "c":
            return dfa.live(key[1], m)
        if key[0] == "p":
            return bool(key[2] & dfa.live_classes(key[1], m))
        if key[0] == "x":
            return m >= dfa.min_len and (dfa.max_len is None or m <= dfa.max_len)
        return False

    def answers(self, lam: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Whether class ``lam[i]`` is live (or may close) after ``m[i]`` characters, for every i."""
        cols = self.column(m)
        n = len(self.keys)
        for c in np.unique(cols[self.done[cols] < n]).tolist():
            m_c = self._count(c)
            for k in range(int(self.done[c]), n):
                self.grid[k, c] = self._value(self.keys[k], m_c)
            self.done[c] = n
        return self.grid[lam, cols]

    def signature(self, t: CoreTable, n: int) -> _Signature:
        """Which of ``t``'s groups and closing tokens the lengths admit after ``n`` characters."""
        if self.hi is None:
            n = min(n, self.lo)
        else:
            n = min(n, self.hi + 1)
            if self.lo <= n and n + t.kmax <= self.b1:
                n = self.lo  # every n + k of the table lies in the band where no answer changes
        sig = t.sigs.get((self, n))
        if sig is None:
            with self.tables.lock:
                g, x = self.classes(t)
                sig = _Signature(self.answers(g, n + t.g_k), self.answers(x, n + t.ex_k))
                if len(t.sigs) > 4096:
                    t.sigs.clear()
                t.sigs[(self, n)] = sig
        return sig


# ------------------------------------------------------------------------------------------------------ masks
_ABSENT: Any = object()


class StringMasks:
    """Masks inside one free string slot of one declaration: :class:`StringTables` plus the slot's lengths, and
    the verdicts on what follows a closing quote (memoized per ``place``: the caller's key for the slot's position,
    the extra values and the solver assignment)."""

    def __init__(self, slot: StringSlot, tables: StringTables):
        self.slot, self.tables = slot, tables
        key = (slot.dfa.min_len, slot.dfa.max_len)
        with tables.lock:
            live = tables.lengths.get(key)
            if live is None:
                live = tables.lengths[key] = _Liveness(tables, slot)
        self.live: _Liveness = live
        self._verdicts: OrderedDict[Hashable, dict[bytes, bool] | None] = OrderedDict()
        self._by_table: OrderedDict[tuple[Any, Hashable], np.ndarray] = OrderedDict()
        self._rows: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._exit_rows: OrderedDict[Any, np.ndarray | None] = OrderedDict()  # the closing tokens' bits alone
        self._positions: OrderedDict[Any, np.ndarray] = OrderedDict()
        # A place ("tail", bytes) (only those fixed bytes follow the string to the record's end) decides its
        # verdicts by the bytes alone: its memos live on the shared tables, for every declaration whose string ends
        # the same way (each request of a server compiles its own declaration)
        with tables.lock:
            shared = tables.__dict__.get("tail_memos")
            if shared is None:
                shared = tables.__dict__["tail_memos"] = (OrderedDict(), OrderedDict(), OrderedDict(), OrderedDict(),
                                                          OrderedDict())
        self._shared = shared

    def _memos(self, place: Hashable) -> tuple[OrderedDict[Any, Any], ...]:
        """(verdicts, by_table, rows, exit_rows, positions) for ``place``: shared on the tables for a fixed tail."""
        if isinstance(place, tuple) and len(place) == 2 and place[0] == "tail":
            return self._shared
        return self._verdicts, self._by_table, self._rows, self._exit_rows, self._positions

    @classmethod
    def of(cls, slot: StringSlot, index: TokenIndex) -> StringMasks:
        """Masks for ``slot`` on the shared tables of its automaton and ``index``."""
        return cls(slot, StringTables.of(slot, index))

    def _closing_ok(self, t: CoreTable, tkey: Any, sig: _Signature, place: Hashable, closing: Closing) -> np.ndarray:
        """Per closing token of ``t``: admitted by the lengths and by what follows the string."""
        if not sig.ex_ok.any():
            return sig.ex_ok
        verdicts_memo, by_table, _, _, _ = self._memos(place)
        key = (tkey, place)
        per = by_table.get(key)
        if per is None:
            with self.tables.lock:
                per = remember(by_table, key, np.full(len(t.rests), -1, dtype=np.int8), 512)
        need = np.unique(t.ex_rest[sig.ex_ok])
        todo = need[per[need] < 0]
        if len(todo):
            known = verdicts_memo.get(place, _ABSENT)
            if known is _ABSENT:
                with self.tables.lock:
                    known = remember(verdicts_memo, place, {}, 256)
            rests = [t.rests[r] for r in todo.tolist()]
            if known is not None:
                ask = [r for r in rests if r not in known]
                if ask:
                    got = closing(ask)
                    if got is None:
                        known = verdicts_memo[place] = None
                    else:
                        known.update(zip(ask, map(bool, got)))
            per[todo] = [0 if known is None else int(known[r]) for r in rests]
        return sig.ex_ok & (per[t.ex_rest] == 1)

    def _inside_row(self, t: CoreTable, sig: _Signature) -> np.ndarray:
        """The packed row of ``t``'s inside tokens that ``sig`` admits (built once per signature, kept on ``t``)."""
        index, words = self.tables.index, self.tables.words
        row = t.rows.get(sig.key_in)
        if row is None:
            with self.tables.lock:
                if sig.key_in is None:
                    row = _pack_ids(index.ids[t.in_pos], words)
                else:
                    if t.group_of_id is None:
                        t.group_of_id = _group_of_id(t, self.tables)
                    row = np.packbits(np.r_[sig.adm, False][t.group_of_id], bitorder="little").view("<i4")
                remember(t.rows, sig.key_in, row, 64)
        else:
            t.rows.move_to_end(sig.key_in)
        return row

    def step(self, sub: tuple[Any, ...], token: int) -> tuple[Any, ...] | None:
        """The core ``(1, pattern state, length, pending)`` after ``token`` from ``sub`` when the token stays
        inside the string and the lengths admit it: one lookup in the table, no byte stepping. ``None`` for any
        other token (one that closes the string, or is not admitted: the caller steps its bytes)."""
        _, _, s, n, pending = sub
        tables = self.tables
        t = tables.table(tables.core(s, pending))
        g_of = t.group_of_id
        if g_of is None:
            with tables.lock:
                g_of = t.group_of_id
                if g_of is None:
                    g_of = t.group_of_id = _group_of_id(t, tables)
        if not 0 <= token < len(g_of):
            return None
        g = int(g_of[token])
        if g >= len(t.g_cnt) or not self.live.signature(t, n).adm[g]:
            return None
        s2, pending2 = t.ends[t.g_end[g]]
        return (1, s2, n + int(t.g_k[g]), pending2)

    def row(self, sub: tuple[Any, ...], place: Hashable, closing: Closing) -> np.ndarray:
        """The packed mask row (int32, XGrammar's layout) at ``sub``, a sub-state inside the string (read only)."""
        _, _, s, n, pending = sub
        tables = self.tables
        rid = tables.core(s, pending)
        t = tables.table(rid)
        sig = self.live.signature(t, n)
        _, _, rows, exit_rows, _ = self._memos(place)
        key = (rid, sig.key_in, sig.key_ex, place)
        row = rows.get(key)
        if row is not None:
            if rows is self._rows:  # this declaration's own: no lock on the in-string hot path
                rows.move_to_end(key)
            else:
                with tables.lock:
                    if key in rows:
                        rows.move_to_end(key)
            return row
        base = self._inside_row(t, sig)
        ekey = (rid, sig.key_ex, place)
        closers = exit_rows.get(ekey, False)
        if closers is False:
            ok = self._closing_ok(t, rid, sig, place, closing)
            closers = _pack_ids(tables.index.ids[t.ex_pos[ok]], tables.words) if ok.any() else None
            with tables.lock:
                remember(exit_rows, ekey, closers, 256)
        row = base if closers is None else base | closers
        with tables.lock:
            return remember(rows, key, row, 256)  # type: ignore[no-any-return]

    def positions(self, sub: tuple[Any, ...], lo: int, hi: int, d: int, place: Hashable,
                  closing: Closing) -> np.ndarray:
        """The token index positions in ``[lo, hi)`` (tokens sharing their first ``d`` bytes, the string entered
        after them) whose bytes keep the string valid from ``sub`` on."""
        _, _, s, n, pending = sub
        tables = self.tables
        rid = tables.core(s, pending)
        full = d == 0 and lo == 0 and hi == len(tables.index.toks)
        t = tables.table(rid) if full else tables.range_table(rid, lo, hi, d)
        tkey: Any = rid if full else (rid, lo, hi, d)
        sig = self.live.signature(t, n)
        memos = self._memos(place)
        positions, keep = memos[4], full or memos is self._shared  # a fixed tail's ranges are shared: kept too
        key = (tkey, sig.key_in, sig.key_ex, place)
        hit = positions.get(key) if keep else None
        if hit is not None:
            return hit
        inside = t.in_pos if sig.key_in is None else t.in_pos[np.repeat(sig.adm, t.g_cnt)]
        out = np.concatenate([inside, t.ex_pos[self._closing_ok(t, tkey, sig, place, closing)]])
        if not keep:
            return out
        with tables.lock:
            return remember(positions, key, out, 64)  # type: ignore[no-any-return]
