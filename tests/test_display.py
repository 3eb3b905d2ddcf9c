"""Display and plots: relations written as math, every HTML view well-formed, escaping user strings, without
JavaScript; the plots drawn from what they are given."""

from __future__ import annotations

import ast
import json
import math
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib
import pytest

import factorspec_cp as fs
from factorspec_cp import display, plots
from factorspec_cp.tokenmap import Vocabulary

matplotlib.use("Agg")

TRIP = {
    "type": "object", "additionalProperties": False, "required": ["plan"],
    "properties": {"plan": {"type": "array", "minItems": 3, "maxItems": 3, "items": {
        "type": "object", "additionalProperties": False, "required": ["city", "first_day", "last_day"],
        "properties": {"city": {"enum": ["Riga", "Manchester", "Split"]},
                       "first_day": {"type": "integer", "minimum": 1, "maximum": 15},
                       "last_day": {"type": "integer", "minimum": 1, "maximum": 15}}}}},
    "x-factorspec": {"relations": [
        {"kind": "all_different", "fields": ["/plan/*/city"]},
        {"kind": "table", "fields": ["/plan/{i}/city", "/plan/{i+1}/city"],
         "rows": [["Riga", "Manchester"], ["Manchester", "Riga"], ["Manchester", "Split"]]},
        {"kind": "linear", "terms": [[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]], "op": "==", "rhs": 0,
         "name": "fly on the last day"},
        {"kind": "implies", "if": {"field": "/plan/{i}/city", "op": "==", "value": "Split"},
         "then": {"kind": "linear", "terms": [[1, "/plan/{i}/last_day"], [-1, "/plan/{i}/first_day"]],
                  "op": "==", "rhs": 5}}]}}

#: a declaration whose user strings are markup: a field named <script>, values and names with tags and ampersands
HOSTILE = {
    "type": "object", "required": ["<script>", "b&c"], "title": "<title>",
    "properties": {"<script>": {"enum": ["<b>x</b>", "a&b", "</pre>"]},
                   "b&c": {"type": "integer", "minimum": 0, "maximum": 3},
                   "<i>note": {"type": "string", "maxLength": 5}},
    "x-factorspec": {"relations": [
        {"kind": "compare", "left": "/<script>", "op": "!=", "right": "<b>x</b>", "name": "<img src=x onerror=1>"},
        {"kind": "implies", "if": {"field": "/<script>", "op": "==", "value": "a&b"},
         "then": {"kind": "compare", "left": "/b&c", "op": ">=", "right": 2}, "name": "</table>"}]}}


def parse(fragment: str) -> ET.Element:
    """The fragment as XML (so: well-formed), after checking that it holds no script and no event handler."""
    tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.append((tag, attrs))

    Collect().feed(fragment)
    assert all(tag not in ("script", "img", "iframe", "style") for tag, _ in tags), [t for t, _ in tags]
    assert all(not name.startswith("on") for _, attrs in tags for name, _ in attrs)
    return ET.fromstring(f"<div>{fragment}</div>")


def text(root: ET.Element) -> str:
    return "".join(root.itertext())


