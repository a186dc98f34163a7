#!/usr/bin/env bash
# The evidence study with the embedded models (studies/embedded-2026-11/README.md). Every part is one or
# more run folders under runs/study/, all resumable: rerun the script (or one part) after an interruption and
# answered calls come from the study's shared cache. `publish` copies results (not caches or large call logs)
# into the study folder and renders it.
#   bash scripts/study.sh [PART ...]
#   PART: rq1 (CASE and DEARICL: each seed on every task, seed by seed) or rq1-TASK (one task, every seed),
#         schedule-TASK (DEARICL trained as this harness's default, not the paper's schedule), rq2-wmt19,
#         certified-TASK, sensitivity, publish; PART:0,1 runs those seeds only (default: $SEEDS, "0 1 2").
#   Default: the order of what the issue needs most (the list in main below). Runs finished here or published
#   are skipped; `publish` also keeps an unfinished run's finished cells in $STUDY/partial/, which the next
#   session's run resumes from (sessions do not keep runs/ or the cache).
#   Each run (each batch of RQ2 cells) is published as soon as it ends. STUDY_COMMIT=1: publish also commits the
#   study folder (git), so a session that dies keeps what it published.
#   STUDY_UNTIL=TIME (anything `date -d` reads, e.g. 03:35 or 2026-11-25T03:35Z): a session's end. The run under
#   way then is interrupted (SIGINT: what it finished stays resumable), `publish` still runs, and a run is not
#   started when its one long fit would not end in time (minutes_needed below): the fit under way at the end is lost.
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
RUNS=${RUNS:-runs/study}
STUDY=${STUDY:-studies/embedded-2026-11}
SEEDS=${SEEDS:-"0 1 2"}
PY=${STUDY_PYTHON:-.venv/bin/python}  # the tests put a stand-in here
UNTIL=""
if [[ -n ${STUDY_UNTIL:-} ]]; then
  UNTIL=$(date -u -d "$STUDY_UNTIL" +%s) || { echo "STUDY_UNTIL: not a time: $STUDY_UNTIL" >&2; exit 2; }
fi
declare -A TOKENS=([wmt19]=64 [aquarat]=256 [gsm8k]=256)  # the pilot's choice (pilot.json)
declare -A N_TEST=([wmt19]=200 [aquarat]=50 [gsm8k]=50)   # RQ1 on the math tasks is about selection only
CAP=3000            # selection calls per fit: CASE and DEARICL stop on the gap rule well before (study README)
CERTIFIED_CAP=2000  # lucb-static and dearicl-pac-static: 20 pulls per arm on average; they may stop uncertified
mkdir -p "$RUNS"

# RQ2's cells in the order a session runs them, each with the minutes it takes here (its fit and the 200 test
# items; measured on 2026-11-25, run.log): short ones first, the certified selectors and case-dynamic's
# per-query pulls next, UDR's fits last, so a session runs what fits in its time and publish keeps each finished
# cell (udr@dearicl-data: 100 epochs of two MiniLM encoders on DEARICL's 10 lists, 40 arm texts each: 110 min on
# 2026-11-25; udr: 3 mining rounds of 10 epochs on 50 lists, 120 optimiser steps in all: 42 min, fourth session;
# case-dynamic at 13 pulls a query: 28.5 min, its 200 queries asking 26000 calls of which the cache answered 23070)
# (bm25, dpp, votek: OpenICL's retrieval baselines, added 2026-11-28: estimated as knn's 5 minutes, not measured;
#  ceil, added 2026-11-28: 1000 five-shot log-likelihood calls (configs/study.yaml), estimated at 30, not measured)
RQ2_CELLS=(zero-shot:2 few-shot:2 lens:26 explora:10 bridge:5 case-static:15 dearicl-static:2 knn:5 mmr:5
  bm25:5 dpp:5 votek:5 ceil:30
  pirank:4 pirank@dearicl-data:3 neuralndcg:4 neuralndcg@dearicl-data:3 listnet:4 listnet@dearicl-data:3
  ndcgloss2pp:4 ndcgloss2pp@dearicl-data:3 neuralndcg-norm:4 neuralndcg-norm@dearicl-data:3
  dearicl-dynamic:3 dearicl-noexplore:5 dearicl-random:5 lucb-static:18 dearicl-pac-static:18
  dearicl-pac-dynamic:20 case-dynamic:30 udr@dearicl-data:115 udr:50
  set-bsr:5 mdl:5 topk-cone:60 epr:40 dq-lore:45 influence:20)  # the last six: added 2026-11-29, not yet run in
  # the study (estimates: epr and dq-lore train on 1000 log-likelihood calls as a UDR round; influence 1000 pulls)
