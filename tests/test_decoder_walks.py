"""Random walks through the decoder on every workload and tokenizer: every record valid, rollbacks exact.

The full 10,000-walk run is ``factorspec bench walks`` (``benchmarks/walks.md``); this runs a small sample."""

from __future__ import annotations

from factorspec_cp.bench.walks import report_md, run_walks


def test_walks_produce_valid_records() -> None:
    res = run_walks(48, seed=1, workloads={"trip": 0.5, "calendar": 0.4, "meeting": 0.1})
    assert res["failures"] == [], res["failures"]
    assert sum(r["walks"] for r in res["by"].values()) == 48
    vocabs = {k.split("/")[1] for k in res["by"]}
    modes = {k.split("/")[2] for k in res["by"]}
    assert vocabs == {"smollm2", "qwen3", "llama3"} and modes == {"canonical", "exact"}
    assert sum(r["rollbacks"] for r in res["by"].values()) > 0
    assert "Failures: 0" in report_md(res)
