#!/usr/bin/env bash
# Mutation testing of the selectors (mutmut): where is the test suite blind?
#
#   bash scripts/mutation.sh                      # methods/knn.py (knn, mmr) and methods/case_dynamic.py
#   bash scripts/mutation.sh lens explora udr     # other modules of methods/ (one mutmut run each)
#   bash scripts/mutation.sh dearicl/bandit       # a module of dearicl/ (or of bench/ or reports/: the same rules)
#   MUTATION_WORKDIR=DIR MUTATION_SECONDS=3600 bash scripts/mutation.sh udr   # in chunks: an hour, then resume
#   MUTATION_WORKDIR=DIR MUTATION_RERUN_SURVIVORS=1 bash scripts/mutation.sh udr   # survivors again, after new tests
#   MUTATION_WORKDIR=DIR MUTATION_SAMPLE=150 bash scripts/mutation.sh udr   # a seeded random sample of the rest
#   MUTATION_TEST_FILES="tests/test_confidence.py tests/test_paired.py" bash scripts/mutation.sh dearicl/confidence
#   MUTATION_TEST_FILES="tests/test_bandit_base.py" bash scripts/mutation.sh methods/bandit_base   # the listed files only
#                                                (a methods/ module otherwise runs the tests naming its selectors)
#   MUTATION_TIMEOUT=60 bash scripts/mutation.sh dearicl/pac   # a mutant's CPU limit: 2 x (its tests' seconds + 60)
#                                                 (default 30 for dearicl/, 300 for methods/: a model fit per mutant)
#
# MUTATION_WORKDIR keeps each module's scratch clone in DIR/<module> and reuses it: a second run tests only the
# mutants the first left undecided (mutmut keeps its results), so a module whose mutants retrain a model (udr: ~4 a
# minute) is done in chunks of MUTATION_SECONDS, each writing a report with its "not checked" count. Delete the
# folder to start again from a new HEAD (the kept clone is the commit of the first chunk).
# A module too slow to finish is estimated: MUTATION_SAMPLE=N tests N more mutants drawn at random (seeded by the
# module's name) from those the chunks left undecided, and the report gives the module's kill rate as the decided
# mutants plus the sample's rate over the rest, with a Wilson 95% interval. MUTATION_RERUN_SURVIVORS=1 runs the
# survivors again against the clone's tests, refreshed from this checkout (after a test was added for them).
#
# Each module is mutated in a scratch clone of HEAD (nothing here is touched), against the tests that exercise
# it: for methods/X.py the non-slow tests naming the selectors it defines (pytest -k) in the behavioural tests
# (tests/test_selector_behaviour.py) and the selector unit-test files, for dearicl/X.py (bench/X.py, reports/X.py)
# every test file that imports it. The kill rates and every surviving mutant (its
# diff) go to studies/mutation/<module>.md and a summary row to studies/mutation/README.md. A surviving mutant is
# a change of the code that no test notices: read it, and either add a test that fails on it or say why it is
# equivalent (changes nothing observable). Too slow for CI (minutes per module on 2 cores).
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
MUTMUT="$ROOT/.venv/bin/mutmut"
[[ -x "$MUTMUT" ]] || { echo "error: mutmut is not installed: .venv/bin/pip install -e '.[mutation]'" >&2; exit 2; }
MODULES=("$@")
[[ ${#MODULES[@]} -gt 0 ]] || MODULES=(knn case_dynamic)
# BENCH_FRESH_FITS: the behavioural tests fit per test, not once per module, so that mutmut (which runs a mutant
# against the tests that called its function) credits every test with its fit, not only the first one
export BENCH_FRESH_FITS=1
# one torch thread per mutmut worker: two workers on 2 cores, without thread pools fighting over them
export BENCH_DATA_DIR="${BENCH_DATA_DIR:-$ROOT/../shared/data}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
OUT="$ROOT/studies/mutation"
mkdir -p "$OUT"

for module in "${MODULES[@]}"; do
  case "$module" in
    dearicl/*|bench/*|reports/*) package="${module%%/*}"; module="${module#*/}"; timeout_constant=${MUTATION_TIMEOUT:-30} ;;
    *) package=methods; module="${module#methods/}"; timeout_constant=${MUTATION_TIMEOUT:-300} ;;
  esac
  module="${module%.py}"
  [[ -f "$ROOT/$package/$module.py" ]] || { echo "error: no $package/$module.py" >&2; exit 2; }
  if [[ $package == methods && -n ${MUTATION_TEST_FILES:-} ]]; then
    tests=$(printf '"%s", ' $MUTATION_TEST_FILES); tests="${tests%, }"  # the listed files, whole (a glue module's unit tests)
  elif [[ $package == methods ]]; then
    # the registered names of the selectors the module defines select their behavioural tests (-k)
    names=$(cd "$ROOT" && "$PY" - "$module" <<'EOF'
import inspect, sys
from methods.base import available
here = f"methods.{sys.argv[1]}"
mine = [n for n, c in available().items()
        if "@" not in n and any(inspect.getmodule(b).__name__ == here for b in c.__mro__)]
print(" or ".join(sorted({form for n in mine for form in (n, n.replace("-", "_"))})))  # ids and test names
EOF
)
    [[ -n "$names" ]] || names="$module"
    # the behavioural tests and the selector unit-test files, each narrowed to the tests naming these selectors
    files=$(cd "$ROOT" && ls tests/test_selector_behaviour.py tests/test_selectors.py tests/test_bandit_selectors.py \
            tests/test_lens_explora.py tests/test_ltr.py tests/test_udr.py tests/test_bridge.py tests/test_retrievers.py \
            tests/test_ceil.py tests/test_cone_mdl.py tests/test_set_bsr.py tests/test_epr.py \
            tests/test_dq_lore.py tests/test_influence.py 2>/dev/null)
    tests="$(printf '"%s", ' $files)\"-m\", \"not slow\", \"-k\", \"${names}\""
  else
    # MUTATION_TEST_FILES narrows the importers to the listed files (a module whose importers include slow tests)
    files=${MUTATION_TEST_FILES:-$(cd "$ROOT" && grep -lE "(from|import) $package(\.$module\b| import .*\b$module\b)" tests/test_*.py || true)}
    [[ -n "$files" ]] || { echo "error: no test file imports $package.$module" >&2; exit 2; }
    tests=$(printf '"%s", ' $files); tests="${tests%, }"
  fi
  if [[ -n ${MUTATION_WORKDIR:-} ]]; then work="$MUTATION_WORKDIR/$package.$module"; else work="$(mktemp -d)"; fi
  fresh=0
  if [[ ! -d $work/repo ]]; then
    fresh=1
    mkdir -p "$work"
    git -C "$ROOT" clone -q "$ROOT" "$work/repo"
  fi
  cd "$work/repo"
  if (( fresh )); then
  ln -s "$ROOT/.venv" .venv
  cat >> pyproject.toml <<EOF

[tool.mutmut]
source_paths = ["$package/"]
only_mutate = ["$package/$module.py"]
# the committed studies and docs whole: reports/ and bench/ tests read them (a page rebuilt from its runs)
also_copy = ["bench/", "methods/", "dearicl/", "reports/", "configs/", "scripts/", "studies/", "docs/", "README.md"]
pytest_add_cli_args_test_selection = [$tests]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]
# mutmut kills a mutant after 2 x multiplier x (its tests' measured seconds + constant) CPU seconds; its default
# multiplier of 15 left a hung mutant (a loop that never ends) running for hours and stalled a whole chunk behind
# it. The constant covers a methods/ test's module-scoped fit, set up again for each mutant (minutes)
timeout_multiplier = 1.0
timeout_constant = $timeout_constant
# torch's thread pools do not survive a fork of a process that used them (a forked worker hangs until the
# timeout, which would count as a kill): fork each worker from a server that never ran a test
process_isolation = "forkserver"
forkserver_warmup = "none"
EOF
  fi
  echo "mutating $package/$module.py against: $tests (clone of $(git log -1 --format=%h))"
  began=$(date +%s)
  # a chunk's time limit (0: none); a stopped run keeps its decided mutants for the next
  names=()
  if [[ -n ${MUTATION_SAMPLE:-}${MUTATION_RERUN_SURVIVORS:-} ]]; then
    (( ! fresh )) || { echo "error: MUTATION_SAMPLE and MUTATION_RERUN_SURVIVORS need a chunk run first (MUTATION_WORKDIR)" >&2; exit 2; }
    rm -rf tests mutants/tests && cp -r "$ROOT/tests" tests && cp -r "$ROOT/tests" mutants/tests  # the tests as they are now
    "$MUTMUT" results --all true > results.txt 2>&1 || true
    mapfile -t names < <("$PY" - "$package.$module" "${MUTATION_SAMPLE:-0}" "${MUTATION_RERUN_SURVIVORS:-}" <<'EOF'
import random, sys
from pathlib import Path
module, n, rerun = sys.argv[1], int(sys.argv[2]), sys.argv[3]
status = dict(line.strip().rsplit(": ", 1) for line in Path("results.txt").read_text().splitlines() if ": " in line)
names = sorted(k for k, v in status.items() if v == "survived") if rerun else []
if n:
    sample = Path("sample.txt")  # the population (undecided when first sampled), shuffled once; a prefix is tested
    if not sample.exists():
        population = sorted(k for k, v in status.items() if v == "not checked")
        random.Random(module).shuffle(population)
        sample.write_text("\n".join(population) + "\n")
    order = sample.read_text().split()
    names += [k for k in order if status.get(k) == "not checked"][:n]  # the next n undecided, in the drawn order
print("\n".join(names))
EOF
)
    echo "testing ${#names[@]} named mutants"
  fi
  timeout -k 60 "${MUTATION_SECONDS:-0}" "$MUTMUT" run --max-children "${MUTATION_CHILDREN:-2}" "${names[@]}" >> mutmut.log 2>&1 || true
  seconds=$(( $(date +%s) - began ))
  "$MUTMUT" results --all true > results.txt 2>&1 || true
  "$PY" - "$package/$module" "$seconds" "$OUT" "$MUTMUT" <<'EOF'
