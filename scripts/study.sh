#!/usr/bin/env bash
# The evidence study with the embedded models (reports/studies/embedded-2026-11/README.md). Every part is a run
# folder under runs/study/ and is resumable: rerun the script (or one part) after an interruption and answered
# calls come from each run's cache. `publish` copies results (not caches or call logs) into the study folder and
# renders it.
#   bash scripts/study.sh [PART ...]      PART: rq1-wmt19 rq1-aquarat rq1-gsm8k rq2-wmt19 sensitivity publish
#                                          (default: all of them, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
RUNS=${RUNS:-runs/study}
STUDY=${STUDY:-reports/studies/embedded-2026-11}
SEEDS=${SEEDS:-"0 1 2"}
BANDITS=case-static,dearicl-static,dearicl-pac-static,lucb-static
declare -A TOKENS=([wmt19]=64 [aquarat]=256 [gsm8k]=256)  # the pilot's choice (pilot.json)
mkdir -p "$RUNS"

run() {  # out-name, then run options
  local name=$1; shift
  local resume=()
  [[ -f "$RUNS/$name/config.json" ]] && resume=(--resume)
  echo "$(date -u +%FT%TZ) start $name" >> "$RUNS/times.log"
  .venv/bin/python -m bench --config configs/study.yaml --no-progress --out "$RUNS/$name" "${resume[@]}" "$@" \
    > "$RUNS/$name.log" 2>&1
  echo "$(date -u +%FT%TZ) end $name" >> "$RUNS/times.log"
}

rq1() {  # task: CASE, DEARICL, dearicl-pac and lucb, 3 seeds, 3000 selection calls at most per fit
  for seed in $SEEDS; do
    run "rq1-$1-seed$seed" --tasks "$1" --methods "$BANDITS" --max-new-tokens "${TOKENS[$1]}" --seed "$seed" \
      --llm-budget 3000 --n-test "$([[ $1 == wmt19 ]] && echo 200 || echo 50)"
  done
}

rq2_wmt19() {  # every selector, n-test 200, seed 0, sharing RQ1 seed 0's answer cache (same pulls: no new call)
  # case-dynamic runs 5 pulls of 10 items per test query (200 queries): 10000 calls at most, so a 12000 cap; the
  # cap is part of a selection's identity, so RQ1's fits (cap 3000) are refitted, from the cache where they agree
  run rq2-wmt19-seed0 --tasks wmt19 --methods all --ltr-data own,dearicl --max-new-tokens 64 --seed 0 \
    --llm-budget 12000 --cache "$RUNS/rq1-wmt19-seed0/cache.sqlite"
}

sensitivity() {  # WMT19, 50 test items: case-dynamic's per-query pulls; LTR test-time candidates
  for pulls in 5 10 20; do
    run "sens-wmt19-case-dynamic-$pulls" --tasks wmt19 --methods case-dynamic --max-new-tokens 64 --seed 0 \
      --n-test 50 --param "case-dynamic.pulls_per_query=$pulls" --cache "$RUNS/rq1-wmt19-seed0/cache.sqlite"
  done
  run sens-wmt19-ltr-all --tasks wmt19 --methods pirank,neuralndcg,listnet,ndcgloss2pp --max-new-tokens 64 \
    --seed 0 --n-test 50 --param "*.candidates=all" --cache "$RUNS/rq1-wmt19-seed0/cache.sqlite"
}

publish() {  # results, not caches: records, fits, results, reports and plots of every finished run
  for dir in "$RUNS"/*/; do
    name=$(basename "$dir")
    [[ -f "$dir/results.json" ]] || continue
    mkdir -p "$STUDY/$name"
    cp "$dir"/{results.json,results.csv,records.jsonl,fits.jsonl,config.json} "$STUDY/$name/" 2>/dev/null || true
    cp "$dir"/*.png "$STUDY/$name/" 2>/dev/null || true
    # the call log feeds the reports' token and cost tables; a log over 5 MB stays out of git
    if [[ -f "$dir/calls.jsonl" && $(stat -c %s "$dir/calls.jsonl") -lt 5000000 ]]; then
      cp "$dir/calls.jsonl" "$STUDY/$name/"
    fi
  done
  cp "$RUNS/times.log" "$STUDY/times.log" 2>/dev/null || true
  .venv/bin/python -m bench report "$STUDY" > /dev/null
}

parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(rq1-wmt19 rq1-aquarat rq1-gsm8k rq2-wmt19 sensitivity publish)
for part in "${parts[@]}"; do
  case $part in
    rq1-wmt19|rq1-aquarat|rq1-gsm8k) rq1 "${part#rq1-}" ;;
    rq2-wmt19) rq2_wmt19 ;;
    sensitivity) sensitivity ;;
    publish) publish ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
