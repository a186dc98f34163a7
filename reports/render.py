"""report.md / report.tex: accuracy with paired t-tests, LLM calls, runtimes, settings."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.llm.calllog import read_calls
from bench.records import read_fits, read_records
from reports.costs import PriceTable, token_table
from reports.exemplars import exemplar_table
from reports import tables
from reports.plots import accuracy_vs_calls, convergence_plot, selection_runtime_chart
from reports.results import load_results

SMOKE_NOTE = ("Runs with the embedded Gemma 3 270M model are small-model numbers: real, computed end to end, "
              "but not comparable with the paper's numbers (Llama 3.2 3B and larger).")


def render(out: Path, baseline: str | None = None, prices: PriceTable | None = None,
           exemplars: int = 0, exemplar_methods: tuple[str, str] | None = None) -> tuple[str, str]:
    out = Path(out)
    results = load_results(out)
    runs = results["runs"]
    records = read_records(out / "records.jsonl")
    calls = list(read_calls(out / "calls.jsonl"))
    base, why = tables.baseline_and_reason(runs, baseline)
    tests = tables.significance(records, base) if base else {}
    md = [f"# Report: {out.name}", ""]
    md += [f"LLM answering test items: `{results.get('llm', '')}`; LLM behind the selection rewards: "
           f"`{results.get('selection_llm') or results.get('llm', '')}`; encoder: {results.get('encoder', '')}.", ""]
    reused = sorted({r["selection_reused_from"] for r in runs if r.get("selection_reused_from")})
    if reused:
        md += [f"Selections replayed from {', '.join(f'`{p}`' for p in reused)} (same selection LLM, data, seed and "
               "parameters): no selection-phase LLM call in this run for "
               f"{', '.join(sorted({r['method'] for r in runs if r.get('selection_reused_from')}))}.", ""]
    if "gemma3-270m" in str(results.get("llm", "")):
        md += [f"> {SMOKE_NOTE}", ""]
    marks = (f" {tables.DAGGER}: better than `{base}` in a paired test (two-sided, p < 0.05: scipy's `ttest_rel`, "
             "or for 0/1 scores such as exact match the exact McNemar test, since a t-test on 0/1 differences is "
             f"anti-conservative when few items differ); {tables.HOLM_BETTER}: better, and it survives Holm's correction "
             f"over the methods compared with `{base}` on that task; {tables.WORSE} / {tables.HOLM_WORSE}: worse, "
             "likewise;") if base else ""
    md += ["## Accuracy", "", why, "",
           "Scores ×100 with their 95% bootstrap intervals over items (results.json and results.csv keep the 0–1 "
           f"scale); n test items per task.{marks} *: the selector hit `--llm-budget` and used what it had.", "",
           tables.accuracy_table(runs, tests), ""]
    scale = tables.scale_table(runs)
    if scale:
        md += ["What each selector's fit ran at (its pulls, training queries, optimiser steps, search beam...): "
               "compare it with the method's published scale before comparing scores.", "", scale, ""]
    ablation = tables.data_ablation_table(runs, tests)
    if ablation:
        md += ["## Data ablation", "", "LTR selectors trained on their own pulls (sampled arms + heuristic negatives) "
               "and on the (arm, query, reward) log of the DEARICL run (`--ltr-data own,dearicl`; the paper's Table 3). "
               "Both rank DEARICL's candidate arms.", "", ablation, ""]
    extra = tables.secondary_table(runs, records, base)
    if extra:
        md += [f"Secondary metrics (×100) with their 95% bootstrap intervals and paired t-tests against `{base}` "
               "(Holm over the methods of each task and metric; MDD as under Paired tests):", "", extra, ""]
    md += ["## LLM calls", "", "Distinct LLM calls per method and task: selection phase / inference phase. "
           "'(N asked)': the calls the selector asked for, cache hits included, where that differs (case-dynamic's "
           "queries re-ask pulls other queries made; independent per-query runs would pay for them).", "",
           tables.calls_table(runs), "",
           "Tokens of the calls computed in this run (cache hits cost nothing): prompt tokens requested, prompt "
           "tokens actually prefilled (run through the model: fewer with a shared prefix; more where a call scores "
           "options of several tokens, each read after its own copy of the prompt's end, or a prefix is prefilled "
           "again after it left the cache) and completion tokens"
           + (f"; cost from `{prices.source}` (USD per 1M input/output tokens, input = requested)." if prices
              else "; pass `--prices FILE.yaml` for costs."), "",
           token_table(calls, prices), "", "## Inference time", "",
           "Seconds per test query: demonstration selection plus the LLM call (time when first computed), the median "
           "over the test items (the mean in a results.json written before medians); '(first N)': the cell's first "
           "query took N s (loading, warming up, or a busy machine), more than 5x the median.", "",
           tables.time_table(runs), "", "## Selection time", "", tables.selection_time_table(runs), "",
           "![selection runtime](selection_runtime.png)", "",
           "What the selection budget buys: score against selection-phase LLM calls, with 95% bootstrap intervals.",
           "", "![accuracy vs selection calls](accuracy_vs_calls.png)", ""]
    if tests:
        md += ["## Paired tests", "", f"Against `{base}`: paired t-test p, Holm-adjusted over the methods of each "
               "task; for exact-match tasks also the exact McNemar test on the items where exactly one of the two "
               "is right (Holm-adjusted likewise), which then decides the tables' marks. MDD: the minimal detectable difference, the smallest true "
               "difference (×100) the paired t-test at p < 0.05 (before Holm) finds with 80% power, from n and the sd "
               "of the differences (noncentral t): a difference that is not significant is probably smaller than the "
               "MDD, not shown to be zero.", ""]
        def fmt_x100(value):
            return "n/a" if value != value else f"{100 * value:.2f}"

        rows = [[m, t, tt.n, f"{100 * tt.mean_diff:+.2f}", f"{tt.t:.3f}", tables.fmt_p(tt.p), tables.fmt_p(tt.p_holm),
                 tables.fmt_p(tt.mcnemar_p), tables.fmt_p(tt.mcnemar_holm if tt.mcnemar_p is not None else None),
                 fmt_x100(tt.sd_diff), fmt_x100(tt.mdd)] for (m, t), tt in sorted(tests.items())]
        from tabulate import tabulate

        md += [tabulate(rows, headers=["Method", "Task", "n", "Δ×100", "t", "p", "p (Holm)", "McNemar p",
                                       "McNemar p (Holm)", "sd of Δ×100", "MDD×100 (80% power)"],
                                tablefmt="github", disable_numparse=True), ""]
    if exemplars:
        (a, b), table, found = exemplar_table(records, exemplars, exemplar_methods)
        md += ["## Exemplars", "", f"Test items where `{a}` and `{b}` disagree in correctness ({found} in all; "
               f"{min(found, exemplars)} shown), with each method's demonstrations (questions only, truncated).", "",
               table if found else "No test item where the two methods disagree.", ""]
    md += convergence_section(out)
    failed = [r for r in runs if r.get("error")]
    if failed:
        md += ["## Failed fits", "", "These selectors had nothing valid to offer on these tasks; their cells read "
               "'failed' and carry no score.", ""] + [f"- `{r['method']}` on {r['task']}: {r['error']}" for r in failed] + [""]
    warned = [r for r in runs if r.get("warnings") and not r.get("error")]
    if warned:
        md += ["## Warnings", "", "These fits ran degraded; their scores are real but not what the method would "
               "give with what it asked for.", ""]
        md += [f"- `{r['method']}` on {r['task']}: {w}" for r in warned for w in r["warnings"]] + [""]
    budgets = [r for r in runs if r.get("budget_exhausted")]
    if budgets:
        md += ["## Budget", ""] + [f"- `{r['method']}` on {r['task']} stopped at --llm-budget {r['budget']} "
                                   f"after {r['llm_calls']['selection']} selection calls and used what it had."
                                   for r in budgets] + [""]
    md += ["## Settings", ""]
    for lang, desc in results.get("bertscore", {}).items():
        md.append(f"- BERTScore ({lang}): {desc}")
    if "zh" in results.get("bertscore", {}) and "local" in results["bertscore"]["zh"]:
        md.append("- WMT19 caveat: the offline encoder (all-MiniLM-L6-v2) maps about 65% of Chinese characters "
                  "to [UNK], so offline BERTScore on Chinese is weak; read it together with chrF.")
    md += bandit_settings(out)
    cfg = results.get("config", {})
    if cfg:
        md.append(f"- seed {cfg.get('seed')}, k {cfg.get('k')}, n_test {cfg.get('n_test')}, n_val {cfg.get('n_val')}, "
                  f"pool_size {cfg.get('pool_size')}, decoding {cfg.get('generation')}")
    for task, info in json.loads((out / "config.json").read_text()).get("task_info", {}).items() \
            if (out / "config.json").exists() else []:
        if info.get("labels"):  # how a classification task was answered and rewarded
            how = ("label words ranked by log-likelihood" + (", calibrated (contextual)" if info["calibration"] ==
                                                             "contextual" else "")
                   if info["scoring"] == "rank" else "generated, the first label word read")
            md.append(f"- {task}: {how}; labels {', '.join(info['labels'])}; selection reward {info['reward']}")
    llm = tables.latex_escape(results.get("llm", ""))
    marks = (rf"$^\dagger$/$^\downarrow$: better/worse than {base} in a paired t-test (p < 0.05); "
             rf"$^\ddagger$/$^\Downarrow$: the same after Holm's correction over the methods of the task; "
             "*: stopped at the LLM budget.") if base else ""
    tex = ["% generated by python -m bench report; needs \\usepackage{booktabs}",
           tables.latex_table(tables.accuracy_table(runs, tests, fmt="latex"),
                              tables.Tex(f"Accuracy (scores x100) with {llm}. {marks}"), "accuracy"), ""]
    ablation_tex = tables.data_ablation_table(runs, tests, fmt="latex")
    if ablation_tex:
        tex += [tables.latex_table(ablation_tex, tables.Tex("LTR selectors trained on their own pulls and on the DEARICL "
                                                            "run's log (the paper's Table 3). " + marks), "data-ablation"), ""]
    extra_tex = tables.extra_table(runs, fmt="latex")
    if extra_tex:
        tex += [tables.latex_table(extra_tex, "Secondary metrics (x100).", "secondary"), ""]
    tex += [tables.latex_table(tables.calls_table(runs, fmt="latex"),
                               "Distinct LLM calls per method and task: selection phase / inference phase.", "calls"), "",
            tables.latex_table(tables.time_table(runs, fmt="latex"),
                               "Inference time: seconds per test query (selection plus the LLM call).", "time"), "",
            tables.latex_table(tables.selection_time_table(runs, fmt="latex"),
                               "Selection time: seconds per method and task.", "selection-time")]
    return "\n".join(md) + "\n", "\n".join(tex) + "\n"


def bandit_traces(out: Path) -> dict[str, dict[str, list[dict]]]:
    """task -> method -> per-round trace rows, for fits that ran the gap-index loop."""
    traces: dict[str, dict[str, list[dict]]] = {}
    for (method, task), fit in read_fits(out / "fits.jsonl").items():
        rows = [r for r in fit.trace if "gap_index" in r]
        # a fit the budget ended in its first round traced no round, but it ran the loop
        loop = any("stop_rule" in r.get("settings", {}) for r in fit.trace if r.get("summary"))
        if rows or loop:
            traces.setdefault(task, {})[method] = fit.trace
    return traces


def bandit_settings(out: Path) -> list[str]:
    """One settings line per bandit-based fit: stop rule, epsilon, delta, m, |C_t|, arms, cold start, budget;
    and the LTR selectors' test-time candidate set."""
    lines = []
    for (method, task), fit in read_fits(out / "fits.jsonl").items():
        summary = next((r for r in fit.trace if r.get("summary") and "settings" in r), None)
        ltr = next((r for r in fit.trace if r.get("ltr")), None)
        if summary is None:
            continue
        st = summary["settings"]
        line = (f"- `{method}` on {task}: stops when {st['stop_rule']}; epsilon {st['epsilon']}, delta {st['delta']}, "
                f"m {st['m']}, |C_t| {st['challengers']}, {st['n_arms']} arms, cold start {st['cold_start']}, "
                f"max pulls {st['max_pulls']}, pull rule {st['selection_rule']}, {st['surrogate']} surrogate, "
                f"budget {fit.budget}")
        if "pulls_per_query" in summary:
            line += f", {summary['pulls_per_query']} pulls per query"
        if ltr:
            line += f"; LTR test-time candidates: {ltr['candidate_set']}, training data: {ltr['ltr_data']}"
        lines.append(line)
    return lines


