"""DEARICL_dynamic: the trained surrogate ranks every arm seen in some U_t or C_t, per test query."""
from __future__ import annotations

import numpy as np

from bench.items import Item
from dearicl.selection import BanditSelector, prepare
from methods.base import FitContext, register


@register("dearicl-dynamic")
class DearIclDynamic(BanditSelector):
    level = "instance"

    def fit(self, ctx: FitContext) -> "DearIclDynamic":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        self.surrogate_ = self.neural_surrogate(prep, ctx.seed)
        result = self.run_bandit(ctx, prep, self.surrogate_)
        self.candidates_ = np.array(self.candidate_arms(result))
        self.encoder_ = ctx.encoder
        return self

    def candidate_arms(self, result) -> list[int]:
        return result.seen

    def select(self, query: Item) -> list[Item]:
        scores = self.surrogate_.rank_scores(self.encoder_.encode_items([query])[0], self.candidates_)
        return self.demos_of(int(self.candidates_[int(np.argmax(scores))]))
