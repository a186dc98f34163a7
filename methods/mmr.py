"""Maximal marginal relevance (Ye et al. 2023, "Complementary Explanations for Effective In-Context Learning").

Follows the MMR baseline of the EXPLORA repository (kiranpurohit/EXPLORA, GSM8K/MMR+SC.py), which the
DEARICL paper's authors ran:
- relevance: cosine of every pool item to the query, min-max scaled over the candidates and then mapped
  to 0.5 + z-score (the min-max step does not change a z-score, so it is folded away here);
- redundancy: cosine of every candidate to each chosen example, normalised the same way per chosen
  example (column-wise over the candidates);
- the first pick is the most similar item by raw cosine; every later pick maximises
  lam * relevance - (1 - lam) * max redundancy to the chosen ones, lam = 0.7;
- every pool item is a candidate; the prompt keeps the selection order (the most relevant first).

Deviations: embeddings are the project's encoder (all-MiniLM-L6-v2) rather than the authors' precomputed
ones (GSM8K/MMR+SC.py l.216-220 loads `pickle_test.pkl` and `pickle_tr.pkl`; their retrieval scripts embed
the `question` field with bert-base mean pooling, e.g. AquaRat/KNN+SC.py l.245/259). The text embedded
is the question alone, for pool items and query (`KNN.fit`: `encode_items(pool)`, no gold output), as
theirs; only AQuA-RAT's answer options are appended (the project's `item_text`, shared by every
retriever), which their data keeps in a separate `options` field. In their code the candidate-candidate
matrix keeps its diagonal when normalising (a mask is overwritten); computing only the chosen columns, as
here, gives the same columns.
`shortlist` (default: off) restricts candidates to the most relevant items, for speed on large pools.
"""
from __future__ import annotations

import numpy as np

from bench.errors import ConfigError
from bench.items import Item
from methods.base import register
from methods.knn import KNN


def centred(x: np.ndarray) -> np.ndarray:
    """0.5 + z-score along the candidate axis (axis 0), as the authors normalise similarities."""
    std = x.std(axis=0)
    return 0.5 + (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)


def mmr_order(query_sims: np.ndarray, embeddings: np.ndarray, k: int, lam: float) -> list[int]:
    """Indices of the k picks in selection order (EXPLORA's MMR: normalised similarities, raw-cosine first pick)."""
    relevance = centred(query_sims)
    chosen = [int(np.argmax(query_sims))]
    redundancy = centred(embeddings @ embeddings[chosen[0]])  # one normalised column per chosen example
    while len(chosen) < min(k, len(query_sims)):
        score = lam * relevance - (1 - lam) * redundancy
        score[chosen] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        redundancy = np.maximum(redundancy, centred(embeddings @ embeddings[best]))
    return chosen


@register("mmr")
class MMR(KNN):
    """Maximal marginal relevance with the EXPLORA repository's normalisation (lam = 1 is plain KNN)."""

    def __init__(self, k: int = 5, lam: float = 0.7, shortlist: int | None = None):
        super().__init__(k)
        if not 0.0 <= lam <= 1.0:
            raise ConfigError(f"mmr: lam must be in [0, 1], got {lam}")
        if shortlist is not None and shortlist < k:
            raise ConfigError(f"mmr: shortlist ({shortlist}) must be at least k ({k})")
        self.lam = lam
        self.shortlist = shortlist

    def select(self, query: Item) -> list[Item]:
        sims = self.query_similarities(query)
        short = np.argsort(-sims, kind="stable")[: self.shortlist] if self.shortlist else np.arange(len(sims))
        order = mmr_order(sims[short], self.pool_emb_[short], self.k, self.lam)
        return [self.pool_[short[i]] for i in order]
