"""Where the benchmark data lives: ``$FACTORSPEC_DATA``, else ``../shared/data`` beside the project root."""

from __future__ import annotations

import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """The shared data folder (NATURAL PLAN, BFCL, JSONSchemaBench, JSON Schema Test Suite)."""
    env = os.environ.get("FACTORSPEC_DATA")
    path = Path(env) if env else _ROOT.parent / "shared" / "data"
    if not path.is_dir():
        raise FileNotFoundError(
            f"benchmark data not found at {path}; set FACTORSPEC_DATA to the folder holding natural-plan/ and bfcl/"
        )
    return path
