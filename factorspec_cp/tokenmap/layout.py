"""The canonical byte layout of a record: fixed syntax and value slots, matched byte by byte.

A :class:`Layout` compiles a declaration's schema into a small program (literal syntax, field slots with finite
domains, free slots, and the structural choices: optional properties, array length, union branches) and matches
output bytes against it as a set of threads, as a Pike VM does. The rendering is ``json.dumps`` with schema
property order and ``ensure_ascii=False``: compact separators ``", "``/``": "`` by default, or ``indent=N``.
States are immutable and hashable, so a decoder keeps a stack of them to roll back, and caches by them.

>>> import factorspec_cp as fs
>>> spec = fs.Spec({"type": "object", "required": ["city", "days"], "properties": {
...     "city": {"enum": ["Riga", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 15}}})
>>> lay = Layout(spec)
>>> lay.render({"days": 3, "city": "Rome"})
'{"city": "Rome", "days": 3}'
>>> s = lay.advance(lay.start(), b'{"city": "R')
>>> lay.slot(s), lay.candidates(s)
(Slot(pointer='/city', kind='field', typed=b'"R'), ['Riga', 'Rome'])
>>> s = lay.advance(s, b'ome", "days": 1')
>>> lay.completed(s), sorted(chr(b) for b in lay.allowed_next_bytes(s))
((('/city', 'Rome'),), ['0', '1', '2', '3', '4', '5', '}'])
>>> s = lay.advance(s, b'}')
>>> lay.completed(s), lay.accepting(s)
((('/days', 1),), True)
>>> lay.allowed_next_bytes(lay.start(), admissible=lambda p: ["Riga"] if p == "/city" else None)
frozenset({123})

A wide field (minute-level times, date enums) need not be listed: ``admissible`` may return an object with
``among(groups) -> list[bool]`` (a session's :class:`~factorspec_cp.session.FieldQuestions`), and the layout then
asks, per typed prefix, which next bytes lead to an admissible value, each as one group of domain-index intervals.
"""

from __future__ import annotations

import json
import threading
import weakref
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Union

import numpy as np

from ..errors import DeclarationError
from ..schema import (
    ArrayNode,
    CompiledSchema,
    Field,
    FreeField,
    Leaf,
    Node,
    ObjectNode,
    UnionNode,
    compile_schema,
    jkey,
)
from ..schema import escape as escape_token
from ..session import FieldQuestions
from .freeslot import NOTHING as _NOTHING_OBJ
from .freeslot import IntegerSlot, NumberSlot, StringSlot

try:  # (the decoder takes it from here)
    from .. import _rows  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the extension is built by pip; without it counts and rows take numpy's path
    _rows = None
_ROWS_API = ("wide_fill", "admissible_counts", "span_has", "span_ends", "copy_row", "or_bits", "ids_fill")
if _rows is not None and not all(hasattr(_rows, f) for f in _ROWS_API):  # pragma: no cover - an older build
    raise ImportError(f"factorspec_cp._rows is out of date (it needs {', '.join(_ROWS_API)}): rebuild it, "
                      "pip install --no-build-isolation -e .")

__all__ = ["Layout", "State", "Slot", "EnumSlot", "render_value", "Admissible", "field_matcher", "open_slot"]

#: ``admissible(pointer)``: the values a field slot may take now (``None``: no restriction), or an object whose
#: ``among(groups)`` says for each group of domain-index intervals whether an admissible value lies in it.
Admissible = Callable[[str], Union[Collection[Any], Any, None]]
Interval = tuple[int, int]
Event = tuple[str, Any]
Core = tuple[int, tuple[int, ...], Any]  # (program counter, array indices, slot sub-state)
Thread = tuple[Core, tuple[Event, ...]]  # a core and the events it completed that are not yet certain

LIT, FIELD, FREE, JMP, SPLIT, ASTART, ALOOP, ANEXT, ACCEPT = range(9)


NOTHING: Final = _NOTHING_OBJ  # (Final: compiled, a C static, not a look-up in the module's globals)
#: the most prefixes (with the empty one per rendering) :meth:`EnumSlot.fill_spans` keeps: a day of clock times has
#: 2,618; BFCL's 11,323 dates about 130,000, left to the bisections
SPANS_FILLED: Final = 20_000
_RENDERED: dict[tuple[type, Any], bytes] = {}


def prefix_spans(renders: Sequence[bytes]) -> dict[bytes, list[int]]:
    """Every prefix of a rendering (the empty one and the renderings themselves included) -> its span ``[lo, hi)``:
    the sorted positions of the renderings that start with it, which are consecutive. One pass over the renderings,
    shared by :meth:`EnumSlot.fill_spans` and the wide fields' tables (``WideTable.build_many``)."""
    spans: dict[bytes, list[int]] = {}
    for j, r in enumerate(renders):
        for n in range(len(r) + 1):
            got = spans.get(r[:n])
            if got is None:
                spans[r[:n]] = [j, j + 1]
            else:
                got[1] = j + 1
    return spans


def field_index(f: Field, value: Any) -> int:
    """``f.index(value)``, or -1 where ``value`` is not in the domain: the look-up in the field's own table by
    :func:`value_key` where it has one (compiled: ``Field.index`` and ``jkey`` run as Python)."""
    table = f._index
    if table is not None:
        try:
            k = table.get(value_key(value))
        except TypeError:  # (not a JSON value, or unhashable: ``Field.index`` says KeyError)
            return -1
        return -1 if k is None else k
    try:
        return f.index(value)
    except KeyError:
        return -1


def value_key(value: Any) -> tuple[str, Any]:
    """:func:`~factorspec_cp.schema.jkey`, with a string's, a number's, a boolean's and null's made here (compiled:
    ``jkey`` runs as Python, once per admissible value each time a planner's filter lists a narrow field)."""
    t = type(value)
    if t is str:
        return ("s", value)
    if t is bool:
        return ("b", value)
    if t is int or t is float:
        return ("n", value)
    if value is None:
        return ("z", None)
    return jkey(value)


def render_value(value: Any, indent: int | None = None, depth: int = 0) -> bytes:
    """The canonical bytes of one JSON value at nesting ``depth`` of a record rendered with ``indent`` (``None``:
    compact, ``", "`` and ``": "``). Only an object or array value (of an enum or const) depends on them. A
    string's, an integer's and a boolean's are kept (per type and value: ``True`` is not ``1``): a planner's filter
    lists a narrow field's admissible values as a slot of their own at each new assignment, and ``json.dumps`` runs as
    Python."""
    t = type(value)
    if t is str or t is int or t is bool:
        key = (t, value)
        hit = _RENDERED.get(key)
        if hit is None:
            hit = json.dumps(value, ensure_ascii=False).encode("utf-8")
            if len(_RENDERED) > 65536:
                _RENDERED.clear()
            _RENDERED[key] = hit
        return hit
    if indent is None or not isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return text.replace("\n", "\n" + " " * (indent * depth)).encode("utf-8")


class State:
    """Where a match stands: its live threads, each with the field values it completed that not every thread
    agrees on yet. ``events`` are the values the advance into this state made certain; they are not part of the
    state's identity (equal positions compare equal). Immutable: both are read-only properties.

    (Written out rather than a frozen dataclass: compiled, a dataclass keeps the ``__init__``, ``__eq__`` and
    ``__hash__`` it generates in Python, and a planner makes a state per byte it steps: 7% of a meeting walk's
    instructions went to dataclass constructors.)"""

    __slots__ = ("_threads", "_events", "_one")

    def __init__(self, threads: frozenset[Thread], events: tuple[Event, ...] = (), one: Thread | None = None):
        self._threads = threads
        self._events = events
        self._one = one  # the one thread, where the maker knows it (else found by :meth:`one` when asked)

    @property
    def threads(self) -> frozenset[Thread]:
        return self._threads

    @property
    def events(self) -> tuple[Event, ...]:
        return self._events

    def one(self) -> Thread | None:
        """The state's thread where it has exactly one (most states), else ``None``; kept. (Compiled, unpacking it
        from the frozenset, ``((pc, ctr, sub), pending), = state.threads``, made three iterators, a set's and two
        tuples', at each of the ten thousand such reads in ten meeting records; a typed tuple unpacks in place.)"""
        one = self._one
        if one is None and len(self._threads) == 1:
            for t in self._threads:
                one = t
            self._one = one
        return one

    def __eq__(self, other: object) -> bool:
        return type(other) is State and self.threads == other.threads

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.threads)

    def __repr__(self) -> str:
        return f"State(threads={self.threads!r}, events={self.events!r})"

    @property
    def cores(self) -> set[Core]:
        return {core for core, _ in self.threads}


@dataclass(frozen=True)
class Slot:
    """The value slot a state is in: its JSON Pointer, ``"field"`` (finite domain) or ``"free"``, and the bytes of
    the value typed so far (quotes included)."""

    pointer: str
    kind: str
    typed: bytes
    node: Union[Field, FreeField] = field(repr=False, compare=False)