def per_query_runs(out: Path) -> dict[tuple[str, str], list]:
    """(method, task) -> convergence-table cells summarising a per-query bandit's runs over its test queries, from
    each record's select_info (rounds, pulls, stopped_by, calls asked)."""
    runs: dict[tuple[str, str], list[dict]] = {}
    if (out / "records.jsonl").exists():
        for rec in read_records(out / "records.jsonl"):
            if "stopped_by" in rec.select_info and "rounds" in rec.select_info:
                runs.setdefault((rec.method, rec.task), []).append(rec.select_info)

    def spread(values: list[int]) -> str:
        return f"{int(np.median(values))} ({min(values)}–{max(values)}) per query"

    cells = {}
    for key, infos in runs.items():
        stops: dict[str, int] = {}
        for info in infos:
            stops[info["stopped_by"]] = stops.get(info["stopped_by"], 0) + 1
        cells[key] = [spread([i["rounds"] for i in infos]), spread([i["pulls"] for i in infos]),
                      f"{sum(i.get('llm_calls_requested', 0) for i in infos)} asked",
                      ", ".join(f"{stop} {n}/{len(infos)}" for stop, n in sorted(stops.items())), "n/a", "n/a", "n/a"]
    return cells


def convergence_section(out: Path) -> list[str]:
    traces = bandit_traces(out)
    if not traces:
        return []
    from tabulate import tabulate

    rows, per_query = [], per_query_runs(out)
    for task, by_method in traces.items():
        for method, trace in by_method.items():
            if (method, task) in per_query:  # one bandit per test query: its fit traced no round of its own
                rows.append([method, task, *per_query[(method, task)]])
                continue
            steps = [r for r in trace if "gap_index" in r]
            summary = next((r for r in trace if r.get("summary")), {})
            # a certified stop's loop (lucb-static) times no rounds and knows no regret: those cells say n/a
            wall = sum(r.get("seconds", 0.0) for r in steps)
            outside = sum(r.get("seconds_outside_llm", 0.0) for r in steps)
            last = steps[-1] if steps else {"gap_index": float("nan")}  # a budget can end a fit in its first round
            regret = last.get("simple_regret", float("nan"))
            # the loop's own count: a round cut by the budget in its pull has no trace row but did run
            rounds = summary.get("rounds", len(steps))
            rows.append([method, task, rounds, summary.get("pulls", last.get("pulls_after", last.get("pulls"))),
                         last.get("llm_calls_total", "n/a"), summary.get("stopped_by", ""), f"{last['gap_index']:.4f}",
                         f"{regret:.4f} ({last['regret_kind']})" if regret == regret else "n/a",
                         f"{100 * outside / wall:.1f}%" if wall > 0 else "n/a"])
        convergence_plot(by_method, out / f"convergence_{task}.png", title=f"{task}: gap index and simple regret")
    lines = ["## Bandit convergence", "",
             "Per round of the gap-index loop: B_t(ch_t, b_t) and the simple regret of U_t. With an LLM the truth is "
             "unknown, so regret is 'observed': the best j observed arm means minus those of U_t's j pulled members. "
             "'Time outside LLM' is bookkeeping + reward scoring over wall time; a fit answered from the cache "
             "(e.g. one repeating an earlier fit's calls) spends almost no time in the LLM and shows close to 100%. "
             "A selector that runs one bandit per test query (case-dynamic) has a row over its queries: median "
             "(min–max) rounds and pulls per query, the calls its queries asked for (cache hits included) and how "
             "many queries each stop reason ended.", "",
             tabulate(rows, headers=["Method", "Task", "Rounds", "Pulls", "LLM calls", "Stopped by", "Final gap",
                                     "Final simple regret", "Time outside LLM"], tablefmt="github"), ""]
    lines += [f"![convergence {task}](convergence_{task}.png)" for task in traces] + [""]
    return lines


