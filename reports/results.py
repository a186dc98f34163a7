"""results.json: one summary row per (method, task), built from records, fits and calls; results.csv: the
same in long format (one row per method x task x metric)."""
from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.llm.calllog import read_calls
from bench.records import read_fits, read_records
from bench.tasks import TASKS
from reports.costs import token_totals
from reports.fingerprints import fingerprint
from reports.stats import bootstrap_ci

# a row's wall-clock fields: they differ between two runs of the same selections and answers
TIMING_KEYS = ("selection_seconds", "selection_time", "inference_seconds_per_query", "inference_seconds_mean",
               "inference_seconds_first")


def build_results(out: Path, *, bertscore=None, encoder: str = "", llm: str = "", selection_llm: str = "",
                  meta: dict | None = None) -> dict:
    """`meta` (command, options, versions, times) is kept as given."""
    out = Path(out)
    records = read_records(out / "records.jsonl")
    fits = read_fits(out / "fits.jsonl")
    calls = list(read_calls(out / "calls.jsonl"))
    distinct: dict[tuple, set] = defaultdict(set)
    for call in calls:
        distinct[(call["method"], call["task"], call["phase"])].add(call["key"])
    uncached: dict[tuple, int] = defaultdict(int)
    tokens: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
    for (method, task, phase, _model), row in token_totals(calls).items():  # summed over models
        uncached[(method, task, phase)] += row["calls"]
        for name in ("prompt_tokens", "prefilled_tokens", "completion_tokens"):
            tokens[(method, task, phase)][name] += row[name]
    by_run: dict[tuple, list] = defaultdict(list)
    for rec in records:
        by_run[(rec.method, rec.task)].append(rec)
    config = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    info = config.get("task_info", {})
    order = config.get("methods") or sorted({m for m, _ in by_run})
    runs = []
    for method in order:
        for task in config.get("identity", {}).get("tasks") or sorted({t for _, t in by_run}):
            recs = by_run.get((method, task))
            fit = fits.get((method, task))
            if fit is not None and fit.error:  # no score, even when some items were answered before it failed
                runs.append(failed_row(fit, task, len(distinct[(method, task, "selection")])
                                       if distinct else fit.selection_calls, info))
                continue
            if not recs:
                continue
            requested = (fit.selection_calls if fit else 0) + sum(
                r.select_info.get("llm_calls_requested", 0) for r in recs)
            extra_keys = sorted({k for r in recs for k in r.extra})
            ci_low, ci_high = bootstrap_ci([r.score for r in recs])
            labels = info.get(task, {}).get("labels")
            corpus = {"macro_f1": macro_f1(recs, labels)} if labels else {}  # beside accuracy, for unbalanced sets
            prints, per_item = fingerprint(recs)
            runs.append({
                "method": method,
                "task": task,
                "level": fit.level if fit else "",
                "group": (fit.group or fit.level) if fit else "",
                "metric": metric_name(task, info),
                "metric_label": metric_label(task, info),
                **{k: v for k, v in info.get(task, {}).items() if k in ("scoring", "calibration", "reward")},
                "score": float(np.mean([r.score for r in recs])),
                "ci_low": ci_low, "ci_high": ci_high,  # 95%, bootstrap over items
                "n": len(recs),
                # the call log is the truth (instance-level bandits also call the LLM inside select())
                "llm_calls": {"selection": len(distinct[(method, task, "selection")]) if distinct
                              else (fit.selection_calls if fit else 0),
                              "inference": len(distinct[(method, task, "inference")]) or len(recs)},
                # calls asked for, cache hits included (per-query bandits re-ask what other queries asked)
                "llm_calls_requested": {"selection": requested},
                "llm_calls_uncached": {"selection": uncached[(method, task, "selection")],
                                       "inference": uncached[(method, task, "inference")]},
                "tokens": {phase: dict(tokens[(method, task, phase)]) for phase in ("selection", "inference")},
                "selection_seconds": fit.selection_seconds if fit else 0.0,
                "selection_time": selection_time(fit),
                "scale": dict(getattr(fit, "scale", {}) or {}) if fit else {},  # what the fit ran at
                # the median over items: the first call of a run (loading, warming, a busy machine) can take
                # 30x the others and would move a mean; the mean and the first call are kept beside it
                "inference_seconds_per_query": float(np.median([r.latency_s for r in recs])),
                "inference_seconds_mean": float(np.mean([r.latency_s for r in recs])),
                "inference_seconds_first": float(recs[0].latency_s) if recs else None,
                "budget": fit.budget if fit else None,
                "budget_exhausted": bool(fit and fit.budget_exhausted),
                "selection_reused_from": fit.reused_from if fit else "",
                "extra": {**{k: float(np.mean([r.extra[k] for r in recs if k in r.extra])) for k in extra_keys},
                          **{k: v[0] for k, v in corpus.items()}},
                "extra_ci": {**{k: list(bootstrap_ci([r.extra[k] for r in recs if k in r.extra])) for k in extra_keys},
                             **{k: list(v[1:]) for k, v in corpus.items()}},
                "warnings": list(fit.warnings) if fit else [],
                "error": None,
                "fingerprint": prints,  # what was selected and answered (reports/fingerprints.py)
                "items": per_item,
            })
    # the languages BERTScore served (as reward or metric); runs older than task_info list every task's
    langs = sorted({info[t]["lang"] if t in info else TASKS[t].lang for t in {r["task"] for r in runs}
                    if (t in info and (info[t]["metric"] == "bertscore_f1" or info[t].get("reward") == "bertscore"))
                    or (t not in info and t in TASKS)})
    return {
        "meta": meta or {},
        "score_scale": SCORE_SCALE,
        "runs": runs,
        "llm": llm,
        "selection_llm": selection_llm or llm,
        "encoder": encoder,
        "bertscore": {lang: bertscore.description(lang) for lang in langs} if bertscore else {},
        "config": config.get("identity", {}),
        "cells": config.get("cells", {}),  # the settings each selector's cells were run with
    }


