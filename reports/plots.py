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
        rows = [r for r in trace if not r.get("summary") and "gap_index" in r and "simple_regret" in r]
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


def pulls_vs_eps_error(results_by_family: dict[str, list[dict]], path: Path) -> Path:
    """One panel per SIMULATED family: each method's mean pulls (log x) against its eps-error rate, with SEs."""
    families = list(results_by_family)
    methods = list(dict.fromkeys(r["method"] for rows in results_by_family.values() for r in rows))
    colour = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    cols = min(3, len(families) + 1)  # one more slot for the legend
    rows = (len(families) + cols) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, family in zip(axes.flat, families):
        for res in results_by_family[family]:
            ax.errorbar(res["mean_pulls"], res["eps_error_rate"], xerr=res.get("pulls_se") or 0,
                        yerr=res.get("eps_error_rate_se") or 0, fmt="o", capsize=2, color=colour[res["method"]],
                        label=res["method"])
        delta = next((res.get("delta") for res in results_by_family[family]), None)
        if delta:
            ax.axhline(delta, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"SIMULATED: {family}", fontsize=9)
        ax.set_xlabel("mean pulls")
        ax.set_ylabel("eps-error rate")
    legend_ax = axes.flat[len(families)]
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=colour[m], label=m) for m in methods]
    handles.append(plt.Line2D([], [], color="grey", linestyle=":", label="delta"))
    legend_ax.legend(handles=handles, loc="center", fontsize=8)
    for ax in list(axes.flat)[len(families):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
