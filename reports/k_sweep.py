"""The report of a k sweep (`--k-sweep`): every selector's score at each k, from the run folders OUT/k=N."""
from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from reports.plots import accuracy_vs_k


def sweep_rows(out: Path, ks: list[int]) -> list[dict]:
    """Result rows of every finished k (its results.json), each with its `k`."""
    rows = []
    for k in ks:
        results = out / f"k={k}" / "results.json"
        if results.is_file():
            for run in json.loads(results.read_text())["runs"]:
                rows.append({**{key: run.get(key) for key in ("method", "task", "metric", "metric_label", "score",
                                                             "ci_low", "ci_high", "n", "error")},
                             "k": k, "selection_calls": run["llm_calls"]["selection"]})
    return rows


def _cell(row: dict | None) -> str:
    if row is None:
        return "not run"
    if row.get("score") is None:
        return "failed"
    if row.get("ci_low") is None:
        return f"{100 * row['score']:.1f}"
    return f"{100 * row['score']:.1f} [{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]"


def write_k_sweep(out: Path, ks: list[int], llm: str) -> Path:
    """OUT/k-sweep.md (a table per task: methods x k, score x100 with its 95% interval), k-sweep.json and
    accuracy_vs_k.png."""
    rows = sweep_rows(out, ks)
    (out / "k-sweep.json").write_text(json.dumps({"ks": ks, "llm": llm, "rows": rows}, indent=1) + "\n")
    lines = [f"# Accuracy vs k ({llm})", "",
             f"Every selector at k = {', '.join(map(str, ks))}: the runs are in `k=N/` (each a run folder with its "
             "report). Score x100 [95% bootstrap interval]; `few-shot` at large k is the many-shot random baseline.",
             ""]
    for task in dict.fromkeys(r["task"] for r in rows):
        at = {(r["method"], r["k"]): r for r in rows if r["task"] == task}
        methods = list(dict.fromkeys(m for m, _ in at))
        label = next(r.get("metric_label") or r["metric"] for r in rows if r["task"] == task)
        lines += [f"## {task} ({label})", "",
                  tabulate([[m, *(_cell(at.get((m, k))) for k in ks)] for m in methods],
                           headers=["method", *(f"k={k}" for k in ks)], tablefmt="github"), ""]
    if rows:
        accuracy_vs_k(rows, out / "accuracy_vs_k.png")
        lines += ["![accuracy vs k](accuracy_vs_k.png)", ""]
    path = out / "k-sweep.md"
    path.write_text("\n".join(lines))
    return path
