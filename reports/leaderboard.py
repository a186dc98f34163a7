"""The suite's leaderboard: every selector of `--methods all` on the tasks with signal, several seeds, one table per
task (score and its 95% interval, the paired test against random few-shot with Holm's correction, selection calls,
selection and inference time) and a plot of accuracy against selection cost.

Two sources, over the same test items (the reward tables' 200, `--split-seed 0`):
- live runs, `runs/<task>-seed<S>/` (scripts/leaderboard.sh): the selectors that do not choose among fixed arms;
- replays from the recorded reward table, `replays/<task>/rows.jsonl` (`bench table replay`): the bandit, LTR and
  EXPLORA selectors, fitted on recorded rewards; their per-item test scores are the table's recorded answers for the
  arm each chose.

    python -m reports.leaderboard studies/leaderboard-2026-11   # README.md, leaderboard.json, accuracy_vs_cost.png
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tabulate import tabulate

from reports.plots import accuracy_vs_calls
from reports.stats import bootstrap_seeds_items, holm

TASKS = ("rules", "sst2", "trec", "agnews")
BASELINE = "few-shot"
ALPHA = 0.05


@dataclass
class Cell:
    """One selector on one task: per seed, each test item's score, and what the fit cost."""

    method: str
    source: str  # "live" or "table"
    scores: dict[int, dict[str, float]] = field(default_factory=dict)  # seed -> item id -> score
    calls: dict[int, int] = field(default_factory=dict)
    selection_seconds: dict[int, float] = field(default_factory=dict)
    inference_seconds: dict[int, float] = field(default_factory=dict)  # per item
    scale: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    metric_label: str = ""


def live_cells(study: Path, task: str) -> dict[str, Cell]:
    """Cells of the live runs `runs/<task>-seed<S>/`: finished (method, seed) pairs only."""
    cells: dict[str, Cell] = {}
    for folder in sorted((study / "runs").glob(f"{task}-seed*")):
        if not (folder / "results.json").is_file():
            continue
        seed = int(folder.name.rsplit("seed", 1)[1])
        results = json.loads((folder / "results.json").read_text())
        by_method: dict[str, dict[str, float]] = {}
        timed: dict[str, dict[str, tuple[float, float]]] = {}  # method -> item -> (select s, latency s)
        with (folder / "records.jsonl").open() as fh:
            for line in fh:
                record = json.loads(line)
                if record["task"] == task:
                    by_method.setdefault(record["method"], {})[record["item_id"]] = float(record["score"])
                    timed.setdefault(record["method"], {})[record["item_id"]] = (
                        float(record.get("select_s") or 0.0), float(record.get("latency_s") or 0.0))
        full = max((r.get("n") or 0 for r in results["runs"] if r["task"] == task), default=0)
        for run in results["runs"]:
            if run["task"] != task or (run.get("n") or 0) < full:  # a cell cut short is not a result yet
                continue
            cell = cells.setdefault(run["method"], Cell(run["method"], "live"))
            cell.metric_label = run.get("metric_label") or run["metric"]
            if run.get("error"):
                cell.errors.append(f"seed {seed}: {run['error']}")
                continue
            if run.get("score") is None or run["method"] not in by_method:
                continue
            cell.scores[seed] = by_method[run["method"]]
            cell.calls[seed] = int(run["llm_calls"]["selection"])
            # a per-query selector's select() (TopK+ConE's, MDL's LLM calls) is selection time, though results.json
            # times it inside each item's latency: moved from inference to selection here, from the records
            per_item = timed.get(run["method"], {}).values()
            cell.selection_seconds[seed] = float(run.get("selection_seconds") or 0.0) + sum(s for s, _ in per_item)
            cell.inference_seconds[seed] = (float(np.median([max(0.0, t - s) for s, t in per_item]))
                                            if any(s for s, _ in per_item)
                                            else float(run.get("inference_seconds_per_query") or 0.0))
            cell.scale = run.get("scale") or cell.scale
            cell.warnings += [w for w in run.get("warnings", []) if w not in cell.warnings]
    return cells


