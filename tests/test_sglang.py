"""factorspec's SGLang plugin through SGLang's own classes, on the CPU (sglang 0.5.23 with --no-deps).

Runs in the SGLang environment (``scripts/setup-sglang.sh``; ``.ci/run`` runs this module there); skipped where
SGLang is not installed. No SGLang server runs here (it needs a GPU or a source-built sgl-kernel): what runs is
SGLang's plugin loader with our installed entry point, its server-argument parser, ``create_grammar_backend``, its
batch mask code (``SamplingBatchInfo.update_regex_vocab_mask`` / ``apply_logits_bias``), its n-gram worker's
``_prepare_draft_tokens`` over the real C++ n-gram corpus, and its verify-tree mask (``generate_token_bitmask``).
Masks are compared with a separate :class:`~factorspec_cp.tokenmap.decoder.Decoder` (factorspec rows) and with
SGLang's own XGrammar backend (plain rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sglang = pytest.importorskip("sglang")

import torch  # noqa: E402

from factorspec_cp.bench.generate import bfcl_problems, trip_problems  # noqa: E402
from factorspec_cp.bench.masks import gold_walk  # noqa: E402
from factorspec_cp.engine.model import smollm2_folder  # noqa: E402
from factorspec_cp.tokenmap.decoder import mask_to_ids  # noqa: E402
from factorspec_cp.workloads import bfcl  # noqa: E402

PLAIN = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
         "required": ["name", "n"]}
PLAIN_TEXT = '{"name":"Ada","n":36}'  # no whitespace: in the language whatever the server's whitespace rule
WIDTH = 8  # --speculative-num-draft-tokens


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(smollm2_folder())


@pytest.fixture(scope="module")
def server_args(model_dir):
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args

    load_plugins()  # finds factorspec's entry point in the installed distribution
    args = prepare_server_args(["--model-path", model_dir, "--device", "cpu", "--grammar-backend", "factorspec",
                                "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(WIDTH)])
    try:  # from 0.5.22 the grammar backend is read from the runtime context the scheduler builds from these
        from sglang.srt.runtime_context import get_context

        get_context().set_server_args(args)
    except ImportError:
        pass
    return args


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def vocab_size(model_dir) -> int:
    return int(json.loads((__import__("pathlib").Path(model_dir) / "config.json").read_text())["vocab_size"])


@pytest.fixture(scope="module")
def backend(server_args, tokenizer, vocab_size):
    from sglang.srt.constrained.base_grammar_backend import create_grammar_backend

    return create_grammar_backend(server_args, tokenizer, vocab_size, {tokenizer.eos_token_id})


@pytest.fixture(scope="module")
def backend_service(server_args, tokenizer, vocab_size):
    """The same backend with one constraint worker (``FACTORSPEC_CONSTRAINT_WORKERS``, the server processes' switch)."""
    from sglang.srt.constrained.base_grammar_backend import create_grammar_backend

    os.environ["FACTORSPEC_CONSTRAINT_WORKERS"] = "1"
    try:
        b = create_grammar_backend(server_args, tokenizer, vocab_size, {tokenizer.eos_token_id})
    finally:
        del os.environ["FACTORSPEC_CONSTRAINT_WORKERS"]
    assert b.compiler.workers == 1
    yield b
    b.compiler.close()


def _compile(backend, schema: dict | str):
    """What SGLang's grammar manager does for a request: the cache or a compile on the backend's pool."""
    key = ("json", schema if isinstance(schema, str) else json.dumps(schema))
    value, hit = backend.get_cached_or_future_value(key, False)
    if not hit:
        value = value.result()
        backend.set_cache(key, value.copy())
    return value


def test_plugin_loads_from_the_entry_point_and_server_args_take_the_backend(server_args, backend):
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    from factorspec_cp.engine import sglang as plugin

    assert "factorspec" in GRAMMAR_BACKEND_REGISTRY
    assert server_args.grammar_backend == "factorspec" and server_args.speculative_algorithm == "NGRAM"
    assert type(backend).__name__ == "FactorspecBackend" and backend is not None
    assert isinstance(backend, plugin._classes()["FactorspecBackend"])
    # the AROUND hook is registered and applied to SGLang's own class (what it does: the n-gram tests below)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    assert (HookType.AROUND, plugin._draft_hook) in [(t, h) for t, h, _ in HookRegistry._hooks[plugin.DRAFT_TARGET]]
    assert getattr(NGRAMWorker._prepare_draft_tokens, "__wrapped__", None) is not None


def test_without_the_plugin_the_backend_choice_is_refused(model_dir):
    # independent of the module's process: SGLANG_PLUGINS names no plugin, so ours is not loaded
    code = ("import sys\nfrom sglang.srt.plugins import load_plugins\nload_plugins()\n"
            "from sglang.srt.server_args import prepare_server_args\n"
            f"prepare_server_args(['--model-path', {model_dir!r}, '--device', 'cpu', '--grammar-backend', "
            "'factorspec'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SGLANG_PLUGINS": "none-such"})
    assert out.returncode != 0 and "factorspec" in out.stderr and "invalid choice" in out.stderr, out.stderr[-2000:]


