"""Tests marked ``pure`` wrap or replace methods and functions of the per-token path's modules to count or steer
their calls, which a compiled build does not allow (its classes are fixed, its calls direct): with the compiled
build they are skipped here and run in the README's second pass, ``FACTORSPEC_PURE=1 pytest -m pure``, where the
same modules run as Python (factorspec_cp/_native.py)."""

from __future__ import annotations

from typing import Any

import pytest

from factorspec_cp import _native


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if _native.BUILD != "compiled":
        return
    skip = pytest.mark.skip(reason="wraps the per-token path's Python methods: run with FACTORSPEC_PURE=1 -m pure")
    for item in items:
        if "pure" in item.keywords:
            item.add_marker(skip)
