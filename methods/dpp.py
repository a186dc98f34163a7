"""DPP retrieval: a k-DPP over relevance x diversity among the query's nearest pool items (OpenICL's
`DPPRetriever`; the inference step of CEIL, Ye et al. 2023).

Follows OpenICL (openicl/icl_retriever/icl_dpp_retriever.py) and CEIL (HKUNLP/icl-ceil, src/utils/dpp_map.py and
its DPP retriever):
- the `candidates` pool items most similar to the query (cosine of L2-normalised embeddings) are the ground set;
- relevance r_i = exp(((cos(q, x_i) + 1) / 2 - max) / (2 * scale_factor)) (the max subtracted against overflow, as
  CEIL; it rescales every r_i by one constant and leaves the selection unchanged), similarity
  S_ij = (cos(x_i, x_j) + 1) / 2, kernel L = diag(r) S diag(r): a small scale_factor favours relevance;
- the k members are the greedy MAP of the k-DPP (Chen et al. 2018, "Fast greedy MAP inference for DPP"), CEIL's
  inference, ordered by relevance.

Deviations:
- OpenICL draws an exact k-DPP sample (dppy, a fixed seed) where CEIL and this module take the greedy MAP: one
  deterministic selection, no sampling noise between runs;
- the greedy MAP is written here (a dozen lines of incremental Cholesky), as no maintained library provides it;
- the most relevant member goes last, next to the query (OpenICL and CEIL list it first), as every retriever here;
- the embedder is the project's encoder (all-MiniLM-L6-v2) over the input, where OpenICL defaults to
  all-mpnet-base-v2 and CEIL uses its own trained retriever (this is its untrained "DPP" baseline).
"""
from __future__ import annotations

import numpy as np

from bench.errors import ConfigError
from bench.items import Item
from methods.base import register
from methods.knn import KNN


def dpp_kernel(query_sims: np.ndarray, candidate_emb: np.ndarray, scale_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """(relevance, L): OpenICL's and CEIL's kernel over the candidates."""
    relevance = (query_sims + 1.0) / 2.0
    relevance = np.exp((relevance - relevance.max()) / (2.0 * scale_factor))
    similarity = (candidate_emb @ candidate_emb.T + 1.0) / 2.0
    return relevance, relevance[None, :] * similarity * relevance[:, None]


def greedy_map(kernel: np.ndarray, k: int) -> list[int]:
    """Greedy MAP of a DPP (Chen et al. 2018): each step adds the item with the largest gain in log det L_S,
    tracked by incremental Cholesky rows; stops early once no item adds volume."""
    n = len(kernel)
    rows = np.zeros((k, n))
    gains = np.diag(kernel).astype(np.float64).copy()  # d_i^2: det(L_{S+i}) / det(L_S)
    chosen = [int(np.argmax(gains))]
    while len(chosen) < min(k, n):
        j, step = chosen[-1], len(chosen) - 1
        e = (kernel[j] - rows[:step, j] @ rows[:step]) / np.sqrt(max(gains[j], 1e-20))
        rows[step] = e
        gains = gains - e ** 2
        gains[chosen] = -np.inf
        nxt = int(np.argmax(gains))
        if gains[nxt] <= 1e-12:  # the kernel's rank is spent: no further item adds volume
            break
        chosen.append(nxt)
    return chosen


def map_with_fill(kernel: np.ndarray, k: int) -> list[int]:
    """The greedy MAP's k members; a degenerate kernel (duplicates) is filled with the first others, which are the
    most relevant where the ground set is ordered by relevance."""
    chosen = greedy_map(kernel, k)
    return chosen + [i for i in range(len(kernel)) if i not in chosen][: k - len(chosen)]


@register("dpp")
class DPP(KNN):
    table_group = "retrieval"

    def __init__(self, k: int = 5, candidates: int = 100, scale_factor: float = 0.1):
        super().__init__(k)
        if candidates < k:
            raise ConfigError(f"dpp: candidates ({candidates}) must be at least k ({k})")
        if scale_factor <= 0:
            raise ConfigError(f"dpp: scale_factor must be > 0, got {scale_factor}")
        self.candidates, self.scale_factor = candidates, scale_factor

    def select(self, query: Item) -> list[Item]:
        sims = self.query_similarities(query)
        near = np.argsort(-sims, kind="stable")[: self.candidates]
        relevance, kernel = dpp_kernel(sims[near], self.pool_emb_[near], self.scale_factor)
        chosen = map_with_fill(kernel, self.k)
        chosen.sort(key=lambda i: (relevance[i], -i))  # the most relevant last, next to the query
        return [self.pool_[near[i]] for i in chosen]

    def scale(self) -> dict:
        return {"candidates a query": self.candidates}
