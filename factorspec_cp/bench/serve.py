"""``factorspec bench serve --engine vllm``: a real ``vllm serve`` on loopback, factorspec against XGrammar.

Same vLLM build, same model (SmolLM2-135M-Instruct, float32, CPU), same problems, one run. Configurations:

- ``xgrammar``: the schema alone (no ``x-factorspec``) under vLLM's XGrammar backend, no speculation;
- ``xgrammar+ngram``: the same with vLLM's own n-gram speculation at its best shape (searched on trip problems);
- ``ours``: the declaration under factorspec's masks, drafts and certain tails off (per-request ``vllm_xargs``);
- ``ours+certain``: the declaration, certain runs as drafts, certain tails written without a forward pass;
- ``ours+hybrid``: the same, plus the n-gram lookup draft (the searched shape) where nothing is certain.

Every server runs factorspec's scheduler subclass, which counts (request, forward pass) pairs and output tokens for
every request alike (accept length = tokens / forward passes of a request) and, for factorspec requests, the seconds
factorspec spends on the engine-core thread. Each workload runs at 1, 4 and 8 requests in flight (client threads);
tokens/s, records/s and valid records/s are over the wall time of that batch; every record is judged by the
workload's own checker. Writes ``serve_vllm.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import percentile

WORKLOADS = ("trip", "calendar", "meeting", "tool-calls", "trip+note")
CONFIGS = ("xgrammar", "xgrammar+ngram", "ours", "ours+certain", "ours+hybrid")
SHAPES = ((1, 3, 8), (2, 4, 8), (3, 5, 16))  # vLLM ngram: prompt_lookup_min, prompt_lookup_max, tokens
SCHEDULER = ["--scheduler-cls", "factorspec_cp.engine.vllm.Scheduler"]
NO_DRAFTS = {"factorspec_drafts": False, "factorspec_tail": False, "factorspec_lookup": False}
XARGS = {"ours": NO_DRAFTS, "ours+certain": {"factorspec_lookup": False}, "ours+hybrid": None}


def problems(workload: str, n: int) -> list[Any]:
    from .generate import bfcl_problems, calendar_problems, meeting_problems, trip_problems
    return {"trip": lambda: trip_problems(n), "calendar": lambda: calendar_problems(n),
            "meeting": lambda: meeting_problems(n), "tool-calls": lambda: bfcl_problems(n),
            "trip+note": lambda: trip_problems(n, note=True)}[workload]()


def _stats(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def _run_batch(server: Any, probs: list[Any], config: str, concurrency: int, stats: str,
               max_tokens: int) -> dict[str, Any]:
    from ..engine.run import SYSTEM

    def one(p: Any) -> dict[str, Any]:
        ours = config.startswith("ours")
        schema = p.spec.to_json() if ours else p.spec.schema
        t = time.perf_counter()
        status, body = server.chat(p.prompt, schema=schema, system=SYSTEM, max_tokens=max_tokens,
                                   xargs=XARGS.get(config))
        dt = time.perf_counter() - t
        if status != 200:
            return {"key": p.key, "status": status, "error": str(body)[:300], "seconds": dt, "tokens": 0,
                    "valid": False, "text": ""}
        choice = body["choices"][0]
        text = choice["message"]["content"] or ""
        try:
            rec = json.loads(text)
            problems_found = p.check(rec)
        except ValueError:
            problems_found = ["not JSON"]
        return {"key": p.key, "status": status, "seconds": dt, "tokens": body["usage"]["completion_tokens"],
                "finish": choice["finish_reason"], "valid": not problems_found, "problems": problems_found[:2],
                "text": text}

    time.sleep(0.5)
    before = _stats(stats)
    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        rows = list(pool.map(one, probs))
    wall = time.perf_counter() - t
    time.sleep(1.0)  # the scheduler writes its stats when it runs dry
    after = _stats(stats)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("seconds", "request_steps", "tokens", "steps",
                                                           "draft_tokens", "tail_tokens")}
    lat = [r["seconds"] for r in rows]
    tokens = sum(r["tokens"] for r in rows)
    valid = sum(r["valid"] for r in rows)
    return {"config": config, "concurrency": concurrency, "n": len(rows), "wall_seconds": round(wall, 3),
            "tokens_per_second": round(tokens / wall, 3), "records_per_second": round(len(rows) / wall, 4),
            "valid_records_per_second": round(valid / wall, 4), "valid": valid, "tokens": tokens,
            "accept_length": round(d["tokens"] / d["request_steps"], 3) if d["request_steps"] else None,
            "latency_p50": round(percentile(lat, 50), 3), "latency_p99": round(percentile(lat, 99), 3),
            "factorspec_ms_per_step": round(d["seconds"] / d["steps"] * 1e3, 3) if d["steps"] else None,
            "engine_steps": d["steps"], "tail_tokens": d["tail_tokens"], "draft_tokens": d["draft_tokens"],
            "rows": rows}


def _server(name: str, stats: str, log_dir: Path, num_spec: int, ngram: tuple[int, int, int] | None) -> Any:
    from ..engine.serve import Server
    args = ["--num-speculative-tokens", str(num_spec)]
    if num_spec and ngram is not None:
        args += ["--ngram", f"{ngram[0]}:{ngram[1]}"]
    if num_spec == 0:
        extra = list(SCHEDULER)
        if ngram is not None:
            lo, hi, k = ngram
            extra += ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k,
                                                          "prompt_lookup_min": lo, "prompt_lookup_max": hi})]
        args += ["--", *extra]
    return Server(args=args, env={"FACTORSPEC_VLLM_STATS": stats}, log=str(log_dir / f"{name}.log"), timeout=900)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "engine", "vllm") != "vllm":
        raise SystemExit("bench serve: only --engine vllm is supported")
    import vllm

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = args.problems
    workloads = [w for w in (args.workloads or ",".join(WORKLOADS)).split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}: one of {', '.join(WORKLOADS)}")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    probs = {w: problems(w, n if w != "meeting" else max(1, min(n, args.meeting_problems))) for w in workloads}
    tmp = Path(tempfile.mkdtemp(prefix="factorspec-bench-serve-"))
    res: dict[str, Any] = {"suite": "serve", "engine": "vllm", "vllm": vllm.__version__,
                           "command": " ".join(sys.argv), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                           "note": args.bench_note, "model": "SmolLM2-135M-Instruct (float32, CPU)",
                           "max_tokens": args.max_tokens, "num_speculative_tokens": args.num_spec,
                           "problems": {w: len(p) for w, p in probs.items()}, "results": [], "shape_search": []}

    def log(msg: str) -> None:
        print(f"[bench serve {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def measure(server: Any, config: str, stats: str, only: list[str] | None = None) -> None:
        for w in only or workloads:
            for c in concurrencies:
                r = _run_batch(server, probs[w], config, c, stats, args.max_tokens)
                r["workload"] = w
                res["results"].append(r)
                log(f"{config:15s} {w:10s} x{c}: {r['records_per_second']:.3f} rec/s, valid {r['valid']}/{r['n']}, "
                    f"accept {r['accept_length']}")
                _write(res, out)

    # 1. n-gram shape search on trip problems, one request in flight
    search = problems("trip", args.search)
    best, best_rate = SHAPES[0], -1.0
    for shape in SHAPES if args.ngram is None else ():
        stats = str(tmp / f"ngram-{'-'.join(map(str, shape))}.json")
        log(f"starting vLLM with ngram {shape}")
        with _server(f"ngram-{'-'.join(map(str, shape))}", stats, tmp, 0, shape) as s:
            r = _run_batch(s, search, "xgrammar+ngram", 1, stats, args.max_tokens)
        res["shape_search"].append({"shape": list(shape), "records_per_second": r["records_per_second"],
                                    "accept_length": r["accept_length"]})
        log(f"ngram {shape}: {r['records_per_second']:.3f} rec/s, accept {r['accept_length']}")
        if r["records_per_second"] > best_rate:
            best, best_rate = shape, r["records_per_second"]
    if args.ngram is not None:
        best = tuple(int(x) for x in args.ngram.split(":"))  # type: ignore[assignment]
    res["ngram_shape"] = list(best)

    # 2. the four configurations, one server each (ours and ours+certain share one)
    for name, num_spec, ngram, configs in (("xgrammar", 0, None, ["xgrammar"]),
                                           ("xgrammar-ngram", 0, best, ["xgrammar+ngram"]),
                                           ("factorspec", args.num_spec, best, ["ours", "ours+certain",
                                                                                "ours+hybrid"])):
        stats = str(tmp / f"{name}.json")
        log(f"starting vLLM for {', '.join(configs)}")
        with _server(name, stats, tmp, num_spec, ngram) as s:
            for cfg in configs:
                measure(s, cfg, stats)
    res["agreement"] = _agreement(res["results"])
    _write(res, out)
    log(f"wrote {out / 'serve_vllm.md'}")
    return 0


def _agreement(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Greedy outputs of ours+certain and ours+hybrid against ours (no drafts), same workload and concurrency."""
    by = {(r["config"], r["workload"], r["concurrency"]): r for r in results}
    same = total = 0
    for (cfg, w, c), r in by.items():
        if cfg not in ("ours+certain", "ours+hybrid") or ("ours", w, c) not in by:
            continue
        base = {x["key"]: x["text"] for x in by[("ours", w, c)]["rows"]}
        for x in r["rows"]:
            total += 1
            same += base.get(x["key"]) == x["text"]
    return {"identical": same, "of": total}


