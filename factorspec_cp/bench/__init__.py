"""Benchmarks behind ``factorspec bench``. Results go to ``benchmarks/<suite>.json`` and ``.md``."""

from __future__ import annotations

import argparse
import json
from typing import Any

DEFAULTS = {"solve": {"per_size": 20, "calendar": 100, "meeting": 100},
            "masks": {"per_size": 4, "calendar": 10, "meeting": 3, "bfcl": 31, "note": 20},
            "breakdown": {"per_size": 0, "calendar": 0, "meeting": 5, "bfcl": 0, "note": 0},
            "generate": {"calendar": 20, "meeting": 5, "bfcl": 31, "note": 20},
            "serve": {"concurrency": "1,4,8", "problems": 8},
            "service": {"concurrency": "8,64,128", "problems": 4}}


def run_bench(args: argparse.Namespace) -> int:
    for k, v in DEFAULTS.get(args.suite, {}).items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
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
    if args.suite == "breakdown":
        from .breakdown import run as run_breakdown
        return run_breakdown(args)
    if args.suite == "generate":
        from .generate import run as run_generate
        return run_generate(args)
    if args.suite == "fuzz":
        from .fuzz import run as run_fuzz
        return run_fuzz(args)
    if args.suite == "serve":
        from .serve import run as run_serve
        return run_serve(args)
    if args.suite == "service":
        from .service import run as run_service
        return run_service(args)
    raise SystemExit(f"unknown suite {args.suite!r}")


def write_report(args: argparse.Namespace, name: str, res: dict[str, Any], md: str) -> None:
    """``<out>/<name>.json`` and ``<name>.md``, and the markdown printed."""
    from pathlib import Path

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / f"{name}.md").write_text(md)
    print(md)


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
