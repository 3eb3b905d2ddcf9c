"""Token tables of a free string's automaton: every token's run from each automaton state, once per vocabulary.

A *core* is what the string automaton knows between characters: the pattern state and the pending bytes of an
unfinished character (a UTF-8 sequence or an escape). For each core the table holds, for every token the core
admits, either the core it ends in and the characters it adds (the token stays inside the string), or, for a token
that closes the string, the core before the quote, the characters before it and the bytes after it. Lengths play
no part, so one table serves every ``minLength``/``maxLength`` (:mod:`.strings` applies them per mask).

A table is built by running the vocabulary's bytes through the automaton one column at a time (numpy; the
transitions, memoized per (core, byte), come from :meth:`.StringSlot.entry`, the automaton the layout matches with)
and kept in memory and on disk: one file per core in ``$FACTORSPEC_CACHE/strings/`` (or the user cache dir),
written atomically (a temporary file, then a rename) and checked on load (magic, a SHA-256 of the content, the
format, automaton and vocabulary keys, the arrays' shapes); a file that fails any check is rebuilt, never trusted.

>>> import factorspec_cp as fs
>>> from factorspec_cp.tokenmap import Vocabulary
>>> from factorspec_cp.tokenmap.decoder import TokenIndex
>>> from factorspec_cp.tokenmap.layout import Layout
>>> lay = Layout(fs.Spec({"type": "object", "required": ["note"], "properties": {
...     "note": {"type": "string", "maxLength": 400}}}))
>>> slot, (_, _, s, n, pending) = lay.free_string(lay.advance(lay.start(), b'{"note": "'))
>>> tables = StringTables(slot, TokenIndex.of(Vocabulary.smollm2()), folder=None)
>>> t = tables.table(tables.core(s, pending))
>>> len(t.in_pos), len(t.ex_pos)  # of SmolLM2's 49,135 content tokens: inside, and closing the string
(48733, 161)
>>> t.rests[:6]  # what follows the quote in the closing ones
[b'', b'"', b'""', b'")', b'",', b'":']
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .freeslot import StringSlot

if TYPE_CHECKING:
    from .decoder import TokenIndex

__all__ = ["StringTables", "CoreTable", "automaton_key", "vocabulary_key"]

#: bump when the table layout or the string automaton's semantics change (old files are then rebuilt)
FORMAT = 1
_MAGIC = b"FSSTR\x00\x01\n"
_DEAD, _EXIT, _UNK = -1, -2, -3


def remember(cache: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> Any:
    """Put ``value`` in the LRU ``cache`` (at most ``limit`` entries) and return it."""
    cache[key] = value
    if len(cache) > limit:
        cache.popitem(last=False)
    return value


# ------------------------------------------------------------------------------------------------------- keys
def automaton_key(slot: StringSlot) -> str:
    """A digest of what a token's run through ``slot`` depends on: the pattern automaton (states, classes,
    transitions) and the escape/UTF-8 rules (:data:`FORMAT`). Lengths are not part of it."""
    key = slot.dfa.__dict__.get("_fs_tables_key")  # on the automaton: equal slots of many declarations share it
    if key is None:
        dfa = slot.dfa
        states = _states(slot)
        at = {s: i for i, s in enumerate(states)}
        doc = {"format": FORMAT, "states": [repr(s) for s in states], "initial": at[dfa.initial],
               "finals": sorted(at[s] for s in dfa.finals), "ascii": dfa.ascii, "patterned": dfa.patterned,
               "trans": [[at[s], sorted([repr(c), at[t]] for c, t in dfa.trans.get(s, {}).items())] for s in states],
               "explicit": sorted([ord(c), repr(cls)] for c, cls in dfa.explicit.items())}
        key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        dfa.__dict__["_fs_tables_key"] = key
    return key  # type: ignore[no-any-return]


def _states(slot: StringSlot) -> list[Any]:
    """The pattern automaton's states in a fixed order (their index names them on disk)."""
    dfa = slot.dfa
    found = set(dfa.trans) | {t for row in dfa.trans.values() for t in row.values()} | {dfa.initial} | set(dfa.finals)
    return sorted(found, key=repr)


