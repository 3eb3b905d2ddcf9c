"""CP-SAT backend (OR-tools): the reference semantics, objectives and wide integer ranges.

Every field is an index variable over its domain positions; numbers come in through affine expressions or element
constraints. Sessions probe by editing variable domains in the one model (cheap) rather than by assumptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ortools.sat.python import cp_model

from ..relations import Literal, Term
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

_SENSE = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


class CpsatModel:
    """A CP-SAT model of some fields and instances. ``selectors`` gives each instance an enforcement literal."""

    def __init__(self, spec: Spec, instances: Sequence[Instance], *, fields: Sequence[str] | None = None,
                 selectors: bool = False):
        self.spec = spec
        self.fields = spec.fields
        self.model = cp_model.CpModel()
        scope = fields if fields is not None else list(dict.fromkeys(p for i in instances for p in i.scope))
        in_scope = set(scope)
        self.idx = {p: self.model.NewIntVar(0, self.fields[p].size - 1, p) for p in self.fields if p in in_scope}
        index_domains(self.fields, self.idx)
        self._eq: dict[tuple[str, int], Any] = {}
        self._in: dict[tuple[str, frozenset[int]], Any] = {}
        self._expr: dict[tuple[str, tuple[int, ...]], Any] = {}
        self.weights = weights_memo(spec)  # the memo of :func:`weights`
        self._by_id: dict[tuple[str, int], tuple[Sequence[int], Any]] = {}  # value_expr of columns, by identity
        self.selectors: dict[int, Any] = {}
        for inst in instances:
            enf: tuple[Any, ...] = ()
            if selectors:
                sel = self.model.NewBoolVar(f"sel{inst.number}")
                self.selectors[inst.number] = sel
                enf = (sel,)
            inst.relation.encode_cpsat(CpsatContext(self, enf))

    def var(self, path: str) -> Any:
        """The field's index variable (position in its domain)."""
        return self.idx[path]

    def value_expr(self, path: str, w: Sequence[int]) -> Any:
        """An expression equal to ``w[k]`` when the field takes its k-th value."""
        x = self.idx[path]
        if len(w) == 1:
            return w[0]
        seen = self._by_id.get((path, id(w)))  # a shared weights column: known by identity, no long key to hash
        if seen is not None and seen[0] is w:
            hit = seen[1]
        else:
            key = (path, tuple(w))
            hit = self._expr.get(key)
            if hit is None:
                step = w[1] - w[0]
                if all(w[k] == w[0] + step * k for k in range(len(w))):
                    hit = (w[0], step)
                else:
                    hit = self.model.NewIntVar(min(w), max(w), f"{path}#w")
                    self.model.AddElement(x, list(w), hit)
                self._expr[key] = hit
            self._by_id[(path, id(w))] = (w, hit)  # w is kept, so its id stays its own
        if isinstance(hit, tuple):
            w0, step = hit
            return w0 + step * x if step != 1 else x + w0
        return hit

    def number(self, path: str) -> Any:
        """An expression equal to the field's numeric value (integers; booleans as 0/1)."""
        f = self.fields[path]
        return self.value_expr(path, [int(v) for v in f.values])

    def eq(self, path: str, k: int) -> Any:
        """A literal true iff the field takes its k-th value (a two-value field's index variable is one)."""
        key = (path, k)
        if key not in self._eq and self.fields[path].size == 2:
            x = self.idx[path]
            self._eq[key] = x if k == 1 else x.Not()
        if key not in self._eq:
            b = self.model.NewBoolVar(f"{path}=={k}")
            x = self.idx[path]
            self.model.Add(x == k).OnlyEnforceIf(b)
            self.model.Add(x != k).OnlyEnforceIf(b.Not())
            self._eq[key] = b
        return self._eq[key]

    def member(self, path: str, allowed: Sequence[int]) -> Any:
        allowed_set = frozenset(allowed)
        if len(allowed_set) == 1:
            return self.eq(path, next(iter(allowed_set)))
        key = (path, allowed_set)
        if key not in self._in:
            b = self.model.NewBoolVar(f"{path} in")
            x = self.idx[path]
            rest = [k for k in range(self.fields[path].size) if k not in allowed_set]
            self.model.AddLinearExpressionInDomain(x, cp_model.Domain.FromValues(sorted(allowed_set))).OnlyEnforceIf(b)
            self.model.AddLinearExpressionInDomain(x, cp_model.Domain.FromValues(rest)).OnlyEnforceIf(b.Not())
            self._in[key] = b
        return self._in[key]


