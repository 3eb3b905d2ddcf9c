"""The compiled core, built with the machine's C compiler.

- The exact search over difference constraints (``factorspec_cp/_difference.c``), the mask rows of wide field
  slots (``factorspec_cp/_rows.c``) and the pre-tokenizer splits of plain text (``factorspec_cp/_pretok.c``): C
  written for them.
- The decoder's per-token path (``tokenmap/layout.py``, ``tokenmap/decoder.py``, ``session.py``, ``difference.py``,
  ``witnesses.py``): the Python modules as they are, compiled by mypyc from their type annotations. Meeting planning
  is about 850 Python-level calls per certain run, no one of them above a sixth of it (``notes/meeting_profile.md``):
  compiling them as they are cut its constraint CPU per token by about 30% (Cython in pure-Python mode: 13%).
  ``FACTORSPEC_COMPILE=0`` builds without them (the same modules run as Python); at run time
  :mod:`factorspec_cp._native` runs the Python sources instead of modules built from other sources than these
  (an editable install edited since its build), with a warning.

Everything else is declared in pyproject.toml.
"""

import ast
import hashlib
import json
import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]


def _compiled() -> list[str]:
    """The sources mypyc compiles: ``factorspec_cp/_native.py``'s ``COMPILED`` (read, not imported: the package's
    dependencies are not installed while it builds)."""
    tree = ast.parse(Path("factorspec_cp/_native.py").read_text())
    names = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMPILED" for t in node.targets))
    return [name.replace(".", "/") + ".py" for name in names]


COMPILED = _compiled()
MANIFEST = "factorspec_cp/_native.json"

# the difference search at -O3: its inner loop (add_edge's relax) vectorizes there, not at -O2's cheap cost model
extensions = [Extension("factorspec_cp._difference", ["factorspec_cp/_difference.c"],
                        extra_compile_args=[f for f in FLAGS if f != "-O2"] + ["-O3"]),
              Extension("factorspec_cp._rows", ["factorspec_cp/_rows.c"], extra_compile_args=FLAGS),
              Extension("factorspec_cp._pretok", ["factorspec_cp/_pretok.c"], extra_compile_args=FLAGS)]
digests = {}
if os.environ.get("FACTORSPEC_COMPILE", "1") != "0":
    from mypyc.build import mypycify

    # the sources as mypyc reads them now: the manifest written after the build names what was compiled
    digests = {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in COMPILED}
    extensions += mypycify(COMPILED, opt_level="3", group_name="factorspec_cp._native_core")


class BuildExt(build_ext):
    """Builds the extensions, then records the digests of the sources mypyc compiled beside them, which
    :mod:`factorspec_cp._native` compares with the sources at import."""

    def run(self) -> None:
        super().run()
        if not digests:  # nothing compiled: a manifest beside modules an earlier build compiled stays theirs
            return
        out = Path(MANIFEST) if self.inplace else Path(self.build_lib) / MANIFEST
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"sources": digests}, indent=1) + "\n")


setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
