"""In-context influences (Nguyen and Wong 2023, "In-context Example Selection with Influences"): each candidate
demonstration is scored by how much the validation accuracy of random prompts changes when it is in them; the
k most influential serve every query.

Follows the authors' code (BrachioLab/incontext_influences: icl_influence.py, icl_datamodel.py, evaluate.py):
- a fixed candidate set (their 400 training examples; here `n_candidates` pool items, seeded) and `n_subsets`
  random subsets of `subset_size` candidates (100 subsets of 18 by default);
- subsets are label-balanced on classification tasks (subset_size // labels of each label, then shuffled) and
  uniform otherwise (their `sample_subset`);
- each subset, as a prompt in its drawn order, is evaluated on every validation item (their 200 dev items):
  acc(S) = the mean reward;
- influence I(x) = mean acc(S) over subsets holding x - mean acc(S) over the others; a candidate in no subset
  (or in all) scores 0 (their `non_coverage`);
- the k candidates with the highest influence, in ascending order, the most influential last, next to the query
  (their `incontext_influence_positive`); ties keep candidate order (a stable sort).

Deviations, with reasons:
- the reward is the run's selection reward (the task's metric or the gold label's probability, BERTScore for
  generation), as for every selector here; theirs is 0/1 accuracy from summed option cross-entropy;
- on a task with more labels than `subset_size` the remainder of the label-balanced draw goes to labels drawn at
  random; theirs go to the first labels in order, so with 5 shots of TREC's 6 labels the sixth never appears;
The defaults are their code's (400 candidates, 100 subsets of 18: each candidate in 4.5 subsets on average; their
README runs 650 subsets and their paper aims at 30 or more appearances; their README also asks `subset_size` to
match the evaluation k). `n_candidates` and `n_subsets` set the cost, n_subsets x validation items calls; the
scale beside the score gives the mean appearances of a candidate.
Under `--llm-budget` the influences come from the subsets evaluated before it ran out (a warning on the row).
"""
from __future__ import annotations

import random

import numpy as np

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from methods.base import FitContext, Selector, register


def influences(members: np.ndarray, accuracy: np.ndarray, n_candidates: int) -> np.ndarray:
    """I(x) = mean accuracy of the subsets holding x minus that of the others; 0 where either side is empty.
    members: [subsets, size] candidate indices; accuracy: [subsets]."""
    holds = np.zeros((len(members), n_candidates), dtype=bool)
    np.put_along_axis(holds, members, True, axis=1)
    count_in = holds.sum(axis=0)
    count_out = len(members) - count_in
    mean_in = (holds * accuracy[:, None]).sum(axis=0) / np.maximum(count_in, 1)
    mean_out = (~holds * accuracy[:, None]).sum(axis=0) / np.maximum(count_out, 1)
    return np.where((count_in > 0) & (count_out > 0), mean_in - mean_out, 0.0)


def draw_subset(candidates: list[Item], size: int, labels: tuple[str, ...], rng: random.Random) -> list[int]:
    """Candidate indices: label-balanced when the task has labels (their sample_subset), else uniform."""
    if not labels:
        return rng.sample(range(len(candidates)), size)
    by_label = {label: [i for i, c in enumerate(candidates) if c.answer == label] for label in labels}
    present = [label for label in labels if by_label[label]]
    quota = {label: size // len(present) for label in present}
    for label in rng.sample(present, size % len(present)):
        quota[label] += 1
    chosen: list[int] = []
    for label in present:
        chosen += rng.sample(by_label[label], min(quota[label], len(by_label[label])))
    rest = [i for i in range(len(candidates)) if i not in set(chosen)]
    chosen += rng.sample(rest, size - len(chosen))  # a label with too few candidates: the others fill in
    rng.shuffle(chosen)
    return chosen


@register("influence")
class InContextInfluence(Selector):
    level = "task"

    def __init__(self, k: int = 5, n_candidates: int = 400, n_subsets: int = 100, subset_size: int = 18):
        super().__init__(k)
        for name, value in (("n_candidates", n_candidates), ("n_subsets", n_subsets), ("subset_size", subset_size)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"influence: {name} must be an integer >= 1, got {value!r}")
        self.n_candidates, self.n_subsets, self.subset_size = n_candidates, n_subsets, subset_size

    def check_splits(self, task, pool: int, validation: int) -> None:
        super().check_splits(task, pool, validation)
        if validation < 1:
            raise ConfigError("influence evaluates its subsets on validation items: --n-val must be at least 1")
        if min(self.n_candidates, pool) <= max(self.subset_size, self.k):
            raise ConfigError(f"influence: the candidates (min of n_candidates {self.n_candidates} and the pool "
                              f"{pool}) must outnumber subset_size ({self.subset_size}) and k ({self.k})")

    def fit(self, ctx: FitContext) -> "InContextInfluence":
        self.check_pool(ctx)
        self.candidates_ = ctx.rng("influence-candidates").sample(ctx.pool, min(self.n_candidates, len(ctx.pool)))
        rng = ctx.rng("influence-subsets")
        subsets = [draw_subset(self.candidates_, self.subset_size, ctx.task.labels, rng) for _ in range(self.n_subsets)]
        accuracy = []
        for subset in subsets:
            try:
                accuracy.append(float(np.mean(ctx.oracle.pull([self.candidates_[i] for i in subset],
                                                              ctx.validation))))
            except BudgetExhausted:
                break
        if not accuracy:
            raise FitFailed("influence: --llm-budget ended before one subset was evaluated; raise the budget")
        if len(accuracy) < len(subsets):
            self.warn(f"influence: --llm-budget ended the evaluation: {len(accuracy)} of {len(subsets)} subsets")
        self.members_ = np.array(subsets[:len(accuracy)])
        self.accuracy_ = np.array(accuracy)
        self.influence_ = influences(self.members_, self.accuracy_, len(self.candidates_))
        top = np.argsort(self.influence_, kind="stable")[-self.k:]  # ascending: the most influential last
        self.demos_ = [self.candidates_[i] for i in top]
        appearances = np.bincount(self.members_.ravel(), minlength=len(self.candidates_))
        self.summary_ = {"summary": True, "subsets": len(accuracy), "candidates": len(self.candidates_),
                         "uncovered": int((appearances == 0).sum()), "mean_appearances": float(appearances.mean()),
                         "llm_calls": ctx.oracle.calls, "best_influence": float(self.influence_[top[-1]])}
        return self

    def select(self, query: Item) -> list[Item]:
        return list(self.demos_)

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return self.n_subsets * n_val

    def scale(self) -> dict:
        summary = getattr(self, "summary_", None)
        if summary is None:
            return {}
        return {"subsets evaluated": summary["subsets"], "subset size": self.subset_size,
                "candidates": summary["candidates"], "appearances a candidate": round(summary["mean_appearances"], 1),
                "authors' scale": "400 candidates, 100 subsets of 18 (README: 650), 200 dev items, OPT-6.7B"}

    def trace(self) -> list[dict]:
        summary = getattr(self, "summary_", None)
        return [summary] if summary else []
