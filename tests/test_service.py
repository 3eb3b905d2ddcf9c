"""The constraint service against in-process grammars: same masks, runs and records; bad input, killed workers and
shut-down leave nothing behind (processes, shared-memory segments)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from factorspec_cp.bench.generate import bfcl_problems, trip_problems
from factorspec_cp.bench.masks import gold_walk
from factorspec_cp.engine.grammar import GrammarCompiler
from factorspec_cp.engine.service import (
    _HDR,
    RUN_MAX,
    ConstraintService,
    ServiceGrammar,
    WorkerDied,
    draft_wait_from_env,
    workers_from_env,
)
from factorspec_cp.errors import UnknownPath, UnsatisfiableDeclaration
from factorspec_cp.tokenmap import Vocabulary
from factorspec_cp.tokenmap.decoder import mask_words
from factorspec_cp.workloads import bfcl

SHM = Path("/dev/shm")


def _segments() -> set[str]:
    return {p.name for p in SHM.glob(f"factorspec-{os.getpid()}-*")} if SHM.is_dir() else set()


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.smollm2()


@pytest.fixture(scope="module")
def service(vocab):
    with ConstraintService(vocab, workers=2, slots=16) as s:
        yield s


def _cases(vocab):
    trip = trip_problems(2)
    tool = bfcl_problems(3)
    out = [(p.spec, p.gold) for p in trip]
    out += [(p.spec, bfcl.gold_records(p.gold)[0]) for p in tool[1:]]
    return [(spec, gold_walk(spec, vocab, gold)["tokens"]) for spec, gold in out]


def test_service_grammars_match_in_process_ones_token_by_token(service, vocab):
    """Four requests (two trips, two tool calls) interleaved over two workers: at every position the mask row, the
    certain run, ``is_terminated``, ``is_complete`` and ``validate`` of the worker's grammar equal an in-process
    grammar's (after EOS too)."""
    local = GrammarCompiler(vocab, workers=0)
    cases = _cases(vocab)
    remote = [service.open(spec) for spec, _ in cases]
    assert {g._worker.index for g in remote} == {0, 1}  # spread over both workers
    ref = [local.compile(spec).grammar() for spec, _ in cases]
    words = mask_words(vocab.size)
    a, b = np.zeros((1, words), np.int32), np.zeros((1, words), np.int32)
    steps = max(len(t) for _, t in cases)
    for k in range(steps):
        for g, r, (_, toks) in zip(remote, ref, cases):
            if k >= len(toks):
                continue
            g.fill(a, 0)
            r.fill(b, 0)
            assert np.array_equal(a, b), k
            assert g.certain_run(16) == r.certain_run(16)
            assert g.certain_run(400) == r.certain_run(400)  # past the slot's RUN_MAX: asked of the worker
            assert g.validate(toks[k:k + 5]) == r.validate(toks[k:k + 5])
            assert g.accept([toks[k]]) and r.accept([toks[k]])
            assert g.is_terminated() == r.is_terminated() and g.num_tokens == r.num_tokens
            assert g.is_complete() == r.is_complete(), k
    for g, r in zip(remote, ref):
        assert g.is_terminated() and g.is_complete() and r.is_complete() and g.record() == r.record()
        g.rollback(3)
        r.rollback(3)
        g.fill(a, 0)
        r.fill(b, 0)
        assert np.array_equal(a, b) and not g.is_terminated()
        g.close()


