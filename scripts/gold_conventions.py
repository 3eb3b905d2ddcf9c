"""What convention does the NATURAL PLAN gold follow? Counts over all 100 meeting and 1,000 calendar problems.

Standalone analysis (issue 12): reads the shared data through the package's workload parsers, uses the package's
solver only for the optimum of today's meeting declaration, and prints tables. Changes nothing.

    .venv/bin/python scripts/gold_conventions.py            # both workloads
    .venv/bin/python scripts/gold_conventions.py meeting    # or: calendar
    .venv/bin/python scripts/gold_conventions.py meeting --no-solver   # skip the CP-SAT cross-check

Meeting: a *sequence* is an ordered list of people met. Its ASAP schedule leaves each place at once, travels the
direct ``dist_matrix`` time, waits only for the friend's window to open, and meets for exactly the minimum:
``start = max(arrival, earliest)``, ``end = start + minimum``. Every tie-break below is evaluated over the
ASAP schedules of all maximum-size feasible sequences (for a monotone objective the ASAP schedule of an order
dominates every other schedule of the same order, so these are the only candidates).
"""

from __future__ import annotations

import copy
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from factorspec_cp.workloads import calendar, meeting
from factorspec_cp.workloads.calendar_parse import parse_prompt

# ------------------------------------------------------------------------------------------------ meeting: gold

_START = re.compile(r"You start at (.+) at (\S+)\.")
_TRAVEL = re.compile(r"You travel to (.+) in (\d+) minutes and arrive at (\S+)\.")
_WAIT = re.compile(r"You wait until (\S+)\.")
_MEET = re.compile(r"You meet (.+) for (\d+) minutes from (\S+) to (\S+)\.")
M = meeting.to_minutes


