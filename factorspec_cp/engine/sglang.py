"""SGLang plugin: factorspec declarations as a grammar backend, their certain runs in SGLang's n-gram draft rows.

Supported: SGLang 0.5.16 to 0.5.23 (:data:`SUPPORTED_SGLANG`). Loaded through the entry point
``factorspec = "factorspec_cp.engine.sglang:register"`` in group ``sglang.srt.plugins``, which SGLang's
``load_plugins()`` runs once in each of its processes (launcher, engine, scheduler); this module imports SGLang only
then. No SGLang file is patched: the plugin registers a grammar backend and one hook through SGLang's own registries.

- **Masks.** ``--grammar-backend factorspec`` (:func:`register` adds the choice) makes :class:`FactorspecBackend` the
  server's grammar backend. A ``json_schema`` whose root carries ``x-factorspec`` compiles to a factorspec grammar
  (vocabulary from the server's tokenizer, padded to the logit width; compiled once per declaration, and SGLang's
  cache hands out ``copy()``, a fresh request grammar over the same compiled form); every other request (plain
  schemas, regex, EBNF, structural tags) goes to SGLang's own XGrammar backend, built as ``--grammar-backend
  xgrammar`` would build it. Both kinds write XGrammar's packed int32 rows into one batch mask, so the first grammar
  of a batch may be of either kind: allocation, device move and apply are XGrammar's. A declaration that does not
  compile fails its request alone (SGLang aborts it with the typed error's text); a refused token raises
  ``ValueError``, as SGLang's grammars do.
- **Drafts.** With ``--speculative-algorithm NGRAM`` the grammar runs synchronously, so when
  ``NGRAMWorker._prepare_draft_tokens`` runs, every request's grammar has taken each committed token. The AROUND
  hook :func:`_draft_hook` calls the original (the n-gram corpus's tree rows) and then, for each factorspec request
  with a certain run, overwrites its row with ``[last token, certain run..., padding]`` and a chain mask (capped by
  the server's draft width, ``--speculative-num-draft-tokens``). Rows of other requests, and of factorspec requests
  where nothing is certain, keep the corpus's proposals, which SGLang's verify masks check like any draft.
  ``FACTORSPEC_SGLANG_DRAFTS=0`` turns the hook's rewrite off.

``factorspec serve --engine sglang`` prints the launch line (:func:`launch_command`); no SGLang server runs on this
project's machines, see the README.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .grammar import CompiledDeclaration, Grammar, GrammarCompiler, has_declaration

__all__ = ["register", "create_backend", "launch_command", "put_certain_runs", "SUPPORTED_SGLANG", "BACKEND_NAME",
           "DRAFT_TARGET", "DRAFTS_ENV", "STATS"]

SUPPORTED_SGLANG = tuple(f"0.5.{n}" for n in range(16, 24))
BACKEND_NAME = "factorspec"
#: the method the draft hook wraps (present, with this signature, in every supported version)
DRAFT_TARGET = "sglang.srt.speculative.ngram_worker.NGRAMWorker._prepare_draft_tokens"
#: ``0`` turns the certain-run rewrite of draft rows off (masks stay)
DRAFTS_ENV = "FACTORSPEC_SGLANG_DRAFTS"

_registered = False
_lock = threading.Lock()


@dataclass
class _Stats:
    """What the draft hook did in this process (for tests and benchmarks)."""

    batches: int = 0
    rows: int = 0  # draft rows rewritten with a certain run
    tokens: int = 0  # certain tokens put in them


STATS = _Stats()


def _version() -> str:
    import importlib.metadata as md

    return md.version("sglang")


# ------------------------------------------------------------------------------------------------------ register
def register() -> None:
    """The ``sglang.srt.plugins`` entry point: the ``factorspec`` grammar backend (and its ``--grammar-backend``
    choice) and the n-gram draft hook. Idempotent."""
    global _registered
    with _lock:
        if _registered:
            return
        version = _version()
        if version not in SUPPORTED_SGLANG:
            raise RuntimeError(f"factorspec's SGLang plugin supports SGLang {SUPPORTED_SGLANG[0]} to "
                               f"{SUPPORTED_SGLANG[-1]}, not {version}")
        from sglang.srt.constrained.base_grammar_backend import register_grammar_backend
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
        from sglang.srt.server_args import add_grammar_backend_choices

        add_grammar_backend_choices([BACKEND_NAME])
        register_grammar_backend(BACKEND_NAME, create_backend)
        HookRegistry.register(DRAFT_TARGET, _draft_hook, HookType.AROUND)
        _registered = True


def create_backend(server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None) -> Any:
    """SGLang's ``init_func`` for ``--grammar-backend factorspec``: a :class:`FactorspecBackend`."""
    return _classes()["FactorspecBackend"](server_args, tokenizer, vocab_size, eos_token_ids)


