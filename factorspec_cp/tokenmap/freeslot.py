"""Byte automata for one JSON value: canonical integers, JSON numbers, and free strings with a pattern.

Each slot automaton walks the bytes of one value and keeps only prefixes that some valid value extends, so a
walk never reaches a dead end. The protocol (shared with the field slots of :mod:`.layout`): ``start`` is the
empty sub-state, ``step(sub, byte)`` the next sub-state or ``None``, ``value(sub)`` the value once complete (else
:data:`NOTHING`), ``extendable(sub)`` whether more bytes may follow, ``next_bytes(sub)`` the bytes that extend,
and ``typed(sub)`` the bytes so far. Sub-states are hashable.

>>> s = IntegerSlot(1, 15)
>>> sorted(chr(b) for b in s.next_bytes(b"1"))
['0', '1', '2', '3', '4', '5']
>>> s.value(b"1"), s.extendable(b"1"), s.extendable(b"15")
(1, True, False)
"""

from __future__ import annotations

import json
import re
import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, Union

from ..errors import CompileBudgetExceeded, DeclarationError, UnsupportedKeyword

#: ``value(sub)`` of an incomplete value.
NOTHING: Any = type("Nothing", (), {"__repr__": lambda self: "NOTHING"})()

_DIGITS = b"0123456789"


# ------------------------------------------------------------------------------------------------------- integers
_PREFIX_OK: dict[tuple[Any, ...], dict[bytes, bool]] = {}
_EXTENDABLE: dict[tuple[Any, ...], dict[bytes, bool]] = {}


#: the most digits an integer without a bound on that side may have: JSON readers stop far below infinity (Python's
#: ``json.loads`` refuses integers over 4,300 digits, IEEE doubles hold 15-17 exactly), and a uniform random walk
#: through 3-digit tokens otherwise writes numbers of thousands of digits. Bounds with more digits raise the limit.
MAX_INTEGER_DIGITS = 100


class IntegerSlot:
    """Canonical JSON integers (``-?(0|[1-9][0-9]*)``) in ``[lo, hi]`` (``None``: unbounded) congruent to
    ``base`` modulo ``step``, of at most :data:`MAX_INTEGER_DIGITS` digits where unbounded (a documented
    narrowing). Sub-state: the bytes typed."""

    start = b""

    def __init__(self, lo: int | None, hi: int | None, step: int = 1, base: int = 0):
        self.lo, self.hi, self.step_, self.base = lo, hi, step, base % step
        digits = [len(str(abs(x))) for x in (lo, hi) if x is not None]
        self._k = max(digits, default=1) + len(str(step)) + 2
        self.max_digits = max([MAX_INTEGER_DIGITS, *digits])
        # answers depend only on (lo, hi, step, base): shared by every slot with those bounds (trip days, BFCL
        # years), so a new declaration starts with what earlier ones computed
        key = (lo, hi, step, self.base)
        self._ok: dict[bytes, bool] = _PREFIX_OK.setdefault(key, {})
        self._ext: dict[bytes, bool] = _EXTENDABLE.setdefault(key, {})
        if len(_PREFIX_OK) > 4096:
            _PREFIX_OK.clear()
            _EXTENDABLE.clear()

    def empty(self) -> bool:
        return self._first(self.lo, self.hi) is None

    def _first(self, a: int | None, b: int | None) -> int | None:
        """The smallest domain value in ``[a, b]`` (``None``: unbounded), or ``None``."""
        if self.lo is not None:
            a = self.lo if a is None else max(a, self.lo)
        if self.hi is not None:
            b = self.hi if b is None else min(b, self.hi)
        if a is None:
            if b is None:
                return self.base
            return b - ((b - self.base) % self.step_)  # a value exists: report the largest
        x = a + ((self.base - a) % self.step_)
        return x if b is None or x <= b else None

    def _intervals(self, t: bytes) -> Iterator[tuple[int | None, int | None]]:
        """Intervals whose union is the set of integers whose canonical rendering starts with ``t``."""
        s = t.decode("ascii", "replace")
        neg = s.startswith("-")
        digits = s[1:] if neg else s
        if digits == "":
            yield (None, -1) if neg else (None, None)
            return
        if not digits.isascii() or not digits.isdigit():
            return
        if digits[0] == "0":
            if digits == "0" and not neg:
                yield (0, 0)
            return
        d = int(digits)
        lo, hi = self.lo, self.hi
        for k in range(self._k + 1):
            a, b = d * 10**k, (d + 1) * 10**k - 1
            if neg:
                if lo is not None and -a < lo:  # this and every longer one lie below the bound: none can meet it
                    return
                yield -b, -a
            else:
                if hi is not None and a > hi:  # this and every longer one lie above the bound
                    return
                yield a, b

    def prefix_ok(self, t: bytes) -> bool:
        ok = self._ok.get(t)
        if ok is None:
            ok = (len(t) - t.startswith(b"-") <= self.max_digits
                  and any(self._first(a, b) is not None for a, b in self._intervals(t)))
            if len(self._ok) > 100_000:
                self._ok.clear()
            self._ok[t] = ok
        return ok

    def step(self, sub: bytes, byte: int) -> bytes | None:
        t = sub + bytes((byte,))
        return t if self.prefix_ok(t) else None

    def value(self, sub: bytes) -> Any:
        s = sub.decode("ascii", "replace")
        if not re.fullmatch(r"-?(?:0|[1-9][0-9]*)", s) or s == "-0":
            return NOTHING
        x = int(s)
        if (self.lo is not None and x < self.lo) or (self.hi is not None and x > self.hi):
            return NOTHING
        return x if (x - self.base) % self.step_ == 0 else NOTHING

    def next_bytes(self, sub: bytes) -> frozenset[int]:
        return frozenset(b for b in b"-" + _DIGITS if self.prefix_ok(sub + bytes((b,))))

    def extendable(self, sub: bytes) -> bool:
        ok = self._ext.get(sub)
        if ok is None:
            ok = any(self.prefix_ok(sub + bytes((b,))) for b in _DIGITS)
            if len(self._ext) > 100_000:
                self._ext.clear()
            self._ext[sub] = ok
        return ok

    def typed(self, sub: bytes) -> bytes:
        return sub

    def values(self, sub: bytes) -> Iterator[int]:
        """The domain values whose rendering starts with ``sub`` (unbounded domains: do not exhaust)."""
        seen: set[int] = set()
        for a, b in self._intervals(sub):
            x = self._first(a, b)
            while x is not None and (b is None or x <= b) and (self.hi is None or x <= self.hi):
                if x not in seen:
                    seen.add(x)
                    yield x
                x += self.step_


