"""The paper's table shapes (accuracy, LLM calls, inference time) as Markdown and LaTeX (tabulate)."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import numpy as np
from tabulate import tabulate

from bench.records import ItemRecord
from reports.stats import PairedTTest, bootstrap_ci, holm

DAGGER, WORSE = "†", "↓"  # paired test, p < 0.05 (t-test; exact McNemar for 0/1 scores)
HOLM_BETTER, HOLM_WORSE = "‡", "⇓"  # the same, and it survives Holm's correction over the methods on the task


class Tex(str):
    """LaTeX markup a cell or caption holds on purpose (a mark, bold, a small interval): `table` keeps it as is."""


# every character LaTeX reads as markup, and the Unicode the reports print that pdflatex cannot set
LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
         "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "×": r"$\times$", "±": r"$\pm$",
         "Δ": r"$\Delta$", "δ": r"$\delta$", "ε": r"$\varepsilon$", "σ": r"$\sigma$", "ρ": r"$\rho$",
         "≤": r"$\leq$", "≥": r"$\geq$", "≈": r"$\approx$", "→": r"$\to$", "·": r"$\cdot$", "–": "--", "—": "---",
         "…": r"\ldots{}", DAGGER: r"$^\dagger$", HOLM_BETTER: r"$^\ddagger$", WORSE: r"$^\downarrow$",
         HOLM_WORSE: r"$^\Downarrow$"}


def latex_escape(text) -> str:
    """Text as LaTeX sets it literally (Tex markup is kept as is)."""
    if isinstance(text, Tex):
        return text
    return "".join(LATEX.get(ch, ch) for ch in str(text))


def table(rows: list[list], headers: list, fmt: str) -> str:
    """tabulate as the reports use it: fmt "github" (Markdown) or "latex"/"latex_raw" (every cell and header
    escaped but Tex markup)."""
    if fmt in ("latex", "latex_raw"):
        rows = [[latex_escape(cell) for cell in row] for row in rows]
        headers = [latex_escape(h) for h in headers]
        fmt = "latex_raw"
    return tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)


def _grid(runs: list[dict]) -> tuple[list[str], list[str], dict]:
    methods = list(dict.fromkeys(r["method"] for r in runs))
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    cell = {(r["method"], r["task"]): r for r in runs}
    return methods, tasks, cell


def pick_baseline(runs: list[dict], requested: str | None) -> str | None:
    """The method every other is tested against: --baseline when given, else `case-dynamic` (the paper's
    reference), else `zero-shot`; else none (no paired tests), never whichever method came first."""
    return baseline_and_reason(runs, requested)[0]


def baseline_and_reason(runs: list[dict], requested: str | None) -> tuple[str | None, str]:
    """(baseline, the sentence the report's header states about it)."""
    methods = {r["method"] for r in runs}
    if requested:
        if requested not in methods:
            from bench.errors import ConfigError

            raise ConfigError(f"--baseline {requested} did not run here (methods: {', '.join(sorted(methods))})")
        return requested, f"Significance baseline: `{requested}` (chosen with --baseline)."
    if "case-dynamic" in methods:
        return "case-dynamic", "Significance baseline: `case-dynamic` (the paper's reference; --baseline picks another)."
    if "zero-shot" in methods:
        return "zero-shot", ("Significance baseline: `zero-shot`, since `case-dynamic` did not run (--baseline "
                             "METHOD picks another).")
    return None, ("No significance baseline: neither `case-dynamic` nor `zero-shot` ran, so no paired tests; "
                  "--baseline METHOD picks one.")


def significance(records: list[ItemRecord], baseline: str, metric: str | None = None) -> dict[tuple[str, str], PairedTTest]:
    """Paired t-tests (and exact McNemar tests for 0/1 scores) of every method against `baseline`, per task, on
    the primary score or on a secondary `metric` of the records' extra (chrF); Holm over the methods of each task."""
    per: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for rec in records:
        value = rec.score if metric is None else rec.extra.get(metric)
        if value is not None:
            per[(rec.method, rec.task)][rec.item_id] = value
    tests = {}
    for (method, task), scores in per.items():
        if method != baseline and (baseline, task) in per:
            tests[(method, task)] = PairedTTest.of(scores, per[(baseline, task)])
    for task in {t for _, t in tests}:  # one family per task: every method compared with the baseline there
        family = {key: test for key, test in tests.items() if key[1] == task}
        t_holm = holm({key: test.p for key, test in family.items()})
        mcnemar_holm = holm({key: test.mcnemar_p for key, test in family.items() if test.mcnemar_p is not None})
        for key in family:
            tests[key] = replace(tests[key], p_holm=t_holm[key], mcnemar_holm=mcnemar_holm.get(key, math.nan))
    return tests


# The row groups of the paper's Table 1, in order.
GROUPS = (("task", "Task level"), ("instance", "Instance level"), ("bandit", "Instance level (bandit)"),
          ("bandit+ltr", "Instance level (bandit + LTR)"), ("beyond", "Beyond the paper"),
          ("retrieval", "Retrieval baselines beyond the paper (OpenICL's BM25, DPP, vote-k)"))
DATA_VARIANT = "@dearicl-data"  # LTR selectors trained on a DEARICL run's log (data-ablation table)


LATEX_MARKS = {HOLM_BETTER: r"$^\ddagger$", DAGGER: r"$^\dagger$", HOLM_WORSE: r"$^\Downarrow$",
               WORSE: r"$^\downarrow$"}


def mark(test) -> str:
    """A method's mark against the baseline: better or worse after Holm's correction, else before it, else none."""
    if test is None:
        return ""
    return (HOLM_BETTER if test.better(corrected=True) else DAGGER if test.better() else
            HOLM_WORSE if test.worse(corrected=True) else WORSE if test.worse() else "")


def score_cell(run: dict | None, test, fmt: str) -> str:
    if run is None:
        return ""
    if run.get("score") is None:
        return "failed"  # the report's "Failed fits" section gives the reason
    sign = mark(test)
    sign = sign if fmt == "github" else LATEX_MARKS.get(sign, "")
    budget = "*" if run.get("budget_exhausted") else ""
    low, high = run.get("ci_low"), run.get("ci_high")
    interval = "" if low is None or high is None else (f" [{100 * low:.1f}, {100 * high:.1f}]" if fmt == "github"
                                                         else f" {{\\scriptsize[{100 * low:.1f}, {100 * high:.1f}]}}")
    cell = f"{100 * run['score']:.2f}{sign}{budget}{interval}"
    return cell if fmt == "github" else Tex(cell)


def latex_table(tabular: str, caption: str, label: str) -> str:
    """A tabulate `latex_raw` tabular as a booktabs table float with a caption and a label."""
    lines = tabular.strip().splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() == r"\hline"]
    for n, i in enumerate(rules):
        lines[i] = r"\toprule" if n == 0 else (r"\bottomrule" if n == len(rules) - 1 else r"\midrule")
    caption = latex_escape(caption)
    return "\n".join([r"\begin{table}[t]", r"\centering", r"\small", *lines, rf"\caption{{{caption}}}",
                      rf"\label{{tab:{label}}}", r"\end{table}"])


