"""The constraint service: request sessions in worker processes, mask rows and certain runs in shared memory.

An exact mask costs more than a grammar mask, and on a server's step loop that cost delays every request of the
step. With ``workers=N`` (``--constraint-workers N``; 0 keeps everything in-process) each request's decoder lives
in one of ``N`` worker processes. The grammar the engine holds, :class:`ServiceGrammar`, has the verbs of
:class:`~.grammar.Grammar`; what it does:

- ``accept(tokens)`` sends the tokens to the request's worker, which takes them and answers at once (accepted or
  not), then computes the next mask row and certain run into the request's slot of a shared-memory segment while
  the engine goes on (its forward pass);
- ``fill(bitmask, row)`` and ``certain_run(k)`` read the slot, waiting only if the worker has not written it yet (a
  sequence number in the slot says which state it holds); with ``draft_wait`` the step's certain runs wait at most that
  long in all and are otherwise empty (the forward pass goes on without those drafts);
- ``rollback(k)`` is sent on like an accept, without a wait: inside the published state (a verify step's draft taken
  to fill the row after it, then undone) the state still answers, and past it the worker publishes the state it
  returns to; ``is_terminated()`` is known from the tokens taken (EOS ends a record);
- ``validate`` (past the published state) and ``record`` are calls to the worker.

Requests are spread over workers: a declaration's requests go to the worker that compiled it (one compile, shared
caches) while its load stays within ``AFFINITY_SLACK`` requests of the least busy one, others to the least busy
worker. A worker that dies fails its own requests only (:class:`WorkerDied`, raised by the next call of each) and is
replaced for new ones; a declaration that does not compile raises its typed error from :meth:`ConstraintService.open`.
Every segment is created and unlinked by the service (the parent), so none outlives :meth:`ConstraintService.close`
or a killed worker.

>>> from factorspec_cp.tokenmap import Vocabulary
>>> decl = {"type": "object", "required": ["a", "b"], "properties": {
...     "a": {"type": "integer", "minimum": 1, "maximum": 3}, "b": {"type": "integer", "minimum": 1, "maximum": 3}},
...     "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"], [1, "/b"]], "op": "==", "rhs": 6}]}}
>>> with ConstraintService(Vocabulary.smollm2(), workers=1) as service:
...     g = service.open(decl)
...     run = g.certain_run(64)
...     ok = g.accept(run)
...     (ok, g.is_terminated(), g.record())
(True, True, {'a': 3, 'b': 3})
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing as mp
import os
import pickle
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from multiprocessing import shared_memory
from typing import Any, NamedTuple

import numpy as np

from ..tokenmap import Vocabulary
from ..tokenmap.decoder import mask_words
from .grammar import declaration_key, write_row

__all__ = ["ConstraintService", "ServiceGrammar", "ServiceError", "WorkerDied", "RUN_MAX", "WORKERS_ENV",
           "DRAFT_WAIT_ENV", "workers_from_env", "draft_wait_from_env"]

#: the longest certain run a slot holds (a server's draft cap is at most this)
RUN_MAX = 64
#: a new request goes to a worker that compiled its declaration while that worker holds at most this many open
#: requests more than the least busy one (the same declaration's requests then share one compile and its caches)
AFFINITY_SLACK = 4
#: the environment switch server processes read (``factorspec serve --constraint-workers N`` sets it)
WORKERS_ENV = "FACTORSPEC_CONSTRAINT_WORKERS"
#: how long one step's drafts may wait for their workers, in milliseconds (``factorspec serve --draft-wait MS`` sets
#: it); unset: as long as the workers take
DRAFT_WAIT_ENV = "FACTORSPEC_DRAFT_WAIT_MS"
#: a worker lowers its scheduling priority by this much (``os.nice``; 0: not at all): it computes while the forward
#: pass runs, and where it shares the cores with the engine, the engine's step loop must not wait behind it for a core
WORKER_NICE = 10
#: a worker runs its full garbage collections itself, when no message waits and at most once in this many seconds,
#: instead of where the interpreter would (in the middle of a step's rows: 50-55 ms each with torch imported, 6-40 ms
#: without, measured in a worker that served trip, calendar and tool-call requests); the objects of its start-up
#: (modules, vocabulary) are frozen out of them
WORKER_GC_EVERY = 1.0
_PREFIX = "factorspec-"
_BITS = [int(np.uint32(1 << b).view(np.int32)) for b in range(32)]  # the int32 word with bit b set
_ALIVE_EVERY = 1e-3  # seconds between two checks that a worker lives, when tokens are posted to it
_HDR = 8  # int64 per slot: run seq, terminated, complete, run length, has row, error, row seq, spare


def _covers(off: int, run: int, has_row: Any) -> bool:
    """Whether a published state with a run of ``run`` tokens (and its row, if ``has_row``) answers ``off`` tokens
    past it: inside the run, or at its end where the row was published with it."""
    return off < run or (off == run and bool(has_row))


def workers_from_env(default: int = 0) -> int:
    """``$FACTORSPEC_CONSTRAINT_WORKERS`` as a count (0 = in-process); a bad value is an error, not a silent 0."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ValueError(f"{WORKERS_ENV}={raw!r}: a number of worker processes (0 = in-process)")
    return int(raw)


