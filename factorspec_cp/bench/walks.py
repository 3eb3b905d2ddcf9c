"""``factorspec bench walks``: random walks through the decoder, every record checked independently.

Each walk draws a workload problem, a tokenizer and a mode, then picks uniformly among the admitted tokens until
EOS. The record must pass ``jsonschema`` against the declaration's schema and the workload's own checker (written
without the solver). Along the way, with probability ``rollback_p`` per position, the walk rolls back a random
number of tokens (at most ``MAX_ROLLBACK``) and replays them, and every replayed mask must equal the one first seen.

Writes ``benchmarks/walks.json`` and ``walks.md``: walks, failures (none expected), positions, rollbacks, time.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from ..spec import Spec
from ..tokenmap import Vocabulary

VOCABS: dict[str, Callable[[], Vocabulary]] = {
    "smollm2": Vocabulary.smollm2, "qwen3": Vocabulary.qwen3, "llama3": Vocabulary.llama3}
#: share of the walks per workload (a meeting walk costs 1-6 s, the solver's admissible sets; trip and calendar 0.2 s;
#: tool calls and trip with a free note write free strings, uniformly random tokens up to their length bounds)
WEIGHTS = {"trip": 0.45, "calendar": 0.35, "meeting": 0.02, "tool-call": 0.1, "trip+note": 0.08}


#: the deepest rollback a walk draws: free strings make walks of thousands of tokens, and replaying up to the whole
#: history at every rollback would cost the square of their length
MAX_ROLLBACK = 64


def _note_doc(prompt: str) -> dict[str, Any]:
    """A trip declaration with a free ``note`` string (at most 400 characters), as ``bench generate`` writes it."""
    from ..workloads import trip
    doc = trip.declaration_doc(prompt)
    doc["properties"]["note"] = {"type": "string", "maxLength": 400}
    doc["required"] = [*doc["required"], "note"]
    return doc


def _note_check(prompt: str, record: Any) -> list[str]:
    """The trip checker on the record without its note; the note itself is checked by jsonschema."""
    from ..workloads import trip
    if not isinstance(record, dict):
        return ["not an object"]
    return list(trip.check(prompt, {k: v for k, v in record.items() if k != "note"}))


class Workload:
    """A workload's problems as (declaration, checker) pairs, built lazily and cached."""

    def __init__(self, name: str):
        from ..workloads import bfcl, calendar, meeting, trip
        self.name = name
        if name == "trip":
            self.items = [trip.problem(ex) for ex in trip.examples()]
            self._spec, self._check = trip.declaration, trip.check
        elif name == "calendar":
            self.items = [calendar.problem(ex) for ex in calendar.examples()]
            self._spec, self._check = calendar.declaration, calendar.check
        elif name == "meeting":
            self.items = list(meeting.examples())
            self._spec, self._check = meeting.declaration, meeting.check
        elif name == "tool-call":  # BFCL: the relations checked without the solver (bfcl.check_relations)
            self.items = list(bfcl.problems())
            self._spec, self._check = bfcl.declaration, bfcl.check_relations
        elif name == "trip+note":
            self.items = [trip.problem(ex) for ex in trip.examples()]
            self._spec, self._check = (lambda prompt: Spec.from_json(_note_doc(prompt))), _note_check
        else:
            raise ValueError(f"unknown workload {name!r}")
        self._specs: dict[int, Spec] = {}

    def spec(self, k: int) -> Spec:
        if k not in self._specs:
            if len(self._specs) >= 8:  # each keeps its decoders' caches (up to 2,048 mask rows per vocabulary)
                self._specs.clear()
            self._specs[k] = self._spec(self.items[k])
        return self._specs[k]

    def check(self, k: int, record: Any) -> list[str]:
        return list(self._check(self.items[k], record))


