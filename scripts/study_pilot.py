"""The pilot: which embedded model, task and answering mode give the selectors something to tell apart.

For each model, task and mode it draws random arms (k demonstrations from the pool), answers the same validation
items with each (bench/answering.py: generated, or label words ranked by log-likelihood, contextually calibrated
or not), and reports:
- how long answers are: completion tokens (median, 90th percentile) and the share cut by max new tokens;
- whether an answer is reached: the share of outputs with an extractable answer;
- the task metric (exact match, accuracy or BERTScore F1, chrF on WMT19) per arm, its spread across arms, and
  a randomised-block F test (items are the blocks; Cochran's Q beside it for 0/1 scores) of "arms differ";
- the selection reward (BERTScore against the gold rationale, or the gold label's probability when ranking):
  arm means, their range, and the same F test: the signal a bandit has to find;
- on the synthetic `rules` task, the known answer: each item after k same-rule vs k other-rule demonstrations.

    .venv/bin/python scripts/study_pilot.py --out studies/embedded-2026/pilot.json
    .venv/bin/python scripts/study_pilot.py --tasks sst2,trec,agnews,rules --modes rank,rank-contextual,generate \
        --arms 10 --n-val 50 --temperature 0 --out studies/pilots/classification-2026-11/pilot.json

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

from bench.answering import answer, rewards as reward_of  # noqa: E402
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
    if ss_arm <= 1e-12:  # every arm scored every item alike on average: no evidence that arms differ
        return 0.0, 1.0
    if ss_res <= 0:
        return float("inf"), 0.0
    f = (ss_arm / df_arm) / (ss_res / df_res)
    return float(f), float(stats.f.sf(f, df_arm, df_res))


def pilot_cell(client: LLMClient, task, bertscore: BertScore, splits, arms: int, k: int, seed: int) -> dict:
    """Arms of k random pool demonstrations, each answered on the same validation items (bench/answering.py,
    so generated or ranked as the task is configured)."""
    rng = random.Random(seed)
    params = client.params_for(task)
    scope = CallScope("pilot", task.name, "selection")
    rewards, metric, tokens, answered, cut, chrf, seconds, gold_probs = [], [], [], [], [], [], [], []
    for arm in range(arms):
        demos = rng.sample(splits.pool, k)
        began = time.perf_counter()
        got = answer(client, task, [demos] * len(splits.validation), splits.validation, scope=scope, params=params)
        seconds.append(time.perf_counter() - began)
        rewards.append(reward_of(task, got, splits.validation, bertscore))
        if got.label_probs is not None:  # ranked: the gold label's probability, the other reward on offer
            gold_probs.append([probs[it.answer] for probs, it in zip(got.label_probs, splits.validation)])
        metric.append(got.scores)
        chrf.append(got.extras.get("chrf", [float("nan")] * len(got.outputs)))
        tokens += [g.completion_tokens for g in got.gens]
        cut += [task.scoring == "generate" and g.completion_tokens >= params.max_new_tokens for g in got.gens]
        answered += [bool(p.strip()) for p in got.predictions]
    rewards, metric = np.asarray(rewards), np.asarray(metric)
    arm_rewards, arm_metric = rewards.mean(axis=1), metric.mean(axis=1)
    f, p = block_f_test(rewards)
    metric_f, metric_p = block_f_test(metric)
    binary = bool(np.isin(metric, (0.0, 1.0)).all())
    return {
        "arms": arms, "items": len(splits.validation), "k": k, **task.settings(),
        "max_new_tokens": params.max_new_tokens if task.scoring == "generate" else None,
        "completion_tokens_median": statistics.median(tokens), "completion_tokens_p90": float(np.percentile(tokens, 90)),
        "share_cut_by_max_tokens": float(np.mean(cut)), "share_with_answer": float(np.mean(answered)),
        "metric_mean": float(metric.mean()), "metric_per_arm": [round(float(x), 4) for x in arm_metric],
        "metric_range_across_arms": float(arm_metric.max() - arm_metric.min()),
        "metric_arm_f": metric_f, "metric_arm_p": metric_p,
        "metric_cochran_q_p": cochran_q(metric) if binary else None,
        "chrf_mean": float(np.nanmean(chrf)) if not np.all(np.isnan(chrf)) else None,
        "reward_mean": float(rewards.mean()), "reward_per_arm": [round(float(x), 4) for x in arm_rewards],
        "reward_range_across_arms": float(arm_rewards.max() - arm_rewards.min()),
        "reward_sd_across_arms": float(arm_rewards.std(ddof=1)),
        "reward_sd_within_arm": float(rewards.std(axis=1, ddof=1).mean()),
        "reward_arm_f": f, "reward_arm_p": p,
        "seconds_per_pull": statistics.median(seconds),
        **(label_prob_stats(np.asarray(gold_probs)) if gold_probs else {}),
    }


def label_prob_stats(table: np.ndarray) -> dict:
    """The gold label's probability as a reward (arms x items): arm means, their range, the block F test."""
    f, p = block_f_test(table)
    means = table.mean(axis=1)
    return {"label_prob_mean": float(table.mean()), "label_prob_per_arm": [round(float(x), 4) for x in means],
            "label_prob_range_across_arms": float(means.max() - means.min()), "label_prob_arm_f": f,
            "label_prob_arm_p": p}


def cochran_q(table: np.ndarray) -> float:
    """Cochran's Q test (statsmodels) of 'the arms' accuracies differ' on an arms x items 0/1 table."""
    from statsmodels.stats.contingency_tables import cochrans_q

    if np.all(table == table[:1]):  # every arm answered every item alike: no evidence of a difference
        return 1.0
    return float(cochrans_q(table.T.astype(int)).pvalue)