import subprocess, sys, collections, datetime
from pathlib import Path
module, seconds, out, mutmut = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
status = {}
for line in Path("results.txt").read_text().splitlines():
    name, sep, state = line.strip().rpartition(": ")
    if sep and name.startswith(module.replace("/", ".") + "."):  # this module's mutants, whatever its package
        status[name] = state
counts = collections.Counter(status.values())
tested = sum(v for k, v in counts.items() if k not in ("no tests", "skipped", "not checked"))
killed = counts["killed"] + counts["timeout"]
rate = f"{100 * killed / tested:.0f}%" if tested else "n/a"
survivors = sorted(n for n, s in status.items() if s == "survived")
report = out / (module.replace("/", ".") + ".md")
lines = [f"# Mutation testing: {module}.py", "",
         f"{datetime.date.today()}, mutmut, {seconds // 60} min. Killed {killed} of {tested} tested mutants ({rate});"
         f" {counts['timeout']} of the kills are timeouts; {counts['no tests']} mutants no test reaches; "
         f"{counts['not checked']} not checked.", ""]
if Path("sample.txt").exists():  # stratified: the decided mutants outside the population, plus the sample's rate
    from statsmodels.stats.proportion import proportion_confint
    population = set(Path("sample.txt").read_text().split())
    decided = {k: v for k, v in status.items() if v not in ("no tests", "skipped", "not checked")}
    drawn = [v for k, v in decided.items() if k in population]
    rest = [v for k, v in decided.items() if k not in population]
    hit = lambda vs: sum(v in ("killed", "timeout") for v in vs)
    if drawn and counts["not checked"]:  # a sample that reached every undecided mutant is the whole module
        low, high = proportion_confint(hit(drawn), len(drawn), alpha=0.05, method="wilson")
        whole = lambda p: (hit(rest) + len(population) * p) / (len(rest) + len(population))
        estimate = whole(hit(drawn) / len(drawn))
        rate = f"est. {100 * estimate:.0f}% ({100 * whole(low):.0f}-{100 * whole(high):.0f}%)"
        lines += [f"Estimated from a sample: {len(rest)} mutants decided in full ({hit(rest)} killed); of the "
                  f"{len(population)} left undecided, a seeded random sample of {len(drawn)} tested, {hit(drawn)} killed "
                  f"({100 * hit(drawn) / len(drawn):.0f}%, Wilson 95% {100 * low:.0f}-{100 * high:.0f}%). Module kill "
                  f"rate: {rate[5:]}.", ""]