def _bold(text: str, fmt: str) -> str:
    return f"**{text}**" if fmt == "github" else Tex(rf"\textbf{{{latex_escape(text)}}}")


def grouped_rows(runs: list[dict], methods: list[str], cells, n_columns: int, fmt: str) -> list[list[str]]:
    """Rows under the paper's group headings (then any other group); `cells(method)` fills a row."""
    group_of = {r["method"]: r.get("group") or r.get("level", "") for r in runs}
    known = [g for g, _ in GROUPS]
    rows = []
    for group, title in GROUPS + tuple((g, g or "other") for g in dict.fromkeys(group_of.values()) if g not in known):
        members = [m for m in methods if group_of.get(m) == group]
        if members:
            rows.append([_bold(title, fmt)] + [""] * n_columns)
        rows += [[m] + cells(m) for m in members]
    return rows


def accuracy_table(runs: list[dict], tests: dict, fmt: str = "github") -> str:
    """Main table: methods grouped as in the paper (task level, instance level, bandit, bandit + LTR)."""
    main = [r for r in runs if DATA_VARIANT not in r["method"]]
    methods, tasks, cell = _grid(main)
    rows = grouped_rows(main, methods, lambda m: [score_cell(cell.get((m, t)), tests.get((m, t)), fmt)
                                                  for t in tasks], len(tasks), fmt)
    headers = ["Method"] + [_task_header(t, runs) for t in tasks]
    return table(rows, headers, fmt)