def vocabulary_key(index: TokenIndex) -> str:
    """A digest of the token index: every content token's bytes, in byte order, with its id, and the mask width."""
    key = index._fs_tables_key
    if key is None:
        h = hashlib.sha256(f"{FORMAT}|{index.size}|{len(index.toks)}|".encode())
        h.update(index.lengths.astype("<i4").tobytes())
        h.update(index.ids.astype("<i8").tobytes())
        h.update(b"".join(index.toks))
        key = h.hexdigest()
        index._fs_tables_key = key
    return key


# ------------------------------------------------------------------------------------------------------ a table
class CoreTable:
    """One core's run of a set of tokens: those that stay inside the string, sorted into groups ``(end core, k)``,
    and those that close it, each with the core before the quote, the characters before it and the bytes after.

    Arrays: ``in_pos`` (positions into the token index, group by group), ``g_end``/``g_k``/``g_cnt`` per group;
    ``ex_pos``/``ex_end``/``ex_k``/``ex_rest`` per closing token (``ex_rest`` indexes ``rests``). End cores are
    local: ``g_end`` and ``ex_end`` index ``ends`` (pattern state, pending bytes) and ``partials`` (the classes that
    complete the pending bytes), so reading a table registers nothing."""

    def __init__(self, in_pos: np.ndarray, g_end: np.ndarray, g_k: np.ndarray, g_cnt: np.ndarray,
                 ex_pos: np.ndarray, ex_end: np.ndarray, ex_k: np.ndarray, ex_rest: np.ndarray, rests: list[bytes],
                 ends: list[tuple[Any, bytes]], partials: list[frozenset[Any]]):
        self.in_pos, self.g_end, self.g_k, self.g_cnt = in_pos, g_end, g_k, g_cnt
        self.ex_pos, self.ex_end, self.ex_k, self.ex_rest, self.rests = ex_pos, ex_end, ex_k, ex_rest, rests
        self.ends, self.partials = ends, partials
        #: the most characters one token adds (a signature is the same wherever lengths cannot tell ``n`` apart)
        self.kmax = max(int(g_k.max()) if len(g_k) else 0, int(ex_k.max()) if len(ex_k) else 0)
        # what the masks keep per table (:mod:`.strings`): classes per liveness, signatures, packed rows
        self.lams: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.sigs: dict[Any, Any] = {}
        self.rows: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.group_of_id: np.ndarray | None = None  # per token id: its group, or len(groups)