def write_report(out: Path, baseline: str | None = None, prices: PriceTable | None = None, exemplars: int = 0,
                 exemplar_methods: tuple[str, str] | None = None) -> Path:
    out = Path(out)
    md, tex = render(out, baseline, prices, exemplars, exemplar_methods)
    runs = load_results(out)["runs"]
    if runs:
        selection_runtime_chart(runs, out / "selection_runtime.png")
        accuracy_vs_calls(runs, out / "accuracy_vs_calls.png")
    (out / "report.md").write_text(md, encoding="utf-8")
    (out / "report.tex").write_text(tex, encoding="utf-8")
    return out / "report.md"


def seed_groups(loaded: dict[Path, dict]) -> list[list[Path]]:
    """Run folders (with their results) grouped by everything but the seed (same LLMs and settings)."""
    groups: dict[str, list[Path]] = {}
    for folder, results in loaded.items():
        setting = {k: v for k, v in results.get("config", {}).items() if k != "seed"}
        key = json.dumps([setting, results.get("llm", ""), results.get("selection_llm", "")], sort_keys=True,
                         default=str)
        groups.setdefault(key, []).append(folder)
    return list(groups.values())


def seeds_of(results: list[dict]) -> set:
    return {r.get("config", {}).get("seed") for r in results}