def _write(res: dict[str, Any], out: Path) -> None:
    (out / "serve_vllm.json").write_text(json.dumps(res, indent=1, ensure_ascii=False))
    (out / "serve_vllm.md").write_text(report_md(res))
    try:
        _plot(res, out / "serve_vllm.png")
    except Exception as e:  # a plot must not lose the figures; say why it is missing
        print(f"bench serve: no plot ({e})", file=sys.stderr)


def report_md(res: dict[str, Any]) -> str:
    lines = [f"# vLLM {res['vllm']} serving factorspec declarations (`factorspec bench serve --engine vllm`)", "",
             f"{res['model']}, {res['machine']}; max_tokens {res['max_tokens']}, certain-run draft cap "
             f"{res['num_speculative_tokens']}; XGrammar + n-gram at its best shape "
             f"`{res.get('ngram_shape')}` (prompt_lookup_min, max, tokens).", "",
             f"Command: `{res['command']}`. {res.get('note') or ''}", "",
             "accept = output tokens per forward pass of a request (certain tails count as tokens without a pass); "
             "fs ms/step = factorspec's time on the engine-core thread per engine step.", ""]
    if res.get("shape_search"):
        lines += ["n-gram shape search (trip, 1 in flight): " + ", ".join(
            f"`{s['shape']}` {s['records_per_second']:.3f} rec/s (accept {s['accept_length']})"
            for s in res["shape_search"]), ""]
    by = {(r["config"], r["workload"], r["concurrency"]): r for r in res["results"]}
    for w in WORKLOADS:
        rows = [r for r in res["results"] if r["workload"] == w]
        if not rows:
            continue
        lines += [f"## {w} ({res['problems'].get(w)} problems)", "",
                  "| config | in flight | tokens/s | records/s | valid rec/s | valid | accept | p50 s | p99 s "
                  "| fs ms/step |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(rows, key=lambda r: (CONFIGS.index(r["config"]), r["concurrency"])):
            lines.append(f"| {r['config']} | {r['concurrency']} | {r['tokens_per_second']} | "
                         f"{r['records_per_second']} | {r['valid_records_per_second']} | {r['valid']}/{r['n']} | "
                         f"{r['accept_length']} | {r['latency_p50']} | {r['latency_p99']} | "
                         f"{r['factorspec_ms_per_step'] if r['config'].startswith('ours') else ''} |")
        ratios = []
        for c in sorted({r["concurrency"] for r in rows}):
            b = by.get(("xgrammar+ngram", w, c))
            parts = [f"{cfg} {by[(cfg, w, c)]['records_per_second'] / b['records_per_second']:.2f}x"
                     for cfg in ("ours+certain", "ours+hybrid") if b and b["records_per_second"] and (cfg, w, c) in by]
            if parts:
                ratios.append(f"{c} in flight: " + ", ".join(parts))
        if ratios:
            lines += ["", "records/s against XGrammar + best n-gram: " + "; ".join(ratios)]
        lines.append("")
    ag = res.get("agreement")
    if ag:
        lines += [f"Greedy agreement: ours+certain and ours+hybrid wrote the same text as ours without drafts in "
                  f"{ag['identical']} "
                  f"of {ag['of']} requests.", ""]
    return "\n".join(lines)


def _plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = [w for w in WORKLOADS if any(r["workload"] == w for r in res["results"])]
    fig, axes = plt.subplots(1, len(ws), figsize=(4 * len(ws), 3.6), squeeze=False)
    for ax, w in zip(axes[0], ws):
        for cfg in CONFIGS:
            rows = sorted((r for r in res["results"] if r["workload"] == w and r["config"] == cfg),
                          key=lambda r: r["concurrency"])
            if rows:
                ax.plot([r["concurrency"] for r in rows], [r["valid_records_per_second"] for r in rows], "o-",
                        label=cfg)
        ax.set_title(w)
        ax.set_xlabel("requests in flight")
        ax.set_ylabel("valid records / s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
