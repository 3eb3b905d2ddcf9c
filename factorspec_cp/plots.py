"""Pictures (matplotlib) of declarations and generations: the factor graph, admissible-set sizes along a record, tokens
per verify step; and :func:`watch`, which runs the embedded engine once and keeps how each token came to be (the
:class:`Generation` that the coloured view of :func:`~factorspec_cp.display.result_html` and the step plot read).

matplotlib (and networkx, for the graph) are imported on first use.

>>> [s.source for s in token_sources([5, 6, 7], [[5, 1]], eos=[0])]
['draft', 'model', 'certain']
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .display import COLOURS, SOURCE_TEXT, TokenSource, result_html

if TYPE_CHECKING:
    from .graph import FactorGraph
    from .spec import Spec

__all__ = ["watch", "Generation", "token_sources", "draw_graph", "admissible_sizes", "plot_admissible", "plot_steps"]


# -- watching a generation -----------------------------------------------------------------------------------------
class _Recorder:
    """Stands in for the engine's model and records each request's start and every verify step's drafts."""

    def __init__(self, model: Any):
        self._model = model
        self.starts: list[Any] = []
        self.steps: list[list[tuple[Any, list[int]]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def start(self, prompt: Any) -> Any:
        req = self._model.start(prompt)
        self.starts.append(req)
        return req

    def verify(self, requests: Sequence[Any], drafts: Sequence[Sequence[int]]) -> Any:
        self.steps.append([(r, list(d)) for r, d in zip(requests, drafts)])
        return self._model.verify(requests, drafts)


def token_sources(tokens: Sequence[int], drafts: Sequence[Sequence[int]], eos: Iterable[int],
                  certain: Callable[[int], bool] | None = None,
                  admitted: Sequence[int | None] | None = None) -> list[TokenSource]:
    """Each token's source, from the drafts of its request's verify steps in order: a step commits the longest
    prefix of its draft that matches the tokens, then one token of the model's (unless the draft ended the record);
    tokens after the last step are the certain tail. ``certain(k)`` tells whether position ``k`` was certain (the
    declaration left one token there): those count as certain whoever proposed them; accepted drafts elsewhere are
    model-side drafts.

    >>> [s.source for s in token_sources([5, 6, 7, 8, 9], [[5, 6, 1], [8]], eos=[0])]
    ['draft', 'draft', 'model', 'draft', 'model']
    """
    eos = set(eos)
    out: list[TokenSource] = []
    pos, n = 0, len(tokens)

    def add(k: int, source: str, step: int | None) -> None:
        if certain is not None and certain(k):  # the declaration left one token here, whoever proposed it
            source = "certain"
        elif source == "tail":
            source = "certain"
        out.append(TokenSource(int(tokens[k]), source, step, admitted[k] if admitted is not None else None))

    for s, d in enumerate(drafts):
        k = 0
        while k < len(d) and pos + k < n and tokens[pos + k] == d[k]:
            add(pos + k, "draft", s)
            k += 1
        pos += k
        if pos < n and not (d and k == len(d) and d[-1] in eos):
            add(pos, "model", s)
            pos += 1
    while pos < n:
        add(pos, "tail", None)
        pos += 1
    return out


@dataclass
class Generation:
    """One record written by the embedded engine, watched (:func:`watch`): the result, every token's source, and
    the tokens each verify step committed."""

    result: Any
    spec: Spec
    vocab: Any
    sources: list[TokenSource]
    step_tokens: list[int] = field(default_factory=list)  # tokens committed per verify step
    tail: int = 0  # tokens taken after the last step without a forward pass

    @property
    def record(self) -> Any:
        return self.result.record

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in COLOURS}
        for s in self.sources:
            out[s.source] = out.get(s.source, 0) + 1
        return out

    def _repr_html_(self) -> str:
        return result_html(self.result, sources=self.sources, vocab=self.vocab)

    def __repr__(self) -> str:
        c = self.counts()
        return (f"Generation({len(self.sources)} tokens in {len(self.step_tokens)} verify steps: {c['certain']} "
                f"certain, {c['draft']} drafted, {c['model']} model)")

    def plot_steps(self, ax: Any = None) -> Any:
        return plot_steps(self, ax)

    def plot_admissible(self, ax: Any = None) -> Any:
        return plot_admissible(self.spec, self.record, ax)


def watch(engine: Any, spec: Spec, prompt: str, *, drafter: Any = "certain", constraint: str = "ours",
          max_tokens: int = 1024) -> Generation:
    """Generate one record with ``engine`` (:class:`~factorspec_cp.engine.Engine`) and keep how each token was
    produced: the engine's model is wrapped for the run to record each verify step's draft, and the tokens are
    replayed through a decoder of the declaration to tell the certain ones (and how many tokens each mask admitted).
    """
    rec = _Recorder(engine.model)
    engine.model = rec
    try:
        result = engine.generate(spec, prompt, drafter=drafter, constraint=constraint, max_tokens=max_tokens)
    finally:
        engine.model = rec._model
    req = rec.starts[-1]
    drafts = [d for step in rec.steps for r, d in step if r is req]
    vocab = engine.vocab
    tokens = list(result.tokens)
    certain: list[bool] = []
    admitted: list[int | None] = []
    if constraint in ("ours", "pinned"):
        dec = spec.decoder(vocab)
        for t in tokens:  # certain: the certain run starts with it, or its mask admitted nothing else
            run = dec.certain_run(1)
            admitted.append(1 if run and run[0] == t else int(len(dec.allowed_tokens())))
            certain.append(admitted[-1] == 1)
            dec.consume(t)
    sources = token_sources(tokens, drafts, vocab.eos_token_ids, (lambda k: certain[k]) if certain else None,
                            admitted or None)
    per_step = [0] * len(drafts)
    tail = 0
    for s in sources:
        if s.step is None:
            tail += 1
        else:
            per_step[s.step] += 1
    return Generation(result, spec, vocab, sources, per_step, tail)


# -- plots ---------------------------------------------------------------------------------------------------------
def _axes(ax: Any, size: tuple[float, float]) -> Any:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt
    return plt.subplots(figsize=size)[1]


_KIND_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"]


def draw_graph(graph: FactorGraph, ax: Any = None, *, labels: bool = True, seed: int = 0) -> Any:
    """Draw the factor graph: fields as circles (size by domain), relation instances as squares coloured by kind,
    an edge where a relation reads a field. Returns the matplotlib axes."""
    import networkx as nx
    g = graph.to_networkx()
    ax = _axes(ax, (9, 6))
    pos = nx.spring_layout(g, seed=seed, k=1.5 / max(1, math.sqrt(g.number_of_nodes())))
    variables = [n for n, d in g.nodes(data=True) if d["kind"] == "variable"]
    factors = [n for n, d in g.nodes(data=True) if d["kind"] == "factor"]
    kinds = sorted({g.nodes[n]["rel_kind"] for n in factors})
    colour = {k: _KIND_COLOURS[i % len(_KIND_COLOURS)] for i, k in enumerate(kinds)}
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.35)
    nx.draw_networkx_nodes(g, pos, nodelist=variables, ax=ax, node_color="#f0f0f0", edgecolors="#333",
                           node_size=[80 + 30 * math.log2(max(1, g.nodes[n]["size"])) for n in variables])
    for k in kinds:
        nodes = [n for n in factors if g.nodes[n]["rel_kind"] == k]
        nx.draw_networkx_nodes(g, pos, nodelist=nodes, ax=ax, node_shape="s", node_color=colour[k], node_size=60,
                               label=k)
    if labels:
        nx.draw_networkx_labels(g, pos, labels={n: n for n in variables}, ax=ax, font_size=7)
    ax.legend(loc="best", fontsize=8, title="relation kind", title_fontsize=8)
    ax.set_title(repr(graph))
    ax.set_axis_off()
    return ax


