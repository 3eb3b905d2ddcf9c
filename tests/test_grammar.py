"""engine/grammar.py: the per-request Grammar every engine drives, against the Decoder it wraps.

- ``accept`` takes all tokens or none; ``validate`` equals feeding the decoder token by token and leaves the
  state as it was; ``rollback`` replays to identical masks;
- ``fill`` into a server's padded buffer (numpy or torch, any row) equals ``Decoder.fill_mask``, with the padding
  cleared;
- the compile cache: one compiled declaration per content, shared across threads; bad declarations raise their
  typed errors; the XGrammar baseline behind the same interface.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

import factorspec_cp as fs
from factorspec_cp.engine.grammar import Grammar, GrammarCompiler, declaration_key, has_declaration
from factorspec_cp.tokenmap import Vocabulary
from factorspec_cp.tokenmap.decoder import mask_to_ids, mask_words
from factorspec_cp.workloads import trip

DECL = {"type": "object", "additionalProperties": False, "required": ["plan"],
        "properties": {"plan": {"type": "array", "minItems": 3, "maxItems": 3, "items": {
            "type": "object", "additionalProperties": False, "required": ["city", "first_day", "last_day"],
            "properties": {"city": {"enum": ["Riga", "Manchester", "Split"]},
                           "first_day": {"type": "integer", "minimum": 1, "maximum": 9},
                           "last_day": {"type": "integer", "minimum": 1, "maximum": 9}}}}},
        "x-factorspec": {"relations": [
            {"kind": "all_different", "fields": ["/plan/*/city"]},
            {"kind": "linear", "terms": [[1, "/plan/{i+1}/first_day"], [-1, "/plan/{i}/last_day"]], "op": "==",
             "rhs": 0},
            {"kind": "compare", "left": "/plan/{i}/first_day", "op": "<", "right": "/plan/{i}/last_day"}]}}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.smollm2()


def _walk(vocab: Vocabulary, seed: int) -> list[int]:
    """A random valid token sequence, chosen with a bare Decoder (exact mode: every tokenization)."""
    dec = fs.Spec.from_json(DECL).decoder(vocab, mode="exact")
    rng = random.Random(seed)
    out: list[int] = []
    while not dec.is_terminated():
        t = int(rng.choice(list(dec.allowed_tokens())))
        dec.consume(t)
        out.append(t)
    return out


def _refused(row: np.ndarray, size: int) -> list[int]:
    ok = set(mask_to_ids(row, size).tolist())
    return [t for t in range(size) if t not in ok]


def test_accept_validate_rollback_against_the_decoder(vocab):
    compiler = GrammarCompiler(vocab, mode="exact")
    for seed in range(3):
        tokens = _walk(vocab, seed)
        g = compiler.compile(DECL).grammar()
        ref = fs.Spec.from_json(DECL).decoder(vocab, mode="exact")
        masks = []
        for k, t in enumerate(tokens):
            row = np.zeros((2, mask_words(vocab.size)), dtype=np.int32)
            g.fill(row, 1)
            want = np.zeros(mask_words(vocab.size), dtype=np.int32)
            ref.fill_mask(want)
            assert (row[1] == want).all() and not row[0].any()
            masks.append(want)
            assert g.validate(tokens[k:]) == len(tokens) - k  # the rest of a valid record: all admitted
            for b in _refused(want, vocab.size)[:3]:
                assert g.validate([b]) == 0 and g.accept([b]) is False
            ref.consume(t)
            after = np.zeros(mask_words(vocab.size), dtype=np.int32)
            ref.fill_mask(after)
            for b in _refused(after, vocab.size)[:2]:
                assert g.validate([t, b]) == 1
                assert g.accept([t, b]) is False and g.num_tokens == k  # all or nothing
            assert g.accept([t]) and g.num_tokens == k + 1
        assert g.is_terminated() and g.record() == ref.record()
        g.rollback(len(tokens) // 2)
        row = np.zeros((1, mask_words(vocab.size)), dtype=np.int32)
        g.fill(row, 0)
        assert (row[0] == masks[len(tokens) - len(tokens) // 2]).all()
        g.reset()
        assert g.num_tokens == 0 and g.accept(tokens) and g.is_terminated()


def test_fill_a_padded_torch_bitmask(vocab):
    torch = pytest.importorskip("torch")
    g = GrammarCompiler(vocab).compile(DECL).grammar()
    words = mask_words(vocab.size)
    buf = torch.full((3, words + 5), -1, dtype=torch.int32)  # a server's logit width may be padded
    g.fill(buf, 2)
    ids = mask_to_ids(buf[2].numpy()[:words], vocab.size)
    assert [vocab.token_bytes(int(t)) for t in ids] == [b'{"']  # canonical: the certain token alone
    assert (buf[2, words:] == 0).all() and (buf[:2] == -1).all()
    with pytest.raises(ValueError, match="int32"):
        g.fill(np.zeros((1, words), dtype=np.int64), 0)


def test_certain_run_drafts_a_whole_unique_record(vocab):
    prompt = next(trip.problem(ex) for ex in trip.examples() if trip.num_cities(ex) == 3)
    g = GrammarCompiler(vocab).compile(trip.declaration(prompt)).grammar()
    run = g.certain_run(8)
    assert 0 < len(run) <= 8 and g.validate(run) == len(run) and g.num_tokens == 0
    assert g.accept(run)


def test_compile_cache_is_by_content_and_thread_safe(vocab):
    compiler = GrammarCompiler(vocab, max_entries=2)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(compiler.compile(dict(DECL)))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in got}) == 1 and compiler.misses == 1 and compiler.hits == 5
    assert compiler.compile(fs.Spec.from_json(DECL).to_json()) is got[0]
    other = {**DECL, "x-factorspec": {"relations": []}}
    compiler.compile(other)
    compiler.compile({**other, "description": "x"})
    assert compiler.compile(DECL) is not got[0]  # evicted (max_entries=2), compiled again
    a, b = compiler.compile(DECL).grammar(), compiler.compile(DECL).grammar()
    assert a.accept(a.certain_run(4)) and b.num_tokens == 0  # grammars of one declaration share no state


def test_bad_declarations_raise_their_typed_errors(vocab):
    compiler = GrammarCompiler(vocab)
    with pytest.raises(fs.UnknownRelationKind):
        compiler.compile({**DECL, "x-factorspec": {"relations": [{"kind": "nope"}]}})
    with pytest.raises(fs.UnsatisfiableDeclaration):
        compiler.compile({**DECL, "x-factorspec": {"relations": [
            {"kind": "linear", "terms": [[1, "/plan/0/first_day"]], "op": ">", "rhs": 99}]}}).grammar()
    assert has_declaration(DECL) and has_declaration('{"x-factorspec": {}}')
    assert not has_declaration({"type": "object"}) and not has_declaration("not json")
    assert declaration_key(DECL) != declaration_key(dict(reversed(list(DECL.items()))))  # order is rendering


def test_xgrammar_behind_the_same_interface(vocab):
    pytest.importorskip("xgrammar")
    from factorspec_cp.baselines.xgrammar import XGrammarMatcher

    schema = {k: v for k, v in DECL.items() if k != "x-factorspec"}
    tokens = _walk(vocab, 7)
    g = Grammar(XGrammarMatcher(schema, vocab))
    assert g.certain_run(8) == []  # XGrammar has no certain runs
    assert g.validate(tokens) == len(tokens) and g.accept(tokens) and g.is_terminated()