@pytest.mark.parametrize("draft_wait", [None, 0.0])
def test_verify_steps_with_local_rollback_and_drafts_that_do_not_wait(vocab, draft_wait):
    """What a server does per verify step: take the draft (the certain run), fill the row at the current position and,
    past the draft, the row where the token after it is sampled (accept the draft, fill, roll it back: inside the
    published state, with no wait for the worker), then commit the draft and the next token. Every row equals an
    in-process grammar's; with ``draft_wait=0`` a draft is the in-process run or, where the worker has not published
    it yet, empty or the part of it that an older published run holds; either way the records are the same."""
    local = GrammarCompiler(vocab, workers=0)
    cases = _cases(vocab)
    words = mask_words(vocab.size)
    a, b = np.zeros((1, words), np.int32), np.zeros((1, words), np.int32)
    with ConstraintService(vocab, workers=2, slots=16, draft_wait=draft_wait) as svc:
        calls: list[str] = []
        for w in svc._workers:  # every question the engine waits on the worker for
            w.call = (lambda call: lambda *m: calls.append(m[0]) or call(*m))(w.call)
        for spec, toks in cases:
            g, r = svc.open(spec), local.compile(spec).grammar()
            pos = 0
            while pos < len(toks):
                want = r.certain_run(16)
                draft = g.certain_run(16)
                assert draft == want or (draft_wait is not None and draft == want[:len(draft)]), pos
                g.fill(a, 0)
                r.fill(b, 0)
                assert np.array_equal(a, b), pos
                if draft:
                    assert g.accept(draft) and r.accept(draft)
                    g.fill(a, 0)
                    r.fill(b, 0)
                    assert np.array_equal(a, b), pos
                    g.rollback(len(draft))
                    r.rollback(len(draft))
                    assert g.num_tokens == r.num_tokens == pos
                step = toks[pos:pos + len(draft) + 1]
                assert step[:len(draft)] == draft  # canonical: the gold stream writes the certain run
                assert g.accept(step) and r.accept(step)
                pos += len(step)
                assert g.is_terminated() == r.is_terminated()
            assert g.is_terminated() and g.record() == r.record()
            g.close()
        assert "rollback" not in calls and "accept" not in calls  # all inside the published states


def _capped_at_start(vocab):
    """A trip case whose certain run from the start is longer than a slot holds (``RUN_MAX`` tokens)."""
    local = GrammarCompiler(vocab, workers=0)
    spec, toks = _cases(vocab)[0]
    assert len(local.compile(spec).grammar().certain_run(400)) > RUN_MAX
    return spec, toks, local


def _completes_while_stopped(pid: int, step) -> bool:
    """Run ``step`` in a thread while process ``pid`` is stopped (SIGSTOP): whether it completed within 20 s
    without that process. The process is continued either way, and the thread then joined."""
    import threading

    done: list[bool] = []
    t = threading.Thread(target=lambda: (step(), done.append(True)), daemon=True)
    os.kill(pid, signal.SIGSTOP)
    try:
        t.start()
        t.join(20)
        completed = bool(done)
    finally:
        os.kill(pid, signal.SIGCONT)
    t.join(20)
    return completed


def _finish_alike(g, r, toks: list[int], start: int) -> None:
    """Write the rest of the gold stream through both grammars, the rows equal at each position, to the same
    record."""
    a, b = np.zeros((1, r.words), np.int32), np.zeros((1, r.words), np.int32)
    for k in range(start, len(toks)):
        g.fill(a, 0)
        r.fill(b, 0)
        assert np.array_equal(a, b), k
        assert g.accept([toks[k]]) and r.accept([toks[k]])
    assert g.is_terminated() and g.record() == r.record()


def test_a_draft_inside_a_capped_run_waits_for_no_worker(vocab):
    """Past half of a capped run the proxy asks the worker for the state ahead, but the run it read still answers: a
    verify step's draft inside it (accept, fill the row after it, roll back) needs no worker, shown with the worker
    stopped (SIGSTOP); then the request goes on to the in-process record. Before, the draft's accept waited for the
    worker."""
    spec, toks, local = _capped_at_start(vocab)
    words = mask_words(vocab.size)
    a, b = np.zeros((1, words), np.int32), np.zeros((1, words), np.int32)
    with ConstraintService(vocab, workers=1, slots=4, draft_wait=0.0) as svc:
        g, r = svc.open(spec), local.compile(spec).grammar()
        g.fill(a, 0)  # a row waits for the worker (a draft would not): the run is read, the base
        assert g.certain_run(RUN_MAX) == toks[:RUN_MAX]  # a capped run
        half = RUN_MAX // 2 + 1
        assert g.accept(toks[:half]) and r.accept(toks[:half])  # asks for the state ahead
        seen: dict[str, object] = {}

        def verify_step() -> None:
            seen["draft"] = g.certain_run(8)  # the base's run: the state ahead is not published
            g.fill(a, 0)
            seen["accepted"] = g.accept(toks[half:half + 8])
            g.fill(b, 0)
            g.rollback(8)

        assert _completes_while_stopped(svc.workers[0].pid, verify_step), "the verify step waited for the worker"
        assert seen["draft"] == toks[half:half + 8] and seen["accepted"]
        ref = np.zeros((1, words), np.int32)
        r.fill(ref, 0)
        assert np.array_equal(a, ref)
        assert r.accept(toks[half:half + 8])
        r.fill(ref, 0)
        assert np.array_equal(b, ref)
        r.rollback(8)
        _finish_alike(g, r, toks, half)