# -------------------------------------------------------------------------------------------------------- numbers
_NUMBER = re.compile(r"(-?)(?:(0|[1-9][0-9]*)(?:(\.)([0-9]*))?(?:([eE])([+-]?)([0-9]*))?)?")

_Bound = tuple[Union[Fraction, None], bool]  # value (None: infinite) and whether it is included
#: Free numbers are 0 or of magnitude in [TINY, HUGE]: normal doubles, so ``json.loads`` neither flushes a value
#: to 0 nor overflows it to infinity, and the exact bounds below agree with what jsonschema sees.
TINY, HUGE = Fraction(1, 10**300), Fraction(10**300)
_ZERO: _Bound = (Fraction(0), True)
_NONE: _Bound = (None, False)


class _Exponents:
    """A set of exponents: every integer, or those whose rendering starts with typed digits (with a sign)."""

    def __init__(self, sign: int = 0, digits: str = ""):
        self.sign, self.digits = sign, digits.lstrip("0")  # sign 0: every integer


def _mag(x: Fraction) -> int:
    """floor(log10(x)) for x > 0, exactly (in integers)."""
    a, b = x.numerator, x.denominator

    def at_least(n: int) -> bool:  # x >= 10**n
        return a * 10**-n >= b if n < 0 else a >= b * 10**n

    n = len(str(a)) - len(str(b))
    while not at_least(n):
        n -= 1
    while at_least(n + 1):
        n += 1
    return n


def _overlap(a: _Bound, b: _Bound, c: _Bound, d: _Bound) -> bool:
    """Whether the intervals (a, b) and (c, d) meet; each end a (value, included) pair, value None = infinite."""
    lo = _higher(a, c)
    hi = _lower(b, d)
    if lo[0] is None or hi[0] is None:
        return True
    return lo[0] < hi[0] or (lo[0] == hi[0] and lo[1] and hi[1])


def _higher(a: _Bound, c: _Bound) -> _Bound:
    """The tighter of two lower ends."""
    if a[0] is None or (c[0] is not None and c[0] > a[0]):
        return c
    if c[0] is None or a[0] > c[0]:
        return a
    return (a[0], a[1] and c[1])


def _lower(b: _Bound, d: _Bound) -> _Bound:
    """The tighter of two upper ends."""
    if b[0] is None or (d[0] is not None and d[0] < b[0]):
        return d
    if d[0] is None or b[0] < d[0]:
        return b
    return (b[0], b[1] and d[1])


def _cmp_scaled(c: Fraction, e: int, p: Fraction) -> int:
    """The sign of ``c * 10**e - p``, in integers."""
    x, y = c.numerator * p.denominator, p.numerator * c.denominator
    if e >= 0:
        x *= 10**e
    else:
        y *= 10**-e
    return (x > y) - (x < y)


def _first_e(c: Fraction, p: Fraction, strict: bool) -> int:
    """The smallest ``e`` with ``c * 10**e > p`` (strict) or ``>= p``; ``c, p > 0``."""
    e = _mag(p / c) - 1
    while _cmp_scaled(c, e, p) < (1 if strict else 0):
        e += 1
    return e


def _last_e(c: Fraction, q: Fraction, strict: bool) -> int:
    """The largest ``e`` with ``c * 10**e < q`` (strict) or ``<= q``; ``c, q > 0``."""
    e = _mag(q / c) + 1
    while _cmp_scaled(c, e, q) > (-1 if strict else 0):
        e -= 1
    return e


def _digit_prefix_between(digits: str, a: int, b: int) -> bool:
    """Whether some integer in ``[a, b]`` (``0 <= a``) is written with a decimal rendering starting ``digits``."""
    if a > b:
        return False
    if not digits:
        return True
    d = int(digits)
    for k in range(len(str(b)) + 1):
        if max(a, d * 10**k) <= min(b, (d + 1) * 10**k - 1):
            return True
    return False


