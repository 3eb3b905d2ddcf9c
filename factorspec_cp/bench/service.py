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


WORKLOADS = ("trip", "calendar", "meeting", "tool-call")


def streams(vocab: Any, per_workload: int, workloads: tuple[str, ...] = WORKLOADS
            ) -> list[tuple[str, Any, list[int], list[bool], Any]]:
    """(group, declaration, gold token stream, whether each token was certain, gold record) for ``per_workload``
    problems of each of ``workloads``."""
    from ..workloads import bfcl, calendar, meeting
    from .generate import trip_problems
    from .masks import gold_walk

    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        raise ValueError(f"unknown workloads {sorted(unknown)}: choose among {', '.join(WORKLOADS)}")
    items: list[tuple[str, Any, Any]] = []
    if "trip" in workloads:
        items += [("trip", p.spec, p.gold) for p in trip_problems(per_workload)]
    for k, ex in enumerate(calendar.examples() if "calendar" in workloads else ()):
        if k >= per_workload:
            break
        items.append(("calendar", calendar.declaration(calendar.problem(ex)), calendar.gold_record(ex)))
    for k, ex in enumerate(meeting.examples() if "meeting" in workloads else ()):
        if k >= per_workload:
            break
        items.append(("meeting", meeting.declaration(ex), meeting.gold_record(ex)))
    if "tool-call" in workloads:
        items += [("tool-call", bfcl.declaration(p), bfcl.gold_records(p)[0])
                  for p in bfcl.problems()[1:1 + per_workload]]
    out = []
    for group, spec, gold in items:
        walk = gold_walk(spec, vocab, gold)
        out.append((group, spec, walk["tokens"], walk["certain"], gold))
    return out


def gold_draft(tokens: list[int], certain: list[bool], pos: int, cap: int) -> list[int]:
    """The certain run of the gold stream at ``pos`` (at most ``cap`` tokens): the draft an oracle drafter gives
    XGrammar, the same our in-process grammars give."""
    j = pos
    while j < len(tokens) and certain[j] and j - pos < cap:
        j += 1
    return tokens[pos:j]


def replay(grammars: list[Any], streams: list[tuple[list[int], list[bool]]], words: int, forward_s: float, cap: int,
           own_drafts: bool, pids: list[int]) -> dict[str, Any]:
    """The step loop over ``grammars``, each request writing its gold token stream. A step: the engine thread takes
    the tokens the last step committed (``accept``) and each request's draft (``certain_run``, or with
    ``own_drafts`` false the gold stream's certain run: an oracle drafter's, for XGrammar); the forward pass (a
    sleep); then the masks its logits need: the row at the current position and, past a draft, the row where the
    token after it is sampled (``accept`` the draft, ``fill``, ``rollback``: what vLLM's scheduler does for a
    verified draft; the rows inside a canonical draft are its tokens). The step commits the draft and the next gold
    token. Returns the engine thread's seconds per step, the tokens drafted, host CPU seconds."""
    n = len(grammars)
    cur = np.zeros((n, words), dtype=np.int32)
    after = np.zeros((n, words), dtype=np.int32)
    pos = [0] * n
    commit: list[list[int]] = [[] for _ in range(n)]
    steps: list[float] = []
    drafted = 0
    cpu0 = time.process_time() + sum(_proc_cpu(p) for p in pids)
    wall0 = time.perf_counter()
    live = list(range(n))
    while live:
        t0 = time.perf_counter()
        for i in live:
            if commit[i] and not grammars[i].accept(commit[i]):
                raise AssertionError(f"request {i} refused its gold tokens at {pos[i]}")
        live = [i for i in live if pos[i] < len(streams[i][0])]
        if not live:
            steps.append(time.perf_counter() - t0)
            break
        if own_drafts:
            drafts = {i: grammars[i].certain_run(cap) for i in live}
            t1 = time.perf_counter()
        else:  # an oracle's drafts: not the grammar's time
            t1 = time.perf_counter()
            drafts = {i: gold_draft(*streams[i], pos[i], cap) for i in live}
        time.sleep(forward_s)  # the forward pass: the masks apply to its logits, so they are asked after it
        t2 = time.perf_counter()
        for i in live:
            g, d = grammars[i], drafts[i]
            g.fill(cur, i)
            if d:
                if not g.accept(d):
                    raise AssertionError(f"request {i} refused its own draft at {pos[i]}")
                g.fill(after, i)
                g.rollback(len(d))
        end = time.perf_counter()
        steps.append((t1 - t0) + (end - t2))
        for i in live:  # the verify step accepts the draft (the gold writes it) and the gold token after it
            toks, d = streams[i][0], drafts[i]
            if toks[pos[i]:pos[i] + len(d)] != d:
                raise AssertionError(f"request {i}: the draft at {pos[i]} is not the gold stream's")
            commit[i] = toks[pos[i]:pos[i] + len(d) + 1]
            pos[i] += len(commit[i])
            drafted += len(d)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() + sum(_proc_cpu(p) for p in pids) - cpu0
    return {"steps": steps, "cpu": cpu, "wall": wall, "drafted": drafted}