# ------------------------------------------------------------------------------------------------------ tables
class StringTables:
    """Per (string automaton, vocabulary): every token's run from each core, built once per core, cached in memory
    and in ``folder`` (default: the user cache; ``None``: memory only). :meth:`of` gives the process-wide shared
    instance; ``built`` and ``loaded`` count the cores built here and read from disk."""

    _shared: OrderedDict[tuple[str, str], StringTables] = OrderedDict()
    _shared_lock = threading.Lock()

    def __init__(self, slot: StringSlot, index: TokenIndex, *, folder: Path | None | str = "default"):
        self.slot, self.index = slot, index
        self.key, self.vocab_key = automaton_key(slot), vocabulary_key(index)
        if folder == "default":
            from .bundled import cache_dir
            folder = cache_dir() / "strings" / f"{self.vocab_key[:16]}-{self.key[:16]}"
        self.folder = None if folder is None else Path(folder)
        self.words = (index.size + 31) // 32
        self._states = _states(slot)
        self._state_at = {s: i for i, s in enumerate(self._states)}
        dfa = slot.dfa
        labels = {c for row in dfa.trans.values() for c in row} | set(dfa.explicit.values()) | {dfa.class_of("\0")}
        self._classes = {repr(c): c for c in labels if c is not None}
        self.cores: list[tuple[Any, bytes]] = []
        self.rid: dict[tuple[Any, bytes], int] = {}
        self._trans = np.full((64, 256), _UNK, dtype=np.int32)  # rid, byte -> rid' | _DEAD | _EXIT
        self._inc = np.zeros((64, 256), dtype=np.int8)  # characters the byte completes
        self._partial: dict[int, frozenset[Any]] = {}
        self._tables: dict[int, CoreTable] = {}
        self._ranges: OrderedDict[tuple[int, int, int, int], CoreTable] = OrderedDict()
        self.lengths: dict[tuple[int, int | None], Any] = {}  # what the masks keep per (minLength, maxLength)
        self.lock = threading.RLock()
        #: exact rows a few fixed bytes before this string where only fixed bytes follow it (decoder._opening)
        self.opening_rows: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.built = self.loaded = 0  # cores built here / read from disk

    @classmethod
    def of(cls, slot: StringSlot, index: TokenIndex) -> StringTables:
        """The shared tables of ``slot``'s automaton on ``index`` (equal automata share, whatever their lengths)."""
        key = (automaton_key(slot), vocabulary_key(index))
        with cls._shared_lock:
            hit = cls._shared.get(key)
            if hit is not None and hit.index is index:
                cls._shared.move_to_end(key)
                return hit
            return remember(cls._shared, key, cls(slot, index), 32)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"StringTables({len(self._tables)} cores of {len(self.cores)}, built {self.built}, loaded {self.loaded})"

    # -- cores and transitions ----------------------------------------------------------------------------------
    def core(self, s: Any, pending: bytes) -> int:
        """The id of core ``(pattern state, pending bytes)``."""
        k = self.rid.get((s, pending))
        if k is None:
            with self.lock:
                k = self.rid.get((s, pending))
                if k is None:
                    k = len(self.cores)
                    self.cores.append((s, pending))
                    if k >= len(self._trans):
                        grow = len(self._trans)
                        self._trans = np.vstack([self._trans, np.full((grow, 256), _UNK, dtype=np.int32)])
                        self._inc = np.vstack([self._inc, np.zeros((grow, 256), dtype=np.int8)])
                    self.rid[(s, pending)] = k
        return k

    def partial(self, rid: int) -> frozenset[Any]:
        """The classes of the characters that complete core ``rid``'s pending bytes (empty when none are pending),
        kept from the transition that made the core."""
        got = self._partial.get(rid)
        if got is None:
            pending = self.cores[rid][1]
            entry = self.slot.entry(pending[:-1], pending[-1]) if pending else None
            got = self._partial[rid] = entry[1] if entry is not None and entry[0] == "partial" else frozenset()
        return got

    def _fill(self, key: int) -> None:
        rid, b = divmod(key, 256)
        s, pending = self.cores[rid]
        entry = self.slot.entry(pending, b)
        out, inc = _DEAD, 0
        if entry is not None:
            kind, cls, nxt = entry
            if kind == "close":
                out = _EXIT
            elif kind == "char":
                t = self.slot.dfa.trans[s].get(cls)
                if t is not None:
                    out, inc = self.core(t, b""), 1
            elif cls & self.slot.dfa.trans[s].keys():
                out = self.core(s, nxt)
                self._partial.setdefault(out, frozenset(cls))
        self._trans[rid, b], self._inc[rid, b] = out, inc

    def _run(self, rid: int, pos: np.ndarray, toks: Sequence[bytes], d: int) -> CoreTable:
        """Run ``toks`` (at index positions ``pos``, each longer than ``d``) from byte ``d`` on, from core ``rid``."""
        lens = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
        flat = np.frombuffer(b"".join(toks), dtype=np.uint8)
        start = np.zeros(len(toks), dtype=np.int64)
        np.cumsum(lens[:-1], out=start[1:])
        ptr, end = start + d, start + lens
        state = np.full(len(toks), rid, dtype=np.int64)
        chars = np.zeros(len(toks), dtype=np.int64)
        kind = np.zeros(len(toks), dtype=np.int8)  # 0 dead, 1 inside, 2 closes the string
        act = np.arange(len(toks))
        while len(act):
            keys = state[act] * 256 + flat[ptr[act]]
            nxt = self._trans.reshape(-1)[keys]
            unknown = nxt == _UNK
            if unknown.any():
                for key in np.unique(keys[unknown]).tolist():
                    self._fill(key)
                nxt = self._trans.reshape(-1)[keys]
            kind[act[nxt == _EXIT]] = 2  # ptr stays on the quote; state and chars are those before it
            go = nxt >= 0
            a = act[go]
            state[a] = nxt[go]
            chars[a] += self._inc.reshape(-1)[keys[go]]
            ptr[a] += 1
            fin = ptr[a] == end[a]
            kind[a[fin]] = 1
            act = a[~fin]
        return self._table_of(pos, toks, kind, state, chars, ptr - start)

    def _table_of(self, pos: np.ndarray, toks: Sequence[bytes], kind: np.ndarray, state: np.ndarray,
                  chars: np.ndarray, col: np.ndarray) -> CoreTable:
        """A table from a run's outcome per token (``kind``: 0 dead, 1 inside, 2 closes), its end core (before the
        quote), the characters added and the column of the closing quote."""
        ii = np.flatnonzero(kind == 1)
        ii = ii[np.lexsort((chars[ii], state[ii]))]
        e, k = state[ii], chars[ii]
        starts = np.flatnonzero(np.r_[True, (e[1:] != e[:-1]) | (k[1:] != k[:-1])]) if len(ii) else ii
        cnt = np.diff(np.r_[starts, len(ii)])
        jj = np.flatnonzero(kind == 2)
        rest_id: dict[bytes, int] = {}
        ex_rest = np.array([rest_id.setdefault(toks[j][col[j] + 1:], len(rest_id)) for j in jj.tolist()],
                           dtype=np.int32)
        ends, local = np.unique(np.r_[e[starts], state[jj]], return_inverse=True)
        local = local.reshape(-1).astype(np.int32)
        rids = ends.tolist()
        return CoreTable(pos[ii].astype(np.int32), local[:len(starts)], k[starts].astype(np.int32),
                         cnt.astype(np.int32), pos[jj].astype(np.int32), local[len(starts):],
                         chars[jj].astype(np.int32), ex_rest, list(rest_id), [self.cores[r] for r in rids],
                         [self.partial(r) for r in rids])

    # -- tables -------------------------------------------------------------------------------------------------
    def table(self, rid: int) -> CoreTable:
        """Core ``rid``'s run of the whole vocabulary: from memory, else disk, else built (and written)."""
        t = self._tables.get(rid)
        if t is not None:
            return t
        with self.lock:
            t = self._tables.get(rid)
            if t is None:
                t = self._load(rid)
                if t is None:
                    t = self._build(rid)
                    self.built += 1
                    self._save(rid, t)
                else:
                    self.loaded += 1
                self._tables[rid] = t
        return t

    def _build(self, rid: int) -> CoreTable:
        idx = self.index
        for b in range(256):
            if self._trans[rid, b] == _UNK:
                self._fill(rid * 256 + b)
        spans = [idx.span(bytes((b,))) for b in range(256) if self._trans[rid, b] != _DEAD]
        pos = np.concatenate([np.arange(a, z) for a, z in spans]) if spans else np.zeros(0, dtype=np.int64)
        toks = idx.toks
        return self._run(rid, pos, [toks[p] for p in pos.tolist()], 0)

    def range_table(self, rid: int, lo: int, hi: int, d: int) -> CoreTable:
        """Core ``rid``'s run of the tokens ``[lo, hi)`` of the index from byte ``d`` on (a token entering the
        string after ``d`` bytes); kept in a small in-memory LRU."""
        key = (rid, lo, hi, d)
        t = self._ranges.get(key)
        if t is None:
            with self.lock:
                rows = np.arange(lo, hi)
                rows = rows[self.index.lengths[lo:hi] > d]
                toks = self.index.toks
                t = remember(self._ranges, key, self._run(rid, rows, [toks[p] for p in rows.tolist()], d), 256)
        else:
            self._ranges.move_to_end(key)
        return t

    # -- disk ---------------------------------------------------------------------------------------------------
    def _path(self, rid: int) -> Path | None:
        if self.folder is None:
            return None
        s, pending = self.cores[rid]
        return self.folder / f"{self._state_at[s]}-{pending.hex()}.table"

    def _meta(self, rid: int) -> dict[str, Any]:
        s, pending = self.cores[rid]
        return {"format": FORMAT, "automaton": self.key, "vocabulary": self.vocab_key,
                "core": [self._state_at[s], pending.hex()]}

    def _save(self, rid: int, t: CoreTable) -> None:
        path = self._path(rid)
        if path is None:
            return
        meta = {**self._meta(rid), "cores": [[self._state_at[st], pending.hex(), sorted(map(repr, part))]
                                             for (st, pending), part in zip(t.ends, t.partials)]}
        arrays = {"in_pos": t.in_pos, "g_end": t.g_end, "g_k": t.g_k, "g_cnt": t.g_cnt, "ex_pos": t.ex_pos,
                  "ex_end": t.ex_end, "ex_k": t.ex_k, "ex_rest": t.ex_rest,
                  "rest_len": np.array([len(r) for r in t.rests], dtype=np.int32)}
        data = encode(meta, arrays, b"".join(t.rests))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError:  # a read-only or full cache: the tables stay in memory
            pass

    def _load(self, rid: int) -> CoreTable | None:
        """Core ``rid``'s table from disk, or ``None`` where the file is missing, damaged, stale or foreign."""
        path = self._path(rid)
        if path is None:
            return None
        try:
            got = decode(path.read_bytes())
        except OSError:
            return None
        if got is None:
            return None
        meta, arrays, blob = got
        try:
            if {k: meta.get(k) for k in ("format", "automaton", "vocabulary", "core")} != self._meta(rid):
                return None
            parts: dict[tuple[str, ...], frozenset[Any]] = {}
            ends, partials = [], []
            for si, ph, part in meta["cores"]:
                if not (isinstance(si, int) and 0 <= si < len(self._states)):
                    return None
                key = tuple(part)
                if key not in parts:
                    parts[key] = frozenset(self._classes[c] for c in key)
                ends.append((self._states[si], bytes.fromhex(ph)))
                partials.append(parts[key])
        except (ValueError, KeyError, TypeError, IndexError):
            return None
        if not _consistent(arrays, len(blob), len(ends), len(self.index.toks)):
            return None
        cuts = np.r_[0, np.cumsum(arrays["rest_len"])].tolist()
        rests = [blob[a:b] for a, b in zip(cuts, cuts[1:])]
        return CoreTable(arrays["in_pos"], arrays["g_end"], arrays["g_k"], arrays["g_cnt"], arrays["ex_pos"],
                         arrays["ex_end"], arrays["ex_k"], arrays["ex_rest"], rests, ends, partials)


