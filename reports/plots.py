"""Figures: selection runtime bars, accuracy vs selection calls, and bandit convergence traces."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _style(i: int) -> dict:
    """Colour, line style and marker that keep up to 80 methods apart (10 colours x 4 styles x 8 markers)."""
    return {"color": plt.get_cmap("tab10")(i % 10), "linestyle": STYLES[(i // 10) % 4], "marker": MARKERS[i % 8]}


def selection_runtime_chart(runs: list[dict], path: Path) -> Path:
    """Selection seconds as log-scale horizontal bars, one panel per task: readable with 25+ methods."""
    methods = list(dict.fromkeys(r["method"] for r in runs))
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    cell = {(r["method"], r["task"]): r.get("selection_seconds") for r in runs}
    floor = 1e-3  # selectors that took (almost) no time still get a visible bar
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks) + 1.6, 0.26 * len(methods) + 1.4),
                             sharey=True, squeeze=False)
    y = np.arange(len(methods))
    for ax, task in zip(axes[0], tasks):
        values = [max(cell.get((m, task)) or 0.0, floor) for m in methods]
        ax.barh(y, values, color=[plt.get_cmap("tab10")(i % 10) for i in range(len(methods))])
        ax.set_xscale("log")
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("selection time (s, log)", fontsize=8)
        ax.grid(axis="x", which="major", alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[0][0].set_yticks(y, methods)
    axes[0][0].invert_yaxis()
    fig.suptitle("Subset selection runtime", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def convergence_plot(traces: dict[str, list[dict] | list[list[dict]]], path: Path, title: str = "") -> Path:
    """Gap index B_t(ch_t, b_t) (log scale, with the stopping threshold epsilon) and simple regret per round, one
    line per method and trace (paper's Figure 1); a method may have several traces (seeds), drawn in its style.
    Lines differ in colour, style and marker and are half transparent, so overlapping ones stay visible."""
    fig, (ax_gap, ax_reg) = plt.subplots(1, 2, figsize=(10, 3.6))
    epsilons = set()
    for i, (method, runs) in enumerate(traces.items()):
        for j, trace in enumerate([runs] if runs and isinstance(runs[0], dict) else runs):
            epsilons |= {r["settings"]["epsilon"] for r in trace if r.get("summary") and "epsilon" in r.get("settings", {})}
            rows = [r for r in trace if not r.get("summary") and "gap_index" in r and "simple_regret" in r]
            if not rows:
                continue
            rounds = [r["round"] for r in rows]
            style = {**_style(i), "markersize": 3, "linewidth": 1.2, "alpha": 0.75,
                     "markevery": max(1, len(rows) // 12), "label": method if j == 0 else None}
            ax_gap.plot(rounds, [r["gap_index"] for r in rows], **style)
            ax_reg.plot(rounds, [r["simple_regret"] for r in rows], **style)
    if len(epsilons) == 1:  # the stop rule's threshold, when every fit shares it
        ax_gap.axhline(epsilons.pop(), color="grey", linestyle=":", linewidth=1, label="epsilon")
    gaps = [float(y) for line in ax_gap.get_lines() for y in line.get_ydata()]
    if gaps and min(gaps) > 0:  # DEARICL's index spans 2 to 0.05, CASE's 0.2 to 0.1
        ax_gap.set_yscale("log")
    elif gaps:  # an index can end below 0: linear around 0, log beyond
        ax_gap.set_yscale("symlog", linthresh=0.01)
    ax_gap.set_xlabel("round")
    ax_gap.set_ylabel("gap index B(ch, b)")  # the axis shows its own log scale
    ax_reg.set_xlabel("round")
    ax_reg.set_ylabel("simple regret")
    handles, labels = ax_gap.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def accuracy_vs_calls(runs: list[dict], path: Path) -> Path:
    """Score against selection-phase LLM calls (log, +1), one panel per task, with 95% intervals: what each
    selector's LLM budget buys."""
    tasks = list(dict.fromkeys(r["task"] for r in runs if r.get("score") is not None))
    methods = list(dict.fromkeys(r["method"] for r in runs))
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(4.2 * max(1, len(tasks)) + 2.2, 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for r in (r for r in runs if r["task"] == task and r.get("score") is not None):
            i = methods.index(r["method"])
            x = r["llm_calls"]["selection"] + 1
            low, high = r.get("ci_low"), r.get("ci_high")
            err = None if low is None else [[100 * (r["score"] - low)], [100 * (high - r["score"])]]
            ax.errorbar([x], [100 * r["score"]], yerr=err, fmt=_style(i)["marker"], color=_style(i)["color"],
                        markersize=5, capsize=2, alpha=0.85, label=r["method"])
        ax.set_xscale("log")
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("selection LLM calls + 1 (log)", fontsize=8)
        ax.set_ylabel(f"{next(r.get('metric_label') or r['metric'] for r in runs if r['task'] == task)} ×100",
                      fontsize=8)
        ax.grid(alpha=0.3)
    by_label = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            by_label.setdefault(label, handle)
    if by_label:
        fig.legend(by_label.values(), by_label.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
                   frameon=False)
    fig.suptitle("Accuracy vs selection cost (95% bootstrap intervals)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
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
