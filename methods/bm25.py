"""BM25 retrieval, the field's lexical baseline (OpenICL's `BM25Retriever`; the baseline of the CEIL and UDR papers).

Follows OpenICL (Shark-NLP/OpenICL, openicl/icl_retriever/icl_bm25_retriever.py): Okapi BM25 (rank-bm25's
`BM25Okapi`, default k1 = 1.5, b = 0.75) indexes the input field of every pool item; a query's input is scored
against it and the `k` highest-scoring items are its demonstrations.

Deviations:
- tokens are lowercase `\\w+` runs, where OpenICL uses nltk's `word_tokenize` (its punkt models cannot be fetched
  offline; case-folding also lets "What" match "what");
- OpenICL puts the best-scoring item first; here it is last, next to the query, as every retriever of this zoo
  orders its demonstrations (knn, udr);
- items whose question repeats the query's text are not removed (OpenICL does not either); test items never enter the
  pool, so a test query cannot retrieve itself.
"""
from __future__ import annotations

import re

import numpy as np
from rank_bm25 import BM25Okapi

from bench.encoder import item_text
from bench.items import Item
from methods.base import FitContext, Selector, register

WORD = re.compile(r"\w+")


def bm25_tokens(text: str) -> list[str]:
    return WORD.findall(text.lower())


@register("bm25")
class BM25(Selector):
    level = "instance"
    table_group = "retrieval"

    def fit(self, ctx: FitContext) -> "BM25":
        self.check_pool(ctx)
        self.pool_ = list(ctx.pool)
        self.index_ = BM25Okapi([bm25_tokens(item_text(it)) for it in self.pool_])  # the input field, as OpenICL
        return self

    def scores(self, query: Item) -> np.ndarray:
        return self.index_.get_scores(bm25_tokens(item_text(query)))

    def select(self, query: Item) -> list[Item]:
        top = np.argsort(-self.scores(query), kind="stable")[: self.k]
        return [self.pool_[i] for i in top[::-1]]  # the best match last, next to the query

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return 0  # no LLM call before inference