# -- math ---------------------------------------------------------------------------------------------------------
def test_relations_written_as_math() -> None:
    m = display.relation_math
    assert m(fs.AllDifferent("/plan/*/city")) == "all_different(/plan/*/city)"
    assert m(fs.Linear([[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]], "==", 0)) == \
        "/plan/{i+1}/first_day == /plan/{i}/last_day"
    assert m(fs.Linear([[1, "/a"], [-1, "/b"]], "<=", -2)) == "/a <= /b - 2"
    assert m(fs.Linear([[-1, "/a"]], "<=", -3)) == "/a >= 3"
    assert m(fs.Linear([[2, "/a"], [3, "/b"]], "==", 7)) == "2*/a + 3*/b == 7"
    assert m(fs.Linear([[1, "/t", {"a": 1, "b": 2}]], ">", 1)) == '{"a": 1, "b": 2}[/t] > 1'
    assert m(fs.Table(["/d"], [[1], [2]], mode="forbid")) == "/d not in {1, 2}"
    assert m(fs.Table(["/a", "/b"], [[k, k] for k in range(9)])).endswith("(3, 3), ... 9 rows}")
    assert m(fs.Compare("/a", "!=", "/b")) == "/a != /b"
    assert m(fs.Compare("/a", "==", True)) == "/a == true"
    assert m(fs.Implies([{"field": "/c", "op": "in", "value": ["x", "y"]}, {"field": "/n", "op": ">", "value": 2}],
                        fs.Compare("/m", "<=", 30))) == '/c in {"x", "y"} and /n > 2  =>  /m <= 30'
    assert m(fs.Any_([fs.Compare("/a", "==", 1), fs.Compare("/b", "==", 2)])) == "(/a == 1) or (/b == 2)"
    assert m(fs.Element("/i", {"x": 3, "y": 4}, "/t")) == '{"x": 3, "y": 4}[/i] == /t'
    assert m(fs.NoOverlap([["/s0", "/e0"], ["/s1", "/e1"]])) == "no_overlap([/s0, /e0), [/s1, /e1))"
    assert m(fs.Count(["/a", "/b"], "x", ">=", 1)) == '#{f in [/a, /b] : f == "x"} >= 1'
    assert fs.Compare("/a", "<", 3).math() == "/a < 3"


@fs.relation_kind("display_parity_test")
@dataclass(frozen=True)
class Parity(fs.Relation):
    path_fields = ("fields",)
    fields: list[str]
    odd: bool = False
    name: str | None = None

    def check(self, values: dict) -> bool:  # type: ignore[type-arg]
        return sum(int(values[p]) for p in self.fields) % 2 == int(self.odd)

    def encode_cpsat(self, ctx: Any) -> None:
        half = ctx.model.NewIntVar(0, 100, "half")
        ctx.add(sum(ctx.number(p) for p in self.fields) == 2 * half + int(self.odd))


@fs.relation_kind("display_own_math_test")
@dataclass(frozen=True)
class OwnMath(Parity):
    def math(self) -> str:
        return f"sum({', '.join(self.fields)}) is {'odd' if self.odd else 'even'}"


