"""The embedded model's verify/commit against full forwards without a cache and transformers' own generate."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from factorspec_cp.engine.model import EmbeddedModel, load_gguf, smollm2_cache_folder, smollm2_gguf  # noqa: E402

ATOL = 1e-3


@pytest.fixture(scope="module")
def em():
    threads = torch.get_num_threads()
    # One thread: the test machine's 2 cores are shared, and spinning OpenMP threads slow down badly under load.
    m = EmbeddedModel.smollm2(device="cpu", threads=1)
    yield m
    torch.set_num_threads(threads)


def full(em, seq: list[int]) -> torch.Tensor:
    """Logits of every position of ``seq`` from one forward without a cache: the independent reference."""
    with torch.inference_mode():
        return em.model(torch.tensor([seq])).logits[0].float()


def test_facts(em):
    assert em.vocab_size == 49152 and em.eos_token_ids == (2,)
    p = em.chat_prompt("Hi", system="Be brief.")
    assert p[-4:] == [1, 520, 9531, 198]  # <|im_start|>assistant\n
    assert em.tokenizer.decode(p).startswith("<|im_start|>system\nBe brief.<|im_end|>")
    again = EmbeddedModel.from_pretrained(smollm2_cache_folder(), device="cpu")
    assert again.vocab_size == em.vocab_size and again.chat_prompt("Hi") == em.chat_prompt("Hi")


def test_cache_equals_gguf(em):
    folder = smollm2_cache_folder()
    assert (folder / "meta.json").is_file() and (folder / "model.safetensors").is_file()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no half-written folder left
    raw, _ = load_gguf(smollm2_gguf(), tokenizer=False)
    seq = em.chat_prompt("What is the capital of Latvia?")
    with torch.inference_mode():
        expected = raw(torch.tensor([seq])).logits[0].float()
    torch.testing.assert_close(full(em, seq), expected, atol=1e-4, rtol=0)


def test_verify_equals_full_forward_and_commit_keeps_exactly_the_accepted(em):
    p = em.chat_prompt("Name three cities in Latvia.")
    r = em.start(p)
    torch.testing.assert_close(r.next_logits, full(em, p)[-1], atol=ATOL, rtol=0)
    draft = [33, 30, 37888, 198, 34, 30, 450, 311]
    rows = em.verify([r], [draft])[0]
    assert rows.shape == (len(draft) + 1, em.vocab_size) and rows.dtype == torch.float32
    torch.testing.assert_close(rows, full(em, p + draft)[len(p) - 1:], atol=ATOL, rtol=0)
    # an uncommitted verify changes nothing
    em.verify([r], [[5, 6, 7]])
    torch.testing.assert_close(em.verify([r], [draft])[0], rows, atol=1e-5, rtol=0)

    em.commit(r, 3, 1234)  # keep 3 drafts, reject the rest, 1234 as the correction
    assert r.tokens == draft[:3] + [1234] and r.pending == [1234] and r.next_logits is None
    committed = p + r.tokens
    draft2 = [284, 9690, 17]
    rows = em.verify([r], [draft2])[0]
    assert rows.shape == (len(draft2) + 1, em.vocab_size)
    torch.testing.assert_close(rows, full(em, committed + draft2)[len(committed) - 1:], atol=ATOL, rtol=0)

    em.commit(r, len(draft2), 42)  # all accepted, 42 as the bonus token
    assert r.tokens == draft[:3] + [1234] + draft2 + [42]
    (rows,) = em.verify([r], [[]])
    torch.testing.assert_close(rows, full(em, p + r.tokens)[-1:], atol=ATOL, rtol=0)
    em.commit(r, 0, 7)
    em.commit(r, 0, 8)  # without a verify: both stay pending, fed by the next verify
    assert r.pending == [7, 8]
    rows = em.verify([r], [[9]])[0]
    torch.testing.assert_close(rows, full(em, p + r.tokens + [9])[-2:], atol=ATOL, rtol=0)


def test_batched_verify_equals_each_alone(em):
    prompts = [em.chat_prompt("Hi"), em.chat_prompt("Write a JSON object with a city and a date, please."),
               em.chat_prompt("Count to five.")[:20]]
    fresh = em.start(prompts[0])  # nothing pending
    one = em.start(prompts[1])
    em.commit(one, 0, 504)  # one pending
    two = em.start(prompts[2])
    em.verify([two], [[11, 12, 13]])
    em.commit(two, 2, 30)  # pending, cache grown by a verify
    requests = [fresh, one, two, em.start(prompts[0])]
    drafts = [[12, 540], [1, 2, 3, 4, 5, 6], [], []]  # the last: no forward needed at all
    together = em.verify(requests, drafts)
    for r, d, rows in zip(requests, drafts, together):
        assert rows.shape == (len(d) + 1, em.vocab_size)
        torch.testing.assert_close(rows, em.verify([r], [d])[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(rows, full(em, list(r.prompt) + r.tokens + d)[-len(d) - 1:], atol=ATOL, rtol=0)
    # commits after a batched verify keep exactly the accepted KV
    em.verify(requests, drafts)
    em.commit(fresh, 1, 99)
    em.commit(one, 4, 100)
    em.commit(two, 0, 101)
    more = [[3], [4, 5], []]
    for r, d, rows in zip(requests, more, em.verify(requests[:3], more)):
        torch.testing.assert_close(rows, full(em, list(r.prompt) + r.tokens + d)[-len(d) - 1:], atol=ATOL, rtol=0)


def test_slots_are_reused_and_scattered_requests_verify_alike(em):
    """Requests in slots that are not consecutive (one released between them) verify on a gathered copy of their
    rows; the result and the KV written back must equal the full forward, and a released slot is taken next."""
    a, b, c = (em.start(em.chat_prompt(q)) for q in ("One.", "Two, three and four.", "Five?"))
    assert len({a._slot, b._slot, c._slot}) == 3
    freed = b._slot
    em.release(b)
    with pytest.raises(ValueError, match="released"):
        em.verify([b], [[5]])
    for step, drafts in enumerate(([[11, 12], [13]], [[14], [15, 16, 17]], [[], [18]])):
        rows = em.verify([c, a], drafts)  # out of slot order too
        for r, d, got in zip((c, a), drafts, rows):
            torch.testing.assert_close(got, full(em, list(r.prompt) + r.tokens + d)[-len(d) - 1:], atol=ATOL,
                                       rtol=0)
        em.commit(c, len(drafts[0]) - step % 2, 7)
        em.commit(a, 1 if drafts[1] else 0, 8)
    d = em.start(em.chat_prompt("Six."))
    assert d._slot == freed
    for r, rows in zip((a, d, c), em.verify([a, d, c], [[1], [2, 3], []])):
        assert rows.shape[0] == len(r._draft) + 1
        torch.testing.assert_close(rows, full(em, list(r.prompt) + r.tokens + r._draft)[-len(r._draft) - 1:],
                                   atol=ATOL, rtol=0)


def test_greedy_equals_transformers_generate(em):
    p = em.chat_prompt("Name three cities in Latvia.")
    ours = em.greedy_generate(p, 12)
    with torch.inference_mode():
        out = em.model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                max_new_tokens=12, do_sample=False, eos_token_id=list(em.eos_token_ids),
                                pad_token_id=em.eos_token_ids[0])
    assert ours == out[0, len(p):].tolist()


def test_errors(em):
    r = em.start([1, 2, 3])
    with pytest.raises(ValueError, match="needs a verify"):
        em.commit(r, 1, 5)
    with pytest.raises(ValueError, match="outside"):
        em.verify([r], [[em.vocab_size]])
    em.verify([r], [[4, 5]])
    with pytest.raises(ValueError, match="accepted=3"):
        em.commit(r, 3, 5)
    with pytest.raises(ValueError, match="empty"):
        em.start([])
    with pytest.raises(ValueError, match="twice"):
        em.verify([r, r], [[], []])
