"""The engine (masked decoding with drafts verified in one forward pass) against independent references.

- greedy: drafts change how many tokens a forward pass commits, never which tokens (up to float near-ties);
- sampling: the committed token follows softmax(masked logits / T) whatever the draft (numpy reference);
- every record passes the workload's own plain-Python checker (never the declaration), or jsonschema for the
  schema-only baseline, or equals a CP-SAT solution for solve-then-emit;
- the ``factorspec generate`` command, run as a subprocess.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from importlib import resources
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from factorspec_cp.engine.run import Engine, Job  # noqa: E402
from factorspec_cp.workloads import calendar, trip  # noqa: E402

TIE = 1e-3  # a masked top-1 minus top-2 logit below this is a floating-point near-tie (batching may flip it)


@pytest.fixture(scope="module")
def model():
    from factorspec_cp.engine.model import EmbeddedModel

    threads = torch.get_num_threads()
    m = EmbeddedModel.smollm2(device="cpu", threads=1)  # the test machine's 2 cores are shared
    yield m
    torch.set_num_threads(threads)


def _trips() -> dict[int, list[str]]:
    """Prompts of the first trip problems with 3, 4 and 5 cities (two with 3)."""
    out: dict[int, list[str]] = {3: [], 4: [], 5: []}
    for ex in trip.examples():
        n = trip.num_cities(ex)
        if n in out and len(out[n]) < (2 if n == 3 else 1):
            out[n].append(trip.problem(ex))
        if all(len(v) == (2 if n == 3 else 1) for n, v in out.items()):
            return out
    raise AssertionError("not enough trip problems")


@pytest.fixture(scope="module")
def trips() -> dict[int, list[str]]:
    return _trips()


@pytest.fixture(scope="module")
def calendars() -> list[str]:
    out = []
    for ex in calendar.examples():
        out.append(calendar.problem(ex))
        if len(out) == 2:
            return out
    raise AssertionError("not enough calendar problems")


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _same_or_tie(a, b) -> bool:
    """True when the committed tokens are identical; False when they first differ at a near-tie; else fails."""
    assert len(a.margins) == len(a.tokens) and len(b.margins) == len(b.tokens)
    i = _first_difference(a.tokens, b.tokens)
    if i is None:
        return True
    margins = [r.margins[i] for r in (a, b) if i < len(r.margins)]
    assert min(margins) < TIE, (
        f"{a.key} vs {b.key}: token {i} differs ({a.tokens[i:i + 3]} vs {b.tokens[i:i + 3]}) with masked margins "
        f"{margins}, not a near-tie")
    return False


# ---------------------------------------------------------------------------------------------- greedy


def test_greedy_drafts_commit_the_same_tokens(model, trips, calendars):
    problems = [(trip, trips[3][0]), (trip, trips[4][0]), (trip, trips[5][0]),
                (calendar, calendars[0]), (calendar, calendars[1])]
    jobs = []
    for k, (wl, prompt) in enumerate(problems):
        spec = wl.declaration(prompt)
        for drafter in ("none", "certain"):
            jobs.append(Job(spec, prompt, drafter, "ours", max_tokens=220, key=(k, drafter)))
    results = Engine(model, width=16, batch=3).run(jobs)
    ties = 0
    for k, (wl, prompt) in enumerate(problems):
        plain, certain = results[2 * k], results[2 * k + 1]
        assert plain.key == (k, "none") and certain.key == (k, "certain")
        ties += not _same_or_tie(plain, certain)
        for r in (plain, certain):
            assert r.stats["terminated"], r.text
            assert wl.check(prompt, r.record) == [], (r.key, r.record)
            assert r.stats["tokens"] == len(r.tokens)
        assert plain.stats["verify_steps"] == plain.stats["tokens"] and plain.stats["accept_length"] == 1
        assert certain.stats["verify_steps"] < plain.stats["verify_steps"]
        assert certain.stats["accept_length"] > 1 and certain.stats["accepted_drafts"] > 0
    print(f"{ties} of {len(problems)} problems split at a near-tie")  # every split is asserted a near-tie above


# -------------------------------------------------------------------------------------------- sampling


class StandIn:
    """Just enough of a model for Engine to be built and its acceptance rule (_pick) called."""

    name = "smollm2-stand-in"
    vocab_size = 49152
    eos_token_ids = (2,)


T = 0.7
ADMITTED = [7, 40, 133, 250, 301, 488]  # the mask
ADMITTED_LOGITS = [1.0, 0.6, 0.2, -0.1, 0.5, -0.6]  # token 7 the masked top-1 (p ~ 0.37), 133 third (p ~ 0.12)


def _setup(size: int, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Random logits (the refused tokens mostly higher than the admitted ones), the mask, the reference
    distribution over ADMITTED: softmax(masked logits / T) in float64 numpy."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(2.0, 3.0, size).astype(np.float32)
    logits[ADMITTED] = ADMITTED_LOGITS
    mask = np.zeros(size, dtype=bool)
    mask[ADMITTED] = True
    z = logits[ADMITTED].astype(np.float64) / T
    p = np.exp(z - z.max())
    return torch.from_numpy(logits), torch.from_numpy(mask), p / p.sum()


def _chi2_limit(dof: int, z: float = 4.0) -> float:
    """Wilson-Hilferty upper quantile of chi-square(dof) at z standard deviations (z=4: about 3e-5)."""
    c = 2.0 / (9.0 * dof)
    return dof * (1.0 - c + z * math.sqrt(c)) ** 3


def _draw(engine: Engine, logits, mask, draft, n: int) -> np.ndarray:
    r = SimpleNamespace(margins=[])
    out = np.empty(n, dtype=np.int64)
    for j in range(n):
        tok, ok = engine._pick(logits, mask, draft, r)
        assert ok == (tok == draft)  # accepted iff the draft token is the committed one
        out[j] = tok
    assert len(r.margins) == n
    return out


@pytest.mark.parametrize(("size", "draft", "n"), [
    (512, 7, 20_000),  # the draft is the masked top-1, probability ~ 0.37
    (512, 133, 20_000),  # the draft is outside the top-1, probability ~ 0.12
    (512, None, 10_000),  # the bonus position: no draft
    (StandIn.vocab_size, 40, 3_000),  # the model's whole vocabulary (slower per draw: fewer draws)
])
def test_sampling_follows_the_masked_distribution(size, draft, n):
    engine = Engine(StandIn(), temperature=T, seed=11)
    logits, mask, ref = _setup(size)
    toks = _draw(engine, logits, mask, draft, n)
    assert set(np.unique(toks)) <= set(ADMITTED)
    counts = np.array([(toks == t).sum() for t in ADMITTED])
    freq = counts / n
    sigma = np.sqrt(ref * (1 - ref) / n)
    assert np.all(np.abs(freq - ref) <= 4.5 * sigma), (freq, ref)
    chi2 = float(((counts - n * ref) ** 2 / (n * ref)).sum())
    assert chi2 < _chi2_limit(len(ADMITTED) - 1), (chi2, freq, ref)


@pytest.mark.parametrize("how", ["only admitted", "all the mass"])
def test_sampling_a_draft_holding_all_the_mass_is_always_accepted(how):
    engine = Engine(StandIn(), temperature=T, seed=5)
    logits, mask, _ = _setup(512)
    draft = 250
    if how == "only admitted":
        mask = torch.zeros_like(mask)
        mask[draft] = True
    else:  # the other admitted tokens' probabilities underflow to exactly 0
        logits = logits.clone()
        logits[draft] = 1e4
    toks = _draw(engine, logits, mask, draft, 500)
    assert np.all(toks == draft)


def test_greedy_pick_is_the_masked_argmax():
    engine = Engine(StandIn(), temperature=0.0)
    logits, mask, ref = _setup(512)
    best = ADMITTED[int(np.argmax(ref))]
    assert best != int(torch.argmax(logits))  # the mask matters here
    r = SimpleNamespace(margins=[])
    assert engine._pick(logits, mask, best, r) == (best, True)
    assert engine._pick(logits, mask, 40, r) == (best, False)
    assert engine._pick(logits, mask, None, r) == (best, False)
    top2 = sorted(ADMITTED_LOGITS)[-2:]
    assert r.margins == pytest.approx([top2[1] - top2[0]] * 3)


def test_sampled_trip_record_is_valid(model, trips):
    prompt = trips[3][0]
    engine = Engine(model, width=16, temperature=0.8, batch=1, seed=1)
    res = engine.run([Job(trip.declaration(prompt), prompt, "certain", "ours", max_tokens=220)])[0]
    assert res.stats["terminated"], res.text
    assert trip.check(prompt, res.record) == [], res.record
    assert res.stats["accept_length"] > 1


# ------------------------------------------------------------------------------------ drafts and masks


def test_drafts_and_constraints_keep_records_valid(model, trips):
    import jsonschema

    from factorspec_cp.encoders import cpsat

    prompts = trips[3]
    specs = [trip.declaration(p) for p in prompts]
    jobs = []
    for k, (prompt, spec) in enumerate(zip(prompts, specs)):
        for drafter in ("certain", "ngram:2:8", "hybrid"):
            jobs.append(Job(spec, prompt, drafter, "ours", max_tokens=220, key=(k, drafter)))
    jobs.append(Job(specs[0], prompts[0], "certain", "pinned", max_tokens=220, key=(0, "pinned")))
    jobs.append(Job(specs[0], prompts[0], "ngram:2:8", "xgrammar", max_tokens=220, key=(0, "xgrammar")))
    results = {r.key: r for r in Engine(model, width=16, batch=3).run(jobs)}
    for k, prompt in enumerate(prompts):
        for drafter in ("ngram:2:8", "hybrid"):
            r = results[(k, drafter)]
            assert r.stats["terminated"], r.text
            assert trip.check(prompt, r.record) == [], (r.key, r.record)
            assert r.stats["drafted"] > 0
            _same_or_tie(results[(k, "certain")], r)  # greedy: same tokens as the certain drafter
    pinned = results[(0, "pinned")]
    assert pinned.stats["terminated"], pinned.text
    solutions = [specs[0].record(v) for v in cpsat.enumerate_solutions(specs[0], limit=50)]
    assert pinned.record in solutions
    assert trip.check(prompts[0], pinned.record) == []
    xg = results[(0, "xgrammar")]
    assert xg.stats["terminated"], xg.text
    jsonschema.validate(xg.record, specs[0].schema)  # relations may be violated: no trip.check here


def test_certain_drafters_under_xgrammar_masks(model, trips):
    import jsonschema

    prompt = trips[3][0]
    spec = trip.declaration(prompt)
    for drafter in ("certain", "hybrid"):  # certain runs exist only under our masks: refused cleanly
        with pytest.raises(ValueError, match="certain runs"):
            Engine(model, width=16, batch=1).generate(spec, prompt, drafter=drafter, constraint="xgrammar",
                                                      max_tokens=220)
    res = Engine(model, width=16, batch=1).generate(spec, prompt, drafter="syntax", constraint="xgrammar",
                                                    max_tokens=220)
    jsonschema.validate(res.record, spec.schema)


# ------------------------------------------------------------------------------------------------ CLI


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", "factorspec_cp.cli", "generate", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_cli_generate_json():
    proc = _cli("--json", "--width", "16")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert isinstance(out, dict) and {"record", "stats"} <= set(out)
    stats = out["stats"]
    for key in ("verify_steps", "tokens", "accept_length", "seconds"):
        assert isinstance(stats[key], int | float) and stats[key] > 0, (key, stats)
    assert stats["valid"] is True and stats["width"] == 16
    doc = json.loads(resources.files("factorspec_cp").joinpath("examples/trip_natural_plan.json").read_text())
    assert trip.check(doc["prompt"], out["record"]) == []


def test_cli_generate_refuses_bad_arguments(tmp_path):
    proc = _cli("--json", "--drafter", "bogus")
    assert proc.returncode != 0
    assert "bogus" in proc.stderr
    f = tmp_path / "prompt.txt"
    f.write_text("Plan a trip.")
    proc = _cli("--prompt", "Plan a trip.", "--prompt-file", str(f))
    assert proc.returncode != 0
    assert "not both" in proc.stderr


def test_cli_bad_drafter_is_a_clean_error(model, monkeypatch, capsys):
    from factorspec_cp import cli
    from factorspec_cp.engine import run

    monkeypatch.setattr(run, "Engine", functools.partial(Engine, model))  # the module's model, no second load
    try:
        rc = cli.main(["generate", "--json", "--drafter", "bogus"])
    except SystemExit as e:
        rc = e.code
    assert rc not in (0, None)
    assert "unknown drafter" in capsys.readouterr().err + str(rc)


# --------------------------------------------------------------------------------------------- errors


def test_errors(model, trips):
    with pytest.raises(ValueError):
        Engine(model, width=0)
    with pytest.raises(ValueError):
        Engine(StandIn(), batch=0)
    prompt = trips[3][0]
    with pytest.raises(ValueError, match="constraint"):
        Engine(model).run([Job(trip.declaration(prompt), prompt, "certain", "bogus")])
    with pytest.raises(ValueError, match="drafter"):
        Engine(model).run([Job(trip.declaration(prompt), prompt, "bogus", "ours")])
