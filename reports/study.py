"""A study folder: run folders (its subfolders holding a results.json) rendered together.

`python -m bench report STUDY` re-renders every run's report, then writes STUDY/report.md (and report.tex) with the scores of all
runs (seeds aggregated), the bandit convergence table (selection calls, rounds, stop reasons and selection time,
mean ± sd over seeds) beside the paper's LLM-calls table and rounds, and STUDY/results.json (with `meta`) and
results.csv: every run row with its folder and seed.
"""
from __future__ import annotations

import csv
import json
import math
import re
import statistics
from pathlib import Path

from bench.records import read_fits
from reports.results import load_results
from reports.tables import latex_table, table as render_table

# The paper's Table "Results comparing the number of LLM calls" (dearicl_paper.tex l.807-808) and its rounds (l.817).
PAPER_CALLS = {("case-static", "gsm8k"): 10200, ("case-static", "aquarat"): 4360, ("case-static", "wmt19"): 87,
               ("dearicl-static", "gsm8k"): 2600, ("dearicl-static", "aquarat"): 1580, ("dearicl-static", "wmt19"): 48}
PAPER_ROUNDS = {("case-static", "gsm8k"): 510, ("dearicl-static", "gsm8k"): 130,
                ("case-static", "aquarat"): 238, ("dearicl-static", "aquarat"): 79}
CSV_FIELDS = ("folder", "seed", "method", "task", "group", "score", "ci_low", "ci_high", "n", "selection_calls",
              "inference_calls", "selection_seconds", "error")


def study_runs(folder: Path) -> list[Path]:
    """The run folders of a study (its subfolders holding a results.json), in name order; none for a run folder
    (the study's own results.json, written here, does not make it one)."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "results.json").exists())


def study_part(folder: str, task: str) -> str:
    """The part of the study a run folder belongs to: its name without the task and the seed
    ("rq1-wmt19-seed0" -> "rq1"), so fits of the same method under different settings stay apart."""
    return re.sub(r"-seed\d+$", "", folder).replace(f"-{task}", "") or folder


def replay_sources(loaded: dict[Path, dict], fits: dict[Path, dict]) -> dict[tuple[Path, str, str], tuple[str, int, float]]:
    """(run, method, task) of each replayed fit -> (folder name, selection calls, selection seconds) of the measured
    fit it repeats (the same selection key): a replayed fit costs what that fit cost."""
    measured, replayed = {}, {}
    for run, results in loaded.items():
        calls = {(r["method"], r["task"]): r["llm_calls"]["selection"] for r in results["runs"]}
        for (method, task), fit in fits[run].items():
            if not fit.selection_key:
                continue
            if fit.reused_from:
                replayed[(run, method, task)] = fit.selection_key
            else:
                measured[fit.selection_key] = (run.name, calls.get((method, task), fit.selection_calls),
                                               fit.selection_seconds)
    return {where: measured[key] for where, key in replayed.items() if key in measured}


def convergence_rows(loaded: dict[Path, dict], fits: dict[Path, dict], sources: dict) -> list[dict]:
    """One row per bandit fit (a fit whose trace has a summary with rounds, pulls and a stop reason; UDR's
    summary counts mining rounds, not pulls, and has none): calls, rounds, pulls, stop reason, time.
    `loaded`: run folder -> its results; `fits`: run folder -> its fits (bench.records.read_fits); `sources`:
    replay_sources(loaded, fits)."""
    rows, replayed = [], []
    for folder, results in loaded.items():
        seed = results.get("config", {}).get("seed")
        calls = {(r["method"], r["task"]): r["llm_calls"]["selection"] for r in results["runs"]}
        for (method, task), fit in fits[folder].items():
            summary = next((r for r in fit.trace if r.get("summary") and {"rounds", "pulls", "stopped_by"} <= r.keys()),
                           None)
            if summary is None:
                continue
            row = {"folder": folder.name, "part": study_part(folder.name, task), "seed": seed,
                   "method": method, "task": task, "selection_calls": calls.get((method, task), fit.selection_calls),
                   "rounds": summary["rounds"], "pulls": summary["pulls"], "stopped_by": summary["stopped_by"],
                   "selection_seconds": round(fit.selection_seconds, 1), "selection_key": fit.selection_key,
                   "replayed_from": ""}
            if not fit.reused_from:
                rows.append(row)
            elif (source := sources.get((folder, method, task))) is not None:
                # a replayed fit is the same fit as one another part measured: its part counts that fit's cost
                replayed.append({**row, "selection_calls": source[1], "selection_seconds": round(source[2], 1),
                                 "replayed_from": source[0]})
    return rows + replayed


def score_rows(loaded: dict[Path, dict], sources: dict, baseline: str | None = None) -> list[dict]:
    """One row per (task, part, method) over seeds: score mean (and sd over seeds, or the 95% interval of a single
    seed), secondary metrics (chrF), selection calls; with one seed, the paired t-test against its run's baseline."""
    from bench.records import read_records
    from reports import tables

    cells: dict[tuple[str, str, str], list[tuple[dict, object, str]]] = {}
    for folder, results in loaded.items():
        base = tables.pick_baseline(results["runs"], baseline or part_baseline(folder))
        tests = tables.significance(read_records(folder / "records.jsonl"), base) if base else {}
        for row in results["runs"]:
            key = (row["task"], study_part(folder.name, row["task"]), row["method"])
            source = sources.get((folder, row["method"], row["task"]))
            if source is not None:
                row = {**row, "llm_calls": {**row["llm_calls"], "selection": source[1]}}
            cells.setdefault(key, []).append((row, tests.get((row["method"], row["task"])), base))
    out = []
    for (task, part, method), entries in cells.items():
        rows = [row for row, _, _ in entries]
        scored = [row for row in rows if row.get("score") is not None]
        first, test, base = entries[0]
        out.append({"task": task, "part": part, "method": method, "seeds": len(rows), "failed": len(rows) - len(scored),
                    "metric": first.get("metric_label") or first["metric"], "n": first.get("n"),
                    "scores": [row["score"] for row in scored],
                    "ci": (first.get("ci_low"), first.get("ci_high")) if len(scored) == 1 else None,
                    "extra": {name: [row["extra"][name] for row in scored if name in row.get("extra", {})]
                              for name in (first.get("extra") or {})},
                    "selection_calls": [row["llm_calls"]["selection"] for row in rows],
                    "budget_exhausted": any(row.get("budget_exhausted") for row in rows),
                    "baseline": base, "test": test if len(rows) == 1 else None})
    return sorted(out, key=lambda r: (r["task"], r["part"]))  # stable: each run's own (the paper's) method order


