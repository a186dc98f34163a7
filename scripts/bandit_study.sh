#!/usr/bin/env bash
# The SIMULATED bandit study of studies/bandit/: every testbed family (a new instance per run), then tables
# and the pulls-vs-eps-error figure. Two streams side by side, one thread each, about 45 minutes on 2 cores.
#   - gap-index methods (case, dearicl, dearicl-random): MAIN_RUNS runs, at most 1000 pulls each, then the
#     DEARICL ablations: ABLATION_RUNS runs;
#   - certified methods (lucb, dearicl-pac): MAIN_RUNS runs, at most 20000 pulls each.
#   bash scripts/bandit_study.sh [OUT_DIR]      (default studies/bandit; MAIN_RUNS=20 ABLATION_RUNS=10)
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1  # two processes on two cores: no oversubscription
OUT=${1:-studies/bandit}
MAIN_RUNS=${MAIN_RUNS:-20}
ABLATION_RUNS=${ABLATION_RUNS:-10}
FAMILIES="nonlinear slots pairwise order latent"
mkdir -p "$OUT"
sim() {  # family methods runs budget tag
  .venv/bin/python -m bench simulate --env "$1" --methods "$2" --runs "$3" --budget "$4" --seed 0 --no-progress \
    --out "$OUT/$1-$5.json"
}
gap_index() {
  for fam in $FAMILIES; do sim "$fam" case,dearicl,dearicl-random "$MAIN_RUNS" 1000 gap-index; done
  for fam in $FAMILIES; do
    sim "$fam" dearicl-cal0,dearicl-paper-schedule,dearicl-mc-mean "$ABLATION_RUNS" 1000 ablations
  done
}
certified() {
  for fam in $FAMILIES; do sim "$fam" lucb,dearicl-pac "$MAIN_RUNS" 20000 certified; done
}
gap_index > "$OUT/gap-index.log" 2>&1 &
certified > "$OUT/certified.log" 2>&1
wait
.venv/bin/python -m reports.simulated "$OUT"/*-gap-index.json "$OUT"/*-certified.json "$OUT"/*-ablations.json \
  --out "$OUT/tables.md" --scatter "$OUT/scatter.png"
echo "wrote $OUT/tables.md and $OUT/scatter.png"
