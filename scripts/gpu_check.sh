#!/usr/bin/env bash
# Issue 56's GPU check: one run on a GPU machine, under 10 minutes, that prints every goal's figure.
#
#   bash scripts/gpu_check.sh OUTDIR [GGUF [SECONDS PLAN.json ...]]
#
# 1. Gemma 3 270M's shape, random weights (bench perf --model-config ... --random-weights): ms per decoding step at
#    1, 64, 256 and 750 rows of 800-token prompts, bfloat16 and float32, and the step's fraction of the
#    memory-bandwidth roofline (goal: a 750-row step <= 8 ms).
# 2. Llama 3.2 3B's shape, random weights: the same at 1, 20, 64 and 256 rows (goal: batch 64 within 2x of the
#    roofline), and the projected hours of the paper's CASE selection on GSM8K, one table, and the whole RQ1-RQ3 run.
# 3. With the embedded model's GGUF copied by hand: the decoding identity tests on the GPU (greedy and sampled
#    outputs of a shared-prefix batch equal one call at a time; the attention-kernel check and its eager fallback),
#    then, with SECONDS and plans, scripts/device_tables.sh records those plans' calls in the time given.
# OUTDIR gets one JSON per measurement, the tests' log and SUMMARY.txt (every goal's figure). SMALL=1 runs the same
# steps at a CPU's size (a check of the script; no figure of it is a GPU's).
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -uo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 OUTDIR [GGUF [SECONDS PLAN.json ...]]" >&2; exit 2; }
OUT=$1 GGUF=${2:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
if [[ -n ${SMALL:-} ]]; then
  GEMMA=(--layers 2 --batch-sizes 1,4 --prompt-tokens 64 --steps 4) LLAMA=(--layers 1 --batch-sizes 1,4 --prompt-tokens 32 --steps 3)
  DTYPES=(float32)
else
  GEMMA=(--batch-sizes 1,64,256,750 --prompt-tokens 800 --steps 32) LLAMA=(--batch-sizes 1,20,64,256 --prompt-tokens 800 --steps 32)
  DTYPES=(bfloat16 float32)
fi
began=$(date +%s)
for dtype in "${DTYPES[@]}"; do
  echo "== gemma3-270m shape, $dtype"
  timeout 150 $PY -m bench perf --model-config gemma3-270m --random-weights "${GEMMA[@]}" --dtype "$dtype" \
    --out "$OUT/gemma3-270m-$dtype.json" 2>&1 | tail -n 12
done
echo "== llama3.2-3b shape, bfloat16 on a GPU"
timeout 200 $PY -m bench perf --model-config llama3.2-3b --random-weights "${LLAMA[@]}" --out "$OUT/llama3.2-3b.json" \
  2>&1 | tail -n 12
if [[ -n $GGUF ]]; then
  echo "== identity tests on this device (the GGUF given)"
  BENCH_GEMMA_GGUF=$GGUF timeout 240 $PY -m pytest -q -p no:cacheprovider tests/test_decoding.py \
    -k "gemma3 and (unpadded or faulty or sound or reads_nothing)" > "$OUT/tests.log" 2>&1
  echo "tests exit $?"; tail -n 3 "$OUT/tests.log"
  if [[ $# -ge 4 ]]; then
    left=$(( $3 - ($(date +%s) - began) ))
    (( left > 30 )) && bash "$(dirname "$0")/device_tables.sh" "$GGUF" "$OUT/tables" "$left" "${@:4}"
  fi
fi
$PY - "$OUT" <<'PY' | tee "$OUT/SUMMARY.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def batch(path, rows):
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    return r, next((b for b in r["batches"] if b["rows"] == rows and "ms_per_step" in b), None)
for dtype in ("bfloat16", "float32"):
    got = batch(out / f"gemma3-270m-{dtype}.json", 750)
    if got and got[1]:
        r, b = got
        print(f"gemma3-270m {dtype} on {r['device']}: 750-row step {b['ms_per_step']:.2f} ms (goal <= 8), "
              f"{b['roofline_fraction']:.2f} of the roofline, peak {b['peak_memory_bytes'] or 0:.3g} B")
got = batch(out / "llama3.2-3b.json", 64)
if got:
    r, b = got
    if b:
        print(f"llama3.2-3b on {r['device']}: batch-64 step {b['ms_per_step']:.2f} ms, roofline "
              f"{b['roofline_ms_per_step']:.2f} ms: {1 / b['roofline_fraction']:.2f}x of it (goal <= 2x)")
    for p in r["projections"]:
        print(f"  projected {p['workload']}: {p['projected_hours']:.2f} h")
tests = out / "tests.log"
if tests.exists():
    print("identity tests:", (tests.read_text().strip().splitlines() or ["(no output)"])[-1])
PY
echo "gpu_check: $(( $(date +%s) - began )) s"
