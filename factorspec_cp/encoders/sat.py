"""SAT backend (pysat, CaDiCaL 1.5.3): one-hot domains, clause encodings, incremental solving under assumptions.

Each relation instance gets a selector literal added (negated) to every clause that restricts it, so explanations
switch relations on and off by assumption. A condition (``implies``, ``any``) adds its negation to the clauses the
same way: a clause holds trivially when its condition does not.
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pysat.card import CardEnc, EncType
from pysat.solvers import Solver

from ..errors import BackendUnsupported
from ..relations import Literal, Term, compare, relation_has_sat
from ..schema import jkey
from .base import (
    Allowed,
    Backend,
    Context,
    Excluded,
    Fixed,
    NullContext,
    count_bounds,
    index_domains,
    weights,
    weights_memo,
)

if TYPE_CHECKING:
    from ..spec import Instance, Spec

TUPLE_LIMIT = 4096  # enumerate a linear constraint's tuples up to this many; above, use partial sums
MAX_DOMAIN = 512  # fields wider than this make the default choose CP-SAT
CLAUSE_BUDGET = 3_000_000


OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


class EncodingTooLarge(Exception):
    """The SAT encoding would exceed its budget; the default backend choice then takes CP-SAT."""


class SatEncoding:
    """CNF for a spec's instances, built once and shared by every SAT session of the spec."""

    def __init__(self, spec: Spec, instances: Sequence[Instance], *, clause_budget: int = CLAUSE_BUDGET):
        self.fields = spec.fields
        self.budget = clause_budget
        self.nv = 0
        self.n_clauses = 0
        self._flat = array("i")  # clauses, each closed by 0: one object, nothing for the garbage collector to walk
        self.lits: dict[str, list[int]] = {}
        self.selectors: dict[int, int] = {}
        self.weights = weights_memo(spec)  # the memo of :func:`weights`
        for inst in instances:
            if not relation_has_sat(inst.relation):
                raise BackendUnsupported(f"{inst.label} has no SAT encoding", pointer=inst.where,
                                         hint='use backend="cpsat" (the default picks it)')
        scope = {p for inst in instances for p in inst.scope}
        for p in spec.fields:
            if p not in scope:
                continue
            f = self.fields[p]
            if f.size > MAX_DOMAIN:
                raise EncodingTooLarge(f"{p} has {f.size} values (SAT takes up to {MAX_DOMAIN})")
            self.lits[p] = [self.new_var() for _ in range(f.size)]
            self.exactly_one(self.lits[p])
        index_domains(self.fields, self.lits)
        for inst in instances:
            sel = self.new_var()
            self.selectors[inst.number] = sel
            inst.relation.encode_sat(SatContext(self, (-sel,)))

    def new_var(self) -> int:
        self.nv += 1
        return self.nv

    def add(self, clause: list[int]) -> None:
        self._flat.extend(clause)
        self._flat.append(0)
        self.n_clauses += 1
        if self.n_clauses > self.budget:
            raise EncodingTooLarge(f"more than {self.budget} clauses")

    @property
    def clauses(self) -> Iterator[list[int]]:
        clause: list[int] = []
        for x in self._flat:
            if x:
                clause.append(x)
            else:
                yield clause
                clause = []

    def exactly_one(self, lits: list[int]) -> None:
        self.add(list(lits))
        self.at_most_one(lits, ())

    def at_most_one(self, lits: Sequence[int], prefix: Sequence[int]) -> None:
        if len(lits) <= 6:
            for a, b in itertools.combinations(lits, 2):
                self.add([-a, -b, *prefix])
        else:
            self.cardinality(lits, 0, 1, prefix)

    def cardinality(self, lits: Sequence[int], lo: int, hi: int, prefix: Sequence[int]) -> None:
        """``lo <= sum(lits) <= hi`` under ``prefix``."""
        n = len(lits)
        if lo > 0:
            cnf = CardEnc.atleast(lits=list(lits), bound=lo, top_id=self.nv, encoding=EncType.seqcounter)
            self.nv = max(self.nv, cnf.nv)
            for c in cnf.clauses:
                self.add([*c, *prefix])
        if hi < n:
            if hi < 0:
                self.add(list(prefix))
                return
            cnf = CardEnc.atmost(lits=list(lits), bound=hi, top_id=self.nv, encoding=EncType.seqcounter)
            self.nv = max(self.nv, cnf.nv)
            for c in cnf.clauses:
                self.add([*c, *prefix])


