"""Tests marked ``pure`` wrap or replace methods and functions of the per-token path's modules to count or steer
their calls, which a compiled build does not allow (its classes are fixed, its calls direct): with the compiled
build they are skipped here and run in the README's second pass, ``FACTORSPEC_PURE=1 pytest -m pure``, where the
same modules run as Python (factorspec_cp/_native.py). A run selecting ``-m pure`` collects only :data:`PURE_FILES`
(collecting every test module costs that pass half a minute); a ``pure`` test elsewhere stops the compiled pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from factorspec_cp import _native

#: The files holding ``pure`` tests.
PURE_FILES = ("tests/test_decoder.py", "tests/test_difference.py", "tests/test_wide_fields.py")


def pytest_ignore_collect(collection_path: Path, config: Any) -> bool | None:
    if config.getoption("markexpr") != "pure" or collection_path.suffix != ".py":
        return None
    rel = collection_path.relative_to(config.rootpath).as_posix()
    return rel not in PURE_FILES and collection_path.name != "conftest.py"


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if _native.BUILD != "compiled":
        return
    skip = pytest.mark.skip(reason="wraps the per-token path's Python methods: run with FACTORSPEC_PURE=1 -m pure")
    for item in items:
        if "pure" in item.keywords:
            if item.nodeid.split("::")[0] not in PURE_FILES:
                raise pytest.UsageError(f"{item.nodeid} is marked pure but its file is not in PURE_FILES "
                                        "(tests/conftest.py), the files the pure pass collects")
            item.add_marker(skip)