def table_cells(study: Path, task: str, table: Path, seeds: set[int]) -> dict[str, Cell]:
    """Cells replayed from the reward table: each test item's recorded score under the arm the fit chose for it."""
    rows_path = study / "replays" / task / "rows.jsonl"
    if not rows_path.is_file() or not table.is_file():
        return {}
    from bench.reward_table import RewardTable

    recorded = RewardTable.load(table)
    test = [i for i, split in enumerate(recorded.split) if split == "test"]
    ids = [recorded.item_ids[i] for i in test]
    metric = recorded.metric[:, test].mean(axis=-1) if recorded.metric.ndim == 3 else recorded.metric[:, test]
    from bench.tasks import make_task

    named = make_task(task)
    label = named.metric_label or named.metric_name
    cells: dict[str, Cell] = {}
    for line in rows_path.read_text().splitlines():
        row = json.loads(line)
        if row["seed"] not in seeds or ":" in row["method"]:  # a variant (dearicl-static:paper) is not a zoo entry
            continue
        cell = cells.setdefault(row["method"], Cell(row["method"], "table", metric_label=label))
        chosen = row["chosen"]
        cell.scores[row["seed"]] = {item: float(metric[int(arm), j]) for j, (item, arm) in enumerate(zip(ids, chosen))}
        cell.calls[row["seed"]] = int(row["calls"])
        cell.selection_seconds[row["seed"]] = float(row["fit_seconds"])
        cell.scale = row.get("scale") or cell.scale
        cell.warnings += [w for w in row.get("warnings", []) if w not in cell.warnings]
    return cells


def matrix(cell: Cell, seeds: list[int], items: list[str]) -> np.ndarray:
    return np.array([[cell.scores[s][i] for i in items] for s in seeds], dtype=float)


def task_rows(cells: dict[str, Cell], resamples: int = 10_000, baseline: str = BASELINE) -> list[dict]:
    """One row per selector: the mean over seeds and items with its two-way bootstrap 95% interval (seeds and
    items resampled together), and the paired two-way bootstrap test against random few-shot (`baseline`) on the
    seeds and items both have, Holm-adjusted over the selectors of the task."""
    base = cells.get(baseline)
    rows = []
    for name, cell in cells.items():
        seeds = sorted(cell.scores)
        row = {"method": name, "source": cell.source, "seeds": seeds, "errors": cell.errors,
               "warnings": cell.warnings, "scale": cell.scale, "metric_label": cell.metric_label}
        if seeds:
            items = sorted(set.intersection(*(set(cell.scores[s]) for s in seeds)))
            values = matrix(cell, seeds, items)
            ci = bootstrap_seeds_items(values, np.zeros_like(values), margin=0.0, resamples=resamples)["ci95"]
            row.update(score=float(values.mean()), ci_low=ci[0], ci_high=ci[1], n_items=len(items),
                       selection_calls=float(np.mean(list(cell.calls.values()))),
                       selection_seconds=float(np.mean(list(cell.selection_seconds.values()))),
                       inference_seconds=(float(np.mean(list(cell.inference_seconds.values())))
                                          if cell.inference_seconds else None))
            common = sorted(set(seeds) & set(base.scores)) if base is not None and name != baseline else []
            shared = sorted(set.intersection(*(set(cell.scores[s]) & set(base.scores[s]) for s in common))) \
                if common else []
            if shared:
                test = bootstrap_seeds_items(matrix(cell, common, shared), matrix(base, common, shared), margin=0.05,
                                             resamples=resamples)
                row.update(diff=test["diff"], p=test["p"], paired_seeds=common, paired_items=len(shared))
        rows.append(row)
    adjusted = holm({r["method"]: r["p"] for r in rows if "p" in r})
    for row in rows:
        if "p" in row:
            row["p_holm"] = adjusted[row["method"]]
            row["verdict"] = ("beats random" if row["p_holm"] < ALPHA and row["diff"] > 0 else
                              "below random" if row["p_holm"] < ALPHA and row["diff"] < 0 else "not significant")
    return sorted(rows, key=lambda r: -r.get("score", -1.0))


def _seconds(value: float | None) -> str:
    if value is None:
        return "— (recorded)"
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s" if value < 600 else f"{value / 60:.0f} min"


def _scale(scale: dict) -> str:
    return "; ".join(f"{k}: {v}" for k, v in scale.items())


def named(row: dict, seeds: list[int]) -> str:
    """A selector in the page's verdict line, with the seeds its test paired where that is not every seed."""
    paired = row.get("paired_seeds", [])
    if len(paired) >= len(seeds):
        return row["method"]
    return f"{row['method']} (seed{'s' if len(paired) > 1 else ''} {', '.join(map(str, paired))} only)"