class EnumSlot:
    """A finite set of values as their sorted renderings. Sub-state: the bytes typed."""

    start = b""

    def __init__(self, values: Iterable[Any], indent: int | None = None, depth: int = 0):
        self.domain = list(values)
        pairs = sorted((render_value(v, indent, depth), k) for k, v in enumerate(self.domain))
        self.renders = [r for r, _ in pairs]
        self.order = [k for _, k in pairs]
        self.by_render = {r: self.domain[k] for r, k in pairs}
        self._index = {r: k for r, k in pairs}
        self._next: dict[bytes, frozenset[int]] = {}
        self._iv: dict[bytes, list[Interval]] = {}
        self._spans: dict[bytes, tuple[int, int]] = {}
        self._spans_filled = False  # (fill_spans)
        self._order_np: np.ndarray | None = None
        self._order_intp: np.ndarray | None = None  # (admissible_counts)
        self._order_i64: bytes | None = None  # (admissible_counts, in C)
        self._branch_prefixes: list[bytes] | None = None  # (decoder.branch_prefixes)

    def _span(self, t: bytes) -> tuple[int, int]:
        # renderings are UTF-8, which never holds 0xFF: every rendering starting with t sorts below t + b"\xff"
        # (kept per prefix: a planner and the masks ask the same few prefixes of a slot again and again)
        hit = self._spans.get(t)
        if hit is None:
            hit = (bisect_left(self.renders, t), bisect_left(self.renders, t + b"\xff"))
            if len(self._spans) > 50_000:
                self._spans.clear()
            self._spans[t] = hit
        return hit

    def fill_spans(self) -> None:
        """Keep the span of every prefix of every rendering (:meth:`_span`), found in one pass over the sorted
        renderings (those with a prefix are consecutive), where they are at most :data:`SPANS_FILLED` in all. A wide
        field's slot is asked the prefixes of each value a record writes (its digits, for every value of every
        record): each new one was two bisections over the renderings, 443 per 10 meeting records. Once per matcher,
        which the process shares between declarations of the same domain (:func:`field_matcher`)."""
        if self._spans_filled or sum(map(len, self.renders)) + len(self.renders) > SPANS_FILLED:
            return
        spans = prefix_spans(self.renders)
        kept = self._spans
        if len(kept) + len(spans) > 50_000:
            kept.clear()
        for t, (lo, hi) in spans.items():
            kept[t] = (lo, hi)
        self._spans_filled = True

    def has_prefix(self, t: bytes) -> bool:
        lo, hi = self._span(t)
        return lo < hi

    def step(self, sub: bytes, byte: int) -> bytes | None:
        t = sub + bytes((byte,))
        return t if self.has_prefix(t) else None

    def value(self, sub: bytes) -> Any:
        return self.by_render.get(sub, NOTHING)

    def extendable(self, sub: bytes) -> bool:
        lo, hi = self._span(sub)
        return hi - lo > (1 if lo < hi and self.renders[lo] == sub else 0)

    def next_bytes(self, sub: bytes) -> frozenset[int]:
        out = self._next.get(sub)
        if out is None:
            lo, hi = self._span(sub)
            n, renders = len(sub), self.renders
            if lo < hi and len(renders[lo]) == n:  # sub itself, sorted first
                lo += 1
            found = []
            while lo < hi:  # one bisection per distinct next byte, not a pass over the span
                b = renders[lo][n]
                found.append(b)
                lo = bisect_left(renders, sub + bytes((b + 1,)), lo, hi) if b < 255 else hi
            out = frozenset(found)
            if len(self._next) > 50_000:
                self._next.clear()
            self._next[sub] = out
        return out

    def typed(self, sub: bytes) -> bytes:
        return sub

    def values(self, sub: bytes) -> list[Any]:
        lo, hi = self._span(sub)
        return [self.domain[k] for k in sorted(self.order[lo:hi])]

    def admits(self, sub: bytes) -> bool:
        """Whether ``sub`` is a whole value's rendering."""
        return sub in self.by_render

    def index_of(self, sub: bytes) -> int | None:
        """The domain index of the value ``sub`` renders, or ``None``."""
        return self._index.get(sub)

    def index_intervals(self, t: bytes) -> list[Interval]:
        """The domain indices of the values whose rendering starts with ``t``, as inclusive intervals (one range of
        the sorted renderings; in domain order, a few intervals: ``"1`` of clock times is 10:00AM-1:59PM and
        10:00PM-11:59PM)."""
        out = self._iv.get(t)
        if out is None:
            lo, hi = self._span(t)
            if hi - lo <= 64:
                out = []
                for k in sorted(self.order[lo:hi]):
                    if out and out[-1][1] == k - 1:
                        out[-1] = (out[-1][0], k)
                    else:
                        out.append((k, k))
            else:  # a wide span (the opening quote of 11,323 dates): sorted and split where indices jump, in numpy
                if self._order_np is None:
                    self._order_np = np.asarray(self.order, dtype=np.int64)
                ks = np.sort(self._order_np[lo:hi])
                cut = np.flatnonzero(np.diff(ks) != 1)
                starts = np.concatenate(([ks[0]], ks[cut + 1]))
                ends = np.concatenate((ks[cut], [ks[-1]]))
                out = list(zip(starts.tolist(), ends.tolist()))
            if len(self._iv) > 50_000:
                self._iv.clear()
            self._iv[t] = out
        return out