def walk(spec: Spec, vocab: Vocabulary, mode: str, rng: random.Random, *, rollback_p: float = 0.05,
         style: str | int = "compact") -> dict[str, Any]:
    """One uniform random walk; returns the record, positions, rollbacks and mask mismatches on replay. The decoder
    is primed first, as a server does (its set-up builds choice tables and rows ahead); in canonical mode the draft is
    asked for before each mask, as an engine does (where nothing is certain it computes the row there)."""
    dec = spec.decoder(vocab, mode=mode, style=style).prime()
    history: list[tuple[int, np.ndarray]] = []
    rollbacks = mismatches = 0
    while not dec.is_terminated():
        if mode == "canonical":
            dec.certain_run(64)  # the engine asks for its draft first (where nothing is certain: the row there)
        ids = dec.allowed_tokens()
        if not len(ids):
            raise AssertionError(f"no token admitted after {dec.output()!r}")
        tok = int(ids[rng.randrange(len(ids))])
        history.append((tok, ids))
        dec.consume(tok)
        if rng.random() < rollback_p and len(history) > 1:
            k = rng.randint(1, min(len(history), MAX_ROLLBACK))
            dec.rollback(k)
            rollbacks += 1
            for t, seen in history[-k:]:
                if mode == "canonical" and rng.random() < 0.5:
                    dec.certain_run(64)  # (on replay, the draft asked again or not: the masks agree either way)
                if not np.array_equal(dec.allowed_tokens(), seen):
                    mismatches += 1
                dec.consume(t)
    return {"record": dec.record(), "positions": len(history), "rollbacks": rollbacks, "mismatches": mismatches,
            "stats": dec.stats}


