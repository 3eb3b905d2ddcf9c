"""``factorspec bench solve``: field-open latency and certain share per backend and workload.

For each problem: compile the declaration (with what depends only on it: the objective's optimum and the backend's
encoding, which a server's compile cache keeps), open a session, ``prepare()`` it (the root pass over narrow
fields, which a server runs while the prompt is prefilled), then walk the gold record in record order: on entering
each field, time what the decoder asks when its slot opens (:func:`open_field`), note whether it is certain, check
that the gold value is admitted (untimed), assign it.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import BackendUnsupported
from ..session import WIDE_DOMAIN, Session, choose_backend, make_backend
from ..spec import Spec, _get
from ..tokenmap.layout import field_matcher, open_slot
from . import summary_ms

# backend -> workload groups it runs on (csp evaluates Python checks per tuple: teaching-sized problems only)
CSP_TRIP_MAX_CITIES = 5


def _problems(args: argparse.Namespace) -> Iterator[tuple[str, Callable[[], Spec], dict[str, Any]]]:
    from ..workloads import calendar, meeting, trip
    per: dict[int, int] = {}
    for ex in trip.examples():
        n = trip.num_cities(ex)
        if per.get(n, 0) >= args.per_size:
            continue
        per[n] = per.get(n, 0) + 1
        prompt = trip.problem(ex)
        yield f"trip-{n}", (lambda prompt=prompt: trip.declaration(prompt)), trip.gold_record(ex)
    for k, ex in enumerate(calendar.examples()):
        if k >= args.calendar:
            break
        prompt = calendar.problem(ex)
        yield "calendar", (lambda prompt=prompt: calendar.declaration(prompt)), calendar.gold_record(ex)
    for k, ex in enumerate(meeting.examples()):
        if k >= args.meeting:
            break
        prob = meeting.problem(ex)
        yield "meeting", (lambda prob=prob: meeting.declaration(prob)), meeting.gold_record(ex)


def _runs_on(backend: str, group: str) -> bool:
    if backend != "csp":
        return True
    if group.startswith("trip-"):
        return int(group.split("-")[1]) <= CSP_TRIP_MAX_CITIES
    return group == "calendar"


def compile_backends(spec: Spec) -> None:
    """What a declaration's first session would otherwise build: the objective's optimum, the SAT encoding (where
    it fits) and the CP-SAT model, each cached on the spec and shared by its sessions. A server's compile cache
    holds them, as it holds the layout."""
    choose_backend(spec, None, spec.active_instances)
    make_backend(spec, "cpsat", spec.active_instances).close()


def wide_matchers(session: Session) -> dict[str, Any]:
    """The slot matcher of each wide field (as the decoder's layout holds them: one per domain, built with the
    declaration's layout, not per walk)."""
    by_domain: dict[Any, Any] = {}
    out = {}
    for p, f in session.spec.fields.items():
        if session.wide(p):
            m = by_domain.get(f.values)
            out[p] = by_domain[f.values] = m if m is not None else field_matcher(f)
    return out


def open_field(session: Session, path: str, matchers: dict[str, Any]) -> tuple[bool, Any]:
    """What the decoder asks when a field's slot opens, and whether the field is certain then. A narrow field:
    ``admissible(path)``, the list the layout filter takes. A wide one (:meth:`Session.wide`): the questions the
    certain-run planner asks at the slot's start (:func:`~factorspec_cp.tokenmap.layout.open_slot`: the bytes every
    admissible value starts with, then which next bytes are admissible where they branch), not a full list."""
    if not session.wide(path) or path in session.assignment:
        adm = session.admissible(path)
        return len(adm) == 1, adm
    m = matchers.get(path)
    if m is None:
        m = matchers[path] = field_matcher(session.spec.fields[path])
    _, nxt, whole = open_slot(m, session.questions(path))
    return not nxt and whole, None


def walk(spec: Spec, gold: dict[str, Any], backend: str | None) -> dict[str, Any]:
    """One gold walk: set-up seconds, per-field open seconds, certain flags, and gold admission failures."""
    gc.collect()  # between problems, so one problem's garbage is not collected inside the next one's timings
    t0 = time.perf_counter()
    session = spec.session(backend)
    session.prepare()
    setup = time.perf_counter() - t0
    opens, certain, misses = [], 0, []
    matchers = wide_matchers(session)
    for path in spec.fields:
        value = _get(gold, path)
        t = time.perf_counter()
        sure, adm = open_field(session, path, matchers)
        opens.append(time.perf_counter() - t)
        certain += sure
        if not (value in adm if adm is not None else session.any_admissible(path, [value])):
            misses.append(path)
            break
        session.assign(path, value)
    out = {"backend": session.backend, "setup": setup, "opens": opens, "certain": certain,
           "fields": len(spec.fields), "misses": misses, "incomplete": session.stats.incomplete}
    session.close()
    return out


def run(args: argparse.Namespace) -> int:
    backends = [b for b in args.backends.split(",") if b]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: dict[tuple[str, str], str] = {}
    problems = list(_problems(args))
    t_start = time.time()
    for k, (group, make, gold) in enumerate(problems):
        t = time.perf_counter()
        spec = make()
        compile_backends(spec)
        compile_s = time.perf_counter() - t
        for backend in ["default", *backends]:
            if backend != "default" and not _runs_on(backend, group):
                continue
            try:
                r = walk(spec, gold, None if backend == "default" else backend)
            except BackendUnsupported as e:
                skipped.setdefault((group, backend), str(e).split(";")[0])
                continue
            row = rows.setdefault((group, backend), {"problems": 0, "setup": [], "opens": [], "certain": 0,
                                                     "fields": 0, "misses": 0, "incomplete": 0, "chosen": {},
                                                     "compile": []})
            row["problems"] += 1
            row["setup"].append(r["setup"])
            row["compile"].append(compile_s)
            row["opens"].extend(r["opens"])
            row["certain"] += r["certain"]
            row["fields"] += r["fields"]
            row["misses"] += len(r["misses"])
            row["incomplete"] += r["incomplete"]
            row["chosen"][r["backend"]] = row["chosen"].get(r["backend"], 0) + 1
        print(f"\r[bench solve] {k + 1}/{len(problems)} {group:<10} {time.time() - t_start:6.1f}s", end="",
              file=sys.stderr, flush=True)
    print(file=sys.stderr)
    results = []
    for (group, backend), row in rows.items():
        results.append({"workload": group, "backend": backend, "problems": row["problems"],
                        "default_choice": row["chosen"] if backend == "default" else None,
                        "field_open_ms": summary_ms(row["opens"]), "setup_ms": summary_ms(row["setup"]),
                        "compile_ms": summary_ms(row["compile"]),
                        "certain_share": round(row["certain"] / max(1, row["fields"]), 4),
                        "gold_not_admitted": row["misses"], "incomplete_probes": row["incomplete"]})
    doc = {"suite": "solve", "command": "factorspec bench solve " + " ".join(sys.argv[3:]),
           "machine": {"platform": platform.platform(), "python": platform.python_version(),
                       "processor": platform.processor() or platform.machine()},
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results,
           "skipped": [{"workload": g, "backend": b, "reason": why} for (g, b), why in skipped.items()],
           "notes": "field_open_ms: on entering each field along the gold record, after session set-up, what the "
                    "decoder asks when its slot opens: admissible(field) for a field of at most "
                    f"{WIDE_DOMAIN} values; for a wider one the certain-run planner's first questions (the bytes "
                    "every admissible value starts with, then which next bytes are admissible where they branch; "
                    "no full admissible list). The gold value's admission check is not timed. setup_ms: session "
                    "creation + prepare() (the root pass over narrow fields, run once per request while the prompt "
                    "is prefilled). compile_ms: the declaration, its objective's optimum, its SAT encoding and CP-SAT "
                    "model (what a compile cache keeps). certain_share: fields certain on entering them. csp runs on "
                    "trip <= 5 cities and calendar only. The garbage collector runs between walks (gc.collect()), not "
                    "inside them."}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "solve.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "solve.md").write_text(markdown(doc))
    print(markdown(doc))
    return 1 if any(r["gold_not_admitted"] for r in results) else 0


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# bench solve", "", f"`{doc['command']}` on {doc['machine']['platform']} ({doc['date']}).", "",
             doc["notes"], "",
             "| workload | backend | problems | field open p50 ms | p99 ms | max ms | set-up p50 ms | set-up p99 ms "
             "| certain share | default picks |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    order = {"default": 0, "sat": 1, "cpsat": 2, "csp": 3}
    for r in sorted(doc["results"], key=lambda r: (_group_key(r["workload"]), order.get(r["backend"], 9))):
        f, s = r["field_open_ms"], r["setup_ms"]
        picks = ", ".join(f"{k} {v}" for k, v in (r["default_choice"] or {}).items())
        lines.append(f"| {r['workload']} | {r['backend']} | {r['problems']} | {f.get('p50')} | {f.get('p99')} | "
                     f"{f.get('max')} | {s.get('p50')} | {s.get('p99')} | {r['certain_share']:.3f} | {picks} |")
    for sk in doc.get("skipped", []):
        lines.append(f"| {sk['workload']} | {sk['backend']} | skipped: {sk['reason']} | | | | | | | |")
    return "\n".join(lines) + "\n"


def _group_key(g: str) -> tuple[int, int]:
    if g.startswith("trip-"):
        return (0, int(g.split("-")[1]))
    return ({"calendar": 1, "meeting": 2}.get(g, 3), 0)
