"""DEARICL's open knobs swept on a recorded reward table: how the stop round, calls, eps-error and regret depend on
each knob the paper leaves open (dearicl/surrogates.py lists them), and which settings, if any, stop after the
paper's 79-130 rounds.

    .venv/bin/python scripts/knob_sweep.py studies/tables/rules-gemma3-270m.npz --runs 50 --out studies/tables/sweeps/rules

One `bench simulate --env table:FILE --methods dearicl --neural ...` per setting (RECORDED rewards, exact truth),
every setting on the same runs (seeded validation draws); one knob moved at a time from the harness's defaults,
then the paper's own schedule with each knob. Writes sweep.json and sweep.md; resumes setting by setting, and within
a setting run by run (runs.jsonl holds each finished run: a row at l.782's 100 epochs a round outlasts a sitting).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAPER = "epochs_per_round=1,lr=0.0001"  # Algorithm 1 (l.396) and l.781
SETTINGS = {
    "defaults (N 256, eps_stab 1, b 1/2, c 1, dropout off, lr 1e-3 x 4 epochs)": "",
    "lr 0 (a network that cannot learn)": "lr=0.0",
    "N 16": "mc_passes=16", "N 64": "mc_passes=64", "N 1024": "mc_passes=1024",
    "eps_stab start 0.1": "stability_init=0.1", "eps_stab start 0": "stability_init=0.0",
    "b_a start 0.05": "bias_init=0.05", "b_a start 0": "bias_init=0.0",
    "c_t = 1/sqrt(t)": "width_schedule=inverse-sqrt", "c_t = sqrt(log(1+t))": "width_schedule=sqrt-log",
    "c = 4": "width_scale=4.0",
    "rho_hat = MC-dropout mean": "estimate=mc-mean",
    "paper schedule (1 epoch, lr 1e-4)": PAPER,
    "paper schedule + rho_hat MC mean": f"{PAPER},estimate=mc-mean",
    "paper schedule + c_t sqrt(log(1+t))": f"{PAPER},width_schedule=sqrt-log",
    "paper schedule + starts 0": f"{PAPER},stability_init=0.0,bias_init=0.0",
    "paper schedule + starts 0 + MC mean + c_t sqrt(log(1+t))":
        f"{PAPER},stability_init=0.0,bias_init=0.0,estimate=mc-mean,width_schedule=sqrt-log",
    "lr 1e-3 x 4 epochs + starts 0": "stability_init=0.0,bias_init=0.0",
}
# every setting the paper states (configs/paper.yaml has each line): K = |A| (l.1295), rho_hat the MC-dropout mean
# (l.1298) over one set of N passes a round (l.1296), Adam at lr 1e-4 with batch 16 (l.781-782), 20 items a pull (--n-val 20: l.808 / l.817); two readings of the
# training length, Algorithm 1's one epoch a round (l.396) and l.782's 100 epochs, each with every c_t schedule, since
# the paper calls c_t "annealed, user-specified" (l.1305) and states none
STATED = ("log_k=arms,estimate=mc-mean,mc_draws=per-round,lr=0.0001,batch_size=16,"
          "hidden=256x256x128x64")  # the network: l.858, l.1295
STATED_SETTINGS = {
    "K = |A| alone (l.1295; the harness's lr 1e-3 x 4 epochs)": "log_k=arms",
    **{f"stated, {epochs} a round (l.{line}), c_t {label}": f"{STATED},epochs_per_round={n},width_schedule={schedule}"
       for epochs, n, line in (("1 epoch", 1, 396), ("100 epochs", 100, 782))
       for label, schedule in (("constant", "constant"), ("1/sqrt(t)", "inverse-sqrt"), ("sqrt(log(1+t))", "sqrt-log"))},
}
# CASE under the same settings (items a pull, m, eps, delta, runs): the harness's and the script's setting
CASE_ROWS = ("case", "case-script")
PAPER_ROUNDS = (79, 130)  # AquaRAT and GSM8K (the paper's table of rounds, l.817)
PAPER_CASE_ROUNDS = {"AquaRAT": 238, "GSM8K": 510}  # l.817


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("table", type=Path)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--n-val", type=int, default=20, help="validation items a pull (configs/paper.yaml: 20)")
    p.add_argument("--budget", type=int, default=300, help="max pulls a run (the study's CASE cap: 300 pulls)")
    p.add_argument("--m", type=int, default=10, help="top-m size (the paper's m = 10)")
    p.add_argument("--challengers", type=int, default=5, help="|C_t| (the paper's 5)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", default=None, help="run only the settings whose label contains this text")
    p.add_argument("--skip", default=os.environ.get("SWEEP_SKIP"),
                   help="leave out the settings whose label contains this text (default: $SWEEP_SKIP), to run the "
                        "costly ones later: the sweep resumes setting by setting")
    p.add_argument("--settings", choices=["open", "stated"], default="open",
                   help="open: one open knob at a time; stated: every setting the paper states (and CASE beside it)")
    args = p.parse_args(argv)
    from bench.encoder import Encoder
    from bench.simulate import run

    encoder = Encoder()  # one for every setting: the table's texts are embedded once, not once a setting

    args.out.mkdir(parents=True, exist_ok=True)
    done_path = args.out / "sweep.json"
    done = json.loads(done_path.read_text()) if done_path.is_file() else {}
    settings = SETTINGS if args.settings == "open" else {**{name: None for name in CASE_ROWS}, **STATED_SETTINGS}
    for label, neural in settings.items():
        if (args.only and args.only not in label) or (args.skip and args.skip in label):
            continue
        if label in done and done[label]["neural"] == neural:
            continue  # a row run under other settings (an edited setting) is run again and replaced
        began = time.perf_counter()
        out = run(["--env", f"table:{args.table}", "--methods", label if neural is None else "dearicl", "--runs",
                   str(args.runs), "--n-val", str(args.n_val), "--budget", str(args.budget), "--m", str(args.m),
                   "--challengers", str(args.challengers), "--neural", neural or "", "--no-progress",
                   "--checkpoint", str(args.out / "runs.jsonl")], encoder=encoder)
        row = out["results"][0]
        # seconds: what its runs took, in whichever sitting each ran (a row taken back from the checkpoint took more
        # than this call's wall time)
        done[label] = {"neural": neural, "seconds": round(row["mean_seconds"] * args.runs, 1), "env": out["env"],
                       **{k: row.get(k) for k in ("mean_rounds", "rounds_se", "mean_pulls", "pulls_se", "mean_calls",
                                                  "eps_error_rate", "eps_error_ucb95", "mean_simple_regret",
                                                  "simple_regret_se", "coverage", "stopped_by", "rounds", "target",
                                                  "eps_error_pool_rate", "oracle_floor_pool", "settings")}}
        done_path.write_text(json.dumps(done, indent=1))
        print(f"{label}: rounds {row['mean_rounds']:.1f}, eps-error {row['eps_error_rate']:.2f} "
              f"(<= {row['eps_error_ucb95']:.2f}), {time.perf_counter() - began:.0f} s", flush=True)
    if done:  # in the settings' order, whichever order the rows ran in (side by side, --only)
        done = {**{k: done[k] for k in settings if k in done}, **{k: v for k, v in done.items() if k not in settings}}
        done_path.write_text(json.dumps(done, indent=1))
    write_markdown(done, args)
    return 0


def share_in_paper_range(rounds: list[int]) -> tuple[int, float, float]:
    """Runs stopping within the paper's 79-130 rounds, with the share's two-sided 95% Clopper-Pearson interval."""
    from statsmodels.stats.proportion import proportion_confint

    count = sum(PAPER_ROUNDS[0] <= x <= PAPER_ROUNDS[1] for x in rounds)
    lo, hi = proportion_confint(count, len(rounds), alpha=0.05, method="beta")
    return count, float(lo), float(hi)


def write_markdown(done: dict, args) -> None:
    from tabulate import tabulate

    if not done:
        return
    env = next(iter(done.values()))["env"]
    rows = []
    for label, r in done.items():
        in_range, lo_ci, hi_ci = share_in_paper_range(r["rounds"])
        rows.append([label, f"{r['mean_rounds']:.1f} ± {r['rounds_se']:.1f}", f"{min(r['rounds'])}-{max(r['rounds'])}",
                     f"{in_range}/{len(r['rounds'])} [{lo_ci:.2f}, {hi_ci:.2f}]", f"{r['mean_pulls']:.1f}",
                     f"{r['mean_calls']:.0f}", f"{r['eps_error_rate']:.2f} (≤ {r['eps_error_ucb95']:.2f})",
                     f"{r['mean_simple_regret']:.3f} ± {r['simple_regret_se']:.3f}",
                     "" if r.get("oracle_floor_pool") is None else
                     f"{r['eps_error_pool_rate']:.2f} (floor {r['oracle_floor_pool']:.2f})",
                     "" if r["coverage"] is None else f"{r['coverage']:.2f}",
                     ", ".join(f"{k} {v}" for k, v in sorted(r["stopped_by"].items()))])
    what = "open knobs" if args.settings == "open" else "settings as the paper states them"
    head = (f"# DEARICL's {what} on a RECORDED reward table\n\n`{args.table}`: task {env['task']}, model "
            f"{env['model']}, {env['n_arms']} arms of k = {env['k']}, {env['n_val']} validation items a pull drawn per "
            f"run from {env['validation_pool']}, m = {env['m']}, eps = {env['epsilon']}, delta = {env['delta']}, "
            f"{env['runs']} runs per setting, at most {args.budget} pulls. Targets: eps-error, regret and coverage "
            f"against the fixed set's exact means (the items pulled: what the gap rule estimates); beside them "
            f"eps-error against the whole validation pool, with its floor (the eps-error of an oracle that knows "
            f"each arm's exact mean on the items pulled). eps-error: share of runs whose top m holds an arm more "
            f"than eps below the true m-th best, with its one-sided 95% Clopper-Pearson bound. The paper reports "
            f"{PAPER_ROUNDS[0]} (AquaRAT) and {PAPER_ROUNDS[1]} (GSM8K) DEARICL rounds and CASE's "
            f"{PAPER_CASE_ROUNDS['AquaRAT']} and {PAPER_CASE_ROUNDS['GSM8K']} (l.817); 'in 79-130' counts the runs "
            f"that stopped within that range, with the share's two-sided 95% Clopper-Pearson interval.\n\n")
    table = tabulate(rows, ["setting", "stop round (mean ± se)", "range", "in 79-130 [95% CI]", "pulls", "calls",
                            "eps-error vs fixed set (95% bound)", "simple regret", "eps-error vs pool (floor)",
                            "coverage", "stopped by"], tablefmt="github", disable_numparse=True)
    (args.out / "sweep.md").write_text(head + table + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
