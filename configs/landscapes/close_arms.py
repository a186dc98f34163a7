"""A custom `bench simulate --env custom` landscape with close arms and an exact truth (issue 57's judged case).

Per-query difficulty dominates: a query's base accuracy spans about 0.1-0.9 (a fixed direction of the embedding),
while the arms differ by a few points (an arm effect of at most +-0.04 from its demonstrations' mean embedding,
plus a smaller query-dependent relevance term). A reward is one 0/1 answer, Bernoulli(expected), as accuracy is.
`expected` is the noise-free mean, so the simulator's truth is exact (truth_se 0) and eps-error is judged against
the very quantity the bandits estimate.
"""
import numpy as np

_DIRECTIONS = np.random.default_rng(57).normal(size=(3, 384))  # difficulty, arm quality, relevance (MiniLM: 384)
_DIRECTIONS /= np.linalg.norm(_DIRECTIONS, axis=1, keepdims=True)


def expected(query_embedding, demo_embeddings):
    q, mean = np.asarray(query_embedding), np.asarray(demo_embeddings).mean(axis=0)
    scale = np.sqrt(len(q))  # a unit vector's coordinate along a random direction is ~N(0, 1/d)
    base = 1.0 / (1.0 + np.exp(-2.0 * scale * float(q @ _DIRECTIONS[0])))  # the query's difficulty
    quality = 0.03 * np.tanh(2.0 * scale * float(mean @ _DIRECTIONS[1]))  # the arm's own few points
    relevance = 0.01 * np.tanh(scale * float((q * mean) @ _DIRECTIONS[2]) * scale)  # which arm suits which query
    return float(np.clip(base + quality + relevance, 0.02, 0.98))


def reward(query_embedding, demo_embeddings, rng):
    return float(rng.random() < expected(query_embedding, demo_embeddings))
