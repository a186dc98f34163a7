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
