"""The embedded engine: the packaged model, drafters, and batched masked decoding with verified drafts.

The names below load on first use (PEP 562): ``factorspec_cp.engine.grammar`` and ``.service`` (what constraint
workers and server plugins import) must not import torch through this package. A worker process that imported it
held some 140,000 more objects, which every full garbage collection walks (about 50 ms a time, in the middle of a
step's rows).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Engine", "Job", "Result", "Drafter", "make_drafter", "DRAFTERS", "CONSTRAINTS"]

_WHERE = {"Engine": ".run", "Job": ".run", "Result": ".run", "CONSTRAINTS": ".run",
          "Drafter": ".drafters", "make_drafter": ".drafters", "DRAFTERS": ".drafters"}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