class SatContext(Context):
    """Encodes relations as clauses; every clause it adds carries ``prefix`` (literals true when off)."""

    def __init__(self, enc: SatEncoding, prefix: tuple[int, ...]):
        self.enc = enc
        self.fields = enc.fields
        self.prefix = prefix

    def clause(self, lits: Sequence[int]) -> None:
        self.enc.add([*lits, *self.prefix])

    def lit(self, path: str, value: Any) -> int | None:
        f = self.fields[path]
        try:
            return self.enc.lits[path][f.index(value)]
        except KeyError:
            return None

    # -- Context -------------------------------------------------------------------------------------------------
    def add_linear(self, terms: Sequence[Term], op: str, rhs: int) -> None:
        w = weights(terms, self.fields, self.enc.weights)
        for p in list(w):  # fold constant contributions into the right-hand side
            if len(set(w[p])) == 1:
                rhs -= w.pop(p)[0]
        paths = list(w)
        if not paths:
            if not compare(0, op, rhs):
                self.clause([])
            return
        if len(paths) == 2:  # support clauses: x1 = a -> x2 in {b : w1[a] + w2[b] op rhs}, both directions
            holds = OPS[op]
            for side in (0, 1):
                p, q = paths[side], paths[1 - side]
                ys, wq = self.enc.lits[q], w[q]
                by_weight: dict[int, list[int]] = {}
                for j, y in enumerate(ys):
                    by_weight.setdefault(wq[j], []).append(y)
                for k, x in enumerate(self.enc.lits[p]):
                    if op == "==":
                        support = by_weight.get(rhs - w[p][k], [])
                    else:
                        support = [y for v, yv in by_weight.items() if holds(w[p][k] + v, rhs) for y in yv]
                    if len(support) < len(ys):
                        self.clause([-x, *support])
            return
        size = 1
        for p in paths:
            size *= len(w[p])
        if size <= TUPLE_LIMIT:
            for combo in itertools.product(*(range(len(w[p])) for p in paths)):
                if not compare(sum(w[p][k] for p, k in zip(paths, combo)), op, rhs):
                    self.clause([-self.enc.lits[p][k] for p, k in zip(paths, combo)])
            return
        # Partial sums: s_j[v] is implied true when the first j terms sum to v; forbid violating final sums.
        paths.sort(key=lambda p: len(set(w[p])))
        sums: dict[int, int] = {}
        for k, x in enumerate(self.enc.lits[paths[0]]):
            v = w[paths[0]][k]
            if v not in sums:
                sums[v] = self.enc.new_var()
            self.enc.add([-x, sums[v]])
        for p in paths[1:]:
            nxt: dict[int, int] = {}
            for a, sa in sums.items():
                for k, x in enumerate(self.enc.lits[p]):
                    v = a + w[p][k]
                    if v not in nxt:
                        nxt[v] = self.enc.new_var()
                    self.enc.add([-sa, -x, nxt[v]])
            sums = nxt
        for v, s in sums.items():
            if not compare(v, op, rhs):
                self.clause([-s])

    def add_all_different(self, paths: Sequence[str]) -> None:
        groups: dict[Any, list[int]] = {}
        for p in paths:
            for k, v in enumerate(self.fields[p].values):
                groups.setdefault(jkey(v), []).append(self.enc.lits[p][k])
        if len(groups) < len(set(paths)):  # more fields than values: no record (CDCL alone would face a
            self.clause([])                # pigeonhole instance, exponential for resolution)
            return
        for lits in groups.values():
            if len(lits) > 1:
                self.enc.at_most_one(lits, self.prefix)

    def add_table(self, paths: Sequence[str], rows: Sequence[Sequence[Any]], allow: bool) -> None:
        idx_rows = []
        for row in rows:
            lits = [self.lit(p, v) for p, v in zip(paths, row)]
            if all(x is not None for x in lits):
                idx_rows.append(tuple(lits))
        idx_rows = list(dict.fromkeys(idx_rows))
        if not allow:
            for r in idx_rows:
                self.clause([-x for x in r])  # type: ignore[operator]
            return
        if len(paths) == 1:
            self.clause([r[0] for r in idx_rows])  # type: ignore[misc]
            return
        if len(paths) == 2:  # support clauses in both directions
            for side in (0, 1):
                support: dict[int, list[int]] = {x: [] for x in self.enc.lits[paths[side]]}
                for r in idx_rows:
                    support[r[side]].append(r[1 - side])  # type: ignore[index]
                for x, ys in support.items():
                    self.clause([-x, *ys])
            return
        sels = []
        for r in idx_rows:
            s = self.enc.new_var()
            sels.append(s)
            for x in r:
                self.enc.add([-s, x])  # type: ignore[list-item]
        self.clause(sels)

    def add_count(self, paths: Sequence[str], value: Any, op: str, rhs: int) -> None:
        lits = [x for x in (self.lit(p, value) for p in paths) if x is not None]
        ranges = count_bounds(op, rhs, len(lits))
        if ranges == [(0, len(lits))]:
            return
        if not ranges:
            self.clause([])
        elif len(ranges) == 1:
            self.enc.cardinality(lits, ranges[0][0], ranges[0][1], self.prefix)
        else:
            self.add_any([lambda c, lo=lo, hi=hi: c.enc.cardinality(lits, lo, hi, c.prefix)  # type: ignore
                          for lo, hi in ranges])

    def add_any(self, branches: Sequence[Callable[[Context], None]]) -> None:
        aux = [self.enc.new_var() for _ in branches]
        self.clause(aux)
        for a, branch in zip(aux, branches):
            branch(SatContext(self.enc, (*self.prefix, -a)))

    def post(self, relation: Any) -> None:
        relation.encode_sat(self)

    def when(self, literals: Sequence[Literal]) -> Context:
        extra: list[int] = []
        for lit in literals:
            f = self.fields[lit.field]
            allowed = set(lit.allowed(f))
            if not allowed:
                return NullContext(self.fields)
            extra.extend(x for k, x in enumerate(self.enc.lits[lit.field]) if k not in allowed)
        return SatContext(self.enc, (*self.prefix, *extra))