class NumberSlot:
    """JSON numbers (the grammar of RFC 8259) within optional bounds. Sub-state: the bytes typed.

    A prefix is kept iff some completion lies within the bounds (exact, in rationals) and is 0 or of magnitude in
    ``[TINY, HUGE]``. Numbers are not canonical: ``1.50`` and ``15e-1`` are both accepted.
    """

    start = b""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        lo: _Bound = _NONE
        hi: _Bound = _NONE
        if "minimum" in schema:
            lo = (Fraction(schema["minimum"]), True)
        if "exclusiveMinimum" in schema:
            lo = _higher(lo, (Fraction(schema["exclusiveMinimum"]), False))
        if "maximum" in schema:
            hi = (Fraction(schema["maximum"]), True)
        if "exclusiveMaximum" in schema:
            hi = _lower(hi, (Fraction(schema["exclusiveMaximum"]), False))
        self.lo, self.hi = lo, hi
        self._ok: dict[bytes, bool] = {}

    def empty(self) -> bool:
        return not self.prefix_ok(b"")

    @staticmethod
    def _nonneg(lo: _Bound, hi: _Bound) -> bool:
        """Whether 0 or some magnitude in [TINY, HUGE] lies in (lo, hi)."""
        return _overlap(lo, hi, _ZERO, _ZERO) or _overlap(lo, hi, (TINY, True), (HUGE, True))

    @staticmethod
    def _scaled(lo: _Bound, hi: _Bound, m_lo: Fraction, m_hi: Fraction | None, exps: _Exponents) -> bool:
        """Whether some ``m * 10**e`` (``m`` in ``[m_lo, m_hi)``, or ``m_lo`` alone where ``m_hi`` is None;
        ``0 < m_lo``; ``e`` in ``exps``) lies in (lo, hi) and in [TINY, HUGE]."""
        p, q = _higher(lo, (TINY, True)), _lower(hi, (HUGE, True))
        assert p[0] is not None and q[0] is not None
        if not _overlap(p, q, p, q):
            return False
        if m_hi is None:  # a point: p <= m 10^e <= q
            e_lo, e_hi = _first_e(m_lo, p[0], not p[1]), _last_e(m_lo, q[0], not q[1])
        else:  # [m_lo 10^e, m_hi 10^e) meets (p, q) iff m_hi 10^e > p and m_lo 10^e <= q
            e_lo, e_hi = _first_e(m_hi, p[0], True), _last_e(m_lo, q[0], not q[1])
        if exps.sign == 0:
            return e_lo <= e_hi
        if exps.sign > 0:
            return _digit_prefix_between(exps.digits, max(e_lo, 0), e_hi)
        return _digit_prefix_between(exps.digits, max(-e_hi, 0), -e_lo)

    def prefix_ok(self, t: bytes) -> bool:
        ok = self._ok.get(t)
        if ok is None:
            ok = self._prefix_ok(t)
            if len(self._ok) > 100_000:
                self._ok.clear()
            self._ok[t] = ok
        return ok

    def _prefix_ok(self, t: bytes) -> bool:
        m = _NUMBER.fullmatch(t.decode("ascii", "replace"))
        if m is None:
            return False
        sign, whole, dot, frac, e, esign, edigits = m.groups()
        if e and dot and not frac:
            return False
        lo, hi = self.lo, self.hi
        mirrored = ((-hi[0] if hi[0] is not None else None), hi[1]), ((-lo[0] if lo[0] is not None else None), lo[1])
        if sign:  # look for non-negative values in -(bounds)
            lo, hi = mirrored
        if whole is None:  # "" or "-"
            return self._nonneg(lo, hi) or (not sign and self._nonneg(*mirrored))
        if e:
            mant = Fraction(whole + ("." + frac if dot else ""))
            if mant == 0:
                return _overlap(lo, hi, _ZERO, _ZERO)
            exps = _Exponents() if not esign and not edigits else _Exponents(-1 if esign == "-" else 1, edigits)
            return self._scaled(lo, hi, mant, None, exps)
        start = Fraction(whole + ("." + frac if frac else ""))
        if start == 0:  # "0", "0.", "0.00": 0 itself, or any magnitude through the exponent
            return self._nonneg(lo, hi)
        width = Fraction(1, 10 ** len(frac)) if dot else Fraction(1)
        return self._scaled(lo, hi, start, start + width, _Exponents())

    def step(self, sub: bytes, byte: int) -> bytes | None:
        t = sub + bytes((byte,))
        return t if self.prefix_ok(t) else None

    def value(self, sub: bytes) -> Any:
        s = sub.decode("ascii", "replace")
        m = _NUMBER.fullmatch(s)
        if m is None or m.group(2) is None or (m.group(3) and not m.group(4)) or (m.group(5) and not m.group(7)):
            return NOTHING
        if not self.prefix_ok(sub):
            return NOTHING
        mant = Fraction(m.group(2) + ("." + m.group(4) if m.group(3) else ""))
        # a live nonzero mantissa keeps the exponent small; a zero one may carry any exponent
        x = mant * Fraction(10) ** int(m.group(6) + m.group(7)) if mant and m.group(5) else mant
        x = -x if m.group(1) else x
        if x != 0 and not TINY <= abs(x) <= HUGE or not _overlap(self.lo, self.hi, (x, True), (x, True)):
            return NOTHING
        v = json.loads(s)
        sch = self.schema
        if ("minimum" in sch and not v >= sch["minimum"]) or ("maximum" in sch and not v <= sch["maximum"]) or (
                "exclusiveMinimum" in sch and not v > sch["exclusiveMinimum"]) or (
                "exclusiveMaximum" in sch and not v < sch["exclusiveMaximum"]):
            return NOTHING
        return v

    def next_bytes(self, sub: bytes) -> frozenset[int]:
        return frozenset(b for b in b"-+.eE" + _DIGITS if self.prefix_ok(sub + bytes((b,))))

    def extendable(self, sub: bytes) -> bool:
        return bool(self.next_bytes(sub))

    def typed(self, sub: bytes) -> bytes:
        return sub


