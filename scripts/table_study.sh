#!/usr/bin/env bash
# RQ1/RQ3 on a recorded reward table: every bandit (the cores, `bench simulate`) and the harness's own arm-choosing
# selectors (`bench table replay`), 50 seeds each, then DEARICL's open knobs (scripts/knob_sweep.py). RECORDED
# rewards of a real LLM, exact truth; no LLM call. Timings go to OUT/times.log.
#
#   bash scripts/table_study.sh studies/tables/rules-gemma3-270m.npz studies/tables/rules-gemma3-270m
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
TABLE="$1"; OUT="$2"; RUNS="${RUNS:-50}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
# one torch thread: a neural fit's float sums differ between thread counts, and so do DEARICL's stop rounds (8-28 of 50 runs)
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 BENCH_DATA_DIR="${BENCH_DATA_DIR:-$ROOT/../shared/data}"
mkdir -p "$OUT"
timed() { local label="$1"; shift; local began; began=$(date +%s); "$@" || return; echo "$label: $(( $(date +%s) - began )) s" >> "$OUT/times.log"; }
# the paper's settings: 20 validation items a pull (its calls / rounds: 2600 / 130 and 1580 / 79, l.808 and l.817),
# m = 10, eps = 0.1, delta = 0.05 (l.780); at most 300 pulls (6000 calls), this study's cap. N_VAL=10 gives the
# earlier study's setting.
N_VAL="${N_VAL:-20}"
STEPS="${STEPS:-cores replay sweep stated certified}"  # a subset reruns parts, e.g. STEPS="replay sweep"; "summaries": the replay's
                                      # summaries again from its saved fits (OUT/replay/rows.jsonl), untimed;
                                      # "paper-core": dearicl-paper's row of the cores again; "paper-replay": the
                                      # replay's dearicl-static:paper fits again
[[ " $STEPS " == *" cores "* ]] && timed "rq1 cores ($RUNS runs)" "$PY" -m bench simulate --env "table:$TABLE" \
  --methods case,case-script,dearicl,dearicl-paper,dearicl-paper-schedule,dearicl-random,lucb,dearicl-pac --runs "$RUNS" --n-val "$N_VAL" \
  --budget 300 --no-progress --out "$OUT/rq1-cores.json" > "$OUT/rq1-cores.txt"
# the cores' dearicl-paper alone, its row replaced in rq1-cores (after an edit of the paper's settings; the same seeds)
if [[ " $STEPS " == *" paper-core "* ]]; then  # a failed update stops the script; the old text stays
  timed "rq1 cores, dearicl-paper updated ($RUNS runs)" "$PY" -m bench simulate --env "table:$TABLE" \
    --methods dearicl-paper --runs "$RUNS" --n-val "$N_VAL" --budget 300 --no-progress --out "$OUT/rq1-cores.json" \
    --update > "$OUT/rq1-cores.txt.part"
  mv "$OUT/rq1-cores.txt.part" "$OUT/rq1-cores.txt"
fi
# the harness's selectors, paper and harness schedules of DEARICL side by side; resumable through OUT/replay
REPLAY=(-m bench table replay "$TABLE" --seeds "$RUNS" --n-val "$N_VAL" --llm-budget $((300 * N_VAL))
  --methods case-static,dearicl-static:paper,dearicl-static,lucb-static,dearicl-pac-static,dearicl-dynamic,dearicl-random,dearicl-noexplore,dearicl-pac-dynamic
  --param "dearicl-static:paper.epochs_per_round=1" --param "dearicl-static:paper.lr=0.0001"
  --param "dearicl-static:paper.hidden=[256,256,128,64]" --param "dearicl-static:paper.log_k=arms"
  --param "dearicl-static:paper.estimate=mc-mean" --param "dearicl-static:paper.mc_draws=per-round" ${MARGIN:+--margin "$MARGIN"} --no-progress --out "$OUT/replay")
[[ " $STEPS " == *" replay "* ]] && timed "replay ($RUNS seeds)" "$PY" "${REPLAY[@]}"
# the replay's dearicl-static:paper alone (after an edit of the paper's settings): its fits dropped, the others kept
if [[ " $STEPS " == *" paper-replay "* ]]; then
  "$PY" -c "import json, sys; p = sys.argv[1]; rows = [r for r in open(p) if r.strip()]
open(p, 'w').writelines(r for r in rows if json.loads(r)['method'] != 'dearicl-static:paper')" "$OUT/replay/rows.jsonl"
  timed "replay, dearicl-static:paper refitted ($RUNS seeds)" "$PY" "${REPLAY[@]}"
fi
[[ " $STEPS " == *" summaries "* ]] && "$PY" "${REPLAY[@]}" > /dev/null
# a table with secondary metrics (WMT19's chrF): the same fits scored with each, beside summary.md
[[ " $STEPS " == *" replay "* || " $STEPS " == *" summaries "* || " $STEPS " == *" paper-replay "* ]] && for extra in $("$PY" -c "from bench.reward_table import RewardTable; print(' '.join(RewardTable.load('$TABLE').extras))"); do
  "$PY" "${REPLAY[@]}" --table-metric "$extra" > /dev/null
done
[[ " $STEPS " == *" sweep "* ]] && timed "knob sweep (${SWEEP_RUNS:-$RUNS} runs a setting)" "$PY" "$ROOT/scripts/knob_sweep.py" "$TABLE" --runs "${SWEEP_RUNS:-$RUNS}" --n-val 10 \
  --out "$OUT/sweep"
# the certified cores on the fixed set they estimate: 100 runs (0 errors in 50 cannot bound the rate under 0.05),
# room to certify (2,000 pulls)
[[ " $STEPS " == *" certified "* ]] && timed "certified cores (100 runs)" "$PY" -m bench simulate --env "table:$TABLE" \
  --methods lucb,lucb-pp-wider,lucb-paired --runs 100 --n-val "$N_VAL" --budget 2000 --no-progress \
  --out "$OUT/certified-fixed-set.json" > "$OUT/certified-fixed-set.txt"
# every setting the paper states, at its 20 items a pull, beside CASE under the same settings (scripts/knob_sweep.py)
[[ " $STEPS " == *" stated "* ]] && timed "stated settings (${SWEEP_RUNS:-$RUNS} runs a setting)" "$PY" "$ROOT/scripts/knob_sweep.py" "$TABLE" --runs "${SWEEP_RUNS:-$RUNS}" --n-val 20 \
  --settings stated --out "$OUT/sweep-stated"
exit 0
