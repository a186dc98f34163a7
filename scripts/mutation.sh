#!/usr/bin/env bash
# Mutation testing of the selectors (mutmut): where is the test suite blind?
#
#   bash scripts/mutation.sh                      # knn, mmr, case_dynamic (about 30-40 min on 2 cores)
#   bash scripts/mutation.sh lens explora udr     # other modules of methods/ (one mutmut run each)
#
# Each module is mutated in a scratch clone of HEAD (nothing here is touched), against the tests that exercise
# it: the behavioural tests of tests/test_selector_behaviour.py for the selectors it defines, plus
# tests/test_<module>.py where one exists. The kill rates and every surviving mutant (its diff) go to
# reports/mutation/<module>.md and a summary row to reports/mutation/README.md. A surviving mutant is a change
# of the code that no test notices: read it, and either add a test that fails on it or say why it is
# equivalent (changes nothing observable).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
MUTMUT="$ROOT/.venv/bin/mutmut"
[[ -x "$MUTMUT" ]] || { echo "error: mutmut is not installed: .venv/bin/pip install -e '.[mutation]'" >&2; exit 2; }
MODULES=("$@")
[[ ${#MODULES[@]} -gt 0 ]] || MODULES=(knn mmr case_dynamic)
export BENCH_DATA_DIR="${BENCH_DATA_DIR:-$ROOT/../shared/data}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT="$ROOT/reports/mutation"
mkdir -p "$OUT"

for module in "${MODULES[@]}"; do
  [[ -f "$ROOT/methods/$module.py" ]] || { echo "error: no methods/$module.py" >&2; exit 2; }
  # the registered names of the selectors the module defines select their behavioural tests (-k)
  names=$(cd "$ROOT" && "$PY" - "$module" <<'EOF'
import inspect, sys
from methods.base import available
here = f"methods.{sys.argv[1]}"
mine = [n for n, c in available().items()
        if "@" not in n and any(inspect.getmodule(b).__name__ == here for b in c.__mro__)]
print(" or ".join(sorted(mine)))
EOF
)
  [[ -n "$names" ]] || names="$module"
  tests="\"tests/test_selector_behaviour.py\", \"-k\", \"${names}\""
  [[ -f "$ROOT/tests/test_$module.py" ]] && tests="$tests, \"tests/test_$module.py\""
  work="$(mktemp -d)"
  git -C "$ROOT" clone -q "$ROOT" "$work/repo"
  cd "$work/repo"
  ln -s "$ROOT/.venv" .venv
  cat >> pyproject.toml <<EOF

[tool.mutmut]
source_paths = ["methods/"]
only_mutate = ["methods/$module.py"]
also_copy = ["bench/", "dearicl/", "reports/", "configs/"]
pytest_add_cli_args_test_selection = [$tests]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]
# a test's module-scoped fit is set up again for each mutant: minutes, not the test's own seconds
timeout_constant = 300.0
EOF
  echo "mutating methods/$module.py against: $tests"
  began=$(date +%s)
  "$MUTMUT" run --max-children 2 > mutmut.log 2>&1 || true
  seconds=$(( $(date +%s) - began ))
  "$MUTMUT" results --all true > results.txt 2>&1 || true
  "$PY" - "$module" "$seconds" "$OUT" "$MUTMUT" <<'EOF'
import subprocess, sys, collections, datetime
from pathlib import Path
module, seconds, out, mutmut = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
status = {}
for line in Path("results.txt").read_text().splitlines():
    name, sep, state = line.strip().rpartition(": ")
    if sep and name.startswith("methods."):
        status[name] = state
counts = collections.Counter(status.values())
tested = sum(v for k, v in counts.items() if k not in ("no tests", "skipped", "not checked"))
killed = counts["killed"] + counts["timeout"]
rate = f"{100 * killed / tested:.0f}%" if tested else "n/a"
survivors = sorted(n for n, s in status.items() if s == "survived")
lines = [f"# Mutation testing: methods/{module}.py", "",
         f"{datetime.date.today()}, mutmut, {seconds // 60} min. Killed {killed} of {tested} tested mutants ({rate});"
         f" {counts['timeout']} of the kills are timeouts; {counts['no tests']} mutants no test reaches; "
         f"{counts['not checked']} not checked.", "", "| status | mutants |", "|---|---|"]
lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
lines += ["", f"## Survivors ({len(survivors)})", ""]
for name in survivors:
    diff = subprocess.run([mutmut, "show", name], capture_output=True, text=True).stdout.strip()
    lines += [f"### `{name}`", "", "```diff", diff, "```", ""]
(out / f"{module}.md").write_text("\n".join(lines) + "\n")
summary = out / "README.md"
head = ["# Mutation testing of the selectors", "",
        "`bash scripts/mutation.sh MODULE...` (mutmut on a scratch clone, against the behavioural tests of the",
        "selectors the module defines and its own test file). Kill rate = (killed + timeout) / tested; a survivor",
        "is a change no test notices (each module's file lists them with their diffs).", "",
        "| module | date | tested | killed | of which timeout | survived | no tests | kill rate | minutes |",
        "|---|---|---|---|---|---|---|---|---|"]
rows = [l for l in (summary.read_text().splitlines() if summary.exists() else []) if l.startswith("| `")]
rows = [r for r in rows if not r.startswith(f"| `{module}` ")]
rows.append(f"| `{module}` | {datetime.date.today()} | {tested} | {killed} | {counts['timeout']} | {len(survivors)} "
            f"| {counts['no tests']} | {rate} | {seconds // 60} |")
summary.write_text("\n".join(head + sorted(rows)) + "\n")
print(f"methods/{module}.py: killed {killed}/{tested} ({rate}), {len(survivors)} survivors -> {out / (module + '.md')}")
EOF
  cd "$ROOT"
  rm -rf "$work"
done