_ARRAYS = ("in_pos", "g_end", "g_k", "g_cnt", "ex_pos", "ex_end", "ex_k", "ex_rest", "rest_len")


def encode(meta: dict[str, Any], arrays: dict[str, np.ndarray], blob: bytes) -> bytes:
    """A table file: magic, the SHA-256 of the payload, then the payload: a JSON header (``meta`` and the arrays'
    lengths), the int32 arrays and the bytes after the closing quotes."""
    head = json.dumps({**meta, "lengths": [len(arrays[k]) for k in _ARRAYS]}).encode()
    head += b" " * (-(len(head) + 4) % 4)
    payload = b"".join([struct.pack("<I", len(head)), head, *(arrays[k].astype("<i4").tobytes() for k in _ARRAYS),
                        blob])
    return _MAGIC + hashlib.sha256(payload).digest() + payload


def decode(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray], bytes] | None:
    """``(meta, arrays, blob)`` of a table file, or ``None`` where it is not one or its checksum fails."""
    top = len(_MAGIC) + 32
    if len(data) < top + 4 or data[:len(_MAGIC)] != _MAGIC or hashlib.sha256(data[top:]).digest() != data[
            len(_MAGIC):top]:
        return None
    try:
        (n,) = struct.unpack_from("<I", data, top)
        meta = json.loads(data[top + 4:top + 4 + n])
        lengths = meta["lengths"]
        if not isinstance(meta, dict) or len(lengths) != len(_ARRAYS) or min(lengths) < 0:
            return None
        at, arrays = top + 4 + n, {}
        for k, m in zip(_ARRAYS, lengths):
            arrays[k] = np.frombuffer(data, dtype="<i4", count=m, offset=at).astype(np.int32)
            at += 4 * m
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    return meta, arrays, data[at:]


def _consistent(a: dict[str, np.ndarray], blob: int, cores: int, tokens: int) -> bool:
    """Whether a table read from disk has the shape of one (its checksum already matched)."""
    g, x = len(a["g_cnt"]), len(a["ex_pos"])
    if len(a["g_end"]) != g or len(a["g_k"]) != g or any(len(a[k]) != x for k in ("ex_end", "ex_k", "ex_rest")):
        return False
    if int(a["g_cnt"].sum()) != len(a["in_pos"]) or (g and a["g_cnt"].min() <= 0):
        return False
    if int(a["rest_len"].sum()) != blob or (len(a["rest_len"]) and a["rest_len"].min() < 0):
        return False
    for k, hi in (("in_pos", tokens), ("ex_pos", tokens), ("g_end", cores), ("ex_end", cores),
                  ("ex_rest", len(a["rest_len"]))):
        if len(a[k]) and (a[k].min() < 0 or a[k].max() >= hi):
            return False
    return not any(len(a[k]) and a[k].min() < 0 for k in ("g_k", "ex_k"))