def seeds_report(results: list[dict], name: str) -> tuple[str, list[dict], dict]:
    """(label, runs, cells) of one setting run with several seeds: per (method, task) the scores of every
    seed that has one."""
    runs = [r for res in results for r in res["runs"] if tables.DATA_VARIANT not in r["method"]]
    scores: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        if run.get("score") is not None:
            scores.setdefault((run["method"], run["task"]), []).append(run["score"])
    label = f"{results[0].get('llm', '') or name} ({len(seeds_of(results))} seeds)"
    return label, runs, scores


def seed_cell(values: list[float] | None) -> str:
    if not values:
        return "failed"
    if len(values) == 1:
        return f"{100 * values[0]:.2f} (1 seed)"
    return f"{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f} ({len(values)})"


def merged_report(dirs: list[Path], baseline: str | None = None) -> str:
    """Several runs in one table. Folders that differ only in the seed are aggregated (mean ± sd over seeds,
    the number of seeds in brackets); otherwise one column group per run (e.g. one per inference LLM)."""
    from tabulate import tabulate

    loaded = {Path(d): load_results(Path(d)) for d in dirs}  # each results.json read once
    grouped = seed_groups(loaded)
    if any(len(seeds_of([loaded[d] for d in group])) > 1 for group in grouped):
        columns, every_run, cells = [], [], {}
        for g, group in enumerate(grouped):
            label, runs, scores = seeds_report([loaded[d] for d in group], group[0].name)
            every_run += runs
            for task in dict.fromkeys(r["task"] for r in runs):
                columns.append((g, label, task))
            cells.update({(g, m, t): v for (m, t), v in scores.items()})
        methods = list(dict.fromkeys(r["method"] for r in every_run))
        present = {(r["method"], r["task"]) for r in every_run}
        rows = tables.grouped_rows(every_run, methods, lambda m: [
            seed_cell(cells.get((g, m, t))) if (m, t) in present else "" for g, _, t in columns],
            len(columns), "github")
        headers = ["Method"] + [f"{label}: {t}" for _, label, t in columns]
        return "\n".join(["# Seeds report", "", f"Runs: {', '.join(f'`{d}`' for d in dirs)}. Folders that differ "
                           "only in `--seed` are one column group. Scores ×100: mean ± standard deviation over seeds "
                           "(number of seeds); per-seed significance is in each folder's report.", "",
                           tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True), ""])
    groups, labels = [], []
    for folder in dirs:
        results = loaded[Path(folder)]
        runs = [r for r in results["runs"] if tables.DATA_VARIANT not in r["method"]]
        base = tables.pick_baseline(runs, baseline)
        tests = tables.significance(read_records(Path(folder) / "records.jsonl"), base) if base else {}
        label = results.get("llm", "") or Path(folder).name
        groups.append((runs, tests, base))
        labels.append(label)
    # the same LLM twice (e.g. two decoding settings): tell the column groups apart by folder
    labels = [f"{label} ({Path(d).name})" if labels.count(label) > 1 else label for label, d in zip(labels, dirs)]
    every_run = [r for runs, _, _ in groups for r in runs]
    methods = list(dict.fromkeys(r["method"] for r in every_run))
    columns = [(i, task) for i, (runs, _, _) in enumerate(groups) for task in dict.fromkeys(r["task"] for r in runs)]
    cell = {(i, r["method"], r["task"]): r for i, (runs, _, _) in enumerate(groups) for r in runs}
    rows = tables.grouped_rows(every_run, methods, lambda m: [
        tables.score_cell(cell.get((i, m, t)), groups[i][1].get((m, t)), "github") for i, t in columns],
        len(columns), "github")
    headers = ["Method"] + [f"{labels[i]}: {t}" for i, t in columns]
    selection = {results.get("selection_llm", "") for results in loaded.values()}
    lines = ["# Merged report", "", f"Runs: {', '.join(f'`{d}`' for d in dirs)}. One column group per run "
             f"(inference LLM); selection LLM(s): {', '.join(f'`{s}`' for s in sorted(selection) if s)}.", "",
             f"Scores ×100; {tables.DAGGER} / {tables.WORSE}: paired t-test against each run's baseline "
             f"({', '.join(sorted({b for _, _, b in groups if b}))}), p < 0.05; {tables.HOLM_BETTER} / "
             f"{tables.HOLM_WORSE}: the same after Holm's correction over the methods of the task.", "",
             tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True), ""]
    return "\n".join(lines)
