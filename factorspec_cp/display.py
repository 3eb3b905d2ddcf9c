"""How declarations, sessions, decoders and generations look: relations written as math, and HTML views for Jupyter
(well-formed fragments, every user string escaped, inline styles only, no JavaScript). The pictures (matplotlib) and
:func:`~factorspec_cp.plots.watch` are in :mod:`factorspec_cp.plots`.

>>> import factorspec_cp as fs
>>> relation_math(fs.Linear([[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]], "==", 0))
'/plan/{i+1}/first_day == /plan/{i}/last_day'
>>> relation_math(fs.Implies({"field": "/c", "op": "==", "value": "Split"},
...                          fs.Linear([[1, "/last"], [-1, "/first"]], "==", 4)))
'/c == "Split"  =>  /last == /first + 4'
>>> relation_math(fs.Table(["/a", "/b"], [["x", "y"], ["y", "x"]]))
'(/a, /b) in {("x", "y"), ("y", "x")}'
"""

from __future__ import annotations

import codecs
import dataclasses
import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .relations import (
    AllDifferent,
    Any_,
    Compare,
    Count,
    Element,
    Implies,
    Linear,
    Literal,
    NoOverlap,
    Relation,
    Table,
    Term,
    is_path,
)
from .schema import ANNOTATIONS

if TYPE_CHECKING:
    from .graph import FactorGraph
    from .session import Explanation, Session
    from .spec import Instance, Spec
    from .tokenmap.decoder import Decoder

__all__ = [
    "relation_math", "objective_math", "ignored_keywords", "spec_html", "graph_html", "session_html",
    "explanation_html", "decoder_html", "result_html", "TokenSource", "COLOURS", "SOURCE_TEXT",
]

#: rows of a table (and entries of a map) written out before "..."
ROWS_SHOWN = 4
#: how a generated token came to be: written by the declaration (a certain-run draft, or the certain tail taken
#: without a forward pass), an accepted draft the declaration did not make certain (n-gram lookup), the model's choice
COLOURS = {"certain": "#b7e4c7", "draft": "#a9d6f5", "model": "#ffd8a8"}
SOURCE_TEXT = {"certain": "certain (the declaration wrote it)", "draft": "accepted model-side draft",
               "model": "model choice"}


# -- relations as math ---------------------------------------------------------------------------------------------
def _const(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False)


def _side(x: Any) -> str:
    return x if is_path(x) else _const(x)


def _term(t: Term, coef: int) -> str:
    if t.map is None:
        body = t.path
    else:
        items = list(t.map.items())
        shown = ", ".join(f"{_const(k)}: {v}" for k, v in items[:ROWS_SHOWN])
        body = "{" + shown + (", ..." if len(items) > ROWS_SHOWN else "") + "}[" + t.path + "]"
    return body if coef == 1 else f"{coef}*{body}"


def _sum(terms: Sequence[tuple[Term, int]], constant: int = 0) -> str:
    """``a + 2*b - c + 3`` (coefficients as given); "0" when empty."""
    out = ""
    for k, (t, c) in enumerate(terms):
        body = _term(t, abs(c))
        out += (("-" if c < 0 else "") + body) if k == 0 else ((" - " if c < 0 else " + ") + body)
    if constant or not out:
        out += (str(constant) if not out else (f" - {-constant}" if constant < 0 else f" + {constant}"))
    return out


_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def linear_math(terms: Sequence[Term], op: str, rhs: int) -> str:
    """``sum(terms) op rhs`` with negative terms moved to the right: ``a - b == 0`` reads ``a == b``."""
    pos = [(t, t.coef) for t in terms if t.coef > 0]
    neg = [(t, -t.coef) for t in terms if t.coef < 0]
    if not pos and neg:  # -a <= -3  ->  a >= 3
        return f"{_sum(neg)} {_FLIP[op]} {-rhs}"
    if not neg:
        return f"{_sum(pos)} {op} {rhs}"
    return f"{_sum(pos)} {op} {_sum(neg, rhs)}"


def _literal(lit: Literal) -> str:
    if lit.op in ("in", "not in"):
        return f"{lit.field} {lit.op} {{{', '.join(_const(v) for v in lit.value)}}}"
    return f"{lit.field} {lit.op} {_const(lit.value)}"


