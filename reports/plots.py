"""Figures: selection runtime bars (and, for bandit selectors, convergence traces)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def selection_runtime_chart(runs: list[dict], path: Path) -> Path:
    methods = list(dict.fromkeys(r["method"] for r in runs))
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    cell = {(r["method"], r["task"]): r["selection_seconds"] for r in runs}
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(tasks) * max(1, len(methods)) * 0.5), 3.5))
    x = np.arange(len(tasks))
    for i, method in enumerate(methods):
        ax.bar(x + i * width, [cell.get((method, t), 0.0) for t in tasks], width, label=method)
    ax.set_xticks(x + width * (len(methods) - 1) / 2, tasks)
    ax.set_ylabel("selection time (s)")
    ax.set_title("Subset selection runtime")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def convergence_plot(traces: dict[str, list[dict]], path: Path, title: str = "") -> Path:
    """Gap index B_t(ch_t, b_t) and simple regret per round, one line per method (paper's Figure 1)."""
    fig, (ax_gap, ax_reg) = plt.subplots(1, 2, figsize=(9, 3.4))
    for method, trace in traces.items():
        rows = [r for r in trace if not r.get("summary") and "gap_index" in r]
        if not rows:
            continue
        rounds = [r["round"] for r in rows]
        ax_gap.plot(rounds, [r["gap_index"] for r in rows], marker="o", markersize=3, label=method)
        ax_reg.plot(rounds, [r["simple_regret"] for r in rows], marker="o", markersize=3, label=method)
    ax_gap.set_xlabel("round")
    ax_gap.set_ylabel("gap index B(ch, b)")
    ax_reg.set_xlabel("round")
    ax_reg.set_ylabel("simple regret")
    for ax in (ax_gap, ax_reg):
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