def gold_steps(ex: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """The gold plan as (kind, fields) steps; every sentence must match one of the four forms."""
    out = []
    for sentence in ex["golden_plan"]:
        s = sentence.strip()
        for kind, rx in (("start", _START), ("travel", _TRAVEL), ("wait", _WAIT), ("meet", _MEET)):
            if (m := rx.fullmatch(s)) is not None:
                out.append((kind, m.groups()))
                break
        else:
            raise ValueError(f"{ex['id']}: unknown gold sentence {s!r}")
    return out


def official_score(ex: dict[str, Any], steps: list[tuple[str, tuple[Any, ...]]]) -> int:
    """The official evaluator's score of a text plan (evaluate_meeting_planning.py, validator_from_text),
    re-stated: direct dist_matrix travel; a wait must move time forward; a meeting advances time by exactly the
    friend's minimum (the plan's own "from X to Y" is ignored); counting stops at the first invalid step."""
    prob = meeting.parse(ex)
    people = {p.name: p for p in prob.people}
    here, now, met, score = prob.start_location, prob.start_time, set(), 0
    for kind, f in steps:
        if kind == "start":
            continue
        if kind == "travel":
            now += int(ex["dist_matrix"][here][f[0]])
            here = f[0]
        elif kind == "wait":
            if M(f[0]) <= now:
                break
            now = M(f[0])
        else:
            p = people.get(f[0])
            if p is None or f[0] in met:
                break
            met.add(f[0])
            if here == p.location and now >= p.earliest and now + p.minimum <= p.latest:
                score, now = score + 1, now + p.minimum
            else:
                break
    return score


def structure(ex: dict[str, Any]) -> dict[str, bool]:
    """Which structural conventions the gold plan follows (each True/False for this problem)."""
    prob = meeting.parse(ex)
    dist, short = ex["dist_matrix"], prob.travel
    people = {p.name: p for p in prob.people}
    steps = gold_steps(ex)
    out = dict.fromkeys(["starts_at_start", "travel_direct", "travel_is_shortest", "arrival_arith",
                         "no_chained_travel", "wait_to_window_open", "wait_only_if_early", "start_asap",
                         "duration_minimum", "stated_minutes_match", "leaves_at_once"], True)
    kind0, f0 = steps[0]
    out["starts_at_start"] = kind0 == "start" and f0[0] == prob.start_location and M(f0[1]) == prob.start_time
    here, now, prev = prob.start_location, prob.start_time, "start"
    for k, (kind, f) in enumerate(steps[1:], 1):
        if kind == "travel":
            dest, mins, arrive = f[0], int(f[1]), M(f[2])
            out["travel_direct"] &= mins == int(dist[here][dest])
            out["travel_is_shortest"] &= mins == short[here][dest]
            out["arrival_arith"] &= arrive == now + mins
            out["no_chained_travel"] &= prev != "travel" and k + 1 < len(steps) and steps[k + 1][0] != "travel"
            out["leaves_at_once"] &= prev in ("start", "meet")
            here, now = dest, arrive
        elif kind == "wait":
            nxt = steps[k + 1] if k + 1 < len(steps) else None
            p = people.get(nxt[1][0]) if nxt and nxt[0] == "meet" else None
            out["wait_to_window_open"] &= p is not None and M(f[0]) == p.earliest
            out["wait_only_if_early"] &= prev == "travel" and M(f[0]) > now
            now = M(f[0])
        elif kind == "meet":
            p = people[f[0]]
            start, end = M(f[2]), M(f[3])
            out["start_asap"] &= start == now and start == max(now, p.earliest) and p.location == here
            out["duration_minimum"] &= end - start == p.minimum
            out["stated_minutes_match"] &= int(f[1]) == end - start
            now = end
        prev = kind
    return out


def gold_sequence(ex: dict[str, Any]) -> tuple[int, ...]:
    """The gold's people as indices into ``constraints`` order, in the order the gold meets them."""
    index = {p.name: k for k, p in enumerate(meeting.parse(ex).people)}
    return tuple(index[f[0]] for kind, f in gold_steps(ex) if kind == "meet")


# ------------------------------------------------------------------------------------- meeting: the candidates

def asap(prob: meeting.MeetingProblem, dist: Any, seq: Sequence[int]) -> list[tuple[int, int, int]] | None:
    """(start, end, travel) of each meeting of ``seq`` under the ASAP schedule, or None when infeasible."""
    here, now, out = prob.start_location, prob.start_time, []
    for k in seq:
        p = prob.people[k]
        go = int(dist[here][p.location]) if here != p.location else 0
        start = max(now + go, p.earliest)
        if start + p.minimum > p.latest:
            return None
        out.append((start, start + p.minimum, go))
        here, now = p.location, start + p.minimum
    return out


def max_sequences(prob: meeting.MeetingProblem, dist: Any) -> tuple[int, list[tuple[int, ...]]]:
    """The largest feasible sequence size and every feasible sequence of that size (DFS, ASAP, pruned)."""
    best, found = 0, []

    def reachable_later(now: int, used: int) -> int:  # people still meetable after ``now`` (an upper bound)
        return sum(1 for k, p in enumerate(prob.people) if not used >> k & 1 and max(now, p.earliest) + p.minimum
                   <= p.latest)

    def dfs(here: str, now: int, used: int, seq: list[int]) -> None:
        nonlocal best, found
        if len(seq) > best:
            best, found = len(seq), []
        if len(seq) == best:
            found.append(tuple(seq))
        if len(seq) + reachable_later(now, used) < best:
            return
        for k, p in enumerate(prob.people):
            if used >> k & 1:
                continue
            start = max(now + (int(dist[here][p.location]) if here != p.location else 0), p.earliest)
            if start + p.minimum <= p.latest:
                seq.append(k)
                dfs(p.location, start + p.minimum, used | 1 << k, seq)
                seq.pop()

    dfs(prob.start_location, prob.start_time, 0, [])
    return best, [s for s in found if len(s) == best]


def skip_greedy_first(prob: meeting.MeetingProblem, dist: Any, best: int) -> tuple[int, ...] | None:
    """Generator hypothesis: try permutations of all people in lexicographic order, each walked greedily
    (meet the next person if the ASAP meeting fits, else skip them); the first whose walk meets ``best``."""
    n = len(prob.people)

    def dfs(here: str, now: int, left: list[int], met: tuple[int, ...]) -> tuple[int, ...] | None:
        if len(met) == best:
            return met
        if len(met) + len(left) < best:
            return None
        for k in left:
            rest = [j for j in left if j != k]
            p = prob.people[k]
            start = max(now + (int(dist[here][p.location]) if here != p.location else 0), p.earliest)
            if start + p.minimum <= p.latest:
                hit = dfs(p.location, start + p.minimum, rest, (*met, k))
            else:
                hit = dfs(here, now, rest, met)
            if hit is not None:
                return hit
        return None

    return dfs(prob.start_location, prob.start_time, list(range(n)), ())


def record_vectors(prob: meeting.MeetingProblem, seq: Sequence[int], sched: list[tuple[int, int, int]]
                   ) -> tuple[list[int], list[int]]:
    """Entry-order (constraints order) start and end minutes of the record; unmet people at the start time."""
    starts = [prob.start_time] * len(prob.people)
    ends = [prob.start_time] * len(prob.people)
    for k, (s, e, _) in zip(seq, sched):
        starts[k], ends[k] = s, e
    return starts, ends


Key = Callable[[meeting.MeetingProblem, tuple[int, ...], list[tuple[int, int, int]]], Any]
TIEBREAKS: dict[str, Key] = {
    # time-order (plan-order) criteria: not linear in the record's fields
    "min last end (finish earliest)": lambda pr, q, s: s[-1][1],
    "lex starts in time order": lambda pr, q, s: tuple(x[0] for x in s),
    "lex ends in time order": lambda pr, q, s: tuple(x[1] for x in s),
    "min total travel": lambda pr, q, s: sum(x[2] for x in s),
    "min total wait": lambda pr, q, s: s[-1][1] - pr.start_time - sum(x[2] for x in s)
    - sum(pr.people[k].minimum for k in q),
    "lex constraint-index sequence (first permutation)": lambda pr, q, s: q,
    # record-level linear criteria (what a declaration objective can say directly)
    "min sum of starts (unmet = start time)": lambda pr, q, s: sum(record_vectors(pr, q, s)[0]),
    "min sum of ends (unmet = start time)": lambda pr, q, s: sum(record_vectors(pr, q, s)[1]),
    "lex starts in entry order (unmet = start time)": lambda pr, q, s: tuple(record_vectors(pr, q, s)[0]),
    "lex starts in entry order, met first (unmet = +inf)":
        lambda pr, q, s: tuple(v if k in q else 10**6 for k, v in enumerate(record_vectors(pr, q, s)[0])),
    "lex meet flags in entry order (meet earlier entries), then sum starts":
        lambda pr, q, s: (tuple(0 if k in q else 1 for k in range(len(pr.people))), sum(x[0] for x in s)),
}


def classify(keys: list[Any], gold_at: int) -> str:
    best = min(keys)
    if keys[gold_at] != best:
        return "not optimal"
    return "unique optimum" if keys.count(best) == 1 else "tied optimum"


def convention_record(ex: dict[str, Any], travel: Any) -> dict[str, Any]:
    """The record the found convention predicts: most people; among the largest feasible sequences the
    lexicographically smallest by constraints index (the first in permutation order); ASAP; minimum durations.
    In the package's record form (clock strings, unmet people at the start time)."""
    prob = meeting.parse(ex)
    _, seqs = max_sequences(prob, travel)
    seq = min(seqs)
    starts, ends = record_vectors(prob, seq, asap(prob, travel, seq))
    return {"meetings": [{"person": p.name, "location": p.location, "meet": k in seq,
                          "start": meeting.to_clock(starts[k]), "end": meeting.to_clock(ends[k])}
                         for k, p in enumerate(prob.people)]}


# ------------------------------------------------------------------ meeting: the proposed declaration, checked

def proposed_levels(ex: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Today's declaration (``times="minutes"``) plus an ``order`` field per entry (1..m: the meeting's place in
    the plan; 0: not met) with the relations that tie it to time, and the three objective levels:
    maximize people met; minimize the constraints-index sequence in plan order (one weighted level, exact:
    digits 1..n in base n+1); minimize the sum of starts and ends (ASAP, minimum durations)."""
    prob = meeting.parse(ex)
    n = len(prob.people)
    doc = copy.deepcopy(meeting.declaration_doc(ex, times="minutes"))
    item = doc["properties"]["meetings"]["items"]
    item["properties"]["order"] = {"type": "integer", "minimum": 0, "maximum": n}
    item["required"].append("order")
    rel = doc["x-factorspec"]["relations"]
    del doc["x-factorspec"]["objective"]

    def f(i: int, key: str) -> str:
        return f"/meetings/{i}/{key}"

    def lin(terms: list[list[Any]], op: str, rhs: int) -> dict[str, Any]:
        return {"kind": "linear", "terms": terms, "op": op, "rhs": rhs}

    def met(i: int, value: bool = True) -> dict[str, Any]:
        return {"field": f(i, "meet"), "op": "==", "value": value}

    every_meet = [[1, f(j, "meet")] for j in range(n)]
    for i in range(n):
        rel.append({"kind": "implies", "if": met(i, False), "then": lin([[1, f(i, "order")]], "==", 0)})
        rel.append({"kind": "implies", "if": met(i), "then": lin([[1, f(i, "order")]], ">=", 1)})
        rel.append(lin([[1, f(i, "order")], *[[-1, p] for _, p in every_meet]], "<=", 0))
        for j in range(n):
            if j == i:
                continue
            if i < j:
                rel.append({"kind": "implies", "if": [met(i), met(j)],
                            "then": lin([[1, f(i, "order")], [-1, f(j, "order")]], "!=", 0)})
            go = prob.travel[prob.people[i].location][prob.people[j].location]
            rel.append({"kind": "implies", "if": [met(i), met(j)], "then": {"kind": "any", "relations": [
                lin([[1, f(j, "order")], [-1, f(i, "order")]], "!=", 1),
                lin([[1, f(j, "start")], [-1, f(i, "end")]], ">=", go)]}})
    base = n + 1
    levels = [
        {"maximize": every_meet},
        {"minimize": [[1, f(i, "order"), {str(k): 0 if k == 0 else (i + 1) * base ** (n - k)
                                          for k in range(n + 1)}] for i in range(n)]},
        {"minimize": [[1, f(i, key)] for i in range(n) for key in ("start", "end")]},
    ]
    return doc, levels


def check_proposed(ex: dict[str, Any]) -> tuple[bool, int, list[int]]:
    """Solve the levels in turn with CP-SAT (each level's optimum becomes an equality for the next), then ask
    whether the gold record (with its ``order``) is admissible and the only optimal record.
    Returns (gold admissible, number of optimal records found (at most 2), the level optima)."""
    from factorspec_cp import Spec
    from factorspec_cp.encoders import cpsat

    doc, levels = proposed_levels(ex)
    optima: list[int] = []
    for level in levels:
        d = copy.deepcopy(doc)
        for done, value in zip(levels, optima):
            _, terms = next(iter(done.items()))
            d["x-factorspec"]["relations"].append({"kind": "linear", "name": "level optimum",
                                                   "terms": terms, "op": "==", "rhs": value})
        d["x-factorspec"]["objective"] = {**level, "require": "optimal"}
        spec = Spec.from_json(d)
        optima.append(spec.optimum())
    gold = meeting.gold_record(ex, times="minutes")
    order = {k: r for r, k in enumerate(gold_sequence(ex), 1)}
    for k, row in enumerate(gold["meetings"]):
        row["order"] = order.get(k, 0)
    admissible = not spec.check_record(gold)
    found = list(cpsat.enumerate_solutions(spec, 2))
    return admissible, len(found), optima


def meeting_report(use_solver: bool = True) -> None:
    exs = list(meeting.examples())
    t0 = time.time()
    struct_counts: Counter[str] = Counter()
    other: Counter[str] = Counter()
    tie: dict[str, Counter[str]] = {name: Counter() for name in TIEBREAKS}
    n_max: Counter[str] = Counter()
    misses: dict[str, list[str]] = {name: [] for name in TIEBREAKS}
    not_max: list[str] = []
    skip_hits: list[str] = []
    for ex in exs:
        prob = meeting.parse(ex)
        for name, ok in structure(ex).items():
            struct_counts[name] += ok
        steps = gold_steps(ex)
        gold = gold_sequence(ex)
        n_gold = len(gold)
        other["official evaluator: gold scores its own meeting count"] += official_score(ex, steps) == n_gold
        other["project checker: check(gold_record) == []"] += meeting.check(meeting.problem(ex),
                                                                            meeting.gold_record(ex)) == []
        best_direct, seqs = max_sequences(prob, ex["dist_matrix"])
        other["gold meets the max (direct travel, our DFS)"] += n_gold == best_direct
        other["gold meets the max (shortest paths, meeting.max_meetings)"] += n_gold == meeting.max_meetings(prob)
        if use_solver:
            spec = meeting.declaration(ex, times="minutes")
            opt = spec.optimum()
            other["gold meets the max (CP-SAT optimum of today's declaration)"] += n_gold == opt
            other["gold record admissible under today's declaration (check_record)"] += not spec.check_record(
                meeting.gold_record(ex, times="minutes"))
        if n_gold != best_direct:
            not_max.append(ex["id"])
        other["gold meets everyone"] += n_gold == len(prob.people)
        n_max[str(min(len(seqs), 99)) if len(seqs) < 10 else "10-99" if len(seqs) < 100 else "100+"] += 1
        other["only one max-size sequence (gold unique without tie-break)"] += len(seqs) == 1
        if gold not in seqs:
            other["gold sequence NOT among max-size ASAP sequences"] += 1
            continue
        scheds = [asap(prob, ex["dist_matrix"], q) for q in seqs]
        at = seqs.index(gold)
        vecs = [sum(record_vectors(prob, q, sc), []) for q, sc in zip(seqs, scheds)]
        other["gold strictly dominated (another max record is <= in every start/end, < in one)"] += any(
            all(a <= b for a, b in zip(v, vecs[at])) and v != vecs[at] for v in vecs)
        for name, key in TIEBREAKS.items():
            verdict = classify([key(prob, q, s) for q, s in zip(seqs, scheds)], at)
            tie[name][verdict] += 1
            if verdict != "unique optimum" and len(misses[name]) < 3:
                misses[name].append(ex["id"])
        if skip_greedy_first(prob, ex["dist_matrix"], best_direct) == gold:
            skip_hits.append(ex["id"])
        other["gold = lex-smallest max sequence under shortest-path travel too"] += min(
            max_sequences(prob, prob.travel)[1]) == gold
        other["gold sequence ascending in constraints order"] += list(gold) == sorted(gold)
        other["convention record == meeting.gold_record (direct travel)"] += convention_record(
            ex, ex["dist_matrix"]) == meeting.gold_record(ex)
        other["convention record == meeting.gold_record (shortest paths)"] += convention_record(
            ex, prob.travel) == meeting.gold_record(ex)
        if use_solver:
            ok, count, _ = check_proposed(ex)
            other["proposed declaration: gold admissible (CP-SAT, levels in turn)"] += ok
            other["proposed declaration: gold the only optimal record"] += ok and count == 1
    n = len(exs)
    print(f"== meeting planning: {n} problems ({time.time() - t0:.1f}s)")
    print("\n-- structure of the gold plan (problems where every step follows the rule)")
    for name, c in struct_counts.items():
        print(f"  {c:4d}/{n}  {name}")
    print("\n-- optimality and validity")
    for name, c in other.items():
        print(f"  {c:4d}/{n}  {name}")
    if not_max:
        print(f"  gold below the max: {not_max}")
    print("\n-- max-size feasible sequences per problem (ASAP, direct travel):",
          dict(sorted(n_max.items(), key=lambda kv: (len(kv[0]), kv[0]))))
    print("\n-- tie-break among max-size ASAP sequences: is the gold the unique optimum / tied / not optimal?")
    print(f"  {'criterion':70s} unique  tied  not   (first misses)")
    for name, c in tie.items():
        print(f"  {name:70s} {c['unique optimum']:5d} {c['tied optimum']:5d} {c['not optimal']:4d}   "
              f"{', '.join(x.rsplit('_', 1)[-1] for x in misses[name])}")
    print(f"  {'generator: first permutation, skip-greedy walk':70s} {len(skip_hits):5d}")


# ---------------------------------------------------------------------------------------------------- calendar

def calendar_report(use_solver: bool = True) -> None:
    t0 = time.time()
    c: Counter[str] = Counter()
    mismatch: list[str] = []
    for ex in calendar.examples():
        prompt = calendar.problem(ex)
        p = parse_prompt(prompt)
        gold = calendar.gold_record(ex)
        g = (gold["day"], gold["start"], gold["end"])
        grid = calendar.feasible_slots(prompt)  # the problem's grid, (day order as listed, time)
        minute = calendar.feasible_slots(prompt, step=1)
        c["problems"] += 1
        c["asks earliest availability"] += p.earliest
        c["gold valid (calendar.check)"] += not calendar.check(prompt, gold)
        if use_solver:
            c["gold admissible under today's declaration (Spec.check_record, CP-SAT optimum)"] += not (
                calendar.declaration(prompt).check_record(gold))
        c["grid step 30 min"] += p.step == 30
        c["gold on the feasible grid"] += g in grid
        c["exactly one feasible slot (grid)"] += len(grid) == 1
        c["more than one feasible slot (grid)"] += len(grid) > 1
        c["gold = earliest feasible slot (grid), all problems"] += bool(grid) and grid[0] == g
        c["gold = earliest feasible slot (minute grid), all problems"] += bool(minute) and minute[0] == g
        if p.earliest:
            c["  earliest asked: gold = earliest (grid)"] += bool(grid) and grid[0] == g
            c["  earliest asked: more than one feasible slot"] += len(grid) > 1
        else:
            c["  earliest not asked: gold = earliest (grid)"] += bool(grid) and grid[0] == g
            c["  earliest not asked: more than one feasible slot"] += len(grid) > 1
            if len(grid) > 1:
                c["  earliest not asked, >1 slot: gold = earliest"] += grid[0] == g
        if len(p.days) > 1:
            c["multi-day problems"] += 1
            c["  multi-day: gold = earliest (grid)"] += bool(grid) and grid[0] == g
        if not grid or grid[0] != g:
            why = "no feasible slot" if not grid else f"earliest is {grid[0]}, gold is {g}, gold feasible: {g in grid}"
            mismatch.append(f"{ex['id']}: {why}")
            c["exceptions"] += 1
            c["  exceptions: prompt asks earliest"] += p.earliest
            c["  exceptions: has an 'after T' preference"] += any(q.side == "after" for q in p.preferences)
            c["  exceptions: has a 'before T' preference"] += any(q.side == "before" for q in p.preferences)
            c["  exceptions: gold on the earliest feasible day"] += bool(grid) and grid[0][0] == g[0]
            c["  exceptions: gold is the latest feasible slot"] += bool(grid) and grid[-1] == g
            c["  exceptions: gold is the latest feasible slot of its day"] += [x for x in grid if x[0] == g[0]][-1] == g
    print(f"\n== calendar scheduling: {c['problems']} problems ({time.time() - t0:.1f}s)")
    for name, v in c.items():
        print(f"  {v:5d}  {name}")
    print(f"  first exceptions: {[m.split(':')[0].rsplit('_', 1)[-1] for m in mismatch[:20]]}")
    for m in mismatch[:3]:
        print(f"    {m}")


def main(argv: list[str]) -> None:
    which = [a for a in argv if not a.startswith("-")] or ["meeting", "calendar"]
    if "meeting" in which:
        meeting_report(use_solver="--no-solver" not in argv)
    if "calendar" in which:
        calendar_report(use_solver="--no-solver" not in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