def _serving_option(server_args: Any, name: str, default: Any) -> Any:
    """A server option as the running SGLang resolves it: its runtime context from 0.5.22, the arguments before."""
    try:
        from sglang.srt.runtime_context import get_serving

        return getattr(get_serving(), name)
    except (ImportError, AttributeError, ValueError):
        return getattr(server_args, name, default)


_CLASSES: dict[str, Any] = {}


def _classes() -> dict[str, Any]:
    """The backend and grammar classes, defined once SGLang is importable (they subclass SGLang's)."""
    if _CLASSES:
        return _CLASSES
    from sglang.srt.constrained import base_grammar_backend as base
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar, XGrammarGrammarBackend

    class FactorspecGrammar(base.BaseGrammarObject):
        """SGLang's per-request grammar over a factorspec :class:`~.grammar.Grammar`; rows in XGrammar's layout."""

        def __init__(self, compiled: CompiledDeclaration, grammar: Grammar | None = None):
            super().__init__()
            self.compiled, self._grammar = compiled, grammar
            self.grammar_stats = base.GrammarStats(dispatch_type="factorspec")

        @property
        def grammar(self) -> Any:
            """The request's grammar, made on first use: the copy SGLang keeps in its cache is never used, so it
            holds no session (nor a constraint worker's slot)."""
            if self._grammar is None:
                self._grammar = self.compiled.grammar()
            return self._grammar

        def __repr__(self) -> str:
            return f"FactorspecGrammar({self._grammar!r})"

        def accept_token(self, token: int) -> None:
            if self.grammar.is_terminated():  # as XGrammar's grammar: tokens after the end are ignored
                return
            self.current_token = token
            if not self.grammar.accept([int(token)]):
                raise ValueError(f"Tokens not accepted: {token} (factorspec declaration, after "
                                 f"{self.grammar.num_tokens} tokens)")

        def rollback(self, k: int) -> None:
            self.grammar.rollback(k)

        def is_terminated(self) -> bool:
            return self.grammar.is_terminated()

        def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
            return XGrammarGrammarBackend.allocate_vocab_mask(vocab_size, batch_size, device)

        def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
            self.grammar.fill(vocab_mask, idx)

        @staticmethod
        def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
            return XGrammarGrammar.move_vocab_mask(vocab_mask, device)

        def apply_vocab_mask(self, logits: Any, vocab_mask: Any) -> None:
            # XGrammar's own (it reads nothing of the grammar): the same kernels for both kinds of row
            XGrammarGrammar.apply_vocab_mask(self, logits=logits, vocab_mask=vocab_mask)

        def copy(self) -> FactorspecGrammar:
            """A fresh request grammar over the same compiled declaration (SGLang's cache hands out copies)."""
            return FactorspecGrammar(self.compiled)

        def try_jump_forward(self, tokenizer: Any) -> None:
            return None  # certain runs go out as drafts (the n-gram hook), verified in one forward pass

        def certain_run(self, k: int) -> list[int]:
            return self.grammar.certain_run(k)

    class FactorspecBackend(base.BaseGrammarBackend):
        """Factorspec grammars for ``json_schema`` requests that carry ``x-factorspec``; SGLang's XGrammar
        backend, built as ``--grammar-backend xgrammar`` builds it, for everything else."""

        def __init__(self, server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None):
            super().__init__()
            from ..tokenmap import Vocabulary

            eos = sorted(int(t) for t in eos_token_ids) if eos_token_ids else None
            options: dict[str, Any] = {"any_whitespace": not _serving_option(
                server_args, "constrained_json_disable_any_whitespace", False)}
            if "max_whitespace_cnt" in inspect.signature(XGrammarGrammarBackend.__init__).parameters:  # 0.5.17 on
                options["max_whitespace_cnt"] = _serving_option(server_args, "constrained_json_max_whitespace_cnt",
                                                                None)
            self.xgrammar = XGrammarGrammarBackend(tokenizer, vocab_size=vocab_size, model_eos_token_ids=eos,
                                                   **options)
            tok = getattr(tokenizer, "tokenizer", tokenizer)
            if eos is None:
                eos = [t for t in [getattr(tok, "eos_token_id", None)] if t is not None] or None
            self.vocab = Vocabulary.from_tokenizer(tok, size=vocab_size, eos_token_ids=eos,
                                                   name=getattr(tok, "name_or_path", None) or "sglang")
            self.compiler = GrammarCompiler(self.vocab)

        def dispatch_json(self, key_string: str) -> Any:
            if not has_declaration(key_string):
                return self.xgrammar.dispatch_json(key_string)
            try:
                compiled = self.compiler.compile(key_string)
                return FactorspecGrammar(compiled, compiled.grammar())
            except (ValueError, json.JSONDecodeError) as err:  # DeclarationError and its kinds; malformed JSON
                return base.InvalidGrammarObject(f"x-factorspec: {type(err).__name__}: {err}")

        def dispatch_regex(self, key_string: str) -> Any:
            return self.xgrammar.dispatch_regex(key_string)

        def dispatch_ebnf(self, key_string: str) -> Any:
            return self.xgrammar.dispatch_ebnf(key_string)

        def dispatch_structural_tag(self, key_string: str) -> Any:
            return self.xgrammar.dispatch_structural_tag(key_string)

        # token filtering and framing (reasoning, tool tags) are XGrammar's
        @property
        def is_support_token_filter(self) -> bool:
            return bool(getattr(self.xgrammar, "is_support_token_filter", False))

        def set_token_filter(self, *args: Any, **kwargs: Any) -> Any:
            return self.xgrammar.set_token_filter(*args, **kwargs)

        def reserve_framing_tokens(self, token_ids: Any) -> None:
            fn = getattr(self.xgrammar, "reserve_framing_tokens", None)
            if fn is not None:
                fn(token_ids)

        def compile_framed_grammar(self, grammar: Any, frame: Any) -> Any:
            if isinstance(grammar, FactorspecGrammar):
                return None  # a declaration cannot be embedded in an XGrammar structural tag
            fn = getattr(self.xgrammar, "compile_framed_grammar", None)
            return fn(grammar, frame) if fn is not None else None

        def init_strict_reasoning_grammar(self, reasoning: bool) -> Any:
            fn = getattr(self.xgrammar, "init_strict_reasoning_grammar", None)
            return fn(reasoning) if fn is not None else None

        def reset(self) -> None:
            super().reset()
            self.xgrammar.reset()

    _CLASSES.update(FactorspecGrammar=FactorspecGrammar, FactorspecBackend=FactorspecBackend)
    return _CLASSES