# -------------------------------------------------------------------------------------------------------- strings
#: Canonical escapes, as ``json.dumps(..., ensure_ascii=False)`` writes them: the only escaped characters.
ESCAPES: dict[bytes, str] = {json.dumps(chr(c))[1:-1].encode(): chr(c) for c in (*range(0x20), 0x22, 0x5C)}
_ESCAPE_PREFIXES = frozenset(k[:i] for k in ESCAPES for i in range(1, len(k)))
_OTHER = "\x00other"  # the class of characters a pattern does not name
_UTF8_RANGES = {2: [(0x80, 0x7FF)], 3: [(0x800, 0xD7FF), (0xE000, 0xFFFF)], 4: [(0x10000, 0x10FFFF)]}


def _utf8_ranges(p: bytes) -> list[tuple[int, int]] | None:
    """Code points whose UTF-8 encoding starts with ``p`` (a lead byte and continuation bytes), or ``None``."""
    lead = p[0]
    n = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if not n or len(p) > n or any(not 0x80 <= c <= 0xBF for c in p[1:]):
        return None
    bits = lead & (0x7F >> n)
    for c in p[1:]:
        bits = (bits << 6) | (c & 0x3F)
    free = 6 * (n - len(p))
    lo, hi = bits << free, (bits << free) | ((1 << free) - 1)
    out = [(max(a, lo), min(b, hi)) for a, b in _UTF8_RANGES[n] if max(a, lo) <= min(b, hi)]
    return out or None


def _top_level_alternatives(pattern: str) -> list[str]:
    """Split a regex on its top-level ``|`` (outside groups and character classes)."""
    parts, depth, in_class, class_start, last, k = [], 0, False, 0, 0, 0
    while k < len(pattern):
        ch = pattern[k]
        if ch == "\\":
            k += 2
            continue
        if in_class:
            in_class = not (ch == "]" and k != class_start)
        elif ch == "[":
            in_class, class_start = True, k + 1 + (pattern[k + 1: k + 2] == "^")
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(pattern[last:k])
            last = k + 1
        k += 1
    parts.append(pattern[last:])
    return parts


def _search_regex(pattern: str) -> str:
    r"""A full-match regex for "``re.search(pattern)`` finds a match": unanchored ends become ``[\s\S]*``.

    >>> _search_regex("^a|b$")
    '(?:a)[\\s\\S]*|[\\s\\S]*(?:b)\n?'
    """
    out = []
    for alt in _top_level_alternatives(pattern):
        head = alt.startswith("^")
        body = alt[1:] if head else alt
        tail = body.endswith("$") and (len(body) - 1 - len(body[:-1].rstrip("\\"))) % 2 == 0
        body = body[:-1] if tail else body
        # Python's "$" also matches before a final newline
        out.append(("" if head else r"[\s\S]*") + "(?:" + body + ")" + ("\n?" if tail else r"[\s\S]*"))
    return "|".join(out)


_D2 = "[0-9]{2}"
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"  # 0001-9999 (Python's dates have no year 0)
_LEAP = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         f"|02-(?:0[1-9]|1[0-9]|2[0-8]))|{_LEAP}-02-29)")
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
#: a host name: RFC 1123 labels, narrowed to at most four labels of at most 61 characters (247 in all, below the
#: limit of 253) with no two hyphens in a row (so no ``xn--`` label, whose Punycode would need checking)
_HOST_LABEL = "[A-Za-z0-9](?:-?[A-Za-z0-9]){0,30}"
_HOST = f"{_HOST_LABEL}(?:\\.{_HOST_LABEL}){{0,3}}"
#: an RFC 3986 path character: unreserved, sub-delims, ':' and '@' (no percent-encoding: narrowed)
_PCHAR = "[A-Za-z0-9._~!$&'()*+,;=:@-]"
_URI = (f"[a-z][a-z0-9+.-]*://{_HOST}(?::[0-9]{{1,5}})?(?:/{_PCHAR}*)*(?:\\?(?:{_PCHAR}|[/?])*)?"
        f"(?:#(?:{_PCHAR}|[/?])*)?")
