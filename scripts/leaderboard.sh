#!/usr/bin/env bash
# The suite's leaderboard (studies/leaderboard-2026-11/README.md): every selector of `--methods all` on rules, SST-2,
# TREC and AG News with Gemma 3 270M at study scale (configs/study.yaml), seeds 0-2, on the reward tables' 200 test
# items (--split-seed 0: the seed varies the selection, not the items). Selectors that choose among fixed arms (bandit,
# LTR, EXPLORA) are fitted from the recorded table (`bench table replay`, minutes); the others run live (hours).
# Resumable: each (task, seed) run works in runs/leaderboard/ and is published after each run; a new machine starts
# from the published runs (--resume). The page is rewritten after each step.
#   bash scripts/leaderboard.sh                                # everything not done yet
#   TASKS="rules" SEEDS="0" bash scripts/leaderboard.sh        # a part
#   STEPS="report" bash scripts/leaderboard.sh                 # the page again from what is published
#   STEPS="publish" bash scripts/leaderboard.sh                # after an interruption: the finished cells published
#   ONLY="few-shot" STEPS="live report" bash scripts/leaderboard.sh   # some live selectors first (bench --only): the
#                                                              # baseline every paired test needs; the rest resume later
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${LEADERBOARD_OUT:-studies/leaderboard-2026-11}
WORK=${LEADERBOARD_WORK:-runs/leaderboard}
ALL_TASKS="rules sst2 trec agnews"  # the page always shows every task, whichever part a call runs
TASKS=${TASKS:-$ALL_TASKS}; SEEDS=${SEEDS:-0 1 2}; STEPS=${STEPS:-replay live report}
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1
publish() {  # a work run's files, without its cache, into the study; the call log gzipped when over 5 MB
  local work="$WORK/$1" published="$OUT/runs/$1"
  mkdir -p "$published"
  for file in config.json run_config.yaml results.json records.jsonl fits.jsonl report.md; do
    [[ -f $work/$file ]] && cp "$work/$file" "$published/"
  done
  rm -f "$published/calls.jsonl" "$published/calls.jsonl.gz"
  if (( $(stat -c %s "$work/calls.jsonl") < 5000000 )); then cp "$work/calls.jsonl" "$published/"
  else gzip -9 -n -c "$work/calls.jsonl" > "$published/calls.jsonl.gz"; fi
}
report() { "$PY" -m reports.leaderboard "$OUT" --tasks "$(echo $ALL_TASKS | tr ' ' ,)" || echo "leaderboard: the page failed to render; the runs are kept" >&2; }
mkdir -p "$OUT/runs" "$OUT/replays" "$WORK"
if [[ " $STEPS " == *" replay "* ]]; then
  TABLE_METHODS=$("$PY" -m reports.leaderboard --list table)
  for task in $TASKS; do
    "$PY" -m bench table replay "studies/tables/$task-gemma3-270m.npz" --seeds 3 --n-val 10 --llm-budget 3000 \
      --methods "$TABLE_METHODS" --out "$OUT/replays/$task" --no-progress > "$WORK/replay-$task.log" 2>&1 \
      || { echo "leaderboard: the $task replay failed (see $WORK/replay-$task.log)" >&2; exit 1; }
  done
  [[ " $STEPS " == *" report "* ]] && report
fi
if [[ " $STEPS " == *" live "* ]]; then
  LIVE=$("$PY" -m reports.leaderboard --list live)
  for task in $TASKS; do
    for seed in $SEEDS; do
      name="$task-seed$seed"; work="$WORK/$name"; published="$OUT/runs/$name"
      if [[ ! -f $work/config.json && -f $published/config.json ]]; then  # another machine's cells: go on from them
        mkdir -p "$work" && cp -r "$published"/* "$work/"
        [[ -f $work/calls.jsonl.gz ]] && gunzip -f "$work/calls.jsonl.gz"
      fi
      resume=(); [[ -f $work/config.json ]] && resume=(--resume)
      rc=0
      "$PY" -m bench --config configs/study.yaml --backend embedded --methods "$LIVE" --tasks "$task" --seed "$seed" \
        --split-seed 0 --n-test 200 --pool-size 1000 --out "$work" "${resume[@]}" ${ONLY:+--only "$ONLY"} --no-progress \
        > "$WORK/$name.log" 2>&1 || rc=$?
      if [[ $rc -ne 0 && $rc -ne 3 ]]; then echo "leaderboard: $name stopped (exit $rc, see $WORK/$name.log)" >&2; exit $rc; fi
      publish "$name"
      [[ " $STEPS " == *" report "* ]] && report
    done
  done
fi
if [[ " $STEPS " == *" publish "* ]]; then  # an interrupted run's finished cells: results.json, then published
  for task in $TASKS; do
    for seed in $SEEDS; do
      name="$task-seed$seed"; work="$WORK/$name"
      [[ -f $work/records.jsonl ]] || continue
      finished=$("$PY" -c "import collections, json, sys; n = collections.Counter(json.loads(l)['method'] for l in open(sys.argv[1])); print(','.join(m for m, c in n.items() if c >= 200))" "$work/records.jsonl")
      [[ -n $finished ]] || continue
      "$PY" -m bench --resume --out "$work" --only "$finished" --no-progress > "$WORK/$name.publish.log" 2>&1 || true
      publish "$name"
    done
  done
  report
fi
if [[ "$STEPS" == "report" ]]; then report; fi