def draft_wait_from_env() -> float | None:
    """``$FACTORSPEC_DRAFT_WAIT_MS`` in seconds (unset: ``None``, wait for every run); a bad value is an error."""
    raw = os.environ.get(DRAFT_WAIT_ENV, "").strip()
    if not raw:
        return None
    try:
        ms = float(raw)
    except ValueError:
        ms = -1.0
    if not ms >= 0:
        raise ValueError(f"{DRAFT_WAIT_ENV}={raw!r}: milliseconds a step's drafts may wait for their workers "
                         "(0 or more)")
    return ms / 1e3


class ServiceError(RuntimeError):
    """The constraint service cannot serve a request."""


class WorkerDied(ServiceError):
    """The worker process that owned this request exited; the request cannot go on (others are unaffected)."""


# --------------------------------------------------------------------------------------------- shared memory
class _Segment:
    """One worker's slots: a header, a certain run and a mask row each, in one shared-memory block."""

    def __init__(self, slots: int, words: int, name: str | None = None):
        self.slots, self.words = slots, words
        size = slots * (_HDR * 8 + RUN_MAX * 4 + words * 4)
        if name is None:
            self.shm = shared_memory.SharedMemory(name=f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}",
                                                  create=True, size=size)
            self.owner = True
        else:
            self.shm = shared_memory.SharedMemory(name=name)
            self.owner = False
            # a spawned worker shares the parent's resource tracker, where the parent registered the segment: the
            # attach registers the same name again (a set), and the parent's unlink unregisters it once
        buf = self.shm.buf
        a = slots * _HDR * 8
        b = a + slots * RUN_MAX * 4
        self.hdr = np.ndarray((slots, _HDR), dtype=np.int64, buffer=buf[:a])
        self.flat = buf[:a].cast("q")  # the same header, one int64 per item: the proxy's reads (plain ints)
        self.runs = np.ndarray((slots, RUN_MAX), dtype=np.int32, buffer=buf[a:b])
        self.rows = np.ndarray((slots, words), dtype=np.int32, buffer=buf[b:b + slots * words * 4])
        if self.owner:
            self.hdr[:] = 0

    @property
    def name(self) -> str:
        return self.shm.name

    def close(self) -> None:
        if self.flat is not None:
            self.flat.release()
        self.hdr = self.runs = self.rows = self.flat = None  # type: ignore[assignment]  # views first: buffers free
        try:
            self.shm.close()
        except BufferError:  # a view still held elsewhere: the mapping goes with the process
            pass
        if self.owner:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass


# ----------------------------------------------------------------------------------------------------- worker
def _worker_main(conn: Any, segment: str, slots: int, words: int, vocab: Vocabulary, options: dict[str, Any]) -> None:
    """A worker process: owns the grammars of its requests. After each change of a request's state it writes into the
    request's slot the certain run from there (at most ``RUN_MAX``) and the mask row at the run's end (the next
    position where the model chooses), the sequence number last; in exact mode the row is the current position's."""
    from .grammar import GrammarCompiler

    if WORKER_NICE:
        os.nice(WORKER_NICE)
    seg = _Segment(slots, words, name=segment)
    compiler = GrammarCompiler(vocab, workers=0, **options)  # in-process here, whatever the environment says
    gc.collect()
    gc.freeze()  # what start-up made lives as long as the worker: no collection needs to walk it again
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)  # full collections: below, where no step waits for them
    collected = time.monotonic()
    canonical = options.get("mode", "canonical") == "canonical"
    grammars: dict[int, Any] = {}

    def publish_run(slot: int, seq: int) -> bool:
        """The certain run and the flags (sequence number in word 0); whether a row follows."""
        g = settle(slot)
        h = seg.hdr[slot]
        run = g.certain_run(RUN_MAX) if canonical else []
        seg.runs[slot, :len(run)] = run
        h[1], h[2], h[3] = g.is_terminated(), g.is_complete(), len(run)
        h[4] = row = len(run) < RUN_MAX or not canonical
        h[0] = seq  # last: a reader that sees this sequence number sees the run and the flags
        return bool(row)

    ahead: dict[int, list[int]] = {}  # run tokens a grammar has taken past the request's state (to fill the row)

    def settle(slot: int) -> Any:
        """The request's grammar at the request's own state (the run taken ahead undone)."""
        g = grammars[slot]
        extra = ahead.pop(slot, None)
        if extra:
            g.rollback(len(extra))
        return g

    def publish_row(slot: int, seq: int) -> None:
        """The mask row where the run ends (sequence number in word 6). The grammar stays at the run's end: the
        next tokens taken usually start with the run, which is then not taken twice."""
        g = settle(slot)
        n = int(seg.hdr[slot, 3])
        run = seg.runs[slot, :n].tolist()
        if run and not g.accept(run):
            fail(slot, seq)
            return
        if run:
            ahead[slot] = run
        g.fill(seg.rows, slot)
        seg.hdr[slot, 6] = seq

    def publish(slot: int, seq: int) -> None:
        if publish_run(slot, seq):
            publish_row(slot, seq)

    def fail(slot: int, seq: int | None) -> None:
        """Mark the slot's request failed (the proxy raises at its next read); a waiting reader stops waiting."""
        seg.hdr[slot, 5] = 1
        if seq is not None:
            seg.hdr[slot, 0] = seg.hdr[slot, 6] = seq

    def take(slot: int, tokens: list[int], seq: int | None, rows: dict[int, int]) -> None:
        """Tokens the proxy found admitted in the published state (no answer); a new state's run now, its row
        after the batch (the engine waits for runs before its forward pass, for rows after it)."""
        extra = ahead.get(slot)
        if extra and tokens[:len(extra)] == extra:  # the run was taken ahead: only what follows it
            g = grammars[slot]
            del ahead[slot]
            tokens = tokens[len(extra):]
        elif extra and extra[:len(tokens)] == tokens:  # part of the run: the rest undone
            g = grammars[slot]
            g.rollback(len(extra) - len(tokens))
            del ahead[slot]
            tokens = []
        else:
            g = settle(slot)
        if tokens and not g.accept(tokens):
            fail(slot, seq)  # the published state admitted them: a disagreement, which the proxy reports
        elif seq is not None and publish_run(slot, seq):
            rows[slot] = seq

    while True:
        try:
            idle = time.monotonic() - collected
            if idle > WORKER_GC_EVERY and (idle > 10 * WORKER_GC_EVERY or not conn.poll()):  # busy for long: anyway
                gc.collect()
                collected = time.monotonic()
            msg = conn.recv()
        except (EOFError, OSError):
            break
        op, slot = msg[0], msg[1]
        try:
            if op == "stop":
                conn.send(("ok", None))
                break
            if op == "open":
                g = compiler.compile(msg[2]).grammar()
                grammars[slot] = g
                seq = int(seg.hdr[slot, 0]) + 1
                conn.send(("ok", seq))
                publish(slot, seq)
            elif op == "batch":  # ("take", slot, tokens, seq or None) and ("back", slot, k, seq or None) messages,
                rows: dict[int, int] = {}  # one send per engine step; rows after every run of the batch, but a
                for m in msg[2]:  # request's row before its state moves on without a new publish (the proxy reads
                    q = rows.pop(m[1], None)  # that row while its tokens are on the way)
                    if q is not None and m[3] is None and seg.hdr[m[1], 0] == q:
                        try:
                            publish_row(m[1], q)
                        except Exception:
                            fail(m[1], q)
                    try:
                        if m[0] == "back":  # tokens undone; a new state to publish where a sequence number comes
                            settle(m[1]).rollback(m[2])
                            if m[3] is not None and publish_run(m[1], m[3]):
                                rows[m[1]] = m[3]
                        else:
                            take(m[1], m[2], m[3], rows)
                    except Exception:
                        fail(m[1], m[3])
                for r, q in rows.items():
                    if seg.hdr[r, 0] != q:  # the request moved on in this batch (a draft undone): a row nobody reads
                        continue
                    try:
                        publish_row(r, q)
                    except Exception:
                        fail(r, q)
            elif op == "accept":
                g = settle(slot)
                ok = g.accept(msg[2])
                seq = int(seg.hdr[slot, 0]) + (1 if ok else 0)
                conn.send(("ok", (ok, seq)))
                if ok:
                    publish(slot, seq)
            elif op == "validate":
                conn.send(("ok", settle(slot).validate(msg[2])))
            elif op == "run":
                conn.send(("ok", settle(slot).certain_run(msg[2])))
            elif op == "record":
                conn.send(("ok", settle(slot).record()))
            elif op == "close":
                grammars.pop(slot, None)  # no answer: the engine does not wait for a close
                ahead.pop(slot, None)
            else:
                conn.send(("error", ServiceError(f"unknown operation {op!r}")))
        except Exception as err:  # the request's own error (a bad declaration, a bad token id): sent back typed
            try:
                pickle.dumps(err)
            except Exception:
                err = ServiceError(f"{type(err).__name__}: {err}")
            if op == "close":
                continue
            conn.send(("error", err))
    seg.close()