# -------------------------------------------------------------------------------------------------------- drafts
def put_certain_runs(reqs: Any, drafts: np.ndarray, mask: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Overwrite the draft rows of factorspec requests that have a certain run: ``drafts`` holds ``width`` tokens per
    request (the first is the last committed token), ``mask`` their tree (``mask[b, i, j]``: node ``j`` is an
    ancestor of node ``i`` or ``i`` itself), flat or shaped. Each such row becomes ``[last token, run..., padding]``
    (run capped at ``width - 1``, padding the run's last token) with a chain mask; other rows are left as they are.
    Returns the arrays (the same objects, written in place)."""
    if os.environ.get(DRAFTS_ENV, "1") == "0":
        return drafts, mask
    cls = _CLASSES.get("FactorspecGrammar")
    if cls is None:
        return drafts, mask
    bs = len(reqs)
    tree = mask.reshape(bs, width, width)
    if not np.shares_memory(tree, mask):
        raise ValueError("the n-gram draft mask is not contiguous: cannot rewrite it in place")
    chain = np.tril(np.ones((width, width), dtype=tree.dtype))
    STATS.batches += 1
    for i, req in enumerate(reqs):
        g = getattr(req, "grammar", None)
        if not isinstance(g, cls) or g.is_terminated():
            continue
        run = g.certain_run(width - 1)
        if not run:
            continue
        row = drafts[i * width:(i + 1) * width]
        row[1:1 + len(run)] = run
        row[1 + len(run):] = run[-1]
        tree[i] = chain
        STATS.rows += 1
        STATS.tokens += len(run)
    return drafts, mask


def _draft_hook(original: Any, worker: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``NGRAMWorker._prepare_draft_tokens``: the corpus's rows, then certain runs where declarations make
    tokens certain."""
    drafts, mask = original(worker, batch, *args, **kwargs)
    return put_certain_runs(batch.reqs, drafts, mask, int(worker.draft_token_num))


# -------------------------------------------------------------------------------------------------------- launch
def launch_command(model: str, *, host: str = "127.0.0.1", port: int = 30000, num_draft_tokens: int = 16,
                   extra: list[str] | None = None, python: str = "python") -> list[str]:
    """The ``python -m sglang.launch_server`` argv for a GPU machine: factorspec's grammar backend and n-gram
    drafts (SGLang's NGRAM speculative algorithm, whose rows the plugin fills with certain runs)."""
    cmd = [python, "-m", "sglang.launch_server", "--model-path", model, "--host", host, "--port", str(port),
           "--grammar-backend", BACKEND_NAME]
    if num_draft_tokens > 0:
        cmd += ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(num_draft_tokens)]
    return cmd + list(extra or [])
