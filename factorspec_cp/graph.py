"""The factor graph of a declaration: variables (fields with domains) and factors (relation instances)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .relations import Table

if TYPE_CHECKING:
    from .spec import Spec


@dataclass(frozen=True)
class Variable:
    path: str
    size: int
    values: list[Any]


@dataclass(frozen=True)
class Factor:
    number: int
    relation: int  # index of the template relation (-1: the objective)
    kind: str
    name: str | None
    scope: list[str]
    rows: int | None  # rows of an explicit table (kind "table")
    space: int  # product of the scope's domain sizes: the size of the factor as a full table
    math: str = ""  # the instance written as math (``/plan/1/first_day == /plan/0/last_day``)

    @property
    def label(self) -> str:
        return f"{self.name or self.kind}#{self.number}"


class FactorGraph:
    """Variables and factors of ``spec`` (built from its instances)."""

    def __init__(self, spec: Spec):
        self.variables = {p: Variable(p, f.size, list(f.values[:1000])) for p, f in spec.fields.items()}
        self.factors = []
        for inst in spec.instances:
            rel = inst.relation
            self.factors.append(Factor(inst.number, inst.source, rel.kind, rel.name, list(inst.scope),
                                       len(rel.rows) if isinstance(rel, Table) else None,
                                       math.prod(spec.fields[p].size for p in inst.scope), rel.math()))

    def to_networkx(self) -> Any:
        """A bipartite ``networkx.Graph``: variable nodes (``kind="variable"``) and factor nodes (``kind="factor"``)."""
        import networkx as nx
        g = nx.Graph()
        for v in self.variables.values():
            g.add_node(v.path, kind="variable", size=v.size, bipartite=0)
        for f in self.factors:
            g.add_node(f.label, kind="factor", relation=f.relation, rel_kind=f.kind, rows=f.rows, space=f.space,
                       bipartite=1)
            for p in f.scope:
                g.add_edge(f.label, p)
        return g

    def summary(self) -> dict[str, Any]:
        return {"variables": len(self.variables), "factors": len(self.factors),
                "largest_domain": max((v.size for v in self.variables.values()), default=0),
                "largest_scope": max((len(f.scope) for f in self.factors), default=0),
                "table_rows": sum(f.rows or 0 for f in self.factors)}

    def __repr__(self) -> str:
        s = self.summary()
        return f"FactorGraph({s['variables']} variables, {s['factors']} factors)"

    def draw(self, ax: Any = None, *, labels: bool = True, seed: int = 0) -> Any:
        """Draw the graph with matplotlib (fields as circles, relations as squares by kind); returns the axes."""
        from .plots import draw_graph
        return draw_graph(self, ax, labels=labels, seed=seed)

    def _repr_html_(self) -> str:
        from .display import graph_html
        return graph_html(self)
