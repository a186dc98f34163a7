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


PARTS = (("embedding", "embedding texts", "#4c72b0"), ("llm", "LLM calls", "#dd8452"),
         ("other", "training and search", "#55a868"))


def selection_runtime_chart(runs: list[dict], path: Path) -> Path:
    """Selection seconds per method, one panel per task, each bar split into embedding, LLM calls and the rest
    (training, search); a selector that took no time gets no bar, only its '0 s'. Every bar is labelled with its
    total, so 25+ methods and times from milliseconds to hours stay readable on a linear axis."""
    methods = list(dict.fromkeys(r["method"] for r in runs))
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    cell = {(r["method"], r["task"]): r for r in runs}
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.8 * len(tasks) + 1.8, 0.28 * len(methods) + 1.6),
                             sharey=True, squeeze=False)
    y = np.arange(len(methods))
    shown = {key for key, _, _ in PARTS if any(_part(run, key) > 0 for run in cell.values())}  # no empty legend entry
    for ax, task in zip(axes[0], tasks):
        totals = []
        left = np.zeros(len(methods))
        for key, label, colour in PARTS:
            widths = np.array([_part(cell.get((m, task)), key) for m in methods])
            ax.barh(y, widths, left=left, color=colour, label=label if key in shown else None, height=0.7)
            left += widths
        totals = left
        top = max(totals.max(), 1e-9)
        for i, (method, total) in enumerate(zip(methods, totals)):  # a cell the run lacks is "not run", not 0 s
            ran = (method, task) in cell
            ax.text(total + 0.01 * top, i, _seconds(total) if ran else "not run", va="center", fontsize=6,
                    color="black" if ran else "grey", style="normal" if ran else "italic")
        ax.set_xlim(0, top * 1.25)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("selection time (s)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[0][0].set_yticks(y, methods)
    axes[0][0].invert_yaxis()
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=7, frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.suptitle("Selection time per method: embedding, LLM calls, training and search", fontsize=10, y=1.04)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _part(run: dict | None, key: str) -> float:
    if run is None:
        return 0.0
    split = run.get("selection_time")
    if split is None:  # results.json written before the split: everything counts as "the rest"
        return float(run.get("selection_seconds") or 0.0) if key == "other" else 0.0
    return float(split.get(key) or 0.0)


def _seconds(value: float) -> str:
    if value <= 0:
        return "0 s"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


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
    """Score (x100, on the metric's full 0-100 range) against selection-phase LLM calls, one panel per task, with
    95% intervals. Methods that made no selection call sit side by side in their own band left of a log axis
    (each labelled), instead of on one point; methods with calls are placed at their count on the log axis."""
    tasks = list(dict.fromkeys(r["task"] for r in runs if r.get("score") is not None))
    methods = list(dict.fromkeys(r["method"] for r in runs))
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(4.6 * max(1, len(tasks)) + 2.4, 4.0), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = [r for r in runs if r["task"] == task and r.get("score") is not None]
        free = [r for r in rows if r["llm_calls"]["selection"] == 0]
        paid = [r for r in rows if r["llm_calls"]["selection"] > 0]
        if not paid:  # no method called the LLM to select: the band is the whole panel, no empty log axis beside it
            for j, r in enumerate(free):
                i = methods.index(r["method"])
                lo, hi = r.get("ci_low"), r.get("ci_high")
                err = None if lo is None else [[100 * (r["score"] - lo)], [100 * (hi - r["score"])]]
                ax.errorbar([j], [100 * r["score"]], yerr=err, fmt=_style(i)["marker"], color=_style(i)["color"],
                            markersize=5, capsize=2, alpha=0.85, label=r["method"])
            ax.set_xlim(-0.7, len(free) - 0.3)
            ax.set_xticks([])
            ax.set_xlabel("no selection call (methods side by side)", fontsize=8)
            ax.set_ylim(0, 108)
            ax.set_title(task, fontsize=9, pad=12)
            ax.set_ylabel(f"{next(r.get('metric_label') or r['metric'] for r in runs if r['task'] == task)} ×100",
                          fontsize=8)
            ax.grid(axis="y", alpha=0.3)
            ax.tick_params(labelsize=7)
            continue
        most = max([r["llm_calls"]["selection"] for r in paid] or [10])
        # the zero-call band spans two decades left of the smallest count, one slot per method
        low = min([r["llm_calls"]["selection"] for r in paid] or [1])
        band = np.geomspace(low / 100, low / 3, max(len(free), 1)) if free else []
        # methods at the same count (a shared budget) are dodged sideways by a few percent, not drawn on one point
        same: dict[int, list[dict]] = {}
        for r in paid:
            same.setdefault(r["llm_calls"]["selection"], []).append(r)
        placed = [(r, count * 1.07 ** (j - (len(group) - 1) / 2)) for count, group in same.items()
                  for j, r in enumerate(group)]
        for r, x in [(r, band[i]) for i, r in enumerate(free)] + placed:
            i = methods.index(r["method"])
            lo, hi = r.get("ci_low"), r.get("ci_high")
            err = None if lo is None else [[100 * (r["score"] - lo)], [100 * (hi - r["score"])]]
            ax.errorbar([x], [100 * r["score"]], yerr=err, fmt=_style(i)["marker"], color=_style(i)["color"],
                        markersize=5, capsize=2, alpha=0.85, label=r["method"])
        if free:
            ax.axvspan(band[0] / 1.6, band[-1] * 1.6, color="grey", alpha=0.08, linewidth=0)
            ax.axvline(band[-1] * 1.6, color="grey", linewidth=0.6)
            ax.text(np.sqrt(band[0] * band[-1]), 1, "no selection call", ha="center", va="bottom", fontsize=6,
                    color="dimgrey")
        ax.set_xscale("log")
        ax.set_xlim((band[0] / 2) if free else low / 2, most * 2)
        ax.set_ylim(0, 108)  # the metric's whole range: all-zero scores are not stretched over a tiny axis
        ax.set_title(task, fontsize=9, pad=12)
        ax.set_xlabel("selection LLM calls (log)", fontsize=8)
        ax.set_ylabel(f"{next(r.get('metric_label') or r['metric'] for r in runs if r['task'] == task)} ×100",
                      fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        # call counts as ticks, powers of ten right of the band only (a tick inside it would read as a count)
        first = int(np.ceil(np.log10(max(low, 1))))
        ax.set_xticks([10 ** e for e in range(first, int(np.ceil(np.log10(most * 2))) + 1)])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    by_label = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            by_label.setdefault(label, handle)
    if by_label:
        fig.legend(by_label.values(), by_label.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
                   frameon=False, ncol=1 if len(by_label) <= 20 else 2)
    fig.suptitle("Accuracy vs selection cost (95% bootstrap intervals)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def pulls_vs_eps_error(results_by_family: dict[str, list[dict]], path: Path) -> Path:
    """One panel per SIMULATED family: each method's mean pulls (log x) against its eps-error rate, with SEs; the
    legend sits outside the panels, so no panel slot is left empty."""
    from matplotlib.ticker import LogLocator, NullFormatter

    families = list(results_by_family)
    methods = list(dict.fromkeys(r["method"] for rows in results_by_family.values() for r in rows))
    colour = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    cols = min(3, len(families))
    rows = (len(families) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.3 * rows), squeeze=False)
    for ax, family in zip(axes.flat, families):
        for res in results_by_family[family]:
            ax.errorbar(res["mean_pulls"], res["eps_error_rate"], xerr=res.get("pulls_se") or 0,
                        yerr=res.get("eps_error_rate_se") or 0, fmt="o", capsize=2, color=colour[res["method"]],
                        label=res["method"])
        delta = next((res.get("delta") for res in results_by_family[family]), None)
        if delta:
            ax.axhline(delta, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlapped the major ones
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"SIMULATED: {family}", fontsize=9)
        ax.set_xlabel("mean pulls", fontsize=8)
        ax.set_ylabel("eps-error rate", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(families):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=colour[m], label=m) for m in methods]
    handles.append(plt.Line2D([], [], color="grey", linestyle=":", label="delta"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def accuracy_vs_k(rows: list[dict], path: Path) -> Path:
    """Score (x100) against the number of demonstrations k (log2 axis), one line per method and one panel per
    task, with 95% intervals as bands; `rows` are result rows with their run's `k`."""
    tasks = list(dict.fromkeys(r["task"] for r in rows if r.get("score") is not None))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(4.6 * max(1, len(tasks)) + 2.0, 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, method in enumerate(methods):
            line = sorted((r for r in rows if r["task"] == task and r["method"] == method
                           and r.get("score") is not None), key=lambda r: r["k"])
            if not line:
                continue
            ks = [r["k"] for r in line]
            ax.plot(ks, [100 * r["score"] for r in line], label=method, markersize=4, **_style(i))
            if all(r.get("ci_low") is not None for r in line):
                ax.fill_between(ks, [100 * r["ci_low"] for r in line], [100 * r["ci_high"] for r in line],
                                color=_style(i)["color"], alpha=0.12, linewidth=0)
        ax.set_xscale("log", base=2)
        every_k = sorted({r["k"] for r in rows if r["task"] == task})
        ax.set_xticks(every_k, [str(k) for k in every_k])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_ylim(0, 108)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("demonstrations k (log2)", fontsize=8)
        ax.set_ylabel(f"{next(r.get('metric_label') or r['metric'] for r in rows if r['task'] == task)} ×100",
                      fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.suptitle("Accuracy vs number of demonstrations (95% bootstrap intervals)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