def _rows(rows: Sequence[Sequence[Any]], width: int, limit: int) -> str:
    def row(r: Sequence[Any]) -> str:
        vals = ", ".join(_const(v) for v in r)
        return vals if width == 1 else f"({vals})"
    shown = ", ".join(row(r) for r in rows[:limit])
    more = f", ... {len(rows)} rows" if len(rows) > limit else ""
    return "{" + shown + more + "}"


def _paren(text: str, rel: Relation) -> str:
    return f"({text})" if isinstance(rel, (Implies, Any_)) else text


def relation_math(rel: Relation, *, limit: int = ROWS_SHOWN) -> str:
    """One relation written as math, with its paths as they stand (templates or instantiated)."""
    if type(rel).math is not Relation.math and not isinstance(rel, _BUILTIN):  # a custom kind's own rendering
        return str(rel.math())
    if isinstance(rel, AllDifferent):
        return f"all_different({', '.join(rel.fields)})"
    if isinstance(rel, Table):
        fields = rel.fields[0] if len(rel.fields) == 1 else f"({', '.join(rel.fields)})"
        return f"{fields} {'in' if rel.allow else 'not in'} {_rows(rel.rows, len(rel.fields), limit)}"
    if isinstance(rel, Linear):
        return linear_math(rel.terms, rel.op, rel.rhs)
    if isinstance(rel, Compare):
        return f"{_side(rel.left)} {rel.op} {_side(rel.right)}"
    if isinstance(rel, Implies):
        cond = " and ".join(_literal(lit) for lit in rel.if_)
        return f"{cond}  =>  {_paren(relation_math(rel.then, limit=limit), rel.then)}"
    if isinstance(rel, Any_):
        return " or ".join(f"({relation_math(r, limit=limit)})" for r in rel.relations)
    if isinstance(rel, Element):
        items = list(rel.map.items())
        shown = ", ".join(f"{_const(k)}: {v}" for k, v in items[:limit]) + (", ..." if len(items) > limit else "")
        terms, const = rel.target_terms()
        target = _sum([(t, t.coef) for t in terms], const)
        return f"{{{shown}}}[{rel.index}] == {target}"
    if isinstance(rel, NoOverlap):
        return "no_overlap(" + ", ".join(f"[{s}, {e})" for s, e in rel.intervals) + ")"
    if isinstance(rel, Count):
        return f"#{{f in [{', '.join(rel.fields)}] : f == {_const(rel.value)}}} {rel.op} {rel.rhs}"
    return _generic(rel)


_BUILTIN = (AllDifferent, Table, Linear, Compare, Implies, Any_, Element, NoOverlap, Count)


def _generic(rel: Relation) -> str:
    """A custom kind without its own ``math()``: ``kind(paths..., key=value)``."""
    args = []
    for f in dataclasses.fields(rel):  # type: ignore[arg-type]
        if f.name == "name":
            continue
        val = getattr(rel, f.name)
        if f.name in rel.path_fields:
            args.append(val if isinstance(val, str) else ", ".join(val))
        elif val is not None:
            args.append(f"{f.name}={_const(val) if not isinstance(val, Relation) else relation_math(val)}")
    return f"{rel.kind}({', '.join(args)})"


def objective_math(spec: Spec) -> str | None:
    """``maximize 2*/a + /b (require optimal)``, or None without an objective."""
    levels = spec.objectives
    if not levels:
        return None
    text = ", then ".join(f"{obj.sense} {_sum([(t, t.coef) for t in obj.terms])}" for obj in levels)
    return f"{text} (require {levels[0].require})"


def ignored_keywords(spec: Spec) -> list[tuple[str, str]]:
    """The keywords of the schema that constrain nothing (annotations, vendor keys), as ``(JSON Pointer, keyword)``:
    ``spec.ignored``, what the schema compiler ignored."""
    return [(str(p), str(k)) for p, k in spec.ignored]


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


