"""Which build of the per-token path runs (factorspec_cp/_native.py): the compiled modules only where they were built
from the sources beside them; their Python sources where asked or where those changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factorspec_cp import _native


def _build_in(env: dict[str, str]) -> tuple[str, str]:
    out = subprocess.run([sys.executable, "-c", "import factorspec_cp, factorspec_cp._native as n; "
                          "import factorspec_cp.tokenmap.layout as L; print(n.BUILD); print(L.__file__)"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    return out[0], out[1]


def test_pure_asks_for_the_sources_and_the_build_says_what_runs() -> None:
    build, path = _build_in(dict(os.environ, FACTORSPEC_PURE="1"))
    assert build.startswith("python") and path.endswith("layout.py")
    env = {k: v for k, v in os.environ.items() if k != "FACTORSPEC_PURE"}
    build, path = _build_in(env)
    assert (build == "compiled") == (not path.endswith(".py")), (build, path)


def test_sources_changed_since_the_build_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "_ROOT", tmp_path)
    digests = {}
    for name in _native.COMPILED:
        src = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"# {name}\n")
        digests[src.relative_to(tmp_path).as_posix()] = hashlib.sha256(src.read_bytes()).hexdigest()
    assert _native._stale() == "no record of the sources they were built from"
    (tmp_path / "factorspec_cp" / "_native.json").write_text(json.dumps({"sources": digests}))
    assert _native._stale() is None
    (tmp_path / "factorspec_cp" / "session.py").write_text("# edited\n")
    assert _native._stale() == "factorspec_cp/session.py changed since the build"
