"""``factorspec bench breakdown``: where the constraint CPU per record token goes, by part, against XGrammar.

The gold-guided walks of ``factorspec bench masks`` (the same problems and the same timed calls: planning and
``consume`` at every position, ``fill_mask`` where the model chooses), with the entry points of each part wrapped by
a timer that counts its own time only (a call's time less that of the wrapped calls it makes; collections of the
garbage collector are counted apart, by its callbacks). One walk per record: a second walk of the same declaration
would find its plans and rows cached, and a walk on a copy would find the layout's tables built by the first.
The parts:

- ``search (C)``: the difference component's exact search (``_difference.project`` / ``feasible``);
- ``search set-up (Python)``: :class:`~factorspec_cp.difference.DifferenceModel` around it (candidate tables, bound
  edges, the answer as intervals);
- ``solver``: SAT / CP-SAT solves of the session;
- ``session (Python)``: the session's answers (admissible sets and masks, piecewise questions, assignments, its
  states and what they know), less the three above;
- ``layout (Python)``: the layout's byte matching (advance, forced bytes, accepting, next bytes), with the filter
  that turns the session's answers into slots;
- ``tokenizer``: the canonical encoding of planned bytes;
- ``mask rows``: :meth:`Decoder._exact_row` (choice and wide tables, the walk of the token index), less the above;
- ``gc``: the garbage collector's collections inside the timed calls;
- ``planner (Python)``: :meth:`Decoder._compute_plan`, the certain-run planner's own loop (the bytes every
  continuation writes, their tokens and the state after each);
- ``consume (Python)``: :meth:`Decoder.consume` (frames, redo, the session's assignment of completed values);
- ``decoder, the rest (Python)``: what the timed calls leave (plan and row caches, filters, the row ahead, rollback).

The timers add to the total: their cost per call is measured (:func:`wrapper_seconds`) and reported, times the
calls made, per token. XGrammar replays the same tokens on the schema without relations, as in ``bench masks``.
Writes ``benchmarks/breakdown.json`` and ``.md``. A measurement for deciding what to compile, not a target: the
targets are ``bench masks``'.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import percentile, write_report
from .masks import gold_walk, problems
from .walks import VOCABS

PARTS = ["search (C)", "search set-up (Python)", "solver", "session (Python)", "layout (Python)", "tokenizer",
         "mask rows", "gc", "planner (Python)", "consume (Python)", "decoder, the rest (Python)"]


class Meter:
    """Own time per part: each wrapped call adds its time less that of the wrapped calls (and collections) inside
    it. Counting only while :attr:`active` (inside the walk's timed calls)."""

    def __init__(self) -> None:
        self.own: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self.calls: dict[str, int] = dict.fromkeys(PARTS, 0)
        self.active = False
        self._stack: list[list[float]] = []  # per open wrapped call: the time of what it called that was counted
        self._gc_start = 0.0

    def wrap(self, fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        clock, stack, own, calls = time.perf_counter, self._stack, self.own, self.calls

        def timed(*a: Any, **k: Any) -> Any:
            if not self.active:
                return fn(*a, **k)
            stack.append([0.0])
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                dt = clock() - t
                inner = stack.pop()[0]
                own[part] += dt - inner
                calls[part] += 1
                if stack:
                    stack[-1][0] += dt
        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if not self.active:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            dt = time.perf_counter() - self._gc_start
            self.own["gc"] += dt
            self.calls["gc"] += 1
            if self._stack:
                self._stack[-1][0] += dt


def _targets() -> list[tuple[Any, str, str]]:
    """(owner, attribute, part) for every wrapped entry point."""
    from .. import difference as dm
    from .. import session as ss
    from ..tokenmap import decoder as dec
    from ..tokenmap import layout as lay
    from ..tokenmap import vocab as voc
    out: list[tuple[Any, str, str]] = []
    if dm._core is not None:
        out += [(dm._core, "project", "search (C)"), (dm._core, "feasible", "search (C)")]
    out += [(dm.DifferenceModel, "admissible", "search set-up (Python)"),
            (dm.DifferenceModel, "satisfiable", "search set-up (Python)"),
            (ss.Session, "_solve", "solver")]
    out += [(ss.Session, n, "session (Python)") for n in
            ("admissible", "admissible_mask", "questions", "assign", "push", "pop")]
    out += [(ss.FieldQuestions, n, "session (Python)") for n in ("settled", "among")]
    out += [(lay.Layout, n, "layout (Python)") for n in
            ("advance", "advance_in_string", "in_string", "forced_bytes", "accepting", "finish", "branches",
             "some_next_bytes", "allowed_next_bytes", "free_string", "value_choice", "after_free_slot")]
    out += [(voc.Vocabulary, "encode", "tokenizer"), (dec.Decoder, "_exact_row", "mask rows"),
            (dec.Decoder, "_compute_plan", "planner (Python)"), (dec.Decoder, "consume", "consume (Python)")]
    return out


@contextmanager
def instrumented(meter: Meter) -> Iterator[Meter]:
    """The entry points wrapped (and the garbage collector's callback added) for the duration; restored after,
    whatever happens."""
    from .. import difference as dm
    saved: list[tuple[Any, str, Any]] = []
    core = dm._core
    try:
        if core is not None:  # a compiled module's functions cannot be set on it: a stand-in module for the while
            import types
            proxy = types.SimpleNamespace(**{n: getattr(core, n) for n in dir(core) if not n.startswith("__")})
            dm._core = proxy
        for owner, name, part in _targets():
            if owner is core:
                owner = dm._core
            orig = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            saved.append((owner, name, orig))
            setattr(owner, name, meter.wrap(orig, part))
        gc.callbacks.append(meter.gc_callback)
        yield meter
    finally:
        if meter.gc_callback in gc.callbacks:
            gc.callbacks.remove(meter.gc_callback)
        for owner, name, orig in reversed(saved):
            setattr(owner, name, orig)
        dm._core = core


def run_breakdown(per_size: int = 0, calendar_n: int = 0, meeting_n: int = 5, bfcl_n: int = 0, note_n: int = 0,
                  vocabs: list[str] | None = None, progress: bool = False) -> dict[str, Any]:
    from .masks_xgrammar import time_masks
    names = vocabs or list(VOCABS)
    loaded = {v: VOCABS[v]() for v in names}
    items = list(problems(per_size, calendar_n, meeting_n, bfcl_n, note_n))
    groups: dict[str, dict[str, Any]] = {}
    for k, (group, spec, gold) in enumerate(items):
        workload = "trip" if group.startswith("trip-") else group  # (every city count together)
        for name in names:
            vocab = loaded[name]
            g = groups.setdefault(f"{workload}/{name}", {"records": 0, "tokens": 0, "metered": 0.0, "xgrammar": 0.0,
                                                         "own": dict.fromkeys(PARTS, 0.0),
                                                         "calls": dict.fromkeys(PARTS, 0), "ratios": []})
            meter = Meter()
            gc.collect()
            with instrumented(meter):
                walk = gold_walk(spec, vocab, gold, meter)
            tokens, metered = walk["tokens"], sum(walk["cpu"])
            xg = time_masks(spec.schema, vocab, [tokens], cold=False)
            xg_cpu = sum(xg["fill_mask_seconds"][0]) + sum(xg["consume_seconds"][0])
            g["records"] += 1
            g["tokens"] += len(tokens)
            g["metered"] += metered
            g["xgrammar"] += xg_cpu
            g["ratios"].append(metered / xg_cpu if xg_cpu > 0 else float("inf"))
            named = sum(meter.own[p] for p in PARTS if p != PARTS[-1])
            meter.own[PARTS[-1]] = metered - named  # the rest of the timed calls' time
            for p in PARTS:
                g["own"][p] += meter.own[p]
                g["calls"][p] += meter.calls[p]
        if progress:
            print(f"\r  breakdown: problem {k + 1}/{len(items)} ({group})", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    overhead = wrapper_seconds()
    rows = {}
    for key, g in groups.items():
        n = g["tokens"]
        xg = g["xgrammar"] / n * 1e6
        rows[key] = {
            "records": g["records"], "tokens": n,
            "us_per_token": round(g["metered"] / n * 1e6, 2),
            "instrumentation_us_per_token": round(sum(g["calls"].values()) * overhead / n * 1e6, 2),
            "xgrammar_us_per_token": round(xg, 2),
            "ratio": round(g["metered"] / g["xgrammar"], 2) if g["xgrammar"] else None,
            "ratio_p50_of_records": round(percentile(g["ratios"], 50), 2),
            "parts_us_per_token": {p: round(g["own"][p] / n * 1e6, 2) for p in PARTS},
            "parts_share": {p: round(g["own"][p] / g["metered"], 4) if g["metered"] else 0.0 for p in PARTS},
            "parts_in_xgrammar_units": {p: round(g["own"][p] / g["xgrammar"], 2) if g["xgrammar"] else None
                                        for p in PARTS},
            "calls_per_token": {p: round(g["calls"][p] / n, 2) for p in PARTS},
        }
    return {"rows": rows, "parts": PARTS, "wrapper_us": round(overhead * 1e6, 3)}


def wrapper_seconds(n: int = 200_000) -> float:
    """What a timed call adds to the call it wraps (seconds, the median of five runs of ``n`` calls of a function
    that does nothing, wrapped and counting, less unwrapped)."""
    def noop() -> None:
        return None

    meter = Meter()
    meter.active = True
    wrapped = meter.wrap(noop, PARTS[0])
    out = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            noop()
        bare = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(n):
            wrapped()
        out.append((time.perf_counter() - t - bare) / n)
    return max(0.0, sorted(out)[2])


def report_md(res: dict[str, Any]) -> str:
    lines = ["# Where the constraint CPU per record token goes, by part", "",
             f"Machine: {res.get('machine', '')}. Command: `{res.get('command', '')}`. XGrammar "
             f"{res.get('xgrammar', '')} replays the same tokens on the schemas without relations, same run. "
             f"{res.get('bench_note', '')}", "",
             f"Modules: {res.get('build', 'python')} (the per-token path's Python modules, not the compiled build "
             "`bench masks` times: a compiled class's methods cannot be wrapped).", "",
             "The walks and timed calls of `bench masks` (planning and `consume` everywhere, `fill_mask` where the "
             "model chooses), one walk per record, with each part's entry points timed (own time: less the timed "
             "calls inside; garbage collections counted apart). *decoder, the rest* is what the total leaves. Each "
             "part's figure is us per record token, its share of the total, and in units of XGrammar's whole cost "
             "per token on the same tokens (trip: every city count together).", "",
             "Each part in units of XGrammar's whole cost per token on the same tokens:", "",
             "| workload / tokenizer | ours / XGrammar | " + " | ".join(res["parts"]) + " |",
             "|---|---|" + "---|" * len(res["parts"])]
    for key, r in res["rows"].items():
        lines.append(f"| {key} | {r['ratio']} | " + " | ".join(str(r["parts_in_xgrammar_units"][p])
                                                            for p in res["parts"]) + " |")
    lines.append("")
    parts = res["parts"]
    for key, r in res["rows"].items():
        lines += [f"## {key}", "",
                  f"{r['records']} records, {r['tokens']} tokens. Ours {r['us_per_token']:.1f} us/token (of which "
                  f"the timers' own cost, estimated: {r['instrumentation_us_per_token']:.1f}), XGrammar "
                  f"{r['xgrammar_us_per_token']:.1f}: {r['ratio']}x over all tokens, {r['ratio_p50_of_records']}x at "
                  f"the median record.", "",
                  "| part | us/token | share | x XGrammar's whole cost | timed calls/token |", "|---|---|---|---|---|"]
        for p in parts:
            lines.append(f"| {p} | {r['parts_us_per_token'][p]:.1f} | {r['parts_share'][p]:.1%} | "
                         f"{r['parts_in_xgrammar_units'][p]} | {r['calls_per_token'][p]} |")
        lines.append("")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from .. import _native
    from ..baselines.xgrammar import xgrammar_version
    if _native.BUILD == "compiled":  # the Python modules, in a new process
        print("breakdown: timing the parts needs the Python modules (a compiled class's methods cannot be wrapped); "
              "running with FACTORSPEC_PURE=1", file=sys.stderr, flush=True)
        argv = ["bench", "breakdown", "--per-size", str(args.per_size), "--calendar", str(args.calendar),
                "--meeting", str(args.meeting), "--bfcl", str(args.bfcl), "--note", str(args.note), "--out",
                str(args.out), "--bench-note", getattr(args, "bench_note", None) or ""]
        argv += ["--vocabs", args.vocabs] if args.vocabs else []
        env = dict(os.environ, FACTORSPEC_PURE="1")
        return subprocess.call([sys.executable, "-m", "factorspec_cp.cli", *argv], env=env)
    vocabs = [v for v in (args.vocabs or "").split(",") if v] or None
    res = run_breakdown(args.per_size, args.calendar, args.meeting, args.bfcl, args.note, vocabs, progress=True)
    res["machine"] = f"{platform.machine()}, {platform.python_version()}, 2-core CPU"
    res["command"] = (f"factorspec bench breakdown --per-size {args.per_size} --calendar {args.calendar} "
                      f"--meeting {args.meeting} --bfcl {args.bfcl} --note {args.note}"
                      + (f" --vocabs {args.vocabs}" if args.vocabs else ""))
    res["bench_note"] = getattr(args, "bench_note", None) or ""
    res["xgrammar"] = xgrammar_version()
    res["build"] = _native.BUILD
    write_report(args, "breakdown", res, report_md(res))
    return 0