_CELL = 'style="border-bottom: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top"'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table; ``head`` plain text, each row cell already HTML."""
    th = "".join(f"<th {_CELL}>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _code(x: Any) -> str:
    return f"<code>{_e(x)}</code>"


def _box(title: str, body: str, kind: str) -> str:
    return (f'<div class="factorspec factorspec-{kind}" style="font-family: sans-serif; line-height: 1.4">'
            f"<div><b>{_e(title)}</b></div>{body}</div>")


def _values(vals: Sequence[Any], limit: int = 12) -> str:
    """Values as text, integer runs folded: ``1..5, 7, "Riga"``."""
    parts: list[str] = []
    k = 0
    while k < len(vals) and len(parts) < limit:
        v = vals[k]
        j = k
        if isinstance(v, int) and not isinstance(v, bool):
            while (j + 1 < len(vals) and isinstance(vals[j + 1], int) and not isinstance(vals[j + 1], bool)
                   and vals[j + 1] == vals[j] + 1):
                j += 1
        parts.append(_const(v) if j - k < 2 else f"{v}..{vals[j]}")
        if j - k == 1:
            parts.append(_const(vals[j]))
        k = j + 1
    return ", ".join(parts) + (", ..." if k < len(vals) else "")


def _domain(f: Any) -> str:
    if isinstance(f.values, range):
        r = f.values
        return f"{r.start}..{r.stop - 1}" + (f" step {r.step}" if r.step != 1 else "")
    return _values(list(f.values[:50]), 8) + (", ..." if f.size > 50 else "")


def _free(f: Any) -> str:
    keys = {k: v for k, v in f.schema.items() if k not in ANNOTATIONS and k != "type"}
    return f"free {f.type}" + (f" {json.dumps(keys, ensure_ascii=False)}" if keys else "")


def _instance_text(inst: Instance) -> str:
    at = f" [i={inst.i}]" if inst.i is not None else ""
    return f"{inst.source if inst.source >= 0 else 'objective' if inst.source == -1 else 'schema'}{at}"


# -- Spec ----------------------------------------------------------------------------------------------------------
def spec_html(spec: Spec, *, instances_shown: int = 20) -> str:
    """A declaration: its fields and domains, free fields, relations written as math (the templates as declared,
    their instances under each), the objective and the ignored keywords."""
    reads: dict[str, int] = {}
    for inst in spec.instances:
        for p in inst.scope:
            reads[p] = reads.get(p, 0) + 1
    fields = _table(["field", "kind", "size", "domain", "relations reading it"],
                    ([_code(p), _e(f.kind), str(f.size), _e(_domain(f)), str(reads.get(p, 0))]
                     for p, f in spec.fields.items()))
    parts = [f"<div>{len(spec.fields)} fields</div>{fields}"]
    if spec.compiled.free:
        parts.append("<div>free fields (no finite domain; relations do not read them)</div>"
                     + _table(["field", "schema"], ([_code(p), _e(_free(f))] for p, f in spec.compiled.free.items())))
    rows = []
    for k, rel in enumerate(spec.relations):
        insts = [i for i in spec.instances if i.source == k]
        if len(insts) == 1 and insts[0].i is None and relation_math(insts[0].relation) == relation_math(rel):
            detail = "1 instance"
        else:
            items = "".join(f"<li>{_e(_instance_text(i))}: {_code(relation_math(i.relation))}</li>"
                            for i in insts[:instances_shown])
            more = f"<li>... {len(insts) - instances_shown} more</li>" if len(insts) > instances_shown else ""
            detail = (f"<details><summary>{len(insts)} instance{'' if len(insts) == 1 else 's'}</summary>"
                      f"<ul>{items}{more}</ul></details>")
        rows.append([str(k), _e(rel.name or ""), _e(rel.kind), _code(relation_math(rel)), detail])
    parts.append(f"<div>{len(spec.relations)} relations, {len(spec.instances)} instances</div>"
                 + _table(["#", "name", "kind", "relation", "instances"], rows))
    obj = objective_math(spec)
    if obj is not None:
        parts.append(f"<div>objective: {_code(obj)}</div>")
    ignored = ignored_keywords(spec)
    if ignored:
        items = ", ".join(f"{_code(k)} at {_code(p)}" for p, k in ignored[:30])
        parts.append(f"<div>ignored keywords (they constrain nothing): {items}"
                     f"{', ...' if len(ignored) > 30 else ''}</div>")
    return _box(repr(spec), "".join(parts), "spec")


def graph_html(graph: FactorGraph) -> str:
    """The factor graph: each factor with its scope, explicit rows and the size of its space."""
    rows = ([_e(f.label), _code(getattr(f, "math", "") or f.kind), _e(", ".join(f.scope)),
             "" if f.rows is None else str(f.rows), str(f.space)] for f in graph.factors)
    return _box(repr(graph), _table(["factor", "relation", "scope", "rows", "space"], rows), "graph")


# -- Session and Explanation ---------------------------------------------------------------------------------------
#: fields wider than this are not listed by a session's view (an exact list would cost one solve per value)
LIST_LIMIT = 200


def session_html(session: Session) -> str:
    """A session: backend and why, every field's admissible set under the assignment, assigned and certain fields;
    when nothing is admissible, the explanation."""
    spec = session.spec
    head = (f"backend {session.backend} ({session.backend_reason}); {len(session.assignment)} of "
            f"{len(spec.fields)} fields assigned")
    parts = [f"<div>{_e(head)}</div>"]
    if not session.is_satisfiable():
        parts.append("<div><b>no record extends this assignment</b></div>")
        parts.append(explanation_html(session.explain()))
        return _box(repr(session), "".join(parts), "session")
    rows = []
    certain = 0
    for p, f in spec.fields.items():
        if p in session.assignment:
            rows.append([_code(p), str(f.size), "1", _e(_const(session.assignment[p])),
                         '<b style="color: #1b5e20">assigned</b>'])
            continue
        if f.size > LIST_LIMIT and session.wide(p):
            rows.append([_code(p), str(f.size), "", _e("wide field: asked piecewise, not listed"), ""])
            continue
        vals = session.admissible(p)
        mark = ""
        if len(vals) == 1:
            certain += 1
            mark = '<b style="color: #0d47a1">certain</b>'
        elif not vals:
            mark = '<b style="color: #b71c1c">empty</b>'
        rows.append([_code(p), str(f.size), str(len(vals)), _e(_values(vals)), mark])
    for p, ff in spec.compiled.free.items():
        rows.append([_code(p), "", "", _e(_free(ff)), "free"])
    parts.append(_table(["field", "domain", "admissible", "values", ""], rows))
    st = session.stats
    parts.append(f"<div>{certain} more fields certain; {st.solves} solves, {st.solve_seconds * 1000:.1f} ms"
                 f"{f', {st.incomplete} cut by the time budget' if st.incomplete else ''}</div>")
    return _box(repr(session), "".join(parts), "session")


def explanation_html(expl: Explanation) -> str:
    """An explanation: the question, then the conflicting relations written as math with their instantiated paths,
    and the assignments that take part."""
    lines = str(expl).splitlines()
    head = lines[0] if lines else ""
    if not expl.conflict:
        return _box(head, "", "explanation")
    rows = [[_e(_instance_text(i)), _e(i.relation.name or ""), _e(i.relation.kind), _code(relation_math(i.relation))]
            for i in expl.relations]
    body = _table(["relation", "name", "kind", "instance"], rows) if rows else ""
    if expl.assignments:
        body += "<div>with the assignments</div><ul>" + "".join(
            f"<li>{_code(p)} = {_code(_const(v))}</li>" for p, v in expl.assignments) + "</ul>"
    return _box(head, body, "explanation")


# -- tokens --------------------------------------------------------------------------------------------------------
def _token_texts(vocab: Any, tokens: Sequence[int]) -> list[str]:
    """The text each token adds (UTF-8 split across tokens goes with the token that completes it; EOS is "")."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = []
    for t in tokens:
        data = vocab.token_bytes(int(t))
        out.append(dec.decode(data) if data is not None else "")
    return out