def test_a_draft_undone_past_the_state_asked_for_costs_no_wait_at_the_next_step(vocab):
    """Verify steps in a capped run: a draft taken past its half asks for the state ahead, and undone it leaves that
    state off the request's path, which is not asked for again (the run read still answers). The next commit, past
    the half, asks for the state after it; the next draft, to the end of the run read, then finds that state
    published and covering it: with the worker stopped (SIGSTOP) the step's draft, rows and rollback complete.
    Before, the undone draft asked for the state it returned to, whose run ends where the read one does, so the
    draft to the run's end asked for yet another state and waited for it."""
    import time

    spec, toks, local = _capped_at_start(vocab)
    words = mask_words(vocab.size)
    a, b = np.zeros((1, words), np.int32), np.zeros((1, words), np.int32)
    half = RUN_MAX // 2
    with ConstraintService(vocab, workers=1, slots=4) as svc:
        g, r = svc.open(spec), local.compile(spec).grammar()
        assert g.certain_run(RUN_MAX) == toks[:RUN_MAX]  # the base: a capped run
        assert g.accept(toks[:half])  # a draft past half of it
        g.fill(a, 0)
        g.rollback(half)
        assert g.accept(toks[:half + 1])  # the commit: draft and one token
        assert g.certain_run(RUN_MAX - half - 1) == toks[half + 1:RUN_MAX]  # the rest of the run read
        w, row_seq = g._worker, g._slot * _HDR + 6
        deadline = time.monotonic() + 20
        while w.segment.flat[row_seq] != g._seq and time.monotonic() < deadline:
            time.sleep(0.001)  # the state asked for last: its run and its row published
        assert w.segment.flat[row_seq] == g._seq, "the state asked for last has no row (its run is capped)"
        seen: dict[str, object] = {}

        def verify_step() -> None:
            g.fill(a, 0)
            seen["accepted"] = g.accept(toks[half + 1:RUN_MAX])
            g.fill(b, 0)
            g.rollback(RUN_MAX - half - 1)

        assert _completes_while_stopped(w.process.pid, verify_step), "the verify step waited for the worker"
        assert seen["accepted"]
        ref = np.zeros((1, words), np.int32)
        assert r.accept(toks[:half + 1])
        r.fill(ref, 0)
        assert np.array_equal(a, ref)
        assert r.accept(toks[half + 1:RUN_MAX])
        r.fill(ref, 0)
        assert np.array_equal(b, ref)
        r.rollback(RUN_MAX - half - 1)
        _finish_alike(g, r, toks, half + 1)


def test_a_longer_draft_after_one_undone_is_read_from_the_request_s_own_state(vocab):
    """A draft past half of a capped run asks for the state after it; undone, that state is off the request's path.
    A longer draft then asked for, more than the run read still holds, must come from the request's own state (the
    worker publishes it), not from the state after the undone draft."""
    spec, toks, local = _capped_at_start(vocab)
    r = local.compile(spec).grammar()
    with ConstraintService(vocab, workers=1, slots=4) as svc:
        g = svc.open(spec)
        assert g.certain_run(RUN_MAX) == toks[:RUN_MAX]  # the base: a capped run
        assert g.accept(toks[:30])  # a commit inside it
        assert g.certain_run(10) == toks[30:40]
        assert g.accept(toks[30:40])  # the draft, past half of the run: the state after it is asked for
        g.rollback(10)  # undone: that state is off the path
        assert r.accept(toks[:30])
        assert g.certain_run(40) == r.certain_run(40) == toks[30:70]  # more than the run read holds from here


