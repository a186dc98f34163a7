"""Tables and the pulls-vs-eps-error figure of a SIMULATED bandit study (JSONs of `bench simulate`).

    python -m reports.simulated studies/bandit/*.json --out studies/bandit/tables.md --scatter studies/bandit/scatter.png

JSONs of the same family (say, one with the main methods and one with the ablations) are merged.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tabulate import tabulate

COLUMNS = ("runs", "pulls", "eps-error rate", "error rate", "simple regret", "coverage of rounds",
           "event at every round (95% lower)", "stops")
MODEL_STOP = "model-stop (not a certificate)"
NOT_JUDGED = "not judged (truth too coarse)"


def stops_label(row: dict) -> str:
    """The stops column. dearicl-pac runs made before its certified stop (their settings name no `stop`) and
    dearicl-pac-model stopped on the model's intervals: their "certified" is a model stop, never a certificate."""
    model_stop = row["method"].startswith("dearicl-pac") and row.get("settings", {}).get("stop", "model") == "model"
    return ", ".join(f"{MODEL_STOP if model_stop and k in ('certified', 'model-stop') else k} {v}"
                     for k, v in row["stopped_by"].items())


def event_label(row: dict) -> str:
    """Runs whose event held at every round (what the guarantee bounds), with its 95% lower bound; quantile-PAC's
    sampling misses beside it. Runs recorded before this was measured say so."""
    if "event_rate" not in row:
        return "not recorded" if row.get("coverage") is not None else "n/a"
    text = f"{row['event_rate']:.2f} ({row['event_rate_lcb95']:.3f})"
    if "sampling_miss_rate" in row:
        text += f"; sample missed top rho {row['sampling_miss_rate']:.2f}"
    return text


def _pm(mean, se, digits: int) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" + ("" if se is None or se != se else f" ± {se:.{digits}f}")


def by_family(paths: list[Path]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    results: dict[str, list[dict]] = {}
    envs: dict[str, dict] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        family = data["env"]["name"] + (", population" if data["env"].get("protocol") == "population" else "")
        env = envs.setdefault(family, dict(data["env"]))
        env["cs"] = env.get("cs") or data["env"].get("cs")  # only the certified methods' files carry it
        results.setdefault(family, []).extend(data["results"])
    return results, envs


def family_table(rows: list[dict]) -> str:
    calls = any(r.get("mean_calls") is not None for r in rows)  # recorded tables: the LLM calls a pull would cost
    body = []
    for r in rows:
        judged = r.get("judged", True)  # False: an estimated truth coarser than epsilon / 10
        body.append([r["method"], r["runs"], _pm(r["mean_pulls"], r["pulls_se"], 1)]
                    + ([_pm(r.get("mean_calls"), r.get("calls_se"), 0)] if calls else []) + [
                     (_pm(r["eps_error_rate"], r["eps_error_rate_se"], 2)
                      + (f" (95% bound {r['eps_error_ucb95']:.3f})" if r.get("eps_error_ucb95") is not None else ""))
                     if judged else NOT_JUDGED,
                     _pm(r["error_rate"], r.get("error_rate_se"), 2) if judged else NOT_JUDGED,
                     _pm(r["mean_simple_regret"], r["simple_regret_se"], 3),
                     _pm(r["coverage"], r.get("coverage_se"), 3) if judged else NOT_JUDGED,
                     event_label(r) if judged else NOT_JUDGED, stops_label(r)])
    # a SIMULATED population has no LLM: what it counts is the distinct (arm, query) rewards drawn
    calls_label = "distinct rewards" if any(r.get("simulated") for r in rows) else "LLM calls"
    headers = ("method", "runs", "pulls") + ((calls_label,) if calls else ()) + COLUMNS[2:]
    return tabulate(body, headers=headers, tablefmt="github")


def study_markdown(results: dict[str, list[dict]], envs: dict[str, dict]) -> str:
    recorded = any(env.get("recorded") for env in envs.values())
    lines = ["# Bandit study: SIMULATED families and RECORDED tables" if recorded else "# SIMULATED bandit study", "",
             "Every number from a SIMULATED family comes from simulated rewards with known truth "
             "(dearicl/testbeds.py), not from an LLM; each run is a new random instance. A RECORDED table replays "
             "real LLM rewards (bench table build) with exact truth, one instance for all runs. " if recorded else
             "Every number below comes from simulated rewards with known truth (dearicl/testbeds.py), not from an "
             "LLM. Each run of a family is a new random instance. ",
             "Mean ± standard error across runs; eps-error with its exact (Clopper-Pearson) 95% upper bound.", ""]
    for family, rows in results.items():
        env = envs[family]
        kind = "RECORDED" if env.get("recorded") else "SIMULATED"
        lines += [f"## {family} ({kind})", "",
                  f"m = {env['m']}, epsilon = {env['epsilon']}, delta = {env['delta']}, "
                  + ("" if env.get("recorded") else f"noise = {env['noise']}, ")
                  + f"arms = {env.get('n_arms')}, validation queries = {env.get('validation_pool') or env.get('n_val')}, "
                  f"seed = {env['seed']}" + (f", protocol = {env['protocol']}" if env.get("protocol") else "")
                  + (", the without-replacement sequences (wor) for the pool mean" if env.get("protocol") == "population"
                     else f", confidence sequence (lucb, dearicl-pac) = {env['cs']}" if env.get("cs") else ""), "",
                  family_table(rows), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.simulated", description=__doc__.splitlines()[0])
    p.add_argument("jsons", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True, help="markdown tables")
    p.add_argument("--scatter", type=Path, default=None, help="PNG: one pulls-vs-eps-error panel per family")
    args = p.parse_args(argv)
    results, envs = by_family(args.jsons)
    args.out.write_text(study_markdown(results, envs) + "\n")
    if args.scatter:
        from reports.plots import pulls_vs_eps_error

        pulls_vs_eps_error(results, args.scatter)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
