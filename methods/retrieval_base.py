"""Shared machinery of the selectors that re-rank the query's nearest pool items with the LLM (TopK+ConE, MDL)."""
from __future__ import annotations

import numpy as np

from bench.items import Item
from methods.knn import KNN


class NearestCandidates(KNN):
    """KNN's fit and similarities, plus the query's n nearest pool items as candidates."""

    def nearest(self, query: Item, n: int) -> list[Item]:
        """The n pool items most similar to the query, most similar first (ties in pool order)."""
        return [self.pool_[i] for i in np.argsort(-self.query_similarities(query), kind="stable")[:n]]
