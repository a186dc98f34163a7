"""TopK+MDL, self-adaptive ICL (Wu et al., ACL 2023, "Self-Adaptive In-Context Learning"): among a few candidate
sets drawn from the query's nearest pool items, the one under which the model is most certain of the query's label
(minimum description length: the lowest entropy of its label distribution).

Follows OpenICL's MDLRetriever (Shark-NLP/OpenICL, openicl/icl_retriever/icl_mdl_retriever.py, and the settings of
examples/research_projects/self-adaptive_in-context_learning.ipynb):
- the `candidates` pool items most similar to the query (their candidate_num 30);
- `sets` candidate sets (their select_time 10): the first the k most similar, each other one k candidates drawn at
  random without replacement;
- for each set, the label distribution p(y) of the query under that set's prompt, softmax over the labels of the
  model's log-likelihood; the set with the lowest entropy -sum p log p wins (the first on a tie).

Deviations:
- a label's score is the summed log-likelihood of its label word after the prompt (how this suite ranks labels),
  where OpenICL takes exp(-mean cross-entropy) over the whole query segment with the label; the query part is the
  same for every label of a set, so the two differ by the per-label length normalisation;
- each query's random sets come from a generator seeded by the run's seed and the query's id, so a query gets the
  same sets whatever the order or subset of queries; OpenICL seeds one stream once and draws on through the test set;
- the k most similar set orders its members most similar last, next to the query (OpenICL: first); drawn sets keep
  their drawn order, as OpenICL does;
- a task without label words (GSM8K, WMT19, AquaRAT generating) has no label distribution: the selector keeps the
  k most similar set (TopK) and says so on the result row;
- k is the run's k (theirs 8), the encoder the project's all-MiniLM-L6-v2 (theirs all-mpnet-base-v2), the scoring
  model the run's selection LLM (theirs GPT-2 XL).
Cost: `sets` x labels log-likelihood calls per test query. Past --llm-budget a query keeps the k most similar set.
"""
from __future__ import annotations

import random

import numpy as np
from scipy.special import softmax
from scipy.stats import entropy

from bench.errors import BudgetExhausted, ConfigError
from bench.items import Item
from methods.base import FitContext, register
from methods.retrieval_base import NearestCandidates


@register("mdl")
class MDL(NearestCandidates):
    level = "instance"
    table_group = "instance"
    needs_loglik = True

    def __init__(self, k: int = 5, candidates: int = 30, sets: int = 10):
        super().__init__(k)
        if candidates < k or sets < 1:
            raise ConfigError(f"mdl: candidates ({candidates}) must be at least k ({k}) and sets ({sets}) at least 1")
        self.candidates = candidates
        self.sets = sets

    def check_task(self, task) -> None:
        """Remembers the most labels of the run's tasks, for the dry run's call bound (no model loads here)."""
        labels = len(task.choice_words()) if task.scoring == "rank" else 0
        self.max_labels_ = max(getattr(self, "max_labels_", 0), labels)

    def fit(self, ctx: FitContext) -> "MDL":
        super().fit(ctx)
        self.ctx_ = ctx
        self.labels_ = list(ctx.task.choice_words()) if ctx.task.scoring == "rank" else []
        if not self.labels_:
            self.warn(f"mdl: task {ctx.task.name} has no label words to take an entropy over: the k most similar "
                      "set (TopK) is used")
        self.last_info_: dict = {}
        return self

    def candidate_sets(self, query: Item) -> list[list[Item]]:
        near = self.nearest(query, self.candidates)
        rng = random.Random(f"{self.ctx_.seed}:mdl:{query.id}")
        return [near[: self.k][::-1]] + [rng.sample(near, self.k) for _ in range(self.sets - 1)]

    def label_entropy(self, demos: list[Item], query: Item) -> float:
        prompt = self.ctx_.task.prefix(demos) + self.ctx_.task.format_query(query)
        space = "" if prompt[-1:].isspace() else " "
        scores = self.ctx_.oracle.loglik([prompt] * len(self.labels_), [space + y for y in self.labels_])
        return float(entropy(softmax(np.asarray(scores, dtype=float))))

    def select(self, query: Item) -> list[Item]:
        sets = self.candidate_sets(query)
        if not self.labels_:
            self.last_info_ = {"sets": 1}
            return sets[0]
        try:
            entropies = [self.label_entropy(s, query) for s in sets]
        except BudgetExhausted:  # --llm-budget spent: this query keeps the k most similar set, and the row says so
            self.warn("mdl: --llm-budget ran out; later queries use the k most similar set (TopK)")
            self.last_info_ = {"sets": len(sets), "budget_exhausted": True}
            return sets[0]
        best = int(np.argmin(entropies))  # the first on a tie, as OpenICL's argmax of -entropy
        self.last_info_ = {"sets": len(sets), "chosen_set": best, "entropy": entropies[best]}
        return sets[best]

    def select_info(self) -> dict:
        return dict(self.last_info_)

    def selection_call_bound(self, n_val: int, n_test: int) -> int | None:
        labels = len(self.labels_) if hasattr(self, "labels_") else getattr(self, "max_labels_", None)
        return None if labels is None else self.sets * labels * n_test

    def scale(self) -> dict:
        return {"candidates a query": self.candidates, "sets a query": self.sets,
                "authors' scale": "30 candidates, 10 sets, k 8, GPT-2 XL scoring"}
