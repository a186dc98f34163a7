#!/usr/bin/env bash
# Issue 57's tuning and measurement of LUCB++'s delta split (--upper-share) and the per-query mixture's weight
# (--mixture-weight), as pre-registered in studies/bandit/certification/PREREGISTRATION.md.
#   bash scripts/certification_tuning.sh tune      # nonlinear at --seed 7, 40 runs, lucb-pp-wider at 9 (S, W) pairs
#   bash scripts/certification_tuning.sh measure   # the chosen pair on the six families, --seed 0, 100 runs
#   bash scripts/certification_tuning.sh tables    # the chosen pair on the recorded tables, as their certified cores ran
#   bash scripts/certification_tuning.sh report    # the pre-registered endpoint per family: OUT/MEASURED.md
# The second pre-registration (same file, its second section) tunes on every family, then measures as the first:
#   OUT=studies/bandit/certification/tuning-2 bash scripts/certification_tuning.sh tune-all   # then measure, tables, report
# The third (its third section) fixes the plug-in sequence's setting in advance, with no tuning stage:
#   OUT=studies/bandit/certification/plugin bash scripts/certification_tuning.sh plugin      # then measure, tables, report
# Parts whose JSON exists are skipped (a stopped run resumes). OUT=DIR (default studies/bandit/certification/tuning).
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 BENCH_DATA_DIR="${BENCH_DATA_DIR:-$PWD/../shared/data}"
OUT=${OUT:-studies/bandit/certification/tuning}
mkdir -p "$OUT"
sim() {  # name, runs, then bench simulate's arguments
  local name=$1 runs=$2; shift 2
  [[ -s $OUT/$name.json ]] && return 0
  .venv/bin/python -m bench simulate "$@" --runs "$runs" --budget "${BUDGET:-20000}" --no-progress --out "$OUT/$name.json.part" \
    > "$OUT/$name.txt" 2>&1
  mv "$OUT/$name.json.part" "$OUT/$name.json"
}
knobs() {  # CHOSEN: "S W" (lucb-pp-wider), or "S W LOOKAHEAD" (lucb-pp-plugin): the method and its arguments
  read -r s w lookahead < "$OUT/CHOSEN"
  method=lucb-pp-wider; args=(--upper-share "$s")
  [[ $w != default ]] && args+=(--mixture-weight "$w")
  if [[ -n ${lookahead:-} ]]; then method=lucb-pp-plugin; args+=(--lookahead "$lookahead"); fi
  return 0
}
case ${1:-} in
  plugin)  # the third pre-registration's setting, fixed before any run: S 0.8, lookahead 2 (no tuning)
    echo "0.8 default 2" > "$OUT/CHOSEN"
    ;;
  tune)
    for s in 0.5 0.65 0.8; do for w in default 0.8 0.9; do
      weight=(); [[ $w != default ]] && weight=(--mixture-weight "$w")
      sim "tune-s$s-w$w" 40 --env nonlinear --seed 7 --methods lucb-pp-wider --upper-share "$s" "${weight[@]}"
    done; done
    .venv/bin/python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = []
for path in sorted(out.glob("tune-*.json")):
    r = json.loads(path.read_text())["results"][0]
    s, w = path.stem.split("-")[1][1:], path.stem.split("-")[2][1:]
    ok = r["eps_error_rate"] == 0 and r.get("event_rate") == 1.0
    rows.append((not ok, r["mean_pulls"], float(s), w != "default", s, w, r))
    print(f"S {s:>4}  W {w:>7}  pulls {r['mean_pulls']:8.1f}  eps-error {r['eps_error_rate']:.2f}  "
          f"event {r.get('event_rate')}")
best = sorted(rows, key=lambda x: x[:4])[0]
(out / "CHOSEN").write_text(f"{best[4]} {best[5]}\n")
print(f"chosen (the pre-registered rule): S {best[4]}, W {best[5]}")
PY
    ;;
  tune-all)  # the six families at --seed 7, 40 runs: lucb once, lucb-pp-wider at 16 (S, W) pairs
    for fam in difficulty nonlinear slots pairwise order latent; do
      eps=(); [[ $fam == difficulty ]] && eps=(--epsilon 0.03)
      sim "lucb-$fam" 40 --env "$fam" "${eps[@]}" --seed 7 --methods lucb
      for s in 0.5 0.65 0.8 0.9; do for w in 0.3 0.45 default 0.8; do
        weight=(); [[ $w != default ]] && weight=(--mixture-weight "$w")
        sim "tune-$fam-s$s-w$w" 40 --env "$fam" "${eps[@]}" --seed 7 --methods lucb-pp-wider --upper-share "$s" "${weight[@]}"
      done; done
    done
    .venv/bin/python - "$OUT" <<'PY' | tee "$OUT/TUNING.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
families = ("difficulty", "nonlinear", "slots", "pairwise", "order", "latent")
lucb = {f: json.loads((out / f"lucb-{f}.json").read_text())["results"][0]["mean_pulls"] for f in families}
rows = []
for s in ("0.5", "0.65", "0.8", "0.9"):
    for w in ("0.3", "0.45", "default", "0.8"):
        runs = {f: json.loads((out / f"tune-{f}-s{s}-w{w}.json").read_text())["results"][0] for f in families}
        ok = all(r["eps_error_rate"] == 0 and r.get("event_rate") == 1.0 for r in runs.values())
        ratios = {f: runs[f]["mean_pulls"] / lucb[f] for f in families}
        worst = max(ratios.values())
        w_order = (0.0,) if w == "default" else (1.0, -float(w))  # ties: the default W, then the larger W
        rows.append((not ok, round(worst, 12), float(s), w_order, s, w))
        print(f"S {s:>4}  W {w:>7}  largest ratio {worst:.3f}  " + "  ".join(f"{f} {ratios[f]:.3f}" for f in families)
              + ("" if ok else "  (an eps-error or a missed event: excluded)"))