def _chip(text: str, colour: str, title: str, source: str = "") -> str:
    attr = f' data-source="{_e(source)}"' if source else ""
    return (f'<span{attr} title="{_e(title)}" style="background: {colour}; border-radius: 2px; '
            f'box-shadow: inset -1px 0 rgba(0, 0, 0, 0.25); white-space: pre-wrap">{_e(text)}</span>')


def decoder_html(dec: Decoder, *, run_tokens: int = 32) -> str:
    """A decoder: the text so far, where the record stands (the slot being written and what the session still
    admits there), and the next certain run as tokens."""
    out = dec.output()
    text = out.decode("utf-8", "replace")
    parts = [f'<pre style="white-space: pre-wrap; margin: 4px 0">{_e(text)}<span style="color: #888">|</span></pre>']
    if dec.is_terminated():
        parts.append("<div>terminated: the record is complete</div>")
        return _box(repr(dec), "".join(parts), "decoder")
    where = "in fixed syntax"
    try:
        state = dec.layout.advance(dec.layout.start(), out)
        slot = dec.layout.slot(state) if state is not None else None
    except Exception:  # pragma: no cover - a layout that cannot replay its own output: show the rest anyway
        slot = None
    if slot is not None:
        typed = slot.typed.decode("utf-8", "replace")
        where = f"in {'field' if slot.kind == 'field' else 'free field'} {_code(slot.pointer)}"
        if typed:
            where += f", typed {_code(typed)}"
        if slot.kind == "field" and slot.pointer in dec.spec.fields and not dec.session.wide(slot.pointer):
            vals = dec.session.admissible(slot.pointer)
            where += f"; admissible: {_e(_values(vals))} ({len(vals)})"
    else:
        where = _e(where)
    if dec.is_complete():
        where += "; the record is complete (EOS admitted)"
    parts.append(f"<div>{len(dec.tokens)} tokens, {where}</div>")
    run = dec.certain_run(run_tokens)
    if run:
        chips = "".join(_chip(t if t else "EOS", COLOURS["certain"], f"token {tok}")
                        for tok, t in zip(run, _token_texts(dec.vocab, run)))
        parts.append(f"<div>next certain run ({len(run)} tokens{'+' if len(run) == run_tokens else ''}): "
                     f"{chips}</div>")
    else:
        parts.append("<div>nothing certain here: the model chooses the next token</div>")
    return _box(repr(dec), "".join(parts), "decoder")


