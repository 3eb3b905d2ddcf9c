"""``factorspec serve`` and ``factorspec model path``, without a server: the command line they build.

The server itself (a real ``vllm serve``) is exercised by tests/test_vllm.py in the vLLM environment.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from factorspec_cp.engine.serve import server_env, vllm_command


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "factorspec_cp.cli", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_model_path_prints_a_folder_servers_load():
    r = _cli("model", "path", "smollm2")
    assert r.returncode == 0, r.stderr
    folder = Path(r.stdout.strip())
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert _cli("model", "path", "smollm2").stdout == r.stdout  # built once, then reused
    bad = _cli("model", "path", "gpt5")
    assert bad.returncode != 0


def test_serve_dry_run_prints_the_plain_vllm_command(tmp_path):
    r = _cli("serve", "--model", str(tmp_path), "--port", "8123", "--ngram", "2:4", "--dry-run", "--",
             "--max-num-seqs", "8")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    argv = shlex.split(line)
    env = dict(a.split("=", 1) for a in argv[:argv.index("vllm")])
    assert env["HF_HUB_OFFLINE"] == "1" and env["FACTORSPEC_VLLM_NGRAM"] == "2:4"
    assert ("VLLM_CPU_KVCACHE_SPACE" in env) == ("VLLM_CPU_KVCACHE_SPACE" not in os.environ)  # a set one is kept
    cmd = argv[argv.index("vllm"):]
    assert cmd[:3] == ["vllm", "serve", str(tmp_path)] and cmd[-2:] == ["--max-num-seqs", "8"]
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert spec == {"method": "custom_class", "model": "factorspec_cp.engine.vllm.Proposer",
                    "num_speculative_tokens": 32}
    assert cmd[cmd.index("--scheduler-cls") + 1] == "factorspec_cp.engine.vllm.Scheduler"
    assert "plain command line" in r.stderr


def test_serve_without_drafts_and_bad_options(tmp_path):
    assert "--speculative-config" not in vllm_command("m", num_speculative_tokens=0)
    for bad in ("x", "3:2", "0:1", "1:"):
        if bad == "1:":
            assert server_env(ngram=bad)["FACTORSPEC_VLLM_NGRAM"] == "1:1"
            continue
        with pytest.raises(ValueError, match="MIN:MAX"):
            server_env(ngram=bad)
    r = _cli("serve", "--model", str(tmp_path / "missing"), "--dry-run")
    assert r.returncode != 0 and "not a folder" in r.stderr


def test_serve_engine_sglang_prints_the_launch_line(tmp_path):
    # the line only (SGLang's parser takes it: tests/test_sglang.py, in the SGLang environment)
    r = _cli("serve", "--engine", "sglang", "--model", str(tmp_path), "--num-speculative-tokens", "7", "--dry-run",
             "--", "--mem-fraction-static", "0.8")
    assert r.returncode == 0, r.stderr
    cmd = shlex.split(r.stdout.strip())
    assert cmd[:5] == ["python", "-m", "sglang.launch_server", "--model-path", str(tmp_path)]
    assert cmd[cmd.index("--grammar-backend") + 1] == "factorspec"
    assert cmd[cmd.index("--speculative-algorithm") + 1] == "NGRAM"
    assert cmd[cmd.index("--speculative-num-draft-tokens") + 1] == "8"  # the root (last token) + 7 certain
    assert cmd[cmd.index("--port") + 1] == "30000" and cmd[-2:] == ["--mem-fraction-static", "0.8"]
    assert "needs a GPU" in r.stderr
    off = shlex.split(_cli("serve", "--engine", "sglang", "--model", str(tmp_path), "--num-speculative-tokens", "0",
                           "--dry-run").stdout.strip())
    assert "--speculative-algorithm" not in off
    bad = _cli("serve", "--engine", "sglang", "--model", str(tmp_path), "--ngram", "2:4", "--dry-run")
    assert bad.returncode != 0 and "--ngram" in bad.stderr
