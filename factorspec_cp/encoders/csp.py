"""CSP backend (python-constraint2): every relation instance as a function constraint over value indices.

For teaching and as a third opinion in tests: it evaluates each relation's plain-Python ``check``, so it shares no
encoding code with the SAT and CP-SAT backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import constraint

from .base import Allowed, Backend, Excluded, Fixed

if TYPE_CHECKING:
    from ..spec import Instance, Spec


class CspBackend(Backend):
    name = "csp"

    def __init__(self, spec: Spec, instances: Sequence[Instance]):
        super().__init__(spec)
        self.instances = list(instances)
        self.scope = [p for p in spec.fields if p in {q for i in self.instances for q in i.scope}]

    def _constraint(self, inst: Instance) -> Any:
        fields = [self.spec.fields[p] for p in inst.scope]
        rel = inst.relation
        scope = inst.scope

        def holds(*ks: int) -> bool:
            return bool(rel.check({p: f.values[k] for p, f, k in zip(scope, fields, ks)}))

        return constraint.FunctionConstraint(holds)

    def solve(self, fixed: Fixed, excluded: Excluded | None = None, enabled: set[int] | None = None,
              time_limit: float | None = None, *, allowed: Allowed | None = None) -> dict[str, int] | None:
        self.solves += 1
        if not self.scope:
            return {}
        problem = constraint.Problem()
        for p in self.scope:
            if p in fixed:
                dom = [fixed[p]]
                if allowed and p in allowed and not any(a <= fixed[p] <= b for a, b in allowed[p]):
                    return None
            else:
                out = set((excluded or {}).get(p, ()))
                dom = [k for k in range(self.spec.fields[p].size) if k not in out]
                if allowed and p in allowed:
                    dom = [k for k in dom if any(a <= k <= b for a, b in allowed[p])]
            if not dom:
                return None
            problem.addVariable(p, dom)
        for inst in self.instances:
            if enabled is None or inst.number in enabled:
                problem.addConstraint(self._constraint(inst), list(inst.scope))
        sol = problem.getSolution()
        return {p: int(k) for p, k in sol.items()} if sol is not None else None
