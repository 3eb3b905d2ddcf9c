"""The compiled core, built with the machine's C compiler: the exact search over difference constraints
(factorspec_cp/_difference.c) and the mask rows of wide field slots (factorspec_cp/_rows.c); everything else is
declared in pyproject.toml."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[Extension("factorspec_cp._difference", ["factorspec_cp/_difference.c"], extra_compile_args=FLAGS),
                   Extension("factorspec_cp._rows", ["factorspec_cp/_rows.c"], extra_compile_args=FLAGS)])
