"""An incremental session: one request's assignments and the exact admissible domains they leave.

``admissible(f) = {v : some full record extending the assignment with f=v satisfies every relation}``. Every
solution a backend returns marks all its values admissible (a witness), so most probes ask only for values no
witness has shown: per field, one solve per admissible value not yet witnessed, plus one that proves the rest out.
A larger assignment inherits the witnesses that agree with it and every refutation (:mod:`.witnesses`).

Wide fields (minute-level times, date enums) are asked, not listed: ``admissible_among(path, groups)`` says which
groups of values hold an admissible value, with one solve per group no witness answers plus one that refutes the
rest together; the decoder asks it for the values under each next byte (:meth:`Session.questions`).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from mypy_extensions import mypyc_attr

from .checks import NARROWED, compile_narrowing
from .difference import DifferenceModel
from .encoders.base import Backend
from .errors import BackendUnsupported, InvalidAssignment
from .relations import Table
from .repair import WIDE_REPAIR_STEPS, WIDE_REPAIR_TRIES, Repairer, compile_checks
from .schema import jkey
from .witnesses import Interval, Known, Run, State, clip, from_indices, restrict, span

if TYPE_CHECKING:
    from .spec import Spec
from .spec import Instance

BACKENDS = ("sat", "cpsat", "csp")
#: Fields wider than this are asked piecewise by the decoder and left out of :meth:`Session.prepare` (decoding
#: random records of two clock-string fields and one integer: lists and questions cost the same at 32 values,
#: questions 25% less at 64 and 45% less at 256; no workload field has between 20 and 2,000 values).
WIDE_DOMAIN = 40
#: Before solving for a question, the latest this many solver witnesses are moved into the groups asked
#: (1: 15% fewer solves on meeting planning; more: none fewer).
WIDE_REUSE = 1
#: Before the first solve of a wide field's question, its least and greatest admissible values are asked (two
#: optimizations, each giving a witness) and all outside them refuted; the asked groups then take what repairing those
#: two witnesses finds. (Over 40 meeting problems, bounding after a first witness: 1,025 solves instead of 1,099 and
#: the open p99 about 15% lower, min of 3 runs. Bounding first instead: a solve fewer where one group holds every
#: admissible value; 20 meeting gold walks 655 -> 593 solves.)
WIDE_BOUNDS = True
#: A field's values that a relation rules out on its own under the assignment are refuted without a solve, before
#: the first solve about the field under it (node consistency, :func:`~factorspec_cp.checks.narrowing`).
NARROW = True
#: A new state inherits from the largest of the last this many states whose assignment it extends, where that is
#: larger than the largest prefix of its own assignment order: a decoder assigns certain values late and in record
#: order, so the state its planner asked a field's questions under is often not such a prefix (meeting planning:
#: each start field was asked twice, once before and once after its entry's certain person, place and meeting).
RECENT_PARENTS = 8
#: Fields of a difference component (:mod:`.difference`: meeting planning's times and ``meet`` flags) are answered by
#: its exact search, not by solves, wherever it stays within its budget.
DIFFERENCE = True


@dataclass
class Stats:
    solves: int = 0
    solve_seconds: float = 0.0
    incomplete: int = 0  # probes cut by the time budget: the value was not admitted (sound, maybe incomplete)
    difference: int = 0  # admissible sets answered by a difference component's search (no solve)
    difference_seconds: float = 0.0
    difference_nodes: int = 0
    difference_fallbacks: int = 0  # ... left to the solver (too many candidates, or past the search budget)


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
        from .display import explanation_html
        return explanation_html(self)


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
        self._indices: dict[str, int] = {}  # value indices of the assigned fields that relations read
        # what pop() returns to: after a push, how many fields were assigned (assign only adds, so pop drops the
        # last ones: dicts keep insertion order); after _enter, the dicts it replaced. And the key then.
        self._stack: list[tuple[int, int, tuple[tuple[str, int], ...] | None, dict[str, Any] | None,
                                dict[str, int] | None]] = []
        self._fkey: tuple[tuple[str, int], ...] | None = ()  # :meth:`fixed_key`, kept until the assignment changes
        self._states: dict[tuple[tuple[str, int], ...], State] = {}
        self._last: tuple[Any, State] = (None, State({}))  # the last key object _state looked up, and its state
        self._recent: deque[State] = deque(maxlen=RECENT_PARENTS)  # the states made last (parents, :meth:`_derive`)
        self._scope = set(p for i in instances for p in i.scope)
        self._paths = [p for p in spec.fields if p in self._scope]  # the order of a record's value indices
        self._pos = {p: k for k, p in enumerate(self._paths)}
        self.wide_domain = WIDE_DOMAIN
        self._wide: dict[str, tuple[int, bool]] = {}  # :meth:`wide`'s answers, with the wide_domain they hold under
        self._repairer = Repairer.of(spec, instances, self._paths, cache=_relations is None)
        self._difference = DifferenceModel.of(spec, instances, cache=_relations is None) if DIFFERENCE else None
        self._parts: dict[tuple[Any, ...], bytes] = {}  # complete knowledge per (field, its component's assignment)
        self._parts_kept = 1  # the store's generation (Known.kept), one more at each clear
        # the fields with one admissible value under the empty assignment, complete (each its value's index): under
        # any satisfiable assignment the same one value, as every assignment extends the empty one and a record
        # under it has some value there (a meeting's person and location: asked at every entry a run writes)
        self._root: dict[str, int] = {}
        # the declaration's fields by pointer (a look-up at every assignment and question: through the spec's Python
        # objects, two attribute reads and a method call each)
        self._fieldmap: dict[str, Any] = spec.compiled.fields
        if _check and not self._state()[0].sat:
            raise spec.unsatisfiable()

    @property
    def backend(self) -> str:
        """The backend in use: "sat", "cpsat" or "csp" (``backend_reason`` says why, for the default)."""
        return self.backend_name

    # -- assignments -------------------------------------------------------------------------------------------------
    def _field(self, path: str) -> Any:
        f = self._fieldmap.get(path)
        if f is None:
            if path in self.spec.compiled.free:
                raise InvalidAssignment(f"{path} is a free field (no finite domain)")
            hint = self.spec.compiled.suggest(path)
            raise InvalidAssignment(f"{path} is not a field of this declaration" + (f"; {hint}" if hint else ""))
        return f

    def assign(self, path: str, value: Any) -> None:
        """Fix a field to a value of its domain. Any domain value is accepted (then nothing may be admissible)."""
        f = self._field(path)
        k = -1
        table = f._index  # the field's own index by jkey, once built (by Field.index): a string's and a boolean's
        if table is not None:  # jkey written here, without the two calls (a decoder assigns each value it writes)
            if type(value) is str:
                k = table.get(("s", value), -1)
            elif type(value) is bool:
                k = table.get(("b", value), -1)
        if k < 0:
            try:
                k = f.index(value)
            except KeyError:
                raise InvalidAssignment(f"{value!r} is not in the domain of {path}") from None
        if path in self._assigned:
            if f.index(self._assigned[path]) != k:
                raise InvalidAssignment(f"{path} is already assigned {self._assigned[path]!r}; use push()/pop()")
            return
        self._assigned[path] = value
        if path in self._scope:
            if self._root.get(path, -1) == k:  # the one value it has under the empty assignment (:attr:`_root`):
                return  # it decides nothing, so the key, the states and their knowledge stay (a meeting's person)
            self._indices[path] = k
            key = self._fkey  # the sorted key with one more item: a copy in C, not a sort (a decoder asks it per token)
            if key is not None:
                # where it goes: the pointers are distinct, so the order is theirs (a bisection here on the pointers,
                # compiled; bisect_left on the pairs was a generic call comparing tuples, 1,300 instructions)
                lo, hi = 0, len(key)
                while lo < hi:
                    mid = (lo + hi) // 2
                    if key[mid][0] < path:
                        lo = mid + 1
                    else:
                        hi = mid
                key = key[:lo] + ((path, k),) + key[lo:]
            self._fkey = key

    def push(self) -> None:
        """Save the assignment; :meth:`pop` returns to it. Kept as the number of fields assigned, not a copy: until
        that pop, :meth:`assign` only adds fields (a decoder pushes at every token that completes a value, and copies
        of a record's assignment cost their size each time, and as many objects for the garbage collector)."""
        self._stack.append((len(self._assigned), len(self._indices), self._fkey, None, None))

    def _extended(self, extra: Sequence[tuple[str, Any]]) -> tuple[dict[str, Any], dict[str, int], Any]:
        """The assignment with ``extra`` (path, value) pairs assigned too, as :meth:`_enter` takes it: a decoder asks
        several fields under one extension (a planner's filter), entering it for each question instead of a push and
        the assignments each time (and the session's look-ups then find its key object again)."""
        self.push()
        try:
            for p, v in extra:
                self.assign(p, v)
            self.fixed_key()
            return dict(self._assigned), dict(self._indices), self._fkey
        finally:
            self.pop()

    def _enter(self, extended: tuple[dict[str, Any], dict[str, int], Any]) -> None:
        """Save the assignment and take ``extended`` (:meth:`_extended`) until :meth:`pop`. For questions only:
        nothing may be assigned or pushed before that pop (the extension's dicts are shared, not copied)."""
        self._stack.append((0, 0, self._fkey, self._assigned, self._indices))
        self._assigned, self._indices, self._fkey = extended[0], extended[1], extended[2]

    def pop(self) -> None:
        if not self._stack:
            raise InvalidAssignment("pop() without a matching push()")
        n_assigned, n_indices, self._fkey, assigned, indices = self._stack.pop()
        if assigned is not None and indices is not None:  # (an _enter's)
            self._assigned, self._indices = assigned, indices
            return
        assigned, indices = self._assigned, self._indices
        while len(assigned) > n_assigned:  # the fields assigned since the push: the last ones inserted
            assigned.popitem()
        while len(indices) > n_indices:
            indices.popitem()

    def fixed_key(self) -> tuple[tuple[str, int], ...]:
        """The assigned value indices of the fields relations read, sorted: a key for what the assignment decides
        (kept between changes: a decoder asks it at every token)."""
        key = self._fkey
        if key is None:
            key = self._fkey = tuple(sorted(self._indices.items()))
        return key

    @property
    def assignment(self) -> dict[str, Any]:
        return dict(self._assigned)

    def _fixed(self, extra: dict[str, Any] | None = None) -> dict[str, int]:
        """The assigned value indices of the fields relations read, in assignment order (``extra`` last)."""
        if not extra:
            return dict(self._indices)
        items = dict(self._assigned, **extra)
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

    def _state(self, fixed: dict[str, int] | None = None) -> tuple[State, dict[str, int]]:
        """The state under ``fixed`` (default: the current assignment), solved once for satisfiability unless an
        extended assignment's witness or refutation already decides it."""
        if fixed is None:  # the current assignment: its key is kept between changes
            key = self.fixed_key()
            last = self._last
            if last[0] is key and last[1].sat is not None:  # (the questions of one position: no key to hash)
                return last[1], last[1].fixed
            st = self._states.get(key)
            if st is not None and st.sat is not None:
                self._last = (key, st)
                return st, st.fixed
            fixed = self._fixed()
        else:
            key = tuple(sorted(fixed.items()))
            st = self._states.get(key)
        if st is None:
            st = self._states[key] = self._derive(fixed, key)
        if st.sat is None:
            w = self._solve(self._backend, fixed)
            st.sat = w is not None
            if w is not None:
                self._add(st, w)
        return st, fixed

    def _derive(self, fixed: dict[str, int], key: tuple[tuple[str, int], ...]) -> State:
        """A new state, inheriting from the largest known assignment it extends, found among the prefixes of its
        assignment order (dropping the latest fields first) and the states made last: the runs that agree with the
        extra fields, and (through ``parent``) every refutation. Any extended assignment is sound: its valid records
        that agree with the extra fields are valid here, and what it refutes is refuted here. ``key``: ``fixed``'s
        sorted items (:meth:`fixed_key`)."""
        total = len(fixed)
        parent = None
        left = list(key)  # the key less the latest fields, one more dropped per step (each by a bisection: no sort)
        for item in reversed(fixed.items()):  # (the latest first; most finds stop after one or two: no list made)
            del left[bisect_left(left, item)]
            parent = self._states.get(tuple(left))
            if parent is not None:
                break
        size = -1 if parent is None else len(parent.fixed)
        for st in self._recent if size < total - 1 else ():  # (none is larger than one less)
            n = len(st.fixed)
            if size < n < total and st.fixed.items() <= fixed.items():  # (a subset test of items, in C)
                parent, size = st, n
        if parent is None:
            st = State(dict(fixed))
        else:
            pf = parent.fixed
            extra = [(p, k) for p, k in fixed.items() if p not in pf]
            # the extra values the parent knows certain (a decoder writes a certain `meet: true` as it goes): every
            # valid record extending the parent has them, so they add nothing
            root = self._root  # (or certain under the empty assignment)
            certain = [(p, k) for p, k in extra if root.get(p, -1) == k or self._certain(parent, p, k)] \
                if parent.sat else []
            if certain and len(certain) == len(extra):
                return parent  # the same valid records: the same answers, its knowledge reused, nothing searched
            rest = [e for e in extra if e not in certain] if certain else extra
            runs = [r for r in (restrict(run, [(self._pos[p], k) for p, k in extra]) for run in parent.runs)
                    if r is not None]
            st = State(dict(fixed), runs=runs, parent=parent)
            if runs:
                st.sat = True
            elif parent.sat is False or any(self._refuted(parent, p, k) for p, k in extra):
                st.sat = False
            elif len(rest) == 1 and self._witnessed(parent, *rest[0]):
                st.sat = True  # the parent knows the value admissible: a valid record extends the assignment
            elif parent.sat and self._difference is not None:
                st.sat = self._components_sat(parent, rest, st)
        self._recent.append(st)
        return st

    def _components_sat(self, parent: State, extra: Sequence[tuple[str, int]], st: State) -> bool | None:
        """Whether ``fixed``, which extends the satisfiable ``parent`` by ``extra``, is satisfiable: components
        never interact, so it is iff each component an extra field is in has a record under its part of ``fixed``.
        A difference component asks its search; another one has a record where ``parent`` knows its one extra value
        admissible, or where a record of ``parent`` or of an assignment it extends agrees with every assigned field of
        the component (its part is a record of the component). ``None`` where none of these decides. ``st``: the new
        state (``fixed``), which keeps the candidates each search left."""
        dm = self._difference
        assert dm is not None  # (asked only with a difference model)
        fixed = st.fixed
        by_root: dict[Any, list[tuple[str, int]]] = {}
        for p, k in extra:
            by_root.setdefault(dm.part.get(p, p), []).append((p, k))
        searched = []
        for group in by_root.values():
            if dm.component(group[0][0]) is not None:
                searched.append(group[0][0])
            elif not (len(group) == 1 and self._witnessed(parent, *group[0])):
                root = dm.part.get(group[0][0])
                at = [(self._pos[p], k) for p, k in fixed.items() if dm.part.get(p) == root]
                up: State | None = parent
                for _ in range(64):
                    if up is None or any(restrict(run, at) is not None for run in up.runs):
                        break
                    up = up.parent
                if up is None or not any(restrict(run, at) is not None for run in up.runs):
                    return None
        for p in searched:
            t = time.perf_counter()
            root = dm.part[p]
            res = dm.satisfiable(p, fixed, _live(parent, root))
            self.stats.difference_seconds += time.perf_counter() - t
            if res is None:
                self.stats.difference_fallbacks += 1
                return None
            self.stats.difference += 1
            st.rows[root] = res[1]
            if not res[0]:
                return False
        return True

    @staticmethod
    def _certain(st: State, path: str, k: int) -> bool:
        """Whether ``st`` knows ``k`` is the one admissible value of ``path`` (every valid record extending it has
        it)."""
        known = st.known.get(path)
        return known is not None and known.known == 1 and known.complete and known.status[k] == 1

    @staticmethod
    def _witnessed(st: State, path: str, k: int) -> bool:
        known = st.known.get(path)
        return known is not None and known.status[k] == 1

    def _refuted(self, st: State, path: str, k: int) -> bool:
        known = st.known.get(path) or st.ancestor_known(path)
        return known is not None and known.status[k] == 2

    def _known(self, st: State, path: str) -> Known:
        """What ``st`` knows of ``path``: its runs' values witnessed, its ancestors' refutations kept."""
        known = st.known.get(path)
        if known is None:
            known = st.known[path] = Known(self.spec.fields[path].size, st.ancestor_known(path))
            pos = self._pos[path]
            for run in st.runs:
                known.mark(*span(run, pos))
        return known

    def _settle(self, st: State, path: str, known: Known) -> bool:
        """Make ``known`` complete with the exact search of ``path``'s difference component, where it has one and
        the search answers (:mod:`.difference`); ``st`` must be satisfiable. Returns whether it did."""
        dm = self._difference
        if dm is None or known.complete or known.searched:
            return known.complete
        known.searched = True  # once per field and state: a miss, or a search past its budget, is not asked again
        part = None
        if dm.split:  # one component: the key is the state's own, whose knowledge is kept with it
            part = dm.part_key(path, st.fixed, st.parts)
            hit = self._parts.get(part)
            if hit is not None:  # the same assignment of its component, elsewhere: the same admissible values
                known.status[:] = hit
                known.known, known.refuted = hit.count(1), hit.count(2)
                return True
        if dm.component(path) is None:
            return False
        t = time.perf_counter()
        root = dm.part[path]
        res = dm.admissible(path, st.fixed, _live(st, root))
        self.stats.difference_seconds += time.perf_counter() - t
        if res is None:
            self.stats.difference_fallbacks += 1
            return False
        ivs, nodes, st.rows[root] = res
        self.stats.difference += 1
        self.stats.difference_nodes += nodes
        known.exactly(ivs)  # (what it knew agrees: a witnessed value lies in them, a refuted one outside)
        self._keep(st, path, known, part)
        return True

    def _keep(self, st: State, path: str, known: Known, part: Any = None) -> None:
        """Keep a complete knowledge of ``path`` for every state with its component's assignment (:meth:`_settle`,
        which passes the key it looked up, ``part``). Once per knowledge object and generation of the store (``known``
        is ``st``'s knowledge of ``path``, so its key never changes): each answer for a narrow field asked again under
        one assignment computed the key again, 1% of a meeting walk's instructions."""
        if self._difference is not None and self._difference.split and known.complete and \
                known.kept != self._parts_kept:
            if len(self._parts) > 65536:
                self._parts.clear()
                self._parts_kept += 1
            key = part if part is not None else self._difference.part_key(path, st.fixed, st.parts)
            if key not in self._parts:
                self._parts[key] = bytes(known.status)
            known.kept = self._parts_kept

    def _narrow(self, st: State, path: str, known: Known) -> None:
        """Refute, without a solve, the values of ``path`` that a relation rules out on its own under ``st``'s
        assignment and the fields known to be certain there (:func:`~factorspec_cp.checks.narrowing`: a pinned
        entry's person, a time outside its window, the start of someone not met, whose certain ``meet: false`` the
        decoder has not written yet). Sound: every valid record satisfies each relation, and has the certain
        values. Done once per field and assignment, and only where a solve would come next (where witnesses already
        answer, it would cost more than it saves: on trip planning a tenth of a millisecond per field)."""
        if known.narrowed or not NARROW or path in st.fixed:
            return
        known.narrowed = True
        narrows = self._repairer.narrows.get(path)  # kept per declaration, with its repairer
        if narrows is None:  # (relation, the other fields it reads, whether it is a table: projected with them free)
            narrows = self._repairer.narrows[path] = [
                (inst.relation, [p for p in dict.fromkeys(inst.scope) if p != path], type(inst.relation) is Table)
                for inst in self._repairer.touching.get(path, ()) if type(inst.relation) in NARROWED]
        fixed = st.fixed  # and, as if assigned, the fields known to be certain under st or an assignment it extends:
        allowed = None  # every valid record extending st has their one value (a decoder assigns them as it writes)
        for rel, others, table in narrows:
            for p in others:
                if p not in fixed:
                    k = st.known.get(p) or st.ancestor_known(p)  # (certain under an assignment st extends)
                    if k is not None and k.known == 1 and k.complete:
                        fixed = dict(fixed) if fixed is st.fixed else fixed
                        fixed[p] = k.status.index(1)
                    elif not table:
                        break  # decides nothing yet: not even compiled (most relations, early in a record)
            else:
                others = ()
            if others and not table:
                continue
            m = compile_narrowing(self.spec, rel)(path, fixed)
            if m is not None:
                allowed = m if allowed is None else allowed & m
        if allowed is None or allowed.all():
            return
        out = np.flatnonzero(~allowed)
        cut = np.flatnonzero(out[1:] - out[:-1] != 1)  # runs of ruled-out indices, as intervals
        known.refute(zip(out[np.concatenate(([0], cut + 1))].tolist(), out[np.append(cut, out.size - 1)].tolist()))

    def _add(self, st: State, witness: dict[str, int], group: tuple[int, ...] = (), lo: int = 0,
             hi: int = 0, base: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Record a run (a solver's witness, or a repaired one) and mark its values in every field asked so far."""
        if base is None:
            base = tuple(witness[p] for p in self._paths)
        run: Run = (base, group, lo, hi)
        st.runs.append(run)
        pos = self._pos
        for p, known in st.known.items():
            known.mark(*span(run, pos[p]))
        return base

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
        k = self._root.get(path, -1)
        if k >= 0:
            return [f.values[k]]
        known = self._complete(st, path)
        return [f.values[k] for k in known.known_indices()]

    def admissible_mask(self, path: str) -> bytes:
        """What :meth:`admissible` lists, as one byte per domain value: ``m[k] == 1`` exactly where the ``k``-th
        value is admissible. Equal masks mean equal admissible sets, so a decoder keys its rows on them.

        >>> import factorspec_cp as fs
        >>> spec = fs.Spec({"type": "object", "required": ["x"], "properties": {
        ...     "x": {"type": "integer", "minimum": 0, "maximum": 3}}}, [fs.Compare("/x", ">=", 2)])
        >>> spec.session().admissible_mask("/x")
        b'\\x00\\x00\\x01\\x01'
        """
        f = self._field(path)
        st, _ = self._state()
        if not st.sat:
            return bytes(f.size)
        if path in self._assigned:
            out = bytearray(f.size)
            out[f.index(self._assigned[path])] = 1
            return bytes(out)
        if path not in self._scope:
            return b"\x01" * f.size
        k = self._root.get(path, -1)
        if k >= 0:
            out = bytearray(f.size)
            out[k] = 1
            return bytes(out)
        return self._complete(st, path).mask()

    def _complete(self, st: State, path: str) -> Known:
        """What ``st`` knows of ``path`` (in scope, not assigned), every value witnessed or refuted: one solve per
        admissible value no witness has shown, plus one that refutes the rest (fewer where the time budget ends
        it: then only the witnessed values are known to be admissible)."""
        known = self._known(st, path)
        n, status = known.size, known.status
        if known.refuted == n - 1 and not known.known and st.sat:  # one value not refuted, under a satisfiable
            known.mark(*(2 * (status.find(0),)))  # assignment: every valid record extending it has that value
        if not known.complete and not self._settle(st, path, known):
            self._narrow(st, path, known)
        while not known.complete:
            if n <= self.wide_domain:  # a short list of what is known: the cheaper question for a narrow field
                w = self._solve(self._backend, st.fixed, excluded={path: [k for k in range(n) if status[k]]})
            else:
                w = self._solve(self._backend, st.fixed, allowed={path: known.unknown([(0, n - 1)])})
            if w is None:
                if not self._backend.timed_out:
                    known.refute([(0, n - 1)])
                break
            self._repair(st, path, self._add(st, w))
        if not self._backend.timed_out:
            self._keep(st, path, known)
            if not st.fixed and known.complete and known.known == 1:
                self._root[path] = known.status.index(1)
        return known

    def wide(self, path: str) -> bool:
        """Whether ``path`` is a field read by relations with more than ``wide_domain`` values: one the decoder asks
        piecewise (:meth:`questions`) rather than as a whole admissible list."""
        wide_domain = self.wide_domain
        hit = self._wide.get(path)  # (a decoder asks it of each field at every value it writes: a field's size and
        if hit is not None and hit[0] == wide_domain:  # the declaration's fields are Python look-ups)
            return hit[1]
        f = self.spec.fields.get(path)
        out = f is not None and path in self._scope and f.size > wide_domain
        self._wide[path] = (wide_domain, out)
        return out

    def questions(self, path: str) -> FieldQuestions:
        """Piecewise questions about ``path`` under the current assignment (kept bound to it: later assignments do
        not change its answers). The decoder's filter asks these for wide fields."""
        f = self._field(path)
        st, _ = self._state()
        if path not in self._scope:  # no relation reads it: its assignment is not part of the state
            return FieldQuestions(self, path, st, f.index(self._assigned[path]) if path in self._assigned else None)
        q = st.questions.get(path)
        if q is None:
            q = st.questions[path] = FieldQuestions(self, path, st)
        return q

    def admissible_among(self, path: str, groups: Sequence[Any]) -> list[bool]:
        """For each group of values of ``path`` (an iterable of values, or a ``range`` for an integer field): whether
        some value of it is admissible under the current assignment. Exact like :meth:`admissible`, without
        listing the field: one solve per group no witness answers, plus one that refutes the rest together.

        >>> import factorspec_cp as fs
        >>> spec = fs.Spec({"type": "object", "required": ["t"], "properties": {
        ...     "t": {"type": "integer", "minimum": 0, "maximum": 999}}}, [fs.Compare("/t", ">=", 500)])
        >>> spec.session().admissible_among("/t", [range(0, 100), range(400, 600), [7, 8]])
        [False, True, False]
        """
        return self.questions(path).among([self._intervals(self._field(path), g) for g in groups])

    def any_admissible(self, path: str, values: Any) -> bool:
        """Whether some value of ``values`` (an iterable of values, or a ``range``) is admissible for ``path``."""
        return self.admissible_among(path, [values])[0]

    @staticmethod
    def _intervals(f: Any, group: Any) -> list[Interval]:
        dom = f.values
        if isinstance(group, range) and isinstance(dom, range):
            if not group or not dom:
                return []
            if group.step == 1 and dom.step > 0:  # an interval of values: index bounds by arithmetic
                first = -(-(group.start - dom.start) // dom.step)
                last = (group[-1] - dom.start) // dom.step
                return clip([(first, last)], len(dom))
        ks = []
        for v in group:
            try:
                ks.append(f.index(v))
            except KeyError:
                continue
        return from_indices(ks)

    def _among(self, path: str, st: State, groups: Sequence[Sequence[Interval]],
               unscoped: int | None = None) -> list[bool]:
        """For each group of value indices (inclusive intervals), whether an admissible value lies in it under
        ``st``'s assignment (a state from :meth:`_state`, so its satisfiability is known). Witnessed and refuted
        values answer first; the rest are asked together: a witness in their union answers its group (and its
        repairs may answer others), no witness refutes them all. A wide field is bounded once (its least and greatest
        admissible values) before its first solve."""
        f = self._field(path)
        groups = [clip(g, f.size) for g in groups]
        fixed = st.fixed
        if not st.sat:
            return [False] * len(groups)
        if path in fixed:
            k = fixed[path]
            return [any(a <= k <= b for a, b in g) for g in groups]
        if path not in self._scope:  # every value, or the one assigned
            return [bool(g) if unscoped is None else any(a <= unscoped <= b for a, b in g) for g in groups]
        known = self._known(st, path)
        if not known.complete:
            self._settle(st, path, known)
        if known.complete:  # every value witnessed or refuted: a look at each group (clipped above)
            find = known.status.find
            return [any(find(1, a, b + 1) >= 0 for a, b in g) for g in groups]
        out = [False] * len(groups)
        pending = []
        for i, g in enumerate(groups):
            if known.any_known(g):
                out[i] = True
            elif not known.complete and known.unknown(g):
                pending.append(i)
        if pending and not known.narrowed:  # a solve may come: first what the relations rule out on their own
            self._narrow(st, path, known)
            pending = [i for i in pending if known.unknown(groups[i])]
        if pending and WIDE_REUSE:  # move witnesses already found into the groups asked, before any solve
            bases = [r[0] for r in st.runs if not r[1]][-WIDE_REUSE:]
            for base in reversed(bases):
                self._repair(st, path, base, [groups[i] for i in pending])
                pending = [i for i in pending if not known.any_known(groups[i])]
                if not pending:
                    break
            for i in range(len(groups)):
                out[i] = out[i] or known.any_known(groups[i])
        if pending and WIDE_BOUNDS and f.size > self.wide_domain and not known.bounded:  # bounds first (witnesses)
            n = len(st.runs)
            self._bound(st, path, known)
            for run in st.runs[n:]:
                self._repair(st, path, run[0], [groups[i] for i in pending])
            for i in pending:
                out[i] = known.any_known(groups[i])
            pending = [i for i in pending if not out[i] and known.unknown(groups[i])]
        while pending:
            allowed = sorted(iv for i in pending for iv in known.unknown(groups[i]))
            if known.known == 1 and not known.probed:  # maybe certain: then one solve over every value settles all
                allowed = known.unknown([(0, f.size - 1)])
            known.probed = True
            w = self._solve(self._backend, fixed, allowed={path: allowed})
            if w is None:
                if not self._backend.timed_out:
                    known.refute(allowed)
                break  # pending groups stay False: refuted, or (past the time budget) not admitted
            self._repair(st, path, self._add(st, w), [groups[i] for i in pending])
            for i in pending:
                out[i] = known.any_known(groups[i])
            pending = [i for i in pending if not out[i] and known.unknown(groups[i])]
        return out

    def _settled(self, path: str, st: State, unscoped: int | None = None) -> bytes | None:
        """:meth:`FieldQuestions.settled` (``st`` from :meth:`_state`, so its satisfiability is known)."""
        size = self._field(path).size
        if not st.sat:
            return bytes(size)
        k = st.fixed.get(path, unscoped)
        if k is not None or path not in self._scope:
            if k is None:
                return b"\x01" * size
            out = bytearray(size)
            out[k] = 1
            return bytes(out)
        known = self._known(st, path)
        if not known.complete:
            self._settle(st, path, known)
        return known.mask() if known.complete else None

    def _bound(self, st: State, path: str, known: Known) -> None:
        """The least and greatest admissible values of a wide field (a proven optimization for each, where the
        backend optimizes): both witnessed, everything outside them refuted. An end already witnessed with all
        beyond it refuted (an ancestor's bound, narrowing and a repaired witness) is not asked again."""
        known.bounded = True
        ends = known.ends()
        if ends is None:
            return
        least, greatest = known.status[ends[0]] != 1, known.status[ends[1]] != 1
        if not (least or greatest):
            return
        t, n = time.perf_counter(), self._backend.solves
        res = self._backend.bounds(st.fixed, path, time_limit=self.time_limit, least=least, greatest=greatest)
        self.stats.solves += self._backend.solves - n
        self.stats.solve_seconds += time.perf_counter() - t
        if self._backend.timed_out:
            self.stats.incomplete += 1
        if res is None:
            return
        pos = self._pos[path]
        if res[0] is not None:
            known.refute([(0, self._add(st, res[0])[pos] - 1)])
        if res[1] is not None:
            known.refute([(self._add(st, res[1])[pos] + 1, known.size - 1)])

    def _repair(self, st: State, path: str, base: tuple[int, ...],
                targets: Sequence[Sequence[Interval]] | None = None) -> None:
        """Witnesses for free around ``base`` (:mod:`.repair`): for a full list, every step that stays valid; for
        a question about a wide field (``targets``), a few steps and each asked group's nearest values."""
        def add(positions: tuple[int, ...], lo: int, hi: int) -> None:
            self._add(st, {}, positions, lo, hi, base)

        known = self._known(st, path)
        if targets is None or self.spec.fields[path].size <= self.wide_domain:
            self._repairer.repair(path, base, st.fixed, known, add, tries=WIDE_REPAIR_TRIES, targets=targets or ())
        else:
            self._repairer.repair(path, base, st.fixed, known, add, steps=WIDE_REPAIR_STEPS, tries=WIDE_REPAIR_TRIES,
                                  targets=targets)

    def prepare(self) -> Session:
        """Compute every narrow field's admissible set under the current assignment now (the root pass a server runs
        while the prompt is prefilled), so that later field opens under this assignment are cache hits. Wide fields
        (:meth:`wide`) are left to the questions the decoder asks."""
        for p, f in self.spec.fields.items():
            if len(f.values) <= self.wide_domain or p not in self._scope:
                self.admissible(p)
        return self

    def certain(self) -> dict[str, Any]:
        """Every always-present field whose admissible set is exactly one value (assigned fields included). Wide
        fields are not listed: two witnesses show one is not certain, one solve that one is."""
        out = {}
        for p in self.spec.fields:
            if self.wide(p) and p not in self._assigned:
                v = self._certain_wide(p)
                if v is not _NONE:
                    out[p] = v
                continue
            vals = self.admissible(p)
            if len(vals) == 1:
                out[p] = vals[0]
        return out

    def _certain_wide(self, path: str) -> Any:
        st, fixed = self._state()
        if not st.sat:
            return _NONE
        known = self._known(st, path)
        if not known.complete:
            self._settle(st, path, known)
        while known.known < 2 and not known.complete:
            allowed = known.unknown([(0, known.size - 1)])
            w = self._solve(self._backend, fixed, allowed={path: allowed})
            if w is None:
                if self._backend.timed_out:
                    return _NONE
                known.refute(allowed)
                break
            self._add(st, w)
        ks = known.known_indices() if known.known == 1 and known.complete else []
        return self.spec.fields[path].values[ks[0]] if ks else _NONE

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
        for inst in self.instances:  # a relation that admits nothing on its own is a minimal conflict by itself
            if _pigeonhole(inst, self.spec.fields):
                return Explanation(True, [inst], [], question)
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
        core_rels = set(_shrink(sorted(core_rels), lambda rs: feasible(set(rs), core_fix)))
        core_fix = _shrink(list(core_fix), lambda fx: feasible(core_rels, fx))
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
        from .display import session_html
        return session_html(self)

    def close(self) -> None:
        self._backend.close()
        if self._explainer is not None:
            self._explainer.close()


def _live(st: State | None, root: Any) -> Any:
    """The candidates of a difference component (``root``) that the nearest search under ``st``'s assignment, or under
    one it extends, did not refute (:class:`~.difference.Rows`; ``None``: none searched yet)."""
    for _ in range(64):
        if st is None:
            return None
        hit = st.rows.get(root)
        if hit is not None:
            return hit
        st = st.parent
    return None


def _pigeonhole(inst: Instance, fields: Any) -> bool:
    """An all_different over more fields than their domains have values (no solver needed to see it)."""
    from .relations import AllDifferent
    rel = inst.relation
    if not isinstance(rel, AllDifferent):
        return False
    scope = list(dict.fromkeys(inst.scope))
    if any(fields[p].size >= len(scope) for p in scope):
        return False
    values: set[Any] = set()
    for p in scope:
        values.update(jkey(v) for v in fields[p].values)
        if len(values) >= len(scope):
            return False
    return True


def _shrink(items: list[Any], feasible: Callable[[list[Any]], bool]) -> list[Any]:
    """A minimal sublist of ``items`` (infeasible as a whole) that stays infeasible: deletion in halving chunks,
    so a core of k members among n costs about k log n solves instead of n (a 600-relation declaration whose
    conflict is one relation explains in a dozen solves). ``feasible(sub)`` solves with ``sub`` alone."""
    keep: list[Any] = []
    rest = list(items)
    while rest:
        size = len(rest)
        while size >= 1:
            if not feasible(keep + rest[size:]):  # rest[:size] is not needed
                rest = rest[size:]
                break
            size //= 2
        else:  # dropping rest[0] alone restores feasibility: it belongs to the core
            keep.append(rest[0])
            rest = rest[1:]
    return keep


_NONE: Final[Any] = object()


@mypyc_attr(native_class=False)  # (compiled: a Python class, whose methods bench breakdown wraps; a layout keeps
# its asked slots in it, :attr:`slots`, and other questions objects' in a weak map)
class FieldQuestions:
    """Piecewise questions about one field under one assignment (from :meth:`Session.questions`): what a decoder
    asks of a wide field instead of its whole admissible list. Groups are lists of inclusive ``(first, last)``
    value-index intervals; answers are exact and cached in the session like :meth:`Session.admissible`'s."""

    def __init__(self, session: Session, path: str, state: State, unscoped: int | None = None):
        self.session, self.path, self._state, self._unscoped = session, path, state, unscoped
        self.size = session._field(path).size
        # a layout's slots over these questions (``_AskedSlot``, by the id of the matcher each holds), kept with them
        self.slots: dict[int, Any] = {}

    def among(self, groups: Sequence[Sequence[Interval]]) -> list[bool]:
        """For each group, whether some admissible value's index lies in it."""
        return self.session._among(self.path, self._state, groups, self._unscoped)

    @property
    def values(self) -> Any:
        """The field's domain, in the order the groups' indices refer to."""
        return self.session._field(self.path).values

    def settled(self) -> bytes | None:
        """One byte per domain value, 1 exactly where it is admissible, where that is known without a solve: the
        field is settled by its difference component's search (:mod:`.difference`), or already known in full.
        ``None`` otherwise (ask :meth:`among`)."""
        return self.session._settled(self.path, self._state, self._unscoped)

    def __repr__(self) -> str:
        return f"FieldQuestions({self.path!r}, {len(self._state.fixed)} fixed)"


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
            raise EncodingTooLarge(*hit.args)  # a new one: raising the kept one would grow its traceback each time
        if hit is None:
            try:
                hit = SatEncoding(spec, instances)
            except EncodingTooLarge as e:
                # kept without its traceback, whose frames would hold the first session (and its decoder) for the
                # declaration's life
                spec._encoded["sat"] = EncodingTooLarge(*e.args)
                raise
            spec._encoded["sat"] = hit
            compile_checks(spec, instances)
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
        from .encoders.cpsat import CpsatBackend, CpsatModel
        model = None
        if cache and list(instances) == spec.active_instances:  # one model per declaration, copied per session
            model = spec._encoded.get("cpsat")
            if model is None:
                model = spec._encoded["cpsat"] = CpsatModel(spec, instances)
                compile_checks(spec, instances)
        return CpsatBackend(spec, instances, model=model)
    from .encoders.csp import CspBackend
    return CspBackend(spec, instances)