def admissible_sizes(spec: Spec, record: Any, *, backend: str | None = None) -> list[tuple[str, int, int]]:
    """Along a record, field by field in record order: ``(path, domain size, admissible values when the field
    opens)``, each field assigned its value from ``record`` after it is asked."""
    from .spec import _get
    s = spec.session(backend)
    out = []
    for p, f in spec.fields.items():
        out.append((p, f.size, len(s.admissible(p))))
        s.assign(p, _get(record, p))
    return out


def plot_admissible(spec: Spec, record: Any, ax: Any = None) -> Any:
    """Bars of each field's domain and of its admissible set when the record reaches it (log scale)."""
    rows = admissible_sizes(spec, record)
    ax = _axes(ax, (max(6.0, 0.35 * len(rows)), 3.5))
    xs = range(len(rows))
    ax.bar(xs, [r[1] for r in rows], color="#dddddd", label="domain")
    ax.bar(xs, [r[2] for r in rows], color="#2e7d32", label="admissible when reached")
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r[0] for r in rows], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("values")
    ax.set_title("admissible-set size along the record (1: certain)")
    ax.legend(fontsize=8)
    return ax


def plot_steps(gen: Generation, ax: Any = None) -> Any:
    """Tokens committed per verify step, stacked by source; the certain tail (no forward pass) as a last bar."""
    ax = _axes(ax, (8, 3))
    n = len(gen.step_tokens)
    bottoms = [0] * (n + 1)
    for src in COLOURS:
        heights = [0] * (n + 1)
        for s in gen.sources:
            heights[s.step if s.step is not None else n] += s.source == src
        ax.bar(range(n + 1), heights, bottom=bottoms, color=COLOURS[src], edgecolor="#555", linewidth=0.3,
               label=SOURCE_TEXT[src])
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(list(range(n + 1)))
    ax.set_xticklabels([str(i) for i in range(n)] + ["tail"], fontsize=7)
    ax.set_xlabel("verify step")
    ax.set_ylabel("tokens committed")
    ax.margins(y=0.1)
    ax.set_title(f"{len(gen.sources)} tokens in {n} verify steps ({len(gen.sources) / max(1, n):.1f} per step)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