RQ2_LONG=15   # a cell of at least this many minutes runs (and is published) on its own
RQ2_BATCH=30  # short cells are published at least this often (minutes)
# cells that select per test item (records are written item by item): a cut run keeps its finished items, so they
# start whenever BY_ITEM_MIN minutes are left and the next session goes on from there
RQ2_BY_ITEM=" case-dynamic topk-cone "
BY_ITEM_MIN=10
CASE_DYNAMIC_CAP=26000  # 13 pulls x 10 validation items x 200 queries: every query's pulls, were none shared
# cells published with settings changed since (configs/study.yaml): not done until a --resume has set their old
# rows aside (a superseded/ folder in the run) and run them again (2026-11-25: case-dynamic, 5 -> 13 pulls a query)
RQ2_REDO=" case-dynamic "

minutes_needed() {  # run name: the minutes its longest single fit took on this machine (times.log)
  case $1 in
    rq1-wmt19-*) echo 23 ;;   # CASE to the 3000-call cap in 18 min (seed 1), then 200 test items twice
    rq1-*) echo 90 ;;         # CASE to the 3000-call cap at ~16 s a pull (AquaRAT 78 min)
    schedule-*) echo 10 ;;
    certified-wmt19-*) echo 20 ;;  # lucb-static: 2000 calls at ~0.45 s
    certified-*) echo 55 ;;
    sens-wmt19-case-dynamic-*) echo $BY_ITEM_MIN ;;  # per test item: a cut run keeps its finished items
    *) echo 0 ;;
  esac
}

cell_done() {  # method run-name test-items: the run (here, kept in partial/ or published) has that method's every item
  local records
  for records in "$RUNS/$2/records.jsonl" "$STUDY/partial/$2/records.jsonl" "$STUDY/$2/records.jsonl"; do
    if [[ -f $records ]]; then  # the first that exists is the newest copy
      (( $(grep -c "\"method\": \"$1\"" "$records" || true) >= $3 )) && return 0
      return 1
    fi
  done
  return 1
}

