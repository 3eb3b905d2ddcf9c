"""The compiled core: the exact search over difference constraints (factorspec_cp/_difference.c, built with the
machine's C compiler); everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("factorspec_cp._difference", ["factorspec_cp/_difference.c"],
                             extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
