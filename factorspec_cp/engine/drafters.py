"""Drafters: what a request proposes for the next verify step (DESIGN.md, Engine).

A drafter sees the request (its context tokens and its constraint) and proposes up to ``limit`` tokens. The engine
then walks the proposal under the request's masks and cuts it before the first token the mask refuses, so a drafter
can never make a record invalid; it only changes how many tokens one forward pass commits.

- ``none``: nothing (one token per step).
- ``certain``: the decoder's certain run (the tokens the declaration determines).
- ``ngram``: prompt lookup: the longest suffix of the context (``n`` tokens down to 1) found earlier in the context
  proposes the tokens that followed it there.
- ``syntax``: the certain run of the schema alone (no relations): what jump-forward decoding gives today.
- ``hybrid``: the certain run, then, where the model has a choice, a lookup continuation (``ngram``) checked
  against the mask as it is walked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Drafter", "make_drafter", "DRAFTERS", "lookup"]

DRAFTERS = ("none", "certain", "ngram", "syntax", "hybrid")


def lookup(context: Sequence[int], n: int, k: int, *, min_n: int = 1) -> list[int]:
    """Prompt lookup: for n down to ``min_n``, the latest earlier occurrence of the last n tokens proposes the (up to)
    k tokens that followed it.

    >>> lookup([1, 2, 3, 9, 1, 2], 2, 3)
    [3, 9, 1]
    >>> lookup([5, 6, 7], 2, 3)
    []
    """
    L = len(context)
    for m in range(min(n, L - 1), min_n - 1, -1):
        tail = list(context[L - m:])
        for start in range(L - m - 1, -1, -1):
            if list(context[start:start + m]) == tail:
                return list(context[start + m:start + m + k])
    return []


class Drafter:
    """Base: proposes nothing. ``propose(request, limit)`` returns token ids; ``extend`` may continue a walked draft
    (hybrid) given the tokens accepted by the masks so far."""

    name = "none"

    def propose(self, request: Any, limit: int) -> list[int]:
        return []

    def extend(self, request: Any, draft: list[int], limit: int) -> list[int]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class Certain(Drafter):
    name = "certain"

    def propose(self, request: Any, limit: int) -> list[int]:
        return request.constraint.certain_run(limit) if request.constraint is not None else []


class NGram(Drafter):
    def __init__(self, n: int = 3, k: int = 8):
        if n < 1 or k < 1:
            raise ValueError("ngram needs n >= 1 and k >= 1")
        self.n, self.k = n, k
        self.name = f"ngram(n={n},k={k})"

    def propose(self, request: Any, limit: int) -> list[int]:
        return lookup(request.context, self.n, min(self.k, limit))


class Syntax(Drafter):
    """The schema-only certain run: a second decoder without relations, fed the same tokens."""

    name = "syntax"

    def propose(self, request: Any, limit: int) -> list[int]:
        return request.syntax.certain_run(limit) if request.syntax is not None else []


class Hybrid(Certain):
    """Certain runs (``propose``), then a lookup continuation (``extend``)."""

    def __init__(self, n: int = 3, k: int = 8):
        self.lookup = NGram(n, k)
        self.name = f"hybrid(n={n},k={k})"

    def extend(self, request: Any, draft: list[int], limit: int) -> list[int]:
        return lookup(list(request.context) + draft, self.lookup.n, min(self.lookup.k, limit))


def make_drafter(spec: str | Drafter) -> Drafter:
    """``"none"``, ``"certain"``, ``"syntax"``, ``"ngram"``, ``"ngram:N:K"``, ``"hybrid"`` or ``"hybrid:N:K"``."""
    if isinstance(spec, Drafter):
        return spec
    name, *args = spec.split(":")
    nums = [int(a) for a in args]
    if name == "none" and not nums:
        return Drafter()
    if name == "certain" and not nums:
        return Certain()
    if name == "syntax" and not nums:
        return Syntax()
    if name == "ngram" and len(nums) <= 2:
        return NGram(*nums)
    if name == "hybrid" and len(nums) <= 2:
        return Hybrid(*nums)
    raise ValueError(f"unknown drafter {spec!r}: one of none, certain, syntax, ngram[:N:K], hybrid[:N:K]")
