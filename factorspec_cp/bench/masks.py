"""``factorspec bench masks``: mask latency and constraint CPU time per record token, against XGrammar.

For each workload problem and tokenizer, a gold-guided walk writes the gold record through our decoder in
canonical mode, as a serving engine would drive it: where a certain run exists its tokens are taken (they need no
choice: the mask admits only the draft token), elsewhere the longest admitted token that spells the gold's next
bytes (the model's choice, replaced by the gold). Every position is timed: ``certain_run`` (planning), ``fill_mask``
and ``consume``. Constraint CPU per token counts planning and ``consume`` everywhere and ``fill_mask`` where the
model has a choice: at a certain position the mask is the draft token alone, which an engine need not compute.
The same token sequence is then replayed through XGrammar on the same
schema without relations (its language contains ours there), timing its ``fill_mask`` and ``consume``; both runs
are in the same process, one after the other. Each tokenizer walks its own copy of the declaration (each walk is the
first request on its declaration; until stop 37 the second and third tokenizers found the first one's declaration
caches warm, 1-3 us per token on meeting).

Figures: mask latency p50/p99 (all positions, and the positions that needed a choice), masks per second, the share
of record tokens that are certain, constraint CPU seconds per record token (fill_mask + consume + planning, over
all positions), and the same for XGrammar; our CPU split by kind of position (a run planned there, a planned token
taken, the model's choice). Writes ``benchmarks/masks.json`` and ``masks.md``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import platform
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..spec import Spec
from ..tokenmap import Vocabulary
from ..tokenmap.decoder import _Later
from . import percentile, summary_ms, write_report
from .walks import VOCABS


def trip_note(gold: dict[str, Any]) -> str:
    """A note for a trip record's free ``note`` field, written from the gold plan (a fixed stand-in for what a model
    writes: words, digits, punctuation, one non-ASCII dash)."""
    plan = gold.get("plan") or []
    cities = [str(step.get("city", "")) for step in plan if isinstance(step, dict)]
    if not cities:
        return "A plan with direct flights only."
    days = plan[-1].get("last_day", "") if isinstance(plan[-1], dict) else ""
    return (f"Start in {cities[0]} and end in {cities[-1]}: {len(cities)} cities in {days} days — "
            f"direct flights only, one city after another ({', '.join(cities)}).")


def problems(per_size: int, calendar_n: int, meeting_n: int, bfcl_n: int = 0,
             note_n: int = 0) -> Iterator[tuple[str, Spec, Any]]:
    """(group, declaration, gold record) for trip 3..10 cities, calendar, meeting, tool calls (BFCL: the first
    possible answer) and trip with a free note (the note from :func:`trip_note`)."""
    from ..workloads import bfcl, calendar, meeting, trip
    from .generate import trip_problems
    per: dict[int, int] = {}
    for ex in trip.examples():
        n = trip.num_cities(ex)
        if per.get(n, 0) >= per_size:
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
    for p in bfcl.problems()[:bfcl_n]:
        yield "tool-call", bfcl.declaration(p), bfcl.gold_records(p)[0]
    for prob in trip_problems(note_n, note=True) if note_n else []:
        yield "trip+note", prob.spec, dict(prob.gold, note=trip_note(prob.gold))


def gold_walk(spec: Spec, vocab: Vocabulary, gold: Any, meter: Any = None) -> dict[str, Any]:
    """Write ``gold`` through a canonical-mode decoder; time every position. Returns tokens and timings. ``meter``
    (``bench breakdown``'s): its ``active`` is set exactly while a call that counts as constraint CPU runs."""
    vocab.encode("{}")  # the canonical encoder loads once per vocabulary: not a per-record cost
    t = time.perf_counter()
    # set-up: the declaration's layout and token index (its compile), the request's session, its root pass and the
    # first certain run (Decoder.prime): what a server does off its step loop while the prompt is prefilled
    dec = spec.decoder(vocab, mode="canonical").prime()
    setup = time.perf_counter() - t
    target = dec.layout.render(gold).encode()
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    by_bytes, longest, specials = token_lookup(vocab)
    fills, consumes, certain, tokens, cpu, planned = [], [], [], [], [], []
    clock = time.perf_counter
    first_string: list[float] = []
    in_string = False
    on = meter is not None
    while not dec.is_terminated():
        frame = dec._frames[-1]
        fresh = frame.plan is None  # no plan here yet: certain_run plans (a run, or nothing to draft)
        if on:
            meter.active = True
        t0 = clock()
        run = dec.certain_run(1)  # plans the certain run where none is planned: the real work of certain tokens
        if on:
            meter.active = not run  # the mask counts where the model chooses
        t1 = clock()
        dec.fill_mask(row)  # at a certain position: the single draft token (an engine need not even ask)
        t2 = clock()
        if on:
            meter.active = False
        # whether the position is inside a free string, read after certain_run (which made the state where it
        # planned): inside a planned run a state not made yet (a planned step's _Later) is made only where the
        # decoder reads it, and making it here, off the clock, would hide that cost; such a state is inside fixed
        # bytes or a field's value (Layout.forced_bytes), never inside a free string
        entering = type(frame.st) is not _Later and dec.layout.free_string(frame.state) is not None
        first, in_string = entering and not in_string, entering
        if run:
            tok = run[0]
        else:
            done = dec.output()
            tok = gold_token(row, by_bytes, longest, specials, target[len(done):])
            if tok < 0:
                raise AssertionError(f"no admitted token spells the gold after {done!r}")
        if on:
            meter.active = True
        t3 = clock()
        dec.consume(tok)
        t4 = clock()
        if on:
            meter.active = False
        if first:
            first_string.append(t2 - t1)
        fills.append(t2 - t1)
        consumes.append(t4 - t3)
        cpu.append((t1 - t0) + (t4 - t3) + (0.0 if run else t2 - t1))
        certain.append(bool(run))
        planned.append(fresh and bool(run))
        tokens.append(tok)
    if dec.record() != json.loads(target):
        raise AssertionError("the gold walk did not reproduce the gold record")
    return {"tokens": tokens, "fill": fills, "consume": consumes, "certain": certain, "cpu": cpu, "planned": planned,
            "solver_seconds": dec.stats.solver_seconds, "setup_seconds": setup, "first_string": first_string}


def token_lookup(vocab: Vocabulary) -> tuple[dict[bytes, list[int]], int, list[int]]:
    """Per vocabulary (kept on it): its content tokens' ids by bytes (ascending), the longest token's length and
    the special ids."""
    hit = vocab.__dict__.get("_bench_lookup")
    if hit is None:
        by: dict[bytes, list[int]] = {}
        specials = []
        for t, tb in enumerate(vocab.tokens):
            if tb is None:
                specials.append(t)
            else:
                by.setdefault(tb, []).append(t)
        hit = vocab.__dict__["_bench_lookup"] = (by, max(map(len, by)), specials)
    return hit  # type: ignore[no-any-return]


def gold_token(row: np.ndarray, by_bytes: dict[bytes, list[int]], longest: int, specials: list[int],
               rest: bytes) -> int:
    """The model's choice, replaced by the gold: the longest admitted token that spells the next bytes of
    ``rest`` (the smallest id among equal spellings), or the first admitted special token where ``rest`` is
    empty; -1 when none is admitted. A few dictionary lookups and bit tests, so the walk touches little memory
    between two timed calls, as XGrammar's replay of the same tokens does (a scan of the whole vocabulary here
    left the caches cold for the next timed call: that cost was the walk's, not the decoder's)."""
    def admitted(t: int) -> bool:
        return bool((int(row[t >> 5]) >> (t & 31)) & 1)

    if not rest:
        return next((t for t in specials if admitted(t)), -1)
    for n in range(min(len(rest), longest), 0, -1):
        for t in by_bytes.get(rest[:n], ()):
            if admitted(t):
                return t
    return -1


def cold_string_build(vocab: Vocabulary) -> float | None:
    """Seconds to build, with no cache at all (memory or disk), the token table a trip note's first mask needs."""
    from ..tokenmap.decoder import TokenIndex
    from ..tokenmap.layout import Layout
    from ..tokenmap.stringtables import StringTables
    lay = Layout(Spec({"type": "object", "required": ["note"], "properties": {
        "note": {"type": "string", "maxLength": 400}}}))
    found = lay.free_string(lay.advance(lay.start(), b'{"note": "'))
    if found is None:
        return None
    slot, (_, _, st, _, pending) = found
    index = TokenIndex.of(vocab)
    t = time.perf_counter()
    tables = StringTables(slot, index, folder=None)
    tables.table(tables.core(st, pending))
    return time.perf_counter() - t


#: the kinds of position a walk's CPU is split by: where ``certain_run`` planned a run (its tokens, the row where it
#: ends), where a planned token was taken, and where the model chose (the row computed there, its fill, the consume)
POSITIONS = ("planned", "taken", "choice")


def run_masks(per_size: int = 4, calendar_n: int = 10, meeting_n: int = 3, bfcl_n: int = 0, note_n: int = 0,
              vocabs: list[str] | None = None, progress: bool = False) -> dict[str, Any]:
    from .masks_xgrammar import time_masks
    names = vocabs or list(VOCABS)
    loaded = {v: VOCABS[v]() for v in names}
    cold = {v: cold_string_build(loaded[v]) for v in names} if note_n else {}
    items = list(problems(per_size, calendar_n, meeting_n, bfcl_n, note_n))
    groups: dict[str, dict[str, Any]] = {}
    for k, (group, spec, gold) in enumerate(items):
        schema = spec.schema
        # each tokenizer walks its own copy of the declaration, so each walk is the first request on its declaration:
        # what belongs to the declaration (the difference component's candidate tables, for one) is not found warm
        # from another tokenizer's walk (the process's caches, of a domain's matcher or a vocabulary's index, are)
        own = {v: copy.deepcopy(spec) for v in names}
        for v in names:
            vocab = loaded[v]
            gc.collect()
            ours = gold_walk(own.pop(v), vocab, gold)
            theirs = time_masks(schema, vocab, [ours["tokens"]], cold=False)
            g = groups.setdefault(f"{group}/{v}", {"records": 0, "tokens": 0, "certain": 0, "fill": [],
                                                   "fill_choice": [], "xg_choice": [], "cpu": 0.0, "xg_fill": [],
                                                   "xg_cpu": 0.0, "solver": 0.0, "per_record": [], "setup": [],
                                                   "xg_compile": [], "first_string": [],
                                                   "by_position": {k: [0, 0.0] for k in POSITIONS}})
            n = len(ours["tokens"])
            xf = theirs["fill_mask_seconds"][0]
            xg_cpu = sum(xf) + sum(theirs["consume_seconds"][0])
            g["records"] += 1
            g["tokens"] += n
            g["certain"] += sum(ours["certain"])
            g["fill"] += ours["fill"]
            g["fill_choice"] += [f for f, c in zip(ours["fill"], ours["certain"]) if not c]
            g["xg_choice"] += [f for f, c in zip(xf, ours["certain"]) if not c]
            g["cpu"] += sum(ours["cpu"])
            g["solver"] += ours["solver_seconds"]
            g["xg_fill"] += xf
            g["xg_cpu"] += xg_cpu
            g["per_record"].append((sum(ours["cpu"]) / n, xg_cpu / n))
            g["setup"].append(ours["setup_seconds"])
            g["xg_compile"].append(theirs["compile_seconds"])
            g["first_string"] += ours["first_string"]
            for c, p, t in zip(ours["certain"], ours["planned"], ours["cpu"]):
                acc = g["by_position"]["planned" if p else "taken" if c else "choice"]
                acc[0] += 1
                acc[1] += t
        if progress:
            print(f"\r  masks: problem {k + 1}/{len(items)} ({group})", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    rows = {}
    for key, g in groups.items():
        ours_pr = [a for a, _ in g["per_record"]]
        xg_pr = [b for _, b in g["per_record"]]
        ratio_pr = [a / b for a, b in g["per_record"] if b > 0]
        choice = g["fill_choice"]
        rows[key] = {
            "records": g["records"], "tokens": g["tokens"], "certain_share": round(g["certain"] / g["tokens"], 4),
            "mask_ms": summary_ms(g["fill"]), "mask_ms_choice": summary_ms(choice),
            "xgrammar_mask_ms": summary_ms(g["xg_fill"]), "xgrammar_mask_ms_choice": summary_ms(g["xg_choice"]),
            "masks_per_s": round(len(g["fill"]) / sum(g["fill"]), 1),
            "xgrammar_masks_per_s": round(len(g["xg_fill"]) / sum(g["xg_fill"]), 1),
            "p99_ratio": round(percentile(g["fill"], 99) / percentile(g["xg_fill"], 99), 2),
            "p99_ratio_choice": (float(f"{percentile(choice, 99) / percentile(g['xg_choice'], 99):.3g}")
                                 if choice else None),  # (3 significant digits: a tool call's is about 0.001)
            "cpu_us_per_token": round(g["cpu"] / g["tokens"] * 1e6, 2),
            "xgrammar_cpu_us_per_token": round(g["xg_cpu"] / g["tokens"] * 1e6, 2),
            "cpu_us_per_token_p50": round(percentile(ours_pr, 50) * 1e6, 2),
            "xgrammar_cpu_us_per_token_p50": round(percentile(xg_pr, 50) * 1e6, 2),
            "cpu_ratio_p50": round(percentile(ratio_pr, 50), 2),
            "solver_us_per_token": round(g["solver"] / g["tokens"] * 1e6, 2),
            "setup_ms": summary_ms(g["setup"]), "xgrammar_compile_ms": summary_ms(g["xg_compile"]),
            "first_string_mask_ms": summary_ms(g["first_string"]),
            "cpu_by_position": {k: {"n": n, "us_each": round(t / n * 1e6, 2) if n else 0.0,
                                    "us_per_token": round(t / g["tokens"] * 1e6, 2),
                                    "share": round(t / g["cpu"], 4) if g["cpu"] else 0.0}
                                for k, (n, t) in g["by_position"].items()},
        }
    res: dict[str, Any] = {"rows": rows}
    if cold:
        res["string_table_cold_build_ms"] = {v: round(s * 1e3, 1) for v, s in cold.items() if s is not None}
    return res


def report_md(res: dict[str, Any]) -> str:
    lines = ["# Mask latency and constraint CPU per record token, against XGrammar", "",
             f"Machine: {res.get('machine', '')}. Command: `{res.get('command', '')}`. XGrammar "
             f"{res.get('xgrammar', '')} on the same schemas without relations, same token sequences, same run. "
             f"{res.get('bench_note', '')} Per-token path: {res.get('build', 'python')}.", "",
             "Gold-guided canonical-mode walks (certain runs taken, elsewhere the longest admitted token spelling the "
             "gold, found with a few lookups, so that between two timed calls the walk touches about as little "
             "memory as XGrammar's replay of the same tokens; a trip note is a fixed sentence written from the gold "
             "plan). *cpu/token*: planning (`certain_run`, with the rows it computes ahead) + `consume` "
             "everywhere + `fill_mask` where the model chooses, per record token; *p50* of the per-record values, "
             "and their ratio (ours / XGrammar's on the same tokens) at the median. *at a choice*: `fill_mask` where "
             "the model chooses, ours and XGrammar's at the same positions; ours after the walk asked for the draft "
             "(`certain_run`), as an engine does before the forward pass: where nothing is certain, that call "
             "computed the row there (counted in *cpu/token*) and the fill copies it; *n* such positions (a p99 over "
             "a few hundred is nearly their second largest: on this shared 2-core machine one pause of 20-70 us in "
             "a fill, which both sides meet in the *all* columns, decides it; the max is given beside it). "
             "*set-up*: ours is the "
             "declaration's "
             "compile (layout, token index), the request's session, its root pass and the first certain run "
             "(`Decoder.prime`, what a server runs off its step loop while the prompt is prefilled); XGrammar's is "
             "its grammar compile. Each tokenizer walks its own copy of the declaration: every walk is the first "
             "request on its declaration.", "",
             "| workload / tokenizer | records | tokens | certain | cpu/token us p50 (ours / XGr) | ratio p50 | "
             "at a choice: n, p50 / p99 / max ms | XGr at those p50 / p99 / max ms | p99 ratio at a choice | mask "
             "p99 all (ours / XGr) ms | set-up p50 / p99 ms | XGr compile p50 / p99 ms | solver us/token |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in res["rows"].items():
        m, c, x = r["mask_ms"], r["mask_ms_choice"], r["xgrammar_mask_ms"]
        pc = r.get("p99_ratio_choice")
        xc, su, xs = r.get("xgrammar_mask_ms_choice", {}), r.get("setup_ms", {}), r.get("xgrammar_compile_ms", {})
        lines.append(
            f"| {key} | {r['records']} | {r['tokens']} | {r['certain_share']:.1%} | "
            f"{r.get('cpu_us_per_token_p50', 0):.1f} / {r.get('xgrammar_cpu_us_per_token_p50', 0):.1f} | "
            f"{r.get('cpu_ratio_p50', '')} | {c.get('n', 0)}, {c.get('p50', 0):.4f} / {c.get('p99', 0):.4f} / "
            f"{c.get('max', 0):.4f} | {xc.get('p50', 0):.4f} / {xc.get('p99', 0):.4f} / {xc.get('max', 0):.4f} | "
            f"{'' if pc is None else pc} | "
            f"{m['p99']:.3f} / {x['p99']:.4f} | {su.get('p50', 0):.1f} / {su.get('p99', 0):.1f} | "
            f"{xs.get('p50', 0):.1f} / {xs.get('p99', 0):.1f} | {r['solver_us_per_token']:.1f} |")
    split = [(k, r["cpu_by_position"]) for k, r in res["rows"].items() if r.get("cpu_by_position")]
    if split:
        lines += ["", "Where our CPU per token goes, by position: *planned*, where `certain_run` planned a run (the "
                  "walk of the layout to the next choice, the session's questions under the values just written, the "
                  "tokens, the row where the run ends); *taken*, a planned token taken (`certain_run` and `consume`); "
                  "*choice*, where the model chose (the row computed at `certain_run`, the fill, the `consume`). Each: "
                  "positions per record, us each, us per record token and share of our CPU.", "",
                  "| workload / tokenizer | planned: per record, us each, us/token, share | taken: per record, "
                  "us each, us/token, share | choice: per record, us each, us/token, share |", "|---|---|---|---|"]
        for k, b in split:
            records = res["rows"][k]["records"]
            lines.append(f"| {k} | " + " | ".join(
                f"{b[p]['n'] / records:.1f}, {b[p]['us_each']:.1f}, {b[p]['us_per_token']:.2f}, {b[p]['share']:.0%}"
                for p in POSITIONS) + " |")
    strings = [(k, r["first_string_mask_ms"]) for k, r in res["rows"].items()
               if r.get("first_string_mask_ms", {}).get("n")]
    if strings:
        lines += ["", "First mask inside a free string (tables warm in memory after the first record of the run):", "",
                  "| workload / tokenizer | strings | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
        for k, f in strings:
            lines.append(f"| {k} | {f['n']} | {f['p50']:.2f} | {f['p99']:.2f} | {f['max']:.2f} |")
    if res.get("string_table_cold_build_ms"):
        lines += ["", "Cold build of a free string's first token table (no memory or disk cache): " + ", ".join(
            f"{v} {ms} ms" for v, ms in res["string_table_cold_build_ms"].items()) + "."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from ..baselines.xgrammar import xgrammar_version
    res = run_masks(args.per_size, args.calendar, args.meeting, args.bfcl, args.note, progress=True)
    res["machine"] = f"{platform.machine()}, {platform.python_version()}, 2-core CPU"
    res["command"] = (f"factorspec bench masks --per-size {args.per_size} --calendar {args.calendar} "
                      f"--meeting {args.meeting} --bfcl {args.bfcl} --note {args.note}")
    res["bench_note"] = getattr(args, "bench_note", None) or ""
    res["xgrammar"] = xgrammar_version()
    from .. import _native
    res["build"] = _native.BUILD  # the per-token path compiled (setup.py) or its Python sources
    write_report(args, "masks", res, report_md(res))
    return 0
