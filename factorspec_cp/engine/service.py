"""The constraint service: request sessions in worker processes, mask rows and certain runs in shared memory.

An exact mask costs more than a grammar mask, and on a server's step loop that cost delays every request of the
step. With ``workers=N`` (``--constraint-workers N``; 0 keeps everything in-process) each request's decoder lives
in one of ``N`` worker processes. The grammar the engine holds, :class:`ServiceGrammar`, has the verbs of
:class:`~.grammar.Grammar`; what it does:

- ``accept(tokens)`` sends the tokens to the request's worker, which takes them and answers at once (accepted or
  not), then computes the next mask row and certain run into the request's slot of a shared-memory segment while
  the engine goes on (its forward pass);
- ``fill(bitmask, row)``, ``certain_run(k)`` and ``is_terminated()`` read the slot, waiting only if the worker has
  not written it yet (a sequence number in the slot says which state it holds);
- ``validate``, ``rollback`` and ``record`` are calls to the worker.

Requests are spread over workers (the one with the fewest open requests). A worker that dies fails its own requests
only (:class:`WorkerDied`, raised by the next call of each) and is replaced for new ones; a declaration that does
not compile raises its typed error from :meth:`ConstraintService.open`. Every segment is created and unlinked by the
service (the parent), so none outlives :meth:`ConstraintService.close` or a killed worker.

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
import multiprocessing as mp
import os
import pickle
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..tokenmap import Vocabulary
from ..tokenmap.decoder import mask_words
from .grammar import declaration_key, write_row

__all__ = ["ConstraintService", "ServiceGrammar", "ServiceError", "WorkerDied", "RUN_MAX", "WORKERS_ENV",
           "workers_from_env"]

#: the longest certain run a slot holds (a server's draft cap is at most this)
RUN_MAX = 64
#: the environment switch server processes read (``factorspec serve --constraint-workers N`` sets it)
WORKERS_ENV = "FACTORSPEC_CONSTRAINT_WORKERS"
_PREFIX = "factorspec-"
_HDR = 8  # int64 per slot: seq, terminated, complete, run length, tokens taken, spare


def workers_from_env(default: int = 0) -> int:
    """``$FACTORSPEC_CONSTRAINT_WORKERS`` as a count (0 = in-process); a bad value is an error, not a silent 0."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ValueError(f"{WORKERS_ENV}={raw!r}: a number of worker processes (0 = in-process)")
    return int(raw)


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
        self.runs = np.ndarray((slots, RUN_MAX), dtype=np.int32, buffer=buf[a:b])
        self.rows = np.ndarray((slots, words), dtype=np.int32, buffer=buf[b:b + slots * words * 4])
        if self.owner:
            self.hdr[:] = 0

    @property
    def name(self) -> str:
        return self.shm.name

    def close(self) -> None:
        self.hdr = self.runs = self.rows = None  # type: ignore[assignment]  # views first: buffers must be free
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
    """A worker process: owns the grammars of its requests; after each change of a request's state, answers first,
    then writes the request's next mask row and certain run into its slot (the sequence number last)."""
    from .grammar import GrammarCompiler

    seg = _Segment(slots, words, name=segment)
    compiler = GrammarCompiler(vocab, workers=0, **options)  # in-process here, whatever the environment says
    grammars: dict[int, Any] = {}

    def publish(slot: int, seq: int) -> None:
        g = grammars[slot]
        g.fill(seg.rows, slot)
        run = g.certain_run(RUN_MAX)
        seg.runs[slot, :len(run)] = run
        h = seg.hdr[slot]
        h[1], h[2], h[3], h[4] = g.is_terminated(), g.is_complete(), len(run), g.num_tokens
        h[0] = seq  # last: a reader that sees this sequence number sees the rest

    while True:
        try:
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
            elif op == "accept":
                g = grammars[slot]
                ok = g.accept(msg[2])
                seq = int(seg.hdr[slot, 0]) + (1 if ok else 0)
                conn.send(("ok", (ok, seq)))
                if ok:
                    publish(slot, seq)
            elif op == "rollback":
                grammars[slot].rollback(msg[2])
                seq = int(seg.hdr[slot, 0]) + 1
                conn.send(("ok", seq))
                publish(slot, seq)
            elif op == "validate":
                conn.send(("ok", grammars[slot].validate(msg[2])))
            elif op == "run":
                conn.send(("ok", grammars[slot].certain_run(msg[2])))
            elif op == "record":
                conn.send(("ok", grammars[slot].record()))
            elif op == "close":
                grammars.pop(slot, None)  # no answer: the engine does not wait for a close
            else:
                conn.send(("error", ServiceError(f"unknown operation {op!r}")))
        except Exception as err:  # the request's own error (a bad declaration, a bad token id): sent back typed
            try:
                pickle.dumps(err)
            except Exception:
                err = ServiceError(f"{type(err).__name__}: {err}")
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
        self.free = list(range(slots - 1, -1, -1))
        self.open = 0
        self.dead = False

    def died(self) -> WorkerDied:
        self.dead = True
        code = self.process.exitcode
        return WorkerDied(f"constraint worker {self.index} (pid {self.process.pid}) exited"
                          f"{'' if code is None else f' with code {code}'}: its requests are lost")

    def call(self, *msg: Any) -> Any:
        if self.dead:
            raise self.died()
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
        """A message with no answer (close)."""
        if self.dead:
            return
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
class ServiceGrammar:
    """One request's grammar, held by the engine, computed in a worker: the verbs of :class:`~.grammar.Grammar`."""

    def __init__(self, service: ConstraintService, worker: _Worker, slot: int, seq: int):
        self._service, self._worker, self._slot, self._seq = service, worker, slot, seq
        self.words = worker.segment.words
        self._count = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"ServiceGrammar(worker {self._worker.index}, slot {self._slot}, {self._count} tokens)"

    @property
    def num_tokens(self) -> int:
        return self._count

    def _ready(self) -> Any:
        """The slot, once the worker has written the request's current state into it."""
        w, slot, seq = self._worker, self._slot, self._seq
        if w.dead:  # found dead by any call: the request is lost, even where its last row is still there
            raise w.died()
        hdr = w.segment.hdr
        spins = 0
        while hdr is not None and hdr[slot, 0] != seq:
            if w.dead:
                raise w.died()
            spins += 1
            if spins % 256 == 0:
                if not w.process.is_alive():
                    raise w.died()
                time.sleep(20e-6)
            hdr = w.segment.hdr
        if hdr is None:
            raise w.died()
        return w.segment

    def accept(self, tokens: Sequence[int]) -> bool:
        ok, self._seq = self._worker.call("accept", self._slot, [int(t) for t in tokens])
        if ok:
            self._count += len(tokens)
        return bool(ok)

    def validate(self, tokens: Sequence[int]) -> int:
        return int(self._worker.call("validate", self._slot, [int(t) for t in tokens]))

    def rollback(self, k: int) -> None:
        if k:
            self._seq = self._worker.call("rollback", self._slot, int(k))
            self._count -= k

    def reset(self) -> None:
        self.rollback(self._count)

    def fill(self, bitmask: Any, row: int = 0) -> None:
        seg = self._ready()
        write_row(seg.rows[self._slot], bitmask, row, self.words)

    def certain_run(self, k: int = 64) -> list[int]:
        seg = self._ready()
        stored = int(seg.hdr[self._slot, 3])
        if stored == RUN_MAX and k > RUN_MAX:  # the slot holds the first RUN_MAX: the rest from the worker
            return list(self._worker.call("run", self._slot, int(k)))
        return seg.runs[self._slot, :min(stored, k)].tolist()

    def is_terminated(self) -> bool:
        return bool(self._ready().hdr[self._slot, 1])

    def is_complete(self) -> bool:
        return bool(self._ready().hdr[self._slot, 2])

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
    """

    def __init__(self, vocab: Vocabulary, workers: int = 1, *, slots: int = 256, style: str | int = "compact",
                 mode: str = "canonical", backend: str | None = None, start_method: str = "spawn"):
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

    def open(self, declaration: Any) -> ServiceGrammar:
        """A new request's grammar for ``declaration`` (a Spec, its JSON form or that JSON as text), in the worker
        with the fewest open requests. Raises the declaration's typed error if it does not compile."""
        if self._closed:
            raise ServiceError("the constraint service is closed")
        key = declaration_key(declaration)
        for _ in range(2):  # a worker found dead at the first call is replaced, and the request goes to another
            with self._lock:
                w = min((w for w in self._healthy() if w.free), key=lambda w: w.open, default=None)
                if w is None:
                    raise ServiceError(f"every worker holds {self.slots} requests: raise slots= or workers=")
                slot = w.free.pop()
                w.open += 1
            try:
                seq = w.call("open", slot, key)
            except WorkerDied:
                continue
            except BaseException:
                self._release(w, slot, send=False)
                raise
            return ServiceGrammar(self, w, slot, seq)
        raise ServiceError("constraint workers keep dying at start-up")

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