#: an IDNA 2008 label of ASCII letters and digits: lower case (upper-case letters are not PVALID)
_IDN_LABEL = "[a-z0-9](?:-?[a-z0-9]){0,30}"
#: an RFC 3339 (appendix A) duration, numbers of at most four digits
_DN = "[0-9]{1,4}"
_DURATION = (f"P(?:(?:{_DN}D|{_DN}M(?:{_DN}D)?|{_DN}Y(?:{_DN}M(?:{_DN}D)?)?)"
             f"(?:T(?:{_DN}H(?:{_DN}M(?:{_DN}S)?)?|{_DN}M(?:{_DN}S)?|{_DN}S))?"
             f"|T(?:{_DN}H(?:{_DN}M(?:{_DN}S)?)?|{_DN}M(?:{_DN}S)?|{_DN}S)|{_DN}W)")
#: an RFC 6901 JSON Pointer
_POINTER = "(?:/(?:[^/~]|~[01])*)*"
#: ``format`` values enforced exactly, each as a full-match regular expression of the strings it admits: the
#: format's own grammar, narrowed where noted (narrowing is allowed: every string admitted is valid). ``date``
#: checks the calendar (no 2020-02-30; 29 February in leap years only) and starts at year 0001; ``time`` and
#: ``date-time`` are RFC 3339 with ``T``/``Z`` upper case and no leap second; ``uuid`` is lower case hex; ``ipv4`` is
#: dotted decimal without leading zeros; ``email`` is a dot-atom local part of letters, digits and ``_%+-`` at a
#: domain of two or more labels; ``hostname`` is narrowed as :data:`_HOST` says; ``ipv6`` is the full form of eight
#: groups in lower-case hex (no ``::``); ``uri`` is ``scheme://host[:port]`` with a path, query and fragment of
#: characters RFC 3986 allows there unencoded (no percent-encoding, no user info); ``uri-reference``, ``iri`` and
#: ``iri-reference`` are that ``uri``; ``idn-email`` is ``email``; ``idn-hostname`` is ``hostname`` in lower case;
#: ``duration`` is RFC 3339's grammar with numbers of at most four digits; ``json-pointer`` is RFC 6901's and
#: ``relative-json-pointer`` a non-negative integer (``0``, or up to nine digits without a zero: jsonschema's
#: checker refuses a zero after a digit) before ``#`` or a non-empty JSON Pointer;
#: ``uri-template`` is literal characters only (no expressions, no percent-encoding); ``regex`` is letters, digits,
#: space, ``_`` and ``-`` (a regular expression that matches itself).
FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "uuid": "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "ipv4": f"{_OCTET}(?:\\.{_OCTET}){{3}}",
    "email": f"[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@{_LABEL}(?:\\.{_LABEL})+",
    "hostname": _HOST,
    "ipv6": "[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}",
    "uri": _URI,
    # narrowed to the forms above: each is one of the wider format
    "uri-reference": _URI,
    "iri": _URI,
    "iri-reference": _URI,
    "idn-email": f"[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@{_LABEL}(?:\\.{_LABEL})+",
    "idn-hostname": f"{_IDN_LABEL}(?:\\.{_IDN_LABEL}){{0,3}}",
    "duration": _DURATION,
    "json-pointer": _POINTER,
    "relative-json-pointer": "(?:0|[1-9]{1,9})(?:#|(?:/(?:[^/~]|~[01])*)+)",
    "uri-template": "[A-Za-z0-9._~:/?#@!$&()*+,;=-]*",
    "regex": "[A-Za-z0-9 _-]*",
}


#: the budget of one pattern's automaton: states of any automaton built on the way, and seconds in all. The formats
#: take at most 94 states
PATTERN_STATES = 4_000
PATTERN_SECONDS = 1.0

_budget = threading.local()


class _Budget:
    """Counts the states the automaton construction visits, against :data:`PATTERN_STATES` per automaton and
    :data:`PATTERN_SECONDS` in all (interegular builds a pattern as a sequence of automata, one per operator)."""

    def __init__(self, pattern: str, pointer: str):
        self.pattern, self.pointer = pattern, pointer
        self.deadline = time.monotonic() + PATTERN_SECONDS

    def check(self, states: int) -> None:
        if states > PATTERN_STATES:
            self.fail(f"its automaton passes {PATTERN_STATES:,} states")
        if time.monotonic() > self.deadline:
            self.fail(f"its automaton takes more than {PATTERN_SECONDS:g} s to build")

    def fail(self, why: str) -> None:
        raise CompileBudgetExceeded(f"pattern is past the compile budget: {why}", pointer=f"{self.pointer}/pattern",
                                    found=self.pattern,
                                    hint="bound the counted repeats (a{n} with large n) and nested quantifiers, or "
                                         "use maxLength for the length")


def _crawl(alphabet: Any, initial: Any, final: Any, follow: Any) -> Any:
    """interegular's ``fsm.crawl`` (the subset construction every operator uses) with the same states in the same
    order, but an index by hash instead of ``list.index`` (quadratic in the states) and the current budget checked
    as states are found."""
    from interegular.fsm import FSM, OblivionError
    budget: _Budget | None = getattr(_budget, "current", None)
    states = [initial]
    index = {_frozen(initial): 0}
    finals = set()
    trans: dict[int, dict[Any, int]] = {}
    i = 0
    while i < len(states):
        state = states[i]
        if final(state):
            finals.add(i)
        row = trans[i] = {}
        for transition in alphabet.by_transition:
            try:
                nxt = follow(state, transition)
            except OblivionError:
                continue
            key = _frozen(nxt)
            j = index.get(key)
            if j is None:
                j = index[key] = len(states)
                states.append(nxt)
                if budget is not None:
                    budget.check(j)
            row[transition] = j
        i += 1
    return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=trans,
               __no_validation__=True)


