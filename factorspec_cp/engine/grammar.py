"""The per-request grammar every engine drives, and the compile cache behind it (DESIGN.md, Engine and serving).

A :class:`Grammar` wraps one request's token matcher (our :class:`~factorspec_cp.tokenmap.decoder.Decoder`, or the
XGrammar baseline behind the same interface) in the verbs servers already call: ``accept(tokens) -> bool``,
``validate(tokens) -> int`` (longest admitted prefix, state unchanged), ``rollback(k)``, ``fill(bitmask, row)``
(packed int32, XGrammar's layout, written into the server's own buffer), ``certain_run(k)`` and
``is_terminated()``. The embedded engine, the vLLM plugin and the SGLang plugin all hold one of these per request.

A :class:`GrammarCompiler` compiles declarations for one vocabulary and style, once: the compiled form (the
:class:`~factorspec_cp.spec.Spec`, its layout and the mask caches its decoders share) is cached by the
declaration's canonical JSON, bounded, and safe to call from a server's compile thread pool.

>>> import factorspec_cp as fs
>>> from factorspec_cp.tokenmap import Vocabulary
>>> vocab = Vocabulary.smollm2()
>>> compiler = GrammarCompiler(vocab)
>>> decl = {"type": "object", "required": ["a", "b"], "properties": {
...     "a": {"type": "integer", "minimum": 1, "maximum": 3}, "b": {"type": "integer", "minimum": 1, "maximum": 3}},
...     "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"], [1, "/b"]], "op": "==", "rhs": 6}]}}
>>> g = compiler.compile(decl).grammar()
>>> run = g.certain_run(64)                  # a + b == 6 leaves one record: every token is certain
>>> vocab.decode(run[:-1]), run[-1] in vocab.eos_token_ids
(b'{"a": 3, "b": 3}', True)
>>> g.validate(run) == len(run), g.accept(run), g.is_terminated()
(True, True, True)
>>> compiler.compile(decl) is compiler.compile(dict(decl))   # cached by content
True
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..spec import Spec
from ..tokenmap import Vocabulary
from ..tokenmap.decoder import Decoder, compiled_for, mask_words

__all__ = ["Grammar", "GrammarCompiler", "CompiledDeclaration", "declaration_key", "has_declaration"]

#: the root key that marks a JSON Schema as a factorspec declaration
MARK = "x-factorspec"


def has_declaration(schema: Any) -> bool:
    """Whether a JSON Schema (a dict or its JSON text) carries ``x-factorspec`` at its root."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError:
            return False
    return isinstance(schema, dict) and MARK in schema


def declaration_key(declaration: Spec | dict[str, Any] | str) -> str:
    """The cache key of a declaration: its JSON text with keys in their given order (property order decides the
    rendering, so two schemas that differ only in order are different declarations)."""
    if isinstance(declaration, Spec):
        declaration = declaration.to_json()
    if isinstance(declaration, (str, bytes)):
        declaration = json.loads(declaration)
    return json.dumps(declaration, ensure_ascii=False, separators=(",", ":"))