def _stream(spec, vocab, gold) -> list[int]:
    return gold_walk(spec, vocab, gold)["tokens"]


@pytest.mark.parametrize("which", ["backend", "backend_service"])
def test_batched_masks_match_the_decoder_and_xgrammar(which, request, vocab_size, tokenizer):
    """A mixed batch (trip, plain schema, tool call, no grammar) stepped through SGLang's batch mask code: every
    factorspec row is the Decoder's mask, the plain row is SGLang's XGrammar backend's, the free row admits all,
    and ``apply_logits_bias`` leaves exactly the admitted logits finite. In-process and through a worker."""
    backend = request.getfixturevalue(which)
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    vocab = backend.vocab
    trip = trip_problems(1)[0]
    tool = bfcl_problems(2)[1]
    tool_gold = bfcl.gold_records(tool.gold)[0]  # a tool call's Problem.gold is the BFCL problem
    streams = [_stream(trip.spec, vocab, trip.gold), tokenizer.encode(PLAIN_TEXT, add_special_tokens=False)
               + [tokenizer.eos_token_id], _stream(tool.spec, vocab, tool_gold), None]
    grammars = [_compile(backend, trip.spec.to_json()), _compile(backend, PLAIN),
                _compile(backend, tool.spec.to_json()), None]
    assert [type(g).__name__ for g in grammars[:3]] == ["FactorspecGrammar", "XGrammarGrammar", "FactorspecGrammar"]
    plain_ref = XGrammarGrammarBackend(tokenizer, vocab_size=vocab_size,
                                       model_eos_token_ids=[tokenizer.eos_token_id]).dispatch_json(json.dumps(PLAIN))
    refs = [trip.spec.decoder(vocab, mode="canonical"), plain_ref, tool.spec.decoder(vocab, mode="canonical"), None]
    bs = len(grammars)
    info = SamplingBatchInfo(
        temperatures=torch.ones(bs, 1), top_ps=torch.ones(bs), top_ks=torch.ones(bs, dtype=torch.int32),
        min_ps=torch.zeros(bs), is_all_greedy=True, is_any_greedy=True, need_top_p_sampling=False,
        need_top_k_sampling=False, need_min_p_sampling=False, vocab_size=vocab_size, grammars=grammars, device="cpu")
    ref_row = torch.zeros((1, (vocab_size + 31) // 32), dtype=torch.int32)
    steps = max(len(s) for s in streams if s is not None)
    checked = 0
    for k in range(steps):
        info.update_regex_vocab_mask()
        # 0.5.17 on: a GrammarMask (the rows and the grammar that applies them); 0.5.16: the rows on the batch
        mask = info.grammar_mask.vocab_mask if hasattr(info, "grammar_mask") else info.vocab_mask
        logits = torch.zeros(bs, vocab_size)
        if hasattr(info, "grammar_mask"):
            info.apply_logits_bias(logits)
        else:  # 0.5.16's XGrammar apply has no CPU branch: the kernel 0.5.23 calls there, on the same rows
            from xgrammar import apply_token_bitmask_inplace

            apply_token_bitmask_inplace(logits, mask)
        for i, (g, s, ref) in enumerate(zip(grammars, streams, refs)):
            row = mask[i].numpy()
            finite = np.flatnonzero(torch.isfinite(logits[i]).numpy())
            if g is None or k >= len(s):
                assert (row == -1).all() and len(finite) == vocab_size  # untouched rows admit everything
                continue
            if i == 1:
                ref_row.fill_(0)
                ref.fill_vocab_mask(ref_row, 0)
                want = mask_to_ids(ref_row[0].numpy(), vocab_size)
            else:
                want = ref.allowed_tokens()
            got = mask_to_ids(row, vocab_size)
            assert np.array_equal(got, want), (i, k)
            assert np.array_equal(finite, want), (i, k)
            assert s[k] in set(got.tolist()), (i, k)
            g.accept_token(s[k])
            (ref.accept_token if i == 1 else ref.consume)(s[k])
            checked += 1
    assert grammars[0].is_terminated() and grammars[1].is_terminated() and grammars[2].is_terminated()
    assert json.loads(vocab.decode([t for t in streams[0] if t not in vocab.eos_token_ids])) == \
        grammars[0].grammar.record()
    if which == "backend_service":
        from factorspec_cp.engine.service import ServiceGrammar

        assert isinstance(grammars[0].grammar, ServiceGrammar) and isinstance(grammars[2].grammar, ServiceGrammar)
    assert checked == sum(len(s) for s in streams if s is not None)


def test_a_cached_declaration_hands_out_fresh_grammars(backend):
    trip = trip_problems(1)[0]
    a = _compile(backend, trip.spec.to_json())
    b = _compile(backend, trip.spec.to_json())  # a cache hit: a copy
    assert a is not b and a.compiled is b.compiled and a.grammar is not b.grammar
    assert backend.cache[("json", json.dumps(trip.spec.to_json()))]._grammar is None  # the cached copy holds none
    run = a.certain_run(4)
    a.accept_token(run[0])
    assert a.grammar.num_tokens == 1 and b.grammar.num_tokens == 0


def test_bad_declarations_fail_their_request_only_and_refused_tokens_raise(backend):
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    bad = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}},
           "required": ["a"], "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/b"]], "op": "==",
                                                                 "rhs": 1}]}}
    unsat = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}},
             "required": ["a"], "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"]], "op": ">=",
                                                                   "rhs": 9}]}}
    for decl, kind in ((bad, "UnknownPath"), (unsat, "Unsatisfiable")):
        g = _compile(backend, decl)
        assert isinstance(g, InvalidGrammarObject), g
        assert kind in g.error_message and g.error_message.startswith("x-factorspec: "), g.error_message
    g = _compile(backend, "{\"x-factorspec\": ")  # malformed JSON text naming the key: still only this request
    assert isinstance(g, InvalidGrammarObject)
    ok = _compile(backend, trip_problems(1)[0].spec.to_json())  # the backend keeps serving
    run = ok.certain_run(3)
    wrong = next(t for t in range(1000) if t != run[0])
    with pytest.raises(ValueError):
        ok.accept_token(wrong)
    assert ok.grammar.num_tokens == 0  # a refused token changes nothing
    ok.accept_token(run[0])
    assert ok.grammar.num_tokens == 1