def _frozen(state: Any) -> Any:
    """A hashable key equal where the states are equal (interegular's states are sets, tuples and ints)."""
    if isinstance(state, (set, frozenset)):
        return frozenset(_frozen(x) for x in state)
    if isinstance(state, (tuple, list)):
        return tuple(_frozen(x) for x in state)
    if isinstance(state, dict):
        return frozenset((k, _frozen(v)) for k, v in state.items())
    return state


_ORIGINAL_CRAWL: Any = None  # interegular's own, once ours replaces it


def _to_fsm(expr: str, pattern: str, pointer: str) -> Any:
    """``interegular.parse_pattern(expr).to_fsm()`` within the budget (:class:`CompileBudgetExceeded` past it)."""
    global _ORIGINAL_CRAWL
    import interegular
    import interegular.fsm
    if interegular.fsm.crawl is not _crawl:
        _ORIGINAL_CRAWL = interegular.fsm.crawl
        interegular.fsm.crawl = _crawl  # same automaton, linear index, budget checks (see _crawl)
    budget = _budget.current = _Budget(pattern, pointer)
    try:
        parsed = interegular.parse_pattern(expr)
        if _repeat_size(parsed) > PATTERN_STATES:
            budget.fail(f"its counted repeats unroll past {PATTERN_STATES:,} states")
        return parsed.to_fsm()
    finally:
        _budget.current = None


def _repeat_size(node: Any) -> int:
    """An upper bound on the states a parsed interegular pattern unrolls to (counted repeats multiply)."""
    from interegular import patterns as P
    if isinstance(node, P._Repeated):
        n = node.max if node.max is not None else node.min
        return max(1, n) * _repeat_size(node.base) + 1
    subs = getattr(node, "options", None) or getattr(node, "parts", None)
    if subs is None and hasattr(node, "inner"):
        subs = (node.inner,)
    return sum(_repeat_size(x) for x in subs) if subs else 1


class _Dfa:
    """A pattern's automaton over characters: classes of characters, transitions, and length-aware liveness.
    ``full`` (a format's expression, :data:`FORMATS`) is matched whole, instead of ``pattern``'s search."""

    def __init__(self, pattern: str | None, pointer: str, min_len: int, max_len: int | None,
                 full: str | None = None):
        self.min_len, self.max_len = min_len, max_len
        self.patterned = pattern is not None or full is not None
        #: the characters content may use: every scalar value, or ASCII where the pattern's classes and Python's
        #: differ beyond it (negated \D \W \S, inline flags)
        self.ascii = pattern is not None and bool(
            re.search(r"\\[DWS]", pattern) or ("[^" in pattern and re.search(r"\\[dws]", pattern)) or "(?" in
            pattern.replace("(?:", ""))
        if pattern is None and full is None:
            self.initial: Any = 0
            self.finals: frozenset[Any] = frozenset({0})
            self.explicit: dict[str, Any] = {}
            self.trans: dict[Any, dict[Any, Any]] = {0: {_OTHER: 0}}
        else:
            from interegular.fsm import anything_else

            try:
                fsm = _to_fsm(full if full is not None else _search_regex(pattern), pattern or full or "", pointer)
            except CompileBudgetExceeded:
                raise
            except Exception as exc:  # interegular raises several types for unsupported syntax
                raise UnsupportedKeyword(f"pattern is not supported: {exc}", pointer=f"{pointer}/pattern",
                                         found=pattern,
                                         hint="regular syntax only: no backreferences, lookaround, \\b or inner "
                                              "anchors") from None
            classes = {cls: (_OTHER if anything_else in chars else cls)
                       for cls, chars in fsm.alphabet.by_transition.items()}
            self.explicit = {c: classes[cls] for cls, chars in fsm.alphabet.by_transition.items()
                             for c in chars if c is not anything_else and self._usable(c)}
            self.initial, self.finals = fsm.initial, frozenset(fsm.finals)
            usable = set(self.explicit.values())
            if (0x80 if self.ascii else 0x110000 - 0x800) > sum(1 for c in self.explicit):
                usable.add(_OTHER)  # some character the pattern does not name is allowed
            self.trans = {s: {classes[cls]: t for cls, t in row.items() if classes[cls] in usable}
                          for s, row in fsm.map.items()}
        preds: dict[Any, set[Any]] = {}
        for s, row in self.trans.items():
            for t in row.values():
                preds.setdefault(t, set()).add(s)
        # reach[L]: the states from which some path of exactly L characters ends in a final state (eventually
        # periodic: stop at the first repeat)
        reach = [self.finals]
        seen = {self.finals: 0}
        while True:
            nxt = frozenset(p for s in reach[-1] for p in preds.get(s, ()))
            if nxt in seen:
                self._pre = seen[nxt]
                break
            seen[nxt] = len(reach)
            reach.append(nxt)
        self._reach = reach
        self._live: dict[tuple[Any, int], bool] = {}
        self._live_cls: dict[tuple[Any, int], frozenset[Any]] = {}
        ords = sorted((ord(c), cls) for c, cls in self.explicit.items())
        self._ords = [o for o, _ in ords]
        self._ord_classes = [cls for _, cls in ords]

    def _usable(self, c: str) -> bool:
        o = ord(c)
        if self.patterned and 0x1C <= o <= 0x1F:
            return False  # Python's re counts U+001C..U+001F as \s, interegular does not: never emit them
        return not (0xD800 <= o <= 0xDFFF) and (o < 0x80 or not self.ascii)

    def class_of(self, c: str) -> Any:
        cls = self.explicit.get(c)
        if cls is None and self._usable(c):
            return _OTHER
        return cls

    def classes_in(self, ranges: list[tuple[int, int]]) -> frozenset[Any]:
        """The classes of the usable characters in the code point ``ranges``."""
        if self.ascii:
            ranges = [(a, min(b, 0x7F)) for a, b in ranges if a <= 0x7F]
        if self.patterned:  # leave out U+001C..U+001F (see _usable)
            ranges = [r for a, b in ranges for r in ((a, min(b, 0x1B)), (max(a, 0x20), b)) if r[0] <= r[1]]
        out = set()
        named = 0
        for a, b in ranges:
            lo, hi = bisect_left(self._ords, a), bisect_right(self._ords, b)
            named += hi - lo
            out.update(self._ord_classes[lo:hi])
        if sum(b - a + 1 for a, b in ranges) > named:
            out.add(_OTHER)
        return frozenset(out)

    def live_classes(self, s: Any, n: int) -> frozenset[Any]:
        """The classes whose character keeps content in state ``s`` after ``n`` characters alive."""
        key = (s, self._band(n + 1))
        out = self._live_cls.get(key)
        if out is None:
            out = frozenset(cls for cls, t in self.trans[s].items() if self.live(t, n + 1))
            self._live_cls[key] = out
        return out

    def live(self, s: Any, n: int) -> bool:
        """Whether content in state ``s`` after ``n`` characters can still end as a valid string."""
        key = (s, self._band(n))
        ok = self._live.get(key)
        if ok is None:
            lo = max(0, self.min_len - n)
            hi = lo + len(self._reach)
            if self.max_len is not None:
                hi = min(hi, self.max_len - n)
            ok = any(s in self._at(k) for k in range(lo, hi + 1))
            self._live[key] = ok
        return ok

    def _band(self, n: int) -> int:
        """A representative of ``n`` for :meth:`live`: every count from ``min_len`` on that leaves room for a whole
        period of :attr:`_reach` below ``max_len`` answers alike (a long string's positions share one memo entry)."""
        if n >= self.min_len and (self.max_len is None or self.max_len - n >= len(self._reach)):
            return self.min_len
        return n

    def _at(self, k: int) -> frozenset[Any]:
        if k < len(self._reach):
            return self._reach[k]
        per = len(self._reach) - self._pre
        return self._reach[self._pre + (k - self._pre) % per]