def known_answer_cell(client: LLMClient, task, splits, k: int, seed: int) -> dict:
    """`rules` only: each validation item answered after k same-rule demonstrations and after k other-rule ones
    (drawn from the pool), with the exact McNemar test of the paired difference."""
    from reports.stats import mcnemar_exact

    rng = random.Random(seed)
    scope = CallScope("pilot-known-answer", task.name, "selection")
    same, other = [], []
    for item in splits.validation:
        for wanted, scores in ((True, same), (False, other)):
            demos = rng.sample([d for d in splits.pool if (d.answer == item.answer) == wanted], k)
            scores.append(answer(client, task, [demos], [item], scope=scope).scores[0])
    same, other = np.asarray(same), np.asarray(other)
    return {"same_rule_accuracy": float(same.mean()), "other_rule_accuracy": float(other.mean()),
            "difference": float(same.mean() - other.mean()), "mcnemar_p": mcnemar_exact(same, other),
            "chance": 1 / len(task.labels)}


def render_table(pilot: dict) -> str:
    """The pilot as a Markdown table: one row per model, task and mode (scores x100)."""
    from tabulate import tabulate

    rows = []
    for c in pilot["cells"]:
        arms = [100 * x for x in c["metric_per_arm"]]
        known = c.get("known_answer")
        rows.append([c["model"], c["task"], c.get("mode", "generate"), c["items"], c["arms"],
                     f"{100 * c['metric_mean']:.1f}", f"{min(arms):.0f}–{max(arms):.0f}",
                     f"{100 * c['metric_range_across_arms']:.0f}", f"{c['metric_arm_f']:.2f}", f"{c['metric_arm_p']:.2g}",
                     "" if c.get("metric_cochran_q_p") is None else f"{c['metric_cochran_q_p']:.2g}",
                     f"{c.get('reward', 'bertscore')}: {100 * c['reward_range_across_arms']:.1f}", f"{c['reward_arm_p']:.2g}",
                     "" if "label_prob_arm_p" not in c else
                     f"{100 * c['label_prob_range_across_arms']:.1f} (p {c['label_prob_arm_p']:.2g})",
                     "" if not known else f"{100 * known['same_rule_accuracy']:.0f} vs {100 * known['other_rule_accuracy']:.0f}"
                                          f" (p {known['mcnemar_p']:.1g})"])
    return tabulate(rows, headers=["model", "task", "mode", "items", "arms", "acc. ×100 (mean)", "arm range",
                                   "spread", "F (arms)", "p (F)", "p (Cochran Q)", "reward: spread ×100",
                                   "p (reward F)", "gold-label prob.: spread ×100", "same- vs other-rule ×100"],
                    tablefmt="github", disable_numparse=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gemma3-270m,smollm2-135m")
    p.add_argument("--tasks", default="gsm8k,aquarat,wmt19")
    p.add_argument("--modes", default="generate",
                   help="how items are answered, comma-separated: generate, rank, rank-contextual (label words ranked "
                        "by log-likelihood, calibrated or not); a task without labels is always generated")
    p.add_argument("--pool-size", type=int, default=200, help="pool items the arms are drawn from")
    p.add_argument("--max-new-tokens", type=parse_tokens, default=parse_tokens("gsm8k=320,aquarat=320,wmt19=128"),
                   help="per task, e.g. gsm8k=320; other tasks get 1000, under their own cap (a label: 8)")
    p.add_argument("--arms", type=int, default=6)
    p.add_argument("--n-val", type=int, default=10)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default=None, help="override the models' backend (e.g. llamacpp)")
    p.add_argument("--cache", type=Path, default=Path("runs/study-pilot/cache.sqlite"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--table", action="store_true", help="print the Markdown table of an existing --out and stop")
    args = p.parse_args(argv)
    if args.table:
        print(render_table(json.loads(args.out.read_text())))
        return 0
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    cache, bertscore = CallCache(args.cache), BertScore()
    result = {"meta": {"command": " ".join(sys.argv), "settings": {k: str(v) for k, v in vars(args).items()}},
              "cells": []}
    for model in args.models.split(","):
        backend = make_backend(LLMSpec(model, backend=args.backend))
        for name in args.tasks.split(","):
            task = make_task(name, bertscore)
            splits = task.load_splits(default_data_dir(), n_test=1, n_val=args.n_val, pool_size=args.pool_size,
                                      seed=args.seed)
            params = GenerationParams(max_new_tokens=args.max_new_tokens.get(name, 1000), temperature=args.temperature)
            client = LLMClient(backend, cache, CallLog(None), params, "auto")
            modes = args.modes.split(",") if task.labels else ["generate"]
            for mode in dict.fromkeys(modes):
                scoring, _, calibrated = mode.partition("-")
                task.configure(scoring=scoring, calibration=calibrated or "none")
                began = time.perf_counter()
                cell = {"model": model, "task": name, "mode": mode,
                        **pilot_cell(client, task, bertscore, splits, args.arms, args.k, args.seed)}
                if hasattr(task, "same_rule_share"):  # the synthetic task: the truth is known
                    cell["known_answer"] = known_answer_cell(client, task, splits, args.k, args.seed)
                cell["seconds"] = round(time.perf_counter() - began, 1)
                result["cells"].append(cell)
                print(json.dumps({k: v for k, v in cell.items() if not isinstance(v, list)}), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