def scores_table(rows: list[dict], fmt: str = "github") -> str:
    from reports.tables import score_cell

    def x100(values: list[float]) -> str:
        return _mean_sd([100 * v for v in values], 2) if values else "failed"

    table = []
    for r in rows:
        if len(r["scores"]) == 1:
            low, high = r["ci"]
            score = score_cell({"score": r["scores"][0], "budget_exhausted": r["budget_exhausted"]}, r["test"], fmt)
            spread = f"[{100 * low:.2f}, {100 * high:.2f}]" if low is not None else ""
        else:
            score, spread = x100(r["scores"]), ""  # mean ± sd over the seeds
        test = r["test"]
        p_holm = math.nan if test is None else test.deciding_p(corrected=True)  # McNemar's for 0/1 scores
        versus = ("baseline" if r["method"] == r["baseline"] else "" if p_holm != p_holm else
                  f"{100 * test.mean_diff:+.2f} (p {p_holm:.3f})")
        extra = ", ".join(f"{name} {x100(values)}" for name, values in r["extra"].items() if values)
        table.append([r["task"], r["part"], r["method"], f"{r['seeds']}" + (f" ({r['failed']} failed)" if r["failed"]
                     else ""), r["n"], r["metric"], score, spread, versus, extra,
                     _mean_sd(r["selection_calls"])])
    return render_table(table, ["Task", "Part", "Method", "Seeds", "n", "Metric", "Score ×100", "95% CI (one seed)",
                                "Δ vs baseline ×100 (Holm p)", "Also ×100", "Selection calls"], fmt)


