"""Relations compiled to value indices (``factorspec_cp.checks``) against their own ``check``, on the random
declarations of ``tests/test_exactness.py`` (every kind, nested implies/any, mapped terms) and random records."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings

import factorspec_cp as fs
from factorspec_cp.checks import compiled


def _load(name: str, file: str) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


exactness = _load("factorspec_checks_exactness", "test_exactness.py")


@settings(max_examples=150, **exactness.SETTINGS)
@given(exactness.declarations())
def test_compiled_checks_equal_relation_checks(doc: dict[str, Any]) -> None:
    spec = fs.Spec.from_json(doc)
    fields = spec.fields
    rnd = random.Random(repr(doc))
    checks = [(inst.relation, compiled(inst.relation, fields, {})) for inst in spec.instances]
    for _ in range(40):
        idx = {p: rnd.randrange(f.size) for p, f in fields.items()}
        vals = {p: fields[p].values[k] for p, k in idx.items()}
        for rel, check in checks:
            assert check(idx, vals) == bool(rel.check(vals)), (rel, vals)