class _Worker:
    """The parent's handle on one worker process: its pipe (one call at a time), its segment, its free slots."""

    def __init__(self, ctx: Any, index: int, vocab: Vocabulary, slots: int, words: int, options: dict[str, Any]):
        self.index = index
        self.segment = _Segment(slots, words)
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, self.segment.name, slots, words, vocab, options),
                                   name=f"factorspec-constraint-{index}", daemon=True)
        self.process.start()
        child.close()
        self.lock = threading.Lock()
        self.outbox: list[tuple[Any, ...]] = []  # tokens taken, sent as one batch at the next read
        self.free = list(range(slots - 1, -1, -1))
        self.open = 0
        self.seen: OrderedDict[str, None] = OrderedDict()  # declarations compiled here, most recent last
        self.dead = False
        self.alive_at = 0.0

    def died(self) -> WorkerDied:
        self.dead = True
        code = self.process.exitcode
        return WorkerDied(f"constraint worker {self.index} (pid {self.process.pid}) exited"
                          f"{'' if code is None else f' with code {code}'}: its requests are lost")

    def post(self, *msg: Any) -> None:
        """Tokens taken: kept until the next read of any request (:meth:`flush`), then sent in one message."""
        if self.dead:
            raise self.died()
        now = time.perf_counter()
        if now >= self.alive_at:  # a waitpid (about 1 us), at most once a millisecond: a worker found dead fails
            self.alive_at = now + _ALIVE_EVERY  # the accept itself, and one that died since fails the next read
            if not self.process.is_alive():
                raise self.died()
        with self.lock:
            self.outbox.append(msg)

    def flush(self) -> None:
        if not self.outbox or self.dead:
            return
        with self.lock:
            batch, self.outbox = self.outbox, []
            try:
                self.conn.send(("batch", -1, batch))
            except (OSError, BrokenPipeError):
                self.dead = True

    def call(self, *msg: Any) -> Any:
        if self.dead:
            raise self.died()
        self.flush()  # what was taken before goes first: the pipe keeps the order
        with self.lock:
            try:
                self.conn.send(msg)
                status, value = self.conn.recv()
            except (EOFError, OSError, BrokenPipeError) as err:
                raise self.died() from err
        if status == "error":
            raise value
        return value

    def send(self, *msg: Any) -> None:
        """A message with no answer (a close): nothing to do for a dead worker."""
        if self.dead:
            return
        self.flush()
        with self.lock:
            try:
                self.conn.send(msg)
            except (OSError, BrokenPipeError):
                self.dead = True

    def stop(self, timeout: float = 5.0) -> None:
        if not self.dead and self.process.is_alive():
            try:
                self.call("stop", -1)
            except ServiceError:
                pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self.dead = True
        self.conn.close()
        self.segment.close()


# ------------------------------------------------------------------------------------------------------ proxy
class _Published(NamedTuple):
    """A slot's published state as the proxy read it."""

    run: list[int]
    has_row: bool  # the row where the run ends follows (not for a run capped at RUN_MAX)
    terminated: bool
    complete: bool