def selection_time(fit) -> dict:
    """A fit's seconds split into embedding, LLM calls and the rest (training, search); zeros when replayed."""
    if fit is None:
        return {"embedding": 0.0, "llm": 0.0, "other": 0.0}
    embedding, llm = getattr(fit, "embedding_seconds", 0.0), getattr(fit, "llm_seconds", 0.0)
    return {"embedding": embedding, "llm": llm,
            "other": round(max(0.0, fit.selection_seconds - embedding - llm), 3)}


# run folders older than config.json's task_info scored these tasks with another metric than today's
LEGACY_METRICS = {"wmt19": ("bertscore_f1", "BERTScore F1")}  # chrF became WMT19's metric on 2026-11-27


def metric_name(task: str, info: dict | None = None) -> str:
    if task in (info or {}):
        return info[task]["metric"]
    if task in LEGACY_METRICS:
        return LEGACY_METRICS[task][0]
    return TASKS[task].metric_name if task in TASKS else ""


def metric_label(task: str, info: dict | None = None) -> str:
    if task in (info or {}):
        return info[task]["metric_label"]
    if task in LEGACY_METRICS:
        return LEGACY_METRICS[task][1]
    cls = TASKS.get(task)
    return (cls.metric_label or cls.metric_name) if cls else ""