best = sorted(rows)[0]
(out / "CHOSEN").write_text(f"{best[4]} {best[5]}\n")
print(f"chosen (the second pre-registration's rule): S {best[4]}, W {best[5]}")
PY
    ;;
  measure)
    knobs
    sim measure-difficulty 100 --env difficulty --epsilon 0.03 --seed 0 --methods "$method" "${args[@]}"
    for fam in nonlinear slots pairwise order latent; do
      sim "measure-$fam" 100 --env "$fam" --seed 0 --methods "$method" "${args[@]}"
    done
    ;;
  tables)  # each table's certified cores' protocol (scripts/table_study.sh): 100 runs, 20 items a pull, 2,000 pulls
    knobs
    for table in studies/tables/*.npz; do
      name=$(basename "$table" -gemma3-270m.npz)
      BUDGET=2000 sim "measure-table-$name" 100 --env "table:$table" --n-val 20 --seed 0 --methods "$method" "${args[@]}"
    done
    ;;
  report)  # the pre-registered endpoint per family: paired ratio to the committed lucb runs of the same instances
    .venv/bin/python - "$OUT" <<'PY' | tee "$OUT/MEASURED.md"
import importlib.util, json, sys
from pathlib import Path
out = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location("ct", "scripts/certification_tables.py")
ct = importlib.util.module_from_spec(spec); spec.loader.exec_module(ct)
s, w, *lookahead = (out / "CHOSEN").read_text().split()
tuned_on = "the six families' seed-7 instances" if (out / "lucb-difficulty.json").exists() else "nonlinear seed 7"
method, label = ("lucb-pp-plugin", "plug-in") if lookahead else ("lucb-pp-wider", "tuned")
setting = (f"S {s}, lookahead {lookahead[0]} (fixed in advance, no tuning)" if lookahead
           else f"S {s}, W {w} (chosen on {tuned_on})")
print(f"# {method} with {setting} against lucb, 100 instances a family\n")
print("Pre-registered goal per family: the paired ratio's 95% interval below 0.75, 0/100 eps-error, and the every-round "
      "event rate's 95% lower bound >= 0.95 (studies/bandit/certification/PREREGISTRATION.md).\n")
print(f"| family | lucb pulls | {label} {method} pulls | ratio (95% BCa) | eps-error | every-round event (95% lower) | goal met |")
print("|---|---|---|---|---|---|---|")
for fam in ("difficulty", "nonlinear", "slots", "pairwise", "order", "latent"):
    part = out / f"measure-{fam}.json"
    if not part.exists():
        print(f"| {fam} | | not run | | | | |"); continue
    ours = json.loads(part.read_text())["results"][0]
    base = next(r for r in json.loads(Path(f"studies/bandit/certification/{fam}.json").read_text())["results"]
                if r["method"] == "lucb")
    ratio = ct.paired_ratio(ours, base)
    high = float(ratio.split("(")[1].split("-")[1].rstrip(")")) if "(" in ratio else float(ratio)
    errors = round(ours["eps_error_rate"] * ours["runs"])
    met = high <= 0.75 and errors == 0 and ours["event_rate_lcb95"] >= 0.95
    print(f"| {fam} | {base['mean_pulls']:.0f} | {ours['mean_pulls']:.0f} | {ratio} | {errors}/{ours['runs']} | "
          f"{ours['event_rate']:.2f} ({ours['event_rate_lcb95']:.3f}) | {'yes' if met else 'no'} |")
tables = sorted(out.glob("measure-table-*.json"))
if tables:
    print("\nOn the RECORDED tables (not pre-registered as an endpoint: measured after the families), against `lucb` and "
          "the default `lucb-pp-wider` of each table's certified cores (`<table>/certified-fixed-set.json`, the same "
          "100 seeded fixed sets, 20 items a pull, at most 2,000 pulls):\n")
    print(f"| table | lucb pulls | default lucb-pp-wider: ratio | {label} {method} pulls | ratio (95% BCa) | eps-error "
          "| every-round event (95% lower) |")
    print("|---|---|---|---|---|---|---|")
for part in tables:
    name = part.stem.removeprefix("measure-table-")
    ours = json.loads(part.read_text())["results"][0]
    rows = {r["method"]: r for r in json.loads(Path(f"studies/tables/{name}-gemma3-270m/certified-fixed-set.json")
                                               .read_text())["results"]}
    errors = round(ours["eps_error_rate"] * ours["runs"])
    print(f"| {name} | {rows['lucb']['mean_pulls']:.0f} | {ct.paired_ratio(rows['lucb-pp-wider'], rows['lucb'])} | "
          f"{ours['mean_pulls']:.0f} | {ct.paired_ratio(ours, rows['lucb'])} | {errors}/{ours['runs']} | "
          f"{ours['event_rate']:.2f} ({ours['event_rate_lcb95']:.3f}) |")
PY
    ;;
  *) echo "usage: $0 tune|tune-all|plugin|measure|tables|report" >&2; exit 2 ;;
esac