class ServiceGrammar:
    """One request's grammar, held by the engine, computed in a worker: the verbs of :class:`~.grammar.Grammar`.

    In canonical mode the worker publishes, for the request's state, its certain run ``R`` and the mask row where
    ``R`` ends; each position inside ``R`` admits its one token. So the proxy answers ``fill``, ``certain_run``,
    ``accept``, ``validate``, ``is_terminated`` and ``is_complete`` from what is published, exactly, for every
    position up to the run's end and the one token chosen there; an accept sends its tokens on without waiting, and
    the worker computes the next run and row meanwhile. Only a question past that point waits for the worker.
    """

    def __init__(self, service: ConstraintService, worker: _Worker, slot: int, seq: int, canonical: bool):
        self._service, self._worker, self._slot, self._seq = service, worker, slot, seq
        self.words = worker.segment.words
        self._canonical = canonical
        self._count = 0
        self._closed = False
        self._base: _Published | None = None  # a state the worker published (at ``_bseq``), once read
        self._bseq = -1
        self._off = 0  # tokens taken since the state of ``_base``
        self._poff = 0  # tokens taken since the state last asked for (``_seq``), which may be newer than the base
        self._stale = False  # the state last asked for is off the request's path (a draft past it undone)
        vocab = service.vocab
        self._eos = frozenset(t for t in vocab.eos_token_ids if vocab.tokens[t] is None)  # EOS as the decoder takes it
        self._last = -1

    def __repr__(self) -> str:
        return f"ServiceGrammar(worker {self._worker.index}, slot {self._slot}, {self._count} tokens)"

    @property
    def num_tokens(self) -> int:
        return self._count

    def _ready(self, row: bool = False, wait: float | None = None) -> Any:
        """The slot, once the worker has written the state last asked for into it (its run and flags; with ``row``,
        its row too), which becomes the base; ``None`` if that takes longer than ``wait`` seconds (``None``: no
        limit). Tokens taken since the last read go to the workers first."""
        if self._stale:  # the state asked for is off the path: the worker publishes the request's own state
            self._ask_own_state()
        w, slot, seq = self._worker, self._slot, self._seq
        if w.dead:  # found dead by any call: the request is lost, even where its last row is still there
            raise w.died()
        flat = w.segment.flat
        at, word = slot * _HDR, slot * _HDR + (6 if row else 0)
        if flat is not None and flat[word] != seq and not flat[at + 5]:
            self._service._flush()  # about to wait: what was taken must reach the workers first
            spins, pause = 0, 5e-6
            deadline = None if wait is None else time.perf_counter() + wait
            while flat is not None and flat[word] != seq and not flat[at + 5]:
                if deadline is not None and time.perf_counter() >= deadline:
                    return None
                spins += 1
                if spins > 64:  # not a spin: the workers need the cores
                    if w.dead or not w.process.is_alive():
                        raise w.died()
                    time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.perf_counter())))
                    pause = min(pause * 2, 200e-6)
                flat = w.segment.flat
        if flat is None or w.dead:
            raise w.died()
        if flat[at + 5]:
            raise ServiceError(f"constraint worker {w.index} refused tokens its published state admitted "
                               f"(slot {slot}): the request cannot go on")
        if self._bseq != seq:
            self._base = _Published(w.segment.runs[slot, :flat[at + 3]].tolist(), bool(flat[at + 4]),
                                    bool(flat[at + 1]), bool(flat[at + 2]))
            self._bseq, self._off = seq, self._poff
            if self._canonical and not _covers(self._off, len(self._base.run), self._base.has_row):
                # the tokens taken since that state run past what it published (the decoder's certain runs go on
                # where they were cut, so this does not happen; kept as a guard): the request's own state instead
                self._ask_own_state()
                return self._ready(row, wait)
        return w.segment

    def _ask_own_state(self) -> None:
        """Ask the worker to publish the request's current state (no token taken: an undo of none)."""
        self._seq += 1
        self._worker.post("back", self._slot, 0, self._seq)
        self._poff, self._stale = 0, False

    def _known(self) -> bool:
        """Whether a published state covers the current position (at most one chosen token past its run): the base
        while it does, else the state last asked for (waited for)."""
        if not self._canonical:
            return False
        if self._worker.dead:  # found dead by any call: the request is lost, even where the base still answers
            raise self._worker.died()
        b = self._base
        if b is not None and self._bseq == self._seq:
            return _covers(self._off, len(b.run), b.has_row)
        if b is not None and self._off < len(b.run):  # an older base (a capped run) still covers it: no wait
            return True
        self._ready()  # which reads a state that covers the position
        return True

    def _covered_ahead(self, poff: int) -> bool:
        """Whether the state asked for since an older base is published, and its run covers ``poff`` tokens past it
        (read without a wait; it may lie behind the base's end, as after a draft undone)."""
        if self._bseq == self._seq or self._stale:
            return False
        flat, at = self._worker.segment.flat, self._slot * _HDR
        if flat is None or flat[at] != self._seq or flat[at + 5]:
            return False
        return _covers(poff, flat[at + 3], flat[at + 4])

    def _decide(self, tokens: list[int]) -> int | None:
        """How many of ``tokens`` are admitted in turn from the current position; None if the answer is not known
        from the published state."""
        if not self._known():
            return None
        n = self._walk(tokens)
        if n is None and self._bseq != self._seq:  # past an older base: the state last asked for answers
            self._ready()
            n = self._walk(tokens)
        return n

    def _walk(self, tokens: list[int]) -> int | None:
        """:meth:`_decide` from the base: the run's tokens, then the row where it ends (if published with it)."""
        b = self._base
        run, off, eos = b.run, self._off, self._eos  # type: ignore[union-attr]
        n, m, end = 0, len(tokens), len(run) - off
        while n < m and n < end:
            t = tokens[n]
            if t != run[off + n]:
                return n
            n += 1
            if t in eos:
                return n
        if n == m:
            return n
        if n == end and b.has_row:  # type: ignore[union-attr]
            t = tokens[n]
            row = self._ready(row=True).rows[self._slot]
            if not (0 <= t < self.words * 32 and (int(row[t >> 5]) >> (t & 31)) & 1):
                return n
            n += 1
            if n == m or t in eos:
                return n
        return None  # past what is published

    def accept(self, tokens: Sequence[int]) -> bool:
        toks = [int(t) for t in tokens]
        if not toks:
            return True
        if self.is_terminated():
            return False
        n = self._decide(toks)
        if n is not None and n < len(toks):
            return False  # refused here: nothing changes
        if n is not None:
            run, has_row = self._base.run, self._base.has_row  # type: ignore[union-attr]
            off = self._off + len(toks)
            past = not _covers(off, len(run), has_row)
            if past and self._covered_ahead(self._poff + len(toks)):
                # past an older base, into the state asked for since (published, and its run covers the position)
                self._worker.post("take", self._slot, toks, None)
                self._base, self._bseq, self._off, self._poff = None, -1, 0, self._poff + len(toks)
            elif past:  # past what is published: the worker
                self._seq += 1  # publishes the state after these tokens meanwhile
                self._worker.post("take", self._slot, toks, self._seq)
                self._base, self._bseq, self._off, self._poff, self._stale = None, -1, 0, 0, False
            elif len(run) == RUN_MAX and len(run) - off <= RUN_MAX // 2 and (self._bseq == self._seq or self._stale):
                # a capped run running short: the worker publishes the state after these tokens meanwhile, and the
                # run read stays the base while it covers the position (a draft taken to fill the row after it
                # and undone, as a verify step does, waits for nothing)
                self._seq += 1
                self._worker.post("take", self._slot, toks, self._seq)
                self._off, self._poff, self._stale = off, 0, False
            else:
                self._worker.post("take", self._slot, toks, None)
                self._off, self._poff = off, self._poff + len(toks)
            self._count += len(toks)
            self._last = toks[-1]
            return True
        ok, self._seq = self._worker.call("accept", self._slot, toks)
        if ok:
            self._base, self._bseq, self._off, self._poff, self._stale = None, -1, 0, 0, False
            self._count += len(toks)
            self._last = toks[-1]
        return bool(ok)

    def validate(self, tokens: Sequence[int]) -> int:
        toks = [int(t) for t in tokens]
        n = self._decide(toks)
        if n is not None:
            return n
        return int(self._worker.call("validate", self._slot, toks))  # after what was taken: the pipe keeps order

    def rollback(self, k: int) -> None:
        k = int(k)
        if k < 0 or k > self._count:
            raise ValueError(f"cannot roll back {k} tokens: {self._count} accepted")
        if not k:
            return
        # the worker undoes the tokens with the next batch; the engine does not wait for it
        if self._base is not None and k <= self._off:  # back inside the base, which still answers
            self._worker.post("back", self._slot, k, None)
            if not self._stale and k <= self._poff:
                self._poff -= k
            else:  # back past the state asked for (a draft undone): asked for again only where needed
                self._stale = True
            self._off -= k
        elif not self._stale and k <= self._poff:  # back inside the state asked for
            self._worker.post("back", self._slot, k, None)
            self._poff -= k
            self._base, self._bseq, self._off = None, -1, 0
        else:  # back past it: the worker publishes the state it returns to
            self._seq += 1
            self._worker.post("back", self._slot, k, self._seq)
            self._base, self._bseq, self._off, self._poff, self._stale = None, -1, 0, 0, False
        self._count -= k
        self._last = -1  # EOS ends a record: the token before the undone ones is not one

    def reset(self) -> None:
        self.rollback(self._count)

    def fill(self, bitmask: Any, row: int = 0) -> None:
        self._service.end_draft_budget()
        if self._known() and self._off < len(self._base.run):  # type: ignore[union-attr]  # inside the run
            target = bitmask[row]
            t = self._base.run[self._off]  # type: ignore[union-attr]
            target[:] = 0
            target[t >> 5] = _BITS[t & 31]
            return
        write_row(self._ready(row=True).rows[self._slot], bitmask, row, self.words)  # the run's end, or later

    def certain_run(self, k: int = 64) -> list[int]:
        """The certain run from here; with the service's ``draft_wait``, an empty one where the worker has not
        published it within that time (the forward pass goes on without a draft; the worker keeps computing, and
        :meth:`fill` waits for the row it needs)."""
        if not self._canonical:
            return []
        self._service._flush()  # the draft is the last thing asked before a forward pass: the step's tokens go now
        if self._worker.dead:  # found dead by the flush: no draft from what it published before
            raise self._worker.died()
        if self._bseq != self._seq:  # a newer state was asked for: taken if published, else the base's run
            flat, word = self._worker.segment.flat, self._slot * _HDR
            if not self._stale and flat is not None and flat[word] == self._seq:
                self._ready()
            elif (self._base is not None and self._off < len(self._base.run)
                  and (len(self._base.run) - self._off >= k or self._service.draft_wait is not None)):
                return self._base.run[self._off:self._off + k]  # all of it, or a draft that may be short
            elif self._ready(wait=self._service.draft_time_left()) is None:
                return []
        run = self._base.run  # type: ignore[union-attr]
        if len(run) == RUN_MAX and k > len(run) - self._off:  # more than the slot holds: ask the worker
            return list(self._worker.call("run", self._slot, int(k)))
        return run[self._off:self._off + k]

    def is_terminated(self) -> bool:
        # a record terminates with the EOS token taken, and nothing is taken after it: known here, no wait
        return bool(self._count) and self._last in self._eos

    def is_complete(self) -> bool:
        if self.is_terminated():  # a terminated record is complete (as the decoder and the in-process grammar say)
            return True
        if self._base is None or (self._bseq != self._seq and self._off >= len(self._base.run)):
            self._ready()
        if not self._off:
            return self._base.complete  # type: ignore[union-attr]
        return any(self._decide([e]) for e in self._eos)  # at an offset the state is covered: a known answer

    def record(self) -> Any:
        return self._worker.call("record", self._slot)

    def close(self) -> None:
        """Free the request's slot (idempotent; also on garbage collection)."""
        if not self._closed:
            self._closed = True
            self._service._release(self._worker, self._slot)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------------- service