def test_a_row_is_published_before_the_request_moves_on_in_the_same_batch(vocab):
    """Tokens past half of a capped run ask for the state ahead; more tokens taken from the run read go to the worker
    in the same message, with no new state asked for. The worker computes the state ahead's row before those tokens
    move its grammar on (computed after the message, from the later position, the worker refused the slot); every
    row after equals the in-process one."""
    spec, toks, local = _capped_at_start(vocab)
    with ConstraintService(vocab, workers=1, slots=4) as svc:
        g, r = svc.open(spec), local.compile(spec).grammar()
        assert g.certain_run(RUN_MAX) == toks[:RUN_MAX]  # the base: a capped run, no row
        half, inside = RUN_MAX // 2 + 1, RUN_MAX - 4
        assert g.accept(toks[:half]) and g.accept(toks[half:inside])  # one message: the state ahead, then more
        assert g.certain_run(4) == toks[inside:inside + 4]  # from the run read; the message goes to the worker now
        assert r.accept(toks[:inside])
        _finish_alike(g, r, toks, inside)


@pytest.mark.parametrize("draft_wait", [None, 0.0])
@pytest.mark.parametrize("seed", range(8))
def test_random_verbs_agree_with_in_process_grammars(vocab, draft_wait, seed):
    """Random sequences of what servers do, each compared with an in-process grammar after every call: verify steps
    (a draft of 1-64 tokens taken, the rows before and after it filled, the draft undone, then the draft and the next
    gold token committed, or nothing), commits of 1-24 gold tokens, up to 40 committed tokens undone, refused tokens,
    ``validate``, ``is_complete``; four requests interleaved on one worker (capped runs, states asked for ahead,
    drafts undone past them). Drafts must equal the in-process run, or with ``draft_wait`` be a prefix of it."""
    import random

    rng = random.Random(seed)
    local = GrammarCompiler(vocab, workers=0)
    words = mask_words(vocab.size)
    a, b = np.zeros((1, words), np.int32), np.zeros((1, words), np.int32)
    cases = _cases(vocab)
    with ConstraintService(vocab, workers=1, slots=8, draft_wait=draft_wait) as svc:
        reqs = [[svc.open(spec), local.compile(spec).grammar(), toks, 0] for spec, toks in cases]
        ops = 0
        while any(pos < len(toks) for _, _, toks, pos in reqs):
            req = rng.choice([q for q in reqs if q[3] < len(q[2])])
            g, r, toks, pos = req
            op = rng.random()
            ops += 1
            if op < 0.5:  # a verify step, then (mostly) its commit
                k = rng.randint(1, 64)
                want, draft = r.certain_run(k), g.certain_run(k)
                assert draft == want or (draft_wait is not None and draft == want[:len(draft)]), (ops, pos)
                g.fill(a, 0)
                r.fill(b, 0)
                assert np.array_equal(a, b), (ops, pos)
                if draft:
                    assert g.accept(draft) and r.accept(draft)
                    g.fill(a, 0)
                    r.fill(b, 0)
                    assert np.array_equal(a, b), (ops, pos)
                    g.rollback(len(draft))
                    r.rollback(len(draft))
                if op < 0.4:
                    step = toks[pos:pos + len(draft) + 1]
                    assert g.accept(step) and r.accept(step), (ops, pos)
                    req[3] = pos + len(step)
            elif op < 0.65:  # a commit
                n = rng.randint(1, min(24, len(toks) - pos))
                assert g.accept(toks[pos:pos + n]) and r.accept(toks[pos:pos + n]), (ops, pos)
                req[3] = pos + n
            elif op < 0.8 and pos:  # committed tokens undone
                k = min(pos, rng.choice([1, 2, 3, rng.randint(1, 40)]))
                g.rollback(k)
                r.rollback(k)
                req[3] = pos - k
            elif op < 0.87:  # a token the grammar refuses changes nothing
                r.fill(b, 0)
                bits = np.unpackbits(b[0].view(np.uint8), bitorder="little")[:vocab.size]
                if not bits.all():
                    bad = int(np.flatnonzero(bits == 0)[0])
                    assert not g.accept([bad]) and not r.accept([bad])
            elif op < 0.95:
                m = rng.randint(1, 12)
                assert g.validate(toks[pos:pos + m]) == r.validate(toks[pos:pos + m]), (ops, pos)
            else:
                assert g.is_complete() == r.is_complete(), (ops, pos)
            assert g.num_tokens == r.num_tokens == req[3]
            assert g.is_terminated() == r.is_terminated()
        for g, r, _, _ in reqs:
            assert g.is_terminated() and g.is_complete() and g.record() == r.record()
        assert ops > 30