def macro_f1(recs, labels: list[str], resamples: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """Macro-F1 over the task's labels (an unanswered item counts against its gold label), with a 95% percentile
    bootstrap interval over items."""
    from sklearn.metrics import f1_score

    recs = sorted(recs, key=lambda r: r.item_id)  # the same interval whatever order the records were merged in
    gold = np.array([r.gold for r in recs])
    pred = np.array([r.prediction for r in recs])
    score = float(f1_score(gold, pred, labels=labels, average="macro", zero_division=0))
    rng = np.random.default_rng(seed)
    if len(recs) < 2:
        return score, None, None
    draws = [rng.integers(0, len(recs), len(recs)) for _ in range(resamples)]
    scores = resampled_macro_f1(gold, pred, labels, np.stack(draws))
    return score, float(np.percentile(scores, 2.5)), float(np.percentile(scores, 97.5))


def resampled_macro_f1(gold: np.ndarray, pred: np.ndarray, labels: list[str], draws: np.ndarray) -> np.ndarray:
    """sklearn's macro-F1 (zero_division=0) of each row of item indices in `draws`, from per-label counts: 1000
    calls of f1_score took 3 s per classification run in its input checks."""
    gold_is = np.stack([gold == label for label in labels], axis=1).astype(float)  # items x labels
    pred_is = np.stack([pred == label for label in labels], axis=1).astype(float)
    scores = np.empty(len(draws))
    for start in range(0, len(draws), 100):  # 100 resamples at a time: the counts stay small for large test sets
        rows = draws[start:start + 100]
        offsets = rows + len(gold) * np.arange(len(rows))[:, None]
        counts = np.bincount(offsets.ravel(), minlength=len(rows) * len(gold)).reshape(len(rows), len(gold))
        tp, true_sum, pred_sum = counts @ (gold_is * pred_is), counts @ gold_is, counts @ pred_is
        denom = true_sum + pred_sum
        f1 = np.divide(2.0 * tp, denom, out=np.zeros_like(denom), where=denom > 0)
        scores[start:start + len(rows)] = f1.mean(axis=1)
    return scores


def failed_row(fit, task: str, selection_calls: int, info: dict | None = None) -> dict:
    """A (method, task) whose fit failed: no score, the reason in `error`."""
    return {"method": fit.method, "task": task, "level": fit.level, "group": fit.group or fit.level,
            "metric": metric_name(task, info), "metric_label": metric_label(task, info),
            "score": None, "ci_low": None,
            "ci_high": None, "n": 0,
            "llm_calls": {"selection": selection_calls, "inference": 0},
            "llm_calls_uncached": {"selection": 0, "inference": 0}, "tokens": {},
            "selection_seconds": fit.selection_seconds, "inference_seconds_per_query": None,
            "inference_seconds_mean": None, "inference_seconds_first": None,
            "budget": fit.budget, "budget_exhausted": fit.budget_exhausted,
            "selection_reused_from": "", "extra": {}, "extra_ci": {}, "warnings": list(fit.warnings),
            "error": fit.error}


def failed_runs(results: dict) -> list[dict]:
    return [r for r in results.get("runs", []) if r.get("error")]


SCORE_SCALE = "0-1"  # scores, intervals and secondary metrics here; the console and the reports show them x100
CSV_COLUMNS = ("method", "task", "metric", "scale", "score", "ci_low", "ci_high", "n", "selection_calls",
               "inference_calls", "selection_seconds", "error")


def long_rows(results: dict) -> list[dict]:
    """One row per method x task x metric: the task's metric, then every extra metric (e.g. chrF)."""
    rows = []
    for run in results.get("runs", []):
        common = {"method": run["method"], "task": run["task"], "n": run["n"],
                  "selection_calls": run["llm_calls"]["selection"], "inference_calls": run["llm_calls"]["inference"],
                  "selection_seconds": run["selection_seconds"], "error": run.get("error") or "",
                  "scale": SCORE_SCALE}
        rows.append({**common, "metric": run["metric"], "score": run["score"], "ci_low": run.get("ci_low"),
                     "ci_high": run.get("ci_high")})
        for name, value in run.get("extra", {}).items():
            low, high = run.get("extra_ci", {}).get(name, (None, None))
            rows.append({**common, "metric": name, "score": value, "ci_low": low, "ci_high": high})
    return rows


def write_results(out: Path, results: dict) -> None:
    (Path(out) / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    with open(Path(out) / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: ("" if row[k] is None else row[k]) for k in CSV_COLUMNS} for row in long_rows(results))


def load_results(path: Path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    from bench.errors import DataError

    if not path.exists():
        raise DataError(f"no results file at {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg})") from None


def summary_table(results: dict) -> str:
    """The console's last word on a run: per method and task, n, the score x100 (the reports' scale) with its
    95% bootstrap interval, and the LLM calls."""
    from tabulate import tabulate

    rows = []
    for run in results["runs"]:
        label = run.get("metric_label") or run["metric"]
        if run["score"] is None:
            score, interval = "FAILED", ""
        else:
            score = f"{100 * run['score']:.2f}"
            interval = "" if run.get("ci_low") is None else f"[{100 * run['ci_low']:.1f}, {100 * run['ci_high']:.1f}]"
        warned = f"{len(run['warnings'])}" if run.get("warnings") else ""
        rows.append([run["method"], run["task"], label, run["n"], score, interval,
                     f"{run['llm_calls']['selection']}/{run['llm_calls']['inference']}", warned])
    return tabulate(rows, headers=["method", "task", "metric", "n", "score ×100", "95% CI ×100", "calls sel/inf",
                                   "warnings"], tablefmt="simple", disable_numparse=True, colalign=(
        "left", "left", "left", "right", "right", "left", "right", "right"))
