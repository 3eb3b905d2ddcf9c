"""``factorspec bench masks``: mask latency and constraint CPU time per record token, against XGrammar.

For each workload problem and tokenizer, a gold-guided walk writes the gold record through our decoder in
canonical mode, as a serving engine would drive it: where a certain run exists its tokens are taken (they need no
choice: the mask admits only the draft token), elsewhere the longest admitted token that spells the gold's next
bytes (the model's choice, replaced by the gold). Every position is timed: ``certain_run`` (planning), ``fill_mask``
and ``consume``. Constraint CPU per token counts planning and ``consume`` everywhere and ``fill_mask`` where the
model has a choice: at a certain position the mask is the draft token alone, which an engine need not compute.
The same token sequence is then replayed through XGrammar on the same
schema without relations (its language contains ours there), timing its ``fill_mask`` and ``consume``; both runs
are in the same process, one after the other.

Figures: mask latency p50/p99 (all positions, and the positions that needed a choice), masks per second, the share
of record tokens that are certain, constraint CPU seconds per record token (fill_mask + consume + planning, over
all positions), and the same for XGrammar. Writes ``benchmarks/masks.json`` and ``masks.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..spec import Spec
from ..tokenmap import Vocabulary
from ..tokenmap.decoder import mask_to_ids
from . import percentile, summary_ms
from .walks import VOCABS


def problems(per_size: int, calendar_n: int, meeting_n: int) -> Iterator[tuple[str, Spec, Any]]:
    """(group, declaration, gold record) for trip 3..7 cities, calendar and meeting."""
    from ..workloads import calendar, meeting, trip
    per: dict[int, int] = {}
    for ex in trip.examples():
        n = trip.num_cities(ex)
        if n > 7 or per.get(n, 0) >= per_size:
            continue
        per[n] = per.get(n, 0) + 1
        yield f"trip-{n}", trip.declaration(trip.problem(ex)), trip.gold_record(ex)
    for k, ex in enumerate(calendar.examples()):
        if k >= calendar_n:
            break
        yield "calendar", calendar.declaration(calendar.problem(ex)), calendar.gold_record(ex)
    for k, ex in enumerate(meeting.examples()):
        if k >= meeting_n:
            break
        yield "meeting", meeting.declaration(ex), meeting.gold_record(ex)


def gold_walk(spec: Spec, vocab: Vocabulary, gold: Any) -> dict[str, Any]:
    """Write ``gold`` through a canonical-mode decoder; time every position. Returns tokens and timings."""
    vocab.encode("{}")  # the canonical encoder loads once per vocabulary: not a per-record cost
    t = time.perf_counter()
    session = spec.session().prepare()  # a server runs this while the prompt is prefilled
    setup = time.perf_counter() - t
    dec = spec.decoder(vocab, mode="canonical", session=session)
    target = dec.layout.render(gold).encode()
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    fills, consumes, certain, tokens, cpu = [], [], [], [], []
    clock = time.perf_counter
    while not dec.is_terminated():
        t0 = clock()
        run = dec.certain_run(1)  # plans the certain run where none is planned: the real work of certain tokens
        t1 = clock()
        dec.fill_mask(row)  # at a certain position: the single draft token (an engine need not even ask)
        t2 = clock()
        if run:
            tok = run[0]
        else:
            done = dec.output()
            rest = target[len(done):]
            best, tok = -1, -1
            for t in mask_to_ids(row, vocab.size).tolist():
                tb = vocab.tokens[t]
                if tb is None:
                    if not rest and best < 0:
                        tok, best = t, 0
                elif rest.startswith(tb) and len(tb) > best:
                    tok, best = t, len(tb)
            if tok < 0:
                raise AssertionError(f"no admitted token spells the gold after {done!r}")
        t3 = clock()
        dec.consume(tok)
        t4 = clock()
        fills.append(t2 - t1)
        consumes.append(t4 - t3)
        cpu.append((t1 - t0) + (t4 - t3) + (0.0 if run else t2 - t1))
        certain.append(bool(run))
        tokens.append(tok)
    if dec.record() != json.loads(target):
        raise AssertionError("the gold walk did not reproduce the gold record")
    return {"tokens": tokens, "fill": fills, "consume": consumes, "certain": certain, "cpu": cpu,
            "solver_seconds": dec.stats.solver_seconds, "setup_seconds": setup}


def run_masks(per_size: int = 4, calendar_n: int = 10, meeting_n: int = 3, vocabs: list[str] | None = None,
              progress: bool = False) -> dict[str, Any]:
    from .masks_xgrammar import time_masks
    names = vocabs or list(VOCABS)
    loaded = {v: VOCABS[v]() for v in names}
    items = list(problems(per_size, calendar_n, meeting_n))
    groups: dict[str, dict[str, Any]] = {}
    for k, (group, spec, gold) in enumerate(items):
        schema = spec.schema
        for v in names:
            vocab = loaded[v]
            gc.collect()
            ours = gold_walk(spec, vocab, gold)
            theirs = time_masks(schema, vocab, [ours["tokens"]], cold=False)
            g = groups.setdefault(f"{group}/{v}", {"records": 0, "tokens": 0, "certain": 0, "fill": [],
                                                   "fill_choice": [], "cpu": 0.0, "xg_fill": [], "xg_cpu": 0.0,
                                                   "solver": 0.0})
            g["records"] += 1
            g["tokens"] += len(ours["tokens"])
            g["certain"] += sum(ours["certain"])
            g["fill"] += ours["fill"]
            g["fill_choice"] += [f for f, c in zip(ours["fill"], ours["certain"]) if not c]
            g["cpu"] += sum(ours["cpu"])
            g["solver"] += ours["solver_seconds"]
            xf = theirs["fill_mask_seconds"][0]
            g["xg_fill"] += xf
            g["xg_cpu"] += sum(xf) + sum(theirs["consume_seconds"][0])
        if progress:
            print(f"\r  masks: problem {k + 1}/{len(items)} ({group})", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    rows = {}
    for key, g in groups.items():
        rows[key] = {
            "records": g["records"], "tokens": g["tokens"], "certain_share": round(g["certain"] / g["tokens"], 4),
            "mask_ms": summary_ms(g["fill"]), "mask_ms_choice": summary_ms(g["fill_choice"]),
            "xgrammar_mask_ms": summary_ms(g["xg_fill"]),
            "masks_per_s": round(len(g["fill"]) / sum(g["fill"]), 1),
            "xgrammar_masks_per_s": round(len(g["xg_fill"]) / sum(g["xg_fill"]), 1),
            "p99_ratio": round(percentile(g["fill"], 99) / percentile(g["xg_fill"], 99), 2),
            "cpu_us_per_token": round(g["cpu"] / g["tokens"] * 1e6, 2),
            "xgrammar_cpu_us_per_token": round(g["xg_cpu"] / g["tokens"] * 1e6, 2),
            "solver_us_per_token": round(g["solver"] / g["tokens"] * 1e6, 2),
        }
    return {"rows": rows}


def report_md(res: dict[str, Any]) -> str:
    lines = ["# Mask latency and constraint CPU per record token, against XGrammar", "",
             f"Machine: {res.get('machine', '')}. Command: `{res.get('command', '')}`. XGrammar "
             f"{res.get('xgrammar', '')} on the same schemas without relations, same token sequences, same run.", "",
             "Gold-guided canonical-mode walks (certain runs taken, elsewhere the longest admitted token spelling the "
             "gold). *mask*: `fill_mask` at every position (a single token where certain); *at a choice*: where the "
             "model chooses; *cpu/token*: planning + `consume` everywhere + `fill_mask` at choices.", "",
             "| workload / tokenizer | records | tokens | certain | mask p50 / p99 ms | at a choice p50 / p99 ms | "
             "XGrammar p50 / p99 ms | p99 ratio | masks/s (ours / XGr) | cpu/token us (ours / XGr) | "
             "solver us/token |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in res["rows"].items():
        m, c, x = r["mask_ms"], r["mask_ms_choice"], r["xgrammar_mask_ms"]
        lines.append(
            f"| {key} | {r['records']} | {r['tokens']} | {r['certain_share']:.1%} | {m['p50']:.3f} / {m['p99']:.3f} "
            f"| {c.get('p50', 0):.3f} / {c.get('p99', 0):.3f} | {x['p50']:.4f} / {x['p99']:.4f} | "
            f"{r['p99_ratio']} | {r['masks_per_s']:.0f} / {r['xgrammar_masks_per_s']:.0f} | "
            f"{r['cpu_us_per_token']:.1f} / {r['xgrammar_cpu_us_per_token']:.1f} | {r['solver_us_per_token']:.1f} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from ..baselines.xgrammar import xgrammar_version
    res = run_masks(args.per_size, args.calendar, args.meeting, progress=True)
    res["machine"] = f"{platform.machine()}, {platform.python_version()}, 2-core CPU"
    res["command"] = (f"factorspec bench masks --per-size {args.per_size} --calendar {args.calendar} "
                      f"--meeting {args.meeting}")
    res["xgrammar"] = xgrammar_version()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "masks.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "masks.md").write_text(report_md(res))
    print(report_md(res))
    return 0
