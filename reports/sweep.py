"""A sweep's merged report (`python -m bench sweep`): every cell's run folder read back, one table per (setting,
task), the methods' scores over seeds and test items, and each method's paired test against the baseline across
seeds, as the study's leaderboard tests (reports/leaderboard.py: the two-way bootstrap over seeds and items, Holm's
correction over the methods of the task). A setting is what the cells vary beyond methods, tasks and seeds (the LLM,
k, ...): methods are only compared within one."""
from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from reports.leaderboard import ALPHA, Cell, task_rows

PER_CELL = ("methods", "tasks", "seed")  # what a setting leaves out


def sweep_cells(folders: dict[str, tuple[Path, dict]]) -> dict[tuple[str, str], dict[str, Cell]]:
    """(setting label, task) -> method -> Cell, from the finished cells' folders (name -> (folder, varying options))."""
    out: dict[tuple[str, str], dict[str, Cell]] = {}
    for name, (folder, varying) in folders.items():
        if not (folder / "results.json").is_file():
            continue
        results = json.loads((folder / "results.json").read_text())
        seed = int(results.get("config", {}).get("seed", varying.get("seed", 0)))
        setting = ", ".join(f"{k}={v}" for k, v in varying.items() if k not in PER_CELL) or "all cells"
        scores: dict[tuple[str, str], dict[str, float]] = {}
        with (folder / "records.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    r = json.loads(line)
                    scores.setdefault((r["method"], r["task"]), {})[r["item_id"]] = float(r["score"])
        for run in results["runs"]:
            cell = out.setdefault((setting, run["task"]), {}).setdefault(run["method"], Cell(run["method"], "live"))
            cell.metric_label = run.get("metric_label") or run["metric"]
            if run.get("error") or run.get("score") is None:
                cell.errors.append(f"seed {seed}: {run.get('error') or 'no score'}")
                continue
            if seed in cell.scores:
                cell.warnings.append(f"seed {seed} twice ({name}): the later cell's items kept")
            cell.scores[seed] = scores.get((run["method"], run["task"]), {})
            cell.calls[seed] = int(run["llm_calls"]["selection"])
            cell.selection_seconds[seed] = float(run.get("selection_seconds") or 0.0)
            cell.inference_seconds[seed] = float(run.get("inference_seconds_per_query") or 0.0)
    for cells in out.values():
        for cell in cells.values():
            common = set.intersection(*(set(v) for v in cell.scores.values())) if cell.scores else set()
            if len(cell.scores) > 1 and len(common) < max(len(v) for v in cell.scores.values()):
                # the seeds drew different test items (no split_seed): items pair within a seed only, so each
                # seed's items are keyed by their rank in it, and the bootstrap resamples those ranks
                cell.scores = {seed: {f"#{i}": v[item] for i, item in enumerate(sorted(v))}
                               for seed, v in cell.scores.items()}
                cell.warnings.append("items by rank within each seed")
    return out


def verdict(row: dict, baseline: str) -> str:
    if row["method"] == baseline:
        return "baseline"
    if "p_holm" not in row:
        return "no paired seed"
    if row["p_holm"] < ALPHA:
        return f"{'above' if row['diff'] > 0 else 'below'} {baseline}"
    return "not significant"


def sweep_report(folders: dict[str, tuple[Path, dict]], baseline: str, status: dict[str, str],
                 resamples: int = 10_000) -> tuple[str, dict]:
    """(report.md's text, the rows as JSON)."""
    grouped = sweep_cells(folders)
    failed = sorted(name for name, s in status.items() if s == "failed")
    lines = ["# Sweep report", "",
             f"{len(status)} cells: {sum(s in ('done', 'skipped') for s in status.values())} finished, "
             f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}. Each cell is a run folder under "
             "`cells/` with its own report. Per task, each method's score ×100 is the mean over its seeds and test "
             "items, with the two-way bootstrap 95% interval (seeds and items resampled together); Δ is its paired "
             f"difference from `{baseline}` on the seeds and items both have, its p the two-way bootstrap's, "
             "Holm-adjusted over the methods of the task (reports/leaderboard.py, as the study's leaderboard). "
             "Where the seeds drew different test items (no `split_seed`), a method and the baseline still share "
             "each seed's items: their scores pair within the seed, and the bootstrap resamples items by their rank "
             "within each seed.", ""]
    every = {}
    for (setting, task), cells in sorted(grouped.items()):
        rows = task_rows(cells, resamples, baseline=baseline)
        every[f"{setting} | {task}"] = rows
        table = []
        for r in rows:
            if "score" not in r:
                table.append([r["method"], "failed: " + "; ".join(r["errors"])[:80], "", "", "", "", ""])
                continue
            table.append([r["method"], f"{100 * r['score']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]",
                          ", ".join(map(str, r["seeds"])), r["n_items"],
                          f"{100 * r['diff']:+.1f}" if "diff" in r else "—",
                          f"{r['p_holm']:.3g}" if "p_holm" in r else "—", verdict(r, baseline)])
        label = next((c.metric_label for c in cells.values() if c.metric_label), "score")
        lines += [f"## {task} ({label}){'' if setting == 'all cells' else ': ' + setting}", "",
                  tabulate(table, headers=["method", "score ×100 [95% CI]", "seeds", "items",
                                           f"Δ vs {baseline} ×100", "p (Holm)", "verdict"],
                           tablefmt="github", disable_numparse=True), ""]
    return "\n".join(lines), every


def write_sweep_report(out: Path, folders: dict[str, tuple[Path, dict]], baseline: str,
                       status: dict[str, str]) -> Path:
    text, rows = sweep_report(folders, baseline, status)
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "sweep.json").write_text(json.dumps({"baseline": baseline, "cells": status, "tasks": rows}, indent=1,
                                               default=float) + "\n", encoding="utf-8")
    return out / "report.md"


def write_table_report(out: Path, merged: dict[str, tuple[Path | None, str]], status: dict[str, str]) -> Path:
    """report.md of a sweep of table builds: each joined table's path and summary, or why it was not joined."""
    failed = sorted(name for name, s in status.items() if s == "failed")
    lines = ["# Sweep report: reward tables", "",
             f"{len(status)} shard cells: {sum(s in ('done', 'skipped') for s in status.values())} finished, "
             f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}. Each shard is a `table build "
             "--shard i/N` under `cells/` with its own cache; a table's shards, once all finished, are joined into "
             "`tables/NAME.npz`, the table an unsharded build records.", ""]
    for table, (path, text) in merged.items():
        lines += [f"## {table}", "", f"`{path.relative_to(out)}`" if path else text, ""]
        if path:
            lines += ["```", text, "```", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "sweep.json").write_text(json.dumps({"cells": status, "tables": {t: str(p) if p else None
                                                                            for t, (p, _) in merged.items()}},
                                               indent=1) + "\n", encoding="utf-8")
    return out / "report.md"
