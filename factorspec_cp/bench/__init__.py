"""Benchmarks behind ``factorspec bench``. Results go to ``benchmarks/<suite>.json`` and ``.md``."""

from __future__ import annotations

import argparse
from typing import Any


def run_bench(args: argparse.Namespace) -> int:
    if args.suite == "solve":
        from .solve import run
        return run(args)
    if args.suite == "coverage":
        from .coverage import run as run_coverage
        return run_coverage(args)
    if args.suite == "walks":
        from .walks import run as run_walks
        return run_walks(args)
    if args.suite == "masks":
        from .masks import run as run_masks
        return run_masks(args)
    raise SystemExit(f"unknown suite {args.suite!r}")


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ys = sorted(xs)
    k = max(0, min(len(ys) - 1, int(round(q / 100 * len(ys) + 0.5)) - 1))
    return ys[k]


def summary_ms(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50": round(percentile(xs, 50) * 1e3, 4), "p99": round(percentile(xs, 99) * 1e3, 4),
            "max": round(max(xs) * 1e3, 4), "mean": round(sum(xs) / len(xs) * 1e3, 4)}