# -- generations ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenSource:
    """How one generated token came to be: ``source`` in ``certain`` / ``draft`` / ``model``; ``step`` the verify
    step that committed it (None: the certain tail, taken without a forward pass); ``admitted``: how many tokens its
    mask admitted (None: not known)."""

    token: int
    source: str
    step: int | None = None
    admitted: int | None = None


def _margin_sources(result: Any) -> list[TokenSource]:
    """From a result alone: a token whose mask admitted nothing else (infinite margin) was written by the
    declaration; any other was chosen by the model."""
    margins = list(getattr(result, "margins", []) or [])
    toks = list(result.tokens)
    if len(margins) != len(toks):
        margins = [0.0] * len(toks)
    return [TokenSource(t, "certain" if math.isinf(m) else "model", None, 1 if math.isinf(m) else None)
            for t, m in zip(toks, margins)]


def result_html(result: Any, *, sources: Sequence[TokenSource] | None = None, vocab: Any = None) -> str:
    """A generation result: the record with each token coloured by how it was produced (certain: the declaration
    wrote it; draft: an accepted model-side draft; model: the model's choice), with the run's statistics. Without
    ``sources`` (see :func:`factorspec_cp.plots.watch`), a token whose mask admitted only it counts as certain."""
    if vocab is None:
        from .tokenmap import Vocabulary
        vocab = Vocabulary.smollm2()
    srcs = list(sources) if sources is not None else _margin_sources(result)
    eos = set(vocab.eos_token_ids)
    texts = _token_texts(vocab, [s.token for s in srcs])
    chips = []
    counts = {k: 0 for k in COLOURS}
    for k, (s, t) in enumerate(zip(srcs, texts)):
        counts[s.source] = counts.get(s.source, 0) + 1
        if s.token in eos:
            continue
        step = "no forward pass" if s.step is None and sources is not None else (
            f"step {s.step}" if s.step is not None else "")
        adm = f"; mask admitted {s.admitted}" if s.admitted is not None else ""
        title = f"#{k} token {s.token} {t!r}: {SOURCE_TEXT.get(s.source, s.source)}{'; ' + step if step else ''}{adm}"
        chips.append(_chip(t, COLOURS.get(s.source, "#eee"), title, s.source))
    legend = " ".join(_chip(f"{SOURCE_TEXT[k]}: {counts.get(k, 0)}", c, SOURCE_TEXT[k]) for k, c in COLOURS.items())
    stats = getattr(result, "stats", {}) or {}
    line = ", ".join(f"{k} {v}" for k, v in stats.items() if k in ("tokens", "verify_steps", "accept_length",
                                                                     "tail_tokens", "seconds", "drafter"))
    body = (f"<div>{legend}</div>"
            f'<pre style="white-space: pre-wrap; margin: 4px 0; line-height: 1.6">{"".join(chips)}</pre>'
            f"<div>{_e(line)}</div>")
    valid = "" if getattr(result, "record", None) is not None else " (the output is not a JSON record)"
    key = getattr(result, "key", None)
    head = f"Result{f' {key!r}' if key is not None else ''}: {len(srcs)} tokens{valid}"
    return _box(head, body, "result")