class ConstraintService:
    """Worker processes that own the decoders of requests; see the module docstring.

    Parameters
    ----------
    vocab
        The model's vocabulary (sent to each worker, which rebuilds it: a bundled one or ``from_tokenizer``).
    workers
        Worker processes (at least 1; a server that wants none keeps its grammars in-process instead).
    slots
        Requests each worker holds at once (one mask row each in its segment).
    style, mode, backend
        As for :class:`~.grammar.GrammarCompiler`.
    draft_wait
        The longest the drafts of one step wait for their workers, in seconds (from the step's first
        ``certain_run`` to its first ``fill``): a draft not published by then is empty and the forward pass goes on
        without it (``None``, the default: wait for every run).
    """

    def __init__(self, vocab: Vocabulary, workers: int = 1, *, slots: int = 256, style: str | int = "compact",
                 mode: str = "canonical", backend: str | None = None, start_method: str = "spawn",
                 draft_wait: float | None = None):
        if draft_wait is not None and not draft_wait >= 0:
            raise ValueError(f"draft_wait={draft_wait!r}: seconds (0 or more), or None to wait for every run")
        self.draft_wait = draft_wait
        self._draft_deadline: float | None = None
        if workers < 1:
            raise ValueError(f"workers={workers}: at least one (in-process grammars need no service)")
        pickle.dumps(vocab)  # fails here, with its reason, if the vocabulary cannot reach a worker
        self.vocab, self.slots, self.words = vocab, slots, mask_words(vocab.size)
        self._options = {"style": style, "mode": mode, "backend": backend}
        self._ctx = mp.get_context(start_method)
        self._lock = threading.Lock()
        self._workers = [self._start(i) for i in range(workers)]
        self.replaced = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, ConstraintService._shutdown, self._workers)
        atexit.register(self._finalizer)

    def __repr__(self) -> str:
        return f"ConstraintService({len(self._workers)} workers, {self.vocab.name})"

    def __enter__(self) -> ConstraintService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self, index: int) -> _Worker:
        return _Worker(self._ctx, index, self.vocab, self.slots, self.words, self._options)

    @property
    def workers(self) -> list[Any]:
        """The worker processes now serving (``multiprocessing.Process``)."""
        return [w.process for w in self._workers]

    @property
    def segments(self) -> list[str]:
        """The names of the shared-memory segments now in use."""
        return [w.segment.name for w in self._workers]

    def _healthy(self) -> list[_Worker]:
        """The workers, each dead one replaced (its segment unlinked, its requests failed)."""
        for i, w in enumerate(self._workers):
            if w.dead or not w.process.is_alive():
                w.dead = True
                w.stop(timeout=0.5)
                self._workers[i] = self._start(w.index)
                self.replaced += 1
        return self._workers

    def _pick(self, key: str) -> _Worker | None:
        """The worker for a new request: one that compiled its declaration already (its compile, token tables,
        plans and rows are kept there and shared by the requests of that declaration) unless it holds more than
        :data:`AFFINITY_SLACK` requests over the least busy worker; else the least busy one."""
        live = [w for w in self._healthy() if w.free]
        if not live:
            return None
        least = min(w.open for w in live)
        holders = [w for w in live if key in w.seen and w.open <= least + AFFINITY_SLACK]
        return min(holders or live, key=lambda w: w.open)

    def open(self, declaration: Any) -> ServiceGrammar:
        """A new request's grammar for ``declaration`` (a Spec, its JSON form or that JSON as text), in a worker that
        compiled the declaration before where that keeps the load even, else in the worker with the fewest open
        requests. Raises the declaration's typed error if it does not compile."""
        if self._closed:
            raise ServiceError("the constraint service is closed")
        key = declaration_key(declaration)
        for _ in range(2):  # a worker found dead at the first call is replaced, and the request goes to another
            with self._lock:
                w = self._pick(key)
                if w is None:
                    raise ServiceError(f"every worker holds {self.slots} requests: raise slots= or workers=")
                slot = w.free.pop()
                w.open += 1
                w.seen[key] = None
                w.seen.move_to_end(key)
                if len(w.seen) > 256:  # the worker's compiler keeps as many
                    w.seen.popitem(last=False)
            try:
                seq = w.call("open", slot, key)
            except WorkerDied:
                continue
            except BaseException:
                self._release(w, slot, send=False)
                raise
            return ServiceGrammar(self, w, slot, seq, self._options["mode"] == "canonical")
        raise ServiceError("constraint workers keep dying at start-up")

    def draft_time_left(self) -> float | None:
        """How long a draft may still wait for its worker in this step (``None``: no limit). The budget
        ``draft_wait`` is the step's: it starts at the step's first draft and ends with its first row."""
        if self.draft_wait is None:
            return None
        now = time.perf_counter()
        if self._draft_deadline is None:
            self._draft_deadline = now + self.draft_wait
        return max(0.0, self._draft_deadline - now)

    def end_draft_budget(self) -> None:
        """A row is asked: the drafts of this step are taken (the next draft starts a new budget)."""
        self._draft_deadline = None

    def _flush(self) -> None:
        """Send every worker the tokens taken since the last read (one message each)."""
        for w in self._workers:
            if w.outbox:
                w.flush()

    def _release(self, w: _Worker, slot: int, send: bool = True) -> None:
        with self._lock:
            if w.dead:
                return
            if send:
                w.send("close", slot)
            w.free.append(slot)
            w.open -= 1

    def close(self) -> None:
        """Stop every worker and unlink every segment (idempotent)."""
        if not self._closed:
            self._closed = True
            self._finalizer()

    @staticmethod
    def _shutdown(workers: list[_Worker]) -> None:
        for w in workers:
            w.stop()