def test_a_refused_token_changes_nothing_and_bad_declarations_raise_their_typed_error(service, vocab):
    spec, toks = _cases(vocab)[0]
    g = service.open(spec)
    words = mask_words(vocab.size)
    before, after = np.zeros((1, words), np.int32), np.zeros((1, words), np.int32)
    g.fill(before, 0)
    wrong = next(t for t in range(vocab.size) if t != toks[0] and not (before[0, t >> 5] >> (t & 31)) & 1)
    assert g.accept([wrong]) is False and g.num_tokens == 0
    g.fill(after, 0)
    assert np.array_equal(before, after)
    assert g.accept(toks[:3]) and g.num_tokens == 3
    bad = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["a"],
           "x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/b"]], "op": "==", "rhs": 1}]}}
    with pytest.raises(UnknownPath):
        service.open(bad)
    unsat = dict(bad, **{"x-factorspec": {"relations": [{"kind": "linear", "terms": [[1, "/a"]], "op": ">=",
                                                          "rhs": 9}]}})
    with pytest.raises(UnsatisfiableDeclaration):
        service.open(unsat)
    assert g.accept([toks[3]]) and g.num_tokens == 4  # the service keeps serving
    g.close()


def test_a_killed_worker_fails_only_its_requests_and_is_replaced(vocab):
    others = _segments()  # the module's service, still open
    with ConstraintService(vocab, workers=2, slots=4) as s:
        cases = _cases(vocab)[:2]
        g0, g1 = s.open(cases[0][0]), s.open(cases[1][0])
        assert g0._worker.index != g1._worker.index
        old = g0._worker
        dead_segment = old.segment.name
        os.kill(old.process.pid, signal.SIGKILL)
        old.process.join(10)
        with pytest.raises(WorkerDied):
            g0.accept([cases[0][1][0]])
        with pytest.raises(WorkerDied):
            g0.fill(np.zeros((1, mask_words(vocab.size)), np.int32), 0)
        with pytest.raises(WorkerDied):
            g0.certain_run(8)
        assert g1.accept(cases[1][1][:2])  # the other worker's request goes on
        g2 = s.open(cases[0][0])  # a new request: the dead worker is replaced
        assert s.replaced == 1 and dead_segment not in _segments() and dead_segment not in s.segments
        assert g2.accept(cases[0][1][:2]) and g2.num_tokens == 2
        assert all(p.is_alive() for p in s.workers)
        procs = s.workers
    assert not any(p.is_alive() for p in procs)
    assert _segments() == others


def test_close_leaves_no_process_or_segment(vocab):
    s = ConstraintService(vocab, workers=1, slots=2)
    names, procs = list(s.segments), s.workers
    assert set(names) <= _segments()
    g = s.open(_cases(vocab)[0][0])
    s.close()
    s.close()  # idempotent
    assert not any(p.is_alive() for p in procs) and not (set(names) & _segments())
    with pytest.raises(WorkerDied):
        g.accept([1])


def test_the_compiler_switch_and_the_environment(vocab, monkeypatch):
    monkeypatch.setenv("FACTORSPEC_CONSTRAINT_WORKERS", "x")
    with pytest.raises(ValueError, match="FACTORSPEC_CONSTRAINT_WORKERS"):
        workers_from_env()
    monkeypatch.setenv("FACTORSPEC_CONSTRAINT_WORKERS", "1")
    compiler = GrammarCompiler(vocab)
    assert compiler.workers == 1
    try:
        spec, toks = _cases(vocab)[0]
        g = compiler.compile(spec).grammar()
        assert isinstance(g, ServiceGrammar)
        assert g.accept(toks) and g.is_terminated()
        session_grammar = compiler.compile(spec).grammar(session=spec.session())  # a given session stays here
        assert not isinstance(session_grammar, ServiceGrammar)
    finally:
        compiler.close()
    monkeypatch.delenv("FACTORSPEC_CONSTRAINT_WORKERS")
    assert GrammarCompiler(vocab).workers == 0
    with pytest.raises(ValueError):
        ConstraintService(vocab, workers=0)
    for bad in ("x", "-1", "nan"):
        monkeypatch.setenv("FACTORSPEC_DRAFT_WAIT_MS", bad)
        with pytest.raises(ValueError, match="FACTORSPEC_DRAFT_WAIT_MS"):
            draft_wait_from_env()
    monkeypatch.setenv("FACTORSPEC_DRAFT_WAIT_MS", "2.5")
    assert GrammarCompiler(vocab).draft_wait == 0.0025
    monkeypatch.delenv("FACTORSPEC_DRAFT_WAIT_MS")
    assert GrammarCompiler(vocab).draft_wait is None
    with pytest.raises(ValueError):
        ConstraintService(vocab, workers=1, draft_wait=-1.0)


