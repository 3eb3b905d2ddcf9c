"""``factorspec bench service``: the engine thread's constraint time per step, in-process and with constraint workers,
against XGrammar's matcher on the same token streams, at 8, 64 and 128 requests in flight.

A server's step loop is replayed without a model. Each request writes its gold record (trip, calendar, meeting, tool
calls, in turn) as the canonical token stream our decoder writes; a step takes, per request, its certain run (at most
``cap`` tokens) plus the next token, as a drafted verify step that accepts every certain token would. In each step the
engine thread calls, for every request, ``accept`` (the previous step's tokens) and ``certain_run`` (the draft, an
input of the forward pass); then the forward pass runs, stood for by a sleep of ``--forward-ms`` during which the
engine thread does nothing (the workers may compute); then ``fill`` (the mask rows, which apply to its logits, into
one batch bitmask). XGrammar's matcher (in-process,
the same schema without relations, our separators) takes the same tokens in the same steps and fills the same rows; it
has no certain runs. Timed: the engine thread's seconds in these calls per step (p50, p99, mean), and host CPU seconds
per record token (the engine thread's process plus every worker process, from /proc). Every record is checked at the
end: each request's grammar has terminated on the gold record. Writes ``benchmarks/service.json`` and ``service.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import summary_ms, write_report


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc (0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def streams(vocab: Any, per_workload: int) -> list[tuple[str, Any, list[int], list[bool], Any]]:
    """(group, declaration, gold token stream, whether each token was certain, gold record) for ``per_workload``
    problems of each workload."""
    from ..workloads import bfcl, calendar, meeting
    from .generate import trip_problems
    from .masks import gold_walk

    items: list[tuple[str, Any, Any]] = []
    items += [("trip", p.spec, p.gold) for p in trip_problems(per_workload)]
    for k, ex in enumerate(calendar.examples()):
        if k >= per_workload:
            break
        items.append(("calendar", calendar.declaration(calendar.problem(ex)), calendar.gold_record(ex)))
    for k, ex in enumerate(meeting.examples()):
        if k >= per_workload:
            break
        items.append(("meeting", meeting.declaration(ex), meeting.gold_record(ex)))
    items += [("tool-call", bfcl.declaration(p), bfcl.gold_records(p)[0]) for p in bfcl.problems()[1:1 + per_workload]]
    out = []
    for group, spec, gold in items:
        walk = gold_walk(spec, vocab, gold)
        out.append((group, spec, walk["tokens"], walk["certain"], gold))
    return out


def step_groups(tokens: list[int], certain: list[bool], cap: int) -> list[list[int]]:
    """The tokens each verify step commits: a run of certain tokens (at most ``cap``) and the token after it."""
    groups, i = [], 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and certain[j] and j - i < cap:
            j += 1
        groups.append(tokens[i:j + 1])
        i = j + 1
    return groups


def replay(grammars: list[Any], plans: list[list[list[int]]], words: int, forward_s: float, cap: int,
           drafts: bool, pids: list[int]) -> dict[str, Any]:
    """The step loop over ``grammars``; returns engine-thread seconds per step and host CPU seconds."""
    bitmask = np.zeros((len(grammars), words), dtype=np.int32)
    steps: list[float] = []
    cpu0 = time.process_time() + sum(_proc_cpu(p) for p in pids)
    wall0 = time.perf_counter()
    k = 0
    live = list(range(len(grammars)))
    while live:
        t0 = time.perf_counter()
        if k:  # the tokens the previous step committed
            for i in live:
                if not grammars[i].accept(plans[i][k - 1]):
                    raise AssertionError(f"request {i} refused its gold tokens at step {k}")
        live = [i for i in live if k < len(plans[i])]
        if drafts:  # the draft is the forward pass's input: asked before it
            for i in live:
                grammars[i].certain_run(cap)
        t1 = time.perf_counter()
        time.sleep(forward_s)  # the forward pass: the masks apply to its logits, so they are asked after it
        t2 = time.perf_counter()
        for i in live:
            grammars[i].fill(bitmask, i)
        steps.append((t1 - t0) + (time.perf_counter() - t2))
        k += 1
    wall = time.perf_counter() - wall0
    cpu = time.process_time() + sum(_proc_cpu(p) for p in pids) - cpu0
    return {"steps": steps, "cpu": cpu, "wall": wall}


def run_service(flights: list[int], workers: list[int], forward_ms: float, cap: int, per_workload: int,
                progress: bool = False) -> dict[str, Any]:
    from ..baselines.xgrammar import XGrammarMatcher
    from ..engine.grammar import Grammar, GrammarCompiler
    from ..tokenmap import Vocabulary
    from ..tokenmap.decoder import mask_words

    vocab = Vocabulary.smollm2()
    words = mask_words(vocab.size)
    data = streams(vocab, per_workload)
    rows: list[dict[str, Any]] = []
    for flight in flights:
        picked = [data[i % len(data)] for i in range(flight)]
        random.Random(flight).shuffle(picked)  # requests reach workers in turn: no workload lands on one of them
        plans = [step_groups(toks, cert, cap) for _, _, toks, cert, _ in picked]
        n_tokens = sum(len(toks) for _, _, toks, _, _ in picked)
        configs: list[tuple[str, int]] = [("xgrammar", 0)] + [("factorspec", w) for w in workers]
        for name, w in configs:
            if progress:
                print(f"\r  service: {flight} in flight, {name} {w} workers      ", end="", file=sys.stderr,
                      flush=True)
            t = time.perf_counter()
            compiler = None
            if name == "xgrammar":
                grammars = [Grammar(XGrammarMatcher(spec.schema, vocab)) for _, spec, _, _, _ in picked]
                pids: list[int] = []
            else:
                compiler = GrammarCompiler(vocab, workers=w)
                grammars = [compiler.compile(spec).grammar() for _, spec, _, _, _ in picked]
                pids = [p.pid for p in compiler.service().workers] if w else []
            opened = time.perf_counter() - t
            try:
                res = replay(grammars, plans, words, forward_ms / 1e3, cap, name != "xgrammar", pids)
                for g, (_, _, _, _, gold) in zip(grammars, picked):
                    if not g.is_terminated() or (name != "xgrammar" and g.record() != gold):
                        raise AssertionError(f"{name}/{w}: a request did not end on its gold record")
            finally:
                for g in grammars:
                    close = getattr(g, "close", None)
                    if close is not None:
                        close()
                if compiler is not None:
                    compiler.close()
            steps = res["steps"]
            rows.append({"in_flight": flight, "engine": name, "workers": w, "steps": len(steps),
                         "tokens": n_tokens, "step_ms": summary_ms(steps),
                         "cpu_us_per_token": round(res["cpu"] / n_tokens * 1e6, 2),
                         "open_s": round(opened, 3), "wall_s": round(res["wall"], 3)})
    if progress:
        print(file=sys.stderr)
    for r in rows:
        base = next(x for x in rows if x["in_flight"] == r["in_flight"] and x["engine"] == "xgrammar")
        r["step_ratio_mean"] = (round(r["step_ms"]["mean"] / base["step_ms"]["mean"], 2) if base["step_ms"]["mean"]
                                else None)
        r["step_ratio_p99"] = round(r["step_ms"]["p99"] / base["step_ms"]["p99"], 2) if base["step_ms"]["p99"] else None
    groups: dict[str, int] = {}
    for g, *_ in data:
        groups[g] = groups.get(g, 0) + 1
    return {"rows": rows, "problems": groups, "forward_ms": forward_ms, "cap": cap}


def report_md(res: dict[str, Any]) -> str:
    mix = ", ".join(f"{n} {g}" for g, n in res["problems"].items())
    lines = ["# Constraint service: engine-thread time per step, against XGrammar's matcher", "",
             f"Machine: {res.get('machine', '')}. Command: `{res.get('command', '')}`. "
             f"XGrammar {res.get('xgrammar', '')}. {res.get('bench_note', '')}", "",
             f"A step loop without a model over gold token streams ({mix}, repeated up to the number in flight "
             f"and shuffled; the vocabulary of SmolLM2). Each step commits, per request, its certain run (at most "
             f"{res['cap']} tokens) and the next token; the engine thread calls `accept` and `certain_run` (the "
             f"draft, an input of the forward pass) for every request, sleeps {res['forward_ms']} ms for the forward "
             "pass (the workers may compute then), then calls `fill` (the masks apply to its logits). XGrammar's "
             "matcher takes the same tokens in the same steps and fills the same rows, in-process, without certain "
             "runs. *step ms*: the engine thread's seconds in those calls per step; *ratio*: ours / "
             "XGrammar's at the same number in flight; *host CPU*: the engine's process and every worker process, "
             "per record token; *open*: compiling and opening every request (off the step loop in a server).", "",
             "| in flight | engine | workers | steps | step ms p50 / p99 | step ms mean | ratio mean / p99 | "
             "host CPU us/token | open s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        s = r["step_ms"]
        lines.append(f"| {r['in_flight']} | {r['engine']} | {r['workers'] if r['engine'] != 'xgrammar' else ''} | "
                     f"{r['steps']} | {s['p50']:.2f} / {s['p99']:.2f} | {s['mean']:.2f} | "
                     f"{r['step_ratio_mean']} / {r['step_ratio_p99']} | {r['cpu_us_per_token']:.1f} | "
                     f"{r['open_s']:.2f} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from ..baselines.xgrammar import xgrammar_version

    flights = [int(x) for x in str(args.concurrency).split(",") if x.strip()]
    workers = [int(x) for x in str(args.workers).split(",") if x.strip()]
    res = run_service(flights, workers, args.forward_ms, args.num_spec, args.problems, progress=True)
    res["machine"] = f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()}-core CPU"
    res["command"] = (f"factorspec bench service --concurrency {args.concurrency} --workers {args.workers} "
                      f"--forward-ms {args.forward_ms} --num-spec {args.num_spec} --problems {args.problems}")
    res["bench_note"] = getattr(args, "bench_note", None) or ""
    res["xgrammar"] = xgrammar_version()
    write_report(args, "service", res, report_md(res))
    return 0