def run_service(flights: list[int], workers: list[int], forward_ms: float, cap: int, per_workload: int,
                waits: list[float | None] | None = None, progress: bool = False,
                workloads: tuple[str, ...] = WORKLOADS) -> dict[str, Any]:
    from ..baselines.xgrammar import XGrammarMatcher
    from ..engine.grammar import Grammar, GrammarCompiler
    from ..tokenmap import Vocabulary
    from ..tokenmap.decoder import mask_words

    vocab = Vocabulary.smollm2()
    words = mask_words(vocab.size)
    data = streams(vocab, per_workload, workloads)
    waits = [None] if waits is None else waits
    rows: list[dict[str, Any]] = []
    for flight in flights:
        picked = [data[i % len(data)] for i in range(flight)]
        random.Random(flight).shuffle(picked)  # requests reach workers in turn: no workload lands on one of them
        gold = [(toks, cert) for _, _, toks, cert, _ in picked]
        n_tokens = sum(len(toks) for toks, _ in gold)
        configs: list[tuple[str, int, float | None]] = [("xgrammar", 0, None)]
        for w in workers:
            configs += [("factorspec", w, None)] if w == 0 else [("factorspec", w, x) for x in waits]
        for name, w, wait in configs:
            if progress:
                print(f"\r  service: {flight} in flight, {name} {w} workers      ", end="", file=sys.stderr,
                      flush=True)
            compiler = None
            if name != "xgrammar":  # a server that has served these declarations before: warm caches in every
                compiler = GrammarCompiler(vocab, workers=w, draft_wait=wait)  # process (the parent's are, from
                warm = [compiler.compile(spec).grammar() for _, spec, _, _, _ in data]  # the gold walks)
                try:
                    replay(warm, [(toks, cert) for _, _, toks, cert, _ in data], words, 0.0, cap, True, [])
                finally:
                    for g in warm:
                        getattr(g, "close", lambda: None)()
            t = time.perf_counter()
            if name == "xgrammar":
                grammars = [Grammar(XGrammarMatcher(spec.schema, vocab)) for _, spec, _, _, _ in picked]
                pids: list[int] = []
            else:
                assert compiler is not None
                grammars = [compiler.compile(spec).grammar() for _, spec, _, _, _ in picked]
                pids = [p.pid for p in compiler.service().workers] if w else []
            scratch = np.zeros((1, words), dtype=np.int32)
            for g in grammars:  # the first row: a server has it computed while the prompt is prefilled
                g.fill(scratch, 0)
            opened = time.perf_counter() - t
            try:
                res = replay(grammars, gold, words, forward_ms / 1e3, cap, name != "xgrammar", pids)
                for g, (_, _, _, _, rec) in zip(grammars, picked):
                    if not g.is_terminated() or (name != "xgrammar" and g.record() != rec):
                        raise AssertionError(f"{name}/{w}: a request did not end on its gold record")
            finally:
                for g in grammars:
                    close = getattr(g, "close", None)
                    if close is not None:
                        close()
                if compiler is not None:
                    compiler.close()
            steps = res["steps"]
            rows.append({"in_flight": flight, "engine": name, "workers": w,
                         "draft_wait_ms": None if wait is None else round(wait * 1e3, 3), "steps": len(steps),
                         "tokens": n_tokens, "drafted": res["drafted"],
                         "tokens_per_step": round(n_tokens / max(1, len(steps)) / flight, 3),
                         "step_ms": summary_ms(steps),
                         "engine_us_per_token": round(sum(steps) / n_tokens * 1e6, 2),
                         "cpu_us_per_token": round(res["cpu"] / n_tokens * 1e6, 2),
                         "open_s": round(opened, 3), "wall_s": round(res["wall"], 3)})
    if progress:
        print(file=sys.stderr)
    for r in rows:
        base = next(x for x in rows if x["in_flight"] == r["in_flight"] and x["engine"] == "xgrammar")
        r["step_ratio_mean"] = (round(r["step_ms"]["mean"] / base["step_ms"]["mean"], 2) if base["step_ms"]["mean"]
                                else None)
        r["step_ratio_p99"] = round(r["step_ms"]["p99"] / base["step_ms"]["p99"], 2) if base["step_ms"]["p99"] else None
        r["token_ratio"] = (round(r["engine_us_per_token"] / base["engine_us_per_token"], 2)
                            if base["engine_us_per_token"] else None)
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
             f"and shuffled; the vocabulary of SmolLM2). Per step and request the engine thread calls `accept` (what "
             f"the last step committed) and takes a draft (at most {res['cap']} tokens: ours from `certain_run`; "
             "XGrammar's from an oracle that knows the gold stream's certain runs, so that both verify the same "
             f"drafts); it sleeps {res['forward_ms']} ms for the forward pass (the workers may compute then); then "
             "it fills the rows the logits need: the current position's and, past a draft, the row where the token "
             "after it is sampled (`accept` the draft, `fill`, `rollback`, as vLLM's scheduler does). The step "
             "commits the draft and the next gold token. With a *draft wait* the step's drafts wait at most that "
             "long (from its first draft to its first row) for their workers: a draft not published by then is "
             "empty (the forward pass goes on, and more steps follow); blank: the engine waits for every draft. "
             "*step ms*: the engine thread's seconds in those calls per step; *ratio*: ours / "
             "XGrammar's at the same number in flight, per step and per record token; *tokens/step*: committed "
             "tokens per request and step; *host CPU*: the engine's process and every worker process, per record "
             "token; *open*: compiling and opening every request and its first row (off the step loop in a server, "
             "during the prefill). Before the timed loop every distinct declaration is written once through the "
             "same grammars (untimed), so that workers start as warm as the engine process, whose caches the gold "
             "walks warmed. Requests of one declaration go to the worker that compiled it while that keeps the "
             "workers' loads within a few requests of each other (`service.AFFINITY_SLACK`).", "",
             "| in flight | engine | workers | draft wait ms | steps | tokens/step | step ms p50 / p99 | "
             "step ms mean | ratio mean / p99 | engine us/token (ratio) | host CPU us/token | open s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        s = r["step_ms"]
        wait = r.get("draft_wait_ms")
        lines.append(f"| {r['in_flight']} | {r['engine']} | {r['workers'] if r['engine'] != 'xgrammar' else ''} | "
                     f"{'' if wait is None else wait} | {r['steps']} | {r['tokens_per_step']} | "
                     f"{s['p50']:.2f} / {s['p99']:.2f} | {s['mean']:.2f} | {r['step_ratio_mean']} / "
                     f"{r['step_ratio_p99']} | {r['engine_us_per_token']:.1f} ({r['token_ratio']}) | "
                     f"{r['cpu_us_per_token']:.1f} | {r['open_s']:.2f} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from ..baselines.xgrammar import xgrammar_version

    flights = [int(x) for x in str(args.concurrency).split(",") if x.strip()]
    workers = [int(x) for x in str(args.workers).split(",") if x.strip()]
    waits = [None if x.strip() in ("", "none") else float(x) / 1e3 for x in str(args.draft_waits).split(",")]
    names = str(getattr(args, "workloads", None) or ",".join(WORKLOADS)).split(",")
    workloads = tuple("tool-call" if x.strip() == "tool-calls" else x.strip() for x in names if x.strip())
    res = run_service(flights, workers, args.forward_ms, args.num_spec, args.problems, waits, progress=True,
                      workloads=workloads)
    res["machine"] = f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()}-core CPU"
    res["command"] = (f"factorspec bench service --concurrency {args.concurrency} --workers {args.workers} "
                      f"--draft-waits {args.draft_waits} --forward-ms {args.forward_ms} --num-spec {args.num_spec} "
                      f"--problems {args.problems} --workloads {','.join(workloads)}")
    res["bench_note"] = getattr(args, "bench_note", None) or ""
    res["xgrammar"] = xgrammar_version()
    name = "service" if set(workloads) == set(WORKLOADS) else "service_" + "-".join(workloads)
    write_report(args, name, res, report_md(res))
    return 0