def test_serve_passes_workers_and_draft_wait_to_the_servers_environment():
    from argparse import Namespace

    from factorspec_cp.engine.serve import _workers_env
    assert _workers_env(Namespace(constraint_workers=2, draft_wait=0.5)) == {
        "FACTORSPEC_CONSTRAINT_WORKERS": "2", "FACTORSPEC_DRAFT_WAIT_MS": "0.5"}
    assert _workers_env(Namespace(constraint_workers=None, draft_wait=None)) == {}
    with pytest.raises(ValueError, match="constraint-workers"):
        _workers_env(Namespace(constraint_workers=None, draft_wait=1.0))
    with pytest.raises(ValueError):
        _workers_env(Namespace(constraint_workers=1, draft_wait=-1.0))


def test_requests_of_one_declaration_go_to_the_worker_that_compiled_it_within_the_slack(vocab):
    """Affinity: the worker that compiled a declaration takes its next requests (one compile, shared caches) until
    it holds AFFINITY_SLACK more requests than the least busy worker; then the least busy one takes them."""
    from factorspec_cp.engine.service import AFFINITY_SLACK
    spec = _cases(vocab)[0][0]
    with ConstraintService(vocab, workers=2, slots=32) as svc:
        gs = [svc.open(spec) for _ in range(AFFINITY_SLACK + 3)]
        where = [g._worker.index for g in gs]
        first = where[0]
        assert where[:AFFINITY_SLACK + 1] == [first] * (AFFINITY_SLACK + 1)
        assert where[AFFINITY_SLACK + 1] != first  # past the slack: the other worker
        opens = sorted(w.open for w in svc._workers)
        assert opens[1] - opens[0] <= AFFINITY_SLACK + 1
        for g in gs:
            g.close()


def test_the_embedded_engine_writes_the_same_records_through_workers():
    """Greedy, batched: two trips and a tool call, in-process and with two constraint workers: the same tokens."""
    import torch

    from factorspec_cp.engine.model import EmbeddedModel
    from factorspec_cp.engine.run import Engine, Job

    threads = torch.get_num_threads()
    model = EmbeddedModel.smollm2(device="cpu", threads=1)
    try:
        probs = trip_problems(2) + bfcl_problems(2)[1:]
        jobs = [Job(p.spec, p.prompt, "certain", "ours", max_tokens=260, key=p.key) for p in probs]
        local = Engine(model, width=16, batch=3, constraint_workers=0).run(jobs)
        with Engine(model, width=16, batch=3, constraint_workers=2) as engine:
            assert engine.compiler.workers == 2
            remote = engine.run(jobs)
            assert len(engine.compiler.service().workers) == 2
    finally:
        torch.set_num_threads(threads)
    for p, a, b in zip(probs, local, remote):
        assert a.tokens == b.tokens and a.record == b.record, p.key
        assert a.stats["verify_steps"] == b.stats["verify_steps"]
        assert p.check(b.record) == [], p.key


def test_a_worker_imports_no_torch():
    """A constraint worker imports the service and the grammar (and the package's ``engine``), not torch: each
    object it holds is one that every full garbage collection walks. Before, ``factorspec_cp.engine`` imported the
    embedded engine, and with it torch (some 140,000 objects; 50 ms collections in the middle of a step)."""
    import subprocess
    import sys

    code = ("import sys; import factorspec_cp.engine.service, factorspec_cp.engine.grammar; "
            "from factorspec_cp.tokenmap import Vocabulary; Vocabulary.smollm2(); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
