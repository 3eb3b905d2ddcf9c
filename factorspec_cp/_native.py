"""Which build of the per-token path runs: the modules mypyc compiled (``setup.py``) or their Python sources.

A compiled module is imported in place of its ``.py`` wherever both are present, so an editable install edited since
its build would run the old code. :func:`check` (run when the package is imported, before any of these modules)
compares the sources with the digests the build recorded (``_native.json``) and, where any differs or none was
recorded, or where ``FACTORSPEC_PURE=1`` asks for it, imports every compiled module from its source instead (all or
none: compiled modules call each other directly). A mismatch warns; rebuild with ``pip install -e .``.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

#: The modules setup.py compiles (it reads this list; pyproject.toml's mypy section names them too).
COMPILED = ("factorspec_cp.tokenmap.layout", "factorspec_cp.tokenmap.decoder", "factorspec_cp.session",
            "factorspec_cp.difference", "factorspec_cp.witnesses")
_ROOT = Path(__file__).resolve().parent.parent
#: What runs: "compiled", "python" (nothing compiled is installed) or "python (<why>)".
BUILD = "python"
_checked = False


def _source(name: str) -> Path:
    return _ROOT.joinpath(*name.split(".")).with_suffix(".py")


def _built(name: str) -> bool:
    base = _source(name).with_suffix("")
    return any(base.with_name(base.name + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


class _FromSource(importlib.abc.MetaPathFinder):
    """Imports the compiled modules from their ``.py`` files."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(name, _source(name))


def _stale() -> str | None:
    """Why the compiled modules are not those of the sources here (``None``: they are)."""
    try:
        recorded = json.loads((_ROOT / "factorspec_cp" / "_native.json").read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return "no record of the sources they were built from"
    for name in COMPILED:
        rel = _source(name).relative_to(_ROOT).as_posix()
        try:
            digest = hashlib.sha256(_source(name).read_bytes()).hexdigest()
        except OSError:
            return f"{rel} is missing"
        if recorded.get(rel) != digest:
            return f"{rel} changed since the build"
    return None


def check() -> str:
    """Decide which build runs (:data:`BUILD`), before any compiled module is imported; once."""
    global BUILD, _checked
    if _checked:
        return BUILD
    _checked = True
    if not any(_built(name) for name in COMPILED):
        return BUILD
    if os.environ.get("FACTORSPEC_PURE") == "1":
        why: str | None = "FACTORSPEC_PURE=1"
    else:
        why = _stale()
        if why is not None:
            warnings.warn(f"factorspec_cp: the compiled modules are not built from these sources ({why}); running "
                          "the Python sources instead (slower). Rebuild: pip install -e .", RuntimeWarning,
                          stacklevel=3)
    if why is None:
        BUILD = "compiled"
    else:
        sys.meta_path.insert(0, _FromSource())
        BUILD = f"python ({why})"
    return BUILD