def markdown_table(rows: list[dict], all_methods: list[str], n_seeds: int) -> str:
    out = []
    for row in rows:
        if "score" not in row:
            continue
        out.append([row["method"], "table" if row["source"] == "table" else "live",
                    f"{100 * row['score']:.1f} [{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]",
                    "—" if row["method"] == BASELINE else
                    (f"{100 * row['diff']:+.1f}" + ("" if row["paired_seeds"] == row["seeds"] else
                                                     f" (seed {', '.join(map(str, row['paired_seeds']))})")
                     if "diff" in row else "no paired seed"),
                    f"{row['p_holm']:.3g}" if "p_holm" in row else "—", row.get("verdict", "baseline"
                                                                                 if row["method"] == BASELINE else "—"),
                    f"{len(row['seeds'])}/{n_seeds}", f"{row['selection_calls']:.0f}",
                    _seconds(row["selection_seconds"]), _seconds(row["inference_seconds"]), _scale(row["scale"])])
    done = {r["method"] for r in rows if "score" in r}
    failed = {r["method"]: r["errors"] for r in rows if r["errors"] and r["method"] not in done}
    for method in all_methods:
        if method not in done:
            note = "failed: " + failed[method][0] if method in failed else "not run yet"
            out.append([method, "", note, "", "", "", f"0/{n_seeds}", "", "", "", ""])
    return tabulate(out, headers=["selector", "fitted", "score ×100 [95% CI]", "Δ vs few-shot ×100", "p (Holm)",
                                  "vs random few-shot", "seeds", "selection calls", "selection time",
                                  "inference s/item", "scale"], tablefmt="github")


def build(study: Path, tables: Path, tasks=TASKS, seeds=(0, 1, 2), resamples: int = 10_000) -> dict:
    """Every task's rows, and the zoo's method list (those without a row are listed as not run)."""
    from bench.runner import expand_methods

    all_methods = expand_methods(["all"])
    out = {"seeds": list(seeds), "tasks": {}, "methods": all_methods}
    for task in tasks:
        cells = live_cells(study, task)
        cells.update(table_cells(study, task, tables / f"{task}-gemma3-270m.npz", set(seeds)))
        for cell in cells.values():  # only the sweep's seeds
            for part in (cell.scores, cell.calls, cell.selection_seconds, cell.inference_seconds):
                for seed in [s for s in part if s not in seeds]:
                    del part[seed]
        out["tasks"][task] = task_rows(cells, resamples)
    return out


def write(study: Path, tables: Path, tasks=TASKS, seeds=(0, 1, 2), resamples: int = 10_000) -> Path:
    board = build(study, tables, tasks, seeds, resamples)
    (study / "leaderboard.json").write_text(json.dumps(board, indent=1, default=float) + "\n")
    header = (study / "HEADER.md").read_text() if (study / "HEADER.md").is_file() else "# Leaderboard\n"
    lines = [header.rstrip(), ""]
    plotted = []
    for task, rows in board["tasks"].items():
        label = next((r["metric_label"] for r in rows if r.get("metric_label")), "score")
        beats = [named(r, board["seeds"]) for r in rows if r.get("verdict") == "beats random"]
        below = [named(r, board["seeds"]) for r in rows if r.get("verdict") == "below random"]
        lines += [f"## {task} ({label})", "",
                  f"Beat random few-shot after Holm's correction: {', '.join(beats) or 'none'}; below it: "
                  f"{', '.join(below) or 'none'}.", "",
                  markdown_table(rows, board["methods"], len(board["seeds"])), ""]
        plotted += [{"task": task, "method": r["method"], "score": r["score"], "ci_low": r["ci_low"],
                     "ci_high": r["ci_high"], "metric_label": label, "metric": label,
                     "llm_calls": {"selection": int(round(r["selection_calls"]))}} for r in rows if "score" in r]
    if plotted:
        accuracy_vs_calls(plotted, study / "accuracy_vs_cost.png")
        lines += ["## Accuracy vs selection cost", "", "![accuracy vs selection cost](accuracy_vs_cost.png)", ""]
    path = study / "README.md"
    path.write_text("\n".join(lines))
    return path


def zoo_split() -> tuple[list[str], list[str]]:
    """(`--methods all` fitted live, those fitted from a reward table): the table takes what chooses among arms."""
    from bench.replay import replayable
    from bench.errors import ConfigError
    from bench.runner import expand_methods

    live, table = [], []
    for method in expand_methods(["all"]):
        try:
            replayable(method)
            table.append(method)
        except ConfigError:
            live.append(method)
    return live, table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.leaderboard", description=__doc__.split("\n\n")[0])
    p.add_argument("study", type=Path, nargs="?", help="the leaderboard folder (runs/, replays/, HEADER.md)")
    p.add_argument("--list", choices=("live", "table"), help="print the selectors fitted live / from a table, and stop")
    p.add_argument("--tables", type=Path, default=Path("studies/tables"), help="folder of the reward tables")
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    args = p.parse_args(argv)
    if args.list:
        print(",".join(zoo_split()[args.list == "table"]))
        return 0
    if args.study is None:
        p.error("the leaderboard folder is required")
    path = write(args.study, args.tables, tuple(args.tasks.split(",")), tuple(range(args.seeds)))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