redone() {  # method run-name: the run's newest copy (here, kept in partial/ or published) has set its old cells
  # aside (superseded/*/cells.json names it): RQ2_REDO
  local dir
  for dir in "$RUNS/$2" "$STUDY/partial/$2" "$STUDY/$2"; do
    if [[ -f $dir/records.jsonl ]]; then grep -qs "\"$1\"" "$dir"/superseded/*/cells.json; return; fi
  done
  return 1
}

minutes_left() {  # until STUDY_UNTIL (a large number without it)
  if [[ -n $UNTIL ]]; then echo $(( (UNTIL - $(date -u +%s)) / 60 )); else echo 100000; fi
}

run() {  # out-name, then run options; one answer cache and one selection store for the whole study
  [[ -f "$RUNS/$1/results.json" || -f "$STUDY/$1/results.json" ]] && return  # done (delete both to rerun)
  LAUNCHED=0
  launch "$@"
  if ((LAUNCHED)); then publish; fi  # at once: a session that dies during the next run keeps this one
}

launch() {  # out-name, then run options: the run resumed from what this or an earlier session finished
  local name=$1; shift
  local resume=() kept
  if [[ ! -f "$RUNS/$name/config.json" ]]; then
    # an earlier session's finished (method, task) cells: resuming skips them (the cache did not survive)
    for kept in "$STUDY/partial/$name" "$STUDY/$name"; do
      if [[ -f $kept/config.json ]]; then
        mkdir -p "$RUNS/$name" && cp -r "$kept"/* "$RUNS/$name/"
        if [[ -f "$RUNS/$name/calls.jsonl.gz" ]]; then gunzip -f "$RUNS/$name/calls.jsonl.gz"; fi  # appended to
        break
      fi
    done
  fi
  [[ -f "$RUNS/$name/config.json" ]] && resume=(--resume)
  local replay=() dir
  for dir in "$STUDY"/*/ "$STUDY"/partial/*/; do  # an earlier session's selections: its published records
    if [[ -f $dir/fits.jsonl && -f $dir/records.jsonl ]]; then replay+=("${dir%/}"); fi
  done
  if [[ ${#replay[@]} -gt 0 ]]; then replay=(--replay-from "${replay[@]}"); fi
  local limit=() left status=0
  if [[ -n $UNTIL ]]; then
    left=$((UNTIL - $(date -u +%s)))
    if ((left <= 0)); then
      echo "$(date -u +%FT%TZ) not started $name (STUDY_UNTIL)" >> "$RUNS/times.log"; return
    fi
    if ((left < ${NEEDED:-$(minutes_needed "$name")} * 60)); then  # a later, shorter part may still fit
      echo "$(date -u +%FT%TZ) not started $name (its fit needs ~${NEEDED:-$(minutes_needed "$name")} min, $((left / 60)) left)" \
        >> "$RUNS/times.log"; return
    fi
    limit=(timeout --signal=INT --kill-after=120 "$left")  # SIGINT: the run stops as on Ctrl-C, resumable
  fi
  echo "$(date -u +%FT%TZ) start $name" >> "$RUNS/times.log"
  LAUNCHED=1
  "${limit[@]}" "$PY" -m bench --config configs/study.yaml --no-progress --out "$RUNS/$name" "${resume[@]}" \
    --cache "$RUNS/cache.sqlite" --selections "$RUNS/selections" "${replay[@]}" "$@" >> "$RUNS/$name.log" 2>&1 \
    || status=$?
  case $status in
    0) echo "$(date -u +%FT%TZ) end $name" >> "$RUNS/times.log" ;;
    3) echo "$(date -u +%FT%TZ) end $name (some selector failed: its row has the error)" >> "$RUNS/times.log" ;;
    124) echo "$(date -u +%FT%TZ) stopped $name (STUDY_UNTIL)" >> "$RUNS/times.log" ;;
    130) echo "$(date -u +%FT%TZ) stopped $name (interrupted)" >> "$RUNS/times.log" ;;
    *) echo "$(date -u +%FT%TZ) failed $name (exit $status, $RUNS/$name.log)" >> "$RUNS/times.log"
       publish; exit "$status" ;;  # what this and earlier runs finished is kept (e.g. a hung engine killed)
  esac
}

rq1() {  # task seed: CASE and DEARICL (the paper's static versions)
  run "rq1-$1-seed$2" --tasks "$1" --methods case-static,dearicl-static --max-new-tokens "${TOKENS[$1]}" \
    --seed "$2" --llm-budget $CAP --n-test "${N_TEST[$1]}"
}

schedule() {  # task seed: DEARICL with this harness's training schedule (Adam 1e-3, 4 epochs a round) instead of
  # the paper's (1e-4, one epoch a round): does its early stop come from a network that has barely trained?
  run "schedule-$1-seed$2" --tasks "$1" --methods dearicl-static --max-new-tokens "${TOKENS[$1]}" --seed "$2" \
    --llm-budget $CAP --n-test "${N_TEST[$1]}" --param dearicl-static.lr=0.001 --param dearicl-static.epochs_per_round=4
}

certified() {  # task seed: the certified bandits of the bandit issue, beside RQ1
  run "certified-$1-seed$2" --tasks "$1" --methods lucb-static,dearicl-pac-static --max-new-tokens "${TOKENS[$1]}" \
    --seed "$2" --llm-budget $CERTIFIED_CAP --n-test "${N_TEST[$1]}"
}

rq2_wmt19() {  # every selector, 200 test items, seed 0; RQ1's and certified-wmt19's seed-0 fits are replayed.
  # One run folder, filled a few cells at a time (--only): the cells that fit in the session's time, in RQ2_CELLS'
  # order, the short ones together and each long one alone, each batch published as it ends.
  # case-dynamic pulls 13 arms on the 10 validation items for each of the 200 queries (the 5 cold-start ones
  # shared, configs/study.yaml): at most 26000 calls; lens needs
  # 2800 log-likelihood calls and at most 1000 generations at the study's sizes (configs/study.yaml)
  local name=rq2-wmt19-seed0 cell method minutes batch=() batch_minutes=0 left
  left=$(minutes_left)
  for cell in "${RQ2_CELLS[@]}" flush:0; do
    method=${cell%:*} minutes=${cell##*:}
    if [[ $method != flush ]] && cell_done "$method" $name 200; then
      [[ $RQ2_REDO != *" $method "* ]] || redone "$method" $name && continue
    fi
    if ((left <= 0)); then echo "$(date -u +%FT%TZ) not started $name (STUDY_UNTIL)" >> "$RUNS/times.log"; break; fi
    # a long cell alone: the batch so far goes first, and a long cell in it goes before anything joins it
    if [[ $method == flush ]] || ((minutes >= RQ2_LONG || batch_minutes >= RQ2_LONG || batch_minutes + minutes > RQ2_BATCH)); then
      if ((${#batch[@]})); then rq2_batch "$batch_minutes" "${batch[@]}"; batch=() batch_minutes=0; left=$(minutes_left); fi
      [[ $method == flush ]] && break
    fi
    if [[ $RQ2_BY_ITEM == *" $method "* ]]; then  # alone (its minutes are long: flushed above), as far as time goes
      if ((left >= BY_ITEM_MIN)); then
        rq2_batch "$BY_ITEM_MIN" "$method"; left=$(minutes_left)
      else
        echo "$(date -u +%FT%TZ) not started $name: $method (needs $BY_ITEM_MIN min to start, $left left)" >> "$RUNS/times.log"
      fi
      continue
    fi
    if ((minutes > left - batch_minutes)); then
      echo "$(date -u +%FT%TZ) not started $name: $method (needs ~$minutes min, $((left - batch_minutes)) left)" \
        >> "$RUNS/times.log"
      continue
    fi
    batch+=("$method") batch_minutes=$((batch_minutes + minutes))
  done
}

rq2_batch() {  # minutes cell...: one bench call for these RQ2 cells, then publish (a later cut loses none of them)
  local minutes=$1; shift
  local only
  only=$(IFS=,; echo "$*")
  NEEDED=$minutes launch rq2-wmt19-seed0 --tasks wmt19 --methods all --ltr-data own,dearicl --only "$only" \
    --max-new-tokens 64 --seed 0 --n-test 200 --llm-budget $CAP --method-budget case-dynamic=$CASE_DYNAMIC_CAP \
    --method-budget lens=4000 --method-budget lucb-static=$CERTIFIED_CAP --method-budget dearicl-pac-static=$CERTIFIED_CAP \
    --method-budget dearicl-pac-dynamic=$CERTIFIED_CAP
  publish
}

sensitivity() {  # WMT19, 50 test items: case-dynamic's per-query pulls; LTR test-time candidates
  for pulls in 5 10 20; do
    run "sens-wmt19-case-dynamic-$pulls" --tasks wmt19 --methods case-dynamic --max-new-tokens 64 --seed 0 \
      --n-test 50 --param "case-dynamic.pulls_per_query=$pulls" --llm-budget $((pulls * 10 * 50))
  done
  run sens-wmt19-ltr-all --tasks wmt19 --methods pirank,neuralndcg,listnet,ndcgloss2pp --max-new-tokens 64 \
    --seed 0 --n-test 50 --llm-budget $CAP --param "*.candidates=all"
}

publish() {  # results, not caches: records, fits, results, reports and plots of every finished run
  local dir name dest file files
  for dir in "$RUNS"/*/; do
    name=$(basename "$dir")
    if [[ -f "$dir/results.json" ]]; then
      dest=$STUDY/$name files=(results.json results.csv records.jsonl fits.jsonl config.json run_config.yaml)
      rm -rf "$STUDY/partial/$name"
    elif [[ -f "$dir/config.json" && -f "$dir/records.jsonl" ]]; then  # unfinished: for a later session to resume
      dest=$STUDY/partial/$name files=(config.json run_config.yaml records.jsonl fits.jsonl)
    else
      continue
    fi
    mkdir -p "$dest"
    for file in "${files[@]}"; do
      if [[ -f "$dir/$file" ]]; then cp "$dir/$file" "$dest/"; fi
    done
    [[ -f "$dir/results.json" ]] && cp "$dir"/*.png "$dest/" 2>/dev/null || true
    if [[ -d $dir/superseded ]]; then  # cells redone with other settings (--resume): their old rows are kept too
      rm -rf "$dest/superseded" && cp -r "$dir/superseded" "$dest/"
      find "$dest/superseded" -name calls.jsonl -size +5000000c -exec gzip -9 -n -f {} \;
    fi
    # the call log feeds the results' call counts and the reports' token tables: one copy, gzipped when over 5 MB
    if [[ -f "$dir/calls.jsonl" ]]; then
      rm -f "$dest/calls.jsonl" "$dest/calls.jsonl.gz"
      if (( $(stat -c %s "$dir/calls.jsonl") < 5000000 )); then cp "$dir/calls.jsonl" "$dest/"
      else gzip -9 -n -c "$dir/calls.jsonl" > "$dest/calls.jsonl.gz"; fi
    fi
  done
  # every session's start and end lines, kept in time order (runs/ starts empty in a new session)
  cat "$STUDY/times.log" "$RUNS/times.log" 2>/dev/null | sort -u > "$RUNS/times.merged" || true
  mv "$RUNS/times.merged" "$STUDY/times.log"
  # a report that fails to render loses nothing: the runs are published (and committed) and the study goes on
  if ! "$PY" -m bench report "$STUDY" > "$RUNS/report.log" 2>&1; then
    echo "$(date -u +%FT%TZ) report failed (runs published; $RUNS/report.log)" | tee -a "$RUNS/times.log" >&2
  fi
  if [[ -n ${STUDY_COMMIT:-} ]]; then  # a session can end at any moment: what is published is committed at once
    local message
    message="Study: published $(grep -E ' (end|stopped) ' "$STUDY/times.log" | tail -n 1)"
    # a commit made beside the study holds git's lock for a moment: retry once, then go on (the next publish commits it)
    commit_study "$message" 2> /dev/null || { sleep 5; commit_study "$message"; } ||
      echo "$(date -u +%FT%TZ) commit failed (published, not committed)" | tee -a "$RUNS/times.log" >&2
  fi
}

commit_study() {  # message: commit the study folder and nothing else; no empty commit
  git -C "$STUDY" add -A . && { git -C "$STUDY" diff --cached --quiet -- . || git -C "$STUDY" commit -q -m "$1" -- .; }
}

main() {
  local parts=("$@") part name seeds seed task
  [[ ${#parts[@]} -eq 0 ]] && parts=(rq1:0 schedule-wmt19:0 rq2-wmt19 rq1-wmt19 rq1-aquarat rq1-gsm8k
                                     certified-wmt19 schedule-wmt19 schedule-aquarat:0 schedule-gsm8k:0 sensitivity
                                     certified-aquarat:2 certified-gsm8k:1 certified-aquarat:0,1 certified-gsm8k:0,2 publish)
  # certified on the math tasks: first the seed whose rq1 pulls are in the shared cache (on WMT19 it answered
  # 16-19% of lucb-static's selection calls, 38-44% of dearicl-pac-static's), then the other seeds
  for part in "${parts[@]}"; do
    name=${part%%:*}
    seeds=$SEEDS
    [[ $part == *:* ]] && seeds=${part#*:} && seeds=${seeds//,/ }
    case $name in
      rq1) for seed in $seeds; do for task in wmt19 aquarat gsm8k; do rq1 $task "$seed"; done; done ;;
      rq1-*|schedule-*|certified-*)
        task=${name#*-}
        [[ -n ${TOKENS[$task]:-} ]] || { echo "unknown task in part: $part" >&2; exit 2; }
        for seed in $seeds; do "${name%%-*}" "$task" "$seed"; done ;;
      rq2-wmt19) rq2_wmt19 ;;
      sensitivity) sensitivity ;;
      publish) publish ;;
      *) echo "unknown part: $part" >&2; exit 2 ;;
    esac
  done
}

main "$@"; exit  # parsed whole before it runs: editing this file cannot change a run under way