def run_walks(n: int, *, seed: int = 0, workloads: dict[str, float] | None = None,
              vocabs: list[str] | None = None, progress: bool = False,
              checkpoint: Callable[[dict[str, Any]], None] | None = None, every: int = 250) -> dict[str, Any]:
    """``n`` walks spread over workloads (by weight), tokenizers and modes; every failure is listed.
    ``checkpoint`` receives the partial result every ``every`` walks (a long run that is stopped keeps its count)."""
    weights = WEIGHTS if workloads is None else workloads
    names = list(vocabs or VOCABS)
    loaded = {v: VOCABS[v]() for v in names}
    rng = random.Random(seed)
    plan: list[str] = []
    for w, share in weights.items():
        plan += [w] * round(n * share / sum(weights.values()))
    plan = plan[:n] + [next(iter(weights))] * max(0, n - len(plan))
    rng.shuffle(plan)
    cache: dict[str, Workload] = {}
    rows: dict[str, dict[str, Any]] = {}
    failures: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for i, w in enumerate(plan):
        wl = cache.get(w) or cache.setdefault(w, Workload(w))
        k = rng.randrange(len(wl.items))
        vname = names[i % len(names)]
        mode = ("canonical", "exact")[(i // len(names)) % 2]
        spec = wl.spec(k)
        t = time.perf_counter()
        key = f"{w}/{vname}/{mode}"
        row = rows.setdefault(key, {"walks": 0, "positions": 0, "rollbacks": 0, "seconds": 0.0, "failures": 0})
        try:
            out = walk(spec, loaded[vname], mode, rng)
            problems = []
            try:
                jsonschema.validate(out["record"], spec.schema)
            except jsonschema.ValidationError as e:
                problems.append(f"jsonschema: {e.message}")
            problems += wl.check(k, out["record"])
            if out["mismatches"]:
                problems.append(f"{out['mismatches']} masks differed after rollback and replay")
        except Exception as e:  # a crash is a failure of the walk, reported with the others
            out, problems = {"positions": 0, "rollbacks": 0}, [f"{type(e).__name__}: {e}"]
        row["walks"] += 1
        row["positions"] += out["positions"]
        row["rollbacks"] += out["rollbacks"]
        row["seconds"] += time.perf_counter() - t
        if problems:
            row["failures"] += 1
            failures.append({"workload": w, "problem": k, "vocab": vname, "mode": mode, "problems": problems[:5]})
        if checkpoint is not None and (i + 1) % every == 0 and i + 1 < n:
            checkpoint({"walks": i + 1, "planned": n, "seed": seed, "failures": failures,
                        "by": {k: dict(v, seconds=round(v["seconds"], 3)) for k, v in sorted(rows.items())},
                        "seconds": round(time.perf_counter() - t_start, 1)})
        if progress and (i + 1) % max(1, n // 50) == 0:
            el = time.perf_counter() - t_start
            print(f"\r  walks {i + 1}/{n}  failures {len(failures)}  {el:.0f}s elapsed, "
                  f"~{el / (i + 1) * (n - i - 1):.0f}s left", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    for row in rows.values():
        row["seconds"] = round(row["seconds"], 3)
    return {"walks": n, "planned": n, "seed": seed, "failures": failures, "by": dict(sorted(rows.items())),
            "seconds": round(time.perf_counter() - t_start, 1)}


def report_md(res: dict[str, Any]) -> str:
    done = "" if res.get("planned", res["walks"]) == res["walks"] else (
        f" of {res['planned']} planned: the run was stopped there, figures are for the walks completed")
    lines = [f"# Random walks through the decoder ({res['walks']} walks{done}, seed {res['seed']})", "",
             f"Machine: {res.get('machine', '')}. Command: `{res.get('command', '')}`.", "",
             *([res["note"], ""] if res.get("note") else []),
             "Every walk picks uniformly among the admitted tokens until EOS; the record is checked with "
             "`jsonschema` and the workload's own checker; rollbacks replay tokens and compare masks.", "",
             f"**Failures: {len(res['failures'])}** of {res['walks']} walks, in {res['seconds']} s.", "",
             "| workload / tokenizer / mode | walks | positions | rollbacks | failures | s per walk |",
             "|---|---|---|---|---|---|"]
    for key, r in res["by"].items():
        lines.append(f"| {key} | {r['walks']} | {r['positions']} | {r['rollbacks']} | {r['failures']} | "
                     f"{r['seconds'] / max(1, r['walks']):.3f} |")
    for f in res["failures"][:20]:
        lines.append(f"- {f['workload']} #{f['problem']} {f['vocab']} {f['mode']}: {'; '.join(f['problems'])}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    workloads = None
    if getattr(args, "workloads", None):  # the named workloads only, equally weighted
        names = [w.strip() for w in args.workloads.split(",") if w.strip()]
        unknown = [w for w in names if w not in WEIGHTS]
        if unknown:
            raise SystemExit(f"walks: unknown workloads {unknown}; known: {', '.join(WEIGHTS)}")
        workloads = {w: 1.0 for w in names}

    def write(res: dict[str, Any]) -> None:
        res["machine"] = f"{platform.machine()}, {platform.python_version()}"
        res["command"] = f"factorspec bench walks --walks {args.walks} --seed {args.seed}" + (
            f" --workloads {args.workloads}" if workloads else "")
        (out / "walks.json").write_text(json.dumps(res, indent=1) + "\n")
        (out / "walks.md").write_text(report_md(res))

    res = run_walks(args.walks, seed=args.seed, workloads=workloads, progress=True, checkpoint=write)
    write(res)
    print(report_md(res))
    return 1 if res["failures"] else 0


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs with different seeds (run side by side on separate cores) as one result: counts add up, failures join."""
    by: dict[str, dict[str, Any]] = {}
    for res in results:
        for key, row in res["by"].items():
            acc = by.setdefault(key, {"walks": 0, "positions": 0, "rollbacks": 0, "seconds": 0.0, "failures": 0})
            for k in acc:
                acc[k] += row[k]
    return {"walks": sum(r["walks"] for r in results), "planned": sum(r.get("planned", r["walks"]) for r in results),
            "seed": ",".join(str(r["seed"]) for r in results), "failures": [f for r in results for f in r["failures"]],
            "by": dict(sorted(by.items())), "seconds": max(r["seconds"] for r in results),
            "machine": results[0].get("machine", ""), "command": "; ".join(r.get("command", "") for r in results)}
