#!/usr/bin/env bash
# Every result number the results page and the READMEs print, recomputed from the committed run folders and reward tables (no LLM call):
#   1. the study's claims blocks (reports/claims.py) in docs/reports.md and the READMEs: checked, or rewritten;
#   2. each reward-table study's replay summaries, from its saved fits (OUT/replay/rows.jsonl; no fit is redone);
#   3. the study's report.md / report.tex (`bench report`).
# Then `git status` / `git diff` shows whatever no longer matches the committed text.
#
#   bash scripts/reproduce_numbers.sh           # check the README blocks (exit 1 if stale), rewrite 2 and 3
#   bash scripts/reproduce_numbers.sh --write   # rewrite the README blocks too
#   CORES=1 bash scripts/reproduce_numbers.sh   # also rerun the bandit cores on every table (~7 min a table)
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=.venv/bin/python
STUDY=studies/embedded-2026-11
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
mode=--check
[[ "${1:-}" == "--write" ]] && mode=--write
status=0
"$PY" -m reports.claims "$STUDY" "$mode" docs/reports.md "$STUDY/README.md" studies/tables/README.md README.md || status=$?
for table in studies/tables/*.npz; do
  out="${table%.npz}"
  if [[ -n "${CORES:-}" && -f "$out/rq1-cores.json" ]]; then  # the cores at the n_val they were committed with
    n_val=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['env']['n_val'])" "$out/rq1-cores.json")
    echo "== $table: cores (n_val $n_val)"
    N_VAL="$n_val" STEPS=cores bash scripts/table_study.sh "$table" "$out"
  fi
  # the settings the saved fits were made with (a table replayed under an earlier protocol keeps its own)
  [[ -f "$out/replay/rows.jsonl" && -f "$out/replay/summary.json" ]] || continue
  # a replay under the analysis plan takes each metric's planned margin; an earlier protocol's keeps its one margin
  read -r n_val margin < <("$PY" -c "import json, sys; d = json.load(open(sys.argv[1])); c = d['comparisons'][0]; print(d['n_val'], '' if 'primary' in c else c['margin'])" "$out/replay/summary.json")
  echo "== $table: summaries (n_val $n_val${margin:+, margin $margin})"
  N_VAL="$n_val" MARGIN="$margin" STEPS=summaries bash scripts/table_study.sh "$table" "$out"
done
"$PY" -m bench report "$STUDY" > /dev/null
git status --short -- docs/reports.md README.md studies/
exit $status
