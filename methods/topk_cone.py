"""TopK+ConE (Peng et al., ACL 2024, "Revisiting Demonstration Selection Strategies in In-Context Learning"): the
query's most similar pool items re-ranked by the model's conditional entropy of the query given each one.

Follows the authors' retriever (Romainpkq/revisit_demon_selection_in_ICL, openicl/icl_retriever/
icl_cone_retriever.py, their exp/run.py settings):
- the `candidates` pool items most similar to the query (their candidate_num 30, by sentence-embedding cosine);
- each candidate alone, as a one-shot prompt with its gold output, is scored by the selection LLM's summed
  cross-entropy of the templated query ("Review: x Sentiment:"): ConE(c) = -log p(query | c); lower is better (the
  query is fixed, so minimising it minimises H(x | c));
- the k candidates with the lowest ConE, ties kept in similarity order.

Deviations:
- the query's every token is scored; the authors' mask is shifted by one (it skips the query's first token and
  scores the first token of a placeholder label after it), a bug that the paper's text does not describe;
- the lowest-ConE demonstration goes last, next to the query (the authors put it first); every selector here puts
  its best demonstration last;
- k is the run's k (the authors' ice_num 8; this suite 5), the encoder the project's all-MiniLM-L6-v2 over the input
  (theirs all-mpnet-base-v2), the scoring model the run's selection LLM (theirs the inference model, Llama-2-7B).
Cost: `candidates` log-likelihood calls per test query (cached). Past --llm-budget a query keeps the k most
similar (TopK), and the result row says so.
"""
from __future__ import annotations

import numpy as np

from bench.errors import BudgetExhausted, ConfigError
from bench.items import Item
from methods.base import FitContext, register
from methods.retrieval_base import NearestCandidates


@register("topk-cone")
class TopKConE(NearestCandidates):
    level = "instance"
    table_group = "instance"
    needs_loglik = True

    def __init__(self, k: int = 5, candidates: int = 30):
        super().__init__(k)
        if candidates < k:
            raise ConfigError(f"topk-cone: candidates ({candidates}) must be at least k ({k})")
        self.candidates = candidates

    def fit(self, ctx: FitContext) -> "TopKConE":
        super().fit(ctx)
        self.ctx_ = ctx
        self.last_info_: dict = {}
        return self

    def cone(self, candidates: list[Item], query: Item) -> np.ndarray:
        """-log p(query | one candidate as the prompt's only demonstration), per candidate."""
        task = self.ctx_.task
        contexts = [task.prefix([c]) for c in candidates]
        return -np.asarray(self.ctx_.oracle.loglik(contexts, [task.format_query(query)] * len(candidates)), dtype=float)

    def select(self, query: Item) -> list[Item]:
        candidates = self.nearest(query, self.candidates)
        try:
            scores = self.cone(candidates, query)
        except BudgetExhausted:  # --llm-budget spent: this query keeps the k most similar (TopK), and the row says so
            self.warn("topk-cone: --llm-budget ran out; later queries use the k most similar (TopK)")
            self.last_info_ = {"candidates": len(candidates), "budget_exhausted": True}
            return candidates[: self.k][::-1]
        best = np.argsort(scores, kind="stable")[: self.k]  # ties: the more similar first
        self.last_info_ = {"candidates": len(candidates), "cone_best": float(scores[best[0]])}
        return [candidates[i] for i in best[::-1]]  # the lowest ConE last, next to the query

    def select_info(self) -> dict:
        return dict(self.last_info_)

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return self.candidates * n_test

    def scale(self) -> dict:
        return {"candidates a query": self.candidates, "authors' scale": "30 candidates, k 8, Llama-2-7B scoring"}
