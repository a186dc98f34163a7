"""Ablation: the DEARICL ranker trained only on the initial random arms (no adaptive sampling)."""
from __future__ import annotations

import numpy as np

from dearicl.selection import prepare
from methods.base import FitContext, register
from methods.dearicl_dynamic import DearIclDynamic


@register("dearicl-noexplore")
class DearIclNoExplore(DearIclDynamic):
    def __init__(self, k: int = 5, initial_arms: int = 20, train_rounds: int = 25, **bandit):
        super().__init__(k, **bandit)
        self.initial_arms, self.train_rounds = initial_arms, train_rounds

    def fit(self, ctx: FitContext) -> "DearIclNoExplore":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        self.surrogate_ = self.neural_surrogate(prep, ctx.seed)
        # the cold start only: M random arms, pulled once, then as many updates as a bandit run would do
        result = self.run_bandit(ctx, prep, self.surrogate_, cold_start=min(self.initial_arms, len(prep.arms)),
                                 max_pulls=min(self.initial_arms, len(prep.arms)))
        for _ in range(self.train_rounds):
            self.surrogate_.update()
        self.candidates_ = np.arange(len(prep.arms))  # no exploration trace: rank every arm
        self.encoder_ = ctx.encoder
        return self
