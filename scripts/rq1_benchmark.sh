#!/usr/bin/env bash
# The RQ1 replay benchmark (issue "Recorded reward tables", goal: <= 15 minutes on 2 cores): every bandit core of
# the table studies (case and case-script, dearicl with the harness's schedule, the paper's schedule and every stated setting,
# dearicl-random, lucb, dearicl-pac)
# x 50 seeds on every recorded table, two tables at a time with one thread each, the longest first
# (scripts/table_study.sh's `cores` step into a scratch folder). Reports the wall time against the goal (a measurement, never an assertion) and checks
# that each table's stop rounds and pulls, run by run, equal the committed rq1-cores.json's.
#   bash scripts/rq1_benchmark.sh [OUT]          (default runs/rq1-benchmark; STREAMS=2)
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/rq1-benchmark}
rm -rf "$OUT"
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1
began=$(date +%s)
# the longest table first (by the committed runs' seconds), so that the two streams end close together
order=$(.venv/bin/python -c "
import glob, json, os
def cost(table):
    committed = table[:-4] + '/rq1-cores.json'
    return sum(r['mean_seconds'] * r['runs'] for r in json.load(open(committed))['results']) if os.path.exists(committed) else 0
print(chr(10).join(sorted(glob.glob('studies/tables/*.npz'), key=cost, reverse=True)))")
# shellcheck disable=SC2016
printf '%s\n' "$order" | xargs -P "${STREAMS:-2}" -I{} bash -c \
  'name=$(basename "$1" .npz); STEPS=cores bash scripts/table_study.sh "$1" "$2/$name" > /dev/null' _ {} "$OUT"
elapsed=$(( $(date +%s) - began ))
.venv/bin/python - "$OUT" "$elapsed" <<'PYEOF'
import json, sys
from pathlib import Path

out, elapsed = Path(sys.argv[1]), int(sys.argv[2])
lines, same = [], True
for folder in sorted(p for p in out.iterdir() if p.is_dir()):
    new = json.loads((folder / "rq1-cores.json").read_text())
    old = json.loads((Path("studies/tables") / folder.name / "rq1-cores.json").read_text())
    old_runs = {r["method"]: r for r in old["results"]}
    for row in new["results"]:
        ref = old_runs.get(row["method"])
        equal = ref is not None and ref["pulls"] == row["pulls"] and ref["rounds"] == row["rounds"]
        same &= equal
        if not equal:
            lines.append(f"  {folder.name} {row['method']}: stop rounds or pulls differ from the committed run")
    seconds = (folder / "times.log").read_text().strip().splitlines()[-1]
    lines.append(f"  {folder.name}: {seconds}")
tables = len([p for p in out.iterdir() if p.is_dir()])
report = (f"RQ1 replay: {tables} tables x 50 seeds x 8 bandit cores: {elapsed} s wall on 2 cores "
          f"(goal 900 s: {'met' if elapsed <= 900 else 'NOT met'}, {elapsed / 900:.2f}x the goal); runs "
          f"{'identical to' if same else 'DIFFERENT from'} the committed rq1-cores.json (stop rounds and pulls)\n")
report += "\n".join(lines) + "\n"
(out / "benchmark.txt").write_text(report)
print(report, end="")
PYEOF