def data_ablation_table(runs: list[dict], tests: dict, fmt: str = "github") -> str | None:
    """The paper's Table 3: LTR selectors trained on their own pulls vs on the DEARICL run's log."""
    variants = [r["method"] for r in runs if r["method"].endswith(DATA_VARIANT)]
    if not variants:
        return None
    methods, tasks, cell = _grid(runs)
    rows = []
    for variant in dict.fromkeys(variants):
        base = variant[: -len(DATA_VARIANT)]
        for name, label in ((base, f"{base} (own data)"), (variant, f"{base} (DEARICL data)")):
            if name in methods:
                rows.append([label] + [score_cell(cell.get((name, t)), tests.get((name, t)), fmt) for t in tasks])
    if "dearicl-dynamic" in methods:
        rows.append(["dearicl-dynamic"] + [score_cell(cell.get(("dearicl-dynamic", t)),
                                                       tests.get(("dearicl-dynamic", t)), fmt) for t in tasks])
    headers = ["Method"] + [_task_header(t, runs) for t in tasks]
    return table(rows, headers, fmt)


def _task_header(task: str, runs: list[dict]) -> str:
    """'sst2 (Acc ×100 [95% CI], n = 50)': the metric, the scale and the number of items the scores average."""
    rows = [r for r in runs if r["task"] == task]
    row = rows[0] if rows else {}
    label = row.get("metric_label") or {"exact_match": "EM", "bertscore_f1": "BERTScore F1"}.get(
        row.get("metric", ""), row.get("metric", ""))  # results.json written before metric_label existed
    ns = sorted({r["n"] for r in rows if r.get("score") is not None})
    n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}" if ns else "n = 0"
    return f"{task} ({label} ×100 [95% CI], {n})"


def fmt_p(value: float | None) -> str:
    """A p-value as the reports print it (n/a when there is no test)."""
    return "n/a" if value is None or value != value else f"{value:.4f}"


