"""Stand-ins for two modules SGLang imports on the CPU path but never calls there (scripts/setup-sglang.sh).

Run with a venv's python: writes ``torchvision`` and ``sgl_kernel`` stand-in packages into a folder of that venv
(``<venv>/factorspec-standins``) and a ``.pth`` file that puts the folder on ``sys.path``. Nothing here is on the
project's import path, and neither package is installed from PyPI: torchvision's builds do not load against the CPU
torch, and sgl-kernel's CPU build needs AVX-512/AMX.

- ``torchvision`` (and every submodule): imported by SGLang's multimodal processors at module level. Any attribute
  is a placeholder; calling one raises, so a path that really needed torchvision fails loudly.
- ``sgl_kernel.speculative``: ``reconstruct_indices_from_tree_mask`` is imported by ``ngram_worker``; calling it
  raises. Every other ``sgl_kernel`` name is missing (``ImportError``), so SGLang's own fallbacks still apply.
"""

import pathlib
import sys
import sysconfig

TORCHVISION = '''"""A stand-in (scripts/sglang_standins.py).

SGLang imports torchvision; its CPU test path never calls it."""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+factorspec-standin"
FACTORSPEC_STANDIN = True


class _Absent:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(self._name + "." + attr)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(self._name + ": torchvision is a stand-in here (scripts/sglang_standins.py)")

    def __mro_entries__(self, bases):
        return (object,)


def _module_getattr(name):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(name + "." + attr)
    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
__getattr__ = _module_getattr("torchvision")
'''

SGL_KERNEL = '''"""A stand-in (scripts/sglang_standins.py).

No sgl-kernel here: only names SGLang imports and never calls on the CPU test path exist; calling them raises."""
__version__ = "0.0.0+factorspec-standin"
FACTORSPEC_STANDIN = True
'''

SGL_KERNEL_SPECULATIVE = '''"""A stand-in (scripts/sglang_standins.py)."""


def reconstruct_indices_from_tree_mask(*args, **kwargs):
    raise RuntimeError("sgl_kernel.speculative is a stand-in here (scripts/sglang_standins.py)")
'''


def main() -> None:
    venv = pathlib.Path(sys.prefix)
    root = venv / "factorspec-standins"
    (root / "torchvision").mkdir(parents=True, exist_ok=True)
    (root / "sgl_kernel").mkdir(parents=True, exist_ok=True)
    (root / "torchvision" / "__init__.py").write_text(TORCHVISION)
    (root / "sgl_kernel" / "__init__.py").write_text(SGL_KERNEL)
    (root / "sgl_kernel" / "speculative.py").write_text(SGL_KERNEL_SPECULATIVE)
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    (site / "factorspec-standins.pth").write_text(str(root) + "\n")
    print(f"sglang_standins: torchvision and sgl_kernel stand-ins in {root}")


if __name__ == "__main__":
    main()