def _mean_sd(values: list[float], digits: int = 0) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def convergence_table(rows: list[dict], fmt: str = "github") -> str:
    """fmt: "github" (report.md) or "latex" (report.tex)."""
    cells: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        cells.setdefault((row["part"], row["method"], row["task"]), []).append(row)
    table = []
    for (part, method, task), group in sorted(cells.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        stops: dict[str, int] = {}
        for row in group:
            stops[row["stopped_by"]] = stops.get(row["stopped_by"], 0) + 1
        table.append([part, method, task, len(group), _mean_sd([r["selection_calls"] for r in group]),
                      _mean_sd([r["rounds"] for r in group]), _mean_sd([r["pulls"] for r in group]),
                      ", ".join(f"{k} {v}" for k, v in sorted(stops.items())),
                      _mean_sd([r["selection_seconds"] / 60 for r in group], 1),
                      PAPER_CALLS.get((method, task), ""), PAPER_ROUNDS.get((method, task), "")])
    return render_table(table, ["Part", "Method", "Task", "Seeds", "Selection calls", "Rounds", "Pulls",
                                "Stopped by", "Selection min", "Paper: calls", "Paper: rounds"], fmt)


def convergence_figures(folder: Path, fits: dict[Path, dict]) -> dict[str, Path]:
    """STUDY/convergence_<task>.png: every bandit fit's gap index and simple regret per round, over seeds, one
    style per part and method (the paper's Figure 1 and its appendix figures, with seeds)."""
    from reports.plots import convergence_plot
    from reports.render import bandit_traces

    by_task: dict[str, dict[str, list[list[dict]]]] = {}
    for run, run_fits in fits.items():
        replayed = {(method, task) for (method, task), fit in run_fits.items() if fit.reused_from}
        for task, by_method in bandit_traces(run).items():
            for method, trace in by_method.items():
                if (method, task) not in replayed:
                    label = f"{method} ({study_part(run.name, task)})"
                    by_task.setdefault(task, {}).setdefault(label, []).append(trace)
    return {task: convergence_plot(dict(sorted(traces.items())), folder / f"convergence_{task}.png",
                                   title=f"{task}: gap index and simple regret, every seed")
            for task, traces in sorted(by_task.items())}


def part_baseline(run: Path) -> str | None:
    """A study part's paired tests are against its first selector (rq1: `case-static`) where neither of the
    report's defaults (`case-dynamic`, `zero-shot`) ran in it: the baseline its published report was rendered with."""
    methods = [r["method"] for r in json.loads((run / "results.json").read_text())["runs"]]
    return None if {"case-dynamic", "zero-shot"} & set(methods) or not methods else methods[0]


def write_study_report(folder: Path, baseline: str | None = None) -> Path:
    from reports import tables
    from reports.render import write_report

    folder = Path(folder)
    runs = study_runs(folder)
    for run in runs:
        write_report(run, baseline or part_baseline(run))
    md = [f"# Study: {folder.name}", "",
          f"Run folders: {', '.join(f'[`{r.name}`]({r.name}/report.md)' for r in runs)}. Each has its own report "
          "(paired tests, power, costs, convergence plots).", ""]
    loaded = {run: load_results(run) for run in runs}  # each results.json and fits.jsonl read once
    fits = {run: read_fits(run / "fits.jsonl") for run in runs}
    sources = replay_sources(loaded, fits)  # a replayed fit's cost: the fit it repeats
    scores = score_rows(loaded, sources, baseline)
    if scores:
        llms = sorted({results.get("llm", "") for results in loaded.values()} - {""})
        md += ["## Scores", "",
               f"Every (task, part, method) of the study, over its seeds (inference LLM: {', '.join(llms)}). Score ×100: "
               "the mean over seeds ± their sd, or with one seed the score and its 95% bootstrap interval over the test "
               f"items. With one seed, the paired test against that run's baseline (t-test; exact McNemar for "
               f"exact match): {tables.DAGGER} / {tables.WORSE} "
               f"p < 0.05, {tables.HOLM_BETTER} / {tables.HOLM_WORSE} after Holm's correction over the run's methods; "
               "* the selector hit its budget. Each run's report has the tests' details and the minimal detectable "
               "differences.", "", scores_table(scores), ""]
    rows = convergence_rows(loaded, fits, sources)
    if rows:
        md += ["## Bandit convergence and LLM calls", "",
               "Per bandit selector and task, over seeds: distinct selection-phase LLM calls (one per validation item "
               "per pull, the re-scoring pulls included), rounds of the stopping loop, arm pulls, how the fits stopped, "
               "and selection wall time. Part: the run folders' name without task and seed (the study's README says "
               "what each part sets). The paper's columns are its LLM-calls table and the rounds it reports "
               "(Llama 3.2 3B, its validation set): they set the direction, not a target.", "",
               convergence_table(rows), ""]
        shared = sorted({f"`{r['folder']}` ({r['method']}, from `{r['replayed_from']}`)" for r in rows
                         if r["replayed_from"]})
        if shared:
            md += ["Fits replayed from another part's identical fit (same selector code, parameters, data, seed and "
                   f"selection LLM) count that fit's calls and time: {', '.join(shared)}.", ""]
        figures = convergence_figures(folder, fits)
        if figures:
            md += ["Gap index (log scale; dotted: the stopping threshold epsilon) and observed simple regret per round, "
                   "every measured fit of the study, one line per seed (replayed fits are the same lines):", "",
                   *[f"![{task}]({path.name})" for task, path in figures.items()], ""]
    (folder / "report.md").write_text("\n".join(md), encoding="utf-8")
    tex = ["% generated by python -m bench report; needs \\usepackage{booktabs}. Each run folder's report.tex holds "
           "its accuracy, calls and time tables."]
    if scores:
        tex.append(latex_table(scores_table(scores, "latex"), "Scores of every task, part and method over seeds "
                               "(x100; one seed: the 95% bootstrap interval and the paired t-test against the run's "
                               "baseline, Holm-corrected).", "study-scores"))
    if rows:
        tex.append(latex_table(convergence_table(rows, "latex"),
                               "Bandit convergence over seeds: selection calls, rounds, pulls, stop reasons and "
                               "selection time (min), beside the paper's LLM calls and rounds.", "convergence"))
    (folder / "report.tex").write_text("\n".join(tex) + "\n", encoding="utf-8")
    every = [{"folder": run.name, "seed": results.get("config", {}).get("seed"), **row}
             for run, results in loaded.items() for row in results["runs"]]
    meta = {"study": folder.name, "folders": [r.name for r in runs], "rendered_by": f"python -m bench report {folder}"}
    (folder / "results.json").write_text(json.dumps({"meta": meta, "runs": every, "convergence": rows}, indent=2),
                                         encoding="utf-8")
    with (folder / "results.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in every:
            writer.writerow({**row, "selection_calls": row["llm_calls"]["selection"],
                             "inference_calls": row["llm_calls"]["inference"]})
    return folder / "report.md"