def _version() -> tuple[int, ...]:
    import importlib.metadata as md

    return tuple(int(x) for x in md.version("sglang").split(".")[:3])


def _tree_links(mask: np.ndarray, bs: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(next token, next sibling) of each node from the tree mask (``mask[b, i, j]``: ``j`` is ``i`` or an ancestor
    of it), for the verify traversal: SGLang 0.5.23's own ``_derive_tree_links`` where it exists, else the same
    rule written here (0.5.16 derives them on the device)."""
    try:
        from sglang.srt.speculative.ngram_worker import _derive_tree_links

        return _derive_tree_links(mask, bs, width)
    except ImportError:
        pass
    tree = mask.reshape(bs, width, width).astype(bool)
    nxt = np.full((bs, width), -1, dtype=np.int64)
    sib = np.full((bs, width), -1, dtype=np.int64)
    for b in range(bs):
        children: dict[int, int] = {}
        for i in reversed(range(width)):
            nxt[b, i] = children.get(i, -1)
            anc = [j for j in range(i) if tree[b, i, j]]
            if anc:
                parent = max(anc)
                sib[b, i] = children.get(parent, -1)
                children[parent] = i
    return torch.from_numpy(nxt), torch.from_numpy(sib)


def _verify_bitmask(reqs, nxt, sib, drafts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """SGLang's ``generate_token_bitmask`` over the verify tree (0.5.16 also takes the verify input, on which it
    leaves the grammar: a real NgramVerifyInput)."""
    import inspect

    from sglang.srt.speculative.spec_utils import generate_token_bitmask

    if "verify_input" in inspect.signature(generate_token_bitmask).parameters:
        from sglang.srt.speculative.ngram_info import NgramVerifyInput

        n = drafts.shape[-1]
        vi = NgramVerifyInput(drafts.flatten(), None, None, None, nxt, sib, n)
        return generate_token_bitmask(reqs, vi, nxt, sib, drafts, vocab_size)
    return generate_token_bitmask(reqs, nxt, sib, drafts, vocab_size)[0]


def _worker_and_batch(backend, reqs_grammars, outputs):
    """SGLang's NGRAMWorker (its __init__ needs a model worker: the attributes _prepare_draft_tokens reads are set
    as __init__ sets them) and a ScheduleBatch of real Reqs."""
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.cpp_ngram.ngram_corpus import NgramCorpus
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    worker = object.__new__(NGRAMWorker)
    worker.draft_token_num = WIDTH
    worker.max_trie_depth = 18
    worker.enable_overlap = False
    try:
        worker.ngram_corpus = NgramCorpus(max_trie_depth=18, draft_token_num=WIDTH)
    except RuntimeError as err:  # SGLang builds the corpus's C++ on first use
        if _version() < (0, 5, 17) and "ninja" in str(err):
            pytest.skip("SGLang 0.5.16's C++ n-gram corpus does not build with this machine's g++ 12 (its "
                        "ngram_corpus/result.h uses size_t without <cstddef>); 0.5.23's builds and is tested")
        raise
    reqs = []
    for k, (g, out) in enumerate(zip(reqs_grammars, outputs)):
        prompt = [1, 2, 3, 4]
        req = Req(f"r{k}", "", prompt, SamplingParams(max_new_tokens=64), vocab_size=backend.vocab.size)
        req.output_ids = list(out)
        req.grammar = g
        reqs.append(req)
    worker.ngram_corpus.batch_put([r.origin_input_ids_unpadded[-18:] + list(r.output_ids) for r in reqs])
    batch = ScheduleBatch(reqs=reqs, has_grammar=True)
    return worker, batch


def test_ngram_rows_carry_certain_runs_and_the_verify_mask_accepts_them(backend, vocab_size):
    """The hooked ``_prepare_draft_tokens`` puts each factorspec request's certain run in its row; SGLang's
    ``generate_token_bitmask`` over that tree accepts the run, and stops at the first token the grammar refuses."""
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    from factorspec_cp.engine import sglang as plugin

    vocab = backend.vocab
    trip = trip_problems(1)[0]
    stream = _stream(trip.spec, vocab, trip.gold)
    fs = _compile(backend, trip.spec.to_json())
    plain = _compile(backend, PLAIN)
    first = fs.certain_run(WIDTH)
    fs.accept_token(first[0])  # one committed token: the row starts with it
    plain_ids = backend.vocab.encode('{"')
    for t in plain_ids:
        plain.accept_token(t)
    worker, batch = _worker_and_batch(backend, [fs, plain, None], [[first[0]], plain_ids, [5, 6]])
    before = plugin.STATS.rows
    drafts, mask = NGRAMWorker._prepare_draft_tokens(worker, batch)  # the hooked method
    assert plugin.STATS.rows == before + 1
    run = fs.certain_run(WIDTH - 1)
    assert run == stream[1:1 + len(run)] and len(run) == WIDTH - 1  # trip's opening is certain for many tokens
    rows = drafts.reshape(3, WIDTH)
    assert rows[0, 0] == first[0] and rows[0, 1:].tolist() == run
    tree = mask.reshape(3, WIDTH, WIDTH)
    assert (tree[0] == np.tril(np.ones((WIDTH, WIDTH), dtype=tree.dtype))).all()
    nxt, sib = _tree_links(mask, 3, WIDTH)
    vmask = _verify_bitmask(batch.reqs, nxt, sib, torch.from_numpy(drafts).view(3, -1), vocab_size)
    rows_mask = vmask.view(3, WIDTH, -1)
    ref = trip.spec.decoder(vocab, mode="canonical")
    ref.consume(first[0])
    for j in range(WIDTH):  # every node of the chain: the grammar's mask after the run's first j tokens
        assert np.array_equal(mask_to_ids(rows_mask[0, j].numpy(), vocab_size), ref.allowed_tokens()), j
        if j < WIDTH - 1:
            ref.consume(run[j])
    assert fs.grammar.num_tokens == 1  # the traversal rolled every draft token back
    # a wrong token in the middle: the traversal stops there (its node and what follows keep the unfilled value)
    bad = rows[0].copy()
    bad[3] = next(t for t in range(vocab_size) if t != run[2])
    generate = _verify_bitmask(batch.reqs[:1], nxt[:1], sib[:1], torch.from_numpy(bad).view(1, -1),
                               vocab_size).view(WIDTH, -1)
    assert np.array_equal(generate[:3].numpy(), rows_mask[0, :3].numpy())
    assert (generate[3:].numpy() == -1).all()
    assert fs.grammar.num_tokens == 1


def test_rows_without_a_certain_run_keep_the_corpus_proposals(backend):
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    plain = _compile(backend, PLAIN)
    worker, batch = _worker_and_batch(backend, [plain, None], [[], [7, 8, 9]])
    hooked = NGRAMWorker._prepare_draft_tokens(worker, batch)
    original = NGRAMWorker._prepare_draft_tokens.__wrapped__  # SGLang's own, under the hook
    assert hooked[0].shape == (2 * WIDTH,)
    again = original(worker, batch)  # the hook changed nothing here: the corpus's own rows
    assert np.array_equal(again[0], hooked[0]) and np.array_equal(again[1], hooked[1])


def test_the_printed_launch_line_parses_as_sglang_server_args(server_args, model_dir):
    # `factorspec serve --engine sglang --dry-run` prints it; SGLang's own parser (with the plugin loaded) takes it
    import shlex

    from sglang.srt.server_args import prepare_server_args

    out = subprocess.run([sys.executable, "-m", "factorspec_cp.cli", "serve", "--engine", "sglang", "--model",
                          model_dir, "--num-speculative-tokens", "15", "--dry-run", "--", "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    argv = shlex.split(out.stdout.strip().splitlines()[-1])
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    args = prepare_server_args(argv[3:])
    assert args.grammar_backend == "factorspec" and args.speculative_algorithm == "NGRAM"
    assert args.speculative_num_draft_tokens == 16 and args.port == 30000 and args.device == "cpu"
