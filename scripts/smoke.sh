#!/usr/bin/env bash
# The CI regression run: every selector of the paper on small subsets with the embedded model
# (greedy decoding, seed 0; settings in configs/smoke.yaml), compared with the checked-in reference.
# Every fit runs afresh (no saved selection is replayed). About 10 minutes on 2 CPU cores.
#   bash scripts/smoke.sh            run and compare with reports/reference/smoke.json
#   bash scripts/smoke.sh --update   run and overwrite the reference
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
OUT=${SMOKE_OUT:-runs/smoke}
rm -rf "$OUT"
status=0
.venv/bin/python -m bench --config configs/smoke.yaml --out "$OUT" --selections "$OUT/selections" --no-progress \
  || status=$?
if [[ $status -ne 0 && $status -ne 3 ]]; then exit $status; fi  # 3: some fits failed; compare decides
if [[ "${1:-}" == "--update" ]]; then
  mkdir -p reports/reference
  cp "$OUT/results.json" reports/reference/smoke.json
  echo "updated reports/reference/smoke.json"
else
  .venv/bin/python -m bench compare "$OUT" --to reports/reference/smoke.json --tolerance 0.02
fi