class Grammar:
    """One request's constraint, in the verbs serving engines call.

    ``matcher`` is anything with the decoder's interface (``consume``/``fill_mask``/``rollback``/``is_terminated``,
    optionally ``certain_run``): a :class:`Decoder`, or the XGrammar baseline. A rejected token never changes the
    state: :meth:`accept` takes all of ``tokens`` or none of them.
    """

    def __init__(self, matcher: Any, *, words: int | None = None):
        self.matcher = matcher
        self.words = words if words is not None else mask_words(matcher.vocab.size)
        self._scratch = np.zeros(self.words, dtype=np.int32)
        self._count = 0

    def __repr__(self) -> str:
        return f"Grammar({self.matcher!r}, {self._count} tokens)"

    @property
    def num_tokens(self) -> int:
        """Tokens accepted so far."""
        return self._count

    def accept(self, tokens: Sequence[int]) -> bool:
        """Take every token of ``tokens`` in order; if one is refused, undo the ones taken and return False."""
        taken = 0
        for t in tokens:
            try:
                self.matcher.consume(int(t))
            except ValueError:
                if taken:
                    self.matcher.rollback(taken)
                return False
            taken += 1
        self._count += taken
        return True

    def validate(self, tokens: Sequence[int]) -> int:
        """The length of the longest prefix of ``tokens`` the grammar admits; the state is unchanged."""
        n = 0
        for t in tokens:
            try:
                self.matcher.consume(int(t))
            except ValueError:
                break
            n += 1
        if n:
            self.matcher.rollback(n)
        return n

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens."""
        if k:
            self.matcher.rollback(k)
            self._count -= k

    def reset(self) -> None:
        """Back to the start of the record."""
        self.rollback(self._count)

    def fill(self, bitmask: Any, row: int = 0) -> None:
        """Write the admitted tokens into row ``row`` of ``bitmask``: a 2-D int32 numpy array or CPU torch tensor
        (the server's own buffer), packed as bit ``t % 32`` of word ``t // 32``. Words past the vocabulary (a
        padded logit width) are cleared. After termination nothing is admitted."""
        target = _row_view(bitmask, row, self.words)
        if target is not None:
            self.matcher.fill_mask(target)
            return
        self.matcher.fill_mask(self._scratch)
        write_row(self._scratch, bitmask, row, self.words)

    def certain_run(self, k: int = 64) -> list[int]:
        """The tokens the declaration makes certain from here (at most ``k``; may end with EOS)."""
        fn = getattr(self.matcher, "certain_run", None)
        return fn(k) if fn is not None else []

    def is_terminated(self) -> bool:
        """Whether the record is complete and EOS was accepted."""
        return self.matcher.is_terminated()

    def is_complete(self) -> bool:
        """Whether the output so far is a whole record (EOS would be admitted)."""
        return self.matcher.is_complete()

    def record(self) -> Any:
        """The record, once complete."""
        return self.matcher.record()


def _row_view(bitmask: Any, row: int, words: int) -> np.ndarray | None:
    """Row ``row`` of ``bitmask`` as an int32 numpy view of exactly ``words`` words, where it is one."""
    target = bitmask[row]
    if hasattr(target, "numpy"):
        if target.device.type != "cpu":
            return None
        target = target.numpy()
    if target.shape == (words,) and target.dtype == np.int32 and target.flags.c_contiguous:
        return target
    return None


def write_row(src: np.ndarray, bitmask: Any, row: int, words: int) -> None:
    """Copy a packed mask row ``src`` (``words`` int32) into row ``row`` of ``bitmask`` (numpy or torch, any device,
    at least ``words`` wide; the words past it are cleared)."""
    target = bitmask[row]
    if hasattr(target, "numpy"):  # a torch tensor
        if target.device.type != "cpu":
            target[:words].copy_(_torch_from(src, target))
            target[words:] = 0
            return
        target = target.numpy()
    if target.dtype != np.int32 or target.ndim != 1 or target.shape[0] < words:
        raise ValueError(f"a bitmask row is int32 with at least {words} words, not {target.dtype} {target.shape}")
    target[:words] = src
    target[words:] = 0


def _torch_from(row: np.ndarray, like: Any) -> Any:
    import torch

    return torch.from_numpy(row).to(like.device)


class CompiledDeclaration:
    """A declaration compiled for one vocabulary and style: hands out per-request :class:`Grammar` objects that
    share its layout and mask caches."""

    def __init__(self, spec: Spec, vocab: Vocabulary, *, style: str | int, mode: str, backend: str | None,
                 service: Any = None):
        self.spec, self.vocab, self.style, self.mode, self.backend = spec, vocab, style, mode, backend
        self._service = service  # a callable giving the compiler's ConstraintService, or None (in-process)
        self._lock = threading.Lock()
        with self._lock:  # builds the shared layout and token index now, on the compiling thread
            compiled_for(spec, vocab, style)

    def __repr__(self) -> str:
        return f"CompiledDeclaration({len(self.spec.fields)} fields, {self.vocab.name}, {self.style}, {self.mode})"

    def grammar(self, *, session: Any = None, prime: bool = True) -> Grammar:
        """A fresh per-request grammar (its own solver session unless ``session`` is given). With ``prime`` (the
        default) its root pass and first certain run are computed now (:meth:`Decoder.prime`): a server compiles
        grammars off its step loop (vLLM on its structured-output thread pool), so the step that takes the first
        token does not wait for them.

        Where the compiler has constraint workers (``workers=N``) and no ``session`` is given, the grammar is a
        :class:`~.service.ServiceGrammar`: the session lives in a worker process, which computes each next mask row
        and certain run while the engine runs its forward pass."""
        if self._service is not None and session is None:
            return self._service().open(self.spec)  # type: ignore[no-any-return]
        with self._lock:
            dec = Decoder(self.spec, self.vocab, style=self.style, mode=self.mode, backend=self.backend,
                          session=session)
            if prime:
                dec.prime()
        return Grammar(dec)


class GrammarCompiler:
    """Compiles declarations for one vocabulary, cached by content (``max_entries`` most recent), thread-safe.

    Parameters
    ----------
    vocab
        The model's vocabulary (mask rows cover ``vocab.size`` ids).
    style, mode
        As for :meth:`Spec.decoder`: ``"compact"`` or an indent; ``"canonical"`` or ``"exact"``.
    backend
        The solver backend for sessions (default: chosen per declaration).
    workers
        Constraint worker processes (:mod:`~.service`): 0 keeps every session in-process; ``None`` (the default)
        reads ``$FACTORSPEC_CONSTRAINT_WORKERS`` (unset: 0), the switch server processes take.
    draft_wait
        With workers: the longest one step's drafts wait for their workers, in seconds, before the forward pass
        goes on without the ones not published (:class:`~.service.ConstraintService`); ``None`` (the default) reads
        ``$FACTORSPEC_DRAFT_WAIT_MS`` (unset: wait for every run).
    """

    def __init__(self, vocab: Vocabulary, *, style: str | int = "compact", mode: str = "canonical",
                 backend: str | None = None, max_entries: int = 256, workers: int | None = None,
                 draft_wait: float | None = None):
        from .service import draft_wait_from_env, workers_from_env

        self.vocab, self.style, self.mode, self.backend = vocab, style, mode, backend
        self.max_entries = max_entries
        self.workers = workers_from_env() if workers is None else int(workers)
        if self.workers < 0:
            raise ValueError(f"workers={workers}: 0 (in-process) or more")
        self.draft_wait = draft_wait_from_env() if draft_wait is None else float(draft_wait)
        if self.draft_wait is not None and not self.draft_wait >= 0:
            raise ValueError(f"draft_wait={draft_wait!r}: seconds (0 or more)")
        self._service: Any = None
        self._cache: OrderedDict[str, CompiledDeclaration] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self.hits = self.misses = 0

    def compile(self, declaration: Spec | dict[str, Any] | str) -> CompiledDeclaration:
        """The compiled form of ``declaration`` (a Spec, its JSON form, or that JSON as text). Raises the typed
        :class:`~factorspec_cp.errors.DeclarationError` of a bad declaration."""
        key = declaration_key(declaration)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
            gate = self._building.setdefault(key, threading.Lock())
        with gate:  # one thread compiles a key; the others wait for it and take its result
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self.hits += 1
                    return hit
            spec = declaration if isinstance(declaration, Spec) else Spec.from_json(json.loads(key))
            compiled = CompiledDeclaration(spec, self.vocab, style=self.style, mode=self.mode, backend=self.backend,
                                           service=self.service if self.workers else None)
            with self._lock:
                self.misses += 1
                self._cache[key] = compiled
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
                self._building.pop(key, None)
            return compiled

    def service(self) -> Any:
        """The compiler's :class:`~.service.ConstraintService` (started on first use; ``workers`` > 0 only)."""
        with self._lock:
            if self._service is None:
                from .service import ConstraintService

                self._service = ConstraintService(self.vocab, self.workers, style=self.style, mode=self.mode,
                                                  backend=self.backend, draft_wait=self.draft_wait)
            return self._service

    def close(self) -> None:
        """Stop the compiler's constraint workers, if it started any."""
        with self._lock:
            service, self._service = self._service, None
        if service is not None:
            service.close()
