"""Set-BSR (Gupta, Gardner and Singh, EMNLP Findings 2023, "Coverage-based Example Selection for In-Context
Learning"): the demonstrations that together cover the query's tokens best, by BERTScore-recall.

Follows the authors' selector (Shivanshu-Gupta/icl-coverage, src/selector/bertscore.py and src/selector/greedy.py,
the settings of their baseline experiments):
- every pool input and the query are embedded token by token, each token vector L2-normalised;
- a candidate z's recall of the query x: r(z)_l = max over z's tokens of <x_l, z_t>, for each query token l, weighted
  1/L (no idf, their setting); BSR(x, z) = sum_l r(z)_l;
- a set's recall takes, for each query token, its best match over the set's members: setBSR(x, Z) = sum_l
  max_{z in Z} r(z)_l, monotone submodular, so it is maximised greedily over the whole pool (no preselection): each
  step adds the candidate of largest setBSR; when none adds coverage the set vector is reset and the next pick is
  the best single candidate left (their reset branch);
- the chosen k are ordered by their own BSR, the highest last, next to the query (their `ordering="recall"`;
  `ordering="greedy"` puts the first greedy pick last, their default without it).

Deviations:
- token vectors come from the project's all-MiniLM-L6-v2 (its last layer), where the authors use bert_score's
  microsoft/deberta-large-mnli at layer 18: no DeBERTa is installable offline here;
- [CLS] and [SEP] are left out of both sides; the authors' code also drops each text's first real token (an
  empty-context slice, bertscore.py:36-39), a bug not in the paper;
- no prompt-length budget: the authors stop adding demonstrations when the prompt would pass the model's context;
  this suite's prompts of k demonstrations fit.
Cost: no LLM call; one token-level encoding of the pool at fit and of each query.
"""
from __future__ import annotations

import numpy as np

from bench.encoder import item_text
from bench.errors import ConfigError
from bench.items import Item
from methods.base import FitContext, Selector, register

ORDERINGS = ("recall", "greedy")


def recall_matrix(query: np.ndarray, candidates: list[np.ndarray]) -> np.ndarray:
    """[candidates, query tokens]: each query token's best cosine over a candidate's tokens, weighted 1/L."""
    lengths = np.array([len(c) for c in candidates])
    sims = query @ np.concatenate(candidates).T  # [L, all candidate tokens]
    best = np.maximum.reduceat(sims, np.concatenate([[0], np.cumsum(lengths)[:-1]]), axis=1)
    return best.T / len(query)


def greedy_cover(recall: np.ndarray, k: int) -> list[int]:
    """The authors' greedy maximisation of setBSR over rows of `recall`, with their reset when nothing adds
    coverage; the picks in greedy order."""
    chosen: list[int] = []
    set_vector = np.full(recall.shape[1], -np.inf)
    set_score = -np.inf
    while len(chosen) < min(k, len(recall)):
        cover = np.maximum(recall, set_vector)
        scores = cover.sum(axis=1)
        scores[chosen] = -np.inf
        best = int(np.argmax(scores))
        if scores[best] > set_score:
            chosen.append(best)
            set_vector, set_score = cover[best], scores[best]
        else:  # no candidate covers more: start a new set vector from the best single candidate left
            set_vector, set_score = np.full(recall.shape[1], -np.inf), -np.inf
    return chosen


@register("set-bsr")
class SetBSR(Selector):
    level = "instance"
    table_group = "instance"

    def __init__(self, k: int = 5, ordering: str = "recall"):
        super().__init__(k)
        if ordering not in ORDERINGS:
            raise ConfigError(f"set-bsr: ordering must be one of {', '.join(ORDERINGS)}, got {ordering!r}")
        self.ordering = ordering

    def fit(self, ctx: FitContext) -> "SetBSR":
        self.check_pool(ctx)
        self.pool_ = list(ctx.pool)
        self.encoder_ = ctx.encoder
        self.pool_tokens_ = ctx.encoder.token_embeddings([item_text(it) for it in self.pool_])
        return self

    def select(self, query: Item) -> list[Item]:
        tokens = self.encoder_.token_embeddings([item_text(query)])[0]
        recall = recall_matrix(tokens, self.pool_tokens_)
        picks = greedy_cover(recall, self.k)
        if self.ordering == "recall":
            picks = sorted(picks, key=lambda i: recall[i].sum())  # stable: ties keep the greedy order
        else:
            picks = picks[::-1]
        return [self.pool_[i] for i in picks]

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return 0

    def scale(self) -> dict:
        return {"pool searched": len(getattr(self, "pool_", [])),
                "authors' scale": "the whole train split, DeBERTa-large-MNLI tokens, k 8"}