def secondary_table(runs: list[dict], records: list[ItemRecord], baseline: str | None) -> str | None:
    """Secondary metrics (chrF on WMT19) as the primary score gets them: mean x100 with its 95% bootstrap
    interval, and the paired t-test against `baseline` (Holm over the methods of each task and metric, MDD)."""
    metrics = sorted({k for r in runs for k in r.get("extra", {})})
    rows = []
    for metric in metrics:
        tests = significance(records, baseline, metric) if baseline else {}
        values: dict[tuple[str, str], list[float]] = defaultdict(list)
        for rec in records:
            if metric in rec.extra:
                values[(rec.method, rec.task)].append(rec.extra[metric])
        for run in runs:
            key = (run["method"], run["task"])
            if run.get("score") is None or metric not in run.get("extra", {}):
                continue
            if not values.get(key):  # a corpus-level metric (macro-F1): the row's value and interval, no test
                low, high = run.get("extra_ci", {}).get(metric, (None, None))
                interval = f" [{100 * low:.2f}, {100 * high:.2f}]" if low is not None else ""
                rows.append([run["method"], run["task"], metric, f"{100 * run['extra'][metric]:.2f}{interval}",
                             "baseline" if run["method"] == baseline else "", "", "", ""])
                continue
            low, high = bootstrap_ci(values[key])
            interval = f" [{100 * low:.2f}, {100 * high:.2f}]" if low is not None else ""
            test = tests.get(key)
            vs = (["baseline", "", "", ""] if run["method"] == baseline else ["", "", "", ""] if test is None else
                  [f"{100 * test.mean_diff:+.2f}", fmt_p(test.p), fmt_p(test.p_holm),
                   "n/a" if test.mdd != test.mdd else f"{100 * test.mdd:.2f}"])
            rows.append([run["method"], run["task"], metric, f"{100 * np.mean(values[key]):.2f}{interval}", *vs])
    if not rows:
        return None
    headers = ["Method", "Task", "Metric", "×100 [95% CI]", f"Δ×100 vs {baseline}", "p", "p (Holm)", "MDD×100 (80% power)"]
    if not any(cell for row in rows for cell in row[5:]):  # no test ran (no baseline, or corpus-level metrics only)
        rows, headers = [row[:4] for row in rows], headers[:4]
    return table(rows, headers, "github")


def extra_table(runs: list[dict], fmt: str = "github") -> str | None:
    """Secondary metrics (chrF on WMT19)."""
    keys = list(dict.fromkeys(k for r in runs for k in r.get("extra", {})))  # tasks with other metrics share the table
    rows = [[r["method"], r["task"]] + [f"{100 * r['extra'][k]:.2f}" if k in r["extra"] else "" for k in keys]
            for r in runs if r.get("extra")]
    if not rows:
        return None
    return table(rows, ["Method", "Task"] + keys, fmt)


def scale_table(runs: list[dict], fmt: str = "github") -> str | None:
    """What each selector's fit ran at (Selector.scale: pulls, training queries, optimiser steps, beam...), per
    task; None when no selector trained or searched anything."""
    scaled = [r for r in runs if r.get("scale")]
    if not scaled:
        return None
    return _cell_table(scaled, "Method (scale of its fit)",
                       lambda r: ", ".join(f"{k} {_number(v)}" for k, v in r["scale"].items()), fmt)


def _number(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else str(value)


def _cell_table(runs: list[dict], title: str, cell_text, fmt: str) -> str:
    """A method x task grid whose cells are `cell_text(run)`."""
    methods, tasks, cell = _grid(runs)
    rows = [[m] + [("" if cell.get((m, t)) is None else cell_text(cell[(m, t)])) for t in tasks] for m in methods]
    return table(rows, [title] + tasks, fmt)


def calls_table(runs: list[dict], fmt: str = "github") -> str:
    def text(r: dict) -> str:
        asked = r.get("llm_calls_requested", {}).get("selection", r["llm_calls"]["selection"])
        extra = f" ({asked} asked)" if asked != r["llm_calls"]["selection"] else ""
        return f"{r['llm_calls']['selection']}{extra} / {r['llm_calls']['inference']}"

    return _cell_table(runs, "Method (selection / inference)", text, fmt)


def time_table(runs: list[dict], fmt: str = "github") -> str:
    def text(r: dict) -> str:
        if r.get("error"):
            return "failed"
        median, first = r["inference_seconds_per_query"], r.get("inference_seconds_first")
        slow_start = first is not None and first > 5 * median and first - median > 0.5
        return f"{median:.2f}" + (f" (first {first:.2f})" if slow_start else "")

    median = any("inference_seconds_mean" in r for r in runs)  # results.json written before the median: a mean
    return _cell_table(runs, f"Method (s / query, {'median' if median else 'mean'})", text, fmt)


def selection_time_table(runs: list[dict], fmt: str = "github") -> str:
    return _cell_table(runs, "Method (selection s)", lambda r: f"{r['selection_seconds']:.1f}", fmt)
