"""Maximal marginal relevance (Ye et al. 2023): relevance to the query traded against redundancy."""
from __future__ import annotations

import numpy as np

from bench.errors import ConfigError
from bench.items import Item
from methods.base import register
from methods.knn import KNN


def mmr_order(query_sims: np.ndarray, pair_sims: np.ndarray, k: int, lam: float) -> list[int]:
    """Greedy MMR: argmax lam * sim(q, d) - (1 - lam) * max_{s in chosen} sim(d, s)."""
    chosen: list[int] = []
    candidates = np.ones(len(query_sims), dtype=bool)
    for _ in range(min(k, len(query_sims))):
        redundancy = pair_sims[:, chosen].max(axis=1) if chosen else np.zeros(len(query_sims))
        score = lam * query_sims - (1 - lam) * redundancy
        score[~candidates] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        candidates[best] = False
    return chosen


@register("mmr")
class MMR(KNN):
    """Maximal marginal relevance over the KNN shortlist (lam = 1 is plain KNN)."""

    def __init__(self, k: int = 5, lam: float = 0.5, shortlist: int = 100):
        super().__init__(k)
        if not 0.0 <= lam <= 1.0:
            raise ConfigError(f"mmr: lam must be in [0, 1], got {lam}")
        self.lam = lam
        self.shortlist = shortlist

    def select(self, query: Item) -> list[Item]:
        sims = self.query_similarities(query)
        # MMR over the most relevant shortlist only: redundancy among far items does not matter.
        short = np.argsort(-sims, kind="stable")[: max(self.shortlist, self.k)]
        emb = self.pool_emb_[short]
        order = mmr_order(sims[short], emb @ emb.T, self.k, self.lam)
        return [self.pool_[short[i]] for i in order[::-1]]