#: string automata and their step memos by (pattern, minLength, maxLength), shared by equal slots of different
#: declarations (every request of a server compiles its own): the memos depend on nothing else
_MACHINES: OrderedDict[tuple[Any, ...], StringSlot] = OrderedDict()
_MISS = object()
_MACHINES_LOCK = threading.Lock()


class StringSlot:
    """Free strings: ``"``, canonical JSON content (``json.dumps(..., ensure_ascii=False)`` escaping), ``"``, with
    ``minLength``/``maxLength`` (code points) and ``pattern`` (``re.search`` semantics, as jsonschema).

    Sub-state: ``(typed, phase, dfa state, length, pending)``: phase 0 before the opening quote, 1 inside, 2 closed;
    ``pending`` the bytes of a character not yet complete (a UTF-8 sequence or an escape).
    """

    def __init__(self, schema: dict[str, Any], pointer: str = ""):
        for key in ("minLength", "maxLength"):
            val = schema.get(key)
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                raise DeclarationError(f"{key} must be a non-negative integer", pointer=f"{pointer}/{key}", found=val)
        pattern = schema.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise DeclarationError("pattern must be a string", pointer=f"{pointer}/pattern", found=pattern)
        fmt = schema.get("format")
        full = FORMATS.get(fmt) if isinstance(fmt, str) else None
        if full is not None and pattern is not None:
            raise UnsupportedKeyword("pattern beside format is not supported", pointer=f"{pointer}/pattern",
                                     found={"pattern": pattern, "format": fmt}, hint="keep one of them")
        key = (pattern, full, schema.get("minLength", 0), schema.get("maxLength"))
        with _MACHINES_LOCK:
            shared = _MACHINES.get(key)
            if shared is not None:
                _MACHINES.move_to_end(key)
        if shared is not None:  # an equal string seen before (another request's declaration): share its memos
            self.dfa, self._tables, self._nexts, self._moves = shared.dfa, shared._tables, shared._nexts, shared._moves
        else:
            self.dfa = _Dfa(pattern, pointer, schema.get("minLength", 0), schema.get("maxLength"), full)
            self._tables: dict[bytes, dict[int, tuple[str, Any, Any]]] = {}
            self._nexts: dict[tuple[bytes, frozenset[Any], bool], frozenset[int]] = {}
            self._moves: dict[tuple[Any, ...], tuple[int, Any, int, bytes] | None] = {}
            with _MACHINES_LOCK:
                _MACHINES[key] = self
                if len(_MACHINES) > 256:
                    _MACHINES.popitem(last=False)
        self.start = (b"", 0, self.dfa.initial, 0, b"")

    def empty(self) -> bool:
        return not self.dfa.live(self.dfa.initial, 0)

    def _table(self, pending: bytes) -> dict[int, tuple[str, Any, Any]]:
        """Inside the string, after ``pending``: each byte that may come next, as ``("close", None, None)``,
        ``("char", class, None)`` or ``("partial", class set, new pending)``; independent of the pattern state."""
        table = self._tables.get(pending)
        if table is None:
            table = self._tables[pending] = {b: e for b in range(256) if (e := self.entry(pending, b)) is not None}
        return table

    def entry(self, pending: bytes, b: int) -> tuple[str, Any, Any] | None:
        """One entry of :meth:`_table`: what byte ``b`` does after ``pending`` (``None``: it cannot come next)."""
        dfa = self.dfa
        p = pending + bytes((b,))
        entry: tuple[str, Any, Any] | None = None
        if not pending and b == 0x22:
            entry = ("close", None, None)
        elif p[:1] == b"\\":
            if p in ESCAPES:
                cls = dfa.class_of(ESCAPES[p])
                entry = ("char", cls, None) if cls is not None else None
            elif p in _ESCAPE_PREFIXES:
                chars = [c for k, c in ESCAPES.items() if k.startswith(p)]
                entry = ("partial", frozenset(dfa.class_of(c) for c in chars) - {None}, p)
        elif not pending and 0x20 <= b < 0x80:
            cls = dfa.class_of(chr(b))
            entry = ("char", cls, None) if cls is not None else None
        elif p[0] >= 0x80:
            ranges = _utf8_ranges(p)
            if ranges is not None and len(p) == (2 if p[0] < 0xE0 else 3 if p[0] < 0xF0 else 4):
                cls = dfa.class_of(chr(ranges[0][0]))
                entry = ("char", cls, None) if cls is not None else None
            elif ranges is not None:
                entry = ("partial", dfa.classes_in(ranges), p)
        return entry if entry is not None and (entry[0] != "partial" or entry[1]) else None

    def _step(self, core: tuple[int, Any, int, bytes], b: int) -> tuple[int, Any, int, bytes] | None:
        """The core after byte ``b``. Memoized without the length: by what the answer depends on (pattern state,
        pending bytes, the byte, the length's band for liveness and whether the string may end), so the memo of a
        long string, shared by every equal slot, stays as small as its automaton."""
        phase, s, n, pending = core
        if phase == 0:
            return (1, s, n, b"") if b == 0x22 and self.dfa.live(s, n) else None
        if phase != 1:
            return None
        key = (s, pending, b, self.dfa._band(n + 1), n >= self.dfa.min_len)
        move = self._moves.get(key, _MISS)
        if move is _MISS:
            if len(self._moves) > 1 << 20:
                self._moves.clear()
            move = self._moves[key] = self._step_core((phase, s, n, pending), b)
        if move is None:
            return None
        return (move[0], move[1], n + move[2], move[3])  # type: ignore[index]

    def _step_core(self, core: tuple[int, Any, int, bytes], b: int) -> tuple[int, Any, int, bytes] | None:
        """:meth:`_step`'s answer with the characters it adds (0 or 1) in place of the length."""
        phase, s, n, pending = core
        entry = self._table(pending).get(b)
        if entry is None:
            return None
        kind, cls, nxt = entry
        if kind == "close":
            return (2, s, 0, b"") if s in self.dfa.finals and n >= self.dfa.min_len else None
        live = self.dfa.live_classes(s, n)
        if kind == "char":
            return (1, self.dfa.trans[s][cls], 1, b"") if cls in live else None
        return (1, s, 0, nxt) if cls & live else None

    def step(self, sub: tuple[Any, ...], byte: int) -> tuple[Any, ...] | None:
        new = self._step(sub[1:], byte)
        return None if new is None else (sub[0] + bytes((byte,)), *new)

    def value(self, sub: tuple[Any, ...]) -> Any:
        return json.loads(sub[0]) if sub[1] == 2 else NOTHING

    def extendable(self, sub: tuple[Any, ...]) -> bool:
        return bool(sub[1] != 2)

    def _next_core(self, core: tuple[int, Any, int, bytes]) -> frozenset[int]:
        phase, s, n, pending = core
        if phase == 0:
            return frozenset((0x22,)) if self.dfa.live(s, n) else frozenset()
        if phase != 1:
            return frozenset()
        live = self.dfa.live_classes(s, n)
        closes = s in self.dfa.finals and n >= self.dfa.min_len
        key = (pending, live, closes)  # what the answer depends on: positions of one long string share it
        out = self._nexts.get(key)
        if out is None:
            out = self._nexts[key] = frozenset(
                b for b, (kind, cls, _) in self._table(pending).items()
                if (kind == "char" and cls in live) or (kind == "partial" and cls & live)
                or (kind == "close" and closes))
        return out

    def next_bytes(self, sub: tuple[Any, ...]) -> frozenset[int]:
        return self._next_core(sub[1:])

    def typed(self, sub: tuple[Any, ...]) -> bytes:
        return sub[0]  # type: ignore[no-any-return]