class CpsatContext(Context):
    """Posts relations to a :class:`CpsatModel`, each under the enforcement literals ``enf``."""

    def __init__(self, cm: CpsatModel, enf: tuple[Any, ...]):
        self.cm = cm
        self.model = cm.model
        self.fields = cm.fields
        self.enf = enf

    def var(self, path: str) -> Any:
        """For custom kinds: the field's index variable."""
        return self.cm.var(path)

    def number(self, path: str) -> Any:
        """For custom kinds: an expression for the field's numeric value."""
        return self.cm.number(path)

    def add(self, ct: Any) -> Any:
        """For custom kinds: post a bounded linear expression (``a + b <= c``) under this context's condition."""
        c = self.model.Add(ct)
        if self.enf:
            c.OnlyEnforceIf(list(self.enf))
        return c

    def _post(self, c: Any) -> None:
        if self.enf:
            c.OnlyEnforceIf(list(self.enf))

    def _false(self) -> None:
        self._post(self.model.AddBoolOr([self.model.NewConstant(0)]))

    def add_linear(self, terms: Sequence[Term], op: str, rhs: int) -> None:
        w = weights(terms, self.fields, self.cm.weights)
        expr = sum((self.cm.value_expr(p, ws) for p, ws in w.items()), 0)
        if isinstance(expr, int):
            if not getattr(expr, _SENSE[op])(rhs):
                self._false()
            return
        self._post(self.model.Add(getattr(expr, _SENSE[op])(rhs)))

    def add_all_different(self, paths: Sequence[str]) -> None:
        if all(self.fields[p].kind == "integer" and isinstance(self.fields[p].values, range) for p in paths):
            # integer ranges: the values are their own codes (no pass over a 10**6-value domain)
            exprs = [self.fields[p].values.start + self.fields[p].values.step * self.cm.var(p) for p in paths]
        else:
            codes: dict[Any, int] = {}
            for p in paths:
                for v in self.fields[p].values:
                    codes.setdefault(jkey(v), len(codes))
            exprs = [self.cm.value_expr(p, [codes[jkey(v)] for v in self.fields[p].values]) for p in paths]
        if not self.enf:
            self.model.AddAllDifferent(exprs)
            return
        for a in range(len(exprs)):
            for b in range(a + 1, len(exprs)):
                self._post(self.model.Add(exprs[a] != exprs[b]))

    def _index_rows(self, paths: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
        out = []
        for row in rows:
            try:
                out.append(tuple(self.fields[p].index(v) for p, v in zip(paths, row)))
            except KeyError:
                continue
        return list(dict.fromkeys(out))

    def add_table(self, paths: Sequence[str], rows: Sequence[Sequence[Any]], allow: bool) -> None:
        idx_rows = self._index_rows(paths, rows)
        xs = [self.cm.idx[p] for p in paths]
        if allow:
            if not idx_rows:
                self._false()
            elif len(paths) == 1:
                dom = cp_model.Domain.FromValues(sorted(r[0] for r in idx_rows))
                self._post(self.model.AddLinearExpressionInDomain(xs[0], dom))
            elif not self.enf:
                self.model.AddAllowedAssignments(xs, idx_rows)
            else:
                sels = []
                for r in idx_rows:
                    s = self.model.NewBoolVar("row")
                    self.model.AddBoolAnd([self.cm.eq(p, k) for p, k in zip(paths, r)]).OnlyEnforceIf(s)
                    sels.append(s)
                self._post(self.model.AddBoolOr(sels))
        else:
            if not idx_rows:
                return
            if not self.enf:
                self.model.AddForbiddenAssignments(xs, idx_rows)
            else:
                for r in idx_rows:
                    self._post(self.model.AddBoolOr([self.cm.eq(p, k).Not() for p, k in zip(paths, r)]))

    def add_count(self, paths: Sequence[str], value: Any, op: str, rhs: int) -> None:
        lits = []
        for p in paths:
            f = self.fields[p]
            if value in f:
                lits.append(self.cm.eq(p, f.index(value)))
        ranges = count_bounds(op, rhs, len(lits))
        if not ranges:
            self._false()
        elif ranges != [(0, len(lits))]:
            dom = cp_model.Domain.FromIntervals([list(r) for r in ranges])
            self._post(self.model.AddLinearExpressionInDomain(sum(lits), dom))

    def add_any(self, branches: Sequence[Callable[[Context], None]]) -> None:
        aux = [self.model.NewBoolVar("any") for _ in branches]
        self._post(self.model.AddBoolOr(aux))
        for a, branch in zip(aux, branches):
            branch(CpsatContext(self.cm, (*self.enf, a)))

    def post(self, relation: Any) -> None:
        relation.encode_cpsat(self)

    def when(self, literals: Sequence[Literal]) -> Context:
        enf = list(self.enf)
        for lit in literals:
            f = self.fields[lit.field]
            allowed = lit.allowed(f)
            if not allowed:
                return NullContext(self.fields)
            if len(allowed) < f.size:
                enf.append(self.cm.member(lit.field, allowed))
        return CpsatContext(self.cm, tuple(enf))


def _solver(time_limit: float | None = None) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    if time_limit is not None:
        s.parameters.max_time_in_seconds = time_limit
    return s


def _probe_parameters(solver: cp_model.CpSolver) -> None:
    """A probe is a feasibility question on a model loaded again each time, so its cost is mostly loading and
    preparing the search (measured on meeting planning: about 0.75 ms of 0.8 ms with every field fixed). Skip what
    pays off only on long searches: presolve (a probe changes a few domains: presolving again costs 2x), the LP
    relaxation, symmetry detection, probing and SAT inprocessing (together about 35% of a probe). The search stays
    complete, so answers are the same."""
    p = solver.parameters
    p.cp_model_presolve = False
    p.linearization_level = 0
    p.symmetry_level = 0
    p.cp_model_probing_level = 0
    p.use_sat_inprocessing = False


class CpsatBackend(Backend):
    """Probes by editing index-variable domains in one model: its own copy of ``model`` (a declaration's model,
    built once and shared by its sessions, like the SAT encoding), or one built here."""

    name = "cpsat"

    def __init__(self, spec: Spec, instances: Sequence[Instance], *, selectors: bool = False,
                 model: CpsatModel | None = None):
        super().__init__(spec)
        self.cm = model if model is not None and not selectors else CpsatModel(spec, instances, selectors=selectors)
        self.model = self.cm.model.clone() if self.cm is model else self.cm.model
        self.proto = self.model.Proto()
        self.var_index = {p: v.Index() for p, v in self.cm.idx.items()}
        self.sel_index = {n: s.Index() for n, s in self.cm.selectors.items()}
        self.base = {i: tuple(self.proto.variables[i].domain) for i in
                     list(self.var_index.values()) + list(self.sel_index.values())}
        self._current: dict[int, tuple[int, ...]] = {}  # domains written over the base, left from the last solve
        self._hint_vars = sorted(self.var_index.values())
        self._last: list[int] | None = None  # the last solution found

    def _write(self, i: int, dom: Sequence[int]) -> None:
        d = self.proto.variables[i].domain
        d.clear()
        d.extend(dom)

    def solve(self, fixed: Fixed, excluded: Excluded | None = None, enabled: set[int] | None = None,
              time_limit: float | None = None, *, allowed: Allowed | None = None) -> dict[str, int] | None:
        return self._solve(fixed, excluded, enabled, time_limit, allowed)[0]

    def bounds(self, fixed: Fixed, path: str, time_limit: float | None = None, *, least: bool = True,
               greatest: bool = True) -> tuple[dict[str, int] | None, dict[str, int] | None] | None:
        """Witnesses with the least and the greatest value index of ``path`` (an optimization for each end asked,
        each proven)."""
        if path not in self.var_index or path in fixed:
            return None
        out: list[dict[str, int] | None] = []
        for coef, asked in ((1, least), (-1, greatest)):
            if not asked:
                out.append(None)
                continue
            w, optimal = self._solve(fixed, None, None, time_limit, None, (self.var_index[path], coef))
            if w is None or not optimal:
                return None
            out.append(w)
        return out[0], out[1]

    def _solve(self, fixed: Fixed, excluded: Excluded | None, enabled: set[int] | None, time_limit: float | None,
               allowed: Allowed | None, objective: tuple[int, int] | None = None
               ) -> tuple[dict[str, int] | None, bool]:
        """A witness (or None) and whether it is proven optimal for ``objective`` (variable, coefficient)."""
        self.solves += 1
        self.timed_out = False
        want: dict[int, tuple[int, ...]] = {}  # variable -> its domain for this solve (flat intervals)
        for p, k in fixed.items():
            if p in self.var_index:
                want[self.var_index[p]] = (k, k)
        for p, ivs in (allowed or {}).items():
            if p in fixed:
                if not any(a <= fixed[p] <= b for a, b in ivs):
                    return None, True
            elif p in self.var_index:
                dom = cp_model.Domain.FromIntervals([[a, b] for a, b in ivs])
                want[self.var_index[p]] = tuple(dom.FlattenedIntervals())
        for p, ks in (excluded or {}).items():
            if p in self.var_index and p not in fixed:
                i = self.var_index[p]
                dom = cp_model.Domain.FromFlatIntervals(list(want.get(i, self.base[i])))
                want[i] = tuple(dom.intersection_with(cp_model.Domain.FromValues(list(ks)).complement())
                                .FlattenedIntervals())
        for i, dom in want.items():  # within the variable's own domain, or no record
            base = self.base[i]
            if not dom:
                return None, True
            if len(base) == 2 and base[0] <= dom[0] and dom[-1] <= base[1]:
                continue
            d = cp_model.Domain.FromFlatIntervals(list(dom)).intersection_with(
                cp_model.Domain.FromFlatIntervals(list(base)))
            if d.is_empty():
                return None, True
            want[i] = tuple(d.FlattenedIntervals())
        for n, i in self.sel_index.items():
            want[i] = (1, 1) if enabled is None or n in enabled else (0, 0)
        self._apply(want)
        last = self._last
        if last is not None and all(last[i] == d[0] for i, d in want.items() if len(d) == 2 and d[0] == d[1]):
            free = [i for i in self._hint_vars if i not in want]
            self._hint(free, [last[i] for i in free])
        elif self.proto.has_solution_hint():
            self.proto.clear_solution_hint()
        if objective is not None:
            self.proto.objective.vars.append(objective[0])
            self.proto.objective.coeffs.append(objective[1])
        solver = _solver(time_limit)
        _probe_parameters(solver)
        try:
            status = solver.Solve(self.model)
        finally:
            if objective is not None:
                self.proto.clear_objective()
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            sol = list(solver.response_proto.solution)
            self._last = sol
            return {p: sol[i] for p, i in self.var_index.items()}, status == cp_model.OPTIMAL
        if status == cp_model.UNKNOWN:
            self.timed_out = True
        elif status != cp_model.INFEASIBLE:
            raise RuntimeError(f"CP-SAT returned {solver.StatusName(status)}: {solver.SolutionInfo()}")
        return None, True

    def _hint(self, variables: list[int], values: list[int]) -> None:
        """Start the next search from the last solution (given only when it agrees with every fixed field): a probe
        under the same assignment usually has a solution nearby (on meeting planning, feasible probes that need a
        search took 0.7 ms with the hint, 1.2 ms without). Only a hint: the answers do not depend on it."""
        self.proto.clear_solution_hint()
        hint = self.proto.solution_hint
        hint.vars.extend(variables)
        hint.values.extend(values)

    def _apply(self, want: dict[int, tuple[int, ...]]) -> None:
        """Write the domains ``want`` gives into the model, and the base domain back where it gives none. The model
        keeps them between solves, so consecutive probes under one assignment rewrite only what changed."""
        for i in [i for i in self._current if i not in want]:
            self._write(i, self.base[i])
            del self._current[i]
        for i, dom in want.items():
            if self._current.get(i, self.base[i]) != dom:
                self._write(i, dom)
                self._current[i] = dom


def optimize(spec: Spec, terms: Sequence[Term], sense: str,
             held: Sequence[tuple[Sequence[Term], int]] = ()) -> int | None:
    """The optimal value of ``sum(terms)`` over records satisfying the relations and each ``held`` expression at
    its value (the earlier levels of a lexicographic objective at their optima); None when there are none."""
    cm = CpsatModel(spec, spec.instances, fields=list(dict.fromkeys(
        [p for i in spec.instances for p in i.scope] + [t.path for t in terms]
        + [t.path for ts, _ in held for t in ts])))

    def expr_of(ts: Sequence[Term]) -> Any:
        return sum((cm.value_expr(p, ws) for p, ws in weights(ts, spec.fields).items()), 0)

    for ts, value in held:
        cm.model.Add(expr_of(ts) == value)
    expr = expr_of(terms)
    (cm.model.Minimize if sense == "minimize" else cm.model.Maximize)(expr)
    solver = _solver()
    status = solver.Solve(cm.model)
    if status == cp_model.OPTIMAL:
        return int(round(solver.ObjectiveValue()))
    if status == cp_model.INFEASIBLE:
        return None
    raise RuntimeError(f"CP-SAT could not optimize: {solver.StatusName(status)}")


def enumerate_solutions(spec: Spec, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Every assignment of the spec's always-present fields that satisfies it (path -> JSON value), lazily.

    Each solution found is blocked before the next solve, so auxiliary variables never repeat a record."""
    cm = CpsatModel(spec, spec.active_instances, fields=list(spec.fields))
    xs = list(cm.idx.items())
    count = 0
    while limit is None or count < limit:
        solver = _solver()
        status = solver.Solve(cm.model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if status not in (cp_model.INFEASIBLE,):
                raise RuntimeError(f"CP-SAT enumeration stopped: {solver.StatusName(status)}")
            return
        ks = [int(solver.Value(v)) for _, v in xs]
        yield {p: cm.fields[p].values[k] for (p, _), k in zip(xs, ks)}
        count += 1
        if not xs:
            return
        cm.model.AddForbiddenAssignments([v for _, v in xs], [ks])
