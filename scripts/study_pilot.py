"""The study's pilot: which embedded model, and how many new tokens, give the selectors something to tell apart.

For each model and task it pulls a few random arms (k demonstrations drawn from the pool) on the same validation
items, at the paper's temperature, and reports:
- how long answers are: completion tokens (median, 90th percentile) and the share cut by max new tokens;
- whether an answer is reached: the share of outputs with an extractable answer;
- the task metric (exact match or BERTScore F1, chrF on WMT19) per arm, and its spread across arms;
- the selection reward (BERTScore of the output against the gold rationale): arm means, their range, and a
  randomised-block F test of "arms differ" (items are the blocks), the signal a bandit has to find.

    .venv/bin/python scripts/study_pilot.py --out reports/studies/embedded-2026/pilot.json

Answers are cached (--cache), so a rerun or a longer --arms list repeats no call.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.llm import CallCache, CallLog, CallScope, GenerationParams, LLMClient, LLMSpec, make_backend  # noqa: E402
from bench.metrics import BertScore  # noqa: E402
from bench.options import default_data_dir  # noqa: E402
from bench.tasks import make_task  # noqa: E402


def parse_tokens(text: str) -> dict[str, int]:
    return {task: int(n) for task, n in (pair.split("=") for pair in text.split(","))}


def block_f_test(table: np.ndarray) -> tuple[float, float]:
    """Randomised-block ANOVA on an arms x items table: F and p for 'the arm means differ'."""
    arms, items = table.shape
    grand = table.mean()
    ss_arm = items * ((table.mean(axis=1) - grand) ** 2).sum()
    ss_item = arms * ((table.mean(axis=0) - grand) ** 2).sum()
    ss_res = ((table - grand) ** 2).sum() - ss_arm - ss_item
    df_arm, df_res = arms - 1, (arms - 1) * (items - 1)
    if ss_res <= 0:
        return float("inf"), 0.0
    f = (ss_arm / df_arm) / (ss_res / df_res)
    return float(f), float(stats.f.sf(f, df_arm, df_res))


def pilot_cell(client: LLMClient, task, bertscore: BertScore, splits, arms: int, k: int, seed: int) -> dict:
    rng = random.Random(seed)
    params = client.params_for(task.stop)
    rewards, metric, tokens, answered, cut, chrf, seconds = [], [], [], [], [], [], []
    for arm in range(arms):
        demos = rng.sample(splits.pool, k)
        began = time.perf_counter()
        gens = client.evaluate(task, demos, splits.validation, scope=CallScope("pilot", task.name, "selection"),
                               params=params)
        seconds.append(time.perf_counter() - began)
        outputs = [task.truncate(g.text) for g in gens]
        predictions = [task.extract(o) for o in outputs]
        rewards.append(bertscore.f1(outputs, [task.reward_reference(it) for it in splits.validation], lang=task.lang))
        metric.append(task.score(predictions, splits.validation, outputs))
        chrf.append(task.extra_metrics(outputs, splits.validation).get("chrf", [float("nan")] * len(outputs)))
        tokens += [g.completion_tokens for g in gens]
        cut += [g.completion_tokens >= params.max_new_tokens for g in gens]
        answered += [bool(p.strip()) for p in predictions]
    rewards, metric = np.asarray(rewards), np.asarray(metric)
    arm_rewards, arm_metric = rewards.mean(axis=1), metric.mean(axis=1)
    f, p = block_f_test(rewards)
    return {
        "arms": arms, "items": len(splits.validation), "max_new_tokens": params.max_new_tokens,
        "completion_tokens_median": statistics.median(tokens), "completion_tokens_p90": float(np.percentile(tokens, 90)),
        "share_cut_by_max_tokens": float(np.mean(cut)), "share_with_answer": float(np.mean(answered)),
        "metric_mean": float(metric.mean()), "metric_per_arm": [round(float(x), 4) for x in arm_metric],
        "metric_range_across_arms": float(arm_metric.max() - arm_metric.min()),
        "chrf_mean": float(np.nanmean(chrf)) if not np.all(np.isnan(chrf)) else None,
        "reward_mean": float(rewards.mean()), "reward_per_arm": [round(float(x), 4) for x in arm_rewards],
        "reward_range_across_arms": float(arm_rewards.max() - arm_rewards.min()),
        "reward_sd_across_arms": float(arm_rewards.std(ddof=1)),
        "reward_sd_within_arm": float(rewards.std(axis=1, ddof=1).mean()),
        "reward_arm_f": f, "reward_arm_p": p,
        "seconds_per_pull": statistics.median(seconds),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gemma3-270m,smollm2-135m")
    p.add_argument("--tasks", default="gsm8k,aquarat,wmt19")
    p.add_argument("--max-new-tokens", type=parse_tokens, default=parse_tokens("gsm8k=320,aquarat=320,wmt19=128"))
    p.add_argument("--arms", type=int, default=6)
    p.add_argument("--n-val", type=int, default=10)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default=None, help="override the models' backend (e.g. llamacpp)")
    p.add_argument("--cache", type=Path, default=Path("runs/study-pilot/cache.sqlite"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    cache, bertscore = CallCache(args.cache), BertScore()
    result = {"meta": {"command": " ".join(sys.argv), "settings": {k: str(v) for k, v in vars(args).items()}},
              "cells": []}
    for model in args.models.split(","):
        backend = make_backend(LLMSpec(model, backend=args.backend))
        for name in args.tasks.split(","):
            task = make_task(name, bertscore)
            splits = task.load_splits(default_data_dir(), n_test=1, n_val=args.n_val, pool_size=200, seed=args.seed)
            params = GenerationParams(max_new_tokens=args.max_new_tokens[name], temperature=args.temperature)
            client = LLMClient(backend, cache, CallLog(None), params, "auto")
            began = time.perf_counter()
            cell = {"model": model, "task": name, **pilot_cell(client, task, bertscore, splits, args.arms, args.k,
                                                                args.seed),
                    "seconds": round(time.perf_counter() - began, 1)}
            result["cells"].append(cell)
            print(json.dumps({k: v for k, v in cell.items() if not isinstance(v, list)}), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