class _RangeSlot(IntegerSlot):
    """An integer field's range domain: an :class:`IntegerSlot` whose values list in domain order."""

    def __init__(self, values: range):
        super().__init__(values.start, values[-1], values.step, values.start)
        self.range = values
        self.domain = values

    def values(self, sub: bytes) -> list[int]:  # type: ignore[override]
        return sorted(super().values(sub))

    def index_of(self, sub: bytes) -> int | None:
        v = self.value(sub)
        return None if v is NOTHING else (v - self.range.start) // self.range.step

    def index_intervals(self, t: bytes) -> list[Interval]:
        """The domain indices of the integers whose rendering starts with ``t`` (one interval per digit count)."""
        r = self.range
        first, last = r.start, r[-1]
        out = []
        for a, b in self._intervals(t):
            a = first if a is None else max(a, first)
            b = last if b is None else min(b, last)
            if a <= b:
                i, j = -(-(a - first) // r.step), (b - first) // r.step
                if i <= j:
                    out.append((i, j))
        return sorted(out)


class _AskedSlot:
    """A wide field slot whose admissible values are asked, not listed: ``has_prefix(t)`` asks in one batch which
    next bytes after ``t[:-1]`` (and whether ``t[:-1]`` itself as a value) lead to an admissible value, each as the
    domain-index intervals under it. Answers are kept for the slot's life: one assignment of one session."""

    def __init__(self, matcher: EnumSlot | _RangeSlot, questions: Any):
        # a weak proxy: the layout keeps its slots per questions object in a weak-key table, and a value holding its
        # key would keep the questions, and through them their session, for the layout's life
        self.m, self.q = matcher, weakref.proxy(questions)
        self.prefix: dict[bytes, bool] = {}
        self.value: dict[int, bool] = {}
        self._counts: bytes | None | bool = False  # False: not looked for yet

    def _settled(self) -> bytes | None:
        """Where the questions know every value (``settled()``: a difference component's search) and the matcher
        lists sorted renderings: the number of admissible values among the first ``j`` renderings, for every ``j``
        (:func:`admissible_counts`' bytes). A prefix then has an admissible value iff its span of renderings counts
        one (:func:`span_has`): no question."""
        counts = self._counts
        if counts is False:
            counts = None
            settled = getattr(self.q, "settled", None)
            values = getattr(self.q, "values", None)
            mask = settled() if settled is not None and isinstance(self.m, EnumSlot) and values is not None and \
                same_domain(self.m, values) else None
            if mask is not None:
                counts = admissible_counts(self.m, mask)[1]  # type: ignore[arg-type]
            self._counts = counts
        return counts  # type: ignore[return-value]

    def has_prefix(self, t: bytes) -> bool:
        hit = self.prefix.get(t)
        if hit is None:
            counts = self._settled()
            if counts is not None:
                lo, hi = self.m._span(t)  # type: ignore[union-attr]
                hit = self.prefix[t] = span_has(counts, lo, hi)
                return hit
            if not t:
                hit = self.q.among([[(0, len(self.m.domain) - 1)]])[0]
            elif not self.has_prefix(t[:-1]):
                hit = False
            else:
                self._ask(t[:-1])
                hit = self.prefix.get(t)
                if hit is None:  # not a next byte of the domain: callers step only along those, but be exact
                    hit = self.q.among([self.m.index_intervals(t)])[0]
            self.prefix[t] = hit
        return hit

    def _ask(self, s: bytes) -> None:
        """Ask at once about every next byte after ``s`` and about ``s`` as a whole value."""
        subs = [u for u in (s + bytes((b,)) for b in sorted(self.m.next_bytes(s))) if u not in self.prefix]
        groups = [self.m.index_intervals(u) for u in subs]
        k = self.m.index_of(s)
        whole = k is not None and k not in self.value
        if whole:
            groups.append([(k, k)])  # type: ignore[list-item]
        if not groups:
            return
        res = self.q.among(groups)
        for u, ok in zip(subs, res):
            self.prefix[u] = ok
        if whole:
            self.value[k] = res[-1]  # type: ignore[index]

    def forced(self, sub: bytes) -> bytes | None:
        """Where the answers are settled (:meth:`_settled`): the bytes every admissible value whose rendering starts
        with ``sub`` writes next (the longest common prefix of the first and last of them in sorted order, less
        ``sub``); ``None`` where not settled or nothing admissible starts so. No proper prefix of those bytes completes
        an admissible value: it would sort first and be shorter than the common prefix."""
        counts = self._settled()
        return None if counts is None else admissible_common(self.m, counts, sub)  # type: ignore[arg-type]

    def branches(self, sub: bytes) -> bool:
        """Where settled (:meth:`_settled`): :func:`admissible_branches` (nothing is certain after ``sub``)."""
        counts = self._settled()
        return counts is not None and admissible_branches(self.m, counts, sub)  # type: ignore[arg-type]

    def admits(self, sub: bytes) -> bool:
        k = self.m.index_of(sub)
        if k is None or not self.has_prefix(sub):
            return False
        counts = self._settled()
        if counts is not None:  # the rendering's own place in the sorted order
            j = bisect_left(self.m.renders, sub)  # type: ignore[union-attr]
            return span_has(counts, j, j + 1)
        if k not in self.value:
            if self.m.index_intervals(sub) == [(k, k)]:  # no other value starts with sub: has_prefix answered it
                self.value[k] = True
            else:
                self._ask(sub)
        return self.value[k]

    def values(self, sub: bytes) -> list[Any]:
        ks = [k for a, b in self.m.index_intervals(sub) for k in range(a, b + 1)]
        ok = self.q.among([[(k, k)] for k in ks]) if ks else []
        return [self.m.domain[k] for k, y in zip(ks, ok) if y]


_MISS: Final = object()
_COUNTS: OrderedDict[tuple[int, bytes], tuple[Any, tuple[np.ndarray, bytes]]] = OrderedDict()


def _counts_view(counts: bytes, lo: int, hi: int, name: str) -> memoryview:
    """The counts as int64s, where the span ``[lo, hi)`` is inside them (the Python path of :func:`span_has` and
    :func:`span_ends`, with the C path's bounds)."""
    c = memoryview(counts).cast("q")
    if not 0 <= lo <= hi < len(c):
        raise IndexError(f"{name}: the span [{lo}, {hi}) is outside the counts")
    return c


def span_has(counts: bytes, lo: int, hi: int) -> bool:
    """Whether the sorted renderings ``[lo, hi)`` count an admissible value, given the admissible counts
    (:func:`admissible_counts`' int64 bytes): ``counts[hi] > counts[lo]``."""
    if _rows is not None:
        return _rows.span_has(counts, lo, hi)
    c = _counts_view(counts, lo, hi, "span_has")
    return bool(c[hi] > c[lo])


def span_ends(counts: bytes, lo: int, hi: int) -> tuple[int, int] | None:
    """The first and the last sorted position in ``[lo, hi)`` whose rendering is admissible, given the admissible
    counts (:func:`admissible_counts`' int64 bytes); ``None`` where none is. Counts never decrease, so these sit just
    before the first positions in the span holding one more than its start, and its end's count (two bisections: in
    C, where the bisections on a list of ints cost 1,500 instructions each)."""
    if _rows is not None:
        return _rows.span_ends(counts, lo, hi)
    c = _counts_view(counts, lo, hi, "span_ends")
    below, upto = c[lo], c[hi]
    if upto == below:
        return None
    return bisect_left(c, below + 1, lo + 1, hi + 1) - 1, bisect_left(c, upto, lo, hi + 1) - 1


def admissible_ends(m: EnumSlot, counts: bytes, sub: bytes) -> tuple[bytes, bytes] | None:
    """The first and last of ``m``'s sorted renderings that start with ``sub`` and render an admissible value, given
    the admissible counts (:func:`admissible_counts`); ``None`` where none does (:func:`span_ends`)."""
    lo, hi = m._span(sub)
    ends = span_ends(counts, lo, hi)
    if ends is None:
        return None
    return m.renders[ends[0]], m.renders[ends[1]]


def admissible_common(m: EnumSlot, counts: bytes, sub: bytes) -> bytes | None:
    """The bytes every admissible value whose rendering starts with ``sub`` writes next (the longest common prefix of
    the first and last of them in sorted order, less ``sub``), given the admissible counts; ``None`` where none does."""
    ends = admissible_ends(m, counts, sub)
    if ends is None:
        return None
    a, z = ends  # (not ``(a, z), n = ends, len(sub)``: compiled, a nested unpacking of a tuple made iterators)
    n = len(sub)
    while n < len(a) and n < len(z) and a[n] == z[n]:
        n += 1
    return a[len(sub):n]


def admissible_branches(m: EnumSlot, counts: bytes, sub: bytes) -> bool:
    """Whether two admissible values whose renderings start with ``sub``, both longer, differ in the byte after it
    (so at least two next bytes are admissible: nothing is certain there), given the admissible counts."""
    ends = admissible_ends(m, counts, sub)
    if ends is None:
        return False
    a, z = ends
    n = len(sub)
    return len(a) > n and len(z) > n and a[n] != z[n]


def admissible_counts(m: EnumSlot, mask: bytes) -> tuple[np.ndarray, bytes]:
    """For a matcher's sorted renderings and a mask over its domain (1: admissible): the number of admissible values
    among the first ``j`` renderings, for every ``j``, as an int64 array (a decoder's wide rows gather it) and as its
    bytes (an asked slot's questions read them: :func:`span_has`, :func:`span_ends`). Kept per (matcher, mask): both
    ask it for the same settled field."""
    key = (id(m), mask)
    hit = _COUNTS.get(key)
    if hit is None or hit[0] is not m:
        if _rows is not None:  # one pass in C (_rows.c), the array a view of its bytes
            order64 = m._order_i64
            if order64 is None:
                order64 = m._order_i64 = np.asarray(m.order, dtype=np.int64).tobytes()
            raw = _rows.admissible_counts(mask, order64)
            hit = (m, (np.frombuffer(raw, dtype=np.int64), raw))
        else:
            order = m._order_intp
            if order is None:
                order = m._order_intp = np.asarray(m.order, dtype=np.intp)
            arr = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(np.frombuffer(mask, dtype=np.uint8)[order], out=arr[1:])
            hit = (m, (arr, arr.tobytes()))
        with _MATCHERS_LOCK:
            _COUNTS[key] = hit
            while len(_COUNTS) > 256:
                _COUNTS.popitem(last=False)
    return hit[1]  # (the pair kept: the callers keep it too, one object for the collector, not one per call)


_SAME: OrderedDict[tuple[int, int], tuple[Any, Any, bool]] = OrderedDict()


def same_domain(m: Any, values: Any) -> bool:
    """Whether a slot's matcher lists exactly ``values`` in their order (same types: ``True`` is not ``1``): then a
    session's mask over the field's domain indexes the matcher's domain. A union branch's matcher at a pointer may
    have another domain of the same size; kept per (matcher, values), both held with the answer."""
    key = (id(m), id(values))
    hit = _SAME.get(key)
    if hit is None or hit[0] is not m or hit[1] is not values:
        dom = m.domain
        # (in C: equal lists, then equal types; a comparison per value in Python cost 0.1 ms per new field and state)
        ok = len(dom) == len(values) and (dom is values or list(dom) == list(values) and
                                          list(map(type, dom)) == list(map(type, values)))
        hit = (m, values, ok)
        with _MATCHERS_LOCK:
            _SAME[key] = hit
            while len(_SAME) > 4096:
                _SAME.popitem(last=False)
    return hit[2]


_MATCHERS: OrderedDict[tuple[Any, ...], EnumSlot] = OrderedDict()
_MATCHERS_LOCK = threading.Lock()


def field_matcher(f: Field, indent: int | None = None, depth: int = 0) -> EnumSlot | _RangeSlot:
    """The byte matcher of a field's slot: its domain's renderings (a range of integers: by digits; object and
    array values as a record rendered with ``indent`` writes them at ``depth``). A long domain of scalars (BFCL's
    11,323 dates) is rendered and sorted once per process and shared by every declaration that has it (the matcher
    is read-only but for its caches of answers, which hold for any slot with that domain)."""
    if isinstance(f.values, range):
        return _RangeSlot(f.values)
    values = f.values
    if any(isinstance(v, (dict, list)) for v in values):
        return EnumSlot(values, indent, depth)
    if len(values) < 256 or not all(isinstance(v, (str, int, float)) for v in values):
        return EnumSlot(values)
    key = tuple((type(v), v) for v in values)  # True and 1 are different values, equal keys otherwise
    with _MATCHERS_LOCK:
        hit = _MATCHERS.get(key)
        if hit is not None:
            _MATCHERS.move_to_end(key)
            _note_same(hit, values)  # the key compared them, value and type
            return hit
    slot = EnumSlot(values)
    with _MATCHERS_LOCK:
        _MATCHERS[key] = slot
        while len(_MATCHERS) > 64:
            _MATCHERS.popitem(last=False)
        _note_same(slot, values)
    return slot


def _note_same(m: EnumSlot, values: Any) -> None:
    """Record that ``m`` lists exactly ``values`` (what :func:`same_domain` would find, comparing every value: 40 us
    for a day of minutes, on the path where a declaration's wide field is first asked). The caller holds the lock."""
    _SAME[(id(m), id(values))] = (m, values, True)
    while len(_SAME) > 4096:
        _SAME.popitem(last=False)


def open_slot(f: Field | EnumSlot | _RangeSlot, questions: Any) -> tuple[bytes, list[int], bool]:
    """What a decoder asks of a wide field when its slot opens (the certain-run planner's first questions): the
    bytes every admissible value starts with, the admissible next bytes where they branch, and whether the bytes
    so far are a whole admissible value. Certain iff no next byte is admissible and the value is whole.

    >>> import factorspec_cp as fs
    >>> spec = fs.Spec({"type": "object", "required": ["t"], "properties": {
    ...     "t": {"type": "integer", "minimum": 0, "maximum": 999}}}, [fs.Compare("/t", ">=", 990)])
    >>> open_slot(spec.fields["/t"], spec.session().questions("/t"))
    (b'99', [48, 49, 50, 51, 52, 53, 54, 55, 56, 57], False)
    """
    m = f if isinstance(f, (EnumSlot, _RangeSlot)) else field_matcher(f)
    slot = _AskedSlot(m, questions)
    sub = b""
    while True:
        nxt = [b for b in sorted(m.next_bytes(sub)) if slot.has_prefix(sub + bytes((b,)))]
        whole = m.index_of(sub) is not None and slot.admits(sub)
        if len(nxt) != 1 or whole:
            return sub, nxt, whole
        sub += bytes(nxt)


#: How many positions ``(pc, ctr)`` :meth:`Layout.prepare` visits at most (a layout with arrays of no ``maxItems``
#: has unboundedly many).
PREPARE_POSITIONS = 1024


#: the slots of filtered domains, per their values (each with its type: ``True`` is not ``1``, ``1`` is not ``1.0``),
#: shared by every layout: a planner's filter lists a narrow field's admissible values at each new assignment, mostly
#: one value, the same names and booleans in every record
_FILTERED: OrderedDict[tuple[Any, ...], EnumSlot] = OrderedDict()
FILTERED_KEPT = 4096
_SHARED_TYPES: Final = (str, bool, int, type(None))


def _plain(values: list[Any]) -> bool:
    """Whether every value is a string, a boolean, an integer or null (what :func:`filtered_slot` shares)."""
    for v in values:
        if type(v) not in _SHARED_TYPES:
            return False
    return True


def _in_domain(f: Field, values: list[Any]) -> list[Any]:
    """``values`` that are in ``f``'s domain, each once (by :func:`value_key`), in their order."""
    if len(values) == 1:
        return values if field_index(f, values[0]) >= 0 else []
    seen: set[Any] = set()
    keep = []
    for v in values:
        k = value_key(v)
        if k not in seen and field_index(f, v) >= 0:
            seen.add(k)
            keep.append(v)
    return keep


def filtered_slot(values: list[Any]) -> EnumSlot:
    """An :class:`EnumSlot` of ``values`` (compact rendering, top level). Where every value is a string, a boolean,
    an integer or null, the slot is shared with every other slot of the same values of the same types (a slot is
    read-only but for its caches of answers, which hold for any slot of those values); else made anew."""
    if not _plain(values):
        return EnumSlot(values)
    key = tuple([(type(v), v) for v in values])
    hit = _FILTERED.get(key)
    if hit is None:
        hit = EnumSlot(values)
        with _MATCHERS_LOCK:
            _FILTERED[key] = hit
            while len(_FILTERED) > FILTERED_KEPT:
                _FILTERED.popitem(last=False)
    return hit


class _Filter:
    """One call's view of ``admissible``: each pointer asked once, as an :class:`EnumSlot` of domain values, or
    (a wide field's questions) as an :class:`_AskedSlot` kept with the questions object across calls."""

    def __init__(self, fn: Admissible, shared: dict[Any, EnumSlot], asking: weakref.WeakKeyDictionary[Any, Any]):
        self.fn = fn
        self.shared = shared  # the layout's cache of filtered domains, across calls
        self.asking = asking  # the layout's asked slots per questions object, across calls
        self.asked: dict[str, Any] = {}
        self.memo: dict[tuple[str, int], EnumSlot | _AskedSlot | None] = {}
        self.by_ins: dict[tuple[int, tuple[int, ...]], EnumSlot | _AskedSlot | None] = {}  # Layout._allowed's
        self.leads: dict[tuple[int, tuple[int, ...]], bool] = {}  # Layout._leads_on's

    def answer(self, pointer: str) -> Any:
        """What ``admissible`` says of ``pointer`` (asked once per filter)."""
        if pointer not in self.asked:
            self.asked[pointer] = self.fn(pointer)
        return self.asked[pointer]

    def get(self, pointer: str, f: Field, matcher: Any) -> EnumSlot | _AskedSlot | None:
        key = (pointer, id(f))  # union branches share pointers, not domains
        if key not in self.memo:
            vals = self.answer(pointer)
            if vals is None:
                self.memo[key] = None
            elif hasattr(vals, "among"):
                # the slots asked of these questions, across calls: a session's FieldQuestions keeps them itself (a
                # WeakKeyDictionary's look-up runs as Python); other questions objects, in the layout's weak map
                slots = vals.slots if type(vals) is FieldQuestions else self.asking.get(vals)
                if slots is None:
                    slots = self.asking[vals] = {}
                asked = slots.get(id(matcher))
                if asked is None:
                    if getattr(vals, "size", len(matcher.domain)) != len(matcher.domain):
                        raise ValueError(f"{pointer}: the questions are about {vals.size} values, the slot has "
                                         f"{len(matcher.domain)}")
                    asked = slots[id(matcher)] = _AskedSlot(matcher, vals)
                self.memo[key] = asked
            else:
                vals = list(vals)
                if _plain(vals):  # strings, booleans, integers, null: straight to the shared slot table, no key kept
                    # per ask here (three tuples more per ask for the collector; the slot is shared anyway)
                    slot = filtered_slot(_in_domain(f, vals))
                else:
                    cache_key = (id(f), tuple([value_key(v) for v in vals]))
                    kept = self.shared.get(cache_key)
                    if kept is None:
                        kept = filtered_slot(_in_domain(f, vals))
                        if len(self.shared) > 4096:
                            self.shared.clear()
                        self.shared[cache_key] = kept
                    slot = kept
                self.memo[key] = slot
        return self.memo[key]


class _LiteralAt:
    """:meth:`Layout.forced_bytes`' state after ``k`` bytes of a stretch of literals (``starts``: where each literal of
    the stretch starts in it, ``cores``: its program position; ``sub``: the bytes of the first one already typed). A
    callable object, not a closure: compiled, a function with a nested one allocates its closure's environment at
    every call (most of forced_bytes' calls return no stretch, or one its caller steps whole), two objects the
    garbage collector walks while a plan keeps them."""

    __slots__ = ("starts", "cores", "sub", "pending")

    def __init__(self, starts: tuple[int, ...], cores: tuple[Core, ...], sub: int, pending: tuple[Event, ...]):
        self.starts, self.cores, self.sub, self.pending = starts, cores, sub, pending

    def __call__(self, k: int) -> State:
        starts, at = self.starts, self.sub + k
        j = bisect_right(starts, at) - 1
        p, c, _ = self.cores[j]
        one = ((p, c, at - starts[j]), self.pending)
        return State(frozenset((one,)), (), one)


class _ValueAt:
    """:meth:`Layout.forced_bytes`' state after ``k`` more bytes of a value's rendering (``rest``) in its slot
    (``pc``, ``ctr``; ``sub`` typed). A callable object, as :class:`_LiteralAt`."""

    __slots__ = ("pc", "ctr", "sub", "rest", "pending")

    def __init__(self, pc: int, ctr: tuple[int, ...], sub: bytes, rest: bytes, pending: tuple[Event, ...]):
        self.pc, self.ctr, self.sub, self.rest, self.pending = pc, ctr, sub, rest, pending

    def __call__(self, k: int) -> State:
        one = ((self.pc, self.ctr, self.sub + self.rest[:k]), self.pending)
        return State(frozenset((one,)), (), one)


class Layout:
    """The canonical layout of a declaration's records, as a byte automaton.

    Parameters
    ----------
    spec
        A :class:`~factorspec_cp.Spec`, a compiled schema, or a JSON Schema document.
    indent
        ``None`` (default): compact, ``json.dumps(record, separators=(", ", ": "))``; an integer ``N``:
        ``json.dumps(record, indent=N)``. Both with ``ensure_ascii=False`` and schema property order.

    Field slots hold the canonical rendering of a domain value; free strings hold canonical JSON content (the
    escapes ``json.dumps`` writes, no others); free integers are canonical (at most 100 digits where unbounded:
    ``freeslot.MAX_INTEGER_DIGITS``); free numbers follow the JSON grammar.
    Methods that take ``admissible`` restrict each field slot to the values it returns for the slot's pointer
    (``None`` for a pointer: no restriction); it is called at most once per pointer per call. The filter looks at
    the slot being typed and at the start of the next one, no further: sets from a sound solver never strand a
    walk, arbitrary ones (a union tag allowed only for a branch no value leads to) can.
    """

    def __init__(self, spec: Any, *, indent: int | None = None):
        if isinstance(spec, CompiledSchema):
            compiled = spec
        elif hasattr(spec, "compiled"):
            compiled = spec.compiled
        elif isinstance(spec, Mapping):
            compiled = compile_schema(dict(spec))
        else:
            raise TypeError(f"Layout needs a Spec, a compiled schema or a JSON Schema, not {type(spec).__name__}")
        if indent is not None and (isinstance(indent, bool) or not isinstance(indent, int) or indent < 0):
            raise ValueError(f"indent must be a non-negative integer or None, not {indent!r}")
        self.compiled, self.indent = compiled, indent
        self._code: list[list[Any]] = []
        self._buf = b""
        self._compile(compiled.root, (), 0)
        self._emit(ACCEPT)
        self._closures: dict[tuple[int, tuple[int, ...]], tuple[Core, ...]] = {}
        self._follows: dict[tuple[int, tuple[int, ...]], frozenset[int]] = {}  # :meth:`_follow`
        self._chains: dict[tuple[int, tuple[int, ...]], tuple[bytes, tuple[int, ...], tuple[Core, ...]]] = {}
        self._pointers: dict[tuple[tuple[str | int | None, ...], tuple[int, ...]], str] = {}
        self._filtered: dict[Any, EnumSlot] = {}
        self._asking: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._prepared = False  # (prepare)
        self._start = State(frozenset((core, ()) for core in self._closure(0, ())))

    def __repr__(self) -> str:
        style = "compact" if self.indent is None else f"indent={self.indent}"
        return f"Layout({style}, {len(self._code)} instructions)"

    # -- compilation --------------------------------------------------------------------------------------------
    def _lit(self, text: str) -> None:
        self._buf += text.encode("utf-8")

    def _emit(self, *ins: Any) -> int:
        self._here()
        self._code.append(list(ins))
        return len(self._code) - 1

    def _here(self) -> int:
        if self._buf:
            self._code.append([LIT, self._buf])
            self._buf = b""
        return len(self._code)

    def _sep(self, depth: int, first: bool) -> str:
        """What precedes an item at nesting ``depth + 1``."""
        if self.indent is None:
            return "" if first else ", "
        return ("" if first else ",") + "\n" + " " * (self.indent * (depth + 1))

    def _end(self, depth: int, bracket: str) -> str:
        return bracket if self.indent is None else "\n" + " " * (self.indent * depth) + bracket

    def _compile(self, node: Node, segs: tuple[str | int | None, ...], depth: int) -> None:
        if isinstance(node, Leaf):
            f = node.field
            if isinstance(f, Field):
                self._emit(FIELD, segs, field_matcher(f, self.indent, depth), f)
            else:
                self._emit(FREE, segs, _free_slot(f), f)
        elif isinstance(node, ObjectNode):
            self._object(node, segs, depth)
        elif isinstance(node, ArrayNode):
            if node.prefix:
                self._tuple(node, segs, depth)
                return
            self._lit("[")
            self._emit(ASTART)
            loop = self._emit(ALOOP, node.min_items, node.max_items, None, None, None, None)
            first = self._here()
            self._lit(self._sep(depth, True))
            j1 = self._emit(JMP, None)
            more = self._here()
            self._lit(self._sep(depth, False))
            j2 = self._emit(JMP, None)
            body = self._here()
            self._compile(node.items, (*segs, None), depth + 1)
            self._emit(ANEXT, loop)
            empty = self._here()
            self._lit("]")
            j3 = self._emit(JMP, None)
            close = self._here()
            self._lit(self._end(depth, "]"))
            end = self._here()
            self._code[loop][3:7] = [first, more, empty, close]
            self._code[j1][1] = self._code[j2][1] = body
            self._code[j3][1] = end
        elif isinstance(node, UnionNode):
            split = self._emit(SPLIT, ())
            targets, jumps = [], []
            for branch in node.branches:
                targets.append(self._here())
                self._compile(branch, segs, depth)
                jumps.append(self._emit(JMP, None))
            self._code[split][1] = tuple(targets)
            end = self._here()
            for j in jumps:
                self._code[j][1] = end
        else:  # pragma: no cover - the schema compiler makes no other node
            raise TypeError(f"unknown node {node!r}")

    def _tuple(self, node: ArrayNode, segs: tuple[str | int | None, ...], depth: int) -> None:
        """An array with a prefix: its items unrolled, each at its own index (from ``min_items`` on, the array may
        close before each), then the loop of the remaining items, counted from the prefix's length."""
        n = len(node.prefix)
        self._lit("[")
        stops: list[tuple[int, int]] = []  # (SPLIT before item i, i)
        for i, el in enumerate(node.prefix):
            if i >= node.min_items:
                stops.append((self._emit(SPLIT, None), i))
                self._here()
            self._lit(self._sep(depth, i == 0))
            self._compile(el, (*segs, str(i)), depth + 1)
        loop = None
        if node.max_items is None or node.max_items > n:
            self._emit(ASTART)
            loop = self._emit(ALOOP, max(0, node.min_items - n),
                              None if node.max_items is None else node.max_items - n, None, None, None, None)
            more = self._here()
            self._lit(self._sep(depth, False))
            self._compile(node.items, (*segs, n), depth + 1)
            self._emit(ANEXT, loop)
        close = self._here()
        self._lit(self._end(depth, "]"))
        jump = self._emit(JMP, None)
        empty = self._here()
        self._lit("]")
        end = self._here()
        self._code[jump][1] = end
        if loop is not None:
            self._code[loop][3:7] = [more, more, close, close]
        for k, i in stops:  # write item i, or close the array before it
            self._code[k][1] = (k + 1, empty if i == 0 else close)

    def _object(self, node: ObjectNode, segs: tuple[str | int | None, ...], depth: int) -> None:
        props = node.properties
        self._lit("{")
        if not props:
            self._lit("}")
            return
        n = len(props)
        # label (i, first): property i is next and nothing was written yet (first) or something was
        can_be_first = [all(not p.required for p in props[:i]) for i in range(n + 1)]
        labels: dict[Any, int] = {}
        patches: list[tuple[int, int | None, Any]] = []  # (instruction, SPLIT target index or None, label)
        for i, prop in enumerate(props):
            for first in (True, False):
                if (first and not can_be_first[i]) or (not first and i == 0):
                    continue
                labels[(i, first)] = self._here()
                if not prop.required:
                    k = self._emit(SPLIT, [None, None])
                    patches += [(k, 0, ("key", i, first)), (k, 1, (i + 1, first))]
                    labels[("key", i, first)] = self._here()
                self._lit(self._sep(depth, first) + json.dumps(prop.name, ensure_ascii=False) + ": ")
                patches.append((self._emit(JMP, None), None, ("value", i)))
            labels[("value", i)] = self._here()
            self._compile(prop.node, (*segs, escape_token(prop.name)), depth + 1)
            patches.append((self._emit(JMP, None), None, (i + 1, False)))
        end_jump = None
        if can_be_first[n]:
            labels[(n, True)] = self._here()
            self._lit("}")
            end_jump = self._emit(JMP, None)
        labels[(n, False)] = self._here()
        self._lit(self._end(depth, "}"))
        end = self._here()
        if end_jump is not None:
            self._code[end_jump][1] = end
        for k, j, label in patches:
            if j is None:
                self._code[k][1] = labels[label]
            else:
                self._code[k][1][j] = labels[label]
        for k, _, _ in patches:
            if self._code[k][0] == SPLIT:
                self._code[k][1] = tuple(self._code[k][1])

    # -- threads ------------------------------------------------------------------------------------------------
    def _closure(self, pc: int, ctr: tuple[int, ...]) -> tuple[Core, ...]:
        """The consuming positions reachable from ``pc`` without reading a byte."""
        key = (pc, ctr)
        hit = self._closures.get(key)
        if hit is not None:
            return hit
        out: list[Core] = []
        seen = set()
        stack = [key]
        while stack:
            at = stack.pop()
            if at in seen:
                continue
            seen.add(at)
            p, c = at
            ins = self._code[p]
            op = ins[0]
            if op == LIT:
                out.append((p, c, 0))
            elif op in (FIELD, FREE):
                out.append((p, c, ins[2].start))
            elif op == ACCEPT:
                out.append((p, c, None))
            elif op == JMP:
                stack.append((ins[1], c))
            elif op == SPLIT:
                stack.extend((t, c) for t in reversed(ins[1]))
            elif op == ASTART:
                stack.append((p + 1, (*c, 0)))
            elif op == ALOOP:
                count, lo, hi = c[-1], ins[1], ins[2]
                if count >= lo:
                    stack.append((ins[5] if count == 0 else ins[6], c[:-1]))
                if hi is None or count < hi:
                    stack.append((ins[3] if count == 0 else ins[4], c))
            elif op == ANEXT:
                stack.append((ins[1], (*c[:-1], c[-1] + 1)))
        result = tuple(out)
        if len(self._closures) > 200_000:
            self._closures.clear()
        self._closures[key] = result
        return result

    def _literals(self, pc: int, ctr: tuple[int, ...]) -> tuple[bytes, tuple[int, ...], tuple[Core, ...]]:
        """The literal at ``pc`` (array counters ``ctr``) and the literals after it that nothing can branch from: while
        the only consuming position reachable after a literal's last byte is the start of another literal (a jump, an
        array's next item or its end, decided by the counters), that one follows. Their bytes, where each starts in
        them, and each one's position at its start. The fixed syntax between two slots is often several literals (``}``,
        ``, ``, ``{``, a key): :meth:`forced_bytes` gives them in one step, where stepping the last byte of each in
        turn found the same bytes. Kept per ``(pc, ctr)``: a function of the layout alone."""
        key = (pc, ctr)
        hit = self._chains.get(key)
        if hit is None:
            data = self._code[pc][1]
            starts, cores = [0], [(pc, ctr, 0)]
            p, c = pc, ctr
            while len(cores) < 64:
                nxt = self._closure(p + 1, c)
                if len(nxt) != 1 or self._code[nxt[0][0]][0] != LIT:
                    break
                p, c, _ = nxt[0]
                starts.append(len(data))
                cores.append(nxt[0])
                data += self._code[p][1]
            if len(self._chains) > 200_000:
                self._chains.clear()
            hit = self._chains[key] = (data, tuple(starts), tuple(cores))
        return hit

    def prepare(self, limit: int = PREPARE_POSITIONS) -> int:
        """Compute ahead what the walk of a record keeps per ``(pc, ctr)`` and computes on first use: the closures,
        the chains of literals (:meth:`_literals`), the bytes that may follow a slot (:meth:`_follow`) and the
        slots' pointers, for every position a record can reach, breadth first, up to ``limit`` of them (an array
        with no ``maxItems`` has no last one: past the limit they are computed on first use, as before). A function
        of the layout alone, done once (a decoder's :meth:`~.decoder.Decoder.prime`, off the step loop): on
        meeting, each record is the first on its declaration, and these first uses were 5% of its walk's
        instructions. Returns how many positions were visited."""
        if self._prepared:
            return 0
        self._prepared = True
        code = self._code
        seen: set[tuple[int, tuple[int, ...]]] = {(0, ())}
        todo: list[tuple[int, tuple[int, ...]]] = [(0, ())]
        k = 0
        while k < len(todo) and k < limit:
            pc, ctr = todo[k]
            k += 1
            for p, c, _ in self._closure(pc, ctr):
                ins = code[p]
                op = ins[0]
                if op == ACCEPT:
                    continue
                if op == LIT:
                    self._literals(p, c)
                else:  # a value slot: its pointer, and what may follow its value
                    self._pointer(ins[1], c)
                    self._follow(p + 1, c)
                nxt = (p + 1, c)
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return k

    def _pointer(self, segs: tuple[str | int | None, ...], ctr: tuple[int, ...]) -> str:
        key = (segs, ctr)
        ptr = self._pointers.get(key)
        if ptr is None:
            idx = iter(ctr)
            # a None segment is an array loop's counter; an integer one, the counter past a prefix of that length
            ptr = "".join("/" + (s if isinstance(s, str) else str(next(idx) + (s or 0))) for s in segs)
            if len(self._pointers) > 200_000:
                self._pointers.clear()
            self._pointers[key] = ptr
        return ptr

    def _allowed(self, ins: list[Any], ctr: tuple[int, ...], flt: _Filter | None) -> EnumSlot | _AskedSlot | None:
        if flt is None or ins[0] != FIELD:
            return None
        key = (id(ins), ctr)  # (the layout's instructions live as long as it: their ids are theirs)
        hit = flt.by_ins.get(key, _MISS)
        if hit is _MISS:  # the slot's pointer and the filter's answer for it, once per filter
            hit = flt.by_ins[key] = flt.get(self._pointer(ins[1], ctr), ins[3], ins[2])
        return hit  # type: ignore[return-value]

    def _enter(self, pc: int, ctr: tuple[int, ...], flt: _Filter | None) -> list[tuple[Core, tuple[Event, ...]]]:
        return [(core, ()) for core in self._closure(pc, ctr) if self._may_enter(core, flt)]

    def _leads_on(self, pc: int, ctr: tuple[int, ...], flt: _Filter) -> bool:
        """Whether some position reachable from ``pc`` may be entered under ``flt`` (asked at every byte of a literal
        a token spans: kept per filter)."""
        key = (pc, ctr)
        hit = flt.leads.get(key)
        if hit is None:
            hit = flt.leads[key] = any(self._may_enter(c, flt) for c in self._closure(pc, ctr))
        return hit

    def _may_enter(self, core: Core, flt: _Filter | None) -> bool:
        """Whether a slot at its start has an admissible value (anything else: yes)."""
        allowed = self._allowed(self._code[core[0]], core[1], flt)
        return allowed is None or allowed.has_prefix(b"")

    def _complete(self, ins: list[Any], ctr: tuple[int, ...], sub: Any, value: Any,
                  flt: _Filter | None) -> tuple[Event, ...] | None:
        """The events of completing a slot with ``value``; ``None`` where the filter forbids it."""
        if ins[0] == FREE:
            return ()
        allowed = self._allowed(ins, ctr, flt)
        if allowed is not None and not allowed.admits(sub):
            return None
        return ((self._pointer(ins[1], ctr), value),)

    def _step(self, core: Core, b: int, flt: _Filter | None) -> list[tuple[Core, tuple[Event, ...]]]:
        pc, ctr, sub = core
        ins = self._code[pc]
        op = ins[0]
        if op == LIT:
            data = ins[1]
            if data[sub] != b:
                return []
            if sub + 1 < len(data):
                if flt is not None and not self._leads_on(pc + 1, ctr, flt):
                    return []  # the literal leads only into slots with nothing admissible
                return [((pc, ctr, sub + 1), ())]
            return self._enter(pc + 1, ctr, flt)
        if op == ACCEPT:
            return []
        m = ins[2]
        # (a field's EnumSlot, the slot most steps are in, called natively; other slots by a generic call)
        e: EnumSlot | None = m if type(m) is EnumSlot else None
        out: list[tuple[Core, tuple[Event, ...]]] = []
        v = e.value(sub) if e is not None else m.value(sub)
        if v is not NOTHING and b in self._follow(pc + 1, ctr):  # the value ends here: b belongs to what follows
            ev = self._complete(ins, ctr, sub, v, flt)
            if ev is not None:
                for nxt, _ in self._enter(pc + 1, ctr, flt):
                    out.extend((c, ev + e2) for c, e2 in self._step(nxt, b, flt))
        sub2 = e.step(sub, b) if e is not None else m.step(sub, b)
        if sub2 is not None:
            allowed = self._allowed(ins, ctr, flt)
            if allowed is None or allowed.has_prefix(sub2):
                v2 = e.value(sub2) if e is not None else m.value(sub2)
                if v2 is not NOTHING and not (e.extendable(sub2) if e is not None else m.extendable(sub2)):
                    # nothing can extend it: complete now
                    ev = self._complete(ins, ctr, sub2, v2, flt)
                    if ev is not None:
                        out.extend((c, ev) for c, _ in self._enter(pc + 1, ctr, flt))
                else:
                    out.append(((pc, ctr, sub2), ()))
        return out

    def _can_step(self, core: Core, b: int, flt: _Filter | None) -> bool:
        """``bool(self._step(core, b, flt))``, trying first the thread that stays in a value slot: a byte that
        continues a value some admissible value starts with needs no look at the value ending there."""
        pc, ctr, sub = core
        ins = self._code[pc]
        if ins[0] in (FIELD, FREE):
            m = ins[2]
            sub2 = m.step(sub, b)
            if sub2 is not None:
                allowed = self._allowed(ins, ctr, flt)
                if (allowed is None or allowed.has_prefix(sub2)) and (m.value(sub2) is NOTHING or m.extendable(sub2)):
                    return True
        return bool(self._step(core, b, flt))

    def _follow(self, pc: int, ctr: tuple[int, ...]) -> frozenset[int]:
        """Every byte that may start what is at ``pc`` (no filter): a value ends before a byte only if one of
        these, so :meth:`_step` asks whether it may end only then."""
        key = (pc, ctr)
        hit = self._follows.get(key)
        if hit is None:
            out: set[int] = set()
            for nxt in self._closure(pc, ctr):
                sure, check = self._next(nxt)
                out |= sure | check
            if len(self._follows) > 200_000:
                self._follows.clear()
            hit = self._follows[key] = frozenset(out)
        return hit

    def _next(self, core: Core) -> tuple[frozenset[int], frozenset[int]]:
        """Bytes that continue ``core`` without a filter: (sure under any filter, to check under a filter)."""
        pc, ctr, sub = core
        ins = self._code[pc]
        op = ins[0]
        if op == LIT:
            return frozenset(), frozenset((ins[1][sub],))
        if op == ACCEPT:
            return frozenset(), frozenset()
        m = ins[2]
        ext = m.next_bytes(sub)
        follow: set[int] = set()
        if m.value(sub) is not NOTHING:
            for nxt in self._closure(pc + 1, ctr):
                sure, check = self._next(nxt)
                follow |= sure | check
        if op == FREE:
            return ext, frozenset(follow)
        return frozenset(), ext | frozenset(follow)

    def _flt(self, admissible: Admissible | _Filter | None) -> _Filter | None:
        if admissible is None or isinstance(admissible, _Filter):
            return admissible
        return _Filter(admissible, self._filtered, self._asking)

    # -- public -------------------------------------------------------------------------------------------------
    def filter(self, admissible: Admissible) -> _Filter:
        """``admissible`` wrapped once for many calls: each pointer is asked once over the filter's life (use one
        per solver state). Every method taking ``admissible`` also takes a filter."""
        return _Filter(admissible, self._filtered, self._asking)

    def after_free_slot(self, state: State, *, admissible: Admissible | _Filter | None = None) -> State | None:
        """For a state of one thread inside a free slot: the state right after the slot's value completes there
        (a free string: after its closing quote), or ``None`` where nothing can follow."""
        th = state.one()
        if th is None:
            raise ValueError("after_free_slot needs a state of exactly one thread")
        (pc, ctr, _), pending = th
        if self._code[pc][0] != FREE:
            raise ValueError("after_free_slot needs a state inside a free slot")
        threads = {(core, pending) for core, _ in self._enter(pc + 1, ctr, self._flt(admissible))}
        return _release(threads) if threads else None

    def free_string(self, state: State) -> tuple[StringSlot, Any] | None:
        """The free string slot and its sub-state, when ``state`` is one thread inside a free string's quotes."""
        th = state.one()
        if th is None:
            return None
        pc, sub = th[0][0], th[0][2]
        ins = self._code[pc]
        if ins[0] == FREE and isinstance(ins[2], StringSlot) and sub[1] == 1:
            return ins[2], sub
        return None

    def forced_bytes(self, state: State, *, admissible: Admissible | _Filter | None = None
                     ) -> tuple[bytes, Any] | None:
        """For a live state of one thread inside fixed syntax, or at or inside a field slot whose filtered domain
        keeps exactly one value consistent with the bytes typed: the bytes every valid continuation writes next (the
        rest of the literal and of the literals nothing can branch from after it (:meth:`_literals`), or the rest of
        that value's rendering), and a function of ``k`` giving the state after ``k`` of them, for ``k`` below their
        length. The last byte completes the literal or the value and is left to :meth:`advance`, which reports the
        event and enters what follows. For a wide field (asked, not listed) whose answers are settled
        (:meth:`_AskedSlot.forced`): the bytes all its admissible values consistent with the bytes typed write next
        (the last one left to :meth:`advance` likewise, which may complete a value or not). ``None`` elsewhere, and for
        a wide field whose answers are not settled.

        This is how a planner takes fixed syntax and certain values in one step each, not byte by byte: one thread
        means no other branch is open, and with one value left no proper prefix of it completes a value the filter
        admits, so every state on the way is that thread, one byte further."""
        th = state.one()
        if th is None:
            return None
        (pc, ctr, sub), pending = th
        ins = self._code[pc]
        if ins[0] == LIT:
            data, starts, cores = self._literals(pc, ctr)
            return data[sub:], _LiteralAt(starts, cores, sub, pending)
        if ins[0] != FIELD:
            return None
        allowed = self._allowed(ins, ctr, self._flt(admissible))
        if isinstance(allowed, _AskedSlot):  # a settled wide field: its admissible values' common bytes
            rest = allowed.forced(sub)
            if not rest:
                return None
            return rest, _ValueAt(pc, ctr, sub, rest, pending)
        if not isinstance(allowed, EnumSlot):
            return None
        lo, hi = allowed._span(sub)
        if hi - lo != 1:
            return None
        rest = allowed.renders[lo][len(sub):]
        if not rest:
            return None
        return rest, _ValueAt(pc, ctr, sub, rest, pending)

    def branches(self, state: State, *, admissible: Admissible | _Filter | None = None) -> bool:
        """Whether ``state`` is inside a settled wide field slot (one thread) where two admissible values part in
        their next byte (:meth:`_AskedSlot.branches`): then no next byte is certain, which a planner learns here
        without stepping the candidates (:meth:`some_next_bytes`). ``False`` elsewhere (not known)."""
        th = state.one()
        if th is None:
            return False
        pc, ctr, sub = th[0]
        ins = self._code[pc]
        if ins[0] != FIELD:
            return False
        allowed = self._allowed(ins, ctr, self._flt(admissible))
        return isinstance(allowed, _AskedSlot) and allowed.branches(sub)

    def value_choice(self, state: State) -> tuple[str, Field, EnumSlot, bytes, bytes] | None:
        """Where every record at ``state`` writes some fixed bytes (maybe none) and then the value of one finite
        field slot, or ``state`` is inside such a slot: the slot's pointer, field and matcher, the fixed bytes before
        it and the bytes of its value typed so far. ``None`` elsewhere (several threads, a branch before the slot, a
        free slot, an integer range). The decoder's choice tables (:class:`~.decoder.ChoiceTable`) are built on it:
        there the tokens admitted are decided by the slot's admissible values alone."""
        th = state.one()
        if th is None:
            return None
        pc, ctr, sub = th[0]
        before = b""
        for _ in range(64):
            ins = self._code[pc]
            if ins[0] == LIT:
                before += ins[1][sub:]
                nxt = self._closure(pc + 1, ctr)
                if len(nxt) != 1:
                    return None
                pc, ctr, sub = nxt[0]
            elif ins[0] == FIELD and type(ins[2]) is EnumSlot:
                return self._pointer(ins[1], ctr), ins[3], ins[2], before, sub
            else:
                return None
        return None

    def enum_slot_at(self, pc: int, ctr: tuple[int, ...]) -> tuple[str, Field, EnumSlot] | None:
        """Where program counter ``pc`` (array counters ``ctr``) is a finite field slot: its pointer, field and
        matcher, as :meth:`value_choice` names them for a state of one thread inside it (whatever bytes of the value
        were typed); ``None`` elsewhere. A function of the layout alone: a decoder keeps it per ``(pc, ctr)``."""
        ins = self._code[pc]
        if ins[0] == FIELD and type(ins[2]) is EnumSlot:
            return self._pointer(ins[1], ctr), ins[3], ins[2]
        return None

    def start(self) -> State:
        """The state before the first byte."""
        return self._start

    def advance(self, state: State, data: bytes, *, admissible: Admissible | _Filter | None = None) -> State | None:
        """The state after ``data``, or ``None`` when no record (with admissible field values) continues so."""
        flt = self._flt(admissible)
        th = state.one() if len(data) == 1 else None
        if th is not None:  # (a planner's step, a consume's one-byte token: no sets)
            core, pending = th
            out = self._step(core, data[0], flt)
            if len(out) == 1:
                c2, ev = out[0]
                done = pending + ev if ev else pending
                # one thread: every event it completed is released (as _release does)
                one = (c2, ()) if done else (c2, pending)
                return State(frozenset((one,)), done, one)
            if not out:
                return None
            return _release({(c2, pending + ev if ev else pending) for c2, ev in out})
        cur: set[Thread] = set(state.threads)
        for b in data:
            nxt: set[Thread] = set()
            for core, pending in cur:
                for c2, ev in self._step(core, b, flt):
                    nxt.add((c2, pending + ev if ev else pending))
            if not nxt:
                return None
            cur = nxt
        return _release(cur)

    def advance_in_string(self, state: State, data: bytes) -> tuple[State, int]:
        """For a state of one thread inside a free string's quotes: the state after the longest prefix of ``data``
        that stays inside them, and its length (``(state, 0)`` elsewhere). What :meth:`advance` does byte by byte
        there, in one step: inside a free string no filter applies and no value completes."""
        th = state.one() if data else None
        if th is None:
            return state, 0
        (pc, ctr, sub), pending = th
        ins = self._code[pc]
        m = ins[2] if ins[0] == FREE else None
        if not isinstance(m, StringSlot) or sub[1] != 1:
            return state, 0
        core, k = sub[1:], 0
        step = m._step
        for b in data:
            nxt = step(core, b)
            if nxt is None or nxt[0] != 1:
                break
            core, k = nxt, k + 1
        if not k:
            return state, 0
        one = ((pc, ctr, (sub[0] + data[:k], *core)), pending)
        return State(frozenset((one,)), (), one), k

    def in_string(self, state: State, data: bytes, core: tuple[Any, ...]) -> State:
        """For a state of :meth:`free_string`: the state after ``data``, which stays inside the string and ends in
        ``core`` (what the string's token tables say, :meth:`.StringMasks.step`)."""
        th = state.one()
        if th is None:
            raise ValueError("in_string needs a state of exactly one thread")
        (pc, ctr, sub), pending = th
        one = ((pc, ctr, (sub[0] + data, *core)), pending)
        return State(frozenset((one,)), (), one)

    def completed(self, state: State) -> tuple[Event, ...]:
        """The ``(pointer, value)`` of each field slot that became complete and certain in the advance into
        ``state``, in record order.

        A value completes as soon as no byte can extend it (``"Riga"``, ``15`` in 1..15), else with the byte after
        it (``1`` in 1..15); where union branches still disagree about it, it is reported once they agree. Free
        slots report nothing. Pointers inside arrays carry the element index; only those in ``spec.fields`` are
        assignable in a session."""
        return state.events

    def finish(self, state: State, *, admissible: Admissible | _Filter | None = None) -> tuple[Event, ...] | None:
        """The events of ending the output here (a root scalar completes only at the end), or ``None`` when the
        output cannot end here."""
        flt = self._flt(admissible)
        one = state.one()
        if one is not None:  # (most states: no iteration of the set, which made three iterators compiled)
            return self._finish_at(one[0], one[1], flt)
        for core, pending in state.threads:
            ev = self._finish_at(core, pending, flt)
            if ev is not None:
                return ev
        return None

    def _finish_at(self, core: Core, pending: tuple[Event, ...], flt: _Filter | None) -> tuple[Event, ...] | None:
        """:meth:`finish` for one thread."""
        pc, ctr, sub = core
        ins = self._code[pc]
        if ins[0] == ACCEPT:
            return pending
        if ins[0] in (FIELD, FREE):
            v = ins[2].value(sub)
            if v is NOTHING or not any(self._code[c[0]][0] == ACCEPT for c in self._closure(pc + 1, ctr)):
                return None
            ev = self._complete(ins, ctr, sub, v, flt)
            if ev is not None:
                return pending + ev
        return None

    def accepting(self, state: State, *, admissible: Admissible | _Filter | None = None) -> bool:
        """Whether the bytes so far are a whole record."""
        return self.finish(state, admissible=admissible) is not None

    def allowed_next_bytes(self, state: State, *, admissible: Admissible | _Filter | None = None,
                           among: frozenset[int] | None = None) -> frozenset[int]:
        """Every byte ``b`` with ``advance(state, bytes([b]))`` not ``None`` (only those of ``among``, where given:
        the others are not checked)."""
        flt = self._flt(admissible)
        out: set[int] = set()
        for core in state.cores:
            sure, check = self._next(core)
            out |= sure if among is None else sure & among
            if flt is None:
                out |= check if among is None else check & among
            else:
                out.update(b for b in (check if among is None else check & among) - out
                           if self._can_step(core, b, flt))
        return frozenset(out)

    def some_next_bytes(self, state: State, limit: int, *, admissible: Admissible | _Filter | None = None
                        ) -> frozenset[int]:
        """Up to ``limit`` bytes of :meth:`allowed_next_bytes`, found with the fewest checks: the bytes that need no
        filter first, then the others one at a time, stopping at ``limit``. A planner asks whether one byte is
        forced (``limit=2``) or whether anything follows (``limit=1``) without the whole set."""
        flt = self._flt(admissible)
        cores = state.cores
        out: set[int] = set()
        checks = []
        for core in cores:
            sure, check = self._next(core)
            out |= sure
            if len(out) >= limit:
                return frozenset(sorted(out)[:limit])
            checks.append((core, check))
        for core, check in checks:
            for b in sorted(check):
                if b in out:
                    continue
                if flt is None or self._can_step(core, b, flt):
                    out.add(b)
                    if len(out) >= limit:
                        return frozenset(out)
        return frozenset(out)

    def forced(self, state: State, *, admissible: Admissible | _Filter | None = None, limit: int = 4096) -> bytes:
        """The bytes every continuation of ``state`` starts with (stops where the output may end)."""
        admissible = self._flt(admissible)
        out = bytearray()
        while len(out) < limit and not self.accepting(state, admissible=admissible):
            nxt = self.allowed_next_bytes(state, admissible=admissible)
            if len(nxt) != 1:
                break
            b = next(iter(nxt))
            out.append(b)
            state = self.advance(state, bytes((b,)), admissible=admissible)  # type: ignore[assignment]
        return bytes(out)

    def slot(self, state: State) -> Slot | None:
        """The value slot ``state`` is in (at its start or inside it), or ``None`` in fixed syntax."""
        slots = []
        for pc, ctr, sub in state.cores:
            ins = self._code[pc]
            if ins[0] in (FIELD, FREE):
                slots.append(Slot(self._pointer(ins[1], ctr), "field" if ins[0] == FIELD else "free",
                                  ins[2].typed(sub), ins[3]))
        if not slots:
            return None
        return min(slots, key=lambda s: (s.kind, s.pointer, s.typed))

    def candidates(self, state: State, *, admissible: Admissible | _Filter | None = None) -> list[Any]:
        """The values of the current field slot still consistent with the bytes typed (and ``admissible``), in
        domain order; empty outside a field slot."""
        flt = self._flt(admissible)
        out, seen = [], set()
        for pc, ctr, sub in sorted(state.cores, key=lambda c: c[0]):
            ins = self._code[pc]
            if ins[0] != FIELD:
                continue
            allowed = self._allowed(ins, ctr, flt)
            for v in (allowed if allowed is not None else ins[2]).values(sub):
                if jkey(v) not in seen:
                    seen.add(jkey(v))
                    out.append(v)
        return out

    def render(self, record: Any) -> str:
        """The canonical text of ``record`` (which it does not validate): schema property order."""
        ordered = _order(self.compiled.root, record, "")
        if self.indent is None:
            return json.dumps(ordered, separators=(", ", ": "), ensure_ascii=False)
        return json.dumps(ordered, indent=self.indent, ensure_ascii=False)


def _release(threads: set[Thread]) -> State:
    """The state of ``threads``: the events every thread has completed are released, in order."""
    pendings = [p for _, p in threads]
    if not any(pendings):
        return State(frozenset(threads))
    first = pendings[0]
    n = min(len(p) for p in pendings)
    k = 0
    while k < n and all(p[k][0] == first[k][0] and jkey(p[k][1]) == jkey(first[k][1]) for p in pendings):
        k += 1
    if k == 0:
        return State(frozenset(threads))
    return State(frozenset((core, p[k:]) for core, p in threads), first[:k])


def _free_slot(f: FreeField) -> Any:
    sch = f.schema
    typ = f.type
    if typ == "string":
        slot: Any = StringSlot(sch, f.where or f"#{f.pointer}")
    elif typ == "integer":
        lo, hi = sch.get("minimum"), sch.get("maximum")
        lo = None if lo is None else -int((-lo) // 1)
        hi = None if hi is None else int(hi // 1)
        if "exclusiveMinimum" in sch:
            x = int(sch["exclusiveMinimum"] // 1) + 1
            lo = x if lo is None else max(lo, x)
        if "exclusiveMaximum" in sch:
            x = -int((-sch["exclusiveMaximum"]) // 1) - 1
            hi = x if hi is None else min(hi, x)
        slot = IntegerSlot(lo, hi, int(sch.get("multipleOf", 1)), 0)
    elif typ == "number":
        slot = NumberSlot(sch)
    else:  # pragma: no cover - the schema compiler makes no other free leaf
        raise DeclarationError(f"free values of type {typ!r} have no layout", pointer=f.where or f"#{f.pointer}")
    if slot.empty():
        raise DeclarationError("no value satisfies this free field's bounds", pointer=f.where or f"#{f.pointer}",
                               found=sch)
    return slot


def _order(node: Node, value: Any, at: str) -> Any:
    """``value`` with every object's keys in schema order (for rendering)."""
    if isinstance(node, Leaf):
        f = node.field
        if isinstance(value, (dict, list)) and isinstance(f, Field) and value in f:
            return f.values[f.index(value)]  # an enum's object or array as the layout writes it (its key order)
        return value
    if isinstance(node, ArrayNode):
        if not isinstance(value, list):
            raise ValueError(f"{at or '/'}: expected an array, found {value!r}")
        return [_order(node.item(k), x, f"{at}/{k}") for k, x in enumerate(value)]
    if isinstance(node, UnionNode):
        if node.discriminator is None:  # the first branch whose shape the value has
            for branch in node.branches:
                if _fits(branch, value):
                    return _order(branch, value, at)
            raise ValueError(f"{at or '/'}: {value!r} fits no branch of the union")
        tag = value.get(node.discriminator) if isinstance(value, dict) else None
        for t, branch in zip(node.tags, node.branches):
            if tag is not None and jkey(t) == jkey(tag):
                return _order(branch, value, at)
        raise ValueError(f"{at or '/'}: no branch has {node.discriminator} = {tag!r}")
    if not isinstance(value, dict):
        raise ValueError(f"{at or '/'}: expected an object, found {value!r}")
    names = [p.name for p in node.properties]
    extra = set(value) - set(names)
    if extra:
        raise ValueError(f"{at or '/'}: properties not in the schema: {sorted(extra)}")
    return {p.name: _order(p.node, value[p.name], f"{at}/{escape_token(p.name)}")
            for p in node.properties if p.name in value}


def _fits(node: Node, value: Any) -> bool:
    """Whether ``value`` has ``node``'s shape: a field's domain, a free leaf's JSON type and string length, an
    object's property names, an array's length, recursively (what picks a union branch to render it; patterns and
    number bounds are not looked at)."""
    if isinstance(node, Leaf):
        f = node.field
        if isinstance(f, Field):
            return value in f
        typ = f.type
        if typ == "string":
            return isinstance(value, str) and f.schema.get("minLength", 0) <= len(value) <= f.schema.get(
                "maxLength", len(value))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return typ == "number" or float(value).is_integer()
    if isinstance(node, ObjectNode):
        if not isinstance(value, dict):
            return False
        names = {p.name: p for p in node.properties}
        return (set(value) <= set(names) and all(p.name in value for p in node.properties if p.required)
                and all(_fits(names[k].node, v) for k, v in value.items()))
    if isinstance(node, ArrayNode):
        if not isinstance(value, list) or len(value) < node.min_items or (
                node.max_items is not None and len(value) > node.max_items):
            return False
        return all(_fits(node.item(i), x) for i, x in enumerate(value))
    if isinstance(node, UnionNode):
        return any(_fits(b, value) for b in node.branches)
    return False