def test_custom_kinds_written_generically_or_by_their_own_math() -> None:
    assert display.relation_math(Parity(["/a", "/b"], True)) == "display_parity_test(/a, /b, odd=true)"
    assert OwnMath(["/a", "/b"]).math() == "sum(/a, /b) is even"
    spec = fs.Spec({"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 2}, "b": {"type": "integer", "minimum": 0, "maximum": 2}}},
        [OwnMath(["/a", "/b"], True, name="odd")])
    s = spec.session()
    s.assign("/a", 1)
    assert "sum(/a, /b) is odd" in str(s.explain("/b", 1))


def test_explanations_and_instances_print_instantiated_math() -> None:
    spec = fs.Spec.from_json(TRIP)
    assert spec.instances[3].describe() == \
        "relation 2 'fly on the last day' (linear) [i=0]: /plan/1/first_day == /plan/0/last_day"
    s = spec.session()
    s.assign("/plan/0/last_day", 4)
    why = str(s.explain("/plan/1/first_day", 5))
    assert "/plan/1/first_day == /plan/0/last_day" in why and "assigned /plan/0/last_day = 4" in why
    assert spec.graph.factors[3].math == "/plan/1/first_day == /plan/0/last_day"


# -- HTML views ---------------------------------------------------------------------------------------------------
def test_spec_html() -> None:
    spec = fs.Spec.from_json(TRIP)
    root = parse(display.spec_html(spec))
    t = text(root)
    assert "/plan/{i+1}/first_day == /plan/{i}/last_day" in t and "all_different(/plan/*/city)" in t
    assert "/plan/2/first_day == /plan/1/last_day" in t  # the instances, under their template
    assert spec._repr_html_() == display.spec_html(spec)
    assert len(repr(spec)) < 100


def test_spec_html_escapes_user_strings() -> None:
    spec = fs.Spec.from_json(HOSTILE)
    page = display.spec_html(spec)
    t = text(parse(page))
    assert "/<script>" in t and '"<b>x</b>"' in t and "<img src=x onerror=1>" in t and "</table>" in t
    assert "/<i>note" in t and "b&c" in t
    assert "title at #" in t  # an ignored keyword, with its JSON Pointer
    assert display.ignored_keywords(spec) == [("#", "title")]
    assert "free fields" in t and "free string" in t  # /<i>note has no finite domain


def test_spec_html_objective() -> None:
    doc = dict(HOSTILE, **{"x-factorspec": dict(HOSTILE["x-factorspec"], objective={
        "maximize": [[2, "/b&c"]], "require": "optimal"})})
    t = text(parse(display.spec_html(fs.Spec.from_json(doc))))
    assert "objective: maximize 2*/b&c (require optimal)" in t


def test_graph_html_and_draw() -> None:
    graph = fs.Spec.from_json(HOSTILE).graph
    assert "/<script>" in text(parse(graph._repr_html_()))
    ax = fs.Spec.from_json(TRIP).graph.draw()
    assert ax.get_title().startswith("FactorGraph(9 variables")
    assert len(ax.collections) >= 3  # edges, field nodes, one node collection per relation kind


def test_session_html() -> None:
    spec = fs.Spec.from_json(TRIP)
    s = spec.session()
    s.assign("/plan/0/city", "Riga")
    root = parse(display.session_html(s))
    t = text(root)
    assert "backend sat (every relation has a SAT encoding within budget)" in t
    rows = {tuple(td.itertext())[0]: ["".join(c.itertext()) for c in tr] for tr in root.iter("tr")
            for td in tr.findall("td")[:1]}
    assert rows["/plan/0/city"][-1] == "assigned"
    assert rows["/plan/1/city"][2:] == ["1", '"Manchester"', "certain"]
    assert rows["/plan/0/first_day"][3] == "1..15"
    s.assign("/plan/2/city", "Riga")  # nothing admissible: the view explains
    t = text(parse(display.session_html(s)))
    assert "no record extends this assignment" in t and "all_different(/plan/0/city, /plan/1/city" in t


def test_session_html_escapes_user_strings() -> None:
    s = fs.Spec.from_json(HOSTILE).session()
    s.assign("/<script>", "a&b")
    t = text(parse(display.session_html(s)))
    assert "/<script>" in t and '"a&b"' in t and "/<i>note" in t and "4 | 2, 3" not in t and "2, 3" in t


def test_explanation_html() -> None:
    s = fs.Spec.from_json(HOSTILE).session()
    s.assign("/<script>", "a&b")
    expl = s.explain("/b&c", 0)
    root = parse(display.explanation_html(expl))
    t = text(root)
    assert "0 is not admissible for /b&c" in t and "/b&c >= 2" in t and '/<script> == "a&b"' in t
    assert "</table>" in t  # the relation's name, as text
    assert "no record" not in text(parse(display.explanation_html(fs.Spec.from_json(TRIP).session().explain())))


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.smollm2()


def test_decoder_html(vocab: Vocabulary) -> None:
    spec = fs.Spec.from_json(TRIP)
    dec = spec.decoder(vocab)
    t = text(parse(display.decoder_html(dec)))
    assert "0 tokens, in fixed syntax" in t and "next certain run" in t
    for tok in dec.certain_run(64):
        dec.consume(tok)
    assert dec.output() == b'{"plan": [{"city": "Riga", "first_day": '  # (the digits are pre-tokens of their own)
    for tok in vocab.encode("1"):
        dec.consume(tok)
    t = text(parse(display.decoder_html(dec)))
    assert '{"plan": [{"city": "Riga", "first_day": 1' in t
    assert "in field /plan/0/first_day, typed 1; admissible: 1..15 (15)" in t


def test_decoder_html_escapes_user_strings(vocab: Vocabulary) -> None:
    dec = fs.Spec.from_json(HOSTILE).decoder(vocab)
    for tok in vocab.encode('{"<script>": "</'):
        dec.consume(tok)
    root = parse(display.decoder_html(dec))
    t = text(root)
    assert '{"<script>": "</' in t and "in field /<script>" in t and '"</pre>"' in t


def _fake_result(vocab: Vocabulary, text_: str, margins: list[float]) -> Any:
    toks = vocab.encode(text_) + [vocab.eos_token_ids[0]]
    return SimpleNamespace(key="<p1>", record={}, text=text_, tokens=toks, margins=margins + [math.inf] * (
        len(toks) - len(margins)), stats={"tokens": len(toks), "verify_steps": 2, "drafter": "<hybrid>"})


def test_result_html_colours_tokens(vocab: Vocabulary) -> None:
    res = _fake_result(vocab, '{"a": "<script>alert(1)</script>"}', [math.inf, 0.5, 2.0])
    root = parse(display.result_html(res, vocab=vocab))
    spans = [s for s in root.iter("span") if s.get("data-source")]
    assert [s.get("data-source") for s in spans[:3]] == ["certain", "model", "model"]
    assert "".join("".join(s.itertext()) for s in spans) == res.text  # every token, EOS left out
    t = text(root)
    assert "<script>alert(1)</script>" in t and "Result '<p1>'" in t and "<hybrid>" in t
    # with sources from the verify steps: a model-side draft gets its own colour
    srcs = plots.token_sources(res.tokens, [res.tokens[:2], res.tokens[3:5]], vocab.eos_token_ids,
                                 certain=lambda k: k == 0)
    assert [s.source for s in srcs[:6]] == ["certain", "draft", "model", "draft", "draft", "model"]
    assert srcs[-1].step is None and srcs[-1].source == "certain"  # the tail
    root = parse(display.result_html(res, sources=srcs, vocab=vocab))
    assert [s.get("data-source") for s in root.iter("span") if s.get("data-source")][:3] == \
        ["certain", "draft", "model"]


def test_token_sources_an_eos_ended_draft_has_no_model_token() -> None:
    srcs = plots.token_sources([1, 2, 0], [[1, 2, 0]], eos=[0], certain=lambda k: False)
    assert [(s.source, s.step) for s in srcs] == [("draft", 0), ("draft", 0), ("draft", 0)]


def test_plots() -> None:
    spec = fs.Spec.from_json(TRIP)
    record = next(spec.solutions())
    sizes = plots.admissible_sizes(spec, record)
    assert [p for p, _, _ in sizes] == list(spec.fields) and sizes[0] == ("/plan/0/city", 3, 1)
    assert all(a >= 1 for _, _, a in sizes)
    assert len(plots.plot_admissible(spec, record).patches) == 2 * len(spec.fields)
    srcs = plots.token_sources([5, 6, 7, 8, 9, 10], [[5, 6, 1], [8]], eos=[0])
    gen = plots.Generation(SimpleNamespace(record=record), spec, None, srcs, [3, 2], 1)
    ax = gen.plot_steps()
    assert "6 tokens in 2 verify steps" in ax.get_title()
    assert repr(gen) == "Generation(6 tokens in 2 verify steps: 1 certain, 3 drafted, 2 model)"


class _FakeModel:
    """The engine's model contract as :func:`plots.watch` sees it: ``start`` a request, ``verify`` drafts."""

    def __init__(self) -> None:
        self.calls = 0

    def start(self, prompt: str) -> object:
        return object()

    def verify(self, requests: list[object], drafts: list[list[int]]) -> None:
        self.calls += 1


class _FakeEngine:
    """Writes a fixed token sequence in two verify steps, proposing ``drafts``; the rest is the certain tail."""

    def __init__(self, vocab: Vocabulary, tokens: list[int], drafts: list[list[int]]) -> None:
        self.model, self.vocab, self.tokens, self.drafts = _FakeModel(), vocab, tokens, drafts

    def generate(self, spec: fs.Spec, prompt: str, **kwargs: Any) -> Any:
        req = self.model.start(prompt)
        for d in self.drafts:
            self.model.verify([req], [d])
        return SimpleNamespace(key="<k>", record=json.loads(vocab_text(self.vocab, self.tokens)), tokens=self.tokens,
                               text=vocab_text(self.vocab, self.tokens), stats={"tokens": len(self.tokens)})


def vocab_text(vocab: Vocabulary, tokens: list[int]) -> str:
    return b"".join(vocab.token_bytes(t) or b"" for t in tokens).decode()


def test_watch_records_each_tokens_source(vocab: Vocabulary) -> None:
    spec = fs.Spec.from_json(TRIP)
    tokens = vocab.encode(json.dumps(next(spec.solutions()))) + [vocab.eos_token_ids[0]]
    dec, k = spec.decoder(vocab), 0  # k: the first token whose mask admits others (the first day's digit)
    while len(dec.allowed_tokens()) == 1:
        dec.consume(tokens[k])
        k += 1
    # step 0 drafts up to and including that digit, then the model writes one; step 1 drafts nothing
    engine = _FakeEngine(vocab, tokens, [tokens[:k + 1], []])
    model = engine.model
    gen = plots.watch(engine, spec, "plan")
    assert engine.model is model and model.calls == 2  # the recorder is gone after the run
    assert [s.token for s in gen.sources] == tokens
    assert [s.source for s in gen.sources[:k]] == ["certain"] * k and {s.admitted for s in gen.sources[:k]} == {1}
    assert (gen.sources[k].source, gen.sources[k].step) == ("draft", 0) and gen.sources[k].admitted > 1
    assert (gen.sources[k + 1].source, gen.sources[k + 1].step) == ("model", 0)
    assert gen.sources[k + 2].step == 1 and gen.step_tokens == [k + 2, 1] and gen.tail == len(tokens) - k - 3
    assert all(s.step is None for s in gen.sources[k + 3:])
    # in verify steps, certain means the mask admitted one token; the tail counts as certain (a real engine takes
    # it without a forward pass only where it is; this fake engine stops verifying early)
    assert all((s.admitted == 1) == (s.source == "certain") for s in gen.sources if s.step is not None)
    root = parse(gen._repr_html_())
    spans = [sp for sp in root.iter("span") if sp.get("data-source")]
    assert [sp.get("data-source") for sp in spans] == [s.source for s in gen.sources[:-1]]  # EOS left out
    assert "Result '<k>'" in text(root) and "no forward pass" in spans[-1].get("title", "")


# -- the objects' own hooks (Session, Explanation, Decoder, Result delegate to display) ----------------------
def _delegates(cls: type, name: str) -> bool:
    """Whether ``cls``'s own ``_repr_html_`` calls ``name``, read from its module's source (a compiled class's
    methods have none of their own)."""
    if "_repr_html_" not in cls.__dict__:
        return False
    module = sys.modules[cls.__module__]
    tree = ast.parse((Path(module.__file__).parent / (cls.__module__.rsplit(".", 1)[-1] + ".py")).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            hook = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "_repr_html_"), None)
            return hook is not None and any(isinstance(n, ast.Attribute | ast.Name) and name in (
                getattr(n, "attr", None), getattr(n, "id", None)) for n in ast.walk(hook))
    return False


def test_repr_html_hooks(vocab: Vocabulary) -> None:
    from factorspec_cp.engine.run import Result
    from factorspec_cp.session import Explanation, Session
    from factorspec_cp.tokenmap.decoder import Decoder
    spec = fs.Spec.from_json(HOSTILE)
    s = spec.session()
    cases = [(Session, "session_html", s, "factorspec-session"),
             (Explanation, "explanation_html", s.explain("/b&c", 0), "factorspec-explanation"),
             (Decoder, "decoder_html", spec.decoder(vocab), "factorspec-decoder"),
             (Result, "result_html", Result("k", None, "", [vocab.eos_token_ids[0]], {}, [math.inf]),
              "factorspec-result")]
    for cls, fn, obj, marker in cases:
        assert _delegates(cls, fn), f"{cls.__name__}._repr_html_ does not delegate to display.{fn}"
        page = obj._repr_html_()
        parse(page)
        assert marker in page
