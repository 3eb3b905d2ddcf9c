"""An incremental session: one request's assignments and the exact admissible domains they leave.

``admissible(f) = {v : some full record extending the assignment with f=v satisfies every relation}``. Every
solution a backend returns marks all its values admissible (a witness), so most probes ask only for values no
witness has shown: per field, one solve per admissible value not yet witnessed, plus one that proves the rest out.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .encoders.base import Backend
from .errors import BackendUnsupported, InvalidAssignment

if TYPE_CHECKING:
    from .spec import Spec
from .spec import Instance

BACKENDS = ("sat", "cpsat", "csp")


@dataclass
class _State:
    """What is known under one assignment: witnessed and refuted value indices per field."""

    sat: bool | None = None
    witnessed: dict[str, set[int]] = field(default_factory=dict)
    refuted: dict[str, set[int]] = field(default_factory=dict)

    def add(self, witness: dict[str, int]) -> None:
        for p, k in witness.items():
            self.witnessed.setdefault(p, set()).add(k)


@dataclass
class Stats:
    solves: int = 0
    solve_seconds: float = 0.0
    incomplete: int = 0  # probes cut by the time budget: the value was not admitted (sound, maybe incomplete)


@dataclass
class Explanation:
    """A minimal set of relations (and assignments) that together admit no record."""

    conflict: bool
    relations: list[Instance]
    assignments: list[tuple[str, Any]]
    question: tuple[str, Any] | None = None

    def __str__(self) -> str:
        if self.question is not None:
            path, value = self.question
            head = f"{value!r} is {'not ' if self.conflict else ''}admissible for {path}"
        else:
            head = "no record satisfies the relations" if self.conflict else "satisfiable: nothing to explain"
        if not self.conflict:
            return head
        lines = [head + ("; minimal conflict:" if self.question is None else " because of:")]
        lines += [f"  - {inst.describe()}" for inst in self.relations]
        lines += [f"  - assigned {p} = {v!r}" for p, v in self.assignments]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"conflict": self.conflict,
                "question": None if self.question is None else {"path": self.question[0], "value": self.question[1]},
                "relations": [{"relation": i.source, "kind": i.relation.kind, "name": i.relation.name, "i": i.i,
                               "paths": i.scope, "where": i.where} for i in self.relations],
                "assignments": [{"path": p, "value": v} for p, v in self.assignments]}

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(str(self)) + "</pre>"


class Session:
    """Incremental solving for one record. Create with :meth:`Spec.session`.

    >>> import factorspec_cp as fs
    >>> spec = fs.Spec({"type": "object", "required": ["x", "y"], "properties": {
    ...     "x": {"type": "integer", "minimum": 0, "maximum": 3},
    ...     "y": {"type": "integer", "minimum": 0, "maximum": 3}}},
    ...     [fs.Linear([[1, "/x"], [1, "/y"]], "==", 3)])
    >>> s = spec.session()
    >>> s.assign("/x", 1); s.certain()
    {'/x': 1, '/y': 2}
    """

    def __init__(self, spec: Spec, backend: str | None = None, *, time_limit: float | None = None,
                 _check: bool = True, _relations: Sequence[Instance] | None = None):
        self.spec = spec
        self.time_limit = time_limit
        self.stats = Stats()
        instances = list(_relations) if _relations is not None else spec.active_instances
        self.instances = instances
        self.backend_name, self.backend_reason = choose_backend(spec, backend, instances)
        self._backend = make_backend(spec, self.backend_name, instances, cache=_relations is None)
        self._explainer: Backend | None = None
        self._assigned: dict[str, Any] = {}
        self._stack: list[dict[str, Any]] = []
        self._states: dict[tuple[tuple[str, int], ...], _State] = {}
        self._scope = set(p for i in instances for p in i.scope)
        self._touching: dict[str, list[Instance]] = {}
        for inst in instances:
            for p in inst.scope:
                self._touching.setdefault(p, []).append(inst)
        # siblings: fields of the same object with the same domain (start/end of one interval)
        self._siblings: dict[str, list[str]] = {}
        scoped = [p for p in spec.fields if p in self._scope]
        for p in scoped:
            parent = p.rsplit("/", 1)[0]
            self._siblings[p] = [q for q in scoped if q != p and q.rsplit("/", 1)[0] == parent
                                 and spec.fields[q].values == spec.fields[p].values and spec.fields[p].size > 2]
        if _check and not self._state()[0].sat:
            raise spec.unsatisfiable()

    @property
    def backend(self) -> str:
        """The backend in use: "sat", "cpsat" or "csp" (``backend_reason`` says why, for the default)."""
        return self.backend_name

    # -- assignments -------------------------------------------------------------------------------------------------
    def _field(self, path: str) -> Any:
        f = self.spec.compiled.fields.get(path)
        if f is None:
            if path in self.spec.compiled.free:
                raise InvalidAssignment(f"{path} is a free field (no finite domain)")
            hint = self.spec.compiled.suggest(path)
            raise InvalidAssignment(f"{path} is not a field of this declaration" + (f"; {hint}" if hint else ""))
        return f

    def assign(self, path: str, value: Any) -> None:
        """Fix a field to a value of its domain. Any domain value is accepted (then nothing may be admissible)."""
        f = self._field(path)
        if value not in f:
            raise InvalidAssignment(f"{value!r} is not in the domain of {path}")
        if path in self._assigned:
            if f.index(self._assigned[path]) != f.index(value):
                raise InvalidAssignment(f"{path} is already assigned {self._assigned[path]!r}; use push()/pop()")
            return
        self._assigned[path] = value

    def push(self) -> None:
        """Save the assignment; :meth:`pop` returns to it."""
        self._stack.append(dict(self._assigned))

    def pop(self) -> None:
        if not self._stack:
            raise InvalidAssignment("pop() without a matching push()")
        self._assigned = self._stack.pop()

    @property
    def assignment(self) -> dict[str, Any]:
        return dict(self._assigned)

    def _fixed(self, extra: dict[str, Any] | None = None) -> dict[str, int]:
        items = dict(self._assigned, **(extra or {}))
        return {p: self.spec.fields[p].index(v) for p, v in items.items() if p in self._scope}

    # -- solving -----------------------------------------------------------------------------------------------------
    def _solve(self, backend: Backend, fixed: dict[str, int], **kw: Any) -> dict[str, int] | None:
        t = time.perf_counter()
        out = backend.solve(fixed, time_limit=self.time_limit, **kw)
        self.stats.solves += 1
        self.stats.solve_seconds += time.perf_counter() - t
        if backend.timed_out:
            self.stats.incomplete += 1
        return out

    def _state(self) -> tuple[_State, dict[str, int]]:
        """The state under the current assignment (solved once for satisfiability) and its fixed value indices."""
        fixed = self._fixed()
        key = tuple(sorted(fixed.items()))
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _State()
        if st.sat is None:
            w = self._solve(self._backend, fixed)
            st.sat = w is not None
            if w is not None:
                st.add(w)
        return st, fixed

    def admissible(self, path: str) -> list[Any]:
        """The values of ``path`` that some valid record extending the current assignment has, in domain order."""
        f = self._field(path)
        st, fixed = self._state()
        if not st.sat:
            return []
        if path in self._assigned:
            return [self._assigned[path]]
        if path not in self._scope:
            return list(f.values)
        known = st.witnessed.setdefault(path, set())
        refuted = st.refuted.setdefault(path, set())
        while len(known) + len(refuted) < f.size:
            w = self._solve(self._backend, fixed, excluded={path: sorted(known | refuted)})
            if w is None:
                if not self._backend.timed_out:
                    refuted.update(k for k in range(f.size) if k not in known)
                break
            st.add(w)
            self._repair(path, w, known, refuted)
        return [f.values[k] for k in sorted(known)]

    def _repair(self, path: str, witness: dict[str, int], known: set[int], refuted: set[int]) -> None:
        """Witnesses for free: step ``path`` outward from its value in a solution, alone or together with its
        siblings of the same domain shifted by the same step (an interval moved whole), while every relation that
        reads a changed field still holds (checked in plain Python; the other relations see unchanged values, so each
        record found is a full valid record). Exactness does not depend on this: the solver decides the rest."""
        if path not in self._touching:
            return
        fields = self.spec.fields
        f = fields[path]
        base = {p: fields[p].values[k] for p, k in witness.items()}
        free_siblings = [q for q in self._siblings.get(path, []) if q not in self._assigned]
        moves = [[path], [path, *free_siblings]] if free_siblings else [[path]]
        start = witness[path]
        for step in (1, -1):
            for group in moves:
                checks = list({id(i): i for p in group for i in self._touching.get(p, [])}.values())
                k = start + step
                while 0 <= k < f.size and k not in refuted:
                    delta = k - start
                    shifted = [witness[p] + delta for p in group]
                    if any(not 0 <= j < fields[p].size for p, j in zip(group, shifted)):
                        break
                    values = dict(base)
                    for p, j in zip(group, shifted):
                        values[p] = fields[p].values[j]
                    if not all(inst.relation.check(values) for inst in checks):
                        break
                    known.add(k)
                    k += step

    def prepare(self) -> Session:
        """Compute every field's admissible set under the current assignment now (the root pass a server runs
        while the prompt is prefilled), so that later field opens under this assignment are cache hits."""
        for p in self.spec.fields:
            self.admissible(p)
        return self

    def certain(self) -> dict[str, Any]:
        """Every always-present field whose admissible set is exactly one value (assigned fields included)."""
        out = {}
        for p in self.spec.fields:
            vals = self.admissible(p)
            if len(vals) == 1:
                out[p] = vals[0]
        return out

    def is_satisfiable(self) -> bool:
        return bool(self._state()[0].sat)

    # -- explanations ------------------------------------------------------------------------------------------------
    def explain(self, path: str | None = None, value: Any = None) -> Explanation:
        """Why nothing is admissible now, or why ``value`` is not admissible for ``path``: a minimal set of relations
        and assignments that conflict (deletion-based, so removing any one of them restores a solution)."""
        question = None
        extra: dict[str, Any] = {}
        if path is not None:
            f = self._field(path)
            if value not in f:
                raise InvalidAssignment(f"{value!r} is not in the domain of {path}")
            question = (path, value)
            if path in self._assigned and f.index(self._assigned[path]) != f.index(value):
                raise InvalidAssignment(f"{path} is assigned {self._assigned[path]!r}; ask before assigning")
            extra = {path: value}
        backend = self._explaining_backend()
        fixed = self._fixed(extra)
        rels = [i.number for i in self.instances]
        if self._solve(backend, fixed, enabled=set(rels)) is not None:
            return Explanation(False, [], [], question)
        core_rels, core_fix = set(rels), [p for p in fixed if p != path]
        last = getattr(backend, "last_core", None)
        if last is not None:
            core_rels = {n for kind, n in last if kind == "rel"}
            core_fix = [p for kind, p in last if kind == "fix" and p != path]
        keep_fix = {path: fixed[path]} if path is not None and path in fixed else {}

        def feasible(rs: set[int], fx: list[str]) -> bool:
            return self._solve(backend, {**keep_fix, **{p: fixed[p] for p in fx}}, enabled=rs) is not None

        if feasible(core_rels, core_fix):  # a core that is not one: fall back to everything
            core_rels, core_fix = set(rels), [p for p in fixed if p != path]
        for n in sorted(core_rels):
            if not feasible(core_rels - {n}, core_fix):
                core_rels = core_rels - {n}
        for p in list(core_fix):
            rest = [q for q in core_fix if q != p]
            if not feasible(core_rels, rest):
                core_fix = rest
        by_number = {i.number: i for i in self.instances}
        return Explanation(True, [by_number[n] for n in sorted(core_rels)],
                           [(p, self._assigned[p]) for p in core_fix], question)

    def _explaining_backend(self) -> Backend:
        if self.backend_name != "cpsat":
            return self._backend  # sat has selectors built in; csp builds its problem per call
        if self._explainer is None:
            from .encoders.cpsat import CpsatBackend
            self._explainer = CpsatBackend(self.spec, self.instances, selectors=True)
        return self._explainer

    # -- display -----------------------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Session(backend={self.backend_name!r}, assigned={len(self._assigned)}/{len(self.spec.fields)})"

    def _repr_html_(self) -> str:
        rows = []
        for p in self.spec.fields:
            vals = self.admissible(p)
            shown = ", ".join(map(repr, vals[:8])) + (" ..." if len(vals) > 8 else "")
            mark = "assigned" if p in self._assigned else ("certain" if len(vals) == 1 else "")
            rows.append(f"<tr><td><code>{html.escape(p)}</code></td><td>{len(vals)}</td>"
                        f"<td>{html.escape(shown)}</td><td>{mark}</td></tr>")
        return (f"<b>{html.escape(repr(self))}</b><table><tr><th>field</th><th>#</th><th>admissible</th><th></th>"
                f"</tr>{''.join(rows)}</table>")

    def close(self) -> None:
        self._backend.close()
        if self._explainer is not None:
            self._explainer.close()


def choose_backend(spec: Spec, backend: str | None, instances: Sequence[Instance]) -> tuple[str, str]:
    """The backend to use and why: an explicit choice, else SAT where it encodes within budget, else CP-SAT."""
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
        if backend == "sat" and not spec.has_sat_encoding:
            raise BackendUnsupported("a relation kind has no SAT encoding", hint='use backend="cpsat"')
        return backend, "requested"
    if not spec.has_sat_encoding:
        return "cpsat", "a custom relation kind has no SAT encoding"
    from .encoders.sat import EncodingTooLarge
    try:
        _encoding(spec, instances, cache=True)
    except EncodingTooLarge as e:
        return "cpsat", f"SAT encoding too large: {e}"
    return "sat", "every relation has a SAT encoding within budget"


def _encoding(spec: Spec, instances: Sequence[Instance], cache: bool) -> Any:
    from .encoders.sat import EncodingTooLarge, SatEncoding
    if cache and list(instances) == spec.active_instances:
        hit = spec._encoded.get("sat")
        if isinstance(hit, EncodingTooLarge):
            raise hit
        if hit is None:
            try:
                hit = SatEncoding(spec, instances)
            except EncodingTooLarge as e:
                spec._encoded["sat"] = e
                raise
            spec._encoded["sat"] = hit
        return hit
    return SatEncoding(spec, instances)


def make_backend(spec: Spec, name: str, instances: Sequence[Instance], cache: bool = True) -> Backend:
    if name == "sat":
        from .encoders.sat import EncodingTooLarge, SatBackend
        try:
            return SatBackend(spec, instances, _encoding(spec, instances, cache))
        except EncodingTooLarge as e:
            raise BackendUnsupported(f"the SAT encoding is too large: {e}", hint='use backend="cpsat"') from None
    if name == "cpsat":
        from .encoders.cpsat import CpsatBackend
        return CpsatBackend(spec, instances)
    from .encoders.csp import CspBackend
    return CspBackend(spec, instances)
