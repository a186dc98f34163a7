"""Arms: k-subsets of the pool, one example per KMeans cluster (the paper's and CASE's construction)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

from bench.errors import ConfigError


@dataclass(frozen=True)
class ArmSet:
    members: np.ndarray  # [n_arms, k] pool indices; slot j holds the example drawn from cluster j
    clusters: np.ndarray  # [n_pool] cluster label of each pool item

    def __len__(self) -> int:
        return len(self.members)


def cluster_labels(pool_embeddings: np.ndarray, k: int, seed: int) -> np.ndarray:
    n_pool = len(pool_embeddings)
    if n_pool < k:
        raise ConfigError(f"arms need at least k={k} pool items, the pool has {n_pool}")
    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(pool_embeddings)


def build_arms(pool_embeddings: np.ndarray, n_arms: int, k: int, seed: int, labels: np.ndarray | None = None) -> ArmSet:
    """KMeans into k clusters (or the given labels), then n_arms distinct subsets with one random member per cluster.

    Examples are drawn with replacement across arms (an example can sit in many arms).
    """
    if labels is None:
        labels = cluster_labels(pool_embeddings, k, seed)
    by_cluster = [np.flatnonzero(labels == c) for c in range(k)]
    combos = int(np.prod([len(c) for c in by_cluster], dtype=float))
    target = min(n_arms, combos)
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, ...]] = set()
    arms = []
    while len(arms) < target:
        arm = tuple(int(rng.choice(c)) for c in by_cluster)
        if arm not in seen:
            seen.add(arm)
            arms.append(arm)
    return ArmSet(members=np.array(arms, dtype=np.int64), clusters=labels)


def slot_similarity_features(arms: ArmSet, pool_embeddings: np.ndarray, references: np.ndarray) -> np.ndarray:
    """CASE's arm features: slot j = mean cosine between the arm's j-th example and the references.

    references: validation items (task level) or the single test query (case-dynamic). [n_arms, k].
    """
    sims = pool_embeddings @ references.T  # embeddings are L2-normalised: cosine
    per_item = sims.mean(axis=1)  # [n_pool]
    return per_item[arms.members]


def arm_embeddings(arms: ArmSet, demo_embeddings: np.ndarray) -> np.ndarray:
    """Mean of H(v; w) over the arm's examples: DEARICL's arm half of x_a(v). [n_arms, d]."""
    return demo_embeddings[arms.members].mean(axis=1)
