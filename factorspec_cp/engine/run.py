"""The embedded engine: masked decoding with drafts verified in one forward pass (DESIGN.md, Engine).

Each request has a *constraint* that gives the mask at every position (our :class:`~factorspec_cp.tokenmap.decoder.
Decoder`, XGrammar on the schema alone, a decoder pinned to a solver's answer, or nothing) and a *drafter*. One
engine step, for every active request at once:

1. the drafter proposes up to ``width - 1`` tokens; the engine walks them under the constraint, taking the mask at
   each position, and cuts the draft before the first token its mask refuses (then rolls the constraint back);
2. one batched forward pass (:meth:`EmbeddedModel.verify`) scores every position of every draft;
3. at each position the logits are masked, and the draft token is accepted exactly as speculative sampling does for
   a one-token proposal: greedy, iff it is the masked argmax; with temperature T, with probability p(token) under
   the masked distribution, else the position is resampled from that distribution without the token. So the
   committed tokens follow the masked model's distribution whatever the draft, and every one of them was admitted
   by its mask;
4. the accepted tokens and the correction (or bonus) token are committed to the constraint and the KV cache.

The verify width is per request: the certain run plus one, capped at ``width`` (the cap is chosen by measurement
in ``factorspec bench generate``). Where the rest of the record is certain (its certain run ends it), a request
drafting certain runs takes those tokens without a forward pass: each admits one token in canonical mode.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..spec import Spec
from ..tokenmap import Vocabulary
from ..tokenmap.decoder import mask_words
from .drafters import Certain, Drafter, Hybrid, Syntax, make_drafter
from .grammar import Grammar, GrammarCompiler

__all__ = ["Engine", "Job", "Result", "CONSTRAINTS", "extract_json"]

#: how masks are made: "ours" (declaration with relations), "xgrammar" (schema only), "pinned" (solve-then-emit:
#: the record a solver found, as the only admissible one), "none" (unconstrained)
CONSTRAINTS = ("ours", "xgrammar", "pinned", "none")

SYSTEM = "You are a careful planner. Answer with one JSON object and nothing else."


@dataclass
class Job:
    """One request: a declaration, the user prompt, how to constrain and how to draft."""

    spec: Spec
    prompt: str
    drafter: str | Drafter = "certain"
    constraint: str = "ours"
    max_tokens: int = 1024
    key: Any = None  # the caller's label (problem id)
    system: str | None = SYSTEM


@dataclass
class Result:
    key: Any
    record: Any  # the parsed record, or None when the output is not JSON
    text: str
    tokens: list[int]
    stats: dict[str, Any]
    margins: list[float] = field(default_factory=list, repr=False)  # masked top-1 minus top-2 logit per token

    def _repr_html_(self) -> str:
        from ..display import result_html
        return result_html(self)


def extract_json(text: str) -> Any:
    """The first JSON object in ``text`` (unconstrained outputs may wrap it in prose or code fences), or None."""
    dec = json.JSONDecoder()
    for k, ch in enumerate(text):
        if ch == "{":
            try:
                return dec.raw_decode(text[k:])[0]
            except json.JSONDecodeError:
                continue
    return None


class _Request:
    def __init__(self, engine: Engine, job: Job):
        self.job = job
        self.drafter = make_drafter(job.drafter)
        vocab = engine.vocab
        self.syntax = None
        self.solve_seconds = 0.0
        self.constraint: Grammar | None = None
        if job.constraint == "ours":
            self.constraint = engine.compiler.compile(job.spec).grammar()
        elif job.constraint == "xgrammar":
            from ..baselines.xgrammar import XGrammarMatcher
            self.constraint = Grammar(XGrammarMatcher(job.spec.schema, vocab))
        elif job.constraint == "pinned":
            t = time.perf_counter()
            session = job.spec.session("cpsat")
            for p in job.spec.fields:
                session.assign(p, session.admissible(p)[0])
            self.solve_seconds = time.perf_counter() - t
            self.constraint = engine.compiler.compile(job.spec).grammar(session=session)
        elif job.constraint != "none":
            raise ValueError(f"constraint must be one of {CONSTRAINTS}, not {job.constraint!r}")
        if isinstance(self.drafter, (Certain, Hybrid)) and job.constraint not in ("ours", "pinned"):
            raise ValueError(f"the {self.drafter.name} drafter drafts certain runs, which only our masks define: "
                             f"use constraint 'ours' or 'pinned', not {job.constraint!r}")
        if isinstance(self.drafter, Syntax):
            # a second grammar without relations, fed the same tokens: it tracks the output and masks nothing
            self.syntax = Grammar(Spec(job.spec.schema).decoder(vocab, mode="exact"))
        self.prompt = engine.model.chat_prompt(job.prompt, job.system)
        self.generated: list[int] = []
        self.done = False
        self.steps = self.drafted = self.accepted = self.tail = 0
        self.constraint_seconds = 0.0
        self.margins: list[float] = []
        self.t0 = time.perf_counter()
        self.mreq: Any = None

    @property
    def context(self) -> list[int]:
        return self.prompt + self.generated

    def consume(self, token: int) -> None:
        for g in (self.constraint, self.syntax):
            if g is not None and not g.accept((token,)):
                raise ValueError(f"token {token} refused by {g!r} after its mask admitted it")

    def rollback(self, k: int) -> None:
        if k:
            if self.constraint is not None:
                self.constraint.rollback(k)
            if self.syntax is not None:
                self.syntax.rollback(k)


class Engine:
    """Batched masked decoding with speculative verification on the embedded model.

    Parameters
    ----------
    model
        An :class:`~factorspec_cp.engine.model.EmbeddedModel` (default: SmolLM2-135M-Instruct, packaged).
    width
        The verify width cap: at most ``width - 1`` draft tokens per request per step.
    temperature
        0: greedy. Otherwise sampling at this temperature, exact under the masks.
    batch
        Requests decoded together (one forward pass per step for all of them).
    constraint_workers
        Constraint worker processes for the requests' sessions (:mod:`~.service`; 0: in-process; ``None``:
        ``$FACTORSPEC_CONSTRAINT_WORKERS``, unset 0). Call :meth:`close` (or use ``with``) to stop them.
    """

    def __init__(self, model: Any = None, *, width: int = 16, temperature: float = 0.0, batch: int = 4,
                 seed: int = 0, constraint_workers: int | None = None):
        if model is None:
            from .model import EmbeddedModel
            model = EmbeddedModel.smollm2()
        if width < 1 or batch < 1:
            raise ValueError("width and batch must be at least 1")
        self.model, self.width, self.temperature, self.batch = model, width, temperature, batch
        self.vocab = Vocabulary.smollm2() if "smollm2" in model.name else None
        if self.vocab is None:
            raise ValueError(f"no bundled vocabulary for {model.name}")
        if self.vocab.size != model.vocab_size:
            raise ValueError(f"vocabulary covers {self.vocab.size} ids, the model's logits {model.vocab_size}")
        self.eos = set(model.eos_token_ids)
        self.gen = torch.Generator().manual_seed(seed)
        self._words = mask_words(self.vocab.size)
        self._row = np.zeros((1, self._words), dtype=np.int32)
        self.compiler = GrammarCompiler(self.vocab, workers=constraint_workers)

    def close(self) -> None:
        """Stop the constraint workers, if any were started."""
        self.compiler.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- masks ----------------------------------------------------------------------------------------------------
    def _mask(self, r: _Request) -> torch.Tensor | None:
        if r.constraint is None:
            return None
        r.constraint.fill(self._row, 0)
        bits = np.unpackbits(self._row[0].view(np.uint8), bitorder="little")[: self.vocab.size]
        return torch.from_numpy(bits.astype(bool))

    def _walk(self, r: _Request, limit: int) -> tuple[list[int], list[torch.Tensor | None]]:
        """The draft cut at its first refused token, and the mask at every draft position plus the bonus one."""
        t = time.perf_counter()
        proposal = r.drafter.propose(r, limit)
        draft: list[int] = []
        masks: list[torch.Tensor | None] = []
        extended = False
        while True:
            m = self._mask(r)
            masks.append(m)
            if len(draft) >= limit:
                break
            if len(draft) == len(proposal):
                if extended:
                    break
                proposal = proposal + r.drafter.extend(r, draft, limit - len(draft))
                extended = True
                if len(draft) == len(proposal):
                    break
            tok = proposal[len(draft)]
            if m is not None and not m[tok]:
                break
            r.consume(tok)
            draft.append(tok)
            if tok in self.eos:
                break
        r.rollback(len(draft))
        r.constraint_seconds += time.perf_counter() - t
        return draft, masks

    # -- acceptance -----------------------------------------------------------------------------------------------
    def _pick(self, logits: torch.Tensor, mask: torch.Tensor | None, draft_token: int | None,
              r: _Request) -> tuple[int, bool]:
        """The committed token at one position, and whether it is the draft token."""
        lg = logits.float()
        if mask is not None:
            lg = lg.masked_fill(~mask, float("-inf"))
        top = torch.topk(lg, 2).values
        r.margins.append(float(top[0] - top[1]) if torch.isfinite(top[1]) else float("inf"))
        if self.temperature <= 0:
            tok = int(torch.argmax(lg))
            return tok, tok == draft_token
        p = torch.softmax(lg / self.temperature, dim=-1)
        if draft_token is not None:
            if float(torch.rand((), generator=self.gen)) < float(p[draft_token]):
                return draft_token, True
            p = p.clone()
            p[draft_token] = 0.0
            if float(p.sum()) <= 0:  # the draft token had all the mass: cannot be rejected
                return draft_token, True
        return int(torch.multinomial(p, 1, generator=self.gen)), False

    def _step(self, active: list[_Request]) -> None:
        drafts, masks = [], []
        for r in active:
            room = r.job.max_tokens - len(r.generated)
            d, m = self._walk(r, max(0, min(self.width - 1, room - 1)))
            drafts.append(d)
            masks.append(m)
        rows = self.model.verify([r.mreq for r in active], drafts)
        for r, d, ms, lg in zip(active, drafts, masks, rows):
            r.steps += 1
            r.drafted += len(d)
            committed: list[int] = []
            token = None
            for i in range(len(d) + 1):
                if i == len(d) and d and d[-1] in self.eos:
                    break  # the draft ended the record: no bonus position
                tok, ok = self._pick(lg[i], ms[i], d[i] if i < len(d) else None, r)
                if i < len(d) and ok:
                    committed.append(tok)
                    continue
                token = tok
                break
            r.accepted += len(committed)
            t = time.perf_counter()
            for tok in committed + ([token] if token is not None else []):
                r.consume(tok)
            r.constraint_seconds += time.perf_counter() - t
            r.generated += committed + ([token] if token is not None else [])
            finished = any(tok in self.eos for tok in r.generated[-(len(committed) + 1):])
            if not finished and self._tail(r):
                finished = True
            if finished or len(r.generated) >= r.job.max_tokens:
                r.done = True
            elif token is not None:
                self.model.commit(r.mreq, len(committed), token)
            else:  # pragma: no cover - only an EOS-ended draft has no bonus token, and that finishes
                raise AssertionError("no token to commit")

    def _tail(self, r: _Request) -> bool:
        """Where the rest of the record is certain (its certain run ends with EOS), take it without a forward pass:
        in canonical mode each of those positions admits one token, which any acceptance rule commits. Only for
        drafters that draft certain runs (the no-drafting baselines keep one token per step)."""
        if not isinstance(r.drafter, (Certain, Hybrid)) or r.constraint is None:
            return False
        t = time.perf_counter()
        run = r.constraint.certain_run(r.job.max_tokens - len(r.generated))
        ok = bool(run) and run[-1] in self.eos
        if ok:
            for tok in run:
                r.consume(tok)
            r.generated += run
            r.tail += len(run)
            r.margins += [float("inf")] * len(run)  # one admitted token each: no second choice
        r.constraint_seconds += time.perf_counter() - t
        return ok

    # -- public ---------------------------------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], *, progress: Any = None) -> list[Result]:
        """Decode every job (``batch`` at a time, a finished one replaced by the next); results in job order."""
        pending = list(enumerate(jobs))
        active: list[tuple[int, _Request]] = []
        out: list[Result | None] = [None] * len(jobs)
        while pending or active:
            while pending and len(active) < self.batch:
                k, job = pending.pop(0)
                r = _Request(self, job)
                r.mreq = self.model.start(r.prompt)
                active.append((k, r))
            self._step([r for _, r in active])
            still = []
            for k, r in active:
                if r.done:
                    self.model.release(r.mreq)
                    out[k] = self._result(r)
                    if progress is not None:
                        progress(out[k])
                else:
                    still.append((k, r))
            active = still
        return out  # type: ignore[return-value]

    def generate(self, spec: Spec, prompt: str, *, drafter: str | Drafter = "certain", constraint: str = "ours",
                 max_tokens: int = 1024) -> Result:
        """One record for one prompt."""
        return self.run([Job(spec, prompt, drafter, constraint, max_tokens)])[0]

    def _result(self, r: _Request) -> Result:
        toks = [t for t in r.generated if t not in self.eos]
        text = self.vocab.decode(toks).decode("utf-8", "replace")
        if r.constraint is not None and r.constraint.is_terminated():
            record = json.loads(text)
        else:
            record = extract_json(text)
        n = len(r.generated)
        stats = {"verify_steps": r.steps, "tokens": n, "accept_length": round(n / max(1, r.steps), 3),
                 "drafted": r.drafted, "accepted_drafts": r.accepted, "tail_tokens": r.tail,
                 "seconds": round(time.perf_counter() - r.t0, 4),
                 "constraint_seconds": round(r.constraint_seconds, 4), "solve_seconds": round(r.solve_seconds, 4),
                 "terminated": bool(r.generated and r.generated[-1] in self.eos),
                 "drafter": r.drafter.name, "constraint": r.job.constraint, "width": self.width}
        return Result(r.job.key, record, text, list(r.generated), stats, r.margins)