class SatBackend(Backend):
    """Incremental CaDiCaL over the shared encoding; probes are assumptions."""

    name = "sat"

    def __init__(self, spec: Spec, instances: Sequence[Instance], encoding: SatEncoding | None = None):
        super().__init__(spec)
        self.enc = encoding or SatEncoding(spec, instances)
        self.instances = list(instances)
        self.solver = Solver(name="cadical153", bootstrap_with=self.enc.clauses)
        self.all_selectors = [self.enc.selectors[i.number] for i in self.instances]
        self.last_core: set[tuple[str, Any]] | None = None

    def solve(self, fixed: Fixed, excluded: Excluded | None = None, enabled: set[int] | None = None,
              time_limit: float | None = None, *, allowed: Allowed | None = None) -> dict[str, int] | None:
        self.solves += 1
        self.timed_out = False
        lits = self.enc.lits
        sels = self.all_selectors if enabled is None else [self.enc.selectors[n] for n in enabled]
        assumptions = list(sels)
        assumptions += [lits[p][k] for p, k in fixed.items() if p in lits]
        if excluded:
            assumptions += [-lits[p][k] for p, ks in excluded.items() if p in lits for k in ks]
        for p, ivs in (allowed or {}).items():  # the values outside the intervals, assumed false
            if p in fixed:
                if not any(a <= fixed[p] <= b for a, b in ivs):
                    return None
            elif p in lits:
                xs, at, inside = lits[p], 0, False
                for a, b in sorted(ivs):
                    a, b = max(a, at), min(b, len(xs) - 1)
                    if a <= b:
                        assumptions.extend(-x for x in xs[at:a])
                        at, inside = b + 1, True
                if not inside:
                    return None
                assumptions.extend(-x for x in xs[at:])
        if not self.solver.solve(assumptions=assumptions):
            core = set(self.solver.get_core() or [])
            sel_of = {v: n for n, v in self.enc.selectors.items()}
            self.last_core = ({("rel", sel_of[x]) for x in core if x in sel_of}
                              | {("fix", p) for p, k in fixed.items() if p in lits and lits[p][k] in core})
            return None
        model = self.solver.get_model()
        true = {x for x in model if x > 0} if model else set()
        out = {}
        for p, xs in lits.items():
            for k, x in enumerate(xs):
                if x in true:
                    out[p] = k
                    break
        return out

    def close(self) -> None:
        self.solver.delete()


def enumerate_solutions(spec: Spec, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Every assignment of the spec's always-present fields that satisfies it, by SAT with blocking clauses over
    the fields the relations read; fields no relation reads range over their whole domain."""
    from ..session import _encoding
    instances = spec.active_instances
    enc = _encoding(spec, instances, cache=True)
    free = [p for p in spec.fields if p not in enc.lits]
    count = 0
    with Solver(name="cadical153", bootstrap_with=enc.clauses) as solver:
        sels = [enc.selectors[i.number] for i in instances]
        while limit is None or count < limit:
            if not solver.solve(assumptions=sels):
                return
            true = {x for x in solver.get_model() or [] if x > 0}
            chosen = {p: next(k for k, x in enumerate(xs) if x in true) for p, xs in enc.lits.items()}
            for rest in itertools.product(*(range(spec.fields[p].size) for p in free)):
                values = {p: spec.fields[p].values[k] for p, k in chosen.items()}
                values.update({p: spec.fields[p].values[k] for p, k in zip(free, rest)})
                yield {p: values[p] for p in spec.fields}
                count += 1
                if limit is not None and count >= limit:
                    return
            if not chosen:
                return
            solver.add_clause([-enc.lits[p][k] for p, k in chosen.items()])