lines += ["| status | mutants |", "|---|---|"]
lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
lines += ["", f"## Survivors ({len(survivors)})", ""]
for name in survivors:
    diff = subprocess.run([mutmut, "show", name], capture_output=True, text=True).stdout.strip()
    lines += [f"### `{name}`", "", "```diff", diff, "```", ""]
report.write_text("\n".join(lines) + "\n")
summary = out / "README.md"
head = ["# Mutation testing of the selectors", "",
        "`bash scripts/mutation.sh MODULE...` (mutmut on a scratch clone, against the non-slow tests naming the",
        "selectors a methods/ module defines, behavioural and unit; every test file importing a dearicl/ module). Kill rate = (killed + timeout) / tested; a survivor",
        "is a change no test notices (each module's file lists them with their diffs).", "",
        "| module | date | tested | killed | of which timeout | survived | no tests | kill rate | minutes |",
        "|---|---|---|---|---|---|---|---|---|"]
rows = [l for l in (summary.read_text().splitlines() if summary.exists() else []) if l.startswith("| `")]
rows = [r for r in rows if not r.startswith(f"| `{module}` ")]
rows.append(f"| `{module}` | {datetime.date.today()} | {tested} | {killed} | {counts['timeout']} | {len(survivors)} "
            f"| {counts['no tests']} | {rate} | {seconds // 60} |")
summary.write_text("\n".join(head + sorted(rows)) + "\n")
print(f"{module}.py: killed {killed}/{tested} ({rate}), {len(survivors)} survivors -> {report}")
EOF
  cd "$ROOT"
  [[ -n ${MUTATION_WORKDIR:-} ]] || rm -rf "$work"
done
