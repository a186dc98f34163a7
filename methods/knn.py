"""KNN retrieval (Rubin et al. 2022 style): the k pool items most similar to the query."""
from __future__ import annotations

import numpy as np

from bench.items import Item
from methods.base import FitContext, Selector, register


@register("knn")
class KNN(Selector):
    level = "instance"

    def fit(self, ctx: FitContext) -> "KNN":
        self.check_pool(ctx)
        self.pool_ = list(ctx.pool)
        self.encoder_ = ctx.encoder
        self.pool_emb_ = ctx.encoder.encode_items(self.pool_)
        return self

    def query_similarities(self, query: Item) -> np.ndarray:
        """Cosine similarity of the query to every pool item (embeddings are L2-normalised)."""
        return self.pool_emb_ @ self.encoder_.encode_items([query])[0]

    def select(self, query: Item) -> list[Item]:
        sims = self.query_similarities(query)
        top = np.argsort(-sims, kind="stable")[: self.k]
        # Most similar last, next to the query.
        return [self.pool_[i] for i in top[::-1]]

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return 0  # no LLM call before inference
