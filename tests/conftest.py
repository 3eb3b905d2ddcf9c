"""Tests marked ``pure`` wrap or replace methods and functions of the per-token path's modules to count or steer
their calls, which a compiled build does not allow (its classes are fixed, its calls direct): with the compiled
build they are skipped here and run in the README's second pass, ``FACTORSPEC_PURE=1 pytest -m pure``, where the
same modules run as Python (factorspec_cp/_native.py). That pass collects only :data:`PURE_FILES` (collecting every
test module costs it half a minute): a ``pure`` test elsewhere stops the compiled pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from factorspec_cp import _native

#: The files of the ``pure`` tests, as the README's second pass names them.
PURE_FILES = ("tests/test_decoder.py", "tests/test_difference.py", "tests/test_wide_fields.py")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if _native.BUILD != "compiled":
        return
    skip = pytest.mark.skip(reason="wraps the per-token path's Python methods: run with FACTORSPEC_PURE=1 -m pure")
    for item in items:
        if "pure" in item.keywords:
            if item.nodeid.split("::")[0] not in PURE_FILES:
                raise pytest.UsageError(f"{item.nodeid} is marked pure but its file is not in PURE_FILES "
                                        "(tests/conftest.py), which the README's second pass runs")
            item.add_marker(skip)
