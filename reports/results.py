"""results.json: one summary row per (method, task), built from records, fits and calls."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.llm.calllog import read_calls
from bench.records import read_fits, read_records
from bench.tasks import TASKS
from reports.costs import token_totals


def build_results(out: Path, *, bertscore=None, encoder: str = "", llm: str = "", selection_llm: str = "") -> dict:
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
    order = config.get("methods") or sorted({m for m, _ in by_run})
    runs = []
    for method in order:
        for task in config.get("identity", {}).get("tasks") or sorted({t for _, t in by_run}):
            recs = by_run.get((method, task))
            fit = fits.get((method, task))
            if fit is not None and fit.error:  # no score, even when some items were answered before it failed
                runs.append(failed_row(fit, task, len(distinct[(method, task, "selection")])
                                       if distinct else fit.selection_calls))
                continue
            if not recs:
                continue
            requested = (fit.selection_calls if fit else 0) + sum(
                r.select_info.get("llm_calls_requested", 0) for r in recs)
            extra_keys = sorted({k for r in recs for k in r.extra})
            runs.append({
                "method": method,
                "task": task,
                "level": fit.level if fit else "",
                "group": (fit.group or fit.level) if fit else "",
                "metric": TASKS[task].metric_name if task in TASKS else "",
                "score": float(np.mean([r.score for r in recs])),
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
                "inference_seconds_per_query": float(np.mean([r.latency_s for r in recs])),
                "budget": fit.budget if fit else None,
                "budget_exhausted": bool(fit and fit.budget_exhausted),
                "selection_reused_from": fit.reused_from if fit else "",
                "extra": {k: float(np.mean([r.extra[k] for r in recs if k in r.extra])) for k in extra_keys},
                "warnings": list(fit.warnings) if fit else [],
                "error": None,
            })
    langs = sorted({TASKS[t].lang for t in {r["task"] for r in runs} if t in TASKS})
    return {
        "runs": runs,
        "llm": llm,
        "selection_llm": selection_llm or llm,
        "encoder": encoder,
        "bertscore": {lang: bertscore.description(lang) for lang in langs} if bertscore else {},
        "config": config.get("identity", {}),
    }


def failed_row(fit, task: str, selection_calls: int) -> dict:
    """A (method, task) whose fit failed: no score, the reason in `error`."""
    return {"method": fit.method, "task": task, "level": fit.level, "group": fit.group or fit.level,
            "metric": TASKS[task].metric_name if task in TASKS else "", "score": None, "n": 0,
            "llm_calls": {"selection": selection_calls, "inference": 0},
            "llm_calls_uncached": {"selection": 0, "inference": 0}, "tokens": {},
            "selection_seconds": fit.selection_seconds, "inference_seconds_per_query": None,
            "budget": fit.budget, "budget_exhausted": fit.budget_exhausted,
            "selection_reused_from": "", "extra": {}, "warnings": list(fit.warnings), "error": fit.error}


def failed_runs(results: dict) -> list[dict]:
    return [r for r in results.get("runs", []) if r.get("error")]


def write_results(out: Path, results: dict) -> None:
    (Path(out) / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))


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
