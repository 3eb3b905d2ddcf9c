"""Workload declarations built from problem text: NATURAL PLAN trip, calendar and meeting planning.

Each module has ``declaration(problem) -> Spec``, ``check(problem, record) -> list[str]`` (an independent checker
in plain Python, no solver), ``gold_record(example) -> dict`` and ``examples()``.
"""
