"""Vote-k (Su et al. 2022, "Selective Annotation Makes Language Models Better Few-Shot Learners"): graph-based
selective annotation of a small, diverse and representative subset of the pool, then retrieval from it.

Follows the authors' fast vote-k (xlang-ai/icl-selective-annotation, two_steps.py `fast_votek`):
- the graph: every pool item votes for its `neighbours` (150) nearest items by cosine of their embeddings;
- greedy selection of `annotation_budget` items: an item's score is the sum, over its voters not yet selected, of
  10^-(times that voter already voted for a selected item), so that a region already covered counts less; the
  top score is selected and its voters' counts go up;
- prompt retrieval: each query's `k` most similar items of the annotated set (the paper's similarity-based retrieval).

Deviations:
- the inputs are embedded with the project's encoder (all-MiniLM-L6-v2, input only) and are not mean-centred (the
  authors centre all-mpnet-base-v2 embeddings before cosine; centring changes which items are nearest);
- only fast vote-k: the paper's full vote-k fills 9/10 of the budget by the LM's confidence strata, which needs LM
  calls on every pool item; fast vote-k is the variant its authors report to perform on par at a fraction of the
  cost;
- OpenICL's `VotekRetriever` uses the vote counts alone (no 10^-t discount) and shows the same `k` items to every
  query; here the authors' algorithm and per-query retrieval;
- scores are compared after rounding to 1e-9: sums of 10^-t that tie exactly are otherwise ordered by float summation
  order (which the authors' code leaves to chance);
- the most similar annotated item goes last, next to the query.
"""
from __future__ import annotations

import numpy as np

from bench.errors import ConfigError
from bench.items import Item
from methods.base import FitContext, register
from methods.knn import KNN


def vote_graph(embeddings: np.ndarray, neighbours: int) -> tuple[list[np.ndarray], list[int]]:
    """voters[u]: the items that have u among their `neighbours` nearest (themselves excluded); and the authors' order
    of the voted items, by votes (most first), then by when they were first voted for (each voter's neighbours
    in increasing similarity, as their argsort lists them): their selection breaks ties by it."""
    sims = embeddings @ embeddings.T
    np.fill_diagonal(sims, -np.inf)
    nearest = np.argsort(-sims, axis=1, kind="stable")[:, :neighbours]
    voters: list[list[int]] = [[] for _ in range(len(embeddings))]
    first_voted: dict[int, None] = {}
    for voter, row in enumerate(nearest):
        for u in row[::-1]:
            voters[int(u)].append(voter)
            first_voted.setdefault(int(u), None)
    order = sorted(first_voted, key=lambda u: -len(voters[u]))  # stable: first-voted among equal counts
    return [np.asarray(v, dtype=np.int64) for v in voters], order


def fast_votek(voters: list[np.ndarray], order: list[int], budget: int) -> list[int]:
    """The authors' greedy selection over the voted items: a voter's weight is 10^-(selected items it voted for);
    the first in `order` wins a tie."""
    times = np.zeros(len(voters))
    taken = np.zeros(len(voters), dtype=bool)
    selected: list[int] = []
    while len(selected) < min(budget, len(order)):
        scores = [-np.inf if taken[u] else float((10.0 ** -times[voters[u][~taken[voters[u]]]]).sum()) for u in order]
        best = order[int(np.argmax(np.round(scores, 9)))]  # the first maximum; sums of 10^-t tie up to rounding
        selected.append(best)
        taken[best] = True
        times[voters[best]] += 1
    return selected


@register("votek")
class VoteK(KNN):
    table_group = "retrieval"

    def __init__(self, k: int = 5, annotation_budget: int = 100, neighbours: int = 150):
        super().__init__(k)
        if annotation_budget < k:
            raise ConfigError(f"votek: annotation_budget ({annotation_budget}) must be at least k ({k})")
        if neighbours < 1:
            raise ConfigError(f"votek: neighbours must be >= 1, got {neighbours}")
        self.annotation_budget, self.neighbours = annotation_budget, neighbours

    def fit(self, ctx: FitContext) -> "VoteK":
        super().fit(ctx)
        self.neighbours_ = min(self.neighbours, len(self.pool_) - 1)  # a small pool: everyone votes for everyone
        voters, order = vote_graph(self.pool_emb_, self.neighbours_)
        self.annotated_ = fast_votek(voters, order, self.annotation_budget)
        if len(self.annotated_) < self.k:
            raise ConfigError(f"votek: only {len(self.annotated_)} pool items were voted for, fewer than k ({self.k})")
        return self

    def select(self, query: Item) -> list[Item]:
        sims = self.query_similarities(query)[self.annotated_]
        top = np.argsort(-sims, kind="stable")[: self.k]
        return [self.pool_[self.annotated_[i]] for i in top[::-1]]

    def scale(self) -> dict:
        return {"annotated": len(getattr(self, "annotated_", [])), "neighbours": getattr(self, "neighbours_", self.neighbours)}
